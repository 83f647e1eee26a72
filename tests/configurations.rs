//! The configuration library over the JSON API: seeding, listing, reads,
//! revisioned saves and deletes, renames, validation, templates and the
//! endpoint preview, at their edges (stale revisions, size limits,
//! path-like ids, symbolic links); sessions created from a saved pair and
//! snapshots replaced while stopped.

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

#[test]
fn sessions_take_a_snapshot_of_a_saved_pair() {
    let dir = TempDir::new("cfg-snapshot");
    let hub = TestHub::start(dir.path(), &[]);
    let saved = put(
        &hub,
        "/api/configurations/worker/mock",
        json!({"text": MOCK_WORKER_YAML, "revision": null}),
    );
    assert_eq!(saved.status, 200, "{}", saved.text());
    let pair = json!({"launchConfig": "local", "workerConfig": "mock"});
    create_session_with_spec(&hub, "lib", pair.clone());
    let session = get_session(&hub, "lib");
    assert_eq!(session["spec"]["launchConfig"], "local");
    assert_eq!(session["spec"]["workerConfig"], "mock");
    let config = dir.path().join("sessions/lib/config");
    assert_eq!(mode(&config), 0o700);
    let launch = std::fs::read_to_string(config.join("launch.jsonc")).unwrap();
    assert_eq!(
        launch,
        hub.get("/api/configurations/launch/local").json()["text"]
    );
    // The worker file keeps its comment and endpoint placeholders; its
    // root is the session directory.
    let worker = std::fs::read_to_string(config.join("config.yaml")).unwrap();
    assert!(worker.starts_with("# a worker file"), "{worker}");
    assert!(worker.contains("'{{hub.events_endpoint}}'"), "{worker}");
    let root = dir.path().join("sessions/lib");
    assert!(
        worker.contains(&format!("directory: '{}'", root.display())),
        "{worker}"
    );
    let source: Value =
        serde_json::from_str(&std::fs::read_to_string(config.join("source.json")).unwrap())
            .unwrap();
    assert_eq!(source["launchConfig"], "local");
    assert_eq!(source["workerRevision"], saved.json()["revision"]);
    for file in ["launch.jsonc", "config.yaml", "source.json"] {
        assert_eq!(mode(&config.join(file)), 0o600, "{file}");
    }
    // Library edits never reach the snapshot: delete the worker file.
    let rev = saved.json()["revision"].clone();
    assert_eq!(
        delete(
            &hub,
            "/api/configurations/worker/mock",
            json!({"revision": rev})
        )
        .status,
        200
    );
    assert_eq!(
        std::fs::read_to_string(config.join("config.yaml")).unwrap(),
        worker
    );

    // One of the pair, an unknown file, an invalid file: 400
    // invalid_session, and no session or directory is left.
    for (spec, needle) in [
        (json!({"launchConfig": "local"}), "both"),
        (
            json!({"launchConfig": "local", "workerConfig": "mock"}),
            "no such",
        ),
        (
            json!({"launchConfig": "local", "workerConfig": "../x"}),
            "id",
        ),
    ] {
        let res = post(
            &hub,
            "/api/sessions",
            json!({"session": "bad", "spec": spec}),
        );
        let message = refused(&res, 400, "invalid_session");
        assert!(message.contains(needle), "{message}");
    }
    std::fs::write(dir.path().join("configs/worker/broken.yaml"), "a: [").unwrap();
    let res = post(
        &hub,
        "/api/sessions",
        json!({"session": "bad", "spec": {"launchConfig": "local", "workerConfig": "broken"}}),
    );
    refused(&res, 400, "invalid_session");
    assert_eq!(session_ids(&hub), ["lib"]);
    assert!(!dir.path().join("sessions/bad").exists());
}

