//! The hub's SQLite store: one database file `<dataDir>/hub.db` holding
//! sessions, their worker processes and their plans.
//!
//! [`Store`] wraps a single `rusqlite::Connection`. It does no locking of
//! its own: the hub keeps it behind one Mutex and never holds that across
//! network I/O. Every write is a single SQL statement (hence one implicit
//! transaction); schema migrations run one explicit transaction each.
//!
//! Durability: WAL journal with `synchronous=FULL`, so a method that returned
//! `Ok` has committed and fsynced its change. The schema, pragmas, versioning
//! and the open-time refusals are described in `docs/store.md`.

use std::error::Error;
use std::fmt;
use std::fs::{File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{ffi, params, Connection, ErrorCode, OpenFlags, OptionalExtension, Row};
use serde_json::Value;

/// `PRAGMA application_id` of every hub database ("SHB1").
pub const APPLICATION_ID: i32 = 0x5348_4231;

/// Forward migrations, oldest first. Step `i` (0-based) takes the schema from
/// version `i` to version `i + 1`. Never edit a released step: append a new
/// one instead (see docs/store.md).
const MIGRATIONS: &[&str] = &[
    // Version 1: sessions, their worker process and their plan.
    "CREATE TABLE hub_meta (
         key   TEXT PRIMARY KEY,
         value TEXT NOT NULL
     );
     CREATE TABLE sessions (
         id           TEXT PRIMARY KEY,
         created_at   TEXT NOT NULL,
         spec         TEXT NOT NULL,
         token        TEXT NOT NULL,
         lifecycle_id TEXT NOT NULL,
         kind         TEXT NOT NULL DEFAULT 'ordinary'
     );
     CREATE TABLE processes (
         session_id   TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
         pid          INTEGER NOT NULL CHECK (pid BETWEEN 1 AND 4294967295),
         start_time   INTEGER CHECK (start_time IS NULL OR start_time >= 0),
         started_at   TEXT NOT NULL,
         command      TEXT NOT NULL,
         args         TEXT NOT NULL,
         cwd          TEXT NOT NULL,
         log_path     TEXT,
         state        TEXT NOT NULL,
         lifecycle_id TEXT NOT NULL
     );
     CREATE TABLE plans (
         session_id TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
         markdown   TEXT NOT NULL,
         revision   INTEGER NOT NULL CHECK (revision >= 0),
         updated_at TEXT
     );",
    // Version 2: headless subagents. Each child is also a `sessions` row
    // (kind 'headless'); `meta` holds its ownership and lifecycle record
    // and `outcomes` its request-outcome tail, both as JSON. Receipts of
    // mutating subagent calls are keyed by the caller's lifecycle, worker,
    // run and request ids.
    "CREATE TABLE subagents (
         id       TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
         meta     TEXT NOT NULL,
         outcomes TEXT NOT NULL DEFAULT '[]'
     );
     CREATE TABLE subagent_receipts (
         key        TEXT PRIMARY KEY,
         hash       TEXT NOT NULL,
         result     TEXT NOT NULL,
         created_ms INTEGER NOT NULL CHECK (created_ms >= 0)
     );
     CREATE INDEX subagent_receipts_age ON subagent_receipts (created_ms);",
];

/// The schema version this build creates and understands.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// Tables the current schema must contain after migration.
const REQUIRED_TABLES: &[&str] = &[
    "hub_meta",
    "sessions",
    "processes",
    "plans",
    "subagents",
    "subagent_receipts",
];

/// How long a statement waits for a lock held by another connection (only
/// an operator's `sqlite3` shell or a backup tool can hold one).
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Most rows `integrity_check` and the open-time `quick_check` report.
const CHECK_MAX_ERRORS: u32 = 20;

/// One supervised session as persisted.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRecord {
    pub id: String,
    /// RFC 3339 UTC timestamp (`util::time`), so text order is time order.
    pub created_at: String,
    /// The session's launch specification, stored as JSON text.
    pub spec: Value,
    pub token: String,
    pub lifecycle_id: String,
    /// `"ordinary"` unless the session is special.
    pub kind: String,
}

/// The worker process currently belonging to a session.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessRecord {
    pub session_id: String,
    pub pid: u32,
    /// `/proc/<pid>/stat` field 22 (start time in clock ticks), `None` when
    /// unknown; with `pid` it identifies the process across PID reuse.
    pub start_time: Option<u64>,
    pub started_at: String,
    pub command: String,
    pub args: Vec<String>,
    pub cwd: String,
    pub log_path: Option<String>,
    pub state: String,
    pub lifecycle_id: String,
}

/// A session's plan. Revision 0 with empty markdown means "no plan yet".
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PlanRecord {
    pub markdown: String,
    pub revision: u64,
    pub updated_at: Option<String>,
}

/// A headless child's stored records (see migration 2).
#[derive(Debug, Clone, PartialEq)]
pub struct SubagentRecord {
    pub id: String,
    pub meta: Value,
    pub outcomes: Value,
}

