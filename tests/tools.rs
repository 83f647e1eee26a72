//! The remote-tools listener and session plans against a real hub: upgrade
//! refusals on both listeners, every close code of the one-request
//! exchange, the exchange deadline and the connection cap, shutdown, and
//! plans through raw clients and the built-in worker (identity and active
//! run checks, identical text, panel `plan` messages, `plan.json`, restart).

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::util::*;

fn tools(hub: &TestHub) -> SocketAddr {
    hub.tools_addr.expect("the hub logged its tools listener")
}

fn tool_path(hub: &TestHub, id: &str, route: &str) -> String {
    let token = worker_token(&hub.data_dir, id);
    format!("/agent/{id}/tools/{route}?token={token}")
}

fn tool_socket(hub: &TestHub, id: &str, route: &str) -> Ws {
    ws_connect(tools(hub), &tool_path(hub, id, route)).unwrap()
}

fn tool_request(session: &str, worker: &str, run: &str, arguments: Value) -> String {
    json!({"type": "tool_request", "data": {
        "worker_id": worker, "session_id": session, "run_id": run,
        "request_id": "req-1", "arguments": arguments,
    }})
    .to_string()
}

/// One complete exchange: the response, and the close code that followed.
fn call(hub: &TestHub, id: &str, route: &str, frame: String) -> (Value, Option<u16>) {
    let mut ws = tool_socket(hub, id, route);
    send_text(&mut ws, frame);
    let response = ws_read_until(&mut ws, |v| v["type"] == "tool_response");
    (response, ws_close_code(&mut ws))
}

/// A raw worker event socket, to drive identity and runs exactly.
struct RawWorker {
    ws: Ws,
    session: String,
    worker: String,
    seq: u64,
}

impl RawWorker {
    fn connect(hub: &TestHub, session: &str, worker: &str) -> RawWorker {
        RawWorker {
            ws: worker_events(hub, session),
            session: session.into(),
            worker: worker.into(),
            seq: 0,
        }
    }

    fn event(&mut self, event: &str, run: &str) {
        self.seq += 1;
        let frame = json!({
            "type": "event", "event": event, "session_id": self.session,
            "worker_id": self.worker, "request_id": "req-1", "run_id": run,
            "sequence": self.seq, "data": {},
        });
        send_text(&mut self.ws, frame.to_string());
    }
}

/// The session plan as a freshly subscribed panel sees it.
fn plan_of(hub: &TestHub, id: &str) -> Value {
    let mut ws = panel_connect(hub);
    send_json(&mut ws, json!({"v": 1, "type": "subscribe", "session": id}));
    next_of(&mut ws, "subscribed")["plan"].clone()
}

/// The JSON after `<route> succeeded: ` in a built-in worker reply.
fn reply_json(reply: &Value, prefix: &str) -> Value {
    let raw = reply["data"]["content"][0]["raw"].as_str().unwrap();
    let rest = raw
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("reply {raw:?} does not start with {prefix:?}"));
    serde_json::from_str(rest).unwrap()
}

