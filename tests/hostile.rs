//! Hostile input against the real hub binary: malformed HTTP, traversal,
//! slow and huge requests, WebSocket frames that break every rule, floods,
//! misbehaving worker processes, and storage that fails underneath. Each
//! test proves the hub survives with bounded threads and memory and keeps
//! serving a well-behaved client. `docs/security.md` maps every class of
//! input to the test here that proves how it is handled.
//!
//! Memory ceilings are derived from the configured limits (each test states
//! its derivation) plus a fixed allowance for the allocator: glibc keeps
//! per-thread arenas and does not hand every freed page back, so RSS after
//! a flood sits above the live data even when nothing leaks. An unbounded
//! structure overshoots these ceilings by far more than the allowance.
//!
//! Tests that flood or measure run one at a time (`heavy()`), so a slow
//! 2-core machine gives each the CPU it needs; every wait has a deadline.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::util::*;

const KIB: u64 = 1;
const MIB: u64 = 1024 * KIB;

/// What glibc may keep beyond the live data after a flood (see above).
const ALLOCATOR_SLACK_KIB: u64 = 32 * MIB;

static HEAVY: Mutex<()> = Mutex::new(());

fn heavy() -> MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}

fn hub_with(dir: &TempDir, config: Value) -> TestHub {
    let cfg = dir.path().join("hostile.jsonc");
    std::fs::write(&cfg, config.to_string()).unwrap();
    TestHub::start(dir.path(), &["-c", cfg.to_str().unwrap()])
}

fn create(hub: &TestHub, id: &str) {
    let res = post(hub, "/api/sessions", json!({"session": id}));
    assert_eq!(res.status, 201, "{}", res.text());
}

fn session(hub: &TestHub, id: &str) -> Value {
    hub.get(&format!("/api/sessions/{id}")).json()["session"].clone()
}

/// A `/proc/<pid>/status` field in KiB (or a plain count).
fn proc_field(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with(field))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// Peak resident set size of the hub so far, in KiB.
fn peak_rss_kib(hub: &TestHub) -> u64 {
    proc_field(hub.child.id(), "VmHWM:")
}

/// Hub threads whose name starts with `prefix` (`worker-std` for pipe
/// readers, `http-conn`, `panel-`, `worker-events`).
fn threads_named(hub: &TestHub, prefix: &str) -> usize {
    std::fs::read_dir(format!("/proc/{}/task", hub.child.id()))
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|name| name.trim_end().starts_with(prefix))
                .count()
        })
        .unwrap_or(0)
}

/// Names of the hub's threads, for failure messages.
fn thread_names(hub: &TestHub) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{}/task", hub.child.id()))
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .map(|name| name.trim_end().to_string())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Waits until the hub has at most `max` threads besides its disk writers;
/// panics with the thread names otherwise. Disk writers (`disk-writer`)
/// are one per session's events.jsonl and one per worker's worker.log,
/// kept while the session lives, so they are bounded separately: at most
/// two per session.
fn threads_settle(hub: &TestHub, max: usize) -> bool {
    let others = || {
        hub.threads()
            .saturating_sub(threads_named(hub, "disk-writer"))
    };
    if !wait_until(DEADLINE, || others() <= max) {
        panic!("{} threads > {max}: {:?}", others(), thread_names(hub));
    }
    let sessions = hub.get("/api/sessions").json()["sessions"]
        .as_array()
        .map_or(0, Vec::len);
    let writers = threads_named(hub, "disk-writer");
    assert!(
        writers <= 2 * sessions,
        "{writers} disk writers for {sessions} sessions"
    );
    true
}

/// Whether the hub answers `GET /api/meta` within `within`.
fn answers_within(hub: &TestHub, within: Duration) -> bool {
    let raw = format!(
        "GET /api/meta HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        hub.addr
    );
    let started = Instant::now();
    match exchange_within(hub.addr, raw.as_bytes(), within) {
        Ok(reply) => reply.starts_with("HTTP/1.1 200 ") && started.elapsed() <= within,
        Err(_) => false,
    }
}

/// Writes `raw` and reads until the server closes; the whole reply as text.
fn exchange_within(addr: SocketAddr, raw: &[u8], within: Duration) -> std::io::Result<String> {
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

fn status_line_code(reply: &str) -> u16 {
    reply
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {reply:?}"))
}

/// Reads until EOF or reset; true if that happened within `within`.
fn closes_within(s: &mut TcpStream, within: Duration) -> bool {
    let end = Instant::now() + within;
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut buf = [0u8; 16 * 1024];
    while Instant::now() < end {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return true,
        }
    }
    false
}

// ---------------------------------------------------------------------------
// A raw WebSocket client: every byte on the wire is chosen by the test.

mod op {
    pub const CONT: u8 = 0x0;
    pub const TEXT: u8 = 0x1;
    pub const BINARY: u8 = 0x2;
    pub const CLOSE: u8 = 0x8;
    pub const PING: u8 = 0x9;
    pub const PONG: u8 = 0xA;
}

const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

/// One client frame: `first` is the first byte (FIN, RSV bits, opcode);
/// the payload is masked unless `masked` is false.
fn raw_frame(first: u8, payload: &[u8], masked: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 14);
    out.push(first);
    let mask_bit = if masked { 0x80 } else { 0 };
    match payload.len() {
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

fn frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
    raw_frame(if fin { 0x80 } else { 0 } | opcode, payload, true)
}

/// A frame header that announces `len` payload bytes (none follow).
fn announce(opcode: u8, len: u64) -> Vec<u8> {
    let mut out = vec![0x80 | opcode, 0x80 | 127];
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&MASK);
    out
}

fn upgrade_request(addr: SocketAddr, path: &str, extra: &[(&str, &str)]) -> String {
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

/// Reads a response head byte by byte (never past it).
fn read_head(s: &mut TcpStream) -> std::io::Result<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte)? == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        head.push(byte[0]);
        assert!(head.len() < 64 * 1024, "response head too long");
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

struct RawWs {
    s: TcpStream,
}

impl RawWs {
    /// Upgrades `path`; the refusal's status code otherwise.
    fn connect(addr: SocketAddr, path: &str, extra: &[(&str, &str)]) -> Result<RawWs, u16> {
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

    fn open(addr: SocketAddr, path: &str) -> RawWs {
        RawWs::connect(addr, path, &[]).unwrap_or_else(|code| panic!("{path}: {code}"))
    }

    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.s.write_all(bytes)
    }

    fn send(&mut self, fin: bool, opcode: u8, payload: &[u8]) {
        self.write(&frame(fin, opcode, payload)).unwrap();
    }

    fn text(&mut self, text: &str) {
        self.send(true, op::TEXT, text.as_bytes());
    }

