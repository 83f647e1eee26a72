//! Panel WebSocket protocol v1 against a real hub: messages and error
//! codes, Origin/Host refusals, replay (legacy and paged, with live events
//! arriving meanwhile), global confirmations and the outbound budget.

use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::util::*;

#[test]
fn welcome_ping_and_error_codes() {
    let dir = TempDir::new("panel-basic");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "one");
    let mut ws = panel_connect(&hub);
    let welcome = next_of(&mut ws, "welcome");
    assert_eq!(welcome["v"], 1);
    assert_eq!(
        welcome["hub"]["transcript_epoch"],
        hub.get("/api/meta").json()["transcript_epoch"]
    );
    assert_eq!(welcome["sessions"][0]["session_id"], "one");
    send_json(&mut ws, json!({"v": 1, "type": "ping"}));
    assert!(next_of(&mut ws, "pong")["at"].is_string());
    // `v` may be left out, as Node clients do: it means version 1
    send_json(&mut ws, json!({"type": "ping"}));
    assert!(next_of(&mut ws, "pong")["at"].is_string());
    for (frame, code) in [
        ("not json".to_string(), "bad_json"),
        ("[1]".to_string(), "bad_message"),
        (json!({"v": 2, "type": "ping"}).to_string(), "unsupported_version"),
        (json!({"v": 1, "type": "subscribe"}).to_string(), "bad_message"),
        (json!({"v": 1, "type": "subscribe", "session": "nope"}).to_string(), "unknown_session"),
        (json!({"v": 1, "type": "create_session", "session": "a/b"}).to_string(), "invalid_session"),
        (json!({"v": 1, "type": "create_session", "session": "one"}).to_string(), "session_exists"),
        (json!({"v": 1, "type": "input", "session": "one", "content": [{"type": "text", "modality": "text", "raw": "x"}]}).to_string(), "input_not_sent"),
        (json!({"v": 1, "type": "history", "session": "one"}).to_string(), "input_not_sent"),
        (json!({"v": 1, "type": "signal", "session": "one", "operation": "status"}).to_string(), "signal_not_sent"),
        (json!({"v": 1, "type": "confirmation", "session": "one", "confirmation_id": "x", "decision": "approved"}).to_string(), "unknown_confirmation"),
        (json!({"v": 1, "type": "subagent_policy", "session": "one", "policy": "deny"}).to_string(), "invalid_policy"),
    ] {
        send_text(&mut ws, frame.clone());
        let err = next_of(&mut ws, "error");
        assert_eq!(err["error"], code, "{frame} -> {err}");
        assert_eq!(err["v"], 1);
        // A refused command names its session and echoes the message.
        if let Ok(Value::Object(sent)) = serde_json::from_str::<Value>(&frame) {
            if let Some(session) = sent.get("session").filter(|_| code != "invalid_session") {
                assert_eq!(&err["session"], session, "{frame} -> {err}");
                assert_eq!(err["request"]["type"], sent["type"], "{frame} -> {err}");
            }
        }
    }
    ws.send(tungstenite::Message::Binary(vec![1u8].into()))
        .unwrap();
    assert_eq!(next_of(&mut ws, "error")["error"], "binary_not_supported");
    // Unknown types are ignored; unknown fields are tolerated.
    send_json(&mut ws, json!({"v": 1, "type": "from_the_future"}));
    send_json(&mut ws, json!({"v": 1, "type": "ping", "extra": {"x": 1}}));
    assert_eq!(next_of(&mut ws, "pong")["v"], 1);
    send_json(&mut ws, json!({"v": 1, "type": "list_sessions"}));
    assert_eq!(
        next_of(&mut ws, "sessions")["sessions"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn sessions_are_created_and_removed_for_every_panel() {
    let dir = TempDir::new("panel-crud");
    let hub = TestHub::start(dir.path(), &[]);
    let mut a = panel_connect(&hub);
    let mut b = panel_connect(&hub);
    next_of(&mut a, "welcome");
    next_of(&mut b, "welcome");
    send_json(
        &mut a,
        json!({"v": 1, "type": "create_session", "session": "s1", "spec": {"model": "m"}}),
    );
    assert_eq!(next_of(&mut a, "created")["session"]["session_id"], "s1");
    assert_eq!(next_of(&mut b, "session")["session"]["session_id"], "s1");
    send_json(
        &mut b,
        json!({"v": 1, "type": "delete_session", "session": "s1"}),
    );
    assert_eq!(next_of(&mut a, "session_removed")["session"], "s1");
    assert_eq!(next_of(&mut b, "session_removed")["session"], "s1");
    assert_eq!(hub.get("/api/sessions/s1").status, 404);
}

#[test]
fn origin_and_token_are_checked_on_upgrade() {
    let dir = TempDir::new("panel-origin");
    let hub = TestHub::start(dir.path(), &["--panel-token", "sekret"]);
    let path = "/panel/ws?token=sekret";
    assert_eq!(ws_refusal(hub.addr, "/panel/ws"), 401);
    assert_eq!(ws_refusal(hub.addr, "/panel/ws?token=nope"), 401);
    let mut ok = ws_connect(hub.addr, path).unwrap();
    next_of(&mut ok, "welcome");
    let upgrade = |origin: &str, host: &str| -> u16 {
        let raw = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nOrigin: {origin}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        );
        let mut s = std::net::TcpStream::connect(hub.addr).unwrap();
        s.set_read_timeout(Some(DEADLINE)).unwrap();
        s.write_all(raw.as_bytes()).unwrap();
        let mut buf = [0u8; 512];
        let n = std::io::Read::read(&mut s, &mut buf).unwrap();
        let head = String::from_utf8_lossy(&buf[..n]).to_string();
        head.split(' ').nth(1).unwrap().parse().unwrap()
    };
    let host = hub.addr.to_string();
    assert_eq!(upgrade(&format!("http://{host}"), &host), 101);
    assert_eq!(upgrade("http://evil.example", &host), 403);
    assert_eq!(
        upgrade(&format!("http://localhost:{}", hub.addr.port()), &host),
        403
    );
    // DNS rebinding: the Host itself must be a loopback name of this hub.
    assert_eq!(upgrade("http://evil.example:1", "evil.example:1"), 403);
}

#[test]
fn live_events_requests_and_legacy_replay() {
    let dir = TempDir::new("panel-live");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "s");
    let mut worker = worker_events(&hub, "s");
    for seq in 1..=3 {
        send_text(
            &mut worker,
            envelope("s", "w", seq, "status", json!({"n": seq})),
        );
    }
    wait_session(&hub, "s", |s| s["stats"]["events"] == 3);
    let mut ws = panel(&hub);
    send_json(
        &mut ws,
        json!({"v": 1, "type": "subscribe", "session": "s", "since": 1}),
    );
    let sub = next_of(&mut ws, "subscribed");
    let seqs: Vec<u64> = sub["transcript"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["hub_sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, vec![2, 3]);
    assert_eq!(sub["latest"], 3);
    assert!(sub.get("replay_more").is_none());
    assert_eq!(
        sub["transcript_epoch"],
        hub.get("/api/meta").json()["transcript_epoch"]
    );
    assert_eq!(
        sub["plan"],
        json!({"markdown": "", "revision": 0, "updated_at": null})
    );
    send_text(
        &mut worker,
        envelope("s", "w", 4, "model_response", json!({"content": []})),
    );
    let ev = next_of(&mut ws, "event");
    assert_eq!(ev["session"], "s");
    assert_eq!(ev["hub_seq"], 4);
    assert_eq!(ev["envelope"]["event"], "model_response");
    // Input through the panel socket: accepted, then request state changes.
    send_json(
        &mut ws,
        json!({"v": 1, "type": "input", "session": "s", "request_id": "r-1", "content": [{"type": "text", "modality": "text", "raw": "hi"}]}),
    );
    let accepted = next_of(&mut ws, "accepted");
    assert_eq!(
        (accepted["action"].clone(), accepted["request_id"].clone()),
        (json!("input"), json!("r-1"))
    );
    assert_eq!(
        ws_read_until(&mut worker, |v| v["type"] == "payload")["data"]["request_id"],
        "r-1"
    );
    let mut admitted = json!({"type": "event", "event": "input_admitted", "session_id": "s", "worker_id": "w", "request_id": "r-1", "run_id": "run", "sequence": 5, "data": {"operation": "message"}});
    send_text(&mut worker, admitted.to_string());
    let req = ws_read_until(&mut ws, |v| {
        v["type"] == "request" && v["request"]["state"] == "admitted"
    });
    assert_eq!(req["request"]["request_id"], "r-1");
    admitted["sequence"] = json!(6);
    // Unsubscribe stops live events for that session.
    send_json(
        &mut ws,
        json!({"v": 1, "type": "unsubscribe", "session": "s"}),
    );
    send_json(&mut ws, json!({"v": 1, "type": "ping"}));
    next_of(&mut ws, "pong");
    send_text(&mut worker, envelope("s", "w", 7, "status", json!({})));
    send_json(&mut ws, json!({"v": 1, "type": "ping"}));
    let next = ws_read_until(&mut ws, |v| v["type"] == "pong" || v["type"] == "event");
    assert_eq!(next["type"], "pong", "event delivered after unsubscribe");
    // Closing the worker tells the panels (session updates go to everyone).
    drop(worker);
    let s = ws_read_until(&mut ws, |v| {
        v["type"] == "session" && v["session"]["connected"] == false
    });
    assert_eq!(s["session"]["identity"]["state"], "stale");
}

#[test]
fn paged_replay_of_a_large_transcript_is_complete_and_ordered_with_live_events() {
    let dir = TempDir::new("panel-paged");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "big");
    let mut worker = worker_events(&hub, "big");
    let pad = "p".repeat(60 * 1024);
    for seq in 1..=100 {
        send_text(
            &mut worker,
            envelope(
                "big",
                "w",
                seq,
                "model_response",
                json!({"pad": pad, "n": seq}),
            ),
        );
    }
    wait_session(&hub, "big", |s| s["stats"]["events"] == 100);
    let mut ws = panel(&hub);
    send_json(
        &mut ws,
        json!({"v": 1, "type": "subscribe", "session": "big", "paged": true, "replace": true, "request_id": "q1"}),
    );
    // Live events keep arriving while the replay is paged out.
    let feeder = std::thread::spawn(move || {
        for seq in 101..=140 {
            send_text(
                &mut worker,
                envelope("big", "w", seq, "status", json!({"n": seq})),
            );
            // paced on purpose, so live events interleave with the pages
            std::thread::sleep(Duration::from_millis(5));
        }
        worker
    });
    let mut seen: Vec<u64> = Vec::new();
    let mut pages = 0;
    let mut first = true;
    let end = Instant::now() + DEADLINE;
    loop {
        assert!(Instant::now() < end);
        let msg = ws_read_until(&mut ws, |v| {
            v["type"] == "subscribed" || v["type"] == "event"
        });
        if msg["type"] == "event" {
            seen.push(msg["hub_seq"].as_u64().unwrap());
            if seen.last() == Some(&140) {
                break;
            }
            continue;
        }
        assert_eq!(msg["request_id"], "q1");
        let reset = msg.get("replay_reset") == Some(&json!(true));
        assert_eq!(reset, first, "replay_reset only on the first reply");
        first = false;
        let frame_len = msg.to_string().len();
        assert!(
            frame_len <= 512 * 1024 + 1024 || msg["transcript"].as_array().unwrap().len() == 1,
            "page of {frame_len} bytes"
        );
        for e in msg["transcript"].as_array().unwrap() {
            seen.push(e["hub_sequence"].as_u64().unwrap());
        }
        if msg["replay_more"] == true {
            pages += 1;
            assert_eq!(msg["latest"], json!(*seen.last().unwrap()));
        } else {
            assert!(msg["transcript"].as_array().unwrap().is_empty());
            assert_eq!(msg["latest"], json!(*seen.last().unwrap()));
            if seen.last() == Some(&140) {
                break;
            }
        }
    }
    let _worker = feeder.join().unwrap();
    assert!(pages >= 12, "{pages} pages for > 6 MiB");
    let expected: Vec<u64> = (1..=140).collect();
    assert_eq!(
        seen, expected,
        "replay and live events out of order or incomplete"
    );
}

#[test]
fn confirmations_reach_every_panel_and_can_be_answered_there() {
    let dir = TempDir::new("panel-confirm");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "work");
    create_session(&hub, "other");
    let mut worker = worker_events(&hub, "work");
    send_text(&mut worker, envelope("work", "w", 1, "ready", json!({})));
    wait_session(&hub, "work", |s| s["identity"]["state"] == "live");
    let mut ws = panel(&hub);
    send_json(
        &mut ws,
        json!({"v": 1, "type": "subscribe", "session": "other"}),
    );
    next_of(&mut ws, "subscribed");
    let mut prompt = worker_confirm(&hub, "work");
    let request = json!({"type": "confirmation_request", "data": {
        "worker_id": "w", "session_id": "work", "run_id": "r", "confirmation_id": "cf-1",
        "call": {"id": "c", "name": "run_command", "type": "serial_write", "security": "require_confirm", "arguments": {"command": "ls"}},
    }});
    send_text(&mut prompt, request.to_string());
    let opened = ws_read_until(&mut ws, |v| {
        v["type"] == "confirmation"
            && v["open"] == true
            && v["confirmation"]["state"] == "awaiting-decision"
    });
    assert_eq!(opened["session"], "work");
    send_json(
        &mut ws,
        json!({"v": 1, "type": "confirmation", "session": "work", "confirmation_id": "cf-1", "decision": "approved", "request_id": "a-1"}),
    );
    let accepted = next_of(&mut ws, "accepted");
    assert_eq!(accepted["request_id"], "a-1");
    let answer = ws_read_until(&mut prompt, |v| v["type"] == "confirmation_response");
    assert_eq!(answer["data"]["decision"], "approved");
    send_json(
        &mut ws,
        json!({"v": 1, "type": "confirmation", "session": "work", "confirmation_id": "cf-1", "decision": "denied"}),
    );
    assert_eq!(next_of(&mut ws, "error")["error"], "confirmation_rejected");
    prompt.close(None).unwrap();
    let closed = ws_read_until(&mut ws, |v| {
        v["type"] == "confirmation" && v["open"] == false
    });
    assert_eq!(
        closed["outcome"],
        json!({"phase": "decided", "detail": "approved"})
    );
    assert_eq!(closed["confirmation"]["state"], "decided");
}

