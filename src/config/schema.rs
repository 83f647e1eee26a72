//! The schema: built-in defaults, the feature each key belongs to, the
//! unknown-key check and the merge.
//!
//! The defaults object *is* the schema. A key path is known when it exists
//! in [`defaults`]; its leaf keys are listed in [`KEYS`] with the feature
//! that brings them to life. `providerProfiles` is one opaque leaf: profile
//! names and everything inside a profile pass through unchecked here.

use serde_json::{json, Map, Value};

use super::{ConfigError, UnknownKey};

/// A slice of the hub that owns some configuration keys. A key is accepted
/// in a configuration file only once its feature is built in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Feature {
    /// Listener, data directory, panel token, mock switch, launcher,
    /// provider profiles, worker binary, HTTP limits.
    Core,
    /// The worker protocol side: transcript ring, message size, pings,
    /// confirmation timing.
    WorkerSide,
    /// Process supervision: stop ladder, backoff, log capture, generated
    /// worker settings.
    Supervisor,
    /// The second listener that serves remote-tool sockets.
    ToolRequests,
    /// Headless subagents.
    Subagents,
}

impl Feature {
    /// Every feature, for validating as a complete build would.
    pub const ALL: &'static [Feature] = &[
        Feature::Core,
        Feature::WorkerSide,
        Feature::Supervisor,
        Feature::ToolRequests,
        Feature::Subagents,
    ];

    /// Short lowercase name, as used in docs and messages.
    pub fn name(self) -> &'static str {
        match self {
            Feature::Core => "core",
            Feature::WorkerSide => "worker-side",
            Feature::Supervisor => "supervisor",
            Feature::ToolRequests => "tool-requests",
            Feature::Subagents => "subagents",
        }
    }
}

/// The features this build implements. Extend it as features land; keys of
/// the others are refused in configuration files (but still get their
/// defaults in [`super::Config`]).
pub const BUILT_FEATURES: &[Feature] = &[
    Feature::Core,
    Feature::WorkerSide,
    Feature::Supervisor,
    Feature::ToolRequests,
    Feature::Subagents,
];

