//! Fork addition: bounded serving.
//!
//! [`Server::serve_with_limits`](crate::Server::serve_with_limits) waits for
//! request heads in one front-door thread (`door`), hands each complete
//! head to a handler thread (at most `max_handlers` at a time), bounds the
//! request head, applies socket timeouts and a whole-request deadline, and
//! calls the handler on the handler thread; a keep-alive connection goes
//! back to the door between requests.

use std::fmt;
use std::io::{self, ErrorKind, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::client::ClientConnection;
use crate::connection::Connection;
use crate::door::{self, Ready, Shared};
use crate::util::RefinedTcpStream;
use crate::Request;

/// Resource bounds for [`Server::serve_with_limits`](crate::Server::serve_with_limits).
#[derive(Debug, Clone)]
pub struct ServerLimits {
    /// HTTP connections open at once (waiting in the front door or on a
    /// handler thread; upgraded sockets do not count). At the limit the
    /// oldest idle connection is closed for a new one; with none idle the
    /// new one gets a `503` and is closed.
    pub max_connections: usize,
    /// Handler threads at once. Complete request heads beyond it wait in
    /// the front door, in arrival order.
    pub max_handlers: usize,
    /// From the first byte of a request head to its end; then `408`.
    pub head_timeout: Duration,
    /// Least average rate of a head arriving, in bytes per second, judged
    /// after its first 2 s (`0`: not judged); slower ones get `408`.
    pub min_head_rate: u32,
    /// Request line plus all header lines, in bytes (CRLFs included).
    /// Exceeding it answers `431` and closes the connection.
    pub max_header_bytes: usize,
    /// Number of header lines. Exceeding it answers `431` and closes.
    pub max_headers: usize,
    /// Socket read and write timeout while a request is served; also how
    /// long an idle keep-alive connection waits for its next request.
    /// Must be non-zero.
    pub idle_timeout: Duration,
    /// Deadline for reading one request (head and body), counted from the
    /// first byte of its request line. Must be non-zero.
    pub request_timeout: Duration,
    /// Stack size of each handler thread (the handler runs on it) and of
    /// the front door's.
    pub thread_stack_size: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_connections: 1024,
            max_handlers: 128,
            head_timeout: Duration::from_secs(10),
            min_head_rate: 0,
            max_header_bytes: 16 * 1024,
            max_headers: 100,
            idle_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(60),
            thread_stack_size: 256 * 1024,
        }
    }
}

/// Handle of a server started by
/// [`Server::serve_with_limits`](crate::Server::serve_with_limits).
/// Dropping it calls [`shutdown`](ServerHandle::shutdown).
pub struct ServerHandle {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept_thread: Mutex<Option<JoinHandle<()>>>,
}

impl fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerHandle")
            .field("addr", &self.addr)
            .field("active_connections", &self.active_connections())
            .finish()
    }
}

impl ServerHandle {
    /// The address the listener is bound to.
    pub fn server_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections open (not upgraded): waiting in the front door, queued
    /// or on a handler thread.
    pub fn active_connections(&self) -> usize {
        self.shared.open.load(SeqCst)
    }

    /// Stops accepting: sets the close flag, wakes the front door and joins
    /// it (the listener and every connection waiting there are closed when
    /// it ends). Requests being handled finish on their own, bounded by the
    /// timeouts. Idempotent.
    pub fn shutdown(&self) {
        let handle = match self
            .accept_thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            Some(handle) => handle,
            None => return,
        };
        self.shared.close.store(true, SeqCst);
        self.shared.wake();
        let _ = handle.join();
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

pub(crate) type Handler = Arc<dyn Fn(Request) + Send + Sync>;

/// Names of a server's threads: the accept thread and each connection
/// thread (`http-accept` and `http-conn` unless a caller chooses others).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadNames {
    pub accept: &'static str,
    pub connection: &'static str,
}

impl Default for ThreadNames {
    fn default() -> Self {
        ThreadNames {
            accept: "http-accept",
            connection: "http-conn",
        }
    }
}

