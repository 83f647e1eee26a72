//! Hub notifications as Shard events: the Shard front-end is a publisher
//! subscriber (`hub::Subscriber`) beside the panels. It runs under the
//! hub's publish lock on the thread that made the change, reads what it
//! needs through `ops`, renders each event once, encodes it once and
//! queues the same bytes to every recipient (a connection past its budget
//! is terminated, never waited for).
//!
//! - a worker envelope: the agent's state (`track`) takes it in; while the
//!   agent has attachments its Shard events (`translate`) go to each
//!   attachment that has not had it (the cursor); a compaction's end
//!   answers the `session_op` that waited for it; a status change follows.
//! - a request outcome answers the prompt (or compaction) that waited.
//! - a confirmation that can be decided is a `permission_request` to every
//!   interactive attachment; its decision (`Decided`, any front-end's) or
//!   its retirement unanswered (a `deny`, its reason as the source) is one
//!   `permission_resolved` to every attachment.
//! - a session created, changed or its process or connection changed:
//!   `agent_spawned`, `mode_changed`, and on a status change `status` (to
//!   attachments), `agent_status_changed` and the sanitized
//!   `agent_activity` (to every connection), `agent_exited` for a runtime
//!   that failed.
//!
//! A direct connection (`direct`) hears only its agent's events, never an
//! orchestrator broadcast; when its agent's worker has exited (the runtime
//! stopped or failed) or its session is deleted, it gets one last fatal
//! `error` naming why (`end_reason`) and is closed once that is written.
//! Not while the hub shuts down: then it ends with the hub.
//!
//! Each event is serialized once (`conn::Frame`) and encoded once per
//! framing in use (WebSocket, JSONL, JSONL without `agent_id`).

use std::sync::Arc;

use serde_json::{json, Value};

use super::agent::Snapshot;
use super::attach::{Awaiting, Pending, Settled};
use super::conn::{encode, Frame, ShardConn};
use super::render::Resolution;
use super::track::Runtime;
use super::{delegate, render, Shard};
use crate::hub::{Hub, Subscriber};
use crate::ops;
use crate::session::Note;
use crate::session::{ClosedPrompt, PromptState, RequestRecord, PROMPT_PREVIEW_BYTES};
use crate::util::time;
use crate::wire::shard::direct::{self, End};
use crate::wire::shard::message::{self, Code, Refusal};
use crate::wire::shard::translate;

impl Subscriber for Shard {
    fn publish(&self, hub: &Hub, note: &Note) {
        fan_out(hub, self, note);
    }
}

/// Worker events that can change an agent's status.
const STATUS_EVENTS: &[&str] = &[
    "input_admitted",
    "run_started",
    "tool_calls",
    "tool_results",
    "run_finished",
    "status",
    "ready",
];

fn fan_out(hub: &Hub, shard: &Shard, note: &Note) {
    match note {
        Note::Event {
            session,
            hub_seq,
            retained,
            json,
            event: name,
        } => {
            let name = json.get(name.clone()).unwrap_or("");
            event(hub, shard, session, *hub_seq, *retained, json, name)
        }
        Note::Request { session, request } => request_settled(shard, session, request),
        Note::ConfirmationOpened {
            session,
            confirmation_id,
        } => {
            opened(hub, shard, session, confirmation_id);
            changed(hub, shard, session);
        }
        Note::ConfirmationClosed { closed } => {
            retired(shard, closed);
            changed(hub, shard, &closed.session_id);
        }
        Note::Decided {
            session,
            confirmation_id,
            approved,
            source,
            always,
        } => {
            let decision = match (*approved, *always) {
                (true, true) => Resolution::AllowAlways,
                (true, false) => Resolution::Allow,
                (false, _) => Resolution::Deny,
            };
            let resolved = render::permission_resolved(session, confirmation_id, decision, source);
            match shard.agent(session, |t| t.resolve_request(confirmation_id, *approved)) {
                Some(run) => {
                    to_attached_and_delegates(shard, session, confirmation_id, &resolved);
                    // Allowed, the call is about to run (seed 004 §9.4).
                    if let Some(call) = run {
                        to_attached_text(shard, session, call);
                    }
                }
                // Allowed by a grant on arrival (never shown open): the
                // attachments are told which rule answered.
                None if *source == "grant" => to_attached(shard, session, &resolved),
                None => {}
            }
            changed(hub, shard, session);
        }
        Note::Connection {
            session, connected, ..
        } => {
            if !connected {
                orphaned(shard, session);
                lost_turn(shard, session);
                for conn in shard.snapshot().iter() {
                    conn.state().unready(session);
                }
            }
            changed(hub, shard, session);
        }
        Note::SessionChanged { session } | Note::Process { session, .. } => {
            changed(hub, shard, session)
        }
        Note::SessionRemoved { session } => removed(shard, session),
        Note::Plan { .. } => {}
    }
}

