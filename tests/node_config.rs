//! What a Node hub's configuration means here, with real processes: its
//! first-run file, the session spec fields it adds (automatic compaction,
//! event capacity, the modality assistant), launchers that daemonize and
//! leave their worker's pid in `launcher.pidFile`, and endpoints advertised
//! through a proxy (`endpoints.*`).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{json, Value};

use crate::util::*;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/node-hub-first-run.config.jsonc"
);

/// The worker configuration the hub wrote for `session`.
fn worker_config(hub: &TestHub, session: &str) -> Value {
    let path = hub
        .data_dir
        .join("sessions")
        .join(session)
        .join("config/config.yaml");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn a_node_hub_first_run_file_starts_the_hub_with_its_meaning() {
    let dir = TempDir::new("node-first-run");
    let out = Command::new(BIN)
        .args(["check-config", FIXTURE])
        .env("HOME", dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Only what a test must change: the addresses and the data directory.
    let hub = TestHub::start(dir.path(), &["-c", FIXTURE]);
    let meta = hub.get("/api/meta").json();
    assert_eq!(meta["launcher"]["kind"], "simplex-worker");
    assert_eq!(meta["mock"]["enabled"], false);

    create_session(&hub, "node");
    let spec = get_session(&hub, "node")["spec"].clone();
    assert_eq!(spec["provider"], "deepseek");
    assert_eq!(spec["modalityAssistProvider"], "deepseek");
    assert_eq!(
        (
            &spec["autoCompactThreshold"],
            &spec["maxAutoCompactions"],
            &spec["eventCapacity"]
        ),
        (&json!(0), &json!(5), &json!(1024))
    );

    // The start runs the file's worker binary, which this machine lacks:
    // it fails after the worker configuration was written.
    let res = action(&hub, "node", "start");
    assert_eq!(res.status, 409, "{}", res.text());
    let error = res.json()["error"].as_str().unwrap().to_string();
    assert!(
        error.contains("cannot spawn")
            && error.contains("@hazer-bjtu/simplex-hub/build/bin/simplex_worker"),
        "{error}"
    );
    let cfg = worker_config(&hub, "node");
    assert_eq!(cfg["driver_model"], "deepseek");
    assert_eq!(cfg["modality_assist_model"], "modality_assist");
    assert_eq!(
        cfg["providers"]["modality_assist"]["model"],
        "deepseek-flash"
    );
    assert_eq!(
        cfg["providers"]["modality_assist"]["endpoint"]["auth"]["api_key"],
        "${DEEPSEEK_API_KEY}"
    );
    assert_eq!(cfg["worker"]["auto_compact_threshold"], 0);
    assert_eq!(cfg["worker"]["max_auto_compactions"], 5);
    assert_eq!(cfg["worker"]["event_capacity"], 1024);
    assert!(cfg["hub_remote_call"]["endpoint"]
        .as_str()
        .unwrap()
        .starts_with(&format!(
            "ws://127.0.0.1:{}/agent/node/tools?token=",
            hub.tools_addr.unwrap().port()
        )));
}

#[test]
fn spec_fields_reach_the_worker_and_bad_ones_are_refused() {
    let dir = TempDir::new("node-spec");
    let hub = hub_with(
        &dir,
        json!({"worker": {"autoCompactThreshold": 90000, "maxAutoCompactions": 2}}),
    );
    for (spec, field) in [
        (json!({"eventCapacity": 0}), "eventCapacity"),
        (
            json!({"modalityAssistProvider": "mock"}),
            "modalityAssistProvider",
        ),
        (
            json!({"modalityAssistProvider": "nobody"}),
            "modalityAssistProvider",
        ),
        (json!({"maxAutoCompactions": 0}), "maxAutoCompactions"),
        (
            json!({"autoCompactThreshold": 2_147_483_648_u64}),
            "autoCompactThreshold",
        ),
    ] {
        let res = post(
            &hub,
            "/api/sessions",
            json!({"session": "bad", "spec": spec}),
        );
        assert_eq!(res.status, 400, "{spec}: {}", res.text());
        assert!(res.text().contains(field), "{spec}: {}", res.text());
    }

    // Configuration defaults.
    create_session(&hub, "defaults");
    assert_eq!(action(&hub, "defaults", "start").json()["ok"], true);
    wait_session(&hub, "defaults", |s| s["identity"]["state"] == "live");
    let cfg = worker_config(&hub, "defaults");
    assert_eq!(cfg["driver_model"], "mock");
    assert!(cfg.get("modality_assist_model").is_none(), "{cfg}");
    assert_eq!(cfg["worker"]["auto_compact_threshold"], 90000);
    assert_eq!(cfg["worker"]["max_auto_compactions"], 2);

    // The session's own values, and an assistant it asks for.
    let spec = json!({"autoCompactThreshold": 1000, "maxAutoCompactions": 3,
                      "eventCapacity": 64, "modalityAssistProvider": "deepseek"});
    create_session_with_spec(&hub, "own", spec);
    assert_eq!(action(&hub, "own", "start").json()["ok"], true);
    let s = wait_session(&hub, "own", |s| s["identity"]["state"] == "live");
    let cfg = worker_config(&hub, "own");
    assert_eq!(
        cfg["worker"],
        json!({"max_exchanges": 512, "auto_compact_threshold": 1000,
               "max_auto_compactions": 3, "event_capacity": 64,
               "system_prompt_file": "prompts/coding_agent.yaml",
               "environment": {"workspace": "", "platform": "", "software": []}})
    );
    assert_eq!(cfg["modality_assist_model"], "modality_assist");
    assert_eq!(cfg["providers"]["modality_assist"]["plugin"], "deepseek");
    assert_eq!(s["spec"]["eventCapacity"], 64);
    assert_eq!(s["spec"]["modalityAssistProvider"], "deepseek");
}

/// A hub whose `command` launcher starts the built-in worker in the
/// background, writes its pid to `{session_dir}/worker.pid` and exits 0.
fn daemonizing_hub(dir: &TempDir) -> TestHub {
    daemonizing_hub_args(dir, &[])
}

/// `daemonizing_hub` with more command line arguments.
fn daemonizing_hub_args(dir: &TempDir, args: &[&str]) -> TestHub {
    let script = format!(
        "\"{BIN}\" mock-worker --config \"$1\" --session \"$2\" \
         </dev/null >\"$3/daemon.log\" 2>&1 & echo $! > \"$3/worker.pid\"; exit 0"
    );
    hub_with_args(
        dir,
        json!({
            "launcher": {
                "kind": "command",
                "command": ["/bin/sh", "-c", script, "sh", "{config}", "{session}", "{session_dir}"],
                "pidFile": "{session_dir}/worker.pid",
            },
            "worker": short_stop_ladder(),
        }),
        args,
    )
}

/// The pid the launcher of `session` left in its pid file.
fn pid_file(hub: &TestHub, session: &str) -> u32 {
    let path = hub
        .data_dir
        .join("sessions")
        .join(session)
        .join("worker.pid");
    let mut pid = None;
    wait_for("the pid file", DEADLINE, || {
        pid = std::fs::read_to_string(&path)
            .ok()
            .and_then(|text| text.trim().parse().ok());
        pid.is_some()
    });
    pid.unwrap()
}

/// Starts `session` and waits until its record follows the daemon (the
/// pid in its pid file) and that worker is connected; returns the
/// launcher's pid and the daemon's.
fn start_daemonized(hub: &TestHub, session: &str) -> (u32, u32) {
    // A previous start's pid file would name the previous daemon until the
    // new launcher rewrites it.
    let _ = std::fs::remove_file(
        hub.data_dir
            .join("sessions")
            .join(session)
            .join("worker.pid"),
    );
    let started = action(hub, session, "start").json();
    assert_eq!(started["ok"], true, "{started}");
    let launcher = started["pid"].as_u64().unwrap() as u32;
    let daemon = pid_file(hub, session);
    assert_ne!(daemon, launcher);
    let s = wait_session(hub, session, |s| {
        s["process"]["pid"] == daemon && s["identity"]["state"] == "live"
    });
    assert_eq!(s["process"]["state"], "running", "{s}");
    assert!(pid_alive(daemon));
    wait_for("the launcher's end", DEADLINE, || !pid_alive(launcher));
    (launcher, daemon)
}

#[test]
fn a_daemonizing_launcher_is_followed_through_its_pid_file() {
    let dir = TempDir::new("daemon-follow");
    let hub = daemonizing_hub(&dir);
    create_session_with_spec(&hub, "d", json!({"provider": "mock"}));
    let (launcher, daemon) = start_daemonized(&hub, "d");
    // The log is read by a thread of the test; the line may trail the state.
    let line =
        format!("the launcher (pid {launcher}) daemonized; following the worker pid {daemon}");
    assert!(
        wait_until(DEADLINE, || hub.log_text().contains(&line)),
        "{}",
        hub.log_text()
    );
    let stopped = action(&hub, "d", "stop").json();
    assert_eq!(
        stopped,
        json!({"ok": true, "how": "shutdown-signal", "forced": false})
    );
    let s = wait_session(&hub, "d", |s| s["process"]["state"] == "exited");
    assert_eq!(s["process"]["pid"], daemon);
    // The daemon was reparented to the hub, which reaped it with status.
    assert_eq!(s["process"]["exit_code"], 0, "{s}");
    assert!(!pid_alive(daemon));

    // Force-kill reaches the daemon through the group it shares with its
    // (long gone) launcher.
    let (_, daemon) = start_daemonized(&hub, "d");
    let killed = action(&hub, "d", "force-kill").json();
    assert_eq!(
        killed,
        json!({"ok": true, "how": "sigkill-process-group", "forced": true})
    );
    let s = wait_session(&hub, "d", |s| s["process"]["state"] == "exited");
    assert_eq!(s["process"]["signal"], "SIGKILL", "{s}");
    assert_eq!(s["process"]["signal_number"], 9, "{s}");
    assert!(!pid_alive(daemon));
}

#[test]
fn signals_reach_the_daemon_and_survive_a_hub_restart() {
    let dir = TempDir::new("daemon-restart");
    let mut first = daemonizing_hub(&dir);
    let spec = json!({"provider": "mock", "model": "mock-ignore-shutdown"});
    create_session_with_spec(&first, "r", spec);
    let (_, daemon) = start_daemonized(&first, "r");
    first.kill9();
    assert!(pid_alive(daemon), "the worker died with the hub");

    // On the same addresses, so the worker finds the hub again.
    let listen = first.addr.to_string();
    let tools = first.tools_addr.unwrap().port().to_string();
    let second = daemonizing_hub_args(&dir, &["--listen", &listen, "--tools-port", &tools]);
    let s = wait_session(&second, "r", |s| {
        s["process"]["adopted"] == true && s["identity"]["state"] == "live"
    });
    assert_eq!(s["process"]["pid"], daemon, "{s}");
    assert_eq!(s["process"]["state"], "running");
    // The worker ignores the protocol shutdown; SIGTERM, sent to the
    // adopted daemon (verified by its start time), ends it.
    let stopped = action(&second, "r", "stop").json();
    assert_eq!(
        stopped,
        json!({"ok": true, "how": "sigterm", "forced": true})
    );
    wait_session(&second, "r", |s| s["process"]["state"] == "exited");
    assert!(!pid_alive(daemon));
}

#[test]
fn a_stale_pid_file_is_never_followed() {
    let dir = TempDir::new("daemon-stale");
    // A process that started before the launch, named by the pid file.
    let mut stranger = KillOnDrop(
        Command::new("sleep")
            .arg("600")
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = stranger.0.id();
    let script = format!("echo {pid} > \"$1/worker.pid\"; exit 0");
    let hub = hub_with(
        &dir,
        json!({
            "launcher": {
                "kind": "command",
                "command": ["/bin/sh", "-c", script, "sh", "{session_dir}"],
                "pidFile": "{session_dir}/worker.pid",
            },
        }),
    );
    create_session_with_spec(&hub, "s", json!({"provider": "mock"}));
    let launcher = action(&hub, "s", "start").json()["pid"].as_u64().unwrap() as u32;
    let s = wait_session(&hub, "s", |s| s["process"]["state"] == "exited");
    assert_eq!(s["process"]["pid"], launcher, "{s}");
    // The log is read by a thread of the test; the line may trail the state.
    assert!(
        wait_until(DEADLINE, || hub
            .log_text()
            .contains("names no live worker started after it")),
        "{}",
        hub.log_text()
    );
    assert_eq!(
        action(&hub, "s", "stop").json(),
        json!({"ok": true, "how": "already-exited", "forced": false})
    );
    assert!(
        matches!(stranger.0.try_wait(), Ok(None)),
        "the stranger was signalled"
    );
}

/// A reverse proxy in front of the hub's main listener: it takes
/// `<prefix>/agent/...` on its own port, strips `prefix`, sets `Host` to
/// the hub's address and relays the bytes both ways. It records the
/// request targets it saw.
struct PrefixProxy {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
}

fn prefix_proxy(prefix: &'static str, target: Arc<OnceLock<SocketAddr>>) -> PrefixProxy {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for client in listener.incoming().map_while(Result::ok) {
            let (target, log) = (target.clone(), log.clone());
            std::thread::spawn(move || relay(client, prefix, &target, &log));
        }
    });
    PrefixProxy { addr, seen }
}

