//! One headless child's hub-side record (pure), the part of the session
//! core a `kind: "headless"` session adds: its immutable parent reference,
//! lifecycle, operator safety policy, cleanup bookkeeping, request-outcome
//! tail and conversation projection (`conversation/`), with their stored
//! JSON form (`subagents.meta` and `subagents.outcomes` in the store) and
//! the `subagent` block of the session description. The named steps that
//! change it are `steps.rs`; what its worker's events change is
//! `observe.rs`. The subagent service (`crate::subagents`) runs families
//! on top of it.

use std::collections::VecDeque;
use std::fmt;

use serde_json::{json, Value};

use super::{IdentityState, Session};
use conversation::Conversation;

pub mod conversation;
pub mod observe;
mod steps;

pub use steps::{CleanupClaim, CleanupState, RecoveryRefused};

/// The session `kind` of a headless child.
pub const KIND: &str = "headless";

/// A headless child as shown: its record's public facts and what its
/// session adds (see [`view`]).
#[derive(Debug, Clone)]
pub struct ChildView {
    pub parent: ParentRef,
    pub depth: u32,
    pub lifecycle: Lifecycle,
    pub policy: Policy,
    /// `ok`, `degraded`, ... (see [`Child::health`]).
    pub health: &'static str,
    pub reason: String,
    pub observed_at: Option<String>,
    /// A run is active.
    pub active: bool,
    pub pending_approvals: usize,
    pub cleanup_attempts: u32,
}

/// The view of `child`, the record of headless session `session`.
pub fn view(session: &Session, child: &Child) -> ChildView {
    let live = session.identity() == IdentityState::Live;
    ChildView {
        parent: child.parent.clone(),
        depth: child.depth,
        lifecycle: child.lifecycle,
        policy: child.policy,
        health: child.health(session.connected(), live),
        reason: child.reason.clone().unwrap_or_default(),
        observed_at: session.last_event_at().map(str::to_string),
        active: session.active_run().is_some(),
        pending_approvals: session.prompts().len(),
        cleanup_attempts: child.cleanup_attempts,
    }
}

/// The `subagent` block the panel protocol's session object and the
/// subagent routes' status objects share (the Node hub's shape).
pub fn block(child: &ChildView) -> Value {
    json!({
        // The parent session id, as the Node hub gives it; the whole
        // reference beside it.
        "parent": child.parent.session_id,
        "parent_ref": {
            "session_id": child.parent.session_id,
            "lifecycle_id": child.parent.lifecycle_id,
            "worker_id": child.parent.worker_id,
        },
        "depth": child.depth,
        "lifecycle": child.lifecycle.as_str(),
        "policy": child.policy.as_str(),
        "health": child.health,
        "reason": child.reason,
        "observed_at": child.observed_at,
        "active": child.active,
        "active_run": child.active,
        "pending_approvals": child.pending_approvals,
        "cleanup_attempts": child.cleanup_attempts,
    })
}

/// Outcomes kept per child (the receive tail shows the newest 20).
pub const MAX_OUTCOMES: usize = 200;

/// Stored size bound of the outcome tail, in JSON bytes.
pub const MAX_OUTCOME_BYTES: usize = 512 * 1024;

/// Outcomes a receive result shows.
pub const RECEIVE_OUTCOMES: usize = 20;

/// Automatic cleanup attempts, the first one included.
pub const MAX_CLEANUP_ATTEMPTS: u32 = 3;

/// The generated id prefix, reserved for the hub.
pub const ID_PREFIX: &str = "subagent-";

/// A fresh `subagent-<uuid>` id.
pub fn new_id() -> String {
    format!("{ID_PREFIX}{}", uuid::Uuid::new_v4())
}

/// Whether `id` is in the reserved namespace.
pub fn is_child_id(id: &str) -> bool {
    id.starts_with(ID_PREFIX)
}

/// Where a child is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    Preparing,
    Starting,
    Ready,
    Stopping,
    Stopped,
    CleanupPending,
}

impl Lifecycle {
    pub fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Preparing => "preparing",
            Lifecycle::Starting => "starting",
            Lifecycle::Ready => "ready",
            Lifecycle::Stopping => "stopping",
            Lifecycle::Stopped => "stopped",
            Lifecycle::CleanupPending => "cleanup-pending",
        }
    }

    pub fn parse(s: &str) -> Option<Lifecycle> {
        [
            Lifecycle::Preparing,
            Lifecycle::Starting,
            Lifecycle::Ready,
            Lifecycle::Stopping,
            Lifecycle::Stopped,
            Lifecycle::CleanupPending,
        ]
        .into_iter()
        .find(|l| l.as_str() == s)
    }

    /// Whether the child is on its way out (no new work is admitted).
    pub fn is_closing(self) -> bool {
        matches!(
            self,
            Lifecycle::Stopping | Lifecycle::Stopped | Lifecycle::CleanupPending
        )
    }
}

