//! Preparing a session's worker configuration for a launch: the first
//! render, or an in-place edit of the hub-owned fields of the file an
//! earlier start wrote and an operator may since have rewritten by hand in
//! block YAML.
//!
//! The hub owns, and rewrites at every start:
//!
//! - `persistence.directory`: the session root (an operator's change is
//!   undone);
//! - `client.endpoint` and `security.confirmation.endpoint`: the current
//!   address (or `endpoints.*` origin), port and session token;
//! - `hub_remote_call.endpoint`: the same, only when that section exists
//!   and is not `null` (an operator may turn remote tools off by removing
//!   it);
//! - `providers.<mock.profile>.endpoint.base_url`: the offline provider's
//!   address, only while it runs and when `driver_model` is that profile.
//!
//! Everything else (comments, unknown keys, order, quoting, credentials,
//! operator settings) is kept byte for byte (`wire::yaml_edit`). A file the
//! editor cannot edit safely is refused with the key and line, and then
//! left unchanged: the start fails with that message rather than run a
//! worker on stale tokens or overwrite an operator's file.
//!
//! Pure: no disk. The supervisor reads and writes the file.

use std::path::Path;

use serde_json::Value;

use super::render::{self, path_string, relative_path, Endpoints, RenderError};
use crate::config::Config;
use crate::wire::yaml_edit::{self, read, Edit, NewValue, Refusal, When};

/// The configuration for one launch: the file's new text and its reading.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    pub text: String,
    pub document: Value,
}

/// The offline model provider a launch points its profile at.
#[derive(Debug, Clone, Copy)]
pub struct MockTarget<'a> {
    /// `mock.profile`.
    pub profile: &'a str,
    /// The running provider's base URL.
    pub base_url: &'a str,
}

/// The configuration for a launch: rendered from `config` and `spec` when
/// there is no file yet (`existing` is `None`), else the file refreshed.
pub fn prepare(
    config: &Config,
    spec: &Value,
    existing: Option<&str>,
    session_dir: &Path,
    endpoints: &Endpoints,
    mock: Option<MockTarget>,
) -> Result<Prepared, RenderError> {
    let Some(existing) = existing else {
        let mut document = render::render(config, spec, session_dir, endpoints);
        if let Some(mock) = mock {
            render::point_mock_profile(&mut document, mock.profile, mock.base_url)?;
        }
        let text = serde_json::to_string_pretty(&document).expect("a JSON value encodes");
        return Ok(Prepared { text, document });
    };
    refresh(existing, session_dir, endpoints, mock)
}

/// Refreshes the hub-owned fields (module documentation) of `existing`,
/// the file's text, for a start with `endpoints` under `session_dir`.
pub fn refresh(
    existing: &str,
    session_dir: &Path,
    endpoints: &Endpoints,
    mock: Option<MockTarget>,
) -> Result<Prepared, RenderError> {
    edit_owned(existing, session_dir, endpoints, mock, true)
}

/// [`refresh`] for a configuration-library session's snapshot (its
/// `{{hub.*}}` and `{{session.directory}}` placeholders, or the values an
/// earlier launch wrote): the same fields, except that
/// `security.confirmation.endpoint` is written only when the file has a
/// `security.confirmation` section, as `hub_remote_call.endpoint` only
/// with its section. A worker file that leaves out confirmations keeps
/// them off.
pub fn refresh_snapshot(
    existing: &str,
    session_dir: &Path,
    endpoints: &Endpoints,
    mock: Option<MockTarget>,
) -> Result<Prepared, RenderError> {
    edit_owned(existing, session_dir, endpoints, mock, false)
}

fn edit_owned(
    existing: &str,
    session_dir: &Path,
    endpoints: &Endpoints,
    mock: Option<MockTarget>,
    confirmation_always: bool,
) -> Result<Prepared, RenderError> {
    let before = read_document(existing)?;
    let mut edits = vec![
        Edit::string(&["persistence", "directory"], &path_string(session_dir)),
        Edit::string(&["client", "endpoint"], &endpoints.events),
    ];
    let confirmation = before
        .get("security")
        .and_then(|s| s.get("confirmation"))
        .is_some_and(|v| !v.is_null());
    if confirmation_always || confirmation {
        edits.push(Edit::string(
            &["security", "confirmation", "endpoint"],
            &endpoints.confirm,
        ));
    }
    if before.get("hub_remote_call").is_some_and(|v| !v.is_null()) {
        edits.push(Edit::string(
            &["hub_remote_call", "endpoint"],
            &endpoints.tools,
        ));
    }
    if let Some(mock) = mock {
        if before.get("driver_model").and_then(Value::as_str) == Some(mock.profile) {
            edits.push(Edit::string(
                &["providers", mock.profile, "endpoint", "base_url"],
                mock.base_url,
            ));
        }
    }
    let text = yaml_edit::edit(existing, &edits)
        .map_err(RenderError::Edit)?
        .text;
    let document = read_document(&text)?;
    Ok(Prepared { text, document })
}

