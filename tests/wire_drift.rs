//! The Node hub's clients against this hub: a real hub with built-in
//! worker sessions is driven through every panel message and JSON API
//! route it answers, and every frame and response it produces is checked
//! against the Node hub's shapes (`tests/fixtures/node_wire.json`,
//! `util::shapes`). The behaviour a Node client relies on beyond types
//! (which fields an answer carries, stale cursors, bodiless actions) is
//! checked on the way. Every finding is collected, so one run lists all of
//! them.

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

#[test]
fn every_frame_and_response_has_the_node_hubs_shape() {
    let dir = TempDir::new("drift");
    let hub = hub_with(
        &dir,
        json!({"worker": {"stopTimeoutMs": 3000, "sigtermGraceMs": 2000, "sigkillGraceMs": 3000}}),
    );
    let mut drift = Drift::default();
    let d = &mut drift;

    // --- metadata, session list and creation over the JSON API
    let (_, meta) = api(d, &hub, "GET /api/meta", "GET", "/api/meta", None);
    d.expect(
        meta["provider_profiles"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p == "mock")),
        "meta: provider_profiles does not list the mock profile",
    );
    api(d, &hub, "GET /api/sessions", "GET", "/api/sessions", None);
    let route = "POST /api/sessions";
    api(
        d,
        &hub,
        route,
        "POST",
        "/api/sessions",
        Some(json!({"session": "s1"})),
    );
    api(
        d,
        &hub,
        route,
        "POST",
        "/api/sessions",
        Some(json!({"session": "s1"})),
    );
    api(
        d,
        &hub,
        route,
        "POST",
        "/api/sessions",
        Some(json!({"session": "bad id"})),
    );
    api(
        d,
        &hub,
        route,
        "POST",
        "/api/sessions",
        Some(json!({"session": "s9", "spec": {"nope": 1}})),
    );
    api(
        d,
        &hub,
        "GET /api/sessions/:id",
        "GET",
        "/api/sessions/s1",
        None,
    );
    api(
        d,
        &hub,
        "GET /api/sessions/:id",
        "GET",
        "/api/sessions/missing",
        None,
    );

    // --- a panel as the Node panel and its SDK speak: `v` left out
    let (mut a, welcome) = Panel::open(&hub, "panel A", d);
    d.expect(
        welcome["subscriptions"] == json!([]),
        "welcome: subscriptions is not an empty list",
    );
    a.ask(d, json!({"type": "ping"}), &["pong"]);
    a.ask(d, json!({"type": "list_sessions"}), &["sessions"]);
    a.ask(
        d,
        json!({"type": "create_session", "session": "s2"}),
        &["created"],
    );
    a.expect(d, "session s2", |f| {
        f["type"] == "session" && f["session"]["session_id"] == "s2"
    });
    let taken = a.ask(
        d,
        json!({"type": "create_session", "session": "s2"}),
        &["error"],
    );
    d.expect(
        taken["error"] == "session_exists",
        format!("create twice: {taken}"),
    );
    let (mut b, _) = Panel::open(&hub, "panel B", d);

    // --- subscriptions: legacy, and paged (this hub's and the Node hub's extension)
    let subscribed = a.ask(
        d,
        json!({"type": "subscribe", "session": "s1", "since": 0}),
        &["subscribed"],
    );
    d.expect(
        subscribed["logs"].is_array(),
        "subscribed: logs is not an array",
    );
    b.send(json!({"type": "subscribe", "session": "s1", "since": 0, "paged": true, "request_id": "page-1"}));
    b.expect(d, "final replay page", |f| {
        f["type"] == "subscribed" && f["replay_more"] == false
    });

    // --- worker control: a start through the panel, answered with the result
    let started = a.ask(
        d,
        json!({"type": "worker", "session": "s1", "action": "start"}),
        &["accepted", "error"],
    );
    d.expect(
        started["type"] == "accepted",
        format!("worker start: {started}"),
    );
    a.expect(d, "process frame", |f| {
        f["type"] == "process" && f["session"] == "s1"
    });
    wait_session(&hub, "s1", |s| s["identity"]["state"] == "live");
    a.expect(d, "connection frame", |f| {
        f["type"] == "connection" && f["connected"] == true
    });
    // a second start fails: worker_action_failed names action, session and result
    let again = a.ask(
        d,
        json!({"type": "worker", "session": "s1", "action": "start"}),
        &["accepted", "error"],
    );
    d.expect(
        again["error"] == "worker_action_failed",
        format!("second start: {again}"),
    );
    for key in ["action", "session", "result"] {
        d.expect(
            again.get(key).is_some(),
            format!("worker_action_failed has no top-level {key}: {again}"),
        );
    }

    // --- input: accepted, the request record, the run's events
    let accepted = a.ask(
        d,
        json!({"type": "input", "session": "s1", "request_id": "in-1",
            "content": [{"type": "text", "modality": "text", "raw": "hello"}]}),
        &["accepted", "error"],
    );
    d.expect(
        accepted["request_id"] == "in-1",
        format!("input: {accepted}"),
    );
    a.expect(d, "request frame", |f| f["type"] == "request");
    a.expect(d, "run_finished event", |f| {
        f["type"] == "event" && f["envelope"]["event"] == "run_finished"
    });
    a.expect(d, "admitted request", |f| {
        f["type"] == "request" && f["request"]["state"] == "admitted"
    });

    // --- history: a transient reply, stamped without consuming a sequence
    let before = events_of(d, &hub, "s1", "");
    let latest_before = before["latest"].as_u64().unwrap_or(0);
    a.ask(
        d,
        json!({"type": "history", "session": "s1", "request_id": "h-1", "start": 0, "step": 0, "limit": 10}),
        &["accepted", "error"],
    );
    let history = a.expect(d, "history event", |f| {
        f["type"] == "event" && f["envelope"]["event"] == "history"
    });
    d.expect(
        history["hub_seq"].as_u64() == Some(latest_before),
        format!(
            "history: hub_seq {} is not the current sequence {latest_before}",
            history["hub_seq"]
        ),
    );
    a.ask(
        d,
        json!({"type": "input", "session": "s1", "request_id": "in-2",
            "content": [{"type": "text", "modality": "text", "raw": "again"}]}),
        &["accepted", "error"],
    );
    a.expect(d, "second run_finished", |f| {
        f["type"] == "event"
            && f["envelope"]["event"] == "run_finished"
            && f["envelope"]["request_id"] == "in-2"
    });
    let page = events_of(d, &hub, "s1", "");
    let seqs = sequences(&page);
    let contiguous = seqs.windows(2).all(|w| w[1] == w[0] + 1);
    d.expect(
        contiguous,
        format!("replay after a history reply has a hole: {seqs:?}"),
    );
    // `limit=0` (the Node panel's default) means no limit
    let unlimited = events_of(d, &hub, "s1", "?since=0&limit=0");
    d.expect(
        sequences(&unlimited).len() == seqs.len(),
        format!(
            "events?limit=0 returned {} of {} events",
            sequences(&unlimited).len(),
            seqs.len()
        ),
    );

    // --- a paged replay of a transcript with entries: every page carries
    // the description (Node clients replace theirs with it) and the logs
    b.send(
        json!({"type": "subscribe", "session": "s1", "since": 0, "paged": true,
        "replace": true, "request_id": "page-2"}),
    );
    let last = b.expect(d, "final page of a replay", |f| {
        f["type"] == "subscribed" && f["request_id"] == "page-2" && f["replay_more"] == false
    });
    d.expect(
        last["latest"] == page["latest"],
        format!("final page latest: {}", last["latest"]),
    );
    let data_pages = b
        .seen_of("subscribed")
        .iter()
        .filter(|f| f["request_id"] == "page-2" && f["replay_more"] == true)
        .count();
    d.expect(data_pages > 0, "a replay of a transcript sent no data page");

    // --- a stale cursor (from before a hub restart) must not silence live
    // events, legacy or paged
    let mut c = Panel::open(&hub, "panel C", d).0;
    c.ask(
        d,
        json!({"type": "subscribe", "session": "s1", "since": 1_000_000}),
        &["subscribed"],
    );
    let (mut e, _) = Panel::open(&hub, "panel E", d);
    e.send(json!({"type": "subscribe", "session": "s1", "since": 1_000_000, "paged": true}));
    let stale = e.expect(d, "final page for a stale cursor", |f| {
        f["type"] == "subscribed" && f["replay_more"] == false
    });
    d.expect(
        stale["latest"] == page["latest"],
        format!(
            "a stale cursor's final page says latest {}",
            stale["latest"]
        ),
    );
    a.send(json!({"type": "signal", "session": "s1", "operation": "status"}));
    let live = c.wait(d, Duration::from_secs(5), |f| f["type"] == "event");
    d.expect(
        live.is_some(),
        "a subscriber with a stale cursor received no live event",
    );
    let live = e.wait(d, Duration::from_secs(5), |f| f["type"] == "event");
    d.expect(
        live.is_some(),
        "a paged subscriber with a stale cursor received no live event",
    );

    // --- signals and logs
    let signalled = a.expect(d, "signal accepted", |f| {
        f["type"] == "accepted" && f["action"] == "signal"
    });
    d.expect(
        signalled["operation"] == "status",
        format!("signal: {signalled}"),
    );
    let logs = a.ask(
        d,
        json!({"type": "logs", "session": "s1", "limit": 50}),
        &["logs"],
    );
    d.expect(logs["lines"].is_array(), "logs: no lines");
    api(
        d,
        &hub,
        "GET /api/sessions/:id/logs",
        "GET",
        "/api/sessions/s1/logs",
        None,
    );
    a.ask(
        d,
        json!({"type": "status_snapshot", "session": "s1"}),
        &["snapshot"],
    );

    // --- a tool call: confirmation open, decided, closed with {phase, detail}
    a.send(
        json!({"type": "input", "session": "s1", "request_id": "in-3",
        "content": [{"type": "text", "modality": "text", "raw": "/run true"}]}),
    );
    let open = a.expect(d, "open confirmation", |f| {
        f["type"] == "confirmation" && f["open"] == true
    });
    let prompt = awaited_prompt(&hub, "s1");
    let cid = prompt["confirmation_id"].as_str().unwrap_or("").to_string();
    d.expect(
        open["confirmation"]["confirmation_id"] == cid.as_str(),
        "open frame names another prompt",
    );
    let decided = a.ask(
        d,
        json!({"type": "confirmation", "session": "s1", "confirmation_id": cid, "decision": "approved", "reason": "ok"}),
        &["accepted", "error"],
    );
    d.expect(
        decided["confirmation_id"] == cid.as_str(),
        format!("decision: {decided}"),
    );
    let closed = a.expect(d, "closing confirmation", |f| {
        f["type"] == "confirmation"
            && f["open"] == false
            && f["confirmation"]["confirmation_id"] == cid.as_str()
    });
    d.expect(
        closed["outcome"]["phase"] == "decided" && closed["outcome"]["detail"] == "approved",
        format!("closing outcome: {}", closed["outcome"]),
    );
    let extra = a
        .seen_of("confirmation")
        .iter()
        .filter(|f| f["open"] == true && f["confirmation"]["state"] == "decided")
        .count();
    d.expect(
        extra == 0,
        format!("{extra} confirmation frame(s) with state decided before the close"),
    );
    let late = a.ask(
        d,
        json!({"type": "confirmation", "session": "s1", "confirmation_id": cid, "decision": "denied"}),
        &["error"],
    );
    d.expect(
        late["session"] == "s1",
        format!("a refused decision names no session: {late}"),
    );
    a.expect(d, "the tool run's end", |f| {
        f["type"] == "event"
            && f["envelope"]["event"] == "run_finished"
            && f["envelope"]["request_id"] == "in-3"
    });

    // --- a plan, pushed to subscribers
    a.send(
        json!({"type": "input", "session": "s1", "request_id": "in-4",
        "content": [{"type": "text", "modality": "text", "raw": "/plan # step one"}]}),
    );
    a.expect(d, "plan frame", |f| f["type"] == "plan");

    // --- snapshot, events and the worker's view over REST
    api(
        d,
        &hub,
        "GET /api/sessions/:id/snapshot",
        "GET",
        "/api/sessions/s1/snapshot",
        None,
    );
    events_of(d, &hub, "s1", "?since=2&limit=3");
    api(
        d,
        &hub,
        "GET /api/sessions/:id/events",
        "GET",
        "/api/sessions/s1/events?since=x",
        None,
    );

    // --- actions without a body, and their results
    let res = bare_post(hub.addr, "/api/sessions/s1/restart");
    let restarted = d.response("POST /api/sessions/:id/restart", &res);
    d.expect(
        res.status == 200,
        format!("bodiless restart: {} {restarted}", res.status),
    );
    let before = wait_session(&hub, "s1", |s| s["identity"]["state"] == "live");
    let restart = a.ask(
        d,
        json!({"type": "worker", "session": "s1", "action": "restart"}),
        &["accepted", "error"],
    );
    d.expect(
        restart["type"] == "accepted",
        format!("panel restart: {restart}"),
    );
    // `accepted` comes before the restart runs: wait for the new worker.
    let old_pid = before["process"]["pid"].clone();
    wait_session(&hub, "s1", |s| {
        s["process"]["pid"] != old_pid
            && s["process"]["state"] == "running"
            && s["identity"]["state"] == "live"
    });
    let res = bare_post(hub.addr, "/api/sessions/s1/stop");
    let stopped = d.response("POST /api/sessions/:id/stop", &res);
    d.expect(
        res.status == 200,
        format!("bodiless stop: {} {stopped}", res.status),
    );
    let res = bare_post(hub.addr, "/api/sessions/s1/start");
    let restarted = d.response("POST /api/sessions/:id/start", &res);
    d.expect(
        res.status == 200,
        format!("bodiless start: {} {restarted}", res.status),
    );
    wait_session(&hub, "s1", |s| s["identity"]["state"] == "live");
    a.ask(d, json!({"type": "ping"}), &["pong"]);
    let killed = a.ask(
        d,
        json!({"type": "worker", "session": "s1", "action": "force-kill"}),
        &["accepted", "error"],
    );
    d.expect(
        killed["result"]["how"].is_string(),
        format!("force-kill: {killed}"),
    );
    let exited = a.expect(d, "exited process", |f| {
        f["type"] == "process" && f["process"]["exited_at"].is_string()
    });
    d.expect(
        exited["process"]["signal"] == "SIGKILL",
        format!("a killed worker's signal: {}", exited["process"]["signal"]),
    );
    let res = bare_post(hub.addr, "/api/sessions/s1/force-kill");
    d.response("POST /api/sessions/:id/force-kill", &res);
    let res = post(
        &hub,
        "/api/sessions/s1/start",
        json!({"spec": {"threads": 2}}),
    );
    d.response("POST /api/sessions/:id/start", &res);
    let res = post(&hub, "/api/sessions/s1/start", json!({}));
    d.response("POST /api/sessions/:id/start", &res);
    let res = action(&hub, "s1", "stop");
    d.response("POST /api/sessions/:id/stop", &res);
    wait_session(&hub, "s1", |s| s["connected"] == false);

    // --- refusals of session commands: the session, and the request echoed
    let not_sent = a.ask(
        d,
        json!({"type": "input", "session": "s1", "request_id": "in-5",
            "content": [{"type": "text", "modality": "text", "raw": "nobody"}]}),
        &["error"],
    );
    d.expect(
        not_sent["error"] == "input_not_sent",
        format!("input to a stopped worker: {not_sent}"),
    );
    d.expect(
        not_sent["session"] == "s1",
        format!("input_not_sent names no session: {not_sent}"),
    );
    d.expect(
        not_sent["request"]["request_id"] == "in-5",
        format!("input_not_sent does not echo the request: {not_sent}"),
    );
    let no_signal = a.ask(
        d,
        json!({"type": "signal", "session": "s1", "operation": "cancel"}),
        &["error"],
    );
    d.expect(
        no_signal["session"] == "s1",
        format!("signal_not_sent names no session: {no_signal}"),
    );
    d.expect(
        no_signal["request"].is_object(),
        format!("signal_not_sent does not echo the request: {no_signal}"),
    );
    let no_history = a.ask(d, json!({"type": "history", "session": "s1"}), &["error"]);
    d.expect(
        no_history["session"] == "s1",
        format!("history refusal names no session: {no_history}"),
    );
    let unknown = a.ask(d, json!({"type": "logs", "session": "nobody"}), &["error"]);
    d.expect(
        unknown["error"] == "unknown_session",
        format!("logs of no session: {unknown}"),
    );
    a.ask(
        d,
        json!({"type": "subscribe", "session": "nobody"}),
        &["error"],
    );
    send_text(&mut a.ws, "not json".into());
    a.expect(d, "bad_json error", |f| f["error"] == "bad_json");
    send_json(&mut a.ws, json!({"v": 2, "type": "ping"}));
    a.expect(d, "unsupported_version error", |f| {
        f["error"] == "unsupported_version"
    });

    // --- deletion over both APIs
    a.send(json!({"type": "delete_session", "session": "s2"}));
    a.expect(d, "session_removed", |f| {
        f["type"] == "session_removed" && f["session"] == "s2"
    });
    api(
        d,
        &hub,
        "DELETE /api/sessions/:id",
        "DELETE",
        "/api/sessions/s1",
        None,
    );
    api(
        d,
        &hub,
        "DELETE /api/sessions/:id",
        "DELETE",
        "/api/sessions/s1",
        None,
    );
    a.expect(d, "session_removed s1", |f| {
        f["type"] == "session_removed" && f["session"] == "s1"
    });

    drop((b, c, e));
    drift.assert_none();
}

