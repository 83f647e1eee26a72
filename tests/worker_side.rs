//! The hub's half of the worker protocol against real sockets: a raw
//! WebSocket client for protocol edge cases, and the built-in worker for
//! complete runs with confirmations.

use std::time::Duration;

use serde_json::json;

use crate::util::*;

#[test]
fn upgrade_checks_session_and_token() {
    let dir = TempDir::new("wsauth");
    let hub = hub_with(&dir, json!({"panel": {"token": "panel-secret"}}));
    create_session_with_token(&hub, "w", "panel-secret");
    let token = worker_token(&hub.data_dir, "w");
    assert_eq!(ws_refusal(hub.addr, "/agent/nope/events?token=x"), 404);
    assert_eq!(ws_refusal(hub.addr, "/agent/bad%2Fid/events?token=x"), 404);
    assert_eq!(ws_refusal(hub.addr, "/agent/w/events"), 401);
    assert_eq!(ws_refusal(hub.addr, "/agent/w/events?token=wrong"), 401);
    assert_eq!(
        ws_refusal(hub.addr, "/agent/w/events?token=panel-secret"),
        401
    );
    assert_eq!(
        ws_refusal(hub.addr, "/agent/w/confirm?token=panel-secret"),
        401
    );
    // Plain HTTP on a worker route is 404.
    assert_eq!(
        hub.get(&format!("/agent/w/events?token={token}")).status,
        404
    );
    // The worker token never opens the panel API.
    assert_eq!(hub.get(&format!("/api/sessions?token={token}")).status, 401);
    let bearer = format!("Bearer {token}");
    assert_eq!(
        hub.request("GET", "/api/sessions", &[("Authorization", &bearer)], b"")
            .status,
        401
    );
    // The right token upgrades, and the hub asks for status at once.
    let mut ws = ws_connect(hub.addr, &format!("/agent/w/events?token={token}")).unwrap();
    let first = ws_read_until(&mut ws, |_| true);
    assert_eq!(
        first,
        json!({"type": "signal", "data": {"operation": "status"}})
    );
}

#[test]
fn identity_stats_and_unknown_events() {
    let dir = TempDir::new("identity");
    let hub = hub_with(&dir, json!({}));
    create_session(&hub, "s");
    let mut ws = worker_events(&hub, "s");
    send_text(
        &mut ws,
        envelope(
            "s",
            "w1",
            1,
            "ready",
            json!({"capabilities": ["session-history"]}),
        ),
    );
    send_text(
        &mut ws,
        envelope("s", "w1", 2, "brand_new_event", json!({"x": 1})),
    );
    send_text(
        &mut ws,
        envelope("s", "w1", 2, "status", json!({"active": false})),
    );
    send_text(
        &mut ws,
        envelope(
            "s",
            "w1",
            5,
            "status",
            json!({"active": false, "capabilities": ["context-compact"]}),
        ),
    );
    let s = wait_session(&hub, "s", |s| s["stats"]["events"] == 4);
    assert_eq!(s["connected"], true);
    assert_eq!(s["identity"]["state"], "live");
    assert_eq!(s["identity"]["worker_id"], "w1");
    assert_eq!(s["stats"]["duplicates"], 1);
    assert_eq!(s["stats"]["gaps"], 1);
    assert_eq!(s["worker_capabilities"], json!(["context-compact"]));
    let unknown = wait_event(&hub, "s", |e| e["event"] == "brand_new_event");
    assert_eq!(unknown["known"], false);
    assert_eq!(unknown["data"], json!({"x": 1}));
    assert!(unknown["hub_sequence"].as_u64().unwrap() >= 1);
    assert!(unknown["raw"].is_object());
    // Lossless u64 sequence.
    send_text(&mut ws, envelope("s", "w1", u64::MAX, "status", json!({})));
    let e = wait_event(&hub, "s", |e| e["sequence"] == json!(u64::MAX));
    assert_eq!(e["sequence"].as_u64(), Some(u64::MAX));
    // A new worker process is a new incarnation.
    send_text(&mut ws, envelope("s", "w2", 1, "ready", json!({})));
    let s = wait_session(&hub, "s", |s| s["identity"]["worker_id"] == "w2");
    assert_eq!(s["stats"]["incarnations"], 1);
    drop(ws);
    let s = wait_session(&hub, "s", |s| s["connected"] == false);
    assert_eq!(s["identity"]["state"], "stale");
    assert_eq!(s["worker_capabilities"], json!(null));
}

