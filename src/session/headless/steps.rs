//! The named transitions of a headless child's record, beside the reads
//! the family code needs. The record's fields are private to `child`:
//! the family's threads (fork, send, stop cascade, cleanup and retries,
//! restore, recovery, refresh, conversation writes) change a child only
//! through these methods, each under the session lock and each pure (the
//! caller passes the clock and does the I/O afterwards).

use std::fmt;

use serde_json::Value;

use super::{
    Child, Lifecycle, LifecycleEvent, Outcome, OutcomeState, ParentRef, Policy,
    MAX_CLEANUP_ATTEMPTS, SENT_CONTENT,
};
use crate::session::headless::conversation::{
    Conversation, PublishError, Refresh, RefreshSnapshot,
};

/// What a claimed cleanup attempt needs after the lock is released.
#[derive(Debug)]
pub struct CleanupClaim {
    pub parent: ParentRef,
    pub reason: Option<String>,
    /// The newest outcomes, for the retained terminal record.
    pub outcomes: Vec<Value>,
}

/// Why a recovery request is refused, before anything changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoveryRefused {
    /// A cleanup attempt is running.
    InFlight,
    /// The child is not retained (its lifecycle is named).
    NotRetained(&'static str),
    /// `confirm-terminated` while the worker is known alive or connected.
    WorkerAlive,
}

/// Delays before the second and third automatic cleanup attempts.
pub const RETRY_DELAYS_MS: [u64; 2] = [10_000, 20_000];

/// A child's cleanup state as an operator sees it (`GET .../recovery`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CleanupState {
    pub lifecycle: Lifecycle,
    /// It was starting with no process record: a worker nobody knows of
    /// may exist.
    pub uncertain_start: bool,
    /// The operator attested, or the hub saw, that its worker ended.
    pub termination_confirmed: bool,
    pub cleanup_attempts: u32,
    /// An automatic retry is scheduled (at `retry_at_ms`).
    pub automatic_retry: bool,
    pub retry_at_ms: Option<u64>,
    pub reason: Option<String>,
}

impl Child {
    pub fn parent(&self) -> &ParentRef {
        &self.parent
    }

    /// 1 for a child of an ordinary session.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Why the child failed or is retained, when it did or is.
    #[cfg(test)]
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    pub fn created_at(&self) -> &str {
        &self.created_at
    }

    #[cfg(test)]
    pub fn cleanup_attempts(&self) -> u32 {
        self.cleanup_attempts
    }

    pub fn cleanup_in_flight(&self) -> bool {
        self.cleanup_in_flight
    }

    /// No forks, sends or automatic approvals: an ancestor is stopping or
    /// the child's own lifecycle is closing.
    pub fn closed_to_admission(&self) -> bool {
        self.frozen || self.lifecycle.is_closing()
    }

    pub fn conversation(&self) -> &Conversation {
        &self.conversation
    }

    /// How many outcomes the record holds.
    pub fn outcome_count(&self) -> usize {
        self.outcomes.len()
    }

    /// When a retained child's next automatic cleanup is due (ms since the
    /// epoch); `None` when none is scheduled.
    pub fn cleanup_due_at(&self) -> Option<u64> {
        let retained = self.lifecycle == Lifecycle::CleanupPending;
        (retained && self.automatic_retry)
            .then_some(self.retry_at_ms)
            .flatten()
    }

    /// Its cleanup state as an operator sees it; `termination_known` is
    /// the hub's own evidence that the recorded process ended.
    pub fn cleanup_state(&self, termination_known: bool) -> CleanupState {
        CleanupState {
            lifecycle: self.lifecycle,
            uncertain_start: self.uncertain_start,
            termination_confirmed: self.termination_confirmed || termination_known,
            cleanup_attempts: self.cleanup_attempts,
            automatic_retry: self.automatic_retry && self.retry_at_ms.is_some(),
            retry_at_ms: self.retry_at_ms,
            reason: self.reason.clone(),
        }
    }