#[test]
fn upgrade_refusals_and_routes_absent_across_listeners() {
    let dir = TempDir::new("tools-auth");
    let hub = TestHub::start(dir.path(), &["--panel-token", "panel-secret"]);
    let res = post(
        &hub,
        "/api/sessions?token=panel-secret",
        json!({"session": "t"}),
    );
    assert_eq!(res.status, 201);
    let t = tools(&hub);
    assert_ne!(t.port(), hub.addr.port());
    let token = worker_token(&hub.data_dir, "t");
    assert_eq!(ws_refusal(t, "/agent/nope/tools/plan/read?token=x"), 404);
    assert_eq!(
        ws_refusal(t, &format!("/agent/t/tools/Plan/read?token={token}")),
        404
    );
    assert_eq!(
        ws_refusal(t, &format!("/agent/t/tools/plan//read?token={token}")),
        404
    );
    assert_eq!(ws_refusal(t, &format!("/agent/t/tools?token={token}")), 404);
    assert_eq!(ws_refusal(t, "/agent/t/tools/plan/read"), 401);
    assert_eq!(ws_refusal(t, "/agent/t/tools/plan/read?token=wrong"), 401);
    assert_eq!(
        ws_refusal(t, "/agent/t/tools/plan/read?token=panel-secret"),
        401
    );
    // Plain HTTP on the tool route is 404, as is everything of the main listener.
    assert_eq!(
        request_at(
            t,
            "GET",
            &format!("/agent/t/tools/plan/read?token={token}"),
            b""
        )
        .status,
        404
    );
    for path in [
        "/",
        "/index.html",
        "/api/meta",
        "/api/sessions?token=panel-secret",
    ] {
        assert_eq!(
            request_at(t, "GET", path, b"").status,
            404,
            "{path} on the tools listener"
        );
    }
    for path in [
        "/panel/ws?token=panel-secret".to_string(),
        format!("/agent/t/events?token={token}"),
        format!("/agent/t/confirm?token={token}"),
    ] {
        assert_eq!(ws_refusal(t, &path), 404, "{path} on the tools listener");
    }
    // Tool routes do not exist on the main listener.
    let on_main = format!("/agent/t/tools/plan/read?token={token}");
    assert_eq!(ws_refusal(hub.addr, &on_main), 404);
    assert_eq!(hub.get(&on_main).status, 404);
    // The DNS-rebinding Host check guards the tools listener with its port.
    let rebound = http(
        t,
        "GET",
        &on_main,
        &[("Host".into(), format!("evil.example:{}", t.port()))],
        b"",
    );
    assert_eq!(rebound.status, 403);
    let wrong_port = http(
        t,
        "GET",
        &on_main,
        &[("Host".into(), format!("127.0.0.1:{}", hub.addr.port()))],
        b"",
    );
    assert_eq!(wrong_port.status, 403);
    // The right token upgrades.
    let mut ws = tool_socket(&hub, "t", "plan/read");
    ws.close(None).unwrap();
}

#[test]
fn unknown_routes_are_not_implemented_then_close_1000() {
    let dir = TempDir::new("tools-notimpl");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "n");
    let (response, code) = call(
        &hub,
        "n",
        "workspace/snapshot",
        tool_request("n", "w", "r", json!({"x": 1})),
    );
    assert_eq!(
        response,
        json!({"type": "tool_response", "data": {
            "worker_id": "w", "session_id": "n", "run_id": "r", "request_id": "req-1",
            "route": "workspace/snapshot", "status": "rejected",
            "error": {"code": "not_implemented",
                      "message": "this hub does not implement the route workspace/snapshot"}}})
    );
    assert_eq!(code, Some(1000));
    assert_eq!(
        plan_of(&hub, "n"),
        json!({"markdown": "", "revision": 0, "updated_at": null})
    );
}

#[test]
fn frame_errors_close_with_their_codes() {
    let dir = TempDir::new("tools-codes");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "c");
    let close_after = |frames: Vec<Vec<u8>>| {
        let mut ws = tool_socket(&hub, "c", "plan/read");
        for frame in frames {
            ws.get_mut().write_all(&frame).unwrap();
        }
        ws_close_code(&mut ws)
    };
    let text = |s: &str| frame(true, op::TEXT, s.as_bytes());
    // Binary: 1003.
    assert_eq!(
        close_after(vec![frame(true, op::BINARY, b"{}")]),
        Some(1003)
    );
    // Invalid UTF-8: 1007.
    assert_eq!(
        close_after(vec![frame(true, op::TEXT, b"\xff\xfe")]),
        Some(1007)
    );
    // Larger than min(limits.maxMessageBytes, 1 MiB): 1009, decided from the header.
    assert_eq!(
        close_after(vec![frame_declaring(
            0x80 | op::TEXT,
            b"{",
            1024 * 1024 + 1,
            true
        )]),
        Some(1009)
    );
    // Malformed JSON or envelope, or a session that is not the route's: 1008.
    for bad in [
        "not json".to_string(),
        "[1]".to_string(),
        json!({"type": "event", "data": {}}).to_string(),
        tool_request("c", "", "r", json!({})),
        tool_request("c", "w", "r", json!(null)),
        tool_request("other", "w", "r", json!({})),
    ] {
        assert_eq!(close_after(vec![text(&bad)]), Some(1008), "{bad}");
    }
}