/// The recorded result of one mutating subagent call.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceiptRecord {
    /// Caller lifecycle, worker, run and request ids, joined unambiguously.
    pub key: String,
    /// Canonical hash of the route and its arguments.
    pub hash: String,
    pub result: Value,
    /// Milliseconds since the Unix epoch.
    pub created_ms: u64,
}

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
            StoreError::SessionExists { id } => {
                write!(f, "insert session {id}: session already exists")
            }
            StoreError::Sqlite { op, err } => write!(f, "{op}: {err}"),
        }
    }
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
fn sql(op: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError {
    move |err| StoreError::Sqlite { op, err }
}

/// Like [`sql`], but maps SQLite's "not a database" and "corrupt" codes to
/// the dedicated variants naming the file.
fn classify<'a>(
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
fn no_row(op: &'static str) -> StoreError {
    StoreError::Sqlite {
        op,
        err: rusqlite::Error::QueryReturnedNoRows,
    }
}

/// The hub database. See the module documentation.
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

impl Store {
    /// Checkpoints the WAL into the database file and closes the
    /// connection (at hub shutdown, so the file on disk is complete by
    /// itself). Any later call fails: the store is then an empty
    /// in-memory database with none of the hub's tables.
    pub fn close(&mut self) -> Result<(), StoreError> {
        self.conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .map_err(|err| StoreError::Sqlite {
                op: "checkpoint the WAL",
                err,
            })?;
        let spare = Connection::open_in_memory().map_err(|err| StoreError::Sqlite {
            op: "close the store",
            err,
        })?;
        let conn = std::mem::replace(&mut self.conn, spare);
        conn.close().map_err(|(_, err)| StoreError::Sqlite {
            op: "close the store",
            err,
        })
    }

    /// Opens (creating if absent, mode 0600) and migrates the database at
    /// `path`. Refuses files that are not SQLite, not ours, too new or
    /// corrupt, without modifying them.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        prepare_file(path)?;

        // No URI interpretation of the path, no implicit creation (done above).
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn =
            Connection::open_with_flags(path, flags).map_err(classify(path, "open database"))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(sql("set busy_timeout"))?;
        conn.set_prepared_statement_cache_capacity(32);

        // Identify the file before changing anything in it.
        let app_id: i32 = conn
            .pragma_query_value(None, "application_id", |r| r.get(0))
            .map_err(classify(path, "read application_id"))?;
        let raw_version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(classify(path, "read user_version"))?;
        let objects: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
            .map_err(classify(path, "read schema"))?;
        let fresh = app_id == 0 && raw_version == 0 && objects == 0;
        if !fresh && app_id != APPLICATION_ID {
            return Err(StoreError::Foreign {
                path: path.to_path_buf(),
            });
        }
        let version = u32::try_from(raw_version).map_err(|_| StoreError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("negative schema version {raw_version}"),
        })?;
        if !fresh {
            if version > SCHEMA_VERSION {
                return Err(StoreError::TooNew {
                    path: path.to_path_buf(),
                    found: version,
                    supported: SCHEMA_VERSION,
                });
            }
            let ours = if version == 0 {
                objects == 0
            } else {
                table_exists(&conn, "hub_meta").map_err(classify(path, "read schema"))?
            };
            if !ours {
                return Err(StoreError::Foreign {
                    path: path.to_path_buf(),
                });
            }
            let report = check(&conn, "quick_check").map_err(classify(path, "quick_check"))?;
            if report != "ok" {
                return Err(StoreError::Corrupt {
                    path: path.to_path_buf(),
                    detail: format!("quick_check: {}", summarize(&report)),
                });
            }
        }

        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .map_err(classify(path, "set journal_mode=WAL"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Io {
                path: path.to_path_buf(),
                op: "enable wal journal on",
                err: io::Error::other(format!("sqlite kept journal mode {mode}")),
            });
        }
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(sql("set synchronous=FULL"))?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(sql("set foreign_keys=ON"))?;

        migrate(&mut conn, path, version)?;

        for table in REQUIRED_TABLES {
            if !table_exists(&conn, table).map_err(classify(path, "read schema"))? {
                return Err(StoreError::Corrupt {
                    path: path.to_path_buf(),
                    detail: format!("schema version {SCHEMA_VERSION} lacks table {table}"),
                });
            }
        }

        Ok(Store {
            conn,
            path: path.to_path_buf(),
        })
    }

    /// The schema version recorded in the file (`PRAGMA user_version`).
    pub fn schema_version(&self) -> Result<u32, StoreError> {
        let v: i64 = self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(sql("read user_version"))?;
        Ok(u32::try_from(v).unwrap_or(0))
    }

    /// Stores a new session; `SessionExists` if the id is taken.
    pub fn insert_session(&self, rec: &SessionRecord) -> Result<(), StoreError> {
        const OP: &str = "insert session";
        let mut stmt = self
            .conn
            .prepare_cached(
                "INSERT INTO sessions (id, created_at, spec, token, lifecycle_id, kind)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .map_err(sql(OP))?;
        match stmt.execute(params![
            rec.id,
            rec.created_at,
            rec.spec.to_string(),
            rec.token,
            rec.lifecycle_id,
            rec.kind
        ]) {
            Ok(_) => Ok(()),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.extended_code == ffi::SQLITE_CONSTRAINT_PRIMARYKEY =>
            {
                Err(StoreError::SessionExists { id: rec.id.clone() })
            }
            Err(err) => Err(StoreError::Sqlite { op: OP, err }),
        }
    }

    /// All sessions, oldest first (by `created_at`, then `id`). Rows that do
    /// not decode (for instance a spec that is not JSON) are logged and
    /// skipped, and stay in the file untouched.
    pub fn load_sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        const OP: &str = "load sessions";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT id, created_at, spec, token, lifecycle_id, kind
                 FROM sessions ORDER BY created_at, id",
            )
            .map_err(sql(OP))?;
        let rows = stmt
            .query_map([], |row| Ok(decode_session(row)))
            .map_err(sql(OP))?;
        let mut out = Vec::new();
        for row in rows {
            match row.map_err(sql(OP))? {
                Ok(rec) => out.push(rec),
                Err(msg) => log::warn!(
                    "store {}: skipping undecodable session row: {msg}",
                    self.path.display()
                ),
            }
        }
        Ok(out)
    }

    /// Replaces a session's spec. Errors if the session does not exist.
    pub fn update_session_spec(&self, id: &str, spec: &Value) -> Result<(), StoreError> {
        const OP: &str = "update session spec";
        let n = self
            .conn
            .prepare_cached("UPDATE sessions SET spec = ?2 WHERE id = ?1")
            .and_then(|mut s| s.execute(params![id, spec.to_string()]))
            .map_err(sql(OP))?;
        if n == 0 {
            return Err(no_row(OP));
        }
        Ok(())
    }

    /// Replaces a session's lifecycle id. Errors if the session does not
    /// exist. The process row keeps the lifecycle id it was started under.
    pub fn set_lifecycle_id(&self, id: &str, lifecycle_id: &str) -> Result<(), StoreError> {
        const OP: &str = "set session lifecycle id";
        let n = self
            .conn
            .prepare_cached("UPDATE sessions SET lifecycle_id = ?2 WHERE id = ?1")
            .and_then(|mut s| s.execute(params![id, lifecycle_id]))
            .map_err(sql(OP))?;
        if n == 0 {
            return Err(no_row(OP));
        }
        Ok(())
    }

    /// Deletes a session with its process and plan rows. `false` if there
    /// was no such session.
    pub fn delete_session(&self, id: &str) -> Result<bool, StoreError> {
        let n = self
            .conn
            .prepare_cached("DELETE FROM sessions WHERE id = ?1")
            .and_then(|mut s| s.execute(params![id]))
            .map_err(sql("delete session"))?;
        Ok(n > 0)
    }

    /// Inserts or replaces the process row of `rec.session_id`. The session
    /// must exist (foreign key).
    pub fn put_process(&self, rec: &ProcessRecord) -> Result<(), StoreError> {
        let args = serde_json::to_string(&rec.args).unwrap_or_else(|_| "[]".to_owned());
        self.conn
            .prepare_cached(
                "INSERT INTO processes (session_id, pid, start_time, started_at, command,
                                        args, cwd, log_path, state, lifecycle_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
                 ON CONFLICT (session_id) DO UPDATE SET
                     pid = excluded.pid,
                     start_time = excluded.start_time,
                     started_at = excluded.started_at,
                     command = excluded.command,
                     args = excluded.args,
                     cwd = excluded.cwd,
                     log_path = excluded.log_path,
                     state = excluded.state,
                     lifecycle_id = excluded.lifecycle_id",
            )
            .and_then(|mut s| {
                s.execute(params![
                    rec.session_id,
                    rec.pid,
                    rec.start_time,
                    rec.started_at,
                    rec.command,
                    args,
                    rec.cwd,
                    rec.log_path,
                    rec.state,
                    rec.lifecycle_id
                ])
            })
            .map_err(sql("put process"))?;
        Ok(())
    }

    /// Sets the state of a session's process row. Errors if there is none.
    pub fn set_process_state(&self, session_id: &str, state: &str) -> Result<(), StoreError> {
        const OP: &str = "set process state";
        let n = self
            .conn
            .prepare_cached("UPDATE processes SET state = ?2 WHERE session_id = ?1")
            .and_then(|mut s| s.execute(params![session_id, state]))
            .map_err(sql(OP))?;
        if n == 0 {
            return Err(no_row(OP));
        }
        Ok(())
    }

    /// Removes a session's process row; nothing to do if there is none.
    pub fn clear_process(&self, session_id: &str) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("DELETE FROM processes WHERE session_id = ?1")
            .and_then(|mut s| s.execute(params![session_id]))
            .map_err(sql("clear process"))?;
        Ok(())
    }

    /// All process rows, by `started_at` then `session_id`. Undecodable rows
    /// (args not a JSON string array, pid out of range) are logged and
    /// skipped.
    pub fn load_processes(&self) -> Result<Vec<ProcessRecord>, StoreError> {
        const OP: &str = "load processes";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT session_id, pid, start_time, started_at, command, args, cwd,
                        log_path, state, lifecycle_id
                 FROM processes ORDER BY started_at, session_id",
            )
            .map_err(sql(OP))?;
        let rows = stmt
            .query_map([], |row| Ok(decode_process(row)))
            .map_err(sql(OP))?;
        let mut out = Vec::new();
        for row in rows {
            match row.map_err(sql(OP))? {
                Ok(rec) => out.push(rec),
                Err(msg) => log::warn!(
                    "store {}: skipping undecodable process row: {msg}",
                    self.path.display()
                ),
            }
        }
        Ok(out)
    }

    /// A session's plan; revision 0, empty markdown and no timestamp when
    /// none is stored.
    pub fn get_plan(&self, session_id: &str) -> Result<PlanRecord, StoreError> {
        let plan = self
            .conn
            .prepare_cached(
                "SELECT markdown, revision, updated_at FROM plans WHERE session_id = ?1",
            )
            .and_then(|mut s| {
                s.query_row(params![session_id], |r| {
                    Ok(PlanRecord {
                        markdown: r.get(0)?,
                        revision: r.get(1)?,
                        updated_at: r.get(2)?,
                    })
                })
                .optional()
            })
            .map_err(sql("get plan"))?;
        Ok(plan.unwrap_or_default())
    }

    /// Inserts or replaces a session's plan as given (the caller decides the
    /// revision). The session must exist (foreign key).
    pub fn put_plan(&self, session_id: &str, plan: &PlanRecord) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO plans (session_id, markdown, revision, updated_at)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (session_id) DO UPDATE SET
                     markdown = excluded.markdown,
                     revision = excluded.revision,
                     updated_at = excluded.updated_at",
            )
            .and_then(|mut s| {
                s.execute(params![
                    session_id,
                    plan.markdown,
                    plan.revision,
                    plan.updated_at
                ])
            })
            .map_err(sql("put plan"))?;
        Ok(())
    }

    /// Creates a headless child: its session row, its subagent row and the
    /// receipt of the call that created it, in one transaction.
    pub fn insert_subagent(
        &mut self,
        session: &SessionRecord,
        child: &SubagentRecord,
        receipt: Option<&ReceiptRecord>,
    ) -> Result<(), StoreError> {
        const OP: &str = "insert subagent";
        let tx = self.conn.transaction().map_err(sql(OP))?;
        tx.execute(
            "INSERT INTO sessions (id, created_at, spec, token, lifecycle_id, kind)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                session.id,
                session.created_at,
                session.spec.to_string(),
                session.token,
                session.lifecycle_id,
                session.kind
            ],
        )
        .map_err(sql(OP))?;
        tx.execute(
            "INSERT INTO subagents (id, meta, outcomes) VALUES (?1, ?2, ?3)",
            params![child.id, child.meta.to_string(), child.outcomes.to_string()],
        )
        .map_err(sql(OP))?;
        if let Some(receipt) = receipt {
            put_receipt_in(&tx, receipt).map_err(sql(OP))?;
        }
        tx.commit().map_err(sql(OP))
    }

    /// Replaces a child's ownership/lifecycle record.
    pub fn put_subagent_meta(&self, id: &str, meta: &Value) -> Result<(), StoreError> {
        const OP: &str = "update subagent metadata";
        let n = self
            .conn
            .prepare_cached("UPDATE subagents SET meta = ?2 WHERE id = ?1")
            .and_then(|mut s| s.execute(params![id, meta.to_string()]))
            .map_err(sql(OP))?;
        if n == 0 {
            return Err(no_row(OP));
        }
        Ok(())
    }

    /// Replaces a child's request-outcome tail.
    pub fn put_subagent_outcomes(&self, id: &str, outcomes: &Value) -> Result<(), StoreError> {
        const OP: &str = "update subagent outcomes";
        let n = self
            .conn
            .prepare_cached("UPDATE subagents SET outcomes = ?2 WHERE id = ?1")
            .and_then(|mut s| s.execute(params![id, outcomes.to_string()]))
            .map_err(sql(OP))?;
        if n == 0 {
            return Err(no_row(OP));
        }
        Ok(())
    }

    /// Every stored child. Rows whose JSON does not decode come back with
    /// `Value::Null` in that field, for the caller to quarantine.
    pub fn load_subagents(&self) -> Result<Vec<SubagentRecord>, StoreError> {
        const OP: &str = "load subagents";
        let mut stmt = self
            .conn
            .prepare_cached("SELECT id, meta, outcomes FROM subagents ORDER BY id")
            .map_err(sql(OP))?;
        let rows = stmt
            .query_map([], |row| {
                let id: String = row.get(0)?;
                let meta: String = row.get(1)?;
                let outcomes: String = row.get(2)?;
                Ok(SubagentRecord {
                    id,
                    meta: serde_json::from_str(&meta).unwrap_or(Value::Null),
                    outcomes: serde_json::from_str(&outcomes).unwrap_or(Value::Null),
                })
            })
            .map_err(sql(OP))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(sql(OP))
    }

    /// The receipt stored under `key`, if any.
    pub fn get_receipt(&self, key: &str) -> Result<Option<ReceiptRecord>, StoreError> {
        const OP: &str = "get receipt";
        self.conn
            .prepare_cached(
                "SELECT key, hash, result, created_ms FROM subagent_receipts WHERE key = ?1",
            )
            .and_then(|mut s| {
                s.query_row(params![key], |r| {
                    let result: String = r.get(2)?;
                    Ok(ReceiptRecord {
                        key: r.get(0)?,
                        hash: r.get(1)?,
                        result: serde_json::from_str(&result).unwrap_or(Value::Null),
                        created_ms: r.get(3)?,
                    })
                })
                .optional()
            })
            .map_err(sql(OP))
    }

    /// Stores (or replaces) a receipt.
    pub fn put_receipt(&self, receipt: &ReceiptRecord) -> Result<(), StoreError> {
        put_receipt_in(&self.conn, receipt).map_err(sql("put receipt"))?;
        Ok(())
    }

    /// Drops receipts older than `oldest_ms` and all but the newest `keep`.
    pub fn prune_receipts(&self, oldest_ms: u64, keep: usize) -> Result<(), StoreError> {
        const OP: &str = "prune receipts";
        self.conn
            .prepare_cached("DELETE FROM subagent_receipts WHERE created_ms < ?1")
            .and_then(|mut s| s.execute(params![oldest_ms]))
            .map_err(sql(OP))?;
        self.conn
            .prepare_cached(
                "DELETE FROM subagent_receipts WHERE key NOT IN
                 (SELECT key FROM subagent_receipts ORDER BY created_ms DESC, key LIMIT ?1)",
            )
            .and_then(|mut s| s.execute(params![keep as i64]))
            .map_err(sql(OP))?;
        Ok(())
    }

    /// Runs `PRAGMA integrity_check`: `"ok"`, or SQLite's findings (at most
    /// 20, one per line). Corruption severe enough to stop the check is
    /// returned as `StoreError::Corrupt`.
    pub fn integrity_check(&self) -> Result<String, StoreError> {
        check(&self.conn, "integrity_check").map_err(classify(&self.path, "integrity_check"))
    }
}

