//! Confirmation sockets `GET /agent/<id>/confirm?token=`: exactly one
//! request frame, one response, then the close. The socket's thread
//! registers the prompt, judges the worker identity (hold, ask or deny),
//! notices a second frame or the worker going away, and retires the prompt.
//!
//! Decisions come from operators through [`decide`] on any thread: it marks
//! the prompt decided under the session lock, then writes the response
//! after unlocking. The socket thread polls its deadlines every 250 ms.
//!
//! A headless child's prompt becomes decidable only when its worker is
//! verified live *and* the request's run is the child's active run. At
//! that moment (under the same lock) the child's operator policy applies:
//! `deny` or `approve` settles the prompt at once, the same way an
//! operator decision does; `ask` leaves it open for operators. The policy
//! is read only then, so a later policy change never touches a prompt that
//! is already open. Disconnection, expiry, a stale identity or a stopping
//! child never approve anything.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tungstenite::{Error as WsError, Message};

use crate::session::headless::Policy;
use crate::session::{
    NewPrompt, NotOpened, Note, PromptEnd, PromptState, PromptStep, Publisher, Session, Sessions,
};
use crate::util::time;
use crate::wire::worker::confirm_frames::{self, ConfirmationRequest};
use crate::ws::{close, Accepted, FrameWriter};
use crate::wsconn::sockets::Sockets;

/// Open prompts one session may hold; further requests are denied.
pub const MAX_OPEN_PROMPTS: usize = 64;

/// Largest confirmation request frame, whatever `limits.maxMessageBytes`.
pub const MAX_FRAME_BYTES: usize = 1024 * 1024;

/// How long the hub waits for the worker to close after answering.
const CLOSE_GRACE: Duration = Duration::from_secs(3);

/// How often the socket thread looks at its deadlines.
const POLL: Duration = Duration::from_millis(250);

pub use crate::session::DecideError;

/// What the confirmation side works with: the registry, the publisher,
/// the open sockets, and its two timings.
#[derive(Clone)]
pub struct Confirmations {
    pub sessions: Arc<Sessions>,
    pub publisher: Arc<Publisher>,
    pub sockets: Arc<Sockets>,
    /// How long a prompt waits for a decision (`worker.confirmationTimeoutMs`).
    pub timeout: Duration,
    /// How long a prompt waits for its worker's identity
    /// (`limits.confirmIdentityHoldMs`).
    pub hold: Duration,
}

/// An operator's answer to a confirmation.
#[derive(Debug, Clone, Copy)]
pub struct Answer<'a> {
    pub approved: bool,
    pub reason: Option<&'a str>,
    /// Who answered, as the `Decided` note names it.
    pub source: &'static str,
    /// The answer also made a grant (Shard's `allow_always`).
    pub always: bool,
}

/// Records an operator's decision and sends it to the worker. The first
/// decision wins; nothing is ever resent.
pub fn decide(
    sessions: &Sessions,
    publisher: &Publisher,
    session_id: &str,
    confirmation_id: &str,
    answer: Answer<'_>,
) -> Result<(), DecideError> {
    let Answer {
        approved,
        reason,
        source,
        always,
    } = answer;
    let now = time::now_rfc3339();
    let outcome = sessions
        .with(session_id, |s| {
            let prompt = s.settle_prompt(confirmation_id, approved, reason, &now)?;
            let response = response_text(&prompt.request, approved, reason);
            Ok((prompt.writer.clone(), response))
        })
        .ok_or(DecideError::Unknown)??;
    let (writer, response) = outcome;
    // Write the decision, then tell the panels: the session's description
    // shows the prompt decided; the closing `confirmation` (with the
    // outcome) comes when the worker closes the exchange. No `confirmation`
    // frame is sent in between, as with the Node hub.
    if let Err(err) = writer.send_text(&response) {
        log::warn!("session {session_id}: decision for {confirmation_id} not delivered: {err}");
    }
    publisher.notify(Note::Decided {
        session: session_id.to_string(),
        confirmation_id: confirmation_id.to_string(),
        approved,
        source,
        always,
    });
    Ok(())
}

