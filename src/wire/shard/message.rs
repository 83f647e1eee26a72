//! The Shard envelope (seed 004 §5) and its error registry (§8), pure and
//! transport-neutral: reading one incoming message into an [`Incoming`]
//! (`id`, `type`, `agent_id`, the payload), and rendering the `hello`
//! event, the `response` message and an `error` event. Every transport
//! (the WebSocket here, a unix socket or stdio JSONL after it) frames the
//! same JSON text.

use serde_json::{json, Map, Value};

/// The protocol version `hello` names (seed §7).
pub const PROTOCOL_VERSION: &str = "0.1.0";

/// The error registry of seed §8, exactly as it spells the codes. This
/// hub answers `PROTOCOL_ERROR` only for a message out of place on a
/// bound connection (`direct::route`; it speaks one version), and never
/// `TIMEOUT` (an unanswered prompt is denied with its reason as the
/// source), `SESSION_CORRUPT` (no session is adopted from files) or
/// `TOOL_ERROR` (a failed tool is a `tool_result` with `is_error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))]
pub enum Code {
    InvalidRequest,
    NotFound,
    NotAttached,
    PermissionDenied,
    ProtocolError,
    Timeout,
    RuntimeStartFailed,
    SessionCorrupt,
    InternalError,
    ProviderError,
    ToolError,
    Conflict,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Code::InvalidRequest => "INVALID_REQUEST",
            Code::NotFound => "NOT_FOUND",
            Code::NotAttached => "NOT_ATTACHED",
            Code::PermissionDenied => "PERMISSION_DENIED",
            Code::ProtocolError => "PROTOCOL_ERROR",
            Code::Timeout => "TIMEOUT",
            Code::RuntimeStartFailed => "RUNTIME_START_FAILED",
            Code::SessionCorrupt => "SESSION_CORRUPT",
            Code::InternalError => "INTERNAL_ERROR",
            Code::ProviderError => "PROVIDER_ERROR",
            Code::ToolError => "TOOL_ERROR",
            Code::Conflict => "CONFLICT",
        }
    }
}

/// Why a command failed: a registry code, a message for people and
/// optional data (`error: {code, message, data?}`).
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub code: Code,
    pub message: String,
    pub data: Option<Value>,
}

impl Refusal {
    pub fn new(code: Code, message: impl Into<String>) -> Refusal {
        Refusal {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn with_data(mut self, data: Value) -> Refusal {
        self.data = Some(data);
        self
    }

    /// `INVALID_REQUEST` with `message`.
    pub fn invalid(message: impl Into<String>) -> Refusal {
        Refusal::new(Code::InvalidRequest, message)
    }

    /// A seed command or behaviour this runtime does not offer:
    /// `INVALID_REQUEST` with `data: {unsupported: what}`.
    pub fn unsupported(what: &str, why: &str) -> Refusal {
        Refusal::invalid(format!("{what} is not supported: {why}"))
            .with_data(json!({"unsupported": what}))
    }

    /// `NOT_ATTACHED` for a per-agent command.
    pub fn not_attached(agent: Option<&str>) -> Refusal {
        let message = match agent {
            None => "a per-agent command needs agent_id on a daemon connection".to_string(),
            Some(id) => format!("this connection is not attached to agent {id:?}"),
        };
        Refusal::new(Code::NotAttached, message)
    }

    /// The error object of a `response`.
    pub fn to_json(&self) -> Value {
        let mut error = json!({"code": self.code.as_str(), "message": self.message});
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        error
    }
}

/// One incoming message, its envelope read.
#[derive(Debug, Clone, PartialEq)]
pub struct Incoming {
    /// The correlation id (a string when present).
    pub id: Option<String>,
    /// The message type (`agent.list`, `prompt`, ...).
    pub kind: String,
    /// The routing `agent_id` (a non-empty string when present).
    pub agent_id: Option<String>,
    /// Every member of the message (the envelope's included).
    pub body: Map<String, Value>,
}

/// A message whose envelope is unusable: what a `response` can still echo
/// of it, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct BadEnvelope {
    pub id: Option<String>,
    pub kind: Option<String>,
    pub refusal: Refusal,
}

/// Reads one message. Not JSON, not an object, no string `type`, a `id`
/// that is not a string or an `agent_id` that is not a non-empty string
/// is `INVALID_REQUEST` (the connection stays open).
pub fn parse(text: &str) -> Result<Incoming, Box<BadEnvelope>> {
    let bad = |id: Option<String>, kind: Option<String>, message: &str| {
        Box::new(BadEnvelope {
            id,
            kind,
            refusal: Refusal::invalid(message),
        })
    };
    let value: Value = match serde_json::from_str(text) {
        Ok(value) => value,
        Err(err) => return Err(bad(None, None, &format!("not JSON: {err}"))),
    };
    let Value::Object(body) = value else {
        return Err(bad(None, None, "a message must be a JSON object"));
    };
    let id = match body.get("id") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) => Some(id.clone()),
        Some(_) => {
            let kind = body
                .get("type")
                .and_then(Value::as_str)
                .filter(|kind| !kind.is_empty())
                .map(str::to_string);
            return Err(bad(None, kind, "id must be a string"));
        }
    };
    let kind = match body.get("type") {
        Some(Value::String(kind)) if !kind.is_empty() => kind.clone(),
        _ => return Err(bad(id, None, "type must be a non-empty string")),
    };
    let agent_id = match body.get("agent_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(agent)) if !agent.is_empty() => Some(agent.clone()),
        Some(_) => return Err(bad(id, Some(kind), "agent_id must be a non-empty string")),
    };
    Ok(Incoming {
        id,
        kind,
        agent_id,
        body,
    })
}

