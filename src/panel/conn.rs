//! One panel WebSocket connection: the shared outbound machinery
//! (`wsconn::outbound`: the 4 MiB budget, the batched writer thread) plus
//! the panel's own per-session subscription state, and the panel `event`
//! frame encoded in one pass.
//!
//! Subscriptions carry a cursor (the last `hub_sequence` delivered), so
//! paged replay and live events never duplicate or reorder: a live event
//! is sent only when it is newer than the cursor and replay has caught up.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::wire::panel as protocol;
use crate::ws::{self, FrameWriter};
pub use crate::wsconn::outbound::{encode, Encoded, WriterInbox};
use crate::wsconn::outbound::{Kind, Outbound};

/// How panel connections are named, and their budget.
const KIND: Kind = Kind {
    label: "panel",
    writer_thread: "panel-writer",
    budget: protocol::OUTBOUND_BUDGET,
};

/// Per-session subscription state of one connection.
#[derive(Debug, Clone)]
pub struct Subscription {
    /// Live events flow only once replay has caught up.
    pub live: bool,
    /// Newest `hub_sequence` delivered (by replay or live).
    pub cursor: u64,
    /// Bumped on replace/unsubscribe; pending replay pages of an older
    /// generation are dropped.
    pub generation: u64,
    pub request_id: Option<String>,
}

/// A connected panel.
pub struct PanelConn {
    pub id: u64,
    out: Arc<Outbound>,
    subs: Mutex<HashMap<String, Subscription>>,
}

impl PanelConn {
    /// Creates the connection state and the receiving end for its writer.
    pub fn new(id: u64, writer: Arc<FrameWriter>) -> (Arc<PanelConn>, WriterInbox) {
        let (out, inbox) = Outbound::new(id, writer, KIND);
        let conn = Arc::new(PanelConn {
            id,
            out,
            subs: Mutex::new(HashMap::new()),
        });
        (conn, inbox)
    }

    /// The outbound side (for the poller).
    pub fn outbound(&self) -> &Outbound {
        &self.out
    }

    /// Starts the first writer thread (the connection ends if none starts).
    pub fn start_writer(&self, inbox: WriterInbox) {
        self.out.start_writer(inbox);
    }

    pub fn is_dead(&self) -> bool {
        self.out.is_dead()
    }

    pub fn subs(&self) -> MutexGuard<'_, HashMap<String, Subscription>> {
        self.subs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a text frame. Returns false (and terminates the connection)
    /// when it would exceed the outbound budget.
    pub fn send_text(&self, text: &str) -> bool {
        self.out.send_text(text)
    }

    /// Queues an already encoded frame (shared between connections).
    pub fn send_frame(&self, frame: Encoded) -> bool {
        self.out.send_frame(frame)
    }

    /// Runs `then` on the writer thread after everything queued so far has
    /// been written.
    pub fn after_writes(&self, then: Box<dyn FnOnce() + Send>) {
        self.out.after_writes(then)
    }

    /// Ends the connection at once (no close handshake).
    pub fn terminate(&self) {
        self.out.terminate()
    }

    /// Ends the connection with a close frame (`code`, `reason`).
    pub fn close(&self, code: u16, reason: &str) {
        self.out.close(code, reason)
    }
}

/// Encodes the `event` frame of [`protocol::event_frame`] in one pass,
/// header and payload into one buffer.
pub fn encode_event(session: &str, hub_seq: u64, envelope_json: &str) -> Encoded {
    thread_local! {
        // The head is written into this thread's buffer, not a new one.
        static HEAD: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    }
    let encode = |head: &mut String| {
        head.clear();
        protocol::event_frame_head(head, session, hub_seq);
        let len = head.len() + envelope_json.len() + 1;
        let mut bytes = Vec::with_capacity(ws::frame_header_len(len) + len);
        ws::push_frame_header(&mut bytes, ws::opcode::TEXT, len);
        bytes.extend_from_slice(head.as_bytes());
        bytes.extend_from_slice(envelope_json.as_bytes());
        bytes.push(b'}');
        Encoded {
            bytes: bytes.into(),
        }
    };
    HEAD.try_with(|head| head.try_borrow_mut().ok().map(|mut head| encode(&mut head)))
        .ok()
        .flatten()
        .unwrap_or_else(|| encode(&mut String::new()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn an_encoded_event_is_the_encoded_event_frame() {
        for (session, seq, json) in [
            ("s", 1, r#"{"a":1}"#),
            ("s\"q", 0, "{}"),
            (
                "bench",
                u64::MAX,
                &*format!("{{\"x\":\"{}\"}}", "y".repeat(70_000)),
            ),
        ] {
            let expect = encode(&protocol::event_frame(session, seq, json));
            assert_eq!(encode_event(session, seq, json).bytes, expect.bytes);
        }
    }

    #[test]
    fn a_panel_connection_has_the_panel_budget() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let (conn, _inbox) = PanelConn::new(1, Arc::new(FrameWriter::for_tests(server)));
        // Held, so nothing is written before the budget is checked.
        let _batch = crate::util::wakes::batch();
        assert!(conn.send_text(&"b".repeat(protocol::OUTBOUND_BUDGET - 10)));
        assert_eq!(conn.outbound().pending_bytes(), protocol::OUTBOUND_BUDGET);
        assert!(!conn.send_text(""));
        assert!(conn.is_dead());
    }
}
