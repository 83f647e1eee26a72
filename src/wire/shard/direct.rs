//! The direct connection (seed 004 §1 and §5.2), pure: a connection bound
//! to exactly one agent carries only per-agent messages, and `agent_id` is
//! omitted both ways. This hub makes one from a unix-socket connection
//! that sends `direct.bind` (its own extension, the first thing
//! `simplex-hub shard-stdio` writes); after the bind every rule of this
//! module applies to it, in the hub, so there is one implementation of
//! each: what may be sent ([`route`]), how every outgoing message loses its
//! routing `agent_id` ([`without_agent_id`]), and the last line the hub
//! writes when it ends the connection itself ([`end_event`]).

use std::borrow::Cow;

use serde_json::{json, Value};

use super::catalog::{self, Scope};
use super::message::{Code, Refusal};

/// The message type that binds a unix-socket connection to one agent.
pub use super::catalog::DIRECT_BIND as BIND;

/// The transport-scoped capabilities of a direct connection's `hello`.
pub const CAPABILITIES: &[&str] = &["unix-socket", "direct"];

/// Why the hub ended a direct connection (the last line's `end_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The agent's worker process ended (stopped or failed).
    WorkerExited,
    /// The agent's session was deleted.
    AgentDeleted,
}

impl End {
    pub fn as_str(self) -> &'static str {
        match self {
            End::WorkerExited => "worker_exited",
            End::AgentDeleted => "agent_deleted",
        }
    }

    pub fn parse(text: &str) -> Option<End> {
        match text {
            "worker_exited" => Some(End::WorkerExited),
            "agent_deleted" => Some(End::AgentDeleted),
            _ => None,
        }
    }
}

/// Whether a message of type `kind`, with routing `agent_id`, may be sent
/// on a connection bound to `bound`. Orchestrator messages (and a second
/// bind) belong to daemon connections only: `PROTOCOL_ERROR`, the seed's
/// code for a message out of place. A per-agent message naming another
/// agent is `INVALID_REQUEST`; one naming the bound agent is taken as if
/// it had none. An unknown type is left to the catalog.
pub fn route(kind: &str, agent_id: Option<&str>, bound: &str) -> Result<(), Refusal> {
    match catalog::scope(kind) {
        Some(Scope::Orchestrator) | Some(Scope::Connection) => Err(Refusal::new(
            Code::ProtocolError,
            format!(
                "{kind} is not carried on a direct connection: it is bound to agent {bound:?} \
                 and takes only per-agent messages"
            ),
        )),
        Some(Scope::Agent) => match agent_id {
            Some(other) if other != bound => Err(Refusal::invalid(format!(
                "this direct connection is bound to agent {bound:?}; omit agent_id \
                 (it named {other:?})"
            ))),
            _ => Ok(()),
        },
        None => Ok(()),
    }
}

/// The last message of a direct connection the hub ends itself: a fatal
/// `error` naming why in `end_reason` (with the runtime's state and exit
/// status when the worker exited). A connection that ends without one
/// ended because the hub went away.
pub fn end_event(
    agent: &str,
    end: End,
    runtime_state: Option<&str>,
    exit_code: Option<i64>,
) -> Value {
    let (code, message) = match end {
        End::WorkerExited => (
            Code::InternalError,
            match (runtime_state, exit_code) {
                (Some(state), Some(status)) => {
                    format!("the agent's worker exited ({state}, status {status})")
                }
                (Some(state), None) => format!("the agent's worker exited ({state})"),
                _ => "the agent's worker exited".to_string(),
            },
        ),
        End::AgentDeleted => (
            Code::NotFound,
            "the agent's session was deleted".to_string(),
        ),
    };
    let mut out = json!({
        "type": "error",
        "agent_id": agent,
        "code": code.as_str(),
        "message": message,
        "fatal": true,
        "end_reason": end.as_str(),
    });
    if let Some(state) = runtime_state {
        out["runtime_state"] = json!(state);
    }
    if let Some(status) = exit_code {
        out["exit_code"] = json!(status);
    }
    out
}

/// `text`, one compact JSON object as `serde_json` writes it, without its
/// top-level `agent_id` member (nested ones stay: a tool's arguments may
/// have one). Borrowed when there is none, or when `text` is not an
/// object this scanner can read.
pub fn without_agent_id(text: &str) -> Cow<'_, str> {
    match find_member(text.as_bytes(), b"\"agent_id\"") {
        Some((start, end)) => {
            let mut out = String::with_capacity(text.len() - (end - start));
            out.push_str(&text[..start]);
            out.push_str(&text[end..]);
            Cow::Owned(out)
        }
        None => Cow::Borrowed(text),
    }
}

