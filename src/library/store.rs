//! The library's files and a session's snapshot of them, on disk.
//!
//! ```text
//! <dataDir>/configs/launch/<id>.jsonc     launch files
//! <dataDir>/configs/worker/<id>.yaml      worker files
//! <dataDir>/sessions/<id>/config/         a session's snapshot:
//!     launch.jsonc  config.yaml  source.json
//! ```
//!
//! Directories are 0700 and files 0600, every write is atomic
//! (`util::fsutil`), and nothing is read through a symbolic link: a file is
//! opened with `O_NOFOLLOW` and must be a regular file of at most
//! [`MAX_FILE_BYTES`]; listings skip anything that is not one. One hub
//! process owns the library: a mutex makes each check-then-write (the
//! revision compare and the write, a rename's copy and delete) one step
//! against the other requests of this process. It is held across that file
//! I/O, and nothing else is ever taken while it is held.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use serde_json::{json, Value};

use super::{check_id, launch, revision, worker, Kind, LibraryError, Selection, MAX_FILE_BYTES};
use crate::util::fsutil::{self, BoundedRead};
use crate::wire::yaml_edit::{self, Edit};

/// The snapshot files in a session's `config/` directory.
pub const SNAPSHOT_LAUNCH: &str = "launch.jsonc";
pub const SNAPSHOT_WORKER: &str = "config.yaml";
pub const SNAPSHOT_SOURCE: &str = "source.json";

/// One library file: its exact text and revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigFile {
    pub kind: Kind,
    pub id: String,
    pub text: String,
    pub revision: String,
}

impl ConfigFile {
    /// `{kind, id, text, revision}`, the Node hub's file record.
    pub fn to_json(&self) -> Value {
        json!({
            "kind": self.kind.as_str(),
            "id": self.id,
            "text": self.text,
            "revision": self.revision,
        })
    }
}

/// The configuration library of one data directory.
pub struct Library {
    root: PathBuf,
    lock: Mutex<()>,
}

impl Library {
    /// Opens `<data_dir>/configs`, creating its two folders (0700), and
    /// seeds `local`, `docker` and `default` when they are absent, and
    /// removes the temporary files of saves a crash cut short. Other files
    /// are never touched.
    pub fn open(data_dir: &Path) -> io::Result<Library> {
        let library = Library {
            root: data_dir.join("configs"),
            lock: Mutex::new(()),
        };
        for kind in Kind::ALL {
            let dir = library.dir(kind);
            fsutil::create_private_dir(&dir)?;
            if !fs::symlink_metadata(&dir)?.is_dir() {
                return Err(io::Error::other(format!(
                    "{} is not a directory",
                    dir.display()
                )));
            }
            // A save cut short by a crash leaves its temporary sibling.
            if let Err(err) = fsutil::sweep_temp(&dir, |_| true) {
                log::warn!(
                    "{}: unfinished temporary files not removed: {err}",
                    dir.display()
                );
            }
        }
        for (kind, id, text) in super::SEEDS {
            let path = library.path(kind, id);
            match fs::symlink_metadata(&path) {
                Ok(_) => {}
                Err(err) if err.kind() == io::ErrorKind::NotFound => {
                    fsutil::write_private_atomic(&path, text.as_bytes())?;
                }
                Err(err) => return Err(err),
            }
        }
        Ok(library)
    }