/// Creates the database file with mode 0600 if absent (and syncs its
/// directory) and tightens the mode of an existing one. The handle is closed before SQLite opens the file:
/// closing any descriptor of a file drops the process's POSIX locks on it.
fn prepare_file(path: &Path) -> Result<(), StoreError> {
    let io_err = |op: &'static str| {
        move |err| StoreError::Io {
            path: path.to_path_buf(),
            op,
            err,
        }
    };
    let mut options = OpenOptions::new();
    options.read(true).write(true).mode(0o600);
    let file = match options.clone().create_new(true).open(path) {
        Ok(file) => {
            // Make the new directory entry itself durable.
            let dir = match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io_err("sync directory of new database file"))?;
            file
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            options.open(path).map_err(io_err("open database file"))?
        }
        Err(e) => return Err(io_err("create database file")(e)),
    };
    let meta = file.metadata().map_err(io_err("stat database file"))?;
    if !meta.is_file() {
        return Err(StoreError::Io {
            path: path.to_path_buf(),
            op: "open database file",
            err: io::Error::other("not a regular file"),
        });
    }
    if meta.permissions().mode() & 0o077 != 0 {
        log::warn!(
            "store {}: mode {:o} is readable by others; setting 0600",
            path.display(),
            meta.permissions().mode() & 0o777
        );
        file.set_permissions(Permissions::from_mode(0o600))
            .map_err(io_err("restrict permissions of database file"))?;
    }
    Ok(())
}

