//! The headless subagent service as the worker side and the supervisor
//! see it: a [`WorkerHooks`] implementation, so neither calls into the
//! family code directly. Ordinary sessions cost one branch per event.

use std::sync::{Arc, Weak};

use crate::hub::Hub;
use crate::session::{Followup, Session, WorkerHooks};
use crate::wire::worker::envelope::Envelope;

use super::family;
use crate::session::headless::observe;

/// Headless children's reactions to their workers.
pub struct Subagents {
    /// The hub whose families these are (held weakly: the hub holds the
    /// hooks).
    hub: Weak<Hub>,
}

impl Subagents {
    pub fn new(hub: &Arc<Hub>) -> Subagents {
        Subagents {
            hub: Arc::downgrade(hub),
        }
    }
}

impl WorkerHooks for Subagents {
    fn event(&self, s: &mut Session, env: &Envelope, now: &str) -> Followup {
        if !s.is_headless() {
            return Followup::default();
        }
        let seen = observe::observe(s, env, now);
        let id = s.id().to_string();
        let changed = seen.changed;
        let hub = self.hub.clone();
        let work = move || {
            let Some(hub) = hub.upgrade() else {
                return;
            };
            let hub = &hub;
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
        let (hub, id) = (self.hub.clone(), s.id().to_string());
        Followup {
            changed: false,
            work: Some(Box::new(move || {
                if let Some(hub) = hub.upgrade() {
                    family::persist_outcomes(&hub, &id)
                }
            })),
        }
    }

    fn stopping(&self, id: &str) {
        if let Some(hub) = self.hub.upgrade() {
            family::freeze_descendants(&hub, id);
        }
    }

    fn process_gone(&self, id: &str) {
        if let Some(hub) = self.hub.upgrade() {
            family::process_gone(&hub, id);
        }
    }
}
