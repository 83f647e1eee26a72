//! The Shard protocol's local transports (seed 004 §2.1, §4.2, §5.2): the
//! hub's unix socket (JSONL, daemon connections) and `simplex-hub
//! shard-stdio` (a direct connection bound to one agent, JSONL on stdin
//! and stdout), driven by the seed-only client (`util::shard`) against a
//! real hub, real built-in workers and real sockets, beside WebSocket
//! clients and panels watching the same agents.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;

use serde_json::{json, Value};

use crate::util::*;

fn code(response: &Value) -> &str {
    assert_eq!(response["success"], false, "{response}");
    response["error"]["code"].as_str().unwrap()
}

/// A new agent (created over `client`) whose worker runs and is live.
fn running_agent(hub: &TestHub, client: &mut ShardClient, work: &std::path::Path) -> String {
    let agent = client.create(work);
    client.wait_runtime(&agent, "running");
    wait_session(hub, &agent, |s| s["identity"]["state"] == "live");
    agent
}

/// A panel subscribed to `session`.
fn watching_panel(hub: &TestHub, session: &str) -> Ws {
    let mut panel = panel(hub);
    send_json(
        &mut panel,
        json!({"v": 1, "type": "subscribe", "session": session, "since": 0}),
    );
    next_of(&mut panel, "subscribed");
    panel
}

#[test]
fn a_job_client_on_the_socket_drives_an_agent_a_websocket_client_and_a_panel_watch() {
    let dir = TempDir::new("sock-job");
    let hub = TestHub::start(dir.path(), &[]);
    let mut job = ShardClient::socket(&shard_socket(&hub));
    assert_eq!(job.hello["protocol_version"], "0.1.0");
    assert_eq!(job.hello["capabilities"], json!(["unix-socket"]));
    let mut web = ShardClient::connect(&hub);
    // The job client creates the agent; the broadcast crosses transports.
    let agent = running_agent(&hub, &mut job, &dir.path().join("work"));
    let spawned = web.event("agent_spawned", &agent);
    assert_eq!(spawned["info"]["agent_id"], agent.as_str());
    let (attached, sync) = job.attach(&agent, "interactive");
    assert_eq!(attached["data"]["info"]["runtime_state"], "running");
    assert_eq!(
        sync["agent_id"],
        agent.as_str(),
        "daemon messages carry agent_id"
    );
    web.attach(&agent, "interactive");
    let mut panel = watching_panel(&hub, &agent);

    let marker = dir.path().join("work/marker.txt");
    let id = job.prompt(&agent, "/run echo ran > marker.txt && echo from-the-socket");
    assert_eq!(job.response(&id)["success"], true);
    let asked = job.event("permission_request", &agent);
    let request_id = asked["request_id"].as_str().unwrap().to_string();
    assert_eq!(
        web.event("permission_request", &agent)["request_id"],
        request_id.as_str()
    );
    let open = ws_read_until(&mut panel, |v| {
        v["type"] == "confirmation" && v["open"] == true
    });
    assert_eq!(open["confirmation"]["confirmation_id"], request_id.as_str());
    assert!(!marker.exists());
    // The WebSocket client answers first; the job client's answer is late
    // and discarded silently: first response wins across transports.
    let r = web.request(json!({"type": "permission_response", "agent_id": agent,
        "request_id": request_id, "decision": "allow"}));
    assert_eq!(r["data"]["applied"], true, "{r}");
    let r = job.request(json!({"type": "permission_response", "agent_id": agent,
        "request_id": request_id, "decision": "deny"}));
    assert_eq!(r["data"]["applied"], false, "{r}");
    for client in [&mut job, &mut web] {
        let resolved = client.event("permission_resolved", &agent);
        assert_eq!(resolved["request_id"], request_id.as_str());
        assert_eq!(
            (resolved["decision"].as_str(), resolved["source"].as_str()),
            (Some("allow"), Some("shard"))
        );
        let result = client.event("tool_result", &agent);
        assert_eq!(result["is_error"], false, "{result}");
        assert_eq!(
            stdout_block(result["content"]["text"].as_str().unwrap()),
            Some("from-the-socket\n")
        );
        client.event("turn_end", &agent);
    }
    ws_read_until(&mut panel, |v| {
        v["type"] == "confirmation"
            && v["open"] == false
            && v["confirmation"]["confirmation_id"] == request_id.as_str()
    });
    assert_eq!(std::fs::read_to_string(&marker).unwrap().trim(), "ran");
    // The same error codes as on /shard/ws.
    let r = job.request(json!({"type": "prompt", "message": "no agent_id"}));
    assert_eq!(code(&r), "NOT_ATTACHED");
    let r = job.request(json!({"type": "agent.attach", "agent_id": "nope"}));
    assert_eq!(code(&r), "NOT_FOUND");
    let r = job.request(json!({"type": "direct.bind", "agent_id": agent}));
    assert_eq!(code(&r), "PROTOCOL_ERROR", "a bind after an attach: {r}");
    let r = web.request(json!({"type": "direct.bind", "agent_id": agent}));
    assert_eq!(
        code(&r),
        "INVALID_REQUEST",
        "no direct connections on /shard/ws: {r}"
    );
    job.send_text("not json");
    assert_eq!(
        code(&job.expect(|m| m["type"] == "response")),
        "INVALID_REQUEST"
    );
    // Terminated, the agent stays; the job client's next prompt restores
    // its runtime (seed §6.4), and the attachment gets the new runtime's
    // sync before the turn.
    let r = job.request(json!({"type": "agent.terminate", "agent_id": agent}));
    assert_eq!(r["success"], true, "{r}");
    job.wait_runtime(&agent, "stopped");
    job.take_inbox();
    let id = job.prompt(&agent, "back again");
    assert_eq!(job.response(&id)["success"], true);
    let turn = job.through("turn_end", &agent);
    let kinds: Vec<&str> = turn.iter().map(|m| m["type"].as_str().unwrap()).collect();
    let sync_at = kinds.iter().position(|k| *k == "sync");
    let start_at = kinds.iter().position(|k| *k == "turn_start");
    assert!(
        matches!((sync_at, start_at), (Some(s), Some(t)) if s < t),
        "{kinds:?}"
    );
}

