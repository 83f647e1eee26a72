//! Built-in worker sessions against the Node hub's shapes: every panel
//! message and JSON API route they answer, and confirmations retired
//! without a decision.

use super::*;

#[test]
fn every_frame_and_response_has_the_node_hubs_shape() {
    let dir = TempDir::new("drift");
    let hub = hub_with(
        &dir,
        json!({"worker": {"stopTimeoutMs": 3000, "sigtermGraceMs": 2000, "sigkillGraceMs": 3000}}),
    );
    let mut drift = Drift::default();
    let d = &mut drift;

    // --- metadata, session list and creation over the JSON API
    let (_, meta) = api(d, &hub, "GET /api/meta", "GET", "/api/meta", None);
    d.expect(
        meta["provider_profiles"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p == "mock")),
        "meta: provider_profiles does not list the mock profile",
    );
    api(d, &hub, "GET /api/sessions", "GET", "/api/sessions", None);
    let route = "POST /api/sessions";
    api(
        d,
        &hub,
        route,
        "POST",
        "/api/sessions",
        Some(json!({"session": "s1"})),
    );
    api(
        d,
        &hub,
        route,
        "POST",
        "/api/sessions",
        Some(json!({"session": "s1"})),
    );
    api(
        d,
        &hub,
        route,
        "POST",
        "/api/sessions",
        Some(json!({"session": "bad id"})),
    );
    api(
        d,
        &hub,
        route,
        "POST",
        "/api/sessions",
        Some(json!({"session": "s9", "spec": {"nope": 1}})),
    );
    api(
        d,
        &hub,
        "GET /api/sessions/:id",
        "GET",
        "/api/sessions/s1",
        None,
    );
    api(
        d,
        &hub,
        "GET /api/sessions/:id",
        "GET",
        "/api/sessions/missing",
        None,
    );

    // --- a panel as the Node panel and its SDK speak: `v` left out
    let (mut a, welcome) = Panel::open(&hub, "panel A", d);
    d.expect(
        welcome["subscriptions"] == json!([]),
        "welcome: subscriptions is not an empty list",
    );
    a.ask(d, json!({"type": "ping"}), &["pong"]);
    a.ask(d, json!({"type": "list_sessions"}), &["sessions"]);
    a.ask(
        d,
        json!({"type": "create_session", "session": "s2"}),
        &["created"],
    );
    a.expect(d, "session s2", |f| {
        f["type"] == "session" && f["session"]["session_id"] == "s2"
    });
    let taken = a.ask(
        d,
        json!({"type": "create_session", "session": "s2"}),
        &["error"],
    );
    d.expect(
        taken["error"] == "session_exists",
        format!("create twice: {taken}"),
    );
    let (mut b, _) = Panel::open(&hub, "panel B", d);

    // --- subscriptions: legacy, and paged (this hub's and the Node hub's extension)
    let subscribed = a.ask(
        d,
        json!({"type": "subscribe", "session": "s1", "since": 0}),
        &["subscribed"],
    );
    d.expect(
        subscribed["logs"].is_array(),
        "subscribed: logs is not an array",
    );
    b.send(json!({"type": "subscribe", "session": "s1", "since": 0, "paged": true, "request_id": "page-1"}));
    b.expect(d, "final replay page", |f| {
        f["type"] == "subscribed" && f["replay_more"] == false
    });

    // --- worker control: a start through the panel, answered with the result
    let started = a.ask(
        d,
        json!({"type": "worker", "session": "s1", "action": "start"}),
        &["accepted", "error"],
    );
    d.expect(
        started["type"] == "accepted",
        format!("worker start: {started}"),
    );
    a.expect(d, "process frame", |f| {
        f["type"] == "process" && f["session"] == "s1"
    });
    wait_session(&hub, "s1", |s| s["identity"]["state"] == "live");
    a.expect(d, "connection frame", |f| {
        f["type"] == "connection" && f["connected"] == true
    });
    // a second start fails: worker_action_failed names action, session and result
    let again = a.ask(
        d,
        json!({"type": "worker", "session": "s1", "action": "start"}),
        &["accepted", "error"],
    );
    d.expect(
        again["error"] == "worker_action_failed",
        format!("second start: {again}"),
    );
    for key in ["action", "session", "result"] {
        d.expect(
            again.get(key).is_some(),
            format!("worker_action_failed has no top-level {key}: {again}"),
        );
    }

    // --- input: accepted, the request record, the run's events
    let accepted = a.ask(
        d,
        json!({"type": "input", "session": "s1", "request_id": "in-1",
            "content": [{"type": "text", "modality": "text", "raw": "hello"}]}),
        &["accepted", "error"],
    );
    d.expect(
        accepted["request_id"] == "in-1",
        format!("input: {accepted}"),
    );
    a.expect(d, "request frame", |f| f["type"] == "request");
    a.expect(d, "run_finished event", |f| {
        f["type"] == "event" && f["envelope"]["event"] == "run_finished"
    });
    a.expect(d, "admitted request", |f| {
        f["type"] == "request" && f["request"]["state"] == "admitted"
    });

    // --- history: a transient reply, stamped without consuming a sequence
    let before = events_of(d, &hub, "s1", "");
    let latest_before = before["latest"].as_u64().unwrap_or(0);
    a.ask(
        d,
        json!({"type": "history", "session": "s1", "request_id": "h-1", "start": 0, "step": 0, "limit": 10}),
        &["accepted", "error"],
    );
    let history = a.expect(d, "history event", |f| {
        f["type"] == "event" && f["envelope"]["event"] == "history"
    });
    d.expect(
        history["hub_seq"].as_u64() == Some(latest_before),
        format!(
            "history: hub_seq {} is not the current sequence {latest_before}",
            history["hub_seq"]
        ),
    );
    a.ask(
        d,
        json!({"type": "input", "session": "s1", "request_id": "in-2",
            "content": [{"type": "text", "modality": "text", "raw": "again"}]}),
        &["accepted", "error"],
    );
    a.expect(d, "second run_finished", |f| {
        f["type"] == "event"
            && f["envelope"]["event"] == "run_finished"
            && f["envelope"]["request_id"] == "in-2"
    });
    let page = events_of(d, &hub, "s1", "");
    let seqs = sequences(&page);
    let contiguous = seqs.windows(2).all(|w| w[1] == w[0] + 1);
    d.expect(
        contiguous,
        format!("replay after a history reply has a hole: {seqs:?}"),
    );
    // `limit=0` (the Node panel's default) means no limit
    let unlimited = events_of(d, &hub, "s1", "?since=0&limit=0");
    d.expect(
        sequences(&unlimited).len() == seqs.len(),
        format!(
            "events?limit=0 returned {} of {} events",
            sequences(&unlimited).len(),
            seqs.len()
        ),
    );

    // --- a paged replay of a transcript with entries: every page carries
    // the description (Node clients replace theirs with it) and the logs
    b.send(
        json!({"type": "subscribe", "session": "s1", "since": 0, "paged": true,
        "replace": true, "request_id": "page-2"}),
    );
    let last = b.expect(d, "final page of a replay", |f| {
        f["type"] == "subscribed" && f["request_id"] == "page-2" && f["replay_more"] == false
    });
    d.expect(
        last["latest"] == page["latest"],
        format!("final page latest: {}", last["latest"]),
    );
    let data_pages = b
        .seen_of("subscribed")
        .iter()
        .filter(|f| f["request_id"] == "page-2" && f["replay_more"] == true)
        .count();
    d.expect(data_pages > 0, "a replay of a transcript sent no data page");

    // --- a stale cursor (from before a hub restart) must not silence live
    // events, legacy or paged
    let mut c = Panel::open(&hub, "panel C", d).0;
    c.ask(
        d,
        json!({"type": "subscribe", "session": "s1", "since": 1_000_000}),
        &["subscribed"],
    );
    let (mut e, _) = Panel::open(&hub, "panel E", d);
    e.send(json!({"type": "subscribe", "session": "s1", "since": 1_000_000, "paged": true}));
    let stale = e.expect(d, "final page for a stale cursor", |f| {
        f["type"] == "subscribed" && f["replay_more"] == false
    });
    d.expect(
        stale["latest"] == page["latest"],
        format!(
            "a stale cursor's final page says latest {}",
            stale["latest"]
        ),
    );
    a.send(json!({"type": "signal", "session": "s1", "operation": "status"}));
    let live = c.wait(d, Duration::from_secs(5), |f| f["type"] == "event");
    d.expect(
        live.is_some(),
        "a subscriber with a stale cursor received no live event",
    );
    let live = e.wait(d, Duration::from_secs(5), |f| f["type"] == "event");
    d.expect(
        live.is_some(),
        "a paged subscriber with a stale cursor received no live event",
    );

    // --- signals and logs
    let signalled = a.expect(d, "signal accepted", |f| {
        f["type"] == "accepted" && f["action"] == "signal"
    });
    d.expect(
        signalled["operation"] == "status",
        format!("signal: {signalled}"),
    );
    let logs = a.ask(
        d,
        json!({"type": "logs", "session": "s1", "limit": 50}),
        &["logs"],
    );
    d.expect(logs["lines"].is_array(), "logs: no lines");
    api(
        d,
        &hub,
        "GET /api/sessions/:id/logs",
        "GET",
        "/api/sessions/s1/logs",
        None,
    );
    a.ask(
        d,
        json!({"type": "status_snapshot", "session": "s1"}),
        &["snapshot"],
    );

    // --- a tool call: confirmation open, decided, closed with {phase, detail}
    a.send(
        json!({"type": "input", "session": "s1", "request_id": "in-3",
        "content": [{"type": "text", "modality": "text", "raw": "/run true"}]}),
    );
    let open = a.expect(d, "open confirmation", |f| {
        f["type"] == "confirmation" && f["open"] == true
    });
    let prompt = awaited_prompt(&hub, "s1");
    let cid = prompt["confirmation_id"].as_str().unwrap_or("").to_string();
    d.expect(
        open["confirmation"]["confirmation_id"] == cid.as_str(),
        "open frame names another prompt",
    );
    let decided = a.ask(
        d,
        json!({"type": "confirmation", "session": "s1", "confirmation_id": cid, "decision": "approved", "reason": "ok"}),
        &["accepted", "error"],
    );
    d.expect(
        decided["confirmation_id"] == cid.as_str(),
        format!("decision: {decided}"),
    );
    let closed = a.expect(d, "closing confirmation", |f| {
        f["type"] == "confirmation"
            && f["open"] == false
            && f["confirmation"]["confirmation_id"] == cid.as_str()
    });
    d.expect(
        closed["outcome"]["phase"] == "decided" && closed["outcome"]["detail"] == "approved",
        format!("closing outcome: {}", closed["outcome"]),
    );
    let extra = a
        .seen_of("confirmation")
        .iter()
        .filter(|f| f["open"] == true && f["confirmation"]["state"] == "decided")
        .count();
    d.expect(
        extra == 0,
        format!("{extra} confirmation frame(s) with state decided before the close"),
    );
    let late = a.ask(
        d,
        json!({"type": "confirmation", "session": "s1", "confirmation_id": cid, "decision": "denied"}),
        &["error"],
    );
    d.expect(
        late["session"] == "s1",
        format!("a refused decision names no session: {late}"),
    );
    a.expect(d, "the tool run's end", |f| {
        f["type"] == "event"
            && f["envelope"]["event"] == "run_finished"
            && f["envelope"]["request_id"] == "in-3"
    });

    // --- a plan, pushed to subscribers
    a.send(
        json!({"type": "input", "session": "s1", "request_id": "in-4",
        "content": [{"type": "text", "modality": "text", "raw": "/plan # step one"}]}),
    );
    a.expect(d, "plan frame", |f| f["type"] == "plan");

    // --- snapshot, events and the worker's view over REST
    api(
        d,
        &hub,
        "GET /api/sessions/:id/snapshot",
        "GET",
        "/api/sessions/s1/snapshot",
        None,
    );
    events_of(d, &hub, "s1", "?since=2&limit=3");
    api(
        d,
        &hub,
        "GET /api/sessions/:id/events",
        "GET",
        "/api/sessions/s1/events?since=x",
        None,
    );

    // --- actions without a body, and their results
    let res = bare_post(hub.addr, "/api/sessions/s1/restart");
    let restarted = d.response("POST /api/sessions/:id/restart", &res);
    d.expect(
        res.status == 200,
        format!("bodiless restart: {} {restarted}", res.status),
    );
    let before = wait_session(&hub, "s1", |s| s["identity"]["state"] == "live");
    let restart = a.ask(
        d,
        json!({"type": "worker", "session": "s1", "action": "restart"}),
        &["accepted", "error"],
    );
    d.expect(
        restart["type"] == "accepted",
        format!("panel restart: {restart}"),
    );
    // `accepted` comes before the restart runs: wait for the new worker.
    let old_pid = before["process"]["pid"].clone();
    wait_session(&hub, "s1", |s| {
        s["process"]["pid"] != old_pid
            && s["process"]["state"] == "running"
            && s["identity"]["state"] == "live"
    });
    let res = bare_post(hub.addr, "/api/sessions/s1/stop");
    let stopped = d.response("POST /api/sessions/:id/stop", &res);
    d.expect(
        res.status == 200,
        format!("bodiless stop: {} {stopped}", res.status),
    );
    let res = bare_post(hub.addr, "/api/sessions/s1/start");
    let restarted = d.response("POST /api/sessions/:id/start", &res);
    d.expect(
        res.status == 200,
        format!("bodiless start: {} {restarted}", res.status),
    );
    wait_session(&hub, "s1", |s| s["identity"]["state"] == "live");
    a.ask(d, json!({"type": "ping"}), &["pong"]);
    let killed = a.ask(
        d,
        json!({"type": "worker", "session": "s1", "action": "force-kill"}),
        &["accepted", "error"],
    );
    d.expect(
        killed["result"]["how"].is_string(),
        format!("force-kill: {killed}"),
    );
    let exited = a.expect(d, "exited process", |f| {
        f["type"] == "process" && f["process"]["exited_at"].is_string()
    });
    d.expect(
        exited["process"]["signal"] == "SIGKILL",
        format!("a killed worker's signal: {}", exited["process"]["signal"]),
    );
    let res = bare_post(hub.addr, "/api/sessions/s1/force-kill");
    d.response("POST /api/sessions/:id/force-kill", &res);
    let res = post(
        &hub,
        "/api/sessions/s1/start",
        json!({"spec": {"threads": 2}}),
    );
    d.response("POST /api/sessions/:id/start", &res);
    let res = post(&hub, "/api/sessions/s1/start", json!({}));
    d.response("POST /api/sessions/:id/start", &res);
    let res = action(&hub, "s1", "stop");
    d.response("POST /api/sessions/:id/stop", &res);
    wait_session(&hub, "s1", |s| s["connected"] == false);

    // --- refusals of session commands: the session, and the request echoed
    let not_sent = a.ask(
        d,
        json!({"type": "input", "session": "s1", "request_id": "in-5",
            "content": [{"type": "text", "modality": "text", "raw": "nobody"}]}),
        &["error"],
    );
    d.expect(
        not_sent["error"] == "input_not_sent",
        format!("input to a stopped worker: {not_sent}"),
    );
    d.expect(
        not_sent["session"] == "s1",
        format!("input_not_sent names no session: {not_sent}"),
    );
    d.expect(
        not_sent["request"]["request_id"] == "in-5",
        format!("input_not_sent does not echo the request: {not_sent}"),
    );
    let no_signal = a.ask(
        d,
        json!({"type": "signal", "session": "s1", "operation": "cancel"}),
        &["error"],
    );
    d.expect(
        no_signal["session"] == "s1",
        format!("signal_not_sent names no session: {no_signal}"),
    );
    d.expect(
        no_signal["request"].is_object(),
        format!("signal_not_sent does not echo the request: {no_signal}"),
    );
    let no_history = a.ask(d, json!({"type": "history", "session": "s1"}), &["error"]);
    d.expect(
        no_history["session"] == "s1",
        format!("history refusal names no session: {no_history}"),
    );
    let unknown = a.ask(d, json!({"type": "logs", "session": "nobody"}), &["error"]);
    d.expect(
        unknown["error"] == "unknown_session",
        format!("logs of no session: {unknown}"),
    );
    a.ask(
        d,
        json!({"type": "subscribe", "session": "nobody"}),
        &["error"],
    );
    send_text(&mut a.ws, "not json".into());
    a.expect(d, "bad_json error", |f| f["error"] == "bad_json");
    send_json(&mut a.ws, json!({"v": 2, "type": "ping"}));
    a.expect(d, "unsupported_version error", |f| {
        f["error"] == "unsupported_version"
    });

    // --- deletion over both APIs
    a.send(json!({"type": "delete_session", "session": "s2"}));
    a.expect(d, "session_removed", |f| {
        f["type"] == "session_removed" && f["session"] == "s2"
    });
    api(
        d,
        &hub,
        "DELETE /api/sessions/:id",
        "DELETE",
        "/api/sessions/s1",
        None,
    );
    api(
        d,
        &hub,
        "DELETE /api/sessions/:id",
        "DELETE",
        "/api/sessions/s1",
        None,
    );
    a.expect(d, "session_removed s1", |f| {
        f["type"] == "session_removed" && f["session"] == "s1"
    });

    drop((b, c, e));
    drift.assert_none();
}