#[test]
fn a_second_frame_closes_1008_and_is_never_dispatched() {
    let dir = TempDir::new("tools-second");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "s");
    let mut worker = RawWorker::connect(&hub, "s", "w");
    worker.event("run_started", "r1");
    wait_events(&hub, "s", 1);
    // The first request waits for a run that is not active; the second
    // frame ends the exchange and neither is dispatched.
    let mut ws = tool_socket(&hub, "s", "plan/replace");
    send_text(
        &mut ws,
        tool_request("s", "w", "r-later", json!({"markdown": "one"})),
    );
    send_text(
        &mut ws,
        tool_request("s", "w", "r1", json!({"markdown": "two"})),
    );
    let mut responses = 0;
    let code = loop {
        match ws.read() {
            Ok(tungstenite::Message::Text(_)) => responses += 1,
            Ok(tungstenite::Message::Close(frame)) => break frame.map(|f| u16::from(f.code)),
            Ok(_) => {}
            Err(_) => break None,
        }
    };
    assert_eq!((code, responses), (Some(1008), 0));
    // Two valid frames back to back: at most the first is ever applied.
    let mut ws = tool_socket(&hub, "s", "plan/replace");
    send_text(
        &mut ws,
        tool_request("s", "w", "r1", json!({"markdown": "three"})),
    );
    send_text(
        &mut ws,
        tool_request("s", "w", "r1", json!({"markdown": "four"})),
    );
    let _ = ws_close_code(&mut ws);
    let plan = plan_of(&hub, "s");
    assert!(plan["revision"].as_u64().unwrap() <= 1, "{plan}");
    assert_ne!(plan["markdown"], "four");
    assert_ne!(plan["markdown"], "two");
}

#[test]
fn the_exchange_deadline_ends_silent_and_lingering_peers() {
    let dir = TempDir::new("tools-deadline");
    let hub = hub_with(
        &dir,
        json!({"toolRequests": {"timeoutMs": 600, "maxConnections": 1}}),
    );
    create_session(&hub, "d");
    // A peer that never sends its request.
    let started = Instant::now();
    let mut silent = tool_socket(&hub, "d", "plan/read");
    assert_eq!(ws_close_code(&mut silent), Some(1008));
    assert!(started.elapsed() >= Duration::from_millis(500));
    drop(silent);
    // A peer that reads the response but never answers the close: the hub
    // cuts it off at the deadline (raw reads, so nothing replies).
    // The slot of the previous socket frees once its thread has ended.
    let mut lingering = poll_until(DEADLINE, || {
        ws_connect(tools(&hub), &tool_path(&hub, "d", "x/y")).ok()
    })
    .expect("the slot never freed");
    let started = Instant::now();
    send_text(&mut lingering, tool_request("d", "w", "r", json!({})));
    let stream = lingering.get_mut();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&seen);
    assert!(text.contains("not_implemented"), "{text}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(started.elapsed() < DEADLINE);
}

#[test]
fn max_connections_refuses_with_503() {
    let dir = TempDir::new("tools-cap");
    let hub = hub_with(&dir, json!({"toolRequests": {"maxConnections": 2}}));
    create_session(&hub, "m");
    let first = tool_socket(&hub, "m", "plan/read");
    let _second = tool_socket(&hub, "m", "plan/read");
    assert_eq!(
        ws_refusal(tools(&hub), &tool_path(&hub, "m", "plan/read")),
        503
    );
    drop(first);
    let ok = wait_until(DEADLINE, || {
        ws_connect(tools(&hub), &tool_path(&hub, "m", "plan/read")).is_ok()
    });
    assert!(ok, "a freed slot was never reused");
}

