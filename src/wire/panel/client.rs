//! Client -> hub: parsing one panel text frame into a [`ClientMsg`] (or a
//! [`PanelError`] with a stable code and a bounded message), the typed
//! worker actions, confirmation decisions and operator policies, and the
//! per-type field access that names the offending field.

use std::fmt;

use serde_json::{Map, Value};

use super::code;
use crate::wire::ids;
use crate::wire::worker::display::{describe, kind, quote};

/// Longest `request_id` accepted (and echoed), UTF-8 bytes; the same rule
/// as payload request ids.
pub const MAX_REQUEST_ID_BYTES: usize = crate::wire::worker::payload::MAX_REQUEST_ID_BYTES;

/// A `worker` message's action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerAction {
    Start,
    Stop,
    Restart,
    ForceKill,
}

impl WorkerAction {
    pub const ALL: [WorkerAction; 4] = [
        WorkerAction::Start,
        WorkerAction::Stop,
        WorkerAction::Restart,
        WorkerAction::ForceKill,
    ];

    /// The wire spelling (`"force-kill"` for [`WorkerAction::ForceKill`]).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Stop => "stop",
            Self::Restart => "restart",
            Self::ForceKill => "force-kill",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.as_str() == s)
    }
}

/// A `confirmation` message's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Approved,
    Denied,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approved => "approved",
            Self::Denied => "denied",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "approved" => Some(Self::Approved),
            "denied" => Some(Self::Denied),
            _ => None,
        }
    }
}

/// Headless confirmation policies `subagent_policy` may select.
pub const POLICIES: &[&str] = &["ask", "deny", "approve"];

/// One parsed client message.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientMsg {
    Subscribe {
        session: String,
        since: u64,
        paged: bool,
        replace: bool,
        request_id: Option<String>,
    },
    Unsubscribe {
        session: String,
    },
    ListSessions,
    CreateSession {
        session: String,
        spec: Option<Value>,
    },
    DeleteSession {
        session: String,
    },
    Worker {
        session: String,
        action: WorkerAction,
        spec: Option<Value>,
    },
    /// `input` is the whole message object minus `v`, `type` and `session`
    /// (`operation`, `content`, `request_id`, `options`, ... and any other
    /// member), for the payload builder to validate.
    Input {
        session: String,
        input: Value,
    },
    History {
        session: String,
        request_id: Option<String>,
        start: Option<Value>,
        step: Option<Value>,
        limit: Option<Value>,
    },
    Signal {
        session: String,
        operation: String,
        run_id: Option<String>,
    },
    Confirmation {
        session: String,
        confirmation_id: String,
        decision: Decision,
        reason: Option<String>,
        request_id: Option<String>,
    },
    Logs {
        session: String,
        limit: Option<u64>,
    },
    StatusSnapshot {
        session: String,
        since: u64,
    },
    Ping,
    SubagentPolicy {
        session: String,
        policy: String,
        request_id: Option<String>,
    },
    /// An unknown `type`: ignored by the hub (additive protocol), no reply.
    Unknown {
        kind: String,
    },
}

impl ClientMsg {
    /// The message's wire `type`.
    pub fn kind(&self) -> &str {
        match self {
            Self::Subscribe { .. } => "subscribe",
            Self::Unsubscribe { .. } => "unsubscribe",
            Self::ListSessions => "list_sessions",
            Self::CreateSession { .. } => "create_session",
            Self::DeleteSession { .. } => "delete_session",
            Self::Worker { .. } => "worker",
            Self::Input { .. } => "input",
            Self::History { .. } => "history",
            Self::Signal { .. } => "signal",
            Self::Confirmation { .. } => "confirmation",
            Self::Logs { .. } => "logs",
            Self::StatusSnapshot { .. } => "status_snapshot",
            Self::Ping => "ping",
            Self::SubagentPolicy { .. } => "subagent_policy",
            Self::Unknown { kind } => kind,
        }
    }

    /// The `request_id` the client gave the message, for echoing in an
    /// error (an input's is inside its `input` object).
    pub fn request_id(&self) -> Option<&str> {
        match self {
            Self::Subscribe { request_id, .. }
            | Self::History { request_id, .. }
            | Self::Confirmation { request_id, .. }
            | Self::SubagentPolicy { request_id, .. } => request_id.as_deref(),
            Self::Input { input, .. } => input
                .get("request_id")
                .and_then(Value::as_str)
                .filter(|id| valid_request_id(id)),
            _ => None,
        }
    }

