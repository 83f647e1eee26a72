//! The configuration library over the JSON API: seeding, listing, reads,
//! revisioned saves and deletes, renames, validation, templates and the
//! endpoint preview, at their edges (stale revisions, size limits,
//! path-like ids, symbolic links); sessions created from a saved pair and
//! snapshots replaced while stopped.
//!
//! This file holds the library's files over the API and the helpers;
//! library sessions (snapshots, launches, pid files, restarts, children,
//! crash recovery, the panel) are `sessions.rs`.

mod sessions;

use std::os::unix::fs::PermissionsExt;

use serde_json::{json, Value};

use crate::util::*;

fn put(hub: &TestHub, path: &str, body: Value) -> Response {
    hub.request("PUT", path, &[], body.to_string().as_bytes())
}

fn delete(hub: &TestHub, path: &str, body: Value) -> Response {
    hub.request("DELETE", path, &[], body.to_string().as_bytes())
}

#[track_caller]
fn refused(res: &Response, status: u16, code: &str) -> String {
    assert_eq!(res.status, status, "{}", res.text());
    let body = res.json();
    assert_eq!(body["error"], code, "{body}");
    body["message"].as_str().unwrap().to_string()
}

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// A launch file that runs this hub's own built-in worker through a
/// `command` launcher.
pub fn mock_worker_launch(threads: u64, env: Value) -> String {
    format!(
        "{{\n  // the hub binary's own worker\n  \"launcher\": {{\"kind\": \"command\", \
         \"command\": [{bin:?}, \"mock-worker\", \"--config\", \"{{config}}\", \
         \"--session\", \"{{session}}\", \"--threads\", \"{{threads}}\"]}},\n  \
         \"worker\": {{\"threads\": {threads}, \"stopTimeoutMs\": 1500, \
         \"sigtermGraceMs\": 1000, \"sigkillGraceMs\": 3000}},\n  \"env\": {env}\n}}\n",
        bin = BIN,
    )
}

/// A worker file for the built-in worker (model `mock-text`), in block
/// YAML with a comment, its hub-owned fields as placeholders.
pub const MOCK_WORKER_YAML: &str = "\
# a worker file for the built-in worker
driver_model: mock
providers:
  mock:
    model: mock-text
client:
  endpoint: '{{hub.events_endpoint}}'
security:
  confirmation:
    endpoint: '{{hub.confirm_endpoint}}'
persistence:
  directory: '{{session.directory}}'
  enabled: true
";

#[test]
fn the_library_is_seeded_private_and_listed() {
    let dir = TempDir::new("cfg-seed");
    let hub = TestHub::start(dir.path(), &[]);
    let list = hub.get("/api/configurations");
    assert_eq!(list.status, 200, "{}", list.text());
    assert_eq!(
        list.json(),
        json!({"launch": ["docker", "local"], "worker": ["default"]})
    );
    let root = dir.path().join("configs");
    assert_eq!(mode(&root.join("launch")), 0o700);
    assert_eq!(mode(&root.join("worker")), 0o700);
    for file in [
        "launch/local.jsonc",
        "launch/docker.jsonc",
        "worker/default.yaml",
    ] {
        assert_eq!(mode(&root.join(file)), 0o600, "{file}");
    }
    // The seeded files are the default templates, and a read is the exact
    // text with its content hash.
    let local = hub.get("/api/configurations/launch/local").json();
    assert_eq!(local["kind"], "launch");
    assert_eq!(local["id"], "local");
    let template = hub.get("/api/configurations/launch/template").json();
    assert_eq!(local["text"], template["text"]);
    assert_eq!(local["revision"].as_str().unwrap().len(), 64);
    let docker = hub
        .get("/api/configurations/launch/template?source=docker")
        .json();
    assert_eq!(
        docker["text"],
        hub.get("/api/configurations/launch/docker").json()["text"]
    );
    let worker = hub.get("/api/configurations/worker/default").json();
    assert_eq!(
        worker["text"],
        hub.get("/api/configurations/worker/template?source=default")
            .json()["text"]
    );
    assert!(worker["text"]
        .as_str()
        .unwrap()
        .contains("{{hub.events_endpoint}}"));
    // Seeding never replaces an operator's file: edit local, restart.
    let edited = put(
        &hub,
        "/api/configurations/launch/local",
        json!({"text": mock_worker_launch(2, json!({})), "revision": local["revision"]}),
    );
    assert_eq!(edited.status, 200, "{}", edited.text());
    drop(hub);
    let hub = TestHub::start(dir.path(), &[]);
    assert_eq!(
        hub.get("/api/configurations/launch/local").json()["revision"],
        edited.json()["revision"]
    );
}

