//! Session ids and the launch spec: the id grammar, and a create's or
//! start's `spec` normalized against the configuration's defaults and
//! validated field by field. Pure: no I/O, no clock.

use std::fmt;

use serde_json::{json, Map, Value};

pub use crate::wire::ids::is_valid_id;
use crate::wire::ids::ID_GRAMMAR;

/// Prefix the hub reserves for headless subagent children.
pub const RESERVED_PREFIX: &str = "subagent-";

/// Checks an id a user asks to create: valid and not in the reserved
/// namespace.
pub fn check_new_id(id: &str) -> Result<(), SpecError> {
    if !is_valid_id(id) {
        return Err(SpecError::new("session", ID_GRAMMAR));
    }
    if id.starts_with(RESERVED_PREFIX) {
        return Err(SpecError::new(
            "session",
            "the prefix \"subagent-\" is reserved for headless subagents",
        ));
    }
    Ok(())
}

/// A refused session spec: which field and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    pub field: String,
    pub reason: String,
}

impl SpecError {
    fn new(field: impl Into<String>, reason: impl Into<String>) -> SpecError {
        SpecError {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {}: {}", self.field, self.reason)
    }
}

impl std::error::Error for SpecError {}

/// Values a spec inherits when it leaves a field out; taken from the hub
/// configuration.
#[derive(Debug, Clone)]
pub struct SpecDefaults {
    pub provider: String,
    pub profiles: Vec<String>,
    /// `mock.profile`: never a modality assistant.
    pub mock_profile: String,
    pub threads: u64,
    pub max_exchanges: u64,
    pub auto_compact_threshold: u64,
    pub max_auto_compactions: u64,
    pub event_capacity: u64,
    pub system_prompt_file: String,
    pub workspace: String,
    pub platform: String,
    pub software: Vec<String>,
    pub persistence_enabled: bool,
    pub persistence_readable: bool,
}

impl SpecDefaults {
    /// The defaults a hub with configuration `c` gives a spec.
    pub fn from_config(c: &crate::config::Config) -> SpecDefaults {
        SpecDefaults {
            provider: c.default_provider(),
            profiles: c.provider_profiles.keys().cloned().collect(),
            mock_profile: c.mock.profile.clone(),
            threads: c.worker.threads,
            max_exchanges: c.worker.max_exchanges,
            auto_compact_threshold: c.worker.auto_compact_threshold,
            max_auto_compactions: c.worker.max_auto_compactions,
            event_capacity: c.worker.event_capacity,
            system_prompt_file: c.worker.system_prompt_file.clone(),
            workspace: c.worker.environment.workspace.clone(),
            platform: c.worker.environment.platform.clone(),
            software: c.worker.environment.software.clone(),
            persistence_enabled: c.worker.persistence.enabled,
            persistence_readable: c.worker.persistence.readable,
        }
    }
}

const SPEC_KEYS: &[&str] = &[
    "provider",
    "model",
    "threads",
    "maxExchanges",
    "autoCompactThreshold",
    "maxAutoCompactions",
    "eventCapacity",
    "modalityAssistProvider",
    "systemPromptFile",
    "workspace",
    "platform",
    "software",
    "persistence",
    "restore",
    "env",
    "extraArgs",
    "launchConfig",
    "workerConfig",
];

/// Normalizes a session spec: every field present, defaults filled in,
/// every value checked. Unknown fields are refused so a typo is not
/// silently ignored.
pub fn normalize_spec(input: Option<&Value>, d: &SpecDefaults) -> Result<Value, SpecError> {
    let empty = Map::new();
    let input = match input {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(map)) => map,
        Some(_) => return Err(SpecError::new("spec", "must be an object")),
    };
    let unknown: Vec<&str> = input
        .keys()
        .map(String::as_str)
        .filter(|k| !SPEC_KEYS.contains(k))
        .collect();
    if !unknown.is_empty() {
        return Err(SpecError::new(
            "spec",
            format!("unknown field(s): {}", unknown.join(", ")),
        ));
    }
    let provider = opt_string(input, "provider")?.unwrap_or_else(|| d.provider.clone());
    if !d.profiles.contains(&provider) {
        return Err(SpecError::new(
            "provider",
            format!(
                "unknown provider profile {provider:?} (known: {})",
                d.profiles.join(", ")
            ),
        ));
    }
    let model = opt_string(input, "model")?.unwrap_or_default();
    let threads = opt_int(input, "threads", 1)?.unwrap_or(d.threads);
    let max_exchanges = opt_int(input, "maxExchanges", 1)?.unwrap_or(d.max_exchanges);
    let auto_compact =
        opt_int(input, "autoCompactThreshold", 0)?.unwrap_or(d.auto_compact_threshold);
    let max_auto = opt_int(input, "maxAutoCompactions", 1)?.unwrap_or(d.max_auto_compactions);
    let event_capacity = match input.get("eventCapacity") {
        None | Some(Value::Null) => d.event_capacity,
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=SAFE_INTEGER_MAX).contains(n))
            .ok_or_else(|| SpecError::new("eventCapacity", "must be a positive integer"))?,
    };
    let assist = modality_assist(input, &provider, d)?;
    let prompt =
        opt_string(input, "systemPromptFile")?.unwrap_or_else(|| d.system_prompt_file.clone());
    check_prompt_path(&prompt)?;
    let workspace = opt_string(input, "workspace")?.unwrap_or_else(|| d.workspace.clone());
    let platform = opt_string(input, "platform")?.unwrap_or_else(|| d.platform.clone());
    let software = opt_strings(input, "software")?.unwrap_or_else(|| d.software.clone());
    let (enabled, readable) = match input.get("persistence") {
        None | Some(Value::Null) => (d.persistence_enabled, d.persistence_readable),
        Some(Value::Object(p)) => {
            if let Some(k) = p.keys().find(|k| *k != "enabled" && *k != "readable") {
                return Err(SpecError::new(format!("persistence.{k}"), "unknown field"));
            }
            (
                opt_bool(p, "persistence.enabled", "enabled")?.unwrap_or(d.persistence_enabled),
                opt_bool(p, "persistence.readable", "readable")?.unwrap_or(d.persistence_readable),
            )
        }
        Some(_) => return Err(SpecError::new("persistence", "must be an object")),
    };
    let restore = opt_string(input, "restore")?.unwrap_or_else(|| "if_present".into());
    if restore != "if_present" && restore != "never" {
        return Err(SpecError::new(
            "restore",
            "must be \"if_present\" or \"never\"",
        ));
    }
    let env = match input.get("env") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(env)) => {
            for (name, value) in env {
                if !is_env_name(name) {
                    return Err(SpecError::new(
                        "env",
                        format!("{name:?} is not a valid variable name"),
                    ));
                }
                if value.as_str().is_none_or(|v| v.contains('\0')) {
                    return Err(SpecError::new(
                        format!("env.{name}"),
                        "must be a string without NUL",
                    ));
                }
            }
            env.clone()
        }
        Some(_) => return Err(SpecError::new("env", "must be an object of strings")),
    };
    let extra_args = opt_strings(input, "extraArgs")?.unwrap_or_default();
    let selection = library_selection(input)?;
    let mut spec = json!({
        "provider": provider,
        "model": model,
        "threads": threads,
        "maxExchanges": max_exchanges,
        "autoCompactThreshold": auto_compact,
        "maxAutoCompactions": max_auto,
        "eventCapacity": event_capacity,
        "modalityAssistProvider": assist,
        "systemPromptFile": prompt,
        "workspace": workspace,
        "platform": platform,
        "software": software,
        "persistence": {"enabled": enabled, "readable": readable},
        "restore": restore,
        "env": env,
        "extraArgs": extra_args,
    });
    if let (Some((launch, worker)), Value::Object(map)) = (selection, &mut spec) {
        map.insert("launchConfig".into(), Value::String(launch));
        map.insert("workerConfig".into(), Value::String(worker));
    }
    Ok(spec)
}

