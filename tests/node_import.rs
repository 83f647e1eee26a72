//! An existing Node hub's data directory: its `hub.json` sessions and its
//! headless children's `metadata.json` are imported into `hub.db` once,
//! workers it launched are adopted and keep authenticating with their
//! tokens, and a corrupt or foreign file stops the start with nothing
//! imported. Every fixture is written in the Node hub's shapes, with real
//! built-in workers started by the test as the Node hub would have.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::util::*;

/// The bytes of the given files, to compare before and after.
fn contents(files: &[PathBuf]) -> Vec<Vec<u8>> {
    files.iter().map(|f| std::fs::read(f).unwrap()).collect()
}

fn write_json(path: &Path, value: &Value) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    // The Node hub writes two-space indented JSON and a final newline.
    let mut text = serde_json::to_string_pretty(value).unwrap();
    text.push('\n');
    std::fs::write(path, text).unwrap();
}

/// A worker the Node hub launched for `session` under `root`, connecting
/// to `addr` with `token`; with its pid and `/proc` start time recorded
/// the way the Node hub records them.
fn node_worker(root: &Path, session: &str, token: &str, addr: SocketAddr) -> (KillOnDrop, Value) {
    let child = spawn_worker_at(root, session, token, addr, None, "mock-text");
    let pid = child.id();
    let record = json!({
        "pid": pid,
        "pid_start_time": proc_start_time(pid),
        "started_at": "2026-05-01T09:00:01.000Z",
        "command": BIN,
        "args": ["mock-worker", "--config", root.join("config/config.yaml"), "--session", session],
        "cwd": root,
        "pid_file": null,
        "log_path": root.join("logs/worker.log"),
        "state": "running",
    });
    (KillOnDrop(child), record)
}

/// `hub.json` as the Node hub writes it.
fn hub_json(sessions: Vec<Value>) -> Value {
    json!({"version": 1, "saved_at": "2026-05-01T10:00:00.000Z", "sessions": sessions})
}

fn node_session(id: &str, token: &str, spec: Value, created: &str, process: Value) -> Value {
    json!({
        "id": id,
        "token": token,
        "spec": spec,
        "created_at": created,
        "lifecycle_id": format!("7d2f0c4e-{id}-4000-8000-000000000000"),
        "process": process,
    })
}

/// `hub_meta`'s import marker and the session count in `hub.db`.
fn store_state(data_dir: &Path) -> (Option<String>, i64) {
    let conn = rusqlite::Connection::open(data_dir.join("hub.db")).unwrap();
    let marker = conn
        .query_row(
            "SELECT value FROM hub_meta WHERE key = 'node_import'",
            [],
            |r| r.get(0),
        )
        .ok();
    let sessions = conn
        .query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))
        .unwrap();
    (marker, sessions)
}

fn config() -> Value {
    json!({"worker": short_stop_ladder()})
}

