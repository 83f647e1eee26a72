//! Noticing that an HTTP client went away while its handler waits for
//! something else (a worker's answer page): a small thread polls a clone of
//! the connection's socket for `POLLRDHUP` (the peer closed or reset the
//! connection) and then sends on a channel the handler selects on
//! (`Queries::ask_or_cancel`, `worker::query`). The thread polls in
//! short rounds and ends within one round after the [`Watch`] is dropped;
//! it never reads from the socket.
//!
//! A client that half-closes its sending side while it still waits for the
//! response looks the same as one that left, and is treated as gone.

use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};

use crate::util::thread::Stack;

/// One poll round, in milliseconds: the longest a finished [`Watch`]'s
/// thread lingers.
const ROUND_MS: i32 = 100;

/// A running watch; dropping it ends the thread.
pub struct Watch {
    gone: Receiver<()>,
    done: Arc<AtomicBool>,
    // Kept so that the channel is never disconnected (which would read as
    // a hang-up) while the watch is alive, even when no thread runs.
    _keep: Sender<()>,
}

impl Watch {
    /// Receives once when the client hung up.
    pub fn gone(&self) -> &Receiver<()> {
        &self.gone
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
    }
}

/// Starts watching `socket` (a clone of the request's connection). Without
/// a socket, or when no thread can be started, the watch never fires.
pub fn watch(socket: Option<TcpStream>) -> Watch {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let done = Arc::new(AtomicBool::new(false));
    if let Some(socket) = socket {
        let (tx, done) = (tx.clone(), done.clone());
        let started = crate::util::thread::spawn("http-hangup", Stack::Small, move || {
            while !done.load(Ordering::SeqCst) {
                if hung_up(&socket, ROUND_MS) {
                    let _ = tx.try_send(());
                    return;
                }
            }
        });
        if let Err(err) = started {
            log::warn!("cannot watch a waiting client: {err}");
        }
    }
    Watch {
        gone: rx,
        done,
        _keep: tx,
    }
}

/// Whether the peer of `socket` closed or reset the connection, waiting at
/// most `timeout_ms` for that to happen.
fn hung_up(socket: &TcpStream, timeout_ms: i32) -> bool {
    let mut fd = libc::pollfd {
        fd: socket.as_raw_fd(),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd for a descriptor this thread owns a clone of.
    let n = unsafe { libc::poll(&mut fd, 1, timeout_ms) };
    n > 0 && fd.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::time::{Duration, Instant};

    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    #[test]
    fn fires_when_the_client_closes_and_not_before() {
        let (client, server) = pair();
        let watch = watch(Some(server.try_clone().unwrap()));
        assert!(watch
            .gone()
            .recv_timeout(Duration::from_millis(300))
            .is_err());
        let started = Instant::now();
        drop(client);
        watch.gone().recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn bytes_from_the_client_are_not_a_hang_up() {
        use std::io::Write;
        let (mut client, server) = pair();
        let watch = watch(Some(server.try_clone().unwrap()));
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        assert!(watch
            .gone()
            .recv_timeout(Duration::from_millis(300))
            .is_err());
    }

    #[test]
    fn without_a_socket_it_never_fires() {
        let watch = watch(None);
        assert!(watch
            .gone()
            .recv_timeout(Duration::from_millis(200))
            .is_err());
    }
}