/// `launchConfig` and `workerConfig`: the configuration-library files a
/// session was created from (its snapshot's sources), both or neither,
/// each an id of the library's form (the same rule as session ids).
fn library_selection(input: &Map<String, Value>) -> Result<Option<(String, String)>, SpecError> {
    let launch = opt_string(input, "launchConfig")?;
    let worker = opt_string(input, "workerConfig")?;
    match (launch, worker) {
        (None, None) => Ok(None),
        (Some(launch), Some(worker)) => {
            for (key, id) in [("launchConfig", &launch), ("workerConfig", &worker)] {
                if !is_valid_id(id) {
                    return Err(SpecError::new(
                        key,
                        "must be a configuration id of 1-128 characters of [A-Za-z0-9_-]",
                    ));
                }
            }
            Ok(Some((launch, worker)))
        }
        _ => Err(SpecError::new(
            "spec",
            "launchConfig and workerConfig select a pair: give both or neither",
        )),
    }
}

/// The largest integer JavaScript holds exactly: the Node hub's ceiling for
/// counts it gives no maximum.
const SAFE_INTEGER_MAX: u64 = 9_007_199_254_740_991;

/// The name of the providers entry a modality assistant gets in the
/// worker configuration.
pub const MODALITY_ASSIST_ENTRY: &str = "modality_assist";

