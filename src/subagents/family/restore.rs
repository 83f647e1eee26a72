//! Restore and recovery: loading children from the store after a hub
//! restart, deciding which families stay and which are stopped and
//! cleaned up, and the operator's recovery of retained children
//! (`/recovery`, `/recover`, the global fork block).

use std::sync::Arc;

use super::cleanup::{cleanup, pending_cleanups, start_ticker, stop_worker};
use super::persist::{load_conversation, persist_meta, persist_outcomes};
use super::startup::{launch, startup_deadline, watch_startup};
use super::stop::{begin_stop, stop_children};
use super::{set_reason, spawn_thread};
use crate::session::headless::{
    Child, CleanupState, Lifecycle, LifecycleEvent, ParentRef, RecoveryRefused,
};
use crate::subagents::Service;
use crate::subagents::{Refusal, KIND};
use crate::supervisor::control::StopMode;
use crate::util::time;

/// Restores children from the store into their (already loaded) sessions.
/// Unreadable ownership records block new forks; their data stays.
pub fn load(sv: &Service) {
    let records = match sv.store.lock().load_subagents() {
        Ok(records) => records,
        Err(err) => {
            sv.family
                .block(format!("subagent records cannot be read: {err}"));
            return;
        }
    };
    let bytes = sv.config.subagents.conversation_bytes;
    for rec in records {
        match Child::from_stored(&rec.meta, &rec.outcomes, bytes) {
            Ok(mut child) => {
                if let Some(conversation) = load_conversation(sv, &rec.id) {
                    child.restore_conversation(conversation);
                }
                // Delivery that was not confirmed before the restart is
                // unknown; it is never resent.
                child.forget_in_flight(&time::now_rfc3339());
                let attached = sv.sessions.with(&rec.id, |s| s.attach_headless(child));
                if attached.is_none() {
                    sv.family
                        .block(format!("subagent {} has no session record", rec.id));
                } else {
                    persist_outcomes(sv, &rec.id);
                }
            }
            Err(err) => sv
                .family
                .block(format!("subagent {} is quarantined: {err}", rec.id)),
        }
    }
    // A headless session row without an ownership record is quarantined.
    let orphans: Vec<String> = sv
        .sessions
        .scan(|s| (s.kind() == KIND && !s.is_headless()).then(|| s.id().to_string()));
    for id in orphans {
        sv.family
            .block(format!("headless session {id} has no ownership record"));
    }
}

/// After a restart (processes already adopted; `launched` are the sessions
/// that had a process record before adoption): keeps ready children of a
/// live parent incarnation, gives unfinished startups a deadline, and
/// stops and cleans up stale families and stopping intents. A child that
/// was starting without any process record may have a worker nobody knows
/// of: it is kept `cleanup-pending` for the operator (`uncertain_start`).
pub fn restore(sv: &Arc<Service>, launched: &[String]) {
    let children: Vec<(String, ParentRef, Lifecycle, bool)> = sv.sessions.scan(|s| {
        let c = s.headless()?;
        let alive = s.process().is_some_and(|p| p.state.is_active());
        Some((s.id().to_string(), c.parent().clone(), c.lifecycle(), alive))
    });
    for (id, parent, lifecycle, alive) in children {
        if lifecycle == Lifecycle::Starting && !alive && !launched.contains(&id) {
            let meta = sv
                .sessions
                .with(&id, |s| {
                    let c = s.headless_mut()?;
                    c.mark_uncertain_start();
                    Some(c.meta_json())
                })
                .flatten();
            if let Some(meta) = meta {
                persist_meta(sv, &id, &meta);
            }
            log::warn!("subagent {id}: uncertain startup; kept for operator recovery");
            continue;
        }
        let parent_live = sv
            .sessions
            .with(&parent.session_id, |p| {
                p.lifecycle_id() == parent.lifecycle_id
                    && p.process().is_some_and(|x| x.state.is_active())
            })
            .unwrap_or(false);
        let stale = !parent_live;
        if lifecycle == Lifecycle::CleanupPending {
            // Retained: its stored attempt count and backoff stand; a
            // restart neither resets nor skips them (the ticker retries).
            sv.sessions.with(&id, |s| {
                if let Some(c) = s.headless_mut() {
                    c.freeze();
                }
            });
            continue;
        }
        if stale || lifecycle.is_closing() {
            if stale {
                set_reason(sv, &id, "the parent incarnation is gone");
            }
            log::info!("subagent {id}: stale after restart; stopping and cleaning up");
            begin_stop(sv, &id, None);
            if !alive {
                cleanup(sv, &id);
            }
            continue;
        }
        match (lifecycle, alive) {
            (Lifecycle::Ready, true) => {
                log::info!("subagent {id}: kept ready, awaiting its reconnection");
            }
            (Lifecycle::Preparing | Lifecycle::Starting, true) => {
                let (hub2, id2) = (sv.clone(), id.clone());
                let deadline = startup_deadline(sv);
                if let Err(err) = spawn_thread("subagent-start", move || {
                    watch_startup(&hub2, &id2, deadline)
                }) {
                    log::error!("subagent {id}: cannot watch its startup: {err}");
                }
            }
            (Lifecycle::Preparing, false) => {
                let (hub2, id2) = (sv.clone(), id.clone());
                if let Err(err) = spawn_thread("subagent-start", move || launch(&hub2, &id2)) {
                    log::error!("subagent {id}: cannot schedule its startup: {err}");
                }
            }
            _ => {
                set_reason(sv, &id, "the child worker is gone after a hub restart");
                begin_stop(sv, &id, None);
                cleanup(sv, &id);
            }
        }
    }
    if !pending_cleanups(sv, u64::MAX).0.is_empty() {
        start_ticker(sv);
    }
}