fn relay(
    mut client: TcpStream,
    prefix: &str,
    target: &OnceLock<SocketAddr>,
    seen: &Mutex<Vec<String>>,
) {
    // The request head, byte by byte so nothing after it is consumed.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if client.read(&mut byte).unwrap_or(0) == 0 {
            return;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let Some(hub) = target.get().copied() else {
        return;
    };
    let mut lines = head.split("\r\n");
    let request = lines.next().unwrap_or_default();
    let mut parts = request.splitn(3, ' ');
    let (method, path, version) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    seen.lock().unwrap().push(path.to_string());
    let Some(rest) = path.strip_prefix(prefix) else {
        let _ = client.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
        return;
    };
    let mut forwarded = format!("{method} {rest} {version}\r\n");
    for line in lines.filter(|l| !l.is_empty()) {
        if line.to_ascii_lowercase().starts_with("host:") {
            forwarded.push_str(&format!("Host: {hub}\r\n"));
        } else {
            forwarded.push_str(line);
            forwarded.push_str("\r\n");
        }
    }
    forwarded.push_str("\r\n");
    let Ok(mut upstream) = TcpStream::connect(hub) else {
        return;
    };
    if upstream.write_all(forwarded.as_bytes()).is_err() {
        return;
    }
    let (mut up_read, mut client_write) =
        (upstream.try_clone().unwrap(), client.try_clone().unwrap());
    let back = std::thread::spawn(move || {
        let _ = std::io::copy(&mut up_read, &mut client_write);
        let _ = client_write.shutdown(Shutdown::Both);
    });
    let _ = std::io::copy(&mut client, &mut upstream);
    let _ = upstream.shutdown(Shutdown::Both);
    let _ = back.join();
}

