//! The one-time import of a Node.js Simplex Hub's data directory into
//! `hub.db`, run by `Hub::open` right after the store opens.
//!
//! The rule (also in `docs/store.md`): the import runs when
//! `<dataDir>/hub.json` exists, `hub_meta` has no `node_import` row and
//! `sessions` is empty. It reads `hub.json`, every
//! `subagents/<id>/metadata.json` (with its `operations.json`) and the
//! `plan.json` of each imported session, parses them all ([`super::node`],
//! pure) and writes everything together with the `node_import` row in one
//! `BEGIN IMMEDIATE` transaction, which checks the rule again first. So the
//! import happens at most once; a crash before the commit leaves nothing,
//! and the next start does it again. It never writes to the Node files.
//! A file it refuses stops the start with [`StoreError::NodeImport`],
//! naming the file and the field, and nothing is imported.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rusqlite::{params, TransactionBehavior};
use serde_json::json;

use super::node::{self, Batch, Context, NodeChild, Refusal, HUB_JSON, METADATA, OPERATIONS, PLAN};
use super::{
    insert_session_in, insert_subagent_in, put_plan_in, put_process_in, sql, Store, StoreError,
};
use crate::session::headless::is_child_id;
use crate::wire::ids::is_valid_id;

/// The `hub_meta` key recording that the import happened (its value: a
/// JSON summary).
pub const MARKER: &str = "node_import";

/// Largest `hub.json` read (bytes).
pub const MAX_HUB_JSON: u64 = 64 * 1024 * 1024;

/// Largest `metadata.json`, `operations.json` or `plan.json` read, the
/// Node hub's own bound for its private files (bytes).
pub const MAX_SMALL_FILE: u64 = 512 * 1024;

/// What one import wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub sessions: usize,
    pub processes: usize,
    pub subagents: usize,
    pub plans: usize,
}

/// Imports the Node hub's data in `data_dir` into `store` when the rule
/// above says so; `None` when there was nothing to do. `before_write`
/// sees the batch before anything is written (the supervisor keeps the
/// Node hub's Docker contexts there); its notes are logged with the
/// import's, and its error stops the import with nothing written.
pub fn run<E: std::fmt::Display>(
    store: &mut Store,
    data_dir: &Path,
    before_write: &mut dyn FnMut(&Batch) -> Result<Vec<String>, E>,
) -> Result<Option<Summary>, StoreError> {
    let hub_json = data_dir.join(HUB_JSON);
    match fs::symlink_metadata(&hub_json) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(read_error(&hub_json, err)),
    }
    if let Some(done) = store.marker()? {
        log::debug!(
            "{}: imported before ({done}); not read again",
            hub_json.display()
        );
        return Ok(None);
    }
    if store.has_sessions()? {
        log::warn!(
            "{} is not imported: {} already holds sessions (the import runs only into an \
             empty store; move hub.json aside to silence this)",
            hub_json.display(),
            store.path.display()
        );
        return Ok(None);
    }
    let now = crate::util::time::now_rfc3339();
    let mut batch = read(data_dir, &now)?;
    let notes = before_write(&batch).map_err(|err| StoreError::NodeImport {
        path: data_dir.to_path_buf(),
        detail: err.to_string(),
    })?;
    batch.notes.extend(notes);
    let summary = Summary {
        sessions: batch.sessions.len(),
        processes: batch.processes(),
        subagents: batch.children.len(),
        plans: batch.plans.len(),
    };
    let marker = json!({
        "imported_at": now,
        "from": hub_json.display().to_string(),
        "sessions": summary.sessions,
        "processes": summary.processes,
        "subagents": summary.subagents,
        "plans": summary.plans,
    });
    if !store.write_import(&batch, &marker.to_string())? {
        return Ok(None);
    }
    for note in &batch.notes {
        log::warn!("node import: {note}");
    }
    log::info!(
        "imported {} sessions, {} process records, {} subagents and {} plans from {} \
         (the Node hub's files are left unchanged)",
        summary.sessions,
        summary.processes,
        summary.subagents,
        summary.plans,
        hub_json.display()
    );
    Ok(Some(summary))
}

/// Reads and parses every Node file the import takes.
fn read(data_dir: &Path, now: &str) -> Result<Batch, StoreError> {
    let refused = |r: Refusal| StoreError::NodeImport {
        path: data_dir.join(&r.file),
        detail: if r.field.is_empty() {
            r.problem
        } else {
            format!("{}: {}", r.field, r.problem)
        },
    };
    let mut fresh = || uuid::Uuid::new_v4().to_string();
    let mut ctx = Context {
        now,
        fresh_id: &mut fresh,
    };
    let hub_json = data_dir.join(HUB_JSON);
    let bytes = read_file(&hub_json, MAX_HUB_JSON, true)?;
    let sessions = node::parse_hub_json(&bytes, &mut ctx).map_err(refused)?;

    let mut children: Vec<NodeChild> = Vec::new();
    for dir in child_dirs(data_dir)? {
        let root = data_dir.join("subagents").join(&dir);
        let Some(bytes) = read_optional(&root.join(METADATA), MAX_SMALL_FILE, false)? else {
            log::info!(
                "node import: {} has no {METADATA}; not imported",
                root.display()
            );
            continue;
        };
        let mut child = node::parse_metadata(&dir, &bytes, &mut ctx).map_err(refused)?;
        if let Some(bytes) = read_optional(&root.join(OPERATIONS), MAX_SMALL_FILE, false)? {
            child.outcomes = node::parse_operations(&dir, &bytes).map_err(refused)?;
        }
        children.push(child);
    }

    let mut plans = Vec::new();
    let ids = sessions
        .iter()
        .map(|s| ("sessions", s.session.id.as_str()))
        .chain(
            children
                .iter()
                .map(|c| ("subagents", c.session.id.as_str())),
        );
    for (root, id) in ids {
        if root == "sessions" && is_child_id(id) {
            continue;
        }
        let relative = format!("{root}/{id}/{PLAN}");
        if let Some(bytes) = read_optional(&data_dir.join(&relative), MAX_SMALL_FILE, true)? {
            let plan = node::parse_plan(&relative, &bytes).map_err(refused)?;
            plans.push((id.to_owned(), plan));
        }
    }
    node::assemble(sessions, children, plans).map_err(refused)
}

