//! Hub configuration: the JSONC file, command-line overrides, defaults,
//! validation and the typed [`Config`] the rest of the hub reads.
//!
//! The file is compatible with the Node hub's `hub.config.jsonc`: same keys,
//! same defaults, same rules, plus a few keys of this hub's own. Without any
//! file the hub runs the built-in worker (`launcher.kind = "built-in"`,
//! [`schema::fresh_start`]); a file means what it means to the Node hub. It
//! is read in two phases. First the raw layers (built-in defaults, the
//! file, the overrides) are parsed, checked for unknown keys, their paths
//! resolved, and merged into one JSON value. Then that value is validated
//! and turned into [`Config`] in one pass that collects every violation.
//!
//! Everything up to [`resolve`] is pure: no disk, no environment, no clock.
//! [`load`] and [`write_first_run`] are the only functions doing I/O.
//! The reference for operators is `docs/configuration.md`.

mod error;
mod paths;
mod schema;
mod validate;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::util::fsutil;
use crate::wire::jsonc;

pub use error::{ConfigError, UnknownKey, Violation};
pub use schema::{Feature, BUILT_FEATURES};
pub(crate) use validate::is_env_name;

/// File names looked up in the data directory when no `--config` is given,
/// in order. The first run writes the first one.
const FILE_NAMES: [&str; 2] = ["hub.config.jsonc", "hub.config.json"];

/// The validated configuration. Every field mirrors a JSON key (camelCase
/// there, snake_case here); `docs/configuration.md` has the defaults and
/// rules. Paths are absolute and normalized.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: Listen,
    pub data_dir: PathBuf,
    pub panel: Panel,
    pub mock: Mock,
    pub force_kill_process_group: bool,
    /// Provider profiles by name, passed through to generated worker
    /// configurations. Each is an object with a non-empty string `model`.
    pub provider_profiles: Map<String, Value>,
    pub launcher: Launcher,
    pub endpoints: AdvertisedEndpoints,
    pub worker: Worker,
    pub http: Http,
    pub limits: Limits,
    pub tool_requests: ToolRequests,
    pub subagents: Subagents,
    /// `shard.*`: who may reach the Shard endpoints (`wire::shard::access`).
    pub shard: crate::wire::shard::access::Settings,
    /// `shard.socket`, `shard.maxLineBytes`: the Shard unix socket.
    pub shard_socket: ShardSocket,
}

/// `listen.*`: the main listener (panel, API, worker event sockets).
#[derive(Debug, Clone)]
pub struct Listen {
    /// As written; `[::1]` keeps its brackets when it came from the file,
    /// while `--listen [::1]:8800` gives `::1`.
    pub host: String,
    /// 0 asks the OS for a free port.
    pub port: u16,
    /// Extra names accepted in the `Host` header besides the listener's own
    /// address and the loopback names, without port.
    pub allowed_hosts: Vec<String>,
}

/// `panel.*`.
#[derive(Debug, Clone)]
pub struct Panel {
    /// Empty means no token; only allowed on a loopback listener.
    pub token: String,
}

/// `mock.*`: the offline HTTP model provider of the Node hub (a fake
/// chat-completions endpoint that a real worker can use without a key;
/// `mock_provider`). Nothing here selects the built-in worker; that is
/// `launcher.kind`.
#[derive(Debug, Clone)]
pub struct Mock {
    /// Whether the hub serves the provider.
    pub enabled: bool,
    /// The provider profile whose `endpoint.base_url` points at it.
    pub profile: String,
    /// `host:port` (IPv6 in brackets), checked by `mock_provider::parse_listen`.
    pub listen: String,
    /// One of `mock_provider::Scenario`'s names.
    pub scenario: String,
    pub slow_ms: u64,
    /// Empty means the provider's default command.
    pub tool_command: String,
}

/// `launcher.kind`. Serializes to its JSON spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LauncherKind {
    /// Run `worker.bin` directly.
    SimplexWorker,
    /// Run `launcher.command` as an argv template.
    Command,
    /// Run this hub's own scripted worker (`simplex-hub mock-worker`) for
    /// every session. The zero-configuration default; unknown to the Node
    /// hub.
    BuiltIn,
}

impl LauncherKind {
    /// Every kind, in the order messages list them.
    pub const ALL: [LauncherKind; 3] = [
        LauncherKind::SimplexWorker,
        LauncherKind::Command,
        LauncherKind::BuiltIn,
    ];

    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            LauncherKind::SimplexWorker => "simplex-worker",
            LauncherKind::Command => "command",
            LauncherKind::BuiltIn => "built-in",
        }
    }
}

/// `launcher.*`: how a worker process is started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launcher {
    pub kind: LauncherKind,
    /// Argv template; non-empty when `kind` is `Command`.
    pub command: Vec<String>,
    pub args: Vec<String>,
    /// Working directory template; empty means the session directory. Not
    /// resolved here, since it may hold placeholders.
    pub cwd: String,
    /// Empty, or an absolute path template (placeholders as in `command`):
    /// the launcher daemonizes and writes the worker's pid there.
    pub pid_file: String,
    /// Extra environment variable names the management commands of a
    /// Docker launch keep (`supervisor::docker`), beyond the built-in
    /// allow-list.
    pub docker_management_env: Vec<String>,
}

/// `endpoints.*`: the origins (`ws://` or `wss://`, with an optional path
/// prefix, no trailing `/`) workers are told to dial, one per channel.
/// Empty means the hub's own listener (`worker.connectHost` or the bound
/// address). The hub appends `/agent/<id>/<route>?token=<token>`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdvertisedEndpoints {
    pub events: String,
    pub confirm: String,
    pub tools: String,
}

