//! A small raw HTTP/1.1 client: one request per connection, responses
//! parsed by hand, and the byte-level reads hostile-input tests need.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::DEADLINE;

/// A parsed HTTP response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|err| {
            panic!("not JSON ({err}): {}", String::from_utf8_lossy(&self.body))
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One request on a fresh connection (`Connection: close`).
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Response {
    let mut head = format!("{method} {path} HTTP/1.1\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("Connection: close\r\n\r\n");
    let mut raw = head.into_bytes();
    raw.extend_from_slice(body);
    raw_exchange(addr, &raw).expect("http exchange")
}

/// One request to `addr` naming it in `Host` (usable from any thread, and
/// for either listener).
pub fn request_at(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Response {
    http(
        addr,
        method,
        path,
        &[("Host".into(), addr.to_string())],
        body,
    )
}

/// Writes `raw` bytes and reads until the server closes; parses the reply.
pub fn raw_exchange(addr: SocketAddr, raw: &[u8]) -> std::io::Result<Response> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(DEADLINE))?;
    stream.set_write_timeout(Some(DEADLINE))?;
    stream.write_all(raw)?;
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply)?;
    parse_response(&reply).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            String::from_utf8_lossy(&reply).into_owned(),
        )
    })
}

/// Parses a complete HTTP/1.1 response (Content-Length or read-to-close).
pub fn parse_response(raw: &[u8]) -> Option<Response> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..split]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if let Some(len) = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok())
    {
        body.truncate(len);
    }
    Some(Response {
        status,
        headers,
        body,
    })
}

/// The `data:` payloads of a complete server-sent-events body, one per
/// event, in order (several `data:` lines of one event joined by `\n`).
/// Panics on a line that is not `data:` or a `:` comment, and on a body
/// that does not end with the blank line closing its last event.
pub fn sse_data(body: &[u8]) -> Vec<String> {
    let text = std::str::from_utf8(body).expect("an event stream is UTF-8");
    assert!(
        text.is_empty() || text.ends_with("\n\n"),
        "unterminated event stream: {text:?}"
    );
    let mut events = Vec::new();
    for block in text.split("\n\n").filter(|b| !b.is_empty()) {
        let mut data: Vec<&str> = Vec::new();
        for line in block.lines().filter(|l| !l.starts_with(':')) {
            let value = line
                .strip_prefix("data:")
                .unwrap_or_else(|| panic!("not a data line: {line:?} in {text:?}"));
            data.push(value.strip_prefix(' ').unwrap_or(value));
        }
        events.push(data.join("\n"));
    }
    events
}

/// Writes `raw` and reads until the server closes; the whole reply as text.
pub fn exchange_within(addr: SocketAddr, raw: &[u8], within: Duration) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(within))?;
    s.set_write_timeout(Some(within))?;
    s.write_all(raw)?;
    let mut reply = Vec::new();
    match s.read_to_end(&mut reply) {
        Ok(_) => {}
        // a reset after the reply (unread request bytes) still delivered it
        Err(e) if e.kind() == ErrorKind::ConnectionReset && !reply.is_empty() => {}
        Err(e) => return Err(e),
    }
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

/// The status code of the status line `reply` starts with.
pub fn status_line_code(reply: &str) -> u16 {
    reply
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {reply:?}"))
}

/// Reads a response head byte by byte (never past it).
pub fn read_head(s: &mut TcpStream) -> std::io::Result<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        // A signal meant for the test process (a child's exit) may
        // interrupt the read: that is no answer yet.
        let n = match s.read(&mut byte) {
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            other => other?,
        };
        if n == 0 {
            return Err(std::io::Error::new(
                ErrorKind::UnexpectedEof,
                format!("EOF after {:?}", String::from_utf8_lossy(&head)),
            ));
        }
        head.push(byte[0]);
        assert!(head.len() < 64 * 1024, "response head too long");
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

/// Reads until EOF or reset; true if that happened within `within`.
pub fn closes_within(s: &mut TcpStream, within: Duration) -> bool {
    let end = Instant::now() + within;
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut buf = [0u8; 16 * 1024];
    while Instant::now() < end {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

/// Whether the peer has closed `s` (EOF or reset), reading whatever it
/// sent before; looks without waiting (leaves `s` non-blocking).
pub fn closed_by_peer(s: &mut TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
}

/// Bytes the peer of `client` has received on its end but not read yet
/// (`rx_queue` of `/proc/net/tcp`, IPv4 loopback); `None` when that end is
/// not listed. `Some(0)` on a server's end means it has read everything
/// `client` wrote.
pub fn unread_by_peer(client: &TcpStream) -> Option<u64> {
    let (local, peer) = (client.local_addr().ok()?, client.peer_addr().ok()?);
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let port = |field: &str| {
        field
            .rsplit(':')
            .next()
            .and_then(|p| u16::from_str_radix(p, 16).ok())
    };
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // the peer's end: its local port is our peer's, its remote ours
        if port(fields.get(1)?) == Some(peer.port()) && port(fields.get(2)?) == Some(local.port()) {
            let (_, rx) = fields.get(4)?.split_once(':')?;
            u64::from_str_radix(rx, 16).ok()
        } else {
            None
        }
    })
}