/// What a headless child's operator policy answers to a request that just
/// became decidable: `Some(false)` for deny, `Some(true)` for approve,
/// `None` for ask (operators decide) and for ordinary sessions. A child on
/// its way out never approves.
fn policy_answer(s: &Session) -> Option<bool> {
    let child = s.headless()?;
    match child.policy() {
        Policy::Ask => None,
        Policy::Deny => Some(false),
        Policy::Approve if child.closed_to_admission() => None,
        Policy::Approve => Some(true),
    }
}

/// The reason sent with a policy decision.
fn policy_reason(approved: bool) -> &'static str {
    if approved {
        "approved by the subagent's operator policy"
    } else {
        "denied by the subagent's operator policy"
    }
}

/// A decision made on the hub's own rule (a headless child's policy, a
/// grant), to write after unlocking.
struct AutoAnswer {
    writer: Arc<FrameWriter>,
    response: String,
    approved: bool,
    /// `policy` or `grant`, as the `Decided` note names it.
    source: &'static str,
}

/// Answers the prompt `confirmation_id`, which has just become decidable
/// (verified live worker, active run), when a rule does: a headless
/// child's operator policy, else a grant of the session that allows
/// exactly this call.
fn auto_answer(s: &mut Session, confirmation_id: &str, now: &str) -> Option<AutoAnswer> {
    let (approved, reason, source) = match policy_answer(s) {
        Some(approved) => (approved, policy_reason(approved).to_string(), "policy"),
        None => {
            let call = &s.prompt(confirmation_id)?.request.call;
            let grant = s.grant_for(call)?;
            (true, format!("allowed by grant {}", grant.id), "grant")
        }
    };
    let prompt = s
        .settle_prompt(confirmation_id, approved, Some(&reason), now)
        .ok()?;
    Some(AutoAnswer {
        writer: prompt.writer.clone(),
        response: response_text(&prompt.request, approved, Some(&reason)),
        approved,
        source,
    })
}

/// Writes a rule's decision (after the lock is released).
fn deliver_auto(session_id: &str, confirmation_id: &str, auto: &AutoAnswer) {
    let verb = if auto.approved { "approved" } else { "denied" };
    let by = if auto.source == "grant" {
        "a grant"
    } else {
        "the subagent policy"
    };
    log::info!("session {session_id}: confirmation {confirmation_id} {verb} by {by}");
    if let Err(err) = auto.writer.send_text(&auto.response) {
        log::warn!("session {session_id}: decision for {confirmation_id} not delivered: {err}");
    }
}

fn response_text(request: &ConfirmationRequest, approved: bool, reason: Option<&str>) -> String {
    confirm_frames::confirmation_response(request, approved, reason).to_string()
}

