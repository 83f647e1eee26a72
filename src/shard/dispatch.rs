//! Runs one Shard message: the envelope and the command are read by the
//! pure core (`wire`, `catalog`), a per-agent command is checked against
//! the connection's attachments, and each command calls `ops` and renders
//! the outcome as its `response`. Nothing here decides a refusal that an
//! `ops` function decides.
//!
//! A command that starts a worker (`agent.create`) runs off the reader
//! (`ops::agents::create_off_reader`), so the connection keeps being
//! served. A prompt's
//! and a compaction's `response` wait for the worker (`fanout` answers
//! them).
//!
//! A unix-socket connection that sends `direct.bind` becomes a direct
//! connection (`direct`): bound to one agent, attached to it as
//! interactive, it then takes per-agent commands only, each routed to that
//! agent, and what it is sent loses its `agent_id` (`conn::Framing`).

use std::sync::Arc;

use serde_json::{json, Value};

use super::agent::{self, Snapshot};
use super::attach::{Awaiting, Pending};
use super::conn::{ShardConn, Transport};
use super::track::Runtime;
use super::{render, Shard};
use crate::hub::Hub;
use crate::ops;
use crate::ops::agents::{self, CreateDone, Readiness};
use crate::ops::worker::{Action, ActionDone, MODES};
use crate::wire::shard::catalog::{self, Bind, Command, Decision, Role, Scope};
use crate::wire::shard::direct;
use crate::wire::shard::message::{self, Code, Incoming, Refusal};

type Outcome = Result<Option<Value>, Refusal>;

/// Handles one message's text (a WebSocket frame's or a JSONL line's); a
/// handler that panics is answered `INTERNAL_ERROR` and the connection
/// goes on.
pub fn handle_text(hub: &Arc<Hub>, shard: &Arc<Shard>, conn: &Arc<ShardConn>, text: &str) {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        handle(hub, shard, conn, text);
    }));
    if outcome.is_err() {
        log::error!("shard {}: handler failed on a message", conn.id);
        let refusal = Refusal::new(Code::InternalError, "the hub failed to process the message");
        conn.respond(None, "", Err(refusal));
    }
}

/// Handles one text message of connection `conn`.
pub fn handle(hub: &Arc<Hub>, shard: &Arc<Shard>, conn: &Arc<ShardConn>, text: &str) {
    let msg = match message::parse(text) {
        Ok(msg) => msg,
        Err(bad) => {
            let command = bad.kind.as_deref().unwrap_or("");
            return conn.respond(bad.id.as_deref(), command, Err(bad.refusal));
        }
    };
    let reply = |outcome: Outcome| conn.respond(msg.id.as_deref(), &msg.kind, outcome);
    if let Some(bound) = conn.direct() {
        let bound = bound.to_string();
        if let Err(refusal) = direct::route(&msg.kind, msg.agent_id.as_deref(), &bound) {
            return reply(Err(refusal));
        }
        let command = match catalog::parse(&msg) {
            Ok(command) => command,
            Err(refusal) => return reply(Err(refusal)),
        };
        let role = conn.state().attachment(&bound).map(|a| a.role);
        let Some(role) = role else {
            return reply(Err(Refusal::new(
                Code::NotFound,
                format!("agent {bound:?} is gone: its session was deleted"),
            )));
        };
        return per_agent(hub, shard, conn, &msg, &bound, role, command);
    }
    let command = match catalog::parse(&msg) {
        Ok(command) => command,
        Err(refusal) => return reply(Err(refusal)),
    };
    if let Command::DirectBind(bind) = command {
        return direct_bind(hub, shard, conn, &msg, bind);
    }
    if catalog::scope(&msg.kind) == Some(Scope::Agent) {
        let Some(agent) = msg.agent_id.clone() else {
            return reply(Err(Refusal::not_attached(None)));
        };
        let role = conn.state().attachment(&agent).map(|a| a.role);
        let role = match (role, &command) {
            (Some(role), _) => role,
            // A descendant's request delegated here may be answered here
            // (seed 004 §6.3).
            (None, Command::PermissionResponse { request_id, .. })
                if conn.state().answers_for(&agent, request_id) =>
            {
                Role::Interactive
            }
            (None, _) => return reply(Err(Refusal::not_attached(Some(&agent)))),
        };
        return per_agent(hub, shard, conn, &msg, &agent, role, command);
    }
    orchestrator(hub, shard, conn, &msg, command);
}

