//! One front-end WebSocket connection's outbound side (a panel's or a
//! Shard client's): a writer thread fed by the connection's queue. Every
//! frame is charged to the connection's outbound budget (4 MiB for both
//! front-ends) before it is queued; a frame that would exceed it
//! terminates the connection at once, without a close handshake.
//!
//! The writer takes everything queued at once and writes the frames with
//! one `writev` (up to [`WRITE_BATCH_BYTES`]), so a burst of events costs
//! one syscall per connection, not one per frame. The queue is a
//! `VecDeque` under a short mutex, allocated on use; it grows only as far
//! as the budget (bytes) and [`QUEUE_FRAMES`] (items) let it.
//!
//! A writer thread that has had nothing to write for
//! [`WRITER_IDLE_EXIT`] exits, and the next frame starts a new one, so an
//! idle connection costs no thread at all (its socket waits in the
//! poller).
//!
//! Waking a sleeping writer is deferred while the queuing thread is in the
//! middle of a batch of input (see `util::wakes`): a worker-events thread
//! that ingests 32 envelopes from one socket read wakes each writer once,
//! when it goes back to read, instead of 32 times.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use crate::util::thread::Stack;
use crate::util::wakes::{self, Wake};
use crate::ws::{self, FrameWriter};

/// Items one connection may have queued, whatever their size (the byte
/// budget is the real bound; this caps bookkeeping for tiny frames).
const QUEUE_FRAMES: usize = 16 * 1024;

/// The most frame bytes the writer hands to one `writev`.
pub const WRITE_BATCH_BYTES: usize = 256 * 1024;

/// The most frames in one `writev` (well under `IOV_MAX`, 1024).
const WRITE_BATCH_FRAMES: usize = 256;

/// A writer thread with nothing to write for this long exits; the next
/// frame starts a new one. Idle connections then hold no thread.
const WRITER_IDLE_EXIT: Duration = Duration::from_millis(500);

/// Queue capacity kept after a burst; a drained queue larger than this is
/// shrunk so an idle connection does not hold a burst's bookkeeping.
const KEEP_CAPACITY: usize = 256;

/// What kind of connection this is: how logs name it, what its writer
/// threads are called, and its outbound budget in bytes.
#[derive(Debug, Clone, Copy)]
pub struct Kind {
    pub label: &'static str,
    pub writer_thread: &'static str,
    pub budget: usize,
}

/// Something for the writer thread: an encoded frame, or work to run once
/// everything queued before it has been written (replay pacing).
pub enum Outgoing {
    Frame { bytes: Arc<[u8]>, cost: usize },
    Then(Box<dyn FnOnce() + Send>),
}

/// The queue between the threads that send and the writer thread.
struct Queue {
    state: Mutex<QueueState>,
    ready: Condvar,
}

struct QueueState {
    items: VecDeque<Outgoing>,
    /// The writer is (about to be) waiting on `ready`.
    sleeping: bool,
    /// A wake for this queue sits in some thread's deferred list.
    wake_deferred: bool,
    /// Set by `terminate`: the writer stops at its next look.
    stop: bool,
    /// A writer thread is running (or starting). Cleared, under this
    /// lock, by a writer that exits after [`WRITER_IDLE_EXIT`].
    writer_running: bool,
}

/// What `Queue::push` did.
enum Pushed {
    Queued,
    /// Queued, and no writer runs: the caller starts one.
    NeedsWriter,
    /// The connection is stopping; nothing was queued.
    Stopped,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends `item`; wakes the writer now, or records the wake for the
    /// end of the current batch.
    fn push(self: &Arc<Self>, item: Outgoing) -> Pushed {
        let mut state = self.lock();
        if state.stop {
            return Pushed::Stopped;
        }
        state.items.push_back(item);
        if !state.writer_running {
            state.writer_running = true;
            return Pushed::NeedsWriter;
        }
        if !state.sleeping {
            return Pushed::Queued;
        }
        if !wakes::holding() {
            state.sleeping = false;
            drop(state);
            self.ready.notify_one();
        } else if !state.wake_deferred {
            state.wake_deferred = true;
            drop(state);
            if !wakes::defer(self.clone()) {
                self.wake();
            }
        }
        Pushed::Queued
    }
}

