//! The registry handle: the one way to reach a session record. It owns
//! the registry's lock, which is taken once per unit of work and never
//! held across I/O (a socket write, a file, SQLite, a child process): a
//! caller reads or changes one session through [`Sessions::with`] and
//! does its I/O after the closure returns. Whoever needs sessions and
//! nothing else of the hub takes this handle instead of the hub.

use std::sync::{Mutex, MutexGuard};

use super::{Registry, Session};

/// The session registry behind its lock.
#[derive(Debug, Default)]
pub struct Sessions {
    registry: Mutex<Registry>,
}

impl Sessions {
    /// Runs `f` on session `id` under the registry lock; `None` when
    /// there is no such session.
    pub fn with<R>(&self, id: &str, f: impl FnOnce(&mut Session) -> R) -> Option<R> {
        self.lock().get_mut(id).map(f)
    }

    /// The whole registry, locked: for work across sessions (a list, a
    /// family of headless children, an insert or a removal). Never held
    /// across I/O.
    pub fn lock(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }
}
