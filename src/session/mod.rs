//! Sessions: the in-memory registry the HTTP and panel layers read, with
//! the id rules and the launch spec (`spec`: normalized and validated,
//! pure). A session is shown through its typed view (`view.rs`), which
//! each front-end renders into its own wire.
//!
//! The registry is plain data behind the hub's mutex; nothing here does I/O.
//! The worker link's state (identity, statistics, capabilities, runs and
//! request outcomes) is private and changes only through the transitions
//! in `link`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::Value;

use crate::supervisor::process::{LogCounters, ProcessInfo, ProcessView};
use crate::transcript::Transcript;
use crate::util::bounded_writer::BoundedWriter;
use crate::util::log_ring::LogRing;
use crate::wire::worker::confirm_frames::ConfirmationRequest;
use crate::wire::worker::display;
use crate::wire::worker::plan::PlanRecord;
use crate::ws::FrameWriter;

mod grants;
pub mod headless;
mod hooks;
mod link;
mod process;
mod prompts;
mod publisher;
mod send;
mod sessions;
mod spec;
#[cfg(test)]
mod testkit;
mod view;

pub use grants::{key_of as grant_key, Grant, MAX_GRANTS};
pub use hooks::{Followup, NoHooks, WorkerHooks};
pub use process::{NoStop, StartRefused};
pub use prompts::{ClosedPrompt, DecideError, NewPrompt, NotOpened, PromptEnd, PromptStep};
pub use publisher::{Note, Publisher};
pub use send::SendError;
pub use sessions::Sessions;
pub use spec::{
    check_new_id, is_valid_id, normalize_spec, SpecDefaults, SpecError, MODALITY_ASSIST_ENTRY,
};
pub use view::{IdentityView, PromptView, SessionView};

/// Log ring bounds before the configuration applies its own.
const DEFAULT_LOG_CAPS: (usize, usize) = (500, 256 * 1024);

/// What the hub knows about a session's worker identity on its event
/// connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdentityState {
    Unknown,
    Live,
    Stale,
}

impl IdentityState {
    pub fn as_str(self) -> &'static str {
        match self {
            IdentityState::Unknown => "unknown",
            IdentityState::Live => "live",
            IdentityState::Stale => "stale",
        }
    }
}

/// Event-connection statistics shown in the description.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub events: u64,
    pub gaps: u64,
    pub duplicates: u64,
    pub protocol_errors: u64,
    pub incarnations: u64,
}

/// The current event connection of a session.
#[derive(Debug, Clone)]
pub struct WorkerLink {
    pub conn_id: u64,
    pub writer: Arc<FrameWriter>,
}

/// Outcome of a payload the hub sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestState {
    Sent,
    Admitted,
    Rejected,
    Unknown,
}

impl RequestState {
    pub fn as_str(self) -> &'static str {
        match self {
            RequestState::Sent => "sent",
            RequestState::Admitted => "admitted",
            RequestState::Rejected => "rejected",
            RequestState::Unknown => "unknown",
        }
    }
}

/// Most recent payload outcomes kept per session.
pub const MAX_REQUESTS: usize = 200;

/// One payload the hub sent, and what became of it.
#[derive(Debug, Clone)]
pub struct RequestRecord {
    pub request_id: String,
    pub operation: String,
    pub state: RequestState,
    pub sent_at: String,
    pub updated_at: String,
    /// The worker's diagnostic for a rejection.
    pub detail: Option<Value>,
}

impl RequestRecord {
    /// The outcome in words: the worker's rejection message (else its
    /// code), or why the outcome is unknown; empty otherwise.
    pub fn detail_text(&self) -> &str {
        match (self.state, &self.detail) {
            (_, Some(data)) => data
                .get("message")
                .and_then(Value::as_str)
                .or_else(|| data.get("code").and_then(Value::as_str))
                .unwrap_or("the worker rejected the input"),
            (RequestState::Unknown, None) => {
                "the event connection closed before the worker admitted or rejected it"
            }
            _ => "",
        }
    }
}

