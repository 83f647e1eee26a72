//! The Shard wire protocol (seed 004) over `/shard/ws`, driven by the
//! seed-only client (`util::shard`) against a real hub and real built-in
//! workers: hello and the envelope, every refusal code at its edge, the
//! agent lifecycle, prompts and their events, permissions raced by two
//! clients and answered from a panel, reattaching mid-prompt, modes and
//! models, compaction, the outbound budget and the keepalive.

use std::time::Duration;

use serde_json::{json, Value};

use crate::util::*;

/// A hub with one agent created over Shard, its worker running, and a
/// client attached interactively.
fn agent_hub(tag: &str, extra: &[&str]) -> (TempDir, TestHub, ShardClient, String) {
    let dir = TempDir::new(tag);
    let hub = TestHub::start(dir.path(), extra);
    let mut c = ShardClient::connect(&hub);
    let agent = c.create(&dir.path().join("work"));
    c.wait_runtime(&agent, "running");
    wait_session(&hub, &agent, |s| s["identity"]["state"] == "live");
    c.attach(&agent, "interactive");
    (dir, hub, c, agent)
}

fn code(response: &Value) -> &str {
    assert_eq!(response["success"], false, "{response}");
    response["error"]["code"].as_str().unwrap()
}

#[test]
fn hello_the_envelope_and_refusals_at_their_edges() {
    let dir = TempDir::new("shard-hello");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "plain");
    let mut c = ShardClient::open(
        hub.addr,
        "/shard/ws",
        &[("Sec-WebSocket-Protocol", "shard.v0")],
    )
    .unwrap();
    assert_eq!(c.protocol.as_deref(), Some("shard.v0"));
    assert_eq!(c.hello["protocol_version"], "0.1.0");
    assert!(c.hello["server_version"]
        .as_str()
        .unwrap()
        .starts_with("simplex-hub"));
    assert_eq!(c.hello["capabilities"], json!(["websocket"]));
    // Without an offer no subprotocol is named.
    assert_eq!(ShardClient::connect(&hub).protocol, None);

    // Not JSON, not an object: INVALID_REQUEST, and the connection stays.
    for bad in ["not json", "[1,2]", "\"x\"", "{}", r#"{"type": 5}"#] {
        c.send_text(bad);
        let r = c.expect(|m| m["type"] == "response");
        assert_eq!(code(&r), "INVALID_REQUEST", "{bad}: {r}");
    }
    let r = c.request(json!({"type": "no.such.thing"}));
    assert_eq!(code(&r), "INVALID_REQUEST");
    assert_eq!(r["command"], "no.such.thing");
    c.websocket()
        .send(tungstenite::Message::Binary(vec![1u8, 2].into()))
        .unwrap();
    let r = c.expect(|m| m["type"] == "response");
    assert_eq!(code(&r), "INVALID_REQUEST", "binary: {r}");
    // Correlation: the id and the command are echoed.
    let list = c.request(json!({"type": "agent.list"}));
    assert_eq!(list["command"], "agent.list");
    assert_eq!(list["success"], true);
    assert_eq!(list["data"]["agents"][0]["agent_id"], "plain");
    assert_eq!(list["data"]["agents"][0]["runtime_state"], "stopped");
    // A command without an id still gets its response.
    c.send(json!({"type": "agent.list"}));
    let r = c.expect(|m| m["type"] == "response" && m["command"] == "agent.list");
    assert!(r.get("id").is_none(), "{r}");

    // Per-agent commands without an attachment: NOT_ATTACHED.
    for msg in [
        json!({"type": "prompt", "message": "hi"}),
        json!({"type": "prompt", "agent_id": "plain", "message": "hi"}),
        json!({"type": "permission_response", "agent_id": "plain", "request_id": "x", "decision": "allow"}),
        json!({"type": "list_modes", "agent_id": "plain"}),
        json!({"type": "steer", "agent_id": "plain", "message": "x"}),
    ] {
        assert_eq!(code(&c.request(msg.clone())), "NOT_ATTACHED", "{msg}");
    }
    // Unknown agents: NOT_FOUND.
    for msg in [
        json!({"type": "agent.attach", "agent_id": "nope"}),
        json!({"type": "agent.status", "agent_id": "nope"}),
        json!({"type": "agent.kill", "agent_id": "nope"}),
        json!({"type": "agent.terminate", "agent_id": "nope"}),
    ] {
        assert_eq!(code(&c.request(msg.clone())), "NOT_FOUND", "{msg}");
    }
    assert_eq!(
        code(&c.request(json!({"type": "agent.detach", "agent_id": "plain"}))),
        "NOT_ATTACHED"
    );
    // What the worker protocol cannot do is refused, never faked.
    c.attach("plain", "interactive");
    for msg in [
        json!({"type": "steer", "agent_id": "plain", "message": "x"}),
        json!({"type": "prompt", "agent_id": "plain", "message": "x", "streaming_behavior": "steer"}),
        json!({"type": "set_model", "agent_id": "plain", "model": "mock"}),
        json!({"type": "session_op", "agent_id": "plain", "op": "fork", "args": {"from_entry_id": "e"}}),
        json!({"type": "list_reasoning_levels", "agent_id": "plain"}),
        json!({"type": "subagent.create", "parent_agent_id": "plain", "name": "n", "task": "t"}),
        json!({"type": "workspace.list"}),
    ] {
        let r = c.request(msg.clone());
        assert_eq!(code(&r), "INVALID_REQUEST", "{msg}: {r}");
        assert!(r["error"]["data"]["unsupported"].is_string(), "{msg}: {r}");
    }
    let r = c.request(
        json!({"type": "ui_response", "agent_id": "plain", "request_id": "u", "value": null}),
    );
    assert_eq!(code(&r), "NOT_FOUND");
    let r = c.request(json!({"type": "permission_response", "agent_id": "plain", "request_id": "x", "decision": "deny"}));
    assert_eq!(code(&r), "NOT_FOUND", "no such request: {r}");
    let r = c.request(json!({"type": "permission_response", "agent_id": "plain", "request_id": "x", "choice_id": "c"}));
    assert_eq!(code(&r), "INVALID_REQUEST");
    // The attach started the session's worker (seed §6.4): a prompt is
    // admitted.
    let r = c.request(json!({"type": "prompt", "agent_id": "plain", "message": "hi"}));
    assert_eq!(r["data"]["state"], "admitted", "{r}");
    let r = c.request(json!({"type": "agent.detach", "agent_id": "plain"}));
    assert_eq!(r["success"], true);
    assert_eq!(
        code(&c.request(json!({"type": "list_modes", "agent_id": "plain"}))),
        "NOT_ATTACHED"
    );
}