    /// Records why the child is closing, unless a reason is already known.
    pub fn note_reason(&mut self, reason: &str) {
        self.reason.get_or_insert_with(|| reason.to_string());
    }

    /// Closes the family's admission through this child.
    pub fn freeze(&mut self) {
        self.frozen = true;
    }

    /// A supervised stop: freezes admission and enters `stopping`; false
    /// when the lifecycle was already past it (idempotent).
    pub fn begin_stop(&mut self) -> bool {
        self.frozen = true;
        self.apply(LifecycleEvent::Stop)
    }

    /// The hub is shutting down: stops the child with that reason.
    pub fn stop_for_shutdown(&mut self) {
        if self.apply(LifecycleEvent::Stop) {
            self.note_reason("the hub shut down");
        }
    }

    /// After a restart, the launch of this child was never confirmed: it
    /// is frozen and kept for the operator, with no automatic retry.
    pub fn mark_uncertain_start(&mut self) {
        self.uncertain_start = true;
        self.frozen = true;
        self.automatic_retry = false;
        self.retry_at_ms = None;
        self.apply(LifecycleEvent::CleanupFailed);
        self.reason = Some(
            "uncertain startup: the hub stopped between launching the worker and recording it; \
             stop any such worker, then confirm-terminated"
                .into(),
        );
    }

    /// The operator's safety policy.
    pub fn set_policy(&mut self, policy: Policy) {
        self.policy = policy;
    }

    /// Claims the one cleanup attempt that may run now; `None` while one
    /// runs, while the worker is `alive`, or before the child is closing.
    pub fn claim_cleanup(&mut self, alive: bool) -> Option<CleanupClaim> {
        if self.cleanup_in_flight || alive || !self.lifecycle.is_closing() {
            return None;
        }
        self.cleanup_in_flight = true;
        self.cleanup_attempts += 1;
        Some(CleanupClaim {
            parent: self.parent.clone(),
            reason: self.reason.clone(),
            outcomes: self.latest_outcomes(super::MAX_OUTCOMES),
        })
    }

    /// A cleanup attempt failed at `now_ms`: the child is retained with the
    /// error, and the next automatic attempt is scheduled while the budget
    /// lasts. `counted` says whether the attempt was claimed (and counted)
    /// through [`Child::claim_cleanup`].
    pub fn cleanup_failed(&mut self, error: &str, counted: bool, now_ms: u64) {
        self.cleanup_in_flight = false;
        self.apply(LifecycleEvent::CleanupFailed);
        self.reason = Some(format!("cleanup failed: {error}"));
        if !counted {
            self.cleanup_attempts += 1;
        }
        let attempt = self.cleanup_attempts.max(1);
        if self.automatic_retry && attempt < MAX_CLEANUP_ATTEMPTS {
            self.retry_at_ms = Some(now_ms + RETRY_DELAYS_MS[attempt as usize - 1]);
        } else {
            self.automatic_retry = false;
            self.retry_at_ms = None;
        }
    }

    /// The scheduled retry is being run now (or is no longer wanted).
    pub fn cancel_retry(&mut self) {
        self.retry_at_ms = None;
    }

    /// An operator recovery of a retained child (`retry`, or
    /// `confirm-terminated` when `confirm`): a fresh bounded cleanup
    /// budget, and the attestation when given. Nothing changes on refusal.
    pub fn recover(
        &mut self,
        confirm: bool,
        alive_or_connected: bool,
    ) -> Result<(), RecoveryRefused> {
        if self.cleanup_in_flight {
            return Err(RecoveryRefused::InFlight);
        }
        if !self.lifecycle.is_closing() {
            return Err(RecoveryRefused::NotRetained(self.lifecycle.as_str()));
        }
        if confirm {
            if alive_or_connected {
                return Err(RecoveryRefused::WorkerAlive);
            }
            self.termination_confirmed = true;
        }
        self.cleanup_attempts = 0;
        self.automatic_retry = true;
        self.retry_at_ms = None;
        Ok(())
    }

