//! Validation of the merged configuration, and the typed [`Config`] built
//! from it in the same pass.
//!
//! Each reader method checks one key's rule and returns the typed value; a
//! broken rule is recorded and a placeholder returned, so one pass collects
//! every violation. Rules that relate several keys run afterwards, and only
//! when the keys they read passed their own rules and their feature is
//! built (a key of an unbuilt feature always holds its default).
//!
//! This file reads every section into [`Config`] and holds the rules that
//! relate keys. The pass and its readers of plain JSON types are
//! `check.rs`; the keys with rules of their own are read by the file of
//! their sections: `access.rs` (`listen.allowedHosts`, `shard.*`: who may
//! reach the listeners), `endpoints.rs` (`endpoints.*`,
//! `worker.connectHost`: what workers dial), `launcher.rs` (`launcher.*`,
//! `worker.systemPromptFile`: how a worker starts), `provider.rs`
//! (`mock.*`, `providerProfiles`: the model providers).

mod access;
mod check;
mod endpoints;
mod launcher;
mod provider;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

use serde_json::Value;

use super::schema::Feature;
use super::{
    is_loopback_host, AdvertisedEndpoints, Config, ConfigError, Environment, HeadlessPermissions,
    Http, Launcher, LauncherKind, Limits, Listen, MemoryRetention, Mock, Panel, Persistence,
    ShardDaemon, ShardSocket, Subagents, ToolRequests, Worker,
};
use check::{placeholder, Check};

pub(crate) use launcher::is_env_name;

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
    let shard_daemon = ShardDaemon {
        headless_permissions: match c.one_of("shard.headlessPermissions", &["deny", "wait"]) {
            "wait" => HeadlessPermissions::Wait,
            _ => HeadlessPermissions::Deny,
        },
        runtime_idle_ms: c.int("shard.runtimeIdleMs", 0, SAFE_MAX),
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
        shard_daemon,
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
