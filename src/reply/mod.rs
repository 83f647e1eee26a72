//! The front door's primitives, shared by every front-end that answers
//! HTTP (the JSON API and the worker and tool routes in `http`, the
//! `/panel/ws` upgrade in `panel`, the Shard endpoints in `shard::gate`):
//! the error and reply types, the one way a response is written (with the
//! security headers every response carries, [`csp`]), header and body
//! reading. It sits below the front-ends, so they import it downward and
//! never each other.

pub mod csp;

use std::io::Read;
use std::net::SocketAddr;

use serde_json::Value;
use tiny_http::{Header, Request, Response};

use crate::wire::code;

/// Content-Security-Policy of every response but the documents of a
/// configured static directory ([`csp`]): only same-origin scripts,
/// styles, images and sockets; no plugins, framing, base or form targets.
pub const CSP: &str = csp::EMBEDDED;

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

pub fn respond_error(rq: Request, err: &ApiError) {
    respond(rq, Reply::error(err))
}

/// Writes `reply` with the security headers every response carries, or
/// hands the request to the reply's deferred work.
pub fn respond(rq: Request, mut reply: Reply) {
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

/// The address a listener is bound to, for logs and URLs: IPv6 bracketed.
pub fn display_addr(addr: &SocketAddr) -> String {
    match addr {
        SocketAddr::V4(v4) => v4.to_string(),
        SocketAddr::V6(v6) => format!("[{}]:{}", v6.ip(), v6.port()),
    }
}