/// Wakes the writer if it sleeps (a deferred wake, or `terminate`).
impl Wake for Queue {
    fn wake(&self) {
        let mut state = self.lock();
        state.wake_deferred = false;
        if state.sleeping {
            state.sleeping = false;
            drop(state);
            self.ready.notify_one();
        }
    }
}

/// The outbound side of one connection.
pub struct Outbound {
    pub id: u64,
    kind: Kind,
    /// This connection, for starting a writer thread from `&self`.
    me: Weak<Outbound>,
    writer: Arc<FrameWriter>,
    queue: Arc<Queue>,
    /// Items queued and not yet handled by the writer (≤ `QUEUE_FRAMES`).
    queued: AtomicUsize,
    pending: AtomicUsize,
    dead: AtomicBool,
}

impl Outbound {
    /// Creates the connection's outbound state and the receiving end for
    /// its first writer (the caller starts it with [`Outbound::write_loop`]).
    pub fn new(id: u64, writer: Arc<FrameWriter>, kind: Kind) -> (Arc<Outbound>, WriterInbox) {
        let queue = Arc::new(Queue {
            state: Mutex::new(QueueState {
                items: VecDeque::new(),
                sleeping: false,
                wake_deferred: false,
                stop: false,
                // The caller starts the first writer with the inbox.
                writer_running: true,
            }),
            ready: Condvar::new(),
        });
        let out = Arc::new_cyclic(|me| Outbound {
            id,
            kind,
            me: me.clone(),
            writer,
            queue: queue.clone(),
            queued: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            dead: AtomicBool::new(false),
        });
        (out, WriterInbox { queue })
    }

    /// Starts the first writer thread for `inbox` (from [`Outbound::new`]);
    /// the connection is terminated when no thread starts.
    pub fn start_writer(self: &Arc<Self>, inbox: WriterInbox) {
        let out = self.clone();
        let spawned =
            crate::util::thread::spawn(self.kind.writer_thread, Stack::Medium, move || {
                out.write_loop(inbox)
            });
        if spawned.is_err() {
            self.terminate();
        }
    }

    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Whether the socket itself was ended (hub shutdown, a failed write).
    pub fn writer_closed(&self) -> bool {
        self.writer.is_closed()
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
        let budget = self.kind.budget;
        let before = self.pending.fetch_add(cost, Ordering::AcqRel);
        if before + cost > budget {
            self.pending.fetch_sub(cost, Ordering::AcqRel);
            log::warn!(
                "{} {}: outbound budget exceeded ({before} bytes pending + {cost} > {budget}); terminating",
                self.kind.label,
                self.id,
            );
            self.terminate();
            return false;
        }
        let queued = self.reserve_slot()
            && self.enqueue(Outgoing::Frame {
                bytes: frame.bytes,
                cost,
            });
        if !queued {
            self.pending.fetch_sub(cost, Ordering::AcqRel);
            log::warn!(
                "{} {}: outbound queue full; terminating",
                self.kind.label,
                self.id
            );
            self.terminate();
            return false;
        }
        true
    }