#[test]
fn twenty_protocol_errors_close_1008() {
    let dir = TempDir::new("protoerr");
    let hub = hub_with(&dir, json!({}));
    create_session(&hub, "p");
    let mut ws = worker_events(&hub, "p");
    for i in 0..19 {
        let bad = match i % 4 {
            0 => "not json".to_string(),
            1 => "[1,2]".to_string(),
            2 => envelope("other", "w", 1, "status", json!({})),
            _ => json!({"type": "event", "event": "status", "session_id": "p"}).to_string(),
        };
        send_text(&mut ws, bad);
    }
    ws.send(tungstenite::Message::Binary(vec![1u8, 2, 3].into()))
        .unwrap();
    assert_eq!(ws_close_code(&mut ws), Some(1008));
    let s = wait_session(&hub, "p", |s| s["connected"] == false);
    assert_eq!(s["stats"]["protocolErrors"], 20);
}

#[test]
fn missing_fields_are_issues_not_errors() {
    let dir = TempDir::new("issues");
    let hub = hub_with(&dir, json!({}));
    create_session(&hub, "i");
    let mut ws = worker_events(&hub, "i");
    let frame =
        json!({"type": "event", "event": "model_response", "session_id": "i", "worker_id": "w"});
    send_text(&mut ws, frame.to_string());
    let e = wait_event(&hub, "i", |e| e["event"] == "model_response");
    let issues = e["issues"].as_array().unwrap();
    assert!(issues.len() >= 3, "{issues:?}");
    let s = hub.get("/api/sessions/i").json()["session"].clone();
    assert_eq!(s["stats"]["protocolErrors"], 0);
}

#[test]
fn a_second_connection_supersedes_the_first_with_4001() {
    let dir = TempDir::new("supersede");
    let hub = hub_with(&dir, json!({}));
    create_session(&hub, "x");
    let mut first = worker_events(&hub, "x");
    ws_read_until(&mut first, |v| v["type"] == "signal");
    let mut second = worker_events(&hub, "x");
    assert_eq!(ws_close_code(&mut first), Some(4001));
    ws_read_until(&mut second, |v| v["type"] == "signal");
    send_text(&mut second, envelope("x", "w", 1, "status", json!({})));
    let s = wait_session(&hub, "x", |s| s["stats"]["events"] == 1);
    assert_eq!(s["connected"], true);
    assert!(hub.log_text().contains("supersedes"));
}

#[test]
fn oversized_frames_close_1009() {
    let dir = TempDir::new("oversize");
    let hub = hub_with(&dir, json!({"limits": {"maxMessageBytes": 4096}}));
    create_session(&hub, "o");
    let mut ws = worker_events(&hub, "o");
    let big = envelope("o", "w", 1, "status", json!({"pad": "x".repeat(5000)}));
    let _ = ws.send(tungstenite::Message::Text(big.into()));
    assert_eq!(ws_close_code(&mut ws), Some(1009));
}

#[test]
fn a_worker_that_never_answers_pings_is_terminated() {
    let dir = TempDir::new("ping");
    let hub = hub_with(&dir, json!({"limits": {"pingIntervalMs": 200}}));
    create_session(&hub, "q");
    let ws = worker_events(&hub, "q");
    wait_session(&hub, "q", |s| s["connected"] == true);
    // Never reading means never answering the hub's pings.
    wait_session(&hub, "q", |s| s["connected"] == false);
    drop(ws);
}

#[test]
fn requests_become_unknown_when_the_worker_drops_before_admission() {
    let dir = TempDir::new("unknownreq");
    let hub = hub_with(&dir, json!({}));
    create_session(&hub, "u");
    let refused = post(
        &hub,
        "/api/sessions/u/input",
        json!({"content": [{"type": "text", "modality": "text", "raw": "hi"}]}),
    );
    assert_eq!(
        (refused.status, refused.json()["error"].clone()),
        (409, json!("input_not_sent"))
    );
    let mut ws = worker_events(&hub, "u");
    wait_session(&hub, "u", |s| s["connected"] == true);
    let invalid = post(
        &hub,
        "/api/sessions/u/input",
        json!({"content": [{"type": "image", "raw": "x"}]}),
    );
    assert_eq!(
        (invalid.status, invalid.json()["error"].clone()),
        (400, json!("input_not_sent"))
    );
    let res = post(
        &hub,
        "/api/sessions/u/input",
        json!({"request_id": "req-1", "content": [{"type": "text", "modality": "text", "raw": "hi"}]}),
    );
    assert_eq!(res.status, 202, "{}", res.text());
    assert_eq!(res.json()["request_id"], "req-1");
    let payload = ws_read_until(&mut ws, |v| v["type"] == "payload");
    assert_eq!(payload["data"]["request_id"], "req-1");
    assert_eq!(payload["data"]["operation"], "message");
    let s = hub.get("/api/sessions/u").json()["session"].clone();
    assert_eq!(s["requests"][0]["state"], "sent");
    drop(ws);
    let s = wait_session(&hub, "u", |s| s["requests"][0]["state"] == "unknown");
    assert_eq!(s["requests"][0]["request_id"], "req-1");
}

