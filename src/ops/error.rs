//! Why a command was refused: an [`ErrorKind`] that knows its stable wire
//! code and its HTTP status, and a message for people. Every front-end
//! renders these in its own shape (the JSON API as `{error, message}` with
//! the status, the panel socket as an `error` frame, Shard as its own
//! registry), but the code and the status are decided here, once.

use std::fmt;

use serde_json::{Map, Value};

use crate::services::HubError;
use crate::session::SendError;
use crate::subagents::Refusal;
use crate::worker::confirm::DecideError;
use crate::worker::query::QueryError;

use crate::wire::code;

/// The `reason` of a `storage_error` whose disk is full.
pub const DISK_FULL: &str = "disk_full";

/// Why an input or a signal did not reach the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotSent {
    /// Validation failed before anything was written (400).
    Invalid,
    /// No worker is connected, or it lacks the needed capability (409).
    NotConnected,
    /// The socket write failed; nothing was recorded as sent (409).
    WriteFailed,
}

/// Why a command refused, as far as a client can act on it. Input a
/// front-end cannot parse (not JSON, no such route, a bad query number)
/// and transport refusals (authentication, origin, method, sizes) are
/// the front-end's own; their wire codes are constants in [`code`] too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The session id names no session.
    UnknownSession,
    /// The id or the spec of a new session is not acceptable.
    InvalidSession,
    SessionExists,
    /// The session is in use (a worker runs, a delete is under way).
    SessionBusy,
    /// Direct conversation and control of a headless session.
    HeadlessRestricted,
    /// A headless-only operation on an ordinary session, or a policy value.
    InvalidPolicy,
    /// An argument of an operator route is missing or wrong.
    InvalidArguments,
    /// A recovery named a lifecycle that is not the child's current one.
    StaleLifecycle,
    /// A recovery that the child's state does not allow now.
    RecoveryConflict,
    /// A cleanup ran and did not complete.
    CleanupFailed,
    InputNotSent(NotSent),
    SignalNotSent(NotSent),
    /// No open confirmation has this id.
    UnknownConfirmation,
    /// The confirmation cannot take this decision now.
    ConfirmationRejected,
    /// The session holds no grant by this id.
    UnknownGrant,
    /// The session holds as many grants as it may (`MAX_GRANTS`).
    TooManyGrants,
    /// A named choice (a confirmation mode) is not one the hub offers.
    UnknownChoice,
    /// The answer does not fit one frame.
    DisplaySnapshotTooLarge,
    /// Too many read-only worker queries are pending; nothing was sent.
    TooManyQueries,
    /// A complete-answer page could not be read from the worker.
    AnswerUnavailable,
    /// A configuration kind, id, request or document is not acceptable.
    InvalidConfiguration,
    ConfigurationNotFound,
    /// A stale revision, or a new configuration's id is taken.
    ConfigurationConflict,
    /// A configuration file or text over 1 MiB.
    ConfigurationTooLarge,
    /// A skill id or document is not acceptable.
    InvalidSkill,
    SkillNotFound,
    /// The skill library holds more files than a list reads (an operator
    /// has to remove some).
    TooManySkills,
    /// The store or a session file could not be written.
    Storage,
    /// A worker was asked to start as part of a command (a new agent) and
    /// did not; what the command made is kept.
    StartFailed,
    /// A defect of the hub.
    Internal,
}

