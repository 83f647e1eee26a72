//! The panel socket service: `/panel/ws` upgrade checks, the welcome, the
//! handling of a socket's messages (dispatch), subscription replay (legacy
//! single frame or paged), and the fan-out of hub notifications.
//!
//! An idle connection has no reader thread: the shared poller
//! (`wsconn::poller`, which `Panels` serves below) waits on its socket
//! and runs [`drain`] on a short-lived `panel-reader` thread when input
//! arrives; frames
//! go out through the connection's writer (`conn`). Broadcast frames are
//! serialized and encoded once and shared by every recipient. Slow work
//! (worker stop ladders) runs off the reader.

use std::sync::Arc;

use serde_json::{json, Value};
use tiny_http::Request;
use tungstenite::{Error as WsError, Message};

use super::conn::{self, Encoded, PanelConn, Subscription};
use super::{render, Panels};
use crate::hub::Hub;
use crate::ops::sessions::LogBounds;
use crate::ops::worker::{Action, ActionDone};
use crate::ops::{self, OpError};
use crate::reply::{self, ApiError};
use crate::session::Note;
use crate::wire::code;
use crate::wire::http::{auth, url};
use crate::wire::panel::{self as protocol, ClientMsg, Paging};
use crate::wire::websocket::close;
use crate::wire::worker::plan;
use crate::ws;
use crate::wsconn::outbound::Outbound;
use crate::wsconn::poller::{self, Service};

/// A parked panel socket.
pub type Parked = poller::Parked<PanelConn>;
/// What a panel reader did with its socket's input.
pub type Drained = poller::Drained<PanelConn>;
/// The idle panel sockets.
pub type Poller = poller::Poller<Panels>;

impl Service for Panels {
    type Ctx = Hub;
    type Conn = PanelConn;
    type Socket = tungstenite::WebSocket<crate::ws::SplitStream>;
    const POLL_THREAD: &'static str = "panel-poll";
    const READER_THREAD: &'static str = "panel-reader";

    fn poller(&self) -> &Poller {
        &self.poller
    }

    fn outbound(conn: &PanelConn) -> &Outbound {
        conn.outbound()
    }

    fn drain(hub: &Arc<Hub>, panels: &Arc<Panels>, parked: Parked) -> Drained {
        drain(hub, panels, parked)
    }

    fn release(hub: &Hub, panels: &Panels, conn: &PanelConn) {
        release(hub, panels, conn)
    }
}

/// Largest client message (panel input is bounded by the payload rules; a
/// message is small unless it carries content parts).
pub const MAX_CLIENT_MESSAGE: usize = 4 * 1024 * 1024;

/// Transcript entries one replay step reads under the session lock.
const REPLAY_BATCH: usize = 2048;

/// Handles `GET /panel/ws`: token, Origin, the upgrade, the writer and the
/// welcome; then the socket is parked with the poller until it has input.
pub fn handle(hub: &Arc<Hub>, panels: &Arc<Panels>, rq: Request, query: &str) {
    if let Err(err) = check(hub, &rq, query) {
        return reply::respond_error(rq, &err);
    }
    let key = match ws::check_upgrade(&rq) {
        Ok(key) => key,
        Err(err) => return reply::respond_error(rq, &err.into()),
    };
    let accepted = match ws::accept_with(rq, &key, MAX_CLIENT_MESSAGE, ws::SMALL_READ_BUFFER) {
        Ok(accepted) => accepted,
        Err(err) => {
            log::debug!("panel upgrade failed: {err}");
            return;
        }
    };
    let ws::Accepted { mut socket, writer } = accepted;
    socket.get_mut().set_nonblocking_reads(true);
    let id = hub.sockets.register(writer.clone());
    let (panel, rx) = PanelConn::new(id, writer);
    panels.add(panel.clone());
    panel.start_writer(rx);
    send(
        &panel,
        &protocol::welcome(hub.panel_info(), super::describe::all(hub)),
    );
    let parked = Parked {
        conn: panel,
        socket: Box::new(socket),
    };
    if let Err(parked) = Poller::park(panels, hub, parked) {
        release(hub, panels, &parked.conn);
    }
}

