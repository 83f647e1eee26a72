//! The worker configuration file the hub generates
//! (`sessions/<id>/config/config.yaml`: YAML, which the hub first writes as
//! JSON and an operator may rewrite as block YAML; read with the hub's YAML
//! reader, `wire::yaml_edit::read`). Only the keys the built-in worker uses
//! are read; unknown keys are ignored, as the real worker ignores keys it
//! does not own. Pure apart from [`load`], which reads the file.
//!
//! Defaults are the real worker's (protocol document, "Connections and
//! configuration"). Relative paths resolve against the configuration file's
//! directory.

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::error::MockError;
use super::transport::WsUrl;
use crate::wire::yaml_edit::read;

/// When the saved conversation is restored at startup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Restore {
    IfPresent,
    Never,
}

/// `persistence.*`.
#[derive(Debug, Clone)]
pub(crate) struct Persistence {
    pub enabled: bool,
    /// The session root (`persistence.directory`), absolute.
    pub directory: PathBuf,
    /// `<directory>/<persistence.state>`: holds `state.json`, `readable.md`.
    pub state_dir: PathBuf,
    /// `<directory>/<persistence.memory>`: compact archives.
    pub memory_dir: PathBuf,
    pub restore: Restore,
    /// Also write `readable.md` beside `state.json`.
    pub readable: bool,
    pub on_step_finished: bool,
    pub on_run_finished: bool,
    pub on_shutdown: bool,
    /// `memory_retention.max_archives`; 0 disables cleanup.
    pub max_archives: usize,
}

/// Everything the built-in worker reads from its configuration.
#[derive(Debug, Clone)]
pub(crate) struct WorkerConfig {
    /// `client.endpoint`: the hub's event route with the session token.
    pub endpoint: WsUrl,
    /// `client.payload_capacity`: queued runs beyond this are rejected.
    pub payload_capacity: usize,
    /// `client.transport.write_capacity`: event frames handed to the
    /// connection thread and not yet written.
    pub write_capacity: usize,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// `security.confirmation.endpoint`; without it `ask` denies.
    pub confirmation: Option<WsUrl>,
    pub confirmation_timeout: Duration,
    /// `hub_remote_call.endpoint`: the remote tools base URL; the worker
    /// appends `/<route>` to its path.
    pub tools: Option<WsUrl>,
    /// `hub_remote_call.timeout_ms`: the deadline of one tool exchange.
    pub tools_timeout: Duration,
    /// `worker.max_exchanges`: model responses allowed per run.
    pub max_exchanges: u64,
    /// `worker.event_capacity`: noncritical events the outbound queue
    /// holds (display previews, query replies, rejection notices).
    pub event_capacity: usize,
    /// Working directory of tool commands (`worker.environment.workspace`,
    /// else the session root).
    pub workspace: PathBuf,
    pub persistence: Persistence,
    /// `providers[driver_model].model`, e.g. `mock-flash`.
    pub model: String,
}

/// The model used when the configuration names none.
pub(crate) const DEFAULT_MODEL: &str = "mock-flash";

/// Reads and parses the configuration file at `path`.
pub(crate) fn load(path: &Path) -> Result<WorkerConfig, MockError> {
    let text = std::fs::read_to_string(path).map_err(|err| MockError::io(path, "read", err))?;
    let value: Value = read::read_json(&text).map_err(|source| MockError::Syntax {
        path: path.to_path_buf(),
        source,
    })?;
    let path = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|err| MockError::io(".", "find the current directory", err))?
            .join(path)
    };
    let base = path.parent().unwrap_or(Path::new("/"));
    from_value(&value, base)
}

