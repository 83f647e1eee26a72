//! Sessions: id rules, the launch spec (normalized and validated, pure),
//! and the in-memory registry the HTTP and panel layers read. `describe`
//! produces the panel protocol's session description.
//!
//! The registry is plain data behind the hub's mutex; nothing here does I/O.
//! The worker link's state (identity, statistics, capabilities, runs and
//! request outcomes) is private and changes only through the transitions
//! in `link`.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::supervisor::process::{LogCounters, ProcessInfo};
use crate::transcript::Transcript;
use crate::util::bounded_writer::BoundedWriter;
use crate::util::log_ring::LogRing;
use crate::worker::confirm_frames::ConfirmationRequest;
use crate::worker::display;
use crate::ws::FrameWriter;

pub mod headless;
mod link;
mod process;
mod prompts;
#[cfg(test)]
mod testkit;

pub use process::NoStop;
pub use prompts::{DecideError, NewPrompt, NotOpened, PromptStep};

/// Log ring bounds before the configuration applies its own.
const DEFAULT_LOG_CAPS: (usize, usize) = (500, 256 * 1024);

/// Longest session id, in bytes (ids are ASCII).
pub const MAX_SESSION_ID: usize = 128;

/// Prefix the hub reserves for headless subagent children.
pub const RESERVED_PREFIX: &str = "subagent-";

/// Whether `id` is 1-128 characters of `[A-Za-z0-9_-]`.
pub fn is_valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_SESSION_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Checks an id a user asks to create: valid and not in the reserved
/// namespace.
pub fn check_new_id(id: &str) -> Result<(), SpecError> {
    if !is_valid_id(id) {
        return Err(SpecError::new(
            "session",
            "session id must be 1-128 characters of [A-Za-z0-9_-]",
        ));
    }
    if id.starts_with(RESERVED_PREFIX) {
        return Err(SpecError::new(
            "session",
            "the prefix \"subagent-\" is reserved for headless subagents",
        ));
    }
    Ok(())
}

/// A refused session spec: which field and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    pub field: String,
    pub reason: String,
}

