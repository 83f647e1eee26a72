//! simplex-hub as a library. The `simplex-hub` binary (`src/main.rs`)
//! calls [`main`] and nothing else; fuzz targets (`fuzz/`) link the wire
//! layer ([`wire`]: the pure parsers and protocol state machines), and
//! the benchmark harness (`bench/`) and the fuzz targets whose subject is
//! not in the wire layer yet link what [`harness`] re-exports. Every
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
pub(crate) mod reply;
pub(crate) mod run;
pub(crate) mod services;
pub(crate) mod session;
pub(crate) mod shard;
pub(crate) mod skills;
pub(crate) mod store;
pub(crate) mod subagents;
pub(crate) mod supervisor;
pub(crate) mod transcript;
pub(crate) mod util;
pub mod wire;
pub(crate) mod worker;
pub(crate) mod ws;
pub(crate) mod wsconn;

pub use entry::main;