#[test]
fn a_paused_panel_is_cut_at_the_budget_and_nothing_else_suffers() {
    let dir = TempDir::new("panel-budget");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "flood");
    let mut worker = worker_events(&hub, "flood");
    send_text(&mut worker, envelope("flood", "w", 1, "ready", json!({})));
    wait_session(&hub, "flood", |s| s["identity"]["state"] == "live");
    // The paused panel subscribes, then never reads again.
    let mut paused = panel(&hub);
    send_json(
        &mut paused,
        json!({"v": 1, "type": "subscribe", "session": "flood"}),
    );
    next_of(&mut paused, "subscribed");
    let mut healthy = panel(&hub);
    send_json(
        &mut healthy,
        json!({"v": 1, "type": "subscribe", "session": "flood"}),
    );
    next_of(&mut healthy, "subscribed");
    let threads_before = hub.threads();
    let pad = "f".repeat(256 * 1024);
    let reader = std::thread::spawn(move || {
        let mut count = 0;
        while count < 60 {
            let v = ws_read_until(&mut healthy, |v| v["type"] == "event");
            assert_eq!(v["envelope"]["data"]["n"], json!(count + 2));
            count += 1;
        }
        healthy
    });
    for seq in 2..=61 {
        send_text(
            &mut worker,
            envelope(
                "flood",
                "w",
                seq,
                "model_response",
                json!({"pad": pad, "n": seq}),
            ),
        );
    }
    let _healthy = reader.join().unwrap();
    assert!(
        wait_until(DEADLINE, || hub
            .log_text()
            .contains("outbound budget exceeded")),
        "{}",
        hub.log_text()
    );
    // A confirmation is still answered while the paused panel is gone.
    let mut prompt = worker_confirm(&hub, "flood");
    let request = json!({"type": "confirmation_request", "data": {
        "worker_id": "w", "session_id": "flood", "run_id": "r", "confirmation_id": "after",
        "call": {"id": "c", "name": "x", "type": "read_only", "security": "require_confirm", "arguments": {}},
    }});
    send_text(&mut prompt, request.to_string());
    wait_session(&hub, "flood", |s| {
        s["confirmations"][0]["state"] == "awaiting-decision"
    });
    assert_eq!(
        post(
            &hub,
            "/api/sessions/flood/confirmations/after",
            json!({"decision": "denied"})
        )
        .status,
        200
    );
    assert_eq!(
        ws_read_until(&mut prompt, |v| v["type"] == "confirmation_response")["data"]["decision"],
        "denied"
    );
    // The paused socket was terminated, not left open.
    drop(paused);
    assert!(wait_until(DEADLINE, || hub.threads() <= threads_before));
}

