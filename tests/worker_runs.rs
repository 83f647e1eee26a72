//! Confirmations over real sockets, and complete runs with the built-in
//! worker: message round trip, tool call approved (the command really
//! runs), denied, an identity hold resolved after a worker restart, and a
//! prompt queued between two event floods (the worker's queue contract).

use serde_json::{json, Value};

use crate::util::*;

/// A confirmation request for `run_command` `true`.
fn confirm_request(session: &str, worker: &str, cid: &str) -> String {
    confirmation_request(session, worker, cid, json!({"command": "true"}))
}

#[test]
fn message_round_trip_with_the_built_in_worker() {
    let dir = TempDir::new("roundtrip");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "chat");
    let _worker = KillOnDrop(spawn_mock_worker(&hub, "chat", "mock-flash"));
    let s = wait_session(&hub, "chat", |s| s["identity"]["state"] == "live");
    assert!(s["worker_capabilities"]
        .as_array()
        .unwrap()
        .contains(&json!("session-history")));
    let res = post(
        &hub,
        "/api/sessions/chat/input",
        text_content("hello there"),
    );
    assert_eq!(res.status, 202, "{}", res.text());
    let request_id = res.json()["request_id"].as_str().unwrap().to_string();
    let finished = wait_event(&hub, "chat", |e| e["event"] == "run_finished");
    assert_eq!(finished["data"]["status"], "completed");
    assert_eq!(finished["request_id"], request_id.as_str());
    let reply = wait_event(&hub, "chat", |e| e["event"] == "model_response");
    assert!(reply.to_string().contains("echo: hello there"), "{reply}");
    let s = wait_session(&hub, "chat", |s| s["requests"][0]["state"] == "admitted");
    assert_eq!(s["last_run_id"], finished["run_id"]);
    // A duplicate request id is rejected by the worker, and surfaced.
    let dup = post(
        &hub,
        "/api/sessions/chat/input",
        json!({"request_id": request_id, "content": text_content("again")["content"]}),
    );
    assert_eq!(dup.status, 202);
    let rejected = wait_event(&hub, "chat", |e| e["event"] == "input_rejected");
    assert_eq!(rejected["run_id"], "");
}

fn open_prompt(hub: &TestHub, id: &str) -> Value {
    let s = wait_session(hub, id, |s| {
        s["confirmations"]
            .as_array()
            .is_some_and(|c| c.iter().any(|p| p["state"] == "awaiting-decision"))
    });
    s["confirmations"][0].clone()
}

#[test]
fn approved_tool_call_really_runs() {
    let dir = TempDir::new("approve");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "tool");
    let _worker = KillOnDrop(spawn_mock_worker(&hub, "tool", "mock-flash"));
    wait_session(&hub, "tool", |s| s["identity"]["state"] == "live");
    let marker = hub.data_dir.join("sessions/tool/marker.txt");
    post(
        &hub,
        "/api/sessions/tool/input",
        text_content("/run echo ran > marker.txt && echo tool-output"),
    );
    let prompt = open_prompt(&hub, "tool");
    assert_eq!(prompt["call"]["name"], "run_command");
    assert_eq!(prompt["verified"], true);
    assert!(!marker.exists(), "ran before approval");
    let cid = prompt["confirmation_id"].as_str().unwrap();
    let res = post(
        &hub,
        &format!("/api/sessions/tool/confirmations/{cid}"),
        json!({"decision": "approved", "reason": "fine"}),
    );
    assert_eq!(res.status, 200, "{}", res.text());
    let again = post(
        &hub,
        &format!("/api/sessions/tool/confirmations/{cid}"),
        json!({"decision": "denied"}),
    );
    assert!(
        again.status == 409 || again.status == 404,
        "second decision accepted"
    );
    let results = wait_event(&hub, "tool", |e| e["event"] == "tool_results");
    assert!(results.to_string().contains("tool-output"), "{results}");
    let finished = wait_event(&hub, "tool", |e| e["event"] == "run_finished");
    assert_eq!(finished["data"]["status"], "completed");
    assert_eq!(std::fs::read_to_string(&marker).unwrap().trim(), "ran");
    wait_session(&hub, "tool", |s| s["confirmations"] == json!([]));
}