#[test]
fn saves_and_deletes_follow_revisions() {
    let dir = TempDir::new("cfg-rev");
    let hub = TestHub::start(dir.path(), &[]);
    let path = "/api/configurations/worker/mine";
    // `revision: null` creates.
    let created = put(
        &hub,
        path,
        json!({"text": MOCK_WORKER_YAML, "revision": null}),
    );
    assert_eq!(created.status, 200, "{}", created.text());
    let created = created.json();
    assert_eq!(created["kind"], "worker");
    assert_eq!(created["id"], "mine");
    assert_eq!(created["text"], MOCK_WORKER_YAML);
    let first = created["revision"].as_str().unwrap().to_string();
    let on_disk = dir.path().join("configs/worker/mine.yaml");
    assert_eq!(std::fs::read_to_string(&on_disk).unwrap(), MOCK_WORKER_YAML);
    assert_eq!(mode(&on_disk), 0o600);
    // A second create of the same id, a stale and a missing revision: 409,
    // the file unchanged.
    let changed = MOCK_WORKER_YAML.replace("mock-text", "mock-echo");
    refused(
        &put(&hub, path, json!({"text": changed, "revision": null})),
        409,
        "configuration_conflict",
    );
    refused(
        &put(
            &hub,
            path,
            json!({"text": changed, "revision": "0".repeat(64)}),
        ),
        409,
        "configuration_conflict",
    );
    refused(
        &put(&hub, path, json!({"text": changed})),
        400,
        "invalid_configuration",
    );
    assert_eq!(std::fs::read_to_string(&on_disk).unwrap(), MOCK_WORKER_YAML);
    // The current revision updates; the old one is stale from then on.
    let updated = put(&hub, path, json!({"text": changed, "revision": first}));
    assert_eq!(updated.status, 200, "{}", updated.text());
    let second = updated.json()["revision"].as_str().unwrap().to_string();
    assert_ne!(first, second);
    // An invalid document is refused after the revision check, unchanged.
    let message = refused(
        &put(
            &hub,
            path,
            json!({"text": "driver_model: nope\n", "revision": second}),
        ),
        400,
        "invalid_configuration",
    );
    assert!(message.contains("driver_model"), "{message}");
    assert_eq!(std::fs::read_to_string(&on_disk).unwrap(), changed);
    // Deletes: stale 409, current removes, then 404.
    refused(
        &delete(&hub, path, json!({"revision": first})),
        409,
        "configuration_conflict",
    );
    refused(
        &delete(&hub, path, json!({})),
        409,
        "configuration_conflict",
    );
    let removed = delete(&hub, path, json!({"revision": second}));
    assert_eq!(removed.status, 200, "{}", removed.text());
    assert_eq!(removed.json(), json!({"removed": "mine"}));
    assert!(!on_disk.exists());
    refused(&hub.get(path), 404, "configuration_not_found");
    refused(
        &delete(&hub, path, json!({"revision": second})),
        404,
        "configuration_not_found",
    );
}

#[test]
fn renames_keep_the_text_and_refuse_taken_names() {
    let dir = TempDir::new("cfg-rename");
    let hub = TestHub::start(dir.path(), &[]);
    let local = hub.get("/api/configurations/launch/local").json();
    let rev = local["revision"].clone();
    let rename = |to: &str, revision: &Value| {
        post(
            &hub,
            "/api/configurations/launch/local/rename",
            json!({"id": to, "revision": revision}),
        )
    };
    refused(&rename("docker", &rev), 409, "configuration_conflict");
    refused(&rename("x", &json!("stale")), 409, "configuration_conflict");
    refused(&rename("../x", &rev), 400, "invalid_configuration");
    let renamed = rename("on-host", &rev);
    assert_eq!(renamed.status, 200, "{}", renamed.text());
    let renamed = renamed.json();
    assert_eq!(renamed["id"], "on-host");
    assert_eq!(renamed["text"], local["text"]);
    assert_eq!(renamed["revision"], rev);
    refused(
        &hub.get("/api/configurations/launch/local"),
        404,
        "configuration_not_found",
    );
    assert_eq!(
        hub.get("/api/configurations").json()["launch"],
        json!(["docker", "on-host"])
    );
}