#[test]
fn a_stopped_session_takes_a_new_snapshot() {
    let dir = TempDir::new("cfg-apply");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "plain");
    let apply = |body: Value| post(&hub, "/api/sessions/plain/configurations", body);
    refused(&apply(json!({})), 400, "invalid_configuration");
    refused(
        &apply(json!({"launchConfig": "local"})),
        400,
        "invalid_configuration",
    );
    refused(
        &apply(json!({"launchConfig": "local", "workerConfig": "nope"})),
        404,
        "configuration_not_found",
    );
    refused(
        &apply(
            json!({"launchConfig": "local", "workerConfig": "default", "pad": "x".repeat(5000)}),
        ),
        413,
        "payload_too_large",
    );
    refused(
        &post(
            &hub,
            "/api/sessions/ghost/configurations",
            json!({"launchConfig": "local", "workerConfig": "default"}),
        ),
        404,
        "unknown_session",
    );
    let res = apply(json!({"launchConfig": "docker", "workerConfig": "default"}));
    assert_eq!(res.status, 200, "{}", res.text());
    let session = &res.json()["session"];
    assert_eq!(session["session_id"], "plain");
    assert_eq!(session["spec"]["launchConfig"], "docker");
    assert_eq!(session["spec"]["workerConfig"], "default");
    let config = dir.path().join("sessions/plain/config");
    assert_eq!(
        std::fs::read_to_string(config.join("launch.jsonc")).unwrap(),
        hub.get("/api/configurations/launch/docker").json()["text"]
    );
    // The spec is durable.
    drop(hub);
    let hub = TestHub::start(dir.path(), &[]);
    assert_eq!(get_session(&hub, "plain")["spec"]["launchConfig"], "docker");
}

#[test]
fn a_connected_worker_without_a_process_blocks_a_new_snapshot() {
    // The Node hub refuses a replacement "if running or connected": a
    // worker the hub did not start (run by hand with the session's
    // token) holds the session as much as one it did.
    let dir = TempDir::new("cfg-connected");
    let hub = TestHub::start(dir.path(), &[]);
    create_session_with_spec(
        &hub,
        "ext",
        json!({"launchConfig": "local", "workerConfig": "default"}),
    );
    let config = dir.path().join("sessions/ext/config/launch.jsonc");
    let before = std::fs::read_to_string(&config).unwrap();
    let ws = worker_events(&hub, "ext");
    let s = wait_session(&hub, "ext", |s| s["connected"] == true);
    assert!(
        s["process"].is_null() || s["process"]["pid"].is_null(),
        "{s}"
    );
    let pair = json!({"launchConfig": "docker", "workerConfig": "default"});
    let message = refused(
        &post(&hub, "/api/sessions/ext/configurations", pair.clone()),
        409,
        "session_busy",
    );
    assert!(message.contains("connected"), "{message}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), before);
    assert_eq!(get_session(&hub, "ext")["spec"]["launchConfig"], "local");
    // Once it has gone, the same request is taken.
    drop(ws);
    wait_session(&hub, "ext", |s| s["connected"] == false);
    let res = post(&hub, "/api/sessions/ext/configurations", pair);
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(res.json()["session"]["spec"]["launchConfig"], "docker");
    assert_ne!(std::fs::read_to_string(&config).unwrap(), before);
}

/// The environment of process `pid` (`/proc/<pid>/environ`).
fn environ(pid: u64) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect()
}

/// Saves `text` as a new library file.
#[track_caller]
fn save_new(hub: &TestHub, kind: &str, id: &str, text: &str) {
    let res = put(
        hub,
        &format!("/api/configurations/{kind}/{id}"),
        json!({"text": text, "revision": null}),
    );
    assert_eq!(res.status, 200, "{}", res.text());
}

#[track_caller]
fn start_and_connect(hub: &TestHub, id: &str) -> Value {
    let res = action(hub, id, "start");
    assert_eq!(res.status, 200, "{}", res.text());
    wait_session(hub, id, |s| s["connected"] == true)
}

