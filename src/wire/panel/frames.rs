//! Hub -> client: every server message as a `Value` (each led by
//! `"v": 1` and its `type`), and the frames that splice already serialized
//! transcript JSON verbatim (`subscribed`, `snapshot`, `event`), assembled
//! as text so an event is serialized once however many panels receive it.

use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::VERSION;
use crate::wire::jsonw;

/// `{"v":1,"type":<kind>}` followed by `fields`, in order.
fn message(kind: &str, fields: Vec<(&str, Value)>) -> Value {
    let mut map = Map::with_capacity(fields.len() + 2);
    map.insert("v".into(), json!(VERSION));
    map.insert("type".into(), json!(kind));
    for (key, value) in fields {
        map.insert(key.into(), value);
    }
    Value::Object(map)
}

/// Sent once per connection: hub metadata (including `transcript_epoch`),
/// every listed session's description, and the connection's
/// subscriptions (none yet).
pub fn welcome(hub_info: Value, sessions: Vec<Value>) -> Value {
    message(
        "welcome",
        vec![
            ("hub", hub_info),
            ("sessions", Value::Array(sessions)),
            ("subscriptions", json!([])),
        ],
    )
}

/// The full session list, on request.
pub fn sessions(list: Vec<Value>) -> Value {
    message("sessions", vec![("sessions", Value::Array(list))])
}

/// One session's description changed.
pub fn session(desc: Value) -> Value {
    message("session", vec![("session", desc)])
}

/// A session left the panel list.
pub fn session_removed(id: &str) -> Value {
    message("session_removed", vec![("session", json!(id))])
}

/// A session this client created.
pub fn created(desc: Value) -> Value {
    message("created", vec![("session", desc)])
}

/// Paging fields of a `subscribed` reply to `paged: true`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Paging {
    /// `true` on data pages, `false` on the final (empty) frame.
    pub replay_more: bool,
    /// Set on the first reply to `replace: true`; written only when true.
    pub replay_reset: bool,
}

/// A `subscribed` frame as text, the entries spliced verbatim (never
/// re-parsed). Fields in order: `session` (the description, see below),
/// `transcript`, `logs`, `log_meta`, `logs_dropped`, `logs_omitted`,
/// `latest`, `transcript_epoch`, `plan`, then for paged replies
/// `replay_more` and (only when true) `replay_reset`, then `request_id`
/// when given.
///
/// `session` carries the session description, where the seed says open
/// confirmations are read from ("subscribed's session"); the id is its
/// `session_id`. When `description` is not an object, `session` is
/// `{"session_id": <session>}` (only for measuring; every frame sent carries
/// the description, as Node clients replace theirs with it).
///
/// `logs` is the log tail object of [`log_tail`]: its `lines` (strings, as
/// Node clients read them) become `logs`, its `meta`, `dropped` and
/// `omitted` the three fields after it. `Value::Null` sends `logs: []` (data
/// pages; the final frame carries the tail). `plan` is left out when
/// `Value::Null` (panels treat an absent plan as "not sent").
///
/// For page planning, measure `overhead` with no entries, `latest:
/// u64::MAX` and the paging fields of the pages: the result bounds every
/// page's metadata.
#[allow(clippy::too_many_arguments)] // one argument per protocol field
pub fn subscribed(
    session: &str,
    transcript_entries: &[Arc<str>],
    logs: Value,
    latest: u64,
    epoch: &str,
    plan: Value,
    paging: Option<Paging>,
    request_id: Option<&str>,
    description: Value,
) -> String {
    let mut out = FrameText::new("subscribed");
    out.value("session", &described(session, description));
    out.raw_array("transcript", transcript_entries);
    match logs {
        Value::Object(tail) => {
            for (key, field) in [
                ("logs", "lines"),
                ("log_meta", "meta"),
                ("logs_dropped", "dropped"),
                ("logs_omitted", "omitted"),
            ] {
                out.value(key, tail.get(field).unwrap_or(&Value::Null));
            }
        }
        _ => out.value("logs", &json!([])),
    }
    out.value("latest", &json!(latest));
    out.value("transcript_epoch", &json!(epoch));
    if !plan.is_null() {
        out.value("plan", &plan);
    }
    if let Some(paging) = paging {
        out.value("replay_more", &json!(paging.replay_more));
        if paging.replay_reset {
            out.value("replay_reset", &json!(true));
        }
    }
    if let Some(id) = request_id {
        out.value("request_id", &json!(id));
    }
    out.finish()
}