/// `worker.*`.
#[derive(Debug, Clone)]
pub struct Worker {
    /// Absolute when the configured value contains a `/`; otherwise a bare
    /// command name found through `PATH` at spawn time.
    pub bin: PathBuf,
    pub args: Vec<String>,
    pub threads: u64,
    /// Empty means derive it from the bound listener.
    pub connect_host: String,
    /// Relative to the worker's installation directory, never resolved here.
    pub system_prompt_file: String,
    pub max_exchanges: u64,
    /// Prompt plus generated tokens above which the worker compacts on its
    /// own; 0 disables automatic compaction.
    pub auto_compact_threshold: u64,
    /// Automatic compactions allowed per user request.
    pub max_auto_compactions: u64,
    pub event_capacity: u64,
    pub confirmation_timeout_ms: u64,
    pub hub_remote_call: bool,
    pub payload_capacity: u64,
    pub signal_capacity: u64,
    pub write_capacity: u64,
    pub initial_backoff_ms: u64,
    pub max_backoff_ms: u64,
    /// 0 disables the idle stop.
    pub idle_timeout_seconds: u64,
    pub stop_timeout_ms: u64,
    pub sigterm_grace_ms: u64,
    pub sigkill_grace_ms: u64,
    pub persistence: Persistence,
    pub memory_retention: MemoryRetention,
    pub environment: Environment,
}

/// `worker.persistence.*`.
#[derive(Debug, Clone)]
pub struct Persistence {
    pub enabled: bool,
    pub readable: bool,
}

/// `worker.memoryRetention.*`.
#[derive(Debug, Clone)]
pub struct MemoryRetention {
    pub max_archives: u64,
}

/// `worker.environment.*`: hints for the worker's prompt.
#[derive(Debug, Clone)]
pub struct Environment {
    /// Empty when unset; otherwise an absolute path.
    pub workspace: String,
    pub platform: String,
    pub software: Vec<String>,
}

/// `http.*`: bounds on the HTTP front door.
#[derive(Debug, Clone)]
pub struct Http {
    /// Connections open at once (the front door's; see `http::server_limits`
    /// for the descriptor-limit clamp).
    pub max_connections: usize,
    /// Handler threads at once.
    pub max_handler_threads: usize,
    /// From a request head's first byte to its end.
    pub head_timeout_ms: u64,
    /// Least average rate of a head, bytes per second (0: not judged).
    pub min_head_bytes_per_second: u32,
    pub idle_timeout_ms: u64,
    pub request_timeout_ms: u64,
    pub max_header_bytes: usize,
    pub max_headers: usize,
    pub max_body_bytes: usize,
}

/// `limits.*`.
#[derive(Debug, Clone)]
pub struct Limits {
    pub transcript_events: usize,
    pub transcript_bytes: usize,
    pub log_lines: usize,
    pub log_ring_bytes: usize,
    pub log_bytes: u64,
    pub log_files: usize,
    pub max_message_bytes: usize,
    /// 0 disables pings.
    pub ping_interval_ms: u64,
    /// Always less than `worker.confirmation_timeout_ms`.
    pub confirm_identity_hold_ms: u64,
}

/// `toolRequests.*`: the second listener, for remote-tool sockets.
#[derive(Debug, Clone)]
pub struct ToolRequests {
    /// Empty means the same host as `listen.host`.
    pub host: String,
    pub port: u16,
    pub timeout_ms: u64,
    pub max_connections: usize,
}

/// `subagents.*`.
#[derive(Debug, Clone)]
pub struct Subagents {
    pub max_live: usize,
    pub max_children: usize,
    pub max_depth: usize,
    pub startup_timeout_ms: u64,
    pub max_receipts: usize,
    pub receipt_ttl_ms: u64,
    pub conversation_bytes: usize,
}

/// `shard.socket` and `shard.maxLineBytes`: the Shard protocol's unix
/// socket (JSONL, no token: its file permissions are the access control).
#[derive(Debug, Clone)]
pub struct ShardSocket {
    /// As written: empty turns the socket off; a relative path is taken
    /// from the data directory.
    pub path: String,
    /// The longest line a client may send, in bytes.
    pub max_line_bytes: usize,
}

impl Config {
    /// The Shard unix socket's path (`None`: `shard.socket` is empty).
    pub fn shard_socket_path(&self) -> Option<PathBuf> {
        let path = self.shard_socket.path.as_str();
        (!path.is_empty()).then(|| self.data_dir.join(path))
    }

    /// True when `listen.host` is `127.0.0.1`, `::1`, `[::1]` or
    /// `localhost`: the only hosts allowed without a panel token.
    pub fn is_loopback(&self) -> bool {
        is_loopback_host(&self.listen.host)
    }

    /// The host the tools listener binds: `toolRequests.host`, or
    /// `listen.host` when that is empty.
    pub fn tools_host(&self) -> &str {
        if self.tool_requests.host.is_empty() {
            &self.listen.host
        } else {
            &self.tool_requests.host
        }
    }

    /// Like [`Config::is_loopback`], for the tools listener's host.
    pub fn tools_is_loopback(&self) -> bool {
        is_loopback_host(self.tools_host())
    }

    /// The provider profile of a session spec that names none: the mock
    /// profile under the built-in launcher (when it exists), else the first
    /// profile, as in the Node hub.
    pub fn default_provider(&self) -> String {
        let profiles = &self.provider_profiles;
        if self.launcher.kind == LauncherKind::BuiltIn && profiles.contains_key(&self.mock.profile)
        {
            return self.mock.profile.clone();
        }
        profiles.keys().next().cloned().unwrap_or_default()
    }
}

/// The loopback spellings the token rule accepts.
fn is_loopback_host(host: &str) -> bool {
    matches!(host, "127.0.0.1" | "::1" | "[::1]" | "localhost")
}

