//! What an agent's `sync` (seed 004 §9.1) is built from, read in one look
//! at its session: the snapshot, the live window, the transcript's newest
//! entry (the attachment's cursor), the requests that can be decided and
//! the grants.
//! The caller holds the publish lock, so no event is missed or delivered
//! twice around it: an attach (`dispatch`), and the fresh `sync` sent to
//! the attachments when a new runtime becomes ready (`fanout`).

use serde_json::Value;

use super::agent::Snapshot;
use super::track::Derived;
use super::{delegate, render, window, Shard};
use crate::hub::Hub;
use crate::ops::{self, sessions::Watch, OpError};
use crate::session::{Grant, PromptView};

/// One look at an agent for its `sync`.
pub struct Look {
    pub snap: Snapshot,
    pub live_window: Value,
    /// The transcript's newest `hub_sequence`.
    pub latest: u64,
    /// The agent's own requests that can be decided now.
    pub prompts: Vec<PromptView>,
    /// The agent's grants (`allow_always`), oldest first.
    pub grants: Vec<Grant>,
}

impl Look {
    /// Takes the agent's decidable requests as shown (their answers and
    /// resolutions are then recognised) and returns the status now and the
    /// requests as `permission_request` events, for the `sync` and after it.
    pub fn show(&self, shard: &Shard, agent: &str) -> (Derived, Vec<Value>) {
        let now = shard.agent(agent, |t| {
            for prompt in &self.prompts {
                t.open_request(&prompt.confirmation_id, render::asked(agent, prompt));
            }
            t.derive(&self.snap.facts)
        });
        let requests = self
            .prompts
            .iter()
            .map(|p| render::permission_request(agent, p))
            .collect();
        (now, requests)
    }
}

/// Reads agent `agent` for a `sync`; the window only when `watch` shows
/// the conversation. The window is parsed and rendered after the
/// registry lock is released.
pub fn look(hub: &Hub, agent: &str, watch: Watch) -> Result<Look, OpError> {
    let profiles = &hub.config.provider_profiles;
    let (snap, entries, latest, prompts, grants) = ops::sessions::read(hub, agent, |s| {
        let entries = match watch {
            Watch::Everything => s.transcript().tail(window::SOURCE_BYTES, window::pick),
            Watch::Approvals => Vec::new(),
        };
        (
            Snapshot::of(s, profiles),
            entries,
            s.transcript().latest(),
            delegate::decidable(s),
            s.grants().to_vec(),
        )
    })?;
    let texts: Vec<&str> = entries.iter().map(|e| &*e.json).collect();
    Ok(Look {
        snap,
        live_window: window::live_window(&texts, window::WINDOW_BYTES),
        latest,
        prompts,
        grants,
    })
}