impl ErrorKind {
    /// The stable wire code.
    pub fn code(self) -> &'static str {
        use ErrorKind::*;
        match self {
            UnknownSession => code::UNKNOWN_SESSION,
            InvalidSession => code::INVALID_SESSION,
            SessionExists => code::SESSION_EXISTS,
            SessionBusy => code::SESSION_BUSY,
            HeadlessRestricted => code::HEADLESS_RESTRICTED,
            InvalidPolicy => code::INVALID_POLICY,
            InvalidArguments => code::INVALID_ARGUMENTS,
            StaleLifecycle => code::STALE_LIFECYCLE,
            RecoveryConflict => code::RECOVERY_CONFLICT,
            CleanupFailed => code::CLEANUP_FAILED,
            InputNotSent(_) => code::INPUT_NOT_SENT,
            SignalNotSent(_) => code::SIGNAL_NOT_SENT,
            UnknownConfirmation => code::UNKNOWN_CONFIRMATION,
            ConfirmationRejected => code::CONFIRMATION_REJECTED,
            UnknownGrant => code::UNKNOWN_GRANT,
            TooManyGrants => code::TOO_MANY_GRANTS,
            UnknownChoice => code::NOT_FOUND,
            DisplaySnapshotTooLarge => code::DISPLAY_SNAPSHOT_TOO_LARGE,
            TooManyQueries => code::TOO_MANY_QUERIES,
            AnswerUnavailable => code::ANSWER_UNAVAILABLE,
            InvalidConfiguration => code::INVALID_CONFIGURATION,
            ConfigurationNotFound => code::CONFIGURATION_NOT_FOUND,
            ConfigurationConflict => code::CONFIGURATION_CONFLICT,
            ConfigurationTooLarge => code::CONFIGURATION_TOO_LARGE,
            InvalidSkill => code::INVALID_SKILL,
            SkillNotFound => code::SKILL_NOT_FOUND,
            TooManySkills => code::TOO_MANY_SKILLS,
            Storage => code::STORAGE_ERROR,
            StartFailed => code::WORKER_ACTION_FAILED,
            Internal => code::INTERNAL_ERROR,
        }
    }

    /// The HTTP status the JSON API answers with.
    pub fn http_status(self) -> u16 {
        use ErrorKind::*;
        match self {
            InvalidSession | InvalidPolicy | InvalidArguments => 400,
            InvalidConfiguration | InvalidSkill => 400,
            ConfigurationNotFound | SkillNotFound => 404,
            ConfigurationConflict => 409,
            ConfigurationTooLarge => 413,
            InputNotSent(NotSent::Invalid) | SignalNotSent(NotSent::Invalid) => 400,
            UnknownSession | UnknownConfirmation | UnknownChoice | UnknownGrant => 404,
            SessionExists | SessionBusy | HeadlessRestricted | StaleLifecycle
            | RecoveryConflict | CleanupFailed | ConfirmationRejected | AnswerUnavailable
            | TooManyGrants => 409,
            StartFailed => 409,
            InputNotSent(_) | SignalNotSent(_) => 409,
            DisplaySnapshotTooLarge => 413,
            TooManyQueries => 429,
            TooManySkills | Storage | Internal => 500,
        }
    }
}

/// A refused command: what kind of refusal, a diagnostic, and members a
/// front-end adds to its error object (`reason`, `worker_error`, ...).
#[derive(Debug, Clone, PartialEq)]
pub struct OpError {
    pub kind: ErrorKind,
    pub message: String,
    pub details: Map<String, Value>,
}

impl OpError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> OpError {
        OpError {
            kind,
            message: message.into(),
            details: Map::new(),
        }
    }

    /// The same error with one more detail member.
    pub fn with(mut self, key: &str, value: Value) -> OpError {
        self.details.insert(key.to_string(), value);
        self
    }

    pub fn code(&self) -> &'static str {
        self.kind.code()
    }

    pub fn http_status(&self) -> u16 {
        self.kind.http_status()
    }

    /// `unknown_session` naming `id`.
    pub fn unknown_session(id: &str) -> OpError {
        OpError::new(
            ErrorKind::UnknownSession,
            format!("no session {}", crate::wire::worker::display::quote(id)),
        )
    }

    /// `headless_restricted`: `what` is not for the headless session `id`.
    pub fn headless_restricted(what: &str, id: &str) -> OpError {
        OpError::new(
            ErrorKind::HeadlessRestricted,
            format!(
                "{what} is not available for the headless session {}: it is driven by its parent worker",
                crate::wire::worker::display::quote(id)
            ),
        )
    }

    /// `invalid_arguments` with `message`.
    pub fn invalid_arguments(message: impl Into<String>) -> OpError {
        OpError::new(ErrorKind::InvalidArguments, message)
    }
}

impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for OpError {}

/// Hub failures (session registry, store, files).
impl From<HubError> for OpError {
    fn from(err: HubError) -> OpError {
        let kind = match &err {
            HubError::InvalidSession(_) => ErrorKind::InvalidSession,
            HubError::SessionExists(_) => ErrorKind::SessionExists,
            HubError::UnknownSession(_) => ErrorKind::UnknownSession,
            HubError::SessionBusy { .. } => ErrorKind::SessionBusy,
            HubError::Store(_) | HubError::Files { .. } => ErrorKind::Storage,
        };
        let op = OpError::new(kind, err.to_string());
        if err.is_disk_full() {
            // Transient: the same write succeeds once there is room.
            op.with("reason", Value::from(DISK_FULL))
        } else {
            op
        }
    }
}

