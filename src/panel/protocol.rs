//! Panel protocol v1 messages, pure: parsing a client text frame into a
//! [`ClientMsg`], building every hub -> client message (each carries
//! `"v": 1`), and the byte budgets the hub enforces on panel connections
//! (frame cost, replay page planning, the shared approval-preview allowance).
//!
//! No I/O, no locks, no clock. Every function is total: any input yields a
//! value or an error, never a panic. Frames that carry already serialized
//! transcript JSON (`subscribed`, `snapshot`, `event`) are assembled as text
//! and splice that JSON verbatim, so an event is serialized once however many
//! panels receive it.

use std::fmt::{self, Write as _};
use std::ops::Range;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::session;
use crate::worker::display::{describe, kind, quote};
use crate::ws::frame_header_len;

/// The protocol version every message carries as `"v"`.
pub const VERSION: u64 = 1;

/// Pending outbound bytes (frames including their headers) one panel
/// connection may have; a send that would exceed it ends the connection.
pub const OUTBOUND_BUDGET: usize = 4 * 1024 * 1024;

/// Ceiling of one indivisible display frame (`welcome`, `sessions`,
/// `session`, `created`, legacy `subscribed`, `snapshot`), header included.
pub const FRAME_CEILING: usize = 2 * 1024 * 1024;

/// Target size of one paged replay frame, metadata and header included.
pub const PAGE_TARGET: usize = 512 * 1024;

/// Encoded argument-preview bytes all approvals in one description frame
/// share.
pub const APPROVALS_SHARE: usize = 512 * 1024;

/// Text bytes of the newest log lines a `logs` reply carries.
pub const LOG_TAIL_BYTES: usize = 256 * 1024;

/// Longest preview of one log line in a `logs` reply, bytes.
pub const LOG_LINE_PREVIEW: usize = 8 * 1024;

/// Most log lines a `logs` reply carries.
pub const MAX_LOG_LINES: usize = 2000;

/// Longest `request_id` accepted (and echoed), UTF-8 bytes; the same rule
/// as payload request ids.
pub const MAX_REQUEST_ID_BYTES: usize = crate::worker::payload::MAX_REQUEST_ID_BYTES;

/// The protocol's error codes (`error.error`). Codes are stable; messages
/// are not.
pub mod code {
    pub const BAD_JSON: &str = "bad_json";
    pub const BAD_MESSAGE: &str = "bad_message";
    pub const UNSUPPORTED_VERSION: &str = "unsupported_version";
    pub const UNKNOWN_SESSION: &str = "unknown_session";
    pub const INVALID_SESSION: &str = "invalid_session";
    pub const SESSION_EXISTS: &str = "session_exists";
    pub const SESSION_BUSY: &str = "session_busy";
    pub const HEADLESS_RESTRICTED: &str = "headless_restricted";
    pub const INVALID_POLICY: &str = "invalid_policy";
    pub const INPUT_NOT_SENT: &str = "input_not_sent";
    pub const SIGNAL_NOT_SENT: &str = "signal_not_sent";
    pub const UNKNOWN_CONFIRMATION: &str = "unknown_confirmation";
    pub const CONFIRMATION_REJECTED: &str = "confirmation_rejected";
    pub const WORKER_ACTION_FAILED: &str = "worker_action_failed";
    pub const BINARY_NOT_SUPPORTED: &str = "binary_not_supported";
    pub const INTERNAL_ERROR: &str = "internal_error";
    pub const DISPLAY_SNAPSHOT_TOO_LARGE: &str = "display_snapshot_too_large";
}

// ---------------------------------------------------------------------------
// Client -> hub
// ---------------------------------------------------------------------------

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
/// `v` missing or not the number 1 -> `unsupported_version`; `type` missing
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
        None => {
            return Err(PanelError::new(
                code::UNSUPPORTED_VERSION,
                "the message has no \"v\"; this hub speaks panel protocol version 1",
            ))
        }
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
            Some(Value::String(s)) => match session::check_new_id(s) {
                Ok(()) => Ok(s.clone()),
                Err(_) if session::is_valid_id(s) => Ok(s.clone()),
                Err(e) => Err(invalid(format!("{}: {e}", self.msg))),
            },
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

