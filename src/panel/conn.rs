//! One panel WebSocket connection: a reader thread (parses and dispatches
//! client messages, and notices a peer that went away) and a writer thread
//! fed by a bounded channel. Every frame is charged to the connection's
//! 4 MiB outbound budget before it is queued; a frame that would exceed it
//! terminates the connection at once, without a close handshake.
//!
//! Subscriptions carry a cursor (the last `hub_sequence` delivered), so
//! paged replay and live events never duplicate or reorder: a live event
//! is sent only when it is newer than the cursor and replay has caught up.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crossbeam_channel::{Receiver, Sender};

use super::protocol;
use crate::ws::{self, FrameWriter};

/// Frames one connection may have queued, whatever their size (the byte
/// budget is the real bound; this caps bookkeeping for tiny frames).
const QUEUE_FRAMES: usize = 16 * 1024;

/// Something for the writer thread: an encoded frame, or work to run once
/// everything queued before it has been written (replay pacing).
pub enum Outgoing {
    Frame { bytes: Arc<[u8]>, cost: usize },
    Then(Box<dyn FnOnce() + Send>),
}

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
    writer: Arc<FrameWriter>,
    tx: Sender<Outgoing>,
    /// Dropped by `terminate` to wake the writer thread, which otherwise
    /// waits on `tx`'s channel that this very struct keeps open.
    stop: Mutex<Option<Sender<()>>>,
    pending: AtomicUsize,
    dead: AtomicBool,
    subs: Mutex<HashMap<String, Subscription>>,
}

impl PanelConn {
    /// Creates the connection state and the receiving end for its writer.
    pub fn new(id: u64, writer: Arc<FrameWriter>) -> (Arc<PanelConn>, WriterInbox) {
        let (tx, rx) = crossbeam_channel::bounded(QUEUE_FRAMES);
        let (stop_tx, stop_rx) = crossbeam_channel::bounded(0);
        let conn = Arc::new(PanelConn {
            id,
            writer,
            tx,
            stop: Mutex::new(Some(stop_tx)),
            pending: AtomicUsize::new(0),
            dead: AtomicBool::new(false),
            subs: Mutex::new(HashMap::new()),
        });
        (conn, WriterInbox { rx, stop: stop_rx })
    }

    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    pub fn subs(&self) -> MutexGuard<'_, HashMap<String, Subscription>> {
        self.subs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a text frame. Returns false (and terminates the connection)
    /// when it would exceed the outbound budget.
    pub fn send_text(&self, text: &str) -> bool {
        self.send_frame(encode(text))
    }

    /// Queues an already encoded frame (shared between connections).
    pub fn send_frame(&self, frame: Encoded) -> bool {
        if self.is_dead() {
            return false;
        }
        let cost = frame.bytes.len();
        let before = self.pending.fetch_add(cost, Ordering::AcqRel);
        if before + cost > protocol::OUTBOUND_BUDGET {
            self.pending.fetch_sub(cost, Ordering::AcqRel);
            log::warn!(
                "panel {}: outbound budget exceeded ({before} bytes pending + {cost} > {}); terminating",
                self.id,
                protocol::OUTBOUND_BUDGET
            );
            self.terminate();
            return false;
        }
        let queued = self.tx.try_send(Outgoing::Frame {
            bytes: frame.bytes,
            cost,
        });
        if queued.is_err() {
            self.pending.fetch_sub(cost, Ordering::AcqRel);
            log::warn!("panel {}: outbound queue full; terminating", self.id);
            self.terminate();
            return false;
        }
        true
    }

    /// Runs `then` on the writer thread after everything queued so far has
    /// been written.
    pub fn after_writes(&self, then: Box<dyn FnOnce() + Send>) {
        if !self.is_dead() && self.tx.try_send(Outgoing::Then(then)).is_err() {
            self.terminate();
        }
    }

    /// Ends the connection at once (no close handshake).
    pub fn terminate(&self) {
        if !self.dead.swap(true, Ordering::AcqRel) {
            self.writer.terminate();
            self.stop.lock().unwrap_or_else(|p| p.into_inner()).take();
        }
    }

    /// Bytes queued and not yet written.
    #[cfg(test)]
    pub fn pending_bytes(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }

    /// The writer thread's loop: writes frames in order, runs pacing
    /// callbacks, ends when the connection dies or its sender is dropped.
    pub fn write_loop(&self, inbox: WriterInbox) {
        loop {
            let item = crossbeam_channel::select! {
                recv(inbox.rx) -> item => match item {
                    Ok(item) => item,
                    Err(_) => break,
                },
                recv(inbox.stop) -> _ => break,
            };
            if self.is_dead() {
                break;
            }
            match item {
                Outgoing::Frame { bytes, cost } => {
                    let result = self.writer.write_raw(&bytes);
                    self.pending.fetch_sub(cost, Ordering::AcqRel);
                    if result.is_err() {
                        self.terminate();
                        break;
                    }
                }
                Outgoing::Then(work) => work(),
            }
        }
    }
}

/// What the writer thread waits on: frames, and the stop signal.
pub struct WriterInbox {
    rx: Receiver<Outgoing>,
    stop: Receiver<()>,
}

/// A text frame encoded once (header + payload), shareable across
/// connections.
#[derive(Clone)]
pub struct Encoded {
    pub bytes: Arc<[u8]>,
}

/// Encodes a text message as one unmasked frame.
pub fn encode(text: &str) -> Encoded {
    Encoded {
        bytes: ws::encode_frame(ws::opcode::TEXT, text.as_bytes()).into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    /// A connection whose writer thread is not started, so every queued
    /// byte stays pending.
    fn stalled() -> (Arc<PanelConn>, WriterInbox, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let (conn, inbox) = PanelConn::new(1, Arc::new(FrameWriter::for_tests(server)));
        (conn, inbox, client)
    }

    #[test]
    fn costs_include_the_exact_frame_header() {
        for (len, header) in [(125usize, 2usize), (126, 4), (65535, 4), (65536, 10)] {
            let (conn, _inbox, _peer) = stalled();
            assert!(conn.send_text(&"a".repeat(len)));
            assert_eq!(conn.pending_bytes(), len + header, "payload {len}");
        }
    }

    #[test]
    fn the_budget_edge_is_exact() {
        let (conn, _inbox, _peer) = stalled();
        // A frame whose wire cost is exactly the budget fits...
        assert!(conn.send_text(&"b".repeat(protocol::OUTBOUND_BUDGET - 10)));
        assert_eq!(conn.pending_bytes(), protocol::OUTBOUND_BUDGET);
        assert!(!conn.is_dead());
        // ...and any further frame terminates the connection.
        assert!(!conn.send_text(""));
        assert!(conn.is_dead());
    }

    #[test]
    fn a_single_frame_over_the_budget_is_refused_when_idle() {
        let (conn, _inbox, _peer) = stalled();
        assert!(!conn.send_text(&"c".repeat(protocol::OUTBOUND_BUDGET)));
        assert!(conn.is_dead());
        assert_eq!(conn.pending_bytes(), 0);
    }

    #[test]
    fn terminate_wakes_an_idle_writer() {
        let (conn, inbox, _peer) = stalled();
        let writer = conn.clone();
        let thread = std::thread::spawn(move || writer.write_loop(inbox));
        conn.terminate();
        thread.join().unwrap();
    }
}
