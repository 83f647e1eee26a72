//! Cleanup and retries: stopping a closing child's worker and cleaning
//! up once it is gone (`stop_worker`); removing a stopped child's whole
//! directory and records once its process is confirmed gone (for a Docker
//! launch: once its container is over, since the process record stays
//! active while the container runs on after its CLI,
//! `supervisor::container`); recording failures as `cleanup-pending` with
//! bounded automatic retries on a ticker thread; and the bounded cleanup
//! of every child at hub shutdown.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::persist::{persist_meta, Terminal};
use super::{children_of, lock, spawn_thread};
use crate::session::headless::{self as child, CleanupClaim};
use crate::session::Note;
use crate::store::StoreError;
use crate::subagents::Service;
use crate::supervisor::control::{self, StopMode};
use crate::util::time;

/// How often pending cleanups are looked at.
const RETRY_TICK: Duration = Duration::from_secs(5);

/// How long hub shutdown waits for child cleanups running elsewhere, and
/// how often it looks.
const SHUTDOWN_SETTLE: Duration = Duration::from_secs(10);
const SETTLE_POLL: Duration = Duration::from_millis(10);

/// Deletes a stopped child: its directory, then its records; keeps a
/// terminal record for the parent. A failure leaves the child
/// `cleanup-pending` with a bounded automatic retry.
pub fn cleanup(sv: &Arc<Service>, id: &str) {
    // A child with descendants still present waits for them: the last
    // one's cleanup comes back here.
    if !children_of(sv, id).is_empty() {
        return;
    }
    let claimed = sv
        .sessions
        .with(id, |s| {
            let alive = s.process().is_some_and(|p| p.state.is_active());
            s.headless_mut()?.claim_cleanup(alive)
        })
        .flatten();
    let Some(CleanupClaim {
        parent,
        reason,
        outcomes,
    }) = claimed
    else {
        return;
    };
    match remove_child(sv, id) {
        Ok(()) => {
            sv.family.remember(Terminal {
                id: id.to_string(),
                parent: parent.clone(),
                reason,
                outcomes,
                removed_ms: time::now_millis(),
            });
            sv.publisher.notify(Note::SessionRemoved {
                session: id.to_string(),
            });
            log::info!("subagent {id}: stopped and removed");
            // A parent child waiting on this one may now be removable.
            if child::is_child_id(&parent.session_id) {
                cleanup(sv, &parent.session_id);
            }
        }
        Err(err) => cleanup_failed(sv, id, &err.to_string(), true),
    }
}

/// Records a failed cleanup (or a stop that could not confirm the end):
/// `cleanup-pending`, with the next automatic attempt scheduled while the
/// budget lasts. `counted` says whether an attempt was spent.
pub(super) fn cleanup_failed(sv: &Arc<Service>, id: &str, err: &str, counted: bool) {
    log::warn!("subagent {id}: cleanup failed: {err}");
    let meta = sv
        .sessions
        .with(id, |s| {
            let c = s.headless_mut()?;
            c.cleanup_failed(err, counted, time::now_millis());
            Some(c.meta_json())
        })
        .flatten();
    if let Some(meta) = meta {
        persist_meta(sv, id, &meta);
        sv.publisher.notify(Note::SessionChanged {
            session: id.to_string(),
        });
        start_ticker(sv);
    }
}

/// Stops a closing child's worker. A worker that never ran (or already
/// exited) has no waiter to report it gone, so cleanup runs here;
/// otherwise `process_gone` runs it. A stop that cannot confirm the end
/// (no verified identity, alive after SIGKILL) leaves the child
/// `cleanup-pending`.
pub(super) fn stop_worker(sv: &Arc<Service>, id: &str, mode: StopMode) {
    let hub2 = sv.clone();
    let id2 = id.to_string();
    control::stop(
        &sv.services,
        id,
        mode,
        Box::new(move |result| match result {
            Err(failed) => cleanup_failed(&hub2, &id2, &failed.reason, false),
            Ok(stopped) if stopped.how.found_nothing() => cleanup(&hub2, &id2),
            Ok(_) => {}
        }),
    );
}

/// One automatic or operator retry: stop a worker that is still alive
/// (force-kill), else clean up.
fn retry_cleanup(sv: &Arc<Service>, id: &str) {
    let alive = sv
        .sessions
        .with(id, |s| {
            if let Some(c) = s.headless_mut() {
                c.cancel_retry();
            }
            s.process().is_some_and(|p| p.state.is_active())
        })
        .unwrap_or(false);
    if alive {
        stop_worker(sv, id, StopMode::ForceKill);
    } else {
        cleanup(sv, id);
    }
}

