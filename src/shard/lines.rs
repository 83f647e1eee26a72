//! The reading side of a JSONL connection (the Shard unix socket, seed 004
//! §2.1): bytes as they arrive go through the pure splitter (`jsonl`), and
//! each complete line is one message for `dispatch`, exactly as a
//! WebSocket text frame is. A line over `shard.maxLineBytes` is answered
//! `INVALID_REQUEST` naming its length and the limit, a line that is not
//! UTF-8 `INVALID_REQUEST` too; either way the next line is read normally.
//!
//! An idle connection has no thread: the shared poller waits on its socket
//! and runs [`drain`] when input arrives, which reads without waiting
//! (`MSG_DONTWAIT`) until the socket has nothing more. The end of the
//! client's input (its half-close, or its close) detaches the connection
//! from every agent at once; what was queued for it is still written, then
//! the connection is closed. A partial last line is dropped and logged.

use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Weak};

use super::conn::ShardConn;
use super::dispatch;
use super::Shard;
use crate::hub::Hub;
use crate::util::wakes;
use crate::wire::shard::jsonl::{Record, Splitter};
use crate::wire::shard::message::Refusal;
use crate::wsconn::poller::Watched;

/// Bytes read from the socket at a time (allocated per drain, so an idle
/// connection holds none).
const READ_CHUNK: usize = 64 * 1024;

/// A JSONL connection's reading side: its socket handle and the splitter
/// holding a line that spans reads.
pub struct LineSocket {
    stream: UnixStream,
    splitter: Splitter,
}

impl LineSocket {
    pub fn new(stream: UnixStream, max_line: usize) -> LineSocket {
        LineSocket {
            stream,
            splitter: Splitter::new(max_line),
        }
    }
}

impl Watched for LineSocket {
    fn watched_fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }
}

/// What a drain did.
pub enum Read {
    /// Everything available was handled; wait for more.
    Park,
    /// The client's input ended: the connection was detached and closes
    /// once its queued output is written.
    Ended,
    /// The connection failed or was ended: release it now.
    Failed,
}

/// Reads and handles the lines a socket has available.
pub fn drain(
    hub: &Arc<Hub>,
    shard: &Arc<Shard>,
    conn: &Arc<ShardConn>,
    socket: &mut LineSocket,
) -> Read {
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        // As `ws::SplitStream::read`: the writers this thread queued frames
        // for are woken once per read, not once per line.
        wakes::release();
        let n = match crate::ws::recv_dontwait(socket.stream.as_raw_fd(), &mut buf) {
            Ok(n) => n,
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => return Read::Park,
            Err(_) => return Read::Failed,
        };
        if n == 0 {
            if let Some(partial) = socket.splitter.finish() {
                log::warn!(
                    "shard {}: the client's input ended inside a line; its {partial} bytes were dropped",
                    conn.id
                );
            }
            input_ended(hub, shard, conn);
            return Read::Ended;
        }
        wakes::hold();
        socket
            .splitter
            .push(&buf[..n], |record| handle(hub, shard, conn, record));
        wakes::release();
        if conn.is_dead() {
            return Read::Failed;
        }
    }
}

/// One record of the splitter.
fn handle(hub: &Arc<Hub>, shard: &Arc<Shard>, conn: &Arc<ShardConn>, record: Record<'_>) {
    match record {
        Record::Line(text) => dispatch::handle_text(hub, shard, conn, text),
        Record::TooLong { bytes, max } => conn.respond(
            None,
            "",
            Err(Refusal::invalid(format!(
                "a line of {bytes} bytes is over the limit of {max} bytes (shard.maxLineBytes); \
                 it was discarded"
            ))),
        ),
        Record::NotUtf8 { bytes } => conn.respond(
            None,
            "",
            Err(Refusal::invalid(format!(
                "a line of {bytes} bytes is not valid UTF-8; it was discarded"
            ))),
        ),
    }
}

/// The client's input ended: nothing more is queued for it (it is
/// detached from every agent and no longer hears broadcasts); what is
/// queued is written, then the connection ends and is forgotten.
fn input_ended(hub: &Arc<Hub>, shard: &Shard, conn: &Arc<ShardConn>) {
    shard.detach(conn);
    // Run once the queued output is written, or dropped with the queue
    // when the connection ends first: either way it ends and is forgotten.
    struct Close {
        hub: Arc<Hub>,
        conn: Weak<ShardConn>,
        id: u64,
    }
    impl Drop for Close {
        fn drop(&mut self) {
            if let Some(conn) = self.conn.upgrade() {
                conn.terminate();
            }
            self.hub.sockets.unregister(self.id);
        }
    }
    let close = Close {
        hub: hub.clone(),
        conn: Arc::downgrade(conn),
        id: conn.id,
    };
    conn.after_writes(Box::new(move || drop(close)));
}
