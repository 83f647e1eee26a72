//! Fork addition: bounded thread-per-connection serving.
//!
//! [`Server::serve_with_limits`](crate::Server::serve_with_limits) runs each
//! accepted connection on its own thread (at most `max_connections` at a
//! time), bounds the request head, applies socket timeouts and a
//! whole-request deadline, and calls the handler on the connection thread.

use std::fmt;
use std::io::{self, ErrorKind, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::client::ClientConnection;
use crate::connection::Connection;
use crate::util::RefinedTcpStream;
use crate::Request;

/// Resource bounds for [`Server::serve_with_limits`](crate::Server::serve_with_limits).
#[derive(Debug, Clone)]
pub struct ServerLimits {
    /// Concurrent HTTP connections (threads) not yet upgraded. Connections
    /// accepted beyond it get a `503` and are closed.
    pub max_connections: usize,
    /// Request line plus all header lines, in bytes (CRLFs included).
    /// Exceeding it answers `431` and closes the connection.
    pub max_header_bytes: usize,
    /// Number of header lines. Exceeding it answers `431` and closes.
    pub max_headers: usize,
    /// Socket read and write timeout; also how long an idle keep-alive
    /// connection waits for its next request. Must be non-zero.
    pub idle_timeout: Duration,
    /// Deadline for reading one request (head and body), counted from the
    /// first byte of its request line. Must be non-zero.
    pub request_timeout: Duration,
    /// Stack size of each connection thread (the handler runs on it).
    pub thread_stack_size: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_connections: 128,
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
    close: Arc<AtomicBool>,
    active: Arc<AtomicUsize>,
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

    /// Number of live (not upgraded) connection threads.
    pub fn active_connections(&self) -> usize {
        self.active.load(SeqCst)
    }

    /// Stops accepting: sets the close flag, connects to the listener to wake
    /// the accept thread and joins it (the listener is closed when it ends).
    /// Connections already accepted finish on their own, bounded by the
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
        self.close.store(true, SeqCst);

        let mut wake_addr = self.addr;
        if wake_addr.ip().is_unspecified() {
            wake_addr.set_ip(match wake_addr.ip() {
                IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
            });
        }
        // Retry the wake-up connection (it can fail transiently, e.g. EMFILE);
        // once one connects, accept() returns and the loop sees the flag.
        let give_up = Instant::now() + Duration::from_secs(5);
        while !handle.is_finished() {
            match TcpStream::connect_timeout(&wake_addr, Duration::from_millis(500)) {
                Ok(_) => break,
                Err(e) if Instant::now() >= give_up => {
                    log::error!("cannot wake the accept thread ({}); leaving it detached", e);
                    return;
                }
                Err(_) => thread::sleep(Duration::from_millis(50)),
            }
        }
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
    if limits.idle_timeout.is_zero() || limits.request_timeout.is_zero() {
        return Err(io::Error::new(
            ErrorKind::InvalidInput,
            "idle_timeout and request_timeout must be non-zero",
        ));
    }
    let addr = listener.local_addr()?;
    let close = Arc::new(AtomicBool::new(false));
    let active = Arc::new(AtomicUsize::new(0));

    let accept_thread = {
        let close = close.clone();
        let active = active.clone();
        thread::Builder::new()
            .name(names.accept.to_owned())
            .stack_size(limits.thread_stack_size)
            .spawn(move || accept_loop(listener, limits, names, handler, close, active))?
    };

    Ok(ServerHandle {
        addr,
        close,
        active,
        accept_thread: Mutex::new(Some(accept_thread)),
    })
}

/// Decrements the active-connection count when the connection thread ends
/// (or when its closure is dropped because the thread could not be spawned).
struct ActiveGuard(Arc<AtomicUsize>);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
    }
}

