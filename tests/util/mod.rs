//! Shared test support: a temporary directory, the real hub binary started
//! on port 0 with its stderr captured, a small raw HTTP client, and
//! deadline polling. Every socket has a read timeout so a hang fails fast.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Path of the binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_simplex-hub");

/// Generous deadline for anything that should happen "soon".
pub const DEADLINE: Duration = Duration::from_secs(20);

/// A directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!(
            "simplex-hub-test-{tag}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Polls `cond` until it is true or `timeout` passes.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The hub binary running in a child process.
pub struct TestHub {
    pub child: Child,
    pub addr: SocketAddr,
    /// The remote-tools listener (from the `tools: ws://…` start line).
    pub tools_addr: Option<SocketAddr>,
    pub data_dir: PathBuf,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl TestHub {
    /// Starts `simplex-hub serve --listen 127.0.0.1:0 --tools-port 0
    /// --data-dir <dir>` plus `extra` and waits for the readiness line.
    /// Both listeners take free ports, so hubs can run in parallel.
    pub fn start(data_dir: &Path, extra: &[&str]) -> TestHub {
        let mut args: Vec<String> = vec![
            "serve".into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--tools-port".into(),
            "0".into(),
            "--data-dir".into(),
            data_dir.display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::start_args(data_dir, &args)
    }

    /// Starts the binary with exactly `args` and waits for readiness.
    pub fn start_args(data_dir: &Path, args: &[String]) -> TestHub {
        let mut child = Command::new(BIN)
            .args(args)
            .env("HOME", data_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn hub");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.split("panel: http://").nth(1) {
                    let _ = tx.send(url.trim().to_string());
                }
                sink.lock().unwrap().push(line);
            }
        });
        let addr = match rx.recv_timeout(DEADLINE) {
            Ok(addr) => addr.parse().expect("readiness address"),
            Err(_) => {
                let _ = child.kill();
                panic!("hub did not become ready; log: {:#?}", log.lock().unwrap());
            }
        };
        // The tools line is logged before the readiness line.
        let tools_addr = log
            .lock()
            .unwrap()
            .iter()
            .find_map(|line| line.split("tools: ws://").nth(1))
            .and_then(|addr| addr.trim().parse().ok());
        TestHub {
            child,
            addr,
            tools_addr,
            data_dir: data_dir.to_path_buf(),
            log,
        }
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        signal(self.child.id(), libc::SIGTERM);
        wait_exit(&mut self.child, DEADLINE).expect("hub did not exit after SIGTERM")
    }

    pub fn get(&self, path: &str) -> Response {
        self.request("GET", path, &[], b"")
    }

    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Response {
        let mut all = vec![("Host".to_string(), self.addr.to_string())];
        all.extend(headers.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        http(self.addr, method, path, &all, body)
    }

    /// Thread count of the hub process.
    pub fn threads(&self) -> usize {
        proc_status_field(self.child.id(), "Threads:").unwrap_or(0) as usize
    }

    /// Open file descriptors of the hub process.
    pub fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// Resident set size of the hub process in KiB.
    pub fn rss_kib(&self) -> u64 {
        proc_status_field(self.child.id(), "VmRSS:").unwrap_or(0)
    }
}

impl Drop for TestHub {
    /// Stops the hub the way an operator would (SIGTERM: it stops its
    /// workers first), and kills it only if it does not exit in time.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            signal(self.child.id(), libc::SIGTERM);
            if wait_exit(&mut self.child, Duration::from_secs(10)).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

pub fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) with a pid we spawned; no memory is involved.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