    fn guard(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn dir(&self, kind: Kind) -> PathBuf {
        self.root.join(kind.as_str())
    }

    /// The file of a (checked) id.
    fn path(&self, kind: Kind, id: &str) -> PathBuf {
        self.dir(kind).join(format!("{id}{}", kind.suffix()))
    }

    /// The ids of `kind`, sorted: regular files with the kind's suffix and
    /// a valid id (symbolic links and anything else are left out).
    pub fn list(&self, kind: Kind) -> Result<Vec<String>, LibraryError> {
        let dir = self.dir(kind);
        let entries = fs::read_dir(&dir).map_err(|err| storage(&dir, &err))?;
        let mut ids = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|err| storage(&dir, &err))?;
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(kind.suffix())) else {
                continue;
            };
            // `file_type` does not follow a symbolic link.
            let regular = entry.file_type().is_ok_and(|t| t.is_file());
            if regular && super::is_valid_id(id) {
                ids.push(id.to_string());
            }
        }
        ids.sort();
        Ok(ids)
    }

    /// Reads one file.
    pub fn read(&self, kind: Kind, id: &str) -> Result<ConfigFile, LibraryError> {
        check_id(id)?;
        let text = read_bounded(&self.path(kind, id))?;
        Ok(ConfigFile {
            kind,
            id: id.to_string(),
            revision: revision(&text),
            text,
        })
    }

    /// Validates `text` as a document of `kind`.
    pub fn validate(kind: Kind, text: &str) -> Result<(), LibraryError> {
        check_text(text)?;
        match kind {
            Kind::Launch => launch::parse(text).map(|_| ()),
            Kind::Worker => worker::check(text),
        }
    }

    /// Writes `text` as `id` when `expected` is the file's current
    /// revision, or `None` and there is no such file (a new file). The
    /// revision is compared before the text is validated.
    pub fn save(
        &self,
        kind: Kind,
        id: &str,
        text: &str,
        expected: Option<&str>,
    ) -> Result<ConfigFile, LibraryError> {
        check_id(id)?;
        let _held = self.guard();
        self.save_locked(kind, id, text, expected)
    }

    fn save_locked(
        &self,
        kind: Kind,
        id: &str,
        text: &str,
        expected: Option<&str>,
    ) -> Result<ConfigFile, LibraryError> {
        let current = match self.read(kind, id) {
            Ok(file) => Some(file.revision),
            Err(LibraryError::NotFound(_)) => None,
            Err(err) => return Err(err),
        };
        if current.as_deref() != expected {
            return Err(LibraryError::Conflict(match current {
                Some(_) if expected.is_none() => {
                    "a configuration with this id exists; reload it before saving".into()
                }
                _ => "the configuration changed; reload it before saving".into(),
            }));
        }
        Library::validate(kind, text)?;
        let path = self.path(kind, id);
        fsutil::write_private_atomic(&path, text.as_bytes()).map_err(|e| storage(&path, &e))?;
        self.read(kind, id)
    }

    /// Deletes `id` when `expected` is its current revision.
    pub fn remove(&self, kind: Kind, id: &str, expected: Option<&str>) -> Result<(), LibraryError> {
        check_id(id)?;
        let _held = self.guard();
        self.remove_locked(kind, id, expected)
    }

    fn remove_locked(
        &self,
        kind: Kind,
        id: &str,
        expected: Option<&str>,
    ) -> Result<(), LibraryError> {
        let current = self.read(kind, id)?;
        if Some(current.revision.as_str()) != expected {
            return Err(LibraryError::Conflict(
                "the configuration changed; reload it before deleting".into(),
            ));
        }
        let path = self.path(kind, id);
        fs::remove_file(&path).map_err(|e| storage(&path, &e))
    }

    /// Renames `id` to `to` when `expected` is its current revision and no
    /// file `to` exists; returns the new file's record.
    pub fn rename(
        &self,
        kind: Kind,
        id: &str,
        to: &str,
        expected: Option<&str>,
    ) -> Result<ConfigFile, LibraryError> {
        check_id(id)?;
        check_id(to)?;
        let _held = self.guard();
        let original = self.read(kind, id)?;
        if Some(original.revision.as_str()) != expected {
            return Err(LibraryError::Conflict(
                "the configuration changed; reload it before renaming".into(),
            ));
        }
        let saved = self.save_locked(kind, to, &original.text, None)?;
        self.remove_locked(kind, id, Some(&original.revision))?;
        Ok(saved)
    }

    /// Reads and validates the two files of `selection`: what a session's
    /// snapshot will hold.
    pub fn prepare_snapshot(&self, selection: &Selection) -> Result<Snapshot, LibraryError> {
        let launch = self.read(Kind::Launch, &selection.launch)?;
        let worker = self.read(Kind::Worker, &selection.worker)?;
        Library::validate(Kind::Launch, &launch.text)?;
        Library::validate(Kind::Worker, &worker.text)?;
        Ok(Snapshot { launch, worker })
    }
}

/// The two files a session is about to take a snapshot of.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub launch: ConfigFile,
    pub worker: ConfigFile,
}

impl Snapshot {
    /// `source.json`: the ids and revisions the snapshot was taken from.
    pub fn source(&self) -> Value {
        json!({
            "launchConfig": self.launch.id,
            "workerConfig": self.worker.id,
            "launchRevision": self.launch.revision,
            "workerRevision": self.worker.revision,
        })
    }