/// Lifecycle of a confirmation prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptState {
    AwaitingIdentity,
    AwaitingDecision,
    Decided,
}

impl PromptState {
    pub fn as_str(self) -> &'static str {
        match self {
            PromptState::AwaitingIdentity => "awaiting-identity",
            PromptState::AwaitingDecision => "awaiting-decision",
            PromptState::Decided => "decided",
        }
    }
}

/// Largest encoded argument preview in a single prompt description.
pub const PROMPT_PREVIEW_BYTES: usize = 64 * 1024;

/// Smallest preview budget an aggregate allocation hands out (a marker
/// always fits).
pub const MIN_PREVIEW_BYTES: usize = 64;

/// An open confirmation prompt. Retired prompts are removed from the
/// session; their last description is what panels were told.
#[derive(Debug, Clone)]
pub struct Prompt {
    pub conn_id: u64,
    pub request: ConfirmationRequest,
    pub state: PromptState,
    pub verified: bool,
    pub identity_state: IdentityState,
    pub received_at: String,
    pub deadline_at: String,
    pub settled_at: Option<String>,
    pub decision: Option<bool>,
    pub reason: Option<String>,
    pub writer: Arc<FrameWriter>,
}

/// One session as the hub holds it in memory.
#[derive(Debug)]
pub struct Session {
    id: String,
    created_at: String,
    spec: Value,
    /// Per-session worker token; only worker routes accept it.
    token: String,
    lifecycle_id: String,
    kind: String,
    /// Set while a delete is in progress; the session is busy meanwhile.
    removing: bool,
    /// Set while a configuration snapshot is being replaced; no start and
    /// no delete meanwhile.
    reconfiguring: bool,
    link: Option<WorkerLink>,
    identity: IdentityState,
    worker_id: Option<String>,
    identity_since: Option<String>,
    /// From the latest `ready`/`status` of the current connection.
    capabilities: Option<Vec<String>>,
    /// The latest `status` event data of the current connection.
    status: Option<Value>,
    stats: Stats,
    /// Worker events per second, for the health view (`meter_event`).
    event_rate: crate::util::rate::Meter,
    /// `(worker_id, sequence)` of the last envelope, for gap/duplicate counts.
    last_sequence: Option<(String, u64)>,
    last_run_id: Option<String>,
    /// The run the worker is executing: set by `run_started` or
    /// `input_admitted` with its run id, cleared by `run_finished` for it
    /// (and by a new worker incarnation). Remote tools that change state
    /// require the caller's run to be this one.
    active_run: Option<String>,
    last_event_at: Option<String>,
    last_event: Option<String>,
    requests: VecDeque<RequestRecord>,
    prompts: Vec<Prompt>,
    transcript: Transcript,
    /// `<session dir>/events.jsonl`, best effort.
    events_file: Option<Arc<BoundedWriter>>,
    /// The worker process, once one was started or adopted.
    process: Option<ProcessInfo>,
    /// Captured worker output of the current process.
    logs: LogRing,
    /// `(lines, bytes)` bounds of `logs`.
    log_caps: (usize, usize),
    /// `logs/worker.log` of the current process, best effort.
    log_file: Option<Arc<BoundedWriter>>,
    /// The published plan, cached from the store so subscriptions read it
    /// under the same lock that orders them against `plan` broadcasts.
    plan: PlanRecord,
    /// Set for a headless child (`kind: "headless"`).
    subagent: Option<Box<headless::Child>>,
    /// The confirmation mode (`ask`, `approve`, `deny`) the hub sends with
    /// inputs that name none; `None` until a client chose one
    /// (`link.rs`: `set_mode`).
    mode: Option<String>,
    /// Stop the worker once its active run finishes (`link.rs`:
    /// `defer_stop`, `take_due_stop`); cleared by a new start.
    stop_after_run: bool,
    /// The exact calls its requests are allowed for without asking
    /// (`grants.rs`).
    grants: Vec<Grant>,
}