#[test]
fn confirmations_retired_without_a_decision_have_the_node_outcome() {
    let dir = TempDir::new("drift-retire");
    // A small transcript: a large event is kept as an omission record.
    let hub = hub_with(&dir, json!({"limits": {"transcriptBytes": 2048}}));
    let mut drift = Drift::default();
    let d = &mut drift;
    create_session(&hub, "raw");
    let (mut panel, _) = Panel::open(&hub, "panel", d);
    panel.ask(
        d,
        json!({"type": "subscribe", "session": "raw"}),
        &["subscribed"],
    );
    // a worker played by the test: identify, open a prompt, then vanish
    let mut events = worker_events(&hub, "raw");
    send_text(&mut events, envelope("raw", "w-1", 1, "ready", json!({})));
    wait_session(&hub, "raw", |s| s["identity"]["state"] == "live");
    let mut confirm = worker_confirm(&hub, "raw");
    send_text(
        &mut confirm,
        confirmation_request("raw", "w-1", "c-1", json!({"command": "true"})),
    );
    panel.expect(d, "open prompt", |f| {
        f["type"] == "confirmation" && f["open"] == true
    });
    drop(confirm);
    let closed = panel.expect(d, "retired prompt", |f| {
        f["type"] == "confirmation" && f["open"] == false
    });
    d.expect(
        closed["outcome"]["phase"].is_string() && closed["outcome"]["phase"] != "decided",
        format!("a retired prompt's outcome: {}", closed["outcome"]),
    );
    d.expect(
        closed["confirmation"]["state"] == "retired",
        format!(
            "a retired prompt's state: {}",
            closed["confirmation"]["state"]
        ),
    );
    // an event larger than the whole transcript: its omission record is
    // still a worker envelope to a Node client
    let big = json!({"text": "x".repeat(4096)});
    send_text(
        &mut events,
        envelope("raw", "w-1", 2, "model_response", big),
    );
    let omitted = panel.expect(d, "the large event", |f| {
        f["type"] == "event" && f["envelope"]["event"] == "model_response"
    });
    d.expect(
        omitted["hub_seq"] == 2,
        format!("large event: {}", omitted["hub_seq"]),
    );
    let page = events_of(d, &hub, "raw", "");
    let record = page["events"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["event"] == "model_response"))
        .cloned()
        .unwrap_or(Value::Null);
    d.expect(
        record["display_omitted"] == true,
        format!("omission record: {record}"),
    );
    // the worker's connection ends: the process-less session's frames
    drop(events);
    panel.expect(d, "disconnection", |f| {
        f["type"] == "connection" && f["connected"] == false
    });
    let res = hub.get("/api/sessions/raw/snapshot");
    let snapshot = d.response("GET /api/sessions/:id/snapshot", &res);
    d.expect(
        snapshot["files"] == json!({}),
        format!("snapshot of nothing: {snapshot}"),
    );
    drift.assert_none();
}

