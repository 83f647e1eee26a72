//! The Shard endpoints' front door on the main listener: the mode chosen
//! at start, the ticket book, `POST /shard/ticket`, and [`admit`], the one
//! admission check of a `GET /shard/ws` upgrade. The rules themselves are
//! pure and live in [`access`] and [`ticket`]; this module reads them off
//! real requests, takes the ticket lock (a leaf: nothing else is taken
//! under it, and no I/O happens while it is held) and reads the clock.
//!
//! `http::handle` sends every `/shard` path here ([`route`]) without its
//! own `Host` check: these paths have the exact one of [`access`].

use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::json;
use tiny_http::{Method, Request};

use crate::config::Config;
use crate::hub::Hub;
use crate::reply::{self, ApiError, Reply};
use crate::wire::code;
use crate::wire::http::auth;
use crate::wire::shard::access::{self, Mode, Passed, Refusal, Scheme, Seen, Settings};
use crate::wire::shard::ticket::{self, Redeem, TicketBook};
use crate::ws;

/// Largest client message on a Shard socket.
pub const MAX_CLIENT_MESSAGE: usize = 4 * 1024 * 1024;

/// The Shard endpoints' access state: front-end state like the panel
/// registry, created at start (`run.rs`) and handed to the front door.
#[derive(Debug)]
pub struct Gate {
    mode: Mode,
    settings: Settings,
    /// Why the endpoints are off ([`Mode::Off`]), for the 403 and the
    /// start-up line.
    off_reason: String,
    tickets: Mutex<TicketBook>,
    /// Zero of the ticket book's monotonic clock.
    epoch: Instant,
}