/// What happens to a child, as its lifecycle sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LifecycleEvent {
    /// Its worker is being launched.
    Launch,
    /// Its worker identified itself live on its event connection.
    Live,
    /// A stop began (the parent's request, an ancestor's stop, a startup
    /// deadline, hub shutdown).
    Stop,
    /// An operator's retry of a retained child whose worker still runs.
    RetryStop,
    /// A cleanup attempt failed, or a start left its worker uncertain.
    CleanupFailed,
}

impl Lifecycle {
    /// The lifecycle after `event`, or `None` when `event` cannot happen
    /// now. The whole machine:
    ///
    /// ```text
    /// preparing --Launch--> starting --Live--> ready
    /// preparing | starting | ready --Stop--> stopping
    /// stopping | cleanup-pending | stopped --RetryStop--> stopping
    /// anything but stopped --CleanupFailed--> cleanup-pending
    /// ```
    ///
    /// `stopped` is reached only by the record's removal (its terminal
    /// record says `stopped`).
    pub fn after(self, event: LifecycleEvent) -> Option<Lifecycle> {
        use Lifecycle::*;
        use LifecycleEvent::*;
        match (self, event) {
            (Preparing, Launch) => Some(Starting),
            (Starting, Live) => Some(Ready),
            (Preparing | Starting | Ready, Stop) => Some(Stopping),
            (Stopping | CleanupPending | Stopped, RetryStop) => Some(Stopping),
            (Stopped, CleanupFailed) => None,
            (_, CleanupFailed) => Some(CleanupPending),
            _ => None,
        }
    }
}

/// The operator's answer to the child's confirmation requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Ask,
    Deny,
    Approve,
}

impl Policy {
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Ask => "ask",
            Policy::Deny => "deny",
            Policy::Approve => "approve",
        }
    }

    pub fn parse(s: &str) -> Option<Policy> {
        match s {
            "ask" => Some(Policy::Ask),
            "deny" => Some(Policy::Deny),
            "approve" => Some(Policy::Approve),
            _ => None,
        }
    }
}

/// The parent a child belongs to, fixed at creation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParentRef {
    pub session_id: String,
    pub lifecycle_id: String,
    pub worker_id: String,
}

/// What is known about one request sent to the child.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub request_id: String,
    pub operation: String,
    pub state: OutcomeState,
    pub run_id: Option<String>,
    /// The run status of `finished`.
    pub run_status: Option<String>,
    /// A compact's published summary.
    pub summary: Option<Value>,
    /// The child's rejection or error diagnostic.
    pub error: Option<String>,
    pub updated_at: String,
}

impl Outcome {
    pub fn to_json(&self) -> Value {
        let mut out = json!({
            "request_id": self.request_id,
            "operation": self.operation,
            "state": self.state.as_str(),
            "updated_at": self.updated_at,
        });
        for (key, value) in [
            ("run_id", self.run_id.as_ref().map(|v| json!(v))),
            ("run_status", self.run_status.as_ref().map(|v| json!(v))),
            ("summary", self.summary.clone()),
            ("error", self.error.as_ref().map(|v| json!(v))),
        ] {
            if let Some(value) = value {
                out[key] = value;
            }
        }
        out
    }

    fn from_json(v: &Value) -> Option<Outcome> {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        Some(Outcome {
            request_id: s("request_id")?,
            operation: s("operation")?,
            state: OutcomeState::parse(&s("state")?)?,
            run_id: s("run_id"),
            run_status: s("run_status"),
            summary: v.get("summary").cloned(),
            error: s("error"),
            updated_at: s("updated_at").unwrap_or_default(),
        })
    }
}

/// What became of a `subagent/send`, as its receipt and `receive` say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeState {
    /// Recorded, not yet written to the child's worker.
    Intent,
    Sent,
    Admitted,
    Rejected,
    /// The delivery's fate cannot be known (a connection ended after the
    /// write); never resent.
    Unknown,
    Finished,
}

