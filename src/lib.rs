//! simplex-hub as a library: every module of the hub. The `simplex-hub`
//! binary (`src/main.rs`) is a thin command-line front over it; fuzz targets
//! (`fuzz/`) and the benchmark harness (`bench/`) link the same code.

pub mod capabilities;
pub mod cli;
pub mod config;
pub mod http;
pub mod hub;
pub mod mock_worker;
pub mod ops;
pub mod panel;
pub mod run;
pub mod session;
pub mod store;
pub mod subagents;
pub mod supervisor;
pub mod transcript;
pub mod util;
pub mod worker;
pub mod ws;