#[test]
fn a_node_data_directory_is_imported_and_its_running_worker_adopted() {
    let dir = TempDir::new("node-import");
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let token = "Jm3xR0q_Node-Token_8sVbQ2wYc1Zt"; // base64url, as the Node hub makes them
    let alpha_root = dir.path().join("sessions/alpha");
    let (worker, process) = node_worker(&alpha_root, "alpha", token, addr);
    let pid = worker.0.id();
    let alpha_spec = json!({"provider": "mock", "model": "mock-text", "threads": 2});
    let beta_spec = json!({"provider": "mock", "model": "mock-echo"});
    let hub_file = dir.path().join("hub.json");
    write_json(
        &hub_file,
        &hub_json(vec![
            node_session(
                "alpha",
                token,
                alpha_spec.clone(),
                "2026-05-01T09:00:00.000Z",
                process,
            ),
            node_session(
                "beta",
                "tok-beta",
                beta_spec.clone(),
                "2026-05-01T09:30:00.000Z",
                Value::Null,
            ),
        ]),
    );
    let plan_file = alpha_root.join("plan.json");
    write_json(
        &plan_file,
        &json!({"markdown": "- import\n- adopt", "revision": 2, "updated_at": "2026-05-01T09:40:00.000Z"}),
    );
    let node_files = [hub_file.clone(), plan_file.clone()];
    let before = contents(&node_files);

    let listen = addr.to_string();
    let mut hub = hub_with_args(&dir, config(), &["--listen", &listen]);
    assert!(
        hub.log_text()
            .contains("imported 2 sessions, 1 process records, 0 subagents and 1 plans"),
        "{}",
        hub.log_text()
    );
    assert_eq!(session_ids(&hub), ["alpha", "beta"]);
    let alpha = get_session(&hub, "alpha");
    assert_eq!(alpha["spec"], alpha_spec);
    assert_eq!(alpha["created_at"], "2026-05-01T09:00:00.000Z");
    assert_eq!(get_session(&hub, "beta")["spec"], beta_spec);
    assert_eq!(get_session(&hub, "beta")["process"], Value::Null);
    let p = &alpha["process"];
    assert_eq!(p["state"], "running", "{p}");
    assert_eq!(p["pid"], pid);
    assert_eq!(p["adopted"], true);
    // The worker's event connection authenticates with the old token...
    let live = wait_session(&hub, "alpha", |s| s["identity"]["state"] == "live");
    assert!(live["stats"]["events"].as_u64().unwrap() >= 1, "{live}");
    assert_eq!(worker_token(&hub.data_dir, "alpha"), token);
    // ...which is checked: another token is refused.
    assert_eq!(
        ws_refusal(hub.addr, "/agent/alpha/events?token=not-it"),
        401
    );
    // The adopted worker runs: a run completes.
    let res = post(
        &hub,
        "/api/sessions/alpha/input",
        json!({"content": [{"type": "text", "modality": "text", "raw": "after the move"}]}),
    );
    assert_eq!(res.status, 202, "{}", res.text());
    let finished = wait_event(&hub, "alpha", |e| e["event"] == "run_finished");
    assert_eq!(finished["data"]["status"], "completed");
    let (marker, sessions) = store_state(&hub.data_dir);
    assert_eq!(sessions, 2);
    let marker: Value = serde_json::from_str(&marker.expect("no import marker")).unwrap();
    assert_eq!(
        (marker["sessions"].clone(), marker["processes"].clone()),
        (json!(2), json!(1))
    );

    // A restart (the worker outlives the hub) imports nothing twice and
    // adopts the worker again from hub.db.
    hub.kill9();
    assert!(pid_alive(pid), "the worker died with its hub");
    let hub = hub_with_args(&dir, config(), &["--listen", &listen]);
    assert!(!hub.log_text().contains("imported"), "{}", hub.log_text());
    assert_eq!(session_ids(&hub), ["alpha", "beta"]);
    assert_eq!(store_state(&hub.data_dir).1, 2);
    let p = get_session(&hub, "alpha")["process"].clone();
    assert_eq!(
        (p["pid"].clone(), p["adopted"].clone()),
        (json!(pid), json!(true)),
        "{p}"
    );
    wait_session(&hub, "alpha", |s| s["identity"]["state"] == "live");
    assert_eq!(contents(&node_files), before, "a Node file changed");

    let stopped = action(&hub, "alpha", "stop").json();
    assert_eq!(stopped["ok"], true, "{stopped}");
    assert!(wait_until(DEADLINE, || !pid_alive(pid)));
    drop(worker);
}

#[test]
fn a_node_headless_child_is_imported_with_its_family() {
    let dir = TempDir::new("node-import-child");
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let child_id = "subagent-5c1e2d3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f";
    let parent_token = "parent-token-from-node";
    let child_token = "child-token-from-node";
    let (parent_worker, parent_process) = node_worker(
        &dir.path().join("sessions/lead"),
        "lead",
        parent_token,
        addr,
    );
    let child_root = dir.path().join("subagents").join(child_id);
    let (child_worker, child_process) = node_worker(&child_root, child_id, child_token, addr);
    let child_pid = child_worker.0.id();
    let parent = node_session(
        "lead",
        parent_token,
        json!({"provider": "mock"}),
        "2026-05-01T09:00:00.000Z",
        parent_process,
    );
    let parent_lifecycle = parent["lifecycle_id"].clone();
    let hub_file = dir.path().join("hub.json");
    write_json(&hub_file, &hub_json(vec![parent]));
    let metadata = child_root.join("metadata.json");
    write_json(
        &metadata,
        &json!({
            "id": child_id,
            "token": child_token,
            "spec": {"threads": 1},
            "created_at": "2026-05-01T09:05:00.000Z",
            "lifecycle_id": "c0ffee00-0000-4000-8000-000000000001",
            "process": child_process,
            "kind": "headless",
            "cascading_parent": {"session_id": "lead", "lifecycle_id": parent_lifecycle,
                                 "worker_id": "0f9e8d7c-0000-4000-8000-00000000000a"},
            "subagent": {"parent": "lead", "lifecycle": "ready", "policy": "approve",
                         "health": "healthy", "reason": "live identified worker event channel",
                         "observed_at": "2026-05-01T09:06:00.000Z", "active": false},
            "error": "",
            "uncertain_start": false,
            "termination_confirmed": false,
            "cleanup_attempts": 0,
            "retry_at": 0,
        }),
    );
    let operations = child_root.join("operations.json");
    write_json(
        &operations,
        &json!({"receipts": [], "requests": [
            {"request_id": "req-1", "operation": "message", "state": "finished",
             "run_id": "run-1", "status": "completed", "at": "2026-05-01T09:07:00.000Z"}
        ]}),
    );
    let node_files = [hub_file, metadata, operations];
    let before = contents(&node_files);

    let listen = addr.to_string();
    let mut hub = hub_with_args(&dir, config(), &["--listen", &listen]);
    assert!(
        hub.log_text()
            .contains("imported 1 sessions, 2 process records, 1 subagents"),
        "{}",
        hub.log_text()
    );
    let child = wait_session(&hub, child_id, |s| s["identity"]["state"] == "live");
    assert_eq!(child["kind"], "headless");
    let sub = &child["subagent"];
    assert_eq!(sub["parent"], "lead");
    assert_eq!(sub["parent_ref"]["session_id"], "lead");
    assert_eq!(sub["parent_ref"]["lifecycle_id"], parent_lifecycle);
    assert_eq!(sub["depth"], 1);
    assert_eq!(sub["policy"], "approve");
    assert_eq!(sub["lifecycle"], "ready", "{child}");
    assert_eq!(child["process"]["pid"], child_pid);
    assert_eq!(child["process"]["adopted"], true);
    assert_eq!(worker_token(&hub.data_dir, child_id), child_token);
    wait_session(&hub, "lead", |s| s["identity"]["state"] == "live");
    assert_eq!(
        hub.get("/api/subagents/recovery").json(),
        json!({"blocked": false, "reason": null})
    );
    let conn = rusqlite::Connection::open(hub.data_dir.join("hub.db")).unwrap();
    let outcomes: String = conn
        .query_row(
            "SELECT outcomes FROM subagents WHERE id = ?1",
            [child_id],
            |r| r.get(0),
        )
        .unwrap();
    assert!(outcomes.contains("req-1"), "{outcomes}");
    drop(conn);
    assert_eq!(contents(&node_files), before, "a Node file changed");

    hub.kill9();
    let hub = hub_with_args(&dir, config(), &["--listen", &listen]);
    assert!(!hub.log_text().contains("imported"), "{}", hub.log_text());
    assert_eq!(store_state(&hub.data_dir).1, 2);
    let child = wait_session(&hub, child_id, |s| s["identity"]["state"] == "live");
    assert_eq!(child["subagent"]["lifecycle"], "ready", "{child}");
    drop(hub);
    drop((parent_worker, child_worker));
}