#[test]
fn shutdown_terminates_tool_sockets() {
    let dir = TempDir::new("tools-shutdown");
    let mut hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "x");
    let mut ws = tool_socket(&hub, "x", "plan/read");
    let started = Instant::now();
    signal(hub.child.id(), libc::SIGTERM);
    let code = ws_close_code(&mut ws);
    assert!(matches!(code, Some(1001) | None), "{code:?}");
    assert!(started.elapsed() < DEADLINE);
    assert_eq!(
        wait_exit(&mut hub.child, DEADLINE).and_then(|s| s.code()),
        Some(0)
    );
}

#[test]
fn plans_need_the_live_worker_of_the_active_run() {
    let dir = TempDir::new("tools-identity");
    let hub = hub_with(&dir, json!({"limits": {"confirmIdentityHoldMs": 300}}));
    create_session(&hub, "p");
    let mut worker = RawWorker::connect(&hub, "p", "w");
    worker.event("input_admitted", "r1");
    worker.event("run_started", "r1");
    wait_events(&hub, "p", 2);

    // The live worker's active run may replace the plan.
    let (res, code) = call(
        &hub,
        "p",
        "plan/replace",
        tool_request("p", "w", "r1", json!({"markdown": "# Plan\n- [ ] a"})),
    );
    assert_eq!(code, Some(1000));
    assert_eq!(res["data"]["status"], "succeeded", "{res}");
    let result = res["data"]["result"].clone();
    assert_eq!(
        (result["revision"].clone(), result["changed"].clone()),
        (json!(1), json!(true))
    );
    let updated_at = result["updated_at"].as_str().unwrap().to_string();

    // Identical text does not bump the revision.
    let (res, _) = call(
        &hub,
        "p",
        "plan/replace",
        tool_request("p", "w", "r1", json!({"markdown": "# Plan\n- [ ] a"})),
    );
    assert_eq!(
        res["data"]["result"],
        json!({"revision": 1, "updated_at": updated_at, "changed": false})
    );
    let (res, _) = call(
        &hub,
        "p",
        "plan/read",
        tool_request("p", "w", "r1", json!({})),
    );
    assert_eq!(
        res["data"]["result"],
        json!({"markdown": "# Plan\n- [ ] a", "revision": 1, "updated_at": updated_at})
    );

    // Bad arguments are refused before anything else.
    for (route, args) in [
        ("plan/read", json!({"markdown": "x"})),
        ("plan/replace", json!({})),
        ("plan/replace", json!({"markdown": 5})),
        ("plan/replace", json!({"markdown": "x", "extra": 1})),
        (
            "plan/replace",
            json!({"markdown": "x".repeat(64 * 1024 + 1)}),
        ),
    ] {
        let (res, code) = call(&hub, "p", route, tool_request("p", "w", "r1", args));
        assert_eq!(res["data"]["error"]["code"], "invalid_arguments", "{res}");
        assert_eq!(code, Some(1000));
    }

    // Another worker id, or a run that is not the active one: unauthorized
    // once the identity hold runs out.
    for (worker_id, run) in [("impostor", "r1"), ("w", "r-other")] {
        let started = Instant::now();
        let (res, _) = call(
            &hub,
            "p",
            "plan/replace",
            tool_request("p", worker_id, run, json!({"markdown": "stolen"})),
        );
        assert_eq!(res["data"]["error"]["code"], "unauthorized", "{res}");
        assert!(started.elapsed() >= Duration::from_millis(250));
    }

    // A replace racing a stopped run is refused.
    worker.event("run_finished", "r1");
    wait_events(&hub, "p", 3);
    let (res, _) = call(
        &hub,
        "p",
        "plan/replace",
        tool_request("p", "w", "r1", json!({"markdown": "too late"})),
    );
    assert_eq!(res["data"]["error"]["code"], "unauthorized", "{res}");

    // A request made just before its run starts waits for the event socket.
    let mut early = tool_socket(&hub, "p", "plan/replace");
    send_text(
        &mut early,
        tool_request("p", "w", "r2", json!({"markdown": "  \n\t "})),
    );
    worker.event("run_started", "r2");
    let res = ws_read_until(&mut early, |v| v["type"] == "tool_response");
    assert_eq!(res["data"]["status"], "succeeded", "{res}");
    // Blank text clears the plan.
    assert_eq!(plan_of(&hub, "p")["markdown"], "");
    assert_eq!(plan_of(&hub, "p")["revision"], 2);
}

