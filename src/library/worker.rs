//! Worker files (`configs/worker/<id>.yaml`, a session's
//! `config/config.yaml`): the worker's own YAML startup document. The
//! library checks only what the hub relies on, and leaves everything else
//! (plugins, provider options, unknown keys, comments) for the worker:
//!
//! - one YAML mapping document, read with the hub's bounded reader
//!   (`wire::yaml_edit::read`: at most 100 aliases, no duplicate keys);
//! - `driver_model` names a `providers` entry that is a mapping with a
//!   non-empty string `model`; so does `modality_assist_model` when present;
//! - `client` and `persistence` are mappings; `security`,
//!   `security.confirmation` and `hub_remote_call` are mappings when
//!   present;
//! - `persistence.state` and `persistence.memory` (default `state` and
//!   `memory`) are non-empty relative paths without `..`;
//! - `client.endpoint` (and `security.confirmation.endpoint`,
//!   `hub_remote_call.endpoint` when their section is there) is its hub
//!   placeholder or a `ws://`/`wss://` URL.
//!
//! Pure. No refusal repeats the file's text (it may hold credentials).

use serde_json::Value;

use super::LibraryError;
use crate::supervisor::render::relative_path;
use crate::wire::yaml_edit::read;

/// The placeholders of the hub-owned fields, replaced at every launch.
pub const EVENTS_PLACEHOLDER: &str = "{{hub.events_endpoint}}";
pub const CONFIRM_PLACEHOLDER: &str = "{{hub.confirm_endpoint}}";
pub const TOOLS_PLACEHOLDER: &str = "{{hub.tools_endpoint}}";
pub const DIRECTORY_PLACEHOLDER: &str = "{{session.directory}}";

/// Checks a worker file's text (module documentation).
pub fn check(text: &str) -> Result<(), LibraryError> {
    read_checked(text).map(|_| ())
}

/// Checks a worker file's text and returns its reading.
pub fn read_checked(text: &str) -> Result<Value, LibraryError> {
    let doc = read::read_json(text)
        .map_err(|err| LibraryError::invalid(format!("the worker file {err}")))?;
    let provider = |key: &str| -> Result<(), LibraryError> {
        let name = doc.get(key).and_then(Value::as_str);
        let entry = name.and_then(|n| doc.get("providers")?.as_object()?.get(n));
        let model = entry
            .and_then(Value::as_object)
            .and_then(|e| e.get("model"));
        match model.and_then(Value::as_str) {
            Some(m) if !m.is_empty() => Ok(()),
            _ => Err(LibraryError::invalid(format!(
                "{key} must name a providers entry that has a model"
            ))),
        }
    };
    provider("driver_model")?;
    if doc.get("modality_assist_model").is_some() {
        provider("modality_assist_model")?;
    }
    for key in ["client", "persistence"] {
        if !doc.get(key).is_some_and(Value::is_object) {
            return Err(LibraryError::invalid(format!("{key} must be a mapping")));
        }
    }
    for path in [
        &["security"][..],
        &["security", "confirmation"],
        &["hub_remote_call"],
    ] {
        if lookup(&doc, path).is_some_and(|v| !v.is_object()) {
            return Err(LibraryError::invalid(format!(
                "{} must be a mapping",
                path.join(".")
            )));
        }
    }
    for key in ["state", "memory"] {
        let value = doc["persistence"].get(key);
        let ok = match value {
            None => true,
            Some(Value::String(s)) => !s.contains('\0') && relative_path(s).is_some(),
            Some(_) => false,
        };
        if !ok {
            return Err(LibraryError::invalid(format!(
                "persistence.{key} must be a relative child directory without .."
            )));
        }
    }
    for (path, placeholder) in [
        (&["client", "endpoint"][..], EVENTS_PLACEHOLDER),
        (
            &["security", "confirmation", "endpoint"],
            CONFIRM_PLACEHOLDER,
        ),
        (&["hub_remote_call", "endpoint"], TOOLS_PLACEHOLDER),
    ] {
        let section = &path[..path.len() - 1];
        if lookup(&doc, section).is_none() {
            continue;
        }
        let ok = match lookup(&doc, path) {
            Some(Value::String(s)) => s == placeholder || is_ws_url(s),
            _ => false,
        };
        if !ok {
            return Err(LibraryError::invalid(format!(
                "{} must be a WebSocket URL or {placeholder}",
                path.join(".")
            )));
        }
    }
    Ok(doc)
}

fn lookup<'a>(root: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(root, |node, key| node.get(key))
}

/// `ws://host…` or `wss://host…` with a non-empty host and no whitespace.
fn is_ws_url(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("ws://")
        .or_else(|| lower.strip_prefix("wss://"));
    match rest {
        Some(rest) => {
            let host = rest.split(['/', '?', '#']).next().unwrap_or("");
            !host.is_empty() && !text.chars().any(|c| c.is_whitespace() || c.is_control())
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "\
driver_model: p
providers:
  p: {model: m}
client:
  endpoint: '{{hub.events_endpoint}}'
persistence:
  directory: '{{session.directory}}'
";

    fn refused(text: &str) -> String {
        match check(text) {
            Err(LibraryError::Invalid(m)) => m,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn the_default_template_and_a_minimal_file_pass() {
        check(super::super::DEFAULT_WORKER).unwrap();
        check(MINIMAL).unwrap();
        check(&MINIMAL.replace("'{{hub.events_endpoint}}'", "wss://proxy.example/w?token=t"))
            .unwrap();
        check(&format!(
            "{MINIMAL}hub_remote_call:\n  endpoint: '{{{{hub.tools_endpoint}}}}'\n"
        ))
        .unwrap();
    }

    #[test]
    fn refusals_name_the_rule_and_never_the_text() {
        assert!(refused("a: [").contains("not valid YAML"));
        assert!(refused("- a\n- b\n").contains("mapping"));
        assert!(
            refused(&MINIMAL.replace("driver_model: p", "driver_model: q"))
                .contains("driver_model")
        );
        assert!(refused(&MINIMAL.replace("{model: m}", "{model: ''}")).contains("driver_model"));
        assert!(refused(&format!("{MINIMAL}modality_assist_model: nope\n"))
            .contains("modality_assist_model"));
        assert!(refused(&MINIMAL.replace(
            "client:\n  endpoint: '{{hub.events_endpoint}}'\n",
            "client: 3\n"
        ))
        .contains("client must be a mapping"));
        assert!(refused(&format!("{MINIMAL}security: on\n")).contains("security must"));
        assert!(refused(&format!("{MINIMAL}hub_remote_call: null\n")).contains("hub_remote_call"));
        assert!(
            refused(&format!("{MINIMAL}security:\n  confirmation: {{}}\n"))
                .contains("security.confirmation.endpoint")
        );
        assert!(refused(&format!("{MINIMAL}  state: ../up\n")).contains("persistence.state"));
        assert!(refused(&format!("{MINIMAL}  memory: /abs\n")).contains("persistence.memory"));
        let secret = MINIMAL.replace("'{{hub.events_endpoint}}'", "http://secret-value");
        let message = refused(&secret);
        assert!(message.contains("client.endpoint"));
        assert!(!message.contains("secret-value"));
        let aliases: String = std::iter::once("a: &a [x]\nb: [".to_string())
            .chain((0..101).map(|_| "*a,".to_string()))
            .chain(std::iter::once("]\n".to_string()))
            .collect();
        assert!(refused(&aliases).contains("aliases"));
    }
}
