//! Validation of the merged configuration, and the typed [`Config`] built
//! from it in the same pass.
//!
//! Each reader method checks one key's rule and returns the typed value; a
//! broken rule is recorded and a placeholder returned, so one pass collects
//! every violation. Rules that relate several keys run afterwards, and only
//! when the keys they read passed their own rules and their feature is
//! built (a key of an unbuilt feature always holds its default).

use std::path::PathBuf;

use serde_json::{Map, Value};

use super::schema::{self, Feature};
use super::{
    is_loopback_host, AdvertisedEndpoints, Config, ConfigError, Environment, Http, Launcher,
    LauncherKind, Limits, Listen, MemoryRetention, Mock, Panel, Persistence, ShardSocket,
    Subagents, ToolRequests, Violation, Worker,
};

/// JavaScript's `Number.MAX_SAFE_INTEGER`: the ceiling for integers with no
/// stated maximum, so every value we accept means the same to the Node hub.
pub(super) const SAFE_MAX: u64 = 9_007_199_254_740_991;
/// The largest signed 32-bit integer: the longest delay Node's timers
/// accept, and the ceiling the schema gives some counts.
const I32_MAX: u64 = 2_147_483_647;

/// Validates `merged` and builds the typed configuration from it.
pub(super) fn build(merged: &Value, features: &[Feature]) -> Result<Config, ConfigError> {
    let mut c = Check {
        root: merged,
        violations: Vec::new(),
        failed: Vec::new(),
    };
    c.sections();

    let listen = Listen {
        host: c.string("listen.host", true),
        port: c.port("listen.port"),
        allowed_hosts: c.allowed_hosts("listen.allowedHosts"),
    };
    let data_dir = PathBuf::from(c.path("dataDir", true));
    let panel = Panel {
        token: c.secret_string("panel.token"),
    };
    let mock = Mock {
        enabled: c.boolean("mock.enabled"),
        profile: c.string("mock.profile", false),
        listen: c.mock_listen("mock.listen"),
        scenario: c.mock_scenario("mock.scenario"),
        slow_ms: c.int("mock.slowMs", 0, I32_MAX),
        tool_command: c.mock_tool_command("mock.toolCommand"),
    };
    let force_kill_process_group = c.boolean("forceKillProcessGroup");
    let provider_profiles = c.profiles("providerProfiles");
    let launcher = Launcher {
        kind: c.launcher_kind("launcher.kind"),
        command: c.strings("launcher.command"),
        args: c.strings("launcher.args"),
        cwd: c.string("launcher.cwd", false),
        pid_file: c.pid_file("launcher.pidFile"),
        docker_management_env: c.env_names("launcher.dockerManagementEnv"),
    };
    let endpoints = AdvertisedEndpoints {
        events: c.origin("endpoints.events"),
        confirm: c.origin("endpoints.confirm"),
        tools: c.origin("endpoints.tools"),
    };
    let worker = Worker {
        bin: PathBuf::from(c.path("worker.bin", true)),
        args: c.strings("worker.args"),
        threads: c.int("worker.threads", 1, SAFE_MAX),
        connect_host: c.connect_host("worker.connectHost"),
        system_prompt_file: c.prompt_file("worker.systemPromptFile"),
        max_exchanges: c.int("worker.maxExchanges", 1, SAFE_MAX),
        auto_compact_threshold: c.int("worker.autoCompactThreshold", 0, I32_MAX),
        max_auto_compactions: c.int("worker.maxAutoCompactions", 1, I32_MAX),
        event_capacity: c.int("worker.eventCapacity", 1, SAFE_MAX),
        confirmation_timeout_ms: c.int("worker.confirmationTimeoutMs", 1, SAFE_MAX),
        hub_remote_call: c.boolean("worker.hubRemoteCall"),
        payload_capacity: c.int("worker.payloadCapacity", 0, SAFE_MAX),
        signal_capacity: c.int("worker.signalCapacity", 0, SAFE_MAX),
        write_capacity: c.int("worker.writeCapacity", 0, SAFE_MAX),
        initial_backoff_ms: c.int("worker.initialBackoffMs", 0, SAFE_MAX),
        max_backoff_ms: c.int("worker.maxBackoffMs", 0, SAFE_MAX),
        idle_timeout_seconds: c.int("worker.idleTimeoutSeconds", 0, SAFE_MAX),
        stop_timeout_ms: c.int("worker.stopTimeoutMs", 1, SAFE_MAX),
        sigterm_grace_ms: c.int("worker.sigtermGraceMs", 1, SAFE_MAX),
        sigkill_grace_ms: c.int("worker.sigkillGraceMs", 1, SAFE_MAX),
        persistence: Persistence {
            enabled: c.boolean("worker.persistence.enabled"),
            readable: c.boolean("worker.persistence.readable"),
        },
        memory_retention: MemoryRetention {
            max_archives: c.int("worker.memoryRetention.maxArchives", 0, I32_MAX),
        },
        environment: Environment {
            workspace: c.path("worker.environment.workspace", false),
            platform: c.string("worker.environment.platform", false),
            software: c.strings("worker.environment.software"),
        },
    };
    let http = Http {
        max_connections: c.usize("http.maxConnections", 1, 1_048_576),
        max_handler_threads: c.usize("http.maxHandlerThreads", 1, 65_536),
        head_timeout_ms: c.int("http.headTimeoutMs", 1, I32_MAX),
        min_head_bytes_per_second: c.int("http.minHeadBytesPerSecond", 0, 1_048_576) as u32,
        idle_timeout_ms: c.int("http.idleTimeoutMs", 1, I32_MAX),
        request_timeout_ms: c.int("http.requestTimeoutMs", 1, I32_MAX),
        max_header_bytes: c.usize("http.maxHeaderBytes", 1024, 1_048_576),
        max_headers: c.usize("http.maxHeaders", 1, 1000),
        max_body_bytes: c.usize("http.maxBodyBytes", 1024, 67_108_864),
    };
    let limits = Limits {
        transcript_events: c.usize("limits.transcriptEvents", 1, SAFE_MAX),
        transcript_bytes: c.usize("limits.transcriptBytes", 1, SAFE_MAX),
        log_lines: c.usize("limits.logLines", 1, SAFE_MAX),
        log_ring_bytes: c.usize("limits.logRingBytes", 64, SAFE_MAX),
        log_bytes: c.int("limits.logBytes", 1, SAFE_MAX),
        log_files: c.usize("limits.logFiles", 1, SAFE_MAX),
        max_message_bytes: c.usize("limits.maxMessageBytes", 1, SAFE_MAX),
        ping_interval_ms: c.int("limits.pingIntervalMs", 0, SAFE_MAX),
        confirm_identity_hold_ms: c.int("limits.confirmIdentityHoldMs", 0, SAFE_MAX),
    };
    let tool_requests = ToolRequests {
        host: c.string("toolRequests.host", false),
        port: c.port("toolRequests.port"),
        timeout_ms: c.int("toolRequests.timeoutMs", 1, I32_MAX),
        max_connections: c.usize("toolRequests.maxConnections", 1, SAFE_MAX),
    };
    let subagents = Subagents {
        max_live: c.usize("subagents.maxLive", 1, 128),
        max_children: c.usize("subagents.maxChildren", 1, 32),
        max_depth: c.usize("subagents.maxDepth", 1, 16),
        startup_timeout_ms: c.int("subagents.startupTimeoutMs", 1, SAFE_MAX),
        max_receipts: c.usize("subagents.maxReceipts", 1, 1000),
        receipt_ttl_ms: c.int("subagents.receiptTtlMs", 1, SAFE_MAX),
        conversation_bytes: c.usize("subagents.conversationBytes", 4096, SAFE_MAX),
    };

    let shard = crate::wire::shard::access::Settings {
        public_host: c.public_host("shard.publicHost"),
        allowed_origins: c.allowed_origins("shard.allowedOrigins"),
        trust_proxy: c.trust_proxy("shard.trustProxy"),
        allow_insecure_remote: c.boolean("shard.allowInsecureRemote"),
    };
    let shard_socket = ShardSocket {
        path: c.path("shard.socket", false),
        max_line_bytes: c.usize("shard.maxLineBytes", 256, 1_073_741_824),
    };

    let config = Config {
        listen,
        data_dir,
        panel,
        mock,
        force_kill_process_group,
        provider_profiles,
        launcher,
        endpoints,
        worker,
        http,
        limits,
        tool_requests,
        subagents,
        shard,
        shard_socket,
    };
    cross_rules(&mut c, &config, features);

    if c.violations.is_empty() {
        Ok(config)
    } else {
        Err(ConfigError::Invalid {
            violations: c.violations,
        })
    }
}

