//! Headless families at run time: clean-fork (quota, ownership files, the
//! durable record, scheduled startup), the startup deadline, stopping with
//! cascade to every descendant, cleanup of a child's whole directory once
//! its process is confirmed gone (bounded automatic retries), restoring
//! families after a hub restart, and the short-lived terminal records a
//! parent can still receive after its child is gone.
//!
//! Locks: the session registry lock is never held across store writes,
//! file I/O or process signals; `Family::fork` serializes quota decisions.
//!
//! Layout: this module holds the family-wide state ([`Family`]) and the
//! helpers every part shares; `fork`, `startup`, `stop`, `cleanup`,
//! `restore` (restart and operator recovery), `policy`, `persist` (durable
//! metadata, outcomes, terminal records, `conversation.json`) and
//! `refresh` (history refresh runs) are its parts.

mod cleanup;
mod fork;
mod persist;
mod policy;
mod refresh;
mod restore;
mod startup;
mod stop;

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use crate::subagents::Service;

pub use cleanup::shutdown;
pub use fork::{fork, Caller};
pub use persist::{
    persist_meta, persist_outcomes, schedule_conversation_write, Terminal, CONVERSATION_FILE,
};
pub use policy::set_policy;
pub use refresh::start_refresh;
pub use restore::{
    global_recovery, load, recover, recovery_info, restore, RecoverAction, Recovered, Recovery,
};
pub use stop::{begin_stop, freeze_all, freeze_descendants, process_gone};

/// Runs `work` on a new named thread (the short-lived subagent threads:
/// launch, startup watch, conversation write, history refresh, cleanup
/// ticker; large stacks: they parse JSON and call SQLite); `Err` when none
/// could start.
fn spawn_thread(name: &str, work: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    crate::util::thread::spawn(name, crate::util::thread::Stack::Large, work).map(drop)
}

/// Family-wide state held by the hub.
#[derive(Default)]
pub struct Family {
    /// Serializes forks: quota is decided and reserved under it.
    fork: Mutex<()>,
    terminal: Mutex<VecDeque<Terminal>>,
    /// Why new forks and launches are refused (unsafe ownership storage).
    blocked: Mutex<Option<String>>,
    /// The cleanup retry ticker is running.
    ticker: Mutex<bool>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Family {
    /// Why forks are blocked, if they are.
    pub fn blocked(&self) -> Option<String> {
        lock(&self.blocked).clone()
    }

    fn block(&self, reason: String) {
        log::error!("subagents: {reason}; new forks are refused until repaired");
        lock(&self.blocked).get_or_insert(reason);
    }
}

/// Direct children of `parent`, by id.
fn children_of(sv: &Service, parent: &str) -> Vec<String> {
    sv.sessions.scan(|s| {
        s.headless()
            .is_some_and(|c| c.parent().session_id == parent)
            .then(|| s.id().to_string())
    })
}

fn set_reason(sv: &Service, id: &str, reason: &str) {
    sv.sessions.with(id, |s| {
        if let Some(c) = s.headless_mut() {
            c.note_reason(reason);
        }
    });
}
