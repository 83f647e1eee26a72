//! Waits on every idle socket of one front-end (the panels, the Shard
//! clients) from one thread. A parked connection costs its socket and its
//! reading state (tungstenite's small read buffer, or a JSONL splitter's
//! partial line; `Watched` is what the poll needs of it), not a thread:
//! the poll thread sleeps
//! in one `poll(2)` over all parked sockets and, when one has input (or
//! has ended), hands it to a short-lived reader thread. That thread reads
//! and handles messages until the socket has nothing more to give
//! (`WouldBlock`) for [`LINGER`], then parks it here again and exits.
//!
//! So one connection's messages are handled in order by at most one thread
//! at a time, and a message whose handling blocks (a worker that stopped
//! reading its socket) delays only its own connection, never the poll
//! thread.
//!
//! The poll thread starts with the first parked socket and exits when none
//! is left; new sockets reach it through a list and a wake pipe. It also
//! gives the front-end a [`Service::tick`] about once a second (the Shard
//! keepalive pings), while it runs.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tungstenite::WebSocket;

use super::outbound::Outbound;
use crate::util::poll::{pollin, readable};
use crate::util::thread::{self, Stack};
use crate::ws::SplitStream;

/// A reader thread whose socket has nothing more waits this long for
/// more input before it parks the socket and exits.
const LINGER: Duration = Duration::from_millis(100);

/// A parked socket is looked at at least this often, so a connection
/// ended without its socket waking the poll (it always should) is still
/// released.
const POLL_TIMEOUT_MS: libc::c_int = 1000;

/// The least time between two [`Service::tick`] calls.
const TICK: Duration = Duration::from_millis(1000);

/// A socket the poll thread can wait on.
pub trait Watched: Send + 'static {
    /// The descriptor whose input (or end) wakes the poll.
    fn watched_fd(&self) -> RawFd;
}

impl Watched for WebSocket<SplitStream> {
    fn watched_fd(&self) -> RawFd {
        self.get_ref().as_raw_fd()
    }
}

/// A front-end whose connections the poller serves.
pub trait Service: Send + Sync + Sized + 'static {
    /// What the handlers need besides the front-end (the hub).
    type Ctx: Send + Sync + 'static;
    /// One connection's state.
    type Conn: Send + Sync + 'static;
    /// The reading side of one connection's socket.
    type Socket: Watched;
    /// Thread names.
    const POLL_THREAD: &'static str;
    const READER_THREAD: &'static str;

    fn poller(&self) -> &Poller<Self>;
    fn outbound(conn: &Self::Conn) -> &Outbound;
    /// Reads and handles what a parked socket has available.
    fn drain(
        ctx: &Arc<Self::Ctx>,
        svc: &Arc<Self>,
        parked: Parked<Self::Conn, Self::Socket>,
    ) -> Drained<Self::Conn, Self::Socket>;
    /// Ends a connection and forgets it.
    fn release(ctx: &Self::Ctx, svc: &Self, conn: &Self::Conn);
    /// Called on the poll thread about once a second while it runs.
    fn tick(_ctx: &Arc<Self::Ctx>, _svc: &Arc<Self>) {}
}

/// One connection with nothing to read right now.
pub struct Parked<C, S = WebSocket<SplitStream>> {
    pub conn: Arc<C>,
    /// Boxed: the socket moves between the poll and reader threads.
    pub socket: Box<S>,
}

/// What a reader thread did with a socket's available input.
pub enum Drained<C, S = WebSocket<SplitStream>> {
    /// Everything available was handled; wait for more.
    Park(Parked<C, S>),
    /// The connection is over (the reader already released it).
    Closed,
}

/// A service's parked connection.
type ParkedOf<S> = Parked<<S as Service>::Conn, <S as Service>::Socket>;

/// The sockets waiting for input; part of the front-end's state.
pub struct Poller<S: Service> {
    state: Mutex<State<ParkedOf<S>>>,
}

impl<S: Service> Default for Poller<S> {
    fn default() -> Self {
        Poller {
            state: Mutex::new(State {
                incoming: Vec::new(),
                wake: None,
            }),
        }
    }
}

struct State<P> {
    /// Sockets parked since the poll thread last looked.
    incoming: Vec<P>,
    /// The write end of the running poll thread's wake pipe; `None` when
    /// no poll thread runs. (The thread is started under this lock, so two
    /// parks cannot start two.)
    wake: Option<Arc<UnixStream>>,
}

