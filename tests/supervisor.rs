//! The supervisor with real child processes: the built-in worker and
//! small shell workers launched through the `command` launcher.

use serde_json::{json, Value};

use crate::util::*;

/// Short ladder timings so escalation tests finish quickly.
fn config(extra: Value) -> Value {
    let mut base = json!({"worker": short_stop_ladder()});
    merge(&mut base, extra);
    base
}

fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(b), Value::Object(e)) => {
            for (k, v) in e {
                match b.get_mut(&k) {
                    Some(slot) if slot.is_object() && v.is_object() => merge(slot, v),
                    _ => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, e) => *b = e,
    }
}

fn process(hub: &TestHub, id: &str) -> Value {
    get_session(hub, id)["process"].clone()
}

/// Pids of live processes whose process group is `pgid`.
fn group_members(pgid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        if fields.first() != Some(&"Z")
            && fields.get(2).and_then(|g| g.parse::<u32>().ok()) == Some(pgid)
        {
            out.push(pid);
        }
    }
    out
}

#[test]
fn built_in_worker_starts_connects_logs_and_stops_by_protocol() {
    let dir = TempDir::new("sup-basic");
    let hub = hub_with(&dir, config(json!({})));
    create_session_with_spec(&hub, "w", json!({}));
    assert_eq!(process(&hub, "w"), Value::Null);
    let res = action(&hub, "w", "start");
    assert_eq!(res.status, 200, "{}", res.text());
    let started = res.json();
    assert_eq!(started["ok"], true);
    let pid = started["pid"].as_u64().unwrap() as u32;
    let cfg_path = started["config"].as_str().unwrap().to_string();
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&cfg_path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let token = worker_token(&hub.data_dir, "w");
    assert!(cfg["client"]["endpoint"].as_str().unwrap().contains(&token));
    assert!(cfg["client"]["endpoint"]
        .as_str()
        .unwrap()
        .contains(&format!(":{}/agent/w/events", hub.addr.port())));
    assert_eq!(
        cfg["persistence"]["directory"],
        hub.data_dir.join("sessions/w").display().to_string()
    );
    wait_session(&hub, "w", |s| {
        s["identity"]["state"] == "live" && s["process"]["state"] == "running"
    });
    // A second start is refused while it runs; so is delete.
    let again = action(&hub, "w", "start");
    assert_eq!(again.status, 409);
    assert_eq!(again.json()["ok"], false);
    assert_eq!(
        hub.request("DELETE", "/api/sessions/w", &[], b"").status,
        409
    );
    // Output of both pipes is captured.
    assert!(
        wait_until(DEADLINE, || {
            let streams = log_lines(&hub, "w", "stream");
            streams.contains(&"stdout".to_string()) && streams.contains(&"stderr".to_string())
        }),
        "logs: {}",
        logs_text(&hub, "w")
    );
    let stopped = action(&hub, "w", "stop");
    assert_eq!(stopped.status, 200, "{}", stopped.text());
    assert_eq!(
        stopped.json(),
        json!({"ok": true, "how": "shutdown-signal", "forced": false})
    );
    let p = wait_session(&hub, "w", |s| s["process"]["state"] == "exited")["process"].clone();
    assert_eq!(p["exit_code"], 0);
    assert_eq!(p["stop_requested"], true);
    assert!(!pid_alive(pid));
    assert_eq!(action(&hub, "w", "stop").json()["how"], "already-exited");
    let log_file = hub.data_dir.join("sessions/w/logs/worker.log");
    assert!(std::fs::read_to_string(log_file).unwrap().lines().count() >= 2);
    // Restart gives a new pid and keeps operator edits of the config.
    let mut edited = cfg.clone();
    edited["worker"]["max_exchanges"] = json!(7);
    edited["operator_note"] = json!("kept");
    std::fs::write(&cfg_path, edited.to_string()).unwrap();
    let restarted = action(&hub, "w", "restart").json();
    assert_eq!(restarted["ok"], true, "{restarted}");
    assert_ne!(restarted["pid"].as_u64().unwrap() as u32, pid);
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    assert_eq!(cfg["worker"]["max_exchanges"], 7);
    assert_eq!(cfg["operator_note"], "kept");
    assert_eq!(action(&hub, "nobody", "stop").status, 404);
}

