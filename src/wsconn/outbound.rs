//! One front-end connection's outbound side (a panel's or a Shard
//! client's, over a WebSocket or a JSONL stream). Every frame is charged to
//! the connection's outbound budget (4 MiB for both front-ends) before it
//! is queued; a frame that would exceed it terminates the connection at
//! once, without a close handshake.
//!
//! **The write path.** A queued frame is written by the thread that
//! queued it, without blocking, whenever nobody else is writing on the
//! connection: one `sendmsg` with `MSG_DONTWAIT` of everything queued
//! (a flush). When the socket takes all of it, that is the end: no other
//! thread is involved. When it takes only part (a peer that reads slowly,
//! a full socket buffer), what is left stays at the front of the queue, a
//! frame cut in the middle keeping its offset, and the connection's writer
//! thread takes over with blocking `writev`s until the queue is empty
//! again; frames queued meanwhile go behind it. So a socket write never
//! blocks the thread that fans out, one slow connection never delays
//! another, and each connection's frames leave in the order they were
//! queued.
//!
//! A thread in the middle of a batch of input (see `util::wakes`: a
//! worker-events thread that ingests the envelopes of one socket read, or
//! `Publisher::notify` under the publish lock) does not flush at once: each
//! connection it queued for is flushed once, when the batch ends (its next
//! socket read, or the notification's end after the publish lock is
//! released). A burst of 32 envelopes is then one `sendmsg` per
//! connection, and no flush ever runs under the publish lock.
//!
//! **Who writes.** One thread at a time owns a connection's writes (the
//! `writing` flag): a flusher for one non-blocking `sendmsg`, or the
//! writer thread for one batch. A frame only ever leaves from the front of
//! the queue, taken by the owner. The budget counts bytes charged and not
//! yet accepted by the kernel, to the byte: a partial write uncharges
//! exactly what it wrote.
//!
//! **The writer thread** exists only while a connection has pushed back
//! (and for the first 0.5 s of a connection): it takes everything queued
//! at once and writes it with blocking `writev`s of up to
//! [`WRITE_BATCH_BYTES`], runs pacing callbacks (`after_writes`, replay)
//! once the frames before them are written, and exits after
//! [`WRITER_IDLE_EXIT`] with nothing to write. The queue is a `VecDeque`
//! under a short mutex, allocated on use; it grows only as far as the
//! budget (bytes) and [`QUEUE_FRAMES`] (items) let it. No lock is held
//! across any socket write, blocking or not.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use crate::util::thread::Stack;
use crate::util::wakes::{self, Wake};
use crate::ws::{self, FrameWriter};

/// Items one connection may have queued, whatever their size (the byte
/// budget is the real bound; this caps bookkeeping for tiny frames).
const QUEUE_FRAMES: usize = 16 * 1024;

/// The most frame bytes handed to one `writev` or `sendmsg`.
pub const WRITE_BATCH_BYTES: usize = 256 * 1024;

/// The most frames in one `writev` or `sendmsg` (well under `IOV_MAX`,
/// 1024).
const WRITE_BATCH_FRAMES: usize = 256;

/// Non-blocking writes one flush makes at most before it hands what is
/// left to the writer thread (frames keep arriving while it writes).
const FLUSH_ROUNDS: usize = 4;

/// A writer thread with nothing to write for this long exits; the next
/// push-back starts a new one. Idle connections then hold no thread.
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

/// Something to write: an encoded frame (of which the first `sent` bytes
/// are on the wire already), or work to run on the writer thread once
/// everything queued before it has been written (replay pacing).
pub enum Outgoing {
    Frame { bytes: Arc<[u8]>, sent: usize },
    Then(Box<dyn FnOnce() + Send>),
}

impl Outgoing {
    /// The bytes of a frame not yet written.
    fn unsent(&self) -> Option<&[u8]> {
        match self {
            Outgoing::Frame { bytes, sent } => Some(&bytes[*sent..]),
            Outgoing::Then(_) => None,
        }
    }
}

/// The queue between the threads that send and whoever writes.
struct Queue {
    state: Mutex<QueueState>,
    ready: Condvar,
}