#[test]
fn a_permission_raised_by_the_worker_is_answered_on_stdio_and_resolved_everywhere() {
    let dir = TempDir::new("stdio-perm");
    let hub = TestHub::start(dir.path(), &[]);
    let mut web = ShardClient::connect(&hub);
    let agent = running_agent(&hub, &mut web, &dir.path().join("work"));
    web.attach(&agent, "interactive");
    let mut panel = watching_panel(&hub, &agent);

    // hello, then sync: per-agent messages without agent_id.
    let mut io = ShardClient::stdio(&hub, &["--agent", &agent]);
    assert_eq!(io.hello["capabilities"], json!(["unix-socket", "direct"]));
    assert!(io.hello.get("agent_id").is_none());
    let sync = io.expect(|_| true);
    assert_eq!(sync["type"], "sync", "{sync}");
    assert!(sync.get("agent_id").is_none(), "{sync}");
    assert!(sync.get("runtime_epoch").is_none(), "{sync}");
    assert_eq!(
        (sync["status"].as_str(), sync["mode"].as_str()),
        (Some("idle"), Some("ask"))
    );
    assert!(sync["capabilities"]
        .as_array()
        .unwrap()
        .contains(&json!("mode-catalog")));
    // Orchestrator messages are not carried; another agent is refused.
    for msg in [
        json!({"type": "agent.list"}),
        json!({"type": "agent.attach", "agent_id": agent}),
        json!({"type": "daemon.shutdown"}),
        json!({"type": "direct.bind", "agent_id": agent}),
    ] {
        assert_eq!(code(&io.request(msg.clone())), "PROTOCOL_ERROR", "{msg}");
    }
    let r = io.request(json!({"type": "list_modes", "agent_id": "someone-else"}));
    assert_eq!(code(&r), "INVALID_REQUEST");
    let r = io.request(json!({"type": "list_modes"}));
    assert_eq!(r["data"]["active"], "ask", "{r}");

    let id = io.command(json!({"type": "prompt", "message": "/run echo answered-on-stdio"}));
    assert_eq!(io.response(&id)["success"], true);
    let asked = io.direct_event("permission_request");
    let request_id = asked["request_id"].as_str().unwrap().to_string();
    assert_eq!(asked["input"]["command"], "echo answered-on-stdio");
    assert_eq!(
        web.event("permission_request", &agent)["request_id"],
        request_id.as_str()
    );
    ws_read_until(&mut panel, |v| {
        v["type"] == "confirmation" && v["open"] == true
    });
    let r = io.request(
        json!({"type": "permission_response", "request_id": request_id,
        "decision": "allow"}),
    );
    assert_eq!(r["data"]["applied"], true, "{r}");
    // The turn's messages, in order: the resolution, then (seed §9.4: the
    // call is about to run, after permission) its tool_call, then its
    // result; no tool_call before the decision.
    io.direct_event("turn_end");
    let turn = io.take_inbox();
    let order: Vec<&str> = turn
        .iter()
        .map(|m| m["type"].as_str().unwrap_or(""))
        .filter(|t| t.starts_with("permission_resolved") || t.starts_with("tool_"))
        .collect();
    assert_eq!(
        order,
        ["permission_resolved", "tool_call", "tool_result"],
        "{turn:#?}"
    );
    let of = |kind: &str| turn.iter().find(|m| m["type"] == kind).unwrap().clone();
    let resolved = of("permission_resolved");
    assert_eq!(
        (resolved["decision"].as_str(), resolved["source"].as_str()),
        (Some("allow"), Some("shard"))
    );
    assert_eq!(of("tool_call")["args"]["command"], "echo answered-on-stdio");
    let seen = web.event("permission_resolved", &agent);
    assert_eq!(
        (seen["request_id"].as_str(), seen["source"].as_str()),
        (Some(request_id.as_str()), Some("shard"))
    );
    ws_read_until(&mut panel, |v| {
        v["type"] == "confirmation"
            && v["open"] == false
            && v["confirmation"]["confirmation_id"] == request_id.as_str()
    });
    let late = web.request(json!({"type": "permission_response", "agent_id": agent,
        "request_id": request_id, "decision": "deny"}));
    assert_eq!(late["data"]["applied"], false);
    let result = of("tool_result");
    assert_eq!(
        stdout_block(result["content"]["text"].as_str().unwrap()),
        Some("answered-on-stdio\n")
    );
    // stdin is split by the hub's JSONL rules: empty lines and CRLF,
    // a line that is not UTF-8 refused alone.
    io.send_raw(b"\r\n\n{\"type\":\"list_modes\",\"id\":\"crlf\"}\r\n");
    io.send_raw(
        b"{\"type\":\"list_modes\",\"id\":\"\xff\"}\n{\"type\":\"list_modes\",\"id\":\"after\"}\n",
    );
    assert_eq!(io.response("crlf")["data"]["active"], "ask");
    let r = io.expect(|m| m["type"] == "response" && m.get("id").is_none());
    assert_eq!(code(&r), "INVALID_REQUEST");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("UTF-8"),
        "{r}"
    );
    assert_eq!(io.response("after")["success"], true);
    // The end of stdin detaches; the agent keeps running. Nothing on the
    // direct connection, to its last line, names an agent or the registry.
    io.close_input();
    for msg in io.rest() {
        assert!(msg.get("agent_id").is_none(), "{msg}");
        assert!(
            !msg["type"].as_str().unwrap().starts_with("agent_"),
            "{msg}"
        );
    }
    let status = io.stdio_exit(DEADLINE).expect("shard-stdio did not exit");
    assert_eq!(status.code(), Some(0), "stderr: {}", io.stdio_stderr());
    let info = web.request(json!({"type": "agent.status", "agent_id": agent}));
    assert_eq!(info["data"]["agents"][0]["runtime_state"], "running");
    let id = web.prompt(&agent, "still here");
    assert_eq!(web.response(&id)["success"], true);
}

