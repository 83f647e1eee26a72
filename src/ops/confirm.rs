//! An operator's decision on an open confirmation (headless sessions
//! included: their approvals are the operator's to answer).

use super::{exists, OpError};
use crate::hub::Hub;

/// Who decided, as the publisher's `Decided` note names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Api,
    Panel,
    Shard,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Api => "api",
            Source::Panel => "panel",
            Source::Shard => "shard",
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
