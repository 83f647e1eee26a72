//! The remote-tools listener's front door (`toolRequests.host:port`, a
//! second tiny_http server with the same `http.*` bounds as the main one).
//! Only `GET /agent/<id>/tools/<route>?token=<worker token>` exists here:
//! the Host check (DNS rebinding, with this listener's port), then the
//! path, the session, the token (constant time; the panel token never
//! works), shutdown and the global `toolRequests.maxConnections` cap, then
//! the upgrade and the socket's own thread (`worker::tools`). Everything
//! else, plain HTTP to the tool route included, is 404.

use std::net::TcpListener;
use std::sync::Arc;

use tiny_http::{Method, Request, ServerHandle};

use crate::reply::{header, ApiError};

use crate::hub::Hub;
use crate::session;
use crate::util::thread::Stack;
use crate::wire::code;
use crate::wire::http::url;
use crate::wire::worker::tool_frames;
use crate::worker::tools::{self, Upgrade};
use crate::ws;

/// Starts serving the tools listener.
pub fn start(hub: Arc<Hub>, listener: TcpListener) -> std::io::Result<ServerHandle> {
    let limits = super::server_limits(&hub);
    let handler: Arc<dyn Fn(Request) + Send + Sync> = Arc::new(move |rq| handle(&hub, rq));
    tiny_http::Server::serve_with_limits(listener, limits, handler)
}

/// Splits `/agent/<id>/tools/<route>` into the session id and the route;
/// `None` for any other path, an invalid id or a route outside the grammar
/// (`tool_frames::parse_route`).
pub fn parse_path(path: &str) -> Option<(String, String)> {
    let rest = path.strip_prefix("/agent/")?;
    let (raw_id, tail) = rest.split_once('/')?;
    let route = tail.strip_prefix("tools/")?;
    if !tool_frames::parse_route(route) {
        return None;
    }
    let id = url::percent_decode(raw_id, false).ok()?;
    session::is_valid_id(&id).then(|| (id, route.to_string()))
}

/// Serves one request on the tools listener.
fn handle(hub: &Arc<Hub>, rq: Request) {
    if let Err((rq, err)) = upgrade(hub, rq) {
        crate::reply::respond_error(rq, &err);
    }
}

/// Checks and upgrades; a refusal hands the request back with its error.
#[allow(clippy::result_large_err)] // the request is moved back, never copied
fn upgrade(hub: &Arc<Hub>, rq: Request) -> Result<(), (Request, ApiError)> {
    let not_found = || ApiError::new(404, code::NOT_FOUND, "no such route on the tools listener");
    let target = rq.url().to_string();
    let (path, query) = match url::split_target(&target) {
        Ok(parts) => parts,
        Err(err) => return Err((rq, ApiError::new(400, code::BAD_REQUEST, err.to_string()))),
    };
    let port = hub.tools_port();
    if let Err(err) = super::check_host(
        hub,
        header(&rq, "Host"),
        port,
        hub.config.tools_is_loopback(),
    ) {
        return Err((rq, err));
    }
    let Some((session_id, route)) = parse_path(path) else {
        return Err((rq, not_found()));
    };
    if *rq.method() != Method::Get || header(&rq, "Upgrade").is_none() {
        return Err((rq, not_found()));
    }
    if let Err(err) = super::agent::check_worker_upgrade(hub, &rq, &session_id, query) {
        return Err((rq, err));
    }
    let Some(slot) = hub.try_tool_slot() else {
        return Err((
            rq,
            ApiError::new(
                503,
                "too_many_tool_sockets",
                format!(
                    "{} tool sockets are open (toolRequests.maxConnections)",
                    hub.config.tool_requests.max_connections
                ),
            ),
        ));
    };
    let accept_key = match ws::check_upgrade(&rq) {
        Ok(key) => key,
        Err(err) => return Err((rq, err.into())),
    };
    let max = hub
        .config
        .limits
        .max_message_bytes
        .min(tool_frames::MAX_FRAME_BYTES);
    let accepted = match ws::accept(rq, &accept_key, max) {
        Ok(accepted) => accepted,
        Err(err) => {
            log::debug!("session {session_id}: tool upgrade failed: {err}");
            return Ok(());
        }
    };
    let subagents = hub.subagents.clone();
    let upgrade = Upgrade {
        session_id,
        route,
        // Kept to re-check while the request waits for the worker identity.
        token: match url::query_param(query, "token") {
            Some(Ok(token)) => token,
            _ => String::new(),
        },
    };
    let spawned = crate::util::thread::spawn("worker-tools", Stack::Large, move || {
        tools::run(subagents, upgrade, accepted, slot)
    });
    if let Err(err) = spawned {
        log::error!("cannot start a tool socket thread: {err}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tool_paths() {
        assert_eq!(
            parse_path("/agent/demo/tools/plan/replace"),
            Some(("demo".into(), "plan/replace".into()))
        );
        assert_eq!(
            parse_path("/agent/a-b_1/tools/x"),
            Some(("a-b_1".into(), "x".into()))
        );
        for bad in [
            "/agent/demo/tools",
            "/agent/demo/tools/",
            "/agent/demo/tools/Plan/read",
            "/agent/demo/tools/plan//read",
            "/agent/demo/events",
            "/agent/demo/confirm",
            "/agent/../tools/plan/read",
            "/agent/bad%2Fid/tools/plan/read",
            "/agent//tools/plan/read",
            "/api/meta",
            "/panel/ws",
            "/",
        ] {
            assert_eq!(parse_path(bad), None, "{bad}");
        }
    }
}