/// Values from the command line. They win over the file; relative paths
/// among them resolve against the current directory.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `-l/--listen host:port`, already parsed by [`parse_listen`].
    pub listen: Option<(String, u16)>,
    /// `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// `--worker-bin`.
    pub worker_bin: Option<PathBuf>,
    /// `--panel-token`.
    pub panel_token: Option<String>,
    /// `--mock` (`Some(true)`) or `--no-mock` (`Some(false)`):
    /// `mock.enabled`, the offline model provider.
    pub mock: Option<bool>,
    /// `--force-kill-process-group`; `false` leaves the file's value.
    pub force_kill_process_group: bool,
    /// `--tools-port PORT`: `toolRequests.port` (0 lets the system pick).
    pub tools_port: Option<u16>,
    /// `--public-host HOST:PORT`: `shard.publicHost`.
    pub public_host: Option<String>,
    /// Every `--allowed-origin ORIGIN`, in order: `shard.allowedOrigins`
    /// (replacing the file's list when any is given).
    pub allowed_origins: Vec<String>,
    /// `--trust-proxy loopback|IP`: `shard.trustProxy`.
    pub trust_proxy: Option<String>,
    /// `--allow-insecure-remote`; `false` leaves the file's value.
    pub allow_insecure_remote: bool,
}

impl Overrides {
    /// The overrides as a configuration layer, shaped like the file.
    fn to_layer(&self) -> Result<Value, ConfigError> {
        let mut layer = Map::new();
        if let Some((host, port)) = &self.listen {
            layer.insert(
                "listen".into(),
                serde_json::json!({ "host": host, "port": port }),
            );
        }
        if let Some(dir) = &self.data_dir {
            let dir = paths::to_string("dataDir", dir.clone())?;
            layer.insert("dataDir".into(), Value::String(dir));
        }
        if let Some(bin) = &self.worker_bin {
            let bin = paths::to_string("worker.bin", bin.clone())?;
            layer.insert("worker".into(), serde_json::json!({ "bin": bin }));
        }
        if let Some(token) = &self.panel_token {
            layer.insert("panel".into(), serde_json::json!({ "token": token }));
        }
        if let Some(enabled) = self.mock {
            layer.insert("mock".into(), serde_json::json!({ "enabled": enabled }));
        }
        if self.force_kill_process_group {
            layer.insert("forceKillProcessGroup".into(), Value::Bool(true));
        }
        if let Some(port) = self.tools_port {
            layer.insert("toolRequests".into(), serde_json::json!({ "port": port }));
        }
        let mut shard = Map::new();
        if let Some(host) = &self.public_host {
            shard.insert("publicHost".into(), Value::from(host.as_str()));
        }
        if !self.allowed_origins.is_empty() {
            shard.insert(
                "allowedOrigins".into(),
                Value::from(self.allowed_origins.clone()),
            );
        }
        if let Some(upstream) = &self.trust_proxy {
            shard.insert("trustProxy".into(), Value::from(upstream.as_str()));
        }
        if self.allow_insecure_remote {
            shard.insert("allowInsecureRemote".into(), Value::Bool(true));
        }
        if !shard.is_empty() {
            layer.insert("shard".into(), Value::Object(shard));
        }
        Ok(Value::Object(layer))
    }
}

/// Where the configuration came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// This file (absolute, normalized).
    File(PathBuf),
    /// No file: built-in defaults plus overrides.
    Defaults,
}

/// A loaded configuration.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    pub source: ConfigSource,
    /// The merged configuration with paths resolved, in schema key order,
    /// holding only keys of the features validation ran with, so it is
    /// itself a valid file for this build. Contains secrets; see
    /// [`redacted`].
    pub resolved: Value,
}

/// Parses a `--listen` value: `host:port` or `[v6]:port`. The host must be
/// non-empty (brackets are removed from an IPv6 host) and the port a
/// number from 0 to 65535.
pub fn parse_listen(s: &str) -> Result<(String, u16), ConfigError> {
    let fail = |reason| ConfigError::Listen {
        input: s.to_owned(),
        reason,
    };
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| fail("missing ']' after the IPv6 address"))?;
        let port = after
            .strip_prefix(':')
            .ok_or_else(|| fail("expected ':' and a port after ']'"))?;
        (host, port)
    } else {
        let (host, port) = s
            .rsplit_once(':')
            .ok_or_else(|| fail("expected host:port"))?;
        if host.contains(':') {
            return Err(fail("an IPv6 host must be in brackets, as in [::1]:8800"));
        }
        (host, port)
    };
    if host.is_empty() {
        return Err(fail("the host is empty"));
    }
    if host.chars().any(char::is_whitespace) {
        return Err(fail("the host contains whitespace"));
    }
    let port = Some(port)
        .filter(|port| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|port| port.parse::<u16>().ok())
        .ok_or_else(|| fail("the port must be a number from 0 to 65535"))?;
    Ok((host.to_owned(), port))
}

/// Validates and resolves a configuration: built-in defaults, then the
/// file (`file` is its path and text), then `overrides`. Relative paths in
/// the file resolve against the file's directory, those in `overrides`
/// against `cwd`; a leading `~` in `dataDir` expands to `home`. Keys of
/// features not in `features` are refused in the file.
pub fn resolve(
    file: Option<(&Path, &str)>,
    overrides: &Overrides,
    cwd: &Path,
    home: &Path,
    features: &[Feature],
) -> Result<Loaded, ConfigError> {
    let mut merged = schema::defaults();
    paths::resolve_layer(&mut merged, cwd, home)?;

    let source = match file {
        Some((path, text)) => {
            let path = paths::absolute(cwd, path);
            let mut layer = parse_file(&path, text)?;
            if let Value::Object(map) = &layer {
                schema::check_keys(map, features)?;
            }
            let dir = path.parent().unwrap_or_else(|| Path::new("/"));
            paths::resolve_layer(&mut layer, dir, home)?;
            schema::merge(&mut merged, &layer);
            ConfigSource::File(path)
        }
        None => {
            schema::merge(&mut merged, &schema::fresh_start());
            ConfigSource::Defaults
        }
    };

    let mut layer = overrides.to_layer()?;
    paths::resolve_layer(&mut layer, cwd, home)?;
    schema::merge(&mut merged, &layer);
    paths::check_home(&merged)?;

    let config = validate::build(&merged, features)?;
    if let Value::Object(map) = &mut merged {
        schema::prune(map, "", features);
    }
    Ok(Loaded {
        config,
        source,
        resolved: merged,
    })
}

