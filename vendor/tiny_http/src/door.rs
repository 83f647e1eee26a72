//! Fork addition: the front door of `serve_with_limits`.
//!
//! One thread (named like the accept thread) owns the listener and every
//! connection that has no complete request head yet: connections just
//! accepted, keep-alive connections between requests, and heads still
//! arriving. It waits on all of them with `poll(2)`, reads what arrives
//! into a buffer of at most `max_header_bytes + 1` bytes per connection,
//! and hands a connection to a handler thread only once its head is
//! complete. After the request a keep-alive connection comes back here,
//! with the bytes that were read past it (a pipelined request). So a
//! client that opens a socket and trickles half a head, or keeps a
//! connection idle, costs a buffer and a descriptor, never a thread.
//!
//! Bounds, all from [`ServerLimits`]:
//! - `max_connections`: connections open at once, wherever they are
//!   (here or on a handler thread; upgraded sockets leave the count). At
//!   the limit the oldest idle connection (keep-alive or silent since it
//!   was accepted) is closed to make room for the new one; only when none
//!   is idle is the new one answered `503` and closed.
//! - `max_handlers`: handler threads at once. Complete heads beyond it
//!   wait here in arrival order; a handler thread takes the next one when
//!   it is done, and exits after [`HANDLER_LINGER`] without work.
//! - `head_timeout` (and at most `request_timeout`): from a head's first
//!   byte to its end; then `408` and close. `min_head_rate` (bytes per second, 0 = off): a head arriving
//!   slower than that on average, judged after [`RATE_GRACE`], is cut the
//!   same way.
//! - `idle_timeout`: a connection that sends nothing for that long between
//!   requests is closed without a response.
//! - A head larger than `max_header_bytes` gets `431`, a byte no head may
//!   contain `400`, both written here and followed by a close.
//!
//! When `accept` runs out of descriptors (`EMFILE`, `ENFILE`) the oldest
//! idle connection is closed for the new one, as at `max_connections`.
//! Accept errors that remain leave the listener out of the poll set for a
//! while, doubling from [`ACCEPT_BACKOFF_MIN`] to
//! [`ACCEPT_BACKOFF_MAX`], so they cost no spinning core; the open
//! connections are served meanwhile.

use std::collections::VecDeque;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::io::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use crate::limits::{self, Handler, ServerLimits, ThreadNames};

/// Bytes read from a socket in one call.
const READ_CHUNK: usize = 4096;

/// How long a handler thread without work waits for the next head.
pub const HANDLER_LINGER: Duration = Duration::from_secs(1);

/// The listener's rest after a failed `accept`, doubling up to the max.
pub const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(50);
pub const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// A head's rate is judged only once it has been arriving this long.
pub const RATE_GRACE: Duration = Duration::from_secs(2);

/// Connections accepted per wake at most (the others wait for the next
/// round, so a crowd of new ones does not starve the established).
const ACCEPT_BATCH: usize = 64;

/// The longest poll wait (the deadlines are checked at least this often).
const MAX_WAIT: Duration = Duration::from_secs(1);

/// What a buffer holds so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// No complete head yet, nothing wrong with it.
    Incomplete,
    /// A complete head (up to and including its empty line).
    Complete,
    /// A byte no head contains: NUL or another control character (tab
    /// aside), DEL, a non-ASCII byte, a bare CR or LF.
    Malformed,
    /// More than `max` bytes and no end of head.
    TooLarge,
}

/// Looks at `buf` (a connection's bytes since its last request), `from`
/// being where the bytes not looked at before start. Pure.
pub fn scan_head(buf: &[u8], from: usize, max: usize) -> Scan {
    let start = from.saturating_sub(1);
    for i in start..buf.len() {
        let byte = buf[i];
        match byte {
            b'\n' => {
                if i == 0 || buf[i - 1] != b'\r' {
                    return Scan::Malformed;
                }
                if i + 1 > max {
                    return Scan::TooLarge;
                }
                // "\r\n\r\n" ends the head; a head that starts with an
                // empty line is complete too (the parser refuses it).
                if i == 1 || (i >= 3 && &buf[i - 3..=i] == b"\r\n\r\n") {
                    return Scan::Complete;
                }
            }
            b'\r' => {
                if buf.get(i + 1).is_some_and(|&next| next != b'\n') {
                    return Scan::Malformed;
                }
            }
            b'\t' => {}
            _ if byte < 0x20 || byte >= 0x7f => return Scan::Malformed,
            _ => {}
        }
    }
    if buf.len() > max {
        Scan::TooLarge
    } else {
        Scan::Incomplete
    }
}

