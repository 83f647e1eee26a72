//! The registry handle: the one way to reach a session record. It owns
//! the registry's lock, which is taken once per unit of work and never
//! held across I/O (a socket write, a file, SQLite, a child process): a
//! caller reads or changes one session through [`Sessions::with`] (its
//! named transitions), reads several through [`Sessions::scan`], and does
//! its I/O after the closure returns. Whoever needs sessions and nothing
//! else of the hub takes this handle instead of the hub.

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
        self.lock_all().get_mut(id).map(f)
    }

    /// What `f` picks from every session, in creation order, under one
    /// look at the registry.
    pub fn scan<T>(&self, f: impl FnMut(&Session) -> Option<T>) -> Vec<T> {
        self.lock_all().list().into_iter().filter_map(f).collect()
    }

    /// Makes `session` visible (replacing one of the same id).
    pub fn insert(&self, session: Session) {
        self.lock_all().insert(session);
    }

    /// Takes session `id` out of the registry.
    pub fn remove(&self, id: &str) -> Option<Session> {
        self.lock_all().remove(id)
    }

    pub fn contains(&self, id: &str) -> bool {
        self.lock_all().contains(id)
    }

    /// The whole registry, locked: only for a decision that must see
    /// several sessions at one moment and may change them (a fork's
    /// quota, a panel frame's shared preview allowance). Never held
    /// across I/O.
    pub fn lock_all(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }
}
