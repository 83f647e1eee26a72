//! Headless subagents (seed 003): clean-forked child workers that a parent
//! worker drives through the `subagent/*` remote-tool routes. A child's
//! record itself (lifecycle, outcomes, conversation projection) is part of
//! the session core, `session::headless`; this module is the service that
//! runs families.
//!
//! The routes' argument grammar and receipt hashing are the wire layer's
//! (`wire::worker::subagent_args`).
//! - `family`: forks, lifecycle, cascading stops, cleanup, restart recovery.
//! - `hooks`: what the worker side and the supervisor tell the service.
//! - `routes`: the `subagent/*` tool routes (ownership, receipts, send, receive).
//! - `service`: the handle every part takes ([`Service`]).

pub mod family;
pub mod hooks;
pub mod routes;
mod service;

pub use crate::session::headless::KIND;
pub use service::Service;

/// A refused subagent operation: which refusal (each knows its stable
/// code) and a diagnostic for people. The `subagent/*` tool routes answer
/// with the code of the worker protocol's registry
/// (`wire::worker::tool_frames::code`); the operator routes of headless
/// children (`set_policy`, `recover`) meet the last five, which the
/// command layer turns into its own kinds (`ops::error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The caller is not the live direct parent of the child, or is gone.
    Unauthorized(String),
    /// The store or the child's files could not be read or written.
    Storage(String),
    /// The request id was used before with other arguments.
    RequestConflict(String),
    /// The child, the caller's worker or family, or the hub is closing,
    /// or the child is gone.
    LifecycleClosed(String),
    /// Arguments the child's worker would refuse.
    InvalidArguments(String),
    /// A depth, live-child, children or pending-query limit.
    LimitExceeded(String),
    /// The child's worker does not offer the operation.
    UnsupportedOperation(String),
    /// The child's worker is not ready and connected.
    Disconnected(String),
    /// The child's answer page could not be read from its worker.
    AnswerUnavailable(String),
    /// The payload may or may not have reached the child's worker.
    DeliveryUnknown(String),
    /// Subagent launches are blocked until the subagent storage is repaired.
    RecoveryRequired(String),
    /// The caller cannot be forked (not launched by this hub, or its
    /// startup snapshot cannot be used).
    UnsupportedLaunch(String),
    /// Operator routes: no session has the id.
    NotFound(String),
    /// Operator routes: the session is not a headless child.
    InvalidPolicy(String),
    /// A recovery named a lifecycle that is not the child's current one.
    StaleLifecycle(String),
    /// A recovery that the child's state does not allow now.
    RecoveryConflict(String),
    /// A recovery's cleanup ran and did not complete.
    CleanupFailed(String),
}

impl Refusal {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        use crate::wire::code as api;
        use crate::wire::worker::tool_frames::code as tool;
        match self {
            Refusal::Unauthorized(_) => tool::UNAUTHORIZED,
            Refusal::Storage(_) => tool::STORAGE_ERROR,
            Refusal::RequestConflict(_) => tool::REQUEST_CONFLICT,
            Refusal::LifecycleClosed(_) => tool::LIFECYCLE_CLOSED,
            Refusal::InvalidArguments(_) => tool::INVALID_ARGUMENTS,
            Refusal::LimitExceeded(_) => tool::LIMIT_EXCEEDED,
            Refusal::UnsupportedOperation(_) => tool::UNSUPPORTED_OPERATION,
            Refusal::Disconnected(_) => tool::DISCONNECTED,
            Refusal::AnswerUnavailable(_) => tool::ANSWER_UNAVAILABLE,
            Refusal::DeliveryUnknown(_) => tool::DELIVERY_UNKNOWN,
            Refusal::RecoveryRequired(_) => tool::RECOVERY_REQUIRED,
            Refusal::UnsupportedLaunch(_) => tool::UNSUPPORTED_LAUNCH,
            Refusal::NotFound(_) => api::NOT_FOUND,
            Refusal::InvalidPolicy(_) => api::INVALID_POLICY,
            Refusal::StaleLifecycle(_) => api::STALE_LIFECYCLE,
            Refusal::RecoveryConflict(_) => api::RECOVERY_CONFLICT,
            Refusal::CleanupFailed(_) => api::CLEANUP_FAILED,
        }
    }

    /// The diagnostic.
    pub fn message(&self) -> &str {
        match self {
            Refusal::Unauthorized(m)
            | Refusal::Storage(m)
            | Refusal::RequestConflict(m)
            | Refusal::LifecycleClosed(m)
            | Refusal::InvalidArguments(m)
            | Refusal::LimitExceeded(m)
            | Refusal::UnsupportedOperation(m)
            | Refusal::Disconnected(m)
            | Refusal::AnswerUnavailable(m)
            | Refusal::DeliveryUnknown(m)
            | Refusal::RecoveryRequired(m)
            | Refusal::UnsupportedLaunch(m)
            | Refusal::NotFound(m)
            | Refusal::InvalidPolicy(m)
            | Refusal::StaleLifecycle(m)
            | Refusal::RecoveryConflict(m)
            | Refusal::CleanupFailed(m) => m,
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code(), self.message())
    }
}

impl std::error::Error for Refusal {}

#[cfg(test)]
mod tests {
    use super::Refusal;

    /// The codes are wire (tool responses, logs): spelled out here to pin
    /// them.
    #[test]
    fn each_refusal_knows_its_code() {
        let m = || "why".to_string();
        let cases = [
            (Refusal::Unauthorized(m()), "unauthorized"),
            (Refusal::Storage(m()), "storage_error"),
            (Refusal::RequestConflict(m()), "request_conflict"),
            (Refusal::LifecycleClosed(m()), "lifecycle_closed"),
            (Refusal::InvalidArguments(m()), "invalid_arguments"),
            (Refusal::LimitExceeded(m()), "limit_exceeded"),
            (Refusal::UnsupportedOperation(m()), "unsupported_operation"),
            (Refusal::Disconnected(m()), "disconnected"),
            (Refusal::AnswerUnavailable(m()), "answer_unavailable"),
            (Refusal::DeliveryUnknown(m()), "delivery_unknown"),
            (Refusal::RecoveryRequired(m()), "recovery_required"),
            (Refusal::UnsupportedLaunch(m()), "unsupported_launch"),
            (Refusal::NotFound(m()), "not_found"),
            (Refusal::InvalidPolicy(m()), "invalid_policy"),
            (Refusal::StaleLifecycle(m()), "stale_lifecycle"),
            (Refusal::RecoveryConflict(m()), "recovery_conflict"),
            (Refusal::CleanupFailed(m()), "cleanup_failed"),
        ];
        for (refusal, code) in cases {
            assert_eq!(refusal.code(), code);
            assert_eq!(refusal.message(), "why");
            assert_eq!(refusal.to_string(), format!("{code}: why"));
        }
    }
}