/// `modalityAssistProvider`: the profile the worker's separate assistant
/// (image interpretation) is copied from, or `null` for none. Left out, a
/// session whose provider is `deepseek` (and is not the mock profile) gets
/// the `deepseek` profile, any other provider none, as in the Node hub.
/// An explicit `null` opts out.
fn modality_assist(
    input: &Map<String, Value>,
    provider: &str,
    d: &SpecDefaults,
) -> Result<Value, SpecError> {
    let key = "modalityAssistProvider";
    let assist = match input.get(key) {
        None => {
            let default = provider == "deepseek" && provider != d.mock_profile;
            return Ok(if default {
                Value::from("deepseek")
            } else {
                Value::Null
            });
        }
        Some(Value::Null) => return Ok(Value::Null),
        Some(Value::String(name)) => name,
        Some(_) => return Err(SpecError::new(key, "must be a profile name or null")),
    };
    if !d.profiles.contains(assist) || *assist == d.mock_profile {
        return Err(SpecError::new(
            key,
            format!(
                "must name a provider profile other than the mock profile {:?}, or be null \
                 (known: {})",
                d.mock_profile,
                d.profiles.join(", ")
            ),
        ));
    }
    if provider == MODALITY_ASSIST_ENTRY {
        return Err(SpecError::new(
            key,
            format!(
                "must be null while provider is {MODALITY_ASSIST_ENTRY:?}: the assistant's \
                 providers entry has that name"
            ),
        ));
    }
    Ok(Value::from(assist.as_str()))
}

fn opt_string(map: &Map<String, Value>, key: &str) -> Result<Option<String>, SpecError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.contains('\0') => Ok(Some(s.clone())),
        Some(_) => Err(SpecError::new(key, "must be a string without NUL")),
    }
}

fn opt_bool(map: &Map<String, Value>, field: &str, key: &str) -> Result<Option<bool>, SpecError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(SpecError::new(field, "must be a boolean")),
    }
}

fn opt_int(map: &Map<String, Value>, key: &str, min: u64) -> Result<Option<u64>, SpecError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n >= min && n <= i32::MAX as u64 => Ok(Some(n)),
            _ => Err(SpecError::new(
                key,
                format!("must be an integer from {min} to {}", i32::MAX),
            )),
        },
    }
}

fn opt_strings(map: &Map<String, Value>, key: &str) -> Result<Option<Vec<String>>, SpecError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) if !s.contains('\0') => Ok(s.clone()),
                _ => Err(SpecError::new(key, "must be an array of strings")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(SpecError::new(key, "must be an array of strings")),
    }
}

fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The system prompt path is relative to the worker's installation: no
/// root, no drive letter, no `..` segment in either separator style.
fn check_prompt_path(path: &str) -> Result<(), SpecError> {
    let bytes = path.as_bytes();
    let drive = bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':';
    let bad = path.is_empty()
        || path.starts_with('/')
        || path.starts_with('\\')
        || drive
        || path.split(['/', '\\']).any(|s| s == "..");
    if bad {
        Err(SpecError::new(
            "systemPromptFile",
            "must be a relative path without '..' segments",
        ))
    } else {
        Ok(())
    }
}

