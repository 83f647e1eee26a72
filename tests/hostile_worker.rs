//! Misbehaving workers and worker processes: a confirmation whose worker
//! never identifies, a 100 MiB output line, a worker that closes its
//! output but keeps running, children that keep the pipes open after the
//! worker exits, and a worker that exits during spawn. The `command`
//! launcher runs small /bin/sh scripts; control keeps working and no
//! thread or memory is left behind.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::util::*;

#[test]
fn a_confirmation_whose_worker_never_identifies_is_denied_after_the_hold() {
    let dir = TempDir::new("hostile-hold");
    let hold = Duration::from_millis(1500);
    let hub = hub_with(&dir, json!({"limits": {"confirmIdentityHoldMs": 1500}}));
    create_session(&hub, "h");
    // (no event connection at all: worker_runs::a_held_prompt_is_denied_...)
    // An event connection that is open but never sends an envelope, twice
    // on the same connection.
    let silent = RawWs::open(hub.addr, &events_path(&hub, "h"));
    wait_session(&hub, "h", |s| s["connected"] == true);
    for round in 0..2 {
        let cid = format!("held-{round}");
        let mut c = RawWs::open(hub.addr, &confirm_path(&hub, "h"));
        let asked = Instant::now();
        c.text(&confirmation_request(
            "h",
            "w",
            &cid,
            json!({"command": "rm -rf /"}),
        ));
        // While held, an operator cannot approve it.
        let s = wait_session(&hub, "h", |s| {
            !s["confirmations"].as_array().unwrap().is_empty()
        });
        assert_eq!(s["confirmations"][0]["state"], "awaiting-identity");
        let res = post(
            &hub,
            &format!("/api/sessions/h/confirmations/{cid}"),
            json!({"decision": "approved"}),
        );
        assert_eq!(
            (res.status, res.json()["error"].clone()),
            (409, json!("confirmation_rejected"))
        );
        let answer = c.next_text(|v| v["type"] == "confirmation_response");
        let took = asked.elapsed();
        assert_eq!(answer["data"]["decision"], "denied");
        assert!(
            answer["data"]["reason"]
                .as_str()
                .unwrap()
                .contains("not verified"),
            "{answer}"
        );
        assert!(
            took >= hold - Duration::from_millis(100),
            "denied after {took:?}"
        );
        assert!(
            took < hold + Duration::from_secs(5),
            "denied only after {took:?}"
        );
        c.send(true, op::CLOSE, &1000u16.to_be_bytes());
        wait_session(&hub, "h", |s| s["confirmations"] == json!([]));
        assert_eq!(get_session(&hub, "h")["identity"]["state"], "unknown");
    }
    drop(silent);
    wait_session(&hub, "h", |s| s["connected"] == false);
}

#[test]
fn a_100_mib_line_is_one_truncated_record_and_memory_stays_bounded() {
    let _heavy = heavy();
    let dir = TempDir::new("hostile-100mib");
    let hub = shell_hub(
        &dir,
        "head -c 104857600 /dev/zero | tr '\\000' a; echo; printf 'bad \\377\\376 bytes\\n'; \
         echo after; exec sleep 3600",
    );
    create_session_with_spec(&hub, "b", json!({"provider": "deepseek"}));
    let rss_before = hub.rss_kib();
    assert_eq!(action(&hub, "b", "start").json()["ok"], true);
    assert!(
        wait_until(Duration::from_secs(120), || logs_text(&hub, "b")
            .contains("after")),
        "{}",
        logs_text(&hub, "b")
    );
    let texts = log_lines(&hub, "b", "text");
    let truncated: Vec<&String> = texts
        .iter()
        .filter(|t| t.contains("[hub: truncated"))
        .collect();
    assert_eq!(truncated.len(), 1, "{} lines", texts.len());
    assert!(truncated[0].len() <= 64 * 1024 + 64);
    assert!(
        texts.contains(&"bad \u{FFFD}\u{FFFD} bytes".to_string()),
        "{texts:?}"
    );
    let p = get_session(&hub, "b")["process"].clone();
    assert!(p["log_truncated_bytes"].as_u64().unwrap() >= 100 * 1024 * 1024 - 64 * 1024);
    let log_file = hub.data_dir.join("sessions/b/logs/worker.log");
    assert!(std::fs::metadata(&log_file).unwrap().len() < 2 * 1024 * 1024);
    // Ceiling: one line buffer of 64 KiB per pipe, the 256 KiB log ring,
    // the worker.log writer's 1 MiB budget and the reader's read buffer,
    // plus the allocator allowance. Buffering the line would be 100 MiB.
    let peak = hub.peak_rss_kib();
    let ceiling = rss_before + 2 * 64 + 256 + MIB + ALLOCATOR_SLACK_KIB / 2;
    assert!(peak <= ceiling, "peak RSS {peak} KiB over {ceiling} KiB");
    eprintln!("100 MiB line: peak RSS {peak} KiB (start {rss_before}, ceiling {ceiling})");
    assert_eq!(action(&hub, "b", "force-kill").json()["ok"], true);
}

