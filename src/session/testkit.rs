//! What the session transition tests share: a fresh session and a
//! writer over a loopback socket that nothing is written to.

use std::sync::Arc;

use serde_json::json;

use super::Session;
use crate::transcript::Transcript;
use crate::ws::FrameWriter;

/// A new session `s` with lifecycle `lifecycle_id` and a small ring.
pub fn session(lifecycle_id: &str) -> Session {
    Session::new(
        "s".into(),
        "t0".into(),
        json!({}),
        "token".into(),
        lifecycle_id.into(),
        Transcript::new(10, 1 << 20),
    )
}

/// A frame writer over a connected loopback socket.
pub fn writer() -> Arc<FrameWriter> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let stream = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    Arc::new(FrameWriter::for_tests(stream))
}