/// One worker envelope of agent `agent`, whose event is `name`.
fn event(
    hub: &Hub,
    shard: &Shard,
    agent: &str,
    seq: u64,
    retained: bool,
    json: &Arc<str>,
    name: &str,
) {
    if matches!(name, "tool_calls" | "tool_results") && !shard.has_clients() {
        // Nobody to tell (so nobody attached either): the agent's state
        // reads it when it is next looked at.
        shard.defer_entry(agent, json);
        return;
    }
    let attached = shard.attached(agent);
    let status = STATUS_EVENTS.contains(&name);
    if !attached && !status {
        return;
    }
    // Nobody attached: the agent's status takes the event in, and only
    // what it reads of it is read.
    let read = if attached {
        None
    } else {
        translate::parse_status(name, json)
    };
    let Some(entry) = read.or_else(|| translate::parse(name, json)) else {
        return;
    };
    let translate = attached && retained;
    let events = shard.agent(agent, |t| t.observe(agent, name, &entry, translate));
    if !events.is_empty() {
        let frames: Vec<Frame> = events.into_iter().map(Frame::from_text).collect();
        for conn in shard.snapshot().iter() {
            if conn.state().take_event(agent, Some(seq)) {
                for frame in &frames {
                    conn.send_frame(frame);
                }
            }
        }
    }
    if attached && name == "ready" {
        resync(hub, shard, agent);
    }
    if attached && matches!(name, "compact_finished" | "run_finished") {
        if let translate::Parsed::Other(entry) = &entry {
            compaction_ended(shard, agent, name, entry);
        }
    }
    if status {
        event_changed(hub, shard, agent);
    }
}

/// A worker event may have changed the status: derived from the facts
/// last read (an event changes none of them), the session read only when
/// none were.
fn event_changed(hub: &Hub, shard: &Shard, agent: &str) {
    let mut to_attachments = None;
    let mut activity = None;
    // With no client connected the change is recorded, not rendered.
    let listening = shard.has_clients();
    let cached = shard.agent(agent, |t| {
        let facts = t.facts?;
        let before = t.last().cloned();
        let now = t.derive(&facts);
        if t.announce(&now, time::now_millis()) && listening {
            if before.is_none_or(|b| b.status != now.status || b.runtime != now.runtime) {
                to_attachments = Some((
                    render::status(agent, &now),
                    render::status_changed(agent, &now),
                ));
            }
            activity = Some(render::activity(agent, &now, time::now_millis()));
        }
        Some(())
    });
    if cached.is_none() {
        return changed(hub, shard, agent);
    }
    if let Some((status, status_changed)) = to_attachments {
        to_attached(shard, agent, &status);
        broadcast(shard, &status_changed);
    }
    if let Some(activity) = activity {
        broadcast(shard, &activity);
    }
}