#[test]
fn idle_panels_hold_no_thread_and_disconnects_return_to_baseline() {
    let dir = TempDir::new("panel-threads");
    let hub = TestHub::start(dir.path(), &[]);
    let baseline = hub.threads();
    let fd_baseline = hub.fds();
    let mut sockets = Vec::new();
    for _ in 0..50 {
        sockets.push(panel(&hub));
    }
    // Idle sockets wait in the one poll thread; their writers exit idle.
    assert!(
        wait_until(DEADLINE, || hub.threads() <= baseline + 1),
        "threads {} > baseline {baseline} + the poll thread",
        hub.threads()
    );
    // Every one of them is still served.
    for ws in &mut sockets {
        send_json(ws, json!({"v": 1, "type": "ping"}));
    }
    for ws in &mut sockets {
        next_of(ws, "pong");
    }
    drop(sockets);
    assert!(
        wait_until(DEADLINE, || hub.threads() <= baseline),
        "threads {} > baseline {baseline}",
        hub.threads()
    );
    assert!(
        wait_until(DEADLINE, || hub.fds() <= fd_baseline),
        "fds {} > baseline {fd_baseline}",
        hub.fds()
    );
}

#[test]
fn transcript_epoch_changes_across_a_restart() {
    let dir = TempDir::new("panel-epoch");
    let mut hub = TestHub::start(dir.path(), &[]);
    let mut ws = panel_connect(&hub);
    let first = next_of(&mut ws, "welcome")["hub"]["transcript_epoch"].clone();
    drop(ws);
    assert_eq!(hub.terminate().code(), Some(0));
    let hub = TestHub::start(dir.path(), &[]);
    let mut ws = panel_connect(&hub);
    let second = next_of(&mut ws, "welcome")["hub"]["transcript_epoch"].clone();
    assert!(first.is_string() && second.is_string());
    assert_ne!(first, second);
}

