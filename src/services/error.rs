//! The failures of the session operations (create, delete, plans), mapped
//! to stable codes by the command layer.

use std::fmt;
use std::path::PathBuf;

use crate::store::StoreError;

/// Failures of hub operations, mapped to stable codes by the API layer.
#[derive(Debug)]
pub enum HubError {
    /// The id or spec is not acceptable.
    InvalidSession(String),
    SessionExists(String),
    UnknownSession(String),
    SessionBusy {
        id: String,
        reason: &'static str,
    },
    /// The store refused or failed a read or write.
    Store(StoreError),
    /// A session directory could not be created.
    Files {
        path: PathBuf,
        err: std::io::Error,
    },
}

impl fmt::Display for HubError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HubError::InvalidSession(msg) => f.write_str(msg),
            HubError::SessionExists(id) => {
                write!(
                    f,
                    "session {} already exists",
                    crate::wire::worker::display::quote(id)
                )
            }
            HubError::UnknownSession(id) => {
                write!(f, "no session {}", crate::wire::worker::display::quote(id))
            }
            HubError::SessionBusy { id, reason } => write!(
                f,
                "session {} is busy: {reason}",
                crate::wire::worker::display::quote(id)
            ),
            HubError::Store(err) => write!(f, "storage failure: {err}"),
            HubError::Files { path, err } => {
                write!(
                    f,
                    "storage failure: cannot create {}: {err}",
                    path.display()
                )
            }
        }
    }
}

impl HubError {
    /// Whether the write failed because the data directory's disk is full.
    pub fn is_disk_full(&self) -> bool {
        match self {
            HubError::Store(err) => err.is_disk_full(),
            HubError::Files { err, .. } => crate::store::io_is_disk_full(err),
            _ => false,
        }
    }
}

impl std::error::Error for HubError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HubError::Store(err) => Some(err),
            HubError::Files { err, .. } => Some(err),
            _ => None,
        }
    }
}