/// A `snapshot` frame as text: `session` (the description, as in
/// [`subscribed`]) and `transcript` (entries spliced verbatim).
pub fn snapshot(session: &str, description: Value, transcript: &[Arc<str>]) -> String {
    let mut out = FrameText::new("snapshot");
    out.value("session", &described(session, description));
    out.raw_array("transcript", transcript);
    out.finish()
}

/// An `event` frame as text: `session` (the id), `hub_seq` (the entry's
/// `hub_sequence`; a transient reply such as history carries the current
/// sequence, which it does not consume) and `envelope`, spliced verbatim.
/// Serialize once per event and share the text with every subscriber.
pub fn event_frame(session: &str, hub_seq: u64, envelope_json: &str) -> String {
    let mut out = String::with_capacity(64 + session.len() + envelope_json.len());
    event_frame_head(&mut out, session, hub_seq);
    out.push_str(envelope_json);
    out.push('}');
    out
}

/// The text of an `event` frame before its envelope (which is followed by
/// the closing `}`).
pub fn event_frame_head(out: &mut String, session: &str, hub_seq: u64) {
    out.push_str("{\"v\":");
    jsonw::push_u64(out, VERSION);
    out.push_str(",\"type\":\"event\",\"session\":");
    jsonw::push_string(out, session);
    out.push_str(",\"hub_seq\":");
    jsonw::push_u64(out, hub_seq);
    out.push_str(",\"envelope\":");
}

/// `io::Write` into a `String` for `serde_json::to_writer` (it only ever
/// writes complete UTF-8 text).
struct FmtWriter<'a>(&'a mut String);

impl std::io::Write for FmtWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = std::str::from_utf8(buf)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        self.0.push_str(text);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A prompt opened (`open: true`) or closed; `outcome` (`{phase,
/// detail}`, see [`outcome`]) only when closing. Sent to every connected
/// panel.
pub fn confirmation(session: &str, open: bool, prompt: Value, outcome: Option<Value>) -> Value {
    let mut fields = vec![
        ("session", json!(session)),
        ("open", json!(open)),
        ("confirmation", prompt),
    ];
    if let Some(outcome) = outcome {
        fields.push(("outcome", outcome));
    }
    message("confirmation", fields)
}

/// The worker process record changed.
pub fn process(session: &str, process: Value) -> Value {
    message(
        "process",
        vec![("session", json!(session)), ("process", process)],
    )
}

/// The worker event connection opened or closed.
pub fn connection(session: &str, connected: bool, identity: Value) -> Value {
    message(
        "connection",
        vec![
            ("session", json!(session)),
            ("connected", json!(connected)),
            ("identity", identity),
        ],
    )
}

/// A payload's request record changed state.
pub fn request(session: &str, request: Value) -> Value {
    message(
        "request",
        vec![("session", json!(session)), ("request", request)],
    )
}

/// The outcome of a closing prompt as Node clients read it: `phase` is
/// `decided` (with the decision as `detail`) when it was answered, else why
/// it closed without an answer (`deadline`, `disconnected`, `shutdown`,
/// `protocol-error`, `stale`), `detail` saying more.
pub fn outcome(decision: Option<&str>, phase: &str, detail: &str) -> Value {
    match decision {
        Some(decision) => json!({"phase": "decided", "detail": decision}),
        None => json!({"phase": phase, "detail": detail}),
    }
}

/// A log tail for [`logs`] and [`subscribed`]: `lines` (texts), `meta`
/// (`{stream, at}` per line), `dropped` (records evicted from the ring) and
/// `omitted` (older retained lines left out by the line or byte bound).
pub fn log_tail(lines: Vec<String>, meta: Vec<Value>, dropped: u64, omitted: u64) -> Value {
    json!({"lines": lines, "meta": meta, "dropped": dropped, "omitted": omitted})
}

