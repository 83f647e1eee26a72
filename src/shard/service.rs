//! The Shard WebSocket transport, `GET /shard/ws` on the main listener
//! (who may connect, the upgrade and the `shard.v0` selection are
//! `gate`'s; no extension is negotiated, so no compression): `hello`, one
//! JSON message
//! per text frame (binary frames are refused with `INVALID_REQUEST`; the
//! connection stays open), and the keepalive: a ping every
//! `limits.pingIntervalMs` (30 s), and a client that has not answered the
//! previous one by the next is dropped. Also what every Shard connection
//! shares, whatever its transport (the unix socket's is `socket` and
//! `lines`): the poller's service, a message's dispatch, the release.
//!
//! An idle connection has no reader thread: the shared poller waits on its
//! socket and runs [`drain`] on a short-lived thread when input arrives;
//! messages are handled by `dispatch`, frames go out through the
//! connection's writer.

use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tungstenite::{Error as WsError, Message, WebSocket};

use super::conn::{ShardConn, Transport};
use super::lines::{self, LineSocket};
use super::{dispatch, Shard};
use crate::hub::Hub;
use crate::util::time;
use crate::wire::shard::message::{self, Refusal};
use crate::wire::websocket::close;
use crate::ws::{self, SplitStream};
use crate::wsconn::outbound::Outbound;
use crate::wsconn::poller::{self, Service, Watched};

/// The reading side of a Shard connection. Boxed whole in `Parked`, so
/// the size difference costs a JSONL connection about 220 bytes and saves
/// every WebSocket one a second allocation.
#[allow(clippy::large_enum_variant)]
pub enum Socket {
    WebSocket(WebSocket<SplitStream>),
    Lines(LineSocket),
}

impl Watched for Socket {
    fn watched_fd(&self) -> RawFd {
        match self {
            Socket::WebSocket(ws) => ws.watched_fd(),
            Socket::Lines(lines) => lines.watched_fd(),
        }
    }
}

/// A parked Shard socket.
pub type Parked = poller::Parked<ShardConn, Socket>;
/// What a Shard reader did with its socket's input.
pub type Drained = poller::Drained<ShardConn, Socket>;
/// The idle Shard sockets.
pub type Poller = poller::Poller<Shard>;

/// The transport-scoped capabilities of the daemon's `hello` (seed §7:
/// per-runtime features are in each attachment's `sync`).
pub const CAPABILITIES: &[&str] = &["websocket"];

/// Serves an admitted `GET /shard/ws` connection (`gate::connect` did
/// the admission and the upgrade): the writer and `hello`; then the
/// socket is parked with the poller until it has input.
pub fn serve(hub: &Arc<Hub>, shard: &Arc<Shard>, accepted: ws::Accepted) {
    let ws::Accepted { mut socket, writer } = accepted;
    socket.get_mut().set_nonblocking_reads(true);
    let id = hub.sockets.register(writer.clone());
    let (conn, inbox) = ShardConn::new(id, writer, Transport::WebSocket);
    start(
        hub,
        shard,
        conn,
        inbox,
        CAPABILITIES,
        Socket::WebSocket(socket),
    );
}

/// A new connection of any transport: listed, its writer started, its
/// `hello` queued, its socket parked with the poller until it has input.
pub fn start(
    hub: &Arc<Hub>,
    shard: &Arc<Shard>,
    conn: Arc<ShardConn>,
    inbox: crate::wsconn::outbound::WriterInbox,
    capabilities: &[&str],
    socket: Socket,
) {
    shard.add(conn.clone());
    conn.start_writer(inbox);
    conn.send(&message::hello(&message::server_version(), capabilities));
    let parked = Parked {
        conn,
        socket: Box::new(socket),
    };
    if let Err(parked) = Poller::park(shard, hub, parked) {
        release(hub, shard, &parked.conn);
    }
}

