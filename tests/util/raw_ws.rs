//! A raw WebSocket client: every byte on the wire is chosen by the test
//! (frames that break every rule, announced lengths that never arrive,
//! one-byte writes), and server frames are read as they are.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{read_head, status_line_code, TestHub, DEADLINE};

/// Frame opcodes.
pub mod op {
    pub const CONT: u8 = 0x0;
    pub const TEXT: u8 = 0x1;
    pub const BINARY: u8 = 0x2;
    pub const CLOSE: u8 = 0x8;
    pub const PING: u8 = 0x9;
    pub const PONG: u8 = 0xA;
}

const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

/// One client frame whose header announces `declared` payload bytes:
/// `first` is the first byte (FIN, RSV bits, opcode); the payload is
/// masked unless `masked` is false.
pub fn frame_declaring(first: u8, payload: &[u8], declared: usize, masked: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 14);
    out.push(first);
    let mask_bit = if masked { 0x80 } else { 0 };
    match declared {
        len @ 0..=125 => out.push(mask_bit | len as u8),
        len @ 126..=65535 => {
            out.push(mask_bit | 126);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        len => {
            out.push(mask_bit | 127);
            out.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
    if masked {
        out.extend_from_slice(&MASK);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ MASK[i % 4]));
    } else {
        out.extend_from_slice(payload);
    }
    out
}

/// One client frame carrying all of `payload` (see `frame_declaring`).
pub fn raw_frame(first: u8, payload: &[u8], masked: bool) -> Vec<u8> {
    frame_declaring(first, payload, payload.len(), masked)
}

/// A masked client frame.
pub fn frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
    raw_frame(if fin { 0x80 } else { 0 } | opcode, payload, true)
}

/// A frame header that announces `len` payload bytes (none follow) in the
/// 8-byte length form.
pub fn announce(opcode: u8, len: u64) -> Vec<u8> {
    let mut out = vec![0x80 | opcode, 0x80 | 127];
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&MASK);
    out
}

/// A WebSocket upgrade request head for `path`, plus `extra` headers.
pub fn upgrade_request(addr: SocketAddr, path: &str, extra: &[(&str, &str)]) -> String {
    let mut head = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    );
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    head
}

pub struct RawWs {
    pub s: TcpStream,
}

