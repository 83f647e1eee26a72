//! Remote-tool sockets `GET /agent/<id>/tools/<route>?token=` on the tools
//! listener: exactly one `tool_request` frame, one `tool_response`, then a
//! normal close (1000), all within `toolRequests.timeoutMs`.
//!
//! One thread per socket (started by `http::tools`). It reads with short
//! timeouts so it can watch its deadline, the identity hold and the peer at
//! once. Executable routes (`plan/read`, `plan/replace`) run only for the
//! live worker of the session's active run; until the event socket shows
//! that, the thread waits up to `limits.confirmIdentityHoldMs`. A request
//! whose socket closed (or sent another frame) before the commit is never
//! executed. Hub shutdown wakes the thread by shutting the socket down
//! (the socket is registered with the hub).

use std::sync::Arc;

use serde_json::Value;
use std::time::{Duration, Instant};

use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::CloseFrame;
use tungstenite::{Error as WsError, Message, WebSocket};

use crate::services::{HubError, ToolSlot};
use crate::session::IdentityState;
use crate::subagents::family::Caller;
use crate::subagents::routes;
use crate::subagents::Service;
use crate::wire::http::auth;
use crate::wire::worker::plan::{self, PlanCall};
use crate::wire::worker::subagent_args as args;
use crate::wire::worker::tool_frames::{self, code, ToolRequest, MAX_RESPONSE_BYTES};
use crate::ws::{close, Accepted, FrameWriter, SplitStream};

/// How long one read waits before the deadlines are looked at again (also
/// the identity re-check interval).
const POLL: Duration = Duration::from_millis(50);

/// What the route and token of the upgrade said.
pub struct Upgrade {
    pub session_id: String,
    pub route: String,
    /// The worker token presented, re-checked while the request waits.
    pub token: String,
}

