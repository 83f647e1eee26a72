//! The worker's files under the session root (`persistence.directory`):
//! `<state>/state.json` (atomic temp + rename, 0600), the optional
//! `<state>/readable.md`, compact archives `<memory>/<archive-id>/memory.md`
//! with count-based retention, and the exclusive `session.lock` that keeps
//! two workers off one session directory.
//!
//! Archive ids are `<20-digit ordinal>-<UTC stamp>-<run_id>`; ordinals
//! continue across restarts. Cleanup removes only directories of that shape
//! holding exactly one regular `memory.md`, never recursively.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::config::{Persistence, Restore};
use super::conversation::{Conversation, STATE_FORMAT};
use super::engine::Storage;
use super::error::MockError;
use crate::util::{fsutil, time};

const STATE_FILE: &str = "state.json";
const READABLE_FILE: &str = "readable.md";
const ARCHIVE_FILE: &str = "memory.md";
const LOCK_FILE: &str = "session.lock";

/// `state.json` as written.
#[derive(Serialize)]
struct SavedRef<'a> {
    format: &'static str,
    session_id: &'a str,
    #[serde(flatten)]
    conversation: &'a Conversation,
}

/// `state.json` as read back.
#[derive(Deserialize)]
struct Saved {
    format: String,
    #[serde(flatten)]
    conversation: Conversation,
}

/// Files of one session.
pub(crate) struct FileStorage {
    session_id: String,
    state_dir: PathBuf,
    memory_dir: PathBuf,
    readable: bool,
    max_archives: usize,
    /// Holds the `flock` for the life of the process (closed on exec).
    _lock: Option<File>,
}

impl FileStorage {
    /// Creates the state directory and takes the session lock when
    /// persistence is enabled.
    pub(crate) fn open(config: &Persistence, session_id: &str) -> Result<FileStorage, MockError> {
        let lock = if config.enabled {
            for dir in [&config.directory, &config.state_dir] {
                fsutil::create_private_dir(dir).map_err(|err| MockError::io(dir, "create", err))?;
            }
            Some(lock(&config.directory.join(LOCK_FILE))?)
        } else {
            None
        };
        Ok(FileStorage {
            session_id: session_id.to_string(),
            state_dir: config.state_dir.clone(),
            memory_dir: config.memory_dir.clone(),
            readable: config.readable,
            max_archives: config.max_archives,
            _lock: lock,
        })
    }

    /// The saved conversation, or an empty one when there is none (or
    /// restoring is off). A file that cannot be read back is an error.
    pub(crate) fn restore(&self, restore: Restore) -> Result<Conversation, MockError> {
        let path = self.state_dir.join(STATE_FILE);
        if restore == Restore::Never || !path.exists() {
            return Ok(Conversation::default());
        }
        let text = fs::read_to_string(&path).map_err(|err| MockError::io(&path, "read", err))?;
        let saved: Saved = serde_json::from_str(&text).map_err(|err| MockError::Restore {
            path: path.clone(),
            reason: err.to_string(),
        })?;
        if saved.format != STATE_FORMAT {
            return Err(MockError::Restore {
                path,
                reason: format!("unknown format {:?}", saved.format),
            });
        }
        Ok(saved.conversation)
    }

    /// Existing archive directories, as `(ordinal, name)`.
    fn archives(&self) -> Vec<(u64, String)> {
        let Ok(entries) = fs::read_dir(&self.memory_dir) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                Some((archive_ordinal(&name)?, name))
            })
            .collect()
    }
}

/// The ordinal of a directory named like an archive.
fn archive_ordinal(name: &str) -> Option<u64> {
    let (ordinal, rest) = name.split_at_checked(20)?;
    let (stamp, run_id) = rest.strip_prefix('-')?.split_at_checked(16)?;
    let run_id = run_id.strip_prefix('-')?;
    let well_formed = ordinal.bytes().all(|b| b.is_ascii_digit())
        && stamp.bytes().all(|b| b.is_ascii_alphanumeric())
        && !run_id.is_empty()
        && run_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-');
    well_formed.then(|| ordinal.parse().ok()).flatten()
}

/// `YYYYMMDDTHHMMSSZ` for now.
fn stamp() -> String {
    let rfc = time::rfc3339_from_millis(time::now_millis());
    let compact: String = rfc[..19]
        .chars()
        .filter(|c| *c != '-' && *c != ':')
        .collect();
    format!("{compact}Z")
}