/// Read access to the worker link's state; it changes only through the
/// transitions in `link.rs` (and `push_request` for a sent payload).
impl Session {
    /// The current event connection.
    pub fn link(&self) -> Option<&WorkerLink> {
        self.link.as_ref()
    }

    pub fn identity(&self) -> IdentityState {
        self.identity
    }

    /// The worker id of the newest incarnation seen.
    pub fn worker_id(&self) -> Option<&str> {
        self.worker_id.as_deref()
    }

    /// From the latest `ready`/`status` of the current connection.
    pub fn capabilities(&self) -> Option<&[String]> {
        self.capabilities.as_deref()
    }

    /// Whether the current connection advertised `capability`.
    pub fn has_capability(&self, capability: &str) -> bool {
        self.capabilities
            .as_ref()
            .is_some_and(|c| c.iter().any(|x| x == capability))
    }

    /// The latest `status` event data of the current connection.
    #[cfg(test)]
    pub fn status(&self) -> Option<&Value> {
        self.status.as_ref()
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The run most recently named by an envelope.
    pub fn last_run_id(&self) -> Option<&str> {
        self.last_run_id.as_deref()
    }

    /// The run the worker is executing: set by `run_started` or
    /// `input_admitted` with its run id, cleared by `run_finished` for it
    /// (and by a new worker incarnation).
    pub fn active_run(&self) -> Option<&str> {
        self.active_run.as_deref()
    }

    pub fn last_event_at(&self) -> Option<&str> {
        self.last_event_at.as_deref()
    }

    /// The type of the latest event.
    pub fn last_event(&self) -> Option<&str> {
        self.last_event.as_deref()
    }

    /// When the current identity state began.
    pub fn identity_since(&self) -> Option<&str> {
        self.identity_since.as_deref()
    }

    /// The most recent payload outcomes, oldest first.
    pub fn requests(&self) -> impl Iterator<Item = &RequestRecord> {
        self.requests.iter()
    }

    /// Drops the record of a payload whose write failed (it was never
    /// sent, so it has no outcome).
    pub fn forget_request(&mut self, request_id: &str) {
        self.requests.retain(|r| r.request_id != request_id);
    }
}

impl Session {
    pub fn new(
        id: String,
        created_at: String,
        spec: Value,
        token: String,
        lifecycle_id: String,
        transcript: Transcript,
    ) -> Session {
        Session {
            id,
            created_at,
            spec,
            token,
            lifecycle_id,
            kind: "ordinary".into(),
            removing: false,
            reconfiguring: false,
            link: None,
            identity: IdentityState::Unknown,
            worker_id: None,
            identity_since: None,
            capabilities: None,
            status: None,
            stats: Stats::default(),
            event_rate: Default::default(),
            last_sequence: None,
            last_run_id: None,
            active_run: None,
            last_event_at: None,
            last_event: None,
            requests: VecDeque::new(),
            prompts: Vec::new(),
            transcript,
            events_file: None,
            process: None,
            logs: LogRing::new(DEFAULT_LOG_CAPS.0, DEFAULT_LOG_CAPS.1),
            log_caps: DEFAULT_LOG_CAPS,
            log_file: None,
            plan: PlanRecord::default(),
            subagent: None,
            mode: None,
            stop_after_run: false,
            grants: Vec::new(),
        }
    }

    /// The session's `kind` (`ordinary` unless set here at creation).
    pub fn with_kind(mut self, kind: String) -> Session {
        self.kind = kind;
        self
    }

    /// The events file that retained events are appended to.
    pub fn with_events_file(mut self, file: Option<Arc<BoundedWriter>>) -> Session {
        self.events_file = file;
        self
    }

