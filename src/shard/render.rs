//! The Shard events the hub writes itself (not translated from a worker
//! envelope), pure: permission requests and their resolution (§9.5), the
//! `sync` of an attachment (§9.1), status (§9.1) and the orchestrator
//! events (§10.2), among them the sanitized `agent_activity` overview.

use serde_json::{json, Value};

use super::agent::{self, Snapshot};
use super::track::{Asked, Derived};
use crate::session::{Grant, PromptView};
use crate::wire::shard::translate;

/// A permission request from a prompt's view (its arguments already
/// bounded to the preview budget). The decision always applies to the
/// original call.
pub fn permission_request(agent: &str, prompt: &PromptView) -> Value {
    let tool = prompt.tool();
    let input = prompt.arguments().cloned().unwrap_or(json!({}));
    let mut details = vec![json!({"label": "tool", "value": tool, "format": "text"})];
    if let Some(command) = input.get("command").and_then(Value::as_str) {
        details.push(json!({"label": "command", "value": command, "format": "command"}));
    }
    details.push(json!({"label": "arguments", "value": input.to_string(), "format": "code"}));
    if let Some(bytes) = prompt.arguments_bytes {
        details.push(json!({
            "label": "note",
            "value": format!("the arguments are shown shortened ({bytes} bytes in full)"),
            "format": "text",
        }));
    }
    if let Some(parent) = &prompt.parent_session_id {
        details.push(json!({"label": "subagent of", "value": parent, "format": "text"}));
    }
    json!({
        "type": "permission_request",
        "agent_id": agent,
        "request_id": prompt.confirmation_id,
        "tool_name": tool,
        "input": input,
        "prompt": format!("Allow {tool}?"),
        "options": ["allow", "allow_always", "deny"],
        "details": details,
    })
}

/// What a permission request asks for: its call, and the call's
/// `tool_call` event as the request shows it.
pub fn asked(agent: &str, prompt: &PromptView) -> Asked {
    let call = Value::Object(prompt.call.clone());
    Asked {
        call_id: prompt
            .call
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        event: translate::call_event(agent, &call),
    }
}

/// How a request was resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    Allow,
    /// Allowed, and a grant made for its exact call.
    AllowAlways,
    Deny,
}

impl Resolution {
    pub fn as_str(self) -> &'static str {
        match self {
            Resolution::Allow => "allow",
            Resolution::AllowAlways => "allow_always",
            Resolution::Deny => "deny",
        }
    }
}

/// A request's resolution, and who or what resolved it.
pub fn permission_resolved(
    agent: &str,
    request_id: &str,
    decision: Resolution,
    source: &str,
) -> Value {
    json!({
        "type": "permission_resolved",
        "agent_id": agent,
        "request_id": request_id,
        "decision": decision.as_str(),
        "source": source,
    })
}

/// The `sync` after an attach. `grants` (this hub's addition) lists the
/// calls the agent's requests are allowed for without asking, each as
/// `{grant_id, tool_name, input, created_at}`.
pub fn sync(
    snap: &Snapshot,
    now: &Derived,
    live_window: Value,
    pending: Vec<Value>,
    grants: &[Grant],
) -> Value {
    let grants: Vec<Value> = grants
        .iter()
        .map(|g| {
            json!({
                "grant_id": g.id,
                "tool_name": g.tool,
                "input": g.arguments_json(),
                "created_at": g.created_at,
            })
        })
        .collect();
    json!({
        "type": "sync",
        "agent_id": snap.agent_id,
        "status": now.status.as_str(),
        "mode": snap.mode,
        "capabilities": snap.capabilities(),
        "runtime_epoch": snap.epoch,
        "live_window": live_window,
        "pending_requests": pending,
        "grants": grants,
    })
}

/// `status` to an agent's attachments.
pub fn status(agent: &str, now: &Derived) -> Value {
    json!({"type": "status", "agent_id": agent, "status": now.status.as_str()})
}

/// `agent_status_changed`, to every connection.
pub fn status_changed(agent: &str, now: &Derived) -> Value {
    json!({
        "type": "agent_status_changed",
        "agent_id": agent,
        "status": now.status.as_str(),
        "runtime_state": now.runtime.as_str(),
    })
}