/// Builds the configuration from a parsed document; `base` resolves
/// relative paths.
pub(crate) fn from_value(root: &Value, base: &Path) -> Result<WorkerConfig, MockError> {
    if !root.is_object() {
        return Err(MockError::config("(top level)", "must be an object"));
    }
    let endpoint = match string(root, "client.endpoint")? {
        Some(text) => url(&text, "client.endpoint")?,
        None => return Err(MockError::config("client.endpoint", "is required")),
    };
    let payload_capacity = positive(root, "client.payload_capacity", 256)? as usize;
    let write_capacity = positive(root, "client.transport.write_capacity", 256)? as usize;
    let initial_backoff = positive(root, "client.transport.initial_backoff_ms", 250)?;
    let max_backoff = positive(root, "client.transport.max_backoff_ms", 10_000)?;
    if max_backoff < initial_backoff {
        return Err(MockError::config(
            "client.transport.max_backoff_ms",
            format!("{max_backoff} is below initial_backoff_ms {initial_backoff}"),
        ));
    }
    let confirmation = match string(root, "security.confirmation.endpoint")? {
        Some(text) if !text.is_empty() => Some(url(&text, "security.confirmation.endpoint")?),
        _ => None,
    };
    let confirmation_timeout = positive(root, "security.confirmation.timeout_ms", 120_000)?;
    let tools = match string(root, "hub_remote_call.endpoint")? {
        Some(text) if !text.is_empty() => Some(url(&text, "hub_remote_call.endpoint")?),
        _ => None,
    };
    let tools_timeout = positive(root, "hub_remote_call.timeout_ms", 120_000)?;
    let max_exchanges = positive(root, "worker.max_exchanges", 512)?;
    let event_capacity = positive(root, "worker.event_capacity", 1024)? as usize;

    let directory = string(root, "persistence.directory")?
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| "data/session".to_string());
    let directory = base.join(directory);
    let state = relative(root, "persistence.state", "state")?;
    let memory = relative(root, "persistence.memory", "memory")?;
    let restore = match string(root, "persistence.restore")?.as_deref() {
        None | Some("if_present") => Restore::IfPresent,
        Some("never") => Restore::Never,
        Some(other) => {
            return Err(MockError::config(
                "persistence.restore",
                format!("{other:?} is not if_present or never"),
            ))
        }
    };
    let persistence = Persistence {
        enabled: boolean(root, "persistence.enabled", true)?,
        state_dir: directory.join(state),
        memory_dir: directory.join(memory),
        directory: directory.clone(),
        restore,
        readable: boolean(root, "persistence.readable", false)?,
        on_step_finished: boolean(root, "persistence.save.on_step_finished", true)?,
        on_run_finished: boolean(root, "persistence.save.on_run_finished", true)?,
        on_shutdown: boolean(root, "persistence.save.on_shutdown", true)?,
        max_archives: unsigned(root, "persistence.memory_retention.max_archives", 5)? as usize,
    };
    let workspace = match string(root, "worker.environment.workspace")? {
        Some(dir) if !dir.is_empty() => directory.join(dir),
        _ => directory,
    };
    Ok(WorkerConfig {
        endpoint,
        payload_capacity,
        write_capacity,
        initial_backoff: Duration::from_millis(initial_backoff),
        max_backoff: Duration::from_millis(max_backoff),
        confirmation,
        confirmation_timeout: Duration::from_millis(confirmation_timeout),
        tools,
        tools_timeout: Duration::from_millis(tools_timeout),
        max_exchanges,
        event_capacity,
        workspace,
        persistence,
        model: model_name(root)?,
    })
}

/// `providers[driver_model].model`, or [`DEFAULT_MODEL`] when the
/// configuration names no provider.
fn model_name(root: &Value) -> Result<String, MockError> {
    let Some(driver) = string(root, "driver_model")? else {
        return Ok(DEFAULT_MODEL.to_string());
    };
    let profile = root
        .get("providers")
        .and_then(|providers| providers.get(&driver))
        .ok_or_else(|| {
            MockError::config(
                "driver_model",
                format!("{driver:?} names no providers entry"),
            )
        })?;
    match profile.get("model") {
        Some(Value::String(model)) if !model.is_empty() => Ok(model.clone()),
        None | Some(Value::Null) => Ok(DEFAULT_MODEL.to_string()),
        Some(_) => Err(MockError::config(
            &format!("providers.{driver}.model"),
            "must be a nonempty string",
        )),
    }
}

/// Looks up a dotted key; `null` counts as absent.
fn lookup<'a>(root: &'a Value, key: &str) -> Option<&'a Value> {
    let mut value = root;
    for part in key.split('.') {
        value = value.get(part)?;
    }
    (!value.is_null()).then_some(value)
}

fn string(root: &Value, key: &str) -> Result<Option<String>, MockError> {
    match lookup(root, key) {
        None => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(MockError::config(key, "must be a string")),
    }
}