#[test]
fn denied_tool_call_does_not_run() {
    let dir = TempDir::new("deny");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "tool");
    let _worker = KillOnDrop(spawn_mock_worker(&hub, "tool", "mock-flash"));
    wait_session(&hub, "tool", |s| s["identity"]["state"] == "live");
    post(
        &hub,
        "/api/sessions/tool/input",
        text_content("/run touch marker.txt"),
    );
    let prompt = open_prompt(&hub, "tool");
    let cid = prompt["confirmation_id"].as_str().unwrap();
    let res = post(
        &hub,
        &format!("/api/sessions/tool/confirmations/{cid}"),
        json!({"decision": "denied", "reason": "no"}),
    );
    assert_eq!(res.status, 200);
    let results = wait_event(&hub, "tool", |e| e["event"] == "tool_results");
    assert!(results.to_string().contains("security_check"), "{results}");
    wait_event(&hub, "tool", |e| e["event"] == "run_finished");
    assert!(!hub.data_dir.join("sessions/tool/marker.txt").exists());
    let missing = post(
        &hub,
        "/api/sessions/tool/confirmations/nope",
        json!({"decision": "approved"}),
    );
    assert_eq!(
        (missing.status, missing.json()["error"].clone()),
        (404, json!("unknown_confirmation"))
    );
}

#[test]
fn identity_hold_then_approve_after_a_worker_restart() {
    let dir = TempDir::new("hold");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "h");
    let (events, confirm) = (events_path(&hub, "h"), confirm_path(&hub, "h"));
    // The first worker process identifies itself, then goes away.
    let mut first = ws_connect(hub.addr, &events).unwrap();
    send_text(
        &mut first,
        envelope("h", "old-worker", 1, "ready", json!({})),
    );
    wait_session(&hub, "h", |s| s["identity"]["state"] == "live");
    drop(first);
    wait_session(&hub, "h", |s| s["identity"]["state"] == "stale");
    // The restarted worker asks for confirmation before its event socket
    // has named it: the prompt is held, and cannot be decided yet.
    let mut prompt = ws_connect(hub.addr, &confirm).unwrap();
    send_text(&mut prompt, confirm_request("h", "new-worker", "c-1"));
    let s = wait_session(&hub, "h", |s| {
        s["confirmations"][0]["state"] == "awaiting-identity"
    });
    assert_eq!(s["confirmations"][0]["verified"], false);
    let early = post(
        &hub,
        "/api/sessions/h/confirmations/c-1",
        json!({"decision": "approved"}),
    );
    assert_eq!(
        (early.status, early.json()["error"].clone()),
        (409, json!("confirmation_rejected"))
    );
    // Its event connection names it: now the operator can approve.
    let mut second = ws_connect(hub.addr, &events).unwrap();
    send_text(
        &mut second,
        envelope("h", "new-worker", 1, "ready", json!({})),
    );
    wait_session(&hub, "h", |s| {
        s["confirmations"][0]["state"] == "awaiting-decision"
    });
    let res = post(
        &hub,
        "/api/sessions/h/confirmations/c-1",
        json!({"decision": "approved"}),
    );
    assert_eq!(res.status, 200);
    let answer = ws_read_until(&mut prompt, |v| v["type"] == "confirmation_response");
    assert_eq!(answer["data"]["decision"], "approved");
    for key in ["worker_id", "session_id", "run_id", "confirmation_id"] {
        assert!(answer["data"][key].is_string(), "{key} not echoed");
    }
    assert_eq!(answer["data"]["worker_id"], "new-worker");
    assert_eq!(answer["data"]["confirmation_id"], "c-1");
    assert!(answer["data"].get("call").is_none());
    prompt.close(None).unwrap();
    wait_session(&hub, "h", |s| s["confirmations"] == json!([]));
}

