//! Path-valued keys: `~` expansion and resolution against a base directory.
//!
//! Each layer of the configuration is resolved on its own before the merge,
//! because the base depends on where a value came from: the file's
//! directory for values in the file, the current directory for command-line
//! overrides. Resolution is lexical (like Node's `path.resolve`); nothing
//! here looks at the disk.

use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use super::ConfigError;

/// The path-valued keys, as JSON pointers, with their configuration names.
const DATA_DIR: (&str, &str) = ("/dataDir", "dataDir");
const WORKER_BIN: (&str, &str) = ("/worker/bin", "worker.bin");
const WORKSPACE: (&str, &str) = (
    "/worker/environment/workspace",
    "worker.environment.workspace",
);

/// Collapses `.` and `..` components without touching the disk. A `..` at
/// the root stays at the root.
pub(super) fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                let last_is_normal =
                    matches!(out.components().next_back(), Some(Component::Normal(_)));
                if last_is_normal {
                    out.pop();
                } else if !out.has_root() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    out
}

/// `path` made absolute against `base` (when relative) and normalized.
pub(super) fn absolute(base: &Path, path: &Path) -> PathBuf {
    normalize(&base.join(path))
}

/// True for `~` and `~/...`, the forms expanded with the home directory.
/// `~user` is not expanded.
pub(super) fn is_tilde(value: &str) -> bool {
    value == "~" || value.starts_with("~/")
}

/// Resolves the path-valued keys present in one layer, in place. Values
/// that are not non-empty strings are left for validation to report.
pub(super) fn resolve_layer(
    layer: &mut Value,
    base: &Path,
    home: &Path,
) -> Result<(), ConfigError> {
    if let Some(Value::String(value)) = layer.pointer_mut(DATA_DIR.0) {
        if is_tilde(value) {
            // Without a home directory the value stays as written; if it
            // survives the merge, `check_home` reports it.
            if !home.as_os_str().is_empty() {
                let rest = value.trim_start_matches('~').trim_start_matches('/');
                let expanded = absolute(base, &home.join(rest));
                *value = to_string(DATA_DIR.1, expanded)?;
            }
        } else if !value.is_empty() {
            *value = to_string(DATA_DIR.1, absolute(base, Path::new(value.as_str())))?;
        }
    }
    if let Some(Value::String(value)) = layer.pointer_mut(WORKER_BIN.0) {
        // A bare name is a command looked up in PATH when the worker starts.
        if value.contains('/') {
            *value = to_string(WORKER_BIN.1, absolute(base, Path::new(value.as_str())))?;
        }
    }
    if let Some(Value::String(value)) = layer.pointer_mut(WORKSPACE.0) {
        if !value.is_empty() {
            *value = to_string(WORKSPACE.1, absolute(base, Path::new(value.as_str())))?;
        }
    }
    Ok(())
}

/// Fails when the merged `dataDir` still starts with `~` because no home
/// directory was known.
pub(super) fn check_home(merged: &Value) -> Result<(), ConfigError> {
    match merged.pointer(DATA_DIR.0) {
        Some(Value::String(value)) if is_tilde(value) => Err(ConfigError::NoHome {
            key: DATA_DIR.1,
            value: value.clone(),
        }),
        _ => Ok(()),
    }
}

/// A path as a JSON string; the configuration holds only UTF-8 paths.
pub(super) fn to_string(key: &'static str, path: PathBuf) -> Result<String, ConfigError> {
    path.into_os_string()
        .into_string()
        .map_err(|raw| ConfigError::NonUtf8Path {
            key,
            path: PathBuf::from(raw),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn normalize_is_lexical() {
        assert_eq!(normalize(Path::new("/a/./b/../c/")), Path::new("/a/c"));
        assert_eq!(normalize(Path::new("/../x")), Path::new("/x"));
        assert_eq!(normalize(Path::new("a/../../b")), Path::new("../b"));
        assert_eq!(normalize(Path::new("a/..")), Path::new("."));
        assert_eq!(
            absolute(Path::new("/etc/hub"), Path::new("../data")),
            Path::new("/etc/data")
        );
        assert_eq!(
            absolute(Path::new("/etc/hub"), Path::new("/abs")),
            Path::new("/abs")
        );
    }

    #[test]
    fn layer_resolution_follows_the_base() {
        let mut layer = json!({
            "dataDir": "data",
            "worker": {"bin": "./bin/w", "environment": {"workspace": "ws"}}
        });
        resolve_layer(&mut layer, Path::new("/etc/simplex"), Path::new("/home/u")).unwrap();
        assert_eq!(layer["dataDir"], "/etc/simplex/data");
        assert_eq!(layer["worker"]["bin"], "/etc/simplex/bin/w");
        assert_eq!(
            layer["worker"]["environment"]["workspace"],
            "/etc/simplex/ws"
        );
    }

    #[test]
    fn bare_worker_bin_and_empty_values_stay() {
        let mut layer = json!({"dataDir": "", "worker": {"bin": "simplex_worker", "environment": {"workspace": ""}}});
        let before = layer.clone();
        resolve_layer(&mut layer, Path::new("/x"), Path::new("/home/u")).unwrap();
        assert_eq!(layer, before);
    }

    #[test]
    fn tilde_expands_with_home_only_in_its_two_forms() {
        for (input, expected) in [
            ("~", "/home/u"),
            ("~/", "/home/u"),
            ("~/.simplex/hub", "/home/u/.simplex/hub"),
            ("~other/x", "/base/~other/x"),
            ("x/~/y", "/base/x/~/y"),
        ] {
            let mut layer = json!({ "dataDir": input });
            resolve_layer(&mut layer, Path::new("/base"), Path::new("/home/u")).unwrap();
            assert_eq!(layer["dataDir"], expected, "input {input}");
        }
    }

    #[test]
    fn tilde_without_home_is_reported_after_the_merge() {
        let mut layer = json!({ "dataDir": "~/x" });
        resolve_layer(&mut layer, Path::new("/base"), Path::new("")).unwrap();
        assert_eq!(layer["dataDir"], "~/x");
        let err = check_home(&layer).unwrap_err();
        assert_eq!(
            err.to_string(),
            "dataDir: cannot expand \"~/x\" because HOME is not set"
        );
    }
}
