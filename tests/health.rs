//! `GET /api/hub/health` against real hubs: refused without the panel
//! token, its shape, process figures that match what `/proc` shows from
//! outside, panel and Shard connections with a stalled panel's pending
//! bytes growing toward its budget, and a worker's event rate and
//! retained transcript moving with the events it sends.

use std::time::Duration;

use serde_json::{json, Value};

use crate::util::*;

const BUDGET: u64 = 4 * 1024 * 1024;

fn health(hub: &TestHub) -> Value {
    let res = hub.get("/api/hub/health");
    assert_eq!(res.status, 200, "{}", res.text());
    res.json()
}

fn session_figures<'a>(h: &'a Value, id: &str) -> &'a Value {
    h["workers"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["session"] == id)
        .unwrap_or_else(|| panic!("no figures for {id}: {h:#}"))
}

#[test]
fn the_route_needs_the_panel_token_and_is_read_only() {
    let dir = TempDir::new("health-auth");
    let hub = TestHub::start(dir.path(), &["--panel-token", "h3alth"]);
    let res = hub.get("/api/hub/health");
    assert_eq!(
        (res.status, res.json()["error"].clone()),
        (401, json!("unauthorized"))
    );
    assert_eq!(hub.get("/api/hub/health?token=wrong").status, 401);
    let bearer = [("Authorization", "Bearer h3alth")];
    let ok = hub.request("GET", "/api/hub/health", &bearer, b"");
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(ok.header("Cache-Control"), Some("no-store"));
    assert!(ok.json()["process"]["threads"].as_u64().unwrap() > 0);
    let cookie = [("Cookie", "simplex_hub_token=h3alth")];
    assert_eq!(
        hub.request("GET", "/api/hub/health", &cookie, b"").status,
        200
    );
    assert_eq!(
        hub.request("HEAD", "/api/hub/health", &bearer, b"").status,
        200
    );
    // Nothing is changed through it: every other method is refused, and
    // without the token the refusal is the token's.
    for method in ["POST", "PUT", "DELETE"] {
        let res = hub.request(method, "/api/hub/health", &bearer, b"{}");
        assert_eq!(
            (res.status, res.json()["error"].clone()),
            (405, json!("method_not_allowed")),
            "{method}"
        );
        assert_eq!(hub.request(method, "/api/hub/health", &[], b"").status, 401);
    }
    let meta = hub.get("/api/meta").json();
    assert!(
        meta["capabilities"]
            .as_array()
            .unwrap()
            .contains(&json!("hub-health")),
        "{meta}"
    );
}

