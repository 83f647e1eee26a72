//! The JSON API under `/api`: an adapter over the command layer (`ops`).
//! Each route parses its path, query and body, calls one command, and
//! renders the result as JSON with its status; refusals come back from the
//! command as an `OpError` that already knows its code and status.

use std::sync::Arc;

use serde_json::{json, Value};
use tiny_http::{Method, Request};

use crate::reply::{header, read_body, ApiError, Reply};

use crate::hub::Hub;
use crate::ops::health::Front;
use crate::ops::{self, sessions::LogBounds, worker::Action};
use crate::panel::render;
use crate::wire::http::{auth, url};
use crate::wire::{code, ids};

/// The front-ends whose connections the health route lists (the panel
/// socket's and Shard's, seen only as [`Front`]s).
pub struct Fronts<'a> {
    pub panels: &'a dyn Front,
    pub shard: &'a dyn Front,
}

/// Routes one `/api` request to its handler.
pub fn handle(
    hub: &Arc<Hub>,
    fronts: &Fronts<'_>,
    rq: &mut Request,
    method: &Method,
    path: &str,
    query: &str,
) -> Reply {
    match route(hub, fronts, rq, method, path, query) {
        Ok(reply) => reply,
        Err(err) => Reply::error(&err),
    }
}

fn route(
    hub: &Arc<Hub>,
    fronts: &Fronts<'_>,
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
        .map_err(|err| bad_request(err.to_string()))?;
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
    if !auth::panel_authorized(&hub.config.panel.token, &presented) {
        return Err(ApiError::new(
            401,
            code::UNAUTHORIZED,
            "missing or wrong panel token",
        ));
    }
    let get = matches!(method, Method::Get | Method::Head);
    let post = *method == Method::Post;
    // As the Node hub: a per-session route naming an id that no session
    // could have is 400 `invalid_session` (not 404).
    if let ["sessions", id, ..] = segments.as_slice() {
        if !ids::is_valid_id(id) {
            return Err(ApiError::new(400, code::INVALID_SESSION, ids::ID_GRAMMAR));
        }
    }
    match segments.as_slice() {
        ["configurations", rest @ ..] => {
            super::library::configurations(hub, rq, method, rest, query)
        }
        ["skills", rest @ ..] => super::library::skills(hub, method, rest),
        ["sessions", id, "configurations"] if post => super::library::apply(hub, rq, id),
        ["sessions"] if get => Ok(ok(
            json!({"sessions": ops::sessions::list(hub).iter().map(render::session).collect::<Vec<_>>()}),
        )),
        ["sessions"] if post => {
            let body = read_json_body(hub, rq)?;
            let Some(Value::String(id)) = body.get("session") else {
                return Err(ApiError::new(
                    400,
                    code::INVALID_SESSION,
                    "body must carry \"session\": a session id string",
                ));
            };
            let session = ops::sessions::create(hub, id, body.get("spec"))?;
            Ok(Reply::json(
                201,
                &json!({"session": render::session(&session)}),
            ))
        }
        ["sessions"] => Err(method_not_allowed("GET, POST")),
        ["sessions", id] if get => Ok(ok(
            json!({"session": render::session(&ops::sessions::describe(hub, id)?)}),
        )),
        ["sessions", id] if *method == Method::Delete => {
            ops::sessions::delete(hub, id)?;
            Ok(ok(json!({"removed": id})))
        }
        ["sessions", _] => Err(method_not_allowed("GET, DELETE")),
        ["sessions", id, "events"] if get => events(hub, id, query),
        ["sessions", id, "input"] if post => {
            let body = read_json_body(hub, rq)?;
            let request_id = ops::worker::input(hub, id, &body)?;
            Ok(Reply::json(
                202,
                &json!({"accepted": "input", "session": id, "request_id": request_id}),
            ))
        }
        ["sessions", id, "signal"] if post => {
            let body = read_json_body(hub, rq)?;
            let operation = body.get("operation").and_then(Value::as_str).unwrap_or("");
            let run_id = body.get("run_id").and_then(Value::as_str);
            ops::worker::signal(hub, id, operation, run_id)?;
            Ok(Reply::json(
                202,
                &json!({"accepted": "signal", "session": id, "operation": operation}),
            ))
        }
        ["sessions", id, "confirmations", cid] if post => decide(hub, rq, id, cid),
        // A simplex-hub extension (Shard's `allow_always`): the session's
        // grants, and revoking one.
        ["sessions", id, "grants"] if get => {
            let grants = ops::confirm::grants(hub, id)?;
            Ok(ok(
                json!({"session": id, "grants": render::grants(&grants)}),
            ))
        }
        ["sessions", id, "grants", gid] if *method == Method::Delete => {
            ops::confirm::revoke_grant(hub, id, gid)?;
            Ok(ok(json!({"session": id, "revoked": gid})))
        }
        ["sessions", id, "subagent-policy"] if post => {
            let body = read_json_body(hub, rq)?;
            only_keys(&body, &["policy"])?;
            let policy = body.get("policy").and_then(Value::as_str).unwrap_or("");
            let policy = ops::headless::set_policy(hub, id, policy)?;
            // The Node hub answers with the session's description.
            Ok(ok(json!({
                "session": render::session(&ops::sessions::describe(hub, id)?),
                "accepted": "subagent_policy",
                "policy": policy.as_str(),
            })))
        }
        ["sessions", id, "recovery"] if get => {
            Ok(ok(render::recovery(&ops::headless::recovery(hub, id)?)))
        }
        ["sessions", id, "recover"] if post => {
            let body = read_json_body(hub, rq)?;
            only_keys(&body, &["action", "lifecycle_id"])?;
            let text = |key: &str| body.get(key).and_then(Value::as_str).unwrap_or("");
            let done = ops::headless::recover(hub, id, text("action"), text("lifecycle_id"))?;
            Ok(ok(json!({"session_id": id, "state": done.as_str()})))
        }
        ["subagents", "recovery"] if get => {
            let reason = ops::headless::global_recovery(hub);
            Ok(ok(json!({"blocked": reason.is_some(), "reason": reason})))
        }
        // A simplex-hub extension (not in seed 002): `ops::health`.
        ["hub", "health"] if get => {
            let health = ops::health::collect(hub, fronts.panels, fronts.shard);
            let mut reply = Reply::json(200, &Value::Null);
            reply.body = serde_json::to_vec(&health).unwrap_or_default();
            Ok(reply)
        }
        ["sessions", id, "answer"] if post => {
            ops::operable(hub, id, "answer")?;
            let bytes = read_body(rq, hub.config.http.max_body_bytes)?;
            let args: Value = serde_json::from_slice(&bytes).map_err(not_json)?;
            // A client that goes away cancels its query (seed 002).
            let watch = super::hangup::watch(rq.socket_clone());
            Ok(ok(ops::worker::answer(hub, id, &args, watch.gone())?))
        }
        ["sessions", id, action @ ("start" | "stop" | "restart" | "force-kill")] if post => {
            worker_action(hub, rq, id, action)
        }
        ["sessions", id, "logs"] if get => logs(hub, id, query),
        ["sessions", id, "snapshot"] if get => Ok(ok(ops::sessions::snapshot(hub, id)?)),
        ["sessions", _, "subagent-policy" | "recover" | "answer" | "input" | "signal" | "configurations"]
        | ["sessions", _, "start" | "stop" | "restart" | "force-kill"]
        | ["sessions", _, "confirmations", _] => Err(method_not_allowed("POST")),
        ["sessions", _, "recovery" | "logs" | "snapshot" | "events" | "grants"]
        | ["subagents", "recovery"]
        | ["hub", "health"] => Err(method_not_allowed("GET")),
        ["sessions", _, "grants", _] => Err(method_not_allowed("DELETE")),
        _ => Err(ApiError::new(404, code::NOT_FOUND, "no such API route")),
    }
}