    /// Whether the message may name a headless session: listing and
    /// describing it, answering its confirmations, setting its operator
    /// policy, and dropping a subscription. Everything else (subscription
    /// and replay, input and history, signals, worker control, logs,
    /// snapshots, deletion, configuration replacement) is refused with
    /// `headless_restricted`.
    pub fn allowed_for_headless(&self) -> bool {
        matches!(
            self,
            Self::Confirmation { .. }
                | Self::SubagentPolicy { .. }
                | Self::Unsubscribe { .. }
                | Self::ListSessions
                | Self::Ping
                | Self::Unknown { .. }
        )
    }

    /// The session the message names, if it names one.
    pub fn session(&self) -> Option<&str> {
        match self {
            Self::Subscribe { session, .. }
            | Self::Unsubscribe { session }
            | Self::CreateSession { session, .. }
            | Self::DeleteSession { session }
            | Self::Worker { session, .. }
            | Self::Input { session, .. }
            | Self::History { session, .. }
            | Self::Signal { session, .. }
            | Self::Confirmation { session, .. }
            | Self::Logs { session, .. }
            | Self::StatusSnapshot { session, .. }
            | Self::SubagentPolicy { session, .. } => Some(session),
            Self::ListSessions | Self::Ping | Self::Unknown { .. } => None,
        }
    }
}

/// Why a client frame was refused: a protocol error code and a bounded,
/// human-readable message (never the offending frame itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PanelError {
    pub code: &'static str,
    pub message: String,
}

impl PanelError {
    fn new(code: &'static str, message: impl Into<String>) -> PanelError {
        PanelError {
            code,
            message: message.into(),
        }
    }

    fn bad(message: impl Into<String>) -> PanelError {
        PanelError::new(code::BAD_MESSAGE, message)
    }
}

impl fmt::Display for PanelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for PanelError {}

/// Parses one text frame.
///
/// Order of checks: not JSON -> `bad_json`; not an object -> `bad_message`;
/// `v` present and not the number 1 -> `unsupported_version` (a missing `v`
/// means 1, as Node clients may leave it out); `type` missing
/// or not a string -> `bad_message`; an unknown `type` -> [`ClientMsg::Unknown`]
/// (its fields are not looked at); a known type with a missing or ill-typed
/// required field, or an ill-typed optional one, -> `bad_message` naming the
/// field (`create_session` with a missing, non-string or invalid id ->
/// `invalid_session`). Unknown fields are ignored. `null` counts as absent
/// for optional fields.
///
/// On error, the frame's top-level `request_id` is returned for echoing when
/// it is a string of 1 to [`MAX_REQUEST_ID_BYTES`] bytes (a longer or
/// ill-typed one is not echoed: diagnostics stay bounded).
pub fn parse_client(text: &str) -> Result<ClientMsg, (PanelError, Option<String>)> {
    let value: Value = serde_json::from_str(text).map_err(|e| {
        (
            PanelError::new(code::BAD_JSON, format!("the message is not JSON: {e}")),
            None,
        )
    })?;
    let Value::Object(obj) = value else {
        let found = kind(&value);
        return Err((
            PanelError::bad(format!(
                "a panel message must be a JSON object, found {found}"
            )),
            None,
        ));
    };
    let request_id = match obj.get("request_id") {
        Some(Value::String(id)) if valid_request_id(id) => Some(id.clone()),
        _ => None,
    };
    parse_object(obj).map_err(|e| (e, request_id))
}