#[test]
fn library_sessions_launch_with_their_own_launchers() {
    let dir = TempDir::new("cfg-launch");
    // The hub-wide launcher is the built-in worker.
    let hub = TestHub::start(dir.path(), &[]);
    save_new(&hub, "worker", "mockw", MOCK_WORKER_YAML);
    save_new(
        &hub,
        "launch",
        "direct",
        &mock_worker_launch(2, json!({"LIB_MARK": "direct"})),
    );
    // A second launcher: a shell wrapper that announces itself, then
    // becomes the same built-in worker.
    let wrapped = format!(
        r#"{{"launcher": {{"kind": "command", "command": ["/bin/sh", "-c",
            "echo wrapped-launch \"$3\"; exec \"$0\" mock-worker --config \"$1\" --session \"$2\" --threads \"$3\"",
            {bin:?}, "{{config}}", "{{session}}", "{{threads}}"]}},
          "worker": {{"threads": 3, "stopTimeoutMs": 1500, "sigtermGraceMs": 1000, "sigkillGraceMs": 3000}},
          "env": {{"LIB_MARK": "wrapped"}}}}"#,
        bin = BIN
    );
    save_new(&hub, "launch", "wrapped", &wrapped);
    create_session_with_spec(
        &hub,
        "a",
        json!({"launchConfig": "direct", "workerConfig": "mockw", "threads": 7}),
    );
    create_session_with_spec(
        &hub,
        "b",
        json!({"launchConfig": "wrapped", "workerConfig": "mockw"}),
    );
    create_session(&hub, "legacy");

    let a = start_and_connect(&hub, "a");
    let b = start_and_connect(&hub, "b");
    let legacy = start_and_connect(&hub, "legacy");

    // Each session ran its own launcher.
    let args = |s: &Value| -> Vec<String> {
        serde_json::from_value(s["process"]["args"].clone()).unwrap()
    };
    assert_eq!(a["process"]["command"], BIN);
    let a_args = args(&a);
    assert_eq!(a_args[0], "mock-worker");
    let threads = a_args.iter().position(|x| x == "--threads").unwrap();
    assert_eq!(a_args[threads + 1], "2", "{a_args:?}");
    assert_eq!(b["process"]["command"], "/bin/sh");
    assert!(args(&b).last().unwrap() == "3", "{:?}", args(&b));
    assert!(
        wait_until(DEADLINE, || logs_text(&hub, "b")
            .contains("wrapped-launch 3")),
        "{}",
        logs_text(&hub, "b")
    );
    // The legacy session kept the hub-wide built-in launcher.
    assert_eq!(args(&legacy)[0], "mock-worker");
    assert!(legacy["spec"].get("launchConfig").is_none());
    // Threads and environment come from the launch file, and the
    // environment is never shown in the spec.
    assert_eq!(a["spec"]["threads"], 2);
    assert_eq!(b["spec"]["threads"], 3);
    assert_eq!(a["spec"]["env"], json!({}));
    let env_a = environ(a["process"]["pid"].as_u64().unwrap());
    let env_b = environ(b["process"]["pid"].as_u64().unwrap());
    assert!(env_a.contains(&"LIB_MARK=direct".to_string()), "{env_a:?}");
    assert!(env_b.contains(&"LIB_MARK=wrapped".to_string()), "{env_b:?}");
    let env_legacy = environ(legacy["process"]["pid"].as_u64().unwrap());
    assert!(!env_legacy.iter().any(|v| v.starts_with("LIB_MARK=")));

    // The placeholders were filled in at launch, in place.
    let config = std::fs::read_to_string(dir.path().join("sessions/a/config/config.yaml")).unwrap();
    assert!(config.starts_with("# a worker file"), "{config}");
    assert!(!config.contains("{{"), "{config}");
    let token = worker_token(dir.path(), "a");
    let port = hub.addr.port();
    assert!(
        config.contains(&format!(
            "ws://127.0.0.1:{port}/agent/a/events?token={token}"
        )),
        "{config}"
    );
    assert!(config.contains("/agent/a/confirm?token="), "{config}");
    assert!(
        config.contains(&format!(
            "directory: '{}'",
            dir.path().join("sessions/a").display()
        )),
        "{config}"
    );
    // The library file itself still holds the placeholders.
    let library = hub.get("/api/configurations/worker/mockw").json();
    assert_eq!(library["text"], MOCK_WORKER_YAML);

    // A running session's snapshot is not replaced.
    let before =
        std::fs::read_to_string(dir.path().join("sessions/a/config/launch.jsonc")).unwrap();
    let res = post(
        &hub,
        "/api/sessions/a/configurations",
        json!({"launchConfig": "wrapped", "workerConfig": "mockw"}),
    );
    refused(&res, 409, "session_busy");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("sessions/a/config/launch.jsonc")).unwrap(),
        before
    );
    assert_eq!(get_session(&hub, "a")["spec"]["launchConfig"], "direct");

    // Stopped, it takes the new pair, and the next start uses it.
    let stop = action(&hub, "a", "stop");
    assert_eq!(stop.status, 200, "{}", stop.text());
    wait_session(&hub, "a", |s| s["connected"] == false);
    let res = post(
        &hub,
        "/api/sessions/a/configurations",
        json!({"launchConfig": "wrapped", "workerConfig": "mockw"}),
    );
    assert_eq!(res.status, 200, "{}", res.text());
    let a = start_and_connect(&hub, "a");
    assert_eq!(a["process"]["command"], "/bin/sh");
    assert_eq!(a["spec"]["threads"], 3);
    assert!(
        environ(a["process"]["pid"].as_u64().unwrap()).contains(&"LIB_MARK=wrapped".to_string())
    );
}