/// The rules that relate several keys.
fn cross_rules(c: &mut Check<'_>, config: &Config, features: &[Feature]) {
    let built = |feature| features.contains(&feature);

    if built(Feature::Core)
        && c.ok("listen.host")
        && c.ok("panel.token")
        && config.panel.token.is_empty()
        && !is_loopback_host(&config.listen.host)
    {
        c.fail(
            "listen.host",
            Value::from(config.listen.host.as_str()),
            "is not a loopback address (127.0.0.1, ::1, [::1], localhost), so panel.token must be set",
        );
    }
    if built(Feature::Core)
        && config.mock.enabled
        && c.ok("mock.enabled")
        && c.ok("mock.profile")
        && c.ok("providerProfiles")
        && !config.provider_profiles.contains_key(&config.mock.profile)
    {
        let names: Vec<&str> = config
            .provider_profiles
            .keys()
            .map(String::as_str)
            .collect();
        c.fail(
            "mock.profile",
            Value::from(config.mock.profile.as_str()),
            format!(
                "must name a profile in providerProfiles while mock.enabled is true (profiles: {})",
                names.join(", ")
            ),
        );
    }
    if built(Feature::Core)
        && config.launcher.kind == LauncherKind::Command
        && c.ok("launcher.kind")
        && c.ok("launcher.command")
        && config.launcher.command.is_empty()
    {
        c.fail(
            "launcher.command",
            Value::Array(Vec::new()),
            "must be a non-empty array of strings when launcher.kind is \"command\"",
        );
    }
    if built(Feature::Core)
        && config.launcher.kind == LauncherKind::BuiltIn
        && c.ok("launcher.kind")
        && c.ok("launcher.pidFile")
        && !config.launcher.pid_file.is_empty()
    {
        c.fail(
            "launcher.pidFile",
            Value::from(config.launcher.pid_file.as_str()),
            "must be empty when launcher.kind is \"built-in\" (the built-in worker never daemonizes)",
        );
    }
    let hold = "limits.confirmIdentityHoldMs";
    let timeout = "worker.confirmationTimeoutMs";
    if built(Feature::WorkerSide)
        && c.ok(hold)
        && c.ok(timeout)
        && config.limits.confirm_identity_hold_ms >= config.worker.confirmation_timeout_ms
    {
        c.fail(
            hold,
            Value::from(config.limits.confirm_identity_hold_ms),
            format!(
                "must be less than {timeout} ({})",
                config.worker.confirmation_timeout_ms
            ),
        );
    }
    if built(Feature::Supervisor)
        && c.ok("worker.initialBackoffMs")
        && c.ok("worker.maxBackoffMs")
        && config.worker.max_backoff_ms < config.worker.initial_backoff_ms
    {
        c.fail(
            "worker.maxBackoffMs",
            Value::from(config.worker.max_backoff_ms),
            format!(
                "must be >= worker.initialBackoffMs ({})",
                config.worker.initial_backoff_ms
            ),
        );
    }
    let shard_keys = [
        "listen.host",
        "panel.token",
        "shard.publicHost",
        "shard.allowedOrigins",
        "shard.trustProxy",
        "shard.allowInsecureRemote",
    ];
    if built(Feature::Core) && shard_keys.iter().all(|key| c.ok(key)) {
        let refused = crate::wire::shard::access::mode(
            is_loopback_host(&config.listen.host),
            !config.panel.token.is_empty(),
            &config.shard,
        );
        for missing in refused.err().unwrap_or_default() {
            let value = if missing.key == "panel.token" {
                placeholder(&Value::from(""))
            } else {
                c.get(missing.key).cloned().unwrap_or(Value::Null)
            };
            let must = if value.is_boolean() {
                "must be true"
            } else {
                "must be set"
            };
            c.fail(
                missing.key,
                value,
                format!("{must} ({}) {}", missing.flag, missing.because),
            );
        }
    }
    let (listen_port, tools_port) = (config.listen.port, config.tool_requests.port);
    if built(Feature::ToolRequests)
        && c.ok("listen.port")
        && c.ok("toolRequests.port")
        && listen_port == tools_port
        && listen_port != 0
    {
        c.fail(
            "toolRequests.port",
            Value::from(tools_port),
            format!("must differ from listen.port ({listen_port}) unless either is 0"),
        );
    }
}