/// Every leaf key of the schema, in schema order, with its feature.
pub(super) const KEYS: &[(&str, Feature)] = &[
    ("listen.host", Feature::Core),
    ("listen.port", Feature::Core),
    ("listen.allowedHosts", Feature::Core),
    ("dataDir", Feature::Core),
    ("panel.token", Feature::Core),
    ("mock.enabled", Feature::Core),
    // The offline model provider (`mock_provider`).
    ("mock.listen", Feature::Core),
    ("mock.profile", Feature::Core),
    ("mock.scenario", Feature::Core),
    ("mock.slowMs", Feature::Core),
    ("mock.toolCommand", Feature::Core),
    ("forceKillProcessGroup", Feature::Core),
    ("providerProfiles", Feature::Core),
    ("launcher.kind", Feature::Core),
    ("launcher.command", Feature::Core),
    ("launcher.args", Feature::Core),
    ("launcher.cwd", Feature::Core),
    ("launcher.pidFile", Feature::Core),
    ("launcher.dockerManagementEnv", Feature::Core),
    ("endpoints.events", Feature::Supervisor),
    ("endpoints.confirm", Feature::Supervisor),
    ("endpoints.tools", Feature::Supervisor),
    ("worker.bin", Feature::Core),
    ("worker.args", Feature::Core),
    ("worker.threads", Feature::Core),
    ("worker.connectHost", Feature::Supervisor),
    ("worker.systemPromptFile", Feature::Supervisor),
    ("worker.maxExchanges", Feature::Supervisor),
    ("worker.autoCompactThreshold", Feature::Supervisor),
    ("worker.maxAutoCompactions", Feature::Supervisor),
    ("worker.eventCapacity", Feature::Supervisor),
    ("worker.confirmationTimeoutMs", Feature::WorkerSide),
    ("worker.hubRemoteCall", Feature::Supervisor),
    ("worker.payloadCapacity", Feature::Supervisor),
    ("worker.signalCapacity", Feature::Supervisor),
    ("worker.writeCapacity", Feature::Supervisor),
    ("worker.initialBackoffMs", Feature::Supervisor),
    ("worker.maxBackoffMs", Feature::Supervisor),
    ("worker.idleTimeoutSeconds", Feature::Supervisor),
    ("worker.stopTimeoutMs", Feature::Supervisor),
    ("worker.sigtermGraceMs", Feature::Supervisor),
    ("worker.sigkillGraceMs", Feature::Supervisor),
    ("worker.persistence.enabled", Feature::Supervisor),
    ("worker.persistence.readable", Feature::Supervisor),
    ("worker.memoryRetention.maxArchives", Feature::Supervisor),
    ("worker.environment.workspace", Feature::Supervisor),
    ("worker.environment.platform", Feature::Supervisor),
    ("worker.environment.software", Feature::Supervisor),
    ("http.maxConnections", Feature::Core),
    ("http.maxHandlerThreads", Feature::Core),
    ("http.headTimeoutMs", Feature::Core),
    ("http.minHeadBytesPerSecond", Feature::Core),
    ("http.idleTimeoutMs", Feature::Core),
    ("http.requestTimeoutMs", Feature::Core),
    ("http.maxHeaderBytes", Feature::Core),
    ("http.maxHeaders", Feature::Core),
    ("http.maxBodyBytes", Feature::Core),
    ("limits.transcriptEvents", Feature::WorkerSide),
    ("limits.transcriptBytes", Feature::WorkerSide),
    ("limits.logLines", Feature::Supervisor),
    ("limits.logRingBytes", Feature::Supervisor),
    ("limits.logBytes", Feature::Supervisor),
    ("limits.logFiles", Feature::Supervisor),
    ("limits.maxMessageBytes", Feature::WorkerSide),
    ("limits.pingIntervalMs", Feature::WorkerSide),
    ("limits.confirmIdentityHoldMs", Feature::WorkerSide),
    ("toolRequests.host", Feature::ToolRequests),
    ("toolRequests.port", Feature::ToolRequests),
    ("toolRequests.timeoutMs", Feature::ToolRequests),
    ("toolRequests.maxConnections", Feature::ToolRequests),
    ("subagents.maxLive", Feature::Subagents),
    ("subagents.maxChildren", Feature::Subagents),
    ("subagents.maxDepth", Feature::Subagents),
    ("subagents.startupTimeoutMs", Feature::Subagents),
    ("subagents.maxReceipts", Feature::Subagents),
    ("subagents.receiptTtlMs", Feature::Subagents),
    ("subagents.conversationBytes", Feature::Subagents),
    // Who may reach the Shard endpoints (`wire::shard::access`).
    ("shard.publicHost", Feature::Core),
    ("shard.allowedOrigins", Feature::Core),
    ("shard.trustProxy", Feature::Core),
    ("shard.allowInsecureRemote", Feature::Core),
    // The Shard unix socket (`shard::socket`).
    ("shard.socket", Feature::Core),
    ("shard.maxLineBytes", Feature::Core),
    ("shard.headlessPermissions", Feature::Core),
    ("shard.runtimeIdleMs", Feature::Core),
];

/// Keys older hubs had and this one refuses with an explanation rather than
/// as merely unknown.
const REMOVED: &[(&str, &str)] = &[(
    "worker.promptsDir",
    "prompts are read from worker.systemPromptFile, relative to the worker installation",
)];

/// The feature of a leaf key, or `None` for object nodes and unknown paths.
pub(super) fn feature_of(path: &str) -> Option<Feature> {
    KEYS.iter()
        .find(|(key, _)| *key == path)
        .map(|&(_, feature)| feature)
}

