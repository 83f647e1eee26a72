//! Headless subagents end to end: a hub-launched built-in worker forks,
//! drives and stops real child workers through `subagent/*` on the tools
//! listener, using its `/fork`, `/send`, `/receive`, `/stop-child` and
//! `/subagent-repeat` triggers.

use std::path::Path;

use serde_json::{json, Value};

use crate::util::*;

fn default_config() -> Value {
    json!({"worker": {"stopTimeoutMs": 3000, "sigtermGraceMs": 2000, "sigkillGraceMs": 3000}})
}

/// Creates `id` and starts its hub-supervised built-in worker.
fn start_parent(hub: &TestHub, id: &str) {
    create_session(hub, id);
    let res = action(hub, id, "start");
    assert!(res.status < 300, "{}", res.text());
    wait_session(hub, id, |s| s["identity"]["state"] == "live");
}

/// The error code of a `<route> rejected: {...}` line.
fn rejected(line: &str, route: &str) -> String {
    let rest = line
        .strip_prefix(&format!("{route} rejected: "))
        .unwrap_or_else(|| panic!("{line:?} is not a rejection of {route}"));
    let error: Value = serde_json::from_str(rest).unwrap();
    error["code"].as_str().unwrap().to_string()
}

fn fork(hub: &TestHub, parent: &str) -> String {
    let lines = run_tools(hub, parent, "/fork");
    let result = succeeded(&lines[0], "subagent/clean-fork");
    assert_eq!(result["lifecycle"], "preparing");
    let id = result["subagent_id"].as_str().unwrap().to_string();
    assert!(id.starts_with("subagent-"), "{id}");
    id
}

/// Polls `parent`'s `/receive <child>` until the child's request
/// `request_id` is finished; returns that result.
#[track_caller]
fn wait_request_finished(hub: &TestHub, parent: &str, child: &str, request_id: &str) -> Value {
    let mut last = Value::Null;
    let done = wait_until(DEADLINE, || {
        let lines = run_tools(hub, parent, &format!("/receive {child}"));
        last = succeeded(&lines[0], "subagent/receive");
        last["requests"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["request_id"] == request_id && r["state"] == "finished")
    });
    assert!(done, "the child's request never finished: {last:#}");
    last
}

/// Starts `parent`'s worker and forks one child that became ready.
fn ready_child(hub: &TestHub, parent: &str) -> String {
    start_parent(hub, parent);
    let child = fork(hub, parent);
    wait_session(hub, &child, |s| s["subagent"]["lifecycle"] == "ready");
    child
}

fn child_dir(data: &Path, id: &str) -> std::path::PathBuf {
    data.join("subagents").join(id)
}

