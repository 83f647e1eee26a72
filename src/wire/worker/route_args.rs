//! The one refusal every tools-listener route gives for bad arguments
//! (`invalid_arguments`), shared by the plan routes and the subagent
//! routes so both word the same mistake the same way (pure).

use std::fmt;

use super::display::quote;
use super::payload::PayloadError;

/// Why a route's arguments were refused. A route uses the variants that
/// apply to its grammar (the plan routes never forbid or combine fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgError {
    /// The arguments are not a JSON object.
    NotAnObject { found: &'static str },
    /// `subject` (the serialized arguments, a field, its encoding) is
    /// over its byte limit.
    TooLarge {
        subject: &'static str,
        bytes: usize,
        max: usize,
    },
    /// An argument (or nested field, dotted) the route does not take.
    Unknown { route: &'static str, key: String },
    /// A required argument is absent.
    Missing { field: &'static str },
    /// An argument of the wrong type or value.
    Invalid {
        field: &'static str,
        expected: &'static str,
        found: String,
    },
    /// An argument this operation refuses, even when null or empty.
    Forbidden {
        field: &'static str,
        operation: &'static str,
    },
    /// Two arguments that exclude each other.
    Conflict {
        field: &'static str,
        other: &'static str,
    },
    /// `options.confirmation` on a subagent send: the hub always sends
    /// `ask` itself.
    ConfirmationForbidden,
    /// `content` or `options` broke a worker payload rule.
    Payload {
        field: &'static str,
        error: PayloadError,
    },
}

impl ArgError {
    /// The stable rejection code.
    pub fn code(&self) -> &'static str {
        super::tool_frames::code::INVALID_ARGUMENTS
    }
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotAnObject { found } => {
                write!(f, "the arguments must be a JSON object, found {found}")
            }
            Self::TooLarge {
                subject,
                bytes,
                max,
            } => write!(
                f,
                "{subject} takes {bytes} bytes, more than the {max}-byte limit"
            ),
            Self::Unknown { route, key } => {
                write!(f, "{route} does not take the argument {}", quote(key))
            }
            Self::Missing { field } => write!(f, "the argument {field} is required"),
            Self::Invalid {
                field,
                expected,
                found,
            } => write!(f, "the argument {field} must be {expected}, found {found}"),
            Self::Forbidden { field, operation } => write!(
                f,
                "operation {operation} does not take the argument {field}, even when null or empty"
            ),
            Self::Conflict { field, other } => {
                write!(f, "the arguments {field} and {other} cannot be combined")
            }
            Self::ConfirmationForbidden => write!(
                f,
                "the argument options.confirmation is forbidden: the hub always asks, and the \
                 child's operator policy answers its confirmations"
            ),
            Self::Payload { field, error } => write!(f, "the argument {field} is invalid: {error}"),
        }
    }
}

impl std::error::Error for ArgError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_is_invalid_arguments_and_names_its_subject() {
        let big = ArgError::TooLarge {
            subject: "markdown",
            bytes: 65537,
            max: 65536,
        };
        assert_eq!(big.code(), "invalid_arguments");
        assert_eq!(
            big.to_string(),
            "markdown takes 65537 bytes, more than the 65536-byte limit"
        );
        let unknown = ArgError::Unknown {
            route: "plan/read",
            key: "x\ny".into(),
        };
        assert!(unknown.to_string().starts_with("plan/read does not take"));
        assert!(!unknown.to_string().contains('\n'));
    }
}