fn put_receipt_in(conn: &Connection, receipt: &ReceiptRecord) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "INSERT INTO subagent_receipts (key, hash, result, created_ms) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (key) DO UPDATE SET
             hash = excluded.hash, result = excluded.result, created_ms = excluded.created_ms",
    )?
    .execute(params![
        receipt.key,
        receipt.hash,
        receipt.result.to_string(),
        receipt.created_ms
    ])
}

/// Applies the migrations after `from`, one transaction per step, each
/// also recording the new `user_version`.
fn migrate(conn: &mut Connection, path: &Path, from: u32) -> Result<(), StoreError> {
    for (index, step) in MIGRATIONS.iter().enumerate().skip(from as usize) {
        let to = index as u32 + 1;
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(classify(path, "begin migration"))?;
        tx.execute_batch(step)
            .map_err(classify(path, "apply migration"))?;
        if to == 1 {
            tx.pragma_update(None, "application_id", APPLICATION_ID)
                .map_err(sql("set application_id"))?;
            tx.execute(
                "INSERT OR IGNORE INTO hub_meta (key, value) VALUES ('created_by', ?1)",
                params![concat!("simplex-hub ", env!("CARGO_PKG_VERSION"))],
            )
            .map_err(sql("record created_by"))?;
        }
        // Foreign keys are not enforced inside a migration's statements
        // retroactively; check the result before committing.
        let violations: i64 = tx
            .query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| {
                r.get(0)
            })
            .map_err(sql("check foreign keys after migration"))?;
        if violations != 0 {
            return Err(StoreError::Corrupt {
                path: path.to_path_buf(),
                detail: format!(
                    "migration to schema version {to} leaves {violations} foreign key violations"
                ),
            });
        }
        tx.pragma_update(None, "user_version", to)
            .map_err(sql("set user_version"))?;
        tx.commit().map_err(classify(path, "commit migration"))?;
        log::info!("store {}: migrated schema to version {to}", path.display());
    }
    Ok(())
}