/// How an exchange ended early: the close to send (code and reason), or
/// nothing because the peer is gone.
enum End {
    Close(u16, &'static str),
    Gone,
}

/// One identity judgement of a waiting request.
enum Judged {
    Allow,
    /// Refused at once (the token changed).
    Refuse(&'static str),
    /// Not yet: the event socket may still catch up.
    Wait(&'static str),
}

/// What a look at the socket found.
enum Polled {
    Quiet,
    End(End),
}

/// Runs one accepted tool socket to its end. `slot` is held until then.
pub fn run(sv: Arc<Service>, upgrade: Upgrade, accepted: Accepted, slot: ToolSlot) {
    let _slot = slot;
    let Accepted { mut socket, writer } = accepted;
    let conn_id = sv.sockets.register(writer.clone());
    let deadline = Instant::now() + Duration::from_millis(sv.config.tool_requests.timeout_ms);
    let session_id = upgrade.session_id.clone();
    match exchange(&sv, &upgrade, &mut socket, &writer, deadline) {
        Ok(()) => finish_close(&mut socket, deadline),
        Err(End::Close(code, reason)) => {
            log::warn!("session {session_id}: tool socket closed {code}: {reason}");
            writer.close_and_shutdown(code, reason);
        }
        Err(End::Gone) => {
            log::debug!("session {session_id}: tool socket ended before a response");
        }
    }
    writer.terminate();
    sv.sockets.unregister(conn_id);
}

/// Reads the request, dispatches it, writes the response.
fn exchange(
    sv: &Arc<Service>,
    upgrade: &Upgrade,
    socket: &mut WebSocket<SplitStream>,
    writer: &FrameWriter,
    deadline: Instant,
) -> Result<(), End> {
    let text = read_request(socket, deadline)?;
    let request = tool_frames::parse_tool_request(&text, &upgrade.session_id).map_err(|err| {
        log::warn!(
            "session {}: tool request refused: {err}",
            upgrade.session_id
        );
        End::Close(close::POLICY, "malformed tool request")
    })?;
    // A second frame already queued behind the first: nothing is dispatched.
    if let Polled::End(end) = poll(socket, Duration::ZERO) {
        return Err(end);
    }
    let route = upgrade.route.as_str();
    let parsed = match plan::parse_call(route, &request.arguments) {
        Some(parsed) => Some(
            parsed
                .map(Parsed::Plan)
                .map_err(|err| (code::INVALID_ARGUMENTS, err.to_string())),
        ),
        None => args::parse_call(route, &Value::Object(request.arguments.clone())).map(|parsed| {
            parsed
                .map(Parsed::Subagent)
                .map_err(|err| (err.code(), err.to_string()))
        }),
    };
    let response = match parsed {
        None => tool_frames::rejected(
            &request,
            route,
            code::NOT_IMPLEMENTED,
            &format!("this hub does not implement the route {route}"),
        ),
        Some(Err((code, message))) => tool_frames::rejected(&request, route, code, &message),
        Some(Ok(call)) => match authorize(sv, upgrade, &request, socket, deadline)? {
            Err(why) => {
                log::info!("session {}: {route} refused: {why}", upgrade.session_id);
                tool_frames::rejected(&request, route, code::UNAUTHORIZED, why)
            }
            Ok(()) => {
                // The commit happens only for a peer that is still there.
                if let Polled::End(end) = poll(socket, Duration::ZERO) {
                    return Err(end);
                }
                execute(sv, &upgrade.session_id, route, &request, call)
            }
        },
    };
    let response = if response.len() > MAX_RESPONSE_BYTES {
        let code = if args::is_subagent_route(route) {
            code::RESULT_TOO_LARGE
        } else {
            code::STORAGE_ERROR
        };
        tool_frames::rejected(
            &request,
            route,
            code,
            "the result does not fit the 256 KiB response limit",
        )
    } else {
        response
    };
    let left = deadline.saturating_duration_since(Instant::now());
    let _ = socket
        .get_ref()
        .set_write_timeout(Some(left.max(Duration::from_millis(1))));
    writer.send_text(&response).map_err(|_| End::Gone)
}

/// A validated call of one of the executable routes.
enum Parsed {
    Plan(PlanCall),
    Subagent(args::Call),
}

/// Runs a validated, authorized call.
fn execute(
    sv: &Arc<Service>,
    session_id: &str,
    route: &str,
    request: &ToolRequest,
    call: Parsed,
) -> String {
    let call = match call {
        Parsed::Plan(call) => call,
        Parsed::Subagent(call) => {
            let caller = Caller {
                session_id: session_id.to_string(),
                worker_id: request.worker_id.clone(),
                run_id: request.run_id.clone(),
                request_id: request.request_id.clone(),
            };
            let arguments = Value::Object(request.arguments.clone());
            return match routes::execute(sv, &caller, route, &arguments, call) {
                Ok(result) => tool_frames::succeeded(request, route, result),
                Err(refusal) => {
                    log::info!("session {session_id}: {route} refused: {refusal}");
                    tool_frames::rejected(request, route, refusal.code(), refusal.message())
                }
            };
        }
    };
    let storage = |err: HubError| {
        log::warn!("session {session_id}: {route} failed: {err}");
        tool_frames::rejected(request, route, code::STORAGE_ERROR, &err.to_string())
    };
    match call {
        PlanCall::Read => match sv.read_plan(session_id) {
            Ok(plan) => tool_frames::succeeded(request, route, plan::read_result(&plan)),
            Err(err) => storage(err),
        },
        PlanCall::Replace { markdown } => match sv.replace_plan(session_id, &markdown) {
            Ok(change) => tool_frames::succeeded(
                request,
                route,
                plan::replace_result(&change.plan, change.changed),
            ),
            Err(err) => storage(err),
        },
    }
}

/// Waits (at most `limits.confirmIdentityHoldMs`) until the caller is the
/// session's live worker and its run is the active one. `Ok(Err(why))`
/// is a refusal to answer with `unauthorized`; `Err` ends the socket.
fn authorize(
    sv: &Service,
    upgrade: &Upgrade,
    request: &ToolRequest,
    socket: &mut WebSocket<SplitStream>,
    deadline: Instant,
) -> Result<Result<(), &'static str>, End> {
    let hold_until =
        Instant::now() + Duration::from_millis(sv.config.limits.confirm_identity_hold_ms);
    loop {
        let judged = sv.sessions.with(&upgrade.session_id, |s| {
            if !auth::constant_time_eq(upgrade.token.as_bytes(), s.token().as_bytes()) {
                return Judged::Refuse("the worker token is no longer valid");
            }
            let live = s.identity() == IdentityState::Live
                && s.worker_id() == Some(request.worker_id.as_str());
            let running = s.active_run() == Some(request.run_id.as_str());
            if live && running {
                Judged::Allow
            } else {
                Judged::Wait("the caller is not the live worker of the session's active run")
            }
        });
        let why = match judged {
            None => return Ok(Err("the session no longer exists")),
            Some(Judged::Allow) => return Ok(Ok(())),
            Some(Judged::Refuse(why)) => return Ok(Err(why)),
            Some(Judged::Wait(why)) => why,
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(End::Close(close::POLICY, "tool exchange deadline passed"));
        }
        if now >= hold_until {
            return Ok(Err(why));
        }
        let wait = POLL.min(hold_until - now).min(deadline - now);
        if let Polled::End(end) = poll(socket, wait) {
            return Err(end);
        }
    }
}

/// Reads the one request frame before `deadline`.
fn read_request(socket: &mut WebSocket<SplitStream>, deadline: Instant) -> Result<String, End> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(End::Close(close::POLICY, "tool exchange deadline passed"));
        }
        let _ = socket.get_ref().set_read_timeout(Some(left.min(POLL * 2)));
        match socket.read() {
            Ok(Message::Text(text)) => return Ok(text.as_str().to_string()),
            Ok(Message::Binary(_)) => {
                return Err(End::Close(
                    close::UNSUPPORTED,
                    "binary frames are not accepted",
                ))
            }
            Ok(Message::Close(_)) => return Err(End::Gone),
            Ok(_) => {}
            Err(err) => {
                if let Some(end) = read_error(err) {
                    return Err(end);
                }
            }
        }
    }
}