/// A runtime became ready (its worker's `ready`): every attachment whose
/// last `sync` was not a ready runtime's (it attached before the worker
/// told its capabilities, or the runtime restarted since) gets a fresh one
/// (seed 004 §6.4: `sync` is authoritative). A direct connection never
/// sees a new runtime (its worker's end ends it).
fn resync(hub: &Hub, shard: &Shard, agent: &str) {
    let due: Vec<Arc<ShardConn>> = shard
        .snapshot()
        .iter()
        .filter(|c| c.direct().is_none() && c.state().resync_due(agent))
        .cloned()
        .collect();
    if due.is_empty() {
        return;
    }
    let Ok(watch) = ops::sessions::watch_scope(hub, agent) else {
        return;
    };
    let Ok(look) = super::sync::look(hub, agent, watch) else {
        return;
    };
    let (now, requests) = look.show(shard, agent);
    let frame = encode(&render::sync(
        &look.snap,
        &now,
        look.live_window,
        requests,
        &look.grants,
    ));
    for conn in &due {
        conn.send_frame(&frame);
    }
}

/// A compaction that waited for its run's end is answered.
fn compaction_ended(shard: &Shard, agent: &str, name: &str, entry: &Value) {
    let request_id = entry["request_id"].as_str().unwrap_or("");
    let data = &entry["data"];
    for conn in shard.snapshot().iter() {
        let Some(pending) = conn.state().finish(agent, request_id) else {
            continue;
        };
        let outcome = if name == "compact_finished" {
            let mut out = json!({"compacted": true, "index": data["revision"]});
            for key in ["removed_turns", "summary"] {
                if let Some(value) = data.get(key) {
                    out[key] = value.clone();
                }
            }
            Ok(Some(out))
        } else {
            let status = data["status"].as_str().unwrap_or("");
            match status {
                "completed" => Ok(Some(
                    json!({"compacted": false, "reason": "the worker finished without compacting"}),
                )),
                _ => Err(Refusal::new(
                    Code::InternalError,
                    format!(
                        "the compaction ended {status}: {}",
                        data["error"].as_str().unwrap_or("")
                    ),
                )
                .with_data(json!({"status": status}))),
            }
        };
        answer(conn, &pending, outcome);
    }
}

/// The worker admitted or rejected a payload, or its connection closed
/// first (`unknown`).
fn request_settled(shard: &Shard, agent: &str, request: &RequestRecord) {
    let request_id = request.request_id.as_str();
    let Some(how) = Settled::of(request.state) else {
        return;
    };
    for conn in shard.snapshot().iter() {
        let Some(pending) = conn.state().settle(agent, request_id, how) else {
            continue;
        };
        let data = json!({"request_id": request_id, "state": request.state.as_str()});
        let outcome = match how {
            Settled::Admitted => Ok(Some(data)),
            Settled::Rejected => {
                let rejection = request.detail.clone().unwrap_or(Value::Null);
                let code = if rejection["code"] == "payload_queue_full"
                    || matches!(pending.awaiting, Awaiting::Compact { .. })
                {
                    Code::Conflict
                } else {
                    Code::InvalidRequest
                };
                let message = request.detail_text().to_string();
                let mut data = data;
                data["rejection"] = rejection;
                Err(Refusal::new(code, message).with_data(data))
            }
            Settled::Unknown => Err(Refusal::new(
                Code::InternalError,
                "the worker's connection closed before it admitted or rejected this; \
                 it may or may not run",
            )
            .with_data(data)),
        };
        if pending.awaiting == Awaiting::Queued {
            // Answered when it was sent: a rejection or an unknown outcome
            // is an error event of the agent (not fatal), naming the prompt.
            if let Err(refusal) = outcome {
                let mut event = message::error_event(agent, refusal.code, &refusal.message, false);
                event["request_id"] = json!(request_id);
                event["state"] = json!(request.state.as_str());
                conn.send(&event);
            }
            continue;
        }
        answer(conn, &pending, outcome);
    }
}

/// The worker's connection closed: no admitted compaction will report
/// its end.
fn orphaned(shard: &Shard, agent: &str) {
    for conn in shard.snapshot().iter() {
        let gone = conn.state().orphaned(agent);
        for pending in gone {
            let refusal = Refusal::new(
                Code::InternalError,
                "the worker's connection closed before the compaction finished",
            );
            answer(conn, &pending, Err(refusal));
        }
    }
}

