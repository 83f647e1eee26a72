//! The JSON API under `/api`: metadata (open), and session management
//! (panel token required). Handlers validate, call the hub, and map its
//! errors to stable codes; they hold no lock while doing I/O.

use serde_json::{json, Value};
use tiny_http::{Method, Request};

use super::{auth, header, read_body, url, ApiError, Reply};
use crate::hub::{Hub, HubError};

/// Routes one `/api` request to its handler.
pub fn handle(hub: &Hub, rq: &mut Request, method: &Method, path: &str, query: &str) -> Reply {
    match route(hub, rq, method, path, query) {
        Ok(reply) => reply,
        Err(err) => Reply::error(&err),
    }
}

fn route(
    hub: &Hub,
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

fn method_not_allowed(allow: &str) -> ApiError {
    ApiError::new(405, "method_not_allowed", format!("allowed: {allow}"))
}

fn unknown_session(id: &str) -> ApiError {
    ApiError::new(404, "unknown_session", format!("no session {id:?}"))
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