impl OutcomeState {
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeState::Intent => "intent",
            OutcomeState::Sent => "sent",
            OutcomeState::Admitted => "admitted",
            OutcomeState::Rejected => "rejected",
            OutcomeState::Unknown => "unknown",
            OutcomeState::Finished => "finished",
        }
    }

    pub fn parse(s: &str) -> Option<OutcomeState> {
        use OutcomeState::*;
        [Intent, Sent, Admitted, Rejected, Unknown, Finished]
            .into_iter()
            .find(|o| o.as_str() == s)
    }

    /// Not yet known to have reached the worker's queue.
    pub fn is_in_flight(self) -> bool {
        matches!(self, OutcomeState::Intent | OutcomeState::Sent)
    }
}

/// A stored record that cannot be restored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRecord(pub String);

impl fmt::Display for BadRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid subagent record: {}", self.0)
    }
}

impl std::error::Error for BadRecord {}

/// The hub's record of one headless child.
#[derive(Debug)]
pub struct Child {
    parent: ParentRef,
    /// 1 for a child of an ordinary session.
    depth: u32,
    /// Changed only through [`Child::apply`].
    lifecycle: Lifecycle,
    policy: Policy,
    /// Why the child failed or is retained, when it did or is.
    reason: Option<String>,
    created_at: String,
    cleanup_attempts: u32,
    /// When the next automatic cleanup attempt is due (ms since the epoch).
    retry_at_ms: Option<u64>,
    /// Whether automatic cleanup may still retry.
    automatic_retry: bool,
    /// A launch whose process was never confirmed (spawn evidence lost).
    uncertain_start: bool,
    /// The operator attested the worker is gone.
    termination_confirmed: bool,
    /// A cleanup attempt is running.
    cleanup_in_flight: bool,
    /// The family's admission is closed (an ancestor is stopping): no
    /// forks and no sends through this child.
    frozen: bool,
    /// The latest outcomes, oldest first.
    outcomes: VecDeque<Outcome>,
    /// The outcome tail changed and the store has not taken it yet.
    outcomes_unpersisted: bool,
    /// The last metadata write failed.
    meta_failed: bool,
    /// The visible dialogue (user and assistant text only).
    conversation: Conversation,
    /// Content of recent sends, until the child commits them
    /// (`input_committed` carries no content); at most [`SENT_CONTENT`].
    sent_content: VecDeque<(String, Value)>,
    /// `conversation.json` is behind the projection.
    conversation_dirty: bool,
    /// A coalesced `conversation.json` write is scheduled.
    conversation_write_scheduled: bool,
    /// The last `conversation.json` write failed.
    conversation_failed: bool,
    /// A history refresh is running.
    refresh_running: bool,
    /// Refresh attempts since the last connection or run settlement.
    refresh_attempts: u32,
}

/// Sent contents remembered until their commit.
pub const SENT_CONTENT: usize = 8;

impl Child {
    pub fn new(
        parent: ParentRef,
        depth: u32,
        created_at: String,
        conversation_bytes: usize,
    ) -> Child {
        Child {
            parent,
            depth,
            lifecycle: Lifecycle::Preparing,
            policy: Policy::Ask,
            reason: None,
            created_at,
            cleanup_attempts: 0,
            retry_at_ms: None,
            automatic_retry: true,
            uncertain_start: false,
            termination_confirmed: false,
            cleanup_in_flight: false,
            frozen: false,
            outcomes: VecDeque::new(),
            outcomes_unpersisted: false,
            meta_failed: false,
            conversation: Conversation::new(conversation_bytes),
            sent_content: VecDeque::new(),
            conversation_dirty: false,
            conversation_write_scheduled: false,
            conversation_failed: false,
            refresh_running: false,
            refresh_attempts: 0,
        }
    }

    pub fn lifecycle(&self) -> Lifecycle {
        self.lifecycle
    }

    /// Applies `event` to the lifecycle; false (and no change) when the
    /// machine does not allow it now.
    pub fn apply(&mut self, event: LifecycleEvent) -> bool {
        match self.lifecycle.after(event) {
            Some(next) => {
                self.lifecycle = next;
                true
            }
            None => false,
        }
    }

    /// The stored ownership and lifecycle record.
    pub fn meta_json(&self) -> Value {
        json!({
            "parent": {
                "session_id": self.parent.session_id,
                "lifecycle_id": self.parent.lifecycle_id,
                "worker_id": self.parent.worker_id,
            },
            "depth": self.depth,
            "lifecycle": self.lifecycle.as_str(),
            "policy": self.policy.as_str(),
            "reason": self.reason,
            "created_at": self.created_at,
            "cleanup_attempts": self.cleanup_attempts,
            "retry_at_ms": self.retry_at_ms,
            "automatic_retry": self.automatic_retry,
            "uncertain_start": self.uncertain_start,
            "termination_confirmed": self.termination_confirmed,
        })
    }