#[test]
fn a_socket_client_attaches_to_a_running_turn_and_detaches_tmux_style() {
    // Seed §12.3 over the unix socket: attached mid-turn, the response and
    // the sync say streaming, the turn's events follow; after a detach the
    // agent runs on and this client hears no more of it.
    let dir = TempDir::new("sock-tmux");
    let hub = TestHub::start(dir.path(), &[]);
    let mut driver = ShardClient::socket(&shard_socket(&hub));
    let agent = running_agent(&hub, &mut driver, &dir.path().join("work"));
    driver.attach(&agent, "interactive");
    let id = driver.prompt(&agent, "/sleep 3000");
    assert_eq!(driver.response(&id)["success"], true);
    driver.event("turn_start", &agent);

    let mut viewer = ShardClient::socket(&shard_socket(&hub));
    let (attached, sync) = viewer.attach(&agent, "observer");
    assert_eq!(attached["data"]["status"], "streaming", "{attached}");
    assert_eq!(sync["status"], "streaming", "{sync}");
    let end = viewer.event("turn_end", &agent);
    assert!(end["turn_id"].is_string());
    let r = viewer.request(json!({"type": "agent.detach", "agent_id": agent}));
    assert_eq!(r["success"], true, "{r}");
    viewer.take_inbox();
    // The agent keeps running; the detached client hears none of its turns.
    let id = driver.prompt(&agent, "after the detach");
    assert_eq!(driver.response(&id)["success"], true);
    driver.through("turn_end", &agent);
    let r = viewer.request(json!({"type": "agent.list"}));
    assert_eq!(r["success"], true);
    assert!(
        viewer
            .take_inbox()
            .iter()
            .all(|m| m["agent_id"] != agent.as_str()
                || m["type"].as_str().unwrap_or("").starts_with("agent_")),
        "a detached client gets no per-agent events"
    );
}

