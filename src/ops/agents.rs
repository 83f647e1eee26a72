//! Agents as a program asks for them (Shard's `agent.create`, and
//! `direct.bind` with a new agent): a session whose workspace and
//! provider profile come from the request, its confirmation mode, and its
//! worker started, in one command.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::worker::{self, Action, MODES};
use super::{sessions, ErrorKind, OpError};
use crate::hub::Hub;
use crate::session::PromptState;
use crate::wire::shard::catalog::Create;

/// What [`create_off_reader`] hands its outcome to: the new agent's id.
pub type CreateDone = Box<dyn FnOnce(Result<String, OpError>) + Send>;

/// Makes the agent and starts its worker; returns its id once the start
/// has succeeded. The spec's `provider` is `provider` (or `model`, when
/// it names a profile; otherwise `model` overrides the profile's model).
/// A `cwd` that is not a directory is refused before anything is made. A
/// start that fails keeps the session (it can be started again) and is
/// `start_failed` with the agent's id in the details. Blocks while the
/// worker starts: a socket reader calls [`create_off_reader`].
pub fn create(hub: &Arc<Hub>, agent: &Create) -> Result<String, OpError> {
    if let Some(existing) = &agent.session_id {
        super::exists(hub, existing)?;
        return Err(OpError::new(
            ErrorKind::InvalidArguments,
            format!("session {existing:?} is already an agent: attach to it"),
        ));
    }
    // The worker is started in this directory: one that is not there
    // would only fail the start after the session exists.
    if !std::path::Path::new(&agent.cwd).is_dir() {
        return Err(OpError::new(
            ErrorKind::InvalidArguments,
            format!("cwd {:?} is not a directory on the hub's host", agent.cwd),
        ));
    }
    let spec = spec_of(hub, agent)?;
    if let Some(mode) = &agent.mode {
        if !MODES.iter().any(|(name, _)| name == mode) {
            return Err(OpError::new(
                ErrorKind::UnknownChoice,
                format!("unknown mode {mode:?} (ask, approve or deny)"),
            ));
        }
    }
    let id = match &agent.name {
        Some(name) => name.clone(),
        None => format!("agent-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
    };
    sessions::create(hub, &id, Some(&spec))?;
    if let Some(mode) = &agent.mode {
        worker::set_mode(hub, &id, mode)?;
    }
    match start(hub, &id) {
        Ok(()) => Ok(id),
        Err(err) if matches!(err.kind, ErrorKind::SessionBusy | ErrorKind::StartFailed) => {
            Err(OpError::new(ErrorKind::StartFailed, err.message).with("agent_id", json!(id)))
        }
        Err(err) => Err(err),
    }
}

/// [`create`] off the caller's socket reader ([`super::off_reader`]):
/// `done` gets the outcome on the command's own thread, or an
/// `internal_error` on this one when no thread can be started.
pub fn create_off_reader(hub: &Arc<Hub>, agent: Create, done: CreateDone) {
    let input = (hub.clone(), agent, done);
    let started = super::off_reader::run("agent-create", "command", input, |(hub, agent, done)| {
        done(create(&hub, &agent))
    });
    if let Err((refusal, (_, _, done))) = started {
        done(Err(refusal));
    }
}

/// How long [`ready`] waits for a runtime to start and name itself.
pub const READY_WAIT: Duration = Duration::from_secs(30);

/// What [`ready`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// The worker is connected and has named itself.
    Ready,
    /// No worker, and none the hub may start: a headless child (its
    /// family starts it). The caller goes on as without a runtime.
    NotStartable,
}