// ---------------------------------------------------------------------------
// Hub -> client
// ---------------------------------------------------------------------------

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

/// Sent once per connection: hub metadata (including `transcript_epoch`)
/// and every listed session's description.
pub fn welcome(hub_info: Value, sessions: Vec<Value>) -> Value {
    message(
        "welcome",
        vec![("hub", hub_info), ("sessions", Value::Array(sessions))],
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
/// `transcript`, `logs`, `latest`, `transcript_epoch`, `plan`, then for
/// paged replies `replay_more` and (only when true) `replay_reset`, then
/// `request_id` when given.
///
/// `session` carries the session description, where the seed says open
/// confirmations are read from ("subscribed's session"); the id is its
/// `session_id`. When `description` is not an object (`Value::Null` on data
/// pages that leave it out), `session` is `{"session_id": <session>}` so the
/// frame still names its session with the same shape. `logs` and `plan` are
/// left out when `Value::Null` (panels treat an absent plan as "not sent").
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
    if !logs.is_null() {
        out.value("logs", &logs);
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

/// An `event` frame as text: `session` (the id), `hub_seq` (`null` for
/// transient replies such as history) and `envelope`, spliced verbatim.
/// Serialize once per event and share the text with every subscriber.
pub fn event_frame(session: &str, hub_seq: Option<u64>, envelope_json: &str) -> String {
    let mut out = String::with_capacity(64 + session.len() + envelope_json.len());
    event_frame_head(&mut out, session, hub_seq);
    out.push_str(envelope_json);
    out.push('}');
    out
}

/// The text of an `event` frame before its envelope (which is followed by
/// the closing `}`).
pub fn event_frame_head(out: &mut String, session: &str, hub_seq: Option<u64>) {
    let _ = write!(out, "{{\"v\":{VERSION},\"type\":\"event\",\"session\":");
    if session
        .bytes()
        .all(|b| b >= 0x20 && b != b'"' && b != b'\\')
    {
        out.push('"');
        out.push_str(session);
        out.push('"');
    } else {
        let _ = serde_json::to_writer(&mut FmtWriter(out), session);
    }
    match hub_seq {
        Some(seq) => {
            let _ = write!(out, ",\"hub_seq\":{seq},\"envelope\":");
        }
        None => out.push_str(",\"hub_seq\":null,\"envelope\":"),
    }
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

/// A prompt opened (`open: true`) or closed; `outcome` only when closing.
/// Sent to every connected panel.
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

/// A `logs` reply: the tail `lines`, `dropped` (records evicted from the
/// ring) and `omitted` (older retained lines left out of this reply by the
/// line or byte bound).
pub fn logs(session: &str, lines: Vec<Value>, dropped: u64, omitted: u64) -> Value {
    message(
        "logs",
        vec![
            ("session", json!(session)),
            ("lines", Value::Array(lines)),
            ("dropped", json!(dropped)),
            ("omitted", json!(omitted)),
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
    let mut fields = vec![("error", json!(code)), ("message", json!(message))];
    if let Some(request) = request {
        fields.push(("request", request));
    }
    self::message("error", fields)
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

// ---------------------------------------------------------------------------
// Budgets
// ---------------------------------------------------------------------------

/// Bytes a frame costs on the wire: its UTF-8 length plus the unmasked
/// header (2, 4 or 10 bytes).
pub fn wire_cost(text_len: usize) -> usize {
    text_len.saturating_add(frame_header_len(text_len))
}

/// Splits transcript entries (serialized, in order; `entry_lens` are their
/// byte lengths) into consecutive pages whose complete `subscribed` frame
/// costs at most [`PAGE_TARGET`] on the wire: `overhead` (the frame's
/// length with an empty transcript) + entries + separating commas + header.
/// An entry that does not fit a page even alone gets a page of its own (the
/// caller refuses it if that frame exceeds [`OUTBOUND_BUDGET`]). Returns the
/// pages as index ranges covering `0..entry_lens.len()` in order.
pub fn plan_pages(entry_lens: &[usize], overhead: usize) -> Vec<Range<usize>> {
    let mut pages = Vec::new();
    let mut start = 0;
    // Frame text length of the page being built.
    let mut text = overhead;
    for (i, len) in entry_lens.iter().enumerate() {
        if i > start {
            let grown = text.saturating_add(1).saturating_add(*len);
            if wire_cost(grown) <= PAGE_TARGET {
                text = grown;
                continue;
            }
            pages.push(start..i);
            start = i;
        }
        text = overhead.saturating_add(*len);
    }
    if start < entry_lens.len() {
        pages.push(start..entry_lens.len());
    }
    pages
}

/// Per-prompt argument-preview caps under a shared allowance (water-filling).
///
/// `preview_sizes` are the encoded sizes of the previews as they stand
/// (each already within 64 KiB). When they fit `share` together, every cap
/// is its size (nothing changes). Otherwise a common level is chosen, the
/// largest whole number such that `sum(min(size, level)) <= share`, and each
/// cap is `min(size, level)`: small previews stay whole, larger ones are
/// reduced first and to the same level. The caller regenerates each prompt
/// whose cap is below its size from the original call (`Prompt::describe`
/// with that budget); identities and lifecycle fields are untouched.
///
/// A level below `display::MIN_BUDGET` (more than `share / 64` large
/// prompts) still yields minimal previews of up to 64 bytes each; the frame
/// ceiling check stays the caller's final guard.
pub fn allocate_previews(preview_sizes: &[usize], share: usize) -> Vec<usize> {
    let total = preview_sizes
        .iter()
        .fold(0usize, |acc, s| acc.saturating_add(*s));
    if total <= share {
        return preview_sizes.to_vec();
    }
    let mut sorted = preview_sizes.to_vec();
    sorted.sort_unstable();
    let mut remaining = share;
    let mut level = usize::MAX;
    for (i, size) in sorted.iter().enumerate() {
        let left = sorted.len() - i;
        if *size <= remaining / left {
            remaining -= size;
        } else {
            level = remaining / left;
            break;
        }
    }
    preview_sizes.iter().map(|s| (*s).min(level)).collect()
}

/// The approval-preview allowance of a description frame whose other
/// contents (everything but the argument previews) take `other_len` bytes:
/// [`APPROVALS_SHARE`], less whatever would push the frame past
/// [`FRAME_CEILING`] (the largest frame header included).
pub fn approvals_allowance(other_len: usize) -> usize {
    APPROVALS_SHARE.min(FRAME_CEILING.saturating_sub(other_len.saturating_add(10)))
}

#[cfg(test)]
mod tests {
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
        assert_eq!(code_of(r#"{"type":"ping"}"#), code::UNSUPPORTED_VERSION);
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

    // ----- builders -----

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
                json!({"hub": {"transcript_epoch": "e"}, "sessions": [desc]}),
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
                confirmation("s", false, json!({}), Some(json!({"decision": "denied"}))),
                "confirmation",
                json!({"session": "s", "open": false, "confirmation": {},
                    "outcome": {"decision": "denied"}}),
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
                logs("s", vec![json!({"text": "x"})], 2, 3),
                "logs",
                json!({"session": "s", "lines": [{"text": "x"}], "dropped": 2, "omitted": 3}),
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
            json!({"lines": [], "dropped": 0}),
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
                "logs": {"lines": [], "dropped": 0}, "latest": 2,
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
        // no description: `session` still names the session; null logs/plan are left out
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
        assert!(bare.get("logs").is_none() && bare.get("plan").is_none());
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
        let text = event_frame("s\"q", Some(9), r#"{"event":"ready" }"#);
        assert!(
            text.ends_with(r#","envelope":{"event":"ready" }}"#),
            "{text}"
        );
        assert_eq!(
            parsed(&text),
            json!({"v": 1, "type": "event", "session": "s\"q", "hub_seq": 9,
                "envelope": {"event": "ready"}})
        );
        assert_eq!(
            parsed(&event_frame("s", None, "{}"))["hub_seq"],
            Value::Null
        );
    }

    // ----- budgets -----

    #[test]
    fn wire_cost_headers() {
        assert_eq!(wire_cost(0), 2);
        assert_eq!(wire_cost(125), 127);
        assert_eq!(wire_cost(126), 130);
        assert_eq!(wire_cost(65535), 65539);
        assert_eq!(wire_cost(65536), 65546);
        assert_eq!(wire_cost(usize::MAX), usize::MAX);
    }

    /// Frame text length of a page of `lens` under `overhead`.
    fn page_text(lens: &[usize], overhead: usize) -> usize {
        lens.iter()
            .fold(overhead, |acc, l| acc.saturating_add(*l))
            .saturating_add(lens.len().saturating_sub(1))
    }

    fn check_pages(lens: &[usize], overhead: usize) {
        let pages = plan_pages(lens, overhead);
        let mut next = 0;
        for page in &pages {
            assert_eq!(page.start, next, "pages are contiguous and in order");
            assert!(page.end > page.start, "no empty page");
            next = page.end;
            let cost = wire_cost(page_text(&lens[page.clone()], overhead));
            if page.len() > 1 {
                assert!(cost <= PAGE_TARGET, "multi-entry page over target: {cost}");
            }
            // greedy: the next entry would not have fit
            if page.end < lens.len() {
                let grown = wire_cost(page_text(&lens[page.start..page.end + 1], overhead));
                assert!(grown > PAGE_TARGET, "page closed early");
            }
        }
        assert_eq!(next, lens.len(), "pages cover every entry");
        for (i, len) in lens.iter().enumerate() {
            if wire_cost(overhead.saturating_add(*len)) > PAGE_TARGET {
                assert!(pages.contains(&(i..i + 1)), "oversized entry {i} alone");
            }
        }
    }

    #[test]
    fn plan_pages_properties() {
        assert!(plan_pages(&[], 100).is_empty());
        assert_eq!(plan_pages(&[10], 100), vec![0..1]);
        assert_eq!(plan_pages(&[PAGE_TARGET * 3], 100), vec![0..1]);
        assert_eq!(
            plan_pages(&[1, 1, 1], PAGE_TARGET * 2),
            vec![0..1, 1..2, 2..3]
        );
        let mut rng = Rng::new(0x1234_5678_9ABC_DEF1);
        for _ in 0..300 {
            let n = rng.below(200);
            let scale = [100usize, 10_000, 100_000, 600_000][rng.below(4)];
            let lens: Vec<usize> = (0..n)
                .map(|_| {
                    if rng.below(20) == 0 {
                        PAGE_TARGET + rng.below(1_000_000)
                    } else {
                        1 + rng.below(scale)
                    }
                })
                .collect();
            let overhead = rng.below(4096) + 100;
            check_pages(&lens, overhead);
        }
        // boundary: a page exactly at the target
        let overhead = 1000;
        let first = PAGE_TARGET - 10 - overhead - 1 - 100;
        check_pages(&[first, 100, 1], overhead);
        assert_eq!(plan_pages(&[first, 100, 1], overhead), vec![0..2, 2..3]);
        // huge lengths saturate instead of overflowing
        check_pages(&[usize::MAX, 1, usize::MAX], usize::MAX - 5);
    }

    #[test]
    fn planned_subscribed_frames_really_fit() {
        let mut rng = Rng::new(0xDEAD_BEEF_CAFE_F00D);
        let desc =
            json!({"session_id": "demo", "confirmations": [], "spec": {"x": "y".repeat(3000)}});
        let logs_v = json!({"lines": [{"text": "z".repeat(2000)}], "dropped": 0, "omitted": 0});
        let plan_v = json!({"markdown": "plan", "revision": 1, "updated_at": null});
        let mut seq = 40u64;
        let items: Vec<(u64, Arc<str>)> = (0..400)
            .map(|_| {
                seq += 1 + rng.below(3) as u64;
                let body = "é\"\n".repeat(rng.below(30_000));
                let text =
                    json!({"hub_sequence": seq, "event": "model_reply", "data": body}).to_string();
                (seq, Arc::from(text))
            })
            .collect();
        let all: Vec<Arc<str>> = items.iter().map(|(_, e)| e.clone()).collect();
        for first in [true, false] {
            let meta = |entries: &[Arc<str>], latest: u64| {
                subscribed(
                    "demo",
                    entries,
                    logs_v.clone(),
                    latest,
                    "3f1c2e0a-epoch",
                    plan_v.clone(),
                    Some(Paging {
                        replay_more: true,
                        replay_reset: first,
                    }),
                    Some("req-123"),
                    desc.clone(),
                )
            };
            let overhead = meta(&[], u64::MAX).len();
            let lens: Vec<usize> = all.iter().map(|e| e.len()).collect();
            let pages = plan_pages(&lens, overhead);
            assert!(pages.len() > 1);
            for page in pages {
                let latest = items[page.end - 1].0;
                let frame = meta(&all[page.clone()], latest);
                assert_eq!(
                    parsed(&frame)["transcript"].as_array().map(Vec::len),
                    Some(page.len())
                );
                if page.len() > 1 {
                    assert!(wire_cost(frame.len()) <= PAGE_TARGET, "{}", frame.len());
                }
            }
        }
    }

    #[test]
    fn allocate_previews_fits_or_keeps() {
        assert_eq!(allocate_previews(&[], 10), Vec::<usize>::new());
        assert_eq!(allocate_previews(&[3, 4, 5], 12), vec![3, 4, 5]);
        assert_eq!(allocate_previews(&[1, 100, 50], 61), vec![1, 30, 30]);
        assert_eq!(allocate_previews(&[10, 10], 5), vec![2, 2]);
        assert_eq!(allocate_previews(&[10, 10], 0), vec![0, 0]);
        assert_eq!(
            allocate_previews(&[usize::MAX, usize::MAX, 7], 1000),
            vec![496, 496, 7]
        );
        let mut rng = Rng::new(0x0BAD_5EED_1234_5678);
        for _ in 0..500 {
            let n = rng.below(300);
            let sizes: Vec<usize> = (0..n)
                .map(|_| match rng.below(3) {
                    0 => rng.below(200),
                    1 => rng.below(8192),
                    _ => rng.below(65_536),
                })
                .collect();
            let share = match rng.below(3) {
                0 => APPROVALS_SHARE,
                1 => rng.below(1 << 20),
                _ => rng.below(5000),
            };
            let caps = allocate_previews(&sizes, share);
            assert_eq!(caps.len(), sizes.len());
            let total: usize = sizes.iter().sum();
            let used: usize = caps.iter().sum();
            if total <= share {
                assert_eq!(caps, sizes, "everything fits: nothing changes");
                continue;
            }
            assert!(used <= share, "{used} > {share}");
            // caps are min(size, level) for one level
            let level = caps
                .iter()
                .zip(&sizes)
                .filter(|(c, s)| c < s)
                .map(|(c, _)| *c)
                .next()
                .expect("something was reduced");
            for (c, s) in caps.iter().zip(&sizes) {
                assert_eq!(*c, (*s).min(level));
            }
            // monotone: a larger original never gets a smaller cap
            for i in 0..n {
                for j in 0..n {
                    if sizes[i] >= sizes[j] {
                        assert!(caps[i] >= caps[j]);
                    }
                }
            }
            // the level is the largest that fits
            let next: usize = sizes.iter().map(|s| (*s).min(level + 1)).sum();
            assert!(next > share, "level {level} is not maximal");
        }
    }

    #[test]
    fn approvals_allowance_shrinks_near_the_ceiling() {
        assert_eq!(approvals_allowance(0), APPROVALS_SHARE);
        assert_eq!(
            approvals_allowance(FRAME_CEILING - APPROVALS_SHARE - 10),
            APPROVALS_SHARE
        );
        assert_eq!(approvals_allowance(FRAME_CEILING - 1000), 990);
        assert_eq!(approvals_allowance(FRAME_CEILING), 0);
        assert_eq!(approvals_allowance(usize::MAX), 0);
    }
}
