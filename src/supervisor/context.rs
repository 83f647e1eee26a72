//! The kept Docker management contexts on disk: `<dataDir>/docker/<id>.json`
//! (0600 in a 0700 directory), written at a Docker launch's start
//! (`container::prepare`) or at the import of a Node hub's data directory
//! ([`import_node`], which runs before the hub exists), read back after a
//! restart. The decisions are `docker`'s (pure).

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use super::docker::{self, InvalidContext, Stored};
use crate::store::node::Batch;
use crate::util::fsutil;

/// Where the management contexts of the data directory `data_dir` are kept.
pub(super) fn dir_in(data_dir: &Path) -> PathBuf {
    data_dir.join("docker")
}

/// Removes the temporary files of context writes a crash cut short.
pub fn sweep(data_dir: &Path) {
    let dir = dir_in(data_dir);
    if let Err(err) = fsutil::sweep_temp(&dir, |_| true) {
        log::warn!(
            "{}: unfinished temporary files not removed: {err}",
            dir.display()
        );
    }
}

/// Keeps `stored` as its session's context (0600, in a 0700 directory).
pub(super) fn write(data_dir: &Path, stored: &Stored) -> Result<(), ContextError> {
    let text =
        serde_json::to_string_pretty(&docker::to_json(stored)).map_err(ContextError::Encode)?;
    let dir = dir_in(data_dir);
    if let Err(err) = fsutil::create_private_dir(&dir) {
        return Err(ContextError::CreateDir { dir, err });
    }
    let path = dir.join(format!("{}.json", stored.session));
    fsutil::write_private_atomic(&path, text.as_bytes())
        .map_err(|err| ContextError::Write { path, err })
}

/// At the import of a Node hub's data directory, before anything is
/// written to the store: each Node Docker context of the batch becomes
/// this hub's for the same start (`docker::from_node`), so a container
/// the Node hub ran is adopted, stopped and judged by its container. A
/// context that cannot be used is left out with a note (the container
/// is then not managed, as on the Node hub); one that cannot be written
/// fails the import.
pub fn import_node(
    data_dir: &Path,
    pass_through: &[String],
    batch: &Batch,
) -> Result<Vec<String>, ContextError> {
    let mut notes = Vec::new();
    for (id, context) in &batch.docker {
        let Some(rec) = batch.process(id) else {
            continue;
        };
        match docker::from_node(
            id,
            &rec.lifecycle_id,
            &rec.command,
            &rec.args,
            context,
            pass_through,
        ) {
            Ok(stored) => {
                write(data_dir, &stored)?;
                log::info!(
                    "node import: session {id}: container {} is managed through {}",
                    stored.management.target.name,
                    stored.management.executable.display()
                );
            }
            Err(why) => notes.push(format!(
                "session {id}: its Docker management context is not usable ({why}); only a \
                 worker process with pid {} on this host can be adopted",
                rec.pid
            )),
        }
    }
    Ok(notes)
}

pub(super) fn read(path: &Path) -> Result<Stored, ContextError> {
    let text = fsutil::read_private_file(path).map_err(ContextError::Read)?;
    let value = serde_json::from_str(&text).map_err(ContextError::Parse)?;
    docker::from_json(&value).map_err(ContextError::Invalid)
}

/// Why a kept context could not be written or read back.
#[derive(Debug)]
pub enum ContextError {
    Encode(serde_json::Error),
    CreateDir {
        dir: PathBuf,
        err: io::Error,
    },
    Write {
        path: PathBuf,
        err: io::Error,
    },
    Read(io::Error),
    /// The file is not JSON.
    Parse(serde_json::Error),
    /// The file is not a context this hub writes.
    Invalid(InvalidContext),
}

impl fmt::Display for ContextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ContextError::Encode(err) => write!(f, "{err}"),
            ContextError::CreateDir { dir, err } => {
                write!(f, "cannot create {}: {err}", dir.display())
            }
            ContextError::Write { path, err } => {
                write!(f, "cannot write {}: {err}", path.display())
            }
            ContextError::Read(err) => write!(f, "{err}"),
            ContextError::Parse(err) => write!(f, "{err}"),
            ContextError::Invalid(err) => write!(f, "{err}"),
        }
    }
}

impl std::error::Error for ContextError {}
