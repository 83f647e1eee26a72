//! The Shard unix socket (seed 004 §2 and §4.2): `<dataDir>/shard.sock` by
//! default (`shard.socket`; empty turns it off), JSONL, no token: the
//! file's permissions (0600, the hub's user) are the access control.
//!
//! At start ([`bind`]) a socket file nobody listens on (a hub that died)
//! is replaced; one that answers belongs to a running process and the
//! start is refused. The socket is bound under a temporary name, made
//! 0600, then renamed into place, so it never exists under its name with
//! looser permissions. At shutdown ([`SocketServer::shutdown`]) the accept
//! thread ends and the file is removed, if it is still this hub's.
//!
//! One `shard-accept` thread waits on the listener; every accepted
//! connection is served like a WebSocket one (`service::start`): its
//! `hello` (capabilities `unix-socket`), then it waits in the shared
//! poller for input (`lines`). A connection that sends `direct.bind`
//! becomes a direct one (`direct`).

use std::fs;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::conn::{ShardConn, Transport};
use super::lines::LineSocket;
use super::service::{self, Socket};
use super::Shard;
use crate::hub::Hub;
use crate::util::poll::{pollin, readable};
use crate::util::thread::{self, Stack};
use crate::ws::FrameWriter;

/// The transport-scoped capabilities of a socket connection's `hello`.
pub const CAPABILITIES: &[&str] = &["unix-socket"];

/// The longest path a unix socket address holds (`sun_path`, with its
/// terminating NUL).
const SUN_PATH: usize = 108;

/// How long an accept that failed (descriptors exhausted) rests, waiting on
/// the wake pipe, before the listener is looked at again; also the pause
/// before a failed poll is retried.
const ACCEPT_REST: Duration = Duration::from_millis(100);

/// Why the socket could not be bound (the start is refused).
#[derive(Debug)]
pub struct BindError {
    pub path: PathBuf,
    pub why: String,
}

/// A bound socket, not yet served (dropped unserved, a failed start: its
/// file is removed).
pub struct Bound {
    inner: Option<Placed>,
}

struct Placed {
    path: PathBuf,
    listener: UnixListener,
    /// The file's device and inode: only this hub's file is removed.
    file: (u64, u64),
}

impl Drop for Bound {
    fn drop(&mut self) {
        if let Some(placed) = self.inner.take() {
            remove_if_ours(&placed.path, placed.file);
        }
    }
}

/// Removes the socket file at `path` if it is still the one bound.
fn remove_if_ours(path: &Path, file: (u64, u64)) {
    match fs::symlink_metadata(path) {
        Ok(meta) if (meta.dev(), meta.ino()) == file => {
            if let Err(err) = fs::remove_file(path) {
                log::warn!("shard socket: cannot remove {}: {err}", path.display());
            }
        }
        _ => log::warn!(
            "shard socket: {} is no longer this hub's; left alone",
            path.display()
        ),
    }
}