/// `agent_activity`, to every connection: the phase, the status and the
/// tool's name only (never text, arguments, results, paths or
/// transcripts).
pub fn activity(agent: &str, now: &Derived, timestamp: u64) -> Value {
    let mut out = json!({
        "type": "agent_activity",
        "agent_id": agent,
        "timestamp": timestamp,
        "phase": now.phase,
        "status": now.status.as_str(),
    });
    if let Some(tool) = &now.tool {
        out["tool_name"] = json!(tool);
    }
    out
}

/// `agent_spawned`, to every connection.
pub fn spawned(snap: &Snapshot, now: &Derived) -> Value {
    json!({"type": "agent_spawned", "agent_id": snap.agent_id, "info": agent::info(snap, now)})
}

/// `agent_exited` for a runtime that failed.
pub fn exited(snap: &Snapshot) -> Value {
    let mut out = json!({
        "type": "agent_exited",
        "agent_id": snap.agent_id,
        "runtime_state": "failed",
        "reason": snap.exit.as_ref().map_or("the worker failed", |e| e.reason.as_str()),
    });
    if let Some(code) = snap.exit.as_ref().and_then(|e| e.code) {
        out["exit_code"] = json!(code);
    }
    out
}

/// `mode_changed` to an agent's attachments.
pub fn mode_changed(agent: &str, previous: &str, mode: &str) -> Value {
    json!({"type": "mode_changed", "agent_id": agent, "previous_mode": previous, "mode": mode})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::track::{Runtime, Status};

    #[test]
    fn a_permission_request_names_the_call_and_offers_allow_and_deny() {
        let call = json!({"id": "call-1", "name": "run_command",
            "arguments": {"command": "rm -rf build"}});
        let mut prompt = PromptView {
            session_id: "a".into(),
            parent_session_id: None,
            confirmation_id: "c-1".into(),
            worker_id: "w".into(),
            run_id: "r".into(),
            state: crate::session::PromptState::AwaitingDecision,
            retired: false,
            verified: true,
            identity_state: crate::session::IdentityState::Live,
            received_at: "t".into(),
            deadline_at: "t".into(),
            settled_at: None,
            decision: None,
            reason: None,
            call: call.as_object().unwrap().clone(),
            arguments_bytes: None,
        };
        let r = permission_request("a", &prompt);
        assert_eq!(r["request_id"], "c-1");
        assert_eq!(r["tool_name"], "run_command");
        assert_eq!(r["input"], json!({"command": "rm -rf build"}));
        assert_eq!(r["options"], json!(["allow", "allow_always", "deny"]));
        assert_eq!(r["prompt"], "Allow run_command?");
        assert_eq!(
            r["details"][1],
            json!({"label": "command", "value": "rm -rf build", "format": "command"})
        );
        // A shortened preview and a child's parent are told.
        prompt.arguments_bytes = Some(70_000);
        prompt.parent_session_id = Some("p".into());
        let details = permission_request("a", &prompt)["details"].clone();
        assert_eq!(
            details[3]["value"],
            "the arguments are shown shortened (70000 bytes in full)"
        );
        assert_eq!(
            details[4],
            json!({"label": "subagent of", "value": "p", "format": "text"})
        );
        assert_eq!(
            permission_resolved("a", "c-1", Resolution::Deny, "deadline"),
            json!({"type": "permission_resolved", "agent_id": "a", "request_id": "c-1",
                "decision": "deny", "source": "deadline"})
        );
    }

    #[test]
    fn activity_is_coarse() {
        let now = Derived {
            status: Status::Streaming,
            runtime: Runtime::Running,
            phase: "tool",
            tool: Some("run_command".into()),
        };
        let a = activity("a", &now, 7);
        assert_eq!(
            a,
            json!({"type": "agent_activity", "agent_id": "a", "timestamp": 7, "phase": "tool",
                "status": "streaming", "tool_name": "run_command"})
        );
        assert_eq!(
            status_changed("a", &now),
            json!({"type": "agent_status_changed", "agent_id": "a", "status": "streaming",
                "runtime_state": "running"})
        );
    }
}
