//! The main listener's front door (the remote-tools listener has its own,
//! [`tools`]). Each accepted connection runs on its own
//! thread (bounded by `http.maxConnections`, see the tiny_http fork); this
//! module checks the `Host` header, splits API, WebSocket and static
//! requests, and writes responses with the security headers. `/shard`
//! paths go to `shard::gate`, which checks `Host` by its own exact rule.
//!
//! Handlers never hold a hub lock while reading a body or writing a
//! response.

pub mod agent;
pub mod api;
pub mod assets;
pub mod hangup;
pub mod library;
pub mod tools;

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use tiny_http::{Method, Request, ServerHandle, ServerLimits};

use crate::hub::Hub;
use crate::panel::Panels;
use crate::reply::{csp, header, respond, respond_error, ApiError, Reply};
use crate::shard::gate::Gate;
use crate::shard::Shard;
use crate::wire::code;
use crate::wire::http::url;

/// Starts serving `listener` with the configured limits. Connection threads
/// call [`handle`] for each request.
pub fn start(
    hub: Arc<Hub>,
    panels: Arc<Panels>,
    gate: Arc<Gate>,
    shard: Arc<Shard>,
    listener: TcpListener,
) -> std::io::Result<ServerHandle> {
    let limits = server_limits(&hub);
    let handler: Arc<dyn Fn(Request) + Send + Sync> =
        Arc::new(move |rq| handle(&hub, &panels, &gate, &shard, rq));
    tiny_http::Server::serve_with_limits(listener, limits, handler)
}

/// The connection bounds of both listeners, from `http.*`; the number of
/// open connections is also kept within the descriptor limit
/// (`util::fdlimit::connection_cap`).
pub(crate) fn server_limits(hub: &Hub) -> ServerLimits {
    let http = &hub.config.http;
    let cap = crate::util::fdlimit::current()
        .map(crate::util::fdlimit::connection_cap)
        .unwrap_or(usize::MAX);
    ServerLimits {
        max_connections: http.max_connections.min(cap),
        max_handlers: http.max_handler_threads,
        head_timeout: Duration::from_millis(http.head_timeout_ms),
        min_head_rate: http.min_head_bytes_per_second,
        max_header_bytes: http.max_header_bytes,
        max_headers: http.max_headers,
        idle_timeout: Duration::from_millis(http.idle_timeout_ms),
        request_timeout: Duration::from_millis(http.request_timeout_ms),
        thread_stack_size: CONNECTION_STACK,
    }
}

/// Stack of each connection thread: handlers are shallow (no recursion
/// beyond serde_json's bounded depth), so 256 KiB leaves ample headroom
/// while keeping many idle connections cheap.
const CONNECTION_STACK: usize = 256 * 1024;

/// Serves one request. Runs on the connection's thread.
fn handle(
    hub: &Arc<Hub>,
    panels: &Arc<Panels>,
    gate: &Gate,
    shard_front: &Arc<Shard>,
    mut rq: Request,
) {
    let method = rq.method().clone();
    let target = rq.url().to_string();
    let (path, query) = match url::split_target(&target) {
        Ok(parts) => parts,
        Err(err) => {
            return respond_error(rq, &ApiError::new(400, code::BAD_REQUEST, err.to_string()))
        }
    };
    log::debug!("{} {}", method, path);
    let port = hub.local_addr().port();
    // The Shard endpoints check Host themselves, exactly (`wire::shard::access`).
    let shard = crate::shard::gate::is_shard_path(path);
    if !shard {
        if let Err(err) = check_host(hub, header(&rq, "Host"), port, hub.config.is_loopback()) {
            return respond_error(rq, &err);
        }
    }
    if header(&rq, "Transfer-Encoding").is_some() {
        // Chunked bodies are decoded by a crate whose chunk-size line buffer
        // is unbounded; every client of the hub sends Content-Length.
        return respond_error(
            rq,
            &ApiError::new(
                411,
                code::LENGTH_REQUIRED,
                "send a Content-Length body, not chunked",
            ),
        );
    }
    if !matches!(method, Method::Get | Method::Head) {
        if let Err(err) = check_same_origin(&rq) {
            return respond_error(rq, &err);
        }
    }
    let is_upgrade = header(&rq, "Upgrade").is_some();
    if path == "/api" || path.starts_with("/api/") {
        let fronts = api::Fronts {
            panels: &**panels,
            shard: &**shard_front,
        };
        let response = api::handle(hub, &fronts, &mut rq, &method, path, query);
        return respond(rq, response);
    }
    if shard {
        return crate::shard::gate::route(
            hub,
            gate,
            shard_front,
            rq,
            &method,
            path,
            query,
            is_upgrade,
        );
    }
    if path == "/panel/ws" && is_upgrade {
        return crate::panel::service::handle(hub, panels, rq, query);
    }
    if let Some(rest) = path.strip_prefix("/agent/") {
        return agent::handle(hub, rq, rest, query, is_upgrade);
    }
    if is_upgrade {
        return respond_error(
            rq,
            &ApiError::new(404, code::NOT_FOUND, "no such upgrade route"),
        );
    }
    serve_static(hub, rq, &method, path)
}