#[test]
fn ids_and_kinds_are_names_never_paths() {
    let dir = TempDir::new("cfg-ids");
    let hub = TestHub::start(dir.path(), &[]);
    std::fs::write(dir.path().join("secret.jsonc"), "{}").unwrap();
    for target in [
        "/api/configurations/launch/..%2Fsecret",
        "/api/configurations/launch/..",
        "/api/configurations/launch/local.jsonc",
        "/api/configurations/launch/%2Fetc%2Fpasswd",
        "/api/configurations/launch/a%00b",
        "/api/configurations/..%2Fconfigs/local",
        "/api/configurations/Launch/local",
    ] {
        refused(&hub.get(target), 400, "invalid_configuration");
    }
    let long = "x".repeat(129);
    refused(
        &hub.get(&format!("/api/configurations/launch/{long}")),
        400,
        "invalid_configuration",
    );
    refused(
        &put(
            &hub,
            "/api/configurations/launch/..%2F..%2Fescape",
            json!({"text": mock_worker_launch(1, json!({})), "revision": null}),
        ),
        400,
        "invalid_configuration",
    );
    assert!(!dir.path().join("escape.jsonc").exists());
    refused(
        &hub.get("/api/configurations/other/template"),
        400,
        "invalid_configuration",
    );
    refused(
        &hub.get("/api/configurations/worker/template?source=docker"),
        400,
        "invalid_configuration",
    );
    refused(
        &hub.get("/api/configurations/launch/template?source=elsewhere"),
        400,
        "invalid_configuration",
    );
    refused(
        &hub.get("/api/configurations/launch/a/b/c"),
        404,
        "not_found",
    );
    refused(
        &hub.request("PATCH", "/api/configurations/launch/local", &[], b"{}"),
        405,
        "method_not_allowed",
    );
}

#[test]
fn symbolic_links_are_never_followed() {
    let dir = TempDir::new("cfg-links");
    let hub = TestHub::start(dir.path(), &[]);
    let outside = dir.path().join("outside.yaml");
    std::fs::write(&outside, MOCK_WORKER_YAML).unwrap();
    let link = dir.path().join("configs/worker/linked.yaml");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    // Not listed, not read, not overwritten, not deleted.
    assert_eq!(
        hub.get("/api/configurations").json()["worker"],
        json!(["default"])
    );
    let path = "/api/configurations/worker/linked";
    refused(&hub.get(path), 400, "invalid_configuration");
    let revision = hub.get("/api/configurations/worker/default").json()["revision"].clone();
    refused(
        &put(
            &hub,
            path,
            json!({"text": MOCK_WORKER_YAML, "revision": null}),
        ),
        400,
        "invalid_configuration",
    );
    refused(
        &delete(&hub, path, json!({"revision": revision})),
        400,
        "invalid_configuration",
    );
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), MOCK_WORKER_YAML);
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    // A directory or a FIFO with a file's name is not a file either.
    std::fs::create_dir(dir.path().join("configs/worker/folder.yaml")).unwrap();
    refused(
        &hub.get("/api/configurations/worker/folder"),
        400,
        "invalid_configuration",
    );
    let fifo = dir.path().join("configs/worker/pipe.yaml");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    refused(
        &hub.get("/api/configurations/worker/pipe"),
        400,
        "invalid_configuration",
    );
    assert_eq!(
        hub.get("/api/configurations").json()["worker"],
        json!(["default"])
    );
}

#[test]
fn sizes_are_bounded() {
    let dir = TempDir::new("cfg-size");
    let hub = TestHub::start(dir.path(), &[]);
    // A file over 1 MiB on disk is refused on read, and blocks a save.
    let big = dir.path().join("configs/worker/big.yaml");
    let mut text = MOCK_WORKER_YAML.to_string();
    text.push_str(&format!("# {}\n", "x".repeat(1024 * 1024)));
    std::fs::write(&big, &text).unwrap();
    refused(
        &hub.get("/api/configurations/worker/big"),
        413,
        "configuration_too_large",
    );
    // A request body over 1 MiB is refused before it is parsed.
    let huge = json!({"text": text, "revision": null});
    refused(
        &put(&hub, "/api/configurations/worker/other", huge.clone()),
        413,
        "payload_too_large",
    );
    refused(
        &post(&hub, "/api/configurations/worker/validate", huge),
        413,
        "payload_too_large",
    );
    assert!(!dir.path().join("configs/worker/other.yaml").exists());
    // Deletes and renames take small bodies only.
    let padded = json!({"revision": "r", "pad": "x".repeat(2000)});
    refused(
        &delete(&hub, "/api/configurations/launch/local", padded.clone()),
        413,
        "payload_too_large",
    );
    refused(
        &post(&hub, "/api/configurations/launch/local/rename", padded),
        413,
        "payload_too_large",
    );
    // Not JSON, not an object, text not a string.
    refused(
        &hub.request("POST", "/api/configurations/launch/validate", &[], b"{"),
        400,
        "bad_json",
    );
    refused(
        &post(&hub, "/api/configurations/launch/validate", json!([1])),
        400,
        "invalid_configuration",
    );
    refused(
        &post(
            &hub,
            "/api/configurations/launch/validate",
            json!({"text": 5}),
        ),
        400,
        "invalid_configuration",
    );
}

