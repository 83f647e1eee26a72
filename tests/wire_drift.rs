//! The Node hub's clients against this hub: a real hub with built-in
//! worker sessions is driven through every panel message and JSON API
//! route it answers, and every frame and response it produces is checked
//! against the Node hub's shapes (`tests/fixtures/node_wire.json`,
//! `util::shapes`). The behaviour a Node client relies on beyond types
//! (which fields an answer carries, stale cursors, bodiless actions) is
//! checked on the way. Every finding is collected, so one run lists all of
//! them.
//!
//! This file holds the checking: [`Drift`], the collected findings, and
//! [`Panel`], a panel socket whose every frame is checked. The runs are
//! `sessions.rs` (built-in worker sessions through every panel message and
//! JSON API route, and confirmations retired without a decision),
//! `headless.rs` (headless sessions and subagent results) and `library.rs`
//! (the configuration and skill libraries).

mod headless;
mod library;
mod sessions;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::util::shapes::node_wire;
use crate::util::*;

/// What differs from the Node hub, collected over a whole run.
#[derive(Default)]
struct Drift {
    found: Vec<String>,
    frames: usize,
    responses: usize,
}

impl Drift {
    fn note(&mut self, what: impl Into<String>) {
        self.found.push(what.into());
    }

    /// A hub -> panel frame.
    fn frame(&mut self, context: &str, frame: &Value) {
        self.frames += 1;
        for v in node_wire().frame_violations(frame) {
            let kind = frame["type"].as_str().unwrap_or("?");
            self.note(format!("{context}: {kind} frame: {v}"));
        }
    }

    /// A JSON API response to `route` (the fixture's route name).
    fn response(&mut self, route: &str, res: &Response) -> Value {
        self.responses += 1;
        let body: Value = serde_json::from_slice(&res.body).unwrap_or(Value::Null);
        for v in node_wire().route_violations(route, res.status, &body) {
            self.note(format!("{route} ({}): {v}", res.status));
        }
        body
    }

    /// A subagent tool result.
    fn tool_result(&mut self, name: &str, result: &Value) {
        for v in node_wire().tool_result_violations(name, result) {
            self.note(format!("{name} result: {v}"));
        }
    }

    fn expect(&mut self, ok: bool, what: impl Into<String>) {
        if !ok {
            self.note(what);
        }
    }

    /// Fails listing every finding once, in the order first seen, with
    /// how often it was seen.
    fn assert_none(&self) {
        let mut distinct: Vec<(&str, usize)> = Vec::new();
        for found in &self.found {
            match distinct.iter_mut().find(|(f, _)| f == found) {
                Some((_, n)) => *n += 1,
                None => distinct.push((found, 1)),
            }
        }
        let lines: Vec<String> = distinct
            .iter()
            .map(|(f, n)| {
                if *n > 1 {
                    format!("{f} (x{n})")
                } else {
                    f.to_string()
                }
            })
            .collect();
        assert!(
            self.found.is_empty(),
            "{} difference(s) from the Node hub's wire shapes ({} frames, {} responses checked):\n  {}",
            lines.len(),
            self.frames,
            self.responses,
            lines.join("\n  ")
        );
    }
}

/// A panel socket whose every frame is checked when it is read.
struct Panel {
    name: &'static str,
    ws: Ws,
    /// Every frame read so far, oldest first.
    seen: Vec<Value>,
    /// Where `expect` starts looking in `seen`: the frames read since the
    /// last message sent (a reply's broadcasts may come before the reply).
    mark: usize,
}

impl Panel {
    fn open(hub: &TestHub, name: &'static str, drift: &mut Drift) -> (Panel, Value) {
        let mut panel = Panel {
            name,
            ws: panel_connect(hub),
            seen: Vec::new(),
            mark: 0,
        };
        let welcome = panel
            .wait(drift, DEADLINE, |f| f["type"] == "welcome")
            .expect("a welcome");
        (panel, welcome)
    }

    /// Sends a message exactly as given (Node clients may leave `v` out).
    fn send(&mut self, message: Value) {
        let unlike = node_wire().panel_message_violations(&message);
        assert!(
            unlike.is_empty(),
            "the test sends a message no Node panel sends: {unlike:?}: {message}"
        );
        self.mark = self.seen.len();
        send_json(&mut self.ws, message);
    }

