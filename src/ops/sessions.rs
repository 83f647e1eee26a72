//! Session commands: list, describe, create, delete, and the reads of a
//! session's transcript, worker logs and worker state.

use std::sync::Arc;

use serde_json::Value;

use super::{operable, ErrorKind, OpError};
use crate::hub::Hub;
use crate::session::{Note, SessionView};

/// Every session's view.
pub fn list(hub: &Hub) -> Vec<SessionView> {
    hub.session_views()
}

/// One session's view (headless sessions included).
pub fn describe(hub: &Hub, id: &str) -> Result<SessionView, OpError> {
    hub.session_view(id)
        .ok_or_else(|| OpError::unknown_session(id))
}

/// Creates a session and announces it. A headless child's id is refused
/// (its spec is not the operator's to replace). A spec naming a library
/// pair (`launchConfig`, `workerConfig`) has both files read and validated
/// first (a refusal is `invalid_session`, as with the Node hub), and their
/// snapshot published into the new session's `config/` before the session
/// becomes visible.
pub fn create(hub: &Hub, id: &str, spec: Option<&Value>) -> Result<SessionView, OpError> {
    if hub.session_kind(id) == Some(true) {
        return Err(OpError::headless_restricted("a new spec", id));
    }
    let invalid =
        |e: crate::library::LibraryError| OpError::new(ErrorKind::InvalidSession, e.message());
    let selection = match spec {
        Some(Value::Object(map)) => crate::library::Selection::from_object(map).map_err(invalid)?,
        _ => None,
    };
    let snapshot = match &selection {
        Some(selection) => Some(hub.library.prepare_snapshot(selection).map_err(invalid)?),
        None => None,
    };
    let view = hub.create_session_with(id, spec, |dir| match &snapshot {
        Some(snapshot) => snapshot.publish(dir).map_err(OpError::from),
        None => Ok(()),
    })?;
    hub.publisher.notify(Note::SessionChanged {
        session: id.to_string(),
    });
    Ok(view)
}

/// Deletes a session that is not busy and announces it.
pub fn delete(hub: &Hub, id: &str) -> Result<(), OpError> {
    operable(hub, id, "deletion")?;
    hub.delete_session(id)?;
    hub.publisher.notify(Note::SessionRemoved {
        session: id.to_string(),
    });
    Ok(())
}

/// Retained transcript entries after a cursor.
#[derive(Debug, Clone)]
pub struct Entries {
    /// The newest `hub_sequence` the session has assigned.
    pub latest: u64,
    /// Serialized entries, oldest first.
    pub entries: Vec<Arc<str>>,
}

/// At most `limit` retained entries after `since`.
pub fn events(hub: &Hub, id: &str, since: u64, limit: usize) -> Result<Entries, OpError> {
    operable(hub, id, "events")?;
    let (latest, entries) = hub
        .events_since(id, since, limit)
        .ok_or_else(|| OpError::unknown_session(id))?;
    Ok(Entries { latest, entries })
}

/// A session's view with every retained entry after `since`.
pub fn transcript(hub: &Hub, id: &str, since: u64) -> Result<(SessionView, Entries), OpError> {
    operable(hub, id, "status_snapshot")?;
    hub.sessions
        .with(id, |s| {
            let entries = s.transcript().texts_since(since, usize::MAX);
            let latest = s.transcript().latest();
            let view = s.view(&mut |_| crate::session::PROMPT_PREVIEW_BYTES);
            (view, Entries { latest, entries })
        })
        .ok_or_else(|| OpError::unknown_session(id))
}

/// What a front-end may show of the worker's captured output.
#[derive(Debug, Clone, Copy)]
pub struct LogBounds {
    /// Newest lines at most.
    pub lines: usize,
    /// Bytes of line text at most, all lines together.
    pub bytes: usize,
    /// Bytes of one line's text at most (a longer line is cut with a
    /// notice).
    pub line_bytes: usize,
}

impl LogBounds {
    /// The newest `lines` lines, whole.
    pub fn lines(lines: usize) -> LogBounds {
        LogBounds {
            lines,
            bytes: usize::MAX,
            line_bytes: usize::MAX,
        }
    }
}

