//! Headless subagents (seed 003): clean-forked child workers that a parent
//! worker drives through the `subagent/*` remote-tool routes.
//!
//! - `args`: the routes' argument grammar and receipt hashing (pure).
//! - `conversation`: the bounded conversation projection (pure).
//! - `child`: one child's record, stored form and outcome tail (pure).
//! - `family`: forks, lifecycle, cascading stops, cleanup, restart recovery.
//! - `observe`: what a child's worker events change in its record.
//! - `routes`: the `subagent/*` tool routes (ownership, receipts, send, receive).

pub mod args;
pub mod child;
pub mod conversation;
pub mod family;
pub mod hooks;
pub mod routes;

use serde_json::{json, Value};

use crate::session::{IdentityState, Session};
use child::Child;

/// The `subagent` block of a headless session's description.
pub fn describe(session: &Session, child: &Child) -> Value {
    let live = session.identity() == IdentityState::Live;
    json!({
        "parent": {
            "session_id": child.parent().session_id,
            "lifecycle_id": child.parent().lifecycle_id,
            "worker_id": child.parent().worker_id,
        },
        "depth": child.depth(),
        "lifecycle": child.lifecycle().as_str(),
        "policy": child.policy().as_str(),
        "health": child.health(session.connected(), live),
        "reason": child.reason(),
        "observed_at": session.last_event_at(),
        "active_run": session.active_run().is_some(),
        "pending_approvals": session.prompts().len(),
        "cleanup_attempts": child.cleanup_attempts(),
    })
}

/// The session `kind` of a headless child.
pub const KIND: &str = "headless";

/// A refused subagent operation: a stable code and a diagnostic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: &'static str,
    pub message: String,
}

impl Refusal {
    pub fn new(code: &'static str, message: impl Into<String>) -> Refusal {
        Refusal {
            code,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for Refusal {}