/// Whether a head that started at `started` and has `bytes` bytes by `now`
/// arrives too slowly for `min_rate` bytes per second. Pure.
pub fn too_slow(bytes: usize, started: Instant, now: Instant, min_rate: u32) -> bool {
    if min_rate == 0 {
        return false;
    }
    let elapsed = now.saturating_duration_since(started);
    elapsed >= RATE_GRACE && (bytes as f64) < f64::from(min_rate) * elapsed.as_secs_f64()
}

/// A connection waiting here.
struct Conn {
    sock: TcpStream,
    buf: Vec<u8>,
    /// When it last finished a request (or was accepted): the idle clock
    /// and the eviction order.
    since: Instant,
    /// The first byte of the head now arriving.
    head_started: Option<Instant>,
}

impl Conn {
    fn idle(&self) -> bool {
        self.head_started.is_none()
    }
}

/// A connection with a complete head, for a handler thread.
pub(crate) struct Ready {
    pub sock: TcpStream,
    pub head: Vec<u8>,
    /// When its first byte arrived (the request deadline counts from it).
    pub started: Instant,
}

/// State shared by the door thread, the handler threads and the handle.
pub(crate) struct Shared {
    pub close: AtomicBool,
    /// Connections open (here, queued or on a handler thread).
    pub open: AtomicUsize,
    wake_tx: UnixStream,
    /// Keep-alive connections handed back by handler threads (`None` once
    /// the door has stopped: they are then closed).
    returned: Mutex<Option<Vec<(TcpStream, Vec<u8>)>>>,
    pool: Mutex<Pool>,
    work: Condvar,
    limits: ServerLimits,
    names: ThreadNames,
    handler: Handler,
}

#[derive(Default)]
struct Pool {
    queue: VecDeque<Ready>,
    running: usize,
    idle: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// Wakes the door thread (a full pipe already holds a wake).
    pub fn wake(&self) {
        let _ = (&self.wake_tx).write(&[1]);
    }

    /// A handler thread is done with a keep-alive connection.
    fn give_back(&self, sock: TcpStream, rest: Vec<u8>) {
        match lock(&self.returned).as_mut() {
            Some(returned) => returned.push((sock, rest)),
            None => {
                self.open.fetch_sub(1, SeqCst);
                return;
            }
        }
        self.wake();
    }

    /// Queues a complete head for a handler thread, starting one if none
    /// is free and the limit allows.
    fn dispatch(self: &Arc<Self>, ready: Ready) {
        let mut pool = lock(&self.pool);
        pool.queue.push_back(ready);
        if pool.idle > pool.queue.len() - 1 {
            drop(pool);
            self.work.notify_one();
            return;
        }
        if pool.running >= self.limits.max_handlers {
            return;
        }
        pool.running += 1;
        drop(pool);
        let shared = self.clone();
        let spawned = thread::Builder::new()
            .name(self.names.connection.to_owned())
            .stack_size(self.limits.thread_stack_size)
            .spawn(move || shared.handler_loop());
        if let Err(e) = spawned {
            log::error!("cannot spawn a connection thread: {}", e);
            let mut pool = lock(&self.pool);
            pool.running -= 1;
            if pool.running == 0 {
                // Nobody will take what waits: refuse it rather than hang.
                let stranded: Vec<Ready> = pool.queue.drain(..).collect();
                drop(pool);
                for ready in stranded {
                    limits::reject_busy(ready.sock);
                    self.open.fetch_sub(1, SeqCst);
                }
            }
        }
    }

    /// The next complete head, or `None` once none came for
    /// [`HANDLER_LINGER`] (the thread then ends).
    fn next_work(&self) -> Option<Ready> {
        let mut pool = lock(&self.pool);
        loop {
            if let Some(ready) = pool.queue.pop_front() {
                return Some(ready);
            }
            if self.close.load(SeqCst) {
                pool.running -= 1;
                return None;
            }
            pool.idle += 1;
            let (next, wait) = self
                .work
                .wait_timeout(pool, HANDLER_LINGER)
                .unwrap_or_else(PoisonError::into_inner);
            pool = next;
            pool.idle -= 1;
            if wait.timed_out() && pool.queue.is_empty() {
                pool.running -= 1;
                return None;
            }
        }
    }