#[test]
fn the_panel_token_admits_shard_clients_to_the_protocol() {
    let dir = TempDir::new("shard-token");
    let hub = hub_with(&dir, json!({"panel": {"token": "s3cret-token-value"}}));
    assert_eq!(shard_refusal(hub.addr, "/shard/ws", &[]), 401);
    assert_eq!(shard_refusal(hub.addr, "/shard/ws?token=wrong", &[]), 401);
    let ok = ShardClient::open(hub.addr, "/shard/ws?token=s3cret-token-value", &[]).unwrap();
    assert_eq!(ok.hello["type"], "hello");
    ShardClient::open(
        hub.addr,
        "/shard/ws",
        &[("Authorization", "Bearer s3cret-token-value")],
    )
    .unwrap();
    assert_eq!(
        shard_refusal(
            hub.addr,
            "/shard/ws?token=s3cret-token-value",
            &[("Origin", "http://evil.example")]
        ),
        400,
        "an Origin outside the allowlist (the front door's rule)"
    );
    // No compression is negotiated, even when offered.
    let mut raw = RawWs::connect(
        hub.addr,
        "/shard/ws?token=s3cret-token-value",
        &[("Sec-WebSocket-Extensions", "permessage-deflate")],
    )
    .unwrap();
    let hello = raw.next_text(|v| v["type"] == "hello");
    assert_eq!(hello["protocol_version"], "0.1.0");
}

#[test]
fn an_agent_is_created_driven_and_terminated() {
    let dir = TempDir::new("shard-life");
    let hub = TestHub::start(dir.path(), &[]);
    let mut watcher = ShardClient::connect(&hub);
    let mut c = ShardClient::connect(&hub);
    let work = dir.path().join("work");
    let agent = c.create(&work);
    // Every connection hears of it.
    let spawned = watcher.event("agent_spawned", &agent);
    assert_eq!(spawned["info"]["cwd"], work.to_str().unwrap());
    assert_eq!(spawned["info"]["provider"], "mock");
    let info = c.wait_runtime(&agent, "running");
    assert_eq!(info["status"], "idle");
    assert!(info["created_at"].as_u64().unwrap() > 1_600_000_000_000);
    watcher.expect(|m| {
        m["type"] == "agent_status_changed"
            && m["agent_id"] == agent
            && m["runtime_state"] == "running"
    });
    wait_session(&hub, &agent, |s| s["identity"]["state"] == "live");
    let (attached, sync) = c.attach(&agent, "interactive");
    assert_eq!(attached["data"]["status"], "idle");
    assert_eq!(attached["data"]["info"]["agent_id"], agent.as_str());
    assert_eq!(sync["status"], "idle");
    assert_eq!(sync["mode"], "ask");
    assert_eq!(sync["live_window"]["messages"], json!([]));
    assert_eq!(sync["pending_requests"], json!([]));
    let caps = sync["capabilities"].as_array().unwrap();
    for cap in [
        "mode-catalog",
        "mode-switch",
        "model-catalog",
        "context-compact",
    ] {
        assert!(caps.contains(&json!(cap)), "{cap}: {sync}");
    }
    assert!(!caps.contains(&json!("model-switch")));
    assert!(!caps.contains(&json!("streaming-deltas")));

    // A prompt: accepted once the worker admitted it, then its turn.
    let id = c.prompt(&agent, "hello there");
    let r = c.response(&id);
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(r["data"]["state"], "admitted");
    let start = c.event("turn_start", &agent);
    let turn = start["turn_id"].as_str().unwrap().to_string();
    let status = c.event("status", &agent);
    assert_eq!(status["status"], "streaming");
    let done = c.event("message_complete", &agent);
    assert_eq!(done["message"]["role"], "assistant");
    assert_eq!(done["message"]["content"][0]["text"], "echo: hello there");
    let usage = c.event("usage", &agent);
    assert!(usage["input"].as_u64().unwrap() > 0);
    let end = c.event("turn_end", &agent);
    assert_eq!(end["turn_id"], turn.as_str());
    assert!(end["usage"]["output"].as_u64().unwrap() > 0);
    assert_eq!(c.event("status", &agent)["status"], "idle");
    // The overview: coarse, never the text.
    let activity = watcher.expect(|m| {
        m["type"] == "agent_activity" && m["agent_id"] == agent && m["phase"] == "thinking"
    });
    assert_eq!(activity["status"], "streaming");
    assert!(!activity.to_string().contains("hello there"), "{activity}");
    assert!(activity["timestamp"].as_u64().is_some());
    // The watcher is not attached: no conversation events.
    watcher.settle(Duration::from_millis(300));
    assert!(watcher.take_inbox().iter().all(|m| !matches!(
        m["type"].as_str(),
        Some("message_complete" | "turn_start" | "status")
    )));

    // A second attach (another client) gets the message in its window.
    let mut late = ShardClient::connect(&hub);
    let (_, sync) = late.attach(&agent, "observer");
    let window = sync["live_window"]["messages"].as_array().unwrap();
    assert_eq!(window.len(), 1, "{sync}");
    assert_eq!(window[0]["id"], done["message_id"]);
    assert_eq!(window[0]["content"][0]["text"], "echo: hello there");
    // An observer watches only.
    let r = late.request(json!({"type": "prompt", "agent_id": agent, "message": "x"}));
    assert_eq!(code(&r), "PERMISSION_DENIED");

    // Modes and models.
    let modes = c.request(json!({"type": "list_modes", "agent_id": agent}));
    assert_eq!(modes["data"]["active"], "ask");
    let names: Vec<&str> = modes["data"]["modes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ask", "approve", "deny"]);
    let models = c.request(json!({"type": "list_models", "agent_id": agent}));
    assert_eq!(models["data"]["active"]["id"], "mock");
    assert!(models["data"]["models"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["id"] == "mock"));
    assert!(!models.to_string().contains("api_key"), "{models}");
    let r = c.request(json!({"type": "set_mode", "agent_id": agent, "mode": "sideways"}));
    assert_eq!(code(&r), "NOT_FOUND");
    let r = c.request(json!({"type": "set_mode", "agent_id": agent, "mode": "deny"}));
    assert_eq!(r["data"], json!({"previous_mode": "ask", "mode": "deny"}));
    let changed = late.event("mode_changed", &agent);
    assert_eq!(
        (changed["previous_mode"].clone(), changed["mode"].clone()),
        (json!("ask"), json!("deny"))
    );
    // With `deny`, a tool call is refused by the worker without asking:
    // its result, and no `tool_call` (it never runs, seed §9.4).
    c.prompt(&agent, "/run echo never");
    let turn = c.through("turn_end", &agent);
    let tools: Vec<&Value> = turn
        .iter()
        .filter(|m| m["type"].as_str().unwrap().starts_with("tool_"))
        .collect();
    assert_eq!(tools.len(), 1, "{turn:#?}");
    assert_eq!(tools[0]["type"], "tool_result");
    assert_eq!(tools[0]["is_error"], true, "{}", tools[0]);
    assert_eq!(tools[0]["content"]["kind"], "error");
    c.expect(|m| m["type"] == "status" && m["agent_id"] == agent && m["status"] == "idle");
    // With `approve`, the worker runs it without asking: `tool_call` just
    // before its result.
    let r = c.request(json!({"type": "set_mode", "agent_id": agent, "mode": "approve"}));
    assert_eq!(r["data"]["mode"], "approve", "{r}");
    c.prompt(&agent, "/run echo approved");
    let turn = c.through("turn_end", &agent);
    let tools: Vec<&str> = turn
        .iter()
        .map(|m| m["type"].as_str().unwrap())
        .filter(|t| t.starts_with("tool_") || t.starts_with("permission_"))
        .collect();
    assert_eq!(tools, ["tool_call", "tool_result"], "{turn:#?}");
    let r = c.request(json!({"type": "set_mode", "agent_id": agent, "mode": "deny"}));
    assert_eq!(r["data"]["mode"], "deny", "{r}");
    c.expect(|m| m["type"] == "status" && m["agent_id"] == agent && m["status"] == "idle");
    c.take_inbox();

    // session_op list; compaction between turns.
    let r = c.request(json!({"type": "session_op", "agent_id": agent, "op": "list"}));
    assert_eq!(r["data"]["sessions"][0]["session_id"], agent.as_str());
    let id = c.command(json!({"type": "session_op", "agent_id": agent, "op": "compact"}));
    assert_eq!(c.event("status", &agent)["status"], "compacting");
    let compaction = c.event("compaction", &agent);
    assert!(compaction["index"].as_u64().is_some());
    let r = c.response(&id);
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(r["data"]["compacted"], true);
    assert_eq!(r["data"]["removed_turns"], 3);
    assert_eq!(c.event("status", &agent)["status"], "idle");
    // After the compaction the window starts over.
    let mut third = ShardClient::connect(&hub);
    let (_, sync) = third.attach(&agent, "observer");
    assert_eq!(sync["live_window"]["messages"], json!([]), "{sync}");
    assert_eq!(sync["live_window"]["compaction_index"], compaction["index"]);
    // Compacted, the conversation has no turns: a second compaction is the
    // no-op.
    let r = c.request(json!({"type": "session_op", "agent_id": agent, "op": "compact"}));
    assert_eq!(
        r["data"],
        json!({"compacted": false, "reason": "no_safe_cut"}),
        "{r}"
    );

    // terminate while idle: stops at once.
    let r = c.request(json!({"type": "agent.terminate", "agent_id": agent}));
    assert_eq!(r["data"]["deferred"], false, "{r}");
    c.wait_runtime(&agent, "stopped");
    watcher.expect(|m| {
        m["type"] == "agent_status_changed"
            && m["agent_id"] == agent
            && m["runtime_state"] == "stopped"
    });
}

