//! The JSON API under `/api`: metadata (open), and session management
//! (panel token required). Handlers validate, call the hub, and map its
//! errors to stable codes; they hold no lock while doing I/O.

use std::sync::Arc;

use serde_json::{json, Value};
use tiny_http::{Method, Request};

use super::{auth, header, read_body, url, ApiError, Reply};
use crate::hub::{Hub, HubError};
use crate::subagents::{child::Policy, family, Refusal};

/// Routes one `/api` request to its handler.
pub fn handle(hub: &Arc<Hub>, rq: &mut Request, method: &Method, path: &str, query: &str) -> Reply {
    match route(hub, rq, method, path, query) {
        Ok(reply) => reply,
        Err(err) => Reply::error(&err),
    }
}

fn route(
    hub: &Arc<Hub>,
    rq: &mut Request,
    method: &Method,
    path: &str,
    query: &str,
) -> Result<Reply, ApiError> {
    let segments = path
        .trim_start_matches("/api")
        .split('/')
        .skip(1)
        .map(|s| url::percent_decode(s, false))
        .collect::<Result<Vec<String>, _>>()
        .map_err(|err| ApiError::new(400, "bad_request", err.to_string()))?;
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();

    if segments == ["meta"] {
        return match method {
            Method::Get | Method::Head => Ok(Reply::json(200, &hub.meta())),
            _ => Err(method_not_allowed("GET")),
        };
    }
    let presented = auth::Presented {
        query,
        authorization: header(rq, "Authorization"),
        cookie: header(rq, "Cookie"),
    };
    let authorized = auth::panel_authorized(&hub.config.panel.token, &presented);
    if !authorized {
        return Err(ApiError::new(
            401,
            "unauthorized",
            "missing or wrong panel token",
        ));
    }
    // Headless sessions: only description, confirmations, the operator
    // policy and recovery (seed 002); the same check guards the panel
    // socket.
    if let ["sessions", id, rest @ ..] = segments.as_slice() {
        if !allowed_for_headless(method, rest) && hub.is_headless(id) {
            return Err(headless_restricted(id));
        }
    }
    match (segments.as_slice(), method) {
        (["sessions"], Method::Get | Method::Head) => Ok(Reply::json(
            200,
            &json!({"sessions": hub.describe_sessions()}),
        )),
        (["sessions"], Method::Post) => create_session(hub, rq),
        (["sessions"], _) => Err(method_not_allowed("GET, POST")),
        (["sessions", id], Method::Get | Method::Head) => hub
            .describe_session(id)
            .map(|s| Reply::json(200, &json!({"session": s})))
            .ok_or_else(|| unknown_session(id)),
        (["sessions", id], Method::Delete) => {
            hub.delete_session(id).map_err(hub_error)?;
            Ok(Reply::json(200, &json!({"removed": id})))
        }
        (["sessions", _], _) => Err(method_not_allowed("GET, DELETE")),
        (["sessions", id, "events"], Method::Get | Method::Head) => events(hub, id, query),
        (["sessions", id, "input"], Method::Post) => {
            let body = read_json_body(hub, rq)?;
            let request_id = hub
                .send_input(id, &body)
                .map_err(|e| send_error(e, "input_not_sent"))?;
            Ok(Reply::json(
                202,
                &json!({"accepted": "input", "session": id, "request_id": request_id}),
            ))
        }
        (["sessions", id, "signal"], Method::Post) => {
            let body = read_json_body(hub, rq)?;
            let operation = body.get("operation").and_then(Value::as_str).unwrap_or("");
            let run_id = body.get("run_id").and_then(Value::as_str);
            hub.send_signal(id, operation, run_id)
                .map_err(|e| send_error(e, "signal_not_sent"))?;
            Ok(Reply::json(
                202,
                &json!({"accepted": "signal", "session": id, "operation": operation}),
            ))
        }
        (["sessions", id, "confirmations", cid], Method::Post) => decide(hub, rq, id, cid),
        (["sessions", id, "subagent-policy"], Method::Post) => subagent_policy(hub, rq, id),
        (["sessions", id, "recovery"], Method::Get | Method::Head) => recovery(hub, id),
        (["sessions", id, "recover"], Method::Post) => recover(hub, rq, id),
        (["sessions", _, "subagent-policy" | "recover"], _) => Err(method_not_allowed("POST")),
        (["sessions", _, "recovery"], _) => Err(method_not_allowed("GET")),
        (["subagents", "recovery"], Method::Get | Method::Head) => {
            Ok(Reply::json(200, &family::global_recovery(hub)))
        }
        (["subagents", "recovery"], _) => Err(method_not_allowed("GET")),
        (["sessions", id, "answer"], Method::Post) => super::answer::handle(hub, rq, id),
        (["sessions", _, "answer"], _) => Err(method_not_allowed("POST")),
        (
            ["sessions", id, action @ ("start" | "stop" | "restart" | "force-kill")],
            Method::Post,
        ) => worker_action(hub, rq, id, action),
        (["sessions", id, "logs"], Method::Get | Method::Head) => logs(hub, id, query),
        (["sessions", id, "snapshot"], Method::Get | Method::Head) => {
            if hub.describe_session(id).is_none() {
                return Err(unknown_session(id));
            }
            let snapshot = crate::supervisor::snapshot::read(id, &hub.session_dir(id));
            Ok(Reply::json(200, &snapshot))
        }
        (["sessions", _, "start" | "stop" | "restart" | "force-kill"], _) => {
            Err(method_not_allowed("POST"))
        }
        (["sessions", _, "logs" | "snapshot"], _) => Err(method_not_allowed("GET")),
        (["sessions", _, "events"], _) => Err(method_not_allowed("GET")),
        (["sessions", _, "input" | "signal"], _) | (["sessions", _, "confirmations", _], _) => {
            Err(method_not_allowed("POST"))
        }
        _ => Err(ApiError::new(404, "not_found", "no such API route")),
    }
}