/// Names in `<dataDir>/subagents/` that are headless child directories
/// (not symbolic links), sorted.
fn child_dirs(data_dir: &Path) -> Result<Vec<String>, StoreError> {
    let root = data_dir.join("subagents");
    let entries = match fs::read_dir(&root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(read_error(&root, err)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|err| read_error(&root, err))?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if !is_valid_id(&name) || !is_child_id(&name) {
            continue;
        }
        let kind = entry
            .file_type()
            .map_err(|err| read_error(&entry.path(), err))?;
        if kind.is_symlink() {
            log::warn!(
                "node import: {} is a symbolic link; not imported",
                entry.path().display()
            );
        } else if kind.is_dir() {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

/// [`read_file`], or `None` when the file does not exist.
fn read_optional(path: &Path, max: u64, follow: bool) -> Result<Option<Vec<u8>>, StoreError> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        _ => read_file(path, max, follow).map(Some),
    }
}

/// A regular file's bytes, at most `max` of them; a symbolic link is
/// refused unless `follow`.
fn read_file(path: &Path, max: u64, follow: bool) -> Result<Vec<u8>, StoreError> {
    let mut options = OpenOptions::new();
    options.read(true);
    if !follow {
        options.custom_flags(libc::O_NOFOLLOW);
    }
    let file: File = options.open(path).map_err(|err| {
        if err.raw_os_error() == Some(libc::ELOOP) {
            refuse_file(
                path,
                "is a symbolic link; the import reads only regular files here",
            )
        } else {
            read_error(path, err)
        }
    })?;
    let meta = file.metadata().map_err(|err| read_error(path, err))?;
    if !meta.is_file() {
        return Err(refuse_file(path, "is not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|err| read_error(path, err))?;
    if bytes.len() as u64 > max {
        return Err(refuse_file(path, &format!("is larger than {max} bytes")));
    }
    Ok(bytes)
}

fn refuse_file(path: &Path, problem: &str) -> StoreError {
    StoreError::NodeImport {
        path: path.to_path_buf(),
        detail: problem.to_owned(),
    }
}

fn read_error(path: &Path, err: io::Error) -> StoreError {
    StoreError::NodeImport {
        path: PathBuf::from(path),
        detail: format!("cannot be read ({err})"),
    }
}

impl Store {
    /// The `node_import` row's value, if the import happened.
    pub fn marker(&self) -> Result<Option<String>, StoreError> {
        use rusqlite::OptionalExtension;
        self.conn
            .query_row(
                "SELECT value FROM hub_meta WHERE key = ?1",
                params![MARKER],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql("read the node import marker"))
    }

    fn has_sessions(&self) -> Result<bool, StoreError> {
        self.conn
            .query_row("SELECT EXISTS (SELECT 1 FROM sessions)", [], |r| r.get(0))
            .map_err(sql("count sessions"))
    }

    /// Writes `batch` and the marker in one immediate transaction, after
    /// checking again that there is no marker and no session (false, with
    /// nothing written, if that changed).
    fn write_import(&mut self, batch: &Batch, marker: &str) -> Result<bool, StoreError> {
        const OP: &str = "import the Node hub's data";
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql(OP))?;
        let taken: bool = tx
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM sessions)
                     OR EXISTS (SELECT 1 FROM hub_meta WHERE key = ?1)",
                params![MARKER],
                |r| r.get(0),
            )
            .map_err(sql(OP))?;
        if taken {
            return Ok(false);
        }
        let sessions = batch
            .sessions
            .iter()
            .map(|(s, p)| (s, p))
            .chain(batch.children.iter().map(|(s, p, _)| (s, p)));
        for (s, process) in sessions {
            insert_session_in(&tx, s).map_err(sql(OP))?;
            if let Some(p) = process {
                put_process_in(&tx, p).map_err(sql(OP))?;
            }
        }
        for (_, _, child) in &batch.children {
            insert_subagent_in(&tx, child).map_err(sql(OP))?;
        }
        for (id, plan) in &batch.plans {
            put_plan_in(&tx, id, plan).map_err(sql(OP))?;
        }
        tx.execute(
            "INSERT INTO hub_meta (key, value) VALUES (?1, ?2)",
            params![MARKER, marker],
        )
        .map_err(sql(OP))?;
        tx.commit().map_err(sql(OP))?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests;
