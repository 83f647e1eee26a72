//! Headless subagents through the operator surfaces: a real supervised
//! parent (the built-in worker) forks a child with `/fork`, then the
//! JSON API and the panel socket are checked against it: direct
//! conversation and control are `headless_restricted`, the operator
//! policy switches (and answers the child's confirmations by itself),
//! and the recovery routes report and refuse what they should.

use serde_json::{json, Value};

use crate::util::*;

fn request(hub: &TestHub, method: &str, path: &str, body: Option<Value>) -> Response {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    hub.request(method, path, &[], body.as_bytes())
}

/// One refused request: method, path, body, expected status and code.
type Refused<'a> = (&'a str, &'a str, Option<Value>, u16, &'a str);

/// Sends each request and checks its refusal.
#[track_caller]
fn expect_refusals(hub: &TestHub, cases: &[Refused]) {
    for (method, path, body, status, code) in cases {
        let res = request(hub, method, path, body.clone());
        assert_eq!(
            (res.status, res.json()["error"].clone()),
            (*status, json!(code)),
            "{method} {path} {body:?}: {}",
            res.text()
        );
    }
}

/// Reads `confirmation` frames of `session` until one closes; returns
/// every frame seen for it, the closing one last.
fn confirmation_frames_until_closed(ws: &mut Ws, session: &str) -> Vec<Value> {
    let mut seen = Vec::new();
    ws_read_until(ws, |v| {
        if v["type"] == "confirmation" && v["session"] == session {
            seen.push(v.clone());
            v["open"] == false
        } else {
            false
        }
    });
    seen
}

fn assert_labelled(prompt: &Value, child: &str) {
    assert_eq!(
        prompt["subagent"],
        json!({"session_id": child, "parent_session_id": "p"}),
        "{prompt}"
    );
}

