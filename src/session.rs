//! Sessions: id rules, the launch spec (normalized and validated, pure),
//! and the in-memory registry the HTTP and panel layers read. `describe`
//! produces the panel protocol's session description.
//!
//! The registry is plain data behind the hub's mutex; nothing here does I/O.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{json, Map, Value};

/// Longest session id, in bytes (ids are ASCII).
pub const MAX_SESSION_ID: usize = 128;

/// Prefix the hub reserves for headless subagent children.
pub const RESERVED_PREFIX: &str = "subagent-";

/// Whether `id` is 1-128 characters of `[A-Za-z0-9_-]`.
pub fn is_valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_SESSION_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Checks an id a user asks to create: valid and not in the reserved
/// namespace.
pub fn check_new_id(id: &str) -> Result<(), SpecError> {
    if !is_valid_id(id) {
        return Err(SpecError::new(
            "session",
            "session id must be 1-128 characters of [A-Za-z0-9_-]",
        ));
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
    pub threads: u64,
    pub max_exchanges: u64,
    pub system_prompt_file: String,
    pub workspace: String,
    pub platform: String,
    pub software: Vec<String>,
    pub persistence_enabled: bool,
    pub persistence_readable: bool,
}

const SPEC_KEYS: &[&str] = &[
    "provider",
    "model",
    "threads",
    "maxExchanges",
    "autoCompactThreshold",
    "maxAutoCompactions",
    "systemPromptFile",
    "workspace",
    "platform",
    "software",
    "persistence",
    "restore",
    "env",
    "extraArgs",
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
    let auto_compact = opt_int(input, "autoCompactThreshold", 0)?.unwrap_or(0);
    let max_auto = opt_int(input, "maxAutoCompactions", 1)?.unwrap_or(5);
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
    Ok(json!({
        "provider": provider,
        "model": model,
        "threads": threads,
        "maxExchanges": max_exchanges,
        "autoCompactThreshold": auto_compact,
        "maxAutoCompactions": max_auto,
        "systemPromptFile": prompt,
        "workspace": workspace,
        "platform": platform,
        "software": software,
        "persistence": {"enabled": enabled, "readable": readable},
        "restore": restore,
        "env": env,
        "extraArgs": extra_args,
    }))
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

/// What the hub knows about a session's worker identity on its event
/// connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(dead_code)] // Live/Stale come with the event socket (worker-side issue)
pub enum IdentityState {
    Unknown,
    Live,
    Stale,
}

impl IdentityState {
    pub fn as_str(self) -> &'static str {
        match self {
            IdentityState::Unknown => "unknown",
            IdentityState::Live => "live",
            IdentityState::Stale => "stale",
        }
    }
}

/// One session as the hub holds it in memory.
#[derive(Debug, Clone)]
pub struct Session {
    pub id: String,
    pub created_at: String,
    pub spec: Value,
    /// Per-session worker token; only worker routes accept it.
    #[allow(dead_code)] // checked by worker routes (worker-side issue)
    pub token: String,
    #[allow(dead_code)] // fences supervisor actions (supervisor issue)
    pub lifecycle_id: String,
    pub kind: String,
    pub connected: bool,
    pub identity: IdentityState,
    pub worker_id: Option<String>,
    pub identity_since: Option<String>,
    /// Set while a delete is in progress; the session is busy meanwhile.
    pub removing: bool,
}

impl Session {
    pub fn new(
        id: String,
        created_at: String,
        spec: Value,
        token: String,
        lifecycle_id: String,
    ) -> Session {
        Session {
            id,
            created_at,
            spec,
            token,
            lifecycle_id,
            kind: "ordinary".into(),
            connected: false,
            identity: IdentityState::Unknown,
            worker_id: None,
            identity_since: None,
            removing: false,
        }
    }

    /// Why the session cannot be deleted right now, if it cannot.
    pub fn busy_reason(&self) -> Option<&'static str> {
        if self.removing {
            Some("the session is being removed")
        } else if self.connected {
            Some("a worker is connected; stop it first")
        } else {
            None
        }
    }

    /// The panel protocol's session description.
    pub fn describe(&self) -> Value {
        json!({
            "session_id": self.id,
            "kind": self.kind,
            "created_at": self.created_at,
            "spec": self.spec,
            "connected": self.connected,
            "worker_capabilities": Value::Null,
            "identity": {
                "state": self.identity.as_str(),
                "worker_id": self.worker_id,
                "since": self.identity_since,
            },
            "stats": {"events": 0, "gaps": 0, "duplicates": 0, "protocolErrors": 0, "incarnations": 0},
            "last_run_id": Value::Null,
            "last_event_at": Value::Null,
            "last_event": Value::Null,
            "confirmations": [],
            "process": Value::Null,
            "requests": [],
        })
    }
}

/// Every session the hub knows, by id.
#[derive(Debug, Default)]
pub struct Registry {
    sessions: BTreeMap<String, Session>,
}

impl Registry {
    pub fn insert(&mut self, session: Session) {
        self.sessions.insert(session.id.clone(), session);
    }

    pub fn get(&self, id: &str) -> Option<&Session> {
        self.sessions.get(id)
    }

    pub fn get_mut(&mut self, id: &str) -> Option<&mut Session> {
        self.sessions.get_mut(id)
    }

    pub fn remove(&mut self, id: &str) -> Option<Session> {
        self.sessions.remove(id)
    }

    pub fn contains(&self, id: &str) -> bool {
        self.sessions.contains_key(id)
    }

    /// Sessions in creation order (ties broken by id).
    pub fn list(&self) -> Vec<&Session> {
        let mut all: Vec<&Session> = self.sessions.values().collect();
        all.sort_by(|a, b| (&a.created_at, &a.id).cmp(&(&b.created_at, &b.id)));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> SpecDefaults {
        SpecDefaults {
            provider: "mock".into(),
            profiles: vec!["deepseek".into(), "mock".into()],
            threads: 1,
            max_exchanges: 512,
            system_prompt_file: "prompts/coding_agent.yaml".into(),
            workspace: String::new(),
            platform: String::new(),
            software: vec![],
            persistence_enabled: true,
            persistence_readable: false,
        }
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
        assert_eq!(spec.as_object().unwrap().len(), SPEC_KEYS.len());
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
        ] {
            assert!(normalize_spec(Some(&bad), &d).is_err(), "{bad} accepted");
        }
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

    #[test]
    fn description_has_the_seed_shape() {
        let s = Session::new(
            "demo".into(),
            "t".into(),
            json!({}),
            "tok".into(),
            "l".into(),
        );
        let d = s.describe();
        for key in [
            "session_id",
            "created_at",
            "spec",
            "connected",
            "worker_capabilities",
            "identity",
            "stats",
            "last_run_id",
            "last_event_at",
            "last_event",
            "confirmations",
            "process",
            "requests",
            "kind",
        ] {
            assert!(d.get(key).is_some(), "missing {key}");
        }
        assert!(
            d.to_string().find("tok").is_none(),
            "token leaked into description"
        );
    }
}