#[test]
fn worker_actions_and_logs_over_the_socket() {
    let dir = TempDir::new("panel-worker");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "w");
    let mut ws = panel(&hub);
    send_json(
        &mut ws,
        json!({"v": 1, "type": "subscribe", "session": "w"}),
    );
    next_of(&mut ws, "subscribed");
    send_json(
        &mut ws,
        json!({"v": 1, "type": "worker", "session": "w", "action": "start"}),
    );
    // The process notification comes first, then the action's reply.
    let running = ws_read_until(&mut ws, |v| v["type"] == "process");
    assert_eq!(running["process"]["state"], "running");
    let accepted = next_of(&mut ws, "accepted");
    assert_eq!(accepted["action"], "start");
    assert_eq!(accepted["result"]["ok"], true);
    wait_session(&hub, "w", |s| s["identity"]["state"] == "live");
    send_json(
        &mut ws,
        json!({"v": 1, "type": "logs", "session": "w", "limit": 10}),
    );
    let logs = next_of(&mut ws, "logs");
    assert!(logs["lines"].is_array());
    send_json(
        &mut ws,
        json!({"v": 1, "type": "status_snapshot", "session": "w"}),
    );
    let snap = next_of(&mut ws, "snapshot");
    assert_eq!(snap["session"]["session_id"], "w");
    send_json(
        &mut ws,
        json!({"v": 1, "type": "worker", "session": "w", "action": "start"}),
    );
    let refused = next_of(&mut ws, "error");
    assert_eq!(refused["error"], "worker_action_failed");
    send_json(
        &mut ws,
        json!({"v": 1, "type": "worker", "session": "w", "action": "stop"}),
    );
    let stopped = ws_read_until(&mut ws, |v| {
        v["type"] == "accepted" && v["action"] == "stop"
    });
    assert_eq!(stopped["result"]["how"], "shutdown-signal");
}

