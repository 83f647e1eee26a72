//! A Shard client written from the wire protocol seed (004) alone: it
//! shares nothing with the hub's code. It opens `/shard/ws`, reads
//! `hello`, sends commands with correlation ids and keeps every other
//! message in arrival order, so a test can wait for the `response` of one
//! command and still see the events that came before it.

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tungstenite::client::IntoClientRequest;
use tungstenite::Message;

use super::{TestHub, DEADLINE};

/// One Shard connection.
pub struct ShardClient {
    pub ws: tungstenite::WebSocket<TcpStream>,
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
        let mut client = ShardClient {
            ws,
            hello: Value::Null,
            protocol,
            inbox: VecDeque::new(),
            next_id: 0,
        };
        client.hello = client.read_one(DEADLINE).expect("no hello");
        assert_eq!(client.hello["type"], "hello", "{}", client.hello);
        Ok(client)
    }

    /// Reads one text message within `within` (`None`: nothing came).
    fn read_one(&mut self, within: Duration) -> Option<Value> {
        let end = Instant::now() + within;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            self.ws
                .get_ref()
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .unwrap();
            match self.ws.read() {
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

    pub fn send_text(&mut self, text: &str) {
        self.ws.send(Message::Text(text.into())).unwrap();
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
        while Instant::now() < end {
            self.ws
                .get_ref()
                .set_read_timeout(Some(Duration::from_millis(50)))
                .unwrap();
            match self.ws.read() {
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
