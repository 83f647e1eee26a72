//! Unit tests of configuration validation: every key's rule at its edges
//! and the rules that relate keys.

use super::*;
use crate::config::{schema, Violation};
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
    let found =
        with(json!({"publicHost": "192.0.2.2:8800", "allowedOrigins": ["http://192.0.2.2:8800"]}));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].key, "shard.allowInsecureRemote");
    assert!(found[0]
        .to_string()
        .starts_with("shard.allowInsecureRemote = false: must be true (--allow-insecure-remote)"));
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