/// An observer watches; it neither drives the conversation nor answers.
fn observer_refused(what: &str) -> Refusal {
    Refusal::new(
        Code::PermissionDenied,
        format!("an observer attachment cannot {what}; attach as interactive"),
    )
}

fn per_agent(
    hub: &Arc<Hub>,
    shard: &Arc<Shard>,
    conn: &Arc<ShardConn>,
    msg: &Incoming,
    agent: &str,
    role: Role,
    command: Command,
) {
    let reply = |outcome: Outcome| conn.respond(msg.id.as_deref(), &msg.kind, outcome);
    let interactive = role == Role::Interactive;
    match command {
        Command::Prompt {
            message,
            images,
            follow_up,
        } => {
            if !interactive {
                return reply(Err(observer_refused("send prompts")));
            }
            let images: Vec<(String, String)> =
                images.into_iter().map(|i| (i.data, i.mime_type)).collect();
            let request_id = format!("shard-{}", uuid::Uuid::new_v4());
            let prompt = ops::worker::Prompt {
                request_id: &request_id,
                text: &message,
                images: &images,
                follow_up,
            };
            let awaiting = if follow_up {
                Awaiting::Queued
            } else {
                Awaiting::Prompt
            };
            if let Err(refusal) = restore(hub, agent) {
                return reply(Err(refusal));
            }
            wait_for_worker(conn, msg, agent, &request_id, awaiting, || {
                ops::worker::prompt(hub, agent, &prompt)
            });
        }
        Command::Abort => {
            if !interactive {
                return reply(Err(observer_refused("abort turns")));
            }
            reply(
                ops::worker::signal(hub, agent, "cancel", None)
                    .map(|()| None)
                    .map_err(Refusal::from),
            )
        }
        Command::ListModes => reply(ops::worker::modes(hub, agent).map_err(Refusal::from).map(
            |active| {
                let modes: Vec<Value> = MODES
                    .iter()
                    .map(|(name, description)| json!({"name": name, "description": description}))
                    .collect();
                Some(json!({"modes": modes, "active": active}))
            },
        )),
        Command::SetMode { mode } => {
            if !interactive {
                return reply(Err(observer_refused("change the mode")));
            }
            reply(
                ops::worker::set_mode(hub, agent, &mode)
                    .map(|c| Some(json!({"previous_mode": c.previous, "mode": c.mode})))
                    .map_err(Refusal::from),
            )
        }
        Command::ListModels => reply(ops::sessions::models(hub, agent).map_err(Refusal::from).map(
            |(profiles, active)| {
                let describe = |p: &ops::sessions::Profile| {
                    json!({"id": p.name, "provider": p.plugin, "model": p.model})
                };
                let models: Vec<Value> = profiles.iter().map(describe).collect();
                Some(json!({"models": models, "active": describe(&active)}))
            },
        )),
        Command::SessionCompact => {
            if !interactive {
                return reply(Err(observer_refused("compact the session")));
            }
            if let Err(refusal) = restore(hub, agent) {
                return reply(Err(refusal));
            }
            // Nothing to compact is a successful no-op (seed §9.2). A
            // worker that cannot tell is asked to compact all the same.
            if let Ok(0) = ops::worker::conversation_turns(hub, agent) {
                return reply(Ok(Some(
                    json!({"compacted": false, "reason": "no_safe_cut"}),
                )));
            }
            let request_id = format!("shard-{}", uuid::Uuid::new_v4());
            let awaiting = Awaiting::Compact { admitted: false };
            wait_for_worker(conn, msg, agent, &request_id, awaiting, || {
                ops::worker::compact(hub, agent, &request_id)
            });
        }
        Command::SessionList => reply(
            ops::sessions::read(hub, agent, |s| {
                crate::util::time::millis_from_rfc3339(s.created_at()).unwrap_or(0)
            })
            .map(|created| {
                Some(json!({"sessions": [{"session_id": agent, "created_at": created, "active": true}]}))
            })
            .map_err(Refusal::from),
        ),
        Command::PermissionResponse {
            request_id,
            decision,
            reason,
        } => {
            if !interactive {
                return reply(Err(observer_refused("answer permission requests")));
            }
            let decided = match decision {
                Decision::AllowAlways => ops::confirm::allow_always(
                    hub,
                    agent,
                    &request_id,
                    reason.as_deref(),
                    ops::confirm::Source::Shard,
                )
                .map(|_| ()),
                _ => ops::confirm::decide(
                    hub,
                    agent,
                    &request_id,
                    decision == Decision::Allow,
                    reason.as_deref(),
                    ops::confirm::Source::Shard,
                ),
            };
            match decided {
                Ok(()) => reply(Ok(Some(json!({"applied": true})))),
                // First response wins; a late one is discarded silently.
                Err(_) if shard.agent(agent, |t| t.knows(&request_id)) => {
                    reply(Ok(Some(json!({"applied": false}))))
                }
                Err(err) => reply(Err(err.into())),
            }
        }
        Command::UiResponse { .. } => reply(Err(Refusal::new(
            Code::NotFound,
            "no UI request is pending: the worker protocol has no UI dialogs",
        ))),
        Command::Unsupported { what, why } => reply(Err(Refusal::unsupported(what, why))),
        other => {
            log::error!("shard: {other:?} routed as a per-agent command");
            reply(Err(Refusal::new(Code::InternalError, "misrouted command")))
        }
    }
}