/// A headless child's recovery state (`GET /api/sessions/:id/recovery`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    pub session_id: String,
    pub lifecycle_id: String,
    pub process_alive: bool,
    pub connected: bool,
    pub cleanup: CleanupState,
}

/// The recovery state of headless child `id` (`None`: no such child).
pub fn recovery_info(sv: &Service, id: &str) -> Option<Recovery> {
    sv.sessions
        .with(id, |s| {
            let c = s.headless()?;
            let alive = s.process().is_some_and(|p| p.state.is_active());
            Some(Recovery {
                session_id: s.id().to_string(),
                lifecycle_id: s.lifecycle_id().to_string(),
                process_alive: alive,
                connected: s.connected(),
                cleanup: c.cleanup_state(s.process().is_some() && !alive),
            })
        })
        .flatten()
}

/// What a recovery did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovered {
    /// The child's worker still ran: it is being stopped, and cleaned up
    /// once gone.
    Stopping,
    /// The child was cleaned up and removed.
    Removed,
}

impl Recovered {
    pub fn as_str(self) -> &'static str {
        match self {
            Recovered::Stopping => "stopping",
            Recovered::Removed => "removed",
        }
    }
}

/// What an operator asks of a retained child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoverAction {
    /// A fresh bounded cleanup budget.
    Retry,
    /// The operator attests the worker is gone.
    ConfirmTerminated,
}

impl RecoverAction {
    pub fn parse(s: &str) -> Option<RecoverAction> {
        match s {
            "retry" => Some(RecoverAction::Retry),
            "confirm-terminated" => Some(RecoverAction::ConfirmTerminated),
            _ => None,
        }
    }
}

/// `POST /api/sessions/:id/recover`. `Err` carries a stable code:
/// `not_found`, `invalid_policy` (not headless), `stale_lifecycle`,
/// `recovery_conflict` (alive, connected, in flight, or not retained) or
/// `cleanup_failed` (the attempt failed; the data stays).
pub fn recover(
    sv: &Arc<Service>,
    id: &str,
    action: RecoverAction,
    lifecycle_id: &str,
) -> Result<Recovered, Refusal> {
    let checked = sv
        .sessions
        .with(id, |s| {
            let alive = s.process().is_some_and(|p| p.state.is_active());
            let connected = s.connected();
            let current = s.lifecycle_id().to_string();
            let c = s.headless_mut()?;
            if current != lifecycle_id {
                return Some(Err(Refusal::StaleLifecycle(
                    "the lifecycle id is not the child's current one".into(),
                )));
            }
            let confirm = action == RecoverAction::ConfirmTerminated;
            if let Err(refused) = c.recover(confirm, alive || connected) {
                let message = match refused {
                    RecoveryRefused::InFlight => "a cleanup attempt is in flight".to_string(),
                    RecoveryRefused::NotRetained(lifecycle) => {
                        format!("the child is {lifecycle}, not retained")
                    }
                    RecoveryRefused::WorkerAlive => {
                        "the recorded worker is known to be alive or connected".to_string()
                    }
                };
                return Some(Err(Refusal::RecoveryConflict(message)));
            }
            Some(Ok((c.meta_json(), alive)))
        })
        .flatten();
    let (meta, alive) = match checked {
        None if sv.sessions.with(id, |_| ()).is_some() => {
            return Err(Refusal::InvalidPolicy(
                "recovery applies to headless sessions only".into(),
            ))
        }
        None => return Err(Refusal::NotFound("no such session".into())),
        Some(Err(refusal)) => return Err(refusal),
        Some(Ok(v)) => v,
    };
    // The attestation (or the fresh budget) is saved before cleanup.
    persist_meta(sv, id, &meta);
    if alive {
        // Retry of a child whose worker still runs: stop it again; the
        // waiter cleans up once it is gone.
        sv.sessions.with(id, |s| {
            if let Some(c) = s.headless_mut() {
                c.apply(LifecycleEvent::RetryStop);
            }
        });
        stop_children(sv, id, "an ancestor stopped");
        stop_worker(sv, id, StopMode::ForceKill);
        return Ok(Recovered::Stopping);
    }
    cleanup(sv, id);
    match recovery_info(sv, id) {
        None => Ok(Recovered::Removed),
        Some(info) => Err(Refusal::CleanupFailed(
            info.cleanup
                .reason
                .unwrap_or_else(|| "cleanup did not complete".to_string()),
        )),
    }
}

/// Why worker launches are blocked until the subagent storage is
/// repaired (`GET /api/subagents/recovery`), if they are.
pub fn global_recovery(sv: &Service) -> Option<String> {
    sv.family.blocked()
}
