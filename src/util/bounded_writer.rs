//! A best-effort, bounded, append-only file writer that never blocks its
//! caller: `<session dir>/events.jsonl` and the worker log.
//!
//! Callers (worker reader threads) only check an atomic byte budget and
//! hand admitted lines to one lazily spawned `disk-writer` thread per file
//! over an unbounded channel (the budget is the bound). That thread alone
//! opens (lazily, create + append, 0600) and writes the file. Drops are
//! counted and reported by a caller-built omission marker before the next
//! admitted record. A full disk (`ENOSPC`, `EDQUOT`) drops the batch it
//! met (a partly written one is cut back to its last whole line) and
//! counts it the same way: the writer tries again with the next record,
//! whose marker reports what the full disk cost. Any other open or write
//! failure disables the writer for good. A thread with nothing to write
//! for [`IDLE_EXIT`] closes the file and exits (a session whose worker
//! stopped keeps no thread); the next record starts a new one. Closing a
//! writer with nothing pending is no event; a dropped writer never waits
//! (its thread writes what it was given and ends by itself).
//!
//! A caller in the middle of a batch of input (`util::wakes`: a
//! worker-events thread ingesting one socket read) does not hand each
//! record over on its own: admitted records are staged, in order, and sent
//! as one chunk when the batch ends, so a burst costs one channel send and
//! at most one wake of the writer thread. Any caller outside a batch sends
//! what is staged together with its own record, so the file keeps the
//! order of admission.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::wakes::{self, Wake};

/// The production pending budget per file (1 MiB).
pub const DEFAULT_BUDGET: usize = 1 << 20;

/// The production shutdown flush deadline.
pub const CLOSE_DEADLINE: Duration = Duration::from_secs(1);

/// At most this many bytes are gathered from the channel into one write.
const BATCH_BYTES: usize = 64 * 1024;

/// How long a writer thread waits for more records before it exits.
pub const IDLE_EXIT: Duration = Duration::from_secs(2);

/// What happened to one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Queued for the writer thread (not proof of delivery).
    Admitted,
    /// It would have pushed pending data over the budget; counted.
    Dropped,
    /// The writer failed or was closed; counted, nothing logged.
    Disabled,
}