struct QueueState {
    items: VecDeque<Outgoing>,
    /// Some thread owns the connection's writes now: a flusher, or the
    /// writer thread with a batch taken. Frames queued meanwhile wait
    /// behind, and the owner looks at them before it lets go.
    writing: bool,
    /// The writer is (about to be) waiting on `ready`.
    sleeping: bool,
    /// A flush of this connection sits in some thread's deferred list.
    flush_deferred: bool,
    /// Set by `terminate`: the writer stops at its next look.
    stop: bool,
    /// A writer thread is running (or starting). Cleared, under this
    /// lock, by a writer that exits after [`WRITER_IDLE_EXIT`].
    writer_running: bool,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes the writer if it sleeps (`terminate`, or work handed over).
    fn wake_writer(&self, mut state: MutexGuard<'_, QueueState>) {
        if state.sleeping {
            state.sleeping = false;
            drop(state);
            self.ready.notify_one();
        }
    }
}

/// What one non-blocking write of the front of a batch did.
enum Wrote {
    /// Every frame at the front was written.
    All,
    /// The socket took less than offered, or someone else was writing.
    PushedBack,
    /// The connection is dead.
    Failed,
}

/// The outbound side of one connection.
pub struct Outbound {
    pub id: u64,
    kind: Kind,
    /// This connection, for starting a writer thread from `&self` and for
    /// deferring a flush.
    me: Weak<Outbound>,
    writer: Arc<FrameWriter>,
    queue: Arc<Queue>,
    /// Items queued and not yet written or run (≤ `QUEUE_FRAMES`).
    queued: AtomicUsize,
    /// Bytes charged and not yet accepted by the kernel.
    pending: AtomicUsize,
    dead: AtomicBool,
}

/// A deferred flush (`util::wakes`): the batch that queued it ended.
impl Wake for Outbound {
    fn wake(&self) {
        self.flush();
    }
}

