//! The offline model provider (`mock.enabled`) of a real hub, driven by a
//! plain HTTP client the way a worker's chat-completions plugin drives a
//! model API: every scenario, the stream's shape, the bounds, bad
//! requests, shutdown, and the base URL written into worker configurations.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::util::*;

/// A hub with the provider enabled and `mock` merged into its `mock`
/// section; the provider's address.
fn provider_hub(dir: &TempDir, mock: Value) -> (TestHub, SocketAddr) {
    let mut section = json!({"enabled": true});
    for (key, value) in mock.as_object().unwrap() {
        section[key] = value.clone();
    }
    let hub = hub_with(dir, json!({"mock": section}));
    let addr = hub
        .mock_provider_addr()
        .unwrap_or_else(|| panic!("no provider start line: {}", hub.log_text()));
    (hub, addr)
}

/// One chat-completions request.
fn chat(addr: SocketAddr, body: &Value) -> Response {
    request_at(
        addr,
        "POST",
        "/chat/completions",
        body.to_string().as_bytes(),
    )
}

fn messages_with(user: &str) -> Value {
    json!([
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": user}
    ])
}

/// The chunks of a streamed reply, checked for the chat-completion-chunk
/// shape: one id for all, one choice at index 0, a `[DONE]` at the end.
/// Returns the chunks (without `[DONE]`).
#[track_caller]
fn stream_chunks(res: &Response) -> Vec<Value> {
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(res.header("Content-Type"), Some("text/event-stream"));
    assert_eq!(res.header("Cache-Control"), Some("no-cache"));
    let mut data = sse_data(&res.body);
    assert_eq!(data.pop().as_deref(), Some("[DONE]"), "{}", res.text());
    let chunks: Vec<Value> = data
        .iter()
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("chunk {d:?}: {e}")))
        .collect();
    assert!(!chunks.is_empty());
    let id = chunks[0]["id"].as_str().expect("a string id");
    for chunk in &chunks {
        assert_eq!(chunk["id"], id);
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert!(chunk["created"].as_u64().is_some(), "{chunk}");
        let choices = chunk["choices"].as_array().unwrap();
        assert_eq!(choices.len(), 1, "{chunk}");
        assert_eq!(choices[0]["index"], 0);
        assert!(choices[0]["delta"].is_object(), "{chunk}");
    }
    // only the last chunk finishes
    for chunk in &chunks[..chunks.len() - 1] {
        assert_eq!(chunk["choices"][0]["finish_reason"], Value::Null);
    }
    chunks
}

fn finish_reason(chunks: &[Value]) -> &str {
    chunks.last().unwrap()["choices"][0]["finish_reason"]
        .as_str()
        .expect("the last chunk finishes")
}

/// The streamed text, as a client accumulates it.
fn streamed_text(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect()
}

/// A streamed text reply's text, asserting it finished with `stop`.
#[track_caller]
fn text_reply(res: &Response) -> String {
    let chunks = stream_chunks(res);
    assert_eq!(finish_reason(&chunks), "stop");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    streamed_text(&chunks)
}

