//! WebSocket plumbing shared by every socket the hub accepts: the upgrade
//! handshake, a split stream (tungstenite parses incoming frames on the
//! reader thread; panel sockets read without waiting, for the panels'
//! poller in `panel::service`)
//! and a `FrameWriter` that any thread may use to send complete server
//! frames.
//!
//! All writes to one socket, including tungstenite's automatic pong and
//! close replies, go through that socket's `FrameWriter` mutex, so frames
//! never interleave. That mutex guards only the socket; no hub state lock is
//! ever held while taking it. A `FrameWriter` may also own a unix-domain
//! stream whose frames are JSONL lines (the Shard socket, `shard::lines`):
//! it writes the bytes it is given the same way, and its close sends no
//! WebSocket close frame.

use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use tiny_http::{Header, Request, Response};
use tungstenite::protocol::{Role, WebSocketConfig};
use tungstenite::WebSocket;

use crate::util::wakes;
pub use crate::wire::websocket::{
    close, encode_frame, frame_header_len, opcode, push_frame_header,
};

/// How long a close waits for a write in progress on the same socket
/// before it ends the socket without its close frame.
const CLOSE_LOCK_WAIT: Duration = Duration::from_millis(100);

/// The stream a [`FrameWriter`] owns: a TCP connection carrying WebSocket
/// frames, or a unix-domain stream carrying JSONL lines.
#[derive(Debug)]
pub enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Sock {
    fn raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        match self {
            Sock::Tcp(s) => s.as_raw_fd(),
            Sock::Unix(s) => s.as_raw_fd(),
        }
    }

    fn try_clone(&self) -> io::Result<Sock> {
        Ok(match self {
            Sock::Tcp(s) => Sock::Tcp(s.try_clone()?),
            Sock::Unix(s) => Sock::Unix(s.try_clone()?),
        })
    }

    fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.shutdown(how),
            Sock::Unix(s) => s.shutdown(how),
        }
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.write(buf),
            Sock::Unix(s) => s.write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.write_vectored(bufs),
            Sock::Unix(s) => s.write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.flush(),
            Sock::Unix(s) => s.flush(),
        }
    }
}

/// The socket behind a [`FrameWriter`]'s lock, and whether the last
/// non-blocking write left a frame half on the wire.
#[derive(Debug)]
struct Wire {
    sock: Sock,
    /// Part of a frame was written by [`FrameWriter::try_write_vectored`]
    /// and its rest waits in the sender's queue: until that rest is
    /// written, no other frame may go out (a pong or a close would land
    /// inside the torn frame).
    torn: bool,
}

/// Writes complete frames to one socket; shared by every thread that sends
/// on it. Once closed, further sends fail without touching the socket.
#[derive(Debug)]
pub struct FrameWriter {
    stream: Mutex<Wire>,
    /// Signalled when a torn frame has been completed.
    mended: Condvar,
    /// A second handle used only to shut the socket down. It is never
    /// locked, so ending a connection cannot wait behind a write that is
    /// blocked on a peer that stopped reading.
    ctl: Sock,
    closed: AtomicBool,
    /// Its frames are WebSocket frames (a close sends a close frame);
    /// false for a JSONL stream.
    websocket: bool,
}

/// How long one wait for a torn frame's completion lasts before the
/// waiter looks at `closed` again (a terminate cannot take the lock to
/// signal, so a waiter must not depend on the signal alone).
const TORN_WAIT: Duration = Duration::from_millis(100);

impl FrameWriter {
    fn new(stream: TcpStream) -> io::Result<FrameWriter> {
        Self::over(Sock::Tcp(stream), true)
    }

    /// A writer of JSONL lines over a unix-domain stream (its close is the
    /// socket's shutdown alone).
    pub fn lines(stream: UnixStream) -> io::Result<FrameWriter> {
        Self::over(Sock::Unix(stream), false)
    }

    fn over(stream: Sock, websocket: bool) -> io::Result<FrameWriter> {
        Ok(FrameWriter {
            ctl: stream.try_clone()?,
            stream: Mutex::new(Wire {
                sock: stream,
                torn: false,
            }),
            mended: Condvar::new(),
            closed: AtomicBool::new(false),
            websocket,
        })
    }

    /// A writer over a plain stream, for unit tests of the layers above.
    #[cfg(test)]
    pub fn for_tests(stream: TcpStream) -> FrameWriter {
        FrameWriter::new(stream).unwrap()
    }