    /// A send was decided: its content (for a message) is remembered until
    /// the child commits it, and its outcome starts as `intent`.
    pub fn record_intent(
        &mut self,
        request_id: &str,
        operation: &str,
        content: Option<Value>,
        now: &str,
    ) {
        if let Some(content) = content {
            while self.sent_content.len() >= SENT_CONTENT {
                self.sent_content.pop_front();
            }
            self.sent_content
                .push_back((request_id.to_string(), content));
        }
        self.push_outcome(Outcome {
            request_id: request_id.to_string(),
            operation: operation.to_string(),
            state: OutcomeState::Intent,
            run_id: None,
            run_status: None,
            summary: None,
            error: None,
            updated_at: now.to_string(),
        });
    }

    /// The write of a send's payload ended: an `intent` becomes `state`
    /// (with the refusal's message as its error). An outcome the worker
    /// already moved on is left as it is.
    pub fn settle_intent(
        &mut self,
        request_id: &str,
        state: OutcomeState,
        error: Option<&str>,
        now: &str,
    ) {
        let Some(o) = self.outcome_mut(request_id) else {
            return;
        };
        if o.state != OutcomeState::Intent {
            return;
        }
        o.state = state;
        o.updated_at = now.to_string();
        if let Some(error) = error {
            o.error = Some(error.to_string());
        }
        self.outcomes_unpersisted = true;
    }

    /// Every delivery still in flight becomes `unknown` (it is never
    /// resent); true when one did.
    pub fn forget_in_flight(&mut self, now: &str) -> bool {
        let mut changed = false;
        for o in self.outcomes.iter_mut() {
            if o.state.is_in_flight() {
                o.state = OutcomeState::Unknown;
                o.updated_at = now.to_string();
                changed = true;
            }
        }
        if changed {
            self.outcomes_unpersisted = true;
        }
        changed
    }

    /// The outcome tail to store, when it changed since the last write.
    pub fn outcomes_to_store(&self) -> Option<Value> {
        self.outcomes_unpersisted.then(|| self.outcomes_json())
    }

    /// The store took the outcome tail (`true`) or refused it (the tail
    /// then stays owed, and the child shows degraded until a later write
    /// succeeds).
    pub fn outcomes_stored(&mut self, ok: bool) {
        if ok {
            self.outcomes_unpersisted = false;
        }
    }

    /// A metadata write succeeded or failed; the child shows degraded from
    /// a failure until the next successful write.
    pub fn meta_stored(&mut self, ok: bool) {
        self.meta_failed = !ok;
    }

    /// Replaces the projection with the one read back after a restart.
    pub fn restore_conversation(&mut self, conversation: Conversation) {
        self.conversation = conversation;
    }

    /// Claims the one coalesced `conversation.json` write; false when
    /// nothing is owed or a write is already scheduled.
    pub fn schedule_conversation_write(&mut self) -> bool {
        if !self.conversation_dirty || self.conversation_write_scheduled {
            return false;
        }
        self.conversation_write_scheduled = true;
        true
    }

    /// The scheduled write runs: the document to write, unless nothing is
    /// owed any more or a cleanup is removing the directory.
    pub fn take_conversation_write(&mut self) -> Option<Value> {
        self.conversation_write_scheduled = false;
        if !self.conversation_dirty || self.cleanup_in_flight {
            return None;
        }
        self.conversation_dirty = false;
        Some(self.conversation.to_json())
    }

    /// The write of `conversation.json` ended; a failed one marks the
    /// projection stale (readers are told it may be behind).
    pub fn conversation_written(&mut self, ok: bool) {
        self.conversation_failed = !ok;
        if !ok {
            self.conversation.mark_stale(true);
        }
    }

