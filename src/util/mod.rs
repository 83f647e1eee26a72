//! Small, dependency-free helpers shared by every module: wall-clock
//! timestamps, atomic private file writes, identifiers.
//!
//! Nothing here holds state or locks; every function is safe to call from
//! any thread.

pub mod fsutil;
pub mod time;