fn parse_object(mut obj: Map<String, Value>) -> Result<ClientMsg, PanelError> {
    match obj.get("v") {
        Some(v) if v.as_f64() == Some(1.0) => {}
        None => {}
        Some(v) => {
            return Err(PanelError::new(
                code::UNSUPPORTED_VERSION,
                format!(
                    "unsupported protocol version {}; this hub speaks version 1",
                    describe(v)
                ),
            ))
        }
    }
    let kind_str = match obj.get("type") {
        Some(Value::String(s)) => s.clone(),
        None => return Err(PanelError::bad("the message has no \"type\"")),
        Some(other) => {
            return Err(PanelError::bad(format!(
                "\"type\" must be a string, found {}",
                kind(other)
            )))
        }
    };
    let f = Fields {
        obj: &obj,
        msg: match KNOWN_TYPES.iter().find(|t| **t == kind_str) {
            Some(t) => t,
            None => return Ok(ClientMsg::Unknown { kind: kind_str }),
        },
    };
    let msg = match f.msg {
        "subscribe" => ClientMsg::Subscribe {
            session: f.session()?,
            since: f.opt_count("since")?.unwrap_or(0),
            paged: f.opt_bool("paged")?.unwrap_or(false),
            replace: f.opt_bool("replace")?.unwrap_or(false),
            request_id: f.opt_request_id()?,
        },
        "unsubscribe" => ClientMsg::Unsubscribe {
            session: f.session()?,
        },
        "list_sessions" => ClientMsg::ListSessions,
        "create_session" => ClientMsg::CreateSession {
            session: f.new_session()?,
            spec: f.opt_value("spec"),
        },
        "delete_session" => ClientMsg::DeleteSession {
            session: f.session()?,
        },
        "worker" => {
            let session = f.session()?;
            let action = f.req_str("action")?;
            let action = WorkerAction::parse(&action)
                .ok_or_else(|| f.one_of("action", "start, stop, restart, force-kill", &action))?;
            ClientMsg::Worker {
                session,
                action,
                spec: f.opt_value("spec"),
            }
        }
        "input" => {
            let session = f.session()?;
            obj.shift_remove("v");
            obj.shift_remove("type");
            obj.shift_remove("session");
            ClientMsg::Input {
                session,
                input: Value::Object(obj),
            }
        }
        "history" => ClientMsg::History {
            session: f.session()?,
            request_id: f.opt_request_id()?,
            start: f.opt_value("start"),
            step: f.opt_value("step"),
            limit: f.opt_value("limit"),
        },
        "signal" => ClientMsg::Signal {
            session: f.session()?,
            operation: f.req_str("operation")?,
            run_id: f.opt_str("run_id")?,
        },
        "confirmation" => {
            let session = f.session()?;
            let confirmation_id = f.req_str("confirmation_id")?;
            let decision = f.req_str("decision")?;
            let decision = Decision::parse(&decision)
                .ok_or_else(|| f.one_of("decision", "approved, denied", &decision))?;
            ClientMsg::Confirmation {
                session,
                confirmation_id,
                decision,
                reason: f.opt_str("reason")?,
                request_id: f.opt_request_id()?,
            }
        }
        "logs" => ClientMsg::Logs {
            session: f.session()?,
            limit: f.opt_count("limit")?,
        },
        "status_snapshot" => ClientMsg::StatusSnapshot {
            session: f.session()?,
            since: f.opt_count("since")?.unwrap_or(0),
        },
        "ping" => ClientMsg::Ping,
        "subagent_policy" => {
            let session = f.session()?;
            let policy = f.req_str("policy")?;
            if !POLICIES.contains(&policy.as_str()) {
                let mut err = f.one_of("policy", "ask, deny, approve", &policy);
                err.code = code::INVALID_POLICY;
                return Err(err);
            }
            ClientMsg::SubagentPolicy {
                session,
                policy,
                request_id: f.opt_request_id()?,
            }
        }
        _ => return Ok(ClientMsg::Unknown { kind: kind_str }),
    };
    Ok(msg)
}

/// Every `type` [`parse_client`] understands.
const KNOWN_TYPES: &[&str] = &[
    "subscribe",
    "unsubscribe",
    "list_sessions",
    "create_session",
    "delete_session",
    "worker",
    "input",
    "history",
    "signal",
    "confirmation",
    "logs",
    "status_snapshot",
    "ping",
    "subagent_policy",
];

/// Longest string member [`echo`] repeats, UTF-8 bytes.
pub const ECHO_STRING_BYTES: usize = 256;

/// The bounded echo of a refused message for an error's `request`: its
/// top-level members whose values are `null`, booleans, numbers or strings
/// of at most [`ECHO_STRING_BYTES`] bytes, in the message's order. Content,
/// specs, options and long strings are left out, so an echo stays small
/// whatever was sent. `None` when `text` is not a JSON object.
pub fn echo(text: &str) -> Option<Value> {
    let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(text) else {
        return None;
    };
    let kept = obj.into_iter().filter(|(_, value)| match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => true,
        Value::String(s) => s.len() <= ECHO_STRING_BYTES,
        Value::Array(_) | Value::Object(_) => false,
    });
    Some(Value::Object(kept.collect()))
}

fn valid_request_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_REQUEST_ID_BYTES
}

/// Field access for one message of a known type; errors name the type and
/// the field.
struct Fields<'a> {
    obj: &'a Map<String, Value>,
    msg: &'static str,
}