/// The `events.jsonl` omission marker.
pub fn jsonl_omission_marker(records: u64, bytes: u64) -> String {
    format!(r#"{{"type":"hub_log_omission","dropped_records":{records},"dropped_bytes":{bytes}}}"#)
}

/// The worker log omission marker.
pub fn worker_log_omission_marker(records: u64, bytes: u64) -> String {
    format!("[hub: omitted {records} worker log records ({bytes} UTF-8 bytes)]")
}

/// What a batch's first record reserves in its chunk.
const STAGE_ROOM: usize = 16 * 1024;

/// Admitted lines handed over together: records, each after its
/// omission marker line if it has one.
#[derive(Default)]
struct Chunk {
    data: Vec<u8>,
    /// How many records (markers not counted).
    records: u64,
    /// The records' own bytes (without newlines), for drop accounting.
    record_bytes: u64,
    /// The drops its marker line reports (records, bytes); reported again
    /// by a later marker if the disk was full when this chunk was due.
    reported: (u64, u64),
}

/// State the caller threads and the writer thread share.
struct Shared {
    path: PathBuf,
    name: String,
    pending: AtomicUsize,
    dropped_records: AtomicU64,
    dropped_bytes: AtomicU64,
    failed: AtomicBool,
    /// Set when `close` stopped waiting: the thread discards the rest.
    abandoned: AtomicBool,
    /// Set while writes meet a full disk (one warning per episode).
    out_of_space: AtomicBool,
    /// Warnings logged (tests check "exactly one").
    warnings: AtomicUsize,
    /// Admission state; the writer thread takes it only to retire itself
    /// and to hand back the drops of a batch the full disk refused.
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn count_dropped(&self, records: u64, bytes: u64) {
        self.dropped_records.fetch_add(records, Ordering::Relaxed);
        self.dropped_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    fn warn(&self, message: std::fmt::Arguments<'_>) {
        self.warnings.fetch_add(1, Ordering::Relaxed);
        log::warn!("{}: {message}", self.name);
    }

    /// Hands the staged chunk to the writer thread (starting one if none
    /// runs). What cannot be handed over is counted as dropped and
    /// released from `pending`; the caller reports a failed start once it
    /// has let go of the lock.
    fn send_staged(self: &Arc<Self>, state: &mut State) -> Result<(), Unsent> {
        let Some(chunk) = state.staged.take() else {
            return Ok(());
        };
        let (size, records, bytes) = (chunk.data.len(), chunk.records, chunk.record_bytes);
        let lost = |why| {
            self.pending.fetch_sub(size, Ordering::AcqRel);
            self.count_dropped(records, bytes);
            Err(why)
        };
        if state.closed || self.failed.load(Ordering::Acquire) {
            return lost(Unsent::Disabled);
        }
        if state.sender.is_none() {
            if let Err(err) = self.spawn(state) {
                return lost(Unsent::Spawn(err));
            }
        }
        match state.sender.as_ref().map(|tx| tx.send(chunk)) {
            Some(Ok(())) => Ok(()),
            // The thread is gone (it only exits after close or a panic).
            _ => lost(Unsent::Disabled),
        }
    }

    fn spawn(self: &Arc<Self>, state: &mut State) -> std::io::Result<()> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(0);
        let shared = Arc::clone(self);
        let handle =
            super::thread::spawn("disk-writer", super::thread::Stack::Medium, move || {
                run(&shared, &rx);
                drop(done_tx);
            })?;
        state.sender = Some(tx);
        state.done = Some(done_rx);
        state.thread = Some(handle);
        Ok(())
    }

    /// [`Shared::send_staged`], then the lock released and a failed start
    /// reported.
    fn flush(self: &Arc<Self>, mut state: MutexGuard<'_, State>) -> Admit {
        let sent = self.send_staged(&mut state);
        drop(state);
        match sent {
            Ok(()) => Admit::Admitted,
            Err(Unsent::Disabled) => Admit::Disabled,
            Err(Unsent::Spawn(err)) => {
                self.fail("spawning the writer thread for", &err);
                Admit::Disabled
            }
        }
    }

    /// Disables the writer after an open or write failure (warns once).
    fn fail(&self, what: &str, err: &std::io::Error) {
        if !self.failed.swap(true, Ordering::AcqRel) {
            self.warn(format_args!(
                "{what} {} failed: {err}; this file is no longer written",
                self.path.display()
            ));
        }
    }
}

/// Why a staged chunk was not handed over.
enum Unsent {
    /// Closed, failed, or the thread is gone.
    Disabled,
    /// No writer thread could start.
    Spawn(std::io::Error),
}

/// Sends what a batch of input staged, when the batch ends.
struct Flush(Arc<Shared>);

impl Wake for Flush {
    fn wake(&self) {
        self.0.flush(self.0.lock());
    }
}

/// Admission state, touched only by callers, briefly, never across I/O.
struct State {
    /// `None` before the first admitted record and after `close`.
    sender: Option<Sender<Chunk>>,
    /// Disconnects when the writer thread exits.
    done: Option<Receiver<()>>,
    thread: Option<thread::JoinHandle<()>>,
    closed: bool,
    /// Admitted records not handed over yet (a batch of input's).
    staged: Option<Chunk>,
    /// Drops not yet reported by a marker.
    unreported_records: u64,
    unreported_bytes: u64,
    warned_drop: bool,
}

/// A bounded, best-effort append-only writer for one file.
pub struct BoundedWriter {
    shared: Arc<Shared>,
    budget: usize,
    marker: fn(u64, u64) -> String,
}

impl BoundedWriter {
    /// A writer for `path` admitting at most `budget` pending bytes.
    /// `marker(records, bytes)` builds the omission line (no newline);
    /// `name_for_logs` prefixes its warnings. Nothing is opened or spawned
    /// until the first record is admitted.
    pub fn new(
        path: PathBuf,
        budget: usize,
        marker: fn(u64, u64) -> String,
        name_for_logs: String,
    ) -> BoundedWriter {
        BoundedWriter {
            shared: Arc::new(Shared {
                path,
                name: name_for_logs,
                pending: AtomicUsize::new(0),
                dropped_records: AtomicU64::new(0),
                dropped_bytes: AtomicU64::new(0),
                failed: AtomicBool::new(false),
                abandoned: AtomicBool::new(false),
                out_of_space: AtomicBool::new(false),
                warnings: AtomicUsize::new(0),
                state: Mutex::new(State {
                    sender: None,
                    done: None,
                    thread: None,
                    closed: false,
                    staged: None,
                    unreported_records: 0,
                    unreported_bytes: 0,
                    warned_drop: false,
                }),
            }),
            budget,
            marker,
        }
    }

    /// Queues `record` plus a newline, preceded by an omission marker line
    /// when records were dropped since the last admission. The marker, the
    /// record and both newlines count against the budget together; if they
    /// do not fit, the record is dropped whole. Never waits for the disk.
    pub fn write_record(&self, record: &str) -> Admit {
        let record_bytes = record.len() as u64;
        let mut state = self.lock();
        if state.closed || self.shared.failed.load(Ordering::Acquire) {
            drop(state);
            self.shared.count_dropped(1, record_bytes);
            return Admit::Disabled;
        }

        let pending = self.shared.pending.load(Ordering::Acquire);
        let room = self.budget.saturating_sub(pending);
        // Only admission adds to `pending`, under this lock, so the check
        // cannot race another admission past the budget. The marker is only
        // built when the record alone would fit.
        let reported = (state.unreported_records, state.unreported_bytes);
        let marker = if reported.0 > 0 && record.len() < room {
            Some((self.marker)(reported.0, reported.1))
        } else {
            None
        };
        let size = marker.as_ref().map_or(0, |m| m.len() + 1) + record.len() + 1;
        if size > room {
            state.unreported_records += 1;
            state.unreported_bytes += record_bytes;
            let first = !std::mem::replace(&mut state.warned_drop, true);
            drop(state);
            self.shared.count_dropped(1, record_bytes);
            if first {
                self.shared.warn(format_args!(
                    "dropped a {record_bytes}-byte record for {} ({pending} of {} bytes \
                     pending); further drops are counted and reported by an omission marker",
                    self.shared.path.display(),
                    self.budget
                ));
            }
            return Admit::Dropped;
        }

        let chunk = state.staged.get_or_insert_with(Chunk::default);
        let first = chunk.records == 0;
        // A batch usually stages many records: room for several at once,
        // not a regrowth every few records.
        chunk
            .data
            .reserve(if first { size.max(STAGE_ROOM) } else { size });
        if let Some(marker) = &marker {
            chunk.data.extend_from_slice(marker.as_bytes());
            chunk.data.push(b'\n');
            chunk.reported.0 += reported.0;
            chunk.reported.1 += reported.1;
        }
        chunk.data.extend_from_slice(record.as_bytes());
        chunk.data.push(b'\n');
        chunk.records += 1;
        chunk.record_bytes += record_bytes;
        self.shared.pending.fetch_add(size, Ordering::AcqRel);
        state.unreported_records = 0;
        state.unreported_bytes = 0;
        // In a batch of input: sent when the batch ends (one flush is
        // enough for everything staged meanwhile, whoever staged it).
        if wakes::holding() && (!first || wakes::defer(Arc::new(Flush(Arc::clone(&self.shared))))) {
            return Admit::Admitted;
        }
        self.shared.flush(state)
    }

    /// Hands over what is staged, then stops admitting; the state stays
    /// locked for the caller.
    fn stop_admitting(&self) -> MutexGuard<'_, State> {
        self.shared.flush(self.lock());
        let mut state = self.lock();
        state.closed = true;
        state
    }

    /// Stops admitting, then waits at most `deadline` for the thread to
    /// write what is pending. A thread still busy with pending bytes (a
    /// stalled sink) is abandoned with a warning: it discards the rest at
    /// its next step and is not joined. A thread with nothing pending is
    /// left to end by itself, silently (it has nothing to lose). Later
    /// calls return at once.
    pub fn close(&self, deadline: Duration) {
        let (sender, done, handle) = {
            let mut state = self.stop_admitting();
            (state.sender.take(), state.done.take(), state.thread.take())
        };
        drop(sender);
        let Some(done) = done else {
            return;
        };
        match done.recv_timeout(deadline) {
            Err(RecvTimeoutError::Disconnected) | Ok(()) => {
                if let Some(handle) = handle {
                    let _ = handle.join();
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                // Admission is closed, so `pending` only falls from here.
                let pending = self.shared.pending.load(Ordering::Acquire);
                if pending == 0 {
                    // Everything is written; the thread is on its way out.
                    return;
                }
                self.shared.abandoned.store(true, Ordering::Release);
                self.shared.warn(format_args!(
                    "{} did not flush within {} ms; abandoning {pending} pending bytes",
                    self.shared.path.display(),
                    deadline.as_millis(),
                ));
            }
        }
    }

    /// Stops admitting without waiting: the thread writes what it was
    /// given and ends by itself. Used when the owner lets go (`Drop`),
    /// wherever that happens; a caller that must know the file is written
    /// calls [`BoundedWriter::close`] instead.
    pub fn detach(&self) {
        let mut state = self.stop_admitting();
        state.sender = None;
        state.done = None;
        // Dropping the handle detaches the thread.
        state.thread = None;
    }

    /// Records dropped over the writer's lifetime (budget, failure, close).
    pub fn dropped_records(&self) -> u64 {
        self.shared.dropped_records.load(Ordering::Relaxed)
    }

    /// Their bytes, newlines excluded.
    pub fn dropped_bytes(&self) -> u64 {
        self.shared.dropped_bytes.load(Ordering::Relaxed)
    }

    /// Whether an open or write failure disabled the writer.
    pub fn failed(&self) -> bool {
        self.shared.failed.load(Ordering::Acquire)
    }

    /// Admitted bytes (markers and newlines included) not yet written.
    pub fn pending_bytes(&self) -> usize {
        self.shared.pending.load(Ordering::Acquire)
    }

    #[cfg(test)]
    fn warnings_logged(&self) -> usize {
        self.shared.warnings.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }

    /// Whether a writer thread is running now.
    #[cfg(test)]
    fn has_thread(&self) -> bool {
        self.lock().sender.is_some()
    }
}

impl std::fmt::Debug for BoundedWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundedWriter")
            .field("path", &self.shared.path)
            .field("budget", &self.budget)
            .field("pending_bytes", &self.pending_bytes())
            .field("dropped_records", &self.dropped_records())
            .field("dropped_bytes", &self.dropped_bytes())
            .field("failed", &self.failed())
            .finish()
    }
}

