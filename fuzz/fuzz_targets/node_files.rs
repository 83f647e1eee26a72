//! The Node hub's data directory files, as the one-time import reads them
//! (`store::node::{parse_hub_json, parse_metadata, parse_operations,
//! parse_plan, assemble}`).
//!
//! Every parser takes the input bytes as a whole file and never panics.
//! Refusals name their file and keep their message short. An accepted
//! `hub.json` has unique valid ids, non-empty tokens and lifecycle ids,
//! object specs, and processes of their own session and incarnation; written
//! back in the Node hub's shape it parses to the same records without
//! needing a fresh id. An accepted `metadata.json` (tried under the id it
//! names) is a headless session of exactly that id with a complete parent
//! reference, and assembles alone at depth 1 with its stored meta naming
//! that parent. Accepted outcomes are at most 200, each with its ids; an
//! accepted plan's text is at most 64 KiB.
//!
//! Input: the file's bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use simplex_hub::harness::store::node::{
    assemble, parse_hub_json, parse_metadata, parse_operations, parse_plan, Context, Refusal,
    MAX_PLAN_BYTES,
};
use simplex_hub::wire::ids::is_valid_id;

const NOW: &str = "2027-01-01T00:00:00.000Z";

fn check_refusal(r: &Refusal, file: &str) {
    assert_eq!(r.file, file);
    assert!(r.problem.len() <= 512, "{} bytes: {r}", r.problem.len());
    assert!(r.field.len() <= 128, "{r}");
}

fn hub_json(data: &[u8]) {
    let mut n = 0u64;
    let mut fresh = || {
        n += 1;
        format!("fresh-{n}")
    };
    let mut ctx = Context {
        now: NOW,
        fresh_id: &mut fresh,
    };
    let sessions = match parse_hub_json(data, &mut ctx) {
        Ok(sessions) => sessions,
        Err(r) => return check_refusal(&r, "hub.json"),
    };
    let mut ids = std::collections::HashSet::new();
    let mut written = Vec::new();
    for s in &sessions {
        let rec = &s.session;
        assert!(is_valid_id(&rec.id), "{:?}", rec.id);
        assert!(ids.insert(rec.id.clone()), "duplicate {:?}", rec.id);
        assert!(!rec.token.is_empty() && !rec.lifecycle_id.is_empty());
        assert!(rec.spec.is_object());
        assert_eq!(rec.kind, "ordinary");
        let process = s.process.as_ref().map(|p| {
            assert_eq!(p.session_id, rec.id);
            assert_eq!(p.lifecycle_id, rec.lifecycle_id);
            assert!(p.pid >= 1);
            json!({
                "pid": p.pid,
                "pid_start_time": p.start_time.map(|t| t.to_string()),
                "started_at": p.started_at,
                "command": p.command,
                "args": p.args,
                "cwd": p.cwd,
                "pid_file": null,
                "log_path": p.log_path,
                "state": p.state,
            })
        });
        written.push(json!({
            "id": rec.id,
            "token": rec.token,
            "spec": rec.spec,
            "created_at": rec.created_at,
            "lifecycle_id": rec.lifecycle_id,
            "process": process,
        }));
    }
    let again = serde_json::to_vec(&json!({"version": 1, "sessions": written})).unwrap();
    let mut no_fresh = || -> String { panic!("a written-back record lacked a lifecycle id") };
    let mut ctx = Context {
        now: "another time",
        fresh_id: &mut no_fresh,
    };
    let reparsed = parse_hub_json(&again, &mut ctx).expect("the written-back file is refused");
    assert_eq!(reparsed.len(), sessions.len());
    for (a, b) in reparsed.iter().zip(&sessions) {
        assert_eq!(a.session, b.session);
        assert_eq!(a.process, b.process);
    }
}

fn metadata(data: &[u8]) {
    // Under the id the record names (the only directory it can be in), and
    // under a fixed one.
    let named = serde_json::from_slice::<Value>(data)
        .ok()
        .and_then(|v| v.get("id").and_then(Value::as_str).map(str::to_owned))
        .filter(|id| is_valid_id(id));
    let fixed = "subagent-00000000-0000-4000-8000-000000000000".to_owned();
    for dir in named.into_iter().chain([fixed]) {
        let mut fresh = || "fresh".to_owned();
        let mut ctx = Context {
            now: NOW,
            fresh_id: &mut fresh,
        };
        let child = match parse_metadata(&dir, data, &mut ctx) {
            Ok(child) => child,
            Err(r) => {
                check_refusal(&r, &format!("subagents/{dir}/metadata.json"));
                continue;
            }
        };
        assert_eq!(child.session.id, dir);
        assert_eq!(child.session.kind, "headless");
        assert!(!child.session.token.is_empty());
        assert!(is_valid_id(&child.parent_session));
        assert!(!child.parent_lifecycle.is_empty() && !child.parent_worker.is_empty());
        assert!(child.cleanup_attempts <= 3);
        if let Some(p) = &child.process {
            assert_eq!(p.session_id, dir);
            assert_eq!(p.lifecycle_id, child.session.lifecycle_id);
        }
        let parent = child.parent_session.clone();
        match assemble(Vec::new(), vec![child], Vec::new()) {
            Ok(batch) => {
                let meta = &batch.children[0].2.meta;
                assert_eq!(meta["depth"], 1);
                assert_eq!(meta["parent"]["session_id"], parent.as_str());
            }
            // Its own parent: a loop of one.
            Err(r) => {
                assert_eq!(parent, dir, "{r}");
                assert!(r.problem.contains("loops"), "{r}");
            }
        }
    }
}

fn operations(data: &[u8]) {
    let dir = "subagent-00000000-0000-4000-8000-000000000000";
    match parse_operations(dir, data) {
        Ok(Value::Array(outcomes)) => {
            assert!(outcomes.len() <= 200);
            for o in &outcomes {
                assert!(o["request_id"].as_str().is_some_and(|s| !s.is_empty()));
                assert!(o["operation"].as_str().is_some_and(|s| !s.is_empty()));
                assert!(o["state"].is_string());
            }
        }
        Ok(other) => panic!("outcomes are not a list: {other}"),
        Err(r) => check_refusal(&r, &format!("subagents/{dir}/operations.json")),
    }
}

fn plan(data: &[u8]) {
    match parse_plan("sessions/a/plan.json", data) {
        Ok(plan) => assert!(plan.markdown.len() <= MAX_PLAN_BYTES),
        Err(r) => check_refusal(&r, "sessions/a/plan.json"),
    }
}

fuzz_target!(|data: &[u8]| {
    hub_json(data);
    metadata(data);
    operations(data);
    plan(data);
});