fn create_session(hub: &Hub, rq: &mut Request) -> Result<Reply, ApiError> {
    let body = read_json_body(hub, rq)?;
    let id = match body.get("session") {
        Some(Value::String(id)) => id.clone(),
        _ => {
            return Err(ApiError::new(
                400,
                "invalid_session",
                "body must carry \"session\": a session id string",
            ))
        }
    };
    // Not a spec replacement for a headless child either.
    if hub.is_headless(&id) {
        return Err(headless_restricted(&id));
    }
    let session = hub
        .create_session(&id, body.get("spec"))
        .map_err(hub_error)?;
    Ok(Reply::json(201, &json!({"session": session})))
}

/// Reads and parses a JSON object body within `http.maxBodyBytes`.
fn read_json_body(hub: &Hub, rq: &mut Request) -> Result<Value, ApiError> {
    let bytes = read_body(rq, hub.config.http.max_body_bytes)?;
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|err| ApiError::new(400, "bad_json", format!("body is not JSON: {err}")))?;
    if !value.is_object() {
        return Err(ApiError::new(
            400,
            "bad_request",
            "body must be a JSON object",
        ));
    }
    Ok(value)
}

/// Most entries one `events` query returns.
pub const MAX_EVENTS_PAGE: usize = 5000;

/// `GET /api/sessions/:id/events?since=&limit=`.
fn events(hub: &Hub, id: &str, query: &str) -> Result<Reply, ApiError> {
    let number = |name: &str, default: u64| -> Result<u64, ApiError> {
        match url::query_param(query, name) {
            None => Ok(default),
            Some(Ok(v)) if v.is_empty() => Ok(default),
            Some(Ok(v)) => v.parse::<u64>().map_err(|_| {
                ApiError::new(
                    400,
                    "bad_request",
                    format!("{name} must be a non-negative integer"),
                )
            }),
            Some(Err(err)) => Err(ApiError::new(400, "bad_request", err.to_string())),
        }
    };
    let since = number("since", 0)?;
    let limit = number("limit", MAX_EVENTS_PAGE as u64)?.clamp(1, MAX_EVENTS_PAGE as u64) as usize;
    let (latest, entries) = hub
        .events_since(id, since, limit)
        .ok_or_else(|| unknown_session(id))?;
    // Entries are already serialized JSON; splice them without re-parsing.
    let mut body = format!(
        "{{\"session\":{},\"since\":{since},\"latest\":{latest},\"events\":[",
        Value::String(id.to_string())
    );
    for (i, entry) in entries.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(entry);
    }
    body.push_str("]}");
    let mut reply = Reply::json(200, &Value::Null);
    reply.body = body.into_bytes();
    Ok(reply)
}

