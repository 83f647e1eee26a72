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
    c.ws.send(tungstenite::Message::Binary(vec![1u8, 2].into()))
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
        json!({"type": "permission_response", "agent_id": "plain", "request_id": "x", "decision": "allow_always"}),
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
    // No worker: a prompt cannot be sent.
    let r = c.request(json!({"type": "prompt", "agent_id": "plain", "message": "hi"}));
    assert_eq!(code(&r), "CONFLICT", "{r}");
    let r = c.request(json!({"type": "agent.detach", "agent_id": "plain"}));
    assert_eq!(r["success"], true);
    assert_eq!(
        code(&c.request(json!({"type": "list_modes", "agent_id": "plain"}))),
        "NOT_ATTACHED"
    );
}

#[test]
fn the_panel_token_admits_shard_clients() {
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
        403
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
    // With `deny`, a tool call is refused by the worker without asking.
    c.prompt(&agent, "/run echo never");
    let result = c.event("tool_result", &agent);
    assert_eq!(result["is_error"], true, "{result}");
    assert_eq!(result["content"]["kind"], "error");
    c.event("turn_end", &agent);
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
    assert_eq!(r["data"]["removed_turns"], 2);
    assert_eq!(c.event("status", &agent)["status"], "idle");
    // After the compaction the window starts over.
    let mut third = ShardClient::connect(&hub);
    let (_, sync) = third.attach(&agent, "observer");
    assert_eq!(sync["live_window"]["messages"], json!([]), "{sync}");
    assert_eq!(sync["live_window"]["compaction_index"], compaction["index"]);

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
    let first = c.prompt(&agent, "/sleep 1500");
    assert_eq!(c.response(&first)["success"], true);
    c.event("turn_start", &agent);
    // Mid-turn: a plain prompt and a compaction conflict...
    let r = c.request(json!({"type": "prompt", "agent_id": agent, "message": "now"}));
    assert_eq!(code(&r), "CONFLICT", "{r}");
    let r = c.request(json!({"type": "session_op", "agent_id": agent, "op": "compact"}));
    assert_eq!(code(&r), "CONFLICT", "{r}");
    // ...a follow-up queues behind the run and is accepted when admitted.
    let follow = c.command(
        json!({"type": "prompt", "agent_id": agent, "message": "later",
        "streaming_behavior": "follow_up"}),
    );
    let first_end = c.event("turn_end", &agent);
    let r = c.response(&follow);
    assert_eq!(r["data"]["state"], "admitted", "{r}");
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
    // A follow-up queued behind a run whose worker is killed never gets
    // an answer: its outcome is unknown.
    let id = c.prompt(&agent, "/sleep 20000");
    c.response(&id);
    c.event("turn_start", &agent);
    let queued = c.command(json!({"type": "prompt", "agent_id": agent, "message": "q",
        "streaming_behavior": "follow_up"}));
    wait_session(&hub, &agent, |s| {
        s["requests"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["state"] == "sent")
    });
    let r = c.request(json!({"type": "agent.kill", "agent_id": agent, "force": true}));
    assert_eq!(r["success"], true, "{r}");
    let r = c.response(&queued);
    assert_eq!(code(&r), "INTERNAL_ERROR", "{r}");
    assert_eq!(r["error"]["data"]["state"], "unknown");
    c.wait_runtime(&agent, "stopped");
}
