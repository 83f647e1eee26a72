//! The headless subagent service as the worker side and the supervisor
//! see it: a [`WorkerHooks`] implementation, so neither calls into the
//! family code directly. Ordinary sessions cost one branch per event.

use std::sync::{Arc, Weak};

use crate::session::{Followup, Session, WorkerHooks};
use crate::subagents::Service;
use crate::wire::worker::envelope::Envelope;

use super::family;
use crate::session::headless::observe;

/// Headless children's reactions to their workers.
pub struct Subagents {
    /// The service whose families these are (held weakly: the shared
    /// handles hold the hooks, and the service holds the handles).
    sv: Weak<Service>,
}

impl Subagents {
    pub fn new(sv: &Arc<Service>) -> Subagents {
        Subagents {
            sv: Arc::downgrade(sv),
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
        let sv = self.sv.clone();
        let work = move || {
            let Some(sv) = sv.upgrade() else {
                return;
            };
            let sv = &sv;
            if let Some(meta) = &seen.meta {
                family::persist_meta(sv, &id, meta);
            }
            if seen.outcomes {
                family::persist_outcomes(sv, &id);
            }
            if seen.conversation {
                family::schedule_conversation_write(sv, &id);
            }
            if seen.refresh {
                family::start_refresh(sv, &id);
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
        let (sv, id) = (self.sv.clone(), s.id().to_string());
        Followup {
            changed: false,
            work: Some(Box::new(move || {
                if let Some(sv) = sv.upgrade() {
                    family::persist_outcomes(&sv, &id)
                }
            })),
        }
    }

    fn stopping(&self, id: &str) {
        if let Some(sv) = self.sv.upgrade() {
            family::freeze_descendants(&sv, id);
        }
    }

    fn process_gone(&self, id: &str) {
        if let Some(sv) = self.sv.upgrade() {
            family::process_gone(&sv, id);
        }
    }

    fn launch_blocked(&self) -> Option<String> {
        self.sv.upgrade().and_then(|sv| sv.family.blocked())
    }
}