    fn handler_loop(self: Arc<Self>) {
        while let Some(ready) = self.next_work() {
            match limits::serve_turn(ready, &self.limits, &*self.handler) {
                Some((sock, rest)) => self.give_back(sock, rest),
                None => {
                    self.open.fetch_sub(1, SeqCst);
                }
            }
        }
    }
}

/// Starts the door thread for `listener`.
pub(crate) fn start(
    listener: TcpListener,
    limits: ServerLimits,
    names: ThreadNames,
    handler: Handler,
) -> io::Result<(Arc<Shared>, thread::JoinHandle<()>)> {
    listener.set_nonblocking(true)?;
    let (wake_tx, wake_rx) = UnixStream::pair()?;
    wake_tx.set_nonblocking(true)?;
    wake_rx.set_nonblocking(true)?;
    let shared = Arc::new(Shared {
        close: AtomicBool::new(false),
        open: AtomicUsize::new(0),
        wake_tx,
        returned: Mutex::new(Some(Vec::new())),
        pool: Mutex::new(Pool::default()),
        work: Condvar::new(),
        limits,
        names,
        handler,
    });
    let door = Door {
        shared: shared.clone(),
        listener,
        wake_rx,
        conns: Vec::new(),
        accept_paused_until: None,
        backoff: ACCEPT_BACKOFF_MIN,
        scratch: vec![0; READ_CHUNK],
        round: Instant::now(),
    };
    let thread = thread::Builder::new()
        .name(names.accept.to_owned())
        .stack_size(shared.limits.thread_stack_size)
        .spawn(move || door.run())?;
    Ok((shared, thread))
}

struct Door {
    shared: Arc<Shared>,
    listener: TcpListener,
    wake_rx: UnixStream,
    conns: Vec<Conn>,
    accept_paused_until: Option<Instant>,
    backoff: Duration,
    scratch: Vec<u8>,
    /// When this round's poll began: a connection accepted (or handed
    /// back) since has not been read yet, so it is not taken for idle.
    round: Instant,
}

impl Door {
    fn run(mut self) {
        log::debug!("front door running");
        let mut fds: Vec<libc::pollfd> = Vec::new();
        while !self.shared.close.load(SeqCst) {
            let now = Instant::now();
            self.round = now;
            if self.accept_paused_until.is_some_and(|t| now >= t) {
                self.accept_paused_until = None;
            }
            let listening = self.accept_paused_until.is_none();
            fds.clear();
            fds.push(pollin(self.wake_rx.as_raw_fd()));
            if listening {
                fds.push(pollin(self.listener.as_raw_fd()));
            }
            let first_conn = fds.len();
            fds.extend(self.conns.iter().map(|c| pollin(c.sock.as_raw_fd())));
            let wait = self.next_wait(now);
            if let Err(err) = poll(&mut fds, wait) {
                if err.kind() != ErrorKind::Interrupted {
                    log::error!("front door poll failed: {}", err);
                    thread::sleep(Duration::from_millis(10));
                }
                continue;
            }
            if self.shared.close.load(SeqCst) {
                break;
            }
            if fds[0].revents != 0 {
                self.drain_wake();
            }
            // Connections with input, newest index first so removal by
            // swap keeps the remaining indices valid.
            let readable: Vec<usize> = fds[first_conn..]
                .iter()
                .enumerate()
                .filter(|(_, fd)| fd.revents != 0)
                .map(|(i, _)| i)
                .collect();
            for &i in readable.iter().rev() {
                self.read_from(i);
            }
            self.take_returned();
            if listening && fds[1].revents != 0 {
                self.accept_some();
            }
            self.expire(Instant::now());
        }
        // Closing: what waits here is dropped (closed); handler threads
        // finish their request and close theirs.
        let returned = lock(&self.shared.returned).take().unwrap_or_default();
        let open = self.conns.len() + returned.len();
        self.conns.clear();
        drop(returned);
        self.shared.open.fetch_sub(open, SeqCst);
        let queued: Vec<Ready> = lock(&self.shared.pool).queue.drain(..).collect();
        self.shared.open.fetch_sub(queued.len(), SeqCst);
        drop(queued);
        self.shared.work.notify_all();
        log::debug!("front door stopped");
    }