/// Looks at the socket for up to `wait`: any further frame ends the
/// exchange with 1008 (nothing is dispatched twice), a close or a broken
/// socket means the peer is gone.
fn poll(socket: &mut WebSocket<SplitStream>, wait: Duration) -> Polled {
    let _ = socket
        .get_ref()
        .set_read_timeout(Some(wait.max(Duration::from_millis(1))));
    match socket.read() {
        Ok(Message::Text(_)) | Ok(Message::Binary(_)) => {
            Polled::End(End::Close(close::POLICY, "one request per connection"))
        }
        Ok(Message::Close(_)) => Polled::End(End::Gone),
        Ok(_) => Polled::Quiet,
        Err(err) => read_error(err).map_or(Polled::Quiet, Polled::End),
    }
}

/// Maps a read error: `None` for a timeout (keep waiting).
fn read_error(err: WsError) -> Option<End> {
    match err {
        WsError::Io(err)
            if matches!(
                err.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            None
        }
        WsError::Capacity(_) => Some(End::Close(close::TOO_BIG, "tool request too large")),
        WsError::Utf8(_) => Some(End::Close(close::INVALID_PAYLOAD, "invalid UTF-8")),
        _ => Some(End::Gone),
    }
}

/// After the response: close 1000 and wait (until the exchange deadline)
/// for the peer's close reply; a peer that never replies is cut off.
fn finish_close(socket: &mut WebSocket<SplitStream>, deadline: Instant) {
    let _ = socket.close(Some(CloseFrame {
        code: CloseCode::from(close::NORMAL),
        reason: "".into(),
    }));
    let _ = socket.flush();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        let _ = socket.get_ref().set_read_timeout(Some(left.min(POLL * 2)));
        match socket.read() {
            Ok(_) => {}
            Err(WsError::Io(err))
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return,
        }
    }
}