/// Panel token (query, bearer or cookie) and Origin: an Origin that is
/// present must name the same host as the request.
fn check(hub: &Hub, rq: &Request, query: &str) -> Result<(), ApiError> {
    let presented = auth::Presented {
        query,
        authorization: reply::header(rq, "Authorization"),
        cookie: reply::header(rq, "Cookie"),
    };
    if !auth::panel_authorized(&hub.config.panel.token, &presented) {
        return Err(ApiError::new(
            401,
            code::UNAUTHORIZED,
            "missing or wrong panel token",
        ));
    }
    if let Some(origin) = reply::header(rq, "Origin") {
        let host = reply::header(rq, "Host").unwrap_or("");
        if !url::origin_matches(origin, host) {
            return Err(ApiError::new(
                403,
                code::FORBIDDEN_ORIGIN,
                "cross-origin upgrade refused",
            ));
        }
    }
    Ok(())
}

/// Reads and handles the messages a parked socket has available (called
/// on a reader thread by the poller): `Park` once it would block,
/// `Closed` when the connection ended (and was released).
pub fn drain(hub: &Arc<Hub>, panels: &Panels, mut parked: Parked) -> Drained {
    let panel = parked.conn.clone();
    loop {
        let message = match parked.socket.read() {
            Ok(message) => message,
            Err(WsError::Io(err)) if err.kind() == std::io::ErrorKind::WouldBlock => {
                crate::util::wakes::release();
                return Drained::Park(parked);
            }
            Err(WsError::Capacity(_)) => {
                reply_error(&panel, code::BAD_MESSAGE, "message too large", None);
                break;
            }
            // RFC 6455 §8.1: a text frame that is not UTF-8 fails the
            // connection with 1007.
            Err(WsError::Utf8(_)) => {
                panel.close(close::INVALID_PAYLOAD, "invalid UTF-8");
                break;
            }
            Err(_) => break,
        };
        match message {
            Message::Text(text) => {
                let text = text.as_str();
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    dispatch(hub, &panel, text);
                }));
                if outcome.is_err() {
                    log::error!("panel {}: handler failed on a message", panel.id);
                    reply_error(
                        &panel,
                        code::INTERNAL_ERROR,
                        "the hub failed to process the message",
                        None,
                    );
                }
            }
            Message::Binary(_) => reply_error(
                &panel,
                code::BINARY_NOT_SUPPORTED,
                "panel messages must be text",
                None,
            ),
            _ => {}
        }
        if panel.is_dead() {
            break;
        }
    }
    drop(parked);
    release(hub, panels, &panel);
    Drained::Closed
}

/// Ends a panel connection and forgets it.
pub fn release(hub: &Hub, panels: &Panels, panel: &PanelConn) {
    panel.terminate();
    panels.remove(panel.id);
    hub.sockets.unregister(panel.id);
}

fn send(panel: &PanelConn, value: &Value) -> bool {
    panel.send_text(&value.to_string())
}

fn reply_error(panel: &PanelConn, code: &str, message: &str, request_id: Option<&str>) {
    let request = request_id.map(|id| json!({"request_id": id}));
    send(panel, &protocol::error(code, message, request));
}

/// What an `error` frame names of the message it answers: the session
/// the message named (`session`, at the top level, where Node clients
/// look for it) and the bounded echo of the message (`request`).
#[derive(Debug, Clone, Default)]
struct Answering {
    session: Option<String>,
    request: Option<Value>,
}

impl Answering {
    /// For a message naming `session`, echoed from its `text` (parsed again
    /// only now: a refusal is the rare case).
    fn of(session: Option<&str>, text: &str) -> Answering {
        Answering {
            session: session.map(str::to_string),
            request: protocol::echo(text),
        }
    }

    /// The error frame for `code` and `message`, then `fields`.
    fn error(&self, code: &str, message: &str, mut fields: Vec<(&str, Value)>) -> Value {
        if let Some(session) = &self.session {
            fields.insert(0, ("session", json!(session)));
        }
        protocol::error_with(code, message, self.request.clone(), fields)
    }
}

/// Answers a refused command with an `error` frame naming its session and
/// echoing the message.
fn refuse(panel: &PanelConn, err: &OpError, about: &Answering) {
    send(panel, &about.error(err.code(), &err.message, Vec::new()));
}