fn ok(value: Value) -> Reply {
    Reply::json(200, &value)
}

fn bad_request(message: impl Into<String>) -> ApiError {
    ApiError::new(400, code::BAD_REQUEST, message)
}

fn not_json(err: serde_json::Error) -> ApiError {
    ApiError::new(400, code::BAD_JSON, format!("body is not JSON: {err}"))
}

/// A JSON object body, or `None` when there is no body (none declared, or
/// only whitespace).
fn optional_json_body(hub: &Hub, rq: &mut Request) -> Result<Option<Value>, ApiError> {
    if rq.body_length() == Some(0) {
        return Ok(None);
    }
    let bytes = read_body(rq, hub.config.http.max_body_bytes)?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let value: Value = serde_json::from_slice(&bytes).map_err(not_json)?;
    if !value.is_object() {
        return Err(bad_request("body must be a JSON object"));
    }
    Ok(Some(value))
}

/// Reads and parses a JSON object body within `http.maxBodyBytes`.
fn read_json_body(hub: &Hub, rq: &mut Request) -> Result<Value, ApiError> {
    let bytes = read_body(rq, hub.config.http.max_body_bytes)?;
    let value: Value = serde_json::from_slice(&bytes).map_err(not_json)?;
    if !value.is_object() {
        return Err(bad_request("body must be a JSON object"));
    }
    Ok(value)
}

/// A non-negative integer query parameter, `default` when absent or empty.
fn number(query: &str, name: &str, default: u64) -> Result<u64, ApiError> {
    match url::query_param(query, name) {
        None => Ok(default),
        Some(Ok(v)) if v.is_empty() => Ok(default),
        Some(Ok(v)) => v
            .parse::<u64>()
            .map_err(|_| bad_request(format!("{name} must be a non-negative integer"))),
        Some(Err(err)) => Err(bad_request(err.to_string())),
    }
}