#[test]
fn headless_sessions_and_subagent_results_have_the_node_hubs_shape() {
    let dir = TempDir::new("drift-headless");
    let hub = hub_with(
        &dir,
        json!({"worker": {"stopTimeoutMs": 3000, "sigtermGraceMs": 2000, "sigkillGraceMs": 3000}}),
    );
    let mut drift = Drift::default();
    let d = &mut drift;
    create_session(&hub, "lead");
    let (mut panel, _) = Panel::open(&hub, "panel", d);
    let res = action(&hub, "lead", "start");
    d.response("POST /api/sessions/:id/start", &res);
    wait_session(&hub, "lead", |s| s["identity"]["state"] == "live");

    // the plan tool routes' results
    let replaced = reply_text(&hub, "lead", "/plan # one step");
    d.tool_result("plan/replace", &succeeded(&replaced, "plan/replace"));
    let read = reply_text(&hub, "lead", "/plan-read");
    d.tool_result("plan/read", &succeeded(&read, "plan/read"));

    let lines = run_tools(&hub, "lead", "/fork");
    let forked = succeeded(&lines[0], "subagent/clean-fork");
    d.tool_result("subagent/clean-fork", &forked);
    let child = forked["subagent_id"].as_str().unwrap().to_string();
    let described = wait_session(&hub, &child, |s| s["subagent"]["lifecycle"] == "ready");
    d.expect(
        described["subagent"]["parent"] == "lead",
        format!("subagent.parent: {}", described["subagent"]["parent"]),
    );
    panel.expect(d, "the child's description", |f| {
        f["type"] == "session" && f["session"]["session_id"] == child.as_str()
    });
    api(
        d,
        &hub,
        "GET /api/sessions/:id",
        "GET",
        &format!("/api/sessions/{child}"),
        None,
    );
    api(d, &hub, "GET /api/sessions", "GET", "/api/sessions", None);

    let lines = run_tools(&hub, "lead", "/receive");
    d.tool_result(
        "subagent/receive list",
        &succeeded(&lines[0], "subagent/receive"),
    );
    let lines = run_tools(&hub, "lead", &format!("/send {child} hello"));
    d.tool_result("subagent/send", &succeeded(&lines[0], "subagent/send"));
    let lines = run_tools(&hub, "lead", &format!("/receive {child}"));
    d.tool_result(
        "subagent/receive child",
        &succeeded(&lines[0], "subagent/receive"),
    );

    // the operator's policy over both APIs
    let route = "POST /api/sessions/:id/subagent-policy";
    let path = format!("/api/sessions/{child}/subagent-policy");
    api(
        d,
        &hub,
        route,
        "POST",
        &path,
        Some(json!({"policy": "deny"})),
    );
    api(
        d,
        &hub,
        route,
        "POST",
        &path,
        Some(json!({"policy": "sometimes"})),
    );
    api(
        d,
        &hub,
        route,
        "POST",
        "/api/sessions/lead/subagent-policy",
        Some(json!({"policy": "ask"})),
    );
    // a request the child's deny policy answers: closed with the Node
    // outcome, never shown decidable nor decided before the close (this hub
    // shows a prompt held for the worker's identity; see the differences in
    // docs/configuration.md)
    run_tools(&hub, "lead", &format!("/send {child} /run true"));
    let closed = panel.expect(d, "the child's closed prompt", |f| {
        f["type"] == "confirmation" && f["session"] == child.as_str() && f["open"] == false
    });
    d.expect(
        closed["outcome"] == json!({"phase": "decided", "detail": "denied"}),
        format!("policy outcome: {}", closed["outcome"]),
    );
    let shown = panel
        .seen_of("confirmation")
        .iter()
        .filter(|f| {
            f["session"] == child.as_str()
                && f["open"] == true
                && f["confirmation"]["state"] != "awaiting-identity"
        })
        .count();
    d.expect(
        shown == 0,
        format!("{shown} open frame(s) for a prompt the policy answered"),
    );
    panel.mark = panel.seen.len();
    send_json(
        &mut panel.ws,
        json!({"v": 1, "type": "subagent_policy", "session": child, "policy": "ask"}),
    );
    panel.expect(d, "policy accepted", |f| f["type"] == "accepted");
    // refused commands of a headless session
    let refused = panel.ask(
        d,
        json!({"type": "subscribe", "session": child}),
        &["error"],
    );
    d.expect(
        refused["session"] == child.as_str(),
        format!("headless refusal names no session: {refused}"),
    );
    api(
        d,
        &hub,
        "GET /api/sessions/:id/logs",
        "GET",
        &format!("/api/sessions/{child}/logs"),
        None,
    );
    api(
        d,
        &hub,
        "POST /api/sessions/:id/stop",
        "POST",
        &format!("/api/sessions/{child}/stop"),
        None,
    );
    api(
        d,
        &hub,
        "GET /api/sessions/:id/recovery",
        "GET",
        &format!("/api/sessions/{child}/recovery"),
        None,
    );
    api(
        d,
        &hub,
        "GET /api/subagents/recovery",
        "GET",
        "/api/subagents/recovery",
        None,
    );

    let lines = run_tools(&hub, "lead", &format!("/stop-child {child}"));
    d.tool_result("subagent/send stop", &succeeded(&lines[0], "subagent/send"));
    panel.expect(d, "the child's removal", |f| {
        f["type"] == "session_removed" && f["session"] == child.as_str()
    });
    let lines = run_tools(&hub, "lead", "/receive");
    d.tool_result(
        "subagent/receive list",
        &succeeded(&lines[0], "subagent/receive"),
    );
    drift.assert_none();
}