#[test]
fn headless_sessions_refuse_direct_control_on_both_apis() {
    let dir = TempDir::new("headless-restricted");
    let hub = TestHub::start(dir.path(), &[]);
    let child = fork_child(&hub);
    let base = format!("/api/sessions/{child}");

    // Listing and description stay available.
    let desc = hub.get(&base);
    assert_eq!(desc.status, 200);
    let desc = desc.json()["session"].clone();
    assert_eq!(desc["kind"], "headless");
    assert_eq!(desc["spec"], json!({}));
    assert_eq!(desc["subagent"]["parent"], "p");
    assert_eq!(desc["subagent"]["parent_ref"]["session_id"], "p");

    let restricted: Vec<(&str, String, Option<Value>)> = vec![
        ("GET", format!("{base}/events"), None),
        ("GET", format!("{base}/events?since=0&limit=5"), None),
        ("POST", format!("{base}/input"), Some(text_content("hello"))),
        (
            "POST",
            format!("{base}/input"),
            Some(json!({"operation": "history"})),
        ),
        (
            "POST",
            format!("{base}/signal"),
            Some(json!({"operation": "cancel"})),
        ),
        ("POST", format!("{base}/start"), Some(json!({}))),
        ("POST", format!("{base}/stop"), Some(json!({}))),
        ("POST", format!("{base}/restart"), Some(json!({"spec": {}}))),
        ("POST", format!("{base}/force-kill"), Some(json!({}))),
        ("GET", format!("{base}/logs"), None),
        ("GET", format!("{base}/snapshot"), None),
        (
            "POST",
            format!("{base}/answer"),
            Some(json!({"source": {}})),
        ),
        ("DELETE", base.clone(), None),
        // Replacing a configuration snapshot (a saved pair that exists).
        (
            "POST",
            format!("{base}/configurations"),
            Some(json!({"launchConfig": "local", "workerConfig": "default"})),
        ),
        (
            "POST",
            "/api/sessions".to_string(),
            Some(json!({"session": child, "spec": {"model": "other"}})),
        ),
    ];
    let mut cases: Vec<Refused> = restricted
        .iter()
        .map(|(m, p, b)| (*m, p.as_str(), b.clone(), 409, "headless_restricted"))
        .collect();
    // A reserved id that names nothing is still just invalid.
    let unused = json!({"session": "subagent-00000000-0000-4000-8000-000000000000"});
    cases.push((
        "POST",
        "/api/sessions",
        Some(unused),
        400,
        "invalid_session",
    ));
    expect_refusals(&hub, &cases);

    let mut ws = panel(&hub);
    let messages = vec![
        json!({"v": 1, "type": "subscribe", "session": child, "request_id": "r-sub"}),
        json!({"v": 1, "type": "subscribe", "session": child, "paged": true, "replace": true,
               "request_id": "r-paged"}),
        json!({"v": 1, "type": "input", "session": child, "request_id": "r-input",
               "content": [{"type": "text", "modality": "text", "raw": "hi"}]}),
        json!({"v": 1, "type": "input", "session": child, "operation": "continue"}),
        json!({"v": 1, "type": "input", "session": child, "operation": "compact"}),
        json!({"v": 1, "type": "history", "session": child, "request_id": "r-hist"}),
        json!({"v": 1, "type": "signal", "session": child, "operation": "cancel"}),
        json!({"v": 1, "type": "worker", "session": child, "action": "start"}),
        json!({"v": 1, "type": "worker", "session": child, "action": "stop"}),
        json!({"v": 1, "type": "worker", "session": child, "action": "restart", "spec": {}}),
        json!({"v": 1, "type": "worker", "session": child, "action": "force-kill"}),
        json!({"v": 1, "type": "logs", "session": child}),
        json!({"v": 1, "type": "status_snapshot", "session": child}),
        json!({"v": 1, "type": "delete_session", "session": child}),
        json!({"v": 1, "type": "create_session", "session": child, "spec": {"model": "m"}}),
    ];
    for msg in messages {
        send_json(&mut ws, msg.clone());
        let err = next_of(&mut ws, "error");
        assert_eq!(err["error"], "headless_restricted", "{msg} -> {err}");
        // The refusal names the session and echoes the message's small
        // members (its request_id among them); content and specs stay out.
        assert_eq!(err["session"], child.as_str(), "{msg} -> {err}");
        let request = &err["request"];
        assert_eq!(request["type"], msg["type"], "{msg} -> {err}");
        assert_eq!(request["session"], child.as_str(), "{msg} -> {err}");
        assert_eq!(
            request.get("request_id"),
            msg.get("request_id"),
            "{msg} -> {err}"
        );
        for bulky in ["content", "spec", "options"] {
            assert!(request.get(bulky).is_none(), "{msg} -> {err}");
        }
    }
    // Confirmations stay answerable (this one is simply not open), and an
    // unsubscribe or a listing is harmless.
    send_json(
        &mut ws,
        json!({"v": 1, "type": "confirmation", "session": child, "confirmation_id": "nope",
               "decision": "approved", "request_id": "r-cf"}),
    );
    assert_eq!(next_of(&mut ws, "error")["error"], "unknown_confirmation");
    send_json(
        &mut ws,
        json!({"v": 1, "type": "unsubscribe", "session": child}),
    );
    send_json(&mut ws, json!({"v": 1, "type": "list_sessions"}));
    let listed = next_of(&mut ws, "sessions")["sessions"].clone();
    assert!(listed
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["session_id"] == child.as_str() && s["kind"] == "headless"));

    // None of it touched the child: still ready, still running.
    let after = wait_session(&hub, &child, |s| s["process"]["state"] == "running");
    assert_eq!(after["subagent"]["lifecycle"], "ready");
    // The parent remains an ordinary, fully controllable session.
    assert_eq!(hub.get("/api/sessions/p/logs").status, 200);
}