fn lock(path: &Path) -> Result<File, MockError> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(|err| MockError::io(path, "open", err))?;
    // SAFETY: flock on a descriptor this function owns.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        if err.kind() == std::io::ErrorKind::WouldBlock {
            return Err(MockError::Locked {
                path: path.to_path_buf(),
            });
        }
        return Err(MockError::io(path, "lock", err));
    }
    Ok(file)
}

/// An archive directory eligible for cleanup: a real directory holding
/// exactly one regular `memory.md`. Returns that file's size.
fn removable(dir: &Path) -> Option<u64> {
    if !fs::symlink_metadata(dir).ok()?.is_dir() {
        return None;
    }
    let entries: Vec<_> = fs::read_dir(dir).ok()?.flatten().collect();
    match entries.as_slice() {
        [only] if only.file_name() == ARCHIVE_FILE => {
            let meta = fs::symlink_metadata(only.path()).ok()?;
            meta.is_file().then_some(meta.len())
        }
        _ => None,
    }
}

impl Storage for FileStorage {
    fn save(&mut self, conversation: &Conversation) -> Result<Option<String>, String> {
        let saved = SavedRef {
            format: STATE_FORMAT,
            session_id: &self.session_id,
            conversation,
        };
        let bytes = serde_json::to_vec_pretty(&saved).map_err(|err| err.to_string())?;
        let path = self.state_dir.join(STATE_FILE);
        fsutil::write_private_atomic(&path, &bytes)
            .map_err(|err| format!("{}: {err}", path.display()))?;
        if !self.readable {
            return Ok(None);
        }
        let markdown = conversation.to_markdown(&self.session_id);
        let path = self.state_dir.join(READABLE_FILE);
        Ok(fsutil::write_private_atomic(&path, markdown.as_bytes())
            .err()
            .map(|err| format!("{}: {err}", path.display())))
    }