/// Brings agent `agent`'s runtime up (seed 004 §6.4: attach and new work
/// restore a stopped runtime, and coalesce its startup). Returns once its
/// worker is connected and has named itself. A runtime that is not
/// running now (never started, stopped, terminated, crashed, failed, or
/// ended with the hub's last run) is started with the configured launcher,
/// as the panel's start would; a start under way (another client's, or
/// the panel's) is waited for, so concurrent calls start it once. A start that fails, a
/// worker that exits before it connects, or one that does not connect
/// within [`READY_WAIT`] is `start_failed` naming the agent, which stays
/// (its identity is kept for a retry). Blocks: called on a connection's
/// own reader, which serves nothing else of it meanwhile.
pub fn ready(hub: &Arc<Hub>, agent: &str) -> Result<Readiness, OpError> {
    let end = Instant::now() + READY_WAIT;
    let failed = |message: String| {
        OpError::new(ErrorKind::StartFailed, message).with("agent_id", json!(agent))
    };
    let mut started = false;
    loop {
        let (connected, live, process, child, error) = sessions::read(hub, agent, |s| {
            let process = s.process();
            (
                s.connected(),
                s.identity() == crate::session::IdentityState::Live,
                process.map(|p| p.state),
                s.is_headless(),
                process.and_then(|p| p.error.clone()),
            )
        })?;
        if connected && live {
            return Ok(Readiness::Ready);
        }
        match process {
            Some(state) if state.is_active() => {}
            _ if connected => {}
            _ if child => return Ok(Readiness::NotStartable),
            _ if started => {
                return Err(failed(error.unwrap_or_else(|| {
                    format!("agent {agent:?}'s worker exited before it connected")
                })))
            }
            _ => {
                started = true;
                match start(hub, agent) {
                    Ok(()) => {}
                    // Starting already (another client's start): waited for.
                    Err(err) if err.kind == ErrorKind::SessionBusy => {}
                    Err(err) => return Err(failed(err.message)),
                }
            }
        }
        if Instant::now() >= end {
            return Err(failed(format!(
                "agent {agent:?}'s worker did not connect within {} s",
                READY_WAIT.as_secs()
            )));
        }
        #[expect(
            clippy::disallowed_methods,
            reason = "the worker's connection is seen only in the session record, which has \
                      no change signal: looked at every 20 ms, at most READY_WAIT"
        )]
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops agent `id`'s worker gracefully if it is inactive (seed 004 §6.4's
/// reaping of idle runtimes): connected, no run active, no payload waiting
/// for its admission, no confirmation open. True when a stop began; the
/// agent stays and [`ready`] starts it again.
pub fn reap(hub: &Arc<Hub>, id: &str) -> bool {
    let inactive = sessions::read(hub, id, |s| {
        s.connected()
            && s.active_run().is_none()
            && !s
                .requests()
                .any(|r| r.state == crate::session::RequestState::Sent)
            && !s.prompts().iter().any(|p| {
                matches!(
                    p.state,
                    PromptState::AwaitingIdentity | PromptState::AwaitingDecision
                )
            })
    });
    if inactive != Ok(true) {
        return false;
    }
    worker::act(hub, id, Action::Stop, None, Box::new(|_| {}));
    true
}

/// Starts agent `id`'s worker and waits for the start's outcome.
fn start(hub: &Arc<Hub>, id: &str) -> Result<(), OpError> {
    let (tx, rx) = std::sync::mpsc::channel();
    worker::act(
        hub,
        id,
        Action::Start,
        None,
        Box::new(move |outcome| {
            let _ = tx.send(outcome);
        }),
    );
    match rx.recv() {
        Ok(Ok(result)) if result.is_ok() => Ok(()),
        Ok(Ok(result)) => Err(OpError::new(
            ErrorKind::StartFailed,
            result
                .error()
                .unwrap_or_else(|| "the worker did not start".into()),
        )),
        Ok(Err(err)) => Err(err),
        Err(_) => Err(OpError::new(
            ErrorKind::StartFailed,
            "the worker start gave no answer",
        )),
    }
}

/// The new session's spec: its workspace and provider profile.
fn spec_of(hub: &Hub, agent: &Create) -> Result<Value, OpError> {
    let profiles = &hub.config.provider_profiles;
    let mut spec = json!({"workspace": agent.cwd});
    let model_is_profile = agent
        .model
        .as_ref()
        .is_some_and(|m| profiles.contains_key(m));
    match (&agent.provider, &agent.model) {
        (Some(provider), Some(model)) if model_is_profile && model != provider => {
            return Err(OpError::new(
                ErrorKind::InvalidArguments,
                format!("model {model:?} names another profile than provider {provider:?}"),
            ))
        }
        (_, Some(model)) if model_is_profile => spec["provider"] = json!(model),
        (provider, model) => {
            if let Some(provider) = provider {
                spec["provider"] = json!(provider);
            }
            if let Some(model) = model {
                spec["model"] = json!(model);
            }
        }
    }
    Ok(spec)
}