#[test]
fn the_offline_provider_drives_a_chat_completions_client_through_every_scenario() {
    let dir = TempDir::new("mock-provider-scenarios");
    let (hub, addr) = provider_hub(
        &dir,
        json!({"scenario": "echo", "slowMs": 300, "toolCommand": "echo offline"}),
    );
    assert!(addr.ip().is_loopback(), "{addr}");
    assert_eq!(hub.get("/api/meta").json()["mock"]["enabled"], true);

    // auto and its aliases: propose run_command while no tool result exists
    for model in ["mock-auto", "mock-flash", "mock-tool"] {
        let res = chat(
            addr,
            &json!({"model": model, "stream": true, "messages": messages_with("go")}),
        );
        let chunks = stream_chunks(&res);
        assert_eq!(finish_reason(&chunks), "tool_calls", "{model}");
        assert_eq!(chunks[0]["model"], model);
        let delta = &chunks[0]["choices"][0]["delta"];
        assert_eq!(delta["role"], "assistant");
        let calls = delta["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0]["index"], 0);
        assert_eq!(calls[0]["id"], "mock-call-1");
        assert_eq!(calls[0]["type"], "function");
        assert_eq!(calls[0]["function"]["name"], "run_command");
        let args: Value =
            serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(
            args,
            json!({"command": "echo offline", "expected_runtime_milliseconds": 1000})
        );
        assert_eq!(streamed_text(&chunks), "");
    }
    // ... and finish once the conversation carries the tool's result
    let mut history = messages_with("go").as_array().unwrap().clone();
    history.push(json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "mock-call-1", "type": "function",
         "function": {"name": "run_command", "arguments": "{}"}}]}));
    history.push(json!({"role": "tool", "tool_call_id": "mock-call-1", "content": "offline"}));
    let res = chat(addr, &json!({"model": "mock-auto", "messages": history}));
    assert_eq!(text_reply(&res), "finished after 1 tool result(s)");

    let res = chat(
        addr,
        &json!({"model": "mock-text", "messages": messages_with("hi")}),
    );
    assert_eq!(text_reply(&res), "mock response");

    let res = chat(
        addr,
        &json!({"model": "mock-echo", "messages": messages_with("hello there")}),
    );
    assert_eq!(text_reply(&res), "echo: hello there");

    let started = Instant::now();
    let res = chat(
        addr,
        &json!({"model": "mock-slow", "messages": messages_with("hi")}),
    );
    let took = started.elapsed();
    assert_eq!(text_reply(&res), "mock response");
    assert!(
        took >= Duration::from_millis(300),
        "slow answered after {took:?}"
    );

    let res = chat(
        addr,
        &json!({"model": "mock-error", "messages": messages_with("hi")}),
    );
    assert_eq!(res.status, 500);
    assert_eq!(res.header("Content-Type"), Some("application/json"));
    assert_eq!(
        res.json(),
        json!({"error": {"message": "mock provider scenario error"}})
    );

    // a model name that names no scenario gets mock.scenario (echo here)
    for model in [json!("deepseek-flash"), json!("mock-unknown"), Value::Null] {
        let res = chat(
            addr,
            &json!({"model": model, "messages": messages_with("fallback")}),
        );
        assert_eq!(text_reply(&res), "echo: fallback", "{model}");
    }

    // "stream": false gets one chat.completion object
    let res = chat(
        addr,
        &json!({"model": "mock-text", "stream": false, "messages": []}),
    );
    assert_eq!(res.status, 200);
    assert_eq!(res.header("Content-Type"), Some("application/json"));
    let body = res.json();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["choices"][0]["message"]["content"], "mock response");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
}

/// Reads one response (head and `Content-Length` body) from a keep-alive
/// connection.
fn read_response(s: &mut TcpStream) -> Response {
    let head = read_head(s).unwrap();
    let mut parsed = parse_response(head.as_bytes()).unwrap();
    let len: usize = parsed
        .header("Content-Length")
        .and_then(|v| v.parse().ok())
        .expect("a Content-Length");
    let mut body = vec![0; len];
    s.read_exact(&mut body).unwrap();
    parsed.body = body;
    parsed
}