impl Drop for BoundedWriter {
    fn drop(&mut self) {
        self.detach();
    }
}

/// The writer thread: gathers chunks, opens the file on the first one,
/// writes, and releases their bytes from `pending`. Returns when every
/// sender is gone (close), when close abandoned it, or after [`IDLE_EXIT`]
/// with nothing to write (it then retires itself from the state, under
/// the lock admission holds while sending, so no record is left behind).
fn run(shared: &Shared, rx: &Receiver<Chunk>) {
    let mut file: Option<File> = None;
    let mut batch: Vec<u8> = Vec::with_capacity(BATCH_BYTES);
    loop {
        let first = match rx.recv_timeout(IDLE_EXIT) {
            Ok(first) => first,
            Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {
                let mut state = shared.lock();
                if !rx.is_empty() {
                    continue;
                }
                if !state.closed {
                    // Detached: this thread ends by itself right after.
                    state.sender = None;
                    state.done = None;
                    state.thread = None;
                }
                return;
            }
        };
        let mut records = first.records;
        let mut record_bytes = first.record_bytes;
        let mut reported = first.reported;
        // A lone chunk (a whole batch of input's records) is written as it
        // is; more are gathered into `batch` first.
        let mut gathered = false;
        while (if gathered {
            batch.len()
        } else {
            first.data.len()
        }) < BATCH_BYTES
        {
            let Ok(next) = rx.try_recv() else {
                break;
            };
            if !gathered {
                batch.clear();
                batch.extend_from_slice(&first.data);
                gathered = true;
            }
            records += next.records;
            record_bytes += next.record_bytes;
            reported.0 += next.reported.0;
            reported.1 += next.reported.1;
            batch.extend_from_slice(&next.data);
        }
        let data: &[u8] = if gathered { &batch } else { &first.data };

        let outcome =
            if shared.abandoned.load(Ordering::Acquire) || shared.failed.load(Ordering::Acquire) {
                Wrote::Failed
            } else {
                write_batch(shared, &mut file, data)
            };
        match outcome {
            Wrote::All => {
                if shared.out_of_space.swap(false, Ordering::AcqRel) {
                    log::info!(
                        "{}: {} is written again; an omission record counts what the full \
                         disk cost",
                        shared.name,
                        shared.path.display()
                    );
                }
            }
            Wrote::Failed => shared.count_dropped(records, record_bytes),
            Wrote::NoSpace => {
                shared.count_dropped(records, record_bytes);
                // Reported by the next admitted record's marker, together
                // with whatever this batch's own markers reported.
                let mut state = shared.lock();
                state.unreported_records += records + reported.0;
                state.unreported_bytes += record_bytes + reported.1;
            }
        }
        shared.pending.fetch_sub(data.len(), Ordering::AcqRel);
        drop(first);
        // A single large record must not pin its buffer for the file's life.
        batch.clear();
        batch.shrink_to(BATCH_BYTES);
        if shared.abandoned.load(Ordering::Acquire) {
            // Whatever is still queued is discarded and counted.
            for chunk in rx.try_iter() {
                shared.count_dropped(chunk.records, chunk.record_bytes);
                shared.pending.fetch_sub(chunk.data.len(), Ordering::AcqRel);
            }
            return;
        }
    }
}

