//! The store's own tests: round trips, refusals, migrations.

use super::schema::{table_exists, REQUIRED_TABLES};
use super::*;
use crate::util::testkit::TempDir;
use serde_json::json;
use std::error::Error;
use std::fs;
use std::fs::{OpenOptions, Permissions};
use std::io;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;

/// The database file inside a scratch directory.
fn db(dir: &TempDir) -> PathBuf {
    dir.join("hub.db")
}

fn session(id: &str, created_at: &str) -> SessionRecord {
    SessionRecord {
        id: id.to_owned(),
        created_at: created_at.to_owned(),
        spec: json!({"title": format!("session {id}"), "model": "m", "n": 3, "tags": ["a", "b"]}),
        token: format!("tok-{id}"),
        lifecycle_id: format!("life-{id}"),
        kind: "ordinary".to_owned(),
    }
}

fn process(session_id: &str, start_time: Option<u64>) -> ProcessRecord {
    ProcessRecord {
        session_id: session_id.to_owned(),
        pid: 4242,
        start_time,
        started_at: "2026-01-01T00:00:01.000Z".to_owned(),
        command: "/usr/bin/worker".to_owned(),
        args: vec![
            "--session".to_owned(),
            session_id.to_owned(),
            "a b".to_owned(),
        ],
        cwd: "/tmp".to_owned(),
        log_path: start_time.map(|_| "/tmp/log".to_owned()),
        state: "running".to_owned(),
        lifecycle_id: format!("life-{session_id}"),
    }
}