/// A `logs` reply: `lines` (texts, oldest first), `dropped`, `log_path`,
/// then this hub's `omitted` and `line_meta` (`{stream, at}` per line), from
/// a [`log_tail`] object.
pub fn logs(session: &str, tail: Value, log_path: Option<&str>) -> Value {
    let field = |key: &str| tail.get(key).cloned().unwrap_or(Value::Null);
    message(
        "logs",
        vec![
            ("session", json!(session)),
            ("lines", field("lines")),
            ("dropped", field("dropped")),
            ("log_path", json!(log_path)),
            ("omitted", field("omitted")),
            ("line_meta", field("meta")),
        ],
    )
}

/// Members `accepted` keeps for itself; `extra` cannot override them.
const ACCEPTED_RESERVED: &[&str] = &["v", "type", "action", "session", "request_id"];

/// A command was accepted: `action`, `session` when given, then the
/// members of `extra` (an object's members merged in, except `v`, `type`,
/// `action`, `session` and `request_id`; `null` adds nothing; any other
/// value goes under `result`), then `request_id` when given.
pub fn accepted(
    action: &str,
    session: Option<&str>,
    extra: Value,
    request_id: Option<&str>,
) -> Value {
    let mut fields = vec![("action", json!(action))];
    if let Some(session) = session {
        fields.push(("session", json!(session)));
    }
    let mut msg = message("accepted", fields);
    if let Value::Object(map) = &mut msg {
        match extra {
            Value::Null => {}
            Value::Object(extra) => {
                for (key, value) in extra {
                    if !ACCEPTED_RESERVED.contains(&key.as_str()) {
                        map.insert(key, value);
                    }
                }
            }
            other => {
                map.insert("result".into(), other);
            }
        }
        if let Some(id) = request_id {
            map.insert("request_id".into(), json!(id));
        }
    }
    msg
}

/// A refused command: `error` (the code), `message`, and `request` (a
/// bounded diagnostic of what was refused, such as its `request_id`) when
/// given.
pub fn error(code: &str, message: &str, request: Option<Value>) -> Value {
    error_with(code, message, request, Vec::new())
}

/// [`error`] followed by `fields` (`session`, `action`, `result`,
/// `confirmation_id`: what the refused command named, at the top level as
/// Node clients read it).
pub fn error_with(
    code: &str,
    message: &str,
    request: Option<Value>,
    fields: Vec<(&str, Value)>,
) -> Value {
    let mut all = vec![("error", json!(code)), ("message", json!(message))];
    if let Some(request) = request {
        all.push(("request", request));
    }
    all.extend(fields);
    self::message("error", all)
}

/// Heartbeat reply; `at` is the hub's time (RFC 3339).
pub fn pong(at: &str) -> Value {
    message("pong", vec![("at", json!(at))])
}

/// The latest persisted session plan.
pub fn plan(session: &str, plan: Value) -> Value {
    message("plan", vec![("session", json!(session)), ("plan", plan)])
}

/// The description for a `session` field; a stand-in naming the session
/// when the caller has none.
fn described(session: &str, description: Value) -> Value {
    match description {
        Value::Object(_) => description,
        _ => json!({ "session_id": session }),
    }
}

/// A message assembled as text, so pre-serialized JSON can be spliced in.
struct FrameText {
    buf: String,
}

impl FrameText {
    fn new(kind: &str) -> FrameText {
        let mut out = FrameText {
            buf: String::with_capacity(256),
        };
        out.open(kind);
        out
    }

    /// `{"v":1,"type":<kind>` (`kind` and keys are plain ASCII names).
    fn open(&mut self, kind: &str) {
        let _ = write!(self.buf, "{{\"v\":{VERSION},\"type\":");
        let _ = serde_json::to_writer(&mut FmtWriter(&mut self.buf), kind);
    }

    fn key(&mut self, key: &str) {
        self.buf.push(',');
        let _ = serde_json::to_writer(&mut FmtWriter(&mut self.buf), key);
        self.buf.push(':');
    }

    fn value(&mut self, key: &str, value: &Value) {
        self.key(key);
        let _ = write!(self.buf, "{value}");
    }