    /// Restores a child from its stored records.
    pub fn from_stored(
        meta: &Value,
        outcomes: &Value,
        conversation_bytes: usize,
    ) -> Result<Child, BadRecord> {
        let text = |v: &Value, k: &str| -> Result<String, BadRecord> {
            v.get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .ok_or_else(|| BadRecord(format!("{k} is missing")))
        };
        let parent = meta
            .get("parent")
            .ok_or_else(|| BadRecord("parent is missing".into()))?;
        let parent = ParentRef {
            session_id: text(parent, "session_id")?,
            lifecycle_id: text(parent, "lifecycle_id")?,
            worker_id: text(parent, "worker_id")?,
        };
        let depth = meta
            .get("depth")
            .and_then(Value::as_u64)
            .filter(|d| (1..=64).contains(d))
            .ok_or_else(|| BadRecord("depth is invalid".into()))? as u32;
        let lifecycle = Lifecycle::parse(&text(meta, "lifecycle")?)
            .ok_or_else(|| BadRecord("lifecycle is invalid".into()))?;
        let policy = Policy::parse(&text(meta, "policy")?)
            .ok_or_else(|| BadRecord("policy is invalid".into()))?;
        let mut child = Child::new(parent, depth, text(meta, "created_at")?, conversation_bytes);
        child.lifecycle = lifecycle;
        child.policy = policy;
        child.reason = meta
            .get("reason")
            .and_then(Value::as_str)
            .map(str::to_owned);
        child.cleanup_attempts = meta
            .get("cleanup_attempts")
            .and_then(Value::as_u64)
            .unwrap_or(0)
            .min(u64::from(u32::MAX)) as u32;
        child.retry_at_ms = meta.get("retry_at_ms").and_then(Value::as_u64);
        child.automatic_retry = meta
            .get("automatic_retry")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        child.uncertain_start = meta
            .get("uncertain_start")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        child.termination_confirmed = meta
            .get("termination_confirmed")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if let Some(list) = outcomes.as_array() {
            child.outcomes = list.iter().filter_map(Outcome::from_json).collect();
        }
        Ok(child)
    }

    /// The outcome of `request_id`, newest first.
    fn outcome_mut(&mut self, request_id: &str) -> Option<&mut Outcome> {
        self.outcomes
            .iter_mut()
            .rev()
            .find(|o| o.request_id == request_id)
    }

    /// Appends an outcome, keeping the newest [`MAX_OUTCOMES`].
    pub fn push_outcome(&mut self, outcome: Outcome) {
        while self.outcomes.len() >= MAX_OUTCOMES {
            self.outcomes.pop_front();
        }
        self.outcomes.push_back(outcome);
        self.outcomes_unpersisted = true;
    }

    /// The stored outcome tail: the newest entries that fit
    /// [`MAX_OUTCOME_BYTES`].
    pub fn outcomes_json(&self) -> Value {
        let mut kept = Vec::new();
        let mut bytes = 2;
        for o in self.outcomes.iter().rev() {
            let v = o.to_json();
            bytes += v.to_string().len() + 1;
            if bytes > MAX_OUTCOME_BYTES {
                break;
            }
            kept.push(v);
        }
        kept.reverse();
        Value::Array(kept)
    }

    /// The newest `n` outcomes, oldest first.
    pub fn latest_outcomes(&self, n: usize) -> Vec<Value> {
        let skip = self.outcomes.len().saturating_sub(n);
        self.outcomes
            .iter()
            .skip(skip)
            .map(Outcome::to_json)
            .collect()
    }

