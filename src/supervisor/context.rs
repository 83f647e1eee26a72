//! The kept Docker management contexts on disk: `<dataDir>/docker/<id>.json`
//! (0600 in a 0700 directory), written at a Docker launch's start
//! (`container::prepare`) or at the import of a Node hub's data directory
//! ([`import_node`], which runs before the hub exists), read back after a
//! restart. The decisions are `docker`'s (pure).

use std::path::{Path, PathBuf};

use super::docker::{self, Stored};
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
pub(super) fn write(data_dir: &Path, stored: &Stored) -> Result<(), String> {
    let text = serde_json::to_string_pretty(&docker::to_json(stored)).map_err(|e| e.to_string())?;
    let dir = dir_in(data_dir);
    fsutil::create_private_dir(&dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let path = dir.join(format!("{}.json", stored.session));
    fsutil::write_private_atomic(&path, text.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
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
) -> Result<Vec<String>, String> {
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

pub(super) fn read(path: &Path) -> Result<Stored, String> {
    let text = fsutil::read_private_file(path).map_err(|e| e.to_string())?;
    let value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    docker::from_json(&value)
}