/// Sends a payload whose `response` waits for the worker: the wait is
/// recorded first (the worker may answer before `send` returns), and
/// dropped again when the send fails.
fn wait_for_worker(
    conn: &ShardConn,
    msg: &Incoming,
    agent: &str,
    request_id: &str,
    awaiting: Awaiting,
    send: impl FnOnce() -> Result<String, ops::OpError>,
) {
    let pending = Pending {
        agent: agent.to_string(),
        request_id: request_id.to_string(),
        id: msg.id.clone(),
        command: command_name(&msg.kind),
        awaiting,
    };
    if !conn.state().wait(pending) {
        let refusal = Refusal::new(
            Code::Conflict,
            "too many commands of this connection wait for their worker",
        );
        return conn.respond(msg.id.as_deref(), &msg.kind, Err(refusal));
    }
    match send() {
        Err(err) => {
            conn.state().forget(request_id);
            conn.respond(msg.id.as_deref(), &msg.kind, Err(err.into()));
        }
        Ok(sent) if awaiting == Awaiting::Queued => {
            let data = json!({"request_id": sent, "state": "queued"});
            conn.respond(msg.id.as_deref(), &msg.kind, Ok(Some(data)));
        }
        Ok(_) => {}
    }
}

/// The catalog's spelling of a waiting command's type.
fn command_name(kind: &str) -> &'static str {
    match kind {
        "prompt" => "prompt",
        _ => "session_op",
    }
}

