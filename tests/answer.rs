//! `POST /api/sessions/:id/answer`: complete-answer pages from the built-in
//! worker, argument checks, worker refusals, and the correlation, bounds,
//! connection-change and deadline rules against a hand-driven worker.

use std::net::SocketAddr;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::util::*;

const TOKEN: &str = "answer-secret";

/// One answer request on its own connection (usable from any thread).
fn answer_at(addr: SocketAddr, session: &str, body: &str) -> Response {
    let path = format!("/api/sessions/{session}/answer?token={TOKEN}");
    request_at(addr, "POST", &path, body.as_bytes())
}

fn answer(hub: &TestHub, session: &str, body: Value) -> Response {
    answer_at(hub.addr, session, &body.to_string())
}

fn answer_in_background(hub: &TestHub, session: &str, body: Value) -> JoinHandle<Response> {
    let (addr, session, body) = (hub.addr, session.to_string(), body.to_string());
    std::thread::spawn(move || answer_at(addr, &session, &body))
}

fn error_of(res: &Response) -> (u16, String, String) {
    let body = res.json();
    (
        res.status,
        body["error"].as_str().unwrap_or("").to_string(),
        body["reason"].as_str().unwrap_or("").to_string(),
    )
}

fn session(hub: &TestHub, id: &str) -> Value {
    hub.get(&format!("/api/sessions/{id}?token={TOKEN}")).json()["session"].clone()
}

fn model_response(hub: &TestHub, id: &str) -> Value {
    let events = format!("/api/sessions/{id}/events?token={TOKEN}");
    wait_event_at(hub, &events, |e| e["event"] == "model_response")
}