#[cfg(test)]
impl SpecDefaults {
    /// Defaults for unit tests: the built-in profiles, one thread.
    pub(crate) fn for_tests() -> SpecDefaults {
        SpecDefaults {
            provider: "mock".into(),
            profiles: vec!["deepseek".into(), "mock".into()],
            mock_profile: "mock".into(),
            threads: 1,
            max_exchanges: 512,
            auto_compact_threshold: 0,
            max_auto_compactions: 5,
            event_capacity: 1024,
            system_prompt_file: "prompts/coding_agent.yaml".into(),
            workspace: String::new(),
            platform: String::new(),
            software: vec![],
            persistence_enabled: true,
            persistence_readable: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> SpecDefaults {
        SpecDefaults::for_tests()
    }

    #[test]
    fn ids_follow_the_grammar() {
        assert!(is_valid_id("demo_1-A"));
        assert!(is_valid_id(&"a".repeat(128)));
        assert!(!is_valid_id(&"a".repeat(129)));
        assert!(!is_valid_id(""));
        assert!(!is_valid_id("a/b"));
        assert!(!is_valid_id("a b"));
        assert!(!is_valid_id("é"));
        assert!(check_new_id("subagent-x").is_err());
        assert!(check_new_id("my-subagent-x").is_ok());
    }

    #[test]
    fn empty_spec_gets_every_default() {
        let spec = normalize_spec(None, &defaults()).unwrap();
        assert_eq!(spec["provider"], "mock");
        assert_eq!(spec["threads"], 1);
        assert_eq!(spec["maxAutoCompactions"], 5);
        assert_eq!(
            spec["persistence"],
            json!({"enabled": true, "readable": false})
        );
        assert_eq!(spec["restore"], "if_present");
        // Every key but the library pair, which only a library session has.
        assert_eq!(spec.as_object().unwrap().len(), SPEC_KEYS.len() - 2);
    }

    #[test]
    fn a_library_pair_is_both_or_neither() {
        let d = defaults();
        let both = json!({"launchConfig": "local", "workerConfig": "default"});
        let spec = normalize_spec(Some(&both), &d).unwrap();
        assert_eq!(spec["launchConfig"], "local");
        assert_eq!(spec["workerConfig"], "default");
        // `null` is absent: two make an ordinary session (docs/configuration.md).
        let nulls = json!({"launchConfig": null, "workerConfig": null});
        let spec = normalize_spec(Some(&nulls), &d).unwrap();
        assert!(spec.get("launchConfig").is_none() && spec.get("workerConfig").is_none());
        for bad in [
            json!({"launchConfig": "local", "workerConfig": null}),
            json!({"launchConfig": "local"}),
            json!({"workerConfig": "default"}),
            json!({"launchConfig": "../x", "workerConfig": "default"}),
            json!({"launchConfig": "local", "workerConfig": 3}),
        ] {
            assert!(normalize_spec(Some(&bad), &d).is_err(), "{bad}");
        }
    }

    #[test]
    fn refuses_bad_specs() {
        let d = defaults();
        for bad in [
            json!("x"),
            json!({"provider": "nope"}),
            json!({"threads": 0}),
            json!({"threads": 1.5}),
            json!({"threads": "2"}),
            json!({"restore": "always"}),
            json!({"env": {"1X": "a"}}),
            json!({"env": {"X": 1}}),
            json!({"extraArgs": [1]}),
            json!({"systemPromptFile": "../x"}),
            json!({"systemPromptFile": "/etc/x"}),
            json!({"systemPromptFile": "C:x"}),
            json!({"systemPromptFile": "a\\..\\b"}),
            json!({"persistence": {"enabled": 1}}),
            json!({"persistence": {"other": true}}),
            json!({"modle": "typo"}),
            json!({"autoCompactThreshold": -1}),
            json!({"autoCompactThreshold": 2_147_483_648_u64}),
            json!({"maxAutoCompactions": 0}),
            json!({"maxAutoCompactions": 2_147_483_648_u64}),
            json!({"eventCapacity": 0}),
            json!({"eventCapacity": 1.5}),
            json!({"eventCapacity": 9_007_199_254_740_992_u64}),
            json!({"modalityAssistProvider": "mock"}),
            json!({"modalityAssistProvider": "nope"}),
            json!({"modalityAssistProvider": 1}),
        ] {
            assert!(normalize_spec(Some(&bad), &d).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn auto_compaction_and_event_capacity_default_from_the_configuration() {
        let mut d = defaults();
        d.auto_compact_threshold = 120_000;
        d.max_auto_compactions = 2;
        d.event_capacity = 64;
        let spec = normalize_spec(None, &d).unwrap();
        assert_eq!(spec["autoCompactThreshold"], 120_000);
        assert_eq!(spec["maxAutoCompactions"], 2);
        assert_eq!(spec["eventCapacity"], 64);
        let given = json!({"autoCompactThreshold": 2_147_483_647_u64, "maxAutoCompactions": 1,
                           "eventCapacity": 9_007_199_254_740_991_u64});
        let spec = normalize_spec(Some(&given), &d).unwrap();
        for key in [
            "autoCompactThreshold",
            "maxAutoCompactions",
            "eventCapacity",
        ] {
            assert_eq!(spec[key], given[key], "{key}");
        }
        let err = normalize_spec(Some(&json!({"eventCapacity": 0})), &d).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid eventCapacity: must be a positive integer"
        );
    }

    #[test]
    fn deepseek_sessions_get_a_modality_assistant_by_default() {
        let d = defaults();
        let assist = |spec: Value| {
            normalize_spec(Some(&spec), &d).map(|s| s["modalityAssistProvider"].clone())
        };
        assert_eq!(assist(json!({"provider": "deepseek"})).unwrap(), "deepseek");
        assert_eq!(assist(json!({"provider": "mock"})).unwrap(), Value::Null);
        assert_eq!(assist(json!({})).unwrap(), Value::Null);
        // An explicit null opts out; another provider opts in by name.
        assert_eq!(
            assist(json!({"provider": "deepseek", "modalityAssistProvider": null})).unwrap(),
            Value::Null
        );
        assert_eq!(
            assist(json!({"provider": "mock", "modalityAssistProvider": "deepseek"})).unwrap(),
            "deepseek"
        );
        // The mock profile is never an assistant, under any name.
        let mut d2 = defaults();
        d2.mock_profile = "deepseek".into();
        let spec = normalize_spec(Some(&json!({"provider": "deepseek"})), &d2).unwrap();
        assert_eq!(spec["modalityAssistProvider"], Value::Null);
        let err = normalize_spec(Some(&json!({"modalityAssistProvider": "mock"})), &d).unwrap_err();
        assert_eq!(err.field, "modalityAssistProvider");
        assert!(err.reason.contains("other than the mock profile"), "{err}");
        // A normalized spec normalizes to itself.
        let once = normalize_spec(Some(&json!({"provider": "deepseek"})), &d).unwrap();
        assert_eq!(normalize_spec(Some(&once), &d).unwrap(), once);
        // A driver named like the assistant's entry cannot have one.
        let mut d3 = defaults();
        d3.profiles.push(MODALITY_ASSIST_ENTRY.into());
        let clash =
            json!({"provider": MODALITY_ASSIST_ENTRY, "modalityAssistProvider": "deepseek"});
        assert!(normalize_spec(Some(&clash), &d3).is_err());
    }

    #[test]
    fn keeps_given_values() {
        let spec = normalize_spec(
            Some(&json!({"provider": "deepseek", "model": "m", "threads": 3, "env": {"A_1": "v"}, "extraArgs": ["--x"]})),
            &defaults(),
        )
        .unwrap();
        assert_eq!(spec["provider"], "deepseek");
        assert_eq!(spec["model"], "m");
        assert_eq!(spec["threads"], 3);
        assert_eq!(spec["env"], json!({"A_1": "v"}));
        assert_eq!(spec["extraArgs"], json!(["--x"]));
    }
}