/// Parses one client message, calls its command, and renders the result
/// as this socket's frames.
fn dispatch(hub: &Arc<Hub>, panel: &Arc<PanelConn>, text: &str) {
    let msg = match protocol::parse_client(text) {
        Ok(msg) => msg,
        Err((err, _)) => {
            // A message refused as malformed still names what it could:
            // its bounded echo, and the session it named.
            let request = protocol::echo(text);
            let session = request
                .as_ref()
                .and_then(|r| r.get("session"))
                .and_then(Value::as_str)
                .map(str::to_string);
            let about = Answering { session, request };
            send(panel, &about.error(err.code, &err.message, Vec::new()));
            return;
        }
    };
    let request_id = msg.request_id().map(str::to_string);
    let request_id = request_id.as_deref();
    let named = msg.session().map(str::to_string);
    let about = || Answering::of(named.as_deref(), text);
    let refused = |err: OpError| refuse(panel, &err, &about());
    match msg {
        ClientMsg::Ping => {
            send(panel, &protocol::pong(&crate::util::time::now_rfc3339()));
        }
        ClientMsg::ListSessions => {
            send(panel, &protocol::sessions(super::describe::all(hub)));
        }
        ClientMsg::Unknown { .. } => {}
        ClientMsg::Subscribe {
            session,
            since,
            paged,
            replace,
            request_id,
        } => match ops::sessions::watchable(hub, &session) {
            Ok(()) => subscribe(
                hub,
                panel,
                &session,
                since,
                paged,
                replace,
                request_id,
                &about(),
            ),
            Err(err) => refused(err),
        },
        ClientMsg::Unsubscribe { session } => {
            panel.subs().remove(&session);
        }
        ClientMsg::CreateSession { session, spec } => {
            match ops::sessions::create(hub, &session, spec.as_ref()) {
                Ok(view) => {
                    send(panel, &protocol::created(render::session(&view)));
                }
                Err(err) => refused(err),
            }
        }
        ClientMsg::DeleteSession { session } => {
            if let Err(err) = ops::sessions::delete(hub, &session) {
                refused(err);
            }
        }
        ClientMsg::Worker {
            session,
            action,
            spec,
        } => worker_action(hub, panel, session, action, spec, about()),
        ClientMsg::Input { session, input } => match ops::worker::input(hub, &session, &input) {
            Ok(id) => accepted_request(panel, "input", &session, &id),
            Err(err) => refused(err),
        },
        ClientMsg::History {
            session,
            request_id,
            start,
            step,
            limit,
        } => {
            let page = ops::worker::HistoryPage {
                request_id,
                start,
                step,
                limit,
            };
            match ops::worker::history(hub, &session, page) {
                Ok(id) => accepted_request(panel, "history", &session, &id),
                Err(err) => refused(err),
            }
        }
        ClientMsg::Signal {
            session,
            operation,
            run_id,
        } => match ops::worker::signal(hub, &session, &operation, run_id.as_deref()) {
            Ok(()) => {
                let extra = json!({"operation": operation});
                send(
                    panel,
                    &protocol::accepted("signal", Some(&session), extra, None),
                );
            }
            Err(err) => refused(err),
        },
        ClientMsg::Confirmation {
            session,
            confirmation_id,
            decision,
            reason,
            request_id,
        } => {
            let approved = matches!(decision, protocol::Decision::Approved);
            let decided = ops::confirm::decide(
                hub,
                &session,
                &confirmation_id,
                approved,
                reason.as_deref(),
                ops::confirm::Source::Panel,
            );
            match decided {
                Ok(()) => {
                    let extra = json!({"confirmation_id": confirmation_id});
                    send(
                        panel,
                        &protocol::accepted(
                            "confirmation",
                            Some(&session),
                            extra,
                            request_id.as_deref(),
                        ),
                    );
                }
                Err(err) => {
                    let fields = vec![
                        ("action", json!("confirmation")),
                        ("confirmation_id", json!(confirmation_id)),
                    ];
                    send(panel, &about().error(err.code(), &err.message, fields));
                }
            }
        }
        ClientMsg::Logs { session, limit } => {
            let bounds = LogBounds {
                lines: limit.map_or(protocol::MAX_LOG_LINES, |l| {
                    (l as usize).min(protocol::MAX_LOG_LINES)
                }),
                bytes: protocol::LOG_TAIL_BYTES,
                line_bytes: protocol::LOG_LINE_PREVIEW,
            };
            match ops::sessions::logs(hub, &session, bounds) {
                Ok(tail) => {
                    let lines =
                        protocol::log_tail(tail.lines, tail.meta, tail.dropped, tail.omitted);
                    let reply = protocol::logs(&session, lines, tail.log_path.as_deref());
                    send(panel, &reply);
                }
                Err(err) => refused(err),
            }
        }
        ClientMsg::StatusSnapshot { session, since } => {
            match ops::sessions::transcript(hub, &session, since) {
                Ok((view, page)) => {
                    let frame =
                        protocol::snapshot(&session, super::render::session(&view), &page.entries);
                    if protocol::wire_cost(frame.len()) <= protocol::FRAME_CEILING {
                        panel.send_text(&frame);
                    } else {
                        refused(ops::sessions::too_large(
                            "the snapshot does not fit one frame; use paged subscribe or the events API",
                        ));
                    }
                }
                Err(err) => refused(err),
            }
        }
        ClientMsg::SubagentPolicy {
            session, policy, ..
        } => match ops::headless::set_policy(hub, &session, &policy) {
            Ok(policy) => {
                let extra = json!({"policy": policy.as_str()});
                send(
                    panel,
                    &protocol::accepted("subagent_policy", Some(&session), extra, request_id),
                );
            }
            Err(err) => refused(err),
        },
    }
}