/// One validation pass over the merged JSON.
struct Check<'a> {
    root: &'a Value,
    violations: Vec<Violation>,
    /// Key paths (without array indices) whose own rule failed.
    failed: Vec<String>,
}

impl<'a> Check<'a> {
    /// The value at a dotted schema path; `None` when an enclosing section
    /// is not an object (already reported by [`Check::sections`]).
    fn get(&self, path: &str) -> Option<&'a Value> {
        let mut current = self.root;
        for part in path.split('.') {
            current = current.as_object()?.get(part)?;
        }
        Some(current)
    }

    fn fail(&mut self, path: &str, value: Value, rule: impl Into<String>) {
        self.fail_at(path, path.to_owned(), value, rule);
    }

    /// Records a violation reported under `key` (which may carry an index
    /// or a profile name) against the schema key `path`.
    fn fail_at(&mut self, path: &str, key: String, value: Value, rule: impl Into<String>) {
        self.failed.push(path.to_owned());
        self.violations.push(Violation {
            key,
            value,
            rule: rule.into(),
        });
    }

    /// True when neither `path` nor an enclosing section failed.
    fn ok(&self, path: &str) -> bool {
        !self.failed.iter().any(|failed| {
            path == failed
                || (path.starts_with(failed.as_str())
                    && path.as_bytes().get(failed.len()) == Some(&b'.'))
        })
    }

    /// Every object node of the schema must still be an object.
    fn sections(&mut self) {
        let mut nodes = Vec::new();
        section_paths(&schema::defaults(), "", &mut nodes);
        for path in nodes {
            if let Some(value) = self.get(&path).filter(|value| !value.is_object()) {
                self.fail(&path, value.clone(), "must be an object");
            }
        }
    }

    fn boolean(&mut self, path: &str) -> bool {
        match self.get(path) {
            Some(Value::Bool(value)) => *value,
            Some(other) => {
                self.fail(path, other.clone(), "must be true or false");
                false
            }
            None => false,
        }
    }

    fn string(&mut self, path: &str, non_empty: bool) -> String {
        match self.get(path) {
            Some(Value::String(value)) if !(non_empty && value.is_empty()) => value.clone(),
            Some(other) => {
                let rule = if non_empty {
                    "must be a non-empty string"
                } else {
                    "must be a string"
                };
                self.fail(path, other.clone(), rule);
                String::new()
            }
            None => String::new(),
        }
    }

    /// A string whose value must not appear in messages.
    fn secret_string(&mut self, path: &str) -> String {
        match self.get(path) {
            Some(Value::String(value)) => value.clone(),
            Some(other) => {
                self.fail(path, placeholder(other), "must be a string");
                String::new()
            }
            None => String::new(),
        }
    }

    /// A string that names a file or directory: no NUL bytes.
    fn path(&mut self, path: &str, non_empty: bool) -> String {
        let value = self.string(path, non_empty);
        if value.contains('\0') {
            self.fail(path, Value::from(value), "must not contain a NUL character");
            return String::new();
        }
        value
    }

    fn int(&mut self, path: &str, min: u64, max: u64) -> u64 {
        match self.get(path) {
            Some(value) => match value.as_u64() {
                Some(n) if (min..=max).contains(&n) => n,
                _ => {
                    self.fail(path, value.clone(), int_rule(min, max));
                    0
                }
            },
            None => 0,
        }
    }

    fn usize(&mut self, path: &str, min: u64, max: u64) -> usize {
        usize::try_from(self.int(path, min, max)).unwrap_or(usize::MAX)
    }

    fn port(&mut self, path: &str) -> u16 {
        u16::try_from(self.int(path, 0, u64::from(u16::MAX))).unwrap_or(0)
    }

    fn strings(&mut self, path: &str) -> Vec<String> {
        match self.get(path) {
            Some(Value::Array(items)) if items.iter().all(Value::is_string) => items
                .iter()
                .filter_map(|item| item.as_str().map(str::to_owned))
                .collect(),
            Some(other) => {
                self.fail(path, other.clone(), "must be an array of strings");
                Vec::new()
            }
            None => Vec::new(),
        }
    }

    fn allowed_hosts(&mut self, path: &str) -> Vec<String> {
        let hosts = self.strings(path);
        for (i, host) in hosts.iter().enumerate() {
            if !is_allowed_host(host) {
                self.fail_at(
                    path,
                    format!("{path}[{i}]"),
                    Value::from(host.as_str()),
                    "must be a host name without port: non-empty, no whitespace, '/', '@' or ':' \
                     (an IPv6 address goes in brackets)",
                );
            }
        }
        hosts
    }

    fn launcher_kind(&mut self, path: &str) -> LauncherKind {
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
    fn pid_file(&mut self, path: &str) -> String {
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
    fn env_names(&mut self, path: &str) -> Vec<String> {
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

    /// Empty, or a WebSocket origin with an optional path prefix; returned
    /// without its trailing `/` and with a lower-case scheme.
    fn origin(&mut self, path: &str) -> String {
        let text = self.string(path, false);
        if text.is_empty() {
            return text;
        }
        match parse_origin(&text) {
            Ok(origin) => origin,
            Err(reason) => {
                self.fail(
                    path,
                    Value::from(text),
                    format!(
                        "must be empty or a ws:// or wss:// origin with an optional path prefix, \
                         without query, fragment or credentials: {reason}"
                    ),
                );
                String::new()
            }
        }
    }

    fn connect_host(&mut self, path: &str) -> String {
        let host = self.string(path, false);
        if !host.is_empty() && !is_bare_host(&host) {
            self.fail(
                path,
                Value::from(host),
                "must be empty or a bare host: no scheme, port, path, '?', '#', '@' or whitespace \
                 (so no raw IPv6 address)",
            );
            return String::new();
        }
        host
    }

    fn prompt_file(&mut self, path: &str) -> String {
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

    // Who may reach the Shard endpoints (`wire::shard::access`).

    fn public_host(&mut self, path: &str) -> Option<crate::wire::shard::access::PublicHost> {
        let text = self.string(path, false);
        if text.is_empty() {
            return None;
        }
        match crate::wire::shard::access::parse_public_host(&text) {
            Ok(host) => Some(host),
            Err(reason) => {
                self.fail(
                    path,
                    Value::from(text),
                    format!(
                        "must be empty or host:port with an explicit port (IPv6 in brackets): {reason}"
                    ),
                );
                None
            }
        }
    }

    fn allowed_origins(&mut self, path: &str) -> Vec<String> {
        let texts = self.strings(path);
        let mut origins = Vec::with_capacity(texts.len());
        for (i, text) in texts.iter().enumerate() {
            match crate::wire::shard::access::parse_origin(text) {
                Ok(origin) => origins.push(origin),
                Err(reason) => self.fail_at(
                    path,
                    format!("{path}[{i}]"),
                    Value::from(text.as_str()),
                    format!(
                        "must be an origin, http:// or https:// then host[:port], nothing after: {reason}"
                    ),
                ),
            }
        }
        origins
    }

    fn trust_proxy(&mut self, path: &str) -> Option<crate::wire::shard::access::Upstream> {
        let text = self.string(path, false);
        if text.is_empty() {
            return None;
        }
        match crate::wire::shard::access::parse_upstream(&text) {
            Ok(upstream) => Some(upstream),
            Err(reason) => {
                self.fail(
                    path,
                    Value::from(text),
                    format!("must be empty, \"loopback\" or an IP address: {reason}"),
                );
                None
            }
        }
    }

    // The offline model provider's keys (`mock_provider`).

    fn mock_listen(&mut self, path: &str) -> String {
        let listen = self.string(path, false);
        if let Err(rule) = crate::mock_provider::parse_listen(&listen) {
            if self.ok(path) {
                self.fail(path, Value::from(listen), rule);
            }
            return String::new();
        }
        listen
    }

    fn mock_scenario(&mut self, path: &str) -> String {
        let scenario = self.string(path, false);
        if crate::mock_provider::Scenario::parse(&scenario).is_none() && self.ok(path) {
            self.fail(
                path,
                Value::from(scenario.as_str()),
                format!("must be one of {}", crate::mock_provider::Scenario::names()),
            );
        }
        scenario
    }

    fn mock_tool_command(&mut self, path: &str) -> String {
        let command = self.string(path, false);
        if !command.is_empty() && command.trim().is_empty() {
            self.fail(
                path,
                Value::from(command),
                "must not be blank; leave it empty for the default command",
            );
            return String::new();
        }
        command
    }

    fn profiles(&mut self, path: &str) -> Map<String, Value> {
        let profiles = match self.get(path) {
            Some(Value::Object(profiles)) if !profiles.is_empty() => profiles,
            Some(other) => {
                self.fail(
                    path,
                    placeholder(other),
                    "must be an object with at least one profile",
                );
                return Map::new();
            }
            None => return Map::new(),
        };
        for (name, profile) in profiles {
            match profile {
                Value::Object(fields) => match fields.get("model") {
                    Some(Value::String(model)) if !model.is_empty() => {}
                    other => self.fail_at(
                        path,
                        format!("{path}.{name}.model"),
                        other.cloned().unwrap_or(Value::Null),
                        "must be a non-empty string",
                    ),
                },
                other => self.fail_at(
                    path,
                    format!("{path}.{name}"),
                    placeholder(other),
                    "must be an object",
                ),
            }
        }
        profiles.clone()
    }
}

/// Paths of the schema's object nodes (sections), parents first.
fn section_paths(node: &Value, prefix: &str, out: &mut Vec<String>) {
    if let Value::Object(map) = node {
        for (key, value) in map {
            let path = schema::join(prefix, key);
            if value.is_object() && schema::feature_of(&path).is_none() {
                out.push(path.clone());
                section_paths(value, &path, out);
            }
        }
    }
}

/// The rule text for an integer range.
fn int_rule(min: u64, max: u64) -> String {
    match (min, max) {
        (1, SAFE_MAX) => "must be a positive integer".to_owned(),
        (min, SAFE_MAX) => format!("must be an integer >= {min}"),
        (min, max) => format!("must be an integer from {min} to {max}"),
    }
}

/// Stands in for a value that may be a secret: only its JSON type shows.
fn placeholder(value: &Value) -> Value {
    let kind = match value {
        Value::Null => return Value::Null,
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    Value::from(format!("<redacted {kind}>"))
}

/// A host name for `listen.allowedHosts`: no port, no path, no userinfo;
/// IPv6 only in brackets.
fn is_allowed_host(host: &str) -> bool {
    if let Some(inner) = host
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
    {
        return inner.contains(':')
            && inner
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.');
    }
    !host.is_empty()
        && !host.chars().any(|c| {
            c.is_whitespace() || c.is_control() || matches!(c, '/' | '@' | ':' | '[' | ']')
        })
}

/// An environment variable name as a shell would take it.
/// Whether `name` is an environment variable name (`[A-Za-z_][A-Za-z0-9_]*`).
pub(crate) fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Checks an advertised endpoint origin (`ws[s]://host[:port][/prefix]`)
/// and returns it with a lower-case scheme and without a trailing `/`.
pub(super) fn parse_origin(text: &str) -> Result<String, &'static str> {
    let lower = text.to_ascii_lowercase();
    let (scheme, rest) = if lower.starts_with("wss://") {
        ("wss://", &text[6..])
    } else if lower.starts_with("ws://") {
        ("ws://", &text[5..])
    } else {
        return Err("the scheme is not ws:// or wss://");
    };
    if text
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '\\')
    {
        return Err("it contains whitespace, a control character or a backslash");
    }
    if rest.contains(['?', '#']) {
        return Err("it has a query or a fragment");
    }
    let (authority, prefix) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if authority.contains('@') {
        return Err("it carries credentials");
    }
    let port = if let Some(inner) = authority.strip_prefix('[') {
        let (host, after) = inner.split_once(']').ok_or("an IPv6 host lacks its ']'")?;
        if !host.contains(':')
            || !host
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
        {
            return Err("the bracketed host is not an IPv6 address");
        }
        match after {
            "" => None,
            _ => Some(
                after
                    .strip_prefix(':')
                    .ok_or("a ']' must be followed by ':' and a port")?,
            ),
        }
    } else {
        let (host, port) = match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        };
        if host.is_empty() {
            return Err("the host is empty");
        }
        if host.contains([':', '[', ']']) {
            return Err("an IPv6 host must be in brackets");
        }
        port
    };
    if let Some(port) = port {
        let valid = !port.is_empty()
            && port.bytes().all(|b| b.is_ascii_digit())
            && port.parse::<u16>().is_ok_and(|p| p > 0);
        if !valid {
            return Err("the port is not a number from 1 to 65535");
        }
    }
    let prefix = prefix.strip_suffix('/').unwrap_or(prefix);
    Ok(format!("{scheme}{authority}{prefix}"))
}

/// A host a worker can put in `ws://<host>:<port>` without reparsing it.
fn is_bare_host(host: &str) -> bool {
    !host.chars().any(|c| {
        c.is_whitespace()
            || c.is_control()
            || matches!(c, ':' | '/' | '?' | '#' | '@' | '\\' | '[' | ']')
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn defaults_with(overlay: Value) -> Value {
        let mut merged = schema::defaults();
        schema::merge(&mut merged, &overlay);
        merged
    }

    fn violations(overlay: Value) -> Vec<Violation> {
        match build(&defaults_with(overlay), Feature::ALL) {
            Ok(_) => Vec::new(),
            Err(ConfigError::Invalid { violations }) => violations,
            Err(other) => panic!("unexpected error {other}"),
        }
    }

    fn assert_ok(overlay: Value) {
        let found = violations(overlay.clone());
        assert!(found.is_empty(), "{overlay} refused: {found:?}");
    }

    fn assert_refused(overlay: Value, key: &str) {
        let found = violations(overlay.clone());
        assert!(
            found.iter().any(|v| v.key == key),
            "{overlay} should break a rule on {key}, got {found:?}"
        );
    }

    #[test]
    fn defaults_validate_with_every_feature() {
        let config = build(&schema::defaults(), Feature::ALL).unwrap();
        assert_eq!(config.listen.port, 8800);
        assert!(!config.mock.enabled);
        assert_eq!(config.launcher.kind, LauncherKind::SimplexWorker);
        assert_eq!(config.launcher.pid_file, "");
        assert!(config.launcher.docker_management_env.is_empty());
        assert_eq!(config.endpoints, AdvertisedEndpoints::default());
        assert_eq!(config.worker.auto_compact_threshold, 0);
        assert_eq!(config.worker.max_auto_compactions, 5);
        assert_eq!(
            config.worker.system_prompt_file,
            "prompts/coding_agent.yaml"
        );
        assert_eq!(config.worker.environment.workspace, "");
        assert_eq!(config.limits.log_ring_bytes, 262_144);
        assert_eq!(config.subagents.conversation_bytes, 1_048_576);
        assert_eq!(config.http.max_body_bytes, 1_048_576);
    }

    #[test]
    fn offline_provider_keys() {
        let config = build(&schema::defaults(), Feature::ALL).unwrap();
        assert_eq!(config.mock.listen, "127.0.0.1:0");
        assert_eq!(config.mock.scenario, "auto");
        assert_eq!(config.mock.slow_ms, 1500);
        assert_eq!(config.mock.tool_command, "");
        assert_ok(
            json!({"mock": {"listen": "[::1]:8000", "scenario": "error", "slowMs": 0,
            "toolCommand": "hostname"}}),
        );
        assert_ok(json!({"mock": {"slowMs": 2_147_483_647_u64}}));
        for listen in [
            json!("localhost"),
            json!(":80"),
            json!("h:65536"),
            json!(80),
        ] {
            assert_refused(json!({"mock": {"listen": listen}}), "mock.listen");
        }
        for scenario in [json!("flash"), json!("Auto"), json!(""), json!(1)] {
            assert_refused(json!({"mock": {"scenario": scenario}}), "mock.scenario");
        }
        assert_refused(json!({"mock": {"slowMs": -1}}), "mock.slowMs");
        assert_refused(
            json!({"mock": {"slowMs": 2_147_483_648_u64}}),
            "mock.slowMs",
        );
        assert_refused(json!({"mock": {"toolCommand": "  "}}), "mock.toolCommand");
        assert_refused(json!({"mock": {"toolCommand": false}}), "mock.toolCommand");
        // each broken key is reported once, with the rule that names it
        let found = violations(json!({"mock": {"listen": 5, "scenario": "nope"}}));
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].rule, "must be a string");
        assert_eq!(
            found[1].rule,
            "must be one of auto, text, echo, slow, error"
        );
    }

    #[test]
    fn ports_at_their_edges() {
        assert_ok(json!({"listen": {"port": 65535}}));
        assert_ok(json!({"listen": {"port": 0}}));
        assert_refused(json!({"listen": {"port": 65536}}), "listen.port");
        assert_refused(json!({"listen": {"port": -1}}), "listen.port");
        assert_refused(json!({"listen": {"port": 80.5}}), "listen.port");
        assert_refused(json!({"listen": {"port": "8800"}}), "listen.port");
    }

    #[test]
    fn integers_must_be_json_integers() {
        assert_refused(json!({"worker": {"threads": 1.0}}), "worker.threads");
        assert_refused(json!({"worker": {"threads": 0}}), "worker.threads");
        assert_refused(
            json!({"http": {"maxConnections": 1_048_577}}),
            "http.maxConnections",
        );
        assert_ok(json!({"http": {"maxConnections": 1_048_576}}));
        assert_refused(
            json!({"http": {"maxHandlerThreads": 0}}),
            "http.maxHandlerThreads",
        );
        assert_refused(json!({"http": {"headTimeoutMs": 0}}), "http.headTimeoutMs");
        assert_ok(json!({"http": {"minHeadBytesPerSecond": 0}}));
        assert_refused(
            json!({"http": {"minHeadBytesPerSecond": -1}}),
            "http.minHeadBytesPerSecond",
        );
        assert_refused(
            json!({"http": {"maxHeaderBytes": 1023}}),
            "http.maxHeaderBytes",
        );
        assert_refused(
            json!({"http": {"idleTimeoutMs": 2_147_483_648_u64}}),
            "http.idleTimeoutMs",
        );
        assert_refused(
            json!({"limits": {"transcriptEvents": 9_007_199_254_740_992_u64}}),
            "limits.transcriptEvents",
        );
    }

    #[test]
    fn log_ring_bytes_floor() {
        assert_ok(json!({"limits": {"logRingBytes": 64}}));
        assert_refused(
            json!({"limits": {"logRingBytes": 63}}),
            "limits.logRingBytes",
        );
    }

    #[test]
    fn identity_hold_must_be_below_confirmation_timeout() {
        assert_ok(json!({"limits": {"confirmIdentityHoldMs": 119_999}}));
        assert_refused(
            json!({"limits": {"confirmIdentityHoldMs": 120_000}}),
            "limits.confirmIdentityHoldMs",
        );
        assert_ok(json!({"limits": {"confirmIdentityHoldMs": 0}}));
        // A broken timeout is reported once, not again through the hold.
        let found = violations(json!({"worker": {"confirmationTimeoutMs": 0}}));
        assert_eq!(found.len(), 1, "{found:?}");
    }

    #[test]
    fn tool_port_must_differ_unless_zero() {
        assert_refused(json!({"toolRequests": {"port": 8800}}), "toolRequests.port");
        assert_ok(json!({"listen": {"port": 0}, "toolRequests": {"port": 0}}));
        assert_ok(json!({"listen": {"port": 8801}, "toolRequests": {"port": 0}}));
        // Without the tool listener built, the clash is not a problem.
        let merged = defaults_with(json!({"listen": {"port": 8801}}));
        assert!(build(&merged, &[Feature::Core]).is_ok());
        assert!(build(&merged, Feature::ALL).is_err());
    }

    #[test]
    fn token_required_off_loopback() {
        for host in ["127.0.0.1", "::1", "[::1]", "localhost"] {
            assert_ok(json!({"listen": {"host": host}}));
        }
        assert_refused(json!({"listen": {"host": "0.0.0.0"}}), "listen.host");
        assert_ok(json!({"listen": {"host": "0.0.0.0"}, "panel": {"token": "s3cret"}}));
        assert_refused(json!({"listen": {"host": ""}}), "listen.host");
    }

    #[test]
    fn shard_keys_are_parsed_and_normalized() {
        let config = build(&schema::defaults(), Feature::ALL).unwrap();
        assert_eq!(
            config.shard,
            crate::wire::shard::access::Settings::default()
        );
        let config = build(
            &defaults_with(json!({"shard": {
                "publicHost": "Hub.Example.com:443",
                "allowedOrigins": ["HTTPS://hub.example.com:443", "http://[::1]:8800"],
                "trustProxy": "loopback",
                "allowInsecureRemote": true
            }, "panel": {"token": "t"}})),
            Feature::ALL,
        )
        .unwrap();
        let s = &config.shard;
        assert_eq!(
            s.public_host.as_ref().unwrap().to_string(),
            "hub.example.com:443"
        );
        assert_eq!(
            s.allowed_origins,
            ["https://hub.example.com", "http://[::1]:8800"]
        );
        assert_eq!(
            s.trust_proxy,
            Some(crate::wire::shard::access::Upstream::Loopback)
        );
        for (overlay, key) in [
            (json!({"publicHost": "hub.example.com"}), "shard.publicHost"),
            (json!({"publicHost": 443}), "shard.publicHost"),
            (
                json!({"allowedOrigins": "https://a.example"}),
                "shard.allowedOrigins",
            ),
            (
                json!({"allowedOrigins": ["https://a.example/"]}),
                "shard.allowedOrigins[0]",
            ),
            (json!({"trustProxy": "10.0.0.0/8"}), "shard.trustProxy"),
            (
                json!({"allowInsecureRemote": "yes"}),
                "shard.allowInsecureRemote",
            ),
        ] {
            assert_refused(json!({"shard": overlay}), key);
        }
    }

    /// The start-up refusals of remote mode, each naming the key and its
    /// flag; the drop-in case (a token and no `shard.*` key) still starts.
    #[test]
    fn shard_remote_mode_refusals_name_what_is_missing() {
        let remote = json!({"listen": {"host": "0.0.0.0"}, "panel": {"token": "t"}});
        assert_ok(remote.clone());
        let with = |shard: Value| {
            let mut overlay = remote.clone();
            overlay["shard"] = shard;
            violations(overlay)
        };
        let found = with(json!({"allowInsecureRemote": true}));
        let keys: Vec<&str> = found.iter().map(|v| v.key.as_str()).collect();
        assert_eq!(keys, ["shard.publicHost", "shard.allowedOrigins"]);
        assert_eq!(
            found[0].to_string(),
            "shard.publicHost = \"\": must be set (--public-host HOST:PORT) because listen.host \
             is not a loopback address"
        );
        let found = with(
            json!({"publicHost": "192.0.2.2:8800", "allowedOrigins": ["http://192.0.2.2:8800"]}),
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].key, "shard.allowInsecureRemote");
        assert!(found[0].to_string().starts_with(
            "shard.allowInsecureRemote = false: must be true (--allow-insecure-remote)"
        ));
        assert!(with(
            json!({"publicHost": "192.0.2.2:8800", "allowedOrigins": ["http://192.0.2.2:8800"],
                            "allowInsecureRemote": true})
        )
        .is_empty());
        // A proxy in front of loopback needs the panel token, never echoed.
        let found = violations(
            json!({"shard": {"trustProxy": "loopback", "publicHost": "h.example:443",
                                                 "allowedOrigins": ["https://h.example"]}}),
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].key, "panel.token");
        assert_eq!(found[0].value, json!("<redacted string>"));
        // A key that broke its own rule is reported once, without the
        // combination rule piling on.
        let found = with(json!({"publicHost": "nope"}));
        let keys: Vec<&str> = found.iter().map(|v| v.key.as_str()).collect();
        assert_eq!(keys, ["shard.publicHost"]);
    }

    #[test]
    fn launcher_rules() {
        assert_refused(json!({"launcher": {"kind": "command"}}), "launcher.command");
        assert_ok(json!({"launcher": {"kind": "command", "command": ["run.sh", "{session}"]}}));
        assert_refused(json!({"launcher": {"kind": "docker"}}), "launcher.kind");
        assert_ok(json!({"launcher": {"kind": "built-in"}}));
        assert_eq!(
            only_violation(json!({"launcher": {"kind": "mock"}})),
            "launcher.kind = \"mock\": must be \"simplex-worker\", \"command\" or \"built-in\""
        );
        assert_refused(json!({"launcher": {"args": ["a", 1]}}), "launcher.args");
    }

    #[test]
    fn mock_profile_must_exist_when_enabled() {
        assert_refused(
            json!({"mock": {"enabled": true, "profile": "nope"}}),
            "mock.profile",
        );
        assert_ok(json!({"mock": {"profile": "nope"}}));
        assert_ok(json!({"mock": {"enabled": true, "profile": "mine"},
                         "providerProfiles": {"mine": {"model": "m"}}}));
    }

    /// The one violation `overlay` causes, as text.
    fn only_violation(overlay: Value) -> String {
        let found = violations(overlay.clone());
        assert_eq!(found.len(), 1, "{overlay}: {found:?}");
        found[0].to_string()
    }

    #[test]
    fn auto_compaction_rules() {
        assert_ok(json!({"worker": {"autoCompactThreshold": 2_147_483_647_u64,
                                    "maxAutoCompactions": 2_147_483_647_u64}}));
        assert_ok(json!({"worker": {"autoCompactThreshold": 0, "maxAutoCompactions": 1}}));
        assert_eq!(
            only_violation(json!({"worker": {"autoCompactThreshold": 2_147_483_648_u64}})),
            "worker.autoCompactThreshold = 2147483648: must be an integer from 0 to 2147483647"
        );
        assert_eq!(
            only_violation(json!({"worker": {"maxAutoCompactions": 0}})),
            "worker.maxAutoCompactions = 0: must be an integer from 1 to 2147483647"
        );
        assert_refused(
            json!({"worker": {"autoCompactThreshold": -1}}),
            "worker.autoCompactThreshold",
        );
        assert_refused(
            json!({"worker": {"maxAutoCompactions": 2.5}}),
            "worker.maxAutoCompactions",
        );
    }

    #[test]
    fn pid_file_and_docker_environment_rules() {
        assert_ok(json!({"launcher": {"pidFile": "/run/simplex/{session}.pid"}}));
        assert_ok(json!({"launcher": {"pidFile": "{session_dir}/worker.pid"}}));
        assert_refused(
            json!({"launcher": {"pidFile": "{session}.pid"}}),
            "launcher.pidFile",
        );
        assert_eq!(
            only_violation(json!({"launcher": {"pidFile": "run/w.pid"}})),
            "launcher.pidFile = \"run/w.pid\": must be empty or an absolute path (it may start \
             with {session_dir} or {data_dir})"
        );
        assert_refused(json!({"launcher": {"pidFile": 5}}), "launcher.pidFile");
        assert_refused(
            json!({"launcher": {"pidFile": "/a\u{0}b"}}),
            "launcher.pidFile",
        );
        assert_eq!(
            only_violation(json!({"launcher": {"kind": "built-in", "pidFile": "/w.pid"}})),
            "launcher.pidFile = \"/w.pid\": must be empty when launcher.kind is \"built-in\" \
             (the built-in worker never daemonizes)"
        );
        assert_ok(
            json!({"launcher": {"dockerManagementEnv": ["CUSTOM_TOKEN", "_X1", "XDG_RUNTIME_DIR"]}}),
        );
        assert_eq!(
            only_violation(json!({"launcher": {"dockerManagementEnv": ["A", "A"]}})),
            "launcher.dockerManagementEnv[1] = \"A\": is listed twice"
        );
        for bad in ["DOCKER_*", "1X", "", "A-B", "A B"] {
            assert_refused(
                json!({"launcher": {"dockerManagementEnv": ["OK", bad]}}),
                "launcher.dockerManagementEnv[1]",
            );
        }
        assert_refused(
            json!({"launcher": {"dockerManagementEnv": "PATH"}}),
            "launcher.dockerManagementEnv",
        );
    }

    #[test]
    fn advertised_endpoint_rules() {
        let config = build(
            &defaults_with(json!({"endpoints": {
                "events": "WSS://proxy.example/simplex/",
                "confirm": "ws://10.0.0.2:9000",
                "tools": "wss://[fd00::2]:8443/a/b"}})),
            Feature::ALL,
        )
        .unwrap();
        assert_eq!(config.endpoints.events, "wss://proxy.example/simplex");
        assert_eq!(config.endpoints.confirm, "ws://10.0.0.2:9000");
        assert_eq!(config.endpoints.tools, "wss://[fd00::2]:8443/a/b");
        for bad in [
            "http://proxy.example",
            "proxy.example",
            "ws://",
            "ws:///x",
            "ws://user:pw@proxy.example",
            "ws://proxy.example/?token=x",
            "ws://proxy.example/#x",
            "ws://proxy.example:0",
            "ws://proxy.example:65536",
            "ws://proxy.example:x",
            "ws://fd00::1/x",
            "ws://[zz]",
            "ws://[::1]9000",
            "ws://proxy example",
        ] {
            assert_refused(json!({"endpoints": {"confirm": bad}}), "endpoints.confirm");
        }
        let text = only_violation(json!({"endpoints": {"events": "https://proxy.example"}}));
        assert!(
            text.starts_with("endpoints.events = \"https://proxy.example\": must be empty or a ws:// or wss:// origin"),
            "{text}"
        );
        assert!(
            text.ends_with("the scheme is not ws:// or wss://"),
            "{text}"
        );
    }

    #[test]
    fn profile_rules() {
        assert_refused(
            json!({"providerProfiles": {"x": {"plugin": "p"}}}),
            "providerProfiles.x.model",
        );
        assert_refused(
            json!({"providerProfiles": {"x": {"model": ""}}}),
            "providerProfiles.x.model",
        );
        assert_refused(
            json!({"providerProfiles": {"x": "sk-secret"}}),
            "providerProfiles.x",
        );
        let found = violations(json!({"providerProfiles": {"x": "sk-secret"}}));
        assert!(!found[0].to_string().contains("sk-secret"));
        assert_refused(json!({"providerProfiles": []}), "providerProfiles");
    }

    #[test]
    fn token_type_errors_do_not_echo_the_value() {
        let found = violations(json!({"panel": {"token": 123456}}));
        assert_eq!(
            found[0].to_string(),
            "panel.token = \"<redacted number>\": must be a string"
        );
    }

    #[test]
    fn allowed_hosts_rule() {
        assert_ok(
            json!({"listen": {"allowedHosts": ["hub.example", "10.0.0.2", "[::1]", "[fe80::1]"]}}),
        );
        for bad in [
            "", "a b", "x/y", "user@x", "x:80", "::1", "[::1]:80", "[]", "[zz]",
        ] {
            assert_refused(
                json!({"listen": {"allowedHosts": ["ok", bad]}}),
                "listen.allowedHosts[1]",
            );
        }
    }

    #[test]
    fn connect_host_rule() {
        assert_ok(json!({"worker": {"connectHost": "host.docker.internal"}}));
        for bad in ["http://x", "x:80", "x/y", "x?y", "x#y", "a b", "::1", "u@x"] {
            assert_refused(
                json!({"worker": {"connectHost": bad}}),
                "worker.connectHost",
            );
        }
    }

    #[test]
    fn system_prompt_file_rule() {
        assert_ok(json!({"worker": {"systemPromptFile": "prompts/x..y.yaml"}}));
        for bad in [
            "", "/etc/p", "\\p", "C:p", "c:\\p", "a/../b", "a\\..\\b", "..", "a\u{0}b",
        ] {
            assert_refused(
                json!({"worker": {"systemPromptFile": bad}}),
                "worker.systemPromptFile",
            );
        }
    }

    #[test]
    fn backoff_order() {
        assert_ok(json!({"worker": {"initialBackoffMs": 10, "maxBackoffMs": 10}}));
        assert_refused(
            json!({"worker": {"initialBackoffMs": 11, "maxBackoffMs": 10}}),
            "worker.maxBackoffMs",
        );
    }

    #[test]
    fn subagent_maxima() {
        assert_ok(
            json!({"subagents": {"maxLive": 128, "maxChildren": 32, "maxDepth": 16, "maxReceipts": 1000}}),
        );
        assert_refused(json!({"subagents": {"maxLive": 129}}), "subagents.maxLive");
        assert_refused(
            json!({"subagents": {"maxChildren": 33}}),
            "subagents.maxChildren",
        );
        assert_refused(json!({"subagents": {"maxDepth": 17}}), "subagents.maxDepth");
        assert_refused(
            json!({"subagents": {"maxReceipts": 1001}}),
            "subagents.maxReceipts",
        );
        assert_refused(
            json!({"subagents": {"conversationBytes": 4095}}),
            "subagents.conversationBytes",
        );
    }

    #[test]
    fn wrong_section_type_is_one_violation() {
        let found = violations(json!({"listen": 5}));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].to_string(), "listen = 5: must be an object");
    }

    #[test]
    fn all_violations_are_collected() {
        let err = build(
            &defaults_with(json!({"listen": {"port": 70000}, "worker": {"threads": 0}, "mock": {"enabled": "yes"}})),
            Feature::ALL,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid configuration: listen.port = 70000: must be an integer from 0 to 65535; \
             mock.enabled = \"yes\": must be true or false; worker.threads = 0: must be a positive integer"
        );
    }
}