#[test]
fn a_library_sessions_pid_file_is_its_own() {
    // The hub-wide launcher is the built-in worker, with no pid file; one
    // launch file starts the built-in worker in the background, leaves
    // its pid in `{session_dir}/worker.pid` and exits: the session is
    // followed to that daemon, and stopped through it.
    let dir = TempDir::new("cfg-pidfile");
    let hub = TestHub::start(dir.path(), &[]);
    save_new(&hub, "worker", "mockw", MOCK_WORKER_YAML);
    let script = format!(
        "\"{BIN}\" mock-worker --config \"$1\" --session \"$2\" \
         </dev/null >\"$3/daemon.log\" 2>&1 & echo $! > \"$3/worker.pid\"; exit 0"
    );
    let launch = json!({
        "launcher": {
            "kind": "command",
            "command": ["/bin/sh", "-c", script, "sh", "{config}", "{session}", "{session_dir}"],
            "pidFile": "{session_dir}/worker.pid",
        },
        "worker": {"stopTimeoutMs": 1500, "sigtermGraceMs": 1000, "sigkillGraceMs": 3000},
    });
    save_new(&hub, "launch", "daemon", &launch.to_string());
    create_session_with_spec(
        &hub,
        "d",
        json!({"launchConfig": "daemon", "workerConfig": "mockw"}),
    );
    create_session(&hub, "legacy");
    let started = action(&hub, "d", "start");
    assert_eq!(started.status, 200, "{}", started.text());
    let launcher = started.json()["pid"].as_u64().unwrap() as u32;
    let pid_path = dir.path().join("sessions/d/worker.pid");
    let mut daemon = None;
    wait_for("the pid file", DEADLINE, || {
        daemon = std::fs::read_to_string(&pid_path)
            .ok()
            .and_then(|text| text.trim().parse::<u32>().ok());
        daemon.is_some()
    });
    let daemon = daemon.unwrap();
    assert_ne!(daemon, launcher);
    let s = wait_session(&hub, "d", |s| {
        s["process"]["pid"] == daemon && s["connected"] == true
    });
    assert_eq!(s["process"]["state"], "running", "{s}");
    // The other session keeps the hub-wide launcher and no pid file.
    let legacy = start_and_connect(&hub, "legacy");
    assert_eq!(legacy["process"]["args"][0], "mock-worker");
    assert!(!dir.path().join("sessions/legacy/worker.pid").exists());
    let stopped = action(&hub, "d", "stop");
    assert_eq!(stopped.status, 200, "{}", stopped.text());
    let s = wait_session(&hub, "d", |s| s["process"]["state"] == "exited");
    assert_eq!(s["process"]["pid"], daemon);
    wait_for("the daemon's end", DEADLINE, || !pid_alive(daemon));
}