    /// Claims a history refresh when the worker can serve one (`history`:
    /// it advertises session history; `idle`: connected with no run) and
    /// the attempts since the last connection or settlement allow it.
    pub fn claim_refresh(&mut self, history: bool, idle: bool, attempts: u32) -> Option<Refresh> {
        if !history
            || !idle
            || self.refresh_running
            || self.refresh_attempts >= attempts
            || self.lifecycle.is_closing()
        {
            return None;
        }
        let refresh = self.conversation.start_refresh()?;
        self.refresh_running = true;
        self.refresh_attempts += 1;
        Some(refresh)
    }

    /// The claimed refresh never ran (its thread did not start).
    pub fn refresh_abandoned(&mut self) {
        self.refresh_running = false;
    }

    /// The refresh ended: a snapshot is published unless a live change
    /// came in meanwhile. `Ok(true)` when the projection changed.
    pub fn finish_refresh<E>(
        &mut self,
        outcome: Result<RefreshSnapshot, E>,
        now: &str,
    ) -> Result<bool, RefreshNotPublished<E>> {
        self.refresh_running = false;
        let snapshot = outcome.map_err(RefreshNotPublished::Failed)?;
        match self.conversation.publish_refresh(snapshot, now) {
            Ok(()) => {
                self.conversation_dirty = true;
                Ok(true)
            }
            Err(err) => Err(RefreshNotPublished::Rejected(err)),
        }
    }
}

/// Why a history refresh changed nothing ([`Child::finish_refresh`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefreshNotPublished<E> {
    /// The refresh read no snapshot (`E` says why).
    Failed(E),
    /// A live change or another worker came in meanwhile.
    Rejected(PublishError),
}

