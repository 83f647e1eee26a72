//! Panel protocol v1's objects rendered from the session core's typed
//! views: the session, a confirmation prompt, the worker identity, the
//! process, a request outcome (the Node hub's shapes) and a headless
//! child's recovery state. The panel socket
//! and the HTTP API (`http::api`) both answer with these.

use serde_json::{json, Value};

use crate::session::headless;
use crate::session::{Grant, IdentityView, PromptView, RequestRecord, RequestState, SessionView};
use crate::subagents::family::Recovery;
use crate::supervisor::process::{signal_name, ProcessView};
use crate::util::time;

/// The session object.
pub fn session(v: &SessionView) -> Value {
    let mut out = json!({
        "session_id": v.id,
        "kind": v.kind,
        "created_at": v.created_at,
        // A headless child has no operator spec: an empty one, as the Node
        // hub shows it.
        "spec": v.spec.clone().unwrap_or_else(|| json!({})),
        "connected": v.connected,
        "worker_capabilities": v.capabilities,
        "identity": identity(&v.identity),
        "stats": {
            "events": v.stats.events,
            "gaps": v.stats.gaps,
            "duplicates": v.stats.duplicates,
            "protocolErrors": v.stats.protocol_errors,
            "incarnations": v.stats.incarnations,
        },
        "last_run_id": v.last_run_id.as_deref().unwrap_or(""),
        "last_event_at": v.last_event_at,
        "last_event": v.last_event,
        "confirmations": v.confirmations.iter().map(prompt).collect::<Vec<_>>(),
        "process": process(v.process.as_ref()),
        "requests": v.requests.iter().map(request).collect::<Vec<_>>(),
    });
    if let Some(child) = &v.child {
        out["subagent"] = headless::block(child);
    }
    out
}

/// The worker identity (`connection` frames and the session object).
pub fn identity(v: &IdentityView) -> Value {
    json!({
        "state": v.state.as_str(),
        "worker_id": v.worker_id,
        "since": v.since,
    })
}

/// A confirmation prompt. A headless child's prompt carries `subagent
/// {session_id, parent_session_id}`; one closed unanswered is `retired`.
pub fn prompt(v: &PromptView) -> Value {
    let state = if v.retired {
        "retired"
    } else {
        v.state.as_str()
    };
    let mut out = json!({
        "confirmation_id": v.confirmation_id,
        "session_id": v.session_id,
        "worker_id": v.worker_id,
        "run_id": v.run_id,
        "state": state,
        "verified": v.verified,
        "identity_state": v.identity_state.as_str(),
        "received_at": v.received_at,
        "deadline_at": v.deadline_at,
        "settled_at": v.settled_at,
        "decision": v.decision.map(|d| if d { "approved" } else { "denied" }),
        "reason": v.reason,
        "call": v.call,
    });
    if let Some(bytes) = v.arguments_bytes {
        out["arguments_truncated"] = json!(true);
        out["arguments_bytes"] = json!(bytes);
    }
    if let Some(parent) = &v.parent_session_id {
        out["subagent"] = json!({
            "session_id": v.session_id,
            "parent_session_id": parent,
        });
    }
    out
}

/// The process object: null when no process is known. A headless child's
/// launch details (command, arguments, directory, log path) are shown
/// empty.
pub fn process(v: Option<&ProcessView>) -> Value {
    let Some(v) = v else {
        return Value::Null;
    };
    let (p, logs, hidden) = (v.info(), v.logs(), v.is_redacted());
    json!({
        "state": p.state.as_str(),
        "pid": p.pid,
        "started_at": p.started_at,
        "exited_at": p.exited_at,
        "exit_code": p.exit_code,
        "signal": p.signal.map(signal_name),
        "signal_number": p.signal,
        "error": p.error,
        "stop_requested": p.stop_requested,
        "command": if hidden { "" } else { p.command.as_str() },
        "args": if hidden { &[][..] } else { p.args.as_slice() },
        "cwd": if hidden { "" } else { p.cwd.as_str() },
        "process_group_killed": p.process_group_killed,
        "log_path": if hidden { None } else { p.log_path.as_deref() },
        "log_lines": logs.lines,
        "log_dropped": logs.dropped,
        "log_truncated_bytes": logs.truncated_bytes,
        "file_log_dropped": logs.file_dropped,
        "file_log_failed": logs.file_failed,
        "adopted": p.adopted,
    })
}

