//! A Shard client written from the wire protocol seed (004) alone: it
//! shares nothing with the hub's code. It speaks each transport of seed
//! §2: a WebSocket (`/shard/ws`, one message per text frame), the hub's
//! unix socket (JSONL: split on `\n` only, one trailing `\r` stripped),
//! and stdio (`simplex-hub shard-stdio`, a child process whose stdin and
//! stdout carry JSONL). It reads `hello`, sends commands with correlation
//! ids and keeps every other message in arrival order, so a test can wait
//! for the `response` of one command and still see the events that came
//! before it.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tungstenite::client::IntoClientRequest;
use tungstenite::Message;

use super::{wait_exit, TestHub, BIN, DEADLINE};

/// The transport under a client.
enum Link {
    Ws(Box<tungstenite::WebSocket<TcpStream>>),
    /// The unix socket, and the bytes read past the last whole line.
    Socket(UnixStream, Vec<u8>),
    Stdio(StdioLink),
}

/// A `shard-stdio` child: its stdin, a thread splitting its stdout into
/// lines (`None` once stdout ended), and its stderr as it came.
struct StdioLink {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Option<Vec<u8>>>,
    ended: bool,
    stderr: Arc<Mutex<String>>,
    /// Says when stderr reached its end (everything is in `stderr`).
    stderr_ended: Receiver<()>,
}

/// What one read of a JSONL transport gave.
enum Next {
    Line(Vec<u8>),
    Nothing,
    Ended,
}

/// One Shard connection.
pub struct ShardClient {
    link: Link,
    /// The `hello` the daemon sent first.
    pub hello: Value,
    /// The subprotocol the daemon selected, if any.
    pub protocol: Option<String>,
    /// Messages read and not yet taken, oldest first.
    inbox: VecDeque<Value>,
    next_id: u64,
}

