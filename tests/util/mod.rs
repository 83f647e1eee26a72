//! Shared test support, one copy of each helper; test modules import it
//! whole (`use crate::util::*`) or by name. The submodules:
//!
//! - `hub`: the real hub binary started on port 0 with its stderr captured,
//!   hubs with a config file or a shell launcher, session helpers over the
//!   JSON API and deadline polling of what the hub reports;
//! - `http`: a small raw HTTP client and response parsing;
//! - `ws`: a tungstenite client standing in for workers and panels;
//! - `raw_ws`: a WebSocket client whose every byte is chosen by the test;
//! - `shapes`: the Node hub's wire shapes (`tests/fixtures/node_wire.json`)
//!   and the checker that compares frames and responses with them;
//! - `process`: signals, exits and `/proc` readings (threads, memory);
//! - `shard`: a Shard client written from the wire protocol seed alone;
//! - `storage`: storage fault injection (read-only mounts, permissions).
//!
//! Every socket has a read timeout and every wait a deadline, so a hang
//! fails fast.

#![allow(dead_code)]

pub mod http;
pub mod hub;
pub mod process;
pub mod raw_ws;
pub mod shapes;
pub mod shard;
pub mod storage;
pub mod ws;

pub use self::http::*;
pub use self::hub::*;
pub use self::process::*;
pub use self::raw_ws::*;
pub use self::shard::*;
pub use self::storage::*;
pub use self::ws::*;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Path of the binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_simplex-hub");

/// Generous deadline for anything that should happen "soon".
pub const DEADLINE: Duration = Duration::from_secs(20);

/// A directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!(
            "simplex-hub-test-{tag}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Polls `cond` until it is true or `timeout` passes.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    poll_until(timeout, || cond().then_some(())).is_some()
}

/// Polls `cond` until it holds; panics naming `what` after `timeout`.
#[track_caller]
pub fn wait_for(what: &str, timeout: Duration, cond: impl FnMut() -> bool) {
    assert!(wait_until(timeout, cond), "timed out waiting for {what}");
}

/// Polls `attempt` every 20 ms until it yields a value or `timeout`
/// passes (it is tried at least once).
pub fn poll_until<T>(timeout: Duration, mut attempt: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + timeout;
    loop {
        if let Some(value) = attempt() {
            return Some(value);
        }
        if Instant::now() >= end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