#[test]
fn a_busy_agent_refuses_and_queues_and_terminates_after_its_run() {
    let (_dir, hub, mut c, agent) = agent_hub("shard-busy", &[]);
    // An empty conversation has nothing to compact: a successful no-op
    // (seed §9.2), nothing sent to the worker.
    let r = c.request(json!({"type": "session_op", "agent_id": agent, "op": "compact"}));
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(
        r["data"],
        json!({"compacted": false, "reason": "no_safe_cut"}),
        "{r}"
    );
    let first = c.prompt(&agent, "/sleep 1500");
    assert_eq!(c.response(&first)["success"], true);
    c.event("turn_start", &agent);
    // Mid-turn: a plain prompt and a compaction conflict...
    let r = c.request(json!({"type": "prompt", "agent_id": agent, "message": "now"}));
    assert_eq!(code(&r), "CONFLICT", "{r}");
    let r = c.request(json!({"type": "session_op", "agent_id": agent, "op": "compact"}));
    assert_eq!(code(&r), "CONFLICT", "{r}");
    // ...a follow-up queues behind the run, and is accepted at once (seed
    // §9.2: success means accepted or queued), before the run ends.
    let follow = c.command(
        json!({"type": "prompt", "agent_id": agent, "message": "later",
        "streaming_behavior": "follow_up"}),
    );
    let r = c.response(&follow);
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(r["data"]["state"], "queued", "{r}");
    assert!(r["data"]["request_id"].is_string(), "{r}");
    assert!(
        c.take_inbox().iter().all(|m| m["type"] != "turn_end"),
        "answered only after the run it waits behind"
    );
    let first_end = c.event("turn_end", &agent);
    let second = c.event("turn_start", &agent);
    assert_ne!(second["turn_id"], first_end["turn_id"]);
    c.event("turn_end", &agent);

    // terminate during a run is deferred until the run ends.
    c.prompt(&agent, "/sleep 1000");
    c.event("turn_start", &agent);
    let r = c.request(json!({"type": "agent.terminate", "agent_id": agent}));
    assert_eq!(r["data"]["deferred"], true, "{r}");
    let end = c.event("turn_end", &agent);
    assert!(end["turn_id"].is_string());
    c.wait_runtime(&agent, "stopped");
    let s = get_session(&hub, &agent);
    assert_eq!(s["process"]["state"], "exited", "{s}");
}

/// A prompt's whole turn: its response, then the events through its
/// `turn_end`; returns the turn's messages.
fn turn(c: &mut ShardClient, agent: &str, text: &str) -> Vec<Value> {
    let id = c.prompt(agent, text);
    let r = c.response(&id);
    assert_eq!(r["success"], true, "{r}");
    c.through("turn_end", agent)
}

fn epoch(sync: &Value) -> u64 {
    sync["runtime_epoch"].as_u64().unwrap()
}