/// Runs one accepted confirmation socket until the prompt is retired.
pub fn run(side: Confirmations, session_id: String, accepted: Accepted) {
    let Accepted { mut socket, writer } = accepted;
    let conn_id = side.sockets.register(writer.clone());
    let confirmation_timeout = side.timeout;
    let _ = socket
        .get_ref()
        .set_read_timeout(Some(confirmation_timeout));
    let request = match read_request(&mut socket, &session_id) {
        Ok(request) => request,
        Err(reason) => {
            log::warn!("session {session_id}: confirmation refused: {reason}");
            writer.close_and_shutdown(close::POLICY, reason);
            side.sockets.unregister(conn_id);
            return;
        }
    };
    let confirmation_id = request.confirmation_id.clone();
    let hold = side.hold;
    let hold_until = Instant::now() + hold;
    let deadline = Instant::now() + confirmation_timeout;
    let registered = register(&side, &session_id, conn_id, request, &writer);
    let mut step = match registered {
        Registered::Duplicate => {
            log::warn!("session {session_id}: duplicate confirmation id {confirmation_id}");
            writer.close_and_shutdown(close::POLICY, "duplicate confirmation_id");
            side.sockets.unregister(conn_id);
            return;
        }
        Registered::Gone => {
            writer.close_and_shutdown(close::POLICY, "unknown session");
            side.sockets.unregister(conn_id);
            return;
        }
        Registered::Full(response) => {
            log::warn!("session {session_id}: {MAX_OPEN_PROMPTS} confirmations open; denying {confirmation_id}");
            let _ = writer.send_text(&response);
            writer.close_and_shutdown(close::NORMAL, "denied");
            side.sockets.unregister(conn_id);
            return;
        }
        Registered::Open(step) => step,
    };
    let _ = socket.get_ref().set_read_timeout(Some(POLL));
    let mut decided_at: Option<Instant> = None;
    let mut ended = PromptEnd::Disconnected;
    loop {
        if let PromptStep::Deny(reason) = std::mem::replace(&mut step, PromptStep::Wait) {
            deny_now(&side, &session_id, &confirmation_id, reason);
        }
        match socket.read() {
            Ok(Message::Text(_)) | Ok(Message::Binary(_)) => {
                log::warn!("session {session_id}: second frame on confirmation {confirmation_id}");
                writer.close_and_shutdown(close::POLICY, "one request per connection");
                ended = PromptEnd::ProtocolError;
                break;
            }
            Ok(_) => {}
            Err(WsError::Io(err))
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
        let now = Instant::now();
        let state = side.sessions.with(&session_id, |s| {
            let before = s.prompt(&confirmation_id).map(|p| p.state);
            let mut polled = s.recheck_prompt(&confirmation_id, now >= hold_until);
            let verified = before == Some(PromptState::AwaitingIdentity)
                && matches!(polled, Some((PromptState::AwaitingDecision, _)));
            // Just became decidable: a headless child's policy may answer.
            let auto = if verified {
                let auto = auto_answer(s, &confirmation_id, &time::now_rfc3339());
                if auto.is_some() {
                    if let Some((state, _)) = polled.as_mut() {
                        *state = PromptState::Decided;
                    }
                }
                auto
            } else {
                None
            };
            (polled, verified, auto)
        });
        let state = state.map(|(polled, verified, auto)| {
            if let Some(auto) = &auto {
                deliver_auto(&session_id, &confirmation_id, auto);
            }
            if verified && auto.is_none() {
                // The event socket named the worker: the prompt can now be
                // decided, and every panel must hear that.
                side.publisher.notify(Note::ConfirmationOpened {
                    session: session_id.clone(),
                    confirmation_id: confirmation_id.clone(),
                });
            } else if let (true, Some(auto)) = (verified, &auto) {
                // Answered by the child's policy at once: only the
                // description changes until the exchange closes.
                side.publisher.notify(Note::Decided {
                    session: session_id.clone(),
                    confirmation_id: confirmation_id.clone(),
                    approved: auto.approved,
                    source: auto.source,
                    always: false,
                });
            }
            polled
        });
        match state {
            None | Some(None) => break,
            Some(Some((PromptState::Decided, next))) => {
                step = next;
                let since = *decided_at.get_or_insert(now);
                if now.duration_since(since) >= CLOSE_GRACE {
                    writer.terminate();
                    break;
                }
            }
            Some(Some((_, next))) => {
                step = next;
                if now >= deadline {
                    ended = PromptEnd::Deadline;
                    writer.close_and_shutdown(close::NORMAL, "confirmation deadline passed");
                    break;
                }
            }
        }
    }
    writer.terminate();
    side.sockets.unregister(conn_id);
    if side.sockets.is_closing() {
        ended = PromptEnd::Shutdown;
    }
    retire(&side, &session_id, &confirmation_id, conn_id, ended);
}

fn read_request(
    socket: &mut tungstenite::WebSocket<crate::ws::SplitStream>,
    session_id: &str,
) -> Result<ConfirmationRequest, &'static str> {
    loop {
        match socket.read() {
            Ok(Message::Text(text)) => {
                return confirm_frames::parse_confirmation_request(text.as_str(), session_id)
                    .map_err(|_| "malformed confirmation request")
            }
            Ok(Message::Binary(_)) => return Err("binary frames are not accepted"),
            Ok(Message::Close(_)) => return Err("closed before a request"),
            Ok(_) => continue,
            Err(WsError::Capacity(_)) => return Err("confirmation request too large"),
            Err(_) => return Err("no confirmation request arrived"),
        }
    }
}