#[test]
fn the_shape_and_the_process_figures_match_proc() {
    let dir = TempDir::new("health-shape");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "quiet");
    let h = health(&hub);
    for key in ["hub", "process", "panels", "shard", "workers", "errors"] {
        assert!(h.get(key).is_some(), "{key} missing: {h:#}");
    }
    assert_eq!(h["errors"], json!([]));
    assert_eq!(h["hub"]["pid"], hub.child.id());
    assert_eq!(h["hub"]["version"], env!("CARGO_PKG_VERSION"));
    assert!(h["hub"]["uptime_ms"].as_u64().is_some());
    assert!(h["hub"]["sampled_at"].as_str().unwrap().ends_with('Z'));
    for list in ["panels", "shard"] {
        let part = &h[list];
        assert_eq!(part["count"], 0, "{list}: {part}");
        assert_eq!(part["pending_bytes"], 0);
        assert_eq!(part["connections"], json!([]));
        assert_eq!(part["omitted"], 0);
    }
    assert_eq!(h["workers"]["count"], 1);
    assert_eq!(h["workers"]["window_ms"], 10_000);
    let quiet = session_figures(&h, "quiet");
    assert_eq!(quiet["kind"], "ordinary");
    assert_eq!(quiet["process"], Value::Null);
    assert_eq!(quiet["connected"], false);
    assert_eq!(quiet["events_total"], 0);
    assert_eq!(quiet["events_per_second"], 0.0);
    assert_eq!(quiet["retained_bytes"], 0);
    // The defaults of limits.transcriptBytes and limits.transcriptEvents.
    assert_eq!(quiet["retained_bytes_budget"], 32 * 1024 * 1024);
    assert_eq!(quiet["retained_events_budget"], 5000);

    // Threads and descriptors as /proc shows them from outside. The
    // request itself moves them (its connection and handler thread exist
    // while it is answered), so the readings are compared in a quiet
    // moment: the same figures before and after the request.
    let matched = poll_until(DEADLINE, || {
        let (threads, fds) = (hub.threads() as u64, hub.fds() as u64);
        let p = health(&hub)["process"].clone();
        let stable = hub.threads() as u64 == threads && hub.fds() as u64 == fds;
        let near = |a: u64, b: u64| a.abs_diff(b) <= 1;
        (stable
            && near(p["threads"].as_u64().unwrap(), threads)
            && near(p["open_fds"].as_u64().unwrap(), fds))
        .then_some(p)
    })
    .unwrap_or_else(|| panic!("health figures never matched /proc: {:#}", health(&hub)));
    let rss = matched["rss_bytes"].as_u64().unwrap();
    let outside = hub.rss_kib() * 1024;
    assert!(
        rss > 1024 * 1024 && rss.abs_diff(outside) < outside / 2,
        "rss {rss} vs /proc {outside}"
    );
    assert!(matched["peak_rss_bytes"].as_u64().unwrap() >= rss);
    assert!(matched["virtual_bytes"].as_u64().unwrap() >= rss);
    assert!(matched["fd_limit"].as_u64().unwrap() >= matched["open_fds"].as_u64().unwrap());
    // More descriptors and threads show: twenty open panel sockets.
    let before = health(&hub)["process"]["open_fds"].as_u64().unwrap();
    let panels: Vec<Ws> = (0..20).map(|_| panel(&hub)).collect();
    let after = health(&hub);
    assert!(
        after["process"]["open_fds"].as_u64().unwrap() >= before + 20,
        "{before} -> {:#}",
        after["process"]
    );
    assert_eq!(after["panels"]["count"], 20);
    drop(panels);
    assert!(wait_until(DEADLINE, || health(&hub)["panels"]["count"] == 0));
}

#[test]
fn a_stalled_panel_shows_its_pending_bytes_grow_toward_the_budget() {
    let dir = TempDir::new("health-stall");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "flood");
    create_session(&hub, "calm");
    let mut worker = worker_events(&hub, "flood");
    send_text(&mut worker, envelope("flood", "w", 1, "ready", json!({})));
    wait_session(&hub, "flood", |s| s["identity"]["state"] == "live");
    // The stalled panel connects first (the lowest id), subscribes to the
    // flood, and never reads again.
    let mut stalled = panel(&hub);
    send_json(
        &mut stalled,
        json!({"v": 1, "type": "subscribe", "session": "flood"}),
    );
    next_of(&mut stalled, "subscribed");
    // A reading panel on the flood, and an idle one on another session.
    let mut reading = panel(&hub);
    send_json(
        &mut reading,
        json!({"v": 1, "type": "subscribe", "session": "flood"}),
    );
    next_of(&mut reading, "subscribed");
    let mut idle = panel(&hub);
    send_json(
        &mut idle,
        json!({"v": 1, "type": "subscribe", "session": "calm"}),
    );
    next_of(&mut idle, "subscribed");
    let h = health(&hub);
    assert_eq!(h["panels"]["count"], 3, "{:#}", h["panels"]);
    let conns = h["panels"]["connections"].as_array().unwrap().clone();
    let ids: Vec<u64> = conns.iter().map(|c| c["id"].as_u64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    for c in &conns {
        assert_eq!(c["budget_bytes"], BUDGET);
        assert_eq!(c["subscriptions"], 1);
        assert!(c.get("transport").is_none());
    }
    let stalled_id = ids[0];
    let figures_of = |h: &Value, id: u64| -> Option<Value> {
        h["panels"]["connections"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .cloned()
    };

    let reader = std::thread::spawn(move || {
        let mut count = 0;
        while count < 60 {
            ws_read_until(&mut reading, |v| v["type"] == "event");
            count += 1;
        }
        reading
    });
    // 256 KiB events: the kernel's socket buffers fill first, then the
    // hub's queue holds the rest until the budget cuts the panel.
    let pad = "p".repeat(256 * 1024);
    let mut seen: Vec<u64> = Vec::new();
    let mut cut = false;
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
        if cut {
            continue; // the reading panel still counts on all 60
        }
        // Each event is queued for every subscriber right after the hub
        // counted it: wait for the count, then look.
        wait_events(&hub, "flood", seq);
        match figures_of(&health(&hub), stalled_id) {
            Some(c) => {
                let pending = c["pending_bytes"].as_u64().unwrap();
                assert!(pending <= BUDGET, "{c}");
                seen.push(pending);
            }
            None => cut = true,
        }
    }
    let _reading = reader.join().unwrap();
    assert!(cut, "the stalled panel was never cut: pending {seen:?}");
    // Once the socket buffers were full it grew toward the budget.
    let most = *seen.iter().max().unwrap();
    assert!(most >= BUDGET / 2, "pending never grew: {seen:?}");
    assert!(hub.log_text().contains("outbound budget exceeded"));
    // The other two are still there and owe nothing.
    let h = health(&hub);
    assert_eq!(h["panels"]["count"], 2, "{:#}", h["panels"]);
    let drained = poll_until(DEADLINE, || {
        let h = health(&hub);
        (h["panels"]["pending_bytes"] == 0).then_some(h)
    });
    assert!(drained.is_some(), "{:#}", health(&hub)["panels"]);
    drop(idle);
}