    fn archive(&mut self, run_id: &str, markdown: &str) -> Result<String, String> {
        let fail = |path: &Path, err: std::io::Error| format!("{}: {err}", path.display());
        fsutil::create_private_dir(&self.memory_dir).map_err(|err| fail(&self.memory_dir, err))?;
        let ordinal = self.archives().iter().map(|(n, _)| *n).max().unwrap_or(0) + 1;
        let dir = self
            .memory_dir
            .join(format!("{ordinal:020}-{}-{run_id}", stamp()));
        DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|err| fail(&dir, err))?;
        let file = dir.join(ARCHIVE_FILE);
        fsutil::write_private_new(&file, markdown.as_bytes()).map_err(|err| fail(&file, err))?;
        Ok(file.to_string_lossy().into_owned())
    }

    fn cleanup(&mut self, current: &str) -> Result<(u64, u64), String> {
        if self.max_archives == 0 {
            return Ok((0, 0));
        }
        let current_dir = Path::new(current)
            .parent()
            .and_then(Path::file_name)
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut others: Vec<(u64, String)> = self
            .archives()
            .into_iter()
            .filter(|(_, name)| *name != current_dir)
            .collect();
        others.sort_by(|a, b| b.cmp(a));
        let keep_others = self.max_archives.saturating_sub(1);
        let (mut archives, mut bytes) = (0, 0);
        let mut errors = Vec::new();
        for (_, name) in others.into_iter().skip(keep_others) {
            let dir = self.memory_dir.join(&name);
            let Some(size) = removable(&dir) else {
                continue;
            };
            let removed =
                fs::remove_file(dir.join(ARCHIVE_FILE)).and_then(|_| fs::remove_dir(&dir));
            match removed {
                Ok(()) => {
                    archives += 1;
                    bytes += size;
                }
                Err(err) => errors.push(format!("{}: {err}", dir.display())),
            }
        }
        if errors.is_empty() {
            Ok((archives, bytes))
        } else {
            Err(errors.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock_worker::conversation::{Memory, Turn};

    fn persistence(root: &Path, readable: bool, max_archives: usize) -> Persistence {
        Persistence {
            enabled: true,
            directory: root.to_path_buf(),
            state_dir: root.join("state"),
            memory_dir: root.join("memory"),
            restore: Restore::IfPresent,
            readable,
            on_step_finished: true,
            on_run_finished: true,
            on_shutdown: true,
            max_archives,
        }
    }

    fn temp_root() -> PathBuf {
        std::env::temp_dir().join(format!("mock-storage-{}", uuid::Uuid::new_v4()))
    }

    #[test]
    fn state_round_trips_through_state_json() {
        let root = temp_root();
        let config = persistence(&root, true, 5);
        let mut storage = FileStorage::open(&config, "demo").unwrap();
        assert_eq!(
            storage.restore(Restore::IfPresent).unwrap(),
            Conversation::default()
        );
        let mut conversation = Conversation {
            revision: 4,
            committed_response_sequence: 2,
            ..Conversation::default()
        };
        conversation.turns.push(Turn {
            user: vec![serde_json::json!({"type": "text", "modality": "text", "raw": "hi"})],
            internal: false,
            steps: vec![],
        });
        conversation.memory = Some(Memory {
            summary: "s".into(),
            memory_file: "/m".into(),
        });
        assert_eq!(storage.save(&conversation).unwrap(), None);
        let text = fs::read_to_string(root.join("state/state.json")).unwrap();
        assert!(text.contains("\"format\": \"simplex-mock-worker/1\""));
        assert!(text.contains("\"session_id\": \"demo\""));
        assert!(fs::read_to_string(root.join("state/readable.md"))
            .unwrap()
            .contains("**User**\n\nhi"));
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(root.join("state/state.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        drop(storage);
        let again = FileStorage::open(&config, "demo").unwrap();
        assert_eq!(again.restore(Restore::IfPresent).unwrap(), conversation);
        assert_eq!(
            again.restore(Restore::Never).unwrap(),
            Conversation::default()
        );
        fs::write(
            root.join("state/state.json"),
            "{\"format\": \"other\", \"turns\": []}",
        )
        .unwrap();
        assert!(matches!(
            again.restore(Restore::IfPresent),
            Err(MockError::Restore { .. })
        ));
        fs::write(root.join("state/state.json"), "garbage").unwrap();
        assert!(matches!(
            again.restore(Restore::IfPresent),
            Err(MockError::Restore { .. })
        ));
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn one_worker_per_session_directory() {
        let root = temp_root();
        let config = persistence(&root, false, 5);
        let first = FileStorage::open(&config, "demo").unwrap();
        assert!(matches!(
            FileStorage::open(&config, "demo"),
            Err(MockError::Locked { .. })
        ));
        drop(first);
        FileStorage::open(&config, "demo").unwrap();
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn archives_are_numbered_and_retained() {
        let root = temp_root();
        let mut storage = FileStorage::open(&persistence(&root, false, 2), "demo").unwrap();
        let first = storage.archive("run-a", "# one").unwrap();
        let second = storage.archive("run-b", "# two").unwrap();
        assert!(first.ends_with("-run-a/memory.md"), "{first}");
        let name = Path::new(&second).parent().unwrap().file_name().unwrap();
        assert!(name.to_string_lossy().starts_with("00000000000000000002-"));
        assert_eq!(fs::read_to_string(&first).unwrap(), "# one");
        // Foreign things in the memory directory are left alone.
        fs::create_dir_all(root.join("memory/notes")).unwrap();
        let odd = root.join("memory/00000000000000000000-20260101T000000Z-extra");
        fs::create_dir_all(&odd).unwrap();
        fs::write(odd.join("memory.md"), "x").unwrap();
        fs::write(odd.join("other.txt"), "x").unwrap();
        let third = storage.archive("run-c", "# three").unwrap();
        assert_eq!(storage.cleanup(&third).unwrap(), (1, 5));
        assert!(!Path::new(&first).exists());
        assert!(Path::new(&second).exists() && Path::new(&third).exists());
        assert!(root.join("memory/notes").exists() && odd.exists());
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn archive_names() {
        assert_eq!(
            archive_ordinal("00000000000000000012-20260101T000000Z-5f0c-aa"),
            Some(12)
        );
        assert_eq!(archive_ordinal("12-20260101T000000Z-x"), None);
        assert_eq!(
            archive_ordinal("00000000000000000012-20260101T000000Z-"),
            None
        );
        assert_eq!(
            archive_ordinal("00000000000000000012-2026-01-01T00:00-x"),
            None
        );
        assert_eq!(stamp().len(), 16);
    }
}