    /// Reads frames (checking each) until one satisfies `pred`, or `None`
    /// after `within`.
    fn wait(
        &mut self,
        drift: &mut Drift,
        within: Duration,
        mut pred: impl FnMut(&Value) -> bool,
    ) -> Option<Value> {
        let end = Instant::now() + within;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            self.ws.get_mut().set_read_timeout(Some(left)).unwrap();
            match self.ws.read() {
                Ok(tungstenite::Message::Text(text)) => {
                    let frame: Value = serde_json::from_str(text.as_str()).unwrap();
                    drift.frame(self.name, &frame);
                    self.seen.push(frame.clone());
                    if pred(&frame) {
                        return Some(frame);
                    }
                }
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return None
                }
                Err(e) => panic!("{}: socket error: {e}", self.name),
            }
        }
    }

    /// The first frame since the last message sent that satisfies `pred`,
    /// reading more (with the test deadline) if none has yet; a missing
    /// frame is a finding.
    fn expect(
        &mut self,
        drift: &mut Drift,
        what: &str,
        mut pred: impl FnMut(&Value) -> bool,
    ) -> Value {
        if let Some(frame) = self.seen[self.mark..].iter().find(|f| pred(f)) {
            return frame.clone();
        }
        match self.wait(drift, DEADLINE, pred) {
            Some(frame) => frame,
            None => {
                drift.note(format!("{}: no {what} arrived", self.name));
                Value::Null
            }
        }
    }

    /// Sends `message` and returns the next frame of one of `kinds`.
    fn ask(&mut self, drift: &mut Drift, message: Value, kinds: &[&str]) -> Value {
        let what = format!("answer to {message}");
        self.send(message);
        self.expect(drift, &what, |f| kinds.iter().any(|k| f["type"] == *k))
    }

    /// Frames of `kind` seen so far.
    fn seen_of(&self, kind: &str) -> Vec<&Value> {
        self.seen.iter().filter(|f| f["type"] == kind).collect()
    }
}

/// One request whose response is checked against `route`.
fn api(
    drift: &mut Drift,
    hub: &TestHub,
    route: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let bytes = body.map(|b| b.to_string()).unwrap_or_default();
    let res = hub.request(method, path, &[], bytes.as_bytes());
    let value = drift.response(route, &res);
    (res.status, value)
}

/// A POST with no body and no `Content-Length` (what `curl -X POST` and
/// many scripts send).
fn bare_post(addr: SocketAddr, path: &str) -> Response {
    let raw = format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    raw_exchange(addr, raw.as_bytes()).expect("a response")
}

fn events_of(drift: &mut Drift, hub: &TestHub, id: &str, query: &str) -> Value {
    let (_, page) = api(
        drift,
        hub,
        "GET /api/sessions/:id/events",
        "GET",
        &format!("/api/sessions/{id}/events{query}"),
        None,
    );
    page
}

/// The `hub_sequence` values of a transcript page, in order.
fn sequences(page: &Value) -> Vec<u64> {
    page["events"]
        .as_array()
        .map(|events| {
            events
                .iter()
                .filter_map(|e| e["hub_sequence"].as_u64())
                .collect()
        })
        .unwrap_or_default()
}

/// Sends `text` to `session`'s built-in worker and returns the text of the
/// run's model response (where a plan trigger's outcome is).
fn reply_text(hub: &TestHub, session: &str, text: &str) -> String {
    let res = post(
        hub,
        &format!("/api/sessions/{session}/input"),
        text_content(text),
    );
    assert_eq!(res.status, 202, "{}", res.text());
    let request_id = res.json()["request_id"].as_str().unwrap().to_string();
    let finished = wait_event(hub, session, |e| {
        e["event"] == "run_finished" && e["request_id"] == request_id.as_str()
    });
    let reply = wait_event(hub, session, |e| {
        e["event"] == "model_response" && e["run_id"] == finished["run_id"]
    });
    reply["data"]["content"]
        .as_array()
        .and_then(|parts| parts.iter().find_map(|p| p["raw"].as_str()))
        .unwrap_or_else(|| panic!("no reply text: {reply}"))
        .to_string()
}

/// The first open prompt of session `id` once one awaits a decision.
fn awaited_prompt(hub: &TestHub, id: &str) -> Value {
    let s = wait_session(hub, id, |s| {
        s["confirmations"]
            .as_array()
            .is_some_and(|c| c.iter().any(|p| p["state"] == "awaiting-decision"))
    });
    s["confirmations"][0].clone()
}
