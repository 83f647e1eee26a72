//! `POST /api/sessions/:id/answer` `{source, part, offset}`: one page of
//! a complete worker answer, proxied as one read-only `answer` query
//! ([`Hub::query_worker`]). The panel token is checked by the API router.
//!
//! 200 with the worker's `answer` data object; 400 `invalid_arguments`
//! (nothing sent); 404 `unknown_session`; 429 `too_many_queries` (64 in
//! the hub, 2 per session pending); 409 `answer_unavailable` for every
//! other failure (no live worker, capability missing, connection change,
//! `answer_error`, the 10 s deadline), with `reason` and, for a worker
//! refusal, `worker_error {code, message}`.
//!
//! The connection thread waits for the reply (each HTTP connection has its
//! own thread, and at most 64 wait at once). No hub lock is held while
//! waiting. A client that goes away is not noticed before the reply or the
//! deadline: the HTTP server gives the handler no view of the socket.

use serde_json::{json, Value};
use tiny_http::Request;

use super::{read_body, ApiError, Reply};
use crate::hub::Hub;
use crate::worker::query::{self, QueryError};

/// Serves one answer request for session `id`.
pub fn handle(hub: &Hub, rq: &mut Request, id: &str) -> Result<Reply, ApiError> {
    if hub.with_session(id, |_| ()).is_none() {
        return Err(ApiError::new(
            404,
            "unknown_session",
            QueryError::UnknownSession(id.to_string()).to_string(),
        ));
    }
    let bytes = read_body(rq, hub.config.http.max_body_bytes)?;
    let args: Value = serde_json::from_slice(&bytes)
        .map_err(|err| ApiError::new(400, "bad_json", format!("body is not JSON: {err}")))?;
    let payload = query::answer_payload(&args)
        .map_err(|message| ApiError::new(400, "invalid_arguments", message))?;
    match hub.query_worker(id, &payload, query::QUERY_DEADLINE) {
        Ok(page) => Ok(Reply::json(200, &page)),
        Err(err) => Ok(failure(&err)),
    }
}

/// The reply for a failed query.
pub fn failure(err: &QueryError) -> Reply {
    let (status, code) = match err {
        QueryError::UnknownSession(_) => (404, "unknown_session"),
        QueryError::Invalid(_) => (400, "invalid_arguments"),
        QueryError::Busy { .. } => (429, "too_many_queries"),
        _ => (409, "answer_unavailable"),
    };
    let mut body = json!({"error": code, "message": err.to_string(), "reason": err.reason()});
    if let QueryError::Rejected {
        code: worker_code,
        message,
    } = err
    {
        body["worker_error"] = json!({"code": worker_code, "message": message});
    }
    let mut reply = Reply::json(status, &body);
    if status == 429 {
        reply.extra.push(("Retry-After", "1".into()));
    }
    reply
}
