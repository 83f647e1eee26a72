//! Open confirmation prompts and their transitions: a worker's request
//! opens one (at most a fixed number, ids unique), the worker identity is
//! judged until it is decidable, a decision settles it (the first one
//! wins), and it is retired when its socket ends. Pure: times are given;
//! the response frame is written by the caller after the lock.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use super::{IdentityState, Prompt, PromptState, Session};
use crate::wire::worker::confirm_frames::ConfirmationRequest;
use crate::ws::FrameWriter;

/// What the confirmation socket must do after a prompt was opened or
/// judged again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptStep {
    Wait,
    /// Deny at once (the hub's own decision) with this reason.
    Deny(&'static str),
}

/// Why a confirmation exchange ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptEnd {
    /// The worker closed the connection (or it failed).
    Disconnected,
    /// The hub's deadline passed.
    Deadline,
    /// A second frame on the one-request connection.
    ProtocolError,
    /// The hub is shutting down.
    Shutdown,
}

impl PromptEnd {
    /// The phase clients are told (an undecided prompt's resolution source).
    pub fn phase(self) -> &'static str {
        match self {
            PromptEnd::Disconnected => "disconnected",
            PromptEnd::Deadline => "deadline",
            PromptEnd::ProtocolError => "protocol-error",
            PromptEnd::Shutdown => "shutdown",
        }
    }

    /// Why, in words.
    pub fn detail(self) -> &'static str {
        match self {
            PromptEnd::Disconnected => "the confirmation connection closed",
            PromptEnd::Deadline => "the confirmation deadline passed before a decision",
            PromptEnd::ProtocolError => "more than one frame on the confirmation connection",
            PromptEnd::Shutdown => "the hub is shutting down",
        }
    }
}

/// A prompt whose exchange ended, as it was when it closed: what the
/// closing announcement renders.
#[derive(Debug, Clone)]
pub struct ClosedPrompt {
    pub session_id: String,
    /// A headless child's parent session.
    pub parent_session_id: Option<String>,
    pub prompt: Prompt,
    pub end: PromptEnd,
}

impl ClosedPrompt {
    pub fn confirmation_id(&self) -> &str {
        &self.prompt.request.confirmation_id
    }

    /// The decision it had (`None`: it closed unanswered).
    pub fn decision(&self) -> Option<bool> {
        self.prompt.decision
    }

    /// How it ended, as the panel protocol's `outcome`.
    pub fn outcome(&self) -> Value {
        let decision = self
            .prompt
            .decision
            .map(|d| if d { "approved" } else { "denied" });
        crate::wire::panel::outcome(decision, self.end.phase(), self.end.detail())
    }
}

/// Why a request opened no prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotOpened {
    /// A prompt with this confirmation id is already open.
    Duplicate,
    /// The session holds the most prompts it may.
    Full,
}

/// Why an operator decision was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecideError {
    /// No open prompt has this id (never existed, or retired).
    Unknown,
    /// The prompt cannot take this decision now (already answered, or its
    /// worker identity is not verified yet).
    Rejected(&'static str),
}

impl fmt::Display for DecideError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecideError::Unknown => f.write_str("that confirmation is no longer open"),
            DecideError::Rejected(why) => write!(f, "decision refused: {why}"),
        }
    }
}

impl std::error::Error for DecideError {}

/// A request about to become a prompt.
pub struct NewPrompt {
    pub conn_id: u64,
    pub request: ConfirmationRequest,
    pub received_at: String,
    pub deadline_at: String,
    pub writer: Arc<FrameWriter>,
}

/// Whether a request can be decided now.
enum Verdict {
    /// The live worker is the requester (and, for a headless child, the
    /// request's run is its active run): the prompt is decidable.
    Verified,
    /// A live worker that is not the requester: denied at once.
    Foreign,
    /// Not yet: held until the identity hold ends, then denied with this
    /// reason.
    Held(&'static str),
}

const FOREIGN: &str = "the request does not come from the connected worker";

impl Session {
    /// The open prompts, oldest first.
    pub fn prompts(&self) -> &[Prompt] {
        &self.prompts
    }