    /// The published plan read from the store at load.
    pub fn with_plan(mut self, plan: PlanRecord) -> Session {
        self.plan = plan;
        self
    }

    /// Makes this the record of a headless child (at fork or restore).
    pub fn attach_headless(&mut self, child: headless::Child) {
        self.subagent = Some(Box::new(child));
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// When the session was created (RFC 3339).
    pub fn created_at(&self) -> &str {
        &self.created_at
    }

    /// The normalized spec.
    pub fn spec(&self) -> &Value {
        &self.spec
    }

    /// Per-session worker token; only worker routes accept it.
    pub fn token(&self) -> &str {
        &self.token
    }

    pub fn lifecycle_id(&self) -> &str {
        &self.lifecycle_id
    }

    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The retained event transcript.
    pub fn transcript(&self) -> &Transcript {
        &self.transcript
    }

    /// `<session dir>/events.jsonl`, when this session keeps one.
    pub fn events_file(&self) -> Option<&Arc<BoundedWriter>> {
        self.events_file.as_ref()
    }

    /// The current process's `worker.log` writer.
    pub fn log_file(&self) -> Option<&Arc<BoundedWriter>> {
        self.log_file.as_ref()
    }

    /// Captured worker output of the current process.
    pub fn logs(&self) -> &LogRing {
        &self.logs
    }

    /// The published plan.
    pub fn plan(&self) -> &PlanRecord {
        &self.plan
    }

    /// The headless child's record, for a `kind: "headless"` session.
    pub fn headless(&self) -> Option<&headless::Child> {
        self.subagent.as_deref()
    }

    /// The headless child's record, to apply one of its named transitions
    /// (`session::headless` keeps its fields private).
    pub fn headless_mut(&mut self) -> Option<&mut headless::Child> {
        self.subagent.as_deref_mut()
    }

    pub fn is_headless(&self) -> bool {
        self.subagent.is_some()
    }

    /// Replaces the spec; true when it changed.
    pub fn replace_spec(&mut self, spec: &Value) -> bool {
        let changed = self.spec != *spec;
        self.spec = spec.clone();
        changed
    }

    /// Publishes a new plan revision to the cache that subscriptions read.
    pub fn publish_plan(&mut self, plan: PlanRecord) {
        self.plan = plan;
    }

    /// A delete begins: the session is busy until it ends or is undone.
    /// Refused with the reason while the session is busy.
    pub fn begin_removal(&mut self) -> Result<(), &'static str> {
        if let Some(reason) = self.busy_reason() {
            return Err(reason);
        }
        self.removing = true;
        Ok(())
    }

    /// The delete failed: the session is kept as it was.
    pub fn cancel_removal(&mut self) {
        self.removing = false;
    }

    /// A configuration snapshot replacement begins: refused with the
    /// reason while the session is busy (a worker active or connected, a
    /// delete or another replacement under way); until
    /// [`Session::end_reconfigure`] no start is reserved and no delete
    /// begins.
    pub fn begin_reconfigure(&mut self) -> Result<(), &'static str> {
        if let Some(reason) = self.busy_reason() {
            return Err(reason);
        }
        self.reconfiguring = true;
        Ok(())
    }

    /// The replacement ended (done or failed).
    pub fn end_reconfigure(&mut self) {
        self.reconfiguring = false;
    }

    /// Retains one event in the transcript: `entry` renders it with its
    /// hub sequence, `omission` the record of an event dropped to stay in
    /// bounds. Returns the sequence and the rendered entry.
    pub fn retain_event(
        &mut self,
        entry: impl FnOnce(u64) -> Arc<str>,
        omission: impl FnOnce(u64, usize) -> Arc<str>,
    ) -> (u64, Arc<str>) {
        let seq = self.transcript.next_sequence();
        let json = entry(seq);
        self.transcript.push(json.clone(), omission);
        (seq, json)
    }

