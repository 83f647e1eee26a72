//! The one error type of the built-in worker's startup and of the few
//! failures that end it early. Everything after startup that a real worker
//! reports on the wire (rejections, storage failures) is an event, not an
//! error value; `main` maps a `MockError` to exit status 1.

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::wire::yaml_edit::read::ReadError;

/// Why the built-in worker could not start, or had to stop.
#[derive(Debug)]
pub enum MockError {
    /// A file or directory operation failed.
    Io {
        path: PathBuf,
        /// What was being done, as a verb phrase: "read", "create".
        op: &'static str,
        source: io::Error,
    },
    /// The configuration file is not one YAML mapping document.
    Syntax { path: PathBuf, source: ReadError },
    /// A configuration value has the wrong type or an impossible value.
    Config { key: String, reason: String },
    /// `--session` is not 1-128 ASCII letters, digits, `_` or `-`.
    SessionId { value: String },
    /// Another process holds `session.lock` in the persistence directory.
    Locked { path: PathBuf },
    /// The saved `state.json` cannot be restored.
    Restore { path: PathBuf, reason: String },
    /// The hub broke the framing rules on the event connection (binary
    /// frame, unparseable JSON, unknown envelope type). The real worker
    /// treats this as a fatal event-client error and does not reconnect.
    Protocol { reason: String },
}

impl fmt::Display for MockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MockError::Io { path, op, source } => {
                write!(f, "cannot {op} {}: {source}", path.display())
            }
            MockError::Syntax { path, source } => {
                write!(f, "the worker configuration {} {source}", path.display())
            }
            MockError::Config { key, reason } => write!(f, "worker configuration {key}: {reason}"),
            MockError::SessionId { value } => write!(
                f,
                "session id {value:?} must be 1-128 ASCII letters, digits, '_' or '-'"
            ),
            MockError::Locked { path } => write!(
                f,
                "{} is held by another worker for the same session",
                path.display()
            ),
            MockError::Restore { path, reason } => {
                write!(f, "cannot restore {}: {reason}", path.display())
            }
            MockError::Protocol { reason } => {
                write!(f, "fatal event-connection protocol error: {reason}")
            }
        }
    }
}

impl std::error::Error for MockError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MockError::Io { source, .. } => Some(source),
            MockError::Syntax { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl MockError {
    pub(crate) fn io(path: impl Into<PathBuf>, op: &'static str, source: io::Error) -> Self {
        MockError::Io {
            path: path.into(),
            op,
            source,
        }
    }

    pub(crate) fn config(key: &str, reason: impl Into<String>) -> Self {
        MockError::Config {
            key: key.to_string(),
            reason: reason.into(),
        }
    }
}