pub(crate) fn serve(
    listener: TcpListener,
    limits: ServerLimits,
    names: ThreadNames,
    handler: Handler,
) -> io::Result<ServerHandle> {
    if limits.idle_timeout.is_zero()
        || limits.request_timeout.is_zero()
        || limits.head_timeout.is_zero()
    {
        return Err(io::Error::new(
            ErrorKind::InvalidInput,
            "idle_timeout, request_timeout and head_timeout must be non-zero",
        ));
    }
    if limits.max_connections == 0 || limits.max_handlers == 0 {
        return Err(io::Error::new(
            ErrorKind::InvalidInput,
            "max_connections and max_handlers must be non-zero",
        ));
    }
    let addr = listener.local_addr()?;
    let (shared, thread) = door::start(listener, limits, names, handler)?;
    Ok(ServerHandle {
        addr,
        shared,
        accept_thread: Mutex::new(Some(thread)),
    })
}

/// Best-effort 503 on a fresh socket; never blocks.
pub(crate) fn reject_busy(mut sock: TcpStream) {
    log::debug!("connection limit reached; answering 503");
    let _ = sock.set_nonblocking(true);
    let _ = sock.write(
        b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
    );
}

/// One turn of a connection on a handler thread: the request whose head
/// the front door read (`ready.head`, perhaps followed by body bytes), then
/// any request pipelined behind it that is already complete. Returns the
/// socket and the bytes read past the last request when the connection
/// stays open for another request (it goes back to the front door), or
/// `None` when it closed or was upgraded.
pub(crate) fn serve_turn(
    ready: Ready,
    limits: &ServerLimits,
    handler: &(dyn Fn(Request) + Sync),
) -> Option<(TcpStream, Vec<u8>)> {
    let configured = ready
        .sock
        .set_read_timeout(Some(limits.idle_timeout))
        .and_then(|_| ready.sock.set_write_timeout(Some(limits.idle_timeout)));
    if let Err(e) = configured {
        log::debug!("dropping connection: cannot configure socket: {}", e);
        return None;
    }
    // The halves and the control share the one socket (no descriptor is
    // taken for them, so a turn works as long as the socket was accepted).
    let sock = Arc::new(ready.sock);
    let control = Arc::new(ConnControl::new(
        sock.clone(),
        limits.idle_timeout,
        limits.request_timeout,
    ));
    control.first_byte_at(ready.started);
    let (read, write) = RefinedTcpStream::from_halves(
        Connection::Shared(sock.clone()),
        Connection::Shared(sock.clone()),
        Some(control.clone()),
    );
    let mut client = ClientConnection::with_limits(
        write,
        read.with_prefix(ready.head),
        limits.max_header_bytes,
        limits.max_headers,
        Some(control.clone()),
    );
    loop {
        let request = client.next()?;
        handler(request);
        if control.must_stop() || !client.may_continue() {
            return None;
        }
        // A request already complete behind this one is served here; the
        // connection goes back to the door for anything else.
        let rest = client.take_unread()?;
        if door::scan_head(&rest, 0, limits.max_header_bytes) != door::Scan::Complete {
            control.park();
            drop(client);
            drop(control);
            // Nothing else holds the socket once its request is gone.
            return Arc::try_unwrap(sock).ok().map(|sock| (sock, rest));
        }
    }
}

/// Per-connection state shared by the socket reader, the `ClientConnection`
/// and the `Request`s of a connection served by `serve_with_limits`.
pub(crate) struct ConnControl {
    // a clone of the socket: read timeouts are set on it and `upgrade_raw`
    // hands out a clone of it
    stream: Arc<TcpStream>,
    idle_timeout: Duration,
    request_timeout: Duration,
    state: Mutex<DeadlineState>,
    // the socket was handed over by `upgrade_raw`
    upgraded: AtomicBool,
    // the socket goes back to the front door for its next request
    parked: AtomicBool,
    // a read timed out or the deadline passed: no further request
    expired: AtomicBool,
}