#[test]
fn round_trip_and_reopen() {
    let dir = TempDir::new("roundtrip");
    let a = session("a", "2026-01-01T00:00:00.000Z");
    let mut b = session("b", "2025-12-31T00:00:00.000Z");
    b.kind = "special".to_owned();
    let pa = process("a", Some(123_456_789));
    let pb = process("b", None);
    let plan = PlanRecord {
        markdown: "# plan\n- [ ] step".to_owned(),
        revision: 3,
        updated_at: Some("2026-01-01T00:00:02.000Z".to_owned()),
    };
    {
        let store = Store::open(&db(&dir)).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        store.insert_session(&a).unwrap();
        store.insert_session(&b).unwrap();
        store.put_process(&pa).unwrap();
        store.put_process(&pb).unwrap();
        store.put_plan("a", &plan).unwrap();
        assert_eq!(store.load_sessions().unwrap(), vec![b.clone(), a.clone()]);
        assert_eq!(store.get_plan("a").unwrap(), plan);
        assert_eq!(store.get_plan("b").unwrap(), PlanRecord::default());
        assert_eq!(store.integrity_check().unwrap(), "ok");
    }
    let store = Store::open(&db(&dir)).unwrap();
    assert_eq!(store.load_sessions().unwrap(), vec![b, a]);
    let mut procs = store.load_processes().unwrap();
    procs.sort_by(|x, y| x.session_id.cmp(&y.session_id));
    assert_eq!(procs, vec![pa, pb]);
    assert_eq!(procs[0].start_time, Some(123_456_789));
    assert_eq!(procs[1].start_time, None);
    assert_eq!(store.get_plan("a").unwrap(), plan);
    let created_by: String = store
        .conn
        .query_row(
            "SELECT value FROM hub_meta WHERE key = 'created_by'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(created_by.starts_with("simplex-hub "));
}

#[test]
fn updates_and_upserts() {
    let dir = TempDir::new("updates");
    let store = Store::open(&db(&dir)).unwrap();
    store
        .insert_session(&session("s", "2026-01-01T00:00:00.000Z"))
        .unwrap();
    let spec = json!({"title": "renamed", "nested": {"x": [1, 2]}});
    store.update_session_spec("s", &spec).unwrap();
    store.set_lifecycle_id("s", "life-2").unwrap();
    let loaded = &store.load_sessions().unwrap()[0];
    assert_eq!(loaded.spec, spec);
    assert_eq!(loaded.lifecycle_id, "life-2");
    assert_eq!(loaded.token, "tok-s");

    let mut p = process("s", Some(1));
    store.put_process(&p).unwrap();
    p.pid = 99;
    p.start_time = None;
    p.args = vec![];
    store.put_process(&p).unwrap();
    store.set_process_state("s", "exited").unwrap();
    p.state = "exited".to_owned();
    assert_eq!(store.load_processes().unwrap(), vec![p]);
    store.clear_process("s").unwrap();
    store.clear_process("s").unwrap();
    assert!(store.load_processes().unwrap().is_empty());

    let mut plan = PlanRecord {
        markdown: "one".to_owned(),
        revision: 1,
        updated_at: None,
    };
    store.put_plan("s", &plan).unwrap();
    plan.markdown = "two".to_owned();
    plan.revision = 2;
    plan.updated_at = Some("t".to_owned());
    store.put_plan("s", &plan).unwrap();
    assert_eq!(store.get_plan("s").unwrap(), plan);
}

#[test]
fn writes_to_missing_rows_fail() {
    let dir = TempDir::new("missing");
    let store = Store::open(&db(&dir)).unwrap();
    assert!(store.update_session_spec("nope", &json!({})).is_err());
    assert!(store.set_lifecycle_id("nope", "l").is_err());
    assert!(store.set_process_state("nope", "running").is_err());
    assert!(store.put_process(&process("nope", None)).is_err());
    assert!(store.put_plan("nope", &PlanRecord::default()).is_err());
    assert!(!store.delete_session("nope").unwrap());
    store.clear_process("nope").unwrap();
}

#[test]
fn duplicate_session_is_refused() {
    let dir = TempDir::new("dup");
    let store = Store::open(&db(&dir)).unwrap();
    let s = session("dup", "2026-01-01T00:00:00.000Z");
    store.insert_session(&s).unwrap();
    let err = store.insert_session(&s).unwrap_err();
    assert!(
        matches!(&err, StoreError::SessionExists { id } if id == "dup"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "insert session dup: session already exists"
    );
    assert_eq!(store.load_sessions().unwrap().len(), 1);
}

#[test]
fn delete_cascades() {
    let dir = TempDir::new("cascade");
    let store = Store::open(&db(&dir)).unwrap();
    for id in ["a", "b"] {
        store
            .insert_session(&session(id, "2026-01-01T00:00:00.000Z"))
            .unwrap();
        store.put_process(&process(id, Some(5))).unwrap();
        store
            .put_plan(
                id,
                &PlanRecord {
                    markdown: "p".to_owned(),
                    revision: 1,
                    updated_at: None,
                },
            )
            .unwrap();
    }
    assert!(store.delete_session("a").unwrap());
    assert!(!store.delete_session("a").unwrap());
    let ids: Vec<_> = store
        .load_sessions()
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(ids, ["b"]);
    let procs = store.load_processes().unwrap();
    assert_eq!(procs.len(), 1);
    assert_eq!(procs[0].session_id, "b");
    assert_eq!(store.get_plan("a").unwrap(), PlanRecord::default());
    assert_eq!(store.get_plan("b").unwrap().revision, 1);
    let orphans: i64 = store
        .conn
        .query_row(
            "SELECT (SELECT count(*) FROM processes WHERE session_id = 'a')
                  + (SELECT count(*) FROM plans WHERE session_id = 'a')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(orphans, 0);
}

#[test]
fn grants_are_kept_revoked_in_their_session_and_go_with_it() {
    let dir = TempDir::new("grants");
    let store = Store::open(&db(&dir)).unwrap();
    for id in ["a", "b"] {
        store
            .insert_session(&session(id, "2026-01-01T00:00:00.000Z"))
            .unwrap();
    }
    let grant = |id: &str, session: &str| GrantRecord {
        id: id.into(),
        session_id: session.into(),
        tool: "run_command".into(),
        arguments: r#"{"command":"make"}"#.into(),
        created_at: "2026-01-01T00:00:01.000Z".into(),
    };
    store.insert_grant(&grant("g1", "a")).unwrap();
    store.insert_grant(&grant("g2", "b")).unwrap();
    assert!(
        store.insert_grant(&grant("g3", "nobody")).is_err(),
        "foreign key"
    );
    // Revoked by id within its session only.
    assert!(!store.delete_grant("b", "g1").unwrap());
    assert!(store.delete_grant("b", "g2").unwrap());
    assert_eq!(store.load_grants().unwrap(), [grant("g1", "a")]);
    drop(store);
    let store = Store::open(&db(&dir)).unwrap();
    assert_eq!(store.load_grants().unwrap().len(), 1);
    assert!(store.delete_session("a").unwrap());
    assert!(store.load_grants().unwrap().is_empty());
}

#[test]
fn bad_rows_are_skipped_on_load() {
    let dir = TempDir::new("badrows");
    let store = Store::open(&db(&dir)).unwrap();
    store
        .insert_session(&session("good", "2026-01-01T00:00:00.000Z"))
        .unwrap();
    store
        .conn
        .execute(
            "INSERT INTO sessions (id, created_at, spec, token, lifecycle_id)
             VALUES ('bad', '2026', '{not json', 't', 'l')",
            [],
        )
        .unwrap();
    store.put_process(&process("good", None)).unwrap();
    store
        .conn
        .execute(
            "INSERT INTO processes (session_id, pid, started_at, command, args, cwd,
                                    state, lifecycle_id)
             VALUES ('bad', 7, 't', 'c', '[1, 2]', '/', 'running', 'l')",
            [],
        )
        .unwrap();
    let sessions = store.load_sessions().unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].id, "good");
    let kind: String = store
        .conn
        .query_row("SELECT kind FROM sessions WHERE id = 'bad'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(kind, "ordinary");
    let procs = store.load_processes().unwrap();
    assert_eq!(procs.len(), 1);
    assert_eq!(procs[0].session_id, "good");
}

#[test]
fn file_mode_is_0600() {
    let dir = TempDir::new("mode");
    let store = Store::open(&db(&dir)).unwrap();
    store
        .insert_session(&session("m", "2026-01-01T00:00:00.000Z"))
        .unwrap();
    let mode = |p: PathBuf| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(db(&dir)), 0o600);
    assert_eq!(mode(dir.join("hub.db-wal")), 0o600);
    assert_eq!(mode(dir.join("hub.db-shm")), 0o600);
    drop(store);

    // An existing file with a loose mode is tightened.
    fs::set_permissions(db(&dir), Permissions::from_mode(0o644)).unwrap();
    let _store = Store::open(&db(&dir)).unwrap();
    assert_eq!(mode(db(&dir)), 0o600);
}