impl Fields<'_> {
    /// A present, non-null member.
    fn get(&self, field: &str) -> Option<&Value> {
        self.obj.get(field).filter(|v| !v.is_null())
    }

    fn missing(&self, field: &str) -> PanelError {
        PanelError::bad(format!("{}: \"{field}\" is required", self.msg))
    }

    fn wrong(&self, field: &str, expected: &str, found: &Value) -> PanelError {
        PanelError::bad(format!(
            "{}: \"{field}\" must be {expected}, found {}",
            self.msg,
            kind(found)
        ))
    }

    fn one_of(&self, field: &str, allowed: &str, found: &str) -> PanelError {
        PanelError::bad(format!(
            "{}: \"{field}\" must be one of {allowed}, found {}",
            self.msg,
            quote(found)
        ))
    }

    fn req_str(&self, field: &str) -> Result<String, PanelError> {
        match self.get(field) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => Err(self.wrong(field, "a string", other)),
            None => Err(self.missing(field)),
        }
    }

    fn session(&self) -> Result<String, PanelError> {
        self.req_str("session")
    }

    /// The id of a session to create: present, a string, and valid for a
    /// new session; anything else is `invalid_session`. A well-formed id
    /// in the reserved `subagent-` namespace passes here: the dispatcher
    /// answers `headless_restricted` when it names a headless child and
    /// `invalid_session` otherwise.
    fn new_session(&self) -> Result<String, PanelError> {
        let invalid = |m: String| PanelError::new(code::INVALID_SESSION, m);
        match self.get("session") {
            Some(Value::String(s)) if ids::is_valid_id(s) => Ok(s.clone()),
            Some(Value::String(_)) => Err(invalid(format!(
                "{}: invalid session: {}",
                self.msg,
                ids::ID_GRAMMAR
            ))),
            Some(other) => Err(invalid(format!(
                "{}: \"session\" must be a string, found {}",
                self.msg,
                kind(other)
            ))),
            None => Err(invalid(format!("{}: \"session\" is required", self.msg))),
        }
    }

    fn opt_str(&self, field: &str) -> Result<Option<String>, PanelError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.wrong(field, "a string", other)),
        }
    }

    fn opt_request_id(&self) -> Result<Option<String>, PanelError> {
        let id = self.opt_str("request_id")?;
        match id {
            Some(id) if !valid_request_id(&id) => Err(PanelError::bad(format!(
                "{}: \"request_id\" must be 1 to {MAX_REQUEST_ID_BYTES} bytes, found {}",
                self.msg,
                id.len()
            ))),
            id => Ok(id),
        }
    }

    fn opt_bool(&self, field: &str) -> Result<Option<bool>, PanelError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.wrong(field, "a boolean", other)),
        }
    }

    fn opt_count(&self, field: &str) -> Result<Option<u64>, PanelError> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => match as_count(v) {
                Some(n) => Ok(Some(n)),
                None => Err(PanelError::bad(format!(
                    "{}: \"{field}\" must be a non-negative integer, found {}",
                    self.msg,
                    describe(v)
                ))),
            },
        }
    }

    fn opt_value(&self, field: &str) -> Option<Value> {
        self.get(field).cloned()
    }
}