    /// `healthy | degraded | unknown`: an observation, never a watchdog.
    pub fn health(&self, connected: bool, live: bool) -> &'static str {
        if self.meta_failed || self.outcomes_unpersisted || self.conversation_failed {
            "degraded"
        } else if connected && live {
            "healthy"
        } else if connected {
            "degraded"
        } else {
            "unknown"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parent() -> ParentRef {
        ParentRef {
            session_id: "p".into(),
            lifecycle_id: "l".into(),
            worker_id: "w".into(),
        }
    }

    #[test]
    fn the_lifecycle_moves_only_as_the_machine_allows() {
        use Lifecycle::*;
        use LifecycleEvent::*;
        let all = [
            Preparing,
            Starting,
            Ready,
            Stopping,
            Stopped,
            CleanupPending,
        ];
        let events = [Launch, Live, Stop, RetryStop, CleanupFailed];
        let allowed = [
            (Preparing, Launch, Starting),
            (Starting, Live, Ready),
            (Preparing, Stop, Stopping),
            (Starting, Stop, Stopping),
            (Ready, Stop, Stopping),
            (Stopping, RetryStop, Stopping),
            (CleanupPending, RetryStop, Stopping),
            (Stopped, RetryStop, Stopping),
            (Preparing, CleanupFailed, CleanupPending),
            (Starting, CleanupFailed, CleanupPending),
            (Ready, CleanupFailed, CleanupPending),
            (Stopping, CleanupFailed, CleanupPending),
            (CleanupPending, CleanupFailed, CleanupPending),
        ];
        for from in all {
            for event in events {
                let expected = allowed
                    .iter()
                    .find(|(f, e, _)| *f == from && *e == event)
                    .map(|(_, _, to)| *to);
                assert_eq!(from.after(event), expected, "{from:?} {event:?}");
            }
        }
        // A stop never reopens a closing child; a closing child takes no
        // launch.
        let mut c = Child::new(parent(), 1, "t".into(), 4096);
        assert!(c.apply(Launch));
        assert!(c.apply(Stop));
        assert!(!c.apply(Stop));
        assert!(!c.apply(Launch));
        assert_eq!(c.lifecycle(), Stopping);
    }

    #[test]
    fn stored_form_round_trips() {
        let mut c = Child::new(parent(), 2, "2026-01-01T00:00:00Z".into(), 4096);
        c.lifecycle = Lifecycle::CleanupPending;
        c.policy = Policy::Deny;
        c.cleanup_attempts = 2;
        c.retry_at_ms = Some(99);
        c.push_outcome(Outcome {
            request_id: "r1".into(),
            operation: "message".into(),
            state: OutcomeState::Finished,
            run_id: Some("run".into()),
            run_status: Some("completed".into()),
            summary: None,
            error: None,
            updated_at: "t".into(),
        });
        let back = Child::from_stored(&c.meta_json(), &c.outcomes_json(), 4096).unwrap();
        assert_eq!(back.parent, c.parent);
        assert_eq!(back.depth, 2);
        assert_eq!(back.lifecycle, Lifecycle::CleanupPending);
        assert_eq!(back.policy, Policy::Deny);
        assert_eq!(back.cleanup_attempts, 2);
        assert_eq!(back.retry_at_ms, Some(99));
        assert_eq!(back.outcomes, c.outcomes);
    }

    #[test]
    fn bad_records_are_refused() {
        let good = Child::new(parent(), 1, "t".into(), 4096).meta_json();
        for (key, bad) in [
            ("depth", json!(0)),
            ("lifecycle", json!("zombie")),
            ("policy", json!("maybe")),
            ("parent", json!({"session_id": "p"})),
        ] {
            let mut meta = good.clone();
            meta[key] = bad;
            assert!(
                Child::from_stored(&meta, &json!([]), 4096).is_err(),
                "{key}"
            );
        }
        assert!(Child::from_stored(&Value::Null, &json!([]), 4096).is_err());
    }

    #[test]
    fn the_outcome_tail_is_bounded() {
        let mut c = Child::new(parent(), 1, "t".into(), 4096);
        for i in 0..MAX_OUTCOMES + 5 {
            c.push_outcome(Outcome {
                request_id: format!("r{i}"),
                operation: "message".into(),
                state: OutcomeState::Sent,
                run_id: None,
                run_status: None,
                summary: None,
                error: None,
                updated_at: String::new(),
            });
        }
        assert_eq!(c.outcomes.len(), MAX_OUTCOMES);
        assert_eq!(c.outcomes[0].request_id, "r5");
        let latest = c.latest_outcomes(RECEIVE_OUTCOMES);
        assert_eq!(latest.len(), RECEIVE_OUTCOMES);
        assert_eq!(latest[19]["request_id"], format!("r{}", MAX_OUTCOMES + 4));
        assert!(c.outcomes_json().to_string().len() <= MAX_OUTCOME_BYTES);
    }

    #[test]
    fn ids_use_the_reserved_prefix() {
        let id = new_id();
        assert!(is_child_id(&id));
        assert_eq!(id.len(), ID_PREFIX.len() + 36);
        assert!(!is_child_id("subagent"));
    }
}
