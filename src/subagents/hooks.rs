//! The headless subagent service as the worker side and the supervisor
//! see it: a [`WorkerHooks`] implementation, so neither calls into the
//! family code directly. Ordinary sessions cost one branch per event.

use std::sync::Arc;

use crate::hub::{Followup, Hub, WorkerHooks};
use crate::session::Session;
use crate::wire::worker::envelope::Envelope;

use super::family;
use crate::session::headless::observe;

/// Headless children's reactions to their workers.
pub struct Subagents;

impl WorkerHooks for Subagents {
    fn event(&self, s: &mut Session, env: &Envelope, now: &str) -> Followup {
        if !s.is_headless() {
            return Followup::default();
        }
        let seen = observe::observe(s, env, now);
        let id = s.id().to_string();
        let changed = seen.changed;
        let work = move |hub: &Arc<Hub>| {
            if let Some(meta) = &seen.meta {
                family::persist_meta(hub, &id, meta);
            }
            if seen.outcomes {
                family::persist_outcomes(hub, &id);
            }
            if seen.conversation {
                family::schedule_conversation_write(hub, &id);
            }
            if seen.refresh {
                family::start_refresh(hub, &id);
            }
        };
        Followup {
            changed,
            work: Some(Box::new(work)),
        }
    }

    fn disconnected(&self, s: &mut Session, now: &str) -> Followup {
        if !observe::disconnected(s, now) {
            return Followup::default();
        }
        let id = s.id().to_string();
        Followup {
            changed: false,
            work: Some(Box::new(move |hub: &Arc<Hub>| {
                family::persist_outcomes(hub, &id)
            })),
        }
    }

    fn stopping(&self, hub: &Arc<Hub>, id: &str) {
        family::freeze_descendants(hub, id);
    }

    fn process_gone(&self, hub: &Arc<Hub>, id: &str) {
        family::process_gone(hub, id);
    }
}