/// `accepted` for a command that the worker will answer under `id`.
fn accepted_request(panel: &PanelConn, action: &str, session: &str, id: &str) {
    let extra = json!({"request_id": id});
    send(
        panel,
        &protocol::accepted(action, Some(session), extra, Some(id)),
    );
}

/// Runs a worker action off this socket's reader
/// (`ops::worker::act_off_reader`); the answer is queued from whichever
/// thread completes the action.
fn worker_action(
    hub: &Arc<Hub>,
    panel: &Arc<PanelConn>,
    session: String,
    action: protocol::WorkerAction,
    spec: Option<Value>,
    about: Answering,
) {
    let Some(action) = Action::parse(action.as_str()) else {
        return;
    };
    let (panel, sid) = (panel.clone(), session.clone());
    let done: ActionDone = Box::new(move |outcome| match outcome {
        Ok(result) if result.is_ok() => {
            let extra = json!({"result": result.to_json()});
            let reply = protocol::accepted(action.as_str(), Some(&sid), extra, None);
            send(&panel, &reply);
        }
        Ok(result) => {
            // As the Node hub: `action` and `result` at the top level
            // (beside `session`).
            let message = result.error().unwrap_or_else(|| "the action failed".into());
            let fields = vec![
                ("action", json!(action.as_str())),
                ("result", result.to_json()),
            ];
            send(
                &panel,
                &about.error(code::WORKER_ACTION_FAILED, &message, fields),
            );
        }
        Err(err) => refuse(&panel, &err, &about),
    });
    ops::worker::act_off_reader(hub, &session, action, spec, done);
}

/// Starts a subscription: legacy (one frame) or paged replay.
#[allow(clippy::too_many_arguments)] // the message's fields, and what a refusal names
fn subscribe(
    hub: &Arc<Hub>,
    panel: &Arc<PanelConn>,
    session: &str,
    since: u64,
    paged: bool,
    replace: bool,
    request_id: Option<String>,
    about: &Answering,
) {
    let generation = {
        let mut subs = panel.subs();
        let generation = subs.get(session).map_or(0, |s| s.generation + 1);
        subs.insert(
            session.to_string(),
            Subscription {
                live: false,
                cursor: since,
                generation,
                request_id: request_id.clone(),
            },
        );
        generation
    };
    if !paged {
        return legacy_subscribe(hub, panel, session, since, request_id, about);
    }
    replay_step(
        hub.clone(),
        panel.clone(),
        session.to_string(),
        generation,
        replace,
    );
}

fn legacy_subscribe(
    hub: &Hub,
    panel: &PanelConn,
    session: &str,
    since: u64,
    request_id: Option<String>,
    about: &Answering,
) {
    // Under the session lock: the entries after `since`, and the cursor
    // moves to the end so later live events continue from there (also when
    // `since` is beyond it: a stale cursor, such as one from before a hub
    // restart, never silences live events). Queued under the publish lock,
    // so a later event's fan-out comes after it.
    // Its writes happen after the publish lock is released.
    let _batch = crate::util::wakes::batch();
    let _ordered = hub.publisher.ordered();
    let built = hub.sessions.with(session, |s| {
        let entries = s.transcript().texts_since(since, usize::MAX);
        let latest = s.transcript().latest();
        let logs = logs_value(s);
        let frame = protocol::subscribed(
            session,
            &entries,
            logs,
            latest,
            &hub.epoch,
            plan::read_result(s.plan()),
            None,
            request_id.as_deref(),
            super::describe::locked(s),
        );
        let mut subs = panel.subs();
        if let Some(sub) = subs.get_mut(session) {
            sub.cursor = latest;
            sub.live = true;
        }
        frame
    });
    let Some(frame) = built else { return };
    if protocol::wire_cost(frame.len()) > protocol::FRAME_CEILING {
        panel.subs().remove(session);
        let refusal = about.error(
            code::DISPLAY_SNAPSHOT_TOO_LARGE,
            "the transcript does not fit one frame; subscribe with paged: true or a narrower since",
            Vec::new(),
        );
        send(panel, &refusal);
        return;
    }
    panel.send_text(&frame);
}

