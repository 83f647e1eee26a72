//! Launch files (`configs/launch/<id>.jsonc`, a session's
//! `config/launch.jsonc`): JSONC with `launcher`, `worker` (the launch
//! fields only), `env` and `endpoints`. Parsing validates with the hub
//! configuration's own rules against the built-in defaults
//! (`config::launch_profile`), so a launch file means the same whatever the
//! hub's startup file says, and [`LaunchDoc::apply`] turns it into the
//! settings one session's worker is started, signalled and addressed with.
//!
//! Pure: no disk, no clock.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::LibraryError;
use crate::config::{self, AdvertisedEndpoints, Config, ConfigError, Launcher};
use crate::supervisor::render::Endpoints;

/// The top-level keys a launch file may have.
const TOP_KEYS: [&str; 4] = ["launcher", "worker", "env", "endpoints"];

/// The `worker` keys a launch file may set; every other worker setting
/// belongs to the worker file.
pub const WORKER_KEYS: [&str; 7] = [
    "bin",
    "args",
    "threads",
    "connectHost",
    "stopTimeoutMs",
    "sigtermGraceMs",
    "sigkillGraceMs",
];

/// A valid launch file.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchDoc {
    /// `launcher`, with the defaults for what the file leaves out.
    pub launcher: Launcher,
    /// `worker.bin` as written (a relative path is taken from the session's
    /// `config/` directory at launch; a bare name is looked up in `PATH`).
    pub bin: PathBuf,
    pub args: Vec<String>,
    pub threads: u64,
    pub connect_host: String,
    pub stop_timeout_ms: u64,
    pub sigterm_grace_ms: u64,
    pub sigkill_grace_ms: u64,
    /// `env`: variables set over the hub's environment, in file order.
    pub env: Vec<(String, String)>,
    /// `endpoints`: advertised origins per channel (empty: the listener).
    pub endpoints: AdvertisedEndpoints,
}

/// Parses and validates a launch file's text.
pub fn parse(text: &str) -> Result<LaunchDoc, LibraryError> {
    let json = config::strip_jsonc(text).map_err(|err| syntax(&err))?;
    let value: Value = serde_json::from_str(&json).map_err(|err| {
        LibraryError::invalid(format!(
            "the launch file is not valid JSONC (line {}, column {}): check the syntax and \
             that braces balance",
            err.line(),
            err.column()
        ))
    })?;
    let Value::Object(doc) = value else {
        return Err(LibraryError::invalid("a launch file must be a JSON object"));
    };
    if let Some(key) = doc.keys().find(|k| !TOP_KEYS.contains(&k.as_str())) {
        return Err(LibraryError::invalid(format!(
            "unknown launch field {}",
            crate::wire::worker::display::quote(key)
        )));
    }
    let worker = match doc.get("worker") {
        None => Map::new(),
        Some(Value::Object(w)) => w.clone(),
        Some(_) => return Err(LibraryError::invalid("worker must be a mapping")),
    };
    if let Some(key) = worker.keys().find(|k| !WORKER_KEYS.contains(&k.as_str())) {
        return Err(LibraryError::invalid(format!(
            "unknown launch worker field {} (a launch file sets only {})",
            crate::wire::worker::display::quote(key),
            WORKER_KEYS.join(", ")
        )));
    }
    let launcher = match doc.get("launcher") {
        Some(Value::Object(l)) => l,
        _ => return Err(LibraryError::invalid("launcher is required (a mapping)")),
    };
    let kind = launcher.get("kind").and_then(Value::as_str);
    if !matches!(kind, Some("command" | "simplex-worker" | "built-in")) {
        return Err(LibraryError::invalid(
            "launcher.kind is required: \"command\", \"simplex-worker\" or \"built-in\"",
        ));
    }
    if kind == Some("simplex-worker")
        && worker
            .get("bin")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    {
        return Err(LibraryError::invalid(
            "worker.bin is required when launcher.kind is \"simplex-worker\"",
        ));
    }
    let env = environment(doc.get("env"))?;
    let endpoints = match doc.get("endpoints") {
        None => Map::new(),
        Some(Value::Object(e)) => {
            if let Some(key) = e
                .keys()
                .find(|k| !matches!(k.as_str(), "events" | "confirm" | "tools"))
            {
                return Err(LibraryError::invalid(format!(
                    "unknown endpoint {} (events, confirm or tools)",
                    crate::wire::worker::display::quote(key)
                )));
            }
            e.clone()
        }
        Some(_) => return Err(LibraryError::invalid("endpoints must be a mapping")),
    };
    let mut layer = Map::new();
    layer.insert("launcher".into(), Value::Object(launcher.clone()));
    layer.insert("worker".into(), Value::Object(worker));
    layer.insert("endpoints".into(), Value::Object(endpoints));
    let checked = config::launch_profile(&layer).map_err(|err| invalid_settings(&err))?;
    let w = checked.worker;
    Ok(LaunchDoc {
        launcher: checked.launcher,
        bin: w.bin,
        args: w.args,
        threads: w.threads,
        connect_host: w.connect_host,
        stop_timeout_ms: w.stop_timeout_ms,
        sigterm_grace_ms: w.sigterm_grace_ms,
        sigkill_grace_ms: w.sigkill_grace_ms,
        env,
        endpoints: checked.endpoints,
    })
}

