//! simplex-hub as a library. The `simplex-hub` binary (`src/main.rs`) is a
//! thin command-line front over it; fuzz targets (`fuzz/`) and the
//! benchmark harness (`bench/`) link the same code.
//!
//! The public modules are the ones those three use: the binary (`cli`,
//! `config`, `hub`, `run`, `http`, `mock_worker`, `util`) and the parsers,
//! state machines and stores the fuzz targets and benchmarks drive
//! (`worker`, `panel`, `session`, `store`, `subagents`, `transcript`).
//! The command layer, the supervisor, the WebSocket plumbing and the
//! capability table are crate-private; a module joins the public surface
//! only when something outside the crate needs it.

pub(crate) mod capabilities;
pub mod cli;
pub mod config;
pub mod http;
pub mod hub;
pub(crate) mod mock_provider;
pub mod mock_worker;
pub(crate) mod ops;
pub mod panel;
pub mod run;
pub mod session;
pub mod store;
pub mod subagents;
pub(crate) mod supervisor;
pub mod transcript;
pub mod util;
pub mod worker;
pub(crate) mod ws;
