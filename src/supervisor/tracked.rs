//! The spawn lock: the children this hub reaps itself, so the orphan
//! reaper leaves them alone. Workers (`control`) and Docker management
//! commands (`container`) are spawned under it.

use std::process::Command;
use std::sync::Mutex;

/// The pids of the children this hub waits on itself (each has a waiter
/// thread in `wait()`). The lock is the spawn lock: it is held across
/// `spawn()` and the insert of the new pid, and across the orphan reaper's
/// `waitpid` calls, so the reaper never takes a just-spawned worker for an
/// orphan. Nothing else happens under it (no `/proc` read, SQLite call or
/// other lock).
static WAITED: Mutex<Vec<u32>> = Mutex::new(Vec::new());

pub(super) fn waited() -> std::sync::MutexGuard<'static, Vec<u32>> {
    WAITED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Spawns a short-lived helper child (a Docker management command) that
/// the caller waits on itself: listed under the spawn lock like a worker,
/// so the orphan reaper leaves it alone. The caller calls [`untrack`]
/// once it has reaped it.
pub(super) fn spawn_tracked(command: &mut Command) -> std::io::Result<std::process::Child> {
    let mut waited = waited();
    let child = command.spawn()?;
    waited.push(child.id());
    Ok(child)
}

/// Forgets a child of [`spawn_tracked`] after its exit was collected.
pub(super) fn untrack(pid: u32) {
    waited().retain(|&p| p != pid);
}
