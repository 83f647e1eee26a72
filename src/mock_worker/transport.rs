//! WebSocket client plumbing shared by the event connection, the
//! confirmation client and the remote-tool client: `ws://` URL parsing
//! (pure) and a blocking connect with deadlines. The worker is always the
//! client; it sends no auth header, cookie or subprotocol, only the
//! configured path and query.
//!
//! `wss://` parses (so the configuration error names the real problem) but
//! cannot connect: the build has no TLS.

use std::fmt;
use std::io;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use tungstenite::WebSocket;

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

/// Whether the run thread gave up on an exchange (it drops the sender).
pub(crate) fn cancelled(cancel: &crossbeam_channel::Receiver<()>) -> bool {
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