/// `POST /api/sessions/:id/{start,stop,restart,force-kill}`: 200 with the
/// result when it succeeded, 409 with `{ok: false, error}` when refused.
fn worker_action(
    hub: &Arc<Hub>,
    rq: &mut Request,
    id: &str,
    action: &str,
) -> Result<Reply, ApiError> {
    use crate::supervisor::control;
    if hub.describe_session(id).is_none() {
        return Err(unknown_session(id));
    }
    let body = if rq.body_length() == Some(0) {
        Value::Object(Default::default())
    } else {
        read_json_body(hub, rq)?
    };
    let action = control::Action::parse(action)
        .ok_or_else(|| ApiError::new(404, "not_found", "no such action"))?;
    let spec = body.get("spec").cloned();
    let hub = hub.clone();
    let id = id.to_string();
    // Answered when the action ends (a stop: on its ladder thread); this
    // connection thread does not wait for it.
    Ok(Reply::later(Box::new(move |respond| {
        control::act(
            &hub,
            &id,
            action,
            spec,
            Box::new(move |result| {
                let status = if result["ok"] == json!(true) {
                    200
                } else {
                    409
                };
                respond(Reply::json(status, &result));
            }),
        );
    })))
}

/// `GET /api/sessions/:id/logs?limit=`: `{session, lines, dropped, log_path}`.
fn logs(hub: &Hub, id: &str, query: &str) -> Result<Reply, ApiError> {
    let limit = match url::query_param(query, "limit") {
        None => 500,
        Some(Ok(v)) => v.parse::<usize>().map_err(|_| {
            ApiError::new(400, "bad_request", "limit must be a non-negative integer")
        })?,
        Some(Err(err)) => return Err(ApiError::new(400, "bad_request", err.to_string())),
    };
    let body = hub
        .with_session(id, |s| {
            let lines: Vec<Value> = s
                .logs
                .tail(limit)
                .into_iter()
                .map(|l| json!({"stream": l.stream.as_str(), "text": l.text, "at": crate::util::time::rfc3339_from_millis(l.at_ms)}))
                .collect();
            json!({
                "session": id,
                "lines": lines,
                "dropped": s.logs.dropped(),
                "log_path": s.process.as_ref().and_then(|p| p.log_path.clone()),
            })
        })
        .ok_or_else(|| unknown_session(id))?;
    Ok(Reply::json(200, &body))
}

/// `POST /api/sessions/:id/confirmations/:cid` `{decision, reason?}`.
fn decide(hub: &Hub, rq: &mut Request, id: &str, cid: &str) -> Result<Reply, ApiError> {
    let body = read_json_body(hub, rq)?;
    let approved = match body.get("decision").and_then(Value::as_str) {
        Some("approved") => true,
        Some("denied") => false,
        _ => {
            return Err(ApiError::new(
                400,
                "bad_request",
                "decision must be \"approved\" or \"denied\"",
            ))
        }
    };
    let reason = match body.get("reason") {
        None | Some(Value::Null) => None,
        Some(Value::String(r)) => Some(r.as_str()),
        Some(_) => return Err(ApiError::new(400, "bad_request", "reason must be a string")),
    };
    if hub.describe_session(id).is_none() {
        return Err(unknown_session(id));
    }
    crate::worker::confirm::decide(hub, id, cid, approved, reason).map_err(|err| match err {
        crate::worker::confirm::DecideError::Unknown => {
            ApiError::new(404, "unknown_confirmation", err.to_string())
        }
        crate::worker::confirm::DecideError::Rejected(_) => {
            ApiError::new(409, "confirmation_rejected", err.to_string())
        }
    })?;
    Ok(Reply::json(
        200,
        &json!({"accepted": "confirmation", "session": id, "confirmation_id": cid}),
    ))
}

/// What a headless session permits under `/api/sessions/:id/...`
/// (`rest` is the path after the id): its description, confirmation
/// decisions, the operator policy and recovery (a wrong method there is
/// still 405). Everything else, deletion included, is
/// `headless_restricted`.
fn allowed_for_headless(method: &Method, rest: &[&str]) -> bool {
    match rest {
        [] => *method != Method::Delete,
        ["confirmations", _] | ["subagent-policy" | "recovery" | "recover"] => true,
        _ => false,
    }
}

/// 409 `headless_restricted`: direct conversation and control of a
/// headless session are refused (its parent worker drives it).
fn headless_restricted(id: &str) -> ApiError {
    ApiError::new(
        409,
        crate::panel::protocol::code::HEADLESS_RESTRICTED,
        format!(
            "not available for the headless session {}: it is driven by its parent worker",
            crate::worker::display::quote(id)
        ),
    )
}

/// Maps a refused subagent operation to its status: 404 `unknown_session`
/// (no such session), 400 `invalid_policy` / `invalid_arguments`, 409 for
/// `stale_lifecycle`, `recovery_conflict` and `cleanup_failed`.
fn refusal(err: Refusal) -> ApiError {
    let (status, code) = match err.code {
        "not_found" => (404, "unknown_session"),
        "invalid_policy" | "invalid_arguments" => (400, err.code),
        "storage_error" => (500, err.code),
        _ => (409, err.code),
    };
    ApiError::new(status, code, err.message)
}

