//! Opening `hub.db`: identifying the file before anything changes in it,
//! the pragmas, the forward migrations and the open-time refusals
//! (`docs/store.md`).

use std::fs::{File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use rusqlite::{params, Connection, OpenFlags};

use super::error::{classify, sql, StoreError};

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
    // Version 3: permission grants (Shard `allow_always`): one exact call
    // (its tool and canonical arguments) a session's requests are allowed
    // for without asking.
    "CREATE TABLE grants (
         id         TEXT PRIMARY KEY,
         session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
         tool       TEXT NOT NULL,
         arguments  TEXT NOT NULL,
         created_at TEXT NOT NULL
     );
     CREATE INDEX grants_session ON grants (session_id);",
];

/// The schema version this build creates and understands.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// Tables the current schema must contain after migration.
pub(super) const REQUIRED_TABLES: &[&str] = &[
    "hub_meta",
    "sessions",
    "processes",
    "plans",
    "subagents",
    "subagent_receipts",
    "grants",
];

/// How long a statement waits for a lock held by another connection (only
/// an operator's `sqlite3` shell or a backup tool can hold one).
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Most rows `integrity_check` and the open-time `quick_check` report.
const CHECK_MAX_ERRORS: u32 = 20;

/// Opens (creating if absent, mode 0600), identifies, configures and
/// migrates the database at `path`; see [`super::Store::open`].
pub(super) fn open(path: &Path) -> Result<Connection, StoreError> {
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

    Ok(conn)
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

pub(super) fn table_exists(conn: &Connection, name: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
        params![name],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n > 0)
}

/// Runs `quick_check` or `integrity_check` and joins its rows.
pub(super) fn check(conn: &Connection, pragma: &str) -> rusqlite::Result<String> {
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