    fn closed_error() -> io::Error {
        io::Error::new(io::ErrorKind::NotConnected, "socket closed")
    }

    /// The wire, once no frame is torn on it (or the socket was closed).
    fn whole(&self) -> io::Result<MutexGuard<'_, Wire>> {
        let mut wire = self.stream.lock().unwrap_or_else(|p| p.into_inner());
        while wire.torn && !self.closed.load(Ordering::Acquire) {
            wire = self
                .mended
                .wait_timeout(wire, TORN_WAIT)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        // A writer that waited behind one that failed must not try again.
        if self.closed.load(Ordering::Acquire) {
            return Err(Self::closed_error());
        }
        Ok(wire)
    }

    /// Writes already-encoded frame bytes as one unit (after the rest of
    /// a torn frame, if one is on the wire).
    pub fn write_raw(&self, bytes: &[u8]) -> io::Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Self::closed_error());
        }
        let mut wire = self.whole()?;
        let result = wire.sock.write_all(bytes).and_then(|()| wire.sock.flush());
        if result.is_err() {
            // A failed or timed-out write may have left half a frame on
            // the wire: the connection is unusable, so end it and wake its
            // reader (otherwise a peer that never reads stays "connected"
            // while every later send fails).
            self.terminate();
        }
        result
    }

    /// Writes several already-encoded frames, in order, as one unit:
    /// one `writev` when the socket takes them all (the usual case),
    /// more only after a partial write. `bufs` is consumed. The first
    /// buffer may be the rest of a torn frame (the queue's owner writes
    /// it): this call does not wait for it, it completes it.
    pub fn write_all_vectored(&self, bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Self::closed_error());
        }
        let mut wire = self.stream.lock().unwrap_or_else(|p| p.into_inner());
        if self.closed.load(Ordering::Acquire) {
            return Err(Self::closed_error());
        }
        let mut bufs = bufs;
        let mut result = Ok(());
        while !bufs.is_empty() {
            match wire.sock.write_vectored(bufs) {
                Ok(0) => {
                    result = Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "failed to write whole buffer",
                    ));
                    break;
                }
                Ok(n) => IoSlice::advance_slices(&mut bufs, n),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => {
                    result = Err(err);
                    break;
                }
            }
        }
        if result.is_err() {
            // As in `write_raw`: half a frame may be on the wire.
            self.terminate();
        } else if wire.torn {
            wire.torn = false;
            drop(wire);
            self.mended.notify_all();
        }
        result
    }

    /// Writes what the socket takes now of `bufs` (whole frames, the
    /// first possibly the rest of a torn frame), without waiting: one
    /// `sendmsg` with `MSG_DONTWAIT`. Returns the bytes written;
    /// `WouldBlock` when the socket takes nothing now or another thread is
    /// writing on it. A write that ends inside a frame leaves the wire
    /// torn: the caller must write that frame's rest before anything else,
    /// and other writers wait for it.
    pub fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Self::closed_error());
        }
        let mut wire = match self.stream.try_lock() {
            Ok(wire) => wire,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return Err(io::ErrorKind::WouldBlock.into()),
        };
        if self.closed.load(Ordering::Acquire) {
            return Err(Self::closed_error());
        }
        let fd = wire.sock.raw_fd();
        let n = match send_dontwait(fd, bufs) {
            Ok(n) => n,
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Err(err),
            Err(err) => {
                drop(wire);
                self.terminate();
                return Err(err);
            }
        };
        if n > 0 {
            let was_torn = wire.torn;
            wire.torn = !ends_on_a_boundary(bufs, n);
            if was_torn && !wire.torn {
                drop(wire);
                self.mended.notify_all();
            }
        }
        Ok(n)
    }

    pub fn send_text(&self, text: &str) -> io::Result<()> {
        self.write_raw(&encode_frame(opcode::TEXT, text.as_bytes()))
    }

    pub fn send_ping(&self) -> io::Result<()> {
        self.write_raw(&encode_frame(opcode::PING, b""))
    }

    /// Sends a close frame with `code` and a short reason, then shuts the
    /// socket down so the reader thread wakes. Used when a thread other than
    /// the reader ends the connection (superseded, shutdown). A JSONL
    /// stream has no close frame: it is only shut down.
    pub fn close_and_shutdown(&self, code: u16, reason: &str) {
        if !self.websocket {
            self.terminate();
            return;
        }
        let mut payload = code.to_be_bytes().to_vec();
        let mut cut = reason.len().min(120);
        while !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        payload.extend_from_slice(&reason.as_bytes()[..cut]);
        // A write in progress (a status signal, a batch of frames) usually
        // ends within microseconds, so wait for it briefly; one blocked on
        // a peer that stopped reading must not delay the shutdown below,
        // and then the close frame is skipped.
        if let Some(mut wire) = self.lock_within(CLOSE_LOCK_WAIT) {
            if !self.closed.load(Ordering::Acquire) {
                let _ = wire.sock.write_all(&encode_frame(opcode::CLOSE, &payload));
            }
        }
        self.terminate();
    }

    /// The stream with no torn frame on it, if its lock frees up (and a
    /// torn frame is completed) within `wait`. A torn frame is waited for
    /// on `mended`; a lock held by another writer is tried again every
    /// millisecond (`Mutex` has no timed lock).
    fn lock_within(&self, wait: Duration) -> Option<MutexGuard<'_, Wire>> {
        let deadline = Instant::now() + wait;
        loop {
            let locked = match self.stream.try_lock() {
                Ok(guard) => Some(guard),
                Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            };
            let left = deadline.saturating_duration_since(Instant::now());
            match locked {
                Some(mut wire) => {
                    while wire.torn {
                        let left = deadline.saturating_duration_since(Instant::now());
                        if left.is_zero() || self.closed.load(Ordering::Acquire) {
                            return None;
                        }
                        wire = self
                            .mended
                            .wait_timeout(wire, left)
                            .unwrap_or_else(|p| p.into_inner())
                            .0;
                    }
                    return Some(wire);
                }
                None if left.is_zero() => return None,
                None => {
                    #[expect(
                        clippy::disallowed_methods,
                        reason = "a write holds the lock and `Mutex` has no timed lock: \
                                  try_lock again in 1 ms, for at most CLOSE_LOCK_WAIT"
                    )]
                    std::thread::sleep(left.min(Duration::from_millis(1)));
                }
            }
        }
    }

    /// Whether the connection was ended (by a failed write, a close or
    /// `terminate`).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Ends the connection at once, without a close handshake.
    pub fn terminate(&self) {
        self.closed.store(true, Ordering::Release);
        let _ = self.ctl.shutdown(Shutdown::Both);
        // Whoever waits for a torn frame looks at `closed` again (it also
        // does so on its own within `TORN_WAIT`: this signal is not under
        // the lock, which a terminate never waits for).
        self.mended.notify_all();
    }
}