#[test]
fn a_worker_that_closes_its_output_but_keeps_running_can_still_be_stopped() {
    let dir = TempDir::new("hostile-closedout");
    let hub = shell_hub(&dir, "echo hello; exec >&- 2>&-; exec sleep 3600");
    create_session_with_spec(&hub, "c", json!({"provider": "deepseek"}));
    let baseline = hub.threads();
    let started = action(&hub, "c", "start").json();
    assert_eq!(started["ok"], true, "{started}");
    let pid = started["pid"].as_u64().unwrap() as u32;
    assert!(wait_until(DEADLINE, || logs_text(&hub, "c").contains("hello")));
    // Both pipes reached EOF: their readers are gone while it runs.
    assert!(wait_until(DEADLINE, || hub.threads_named("worker-std") == 0));
    assert_eq!(get_session(&hub, "c")["process"]["state"], "running");
    let stopped = action(&hub, "c", "stop").json();
    assert_eq!(stopped["ok"], true, "{stopped}");
    let p = wait_session(&hub, "c", |s| s["process"]["state"] != "stopping")["process"].clone();
    assert_eq!(p["signal"], "SIGTERM", "{p}");
    assert_eq!(p["signal_number"], 15, "{p}");
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}/cmdline")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map_or(true, |s| s.contains(") Z"))
    );
    assert!(threads_settle(&hub, baseline));
}

#[test]
fn children_holding_the_pipes_open_do_not_leak_threads() {
    let dir = TempDir::new("hostile-orphans");
    let hub = shell_hub(&dir, "sleep 3600 & echo child $!; exit 0");
    create_session_with_spec(&hub, "o", json!({"provider": "deepseek"}));
    let baseline = hub.threads();
    let mut children = Vec::new();
    for round in 0..3 {
        let started = action(&hub, "o", "start").json();
        assert_eq!(started["ok"], true, "round {round}: {started}");
        // The exit is recorded although the pipes are still open...
        let p = wait_session(&hub, "o", |s| s["process"]["state"] == "exited")["process"].clone();
        assert_eq!(p["exit_code"], 0);
        // ...and the pipe readers give up 1 s later: no thread is left.
        assert!(wait_until(DEADLINE, || hub.threads_named("worker-std") == 0));
        assert!(
            threads_settle(&hub, baseline),
            "round {round}: threads {} > {baseline}",
            hub.threads()
        );
        let logs = logs_text(&hub, "o");
        let child: u32 = logs
            .rsplit("child ")
            .next()
            .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("no child pid in {logs}"));
        children.push(child);
    }
    // The grandchildren are still alive and still hold the pipes.
    for child in &children {
        assert!(std::path::Path::new(&format!("/proc/{child}")).exists());
        signal(*child, libc::SIGKILL);
    }
    assert!(answers_within(&hub, Duration::from_secs(5)));
}

#[test]
fn a_worker_that_exits_during_spawn_is_recorded_and_can_start_again() {
    let dir = TempDir::new("hostile-instant-exit");
    let hub = shell_hub(&dir, "exit 7");
    create_session_with_spec(&hub, "x", json!({"provider": "deepseek"}));
    let baseline = hub.threads();
    let mut pids = Vec::new();
    for round in 0..8 {
        let started = action(&hub, "x", "start").json();
        assert_eq!(started["ok"], true, "round {round}: {started}");
        pids.push(started["pid"].as_u64().unwrap());
        let p = wait_session(&hub, "x", |s| {
            matches!(s["process"]["state"].as_str(), Some("exited" | "failed"))
        })["process"]
            .clone();
        assert_eq!(p["exit_code"], 7, "{p}");
        assert_eq!(p["state"], "failed");
    }
    pids.dedup();
    assert_eq!(pids.len(), 8, "a start reused a record: {pids:?}");
    assert!(
        threads_settle(&hub, baseline),
        "threads {} > {baseline}",
        hub.threads()
    );
}