impl Gate {
    /// The gate of a validated configuration. Validation has already
    /// refused the settings [`access::mode`] finds incomplete; should one
    /// slip through, the endpoints stay off.
    pub fn new(config: &Config) -> Gate {
        let settings = config.shard.clone();
        let mode = access::mode(
            config.is_loopback(),
            !config.panel.token.is_empty(),
            &settings,
        )
        .unwrap_or(Mode::Off);
        Gate {
            mode,
            settings,
            off_reason: format!(
                "the Shard endpoints are off: listen.host {:?} is not a loopback address and \
                 remote mode is not configured; set shard.publicHost (--public-host HOST:PORT), \
                 shard.allowedOrigins (--allowed-origin ORIGIN) and shard.allowInsecureRemote \
                 (--allow-insecure-remote), or shard.trustProxy (--trust-proxy loopback|IP) \
                 with shard.publicHost and shard.allowedOrigins for a TLS proxy in front",
                config.listen.host
            ),
            tickets: Mutex::new(TicketBook::default()),
            epoch: Instant::now(),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn book(&self) -> std::sync::MutexGuard<'_, TicketBook> {
        self.tickets.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Logs the Shard endpoints' mode once at start: a warning when they are
/// off, the one-line plaintext warning of `shard.allowInsecureRemote`.
pub fn announce(hub: &Hub, gate: &Gate) {
    let s = &gate.settings;
    match gate.mode {
        Mode::Off => log::warn!("{}", gate.off_reason),
        Mode::Loopback => log::info!(
            "shard: ws://{}/shard/ws (loopback)",
            reply::display_addr(&hub.local_addr())
        ),
        Mode::Direct | Mode::Proxy => {
            let public = s
                .public_host
                .as_ref()
                .map_or_else(String::new, |p| p.to_string());
            match s.trust_proxy {
                Some(upstream) => log::info!(
                    "shard: remote mode behind the proxy at {upstream}, public host {public}"
                ),
                None => log::info!("shard: remote mode, public host {public}"),
            }
        }
    }
    if gate.mode.is_remote() && s.allow_insecure_remote {
        log::warn!(
            "shard: --allow-insecure-remote: remote Shard clients reach this hub over plain HTTP, \
             so the panel token, tickets and all traffic can be read and changed by anyone on the path"
        );
    }
}

/// Whether `path` is one of the Shard endpoints' (`/shard` and below).
pub fn is_shard_path(path: &str) -> bool {
    path == "/shard" || path.starts_with("/shard/")
}

/// Serves a `/shard` path (the front door's one call); an admitted
/// `/shard/ws` connection is handed to the Shard front-end (`shard`).
#[allow(clippy::too_many_arguments)] // the request's parts, as the front door has them
pub fn route(
    hub: &Arc<Hub>,
    gate: &Gate,
    shard: &Arc<super::Shard>,
    rq: Request,
    method: &Method,
    path: &str,
    query: &str,
    upgrade: bool,
) {
    match (path, upgrade) {
        ("/shard/ws", true) => connect(hub, gate, shard, rq, query),
        ("/shard/ticket", false) if *method == Method::Post => {
            let reply = match issue_ticket(hub, gate, &rq, query) {
                Ok(reply) => reply,
                Err(err) => Reply::error(&err),
            };
            reply::respond(rq, reply)
        }
        ("/shard/ticket", false) => {
            let mut reply = Reply::error(&ApiError::new(
                405,
                code::METHOD_NOT_ALLOWED,
                "POST /shard/ticket",
            ));
            reply.extra.push(("Allow", "POST".into()));
            reply::respond(rq, reply)
        }
        ("/shard/ws", false) => reply::respond_error(
            rq,
            &ApiError::new(
                400,
                code::BAD_REQUEST,
                "GET /shard/ws is a WebSocket upgrade",
            ),
        ),
        _ => reply::respond_error(
            rq,
            &ApiError::new(404, code::NOT_FOUND, "no such Shard route"),
        ),
    }
}

/// How an admitted client authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    /// The panel token (query, bearer or cookie), or no token configured.
    PanelToken,
    /// A ticket from `POST /shard/ticket`, now spent.
    Ticket,
}

/// What an admitted upgrade needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    pub credential: Credential,
    /// The subprotocol the 101 must select (`shard.v0` when offered).
    pub subprotocol: Option<&'static str>,
    pub scheme: Scheme,
    /// Whether it came through the trusted proxy.
    pub via_proxy: bool,
}

/// The admission of a `GET /shard/ws` upgrade, in order: the mode, `Host`,
/// the forwarded headers and `Origin` ([`access::check`]), then the
/// credential: a ticket offered as `shard-ticket.<ticket>` in
/// `Sec-WebSocket-Protocol` (it then needs an allowed `Origin`, 400, and
/// must be live, unused and issued to that origin, 401), else the panel
/// token exactly as `/panel/ws` takes it (401).
pub fn admit(hub: &Hub, gate: &Gate, rq: &Request, query: &str) -> Result<Admitted, ApiError> {
    let seen = seen(rq);
    let passed = checked(hub, gate, &seen)?;
    let lines = headers(rq, "Sec-WebSocket-Protocol");
    let offer = ticket::read_offer(lines.iter().copied())
        .map_err(|_| ApiError::new(400, code::BAD_REQUEST, "offer at most one shard-ticket"))?;
    let credential = match offer.ticket {
        Some(presented) => {
            let origin = seen.origin.ok_or_else(|| {
                ApiError::new(
                    400,
                    code::ORIGIN_REQUIRED,
                    "a ticket needs the Origin it was issued to",
                )
            })?;
            let now = gate.now();
            let redeemed = gate.book().redeem(presented, origin, now);
            redeemed.map_err(|why| {
                let message = match why {
                    Redeem::Unknown => "unknown or already used ticket",
                    Redeem::Expired => "the ticket has expired",
                    Redeem::WrongOrigin => "the ticket was issued to another origin",
                };
                ApiError::new(401, code::INVALID_TICKET, message)
            })?;
            Credential::Ticket
        }
        None => {
            panel_token(hub, rq, query)?;
            Credential::PanelToken
        }
    };
    Ok(Admitted {
        credential,
        subprotocol: offer.shard_v0.then_some(access::SUBPROTOCOL),
        scheme: passed.scheme,
        via_proxy: passed.via_proxy,
    })
}

/// `POST /shard/ticket`: the same rules as an upgrade up to the
/// credential, which must be the panel token; the request's `Origin` is
/// required and the ticket is bound to it. Answers `{ticket, expires_at}`
/// (`expires_at` in Unix milliseconds). The ticket is never logged.
fn issue_ticket(hub: &Hub, gate: &Gate, rq: &Request, query: &str) -> Result<Reply, ApiError> {
    let seen = seen(rq);
    checked(hub, gate, &seen)?;
    let origin = seen.origin.ok_or_else(|| {
        ApiError::new(
            400,
            code::ORIGIN_REQUIRED,
            "a ticket is bound to the Origin of its request",
        )
    })?;
    panel_token(hub, rq, query)?;
    let secret = crate::services::new_token();
    let now = gate.now();
    let issued = gate.book().issue(&secret, origin, now);
    let deadline = issued.map_err(|ticket::Full| {
        ApiError::new(
            429,
            code::TOO_MANY_TICKETS,
            format!(
                "{} tickets are outstanding; use or let some expire",
                ticket::MAX_OUTSTANDING
            ),
        )
    })?;
    let expires_at = crate::util::time::now_millis().saturating_add(deadline - now);
    Ok(Reply::json(
        200,
        &json!({"ticket": secret, "expires_at": expires_at}),
    ))
}

/// The upgrade: admission, the handshake, the 101 with `shard.v0` when
/// offered; then the connection (`service::serve`).
fn connect(hub: &Arc<Hub>, gate: &Gate, shard: &Arc<super::Shard>, rq: Request, query: &str) {
    let admitted = match admit(hub, gate, &rq, query) {
        Ok(admitted) => admitted,
        Err(err) => return reply::respond_error(rq, &err),
    };
    let key = match ws::check_upgrade(&rq) {
        Ok(key) => key,
        Err(err) => return reply::respond_error(rq, &err.into()),
    };
    let accepted = ws::accept_selecting(
        rq,
        &key,
        MAX_CLIENT_MESSAGE,
        ws::SMALL_READ_BUFFER,
        admitted.subprotocol,
    );
    match accepted {
        Ok(accepted) => {
            log::debug!(
                "shard: connection admitted ({:?}, {:?}, through the proxy: {})",
                admitted.credential,
                admitted.scheme,
                admitted.via_proxy
            );
            super::service::serve(hub, shard, accepted)
        }
        Err(err) => log::debug!("shard upgrade failed: {err}"),
    }
}

/// The rules before the credential, as the API answers them.
fn checked(hub: &Hub, gate: &Gate, seen: &Seen<'_>) -> Result<Passed, ApiError> {
    let policy = access::Policy {
        mode: gate.mode,
        settings: &gate.settings,
        listener: hub.local_addr(),
    };
    access::check(&policy, seen).map_err(|refusal| match refusal {
        Refusal::Off => ApiError::new(403, code::SHARD_OFF, gate.off_reason.clone()),
        Refusal::BadHost => ApiError::new(400, code::BAD_REQUEST, "malformed Host header"),
        Refusal::WrongHost => ApiError::new(
            403,
            code::FORBIDDEN_HOST,
            "the Host header does not name this hub's Shard endpoint",
        ),
        Refusal::ForwardedHost => ApiError::new(
            400,
            code::FORWARDED_HOST_MISMATCH,
            "X-Forwarded-Host does not name shard.publicHost",
        ),
        Refusal::OriginNotAllowed => ApiError::new(
            400,
            code::ORIGIN_NOT_ALLOWED,
            "the Origin is not an allowed origin",
        ),
    })
}

/// The panel token, exactly as `/panel/ws` and the JSON API take it.
fn panel_token(hub: &Hub, rq: &Request, query: &str) -> Result<(), ApiError> {
    let presented = auth::Presented {
        query,
        authorization: reply::header(rq, "Authorization"),
        cookie: reply::header(rq, "Cookie"),
    };
    if auth::panel_authorized(&hub.config.panel.token, &presented) {
        Ok(())
    } else {
        Err(ApiError::new(
            401,
            code::UNAUTHORIZED,
            "missing or wrong panel token",
        ))
    }
}

/// The request as the rules see it. `X-Forwarded-For` is not read.
fn seen(rq: &Request) -> Seen<'_> {
    Seen {
        host: reply::header(rq, "Host"),
        origin: single(rq, "Origin"),
        forwarded_proto: single(rq, "X-Forwarded-Proto"),
        forwarded_host: single(rq, "X-Forwarded-Host"),
        peer: rq.remote_addr().map(|addr| addr.ip()),
    }
}

/// Every line of header `name`, in order.
fn headers<'a>(rq: &'a Request, name: &str) -> Vec<&'a str> {
    rq.headers()
        .iter()
        .filter(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
        .collect()
}

/// Header `name` when it has exactly one line. A repeated one is passed
/// as `", "`, which no rule accepts (a proxy that appends rather than
/// replaces, or a client adding its own, is never half-trusted).
fn single<'a>(rq: &'a Request, name: &str) -> Option<&'a str> {
    match headers(rq, name).as_slice() {
        [] => None,
        [one] => Some(one),
        _ => Some(", "),
    }
}
