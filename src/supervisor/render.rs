//! The worker configuration file, `<session dir>/config/config.yaml`: its
//! endpoints, the first render of the whole document, and what the session
//! spec takes from it.
//!
//! The first start of a session renders the whole document from the hub
//! configuration and the session spec and writes it as JSON (valid YAML).
//! Later starts edit only the hub-owned fields of the file's text and keep
//! every operator edit, comments and layout included (`refresh`). Secrets
//! in provider profiles (`${DEEPSEEK_API_KEY}`) are copied literally, never
//! expanded, and no error message repeats the file's content.
//!
//! Pure: no disk, no clock. The supervisor reads and writes the file.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Component, Path, PathBuf};

use serde_json::{json, Map, Value};

use crate::config::Config;
use crate::session::MODALITY_ASSIST_ENTRY;
use crate::wire::http::url::percent_encode;
use crate::wire::yaml_edit::Refusal;

/// The three WebSocket URLs a worker dials, each carrying the session
/// token in its query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    /// `client.endpoint`: the event and input socket.
    pub events: String,
    /// `security.confirmation.endpoint`: one socket per confirmation.
    pub confirm: String,
    /// `hub_remote_call.endpoint`: the remote tools base URL on the tools
    /// listener; the worker appends `/<route>` to its path.
    pub tools: String,
}

/// Builds the endpoints of `session`:
/// `ws://<host>:<main_port>/agent/<id>/events?token=<token>`, the same with
/// `/confirm`, and `ws://<host>:<tools_port>/agent/<id>/tools?token=<token>`.
/// The id and token are percent-encoded; an IPv6 host is bracketed. (The
/// hub itself builds them with [`session_endpoints`].)
#[cfg(test)]
pub fn endpoints(
    host: &str,
    main_port: u16,
    tools_port: u16,
    session: &str,
    token: &str,
) -> Endpoints {
    let host = url_host(host);
    let main = format!("ws://{host}:{main_port}");
    let tools = format!("ws://{host}:{tools_port}");
    Endpoints {
        events: channel_url(&main, session, "events", token),
        confirm: channel_url(&main, session, "confirm", token),
        tools: channel_url(&tools, session, "tools", token),
    }
}

/// `<origin>/agent/<id>/<route>?token=<token>`, id and token
/// percent-encoded. `origin` has no trailing `/`.
fn channel_url(origin: &str, session: &str, route: &str, token: &str) -> String {
    format!(
        "{origin}/agent/{}/{route}?token={}",
        percent_encode(session),
        percent_encode(token)
    )
}

/// The endpoints a session's worker is told to dial. Each channel uses its
/// `endpoints.*` origin when one is configured (a proxy in front of the
/// hub, `wss://` included: the origin and path prefix replace the hub's
/// own, the route and token are appended), else the hub's listener: the
/// main one for events and confirmations, the tools listener for tools,
/// at `worker.connectHost` or the bound address ([`connect_host`]).
pub fn session_endpoints(
    config: &Config,
    main: SocketAddr,
    tools: SocketAddr,
    session: &str,
    token: &str,
) -> Endpoints {
    let own = |addr: SocketAddr| {
        let host = connect_host(&config.worker.connect_host, addr.ip());
        format!("ws://{}:{}", url_host(&host), addr.port())
    };
    let origin = |configured: &str, addr: SocketAddr| {
        if configured.is_empty() {
            own(addr)
        } else {
            configured.to_owned()
        }
    };
    let advertised = &config.endpoints;
    Endpoints {
        events: channel_url(&origin(&advertised.events, main), session, "events", token),
        confirm: channel_url(
            &origin(&advertised.confirm, main),
            session,
            "confirm",
            token,
        ),
        tools: channel_url(&origin(&advertised.tools, tools), session, "tools", token),
    }
}