#[test]
fn shard_connections_are_listed_with_their_transport() {
    let dir = TempDir::new("health-shard");
    let hub = TestHub::start(dir.path(), &[]);
    let ws = ShardClient::connect(&hub);
    let unix = ShardClient::socket(&shard_socket(&hub));
    let h = poll_until(DEADLINE, || {
        let h = health(&hub);
        (h["shard"]["count"] == 2).then_some(h)
    })
    .unwrap_or_else(|| panic!("{:#}", health(&hub)["shard"]));
    let mut transports: Vec<String> = h["shard"]["connections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            assert_eq!(c["budget_bytes"], BUDGET, "{c}");
            assert_eq!(c["direct"], Value::Null, "{c}");
            assert!(c.get("subscriptions").is_none());
            c["transport"].as_str().unwrap().to_string()
        })
        .collect();
    transports.sort();
    assert_eq!(transports, ["unix", "websocket"]);
    assert_eq!(h["panels"]["count"], 0, "Shard clients are not panels");
    drop(ws);
    drop(unix);
    assert!(wait_until(DEADLINE, || health(&hub)["shard"]["count"] == 0));
}

#[test]
fn a_worker_sending_events_moves_its_rate_and_retained_bytes() {
    let dir = TempDir::new("health-rate");
    // A small ring, so the figures reach its bounds.
    let hub = hub_with(
        &dir,
        json!({"limits": {"transcriptBytes": 65536, "transcriptEvents": 1000}}),
    );
    create_session(&hub, "busy");
    create_session(&hub, "still");
    let mut worker = worker_events(&hub, "busy");
    send_text(&mut worker, envelope("busy", "w", 1, "ready", json!({})));
    wait_events(&hub, "busy", 1);
    let first = health(&hub);
    let busy = session_figures(&first, "busy");
    assert_eq!(busy["connected"], true);
    assert_eq!(busy["events_total"], 1);
    assert_eq!(busy["retained_bytes_budget"], 65536);
    assert_eq!(busy["retained_events_budget"], 1000);
    let first_bytes = busy["retained_bytes"].as_u64().unwrap();
    assert!(first_bytes > 0);

    // 40 events of about 1 KiB.
    let pad = "r".repeat(1000);
    for seq in 2..=41 {
        send_text(
            &mut worker,
            envelope("busy", "w", seq, "model_response", json!({"pad": pad})),
        );
    }
    wait_events(&hub, "busy", 41);
    let second = health(&hub);
    let busy = session_figures(&second, "busy");
    assert_eq!(busy["events_total"], 41);
    // All 41 arrived within the window unless the machine stalled for
    // seconds; the rate is what the window says.
    let window = busy["events_window"].as_u64().unwrap();
    let window_ms = busy["window_ms"].as_u64().unwrap();
    assert!(window > 0 && window <= 41, "{busy}");
    assert!(window_ms > 0 && window_ms <= 10_000, "{busy}");
    let rate = busy["events_per_second"].as_f64().unwrap();
    let expect = window as f64 * 1000.0 / window_ms as f64;
    assert!((rate - expect).abs() < 0.01, "{rate} vs {expect}: {busy}");
    assert!(second["workers"]["events_per_second"].as_f64().unwrap() >= rate - 0.01);
    let bytes = busy["retained_bytes"].as_u64().unwrap();
    assert!(bytes > first_bytes + 40 * 1000, "{first_bytes} -> {bytes}");
    assert_eq!(busy["retained_events"], 41);
    assert_eq!(busy["evicted_events"], 0);
    // The idle session did not move.
    let still = session_figures(&second, "still");
    assert_eq!(still["events_total"], 0);
    assert_eq!(still["events_window"], 0);
    assert_eq!(still["retained_bytes"], 0);
    assert_eq!(
        second["workers"]["retained_bytes"].as_u64().unwrap(),
        bytes,
        "the total is the sum"
    );

    // Past the byte budget the ring evicts, and stays within it.
    for seq in 42..=141 {
        send_text(
            &mut worker,
            envelope("busy", "w", seq, "model_response", json!({"pad": pad})),
        );
    }
    wait_events(&hub, "busy", 141);
    let third = health(&hub);
    let busy = session_figures(&third, "busy");
    assert!(busy["retained_bytes"].as_u64().unwrap() <= 65536, "{busy}");
    assert!(busy["evicted_events"].as_u64().unwrap() > 0, "{busy}");
    assert_eq!(
        busy["retained_events"].as_u64().unwrap() + busy["evicted_events"].as_u64().unwrap(),
        141
    );

    // Once the worker stops sending, the window empties within 10 s.
    let quiet = poll_until(Duration::from_secs(15), || {
        let h = health(&hub);
        let busy = session_figures(&h, "busy").clone();
        (busy["events_window"] == 0).then_some(busy)
    })
    .expect("the rate never fell back to zero");
    assert_eq!(quiet["events_per_second"], 0.0);
    assert_eq!(quiet["events_total"], 141, "the total stays");
}