#[test]
fn pragmas_are_set() {
    let dir = TempDir::new("wal");
    let store = Store::open(&db(&dir)).unwrap();
    let q = |name: &str| -> String {
        store
            .conn
            .pragma_query_value(None, name, |r| r.get::<_, rusqlite::types::Value>(0))
            .map(|v| match v {
                rusqlite::types::Value::Text(s) => s,
                rusqlite::types::Value::Integer(i) => i.to_string(),
                other => format!("{other:?}"),
            })
            .unwrap()
    };
    assert_eq!(q("journal_mode"), "wal");
    assert_eq!(q("synchronous"), "2"); // FULL
    assert_eq!(q("foreign_keys"), "1");
    assert_eq!(q("application_id"), APPLICATION_ID.to_string());
    assert_eq!(q("busy_timeout"), "5000");
    drop(store);
    // WAL mode is persistent in the file header (bytes 18 and 19 are 2).
    let bytes = fs::read(db(&dir)).unwrap();
    assert_eq!(&bytes[18..20], &[2, 2]);
}

#[test]
fn garbage_file_is_not_a_database() {
    let dir = TempDir::new("garbage");
    let garbage: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 13) as u8).collect();
    fs::write(db(&dir), &garbage).unwrap();
    let err = Store::open(&db(&dir))
        .err()
        .expect("garbage must be refused");
    assert!(matches!(err, StoreError::NotADatabase { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains(&db(&dir).display().to_string()), "{msg}");
    assert!(msg.contains("move it aside"), "{msg}");
    assert_eq!(
        fs::read(db(&dir)).unwrap(),
        garbage,
        "file must be untouched"
    );

    fs::write(db(&dir), b"hello, this is a text file\n").unwrap();
    let err = Store::open(&db(&dir)).err().expect("text must be refused");
    assert!(matches!(err, StoreError::NotADatabase { .. }), "{err:?}");
}

#[test]
fn foreign_database_is_refused() {
    let dir = TempDir::new("foreign");
    {
        let conn = Connection::open(db(&dir)).unwrap();
        conn.execute_batch("CREATE TABLE x (a INTEGER); INSERT INTO x VALUES (1);")
            .unwrap();
    }
    let before = fs::read(db(&dir)).unwrap();
    let err = Store::open(&db(&dir))
        .err()
        .expect("foreign db must be refused");
    assert!(matches!(err, StoreError::Foreign { .. }), "{err:?}");
    assert!(err.to_string().contains(&db(&dir).display().to_string()));
    assert_eq!(
        fs::read(db(&dir)).unwrap(),
        before,
        "file must be untouched"
    );

    // Our application id but someone else's tables at version 0.
    let dir2 = TempDir::new("foreign2");
    {
        let conn = Connection::open(db(&dir2)).unwrap();
        conn.pragma_update(None, "application_id", APPLICATION_ID)
            .unwrap();
        conn.execute_batch("CREATE TABLE x (a INTEGER);").unwrap();
    }
    let err = Store::open(&db(&dir2)).err().expect("must be refused");
    assert!(matches!(err, StoreError::Foreign { .. }), "{err:?}");

    // A hub_meta table without our application id.
    let dir3 = TempDir::new("foreign3");
    {
        let conn = Connection::open(db(&dir3)).unwrap();
        conn.execute_batch("CREATE TABLE hub_meta (key TEXT, value TEXT);")
            .unwrap();
    }
    let err = Store::open(&db(&dir3)).err().expect("must be refused");
    assert!(matches!(err, StoreError::Foreign { .. }), "{err:?}");
}

#[test]
fn newer_schema_is_refused() {
    let dir = TempDir::new("toonew");
    {
        let conn = Connection::open(db(&dir)).unwrap();
        conn.pragma_update(None, "application_id", APPLICATION_ID)
            .unwrap();
        conn.pragma_update(None, "user_version", 99).unwrap();
    }
    let err = Store::open(&db(&dir))
        .err()
        .expect("too new must be refused");
    match &err {
        StoreError::TooNew {
            found, supported, ..
        } => {
            assert_eq!(*found, 99);
            assert_eq!(*supported, SCHEMA_VERSION);
        }
        other => panic!("expected TooNew, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("99") && msg.contains(&db(&dir).display().to_string()));
}

#[test]
fn subagent_records_and_receipts() {
    let dir = TempDir::new("subagents");
    let mut store = Store::open(&db(&dir)).unwrap();
    let mut child = session("subagent-1", "2026-01-01T00:00:00.000Z");
    child.kind = "headless".into();
    let rec = SubagentRecord {
        id: "subagent-1".into(),
        meta: json!({"lifecycle": "preparing"}),
        outcomes: json!([]),
    };
    let receipt = ReceiptRecord {
        key: "k1".into(),
        hash: "h1".into(),
        result: json!({"subagent_id": "subagent-1"}),
        created_ms: 10,
    };
    store.insert_subagent(&child, &rec, Some(&receipt)).unwrap();
    // The same id again: nothing of the second attempt remains.
    assert!(store.insert_subagent(&child, &rec, None).is_err());
    assert_eq!(store.load_subagents().unwrap(), vec![rec.clone()]);
    store
        .put_subagent_meta("subagent-1", &json!({"lifecycle": "ready"}))
        .unwrap();
    store
        .put_subagent_outcomes("subagent-1", &json!([{"request_id": "r"}]))
        .unwrap();
    let loaded = store.load_subagents().unwrap();
    assert_eq!(loaded[0].meta["lifecycle"], "ready");
    assert_eq!(loaded[0].outcomes[0]["request_id"], "r");
    assert!(store.put_subagent_meta("nope", &json!({})).is_err());
    assert_eq!(store.get_receipt("k1").unwrap(), Some(receipt.clone()));
    for i in 0..5u64 {
        let mut r = receipt.clone();
        r.key = format!("n{i}");
        r.created_ms = 100 + i;
        store.put_receipt(&r).unwrap();
    }
    // Older than 50 ms goes; then only the newest 3 stay.
    store.prune_receipts(50, 3).unwrap();
    assert_eq!(store.get_receipt("k1").unwrap(), None);
    assert!(store.get_receipt("n1").unwrap().is_none());
    assert!(store.get_receipt("n2").unwrap().is_some());
    assert!(store.get_receipt("n4").unwrap().is_some());
    // Deleting the session deletes its subagent row.
    assert!(store.delete_session("subagent-1").unwrap());
    assert!(store.load_subagents().unwrap().is_empty());
}

#[test]
fn migrates_from_version_0() {
    // Our application id, user_version 0, no tables.
    let dir = TempDir::new("v0");
    {
        let conn = Connection::open(db(&dir)).unwrap();
        conn.pragma_update(None, "application_id", APPLICATION_ID)
            .unwrap();
        conn.pragma_update(None, "user_version", 0).unwrap();
    }
    let store = Store::open(&db(&dir)).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    store
        .insert_session(&session("x", "2026-01-01T00:00:00.000Z"))
        .unwrap();
    for table in REQUIRED_TABLES {
        assert!(table_exists(&store.conn, table).unwrap(), "{table}");
    }
    drop(store);
    assert_eq!(
        Store::open(&db(&dir))
            .unwrap()
            .load_sessions()
            .unwrap()
            .len(),
        1
    );

    // An empty file (e.g. left by a crash before the first migration).
    let dir2 = TempDir::new("empty");
    fs::write(db(&dir2), b"").unwrap();
    let store = Store::open(&db(&dir2)).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
}

#[test]
fn missing_parent_directory_is_an_io_error() {
    let dir = TempDir::new("noparent");
    let path = dir.join("absent").join("hub.db");
    let err = Store::open(&path).err().expect("must fail");
    assert!(matches!(err, StoreError::Io { .. }), "{err:?}");
    assert!(err.source().is_some());
    assert!(
        err.to_string().starts_with("create database file "),
        "{err}"
    );
}

#[test]
fn corrupted_file_is_an_error_not_a_panic() {
    let dir = TempDir::new("corrupt");
    {
        let store = Store::open(&db(&dir)).unwrap();
        for i in 0..300 {
            let mut s = session(&format!("s{i:04}"), "2026-01-01T00:00:00.000Z");
            s.spec = json!({"blob": "x".repeat(1000), "i": i});
            store.insert_session(&s).unwrap();
            store.put_process(&process(&s.id, Some(i))).unwrap();
        }
    } // closing the last connection checkpoints the WAL into the file
    let len = fs::metadata(db(&dir)).unwrap().len();
    assert!(len > 40 * 4096, "database too small to corrupt: {len}");
    {
        let mut f = OpenOptions::new().write(true).open(db(&dir)).unwrap();
        let garbage: Vec<u8> = (0..20 * 4096u32).map(|i| (i * 31 + 7) as u8).collect();
        f.seek(SeekFrom::Start(len / 2 - 10 * 4096)).unwrap();
        f.write_all(&garbage).unwrap();
        f.sync_all().unwrap();
    }
    let outcome = match Store::open(&db(&dir)) {
        Err(err) => {
            assert!(
                matches!(
                    err,
                    StoreError::Corrupt { .. } | StoreError::NotADatabase { .. }
                ),
                "{err:?}"
            );
            format!("open refused: {err}")
        }
        Ok(store) => match store.integrity_check() {
            Ok(report) => {
                assert_ne!(report, "ok");
                format!("integrity_check: {report}")
            }
            Err(err) => format!("integrity_check failed: {err}"),
        },
    };
    eprintln!("corruption detected as expected: {outcome}");
}

#[test]
fn error_messages_are_lowercase_with_path() {
    let p = PathBuf::from("/data/hub.db");
    let errors = [
        StoreError::NotADatabase { path: p.clone() },
        StoreError::Foreign { path: p.clone() },
        StoreError::TooNew {
            path: p.clone(),
            found: 2,
            supported: 1,
        },
        StoreError::Corrupt {
            path: p.clone(),
            detail: "quick_check: page 3 is bad".to_owned(),
        },
        StoreError::Io {
            path: p.clone(),
            op: "open database file",
            err: io::Error::from(io::ErrorKind::PermissionDenied),
        },
    ];
    for err in errors {
        let msg = err.to_string();
        assert!(msg.contains("/data/hub.db"), "{msg}");
        assert!(msg.starts_with(|c: char| c.is_lowercase()), "{msg}");
        assert!(!msg.ends_with('.'), "{msg}");
    }
}