/// A non-negative integer: a JSON integer, or an integral number in float
/// spelling (`5.0`, `5e0`) up to 2^53 - 1, as a JavaScript client means it.
fn as_count(v: &Value) -> Option<u64> {
    const MAX_SAFE: f64 = 9_007_199_254_740_991.0;
    if let Some(n) = v.as_u64() {
        return Some(n);
    }
    match v.as_f64() {
        Some(f) if v.is_f64() && f.fract() == 0.0 && (0.0..=MAX_SAFE).contains(&f) => {
            Some(f as u64)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::util::testkit::Rng;

    fn parse(v: Value) -> Result<ClientMsg, (PanelError, Option<String>)> {
        parse_client(&v.to_string())
    }

    fn code_of(text: &str) -> &'static str {
        match parse_client(text) {
            Err((e, _)) => e.code,
            Ok(m) => panic!("expected an error for {text}, got {m:?}"),
        }
    }

    fn err_of(v: Value) -> PanelError {
        parse(v).expect_err("expected an error").0
    }

    // ----- parsing: every message, all fields and defaults -----

    #[test]
    fn subscribe_all_fields_and_defaults() {
        let m = parse(
            json!({"v": 1, "type": "subscribe", "session": "demo", "since": 7,
            "paged": true, "replace": true, "request_id": "r1"}),
        )
        .unwrap();
        assert_eq!(
            m,
            ClientMsg::Subscribe {
                session: "demo".into(),
                since: 7,
                paged: true,
                replace: true,
                request_id: Some("r1".into())
            }
        );
        let m = parse(json!({"v": 1, "type": "subscribe", "session": "demo"})).unwrap();
        assert_eq!(
            m,
            ClientMsg::Subscribe {
                session: "demo".into(),
                since: 0,
                paged: false,
                replace: false,
                request_id: None
            }
        );
        // null is absent
        let m = parse(
            json!({"v": 1, "type": "subscribe", "session": "demo", "since": null,
            "paged": null, "request_id": null}),
        )
        .unwrap();
        assert!(matches!(
            m,
            ClientMsg::Subscribe {
                since: 0,
                paged: false,
                request_id: None,
                ..
            }
        ));
    }

    #[test]
    fn simple_messages() {
        assert_eq!(
            parse(json!({"v": 1, "type": "unsubscribe", "session": "a"})).unwrap(),
            ClientMsg::Unsubscribe {
                session: "a".into()
            }
        );
        assert_eq!(
            parse(json!({"v": 1, "type": "list_sessions"})).unwrap(),
            ClientMsg::ListSessions
        );
        assert_eq!(
            parse(json!({"v": 1, "type": "ping"})).unwrap(),
            ClientMsg::Ping
        );
        assert_eq!(
            parse(json!({"v": 1, "type": "delete_session", "session": "a"})).unwrap(),
            ClientMsg::DeleteSession {
                session: "a".into()
            }
        );
    }

    #[test]
    fn create_session_with_and_without_spec() {
        assert_eq!(
            parse(json!({"v": 1, "type": "create_session", "session": "new-1",
                "spec": {"provider": "mock"}}))
            .unwrap(),
            ClientMsg::CreateSession {
                session: "new-1".into(),
                spec: Some(json!({"provider": "mock"}))
            }
        );
        assert_eq!(
            parse(json!({"v": 1, "type": "create_session", "session": "new-1"})).unwrap(),
            ClientMsg::CreateSession {
                session: "new-1".into(),
                spec: None
            }
        );
        for bad in [
            json!({"v": 1, "type": "create_session"}),
            json!({"v": 1, "type": "create_session", "session": 5}),
            json!({"v": 1, "type": "create_session", "session": ""}),
            json!({"v": 1, "type": "create_session", "session": "a b"}),
            json!({"v": 1, "type": "create_session", "session": "x".repeat(129)}),
            json!({"v": 1, "type": "create_session", "session": "a/subagent-x"}),
        ] {
            assert_eq!(err_of(bad.clone()).code, code::INVALID_SESSION, "{bad}");
        }
        // The reserved namespace is judged by the dispatcher, which knows
        // whether the id names a headless child (headless_restricted) or
        // nothing (invalid_session).
        assert_eq!(
            parse(json!({"v": 1, "type": "create_session", "session": "subagent-x"})).unwrap(),
            ClientMsg::CreateSession {
                session: "subagent-x".into(),
                spec: None
            }
        );
    }

    #[test]
    fn worker_actions() {
        for action in WorkerAction::ALL {
            let m = parse(json!({"v": 1, "type": "worker", "session": "s",
                "action": action.as_str(), "spec": {"threads": 2}}))
            .unwrap();
            assert_eq!(
                m,
                ClientMsg::Worker {
                    session: "s".into(),
                    action,
                    spec: Some(json!({"threads": 2}))
                }
            );
        }
        assert_eq!(
            parse(json!({"v": 1, "type": "worker", "session": "s", "action": "stop"})).unwrap(),
            ClientMsg::Worker {
                session: "s".into(),
                action: WorkerAction::Stop,
                spec: None
            }
        );
        assert_eq!(WorkerAction::ForceKill.as_str(), "force-kill");
        let e = err_of(json!({"v": 1, "type": "worker", "session": "s", "action": "kill"}));
        assert_eq!(e.code, code::BAD_MESSAGE);
        assert!(e.message.contains("action"), "{}", e.message);
        let e = err_of(json!({"v": 1, "type": "worker", "session": "s"}));
        assert!(
            e.message.contains("\"action\" is required"),
            "{}",
            e.message
        );
    }

    #[test]
    fn input_keeps_everything_but_routing_fields() {
        let m = parse(
            json!({"v": 1, "type": "input", "session": "s", "operation": "message",
            "content": [{"type": "text", "modality": "text", "text": "hi"}],
            "request_id": "r", "options": {"model": "m"}, "future_field": 1}),
        )
        .unwrap();
        assert_eq!(
            m,
            ClientMsg::Input {
                session: "s".into(),
                input: json!({"operation": "message",
                    "content": [{"type": "text", "modality": "text", "text": "hi"}],
                    "request_id": "r", "options": {"model": "m"}, "future_field": 1})
            }
        );
        let m = parse(json!({"v": 1, "type": "input", "session": "s"})).unwrap();
        assert_eq!(
            m,
            ClientMsg::Input {
                session: "s".into(),
                input: json!({})
            }
        );
    }

    #[test]
    fn history_signal_logs_snapshot_policy() {
        assert_eq!(
            parse(
                json!({"v": 1, "type": "history", "session": "s", "request_id": "h",
                "start": "latest", "step": 2, "limit": 5})
            )
            .unwrap(),
            ClientMsg::History {
                session: "s".into(),
                request_id: Some("h".into()),
                start: Some(json!("latest")),
                step: Some(json!(2)),
                limit: Some(json!(5))
            }
        );
        assert_eq!(
            parse(json!({"v": 1, "type": "history", "session": "s"})).unwrap(),
            ClientMsg::History {
                session: "s".into(),
                request_id: None,
                start: None,
                step: None,
                limit: None
            }
        );
        assert_eq!(
            parse(
                json!({"v": 1, "type": "signal", "session": "s", "operation": "cancel",
                "run_id": "r9"})
            )
            .unwrap(),
            ClientMsg::Signal {
                session: "s".into(),
                operation: "cancel".into(),
                run_id: Some("r9".into())
            }
        );
        assert_eq!(
            parse(json!({"v": 1, "type": "signal", "session": "s", "operation": "status"}))
                .unwrap(),
            ClientMsg::Signal {
                session: "s".into(),
                operation: "status".into(),
                run_id: None
            }
        );
        assert!(err_of(json!({"v": 1, "type": "signal", "session": "s"}))
            .message
            .contains("operation"));
        assert_eq!(
            parse(json!({"v": 1, "type": "logs", "session": "s", "limit": 50})).unwrap(),
            ClientMsg::Logs {
                session: "s".into(),
                limit: Some(50)
            }
        );
        assert_eq!(
            parse(json!({"v": 1, "type": "logs", "session": "s"})).unwrap(),
            ClientMsg::Logs {
                session: "s".into(),
                limit: None
            }
        );
        assert_eq!(
            parse(json!({"v": 1, "type": "status_snapshot", "session": "s", "since": 3})).unwrap(),
            ClientMsg::StatusSnapshot {
                session: "s".into(),
                since: 3
            }
        );
        assert_eq!(
            parse(json!({"v": 1, "type": "status_snapshot", "session": "s"})).unwrap(),
            ClientMsg::StatusSnapshot {
                session: "s".into(),
                since: 0
            }
        );
        for policy in POLICIES {
            assert_eq!(
                parse(json!({"v": 1, "type": "subagent_policy", "session": "s",
                    "policy": policy}))
                .unwrap(),
                ClientMsg::SubagentPolicy {
                    session: "s".into(),
                    policy: policy.to_string(),
                    request_id: None,
                }
            );
        }
        assert_eq!(
            err_of(json!({"v": 1, "type": "subagent_policy", "session": "s", "policy": "x"})).code,
            code::INVALID_POLICY
        );
        assert_eq!(
            err_of(json!({"v": 1, "type": "subagent_policy", "session": "s", "policy": 1})).code,
            code::BAD_MESSAGE
        );
    }

    #[test]
    fn confirmation_fields() {
        assert_eq!(
            parse(json!({"v": 1, "type": "confirmation", "session": "s",
                "confirmation_id": "c", "decision": "approved", "reason": "ok",
                "request_id": "q"}))
            .unwrap(),
            ClientMsg::Confirmation {
                session: "s".into(),
                confirmation_id: "c".into(),
                decision: Decision::Approved,
                reason: Some("ok".into()),
                request_id: Some("q".into())
            }
        );
        assert_eq!(
            parse(json!({"v": 1, "type": "confirmation", "session": "s",
                "confirmation_id": "c", "decision": "denied"}))
            .unwrap(),
            ClientMsg::Confirmation {
                session: "s".into(),
                confirmation_id: "c".into(),
                decision: Decision::Denied,
                reason: None,
                request_id: None
            }
        );
        let (e, id) = parse(json!({"v": 1, "type": "confirmation", "session": "s",
            "confirmation_id": "c", "decision": true, "request_id": "q"}))
        .unwrap_err();
        assert_eq!(e.code, code::BAD_MESSAGE);
        assert!(e.message.contains("decision"));
        assert_eq!(id.as_deref(), Some("q"));
        assert!(
            err_of(json!({"v": 1, "type": "confirmation", "session": "s",
            "decision": "approved"}))
            .message
            .contains("confirmation_id")
        );
    }

    // ----- errors -----

    #[test]
    fn error_codes() {
        assert_eq!(code_of("not json"), code::BAD_JSON);
        assert_eq!(code_of(""), code::BAD_JSON);
        assert_eq!(code_of("{\"v\":1,"), code::BAD_JSON);
        assert_eq!(code_of("[1,2]"), code::BAD_MESSAGE);
        assert_eq!(code_of("\"ping\""), code::BAD_MESSAGE);
        assert_eq!(code_of("null"), code::BAD_MESSAGE);
        assert_eq!(code_of(r#"{"v":1,"type":"subscribe"}"#), code::BAD_MESSAGE);
        assert_eq!(
            code_of(r#"{"v":2,"type":"ping"}"#),
            code::UNSUPPORTED_VERSION
        );
        assert_eq!(
            code_of(r#"{"v":"1","type":"ping"}"#),
            code::UNSUPPORTED_VERSION
        );
        // a missing `v` is version 1 (Node clients may leave it out)
        assert_eq!(parse_client(r#"{"type":"ping"}"#).unwrap(), ClientMsg::Ping);
        assert_eq!(
            code_of(r#"{"v":null,"type":"ping"}"#),
            code::UNSUPPORTED_VERSION
        );
        assert_eq!(
            code_of(r#"{"v":1.5,"type":"ping"}"#),
            code::UNSUPPORTED_VERSION
        );
        // version is checked before type, even for unknown types
        assert_eq!(
            code_of(r#"{"v":2,"type":"future"}"#),
            code::UNSUPPORTED_VERSION
        );
        assert_eq!(code_of(r#"{"v":1}"#), code::BAD_MESSAGE);
        assert_eq!(code_of(r#"{"v":1,"type":7}"#), code::BAD_MESSAGE);
        // a float spelling of 1 is the number 1
        assert_eq!(
            parse_client(r#"{"v":1.0,"type":"ping"}"#).unwrap(),
            ClientMsg::Ping
        );
    }

    #[test]
    fn missing_session_names_the_field() {
        for kind in [
            "subscribe",
            "unsubscribe",
            "delete_session",
            "worker",
            "input",
            "history",
            "signal",
            "confirmation",
            "logs",
            "status_snapshot",
            "subagent_policy",
        ] {
            let e = err_of(json!({"v": 1, "type": kind}));
            assert_eq!(e.code, code::BAD_MESSAGE, "{kind}");
            assert!(e.message.contains("\"session\""), "{kind}: {}", e.message);
            let e = err_of(json!({"v": 1, "type": kind, "session": ["s"]}));
            assert_eq!(e.code, code::BAD_MESSAGE, "{kind}");
            assert!(
                e.message.contains("\"session\" must be a string"),
                "{}",
                e.message
            );
        }
    }

    #[test]
    fn ill_typed_optional_fields() {
        for (field, value) in [
            ("since", json!(-1)),
            ("since", json!(1.5)),
            ("since", json!("3")),
            ("since", json!(1e300)),
            ("paged", json!("yes")),
            ("replace", json!(1)),
            ("request_id", json!(5)),
            ("request_id", json!("")),
            ("request_id", json!("r".repeat(129))),
        ] {
            let mut msg = json!({"v": 1, "type": "subscribe", "session": "s"});
            msg[field] = value.clone();
            let e = err_of(msg);
            assert_eq!(e.code, code::BAD_MESSAGE, "{field}={value}");
            assert!(e.message.contains(field), "{}", e.message);
        }
        let e = err_of(json!({"v": 1, "type": "logs", "session": "s", "limit": -5}));
        assert!(e.message.contains("limit"));
        let e = err_of(
            json!({"v": 1, "type": "signal", "session": "s", "operation": "cancel",
            "run_id": 3}),
        );
        assert!(e.message.contains("run_id"));
        // integral float spellings are integers
        assert!(matches!(
            parse_client(r#"{"v":1,"type":"subscribe","session":"s","since":5.0}"#),
            Ok(ClientMsg::Subscribe { since: 5, .. })
        ));
        // the largest JSON integer
        assert!(matches!(
            parse(json!({"v": 1, "type": "status_snapshot", "session": "s", "since": u64::MAX})),
            Ok(ClientMsg::StatusSnapshot {
                since: u64::MAX,
                ..
            })
        ));
    }

    #[test]
    fn unknown_type_and_unknown_fields() {
        assert_eq!(
            parse(json!({"v": 1, "type": "teleport", "anything": [1, 2]})).unwrap(),
            ClientMsg::Unknown {
                kind: "teleport".into()
            }
        );
        // an unknown type's fields are never checked
        assert_eq!(
            parse(json!({"v": 1, "type": "future", "session": 5})).unwrap(),
            ClientMsg::Unknown {
                kind: "future".into()
            }
        );
        assert_eq!(
            parse(json!({"v": 1, "type": "ping", "extra": {"x": 1}, "session": 7})).unwrap(),
            ClientMsg::Ping
        );
        assert_eq!(
            parse(json!({"v": 1, "type": "unsubscribe", "session": "s", "zzz": null})).unwrap(),
            ClientMsg::Unsubscribe {
                session: "s".into()
            }
        );
    }

    #[test]
    fn echo_keeps_small_scalar_members_only() {
        let long = "x".repeat(ECHO_STRING_BYTES + 1);
        let text = json!({"v": 1, "type": "input", "session": "s", "request_id": "r",
            "content": [{"type": "text", "raw": "big"}], "options": {}, "n": 3, "ok": true,
            "none": null, "reason": long, "edge": "y".repeat(ECHO_STRING_BYTES)})
        .to_string();
        let echoed = echo(&text).unwrap();
        assert_eq!(
            echoed,
            json!({"v": 1, "type": "input", "session": "s", "request_id": "r", "n": 3,
                "ok": true, "none": null, "edge": "y".repeat(ECHO_STRING_BYTES)})
        );
        // members keep the message's order
        let keys: Vec<&String> = echoed.as_object().unwrap().keys().collect();
        assert_eq!(keys[..4], ["v", "type", "session", "request_id"]);
        assert_eq!(echo("[1]"), None);
        assert_eq!(echo("not json"), None);
    }

    #[test]
    fn request_id_is_echoed_in_errors() {
        let (e, id) = parse(json!({"v": 2, "type": "subscribe", "request_id": "abc"})).unwrap_err();
        assert_eq!(e.code, code::UNSUPPORTED_VERSION);
        assert_eq!(id.as_deref(), Some("abc"));
        let (e, id) = parse(json!({"v": 1, "type": "subscribe", "request_id": "abc"})).unwrap_err();
        assert_eq!(e.code, code::BAD_MESSAGE);
        assert_eq!(id.as_deref(), Some("abc"));
        let (_, id) = parse(json!({"v": 1, "type": 3, "request_id": "abc"})).unwrap_err();
        assert_eq!(id.as_deref(), Some("abc"));
        // unbounded or ill-typed ids are not echoed
        let (_, id) =
            parse(json!({"v": 1, "type": "subscribe", "request_id": "r".repeat(500)})).unwrap_err();
        assert_eq!(id, None);
        let (_, id) = parse(json!({"v": 1, "type": "subscribe", "request_id": 9})).unwrap_err();
        assert_eq!(id, None);
        assert_eq!(parse_client("{").unwrap_err().1, None);
    }

    #[test]
    fn error_messages_are_bounded() {
        let huge = "x".repeat(100_000);
        for msg in [
            json!({"v": huge, "type": "ping"}),
            json!({"v": 1, "type": "worker", "session": "s", "action": huge}),
            json!({"v": 1, "type": "create_session", "session": huge}),
            json!({"v": 1, "type": "subscribe", "session": "s", "since": huge}),
        ] {
            let e = err_of(msg);
            assert!(e.message.len() < 400, "{}", e.message.len());
        }
    }

    #[test]
    fn parse_never_panics_on_garbage() {
        let mut rng = Rng::new(0x9E37_79B9_7F4A_7C15);
        let seeds = [
            r#"{"v":1,"type":"subscribe","session":"s","since":3,"paged":true}"#,
            r#"{"v":1,"type":"confirmation","session":"s","confirmation_id":"c","decision":"denied"}"#,
            r#"{"v":1,"type":"input","session":"s","content":[{"type":"text"}]}"#,
            r#"{"v":1,"type":"worker","session":"s","action":"force-kill","spec":{}}"#,
        ];
        let alphabet = b"{}[]\",:0123456789.-eEtrufalsn \\v1typesion";
        for round in 0..4000 {
            let mut bytes = seeds[round % seeds.len()].as_bytes().to_vec();
            for _ in 0..=rng.below(6) {
                let pos = rng.below(bytes.len() + 1);
                match rng.below(3) {
                    0 if pos < bytes.len() => {
                        bytes.remove(pos);
                    }
                    1 if pos < bytes.len() => {
                        bytes[pos] = rng.pick(alphabet);
                    }
                    _ => bytes.insert(pos, rng.pick(alphabet)),
                }
            }
            let text = String::from_utf8_lossy(&bytes);
            let _ = parse_client(&text);
        }
        // deep nesting is an error, not a stack overflow
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(code_of(&deep), code::BAD_JSON);
    }
}