    /// Until the next deadline of a waiting connection (at most
    /// [`MAX_WAIT`]; sooner when the listener rests).
    fn next_wait(&self, now: Instant) -> Duration {
        let limits = &self.shared.limits;
        let mut wait = MAX_WAIT;
        for c in &self.conns {
            let due = match c.head_started {
                Some(started) => started + head_limit(limits),
                None => c.since + limits.idle_timeout,
            };
            wait = wait.min(due.saturating_duration_since(now));
        }
        if let Some(until) = self.accept_paused_until {
            wait = wait.min(until.saturating_duration_since(now));
        }
        // Round up so a due deadline is past when poll returns.
        wait + Duration::from_millis(1)
    }

    fn drain_wake(&mut self) {
        let mut buf = [0u8; 64];
        while matches!((&self.wake_rx).read(&mut buf), Ok(n) if n > 0) {}
    }

    /// Keep-alive connections handed back: a pipelined head goes on at
    /// once, the rest wait here.
    fn take_returned(&mut self) {
        let returned = lock(&self.shared.returned)
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        let now = Instant::now();
        for (sock, rest) in returned {
            if sock.set_nonblocking(true).is_err() {
                self.shared.open.fetch_sub(1, SeqCst);
                continue;
            }
            let conn = Conn {
                sock,
                head_started: if rest.is_empty() { None } else { Some(now) },
                buf: rest,
                since: now,
            };
            self.conns.push(conn);
            let last = self.conns.len() - 1;
            if !self.conns[last].buf.is_empty() {
                self.judge(last, 0);
            }
        }
    }

    /// Reads what connection `i` has and judges its head.
    fn read_from(&mut self, i: usize) {
        let max = self.shared.limits.max_header_bytes;
        let conn = &mut self.conns[i];
        let before = conn.buf.len();
        let room = (max + 1).saturating_sub(before).clamp(1, READ_CHUNK);
        match (&conn.sock).read(&mut self.scratch[..room]) {
            Ok(0) => self.close(i),
            Ok(n) => {
                if conn.buf.is_empty() {
                    conn.head_started = Some(Instant::now());
                }
                conn.buf.extend_from_slice(&self.scratch[..n]);
                self.judge(i, before);
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
            Err(_) => self.close(i),
        }
    }

    /// Hands connection `i` on when its head is complete, or refuses it.
    fn judge(&mut self, i: usize, from: usize) {
        let max = self.shared.limits.max_header_bytes;
        match scan_head(&self.conns[i].buf, from, max) {
            Scan::Incomplete => {}
            Scan::Complete => {
                let conn = self.conns.swap_remove(i);
                let _ = conn.sock.set_nonblocking(false);
                self.shared.dispatch(Ready {
                    sock: conn.sock,
                    head: conn.buf,
                    started: conn.head_started.unwrap_or_else(Instant::now),
                });
            }
            Scan::Malformed => self.refuse(i, "400 Bad Request"),
            Scan::TooLarge => self.refuse(i, "431 Request Header Fields Too Large"),
        }
    }

    /// Writes a closing error response (best effort, never blocking) and
    /// closes connection `i`.
    fn refuse(&mut self, i: usize, status: &str) {
        let conn = self.conns.swap_remove(i);
        let _ = (&conn.sock).write(
            format!("HTTP/1.1 {}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", status)
                .as_bytes(),
        );
        let _ = conn.sock.shutdown(std::net::Shutdown::Write);
        self.shared.open.fetch_sub(1, SeqCst);
    }

    fn close(&mut self, i: usize) {
        self.conns.swap_remove(i);
        self.shared.open.fetch_sub(1, SeqCst);
    }

    /// Idle connections past `idle_timeout` close silently; heads past
    /// `head_timeout` or slower than `min_head_rate` get `408`.
    fn expire(&mut self, now: Instant) {
        let limits = self.shared.limits.clone();
        let mut i = self.conns.len();
        while i > 0 {
            i -= 1;
            let c = &self.conns[i];
            match c.head_started {
                None if now >= c.since + limits.idle_timeout => self.close(i),
                Some(started)
                    if now >= started + head_limit(&limits)
                        || too_slow(c.buf.len(), started, now, limits.min_head_rate) =>
                {
                    self.refuse(i, "408 Request Timeout")
                }
                _ => {}
            }
        }
    }

    fn accept_some(&mut self) {
        for _ in 0..ACCEPT_BATCH {
            let sock = match self.listener.accept() {
                Ok((sock, _)) => sock,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if out_of_descriptors(&e) && self.evict_oldest_idle() => {
                    // The descriptor an idle connection held is the new
                    // one's.
                    continue;
                }
                Err(e) => {
                    // EMFILE, ENFILE, ENOBUFS, ...: rest the listener.
                    log::warn!(
                        "accept failed: {}; not accepting for {} ms",
                        e,
                        self.backoff.as_millis()
                    );
                    self.accept_paused_until = Some(Instant::now() + self.backoff);
                    self.backoff = (self.backoff * 2).min(ACCEPT_BACKOFF_MAX);
                    return;
                }
            };
            self.backoff = ACCEPT_BACKOFF_MIN;
            let configured = sock.set_nonblocking(true).and_then(|_| sock.set_nodelay(true));
            if let Err(e) = configured {
                log::debug!("dropping connection: cannot configure socket: {}", e);
                continue;
            }
            if self.shared.open.load(SeqCst) >= self.shared.limits.max_connections
                && !self.evict_oldest_idle()
            {
                limits::reject_busy(sock);
                continue;
            }
            self.shared.open.fetch_add(1, SeqCst);
            self.conns.push(Conn {
                sock,
                buf: Vec::new(),
                since: Instant::now(),
                head_started: None,
            });
        }
    }

    /// Closes the connection idle the longest; false when none is idle
    /// (one that arrived in this round does not count: what it sent may
    /// not have been read yet).
    fn evict_oldest_idle(&mut self) -> bool {
        let round = self.round;
        let oldest = self
            .conns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.idle() && c.since < round)
            .min_by_key(|(_, c)| c.since)
            .map(|(i, _)| i);
        match oldest {
            Some(i) => {
                log::debug!("connection limit reached; closing the oldest idle connection");
                self.close(i);
                true
            }
            None => false,
        }
    }
}

