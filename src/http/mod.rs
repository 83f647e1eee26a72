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
pub mod auth;
pub mod csp;
pub mod hangup;
pub mod library;
pub mod tools;
pub mod url;

use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tiny_http::{Header, Method, Request, Response, ServerHandle, ServerLimits};

use crate::hub::Hub;
use crate::ops::code;
use crate::panel::Panels;
use crate::shard::gate::Gate;
use crate::shard::Shard;

/// Content-Security-Policy of every response but the documents of a
/// configured static directory ([`csp`]): only same-origin scripts,
/// styles, images and sockets; no plugins, framing, base or form targets.
pub const CSP: &str = csp::EMBEDDED;

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

/// An error answered as `{"error": code, "message": ...}`.
#[derive(Debug)]
pub struct ApiError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
    /// More members of the error object (after `error` and `message`).
    pub details: serde_json::Map<String, serde_json::Value>,
}

impl ApiError {
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            details: Default::default(),
        }
    }
}

/// A malformed WebSocket handshake: 400 `bad_request`.
impl From<crate::ws::BadUpgrade> for ApiError {
    fn from(err: crate::ws::BadUpgrade) -> ApiError {
        ApiError::new(400, code::BAD_REQUEST, err.0)
    }
}

/// A refused command, as the JSON API answers it: the kind's status and
/// code, the message, and the command's details.
impl From<crate::ops::OpError> for ApiError {
    fn from(err: crate::ops::OpError) -> ApiError {
        ApiError {
            status: err.http_status(),
            code: err.code(),
            message: err.message,
            details: err.details,
        }
    }
}

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
    // The Shard endpoints check Host themselves, exactly (`shard::access`).
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

/// The value of header `name` (case-insensitive), if present.
pub fn header<'a>(rq: &'a Request, name: &str) -> Option<&'a str> {
    rq.headers()
        .iter()
        .find(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

/// Reads a request body of at most `max` bytes. Refuses a larger declared
/// or actual length with 413 without reading past the limit.
pub fn read_body(rq: &mut Request, max: usize) -> Result<Vec<u8>, ApiError> {
    let too_large = || {
        ApiError::new(
            413,
            "payload_too_large",
            format!("request body exceeds {max} bytes"),
        )
    };
    if rq.body_length().is_some_and(|len| len > max) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    rq.as_reader()
        .take(max as u64 + 1)
        .read_to_end(&mut body)
        .map_err(|err| ApiError::new(400, code::BAD_REQUEST, format!("cannot read body: {err}")))?;
    if body.len() > max {
        return Err(too_large());
    }
    Ok(body)
}

/// Sends one reply; handed to deferred work, which may run on any thread.
pub type Responder = Box<dyn FnOnce(Reply) + Send>;

/// Work that produces its reply later and calls the responder then.
pub type Deferred = Box<dyn FnOnce(Responder) + Send>;

/// A response ready to send: status, content type and bytes, or deferred
/// work that will produce it.
pub struct Reply {
    pub status: u16,
    pub mime: &'static str,
    pub body: Vec<u8>,
    pub no_store: bool,
    pub extra: Vec<(&'static str, String)>,
    pub later: Option<Deferred>,
    /// The Content-Security-Policy, when not [`CSP`].
    pub csp: Option<String>,
}

impl Reply {
    pub fn json(status: u16, value: &Value) -> Reply {
        Reply {
            status,
            mime: "application/json; charset=utf-8",
            body: serde_json::to_vec(value).unwrap_or_default(),
            no_store: true,
            extra: Vec::new(),
            later: None,
            csp: None,
        }
    }

    /// A reply produced later by `work` (the request is answered from
    /// whichever thread completes it).
    pub fn later(work: Deferred) -> Reply {
        let mut reply = Reply::json(202, &serde_json::Value::Null);
        reply.later = Some(work);
        reply
    }

    pub fn error(err: &ApiError) -> Reply {
        let mut body = serde_json::json!({"error": err.code, "message": err.message});
        for (key, value) in &err.details {
            body[key] = value.clone();
        }
        let mut reply = Reply::json(err.status, &body);
        match err.status {
            413 => reply.extra.push(("Connection", "close".into())),
            429 => reply.extra.push(("Retry-After", "1".into())),
            _ => {}
        }
        reply
    }
}

pub(crate) fn respond_error(rq: Request, err: &ApiError) {
    respond(rq, Reply::error(err))
}

/// Writes `reply` with the security headers every response carries, or
/// hands the request to the reply's deferred work.
pub(crate) fn respond(rq: Request, mut reply: Reply) {
    if let Some(work) = reply.later.take() {
        return work(Box::new(move |reply| respond(rq, reply)));
    }
    // Bodies are complete in memory: always send Content-Length, never chunks.
    let mut response = Response::from_data(reply.body)
        .with_status_code(reply.status)
        .with_chunked_threshold(usize::MAX);
    let mut add = |name: &str, value: &str| {
        if let Ok(h) = Header::from_bytes(name.as_bytes(), value.as_bytes()) {
            response.add_header(h);
        }
    };
    add("Content-Type", reply.mime);
    add(
        "Content-Security-Policy",
        reply.csp.as_deref().unwrap_or(CSP),
    );
    add("X-Content-Type-Options", "nosniff");
    add("Referrer-Policy", "no-referrer");
    add("X-Frame-Options", "DENY");
    add("Cross-Origin-Opener-Policy", "same-origin");
    add(
        "Cache-Control",
        if reply.no_store {
            "no-store"
        } else {
            "no-cache"
        },
    );
    for (name, value) in &reply.extra {
        add(name, value);
    }
    if let Err(err) = rq.respond(response) {
        log::debug!("response not delivered: {err}");
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
    let name = match assets::resolve_path(path) {
        Ok(name) => name,
        Err(assets::PathError::Malformed) => {
            return respond_error(rq, &ApiError::new(400, code::BAD_REQUEST, "malformed path"))
        }
        Err(assets::PathError::Refused) => {
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

/// The address a listener is bound to, for logs and URLs: IPv6 bracketed.
pub fn display_addr(addr: &SocketAddr) -> String {
    match addr {
        SocketAddr::V4(v4) => v4.to_string(),
        SocketAddr::V6(v6) => format!("[{}]:{}", v6.ip(), v6.port()),
    }
}