#[test]
fn runtimes_start_on_demand_and_come_back_after_terminate_kill_and_crash() {
    let dir = TempDir::new("shard-restore");
    let hub = TestHub::start(dir.path(), &[]);
    let mut c = ShardClient::connect(&hub);
    // Created, attached and prompted at once: the attach waits for the
    // runtime's start (seed §6.4), so its sync is the ready runtime's.
    let agent = c.create(&dir.path().join("work"));
    let (_, sync) = c.attach(&agent, "interactive");
    assert!(
        sync["capabilities"]
            .as_array()
            .unwrap()
            .contains(&json!("context-compact")),
        "{sync}"
    );
    let first = turn(&mut c, &agent, "one");
    assert!(first.iter().any(|m| m["type"] == "message_complete"));

    // Terminated: the agent stays, and the next prompt restores its
    // runtime (a new generation, with the conversation the worker kept).
    let r = c.request(json!({"type": "agent.terminate", "agent_id": agent}));
    assert_eq!(r["data"]["deferred"], false, "{r}");
    c.wait_runtime(&agent, "stopped");
    let again = turn(&mut c, &agent, "two");
    assert!(
        again.iter().any(|m| m["type"] == "turn_start"),
        "{again:#?}"
    );
    // The attachment got the new runtime's sync when it became ready.
    let fresh = again
        .iter()
        .find(|m| m["type"] == "sync")
        .unwrap_or_else(|| panic!("no fresh sync: {again:#?}"));
    assert!(epoch(fresh) > epoch(&sync), "{fresh} after {sync}");
    assert_eq!(fresh["capabilities"], sync["capabilities"]);
    c.wait_runtime(&agent, "running");

    // Killed: a new client's attach restores it.
    let r = c.request(json!({"type": "agent.kill", "agent_id": agent, "force": true}));
    assert_eq!(r["success"], true, "{r}");
    c.wait_runtime(&agent, "stopped");
    let mut other = ShardClient::connect(&hub);
    let (_, resync) = other.attach(&agent, "interactive");
    assert!(epoch(&resync) > epoch(&sync), "{resync} after {sync}");
    assert_eq!(resync["status"], "idle", "{resync}");
    let info = other.wait_runtime(&agent, "running");
    assert_eq!(info["agent_id"], agent.as_str());
    // The conversation survived both restarts (the worker's persistence).
    let texts = resync["live_window"]["messages"].to_string();
    assert!(texts.contains("echo: two"), "{resync}");

    // A crash mid-turn: the turn ends after a fatal error, on every
    // attached client; new work restores the runtime.
    let id = other.prompt(&agent, "/crash");
    assert_eq!(other.response(&id)["success"], true);
    for client in [&mut c, &mut other] {
        let crashed = client.through("turn_end", &agent);
        let error = crashed
            .iter()
            .find(|m| m["type"] == "error")
            .unwrap_or_else(|| panic!("{crashed:#?}"));
        assert_eq!(error["fatal"], true, "{error}");
        assert_eq!(error["code"], "INTERNAL_ERROR", "{error}");
    }
    let after = turn(&mut other, &agent, "three");
    assert!(
        after.iter().any(|m| m["type"] == "message_complete"),
        "{after:#?}"
    );
}

#[test]
fn an_idle_runtime_is_reaped_and_restored_by_new_work() {
    let dir = TempDir::new("shard-reap");
    let hub = hub_with(&dir, json!({"shard": {"runtimeIdleMs": 400}}));
    let mut c = ShardClient::connect(&hub);
    let agent = c.create(&dir.path().join("work"));
    c.attach(&agent, "interactive");
    // A turn longer than the idle period is active throughout: never
    // reaped (seed §6.4: active states never expire).
    let long = turn(&mut c, &agent, "/sleep 1500");
    assert!(long.iter().all(|m| m["type"] != "error"), "{long:#?}");
    assert!(long.iter().any(|m| m["type"] == "message_complete"));
    // Idle, it is stopped after the period; the agent stays.
    let info = c.wait_runtime(&agent, "stopped");
    assert_eq!(info["status"], "idle", "{info}");
    assert!(hub.log_text().contains("shard.runtimeIdleMs"));
    // New work restores it.
    let after = turn(&mut c, &agent, "back");
    assert!(
        after.iter().any(|m| m["type"] == "message_complete"),
        "{after:#?}"
    );
}

#[test]
fn abort_kill_and_an_unknown_outcome() {
    let (_dir, hub, mut c, agent) = agent_hub("shard-abort", &[]);
    let id = c.prompt(&agent, "/sleep 20000");
    c.response(&id);
    c.event("turn_start", &agent);
    let r = c.request(json!({"type": "abort", "agent_id": agent}));
    assert_eq!(r["success"], true, "{r}");
    c.event("turn_end", &agent);
    let finished = wait_event(&hub, &agent, |e| e["event"] == "run_finished");
    assert_eq!(finished["data"]["status"], "cancelled");
    // A follow-up queued behind a run whose worker is killed never runs:
    // accepted when queued, its unknown outcome is an error event.
    let id = c.prompt(&agent, "/sleep 20000");
    c.response(&id);
    c.event("turn_start", &agent);
    let queued = c.command(json!({"type": "prompt", "agent_id": agent, "message": "q",
        "streaming_behavior": "follow_up"}));
    let r = c.response(&queued);
    assert_eq!(r["data"]["state"], "queued", "{r}");
    let request_id = r["data"]["request_id"].clone();
    wait_session(&hub, &agent, |s| {
        s["requests"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["state"] == "sent")
    });
    let r = c.request(json!({"type": "agent.kill", "agent_id": agent, "force": true}));
    assert_eq!(r["success"], true, "{r}");
    let lost = c.expect(|m| m["type"] == "error" && m["request_id"] == request_id);
    assert_eq!(lost["code"], "INTERNAL_ERROR", "{lost}");
    assert_eq!(lost["state"], "unknown", "{lost}");
    assert_eq!(lost["fatal"], false, "{lost}");
    c.wait_runtime(&agent, "stopped");
}

/// The permission request a `/run` prompt opens, as `client` sees it.
fn requested(client: &mut ShardClient, agent: &str) -> Value {
    let request = client.event("permission_request", agent);
    assert_eq!(request["tool_name"], "run_command");
    assert_eq!(request["options"], json!(["allow", "allow_always", "deny"]));
    assert!(request["prompt"].is_string());
    assert!(request["details"].is_array());
    request
}