/// A host as it appears in a URL authority: IPv6 literals in brackets.
fn url_host(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

/// The host workers dial: `worker.connectHost` when set, else the address
/// the listener is bound to, with the unspecified addresses (`0.0.0.0`,
/// `::`) mapped to `127.0.0.1`. IPv6 addresses come back unbracketed;
/// [`endpoints`] adds the brackets.
pub fn connect_host(config_connect_host: &str, bound: IpAddr) -> String {
    if !config_connect_host.is_empty() {
        config_connect_host.to_owned()
    } else if bound.is_unspecified() {
        "127.0.0.1".to_owned()
    } else {
        bound.to_string()
    }
}

/// Why a worker configuration cannot be prepared. No variant carries any
/// of the file's text, since it may hold credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenderError {
    /// The YAML editor left the file unchanged (an operator's edit it cannot
    /// follow or edit safely, or a file that is not one YAML mapping).
    Edit(Refusal),
    /// A mapping the hub must write into holds something else. `key` is the
    /// dotted path, `(top level)` for the document itself.
    NotAnObject { key: String, found: &'static str },
    /// `persistence.state` or `persistence.memory` is empty, absolute, not
    /// a string, or contains a `..` segment.
    BadRelativePath { key: &'static str },
}

impl fmt::Display for RenderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RenderError::Edit(refusal) => {
                write!(f, "the worker configuration was left unchanged: {refusal}")
            }
            RenderError::NotAnObject { key, found } => write!(
                f,
                "worker configuration key {key} must be a mapping, found {found}"
            ),
            RenderError::BadRelativePath { key } => write!(
                f,
                "worker configuration key {key} must be a nonempty relative path without '..'"
            ),
        }
    }
}

impl std::error::Error for RenderError {}

/// The first-time worker document for a session. `config` gives the
/// defaults and the provider profiles; `spec` (normalized, see
/// `session::normalize_spec`) overrides model, exchanges, automatic
/// compaction, event capacity, prompt file, environment, persistence
/// switches and restore, and names the modality assistant, whose profile
/// is copied unchanged (the spec's `model` is the driver's only) into the
/// `modality_assist` providers entry.
pub fn render(config: &Config, spec: &Value, session_dir: &Path, endpoints: &Endpoints) -> Value {
    let w = &config.worker;
    let provider = spec_str(spec, "provider")
        .map(str::to_owned)
        .unwrap_or_else(|| config.default_provider());
    let mut profile = match config.provider_profiles.get(&provider) {
        Some(Value::Object(map)) => map.clone(),
        _ => Map::new(),
    };
    if let Some(model) = spec_str(spec, "model").filter(|m| !m.is_empty()) {
        profile.insert("model".into(), Value::String(model.to_owned()));
    }
    let mut providers = Map::new();
    providers.insert(provider.clone(), Value::Object(profile));
    let assist = spec_str(spec, "modalityAssistProvider")
        .and_then(|name| config.provider_profiles.get(name))
        .filter(|_| provider != MODALITY_ASSIST_ENTRY);
    if let Some(assist) = assist {
        providers.insert(MODALITY_ASSIST_ENTRY.into(), assist.clone());
    }

    let max_exchanges = spec_u64(spec, "maxExchanges").unwrap_or(w.max_exchanges);
    let prompt = spec_str(spec, "systemPromptFile").unwrap_or(&w.system_prompt_file);
    let workspace = spec_str(spec, "workspace").unwrap_or(&w.environment.workspace);
    let platform = spec_str(spec, "platform").unwrap_or(&w.environment.platform);
    let software = match spec.get("software") {
        Some(Value::Array(items)) => Value::Array(items.clone()),
        _ => json!(w.environment.software),
    };
    let persistence = spec.get("persistence");
    let enabled = persistence
        .and_then(|p| p.get("enabled"))
        .and_then(Value::as_bool)
        .unwrap_or(w.persistence.enabled);
    let readable = persistence
        .and_then(|p| p.get("readable"))
        .and_then(Value::as_bool)
        .unwrap_or(w.persistence.readable);
    let restore = spec_str(spec, "restore").unwrap_or("if_present");

    let mut doc = json!({
        "plugins": {
            "providers": {"directories": []},
            "extensions": {
                "tools": {"directories": [], "enable": []},
                "loop_hooks": {"directories": [], "enable": []},
            },
        },
        "providers": providers,
        "driver_model": provider,
    });
    let map = doc.as_object_mut().expect("a JSON object literal");
    if assist.is_some() {
        map.insert("modality_assist_model".into(), json!(MODALITY_ASSIST_ENTRY));
    }
    map.insert(
        "client".into(),
        json!({
            "endpoint": endpoints.events,
            "payload_capacity": w.payload_capacity,
            "signal_capacity": w.signal_capacity,
            "transport": {
                "write_capacity": w.write_capacity,
                "initial_backoff_ms": w.initial_backoff_ms,
                "max_backoff_ms": w.max_backoff_ms,
                "idle_timeout_seconds": w.idle_timeout_seconds,
            },
        }),
    );
    map.insert(
        "security".into(),
        json!({
            "confirmation": {
                "endpoint": endpoints.confirm,
                "timeout_ms": w.confirmation_timeout_ms,
            },
        }),
    );
    if w.hub_remote_call {
        map.insert(
            "hub_remote_call".into(),
            json!({
                "endpoint": endpoints.tools,
                "timeout_ms": config.tool_requests.timeout_ms,
            }),
        );
    }
    map.insert(
        "worker".into(),
        json!({
            "max_exchanges": max_exchanges,
            "auto_compact_threshold": spec_u64(spec, "autoCompactThreshold")
                .unwrap_or(w.auto_compact_threshold),
            "max_auto_compactions": spec_u64(spec, "maxAutoCompactions")
                .unwrap_or(w.max_auto_compactions),
            "event_capacity": spec_u64(spec, "eventCapacity").unwrap_or(w.event_capacity),
            "system_prompt_file": prompt,
            "environment": {
                "workspace": workspace,
                "platform": platform,
                "software": software,
            },
        }),
    );
    map.insert(
        "persistence".into(),
        json!({
            "enabled": enabled,
            "directory": path_string(session_dir),
            "format": "json",
            "readable": readable,
            "state": "state",
            "memory": "memory",
            "restore": restore,
            "memory_retention": {"max_archives": w.memory_retention.max_archives},
            "save": {
                "on_step_finished": true,
                "on_run_finished": true,
                "on_shutdown": true,
            },
        }),
    );
    doc
}