/// A request outcome: the Node hub's record (`settled_at` null while
/// `sent`; `detail` the outcome in words), then this hub's `updated_at`
/// and `rejection` (the worker's whole `input_rejected` data, or null).
pub fn request(r: &RequestRecord) -> Value {
    let settled_at = match r.state {
        RequestState::Sent => None,
        _ => Some(&r.updated_at),
    };
    json!({
        "request_id": r.request_id,
        "operation": r.operation,
        "state": r.state.as_str(),
        "sent_at": r.sent_at,
        "settled_at": settled_at,
        "detail": r.detail_text(),
        "updated_at": r.updated_at,
        "rejection": r.detail,
    })
}

/// A session's grants (`GET /api/sessions/:id/grants`): each the exact
/// call it allows.
pub fn grants(grants: &[Grant]) -> Value {
    Value::Array(
        grants
            .iter()
            .map(|g| {
                json!({
                    "grant_id": g.id,
                    "tool": g.tool,
                    "arguments": g.arguments_json(),
                    "created_at": g.created_at,
                })
            })
            .collect(),
    )
}

/// A headless child's recovery state (`GET /api/sessions/:id/recovery`).
pub fn recovery(r: &Recovery) -> Value {
    let c = &r.cleanup;
    json!({
        "session_id": r.session_id,
        "lifecycle_id": r.lifecycle_id,
        "process_alive": r.process_alive,
        "connected": r.connected,
        "max_cleanup_attempts": headless::MAX_CLEANUP_ATTEMPTS,
        "retry_at": c.retry_at_ms.map(time::rfc3339_from_millis),
        "lifecycle": c.lifecycle.as_str(),
        "uncertain_start": c.uncertain_start,
        "termination_confirmed": c.termination_confirmed,
        "cleanup_attempts": c.cleanup_attempts,
        "automatic_retry": c.automatic_retry,
        "reason": c.reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervisor::process::{LogCounters, ProcessInfo};

    #[test]
    fn a_process_signal_is_named_beside_its_number() {
        let mut p = ProcessInfo::starting("w".into(), vec![], "/".into(), "l".into());
        p.ended(None, Some(libc::SIGKILL), "t".into());
        let d = process(Some(&p.view(LogCounters::default())));
        assert_eq!(d["signal"], "SIGKILL");
        assert_eq!(d["signal_number"], libc::SIGKILL);
        assert_eq!(process(None), Value::Null);
    }

    #[test]
    fn the_process_object_has_the_node_hubs_fields() {
        let p = ProcessInfo::starting("w".into(), vec!["a".into()], "/".into(), "l".into());
        let d = process(Some(&p.view(LogCounters::default())));
        for key in [
            "state",
            "pid",
            "started_at",
            "exited_at",
            "exit_code",
            "signal",
            "error",
            "stop_requested",
            "command",
            "args",
            "cwd",
            "process_group_killed",
            "log_path",
            "log_lines",
            "log_dropped",
            "log_truncated_bytes",
            "file_log_dropped",
            "file_log_failed",
        ] {
            assert!(d.get(key).is_some(), "{key}");
        }
        let hidden = process(Some(&p.view(LogCounters::default()).redacted()));
        assert_eq!(
            (&hidden["command"], &hidden["cwd"]),
            (&json!(""), &json!(""))
        );
        assert_eq!(hidden["args"], json!([]));
    }

    #[test]
    fn the_session_object_has_the_seed_shape_and_no_token() {
        let s = crate::session::Session::new(
            "demo".into(),
            "t".into(),
            json!({}),
            "tok".into(),
            "l".into(),
            crate::transcript::Transcript::new(10, 1000),
        );
        let d = session(&s.view(&mut |_| 0));
        for key in [
            "session_id",
            "created_at",
            "spec",
            "connected",
            "worker_capabilities",
            "identity",
            "stats",
            "last_run_id",
            "last_event_at",
            "last_event",
            "confirmations",
            "process",
            "requests",
            "kind",
        ] {
            assert!(d.get(key).is_some(), "missing {key}");
        }
        assert!(
            d.to_string().find("tok").is_none(),
            "token leaked into description"
        );
    }
}