#[test]
fn a_stalled_shard_client_shows_its_pending_bytes_grow_toward_the_budget() {
    let dir = TempDir::new("health-shard-stall");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "loud");
    let mut worker = worker_events(&hub, "loud");
    send_text(&mut worker, envelope("loud", "w", 1, "ready", json!({})));
    wait_session(&hub, "loud", |s| s["identity"]["state"] == "live");
    // A unix-socket client observes the agent, then never reads again.
    let mut stalled = ShardClient::socket(&shard_socket(&hub));
    stalled.attach("loud", "observer");
    let figures = || {
        let h = health(&hub);
        let list = h["shard"]["connections"].as_array().unwrap().clone();
        assert!(list.len() <= 1, "{list:?}");
        list.into_iter().next()
    };
    let first = figures().expect("the Shard client is listed");
    assert_eq!(first["transport"], "unix");
    assert_eq!(first["budget_bytes"], BUDGET);
    // Assistant messages of 256 KiB each reach the observer as Shard
    // events; the socket's buffer fills, then the hub's queue.
    let text = "s".repeat(256 * 1024);
    let mut seen = Vec::new();
    let mut cut = false;
    for seq in 2..=80 {
        let data = json!({"type": "model_response", "role": "assistant",
            "content": [{"type": "text", "modality": "text", "raw": text}]});
        send_text(
            &mut worker,
            envelope("loud", "w", seq, "model_response", data),
        );
        wait_events(&hub, "loud", seq);
        match figures() {
            Some(c) => {
                let pending = c["pending_bytes"].as_u64().unwrap();
                assert!(pending <= BUDGET, "{c}");
                seen.push(pending);
            }
            None => {
                cut = true;
                break;
            }
        }
    }
    assert!(cut, "the stalled Shard client was never cut: {seen:?}");
    let most = *seen.iter().max().unwrap();
    assert!(most >= BUDGET / 2, "pending never grew: {seen:?}");
    drop(stalled);
}