impl RawWs {
    /// Upgrades `path`; the refusal's status code otherwise.
    pub fn connect(addr: SocketAddr, path: &str, extra: &[(&str, &str)]) -> Result<RawWs, u16> {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(DEADLINE)).unwrap();
        s.set_write_timeout(Some(DEADLINE)).unwrap();
        s.set_nodelay(true).unwrap();
        s.write_all(upgrade_request(addr, path, extra).as_bytes())
            .unwrap();
        let head = read_head(&mut s).expect("an upgrade response");
        match status_line_code(&head) {
            101 => Ok(RawWs { s }),
            other => Err(other),
        }
    }

    /// `connect` for a peer that may be gone: a connection that fails or
    /// ends before the upgrade's answer is `Err(0)`.
    pub fn try_connect(addr: SocketAddr, path: &str) -> Result<RawWs, u16> {
        let mut s = TcpStream::connect(addr).map_err(|_| 0u16)?;
        let _ = s.set_read_timeout(Some(DEADLINE));
        let _ = s.set_write_timeout(Some(DEADLINE));
        let _ = s.set_nodelay(true);
        s.write_all(upgrade_request(addr, path, &[]).as_bytes())
            .map_err(|_| 0u16)?;
        let head = read_head(&mut s).map_err(|_| 0u16)?;
        match status_line_code(&head) {
            101 => Ok(RawWs { s }),
            other => Err(other),
        }
    }

    pub fn open(addr: SocketAddr, path: &str) -> RawWs {
        RawWs::connect(addr, path, &[]).unwrap_or_else(|code| panic!("{path}: {code}"))
    }

    /// A panel socket that has read its welcome.
    pub fn panel(hub: &TestHub) -> RawWs {
        let mut ws = RawWs::open(hub.addr, "/panel/ws");
        ws.next_text(|v| v["type"] == "welcome");
        ws
    }

    /// One panel ping round trip.
    pub fn panel_round_trip(&mut self) -> Duration {
        let started = Instant::now();
        self.text(r#"{"v":1,"type":"ping"}"#);
        self.next_text(|v| v["type"] == "pong");
        started.elapsed()
    }

    pub fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.s.write_all(bytes)
    }

    pub fn send(&mut self, fin: bool, opcode: u8, payload: &[u8]) {
        self.write(&frame(fin, opcode, payload)).unwrap();
    }

    pub fn text(&mut self, text: &str) {
        self.send(true, op::TEXT, text.as_bytes());
    }

    /// One server frame: (fin, opcode, payload).
    pub fn read_frame(&mut self) -> std::io::Result<(bool, u8, Vec<u8>)> {
        let mut h = [0u8; 2];
        self.s.read_exact(&mut h)?;
        let mut len = u64::from(h[1] & 0x7f);
        if len == 126 {
            let mut b = [0u8; 2];
            self.s.read_exact(&mut b)?;
            len = u64::from(u16::from_be_bytes(b));
        } else if len == 127 {
            let mut b = [0u8; 8];
            self.s.read_exact(&mut b)?;
            len = u64::from_be_bytes(b);
        }
        if len > 64 * 1024 * 1024 {
            return Err(std::io::Error::new(ErrorKind::InvalidData, "frame too big"));
        }
        let mut mask = None;
        if h[1] & 0x80 != 0 {
            let mut m = [0u8; 4];
            self.s.read_exact(&mut m)?;
            mask = Some(m);
        }
        let mut payload = vec![0u8; len as usize];
        self.s.read_exact(&mut payload)?;
        if let Some(m) = mask {
            for (i, b) in payload.iter_mut().enumerate() {
                *b ^= m[i % 4];
            }
        }
        Ok((h[0] & 0x80 != 0, h[0] & 0x0f, payload))
    }

    /// Reads until a text frame satisfies `pred`; panics on close or EOF.
    pub fn next_text(&mut self, mut pred: impl FnMut(&Value) -> bool) -> Value {
        let end = Instant::now() + DEADLINE;
        loop {
            assert!(Instant::now() < end, "no matching frame in time");
            let (_, opcode, payload) = self.read_frame().expect("socket ended while waiting");
            match opcode {
                op::TEXT => {
                    let v: Value = serde_json::from_slice(&payload).unwrap();
                    if pred(&v) {
                        return v;
                    }
                }
                op::CLOSE => panic!("closed while waiting: {payload:?}"),
                _ => {}
            }
        }
    }

    /// Reads until a pong arrives; returns its payload.
    pub fn next_pong(&mut self) -> Vec<u8> {
        let end = Instant::now() + DEADLINE;
        loop {
            assert!(Instant::now() < end, "no pong in time");
            let (_, opcode, payload) = self.read_frame().expect("socket ended while waiting");
            if opcode == op::PONG {
                return payload;
            }
            assert_ne!(opcode, op::CLOSE, "closed while waiting for a pong");
        }
    }

    /// Reads until the hub ends the connection. Returns whether the TCP
    /// connection ended within `within` and the close code seen, if any.
    pub fn ends(&mut self, within: Duration) -> (bool, Option<u16>) {
        let end = Instant::now() + within;
        let mut code = None;
        self.s
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        while Instant::now() < end {
            match self.read_frame() {
                Ok((_, op::CLOSE, payload)) if payload.len() >= 2 => {
                    code = Some(u16::from_be_bytes([payload[0], payload[1]]));
                }
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => return (true, code),
            }
        }
        (false, code)
    }
}

/// One exchange on the remote-tools listener at `tools`: the upgrade of
/// `path` (`/agent/<id>/tools/<route>?token=…`), one `tool_request` frame
/// and its `tool_response`. `Err(status)` when the upgrade is refused
/// (503 at the connection cap), `Err(0)` when the hub is gone or the
/// socket ends without a response. Never panics: for floods and for a
/// hub killed mid-exchange.
pub fn tool_exchange(tools: SocketAddr, path: &str, request: &str) -> Result<Value, u16> {
    let mut ws = RawWs::try_connect(tools, path)?;
    ws.write(&frame(true, op::TEXT, request.as_bytes()))
        .map_err(|_| 0u16)?;
    loop {
        match ws.read_frame() {
            Ok((_, op::TEXT, payload)) => {
                return serde_json::from_slice(&payload).map_err(|_| 0u16);
            }
            Ok((_, op::CLOSE, _)) | Err(_) => return Err(0),
            Ok(_) => {}
        }
    }
}