    /// Counts one worker event into the event-rate meter at `now_ms` (a
    /// monotonic time, `util::time::mono_millis`).
    pub fn meter_event(&mut self, now_ms: u64) {
        self.event_rate.note(now_ms);
    }

    /// The worker events of the last seconds, as of `now_ms`.
    pub fn event_rate(&self, now_ms: u64) -> crate::util::rate::Reading {
        self.event_rate.read(now_ms)
    }

    /// Appends captured output of the process launched as `lifecycle`;
    /// false (nothing kept) when the session has moved on to another.
    pub fn capture_output(
        &mut self,
        lifecycle: &str,
        stream: crate::util::log_ring::Stream,
        lines: Vec<crate::wire::line_splitter::Line>,
        now_ms: u64,
    ) -> bool {
        if self.lifecycle_id != lifecycle {
            return false;
        }
        for line in lines {
            self.logs.push(stream, line, now_ms);
        }
        true
    }

    /// Detaches the worker log writer (a headless cleanup closes it before
    /// removing the directory).
    pub fn take_log_file(&mut self) -> Option<Arc<BoundedWriter>> {
        self.log_file.take()
    }

    /// Sets the log ring bounds (from `limits.logLines`/`logRingBytes`).
    pub fn set_log_caps(&mut self, lines: usize, bytes: usize) {
        self.log_caps = (lines, bytes);
        self.logs = LogRing::new(lines, bytes);
    }

    /// A fresh, empty log ring and file writer for a new process. The
    /// previous process's writer is handed back, not closed: its pipe
    /// readers may still deliver its last lines, and it closes itself when
    /// they let go. The caller drops it after the registry lock.
    #[must_use = "the previous writer is dropped after the registry lock is released"]
    pub fn reset_logs(&mut self, file: Arc<BoundedWriter>) -> Option<Arc<BoundedWriter>> {
        self.logs = LogRing::new(self.log_caps.0, self.log_caps.1);
        self.log_file.replace(file)
    }

    /// The worker process as clients are shown it (`None` when none is
    /// known); a headless child's launch details (its command, arguments,
    /// directory and log path) are private to the hub and shown empty.
    pub fn process_view(&self) -> Option<ProcessView> {
        let view = self.process.as_ref()?.view(LogCounters {
            lines: self.logs.len(),
            dropped: self.logs.dropped(),
            truncated_bytes: self.logs.truncated_bytes(),
            file_dropped: self.log_file.as_ref().map_or(0, |f| f.dropped_records()),
            file_failed: self.log_file.as_ref().is_some_and(|f| f.failed()),
        });
        Some(if self.is_headless() {
            view.redacted()
        } else {
            view
        })
    }

    pub fn connected(&self) -> bool {
        self.link.is_some()
    }

    /// Why the session cannot be deleted right now, if it cannot.
    pub fn busy_reason(&self) -> Option<&'static str> {
        if self.removing {
            Some("the session is being removed")
        } else if self.reconfiguring {
            Some("the session's configuration is being replaced")
        } else if self.process.as_ref().is_some_and(|p| p.state.is_active()) {
            Some("a worker process is running; stop it first")
        } else if self.connected() {
            Some("a worker is connected; stop it first")
        } else {
            None
        }
    }

    /// The newest record of payload `request_id`.
    pub fn request(&self, request_id: &str) -> Option<&RequestRecord> {
        self.requests
            .iter()
            .rev()
            .find(|r| r.request_id == request_id)
    }

    fn request_mut(&mut self, request_id: &str) -> Option<&mut RequestRecord> {
        self.requests
            .iter_mut()
            .rev()
            .find(|r| r.request_id == request_id)
    }

    /// Whether a payload the hub sent still waits for the worker to admit
    /// or reject it (it is queued behind the active run, or in flight).
    pub fn has_unsettled_request(&self) -> bool {
        self.requests.iter().any(|r| r.state == RequestState::Sent)
    }

    /// Records a payload as sent, keeping the most recent [`MAX_REQUESTS`].
    pub fn push_request(&mut self, record: RequestRecord) {
        if self.requests.len() >= MAX_REQUESTS {
            self.requests.pop_front();
        }
        self.requests.push_back(record);
    }

    /// Encoded sizes of this session's approval previews at the
    /// single-prompt budget (input to the aggregate allocation).
    pub fn preview_sizes(&self) -> Vec<usize> {
        self.prompts
            .iter()
            .map(|p| {
                p.request.call.get("arguments").map_or(0, |a| {
                    display::encoded_len(&display::preview(a, PROMPT_PREVIEW_BYTES).value)
                })
            })
            .collect()
    }
}

