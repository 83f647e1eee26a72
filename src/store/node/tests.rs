//! Tests of the Node file parser: the shapes the Node hub writes, what is
//! carried over exactly, and each refusal naming its file and field.

use serde_json::{json, Value};

use super::*;
use crate::session::headless::Child;

const NOW: &str = "2027-01-01T00:00:00.000Z";

/// Runs `f` with a context whose fresh ids count up (`fresh-1`, ...).
fn with_ctx<T>(f: impl FnOnce(&mut Context<'_>) -> T) -> T {
    let mut n = 0;
    let mut fresh = || {
        n += 1;
        format!("fresh-{n}")
    };
    let mut ctx = Context {
        now: NOW,
        fresh_id: &mut fresh,
    };
    f(&mut ctx)
}

/// A `hub.json` as the Node hub writes it: two sessions, the first with a
/// running worker's process record.
fn hub_json() -> Value {
    json!({
        "version": 1,
        "saved_at": "2026-05-01T10:00:00.000Z",
        "sessions": [
            {
                "id": "alpha",
                "token": "tok-alpha_-AZ09",
                "spec": {"provider": "mock", "threads": 2, "eventCapacity": 64},
                "created_at": "2026-05-01T09:00:00.000Z",
                "lifecycle_id": "3e0c5c1a-0000-4000-8000-000000000001",
                "process": {
                    "pid": 4242,
                    "pid_start_time": "987654",
                    "started_at": "2026-05-01T09:00:01.000Z",
                    "command": "/usr/bin/simplex",
                    "args": ["run", "--config", "/d/sessions/alpha/config/config.yaml"],
                    "cwd": "/d/sessions/alpha",
                    "pid_file": null,
                    "log_path": "/d/sessions/alpha/logs/worker.log",
                    "state": "running"
                }
            },
            {
                "id": "beta",
                "token": "tok-beta",
                "spec": {},
                "created_at": "2026-05-01T09:30:00.000Z",
                "lifecycle_id": "",
                "process": null
            }
        ]
    })
}

fn parse(doc: &Value) -> Result<Vec<NodeSession>, Refusal> {
    with_ctx(|ctx| parse_hub_json(doc.to_string().as_bytes(), ctx))
}

#[track_caller]
fn refused(doc: &Value, field: &str, problem: &str) {
    let r = parse(doc).expect_err("accepted");
    assert_eq!(r.file, "hub.json");
    assert_eq!(r.field, field, "{r}");
    assert!(r.problem.contains(problem), "{r}");
}

#[test]
fn hub_json_sessions_come_over_exactly() {
    let sessions = parse(&hub_json()).unwrap();
    assert_eq!(sessions.len(), 2);
    let a = &sessions[0];
    assert_eq!(a.session.id, "alpha");
    assert_eq!(a.session.token, "tok-alpha_-AZ09");
    assert_eq!(a.session.kind, "ordinary");
    assert_eq!(a.session.created_at, "2026-05-01T09:00:00.000Z");
    assert_eq!(a.session.spec, hub_json()["sessions"][0]["spec"]);
    assert_eq!(
        a.session.lifecycle_id,
        "3e0c5c1a-0000-4000-8000-000000000001"
    );
    let p = a.process.as_ref().unwrap();
    assert_eq!(p.session_id, "alpha");
    assert_eq!(p.pid, 4242);
    assert_eq!(p.start_time, Some(987_654));
    assert_eq!(p.started_at, "2026-05-01T09:00:01.000Z");
    assert_eq!(p.command, "/usr/bin/simplex");
    assert_eq!(p.args.len(), 3);
    assert_eq!(p.cwd, "/d/sessions/alpha");
    assert_eq!(
        p.log_path.as_deref(),
        Some("/d/sessions/alpha/logs/worker.log")
    );
    assert_eq!(p.state, "running");
    // The process belongs to the session's current incarnation.
    assert_eq!(p.lifecycle_id, a.session.lifecycle_id);
    assert!(a.notes.is_empty());

    let b = &sessions[1];
    assert_eq!(b.session.token, "tok-beta");
    assert_eq!(
        b.session.lifecycle_id, "fresh-1",
        "an empty id gets a fresh one"
    );
    assert_eq!(b.process, None);
}

#[test]
fn optional_fields_take_their_defaults_and_unknown_ones_are_ignored() {
    let doc = json!({
        "version": 1,
        "extra": {"anything": true},
        "sessions": [{
            "id": "old",
            "token": "t",
            "unknown_field": [1, 2],
            "process": {"pid": 7, "pid_start_time": null, "docker_management": {"x": 1},
                        "pid_file": "/run/w.pid", "state": "stopped"}
        }]
    });
    let s = &parse(&doc).unwrap()[0];
    assert_eq!(s.session.spec, json!({}));
    assert_eq!(s.session.created_at, NOW);
    assert_eq!(s.session.lifecycle_id, "fresh-1");
    let p = s.process.as_ref().unwrap();
    assert_eq!(p.start_time, None);
    assert_eq!(p.state, "exited", "the Node hub's stopped is exited here");
    assert_eq!(p.started_at, NOW);
    assert!(p.args.is_empty() && p.command.is_empty() && p.log_path.is_none());
    assert_eq!(s.notes.len(), 1, "{:?}", s.notes);
    assert!(s.notes.iter().any(|n| n.contains("/run/w.pid")));
    // The Docker context is kept as stored: the supervisor judges it.
    assert_eq!(s.docker, Some(json!({"x": 1})));
}

#[test]
fn a_file_that_is_not_the_node_hubs_is_refused_whole() {
    let r = with_ctx(|ctx| parse_hub_json(b"{\"version\": 1, \"sessions\": [", ctx)).unwrap_err();
    assert_eq!((r.file.as_str(), r.field.as_str()), ("hub.json", ""));
    assert!(r.problem.contains("not valid JSON"), "{r}");
    let r = with_ctx(|ctx| parse_hub_json(b"\xff\xfe", ctx)).unwrap_err();
    assert!(r.problem.contains("not valid JSON"), "{r}");
    for foreign in [
        json!([1, 2]),
        json!({"name": "package", "version": "1.0.0"}),
        json!({"version": 1, "sessions": {"a": 1}}),
        json!({"sessions": []}),
        json!({"version": "1", "sessions": []}),
    ] {
        refused(&foreign, "", "not a Node Simplex Hub state file");
    }
    refused(
        &json!({"version": 2, "sessions": []}),
        "version",
        "not supported",
    );
}

#[test]
fn each_bad_field_is_named() {
    let mut doc = hub_json();
    doc["sessions"][1].as_object_mut().unwrap().remove("token");
    refused(&doc, "sessions[1].token", "missing");

    let mut doc = hub_json();
    doc["sessions"][0]["token"] = json!("");
    refused(&doc, "sessions[0].token", "empty");

    let mut doc = hub_json();
    doc["sessions"][0]["token"] = json!(12);
    refused(&doc, "sessions[0].token", "must be a string, not a number");

    let mut doc = hub_json();
    doc["sessions"][1]["id"] = json!("../escape");
    refused(&doc, "sessions[1].id", "not a session id");

    let mut doc = hub_json();
    doc["sessions"][1]["id"] = json!("alpha");
    refused(&doc, "sessions[1].id", "also the id of sessions[0]");

    let mut doc = hub_json();
    doc["sessions"][0]["spec"] = json!("mock");
    refused(&doc, "sessions[0].spec", "must be an object");

    let mut doc = hub_json();
    doc["sessions"][0]["created_at"] = json!(5);
    refused(&doc, "sessions[0].created_at", "must be a string");

    let mut doc = hub_json();
    doc["sessions"][1] = json!("beta");
    refused(&doc, "sessions[1]", "must be an object");

    let process = |key: &str, value: Value| {
        let mut doc = hub_json();
        doc["sessions"][0]["process"][key] = value;
        doc
    };
    let mut doc = hub_json();
    doc["sessions"][0]["process"]
        .as_object_mut()
        .unwrap()
        .remove("pid");
    refused(&doc, "sessions[0].process.pid", "missing");
    refused(
        &process("pid", json!(0)),
        "sessions[0].process.pid",
        "positive",
    );
    refused(
        &process("pid", json!(-3)),
        "sessions[0].process.pid",
        "positive",
    );
    refused(
        &process("pid", json!(1u64 << 33)),
        "sessions[0].process.pid",
        "positive",
    );
    refused(
        &process("pid_start_time", json!("12ab")),
        "sessions[0].process.pid_start_time",
        "clock ticks",
    );
    refused(
        &process("pid_start_time", json!("+12")),
        "sessions[0].process.pid_start_time",
        "clock ticks",
    );
    refused(
        &process("args", json!(["a", 1])),
        "sessions[0].process.args[1]",
        "string",
    );
    refused(
        &process("args", json!("a b")),
        "sessions[0].process.args",
        "array",
    );
    refused(
        &process("state", json!("zombie")),
        "sessions[0].process.state",
        "not a process state",
    );
    refused(
        &process("cwd", json!(false)),
        "sessions[0].process.cwd",
        "string",
    );
    // A start time written as a number is the same value.
    let s = parse(&process("pid_start_time", json!(55))).unwrap();
    assert_eq!(s[0].process.as_ref().unwrap().start_time, Some(55));
}

const CHILD: &str = "subagent-8b0f1c4e-5d6a-4b7c-9d8e-0123456789ab";
const GRANDCHILD: &str = "subagent-1a2b3c4d-5e6f-4a7b-8c9d-abcdefabcdef";

/// A headless child's `metadata.json` as the Node hub writes it.
fn metadata(id: &str, parent: &str) -> Value {
    json!({
        "id": id,
        "token": format!("child-token-{id}"),
        "spec": {"threads": 1},
        "created_at": "2026-05-01T09:10:00.000Z",
        "lifecycle_id": format!("life-{id}"),
        "process": {"pid": 5151, "pid_start_time": "111", "started_at": "2026-05-01T09:10:01.000Z",
                    "command": "/usr/bin/simplex", "args": [], "cwd": "/d", "pid_file": null,
                    "log_path": null, "state": "running"},
        "kind": "headless",
        "cascading_parent": {"session_id": parent, "lifecycle_id": "parent-life", "worker_id": "w-parent"},
        "subagent": {"parent": parent, "lifecycle": "ready", "policy": "approve",
                     "health": "healthy", "reason": "live identified worker event channel",
                     "observed_at": null, "active": false},
        "error": "",
        "uncertain_start": false,
        "termination_confirmed": false,
        "cleanup_attempts": 1,
        "retry_at": 0
    })
}

fn child(id: &str, doc: &Value) -> Result<NodeChild, Refusal> {
    with_ctx(|ctx| parse_metadata(id, doc.to_string().as_bytes(), ctx))
}

#[track_caller]
fn child_refused(doc: &Value, field: &str, problem: &str) {
    let r = child(CHILD, doc).expect_err("accepted");
    assert_eq!(r.file, format!("subagents/{CHILD}/metadata.json"));
    assert_eq!(r.field, field, "{r}");
    assert!(r.problem.contains(problem), "{r}");
}

#[test]
fn a_childs_metadata_comes_over_and_restores_as_a_child() {
    let c = child(CHILD, &metadata(CHILD, "alpha")).unwrap();
    assert_eq!(c.session.id, CHILD);
    assert_eq!(c.session.kind, "headless");
    assert_eq!(c.session.token, format!("child-token-{CHILD}"));
    assert_eq!(c.session.lifecycle_id, format!("life-{CHILD}"));
    assert_eq!(c.process.as_ref().unwrap().pid, 5151);
    assert_eq!(c.process.as_ref().unwrap().start_time, Some(111));
    assert_eq!(
        (
            c.parent_session.as_str(),
            c.parent_lifecycle.as_str(),
            c.parent_worker.as_str()
        ),
        ("alpha", "parent-life", "w-parent")
    );
    assert_eq!(c.lifecycle, Lifecycle::Ready);
    assert_eq!(c.policy, Policy::Approve);
    assert_eq!(c.cleanup_attempts, 1);
    assert_eq!(c.retry_at_ms, None);

    let batch = assemble(Vec::new(), vec![c], Vec::new()).unwrap();
    let (_, _, sub) = &batch.children[0];
    assert_eq!(sub.meta["depth"], 1);
    // This hub's own loader accepts the stored form.
    let restored = Child::from_stored(&sub.meta, &sub.outcomes, 4096).unwrap();
    assert_eq!(restored.lifecycle(), Lifecycle::Ready);
    assert_eq!(restored.parent().session_id, "alpha");
    assert_eq!(restored.parent().worker_id, "w-parent");
}

#[test]
fn a_childs_bad_metadata_is_named() {
    let mut doc = metadata(CHILD, "alpha");
    doc["kind"] = json!("ordinary");
    child_refused(&doc, "", "not a Node headless subagent record");
    let mut doc = metadata(CHILD, "alpha");
    doc.as_object_mut().unwrap().remove("kind");
    child_refused(&doc, "", "not a Node headless subagent record");
    child_refused(&json!([]), "", "not a Node headless subagent record");
    let r = with_ctx(|ctx| parse_metadata(CHILD, b"{", ctx)).unwrap_err();
    assert!(r.problem.contains("not valid JSON"), "{r}");

    child_refused(
        &metadata(GRANDCHILD, "alpha"),
        "id",
        "not the name of its directory",
    );
    let mut doc = metadata(CHILD, "alpha");
    doc.as_object_mut().unwrap().remove("cascading_parent");
    child_refused(&doc, "cascading_parent", "missing");
    let mut doc = metadata(CHILD, "alpha");
    doc["cascading_parent"]["worker_id"] = json!("");
    child_refused(&doc, "cascading_parent.worker_id", "empty");
    child_refused(
        &metadata(CHILD, "../x"),
        "cascading_parent.session_id",
        "not a session id",
    );
    let mut doc = metadata(CHILD, "alpha");
    doc["subagent"]["policy"] = json!("always");
    child_refused(&doc, "subagent.policy", "ask, deny or approve");
    let mut doc = metadata(CHILD, "alpha");
    doc["subagent"]["lifecycle"] = json!("zombie");
    child_refused(&doc, "subagent.lifecycle", "not a subagent lifecycle");
    let mut doc = metadata(CHILD, "alpha");
    doc["uncertain_start"] = json!("yes");
    child_refused(&doc, "uncertain_start", "true or false");
    let mut doc = metadata(CHILD, "alpha");
    doc["retry_at"] = json!(-1);
    child_refused(&doc, "retry_at", "non-negative integer");
}

#[test]
fn parent_chains_give_depths_and_loops_are_refused() {
    let top = child(CHILD, &metadata(CHILD, "alpha")).unwrap();
    let below = child(GRANDCHILD, &metadata(GRANDCHILD, CHILD)).unwrap();
    let batch = assemble(parse(&hub_json()).unwrap(), vec![top, below], Vec::new()).unwrap();
    let depth = |id: &str| {
        batch
            .children
            .iter()
            .find(|(s, _, _)| s.id == id)
            .map(|(_, _, c)| c.meta["depth"].clone())
            .unwrap()
    };
    assert_eq!(depth(CHILD), 1);
    assert_eq!(depth(GRANDCHILD), 2);
    assert_eq!(batch.sessions.len(), 2);
    assert_eq!(batch.processes(), 3);

    let a = child(CHILD, &metadata(CHILD, GRANDCHILD)).unwrap();
    let b = child(GRANDCHILD, &metadata(GRANDCHILD, CHILD)).unwrap();
    let r = assemble(Vec::new(), vec![a, b], Vec::new()).unwrap_err();
    assert_eq!(r.field, "cascading_parent.session_id");
    assert!(r.problem.contains("loops"), "{r}");

    // A parent that is nowhere (already gone) is depth 1: the restore
    // finds the family stale.
    let orphan = child(CHILD, &metadata(CHILD, "gone")).unwrap();
    let batch = assemble(Vec::new(), vec![orphan], Vec::new()).unwrap();
    assert_eq!(batch.children[0].2.meta["depth"], 1);
}

#[test]
fn a_child_listed_in_hub_json_is_taken_from_its_metadata() {
    let mut doc = hub_json();
    doc["sessions"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": CHILD, "token": "stale", "spec": {}}));
    let sessions = parse(&doc).unwrap();
    let c = child(CHILD, &metadata(CHILD, "alpha")).unwrap();
    let batch = assemble(sessions.clone(), vec![c], Vec::new()).unwrap();
    assert_eq!(batch.sessions.len(), 2);
    assert_eq!(batch.children.len(), 1);
    assert_eq!(batch.children[0].0.token, format!("child-token-{CHILD}"));
    assert!(batch.notes.iter().any(|n| n.contains("sessions[2]")));

    let r = assemble(sessions, Vec::new(), Vec::new()).unwrap_err();
    assert_eq!(
        (r.file.as_str(), r.field.as_str()),
        ("hub.json", "sessions[2].id")
    );
    assert!(r.problem.contains("reserves"), "{r}");
}

#[test]
fn operations_become_the_outcome_tail() {
    let ops = json!({
        "receipts": [{"key": "k", "digest": "d", "route": "subagent/send", "at": 1, "result": {}}],
        "requests": [
            {"request_id": "r1", "operation": "message", "state": "finished", "run_id": "run-1",
             "status": "completed", "at": "2026-05-01T09:11:00.000Z"},
            {"request_id": "r2", "operation": "message", "state": "rejected", "run_id": "",
             "detail": "busy", "at": "2026-05-01T09:12:00.000Z"},
            {"request_id": "r3", "operation": "compact", "state": "finished", "run_id": "run-3",
             "summary": "short", "at": "2026-05-01T09:13:00.000Z"}
        ]
    });
    let out = parse_operations(CHILD, ops.to_string().as_bytes()).unwrap();
    let list = out.as_array().unwrap();
    assert_eq!(list.len(), 3);
    assert_eq!(list[0]["run_status"], "completed");
    assert_eq!(list[0]["run_id"], "run-1");
    assert_eq!(list[1]["error"], "busy");
    assert!(list[1].get("run_id").is_none(), "an empty run id is none");
    assert_eq!(list[2]["summary"], "short");
    assert_eq!(list[2]["updated_at"], "2026-05-01T09:13:00.000Z");

    let many: Vec<Value> = (0..250)
        .map(|i| {
            json!({"request_id": format!("r{i}"), "operation": "message", "state": "sent",
                        "run_id": "", "at": "t"})
        })
        .collect();
    let out = parse_operations(
        CHILD,
        json!({"receipts": [], "requests": many})
            .to_string()
            .as_bytes(),
    )
    .unwrap();
    let list = out.as_array().unwrap();
    assert_eq!(list.len(), MAX_OUTCOMES);
    assert_eq!(list[0]["request_id"], "r50", "the newest are kept");

    let bad = json!({"requests": [{"request_id": "r", "operation": "message", "state": "lost"}]});
    let r = parse_operations(CHILD, bad.to_string().as_bytes()).unwrap_err();
    assert_eq!(r.file, format!("subagents/{CHILD}/operations.json"));
    assert_eq!(r.field, "requests[0].state");
}

#[test]
fn plans_come_over_and_bad_ones_are_named() {
    let plan = parse_plan(
        "sessions/alpha/plan.json",
        br##"{"markdown":"# Plan\n- one","revision":4,"updated_at":"2026-05-01T09:20:00.000Z"}"##,
    )
    .unwrap();
    assert_eq!(plan.markdown, "# Plan\n- one");
    assert_eq!(plan.revision, 4);
    assert_eq!(plan.updated_at.as_deref(), Some("2026-05-01T09:20:00.000Z"));

    let big =
        json!({"markdown": "x".repeat(MAX_PLAN_BYTES + 1), "revision": 1, "updated_at": null});
    let r = parse_plan("sessions/alpha/plan.json", big.to_string().as_bytes()).unwrap_err();
    assert_eq!(
        (r.file.as_str(), r.field.as_str()),
        ("sessions/alpha/plan.json", "markdown")
    );
    let r = parse_plan("p", br#"{"markdown":"x","revision":-1}"#).unwrap_err();
    assert_eq!(r.field, "revision");

    let plans = vec![
        ("alpha".to_owned(), plan.clone()),
        ("beta".to_owned(), PlanRecord::default()),
        ("nobody".to_owned(), plan),
    ];
    let batch = assemble(parse(&hub_json()).unwrap(), Vec::new(), plans).unwrap();
    let ids: Vec<&str> = batch.plans.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        ids,
        ["alpha"],
        "empty plans and plans of no import are dropped"
    );
}

#[test]
fn messages_quote_the_file_briefly() {
    let long = "x".repeat(10_000);
    let mut doc = hub_json();
    doc["sessions"][0]["id"] = json!(long);
    let r = parse(&doc).unwrap_err();
    assert!(r.problem.len() < 200, "{} bytes", r.problem.len());
    assert!(r.problem.contains('…'), "{r}");
    let mut doc = hub_json();
    doc["sessions"][0]["process"]["pid"] = json!({"huge": long});
    let r = parse(&doc).unwrap_err();
    assert_eq!(r.problem, "must be a positive process id, not an object");
    let mut doc = metadata(CHILD, "alpha");
    doc["kind"] = json!(["headless", long]);
    let r = child(CHILD, &doc).unwrap_err();
    assert!(r.problem.ends_with("(kind is an array)"), "{r}");
}