#[test]
fn two_clients_race_a_permission_and_both_see_the_one_resolution() {
    let (dir, hub, mut a, agent) = agent_hub("shard-race", &[]);
    let mut b = ShardClient::connect(&hub);
    b.attach(&agent, "interactive");
    let mut watcher = ShardClient::connect(&hub);
    watcher.attach(&agent, "observer");
    let marker = dir.path().join("work/marker.txt");
    a.prompt(&agent, "/run echo ran > marker.txt && echo tool-output");
    let ra = requested(&mut a, &agent);
    let rb = requested(&mut b, &agent);
    let request_id = ra["request_id"].as_str().unwrap().to_string();
    assert_eq!(rb["request_id"], request_id.as_str());
    // Broadcast to every attached client (seed §6.3), the observer too.
    let rw = requested(&mut watcher, &agent);
    assert_eq!(rw["request_id"], request_id.as_str());
    assert_eq!(
        ra["input"]["command"],
        "echo ran > marker.txt && echo tool-output"
    );
    // (The worker's confirmation socket may overtake its event socket, so
    // the request can come before the turn's first events.)
    a.expect(|m| m["type"] == "status" && m["status"] == "waiting_for_permission");
    assert!(!marker.exists(), "ran before the answer");
    // Both answer at once; the first valid response wins, the other is
    // discarded silently.
    let ia = a.command(json!({"type": "permission_response", "agent_id": agent,
        "request_id": request_id, "decision": "allow"}));
    let ib = b.command(json!({"type": "permission_response", "agent_id": agent,
        "request_id": request_id, "decision": "deny"}));
    let (ra, rb) = (a.response(&ia), b.response(&ib));
    assert_eq!(ra["success"], true, "{ra}");
    assert_eq!(rb["success"], true, "{rb}");
    let applied = [ra["data"]["applied"].clone(), rb["data"]["applied"].clone()];
    assert_eq!(
        applied.iter().filter(|v| **v == json!(true)).count(),
        1,
        "{applied:?}"
    );
    let winner = if applied[0] == json!(true) {
        "allow"
    } else {
        "deny"
    };
    // `tool_call` means the call is about to run (seed §9.4): after an
    // allow and before its result, never for a denied call.
    let mut results = Vec::new();
    for client in [&mut a, &mut b, &mut watcher] {
        let turn = client.through("turn_end", &agent);
        let order: Vec<&str> = turn
            .iter()
            .map(|m| m["type"].as_str().unwrap())
            .filter(|t| t.starts_with("permission_") || t.starts_with("tool_"))
            .collect();
        if winner == "allow" {
            assert_eq!(order, ["permission_resolved", "tool_call", "tool_result"]);
        } else {
            assert_eq!(order, ["permission_resolved", "tool_result"]);
        }
        let resolved = turn
            .iter()
            .find(|m| m["type"] == "permission_resolved")
            .unwrap();
        assert_eq!(resolved["request_id"], request_id.as_str());
        assert_eq!(resolved["decision"], winner);
        assert_eq!(resolved["source"], "shard");
        if let Some(call) = turn.iter().find(|m| m["type"] == "tool_call") {
            assert_eq!(call["name"], "run_command");
            assert_eq!(call["read_only"], false);
            assert_eq!(
                call["args"]["command"],
                "echo ran > marker.txt && echo tool-output"
            );
        }
        let result = turn.iter().find(|m| m["type"] == "tool_result").unwrap();
        assert!(result["tool_call_id"].is_string());
        results.push(result.clone());
    }
    let result = &results[0];
    if winner == "allow" {
        assert_eq!(result["is_error"], false, "{result}");
        assert_eq!(
            stdout_block(result["content"]["text"].as_str().unwrap()),
            Some("tool-output\n")
        );
        assert_eq!(std::fs::read_to_string(&marker).unwrap().trim(), "ran");
    } else {
        assert_eq!(result["is_error"], true, "{result}");
        assert!(!marker.exists());
    }
    // Exactly one request and one resolution each.
    for client in [&mut a, &mut b, &mut watcher] {
        client.settle(Duration::from_millis(300));
        let rest = client.take_inbox();
        assert!(
            rest.iter()
                .all(|m| m["type"] != "permission_resolved" && m["type"] != "permission_request"),
            "{rest:#?}"
        );
    }
    // Late answers are still discarded silently; the observer may not.
    let r = a.request(json!({"type": "permission_response", "agent_id": agent,
        "request_id": request_id, "decision": "deny"}));
    assert_eq!(r["data"]["applied"], false, "{r}");
    let r = watcher.request(json!({"type": "permission_response", "agent_id": agent,
        "request_id": request_id, "decision": "deny"}));
    assert_eq!(code(&r), "PERMISSION_DENIED");
}

#[test]
fn a_client_drops_mid_prompt_reattaches_and_answers() {
    let (_dir, hub, mut a, agent) = agent_hub("shard-reattach", &[]);
    a.prompt(&agent, "/run echo again");
    let first = requested(&mut a, &agent);
    let request_id = first["request_id"].as_str().unwrap().to_string();
    drop(a);
    // An observer's sync lists the pending request, and it is shown again
    // after it, as to anyone attached (it cannot answer it).
    let mut observer = ShardClient::connect(&hub);
    let (_, sync) = observer.attach(&agent, "observer");
    assert_eq!(
        sync["pending_requests"][0]["request_id"],
        request_id.as_str()
    );
    let shown = observer.event("permission_request", &agent);
    assert_eq!(shown["request_id"], request_id.as_str());
    // Reconnected: the attach response, then the sync (waiting, the request
    // pending), then the request shown again; answering it works.
    let mut b = ShardClient::connect(&hub);
    let (response, sync) = b.attach(&agent, "interactive");
    assert_eq!(response["data"]["status"], "waiting_for_permission");
    assert_eq!(sync["status"], "waiting_for_permission");
    let pending = sync["pending_requests"].as_array().unwrap();
    assert_eq!(pending.len(), 1, "{sync}");
    assert_eq!(pending[0]["request_id"], request_id.as_str());
    assert_eq!(pending[0]["type"], "permission_request");
    let again = b.expect(|m| m["agent_id"] == agent && m["type"] != "agent_activity");
    assert_eq!(again["type"], "permission_request", "{again}");
    assert_eq!(again["request_id"], request_id.as_str());
    let r = b.request(json!({"type": "permission_response", "agent_id": agent,
        "request_id": request_id, "decision": "allow", "reason": "fine"}));
    assert_eq!(r["data"]["applied"], true, "{r}");
    let resolved = b.event("permission_resolved", &agent);
    assert_eq!(resolved["decision"], "allow");
    assert_eq!(
        observer.event("permission_resolved", &agent)["request_id"],
        request_id.as_str()
    );
    let result = b.event("tool_result", &agent);
    assert_eq!(result["is_error"], false, "{result}");
    // Shown once: no second request after the answer.
    observer.settle(Duration::from_millis(200));
    assert!(observer
        .take_inbox()
        .iter()
        .all(|m| m["type"] != "permission_request"));
}

