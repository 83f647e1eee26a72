//! The operator's commands for headless children: the safety policy for
//! their new confirmation requests, and the recovery of a child whose
//! cleanup did not complete.

use std::sync::Arc;

use super::{ErrorKind, OpError};
use crate::hub::Hub;
use crate::session::headless::Policy;
use crate::subagents::family::{self, RecoverAction, Recovered, Recovery};

/// Sets a headless child's policy (`ask`, `deny` or `approve`) for its
/// new confirmation requests; persisted at once and announced.
pub fn set_policy(hub: &Hub, id: &str, policy: &str) -> Result<Policy, OpError> {
    let policy = Policy::parse(policy).ok_or_else(|| {
        OpError::new(
            ErrorKind::InvalidPolicy,
            "policy must be one of \"ask\", \"deny\", \"approve\"",
        )
    })?;
    family::set_policy(&hub.subagents, id, policy)?;
    Ok(policy)
}

/// A headless child's cleanup state.
pub fn recovery(hub: &Hub, id: &str) -> Result<Recovery, OpError> {
    match family::recovery_info(&hub.subagents, id) {
        Some(info) => Ok(info),
        None if hub.session_kind(id).is_some() => Err(OpError::new(
            ErrorKind::InvalidPolicy,
            "recovery applies to headless sessions only",
        )),
        None => Err(OpError::unknown_session(id)),
    }
}

/// An operator's cleanup retry (`retry`) or termination attestation
/// (`confirm-terminated`) for the child's current `lifecycle_id`.
pub fn recover(
    hub: &Arc<Hub>,
    id: &str,
    action: &str,
    lifecycle_id: &str,
) -> Result<Recovered, OpError> {
    let action = RecoverAction::parse(action).ok_or_else(|| {
        OpError::invalid_arguments("action must be \"retry\" or \"confirm-terminated\"")
    })?;
    if lifecycle_id.is_empty() {
        return Err(OpError::invalid_arguments(
            "lifecycle_id must be the child's current lifecycle id",
        ));
    }
    Ok(family::recover(&hub.subagents, id, action, lifecycle_id)?)
}

/// Why worker launches are blocked by broken subagent storage, if they
/// are.
pub fn global_recovery(hub: &Hub) -> Option<String> {
    family::global_recovery(&hub.subagents)
}
