//! WebSocket client plumbing shared by the event connection, the
//! confirmation client and the remote-tool client: `ws://` URL parsing
//! (pure), a blocking connect with deadlines, and the one-frame-out,
//! one-reply-in exchange both one-shot clients perform ([`converse`]). The worker is always the
//! client; it sends no auth header, cookie or subprotocol, only the
//! configured path and query.
//!
//! `wss://` parses (so the configuration error names the real problem) but
//! cannot connect: the build has no TLS.

use std::fmt;
use std::io;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use serde_json::Value;
use tungstenite::{Message, WebSocket};

/// A parsed `ws://` or `wss://` endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WsUrl {
    pub secure: bool,
    /// Host without IPv6 brackets.
    pub host: String,
    pub port: u16,
    /// Always starts with `/`.
    pub path: String,
    /// The query without `?`, if the URL had one.
    pub query: Option<String>,
}

impl WsUrl {
    /// Parses an endpoint. Userinfo, fragments, whitespace and bad ports are
    /// rejected, as the real worker rejects them.
    pub(crate) fn parse(input: &str) -> Result<WsUrl, String> {
        if input.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("URL contains whitespace".into());
        }
        let (secure, rest) = if let Some(rest) = input.strip_prefix("ws://") {
            (false, rest)
        } else if let Some(rest) = input.strip_prefix("wss://") {
            (true, rest)
        } else {
            return Err("URL must start with ws:// or wss://".into());
        };
        if rest.contains('#') {
            return Err("URL must not have a fragment".into());
        }
        let split = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(split);
        if authority.contains('@') {
            return Err("URL must not carry userinfo".into());
        }
        let default_port = if secure { 443 } else { 80 };
        let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
            let end = bracketed
                .find(']')
                .ok_or_else(|| "unterminated IPv6 host".to_string())?;
            let host = &bracketed[..end];
            let after = &bracketed[end + 1..];
            let port = match after.strip_prefix(':') {
                Some(port) => parse_port(port)?,
                None if after.is_empty() => default_port,
                None => return Err("junk after the IPv6 host".into()),
            };
            (host.to_string(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host.to_string(), parse_port(port)?),
                None => (authority.to_string(), default_port),
            }
        };
        if host.is_empty() {
            return Err("URL has no host".into());
        }
        let (path, query) = match tail.split_once('?') {
            Some((path, query)) => (path, Some(query.to_string())),
            None => (tail, None),
        };
        let path = if path.is_empty() { "/" } else { path };
        Ok(WsUrl {
            secure,
            host,
            port,
            path: path.to_string(),
            query,
        })
    }

    /// The remote-tool URL for `route`: `/<route>` appended to the path,
    /// the query kept.
    pub(crate) fn with_route(&self, route: &str) -> WsUrl {
        let mut url = self.clone();
        url.path = format!("{}/{}", self.path.trim_end_matches('/'), route);
        url
    }

    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The endpoint without its query: safe to log, since the query carries
    /// the session token.
    pub(crate) fn redacted(&self) -> String {
        let scheme = if self.secure { "wss" } else { "ws" };
        format!("{scheme}://{}{}", self.authority(), self.path)
    }
}

impl fmt::Display for WsUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())?;
        if let Some(query) = &self.query {
            write!(f, "?{query}")?;
        }
        Ok(())
    }
}

fn parse_port(text: &str) -> Result<u16, String> {
    match text.parse::<u16>() {
        Ok(port) if port > 0 && text.bytes().all(|b| b.is_ascii_digit()) => Ok(port),
        _ => Err(format!("invalid port {text:?}")),
    }
}

/// Why a connection attempt failed.
#[derive(Debug)]
pub(crate) enum ConnectError {
    /// `wss://` needs TLS, which this build does not have.
    Tls,
    /// Name resolution or the TCP connect failed or timed out.
    Io(io::Error),
    /// The WebSocket upgrade was refused or broke off.
    Handshake(String),
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::Tls => f.write_str("wss:// needs TLS, which the built-in worker lacks"),
            ConnectError::Io(err) => write!(f, "connect: {err}"),
            ConnectError::Handshake(reason) => write!(f, "upgrade: {reason}"),
        }
    }
}