#[test]
fn transcript_is_bounded_by_count_and_bytes() {
    let dir = TempDir::new("ring");
    let hub = hub_with(
        &dir,
        json!({"limits": {"transcriptEvents": 5, "transcriptBytes": 1000000}}),
    );
    create_session(&hub, "c");
    let mut ws = worker_events(&hub, "c");
    for seq in 1..=12 {
        send_text(
            &mut ws,
            envelope("c", "w", seq, "status", json!({"n": seq})),
        );
    }
    wait_session(&hub, "c", |s| s["stats"]["events"] == 12);
    let page = hub.get("/api/sessions/c/events").json();
    assert_eq!(page["latest"], 12);
    let seqs: Vec<u64> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["hub_sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, vec![8, 9, 10, 11, 12]);
    let page = hub.get("/api/sessions/c/events?since=10&limit=1").json();
    assert_eq!(page["events"].as_array().unwrap().len(), 1);
    assert_eq!(page["events"][0]["hub_sequence"], 11);
    assert_eq!(hub.get("/api/sessions/c/events?since=x").status, 400);

    let dir2 = TempDir::new("ringbytes");
    let hub2 = hub_with(
        &dir2,
        json!({"limits": {"transcriptEvents": 1000, "transcriptBytes": 4000}}),
    );
    create_session(&hub2, "b");
    let mut ws2 = worker_events(&hub2, "b");
    for seq in 1..=20 {
        send_text(
            &mut ws2,
            envelope("b", "w", seq, "status", json!({"pad": "y".repeat(500)})),
        );
    }
    wait_session(&hub2, "b", |s| s["stats"]["events"] == 20);
    let page = hub2.get("/api/sessions/b/events").json();
    let events = page["events"].as_array().unwrap();
    let bytes: usize = events.iter().map(|e| e.to_string().len()).sum();
    assert!(bytes <= 4000, "{bytes} bytes retained");
    assert!(events.len() < 20 && !events.is_empty());
    assert_eq!(events.last().unwrap()["hub_sequence"], 20);
}

#[test]
fn history_replies_are_never_retained() {
    let dir = TempDir::new("transient");
    let hub = hub_with(&dir, json!({}));
    create_session(&hub, "h");
    let mut ws = worker_events(&hub, "h");
    send_text(
        &mut ws,
        envelope("h", "w", 1, "history", json!({"turns": []})),
    );
    send_text(&mut ws, envelope("h", "w", 2, "status", json!({})));
    wait_session(&hub, "h", |s| s["stats"]["events"] == 2);
    let page = hub.get("/api/sessions/h/events").json();
    let names: Vec<&str> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["status"]);
}

#[test]
fn events_file_reports_omissions_when_its_writer_stalls() {
    let dir = TempDir::new("stall");
    let hub = hub_with(&dir, json!({}));
    create_session(&hub, "f");
    let fifo = dir.path().join("sessions/f/events.jsonl");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo on a path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let mut ws = worker_events(&hub, "f");
    // Nobody reads the FIFO: the writer blocks, ingestion must not.
    for seq in 1..=40 {
        send_text(
            &mut ws,
            envelope(
                "f",
                "w",
                seq,
                "model_response",
                json!({"pad": "z".repeat(64 * 1024)}),
            ),
        );
    }
    wait_session(&hub, "f", |s| s["stats"]["events"] == 40);
    assert_eq!(hub.get("/api/sessions/f/events").json()["latest"], 40);
    // Now drain the FIFO line by line and send small events until the
    // omission record and the record after it have arrived.
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        let file = std::fs::File::open(&fifo).unwrap();
        for line in std::io::BufReader::new(file).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines: Vec<serde_json::Value> = Vec::new();
    let mut seq = 41;
    let end = std::time::Instant::now() + DEADLINE;
    let omission = loop {
        assert!(
            std::time::Instant::now() < end,
            "no omission record; got {} lines",
            lines.len()
        );
        send_text(
            &mut ws,
            envelope("f", "w", seq, "status", json!({"after": seq})),
        );
        seq += 1;
        while let Ok(line) = rx.recv_timeout(Duration::from_millis(100)) {
            lines.push(serde_json::from_str(&line).unwrap());
        }
        if let Some(pos) = lines.iter().position(|l| l["type"] == "hub_log_omission") {
            if pos + 1 < lines.len() {
                break pos;
            }
        }
    };
    assert!(lines[omission]["dropped_records"].as_u64().unwrap() > 0);
    assert!(lines[omission]["dropped_bytes"].as_u64().unwrap() > 64 * 1024);
    assert!(lines[omission + 1]["data"]["after"].as_u64().unwrap() >= 41);
    // Records before the omission arrived whole and in order.
    let before: Vec<u64> = lines[..omission]
        .iter()
        .map(|l| l["sequence"].as_u64().unwrap())
        .collect();
    assert!(
        !before.is_empty() && before.windows(2).all(|w| w[0] + 1 == w[1]),
        "{before:?}"
    );
}