/// A clean child's worker configuration from its parent's startup snapshot
/// (`startup`, the text of `startup-worker.yaml`), edited the same way:
/// the parent's providers, prompts, plugins, settings and comments are
/// kept; the persistence root moves to `child_dir` with `restore:
/// if_present`; confirmations and remote tools are always on for a child
/// (`hub_remote_call.timeout_ms` defaults to `tools_timeout_ms`). The
/// endpoints are emptied, so the child never holds its parent's token; the
/// launch-time [`refresh`] fills in the child's own.
pub fn fork_document(
    startup: &str,
    child_dir: &Path,
    tools_timeout_ms: u64,
) -> Result<String, RenderError> {
    read_document(startup)?;
    let edits = [
        Edit::string(&["persistence", "directory"], &path_string(child_dir)),
        Edit::string(&["persistence", "restore"], "if_present"),
        Edit::string(&["client", "endpoint"], ""),
        Edit::string(&["security", "confirmation", "endpoint"], ""),
        Edit::string(&["hub_remote_call", "endpoint"], ""),
        Edit {
            path: vec!["hub_remote_call".into(), "timeout_ms".into()],
            value: NewValue::Int(tools_timeout_ms),
            when: When::IfAbsent,
        },
    ];
    Ok(yaml_edit::edit(startup, &edits)
        .map_err(RenderError::Edit)?
        .text)
}

