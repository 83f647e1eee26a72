//! Small, dependency-free helpers shared by every module: wall-clock
//! timestamps, atomic private file writes, identifiers, `poll(2)`, the
//! process's own `/proc` figures, an event-rate meter, JSON tokens appended
//! without `fmt`.
//!
//! Nothing here holds state or locks; every function is safe to call from
//! any thread.

pub mod bounded_writer;
pub mod fdlimit;
pub mod fsutil;
pub mod log_ring;
pub mod poll;
pub mod procself;
pub mod rate;
#[cfg(test)]
pub mod testkit;
pub mod thread;
pub mod time;
pub mod wakes;