    /// Counts one more queued item, refusing past `QUEUE_FRAMES`.
    fn reserve_slot(&self) -> bool {
        if self.queued.fetch_add(1, Ordering::AcqRel) >= QUEUE_FRAMES {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Runs `then` on the writer thread after everything queued so far has
    /// been written.
    pub fn after_writes(&self, then: Box<dyn FnOnce() + Send>) {
        if self.is_dead() {
            return;
        }
        if !(self.reserve_slot() && self.enqueue(Outgoing::Then(then))) {
            self.terminate();
        }
    }

    /// Queues `item`, starting a writer thread if the last one exited
    /// idle. False when the connection is stopping or no thread starts.
    fn enqueue(&self, item: Outgoing) -> bool {
        match self.queue.push(item) {
            Pushed::Queued => true,
            Pushed::Stopped => false,
            Pushed::NeedsWriter => {
                let Some(out) = self.me.upgrade() else {
                    return false;
                };
                let inbox = WriterInbox {
                    queue: self.queue.clone(),
                };
                let spawned =
                    crate::util::thread::spawn(self.kind.writer_thread, Stack::Medium, move || {
                        out.write_loop(inbox)
                    });
                if let Err(err) = spawned {
                    log::error!(
                        "{} {}: cannot start a writer: {err}",
                        self.kind.label,
                        self.id
                    );
                    self.queue.lock().writer_running = false;
                    return false;
                }
                true
            }
        }
    }

    /// Ends the connection at once (no close handshake).
    pub fn terminate(&self) {
        if !self.dead.swap(true, Ordering::AcqRel) {
            self.writer.terminate();
            self.queue.lock().stop = true;
            self.queue.wake();
        }
    }

    /// Bytes queued and not yet written.
    #[cfg(test)]
    pub fn pending_bytes(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }

    /// The writer thread's loop: takes everything queued, writes runs of
    /// frames with one call each, runs pacing callbacks once the frames
    /// before them are written, and ends when the connection dies.
    pub fn write_loop(&self, inbox: WriterInbox) {
        let queue = inbox.queue;
        let mut batch: VecDeque<Outgoing> = VecDeque::new();
        let mut idle_since: Option<Instant> = None;
        'outer: loop {
            {
                let mut state = queue.lock();
                loop {
                    if state.stop {
                        break 'outer;
                    }
                    if !state.items.is_empty() {
                        std::mem::swap(&mut state.items, &mut batch);
                        if state.items.capacity() > KEEP_CAPACITY {
                            state.items.shrink_to(KEEP_CAPACITY);
                        }
                        break;
                    }
                    let now = Instant::now();
                    let deadline = *idle_since.get_or_insert(now) + WRITER_IDLE_EXIT;
                    if now >= deadline {
                        // Idle: exit; the next push starts a new writer.
                        state.writer_running = false;
                        state.sleeping = false;
                        return;
                    }
                    state.sleeping = true;
                    state = queue
                        .ready
                        .wait_timeout(state, deadline - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                    state.sleeping = false;
                }
                idle_since = None;
            }
            if !self.write_batch(&mut batch) {
                break;
            }
            if batch.capacity() > KEEP_CAPACITY {
                batch.shrink_to(KEEP_CAPACITY);
            }
        }
        // Whatever is left is dropped; the connection is dead.
        batch.clear();
        queue.lock().items.clear();
    }

    /// Writes and runs everything in `batch`, in order. False when the
    /// connection died.
    fn write_batch(&self, batch: &mut VecDeque<Outgoing>) -> bool {
        while !batch.is_empty() {
            if self.is_dead() {
                return false;
            }
            // The run of frames at the front, up to the batch limits.
            let mut frames = 0;
            let mut bytes = 0;
            for item in batch.iter() {
                match item {
                    Outgoing::Frame { cost, .. }
                        if frames < WRITE_BATCH_FRAMES
                            && (frames == 0 || bytes + cost <= WRITE_BATCH_BYTES) =>
                    {
                        frames += 1;
                        bytes += cost;
                    }
                    _ => break,
                }
            }
            if frames == 0 {
                if let Some(Outgoing::Then(work)) = batch.pop_front() {
                    self.queued.fetch_sub(1, Ordering::AcqRel);
                    work();
                }
                continue;
            }
            let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(frames);
            for item in batch.iter().take(frames) {
                if let Outgoing::Frame { bytes, .. } = item {
                    slices.push(IoSlice::new(bytes));
                }
            }
            let result = self.writer.write_all_vectored(&mut slices);
            drop(slices);
            batch.drain(..frames);
            self.queued.fetch_sub(frames, Ordering::AcqRel);
            self.pending.fetch_sub(bytes, Ordering::AcqRel);
            if result.is_err() {
                self.terminate();
                return false;
            }
        }
        true
    }

    #[cfg(test)]
    fn writer_running(&self) -> bool {
        self.queue.lock().writer_running
    }
}

/// What the hub's health view reads of one connection's outbound side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Figures {
    /// Bytes charged to the budget and not yet written.
    pub pending_bytes: usize,
    /// Items queued and not yet handled by the writer.
    pub queued_items: usize,
    /// The connection's outbound budget.
    pub budget_bytes: usize,
}

/// Read-only figures for the health view: two atomic loads, no lock.
impl Outbound {
    pub fn figures(&self) -> Figures {
        Figures {
            pending_bytes: self.pending.load(Ordering::Relaxed),
            queued_items: self.queued.load(Ordering::Relaxed),
            budget_bytes: self.kind.budget,
        }
    }
}

/// What the writer thread waits on: the connection's queue.
pub struct WriterInbox {
    queue: Arc<Queue>,
}

/// A frame encoded once (header + payload), shareable across connections.
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

/// An unmasked ping frame with an empty payload.
pub fn ping() -> Encoded {
    Encoded {
        bytes: ws::encode_frame(ws::opcode::PING, b"").into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    const BUDGET: usize = 4 * 1024 * 1024;
    const KIND: Kind = Kind {
        label: "test",
        writer_thread: "test-writer",
        budget: BUDGET,
    };

    /// A connection whose writer thread is not started, so every queued
    /// byte stays pending.
    fn stalled() -> (Arc<Outbound>, WriterInbox, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let (conn, inbox) = Outbound::new(1, Arc::new(FrameWriter::for_tests(server)), KIND);
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
        assert!(conn.send_text(&"b".repeat(BUDGET - 10)));
        assert_eq!(conn.pending_bytes(), BUDGET);
        assert!(!conn.is_dead());
        // ...and any further frame terminates the connection.
        assert!(!conn.send_text(""));
        assert!(conn.is_dead());
    }

    #[test]
    fn a_single_frame_over_the_budget_is_refused_when_idle() {
        let (conn, _inbox, _peer) = stalled();
        assert!(!conn.send_text(&"c".repeat(BUDGET)));
        assert!(conn.is_dead());
        assert_eq!(conn.pending_bytes(), 0);
    }

    #[test]
    fn a_smaller_budget_is_the_kinds_own() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let kind = Kind {
            budget: 100,
            ..KIND
        };
        let (conn, _inbox) = Outbound::new(2, Arc::new(FrameWriter::for_tests(server)), kind);
        assert!(conn.send_text(&"d".repeat(98)));
        assert!(!conn.send_text("e"));
        assert!(conn.is_dead());
    }

    fn read_exact(peer: &mut TcpStream, n: usize) -> Vec<u8> {
        use std::io::Read;
        let mut buf = vec![0; n];
        peer.read_exact(&mut buf).unwrap();
        buf
    }

    #[test]
    fn frames_and_callbacks_keep_their_order_across_batches() {
        let (conn, inbox, mut peer) = stalled();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let mut expect = Vec::new();
        for i in 0..600 {
            let text = format!("frame {i}");
            expect.extend_from_slice(&encode(&text).bytes);
            assert!(conn.send_text(&text));
            if i % 97 == 0 {
                let done = done_tx.clone();
                let written = expect.len();
                conn.after_writes(Box::new(move || done.send(written).unwrap()));
            }
        }
        let writer = conn.clone();
        std::thread::spawn(move || writer.write_loop(inbox));
        assert_eq!(read_exact(&mut peer, expect.len()), expect);
        let marks: Vec<usize> = done_rx.iter().take(7).collect();
        assert!(marks.windows(2).all(|w| w[0] < w[1]), "{marks:?}");
        // The writer uncharges a run right after its `writev` returns.
        let deadline = Instant::now() + Duration::from_secs(5);
        while conn.pending_bytes() != 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(conn.pending_bytes(), 0);
        conn.terminate();
    }

    #[test]
    fn an_idle_writer_exits_and_the_next_frame_starts_one() {
        let (conn, inbox, mut peer) = stalled();
        let writer = conn.clone();
        let first = std::thread::spawn(move || writer.write_loop(inbox));
        assert!(conn.send_text("one"));
        assert_eq!(read_exact(&mut peer, 5), &*encode("one").bytes);
        first.join().unwrap();
        assert!(!conn.writer_running());
        assert!(conn.send_text("two"));
        assert!(conn.send_text("three"));
        let mut expect = encode("two").bytes.to_vec();
        expect.extend_from_slice(&encode("three").bytes);
        assert_eq!(read_exact(&mut peer, expect.len()), expect);
        conn.terminate();
    }

    #[test]
    fn held_wakes_are_released_once() {
        let (conn, inbox, mut peer) = stalled();
        let writer = conn.clone();
        std::thread::spawn(move || writer.write_loop(inbox));
        // Let the writer go to sleep, then queue while holding wakes.
        std::thread::sleep(std::time::Duration::from_millis(50));
        wakes::hold();
        assert!(conn.send_text("a"));
        assert!(conn.send_text("b"));
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(conn.pending_bytes(), 6, "written before the release");
        wakes::release();
        let mut expect = encode("a").bytes.to_vec();
        expect.extend_from_slice(&encode("b").bytes);
        assert_eq!(read_exact(&mut peer, expect.len()), expect);
        conn.terminate();
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