fn table_exists(conn: &Connection, name: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
        params![name],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n > 0)
}

/// Runs `quick_check` or `integrity_check` and joins its rows.
fn check(conn: &Connection, pragma: &str) -> rusqlite::Result<String> {
    let mut stmt = conn.prepare(&format!("PRAGMA {pragma}({CHECK_MAX_ERRORS})"))?;
    let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
    let lines = rows.collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(if lines.is_empty() {
        "no result".to_owned()
    } else {
        lines.join("\n")
    })
}

/// The first few findings of a check report on one line, for an error
/// message (`integrity_check` returns the full report).
fn summarize(report: &str) -> String {
    const SHOWN: usize = 3;
    let findings: Vec<&str> = report
        .lines()
        .filter(|l| !l.starts_with("*** in database"))
        .collect();
    let mut out = findings
        .iter()
        .take(SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join("; ");
    if findings.len() > SHOWN {
        out.push_str(&format!("; and {} more", findings.len() - SHOWN));
    }
    out
}

fn decode_session(row: &Row<'_>) -> Result<SessionRecord, String> {
    let id: String = row.get(0).map_err(|e| format!("id: {e}"))?;
    let field = |e: rusqlite::Error| format!("session {id}: {e}");
    let spec_text: String = row.get(2).map_err(field)?;
    let spec = serde_json::from_str(&spec_text)
        .map_err(|e| format!("session {id}: spec is not json: {e}"))?;
    Ok(SessionRecord {
        created_at: row.get(1).map_err(field)?,
        spec,
        token: row.get(3).map_err(field)?,
        lifecycle_id: row.get(4).map_err(field)?,
        kind: row.get(5).map_err(field)?,
        id,
    })
}

fn decode_process(row: &Row<'_>) -> Result<ProcessRecord, String> {
    let session_id: String = row.get(0).map_err(|e| format!("session_id: {e}"))?;
    let field = |e: rusqlite::Error| format!("process of session {session_id}: {e}");
    let args_text: String = row.get(5).map_err(field)?;
    let args = serde_json::from_str(&args_text).map_err(|e| {
        format!("process of session {session_id}: args are not a json string array: {e}")
    })?;
    Ok(ProcessRecord {
        pid: row.get(1).map_err(field)?,
        start_time: row.get(2).map_err(field)?,
        started_at: row.get(3).map_err(field)?,
        command: row.get(4).map_err(field)?,
        args,
        cwd: row.get(6).map_err(field)?,
        log_path: row.get(7).map_err(field)?,
        state: row.get(8).map_err(field)?,
        lifecycle_id: row.get(9).map_err(field)?,
        session_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testkit::TempDir;
    use serde_json::json;
    use std::fs;
    use std::io::{Seek, SeekFrom, Write};

    /// The database file inside a scratch directory.
    fn db(dir: &TempDir) -> PathBuf {
        dir.join("hub.db")
    }

    fn session(id: &str, created_at: &str) -> SessionRecord {
        SessionRecord {
            id: id.to_owned(),
            created_at: created_at.to_owned(),
            spec: json!({"title": format!("session {id}"), "model": "m", "n": 3, "tags": ["a", "b"]}),
            token: format!("tok-{id}"),
            lifecycle_id: format!("life-{id}"),
            kind: "ordinary".to_owned(),
        }
    }

    fn process(session_id: &str, start_time: Option<u64>) -> ProcessRecord {
        ProcessRecord {
            session_id: session_id.to_owned(),
            pid: 4242,
            start_time,
            started_at: "2026-01-01T00:00:01.000Z".to_owned(),
            command: "/usr/bin/worker".to_owned(),
            args: vec![
                "--session".to_owned(),
                session_id.to_owned(),
                "a b".to_owned(),
            ],
            cwd: "/tmp".to_owned(),
            log_path: start_time.map(|_| "/tmp/log".to_owned()),
            state: "running".to_owned(),
            lifecycle_id: format!("life-{session_id}"),
        }
    }

    #[test]
    fn round_trip_and_reopen() {
        let dir = TempDir::new("roundtrip");
        let a = session("a", "2026-01-01T00:00:00.000Z");
        let mut b = session("b", "2025-12-31T00:00:00.000Z");
        b.kind = "special".to_owned();
        let pa = process("a", Some(123_456_789));
        let pb = process("b", None);
        let plan = PlanRecord {
            markdown: "# plan\n- [ ] step".to_owned(),
            revision: 3,
            updated_at: Some("2026-01-01T00:00:02.000Z".to_owned()),
        };
        {
            let store = Store::open(&db(&dir)).unwrap();
            assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
            store.insert_session(&a).unwrap();
            store.insert_session(&b).unwrap();
            store.put_process(&pa).unwrap();
            store.put_process(&pb).unwrap();
            store.put_plan("a", &plan).unwrap();
            assert_eq!(store.load_sessions().unwrap(), vec![b.clone(), a.clone()]);
            assert_eq!(store.get_plan("a").unwrap(), plan);
            assert_eq!(store.get_plan("b").unwrap(), PlanRecord::default());
            assert_eq!(store.integrity_check().unwrap(), "ok");
        }
        let store = Store::open(&db(&dir)).unwrap();
        assert_eq!(store.load_sessions().unwrap(), vec![b, a]);
        let mut procs = store.load_processes().unwrap();
        procs.sort_by(|x, y| x.session_id.cmp(&y.session_id));
        assert_eq!(procs, vec![pa, pb]);
        assert_eq!(procs[0].start_time, Some(123_456_789));
        assert_eq!(procs[1].start_time, None);
        assert_eq!(store.get_plan("a").unwrap(), plan);
        let created_by: String = store
            .conn
            .query_row(
                "SELECT value FROM hub_meta WHERE key = 'created_by'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(created_by.starts_with("simplex-hub "));
    }

    #[test]
    fn updates_and_upserts() {
        let dir = TempDir::new("updates");
        let store = Store::open(&db(&dir)).unwrap();
        store
            .insert_session(&session("s", "2026-01-01T00:00:00.000Z"))
            .unwrap();
        let spec = json!({"title": "renamed", "nested": {"x": [1, 2]}});
        store.update_session_spec("s", &spec).unwrap();
        store.set_lifecycle_id("s", "life-2").unwrap();
        let loaded = &store.load_sessions().unwrap()[0];
        assert_eq!(loaded.spec, spec);
        assert_eq!(loaded.lifecycle_id, "life-2");
        assert_eq!(loaded.token, "tok-s");

        let mut p = process("s", Some(1));
        store.put_process(&p).unwrap();
        p.pid = 99;
        p.start_time = None;
        p.args = vec![];
        store.put_process(&p).unwrap();
        store.set_process_state("s", "exited").unwrap();
        p.state = "exited".to_owned();
        assert_eq!(store.load_processes().unwrap(), vec![p]);
        store.clear_process("s").unwrap();
        store.clear_process("s").unwrap();
        assert!(store.load_processes().unwrap().is_empty());

        let mut plan = PlanRecord {
            markdown: "one".to_owned(),
            revision: 1,
            updated_at: None,
        };
        store.put_plan("s", &plan).unwrap();
        plan.markdown = "two".to_owned();
        plan.revision = 2;
        plan.updated_at = Some("t".to_owned());
        store.put_plan("s", &plan).unwrap();
        assert_eq!(store.get_plan("s").unwrap(), plan);
    }

    #[test]
    fn writes_to_missing_rows_fail() {
        let dir = TempDir::new("missing");
        let store = Store::open(&db(&dir)).unwrap();
        assert!(store.update_session_spec("nope", &json!({})).is_err());
        assert!(store.set_lifecycle_id("nope", "l").is_err());
        assert!(store.set_process_state("nope", "running").is_err());
        assert!(store.put_process(&process("nope", None)).is_err());
        assert!(store.put_plan("nope", &PlanRecord::default()).is_err());
        assert!(!store.delete_session("nope").unwrap());
        store.clear_process("nope").unwrap();
    }

    #[test]
    fn duplicate_session_is_refused() {
        let dir = TempDir::new("dup");
        let store = Store::open(&db(&dir)).unwrap();
        let s = session("dup", "2026-01-01T00:00:00.000Z");
        store.insert_session(&s).unwrap();
        let err = store.insert_session(&s).unwrap_err();
        assert!(
            matches!(&err, StoreError::SessionExists { id } if id == "dup"),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "insert session dup: session already exists"
        );
        assert_eq!(store.load_sessions().unwrap().len(), 1);
    }

    #[test]
    fn delete_cascades() {
        let dir = TempDir::new("cascade");
        let store = Store::open(&db(&dir)).unwrap();
        for id in ["a", "b"] {
            store
                .insert_session(&session(id, "2026-01-01T00:00:00.000Z"))
                .unwrap();
            store.put_process(&process(id, Some(5))).unwrap();
            store
                .put_plan(
                    id,
                    &PlanRecord {
                        markdown: "p".to_owned(),
                        revision: 1,
                        updated_at: None,
                    },
                )
                .unwrap();
        }
        assert!(store.delete_session("a").unwrap());
        assert!(!store.delete_session("a").unwrap());
        let ids: Vec<_> = store
            .load_sessions()
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(ids, ["b"]);
        let procs = store.load_processes().unwrap();
        assert_eq!(procs.len(), 1);
        assert_eq!(procs[0].session_id, "b");
        assert_eq!(store.get_plan("a").unwrap(), PlanRecord::default());
        assert_eq!(store.get_plan("b").unwrap().revision, 1);
        let orphans: i64 = store
            .conn
            .query_row(
                "SELECT (SELECT count(*) FROM processes WHERE session_id = 'a')
                      + (SELECT count(*) FROM plans WHERE session_id = 'a')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(orphans, 0);
    }

    #[test]
    fn bad_rows_are_skipped_on_load() {
        let dir = TempDir::new("badrows");
        let store = Store::open(&db(&dir)).unwrap();
        store
            .insert_session(&session("good", "2026-01-01T00:00:00.000Z"))
            .unwrap();
        store
            .conn
            .execute(
                "INSERT INTO sessions (id, created_at, spec, token, lifecycle_id)
                 VALUES ('bad', '2026', '{not json', 't', 'l')",
                [],
            )
            .unwrap();
        store.put_process(&process("good", None)).unwrap();
        store
            .conn
            .execute(
                "INSERT INTO processes (session_id, pid, started_at, command, args, cwd,
                                        state, lifecycle_id)
                 VALUES ('bad', 7, 't', 'c', '[1, 2]', '/', 'running', 'l')",
                [],
            )
            .unwrap();
        let sessions = store.load_sessions().unwrap();
        assert_eq!(sessions.len(), 1);
        assert_eq!(sessions[0].id, "good");
        let kind: String = store
            .conn
            .query_row("SELECT kind FROM sessions WHERE id = 'bad'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(kind, "ordinary");
        let procs = store.load_processes().unwrap();
        assert_eq!(procs.len(), 1);
        assert_eq!(procs[0].session_id, "good");
    }

    #[test]
    fn file_mode_is_0600() {
        let dir = TempDir::new("mode");
        let store = Store::open(&db(&dir)).unwrap();
        store
            .insert_session(&session("m", "2026-01-01T00:00:00.000Z"))
            .unwrap();
        let mode = |p: PathBuf| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(db(&dir)), 0o600);
        assert_eq!(mode(dir.join("hub.db-wal")), 0o600);
        assert_eq!(mode(dir.join("hub.db-shm")), 0o600);
        drop(store);

        // An existing file with a loose mode is tightened.
        fs::set_permissions(db(&dir), Permissions::from_mode(0o644)).unwrap();
        let _store = Store::open(&db(&dir)).unwrap();
        assert_eq!(mode(db(&dir)), 0o600);
    }

    #[test]
    fn pragmas_are_set() {
        let dir = TempDir::new("wal");
        let store = Store::open(&db(&dir)).unwrap();
        let q = |name: &str| -> String {
            store
                .conn
                .pragma_query_value(None, name, |r| r.get::<_, rusqlite::types::Value>(0))
                .map(|v| match v {
                    rusqlite::types::Value::Text(s) => s,
                    rusqlite::types::Value::Integer(i) => i.to_string(),
                    other => format!("{other:?}"),
                })
                .unwrap()
        };
        assert_eq!(q("journal_mode"), "wal");
        assert_eq!(q("synchronous"), "2"); // FULL
        assert_eq!(q("foreign_keys"), "1");
        assert_eq!(q("application_id"), APPLICATION_ID.to_string());
        assert_eq!(q("busy_timeout"), "5000");
        drop(store);
        // WAL mode is persistent in the file header (bytes 18 and 19 are 2).
        let bytes = fs::read(db(&dir)).unwrap();
        assert_eq!(&bytes[18..20], &[2, 2]);
    }

    #[test]
    fn garbage_file_is_not_a_database() {
        let dir = TempDir::new("garbage");
        let garbage: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 13) as u8).collect();
        fs::write(db(&dir), &garbage).unwrap();
        let err = Store::open(&db(&dir))
            .err()
            .expect("garbage must be refused");
        assert!(matches!(err, StoreError::NotADatabase { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains(&db(&dir).display().to_string()), "{msg}");
        assert!(msg.contains("move it aside"), "{msg}");
        assert_eq!(
            fs::read(db(&dir)).unwrap(),
            garbage,
            "file must be untouched"
        );

        fs::write(db(&dir), b"hello, this is a text file\n").unwrap();
        let err = Store::open(&db(&dir)).err().expect("text must be refused");
        assert!(matches!(err, StoreError::NotADatabase { .. }), "{err:?}");
    }

    #[test]
    fn foreign_database_is_refused() {
        let dir = TempDir::new("foreign");
        {
            let conn = Connection::open(db(&dir)).unwrap();
            conn.execute_batch("CREATE TABLE x (a INTEGER); INSERT INTO x VALUES (1);")
                .unwrap();
        }
        let before = fs::read(db(&dir)).unwrap();
        let err = Store::open(&db(&dir))
            .err()
            .expect("foreign db must be refused");
        assert!(matches!(err, StoreError::Foreign { .. }), "{err:?}");
        assert!(err.to_string().contains(&db(&dir).display().to_string()));
        assert_eq!(
            fs::read(db(&dir)).unwrap(),
            before,
            "file must be untouched"
        );

        // Our application id but someone else's tables at version 0.
        let dir2 = TempDir::new("foreign2");
        {
            let conn = Connection::open(db(&dir2)).unwrap();
            conn.pragma_update(None, "application_id", APPLICATION_ID)
                .unwrap();
            conn.execute_batch("CREATE TABLE x (a INTEGER);").unwrap();
        }
        let err = Store::open(&db(&dir2)).err().expect("must be refused");
        assert!(matches!(err, StoreError::Foreign { .. }), "{err:?}");

        // A hub_meta table without our application id.
        let dir3 = TempDir::new("foreign3");
        {
            let conn = Connection::open(db(&dir3)).unwrap();
            conn.execute_batch("CREATE TABLE hub_meta (key TEXT, value TEXT);")
                .unwrap();
        }
        let err = Store::open(&db(&dir3)).err().expect("must be refused");
        assert!(matches!(err, StoreError::Foreign { .. }), "{err:?}");
    }

    #[test]
    fn newer_schema_is_refused() {
        let dir = TempDir::new("toonew");
        {
            let conn = Connection::open(db(&dir)).unwrap();
            conn.pragma_update(None, "application_id", APPLICATION_ID)
                .unwrap();
            conn.pragma_update(None, "user_version", 99).unwrap();
        }
        let err = Store::open(&db(&dir))
            .err()
            .expect("too new must be refused");
        match &err {
            StoreError::TooNew {
                found, supported, ..
            } => {
                assert_eq!(*found, 99);
                assert_eq!(*supported, SCHEMA_VERSION);
            }
            other => panic!("expected TooNew, got {other:?}"),
        }
        let msg = err.to_string();
        assert!(msg.contains("99") && msg.contains(&db(&dir).display().to_string()));
    }

    #[test]
    fn subagent_records_and_receipts() {
        let dir = TempDir::new("subagents");
        let mut store = Store::open(&db(&dir)).unwrap();
        let mut child = session("subagent-1", "2026-01-01T00:00:00.000Z");
        child.kind = "headless".into();
        let rec = SubagentRecord {
            id: "subagent-1".into(),
            meta: json!({"lifecycle": "preparing"}),
            outcomes: json!([]),
        };
        let receipt = ReceiptRecord {
            key: "k1".into(),
            hash: "h1".into(),
            result: json!({"subagent_id": "subagent-1"}),
            created_ms: 10,
        };
        store.insert_subagent(&child, &rec, Some(&receipt)).unwrap();
        // The same id again: nothing of the second attempt remains.
        assert!(store.insert_subagent(&child, &rec, None).is_err());
        assert_eq!(store.load_subagents().unwrap(), vec![rec.clone()]);
        store
            .put_subagent_meta("subagent-1", &json!({"lifecycle": "ready"}))
            .unwrap();
        store
            .put_subagent_outcomes("subagent-1", &json!([{"request_id": "r"}]))
            .unwrap();
        let loaded = store.load_subagents().unwrap();
        assert_eq!(loaded[0].meta["lifecycle"], "ready");
        assert_eq!(loaded[0].outcomes[0]["request_id"], "r");
        assert!(store.put_subagent_meta("nope", &json!({})).is_err());
        assert_eq!(store.get_receipt("k1").unwrap(), Some(receipt.clone()));
        for i in 0..5u64 {
            let mut r = receipt.clone();
            r.key = format!("n{i}");
            r.created_ms = 100 + i;
            store.put_receipt(&r).unwrap();
        }
        // Older than 50 ms goes; then only the newest 3 stay.
        store.prune_receipts(50, 3).unwrap();
        assert_eq!(store.get_receipt("k1").unwrap(), None);
        assert!(store.get_receipt("n1").unwrap().is_none());
        assert!(store.get_receipt("n2").unwrap().is_some());
        assert!(store.get_receipt("n4").unwrap().is_some());
        // Deleting the session deletes its subagent row.
        assert!(store.delete_session("subagent-1").unwrap());
        assert!(store.load_subagents().unwrap().is_empty());
    }

    #[test]
    fn migrates_from_version_0() {
        // Our application id, user_version 0, no tables.
        let dir = TempDir::new("v0");
        {
            let conn = Connection::open(db(&dir)).unwrap();
            conn.pragma_update(None, "application_id", APPLICATION_ID)
                .unwrap();
            conn.pragma_update(None, "user_version", 0).unwrap();
        }
        let store = Store::open(&db(&dir)).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        store
            .insert_session(&session("x", "2026-01-01T00:00:00.000Z"))
            .unwrap();
        for table in REQUIRED_TABLES {
            assert!(table_exists(&store.conn, table).unwrap(), "{table}");
        }
        drop(store);
        assert_eq!(
            Store::open(&db(&dir))
                .unwrap()
                .load_sessions()
                .unwrap()
                .len(),
            1
        );

        // An empty file (e.g. left by a crash before the first migration).
        let dir2 = TempDir::new("empty");
        fs::write(db(&dir2), b"").unwrap();
        let store = Store::open(&db(&dir2)).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    }

    #[test]
    fn missing_parent_directory_is_an_io_error() {
        let dir = TempDir::new("noparent");
        let path = dir.join("absent").join("hub.db");
        let err = Store::open(&path).err().expect("must fail");
        assert!(matches!(err, StoreError::Io { .. }), "{err:?}");
        assert!(err.source().is_some());
        assert!(
            err.to_string().starts_with("create database file "),
            "{err}"
        );
    }

    #[test]
    fn corrupted_file_is_an_error_not_a_panic() {
        let dir = TempDir::new("corrupt");
        {
            let store = Store::open(&db(&dir)).unwrap();
            for i in 0..300 {
                let mut s = session(&format!("s{i:04}"), "2026-01-01T00:00:00.000Z");
                s.spec = json!({"blob": "x".repeat(1000), "i": i});
                store.insert_session(&s).unwrap();
                store.put_process(&process(&s.id, Some(i))).unwrap();
            }
        } // closing the last connection checkpoints the WAL into the file
        let len = fs::metadata(db(&dir)).unwrap().len();
        assert!(len > 40 * 4096, "database too small to corrupt: {len}");
        {
            let mut f = OpenOptions::new().write(true).open(db(&dir)).unwrap();
            let garbage: Vec<u8> = (0..20 * 4096u32).map(|i| (i * 31 + 7) as u8).collect();
            f.seek(SeekFrom::Start(len / 2 - 10 * 4096)).unwrap();
            f.write_all(&garbage).unwrap();
            f.sync_all().unwrap();
        }
        let outcome = match Store::open(&db(&dir)) {
            Err(err) => {
                assert!(
                    matches!(
                        err,
                        StoreError::Corrupt { .. } | StoreError::NotADatabase { .. }
                    ),
                    "{err:?}"
                );
                format!("open refused: {err}")
            }
            Ok(store) => match store.integrity_check() {
                Ok(report) => {
                    assert_ne!(report, "ok");
                    format!("integrity_check: {report}")
                }
                Err(err) => format!("integrity_check failed: {err}"),
            },
        };
        eprintln!("corruption detected as expected: {outcome}");
    }

    #[test]
    fn error_messages_are_lowercase_with_path() {
        let p = PathBuf::from("/data/hub.db");
        let errors = [
            StoreError::NotADatabase { path: p.clone() },
            StoreError::Foreign { path: p.clone() },
            StoreError::TooNew {
                path: p.clone(),
                found: 2,
                supported: 1,
            },
            StoreError::Corrupt {
                path: p.clone(),
                detail: "quick_check: page 3 is bad".to_owned(),
            },
            StoreError::Io {
                path: p.clone(),
                op: "open database file",
                err: io::Error::from(io::ErrorKind::PermissionDenied),
            },
        ];
        for err in errors {
            let msg = err.to_string();
            assert!(msg.contains("/data/hub.db"), "{msg}");
            assert!(msg.starts_with(|c: char| c.is_lowercase()), "{msg}");
            assert!(!msg.ends_with('.'), "{msg}");
        }
    }
}