#[test]
fn a_held_prompt_is_denied_when_the_hold_expires_or_the_worker_differs() {
    let dir = TempDir::new("holdexpire");
    let cfg = dir.path().join("c.jsonc");
    std::fs::write(&cfg, r#"{"limits": {"confirmIdentityHoldMs": 300}}"#).unwrap();
    let hub = TestHub::start(dir.path(), &["-c", cfg.to_str().unwrap()]);
    create_session(&hub, "e");
    let (events, confirm) = (events_path(&hub, "e"), confirm_path(&hub, "e"));
    let mut prompt = ws_connect(hub.addr, &confirm).unwrap();
    send_text(&mut prompt, confirm_request("e", "w", "c-exp"));
    let answer = ws_read_until(&mut prompt, |v| v["type"] == "confirmation_response");
    assert_eq!(answer["data"]["decision"], "denied");
    // A live worker with a different id: denied at once.
    let mut ev = ws_connect(hub.addr, &events).unwrap();
    send_text(&mut ev, envelope("e", "real-worker", 1, "ready", json!({})));
    wait_session(&hub, "e", |s| s["identity"]["state"] == "live");
    let mut impostor = ws_connect(hub.addr, &confirm).unwrap();
    send_text(&mut impostor, confirm_request("e", "someone-else", "c-imp"));
    let answer = ws_read_until(&mut impostor, |v| v["type"] == "confirmation_response");
    assert_eq!(answer["data"]["decision"], "denied");
}

#[test]
fn malformed_second_and_duplicate_confirmation_frames_close_1008() {
    let dir = TempDir::new("confirm1008");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "m");
    let (events, confirm) = (events_path(&hub, "m"), confirm_path(&hub, "m"));
    let mut ev = ws_connect(hub.addr, &events).unwrap();
    send_text(&mut ev, envelope("m", "w", 1, "ready", json!({})));
    wait_session(&hub, "m", |s| s["identity"]["state"] == "live");

    let mut bad = ws_connect(hub.addr, &confirm).unwrap();
    send_text(&mut bad, "{not json".to_string());
    assert_eq!(ws_close_code(&mut bad), Some(1008));
    let mut binary = ws_connect(hub.addr, &confirm).unwrap();
    binary
        .send(tungstenite::Message::Binary(vec![0u8; 4].into()))
        .unwrap();
    assert_eq!(ws_close_code(&mut binary), Some(1008));

    let mut first = ws_connect(hub.addr, &confirm).unwrap();
    send_text(&mut first, confirm_request("m", "w", "dup"));
    wait_session(&hub, "m", |s| {
        s["confirmations"][0]["state"] == "awaiting-decision"
    });
    let mut dup = ws_connect(hub.addr, &confirm).unwrap();
    send_text(&mut dup, confirm_request("m", "w", "dup"));
    assert_eq!(ws_close_code(&mut dup), Some(1008));
    // The first exchange is undisturbed and still answerable.
    let s = hub.get("/api/sessions/m").json()["session"].clone();
    assert_eq!(s["confirmations"].as_array().unwrap().len(), 1);
    assert_eq!(
        post(
            &hub,
            "/api/sessions/m/confirmations/dup",
            json!({"decision": "approved"})
        )
        .status,
        200
    );
    let answer = ws_read_until(&mut first, |v| v["type"] == "confirmation_response");
    assert_eq!(answer["data"]["decision"], "approved");

    let mut twice = ws_connect(hub.addr, &confirm).unwrap();
    send_text(&mut twice, confirm_request("m", "w", "two"));
    wait_session(&hub, "m", |s| {
        s["confirmations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["confirmation_id"] == "two")
    });
    send_text(&mut twice, confirm_request("m", "w", "three"));
    assert_eq!(ws_close_code(&mut twice), Some(1008));
    wait_session(&hub, "m", |s| {
        !s["confirmations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["confirmation_id"] == "two")
    });
}

#[test]
fn at_most_64_open_prompts_per_session() {
    let dir = TempDir::new("cap64");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "cap");
    let (events, confirm) = (events_path(&hub, "cap"), confirm_path(&hub, "cap"));
    let mut ev = ws_connect(hub.addr, &events).unwrap();
    send_text(&mut ev, envelope("cap", "w", 1, "ready", json!({})));
    wait_session(&hub, "cap", |s| s["identity"]["state"] == "live");
    let mut open = Vec::new();
    for i in 0..64 {
        let mut ws = ws_connect(hub.addr, &confirm).unwrap();
        send_text(&mut ws, confirm_request("cap", "w", &format!("p{i}")));
        open.push(ws);
    }
    wait_session(&hub, "cap", |s| {
        s["confirmations"].as_array().unwrap().len() == 64
    });
    let mut extra = ws_connect(hub.addr, &confirm).unwrap();
    send_text(&mut extra, confirm_request("cap", "w", "p64"));
    let answer = ws_read_until(&mut extra, |v| v["type"] == "confirmation_response");
    assert_eq!(answer["data"]["decision"], "denied");
    let s = hub.get("/api/sessions/cap").json()["session"].clone();
    assert_eq!(s["confirmations"].as_array().unwrap().len(), 64);
    drop(open);
    wait_session(&hub, "cap", |s| s["confirmations"] == json!([]));
}

#[test]
fn large_arguments_are_previewed_but_the_decision_applies_to_the_original() {
    let dir = TempDir::new("preview");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "pv");
    let (events, confirm) = (events_path(&hub, "pv"), confirm_path(&hub, "pv"));
    let mut ev = ws_connect(hub.addr, &events).unwrap();
    send_text(&mut ev, envelope("pv", "w", 1, "ready", json!({})));
    wait_session(&hub, "pv", |s| s["identity"]["state"] == "live");
    let big = "q".repeat(200 * 1024);
    let request = json!({"type": "confirmation_request", "data": {
        "worker_id": "w", "session_id": "pv", "run_id": "r", "confirmation_id": "big",
        "call": {"id": "c", "name": "write_file", "type": "serial_write", "security": "require_confirm",
                 "arguments": {"path": "a.txt", "content": big}},
    }});
    let mut ws = ws_connect(hub.addr, &confirm).unwrap();
    send_text(&mut ws, request.to_string());
    let s = wait_session(&hub, "pv", |s| {
        s["confirmations"][0]["state"] == "awaiting-decision"
    });
    let p = &s["confirmations"][0];
    assert_eq!(p["arguments_truncated"], true);
    assert!(p["arguments_bytes"].as_u64().unwrap() > 200 * 1024);
    assert_eq!(p["call"]["arguments"]["path"], "a.txt");
    assert!(p["call"].to_string().len() <= 64 * 1024 + 512);
    assert_eq!(
        post(
            &hub,
            "/api/sessions/pv/confirmations/big",
            json!({"decision": "approved"})
        )
        .status,
        200
    );
    let answer = ws_read_until(&mut ws, |v| v["type"] == "confirmation_response");
    assert_eq!(answer["data"]["confirmation_id"], "big");
}