/// The file read as JSON, with `persistence.state` and `persistence.memory`
/// checked to be relative paths below the root.
fn read_document(text: &str) -> Result<Value, RenderError> {
    let doc = read::read_json(text).map_err(|err| RenderError::Edit(Refusal::Read(err)))?;
    for (key, name) in [
        ("state", "persistence.state"),
        ("memory", "persistence.memory"),
    ] {
        let value = doc.get("persistence").and_then(|p| p.get(key));
        if let Some(value) = value.filter(|v| !v.is_null()) {
            if value.as_str().and_then(relative_path).is_none() {
                return Err(RenderError::BadRelativePath { key: name });
            }
        }
    }
    Ok(doc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervisor::render::{endpoints, state_dir};
    use serde_json::json;

    const SESSION: &str = "/data/sessions/demo";

    fn eps() -> Endpoints {
        endpoints("127.0.0.1", 8800, 8801, "demo", "tok")
    }

    fn doc(text: &str) -> Value {
        refresh(text, Path::new(SESSION), &eps(), None)
            .unwrap()
            .document
    }

    /// A previously rendered document after operator edits: a changed
    /// directory and exchanges, an unknown key, a literal credential, old
    /// endpoints.
    const EDITED: &str = r#"{
        "zzz_first": {"b": 2, "a": 1},
        "providers": {"deepseek": {"model": "x", "endpoint": {"auth": {"api_key": "sk-live-123"}}}},
        "driver_model": "deepseek",
        "client": {"payload_capacity": 3, "endpoint": "ws://old:1/agent/demo/events?token=old", "extra": true},
        "security": {"confirmation": {"timeout_ms": 9, "endpoint": "ws://old:1/c"}},
        "hub_remote_call": {"endpoint": "ws://old:2/t", "timeout_ms": 1},
        "worker": {"max_exchanges": 3},
        "persistence": {"directory": "/elsewhere", "state": "st", "memory": "mem/sub", "format": "json"}
    }"#;

    #[test]
    fn refresh_rewrites_only_hub_owned_fields() {
        let refreshed = refresh(EDITED, Path::new(SESSION), &eps(), None).unwrap();
        let mut expected: Value = serde_json::from_str(EDITED).unwrap();
        expected["client"]["endpoint"] = json!(eps().events);
        expected["security"]["confirmation"]["endpoint"] = json!(eps().confirm);
        expected["hub_remote_call"]["endpoint"] = json!(eps().tools);
        expected["persistence"]["directory"] = json!(SESSION);
        assert_eq!(refreshed.document, expected);
        // Key order is the file's, at every level; only the values changed.
        assert_eq!(refreshed.document.to_string(), expected.to_string());
        assert_eq!(
            refreshed.text,
            EDITED
                .replace("ws://old:1/agent/demo/events?token=old", &eps().events)
                .replace("ws://old:1/c", &eps().confirm)
                .replace("ws://old:2/t", &eps().tools)
                .replace("/elsewhere", SESSION)
        );
        assert_eq!(
            state_dir(&refreshed.document).unwrap(),
            Path::new(SESSION).join("st")
        );
        // Refreshing twice changes nothing more.
        let again = refresh(&refreshed.text, Path::new(SESSION), &eps(), None).unwrap();
        assert_eq!(again, refreshed);
    }

    /// The same document as an operator rewrites it in block YAML.
    const BLOCK: &str = "\
# Hand-edited worker configuration
driver_model: mock          # offline provider
providers:
  mock:
    model: mock-text
    endpoint:
      base_url: http://127.0.0.1:1111   # follows the provider
      auth: {scheme: none}
client:
  endpoint: ws://old:1/agent/demo/events?token=old
  payload_capacity: 3
operator_notes:
  - keep me
persistence:
  directory: /elsewhere
  state: st
";

    #[test]
    fn block_yaml_is_refreshed_in_place_with_the_mock_provider() {
        let mock = MockTarget {
            profile: "mock",
            base_url: "http://127.0.0.1:40123",
        };
        let refreshed = refresh(BLOCK, Path::new(SESSION), &eps(), Some(mock)).unwrap();
        assert_eq!(
            refreshed.text,
            BLOCK
                .replace("http://127.0.0.1:1111", "http://127.0.0.1:40123")
                .replace("ws://old:1/agent/demo/events?token=old", &eps().events)
                .replace("/elsewhere", SESSION)
                + &format!(
                    "security:\n  confirmation:\n    endpoint: \"{}\"\n",
                    eps().confirm
                )
        );
        assert_eq!(refreshed.document["operator_notes"], json!(["keep me"]));
        assert_eq!(
            refreshed.document["providers"]["mock"]["endpoint"],
            json!({"base_url": "http://127.0.0.1:40123", "auth": {"scheme": "none"}})
        );
        // Another profile than mock.profile is never pointed at the provider,
        // and no hub_remote_call section is created.
        let other = MockTarget {
            profile: "offline",
            ..mock
        };
        let kept = refresh(BLOCK, Path::new(SESSION), &eps(), Some(other)).unwrap();
        assert!(kept.text.contains("http://127.0.0.1:1111"));
        assert!(kept.document.get("hub_remote_call").is_none());
    }

    #[test]
    fn the_first_start_renders_json_and_points_the_mock_profile() {
        let c = crate::config::test_config("{}");
        let spec = json!({"provider": "mock", "model": "mock-echo"});
        let mock = MockTarget {
            profile: "mock",
            base_url: "http://127.0.0.1:5",
        };
        let first = prepare(&c, &spec, None, Path::new(SESSION), &eps(), Some(mock)).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&first.text).unwrap(),
            first.document
        );
        assert_eq!(
            first.document["providers"]["mock"]["endpoint"]["base_url"],
            "http://127.0.0.1:5"
        );
        // The next start edits that text and keeps an operator's change.
        let edited = first.text.replace("mock-echo", "mock-text");
        let moved = MockTarget {
            base_url: "http://[::1]:7",
            ..mock
        };
        let again = prepare(
            &c,
            &spec,
            Some(&edited),
            Path::new(SESSION),
            &eps(),
            Some(moved),
        )
        .unwrap();
        assert_eq!(again.document["providers"]["mock"]["model"], "mock-text");
        assert_eq!(
            again.document["providers"]["mock"]["endpoint"]["base_url"],
            "http://[::1]:7"
        );
        assert_eq!(
            again.text,
            edited.replace("http://127.0.0.1:5", "http://[::1]:7")
        );
    }

    #[test]
    fn fork_documents_keep_the_parent_settings_but_nothing_of_its_identity() {
        let parent = refresh(EDITED, Path::new(SESSION), &eps(), None).unwrap();
        let mut without_tools = parent.document.clone();
        without_tools
            .as_object_mut()
            .unwrap()
            .remove("hub_remote_call");
        for startup in [
            parent.text.clone(),
            without_tools.to_string(),
            BLOCK.to_owned(),
        ] {
            let text = fork_document(&startup, Path::new("/data/subagents/c"), 5000).unwrap();
            let child = read::read_json(&text).unwrap();
            let parent = read::read_json(&startup).unwrap();
            // Settings are the parent's.
            assert_eq!(child["providers"], parent["providers"]);
            assert_eq!(child.get("zzz_first"), parent.get("zzz_first"));
            // A fresh root, restored only if present, and no parent token.
            assert_eq!(child["persistence"]["directory"], "/data/subagents/c");
            assert_eq!(child["persistence"]["restore"], "if_present");
            assert!(!text.contains("tok"), "{text}");
            // Confirmations and remote tools are always on for a child.
            assert!(child["security"]["confirmation"].is_object());
            assert!(child["hub_remote_call"].is_object());
            let timeout = &child["hub_remote_call"]["timeout_ms"];
            assert_eq!(
                timeout,
                parent
                    .get("hub_remote_call")
                    .map_or(&json!(5000), |h| &h["timeout_ms"])
            );
            // The launch-time refresh fills the child's own endpoints in.
            let launched = refresh(
                &text,
                Path::new("/data/subagents/c"),
                &endpoints("127.0.0.1", 8800, 8801, "c", "child-token"),
                None,
            )
            .unwrap();
            assert!(launched.document["hub_remote_call"]["endpoint"]
                .as_str()
                .unwrap()
                .contains("/agent/c/tools?token=child-token"));
        }
    }

    #[test]
    fn a_snapshot_gets_its_placeholders_filled_and_keeps_omitted_sections_out() {
        let snapshot = "\
# comment kept
driver_model: p
providers:
  p: {model: m}
client:
  endpoint: '{{hub.events_endpoint}}'
hub_remote_call:
  endpoint: '{{hub.tools_endpoint}}'
persistence:
  directory: '{{session.directory}}'
";
        let out = refresh_snapshot(snapshot, Path::new(SESSION), &eps(), None).unwrap();
        assert!(out.text.starts_with("# comment kept\n"), "{}", out.text);
        assert!(!out.text.contains("{{"), "{}", out.text);
        assert_eq!(out.document["client"]["endpoint"], eps().events);
        assert_eq!(out.document["hub_remote_call"]["endpoint"], eps().tools);
        assert_eq!(out.document["persistence"]["directory"], SESSION);
        // No confirmation section: none is added (the legacy refresh adds it).
        assert!(out.document.get("security").is_none());
        assert!(refresh(snapshot, Path::new(SESSION), &eps(), None)
            .unwrap()
            .document["security"]["confirmation"]["endpoint"]
            .is_string());
        let with = format!(
            "{snapshot}security:\n  confirmation:\n    endpoint: '{{{{hub.confirm_endpoint}}}}'\n"
        );
        let out = refresh_snapshot(&with, Path::new(SESSION), &eps(), None).unwrap();
        assert_eq!(
            out.document["security"]["confirmation"]["endpoint"],
            eps().confirm
        );
        // A second launch finds real values and writes them again.
        let again = refresh_snapshot(&out.text, Path::new(SESSION), &eps(), None).unwrap();
        assert_eq!(again.text, out.text);
    }

    #[test]
    fn refresh_creates_missing_parents_and_leaves_omitted_sections_out() {
        assert_eq!(
            doc(r#"{"security": null, "keep": 1}"#),
            json!({"security": {"confirmation": {"endpoint": eps().confirm}}, "keep": 1,
                   "persistence": {"directory": SESSION},
                   "client": {"endpoint": eps().events}})
        );
        assert!(doc("keep: 1\n").get("hub_remote_call").is_none());
        assert!(doc(r#"{"hub_remote_call": null}"#)["hub_remote_call"].is_null());
        assert!(doc("hub_remote_call:\n")["hub_remote_call"].is_null());
    }

    #[test]
    fn refresh_errors_never_echo_the_file_and_name_the_key() {
        let session = Path::new(SESSION);
        for (text, message) in [
            (
                r#"{"client": "sk-secret"}"#,
                "cannot edit client (line 1): must be a mapping, found a string",
            ),
            (
                "security:\n  confirmation: [sk-secret]\n",
                "cannot edit security.confirmation (line 2): must be a mapping, found a sequence",
            ),
            (
                r#"{"hub_remote_call": "sk-secret"}"#,
                "cannot edit hub_remote_call (line 1): must be a mapping, found a string",
            ),
            (
                r#"{"persistence": 1}"#,
                "cannot edit persistence (line 1): must be a mapping, found a number",
            ),
            (
                r#"["sk-secret"]"#,
                "the file must be a mapping at the top level, found a sequence",
            ),
            (
                "client:\n  endpoint: ws://x\n  api_key: [sk-secret\n",
                "the file is not valid YAML (line 4, column 1)",
            ),
            (
                "client:\n  endpoint: &sk-secret ws://x\n",
                "cannot edit client.endpoint (line 2): has an anchor or a tag",
            ),
        ] {
            let err = refresh(text, session, &eps(), None).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("the worker configuration was left unchanged: {message}"),
                "{text}"
            );
            assert!(!err.to_string().contains("sk-secret"));
            assert!(!format!("{err:?}").contains("sk-secret"));
        }
        assert_eq!(
            refresh(
                r#"{"persistence": {"state": "../sk-secret"}}"#,
                session,
                &eps(),
                None
            )
            .unwrap_err()
            .to_string(),
            "worker configuration key persistence.state must be a nonempty relative path \
             without '..'"
        );
        for bad in [
            json!(""),
            json!("/abs"),
            json!("a/../b"),
            json!(".."),
            json!(3),
        ] {
            let text = json!({"persistence": {"memory": bad}}).to_string();
            assert_eq!(
                refresh(&text, session, &eps(), None).unwrap_err(),
                RenderError::BadRelativePath {
                    key: "persistence.memory"
                },
                "{text}"
            );
        }
    }
}