/// The byte span to cut for the top-level member whose key is `key`
/// (quotes included): the member and one comma next to it.
fn find_member(b: &[u8], key: &[u8]) -> Option<(usize, usize)> {
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    // The start of the previous member's separating comma, if any.
    let mut comma: Option<usize> = None;
    loop {
        i = skip_ws(b, i);
        if b.get(i) == Some(&b'}') {
            return None;
        }
        let member = i;
        let key_end = string_end(b, i)?;
        let this = &b[member..key_end] == key;
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        i = value_end(b, skip_ws(b, i + 1))?;
        let after = skip_ws(b, i);
        match b.get(after) {
            Some(b',') if this => return Some((member, skip_ws(b, after + 1))),
            Some(b'}') if this => return Some((comma.unwrap_or(member), i)),
            Some(b',') => {
                comma = Some(i);
                i = after + 1;
            }
            _ => return None,
        }
    }
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The end (exclusive) of the string starting at `i`.
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let mut j = i + 1;
    loop {
        match b.get(j)? {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
}

/// The end (exclusive) of the value starting at `i`.
fn value_end(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i)? {
        b'"' => string_end(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match b.get(j)? {
                    b'"' => {
                        j = string_end(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let mut j = i;
            while !matches!(
                b.get(j),
                None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
            ) {
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stripped(v: &Value) -> Value {
        serde_json::from_str(&without_agent_id(&v.to_string())).unwrap()
    }

    #[test]
    fn the_top_level_agent_id_goes_wherever_it_stands() {
        for (given, want) in [
            (
                json!({"type": "status", "agent_id": "a", "status": "idle"}),
                json!({"type": "status", "status": "idle"}),
            ),
            (json!({"agent_id": "a", "type": "x"}), json!({"type": "x"})),
            (
                json!({"type": "x", "agent_id": "a\"b\\c"}),
                json!({"type": "x"}),
            ),
            (json!({"agent_id": {"n": [1, "}"]}}), json!({})),
            (
                json!({"type": "tool_call", "agent_id": "a",
                    "args": {"agent_id": "nested stays", "s": "\"agent_id\":1"}}),
                json!({"type": "tool_call",
                    "args": {"agent_id": "nested stays", "s": "\"agent_id\":1"}}),
            ),
            (
                json!({"type": "response", "data": {"agent_id": "a"}}),
                json!({"type": "response", "data": {"agent_id": "a"}}),
            ),
            (
                json!({"a": null, "agent_id": 5, "z": true}),
                json!({"a": null, "z": true}),
            ),
        ] {
            assert_eq!(stripped(&given), want, "{given}");
        }
        // Nothing to cut: the same text, borrowed.
        let text = r#"{"type":"hello"}"#;
        assert!(matches!(without_agent_id(text), Cow::Borrowed(t) if t == text));
        assert!(matches!(without_agent_id("[1]"), Cow::Borrowed(_)));
        assert!(matches!(without_agent_id("{\"a\":"), Cow::Borrowed(_)));
        // Whitespace between tokens is tolerated.
        assert_eq!(
            without_agent_id(r#"{ "x" : 1 , "agent_id" : "a" }"#),
            r#"{ "x" : 1 }"#
        );
    }

    #[test]
    fn only_per_agent_messages_travel_on_a_direct_connection() {
        assert!(route("prompt", None, "a").is_ok());
        assert!(route("permission_response", Some("a"), "a").is_ok());
        let other = route("prompt", Some("b"), "a").unwrap_err();
        assert_eq!(other.code, Code::InvalidRequest);
        for kind in [
            "agent.list",
            "agent.attach",
            "daemon.shutdown",
            "subagent.create",
            BIND,
        ] {
            assert_eq!(
                route(kind, None, "a").unwrap_err().code,
                Code::ProtocolError,
                "{kind}"
            );
        }
        assert!(
            route("no.such", None, "a").is_ok(),
            "the catalog's to refuse"
        );
    }

    #[test]
    fn the_end_line_names_why() {
        let e = end_event("a", End::WorkerExited, Some("failed"), Some(3));
        assert_eq!(e["type"], "error");
        assert_eq!(e["fatal"], true);
        assert_eq!(e["end_reason"], "worker_exited");
        assert_eq!(e["exit_code"], 3);
        assert!(e["message"].as_str().unwrap().contains("status 3"));
        let d = end_event("a", End::AgentDeleted, None, None);
        assert_eq!(d["code"], "NOT_FOUND");
        assert!(d.get("exit_code").is_none());
        for end in [End::WorkerExited, End::AgentDeleted] {
            assert_eq!(End::parse(end.as_str()), Some(end));
        }
    }
}