/// Removes the directory (never through a link, never outside the
/// managed root) and the records of a stopped child.
fn remove_child(sv: &Service, id: &str) -> Result<(), CleanupError> {
    let root = sv.config.data_dir.join("subagents");
    let dir = sv.session_dir(id);
    if dir.parent() != Some(root.as_path()) || !child::is_child_id(id) {
        return Err(CleanupError::OutsideRoot);
    }
    if let Ok(meta) = std::fs::symlink_metadata(&root) {
        if meta.file_type().is_symlink() {
            return Err(CleanupError::RootIsLink);
        }
    }
    if let Some(file) = sv.sessions.with(id, |s| s.take_log_file()).flatten() {
        file.close(Duration::from_secs(5));
    }
    crate::services::remove_session_dir(&dir)
        .map_err(|err| CleanupError::RemoveDir { dir, err })?;
    sv.store
        .lock()
        .delete_session(id)
        .map_err(CleanupError::DeleteRecords)?;
    sv.sessions.remove(id);
    Ok(())
}

/// Why a stopped child could not be removed.
#[derive(Debug)]
enum CleanupError {
    /// Its directory is not a child directory of `<dataDir>/subagents`.
    OutsideRoot,
    /// `<dataDir>/subagents` is a symbolic link.
    RootIsLink,
    RemoveDir {
        dir: PathBuf,
        err: std::io::Error,
    },
    DeleteRecords(StoreError),
}

impl fmt::Display for CleanupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CleanupError::OutsideRoot => {
                f.write_str("the child directory is outside the managed root")
            }
            CleanupError::RootIsLink => f.write_str("the subagents root is a symbolic link"),
            CleanupError::RemoveDir { dir, err } => {
                write!(f, "cannot remove {}: {err}", dir.display())
            }
            CleanupError::DeleteRecords(err) => {
                write!(f, "cannot delete the child's records: {err}")
            }
        }
    }
}

impl std::error::Error for CleanupError {}

/// Runs due automatic cleanups every five seconds while any is pending.
pub(super) fn start_ticker(sv: &Arc<Service>) {
    {
        let mut running = lock(&sv.family.ticker);
        if *running {
            return;
        }
        *running = true;
    }
    let hub2 = sv.clone();
    let spawned = spawn_thread("subagent-cleanup", move || loop {
        let sv = &hub2;
        #[expect(
            clippy::disallowed_methods,
            reason = "the retry timer of pending cleanups: one pass every RETRY_TICK; \
                      nothing joins this thread, so shutdown does not wait for the pause"
        )]
        std::thread::sleep(RETRY_TICK);
        if sv.is_shutting_down() {
            *lock(&sv.family.ticker) = false;
            return;
        }
        let now = time::now_millis();
        let (due, pending) = pending_cleanups(sv, now);
        for id in due {
            retry_cleanup(sv, &id);
        }
        if pending == 0 {
            *lock(&sv.family.ticker) = false;
            return;
        }
    });
    if let Err(err) = spawned {
        log::error!("cannot start the subagent cleanup thread: {err}");
        *lock(&sv.family.ticker) = false;
    }
}

/// Children due for an automatic cleanup attempt, and how many still wait.
pub(super) fn pending_cleanups(sv: &Service, now: u64) -> (Vec<String>, usize) {
    let waiting = sv
        .sessions
        .scan(|s| Some((s.headless()?.cleanup_due_at()?, s.id().to_string())));
    let count = waiting.len();
    let due = waiting
        .into_iter()
        .filter(|(at, _)| *at <= now)
        .map(|(_, id)| id)
        .collect();
    (due, count)
}

/// Hub shutdown, after every worker was stopped: cleans up every child
/// whose process is gone (descendants first), and waits (bounded) for
/// cleanups that worker waiter threads are running at the same time.
pub fn shutdown(sv: &Arc<Service>) {
    let mut ids: Vec<(u32, String)> = sv
        .sessions
        .scan(|s| Some((s.headless()?.depth(), s.id().to_string())));
    ids.sort_by_key(|entry| std::cmp::Reverse(entry.0));
    // One attempt each, as at any stop: a failed one leaves the child
    // `cleanup-pending` with its attempt counted, for the next start.
    for (_, id) in &ids {
        sv.sessions.with(id, |s| {
            if let Some(c) = s.headless_mut() {
                c.stop_for_shutdown();
            }
        });
        cleanup(sv, id);
    }
    // A waiter thread may be removing a child right now (its worker
    // exited during the stop), or may not have reported the exit yet (it
    // then cleans up itself): the hub must not exit under it.
    let busy = || {
        ids.iter()
            .filter(|(_, id)| {
                sv.sessions
                    .with(id, |s| {
                        let alive = s.process().is_some_and(|p| p.state.is_active());
                        alive || s.headless().is_some_and(|c| c.cleanup_in_flight())
                    })
                    .unwrap_or(false)
            })
            .count()
    };
    let deadline = Instant::now() + SHUTDOWN_SETTLE;
    loop {
        let left = busy();
        if left == 0 {
            return;
        }
        if Instant::now() >= deadline {
            log::warn!(
                "{left} subagent cleanups still running at shutdown; left for the next start"
            );
            return;
        }
        #[expect(
            clippy::disallowed_methods,
            reason = "cleanups on waiter threads are seen only in the session records, \
                      which have no change signal: looked at every SETTLE_POLL, at most \
                      SHUTDOWN_SETTLE"
        )]
        std::thread::sleep(SETTLE_POLL);
    }
}