fn accept_loop(
    listener: TcpListener,
    limits: ServerLimits,
    names: ThreadNames,
    handler: Handler,
    close: Arc<AtomicBool>,
    active: Arc<AtomicUsize>,
) {
    log::debug!("accept thread running");
    while !close.load(SeqCst) {
        let sock = match listener.accept() {
            Ok((sock, _)) => sock,
            Err(e) => {
                if !close.load(SeqCst) && e.kind() != ErrorKind::Interrupted {
                    // e.g. EMFILE/ENFILE/ENOBUFS: back off instead of dying
                    log::warn!("accept failed: {}", e);
                    thread::sleep(Duration::from_millis(100));
                }
                continue;
            }
        };
        if close.load(SeqCst) {
            break;
        }
        let configured = sock
            .set_read_timeout(Some(limits.idle_timeout))
            .and_then(|_| sock.set_write_timeout(Some(limits.idle_timeout)))
            .and_then(|_| sock.set_nodelay(true));
        if let Err(e) = configured {
            log::debug!("dropping connection: cannot configure socket: {}", e);
            continue;
        }
        if active.load(SeqCst) >= limits.max_connections {
            reject_busy(sock);
            continue;
        }

        // Only this thread increments, so the count never exceeds the limit.
        active.fetch_add(1, SeqCst);
        let guard = ActiveGuard(active.clone());
        let handler = handler.clone();
        let conn_limits = limits.clone();
        let spawned = thread::Builder::new()
            .name(names.connection.to_owned())
            .stack_size(limits.thread_stack_size)
            .spawn(move || {
                let _guard = guard;
                serve_connection(sock, &conn_limits, &*handler);
            });
        if let Err(e) = spawned {
            // the closure (socket and guard) was dropped with the error
            log::error!("cannot spawn a connection thread: {}", e);
        }
    }
    log::debug!("accept thread stopped");
}

/// Best-effort 503 on a fresh socket; never blocks.
fn reject_busy(mut sock: TcpStream) {
    log::debug!("connection limit reached; answering 503");
    let _ = sock.set_nonblocking(true);
    let _ = sock.write(
        b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
    );
}

fn serve_connection(sock: TcpStream, limits: &ServerLimits, handler: &(dyn Fn(Request) + Sync)) {
    let clones = sock.try_clone().and_then(|c| Ok((c, sock.try_clone()?)));
    let (control_sock, read_sock) = match clones {
        Ok(clones) => clones,
        Err(e) => {
            log::warn!("dropping connection: cannot clone socket: {}", e);
            return;
        }
    };
    let control = Arc::new(ConnControl::new(
        control_sock,
        limits.idle_timeout,
        limits.request_timeout,
    ));
    let (read, write) = RefinedTcpStream::from_halves(
        Connection::from(read_sock),
        Connection::from(sock),
        Some(control.clone()),
    );
    let client = ClientConnection::with_limits(
        write,
        read,
        limits.max_header_bytes,
        limits.max_headers,
        Some(control),
    );
    for request in client {
        handler(request);
    }
}

/// Per-connection state shared by the socket reader, the `ClientConnection`
/// and the `Request`s of a connection served by `serve_with_limits`.
pub(crate) struct ConnControl {
    // a clone of the socket: read timeouts are set on it and `upgrade_raw`
    // hands out a clone of it
    stream: TcpStream,
    idle_timeout: Duration,
    request_timeout: Duration,
    state: Mutex<DeadlineState>,
    // the socket was handed over by `upgrade_raw`
    upgraded: AtomicBool,
    // a read timed out or the deadline passed: no further request
    expired: AtomicBool,
}

struct DeadlineState {
    deadline: Option<Instant>,
    // read timeout currently set on the socket (saves a syscall per read)
    applied: Option<Duration>,
}

fn timed_out() -> io::Error {
    io::Error::new(ErrorKind::TimedOut, "request timed out")
}

impl ConnControl {
    fn new(stream: TcpStream, idle_timeout: Duration, request_timeout: Duration) -> Self {
        ConnControl {
            stream,
            idle_timeout,
            request_timeout,
            state: Mutex::new(DeadlineState {
                deadline: None,
                // set by the accept loop
                applied: Some(idle_timeout),
            }),
            upgraded: AtomicBool::new(false),
            expired: AtomicBool::new(false),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, DeadlineState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The first byte of a request line arrived: start the request deadline.
    pub(crate) fn start_request(&self) {
        self.state().deadline = Some(Instant::now() + self.request_timeout);
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

    /// A failed upgrade leaves the connection in an unknown state: close it.
    pub(crate) fn abort(&self) {
        self.expired.store(true, SeqCst);
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}
