//! A minimal WebSocket client for load generation: a hand-written handshake,
//! masked client frames, and a frame reader that hands out payload slices
//! of one large read buffer without copying. Cheap per message on purpose,
//! so the load side is not what a benchmark measures. Also a tiny HTTP/1.1
//! client for the JSON API.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

pub const OP_TEXT: u8 = 1;
pub const OP_CLOSE: u8 = 8;

/// One client WebSocket over a blocking TCP stream.
pub struct RawWs {
    pub stream: TcpStream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

/// What the reader saw.
pub enum Frame<'a> {
    Message(u8, &'a [u8]),
    Closed,
}

impl RawWs {
    /// Connects and upgrades; `path` includes the query.
    pub fn connect(addr: SocketAddr, path: &str) -> io::Result<RawWs> {
        Self::connect_with(addr, path, None)
    }

    /// As `connect`, with an optional receive buffer size set before the
    /// connection is made (a small one simulates a stalled browser).
    pub fn connect_with(addr: SocketAddr, path: &str, rcvbuf: Option<i32>) -> io::Result<RawWs> {
        let stream = match rcvbuf {
            None => TcpStream::connect(addr)?,
            Some(size) => connect_small_rcvbuf(addr, size)?,
        };
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(20)))?;
        stream.set_write_timeout(Some(Duration::from_secs(20)))?;
        let mut ws = RawWs {
            stream,
            buf: vec![0; 256 * 1024],
            start: 0,
            end: 0,
        };
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        ws.stream.write_all(req.as_bytes())?;
        loop {
            if let Some(pos) = find(&ws.buf[..ws.end], b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&ws.buf[..pos]).into_owned();
                if !head.starts_with("HTTP/1.1 101") {
                    return Err(io::Error::other(format!(
                        "upgrade refused: {}",
                        head.lines().next().unwrap_or("")
                    )));
                }
                ws.start = pos + 4;
                return Ok(ws);
            }
            if ws.end == ws.buf.len() {
                return Err(io::Error::other("handshake reply too large"));
            }
            let n = ws.stream.read(&mut ws.buf[ws.end..])?;
            if n == 0 {
                return Err(io::Error::other("closed during handshake"));
            }
            ws.end += n;
        }
    }

    /// Sends one masked text frame.
    pub fn send_text(&mut self, payload: &[u8]) -> io::Result<()> {
        let mut out = Vec::with_capacity(payload.len() + 14);
        push_masked_frame(&mut out, payload);
        self.stream.write_all(&out)
    }

    /// Reads the next complete frame (server frames are never masked and,
    /// from both servers here, never fragmented).
    pub fn next_frame(&mut self) -> io::Result<Frame<'_>> {
        loop {
            let avail = &self.buf[self.start..self.end];
            if let Some((hdr, len)) = parse_header(avail) {
                let total = hdr + len;
                if avail.len() >= total {
                    let op = avail[0] & 0x0F;
                    let at = self.start;
                    self.start += total;
                    if op == OP_CLOSE {
                        return Ok(Frame::Closed);
                    }
                    return Ok(Frame::Message(op, &self.buf[at + hdr..at + total]));
                }
                if total > self.buf.len() {
                    // Grow for a large frame (replay pages, snapshots).
                    let mut bigger = vec![0; total.next_power_of_two()];
                    bigger[..avail.len()].copy_from_slice(avail);
                    self.end = avail.len();
                    self.start = 0;
                    self.buf = bigger;
                }
            }
            if self.start > 0 && (self.end == self.buf.len() || self.start == self.end) {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            let n = match self.stream.read(&mut self.buf[self.end..]) {
                Ok(0) => return Ok(Frame::Closed),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(Frame::Closed),
                Err(e) => return Err(e),
            };
            self.end += n;
        }
    }
}

fn connect_small_rcvbuf(addr: SocketAddr, size: i32) -> io::Result<TcpStream> {
    use std::os::fd::FromRawFd;
    let SocketAddr::V4(v4) = addr else {
        return Err(io::Error::other("IPv4 only"));
    };
    // SAFETY: plain socket calls on a descriptor this function owns; the
    // sockaddr is a local value of the right size.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let stream = TcpStream::from_raw_fd(fd);
        let v = size;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &v as *const i32 as *const libc::c_void,
            4,
        );
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: v4.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(v4.ip().octets()),
            },
            sin_zero: [0; 8],
        };
        let rc = libc::connect(
            fd,
            &sa as *const libc::sockaddr_in as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as u32,
        );
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stream)
    }
}

/// Header length and payload length of the frame at the start of `b`.
fn parse_header(b: &[u8]) -> Option<(usize, usize)> {
    if b.len() < 2 {
        return None;
    }
    let masked = b[1] & 0x80 != 0;
    let mask = if masked { 4 } else { 0 };
    match b[1] & 0x7F {
        126 => {
            if b.len() < 4 {
                return None;
            }
            Some((4 + mask, u16::from_be_bytes([b[2], b[3]]) as usize))
        }
        127 => {
            if b.len() < 10 {
                return None;
            }
            let mut l = [0u8; 8];
            l.copy_from_slice(&b[2..10]);
            Some((10 + mask, u64::from_be_bytes(l) as usize))
        }
        n => Some((2 + mask, n as usize)),
    }
}

const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

/// Appends one masked FIN text frame carrying `payload` to `out`.
pub fn push_masked_frame(out: &mut Vec<u8>, payload: &[u8]) {
    out.push(0x81);
    let len = payload.len();
    if len < 126 {
        out.push(0x80 | len as u8);
    } else if len < 65536 {
        out.push(0x80 | 126);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0x80 | 127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
    out.extend_from_slice(&MASK);
    let at = out.len();
    out.extend_from_slice(payload);
    let word = u32::from_ne_bytes(MASK) as u64;
    let word = word | (word << 32);
    let body = &mut out[at..];
    let mut chunks = body.chunks_exact_mut(8);
    for c in &mut chunks {
        let v = u64::from_ne_bytes(c.try_into().unwrap()) ^ word;
        c.copy_from_slice(&v.to_ne_bytes());
    }
    let rem = chunks.into_remainder();
    for (i, b) in rem.iter_mut().enumerate() {
        *b ^= MASK[i % 4];
    }
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(hay, needle)
}

/// The unsigned integer following `key` in `hay`, if any.
pub fn number_after(hay: &[u8], key: &[u8]) -> Option<u64> {
    let at = find(hay, key)? + key.len();
    let mut v: u64 = 0;
    let mut any = false;
    for &b in &hay[at..] {
        if b.is_ascii_digit() {
            v = v * 10 + (b - b'0') as u64;
            any = true;
        } else {
            break;
        }
    }
    any.then_some(v)
}

/// One HTTP/1.1 request on a fresh connection; returns status and body.
pub fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes())?;
    let mut reply = Vec::new();
    s.read_to_end(&mut reply)?;
    let split = find(&reply, b"\r\n\r\n").ok_or_else(|| io::Error::other("bad reply"))?;
    let head = String::from_utf8_lossy(&reply[..split]);
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut body = reply[split + 4..].to_vec();
    if let Some(len) = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())?
    }) {
        body.truncate(len);
    }
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}