/// Whether writing `n` bytes of `bufs` ends exactly at the end of one of
/// them (no frame left torn).
fn ends_on_a_boundary(bufs: &[IoSlice<'_>], mut n: usize) -> bool {
    for buf in bufs {
        if n < buf.len() {
            return n == 0;
        }
        n -= buf.len();
    }
    true
}

/// One `sendmsg` of `bufs` on socket `fd` that does not wait (the
/// descriptor's own flags are untouched): the bytes written, or
/// `WouldBlock` when the socket takes none now. At most 1024 buffers
/// (`IOV_MAX`) are handed over; the caller sees how many bytes went.
fn send_dontwait(fd: std::os::fd::RawFd, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    let bufs = &bufs[..bufs.len().min(1024)];
    // SAFETY: zeroed is a valid `msghdr` (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // `IoSlice` is ABI-compatible with `iovec` on unix (documented).
    msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = bufs.len() as _;
    loop {
        // SAFETY: `msg` points at `bufs.len()` valid, live buffers that
        // are only read; the caller keeps the descriptor open for the call.
        let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// The reader's side of a socket: reads from its own handle, writes (pongs,
/// close replies) through the shared [`FrameWriter`].
#[derive(Debug)]
pub struct SplitStream {
    read: TcpStream,
    writer: Arc<FrameWriter>,
    /// Reads return `WouldBlock` instead of waiting (the socket itself
    /// stays blocking, so writes through the `FrameWriter` still wait).
    nonblocking_reads: bool,
    /// Reads in a row that found more input already waiting, so the
    /// current batch went on (at most [`HELD_READS`]).
    held_reads: u32,
}

/// Reads in a row one batch may span while more input is already waiting
/// in the socket: a flood of envelopes is then written out to each
/// connection in larger runs (at most this many reads of input, a few
/// hundred KiB), while a lone event is written at once.
const HELD_READS: u32 = 4;

impl SplitStream {
    /// Sets the read timeout of the underlying socket.
    pub fn set_read_timeout(&self, timeout: Option<std::time::Duration>) -> io::Result<()> {
        self.read.set_read_timeout(timeout)
    }

    /// Makes reads return `WouldBlock` when no data is available, for a
    /// socket whose readiness is watched by `poll` (panel sockets). Only
    /// this handle's reads change: it uses `MSG_DONTWAIT` per call rather
    /// than `O_NONBLOCK`, which the socket's other handles would share.
    pub fn set_nonblocking_reads(&mut self, on: bool) {
        self.nonblocking_reads = on;
    }

    /// Sets the write timeout of the underlying socket (shared with the
    /// [`FrameWriter`]'s handle: socket options belong to the socket).
    pub fn set_write_timeout(&self, timeout: Option<std::time::Duration>) -> io::Result<()> {
        self.read.set_write_timeout(timeout)
    }
}

impl Read for SplitStream {
    /// Tungstenite reads only when the messages already buffered are used
    /// up, so this is where one batch of input ends and the next begins:
    /// the connections this thread queued frames for are written here,
    /// once each, and further writes are held again while the new data is
    /// handled (`util::wakes`). When more input already waits in the
    /// socket, the batch goes on instead (at most [`HELD_READS`] reads in
    /// a row), so a flood is written out in larger runs.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.read);
        if self.held_reads < HELD_READS && wakes::holding() && input_waiting(fd) {
            // More input is here already: the batch goes on.
            self.held_reads += 1;
        } else {
            self.held_reads = 0;
            wakes::release();
        }
        let n = if self.nonblocking_reads {
            recv_dontwait(std::os::fd::AsRawFd::as_raw_fd(&self.read), buf)?
        } else {
            self.read.read(buf)?
        };
        if n > 0 {
            wakes::hold();
        }
        Ok(n)
    }
}

impl std::os::fd::AsRawFd for SplitStream {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.read.as_raw_fd()
    }
}

/// Whether socket `fd` has input waiting to be read now.
fn input_waiting(fd: std::os::fd::RawFd) -> bool {
    let mut waiting: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the valid pointer given; the
    // caller keeps the descriptor open for the call.
    let rc = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut waiting) };
    rc == 0 && waiting > 0
}