    /// Publishes the snapshot as `<session_dir>/config/`: the three files
    /// are written into a new private directory beside it, which then
    /// replaces the old `config/` (kept until the new one is in place, and
    /// put back if that fails). The worker file's `persistence.directory`
    /// is set to the session directory; the other hub-owned fields keep
    /// their placeholders until a launch fills them in.
    pub fn publish(&self, session_dir: &Path) -> Result<(), LibraryError> {
        let root = session_dir.display().to_string();
        let worker_text = yaml_edit::edit(
            &self.worker.text,
            &[Edit::string(&["persistence", "directory"], &root)],
        )
        .map_err(|err| {
            LibraryError::invalid(format!("the worker file cannot be snapshotted: {err}"))
        })?
        .text;
        fsutil::create_private_dir(session_dir).map_err(|e| storage(session_dir, &e))?;
        let tag = uuid::Uuid::new_v4().simple().to_string();
        let fresh = session_dir.join(format!(".config-{tag}"));
        let backup = session_dir.join(format!(".config-backup-{tag}"));
        let destination = session_dir.join("config");
        let result = (|| -> io::Result<()> {
            fs::create_dir(&fresh)?;
            fs::set_permissions(&fresh, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
            let source = serde_json::to_string_pretty(&self.source()).expect("JSON encodes");
            for (name, text) in [
                (SNAPSHOT_LAUNCH, self.launch.text.as_str()),
                (SNAPSHOT_WORKER, worker_text.as_str()),
                (SNAPSHOT_SOURCE, source.as_str()),
            ] {
                fsutil::write_private_atomic(&fresh.join(name), text.as_bytes())?;
            }
            let moved = match fs::symlink_metadata(&destination) {
                Ok(meta) if meta.is_dir() => {
                    fs::rename(&destination, &backup)?;
                    true
                }
                Ok(_) => {
                    // Never follow or keep a link or file in its place.
                    fs::remove_file(&destination)?;
                    false
                }
                Err(err) if err.kind() == io::ErrorKind::NotFound => false,
                Err(err) => return Err(err),
            };
            if let Err(err) = fs::rename(&fresh, &destination) {
                if moved {
                    let _ = fs::rename(&backup, &destination);
                }
                return Err(err);
            }
            if moved {
                fs::remove_dir_all(&backup)?;
            }
            fs::File::open(session_dir)?.sync_all()
        })();
        if result.is_err() {
            let _ = fs::remove_dir_all(&fresh);
        }
        result.map_err(|e| storage(&destination, &e))
    }
}

/// A session's launch snapshot (`config/launch.jsonc`), parsed: `None` for
/// a session without one (a session that launches with the hub-wide
/// launcher).
pub fn session_launch(config_dir: &Path) -> Result<Option<launch::LaunchDoc>, BadLaunchSnapshot> {
    match read_bounded(&config_dir.join(SNAPSHOT_LAUNCH)) {
        Ok(text) => launch::parse(&text).map(Some).map_err(BadLaunchSnapshot),
        Err(LibraryError::NotFound(_)) => Ok(None),
        Err(err) => Err(BadLaunchSnapshot(err)),
    }
}

/// A session's launch snapshot that cannot be read or is not valid (its
/// worker cannot be started from it).
#[derive(Debug)]
pub struct BadLaunchSnapshot(LibraryError);

impl fmt::Display for BadLaunchSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot use the session's launch snapshot config/launch.jsonc: {}",
            self.0
        )
    }
}

impl std::error::Error for BadLaunchSnapshot {}

/// Settles a snapshot replacement ([`Snapshot::publish`]) that a crash cut
/// short, at start, before the session is used: a `.config-backup-*` beside
/// a missing `config/` is the old snapshot put back (the new one was not in
/// place yet); one beside a `config/` is left from a finished replacement
/// and removed, as is every unfinished `.config-*`. Never follows a link.
pub fn settle_snapshot(session_dir: &Path) -> io::Result<()> {
    let entries = match fs::read_dir(session_dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(err),
    };
    let mut backups = Vec::new();
    let mut fresh = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !entry.file_type()?.is_dir() {
            continue;
        }
        if name.starts_with(".config-backup-") {
            backups.push(entry.path());
        } else if name.starts_with(".config-") {
            fresh.push(entry.path());
        }
    }
    let destination = session_dir.join("config");
    for backup in backups {
        match fs::symlink_metadata(&destination) {
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                fs::rename(&backup, &destination)?;
                log::warn!(
                    "{}: a configuration snapshot replacement was cut short; the previous \
                     snapshot is back in place",
                    destination.display()
                );
            }
            _ => fs::remove_dir_all(&backup)?,
        }
    }
    for dir in fresh {
        fs::remove_dir_all(&dir)?;
    }
    Ok(())
}

/// `spec` with the pair a session's snapshot was taken from
/// (`config/source.json`) when it names another: a replacement's spec is
/// written after its files, so a crash between them leaves the files
/// right. `None` when the spec already agrees or there is no readable
/// source.
pub fn spec_with_snapshot_pair(spec: &Value, config_dir: &Path) -> Option<Value> {
    let text = read_bounded(&config_dir.join(SNAPSHOT_SOURCE)).ok()?;
    let source: Value = serde_json::from_str(&text).ok()?;
    with_pair(spec, &source)
}

