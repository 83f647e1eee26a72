//! Faults tried with figures (issue 18): a full data directory, a flood
//! on every socket kind at once under a computed memory ceiling, and the
//! restart and force-kill paths' disk writers. Each test prints the
//! figure `docs/security.md` records.

use std::time::Duration;

use serde_json::{json, Value};

use crate::util::*;

/// A worker's `worker.log` writer is replaced at every start, and the
/// previous process's writer is let go rather than waited on (its pipe
/// readers may still deliver its last lines): restarts and force-kills of
/// a worker that logs all the time log no warning about abandoned bytes,
/// and every process's lines reach the file.
#[test]
fn restarts_and_force_kills_abandon_no_disk_writer() {
    let dir = TempDir::new("faults-writers");
    // The worker logs a line every 50 ms, so its writer thread is busy
    // (never idle long enough to exit) whenever the next start replaces it.
    let hub = shell_hub(&dir, "while :; do echo tick; sleep 0.05; done");
    create_session(&hub, "w");
    let mut starts = 0;
    for what in [
        "start",
        "restart",
        "restart",
        "force-kill",
        "start",
        "force-kill",
        "start",
    ] {
        let res = action(&hub, "w", what);
        assert_eq!(res.status, 200, "{what}: {}", res.text());
        if what != "force-kill" {
            // The new process logs (its own ring, reset at the start)
            // before the next action replaces its writer.
            wait_for("ticks of the new process", DEADLINE, || {
                logs_text(&hub, "w").matches("tick").count() >= 3
            });
            starts += 1;
        }
    }
    assert_eq!(action(&hub, "w", "stop").status, 200);
    let log = hub.log_text();
    assert!(!log.contains("did not flush"), "{log}");
    assert!(!log.contains("abandoning"), "{log}");
    // Every process's lines reached worker.log (rotation keeps them all
    // under the default 8 MiB).
    let file = std::fs::read_to_string(dir.path().join("sessions/w/logs/worker.log")).unwrap();
    assert!(file.matches("tick").count() >= 3 * starts, "{file}");
    assert!(!file.contains("[hub: omitted"), "{file}");
    eprintln!(
        "disk writers: {starts} processes (3 starts, 2 restarts), 2 force-kills; no abandon \
         warning, {} worker.log lines",
        file.lines().count()
    );
}

/// Lines of a file as JSON values (every line must parse: nothing torn).
fn json_lines(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("a torn line in {}: {e}: {line:?}", path.display()))
        })
        .collect()
}

/// `events.jsonl`: (records, omitted records by the markers, the highest
/// worker sequence written).
fn events_file_counts(path: &std::path::Path) -> (u64, u64, u64) {
    let (mut records, mut omitted, mut highest) = (0, 0, 0);
    for line in json_lines(path) {
        if line["type"] == "hub_log_omission" {
            omitted += line["dropped_records"].as_u64().unwrap();
        } else {
            records += 1;
            highest = highest.max(line["sequence"].as_u64().unwrap());
        }
    }
    (records, omitted, highest)
}

/// `worker.log` of a worker printing `log line <n>`: (lines, omitted lines
/// by the markers, the highest n written).
fn worker_log_counts(path: &std::path::Path) -> (u64, u64, u64) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let (mut lines, mut omitted, mut highest) = (0, 0, 0);
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("log line ") {
            lines += 1;
            highest = highest.max(n.parse::<u64>().unwrap());
        } else if let Some(rest) = line.strip_prefix("[hub: omitted ") {
            omitted += rest.split(' ').next().unwrap().parse::<u64>().unwrap();
        } else {
            panic!("a torn line in {}: {line:?}", path.display());
        }
    }
    (lines, omitted, highest)
}