impl SpecError {
    fn new(field: impl Into<String>, reason: impl Into<String>) -> SpecError {
        SpecError {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {}: {}", self.field, self.reason)
    }
}

impl std::error::Error for SpecError {}

/// Values a spec inherits when it leaves a field out; taken from the hub
/// configuration.
#[derive(Debug, Clone)]
pub struct SpecDefaults {
    pub provider: String,
    pub profiles: Vec<String>,
    /// `mock.profile`: never a modality assistant.
    pub mock_profile: String,
    pub threads: u64,
    pub max_exchanges: u64,
    pub auto_compact_threshold: u64,
    pub max_auto_compactions: u64,
    pub event_capacity: u64,
    pub system_prompt_file: String,
    pub workspace: String,
    pub platform: String,
    pub software: Vec<String>,
    pub persistence_enabled: bool,
    pub persistence_readable: bool,
}

impl SpecDefaults {
    /// The defaults a hub with configuration `c` gives a spec.
    pub fn from_config(c: &crate::config::Config) -> SpecDefaults {
        SpecDefaults {
            provider: c.default_provider(),
            profiles: c.provider_profiles.keys().cloned().collect(),
            mock_profile: c.mock.profile.clone(),
            threads: c.worker.threads,
            max_exchanges: c.worker.max_exchanges,
            auto_compact_threshold: c.worker.auto_compact_threshold,
            max_auto_compactions: c.worker.max_auto_compactions,
            event_capacity: c.worker.event_capacity,
            system_prompt_file: c.worker.system_prompt_file.clone(),
            workspace: c.worker.environment.workspace.clone(),
            platform: c.worker.environment.platform.clone(),
            software: c.worker.environment.software.clone(),
            persistence_enabled: c.worker.persistence.enabled,
            persistence_readable: c.worker.persistence.readable,
        }
    }
}

const SPEC_KEYS: &[&str] = &[
    "provider",
    "model",
    "threads",
    "maxExchanges",
    "autoCompactThreshold",
    "maxAutoCompactions",
    "eventCapacity",
    "modalityAssistProvider",
    "systemPromptFile",
    "workspace",
    "platform",
    "software",
    "persistence",
    "restore",
    "env",
    "extraArgs",
    "launchConfig",
    "workerConfig",
];

/// Normalizes a session spec: every field present, defaults filled in,
/// every value checked. Unknown fields are refused so a typo is not
/// silently ignored.
pub fn normalize_spec(input: Option<&Value>, d: &SpecDefaults) -> Result<Value, SpecError> {
    let empty = Map::new();
    let input = match input {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(map)) => map,
        Some(_) => return Err(SpecError::new("spec", "must be an object")),
    };
    let unknown: Vec<&str> = input
        .keys()
        .map(String::as_str)
        .filter(|k| !SPEC_KEYS.contains(k))
        .collect();
    if !unknown.is_empty() {
        return Err(SpecError::new(
            "spec",
            format!("unknown field(s): {}", unknown.join(", ")),
        ));
    }
    let provider = opt_string(input, "provider")?.unwrap_or_else(|| d.provider.clone());
    if !d.profiles.contains(&provider) {
        return Err(SpecError::new(
            "provider",
            format!(
                "unknown provider profile {provider:?} (known: {})",
                d.profiles.join(", ")
            ),
        ));
    }
    let model = opt_string(input, "model")?.unwrap_or_default();
    let threads = opt_int(input, "threads", 1)?.unwrap_or(d.threads);
    let max_exchanges = opt_int(input, "maxExchanges", 1)?.unwrap_or(d.max_exchanges);
    let auto_compact =
        opt_int(input, "autoCompactThreshold", 0)?.unwrap_or(d.auto_compact_threshold);
    let max_auto = opt_int(input, "maxAutoCompactions", 1)?.unwrap_or(d.max_auto_compactions);
    let event_capacity = match input.get("eventCapacity") {
        None | Some(Value::Null) => d.event_capacity,
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=SAFE_INTEGER_MAX).contains(n))
            .ok_or_else(|| SpecError::new("eventCapacity", "must be a positive integer"))?,
    };
    let assist = modality_assist(input, &provider, d)?;
    let prompt =
        opt_string(input, "systemPromptFile")?.unwrap_or_else(|| d.system_prompt_file.clone());
    check_prompt_path(&prompt)?;
    let workspace = opt_string(input, "workspace")?.unwrap_or_else(|| d.workspace.clone());
    let platform = opt_string(input, "platform")?.unwrap_or_else(|| d.platform.clone());
    let software = opt_strings(input, "software")?.unwrap_or_else(|| d.software.clone());
    let (enabled, readable) = match input.get("persistence") {
        None | Some(Value::Null) => (d.persistence_enabled, d.persistence_readable),
        Some(Value::Object(p)) => {
            if let Some(k) = p.keys().find(|k| *k != "enabled" && *k != "readable") {
                return Err(SpecError::new(format!("persistence.{k}"), "unknown field"));
            }
            (
                opt_bool(p, "persistence.enabled", "enabled")?.unwrap_or(d.persistence_enabled),
                opt_bool(p, "persistence.readable", "readable")?.unwrap_or(d.persistence_readable),
            )
        }
        Some(_) => return Err(SpecError::new("persistence", "must be an object")),
    };
    let restore = opt_string(input, "restore")?.unwrap_or_else(|| "if_present".into());
    if restore != "if_present" && restore != "never" {
        return Err(SpecError::new(
            "restore",
            "must be \"if_present\" or \"never\"",
        ));
    }
    let env = match input.get("env") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(env)) => {
            for (name, value) in env {
                if !is_env_name(name) {
                    return Err(SpecError::new(
                        "env",
                        format!("{name:?} is not a valid variable name"),
                    ));
                }
                if value.as_str().is_none_or(|v| v.contains('\0')) {
                    return Err(SpecError::new(
                        format!("env.{name}"),
                        "must be a string without NUL",
                    ));
                }
            }
            env.clone()
        }
        Some(_) => return Err(SpecError::new("env", "must be an object of strings")),
    };
    let extra_args = opt_strings(input, "extraArgs")?.unwrap_or_default();
    let selection = library_selection(input)?;
    let mut spec = json!({
        "provider": provider,
        "model": model,
        "threads": threads,
        "maxExchanges": max_exchanges,
        "autoCompactThreshold": auto_compact,
        "maxAutoCompactions": max_auto,
        "eventCapacity": event_capacity,
        "modalityAssistProvider": assist,
        "systemPromptFile": prompt,
        "workspace": workspace,
        "platform": platform,
        "software": software,
        "persistence": {"enabled": enabled, "readable": readable},
        "restore": restore,
        "env": env,
        "extraArgs": extra_args,
    });
    if let (Some((launch, worker)), Value::Object(map)) = (selection, &mut spec) {
        map.insert("launchConfig".into(), Value::String(launch));
        map.insert("workerConfig".into(), Value::String(worker));
    }
    Ok(spec)
}