#[test]
fn operator_policy_answers_new_child_confirmations() {
    let dir = TempDir::new("headless-policy");
    let hub = TestHub::start(dir.path(), &[]);
    let child = fork_child(&hub);
    let policy_path = format!("/api/sessions/{child}/subagent-policy");
    let mut ws = panel(&hub);

    // deny (REST): the child's request is denied before any panel sees it
    // open, and the prompt is labelled with child and parent.
    let res = post(&hub, &policy_path, json!({"policy": "deny"}));
    assert_eq!(res.status, 200, "{}", res.text());
    let answered = res.json();
    assert_eq!(
        answered["session"]["session_id"],
        child.as_str(),
        "{answered}"
    );
    assert_eq!(answered["session"]["subagent"]["policy"], "deny");
    assert_eq!(answered["accepted"], "subagent_policy");
    assert_eq!(answered["policy"], "deny");
    assert_eq!(
        hub.get(&format!("/api/sessions/{child}")).json()["session"]["subagent"]["policy"],
        "deny"
    );
    send_to_child(&hub, &child, "/run echo denied-by-policy");
    let frames = confirmation_frames_until_closed(&mut ws, &child);
    for f in &frames {
        assert_ne!(f["confirmation"]["state"], "awaiting-decision", "{f}");
        assert_labelled(&f["confirmation"], &child);
    }
    let closed = frames.last().unwrap();
    assert_eq!(
        closed["outcome"],
        json!({"phase": "decided", "detail": "denied"}),
        "{closed}"
    );
    assert_eq!(closed["confirmation"]["decision"], "denied");

    // approve (panel): accepted, and the next request is approved.
    send_json(
        &mut ws,
        json!({"v": 1, "type": "subagent_policy", "session": child, "policy": "approve",
               "request_id": "pol-1"}),
    );
    let accepted = next_of(&mut ws, "accepted");
    assert_eq!(accepted["action"], "subagent_policy");
    assert_eq!(accepted["session"], child.as_str());
    assert_eq!(accepted["policy"], "approve");
    assert_eq!(accepted["request_id"], "pol-1");
    send_to_child(&hub, &child, "/run echo approved-by-policy");
    let frames = confirmation_frames_until_closed(&mut ws, &child);
    let closed = frames.last().unwrap();
    assert_eq!(
        closed["outcome"],
        json!({"phase": "decided", "detail": "approved"}),
        "{closed}"
    );
    assert_labelled(&closed["confirmation"], &child);

    // ask: the prompt stays open for operators, on every panel, and a
    // later policy change does not answer it.
    send_json(
        &mut ws,
        json!({"v": 1, "type": "subagent_policy", "session": child, "policy": "ask"}),
    );
    assert_eq!(next_of(&mut ws, "accepted")["policy"], "ask");
    send_to_child(&hub, &child, "/run echo asked");
    let open = ws_read_until(&mut ws, |v| {
        v["type"] == "confirmation"
            && v["session"] == child.as_str()
            && v["confirmation"]["state"] == "awaiting-decision"
    });
    assert_labelled(&open["confirmation"], &child);
    let cid = open["confirmation"]["confirmation_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        post(&hub, &policy_path, json!({"policy": "approve"})).status,
        200
    );
    // Every panel is told of the change; until then no frame closed the
    // prompt, and the description told shows it still open.
    let mut closed = None;
    let told = ws_read_until(&mut ws, |v| {
        if v["type"] == "confirmation"
            && v["confirmation"]["confirmation_id"] == cid.as_str()
            && v["open"] == false
        {
            closed = Some(v.clone());
        }
        v["type"] == "session"
            && v["session"]["session_id"] == child.as_str()
            && v["session"]["subagent"]["policy"] == "approve"
    });
    assert_eq!(closed, None, "the policy change answered an open prompt");
    assert_eq!(told["session"]["subagent"]["pending_approvals"], 1);
    let desc = hub.get(&format!("/api/sessions/{child}")).json()["session"].clone();
    let prompt = desc["confirmations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["confirmation_id"] == cid.as_str())
        .cloned()
        .expect("the ask prompt is still open");
    assert_eq!(prompt["state"], "awaiting-decision");
    assert_eq!(desc["subagent"]["pending_approvals"], 1);
    // The operator answers it individually.
    send_json(
        &mut ws,
        json!({"v": 1, "type": "confirmation", "session": child, "confirmation_id": cid,
               "decision": "denied", "request_id": "cf-1"}),
    );
    // The acknowledgement and the prompt's closing may arrive in either
    // order: the worker can answer before `accepted` is queued.
    let (mut accepted, mut closed) = (Value::Null, Value::Null);
    ws_read_until(&mut ws, |v| {
        if v["type"] == "accepted" {
            accepted = v.clone();
        }
        if v["type"] == "confirmation"
            && v["confirmation"]["confirmation_id"] == cid.as_str()
            && v["open"] == false
        {
            closed = v.clone();
        }
        !accepted.is_null() && !closed.is_null()
    });
    assert_eq!(accepted["confirmation_id"], cid.as_str());
    assert_eq!(accepted["request_id"], "cf-1");
    assert_eq!(
        closed["outcome"],
        json!({"phase": "decided", "detail": "denied"})
    );
}

#[test]
fn policy_requests_are_validated() {
    let dir = TempDir::new("headless-policy-invalid");
    let hub = TestHub::start(dir.path(), &[]);
    let child = fork_child(&hub);
    let path = format!("/api/sessions/{child}/subagent-policy");
    let deny = Some(json!({"policy": "deny"}));
    let extra = Some(json!({"policy": "deny", "extra": 1}));
    expect_refusals(
        &hub,
        &[
            (
                "POST",
                &path,
                Some(json!({"policy": "maybe"})),
                400,
                "invalid_policy",
            ),
            (
                "POST",
                &path,
                Some(json!({"policy": 1})),
                400,
                "invalid_policy",
            ),
            ("POST", &path, Some(json!({})), 400, "invalid_policy"),
            ("POST", &path, extra, 400, "invalid_arguments"),
            ("GET", &path, None, 405, "method_not_allowed"),
            // An ordinary session has no operator policy; a missing one is 404.
            (
                "POST",
                "/api/sessions/p/subagent-policy",
                deny.clone(),
                400,
                "invalid_policy",
            ),
            (
                "POST",
                "/api/sessions/nope/subagent-policy",
                deny,
                404,
                "unknown_session",
            ),
        ],
    );
    let res = hub.request("POST", &path, &[], b"not json");
    assert_eq!(res.json()["error"], "bad_json");
    // Nothing changed.
    assert_eq!(
        hub.get(&format!("/api/sessions/{child}")).json()["session"]["subagent"]["policy"],
        "ask"
    );

    let mut ws = panel(&hub);
    for (msg, code) in [
        (
            json!({"v": 1, "type": "subagent_policy", "session": "p", "policy": "deny"}),
            "invalid_policy",
        ),
        (
            json!({"v": 1, "type": "subagent_policy", "session": child, "policy": "never",
                   "request_id": "bad-1"}),
            "invalid_policy",
        ),
        (
            json!({"v": 1, "type": "subagent_policy", "session": "nope", "policy": "deny"}),
            "unknown_session",
        ),
    ] {
        send_json(&mut ws, msg.clone());
        let err = next_of(&mut ws, "error");
        assert_eq!(err["error"], code, "{msg} -> {err}");
        if let Some(id) = msg.get("request_id") {
            assert_eq!(err["request"]["request_id"], *id);
        }
    }
}

#[test]
fn recovery_routes_report_and_refuse() {
    let dir = TempDir::new("headless-recovery");
    let hub = TestHub::start(dir.path(), &[]);

    let global = hub.get("/api/subagents/recovery");
    assert_eq!(global.status, 200);
    assert_eq!(global.json(), json!({"blocked": false, "reason": null}));
    assert_eq!(post(&hub, "/api/subagents/recovery", json!({})).status, 405);

    let child = fork_child(&hub);
    let info = hub.get(&format!("/api/sessions/{child}/recovery"));
    assert_eq!(info.status, 200, "{}", info.text());
    let body = info.json();
    for key in [
        "lifecycle_id",
        "uncertain_start",
        "termination_confirmed",
        "cleanup_attempts",
        "max_cleanup_attempts",
        "automatic_retry",
        "retry_at",
        "reason",
    ] {
        assert!(body.get(key).is_some(), "{key} missing: {body}");
    }
    assert_eq!(body["lifecycle"], "ready");
    let raw = info.text();
    for secret in ["token", "args", "env", "command"] {
        assert!(!raw.contains(secret), "{secret} leaked: {raw}");
    }
    let lifecycle_id = body["lifecycle_id"].as_str().unwrap().to_string();

    let recover = format!("/api/sessions/{child}/recover");
    let body =
        |action: &str, lifecycle: Value| Some(json!({"action": action, "lifecycle_id": lifecycle}));
    let current = json!(lifecycle_id);
    let forced = Some(json!({"action": "retry", "lifecycle_id": lifecycle_id, "force": true}));
    let invalid = "invalid_arguments";
    expect_refusals(
        &hub,
        &[
            // Ordinary and unknown sessions.
            (
                "GET",
                "/api/sessions/p/recovery",
                None,
                400,
                "invalid_policy",
            ),
            (
                "GET",
                "/api/sessions/nope/recovery",
                None,
                404,
                "unknown_session",
            ),
            (
                "POST",
                "/api/sessions/p/recover",
                body("retry", json!("x")),
                400,
                "invalid_policy",
            ),
            (
                "POST",
                "/api/sessions/nope/recover",
                body("retry", json!("x")),
                404,
                "unknown_session",
            ),
            // Malformed requests.
            (
                "POST",
                &recover,
                body("explode", current.clone()),
                400,
                invalid,
            ),
            (
                "POST",
                &recover,
                Some(json!({"action": "retry"})),
                400,
                invalid,
            ),
            ("POST", &recover, body("retry", json!("")), 400, invalid),
            ("POST", &recover, body("retry", json!(7)), 400, invalid),
            ("POST", &recover, forced, 400, invalid),
            ("GET", &recover, None, 405, "method_not_allowed"),
            // A stale lifecycle id.
            (
                "POST",
                &recover,
                body("retry", json!("stale")),
                409,
                "stale_lifecycle",
            ),
            // An attestation (or a retry) while the worker is alive and
            // connected: the child is not retained.
            (
                "POST",
                &recover,
                body("confirm-terminated", current.clone()),
                409,
                "recovery_conflict",
            ),
            (
                "POST",
                &recover,
                body("retry", current),
                409,
                "recovery_conflict",
            ),
        ],
    );
    assert_eq!(
        hub.request("POST", &recover, &[], b"{").json()["error"],
        "bad_json"
    );
    // Nothing was deleted: the child is still there and running.
    let after = wait_session(&hub, &child, |s| s["process"]["state"] == "running");
    assert_eq!(after["subagent"]["lifecycle"], "ready");

    // Once the parent stops it and cleanup succeeds, the child leaves the
    // list on every panel; its recovery info goes with it.
    let mut ws = panel(&hub);
    let res = post(
        &hub,
        "/api/sessions/p/input",
        text_content(&format!("/stop-child {child}")),
    );
    assert_eq!(res.status, 202);
    let removed = ws_read_until(&mut ws, |v| {
        v["type"] == "session_removed" && v["session"] == child.as_str()
    });
    assert_eq!(removed["session"], child.as_str());
    assert_eq!(hub.get(&format!("/api/sessions/{child}")).status, 404);
    assert_eq!(
        hub.get(&format!("/api/sessions/{child}/recovery")).status,
        404
    );
    let listed = hub.get("/api/sessions").json()["sessions"].clone();
    assert!(listed
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["session_id"] != child.as_str()));
}