/// Binds the socket at `path` (see the module docs for the stale and live
/// rules).
pub fn bind(path: &Path) -> Result<Bound, BindError> {
    let fail = |why: String| BindError {
        path: path.to_path_buf(),
        why,
    };
    let len = path.as_os_str().len();
    if len >= SUN_PATH {
        return Err(fail(format!(
            "the path is {len} bytes; a unix socket's path must be shorter than {SUN_PATH}: \
             set shard.socket to a shorter path (or to \"\" to turn the socket off)"
        )));
    }
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => match UnixStream::connect(path) {
            Ok(_) => {
                return Err(fail(
                    "another process is listening on it (a hub already running on this data \
                     directory?): stop it, or set shard.socket to another path (or to \"\" to \
                     turn the socket off)"
                        .into(),
                ))
            }
            Err(err) if err.kind() == io::ErrorKind::ConnectionRefused => {
                fs::remove_file(path)
                    .map_err(|err| fail(format!("cannot replace the stale socket file: {err}")))?;
                log::info!(
                    "shard socket: replaced {}, which nobody listened on",
                    path.display()
                );
            }
            Err(err) => {
                return Err(fail(format!(
                    "a socket file is there and connecting to it failed ({err}); it is left alone"
                )))
            }
        },
        Ok(_) => {
            return Err(fail(
                "it exists and is not a socket; move it away, or set shard.socket to another path"
                    .into(),
            ))
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(fail(format!("cannot look at it: {err}"))),
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let temp = dir.join(format!(".shard-{}.sock", std::process::id()));
    if temp.as_os_str().len() >= SUN_PATH {
        return Err(fail(format!(
            "its directory's path is too long for a unix socket (under {SUN_PATH} bytes with \
             the file name)"
        )));
    }
    let _ = fs::remove_file(&temp);
    let listener =
        UnixListener::bind(&temp).map_err(|err| fail(format!("cannot bind it: {err}")))?;
    let placed = fs::set_permissions(&temp, fs::Permissions::from_mode(0o600))
        .and_then(|()| fs::rename(&temp, path))
        .and_then(|()| fs::metadata(path))
        .and_then(|meta| {
            listener.set_nonblocking(true)?;
            Ok((meta.dev(), meta.ino()))
        });
    match placed {
        Ok(file) => Ok(Bound {
            inner: Some(Placed {
                path: path.to_path_buf(),
                listener,
                file,
            }),
        }),
        Err(err) => {
            let _ = fs::remove_file(&temp);
            Err(fail(format!("cannot put it in place: {err}")))
        }
    }
}

/// The served socket: its accept thread and file.
pub struct SocketServer {
    path: PathBuf,
    file: (u64, u64),
    wake: UnixStream,
    thread: Option<JoinHandle<()>>,
}

impl SocketServer {
    /// Starts the `shard-accept` thread for `bound` (when none starts,
    /// `bound` is dropped and its file removed).
    pub fn start(hub: &Arc<Hub>, shard: &Arc<Shard>, mut bound: Bound) -> io::Result<SocketServer> {
        let (wake, wake_rx) = UnixStream::pair()?;
        wake_rx.set_nonblocking(true)?;
        let Some(placed) = bound.inner.take() else {
            return Err(io::Error::other("the socket was already served"));
        };
        let Placed {
            path,
            listener,
            file,
        } = placed;
        let (hub2, shard2) = (hub.clone(), shard.clone());
        let max_line = hub.config.shard_socket.max_line_bytes;
        let spawned = thread::spawn_with(
            "shard-accept",
            Stack::Medium,
            (listener, wake_rx),
            move |(listener, wake_rx)| accept_loop(&hub2, &shard2, &listener, &wake_rx, max_line),
        );
        let thread = match spawned {
            Ok(thread) => thread,
            Err((err, (listener, _))) => {
                drop(Bound {
                    inner: Some(Placed {
                        path,
                        listener,
                        file,
                    }),
                });
                return Err(err);
            }
        };
        log::info!("shard socket: {}", path.display());
        Ok(SocketServer {
            path,
            file,
            wake,
            thread: Some(thread),
        })
    }

    /// Stops accepting and removes the socket file (when it is still the
    /// one this hub bound). Connections already accepted stay until the
    /// hub closes every socket.
    pub fn shutdown(mut self) {
        let _ = (&self.wake).write_all(&[1]);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        remove_if_ours(&self.path, self.file);
    }
}

/// The accept thread: waits on the listener and the wake pipe.
fn accept_loop(
    hub: &Arc<Hub>,
    shard: &Arc<Shard>,
    listener: &UnixListener,
    wake: &UnixStream,
    max_line: usize,
) {
    let mut fds = [pollin(listener.as_raw_fd()), pollin(wake.as_raw_fd())];
    loop {
        for fd in &mut fds {
            fd.revents = 0;
        }
        // SAFETY: `fds` is a valid array of two initialized pollfd structs
        // that outlives the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                log::error!("shard-accept: poll failed: {err}");
                #[expect(
                    clippy::disallowed_methods,
                    reason = "back-off before retrying a poll(2) that failed (ENOMEM): \
                              waiting on the wake pipe would take the same call"
                )]
                std::thread::sleep(ACCEPT_REST);
            }
            continue;
        }
        if fds[1].revents != 0 {
            let mut sink = [0u8; 8];
            let _ = (&*wake).read(&mut sink);
            return;
        }
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    if let Err(err) = serve(hub, shard, stream, max_line) {
                        log::warn!("shard socket: cannot serve a connection: {err}");
                    }
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => {
                    log::warn!("shard socket: accept failed: {err}");
                    // The listener stays readable (descriptors exhausted),
                    // so rest on the wake pipe alone: a shutdown ends the
                    // rest at once, and the outer poll then sees its byte.
                    let _ = readable(wake.as_raw_fd(), ACCEPT_REST);
                    break;
                }
            }
        }
    }
}

/// Serves one accepted connection (its stream blocks for writes; reads
/// never wait).
fn serve(
    hub: &Arc<Hub>,
    shard: &Arc<Shard>,
    stream: UnixStream,
    max_line: usize,
) -> io::Result<()> {
    let read = stream.try_clone()?;
    let writer = Arc::new(FrameWriter::lines(stream)?);
    let id = hub.sockets.register(writer.clone());
    let (conn, inbox) = ShardConn::new(id, writer, Transport::Socket);
    let socket = Socket::Lines(LineSocket::new(read, max_line));
    service::start(hub, shard, conn, inbox, CAPABILITIES, socket);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_line_limit_is_the_websocket_message_limit() {
        use crate::wire::shard::jsonl::DEFAULT_MAX_LINE;
        assert_eq!(DEFAULT_MAX_LINE, crate::shard::gate::MAX_CLIENT_MESSAGE);
        let config = crate::config::test_config("{}");
        assert_eq!(config.shard_socket.max_line_bytes, DEFAULT_MAX_LINE);
    }

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "shard-sock-{tag}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_stale_file_is_replaced_a_live_one_and_a_plain_file_are_not() {
        let dir = temp_dir("rules");
        let path = dir.join("shard.sock");
        let first = bind(&path).unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // Somebody listens: refused, the file untouched.
        let err = bind(&path).err().unwrap();
        assert!(
            err.why.contains("another process is listening"),
            "{}",
            err.why
        );
        // Dropped unserved (a failed start): its file goes with it.
        drop(first);
        assert!(!path.exists());
        // A socket nobody listens on any more (a hub that died): replaced.
        drop(UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let second = bind(&path).unwrap();
        UnixStream::connect(&path).unwrap();
        drop(second);
        fs::write(&path, b"not a socket").unwrap();
        let err = bind(&path).err().unwrap();
        assert!(err.why.contains("not a socket"), "{}", err.why);
        assert_eq!(fs::read(&path).unwrap(), b"not a socket");
        let long = dir.join("x".repeat(120));
        assert!(bind(&long).err().unwrap().why.contains("shorter than 108"));
        // No temporary file is left behind.
        let names: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["shard.sock"]);
        fs::remove_dir_all(&dir).unwrap();
    }
}