fn orchestrator(
    hub: &Arc<Hub>,
    shard: &Arc<Shard>,
    conn: &Arc<ShardConn>,
    msg: &Incoming,
    command: Command,
) {
    let reply = |outcome: Outcome| conn.respond(msg.id.as_deref(), &msg.kind, outcome);
    match command {
        Command::AgentList => reply(Ok(Some(json!({"agents": infos(hub, shard, None)})))),
        Command::AgentStatus { agent_id } => {
            if let Some(id) = &agent_id {
                if let Err(err) = ops::exists(hub, id) {
                    return reply(Err(err.into()));
                }
            }
            reply(Ok(Some(
                json!({"agents": infos(hub, shard, agent_id.as_deref())}),
            )))
        }
        Command::AgentCreate(create) => {
            let (conn, id, command) = (conn.clone(), msg.id.clone(), msg.kind.clone());
            let shard = shard.clone();
            let done: CreateDone = Box::new(move |outcome| {
                let outcome = outcome
                    .map(|agent| {
                        shard.agent(&agent, |t| t.daemon = true);
                        Some(json!({"agent_id": agent}))
                    })
                    .map_err(Refusal::from);
                conn.respond(id.as_deref(), &command, outcome);
            });
            agents::create_off_reader(hub, create, done);
        }
        Command::AgentAttach { agent_id, role } => {
            attach(hub, shard, conn, msg, &agent_id, role, false)
        }
        Command::AgentDetach { agent_id } => {
            if !conn.state().detach(&agent_id) {
                return reply(Err(Refusal::not_attached(Some(&agent_id))));
            }
            shard.agent(&agent_id, |t| t.attached = t.attached.saturating_sub(1));
            reply(Ok(None))
        }
        Command::AgentTerminate { agent_id } => {
            let id = agent_id.clone();
            let done: ActionDone = Box::new(move |outcome| match outcome {
                Ok(result) if result.is_ok() => {}
                Ok(result) => log::warn!(
                    "session {id}: terminate: {}",
                    result.error().unwrap_or_default()
                ),
                Err(err) => log::warn!("session {id}: terminate: {err}"),
            });
            reply(
                ops::worker::terminate(hub, &agent_id, done)
                    .map(|deferred| Some(json!({"deferred": deferred})))
                    .map_err(Refusal::from),
            )
        }
        Command::AgentKill { agent_id, force } => {
            let action = if force {
                Action::ForceKill
            } else {
                Action::Stop
            };
            let (conn2, id, command) = (conn.clone(), msg.id.clone(), msg.kind.clone());
            let done: ActionDone = Box::new(move |outcome| {
                let outcome = match outcome {
                    Ok(result) if result.is_ok() => Ok(None),
                    Ok(result) => Err(Refusal::new(
                        Code::InternalError,
                        result.error().unwrap_or_else(|| "the stop failed".into()),
                    )
                    .with_data(json!({"result": result.to_json()}))),
                    Err(err) => Err(err.into()),
                };
                conn2.respond(id.as_deref(), &command, outcome);
            });
            ops::worker::act(hub, &agent_id, action, None, done);
        }
        Command::DaemonShutdown { force } => {
            if let Err(err) = ops::daemon::available(hub) {
                return reply(Err(err.into()));
            }
            reply(Ok(None));
            // Asked for once the response is written.
            let hub = hub.clone();
            conn.after_writes(Box::new(move || {
                if let Err(err) = ops::daemon::shutdown(&hub, force) {
                    log::warn!("shutdown requested by a client: {err}");
                }
            }));
        }
        Command::Unsupported { what, why } => reply(Err(Refusal::unsupported(what, why))),
        other => {
            log::error!("shard: {other:?} routed as an orchestrator command");
            reply(Err(Refusal::new(Code::InternalError, "misrouted command")))
        }
    }
}

/// Every agent's (or one agent's) `AgentInfo`.
fn infos(hub: &Hub, shard: &Shard, only: Option<&str>) -> Vec<Value> {
    let profiles = &hub.config.provider_profiles;
    let snaps: Vec<Snapshot> = match only {
        Some(id) => ops::sessions::read(hub, id, |s| Snapshot::of(s, profiles))
            .into_iter()
            .collect(),
        None => ops::sessions::read_all(hub, |s| Snapshot::of(s, profiles)),
    };
    snaps
        .iter()
        .map(|snap| {
            let now = shard.agent(&snap.agent_id, |t| t.derive(&snap.facts));
            agent::info(snap, &now)
        })
        .collect()
}

/// `direct.bind`: on the unix socket, before any attach or waiting
/// command; the agent named, or one made as `agent.create` makes it (here,
/// on the reader: nothing else of this connection is served meanwhile),
/// then the attach of a direct connection.
fn direct_bind(
    hub: &Arc<Hub>,
    shard: &Arc<Shard>,
    conn: &Arc<ShardConn>,
    msg: &Incoming,
    bind: Bind,
) {
    let reply = |outcome: Outcome| conn.respond(msg.id.as_deref(), &msg.kind, outcome);
    if conn.transport() != Transport::Socket {
        return reply(Err(Refusal::invalid(
            "direct.bind is offered on the unix socket only",
        )));
    }
    if !conn.state().is_idle() {
        return reply(Err(Refusal::new(
            Code::ProtocolError,
            "direct.bind must come before any attach or command that waits for a worker",
        )));
    }
    let agent = match bind {
        Bind::Agent(agent) => agent,
        Bind::Create(create) => match agents::create(hub, &create) {
            Ok(agent) => agent,
            Err(err) => return reply(Err(err.into())),
        },
    };
    match ops::agents::ready(hub, &agent) {
        Ok(Readiness::Ready) => {}
        Ok(Readiness::NotStartable) => {
            let runtime = ops::sessions::read(hub, &agent, |s| {
                Snapshot::of(s, &hub.config.provider_profiles).facts.runtime
            })
            .unwrap_or(Runtime::Stopped);
            return reply(Err(not_running(&agent, runtime)));
        }
        Err(err) => return reply(Err(err.into())),
    }
    attach(hub, shard, conn, msg, &agent, Role::Interactive, true);
}