#[test]
fn fork_send_receive_and_stop_with_real_workers() {
    let dir = TempDir::new("subagents-e2e");
    let hub = hub_with(&dir, default_config());
    start_parent(&hub, "lead");
    let child = fork(&hub, "lead");

    // The child is a headless session that becomes ready on its own.
    let described = wait_session(&hub, &child, |s| s["subagent"]["lifecycle"] == "ready");
    assert_eq!(described["kind"], "headless");
    assert_eq!(described["spec"], json!({}));
    assert_eq!(described["subagent"]["parent"], "lead");
    assert_eq!(described["subagent"]["policy"], "ask");
    assert_eq!(described["subagent"]["health"], "healthy");
    assert!(child_dir(&hub.data_dir, &child)
        .join("config")
        .join("config.yaml")
        .is_file());
    // The child's events are not retained.
    assert!(!child_dir(&hub.data_dir, &child)
        .join("events.jsonl")
        .exists());

    // Listing shows the direct child.
    let lines = run_tools(&hub, "lead", "/receive");
    let list = succeeded(&lines[0], "subagent/receive");
    assert_eq!(list["children"][0]["subagent_id"], child.as_str());
    assert_eq!(list["children"][0]["lifecycle"], "ready");
    assert_eq!(list["subagents"], list["children"]);

    // A message: sent, then admitted and finished by the child's worker.
    let lines = run_tools(&hub, "lead", &format!("/send {child} hello child"));
    let sent = succeeded(&lines[0], "subagent/send");
    assert_eq!(sent["state"], "sent");
    let request_id = sent["request_id"].as_str().unwrap().to_string();
    let last = wait_request_finished(&hub, "lead", &child, &request_id);
    let outcome = last["requests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["request_id"] == request_id.as_str())
        .unwrap()
        .clone();
    assert_eq!(outcome["run_status"], "completed", "{outcome}");
    assert_eq!(last["status"]["lifecycle"], "ready");
    // the same status at the top level, as the Node hub puts it
    assert_eq!(last["lifecycle"], "ready");
    assert_eq!(last["subagent_id"], child.as_str());

    // The conversation projection shows the visible dialogue.
    let conversation = &last["conversation"];
    let turns = conversation["turns"].as_array().unwrap();
    let turn = turns
        .last()
        .unwrap_or_else(|| panic!("no turns: {conversation:#}"));
    assert_eq!(turn["user"]["text"], "hello child", "{conversation:#}");
    let steps = turn["steps"].as_array().unwrap();
    let step = steps.last().unwrap();
    assert!(
        step["text"].as_str().unwrap().contains("hello child"),
        "{conversation:#}"
    );
    assert_eq!(conversation["cursor"], 0);
    // The exact answer through its source, in pages.
    let source = step["answer_source"].clone();
    assert!(source.is_object(), "no answer source: {step}");
    let lines = run_tools(
        &hub,
        "lead",
        &format!(
            "/subagent receive {}",
            json!({"subagent_id": child, "answer": {"source": source, "part": 0, "offset": 0}})
        ),
    );
    let page = succeeded(&lines[0], "subagent/receive");
    assert!(page["answer"].to_string().contains("hello child"), "{page}");
    // conversation.json follows (coalesced).
    let conv_file = child_dir(&hub.data_dir, &child).join("conversation.json");
    assert!(wait_until(DEADLINE, || std::fs::read_to_string(&conv_file)
        .is_ok_and(|t| t.contains("hello child"))));

    // Stop: stopping at once, then the child and its directory are gone.
    let lines = run_tools(&hub, "lead", &format!("/stop-child {child}"));
    let stopped = succeeded(&lines[0], "subagent/send");
    assert_eq!(stopped["state"], "stopping");
    assert_eq!(stopped["operation"], "stop");
    assert!(stopped["operation_id"].is_string(), "{stopped}");
    assert!(wait_until(DEADLINE, || !session_ids(&hub).contains(&child)));
    assert!(!child_dir(&hub.data_dir, &child).exists());
    // The parent still sees the retained terminal status.
    let lines = run_tools(&hub, "lead", "/receive");
    let list = succeeded(&lines[0], "subagent/receive");
    assert_eq!(list["children"][0]["subagent_id"], child.as_str());
    assert_eq!(list["children"][0]["lifecycle"], "stopped");
    assert_eq!(list["children"][0]["retained"], true);
    // Sending to it now is refused as closed.
    let lines = run_tools(&hub, "lead", &format!("/send {child} again"));
    assert_eq!(rejected(&lines[0], "subagent/send"), "lifecycle_closed");
}

#[test]
fn receipts_replay_identical_repeats_and_refuse_conflicts() {
    let dir = TempDir::new("subagents-receipts");
    let hub = hub_with(&dir, default_config());
    start_parent(&hub, "lead");
    let lines = run_tools(&hub, "lead", "/subagent-repeat clean-fork {}");
    let first = succeeded(&lines[0], "subagent/clean-fork");
    let second = succeeded(&lines[1], "subagent/clean-fork");
    assert_eq!(first["subagent_id"], second["subagent_id"]);
    assert_eq!(second["replayed"], true);
    assert!(first.get("replayed").is_none());
    let child = first["subagent_id"].as_str().unwrap().to_string();
    // Only one child was created.
    assert_eq!(
        session_ids(&hub)
            .iter()
            .filter(|s| s.starts_with("subagent-"))
            .count(),
        1
    );
    wait_session(&hub, &child, |s| s["subagent"]["lifecycle"] == "ready");

    let args = |text: &str| {
        json!({"subagent_id": child, "operation": "message",
               "content": [{"type": "text", "modality": "text", "raw": text}]})
    };
    let lines = run_tools(
        &hub,
        "lead",
        &format!("/subagent-repeat send {} send {}", args("one"), args("two")),
    );
    let sent = succeeded(&lines[0], "subagent/send");
    assert_eq!(sent["state"], "sent");
    assert_eq!(rejected(&lines[1], "subagent/send"), "request_conflict");
    let lines = run_tools(
        &hub,
        "lead",
        &format!("/subagent-repeat send {}", args("three")),
    );
    let replay = succeeded(&lines[1], "subagent/send");
    assert_eq!(replay["replayed"], true);
    // The recorded result of a send stays conservative.
    assert_eq!(replay["state"], "unknown");
}

#[test]
fn quotas_arguments_and_ownership_are_enforced() {
    let dir = TempDir::new("subagents-quota");
    let mut config = default_config();
    config["subagents"] = json!({"maxChildren": 1, "maxDepth": 1});
    let hub = hub_with(&dir, config);
    start_parent(&hub, "lead");
    let child = fork(&hub, "lead");
    // A second direct child exceeds maxChildren.
    let lines = run_tools(&hub, "lead", "/fork");
    assert_eq!(rejected(&lines[0], "subagent/clean-fork"), "limit_exceeded");
    // Unknown arguments and forbidden options are refused.
    let lines = run_tools(&hub, "lead", r#"/subagent clean-fork {"x":1}"#);
    assert_eq!(
        rejected(&lines[0], "subagent/clean-fork"),
        "invalid_arguments"
    );
    let lines = run_tools(
        &hub,
        "lead",
        &format!(
            r#"/subagent send {{"subagent_id":"{child}","operation":"continue","options":{{"confirmation":{{"mode":"approve"}}}}}}"#
        ),
    );
    assert_eq!(rejected(&lines[0], "subagent/send"), "invalid_arguments");
    // Another session cannot reach the child.
    start_parent(&hub, "other");
    let lines = run_tools(&hub, "other", &format!("/receive {child}"));
    assert_eq!(rejected(&lines[0], "subagent/receive"), "unauthorized");
    let lines = run_tools(&hub, "other", &format!("/stop-child {child}"));
    assert_eq!(rejected(&lines[0], "subagent/send"), "unauthorized");

    // Depth: the child (depth 1) may not fork with maxDepth 1.
    wait_session(&hub, &child, |s| s["subagent"]["lifecycle"] == "ready");
    let lines = run_tools(&hub, "lead", &format!("/send {child} /fork"));
    let request_id = succeeded(&lines[0], "subagent/send")["request_id"]
        .as_str()
        .unwrap()
        .to_string();
    wait_request_finished(&hub, "lead", &child, &request_id);
    assert_eq!(
        session_ids(&hub)
            .iter()
            .filter(|s| s.starts_with("subagent-"))
            .count(),
        1,
        "the child forked beyond maxDepth"
    );
}

#[test]
fn stopping_the_parent_cascades_and_deletes_children() {
    let dir = TempDir::new("subagents-cascade");
    let hub = hub_with(&dir, default_config());
    let child = ready_child(&hub, "lead");
    // The child forks a grandchild of its own.
    run_tools(&hub, "lead", &format!("/send {child} /fork"));
    let mut grandchild = None;
    assert!(wait_until(DEADLINE, || {
        grandchild = session_ids(&hub)
            .into_iter()
            .find(|s| s.starts_with("subagent-") && *s != child);
        grandchild.is_some()
    }));
    let grandchild = grandchild.unwrap();
    let g = wait_session(&hub, &grandchild, |s| s["subagent"]["lifecycle"] == "ready");
    assert_eq!(g["subagent"]["parent"], child.as_str());
    assert_eq!(g["subagent"]["parent_ref"]["session_id"], child.as_str());
    assert_eq!(g["subagent"]["depth"], 2);
    // The lead cannot reach its grandchild.
    let lines = run_tools(&hub, "lead", &format!("/receive {grandchild}"));
    assert_eq!(rejected(&lines[0], "subagent/receive"), "unauthorized");

    let res = hub.request("POST", "/api/sessions/lead/stop", &[], b"");
    assert!(res.status < 300, "{}", res.text());
    assert!(wait_until(DEADLINE, || {
        let ids = session_ids(&hub);
        !ids.contains(&child) && !ids.contains(&grandchild)
    }));
    assert!(!child_dir(&hub.data_dir, &child).exists());
    assert!(!child_dir(&hub.data_dir, &grandchild).exists());
    // The ordinary parent stays listed after its worker exited.
    assert!(session_ids(&hub).contains(&"lead".to_string()));
}

/// Restarts a hub on the same ports after SIGKILL of `old`.
fn kill_and_restart(dir: &TempDir, old: &mut TestHub) -> TestHub {
    let listen = format!("127.0.0.1:{}", old.addr.port());
    let tools = old.tools_addr.unwrap().port().to_string();
    old.kill9();
    start_on(dir, &listen, &tools)
}

/// A hub on `dir`'s configuration listening on the given addresses.
fn start_on(dir: &TempDir, listen: &str, tools_port: &str) -> TestHub {
    let path = dir.path().join("hub.test.jsonc");
    TestHub::start(
        dir.path(),
        &[
            "-c",
            path.to_str().unwrap(),
            "--listen",
            listen,
            "--tools-port",
            tools_port,
        ],
    )
}

fn pid_of(hub: &TestHub, id: &str) -> u32 {
    get_session(hub, id)["process"]["pid"].as_u64().unwrap() as u32
}

#[test]
fn a_restarted_hub_keeps_a_ready_family_and_cleans_up_a_stale_one() {
    let dir = TempDir::new("subagents-restart");
    let mut first = hub_with(&dir, default_config());
    let child = ready_child(&first, "lead");
    let parent_pid = pid_of(&first, "lead");
    let child_pid = pid_of(&first, &child);

    // SIGKILL of the hub: both workers survive, the family is kept.
    let mut second = kill_and_restart(&dir, &mut first);
    let s = wait_session(&second, &child, |s| s["connected"] == true);
    assert_eq!(s["subagent"]["lifecycle"], "ready");
    assert_eq!(s["process"]["adopted"], true);
    assert_eq!(s["process"]["pid"], child_pid);
    wait_session(&second, "lead", |s| s["identity"]["state"] == "live");
    // The parent still controls it.
    let lines = run_tools(&second, "lead", "/receive");
    let list = succeeded(&lines[0], "subagent/receive");
    assert_eq!(list["children"][0]["subagent_id"], child.as_str());

    // Now the parent dies while no hub runs: its family is stale.
    let listen = format!("127.0.0.1:{}", second.addr.port());
    let tools = second.tools_addr.unwrap().port().to_string();
    second.kill9();
    signal(parent_pid, libc::SIGKILL);
    assert!(wait_until(DEADLINE, || !pid_alive(parent_pid)));
    let third = start_on(&dir, &listen, &tools);
    assert!(wait_until(DEADLINE, || !session_ids(&third).contains(&child)));
    assert!(wait_until(DEADLINE, || !pid_alive(child_pid)));
    assert!(!child_dir(&third.data_dir, &child).exists());
    assert!(session_ids(&third).contains(&"lead".to_string()));
}

#[test]
fn a_failed_cleanup_is_retained_until_the_operator_retries() {
    let dir = TempDir::new("subagents-cleanup");
    let mut first = hub_with(&dir, default_config());
    let hub = &first;
    let child = ready_child(hub, "lead");
    // A read-only child directory cannot be deleted.
    let mut undo = Undo(Vec::new());
    if !make_read_only(&child_dir(&hub.data_dir, &child), &mut undo) {
        eprintln!("skipped: root here may not mount");
        return;
    }
    run_tools(hub, "lead", &format!("/stop-child {child}"));
    let s = wait_session(hub, &child, |s| {
        s["subagent"]["lifecycle"] == "cleanup-pending"
    });
    assert_eq!(s["subagent"]["cleanup_attempts"], 1, "{s:#}");
    assert!(
        session_ids(hub).contains(&child),
        "a retained child stays listed"
    );
    let info = hub.get(&format!("/api/sessions/{child}/recovery")).json();
    assert_eq!(info["cleanup_attempts"], 1, "{info:#}");
    assert_eq!(info["max_cleanup_attempts"], 3);
    assert_eq!(info["automatic_retry"], true);
    assert!(info["retry_at"].is_string(), "{info:#}");
    assert!(info.to_string().find("token").is_none(), "{info:#}");
    let lifecycle_id = info["lifecycle_id"].as_str().unwrap().to_string();
    // A hub restart neither resets nor skips the stored retry budget.
    let hub = kill_and_restart(&dir, &mut first);
    let hub = &hub;
    let again = hub.get(&format!("/api/sessions/{child}/recovery")).json();
    assert_eq!(again["cleanup_attempts"], 1, "{again:#}");
    assert_eq!(again["retry_at"], info["retry_at"], "{again:#}");
    assert_eq!(again["lifecycle"], "cleanup-pending");
    wait_session(hub, "lead", |s| s["identity"]["state"] == "live");
    // The parent's send is refused while it is retained.
    let lines = run_tools(hub, "lead", &format!("/send {child} hi"));
    assert_eq!(rejected(&lines[0], "subagent/send"), "lifecycle_closed");
    // A stale lifecycle id is refused; a retry while storage is still
    // broken fails and keeps the data.
    let res = post(
        hub,
        &format!("/api/sessions/{child}/recover"),
        json!({"action": "retry", "lifecycle_id": "stale"}),
    );
    assert_eq!(res.status, 409, "{}", res.text());
    let res = post(
        hub,
        &format!("/api/sessions/{child}/recover"),
        json!({"action": "retry", "lifecycle_id": lifecycle_id}),
    );
    assert_eq!(res.status, 409, "{}", res.text());
    assert!(child_dir(&hub.data_dir, &child).exists());
    // Repaired: the retry removes the child and releases its quota.
    undo.run();
    let res = post(
        hub,
        &format!("/api/sessions/{child}/recover"),
        json!({"action": "retry", "lifecycle_id": lifecycle_id}),
    );
    assert_eq!(res.status, 200, "{}", res.text());
    assert!(!session_ids(hub).contains(&child));
    assert!(!child_dir(&hub.data_dir, &child).exists());
}

#[test]
fn invalid_ownership_records_block_forks_and_launches() {
    let dir = TempDir::new("subagents-quarantine");
    let mut first = hub_with(&dir, default_config());
    let child = ready_child(&first, "lead");
    let blocked = first.get("/api/subagents/recovery").json();
    assert_eq!(blocked, json!({"blocked": false, "reason": null}));
    first.kill9();
    {
        let db = rusqlite::Connection::open(dir.path().join("hub.db")).unwrap();
        db.execute("UPDATE subagents SET meta = '{\"depth\": 0}'", [])
            .unwrap();
    }
    let path = dir.path().join("hub.test.jsonc");
    let second = TestHub::start(dir.path(), &["-c", path.to_str().unwrap()]);
    let blocked = second.get("/api/subagents/recovery").json();
    assert_eq!(blocked["blocked"], true, "{blocked}");
    assert!(blocked["reason"].as_str().unwrap().contains(&child));
    // The retained data is untouched, and new launches are refused.
    assert!(child_dir(&second.data_dir, &child).exists());
    let res = post(&second, "/api/sessions", json!({"session": "new"}));
    assert_eq!(res.status, 201);
    let res = second.request("POST", "/api/sessions/new/start", &[], b"");
    assert!(res.text().contains("blocked"), "{}", res.text());
}

#[test]
fn an_uncertain_startup_waits_for_the_operator_attestation() {
    let dir = TempDir::new("subagents-uncertain");
    let mut first = hub_with(&dir, default_config());
    let child = ready_child(&first, "lead");
    let child_pid = pid_of(&first, &child);
    let listen = format!("127.0.0.1:{}", first.addr.port());
    let tools = first.tools_addr.unwrap().port().to_string();
    first.kill9();
    // As if the hub died between spawning the child and recording it.
    signal(child_pid, libc::SIGKILL);
    assert!(wait_until(DEADLINE, || !pid_alive(child_pid)));
    {
        let db = rusqlite::Connection::open(dir.path().join("hub.db")).unwrap();
        db.execute(
            "UPDATE subagents SET meta = json_set(meta, '$.lifecycle', 'starting') WHERE id = ?1",
            [&child],
        )
        .unwrap();
        db.execute("DELETE FROM processes WHERE session_id = ?1", [&child])
            .unwrap();
    }
    let second = start_on(&dir, &listen, &tools);
    let s = wait_session(&second, &child, |s| {
        s["subagent"]["lifecycle"] == "cleanup-pending"
    });
    assert!(s["subagent"]["reason"]
        .as_str()
        .unwrap()
        .contains("uncertain"));
    let info = second
        .get(&format!("/api/sessions/{child}/recovery"))
        .json();
    assert_eq!(info["uncertain_start"], true, "{info:#}");
    assert_eq!(info["automatic_retry"], false, "{info:#}");
    // Nothing is deleted without the attestation.
    assert!(child_dir(&second.data_dir, &child).exists());
    let res = post(
        &second,
        &format!("/api/sessions/{child}/recover"),
        json!({"action": "confirm-terminated", "lifecycle_id": info["lifecycle_id"]}),
    );
    assert_eq!(res.status, 200, "{}", res.text());
    assert!(!session_ids(&second).contains(&child));
    assert!(!child_dir(&second.data_dir, &child).exists());
}

#[test]
fn a_child_not_ready_in_time_is_stopped_and_removed() {
    let dir = TempDir::new("subagents-timeout");
    let mut config = default_config();
    config["subagents"] = json!({"startupTimeoutMs": 1500});
    // Through the `command` launcher: the parent runs the built-in worker,
    // a child never connects.
    let script = format!(
        "case \"$1\" in subagent-*) exec sleep 3600;; esac; \
         exec {BIN} mock-worker --config \"$2\" --session \"$1\""
    );
    config["launcher"] = json!({
        "kind": "command",
        "command": ["/bin/sh", "-c", script, "sh", "{session}", "{config}"],
    });
    let hub = hub_with(&dir, config);
    let res = post(
        &hub,
        "/api/sessions",
        json!({"session": "lead", "spec": {"provider": "deepseek"}}),
    );
    assert_eq!(res.status, 201, "{}", res.text());
    let res = hub.request("POST", "/api/sessions/lead/start", &[], b"");
    assert!(res.status < 300, "{}", res.text());
    wait_session(&hub, "lead", |s| s["identity"]["state"] == "live");
    let child = fork(&hub, "lead");
    let pid = wait_session(&hub, &child, |s| s["process"]["pid"].is_u64())["process"]["pid"]
        .as_u64()
        .unwrap() as u32;
    assert!(wait_until(DEADLINE, || !session_ids(&hub).contains(&child)));
    assert!(!pid_alive(pid), "the stalled child worker survived");
    assert!(!child_dir(&hub.data_dir, &child).exists());
    let lines = run_tools(&hub, "lead", "/receive");
    let list = succeeded(&lines[0], "subagent/receive");
    let entry = &list["children"][0];
    assert_eq!(entry["subagent_id"], child.as_str());
    assert_eq!(entry["lifecycle"], "stopped");
    assert!(
        entry["reason"]
            .as_str()
            .unwrap()
            .contains("startup_timeout"),
        "{entry}"
    );
}

#[test]
fn the_live_quota_counts_every_family() {
    let dir = TempDir::new("subagents-live");
    let mut config = default_config();
    config["subagents"] = json!({"maxLive": 1});
    let hub = hub_with(&dir, config);
    start_parent(&hub, "a");
    start_parent(&hub, "b");
    let child = fork(&hub, "a");
    let lines = run_tools(&hub, "b", "/fork");
    assert_eq!(rejected(&lines[0], "subagent/clean-fork"), "limit_exceeded");
    // Only confirmed removal releases the quota.
    run_tools(&hub, "a", &format!("/stop-child {child}"));
    assert!(wait_until(DEADLINE, || !session_ids(&hub).contains(&child)));
    fork(&hub, "b");
}

#[test]
fn hub_shutdown_stops_and_removes_every_child() {
    let dir = TempDir::new("subagents-shutdown");
    let mut hub = hub_with(&dir, default_config());
    let child = ready_child(&hub, "lead");
    let child_pid = pid_of(&hub, &child);
    assert!(hub.terminate().success());
    assert!(!pid_alive(child_pid));
    assert!(
        !child_dir(&hub.data_dir, &child).exists(),
        "{}",
        hub.log_text()
    );
    // Nothing of the child is left for the next start.
    let again = hub_with(&dir, default_config());
    assert!(!session_ids(&again).contains(&child));
}

#[test]
fn automatic_cleanup_retries_after_its_delay() {
    let dir = TempDir::new("subagents-autoretry");
    let hub = hub_with(&dir, default_config());
    let child = ready_child(&hub, "lead");
    let mut undo = Undo(Vec::new());
    if !make_read_only(&child_dir(&hub.data_dir, &child), &mut undo) {
        eprintln!("skipped: root here may not mount");
        return;
    }
    run_tools(&hub, "lead", &format!("/stop-child {child}"));
    wait_session(&hub, &child, |s| {
        s["subagent"]["lifecycle"] == "cleanup-pending"
    });
    undo.run();
    // The second attempt comes 10 s after the first (checked every 5 s).
    assert!(wait_until(std::time::Duration::from_secs(60), || {
        !session_ids(&hub).contains(&child)
    }));
    assert!(!child_dir(&hub.data_dir, &child).exists());
}

#[test]
fn cleanup_never_follows_a_linked_child_directory() {
    let dir = TempDir::new("subagents-symlink");
    let hub = hub_with(&dir, default_config());
    let child = ready_child(&hub, "lead");
    // The child's directory is swapped for a link to outside data.
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("keep.txt"), "precious").unwrap();
    let path = child_dir(&hub.data_dir, &child);
    std::fs::rename(&path, dir.path().join("moved")).unwrap();
    std::os::unix::fs::symlink(&outside, &path).unwrap();
    run_tools(&hub, "lead", &format!("/stop-child {child}"));
    let s = wait_session(&hub, &child, |s| {
        s["subagent"]["lifecycle"] == "cleanup-pending"
    });
    assert!(
        s["subagent"]["reason"].as_str().unwrap().contains("link"),
        "{s:#}"
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("keep.txt")).unwrap(),
        "precious"
    );
    assert!(std::fs::symlink_metadata(&path)
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn a_daemonizing_launcher_forks_children_that_are_followed_too() {
    let dir = TempDir::new("subagents-daemon");
    let mut config = default_config();
    // The worker in the background, its pid in the session's pid file.
    let script = format!(
        "\"{BIN}\" mock-worker --config \"$1\" --session \"$2\" \
         </dev/null >\"$3/daemon.log\" 2>&1 & echo $! > \"$3/worker.pid\"; exit 0"
    );
    config["launcher"] = json!({
        "kind": "command",
        "command": ["/bin/sh", "-c", script, "sh", "{config}", "{session}", "{session_dir}"],
        "pidFile": "{session_dir}/worker.pid",
    });
    let hub = hub_with(&dir, config);
    create_session_with_spec(&hub, "lead", json!({"provider": "mock"}));
    let res = action(&hub, "lead", "start");
    assert!(res.status < 300, "{}", res.text());
    wait_session(&hub, "lead", |s| s["identity"]["state"] == "live");
    let child = fork(&hub, "lead");
    wait_session(&hub, &child, |s| s["subagent"]["lifecycle"] == "ready");
    let pid_file = child_dir(&hub.data_dir, &child).join("worker.pid");
    let daemon: u32 = std::fs::read_to_string(pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let c = wait_session(&hub, &child, |s| s["process"]["pid"] == daemon);
    assert_eq!(c["process"]["state"], "running", "{c}");
    assert!(pid_alive(daemon));
    // Stopping the parent stops the child's daemon and removes the child.
    let res = action(&hub, "lead", "stop");
    assert!(res.status < 300, "{}", res.text());
    assert!(wait_until(DEADLINE, || !session_ids(&hub).contains(&child)));
    assert!(!pid_alive(daemon), "the child's worker survived");
    assert!(!child_dir(&hub.data_dir, &child).exists());
}