#[test]
fn a_library_session_survives_a_restart_and_stops_with_its_own_timings() {
    let dir = TempDir::new("cfg-restart");
    let hub = TestHub::start(dir.path(), &[]);
    save_new(&hub, "worker", "mockw", MOCK_WORKER_YAML);
    save_new(&hub, "launch", "direct", &mock_worker_launch(1, json!({})));
    create_session_with_spec(
        &hub,
        "s",
        json!({"launchConfig": "direct", "workerConfig": "mockw"}),
    );
    // The library files are not needed any more once the snapshot exists.
    for (kind, id) in [("worker", "mockw"), ("launch", "direct")] {
        let path = format!("/api/configurations/{kind}/{id}");
        let rev = hub.get(&path).json()["revision"].clone();
        assert_eq!(delete(&hub, &path, json!({"revision": rev})).status, 200);
    }
    start_and_connect(&hub, "s");
    drop(hub);
    let hub = TestHub::start(dir.path(), &[]);
    let s = start_and_connect(&hub, "s");
    assert_eq!(s["spec"]["launchConfig"], "direct");
    // A restart (its start runs where the stop ended) launches from the
    // snapshot again.
    let first_pid = s["process"]["pid"].clone();
    // A start's spec cannot switch the library pair (only a new snapshot
    // does).
    let restart = post(
        &hub,
        "/api/sessions/s/restart",
        json!({"spec": {"launchConfig": "docker", "workerConfig": "default"}}),
    );
    assert_eq!(restart.status, 200, "{}", restart.text());
    let s = wait_session(&hub, "s", |s| {
        s["connected"] == true && s["process"]["pid"] != first_pid
    });
    assert_eq!(s["process"]["args"][0], "mock-worker");
    assert_eq!(s["spec"]["launchConfig"], "direct");
    assert_eq!(s["spec"]["workerConfig"], "mockw");
    // A broken snapshot fails the start with its reason and runs nothing.
    let stop = action(&hub, "s", "stop");
    assert_eq!(stop.status, 200, "{}", stop.text());
    wait_session(&hub, "s", |s| s["connected"] == false);
    std::fs::write(dir.path().join("sessions/s/config/launch.jsonc"), "{").unwrap();
    let res = action(&hub, "s", "start");
    assert_eq!(res.status, 409, "{}", res.text());
    assert!(res.text().contains("launch snapshot"), "{}", res.text());
    wait_session(&hub, "s", |s| s["process"]["state"] == "failed");

    // The stop ladder uses the launch file's timings: a worker that
    // ignores SIGTERM is killed after its 200 ms grace, not the hub's 5 s.
    save_new(
        &hub,
        "launch",
        "stubborn",
        r#"{"launcher": {"kind": "command", "command": ["/bin/sh", "-c", "trap '' TERM; exec sleep 60"]},
            "worker": {"stopTimeoutMs": 100, "sigtermGraceMs": 200, "sigkillGraceMs": 3000}}"#,
    );
    save_new(&hub, "worker", "mockw", MOCK_WORKER_YAML);
    let res = post(
        &hub,
        "/api/sessions/s/configurations",
        json!({"launchConfig": "stubborn", "workerConfig": "mockw"}),
    );
    assert_eq!(res.status, 200, "{}", res.text());
    let res = action(&hub, "s", "start");
    assert_eq!(res.status, 200, "{}", res.text());
    let pid = res.json()["pid"].as_u64().unwrap() as u32;
    // The shell has replaced itself with sleep (TERM still ignored).
    wait_for("sleep to run", DEADLINE, || {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep")
    });
    let began = std::time::Instant::now();
    let stop = action(&hub, "s", "stop");
    let took = began.elapsed();
    assert_eq!(stop.status, 200, "{}", stop.text());
    assert_eq!(stop.json()["how"], "sigkill", "{}", stop.text());
    assert!(took < std::time::Duration::from_millis(3000), "{took:?}");
}