fn invalid_arguments(message: impl Into<String>) -> ApiError {
    ApiError::new(400, "invalid_arguments", message)
}

/// Refuses a body member other than `allowed` with `invalid_arguments`.
fn only_keys(body: &Value, allowed: &[&str]) -> Result<(), ApiError> {
    let unknown = body
        .as_object()
        .and_then(|o| o.keys().find(|k| !allowed.contains(&k.as_str())));
    match unknown {
        Some(key) => Err(invalid_arguments(format!(
            "unknown argument {}",
            crate::worker::display::quote(key)
        ))),
        None => Ok(()),
    }
}

/// `POST /api/sessions/:id/subagent-policy` `{policy: ask|deny|approve}`:
/// the headless child's operator policy for new confirmation requests.
fn subagent_policy(hub: &Hub, rq: &mut Request, id: &str) -> Result<Reply, ApiError> {
    let body = read_json_body(hub, rq)?;
    only_keys(&body, &["policy"])?;
    let policy = body
        .get("policy")
        .and_then(Value::as_str)
        .and_then(Policy::parse)
        .ok_or_else(|| {
            ApiError::new(
                400,
                "invalid_policy",
                "policy must be one of \"ask\", \"deny\", \"approve\"",
            )
        })?;
    family::set_policy(hub, id, policy).map_err(refusal)?;
    Ok(Reply::json(
        200,
        &json!({"accepted": "subagent_policy", "session": id, "policy": policy.as_str()}),
    ))
}

/// `GET /api/sessions/:id/recovery`: a headless child's cleanup state.
fn recovery(hub: &Hub, id: &str) -> Result<Reply, ApiError> {
    match family::recovery_info(hub, id) {
        Some(info) => Ok(Reply::json(200, &info)),
        None if hub.with_session(id, |_| ()).is_some() => Err(ApiError::new(
            400,
            "invalid_policy",
            "recovery applies to headless sessions only",
        )),
        None => Err(unknown_session(id)),
    }
}

/// `POST /api/sessions/:id/recover` `{action: retry|confirm-terminated,
/// lifecycle_id}`: an operator's cleanup retry or termination attestation.
fn recover(hub: &Arc<Hub>, rq: &mut Request, id: &str) -> Result<Reply, ApiError> {
    let body = read_json_body(hub, rq)?;
    only_keys(&body, &["action", "lifecycle_id"])?;
    let action = body
        .get("action")
        .and_then(Value::as_str)
        .and_then(family::RecoverAction::parse)
        .ok_or_else(|| invalid_arguments("action must be \"retry\" or \"confirm-terminated\""))?;
    let lifecycle_id = body
        .get("lifecycle_id")
        .and_then(Value::as_str)
        .filter(|l| !l.is_empty())
        .ok_or_else(|| {
            invalid_arguments("lifecycle_id must be the child's current lifecycle id")
        })?;
    let result = family::recover(hub, id, action, lifecycle_id).map_err(refusal)?;
    Ok(Reply::json(200, &result))
}

/// Maps a send failure to its status and the given stable code.
fn send_error(err: crate::hub::SendError, code: &'static str) -> ApiError {
    use crate::hub::SendError;
    match &err {
        SendError::UnknownSession(_) => ApiError::new(404, "unknown_session", err.to_string()),
        SendError::Invalid(_) => ApiError::new(400, code, err.to_string()),
        SendError::NotConnected(_) | SendError::WriteFailed(_) => {
            ApiError::new(409, code, err.to_string())
        }
    }
}

fn method_not_allowed(allow: &str) -> ApiError {
    ApiError::new(405, "method_not_allowed", format!("allowed: {allow}"))
}

fn unknown_session(id: &str) -> ApiError {
    ApiError::new(
        404,
        "unknown_session",
        format!("no session {}", crate::worker::display::quote(id)),
    )
}

/// Maps hub errors to their HTTP status and stable code.
pub fn hub_error(err: HubError) -> ApiError {
    match &err {
        HubError::InvalidSession(_) => ApiError::new(400, "invalid_session", err.to_string()),
        HubError::SessionExists(_) => ApiError::new(409, "session_exists", err.to_string()),
        HubError::UnknownSession(_) => ApiError::new(404, "unknown_session", err.to_string()),
        HubError::SessionBusy { .. } => ApiError::new(409, "session_busy", err.to_string()),
        HubError::Storage(_) => ApiError::new(500, "storage_error", err.to_string()),
    }
}