struct DeadlineState {
    deadline: Option<Instant>,
    // when the next request's first byte arrived, if that was before it is
    // read here (the front door read its head)
    origin: Option<Instant>,
    // read timeout currently set on the socket (saves a syscall per read)
    applied: Option<Duration>,
}

fn timed_out() -> io::Error {
    io::Error::new(ErrorKind::TimedOut, "request timed out")
}

impl ConnControl {
    fn new(stream: Arc<TcpStream>, idle_timeout: Duration, request_timeout: Duration) -> Self {
        ConnControl {
            stream,
            idle_timeout,
            request_timeout,
            state: Mutex::new(DeadlineState {
                deadline: None,
                origin: None,
                // set by the accept loop
                applied: Some(idle_timeout),
            }),
            upgraded: AtomicBool::new(false),
            parked: AtomicBool::new(false),
            expired: AtomicBool::new(false),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, DeadlineState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The first byte of a request line arrived: start the request deadline.
    pub(crate) fn start_request(&self) {
        let mut state = self.state();
        let origin = state.origin.take().unwrap_or_else(Instant::now);
        state.deadline = Some(origin + self.request_timeout);
    }

    /// The next request's first byte arrived at `at` (its head was read by
    /// the front door): its deadline counts from then.
    pub(crate) fn first_byte_at(&self, at: Instant) {
        self.state().origin = Some(at);
    }

    /// Before waiting for the next request (only `idle_timeout` applies).
    pub(crate) fn end_request(&self) {
        self.state().deadline = None;
    }

    pub(crate) fn request_started(&self) -> bool {
        self.state().deadline.is_some()
    }

    /// Called before each socket read: fails once the deadline has passed,
    /// otherwise sets the read timeout to min(idle_timeout, remaining).
    pub(crate) fn before_read(&self) -> io::Result<()> {
        let mut state = self.state();
        let timeout = match state.deadline {
            None => self.idle_timeout,
            Some(deadline) => {
                let now = Instant::now();
                if now >= deadline {
                    self.expired.store(true, SeqCst);
                    return Err(timed_out());
                }
                self.idle_timeout.min(deadline - now)
            }
        };
        if state.applied != Some(timeout) {
            self.stream.set_read_timeout(Some(timeout))?;
            state.applied = Some(timeout);
        }
        Ok(())
    }

    /// Socket timeouts surface as `WouldBlock` on Unix; report them as
    /// `TimedOut` (which answers 408) and stop reading further requests.
    pub(crate) fn map_read_error(&self, e: io::Error) -> io::Error {
        match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => {
                self.expired.store(true, SeqCst);
                timed_out()
            }
            _ => e,
        }
    }

    pub(crate) fn is_upgraded(&self) -> bool {
        self.upgraded.load(SeqCst)
    }

    /// The socket outlives this turn: its halves are closed, not shut down.
    pub(crate) fn park(&self) {
        self.parked.store(true, SeqCst);
    }

    /// Whether the socket belongs to someone else now (the caller of
    /// `upgrade_raw`, or the front door).
    pub(crate) fn is_handed_over(&self) -> bool {
        self.is_upgraded() || self.parked.load(SeqCst)
    }

    /// No further request may be read from this connection.
    pub(crate) fn must_stop(&self) -> bool {
        self.is_upgraded() || self.expired.load(SeqCst)
    }

    /// Marks the connection upgraded and returns the socket for the caller,
    /// with no read timeout (the write timeout stays `idle_timeout`).
    pub(crate) fn take_upgraded_stream(&self) -> io::Result<TcpStream> {
        self.upgraded.store(true, SeqCst);
        self.end_request();
        let stream = self.stream.try_clone()?;
        stream.set_read_timeout(None)?;
        Ok(stream)
    }

    /// Another handle on the socket (see `Request::socket_clone`).
    pub(crate) fn socket_clone(&self) -> Option<TcpStream> {
        self.stream.try_clone().ok()
    }

    /// A failed upgrade leaves the connection in an unknown state: close it.
    pub(crate) fn abort(&self) {
        self.expired.store(true, SeqCst);
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}