#[test]
fn workers_dial_the_advertised_origins_through_a_proxy() {
    let dir = TempDir::new("endpoints");
    let target = Arc::new(OnceLock::new());
    let proxy = prefix_proxy("/simplex", target.clone());
    let origin = format!("ws://{}/simplex/", proxy.addr);
    let hub = hub_with(
        &dir,
        json!({"endpoints": {"events": origin, "confirm": origin.trim_end_matches('/')}}),
    );
    target.set(hub.addr).unwrap();

    create_session(&hub, "px");
    assert_eq!(action(&hub, "px", "start").json()["ok"], true);
    wait_session(&hub, "px", |s| s["identity"]["state"] == "live");
    let cfg = worker_config(&hub, "px");
    let token = worker_token(&hub.data_dir, "px");
    let via_proxy =
        |route: &str| format!("ws://{}/simplex/agent/px/{route}?token={token}", proxy.addr);
    assert_eq!(cfg["client"]["endpoint"], via_proxy("events"));
    assert_eq!(
        cfg["security"]["confirmation"]["endpoint"],
        via_proxy("confirm")
    );
    // Tools keep the hub's own listener: no origin was given for them.
    let tools = hub.tools_addr.unwrap();
    assert_eq!(
        cfg["hub_remote_call"]["endpoint"],
        format!("ws://{tools}/agent/px/tools?token={token}")
    );

    // A tool call's confirmation travels through the proxy too.
    post(
        &hub,
        "/api/sessions/px/input",
        text_content("/run echo via-proxy"),
    );
    let s = wait_session(&hub, "px", |s| {
        s["confirmations"]
            .as_array()
            .is_some_and(|c| c.iter().any(|p| p["state"] == "awaiting-decision"))
    });
    let cid = s["confirmations"][0]["confirmation_id"].as_str().unwrap();
    let res = post(
        &hub,
        &format!("/api/sessions/px/confirmations/{cid}"),
        json!({"decision": "approved"}),
    );
    assert_eq!(res.status, 200, "{}", res.text());
    let finished = wait_event(&hub, "px", |e| e["event"] == "run_finished");
    assert_eq!(finished["data"]["status"], "completed");
    let seen = proxy.seen.lock().unwrap().clone();
    for route in ["events", "confirm"] {
        let prefix = format!("/simplex/agent/px/{route}?token=");
        assert!(seen.iter().any(|p| p.starts_with(&prefix)), "{seen:?}");
    }
}
