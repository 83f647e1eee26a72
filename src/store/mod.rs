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

mod error;
pub mod import;
pub mod node;
mod schema;
#[cfg(test)]
mod tests;

use std::fmt;
use std::path::{Path, PathBuf};

use rusqlite::{ffi, params, Connection, OptionalExtension, Row};
use serde_json::Value;

use error::{classify, no_row, sql};
pub use error::{io_is_disk_full, StoreError};
use schema::check;

use crate::wire::worker::plan::PlanRecord;
pub use schema::{APPLICATION_ID, SCHEMA_VERSION};

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

/// A permission grant: session `session_id`'s requests for exactly this
/// call (`tool` with these canonical `arguments`) are allowed without
/// asking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantRecord {
    pub id: String,
    pub session_id: String,
    pub tool: String,
    /// The call's arguments as canonical JSON (keys sorted).
    pub arguments: String,
    pub created_at: String,
}

/// The store handle: the database behind its mutex, which guards only the
/// SQLite connection (never held across other I/O or another lock).
/// Whoever records something durable takes this handle, not the hub.
pub struct Db {
    store: std::sync::Mutex<Store>,
}

impl Db {
    pub fn new(store: Store) -> Db {
        Db {
            store: std::sync::Mutex::new(store),
        }
    }

    /// The database, locked for one query or transaction.
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
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
        Ok(Store {
            conn: schema::open(path)?,
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
        match insert_session_in(&self.conn, rec) {
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

    /// Runs a one-row `UPDATE` (`?1` the row's id, `?2` the new value);
    /// an error names `op`, and no row with that id is one.
    fn update_one(
        &self,
        op: &'static str,
        statement: &str,
        id: &str,
        value: &dyn rusqlite::ToSql,
    ) -> Result<(), StoreError> {
        let n = self
            .conn
            .prepare_cached(statement)
            .and_then(|mut s| s.execute(params![id, value]))
            .map_err(sql(op))?;
        if n == 0 {
            return Err(no_row(op));
        }
        Ok(())
    }

    /// Replaces a session's spec. Errors if the session does not exist.
    pub fn update_session_spec(&self, id: &str, spec: &Value) -> Result<(), StoreError> {
        self.update_one(
            "update session spec",
            "UPDATE sessions SET spec = ?2 WHERE id = ?1",
            id,
            &spec.to_string(),
        )
    }

    /// Replaces a session's lifecycle id. Errors if the session does not
    /// exist. The process row keeps the lifecycle id it was started under.
    pub fn set_lifecycle_id(&self, id: &str, lifecycle_id: &str) -> Result<(), StoreError> {
        self.update_one(
            "set session lifecycle id",
            "UPDATE sessions SET lifecycle_id = ?2 WHERE id = ?1",
            id,
            &lifecycle_id,
        )
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
        put_process_in(&self.conn, rec).map_err(sql("put process"))?;
        Ok(())
    }

    /// Sets the state of a session's process row. Errors if there is none.
    pub fn set_process_state(&self, session_id: &str, state: &str) -> Result<(), StoreError> {
        self.update_one(
            "set process state",
            "UPDATE processes SET state = ?2 WHERE session_id = ?1",
            session_id,
            &state,
        )
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
        put_plan_in(&self.conn, session_id, plan).map_err(sql("put plan"))?;
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
        insert_session_in(&tx, session).map_err(sql(OP))?;
        insert_subagent_in(&tx, child).map_err(sql(OP))?;
        if let Some(receipt) = receipt {
            put_receipt_in(&tx, receipt).map_err(sql(OP))?;
        }
        tx.commit().map_err(sql(OP))
    }

    /// Replaces a child's ownership/lifecycle record.
    pub fn put_subagent_meta(&self, id: &str, meta: &Value) -> Result<(), StoreError> {
        self.update_one(
            "update subagent metadata",
            "UPDATE subagents SET meta = ?2 WHERE id = ?1",
            id,
            &meta.to_string(),
        )
    }

    /// Replaces a child's request-outcome tail.
    pub fn put_subagent_outcomes(&self, id: &str, outcomes: &Value) -> Result<(), StoreError> {
        self.update_one(
            "update subagent outcomes",
            "UPDATE subagents SET outcomes = ?2 WHERE id = ?1",
            id,
            &outcomes.to_string(),
        )
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

    /// Records a grant. The session must exist (foreign key).
    pub fn insert_grant(&self, grant: &GrantRecord) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO grants (id, session_id, tool, arguments, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    grant.id,
                    grant.session_id,
                    grant.tool,
                    grant.arguments,
                    grant.created_at
                ])
            })
            .map_err(sql("insert grant"))?;
        Ok(())
    }

    /// Removes session `session_id`'s grant `id`; false when it has none
    /// by that id.
    pub fn delete_grant(&self, session_id: &str, id: &str) -> Result<bool, StoreError> {
        let n = self
            .conn
            .prepare_cached("DELETE FROM grants WHERE session_id = ?1 AND id = ?2")
            .and_then(|mut s| s.execute(params![session_id, id]))
            .map_err(sql("delete grant"))?;
        Ok(n > 0)
    }

