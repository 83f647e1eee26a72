//! An operator's decision on an open confirmation (headless sessions
//! included: their approvals are the operator's to answer).

use std::sync::{Arc, Weak};

use super::ErrorKind;
use super::{exists, OpError};
use crate::config::HeadlessPermissions;
use crate::hub::{Hub, Subscriber};
use crate::session::{grant_key, Grant, Note, MAX_GRANTS};
use crate::store::GrantRecord;
use crate::worker::confirm::Answer;

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
    let answer = Answer {
        approved,
        reason,
        source: source.as_str(),
        always: false,
    };
    send(hub, id, confirmation_id, answer)
}

/// Sends an answer through the confirmation side.
fn send(hub: &Hub, id: &str, confirmation_id: &str, answer: Answer<'_>) -> Result<(), OpError> {
    crate::worker::confirm::decide(&hub.sessions, &hub.publisher, id, confirmation_id, answer)?;
    Ok(())
}

/// Allows the request and keeps a grant for exactly its call (Shard's
/// `allow_always`, seed 004 §9.5: "repeat this exact request"): later
/// requests of this session for the same tool with the same arguments are
/// allowed without asking (`source: "grant"`), across restarts, until
/// revoked; never another session's. The grant is taken from the original
/// call (never a shortened preview). The first decision wins: when
/// another answer came first, nothing is granted. The grant is committed
/// to the store before the session holds it.
pub fn allow_always(
    hub: &Hub,
    id: &str,
    confirmation_id: &str,
    reason: Option<&str>,
    source: Source,
) -> Result<Grant, OpError> {
    exists(hub, id)?;
    let call = hub
        .sessions
        .with(id, |s| {
            let call = s.prompt(confirmation_id)?.request.call.clone();
            let full = s.grant_for(&call).is_none() && s.grants().len() >= MAX_GRANTS;
            Some((call, full))
        })
        .flatten();
    let Some((call, full)) = call else {
        return Err(OpError::new(
            ErrorKind::UnknownConfirmation,
            format!("no open confirmation {confirmation_id:?}"),
        ));
    };
    if full {
        return Err(OpError::new(
            ErrorKind::TooManyGrants,
            format!("the agent holds {MAX_GRANTS} grants: revoke one first"),
        ));
    }
    let answer = Answer {
        approved: true,
        reason,
        source: source.as_str(),
        always: true,
    };
    send(hub, id, confirmation_id, answer)?;
    let (tool, arguments) = grant_key(&call);
    let grant = Grant {
        id: format!("grant-{}", uuid::Uuid::new_v4()),
        tool,
        arguments,
        created_at: crate::util::time::now_rfc3339(),
    };
    hub.store
        .lock()
        .insert_grant(&GrantRecord {
            id: grant.id.clone(),
            session_id: id.to_string(),
            tool: grant.tool.clone(),
            arguments: grant.arguments.clone(),
            created_at: grant.created_at.clone(),
        })
        .map_err(|err| {
            OpError::new(
                ErrorKind::Storage,
                format!("the call was allowed, but its grant could not be kept: {err}"),
            )
        })?;
    hub.sessions.with(id, |s| s.add_grant(grant.clone()));
    hub.publisher.notify(Note::SessionChanged {
        session: id.to_string(),
    });
    Ok(grant)
}

/// A session's grants, oldest first.
pub fn grants(hub: &Hub, id: &str) -> Result<Vec<Grant>, OpError> {
    hub.sessions
        .with(id, |s| s.grants().to_vec())
        .ok_or_else(|| OpError::unknown_session(id))
}

/// Revokes grant `grant_id` of session `id`: removed from the store, then
/// from the session (later requests for its call are asked again).
pub fn revoke_grant(hub: &Hub, id: &str, grant_id: &str) -> Result<(), OpError> {
    exists(hub, id)?;
    let removed = hub
        .store
        .lock()
        .delete_grant(id, grant_id)
        .map_err(|err| OpError::new(ErrorKind::Storage, err.to_string()))?;
    let held = hub
        .sessions
        .with(id, |s| s.revoke_grant(grant_id))
        .unwrap_or(false);
    if !removed && !held {
        return Err(OpError::new(
            ErrorKind::UnknownGrant,
            format!("session {id:?} holds no grant {grant_id:?}"),
        ));
    }
    hub.publisher.notify(Note::SessionChanged {
        session: id.to_string(),
    });
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