#[test]
fn a_library_sessions_child_launches_as_its_parent_does() {
    let dir = TempDir::new("cfg-fork");
    let hub = TestHub::start(dir.path(), &[]);
    let worker =
        format!("{MOCK_WORKER_YAML}hub_remote_call:\n  endpoint: '{{{{hub.tools_endpoint}}}}'\n");
    save_new(&hub, "worker", "forking", &worker);
    // A shell wrapper in a working directory relative to the snapshot.
    let wrapped = format!(
        r#"{{"launcher": {{"kind": "command", "cwd": ".", "command": ["/bin/sh", "-c",
            "exec \"$0\" mock-worker --config \"$1\" --session \"$2\" --threads \"$3\"",
            {bin:?}, "{{config}}", "{{session}}", "{{threads}}"]}},
          "worker": {{"threads": 2}},
          "env": {{"LIB_MARK": "wrapped"}}}}"#,
        bin = BIN
    );
    save_new(&hub, "launch", "wrapped", &wrapped);
    create_session_with_spec(
        &hub,
        "p",
        json!({"launchConfig": "wrapped", "workerConfig": "forking"}),
    );
    let parent = start_and_connect(&hub, "p");
    wait_session(&hub, "p", |s| s["identity"]["state"] == "live");
    let child = fork_from(&hub, "p");
    let described = get_session(&hub, &child);
    // The child ran the parent's launcher, environment and threads, from
    // the parent's snapshot directory, not the hub-wide built-in launcher.
    // (A headless child's description leaves its command out; the wrapper
    // has replaced itself with the worker, so its arguments are the
    // wrapper's.)
    let pid = described["process"]["pid"].as_u64().unwrap();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let threads = args.iter().position(|a| *a == b"--threads").unwrap();
    assert_eq!(args[threads + 1], b"2");
    assert_eq!(parent["process"]["command"], "/bin/sh");
    assert!(environ(pid).contains(&"LIB_MARK=wrapped".to_string()));
    let parent_config = dir.path().join("sessions/p/config");
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap(),
        parent_config.canonicalize().unwrap()
    );
    // Its own snapshot holds the parent's launch file, the relative
    // directory made absolute.
    let snapshot = std::fs::read_to_string(
        dir.path()
            .join("subagents")
            .join(&child)
            .join("config/launch.jsonc"),
    )
    .unwrap();
    let snapshot: Value = serde_json::from_str(&snapshot).unwrap();
    assert_eq!(
        snapshot["launcher"]["cwd"],
        parent_config.join(".").display().to_string()
    );
    assert_eq!(snapshot["env"]["LIB_MARK"], "wrapped");
}