/// Validates the launch settings of a configuration-library launch file
/// (`layer`: an object with any of `launcher`, `worker` and `endpoints`,
/// already limited by the caller to the keys a launch file may hold) with
/// the same rules as the hub configuration, against the built-in defaults
/// rather than this hub's settings: an omitted key means the same whatever
/// configuration the hub runs with. Paths are not resolved (`worker.bin`
/// stays as written). The caller reads `launcher`, `endpoints` and the
/// launch fields of `worker` from the result.
pub fn launch_profile(layer: &Map<String, Value>) -> Result<Config, ConfigError> {
    schema::check_keys(layer, BUILT_FEATURES)?;
    let mut merged = schema::defaults();
    schema::merge(&mut merged, &Value::Object(layer.clone()));
    validate::build(&merged, BUILT_FEATURES)
}

/// Test helper: `text` resolved as the file `/etc/simplex/hub.jsonc` with no
/// overrides, cwd `/work/cwd`, home `/home/op` and every feature; panics if
/// it does not resolve.
#[cfg(test)]
pub fn test_config(text: &str) -> Config {
    resolve(
        Some((Path::new("/etc/simplex/hub.jsonc"), text)),
        &Overrides::default(),
        Path::new("/work/cwd"),
        Path::new("/home/op"),
        Feature::ALL,
    )
    .unwrap()
    .config
}

/// `text` with its comments blanked out (`wire::jsonc`); an unterminated
/// block comment is a [`ConfigError::UnterminatedComment`] with no path.
pub fn strip_jsonc(text: &str) -> Result<String, ConfigError> {
    jsonc::strip_jsonc(text).map_err(|at| ConfigError::UnterminatedComment {
        path: None,
        line: at.line,
        column: at.column,
    })
}

/// Strips comments, parses, and insists on a top-level object.
fn parse_file(path: &Path, text: &str) -> Result<Value, ConfigError> {
    let json = strip_jsonc(text).map_err(|err| match err {
        ConfigError::UnterminatedComment { line, column, .. } => ConfigError::UnterminatedComment {
            path: Some(path.to_owned()),
            line,
            column,
        },
        other => other,
    })?;
    let value: Value = serde_json::from_str(&json).map_err(|source| ConfigError::Syntax {
        path: path.to_owned(),
        line: source.line(),
        column: source.column(),
        source,
    })?;
    let found = match &value {
        Value::Object(_) => return Ok(value),
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
    };
    Err(ConfigError::NotAnObject {
        path: path.to_owned(),
        found,
    })
}

/// Loads the configuration for this process: the `explicit` file (which
/// must exist), else `<dataDir>/hub.config.jsonc`, else
/// `<dataDir>/hub.config.json`, else defaults alone. `dataDir` for the
/// lookup is the override or the default. Reads `HOME` and the current
/// directory, and validates with [`BUILT_FEATURES`].
pub fn load(explicit: Option<&Path>, overrides: &Overrides) -> Result<Loaded, ConfigError> {
    let cwd = std::env::current_dir().map_err(|source| ConfigError::Io {
        path: PathBuf::from("."),
        op: "resolve the current directory",
        source,
    })?;
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    load_in(explicit, overrides, &cwd, &home, BUILT_FEATURES)
}

/// [`load`] with the current directory, home and features given.
fn load_in(
    explicit: Option<&Path>,
    overrides: &Overrides,
    cwd: &Path,
    home: &Path,
    features: &[Feature],
) -> Result<Loaded, ConfigError> {
    if let Some(path) = explicit {
        let path = paths::absolute(cwd, path);
        let text = read(&path)?;
        return resolve(Some((&path, &text)), overrides, cwd, home, features);
    }

    // The lookup directory is what dataDir would be without a file.
    let mut lookup = schema::defaults();
    paths::resolve_layer(&mut lookup, cwd, home)?;
    let mut layer = overrides.to_layer()?;
    paths::resolve_layer(&mut layer, cwd, home)?;
    schema::merge(&mut lookup, &layer);
    paths::check_home(&lookup)?;
    let dir = PathBuf::from(lookup["dataDir"].as_str().unwrap_or_default());

    for name in FILE_NAMES {
        let path = dir.join(name);
        match fs::read_to_string(&path) {
            Ok(text) => return resolve(Some((&path, &text)), overrides, cwd, home, features),
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(ConfigError::Io {
                    path,
                    op: "read",
                    source,
                })
            }
        }
    }
    resolve(None, overrides, cwd, home, features)
}

fn read(path: &Path) -> Result<String, ConfigError> {
    fs::read_to_string(path).map_err(|source| ConfigError::Io {
        path: path.to_owned(),
        op: "read",
        source,
    })
}

/// The comment written at the top of a first-run configuration file.
const FIRST_RUN_HEADER: &str = "\
// simplex-hub configuration, written on first start with every key at the
// value it had then. JSONC: // and /* */ comments are allowed. The hub never
// rewrites this file; edit it and restart. Reference: docs/configuration.md
";

/// First run: when the configuration came from defaults, creates the data
/// directory (0700, with parents) and writes the resolved configuration to
/// `<dataDir>/hub.config.jsonc` (0600, create-exclusive). An existing file
/// is never touched. Returns the path written, or `None` when nothing was.
pub fn write_first_run(loaded: &Loaded) -> Result<Option<PathBuf>, ConfigError> {
    if loaded.source != ConfigSource::Defaults {
        return Ok(None);
    }
    let dir = &loaded.config.data_dir;
    fsutil::create_private_dir(dir).map_err(|source| ConfigError::Io {
        path: dir.clone(),
        op: "create directory",
        source,
    })?;
    let path = dir.join(FILE_NAMES[0]);
    let mut text = String::from(FIRST_RUN_HEADER);
    // Serializing a `Value` cannot fail.
    text.push_str(&serde_json::to_string_pretty(&loaded.resolved).unwrap_or_default());
    text.push('\n');
    match fsutil::write_private_new(&path, text.as_bytes()) {
        Ok(true) => Ok(Some(path)),
        Ok(false) => Ok(None),
        Err(source) => Err(ConfigError::Io {
            path,
            op: "write",
            source,
        }),
    }
}

