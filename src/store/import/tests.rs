//! Tests of the import over real files and a real database: what it
//! writes, that it runs once, that a refusal or a failed write leaves
//! nothing, and that the Node files stay as they were.

use std::convert::Infallible;
use std::fs;
use std::os::unix::fs::symlink;

use serde_json::{json, Value};

use super::*;
use crate::store::SessionRecord;
use crate::util::testkit::TempDir;

const CHILD: &str = "subagent-8b0f1c4e-5d6a-4b7c-9d8e-0123456789ab";

fn write(path: &Path, value: &Value) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, serde_json::to_vec_pretty(value).unwrap()).unwrap();
}

/// A Node data directory: two sessions (one with a process record and a
/// plan) and one headless child of the first with its outcomes.
fn node_dir(tag: &str) -> TempDir {
    let dir = TempDir::new(tag);
    write(
        &dir.join("hub.json"),
        &json!({"version": 1, "saved_at": "2026-05-01T10:00:00.000Z", "sessions": [
            {"id": "alpha", "token": "tok-a", "spec": {"provider": "mock"},
             "created_at": "2026-05-01T09:00:00.000Z", "lifecycle_id": "life-a",
             "process": {"pid": 4242, "pid_start_time": "99", "started_at": "2026-05-01T09:00:01.000Z",
                         "command": "/bin/w", "args": ["x"], "cwd": "/", "pid_file": null,
                         "log_path": null, "state": "running"}},
            {"id": "beta", "token": "tok-b", "spec": {}, "created_at": "2026-05-01T09:30:00.000Z",
             "lifecycle_id": "life-b", "process": null}
        ]}),
    );
    write(
        &dir.join("sessions/alpha/plan.json"),
        &json!({"markdown": "- step", "revision": 3, "updated_at": "2026-05-01T09:40:00.000Z"}),
    );
    write(
        &dir.join(format!("subagents/{CHILD}/metadata.json")),
        &json!({"id": CHILD, "token": "tok-c", "spec": {}, "created_at": "2026-05-01T09:10:00.000Z",
                "lifecycle_id": "life-c", "process": null, "kind": "headless",
                "cascading_parent": {"session_id": "alpha", "lifecycle_id": "life-a", "worker_id": "w"},
                "subagent": {"parent": "alpha", "lifecycle": "ready", "policy": "deny"},
                "cleanup_attempts": 0, "retry_at": 0}),
    );
    write(
        &dir.join(format!("subagents/{CHILD}/operations.json")),
        &json!({"receipts": [], "requests": [
            {"request_id": "r1", "operation": "message", "state": "admitted", "run_id": "run-1", "at": "t"}
        ]}),
    );
    dir
}

