//! An operator's decision on an open confirmation (headless sessions
//! included: their approvals are the operator's to answer).

use super::{exists, OpError};
use crate::hub::Hub;

/// Records the decision and sends it to the worker. The first decision
/// wins; nothing is ever resent.
pub fn decide(
    hub: &Hub,
    id: &str,
    confirmation_id: &str,
    approved: bool,
    reason: Option<&str>,
) -> Result<(), OpError> {
    exists(hub, id)?;
    crate::worker::confirm::decide(hub, id, confirmation_id, approved, reason)?;
    Ok(())
}