/// The built-in defaults, in schema order. This is also the schema.
pub(super) fn defaults() -> Value {
    json!({
        "listen": { "host": "127.0.0.1", "port": 8800, "allowedHosts": [] },
        "dataDir": "~/.simplex/hub",
        "panel": { "token": "" },
        "mock": {
            "enabled": false,
            "listen": "127.0.0.1:0",
            "profile": "mock",
            "scenario": "auto",
            "slowMs": 1500,
            "toolCommand": ""
        },
        "forceKillProcessGroup": false,
        "providerProfiles": {
            "deepseek": {
                "plugin": "deepseek",
                "model": "deepseek-flash",
                "config": { "reasoning": { "effort": "high" } },
                "endpoint": {
                    "base_url": "https://api.deepseek.com",
                    "auth": { "scheme": "bearer", "api_key": "${DEEPSEEK_API_KEY}" }
                },
                "retry": { "max_attempts": 3, "initial_backoff_ms": 500, "max_backoff_ms": 120000 }
            },
            "mock": {
                "plugin": "deepseek",
                "model": "mock-flash",
                "endpoint": { "base_url": "http://127.0.0.1:0", "auth": { "scheme": "none" } },
                "retry": { "max_attempts": 0 }
            }
        },
        "launcher": {
            "kind": "simplex-worker",
            "command": [],
            "args": [],
            "cwd": "",
            "pidFile": "",
            "dockerManagementEnv": []
        },
        "endpoints": { "events": "", "confirm": "", "tools": "" },
        "worker": {
            "bin": "simplex_worker",
            "args": [],
            "threads": 1,
            "connectHost": "",
            "systemPromptFile": "prompts/coding_agent.yaml",
            "maxExchanges": 512,
            "autoCompactThreshold": 0,
            "maxAutoCompactions": 5,
            "eventCapacity": 1024,
            "confirmationTimeoutMs": 120000,
            "hubRemoteCall": true,
            "payloadCapacity": 256,
            "signalCapacity": 256,
            "writeCapacity": 256,
            "initialBackoffMs": 250,
            "maxBackoffMs": 10000,
            "idleTimeoutSeconds": 0,
            "stopTimeoutMs": 15000,
            "sigtermGraceMs": 5000,
            "sigkillGraceMs": 2000,
            "persistence": { "enabled": true, "readable": false },
            "memoryRetention": { "maxArchives": 5 },
            "environment": { "workspace": "", "platform": "", "software": [] }
        },
        "http": {
            "maxConnections": 16384,
            "maxHandlerThreads": 256,
            "headTimeoutMs": 10000,
            "minHeadBytesPerSecond": 128,
            "idleTimeoutMs": 30000,
            "requestTimeoutMs": 30000,
            "maxHeaderBytes": 16384,
            "maxHeaders": 100,
            "maxBodyBytes": 1048576
        },
        "limits": {
            "transcriptEvents": 5000,
            "transcriptBytes": 33554432,
            "logLines": 500,
            "logRingBytes": 262144,
            "logBytes": 8388608,
            "logFiles": 2,
            "maxMessageBytes": 33554432,
            "pingIntervalMs": 30000,
            "confirmIdentityHoldMs": 15000
        },
        "toolRequests": { "host": "", "port": 8801, "timeoutMs": 120000, "maxConnections": 128 },
        "subagents": {
            "maxLive": 16,
            "maxChildren": 4,
            "maxDepth": 3,
            "startupTimeoutMs": 30000,
            "maxReceipts": 200,
            "receiptTtlMs": 3600000,
            "conversationBytes": 1048576
        },
        "shard": {
            "publicHost": "",
            "allowedOrigins": [],
            "trustProxy": "",
            "allowInsecureRemote": false,
            "socket": "shard.sock",
            "maxLineBytes": 4194304,
            "headlessPermissions": "deny",
            "runtimeIdleMs": 0
        }
    })
}

