//! An operator's decision on an open confirmation (headless sessions
//! included: their approvals are the operator's to answer).

use std::sync::{Arc, Weak};

use super::{exists, OpError};
use crate::config::HeadlessPermissions;
use crate::hub::{Hub, Subscriber};
use crate::session::Note;

/// Who decided, as the publisher's `Decided` note names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Api,
    Panel,
    Shard,
    /// No connected client could answer (seed 004 §6.3's headless path).
    Headless,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Api => "api",
            Source::Panel => "panel",
            Source::Shard => "shard",
            Source::Headless => "headless",
        }
    }
}

/// Records the decision and sends it to the worker. The first decision
/// wins; nothing is ever resent.
pub fn decide(
    hub: &Hub,
    id: &str,
    confirmation_id: &str,
    approved: bool,
    reason: Option<&str>,
    source: Source,
) -> Result<(), OpError> {
    exists(hub, id)?;
    crate::worker::confirm::decide(
        &hub.sessions,
        &hub.publisher,
        id,
        confirmation_id,
        approved,
        reason,
        source.as_str(),
    )?;
    Ok(())
}

/// A front-end whose connected clients may answer confirmations.
pub trait Responders: Send + Sync {
    /// Whether this front-end puts `session` under the headless rule
    /// (Shard: its daemon agents and their children).
    fn governs(&self, _hub: &Hub, _session: &str) -> bool {
        false
    }

    /// Whether a client connected here could answer session `session`'s
    /// confirmation now (observers and watchers do not count).
    fn can_answer(&self, hub: &Hub, session: &str) -> bool;
}

/// The reason a headless denial carries.
pub const HEADLESS_REASON: &str = "no interactive client is connected to answer it";

/// The headless path of seed 004 §6.3, a publisher subscriber: a
/// confirmation of a daemon agent (one a front-end governs) that becomes
/// decidable while no front-end has a client that could answer it is
/// denied at once (`source: "headless"`), from a
/// short-lived thread (a decision writes to the worker and is announced;
/// subscribers run under the publish lock). `shard.headlessPermissions:
/// "wait"` leaves it open instead, for operators who answer through the
/// JSON API.
pub struct HeadlessDeny {
    hub: Weak<Hub>,
    fronts: Vec<Arc<dyn Responders>>,
}

impl HeadlessDeny {
    pub fn new(hub: &Arc<Hub>, fronts: Vec<Arc<dyn Responders>>) -> Arc<HeadlessDeny> {
        Arc::new(HeadlessDeny {
            hub: Arc::downgrade(hub),
            fronts,
        })
    }
}

impl Subscriber for HeadlessDeny {
    fn publish(&self, hub: &Hub, note: &Note) {
        let Note::ConfirmationOpened {
            session,
            confirmation_id,
        } = note
        else {
            return;
        };
        if hub.config.shard_daemon.headless_permissions != HeadlessPermissions::Deny
            || !self.fronts.iter().any(|f| f.governs(hub, session))
            || self.fronts.iter().any(|f| f.can_answer(hub, session))
        {
            return;
        }
        let Some(hub) = self.hub.upgrade() else {
            return;
        };
        let job = (hub, session.clone(), confirmation_id.clone());
        let started = crate::util::thread::spawn_with(
            "headless-deny",
            crate::util::thread::Stack::Large,
            job,
            |(hub, session, id)| {
                // Answered meanwhile (a client came): the first answer won.
                let _ = decide(
                    &hub,
                    &session,
                    &id,
                    false,
                    Some(HEADLESS_REASON),
                    Source::Headless,
                );
            },
        );
        if let Err((err, (_, session, _))) = started {
            log::error!("session {session}: cannot deny a confirmation no one can answer: {err}");
        }
    }
}