/// Why an upgrade was refused: its HTTP status.
pub fn shard_refusal(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> u16 {
    match ShardClient::open(addr, path, headers) {
        Err(status) => status,
        Ok(_) => panic!("the upgrade to {path} was accepted"),
    }
}

/// The hub's unix socket in its data directory (the default `shard.socket`).
pub fn shard_socket(hub: &TestHub) -> std::path::PathBuf {
    hub.data_dir.join("shard.sock")
}

/// Splits one JSONL line off the front of `buf`: up to the first `\n`,
/// one trailing `\r` stripped (seed §2.1).
fn split_line(buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    let nl = buf.iter().position(|&b| b == b'\n')?;
    let mut line: Vec<u8> = buf.drain(..=nl).collect();
    line.pop();
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Some(line)
}

impl ShardClient {
    /// Connects to `hub` (no token) and reads `hello`.
    pub fn connect(hub: &TestHub) -> ShardClient {
        Self::open(hub.addr, "/shard/ws", &[]).expect("shard upgrade refused")
    }

    /// Connects to `path` on `addr` with `headers` and reads `hello`;
    /// `Err(status)` when the upgrade is refused.
    pub fn open(
        addr: SocketAddr,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Result<ShardClient, u16> {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(DEADLINE)).unwrap();
        stream.set_write_timeout(Some(DEADLINE)).unwrap();
        let mut request = format!("ws://{addr}{path}").into_client_request().unwrap();
        for (name, value) in headers {
            request.headers_mut().insert(
                tungstenite::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        let (ws, response) = match tungstenite::client::client(request, stream) {
            Ok(pair) => pair,
            Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(res))) => {
                return Err(res.status().as_u16())
            }
            Err(other) => panic!("shard upgrade failed: {other}"),
        };
        let protocol = response
            .headers()
            .get("Sec-WebSocket-Protocol")
            .map(|v| v.to_str().unwrap().to_string());
        Ok(Self::over(Link::Ws(Box::new(ws)), protocol))
    }

    /// Connects to the hub's unix socket at `path` and reads `hello`.
    pub fn socket(path: &Path) -> ShardClient {
        let stream = UnixStream::connect(path)
            .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", path.display()));
        stream.set_write_timeout(Some(DEADLINE)).unwrap();
        Self::over(Link::Socket(stream, Vec::new()), None)
    }

    /// Starts `simplex-hub shard-stdio` with `args` for `hub` (its data
    /// directory given) and reads the direct connection's `hello`.
    pub fn stdio(hub: &TestHub, args: &[&str]) -> ShardClient {
        let mut client = Self::spawn_stdio(hub, args);
        client.hello = client.read_one(DEADLINE).unwrap_or_else(|| {
            panic!(
                "no hello from shard-stdio; stderr: {}",
                client.stdio_stderr()
            )
        });
        assert_eq!(client.hello["type"], "hello", "{}", client.hello);
        client
    }

    /// Starts `shard-stdio` without reading anything (for the ones that
    /// are to fail).
    pub fn spawn_stdio(hub: &TestHub, args: &[&str]) -> ShardClient {
        let mut child = Command::new(BIN)
            .arg("shard-stdio")
            .args(args)
            .arg("--data-dir")
            .arg(&hub.data_dir)
            .env("HOME", &hub.data_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn shard-stdio");
        let stdin = child.stdin.take();
        let mut stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 65536];
            loop {
                match stdout.read(&mut chunk) {
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
                while let Some(line) = split_line(&mut buf) {
                    if tx.send(Some(line)).is_err() {
                        return;
                    }
                }
            }
            let _ = tx.send(None);
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err_pipe = child.stderr.take().unwrap();
        let sink = stderr.clone();
        let (ended_tx, stderr_ended) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut text = String::new();
            let mut chunk = [0u8; 4096];
            while let Ok(n) = err_pipe.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                text.push_str(&String::from_utf8_lossy(&chunk[..n]));
                *sink.lock().unwrap() = text.clone();
            }
            let _ = ended_tx.send(());
        });
        Self::over(
            Link::Stdio(StdioLink {
                child,
                stdin,
                lines,
                ended: false,
                stderr,
                stderr_ended,
            }),
            None,
        )
    }

    /// A client over `link`; reads `hello` unless it is stdio's (whose
    /// first line may not come: `stdio` reads it).
    fn over(link: Link, protocol: Option<String>) -> ShardClient {
        let stdio = matches!(link, Link::Stdio(_));
        let mut client = ShardClient {
            link,
            hello: Value::Null,
            protocol,
            inbox: VecDeque::new(),
            next_id: 0,
        };
        if !stdio {
            client.hello = client.read_one(DEADLINE).expect("no hello");
            assert_eq!(client.hello["type"], "hello", "{}", client.hello);
        }
        client
    }

    /// The WebSocket under this client (panics for another transport).
    pub fn websocket(&mut self) -> &mut tungstenite::WebSocket<TcpStream> {
        match &mut self.link {
            Link::Ws(ws) => ws,
            _ => panic!("not a WebSocket client"),
        }
    }

    /// Reads one line of a JSONL transport within `within`.
    fn next_line(&mut self, within: Duration) -> Next {
        match &mut self.link {
            Link::Ws(_) => unreachable!(),
            Link::Socket(stream, buf) => {
                let end = Instant::now() + within;
                loop {
                    if let Some(line) = split_line(buf) {
                        return Next::Line(line);
                    }
                    let left = end.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Next::Nothing;
                    }
                    stream
                        .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                        .unwrap();
                    let mut chunk = [0u8; 65536];
                    match stream.read(&mut chunk) {
                        Ok(0) => return Next::Ended,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::WouldBlock
                                    | std::io::ErrorKind::TimedOut
                                    | std::io::ErrorKind::Interrupted
                            ) => {}
                        Err(_) => return Next::Ended,
                    }
                }
            }
            Link::Stdio(stdio) => {
                if stdio.ended {
                    return Next::Ended;
                }
                match stdio.lines.recv_timeout(within) {
                    Ok(Some(line)) => Next::Line(line),
                    Ok(None) | Err(RecvTimeoutError::Disconnected) => {
                        stdio.ended = true;
                        Next::Ended
                    }
                    Err(RecvTimeoutError::Timeout) => Next::Nothing,
                }
            }
        }
    }

    /// Reads one message within `within` (`None`: nothing came).
    fn read_one(&mut self, within: Duration) -> Option<Value> {
        if !matches!(self.link, Link::Ws(_)) {
            return match self.next_line(within) {
                Next::Line(line) => {
                    let text = String::from_utf8(line).expect("a UTF-8 line");
                    assert!(!text.is_empty(), "the hub sent an empty line");
                    Some(serde_json::from_str(&text).expect("a JSON line"))
                }
                Next::Nothing => None,
                Next::Ended => panic!("the connection ended"),
            };
        }
        let ws = self.websocket();
        let end = Instant::now() + within;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            ws.get_ref()
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .unwrap();
            match ws.read() {
                Ok(Message::Text(text)) => {
                    return Some(serde_json::from_str(text.as_str()).expect("a JSON message"))
                }
                Ok(Message::Binary(_)) => panic!("the daemon sent a binary frame"),
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return None
                }
                Err(e) => panic!("the connection ended: {e}"),
            }
        }
    }

    /// Sends `msg` as one text frame.
    pub fn send(&mut self, msg: Value) {
        self.send_text(&msg.to_string());
    }

    /// Sends one message's text: a text frame, or a line.
    pub fn send_text(&mut self, text: &str) {
        match &mut self.link {
            Link::Ws(ws) => ws.send(Message::Text(text.into())).unwrap(),
            _ => self.send_raw(format!("{text}\n").as_bytes()),
        }
    }

    /// Writes `bytes` as they are to a JSONL transport (CRLF, invalid
    /// UTF-8, a partial line: whatever the test needs).
    pub fn send_raw(&mut self, bytes: &[u8]) {
        match &mut self.link {
            Link::Ws(_) => panic!("a WebSocket client sends frames"),
            Link::Socket(stream, _) => stream.write_all(bytes).unwrap(),
            Link::Stdio(stdio) => {
                let stdin = stdio.stdin.as_mut().expect("stdin was closed");
                stdin.write_all(bytes).unwrap();
                stdin.flush().unwrap();
            }
        }
    }

    /// Ends what this client sends (a half-close of the socket, the end of
    /// shard-stdio's stdin) and keeps reading.
    pub fn close_input(&mut self) {
        match &mut self.link {
            Link::Ws(_) => panic!("a WebSocket has no half-close"),
            Link::Socket(stream, _) => stream.shutdown(std::net::Shutdown::Write).unwrap(),
            Link::Stdio(stdio) => drop(stdio.stdin.take()),
        }
    }

    /// shard-stdio's exit status, waiting up to `within`.
    pub fn stdio_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        match &mut self.link {
            Link::Stdio(stdio) => {
                let status = wait_exit(&mut stdio.child, within)?;
                // Its last words reach `stdio_stderr` before the status does.
                let _ = stdio.stderr_ended.recv_timeout(within);
                Some(status)
            }
            _ => panic!("not a shard-stdio client"),
        }
    }

    /// What shard-stdio wrote on stderr so far.
    pub fn stdio_stderr(&self) -> String {
        match &self.link {
            Link::Stdio(stdio) => stdio.stderr.lock().unwrap().clone(),
            _ => panic!("not a shard-stdio client"),
        }
    }

    /// Every message until the connection ends (within the deadline).
    pub fn rest(&mut self) -> Vec<Value> {
        let mut out: Vec<Value> = self.inbox.drain(..).collect();
        let end = Instant::now() + DEADLINE;
        while Instant::now() < end {
            match self.next_line(end.saturating_duration_since(Instant::now())) {
                Next::Line(line) => out.push(serde_json::from_slice(&line).expect("a JSON line")),
                Next::Nothing => {}
                Next::Ended => return out,
            }
        }
        panic!("the connection did not end; got {out:#?}");
    }

    /// A fresh correlation id.
    pub fn new_id(&mut self) -> String {
        self.next_id += 1;
        format!("c{}", self.next_id)
    }

    /// Sends `msg` with a fresh `id` and returns that id.
    pub fn command(&mut self, mut msg: Value) -> String {
        let id = self.new_id();
        msg["id"] = json!(id);
        self.send(msg);
        id
    }

    /// Sends `msg` with a fresh `id` and waits for its `response`.
    pub fn request(&mut self, msg: Value) -> Value {
        let id = self.command(msg);
        self.response(&id)
    }

    /// The `response` with correlation id `id`.
    pub fn response(&mut self, id: &str) -> Value {
        self.expect(|m| m["type"] == "response" && m["id"] == id)
    }

    /// Takes the first message (kept or new) that satisfies `pred`,
    /// waiting up to the deadline; panics with what came meanwhile.
    pub fn expect(&mut self, mut pred: impl FnMut(&Value) -> bool) -> Value {
        self.take_within(DEADLINE, &mut pred)
            .unwrap_or_else(|| panic!("no matching message; seen: {:#?}", self.inbox))
    }

    /// As [`ShardClient::expect`], `None` after `within`.
    pub fn take_within(
        &mut self,
        within: Duration,
        pred: &mut dyn FnMut(&Value) -> bool,
    ) -> Option<Value> {
        if let Some(pos) = self.inbox.iter().position(&mut *pred) {
            return self.inbox.remove(pos);
        }
        let end = Instant::now() + within;
        while Instant::now() < end {
            let left = end.saturating_duration_since(Instant::now());
            let Some(msg) = self.read_one(left) else {
                break;
            };
            if pred(&msg) {
                return Some(msg);
            }
            self.inbox.push_back(msg);
        }
        None
    }

    /// The first message of `kind` for `agent`.
    pub fn event(&mut self, kind: &str, agent: &str) -> Value {
        self.expect(|m| m["type"] == kind && m["agent_id"] == agent)
    }

    /// Every message of `agent` (kept or new), oldest first, up to and
    /// including its first of `kind`; the others stay kept.
    pub fn through(&mut self, kind: &str, agent: &str) -> Vec<Value> {
        let is_end = |m: &Value| m["type"] == kind && m["agent_id"] == agent;
        let end = Instant::now() + DEADLINE;
        let at = loop {
            if let Some(at) = self.inbox.iter().position(is_end) {
                break at;
            }
            let left = end.saturating_duration_since(Instant::now());
            match self.read_one(left) {
                Some(msg) => self.inbox.push_back(msg),
                None => panic!("no {kind} for {agent}; seen: {:#?}", self.inbox),
            }
        };
        let rest = self.inbox.split_off(at + 1);
        let (mine, others): (Vec<Value>, Vec<Value>) =
            self.inbox.drain(..).partition(|m| m["agent_id"] == agent);
        self.inbox.extend(others);
        self.inbox.extend(rest);
        mine
    }

    /// The first message of `kind` on a direct connection, which carries
    /// no `agent_id` (seed §5.2).
    pub fn direct_event(&mut self, kind: &str) -> Value {
        let msg = self.expect(|m| m["type"] == kind);
        assert!(
            msg.get("agent_id").is_none(),
            "a direct message with agent_id: {msg}"
        );
        msg
    }

    /// Reads everything that arrives within `within` into the inbox.
    pub fn settle(&mut self, within: Duration) {
        let end = Instant::now() + within;
        while let Some(msg) = self.read_one(end.saturating_duration_since(Instant::now())) {
            self.inbox.push_back(msg);
        }
    }

    /// The messages kept so far, oldest first (taking them).
    pub fn take_inbox(&mut self) -> Vec<Value> {
        self.inbox.drain(..).collect()
    }

    /// `agent.attach` as `role`: its `response`, then the `sync` that
    /// must be the next per-agent message for that agent (orchestrator
    /// events name agents too, as payload).
    pub fn attach(&mut self, agent: &str, role: &str) -> (Value, Value) {
        let response =
            self.request(json!({"type": "agent.attach", "agent_id": agent, "role": role}));
        assert_eq!(response["success"], true, "{response}");
        let sync = self.expect(|m| {
            m["agent_id"] == agent && !m["type"].as_str().unwrap_or("").starts_with("agent_")
        });
        assert_eq!(
            sync["type"], "sync",
            "the first event after the response: {sync}"
        );
        (response, sync)
    }

    /// `agent.create` in `cwd`; returns the new agent's id.
    pub fn create(&mut self, cwd: &std::path::Path) -> String {
        // A project directory exists before an agent works in it.
        std::fs::create_dir_all(cwd).unwrap();
        let r = self.request(json!({"type": "agent.create", "cwd": cwd}));
        assert_eq!(r["success"], true, "{r}");
        r["data"]["agent_id"].as_str().unwrap().to_string()
    }

    /// Waits until the agent's `runtime_state` is `state` (polling
    /// `agent.status`).
    pub fn wait_runtime(&mut self, agent: &str, state: &str) -> Value {
        let end = Instant::now() + DEADLINE;
        loop {
            let r = self.request(json!({"type": "agent.status", "agent_id": agent}));
            let info = r["data"]["agents"][0].clone();
            if info["runtime_state"] == state {
                return info;
            }
            assert!(Instant::now() < end, "runtime never {state}: {info}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends a prompt with `text` to `agent` and returns its command id.
    pub fn prompt(&mut self, agent: &str, text: &str) -> String {
        self.command(json!({"type": "prompt", "agent_id": agent, "message": text}))
    }

    /// Whether the daemon ended the connection within `within` (reading
    /// and dropping whatever comes first).
    pub fn ends_within(&mut self, within: Duration) -> bool {
        let end = Instant::now() + within;
        if !matches!(self.link, Link::Ws(_)) {
            while Instant::now() < end {
                match self.next_line(end.saturating_duration_since(Instant::now())) {
                    Next::Ended => return true,
                    Next::Line(_) | Next::Nothing => {}
                }
            }
            return false;
        }
        let ws = self.websocket();
        while Instant::now() < end {
            ws.get_ref()
                .set_read_timeout(Some(Duration::from_millis(50)))
                .unwrap();
            match ws.read() {
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return true,
            }
        }
        false
    }
}

impl Drop for StdioLink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