#[test]
fn a_panel_and_a_shard_client_watch_one_session() {
    let (_dir, hub, mut c, agent) = agent_hub("shard-panel", &[]);
    let mut panel = panel(&hub);
    send_json(
        &mut panel,
        json!({"v": 1, "type": "subscribe", "session": agent, "since": 0}),
    );
    next_of(&mut panel, "subscribed");
    c.prompt(&agent, "/run echo both");
    let request = requested(&mut c, &agent);
    let cid = request["request_id"].as_str().unwrap().to_string();
    // The panel sees the same confirmation and answers it.
    let open = ws_read_until(&mut panel, |v| {
        v["type"] == "confirmation" && v["open"] == true
    });
    assert_eq!(open["confirmation"]["confirmation_id"], cid.as_str());
    send_json(
        &mut panel,
        json!({"v": 1, "type": "confirmation", "session": agent, "confirmation_id": cid,
            "decision": "denied", "reason": "not now"}),
    );
    let resolved = c.event("permission_resolved", &agent);
    assert_eq!(resolved["request_id"], cid.as_str());
    assert_eq!(resolved["decision"], "deny");
    assert_eq!(resolved["source"], "panel");
    // A Shard answer after the panel's is discarded silently.
    let r = c.request(json!({"type": "permission_response", "agent_id": agent,
        "request_id": cid, "decision": "allow"}));
    assert_eq!(r["data"]["applied"], false, "{r}");
    assert_eq!(c.event("tool_result", &agent)["is_error"], true);
    // A prompt from the panel plays out on the Shard client too.
    send_json(
        &mut panel,
        json!({"v": 1, "type": "input", "session": agent,
            "content": [{"type": "text", "modality": "text", "raw": "from the panel"}]}),
    );
    let done = c.expect(|m| {
        m["type"] == "message_complete" && m.to_string().contains("echo: from the panel")
    });
    assert_eq!(done["agent_id"], agent.as_str());
    let event = ws_read_until(&mut panel, |v| {
        v["type"] == "event"
            && v["envelope"]["event"] == "model_response"
            && v.to_string().contains("echo: from the panel")
    });
    assert_eq!(event["session"], agent.as_str());
}

#[test]
fn an_unanswered_prompt_resolves_as_deny_with_its_reason() {
    let dir = TempDir::new("shard-deadline");
    let hub = hub_with(
        &dir,
        json!({"worker": {"confirmationTimeoutMs": 1500}, "limits": {"confirmIdentityHoldMs": 500}}),
    );
    let mut c = ShardClient::connect(&hub);
    let agent = c.create(&dir.path().join("work"));
    wait_session(&hub, &agent, |s| s["identity"]["state"] == "live");
    c.attach(&agent, "interactive");
    c.prompt(&agent, "/run echo late");
    let request = requested(&mut c, &agent);
    let resolved = c.event("permission_resolved", &agent);
    assert_eq!(resolved["request_id"], request["request_id"]);
    assert_eq!(resolved["decision"], "deny");
    let source = resolved["source"].as_str().unwrap();
    assert!(["deadline", "disconnected"].contains(&source), "{resolved}");
    // The call never ran: its result, and no `tool_call` (seed §9.4).
    let turn = c.through("turn_end", &agent);
    let result = turn.iter().find(|m| m["type"] == "tool_result").unwrap();
    assert_eq!(result["is_error"], true);
    assert!(turn.iter().all(|m| m["type"] != "tool_call"), "{turn:#?}");
}

#[test]
fn a_request_no_client_can_answer_is_denied_by_the_headless_path() {
    let (dir, hub, mut c, agent) = agent_hub("shard-headless", &[]);
    // The interactive client queues a tool call behind a run, then leaves;
    // only an observer is attached when the call asks for permission.
    let first = c.prompt(&agent, "/sleep 1000");
    assert_eq!(c.response(&first)["success"], true);
    let queued = c.command(json!({"type": "prompt", "agent_id": agent,
        "message": "/run echo ran > marker.txt", "streaming_behavior": "follow_up"}));
    assert_eq!(c.response(&queued)["data"]["state"], "queued");
    let r = c.request(json!({"type": "agent.detach", "agent_id": agent}));
    assert_eq!(r["success"], true, "{r}");
    let mut observer = ShardClient::connect(&hub);
    observer.attach(&agent, "observer");
    // Seed §6.3: no interactive responder anywhere, so the daemon answers
    // deny with source "headless"; the call never runs (no tool_call).
    let request = observer.event("permission_request", &agent);
    // The sleeping run's end, then the queued one's.
    observer.through("turn_end", &agent);
    let turn = observer.through("turn_end", &agent);
    let resolved = turn
        .iter()
        .find(|m| m["type"] == "permission_resolved")
        .unwrap_or_else(|| panic!("{turn:#?}"));
    assert_eq!(resolved["request_id"], request["request_id"]);
    assert_eq!(resolved["decision"], "deny");
    assert_eq!(resolved["source"], "headless");
    assert!(turn.iter().all(|m| m["type"] != "tool_call"), "{turn:#?}");
    let result = turn.iter().find(|m| m["type"] == "tool_result").unwrap();
    assert_eq!(result["is_error"], true);
    assert!(!dir.path().join("work/marker.txt").exists());
}

#[test]
fn a_headless_childs_approvals_are_answerable_and_its_conversation_is_not() {
    let dir = TempDir::new("shard-child");
    let hub = TestHub::start(dir.path(), &[]);
    let child = fork_child(&hub);
    let mut c = ShardClient::connect(&hub);
    let list = c.request(json!({"type": "agent.list"}));
    let info = list["data"]["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent_id"] == child.as_str())
        .cloned()
        .unwrap();
    assert_eq!(info["parent_agent_id"], "p");
    assert_eq!(
        info["cwd"], "",
        "a child's launch details are the hub's: {info}"
    );
    let (_, sync) = c.attach(&child, "interactive");
    assert_eq!(sync["capabilities"], json!([]));
    for msg in [
        json!({"type": "prompt", "agent_id": child, "message": "hi"}),
        json!({"type": "abort", "agent_id": child}),
        json!({"type": "set_mode", "agent_id": child, "mode": "approve"}),
        json!({"type": "session_op", "agent_id": child, "op": "compact"}),
        json!({"type": "list_models", "agent_id": child}),
    ] {
        assert_eq!(code(&c.request(msg.clone())), "PERMISSION_DENIED", "{msg}");
    }
    send_to_child(&hub, &child, "/run echo child");
    let request = requested(&mut c, &child);
    let r = c.request(json!({"type": "permission_response", "agent_id": child,
        "request_id": request["request_id"], "decision": "allow"}));
    assert_eq!(r["data"]["applied"], true, "{r}");
    let resolved = c.event("permission_resolved", &child);
    assert_eq!(resolved["source"], "shard");
    // A child's conversation is its parent's: no transcript events.
    c.settle(Duration::from_millis(500));
    assert!(c
        .take_inbox()
        .iter()
        .all(|m| !matches!(m["type"].as_str(), Some("message_complete" | "tool_result"))));
}