    pub fn prompt(&self, confirmation_id: &str) -> Option<&Prompt> {
        self.prompts
            .iter()
            .find(|p| p.request.confirmation_id == confirmation_id)
    }

    /// Opens a prompt for `new` and judges the worker identity: decidable
    /// when the live worker is the requester, denied at once when another
    /// worker is live, held otherwise. At most `max_open` prompts; a
    /// refused request comes back with the reason.
    pub fn open_prompt(
        &mut self,
        new: NewPrompt,
        max_open: usize,
    ) -> Result<PromptStep, (NotOpened, Box<NewPrompt>)> {
        if self.prompt(&new.request.confirmation_id).is_some() {
            return Err((NotOpened::Duplicate, Box::new(new)));
        }
        if self.prompts.len() >= max_open {
            return Err((NotOpened::Full, Box::new(new)));
        }
        let (state, step) = match self.verify(&new.request) {
            Verdict::Verified => (PromptState::AwaitingDecision, PromptStep::Wait),
            Verdict::Foreign => (PromptState::AwaitingDecision, PromptStep::Deny(FOREIGN)),
            Verdict::Held(_) => (PromptState::AwaitingIdentity, PromptStep::Wait),
        };
        let decidable = state == PromptState::AwaitingDecision && step == PromptStep::Wait;
        self.prompts.push(Prompt {
            conn_id: new.conn_id,
            verified: decidable,
            identity_state: self.identity,
            request: new.request,
            state,
            received_at: new.received_at,
            deadline_at: new.deadline_at,
            settled_at: None,
            decision: None,
            reason: None,
            writer: new.writer,
        });
        Ok(step)
    }

    /// Judges a held prompt again (`hold_expired`: the identity hold is
    /// over, so a prompt still not decidable is denied). Returns its state
    /// and what to do; `None` when the prompt is gone.
    pub fn recheck_prompt(
        &mut self,
        confirmation_id: &str,
        hold_expired: bool,
    ) -> Option<(PromptState, PromptStep)> {
        let index = self.prompt_index(confirmation_id)?;
        if self.prompts[index].state != PromptState::AwaitingIdentity {
            return Some((self.prompts[index].state, PromptStep::Wait));
        }
        let verdict = self.verify(&self.prompts[index].request);
        let identity = self.identity;
        let prompt = &mut self.prompts[index];
        prompt.identity_state = identity;
        let step = match verdict {
            Verdict::Verified => {
                prompt.state = PromptState::AwaitingDecision;
                prompt.verified = true;
                PromptStep::Wait
            }
            Verdict::Foreign => PromptStep::Deny(FOREIGN),
            Verdict::Held(why) if hold_expired => PromptStep::Deny(why),
            Verdict::Held(_) => PromptStep::Wait,
        };
        Some((prompt.state, step))
    }

    /// Settles a decidable prompt (an operator's or a policy's decision):
    /// the first decision wins; a prompt whose identity is not verified
    /// takes none.
    pub fn settle_prompt(
        &mut self,
        confirmation_id: &str,
        approved: bool,
        reason: Option<&str>,
        now: &str,
    ) -> Result<&Prompt, DecideError> {
        let index = self
            .prompt_index(confirmation_id)
            .ok_or(DecideError::Unknown)?;
        match self.prompts[index].state {
            PromptState::AwaitingDecision => {}
            PromptState::AwaitingIdentity => {
                return Err(DecideError::Rejected(
                    "the worker identity is not verified yet",
                ))
            }
            PromptState::Decided => return Err(DecideError::Rejected("already answered")),
        }
        Ok(settle(&mut self.prompts[index], approved, reason, now))
    }

    /// Denies a prompt on the hub's own authority (identity, capacity),
    /// whatever its identity state; `None` when it is gone or decided.
    pub fn deny_prompt(
        &mut self,
        confirmation_id: &str,
        reason: &str,
        now: &str,
    ) -> Option<&Prompt> {
        let index = self.prompt_index(confirmation_id)?;
        if self.prompts[index].state == PromptState::Decided {
            return None;
        }
        Some(settle(&mut self.prompts[index], false, Some(reason), now))
    }