/// `launchConfig` and `workerConfig`: the configuration-library files a
/// session was created from (its snapshot's sources), both or neither,
/// each an id of the library's form (the same rule as session ids).
fn library_selection(input: &Map<String, Value>) -> Result<Option<(String, String)>, SpecError> {
    let launch = opt_string(input, "launchConfig")?;
    let worker = opt_string(input, "workerConfig")?;
    match (launch, worker) {
        (None, None) => Ok(None),
        (Some(launch), Some(worker)) => {
            for (key, id) in [("launchConfig", &launch), ("workerConfig", &worker)] {
                if !is_valid_id(id) {
                    return Err(SpecError::new(
                        key,
                        "must be a configuration id of 1-128 characters of [A-Za-z0-9_-]",
                    ));
                }
            }
            Ok(Some((launch, worker)))
        }
        _ => Err(SpecError::new(
            "spec",
            "launchConfig and workerConfig select a pair: give both or neither",
        )),
    }
}

/// The largest integer JavaScript holds exactly: the Node hub's ceiling for
/// counts it gives no maximum.
const SAFE_INTEGER_MAX: u64 = 9_007_199_254_740_991;

/// The name of the providers entry a modality assistant gets in the
/// worker configuration.
pub const MODALITY_ASSIST_ENTRY: &str = "modality_assist";

/// `modalityAssistProvider`: the profile the worker's separate assistant
/// (image interpretation) is copied from, or `null` for none. Left out, a
/// session whose provider is `deepseek` (and is not the mock profile) gets
/// the `deepseek` profile, any other provider none, as in the Node hub.
/// An explicit `null` opts out.
fn modality_assist(
    input: &Map<String, Value>,
    provider: &str,
    d: &SpecDefaults,
) -> Result<Value, SpecError> {
    let key = "modalityAssistProvider";
    let assist = match input.get(key) {
        None => {
            let default = provider == "deepseek" && provider != d.mock_profile;
            return Ok(if default {
                Value::from("deepseek")
            } else {
                Value::Null
            });
        }
        Some(Value::Null) => return Ok(Value::Null),
        Some(Value::String(name)) => name,
        Some(_) => return Err(SpecError::new(key, "must be a profile name or null")),
    };
    if !d.profiles.contains(assist) || *assist == d.mock_profile {
        return Err(SpecError::new(
            key,
            format!(
                "must name a provider profile other than the mock profile {:?}, or be null \
                 (known: {})",
                d.mock_profile,
                d.profiles.join(", ")
            ),
        ));
    }
    if provider == MODALITY_ASSIST_ENTRY {
        return Err(SpecError::new(
            key,
            format!(
                "must be null while provider is {MODALITY_ASSIST_ENTRY:?}: the assistant's \
                 providers entry has that name"
            ),
        ));
    }
    Ok(Value::from(assist.as_str()))
}

fn opt_string(map: &Map<String, Value>, key: &str) -> Result<Option<String>, SpecError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.contains('\0') => Ok(Some(s.clone())),
        Some(_) => Err(SpecError::new(key, "must be a string without NUL")),
    }
}

fn opt_bool(map: &Map<String, Value>, field: &str, key: &str) -> Result<Option<bool>, SpecError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(SpecError::new(field, "must be a boolean")),
    }
}