/// What became of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wrote {
    All,
    /// The disk is full: nothing of the batch stays in the file; the
    /// writer tries again with the next batch.
    NoSpace,
    /// The writer is disabled (or was abandoned).
    Failed,
}

/// Whether `err` says the file system has no room (a full disk or quota).
fn is_out_of_space(err: &std::io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

/// Notes a full disk (warns once per episode).
fn note_out_of_space(shared: &Shared, err: &std::io::Error) {
    if !shared.out_of_space.swap(true, Ordering::AcqRel) {
        shared.warn(format_args!(
            "writing {} failed: {err}; records are dropped and counted until there is room again",
            shared.path.display()
        ));
    }
}

/// Opens the file if needed and writes `batch`.
fn write_batch(shared: &Shared, file: &mut Option<File>, batch: &[u8]) -> Wrote {
    if file.is_none() {
        match OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&shared.path)
        {
            Ok(opened) => *file = Some(opened),
            Err(err) if is_out_of_space(&err) => {
                note_out_of_space(shared, &err);
                return Wrote::NoSpace;
            }
            Err(err) => {
                shared.fail("opening", &err);
                return Wrote::Failed;
            }
        }
        // Opening may have blocked (a FIFO) past a close deadline.
        if shared.abandoned.load(Ordering::Acquire) {
            return Wrote::Failed;
        }
    }
    let Some(open) = file.as_mut() else {
        return Wrote::Failed;
    };
    let mut written = 0usize;
    while written < batch.len() {
        match open.write(&batch[written..]) {
            Ok(0) => {
                let err = std::io::Error::from(std::io::ErrorKind::WriteZero);
                shared.fail("writing", &err);
                return Wrote::Failed;
            }
            Ok(n) => written += n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) if is_out_of_space(&err) => {
                note_out_of_space(shared, &err);
                // A full disk can cut a write short: the part that made it
                // is taken back, so the file holds only whole lines (the
                // file is appended to, so that part ends the file, unless
                // a previous worker's writer appended to the same log in
                // between, whose tail is then cut too). Freeing blocks
                // needs no room.
                if written > 0 {
                    let cut = open
                        .metadata()
                        .and_then(|m| open.set_len(m.len().saturating_sub(written as u64)));
                    if let Err(err) = cut {
                        shared.fail("cutting a partial line off", &err);
                        return Wrote::Failed;
                    }
                }
                return Wrote::NoSpace;
            }
            Err(err) => {
                shared.fail("writing", &err);
                return Wrote::Failed;
            }
        }
    }
    Wrote::All
}

