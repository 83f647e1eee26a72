//! The operating-system edge of process supervision, and the only place with
//! `unsafe` for process control: `/proc/<pid>/stat` start times, pinned
//! process handles (pidfds), signals to children and process groups, the
//! child-subreaper flag and reaping of orphans.
//!
//! PID-reuse rules (perf-reliability reference, section 3a):
//!
//! - A pid we spawned and have not reaped cannot be reused (the zombie keeps
//!   it), so `kill`/`killpg` on it are safe until the reaping `wait` returns
//!   (`signal_child`, `signal_group_of_child`: the module's tests signal
//!   their own children with these; the hub itself signals only through
//!   [`Pinned`]).
//! - Any other pid (an adopted worker, or our own after the waiter thread
//!   reaped it) goes through [`Pinned`]: `pidfd_open` first, then the start
//!   time comparison, then `pidfd_send_signal`, which can only ever reach
//!   the pinned incarnation.
//!
//! Linux only; pidfds need Linux 5.3 or later.
//!
//! The parts: what `/proc` says (`proc.rs`: start times, identity, a
//! process's parent and group, this process's children; no `unsafe`,
//! `#![forbid(unsafe_code)]`), pinned handles (`pidfd.rs`), signals to
//! process groups and to our own children (`group.rs`), reaping and the
//! subreaper flag (`reap.rs`). The `unsafe` blocks are in `pidfd.rs`,
//! `group.rs` and `reap.rs` only, each with its SAFETY comment.

mod group;
mod pidfd;
mod proc;
mod reap;
#[cfg(test)]
// `poll_until` sleeps between looks, up to its deadline.
#[allow(clippy::disallowed_methods)]
mod tests;

#[cfg(test)]
pub use group::{signal_child, signal_group_of_child};
pub use pidfd::Pinned;
#[cfg(test)]
pub use proc::parse_stat_start_time;
pub use proc::{check_identity, list_children, proc_start_time, Identity};
#[cfg(test)]
pub use reap::reap_orphans;
pub use reap::{reap_child, reap_exited, set_child_subreaper};

/// A pid as `pid_t`, if it is a positive one.
fn to_pid(pid: u32) -> Option<libc::pid_t> {
    libc::pid_t::try_from(pid).ok().filter(|p| *p > 0)
}
