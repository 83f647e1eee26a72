//! What a family keeps: lifecycle transitions with durable metadata, the
//! outcome tail, the in-memory terminal records a parent can still
//! receive after its child is gone, and the coalesced, atomic
//! `conversation.json` writes (and reading it back after a restart).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::{lock, spawn_thread, Family};
use crate::session::headless::conversation::Conversation;
use crate::session::headless::{LifecycleEvent, ParentRef};
use crate::session::Note;
use crate::subagents::Service;
use crate::util::fsutil;

/// Terminal records kept for parents, at most.
pub const MAX_TERMINAL: usize = 128;

/// What a parent can still learn about a child that is gone.
#[derive(Debug, Clone)]
pub struct Terminal {
    pub id: String,
    pub parent: ParentRef,
    pub reason: Option<String>,
    pub outcomes: Vec<Value>,
    pub removed_ms: u64,
}

impl Family {
    /// Keeps a terminal record for `ttl_ms`, at most [`MAX_TERMINAL`].
    pub(super) fn remember(&self, record: Terminal) {
        let mut list = lock(&self.terminal);
        list.retain(|t| t.id != record.id);
        while list.len() >= MAX_TERMINAL {
            list.pop_front();
        }
        list.push_back(record);
    }

    /// Terminal records not older than `ttl_ms`, oldest first.
    pub fn terminals(&self, now_ms: u64, ttl_ms: u64) -> Vec<Terminal> {
        let mut list = lock(&self.terminal);
        list.retain(|t| now_ms.saturating_sub(t.removed_ms) <= ttl_ms);
        list.iter().cloned().collect()
    }
}

/// Applies `change` to the child's lifecycle; persists and announces a
/// change. Returns whether it changed.
pub fn transition(sv: &Service, id: &str, event: LifecycleEvent) -> bool {
    let changed = sv
        .sessions
        .with(id, |s| {
            let c = s.headless_mut()?;
            c.apply(event).then(|| c.meta_json())
        })
        .flatten();
    match changed {
        Some(meta) => {
            persist_meta(sv, id, &meta);
            sv.publisher.notify(Note::SessionChanged {
                session: id.to_string(),
            });
            true
        }
        None => false,
    }
}

/// Writes the child's metadata; a failure marks the child degraded until
/// a later write succeeds.
pub fn persist_meta(sv: &Service, id: &str, meta: &Value) {
    let stored = sv.store.lock().put_subagent_meta(id, meta);
    if let Err(err) = &stored {
        log::warn!("subagent {id}: metadata not stored: {err}");
    }
    sv.sessions.with(id, |s| {
        if let Some(c) = s.headless_mut() {
            c.meta_stored(stored.is_ok());
        }
    });
}

/// Writes the child's outcome tail if it changed.
pub fn persist_outcomes(sv: &Service, id: &str) {
    let outcomes = sv
        .sessions
        .with(id, |s| s.headless()?.outcomes_to_store())
        .flatten();
    let Some(outcomes) = outcomes else { return };
    let stored = sv.store.lock().put_subagent_outcomes(id, &outcomes);
    if let Err(err) = &stored {
        log::warn!("subagent {id}: outcomes not stored: {err}");
    }
    sv.sessions.with(id, |s| {
        if let Some(c) = s.headless_mut() {
            c.outcomes_stored(stored.is_ok());
        }
    });
}

/// The coalescing window of `conversation.json` writes; later events do
/// not postpone a scheduled write.
pub const CONVERSATION_WINDOW: Duration = Duration::from_millis(200);

/// `conversation.json` inside a child's directory.
pub const CONVERSATION_FILE: &str = "conversation.json";

/// Schedules one coalesced `conversation.json` write for `id`, unless one
/// is already scheduled.
pub fn schedule_conversation_write(sv: &Arc<Service>, id: &str) {
    let first = sv
        .sessions
        .with(id, |s| {
            s.headless_mut()
                .is_some_and(|c| c.schedule_conversation_write())
        })
        .unwrap_or(false);
    if !first {
        return;
    }
    let hub2 = sv.clone();
    let id2 = id.to_string();
    let spawned = spawn_thread("subagent-conv", move || {
        #[expect(
            clippy::disallowed_methods,
            reason = "the coalescing window itself: events within it share one write"
        )]
        std::thread::sleep(CONVERSATION_WINDOW);
        write_conversation(&hub2, &id2);
    });
    if spawned.is_err() {
        write_conversation(sv, id);
    }
}

/// Writes the projection now (atomically, 0600). Never recreates a
/// removed child directory; a failure keeps the previous file and marks
/// the projection stale and the child degraded.
fn write_conversation(sv: &Service, id: &str) {
    let doc = sv
        .sessions
        .with(id, |s| s.headless_mut()?.take_conversation_write())
        .flatten();
    let Some(doc) = doc else { return };
    let path = sv.session_dir(id).join(CONVERSATION_FILE);
    let written = fsutil::write_private_atomic(&path, doc.to_string().as_bytes());
    if let Err(err) = &written {
        log::warn!("subagent {id}: {} not written: {err}", path.display());
    }
    sv.sessions.with(id, |s| {
        if let Some(c) = s.headless_mut() {
            c.conversation_written(written.is_ok());
        }
    });
}

/// The stored projection of a restored child, if readable.
pub(super) fn load_conversation(sv: &Service, id: &str) -> Option<Conversation> {
    let path = sv.session_dir(id).join(CONVERSATION_FILE);
    let text = fsutil::read_private_file(&path).ok()?;
    let value: Value = serde_json::from_str(&text).ok()?;
    let mut conversation =
        Conversation::from_json(&value, sv.config.subagents.conversation_bytes).ok()?;
    // Events may have been missed while the hub was down.
    conversation.on_event_gap();
    Some(conversation)
}