/// One `recv` on socket `fd` that does not wait: `WouldBlock` when
/// nothing is buffered (the descriptor's own flags are untouched).
pub fn recv_dontwait(fd: std::os::fd::RawFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes and the
        // caller keeps the descriptor open for the call.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

impl Drop for SplitStream {
    fn drop(&mut self) {
        wakes::release();
    }
}

impl Write for SplitStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // Each call carries whole frames from tungstenite's buffer.
        self.writer.write_raw(buf).map(|()| buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// An accepted WebSocket: tungstenite on the reader side, and the writer.
pub struct Accepted {
    pub socket: WebSocket<SplitStream>,
    pub writer: Arc<FrameWriter>,
}

/// An upgrade request that is not a WebSocket handshake (the front door
/// answers 400 `bad_request` with this reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadUpgrade(pub &'static str);

impl std::fmt::Display for BadUpgrade {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

/// A request header's value (the first of that name, case-insensitive).
fn header<'a>(rq: &'a Request, name: &str) -> Option<&'a str> {
    rq.headers()
        .iter()
        .find(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

/// Checks the upgrade headers and returns the `Sec-WebSocket-Accept` value.
pub fn check_upgrade(rq: &Request) -> Result<String, BadUpgrade> {
    let upgrade = header(rq, "Upgrade").unwrap_or("");
    if !upgrade.eq_ignore_ascii_case("websocket") {
        return Err(BadUpgrade("Upgrade must be websocket"));
    }
    let connection = header(rq, "Connection").unwrap_or("").to_ascii_lowercase();
    if !connection.split(',').any(|t| t.trim() == "upgrade") {
        return Err(BadUpgrade("Connection must include upgrade"));
    }
    if header(rq, "Sec-WebSocket-Version") != Some("13") {
        return Err(BadUpgrade("Sec-WebSocket-Version must be 13"));
    }
    let key = header(rq, "Sec-WebSocket-Key").ok_or(BadUpgrade("missing Sec-WebSocket-Key"))?;
    Ok(tungstenite::handshake::derive_accept_key(
        key.trim().as_bytes(),
    ))
}

/// Tungstenite's read chunk for sockets that receive bulk data (worker
/// event sockets): its default, 128 KiB.
pub const READ_BUFFER: usize = 128 * 1024;

/// The read chunk for sockets that receive a few small messages (panels):
/// tungstenite zero-fills its whole read chunk before the first read, so
/// this is resident memory per socket. A larger message still arrives,
/// over more reads.
pub const SMALL_READ_BUFFER: usize = 4 * 1024;

/// Answers 101 and wraps the socket. `max_message` bounds incoming
/// messages and frames (tungstenite's defaults are far too large).
pub fn accept(rq: Request, accept_key: &str, max_message: usize) -> io::Result<Accepted> {
    accept_with(rq, accept_key, max_message, READ_BUFFER)
}

/// [`accept`] with the size of the read chunk (see [`SMALL_READ_BUFFER`]).
pub fn accept_with(
    rq: Request,
    accept_key: &str,
    max_message: usize,
    read_buffer: usize,
) -> io::Result<Accepted> {
    accept_selecting(rq, accept_key, max_message, read_buffer, None)
}

/// [`accept_with`] whose 101 selects `protocol` in
/// `Sec-WebSocket-Protocol` (the caller checked that the client offered
/// it; `None` sends no such header).
pub fn accept_selecting(
    rq: Request,
    accept_key: &str,
    max_message: usize,
    read_buffer: usize,
    protocol: Option<&str>,
) -> io::Result<Accepted> {
    let mut response = Response::empty(101);
    if let Ok(h) = Header::from_bytes(&b"Sec-WebSocket-Accept"[..], accept_key.as_bytes()) {
        response.add_header(h);
    }
    if let Some(protocol) = protocol {
        let h = Header::from_bytes(&b"Sec-WebSocket-Protocol"[..], protocol.as_bytes())
            .map_err(|()| io::Error::new(io::ErrorKind::InvalidInput, "bad subprotocol"))?;
        response.add_header(h);
    }
    let stream = rq.upgrade_raw("websocket", response)?;
    let read = stream.try_clone()?;
    let writer = Arc::new(FrameWriter::new(stream)?);
    let config = WebSocketConfig::default()
        .max_message_size(Some(max_message))
        .max_frame_size(Some(max_message))
        .max_write_buffer_size(max_message.saturating_mul(2).max(1 << 20))
        .read_buffer_size(read_buffer);
    let split = SplitStream {
        read,
        writer: writer.clone(),
        nonblocking_reads: false,
        held_reads: 0,
    };
    Ok(Accepted {
        socket: WebSocket::from_raw_socket(split, Role::Server, Some(config)),
        writer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_sizes_at_the_boundaries() {
        assert_eq!(frame_header_len(0), 2);
        assert_eq!(frame_header_len(125), 2);
        assert_eq!(frame_header_len(126), 4);
        assert_eq!(frame_header_len(65535), 4);
        assert_eq!(frame_header_len(65536), 10);
        for len in [0, 125, 126, 65535, 65536] {
            let frame = encode_frame(opcode::TEXT, &vec![b'a'; len]);
            assert_eq!(frame.len(), frame_header_len(len) + len);
        }
    }

    #[test]
    fn nonblocking_reads_leave_the_socket_blocking() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let mut split = SplitStream {
            read: server.try_clone().unwrap(),
            writer: Arc::new(FrameWriter::new(server).unwrap()),
            nonblocking_reads: true,
            held_reads: 0,
        };
        let mut buf = [0u8; 8];
        let err = split.read(&mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut read_when_ready = |split: &mut SplitStream| loop {
            match split.read(&mut buf) {
                Ok(n) => break buf[..n].to_vec(),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    assert!(std::time::Instant::now() < deadline, "nothing arrived");
                    std::thread::yield_now();
                }
                Err(e) => panic!("{e}"),
            }
        };
        client.write_all(b"abc").unwrap();
        assert_eq!(read_when_ready(&mut split), b"abc");
        // The descriptor's own flags are untouched: writes still wait.
        // SAFETY: a plain fcntl query on a descriptor we own.
        let flags = unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&split), libc::F_GETFL) };
        assert_eq!(flags & libc::O_NONBLOCK, 0);
        drop(client);
        assert_eq!(read_when_ready(&mut split), b"");
    }

    /// A writer over one end of a loopback connection, and the other end.
    fn writer_and_peer() -> (Arc<FrameWriter>, TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let peer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (Arc::new(FrameWriter::new(server).unwrap()), peer)
    }

    #[test]
    fn a_close_waits_for_a_torn_frame_to_be_completed() {
        let (writer, mut peer) = writer_and_peer();
        writer.stream.lock().unwrap().torn = true;
        let mender = {
            let writer = writer.clone();
            std::thread::spawn(move || writer.write_all_vectored(&mut [IoSlice::new(b"rest")]))
        };
        let wire = writer
            .lock_within(Duration::from_secs(10))
            .expect("the completed frame frees the wire");
        assert!(!wire.torn);
        drop(wire);
        mender.join().unwrap().unwrap();
        let mut rest = [0u8; 4];
        peer.read_exact(&mut rest).unwrap();
        assert_eq!(&rest, b"rest");
    }

    #[test]
    fn a_close_gives_up_on_a_torn_frame_at_its_deadline_or_a_terminate() {
        let (writer, _peer) = writer_and_peer();
        writer.stream.lock().unwrap().torn = true;
        assert!(writer.lock_within(Duration::from_millis(20)).is_none());
        let started = std::time::Instant::now();
        let terminator = {
            let writer = writer.clone();
            std::thread::spawn(move || writer.terminate())
        };
        assert!(writer.lock_within(Duration::from_secs(30)).is_none());
        assert!(started.elapsed() < Duration::from_secs(10));
        terminator.join().unwrap();
    }

    /// The 101 of a real upgrade through the tiny_http fork: `101` with
    /// the accept key, and `Sec-WebSocket-Protocol` only when selected.
    fn handshake(protocol: Option<&'static str>) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let tx = Mutex::new(tx);
        let handler: Arc<dyn Fn(Request) + Send + Sync> = Arc::new(move |rq| {
            let key = check_upgrade(&rq).unwrap();
            let accepted = accept_selecting(rq, &key, 1024, SMALL_READ_BUFFER, protocol);
            let _ = tx.lock().unwrap().send(accepted.map(|a| a.writer));
        });
        let server =
            tiny_http::Server::serve_with_limits(listener, Default::default(), handler).unwrap();
        let mut client = TcpStream::connect(addr).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        client
            .write_all(
                b"GET /x HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                  Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
                  Sec-WebSocket-Protocol: shard.v0, other\r\n\r\n",
            )
            .unwrap();
        let writer = rx.recv_timeout(Duration::from_secs(10)).unwrap().unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            assert_eq!(client.read(&mut byte).unwrap(), 1, "{head:?}");
            head.push(byte[0]);
        }
        writer.terminate();
        server.shutdown();
        String::from_utf8(head).unwrap().to_ascii_lowercase()
    }

    #[test]
    fn the_101_selects_the_subprotocol_when_asked() {
        let selected = handshake(Some("shard.v0"));
        assert!(selected.starts_with("http/1.1 101 "), "{selected}");
        assert!(
            selected.contains("\r\nsec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo=\r\n"),
            "{selected}"
        );
        assert!(
            selected.contains("\r\nsec-websocket-protocol: shard.v0\r\n"),
            "{selected}"
        );
        let plain = handshake(None);
        assert!(plain.starts_with("http/1.1 101 "), "{plain}");
        assert!(!plain.contains("sec-websocket-protocol"), "{plain}");
    }

    #[test]
    fn frames_parse_back_with_tungstenite() {
        for len in [0usize, 5, 125, 126, 65535, 65536] {
            let text = "x".repeat(len);
            let bytes = encode_frame(opcode::TEXT, text.as_bytes());
            let mut ctx = tungstenite::protocol::WebSocketContext::new(Role::Client, None);
            let mut cursor = io::Cursor::new(bytes);
            struct Rw<'a>(&'a mut io::Cursor<Vec<u8>>);
            impl Read for Rw<'_> {
                fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
                    self.0.read(b)
                }
            }
            impl Write for Rw<'_> {
                fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                    Ok(b.len())
                }
                fn flush(&mut self) -> io::Result<()> {
                    Ok(())
                }
            }
            let msg = ctx.read(&mut Rw(&mut cursor)).unwrap();
            assert_eq!(msg.into_text().unwrap().as_str(), text);
        }
    }
}