/// `env`: a mapping of variable names to strings.
fn environment(value: Option<&Value>) -> Result<Vec<(String, String)>, LibraryError> {
    let map = match value {
        None => return Ok(Vec::new()),
        Some(Value::Object(map)) => map,
        Some(_) => return Err(LibraryError::invalid("env must map names to strings")),
    };
    map.iter()
        .map(|(name, value)| match value {
            _ if !config::is_env_name(name) => Err(LibraryError::invalid(format!(
                "env: {} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)",
                crate::wire::worker::display::quote(name)
            ))),
            Value::String(v) if !v.contains('\0') => Ok((name.clone(), v.clone())),
            _ => Err(LibraryError::invalid(format!(
                "env.{name} must be a string without NUL"
            ))),
        })
        .collect()
}

fn syntax(err: &ConfigError) -> LibraryError {
    match err {
        ConfigError::UnterminatedComment { line, column, .. } => LibraryError::invalid(format!(
            "the launch file is not valid JSONC: a /* comment opened at line {line}, column \
             {column} is never closed"
        )),
        _ => LibraryError::invalid("the launch file is not valid JSONC"),
    }
}

/// The configuration validator's verdict, without its key list prefix
/// duplicated: one message naming every broken rule.
fn invalid_settings(err: &ConfigError) -> LibraryError {
    let text = match err {
        ConfigError::Invalid { violations } => violations
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; "),
        other => other.to_string(),
    };
    LibraryError::invalid(format!("invalid launch settings: {text}"))
}

impl LaunchDoc {
    /// The hub configuration one session's worker runs with: `hub` with
    /// this file's launcher and worker launch fields, its endpoints where
    /// it names them and its connect host when it sets one. A relative
    /// `launcher.cwd` and a relative `worker.bin` with a `/` are taken from
    /// `config_dir`, the session's `config/` directory.
    pub fn apply(&self, hub: &Config, config_dir: &Path) -> Config {
        let mut out = hub.clone();
        out.launcher = self.launcher.clone();
        if !out.launcher.cwd.is_empty() && Path::new(&out.launcher.cwd).is_relative() {
            out.launcher.cwd = config_dir.join(&out.launcher.cwd).display().to_string();
        }
        out.worker.bin = if from_config_dir(&self.bin) {
            config_dir.join(&self.bin)
        } else {
            self.bin.clone()
        };
        out.worker.args = self.args.clone();
        out.worker.threads = self.threads;
        if !self.connect_host.is_empty() {
            out.worker.connect_host = self.connect_host.clone();
        }
        out.worker.stop_timeout_ms = self.stop_timeout_ms;
        out.worker.sigterm_grace_ms = self.sigterm_grace_ms;
        out.worker.sigkill_grace_ms = self.sigkill_grace_ms;
        for (theirs, ours) in [
            (&self.endpoints.events, &mut out.endpoints.events),
            (&self.endpoints.confirm, &mut out.endpoints.confirm),
            (&self.endpoints.tools, &mut out.endpoints.tools),
        ] {
            if !theirs.is_empty() {
                ours.clone_from(theirs);
            }
        }
        out
    }
}

/// Whether a `worker.bin` is taken from the session's `config/` directory:
/// relative, with a `/` (a bare name is looked up in `PATH`).
fn from_config_dir(bin: &Path) -> bool {
    bin.is_relative() && bin.components().count() > 1
}