/// Every event the hub retains for `session`, oldest first, page by page.
fn all_events(hub: &TestHub, session: &str) -> Vec<Value> {
    let mut events = Vec::new();
    let mut since = 0;
    loop {
        let page = hub
            .get(&format!("/api/sessions/{session}/events?since={since}"))
            .json();
        let batch = page["events"].as_array().cloned().unwrap_or_default();
        let Some(last) = batch.last() else {
            return events;
        };
        since = last["hub_sequence"].as_u64().unwrap();
        events.extend(batch);
    }
}

fn input(hub: &TestHub, session: &str, raw: &str, model: &str) -> String {
    let res = post(
        hub,
        &format!("/api/sessions/{session}/input"),
        json!({"content": text_content(raw)["content"], "options": {"model": {"model": model}}}),
    );
    assert_eq!(res.status, 202, "{}", res.text());
    res.json()["request_id"].as_str().unwrap().to_string()
}

#[test]
fn a_prompt_queued_behind_an_offline_flood_is_admitted_and_omissions_are_counted() {
    let _heavy = heavy();
    let dir = TempDir::new("mw-flood");
    // A small worker event queue (16 noncritical events) against floods
    // of 20,000 display events each; a worker that lost its connection
    // waits 3 s before it reconnects; the transcript keeps all that
    // arrives.
    let hub = hub_with(
        &dir,
        json!({"worker": {"eventCapacity": 16, "initialBackoffMs": 3000, "maxBackoffMs": 3000},
               "limits": {"transcriptEvents": 100_000}}),
    );
    create_session_with_spec(&hub, "f", json!({}));
    assert_eq!(action(&hub, "f", "start").json()["ok"], true);
    wait_session(&hub, "f", |s| s["identity"]["state"] == "live");

    // The first flood's one reply waits 1.5 s (mock-slow). Meanwhile the
    // prompt and a second flood are queued behind it, and a second
    // connection supersedes the worker's (close 4001): the first burst
    // happens while the worker is offline, and the prompt must wait for
    // that backlog, which only the reconnect drains.
    let first = input(&hub, "f", "/flood 20000", "mock-slow");
    wait_event(&hub, "f", |e| {
        e["event"] == "input_committed" && e["request_id"] == first.as_str()
    });
    let prompt = input(&hub, "f", "hello during the floods", "mock-flash");
    let second = input(&hub, "f", "/flood 20000", "mock-flash");
    let usurper = RawWs::open(hub.addr, &events_path(&hub, "f"));
    wait_session(&hub, "f", |s| s["identity"]["state"] != "live");

    let mut events = Vec::new();
    let finished = |events: &[Value], request: &str| {
        events
            .iter()
            .any(|e| e["event"] == "run_finished" && e["request_id"] == request)
    };
    assert!(
        wait_until(DEADLINE, || {
            events = all_events(&hub, "f");
            finished(&events, &second)
        }),
        "the second flood never finished"
    );
    drop(usurper);
    let at = |event: &str, request: &str| {
        events
            .iter()
            .position(|e| e["event"] == event && e["request_id"] == request)
            .unwrap_or_else(|| panic!("the hub never saw {event} for {request}"))
    };
    for request in [&first, &prompt, &second] {
        for event in [
            "input_admitted",
            "run_started",
            "input_committed",
            "run_finished",
        ] {
            at(event, request);
        }
    }
    // Each run was admitted after the previous one's backlog.
    assert!(at("input_admitted", &prompt) > at("run_finished", &first));
    assert!(at("input_admitted", &second) > at("run_finished", &prompt));
    let reply = &events[at("model_response", &prompt)];
    assert_eq!(
        reply["data"]["content"][0]["raw"],
        "echo: hello during the floods"
    );
    assert_eq!(
        events[at("run_finished", &prompt)]["data"]["status"],
        "completed"
    );
    // Omitted events took no sequence numbers and nothing was lost.
    assert_eq!(get_session(&hub, "f")["stats"]["gaps"], 0);

    // The floods outran the queue: what was left out is counted, and what
    // arrived plus what was counted is every flood event.
    let mut omitted_total = 0;
    for request in [&first, &second] {
        let end = &events[at("run_finished", request)];
        assert_eq!(end["data"]["status"], "completed");
        let omitted = end["data"]["omitted_display_events"].as_u64().unwrap_or(0);
        let run = &end["run_id"];
        let delivered = events
            .iter()
            .filter(|e| e["event"] == "model_response" && &e["run_id"] == run)
            .count() as u64;
        assert!(omitted > 0, "no display event omitted in {end}");
        assert_eq!(omitted + delivered, 20_001, "{end}");
        omitted_total += omitted;
    }
    omitted_total += events[at("run_finished", &prompt)]["data"]["omitted_display_events"]
        .as_u64()
        .unwrap_or(0);

    // The status object reports the cumulative count.
    let before = events.last().unwrap()["hub_sequence"].as_u64().unwrap();
    let res = post(
        &hub,
        "/api/sessions/f/signal",
        json!({"operation": "status"}),
    );
    assert!(res.status < 300, "{}", res.text());
    let status = wait_event(&hub, "f", |e| {
        e["event"] == "status" && e["hub_sequence"].as_u64() > Some(before)
    });
    assert_eq!(
        status["data"]["event_queue"]["omitted_display_events"],
        omitted_total
    );
    assert_eq!(status["data"]["unreported_rejections"], 0);
    eprintln!(
        "worker floods: {} events reached the hub, {omitted_total} omitted and counted",
        events.len()
    );
    assert_eq!(action(&hub, "f", "stop").json()["how"], "shutdown-signal");
}