#[test]
fn a_request_whose_socket_closed_while_waiting_is_not_committed() {
    let dir = TempDir::new("tools-gone");
    let hub = hub_with(&dir, json!({"toolRequests": {"maxConnections": 1}}));
    create_session(&hub, "g");
    let mut worker = RawWorker::connect(&hub, "g", "w");
    worker.event("status", "");
    wait_events(&hub, "g", 1);
    let mut ws = tool_socket(&hub, "g", "plan/replace");
    send_text(
        &mut ws,
        tool_request("g", "w", "r3", json!({"markdown": "ghost"})),
    );
    // Once the hub has read the request it waits for the run; then go
    // away (the outcome is the same if it has not read the request yet).
    let read = wait_until(DEADLINE, || unread_by_peer(ws.get_ref()) == Some(0));
    assert!(read, "the hub never read the tool request");
    ws.get_ref().shutdown(std::net::Shutdown::Both).unwrap();
    drop(ws);
    // Had the hub missed the close, this would let it commit.
    worker.event("run_started", "r3");
    // The socket's thread has ended once its slot can be taken again.
    let ok = wait_until(DEADLINE, || {
        ws_connect(tools(&hub), &tool_path(&hub, "g", "plan/read")).is_ok()
    });
    assert!(ok);
    assert_eq!(plan_of(&hub, "g")["revision"], 0);
    assert!(!hub.data_dir.join("sessions/g/plan.json").exists());
}

#[test]
fn plans_round_trip_through_the_built_in_worker_and_a_restart() {
    let dir = TempDir::new("tools-plan");
    let mut hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "plan");
    let mut panel = panel_connect(&hub);
    send_json(
        &mut panel,
        json!({"v": 1, "type": "subscribe", "session": "plan"}),
    );
    let sub = ws_read_until(&mut panel, |v| v["type"] == "subscribed");
    assert_eq!(
        sub["plan"],
        json!({"markdown": "", "revision": 0, "updated_at": null})
    );
    let worker = KillOnDrop(spawn_mock_worker(&hub, "plan", "mock-flash"));
    wait_session(&hub, "plan", |s| s["identity"]["state"] == "live");
    let markdown = "# Plan\n- [x] read the code\n- [ ] write the tests";
    let input = |raw: &str| json!({"content": [{"type": "text", "modality": "text", "raw": raw}]});
    let sent = post(
        &hub,
        "/api/sessions/plan/input",
        input(&format!("/plan {markdown}")),
    );
    assert_eq!(sent.status, 202, "{}", sent.text());
    let reply = wait_event(&hub, "plan", |e| {
        e["event"] == "model_response" && e.to_string().contains("plan/replace")
    });
    let result = reply_json(&reply, "plan/replace succeeded: ");
    assert_eq!(
        (result["revision"].clone(), result["changed"].clone()),
        (json!(1), json!(true))
    );
    let updated_at = result["updated_at"].clone();
    assert!(updated_at.is_string());

    // The panel hears about it; plan.json mirrors the store.
    let live = ws_read_until(&mut panel, |v| v["type"] == "plan");
    let expected = json!({"markdown": markdown, "revision": 1, "updated_at": updated_at});
    assert_eq!(live["session"], "plan");
    assert_eq!(live["plan"], expected);
    let file = hub.data_dir.join("sessions/plan/plan.json");
    let mirrored: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(mirrored, expected);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // Read it back through the worker; an identical replace changes nothing.
    post(&hub, "/api/sessions/plan/input", input("/plan-read"));
    let reply = wait_event(&hub, "plan", |e| {
        e["event"] == "model_response" && e.to_string().contains("plan/read")
    });
    assert_eq!(reply_json(&reply, "plan/read succeeded: "), expected);
    post(
        &hub,
        "/api/sessions/plan/input",
        input(&format!("/plan {markdown}")),
    );
    let reply = wait_event(&hub, "plan", |e| {
        e["event"] == "model_response" && e.to_string().contains("\"changed\\\":false")
    });
    assert_eq!(
        reply_json(&reply, "plan/replace succeeded: "),
        json!({"revision": 1, "updated_at": updated_at, "changed": false})
    );

    // Compaction leaves the plan alone.
    post(
        &hub,
        "/api/sessions/plan/input",
        json!({"operation": "compact"}),
    );
    wait_event(&hub, "plan", |e| e["event"] == "compact_finished");
    assert_eq!(plan_of(&hub, "plan"), expected);

    // After a restart the plan comes back with its revision and timestamp.
    drop(worker);
    assert_eq!(hub.terminate().code(), Some(0));
    let hub = TestHub::start(dir.path(), &[]);
    assert_eq!(plan_of(&hub, "plan"), expected);
    let _worker = KillOnDrop(spawn_mock_worker(&hub, "plan", "mock-flash"));
    wait_session(&hub, "plan", |s| s["identity"]["state"] == "live");
    post(&hub, "/api/sessions/plan/input", input("/plan-read"));
    let reply = wait_event(&hub, "plan", |e| {
        e["event"] == "model_response" && e.to_string().contains("plan/read")
    });
    assert_eq!(reply_json(&reply, "plan/read succeeded: "), expected);
}

