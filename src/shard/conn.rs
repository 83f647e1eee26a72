//! One Shard client connection: the shared outbound machinery
//! (`wsconn::outbound`: the same 4 MiB budget and immediate termination as
//! a panel's, the batched writer thread), the connection's own state
//! (`attach::ConnState`), its keepalive, and its framing.
//!
//! The framing is the connection's: WebSocket text frames (`/shard/ws`),
//! JSONL lines (the unix socket), or JSONL lines without the routing
//! `agent_id` (a unix-socket connection bound to one agent, `direct`).
//! Every message is serialized once ([`Frame`]) and encoded at most once
//! per framing, however many connections it goes to.

use std::cell::OnceCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use serde_json::Value;

use super::attach::ConnState;
use crate::wire::shard::direct;
use crate::wire::shard::message::{self, Refusal};
use crate::ws::FrameWriter;
use crate::wsconn::outbound::{self, Encoded, Kind, Outbound, WriterInbox};

/// A Shard connection's outbound budget: the panel's (seed open question
/// P2: buffer up to the cap, then drop the client).
pub const OUTBOUND_BUDGET: usize = 4 * 1024 * 1024;

const KIND: Kind = Kind {
    label: "shard",
    writer_thread: "shard-writer",
    budget: OUTBOUND_BUDGET,
};

/// Which transport a connection came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// `GET /shard/ws`: one message per text frame, keepalive pings.
    WebSocket,
    /// The unix socket: one message per line, no pings.
    Socket,
}

/// How a connection's messages are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    WebSocket,
    Lines,
    /// Lines without the top-level `agent_id` (a direct connection).
    DirectLines,
}

/// A connected Shard client.
pub struct ShardConn {
    pub id: u64,
    out: Arc<Outbound>,
    transport: Transport,
    /// The agent a direct connection is bound to (set once, by the bind).
    direct: OnceLock<String>,
    state: Mutex<ConnState>,
    /// A keepalive ping is unanswered.
    awaiting_pong: AtomicBool,
}

impl ShardConn {
    pub fn new(
        id: u64,
        writer: Arc<FrameWriter>,
        transport: Transport,
    ) -> (Arc<ShardConn>, WriterInbox) {
        let (out, inbox) = Outbound::new(id, writer, KIND);
        let conn = Arc::new(ShardConn {
            id,
            out,
            transport,
            direct: OnceLock::new(),
            state: Mutex::new(ConnState::default()),
            awaiting_pong: AtomicBool::new(false),
        });
        (conn, inbox)
    }

    pub fn outbound(&self) -> &Outbound {
        &self.out
    }

    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// The agent this direct connection is bound to (`None`: a daemon
    /// connection).
    pub fn direct(&self) -> Option<&str> {
        self.direct.get().map(String::as_str)
    }

    /// Makes this a direct connection bound to `agent`; from now on its
    /// messages lose their routing `agent_id`. False when it already was.
    pub fn bind_direct(&self, agent: &str) -> bool {
        self.direct.set(agent.to_string()).is_ok()
    }

    pub fn framing(&self) -> Framing {
        match (self.transport, self.direct.get()) {
            (Transport::WebSocket, _) => Framing::WebSocket,
            (Transport::Socket, None) => Framing::Lines,
            (Transport::Socket, Some(_)) => Framing::DirectLines,
        }
    }

    pub fn start_writer(&self, inbox: WriterInbox) {
        self.out.start_writer(inbox);
    }

