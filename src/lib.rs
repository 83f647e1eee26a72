//! simplex-hub as a library. The `simplex-hub` binary (`src/main.rs`)
//! calls [`main`] and nothing else; fuzz targets (`fuzz/`) and the
//! benchmark harness (`bench/`) link the parsers, state machines and the
//! store through [`harness`], the one documented public module. Every
//! other module is crate-private (`pub(crate)`), so the compiler sees the
//! whole program: an item nothing uses is dead code, and a module's
//! surface is what the crate itself calls.

pub(crate) mod capabilities;
pub(crate) mod cli;
pub(crate) mod config;
mod entry;
pub mod harness;
pub(crate) mod http;
pub(crate) mod hub;
pub(crate) mod library;
pub(crate) mod mock_provider;
pub(crate) mod mock_worker;
pub(crate) mod ops;
pub(crate) mod panel;
pub(crate) mod run;
pub(crate) mod session;
pub(crate) mod shard;
pub(crate) mod skills;
pub(crate) mod store;
pub(crate) mod subagents;
pub(crate) mod supervisor;
pub(crate) mod transcript;
pub(crate) mod util;
pub(crate) mod worker;
pub(crate) mod ws;
pub(crate) mod wsconn;

pub use entry::main;