#[test]
fn a_worker_that_ignores_shutdown_gets_sigterm() {
    let dir = TempDir::new("sup-sigterm");
    let hub = hub_with(&dir, config(json!({})));
    create_session_with_spec(&hub, "t", json!({"model": "mock-ignore-shutdown"}));
    assert_eq!(action(&hub, "t", "start").json()["ok"], true);
    wait_session(&hub, "t", |s| s["identity"]["state"] == "live");
    let stopped = action(&hub, "t", "stop").json();
    assert_eq!(
        stopped,
        json!({"ok": true, "how": "sigterm", "forced": true})
    );
}

#[test]
fn a_worker_that_ignores_sigterm_escalates_to_sigkill() {
    let dir = TempDir::new("sup-sigkill");
    let hub = shell_hub(
        &dir,
        "trap '' TERM; echo started; while :; do sleep 1; done",
    );
    create_session_with_spec(&hub, "k", json!({"provider": "deepseek"}));
    let started = action(&hub, "k", "start").json();
    assert_eq!(started["ok"], true, "{started}");
    let pid = started["pid"].as_u64().unwrap() as u32;
    assert!(wait_until(DEADLINE, || logs_text(&hub, "k").contains("started")));
    let stopped = action(&hub, "k", "stop").json();
    assert_eq!(
        stopped,
        json!({"ok": true, "how": "sigkill", "forced": true})
    );
    let p = wait_session(&hub, "k", |s| s["process"]["state"] != "stopping")["process"].clone();
    assert_eq!(p["signal"], "SIGKILL");
    assert_eq!(p["signal_number"], 9);
    assert!(!pid_alive(pid));
}

#[test]
fn force_kill_reaches_a_grandchild_through_the_process_group() {
    let dir = TempDir::new("sup-group");
    let hub = shell_hub(&dir, "sleep 3600 & echo child $!; wait");
    create_session_with_spec(&hub, "g", json!({"provider": "deepseek"}));
    let pid = action(&hub, "g", "start").json()["pid"].as_u64().unwrap() as u32;
    assert!(wait_until(DEADLINE, || group_members(pid).len() >= 2));
    let killed = action(&hub, "g", "force-kill").json();
    assert_eq!(
        killed,
        json!({"ok": true, "how": "sigkill-process-group", "forced": true})
    );
    assert!(
        wait_until(DEADLINE, || group_members(pid).is_empty()),
        "survivors: {:?}",
        group_members(pid)
    );
    let p = wait_session(&hub, "g", |s| s["process"]["state"] != "stopping")["process"].clone();
    assert_eq!(p["process_group_killed"], true);
}

#[test]
fn spawn_failures_are_reported_not_thrown() {
    let dir = TempDir::new("sup-enoent");
    let hub = hub_with(
        &dir,
        config(json!({"launcher": {"kind": "command", "command": ["/nonexistent/worker"]}})),
    );
    create_session_with_spec(&hub, "e", json!({"provider": "deepseek"}));
    let res = action(&hub, "e", "start");
    assert_eq!(res.status, 409);
    assert!(res.json()["error"]
        .as_str()
        .unwrap()
        .contains("cannot spawn"));
    assert_eq!(process(&hub, "e")["state"], "failed");
    let dir2 = TempDir::new("sup-placeholder");
    let hub2 = hub_with(
        &dir2,
        config(json!({"launcher": {"kind": "command", "command": ["/bin/echo", "{nope}"]}})),
    );
    create_session_with_spec(&hub2, "p", json!({"provider": "deepseek"}));
    let res = action(&hub2, "p", "start");
    assert_eq!(res.status, 409);
    assert!(res.json()["error"].as_str().unwrap().contains("nope"));
}