#[test]
fn validation_and_the_endpoint_preview() {
    let dir = TempDir::new("cfg-validate");
    let hub = TestHub::start(dir.path(), &[]);
    let validate = |kind: &str, text: &str| {
        post(
            &hub,
            &format!("/api/configurations/{kind}/validate"),
            json!({"text": text}),
        )
    };
    let ok = validate("launch", &mock_worker_launch(1, json!({"A": "1"})));
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(ok.json(), json!({"valid": true}));
    assert_eq!(
        validate("worker", MOCK_WORKER_YAML).json(),
        json!({"valid": true})
    );
    for (kind, text, needle) in [
        ("launch", "{", "JSONC"),
        (
            "launch",
            r#"{"launcher": {"kind": "command"}}"#,
            "launcher.command",
        ),
        (
            "launch",
            r#"{"launcher": {"kind": "command", "command": ["x"]}, "listen": {}}"#,
            "listen",
        ),
        ("worker", "a: [", "YAML"),
        ("worker", "driver_model: x\n", "driver_model"),
    ] {
        let message = refused(&validate(kind, text), 400, "invalid_configuration");
        assert!(message.contains(needle), "{kind} {text}: {message}");
    }
    // The preview uses the live listeners and illustrative identity.
    let preview = post(
        &hub,
        "/api/configurations/preview",
        json!({"launch": mock_worker_launch(1, json!({}))}),
    );
    assert_eq!(preview.status, 200, "{}", preview.text());
    let endpoints = &preview.json()["endpoints"];
    let port = hub.addr.port();
    let tools = hub.tools_addr.unwrap().port();
    assert_eq!(
        endpoints["events"],
        format!("ws://127.0.0.1:{port}/agent/SESSION_ID/events?token=SESSION_TOKEN")
    );
    assert_eq!(
        endpoints["confirm"],
        format!("ws://127.0.0.1:{port}/agent/SESSION_ID/confirm?token=SESSION_TOKEN")
    );
    assert_eq!(
        endpoints["tools"],
        format!("ws://127.0.0.1:{tools}/agent/SESSION_ID/tools?token=SESSION_TOKEN")
    );
    // Advertised origins and a connect host from the file.
    let proxied = r#"{"launcher": {"kind": "command", "command": ["w"]},
        "worker": {"connectHost": "host.docker.internal"},
        "endpoints": {"events": "wss://hub.example/worker/"}}"#;
    let endpoints = post(
        &hub,
        "/api/configurations/preview",
        json!({"launch": proxied}),
    )
    .json();
    assert_eq!(
        endpoints["endpoints"]["events"],
        "wss://hub.example/worker/agent/SESSION_ID/events?token=SESSION_TOKEN"
    );
    assert_eq!(
        endpoints["endpoints"]["confirm"],
        format!("ws://host.docker.internal:{port}/agent/SESSION_ID/confirm?token=SESSION_TOKEN")
    );
    refused(
        &post(&hub, "/api/configurations/preview", json!({"launch": "{"})),
        400,
        "invalid_configuration",
    );
}

#[test]
fn deployment_templates_copy_this_hub() {
    let dir = TempDir::new("cfg-deploy");
    let hub = hub_with(
        &dir,
        json!({"worker": {"threads": 3, "connectHost": "gw.lan"}}),
    );
    let launch = hub
        .get("/api/configurations/launch/template?source=deployment")
        .json();
    let text = launch["text"].as_str().unwrap();
    assert!(text.contains("\"built-in\""), "{text}");
    assert!(text.contains("\"gw.lan\""), "{text}");
    let valid = post(
        &hub,
        "/api/configurations/launch/validate",
        json!({"text": text}),
    );
    assert_eq!(valid.status, 200, "{}", valid.text());
    let worker = hub
        .get("/api/configurations/worker/template?source=deployment")
        .json();
    let text = worker["text"].as_str().unwrap();
    assert!(text.contains("{{hub.events_endpoint}}"), "{text}");
    assert!(text.contains("{{session.directory}}"), "{text}");
    assert!(!text.contains(hub.data_dir.to_str().unwrap()), "{text}");
}

#[test]
fn the_routes_need_the_panel_token() {
    let dir = TempDir::new("cfg-auth");
    let hub = TestHub::start(dir.path(), &["--panel-token", "s3cret"]);
    for (method, path) in [
        ("GET", "/api/configurations"),
        ("GET", "/api/configurations/launch/local"),
        ("GET", "/api/configurations/launch/template"),
        ("PUT", "/api/configurations/launch/x"),
        ("DELETE", "/api/configurations/launch/local"),
        ("POST", "/api/configurations/launch/validate"),
        ("POST", "/api/configurations/launch/local/rename"),
        ("POST", "/api/configurations/preview"),
        ("POST", "/api/sessions/s/configurations"),
    ] {
        refused(&hub.request(method, path, &[], b"{}"), 401, "unauthorized");
    }
    let res = hub.request(
        "GET",
        "/api/configurations",
        &[("Authorization", "Bearer s3cret")],
        b"",
    );
    assert_eq!(res.status, 200, "{}", res.text());
}
