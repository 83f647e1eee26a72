//! The command line, configuration loading, exit statuses, signals, and
//! what survives a restart on the same data directory.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use serde_json::json;

use crate::util::{
    closed_by_peer, hub_with, integrity_check, run_bin, session_ids, signal, stderr_of, wait_exit,
    wait_until, TempDir, TestHub, DEADLINE,
};

#[test]
fn help_and_version_exit_zero() {
    let dir = TempDir::new("help");
    let out = run_bin(&["--help"], dir.path());
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("--listen"));
    let out = run_bin(&["-V"], dir.path());
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("simplex-hub "));
}

#[test]
fn usage_errors_exit_two_with_a_prefixed_message() {
    let dir = TempDir::new("usage");
    for args in [
        &["--bogus"][..],
        &["--listen"],
        &["-l", "nohost"],
        &["-l", "h:70000"],
        &["frob"],
    ] {
        let out = run_bin(args, dir.path());
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr_of(&out));
        assert!(stderr_of(&out).starts_with("simplex-hub: "), "{args:?}");
    }
}

#[test]
fn configuration_errors_exit_one() {
    let dir = TempDir::new("cfgerr");
    let data = dir.path().display().to_string();
    let missing = run_bin(
        &["-c", "/nonexistent/hub.jsonc", "--data-dir", &data],
        dir.path(),
    );
    assert_eq!(missing.status.code(), Some(1), "{}", stderr_of(&missing));

    let file = dir.path().join("bad.jsonc");
    std::fs::write(
        &file,
        "{ \"limits\": { \"logLine\": 5 }, \"dataDirectory\": \"x\" }",
    )
    .unwrap();
    let out = run_bin(&["check-config", file.to_str().unwrap()], dir.path());
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_of(&out);
    assert!(
        err.contains("limits.logLine") && err.contains("dataDirectory"),
        "{err}"
    );

    // A non-loopback listener without a panel token is refused.
    let out = run_bin(&["--listen", "0.0.0.0:0", "--data-dir", &data], dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains("panel.token"),
        "{}",
        stderr_of(&out)
    );
    assert!(!stderr_of(&out).contains("panicked"));
}

#[test]
fn check_config_prints_the_resolved_configuration_redacted() {
    let dir = TempDir::new("check");
    let file = dir.path().join("hub.jsonc");
    std::fs::write(
        &file,
        "// comment\n{ \"panel\": { \"token\": \"very-secret\" }, /* c */ \"listen\": { \"port\": 9911 } }\n",
    )
    .unwrap();
    let out = run_bin(&["check-config", file.to_str().unwrap()], dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("very-secret"), "token printed");
    let json_start = stdout.find('{').unwrap();
    let resolved: serde_json::Value = serde_json::from_str(&stdout[json_start..]).unwrap();
    assert_eq!(resolved["listen"]["port"], 9911);
    assert_eq!(resolved["panel"]["token"], "<redacted>");
}

#[test]
fn first_start_writes_the_configuration_once() {
    let dir = TempDir::new("firstrun");
    let data = dir.path().join("data");
    let mut hub = TestHub::start(&data, &[]);
    let cfg = data.join("hub.config.jsonc");
    assert!(cfg.is_file(), "no first-run configuration written");
    assert_eq!(
        std::fs::metadata(&cfg).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::metadata(&data).unwrap().permissions().mode() & 0o777,
        0o700
    );
    let log = hub.log_text();
    assert!(
        log.contains("configuration:") && log.contains("data directory:"),
        "{log}"
    );
    assert_eq!(hub.terminate().code(), Some(0));

    // The written file is used next time and never rewritten.
    let before = std::fs::read(&cfg).unwrap();
    let mut hub = TestHub::start(&data, &["--panel-token", "other"]);
    assert!(hub.log_text().contains(&cfg.display().to_string()));
    assert_eq!(hub.terminate().code(), Some(0));
    assert_eq!(std::fs::read(&cfg).unwrap(), before);
}

#[test]
fn sigint_and_sigterm_exit_zero() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let dir = TempDir::new("signal");
        let mut hub = TestHub::start(dir.path(), &[]);
        signal(hub.child.id(), sig);
        let status = wait_exit(&mut hub.child, DEADLINE).expect("no exit");
        assert_eq!(status.code(), Some(0), "signal {sig}");
    }
}