/// The session's log tail for `subscribed` ([`protocol::log_tail`]).
fn logs_value(s: &crate::session::Session) -> Value {
    let tail = crate::util::log_ring::panel_tail(
        s.logs(),
        protocol::MAX_LOG_LINES,
        protocol::LOG_TAIL_BYTES,
        protocol::LOG_LINE_PREVIEW,
    );
    protocol::log_tail(tail.lines, tail.meta, s.logs().dropped(), tail.omitted)
}

/// Sends the next replay page, then schedules the following one after the
/// page has been written. The final frame (empty, `replay_more: false`) is
/// built under the session lock together with switching to live delivery,
/// and queued under the publish lock that live fan-out holds, so no event
/// can slip between replay and live (an event pushed before the switch is
/// in the page; one pushed after it is fanned out after the frame).
fn replay_step(
    hub: Arc<Hub>,
    panel: Arc<PanelConn>,
    session: String,
    generation: u64,
    first: bool,
) {
    if panel.is_dead() {
        return;
    }
    // Its writes happen after the publish lock is released.
    let _batch = crate::util::wakes::batch();
    let ordered = hub.publisher.ordered();
    let step = hub.sessions.with(&session, |s| {
        let mut subs = panel.subs();
        let sub = subs
            .get_mut(&session)
            .filter(|sub| sub.generation == generation)?;
        // A cursor beyond the transcript (stale: from before a hub
        // restart) replays nothing and must not hold live events back.
        sub.cursor = sub.cursor.min(s.transcript().latest());
        let entries = s.transcript().texts_since(sub.cursor, REPLAY_BATCH);
        let request_id = sub.request_id.clone();
        if entries.is_empty() {
            sub.live = true;
            let frame = protocol::subscribed(
                &session,
                &[],
                logs_value(s),
                sub.cursor,
                &hub.epoch,
                plan::read_result(s.plan()),
                Some(Paging {
                    replay_more: false,
                    replay_reset: first,
                }),
                request_id.as_deref(),
                super::describe::locked(s),
            );
            return Some((frame, false));
        }
        let seqs: Vec<u64> = s
            .transcript()
            .since(sub.cursor, entries.len())
            .iter()
            .map(|e| e.hub_sequence)
            .collect();
        // Every page carries the description: Node clients replace theirs
        // with the one a `subscribed` frame brings.
        let description = super::describe::locked(s);
        let overhead = protocol::subscribed(
            &session,
            &[],
            Value::Null,
            u64::MAX,
            &hub.epoch,
            Value::Null,
            Some(Paging {
                replay_more: true,
                replay_reset: first,
            }),
            request_id.as_deref(),
            description.clone(),
        )
        .len();
        let lens: Vec<usize> = entries.iter().map(|e| e.len()).collect();
        let pages = protocol::plan_pages(&lens, overhead);
        let range = pages.first()?.clone();
        let last_seq = seqs[range.end - 1];
        let frame = protocol::subscribed(
            &session,
            &entries[range],
            Value::Null,
            last_seq,
            &hub.epoch,
            Value::Null,
            Some(Paging {
                replay_more: true,
                replay_reset: first,
            }),
            request_id.as_deref(),
            description,
        );
        sub.cursor = last_seq;
        Some((frame, true))
    });
    let Some(Some((frame, more))) = step else {
        return;
    };
    if protocol::wire_cost(frame.len()) > protocol::OUTBOUND_BUDGET {
        let about = Answering {
            session: Some(session.clone()),
            request: None,
        };
        let message = "a transcript entry exceeds the outbound budget";
        send(
            &panel,
            &about.error(code::DISPLAY_SNAPSHOT_TOO_LARGE, message, Vec::new()),
        );
        panel.subs().remove(&session);
        return;
    }
    let queued = panel.send_text(&frame);
    drop(ordered);
    if !queued || !more {
        return;
    }
    let next_panel = panel.clone();
    panel.after_writes(Box::new(move || {
        replay_step(hub, next_panel, session, generation, false);
    }));
}

