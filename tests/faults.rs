//! Faults tried with figures (issue 18): a full data directory, a flood
//! on every socket kind at once under a computed memory ceiling, and the
//! restart and force-kill paths' disk writers. Each test prints the
//! figure `docs/security.md` records.

use std::io::{ErrorKind, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::util::*;

/// A worker's `worker.log` writer is replaced at every start, and the
/// previous process's writer is let go rather than waited on (its pipe
/// readers may still deliver its last lines): restarts and force-kills of
/// a worker that logs all the time log no warning about abandoned bytes,
/// and every process's lines reach the file.
#[test]
fn restarts_and_force_kills_abandon_no_disk_writer() {
    let dir = TempDir::new("faults-writers");
    // The worker logs a line every 50 ms, so its writer thread is busy
    // (never idle long enough to exit) whenever the next start replaces it.
    let hub = shell_hub(&dir, "while :; do echo tick; sleep 0.05; done");
    create_session(&hub, "w");
    let mut starts = 0;
    for what in [
        "start",
        "restart",
        "restart",
        "force-kill",
        "start",
        "force-kill",
        "start",
    ] {
        let res = action(&hub, "w", what);
        assert_eq!(res.status, 200, "{what}: {}", res.text());
        if what != "force-kill" {
            // The new process logs (its own ring, reset at the start)
            // before the next action replaces its writer.
            wait_for("ticks of the new process", DEADLINE, || {
                logs_text(&hub, "w").matches("tick").count() >= 3
            });
            starts += 1;
        }
    }
    assert_eq!(action(&hub, "w", "stop").status, 200);
    let log = hub.log_text();
    assert!(!log.contains("did not flush"), "{log}");
    assert!(!log.contains("abandoning"), "{log}");
    // Every process's lines reached worker.log (rotation keeps them all
    // under the default 8 MiB).
    let file = std::fs::read_to_string(dir.path().join("sessions/w/logs/worker.log")).unwrap();
    assert!(file.matches("tick").count() >= 3 * starts, "{file}");
    assert!(!file.contains("[hub: omitted"), "{file}");
    eprintln!(
        "disk writers: {starts} processes (3 starts, 2 restarts), 2 force-kills; no abandon \
         warning, {} worker.log lines",
        file.lines().count()
    );
}

/// Lines of a file as JSON values (every line must parse: nothing torn).
fn json_lines(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("a torn line in {}: {e}: {line:?}", path.display()))
        })
        .collect()
}

/// `events.jsonl`: (records, omitted records by the markers, the highest
/// worker sequence written).
fn events_file_counts(path: &std::path::Path) -> (u64, u64, u64) {
    let (mut records, mut omitted, mut highest) = (0, 0, 0);
    for line in json_lines(path) {
        if line["type"] == "hub_log_omission" {
            omitted += line["dropped_records"].as_u64().unwrap();
        } else {
            records += 1;
            highest = highest.max(line["sequence"].as_u64().unwrap());
        }
    }
    (records, omitted, highest)
}

/// `worker.log` of a worker printing `log line <n>`: (lines, omitted lines
/// by the markers, the highest n written).
fn worker_log_counts(path: &std::path::Path) -> (u64, u64, u64) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let (mut lines, mut omitted, mut highest) = (0, 0, 0);
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("log line ") {
            lines += 1;
            highest = highest.max(n.parse::<u64>().unwrap());
        } else if let Some(rest) = line.strip_prefix("[hub: omitted ") {
            omitted += rest.split(' ').next().unwrap().parse::<u64>().unwrap();
        } else {
            panic!("a torn line in {}: {line:?}", path.display());
        }
    }
    (lines, omitted, highest)
}

