//! Waits on every idle panel socket from one thread. A parked connection
//! costs its socket and tungstenite's small read buffer, not a thread: the
//! poll thread sleeps in one `poll(2)` over all parked sockets and, when
//! one has input (or has ended), hands it to a short-lived reader thread.
//! That thread reads and handles messages until the socket has nothing
//! more to give (`WouldBlock`) for [`LINGER`], then parks it here again
//! and exits.
//!
//! So one connection's messages are handled in order by at most one thread
//! at a time, and a message whose handling blocks (a worker that stopped
//! reading its socket) delays only its own panel, never the poll thread.
//!
//! The poll thread starts with the first parked socket and exits when none
//! is left; new sockets reach it through a list and a wake pipe.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tungstenite::WebSocket;

use super::conn::PanelConn;
use super::{service, Panels};
use crate::hub::Hub;
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

/// One panel connection with nothing to read right now.
pub struct Parked {
    pub panel: Arc<PanelConn>,
    /// Boxed: the socket moves between the poll and reader threads.
    pub socket: Box<WebSocket<SplitStream>>,
}

/// What a reader thread did with a socket's available input.
pub enum Drained {
    /// Everything available was handled; wait for more.
    Park(Parked),
    /// The connection is over (the reader already released it).
    Closed,
}

/// The panel sockets waiting for input; part of [`Panels`].
#[derive(Default)]
pub struct Poller {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Sockets parked since the poll thread last looked.
    incoming: Vec<Parked>,
    /// The write end of the running poll thread's wake pipe; `None` when
    /// no poll thread runs. (The thread is started under this lock, so two
    /// parks cannot start two.)
    wake: Option<Arc<UnixStream>>,
}

impl Poller {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Parks `parked` until it has input, starting the poll thread if none
    /// runs. `Err` gives the connection back when no thread could start.
    pub fn park(panels: &Arc<Panels>, hub: &Arc<Hub>, parked: Parked) -> Result<(), Parked> {
        let mut state = panels.poller.lock();
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
                log::error!("panel poller: cannot create its wake pipe: {err}");
                return Err(parked);
            }
        };
        let hub2 = hub.clone();
        let panels2 = panels.clone();
        let spawned = thread::spawn("panel-poll", Stack::Medium, move || {
            run(&hub2, &panels2, rx)
        });
        if let Err(err) = spawned {
            log::error!("panel poller: cannot start its thread: {err}");
            return Err(parked);
        }
        state.incoming.push(parked);
        state.wake = Some(Arc::new(tx));
        Ok(())
    }

    /// Takes the newly parked sockets. When there are none and `idle`, the
    /// poll thread is retired under the same lock (so a concurrent `park`
    /// starts a new one) and false is returned.
    fn take_incoming(&self, into: &mut Vec<Parked>, idle: bool) -> bool {
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
fn run(hub: &Arc<Hub>, panels: &Arc<Panels>, mut wake: UnixStream) {
    let mut parked: Vec<Parked> = Vec::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    loop {
        let idle = parked.is_empty();
        if !panels.poller.take_incoming(&mut parked, idle) {
            return;
        }
        fds.clear();
        fds.push(pollin(wake.as_raw_fd()));
        fds.extend(
            parked
                .iter()
                .map(|p| pollin(p.socket.get_ref().as_raw_fd())),
        );
        // SAFETY: `fds` is a valid, initialized array of `fds.len()`
        // pollfd structs that outlives the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, POLL_TIMEOUT_MS) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                log::error!("panel poller: poll failed: {err}");
                // Not expected with valid descriptors; do not spin.
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
            let ended = parked[i].panel.is_dead() || parked[i].panel.writer_closed();
            if !ready && !ended {
                continue;
            }
            let entry = parked.swap_remove(i);
            if ended {
                service::release(hub, panels, &entry.panel);
            } else {
                hand_over(hub, panels, entry);
            }
        }
    }
}

/// Runs `drain` for a socket with input on a reader thread, which parks
/// the socket again when it is done.
fn hand_over(hub: &Arc<Hub>, panels: &Arc<Panels>, entry: Parked) {
    let panel = entry.panel.clone();
    let hub2 = hub.clone();
    let panels2 = panels.clone();
    let spawned = thread::spawn("panel-reader", Stack::Large, move || {
        let mut entry = entry;
        loop {
            let Drained::Park(done) = service::drain(&hub2, &panels2, entry) else {
                return;
            };
            // A chatty panel (or one trickling a large message) keeps
            // this thread a moment instead of costing a new one per
            // read.
            if readable(done.socket.get_ref().as_raw_fd(), LINGER) {
                entry = done;
                continue;
            }
            if let Err(entry) = Poller::park(&panels2, &hub2, done) {
                service::release(&hub2, &panels2, &entry.panel);
            }
            return;
        }
    });
    if let Err(err) = spawned {
        log::error!("panel {}: cannot start a reader: {err}", panel.id);
        service::release(hub, panels, &panel);
    }
}