/// Points the offline model provider's profile at the running provider:
/// when the document's `driver_model` is `profile` (`mock.profile`), its
/// `providers.<profile>.endpoint.base_url` becomes `base_url`, creating
/// missing mappings. Applied after [`render`] on a first start; later
/// starts edit the file's text instead (`refresh::refresh`), so the URL
/// follows the provider's port across hub restarts. Returns whether the
/// document was changed.
pub fn point_mock_profile(
    doc: &mut Value,
    profile: &str,
    base_url: &str,
) -> Result<bool, RenderError> {
    let Value::Object(root) = doc else {
        return Err(RenderError::NotAnObject {
            key: "(top level)".into(),
            found: type_name(doc),
        });
    };
    if root.get("driver_model").and_then(Value::as_str) != Some(profile) {
        return Ok(false);
    }
    mapping(root, &["providers", profile, "endpoint"])?.insert("base_url".into(), json!(base_url));
    Ok(true)
}

/// The mapping at `path` under `root`, created (empty) where it is missing
/// or `null`; an error where something else is in the way.
fn mapping<'a>(
    root: &'a mut Map<String, Value>,
    path: &[&str],
) -> Result<&'a mut Map<String, Value>, RenderError> {
    let mut map = root;
    for (depth, key) in path.iter().enumerate() {
        let slot = map.entry(*key).or_insert(Value::Null);
        if slot.is_null() {
            *slot = Value::Object(Map::new());
        }
        map = match slot {
            Value::Object(inner) => inner,
            other => {
                return Err(RenderError::NotAnObject {
                    key: path[..=depth].join("."),
                    found: type_name(other),
                })
            }
        };
    }
    Ok(map)
}