    /// The connection's attachments and waiting commands (taken after the
    /// registry lock, never before it; nothing is taken while it is held).
    pub fn state(&self) -> MutexGuard<'_, ConnState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn is_dead(&self) -> bool {
        self.out.is_dead()
    }

    /// Queues one message (false, and the connection ended, past the
    /// budget).
    pub fn send(&self, message: &Value) -> bool {
        self.send_frame(&Frame::new(message))
    }

    /// Queues a message serialized once for every recipient, in this
    /// connection's framing.
    pub fn send_frame(&self, frame: &Frame) -> bool {
        self.out.send_frame(frame.encoded(self.framing()).clone())
    }

    /// Queues the `response` to `command` (`id` echoed).
    pub fn respond(
        &self,
        id: Option<&str>,
        command: &str,
        outcome: Result<Option<Value>, Refusal>,
    ) {
        let message = match outcome {
            Ok(data) => message::response(id, command, Ok(data)),
            Err(refusal) => message::response(id, command, Err(&refusal)),
        };
        self.send(&message);
    }

    /// Runs `then` once everything queued so far was written.
    pub fn after_writes(&self, then: Box<dyn FnOnce() + Send>) {
        self.out.after_writes(then);
    }

    /// Ends the connection once everything queued so far was written (a
    /// connection ended this way holds no reference to itself meanwhile).
    pub fn end_after_writes(self: &Arc<Self>) {
        let me: Weak<ShardConn> = Arc::downgrade(self);
        self.after_writes(Box::new(move || {
            if let Some(conn) = me.upgrade() {
                conn.terminate();
            }
        }));
    }

    pub fn terminate(&self) {
        self.out.terminate();
    }

    /// Ends the connection with a close frame (`code`, `reason`).
    pub fn close(&self, code: u16, reason: &str) {
        self.out.close(code, reason);
    }

    /// The keepalive's look: true when a ping is to be sent now (none is
    /// unanswered); false when the last one went unanswered (the caller
    /// drops the client).
    pub fn ping_due(&self) -> bool {
        !self.awaiting_pong.swap(true, Ordering::AcqRel)
    }

    /// Queues a keepalive ping.
    pub fn ping(&self) -> bool {
        self.out.send_frame(outbound::ping())
    }

    /// The client answered a ping.
    pub fn ponged(&self) {
        self.awaiting_pong.store(false, Ordering::Release);
    }
}

/// One outgoing message: its JSON text, serialized once, and its bytes in
/// each framing, each encoded the first time a recipient needs it. Lives
/// for one fan-out on one thread.
pub struct Frame {
    text: String,
    websocket: OnceCell<Encoded>,
    line: OnceCell<Encoded>,
    direct: OnceCell<Encoded>,
}

impl Frame {
    pub fn new(message: &Value) -> Frame {
        Frame::from_text(message.to_string())
    }

    /// A message already serialized (compact JSON, one object).
    pub fn from_text(text: String) -> Frame {
        Frame {
            text,
            websocket: OnceCell::new(),
            line: OnceCell::new(),
            direct: OnceCell::new(),
        }
    }

    pub fn encoded(&self, framing: Framing) -> &Encoded {
        match framing {
            Framing::WebSocket => self.websocket.get_or_init(|| outbound::encode(&self.text)),
            Framing::Lines => self.line.get_or_init(|| line(&self.text)),
            Framing::DirectLines => self
                .direct
                .get_or_init(|| line(&direct::without_agent_id(&self.text))),
        }
    }
}

/// One JSONL line: the compact JSON text and its `\n` (compact JSON holds
/// no raw newline: serde_json escapes control characters in strings).
fn line(text: &str) -> Encoded {
    let mut bytes = Vec::with_capacity(text.len() + 1);
    bytes.extend_from_slice(text.as_bytes());
    bytes.push(b'\n');
    Encoded {
        bytes: bytes.into(),
    }
}

/// Serializes one message once for every recipient.
pub fn encode(message: &Value) -> Frame {
    Frame::new(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_frame_is_encoded_once_per_framing() {
        let frame = encode(&json!({"type": "status", "agent_id": "a", "text": "x\ny\u{2028}"}));
        let ws = frame.encoded(Framing::WebSocket);
        assert!(std::ptr::eq(ws, frame.encoded(Framing::WebSocket)));
        assert_eq!(&ws.bytes[..2], &[0x81, (ws.bytes.len() - 2) as u8]);
        let line = frame.encoded(Framing::Lines);
        let text = std::str::from_utf8(&line.bytes).unwrap();
        assert_eq!(text.matches('\n').count(), 1);
        assert!(text.ends_with('\n'));
        assert!(text.contains("\"agent_id\":\"a\""));
        assert!(text.contains('\u{2028}'));
        let direct = std::str::from_utf8(&frame.encoded(Framing::DirectLines).bytes).unwrap();
        assert_eq!(direct, "{\"type\":\"status\",\"text\":\"x\\ny\u{2028}\"}\n");
    }
}
