//! Headless subagents (seed 003): clean-forked child workers that a parent
//! worker drives through the `subagent/*` remote-tool routes. A child's
//! record itself (lifecycle, outcomes, conversation projection) is part of
//! the session core, `session::headless`; this module is the service that
//! runs families.
//!
//! - `args`: the routes' argument grammar and receipt hashing (pure).
//! - `family`: forks, lifecycle, cascading stops, cleanup, restart recovery.
//! - `hooks`: what the worker side and the supervisor tell the service.
//! - `routes`: the `subagent/*` tool routes (ownership, receipts, send, receive).

pub mod args;
pub mod family;
pub mod hooks;
pub mod routes;

pub use crate::session::headless::KIND;

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