#[cfg(test)]
// `wait_until` sleeps between looks, up to its deadline.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use crate::util::testkit::TempDir;
    use std::ffi::CString;
    use std::fs;
    use std::io::{BufRead, BufReader};
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;
    use std::time::Instant;

    fn mkfifo(path: &Path) {
        let c = CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path for the call.
        let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
        assert_eq!(rc, 0, "mkfifo: {}", std::io::Error::last_os_error());
    }

    /// Opens the FIFO for reading without blocking, which also releases a
    /// writer blocked opening it.
    fn open_fifo_reader_nonblocking(path: &Path) -> File {
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .unwrap()
    }

    fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
        let start = Instant::now();
        while !cond() {
            assert!(start.elapsed() < timeout, "timed out waiting for {what}");
            thread::sleep(Duration::from_millis(2));
        }
    }

    const PATIENCE: Duration = Duration::from_secs(10);

    fn writer(path: PathBuf, budget: usize) -> BoundedWriter {
        BoundedWriter::new(path, budget, jsonl_omission_marker, "test".into())
    }

    #[test]
    fn a_batch_of_input_hands_its_records_over_once_it_ends() {
        let dir = TempDir::new("staged");
        let path = dir.join("events.jsonl");
        let w = writer(path.clone(), DEFAULT_BUDGET);
        wakes::hold();
        for n in 1..=3 {
            assert_eq!(w.write_record(&format!("{{\"n\":{n}}}")), Admit::Admitted);
        }
        // Staged: admitted and counted, no thread started yet.
        assert!(!w.has_thread());
        assert_eq!(w.pending_bytes(), 3 * 8);
        wakes::release();
        assert!(w.has_thread());
        w.close(PATIENCE);
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n"
        );
        assert_eq!(w.pending_bytes(), 0);
    }

    #[test]
    fn a_record_from_outside_the_batch_keeps_the_order_of_admission() {
        let dir = TempDir::new("staged-order");
        let path = dir.join("events.jsonl");
        let w = Arc::new(writer(path.clone(), DEFAULT_BUDGET));
        wakes::hold();
        assert_eq!(w.write_record("a1"), Admit::Admitted);
        assert_eq!(w.write_record("a2"), Admit::Admitted);
        // Another thread, in no batch, sends what is staged with its own.
        let other = Arc::clone(&w);
        thread::spawn(move || assert_eq!(other.write_record("b1"), Admit::Admitted))
            .join()
            .unwrap();
        assert!(w.has_thread());
        assert_eq!(w.write_record("a3"), Admit::Admitted);
        wakes::release();
        w.close(PATIENCE);
        assert_eq!(fs::read_to_string(&path).unwrap(), "a1\na2\nb1\na3\n");
    }

    #[test]
    fn closing_writes_what_a_batch_staged_and_its_end_then_does_nothing() {
        let dir = TempDir::new("staged-close");
        let path = dir.join("events.jsonl");
        let w = writer(path.clone(), DEFAULT_BUDGET);
        wakes::hold();
        assert_eq!(w.write_record("kept"), Admit::Admitted);
        w.close(PATIENCE);
        wakes::release();
        assert_eq!(fs::read_to_string(&path).unwrap(), "kept\n");
        assert_eq!(w.dropped_records(), 0);
        // The budget counts staged bytes: a batch cannot stage past it.
        let w = writer(dir.join("small.jsonl"), 10);
        wakes::hold();
        assert_eq!(w.write_record("12345678"), Admit::Admitted);
        assert_eq!(w.write_record("x"), Admit::Dropped);
        wakes::release();
        assert_eq!(w.write_record("y"), Admit::Dropped);
        w.close(PATIENCE);
        assert_eq!(
            fs::read_to_string(dir.join("small.jsonl")).unwrap(),
            "12345678\n"
        );
    }

    #[test]
    fn an_idle_thread_exits_and_the_next_record_starts_another() {
        let dir = TempDir::new("idle");
        let path = dir.join("events.jsonl");
        let w = writer(path.clone(), DEFAULT_BUDGET);
        assert_eq!(w.write_record("{\"n\":1}"), Admit::Admitted);
        assert!(w.has_thread());
        wait_until("the idle exit", IDLE_EXIT + PATIENCE, || !w.has_thread());
        assert_eq!(w.pending_bytes(), 0);
        assert_eq!(w.write_record("{\"n\":2}"), Admit::Admitted);
        w.close(PATIENCE);
        assert_eq!(fs::read_to_string(&path).unwrap(), "{\"n\":1}\n{\"n\":2}\n");
        // Close after an idle exit returns at once and stops admission.
        let w = writer(dir.join("other.jsonl"), DEFAULT_BUDGET);
        assert_eq!(w.write_record("x"), Admit::Admitted);
        wait_until("the idle exit", IDLE_EXIT + PATIENCE, || !w.has_thread());
        w.close(PATIENCE);
        assert_eq!(w.write_record("y"), Admit::Disabled);
        assert_eq!(fs::read_to_string(dir.join("other.jsonl")).unwrap(), "x\n");
    }

    #[test]
    fn records_reach_the_file_in_order_with_private_mode() {
        let dir = TempDir::new("order");
        let path = dir.join("events.jsonl");
        let w = writer(path.clone(), DEFAULT_BUDGET);
        assert!(!path.exists(), "opened before the first record");
        let mut want = String::new();
        for i in 0..1000 {
            let record = format!("{{\"n\":{i}}}");
            assert_eq!(w.write_record(&record), Admit::Admitted);
            want.push_str(&record);
            want.push('\n');
        }
        wait_until("flush", PATIENCE, || w.pending_bytes() == 0);
        w.close(CLOSE_DEADLINE);
        assert_eq!(fs::read_to_string(&path).unwrap(), want);
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!((w.dropped_records(), w.dropped_bytes()), (0, 0));
        assert!(!w.failed());
        assert_eq!(w.warnings_logged(), 0);
        assert_eq!(w.write_record("late"), Admit::Disabled);
    }

    #[test]
    fn appends_to_an_existing_file() {
        let dir = TempDir::new("append");
        let path = dir.join("events.jsonl");
        fs::write(&path, "old\n").unwrap();
        let w = writer(path.clone(), 1024);
        w.write_record("new");
        w.close(CLOSE_DEADLINE);
        assert_eq!(fs::read_to_string(&path).unwrap(), "old\nnew\n");
    }

    #[test]
    fn close_flushes_everything_pending() {
        let dir = TempDir::new("flush");
        let path = dir.join("w.log");
        let w = writer(path.clone(), DEFAULT_BUDGET);
        let record = "y".repeat(1000);
        let mut admitted = 0;
        for _ in 0..1000 {
            if w.write_record(&record) == Admit::Admitted {
                admitted += 1;
            }
        }
        w.close(PATIENCE);
        assert_eq!(w.pending_bytes(), 0);
        let text = fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let markers = lines.iter().filter(|l| l.starts_with("{\"type\"")).count();
        assert_eq!(lines.len() - markers, admitted);
        assert_eq!(admitted as u64 + w.dropped_records(), 1000);
    }

    #[test]
    fn stalled_sink_never_blocks_and_reports_omissions_after_drain() {
        let dir = TempDir::new("fifo");
        let path = dir.join("events.jsonl");
        mkfifo(&path);
        let budget = 4096;
        let w = writer(path.clone(), budget);
        let record = format!("{{\"pad\":\"{}\"}}", "z".repeat(90)); // 100 bytes
        let (mut admitted, mut dropped, mut dropped_bytes) = (0usize, 0u64, 0u64);
        for _ in 0..200 {
            // 200 x 101 bytes is about five budgets' worth.
            let start = Instant::now();
            let outcome = w.write_record(&record);
            assert!(
                start.elapsed() < Duration::from_millis(500),
                "write_record blocked"
            );
            assert!(w.pending_bytes() <= budget);
            match outcome {
                Admit::Admitted => admitted += 1,
                Admit::Dropped => {
                    dropped += 1;
                    dropped_bytes += record.len() as u64;
                }
                Admit::Disabled => panic!("disabled"),
            }
        }
        assert_eq!(admitted, budget / (record.len() + 1));
        assert_eq!(dropped, 200 - admitted as u64);
        assert_eq!(w.dropped_records(), dropped);
        assert_eq!(w.dropped_bytes(), dropped_bytes);
        assert_eq!(w.warnings_logged(), 1, "the first drop warns once");

        // Drain: a blocking reader (its open completes against the
        // writer thread's blocked open) forwards lines to the test.
        let (lines_tx, lines_rx) = crossbeam_channel::unbounded::<String>();
        let reader_path = path.clone();
        let reader = thread::spawn(move || {
            let file = File::open(&reader_path).unwrap();
            for line in BufReader::new(file).lines() {
                if lines_tx.send(line.unwrap()).is_err() {
                    break;
                }
            }
        });
        for i in 0..admitted {
            let line = lines_rx
                .recv_timeout(PATIENCE)
                .unwrap_or_else(|_| panic!("line {i} not drained"));
            assert_eq!(line, record);
        }
        wait_until("pending drained", PATIENCE, || w.pending_bytes() == 0);

        assert_eq!(w.write_record("{\"after\":1}"), Admit::Admitted);
        let marker = lines_rx.recv_timeout(PATIENCE).unwrap();
        assert_eq!(
            marker,
            format!(
                "{{\"type\":\"hub_log_omission\",\"dropped_records\":{dropped},\"dropped_bytes\":{dropped_bytes}}}"
            )
        );
        assert_eq!(lines_rx.recv_timeout(PATIENCE).unwrap(), "{\"after\":1}");
        // The marker is reported once.
        assert_eq!(w.write_record("{\"after\":2}"), Admit::Admitted);
        assert_eq!(lines_rx.recv_timeout(PATIENCE).unwrap(), "{\"after\":2}");
        assert!(!w.failed());

        w.close(CLOSE_DEADLINE);
        // The writer thread closed the FIFO: the reader sees EOF.
        reader.join().unwrap();
        assert!(lines_rx.try_recv().is_err());
    }

    #[test]
    fn worker_log_marker_format() {
        assert_eq!(
            worker_log_omission_marker(3, 120),
            "[hub: omitted 3 worker log records (120 UTF-8 bytes)]"
        );
        assert_eq!(
            jsonl_omission_marker(12, 3456),
            r#"{"type":"hub_log_omission","dropped_records":12,"dropped_bytes":3456}"#
        );
    }

    #[test]
    fn marker_and_record_must_fit_together() {
        let dir = TempDir::new("marker");
        let path = dir.join("w.log");
        let budget = 64;
        let w = BoundedWriter::new(path.clone(), budget, worker_log_omission_marker, "t".into());
        assert_eq!(w.write_record(&"a".repeat(budget)), Admit::Dropped);
        // The record alone would fit, but not after its marker line.
        let marker = worker_log_omission_marker(1, budget as u64);
        let b = "b".repeat(budget - (marker.len() + 1) - 1 + 1);
        assert_eq!(w.write_record(&b), Admit::Dropped);
        let marker = worker_log_omission_marker(2, (budget + b.len()) as u64);
        let c = "c".repeat(budget - (marker.len() + 1) - 1);
        assert_eq!(w.write_record(&c), Admit::Admitted);
        assert!(w.pending_bytes() <= budget);
        w.close(CLOSE_DEADLINE);
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            format!("{marker}\n{c}\n")
        );
        assert_eq!(
            marker,
            format!(
                "[hub: omitted 2 worker log records ({} UTF-8 bytes)]",
                budget + b.len()
            )
        );
    }

    #[test]
    fn oversized_record_is_dropped_whole_even_when_idle() {
        let dir = TempDir::new("oversized");
        let path = dir.join("events.jsonl");
        let w = writer(path.clone(), 100);
        // 100 bytes + newline > 100.
        assert_eq!(w.write_record(&"o".repeat(100)), Admit::Dropped);
        assert_eq!(w.pending_bytes(), 0);
        assert_eq!((w.dropped_records(), w.dropped_bytes()), (1, 100));
        assert_eq!(w.warnings_logged(), 1);
        assert!(!path.exists(), "a dropped record opened the file");
        // A marker line plus a record line of exactly the budget is admitted.
        let marker = jsonl_omission_marker(1, 100);
        let fill = "f".repeat(100 - marker.len() - 2);
        assert_eq!(w.write_record(&fill), Admit::Admitted);
        w.close(CLOSE_DEADLINE);
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            format!("{marker}\n{fill}\n")
        );
        assert_eq!(w.warnings_logged(), 1);
    }

    fn assert_disabled_for_good(w: &BoundedWriter, path: &Path, make_openable: impl FnOnce()) {
        assert_eq!(w.write_record("first"), Admit::Admitted);
        wait_until("failure", PATIENCE, || w.failed());
        wait_until("pending released", PATIENCE, || w.pending_bytes() == 0);
        assert_eq!(w.warnings_logged(), 1);
        make_openable();
        for _ in 0..5 {
            assert_eq!(w.write_record("later"), Admit::Disabled);
        }
        assert_eq!(w.dropped_records(), 6);
        assert_eq!(w.dropped_bytes(), 5 + 5 * 5);
        assert_eq!(w.warnings_logged(), 1, "silent after the failure");
        w.close(CLOSE_DEADLINE);
        assert!(
            !path.is_file(),
            "the writer reopened a path it had given up on"
        );
    }

    #[test]
    fn open_failure_in_a_missing_directory_disables_the_writer() {
        let dir = TempDir::new("missing");
        let path = dir.join("gone").join("events.jsonl");
        let w = writer(path.clone(), 1024);
        assert_disabled_for_good(&w, &path, || fs::create_dir(dir.join("gone")).unwrap());
    }

    #[test]
    fn open_failure_on_a_directory_disables_the_writer() {
        let dir = TempDir::new("isdir");
        let path = dir.join("events.jsonl");
        fs::create_dir(&path).unwrap();
        let w = writer(path.clone(), 1024);
        assert_disabled_for_good(&w, &path, || fs::remove_dir(&path).unwrap());
    }

    #[test]
    fn does_not_follow_a_symlink() {
        let dir = TempDir::new("symlink");
        let target = dir.join("target");
        let path = dir.join("events.jsonl");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let w = writer(path.clone(), 1024);
        w.write_record("x");
        wait_until("failure", PATIENCE, || w.failed());
        assert!(!target.exists());
    }

    #[test]
    fn close_with_a_stuck_fifo_returns_near_the_deadline() {
        let dir = TempDir::new("stuck");
        let path = dir.join("events.jsonl");
        mkfifo(&path);
        let w = writer(path.clone(), 4096);
        for _ in 0..10 {
            assert_eq!(w.write_record("stuck"), Admit::Admitted);
        }
        let deadline = Duration::from_millis(200);
        let start = Instant::now();
        w.close(deadline);
        let took = start.elapsed();
        assert!(took >= deadline, "returned before the deadline: {took:?}");
        assert!(took < deadline + Duration::from_secs(2), "took {took:?}");
        assert_eq!(w.write_record("after close"), Admit::Disabled);
        assert!(!w.failed());
        // A second close (and Drop) does not wait again.
        let start = Instant::now();
        w.close(PATIENCE);
        assert!(start.elapsed() < Duration::from_secs(1));

        // Release the abandoned thread: it discards what was queued.
        let _reader = open_fifo_reader_nonblocking(&path);
        wait_until("abandoned data discarded", PATIENCE, || {
            w.pending_bytes() == 0
        });
        assert_eq!(w.dropped_records(), 11);
    }

    #[test]
    fn drop_closes_the_writer() {
        let dir = TempDir::new("drop");
        let path = dir.join("w.log");
        {
            let w = writer(path.clone(), 1024);
            w.write_record("one");
            w.write_record("two");
            wait_until("flush", PATIENCE, || w.pending_bytes() == 0);
        }
        assert_eq!(fs::read_to_string(&path).unwrap(), "one\ntwo\n");
    }

    #[test]
    fn a_dropped_writer_writes_what_it_was_given_without_waiting() {
        let dir = TempDir::new("drop-pending");
        let path = dir.join("w.log");
        let mut want = String::new();
        let started = Instant::now();
        {
            let w = writer(path.clone(), DEFAULT_BUDGET);
            for i in 0..2000 {
                let record = format!("line {i}");
                assert_eq!(w.write_record(&record), Admit::Admitted);
                want.push_str(&record);
                want.push('\n');
            }
        }
        assert!(started.elapsed() < Duration::from_secs(1));
        wait_until("the detached thread's writes", PATIENCE, || {
            fs::read_to_string(&path).is_ok_and(|text| text == want)
        });
    }

    #[test]
    fn closing_with_nothing_pending_is_no_event_even_at_a_zero_deadline() {
        let dir = TempDir::new("close-idle");
        let path = dir.join("w.log");
        for deadline in [Duration::ZERO, Duration::from_millis(1)] {
            let w = writer(path.clone(), 1024);
            assert_eq!(w.write_record("x"), Admit::Admitted);
            wait_until("flush", PATIENCE, || w.pending_bytes() == 0);
            // The thread is alive (well within its idle exit) and has
            // nothing left to write.
            assert!(w.has_thread());
            w.close(deadline);
            assert_eq!(w.warnings_logged(), 0);
            assert_eq!((w.dropped_records(), w.dropped_bytes()), (0, 0));
            assert_eq!(w.write_record("late"), Admit::Disabled);
        }
        assert_eq!(fs::read_to_string(&path).unwrap(), "x\nx\n");
    }

    #[test]
    fn a_full_disk_drops_and_counts_but_does_not_disable() {
        // /dev/full answers every write with ENOSPC.
        let w = writer(PathBuf::from("/dev/full"), 4096);
        for round in 1..=3u64 {
            assert_eq!(w.write_record("lost"), Admit::Admitted);
            wait_until("the refused write", PATIENCE, || w.pending_bytes() == 0);
            assert_eq!(w.dropped_records(), round, "the write is counted");
        }
        // Each later record carries a marker reporting every earlier drop
        // (the marker lines were refused too, and are reported again).
        assert_eq!(w.shared.lock().unreported_records, 3);
        assert_eq!(w.shared.lock().unreported_bytes, 12);
        assert!(!w.failed(), "a full disk is not a failure for good");
        assert_eq!(w.warnings_logged(), 1, "one warning per full-disk episode");
        w.close(CLOSE_DEADLINE);
        assert_eq!(w.warnings_logged(), 1);
    }

    #[test]
    fn concurrent_writers_keep_records_whole() {
        let dir = TempDir::new("concurrent");
        let path = dir.join("w.log");
        let w = Arc::new(writer(path.clone(), 8192));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let w = Arc::clone(&w);
                thread::spawn(move || {
                    for i in 0..500 {
                        w.write_record(&format!("{{\"t\":{t},\"i\":{i}}}"));
                        assert!(w.pending_bytes() <= 8192);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        w.close(PATIENCE);
        let text = fs::read_to_string(&path).unwrap();
        let mut records = 0u64;
        let mut reported = 0u64;
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            if v["type"] == "hub_log_omission" {
                reported += v["dropped_records"].as_u64().unwrap();
            } else {
                records += 1;
            }
        }
        assert_eq!(records + w.dropped_records(), 2000);
        assert!(reported <= w.dropped_records());
    }
}