#[test]
fn the_provider_serves_several_requests_on_one_connection() {
    let dir = TempDir::new("mock-provider-keepalive");
    let (_hub, addr) = provider_hub(&dir, json!({}));
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    for user in ["one", "two", "three"] {
        let body = json!({"model": "mock-echo", "messages": messages_with(user)}).to_string();
        write!(
            s,
            "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Accept: text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let res = read_response(&mut s);
        assert_eq!(text_reply(&res), format!("echo: {user}"));
    }
}

#[test]
fn bad_requests_are_refused_clearly_and_the_provider_keeps_serving() {
    let dir = TempDir::new("mock-provider-bad");
    let (_hub, addr) = provider_hub(&dir, json!({"scenario": "text"}));
    let serves = || text_reply(&chat(addr, &json!({"model": "mock-text"}))) == "mock response";

    let res = request_at(addr, "POST", "/chat/completions", b"{\"model\": \"mock-te");
    assert_eq!(res.status, 500);
    let body = res.json();
    assert_eq!(body["error"], "mock provider failure");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.starts_with("the request body is not JSON"),
        "{message}"
    );
    assert!(serves());

    let res = request_at(addr, "POST", "/chat/completions", b"[\"mock-text\"]");
    assert_eq!(res.status, 500);
    assert_eq!(
        res.json()["message"],
        "the request body is not a JSON object"
    );
    assert!(serves());

    let res = request_at(addr, "GET", "/chat/completions", b"");
    assert_eq!(res.status, 405);
    assert_eq!(res.header("Allow"), Some("POST"));
    assert_eq!(res.json(), json!({"error": "POST only"}));
    assert!(serves());

    // a chunked body is never read
    let raw = format!(
        "POST /chat/completions HTTP/1.1\r\nHost: {addr}\r\nTransfer-Encoding: chunked\r\n\
         Connection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    );
    let res = raw_exchange(addr, raw.as_bytes()).unwrap();
    assert_eq!(res.status, 411, "{}", res.text());
    assert_eq!(res.json()["error"], "length_required");
    assert!(serves());

    // an empty body is an empty request: the fallback scenario answers
    let res = request_at(addr, "POST", "/", b"");
    assert_eq!(text_reply(&res), "mock response");
}

#[test]
fn request_bodies_are_bounded_at_eight_mebibytes() {
    const MAX: usize = 8 * 1024 * 1024;
    let dir = TempDir::new("mock-provider-limit");
    let (hub, addr) = provider_hub(&dir, json!({}));

    // a body of exactly the limit is served
    let head = r#"{"model":"mock-text","pad":""#;
    let tail = r#""}"#;
    let mut body = head.as_bytes().to_vec();
    body.resize(MAX - tail.len(), b'x');
    body.extend_from_slice(tail.as_bytes());
    assert_eq!(body.len(), MAX);
    let res = request_at(addr, "POST", "/chat/completions", &body);
    assert_eq!(text_reply(&res), "mock response");

    // one byte more is refused
    body.insert(head.len(), b'x');
    let res = request_at(addr, "POST", "/chat/completions", &body);
    assert_eq!(res.status, 413, "{}", res.text());
    assert_eq!(
        res.json(),
        json!({"error": "payload_too_large",
               "message": format!("the request body exceeds {MAX} bytes")})
    );

    // a huge declared length is refused from the head, before any body
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    write!(
        s,
        "POST /chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n\r\n",
        1u64 << 40
    )
    .unwrap();
    let head = read_head(&mut s).unwrap();
    assert_eq!(status_line_code(&head), 413, "{head}");
    drop(s);

    assert_eq!(
        text_reply(&chat(addr, &json!({"model": "mock-text"}))),
        "mock response"
    );
    // every provider connection thread ends once its client is gone
    wait_for("provider connection threads to end", DEADLINE, || {
        hub.threads_named("mock-conn") == 0
    });
    assert_eq!(hub.threads_named("mock-accept"), 1);
}

#[test]
fn provider_connections_are_capped() {
    let dir = TempDir::new("mock-provider-cap");
    let (hub, addr) = provider_hub(&dir, json!({}));
    // 64 connections in the middle of a head fill the provider's
    // connections (4 per handler thread); they hold no thread.
    let held: Vec<TcpStream> = (0..64)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\n")
                .unwrap();
            s
        })
        .collect();
    // the next is answered 503 by the front door and closed (read before
    // writing: a request it never reads would turn the close into a reset)
    let mut refused = false;
    wait_for("a 503 past the cap", DEADLINE, || {
        let mut next = TcpStream::connect(addr).unwrap();
        next.set_read_timeout(Some(DEADLINE)).unwrap();
        refused = read_head(&mut next).is_ok_and(|head| status_line_code(&head) == 503)
            && closes_within(&mut next, DEADLINE);
        refused
    });
    assert_eq!(hub.threads_named("mock-conn"), 0);
    // the hub's own listener is not affected
    assert_eq!(hub.get("/api/meta").status, 200);
    drop(held);
    // Until the front door has seen them close, a newcomer may still be
    // over the cap (503 and a reset): ask until it answers.
    let body = json!({"model": "mock-text"}).to_string();
    let raw = format!(
        "POST /chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    wait_for("the provider to answer again", DEADLINE, || {
        exchange_within(addr, raw.as_bytes(), DEADLINE)
            .is_ok_and(|reply| reply.starts_with("HTTP/1.1 200"))
    });
}

#[test]
fn a_shutdown_ends_a_slow_request_at_once() {
    let dir = TempDir::new("mock-provider-stop");
    let (mut hub, addr) = provider_hub(&dir, json!({"slowMs": 600_000}));
    let client = thread::spawn(move || chat(addr, &json!({"model": "mock-slow"})));
    wait_for("the slow request's connection thread", DEADLINE, || {
        hub.threads_named("mock-conn") == 1
    });
    let started = Instant::now();
    assert!(hub.terminate().success(), "{}", hub.log_text());
    let res = client.join().unwrap();
    assert_eq!(res.status, 503, "{}", res.text());
    assert_eq!(res.json()["error"], "mock provider stopping");
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(15),
        "the hub took {took:?} to stop"
    );
}