/// The layer a start without any configuration file adds over the
/// defaults: the built-in worker, so a fresh data directory works offline
/// with no setup. A file never gets it: there `launcher.kind` defaults to
/// `simplex-worker`, as it does for the Node hub. The first-run file
/// records it, so later starts keep the built-in worker.
pub(super) fn fresh_start() -> Value {
    json!({ "launcher": { "kind": "built-in" } })
}

/// `prefix.key`, or `key` at the top level.
pub(super) fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

/// Checks the keys of a configuration file against the schema and the
/// built features. Reports a removed key on its own, otherwise every
/// unknown or unbuilt key in one error.
pub(super) fn check_keys(
    file: &Map<String, Value>,
    features: &[Feature],
) -> Result<(), ConfigError> {
    let schema = defaults();
    let mut unknown = Vec::new();
    let mut removed = None;
    if let Value::Object(schema) = &schema {
        walk(file, schema, "", features, &mut unknown, &mut removed);
    }
    if let Some((key, hint)) = removed {
        return Err(ConfigError::RemovedKey { key, hint });
    }
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(ConfigError::UnknownKeys { keys: unknown })
    }
}

fn walk(
    file: &Map<String, Value>,
    schema: &Map<String, Value>,
    prefix: &str,
    features: &[Feature],
    unknown: &mut Vec<UnknownKey>,
    removed: &mut Option<(String, &'static str)>,
) {
    for (key, value) in file {
        let path = join(prefix, key);
        if let Some(&(_, hint)) = REMOVED.iter().find(|(removed, _)| *removed == path) {
            removed.get_or_insert((path, hint));
            continue;
        }
        let Some(schema_value) = schema.get(key) else {
            unknown.push(UnknownKey {
                path,
                unbuilt: None,
            });
            continue;
        };
        if let Some(feature) = feature_of(&path) {
            if !features.contains(&feature) {
                unknown.push(UnknownKey {
                    path,
                    unbuilt: Some(feature),
                });
            }
            continue;
        }
        // An object node. Descend when the file has an object here; a
        // wrong type is left for validation to name, unless nothing under
        // this node is built, in which case the node itself is refused.
        match (schema_value, value) {
            (Value::Object(sub_schema), Value::Object(sub_file)) => {
                walk(sub_file, sub_schema, &path, features, unknown, removed);
            }
            _ => {
                let prefix = format!("{path}.");
                let mut leaves = KEYS.iter().filter(|(key, _)| key.starts_with(&prefix));
                if !leaves.clone().any(|(_, f)| features.contains(f)) {
                    unknown.push(UnknownKey {
                        path,
                        unbuilt: leaves.next().map(|&(_, f)| f),
                    });
                }
            }
        }
    }
}

/// Lays `overlay` over `base`: objects merge key by key, recursively; any
/// other value (arrays included) replaces what was there. Keys already in
/// `base` keep their position; new keys are appended.
pub(super) fn merge(base: &mut Value, overlay: &Value) {
    match (base, overlay) {
        (Value::Object(base), Value::Object(overlay)) => {
            for (key, value) in overlay {
                match base.get_mut(key) {
                    Some(slot) if slot.is_object() && value.is_object() => merge(slot, value),
                    _ => {
                        base.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (base, overlay) => *base = overlay.clone(),
    }
}

/// Removes the keys of features not in `features`, and object nodes left
/// empty by that, so the result is a valid file for this build.
pub(super) fn prune(map: &mut Map<String, Value>, prefix: &str, features: &[Feature]) {
    map.retain(|key, value| {
        let path = join(prefix, key);
        if let Some(feature) = feature_of(&path) {
            return features.contains(&feature);
        }
        match value {
            Value::Object(sub) => {
                prune(sub, &path, features);
                !sub.is_empty()
            }
            _ => true,
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Leaf paths of the defaults, treating `providerProfiles` as a leaf.
    fn leaves(value: &Value, prefix: &str, out: &mut Vec<String>) {
        if let Value::Object(map) = value {
            for (key, value) in map {
                let path = join(prefix, key);
                if value.is_object() && path != "providerProfiles" {
                    leaves(value, &path, out);
                } else {
                    out.push(path);
                }
            }
        }
    }

    #[test]
    fn key_table_matches_defaults_in_order() {
        let mut found = Vec::new();
        leaves(&defaults(), "", &mut found);
        let listed: Vec<String> = KEYS.iter().map(|(key, _)| key.to_string()).collect();
        assert_eq!(found, listed);
    }

    #[test]
    fn merge_recurses_into_objects_and_replaces_arrays() {
        let mut base = json!({"a": {"x": 1, "y": [1, 2, 3]}, "b": 2});
        merge(
            &mut base,
            &json!({"a": {"y": [9], "z": true}, "b": {"new": 1}}),
        );
        assert_eq!(
            base,
            json!({"a": {"x": 1, "y": [9], "z": true}, "b": {"new": 1}})
        );
        let keys: Vec<&String> = base["a"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["x", "y", "z"]);
    }

    #[test]
    fn unknown_keys_are_all_named_in_file_order() {
        let file = json!({
            "listen": {"port": 1, "bogus": 2},
            "nope": 1,
            "providerProfiles": {"any": {"thing": {"goes": 1}}},
            "worker": {"persistence": {"huh": 1}}
        });
        let err = check_keys(file.as_object().unwrap(), Feature::ALL).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown configuration key(s): listen.bogus, nope, worker.persistence.huh"
        );
    }

    #[test]
    fn every_node_hub_key_is_known_and_dropped_keys_are_not() {
        let file = json!({
            "launcher": {"config": "hub", "pidFile": "", "dockerManagementEnv": []},
            "mock": {"listen": "127.0.0.1:0", "scenario": "auto", "slowMs": 1, "toolCommand": ""},
            "worker": {"autoCompactThreshold": 0, "maxAutoCompactions": 5}
        });
        let err = check_keys(file.as_object().unwrap(), Feature::ALL).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown configuration key(s): launcher.config"
        );
    }

    #[test]
    fn prompts_dir_has_its_own_message() {
        let file = json!({"worker": {"promptsDir": "prompts"}, "other": 1});
        let err = check_keys(file.as_object().unwrap(), Feature::ALL).unwrap_err();
        assert!(matches!(err, ConfigError::RemovedKey { .. }));
        assert!(err
            .to_string()
            .contains("worker.promptsDir is no longer supported"));
    }

    #[test]
    fn unbuilt_keys_are_refused_and_marked() {
        let file = json!({
            "toolRequests": {"port": 9000},
            "subagents": 5,
            "limits": {},
            "worker": {"threads": 2, "stopTimeoutMs": 1}
        });
        let map = file.as_object().unwrap();
        let err = check_keys(map, &[Feature::Core]).unwrap_err();
        let ConfigError::UnknownKeys { keys } = &err else {
            panic!("unexpected error {err:?}");
        };
        assert_eq!(keys[0].unbuilt, Some(Feature::ToolRequests));
        assert_eq!(keys[1].unbuilt, Some(Feature::Subagents));
        assert_eq!(
            err.to_string(),
            "unknown configuration key(s): toolRequests.port (not supported by this build yet), \
             subagents (not supported by this build yet), \
             worker.stopTimeoutMs (not supported by this build yet)"
        );
        assert!(check_keys(map, Feature::ALL).is_ok());
    }

    #[test]
    fn prune_keeps_only_built_keys() {
        let mut value = defaults();
        prune(value.as_object_mut().unwrap(), "", &[Feature::Core]);
        let mut found = Vec::new();
        leaves(&value, "", &mut found);
        let core: Vec<String> = KEYS
            .iter()
            .filter(|(_, f)| *f == Feature::Core)
            .map(|(key, _)| key.to_string())
            .collect();
        assert_eq!(found, core);
        assert!(value.get("limits").is_none());
        assert!(value.get("toolRequests").is_none());
    }
}