#[test]
fn welcome_shares_512_kib_across_all_approval_previews() {
    let dir = TempDir::new("panel-share");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "many");
    let mut worker = worker_events(&hub, "many");
    send_text(&mut worker, envelope("many", "w", 1, "ready", json!({})));
    wait_session(&hub, "many", |s| s["identity"]["state"] == "live");
    let mut prompts = Vec::new();
    for i in 0..12 {
        let mut ws = worker_confirm(&hub, "many");
        let request = json!({"type": "confirmation_request", "data": {
            "worker_id": "w", "session_id": "many", "run_id": "r", "confirmation_id": format!("p{i}"),
            "call": {"id": "c", "name": "write", "type": "serial_write", "security": "require_confirm",
                     "arguments": {"small": i, "content": "z".repeat(100 * 1024)}},
        }});
        send_text(&mut ws, request.to_string());
        prompts.push(ws);
    }
    wait_session(&hub, "many", |s| {
        s["confirmations"].as_array().unwrap().len() == 12
    });
    let mut ws = panel_connect(&hub);
    let welcome = next_of(&mut ws, "welcome");
    let open = welcome["sessions"][0]["confirmations"].as_array().unwrap();
    assert_eq!(open.len(), 12);
    let total: usize = open
        .iter()
        .map(|p| p["call"]["arguments"].to_string().len())
        .sum();
    assert!(total <= 512 * 1024, "previews total {total} bytes");
    for p in open {
        assert_eq!(p["arguments_truncated"], true);
        assert!(p["confirmation_id"].is_string() && p["state"] == "awaiting-decision");
        assert!(
            p["call"]["arguments"]["small"].as_u64().is_some(),
            "small values kept"
        );
    }
    // A single prompt's own description still gets up to 64 KiB.
    let single = hub.get("/api/sessions/many").json()["session"]["confirmations"][0]["call"]
        ["arguments"]
        .to_string()
        .len();
    assert!(single > total / 12);
    drop(prompts);
}