/// `poll(2)` on `fds` for at most `wait`.
#[allow(unsafe_code)]
fn poll(fds: &mut [libc::pollfd], wait: Duration) -> io::Result<()> {
    let millis = wait.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `fds` is a valid, initialized array of `fds.len()` pollfd
    // structs, borrowed mutably for the whole call.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, millis) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

/// How long a head may take: `head_timeout`, and never more than the
/// whole request's deadline.
fn head_limit(limits: &ServerLimits) -> Duration {
    limits.head_timeout.min(limits.request_timeout)
}

fn pollin(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_is_complete_at_its_empty_line() {
        let head = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        assert_eq!(scan_head(head, 0, 1024), Scan::Complete);
        for end in 0..head.len() - 1 {
            assert_eq!(scan_head(&head[..end], 0, 1024), Scan::Incomplete, "{end}");
        }
        // Scanning only the new bytes finds the same end.
        for from in 0..head.len() {
            assert_eq!(scan_head(head, from, 1024), Scan::Complete, "{from}");
        }
        // A body after it does not matter.
        assert_eq!(scan_head(b"POST / HTTP/1.1\r\n\r\n\x00\xff", 0, 1024), Scan::Complete);
        assert_eq!(scan_head(b"\r\n", 0, 1024), Scan::Complete);
    }

    #[test]
    fn bytes_no_head_contains_are_malformed() {
        for bad in [
            &b"GET / HTTP/1.1\nHost: a\r\n\r\n"[..],
            b"GET / HTTP/1.1\rHost",
            b"GET /\x00 HTTP/1.1\r\n",
            b"GET /\x7f",
            b"GET /\xc3\xa9",
            b"\x16\x03\x01",
        ] {
            assert_eq!(scan_head(bad, 0, 1024), Scan::Malformed, "{bad:?}");
        }
        assert_eq!(scan_head(b"GET /\tx HTTP/1.1\r", 0, 1024), Scan::Incomplete);
    }

    #[test]
    fn a_head_is_too_large_past_its_bound() {
        let head = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        assert_eq!(scan_head(head, 0, head.len()), Scan::Complete);
        assert_eq!(scan_head(head, 0, head.len() - 1), Scan::TooLarge);
        assert_eq!(scan_head(&[b'a'; 11], 0, 10), Scan::TooLarge);
        assert_eq!(scan_head(&[b'a'; 10], 0, 10), Scan::Incomplete);
    }

    #[test]
    fn a_head_is_too_slow_below_the_rate_after_the_grace() {
        let t = Instant::now();
        let at = |ms: u64| t + Duration::from_millis(ms);
        assert!(!too_slow(0, t, at(1999), 100));
        assert!(too_slow(199, t, at(2000), 100));
        assert!(!too_slow(200, t, at(2000), 100));
        assert!(too_slow(999, t, at(10_000), 100));
        assert!(!too_slow(0, t, at(60_000), 0), "0 turns it off");
    }
}