#[test]
fn pages_of_a_real_answer_from_the_built_in_worker() {
    let dir = TempDir::new("answer-pages");
    let hub = TestHub::start(dir.path(), &["--panel-token", TOKEN]);
    let meta = hub.get("/api/meta").json();
    assert!(meta["capabilities"]
        .as_array()
        .unwrap()
        .contains(&json!("answer-pages")));
    create_session_with_token(&hub, "big", TOKEN);
    let mut worker = KillOnDrop(spawn_mock_worker(&hub, "big", "mock-flash"));
    let ok = wait_until(DEADLINE, || {
        let s = session(&hub, "big");
        s["identity"]["state"] == "live"
            && s["worker_capabilities"]
                .as_array()
                .is_some_and(|c| c.contains(&json!("answer-pages")))
    });
    assert!(ok, "the worker never advertised answer-pages");
    let res = post(
        &hub,
        &format!("/api/sessions/big/input?token={TOKEN}"),
        json!({"content": [{"type": "text", "modality": "text", "raw": "/big 40000"}]}),
    );
    assert_eq!(res.status, 202, "{}", res.text());
    let response = model_response(&hub, "big");
    let source = response["data"]["answer_source"].clone();
    assert!(source.is_object(), "{response:#}");
    let requests_before = session(&hub, "big")["requests"].clone();

    // The route needs the panel token like every other API route.
    let bare = hub.request(
        "POST",
        "/api/sessions/big/answer",
        &[],
        json!({"source": source}).to_string().as_bytes(),
    );
    assert_eq!(bare.status, 401);

    // Page 1: 32 KiB from offset 0.
    let res = answer(
        &hub,
        "big",
        json!({"source": source, "part": 0, "offset": 0}),
    );
    assert_eq!(res.status, 200, "{}", res.text());
    let first = res.json();
    assert_eq!(first["source"], source);
    assert!(first["request_id"].as_str().unwrap().starts_with("q-"));
    assert_eq!(first["bytes"], 40000);
    assert_eq!(first["raw"].as_str().unwrap().len(), 32 * 1024);
    assert_eq!(first["next_offset"], 32 * 1024);
    assert_eq!(first["done"], false);
    // Page 2 follows the cursor to the end.
    let res = answer(
        &hub,
        "big",
        json!({"source": source, "part": first["next_part"], "offset": first["next_offset"]}),
    );
    assert_eq!(res.status, 200, "{}", res.text());
    let second = res.json();
    assert_eq!(second["raw"].as_str().unwrap().len(), 40000 - 32 * 1024);
    assert_eq!(second["done"], true);
    // Every byte of the model response, in order.
    let whole = format!(
        "{}{}",
        first["raw"].as_str().unwrap(),
        second["raw"].as_str().unwrap()
    );
    let expected = response["data"]["content"][0]["raw"].as_str().unwrap();
    assert_eq!(whole, expected);

    // Queries are not session requests and are never retained.
    assert_eq!(session(&hub, "big")["requests"], requests_before);
    let events = hub
        .get(&format!("/api/sessions/big/events?token={TOKEN}"))
        .json();
    assert!(!events.to_string().contains("\"event\":\"answer\""));

    // Malformed arguments: 400 before anything reaches the worker.
    let mut missing = source.clone();
    missing.as_object_mut().unwrap().remove("fingerprint");
    let mut extra = source.clone();
    extra["more"] = json!(1);
    let mut negative = source.clone();
    negative["turn"] = json!(-1);
    let mut empty_worker = source.clone();
    empty_worker["worker_id"] = json!("");
    for body in [
        json!({}),
        json!({"source": missing}),
        json!({"source": extra}),
        json!({"source": negative}),
        json!({"source": empty_worker}),
        json!({"source": source, "part": -1}),
        json!({"source": source, "offset": "0"}),
        json!({"source": source, "unknown": true}),
        json!([source]),
    ] {
        let res = answer(&hub, "big", body.clone());
        assert_eq!(res.status, 400, "{body}: {}", res.text());
        assert_eq!(res.json()["error"], "invalid_arguments", "{body}");
    }
    let res = answer_at(hub.addr, "big", "{not json");
    assert_eq!(
        (res.status, res.json()["error"].clone()),
        (400, json!("bad_json"))
    );
    let get = hub.get(&format!("/api/sessions/big/answer?token={TOKEN}"));
    assert_eq!(get.status, 405);
    let res = answer(&hub, "nope", json!({"source": source}));
    assert_eq!(error_of(&res).0, 404);

    // The worker's refusals: a wrong fingerprint, an offset past the end.
    let mut wrong = source.clone();
    wrong["fingerprint"] = json!("0".repeat(64));
    let res = answer(&hub, "big", json!({"source": wrong}));
    let (status, code, reason) = error_of(&res);
    assert_eq!(
        (status, code.as_str(), reason.as_str()),
        (409, "answer_unavailable", "worker_error"),
        "{}",
        res.text()
    );
    assert!(res.json()["worker_error"]["message"]
        .as_str()
        .unwrap()
        .contains("no longer available"));
    let res = answer(&hub, "big", json!({"source": source, "offset": 40001}));
    assert_eq!(
        error_of(&res),
        (409, "answer_unavailable".into(), "worker_error".into()),
        "{}",
        res.text()
    );
    let res = answer(&hub, "big", json!({"source": source, "part": 1}));
    assert_eq!(error_of(&res).1, "answer_unavailable");

    // No worker connected: 409, and nothing is pending afterwards.
    let _ = worker.0.kill();
    let _ = worker.0.wait();
    let ok = wait_until(DEADLINE, || session(&hub, "big")["connected"] == false);
    assert!(ok, "the worker never disconnected");
    let res = answer(&hub, "big", json!({"source": source}));
    assert_eq!(
        error_of(&res),
        (409, "answer_unavailable".into(), "not_connected".into()),
        "{}",
        res.text()
    );
}

/// A hand-driven worker on `session`'s event route that says `ready` with
/// `capabilities`; returns once the hub shows its identity live.
fn fake_worker(hub: &TestHub, session: &str, worker: &str, capabilities: Value) -> Ws {
    let mut ws = worker_events(hub, session);
    ws_read_until(&mut ws, |v| v["type"] == "signal");
    let status = json!({"active": false, "capabilities": capabilities});
    send_text(&mut ws, envelope(session, worker, 1, "ready", status));
    let ok = wait_until(DEADLINE, || {
        let s = self::session(hub, session);
        s["identity"]["state"] == "live" && s["identity"]["worker_id"] == worker
    });
    assert!(ok, "fake worker never became live");
    ws
}

fn a_source(worker: &str) -> Value {
    json!({"worker_id": worker, "turn": 0, "step": 0, "commit_sequence": 7, "fingerprint": "f"})
}

/// Reads the next payload the hub writes to the fake worker.
fn next_payload(ws: &mut Ws) -> Value {
    ws_read_until(ws, |v| v["type"] == "payload")["data"].clone()
}