/// `GET /api/sessions/:id/events?since=&limit=`: at most `limit` retained
/// entries after `since`; no `limit`, or `limit=0` (what Node clients send
/// by default), means every retained entry, as with the Node hub (a client
/// that sets its cursor to `latest` must have been given everything up to
/// it). The transcript ring bounds the answer either way.
fn events(hub: &Hub, id: &str, query: &str) -> Result<Reply, ApiError> {
    let since = number(query, "since", 0)?;
    let limit = match number(query, "limit", 0)? {
        0 => usize::MAX,
        n => usize::try_from(n).unwrap_or(usize::MAX),
    };
    let page = ops::sessions::events(hub, id, since, limit)?;
    // Entries are already serialized JSON; splice them without re-parsing.
    let mut body = format!(
        "{{\"session\":{},\"since\":{since},\"latest\":{},\"events\":[",
        Value::String(id.to_string()),
        page.latest
    );
    for (i, entry) in page.entries.iter().enumerate() {
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

/// `POST /api/sessions/:id/{start,stop,restart,force-kill}`, answered with
/// the result as the Node hub does: a start or restart with 200 when it
/// succeeded and 409 when it did not; a stop or force-kill always with
/// 200 (`ok` says how it went). A start or restart takes `{spec}` or no
/// body at all; a stop or force-kill reads no body.
fn worker_action(
    hub: &Arc<Hub>,
    rq: &mut Request,
    id: &str,
    action: &str,
) -> Result<Reply, ApiError> {
    ops::operable(hub, id, &format!("worker {action}"))?;
    let action = Action::parse(action)
        .ok_or_else(|| ApiError::new(404, code::NOT_FOUND, "no such action"))?;
    let spec = match action {
        Action::Start | Action::Restart => {
            optional_json_body(hub, rq)?.and_then(|body| body.get("spec").cloned())
        }
        Action::Stop | Action::ForceKill => {
            // Read (so a kept-alive connection stays in step) and ignored.
            read_body(rq, hub.config.http.max_body_bytes)?;
            None
        }
    };
    let conflict_when_failed = matches!(action, Action::Start | Action::Restart);
    let hub = hub.clone();
    let id = id.to_string();
    // Answered when the action ends (a stop: on its ladder thread); this
    // connection thread does not wait for it.
    Ok(Reply::later(Box::new(move |respond| {
        ops::worker::act(
            &hub,
            &id,
            action,
            spec,
            Box::new(move |outcome| {
                respond(match outcome {
                    Ok(result) => {
                        let failed = !result.is_ok() && conflict_when_failed;
                        let status = if failed { 409 } else { 200 };
                        Reply::json(status, &result.to_json())
                    }
                    Err(err) => Reply::error(&err.into()),
                })
            }),
        );
    })))
}

/// Lines `GET …/logs` returns without a `limit` (or with `limit=0`).
pub const DEFAULT_LOG_LINES: usize = 500;

/// `GET /api/sessions/:id/logs?limit=`: `{session, lines, dropped,
/// log_path}` (`lines` the texts, oldest first), then `omitted` and
/// `line_meta` (`{stream, at}` of each line).
fn logs(hub: &Hub, id: &str, query: &str) -> Result<Reply, ApiError> {
    let limit = match url::query_param(query, "limit") {
        None => DEFAULT_LOG_LINES,
        Some(Ok(v)) => match v
            .parse::<usize>()
            .map_err(|_| bad_request("limit must be a non-negative integer"))?
        {
            0 => DEFAULT_LOG_LINES,
            n => n,
        },
        Some(Err(err)) => return Err(bad_request(err.to_string())),
    };
    let tail = ops::sessions::logs(hub, id, LogBounds::lines(limit))?;
    Ok(ok(json!({
        "session": id,
        "lines": tail.lines,
        "dropped": tail.dropped,
        "log_path": tail.log_path,
        "omitted": tail.omitted,
        "line_meta": tail.meta,
    })))
}

/// `POST /api/sessions/:id/confirmations/:cid` `{decision, reason?}`.
fn decide(hub: &Hub, rq: &mut Request, id: &str, cid: &str) -> Result<Reply, ApiError> {
    let body = read_json_body(hub, rq)?;
    let approved = match body.get("decision").and_then(Value::as_str) {
        Some("approved") => true,
        Some("denied") => false,
        _ => return Err(bad_request("decision must be \"approved\" or \"denied\"")),
    };
    let reason = match body.get("reason") {
        None | Some(Value::Null) => None,
        Some(Value::String(r)) => Some(r.as_str()),
        Some(_) => return Err(bad_request("reason must be a string")),
    };
    ops::confirm::decide(hub, id, cid, approved, reason, ops::confirm::Source::Api)?;
    Ok(ok(json!({
        "accepted": "confirmation",
        "session": id,
        "confirmation_id": cid,
    })))
}

/// Refuses a body member other than `allowed` with `invalid_arguments`.
fn only_keys(body: &Value, allowed: &[&str]) -> Result<(), ApiError> {
    let unknown = body
        .as_object()
        .and_then(|o| o.keys().find(|k| !allowed.contains(&k.as_str())));
    match unknown {
        Some(key) => Err(ops::OpError::invalid_arguments(format!(
            "unknown argument {}",
            crate::wire::worker::display::quote(key)
        ))
        .into()),
        None => Ok(()),
    }
}

fn method_not_allowed(allow: &str) -> ApiError {
    ApiError::new(405, code::METHOD_NOT_ALLOWED, format!("allowed: {allow}"))
}