fn opt_int(map: &Map<String, Value>, key: &str, min: u64) -> Result<Option<u64>, SpecError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n >= min && n <= i32::MAX as u64 => Ok(Some(n)),
            _ => Err(SpecError::new(
                key,
                format!("must be an integer from {min} to {}", i32::MAX),
            )),
        },
    }
}

fn opt_strings(map: &Map<String, Value>, key: &str) -> Result<Option<Vec<String>>, SpecError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) if !s.contains('\0') => Ok(s.clone()),
                _ => Err(SpecError::new(key, "must be an array of strings")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(SpecError::new(key, "must be an array of strings")),
    }
}

fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The system prompt path is relative to the worker's installation: no
/// root, no drive letter, no `..` segment in either separator style.
fn check_prompt_path(path: &str) -> Result<(), SpecError> {
    let bytes = path.as_bytes();
    let drive = bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':';
    let bad = path.is_empty()
        || path.starts_with('/')
        || path.starts_with('\\')
        || drive
        || path.split(['/', '\\']).any(|s| s == "..");
    if bad {
        Err(SpecError::new(
            "systemPromptFile",
            "must be a relative path without '..' segments",
        ))
    } else {
        Ok(())
    }
}

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
    /// The Node hub's request record (`settled_at` null while `sent`;
    /// `detail` a string: the worker's rejection message, or why the
    /// outcome is unknown, else empty), then this hub's `updated_at` and
    /// `rejection` (the worker's whole `input_rejected` data, or null).
    pub fn describe(&self) -> Value {
        let detail = match (self.state, &self.detail) {
            (_, Some(data)) => data
                .get("message")
                .and_then(Value::as_str)
                .or_else(|| data.get("code").and_then(Value::as_str))
                .unwrap_or("the worker rejected the input"),
            (RequestState::Unknown, None) => {
                "the event connection closed before the worker admitted or rejected it"
            }
            _ => "",
        };
        let settled_at = match self.state {
            RequestState::Sent => None,
            _ => Some(&self.updated_at),
        };
        json!({
            "request_id": self.request_id,
            "operation": self.operation,
            "state": self.state.as_str(),
            "sent_at": self.sent_at,
            "settled_at": settled_at,
            "detail": detail,
            "updated_at": self.updated_at,
            "rejection": self.detail,
        })
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

impl Prompt {
    /// The prompt object of the panel protocol, with the arguments preview
    /// bounded to `budget` bytes of encoded JSON. The decision always
    /// applies to the original call, never to this preview.
    pub fn describe(&self, session_id: &str, budget: usize) -> Value {
        let mut call = match &self.request.call {
            Value::Object(map) => map.clone(),
            other => {
                let mut m = Map::new();
                m.insert("value".into(), other.clone());
                m
            }
        };
        let mut out = json!({
            "confirmation_id": self.request.confirmation_id,
            "session_id": session_id,
            "worker_id": self.request.worker_id,
            "run_id": self.request.run_id,
            "state": self.state.as_str(),
            "verified": self.verified,
            "identity_state": self.identity_state.as_str(),
            "received_at": self.received_at,
            "deadline_at": self.deadline_at,
            "settled_at": self.settled_at,
            "decision": self.decision.map(|d| if d { "approved" } else { "denied" }),
            "reason": self.reason,
        });
        if let Some(args) = call.get("arguments") {
            let preview = display::preview(args, budget);
            if preview.truncated {
                out["arguments_truncated"] = json!(true);
                out["arguments_bytes"] = json!(preview.original_bytes);
            }
            call.insert("arguments".into(), preview.value);
        }
        out["call"] = Value::Object(call);
        out
    }
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
    /// The published plan `{markdown, revision, updated_at}`, cached from
    /// the store so subscriptions read it under the same lock that orders
    /// them against `plan` broadcasts.
    plan: Value,
    /// Set for a headless child (`kind: "headless"`).
    subagent: Option<Box<headless::Child>>,
    /// The confirmation mode (`ask`, `approve`, `deny`) the hub sends with
    /// inputs that name none; `None` until a client chose one
    /// (`link.rs`: `set_mode`).
    mode: Option<String>,
    /// Stop the worker once its active run finishes (`link.rs`:
    /// `defer_stop`, `take_due_stop`); cleared by a new start.
    stop_after_run: bool,
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
            plan: json!({"markdown": "", "revision": 0, "updated_at": null}),
            subagent: None,
            mode: None,
            stop_after_run: false,
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
    pub fn with_plan(mut self, plan: Value) -> Session {
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

    /// The published plan `{markdown, revision, updated_at}`.
    pub fn plan(&self) -> &Value {
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
    pub fn publish_plan(&mut self, plan: Value) {
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

    /// Appends captured output of the process launched as `lifecycle`;
    /// false (nothing kept) when the session has moved on to another.
    pub fn capture_output(
        &mut self,
        lifecycle: &str,
        stream: crate::util::log_ring::Stream,
        lines: Vec<crate::util::line_splitter::Line>,
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

    /// The `process` object of the description (null when none is known).
    /// A headless child's invocation is redacted.
    /// The process description; a headless child's launch details (its
    /// command, arguments, directory and log path) are private to the hub
    /// and shown empty.
    pub fn describe_process(&self) -> Value {
        let mut described = self.describe_process_full();
        if self.is_headless() {
            if let Some(map) = described.as_object_mut() {
                map.insert("command".into(), json!(""));
                map.insert("args".into(), json!([]));
                map.insert("cwd".into(), json!(""));
                map.insert("log_path".into(), Value::Null);
            }
        }
        described
    }

    fn describe_process_full(&self) -> Value {
        match &self.process {
            None => Value::Null,
            Some(p) => p.describe(&LogCounters {
                lines: self.logs.len(),
                dropped: self.logs.dropped(),
                truncated_bytes: self.logs.truncated_bytes(),
                file_dropped: self.log_file.as_ref().map_or(0, |f| f.dropped_records()),
                file_failed: self.log_file.as_ref().is_some_and(|f| f.failed()),
            }),
        }
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

    /// The panel protocol's session description, each approval preview
    /// bounded to 64 KiB.
    pub fn describe(&self) -> Value {
        self.describe_with(&mut |_| PROMPT_PREVIEW_BYTES)
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

    /// The description with approval `i`'s preview bounded to `budget(i)`.
    pub fn describe_with(&self, budget: &mut dyn FnMut(usize) -> usize) -> Value {
        let mut out = self.describe_common(budget);
        if let Some(child) = &self.subagent {
            // No operator spec: an empty one, as the Node hub shows it.
            out["spec"] = json!({});
            out["subagent"] = headless::describe(self, child);
        }
        out
    }

    /// A prompt's panel description. A headless child's prompt is
    /// labelled with the child and its parent (`subagent {session_id,
    /// parent_session_id}`), so an operator sees whose request it is.
    pub fn describe_prompt(&self, prompt: &Prompt, budget: usize) -> Value {
        let mut out = prompt.describe(&self.id, budget);
        if let Some(child) = &self.subagent {
            out["subagent"] = json!({
                "session_id": self.id,
                "parent_session_id": child.parent().session_id,
            });
        }
        out
    }

    fn describe_common(&self, budget: &mut dyn FnMut(usize) -> usize) -> Value {
        json!({
            "session_id": self.id,
            "kind": self.kind,
            "created_at": self.created_at,
            "spec": self.spec,
            "connected": self.connected(),
            "worker_capabilities": self.capabilities,
            "identity": {
                "state": self.identity.as_str(),
                "worker_id": self.worker_id,
                "since": self.identity_since,
            },
            "stats": {
                "events": self.stats.events,
                "gaps": self.stats.gaps,
                "duplicates": self.stats.duplicates,
                "protocolErrors": self.stats.protocol_errors,
                "incarnations": self.stats.incarnations,
            },
            "last_run_id": self.last_run_id.as_deref().unwrap_or(""),
            "last_event_at": self.last_event_at,
            "last_event": self.last_event,
            "confirmations": self.prompts.iter().enumerate()
                .map(|(i, p)| self.describe_prompt(p, budget(i).max(MIN_PREVIEW_BYTES)))
                .collect::<Vec<_>>(),
            "process": self.describe_process(),
            "requests": self.requests.iter().map(RequestRecord::describe).collect::<Vec<_>>(),
        })
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
    use super::*;

    fn defaults() -> SpecDefaults {
        SpecDefaults {
            provider: "mock".into(),
            profiles: vec!["deepseek".into(), "mock".into()],
            mock_profile: "mock".into(),
            threads: 1,
            max_exchanges: 512,
            auto_compact_threshold: 0,
            max_auto_compactions: 5,
            event_capacity: 1024,
            system_prompt_file: "prompts/coding_agent.yaml".into(),
            workspace: String::new(),
            platform: String::new(),
            software: vec![],
            persistence_enabled: true,
            persistence_readable: false,
        }
    }

    #[test]
    fn ids_follow_the_grammar() {
        assert!(is_valid_id("demo_1-A"));
        assert!(is_valid_id(&"a".repeat(128)));
        assert!(!is_valid_id(&"a".repeat(129)));
        assert!(!is_valid_id(""));
        assert!(!is_valid_id("a/b"));
        assert!(!is_valid_id("a b"));
        assert!(!is_valid_id("é"));
        assert!(check_new_id("subagent-x").is_err());
        assert!(check_new_id("my-subagent-x").is_ok());
    }

    #[test]
    fn empty_spec_gets_every_default() {
        let spec = normalize_spec(None, &defaults()).unwrap();
        assert_eq!(spec["provider"], "mock");
        assert_eq!(spec["threads"], 1);
        assert_eq!(spec["maxAutoCompactions"], 5);
        assert_eq!(
            spec["persistence"],
            json!({"enabled": true, "readable": false})
        );
        assert_eq!(spec["restore"], "if_present");
        // Every key but the library pair, which only a library session has.
        assert_eq!(spec.as_object().unwrap().len(), SPEC_KEYS.len() - 2);
    }

    #[test]
    fn a_library_pair_is_both_or_neither() {
        let d = defaults();
        let both = json!({"launchConfig": "local", "workerConfig": "default"});
        let spec = normalize_spec(Some(&both), &d).unwrap();
        assert_eq!(spec["launchConfig"], "local");
        assert_eq!(spec["workerConfig"], "default");
        for bad in [
            json!({"launchConfig": "local"}),
            json!({"workerConfig": "default"}),
            json!({"launchConfig": "../x", "workerConfig": "default"}),
            json!({"launchConfig": "local", "workerConfig": 3}),
        ] {
            assert!(normalize_spec(Some(&bad), &d).is_err(), "{bad}");
        }
    }

    #[test]
    fn refuses_bad_specs() {
        let d = defaults();
        for bad in [
            json!("x"),
            json!({"provider": "nope"}),
            json!({"threads": 0}),
            json!({"threads": 1.5}),
            json!({"threads": "2"}),
            json!({"restore": "always"}),
            json!({"env": {"1X": "a"}}),
            json!({"env": {"X": 1}}),
            json!({"extraArgs": [1]}),
            json!({"systemPromptFile": "../x"}),
            json!({"systemPromptFile": "/etc/x"}),
            json!({"systemPromptFile": "C:x"}),
            json!({"systemPromptFile": "a\\..\\b"}),
            json!({"persistence": {"enabled": 1}}),
            json!({"persistence": {"other": true}}),
            json!({"modle": "typo"}),
            json!({"autoCompactThreshold": -1}),
            json!({"autoCompactThreshold": 2_147_483_648_u64}),
            json!({"maxAutoCompactions": 0}),
            json!({"maxAutoCompactions": 2_147_483_648_u64}),
            json!({"eventCapacity": 0}),
            json!({"eventCapacity": 1.5}),
            json!({"eventCapacity": 9_007_199_254_740_992_u64}),
            json!({"modalityAssistProvider": "mock"}),
            json!({"modalityAssistProvider": "nope"}),
            json!({"modalityAssistProvider": 1}),
        ] {
            assert!(normalize_spec(Some(&bad), &d).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn auto_compaction_and_event_capacity_default_from_the_configuration() {
        let mut d = defaults();
        d.auto_compact_threshold = 120_000;
        d.max_auto_compactions = 2;
        d.event_capacity = 64;
        let spec = normalize_spec(None, &d).unwrap();
        assert_eq!(spec["autoCompactThreshold"], 120_000);
        assert_eq!(spec["maxAutoCompactions"], 2);
        assert_eq!(spec["eventCapacity"], 64);
        let given = json!({"autoCompactThreshold": 2_147_483_647_u64, "maxAutoCompactions": 1,
                           "eventCapacity": 9_007_199_254_740_991_u64});
        let spec = normalize_spec(Some(&given), &d).unwrap();
        for key in [
            "autoCompactThreshold",
            "maxAutoCompactions",
            "eventCapacity",
        ] {
            assert_eq!(spec[key], given[key], "{key}");
        }
        let err = normalize_spec(Some(&json!({"eventCapacity": 0})), &d).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid eventCapacity: must be a positive integer"
        );
    }

    #[test]
    fn deepseek_sessions_get_a_modality_assistant_by_default() {
        let d = defaults();
        let assist = |spec: Value| {
            normalize_spec(Some(&spec), &d).map(|s| s["modalityAssistProvider"].clone())
        };
        assert_eq!(assist(json!({"provider": "deepseek"})).unwrap(), "deepseek");
        assert_eq!(assist(json!({"provider": "mock"})).unwrap(), Value::Null);
        assert_eq!(assist(json!({})).unwrap(), Value::Null);
        // An explicit null opts out; another provider opts in by name.
        assert_eq!(
            assist(json!({"provider": "deepseek", "modalityAssistProvider": null})).unwrap(),
            Value::Null
        );
        assert_eq!(
            assist(json!({"provider": "mock", "modalityAssistProvider": "deepseek"})).unwrap(),
            "deepseek"
        );
        // The mock profile is never an assistant, under any name.
        let mut d2 = defaults();
        d2.mock_profile = "deepseek".into();
        let spec = normalize_spec(Some(&json!({"provider": "deepseek"})), &d2).unwrap();
        assert_eq!(spec["modalityAssistProvider"], Value::Null);
        let err = normalize_spec(Some(&json!({"modalityAssistProvider": "mock"})), &d).unwrap_err();
        assert_eq!(err.field, "modalityAssistProvider");
        assert!(err.reason.contains("other than the mock profile"), "{err}");
        // A normalized spec normalizes to itself.
        let once = normalize_spec(Some(&json!({"provider": "deepseek"})), &d).unwrap();
        assert_eq!(normalize_spec(Some(&once), &d).unwrap(), once);
        // A driver named like the assistant's entry cannot have one.
        let mut d3 = defaults();
        d3.profiles.push(MODALITY_ASSIST_ENTRY.into());
        let clash =
            json!({"provider": MODALITY_ASSIST_ENTRY, "modalityAssistProvider": "deepseek"});
        assert!(normalize_spec(Some(&clash), &d3).is_err());
    }

    #[test]
    fn keeps_given_values() {
        let spec = normalize_spec(
            Some(&json!({"provider": "deepseek", "model": "m", "threads": 3, "env": {"A_1": "v"}, "extraArgs": ["--x"]})),
            &defaults(),
        )
        .unwrap();
        assert_eq!(spec["provider"], "deepseek");
        assert_eq!(spec["model"], "m");
        assert_eq!(spec["threads"], 3);
        assert_eq!(spec["env"], json!({"A_1": "v"}));
        assert_eq!(spec["extraArgs"], json!(["--x"]));
    }

    #[test]
    fn description_has_the_seed_shape() {
        let s = Session::new(
            "demo".into(),
            "t".into(),
            json!({}),
            "tok".into(),
            "l".into(),
            Transcript::new(10, 1000),
        );
        let d = s.describe();
        for key in [
            "session_id",
            "created_at",
            "spec",
            "connected",
            "worker_capabilities",
            "identity",
            "stats",
            "last_run_id",
            "last_event_at",
            "last_event",
            "confirmations",
            "process",
            "requests",
            "kind",
        ] {
            assert!(d.get(key).is_some(), "missing {key}");
        }
        assert!(
            d.to_string().find("tok").is_none(),
            "token leaked into description"
        );
    }

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
        use crate::util::line_splitter::Line;
        use crate::util::log_ring::Stream;
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
