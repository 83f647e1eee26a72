//! The read-only snapshot view: the worker's persisted `state.json` and
//! `readable.md`, read from `<persistence.directory>/<state>/` as named by
//! the session's worker configuration. Files over 8 MiB are skipped, and no
//! path inside the session tree may pass through a symlink.

use std::path::{Component, Path, PathBuf};

use serde_json::{json, Value};

use super::render;
use crate::wire::yaml_edit::read;

/// Largest file the snapshot reads.
pub const MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// Builds `{session_id, state, readable, files, state_error?,
/// file_status}` for a session, as the Node hub shapes it: `files` maps
/// `state` and `readable` to the path of each file that was read; a
/// `state.json` that is not JSON leaves `state` null and says why in
/// `state_error`. `file_status` (this hub's) lists every file looked at
/// with what happened (`read`, `missing`, `too_large`, `refused`,
/// `unreadable`, and its size when known).
pub fn read(session_id: &str, session_dir: &Path) -> Value {
    let config_path = session_dir.join("config").join("config.yaml");
    let state_dir = std::fs::read_to_string(&config_path)
        .ok()
        .and_then(|text| read::read_json(&text).ok())
        .and_then(|doc| render::state_dir(&doc))
        .unwrap_or_else(|| session_dir.join("state"));
    let mut status = Vec::new();
    let mut files = serde_json::Map::new();
    let state_path = state_dir.join("state.json");
    let mut state_error = None;
    let state = read_file(session_dir, &state_path, &mut status).and_then(|text| {
        files.insert("state".into(), json!(state_path.display().to_string()));
        serde_json::from_str::<Value>(&text)
            .map_err(|err| state_error = Some(format!("state.json is not JSON: {err}")))
            .ok()
    });
    let readable_path = state_dir.join("readable.md");
    let readable = read_file(session_dir, &readable_path, &mut status).map(|text| {
        files.insert(
            "readable".into(),
            json!(readable_path.display().to_string()),
        );
        Value::String(text)
    });
    let mut out = json!({
        "session_id": session_id,
        "state": state,
        "readable": readable,
        "files": files,
    });
    if let Some(err) = state_error {
        out["state_error"] = json!(err);
    }
    out["file_status"] = Value::Array(status);
    out
}

/// Reads one file if it is a regular file inside `root` reached without
/// symlinks and not larger than the limit; records what happened.
fn read_file(root: &Path, path: &Path, files: &mut Vec<Value>) -> Option<String> {
    let name = path.file_name()?.to_string_lossy().into_owned();
    let entry =
        |status: &str, bytes: Option<u64>| json!({"name": name, "status": status, "bytes": bytes});
    if !inside_without_symlinks(root, path) {
        files.push(entry("refused", None));
        return None;
    }
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(_) => {
            files.push(entry("missing", None));
            return None;
        }
    };
    if !meta.is_file() {
        files.push(entry("refused", None));
        return None;
    }
    if meta.len() > MAX_FILE_BYTES {
        files.push(entry("too_large", Some(meta.len())));
        return None;
    }
    match std::fs::read(path) {
        Ok(bytes) => {
            files.push(entry("read", Some(bytes.len() as u64)));
            Some(String::from_utf8_lossy(&bytes).into_owned())
        }
        Err(_) => {
            files.push(entry("unreadable", None));
            None
        }
    }
}

/// Whether `path` lies under `root` with no `..` and no symlink on the way
/// (the root itself may be reached through symlinked ancestors).
fn inside_without_symlinks(root: &Path, path: &Path) -> bool {
    let Ok(rest) = path.strip_prefix(root) else {
        return false;
    };
    let mut current = PathBuf::from(root);
    for component in rest.components() {
        match component {
            Component::Normal(part) => current.push(part),
            _ => return false,
        }
        match std::fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => return false,
            _ => {}
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_state_and_refuses_symlinks_and_large_files() {
        let root = std::env::temp_dir().join(format!("hub-snap-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(root.join("state")).unwrap();
        std::fs::write(root.join("state/state.json"), r#"{"turns": 2}"#).unwrap();
        let snap = read("s", &root);
        assert_eq!(snap["state"], json!({"turns": 2}));
        assert_eq!(snap["readable"], Value::Null);
        let state_path = root.join("state/state.json").display().to_string();
        assert_eq!(snap["files"], json!({"state": state_path}));
        assert!(snap.get("state_error").is_none());
        std::fs::write(root.join("state/state.json"), "{not json").unwrap();
        let snap = read("s", &root);
        assert_eq!(snap["state"], Value::Null);
        assert!(
            snap["state_error"].as_str().unwrap().contains("not JSON"),
            "{snap}"
        );
        assert_eq!(snap["files"], json!({"state": state_path}));

        std::fs::write(root.join("outside.md"), "secret").unwrap();
        std::os::unix::fs::symlink(root.join("outside.md"), root.join("state/readable.md"))
            .unwrap();
        let snap = read("s", &root);
        assert_eq!(snap["readable"], Value::Null);
        assert!(snap["file_status"].to_string().contains("refused"));
        assert!(snap["files"].get("readable").is_none());

        let f = std::fs::File::create(root.join("state/state.json")).unwrap();
        f.set_len(MAX_FILE_BYTES + 1).unwrap();
        let snap = read("s", &root);
        assert_eq!(snap["state"], Value::Null);
        assert!(snap["file_status"].to_string().contains("too_large"));
        assert_eq!(snap["files"], json!({}));

        std::fs::remove_dir_all(&root).unwrap();
        let linked = std::env::temp_dir().join(format!("hub-snap-link-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&linked).unwrap();
        assert!(!inside_without_symlinks(&linked, &linked.join("../x")));
        std::fs::remove_dir_all(&linked).unwrap();
    }
}
