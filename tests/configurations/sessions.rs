//! Library sessions: sessions created from a saved pair take a snapshot of
//! it, launch with their own launchers and settings, keep their pid files
//! and timings across restarts, hand them to their children, settle a
//! replacement a crash cut short, and are created the same way from the
//! panel.

use super::*;

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
