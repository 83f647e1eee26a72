//! How the Shard front-end renders a refused hub command: each
//! [`ErrorKind`] onto seed 004's error-code registry (`wire::shard::message`).

use serde_json::Value;

use crate::ops::{ErrorKind, NotSent, OpError};
use crate::wire::shard::message::{Code, Refusal};

impl Code {
    /// The Shard code of a refused hub command.
    pub fn of(kind: ErrorKind) -> Code {
        use ErrorKind::*;
        match kind {
            UnknownSession | UnknownConfirmation | UnknownChoice | UnknownGrant => Code::NotFound,
            ConfigurationNotFound | SkillNotFound => Code::NotFound,
            InvalidSession | InvalidPolicy | InvalidArguments | DisplaySnapshotTooLarge => {
                Code::InvalidRequest
            }
            InvalidConfiguration | ConfigurationTooLarge | InvalidSkill => Code::InvalidRequest,
            ConfigurationConflict => Code::Conflict,
            InputNotSent(NotSent::Invalid) | SignalNotSent(NotSent::Invalid) => {
                Code::InvalidRequest
            }
            HeadlessRestricted => Code::PermissionDenied,
            SessionExists | SessionBusy | StaleLifecycle | RecoveryConflict | CleanupFailed
            | ConfirmationRejected | TooManyQueries | AnswerUnavailable | TooManyGrants => {
                Code::Conflict
            }
            InputNotSent(_) | SignalNotSent(_) => Code::Conflict,
            StartFailed => Code::RuntimeStartFailed,
            TooManySkills | Storage | Internal => Code::InternalError,
        }
    }
}

/// A refused hub command: its kind's code, its message, and its details
/// (when any) as `data`.
impl From<OpError> for Refusal {
    fn from(err: OpError) -> Refusal {
        let data = (!err.details.is_empty()).then(|| Value::Object(err.details.clone()));
        Refusal {
            code: Code::of(err.kind),
            message: err.message,
            data,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn hub_refusals_map_onto_the_registry() {
        assert_eq!(Code::of(ErrorKind::UnknownSession), Code::NotFound);
        assert_eq!(
            Code::of(ErrorKind::HeadlessRestricted),
            Code::PermissionDenied
        );
        assert_eq!(Code::of(ErrorKind::SessionBusy), Code::Conflict);
        assert_eq!(
            Code::of(ErrorKind::InputNotSent(NotSent::Invalid)),
            Code::InvalidRequest
        );
        assert_eq!(
            Code::of(ErrorKind::InputNotSent(NotSent::NotConnected)),
            Code::Conflict
        );
        assert_eq!(Code::of(ErrorKind::Storage), Code::InternalError);
        assert_eq!(Code::of(ErrorKind::StartFailed), Code::RuntimeStartFailed);
        let refusal: Refusal = OpError::new(ErrorKind::UnknownSession, "no session")
            .with("x", json!(1))
            .into();
        assert_eq!(
            refusal.to_json(),
            json!({"code": "NOT_FOUND", "message": "no session", "data": {"x": 1}})
        );
    }
}