/// The whole data directory (hub.db, its WAL, every session file) on a
/// small tmpfs, filled to the last byte: SQLite writes are refused with
/// `storage_error` (reason `disk_full`) on the JSON API and the panel, and
/// with a message saying so on Shard; reads keep being
/// served, the events file and `worker.log` count what they drop and
/// report it once there is room, new writes succeed again without a
/// restart, and nothing acknowledged is lost.
#[test]
fn a_full_data_directory_refuses_writes_clearly_and_recovers_without_a_restart() {
    if !is_root() {
        eprintln!("skipped: mounting a tmpfs data directory needs root");
        return;
    }
    let _heavy = heavy();
    let dir = TempDir::new("faults-fulldisk");
    let mut undo = Undo(Vec::new());
    if !mount_tmpfs(dir.path(), "16m", &mut undo) {
        eprintln!("skipped: root here may not mount");
        return;
    }
    // The worker prints a numbered line every 10 ms while it runs.
    let mut hub = shell_hub(
        &dir,
        "i=0; while :; do i=$((i+1)); echo \"log line $i\"; sleep 0.01; done",
    );
    let mut acknowledged = vec!["kept".to_string(), "logged".to_string()];
    create_session(&hub, "kept");
    create_session(&hub, "logged");
    assert_eq!(action(&hub, "logged", "start").json()["ok"], true);
    let mut ws = RawWs::open(hub.addr, &events_path(&hub, "logged"));
    let mut seq = 0u64;
    let mut send_events = |ws: &mut RawWs, n: u64| {
        let pad = "e".repeat(512);
        for _ in 0..n {
            seq += 1;
            ws.text(&envelope("logged", "w", seq, "status", json!({"pad": pad})));
        }
        seq
    };
    let sent = send_events(&mut ws, 50);
    wait_events(&hub, "logged", sent);
    let events_file = dir.path().join("sessions/logged/events.jsonl");
    let log_file = dir.path().join("sessions/logged/logs/worker.log");
    wait_for("the events file", DEADLINE, || {
        events_file_counts(&events_file).0 == 50
    });
    wait_for("worker.log", DEADLINE, || {
        worker_log_counts(&log_file).0 > 10
    });

    // Fill the disk to the last byte.
    let filler = dir.path().join("filler");
    let filled = fill_disk(&filler);

    // Writes: SQLite may still have room inside its WAL for a few commits;
    // those are acknowledged and must survive. Then a refusal.
    let mut room_in_wal = 0;
    let refused = loop {
        let id = format!("during-{room_in_wal}");
        let res = post(&hub, "/api/sessions", json!({"session": id}));
        if res.status == 201 {
            acknowledged.push(id);
            room_in_wal += 1;
            assert!(room_in_wal < 2000, "the full disk never refused a write");
            continue;
        }
        break res;
    };
    let refusal = refused.json();
    assert_eq!(
        (
            refused.status,
            refusal["error"].clone(),
            refusal["reason"].clone()
        ),
        (500, json!("storage_error"), json!("disk_full")),
        "{refusal}"
    );
    let message = refusal["message"].as_str().unwrap().to_string();
    assert!(message.contains("full"), "{message}");
    // A delete is a write too: refused, and the session stays.
    let res = hub.request("DELETE", "/api/sessions/kept", &[], b"");
    assert_eq!(
        (res.status, res.json()["reason"].clone()),
        (500, json!("disk_full")),
        "{}",
        res.text()
    );
    // The panel's create fails the same way.
    let mut panel = RawWs::panel(&hub);
    panel.text(r#"{"v":1,"type":"create_session","session":"panel-during"}"#);
    let error = panel.next_text(|v| v["type"] == "error");
    assert_eq!(error["error"], "storage_error", "{error}");

    // A Shard client's create fails too, saying why.
    let mut shard = ShardClient::connect(&hub);
    let created =
        shard.request(json!({"type": "agent.create", "cwd": dir.path(), "name": "shard-during"}));
    assert_eq!(created["success"], false, "{created}");
    assert_eq!(created["error"]["code"], "INTERNAL_ERROR", "{created}");
    assert!(
        created["error"]["message"]
            .as_str()
            .unwrap()
            .contains("disk"),
        "{created}"
    );

    // Reads keep being served.
    assert_eq!(hub.get("/api/meta").status, 200);
    let listed = session_ids(&hub);
    for id in &acknowledged {
        assert!(
            listed.contains(id),
            "{id} not listed while the disk is full"
        );
    }
    assert!(!listed.iter().any(|id| id.ends_with("-during")));
    assert_eq!(get_session(&hub, "kept")["session_id"], "kept");
    assert_eq!(hub.get("/api/sessions/logged/events?limit=5").status, 200);
    assert!(panel.panel_round_trip() < Duration::from_secs(5));

    // Events and log lines keep coming; their files drop and count them.
    let sent = send_events(&mut ws, 300);
    wait_events(&hub, "logged", sent);
    wait_for("the events file's full-disk warning", DEADLINE, || {
        hub.log_text()
            .contains("events.jsonl failed: No space left on device")
    });
    // (some 20 lines, 200 ms of the worker's output, meet the full disk)
    let p = wait_session(&hub, "logged", |s| {
        s["process"]["file_log_dropped"].as_u64() >= Some(20)
    })["process"]
        .clone();
    assert_eq!(p["file_log_failed"], false, "{p}");
    assert_eq!(get_session(&hub, "logged")["connected"], true);

    // Room again: writes succeed at once, without a restart.
    std::fs::remove_file(&filler).unwrap();
    let freed_at = std::time::Instant::now();
    let res = post(&hub, "/api/sessions", json!({"session": "after"}));
    assert_eq!(res.status, 201, "{}", res.text());
    let recovered_in = freed_at.elapsed();
    acknowledged.push("after".into());
    panel.text(r#"{"v":1,"type":"create_session","session":"panel-after"}"#);
    panel.next_text(|v| v["type"] == "created");
    acknowledged.push("panel-after".into());
    let sent = send_events(&mut ws, 20);
    wait_events(&hub, "logged", sent);
    // Every event is in the file or counted by an omission record that
    // precedes the next one written.
    let mut counts = (0, 0, 0);
    wait_for("the events file to catch up", DEADLINE, || {
        counts = events_file_counts(&events_file);
        counts.2 == sent
    });
    let (event_records, events_omitted, _) = counts;
    assert!(events_omitted > 0, "no omission record: {counts:?}");
    assert_eq!(event_records + events_omitted, sent, "{counts:?}");
    // The same for worker.log: each line up to the last one written is in
    // the file or counted, and the counts match the session's own.
    let mut log_counts = (0, 0, 0);
    wait_for("worker.log to report its omissions", DEADLINE, || {
        log_counts = worker_log_counts(&log_file);
        log_counts.1 > 0 && log_counts.0 + log_counts.1 == log_counts.2
    });
    let dropped = get_session(&hub, "logged")["process"]["file_log_dropped"]
        .as_u64()
        .unwrap();
    assert_eq!(dropped, log_counts.1, "{log_counts:?}");
    assert!(
        hub.log_text().contains("is written again"),
        "{}",
        hub.log_text()
    );

    // Nothing acknowledged is lost across a restart, and the store is sound.
    assert_eq!(action(&hub, "logged", "stop").status, 200);
    drop(ws);
    drop(panel);
    assert_eq!(hub.terminate().code(), Some(0));
    assert_eq!(integrity_check(dir.path()), "ok");
    hub = TestHub::start(
        dir.path(),
        &["-c", dir.path().join("hub.test.jsonc").to_str().unwrap()],
    );
    let listed = session_ids(&hub);
    for id in &acknowledged {
        assert!(listed.contains(id), "{id} lost: {listed:?}");
    }
    eprintln!(
        "full disk: {} KiB filled; {room_in_wal} creates fit in the WAL, then 500 storage_error \
         ({message}); {} events: {event_records} written, {events_omitted} counted by omission \
         records; worker.log: {} lines written, {} counted; writes succeeded {recovered_in:?} \
         after room returned; {} acknowledged sessions kept across a restart",
        filled / 1024,
        sent,
        log_counts.0,
        log_counts.1,
        acknowledged.len()
    );
}

/// A worker event frame with a run id (`run_started` and the like).
fn run_event(session: &str, seq: u64, event: &str, run: &str) -> String {
    json!({
        "type": "event", "event": event, "session_id": session, "worker_id": "w",
        "request_id": "req-1", "run_id": run, "sequence": seq, "data": {},
    })
    .to_string()
}

fn frame_of(text: &str) -> Vec<u8> {
    frame(true, op::TEXT, text.as_bytes())
}

/// Reads every message of a Shard connection until `stop`; returns the
/// bytes read.
fn drain_shard(mut client: ShardClient, stop: Arc<AtomicBool>) -> u64 {
    let ws = client.websocket();
    ws.get_ref()
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut read = 0u64;
    loop {
        match ws.read() {
            Ok(message) => read += message.len() as u64,
            Err(tungstenite::Error::Io(e))
                if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
            {
                if stop.load(Ordering::Acquire) {
                    return read;
                }
            }
            Err(_) => return read,
        }
    }
}

/// Reads every frame of a panel until `stop`; returns the bytes read.
fn drain_panel(mut ws: RawWs, stop: Arc<AtomicBool>) -> u64 {
    ws.s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut read = 0u64;
    loop {
        match ws.read_frame() {
            Ok((_, opcode, payload)) => {
                read += payload.len() as u64;
                if opcode == op::CLOSE {
                    return read;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if stop.load(Ordering::Acquire) {
                    return read;
                }
            }
            Err(_) => return read,
        }
    }
}

/// Every socket kind flooded at once: worker event sockets, confirmation
/// sockets, tool sockets on the remote-tools listener, panels and Shard
/// connections (reading and not reading) and HTTP (requests and a crowd
/// of unfinished heads). The hub's peak RSS (`VmHWM`) stays under a
/// ceiling computed from the configured limits, and it answers `GET
/// /api/meta` afterwards.
#[test]
fn a_flood_on_every_socket_kind_at_once_stays_under_the_computed_ceiling() {
    let _heavy = heavy();
    let dir = TempDir::new("faults-everyflood");
    const KB: u64 = 1024;
    let sessions = 4usize;
    let confirming = 1usize; // sessions whose confirmation socket is flooded
    let confirm_sockets = 80usize; // per confirming session: 64 open, 16 denied
    let max_message = 16 * KB;
    let transcript_bytes = 1024 * KB;
    let tool_cap = 16usize;
    let tool_flooders = 24usize;
    let handler_cap = 2usize;
    let http_crowd = 200usize;
    let (reading_panels, silent_panels) = (1usize, 2usize);
    let (reading_shards, silent_shards) = (1usize, 1usize);
    let events_per_session = 2000u64;
    let hub = hub_with(
        &dir,
        json!({
            "limits": {"transcriptBytes": transcript_bytes, "maxMessageBytes": max_message},
            "toolRequests": {"maxConnections": tool_cap},
            "http": {"maxHandlerThreads": handler_cap, "idleTimeoutMs": 5000},
            // The confirmations stay open whoever is connected: the Shard
            // observers make these daemon agents, and a panel cut at its
            // budget would leave nobody to answer (the headless path).
            "shard": {"headlessPermissions": "wait"},
        }),
    );
    let tools = hub.tools_addr.expect("the tools listener");
    let ids: Vec<String> = (0..sessions).map(|i| format!("f{i}")).collect();
    for id in &ids {
        create_session(&hub, id);
    }
    // Each session's worker: identified, with an active run for its plans.
    let mut workers = Vec::new();
    for id in &ids {
        let mut ws = RawWs::open(hub.addr, &events_path(&hub, id));
        ws.s.set_write_timeout(Some(Duration::from_secs(120)))
            .unwrap();
        ws.text(&run_event(id, 1, "input_admitted", "r1"));
        ws.text(&run_event(id, 2, "run_started", "r1"));
        workers.push(ws);
    }
    for id in &ids {
        wait_session(&hub, id, |s| s["identity"]["state"] == "live");
    }
    let baseline_threads = hub.threads();
    let rss_before = hub.rss_kib();

    // Panels subscribed to every session: some read everything, some
    // never read (they are cut at their outbound budget).
    let subscribe_all = |ws: &mut RawWs| {
        for id in &ids {
            ws.text(&format!(r#"{{"v":1,"type":"subscribe","session":"{id}"}}"#));
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let mut panel_readers = Vec::new();
    for _ in 0..reading_panels {
        let mut ws = RawWs::panel(&hub);
        subscribe_all(&mut ws);
        let stop = stop.clone();
        panel_readers.push(thread::spawn(move || drain_panel(ws, stop)));
    }
    let mut silent = Vec::new();
    for _ in 0..silent_panels {
        let mut ws = RawWs::panel(&hub);
        subscribe_all(&mut ws);
        silent.push(ws);
    }
    // Shard connections attached to every session, the same way.
    let attach_all = |client: &mut ShardClient| {
        for id in &ids {
            client.attach(id, "observer");
        }
    };
    let mut shard_readers = Vec::new();
    for _ in 0..reading_shards {
        let mut client = ShardClient::connect(&hub);
        attach_all(&mut client);
        let stop = stop.clone();
        shard_readers.push(thread::spawn(move || drain_shard(client, stop)));
    }
    let mut silent_shard = Vec::new();
    for _ in 0..silent_shards {
        let mut client = ShardClient::connect(&hub);
        attach_all(&mut client);
        silent_shard.push(client);
    }

    let started = Instant::now();
    let mut floods = Vec::new();
    // Worker events: 15 KiB each, far above the 1 MiB transcripts.
    let pad = "e".repeat(15 * KB as usize);
    for (i, mut ws) in workers.into_iter().enumerate() {
        let id = ids[i].clone();
        let pad = pad.clone();
        floods.push(thread::spawn(move || {
            let mut batch = Vec::with_capacity(1 << 20);
            let mut sent = 0u64;
            for seq in 3..3 + events_per_session {
                // (a text part: panels and Shard clients both get it)
                let content = json!([{"type": "text", "modality": "text", "raw": pad}]);
                let text = envelope(&id, "w", seq, "model_response", json!({"content": content}));
                sent += text.len() as u64;
                batch.extend_from_slice(&frame_of(&text));
                if batch.len() >= 1 << 20 {
                    ws.write(&batch).unwrap();
                    batch.clear();
                }
            }
            ws.write(&batch).unwrap();
            (sent, Some(ws), Vec::new())
        }));
    }
    // Confirmation sockets: one request of 4 KiB arguments each, kept open.
    for id in ids.iter().take(confirming) {
        let addr = hub.addr;
        let path = confirm_path(&hub, id);
        let id = id.clone();
        floods.push(thread::spawn(move || {
            let mut kept = Vec::new();
            let mut sent = 0u64;
            let command = "c".repeat(4 * KB as usize);
            for n in 0..confirm_sockets {
                let Ok(mut ws) = RawWs::connect(addr, &path, &[]) else {
                    continue;
                };
                let text =
                    confirmation_request(&id, "w", &format!("c{n}"), json!({"command": command}));
                sent += text.len() as u64;
                if ws.write(&frame_of(&text)).is_ok() {
                    kept.push(ws);
                }
            }
            (sent, None, kept)
        }));
    }
    // Tool sockets: plan replacements of 12 KiB from more clients than the
    // cap admits (the rest are refused with 503 and try again).
    let outcomes = Arc::new(Mutex::new((0u64, 0u64, 0u64))); // ok, other, 503
    let mut tool_threads = Vec::new();
    for t in 0..tool_flooders {
        let id = ids[t % sessions].clone();
        let path = format!(
            "/agent/{id}/tools/plan/replace?token={}",
            worker_token(&hub.data_dir, &id)
        );
        let stop = stop.clone();
        let outcomes = outcomes.clone();
        tool_threads.push(thread::spawn(move || {
            let mut sent = 0u64;
            let mut n = 0u64;
            while !stop.load(Ordering::Acquire) {
                n += 1;
                let markdown = format!("# plan {t}-{n}\n{}", "p".repeat(12 * KB as usize));
                let frame = json!({"type": "tool_request", "data": {
                    "worker_id": "w", "session_id": id, "run_id": "r1",
                    "request_id": format!("t{t}-{n}"), "arguments": {"markdown": markdown},
                }})
                .to_string();
                let result = tool_exchange(tools, &path, &frame);
                if result != Err(503) {
                    sent += frame.len() as u64; // the upgrade was accepted
                }
                {
                    let mut o = outcomes.lock().unwrap();
                    match &result {
                        Ok(v) if v["data"]["status"] == "succeeded" => o.0 += 1,
                        Ok(_) | Err(0) => o.1 += 1,
                        Err(503) => o.2 += 1,
                        Err(other) => panic!("a tool upgrade refused with {other}"),
                    }
                }
                if result.is_err() {
                    // the refused client's pace: it tries again 20 ms later
                    thread::sleep(Duration::from_millis(20));
                }
            }
            sent
        }));
    }
    // HTTP: a crowd of unfinished heads, and transcript reads as fast as
    // the handler threads allow.
    let crowd: Vec<TcpStream> = (0..http_crowd)
        .filter_map(|_| {
            let mut s = TcpStream::connect(hub.addr).ok()?;
            s.write_all(b"GET /api/meta HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Half: ")
                .ok()?;
            Some(s)
        })
        .collect();
    let mut readers = Vec::new();
    for i in 0..handler_cap {
        let addr = hub.addr;
        let path = format!("/api/sessions/{}/events", ids[i % sessions]);
        let stop = stop.clone();
        readers.push(thread::spawn(move || {
            let mut read = 0u64;
            while !stop.load(Ordering::Acquire) {
                read += request_at(addr, "GET", &path, b"").body.len() as u64;
                // the reader's pace: a full transcript page every 500 ms
                thread::sleep(Duration::from_millis(500));
            }
            read
        }));
    }

    // The floods run; the peak is sampled meanwhile.
    let mut sent = 0u64;
    let mut kept_workers = Vec::new();
    let mut kept_prompts = Vec::new();
    let mut max_threads = 0usize;
    for flood in floods {
        while !flood.is_finished() {
            max_threads = max_threads.max(hub.threads());
            // the sampling pace of the probe
            thread::sleep(Duration::from_millis(50));
        }
        let (bytes, worker, prompts) = flood.join().unwrap();
        sent += bytes;
        kept_workers.extend(worker);
        kept_prompts.extend(prompts);
    }
    for id in &ids {
        let mut last = Value::Null;
        let ingested = wait_until(Duration::from_secs(120), || {
            max_threads = max_threads.max(hub.threads());
            last = get_session(&hub, id);
            last["stats"]["events"] == 2 + events_per_session
        });
        assert!(ingested, "{id}: {}", last["stats"]);
    }
    for id in ids.iter().take(confirming) {
        wait_session(&hub, id, |s| {
            s["confirmations"].as_array().map(Vec::len) == Some(64)
        });
    }
    stop.store(true, Ordering::Release);
    let mut tool_bytes = 0u64;
    for t in tool_threads {
        tool_bytes += t.join().unwrap();
    }
    sent += tool_bytes;
    let mut http_read = 0u64;
    for r in readers {
        http_read += r.join().unwrap();
    }
    let mut panel_read = 0u64;
    for r in panel_readers {
        panel_read += r.join().unwrap();
    }
    let mut shard_read = 0u64;
    for r in shard_readers {
        shard_read += r.join().unwrap();
    }
    let took = started.elapsed();
    max_threads = max_threads.max(hub.threads());
    let peak = hub.peak_rss_kib();

    // It still answers, and the silent panels were cut at their budgets.
    assert!(answers_within(&hub, Duration::from_secs(5)));
    for mut ws in silent {
        let (ended, _) = ws.ends(DEADLINE);
        assert!(ended, "a panel that never reads was not cut");
    }
    for mut client in silent_shard {
        assert!(
            client.ends_within(DEADLINE),
            "a Shard client that never reads was not cut"
        );
    }
    let (plans_ok, plans_other, refused) = *outcomes.lock().unwrap();
    assert!(plans_ok > 0, "no plan replacement succeeded");
    assert!(refused > 0, "the tool cap never refused a connection");

    // The ceiling, from the configured limits (KiB):
    let frame_cap = max_message.min(1024 * KB) / KB; // confirmation and tool frames
    let per_session = transcript_bytes / KB // the transcript ring
        + 5000 * 256 / KB // its per-entry bookkeeping
        + MIB // the events.jsonl writer's pending budget
        + 2 * 64; // the plan (64 KiB of markdown) in the store cache and the panel cache
    let per_event_socket = 4 * max_message / KB; // reader buffer, one message parsed and re-encoded
                                                 // An open prompt: its frame, the parsed arguments and the previews.
    let per_prompt = 3 * frame_cap;
    // A tool exchange: its frame, the parsed request, and a response of at
    // most 256 KiB.
    let per_tool_socket = 2 * frame_cap + 256;
    // A panel: the 4 MiB outbound budget and one client message of at most
    // 4 MiB being read.
    let per_panel = 4 * MIB + 4 * MIB;
    // A Shard connection: the same, and an attachment's window being built
    // (at most 1 MiB of entries read back, 256 KiB of messages rendered).
    let per_shard = 4 * MIB + 4 * MIB + MIB + 256;
    // An HTTP handler: a transcript page of up to transcriptBytes, as
    // entries, as JSON text and as the response buffer.
    let per_handler = 3 * transcript_bytes / KB;
    // A connection waiting for its head: at most maxHeaderBytes + 1 KiB.
    let per_waiting = 16 + 1;
    // Threads: one per event socket, open prompt, tool socket, handler,
    // panel (writer and reader) and disk writer, over the idle hub's; each
    // touches at most 64 KiB of its stack and thread state.
    let threads_bound = baseline_threads
        + sessions
        + confirming * 64
        + tool_cap
        + handler_cap
        + 2 * (reading_panels + silent_panels + reading_shards + silent_shards)
        + 2 * sessions;
    let ceiling = rss_before
        + sessions as u64 * (per_session + per_event_socket)
        + (confirming * 64) as u64 * per_prompt
        + tool_cap as u64 * per_tool_socket
        + (reading_panels + silent_panels) as u64 * per_panel
        + (reading_shards + silent_shards) as u64 * per_shard
        + handler_cap as u64 * per_handler
        + http_crowd as u64 * per_waiting
        + threads_bound as u64 * 64
        + ALLOCATOR_SLACK_KIB;
    assert!(
        max_threads <= threads_bound,
        "{max_threads} threads over the bound {threads_bound}"
    );
    assert!(
        peak <= ceiling,
        "peak RSS {peak} KiB over the ceiling {ceiling} KiB (start {rss_before} KiB)"
    );
    // Keeping what the flood sent would overshoot the ceiling.
    assert!(
        rss_before + sent / KB > ceiling,
        "sent only {} KiB",
        sent / KB
    );
    eprintln!(
        "every socket at once: {} MiB sent in {took:?} ({} sessions x {events_per_session} \
         events, {} prompts, {plans_ok} plans replaced ({plans_other} other, {refused} tool \
         upgrades refused at the cap of {tool_cap}), {} panels ({} MiB read by {reading_panels}, \
         {silent_panels} silent cut), {} Shard connections ({} MiB read by {reading_shards}, \
         {silent_shards} silent cut), {http_crowd} unfinished heads, {} MiB of transcript \
         pages); peak RSS {} MiB (start {} MiB, ceiling {} MiB); threads {max_threads} \
         (bound {threads_bound})",
        sent / KB / KB,
        sessions,
        kept_prompts.len(),
        reading_panels + silent_panels,
        panel_read / KB / KB,
        reading_shards + silent_shards,
        shard_read / KB / KB,
        http_read / KB / KB,
        peak / KB,
        rss_before / KB,
        ceiling / KB,
    );
    drop(crowd);
    drop(kept_prompts);
    drop(kept_workers);
}