#[test]
fn a_held_prompt_becoming_decidable_is_announced_to_panels() {
    let dir = TempDir::new("panel-hold");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "h");
    let mut ws = panel(&hub);
    // The confirmation arrives before any event connection names a worker.
    let mut prompt = worker_confirm(&hub, "h");
    let request = json!({"type": "confirmation_request", "data": {
        "worker_id": "w", "session_id": "h", "run_id": "r", "confirmation_id": "held",
        "call": {"id": "c", "name": "x", "type": "read_only", "security": "require_confirm", "arguments": {}},
    }});
    send_text(&mut prompt, request.to_string());
    let held = ws_read_until(&mut ws, |v| v["type"] == "confirmation");
    assert_eq!(held["confirmation"]["state"], "awaiting-identity");
    let mut worker = worker_events(&hub, "h");
    send_text(&mut worker, envelope("h", "w", 1, "ready", json!({})));
    let ready = ws_read_until(&mut ws, |v| {
        v["type"] == "confirmation" && v["confirmation"]["state"] == "awaiting-decision"
    });
    assert_eq!(ready["confirmation"]["verified"], true);
    // The session list entry follows, with the worker's capabilities.
    ws_read_until(&mut ws, |v| {
        v["type"] == "session" && v["session"]["identity"]["state"] == "live"
    });
    drop(prompt);
    let closed = ws_read_until(&mut ws, |v| {
        v["type"] == "confirmation" && v["open"] == false
    });
    assert_eq!(closed["confirmation"]["confirmation_id"], "held");
}