/// Every session the hub knows, by id.
#[derive(Debug, Default)]
pub struct Registry {
    sessions: BTreeMap<String, Session>,
}

impl Registry {
    pub fn insert(&mut self, session: Session) {
        self.sessions.insert(session.id.clone(), session);
    }

    pub fn get(&self, id: &str) -> Option<&Session> {
        self.sessions.get(id)
    }

    pub fn get_mut(&mut self, id: &str) -> Option<&mut Session> {
        self.sessions.get_mut(id)
    }

    pub fn remove(&mut self, id: &str) -> Option<Session> {
        self.sessions.remove(id)
    }

    pub fn contains(&self, id: &str) -> bool {
        self.sessions.contains_key(id)
    }

    /// Sessions in creation order (ties broken by id).
    pub fn list(&self) -> Vec<&Session> {
        let mut all: Vec<&Session> = self.sessions.values().collect();
        all.sort_by(|a, b| (&a.created_at, &a.id).cmp(&(&b.created_at, &b.id)));
        all
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_removal_is_refused_while_busy_and_can_be_undone() {
        let mut s = testkit::session("l1");
        assert_eq!(s.begin_removal(), Ok(()));
        assert_eq!(s.busy_reason(), Some("the session is being removed"));
        assert_eq!(s.begin_removal(), Err("the session is being removed"));
        s.cancel_removal();
        assert_eq!(s.busy_reason(), None);
        s.attach_link(WorkerLink {
            conn_id: 7,
            writer: testkit::writer(),
        })
        .unwrap();
        assert_eq!(
            s.begin_removal(),
            Err("a worker is connected; stop it first")
        );
    }

    #[test]
    fn a_spec_replacement_reports_a_change() {
        let mut s = testkit::session("l1");
        assert!(!s.replace_spec(&json!({})));
        assert!(s.replace_spec(&json!({"provider": "x"})));
        assert_eq!(s.spec()["provider"], "x");
    }

    #[test]
    fn output_of_an_earlier_process_is_not_kept() {
        use crate::util::log_ring::Stream;
        use crate::wire::line_splitter::Line;
        let mut s = testkit::session("l1");
        let line = |t: &str| Line {
            text: t.into(),
            truncated_bytes: 0,
        };
        assert!(s.capture_output("l1", Stream::Stdout, vec![line("a"), line("b")], 1));
        assert!(!s.capture_output("l0", Stream::Stderr, vec![line("late")], 2));
        assert_eq!(s.logs().len(), 2);
    }

    #[test]
    fn a_retained_event_carries_the_next_sequence() {
        let mut s = testkit::session("l1");
        let entry = |seq: u64| -> Arc<str> { format!("{{\"hub_sequence\":{seq}}}").into() };
        let omitted =
            |seq: u64, _: usize| -> Arc<str> { format!("{{\"hub_sequence\":{seq}}}").into() };
        let (first, json) = s.retain_event(entry, omitted);
        let (second, _) = s.retain_event(entry, omitted);
        assert_eq!((first + 1, second), (second, s.transcript().latest()));
        assert_eq!(&*json, format!("{{\"hub_sequence\":{first}}}"));
    }
}