/// The whole data directory (hub.db, its WAL, every session file) on a
/// small tmpfs, filled to the last byte: SQLite writes are refused with
/// `storage_error` (reason `disk_full`) on both APIs, reads keep being
/// served, the events file and `worker.log` count what they drop and
/// report it once there is room, new writes succeed again without a
/// restart, and nothing acknowledged is lost.
#[test]
fn a_full_data_directory_refuses_writes_clearly_and_recovers_without_a_restart() {
    if !is_root() {
        eprintln!("skipped: mounting a tmpfs data directory needs root");
        return;
    }
    let _heavy = heavy();
    let dir = TempDir::new("faults-fulldisk");
    let mut undo = Undo(Vec::new());
    if !mount_tmpfs(dir.path(), "16m", &mut undo) {
        eprintln!("skipped: root here may not mount");
        return;
    }
    // The worker prints a numbered line every 10 ms while it runs.
    let mut hub = shell_hub(
        &dir,
        "i=0; while :; do i=$((i+1)); echo \"log line $i\"; sleep 0.01; done",
    );
    let mut acknowledged = vec!["kept".to_string(), "logged".to_string()];
    create_session(&hub, "kept");
    create_session(&hub, "logged");
    assert_eq!(action(&hub, "logged", "start").json()["ok"], true);
    let mut ws = RawWs::open(hub.addr, &events_path(&hub, "logged"));
    let mut seq = 0u64;
    let mut send_events = |ws: &mut RawWs, n: u64| {
        let pad = "e".repeat(512);
        for _ in 0..n {
            seq += 1;
            ws.text(&envelope("logged", "w", seq, "status", json!({"pad": pad})));
        }
        seq
    };
    let sent = send_events(&mut ws, 50);
    wait_events(&hub, "logged", sent);
    let events_file = dir.path().join("sessions/logged/events.jsonl");
    let log_file = dir.path().join("sessions/logged/logs/worker.log");
    wait_for("the events file", DEADLINE, || {
        events_file_counts(&events_file).0 == 50
    });
    wait_for("worker.log", DEADLINE, || {
        worker_log_counts(&log_file).0 > 10
    });

    // Fill the disk to the last byte.
    let filler = dir.path().join("filler");
    let filled = fill_disk(&filler);

    // Writes: SQLite may still have room inside its WAL for a few commits;
    // those are acknowledged and must survive. Then a refusal.
    let mut room_in_wal = 0;
    let refused = loop {
        let id = format!("during-{room_in_wal}");
        let res = post(&hub, "/api/sessions", json!({"session": id}));
        if res.status == 201 {
            acknowledged.push(id);
            room_in_wal += 1;
            assert!(room_in_wal < 2000, "the full disk never refused a write");
            continue;
        }
        break res;
    };
    let refusal = refused.json();
    assert_eq!(
        (
            refused.status,
            refusal["error"].clone(),
            refusal["reason"].clone()
        ),
        (500, json!("storage_error"), json!("disk_full")),
        "{refusal}"
    );
    let message = refusal["message"].as_str().unwrap().to_string();
    assert!(message.contains("full"), "{message}");
    // A delete is a write too: refused, and the session stays.
    let res = hub.request("DELETE", "/api/sessions/kept", &[], b"");
    assert_eq!(
        (res.status, res.json()["reason"].clone()),
        (500, json!("disk_full")),
        "{}",
        res.text()
    );
    // The panel's create fails the same way.
    let mut panel = RawWs::panel(&hub);
    panel.text(r#"{"v":1,"type":"create_session","session":"panel-during"}"#);
    let error = panel.next_text(|v| v["type"] == "error");
    assert_eq!(error["error"], "storage_error", "{error}");

    // Reads keep being served.
    assert_eq!(hub.get("/api/meta").status, 200);
    let listed = session_ids(&hub);
    for id in &acknowledged {
        assert!(
            listed.contains(id),
            "{id} not listed while the disk is full"
        );
    }
    assert!(!listed.iter().any(|id| id == "panel-during"));
    assert_eq!(get_session(&hub, "kept")["session_id"], "kept");
    assert_eq!(hub.get("/api/sessions/logged/events?limit=5").status, 200);
    assert!(panel.panel_round_trip() < Duration::from_secs(5));

    // Events and log lines keep coming; their files drop and count them.
    let sent = send_events(&mut ws, 300);
    wait_events(&hub, "logged", sent);
    wait_for("the events file's full-disk warning", DEADLINE, || {
        hub.log_text()
            .contains("events.jsonl failed: No space left on device")
    });
    // (some 20 lines, 200 ms of the worker's output, meet the full disk)
    let p = wait_session(&hub, "logged", |s| {
        s["process"]["file_log_dropped"].as_u64() >= Some(20)
    })["process"]
        .clone();
    assert_eq!(p["file_log_failed"], false, "{p}");
    assert_eq!(get_session(&hub, "logged")["connected"], true);

    // Room again: writes succeed at once, without a restart.
    std::fs::remove_file(&filler).unwrap();
    let freed_at = std::time::Instant::now();
    let res = post(&hub, "/api/sessions", json!({"session": "after"}));
    assert_eq!(res.status, 201, "{}", res.text());
    let recovered_in = freed_at.elapsed();
    acknowledged.push("after".into());
    panel.text(r#"{"v":1,"type":"create_session","session":"panel-after"}"#);
    panel.next_text(|v| v["type"] == "created");
    acknowledged.push("panel-after".into());
    let sent = send_events(&mut ws, 20);
    wait_events(&hub, "logged", sent);
    // Every event is in the file or counted by an omission record that
    // precedes the next one written.
    let mut counts = (0, 0, 0);
    wait_for("the events file to catch up", DEADLINE, || {
        counts = events_file_counts(&events_file);
        counts.2 == sent
    });
    let (event_records, events_omitted, _) = counts;
    assert!(events_omitted > 0, "no omission record: {counts:?}");
    assert_eq!(event_records + events_omitted, sent, "{counts:?}");
    // The same for worker.log: each line up to the last one written is in
    // the file or counted, and the counts match the session's own.
    let mut log_counts = (0, 0, 0);
    wait_for("worker.log to report its omissions", DEADLINE, || {
        log_counts = worker_log_counts(&log_file);
        log_counts.1 > 0 && log_counts.0 + log_counts.1 == log_counts.2
    });
    let dropped = get_session(&hub, "logged")["process"]["file_log_dropped"]
        .as_u64()
        .unwrap();
    assert_eq!(dropped, log_counts.1, "{log_counts:?}");
    assert!(
        hub.log_text().contains("is written again"),
        "{}",
        hub.log_text()
    );

    // Nothing acknowledged is lost across a restart, and the store is sound.
    assert_eq!(action(&hub, "logged", "stop").status, 200);
    drop(ws);
    drop(panel);
    assert_eq!(hub.terminate().code(), Some(0));
    assert_eq!(integrity_check(dir.path()), "ok");
    hub = TestHub::start(
        dir.path(),
        &["-c", dir.path().join("hub.test.jsonc").to_str().unwrap()],
    );
    let listed = session_ids(&hub);
    for id in &acknowledged {
        assert!(listed.contains(id), "{id} lost: {listed:?}");
    }
    eprintln!(
        "full disk: {} KiB filled; {room_in_wal} creates fit in the WAL, then 500 storage_error \
         ({message}); {} events: {event_records} written, {events_omitted} counted by omission \
         records; worker.log: {} lines written, {} counted; writes succeeded {recovered_in:?} \
         after room returned; {} acknowledged sessions kept across a restart",
        filled / 1024,
        sent,
        log_counts.0,
        log_counts.1,
        acknowledged.len()
    );
}