/// Starts the hub over `dir` expecting it to refuse; its stderr.
fn refused_start(dir: &TempDir) -> String {
    let data = dir.path().display().to_string();
    let out = run_bin(
        &[
            "--data-dir",
            &data,
            "-l",
            "127.0.0.1:0",
            "--tools-port",
            "0",
        ],
        dir.path(),
    );
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn a_corrupt_or_foreign_hub_json_is_refused_and_nothing_imported() {
    let cases: [(&str, &[u8], &str); 4] = [
        ("truncated", b"{\"version\": 1, \"sessions\": [{\"id\": \"a\", ", "is not valid JSON"),
        (
            "foreign",
            b"{\"name\": \"my-app\", \"version\": \"1.0.0\", \"dependencies\": {}}\n",
            "is not a Node Simplex Hub state file",
        ),
        ("future", b"{\"version\": 2, \"sessions\": []}\n", "version: 2 is not supported"),
        (
            "tokenless",
            b"{\"version\": 1, \"sessions\": [{\"id\": \"ok\", \"token\": \"t\"}, {\"id\": \"b\"}]}\n",
            "sessions[1].token: is missing",
        ),
    ];
    for (tag, bytes, expected) in cases {
        let dir = TempDir::new(&format!("node-import-{tag}"));
        let hub_file = dir.path().join("hub.json");
        std::fs::write(&hub_file, bytes).unwrap();
        let err = refused_start(&dir);
        assert!(
            err.contains(&hub_file.display().to_string()),
            "{tag}: {err}"
        );
        assert!(err.contains(expected), "{tag}: {err}");
        assert!(err.contains("nothing was imported"), "{tag}: {err}");
        assert_eq!(store_state(dir.path()), (None, 0), "{tag}");
        assert_eq!(
            std::fs::read(&hub_file).unwrap(),
            bytes,
            "{tag}: hub.json changed"
        );
    }

    // Moved aside, the file is ignored and the hub starts.
    let dir = TempDir::new("node-import-aside");
    std::fs::write(dir.path().join("hub.json"), b"{ not json").unwrap();
    refused_start(&dir);
    std::fs::rename(
        dir.path().join("hub.json"),
        dir.path().join("hub.json.broken"),
    )
    .unwrap();
    let hub = TestHub::start(dir.path(), &[]);
    assert!(session_ids(&hub).is_empty());
}

#[test]
fn a_bad_child_record_refuses_the_whole_import() {
    let dir = TempDir::new("node-import-badchild");
    write_json(
        &dir.path().join("hub.json"),
        &hub_json(vec![node_session(
            "lead",
            "t",
            json!({}),
            "2026-05-01T09:00:00.000Z",
            Value::Null,
        )]),
    );
    let child_id = "subagent-0a1b2c3d-4e5f-4a6b-8c7d-8e9f0a1b2c3d";
    let metadata = dir
        .path()
        .join("subagents")
        .join(child_id)
        .join("metadata.json");
    write_json(
        &metadata,
        &json!({"id": child_id, "token": "c", "kind": "headless",
                "cascading_parent": {"session_id": "lead", "lifecycle_id": "l", "worker_id": "w"},
                "subagent": {"lifecycle": "ready", "policy": "sometimes"}}),
    );
    let err = refused_start(&dir);
    assert!(err.contains(&metadata.display().to_string()), "{err}");
    assert!(err.contains("subagent.policy"), "{err}");
    assert_eq!(
        store_state(dir.path()),
        (None, 0),
        "the session was imported without its child"
    );
}