enum Registered {
    Open(PromptStep),
    Duplicate,
    Gone,
    /// Capacity exhausted: the denial to send; the prompt is never listed.
    Full(String),
}

/// Adds the prompt to its session and judges the worker identity.
fn register(
    side: &Confirmations,
    session_id: &str,
    conn_id: u64,
    request: ConfirmationRequest,
    writer: &Arc<FrameWriter>,
) -> Registered {
    let now = time::now_rfc3339();
    let deadline_at =
        time::rfc3339_from_millis(time::now_millis() + side.timeout.as_millis() as u64);
    let confirmation_id = request.confirmation_id.clone();
    let new = NewPrompt {
        conn_id,
        request,
        received_at: now.clone(),
        deadline_at,
        writer: writer.clone(),
    };
    let result = side.sessions.with(session_id, |s| {
        let step = match s.open_prompt(new, MAX_OPEN_PROMPTS) {
            Ok(step) => step,
            Err((NotOpened::Duplicate, _)) => return (Registered::Duplicate, false, None),
            Err((NotOpened::Full, new)) => {
                let reason = "capacity exhausted: too many open confirmations";
                let denial = response_text(&new.request, false, Some(reason));
                return (Registered::Full(denial), false, None);
            }
        };
        // Decidable on arrival: a headless child's policy may answer now,
        // before any panel is told, so no operator sees it open.
        let decidable = s.prompt(&confirmation_id).is_some_and(|p| p.verified);
        let auto = if decidable && step == PromptStep::Wait {
            auto_answer(s, &confirmation_id, &now)
        } else {
            None
        };
        (Registered::Open(step), true, auto)
    });
    match result {
        None => Registered::Gone,
        Some((registered, opened, auto)) => {
            match (&auto, opened) {
                // Answered by a child's policy on arrival: never shown open;
                // the description changes, the closing frame follows.
                (Some(auto), _) => {
                    deliver_auto(session_id, &confirmation_id, auto);
                    side.publisher.notify(Note::Decided {
                        session: session_id.to_string(),
                        confirmation_id: confirmation_id.clone(),
                        approved: auto.approved,
                        source: auto.source,
                        always: false,
                    });
                }
                (None, true) => side.publisher.notify(Note::ConfirmationOpened {
                    session: session_id.to_string(),
                    confirmation_id: confirmation_id.clone(),
                }),
                (None, false) => {}
            }
            registered
        }
    }
}

/// Denies a prompt on the hub's own authority (identity or capacity).
fn deny_now(side: &Confirmations, session_id: &str, confirmation_id: &str, reason: &'static str) {
    let now = time::now_rfc3339();
    let sent = side.sessions.with(session_id, |s| {
        let prompt = s.deny_prompt(confirmation_id, reason, &now)?;
        let response = response_text(&prompt.request, false, Some(reason));
        Some((prompt.writer.clone(), response))
    });
    if let Some(Some((writer, response))) = sent {
        log::info!("session {session_id}: confirmation {confirmation_id} denied: {reason}");
        let _ = writer.send_text(&response);
        // The description shows it decided; the closing frame follows.
        side.publisher.notify(Note::Decided {
            session: session_id.to_string(),
            confirmation_id: confirmation_id.to_string(),
            approved: false,
            source: "hub",
            always: false,
        });
    }
}

/// Removes the prompt; a retired prompt can no longer be answered. The
/// closing `confirmation` keeps the state `decided` for a prompt that was
/// answered (outcome `{phase: "decided", detail: <decision>}`); any other
/// becomes `retired` with why it `ended`.
fn retire(
    side: &Confirmations,
    session_id: &str,
    confirmation_id: &str,
    conn_id: u64,
    ended: PromptEnd,
) {
    let now = time::now_rfc3339();
    let closed = side.sessions.with(session_id, |s| {
        s.retire_prompt(confirmation_id, conn_id, ended, &now)
    });
    if let Some(Some(closed)) = closed {
        side.publisher.notify(Note::ConfirmationClosed { closed });
    }
}