#[test]
fn jsonl_lines_crlf_separators_limits_bad_utf8_and_a_partial_end() {
    let dir = TempDir::new("sock-jsonl");
    let hub = hub_with(&dir, json!({"shard": {"maxLineBytes": 1024}}));
    let path = shard_socket(&hub);
    let mut c = ShardClient::socket(&path);
    let agent = running_agent(&hub, &mut c, &dir.path().join("work"));
    c.attach(&agent, "interactive");

    // CRLF and empty lines.
    c.send_raw(b"{\"type\":\"agent.list\",\"id\":\"crlf\"}\r\n\n\r\n\n");
    c.send_raw(b"{\"type\":\"agent.list\",\"id\":\"after-empty\"}\n");
    for id in ["crlf", "after-empty"] {
        let r = c.expect(|m| m["type"] == "response");
        assert_eq!(
            (r["id"].as_str(), r["success"].as_bool()),
            (Some(id), Some(true)),
            "{r}"
        );
    }
    // U+2028 and U+2029 are characters of a string, not line ends: raw in
    // the prompt, raw in the events.
    let text = "one\u{2028}two\u{2029}three";
    let line =
        json!({"type": "prompt", "id": "sep", "agent_id": agent, "message": text}).to_string();
    assert!(line.contains('\u{2028}'), "sent unescaped");
    c.send_raw(format!("{line}\n").as_bytes());
    assert_eq!(c.response("sep")["success"], true);
    let done = c.event("message_complete", &agent);
    let said = done["message"]["content"][0]["text"].as_str().unwrap();
    assert_eq!(said, format!("echo: {text}"));
    // A line over shard.maxLineBytes, then a good one in the same write.
    let big = json!({"type": "agent.list", "id": "big", "pad": "x".repeat(2000)}).to_string();
    c.send_raw(format!("{big}\r\n{{\"type\":\"agent.list\",\"id\":\"good\"}}\n").as_bytes());
    let r = c.expect(|m| m["type"] == "response");
    assert_eq!(code(&r), "INVALID_REQUEST");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&big.len().to_string()) && message.contains("1024"),
        "{message}"
    );
    assert!(r.get("id").is_none(), "the line was not read: {r}");
    assert_eq!(c.response("good")["success"], true);
    // One over the limit split over many writes, too.
    for piece in big.as_bytes().chunks(100) {
        c.send_raw(piece);
    }
    c.send_raw(b"\n{\"type\":\"agent.list\",\"id\":\"good-again\"}\n");
    assert_eq!(
        code(&c.expect(|m| m["type"] == "response")),
        "INVALID_REQUEST"
    );
    assert_eq!(c.response("good-again")["success"], true);
    // Invalid UTF-8 spoils its line only.
    c.send_raw(b"{\"type\":\"agent.list\",\"id\":\"\xff\xfe\"}\n{\"type\":\"agent.list\",\"id\":\"utf8\"}\n");
    let r = c.expect(|m| m["type"] == "response");
    assert_eq!(code(&r), "INVALID_REQUEST");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("UTF-8"),
        "{r}"
    );
    assert_eq!(c.response("utf8")["success"], true);

    // The end of input: a whole line is still answered, a partial last
    // line is dropped and logged, and the connection closes.
    let mut p = ShardClient::socket(&path);
    let partial = br#"{"type":"agent.list","id":"partial"}"#;
    p.send_raw(b"{\"type\":\"agent.list\",\"id\":\"whole\"}\n");
    p.send_raw(partial);
    p.close_input();
    let rest = p.rest();
    let responses: Vec<&Value> = rest.iter().filter(|m| m["type"] == "response").collect();
    assert_eq!(responses.len(), 1, "{rest:#?}");
    assert_eq!(responses[0]["id"], "whole");
    wait_for("the partial line logged", DEADLINE, || {
        hub.log_text().contains(&format!(
            "ended inside a line; its {} bytes were dropped",
            partial.len()
        ))
    });
    // The first client was not disturbed.
    assert_eq!(c.request(json!({"type": "agent.list"}))["success"], true);
}

