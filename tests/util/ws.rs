//! A tungstenite WebSocket client standing in for a worker or a panel, for
//! the protocol cases the built-in worker and the browser never produce,
//! and the JSON frames both send.

use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

use serde_json::{json, Value};

use super::{confirm_path, events_path, TestHub, DEADLINE};

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
pub fn ws_read_until(ws: &mut Ws, mut pred: impl FnMut(&Value) -> bool) -> Value {
    let end = Instant::now() + DEADLINE;
    loop {
        assert!(Instant::now() < end, "no matching frame in time");
        match ws.read() {
            Ok(tungstenite::Message::Text(t)) => {
                let v: Value = serde_json::from_str(t.as_str()).unwrap();
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

pub fn send_text(ws: &mut Ws, text: String) {
    ws.send(tungstenite::Message::Text(text.into())).unwrap();
}

/// Sends `msg` as one text frame.
pub fn send_json(ws: &mut Ws, msg: Value) {
    send_text(ws, msg.to_string());
}

/// Reads until a message of type `kind` arrives; returns it.
pub fn next_of(ws: &mut Ws, kind: &str) -> Value {
    ws_read_until(ws, |v| v["type"] == kind)
}

/// A panel socket, its welcome not read yet.
pub fn panel_connect(hub: &TestHub) -> Ws {
    ws_connect(hub.addr, "/panel/ws").unwrap()
}

/// A panel socket that has read its welcome.
pub fn panel(hub: &TestHub) -> Ws {
    let mut ws = panel_connect(hub);
    next_of(&mut ws, "welcome");
    ws
}

/// A worker event socket of session `id` (with its worker token).
pub fn worker_events(hub: &TestHub, id: &str) -> Ws {
    ws_connect(hub.addr, &events_path(hub, id)).unwrap()
}

/// A worker confirmation socket of session `id` (with its worker token).
pub fn worker_confirm(hub: &TestHub, id: &str) -> Ws {
    ws_connect(hub.addr, &confirm_path(hub, id)).unwrap()
}

/// A worker event envelope as a worker would send it.
pub fn envelope(session: &str, worker: &str, seq: u64, event: &str, data: Value) -> String {
    json!({
        "type": "event", "event": event, "session_id": session, "worker_id": worker,
        "request_id": "", "run_id": "", "sequence": seq, "data": data,
    })
    .to_string()
}

/// A `confirmation_request` for a `run_command` call with `arguments`.
pub fn confirmation_request(session: &str, worker: &str, cid: &str, arguments: Value) -> String {
    json!({"type": "confirmation_request", "data": {
        "worker_id": worker, "session_id": session, "run_id": "run-1", "confirmation_id": cid,
        "call": {"id": "call-1", "name": "run_command", "type": "serial_write",
                 "security": "require_confirm", "arguments": arguments},
    }})
    .to_string()
}

/// The content of an input of one text part.
pub fn text_content(raw: &str) -> Value {
    json!({"content": [{"type": "text", "modality": "text", "raw": raw}]})
}