/// Brings the agent's runtime up before new work or an attach (seed 004
/// §6.4), on this connection's reader: a stopped runtime the hub launched
/// before is started, one starting is waited for. One the hub may not
/// start (a worker started by hand, a headless child's) is left as it is.
fn restore(hub: &Arc<Hub>, agent: &str) -> Result<(), Refusal> {
    ops::agents::ready(hub, agent)
        .map(|_| ())
        .map_err(Refusal::from)
}

/// A direct connection needs a worker that starts or runs.
fn not_running(agent: &str, runtime: Runtime) -> Refusal {
    Refusal::new(
        Code::Conflict,
        format!(
            "agent {agent:?} has no running worker (runtime {}): start it first \
             (the panel, the JSON API, or create a new agent)",
            runtime.as_str()
        ),
    )
}

/// `agent.attach`: the `response`, then the `sync` (status, mode,
/// capabilities, the live window, every pending request), then (for an
/// interactive attachment) each pending request shown again; only then is
/// the attachment live. Built and queued under the publish lock, with the
/// cursor at the transcript's end, so no event is missed or delivered
/// twice: one retained before the attach is in the window, one after it
/// is fanned out after the `sync`.
///
/// `direct` (a `direct.bind`): the agent's worker must be starting or
/// running (its end ends the connection); the connection is bound before
/// the response, and a direct `hello` comes before the `sync`, which has
/// no `runtime_epoch`.
fn attach(
    hub: &Arc<Hub>,
    shard: &Arc<Shard>,
    conn: &Arc<ShardConn>,
    msg: &Incoming,
    agent: &str,
    role: Role,
    direct: bool,
) {
    let reply = |outcome: Outcome| conn.respond(msg.id.as_deref(), &msg.kind, outcome);
    if !direct {
        if let Err(refusal) = restore(hub, agent) {
            return reply(Err(refusal));
        }
    }
    let watch = match ops::sessions::watch_scope(hub, agent) {
        Ok(watch) => watch,
        Err(err) => return reply(Err(err.into())),
    };
    // Its writes happen after the publish lock is released.
    let _batch = crate::util::wakes::batch();
    let _ordered = hub.publisher.ordered();
    let look = match super::sync::look(hub, agent, watch) {
        Ok(look) => look,
        Err(err) => return reply(Err(err.into())),
    };
    if direct
        && !matches!(
            look.snap.facts.runtime,
            Runtime::Starting | Runtime::Running
        )
    {
        return reply(Err(not_running(agent, look.snap.facts.runtime)));
    }
    let ids: Vec<String> = look
        .prompts
        .iter()
        .map(|p| p.confirmation_id.clone())
        .collect();
    shard.agent(agent, |t| t.daemon = true);
    let (now, mut requests) = look.show(shard, agent);
    let super::sync::Look {
        snap,
        live_window,
        latest,
        grants,
        ..
    } = look;
    // Every attachment sees the pending requests (seed 004 §6.3; an
    // observer cannot answer them).
    let ready = snap.facts.connected && !snap.worker_capabilities.is_empty();
    if conn.state().attach(agent, role, watch, latest, ids, ready) {
        shard.agent(agent, |t| t.attached += 1);
    }
    // An interactive attachment is where its descendants' requests go when
    // they have no responder of their own: those pending now are listed
    // and shown too, each with its child's id.
    if role == Role::Interactive {
        for (child, prompt) in super::delegate::pending_for(hub, shard, agent) {
            let id = prompt.confirmation_id.as_str();
            shard.agent(&child, |t| {
                t.open_request(id, render::asked(&child, &prompt));
            });
            if conn.state().delegate(agent, &child, id) {
                requests.push(render::permission_request(&child, &prompt));
            }
        }
    }
    let mut data = json!({
        "status": now.status.as_str(),
        "info": agent::info(&snap, &now),
    });
    let mut sync = render::sync(&snap, &now, live_window, requests.clone(), &grants);
    if direct {
        conn.bind_direct(agent);
        data["agent_id"] = json!(agent);
        if let Some(sync) = sync.as_object_mut() {
            sync.shift_remove("runtime_epoch");
        }
    }
    reply(Ok(Some(data)));
    if direct {
        conn.send(&message::hello(
            &message::server_version(),
            direct::CAPABILITIES,
        ));
    }
    conn.send(&sync);
    for request in &requests {
        conn.send(request);
    }
}