/// The tail of a worker's captured output.
#[derive(Debug, Clone)]
pub struct LogTail {
    /// The line texts, oldest first (the Node hub's `lines`).
    pub lines: Vec<String>,
    /// `{stream, at}` of each line, in the same order.
    pub meta: Vec<Value>,
    /// Lines the ring evicted to keep its bounds.
    pub dropped: u64,
    /// Older ring lines the bounds left out of `lines`.
    pub omitted: u64,
    /// The current worker's log file.
    pub log_path: Option<String>,
}

/// The newest lines of the worker's output within `bounds`.
pub fn logs(hub: &Hub, id: &str, bounds: LogBounds) -> Result<LogTail, OpError> {
    operable(hub, id, "logs")?;
    hub.sessions
        .with(id, |s| {
            let tail = crate::util::log_ring::panel_tail(
                s.logs(),
                bounds.lines,
                bounds.bytes,
                bounds.line_bytes,
            );
            LogTail {
                lines: tail.lines,
                meta: tail.meta,
                dropped: s.logs().dropped(),
                omitted: tail.omitted,
                log_path: s.process().and_then(|p| p.log_path.clone()),
            }
        })
        .ok_or_else(|| OpError::unknown_session(id))
}

/// The read-only view of the worker's persisted state.
pub fn snapshot(hub: &Hub, id: &str) -> Result<Value, OpError> {
    operable(hub, id, "snapshot")?;
    Ok(crate::supervisor::snapshot::read(id, &hub.session_dir(id)))
}

/// The session may be subscribed to (its transcript watched).
pub fn watchable(hub: &Hub, id: &str) -> Result<(), OpError> {
    operable(hub, id, "subscribe")
}

/// `display_snapshot_too_large` with `message`.
pub fn too_large(message: &str) -> OpError {
    OpError::new(ErrorKind::DisplaySnapshotTooLarge, message)
}

/// How much of a session a watcher may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    /// Its transcript, status and approvals (an ordinary session).
    Everything,
    /// Its status and approvals only: a headless child's conversation
    /// is its parent's (seed 003), as on the panel.
    Approvals,
}

/// What a watcher of session `id` may see (`unknown_session` when there
/// is none).
pub fn watch_scope(hub: &Hub, id: &str) -> Result<Watch, OpError> {
    match hub.session_kind(id) {
        None => Err(OpError::unknown_session(id)),
        Some(true) => Ok(Watch::Approvals),
        Some(false) => Ok(Watch::Everything),
    }
}

/// One configured provider profile, as a model catalog lists it (its
/// name, plugin and model; nothing else of it leaves the hub).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub name: String,
    pub plugin: String,
    pub model: String,
}

/// The provider profiles a session may name and the one it uses (its
/// spec's `provider`, with the spec's `model` when it overrides the
/// profile's).
pub fn models(hub: &Hub, id: &str) -> Result<(Vec<Profile>, Profile), OpError> {
    operable(hub, id, "models")?;
    let spec = hub
        .sessions
        .with(id, |s| s.spec().clone())
        .ok_or_else(|| OpError::unknown_session(id))?;
    let profiles = profiles(hub);
    let provider = spec["provider"].as_str().unwrap_or_default();
    let mut active = profiles
        .iter()
        .find(|p| p.name == provider)
        .cloned()
        .unwrap_or_else(|| Profile {
            name: provider.to_string(),
            plugin: String::new(),
            model: String::new(),
        });
    if let Some(model) = spec["model"].as_str().filter(|m| !m.is_empty()) {
        active.model = model.to_string();
    }
    Ok((profiles, active))
}

/// Every configured provider profile, in configuration order.
pub fn profiles(hub: &Hub) -> Vec<Profile> {
    hub.config
        .provider_profiles
        .iter()
        .map(|(name, profile)| Profile {
            name: name.clone(),
            plugin: profile["plugin"].as_str().unwrap_or_default().to_string(),
            model: profile["model"].as_str().unwrap_or_default().to_string(),
        })
        .collect()
}

/// Reads session `id` through `f`, a pure projection run under the
/// registry lock (it must not block: copy out, render afterwards).
pub fn read<T>(
    hub: &Hub,
    id: &str,
    f: impl FnOnce(&crate::session::Session) -> T,
) -> Result<T, OpError> {
    hub.sessions
        .with(id, |s| f(s))
        .ok_or_else(|| OpError::unknown_session(id))
}

/// Reads every session, in creation order, through `f` (as [`read`]).
pub fn read_all<T>(hub: &Hub, mut f: impl FnMut(&crate::session::Session) -> T) -> Vec<T> {
    hub.sessions.scan(|s| Some(f(s)))
}