/// A valid launch file's text for use from another session's `config/`
/// directory: the same settings, with a relative `launcher.cwd` and a
/// `worker.bin` taken from the directory made absolute against
/// `config_dir`, the one it was written for, so they mean what they meant
/// there. Compact JSON (a JSONC comment is not kept). A clean-forked child
/// launches from its parent's launch snapshot this way.
pub fn rebased(text: &str, config_dir: &Path) -> Result<String, LibraryError> {
    let doc = parse(text)?;
    let json = config::strip_jsonc(text).map_err(|err| syntax(&err))?;
    let mut value: Value = serde_json::from_str(&json)
        .map_err(|_| LibraryError::invalid("the launch file is not valid JSONC"))?;
    if !doc.launcher.cwd.is_empty() && Path::new(&doc.launcher.cwd).is_relative() {
        let cwd = config_dir.join(&doc.launcher.cwd).display().to_string();
        value["launcher"]["cwd"] = Value::from(cwd);
    }
    if from_config_dir(&doc.bin) {
        let bin = config_dir.join(&doc.bin).display().to_string();
        value["worker"]["bin"] = Value::from(bin);
    }
    Ok(value.to_string())
}

/// Placeholders the endpoint preview shows in place of a session's id and
/// token.
pub const PREVIEW_SESSION: &str = "SESSION_ID";
pub const PREVIEW_TOKEN: &str = "SESSION_TOKEN";