fn with_pair(spec: &Value, source: &Value) -> Option<Value> {
    let launch = source.get("launchConfig")?.as_str()?;
    let worker = source.get("workerConfig")?.as_str()?;
    let map = spec.as_object()?;
    if map.get("launchConfig").and_then(Value::as_str) == Some(launch)
        && map.get("workerConfig").and_then(Value::as_str) == Some(worker)
    {
        return None;
    }
    let mut map = map.clone();
    map.insert("launchConfig".into(), Value::from(launch));
    map.insert("workerConfig".into(), Value::from(worker));
    Some(Value::Object(map))
}

/// A session's launch snapshot's text, for a clean-forked child of it:
/// made absolute against the session's `config/` directory
/// ([`launch::rebased`]); `None` for a session without one.
pub fn session_launch_for_child(config_dir: &Path) -> Result<Option<String>, LibraryError> {
    match read_bounded(&config_dir.join(SNAPSHOT_LAUNCH)) {
        Ok(text) => launch::rebased(&text, config_dir).map(Some),
        Err(LibraryError::NotFound(_)) => Ok(None),
        Err(err) => Err(err),
    }
}

/// The request text rules shared by validate and save.
fn check_text(text: &str) -> Result<(), LibraryError> {
    if text.len() > MAX_FILE_BYTES {
        return Err(LibraryError::TooLarge(format!(
            "a configuration is at most {MAX_FILE_BYTES} bytes"
        )));
    }
    Ok(())
}

/// Reads a library or snapshot file: never through a symbolic link, only
/// a regular file, at most [`MAX_FILE_BYTES`], UTF-8.
fn read_bounded(path: &Path) -> Result<String, LibraryError> {
    fsutil::read_regular_bounded(path, MAX_FILE_BYTES).map_err(|err| match err {
        BoundedRead::NotFound => LibraryError::NotFound("no such configuration".into()),
        BoundedRead::NotRegular => {
            LibraryError::invalid("the configuration must be a regular file (not a symbolic link)")
        }
        BoundedRead::TooLarge => LibraryError::TooLarge(format!(
            "the configuration file exceeds {MAX_FILE_BYTES} bytes"
        )),
        BoundedRead::NotUtf8 => LibraryError::invalid("the configuration file is not UTF-8 text"),
        BoundedRead::Io(err) => storage(path, &err),
    })
}

fn storage(path: &Path, err: &io::Error) -> LibraryError {
    LibraryError::Storage(format!("cannot use {}: {err}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testkit::TempDir;

    #[test]
    fn a_cut_short_replacement_is_settled() {
        let dir = TempDir::new("settle");
        let session = dir.path();
        // Cut after the old snapshot was moved aside: it is put back.
        fs::create_dir(session.join(".config-backup-a")).unwrap();
        fs::write(session.join(".config-backup-a/launch.jsonc"), "old").unwrap();
        fs::create_dir(session.join(".config-b")).unwrap();
        fs::write(session.join(".config-b/launch.jsonc"), "new").unwrap();
        settle_snapshot(session).unwrap();
        assert_eq!(
            fs::read_to_string(session.join("config/launch.jsonc")).unwrap(),
            "old"
        );
        assert!(!session.join(".config-backup-a").exists());
        assert!(!session.join(".config-b").exists());
        // Cut after the new one was in place: the leftover backup goes.
        fs::create_dir(session.join(".config-backup-c")).unwrap();
        settle_snapshot(session).unwrap();
        assert!(!session.join(".config-backup-c").exists());
        assert_eq!(
            fs::read_to_string(session.join("config/launch.jsonc")).unwrap(),
            "old"
        );
        // A file of that name, and a missing session directory, are left.
        fs::write(session.join(".config-file"), "x").unwrap();
        settle_snapshot(session).unwrap();
        assert!(session.join(".config-file").is_file());
        settle_snapshot(&session.join("gone")).unwrap();
    }

    #[test]
    fn the_spec_takes_the_pair_of_its_snapshot() {
        let source = json!({"launchConfig": "b", "workerConfig": "w2", "launchRevision": "r"});
        let spec = json!({"launchConfig": "a", "workerConfig": "w", "threads": 2});
        assert_eq!(
            with_pair(&spec, &source),
            Some(json!({"launchConfig": "b", "workerConfig": "w2", "threads": 2}))
        );
        let agreed = json!({"launchConfig": "b", "workerConfig": "w2"});
        assert_eq!(with_pair(&agreed, &source), None);
        assert_eq!(with_pair(&spec, &json!({"launchConfig": "b"})), None);
        assert_eq!(with_pair(&Value::Null, &source), None);
        let dir = TempDir::new("pair");
        assert_eq!(spec_with_snapshot_pair(&spec, dir.path()), None);
        fs::write(dir.path().join(SNAPSHOT_SOURCE), source.to_string()).unwrap();
        assert_eq!(
            spec_with_snapshot_pair(&spec, dir.path()).unwrap()["launchConfig"],
            "b"
        );
    }
}