/// The configuration library's refusals.
impl From<crate::library::LibraryError> for OpError {
    fn from(err: crate::library::LibraryError) -> OpError {
        use crate::library::LibraryError as L;
        let kind = match &err {
            L::Invalid(_) => ErrorKind::InvalidConfiguration,
            L::NotFound(_) => ErrorKind::ConfigurationNotFound,
            L::Conflict(_) => ErrorKind::ConfigurationConflict,
            L::TooLarge(_) => ErrorKind::ConfigurationTooLarge,
            L::Storage(_) => ErrorKind::Storage,
        };
        OpError::new(kind, err.message())
    }
}

/// The skill library's refusals.
impl From<crate::skills::SkillError> for OpError {
    fn from(err: crate::skills::SkillError) -> OpError {
        use crate::skills::SkillError as S;
        let kind = match &err {
            S::InvalidId | S::Invalid(_) => ErrorKind::InvalidSkill,
            S::NotFound => ErrorKind::SkillNotFound,
            S::TooMany(_) => ErrorKind::TooManySkills,
            S::Storage(_) => ErrorKind::Storage,
        };
        OpError::new(kind, err.to_string())
    }
}

/// Confirmation decisions.
impl From<DecideError> for OpError {
    fn from(err: DecideError) -> OpError {
        let kind = match err {
            DecideError::Unknown => ErrorKind::UnknownConfirmation,
            DecideError::Rejected(_) => ErrorKind::ConfirmationRejected,
        };
        OpError::new(kind, err.to_string())
    }
}

/// Operator routes of headless children share the refusals of the
/// `subagent/*` tool routes. The first seven have a kind of their own;
/// the rest are the tool routes' alone, and an operator route that met
/// one would be a defect of the hub (`internal_error`, logged).
impl From<Refusal> for OpError {
    fn from(refusal: Refusal) -> OpError {
        let kind = match &refusal {
            Refusal::NotFound(_) => ErrorKind::UnknownSession,
            Refusal::InvalidPolicy(_) => ErrorKind::InvalidPolicy,
            Refusal::InvalidArguments(_) => ErrorKind::InvalidArguments,
            Refusal::StaleLifecycle(_) => ErrorKind::StaleLifecycle,
            Refusal::RecoveryConflict(_) => ErrorKind::RecoveryConflict,
            Refusal::CleanupFailed(_) => ErrorKind::CleanupFailed,
            Refusal::Storage(_) => ErrorKind::Storage,
            Refusal::Unauthorized(_)
            | Refusal::RequestConflict(_)
            | Refusal::LifecycleClosed(_)
            | Refusal::LimitExceeded(_)
            | Refusal::UnsupportedOperation(_)
            | Refusal::Disconnected(_)
            | Refusal::AnswerUnavailable(_)
            | Refusal::DeliveryUnknown(_)
            | Refusal::RecoveryRequired(_)
            | Refusal::UnsupportedLaunch(_) => {
                log::error!("an operator route met the tool refusal {}", refusal.code());
                ErrorKind::Internal
            }
        };
        OpError::new(kind, refusal.message())
    }
}

/// A send failure of an input (`input_not_sent`) or a signal
/// (`signal_not_sent`).
pub(crate) fn not_sent(err: SendError, kind: fn(NotSent) -> ErrorKind) -> OpError {
    let reason = match &err {
        SendError::UnknownSession(_) => {
            return OpError::new(ErrorKind::UnknownSession, err.to_string())
        }
        SendError::Invalid(_) => NotSent::Invalid,
        SendError::NotConnected(_) => NotSent::NotConnected,
        SendError::WriteFailed(_) => NotSent::WriteFailed,
    };
    OpError::new(kind(reason), err.to_string())
}