/// Placeholder for a redacted secret.
const REDACTED: &str = "<redacted>";

/// Key names inside provider profiles that hold secrets (compared without
/// regard to ASCII case).
const SECRET_KEYS: [&str; 5] = ["api_key", "apiKey", "token", "secret", "password"];

/// The resolved configuration with secrets replaced by `"<redacted>"`:
/// a non-empty `panel.token`, and any secret-named key inside a provider
/// profile unless its value is an environment reference like
/// `"${DEEPSEEK_API_KEY}"` (or empty or null, which hide nothing).
pub fn redacted(loaded: &Loaded) -> Value {
    let mut value = loaded.resolved.clone();
    if let Some(Value::String(token)) = value.pointer_mut("/panel/token") {
        if !token.is_empty() {
            *token = REDACTED.to_owned();
        }
    }
    if let Some(Value::Object(profiles)) = value.get_mut("providerProfiles") {
        for profile in profiles.values_mut() {
            redact_secrets(profile);
        }
    }
    value
}

fn redact_secrets(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                let secret = SECRET_KEYS
                    .iter()
                    .any(|name| key.eq_ignore_ascii_case(name));
                let harmless = match value {
                    Value::Null => true,
                    Value::String(s) => s.is_empty() || is_env_reference(s),
                    _ => false,
                };
                if secret && !harmless {
                    *value = Value::String(REDACTED.to_owned());
                } else {
                    redact_secrets(value);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_secrets),
        _ => {}
    }
}

