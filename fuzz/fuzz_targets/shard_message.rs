//! The whole Shard message parser: the envelope (`wire::shard::message::parse`), the
//! command catalog (`wire::shard::catalog::{scope, parse}`), the direct
//! connection's routing (`wire::shard::direct::route`) and its `agent_id`
//! stripping (`wire::shard::direct::without_agent_id`), as one message of any
//! transport (a WebSocket text frame, a JSONL line) goes through them.
//!
//! Properties: never panics. A refused envelope is `INVALID_REQUEST` and
//! echoes only a string `id` and a non-empty string `type` of the object;
//! an accepted one agrees with its object (`type` non-empty, `id` and
//! `agent_id` the object's strings, `agent_id` non-empty, the body the
//! object). The catalog refuses only with `INVALID_REQUEST`, refuses every
//! type without a scope, and a command's variant agrees with its type's
//! scope (orchestrator, per-agent, connection). On a direct connection an
//! orchestrator or connection message is `PROTOCOL_ERROR`, a per-agent one
//! naming another agent `INVALID_REQUEST`, the rest passes. Re-encoding the
//! JSON (decode, encode, decode) gives the same outcome everywhere. Cutting
//! `agent_id` out of serde_json's encoding of any object gives the object
//! without its top-level `agent_id` (nested ones kept), and leaves text
//! without one as it is.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use simplex_hub::wire::shard::catalog::{self, Command, Scope};
use simplex_hub::wire::shard::direct;
use simplex_hub::wire::shard::message::{self, Code};
use simplex_hub_fuzz::{encode, text};

/// What parsing one message gave, comparable across encodings.
#[derive(Debug, PartialEq)]
enum Outcome {
    BadEnvelope {
        id: Option<String>,
        kind: Option<String>,
    },
    Refused(String),
    Command(Command),
}

fn outcome(text: &str) -> Outcome {
    let value = serde_json::from_str::<Value>(text);
    let msg = match message::parse(text) {
        Err(bad) => {
            assert_eq!(bad.refusal.code, Code::InvalidRequest);
            let object = value.as_ref().ok().and_then(Value::as_object);
            if let Some(id) = &bad.id {
                assert_eq!(
                    object.and_then(|o| o.get("id")),
                    Some(&Value::from(id.as_str()))
                );
            }
            if let Some(kind) = &bad.kind {
                assert!(!kind.is_empty());
                assert_eq!(
                    object.and_then(|o| o.get("type")),
                    Some(&Value::from(kind.as_str()))
                );
            }
            return Outcome::BadEnvelope {
                id: bad.id,
                kind: bad.kind,
            };
        }
        Ok(msg) => msg,
    };
    let object = value.expect("an accepted message is JSON");
    let object = object
        .as_object()
        .expect("an accepted message is an object");
    assert_eq!(&msg.body, object);
    assert!(!msg.kind.is_empty());
    assert_eq!(object.get("type"), Some(&Value::from(msg.kind.as_str())));
    match &msg.id {
        Some(id) => assert_eq!(object.get("id"), Some(&Value::from(id.as_str()))),
        None => assert!(object.get("id").is_none_or(Value::is_null)),
    }
    match &msg.agent_id {
        Some(agent) => {
            assert!(!agent.is_empty());
            assert_eq!(object.get("agent_id"), Some(&Value::from(agent.as_str())));
        }
        None => assert!(object.get("agent_id").is_none_or(Value::is_null)),
    }

    let scope = catalog::scope(&msg.kind);
    let parsed = catalog::parse(&msg);
    // The direct connection's routing of the same message.
    let routed = direct::route(&msg.kind, msg.agent_id.as_deref(), "bound-agent");
    match scope {
        Some(Scope::Orchestrator | Scope::Connection) => {
            assert_eq!(routed.unwrap_err().code, Code::ProtocolError)
        }
        Some(Scope::Agent) => match msg.agent_id.as_deref() {
            Some(other) if other != "bound-agent" => {
                assert_eq!(routed.unwrap_err().code, Code::InvalidRequest)
            }
            _ => assert!(routed.is_ok()),
        },
        None => assert!(routed.is_ok()),
    }
    match parsed {
        Err(refusal) => {
            assert_eq!(refusal.code, Code::InvalidRequest, "{}", refusal.message);
            Outcome::Refused(refusal.message)
        }
        Ok(command) => {
            let scope = scope.expect("a command of a type without a scope");
            let expected = match &command {
                Command::AgentList
                | Command::AgentCreate(_)
                | Command::AgentAttach { .. }
                | Command::AgentDetach { .. }
                | Command::AgentTerminate { .. }
                | Command::AgentKill { .. }
                | Command::AgentStatus { .. }
                | Command::DaemonShutdown { .. } => Some(Scope::Orchestrator),
                Command::DirectBind(_) => Some(Scope::Connection),
                Command::Prompt { .. }
                | Command::Abort
                | Command::ListModes
                | Command::SetMode { .. }
                | Command::ListModels
                | Command::SessionCompact
                | Command::SessionList
                | Command::PermissionResponse { .. }
                | Command::UiResponse { .. } => Some(Scope::Agent),
                Command::Unsupported { what, why } => {
                    assert!(!what.is_empty() && !why.is_empty());
                    None
                }
            };
            if let Some(expected) = expected {
                assert_eq!(scope, expected, "{command:?}");
            }
            Outcome::Command(command)
        }
    }
}

fn check_stripping(value: &Value) {
    let text = encode(value);
    let cut = direct::without_agent_id(&text);
    let Value::Object(map) = value else {
        assert_eq!(cut, text, "only an object loses a member");
        return;
    };
    let mut expected = map.clone();
    let had = expected.shift_remove("agent_id").is_some();
    if !had {
        assert_eq!(cut, text, "nothing to cut");
        return;
    }
    let back: Value = serde_json::from_str(&cut).expect("the cut text is JSON");
    assert_eq!(back, Value::Object(expected));
}

fuzz_target!(|data: &[u8]| {
    let text = text(data);
    let first = outcome(&text);
    if let Ok(value) = serde_json::from_str::<Value>(&text) {
        // Whitespace, escapes and number spelling do not change the outcome.
        assert_eq!(first, outcome(&encode(&value)));
        check_stripping(&value);
        if let Value::Object(map) = &value {
            // The same object with an agent_id added, first and last.
            let mut front = serde_json::Map::new();
            front.insert("agent_id".into(), Value::from("a"));
            front.extend(map.clone());
            check_stripping(&Value::Object(front));
            let mut back = map.clone();
            back.insert("agent_id".into(), Value::from("z"));
            check_stripping(&Value::Object(back));
        }
    }
});