/// Opens a TCP connection and performs the client upgrade, all within
/// `timeout`. The returned socket is blocking with no timeouts set; callers
/// choose their own.
pub(crate) fn connect(
    url: &WsUrl,
    timeout: Duration,
) -> Result<WebSocket<TcpStream>, ConnectError> {
    if url.secure {
        return Err(ConnectError::Tls);
    }
    let deadline = Instant::now() + timeout;
    let addrs = (url.host.as_str(), url.port)
        .to_socket_addrs()
        .map_err(ConnectError::Io)?;
    let mut last = io::Error::new(io::ErrorKind::NotFound, "host has no addresses");
    let mut stream = None;
    for addr in addrs {
        let left = remaining(deadline).map_err(ConnectError::Io)?;
        match TcpStream::connect_timeout(&addr, left) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(err) => last = err,
        }
    }
    let stream = stream.ok_or(ConnectError::Io(last))?;
    let _ = stream.set_nodelay(true);
    let left = remaining(deadline).map_err(ConnectError::Io)?;
    stream
        .set_read_timeout(Some(left))
        .and_then(|_| stream.set_write_timeout(Some(left)))
        .map_err(ConnectError::Io)?;
    let (ws, _response) = tungstenite::client::client(url.to_string(), stream)
        .map_err(|err| ConnectError::Handshake(handshake_reason(err)))?;
    ws.get_ref()
        .set_read_timeout(None)
        .and_then(|_| ws.get_ref().set_write_timeout(None))
        .map_err(ConnectError::Io)?;
    Ok(ws)
}

fn remaining(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(io::Error::new(io::ErrorKind::TimedOut, "deadline passed"))
    } else {
        Ok(left)
    }
}

fn handshake_reason<S: tungstenite::handshake::HandshakeRole>(
    err: tungstenite::HandshakeError<S>,
) -> String {
    match err {
        tungstenite::HandshakeError::Interrupted(_) => "timed out".to_string(),
        tungstenite::HandshakeError::Failure(tungstenite::Error::Http(response)) => {
            format!("HTTP {}", response.status())
        }
        tungstenite::HandshakeError::Failure(err) => err.to_string(),
    }
}

/// How long one read of a one-shot exchange waits before the cancel
/// channel is checked again.
const POLL: Duration = Duration::from_millis(20);

/// Which one-shot client an exchange belongs to; it words the failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Peer {
    /// The confirmation client (`confirmation_request` out).
    Confirmation,
    /// The remote-tool client (`tool_request` out).
    Tool,
}

