//! A session's `config.yaml` hand-edited into block YAML keeps working: a
//! new hub (new ports, and the offline provider on a new port) refreshes
//! only its own fields in place and the built-in worker connects with
//! them; a file the editor refuses fails the start and stays byte for byte.

use serde_json::{json, Value};

use crate::util::hub::*;
use crate::util::TempDir;

fn hub_config() -> Value {
    json!({"mock": {"enabled": true}, "worker": short_stop_ladder()})
}

fn config_path(hub: &TestHub, id: &str) -> std::path::PathBuf {
    hub.data_dir
        .join("sessions")
        .join(id)
        .join("config")
        .join("config.yaml")
}

fn stop(hub: &TestHub, id: &str) {
    let res = action(hub, id, "stop");
    assert_eq!(res.status, 200, "{}", res.text());
    wait_session(hub, id, |s| {
        !matches!(
            s["process"]["state"].as_str(),
            Some("running" | "stopping" | "starting")
        )
    });
}

/// The operator's file: block YAML with comments, an unknown key, a flow
/// mapping, a sequence and stale hub-owned values in three quoting styles.
fn hand_edited(old: &Value) -> String {
    format!(
        "\
# Edited by hand: the hub keeps this comment.
driver_model: mock   # the offline provider
providers:
  mock:
    plugin: {plugin}
    model: mock-text          # changed by the operator
    endpoint:
      base_url: http://127.0.0.1:1   # stale, the hub points it
      auth: {{scheme: none}}
client:
  endpoint: \"ws://127.0.0.1:1/agent/yamlish/events?token=stale\"
  payload_capacity: 64

security:
  confirmation:
    endpoint: 'ws://127.0.0.1:1/agent/yamlish/confirm?token=stale'
    timeout_ms: 120000
hub_remote_call: {{endpoint: \"ws://127.0.0.1:2/t\", timeout_ms: 5000}}
worker:
  max_exchanges: 40
  system_prompt_file: prompts/coding_agent.yaml
operator_notes:             # unknown to the hub and the worker
  - keep this
  - and this
persistence:
  enabled: true
  directory: \"/somewhere/else\"
  state: state
  memory: memory
",
        plugin = old["providers"]["mock"]["plugin"]
            .as_str()
            .unwrap_or("openai"),
    )
}

#[test]
fn the_yaml_edit_round_trip() {
    let dir = TempDir::new("yaml-edit");
    let mut hub = hub_with(&dir, hub_config());
    create_session_with_spec(
        &hub,
        "yamlish",
        json!({"provider": "mock", "model": "mock-echo"}),
    );
    let res = action(&hub, "yamlish", "start");
    assert_eq!(res.status, 200, "{}", res.text());
    wait_session(&hub, "yamlish", |s| s["identity"]["state"] == "live");
    stop(&hub, "yamlish");
    let path = config_path(&hub, "yamlish");
    let first: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let text = hand_edited(&first);
    std::fs::write(&path, &text).unwrap();
    assert!(hub.terminate().success());
    drop(hub);

    // A new hub: other ports for both listeners and the provider.
    let hub = hub_with(&dir, hub_config());
    let res = action(&hub, "yamlish", "start");
    assert_eq!(res.status, 200, "{}", res.text());
    // The built-in worker read the edited block YAML and dialed the
    // refreshed endpoint with the session token.
    wait_session(&hub, "yamlish", |s| s["identity"]["state"] == "live");
    let token = worker_token(&hub.data_dir, "yamlish");
    let main = format!("ws://127.0.0.1:{}/agent/yamlish", hub.addr.port());
    let tools_addr = hub.tools_addr.expect("the tools listener is up");
    let provider = hub.mock_provider_addr().unwrap();
    let session_dir = hub.data_dir.join("sessions").join("yamlish");
    let mut expected = text
        .replace(
            "ws://127.0.0.1:1/agent/yamlish/events?token=stale",
            &format!("{main}/events?token={token}"),
        )
        .replace(
            "ws://127.0.0.1:1/agent/yamlish/confirm?token=stale",
            &format!("{main}/confirm?token={token}"),
        )
        .replace("http://127.0.0.1:1 ", &format!("http://{provider} "))
        .replace("/somewhere/else", session_dir.to_str().unwrap());
    let written = std::fs::read_to_string(&path).unwrap();
    // The tools endpoint has the tools listener's port.
    let tools = written
        .split("hub_remote_call: {endpoint: \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the tools endpoint stays in its flow mapping")
        .to_owned();
    assert_eq!(
        tools,
        format!(
            "ws://127.0.0.1:{}/agent/yamlish/tools?token={token}",
            tools_addr.port()
        )
    );
    expected = expected.replace("ws://127.0.0.1:2/t", &tools);
    assert_eq!(written, expected, "only the hub-owned values changed");
    // The session's spec follows the operator's edits.
    let session = get_session(&hub, "yamlish");
    assert_eq!(session["spec"]["model"], "mock-text", "{session}");
    assert_eq!(session["spec"]["maxExchanges"], 40, "{session}");
    stop(&hub, "yamlish");
    // An unchanged refresh leaves the file as it is.
    let res = action(&hub, "yamlish", "start");
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), expected);
    stop(&hub, "yamlish");

    // A file the editor cannot edit safely: the start fails with the key and
    // line, and the bytes stay as the operator left them.
    for (refused, message) in [
        (
            expected.replace("client:\n  endpoint: ", "client:\n  endpoint: &events "),
            "cannot edit client.endpoint (line 11): has an anchor or a tag",
        ),
        (
            expected.replace("client:\n", "client:\n  endpoint: ws://twice\n"),
            "the file has the key client.endpoint twice (again on line 12)",
        ),
        (
            format!("{expected}---\nsecond: document\n"),
            "the file holds more than one YAML document",
        ),
    ] {
        std::fs::write(&path, &refused).unwrap();
        let res = action(&hub, "yamlish", "start");
        assert_ne!(res.status, 200, "{}", res.text());
        let body = res.text();
        assert!(
            body.contains(
                "cannot prepare session configuration: the worker configuration was left unchanged"
            ),
            "{body}"
        );
        assert!(body.contains(message), "{message}: {body}");
        assert!(!body.contains(&token), "{body}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), refused);
        let session = get_session(&hub, "yamlish");
        assert_ne!(session["process"]["state"], "running", "{session}");
    }
}
