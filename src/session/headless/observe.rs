//! What a headless child's worker events change in its record, applied
//! under the session lock by the event socket (pure apart from the
//! session it is given): readiness, request outcomes, and the
//! conversation projection. The caller persists and announces afterwards.

use serde_json::Value;

use super::{LifecycleEvent, Outcome, OutcomeState};
use crate::session::{IdentityState, Session};
use crate::wire::worker::envelope::Envelope;

/// What changed, for the caller to persist and announce.
#[derive(Debug, Default, PartialEq)]
pub struct Observed {
    /// The lifecycle changed: the new stored metadata.
    pub meta: Option<Value>,
    /// The outcome tail changed (or an earlier write is still owed).
    pub outcomes: bool,
    /// Something the session description shows changed.
    pub changed: bool,
    /// The conversation projection changed (a coalesced write is due).
    pub conversation: bool,
    /// The projection should be reconciled from worker history now.
    pub refresh: bool,
}

/// Applies one event of a headless child's worker.
pub fn observe(s: &mut Session, env: &Envelope, now: &str) -> Observed {
    let live = s.identity() == IdentityState::Live;
    let no_run = s.active_run().is_none();
    let Some(c) = s.headless_mut() else {
        return Observed::default();
    };
    let mut seen = Observed {
        outcomes: c.outcomes_unpersisted,
        ..Observed::default()
    };
    if live && c.apply(LifecycleEvent::Live) {
        seen.meta = Some(c.meta_json());
        seen.changed = true;
    }
    let revision = c.conversation.revision();
    let data = env.data();
    let null = Value::Null;
    let body = data.unwrap_or(&null);
    if !env.worker_id().is_empty() && c.conversation.worker_id() != Some(env.worker_id()) {
        c.conversation.on_connection(env.worker_id());
        c.refresh_attempts = 0;
    }
    match env.event() {
        "input_committed" => {
            let at = c
                .sent_content
                .iter()
                .position(|(id, _)| *id == env.request_id());
            let content = at
                .and_then(|i| c.sent_content.remove(i))
                .map_or(Value::Null, |(_, content)| content);
            c.conversation.on_input_committed(env.run_id(), &content);
        }
        "model_response" => c.conversation.on_model_response(env.run_id(), body),
        "compact_finished" => c.conversation.on_compact_finished(body),
        "run_finished" => c.refresh_attempts = 0,
        _ => {}
    }
    if c.conversation.revision() != revision {
        c.conversation_dirty = true;
        seen.conversation = true;
    }
    // Reconcile from history while idle: after a settlement, or on a new
    // connection, when the projection may have missed something.
    let idle =
        env.event() == "run_finished" || (matches!(env.event(), "ready" | "status") && no_run);
    seen.refresh = idle && live && c.conversation.stale() && !c.refresh_running;
    let field = |k: &str| data.and_then(|d| d.get(k)).and_then(Value::as_str);
    let touched = |o: &mut Outcome| {
        o.updated_at = now.to_string();
        true
    };
    let changed = match env.event() {
        "input_admitted" => match c.outcome_mut(env.request_id()) {
            Some(o) if o.state.is_in_flight() || o.state == OutcomeState::Unknown => {
                o.state = OutcomeState::Admitted;
                if !env.run_id().is_empty() {
                    o.run_id = Some(env.run_id().to_string());
                }
                touched(o)
            }
            _ => false,
        },
        "input_rejected" => {
            let id = field("request_id").unwrap_or(env.request_id());
            match c.outcome_mut(id) {
                Some(o) if o.state != OutcomeState::Finished => {
                    o.state = OutcomeState::Rejected;
                    o.error = Some(
                        [field("code"), field("message")]
                            .into_iter()
                            .flatten()
                            .collect::<Vec<_>>()
                            .join(": "),
                    );
                    touched(o)
                }
                _ => false,
            }
        }
        "run_started" => match c.outcome_mut(env.request_id()) {
            Some(o) if o.run_id.is_none() && !env.run_id().is_empty() => {
                o.run_id = Some(env.run_id().to_string());
                touched(o)
            }
            _ => false,
        },
        "run_finished" | "compact_finished" => {
            let compact = env.event() == "compact_finished";
            let run = env.run_id();
            let found = c.outcomes.iter_mut().rev().find(|o| {
                !matches!(o.state, OutcomeState::Finished | OutcomeState::Rejected)
                    && ((!run.is_empty() && o.run_id.as_deref() == Some(run))
                        || (!env.request_id().is_empty() && o.request_id == env.request_id()))
            });
            match found {
                Some(o) => {
                    o.state = OutcomeState::Finished;
                    if compact {
                        o.run_status.get_or_insert_with(|| "completed".into());
                        o.summary = data.and_then(|d| d.get("summary")).cloned();
                    } else {
                        o.run_status = field("status").map(str::to_owned);
                        if let Some(err) =
                            data.and_then(|d| d.get("error")).filter(|e| !e.is_null())
                        {
                            o.error = Some(match err.as_str() {
                                Some(text) => text.to_string(),
                                None => err.to_string(),
                            });
                        }
                    }
                    touched(o)
                }
                None => false,
            }
        }
        _ => false,
    };
    if changed {
        c.outcomes_unpersisted = true;
        seen.outcomes = true;
    }
    seen
}

/// The event connection of a child closed: requests only `sent` become
/// `unknown` (never retransmitted).
pub fn disconnected(s: &mut Session, now: &str) -> bool {
    let Some(c) = s.headless_mut() else {
        return false;
    };
    c.forget_in_flight(now)
}