#[test]
fn a_disabled_provider_does_not_listen() {
    let dir = TempDir::new("mock-provider-off");
    let hub = hub_with(&dir, json!({"mock": {"enabled": false}}));
    assert!(hub.mock_provider_addr().is_none(), "{}", hub.log_text());
    assert_eq!(hub.threads_named("mock-"), 0);
    assert_eq!(hub.get("/api/meta").json()["mock"]["enabled"], false);
}

#[test]
fn a_provider_that_cannot_bind_fails_the_start() {
    let dir = TempDir::new("mock-provider-bind");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let path = dir.path().join("hub.test.jsonc");
    std::fs::write(
        &path,
        json!({"mock": {"enabled": true, "listen": format!("127.0.0.1:{port}")}}).to_string(),
    )
    .unwrap();
    let out = std::process::Command::new(BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--tools-port",
            "0",
            "-c",
        ])
        .arg(&path)
        .arg("--data-dir")
        .arg(dir.path())
        .env("HOME", dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "cannot listen on 127.0.0.1:{port} for the offline model provider (mock.listen)"
        )),
        "{stderr}"
    );
}

/// `<data>/sessions/<id>/config/config.yaml`, parsed.
fn worker_document(hub: &TestHub, id: &str) -> Value {
    let path = hub
        .data_dir
        .join("sessions")
        .join(id)
        .join("config")
        .join("config.yaml");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

#[test]
fn worker_configurations_carry_the_live_base_url() {
    let dir = TempDir::new("mock-provider-render");
    let config = json!({
        "mock": {"enabled": true},
        "launcher": {"kind": "command", "command": ["/bin/sh", "-c", "exec sleep 60"]},
        "worker": short_stop_ladder(),
    });
    let path = dir.path().join("hub.test.jsonc");
    std::fs::write(&path, config.to_string()).unwrap();
    let args = ["-c", path.to_str().unwrap()];

    let mut hub = TestHub::start(dir.path(), &args);
    let addr = hub.mock_provider_addr().unwrap();
    create_session_with_spec(
        &hub,
        "offline",
        json!({"provider": "mock", "model": "mock-echo"}),
    );
    create_session_with_spec(&hub, "online", json!({"provider": "deepseek"}));
    for id in ["offline", "online"] {
        let res = action(&hub, id, "start");
        assert_eq!(res.status, 200, "{id}: {}", res.text());
    }
    let doc = worker_document(&hub, "offline");
    let url = format!("http://{addr}");
    assert_eq!(doc["driver_model"], "mock");
    assert_eq!(doc["providers"]["mock"]["endpoint"]["base_url"], url);
    assert_eq!(doc["providers"]["mock"]["model"], "mock-echo");
    assert_eq!(
        doc["providers"]["mock"]["endpoint"]["auth"],
        json!({"scheme": "none"})
    );
    // a worker reading its configuration reaches the provider there
    let base: SocketAddr = url.strip_prefix("http://").unwrap().parse().unwrap();
    let res = chat(
        base,
        &json!({"model": doc["providers"]["mock"]["model"], "messages": messages_with("ping")}),
    );
    assert_eq!(text_reply(&res), "echo: ping");
    // other profiles keep their own endpoint
    let online = worker_document(&hub, "online");
    assert_eq!(
        online["providers"]["deepseek"]["endpoint"]["base_url"],
        "https://api.deepseek.com"
    );
    for id in ["offline", "online"] {
        action(&hub, id, "stop");
    }
    for id in ["offline", "online"] {
        wait_session(&hub, id, |s| s["process"]["state"] != "running");
    }
    assert!(hub.terminate().success());
    // the next start points the profile at the provider again, whatever
    // the file held (the next hub's provider may have another port)
    let path = hub.data_dir.join("sessions/offline/config/config.yaml");
    let mut stale = worker_document(&hub, "offline");
    stale["providers"]["mock"]["endpoint"]["base_url"] = json!("http://127.0.0.1:1");
    std::fs::write(&path, stale.to_string()).unwrap();
    drop(hub);
    let hub = TestHub::start(dir.path(), &args);
    let next = hub.mock_provider_addr().unwrap();
    let res = action(&hub, "offline", "start");
    assert_eq!(res.status, 200, "{}", res.text());
    let doc = worker_document(&hub, "offline");
    assert_eq!(
        doc["providers"]["mock"]["endpoint"]["base_url"],
        format!("http://{next}")
    );
    assert_eq!(doc["providers"]["mock"]["model"], "mock-echo");
}