/// The configuration library's and the skill library's responses, and a
/// library session over both APIs, against the Node hub's shapes
/// (`hub/shared/configurations.ts`) and the seed's skill shapes.
#[test]
fn configuration_and_skill_responses_have_their_shapes() {
    let dir = TempDir::new("drift-library");
    let hub = TestHub::start(dir.path(), &[]);
    let mut drift = Drift::default();
    let d = &mut drift;

    let (_, meta) = api(d, &hub, "GET /api/meta", "GET", "/api/meta", None);
    for capability in ["configuration-library", "skill-library"] {
        d.expect(
            meta["capabilities"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c == capability)),
            format!("meta does not advertise {capability}"),
        );
    }
    let (_, list) = api(
        d,
        &hub,
        "GET /api/configurations",
        "GET",
        "/api/configurations",
        None,
    );
    d.expect(
        list["launch"] == json!(["docker", "local"]),
        format!("list: {list}"),
    );
    let route = "GET /api/configurations/:kind/template";
    for path in [
        "/api/configurations/launch/template",
        "/api/configurations/launch/template?source=docker",
        "/api/configurations/launch/template?source=deployment",
        "/api/configurations/worker/template?source=deployment",
        "/api/configurations/worker/template?source=docker",
    ] {
        api(d, &hub, route, "GET", path, None);
    }
    let route = "GET /api/configurations/:kind/:id";
    let (_, local) = api(
        d,
        &hub,
        route,
        "GET",
        "/api/configurations/launch/local",
        None,
    );
    let (_, worker) = api(
        d,
        &hub,
        route,
        "GET",
        "/api/configurations/worker/default",
        None,
    );
    api(
        d,
        &hub,
        route,
        "GET",
        "/api/configurations/worker/nope",
        None,
    );
    api(d, &hub, route, "GET", "/api/configurations/worker/..", None);
    let worker_text = worker["text"]
        .as_str()
        .unwrap_or_default()
        .replace("YOUR_PROVIDER:", "mock:")
        .replace("driver_model: YOUR_PROVIDER", "driver_model: mock");
    let route = "PUT /api/configurations/:kind/:id";
    let put = |d: &mut Drift, id: &str, body: Value| {
        api(
            d,
            &hub,
            route,
            "PUT",
            &format!("/api/configurations/worker/{id}"),
            Some(body),
        )
    };
    let (status, saved) = put(d, "mine", json!({"text": worker_text, "revision": null}));
    d.expect(status == 200, format!("create: {status} {saved}"));
    put(d, "mine", json!({"text": worker_text, "revision": null}));
    put(
        d,
        "mine",
        json!({"text": "a: [", "revision": saved["revision"]}),
    );
    let route = "POST /api/configurations/:kind/validate";
    api(
        d,
        &hub,
        route,
        "POST",
        "/api/configurations/worker/validate",
        Some(json!({"text": worker_text})),
    );
    api(
        d,
        &hub,
        route,
        "POST",
        "/api/configurations/launch/validate",
        Some(json!({"text": "{"})),
    );
    let route = "POST /api/configurations/preview";
    let (_, preview) = api(
        d,
        &hub,
        route,
        "POST",
        "/api/configurations/preview",
        Some(json!({"launch": local["text"]})),
    );
    d.expect(
        preview["endpoints"]["events"]
            .as_str()
            .is_some_and(|e| e.contains("/agent/SESSION_ID/events?token=SESSION_TOKEN")),
        format!("preview: {preview}"),
    );
    api(
        d,
        &hub,
        route,
        "POST",
        "/api/configurations/preview",
        Some(json!({"launch": 3})),
    );
    let route = "POST /api/configurations/:kind/:id/rename";
    let (_, renamed) = api(
        d,
        &hub,
        route,
        "POST",
        "/api/configurations/worker/mine/rename",
        Some(json!({"id": "ours", "revision": saved["revision"]})),
    );
    api(
        d,
        &hub,
        route,
        "POST",
        "/api/configurations/worker/ours/rename",
        Some(json!({"id": "default", "revision": renamed["revision"]})),
    );

    // A library session over REST and over the panel socket.
    let pair = json!({"launchConfig": "local", "workerConfig": "ours"});
    let (status, created) = api(
        d,
        &hub,
        "POST /api/sessions",
        "POST",
        "/api/sessions",
        Some(json!({"session": "lib", "spec": pair})),
    );
    d.expect(
        status == 201,
        format!("library session: {status} {created}"),
    );
    api(
        d,
        &hub,
        "POST /api/sessions",
        "POST",
        "/api/sessions",
        Some(json!({"session": "half", "spec": {"launchConfig": "local"}})),
    );
    let route = "POST /api/sessions/:id/configurations";
    api(
        d,
        &hub,
        route,
        "POST",
        "/api/sessions/lib/configurations",
        Some(json!({"launchConfig": "docker", "workerConfig": "ours"})),
    );
    api(
        d,
        &hub,
        route,
        "POST",
        "/api/sessions/lib/configurations",
        Some(json!({})),
    );
    api(
        d,
        &hub,
        route,
        "POST",
        "/api/sessions/ghost/configurations",
        Some(pair.clone()),
    );
    let (mut a, _) = Panel::open(&hub, "a", d);
    let frame = a.ask(
        d,
        json!({"type": "create_session", "session": "lib2", "spec": pair}),
        &["created"],
    );
    d.expect(
        frame["session"]["spec"]["workerConfig"] == "ours",
        format!("created: {frame}"),
    );
    a.ask(
        d,
        json!({"type": "create_session", "session": "lib3", "spec": {"launchConfig": "local", "workerConfig": "none"}}),
        &["error"],
    );
    let route = "DELETE /api/configurations/:kind/:id";
    api(
        d,
        &hub,
        route,
        "DELETE",
        "/api/configurations/worker/ours",
        Some(json!({"revision": "stale"})),
    );
    api(
        d,
        &hub,
        route,
        "DELETE",
        "/api/configurations/worker/ours",
        Some(json!({"revision": renamed["revision"]})),
    );

    // Skills: a good file, a malformed one, the template.
    let skills = dir.path().join("skills");
    std::fs::write(
        skills.join("good.yaml"),
        "name: good\ntitle: Good\nkeywords: [a]\ntext: 'Do it. {{input}}'\n",
    )
    .unwrap();
    std::fs::write(skills.join("bad.yaml"), "name: [").unwrap();
    let (_, list) = api(d, &hub, "GET /api/skills", "GET", "/api/skills", None);
    d.expect(list["errors"][0]["id"] == "bad", format!("skills: {list}"));
    api(
        d,
        &hub,
        "GET /api/skills/template",
        "GET",
        "/api/skills/template",
        None,
    );
    let route = "GET /api/skills/:id";
    api(d, &hub, route, "GET", "/api/skills/good", None);
    api(d, &hub, route, "GET", "/api/skills/bad", None);
    api(d, &hub, route, "GET", "/api/skills/missing", None);
    for i in 0..257 {
        std::fs::write(skills.join(format!("n{i}.yaml")), "name: [").unwrap();
    }
    api(d, &hub, "GET /api/skills", "GET", "/api/skills", None);
    drop(a);
    drift.assert_none();
}