/// Every file under `dir` with its bytes, sorted.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path
                .file_name()
                .is_some_and(|n| !n.to_string_lossy().starts_with("hub.db"))
            {
                out.push((path.clone(), fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

fn open(dir: &TempDir) -> Store {
    Store::open(&dir.join("hub.db")).unwrap()
}

/// The import with nothing to do before the write.
fn import(store: &mut Store, data_dir: &Path) -> Result<Option<Summary>, StoreError> {
    run(store, data_dir, &mut |_| Ok::<_, Infallible>(Vec::new()))
}

#[test]
fn the_docker_contexts_are_seen_before_the_write_and_its_error_writes_nothing() {
    let dir = node_dir("imp-docker");
    let hub_json = dir.join("hub.json");
    let mut doc: Value = serde_json::from_slice(&fs::read(&hub_json).unwrap()).unwrap();
    let context = json!({"executable": "/usr/bin/docker", "cwd": "/", "env": {}, "name": "w"});
    doc["sessions"][0]["process"]["docker_management"] = context.clone();
    write(&hub_json, &doc);
    let mut store = open(&dir);
    let mut seen = Vec::new();
    let err = run(&mut store, dir.path(), &mut |batch| {
        seen = batch.docker.clone();
        assert_eq!(batch.process("alpha").map(|p| p.pid), Some(4242));
        Err(io::Error::other("cannot write the context"))
    })
    .unwrap_err();
    assert_eq!(seen, vec![("alpha".to_string(), context)]);
    assert!(
        err.to_string().contains("cannot write the context"),
        "{err}"
    );
    assert!(!store.has_sessions().unwrap());
    assert_eq!(store.marker().unwrap(), None);
    // Its notes are the import's; the import then happens.
    let summary = run(&mut store, dir.path(), &mut |_| {
        Ok::<_, Infallible>(vec!["a note".into()])
    })
    .unwrap();
    assert_eq!(summary.map(|s| s.sessions), Some(2));
}

#[test]
fn everything_is_imported_once_and_the_node_files_stay_unchanged() {
    let dir = node_dir("imp-all");
    let before = snapshot(dir.path());
    let mut store = open(&dir);
    let summary = import(&mut store, dir.path()).unwrap().expect("imported");
    assert_eq!(
        summary,
        Summary {
            sessions: 2,
            processes: 1,
            subagents: 1,
            plans: 1
        }
    );
    let sessions = store.load_sessions().unwrap();
    let ids: Vec<(&str, &str, &str)> = sessions
        .iter()
        .map(|s| (s.id.as_str(), s.token.as_str(), s.kind.as_str()))
        .collect();
    assert_eq!(
        ids,
        [
            ("alpha", "tok-a", "ordinary"),
            (CHILD, "tok-c", "headless"),
            ("beta", "tok-b", "ordinary")
        ]
    );
    let processes = store.load_processes().unwrap();
    assert_eq!(processes.len(), 1);
    assert_eq!(
        (processes[0].pid, processes[0].start_time),
        (4242, Some(99))
    );
    assert_eq!(processes[0].lifecycle_id, "life-a");
    let plan = store.get_plan("alpha").unwrap();
    assert_eq!((plan.markdown.as_str(), plan.revision), ("- step", 3));
    let children = store.load_subagents().unwrap();
    assert_eq!(children[0].meta["policy"], "deny");
    assert_eq!(children[0].outcomes[0]["request_id"], "r1");
    let marker: Value = serde_json::from_str(&store.marker().unwrap().unwrap()).unwrap();
    assert_eq!(marker["sessions"], 2);
    assert_eq!(marker["subagents"], 1);

    // Again, and after a reopen: nothing more.
    assert_eq!(import(&mut store, dir.path()).unwrap(), None);
    drop(store);
    let mut store = open(&dir);
    assert_eq!(import(&mut store, dir.path()).unwrap(), None);
    assert_eq!(store.load_sessions().unwrap().len(), 3);
    assert_eq!(snapshot(dir.path()), before, "a Node file changed");
}

#[test]
fn a_refused_file_leaves_nothing_and_a_fixed_one_imports() {
    let dir = node_dir("imp-refuse");
    let child_meta = dir.join(format!("subagents/{CHILD}/metadata.json"));
    let good = fs::read(&child_meta).unwrap();
    fs::write(&child_meta, br#"{"kind": "headless", "id": 5}"#).unwrap();
    let before = snapshot(dir.path());
    let mut store = open(&dir);
    let err = import(&mut store, dir.path()).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(&err, StoreError::NodeImport { path, .. } if *path == child_meta),
        "{text}"
    );
    assert!(
        text.contains("id: must be a string, not a number"),
        "{text}"
    );
    assert!(text.contains("nothing was imported"), "{text}");
    assert!(store.load_sessions().unwrap().is_empty());
    assert_eq!(store.marker().unwrap(), None);
    assert_eq!(snapshot(dir.path()), before);

    fs::write(&child_meta, good).unwrap();
    assert!(import(&mut store, dir.path()).unwrap().is_some());
}

#[test]
fn a_failed_write_rolls_everything_back() {
    let dir = node_dir("imp-rollback");
    let mut store = open(&dir);
    // The last table written refuses: everything before it must go too.
    store
        .conn
        .execute_batch(
            "CREATE TEMP TRIGGER refuse BEFORE INSERT ON plans
             BEGIN SELECT RAISE(ABORT, 'disk gave up'); END;",
        )
        .unwrap();
    let err = import(&mut store, dir.path()).unwrap_err();
    assert!(err.to_string().contains("disk gave up"), "{err}");
    assert!(store.load_sessions().unwrap().is_empty());
    assert!(store.load_processes().unwrap().is_empty());
    assert!(store.load_subagents().unwrap().is_empty());
    assert_eq!(store.marker().unwrap(), None);
    store.conn.execute_batch("DROP TRIGGER refuse").unwrap();
    assert!(import(&mut store, dir.path()).unwrap().is_some());
}

#[test]
fn nothing_is_imported_without_hub_json_or_into_a_used_store() {
    let empty = TempDir::new("imp-none");
    let mut store = open(&empty);
    assert_eq!(import(&mut store, empty.path()).unwrap(), None);
    assert_eq!(store.marker().unwrap(), None);

    let dir = node_dir("imp-used");
    let mut store = open(&dir);
    store
        .insert_session(&SessionRecord {
            id: "mine".into(),
            created_at: "2026-06-01T00:00:00.000Z".into(),
            spec: json!({}),
            token: "t".into(),
            lifecycle_id: "l".into(),
            kind: "ordinary".into(),
        })
        .unwrap();
    assert_eq!(import(&mut store, dir.path()).unwrap(), None);
    let ids: Vec<String> = store
        .load_sessions()
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(ids, ["mine"]);
    assert_eq!(store.marker().unwrap(), None);
}

#[test]
fn links_and_oversized_files_are_refused() {
    let dir = node_dir("imp-links");
    let meta = dir.join(format!("subagents/{CHILD}/metadata.json"));
    let elsewhere = dir.join("elsewhere.json");
    fs::rename(&meta, &elsewhere).unwrap();
    symlink(&elsewhere, &meta).unwrap();
    let mut store = open(&dir);
    let err = import(&mut store, dir.path()).unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");

    fs::remove_file(&meta).unwrap();
    fs::write(&meta, vec![b' '; MAX_SMALL_FILE as usize + 1]).unwrap();
    let err = import(&mut store, dir.path()).unwrap_err();
    assert!(err.to_string().contains("larger than"), "{err}");
    assert!(store.load_sessions().unwrap().is_empty());
}

#[test]
fn a_child_directory_without_metadata_is_left_alone() {
    let dir = node_dir("imp-nometa");
    fs::remove_file(dir.join(format!("subagents/{CHILD}/metadata.json"))).unwrap();
    fs::create_dir_all(dir.join("subagents/not-a-child")).unwrap();
    let mut store = open(&dir);
    let summary = import(&mut store, dir.path()).unwrap().unwrap();
    assert_eq!((summary.sessions, summary.subagents), (2, 0));
    assert!(dir
        .join(format!("subagents/{CHILD}/operations.json"))
        .exists());
}