#[test]
fn the_socket_file_is_private_owned_and_removed_at_shutdown() {
    let top = TempDir::new("sock-file");
    // A data directory the hub creates (0700).
    let data = top.path().join("data");
    let mut hub = TestHub::start(&data, &[]);
    let path = shard_socket(&hub);
    let meta = std::fs::symlink_metadata(&path).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    // SAFETY: getuid has no preconditions.
    assert_eq!(meta.uid(), unsafe { libc::getuid() });
    let mode = std::fs::metadata(&data).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    assert!(hub
        .log_text()
        .contains(&format!("shard socket: {}", path.display())));
    // No temporary file is left beside it.
    let stray: Vec<String> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".sock") && n != "shard.sock")
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
    let _client = ShardClient::socket(&path);
    assert!(hub.terminate().success());
    assert!(!path.exists(), "the socket file outlived the hub");

    // Another path (relative to the data directory), or none. A panel
    // token guards the listeners, never the socket.
    let other = TempDir::new("sock-custom");
    let hub = hub_with(
        &other,
        json!({"shard": {"socket": "jobs.sock"}, "panel": {"token": "t0ken"}}),
    );
    assert_eq!(shard_refusal(hub.addr, "/shard/ws", &[]), 401);
    let mut c = ShardClient::socket(&other.path().join("jobs.sock"));
    assert_eq!(c.request(json!({"type": "agent.list"}))["success"], true);
    assert!(!other.path().join("shard.sock").exists());
    drop(hub);
    let off = TempDir::new("sock-off");
    let hub = hub_with(&off, json!({"shard": {"socket": ""}}));
    assert!(hub.log_text().contains("shard socket: off"));
    assert!(!off.path().join("shard.sock").exists());
}

#[test]
fn a_stale_socket_file_is_replaced_and_a_live_one_refuses_the_start() {
    let dir = TempDir::new("sock-stale");
    let path = dir.path().join("shard.sock");
    let serve = |dir: &TempDir| {
        let data = dir.path().display().to_string();
        run_bin(
            &[
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--tools-port",
                "0",
                "--data-dir",
                &data,
            ],
            dir.path(),
        )
    };
    // Somebody listens there: the start is refused, the file left alone.
    let live = UnixListener::bind(&path).unwrap();
    let out = serve(&dir);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_of(&out);
    assert!(
        err.contains("for the Shard socket (shard.socket)")
            && err.contains("another process is listening on it"),
        "{err}"
    );
    assert!(path.exists());
    // Nobody listens any more (a hub that died): replaced.
    drop(live);
    assert!(path.exists());
    let hub = TestHub::start(dir.path(), &[]);
    assert!(
        hub.log_text().contains("which nobody listened on"),
        "{}",
        hub.log_text()
    );
    let mut c = ShardClient::socket(&path);
    assert_eq!(c.request(json!({"type": "agent.list"}))["success"], true);
    // A second hub pointed at this hub's socket is refused; this one goes on.
    let second = TempDir::new("sock-second");
    let config = second.path().join("hub.test.jsonc");
    std::fs::write(
        &config,
        json!({"shard": {"socket": path}, "launcher": {"kind": "built-in"}}).to_string(),
    )
    .unwrap();
    let out = run_bin(
        &[
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--tools-port",
            "0",
            "--data-dir",
            second.path().to_str().unwrap(),
        ],
        second.path(),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_of(&out).contains("another process is listening"),
        "{}",
        stderr_of(&out)
    );
    assert_eq!(c.request(json!({"type": "agent.list"}))["success"], true);
    drop((c, hub));
    // A path that is not a socket is never replaced.
    std::fs::write(&path, "mine").unwrap();
    let out = serve(&dir);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_of(&out).contains("is not a socket"),
        "{}",
        stderr_of(&out)
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "mine");
}