    /// Every grant, oldest first within a session.
    pub fn load_grants(&self) -> Result<Vec<GrantRecord>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT id, session_id, tool, arguments, created_at FROM grants
                 ORDER BY session_id, created_at, id",
            )
            .map_err(sql("load grants"))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(GrantRecord {
                    id: r.get(0)?,
                    session_id: r.get(1)?,
                    tool: r.get(2)?,
                    arguments: r.get(3)?,
                    created_at: r.get(4)?,
                })
            })
            .map_err(sql("load grants"))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(sql("load grants"))
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

/// The one `sessions` insert, for a plain store call or inside a
/// transaction (fork, Node import).
pub(super) fn insert_session_in(conn: &Connection, rec: &SessionRecord) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "INSERT INTO sessions (id, created_at, spec, token, lifecycle_id, kind)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        rec.id,
        rec.created_at,
        rec.spec.to_string(),
        rec.token,
        rec.lifecycle_id,
        rec.kind
    ])
}

/// The one `processes` upsert.
pub(super) fn put_process_in(conn: &Connection, rec: &ProcessRecord) -> rusqlite::Result<usize> {
    let args = serde_json::to_string(&rec.args).unwrap_or_else(|_| "[]".to_owned());
    conn.prepare_cached(
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
    )?
    .execute(params![
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
}

/// The one `plans` upsert.
pub(super) fn put_plan_in(
    conn: &Connection,
    session_id: &str,
    plan: &PlanRecord,
) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "INSERT INTO plans (session_id, markdown, revision, updated_at)
         VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (session_id) DO UPDATE SET
             markdown = excluded.markdown,
             revision = excluded.revision,
             updated_at = excluded.updated_at",
    )?
    .execute(params![
        session_id,
        plan.markdown,
        plan.revision,
        plan.updated_at
    ])
}

/// The one `subagents` insert.
pub(super) fn insert_subagent_in(
    conn: &Connection,
    child: &SubagentRecord,
) -> rusqlite::Result<usize> {
    conn.prepare_cached("INSERT INTO subagents (id, meta, outcomes) VALUES (?1, ?2, ?3)")?
        .execute(params![
            child.id,
            child.meta.to_string(),
            child.outcomes.to_string()
        ])
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

/// Why a stored row was skipped (it stays in the file untouched).
#[derive(Debug)]
enum Undecodable {
    /// The key column (`id`, `session_id`) cannot be read.
    Key {
        column: &'static str,
        err: rusqlite::Error,
    },
    /// A column of session `id` cannot be read.
    Session { id: String, err: rusqlite::Error },
    /// Session `id`'s spec is not JSON.
    Spec { id: String, err: serde_json::Error },
    /// A column of the process of session `id` cannot be read.
    Process { id: String, err: rusqlite::Error },
    /// The process of session `id` has args that are not a JSON string
    /// array.
    Args { id: String, err: serde_json::Error },
}

impl fmt::Display for Undecodable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Undecodable::Key { column, err } => write!(f, "{column}: {err}"),
            Undecodable::Session { id, err } => write!(f, "session {id}: {err}"),
            Undecodable::Spec { id, err } => write!(f, "session {id}: spec is not json: {err}"),
            Undecodable::Process { id, err } => write!(f, "process of session {id}: {err}"),
            Undecodable::Args { id, err } => write!(
                f,
                "process of session {id}: args are not a json string array: {err}"
            ),
        }
    }
}

impl std::error::Error for Undecodable {}

fn decode_session(row: &Row<'_>) -> Result<SessionRecord, Undecodable> {
    let id: String = row
        .get(0)
        .map_err(|err| Undecodable::Key { column: "id", err })?;
    let field = |err: rusqlite::Error| Undecodable::Session {
        id: id.clone(),
        err,
    };
    let spec_text: String = row.get(2).map_err(field)?;
    let spec = serde_json::from_str(&spec_text).map_err(|err| Undecodable::Spec {
        id: id.clone(),
        err,
    })?;
    Ok(SessionRecord {
        created_at: row.get(1).map_err(field)?,
        spec,
        token: row.get(3).map_err(field)?,
        lifecycle_id: row.get(4).map_err(field)?,
        kind: row.get(5).map_err(field)?,
        id,
    })
}

fn decode_process(row: &Row<'_>) -> Result<ProcessRecord, Undecodable> {
    let session_id: String = row.get(0).map_err(|err| Undecodable::Key {
        column: "session_id",
        err,
    })?;
    let field = |err: rusqlite::Error| Undecodable::Process {
        id: session_id.clone(),
        err,
    };
    let args_text: String = row.get(5).map_err(field)?;
    let args = serde_json::from_str(&args_text).map_err(|err| Undecodable::Args {
        id: session_id.clone(),
        err,
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
