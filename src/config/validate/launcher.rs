//! How a worker is started: the launcher kind, its pid file and the Docker
//! management environment (`launcher.*`), and the worker's system prompt
//! file (`worker.systemPromptFile`).

use serde_json::Value;

use super::check::Check;
use crate::config::LauncherKind;

impl Check<'_> {
    pub(super) fn launcher_kind(&mut self, path: &str) -> LauncherKind {
        let value = self.get(path);
        if let Some(kind) = value
            .and_then(Value::as_str)
            .and_then(|name| LauncherKind::ALL.into_iter().find(|k| k.as_str() == name))
        {
            return kind;
        }
        if let Some(value) = value {
            self.fail(
                path,
                value.clone(),
                "must be \"simplex-worker\", \"command\" or \"built-in\"",
            );
        }
        LauncherKind::SimplexWorker
    }

    /// Empty, or an absolute path (a template: placeholders are expanded
    /// when a worker starts; `{session_dir}` and `{data_dir}` are absolute
    /// themselves).
    pub(super) fn pid_file(&mut self, path: &str) -> String {
        let file = self.path(path, false);
        let absolute = ["/", "{session_dir}", "{data_dir}"]
            .iter()
            .any(|start| file.starts_with(start));
        if !file.is_empty() && !absolute {
            self.fail(
                path,
                Value::from(file),
                "must be empty or an absolute path (it may start with {session_dir} or {data_dir})",
            );
            return String::new();
        }
        file
    }

    /// Unique environment variable names (`[A-Za-z_][A-Za-z0-9_]*`), no
    /// patterns.
    pub(super) fn env_names(&mut self, path: &str) -> Vec<String> {
        let names = self.strings(path);
        for (i, name) in names.iter().enumerate() {
            if !is_env_name(name) {
                self.fail_at(
                    path,
                    format!("{path}[{i}]"),
                    Value::from(name.as_str()),
                    "must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*, no wildcards)",
                );
            } else if names[..i].contains(name) {
                self.fail_at(
                    path,
                    format!("{path}[{i}]"),
                    Value::from(name.as_str()),
                    "is listed twice",
                );
            }
        }
        names
    }

    pub(super) fn prompt_file(&mut self, path: &str) -> String {
        let file = match self.get(path) {
            Some(Value::String(file)) => file.clone(),
            Some(other) => {
                self.fail(path, other.clone(), "must be a string");
                return String::new();
            }
            None => return String::new(),
        };
        if !is_installation_relative(&file) {
            self.fail(
                path,
                Value::from(file),
                "must be a non-empty path relative to the worker installation: no NUL, no leading \
                 '/' or '\\', no drive letter, no '..' segment",
            );
            return String::new();
        }
        file
    }
}

/// An environment variable name as a shell would take it.
/// Whether `name` is an environment variable name (`[A-Za-z_][A-Za-z0-9_]*`).
pub(crate) fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A path that stays inside the worker's installation directory on either
/// Unix or Windows.
fn is_installation_relative(path: &str) -> bool {
    let bytes = path.as_bytes();
    let drive = bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':';
    !path.is_empty()
        && !path.contains('\0')
        && !path.starts_with(['/', '\\'])
        && !drive
        && !path.split(['/', '\\']).any(|segment| segment == "..")
}