/// `${NAME}` with NAME matching `[A-Za-z_][A-Za-z0-9_]*`: a value the
/// worker takes from its environment, not a secret itself.
fn is_env_reference(s: &str) -> bool {
    let Some(name) = s.strip_prefix("${").and_then(|rest| rest.strip_suffix('}')) else {
        return false;
    };
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testkit::TempDir;
    use serde_json::json;
    use std::os::unix::fs::PermissionsExt;

    const CWD: &str = "/work/cwd";
    const HOME: &str = "/home/op";

    fn resolve_text(path: &str, text: &str, overrides: &Overrides) -> Result<Loaded, ConfigError> {
        resolve(
            Some((Path::new(path), text)),
            overrides,
            Path::new(CWD),
            Path::new(HOME),
            Feature::ALL,
        )
    }

    #[test]
    fn defaults_resolve_with_every_feature_and_with_the_built_set() {
        for features in [Feature::ALL, BUILT_FEATURES] {
            let loaded = resolve(
                None,
                &Overrides::default(),
                Path::new(CWD),
                Path::new(HOME),
                features,
            )
            .unwrap();
            assert_eq!(loaded.source, ConfigSource::Defaults);
            assert_eq!(loaded.config.data_dir, Path::new("/home/op/.simplex/hub"));
            assert_eq!(loaded.config.worker.bin, Path::new("simplex_worker"));
            // No file: the built-in worker, and the mock profile by default.
            assert_eq!(loaded.config.launcher.kind, LauncherKind::BuiltIn);
            assert_eq!(loaded.resolved["launcher"]["kind"], "built-in");
            assert_eq!(loaded.config.default_provider(), "mock");
            assert!(loaded.config.is_loopback());
            assert!(!loaded.config.mock.enabled);
            // Keys of unbuilt features still get their defaults.
            assert_eq!(loaded.config.tool_requests.port, 8801);
            assert_eq!(loaded.config.limits.confirm_identity_hold_ms, 15_000);
            assert_eq!(loaded.config.subagents.max_live, 16);
        }
    }

    #[test]
    fn resolved_json_is_in_schema_order_and_holds_only_built_keys() {
        let all = resolve(
            None,
            &Overrides::default(),
            Path::new(CWD),
            Path::new(HOME),
            Feature::ALL,
        )
        .unwrap();
        let keys: Vec<&String> = all.resolved.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "listen",
                "dataDir",
                "panel",
                "mock",
                "forceKillProcessGroup",
                "providerProfiles",
                "launcher",
                "endpoints",
                "worker",
                "http",
                "limits",
                "toolRequests",
                "subagents",
                "shard"
            ]
        );
        let core = resolve(
            None,
            &Overrides::default(),
            Path::new(CWD),
            Path::new(HOME),
            &[Feature::Core],
        )
        .unwrap();
        assert!(core.resolved.get("toolRequests").is_none());
        assert!(core.resolved.get("limits").is_none());
        assert_eq!(
            core.resolved["worker"],
            json!({"bin": "simplex_worker", "args": [], "threads": 1})
        );
        assert_eq!(core.resolved["dataDir"], "/home/op/.simplex/hub");
    }

    #[test]
    fn file_then_overrides_win_and_arrays_replace() {
        let text = r#"{
            // the operator's choices
            "listen": { "port": 9000, "allowedHosts": ["a.example", "b.example"] },
            "worker": { "args": ["--x"] },
            "providerProfiles": { "extra": { "model": "m", "endpoint": {"base_url": "http://x"} } },
            "mock": { "enabled": false }
        }"#;
        let overrides = Overrides {
            listen: Some(("localhost".into(), 9100)),
            mock: Some(true),
            panel_token: Some("t".into()),
            force_kill_process_group: true,
            ..Overrides::default()
        };
        let loaded = resolve_text("/etc/simplex/hub.config.jsonc", text, &overrides).unwrap();
        let c = &loaded.config;
        assert_eq!((c.listen.host.as_str(), c.listen.port), ("localhost", 9100));
        assert_eq!(c.listen.allowed_hosts, ["a.example", "b.example"]);
        assert_eq!(c.worker.args, ["--x"]);
        assert!(c.mock.enabled);
        assert_eq!(c.panel.token, "t");
        assert!(c.force_kill_process_group);
        let names: Vec<&String> = c.provider_profiles.keys().collect();
        assert_eq!(names, ["deepseek", "mock", "extra"]);
        assert_eq!(
            loaded.source,
            ConfigSource::File(PathBuf::from("/etc/simplex/hub.config.jsonc"))
        );

        // An array in the file replaces the default array outright.
        let loaded = resolve_text(
            "/x/c.jsonc",
            r#"{"launcher": {"kind": "command", "command": ["a", "b"]}}"#,
            &Overrides::default(),
        )
        .unwrap();
        let text = r#"{"launcher": {"kind": "command", "command": ["only"]}}"#;
        let replaced = resolve_text("/x/c.jsonc", text, &Overrides::default()).unwrap();
        assert_eq!(loaded.config.launcher.command, ["a", "b"]);
        assert_eq!(replaced.config.launcher.command, ["only"]);
    }

    #[test]
    fn file_paths_resolve_against_the_file_and_override_paths_against_cwd() {
        let text = r#"{"dataDir": "../data", "worker": {"bin": "bin/w", "environment": {"workspace": "ws"}}}"#;
        let loaded = resolve_text("/etc/simplex/hub.jsonc", text, &Overrides::default()).unwrap();
        assert_eq!(loaded.config.data_dir, Path::new("/etc/data"));
        assert_eq!(loaded.config.worker.bin, Path::new("/etc/simplex/bin/w"));
        assert_eq!(
            loaded.config.worker.environment.workspace,
            "/etc/simplex/ws"
        );
        assert_eq!(loaded.resolved["dataDir"], "/etc/data");

        let overrides = Overrides {
            data_dir: Some("state".into()),
            worker_bin: Some("./tools/w".into()),
            ..Overrides::default()
        };
        let loaded = resolve_text("/etc/simplex/hub.jsonc", text, &overrides).unwrap();
        assert_eq!(loaded.config.data_dir, Path::new("/work/cwd/state"));
        assert_eq!(loaded.config.worker.bin, Path::new("/work/cwd/tools/w"));

        // A bare name stays a command name from either source.
        let overrides = Overrides {
            worker_bin: Some("simplex".into()),
            ..Overrides::default()
        };
        let loaded = resolve_text("/etc/simplex/hub.jsonc", "{}", &overrides).unwrap();
        assert_eq!(loaded.config.worker.bin, Path::new("simplex"));

        // A relative config path is first made absolute against cwd.
        let loaded = resolve_text(
            "conf/hub.jsonc",
            r#"{"dataDir": "d"}"#,
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(loaded.config.data_dir, Path::new("/work/cwd/conf/d"));
        assert_eq!(
            loaded.source,
            ConfigSource::File(PathBuf::from("/work/cwd/conf/hub.jsonc"))
        );
    }

    #[test]
    fn tilde_in_data_dir_expands_with_home() {
        let loaded = resolve_text(
            "/etc/h.jsonc",
            r#"{"dataDir": "~/hub-data"}"#,
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(loaded.config.data_dir, Path::new("/home/op/hub-data"));
        let overrides = Overrides {
            data_dir: Some("~".into()),
            ..Overrides::default()
        };
        let loaded = resolve_text("/etc/h.jsonc", "{}", &overrides).unwrap();
        assert_eq!(loaded.config.data_dir, Path::new("/home/op"));

        // No home: fine unless a `~` survives the merge.
        let no_home = |overrides: &Overrides| {
            resolve(None, overrides, Path::new(CWD), Path::new(""), Feature::ALL)
        };
        assert!(matches!(
            no_home(&Overrides::default()),
            Err(ConfigError::NoHome { .. })
        ));
        let overrides = Overrides {
            data_dir: Some("/srv/hub".into()),
            ..Overrides::default()
        };
        assert_eq!(
            no_home(&overrides).unwrap().config.data_dir,
            Path::new("/srv/hub")
        );
    }

    #[test]
    fn syntax_errors_name_the_file_and_the_original_position() {
        let text = "{\n  /* comment\n     spanning */\n  \"listen\": { \"port\": 1 }\n  \"dataDir\": \"x\"\n}";
        let err = resolve_text("/etc/h.jsonc", text, &Overrides::default()).unwrap_err();
        let ConfigError::Syntax { line, .. } = &err else {
            panic!("unexpected error {err:?}");
        };
        assert_eq!(*line, 5);
        assert_eq!(
            err.to_string(),
            "/etc/h.jsonc:5:3: invalid JSON: expected `,` or `}`"
        );
        assert!(std::error::Error::source(&err).is_some());

        let err = resolve_text("/etc/h.jsonc", "{ /* open", &Overrides::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "/etc/h.jsonc:1:3: unterminated block comment"
        );

        let err = resolve_text("/etc/h.jsonc", "[1]", &Overrides::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "/etc/h.jsonc: the top level must be a JSON object, found an array"
        );
    }

    #[test]
    fn unknown_keys_are_all_named_in_one_error() {
        let text = r#"{"listen": {"bogus": 1}, "nope": true, "mock": {"speed": "auto"}}"#;
        let err = resolve_text("/etc/h.jsonc", text, &Overrides::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown configuration key(s): listen.bogus, nope, mock.speed"
        );
    }

    #[test]
    fn unbuilt_feature_keys_are_refused_by_the_built_set_only() {
        let text = r#"{"toolRequests": {"port": 9001}, "limits": {"pingIntervalMs": 0}}"#;
        let built = resolve(
            Some((Path::new("/etc/h.jsonc"), text)),
            &Overrides::default(),
            Path::new(CWD),
            Path::new(HOME),
            &[Feature::Core],
        )
        .unwrap_err();
        assert_eq!(
            built.to_string(),
            "unknown configuration key(s): toolRequests.port (not supported by this build yet), \
             limits.pingIntervalMs (not supported by this build yet)"
        );
        let all = resolve_text("/etc/h.jsonc", text, &Overrides::default()).unwrap();
        assert_eq!(all.config.tool_requests.port, 9001);
        assert_eq!(all.config.limits.ping_interval_ms, 0);
    }

    #[test]
    fn overrides_are_validated_too() {
        let overrides = Overrides {
            listen: Some(("0.0.0.0".into(), 8800)),
            ..Overrides::default()
        };
        let err = resolve(
            None,
            &overrides,
            Path::new(CWD),
            Path::new(HOME),
            Feature::ALL,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("listen.host = \"0.0.0.0\""),
            "{err}"
        );
        let overrides = Overrides {
            listen: Some(("0.0.0.0".into(), 8800)),
            panel_token: Some("secret".into()),
            ..Overrides::default()
        };
        let loaded = resolve(
            None,
            &overrides,
            Path::new(CWD),
            Path::new(HOME),
            Feature::ALL,
        )
        .unwrap();
        assert!(!loaded.config.is_loopback());
    }

    #[test]
    fn parse_listen_accepts_host_port_and_bracketed_ipv6() {
        assert_eq!(
            parse_listen("127.0.0.1:8800").unwrap(),
            ("127.0.0.1".into(), 8800)
        );
        assert_eq!(parse_listen("[::1]:8800").unwrap(), ("::1".into(), 8800));
        assert_eq!(
            parse_listen("localhost:0").unwrap(),
            ("localhost".into(), 0)
        );
        assert_eq!(parse_listen("h:65535").unwrap(), ("h".into(), 65535));
        for bad in [
            ":8800",
            "[]:8800",
            "h:65536",
            "h:",
            "h:-1",
            "h:+80",
            "h: 80",
            "h",
            "::1:8800",
            "[::1]",
            "[::1]8800",
            "[::1:80",
            "a b:80",
        ] {
            let err = parse_listen(bad).unwrap_err();
            assert!(matches!(err, ConfigError::Listen { .. }), "{bad}: {err}");
        }
        assert_eq!(
            parse_listen(":8800").unwrap_err().to_string(),
            "invalid listen address \":8800\": the host is empty"
        );
        assert_eq!(
            parse_listen("h:70000").unwrap_err().to_string(),
            "invalid listen address \"h:70000\": the port must be a number from 0 to 65535"
        );
    }

    #[test]
    fn redaction_hides_tokens_and_literal_keys_but_not_env_references() {
        let text = r#"{
            "panel": {"token": "hunter2"},
            "providerProfiles": {
                "literal": {"model": "m", "endpoint": {"auth": {"api_key": "sk-live", "Password": 7}},
                            "headers": [{"token": "abc"}], "apiKey": ""},
                "mock": {"secret": null}
            }
        }"#;
        let loaded = resolve_text("/etc/h.jsonc", text, &Overrides::default()).unwrap();
        let shown = redacted(&loaded);
        assert_eq!(shown["panel"]["token"], "<redacted>");
        let literal = &shown["providerProfiles"]["literal"];
        assert_eq!(literal["endpoint"]["auth"]["api_key"], "<redacted>");
        assert_eq!(literal["endpoint"]["auth"]["Password"], "<redacted>");
        assert_eq!(literal["headers"][0]["token"], "<redacted>");
        assert_eq!(literal["apiKey"], "");
        assert_eq!(literal["model"], "m");
        assert_eq!(shown["providerProfiles"]["mock"]["secret"], Value::Null);
        assert_eq!(
            shown["providerProfiles"]["deepseek"]["endpoint"]["auth"]["api_key"],
            "${DEEPSEEK_API_KEY}"
        );
        let text = shown.to_string();
        assert!(!text.contains("hunter2") && !text.contains("sk-live") && !text.contains("abc"));
        // The original is untouched.
        assert_eq!(loaded.resolved["panel"]["token"], "hunter2");

        let defaults = resolve(
            None,
            &Overrides::default(),
            Path::new(CWD),
            Path::new(HOME),
            Feature::ALL,
        )
        .unwrap();
        assert_eq!(redacted(&defaults)["panel"]["token"], "");
    }

    #[test]
    fn env_reference_shape() {
        assert!(is_env_reference("${MODEL_API_KEY}"));
        assert!(is_env_reference("${_x1}"));
        assert!(!is_env_reference("${1X}"));
        assert!(!is_env_reference("${}"));
        assert!(!is_env_reference("Bearer ${X}"));
        assert!(!is_env_reference("$X"));
    }

    #[test]
    fn first_run_writes_once_private_and_round_trips() {
        let tmp = TempDir::new("first-run");
        let data_dir = tmp.join("nested").join("data");
        let overrides = Overrides {
            data_dir: Some(data_dir.clone()),
            panel_token: Some("tok".into()),
            ..Overrides::default()
        };
        let loaded = resolve(
            None,
            &overrides,
            Path::new(CWD),
            Path::new(HOME),
            BUILT_FEATURES,
        )
        .unwrap();
        let written = write_first_run(&loaded)
            .unwrap()
            .expect("a file is written");
        assert_eq!(written, data_dir.join("hub.config.jsonc"));
        let mode = |path: &Path| fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&data_dir), 0o700);
        assert_eq!(mode(&tmp.join("nested")), 0o700);
        assert_eq!(mode(&written), 0o600);
        let text = fs::read_to_string(&written).unwrap();
        assert!(text.starts_with("// simplex-hub configuration"));

        // The written file is a valid configuration with the same meaning.
        let again = resolve(
            Some((&written, &text)),
            &Overrides::default(),
            Path::new("/"),
            Path::new(HOME),
            BUILT_FEATURES,
        )
        .unwrap();
        assert_eq!(again.resolved, loaded.resolved);

        // Create-exclusive: a second first run leaves the file alone.
        fs::write(&written, "{}").unwrap();
        assert_eq!(write_first_run(&loaded).unwrap(), None);
        assert_eq!(fs::read_to_string(&written).unwrap(), "{}");
        assert_eq!(mode(&written), 0o600);

        // Nothing is written for a configuration that came from a file.
        let from_file = Loaded {
            source: ConfigSource::File(written.clone()),
            ..loaded
        };
        fs::remove_file(&written).unwrap();
        assert_eq!(write_first_run(&from_file).unwrap(), None);
        assert!(!written.exists());
    }

    #[test]
    fn load_prefers_explicit_then_jsonc_then_json_then_defaults() {
        let tmp = TempDir::new("load");
        let data = tmp.join("data");
        fs::create_dir_all(&data).unwrap();
        let home = tmp.join("home");
        let overrides = Overrides {
            data_dir: Some("data".into()),
            ..Overrides::default()
        };
        let load = |explicit: Option<&Path>| {
            load_in(explicit, &overrides, tmp.path(), &home, Feature::ALL)
        };

        assert_eq!(load(None).unwrap().source, ConfigSource::Defaults);
        fs::write(
            data.join("hub.config.json"),
            r#"{"worker": {"threads": 3}}"#,
        )
        .unwrap();
        let loaded = load(None).unwrap();
        assert_eq!(
            loaded.source,
            ConfigSource::File(data.join("hub.config.json"))
        );
        assert_eq!(loaded.config.worker.threads, 3);
        fs::write(
            data.join("hub.config.jsonc"),
            "// c\n{\"worker\": {\"threads\": 4}}",
        )
        .unwrap();
        assert_eq!(load(None).unwrap().config.worker.threads, 4);

        fs::write(tmp.join("explicit.jsonc"), r#"{"worker": {"threads": 5}}"#).unwrap();
        let loaded = load(Some(Path::new("explicit.jsonc"))).unwrap();
        assert_eq!(loaded.config.worker.threads, 5);
        // The override still decides dataDir, against the current directory.
        assert_eq!(loaded.config.data_dir, data);

        let err = load(Some(Path::new("missing.jsonc"))).unwrap_err();
        let ConfigError::Io { source, .. } = &err else {
            panic!("unexpected error {err:?}");
        };
        assert_eq!(source.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().starts_with("cannot read "), "{err}");

        // Without an override the lookup happens under the default dataDir.
        let default_dir = home.join(".simplex/hub");
        fs::create_dir_all(&default_dir).unwrap();
        fs::write(
            default_dir.join("hub.config.jsonc"),
            r#"{"worker": {"threads": 6}}"#,
        )
        .unwrap();
        let loaded = load_in(None, &Overrides::default(), tmp.path(), &home, Feature::ALL).unwrap();
        assert_eq!(loaded.config.worker.threads, 6);
    }

    /// Every leaf path of `value` with its value (arrays are leaves).
    fn leaf_values(value: &Value, prefix: &str, out: &mut Vec<(String, Value)>) {
        match value {
            Value::Object(map) if prefix != "providerProfiles" => {
                for (key, value) in map {
                    leaf_values(value, &schema::join(prefix, key), out);
                }
            }
            other => out.push((prefix.to_owned(), other.clone())),
        }
    }

    #[test]
    fn a_node_hub_first_run_file_loads_and_means_what_it_meant_there() {
        let path = "/home/op/.simplex/hub/hub.config.jsonc";
        let text = include_str!("../../tests/fixtures/node-hub-first-run.config.jsonc");
        let loaded = resolve(
            Some((Path::new(path), text)),
            &Overrides::default(),
            Path::new(CWD),
            Path::new(HOME),
            BUILT_FEATURES,
        )
        .unwrap();
        // Every key keeps the value the Node hub wrote.
        let mut written = Vec::new();
        leaf_values(&serde_json::from_str(text).unwrap(), "", &mut written);
        assert_eq!(written.len(), 64, "every key of the Node hub's file");
        for (key, value) in &written {
            let mut found = &loaded.resolved;
            for part in key.split('.') {
                found = &found[part];
            }
            assert_eq!(found, value, "{key}");
        }
        // And it means the same: the worker binary for every session, the
        // first profile by default, no mock provider, nothing daemonizing.
        let c = &loaded.config;
        assert_eq!(c.launcher.kind, LauncherKind::SimplexWorker);
        assert_eq!(
            c.worker.bin,
            Path::new(
                "/home/op/.npm-global/lib/node_modules/@hazer-bjtu/simplex-hub/build/bin/simplex_worker"
            )
        );
        assert_eq!(c.data_dir, Path::new("/home/op/.simplex/hub"));
        assert_eq!(c.default_provider(), "deepseek");
        assert!(!c.mock.enabled);
        assert_eq!(c.mock.listen, "127.0.0.1:0");
        assert_eq!(c.mock.scenario, "auto");
        assert_eq!((c.mock.slow_ms, c.mock.tool_command.as_str()), (1500, ""));
        assert_eq!(c.launcher.pid_file, "");
        assert!(c.launcher.docker_management_env.is_empty());
        assert_eq!(
            (
                c.worker.auto_compact_threshold,
                c.worker.max_auto_compactions
            ),
            (0, 5)
        );
        assert!(c.worker.hub_remote_call);
        assert_eq!(c.endpoints, AdvertisedEndpoints::default());
        assert_eq!((c.listen.port, c.tool_requests.port), (8800, 8801));
        assert_eq!(c.subagents.conversation_bytes, 1_048_576);
        assert_eq!(c.limits.transcript_bytes, 33_554_432);
    }

    #[test]
    fn docs_list_every_key() {
        let docs = include_str!("../../docs/configuration.md");
        for (key, _) in schema::KEYS {
            assert!(
                docs.contains(&format!("| `{key}` |")),
                "docs/configuration.md lacks a row for {key}"
            );
        }
    }
}