#[test]
fn the_socket_has_no_keepalive_ping() {
    let dir = TempDir::new("sock-ping");
    let hub = hub_with(&dir, json!({"limits": {"pingIntervalMs": 200}}));
    let mut c = ShardClient::socket(&shard_socket(&hub));
    // A WebSocket client that never answers a ping is dropped once one
    // went unanswered: the keepalive has looked at every connection at
    // least twice by then.
    let mut silent = RawWs::open(hub.addr, "/shard/ws");
    silent.next_text(|v| v["type"] == "hello");
    let (ended, _) = silent.ends(DEADLINE);
    assert!(ended, "the silent WebSocket client was never dropped");
    // The socket client (no pong to give) is still served, and got only
    // JSON lines (a ping frame in the stream would not read as one).
    assert_eq!(c.request(json!({"type": "agent.list"}))["success"], true);
    assert!(c.take_inbox().is_empty());
    let drops = || hub.log_text().matches("did not answer a ping").count();
    wait_for("the drop logged", DEADLINE, || drops() > 0);
    assert_eq!(drops(), 1, "{}", hub.log_text());
}

#[test]
fn shard_stdio_exit_statuses() {
    let dir = TempDir::new("stdio-exit");
    // Usage: 2. No hub: 1.
    let out = run_bin(&["shard-stdio"], dir.path());
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
    let data = dir.path().display().to_string();
    let out = run_bin(
        &["shard-stdio", "--agent", "a", "--data-dir", &data],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_of(&out).contains("no hub is listening"),
        "{}",
        stderr_of(&out)
    );

    let mut hub = TestHub::start(dir.path(), &[]);
    // The bind refused: an unknown agent, an agent without a worker.
    let mut nope = ShardClient::spawn_stdio(&hub, &["--agent", "nope"]);
    assert_eq!(nope.stdio_exit(DEADLINE).and_then(|s| s.code()), Some(1));
    assert!(
        nope.stdio_stderr().contains("NOT_FOUND"),
        "{}",
        nope.stdio_stderr()
    );
    // --provider reaches the create: an unknown profile is refused there.
    let cwd = dir.path().join("project");
    std::fs::create_dir_all(&cwd).unwrap();
    let cwd = cwd.display().to_string();
    let mut bad = ShardClient::spawn_stdio(
        &hub,
        &["--create", "--cwd", &cwd, "--provider", "no-such-profile"],
    );
    assert_eq!(bad.stdio_exit(DEADLINE).and_then(|s| s.code()), Some(1));
    assert!(
        bad.stdio_stderr().contains("no-such-profile"),
        "{}",
        bad.stdio_stderr()
    );
    // So is a --cwd that is not a directory.
    let never = dir.path().join("never").display().to_string();
    let mut nowhere = ShardClient::spawn_stdio(&hub, &["--create", "--cwd", &never]);
    assert_eq!(nowhere.stdio_exit(DEADLINE).and_then(|s| s.code()), Some(1));
    assert!(
        nowhere.stdio_stderr().contains("INVALID_REQUEST")
            && nowhere.stdio_stderr().contains("not a directory"),
        "{}",
        nowhere.stdio_stderr()
    );
    // An agent whose worker does not run has it started by the bind (seed
    // §6.4: attach restores the runtime); the client reads its sync.
    create_session(&hub, "plain");
    let mut plain = ShardClient::spawn_stdio(&hub, &["--agent", "plain"]);
    let sync = plain.direct_event("sync");
    assert!(sync["capabilities"].is_array(), "{sync}");
    plain.close_input();
    assert_eq!(plain.stdio_exit(DEADLINE).and_then(|s| s.code()), Some(0));

    // --create: a new agent, announced to daemon clients, answering at once.
    let mut web = ShardClient::connect(&hub);
    let work = dir.path().join("made");
    std::fs::create_dir_all(&work).unwrap();
    let mut io = ShardClient::stdio(
        &hub,
        &[
            "--create",
            "--cwd",
            work.to_str().unwrap(),
            "--model",
            "mock-custom",
        ],
    );
    let sync = io.direct_event("sync");
    assert_eq!(sync["status"], "idle");
    let spawned = web.expect(|m| m["type"] == "agent_spawned");
    let agent = spawned["agent_id"].as_str().unwrap().to_string();
    assert_eq!(spawned["info"]["cwd"], work.to_str().unwrap());
    assert_eq!(spawned["info"]["model"], "mock-custom", "{spawned}");
    let id = io.command(json!({"type": "prompt", "message": "hello"}));
    assert_eq!(
        io.response(&id)["success"],
        true,
        "the worker was connected"
    );
    io.direct_event("turn_end");
    // The worker exits: the last line says so, and the status is 3.
    let id = io.command(json!({"type": "prompt", "message": "/crash"}));
    io.response(&id);
    let rest = io.rest();
    let last = rest.last().expect("a last line");
    assert_eq!(last["type"], "error", "{rest:#?}");
    assert_eq!(
        (last["end_reason"].as_str(), last["runtime_state"].as_str()),
        (Some("worker_exited"), Some("failed"))
    );
    assert_eq!(last["exit_code"], 3);
    assert_eq!(last["fatal"], true);
    assert!(last.get("agent_id").is_none());
    let status = io.stdio_exit(DEADLINE).expect("shard-stdio did not exit");
    assert_eq!(status.code(), Some(3), "stderr: {}", io.stdio_stderr());
    assert!(
        io.stdio_stderr().contains("worker exited"),
        "{}",
        io.stdio_stderr()
    );
    // A stop asked for ends it too.
    let other = running_agent(&hub, &mut web, &dir.path().join("other"));
    let mut io = ShardClient::stdio(&hub, &["--agent", &other]);
    io.direct_event("sync");
    let r = web.request(json!({"type": "agent.kill", "agent_id": other}));
    assert_eq!(r["success"], true, "{r}");
    let rest = io.rest();
    assert_eq!(
        rest.last().unwrap()["runtime_state"],
        "stopped",
        "{rest:#?}"
    );
    assert_eq!(io.stdio_exit(DEADLINE).and_then(|s| s.code()), Some(3));

    // The hub goes away (its ordinary shutdown, which stops the worker
    // first): 4, said on stderr.
    let third = running_agent(&hub, &mut web, &dir.path().join("third"));
    let mut io = ShardClient::stdio(&hub, &["--agent", &third]);
    io.direct_event("sync");
    drop(web);
    assert!(hub.terminate().success());
    let status = io.stdio_exit(DEADLINE).expect("shard-stdio did not exit");
    assert_eq!(status.code(), Some(4), "stderr: {}", io.stdio_stderr());
    assert!(
        io.stdio_stderr().contains("the hub closed the connection"),
        "{}",
        io.stdio_stderr()
    );
    let _ = agent;
}