fn stored_tokens(db: &std::path::Path) -> Vec<(String, String, String)> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare("SELECT id, token, spec FROM sessions ORDER BY id")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn sessions_specs_and_tokens_survive_a_restart() {
    let dir = TempDir::new("restart");
    let mut hub = TestHub::start(dir.path(), &[]);
    for (id, spec) in [
        ("alpha", json!({"threads": 2})),
        ("beta", json!({"env": {"A": "b"}})),
    ] {
        let res = hub.request(
            "POST",
            "/api/sessions",
            &[],
            json!({"session": id, "spec": spec}).to_string().as_bytes(),
        );
        assert_eq!(res.status, 201);
    }
    let before = hub.get("/api/sessions").json();
    let epoch_before = hub.get("/api/meta").json()["transcript_epoch"].clone();
    assert_eq!(hub.terminate().code(), Some(0));
    let tokens_before = stored_tokens(&dir.path().join("hub.db"));
    assert_eq!(tokens_before.len(), 2);

    let mut hub = TestHub::start(dir.path(), &[]);
    let after = hub.get("/api/sessions").json();
    assert_eq!(before, after);
    assert_eq!(after["sessions"][0]["spec"]["threads"], 2);
    assert_ne!(
        hub.get("/api/meta").json()["transcript_epoch"],
        epoch_before
    );
    assert_eq!(hub.terminate().code(), Some(0));
    assert_eq!(stored_tokens(&dir.path().join("hub.db")), tokens_before);
}

#[test]
fn a_killed_hub_keeps_every_acknowledged_session() {
    let dir = TempDir::new("kill9");
    let mut hub = TestHub::start(dir.path(), &[]);
    let mut acknowledged = Vec::new();
    for i in 0..30 {
        let id = format!("s{i}");
        let res = hub.request(
            "POST",
            "/api/sessions",
            &[],
            json!({"session": id}).to_string().as_bytes(),
        );
        assert_eq!(res.status, 201);
        acknowledged.push(id);
    }
    hub.kill9();
    assert_eq!(integrity_check(dir.path()), "ok");
    let hub = TestHub::start(dir.path(), &[]);
    let ids = session_ids(&hub);
    for id in &acknowledged {
        assert!(ids.contains(id), "{id} lost");
    }
}

#[test]
fn corrupt_or_foreign_database_is_a_clear_error() {
    let dir = TempDir::new("baddb");
    let data = dir.path().display().to_string();
    std::fs::write(dir.path().join("hub.db"), vec![0x5a; 8192]).unwrap();
    let out = run_bin(&["--data-dir", &data, "-l", "127.0.0.1:0"], dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("hub.db"), "{}", stderr_of(&out));
    assert!(!stderr_of(&out).contains("panicked"));

    let foreign = TempDir::new("foreigndb");
    let conn = rusqlite::Connection::open(foreign.path().join("hub.db")).unwrap();
    conn.execute_batch("CREATE TABLE notes(x TEXT); INSERT INTO notes VALUES ('hi');")
        .unwrap();
    drop(conn);
    let data = foreign.path().display().to_string();
    let out = run_bin(&["--data-dir", &data, "-l", "127.0.0.1:0"], foreign.path());
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    assert!(!stderr_of(&out).contains("panicked"));
}

#[test]
fn mock_worker_parses_its_arguments() {
    let dir = TempDir::new("mockargs");
    let out = run_bin(&["mock-worker", "--session", "x"], dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr_of(&out).contains("--config"));
}