#[test]
fn a_recorded_pid_with_another_start_time_is_never_adopted_or_signalled() {
    let dir = TempDir::new("sup-reuse");
    let mut hub = hub_with(&dir, config(json!({})));
    create_session_with_spec(&hub, "r", json!({}));
    assert_eq!(hub.terminate().code(), Some(0));
    let mut bystander = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let conn = rusqlite::Connection::open(dir.path().join("hub.db")).unwrap();
    conn.execute(
        "INSERT INTO processes (session_id, pid, start_time, started_at, command, args, cwd, log_path, state, lifecycle_id) VALUES ('r', ?1, 1, 't', 'x', '[]', '/', NULL, 'running', 'l')",
        [bystander.id()],
    )
    .unwrap();
    drop(conn);
    let hub = hub_with(&dir, config(json!({})));
    assert_eq!(process(&hub, "r"), Value::Null);
    assert_eq!(action(&hub, "r", "stop").json()["how"], "not-started");
    assert!(
        bystander.try_wait().unwrap().is_none(),
        "a stranger was signalled"
    );
    bystander.kill().unwrap();
    bystander.wait().unwrap();
    drop(hub);
}

#[test]
fn a_killed_hub_is_replaced_and_the_new_one_adopts_and_stops_the_worker() {
    let dir = TempDir::new("sup-adopt");
    let mut first = hub_with(&dir, config(json!({})));
    let port = first.addr.port();
    create_session_with_spec(&first, "a", json!({}));
    let pid = action(&first, "a", "start").json()["pid"].as_u64().unwrap() as u32;
    wait_session(&first, "a", |s| s["identity"]["state"] == "live");
    first.kill9();
    assert!(pid_alive(pid), "the worker died with its hub");
    let listen = format!("127.0.0.1:{port}");
    let second = hub_with_args(&dir, config(json!({})), &["--listen", &listen]);
    let p = process(&second, "a");
    assert_eq!(p["state"], "running", "{p}");
    assert_eq!(p["pid"], pid);
    assert_eq!(p["adopted"], true);
    // The worker reconnects to the same address with its stored token.
    wait_session(&second, "a", |s| s["identity"]["state"] == "live");
    // The adopted worker keeps working although the pipes of its first
    // hub are gone: a run (which logs a line) completes.
    let res = post(
        &second,
        "/api/sessions/a/input",
        json!({"content": [{"type": "text", "modality": "text", "raw": "still here"}]}),
    );
    assert_eq!(res.status, 202, "{}", res.text());
    let finished = wait_event(&second, "a", |e| e["event"] == "run_finished");
    assert_eq!(finished["data"]["status"], "completed");
    assert!(pid_alive(pid), "the adopted worker died");
    let stopped = action(&second, "a", "stop").json();
    assert_eq!(stopped["ok"], true, "{stopped}");
    assert!(wait_until(DEADLINE, || !pid_alive(pid)));
    wait_session(&second, "a", |s| s["process"]["state"] == "exited");
}

#[test]
fn a_huge_line_is_one_truncated_record_and_memory_stays_bounded() {
    let dir = TempDir::new("sup-bigline");
    let hub = shell_hub(
        &dir,
        "head -c 10485760 /dev/zero | tr '\\000' a; echo; echo after; sleep 3600",
    );
    create_session_with_spec(&hub, "b", json!({"provider": "deepseek"}));
    let rss_before = hub.rss_kib();
    assert_eq!(action(&hub, "b", "start").json()["ok"], true);
    assert!(wait_until(DEADLINE, || logs_text(&hub, "b").contains("after")));
    let logs = hub.get("/api/sessions/b/logs").json();
    let lines = logs["lines"].as_array().unwrap();
    let truncated: Vec<&Value> = lines
        .iter()
        .filter(|l| l.as_str().unwrap().contains("[hub: truncated"))
        .collect();
    assert_eq!(truncated.len(), 1, "{lines:?}");
    assert!(truncated[0].as_str().unwrap().len() <= 64 * 1024 + 64);
    assert!(
        hub.rss_kib() < rss_before + 24 * 1024,
        "RSS grew from {rss_before} to {} KiB",
        hub.rss_kib()
    );
    assert!(process(&hub, "b")["log_truncated_bytes"].as_u64().unwrap() > 10_000_000);
    action(&hub, "b", "force-kill");
}