/// The spec fields the worker document can change, refreshed from `doc`:
/// provider (`driver_model`), model (`providers[driver_model].model`),
/// `maxExchanges`, `autoCompactThreshold`, `maxAutoCompactions`,
/// `eventCapacity`, `systemPromptFile`, workspace, platform, software,
/// `persistence.{enabled,readable}` and `restore`. A field the document
/// lacks, or holds with a value the spec rules would refuse, keeps the
/// spec's value. `modalityAssistProvider`
/// becomes `null` when the document has no `modality_assist_model`; one
/// naming a providers entry keeps the spec's profile name, or takes the
/// entry's name when the spec had none (an operator's edit).
pub fn spec_from_document(spec: &Value, doc: &Value) -> Value {
    let mut out = match spec {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    let string = |path: &[&str]| lookup(doc, path).and_then(Value::as_str).map(Value::from);
    let mut set = |key: &str, value: Option<Value>| {
        if let Some(value) = value {
            out.insert(key.to_owned(), value);
        }
    };
    let driver = lookup(doc, &["driver_model"]).and_then(Value::as_str);
    set("provider", driver.map(Value::from));
    set(
        "model",
        driver.and_then(|d| string(&["providers", d, "model"])),
    );
    set(
        "maxExchanges",
        lookup(doc, &["worker", "max_exchanges"])
            .and_then(Value::as_u64)
            .map(Value::from),
    );
    let bounded = |path: &[&str], min: u64, max: u64| {
        lookup(doc, path)
            .and_then(Value::as_u64)
            .filter(|n| (min..=max).contains(n))
            .map(Value::from)
    };
    const I32_MAX: u64 = 2_147_483_647;
    set(
        "autoCompactThreshold",
        bounded(&["worker", "auto_compact_threshold"], 0, I32_MAX),
    );
    set(
        "maxAutoCompactions",
        bounded(&["worker", "max_auto_compactions"], 1, I32_MAX),
    );
    set(
        "eventCapacity",
        bounded(&["worker", "event_capacity"], 1, 9_007_199_254_740_991),
    );
    let assist = match lookup(doc, &["modality_assist_model"]) {
        None => Some(Value::Null),
        Some(Value::String(entry)) if string(&["providers", entry, "model"]).is_some() => {
            match spec.get("modalityAssistProvider") {
                Some(Value::String(_)) => None,
                _ => Some(Value::from(entry.as_str())),
            }
        }
        Some(_) => None,
    };
    set("modalityAssistProvider", assist);
    set(
        "systemPromptFile",
        string(&["worker", "system_prompt_file"]),
    );
    set("workspace", string(&["worker", "environment", "workspace"]));
    set("platform", string(&["worker", "environment", "platform"]));
    set(
        "software",
        lookup(doc, &["worker", "environment", "software"])
            .and_then(Value::as_array)
            .filter(|items| items.iter().all(Value::is_string))
            .map(|items| Value::Array(items.clone())),
    );
    set("restore", string(&["persistence", "restore"]));

    let mut persistence = match out.get("persistence") {
        Some(Value::Object(map)) => map.clone(),
        _ => Map::new(),
    };
    for key in ["enabled", "readable"] {
        if let Some(value) = lookup(doc, &["persistence", key]).filter(|v| v.is_boolean()) {
            persistence.insert(key.into(), value.clone());
        }
    }
    out.insert("persistence".into(), Value::Object(persistence));
    Value::Object(out)
}

/// Where the worker keeps `state.json`:
/// `<persistence.directory>/<persistence.state>` (`state` when unset).
/// `None` unless the directory is an absolute path and the state entry a
/// plain relative one.
pub fn state_dir(doc: &Value) -> Option<PathBuf> {
    let directory = Path::new(lookup(doc, &["persistence", "directory"])?.as_str()?);
    if !directory.is_absolute() {
        return None;
    }
    let state = match lookup(doc, &["persistence", "state"]) {
        None => PathBuf::from("state"),
        Some(value) => relative_path(value.as_str()?)?,
    };
    Some(directory.join(state))
}

/// `text` as a path when it is nonempty, relative and has no `..`.
pub(crate) fn relative_path(text: &str) -> Option<PathBuf> {
    let path = PathBuf::from(text);
    let plain = path
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    (!text.is_empty() && plain).then_some(path)
}

/// The value at `path`; `null` counts as absent.
fn lookup<'a>(root: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut value = root;
    for key in path {
        value = value.get(key)?;
    }
    (!value.is_null()).then_some(value)
}

fn spec_str<'a>(spec: &'a Value, key: &str) -> Option<&'a str> {
    spec.get(key).and_then(Value::as_str)
}