#[test]
fn idle_connections_cannot_exhaust_threads() {
    let dir = TempDir::new("slowloris");
    let hub = hub_with(
        &dir,
        json!({"http": {"maxConnections": 16, "idleTimeoutMs": 60000, "requestTimeoutMs": 60000}}),
    );
    let baseline = hub.threads();
    let mut idle = Vec::new();
    for _ in 0..60 {
        let mut s = TcpStream::connect(hub.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.write_all(b"GET /api/meta HTTP/1.1\r\nHost: x");
        idle.push(s);
    }
    // Some of them got 503 and were closed; threads stay within the cap.
    assert!(wait_until(DEADLINE, || hub.threads() <= baseline + 16));
    // Once every connection over the cap has been refused and closed, the
    // hub has decided about all 60, so no thread is still to come for them.
    let mut ended = vec![false; idle.len()];
    let refused = wait_until(DEADLINE, || {
        for (s, ended) in idle.iter_mut().zip(ended.iter_mut()) {
            *ended = *ended || closed_by_peer(s);
        }
        ended.iter().filter(|e| **e).count() >= idle.len() - 16
    });
    assert!(refused, "connections over the cap were kept: {ended:?}");
    assert!(
        hub.threads() <= baseline + 16,
        "threads {} > {} + 16",
        hub.threads(),
        baseline
    );
    drop(idle);
    // After the idle clients leave, a normal client is served again.
    assert!(wait_until(DEADLINE, || hub.get("/api/meta").status == 200));
    assert!(wait_until(DEADLINE, || hub.threads() <= baseline + 1));
}

#[test]
fn a_trickling_client_is_cut_at_the_request_deadline() {
    let dir = TempDir::new("trickle");
    let hub = hub_with(
        &dir,
        json!({"http": {"idleTimeoutMs": 400, "requestTimeoutMs": 1000}}),
    );
    let mut s = TcpStream::connect(hub.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let start = std::time::Instant::now();
    let head = b"GET /api/meta HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
    let mut closed = false;
    for byte in head.iter().cycle().take(10_000) {
        if s.write_all(&[*byte]).is_err() {
            closed = true;
            break;
        }
        let mut buf = [0u8; 256];
        match s.read(&mut buf) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(_) => {
                closed = true;
                break;
            }
            Err(_) => {}
        }
        // The trickle under test: one byte every 150 ms, never idle for
        // the 400 ms idle timeout, so only the request deadline can end it.
        std::thread::sleep(Duration::from_millis(150));
        if start.elapsed() > Duration::from_secs(15) {
            break;
        }
    }
    assert!(
        closed,
        "a trickling client held its connection for {:?}",
        start.elapsed()
    );
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_eq!(hub.get("/api/meta").status, 200);
}

#[test]
fn oversized_headers_get_431_and_memory_stays_flat() {
    let dir = TempDir::new("headers");
    let hub = hub_with(&dir, json!({"http": {}}));
    let rss_before = hub.rss_kib();
    let mut s = TcpStream::connect(hub.addr).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(b"GET /api/meta HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ");
    let chunk = vec![b'a'; 64 * 1024];
    for _ in 0..(64 * 16) {
        if s.write_all(&chunk).is_err() {
            break;
        }
    }
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    let text = String::from_utf8_lossy(&reply);
    assert!(text.starts_with("HTTP/1.1 431"), "{text}");
    assert!(
        hub.rss_kib() < rss_before + 16 * 1024,
        "RSS grew from {rss_before} to {} KiB",
        hub.rss_kib()
    );

    let mut many = String::from("GET /api/meta HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    for i in 0..101 {
        many.push_str(&format!("X-H{i}: v\r\n"));
    }
    many.push_str("\r\n");
    let res = crate::util::raw_exchange(hub.addr, many.as_bytes()).unwrap();
    assert_eq!(res.status, 431);
    assert_eq!(hub.get("/api/meta").status, 200);
}

#[test]
fn sigterm_checkpoints_and_closes_the_store_while_connections_stay_open() {
    let dir = TempDir::new("store-close");
    let mut hub = TestHub::start(dir.path(), &[]);
    for id in ["one", "two", "three"] {
        let res = hub.request(
            "POST",
            "/api/sessions",
            &[],
            json!({ "session": id }).to_string().as_bytes(),
        );
        assert_eq!(res.status, 201, "{}", res.text());
    }
    // A keep-alive connection whose thread still holds the hub when the
    // signal arrives: the store must not wait for it to close.
    let mut idle = TcpStream::connect(hub.addr).unwrap();
    write!(
        idle,
        "GET /api/meta HTTP/1.1\r\nHost: {}\r\nConnection: keep-alive\r\n\r\n",
        hub.addr
    )
    .unwrap();
    let mut first = [0u8; 12];
    idle.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    let db = dir.path().join("hub.db");
    let wal = dir.path().join("hub.db-wal");
    assert!(wal.exists(), "the running hub writes through its WAL");

    signal(hub.child.id(), libc::SIGTERM);
    let status = wait_exit(&mut hub.child, DEADLINE).expect("no exit");
    assert_eq!(status.code(), Some(0));
    drop(idle);
    let wal_bytes = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    assert_eq!(wal_bytes, 0, "the WAL was not checkpointed at shutdown");
    let conn =
        rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let stored: i64 = conn
        .query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))
        .unwrap();
    assert_eq!(stored, 3);
}