#[test]
fn replies_are_correlated_bounded_and_failed_on_connection_change() {
    let dir = TempDir::new("answer-correlation");
    let hub = TestHub::start(dir.path(), &["--panel-token", TOKEN]);
    create_session_with_token(&hub, "fw", TOKEN);

    // A worker without answer-pages is refused before anything is sent.
    let mut ws = fake_worker(&hub, "fw", "w-1", json!(["session-history"]));
    let res = answer(&hub, "fw", json!({"source": a_source("w-1")}));
    assert_eq!(
        error_of(&res),
        (409, "answer_unavailable".into(), "unsupported".into())
    );
    send_text(
        &mut ws,
        envelope(
            "fw",
            "w-1",
            2,
            "status",
            json!({"capabilities": ["answer-pages"]}),
        ),
    );
    let ok = wait_until(DEADLINE, || {
        session(&hub, "fw")["worker_capabilities"] == json!(["answer-pages"])
    });
    assert!(ok);

    // The query reaches the worker with a hub-generated id and the exact
    // arguments; only the matching reply satisfies it.
    let waiter = answer_in_background(
        &hub,
        "fw",
        json!({"source": a_source("w-1"), "part": 2, "offset": 9}),
    );
    let query = next_payload(&mut ws);
    assert_eq!(query["operation"], "answer");
    assert_eq!(query["source"], a_source("w-1"));
    assert_eq!(
        (query["part"].clone(), query["offset"].clone()),
        (json!(2), json!(9))
    );
    let id = query["request_id"].as_str().unwrap().to_string();
    assert!(id.starts_with("q-"), "{id}");
    // Another request id and the wrong event kind are not it.
    send_text(
        &mut ws,
        envelope(
            "fw",
            "w-1",
            3,
            "answer",
            json!({"request_id": "q-other", "raw": "no"}),
        ),
    );
    send_text(
        &mut ws,
        envelope(
            "fw",
            "w-1",
            4,
            "history",
            json!({"request_id": id, "raw": "no"}),
        ),
    );
    send_text(
        &mut ws,
        envelope(
            "fw",
            "w-1",
            5,
            "answer",
            json!({"request_id": id, "raw": "yes"}),
        ),
    );
    let res = waiter.join().unwrap();
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(res.json(), json!({"request_id": id, "raw": "yes"}));

    // A worker refusal carries its code and message.
    let waiter = answer_in_background(&hub, "fw", json!({"source": a_source("w-1")}));
    let id = next_payload(&mut ws)["request_id"].clone();
    send_text(
        &mut ws,
        envelope(
            "fw",
            "w-1",
            6,
            "answer_error",
            json!({"request_id": id, "code": "query_queue_full", "message": "try later"}),
        ),
    );
    let res = waiter.join().unwrap();
    assert_eq!(
        error_of(&res),
        (409, "answer_unavailable".into(), "worker_error".into())
    );
    assert_eq!(
        res.json()["worker_error"],
        json!({"code": "query_queue_full", "message": "try later"})
    );

    // Two pending per session; the third is refused with 429.
    let first = answer_in_background(&hub, "fw", json!({"source": a_source("w-1")}));
    let second = answer_in_background(&hub, "fw", json!({"source": a_source("w-1")}));
    let ids = [next_payload(&mut ws), next_payload(&mut ws)];
    let res = answer(&hub, "fw", json!({"source": a_source("w-1")}));
    assert_eq!(
        error_of(&res),
        (429, "too_many_queries".into(), "too_many_queries".into()),
        "{}",
        res.text()
    );
    assert_eq!(res.header("Retry-After"), Some("1"));

    // A new connection supersedes the old one: both queries fail at once,
    // and a reply to them on the new connection satisfies nothing.
    let started = Instant::now();
    let mut ws2 = worker_events(&hub, "fw");
    for waiter in [first, second] {
        let res = waiter.join().unwrap();
        assert_eq!(
            error_of(&res),
            (409, "answer_unavailable".into(), "disconnected".into()),
            "{}",
            res.text()
        );
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    ws_read_until(&mut ws2, |v| v["type"] == "signal");
    let status = json!({"capabilities": ["answer-pages"]});
    send_text(&mut ws2, envelope("fw", "w-1", 7, "status", status));
    for (seq, old) in ids.iter().enumerate() {
        send_text(
            &mut ws2,
            envelope(
                "fw",
                "w-1",
                8 + seq as u64,
                "answer",
                json!({"request_id": old["request_id"], "raw": "late"}),
            ),
        );
    }
    // The slots were released: the session takes two new queries.
    let ok = wait_until(DEADLINE, || {
        session(&hub, "fw")["identity"]["state"] == "live"
    });
    assert!(ok);
    let waiter = answer_in_background(&hub, "fw", json!({"source": a_source("w-1")}));
    let id = next_payload(&mut ws2)["request_id"].clone();
    send_text(
        &mut ws2,
        envelope(
            "fw",
            "w-1",
            20,
            "answer",
            json!({"request_id": id, "raw": "new"}),
        ),
    );
    let res = waiter.join().unwrap();
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(res.json()["raw"], "new");

    // The worker closing its connection fails a pending query at once.
    let waiter = answer_in_background(&hub, "fw", json!({"source": a_source("w-1")}));
    next_payload(&mut ws2);
    let started = Instant::now();
    ws2.close(None).unwrap();
    let _ = ws2.flush();
    let res = waiter.join().unwrap();
    assert_eq!(error_of(&res).2, "disconnected", "{}", res.text());
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn an_unanswered_query_ends_at_the_ten_second_deadline() {
    let dir = TempDir::new("answer-deadline");
    let hub = TestHub::start(dir.path(), &["--panel-token", TOKEN]);
    create_session_with_token(&hub, "slow", TOKEN);
    let mut ws = fake_worker(&hub, "slow", "w-slow", json!(["answer-pages"]));
    let waiter = answer_in_background(&hub, "slow", json!({"source": a_source("w-slow")}));
    next_payload(&mut ws);
    let started = Instant::now();
    let res = waiter.join().unwrap();
    let waited = started.elapsed();
    assert_eq!(
        error_of(&res),
        (409, "answer_unavailable".into(), "timeout".into()),
        "{}",
        res.text()
    );
    assert!(
        waited >= Duration::from_secs(9) && waited < Duration::from_secs(15),
        "{waited:?}"
    );
    // The slot was released: a new query is sent.
    let waiter = answer_in_background(&hub, "slow", json!({"source": a_source("w-slow")}));
    let id = next_payload(&mut ws)["request_id"].clone();
    send_text(
        &mut ws,
        envelope("slow", "w-slow", 2, "answer", json!({"request_id": id})),
    );
    assert_eq!(waiter.join().unwrap().status, 200);
}

/// Writes one answer request on a raw connection and leaves it waiting.
fn answer_pending_on_raw_socket(hub: &TestHub, session: &str, body: &Value) -> std::net::TcpStream {
    use std::io::Write;
    let body = body.to_string();
    let mut s = std::net::TcpStream::connect(hub.addr).unwrap();
    let head = format!(
        "POST /api/sessions/{session}/answer?token={TOKEN} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        hub.addr,
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body.as_bytes()).unwrap();
    s
}

#[test]
fn a_client_that_goes_away_cancels_its_query() {
    let dir = TempDir::new("answer-hangup");
    let hub = TestHub::start(dir.path(), &["--panel-token", TOKEN]);
    create_session_with_token(&hub, "gone", TOKEN);
    let mut ws = fake_worker(&hub, "gone", "w-gone", json!(["answer-pages"]));
    // Two queries fill the session's two slots; their clients then leave.
    let clients = [
        answer_pending_on_raw_socket(&hub, "gone", &json!({"source": a_source("w-gone")})),
        answer_pending_on_raw_socket(&hub, "gone", &json!({"source": a_source("w-gone")})),
    ];
    let old = [next_payload(&mut ws), next_payload(&mut ws)];
    let res = answer(&hub, "gone", json!({"source": a_source("w-gone")}));
    assert_eq!(error_of(&res).0, 429, "both slots are held: {}", res.text());
    let left = Instant::now();
    drop(clients);
    // The slots come free long before the ten-second deadline: a new
    // query is sent to the worker and answered.
    let waiter = loop {
        let waiter = answer_in_background(&hub, "gone", json!({"source": a_source("w-gone")}));
        let payload = poll_until(Duration::from_secs(2), || {
            ws.get_mut()
                .set_read_timeout(Some(Duration::from_millis(50)))
                .ok()?;
            match ws.read() {
                Ok(tungstenite::Message::Text(t)) => {
                    let v: Value = serde_json::from_str(t.as_str()).ok()?;
                    (v["type"] == "payload").then(|| v["data"].clone())
                }
                _ => None,
            }
        });
        if let Some(payload) = payload {
            break (waiter, payload);
        }
        let res = waiter.join().unwrap();
        assert_eq!(error_of(&res).0, 429, "{}", res.text());
        assert!(
            left.elapsed() < Duration::from_secs(5),
            "the queries of the clients that left were not cancelled"
        );
    };
    assert!(
        left.elapsed() < Duration::from_secs(5),
        "{:?}",
        left.elapsed()
    );
    let (waiter, payload) = waiter;
    ws.get_mut().set_read_timeout(None).unwrap();
    assert_ne!(payload["request_id"], old[0]["request_id"]);
    let id = payload["request_id"].clone();
    send_text(
        &mut ws,
        envelope(
            "gone",
            "w-gone",
            2,
            "answer",
            json!({"request_id": id, "raw": "after"}),
        ),
    );
    let res = waiter.join().unwrap();
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(res.json()["raw"], "after");
    // Late replies to the cancelled queries satisfy nothing and are not kept.
    for (seq, q) in old.iter().enumerate() {
        send_text(
            &mut ws,
            envelope(
                "gone",
                "w-gone",
                3 + seq as u64,
                "answer",
                json!({"request_id": q["request_id"], "raw": "late"}),
            ),
        );
    }
    let events = hub
        .get(&format!("/api/sessions/gone/events?token={TOKEN}"))
        .json();
    assert!(!events.to_string().contains("\"late\""), "{events}");
}

#[test]
fn an_answer_too_large_for_the_transcript_keeps_its_source() {
    let dir = TempDir::new("answer-omitted");
    let hub = hub_with_args(
        &dir,
        json!({"limits": {"transcriptBytes": 20000}}),
        &["--panel-token", TOKEN],
    );
    create_session_with_token(&hub, "om", TOKEN);
    let _worker = KillOnDrop(spawn_mock_worker(&hub, "om", "mock-flash"));
    let ok = wait_until(DEADLINE, || {
        let s = session(&hub, "om");
        s["identity"]["state"] == "live"
            && s["worker_capabilities"]
                .as_array()
                .is_some_and(|c| c.contains(&json!("answer-pages")))
    });
    assert!(ok, "the worker never advertised answer-pages");
    let res = post(
        &hub,
        &format!("/api/sessions/om/input?token={TOKEN}"),
        json!({"content": [{"type": "text", "modality": "text", "raw": "/big 50000"}]}),
    );
    assert_eq!(res.status, 202, "{}", res.text());
    // The response is larger than the whole transcript: an omission
    // record, with the source the worker gave.
    let record = model_response(&hub, "om");
    assert_eq!(record["display_omitted"], true, "{record:#}");
    assert_eq!(record["data"], Value::Null);
    let source = record["answer_source"].clone();
    assert_eq!(source.as_object().map(|o| o.len()), Some(5), "{record:#}");
    // An ordinary small response carries no such member.
    let res = post(
        &hub,
        &format!("/api/sessions/om/input?token={TOKEN}"),
        json!({"content": [{"type": "text", "modality": "text", "raw": "small"}]}),
    );
    assert_eq!(res.status, 202);
    let events = format!("/api/sessions/om/events?token={TOKEN}");
    let small = wait_event_at(&hub, &events, |e| {
        e["event"] == "model_response" && e["data"]["content"][0]["raw"] == "echo: small"
    });
    assert!(small.get("answer_source").is_none(), "{small:#}");
    // The kept source reads every byte of the answer back.
    let mut text = String::new();
    let (mut part, mut offset) = (json!(0), json!(0));
    loop {
        let res = answer(
            &hub,
            "om",
            json!({"source": source, "part": part, "offset": offset}),
        );
        assert_eq!(res.status, 200, "{}", res.text());
        let page = res.json();
        text.push_str(page["raw"].as_str().unwrap());
        if page["done"] == true {
            break;
        }
        (part, offset) = (page["next_part"].clone(), page["next_offset"].clone());
    }
    assert_eq!(text.len(), 50000);
    assert!(text.bytes().all(|b| b.is_ascii()));
}