/// Delivers a hub notification to the panels that should see it.
pub fn fan_out(hub: &Hub, registry: &Panels, note: &Note) {
    let panels = registry.snapshot();
    if panels.is_empty() {
        return;
    }
    match note {
        Note::Event {
            session,
            hub_seq,
            retained,
            json,
            ..
        } => {
            let frame = conn::encode_event(session, *hub_seq, json);
            let seq = retained.then_some(*hub_seq);
            for panel in panels.iter() {
                deliver_event(panel, session, seq, &frame);
            }
        }
        Note::ConfirmationOpened {
            session,
            confirmation_id,
        } => {
            // Described as it is now (the note may have been queued behind
            // a later change); one already retired is not announced again.
            let Some(current) = hub.prompt_view(session, confirmation_id) else {
                return broadcast_session(hub, &panels, session);
            };
            let frame = conn::encode(
                &protocol::confirmation(session, true, render::prompt(&current), None).to_string(),
            );
            for panel in panels.iter() {
                panel.send_frame(frame.clone());
            }
            broadcast_session(hub, &panels, session);
        }
        Note::ConfirmationClosed { closed } => {
            let session = &closed.session_id;
            let frame = conn::encode(
                &protocol::confirmation(
                    session,
                    false,
                    render::prompt(&closed.view()),
                    Some(closed.outcome()),
                )
                .to_string(),
            );
            for panel in panels.iter() {
                panel.send_frame(frame.clone());
            }
            broadcast_session(hub, &panels, session);
        }
        Note::Connection {
            session,
            connected,
            replaced,
        } => {
            let identity = hub
                .sessions
                .with(session, |s| render::identity(&s.identity_view()))
                .unwrap_or(Value::Null);
            let mut msg = protocol::connection(session, *connected, identity);
            // A superseding connection is a replacement, not a disconnect.
            msg["replaced"] = json!(replaced);
            let frame = conn::encode(&msg.to_string());
            to_subscribers(&panels, session, &frame);
            broadcast_session(hub, &panels, session);
        }
        Note::Process { session, process } => {
            let process = render::process(process.as_ref());
            let frame = conn::encode(&protocol::process(session, process).to_string());
            to_subscribers(&panels, session, &frame);
            broadcast_session(hub, &panels, session);
        }
        Note::Request { session, request } => {
            let frame =
                conn::encode(&protocol::request(session, render::request(request)).to_string());
            to_subscribers(&panels, session, &frame);
        }
        Note::Plan { session, plan } => {
            let frame = conn::encode(&protocol::plan(session, plan::read_result(plan)).to_string());
            to_subscribers(&panels, session, &frame);
        }
        // A decision changes only the session's description for panels;
        // the closing `confirmation` follows when the exchange closes.
        Note::SessionChanged { session } | Note::Decided { session, .. } => {
            broadcast_session(hub, &panels, session)
        }
        Note::SessionRemoved { session } => {
            let frame = conn::encode(&protocol::session_removed(session).to_string());
            for panel in panels.iter() {
                panel.subs().remove(session);
                panel.send_frame(frame.clone());
            }
        }
    }
}

/// Queues an event frame for `panel` if it is live on `session`: a
/// retained entry (`hub_seq` given) only when newer than its cursor, which
/// it advances; a transient reply always.
fn deliver_event(panel: &PanelConn, session: &str, hub_seq: Option<u64>, frame: &Encoded) {
    let send = {
        let mut subs = panel.subs();
        match subs.get_mut(session) {
            Some(sub) if sub.live => match hub_seq {
                Some(seq) if seq > sub.cursor => {
                    sub.cursor = seq;
                    true
                }
                Some(_) => false,
                None => true,
            },
            _ => false,
        }
    };
    if send {
        panel.send_frame(frame.clone());
    }
}

fn to_subscribers(panels: &[Arc<PanelConn>], session: &str, frame: &Encoded) {
    for panel in panels {
        if panel.subs().contains_key(session) {
            panel.send_frame(frame.clone());
        }
    }
}

fn broadcast_session(hub: &Hub, panels: &[Arc<PanelConn>], session: &str) {
    let Some(desc) = super::describe::one(hub, session) else {
        return;
    };
    let frame = conn::encode(&protocol::session(desc).to_string());
    for panel in panels {
        panel.send_frame(frame.clone());
    }
}
