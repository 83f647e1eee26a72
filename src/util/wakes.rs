//! Per-thread deferral of per-connection work to the end of a batch. A
//! thread that reads a batch of input (a WebSocket reader that just got
//! data) holds the flushes it would cause, so each connection it queued
//! frames for is written once per batch, not once per item: [`hold`]
//! after a read that returned data, [`release`] before the next read. A
//! notification fanned out under the publish lock is a batch too
//! ([`batch`]), so its writes happen after the lock is released. A
//! thread's held work is also run when the thread exits.
//!
//! The reading side (`ws`, `shard::lines`), the publisher (`hub`) and the
//! queueing side (`wsconn::outbound`) meet only here, so none imports
//! another.

use std::cell::RefCell;
use std::sync::Arc;

/// Something deferred to the end of a batch (a connection's flush).
pub trait Wake: Send + Sync {
    fn wake(&self);
}

struct Held {
    holding: bool,
    wakes: Vec<Arc<dyn Wake>>,
}

impl Drop for Held {
    fn drop(&mut self) {
        for wake in self.wakes.drain(..) {
            wake.wake();
        }
    }
}

thread_local! {
    static HELD: RefCell<Held> = const {
        RefCell::new(Held {
            holding: false,
            wakes: Vec::new(),
        })
    };
}

/// From now on, wakes this thread asks for wait for the next [`release`].
pub fn hold() {
    let _ = HELD.try_with(|h| h.borrow_mut().holding = true);
}

/// Runs every wake this thread deferred, and stops holding.
pub fn release() {
    let wakes = HELD
        .try_with(|h| {
            let mut h = h.borrow_mut();
            h.holding = false;
            std::mem::take(&mut h.wakes)
        })
        .unwrap_or_default();
    for wake in wakes {
        wake.wake();
    }
}

/// Whether this thread is holding its wakes now.
pub fn holding() -> bool {
    HELD.try_with(|h| h.try_borrow().is_ok_and(|h| h.holding))
        .unwrap_or(false)
}

/// Defers `wake` to this thread's next [`release`]; false when it could
/// not be recorded (the caller then wakes at once).
pub fn defer(wake: Arc<dyn Wake>) -> bool {
    HELD.try_with(|h| h.try_borrow_mut().map(|mut h| h.wakes.push(wake)).is_ok())
        .unwrap_or(false)
}

/// A batch that ends when this guard drops, unless the thread already was
/// in one (then the outer batch's end runs the deferred work).
pub struct Batch {
    started: bool,
}

/// Holds this thread's deferred work until the returned guard drops.
pub fn batch() -> Batch {
    let started = !holding();
    if started {
        hold();
    }
    Batch { started }
}

impl Drop for Batch {
    fn drop(&mut self) {
        if self.started {
            release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_batch_runs_its_work_at_its_end_and_nests_in_a_held_read() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        {
            let _batch = batch();
            assert!(holding());
            assert!(defer(count.clone()));
            assert_eq!(count.0.load(Ordering::SeqCst), 0);
        }
        assert!(!holding());
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        // Inside a held read, a batch leaves the work to the read's release.
        hold();
        {
            let _inner = batch();
            assert!(defer(count.clone()));
        }
        assert!(holding());
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        release();
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
    }
}
