//! Floods and slow peers: gigabyte bodies trickled or blasted, slowloris,
//! ping floods, a worker that never reads, and event floods far above the
//! transcript limits. Each test proves the hub keeps serving others with
//! bounded threads and memory.
//!
//! Memory ceilings are derived from the configured limits (each test
//! states its derivation) plus `ALLOCATOR_SLACK_KIB` for the allocator,
//! which does not hand every freed page back; an unbounded structure
//! overshoots them by far more than that allowance.
//!
//! These tests run one at a time (`heavy()`), so a slow 2-core machine
//! gives each the CPU it needs; every wait has a deadline. Their sleeps
//! pace an attacker or a probe on purpose: the pacing is the attack.

use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::util::*;

#[test]
fn a_gigabyte_content_length_with_a_trickled_body_is_refused_at_once() {
    let _heavy = heavy();
    let dir = TempDir::new("hostile-gigabody");
    let request_timeout = Duration::from_millis(3000);
    let hub = hub_with(
        &dir,
        json!({"http": {"requestTimeoutMs": 3000, "idleTimeoutMs": 1500}}),
    );
    let baseline = hub.threads();
    let rss_before = hub.rss_kib();
    let gib = 1u64 << 30;
    for (method, path, expected) in [
        ("POST", "/api/sessions", 413),
        ("POST", "/api/sessions/x/input", 413),
        ("GET", "/api/meta", 200),
        ("POST", "/", 405),
    ] {
        let mut s = TcpStream::connect(hub.addr).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {gib}\r\n\r\n",
            hub.addr
        )
        .unwrap();
        let started = Instant::now();
        // The trickle: 1 KiB every 100 ms, never idle long enough for the
        // idle timeout, so only the request deadline can end it.
        let mut writer = s.try_clone().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stop_writer = stop.clone();
        let trickle = thread::spawn(move || {
            let chunk = [b'x'; 1024];
            let mut sent = 0u64;
            while !stop_writer.load(Ordering::Acquire) && writer.write_all(&chunk).is_ok() {
                sent += 1024;
                // the trickle's pace is the attack
                thread::sleep(Duration::from_millis(100));
            }
            sent
        });
        s.set_read_timeout(Some(DEADLINE)).unwrap();
        let head = read_head(&mut s).expect("an answer before the body");
        assert_eq!(status_line_code(&head), expected, "{method} {path}: {head}");
        assert!(
            started.elapsed() < request_timeout,
            "{method} {path}: answered only after {:?}",
            started.elapsed()
        );
        // Meanwhile the hub serves others.
        assert!(
            answers_within(&hub, Duration::from_secs(2)),
            "{method} {path}"
        );
        // The connection ends at the request deadline, not after 1 GiB.
        assert!(
            closes_within(&mut s, request_timeout + Duration::from_secs(5)),
            "{method} {path}: still open after {:?}",
            started.elapsed()
        );
        stop.store(true, Ordering::Release);
        let sent = trickle.join().unwrap();
        assert!(sent < 1 << 20, "{sent} bytes trickled");
    }
    // The body blasted as fast as loopback carries it, announcing 1 TiB:
    // the drain reads through a small buffer and stops at the deadline,
    // whatever the rate (a 1 GiB body may drain completely before it).
    let mut s = TcpStream::connect(hub.addr).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
    write!(
        s,
        "POST /api/sessions HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n\r\n",
        hub.addr,
        1u64 << 40
    )
    .unwrap();
    let started = Instant::now();
    let chunk = vec![b'y'; 256 * 1024];
    let mut blasted = 0u64;
    let mut cut = false;
    while started.elapsed() < request_timeout + Duration::from_secs(15) {
        match s.write_all(&chunk) {
            Ok(()) => blasted += chunk.len() as u64,
            Err(_) => {
                cut = true;
                break;
            }
        }
    }
    let blast_took = started.elapsed();
    assert!(
        cut,
        "the hub kept reading a 1 TiB body ({blasted} bytes) for {blast_took:?}"
    );
    assert!(threads_settle(&hub, baseline));
    let grown = hub.rss_kib().saturating_sub(rss_before);
    // Ceiling: the body is never buffered (413 before reading; the drain
    // uses an 8 KiB buffer), so only the connections' stacks and buffers
    // count: a few MiB; 8 MiB allows for the allocator.
    assert!(grown < 8 * MIB, "RSS grew by {grown} KiB for 1 GiB bodies");
    eprintln!(
        "gigabyte body: RSS grew {grown} KiB (ceiling {} KiB); a blasted body was cut after \
         {blasted} bytes in {blast_took:?}",
        8 * MIB
    );
}