#[test]
fn a_thousand_socket_clients_connect_and_leave() {
    let _heavy = heavy();
    let dir = TempDir::new("sock-thousand");
    let hub = TestHub::start(dir.path(), &[]);
    let path = shard_socket(&hub);
    let (threads, fds) = (hub.threads(), hub.fds());
    for round in 0..10 {
        let mut open: Vec<ShardClient> = (0..100).map(|_| ShardClient::socket(&path)).collect();
        for c in &mut open {
            assert_eq!(c.request(json!({"type": "agent.list"}))["success"], true);
        }
        if round == 0 {
            // 100 idle connections hold no thread each: their writers end
            // once idle, the poller waits on all of them.
            wait_for("idle writers to exit", DEADLINE, || {
                hub.threads_named("shard-writer") == 0
            });
            assert!(
                hub.threads() <= threads + 2,
                "{} threads with 100 idle clients (baseline {threads}): {:?}",
                hub.threads(),
                hub.thread_names()
            );
            assert!(hub.fds() >= fds + 100, "the connections are open");
        }
    }
    assert!(
        wait_until(DEADLINE, || hub.threads() <= threads && hub.fds() <= fds),
        "threads {} (baseline {threads}), descriptors {} (baseline {fds}): {:?}",
        hub.threads(),
        hub.fds(),
        hub.thread_names()
    );
    assert_eq!(
        ShardClient::socket(&path).request(json!({"type": "agent.list"}))["success"],
        true
    );
}
