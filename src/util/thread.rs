//! The one way the hub starts a thread: a name, a stack class, and a
//! failure path that hands the work back.
//!
//! Stack classes (virtual size; the kernel maps only the pages a thread
//! touches):
//! - [`Stack::Small`], 64 KiB: waiters and watchers that block in one call
//!   (`wait()`, a pidfd `poll`).
//! - [`Stack::Medium`], 128 KiB: loops over a socket or pipe that parse
//!   little themselves (panel writers, the panel poll thread, pipe readers,
//!   disk writers).
//! - [`Stack::Large`], 256 KiB: threads that run request handlers, JSON
//!   parsing and SQLite calls (socket threads, panel readers and actions,
//!   subagent work, the stop ladder, whose end may run a restart's start).
//!
//! When the operating system refuses a thread (`EAGAIN` under a thread or
//! memory limit), [`spawn_with`] returns the work's input to the caller,
//! so it can undo what it reserved and report the failure instead of
//! leaving a state (a session in `stopping`, a callback never called)
//! that nothing will finish.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// A documented stack size class (see the module header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stack {
    Small,
    Medium,
    Large,
}

impl Stack {
    pub const fn bytes(self) -> usize {
        match self {
            Stack::Small => 64 * 1024,
            Stack::Medium => 128 * 1024,
            Stack::Large => 256 * 1024,
        }
    }
}

/// Starts a named thread running `work`.
pub fn spawn<F>(name: &str, stack: Stack, work: F) -> std::io::Result<JoinHandle<()>>
where
    F: FnOnce() + Send + 'static,
{
    std::thread::Builder::new()
        .name(name.to_string())
        .stack_size(stack.bytes())
        .spawn(work)
}

/// Starts a named thread running `work(input)`. If the thread cannot be
/// started, `input` comes back with the error, untouched.
pub fn spawn_with<T, F>(
    name: &str,
    stack: Stack,
    input: T,
    work: F,
) -> Result<JoinHandle<()>, (std::io::Error, T)>
where
    T: Send + 'static,
    F: FnOnce(T) + Send + 'static,
{
    let slot = Arc::new(Mutex::new(Some(input)));
    let theirs = slot.clone();
    let started = spawn(name, stack, move || {
        let input = theirs.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(input) = input {
            work(input);
        }
    });
    match started {
        Ok(handle) => Ok(handle),
        Err(err) => {
            let input = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
            // The closure was never run, so the input is still there.
            Err((err, input.expect("an unstarted thread took its input")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spawned_threads_carry_their_name_and_input() {
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = spawn_with("test-named", Stack::Small, 41, move |n| {
            let name = std::thread::current().name().map(str::to_string);
            tx.send((name, n + 1)).unwrap();
        })
        .unwrap();
        handle.join().unwrap();
        assert_eq!(rx.recv().unwrap(), (Some("test-named".to_string()), 42));
    }

    #[test]
    fn stack_classes_are_ordered() {
        assert!(Stack::Small.bytes() < Stack::Medium.bytes());
        assert!(Stack::Medium.bytes() < Stack::Large.bytes());
    }
}