fn spec_u64(spec: &Value, key: &str) -> Option<u64> {
    spec.get(key).and_then(Value::as_u64)
}

pub(super) fn path_string(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "a mapping",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_config;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn eps() -> Endpoints {
        endpoints("127.0.0.1", 8800, 8801, "demo", "tok")
    }

    fn spec() -> Value {
        json!({
            "provider": "deepseek", "model": "deepseek-pro", "threads": 2,
            "maxExchanges": 7, "autoCompactThreshold": 150_000, "maxAutoCompactions": 3,
            "eventCapacity": 21, "modalityAssistProvider": null,
            "systemPromptFile": "prompts/other.yaml", "workspace": "/srv/ws",
            "platform": "linux", "software": ["git", "cargo"],
            "persistence": {"enabled": false, "readable": true},
            "restore": "never", "env": {}, "extraArgs": [],
        })
    }

    const SESSION: &str = "/data/sessions/demo";

    #[test]
    fn endpoint_urls() {
        let e = endpoints("127.0.0.1", 8800, 8801, "demo", "tok");
        assert_eq!(e.events, "ws://127.0.0.1:8800/agent/demo/events?token=tok");
        assert_eq!(
            e.confirm,
            "ws://127.0.0.1:8800/agent/demo/confirm?token=tok"
        );
        assert_eq!(e.tools, "ws://127.0.0.1:8801/agent/demo/tools?token=tok");

        let e = endpoints("::1", 1, 2, "a_b-C", "x");
        assert_eq!(e.events, "ws://[::1]:1/agent/a_b-C/events?token=x");
        assert_eq!(e.tools, "ws://[::1]:2/agent/a_b-C/tools?token=x");
        let e = endpoints("[::1]", 1, 2, "s", "x");
        assert_eq!(e.confirm, "ws://[::1]:1/agent/s/confirm?token=x");

        let e = endpoints("host.docker.internal", 8800, 8801, "s", "a b&c=d/e+f%~.");
        assert_eq!(
            e.events,
            "ws://host.docker.internal:8800/agent/s/events?token=a%20b%26c%3Dd%2Fe%2Bf%25~."
        );
    }

    #[test]
    fn connect_host_matrix() {
        let v4 = |a, b, c, d| IpAddr::V4(Ipv4Addr::new(a, b, c, d));
        assert_eq!(connect_host("", v4(0, 0, 0, 0)), "127.0.0.1");
        assert_eq!(
            connect_host("", IpAddr::V6(Ipv6Addr::UNSPECIFIED)),
            "127.0.0.1"
        );
        assert_eq!(connect_host("", v4(127, 0, 0, 1)), "127.0.0.1");
        assert_eq!(connect_host("", v4(10, 1, 2, 3)), "10.1.2.3");
        assert_eq!(connect_host("", IpAddr::V6(Ipv6Addr::LOCALHOST)), "::1");
        assert_eq!(
            connect_host("host.docker.internal", v4(0, 0, 0, 0)),
            "host.docker.internal"
        );
        assert_eq!(connect_host("worker-gw", v4(127, 0, 0, 1)), "worker-gw");
        // The IPv6 answer is bracketed only in the URL.
        let host = connect_host("", IpAddr::V6(Ipv6Addr::LOCALHOST));
        assert!(endpoints(&host, 1, 2, "s", "t")
            .events
            .starts_with("ws://[::1]:1/"));
    }

    #[test]
    fn render_has_every_section_with_spec_overrides() {
        let c = test_config(
            r#"{"worker": {"hubRemoteCall": true, "eventCapacity": 33,
            "payloadCapacity": 5, "signalCapacity": 6, "writeCapacity": 7,
            "initialBackoffMs": 11, "maxBackoffMs": 12, "idleTimeoutSeconds": 13,
            "confirmationTimeoutMs": 44444, "memoryRetention": {"maxArchives": 9}},
            "toolRequests": {"timeoutMs": 5555}}"#,
        );
        let doc = render(&c, &spec(), Path::new(SESSION), &eps());
        let keys: Vec<&str> = doc
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "plugins",
                "providers",
                "driver_model",
                "client",
                "security",
                "hub_remote_call",
                "worker",
                "persistence"
            ]
        );
        assert_eq!(
            doc["plugins"],
            json!({"providers": {"directories": []}, "extensions": {
                "tools": {"directories": [], "enable": []},
                "loop_hooks": {"directories": [], "enable": []}}})
        );
        // Only the chosen profile, deep-copied, model overridden, the
        // secret reference copied literally.
        let providers = doc["providers"].as_object().unwrap();
        assert_eq!(providers.len(), 1);
        let mut expected = c.provider_profiles["deepseek"].clone();
        expected["model"] = json!("deepseek-pro");
        assert_eq!(doc["providers"]["deepseek"], expected);
        assert_eq!(
            doc["providers"]["deepseek"]["endpoint"]["auth"]["api_key"],
            "${DEEPSEEK_API_KEY}"
        );
        assert_eq!(doc["driver_model"], "deepseek");
        assert_eq!(
            doc["client"],
            json!({"endpoint": eps().events, "payload_capacity": 5, "signal_capacity": 6,
                   "transport": {"write_capacity": 7, "initial_backoff_ms": 11,
                                 "max_backoff_ms": 12, "idle_timeout_seconds": 13}})
        );
        assert_eq!(
            doc["security"],
            json!({"confirmation": {"endpoint": eps().confirm, "timeout_ms": 44444}})
        );
        assert_eq!(
            doc["hub_remote_call"],
            json!({"endpoint": eps().tools, "timeout_ms": 5555})
        );
        assert_eq!(
            doc["worker"],
            json!({"max_exchanges": 7, "auto_compact_threshold": 150_000,
                   "max_auto_compactions": 3, "event_capacity": 21,
                   "system_prompt_file": "prompts/other.yaml",
                   "environment": {"workspace": "/srv/ws", "platform": "linux",
                                   "software": ["git", "cargo"]}})
        );
        assert_eq!(
            doc["persistence"],
            json!({"enabled": false, "directory": SESSION, "format": "json",
                   "readable": true, "state": "state", "memory": "memory",
                   "restore": "never", "memory_retention": {"max_archives": 9},
                   "save": {"on_step_finished": true, "on_run_finished": true,
                            "on_shutdown": true}})
        );
        assert_eq!(state_dir(&doc).unwrap(), Path::new(SESSION).join("state"));
        // The configuration's profile itself is untouched.
        assert_eq!(c.provider_profiles["deepseek"]["model"], "deepseek-flash");
    }

    #[test]
    fn render_keeps_the_profile_model_without_a_spec_model() {
        let c = test_config(r#"{"worker": {"hubRemoteCall": false}}"#);
        let mut s = spec();
        s["model"] = json!("");
        s["provider"] = json!("mock");
        let doc = render(&c, &s, Path::new(SESSION), &eps());
        assert_eq!(
            doc["providers"],
            json!({"mock": c.provider_profiles["mock"]})
        );
        assert_eq!(doc["driver_model"], "mock");
        assert!(doc.get("hub_remote_call").is_none());
    }

    #[test]
    fn render_falls_back_to_configuration_defaults() {
        let c = test_config(
            r#"{"worker": {"maxExchanges": 99, "autoCompactThreshold": 64000,
                "maxAutoCompactions": 2, "eventCapacity": 77, "environment": {"platform": "p"}}}"#,
        );
        let doc = render(&c, &json!({}), Path::new(SESSION), &eps());
        // The first profile, as in the Node hub.
        assert_eq!(doc["driver_model"], "deepseek");
        assert_eq!(
            doc["worker"],
            json!({"max_exchanges": 99, "auto_compact_threshold": 64000,
                   "max_auto_compactions": 2, "event_capacity": 77,
                   "system_prompt_file": "prompts/coding_agent.yaml",
                   "environment": {"workspace": "", "platform": "p", "software": []}})
        );
        assert_eq!(doc["persistence"]["restore"], "if_present");
        // Under the built-in launcher a spec without a provider gets the
        // mock profile.
        let c = test_config(r#"{"launcher": {"kind": "built-in"}}"#);
        let doc = render(&c, &json!({}), Path::new(SESSION), &eps());
        assert_eq!(doc["driver_model"], "mock");
        assert_eq!(doc["worker"]["auto_compact_threshold"], 0);
        assert_eq!(doc["worker"]["max_auto_compactions"], 5);
    }

    #[test]
    fn a_modality_assistant_is_a_separate_copy_of_its_profile() {
        let c = test_config(
            r#"{"providerProfiles": {"vision": {"plugin": "openai", "model": "v-1"}}}"#,
        );
        let mut s = spec();
        s["modalityAssistProvider"] = json!("deepseek");
        let doc = render(&c, &s, Path::new(SESSION), &eps());
        let keys: Vec<&str> = doc
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .take(4)
            .collect();
        assert_eq!(
            keys,
            [
                "plugins",
                "providers",
                "driver_model",
                "modality_assist_model"
            ]
        );
        assert_eq!(doc["modality_assist_model"], "modality_assist");
        // The driver has the spec's model; the assistant keeps the profile's.
        assert_eq!(doc["providers"]["deepseek"]["model"], "deepseek-pro");
        assert_eq!(
            doc["providers"]["modality_assist"],
            c.provider_profiles["deepseek"]
        );
        // Another profile as the assistant of a mock driver.
        s["provider"] = json!("mock");
        s["modalityAssistProvider"] = json!("vision");
        let doc = render(&c, &s, Path::new(SESSION), &eps());
        assert_eq!(doc["driver_model"], "mock");
        assert_eq!(
            doc["providers"]["modality_assist"],
            json!({"plugin": "openai", "model": "v-1"})
        );
        // None named: no entry, no selector.
        s["modalityAssistProvider"] = Value::Null;
        let doc = render(&c, &s, Path::new(SESSION), &eps());
        assert!(doc.get("modality_assist_model").is_none());
        assert_eq!(doc["providers"].as_object().unwrap().len(), 1);
    }

    #[test]
    fn advertised_origins_replace_the_hub_address_per_channel() {
        let main: SocketAddr = "0.0.0.0:8800".parse().unwrap();
        let tools: SocketAddr = "127.0.0.1:8801".parse().unwrap();
        let own = test_config("{}");
        assert_eq!(
            session_endpoints(&own, main, tools, "demo", "t k"),
            endpoints("127.0.0.1", 8800, 8801, "demo", "t k")
        );
        let c = test_config(
            r#"{"worker": {"connectHost": "gw"},
                "endpoints": {"events": "wss://Proxy.example/hub/", "tools": "ws://[fd00::1]:9443"}}"#,
        );
        let e = session_endpoints(&c, main, tools, "demo", "t k");
        assert_eq!(
            e.events,
            "wss://Proxy.example/hub/agent/demo/events?token=t%20k"
        );
        assert_eq!(e.confirm, "ws://gw:8800/agent/demo/confirm?token=t%20k");
        assert_eq!(e.tools, "ws://[fd00::1]:9443/agent/demo/tools?token=t%20k");
    }

    #[test]
    fn the_mock_profile_points_at_the_live_provider() {
        let c = test_config("{}");
        let mut s = spec();
        s["provider"] = json!("mock");
        s["model"] = json!("mock-echo");
        let mut doc = render(&c, &s, Path::new(SESSION), &eps());
        assert_eq!(
            doc["providers"]["mock"]["endpoint"]["base_url"],
            "http://127.0.0.1:0"
        );
        let url = "http://127.0.0.1:40123";
        assert_eq!(point_mock_profile(&mut doc, "mock", url), Ok(true));
        let mut expected = c.provider_profiles["mock"].clone();
        expected["model"] = json!("mock-echo");
        expected["endpoint"]["base_url"] = json!(url);
        assert_eq!(doc["providers"], json!({"mock": expected}));

        // missing mappings are created
        let mut bare = json!({"driver_model": "mock"});
        assert_eq!(point_mock_profile(&mut bare, "mock", url), Ok(true));
        assert_eq!(
            bare,
            json!({"driver_model": "mock", "providers": {"mock": {"endpoint": {"base_url": url}}}})
        );
    }

    #[test]
    fn other_profiles_are_never_pointed_at_the_provider() {
        let c = test_config("{}");
        let mut doc = render(&c, &spec(), Path::new(SESSION), &eps());
        let before = doc.clone();
        assert_eq!(doc["driver_model"], "deepseek");
        assert_eq!(
            point_mock_profile(&mut doc, "mock", "http://127.0.0.1:1"),
            Ok(false)
        );
        assert_eq!(doc, before);
        // a profile renamed by mock.profile is the one pointed
        let mut mine =
            json!({"driver_model": "offline", "providers": {"offline": {"model": "mock-text"}}});
        assert_eq!(
            point_mock_profile(&mut mine, "offline", "http://h:1"),
            Ok(true)
        );
        assert_eq!(
            mine["providers"]["offline"]["endpoint"]["base_url"],
            "http://h:1"
        );
        // something else in the way is an error naming the key only
        let mut odd =
            json!({"driver_model": "mock", "providers": {"mock": {"endpoint": "sk-secret"}}});
        let err = point_mock_profile(&mut odd, "mock", "http://h:1").unwrap_err();
        assert_eq!(
            err,
            RenderError::NotAnObject {
                key: "providers.mock.endpoint".into(),
                found: "a string"
            }
        );
        assert!(!err.to_string().contains("sk-secret"));
        assert!(point_mock_profile(&mut json!([1]), "mock", "u").is_err());
    }

    #[test]
    fn spec_follows_the_document() {
        let c = test_config("{}");
        let base = crate::session::normalize_spec(None, &crate::session::SpecDefaults::for_tests())
            .unwrap();
        let doc = render(&c, &spec(), Path::new(SESSION), &eps());
        let updated = spec_from_document(&base, &doc);
        let mut expected = base.clone();
        for key in [
            "provider",
            "model",
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
        ] {
            expected[key] = spec()[key].clone();
        }
        assert_eq!(updated, expected);

        // Operator edits win; a missing or mistyped field keeps the spec.
        let doc = json!({"driver_model": "mock", "providers": {"mock": {"model": "mock-slow"}},
                         "worker": {"max_exchanges": "many"},
                         "persistence": {"readable": true}});
        let updated = spec_from_document(&base, &doc);
        assert_eq!(updated["provider"], "mock");
        assert_eq!(updated["model"], "mock-slow");
        assert_eq!(updated["maxExchanges"], 512);
        assert_eq!(
            updated["persistence"],
            json!({"enabled": true, "readable": true})
        );
        assert_eq!(updated["threads"], base["threads"]);
        // Values the spec rules refuse are not taken; an assistant the
        // document no longer has is gone.
        let doc = json!({"worker": {"auto_compact_threshold": 2_147_483_648_u64,
                                    "max_auto_compactions": 0, "event_capacity": 0}});
        let mut with_assist = base.clone();
        with_assist["modalityAssistProvider"] = json!("deepseek");
        let updated = spec_from_document(&with_assist, &doc);
        for key in [
            "autoCompactThreshold",
            "maxAutoCompactions",
            "eventCapacity",
        ] {
            assert_eq!(updated[key], base[key], "{key}");
        }
        assert_eq!(updated["modalityAssistProvider"], Value::Null);
        // One the document has keeps the spec's profile name, or takes the
        // entry's name when the spec had none.
        let doc = json!({"modality_assist_model": "vision",
                         "providers": {"vision": {"model": "v"}}});
        assert_eq!(
            spec_from_document(&with_assist, &doc)["modalityAssistProvider"],
            "deepseek"
        );
        assert_eq!(
            spec_from_document(&base, &doc)["modalityAssistProvider"],
            "vision"
        );
    }

    #[test]
    fn state_dir_needs_an_absolute_root_and_a_plain_state() {
        let dir = |p: Value| state_dir(&json!({ "persistence": p }));
        assert_eq!(
            dir(json!({"directory": "/d"})).unwrap(),
            Path::new("/d/state")
        );
        assert_eq!(
            dir(json!({"directory": "/d", "state": "a/b"})).unwrap(),
            Path::new("/d/a/b")
        );
        assert_eq!(dir(json!({"directory": "rel"})), None);
        assert_eq!(dir(json!({"directory": "/d", "state": "../x"})), None);
        assert_eq!(dir(json!({"state": "s"})), None);
        assert_eq!(state_dir(&json!({})), None);
    }
}