/// Reads and handles the messages a parked socket has available.
pub fn drain(hub: &Arc<Hub>, shard: &Arc<Shard>, mut parked: Parked) -> Drained {
    let conn = parked.conn.clone();
    let read = match &mut *parked.socket {
        Socket::WebSocket(ws) => drain_websocket(hub, shard, &conn, ws),
        Socket::Lines(socket) => lines::drain(hub, shard, &conn, socket),
    };
    match read {
        lines::Read::Park => Drained::Park(parked),
        lines::Read::Ended => Drained::Closed,
        lines::Read::Failed => {
            drop(parked);
            release(hub, shard, &conn);
            Drained::Closed
        }
    }
}

/// Reads and handles the messages of a WebSocket until it would block.
fn drain_websocket(
    hub: &Arc<Hub>,
    shard: &Arc<Shard>,
    conn: &Arc<ShardConn>,
    socket: &mut WebSocket<SplitStream>,
) -> lines::Read {
    loop {
        let message = match socket.read() {
            Ok(message) => message,
            Err(WsError::Io(err)) if err.kind() == std::io::ErrorKind::WouldBlock => {
                crate::util::wakes::release();
                return lines::Read::Park;
            }
            Err(WsError::Capacity(_)) => {
                let refusal = Refusal::invalid("message too large");
                conn.respond(None, "", Err(refusal));
                return lines::Read::Failed;
            }
            // RFC 6455 §8.1: a text frame that is not UTF-8 fails the
            // connection with 1007.
            Err(WsError::Utf8(_)) => {
                conn.close(close::INVALID_PAYLOAD, "invalid UTF-8");
                return lines::Read::Failed;
            }
            Err(_) => return lines::Read::Failed,
        };
        match message {
            Message::Text(text) => dispatch::handle_text(hub, shard, conn, text.as_str()),
            Message::Binary(_) => {
                let refusal = Refusal::invalid("binary frames are not used: send JSON text frames");
                conn.respond(None, "", Err(refusal));
            }
            Message::Pong(_) => conn.ponged(),
            _ => {}
        }
        if conn.is_dead() {
            return lines::Read::Failed;
        }
    }
}

/// Ends a connection and forgets it (and its attachments).
pub fn release(hub: &Hub, shard: &Shard, conn: &ShardConn) {
    conn.terminate();
    shard.detach(conn);
    hub.sockets.unregister(conn.id);
}

/// Pings every client once per interval; a client whose previous ping is
/// unanswered is dropped.
fn keepalive(hub: &Arc<Hub>, shard: &Arc<Shard>) {
    let every = hub.config.limits.ping_interval_ms;
    if every == 0 {
        return;
    }
    let now = time::now_millis();
    let last = shard.last_ping.load(Ordering::Acquire);
    if now.saturating_sub(last) < every {
        return;
    }
    shard.last_ping.store(now, Ordering::Release);
    for conn in shard.snapshot().iter() {
        if conn.transport() != Transport::WebSocket {
            continue;
        }
        if conn.ping_due() {
            conn.ping();
        } else {
            log::warn!(
                "shard {}: the client did not answer a ping; dropping it",
                conn.id
            );
            conn.terminate();
        }
    }
}

impl Service for Shard {
    type Ctx = Hub;
    type Conn = ShardConn;
    type Socket = Socket;
    const POLL_THREAD: &'static str = "shard-poll";
    const READER_THREAD: &'static str = "shard-reader";

    fn poller(&self) -> &Poller {
        &self.poller
    }

    fn outbound(conn: &ShardConn) -> &Outbound {
        conn.outbound()
    }

    fn drain(hub: &Arc<Hub>, shard: &Arc<Shard>, parked: Parked) -> Drained {
        drain(hub, shard, parked)
    }

    fn release(hub: &Hub, shard: &Shard, conn: &ShardConn) {
        release(hub, shard, conn)
    }

    fn tick(hub: &Arc<Hub>, shard: &Arc<Shard>) {
        keepalive(hub, shard)
    }
}