#[test]
fn confirmations_retired_without_a_decision_have_the_node_outcome() {
    let dir = TempDir::new("drift-retire");
    // A small transcript: a large event is kept as an omission record.
    let hub = hub_with(&dir, json!({"limits": {"transcriptBytes": 2048}}));
    let mut drift = Drift::default();
    let d = &mut drift;
    create_session(&hub, "raw");
    let (mut panel, _) = Panel::open(&hub, "panel", d);
    panel.ask(
        d,
        json!({"type": "subscribe", "session": "raw"}),
        &["subscribed"],
    );
    // a worker played by the test: identify, open a prompt, then vanish
    let mut events = worker_events(&hub, "raw");
    send_text(&mut events, envelope("raw", "w-1", 1, "ready", json!({})));
    wait_session(&hub, "raw", |s| s["identity"]["state"] == "live");
    let mut confirm = worker_confirm(&hub, "raw");
    send_text(
        &mut confirm,
        confirmation_request("raw", "w-1", "c-1", json!({"command": "true"})),
    );
    panel.expect(d, "open prompt", |f| {
        f["type"] == "confirmation" && f["open"] == true
    });
    drop(confirm);
    let closed = panel.expect(d, "retired prompt", |f| {
        f["type"] == "confirmation" && f["open"] == false
    });
    d.expect(
        closed["outcome"]["phase"].is_string() && closed["outcome"]["phase"] != "decided",
        format!("a retired prompt's outcome: {}", closed["outcome"]),
    );
    d.expect(
        closed["confirmation"]["state"] == "retired",
        format!(
            "a retired prompt's state: {}",
            closed["confirmation"]["state"]
        ),
    );
    // an event larger than the whole transcript: its omission record is
    // still a worker envelope to a Node client
    let big = json!({"text": "x".repeat(4096)});
    send_text(
        &mut events,
        envelope("raw", "w-1", 2, "model_response", big),
    );
    let omitted = panel.expect(d, "the large event", |f| {
        f["type"] == "event" && f["envelope"]["event"] == "model_response"
    });
    d.expect(
        omitted["hub_seq"] == 2,
        format!("large event: {}", omitted["hub_seq"]),
    );
    let page = events_of(d, &hub, "raw", "");
    let record = page["events"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["event"] == "model_response"))
        .cloned()
        .unwrap_or(Value::Null);
    d.expect(
        record["display_omitted"] == true,
        format!("omission record: {record}"),
    );
    // the worker's connection ends: the process-less session's frames
    drop(events);
    panel.expect(d, "disconnection", |f| {
        f["type"] == "connection" && f["connected"] == false
    });
    let res = hub.get("/api/sessions/raw/snapshot");
    let snapshot = d.response("GET /api/sessions/:id/snapshot", &res);
    d.expect(
        snapshot["files"] == json!({}),
        format!("snapshot of nothing: {snapshot}"),
    );
    drift.assert_none();
}
