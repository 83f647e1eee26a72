//! Worker-facing routes on the main listener: `/agent/<id>/events` and
//! `/agent/<id>/confirm`. Checks the session and its worker token, performs
//! the WebSocket upgrade and starts the socket's own thread. A panel token
//! never works here.

use std::sync::Arc;

use tiny_http::Request;

use crate::reply::ApiError;

use crate::hub::Hub;
use crate::session;
use crate::util::thread::Stack;
use crate::wire::code;
use crate::wire::http::{auth, url};
use crate::worker::{confirm, events};
use crate::ws;

/// Which worker socket a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Events,
    Confirm,
}

/// Parses `<id>/events` or `<id>/confirm` (the part after `/agent/`).
pub fn parse_path(rest: &str) -> Option<(String, Kind)> {
    let (raw_id, tail) = rest.split_once('/')?;
    let kind = match tail {
        "events" => Kind::Events,
        "confirm" => Kind::Confirm,
        _ => return None,
    };
    let id = url::percent_decode(raw_id, false).ok()?;
    session::is_valid_id(&id).then_some((id, kind))
}

/// The checks every worker-facing upgrade passes, on either listener: the
/// session exists (404), the worker token matches in constant time (401;
/// the panel token never does), an `Origin` that is present names this hub
/// (403: workers send none, and a page has no business on a worker socket),
/// and the hub is not shutting down (503).
pub fn check_worker_upgrade(
    hub: &Hub,
    rq: &Request,
    id: &str,
    query: &str,
) -> Result<(), ApiError> {
    let expected = hub
        .session_token(id)
        .ok_or_else(|| ApiError::new(404, code::UNKNOWN_SESSION, "no such session"))?;
    let presented = match url::query_param(query, "token") {
        Some(Ok(token)) => token,
        _ => String::new(),
    };
    if !auth::constant_time_eq(presented.as_bytes(), expected.as_bytes()) {
        return Err(ApiError::new(
            401,
            code::UNAUTHORIZED,
            "missing or wrong worker token",
        ));
    }
    if let Some(origin) = crate::reply::header(rq, "Origin") {
        let host = crate::reply::header(rq, "Host").unwrap_or("");
        if !url::origin_matches(origin, host) {
            return Err(ApiError::new(
                403,
                code::FORBIDDEN_ORIGIN,
                "cross-origin upgrade refused",
            ));
        }
    }
    if hub.is_shutting_down() {
        return Err(ApiError::new(
            503,
            "shutting_down",
            "the hub is shutting down",
        ));
    }
    Ok(())
}

/// Serves an `/agent/...` request: 404 unless it is an upgrade to a known
/// session's socket, 401 for a missing or wrong worker token.
pub fn handle(hub: &Arc<Hub>, rq: Request, rest: &str, query: &str, is_upgrade: bool) {
    if let Err((rq, err)) = upgrade(hub, rq, rest, query, is_upgrade) {
        crate::reply::respond_error(rq, &err);
    }
}

/// Checks and upgrades; a refusal hands the request back with its error.
#[allow(clippy::result_large_err)] // the request is moved back, never copied
fn upgrade(
    hub: &Arc<Hub>,
    rq: Request,
    rest: &str,
    query: &str,
    is_upgrade: bool,
) -> Result<(), (Request, ApiError)> {
    let not_found = || ApiError::new(404, code::NOT_FOUND, "no such worker route");
    let Some((id, kind)) = parse_path(rest) else {
        return Err((rq, not_found()));
    };
    if !is_upgrade {
        return Err((rq, not_found()));
    }
    if let Err(err) = check_worker_upgrade(hub, &rq, &id, query) {
        return Err((rq, err));
    }
    let accept_key = match ws::check_upgrade(&rq) {
        Ok(key) => key,
        Err(err) => return Err((rq, err.into())),
    };
    let max = match kind {
        Kind::Events => hub.config.limits.max_message_bytes,
        Kind::Confirm => hub
            .config
            .limits
            .max_message_bytes
            .min(confirm::MAX_FRAME_BYTES),
    };
    // Taken before the 101 goes out: a later connection has a larger id.
    let conn_id = hub.sockets.reserve_id();
    let accepted = match ws::accept(rq, &accept_key, max) {
        Ok(accepted) => accepted,
        Err(err) => {
            log::debug!("session {id}: upgrade failed: {err}");
            return Ok(());
        }
    };
    let hub = hub.clone();
    let name = match kind {
        Kind::Events => "worker-events",
        Kind::Confirm => "worker-confirm",
    };
    let spawned = crate::util::thread::spawn(name, Stack::Large, move || match kind {
        Kind::Events => events::run(hub.worker_events(), id, conn_id, accepted),
        Kind::Confirm => confirm::run(hub.confirmations(), id, accepted),
    });
    if let Err(err) = spawned {
        log::error!("cannot start a worker socket thread: {err}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_worker_paths() {
        assert_eq!(
            parse_path("demo/events"),
            Some(("demo".into(), Kind::Events))
        );
        assert_eq!(
            parse_path("demo/confirm"),
            Some(("demo".into(), Kind::Confirm))
        );
        assert_eq!(parse_path("demo/tools"), None);
        assert_eq!(parse_path("bad%2Fid/events"), None);
        assert_eq!(parse_path("../etc/events"), None);
        assert_eq!(parse_path("demo/events/x"), None);
        assert_eq!(parse_path("demo"), None);
    }
}