    /// One server frame: (fin, opcode, payload).
    fn read_frame(&mut self) -> std::io::Result<(bool, u8, Vec<u8>)> {
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
    fn next_text(&mut self, mut pred: impl FnMut(&Value) -> bool) -> Value {
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
    fn next_pong(&mut self) -> Vec<u8> {
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
    fn ends(&mut self, within: Duration) -> (bool, Option<u16>) {
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

fn events_path(hub: &TestHub, id: &str) -> String {
    format!(
        "/agent/{id}/events?token={}",
        worker_token(&hub.data_dir, id)
    )
}

fn confirm_path(hub: &TestHub, id: &str) -> String {
    format!(
        "/agent/{id}/confirm?token={}",
        worker_token(&hub.data_dir, id)
    )
}

fn confirmation_request(session: &str, worker: &str, cid: &str, arguments: Value) -> String {
    json!({"type": "confirmation_request", "data": {
        "worker_id": worker, "session_id": session, "run_id": "r", "confirmation_id": cid,
        "call": {"id": "c", "name": "run_command", "type": "serial_write",
                 "security": "require_confirm", "arguments": arguments},
    }})
    .to_string()
}

/// A panel socket that has read its welcome.
fn panel(hub: &TestHub) -> RawWs {
    let mut ws = RawWs::open(hub.addr, "/panel/ws");
    ws.next_text(|v| v["type"] == "welcome");
    ws
}

/// One panel ping round trip.
fn panel_round_trip(ws: &mut RawWs) -> Duration {
    let started = Instant::now();
    ws.text(r#"{"v":1,"type":"ping"}"#);
    ws.next_text(|v| v["type"] == "pong");
    started.elapsed()
}

// ---------------------------------------------------------------------------
// HTTP

#[test]
fn malformed_request_lines_and_headers_get_400_and_close() {
    let dir = TempDir::new("hostile-malformed");
    let hub = TestHub::start(dir.path(), &["--panel-token", "tok"]);
    let baseline = hub.threads();
    let host = hub.addr.to_string();
    let ok = |extra: &str| {
        format!("GET /api/meta HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n")
            .into_bytes()
    };
    let with_target = |target: &[u8]| {
        let mut raw = b"GET ".to_vec();
        raw.extend_from_slice(target);
        raw.extend_from_slice(format!(" HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes());
        raw
    };
    let with_header = |line: &[u8]| {
        let mut raw = format!("GET /api/meta HTTP/1.1\r\nHost: {host}\r\n").into_bytes();
        raw.extend_from_slice(line);
        raw.extend_from_slice(b"\r\n\r\n");
        raw
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "no version",
            format!("GET /api/meta\r\nHost: {host}\r\n\r\n").into_bytes(),
        ),
        (
            "two spaces",
            format!("GET  /api/meta HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes(),
        ),
        (
            "bad version",
            format!("GET /api/meta HTTP/x.y\r\nHost: {host}\r\n\r\n").into_bytes(),
        ),
        ("empty line first", b"\r\n\r\n".to_vec()),
        (
            "bare LF",
            format!("GET /api/meta HTTP/1.1\nHost: {host}\n\n").into_bytes(),
        ),
        ("header without colon", with_header(b"NoColonHere")),
        ("obsolete line folding", with_header(b"X-A: a\r\n folded")),
        ("NUL in target", with_target(b"/api/meta\0")),
        ("NUL in static target", with_target(b"/index.html\0.js")),
        ("raw non-ASCII target", with_target(b"/\xff\xfe")),
        ("control byte in target", with_target(b"/api/\x01meta")),
        ("NUL in header value", with_header(b"X-A: a\0b")),
        ("NUL in header name", with_header(b"X-\0A: b")),
        (
            "NUL in Host",
            format!("GET / HTTP/1.1\r\nHost: {host}\0\r\n\r\n").into_bytes(),
        ),
        (
            "NUL in token header",
            with_header(b"Authorization: Bearer tok\0"),
        ),
        ("control byte in header", with_header(b"X-A: a\x01b")),
        ("DEL in header", with_header(b"X-A: a\x7fb")),
        ("bare CR in header", with_header(b"X-A: a\rX-B: b")),
        ("non-ASCII header value", with_header(b"X-A: caf\xc3\xa9")),
        ("two Hosts", ok(&format!("Host: {host}\r\n"))),
        ("two different Hosts", ok("Host: evil.example:1\r\n")),
        ("Content-Length not a number", ok("Content-Length: abc\r\n")),
        ("negative Content-Length", ok("Content-Length: -1\r\n")),
        ("signed Content-Length", ok("Content-Length: +0\r\n")),
        (
            "Content-Length overflow",
            ok("Content-Length: 99999999999999999999999\r\n"),
        ),
        (
            "conflicting Content-Lengths",
            ok("Content-Length: 0\r\nContent-Length: 5\r\n"),
        ),
    ];
    for (what, raw) in &cases {
        // A second, valid request pipelined behind the bad one must never
        // be answered: after a malformed head the stream position is lost.
        let mut pipelined = raw.clone();
        pipelined.extend_from_slice(&ok(""));
        let reply = exchange_within(hub.addr, &pipelined, DEADLINE)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(status_line_code(&reply), 400, "{what}: {reply:?}");
        assert_eq!(
            reply.matches("HTTP/1.1 ").count(),
            1,
            "{what}: a request after a malformed head was answered: {reply:?}"
        );
    }
    // Equal duplicate Content-Lengths are one length (RFC 9112 §6.3).
    let reply = exchange_within(
        hub.addr,
        &ok("Content-Length: 0\r\nContent-Length: 0\r\n"),
        DEADLINE,
    )
    .unwrap();
    assert_eq!(status_line_code(&reply), 200, "{reply:?}");
    // Tabs are legal whitespace in a header value.
    let reply = exchange_within(hub.addr, &ok("X-A: a\tb\r\n"), DEADLINE).unwrap();
    assert_eq!(status_line_code(&reply), 200, "{reply:?}");
    assert!(answers_within(&hub, Duration::from_secs(5)));
    assert!(
        threads_settle(&hub, baseline),
        "threads {} > {baseline}",
        hub.threads()
    );
    assert!(!hub.log_text().contains("panicked"), "{}", hub.log_text());
}

#[test]
fn bad_percent_escapes_everywhere_are_refused_not_crashed_on() {
    let dir = TempDir::new("hostile-escapes");
    let hub = TestHub::start(dir.path(), &["--panel-token", "tok"]);
    create_with_token(&hub, "s");
    let status = |method: &str, target: &str, headers: &[(&str, &str)]| -> (u16, Value) {
        let res = hub.request(method, target, headers, b"");
        let body = serde_json::from_slice(&res.body).unwrap_or(Value::Null);
        (res.status, body)
    };
    // Paths and query values the hub decodes: 400 bad_request.
    for target in [
        "/%ZZ",
        "/%4",
        "/%",
        "/%ff",
        "/%c3%28",
        "/index.html%00",
        "/api/sessions/%ZZ?token=tok",
        "/api/sessions/%E0%80?token=tok",
        "/api/sessions/s/events?token=tok&since=%ZZ",
        "/api/sessions/s/events?token=tok&limit=%4",
        "/api/sessions/s/logs?token=tok&limit=%G1",
    ] {
        let (code, body) = status("GET", target, &[]);
        assert_eq!(
            (code, body["error"].clone()),
            (400, json!("bad_request")),
            "{target}"
        );
    }
    // Credentials with a bad escape count as absent: 401, never 500.
    for (target, headers) in [
        ("/api/sessions?token=%ZZ", vec![]),
        ("/api/sessions?token=tok%", vec![]),
        (
            "/api/sessions",
            vec![("Cookie", "simplex_hub_token=tok%zz")],
        ),
        ("/api/sessions", vec![("Authorization", "Bearer %ZZ")]),
    ] {
        let (code, body) = status("GET", target, &headers);
        assert_eq!(
            (code, body["error"].clone()),
            (401, json!("unauthorized")),
            "{target}"
        );
    }
    // A malformed pair elsewhere in the query does not hide a good token.
    assert_eq!(status("GET", "/api/sessions?%ZZ=1&token=tok", &[]).0, 200);
    // Upgrades: the panel token and the worker token and id.
    assert_eq!(
        RawWs::connect(hub.addr, "/panel/ws?token=%ZZ", &[]).err(),
        Some(401)
    );
    assert_eq!(
        RawWs::connect(hub.addr, "/agent/s/events?token=%ZZ", &[]).err(),
        Some(401)
    );
    assert_eq!(
        RawWs::connect(hub.addr, "/agent/s/confirm?token=%", &[]).err(),
        Some(401)
    );
    assert_eq!(
        RawWs::connect(hub.addr, "/agent/%ZZ/events?token=x", &[]).err(),
        Some(404)
    );
    assert_eq!(
        RawWs::connect(hub.addr, "/agent/%ff/confirm?token=x", &[]).err(),
        Some(404)
    );
    assert!(answers_within(&hub, Duration::from_secs(5)));
    assert!(!hub.log_text().contains("panicked"));
}

fn create_with_token(hub: &TestHub, id: &str) {
    let res = post(hub, "/api/sessions?token=tok", json!({"session": id}));
    assert_eq!(res.status, 201, "{}", res.text());
}

#[test]
fn unknown_methods_are_405_or_404_everywhere() {
    let dir = TempDir::new("hostile-methods");
    let hub = TestHub::start(dir.path(), &[]);
    create(&hub, "s");
    let long = "X".repeat(200);
    for method in ["BREW", "PROPFIND", "TRACE", "CONNECT", long.as_str()] {
        for (path, expected) in [
            ("/", 405),
            ("/app.js", 405),
            ("/api/meta", 405),
            ("/api/sessions", 405),
            ("/api/sessions/s", 405),
            ("/api/sessions/s/events", 405),
            ("/api/sessions/s/start", 405),
            ("/api/nope", 404),
            ("/agent/s/events", 404),
        ] {
            let res = hub.request(method, path, &[], b"");
            assert_eq!(
                res.status,
                expected,
                "{} {path}",
                &method[..method.len().min(10)]
            );
            assert!(res.json()["error"].is_string());
        }
    }
    assert!(answers_within(&hub, Duration::from_secs(5)));
}

#[test]
fn path_traversal_in_every_encoding_names_no_file() {
    let dir = TempDir::new("hostile-traversal");
    let root = dir.path().join("panel");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::write(root.join("index.html"), "<p>panel</p>").unwrap();
    std::fs::write(root.join("sub/ok.txt"), "fine").unwrap();
    std::fs::write(dir.path().join("secret.txt"), "TOP-SECRET").unwrap();
    std::os::unix::fs::symlink(dir.path().join("secret.txt"), root.join("link.txt")).unwrap();
    std::os::unix::fs::symlink(dir.path(), root.join("updir")).unwrap();
    let data = dir.path().join("data");
    let embedded = TestHub::start(&data, &[]);
    let dev = TestHub::start(
        &dir.path().join("data2"),
        &["--static-dir", root.to_str().unwrap()],
    );
    assert_eq!(dev.get("/sub/ok.txt").text(), "fine");
    let attempts = [
        "/../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2E%2E/secret.txt",
        "/.%2e/secret.txt",
        "/%2e./secret.txt",
        "/..%2fsecret.txt",
        "/..%2Fsecret.txt",
        "/%2e%2e%2fsecret.txt",
        "/%2e%2e%2f%2e%2e%2fsecret.txt",
        "/..%5csecret.txt",
        "/..%5Csecret.txt",
        "/..\\secret.txt",
        "/sub/..\\..\\secret.txt",
        "/%252e%252e/secret.txt",
        "/%252e%252e%252fsecret.txt",
        "/%c0%ae%c0%ae/secret.txt",
        "/%c0%af../secret.txt",
        "/%e0%80%ae%e0%80%ae/secret.txt",
        "/%u002e%u002e/secret.txt",
        "/%ef%bc%8e%ef%bc%8e/secret.txt",
        "/./../secret.txt",
        "/sub/../../secret.txt",
        "/sub/./../../secret.txt",
        "/index.html/../../secret.txt",
        "//secret.txt",
        "/%2fsecret.txt",
        "/%2f..%2fsecret.txt",
        "/..;/secret.txt",
        "/.../secret.txt",
        "/%00../secret.txt",
        "/..%00/secret.txt",
        "/C:%5Csecret.txt",
        "/\\\\server\\share\\secret.txt",
        "/link.txt",
        "/updir/secret.txt",
        "/updir/data/hub.db",
    ];
    for hub in [&embedded, &dev] {
        for path in attempts {
            let res = hub.get(path);
            assert!(
                matches!(res.status, 400 | 404),
                "{path}: {} {}",
                res.status,
                res.text()
            );
            assert!(!res.text().contains("TOP-SECRET"), "{path} escaped");
        }
    }
    // The API and worker routes decode ids too: nothing outside a session.
    create(&embedded, "victim");
    let victim = data.join("sessions/victim");
    std::fs::write(victim.join("marker"), "x").unwrap();
    for id in [
        "..",
        "%2e%2e",
        "..%2fvictim",
        "victim%2f..",
        "%2e%2e%2fsessions%2fvictim",
        "victim%00",
    ] {
        let res = embedded.request("DELETE", &format!("/api/sessions/{id}"), &[], b"");
        assert!(matches!(res.status, 400 | 404), "{id}: {}", res.status);
        let res = embedded.get(&format!("/api/sessions/{id}/snapshot"));
        assert!(matches!(res.status, 400 | 404), "{id}: {}", res.status);
        let code = RawWs::connect(embedded.addr, &format!("/agent/{id}/events?token=x"), &[]).err();
        assert_eq!(code, Some(404), "{id}");
    }
    assert!(
        victim.join("marker").is_file(),
        "a traversal reached the session"
    );
    assert!(data.join("hub.db").is_file());
}

#[test]
fn a_gigabyte_content_length_with_a_trickled_body_is_refused_at_once() {
    let _heavy = heavy();
    let dir = TempDir::new("hostile-gigabody");
    let request_timeout = Duration::from_millis(3000);
    let hub = hub_with(
        &dir,
        json!({"http": {"requestTimeoutMs": 3000, "idleTimeoutMs": 1500}}),
    );
    let baseline = hub.threads();
    let rss_before = hub.rss_kib();
    let gib = 1u64 << 30;
    for (method, path, expected) in [
        ("POST", "/api/sessions", 413),
        ("POST", "/api/sessions/x/input", 413),
        ("GET", "/api/meta", 200),
        ("POST", "/", 405),
    ] {
        let mut s = TcpStream::connect(hub.addr).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {gib}\r\n\r\n",
            hub.addr
        )
        .unwrap();
        let started = Instant::now();
        // The trickle: 1 KiB every 100 ms, never idle long enough for the
        // idle timeout, so only the request deadline can end it.
        let mut writer = s.try_clone().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stop_writer = stop.clone();
        let trickle = thread::spawn(move || {
            let chunk = [b'x'; 1024];
            let mut sent = 0u64;
            while !stop_writer.load(Ordering::Acquire) && writer.write_all(&chunk).is_ok() {
                sent += 1024;
                thread::sleep(Duration::from_millis(100));
            }
            sent
        });
        s.set_read_timeout(Some(DEADLINE)).unwrap();
        let head = read_head(&mut s).expect("an answer before the body");
        assert_eq!(status_line_code(&head), expected, "{method} {path}: {head}");
        assert!(
            started.elapsed() < request_timeout,
            "{method} {path}: answered only after {:?}",
            started.elapsed()
        );
        // Meanwhile the hub serves others.
        assert!(
            answers_within(&hub, Duration::from_secs(2)),
            "{method} {path}"
        );
        // The connection ends at the request deadline, not after 1 GiB.
        assert!(
            closes_within(&mut s, request_timeout + Duration::from_secs(5)),
            "{method} {path}: still open after {:?}",
            started.elapsed()
        );
        stop.store(true, Ordering::Release);
        let sent = trickle.join().unwrap();
        assert!(sent < 1 << 20, "{sent} bytes trickled");
    }
    // The body blasted as fast as loopback carries it, announcing 1 TiB:
    // the drain reads through a small buffer and stops at the deadline,
    // whatever the rate (a 1 GiB body may drain completely before it).
    let mut s = TcpStream::connect(hub.addr).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
    write!(
        s,
        "POST /api/sessions HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n\r\n",
        hub.addr,
        1u64 << 40
    )
    .unwrap();
    let started = Instant::now();
    let chunk = vec![b'y'; 256 * 1024];
    let mut blasted = 0u64;
    let mut cut = false;
    while started.elapsed() < request_timeout + Duration::from_secs(15) {
        match s.write_all(&chunk) {
            Ok(()) => blasted += chunk.len() as u64,
            Err(_) => {
                cut = true;
                break;
            }
        }
    }
    let blast_took = started.elapsed();
    assert!(
        cut,
        "the hub kept reading a 1 TiB body ({blasted} bytes) for {blast_took:?}"
    );
    assert!(threads_settle(&hub, baseline));
    let grown = hub.rss_kib().saturating_sub(rss_before);
    // Ceiling: the body is never buffered (413 before reading; the drain
    // uses an 8 KiB buffer), so only the connections' stacks and buffers
    // count: a few MiB; 8 MiB allows for the allocator.
    assert!(grown < 8 * MIB, "RSS grew by {grown} KiB for 1 GiB bodies");
    eprintln!(
        "gigabyte body: RSS grew {grown} KiB (ceiling {} KiB); a blasted body was cut after \
         {blasted} bytes in {blast_took:?}",
        8 * MIB
    );
}

#[test]
fn a_request_split_into_one_byte_writes_still_succeeds() {
    let dir = TempDir::new("hostile-bytewise");
    let hub = hub_with(&dir, json!({"http": {"requestTimeoutMs": 15000}}));
    let drip = |s: &mut TcpStream, bytes: &[u8]| {
        for b in bytes {
            s.write_all(&[*b]).unwrap();
            thread::sleep(Duration::from_millis(2));
        }
    };
    let body = json!({"session": "bytewise"}).to_string();
    let raw = format!(
        "POST /api/sessions HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}\
         GET /api/sessions/bytewise HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        hub.addr,
        body.len(),
        hub.addr
    );
    let mut s = TcpStream::connect(hub.addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    drip(&mut s, raw.as_bytes());
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let codes: Vec<u16> = reply
        .match_indices("HTTP/1.1 ")
        .map(|(i, _)| status_line_code(&reply[i..]))
        .collect();
    assert_eq!(codes, vec![201, 200], "{reply}");

    // An upgrade and then a frame, each one byte per write.
    let path = events_path(&hub, "bytewise");
    let mut s = TcpStream::connect(hub.addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    drip(&mut s, upgrade_request(hub.addr, &path, &[]).as_bytes());
    let head = read_head(&mut s).unwrap();
    assert_eq!(status_line_code(&head), 101, "{head}");
    let event = envelope("bytewise", "w", 1, "status", json!({"slow": true}));
    drip(&mut s, &frame(true, op::TEXT, event.as_bytes()));
    let e = wait_event(&hub, "bytewise", |e| e["data"]["slow"] == true);
    assert_eq!(e["worker_id"], "w");
}

#[test]
fn slowloris_cannot_starve_a_normal_client_or_grow_threads() {
    let _heavy = heavy();
    let dir = TempDir::new("hostile-slowloris");
    let cap = 32usize;
    let hub = hub_with(
        &dir,
        json!({"http": {"maxConnections": cap, "requestTimeoutMs": 2000, "idleTimeoutMs": 1000}}),
    );
    let baseline = hub.threads();
    let addr = hub.addr;
    let attack_for = Duration::from_secs(8);
    let stop = Arc::new(AtomicBool::new(false));
    let attacker_stop = stop.clone();
    // The attacker keeps up to 120 connections open, each sending part of
    // a head and then one byte every 400 ms (never idle for 1 s), and
    // replaces every connection the hub cuts.
    let attacker = thread::spawn(move || {
        let mut conns: Vec<TcpStream> = Vec::new();
        let mut opened = 0usize;
        let mut last_drip = Instant::now();
        while !attacker_stop.load(Ordering::Acquire) {
            while conns.len() < 120 {
                let Ok(mut s) = TcpStream::connect(addr) else {
                    break;
                };
                s.set_write_timeout(Some(Duration::from_millis(200)))
                    .unwrap();
                if s.write_all(b"GET /api/meta HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                    .is_ok()
                {
                    conns.push(s);
                    opened += 1;
                }
            }
            if last_drip.elapsed() >= Duration::from_millis(400) {
                conns.retain_mut(|s| s.write_all(b"a").is_ok());
                last_drip = Instant::now();
            }
            thread::sleep(Duration::from_millis(20));
        }
        opened
    });
    let started = Instant::now();
    let (mut answered, mut ok, mut refused, mut max_threads) = (0, 0, 0, 0usize);
    let mut slowest = Duration::ZERO;
    while started.elapsed() < attack_for {
        max_threads = max_threads.max(hub.threads());
        let raw = format!("GET /api/meta HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        let asked = Instant::now();
        let reply = exchange_within(addr, raw.as_bytes(), Duration::from_secs(5))
            .expect("a normal client got no answer within 5 s");
        slowest = slowest.max(asked.elapsed());
        answered += 1;
        match status_line_code(&reply) {
            200 => ok += 1,
            503 => refused += 1,
            other => panic!("unexpected {other}: {reply}"),
        }
        thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Release);
    let opened = attacker.join().unwrap();
    // Thread ceiling: the idle hub's threads plus one per allowed HTTP
    // connection (the 503 is written by the accept thread itself).
    assert!(
        max_threads <= baseline + cap,
        "{max_threads} threads with a cap of {cap} over {baseline}"
    );
    assert!(slowest < Duration::from_secs(5));
    assert!(
        opened > cap * 2,
        "the attacker opened only {opened} connections"
    );
    assert!(answers_within(&hub, Duration::from_secs(5)));
    assert!(
        threads_settle(&hub, baseline + 1),
        "threads {} > {baseline}",
        hub.threads()
    );
    eprintln!(
        "slowloris: {opened} attacker connections; normal client {answered} answers \
         ({ok} ok, {refused} 503), slowest {slowest:?}; threads max {max_threads} \
         (baseline {baseline}, cap {cap})"
    );
}

#[test]
fn cross_site_requests_cannot_drive_the_api() {
    let dir = TempDir::new("hostile-csrf");
    // The loopback default: no panel token, so only the browser's own
    // marks tell a visited page's request from the panel's.
    let hub = TestHub::start(dir.path(), &[]);
    create(&hub, "s");
    let same = format!("http://{}", hub.addr);
    let body = json!({"session": "csrf"}).to_string();
    let send = |method: &str, path: &str, headers: &[(&str, &str)]| -> (u16, Value) {
        let body = if method == "POST" {
            body.as_bytes()
        } else {
            b""
        };
        let res = hub.request(method, path, headers, body);
        let json = serde_json::from_slice(&res.body).unwrap_or(Value::Null);
        (res.status, json)
    };
    let refused = (403, json!("forbidden_origin"));
    for headers in [
        vec![("Origin", "http://evil.example")],
        vec![("Origin", "null")],
        vec![
            ("Origin", "http://evil.example"),
            ("Content-Type", "text/plain"),
        ],
        vec![("Origin", "http://localhost:1")],
        vec![("Sec-Fetch-Site", "cross-site")],
        vec![("Sec-Fetch-Site", "same-site"), ("Origin", same.as_str())],
    ] {
        for (method, path) in [
            ("POST", "/api/sessions"),
            ("POST", "/api/sessions/s/start"),
            ("POST", "/api/sessions/s/input"),
            ("POST", "/api/sessions/s/signal"),
            ("DELETE", "/api/sessions/s"),
            ("PUT", "/api/sessions/s"),
        ] {
            let (code, json) = send(method, path, &headers);
            assert_eq!(
                (code, json["error"].clone()),
                refused,
                "{method} {path} {headers:?}"
            );
        }
    }
    assert_eq!(hub.get("/api/sessions/csrf").status, 404);
    assert_eq!(hub.get("/api/sessions/s").status, 200);
    // Reads stay open (no CORS header lets another origin read them).
    let res = hub.request(
        "GET",
        "/api/sessions",
        &[("Origin", "http://evil.example")],
        b"",
    );
    assert_eq!(res.status, 200);
    assert!(res.header("Access-Control-Allow-Origin").is_none());
    // The panel's own requests, a same-origin form under the panel's
    // no-referrer policy (`Origin: null`), and non-browser clients pass.
    assert_eq!(send("POST", "/api/sessions", &[("Origin", &same)]).0, 201);
    assert_eq!(
        hub.request("DELETE", "/api/sessions/csrf", &[("Origin", &same)], b"")
            .status,
        200
    );
    let form = [("Origin", "null"), ("Sec-Fetch-Site", "same-origin")];
    assert_eq!(send("POST", "/api/sessions", &form).0, 201);
    assert_eq!(
        hub.request("DELETE", "/api/sessions/csrf", &[], b"").status,
        200
    );
    assert_eq!(
        send("POST", "/api/sessions", &[("Sec-Fetch-Site", "none")]).0,
        201
    );
}

#[test]
fn reverse_proxy_names_pass_and_rebound_names_do_not() {
    let dir = TempDir::new("hostile-proxy");
    let hub = hub_with(
        &dir,
        json!({"listen": {"allowedHosts": ["hub.example.com"]}, "panel": {"token": "tok"}}),
    );
    let port = hub.addr.port();
    let status = |host: &str, path: &str, extra: &str| -> u16 {
        let raw =
            format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n");
        status_line_code(&exchange_within(hub.addr, raw.as_bytes(), DEADLINE).unwrap())
    };
    // What a TLS proxy on 443 (or 8443) forwards: the browser's Host.
    for host in [
        "hub.example.com",
        "HUB.example.com",
        "hub.example.com:443",
        "hub.example.com:8443",
    ] {
        assert_eq!(status(host, "/api/meta", ""), 200, "{host}");
        assert_eq!(status(host, "/api/sessions?token=tok", ""), 200, "{host}");
    }
    // Rebound or unlisted names, and loopback names with a foreign port.
    for host in [
        "evil.example".to_string(),
        "hub.example.com.evil.example".to_string(),
        "example.com".to_string(),
        format!("127.0.0.1:{}", port.wrapping_add(1)),
        format!("localhost:{}", port.wrapping_add(1)),
    ] {
        assert_eq!(status(&host, "/api/meta", ""), 403, "{host}");
    }
    // The panel socket through the proxy: the browser's Origin matches the
    // forwarded Host; any other page's Origin does not.
    let upgrade = "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
                   Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
    let ws = |host: &str, origin: &str| -> u16 {
        let raw = format!(
            "GET /panel/ws?token=tok HTTP/1.1\r\nHost: {host}\r\nOrigin: {origin}\r\n{upgrade}\
             Connection: Upgrade\r\n\r\n"
        );
        let mut s = TcpStream::connect(hub.addr).unwrap();
        s.set_read_timeout(Some(DEADLINE)).unwrap();
        s.write_all(raw.as_bytes()).unwrap();
        status_line_code(&read_head(&mut s).unwrap())
    };
    assert_eq!(ws("hub.example.com", "https://hub.example.com"), 101);
    assert_eq!(
        ws("hub.example.com:8443", "https://hub.example.com:8443"),
        101
    );
    assert_eq!(ws("hub.example.com", "https://evil.example"), 403);
    assert_eq!(ws("hub.example.com", "http://hub.example.com:8080"), 403);
    assert_eq!(ws("evil.example", "https://evil.example"), 403);
    // A state-changing request through the proxy carries the browser's
    // Origin, which names the forwarded Host.
    let body = json!({"session": "via-proxy"}).to_string();
    let post = |origin: &str| -> u16 {
        let raw = format!(
            "POST /api/sessions?token=tok HTTP/1.1\r\nHost: hub.example.com\r\nOrigin: {origin}\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        status_line_code(&exchange_within(hub.addr, raw.as_bytes(), DEADLINE).unwrap())
    };
    assert_eq!(post("https://evil.example"), 403);
    assert_eq!(post("https://hub.example.com"), 201);
}

// ---------------------------------------------------------------------------
// WebSocket

#[test]
fn worker_routes_check_tokens_and_refuse_browser_origins() {
    let dir = TempDir::new("hostile-wsauth");
    let hub = TestHub::start(dir.path(), &["--panel-token", "panel-tok"]);
    create_with_token_named(&hub, "w", "panel-tok");
    let token = worker_token(&hub.data_dir, "w");
    let host = hub.addr.to_string();
    let same_origin = format!("http://{host}");
    for route in ["events", "confirm"] {
        let good = format!("/agent/w/{route}?token={token}");
        for (path, headers, expected) in [
            (format!("/agent/w/{route}"), vec![], 401),
            (format!("/agent/w/{route}?token="), vec![], 401),
            (
                format!("/agent/w/{route}?token={}", &token[..token.len() - 1]),
                vec![],
                401,
            ),
            (format!("/agent/w/{route}?token={token}x"), vec![], 401),
            (format!("/agent/w/{route}?tok={token}"), vec![], 401),
            (format!("/agent/w/{route}?token=panel-tok"), vec![], 401),
            (
                format!("/agent/w/{route}"),
                vec![("Authorization", format!("Bearer {token}"))],
                401,
            ),
            (
                format!("/agent/w/{route}"),
                vec![("Cookie", format!("simplex_hub_token={token}"))],
                401,
            ),
            (
                good.clone(),
                vec![("Origin", "http://evil.example".to_string())],
                403,
            ),
            (good.clone(), vec![("Origin", "null".to_string())], 403),
            (
                good.clone(),
                vec![("Origin", format!("http://localhost:{}", hub.addr.port()))],
                403,
            ),
            (
                good.clone(),
                vec![("Origin", format!("https://{host}.evil.example"))],
                403,
            ),
            (
                good.clone(),
                vec![("Sec-WebSocket-Version", "8".to_string())],
                400,
            ),
        ] {
            let extra: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let res = if extra.iter().any(|(k, _)| *k == "Sec-WebSocket-Version") {
                // replace the version rather than add a second one
                let raw = upgrade_request(hub.addr, &path, &[])
                    .replace("Sec-WebSocket-Version: 13", "Sec-WebSocket-Version: 8");
                status_line_code(&exchange_within(hub.addr, raw.as_bytes(), DEADLINE).unwrap())
            } else {
                match RawWs::connect(hub.addr, &path, &extra) {
                    Ok(_) => 101,
                    Err(code) => code,
                }
            };
            assert_eq!(res, expected, "{path} {headers:?}");
        }
        // Workers send no Origin; a same-origin client library may.
        assert!(RawWs::connect(hub.addr, &good, &[]).is_ok());
        assert!(RawWs::connect(hub.addr, &good, &[("Origin", &same_origin)]).is_ok());
    }
    // The panel socket refuses the opaque origin too.
    assert_eq!(
        RawWs::connect(hub.addr, "/panel/ws?token=panel-tok", &[("Origin", "null")]).err(),
        Some(403)
    );
}

fn create_with_token_named(hub: &TestHub, id: &str, token: &str) {
    let res = post(
        hub,
        &format!("/api/sessions?token={token}"),
        json!({"session": id}),
    );
    assert_eq!(res.status, 201, "{}", res.text());
}

#[test]
fn invalid_utf8_and_binary_frames_are_refused_per_route() {
    let dir = TempDir::new("hostile-utf8");
    let hub = TestHub::start(dir.path(), &[]);
    create(&hub, "u");
    let baseline = hub.threads();
    let mut healthy = panel(&hub);

    // Worker event socket: invalid UTF-8 closes 1007, even when the bad
    // byte arrives in a continuation frame.
    for frames in [
        vec![frame(true, op::TEXT, b"{\"type\":\"ev\xff\xfe\"}")],
        vec![
            frame(false, op::TEXT, b"{\"a\":\"\xc3"),
            frame(true, op::CONT, b"\x28\"}"),
        ],
    ] {
        let mut ws = RawWs::open(hub.addr, &events_path(&hub, "u"));
        for f in &frames {
            ws.write(f).unwrap();
        }
        let (ended, code) = ws.ends(DEADLINE);
        assert!(ended);
        assert_eq!(code, Some(1007));
    }
    let s = wait_session(&hub, "u", |s| s["connected"] == false);
    assert!(s["stats"]["protocolErrors"].as_u64().unwrap() >= 2);
    // A binary frame is a protocol error; the socket stays up.
    let mut ws = RawWs::open(hub.addr, &events_path(&hub, "u"));
    ws.send(true, op::BINARY, &[0, 1, 2, 255]);
    ws.text(&envelope("u", "w", 1, "status", json!({"after": "binary"})));
    wait_event(&hub, "u", |e| e["data"]["after"] == "binary");
    drop(ws);

    // Panel: invalid UTF-8 ends that connection; binary gets an error.
    let mut bad = panel(&hub);
    bad.send(true, op::BINARY, b"\x00\x01");
    assert_eq!(
        bad.next_text(|v| v["type"] == "error")["error"],
        "binary_not_supported"
    );
    bad.send(true, op::TEXT, b"{\"v\":1,\"type\":\"ping\xff\"}");
    let (ended, _) = bad.ends(DEADLINE);
    assert!(ended, "the panel kept a connection that sent invalid UTF-8");

    // Confirmation socket: invalid UTF-8 or binary: closed, no prompt.
    for payload in [
        (op::TEXT, &b"{\"type\":\"\xff\"}"[..]),
        (op::BINARY, &b"\x01"[..]),
    ] {
        let mut ws = RawWs::open(hub.addr, &confirm_path(&hub, "u"));
        ws.send(true, payload.0, payload.1);
        let (ended, code) = ws.ends(DEADLINE);
        assert!(ended);
        assert!(matches!(code, None | Some(1007) | Some(1008)), "{code:?}");
    }
    assert_eq!(session(&hub, "u")["confirmations"], json!([]));
    assert!(panel_round_trip(&mut healthy) < Duration::from_secs(5));
    drop(healthy);
    assert!(threads_settle(&hub, baseline));
}

#[test]
fn fragmented_messages_work_with_interleaved_control_frames() {
    let dir = TempDir::new("hostile-fragments");
    let hub = TestHub::start(dir.path(), &[]);
    create(&hub, "f");
    // Worker events: one envelope in five fragments, pings in between.
    let mut ws = RawWs::open(hub.addr, &events_path(&hub, "f"));
    let text = envelope("f", "w", 1, "status", json!({"fragmented": "é".repeat(10)}));
    let bytes = text.as_bytes();
    // split inside a multi-byte character on purpose
    let cut = text.find('é').unwrap() + 1;
    let parts = [
        &bytes[..10],
        &bytes[10..cut],
        &bytes[cut..cut + 7],
        &bytes[cut + 7..cut + 20],
        &bytes[cut + 20..],
    ];
    for (i, part) in parts.iter().enumerate() {
        let opcode = if i == 0 { op::TEXT } else { op::CONT };
        ws.send(i == parts.len() - 1, opcode, part);
        if i % 2 == 0 {
            ws.send(true, op::PING, format!("p{i}").as_bytes());
        }
    }
    let e = wait_event(&hub, "f", |e| e["sequence"] == 1);
    assert_eq!(e["data"]["fragmented"], "é".repeat(10));
    assert_eq!(e["raw"]["bytes"], text.len());
    // every ping got its pong, in order
    let mut pongs = Vec::new();
    while pongs.len() < 3 {
        let (_, opcode, payload) = ws.read_frame().unwrap();
        if opcode == op::PONG {
            pongs.push(String::from_utf8(payload).unwrap());
        }
    }
    assert_eq!(pongs, ["p0", "p2", "p4"]);

    // Panel: a fragmented ping message with a ping frame in the middle.
    let mut p = panel(&hub);
    p.send(false, op::TEXT, b"{\"v\":1,");
    p.send(true, op::PING, b"mid");
    p.send(false, op::CONT, b"\"type\":");
    p.send(true, op::CONT, b"\"ping\"}");
    assert_eq!(p.next_pong(), b"mid");
    assert!(p.next_text(|v| v["type"] == "pong")["at"].is_string());

    // Confirmation: a fragmented request registers its prompt.
    send_text_ready(&mut ws, "f");
    let mut c = RawWs::open(hub.addr, &confirm_path(&hub, "f"));
    let request = confirmation_request("f", "w", "cf-frag", json!({"command": "ls"}));
    let (a, b) = request.as_bytes().split_at(request.len() / 2);
    c.send(false, op::TEXT, a);
    c.send(true, op::PING, b"");
    c.send(true, op::CONT, b);
    let s = wait_session(&hub, "f", |s| {
        !s["confirmations"].as_array().unwrap().is_empty()
    });
    assert_eq!(s["confirmations"][0]["confirmation_id"], "cf-frag");
    assert_eq!(s["confirmations"][0]["state"], "awaiting-decision");
}

#[test]
fn panel_messages_trickled_byte_by_byte_are_answered_with_bounded_threads() {
    let dir = TempDir::new("hostile-panel-trickle");
    let hub = TestHub::start(dir.path(), &[]);
    let baseline = hub.threads();
    let mut panels: Vec<RawWs> = (0..20).map(|_| panel(&hub)).collect();
    let ping = frame(true, op::TEXT, br#"{"v":1,"type":"ping"}"#);
    // One byte to each panel in turn: every socket wakes the poller for
    // every byte, with a partial frame pending in between.
    for i in 0..ping.len() {
        for p in &mut panels {
            p.write(&ping[i..i + 1]).unwrap();
        }
        // at most a reader and a writer per panel, plus the poll thread
        assert!(hub.threads() <= baseline + 2 * panels.len() + 1);
    }
    for p in &mut panels {
        assert!(p.next_text(|v| v["type"] == "pong")["at"].is_string());
    }
    // Idle again: only the poll thread remains for all twenty.
    assert!(threads_settle(&hub, baseline + 1));
    drop(panels);
    assert!(threads_settle(&hub, baseline));
}

fn send_text_ready(ws: &mut RawWs, session: &str) {
    ws.text(&envelope(session, "w", 2, "ready", json!({})));
}

#[test]
fn frame_protocol_violations_end_only_that_socket() {
    let dir = TempDir::new("hostile-violations");
    let hub = TestHub::start(dir.path(), &[]);
    create(&hub, "v");
    let baseline = hub.threads();
    let mut healthy = panel(&hub);
    let violations: Vec<(&str, Vec<u8>)> = vec![
        ("continuation without a start", frame(true, op::CONT, b"x")),
        ("fragmented ping", frame(false, op::PING, b"x")),
        (
            "control frame over 125 bytes",
            frame(true, op::PING, &[b'p'; 126]),
        ),
        ("reserved opcode", frame(true, 0x3, b"x")),
        ("reserved control opcode", frame(true, 0xB, b"x")),
        (
            "RSV1 without an extension",
            raw_frame(0x80 | 0x40 | op::TEXT, b"{}", true),
        ),
        (
            "unmasked client frame",
            raw_frame(0x80 | op::TEXT, b"{}", false),
        ),
        (
            "close with a 1-byte payload",
            frame(true, op::CLOSE, b"\x03"),
        ),
        ("new message inside a fragmented one", {
            let mut v = frame(false, op::TEXT, b"{");
            v.extend(frame(true, op::TEXT, b"{}"));
            v
        }),
    ];
    for (what, bytes) in &violations {
        for path in [
            events_path(&hub, "v"),
            confirm_path(&hub, "v"),
            "/panel/ws".to_string(),
        ] {
            let mut ws = RawWs::open(hub.addr, &path);
            ws.write(bytes).unwrap();
            let (ended, _) = ws.ends(DEADLINE);
            assert!(ended, "{what} on {path}: the socket stayed open");
        }
    }
    assert!(panel_round_trip(&mut healthy) < Duration::from_secs(5));
    wait_session(&hub, "v", |s| s["connected"] == false);
    drop(healthy);
    assert!(
        threads_settle(&hub, baseline),
        "threads {} > {baseline}",
        hub.threads()
    );
}

#[test]
fn messages_over_every_limit_are_refused_without_being_buffered() {
    let _heavy = heavy();
    let dir = TempDir::new("hostile-limits");
    let max = 64 * 1024;
    let hub = hub_with(&dir, json!({"limits": {"maxMessageBytes": max}}));
    create(&hub, "m");
    let dir2 = TempDir::new("hostile-limits-confirm");
    let big_limit = hub_with(&dir2, json!({}));
    create(&big_limit, "c");
    let rss_before = hub.rss_kib().max(big_limit.rss_kib());

    // Worker events (limits.maxMessageBytes = 64 KiB): a frame announcing
    // 2^62 bytes is refused from its header; so is a message whose small
    // fragments add up past the limit; one just under the limit passes.
    let mut ws = RawWs::open(hub.addr, &events_path(&hub, "m"));
    ws.write(&announce(op::TEXT, 1 << 62)).unwrap();
    assert_eq!(ws.ends(DEADLINE), (true, Some(1009)));
    let mut ws = RawWs::open(hub.addr, &events_path(&hub, "m"));
    for i in 0..16 {
        let part = vec![b' '; 8 * 1024];
        let opcode = if i == 0 { op::TEXT } else { op::CONT };
        if ws.write(&frame(false, opcode, &part)).is_err() {
            break;
        }
    }
    // (bytes the hub never read may turn its close into a reset that
    // overtakes the close frame, so only the end itself is certain)
    let (ended, code) = ws.ends(DEADLINE);
    assert!(ended && matches!(code, None | Some(1009)), "{code:?}");
    let mut ws = RawWs::open(hub.addr, &events_path(&hub, "m"));
    let fits = envelope("m", "w", 1, "status", json!({"pad": "f".repeat(max - 300)}));
    assert!(fits.len() < max);
    ws.text(&fits);
    wait_event(&hub, "m", |e| e["sequence"] == 1);

    // Panel (4 MiB client messages): announced and real overruns.
    let mut p = panel(&hub);
    p.write(&announce(op::TEXT, 1 << 62)).unwrap();
    let (ended, _) = p.ends(DEADLINE);
    assert!(ended);
    let mut p = panel(&hub);
    let mib = vec![b' '; 1024 * 1024];
    for i in 0..5 {
        let opcode = if i == 0 { op::TEXT } else { op::CONT };
        if p.write(&frame(false, opcode, &mib)).is_err() {
            break;
        }
    }
    let (ended, _) = p.ends(DEADLINE);
    assert!(ended, "a 5 MiB panel message was accepted");

    // Confirmations: at most 1 MiB even with the default 32 MiB
    // maxMessageBytes; a request just under that is registered.
    let mut ws = RawWs::open(big_limit.addr, &events_path(&big_limit, "c"));
    ws.text(&envelope("c", "w", 1, "ready", json!({})));
    wait_session(&big_limit, "c", |s| s["identity"]["state"] == "live");
    let mut c = RawWs::open(big_limit.addr, &confirm_path(&big_limit, "c"));
    let over = confirmation_request("c", "w", "big", json!({"pad": "o".repeat(1024 * 1024)}));
    let _ = c.write(&frame(true, op::TEXT, over.as_bytes()));
    let (ended, code) = c.ends(DEADLINE);
    assert!(ended && matches!(code, None | Some(1008)), "{code:?}");
    let mut c = RawWs::open(big_limit.addr, &confirm_path(&big_limit, "c"));
    c.write(&announce(op::TEXT, 1 << 40)).unwrap();
    assert_eq!(c.ends(DEADLINE), (true, Some(1008)));
    let mut c = RawWs::open(big_limit.addr, &confirm_path(&big_limit, "c"));
    let under = confirmation_request("c", "w", "fits", json!({"pad": "u".repeat(1000 * 1024)}));
    c.text(&under);
    let s = wait_session(&big_limit, "c", |s| {
        s["confirmations"].as_array().unwrap().len() == 1
    });
    assert_eq!(s["confirmations"][0]["confirmation_id"], "fits");
    assert_eq!(s["confirmations"][0]["arguments_truncated"], true);

    // Ceiling: nothing above was buffered beyond one limit-sized message
    // (64 KiB, 4 MiB panel, 1 MiB confirmation) and its parsed copy, so
    // each hub grows by a few MiB; 2 x 4 MiB + 16 MiB allows for that.
    let grown = hub
        .rss_kib()
        .max(big_limit.rss_kib())
        .saturating_sub(rss_before);
    assert!(grown < 24 * MIB, "RSS grew by {grown} KiB");
    eprintln!(
        "over-limit frames: RSS grew {grown} KiB (ceiling {} KiB)",
        24 * MIB
    );
}

#[test]
fn ping_floods_are_answered_and_others_keep_being_served() {
    let _heavy = heavy();
    let dir = TempDir::new("hostile-pings");
    // idleTimeoutMs is also the write timeout of upgraded sockets.
    let hub = hub_with(&dir, json!({"http": {"idleTimeoutMs": 2000}}));
    create(&hub, "p");
    create(&hub, "q");
    let baseline = hub.threads();
    let rss_before = hub.rss_kib();
    let mut healthy = panel(&hub);
    let mut healthy_worker = RawWs::open(hub.addr, &events_path(&hub, "q"));
    let flood = 20_000usize;

    // Reading flooders (a panel and a worker socket): every ping carries
    // 125 bytes; the pongs are read by a second thread.
    let mut flooders = Vec::new();
    for path in ["/panel/ws".to_string(), events_path(&hub, "p")] {
        let ws = RawWs::open(hub.addr, &path);
        let mut reader = RawWs {
            s: ws.s.try_clone().unwrap(),
        };
        let mut writer = ws.s.try_clone().unwrap();
        let counter = thread::spawn(move || {
            let mut pongs = 0usize;
            reader
                .s
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            while let Ok((_, opcode, _)) = reader.read_frame() {
                if opcode == op::PONG {
                    pongs += 1;
                    if pongs == flood {
                        break;
                    }
                }
            }
            pongs
        });
        let ping = frame(true, op::PING, &[b'p'; 125]);
        let sender = thread::spawn(move || {
            let batch: Vec<u8> = ping
                .iter()
                .copied()
                .cycle()
                .take(ping.len() * 100)
                .collect();
            for _ in 0..flood / 100 {
                writer.write_all(&batch).unwrap();
            }
        });
        flooders.push((ws, sender, counter));
    }
    // Others keep being served while the floods run.
    let mut slowest = Duration::ZERO;
    let mut rounds = 0;
    while flooders.iter().any(|(_, sender, _)| !sender.is_finished()) || rounds < 5 {
        slowest = slowest.max(panel_round_trip(&mut healthy));
        rounds += 1;
        healthy_worker.text(&envelope("q", "w", rounds, "status", json!({})));
        assert!(answers_within(&hub, Duration::from_secs(5)));
        assert!(rounds < 10_000);
    }
    wait_session(&hub, "q", |s| s["stats"]["events"] == rounds);
    for (mut ws, sender, counter) in flooders {
        sender.join().unwrap();
        let pongs = counter.join().unwrap();
        // tungstenite answers every ping it reads unless a newer one
        // replaces a pong not yet written: at least one, at most all.
        assert!((1..=flood).contains(&pongs), "{pongs} pongs");
        // The flooded socket still works.
        ws.s.set_read_timeout(Some(DEADLINE)).unwrap();
        ws.send(true, op::PING, b"last");
        let end = Instant::now() + DEADLINE;
        loop {
            assert!(Instant::now() < end);
            let (_, opcode, payload) = ws.read_frame().unwrap();
            if opcode == op::PONG && payload == b"last" {
                break;
            }
        }
        eprintln!("ping flood: {pongs} pongs for {flood} pings");
    }

    // A flooder that never reads: the hub's pong writes back up, that one
    // socket stops being read, and its writes time out after idleTimeoutMs;
    // nobody else notices.
    let ws = RawWs::open(hub.addr, "/panel/ws");
    let mut writer = ws.s.try_clone().unwrap();
    writer
        .set_write_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let sender = thread::spawn(move || {
        let ping = frame(true, op::PING, &[b'n'; 125]);
        let batch: Vec<u8> = ping
            .iter()
            .copied()
            .cycle()
            .take(ping.len() * 100)
            .collect();
        let mut sent = 0usize;
        while sent < 2_000_000 && writer.write_all(&batch).is_ok() {
            sent += 100;
        }
        sent
    });
    while !sender.is_finished() {
        slowest = slowest.max(panel_round_trip(&mut healthy));
        thread::sleep(Duration::from_millis(50));
    }
    let sent = sender.join().unwrap();
    assert!(
        sent < 2_000_000,
        "the hub read {sent} pings without writing a pong"
    );
    let mut stuck = ws;
    // It ends: its blocked pong write fails after the write timeout.
    let (ended, _) = stuck.ends(DEADLINE);
    assert!(ended, "a non-reading ping flooder was never cut");
    assert!(
        slowest < Duration::from_secs(5),
        "slowest round trip {slowest:?}"
    );
    drop(healthy);
    drop(healthy_worker);
    assert!(
        threads_settle(&hub, baseline),
        "threads {} > {baseline}",
        hub.threads()
    );
    // Ceiling: a pending pong is one frame (127 bytes) per socket and the
    // reader buffers at most one frame, so floods add nothing but socket
    // buffers; the allocator allowance covers the threads involved.
    let grown = peak_rss_kib(&hub).saturating_sub(rss_before);
    assert!(
        grown < ALLOCATOR_SLACK_KIB,
        "RSS peaked {grown} KiB above the start"
    );
    eprintln!(
        "ping floods: slowest healthy round trip {slowest:?}; non-reader cut after {sent} pings; \
         RSS peak +{grown} KiB (ceiling {ALLOCATOR_SLACK_KIB} KiB)"
    );
}

#[test]
fn a_worker_that_never_reads_does_not_block_other_sessions() {
    let _heavy = heavy();
    let dir = TempDir::new("hostile-nonreader");
    // The write timeout of upgraded sockets is http.idleTimeoutMs.
    let write_timeout = Duration::from_millis(5000);
    let hub = hub_with(&dir, json!({"http": {"idleTimeoutMs": 5000}}));
    create(&hub, "stuck");
    create(&hub, "fine");
    let baseline = hub.threads();
    let mut stuck = RawWs::open(hub.addr, &events_path(&hub, "stuck"));
    stuck.text(&envelope("stuck", "w", 1, "ready", json!({})));
    let mut fine = RawWs::open(hub.addr, &events_path(&hub, "fine"));
    fine.text(&envelope("fine", "w", 1, "ready", json!({})));
    wait_session(&hub, "stuck", |s| s["identity"]["state"] == "live");
    wait_session(&hub, "fine", |s| s["identity"]["state"] == "live");
    let mut healthy = panel(&hub);

    // Inputs of 256 KiB to the worker that never reads, until one fails.
    let addr = hub.addr;
    let filler = thread::spawn(move || {
        let content = "z".repeat(256 * 1024);
        let mut outcomes = Vec::new();
        for i in 0..400 {
            let body = json!({"request_id": format!("r{i}"),
                "content": [{"type": "text", "modality": "text", "raw": content}]})
            .to_string();
            let raw = format!(
                "POST /api/sessions/stuck/input HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
            let asked = Instant::now();
            let reply = exchange_within(addr, raw.as_bytes(), DEADLINE).expect("input answered");
            let code = status_line_code(&reply);
            outcomes.push((code, asked.elapsed()));
            if code != 202 {
                break;
            }
        }
        outcomes
    });
    // Meanwhile the other session's inputs, events and the panel are
    // served promptly.
    let mut slowest = Duration::ZERO;
    let mut i = 0;
    while !filler.is_finished() || i < 3 {
        i += 1;
        assert!(i < 2000, "the filler never finished");
        let asked = Instant::now();
        let res = post(
            &hub,
            "/api/sessions/fine/input",
            json!({"request_id": format!("ok{i}"), "content": [{"type": "text", "modality": "text", "raw": "hi"}]}),
        );
        assert_eq!(res.status, 202, "{}", res.text());
        let id = format!("ok{i}");
        fine.next_text(|v| v["type"] == "payload" && v["data"]["request_id"] == id.as_str());
        fine.text(&envelope("fine", "w", 1 + i, "status", json!({"i": i})));
        slowest = slowest.max(asked.elapsed());
        slowest = slowest.max(panel_round_trip(&mut healthy));
        thread::sleep(Duration::from_millis(50));
    }
    let outcomes = filler.join().unwrap();
    let (last_code, last_took) = *outcomes.last().unwrap();
    assert_eq!(last_code, 409, "{outcomes:?}");
    assert!(
        // (SO_SNDTIMEO bounds each send(2): a partial send and then a
        // timed-out one make at most twice the timeout)
        last_took < 2 * write_timeout + Duration::from_secs(5),
        "the failing write took {last_took:?}"
    );
    // (under the 5 s write timeout: nobody waited behind the stuck write)
    assert!(
        slowest < Duration::from_secs(3),
        "other sessions waited {slowest:?}"
    );
    // The unwritable socket is ended, so the session is not shown as
    // connected while every send to it would fail.
    wait_session(&hub, "stuck", |s| s["connected"] == false);
    let s = session(&hub, "stuck");
    assert!(s["requests"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["state"] != "sent"));
    drop(stuck);
    drop(fine);
    drop(healthy);
    assert!(
        threads_settle(&hub, baseline),
        "threads {} > {baseline}",
        hub.threads()
    );
    eprintln!(
        "non-reading worker: {} inputs before the write failed after {last_took:?}; \
         other sessions' slowest round trip {slowest:?}",
        outcomes.len() - 1
    );
}

#[test]
fn a_peer_that_never_closes_is_cut_by_the_hub() {
    let dir = TempDir::new("hostile-noclose");
    let hub = hub_with(&dir, json!({"limits": {"maxMessageBytes": 4096}}));
    create(&hub, "n");
    let baseline = hub.threads();
    // Each peer starts or provokes a close and then neither answers nor
    // closes its TCP side; the hub must end the connection by itself.
    let mut ws = RawWs::open(hub.addr, &events_path(&hub, "n"));
    ws.send(true, op::CLOSE, &1000u16.to_be_bytes());
    assert!(
        ws.ends(DEADLINE).0,
        "worker socket kept after the peer's close"
    );
    let mut p = panel(&hub);
    p.send(true, op::CLOSE, &1000u16.to_be_bytes());
    assert!(p.ends(DEADLINE).0, "panel kept after the peer's close");
    let mut big = RawWs::open(hub.addr, &events_path(&hub, "n"));
    big.write(&announce(op::TEXT, 5000)).unwrap();
    assert_eq!(big.ends(DEADLINE), (true, Some(1009)));
    let mut old = RawWs::open(hub.addr, &events_path(&hub, "n"));
    let mut new = RawWs::open(hub.addr, &events_path(&hub, "n"));
    assert_eq!(old.ends(DEADLINE), (true, Some(4001)));
    // A confirmation answered by the operator whose worker never closes:
    // cut after the 3 s close grace.
    new.text(&envelope("n", "w", 1, "ready", json!({})));
    wait_session(&hub, "n", |s| s["identity"]["state"] == "live");
    let mut c = RawWs::open(hub.addr, &confirm_path(&hub, "n"));
    c.text(&confirmation_request("n", "w", "cf", json!({})));
    wait_session(&hub, "n", |s| {
        s["confirmations"][0]["state"] == "awaiting-decision"
    });
    let res = post(
        &hub,
        "/api/sessions/n/confirmations/cf",
        json!({"decision": "approved"}),
    );
    assert_eq!(res.status, 200, "{}", res.text());
    let decided = Instant::now();
    let answer = c.next_text(|v| v["type"] == "confirmation_response");
    assert_eq!(answer["data"]["decision"], "approved");
    assert!(
        c.ends(DEADLINE).0,
        "confirmation socket kept after its grace"
    );
    assert!(
        decided.elapsed() >= Duration::from_millis(2500),
        "{:?}",
        decided.elapsed()
    );
    wait_session(&hub, "n", |s| s["confirmations"] == json!([]));
    drop(new);
    assert!(
        threads_settle(&hub, baseline),
        "threads {} > {baseline}",
        hub.threads()
    );
}

#[test]
fn a_peer_that_vanishes_mid_frame_frees_its_threads() {
    let dir = TempDir::new("hostile-vanish");
    let hub = TestHub::start(dir.path(), &[]);
    create(&hub, "g");
    let baseline = hub.threads();
    let mut healthy = panel(&hub);
    let with_healthy = baseline + 2; // the poll thread, at most its writer
    for round in 0..3 {
        for path in [
            events_path(&hub, "g"),
            confirm_path(&hub, "g"),
            "/panel/ws".to_string(),
        ] {
            let mut ws = RawWs::open(hub.addr, &path);
            // a header announcing 1000 bytes, then 10 of them, then gone
            let mut half = frame(true, op::TEXT, &[b'a'; 1000]);
            half.truncate(8 + 10);
            ws.write(&half).unwrap();
            if round == 1 {
                ws.s.shutdown(Shutdown::Write).unwrap();
            }
            drop(ws);
        }
        // half an upgrade request, then gone
        let mut s = TcpStream::connect(hub.addr).unwrap();
        let up = upgrade_request(hub.addr, &events_path(&hub, "g"), &[]);
        s.write_all(&up.as_bytes()[..up.len() / 2]).unwrap();
        drop(s);
    }
    assert!(
        threads_settle(&hub, with_healthy),
        "threads {} > {with_healthy}",
        hub.threads()
    );
    assert_eq!(session(&hub, "g")["connected"], false);
    assert!(panel_round_trip(&mut healthy) < Duration::from_secs(5));
}

// ---------------------------------------------------------------------------
// Worker side

#[test]
fn event_floods_far_above_the_transcript_limits_keep_memory_bounded() {
    let _heavy = heavy();
    let dir = TempDir::new("hostile-flood");
    let transcript_bytes = 1024 * 1024u64;
    let max_message = 256 * 1024u64;
    let hub = hub_with(
        &dir,
        json!({"limits": {"transcriptBytes": transcript_bytes, "maxMessageBytes": max_message}}),
    );
    create(&hub, "flood");
    let rss_before = hub.rss_kib();
    // A panel subscribed to the flooded session, reading everything.
    let mut watcher = panel(&hub);
    watcher.text(r#"{"v":1,"type":"subscribe","session":"flood"}"#);
    watcher.next_text(|v| v["type"] == "subscribed");
    let watcher_ctl = watcher.s.try_clone().unwrap();
    let watcher_thread = thread::spawn(move || {
        let mut events = 0u64;
        watcher.s.set_read_timeout(None).unwrap();
        while let Ok((_, opcode, payload)) = watcher.read_frame() {
            let head = &payload[..payload.len().min(64)];
            if opcode == op::TEXT && head.windows(14).any(|w| w == b"\"type\":\"event\"") {
                events += 1;
            }
        }
        events
    });
    let mut ws = RawWs::open(hub.addr, &events_path(&hub, "flood"));
    ws.s.set_write_timeout(Some(Duration::from_secs(60)))
        .unwrap();

    // Phase 1: 200k small events, with repeated and jumping sequences.
    let small = 200_000u64;
    let (mut duplicates, mut gaps, mut seq) = (0u64, 0u64, 0u64);
    let mut batch = Vec::with_capacity(1 << 20);
    for i in 1..=small {
        if i % 10_000 == 0 {
            duplicates += 1; // repeat the previous sequence
        } else if i % 10_000 == 5_000 {
            gaps += 1;
            seq += 1_000;
        } else {
            seq += 1;
        }
        let text = envelope("flood", "w", seq, "status", json!({"i": i}));
        batch.extend_from_slice(&frame(true, op::TEXT, text.as_bytes()));
        if batch.len() >= 1 << 20 {
            ws.write(&batch).unwrap();
            batch.clear();
        }
    }
    ws.write(&batch).unwrap();
    let flood_deadline = Duration::from_secs(180);
    let mut last = Value::Null;
    assert!(
        wait_until(flood_deadline, || {
            last = session(&hub, "flood");
            last["stats"]["events"] == small
        }),
        "small flood not ingested: {}",
        last["stats"]
    );
    assert_eq!(last["stats"]["duplicates"], duplicates);
    assert_eq!(last["stats"]["gaps"], gaps);

    // Phase 2: 2000 events of 60 KiB (117 MiB, over 100 times the ring).
    let big = 2_000u64;
    let pad = "b".repeat(60 * 1024);
    for i in 1..=big {
        let text = envelope(
            "flood",
            "w",
            seq + i,
            "model_response",
            json!({"pad": pad, "i": i}),
        );
        ws.write(&frame(true, op::TEXT, text.as_bytes())).unwrap();
    }
    assert!(
        wait_until(flood_deadline, || {
            last = session(&hub, "flood");
            last["stats"]["events"] == small + big
        }),
        "big flood not ingested: {}",
        last["stats"]
    );
    let page = hub.get("/api/sessions/flood/events").json();
    let events = page["events"].as_array().unwrap();
    let retained: u64 = events.iter().map(|e| e.to_string().len() as u64).sum();
    assert!(retained <= transcript_bytes, "{retained} bytes retained");
    assert!(events.len() <= 5000);
    assert_eq!(page["latest"], small + big);
    assert!(answers_within(&hub, Duration::from_secs(5)));
    let peak = peak_rss_kib(&hub);
    drop(ws);
    let _ = watcher_ctl.shutdown(Shutdown::Both);
    let seen = watcher_thread.join().unwrap();

    // Ceiling, from the configured limits: the transcript ring
    // (transcriptBytes) plus its per-entry bookkeeping (5000 entries);
    // the events.jsonl writer's 1 MiB pending budget; the socket reader's
    // buffer and one message in flight with its parsed and serialized
    // copies (4 x maxMessageBytes); the watching panel's 4 MiB outbound
    // budget; plus the allocator allowance. Unbounded retention would be
    // the 117 MiB sent in phase 2 alone.
    let ceiling = rss_before
        + transcript_bytes / 1024
        + 5000 * 256 / 1024
        + MIB
        + 4 * max_message / 1024
        + 4 * MIB
        + ALLOCATOR_SLACK_KIB;
    assert!(
        peak <= ceiling,
        "peak RSS {peak} KiB over the ceiling {ceiling} KiB (start {rss_before} KiB)"
    );
    eprintln!(
        "event flood: {} events, peak RSS {peak} KiB (start {rss_before} KiB, ceiling {ceiling} KiB); \
         the watching panel saw {seen} events",
        small + big
    );
}

#[test]
fn a_confirmation_whose_worker_never_identifies_is_denied_after_the_hold() {
    let dir = TempDir::new("hostile-hold");
    let hold = Duration::from_millis(1500);
    let hub = hub_with(&dir, json!({"limits": {"confirmIdentityHoldMs": 1500}}));
    create(&hub, "h");
    // (no event connection at all: worker_runs::a_held_prompt_is_denied_...)
    // An event connection that is open but never sends an envelope, twice
    // on the same connection.
    let silent = RawWs::open(hub.addr, &events_path(&hub, "h"));
    wait_session(&hub, "h", |s| s["connected"] == true);
    for round in 0..2 {
        let cid = format!("held-{round}");
        let mut c = RawWs::open(hub.addr, &confirm_path(&hub, "h"));
        let asked = Instant::now();
        c.text(&confirmation_request(
            "h",
            "w",
            &cid,
            json!({"command": "rm -rf /"}),
        ));
        // While held, an operator cannot approve it.
        let s = wait_session(&hub, "h", |s| {
            !s["confirmations"].as_array().unwrap().is_empty()
        });
        assert_eq!(s["confirmations"][0]["state"], "awaiting-identity");
        let res = post(
            &hub,
            &format!("/api/sessions/h/confirmations/{cid}"),
            json!({"decision": "approved"}),
        );
        assert_eq!(
            (res.status, res.json()["error"].clone()),
            (409, json!("confirmation_rejected"))
        );
        let answer = c.next_text(|v| v["type"] == "confirmation_response");
        let took = asked.elapsed();
        assert_eq!(answer["data"]["decision"], "denied");
        assert!(
            answer["data"]["reason"]
                .as_str()
                .unwrap()
                .contains("not verified"),
            "{answer}"
        );
        assert!(
            took >= hold - Duration::from_millis(100),
            "denied after {took:?}"
        );
        assert!(
            took < hold + Duration::from_secs(5),
            "denied only after {took:?}"
        );
        c.send(true, op::CLOSE, &1000u16.to_be_bytes());
        wait_session(&hub, "h", |s| s["confirmations"] == json!([]));
        assert_eq!(session(&hub, "h")["identity"]["state"], "unknown");
    }
    drop(silent);
    wait_session(&hub, "h", |s| s["connected"] == false);
}

// ---------------------------------------------------------------------------
// Process side (the `command` launcher runs /bin/sh scripts)

fn shell_hub(dir: &TempDir, script: &str) -> TestHub {
    hub_with(
        dir,
        json!({
            "launcher": {"kind": "command", "command": ["/bin/sh", "-c", script]},
            "worker": {"stopTimeoutMs": 1500, "sigtermGraceMs": 1000, "sigkillGraceMs": 3000},
        }),
    )
}

fn create_shell_session(hub: &TestHub, id: &str) {
    let res = post(
        hub,
        "/api/sessions",
        json!({"session": id, "spec": {"provider": "deepseek"}}),
    );
    assert_eq!(res.status, 201, "{}", res.text());
}

fn action(hub: &TestHub, id: &str, what: &str) -> Value {
    hub.request("POST", &format!("/api/sessions/{id}/{what}"), &[], b"")
        .json()
}

fn logs_text(hub: &TestHub, id: &str) -> String {
    hub.get(&format!("/api/sessions/{id}/logs")).text()
}

#[test]
fn a_100_mib_line_is_one_truncated_record_and_memory_stays_bounded() {
    let _heavy = heavy();
    let dir = TempDir::new("hostile-100mib");
    let hub = shell_hub(
        &dir,
        "head -c 104857600 /dev/zero | tr '\\000' a; echo; printf 'bad \\377\\376 bytes\\n'; \
         echo after; exec sleep 3600",
    );
    create_shell_session(&hub, "b");
    let rss_before = hub.rss_kib();
    assert_eq!(action(&hub, "b", "start")["ok"], true);
    assert!(
        wait_until(Duration::from_secs(120), || logs_text(&hub, "b")
            .contains("after")),
        "{}",
        logs_text(&hub, "b")
    );
    let logs = hub.get("/api/sessions/b/logs").json();
    let texts: Vec<String> = logs["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["text"].as_str().unwrap().to_string())
        .collect();
    let truncated: Vec<&String> = texts
        .iter()
        .filter(|t| t.contains("[hub: truncated"))
        .collect();
    assert_eq!(truncated.len(), 1, "{} lines", texts.len());
    assert!(truncated[0].len() <= 64 * 1024 + 64);
    assert!(
        texts.contains(&"bad \u{FFFD}\u{FFFD} bytes".to_string()),
        "{texts:?}"
    );
    let p = session(&hub, "b")["process"].clone();
    assert!(p["log_truncated_bytes"].as_u64().unwrap() >= 100 * 1024 * 1024 - 64 * 1024);
    let log_file = hub.data_dir.join("sessions/b/logs/worker.log");
    assert!(std::fs::metadata(&log_file).unwrap().len() < 2 * 1024 * 1024);
    // Ceiling: one line buffer of 64 KiB per pipe, the 256 KiB log ring,
    // the worker.log writer's 1 MiB budget and the reader's read buffer,
    // plus the allocator allowance. Buffering the line would be 100 MiB.
    let peak = peak_rss_kib(&hub);
    let ceiling = rss_before + 2 * 64 + 256 + MIB + ALLOCATOR_SLACK_KIB / 2;
    assert!(peak <= ceiling, "peak RSS {peak} KiB over {ceiling} KiB");
    eprintln!("100 MiB line: peak RSS {peak} KiB (start {rss_before}, ceiling {ceiling})");
    assert_eq!(action(&hub, "b", "force-kill")["ok"], true);
}

#[test]
fn a_worker_that_closes_its_output_but_keeps_running_can_still_be_stopped() {
    let dir = TempDir::new("hostile-closedout");
    let hub = shell_hub(&dir, "echo hello; exec >&- 2>&-; exec sleep 3600");
    create_shell_session(&hub, "c");
    let baseline = hub.threads();
    let started = action(&hub, "c", "start");
    assert_eq!(started["ok"], true, "{started}");
    let pid = started["pid"].as_u64().unwrap() as u32;
    assert!(wait_until(DEADLINE, || logs_text(&hub, "c").contains("hello")));
    // Both pipes reached EOF: their readers are gone while it runs.
    assert!(wait_until(DEADLINE, || threads_named(&hub, "worker-std") == 0));
    assert_eq!(session(&hub, "c")["process"]["state"], "running");
    let stopped = action(&hub, "c", "stop");
    assert_eq!(stopped["ok"], true, "{stopped}");
    let p = wait_session(&hub, "c", |s| s["process"]["state"] != "stopping")["process"].clone();
    assert_eq!(p["signal"], 15, "{p}");
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}/cmdline")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map_or(true, |s| s.contains(") Z"))
    );
    assert!(threads_settle(&hub, baseline));
}

#[test]
fn children_holding_the_pipes_open_do_not_leak_threads() {
    let dir = TempDir::new("hostile-orphans");
    let hub = shell_hub(&dir, "sleep 3600 & echo child $!; exit 0");
    create_shell_session(&hub, "o");
    let baseline = hub.threads();
    let mut children = Vec::new();
    for round in 0..3 {
        let started = action(&hub, "o", "start");
        assert_eq!(started["ok"], true, "round {round}: {started}");
        // The exit is recorded although the pipes are still open...
        let p = wait_session(&hub, "o", |s| s["process"]["state"] == "exited")["process"].clone();
        assert_eq!(p["exit_code"], 0);
        // ...and the pipe readers give up 1 s later: no thread is left.
        assert!(wait_until(DEADLINE, || threads_named(&hub, "worker-std") == 0));
        assert!(
            threads_settle(&hub, baseline),
            "round {round}: threads {} > {baseline}",
            hub.threads()
        );
        let logs = logs_text(&hub, "o");
        let child: u32 = logs
            .rsplit("child ")
            .next()
            .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("no child pid in {logs}"));
        children.push(child);
    }
    // The grandchildren are still alive and still hold the pipes.
    for child in &children {
        assert!(std::path::Path::new(&format!("/proc/{child}")).exists());
        signal(*child, libc::SIGKILL);
    }
    assert!(answers_within(&hub, Duration::from_secs(5)));
}

#[test]
fn a_worker_that_exits_during_spawn_is_recorded_and_can_start_again() {
    let dir = TempDir::new("hostile-instant-exit");
    let hub = shell_hub(&dir, "exit 7");
    create_shell_session(&hub, "x");
    let baseline = hub.threads();
    let mut pids = Vec::new();
    for round in 0..8 {
        let started = action(&hub, "x", "start");
        assert_eq!(started["ok"], true, "round {round}: {started}");
        pids.push(started["pid"].as_u64().unwrap());
        let p = wait_session(&hub, "x", |s| {
            matches!(s["process"]["state"].as_str(), Some("exited" | "failed"))
        })["process"]
            .clone();
        assert_eq!(p["exit_code"], 7, "{p}");
        assert_eq!(p["state"], "failed");
    }
    pids.dedup();
    assert_eq!(pids.len(), 8, "a start reused a record: {pids:?}");
    assert!(
        threads_settle(&hub, baseline),
        "threads {} > {baseline}",
        hub.threads()
    );
}

// ---------------------------------------------------------------------------
// Storage

#[test]
fn a_read_only_sessions_directory_fails_creation_cleanly_and_loses_nothing() {
    let dir = TempDir::new("hostile-readonly");
    let mut hub = TestHub::start(dir.path(), &[]);
    create(&hub, "kept");
    let before = hub.get("/api/sessions").json();
    let mut undo = Undo(Vec::new());
    if !make_read_only(&dir.path().join("sessions"), &mut undo) {
        eprintln!("skipped: root here may not mount");
        return;
    }
    let res = post(&hub, "/api/sessions", json!({"session": "new"}));
    assert_eq!(
        (res.status, res.json()["error"].clone()),
        (500, json!("storage_error")),
        "{}",
        res.text()
    );
    assert!(res.json()["message"]
        .as_str()
        .unwrap()
        .contains("cannot create"));
    // The panel's create fails the same way.
    let mut p = panel(&hub);
    p.text(r#"{"v":1,"type":"create_session","session":"new2"}"#);
    assert_eq!(
        p.next_text(|v| v["type"] == "error")["error"],
        "storage_error"
    );
    // Everything else keeps being served.
    assert_eq!(hub.get("/api/sessions").json(), before);
    assert_eq!(hub.get("/api/meta").status, 200);
    assert_eq!(session(&hub, "kept")["session_id"], "kept");
    assert_eq!(hub.get("/api/sessions/new").status, 404);
    undo.run();
    // Nothing half-created: the same ids can be created now.
    create(&hub, "new");
    create(&hub, "new2");
    assert_eq!(hub.terminate().code(), Some(0));
    let hub = TestHub::start(dir.path(), &[]);
    let ids: Vec<String> = hub.get("/api/sessions").json()["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    for id in ["kept", "new", "new2"] {
        assert!(ids.contains(&id.to_string()), "{id} missing: {ids:?}");
    }
}

#[test]
fn a_full_disk_under_a_logging_worker_keeps_control_working() {
    if !is_root() {
        eprintln!("skipped: mounting a 1 MiB tmpfs needs root");
        return;
    }
    let _heavy = heavy();
    let dir = TempDir::new("hostile-fulldisk");
    let hub = shell_hub(
        &dir,
        "yes 'a log line that fills the disk quickly, again and again and again' \
         | head -n 200000; echo logged; exec sleep 3600",
    );
    create_shell_session(&hub, "full");
    let session_dir = dir.path().join("sessions/full");
    let mut undo = Undo(Vec::new());
    let path = session_dir.to_str().unwrap().to_string();
    if !run(
        "mount",
        &["-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", &path],
    ) {
        eprintln!("skipped: root here may not mount");
        return;
    }
    undo.0.push(Box::new(move || {
        run("umount", &["-l", &path]);
    }));
    // Events fill events.jsonl on the same 1 MiB while the worker logs.
    let mut ws = RawWs::open(hub.addr, &events_path(&hub, "full"));
    let started = action(&hub, "full", "start");
    assert_eq!(started["ok"], true, "{started}");
    let pad = "e".repeat(4096);
    for seq in 1..=1000 {
        ws.text(&envelope("full", "w", seq, "status", json!({"pad": pad})));
    }
    assert!(wait_until(Duration::from_secs(60), || logs_text(
        &hub, "full"
    )
    .contains("logged")));
    let p =
        wait_session(&hub, "full", |s| s["process"]["file_log_failed"] == true)["process"].clone();
    assert!(p["log_lines"].as_u64().unwrap() >= 1);
    let s = wait_session(&hub, "full", |s| s["stats"]["events"] == 1000);
    assert_eq!(s["connected"], true);
    assert!(
        wait_until(DEADLINE, || hub
            .log_text()
            .contains("No space left on device")),
        "{}",
        hub.log_text()
    );
    // Control still works: events, logs, panel, stop.
    assert_eq!(hub.get("/api/sessions/full/events?limit=1").status, 200);
    let mut p = panel(&hub);
    assert!(panel_round_trip(&mut p) < Duration::from_secs(5));
    let stopped = action(&hub, "full", "stop");
    assert_eq!(stopped["ok"], true, "{stopped}");
    drop(ws);
    create(&hub, "other");
}

#[test]
fn sigkill_during_concurrent_session_creation_loses_no_acknowledged_session() {
    let _heavy = heavy();
    let dir = TempDir::new("hostile-kill9");
    let mut acknowledged: Vec<String> = Vec::new();
    for round in 0..5 {
        let mut hub = TestHub::start(dir.path(), &[]);
        // Everything acknowledged in earlier rounds survived their kill.
        let listed: Vec<String> = hub.get("/api/sessions").json()["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["session_id"].as_str().unwrap().to_string())
            .collect();
        for id in &acknowledged {
            assert!(listed.contains(id), "round {round}: {id} lost");
            assert!(
                dir.path().join("sessions").join(id).is_dir(),
                "{id}'s directory lost"
            );
        }
        let acks = Arc::new(Mutex::new(Vec::<String>::new()));
        let count = Arc::new(AtomicU64::new(0));
        let addr = hub.addr;
        let writers: Vec<_> = (0..3)
            .map(|t| {
                let acks = acks.clone();
                let count = count.clone();
                thread::spawn(move || {
                    for i in 0..5000 {
                        let id = format!("r{round}-t{t}-{i}");
                        let body = json!({"session": id}).to_string();
                        let raw = format!(
                            "POST /api/sessions HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n\
                             Connection: close\r\n\r\n{body}",
                            body.len()
                        );
                        match exchange_within(addr, raw.as_bytes(), DEADLINE) {
                            Ok(reply) if reply.starts_with("HTTP/1.1 201 ") => {
                                acks.lock().unwrap().push(id);
                                count.fetch_add(1, Ordering::AcqRel);
                            }
                            _ => return, // the hub is gone
                        }
                    }
                })
            })
            .collect();
        // Kill at a different point of the stream each round.
        let target = 20 + 15 * round as u64;
        assert!(wait_until(DEADLINE, || count.load(Ordering::Acquire) >= target));
        signal(hub.child.id(), libc::SIGKILL);
        wait_exit(&mut hub.child, DEADLINE).expect("the hub survived SIGKILL");
        for w in writers {
            w.join().unwrap();
        }
        let conn = rusqlite::Connection::open(dir.path().join("hub.db")).unwrap();
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok", "round {round}");
        drop(conn);
        acknowledged.extend(acks.lock().unwrap().drain(..));
    }
    let hub = TestHub::start(dir.path(), &[]);
    let listed = hub.get("/api/sessions").json();
    let ids: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    for id in &acknowledged {
        assert!(ids.contains(&id.as_str()), "{id} lost");
    }
    eprintln!(
        "kill -9 x5: {} acknowledged sessions all present ({} listed)",
        acknowledged.len(),
        ids.len()
    );
}