#[test]
fn a_childs_request_goes_to_its_parents_interactive_client_or_is_denied_headless() {
    let dir = TempDir::new("shard-delegate");
    let hub = TestHub::start(dir.path(), &[]);
    let child = fork_child(&hub);
    // Only observers, of the child and of its parent: nobody interactive
    // anywhere in the family, so the daemon denies (seed §6.3).
    let mut watcher = ShardClient::connect(&hub);
    watcher.attach(&child, "observer");
    watcher.attach("p", "observer");
    send_to_child(&hub, &child, "/run echo never");
    let request = watcher.event("permission_request", &child);
    let resolved = watcher.event("permission_resolved", &child);
    assert_eq!(resolved["request_id"], request["request_id"]);
    assert_eq!(resolved["decision"], "deny");
    assert_eq!(resolved["source"], "headless");

    // An interactive client of the parent: the child's request is shown
    // to it with the child's agent_id, and survives its reconnect.
    let mut c = ShardClient::connect(&hub);
    c.attach("p", "interactive");
    send_to_child(&hub, &child, "/run echo delegated");
    let request = c.event("permission_request", &child);
    let request_id = request["request_id"].clone();
    assert_eq!(request["tool_name"], "run_command");
    drop(c);
    let mut c = ShardClient::connect(&hub);
    let (_, sync) = c.attach("p", "interactive");
    let pending = sync["pending_requests"].as_array().unwrap();
    assert!(
        pending
            .iter()
            .any(|r| r["request_id"] == request_id && r["agent_id"] == child.as_str()),
        "{sync}"
    );
    let shown = c.event("permission_request", &child);
    assert_eq!(shown["request_id"], request_id);
    // An observer of the parent is not a delegate.
    let mut parent_watcher = ShardClient::connect(&hub);
    parent_watcher.attach("p", "observer");
    let r = parent_watcher.request(json!({"type": "permission_response", "agent_id": child,
        "request_id": request_id, "decision": "deny"}));
    assert_eq!(code(&r), "NOT_ATTACHED", "{r}");
    // The delegate answers for the child without being attached to it.
    let r = c.request(json!({"type": "permission_response", "agent_id": child,
        "request_id": request_id, "decision": "allow"}));
    assert_eq!(r["data"]["applied"], true, "{r}");
    let resolved = c.event("permission_resolved", &child);
    assert_eq!(resolved["decision"], "allow");
    assert_eq!(resolved["source"], "shard");
    let seen = watcher.event("permission_resolved", &child);
    assert_eq!(seen["request_id"], request_id);
}

/// A `/run` prompt's turn, answered: the messages through its `turn_end`.
fn run_turn(c: &mut ShardClient, agent: &str, command: &str) -> Vec<Value> {
    turn(c, agent, &format!("/run {command}"))
}