#[test]
fn utf8_and_crlf_split_across_reads_are_reassembled() {
    let dir = TempDir::new("sup-utf8");
    let hub = shell_hub(&dir, "printf '\\303'; sleep 0.3; printf '\\251 caf\\303\\251\\r'; sleep 0.3; printf '\\nbad \\377 byte\\n'; sleep 3600");
    create_session_with_spec(&hub, "u", json!({"provider": "deepseek"}));
    assert_eq!(action(&hub, "u", "start").json()["ok"], true);
    assert!(wait_until(DEADLINE, || logs_text(&hub, "u").contains("byte")));
    let texts = log_lines(&hub, "u", "text");
    assert_eq!(texts, vec!["é café", "bad \u{FFFD} byte"]);
    action(&hub, "u", "force-kill");
}

#[test]
fn control_keeps_working_when_the_disk_log_fails_or_stalls() {
    let dir = TempDir::new("sup-logfail");
    let hub = hub_with(&dir, config(json!({})));
    create_session_with_spec(&hub, "d", json!({}));
    // A directory where worker.log should be: the file writer fails.
    std::fs::create_dir_all(hub.data_dir.join("sessions/d/logs/worker.log")).unwrap();
    assert_eq!(action(&hub, "d", "start").json()["ok"], true);
    wait_session(&hub, "d", |s| s["identity"]["state"] == "live");
    let p = wait_session(&hub, "d", |s| s["process"]["file_log_failed"] == true)["process"].clone();
    assert!(p["log_lines"].as_u64().unwrap() >= 1);
    assert_eq!(action(&hub, "d", "stop").json()["how"], "shutdown-signal");

    // A FIFO nobody reads: the writer stalls, the worker and control do not.
    create_session_with_spec(&hub, "f", json!({}));
    let fifo = hub.data_dir.join("sessions/f/logs/worker.log");
    std::fs::create_dir_all(fifo.parent().unwrap()).unwrap();
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo on a path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    assert_eq!(action(&hub, "f", "start").json()["ok"], true);
    wait_session(&hub, "f", |s| s["identity"]["state"] == "live");
    let res = post(
        &hub,
        "/api/sessions/f/input",
        json!({"content": [{"type": "text", "modality": "text", "raw": "/big 2000000"}]}),
    );
    assert_eq!(res.status, 202);
    wait_event(&hub, "f", |e| e["event"] == "run_finished");
    assert_eq!(action(&hub, "f", "stop").json()["how"], "shutdown-signal");
    wait_session(&hub, "f", |s| s["process"]["state"] == "exited");
}

#[test]
fn hub_shutdown_stops_workers_first() {
    let dir = TempDir::new("sup-shutdown");
    let mut hub = hub_with(&dir, config(json!({})));
    create_session_with_spec(&hub, "s", json!({}));
    let pid = action(&hub, "s", "start").json()["pid"].as_u64().unwrap() as u32;
    wait_session(&hub, "s", |s| s["identity"]["state"] == "live");
    assert_eq!(hub.terminate().code(), Some(0));
    assert!(
        wait_until(DEADLINE, || !pid_alive(pid)),
        "worker outlived the hub's shutdown"
    );
    assert!(
        hub.log_text()
            .contains("stopped at shutdown (shutdown-signal)"),
        "{}",
        hub.log_text()
    );
}

#[test]
fn snapshot_reads_the_persisted_state_read_only() {
    let dir = TempDir::new("sup-snapshot");
    let hub = hub_with(&dir, config(json!({})));
    create_session_with_spec(&hub, "n", json!({}));
    assert_eq!(action(&hub, "n", "start").json()["ok"], true);
    wait_session(&hub, "n", |s| s["identity"]["state"] == "live");
    post(
        &hub,
        "/api/sessions/n/input",
        json!({"content": [{"type": "text", "modality": "text", "raw": "remember me"}]}),
    );
    wait_event(&hub, "n", |e| e["event"] == "run_finished");
    assert!(wait_until(DEADLINE, || hub
        .get("/api/sessions/n/snapshot")
        .text()
        .contains("remember me")));
    let snap = hub.get("/api/sessions/n/snapshot").json();
    assert_eq!(snap["session_id"], "n");
    // `files` maps each file read to its path (as the Node hub does); what
    // happened to each is in `file_status`
    let state_path = snap["files"]["state"].as_str().unwrap();
    assert!(state_path.ends_with("state.json"), "{snap}");
    assert!(std::path::Path::new(state_path).is_file());
    assert!(snap["file_status"].is_array());
}