    /// Removes the prompt of connection `conn_id`, whose exchange ended
    /// (`end`, at `now`); a retired prompt can no longer be answered. One
    /// never decided is settled as retired, with why its exchange ended.
    pub fn retire_prompt(
        &mut self,
        confirmation_id: &str,
        conn_id: u64,
        end: PromptEnd,
        now: &str,
    ) -> Option<ClosedPrompt> {
        let pos = self
            .prompts
            .iter()
            .position(|p| p.request.confirmation_id == confirmation_id && p.conn_id == conn_id)?;
        let mut prompt = self.prompts.remove(pos);
        if prompt.decision.is_none() {
            prompt.settled_at = Some(now.to_string());
            prompt.reason = Some(end.detail().to_string());
        }
        Some(ClosedPrompt {
            session_id: self.id.clone(),
            parent_session_id: self
                .subagent
                .as_ref()
                .map(|child| child.parent().session_id.clone()),
            prompt,
            end,
        })
    }

    fn prompt_index(&self, confirmation_id: &str) -> Option<usize> {
        self.prompts
            .iter()
            .position(|p| p.request.confirmation_id == confirmation_id)
    }

    /// Live and equal is decidable (a headless child also needs the
    /// request's run to be its active run); live and different is foreign;
    /// anything else holds.
    fn verify(&self, request: &ConfirmationRequest) -> Verdict {
        match self.identity {
            IdentityState::Live
                if self.worker_id.as_deref() == Some(request.worker_id.as_str()) =>
            {
                if self.is_headless() && self.active_run.as_deref() != Some(request.run_id.as_str())
                {
                    Verdict::Held("the request's run is not the subagent's active run")
                } else {
                    Verdict::Verified
                }
            }
            IdentityState::Live => Verdict::Foreign,
            IdentityState::Unknown | IdentityState::Stale => {
                Verdict::Held("the worker identity was not verified in time")
            }
        }
    }
}

fn settle<'a>(
    prompt: &'a mut Prompt,
    approved: bool,
    reason: Option<&str>,
    now: &str,
) -> &'a Prompt {
    prompt.state = PromptState::Decided;
    prompt.decision = Some(approved);
    prompt.reason = reason.map(str::to_string);
    prompt.settled_at = Some(now.to_string());
    prompt
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::session::testkit::{self, writer};
    use crate::session::WorkerLink;
    use crate::wire::worker::confirm_frames::parse_confirmation_request;
    use crate::wire::worker::envelope;

    /// A session whose live worker is `worker`.
    fn live(worker: &str) -> Session {
        let mut s = testkit::session("l");
        s.attach_link(WorkerLink {
            conn_id: 1,
            writer: writer(),
        })
        .unwrap();
        if !worker.is_empty() {
            let frame = json!({"type": "event", "event": "status", "session_id": "s",
                "worker_id": worker, "request_id": "", "run_id": "", "sequence": 1,
                "data": {}});
            let env = envelope::parse_event(&frame.to_string(), "s").unwrap();
            s.observe_envelope(&env, "t");
        }
        s
    }

    fn new(id: &str, worker: &str, conn_id: u64) -> NewPrompt {
        let text = json!({"type": "confirmation_request", "data": {
            "worker_id": worker, "session_id": "s", "run_id": "r",
            "confirmation_id": id, "call": {"id": "c", "name": "run_command"}}})
        .to_string();
        NewPrompt {
            conn_id,
            request: parse_confirmation_request(&text, "s").unwrap(),
            received_at: "t".into(),
            deadline_at: "t+1".into(),
            writer: writer(),
        }
    }

    fn open(s: &mut Session, new: NewPrompt, max_open: usize) -> Result<PromptStep, NotOpened> {
        s.open_prompt(new, max_open).map_err(|(why, _)| why)
    }

    #[test]
    fn the_requesting_live_worker_makes_a_prompt_decidable() {
        let mut s = live("w");
        assert_eq!(open(&mut s, new("a", "w", 5), 4), Ok(PromptStep::Wait));
        let p = s.prompt("a").unwrap();
        assert_eq!(p.state, PromptState::AwaitingDecision);
        assert!(p.verified);
        // Another live worker's request is denied at once.
        assert_eq!(
            open(&mut s, new("b", "other", 6), 4),
            Ok(PromptStep::Deny(FOREIGN))
        );
        assert!(!s.prompt("b").unwrap().verified);
    }

    #[test]
    fn ids_are_unique_and_the_count_is_capped() {
        let mut s = live("w");
        open(&mut s, new("a", "w", 1), 2).unwrap();
        assert_eq!(open(&mut s, new("a", "w", 2), 2), Err(NotOpened::Duplicate));
        open(&mut s, new("b", "w", 3), 2).unwrap();
        assert_eq!(open(&mut s, new("c", "w", 4), 2), Err(NotOpened::Full));
        assert_eq!(s.prompts().len(), 2);
    }

    #[test]
    fn a_held_prompt_becomes_decidable_or_is_denied_when_the_hold_ends() {
        let mut s = live("");
        assert_eq!(open(&mut s, new("a", "w", 1), 4), Ok(PromptStep::Wait));
        assert_eq!(s.prompt("a").unwrap().state, PromptState::AwaitingIdentity);
        assert_eq!(
            s.settle_prompt("a", true, None, "t").err(),
            Some(DecideError::Rejected(
                "the worker identity is not verified yet"
            ))
        );
        assert_eq!(
            s.recheck_prompt("a", false),
            Some((PromptState::AwaitingIdentity, PromptStep::Wait))
        );
        let (state, step) = s.recheck_prompt("a", true).unwrap();
        assert_eq!(state, PromptState::AwaitingIdentity);
        assert!(matches!(step, PromptStep::Deny(_)));

        let mut s = live("");
        open(&mut s, new("a", "w", 1), 4).unwrap();
        let frame = json!({"type": "event", "event": "status", "session_id": "s",
            "worker_id": "w", "request_id": "", "run_id": "", "sequence": 1, "data": {}});
        s.observe_envelope(
            &envelope::parse_event(&frame.to_string(), "s").unwrap(),
            "t",
        );
        assert_eq!(
            s.recheck_prompt("a", false),
            Some((PromptState::AwaitingDecision, PromptStep::Wait))
        );
        assert!(s.prompt("a").unwrap().verified);
    }

    #[test]
    fn the_first_decision_wins_and_retired_prompts_take_none() {
        let mut s = live("w");
        open(&mut s, new("a", "w", 7), 4).unwrap();
        let p = s.settle_prompt("a", false, Some("no"), "t1").unwrap();
        assert_eq!((p.decision, p.reason.as_deref()), (Some(false), Some("no")));
        assert_eq!(
            s.settle_prompt("a", true, None, "t2").err(),
            Some(DecideError::Rejected("already answered"))
        );
        assert!(s.deny_prompt("a", "late", "t3").is_none());
        // Only its own connection retires it.
        assert!(s
            .retire_prompt("a", 8, PromptEnd::Disconnected, "t")
            .is_none());
        // Decided before it closed: it keeps its decision.
        let closed = s.retire_prompt("a", 7, PromptEnd::Deadline, "t9").unwrap();
        let viewed = closed.view();
        assert_eq!(
            (
                viewed.retired,
                viewed.state,
                viewed.settled_at.as_deref(),
                viewed.reason.as_deref()
            ),
            (false, PromptState::Decided, Some("t1"), Some("no"))
        );
        assert_eq!(
            closed.outcome(),
            json!({"phase": "decided", "detail": "denied"})
        );
        // Never answered: retired, with why its exchange ended.
        open(&mut s, new("b", "w", 9), 4).unwrap();
        let closed = s.retire_prompt("b", 9, PromptEnd::Deadline, "t9").unwrap();
        assert_eq!(closed.decision(), None);
        let viewed = closed.view();
        assert_eq!(
            (
                viewed.retired,
                viewed.settled_at.as_deref(),
                viewed.reason.as_deref()
            ),
            (true, Some("t9"), Some(PromptEnd::Deadline.detail()))
        );
        assert_eq!(
            closed.outcome(),
            json!({"phase": "deadline", "detail": PromptEnd::Deadline.detail()})
        );
        assert_eq!(
            s.settle_prompt("a", true, None, "t4").err(),
            Some(DecideError::Unknown)
        );
    }
}