fn boolean(root: &Value, key: &str, default: bool) -> Result<bool, MockError> {
    match lookup(root, key) {
        None => Ok(default),
        Some(Value::Bool(value)) => Ok(*value),
        Some(_) => Err(MockError::config(key, "must be true or false")),
    }
}

fn unsigned(root: &Value, key: &str, default: u64) -> Result<u64, MockError> {
    match lookup(root, key) {
        None => Ok(default),
        Some(value) => value
            .as_u64()
            .ok_or_else(|| MockError::config(key, "must be a nonnegative integer")),
    }
}

fn positive(root: &Value, key: &str, default: u64) -> Result<u64, MockError> {
    match unsigned(root, key, default)? {
        0 => Err(MockError::config(key, "must be positive")),
        value => Ok(value),
    }
}

fn url(text: &str, key: &str) -> Result<WsUrl, MockError> {
    let url = WsUrl::parse(text).map_err(|reason| MockError::config(key, reason))?;
    if url.secure {
        return Err(MockError::config(
            key,
            "wss:// needs TLS, which the built-in worker lacks",
        ));
    }
    Ok(url)
}

/// A nonempty relative path without `..`, as `persistence.state` and
/// `persistence.memory` must be.
fn relative(root: &Value, key: &str, default: &str) -> Result<PathBuf, MockError> {
    let text = string(root, key)?.unwrap_or_else(|| default.to_string());
    let path = PathBuf::from(&text);
    let plain = path
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if text.is_empty() || !plain {
        return Err(MockError::config(
            key,
            format!("{text:?} must be a nonempty relative path without '..'"),
        ));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> &'static Path {
        Path::new("/data/sessions/demo/config")
    }

    #[test]
    fn minimal_configuration_takes_the_real_defaults() {
        let cfg = from_value(
            &json!({"client": {"endpoint": "ws://127.0.0.1:8800/agent/demo/events?token=t"},
                    "persistence": {"directory": "/data/sessions/demo"}}),
            base(),
        )
        .unwrap();
        assert_eq!(cfg.endpoint.path, "/agent/demo/events");
        assert_eq!(cfg.payload_capacity, 256);
        assert_eq!(cfg.write_capacity, 256);
        assert_eq!(cfg.initial_backoff, Duration::from_millis(250));
        assert_eq!(cfg.max_backoff, Duration::from_millis(10_000));
        assert!(cfg.confirmation.is_none());
        assert_eq!(cfg.confirmation_timeout, Duration::from_millis(120_000));
        assert_eq!(cfg.max_exchanges, 512);
        assert_eq!(cfg.event_capacity, 1024);
        let p = &cfg.persistence;
        assert!(p.enabled && !p.readable && p.on_run_finished);
        assert_eq!(p.restore, Restore::IfPresent);
        assert_eq!(p.state_dir, Path::new("/data/sessions/demo/state"));
        assert_eq!(p.memory_dir, Path::new("/data/sessions/demo/memory"));
        assert_eq!(p.max_archives, 5);
        assert_eq!(cfg.workspace, Path::new("/data/sessions/demo"));
        assert_eq!(cfg.model, DEFAULT_MODEL);
    }

    #[test]
    fn hub_generated_configuration() {
        let cfg = from_value(
            &json!({
                "plugins": {"providers": {"directories": []}},
                "providers": {"mock": {"model": "mock-slow", "endpoint": {"base_url": "http://x"}}},
                "driver_model": "mock",
                "client": {"endpoint": "ws://127.0.0.1:8800/agent/demo/events?token=t",
                           "payload_capacity": 2, "signal_capacity": 256,
                           "transport": {"write_capacity": 32, "initial_backoff_ms": 10,
                                         "max_backoff_ms": 40, "idle_timeout_seconds": 0}},
                "security": {"confirmation": {"endpoint": "ws://127.0.0.1:8800/agent/demo/confirm?token=t",
                                              "timeout_ms": 5000}},
                "hub_remote_call": {"endpoint": "ws://127.0.0.1:8801/agent/demo/tools?token=t",
                                    "timeout_ms": 7000},
                "worker": {"max_exchanges": 3, "event_capacity": 8,
                           "environment": {"workspace": "work", "platform": "linux"}},
                "persistence": {"enabled": true, "directory": "..", "format": "json",
                                "readable": true, "restore": "never", "state": "st",
                                "memory": "mem", "memory_retention": {"max_archives": 0},
                                "save": {"on_step_finished": false}}
            }),
            base(),
        )
        .unwrap();
        assert_eq!(cfg.model, "mock-slow");
        assert_eq!(cfg.payload_capacity, 2);
        assert_eq!(cfg.write_capacity, 32);
        assert_eq!(cfg.max_backoff, Duration::from_millis(40));
        assert_eq!(cfg.confirmation.unwrap().path, "/agent/demo/confirm");
        assert_eq!(cfg.confirmation_timeout, Duration::from_millis(5000));
        assert_eq!(cfg.tools.unwrap().path, "/agent/demo/tools");
        assert_eq!(cfg.tools_timeout, Duration::from_millis(7000));
        assert_eq!((cfg.max_exchanges, cfg.event_capacity), (3, 8));
        let p = &cfg.persistence;
        assert_eq!(p.directory, base().join(".."));
        assert_eq!(p.state_dir, base().join("../st"));
        assert_eq!(cfg.workspace, base().join("../work"));
        assert!(p.readable && !p.on_step_finished && p.on_shutdown);
        assert_eq!((p.restore, p.max_archives), (Restore::Never, 0));
    }

    #[test]
    fn bad_values_name_their_key() {
        let endpoint = json!("ws://h/x");
        let cases = [
            (json!({}), "client.endpoint"),
            (
                json!({"client": {"endpoint": "http://h/x"}}),
                "client.endpoint",
            ),
            (
                json!({"client": {"endpoint": "wss://h/x"}}),
                "client.endpoint",
            ),
            (
                json!({"client": {"endpoint": endpoint, "payload_capacity": 0}}),
                "client.payload_capacity",
            ),
            (
                json!({"client": {"endpoint": endpoint, "payload_capacity": "9"}}),
                "client.payload_capacity",
            ),
            (
                json!({"client": {"endpoint": endpoint, "transport": {"write_capacity": 0}}}),
                "client.transport.write_capacity",
            ),
            (
                json!({"client": {"endpoint": endpoint,
                                  "transport": {"initial_backoff_ms": 50, "max_backoff_ms": 10}}}),
                "client.transport.max_backoff_ms",
            ),
            (
                json!({"client": {"endpoint": endpoint}, "persistence": {"state": "../x"}}),
                "persistence.state",
            ),
            (
                json!({"client": {"endpoint": endpoint}, "persistence": {"memory": "/abs"}}),
                "persistence.memory",
            ),
            (
                json!({"client": {"endpoint": endpoint}, "persistence": {"restore": "always"}}),
                "persistence.restore",
            ),
            (
                json!({"client": {"endpoint": endpoint}, "driver_model": "nope", "providers": {}}),
                "driver_model",
            ),
            (
                json!({"client": {"endpoint": endpoint}, "persistence": {"enabled": "yes"}}),
                "persistence.enabled",
            ),
        ];
        for (doc, key) in cases {
            match from_value(&doc, base()) {
                Err(MockError::Config { key: found, .. }) => assert_eq!(found, key, "{doc}"),
                other => panic!("{doc}: expected a config error, got {other:?}"),
            }
        }
    }

    #[test]
    fn load_reads_block_yaml_and_json_and_reports_the_rest() {
        let dir = std::env::temp_dir().join(format!("mock-cfg-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(matches!(
            load(&dir.join("absent.yaml")),
            Err(MockError::Io { .. })
        ));
        let yaml = dir.join("config.yaml");
        std::fs::write(&yaml, "client:\n  endpoint: [ws://h/x\n").unwrap();
        assert!(matches!(load(&yaml), Err(MockError::Syntax { .. })));
        std::fs::write(
            &yaml,
            "# by hand\nclient:\n  endpoint: ws://h/x   # the hub's\npersistence: {directory: block}\n",
        )
        .unwrap();
        let cfg = load(&yaml).unwrap();
        assert_eq!(cfg.persistence.directory, dir.join("block"));
        assert_eq!(cfg.endpoint, url("ws://h/x", "client.endpoint").unwrap());
        std::fs::write(
            &yaml,
            r#"{"client": {"endpoint": "ws://h/x"}, "persistence": {"directory": "root"}}"#,
        )
        .unwrap();
        let cfg = load(&yaml).unwrap();
        assert_eq!(cfg.persistence.directory, dir.join("root"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
