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
//! Everything up to [`resolve`](fn@resolve) is pure: no disk, no environment, no clock.
//! [`load`](fn@load) and [`write_first_run`] are the only functions doing I/O.
//! The reference for operators is `docs/configuration.md`.
//!
//! This file holds [`Config`] and its sections. The command line's values
//! are `overrides.rs`; the layers merged, validated and resolved
//! (`resolve.rs`, pure); finding and reading the file and writing the
//! first-run file (`load.rs`); the redacted view (`redact.rs`); the key
//! schema (`schema.rs`), paths (`paths.rs`), the rules (`validate/`) and
//! the errors (`error.rs`).

mod error;
mod load;
mod overrides;
mod paths;
mod redact;
mod resolve;
mod schema;
#[cfg(test)]
mod tests;
mod validate;

use std::path::PathBuf;

use serde_json::{Map, Value};

pub use error::{ConfigError, UnknownKey, Violation};
pub use load::{load, write_first_run};
pub use overrides::{parse_listen, Overrides};
pub use redact::redacted;
#[cfg(test)]
pub use resolve::test_config;
pub use resolve::{launch_profile, resolve, strip_jsonc, ConfigSource, Loaded};
pub use schema::{Feature, BUILT_FEATURES};
pub(crate) use validate::is_env_name;

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
    /// `shard.headlessPermissions`, `shard.runtimeIdleMs`: the daemon's own
    /// rules.
    pub shard_daemon: ShardDaemon,
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

/// What happens to a confirmation no connected client can answer (seed
/// 004 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadlessPermissions {
    /// The daemon's headless path: denied at once, `source: "headless"`.
    Deny,
    /// Left open until someone answers or the worker's deadline (the Node
    /// hub's behaviour, for operators who answer through the JSON API).
    Wait,
}

/// `shard.headlessPermissions` and `shard.runtimeIdleMs`.
#[derive(Debug, Clone)]
pub struct ShardDaemon {
    pub headless_permissions: HeadlessPermissions,
    /// A daemon agent's runtime idle (or in error) this long is stopped;
    /// the agent stays and the next attach or prompt starts it. 0: never.
    pub runtime_idle_ms: u64,
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
