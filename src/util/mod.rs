//! Small, dependency-free helpers shared by every module: wall-clock
//! timestamps, atomic private file writes, identifiers.
//!
//! Nothing here holds state or locks; every function is safe to call from
//! any thread.

pub mod bounded_writer;
pub mod fsutil;
pub mod line_splitter;
pub mod log_ring;
#[cfg(test)]
pub mod testkit;
pub mod time;