#[test]
fn allow_always_grants_that_exact_call_to_that_agent_across_restarts() {
    let dir = TempDir::new("shard-grant");
    let hub = TestHub::start(dir.path(), &[]);
    let mut c = ShardClient::connect(&hub);
    let agent = c.create(&dir.path().join("work"));
    let other = c.create(&dir.path().join("work"));
    c.attach(&agent, "interactive");
    c.attach(&other, "interactive");

    // Asked once, answered allow_always (offered in options).
    let id = c.prompt(&agent, "/run echo granted");
    let request = requested(&mut c, &agent);
    assert_eq!(request["options"], json!(["allow", "allow_always", "deny"]));
    let r = c.request(json!({"type": "permission_response", "agent_id": agent,
        "request_id": request["request_id"], "decision": "allow_always"}));
    assert_eq!(r["data"]["applied"], true, "{r}");
    assert_eq!(c.response(&id)["success"], true);
    let first = c.through("turn_end", &agent);
    let resolved = first
        .iter()
        .find(|m| m["type"] == "permission_resolved")
        .unwrap();
    assert_eq!(resolved["decision"], "allow_always");
    assert_eq!(resolved["source"], "shard");

    // The same call again: allowed by the grant, never asked.
    let again = run_turn(&mut c, &agent, "echo granted");
    let kinds: Vec<&str> = again
        .iter()
        .map(|m| m["type"].as_str().unwrap())
        .filter(|t| t.starts_with("permission_") || t.starts_with("tool_"))
        .collect();
    assert_eq!(
        kinds,
        ["permission_resolved", "tool_call", "tool_result"],
        "{again:#?}"
    );
    let resolved = &again[again
        .iter()
        .position(|m| m["type"] == "permission_resolved")
        .unwrap()];
    assert_eq!(resolved["decision"], "allow");
    assert_eq!(resolved["source"], "grant");
    // Another call, and the same call of another agent, are asked.
    c.prompt(&agent, "/run echo other");
    let asked = requested(&mut c, &agent);
    c.request(json!({"type": "permission_response", "agent_id": agent,
        "request_id": asked["request_id"], "decision": "deny"}));
    c.through("turn_end", &agent);
    c.prompt(&other, "/run echo granted");
    let asked = requested(&mut c, &other);
    c.request(json!({"type": "permission_response", "agent_id": other,
        "request_id": asked["request_id"], "decision": "deny"}));
    c.through("turn_end", &other);

    // Listed in a sync and through the JSON API.
    let mut watcher = ShardClient::connect(&hub);
    let (_, sync) = watcher.attach(&agent, "observer");
    assert_eq!(sync["grants"].as_array().unwrap().len(), 1, "{sync}");
    assert_eq!(sync["grants"][0]["tool_name"], "run_command");
    assert_eq!(
        sync["grants"][0]["input"],
        json!({"command": "echo granted"})
    );
    let listed = hub.get(&format!("/api/sessions/{agent}/grants")).json();
    let grant_id = listed["grants"][0]["grant_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(listed["grants"][0]["tool"], "run_command");
    let none = hub.get(&format!("/api/sessions/{other}/grants")).json();
    assert_eq!(none["grants"], json!([]));
    drop((c, watcher));

    // Kept across a hub restart.
    drop(hub);
    let hub = TestHub::start(dir.path(), &[]);
    let mut c = ShardClient::connect(&hub);
    let (_, sync) = c.attach(&agent, "interactive");
    assert_eq!(sync["grants"][0]["grant_id"], grant_id.as_str(), "{sync}");
    let after = run_turn(&mut c, &agent, "echo granted");
    assert!(
        after
            .iter()
            .any(|m| m["type"] == "permission_resolved" && m["source"] == "grant"),
        "{after:#?}"
    );

    // Revoked: asked again; an unknown grant is 404.
    let path = format!("/api/sessions/{agent}/grants/{grant_id}");
    let r = hub.request("DELETE", &path, &[], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    let r = hub.request("DELETE", &path, &[], b"");
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(r.json()["error"], "unknown_grant", "{}", r.text());
    c.prompt(&agent, "/run echo granted");
    requested(&mut c, &agent);
}

#[test]
fn a_client_past_the_outbound_budget_is_dropped_at_once() {
    let (_dir, hub, mut c, agent) = agent_hub("shard-budget", &[]);
    let mut bystander = ShardClient::connect(&hub);
    // One event larger than the 4 MiB budget ends the connection.
    c.prompt(&agent, "/big 4500000");
    assert!(c.ends_within(DEADLINE), "the client was not dropped");
    // Others are untouched, and the window of a new attach stays bounded.
    let r = bystander.request(json!({"type": "agent.list"}));
    assert_eq!(r["success"], true);
    wait_event(&hub, &agent, |e| e["event"] == "run_finished");
    let (_, sync) = bystander.attach(&agent, "observer");
    assert!(sync.to_string().len() < 512 * 1024, "the window is bounded");
}

#[test]
fn keepalive_pings_drop_a_silent_client() {
    let dir = TempDir::new("shard-ping");
    let hub = hub_with(&dir, json!({"limits": {"pingIntervalMs": 300}}));
    let mut silent = RawWs::open(hub.addr, "/shard/ws");
    silent.next_text(|v| v["type"] == "hello");
    let mut alive = ShardClient::connect(&hub);
    // The client that answers (tungstenite does, while it reads) is kept.
    let reader = std::thread::spawn(move || {
        alive.settle(Duration::from_millis(3500));
        alive.request(json!({"type": "agent.list"}))
    });
    // The silent client reads pings but never answers them.
    let (ended, _) = silent.ends(DEADLINE);
    assert!(
        ended,
        "a client that never answered a ping is still connected"
    );
    assert_eq!(reader.join().unwrap()["success"], true);
}

#[test]
fn daemon_shutdown_is_the_ordinary_graceful_shutdown() {
    let (_dir, mut hub, mut c, agent) = agent_hub("shard-shutdown", &[]);
    let id = c.prompt(&agent, "/sleep 1200");
    c.response(&id);
    c.event("turn_start", &agent);
    let r = c.request(json!({"type": "daemon.shutdown"}));
    assert_eq!(r["success"], true, "{r}");
    // Graceful: the run finishes before the hub goes.
    let end = c.event("turn_end", &agent);
    assert!(end["turn_id"].is_string());
    let status = wait_exit(&mut hub.child, DEADLINE).expect("the hub did not exit");
    assert!(status.success(), "{status:?}");
    assert!(hub.log_text().contains("shutdown requested by a client"));
}

#[test]
fn a_failed_runtime_is_announced_and_a_forced_shutdown_does_not_wait() {
    let (_dir, mut hub, mut c, agent) = agent_hub("shard-exit", &[]);
    let mut watcher = ShardClient::connect(&hub);
    c.prompt(&agent, "/crash");
    let exited = watcher.event("agent_exited", &agent);
    assert_eq!(exited["runtime_state"], "failed");
    assert_eq!(exited["exit_code"], 3, "{exited}");
    assert!(exited["reason"].as_str().unwrap().contains('3'), "{exited}");
    watcher.expect(|m| {
        m["type"] == "agent_status_changed" && m["agent_id"] == agent && m["status"] == "error"
    });
    assert_eq!(c.wait_runtime(&agent, "failed")["status"], "error");
    // A start again, a long run, and a forced shutdown that does not wait.
    let r = c.request(json!({"type": "agent.create", "cwd": "/tmp", "name": agent}));
    assert_eq!(code(&r), "CONFLICT", "the name is taken: {r}");
    let other = c.create(std::path::Path::new("/tmp"));
    wait_session(&hub, &other, |s| s["identity"]["state"] == "live");
    c.attach(&other, "interactive");
    let id = c.prompt(&other, "/sleep 30000");
    c.response(&id);
    c.event("turn_start", &other);
    let r = c.request(json!({"type": "daemon.shutdown", "force": true}));
    assert_eq!(r["success"], true, "{r}");
    let status = wait_exit(&mut hub.child, DEADLINE).expect("the hub did not exit");
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_worker_that_does_not_start_is_runtime_start_failed_and_the_agent_stays() {
    let dir = TempDir::new("shard-nostart");
    let hub = hub_with(
        &dir,
        json!({"launcher": {"kind": "command", "command": ["/nonexistent/worker"]}}),
    );
    let mut c = ShardClient::connect(&hub);
    let r = c.request(json!({"type": "agent.create", "cwd": "/tmp", "name": "lost"}));
    assert_eq!(code(&r), "RUNTIME_START_FAILED", "{r}");
    assert_eq!(r["error"]["data"]["agent_id"], "lost");
    let status = c.request(json!({"type": "agent.status", "agent_id": "lost"}));
    assert_eq!(status["data"]["agents"][0]["agent_id"], "lost", "{status}");
    // An attach tries the start again and fails the same way; the agent
    // stays for a retry (seed §6.4).
    let r = c.request(json!({"type": "agent.attach", "agent_id": "lost"}));
    assert_eq!(code(&r), "RUNTIME_START_FAILED", "{r}");
    assert_eq!(r["error"]["data"]["agent_id"], "lost", "{r}");
    let status = c.request(json!({"type": "agent.status", "agent_id": "lost"}));
    assert_eq!(status["data"]["agents"][0]["agent_id"], "lost", "{status}");
    let r = c.request(json!({"type": "agent.create", "cwd": "/tmp", "mode": "sometimes"}));
    assert_eq!(code(&r), "NOT_FOUND", "{r}");
    let r = c.request(json!({"type": "agent.create", "cwd": "/tmp", "session_id": "lost"}));
    assert_eq!(code(&r), "INVALID_REQUEST", "{r}");
    let r = c.request(json!({"type": "agent.create", "cwd": "/tmp", "session_id": "nope"}));
    assert_eq!(code(&r), "NOT_FOUND", "{r}");
    let r =
        c.request(json!({"type": "agent.create", "cwd": "/tmp", "provider": "no-such-profile"}));
    assert_eq!(code(&r), "INVALID_REQUEST", "{r}");
    // A cwd that is not a directory here is refused before anything is
    // made (seed §10.1: the daemon canonicalizes it).
    let missing = dir.path().join("no-such-dir");
    let r = c.request(json!({"type": "agent.create", "cwd": missing, "name": "nowhere"}));
    assert_eq!(code(&r), "INVALID_REQUEST", "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not a directory"),
        "{r}"
    );
    let r = c.request(json!({"type": "agent.status", "agent_id": "nowhere"}));
    assert_eq!(code(&r), "NOT_FOUND", "{r}");
}
