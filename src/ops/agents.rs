//! Agents as a program asks for them (Shard's `agent.create`, and
//! `direct.bind` with a new agent): a session whose workspace and
//! provider profile come from the request, its confirmation mode, and its
//! worker started, in one command.

use std::sync::Arc;

use serde_json::{json, Value};

use super::worker::{self, Action, MODES};
use super::{sessions, ErrorKind, OpError};
use crate::hub::Hub;
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
    let (tx, rx) = std::sync::mpsc::channel();
    worker::act(
        hub,
        &id,
        Action::Start,
        None,
        Box::new(move |outcome| {
            let _ = tx.send(outcome);
        }),
    );
    let failed =
        |message: String| OpError::new(ErrorKind::StartFailed, message).with("agent_id", json!(id));
    match rx.recv() {
        Ok(Ok(result)) if result.is_ok() => Ok(id),
        Ok(Ok(result)) => Err(failed(
            result
                .error()
                .unwrap_or_else(|| "the worker did not start".into()),
        )),
        Ok(Err(err)) if err.kind == ErrorKind::SessionBusy => Err(failed(err.message)),
        Ok(Err(err)) => Err(err),
        Err(_) => Err(OpError::new(
            ErrorKind::StartFailed,
            "the worker start gave no answer",
        )),
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
