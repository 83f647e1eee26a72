//! The sockets handle: every accepted WebSocket and JSONL connection
//! (worker event, confirmation and tool sockets, panels, Shard clients),
//! each under a connection id, so shutdown can close them all at once.
//! Connection ids only grow; one taken before an upgrade is answered
//! orders connections (a newer worker connection supersedes an older).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::ws::FrameWriter;

/// The open connections.
#[derive(Debug)]
pub struct Sockets {
    open: Mutex<HashMap<u64, Arc<FrameWriter>>>,
    next: AtomicU64,
    /// Set by [`Sockets::close_all`]: a socket registered after it is
    /// closed at once.
    closing: AtomicBool,
}

impl Default for Sockets {
    fn default() -> Sockets {
        Sockets {
            open: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            closing: AtomicBool::new(false),
        }
    }
}

impl Sockets {
    /// Remembers an accepted socket until it ends; returns its id.
    pub fn register(&self, writer: Arc<FrameWriter>) -> u64 {
        let id = self.reserve_id();
        self.register_as(id, writer);
        id
    }

    /// A connection id, taken before an upgrade is answered where the
    /// order of connections matters.
    pub fn reserve_id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Remembers an accepted socket under an id from
    /// [`Sockets::reserve_id`] until it ends.
    pub fn register_as(&self, id: u64, writer: Arc<FrameWriter>) {
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, writer);
        if self.closing.load(Ordering::Acquire) {
            self.close_all();
        }
    }

    /// Whether [`Sockets::close_all`] was called (the hub is shutting
    /// down).
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// Forgets a socket that ended.
    pub fn unregister(&self, id: u64) {
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }

    /// Closes every socket (their threads then retire prompts and mark
    /// workers disconnected), and every one registered later.
    pub fn close_all(&self) {
        self.closing.store(true, Ordering::Release);
        let writers: Vec<Arc<FrameWriter>> = self
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for writer in writers {
            writer.close_and_shutdown(crate::ws::close::GOING_AWAY, "hub shutting down");
        }
    }
}
