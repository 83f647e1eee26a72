//! Storage that fails underneath the hub: a read-only sessions directory,
//! a full disk under a logging worker, and SIGKILL of the hub during
//! concurrent session creation. Nothing acknowledged is lost and control
//! keeps working. Faults are injected with mounts as root (permission
//! bits otherwise); where this machine cannot mount, the test says so
//! and passes without checking.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::json;

use crate::util::*;

#[test]
fn a_read_only_sessions_directory_fails_creation_cleanly_and_loses_nothing() {
    let dir = TempDir::new("hostile-readonly");
    let mut hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "kept");
    let before = hub.get("/api/sessions").json();
    let mut undo = Undo(Vec::new());
    if !make_read_only(&dir.path().join("sessions"), &mut undo) {
        eprintln!("skipped: root here may not mount");
        return;
    }
    let res = post(&hub, "/api/sessions", json!({"session": "new"}));
    assert_eq!(
        (res.status, res.json()["error"].clone()),
        (500, json!("storage_error")),
        "{}",
        res.text()
    );
    assert!(res.json()["message"]
        .as_str()
        .unwrap()
        .contains("cannot create"));
    // The panel's create fails the same way.
    let mut p = RawWs::panel(&hub);
    p.text(r#"{"v":1,"type":"create_session","session":"new2"}"#);
    assert_eq!(
        p.next_text(|v| v["type"] == "error")["error"],
        "storage_error"
    );
    // Everything else keeps being served.
    assert_eq!(hub.get("/api/sessions").json(), before);
    assert_eq!(hub.get("/api/meta").status, 200);
    assert_eq!(get_session(&hub, "kept")["session_id"], "kept");
    assert_eq!(hub.get("/api/sessions/new").status, 404);
    undo.run();
    // Nothing half-created: the same ids can be created now.
    create_session(&hub, "new");
    create_session(&hub, "new2");
    assert_eq!(hub.terminate().code(), Some(0));
    let hub = TestHub::start(dir.path(), &[]);
    let ids = session_ids(&hub);
    assert_eq!(ids.len(), 3, "{ids:?}");
    for id in ["kept", "new", "new2"] {
        assert!(ids.contains(&id.to_string()), "{id} missing: {ids:?}");
    }
}

#[test]
fn a_full_disk_under_a_logging_worker_keeps_control_working() {
    if !is_root() {
        eprintln!("skipped: mounting a 1 MiB tmpfs needs root");
        return;
    }
    let _heavy = heavy();
    let dir = TempDir::new("hostile-fulldisk");
    let hub = shell_hub(
        &dir,
        "yes 'a log line that fills the disk quickly, again and again and again' \
         | head -n 200000; echo logged; exec sleep 3600",
    );
    create_session_with_spec(&hub, "full", json!({"provider": "deepseek"}));
    let mut undo = Undo(Vec::new());
    if !mount_tmpfs(&dir.path().join("sessions/full"), "1m", &mut undo) {
        eprintln!("skipped: root here may not mount");
        return;
    }
    // Events fill events.jsonl on the same 1 MiB while the worker logs.
    let mut ws = RawWs::open(hub.addr, &events_path(&hub, "full"));
    let started = action(&hub, "full", "start").json();
    assert_eq!(started["ok"], true, "{started}");
    let pad = "e".repeat(4096);
    for seq in 1..=1000 {
        ws.text(&envelope("full", "w", seq, "status", json!({"pad": pad})));
    }
    assert!(wait_until(Duration::from_secs(60), || logs_text(
        &hub, "full"
    )
    .contains("logged")));
    // A full disk drops and counts log records; it does not give the file up.
    let p = wait_session(&hub, "full", |s| {
        s["process"]["file_log_dropped"].as_u64() > Some(0)
    })["process"]
        .clone();
    assert_eq!(p["file_log_failed"], false, "{p}");
    assert!(p["log_lines"].as_u64().unwrap() >= 1);
    let s = wait_events(&hub, "full", 1000);
    assert_eq!(s["connected"], true);
    assert!(
        wait_until(DEADLINE, || hub
            .log_text()
            .contains("No space left on device")),
        "{}",
        hub.log_text()
    );
    // Control still works: events, logs, panel, stop.
    assert_eq!(hub.get("/api/sessions/full/events?limit=1").status, 200);
    let mut p = RawWs::panel(&hub);
    assert!(p.panel_round_trip() < Duration::from_secs(5));
    let stopped = action(&hub, "full", "stop").json();
    assert_eq!(stopped["ok"], true, "{stopped}");
    drop(ws);
    create_session(&hub, "other");
}

#[test]
fn sigkill_during_concurrent_session_creation_loses_no_acknowledged_session() {
    let _heavy = heavy();
    let dir = TempDir::new("hostile-kill9");
    let mut acknowledged: Vec<String> = Vec::new();
    for round in 0..5 {
        let mut hub = TestHub::start(dir.path(), &[]);
        // Everything acknowledged in earlier rounds survived their kill.
        let listed = session_ids(&hub);
        for id in &acknowledged {
            assert!(listed.contains(id), "round {round}: {id} lost");
            assert!(
                dir.path().join("sessions").join(id).is_dir(),
                "{id}'s directory lost"
            );
        }
        let acks = Arc::new(Mutex::new(Vec::<String>::new()));
        let count = Arc::new(AtomicU64::new(0));
        let addr = hub.addr;
        let writers: Vec<_> = (0..3)
            .map(|t| {
                let acks = acks.clone();
                let count = count.clone();
                thread::spawn(move || {
                    for i in 0..5000 {
                        let id = format!("r{round}-t{t}-{i}");
                        let body = json!({"session": id}).to_string();
                        let raw = format!(
                            "POST /api/sessions HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n\
                             Connection: close\r\n\r\n{body}",
                            body.len()
                        );
                        match exchange_within(addr, raw.as_bytes(), DEADLINE) {
                            Ok(reply) if reply.starts_with("HTTP/1.1 201 ") => {
                                acks.lock().unwrap().push(id);
                                count.fetch_add(1, Ordering::AcqRel);
                            }
                            _ => return, // the hub is gone
                        }
                    }
                })
            })
            .collect();
        // Kill at a different point of the stream each round.
        let target = 20 + 15 * round as u64;
        assert!(wait_until(DEADLINE, || count.load(Ordering::Acquire) >= target));
        hub.kill9();
        for w in writers {
            w.join().unwrap();
        }
        assert_eq!(integrity_check(dir.path()), "ok", "round {round}");
        acknowledged.extend(acks.lock().unwrap().drain(..));
    }
    let hub = TestHub::start(dir.path(), &[]);
    let ids = session_ids(&hub);
    for id in &acknowledged {
        assert!(ids.contains(id), "{id} lost");
    }
    eprintln!(
        "kill -9 x5: {} acknowledged sessions all present ({} listed)",
        acknowledged.len(),
        ids.len()
    );
}