/// The endpoints as JSON (`{events, confirm, tools}`).
pub fn endpoints_json(endpoints: &Endpoints) -> Value {
    serde_json::json!({
        "events": endpoints.events,
        "confirm": endpoints.confirm,
        "tools": endpoints.tools,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LauncherKind;

    fn refused(text: &str) -> String {
        match parse(text) {
            Err(LibraryError::Invalid(m)) => m,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn the_templates_parse_to_their_values() {
        let local = parse(super::super::LOCAL_LAUNCH).unwrap();
        assert_eq!(local.launcher.kind, LauncherKind::Command);
        assert_eq!(local.launcher.command[..2], ["simplex", "run"]);
        assert_eq!(local.threads, 1);
        assert_eq!(
            (
                local.stop_timeout_ms,
                local.sigterm_grace_ms,
                local.sigkill_grace_ms
            ),
            (15000, 5000, 2000)
        );
        let docker = parse(super::super::DOCKER_LAUNCH).unwrap();
        assert_eq!(docker.connect_host, "host.docker.internal");
        assert_eq!(docker.launcher.command[0], "docker");
    }

    #[test]
    fn omitted_fields_take_the_built_in_defaults() {
        let doc = parse(r#"{"launcher": {"kind": "command", "command": ["w"]}}"#).unwrap();
        assert_eq!(doc.threads, 1);
        assert_eq!(doc.bin, PathBuf::from("simplex_worker"));
        assert!(doc.env.is_empty());
        assert_eq!(doc.endpoints.events, "");
    }

    #[test]
    fn refusals_name_the_field() {
        assert!(refused("{").contains("not valid JSONC"));
        assert!(refused("/* open").contains("never closed"));
        assert!(refused("[]").contains("JSON object"));
        assert!(
            refused(r#"{"launcher": {"kind": "command", "command": ["x"]}, "listen": {}}"#)
                .contains("\"listen\"")
        );
        assert!(refused(
            r#"{"launcher": {"kind": "command", "command": ["x"]}, "worker": {"maxExchanges": 3}}"#
        )
        .contains("maxExchanges"));
        assert!(refused(r#"{"worker": {}}"#).contains("launcher is required"));
        assert!(refused(r#"{"launcher": {}}"#).contains("launcher.kind"));
        assert!(refused(r#"{"launcher": {"kind": "shell"}}"#).contains("launcher.kind"));
        assert!(refused(r#"{"launcher": {"kind": "simplex-worker"}}"#).contains("worker.bin"));
        assert!(refused(r#"{"launcher": {"kind": "command"}}"#).contains("launcher.command"));
        assert!(
            refused(r#"{"launcher": {"kind": "command", "command": ["x"], "shell": true}}"#)
                .contains("launcher.shell")
        );
        assert!(
            refused(r#"{"launcher": {"kind": "command", "command": [1]}}"#)
                .contains("launcher.command")
        );
        assert!(refused(
            r#"{"launcher": {"kind": "command", "command": ["x"]}, "worker": {"threads": 0}}"#
        )
        .contains("worker.threads"));
        assert!(refused(r#"{"launcher": {"kind": "command", "command": ["x"]}, "worker": {"connectHost": "http://x"}}"#)
            .contains("worker.connectHost"));
        assert!(
            refused(r#"{"launcher": {"kind": "command", "command": ["x"]}, "env": {"A": 1}}"#)
                .contains("env.A")
        );
        assert!(refused(
            r#"{"launcher": {"kind": "command", "command": ["x"]}, "env": {"A=B": "1"}}"#
        )
        .contains("not an environment variable name"));
        assert!(
            refused(r#"{"launcher": {"kind": "command", "command": ["x"]}, "env": []}"#)
                .contains("env must")
        );
        assert!(refused(
            r#"{"launcher": {"kind": "command", "command": ["x"]}, "endpoints": {"web": "ws://x"}}"#
        )
        .contains("\"web\""));
        for bad in ["http://x", "ws://u:p@x", "ws://x/?q=1", "ws://x/#f"] {
            let text = format!(
                r#"{{"launcher": {{"kind": "command", "command": ["x"]}}, "endpoints": {{"events": "{bad}"}}}}"#
            );
            assert!(refused(&text).contains("endpoints.events"), "{bad}");
        }
        assert!(refused(
            r#"{"launcher": {"kind": "command", "command": ["x"], "pidFile": "rel.pid"}}"#
        )
        .contains("launcher.pidFile"));
    }

    #[test]
    fn apply_overrides_only_what_the_file_says() {
        let hub = crate::config::test_config(
            r#"{"worker": {"connectHost": "hub.lan", "stopTimeoutMs": 99}, "endpoints": {"tools": "wss://p/t"}}"#,
        );
        let doc = parse(
            r#"{"launcher": {"kind": "command", "command": ["w"], "cwd": "run"},
                "worker": {"bin": "bin/w", "threads": 3, "sigkillGraceMs": 7},
                "endpoints": {"events": "wss://proxy.example/worker"}}"#,
        )
        .unwrap();
        let out = doc.apply(&hub, Path::new("/d/sessions/s/config"));
        assert_eq!(out.launcher.cwd, "/d/sessions/s/config/run");
        assert_eq!(out.worker.bin, PathBuf::from("/d/sessions/s/config/bin/w"));
        assert_eq!(out.worker.threads, 3);
        assert_eq!(out.worker.sigkill_grace_ms, 7);
        // Launch-file defaults, not the hub's own values.
        assert_eq!(out.worker.stop_timeout_ms, 15000);
        // No connect host in the file: the hub's stays.
        assert_eq!(out.worker.connect_host, "hub.lan");
        assert_eq!(out.endpoints.events, "wss://proxy.example/worker");
        assert_eq!(out.endpoints.confirm, "");
        assert_eq!(out.endpoints.tools, "wss://p/t");
        let bare =
            parse(r#"{"launcher": {"kind": "simplex-worker"}, "worker": {"bin": "simplex"}}"#)
                .unwrap()
                .apply(&hub, Path::new("/c"));
        assert_eq!(bare.worker.bin, PathBuf::from("simplex"));
    }

    #[test]
    fn a_rebased_file_means_from_another_directory_what_it_meant_here() {
        let hub = crate::config::test_config("{}");
        let text = r#"{
            // a comment
            "launcher": {"kind": "command", "command": ["w"], "cwd": "run"},
            "worker": {"bin": "bin/w", "threads": 3},
            "env": {"MARK": "x"}}"#;
        let parent = Path::new("/d/sessions/p/config");
        let child = Path::new("/d/sessions/c/config");
        let moved = parse(&rebased(text, parent).unwrap()).unwrap();
        let before = parse(text).unwrap().apply(&hub, parent);
        let after = moved.apply(&hub, child);
        assert_eq!(after.launcher, before.launcher);
        assert_eq!(after.worker.bin, before.worker.bin);
        assert_eq!(after.worker.threads, 3);
        assert_eq!(moved.env, vec![("MARK".to_string(), "x".to_string())]);
        // Absolute and bare paths stay as written.
        let plain = r#"{"launcher": {"kind": "command", "command": ["w"], "cwd": "/srv"},
                        "worker": {"bin": "simplex"}}"#;
        let same = parse(&rebased(plain, parent).unwrap()).unwrap();
        assert_eq!(same, parse(plain).unwrap());
        assert!(matches!(
            rebased("{", parent),
            Err(LibraryError::Invalid(_))
        ));
    }
}