/// The `server_version` of every `hello`.
pub fn server_version() -> String {
    format!("simplex-hub {}", env!("CARGO_PKG_VERSION"))
}

/// The `hello` event, first on every connection.
pub fn hello(server_version: &str, capabilities: &[&str]) -> Value {
    json!({
        "type": "hello",
        "protocol_version": PROTOCOL_VERSION,
        "server_version": server_version,
        "capabilities": capabilities,
    })
}

/// A `response` to the command `command` (its `id` echoed when it had
/// one): `data` on success, `error` otherwise.
pub fn response(
    id: Option<&str>,
    command: &str,
    outcome: Result<Option<Value>, &Refusal>,
) -> Value {
    let mut out = Map::new();
    out.insert("type".into(), json!("response"));
    if let Some(id) = id {
        out.insert("id".into(), json!(id));
    }
    out.insert("command".into(), json!(command));
    match outcome {
        Ok(data) => {
            out.insert("success".into(), json!(true));
            if let Some(data) = data {
                out.insert("data".into(), data);
            }
        }
        Err(refusal) => {
            out.insert("success".into(), json!(false));
            out.insert("error".into(), refusal.to_json());
        }
    }
    Value::Object(out)
}

/// An async `error` event of agent `agent_id` (§9.4).
pub fn error_event(agent_id: &str, code: Code, message: &str, fatal: bool) -> Value {
    json!({
        "type": "error",
        "agent_id": agent_id,
        "code": code.as_str(),
        "message": message,
        "fatal": fatal,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_spelled_as_the_registry_spells_them() {
        let all = [
            (Code::InvalidRequest, "INVALID_REQUEST"),
            (Code::NotFound, "NOT_FOUND"),
            (Code::NotAttached, "NOT_ATTACHED"),
            (Code::PermissionDenied, "PERMISSION_DENIED"),
            (Code::ProtocolError, "PROTOCOL_ERROR"),
            (Code::Timeout, "TIMEOUT"),
            (Code::RuntimeStartFailed, "RUNTIME_START_FAILED"),
            (Code::SessionCorrupt, "SESSION_CORRUPT"),
            (Code::InternalError, "INTERNAL_ERROR"),
            (Code::ProviderError, "PROVIDER_ERROR"),
            (Code::ToolError, "TOOL_ERROR"),
            (Code::Conflict, "CONFLICT"),
        ];
        for (code, text) in all {
            assert_eq!(code.as_str(), text);
        }
    }

    #[test]
    fn envelopes_are_read_and_bad_ones_refused() {
        let ok = parse(r#"{"type":"prompt","id":"7","agent_id":"a","message":"hi"}"#).unwrap();
        assert_eq!(ok.kind, "prompt");
        assert_eq!(ok.id.as_deref(), Some("7"));
        assert_eq!(ok.agent_id.as_deref(), Some("a"));
        assert_eq!(ok.body["message"], "hi");
        let no_id = parse(r#"{"type":"agent.list"}"#).unwrap();
        assert_eq!(no_id.id, None);
        for (text, id, kind) in [
            ("nope", None, None),
            ("[1]", None, None),
            ("\"x\"", None, None),
            (r#"{"id":"1"}"#, Some("1"), None),
            (r#"{"id":"1","type":""}"#, Some("1"), None),
            (r#"{"id":1,"type":"agent.list"}"#, None, Some("agent.list")),
            (
                r#"{"id":"2","type":"prompt","agent_id":""}"#,
                Some("2"),
                Some("prompt"),
            ),
            (
                r#"{"id":"2","type":"prompt","agent_id":5}"#,
                Some("2"),
                Some("prompt"),
            ),
        ] {
            let bad = parse(text).unwrap_err();
            assert_eq!(bad.refusal.code, Code::InvalidRequest, "{text}");
            assert_eq!(bad.id.as_deref(), id, "{text}");
            assert_eq!(bad.kind.as_deref(), kind, "{text}");
        }
    }

    #[test]
    fn responses_echo_the_id_and_the_command() {
        let ok = response(Some("r1"), "agent.list", Ok(Some(json!({"agents": []}))));
        assert_eq!(
            ok,
            json!({"type": "response", "id": "r1", "command": "agent.list", "success": true, "data": {"agents": []}})
        );
        let refused = Refusal::not_attached(Some("a"));
        let err = response(None, "prompt", Err(&refused));
        assert_eq!(err["success"], false);
        assert_eq!(err["error"]["code"], "NOT_ATTACHED");
        assert!(err.get("id").is_none());
        assert!(err.get("data").is_none());
        let bare = response(Some("x"), "abort", Ok(None));
        assert!(bare.get("data").is_none());
        assert_eq!(
            hello("simplex-hub 1", &["websocket"]),
            json!({"type": "hello", "protocol_version": "0.1.0", "server_version": "simplex-hub 1", "capabilities": ["websocket"]})
        );
    }
}