/// DNS-rebinding defence: while a listener is loopback (`loopback`), a
/// request must name the hub by a loopback spelling (or a configured host)
/// with that listener's `port`. A malformed Host is a bad request wherever
/// we listen. Both the main and the remote-tools listener use it.
pub(crate) fn check_host(
    hub: &Hub,
    host: Option<&str>,
    port: u16,
    loopback: bool,
) -> Result<(), ApiError> {
    let parsed = host
        .ok_or(url::UrlError::BadHost)
        .and_then(url::parse_host)
        .map_err(|err| ApiError::new(400, code::BAD_REQUEST, err.to_string()))?;
    if !loopback {
        return Ok(());
    }
    // A configured name is what a reverse proxy in front forwards: it
    // carries the port the browser used (or none), not ours. The defence
    // against rebinding is the name itself, so any port is accepted there.
    let configured = hub
        .config
        .listen
        .allowed_hosts
        .iter()
        .any(|h| h.eq_ignore_ascii_case(&parsed.host));
    let loopback_name = matches!(parsed.host.as_str(), "127.0.0.1" | "localhost" | "[::1]");
    let port_ok = parsed.port == Some(port) || (parsed.port.is_none() && port == 80);
    if configured || (loopback_name && port_ok) {
        Ok(())
    } else {
        Err(ApiError::new(
            403,
            code::FORBIDDEN_HOST,
            "the Host header does not name this hub",
        ))
    }
}

/// Cross-site request forgery defence for every state-changing request
/// (any method but GET and HEAD). The Host check stops rebound names, but
/// a page on any site can still send a simple POST to `127.0.0.1`; the
/// browser marks where it came from. Refused with 403 `forbidden_origin`:
/// `Sec-Fetch-Site` other than `same-origin` or `none`, or an `Origin`
/// (the opaque `null` included) that does not name the request's `Host`.
/// Clients that are not browsers send neither header.
fn check_same_origin(rq: &Request) -> Result<(), ApiError> {
    let refuse = || ApiError::new(403, code::FORBIDDEN_ORIGIN, "cross-site request refused");
    match header(rq, "Sec-Fetch-Site") {
        Some(site) if site.eq_ignore_ascii_case("same-origin") => return Ok(()),
        Some(site) if !site.eq_ignore_ascii_case("none") => return Err(refuse()),
        _ => {}
    }
    match header(rq, "Origin") {
        Some(origin) if !url::origin_matches(origin, header(rq, "Host").unwrap_or("")) => {
            Err(refuse())
        }
        _ => Ok(()),
    }
}

fn serve_static(hub: &Hub, rq: Request, method: &Method, path: &str) {
    if *method != Method::Get && *method != Method::Head {
        let mut reply = Reply::error(&ApiError::new(
            405,
            code::METHOD_NOT_ALLOWED,
            "only GET and HEAD are served outside /api",
        ));
        reply.extra.push(("Allow", "GET, HEAD".into()));
        return respond(rq, reply);
    }
    let name = match crate::wire::http::path::resolve_path(path) {
        Ok(name) => name,
        Err(crate::wire::http::path::PathError::Malformed) => {
            return respond_error(rq, &ApiError::new(400, code::BAD_REQUEST, "malformed path"))
        }
        Err(crate::wire::http::path::PathError::Refused) => {
            return respond_error(rq, &ApiError::new(404, code::NOT_FOUND, "no such file"))
        }
    };
    match assets::lookup(&name, hub.static_dir.as_deref()) {
        Some(found) => {
            // A configured directory's documents get their own policy (their
            // inline scripts by hash, see `csp`); the embedded panel keeps
            // the strict one.
            let document = found.mime.starts_with("text/html");
            let csp = (hub.static_dir.is_some() && document)
                .then(|| csp::for_document(&String::from_utf8_lossy(&found.bytes)));
            respond(
                rq,
                Reply {
                    status: 200,
                    mime: found.mime,
                    body: found.bytes.into_owned(),
                    no_store: false,
                    extra: Vec::new(),
                    later: None,
                    csp,
                },
            )
        }
        None => respond_error(rq, &ApiError::new(404, code::NOT_FOUND, "no such file")),
    }
}