pub fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let end = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn proc_status_field(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

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

/// A session's worker token, read from the hub's store (as an operator
/// configuring a hand-launched worker would).
pub fn worker_token(data_dir: &Path, session: &str) -> String {
    let conn = rusqlite::Connection::open(data_dir.join("hub.db")).unwrap();
    conn.query_row("SELECT token FROM sessions WHERE id = ?1", [session], |r| {
        r.get(0)
    })
    .unwrap()
}

/// A raw WebSocket client standing in for a worker, for protocol edge
/// cases the built-in worker never produces.
pub type Ws = tungstenite::WebSocket<TcpStream>;

pub fn ws_connect(addr: SocketAddr, path_and_query: &str) -> Result<Ws, tungstenite::Error> {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    stream.set_write_timeout(Some(DEADLINE)).unwrap();
    let url = format!("ws://{addr}{path_and_query}");
    tungstenite::client::client(url, stream)
        .map(|(ws, _)| ws)
        .map_err(|e| match e {
            tungstenite::HandshakeError::Failure(err) => err,
            tungstenite::HandshakeError::Interrupted(_) => {
                tungstenite::Error::Io(std::io::ErrorKind::WouldBlock.into())
            }
        })
}

/// Status code of a refused WebSocket upgrade.
pub fn ws_refusal(addr: SocketAddr, path_and_query: &str) -> u16 {
    match ws_connect(addr, path_and_query) {
        Err(tungstenite::Error::Http(res)) => res.status().as_u16(),
        Err(other) => panic!("unexpected error: {other}"),
        Ok(_) => panic!("upgrade to {path_and_query} was accepted"),
    }
}

/// Reads text frames until one satisfies `pred`; returns it.
pub fn ws_read_until(
    ws: &mut Ws,
    mut pred: impl FnMut(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let end = Instant::now() + DEADLINE;
    loop {
        assert!(Instant::now() < end, "no matching frame in time");
        match ws.read() {
            Ok(tungstenite::Message::Text(t)) => {
                let v: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
                if pred(&v) {
                    return v;
                }
            }
            Ok(_) => {}
            Err(e) => panic!("socket error while waiting: {e}"),
        }
    }
}

/// Reads until the peer closes; returns the close code seen, if any.
pub fn ws_close_code(ws: &mut Ws) -> Option<u16> {
    let end = Instant::now() + DEADLINE;
    while Instant::now() < end {
        match ws.read() {
            Ok(tungstenite::Message::Close(frame)) => return frame.map(|f| u16::from(f.code)),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

/// A worker event envelope as a worker would send it.
pub fn envelope(
    session: &str,
    worker: &str,
    seq: u64,
    event: &str,
    data: serde_json::Value,
) -> String {
    serde_json::json!({
        "type": "event", "event": event, "session_id": session, "worker_id": worker,
        "request_id": "", "run_id": "", "sequence": seq, "data": data,
    })
    .to_string()
}

pub fn send_text(ws: &mut Ws, text: String) {
    ws.send(tungstenite::Message::Text(text.into())).unwrap();
}

/// Starts the built-in worker by hand for `session`, with the generated
/// configuration a hub would write (the supervisor does this itself).
pub fn spawn_mock_worker(hub: &TestHub, session: &str, model: &str) -> Child {
    let token = worker_token(&hub.data_dir, session);
    let root = hub.data_dir.join("sessions").join(session);
    let config = serde_json::json!({
        "client": {
            "endpoint": format!("ws://{}/agent/{session}/events?token={token}", hub.addr),
            "transport": {"initial_backoff_ms": 50, "max_backoff_ms": 500},
        },
        "security": {"confirmation": {
            "endpoint": format!("ws://{}/agent/{session}/confirm?token={token}", hub.addr),
            "timeout_ms": 60000,
        }},
        "hub_remote_call": hub.tools_addr.map(|tools| serde_json::json!({
            "endpoint": format!("ws://{tools}/agent/{session}/tools?token={token}"),
            "timeout_ms": 60000,
        })),
        "worker": {"max_exchanges": 16, "event_capacity": 1024, "environment": {"workspace": ""}},
        "persistence": {"enabled": true, "directory": root, "state": "state", "memory": "memory",
                        "restore": "if_present", "readable": false},
        "providers": {"mock": {"plugin": "deepseek", "model": model}},
        "driver_model": "mock",
    });
    std::fs::create_dir_all(root.join("config")).unwrap();
    let path = root.join("config").join("config.yaml");
    std::fs::write(&path, config.to_string()).unwrap();
    Command::new(BIN)
        .args([
            "mock-worker",
            "--config",
            path.to_str().unwrap(),
            "--session",
            session,
        ])
        .current_dir(&root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn mock worker")
}

/// Polls `GET /api/sessions/<id>` until `pred` holds; returns the session.
pub fn wait_session(
    hub: &TestHub,
    session: &str,
    mut pred: impl FnMut(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    let ok = wait_until(DEADLINE, || {
        last = hub.get(&format!("/api/sessions/{session}")).json()["session"].clone();
        pred(&last)
    });
    assert!(ok, "session never reached the expected state: {last:#}");
    last
}

/// Polls the transcript until an event satisfies `pred`; returns it.
pub fn wait_event(
    hub: &TestHub,
    session: &str,
    mut pred: impl FnMut(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let mut found = serde_json::Value::Null;
    let ok = wait_until(DEADLINE, || {
        let events = hub.get(&format!("/api/sessions/{session}/events")).json()["events"].clone();
        match events.as_array().unwrap().iter().find(|e| pred(e)) {
            Some(e) => {
                found = e.clone();
                true
            }
            None => false,
        }
    });
    assert!(
        ok,
        "no matching event; transcript: {:#}",
        hub.get(&format!("/api/sessions/{session}/events")).json()
    );
    found
}

pub fn post(hub: &TestHub, path: &str, body: serde_json::Value) -> Response {
    hub.request("POST", path, &[], body.to_string().as_bytes())
}

/// Whether `pid` is a live (not zombie) process.
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .next();
            state != Some("Z")
        }
        Err(_) => false,
    }
}

// Storage fault injection (as root: mounts; otherwise permission bits).

/// Whether the tests run as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

pub fn run(cmd: &str, args: &[&str]) -> bool {
    std::process::Command::new(cmd)
        .args(args)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Undoes a mount or a permission change when the test ends, even on a
/// failed assertion (declared after the TempDir, so dropped before it).
pub struct Undo(pub Vec<Box<dyn FnMut()>>);

impl Undo {
    pub fn run(&mut self) {
        while let Some(mut undo) = self.0.pop() {
            undo();
        }
    }
}

impl Drop for Undo {
    fn drop(&mut self) {
        self.run();
    }
}

/// Makes `dir` read-only: a read-only bind mount as root (root ignores
/// permission bits), mode 0500 otherwise. False when this machine cannot
/// (root without the right to mount).
pub fn make_read_only(dir: &std::path::Path, undo: &mut Undo) -> bool {
    let path = dir.to_str().unwrap().to_string();
    if is_root() {
        if !run("mount", &["--bind", &path, &path]) {
            return false;
        }
        let unmount = path.clone();
        undo.0.push(Box::new(move || {
            run("umount", &[&unmount]);
        }));
        run("mount", &["-o", "remount,bind,ro", &path, &path])
    } else {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o500)).unwrap();
        let back = dir.to_path_buf();
        undo.0.push(Box::new(move || {
            let _ = std::fs::set_permissions(&back, std::fs::Permissions::from_mode(0o700));
        }));
        true
    }
}
