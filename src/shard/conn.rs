//! One Shard client connection: the shared outbound machinery
//! (`wsconn::outbound`: the same 4 MiB budget and immediate termination as
//! a panel's, the batched writer thread), the connection's own state
//! (`attach::ConnState`), and its keepalive.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;

use super::attach::ConnState;
use super::wire::{self, Refusal};
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

/// A connected Shard client.
pub struct ShardConn {
    pub id: u64,
    out: Arc<Outbound>,
    state: Mutex<ConnState>,
    /// A keepalive ping is unanswered.
    awaiting_pong: AtomicBool,
}

impl ShardConn {
    pub fn new(id: u64, writer: Arc<FrameWriter>) -> (Arc<ShardConn>, WriterInbox) {
        let (out, inbox) = Outbound::new(id, writer, KIND);
        let conn = Arc::new(ShardConn {
            id,
            out,
            state: Mutex::new(ConnState::default()),
            awaiting_pong: AtomicBool::new(false),
        });
        (conn, inbox)
    }

    pub fn outbound(&self) -> &Outbound {
        &self.out
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
        self.out.send_text(&message.to_string())
    }

    /// Queues a message encoded once for every recipient.
    pub fn send_frame(&self, frame: &Encoded) -> bool {
        self.out.send_frame(frame.clone())
    }

    /// Queues the `response` to `command` (`id` echoed).
    pub fn respond(
        &self,
        id: Option<&str>,
        command: &str,
        outcome: Result<Option<Value>, Refusal>,
    ) {
        let message = match outcome {
            Ok(data) => wire::response(id, command, Ok(data)),
            Err(refusal) => wire::response(id, command, Err(&refusal)),
        };
        self.send(&message);
    }

    /// Runs `then` once everything queued so far was written.
    pub fn after_writes(&self, then: Box<dyn FnOnce() + Send>) {
        self.out.after_writes(then);
    }

    pub fn terminate(&self) {
        self.out.terminate();
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

/// Encodes one message for every recipient (serialized once).
pub fn encode(message: &Value) -> Encoded {
    outbound::encode(&message.to_string())
}
