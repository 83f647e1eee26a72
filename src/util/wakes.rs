//! Per-thread deferral of wake-ups. A thread that reads a batch of input
//! (a WebSocket reader that just got data) holds the wakes it would cause,
//! so a sleeping consumer (a panel writer) is woken once per batch, not
//! once per item: [`hold`] after a read that returned data, [`release`]
//! before the next read. A thread's held wakes are also released when the
//! thread exits.
//!
//! The reading side (`ws`) and the queueing side (`panel::conn`) meet
//! only here, so neither imports the other.

use std::cell::RefCell;
use std::sync::Arc;

/// Something a deferred wake is for.
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