impl Peer {
    /// The reply's `type`, how reasons name the reply, and the ids the
    /// reply must echo.
    fn reply(self) -> (&'static str, &'static str, [&'static str; 4]) {
        match self {
            Peer::Confirmation => (
                "confirmation_response",
                "confirmation response",
                ["worker_id", "session_id", "run_id", "confirmation_id"],
            ),
            Peer::Tool => (
                "tool_response",
                "the tool response",
                ["worker_id", "session_id", "run_id", "request_id"],
            ),
        }
    }
}

/// Checks the envelope of a reply to `request` (the request's `data`):
/// JSON, the peer's reply `type`, an object `data` that echoes each of the
/// four ids as a string. Returns that `data`; `Err` is the reason.
pub(crate) fn reply_data(text: &str, request: &Value, peer: Peer) -> Result<Value, String> {
    let (kind, noun, ids) = peer.reply();
    let Ok(mut response) = serde_json::from_str::<Value>(text) else {
        return Err(format!("{noun} is not JSON"));
    };
    if response["type"] != kind || !response["data"].is_object() {
        return Err(format!("{noun} has the wrong envelope"));
    }
    let data = response["data"].take();
    for id in ids {
        if !data[id].is_string() || data[id] != request[id] {
            return Err(format!("{noun} {id} does not match the request"));
        }
    }
    Ok(data)
}

/// Why a one-shot exchange produced no reply.
#[derive(Debug)]
enum Failure {
    Cancelled,
    /// The read timeout could not be set.
    Setup(io::Error),
    Write(tungstenite::Error),
    Deadline,
    Binary,
    /// The hub's close frame (its code, 0 without one) came first.
    Closed(u16),
    Socket(tungstenite::Error),
}

impl Failure {
    /// The reason text each client has always given.
    fn describe(self, peer: Peer) -> String {
        use Peer::{Confirmation, Tool};
        match (self, peer) {
            (Failure::Cancelled, _) => "the run was cancelled".into(),
            (Failure::Setup(err), _) => err.to_string(),
            (Failure::Write(err), Confirmation) => {
                format!("confirmation request write failed: {err}")
            }
            (Failure::Write(err), Tool) => format!("the request write failed: {err}"),
            (Failure::Deadline, Confirmation) => "confirmation timed out".into(),
            (Failure::Deadline, Tool) => "timed out".into(),
            (Failure::Binary, Confirmation) => "binary confirmation response".into(),
            (Failure::Binary, Tool) => "binary tool response".into(),
            (Failure::Closed(_), Confirmation) => {
                "the hub closed the confirmation socket without a response".into()
            }
            (Failure::Closed(code), Tool) => {
                format!("the hub closed the socket ({code}) without a response")
            }
            (Failure::Socket(err), Confirmation) => format!("confirmation socket failed: {err}"),
            (Failure::Socket(err), Tool) => format!("the tool socket failed: {err}"),
        }
    }
}

/// Sends `frame` as one text message and reads the one text reply,
/// polling `cancel` between short reads until `deadline`. Pings and pongs
/// are skipped. `Err` is the reason, worded for `peer`; the caller then
/// [`abort`]s the socket.
pub(crate) fn converse(
    ws: &mut WebSocket<TcpStream>,
    frame: &Value,
    deadline: Instant,
    cancel: &Receiver<()>,
    peer: Peer,
) -> Result<String, String> {
    exchange(ws, frame, deadline, cancel).map_err(|failure| failure.describe(peer))
}

fn exchange(
    ws: &mut WebSocket<TcpStream>,
    frame: &Value,
    deadline: Instant,
    cancel: &Receiver<()>,
) -> Result<String, Failure> {
    ws.get_ref()
        .set_read_timeout(Some(POLL))
        .map_err(Failure::Setup)?;
    ws.send(Message::text(frame.to_string()))
        .map_err(Failure::Write)?;
    loop {
        if cancelled(cancel) {
            return Err(Failure::Cancelled);
        }
        if Instant::now() >= deadline {
            return Err(Failure::Deadline);
        }
        match ws.read() {
            Ok(Message::Text(text)) => return Ok(text.as_str().to_string()),
            Ok(Message::Binary(_)) => return Err(Failure::Binary),
            Ok(Message::Close(frame)) => {
                return Err(Failure::Closed(frame.map_or(0, |f| u16::from(f.code))))
            }
            Ok(_) => {}
            Err(err) if timed_out(&err) => {}
            Err(err) => return Err(Failure::Socket(err)),
        }
    }
}

/// Drops an exchange: a close frame if possible, then the socket.
pub(crate) fn abort(ws: &mut WebSocket<TcpStream>) {
    let _ = ws.close(None);
    let _ = ws.flush();
    let _ = ws.get_ref().shutdown(std::net::Shutdown::Both);
}

/// Whether the run thread gave up on an exchange (it drops the sender).
pub(crate) fn cancelled(cancel: &Receiver<()>) -> bool {
    matches!(
        cancel.try_recv(),
        Err(crossbeam_channel::TryRecvError::Disconnected)
    )
}

/// Whether a socket error is only a read timeout (the caller polls).
pub(crate) fn timed_out(err: &tungstenite::Error) -> bool {
    matches!(err, tungstenite::Error::Io(e)
        if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut))
}

#[cfg(test)]
mod tests {
    use super::WsUrl;

    #[test]
    fn parses_hub_endpoints() {
        let url = WsUrl::parse("ws://127.0.0.1:8800/agent/demo/events?token=a%2Bb").unwrap();
        assert!(!url.secure);
        assert_eq!(url.host, "127.0.0.1");
        assert_eq!(url.port, 8800);
        assert_eq!(url.path, "/agent/demo/events");
        assert_eq!(url.query.as_deref(), Some("token=a%2Bb"));
        assert_eq!(
            url.to_string(),
            "ws://127.0.0.1:8800/agent/demo/events?token=a%2Bb"
        );
        assert_eq!(url.redacted(), "ws://127.0.0.1:8800/agent/demo/events");

        let v6 = WsUrl::parse("ws://[::1]:9/x").unwrap();
        assert_eq!(v6.host, "::1");
        assert_eq!(v6.to_string(), "ws://[::1]:9/x");

        let bare = WsUrl::parse("wss://example.com").unwrap();
        assert!(bare.secure);
        assert_eq!((bare.port, bare.path.as_str()), (443, "/"));
        assert_eq!(WsUrl::parse("ws://h?x=1").unwrap().path, "/");
    }

    #[test]
    fn rejects_what_the_real_worker_rejects() {
        for bad in [
            "http://h/x",
            "ws://user@h/x",
            "ws://h/x#frag",
            "ws://h:0/x",
            "ws://h:99999/x",
            "ws://h:+1/x",
            "ws:// h/x",
            "ws:///x",
            "ws://[::1/x",
        ] {
            assert!(WsUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tool_routes_extend_the_path_and_keep_the_query() {
        let base = WsUrl::parse("ws://127.0.0.1:8801/agent/s/tools?token=T").unwrap();
        assert_eq!(
            base.with_route("plan/replace").to_string(),
            "ws://127.0.0.1:8801/agent/s/tools/plan/replace?token=T"
        );
    }
}