#[test]
fn supervised_workers_are_told_the_bound_tools_port() {
    let dir = TempDir::new("tools-supervised");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "sup");
    let res = hub.request("POST", "/api/sessions/sup/start", &[], b"");
    assert_eq!(res.status, 200, "{}", res.text());
    let cfg_path = res.json()["config"].as_str().unwrap().to_string();
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    let token = worker_token(&hub.data_dir, "sup");
    assert_eq!(
        cfg["hub_remote_call"]["endpoint"],
        format!(
            "ws://127.0.0.1:{}/agent/sup/tools?token={token}",
            tools(&hub).port()
        )
    );
    wait_session(&hub, "sup", |s| s["identity"]["state"] == "live");
    let input =
        json!({"content": [{"type": "text", "modality": "text", "raw": "/plan supervised"}]});
    assert_eq!(post(&hub, "/api/sessions/sup/input", input).status, 202);
    let reply = wait_event(&hub, "sup", |e| {
        e["event"] == "model_response" && e.to_string().contains("plan/replace")
    });
    assert_eq!(
        reply_json(&reply, "plan/replace succeeded: ")["revision"],
        1
    );
    assert_eq!(plan_of(&hub, "sup")["markdown"], "supervised");
    let stop = hub.request("POST", "/api/sessions/sup/stop", &[], b"");
    assert_eq!(stop.status, 200, "{}", stop.text());
}

#[test]
fn a_tools_port_in_use_fails_the_start_clearly() {
    let dir = TempDir::new("tools-bind");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let data = dir.path().display().to_string();
    let mut child = std::process::Command::new(BIN)
        .args([
            "serve",
            "-l",
            "127.0.0.1:0",
            "--tools-port",
            &port,
            "--data-dir",
            &data,
        ])
        .env("HOME", dir.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let Some(status) = wait_exit(&mut child, DEADLINE) else {
        let _ = child.kill();
        panic!("the hub started although its tools port was taken");
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot listen on 127.0.0.1:{port} for the remote-tools listener"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_browser_origin_is_refused_on_the_tools_listener() {
    let dir = TempDir::new("tools-origin");
    let hub = hub_with(&dir, json!({}));
    create_session(&hub, "o");
    let addr = tools(&hub);
    let path = tool_path(&hub, "o", "plan/read");
    let upgrade = |origin: Option<&str>| -> u16 {
        let origin = origin
            .map(|o| format!("Origin: {o}\r\n"))
            .unwrap_or_default();
        let raw = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{origin}Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        );
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(DEADLINE)).unwrap();
        std::io::Write::write_all(&mut s, raw.as_bytes()).unwrap();
        let mut buf = [0u8; 256];
        let n = std::io::Read::read(&mut s, &mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n])
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap()
    };
    assert_eq!(upgrade(Some("http://evil.example")), 403);
    assert_eq!(upgrade(None), 101, "workers send no Origin");
}