impl<S: Service> Poller<S> {
    fn lock(&self) -> MutexGuard<'_, State<ParkedOf<S>>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Parks `parked` until it has input, starting the poll thread if none
    /// runs. `Err` gives the connection back when no thread could start.
    pub fn park(svc: &Arc<S>, ctx: &Arc<S::Ctx>, parked: ParkedOf<S>) -> Result<(), ParkedOf<S>> {
        let mut state = svc.poller().lock();
        if let Some(wake) = state.wake.clone() {
            state.incoming.push(parked);
            drop(state);
            // Outside the lock. The poll thread cannot retire before it
            // has taken the entry just pushed, so the pipe is still read;
            // a full pipe already holds a wake.
            let _ = (&*wake).write(&[1]);
            return Ok(());
        }
        let (tx, rx) = match UnixStream::pair().and_then(|(tx, rx)| {
            tx.set_nonblocking(true)?;
            rx.set_nonblocking(true)?;
            Ok((tx, rx))
        }) {
            Ok(pair) => pair,
            Err(err) => {
                log::error!("{}: cannot create its wake pipe: {err}", S::POLL_THREAD);
                return Err(parked);
            }
        };
        let ctx2 = ctx.clone();
        let svc2 = svc.clone();
        let spawned = thread::spawn(S::POLL_THREAD, Stack::Medium, move || run(&ctx2, &svc2, rx));
        if let Err(err) = spawned {
            log::error!("{}: cannot start its thread: {err}", S::POLL_THREAD);
            return Err(parked);
        }
        state.incoming.push(parked);
        state.wake = Some(Arc::new(tx));
        Ok(())
    }

    /// Takes the newly parked sockets. When there are none and `idle`, the
    /// poll thread is retired under the same lock (so a concurrent `park`
    /// starts a new one) and false is returned.
    fn take_incoming(&self, into: &mut Vec<ParkedOf<S>>, idle: bool) -> bool {
        let mut state = self.lock();
        if state.incoming.is_empty() && idle {
            state.wake = None;
            return false;
        }
        into.append(&mut state.incoming);
        true
    }
}

/// The poll thread: waits on the wake pipe and every parked socket.
fn run<S: Service>(ctx: &Arc<S::Ctx>, svc: &Arc<S>, mut wake: UnixStream) {
    let mut parked: Vec<ParkedOf<S>> = Vec::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let mut ticked = Instant::now();
    loop {
        let idle = parked.is_empty();
        if !svc.poller().take_incoming(&mut parked, idle) {
            return;
        }
        fds.clear();
        fds.push(pollin(wake.as_raw_fd()));
        fds.extend(parked.iter().map(|p| pollin(p.socket.watched_fd())));
        // SAFETY: `fds` is a valid, initialized array of `fds.len()`
        // pollfd structs that outlives the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, POLL_TIMEOUT_MS) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                log::error!("{}: poll failed: {err}", S::POLL_THREAD);
                // Not expected with valid descriptors; do not spin.
                #[expect(
                    clippy::disallowed_methods,
                    reason = "back-off before retrying a poll(2) that failed (ENOMEM): \
                              waiting on the wake pipe would take the same call"
                )]
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            continue;
        }
        if fds[0].revents != 0 {
            let mut sink = [0u8; 64];
            while matches!(wake.read(&mut sink), Ok(n) if n > 0) {}
        }
        // In reverse, so `swap_remove` only moves entries already seen.
        for i in (0..parked.len()).rev() {
            let ready = fds[i + 1].revents != 0;
            let out = S::outbound(&parked[i].conn);
            let ended = out.is_dead() || out.writer_closed();
            if !ready && !ended {
                continue;
            }
            let entry = parked.swap_remove(i);
            if ended {
                S::release(ctx, svc, &entry.conn);
            } else {
                hand_over(ctx, svc, entry);
            }
        }
        if ticked.elapsed() >= TICK {
            ticked = Instant::now();
            S::tick(ctx, svc);
        }
    }
}

/// Runs `drain` for a socket with input on a reader thread, which parks
/// the socket again when it is done.
fn hand_over<S: Service>(ctx: &Arc<S::Ctx>, svc: &Arc<S>, entry: ParkedOf<S>) {
    let conn = entry.conn.clone();
    let ctx2 = ctx.clone();
    let svc2 = svc.clone();
    let spawned = thread::spawn(S::READER_THREAD, Stack::Large, move || {
        let mut entry = entry;
        loop {
            let Drained::Park(done) = S::drain(&ctx2, &svc2, entry) else {
                return;
            };
            // A chatty client (or one trickling a large message) keeps
            // this thread a moment instead of costing a new one per
            // read.
            if readable(done.socket.watched_fd(), LINGER) {
                entry = done;
                continue;
            }
            if let Err(entry) = Poller::park(&svc2, &ctx2, done) {
                S::release(&ctx2, &svc2, &entry.conn);
            }
            return;
        }
    });
    if let Err(err) = spawned {
        log::error!(
            "{} {}: cannot start a reader: {err}",
            S::READER_THREAD,
            S::outbound(&conn).id
        );
        S::release(ctx, svc, &conn);
    }
}