impl Outbound {
    /// Creates the connection's outbound state and the receiving end for
    /// its first writer (the caller starts it with [`Outbound::write_loop`]).
    pub fn new(id: u64, writer: Arc<FrameWriter>, kind: Kind) -> (Arc<Outbound>, WriterInbox) {
        let queue = Arc::new(Queue {
            state: Mutex::new(QueueState {
                items: VecDeque::new(),
                writing: false,
                sleeping: false,
                flush_deferred: false,
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
        if !self.reserve_slot() {
            self.pending.fetch_sub(cost, Ordering::AcqRel);
            log::warn!(
                "{} {}: outbound queue full; terminating",
                self.kind.label,
                self.id
            );
            self.terminate();
            return false;
        }
        let queued = self.enqueue(Outgoing::Frame {
            bytes: frame.bytes,
            sent: 0,
        });
        if !queued {
            // Stopping (its bytes are dropped with the queue), or no
            // writer thread could start for what the socket did not take.
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

    /// Queues `item` and flushes: now, or when the calling thread's batch
    /// of input ends. False when the connection is stopping or a writer
    /// thread was needed and none started.
    fn enqueue(&self, item: Outgoing) -> bool {
        let mut state = self.queue.lock();
        if state.stop {
            return false;
        }
        state.items.push_back(item);
        if state.writing {
            // The owner looks at the queue before it lets go.
            return true;
        }
        if wakes::holding() {
            if state.flush_deferred {
                return true;
            }
            state.flush_deferred = true;
            drop(state);
            if let Some(me) = self.me.upgrade() {
                if wakes::defer(me) {
                    return true;
                }
            }
            // Not recorded (the thread is ending): flush now.
        } else {
            drop(state);
        }
        self.flush()
    }

    /// Writes what is queued without waiting, as far as the socket takes
    /// it, and hands the rest (a push-back, or a pacing callback) to the
    /// writer thread. False when the connection is dead or stopping, or no
    /// writer thread starts.
    fn flush(&self) -> bool {
        // What is taken out of the queue to write; the queue gets an empty
        // (unallocated) deque meanwhile, and its own buffer back after.
        let mut batch: VecDeque<Outgoing> = VecDeque::new();
        let mut state = self.queue.lock();
        state.flush_deferred = false;
        if state.stop {
            return false;
        }
        if state.writing || state.items.is_empty() {
            return true;
        }
        state.writing = true;
        let mut rounds = 0;
        loop {
            std::mem::swap(&mut state.items, &mut batch);
            drop(state);
            let wrote = self.write_now(&mut batch);
            rounds += 1;
            state = self.queue.lock();
            // What is left goes back in front of what was queued meanwhile.
            if !state.items.is_empty() {
                batch.append(&mut state.items);
            }
            std::mem::swap(&mut state.items, &mut batch);
            match wrote {
                Wrote::Failed => {
                    state.writing = false;
                    drop(state);
                    self.terminate();
                    return false;
                }
                _ if state.stop => {
                    state.writing = false;
                    return false;
                }
                _ if state.items.is_empty() => {
                    state.writing = false;
                    return true;
                }
                Wrote::All
                    if rounds < FLUSH_ROUNDS
                        && matches!(state.items.front(), Some(Outgoing::Frame { .. })) =>
                {
                    continue;
                }
                _ => break,
            }
        }
        // Pushed back, or a pacing callback is next: the writer thread's.
        state.writing = false;
        if state.writer_running {
            self.queue.wake_writer(state);
            return true;
        }
        state.writer_running = true;
        drop(state);
        self.spawn_writer()
    }

    /// One non-blocking write of the run of frames at the front of
    /// `batch`; what was written is taken off (a frame cut in the middle
    /// keeps its offset) and uncharged.
    fn write_now(&self, batch: &mut VecDeque<Outgoing>) -> Wrote {
        if self.is_dead() {
            return Wrote::Failed;
        }
        let mut slices = [IoSlice::new(&[]); WRITE_BATCH_FRAMES];
        let (count, offered) = front_run(batch, &mut slices);
        if count == 0 {
            return Wrote::All;
        }
        let written = match self.writer.try_write_vectored(&slices[..count]) {
            Ok(n) => n,
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => 0,
            Err(_) => return Wrote::Failed,
        };
        self.consume(batch, written);
        if written < offered {
            Wrote::PushedBack
        } else {
            Wrote::All
        }
    }

    /// Takes `written` bytes of frames off the front of `batch` and
    /// uncharges them.
    fn consume(&self, batch: &mut VecDeque<Outgoing>, mut written: usize) {
        self.pending.fetch_sub(written, Ordering::AcqRel);
        let mut done = 0;
        while written > 0 {
            let Some(Outgoing::Frame { bytes, sent }) = batch.front_mut() else {
                break;
            };
            let left = bytes.len() - *sent;
            if written < left {
                *sent += written;
                break;
            }
            written -= left;
            batch.pop_front();
            done += 1;
        }
        self.queued.fetch_sub(done, Ordering::AcqRel);
    }

    /// Starts a writer thread for what the socket did not take. False
    /// (and the connection ended) when the system refuses one.
    fn spawn_writer(&self) -> bool {
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

    /// Ends the connection at once (no close handshake).
    pub fn terminate(&self) {
        self.end(|writer| writer.terminate());
    }

    /// Ends the connection with a close frame (`code`, `reason`) written
    /// ahead of anything still queued, then as [`Outbound::terminate`].
    pub fn close(&self, code: u16, reason: &str) {
        self.end(|writer| writer.close_and_shutdown(code, reason));
    }

    fn end(&self, shut: impl FnOnce(&FrameWriter)) {
        if !self.dead.swap(true, Ordering::AcqRel) {
            shut(&self.writer);
            let mut state = self.queue.lock();
            state.stop = true;
            self.queue.wake_writer(state);
        }
    }

    /// Bytes queued and not yet written.
    #[cfg(test)]
    pub fn pending_bytes(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }

    /// The writer thread's loop: takes everything queued when nobody else
    /// writes, writes runs of frames with one blocking call each, runs
    /// pacing callbacks once the frames before them are written, and ends
    /// when the connection dies or after [`WRITER_IDLE_EXIT`] idle.
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
                    if !state.writing && !state.items.is_empty() {
                        state.writing = true;
                        std::mem::swap(&mut state.items, &mut batch);
                        if state.items.capacity() > KEEP_CAPACITY {
                            state.items.shrink_to(KEEP_CAPACITY);
                        }
                        break;
                    }
                    let now = Instant::now();
                    let deadline = *idle_since.get_or_insert(now) + WRITER_IDLE_EXIT;
                    if now >= deadline && state.items.is_empty() {
                        // Idle: exit; the next push-back starts a new writer.
                        state.writer_running = false;
                        state.sleeping = false;
                        return;
                    }
                    state.sleeping = true;
                    let wait = deadline
                        .saturating_duration_since(now)
                        .max(WRITER_IDLE_EXIT / 4);
                    state = queue
                        .ready
                        .wait_timeout(state, wait)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                    state.sleeping = false;
                }
                idle_since = None;
            }
            let alive = self.write_batch(&mut batch);
            if batch.capacity() > KEEP_CAPACITY {
                batch.shrink_to(KEEP_CAPACITY);
            }
            queue.lock().writing = false;
            if !alive {
                break;
            }
        }
        // Whatever is left is dropped; the connection is dead.
        batch.clear();
        let mut state = queue.lock();
        state.items.clear();
        state.writing = false;
    }

    /// Writes and runs everything in `batch`, in order. False when the
    /// connection died.
    fn write_batch(&self, batch: &mut VecDeque<Outgoing>) -> bool {
        while !batch.is_empty() {
            if self.is_dead() {
                return false;
            }
            // The run of frames at the front, up to the batch limits.
            let mut slices = [IoSlice::new(&[]); WRITE_BATCH_FRAMES];
            let (frames, bytes) = front_run(batch, &mut slices);
            if frames == 0 {
                if let Some(Outgoing::Then(work)) = batch.pop_front() {
                    self.queued.fetch_sub(1, Ordering::AcqRel);
                    work();
                }
                continue;
            }
            let result = self.writer.write_all_vectored(&mut slices[..frames]);
            if result.is_err() {
                self.terminate();
                return false;
            }
            self.consume(batch, bytes);
        }
        true
    }

    #[cfg(test)]
    fn writer_running(&self) -> bool {
        self.queue.lock().writer_running
    }
}

/// The unsent bytes of the frames at the front of `batch`, up to the
/// batch limits (at least one frame, however large), into `slices`:
/// how many frames and bytes.
fn front_run<'a>(
    batch: &'a VecDeque<Outgoing>,
    slices: &mut [IoSlice<'a>; WRITE_BATCH_FRAMES],
) -> (usize, usize) {
    let (mut frames, mut bytes) = (0, 0);
    for item in batch.iter() {
        let Some(unsent) = item.unsent() else { break };
        if frames == WRITE_BATCH_FRAMES || (frames > 0 && bytes + unsent.len() > WRITE_BATCH_BYTES)
        {
            break;
        }
        slices[frames] = IoSlice::new(unsent);
        frames += 1;
        bytes += unsent.len();
    }
    (frames, bytes)
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
// `wait_for` sleeps between looks, up to its deadline.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};

    const BUDGET: usize = 4 * 1024 * 1024;
    const KIND: Kind = Kind {
        label: "test",
        writer_thread: "test-writer",
        budget: BUDGET,
    };

    /// A connection whose writer thread is not started (its inbox is
    /// returned): what the socket does not take stays pending. With
    /// `small`, the hub side's send buffer is as small as the kernel
    /// allows, so a peer that does not read pushes back early.
    fn stalled_with(small: bool) -> (Arc<Outbound>, WriterInbox, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        if small {
            let size: libc::c_int = 4096;
            // SAFETY: a plain setsockopt on a socket we own, with a valid
            // pointer to an int of the size given.
            let rc = unsafe {
                libc::setsockopt(
                    std::os::fd::AsRawFd::as_raw_fd(&server),
                    libc::SOL_SOCKET,
                    libc::SO_SNDBUF,
                    (&size as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            assert_eq!(rc, 0);
        }
        let (conn, inbox) = Outbound::new(1, Arc::new(FrameWriter::for_tests(server)), KIND);
        (conn, inbox, client)
    }

    fn stalled() -> (Arc<Outbound>, WriterInbox, TcpStream) {
        stalled_with(false)
    }

    /// Polls `done` for up to 10 s.
    fn wait_for(mut done: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    /// Reads unmasked server frames from `peer` until `want` text frames
    /// arrived: every frame's opcode and payload, in order.
    fn read_frames(peer: &mut TcpStream, want: usize) -> Vec<(u8, Vec<u8>)> {
        let mut frames = Vec::new();
        let mut texts = 0;
        while texts < want {
            let mut head = [0u8; 2];
            peer.read_exact(&mut head).unwrap();
            assert_eq!(head[0] & 0xf0, 0x80, "a frame starts here: {head:?}");
            let len = match head[1] {
                126 => {
                    let mut b = [0u8; 2];
                    peer.read_exact(&mut b).unwrap();
                    u16::from_be_bytes(b) as usize
                }
                127 => {
                    let mut b = [0u8; 8];
                    peer.read_exact(&mut b).unwrap();
                    u64::from_be_bytes(b) as usize
                }
                n => n as usize,
            };
            let mut payload = vec![0; len];
            peer.read_exact(&mut payload).unwrap();
            let opcode = head[0] & 0x0f;
            if opcode == ws::opcode::TEXT {
                texts += 1;
            }
            frames.push((opcode, payload));
        }
        frames
    }

    fn read_exact(peer: &mut TcpStream, n: usize) -> Vec<u8> {
        let mut buf = vec![0; n];
        peer.read_exact(&mut buf).unwrap();
        buf
    }

    #[test]
    fn costs_include_the_exact_frame_header() {
        for (len, header) in [(125usize, 2usize), (126, 4), (65535, 4), (65536, 10)] {
            let (conn, _inbox, _peer) = stalled();
            // Held: nothing is written before the batch ends.
            let _batch = wakes::batch();
            assert!(conn.send_text(&"a".repeat(len)));
            assert_eq!(conn.pending_bytes(), len + header, "payload {len}");
        }
    }

    #[test]
    fn the_budget_edge_is_exact() {
        let (conn, _inbox, _peer) = stalled();
        let _batch = wakes::batch();
        // A frame whose wire cost is exactly the budget fits...
        assert!(conn.send_text(&"b".repeat(BUDGET - 10)));
        assert_eq!(conn.pending_bytes(), BUDGET);
        assert!(!conn.is_dead());
        // ...and any further frame terminates the connection.
        assert!(!conn.send_text(""));
        assert!(conn.is_dead());
    }

    #[test]
    fn the_budget_is_cut_at_exactly_four_mib_of_what_the_socket_did_not_take() {
        // Written directly: the socket takes what fits, the rest stays
        // charged; the cut comes with the first frame whose cost would
        // take the bytes not accepted by the kernel past 4 MiB.
        let (conn, _inbox, _peer) = stalled_with(true);
        let cost = 64 * 1024;
        let text = "g".repeat(cost - 4);
        let mut sent = 0usize;
        loop {
            let before = conn.pending_bytes();
            let fits = before + cost <= BUDGET;
            assert_eq!(conn.send_text(&text), fits, "pending {before}");
            if !fits {
                assert!(conn.is_dead());
                assert_eq!(
                    conn.pending_bytes(),
                    before,
                    "the refused frame is not charged"
                );
                assert!(before > BUDGET - cost);
                break;
            }
            sent += cost;
            assert!(sent < 4 * BUDGET, "never cut");
        }
        // The kernel took some of it (the direct write ran) but not all.
        let taken = sent - conn.pending_bytes();
        assert!(taken > 0 && taken < sent, "taken {taken} of {sent}");
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
        let _batch = wakes::batch();
        assert!(conn.send_text(&"d".repeat(98)));
        assert!(!conn.send_text("e"));
        assert!(conn.is_dead());
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
        assert!(wait_for(|| conn.pending_bytes() == 0));
        conn.terminate();
    }

    #[test]
    fn a_frame_is_written_by_the_sender_when_the_socket_takes_it() {
        let (conn, inbox, mut peer) = stalled();
        let writer = conn.clone();
        let first = std::thread::spawn(move || writer.write_loop(inbox));
        // The first writer idles out; frames then go out without one.
        first.join().unwrap();
        assert!(!conn.writer_running());
        assert!(conn.send_text("one"));
        assert_eq!(conn.pending_bytes(), 0, "written before send_text returned");
        assert!(conn.send_text("two"));
        let mut expect = encode("one").bytes.to_vec();
        expect.extend_from_slice(&encode("two").bytes);
        assert_eq!(read_exact(&mut peer, expect.len()), expect);
        assert!(!conn.writer_running(), "no writer thread was started");
        conn.terminate();
    }

    #[test]
    fn a_partial_write_keeps_its_rest_and_later_frames_in_order() {
        let (conn, inbox, mut peer) = stalled_with(true);
        let big = "x".repeat(1024 * 1024);
        let big_cost = encode(&big).bytes.len();
        assert!(conn.send_text(&big));
        let left = conn.pending_bytes();
        assert!(left > 0 && left < big_cost, "cut in the middle: {left}");
        // A pong from the reader's side waits for the torn frame's rest.
        let pong_writer = conn.writer.clone();
        let pong = std::thread::spawn(move || {
            pong_writer
                .write_raw(&ws::encode_frame(ws::opcode::PING, b"p"))
                .unwrap()
        });
        let later: Vec<String> = (0..50).map(|i| format!("later {i}")).collect();
        for text in &later {
            assert!(conn.send_text(text));
        }
        let writer = conn.clone();
        std::thread::spawn(move || writer.write_loop(inbox));
        let frames = read_frames(&mut peer, 1 + later.len());
        pong.join().unwrap();
        let texts: Vec<&[u8]> = frames
            .iter()
            .filter(|(op, _)| *op == ws::opcode::TEXT)
            .map(|(_, p)| p.as_slice())
            .collect();
        assert_eq!(texts[0], big.as_bytes());
        for (got, want) in texts[1..].iter().zip(&later) {
            assert_eq!(*got, want.as_bytes());
        }
        // The ping, if it is out already, came between whole frames (each
        // frame above parsed from its own header).
        assert!(frames
            .iter()
            .all(|(op, p)| *op == ws::opcode::TEXT || (*op == ws::opcode::PING && p == b"p")));
        assert!(wait_for(|| conn.pending_bytes() == 0));
        conn.terminate();
    }

    #[test]
    fn a_connection_that_pushes_back_mid_burst_falls_back_to_its_writer() {
        let (conn, inbox, mut peer) = stalled_with(true);
        conn.start_writer(inbox);
        assert!(
            wait_for(|| !conn.writer_running()),
            "the first writer idles out"
        );
        assert!(conn.send_text("before"));
        assert!(!conn.writer_running(), "written directly");
        // A burst larger than the socket takes while the peer is away.
        let burst: Vec<String> = (0..40)
            .map(|i| format!("{i:04}{}", "y".repeat(60 * 1024)))
            .collect();
        for text in &burst {
            assert!(conn.send_text(text));
        }
        assert!(conn.pending_bytes() > 0);
        assert!(conn.writer_running(), "the push-back started the writer");
        let frames = read_frames(&mut peer, 1 + burst.len());
        assert_eq!(frames[0].1, b"before");
        for ((_, got), want) in frames[1..].iter().zip(&burst) {
            assert_eq!(got.as_slice(), want.as_bytes());
        }
        assert!(wait_for(|| conn.pending_bytes() == 0));
        assert!(
            wait_for(|| !conn.writer_running()),
            "and it idles out again"
        );
        conn.terminate();
    }

    #[test]
    fn a_held_batch_writes_at_its_release() {
        // No writer thread runs: only the release can write.
        let (conn, _inbox, mut peer) = stalled();
        wakes::hold();
        assert!(conn.send_text("a"));
        assert!(conn.send_text("b"));
        assert_eq!(conn.pending_bytes(), 6, "written before the release");
        wakes::release();
        assert_eq!(conn.pending_bytes(), 0, "flushed by the release itself");
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
