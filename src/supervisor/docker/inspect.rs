//! The management commands' command lines (`docker kill`, `docker
//! inspect`, after the launch's global options) and what `docker inspect`
//! printed: running, stopped with its status, gone, or unknown.

use serde_json::Value;

use super::Target;

/// What `docker inspect --format` prints: the container's id and its state
/// object, one JSON object on one line.
pub const INSPECT_FORMAT: &str = r#"{"Id":{{json .Id}},"State":{{json .State}}}"#;

/// A signal for the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Term,
    Kill,
}

impl Signal {
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Term => "TERM",
            Signal::Kill => "KILL",
        }
    }
}

/// `docker [global options] kill --signal SIG CONTAINER`. `container` is
/// the id once known, else the name.
pub fn kill_args(target: &Target, container: &str, signal: Signal) -> Vec<String> {
    let mut args = target.global_args.clone();
    args.extend(
        ["kill", "--signal", signal.as_str(), container]
            .iter()
            .map(|s| s.to_string()),
    );
    args
}

/// `docker [global options] inspect --type container --format
/// INSPECT_FORMAT CONTAINER`.
pub fn inspect_args(target: &Target, container: &str) -> Vec<String> {
    let mut args = target.global_args.clone();
    args.extend(
        [
            "inspect",
            "--type",
            "container",
            "--format",
            INSPECT_FORMAT,
            container,
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    args
}

/// What `docker inspect` said about the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inspected {
    /// Running (also while paused or restarting).
    Running { id: Option<String> },
    /// It exists and runs nothing: exited (with its status), dead,
    /// created but never started, or being removed.
    Stopped {
        id: Option<String>,
        code: Option<i32>,
    },
    /// No such container (removed, e.g. by `--rm`).
    Gone,
    /// The daemon could not be asked or the answer cannot be read; never
    /// evidence of an end.
    Unknown(String),
}

impl Inspected {
    /// Whether the container certainly runs nothing any more.
    pub fn runs_nothing(&self) -> bool {
        matches!(self, Inspected::Stopped { .. } | Inspected::Gone)
    }

    /// Whether the container is over: gone, or (without `--rm`, when
    /// nothing will remove it) stopped. A `--rm` container that has
    /// stopped is over once the daemon has removed it.
    pub fn over(&self, auto_remove: bool) -> bool {
        match self {
            Inspected::Gone => true,
            Inspected::Stopped { .. } => !auto_remove,
            _ => false,
        }
    }

    /// The container id it reported, if any.
    pub fn id(&self) -> Option<&str> {
        match self {
            Inspected::Running { id } | Inspected::Stopped { id, .. } => id.as_deref(),
            _ => None,
        }
    }
}

/// The longest stderr excerpt an [`Inspected::Unknown`] keeps.
const REASON_BYTES: usize = 200;

/// Reads the result of [`inspect_args`]: its exit status (`None` when it
/// was ended by a signal), stdout and stderr.
pub fn read_inspect(status: Option<i32>, stdout: &[u8], stderr: &[u8]) -> Inspected {
    if status != Some(0) {
        let text = String::from_utf8_lossy(stderr);
        let lower = text.to_ascii_lowercase();
        if lower.contains("no such container") || lower.contains("no such object") {
            return Inspected::Gone;
        }
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        let reason = match status {
            Some(code) => format!("docker inspect exited with status {code}"),
            None => "docker inspect was killed by a signal".to_owned(),
        };
        return Inspected::Unknown(if first.is_empty() {
            reason
        } else {
            format!("{reason}: {}", clip(first.trim(), REASON_BYTES))
        });
    }
    let text = String::from_utf8_lossy(stdout);
    let unreadable = || Inspected::Unknown("docker inspect printed no container state".to_owned());
    let Ok(Value::Object(found)) = serde_json::from_str::<Value>(text.trim()) else {
        return unreadable();
    };
    let Some(Value::Object(state)) = found.get("State") else {
        return unreadable();
    };
    let id = found
        .get("Id")
        .and_then(Value::as_str)
        .filter(|id| valid_id(id))
        .map(str::to_owned);
    let flag = |key: &str| state.get(key).and_then(Value::as_bool).unwrap_or(false);
    let status = state.get("Status").and_then(Value::as_str).unwrap_or("");
    if flag("Running")
        || flag("Restarting")
        || matches!(status, "running" | "restarting" | "paused")
    {
        return Inspected::Running { id };
    }
    let code = match status {
        "exited" | "dead" => state
            .get("ExitCode")
            .and_then(Value::as_i64)
            .and_then(|c| i32::try_from(c).ok()),
        _ => None,
    };
    Inspected::Stopped { id, code }
}

/// A container id as the daemon reports it: 64 lower-case hex digits.
pub fn valid_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn clip(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