impl<E: fmt::Display> fmt::Display for RefreshNotPublished<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefreshNotPublished::Failed(err) => write!(f, "history refresh failed: {err}"),
            RefreshNotPublished::Rejected(err) => write!(f, "refresh not published: {err}"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for RefreshNotPublished<E> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn child() -> Child {
        let parent = ParentRef {
            session_id: "p".into(),
            lifecycle_id: "l".into(),
            worker_id: "w".into(),
        };
        Child::new(parent, 1, "t0".into(), 1 << 20)
    }

    /// A child whose lifecycle is closing (`stopping`).
    fn stopping() -> Child {
        let mut c = child();
        assert!(c.begin_stop());
        c
    }

    #[test]
    fn a_stop_freezes_admission_once() {
        let mut c = child();
        assert!(!c.closed_to_admission());
        assert!(c.begin_stop());
        assert!(c.closed_to_admission());
        assert_eq!(c.lifecycle(), Lifecycle::Stopping);
        // Idempotent: stopping again changes nothing.
        assert!(!c.begin_stop());
        let mut frozen = child();
        frozen.freeze();
        assert!(frozen.closed_to_admission());
        assert_eq!(frozen.lifecycle(), Lifecycle::Preparing);
    }

    #[test]
    fn the_first_reason_is_kept() {
        let mut c = child();
        c.note_reason("an ancestor stopped");
        c.note_reason("the hub shut down");
        assert_eq!(c.reason(), Some("an ancestor stopped"));
        let mut s = child();
        s.stop_for_shutdown();
        assert_eq!(s.reason(), Some("the hub shut down"));
        // A child already stopping keeps its own reason (none here).
        let mut t = stopping();
        t.stop_for_shutdown();
        assert_eq!(t.reason(), None);
    }

    #[test]
    fn one_cleanup_claim_at_a_time_and_only_when_closing_and_gone() {
        let mut c = child();
        assert!(c.claim_cleanup(false).is_none(), "not closing");
        let mut c = stopping();
        assert!(c.claim_cleanup(true).is_none(), "worker alive");
        let claim = c.claim_cleanup(false).expect("claimed");
        assert_eq!(claim.parent.session_id, "p");
        assert!(c.cleanup_in_flight());
        assert_eq!(c.cleanup_attempts(), 1);
        assert!(c.claim_cleanup(false).is_none(), "in flight");
    }

    #[test]
    fn failed_cleanups_retry_on_schedule_until_the_budget_ends() {
        let mut c = stopping();
        c.claim_cleanup(false).unwrap();
        c.cleanup_failed("busy", true, 1_000);
        assert_eq!(c.lifecycle(), Lifecycle::CleanupPending);
        assert!(!c.cleanup_in_flight());
        assert_eq!(c.reason(), Some("cleanup failed: busy"));
        assert_eq!(c.cleanup_due_at(), Some(1_000 + RETRY_DELAYS_MS[0]));
        c.claim_cleanup(false).unwrap();
        c.cleanup_failed("busy", true, 2_000);
        assert_eq!(c.cleanup_due_at(), Some(2_000 + RETRY_DELAYS_MS[1]));
        c.claim_cleanup(false).unwrap();
        c.cleanup_failed("busy", true, 3_000);
        assert_eq!(c.cleanup_attempts(), MAX_CLEANUP_ATTEMPTS);
        assert_eq!(c.cleanup_due_at(), None, "budget spent");
        // An attempt that was never claimed is still counted.
        let mut d = stopping();
        d.cleanup_failed("no claim", false, 0);
        assert_eq!(d.cleanup_attempts(), 1);
        d.cancel_retry();
        assert_eq!(d.cleanup_due_at(), None);
    }

    #[test]
    fn recovery_gives_a_fresh_budget_and_refuses_without_changing() {
        let mut c = child();
        assert_eq!(
            c.recover(false, false),
            Err(RecoveryRefused::NotRetained("preparing"))
        );
        let mut c = stopping();
        c.claim_cleanup(false).unwrap();
        assert_eq!(c.recover(false, false), Err(RecoveryRefused::InFlight));
        for _ in 0..3 {
            c.cleanup_failed("busy", true, 0);
            let _ = c.claim_cleanup(false);
        }
        c.cleanup_failed("busy", true, 0);
        assert_eq!(c.cleanup_due_at(), None);
        let before = c.meta_json();
        assert_eq!(c.recover(true, true), Err(RecoveryRefused::WorkerAlive));
        assert_eq!(c.meta_json(), before, "a refusal changes nothing");
        assert_eq!(c.recover(true, false), Ok(()));
        let meta = c.meta_json();
        assert_eq!(meta["termination_confirmed"], true);
        assert_eq!(meta["cleanup_attempts"], 0);
        assert_eq!(meta["automatic_retry"], true);
        assert_eq!(c.recover(false, true), Ok(()), "retry needs no attestation");
    }

    #[test]
    fn an_uncertain_start_is_kept_for_the_operator() {
        let mut c = child();
        c.mark_uncertain_start();
        assert_eq!(c.lifecycle(), Lifecycle::CleanupPending);
        assert!(c.closed_to_admission());
        assert_eq!(c.cleanup_due_at(), None);
        let state = c.cleanup_state(false);
        assert!(state.uncertain_start);
        assert!(!state.automatic_retry);
        assert!(state.reason.unwrap().contains("uncertain startup"));
    }

    #[test]
    fn an_intent_settles_once_and_sent_content_is_bounded() {
        let mut c = child();
        for i in 0..SENT_CONTENT + 3 {
            c.record_intent(&format!("r{i}"), "message", Some(Value::from(i)), "t1");
        }
        assert_eq!(c.sent_content.len(), SENT_CONTENT);
        assert_eq!(c.sent_content.front().unwrap().0, "r3");
        assert_eq!(c.outcome_count(), SENT_CONTENT + 3);
        c.outcomes_stored(true);
        assert!(c.outcomes_to_store().is_none());
        c.settle_intent("r0", OutcomeState::Rejected, Some("disconnected"), "t2");
        let stored = c.outcomes_to_store().expect("changed");
        assert_eq!(stored[0]["state"], "rejected");
        assert_eq!(stored[0]["error"], "disconnected");
        c.outcomes_stored(true);
        // Settled once: a later settlement of the same request is ignored.
        c.settle_intent("r0", OutcomeState::Sent, None, "t3");
        assert!(c.outcomes_to_store().is_none());
        c.settle_intent("missing", OutcomeState::Sent, None, "t3");
        assert!(c.outcomes_to_store().is_none());
    }

    #[test]
    fn in_flight_deliveries_become_unknown() {
        let mut c = child();
        c.record_intent("a", "message", None, "t1");
        c.record_intent("b", "message", None, "t1");
        c.settle_intent("b", OutcomeState::Rejected, None, "t1");
        c.outcomes_stored(true);
        assert!(c.forget_in_flight("t2"));
        let stored = c.outcomes_to_store().unwrap();
        assert_eq!(stored[0]["state"], "unknown");
        assert_eq!(stored[1]["state"], "rejected");
        c.outcomes_stored(true);
        assert!(!c.forget_in_flight("t3"), "nothing left in flight");
    }

    #[test]
    fn a_failed_store_write_degrades_health() {
        let mut c = child();
        assert_eq!(c.health(true, true), "healthy");
        c.record_intent("a", "message", None, "t1");
        c.outcomes_stored(false);
        assert_eq!(c.health(true, true), "degraded");
        assert!(c.outcomes_to_store().is_some(), "still owed");
        c.outcomes_stored(true);
        assert_eq!(c.health(true, true), "healthy");
        c.meta_stored(false);
        assert_eq!(c.health(true, true), "degraded");
        c.meta_stored(true);
        assert_eq!(c.health(true, true), "healthy", "a later write recovers");
    }

    #[test]
    fn conversation_writes_are_coalesced_and_skipped_during_cleanup() {
        let mut c = child();
        assert!(!c.schedule_conversation_write(), "nothing owed");
        c.conversation_dirty = true;
        assert!(c.schedule_conversation_write());
        assert!(!c.schedule_conversation_write(), "already scheduled");
        assert!(c.take_conversation_write().is_some());
        assert!(c.take_conversation_write().is_none(), "written");
        c.conversation_dirty = true;
        let mut claimed = stopping();
        claimed.conversation_dirty = true;
        claimed.claim_cleanup(false).unwrap();
        assert!(
            claimed.take_conversation_write().is_none(),
            "directory going"
        );
        c.conversation_written(false);
        assert!(c.conversation().stale());
        assert_eq!(c.health(true, true), "degraded");
        c.conversation_written(true);
        assert_eq!(c.health(true, true), "healthy");
    }

    #[test]
    fn a_refresh_is_claimed_within_its_attempts() {
        let mut c = child();
        assert!(c.claim_refresh(true, true, 2).is_none(), "no worker yet");
        c.conversation.on_connection("w1");
        assert!(c.claim_refresh(false, true, 2).is_none(), "no history");
        assert!(c.claim_refresh(true, false, 2).is_none(), "busy");
        assert!(c.claim_refresh(true, true, 2).is_some());
        assert!(c.claim_refresh(true, true, 2).is_none(), "running");
        c.refresh_abandoned();
        assert!(c.claim_refresh(true, true, 2).is_some());
        let failed = c.finish_refresh(Err("gone"), "t1").unwrap_err();
        assert_eq!(failed, RefreshNotPublished::Failed("gone"));
        assert_eq!(failed.to_string(), "history refresh failed: gone");
        assert!(c.claim_refresh(true, true, 2).is_none(), "attempts spent");
        let mut closing = stopping();
        closing.conversation.on_connection("w1");
        assert!(closing.claim_refresh(true, true, 2).is_none(), "closing");
    }

    #[test]
    fn the_policy_is_the_operators() {
        let mut c = child();
        c.set_policy(Policy::Approve);
        assert_eq!(c.policy(), Policy::Approve);
        assert_eq!(c.meta_json()["policy"], "approve");
    }
}
