//! The configuration library and skill routes of the JSON API: an
//! adapter over `ops::configurations` and `ops::skills`. Each route reads
//! its path, query and body (bounded as the Node hub bounds them), calls
//! one command and renders its result; refusals arrive as `OpError`s.

use serde_json::{json, Map, Value};
use tiny_http::{Method, Request};

use crate::reply::{read_body, ApiError, Reply};

use crate::hub::Hub;
use crate::ops::{self, ErrorKind, OpError};
use crate::wire::code;
use crate::wire::http::url;

/// Largest body of a request that carries a file's text (save, validate,
/// preview).
const TEXT_BODY: usize = 1024 * 1024;
/// Largest body of a delete or rename.
const SMALL_BODY: usize = 1024;
/// Largest body of `POST /api/sessions/:id/configurations`.
const APPLY_BODY: usize = 4096;

/// `/api/configurations/…`; `rest` is the path after `configurations`.
pub fn configurations(
    hub: &Hub,
    rq: &mut Request,
    method: &Method,
    rest: &[&str],
    query: &str,
) -> Result<Reply, ApiError> {
    let get = matches!(method, Method::Get | Method::Head);
    let post = *method == Method::Post;
    match rest {
        [] if get => {
            let listing = ops::configurations::list(hub)?;
            Ok(ok(
                json!({"launch": listing.launch, "worker": listing.worker}),
            ))
        }
        [] => Err(method_not_allowed("GET")),
        ["preview"] if post => {
            let body = object_body(rq, TEXT_BODY)?;
            let text = text_member(&body, "launch")?;
            let endpoints = ops::configurations::preview(hub, text)?;
            Ok(ok(
                json!({"endpoints": crate::library::launch::endpoints_json(&endpoints)}),
            ))
        }
        ["preview"] => Err(method_not_allowed("POST")),
        [kind, "template"] if get => {
            let source = match url::query_param(query, "source") {
                None => None,
                Some(Ok(v)) => Some(v),
                Some(Err(err)) => {
                    return Err(ApiError::new(400, code::BAD_REQUEST, err.to_string()))
                }
            };
            let text = ops::configurations::template(hub, kind, source.as_deref())?;
            Ok(ok(json!({"text": text})))
        }
        [kind, "validate"] if post => {
            let body = object_body(rq, TEXT_BODY)?;
            let text = text_member(&body, "text")?;
            ops::configurations::validate(kind, text)?;
            Ok(ok(json!({"valid": true})))
        }
        [_, "validate"] => Err(method_not_allowed("POST")),
        [kind, id] if get => Ok(ok(ops::configurations::read(hub, kind, id)?.to_json())),
        [kind, id] if *method == Method::Put => {
            let body = object_body(rq, TEXT_BODY)?;
            let revision = match body.get("revision") {
                Some(Value::Null) => None,
                Some(Value::String(r)) => Some(r.as_str()),
                _ => {
                    return Err(invalid(
                        "revision is required: the current revision, or null for a new file",
                    ))
                }
            };
            let text = text_member(&body, "text")?;
            let saved = ops::configurations::save(hub, kind, id, text, revision)?;
            Ok(ok(saved.to_json()))
        }
        [kind, id] if *method == Method::Delete => {
            let body = object_body(rq, SMALL_BODY)?;
            let revision = body.get("revision").and_then(Value::as_str);
            ops::configurations::remove(hub, kind, id, revision)?;
            Ok(ok(json!({"removed": id})))
        }
        [_, _] => Err(method_not_allowed("GET, PUT, DELETE")),
        [kind, id, "rename"] if post => {
            let body = object_body(rq, SMALL_BODY)?;
            let Some(Value::String(to)) = body.get("id") else {
                return Err(invalid("id (the new name) is required"));
            };
            let revision = body.get("revision").and_then(Value::as_str);
            let saved = ops::configurations::rename(hub, kind, id, to, revision)?;
            Ok(ok(saved.to_json()))
        }
        [_, _, "rename"] => Err(method_not_allowed("POST")),
        _ => Err(ApiError::new(404, code::NOT_FOUND, "no such API route")),
    }
}

/// `POST /api/sessions/:id/configurations` `{launchConfig, workerConfig}`.
pub fn apply(hub: &Hub, rq: &mut Request, id: &str) -> Result<Reply, ApiError> {
    let body = object_body(rq, APPLY_BODY)?;
    let session = ops::configurations::apply(hub, id, &body)?;
    Ok(ok(
        json!({"session": crate::panel::render::session(&session)}),
    ))
}

/// `/api/skills…`; `rest` is the path after `skills`. Read-only.
pub fn skills(hub: &Hub, method: &Method, rest: &[&str]) -> Result<Reply, ApiError> {
    if !matches!(method, Method::Get | Method::Head) {
        return Err(method_not_allowed("GET"));
    }
    match rest {
        [] => {
            let listing = ops::skills::list(hub)?;
            Ok(ok(json!({
                "skills": listing.skills.iter().map(|s| s.summary()).collect::<Vec<_>>(),
                "errors": listing
                    .errors
                    .iter()
                    .map(|(id, message)| json!({"id": id, "message": message}))
                    .collect::<Vec<_>>(),
            })))
        }
        ["template"] => Ok(ok(json!({"text": ops::skills::template()}))),
        [id] => Ok(ok(ops::skills::read(hub, id)?.document())),
        _ => Err(ApiError::new(404, code::NOT_FOUND, "no such API route")),
    }
}

fn ok(value: Value) -> Reply {
    Reply::json(200, &value)
}

fn invalid(message: &str) -> ApiError {
    OpError::new(ErrorKind::InvalidConfiguration, message).into()
}

/// A JSON object body of at most `max` bytes; no body (or only
/// whitespace) is an empty object, as the Node hub reads it.
fn object_body(rq: &mut Request, max: usize) -> Result<Map<String, Value>, ApiError> {
    let bytes = read_body(rq, max)?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(invalid("the request body must be a JSON object")),
        Err(err) => Err(ApiError::new(
            400,
            code::BAD_JSON,
            format!("body is not JSON: {err}"),
        )),
    }
}

/// A string member: a file's text.
fn text_member<'a>(body: &'a Map<String, Value>, key: &str) -> Result<&'a str, ApiError> {
    match body.get(key) {
        Some(Value::String(text)) => Ok(text),
        _ => Err(invalid(&format!(
            "{key} must be the configuration's text (a string)"
        ))),
    }
}

fn method_not_allowed(allow: &str) -> ApiError {
    ApiError::new(405, code::METHOD_NOT_ALLOWED, format!("allowed: {allow}"))
}