#[test]
fn a_replacement_cut_short_by_a_crash_is_settled_at_start() {
    let dir = TempDir::new("cfg-crash");
    let hub = TestHub::start(dir.path(), &[]);
    save_new(&hub, "worker", "mockw", MOCK_WORKER_YAML);
    save_new(
        &hub,
        "launch",
        "one",
        &mock_worker_launch(1, json!({"LIB_MARK": "one"})),
    );
    save_new(
        &hub,
        "launch",
        "two",
        &mock_worker_launch(2, json!({"LIB_MARK": "two"})),
    );
    for id in ["a", "b"] {
        create_session_with_spec(
            &hub,
            id,
            json!({"launchConfig": "one", "workerConfig": "mockw"}),
        );
    }
    let res = post(
        &hub,
        "/api/sessions/b/configurations",
        json!({"launchConfig": "two", "workerConfig": "mockw"}),
    );
    assert_eq!(res.status, 200, "{}", res.text());
    drop(hub);
    // Session a: cut after its old snapshot was moved aside and before the
    // new one took its place. Session b: cut after its new snapshot was in
    // place, before its spec was stored (the spec still names the old
    // pair).
    let a = dir.path().join("sessions/a");
    std::fs::rename(a.join("config"), a.join(".config-backup-1")).unwrap();
    std::fs::create_dir(a.join(".config-2")).unwrap();
    std::fs::write(a.join(".config-2/launch.jsonc"), "{").unwrap();
    let store = dir.path().join("hub.db");
    let conn = rusqlite::Connection::open(&store).unwrap();
    let changed = conn
        .execute(
            "UPDATE sessions SET spec = json_set(spec, '$.launchConfig', 'one') WHERE id = 'b'",
            [],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(conn);
    // Writes cut short leave temporary siblings: the hub's own go at the
    // next start, a worker's (its persistence beside them) stay.
    let tag = "0123456789abcdef0123456789abcdef";
    let leftovers = [
        dir.path()
            .join(format!("configs/launch/.one.jsonc.{tag}.tmp")),
        dir.path().join(format!("sessions/b/.plan.json.{tag}.tmp")),
        dir.path()
            .join(format!("sessions/b/config/.config.yaml.{tag}.tmp")),
    ];
    let workers = dir.path().join(format!("sessions/b/.state.json.{tag}.tmp"));
    for path in leftovers.iter().chain([&workers]) {
        std::fs::write(path, "half").unwrap();
    }

    let hub = TestHub::start(dir.path(), &[]);
    for path in &leftovers {
        assert!(!path.exists(), "{}", path.display());
    }
    assert!(workers.is_file());
    assert!(a.join("config/launch.jsonc").is_file());
    assert!(!a.join(".config-backup-1").exists() && !a.join(".config-2").exists());
    let started = start_and_connect(&hub, "a");
    let pid = started["process"]["pid"].as_u64().unwrap();
    assert!(environ(pid).contains(&"LIB_MARK=one".to_string()));
    assert_eq!(started["spec"]["launchConfig"], "one");
    // b names, launches from and keeps the pair its snapshot holds.
    assert_eq!(get_session(&hub, "b")["spec"]["launchConfig"], "two");
    let started = start_and_connect(&hub, "b");
    let pid = started["process"]["pid"].as_u64().unwrap();
    assert!(environ(pid).contains(&"LIB_MARK=two".to_string()));
    drop(hub);
    let hub = TestHub::start(dir.path(), &[]);
    assert_eq!(get_session(&hub, "b")["spec"]["launchConfig"], "two");
}

#[test]
fn the_panel_creates_library_sessions_through_the_same_command() {
    let dir = TempDir::new("cfg-panel");
    let hub = TestHub::start(dir.path(), &[]);
    save_new(&hub, "worker", "mockw", MOCK_WORKER_YAML);
    save_new(&hub, "launch", "direct", &mock_worker_launch(1, json!({})));
    let mut ws = panel_connect(&hub);
    next_of(&mut ws, "welcome");
    send_json(
        &mut ws,
        json!({"v": 1, "type": "create_session", "session": "p",
               "spec": {"launchConfig": "direct", "workerConfig": "mockw"}}),
    );
    let created = next_of(&mut ws, "created");
    assert_eq!(created["session"]["spec"]["launchConfig"], "direct");
    assert!(dir.path().join("sessions/p/config/launch.jsonc").is_file());
    send_json(
        &mut ws,
        json!({"v": 1, "type": "create_session", "session": "q",
               "spec": {"launchConfig": "direct", "workerConfig": "missing"}}),
    );
    let error = next_of(&mut ws, "error");
    assert_eq!(error["error"], "invalid_session", "{error}");
    assert!(!dir.path().join("sessions/q").exists());
    // Started from the panel, it runs its own launcher.
    send_json(
        &mut ws,
        json!({"v": 1, "type": "worker", "session": "p", "action": "start"}),
    );
    let accepted = next_of(&mut ws, "accepted");
    assert_eq!(accepted["result"]["ok"], true, "{accepted}");
    let s = wait_session(&hub, "p", |s| s["connected"] == true);
    assert_eq!(s["process"]["command"], BIN);
}