/// The worker's connection closed in the middle of a turn (it crashed or
/// was killed): the turn ends, after a fatal `error` saying so (seed 004
/// §9.4: the runtime cannot continue; new work or an attach restores it).
fn lost_turn(shard: &Shard, agent: &str) {
    let Some(turn) = shard.agent(agent, |t| t.lost()) else {
        return;
    };
    let error = message::error_event(
        agent,
        Code::InternalError,
        "the worker's connection closed during the turn (its runtime ended); \
         new work or an attach starts it again",
        true,
    );
    to_attached(shard, agent, &error);
    to_attached(
        shard,
        agent,
        &json!({"type": "turn_end", "agent_id": agent, "turn_id": turn}),
    );
}

fn answer(conn: &ShardConn, pending: &Pending, outcome: Result<Option<Value>, Refusal>) {
    conn.respond(pending.id.as_deref(), pending.command, outcome);
}

/// A confirmation was opened, or became decidable: shown once.
fn opened(hub: &Hub, shard: &Shard, agent: &str, id: &str) {
    let described = ops::sessions::read(hub, agent, |s| {
        // Decided already (a panel answered before this note reached
        // Shard): shown all the same, its `Decided` note follows.
        s.prompt(id)
            .filter(|p| p.state != PromptState::AwaitingIdentity)
            .map(|p| s.prompt_view(p, PROMPT_PREVIEW_BYTES))
    });
    let Ok(Some(prompt)) = described else {
        return;
    };
    if !shard.agent(agent, |t| t.open_request(id, render::asked(agent, &prompt))) {
        return;
    }
    let frame = encode(&render::permission_request(agent, &prompt));
    for conn in shard.snapshot().iter() {
        if conn.state().show_request(agent, id) {
            conn.send_frame(&frame);
        }
    }
    // A child nobody answers for itself: its nearest interactive
    // ancestor's clients (seed 004 §6.3).
    if prompt.parent_session_id.is_some() {
        if let Some(ancestor) = delegate::target(hub, shard, agent) {
            delegate::show(shard, &ancestor, agent, id, &frame);
        }
    }
}

/// A confirmation's exchange ended. Unanswered, it resolves as `deny`
/// with why it ended (`deadline`, `disconnected`, `shutdown`,
/// `protocol-error`) as the source. An answered one is resolved by its
/// `Decided` note, which may come after this one: the decider writes the
/// answer before it announces it, and the worker may close the exchange in
/// between.
fn retired(shard: &Shard, closed: &ClosedPrompt) {
    if closed.decision().is_some() {
        return;
    }
    let (agent, id) = (closed.session_id.as_str(), closed.confirmation_id());
    if shard
        .agent(agent, |t| t.resolve_request(id, false))
        .is_none()
    {
        return;
    }
    let source = closed.end.phase();
    to_attached_and_delegates(
        shard,
        agent,
        id,
        &render::permission_resolved(agent, id, Resolution::Deny, source),
    );
}