    fn raw_array(&mut self, key: &str, items: &[Arc<str>]) {
        self.key(key);
        let len: usize = items.iter().map(|e| e.len() + 1).sum();
        self.buf.reserve(len + 1);
        self.buf.push('[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                self.buf.push(',');
            }
            self.buf.push_str(item);
        }
        self.buf.push(']');
    }

    fn finish(mut self) -> String {
        self.buf.push('}');
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Value {
        serde_json::from_str(text).expect("valid JSON")
    }

    #[test]
    fn value_builders_carry_v1_and_their_fields() {
        let desc = json!({"session_id": "s", "confirmations": []});
        let cases = vec![
            (
                welcome(json!({"transcript_epoch": "e"}), vec![desc.clone()]),
                "welcome",
                json!({"hub": {"transcript_epoch": "e"}, "sessions": [desc], "subscriptions": []}),
            ),
            (
                sessions(vec![desc.clone()]),
                "sessions",
                json!({"sessions": [desc]}),
            ),
            (session(desc.clone()), "session", json!({"session": desc})),
            (
                session_removed("s"),
                "session_removed",
                json!({"session": "s"}),
            ),
            (created(desc.clone()), "created", json!({"session": desc})),
            (
                confirmation("s", true, json!({"confirmation_id": "c"}), None),
                "confirmation",
                json!({"session": "s", "open": true, "confirmation": {"confirmation_id": "c"}}),
            ),
            (
                confirmation(
                    "s",
                    false,
                    json!({}),
                    Some(outcome(Some("denied"), "x", "y")),
                ),
                "confirmation",
                json!({"session": "s", "open": false, "confirmation": {},
                    "outcome": {"phase": "decided", "detail": "denied"}}),
            ),
            (
                process("s", json!({"pid": 4})),
                "process",
                json!({"session": "s", "process": {"pid": 4}}),
            ),
            (
                connection("s", true, json!({"state": "live"})),
                "connection",
                json!({"session": "s", "connected": true, "identity": {"state": "live"}}),
            ),
            (
                request("s", json!({"state": "sent"})),
                "request",
                json!({"session": "s", "request": {"state": "sent"}}),
            ),
            (
                logs(
                    "s",
                    log_tail(
                        vec!["x".into()],
                        vec![json!({"stream": "stdout", "at": "t"})],
                        2,
                        3,
                    ),
                    Some("/l"),
                ),
                "logs",
                json!({"session": "s", "lines": ["x"], "dropped": 2, "log_path": "/l",
                    "omitted": 3, "line_meta": [{"stream": "stdout", "at": "t"}]}),
            ),
            (
                error_with(
                    "worker_action_failed",
                    "no",
                    None,
                    vec![("session", json!("s")), ("action", json!("start"))],
                ),
                "error",
                json!({"error": "worker_action_failed", "message": "no", "session": "s",
                    "action": "start"}),
            ),
            (
                error("bad_message", "nope", None),
                "error",
                json!({"error": "bad_message", "message": "nope"}),
            ),
            (
                error("unknown_session", "no", Some(json!({"request_id": "r"}))),
                "error",
                json!({"error": "unknown_session", "message": "no",
                    "request": {"request_id": "r"}}),
            ),
            (
                pong("2026-01-01T00:00:00.000Z"),
                "pong",
                json!({"at": "2026-01-01T00:00:00.000Z"}),
            ),
            (
                plan(
                    "s",
                    json!({"markdown": "", "revision": 0, "updated_at": null}),
                ),
                "plan",
                json!({"session": "s",
                    "plan": {"markdown": "", "revision": 0, "updated_at": null}}),
            ),
        ];
        for (msg, kind, fields) in cases {
            let mut expected = json!({"v": 1, "type": kind});
            for (k, v) in fields.as_object().unwrap() {
                expected[k] = v.clone();
            }
            assert_eq!(msg, expected);
            // v and type come first on the wire
            let text = msg.to_string();
            assert!(
                text.starts_with(&format!("{{\"v\":1,\"type\":\"{kind}\"")),
                "{text}"
            );
        }
    }

    #[test]
    fn accepted_merges_extra() {
        assert_eq!(
            accepted(
                "input",
                Some("s"),
                json!({"request_id": "x", "v": 9, "n": 1}),
                Some("r")
            ),
            json!({"v": 1, "type": "accepted", "action": "input", "session": "s", "n": 1,
                "request_id": "r"})
        );
        assert_eq!(
            accepted("ping", None, Value::Null, None),
            json!({"v": 1, "type": "accepted", "action": "ping"})
        );
        assert_eq!(
            accepted("start", Some("s"), json!([1]), None),
            json!({"v": 1, "type": "accepted", "action": "start", "session": "s",
                "result": [1]})
        );
    }

    fn entries(list: &[&str]) -> Vec<Arc<str>> {
        list.iter().map(|s| Arc::<str>::from(*s)).collect()
    }

    #[test]
    fn subscribed_splices_entries_verbatim() {
        // deliberately non-canonical spacing: it must survive byte for byte
        let raw = entries(&[
            r#"{"hub_sequence": 1,  "event":"ready"}"#,
            r#"{"b":[1, 2]}"#,
        ]);
        let desc = json!({"session_id": "s", "confirmations": [{"confirmation_id": "c"}]});
        let plan_v = json!({"markdown": "# p", "revision": 2, "updated_at": null});
        let text = subscribed(
            "s",
            &raw,
            log_tail(
                vec!["l".into()],
                vec![json!({"stream": "stderr", "at": "t"})],
                4,
                1,
            ),
            2,
            "epoch-1",
            plan_v.clone(),
            Some(Paging {
                replay_more: true,
                replay_reset: true,
            }),
            Some("req"),
            desc.clone(),
        );
        assert!(
            text.contains(&format!("\"transcript\":[{},{}]", raw[0], raw[1])),
            "{text}"
        );
        assert_eq!(
            parsed(&text),
            json!({"v": 1, "type": "subscribed", "session": desc,
                "transcript": [{"hub_sequence": 1, "event": "ready"}, {"b": [1, 2]}],
                "logs": ["l"], "log_meta": [{"stream": "stderr", "at": "t"}],
                "logs_dropped": 4, "logs_omitted": 1, "latest": 2,
                "transcript_epoch": "epoch-1", "plan": plan_v,
                "replay_more": true, "replay_reset": true, "request_id": "req"})
        );
        // legacy: no paging fields; replay_reset only when true
        let legacy = parsed(&subscribed(
            "s",
            &[],
            json!([]),
            0,
            "e",
            json!({}),
            None,
            None,
            desc.clone(),
        ));
        assert!(legacy.get("replay_more").is_none() && legacy.get("replay_reset").is_none());
        assert_eq!(legacy["transcript"], json!([]));
        let page = parsed(&subscribed(
            "s",
            &[],
            json!([]),
            0,
            "e",
            json!({}),
            Some(Paging {
                replay_more: false,
                replay_reset: false,
            }),
            None,
            desc,
        ));
        assert_eq!(page["replay_more"], json!(false));
        assert!(page.get("replay_reset").is_none());
        // no description: `session` still names the session; null logs are an
        // empty list, a null plan is left out
        let bare = parsed(&subscribed(
            "s",
            &[],
            Value::Null,
            5,
            "e",
            Value::Null,
            None,
            None,
            Value::Null,
        ));
        assert_eq!(bare["session"], json!({"session_id": "s"}));
        assert_eq!(bare["logs"], json!([]));
        assert!(bare.get("plan").is_none());
    }

    #[test]
    fn snapshot_and_event_frames() {
        let raw = entries(&[r#"{"x":"\u00e9"}"#]);
        let text = snapshot("s", json!({"session_id": "s"}), &raw);
        assert!(text.contains(r#""transcript":[{"x":"\u00e9"}]"#));
        assert_eq!(
            parsed(&text),
            json!({"v": 1, "type": "snapshot", "session": {"session_id": "s"},
                "transcript": [{"x": "é"}]})
        );
        let text = event_frame("s\"q", 9, r#"{"event":"ready" }"#);
        assert!(
            text.ends_with(r#","envelope":{"event":"ready" }}"#),
            "{text}"
        );
        assert_eq!(
            parsed(&text),
            json!({"v": 1, "type": "event", "session": "s\"q", "hub_seq": 9,
                "envelope": {"event": "ready"}})
        );
        assert_eq!(parsed(&event_frame("s", 0, "{}"))["hub_seq"], json!(0));
        assert_eq!(
            outcome(None, "deadline", "too late"),
            json!({"phase": "deadline", "detail": "too late"})
        );
    }
}