/// Read-only worker queries (`answer`): the failure's `reason`, and the
/// worker's own refusal under `worker_error`.
impl From<QueryError> for OpError {
    fn from(err: QueryError) -> OpError {
        let kind = match &err {
            QueryError::UnknownSession(_) => ErrorKind::UnknownSession,
            QueryError::Invalid(_) => ErrorKind::InvalidArguments,
            QueryError::Busy { .. } => ErrorKind::TooManyQueries,
            _ => ErrorKind::AnswerUnavailable,
        };
        let mut op = OpError::new(kind, err.to_string()).with("reason", err.reason().into());
        if let QueryError::Rejected { code, message } = &err {
            op = op.with(
                "worker_error",
                serde_json::json!({"code": code, "message": message}),
            );
        }
        op
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind (each `NotSent` reason once).
    const ALL: [ErrorKind; 34] = {
        use ErrorKind::*;
        [
            UnknownSession,
            InvalidSession,
            SessionExists,
            SessionBusy,
            HeadlessRestricted,
            InvalidPolicy,
            InvalidArguments,
            StaleLifecycle,
            RecoveryConflict,
            CleanupFailed,
            InputNotSent(NotSent::Invalid),
            InputNotSent(NotSent::NotConnected),
            InputNotSent(NotSent::WriteFailed),
            SignalNotSent(NotSent::Invalid),
            SignalNotSent(NotSent::NotConnected),
            SignalNotSent(NotSent::WriteFailed),
            UnknownConfirmation,
            ConfirmationRejected,
            UnknownGrant,
            TooManyGrants,
            UnknownChoice,
            DisplaySnapshotTooLarge,
            TooManyQueries,
            AnswerUnavailable,
            InvalidConfiguration,
            ConfigurationNotFound,
            ConfigurationConflict,
            ConfigurationTooLarge,
            InvalidSkill,
            SkillNotFound,
            TooManySkills,
            Storage,
            StartFailed,
            Internal,
        ]
    };

    #[test]
    fn codes_and_statuses_follow_the_seed() {
        use ErrorKind::*;
        let cases = [
            (UnknownSession, "unknown_session", 404),
            (InvalidSession, "invalid_session", 400),
            (SessionExists, "session_exists", 409),
            (SessionBusy, "session_busy", 409),
            (HeadlessRestricted, "headless_restricted", 409),
            (InvalidPolicy, "invalid_policy", 400),
            (InputNotSent(NotSent::Invalid), "input_not_sent", 400),
            (InputNotSent(NotSent::NotConnected), "input_not_sent", 409),
            (SignalNotSent(NotSent::WriteFailed), "signal_not_sent", 409),
            (UnknownConfirmation, "unknown_confirmation", 404),
            (ConfirmationRejected, "confirmation_rejected", 409),
            (UnknownGrant, "unknown_grant", 404),
            (TooManyGrants, "too_many_grants", 409),
            (Storage, "storage_error", 500),
            (InvalidConfiguration, "invalid_configuration", 400),
            (ConfigurationNotFound, "configuration_not_found", 404),
            (ConfigurationConflict, "configuration_conflict", 409),
            (ConfigurationTooLarge, "configuration_too_large", 413),
            (InvalidSkill, "invalid_skill", 400),
            (SkillNotFound, "skill_not_found", 404),
            (TooManySkills, "too_many_skills", 500),
            (StartFailed, "worker_action_failed", 409),
        ];
        for (kind, code, status) in cases {
            assert_eq!(
                (kind.code(), kind.http_status()),
                (code, status),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn operator_refusals_keep_their_codes_and_messages() {
        let cases = [
            (
                Refusal::NotFound("no such session".into()),
                "unknown_session",
                404,
            ),
            (Refusal::InvalidPolicy("p".into()), "invalid_policy", 400),
            (
                Refusal::InvalidArguments("a".into()),
                "invalid_arguments",
                400,
            ),
            (Refusal::StaleLifecycle("l".into()), "stale_lifecycle", 409),
            (
                Refusal::RecoveryConflict("r".into()),
                "recovery_conflict",
                409,
            ),
            (Refusal::CleanupFailed("c".into()), "cleanup_failed", 409),
            (Refusal::Storage("s".into()), "storage_error", 500),
            // A tool route's own refusal is a defect on an operator route.
            (Refusal::Unauthorized("u".into()), "internal_error", 500),
        ];
        for (refusal, code, status) in cases {
            let message = refusal.message().to_string();
            let op = OpError::from(refusal);
            assert_eq!((op.code(), op.http_status()), (code, status), "{message}");
            assert_eq!(op.message, message);
        }
    }

    #[test]
    fn every_code_is_lowercase_snake_case() {
        for kind in ALL {
            let code = kind.code();
            assert!(
                code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{code}"
            );
            assert!((400..600).contains(&kind.http_status()), "{kind:?}");
        }
    }
}