/// The session's state may have changed: a new agent, a mode change, a
/// status change.
fn changed(hub: &Hub, shard: &Shard, agent: &str) {
    let profiles = &hub.config.provider_profiles;
    let Ok(snap) = ops::sessions::read(hub, agent, |s| Snapshot::of(s, profiles)) else {
        return;
    };
    let mut to_all: Vec<Value> = Vec::new();
    let mut to_attachments: Vec<Value> = Vec::new();
    shard.agent(agent, |t| {
        t.facts = Some(snap.facts);
        let now = t.derive(&snap.facts);
        let before = t.last().cloned();
        if !t.known {
            t.known = true;
            to_all.push(render::spawned(&snap, &now));
            t.mode = Some(snap.mode.clone());
            t.announce(&now, time::now_millis());
            return;
        }
        let previous_mode = t.mode.replace(snap.mode.clone());
        if let Some(previous) = previous_mode.filter(|m| *m != snap.mode) {
            to_attachments.push(render::mode_changed(agent, &previous, &snap.mode));
        }
        if !t.announce(&now, time::now_millis()) {
            return;
        }
        // `status` and `agent_status_changed` when the status or the
        // runtime changed; the overview also when only the phase did.
        let status_changed = before
            .as_ref()
            .is_none_or(|b| b.status != now.status || b.runtime != now.runtime);
        if status_changed {
            to_attachments.push(render::status(agent, &now));
            to_all.push(render::status_changed(agent, &now));
        }
        to_all.push(render::activity(agent, &now, time::now_millis()));
        let failed = super::track::Runtime::Failed;
        if now.runtime == failed && before.is_none_or(|b| b.runtime != failed) {
            to_all.push(render::exited(&snap));
        }
    });
    for event in &to_attachments {
        to_attached(shard, agent, event);
    }
    for event in &to_all {
        broadcast(shard, event);
    }
    // A direct connection is bound only while the worker starts or runs,
    // so a runtime seen over now is one that exited since.
    let runtime = snap.facts.runtime;
    if matches!(runtime, Runtime::Stopped | Runtime::Failed) && !shard.is_stopping() {
        let code = snap.exit.as_ref().and_then(|e| e.code).map(i64::from);
        let end = direct::end_event(agent, End::WorkerExited, Some(runtime.as_str()), code);
        end_direct(shard, agent, &end);
    }
}

/// Ends the direct connections bound to `agent` with `last` (once each:
/// the attachment goes with the first).
fn end_direct(shard: &Shard, agent: &str, last: &Value) {
    let conns = shard.snapshot();
    let mut frame = None;
    for conn in conns.iter().filter(|c| c.direct() == Some(agent)) {
        if !conn.state().detach(agent) {
            continue;
        }
        shard.agent(agent, |t| t.attached = t.attached.saturating_sub(1));
        conn.send_frame(frame.get_or_insert_with(|| encode(last)));
        conn.end_after_writes();
    }
}

/// A deleted agent: its attachments end with a fatal `error`; a direct
/// connection bound to it ends.
fn removed(shard: &Shard, agent: &str) {
    end_direct(
        shard,
        agent,
        &direct::end_event(agent, End::AgentDeleted, None, None),
    );
    shard.forget(agent);
    let error = message::error_event(
        agent,
        Code::NotFound,
        "the agent's session was deleted",
        true,
    );
    let frame = encode(&error);
    for conn in shard.snapshot().iter() {
        if conn.state().detach(agent) {
            conn.send_frame(&frame);
        }
    }
}

/// To every connection attached to `agent`.
fn to_attached(shard: &Shard, agent: &str, event: &Value) {
    to_attached_text(shard, agent, event.to_string());
}

/// A request's resolution, to every connection attached to `agent` and
/// every one it was delegated to.
fn to_attached_and_delegates(shard: &Shard, agent: &str, request_id: &str, event: &Value) {
    let frame = encode(event);
    for conn in shard.snapshot().iter() {
        let mut state = conn.state();
        let delegated = state.undelegate(agent, request_id);
        if state.attached(agent) || delegated {
            drop(state);
            conn.send_frame(&frame);
        }
    }
}

/// An event already rendered as JSON text, to every connection attached
/// to `agent`.
fn to_attached_text(shard: &Shard, agent: &str, event: String) {
    let frame = Frame::from_text(event);
    for conn in shard.snapshot().iter() {
        if conn.state().attached(agent) {
            conn.send_frame(&frame);
        }
    }
}

/// To every daemon connection (a direct one carries no orchestrator
/// event).
fn broadcast(shard: &Shard, event: &Value) {
    let conns = shard.snapshot();
    let mut frame = None;
    for conn in conns.iter().filter(|c| c.direct().is_none()) {
        conn.send_frame(frame.get_or_insert_with(|| encode(event)));
    }
}