#[test]
fn slowloris_cannot_starve_a_normal_client_or_grow_threads() {
    let _heavy = heavy();
    let dir = TempDir::new("hostile-slowloris");
    let cap = 32usize;
    let hub = hub_with(
        &dir,
        json!({"http": {"maxConnections": cap, "requestTimeoutMs": 2000, "idleTimeoutMs": 1000}}),
    );
    let baseline = hub.threads();
    let addr = hub.addr;
    let attack_for = Duration::from_secs(8);
    let stop = Arc::new(AtomicBool::new(false));
    let attacker_stop = stop.clone();
    // The attacker keeps up to 120 connections open, each sending part of
    // a head and then one byte every 400 ms (never idle for 1 s), and
    // replaces every connection the hub cuts.
    let attacker = thread::spawn(move || {
        let mut conns: Vec<TcpStream> = Vec::new();
        let mut opened = 0usize;
        let mut last_drip = Instant::now();
        while !attacker_stop.load(Ordering::Acquire) {
            while conns.len() < 120 {
                let Ok(mut s) = TcpStream::connect(addr) else {
                    break;
                };
                s.set_write_timeout(Some(Duration::from_millis(200)))
                    .unwrap();
                if s.write_all(b"GET /api/meta HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                    .is_ok()
                {
                    conns.push(s);
                    opened += 1;
                }
            }
            if last_drip.elapsed() >= Duration::from_millis(400) {
                conns.retain_mut(|s| s.write_all(b"a").is_ok());
                last_drip = Instant::now();
            }
            // the attacker's pace (it drips every 400 ms, see above)
            thread::sleep(Duration::from_millis(20));
        }
        opened
    });
    let started = Instant::now();
    let (mut answered, mut ok, mut refused, mut max_threads) = (0, 0, 0, 0usize);
    let mut slowest = Duration::ZERO;
    while started.elapsed() < attack_for {
        max_threads = max_threads.max(hub.threads());
        let raw = format!("GET /api/meta HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        let asked = Instant::now();
        let reply = exchange_within(addr, raw.as_bytes(), Duration::from_secs(5))
            .expect("a normal client got no answer within 5 s");
        slowest = slowest.max(asked.elapsed());
        answered += 1;
        match status_line_code(&reply) {
            200 => ok += 1,
            503 => refused += 1,
            other => panic!("unexpected {other}: {reply}"),
        }
        // the normal client's pace: one request every 100 ms meanwhile
        thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Release);
    let opened = attacker.join().unwrap();
    // Thread ceiling: the idle hub's threads plus one per allowed HTTP
    // connection (the 503 is written by the accept thread itself).
    assert!(
        max_threads <= baseline + cap,
        "{max_threads} threads with a cap of {cap} over {baseline}"
    );
    assert!(slowest < Duration::from_secs(5));
    assert!(
        opened > cap * 2,
        "the attacker opened only {opened} connections"
    );
    assert!(answers_within(&hub, Duration::from_secs(5)));
    assert!(
        threads_settle(&hub, baseline + 1),
        "threads {} > {baseline}",
        hub.threads()
    );
    eprintln!(
        "slowloris: {opened} attacker connections; normal client {answered} answers \
         ({ok} ok, {refused} 503), slowest {slowest:?}; threads max {max_threads} \
         (baseline {baseline}, cap {cap})"
    );
}

/// 100 pings of 125 bytes of `fill` each, for one write.
fn ping_batch(fill: u8) -> Vec<u8> {
    let ping = frame(true, op::PING, &[fill; 125]);
    ping.iter()
        .copied()
        .cycle()
        .take(ping.len() * 100)
        .collect()
}

#[test]
fn ping_floods_are_answered_and_others_keep_being_served() {
    let _heavy = heavy();
    let dir = TempDir::new("hostile-pings");
    // idleTimeoutMs is also the write timeout of upgraded sockets.
    let hub = hub_with(&dir, json!({"http": {"idleTimeoutMs": 2000}}));
    create_session(&hub, "p");
    create_session(&hub, "q");
    let baseline = hub.threads();
    let rss_before = hub.rss_kib();
    let mut healthy = RawWs::panel(&hub);
    let mut healthy_worker = RawWs::open(hub.addr, &events_path(&hub, "q"));
    let flood = 20_000usize;

    // Reading flooders (a panel and a worker socket): every ping carries
    // 125 bytes; the pongs are read by a second thread.
    let mut flooders = Vec::new();
    for path in ["/panel/ws".to_string(), events_path(&hub, "p")] {
        let ws = RawWs::open(hub.addr, &path);
        let mut reader = RawWs {
            s: ws.s.try_clone().unwrap(),
        };
        let mut writer = ws.s.try_clone().unwrap();
        let counter = thread::spawn(move || {
            let mut pongs = 0usize;
            reader
                .s
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            while let Ok((_, opcode, _)) = reader.read_frame() {
                if opcode == op::PONG {
                    pongs += 1;
                    if pongs == flood {
                        break;
                    }
                }
            }
            pongs
        });
        let sender = thread::spawn(move || {
            let batch = ping_batch(b'p');
            for _ in 0..flood / 100 {
                writer.write_all(&batch).unwrap();
            }
        });
        flooders.push((ws, sender, counter));
    }
    // Others keep being served while the floods run.
    let mut slowest = Duration::ZERO;
    let mut rounds = 0;
    while flooders.iter().any(|(_, sender, _)| !sender.is_finished()) || rounds < 5 {
        slowest = slowest.max(healthy.panel_round_trip());
        rounds += 1;
        healthy_worker.text(&envelope("q", "w", rounds, "status", json!({})));
        assert!(answers_within(&hub, Duration::from_secs(5)));
        assert!(rounds < 10_000);
    }
    wait_session(&hub, "q", |s| s["stats"]["events"] == rounds);
    for (mut ws, sender, counter) in flooders {
        sender.join().unwrap();
        let pongs = counter.join().unwrap();
        // tungstenite answers every ping it reads unless a newer one
        // replaces a pong not yet written: at least one, at most all.
        assert!((1..=flood).contains(&pongs), "{pongs} pongs");
        // The flooded socket still works.
        ws.s.set_read_timeout(Some(DEADLINE)).unwrap();
        ws.send(true, op::PING, b"last");
        let end = Instant::now() + DEADLINE;
        loop {
            assert!(Instant::now() < end);
            let (_, opcode, payload) = ws.read_frame().unwrap();
            if opcode == op::PONG && payload == b"last" {
                break;
            }
        }
        eprintln!("ping flood: {pongs} pongs for {flood} pings");
    }

    // A flooder that never reads: the hub's pong writes back up, that one
    // socket stops being read, and its writes time out after idleTimeoutMs;
    // nobody else notices.
    let ws = RawWs::open(hub.addr, "/panel/ws");
    let mut writer = ws.s.try_clone().unwrap();
    writer
        .set_write_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let sender = thread::spawn(move || {
        let batch = ping_batch(b'n');
        let mut sent = 0usize;
        while sent < 2_000_000 && writer.write_all(&batch).is_ok() {
            sent += 100;
        }
        sent
    });
    while !sender.is_finished() {
        slowest = slowest.max(healthy.panel_round_trip());
        // the healthy panel's pace while the flood runs
        thread::sleep(Duration::from_millis(50));
    }
    let sent = sender.join().unwrap();
    assert!(
        sent < 2_000_000,
        "the hub read {sent} pings without writing a pong"
    );
    let mut stuck = ws;
    // It ends: its blocked pong write fails after the write timeout.
    let (ended, _) = stuck.ends(DEADLINE);
    assert!(ended, "a non-reading ping flooder was never cut");
    assert!(
        slowest < Duration::from_secs(5),
        "slowest round trip {slowest:?}"
    );
    drop(healthy);
    drop(healthy_worker);
    assert!(
        threads_settle(&hub, baseline),
        "threads {} > {baseline}",
        hub.threads()
    );
    // Ceiling: a pending pong is one frame (127 bytes) per socket and the
    // reader buffers at most one frame, so floods add nothing but socket
    // buffers; the allocator allowance covers the threads involved.
    let grown = hub.peak_rss_kib().saturating_sub(rss_before);
    assert!(
        grown < ALLOCATOR_SLACK_KIB,
        "RSS peaked {grown} KiB above the start"
    );
    eprintln!(
        "ping floods: slowest healthy round trip {slowest:?}; non-reader cut after {sent} pings; \
         RSS peak +{grown} KiB (ceiling {ALLOCATOR_SLACK_KIB} KiB)"
    );
}

#[test]
fn a_worker_that_never_reads_does_not_block_other_sessions() {
    let _heavy = heavy();
    let dir = TempDir::new("hostile-nonreader");
    // The write timeout of upgraded sockets is http.idleTimeoutMs.
    let write_timeout = Duration::from_millis(5000);
    let hub = hub_with(&dir, json!({"http": {"idleTimeoutMs": 5000}}));
    create_session(&hub, "stuck");
    create_session(&hub, "fine");
    let baseline = hub.threads();
    let mut stuck = RawWs::open(hub.addr, &events_path(&hub, "stuck"));
    stuck.text(&envelope("stuck", "w", 1, "ready", json!({})));
    let mut fine = RawWs::open(hub.addr, &events_path(&hub, "fine"));
    fine.text(&envelope("fine", "w", 1, "ready", json!({})));
    wait_session(&hub, "stuck", |s| s["identity"]["state"] == "live");
    wait_session(&hub, "fine", |s| s["identity"]["state"] == "live");
    let mut healthy = RawWs::panel(&hub);

    // Inputs of 256 KiB to the worker that never reads, until one fails.
    let addr = hub.addr;
    let filler = thread::spawn(move || {
        let content = "z".repeat(256 * 1024);
        let mut outcomes = Vec::new();
        for i in 0..400 {
            let body = json!({"request_id": format!("r{i}"),
                "content": [{"type": "text", "modality": "text", "raw": content}]})
            .to_string();
            let raw = format!(
                "POST /api/sessions/stuck/input HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
            let asked = Instant::now();
            let reply = exchange_within(addr, raw.as_bytes(), DEADLINE).expect("input answered");
            let code = status_line_code(&reply);
            outcomes.push((code, asked.elapsed()));
            if code != 202 {
                break;
            }
        }
        outcomes
    });
    // Meanwhile the other session's inputs, events and the panel are
    // served promptly.
    let mut slowest = Duration::ZERO;
    let mut i = 0;
    while !filler.is_finished() || i < 3 {
        i += 1;
        assert!(i < 2000, "the filler never finished");
        let asked = Instant::now();
        let res = post(
            &hub,
            "/api/sessions/fine/input",
            json!({"request_id": format!("ok{i}"), "content": [{"type": "text", "modality": "text", "raw": "hi"}]}),
        );
        assert_eq!(res.status, 202, "{}", res.text());
        let id = format!("ok{i}");
        fine.next_text(|v| v["type"] == "payload" && v["data"]["request_id"] == id.as_str());
        fine.text(&envelope("fine", "w", 1 + i, "status", json!({"i": i})));
        slowest = slowest.max(asked.elapsed());
        slowest = slowest.max(healthy.panel_round_trip());
        // the other session's pace while the filler runs
        thread::sleep(Duration::from_millis(50));
    }
    let outcomes = filler.join().unwrap();
    let (last_code, last_took) = *outcomes.last().unwrap();
    assert_eq!(last_code, 409, "{outcomes:?}");
    assert!(
        // (SO_SNDTIMEO bounds each send(2): a partial send and then a
        // timed-out one make at most twice the timeout)
        last_took < 2 * write_timeout + Duration::from_secs(5),
        "the failing write took {last_took:?}"
    );
    // (under the 5 s write timeout: nobody waited behind the stuck write)
    assert!(
        slowest < Duration::from_secs(3),
        "other sessions waited {slowest:?}"
    );
    // The unwritable socket is ended, so the session is not shown as
    // connected while every send to it would fail.
    wait_session(&hub, "stuck", |s| s["connected"] == false);
    let s = get_session(&hub, "stuck");
    assert!(s["requests"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["state"] != "sent"));
    drop(stuck);
    drop(fine);
    drop(healthy);
    assert!(
        threads_settle(&hub, baseline),
        "threads {} > {baseline}",
        hub.threads()
    );
    eprintln!(
        "non-reading worker: {} inputs before the write failed after {last_took:?}; \
         other sessions' slowest round trip {slowest:?}",
        outcomes.len() - 1
    );
}

#[test]
fn event_floods_far_above_the_transcript_limits_keep_memory_bounded() {
    let _heavy = heavy();
    let dir = TempDir::new("hostile-flood");
    let transcript_bytes = 1024 * 1024u64;
    let max_message = 256 * 1024u64;
    let hub = hub_with(
        &dir,
        json!({"limits": {"transcriptBytes": transcript_bytes, "maxMessageBytes": max_message}}),
    );
    create_session(&hub, "flood");
    let rss_before = hub.rss_kib();
    // A panel subscribed to the flooded session, reading everything.
    let mut watcher = RawWs::panel(&hub);
    watcher.text(r#"{"v":1,"type":"subscribe","session":"flood"}"#);
    watcher.next_text(|v| v["type"] == "subscribed");
    let watcher_ctl = watcher.s.try_clone().unwrap();
    let watcher_thread = thread::spawn(move || {
        let mut events = 0u64;
        watcher.s.set_read_timeout(None).unwrap();
        while let Ok((_, opcode, payload)) = watcher.read_frame() {
            let head = &payload[..payload.len().min(64)];
            if opcode == op::TEXT && head.windows(14).any(|w| w == b"\"type\":\"event\"") {
                events += 1;
            }
        }
        events
    });
    let mut ws = RawWs::open(hub.addr, &events_path(&hub, "flood"));
    ws.s.set_write_timeout(Some(Duration::from_secs(60)))
        .unwrap();

    // Phase 1: 200k small events, with repeated and jumping sequences.
    let small = 200_000u64;
    let (mut duplicates, mut gaps, mut seq) = (0u64, 0u64, 0u64);
    let mut batch = Vec::with_capacity(1 << 20);
    for i in 1..=small {
        if i % 10_000 == 0 {
            duplicates += 1; // repeat the previous sequence
        } else if i % 10_000 == 5_000 {
            gaps += 1;
            seq += 1_000;
        } else {
            seq += 1;
        }
        let text = envelope("flood", "w", seq, "status", json!({"i": i}));
        batch.extend_from_slice(&frame(true, op::TEXT, text.as_bytes()));
        if batch.len() >= 1 << 20 {
            ws.write(&batch).unwrap();
            batch.clear();
        }
    }
    ws.write(&batch).unwrap();
    let flood_deadline = Duration::from_secs(180);
    let mut last = Value::Null;
    assert!(
        wait_until(flood_deadline, || {
            last = get_session(&hub, "flood");
            last["stats"]["events"] == small
        }),
        "small flood not ingested: {}",
        last["stats"]
    );
    assert_eq!(last["stats"]["duplicates"], duplicates);
    assert_eq!(last["stats"]["gaps"], gaps);

    // Phase 2: 2000 events of 60 KiB (117 MiB, over 100 times the ring).
    let big = 2_000u64;
    let pad = "b".repeat(60 * 1024);
    for i in 1..=big {
        let text = envelope(
            "flood",
            "w",
            seq + i,
            "model_response",
            json!({"pad": pad, "i": i}),
        );
        ws.write(&frame(true, op::TEXT, text.as_bytes())).unwrap();
    }
    assert!(
        wait_until(flood_deadline, || {
            last = get_session(&hub, "flood");
            last["stats"]["events"] == small + big
        }),
        "big flood not ingested: {}",
        last["stats"]
    );
    let page = hub.get("/api/sessions/flood/events").json();
    let events = page["events"].as_array().unwrap();
    let retained: u64 = events.iter().map(|e| e.to_string().len() as u64).sum();
    assert!(retained <= transcript_bytes, "{retained} bytes retained");
    assert!(events.len() <= 5000);
    assert_eq!(page["latest"], small + big);
    assert!(answers_within(&hub, Duration::from_secs(5)));
    let peak = hub.peak_rss_kib();
    drop(ws);
    let _ = watcher_ctl.shutdown(Shutdown::Both);
    let seen = watcher_thread.join().unwrap();

    // Ceiling, from the configured limits: the transcript ring
    // (transcriptBytes) plus its per-entry bookkeeping (5000 entries);
    // the events.jsonl writer's 1 MiB pending budget; the socket reader's
    // buffer and one message in flight with its parsed and serialized
    // copies (4 x maxMessageBytes); the watching panel's 4 MiB outbound
    // budget; plus the allocator allowance. Unbounded retention would be
    // the 117 MiB sent in phase 2 alone.
    let ceiling = rss_before
        + transcript_bytes / 1024
        + 5000 * 256 / 1024
        + MIB
        + 4 * max_message / 1024
        + 4 * MIB
        + ALLOCATOR_SLACK_KIB;
    assert!(
        peak <= ceiling,
        "peak RSS {peak} KiB over the ceiling {ceiling} KiB (start {rss_before} KiB)"
    );
    eprintln!(
        "event flood: {} events, peak RSS {peak} KiB (start {rss_before} KiB, ceiling {ceiling} KiB); \
         the watching panel saw {seen} events",
        small + big
    );
}
