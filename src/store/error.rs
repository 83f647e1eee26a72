//! What a store operation can fail with, and the mapping of SQLite's
//! errors onto it.

use std::error::Error;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use rusqlite::ErrorCode;

/// Why a store operation failed.
#[derive(Debug)]
pub enum StoreError {
    /// A filesystem operation on the database file failed.
    Io {
        path: PathBuf,
        op: &'static str,
        err: io::Error,
    },
    /// The file exists but is not an SQLite database.
    NotADatabase { path: PathBuf },
    /// An SQLite database that this hub did not create.
    Foreign { path: PathBuf },
    /// A database written by a newer hub with a schema this build lacks.
    TooNew {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    /// SQLite reports the database damaged.
    Corrupt { path: PathBuf, detail: String },
    /// A Node hub file (`hub.json`, a subagent's `metadata.json`, ...) that
    /// the one-time import refuses; nothing was imported.
    NodeImport { path: PathBuf, detail: String },
    /// `insert_session` with an id that is already stored.
    SessionExists { id: String },
    /// Any other SQLite failure, named by the operation that hit it. A write
    /// to a session or process row that does not exist is reported here with
    /// `rusqlite::Error::QueryReturnedNoRows`; a process or plan for an
    /// unknown session fails the foreign-key constraint.
    Sqlite {
        op: &'static str,
        err: rusqlite::Error,
    },
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Io { path, op, err } => {
                write!(f, "{op} {}: {err}", path.display())
            }
            StoreError::NotADatabase { path } => write!(
                f,
                "open store {}: file is not an sqlite database; move it aside so the hub \
                 can create a fresh one, or point the hub at another data directory",
                path.display()
            ),
            StoreError::Foreign { path } => write!(
                f,
                "open store {}: sqlite database was not created by simplex-hub (no hub \
                 application id or hub_meta table); move it aside or point the hub at \
                 another data directory",
                path.display()
            ),
            StoreError::TooNew {
                path,
                found,
                supported,
            } => write!(
                f,
                "open store {}: schema version {found} is newer than this build supports \
                 ({supported}); run the newer simplex-hub that wrote it, or move the file \
                 aside to start empty",
                path.display()
            ),
            StoreError::Corrupt { path, detail } => write!(
                f,
                "store {}: database is corrupt ({detail}); stop the hub, copy the file with \
                 its -wal and -shm siblings somewhere safe, then restore a backup or move \
                 all three aside to start empty",
                path.display()
            ),
            StoreError::NodeImport { path, detail } => write!(
                f,
                "import of the Node hub's data refused: {}: {detail}; nothing was imported \
                 and the Node hub's files are unchanged. Fix that file or move it aside \
                 (moving hub.json aside starts the hub without the Node hub's sessions)",
                path.display()
            ),
            StoreError::SessionExists { id } => {
                write!(f, "insert session {id}: session already exists")
            }
            StoreError::Sqlite { op, err } if self.is_disk_full() => write!(
                f,
                "{op}: the disk holding the data directory is full ({err}); nothing was \
                 stored, and writes succeed again once there is room"
            ),
            StoreError::Sqlite { op, err } => write!(f, "{op}: {err}"),
        }
    }
}

impl StoreError {
    /// Whether the file system holding the store has no room (SQLite's
    /// `SQLITE_FULL`, or `ENOSPC`/`EDQUOT` from a file operation): the
    /// write failed whole and the same write succeeds once there is room.
    pub fn is_disk_full(&self) -> bool {
        match self {
            StoreError::Sqlite { err, .. } => err.sqlite_error_code() == Some(ErrorCode::DiskFull),
            StoreError::Io { err, .. } => io_is_disk_full(err),
            _ => false,
        }
    }
}

/// Whether an I/O error says the file system has no room.
pub fn io_is_disk_full(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

impl Error for StoreError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            StoreError::Io { err, .. } => Some(err),
            StoreError::Sqlite { err, .. } => Some(err),
            _ => None,
        }
    }
}

/// Wraps a rusqlite error for an operation.
pub(super) fn sql(op: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError {
    move |err| StoreError::Sqlite { op, err }
}

/// Like [`sql`], but maps SQLite's "not a database" and "corrupt" codes to
/// the dedicated variants naming the file.
pub(super) fn classify<'a>(
    path: &'a Path,
    op: &'static str,
) -> impl FnOnce(rusqlite::Error) -> StoreError + 'a {
    move |err| match err.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => StoreError::NotADatabase {
            path: path.to_path_buf(),
        },
        Some(ErrorCode::DatabaseCorrupt) => StoreError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("{op}: {err}"),
        },
        _ => StoreError::Sqlite { op, err },
    }
}

/// The error for an UPDATE that matched no row.
pub(super) fn no_row(op: &'static str) -> StoreError {
    StoreError::Sqlite {
        op,
        err: rusqlite::Error::QueryReturnedNoRows,
    }
}
