//! WebSocket abuse on the worker event, confirmation and panel routes:
//! wrong tokens and browser origins, invalid UTF-8 and binary frames,
//! fragments with control frames in between, messages trickled byte by
//! byte, frame protocol violations, messages over every limit, and peers
//! that never close or vanish mid-frame. Every byte on the wire is chosen
//! by the test (`RawWs`). The offending socket ends, nothing else does,
//! and the hub's threads return to their baseline.

use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::util::*;

#[test]
fn worker_routes_check_tokens_and_refuse_browser_origins() {
    let dir = TempDir::new("hostile-wsauth");
    let hub = TestHub::start(dir.path(), &["--panel-token", "panel-tok"]);
    create_session_with_token(&hub, "w", "panel-tok");
    let token = worker_token(&hub.data_dir, "w");
    let host = hub.addr.to_string();
    let same_origin = format!("http://{host}");
    for route in ["events", "confirm"] {
        let good = format!("/agent/w/{route}?token={token}");
        for (path, headers, expected) in [
            (format!("/agent/w/{route}"), vec![], 401),
            (format!("/agent/w/{route}?token="), vec![], 401),
            (
                format!("/agent/w/{route}?token={}", &token[..token.len() - 1]),
                vec![],
                401,
            ),
            (format!("/agent/w/{route}?token={token}x"), vec![], 401),
            (format!("/agent/w/{route}?tok={token}"), vec![], 401),
            (format!("/agent/w/{route}?token=panel-tok"), vec![], 401),
            (
                format!("/agent/w/{route}"),
                vec![("Authorization", format!("Bearer {token}"))],
                401,
            ),
            (
                format!("/agent/w/{route}"),
                vec![("Cookie", format!("simplex_hub_token={token}"))],
                401,
            ),
            (
                good.clone(),
                vec![("Origin", "http://evil.example".to_string())],
                403,
            ),
            (good.clone(), vec![("Origin", "null".to_string())], 403),
            (
                good.clone(),
                vec![("Origin", format!("http://localhost:{}", hub.addr.port()))],
                403,
            ),
            (
                good.clone(),
                vec![("Origin", format!("https://{host}.evil.example"))],
                403,
            ),
            (
                good.clone(),
                vec![("Sec-WebSocket-Version", "8".to_string())],
                400,
            ),
        ] {
            let extra: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let res = if extra.iter().any(|(k, _)| *k == "Sec-WebSocket-Version") {
                // replace the version rather than add a second one
                let raw = upgrade_request(hub.addr, &path, &[])
                    .replace("Sec-WebSocket-Version: 13", "Sec-WebSocket-Version: 8");
                status_line_code(&exchange_within(hub.addr, raw.as_bytes(), DEADLINE).unwrap())
            } else {
                match RawWs::connect(hub.addr, &path, &extra) {
                    Ok(_) => 101,
                    Err(code) => code,
                }
            };
            assert_eq!(res, expected, "{path} {headers:?}");
        }
        // Workers send no Origin; a same-origin client library may.
        assert!(RawWs::connect(hub.addr, &good, &[]).is_ok());
        assert!(RawWs::connect(hub.addr, &good, &[("Origin", &same_origin)]).is_ok());
    }
    // The panel socket refuses the opaque origin too.
    assert_eq!(
        RawWs::connect(hub.addr, "/panel/ws?token=panel-tok", &[("Origin", "null")]).err(),
        Some(403)
    );
}

#[test]
fn invalid_utf8_and_binary_frames_are_refused_per_route() {
    let dir = TempDir::new("hostile-utf8");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "u");
    let baseline = hub.threads();
    let mut healthy = RawWs::panel(&hub);

    // Worker event socket: invalid UTF-8 closes 1007, even when the bad
    // byte arrives in a continuation frame.
    for frames in [
        vec![frame(true, op::TEXT, b"{\"type\":\"ev\xff\xfe\"}")],
        vec![
            frame(false, op::TEXT, b"{\"a\":\"\xc3"),
            frame(true, op::CONT, b"\x28\"}"),
        ],
    ] {
        let mut ws = RawWs::open(hub.addr, &events_path(&hub, "u"));
        for f in &frames {
            ws.write(f).unwrap();
        }
        let (ended, code) = ws.ends(DEADLINE);
        assert!(ended);
        assert_eq!(code, Some(1007));
    }
    let s = wait_session(&hub, "u", |s| s["connected"] == false);
    assert!(s["stats"]["protocolErrors"].as_u64().unwrap() >= 2);
    // A binary frame is a protocol error; the socket stays up.
    let mut ws = RawWs::open(hub.addr, &events_path(&hub, "u"));
    ws.send(true, op::BINARY, &[0, 1, 2, 255]);
    ws.text(&envelope("u", "w", 1, "status", json!({"after": "binary"})));
    wait_event(&hub, "u", |e| e["data"]["after"] == "binary");
    drop(ws);

    // Panel: invalid UTF-8 fails that connection with 1007 (RFC 6455
    // §8.1); binary gets an error.
    let mut bad = RawWs::panel(&hub);
    bad.send(true, op::BINARY, b"\x00\x01");
    assert_eq!(
        bad.next_text(|v| v["type"] == "error")["error"],
        "binary_not_supported"
    );
    bad.send(true, op::TEXT, b"{\"v\":1,\"type\":\"ping\xff\"}");
    let (ended, code) = bad.ends(DEADLINE);
    assert!(ended, "the panel kept a connection that sent invalid UTF-8");
    assert_eq!(code, Some(1007));

    // Shard: the same, after its hello.
    let mut shard = RawWs::open(hub.addr, "/shard/ws");
    shard.next_text(|v| v["type"] == "hello");
    shard.send(true, op::TEXT, b"{\"type\":\"agent.list\xff\"}");
    let (ended, code) = shard.ends(DEADLINE);
    assert!(ended, "Shard kept a connection that sent invalid UTF-8");
    assert_eq!(code, Some(1007));

    // Confirmation socket: invalid UTF-8 or binary: closed, no prompt.
    for payload in [
        (op::TEXT, &b"{\"type\":\"\xff\"}"[..]),
        (op::BINARY, &b"\x01"[..]),
    ] {
        let mut ws = RawWs::open(hub.addr, &confirm_path(&hub, "u"));
        ws.send(true, payload.0, payload.1);
        let (ended, code) = ws.ends(DEADLINE);
        assert!(ended);
        assert!(matches!(code, None | Some(1007) | Some(1008)), "{code:?}");
    }
    assert_eq!(get_session(&hub, "u")["confirmations"], json!([]));
    assert!(healthy.panel_round_trip() < Duration::from_secs(5));
    drop(healthy);
    assert!(threads_settle(&hub, baseline));
}

#[test]
fn fragmented_messages_work_with_interleaved_control_frames() {
    let dir = TempDir::new("hostile-fragments");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "f");
    // Worker events: one envelope in five fragments, pings in between.
    let mut ws = RawWs::open(hub.addr, &events_path(&hub, "f"));
    let text = envelope("f", "w", 1, "status", json!({"fragmented": "é".repeat(10)}));
    let bytes = text.as_bytes();
    // split inside a multi-byte character on purpose
    let cut = text.find('é').unwrap() + 1;
    let parts = [
        &bytes[..10],
        &bytes[10..cut],
        &bytes[cut..cut + 7],
        &bytes[cut + 7..cut + 20],
        &bytes[cut + 20..],
    ];
    for (i, part) in parts.iter().enumerate() {
        let opcode = if i == 0 { op::TEXT } else { op::CONT };
        ws.send(i == parts.len() - 1, opcode, part);
        if i % 2 == 0 {
            ws.send(true, op::PING, format!("p{i}").as_bytes());
        }
    }
    let e = wait_event(&hub, "f", |e| e["sequence"] == 1);
    assert_eq!(e["data"]["fragmented"], "é".repeat(10));
    assert_eq!(e["raw"]["bytes"], text.len());
    // every ping got its pong, in order
    let mut pongs = Vec::new();
    while pongs.len() < 3 {
        let (_, opcode, payload) = ws.read_frame().unwrap();
        if opcode == op::PONG {
            pongs.push(String::from_utf8(payload).unwrap());
        }
    }
    assert_eq!(pongs, ["p0", "p2", "p4"]);

    // Panel: a fragmented ping message with a ping frame in the middle.
    let mut p = RawWs::panel(&hub);
    p.send(false, op::TEXT, b"{\"v\":1,");
    p.send(true, op::PING, b"mid");
    p.send(false, op::CONT, b"\"type\":");
    p.send(true, op::CONT, b"\"ping\"}");
    assert_eq!(p.next_pong(), b"mid");
    assert!(p.next_text(|v| v["type"] == "pong")["at"].is_string());

    // Confirmation: a fragmented request registers its prompt.
    ws.text(&envelope("f", "w", 2, "ready", json!({})));
    let mut c = RawWs::open(hub.addr, &confirm_path(&hub, "f"));
    let request = confirmation_request("f", "w", "cf-frag", json!({"command": "ls"}));
    let (a, b) = request.as_bytes().split_at(request.len() / 2);
    c.send(false, op::TEXT, a);
    c.send(true, op::PING, b"");
    c.send(true, op::CONT, b);
    let s = wait_session(&hub, "f", |s| {
        !s["confirmations"].as_array().unwrap().is_empty()
    });
    assert_eq!(s["confirmations"][0]["confirmation_id"], "cf-frag");
    assert_eq!(s["confirmations"][0]["state"], "awaiting-decision");
}

#[test]
fn panel_messages_trickled_byte_by_byte_are_answered_with_bounded_threads() {
    let dir = TempDir::new("hostile-panel-trickle");
    let hub = TestHub::start(dir.path(), &[]);
    let baseline = hub.threads();
    let mut panels: Vec<RawWs> = (0..20).map(|_| RawWs::panel(&hub)).collect();
    // A panel's welcome can arrive before the HTTP connection thread that
    // did its upgrade has exited: wait for those to end, so the bound
    // below counts only what the panels themselves hold.
    assert!(
        wait_until(DEADLINE, || hub.threads_named("http-conn") == 0),
        "{:?}",
        hub.thread_names()
    );
    let ping = frame(true, op::TEXT, br#"{"v":1,"type":"ping"}"#);
    // One byte to each panel in turn: every socket wakes the poller for
    // every byte, with a partial frame pending in between.
    for i in 0..ping.len() {
        for p in &mut panels {
            p.write(&ping[i..i + 1]).unwrap();
        }
        // at most a reader and a writer per panel, plus the poll thread
        assert!(
            hub.threads() <= baseline + 2 * panels.len() + 1,
            "baseline {baseline}: {:?}",
            hub.thread_names()
        );
    }
    for p in &mut panels {
        assert!(p.next_text(|v| v["type"] == "pong")["at"].is_string());
    }
    // Idle again: only the poll thread remains for all twenty.
    assert!(threads_settle(&hub, baseline + 1));
    drop(panels);
    assert!(threads_settle(&hub, baseline));
}

#[test]
fn frame_protocol_violations_end_only_that_socket() {
    let dir = TempDir::new("hostile-violations");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "v");
    let baseline = hub.threads();
    let mut healthy = RawWs::panel(&hub);
    let violations: Vec<(&str, Vec<u8>)> = vec![
        ("continuation without a start", frame(true, op::CONT, b"x")),
        ("fragmented ping", frame(false, op::PING, b"x")),
        (
            "control frame over 125 bytes",
            frame(true, op::PING, &[b'p'; 126]),
        ),
        ("reserved opcode", frame(true, 0x3, b"x")),
        ("reserved control opcode", frame(true, 0xB, b"x")),
        (
            "RSV1 without an extension",
            raw_frame(0x80 | 0x40 | op::TEXT, b"{}", true),
        ),
        (
            "unmasked client frame",
            raw_frame(0x80 | op::TEXT, b"{}", false),
        ),
        (
            "close with a 1-byte payload",
            frame(true, op::CLOSE, b"\x03"),
        ),
        ("new message inside a fragmented one", {
            let mut v = frame(false, op::TEXT, b"{");
            v.extend(frame(true, op::TEXT, b"{}"));
            v
        }),
    ];
    for (what, bytes) in &violations {
        for path in [
            events_path(&hub, "v"),
            confirm_path(&hub, "v"),
            "/panel/ws".to_string(),
        ] {
            let mut ws = RawWs::open(hub.addr, &path);
            ws.write(bytes).unwrap();
            let (ended, _) = ws.ends(DEADLINE);
            assert!(ended, "{what} on {path}: the socket stayed open");
        }
    }
    assert!(healthy.panel_round_trip() < Duration::from_secs(5));
    wait_session(&hub, "v", |s| s["connected"] == false);
    drop(healthy);
    assert!(
        threads_settle(&hub, baseline),
        "threads {} > {baseline}",
        hub.threads()
    );
}

#[test]
fn messages_over_every_limit_are_refused_without_being_buffered() {
    let _heavy = heavy();
    let dir = TempDir::new("hostile-limits");
    let max = 64 * 1024;
    let hub = hub_with(&dir, json!({"limits": {"maxMessageBytes": max}}));
    create_session(&hub, "m");
    let dir2 = TempDir::new("hostile-limits-confirm");
    let big_limit = hub_with(&dir2, json!({}));
    create_session(&big_limit, "c");
    let rss_before = hub.rss_kib().max(big_limit.rss_kib());

    // Worker events (limits.maxMessageBytes = 64 KiB): a frame announcing
    // 2^62 bytes is refused from its header; so is a message whose small
    // fragments add up past the limit; one just under the limit passes.
    let mut ws = RawWs::open(hub.addr, &events_path(&hub, "m"));
    ws.write(&announce(op::TEXT, 1 << 62)).unwrap();
    assert_eq!(ws.ends(DEADLINE), (true, Some(1009)));
    let mut ws = RawWs::open(hub.addr, &events_path(&hub, "m"));
    for i in 0..16 {
        let part = vec![b' '; 8 * 1024];
        let opcode = if i == 0 { op::TEXT } else { op::CONT };
        if ws.write(&frame(false, opcode, &part)).is_err() {
            break;
        }
    }
    // (bytes the hub never read may turn its close into a reset that
    // overtakes the close frame, so only the end itself is certain)
    let (ended, code) = ws.ends(DEADLINE);
    assert!(ended && matches!(code, None | Some(1009)), "{code:?}");
    let mut ws = RawWs::open(hub.addr, &events_path(&hub, "m"));
    let fits = envelope("m", "w", 1, "status", json!({"pad": "f".repeat(max - 300)}));
    assert!(fits.len() < max);
    ws.text(&fits);
    wait_event(&hub, "m", |e| e["sequence"] == 1);

    // Panel (4 MiB client messages): announced and real overruns.
    let mut p = RawWs::panel(&hub);
    p.write(&announce(op::TEXT, 1 << 62)).unwrap();
    let (ended, _) = p.ends(DEADLINE);
    assert!(ended);
    let mut p = RawWs::panel(&hub);
    let mib = vec![b' '; 1024 * 1024];
    for i in 0..5 {
        let opcode = if i == 0 { op::TEXT } else { op::CONT };
        if p.write(&frame(false, opcode, &mib)).is_err() {
            break;
        }
    }
    let (ended, _) = p.ends(DEADLINE);
    assert!(ended, "a 5 MiB panel message was accepted");

    // Confirmations: at most 1 MiB even with the default 32 MiB
    // maxMessageBytes; a request just under that is registered.
    let mut ws = RawWs::open(big_limit.addr, &events_path(&big_limit, "c"));
    ws.text(&envelope("c", "w", 1, "ready", json!({})));
    wait_session(&big_limit, "c", |s| s["identity"]["state"] == "live");
    let mut c = RawWs::open(big_limit.addr, &confirm_path(&big_limit, "c"));
    let over = confirmation_request("c", "w", "big", json!({"pad": "o".repeat(1024 * 1024)}));
    let _ = c.write(&frame(true, op::TEXT, over.as_bytes()));
    let (ended, code) = c.ends(DEADLINE);
    assert!(ended && matches!(code, None | Some(1008)), "{code:?}");
    let mut c = RawWs::open(big_limit.addr, &confirm_path(&big_limit, "c"));
    c.write(&announce(op::TEXT, 1 << 40)).unwrap();
    assert_eq!(c.ends(DEADLINE), (true, Some(1008)));
    let mut c = RawWs::open(big_limit.addr, &confirm_path(&big_limit, "c"));
    let under = confirmation_request("c", "w", "fits", json!({"pad": "u".repeat(1000 * 1024)}));
    c.text(&under);
    let s = wait_session(&big_limit, "c", |s| {
        s["confirmations"].as_array().unwrap().len() == 1
    });
    assert_eq!(s["confirmations"][0]["confirmation_id"], "fits");
    assert_eq!(s["confirmations"][0]["arguments_truncated"], true);

    // Ceiling: nothing above was buffered beyond one limit-sized message
    // (64 KiB, 4 MiB panel, 1 MiB confirmation) and its parsed copy, so
    // each hub grows by a few MiB; 2 x 4 MiB + 16 MiB allows for that.
    let grown = hub
        .rss_kib()
        .max(big_limit.rss_kib())
        .saturating_sub(rss_before);
    assert!(grown < 24 * MIB, "RSS grew by {grown} KiB");
    eprintln!(
        "over-limit frames: RSS grew {grown} KiB (ceiling {} KiB)",
        24 * MIB
    );
}

#[test]
fn a_peer_that_never_closes_is_cut_by_the_hub() {
    let dir = TempDir::new("hostile-noclose");
    let hub = hub_with(&dir, json!({"limits": {"maxMessageBytes": 4096}}));
    create_session(&hub, "n");
    let baseline = hub.threads();
    // Each peer starts or provokes a close and then neither answers nor
    // closes its TCP side; the hub must end the connection by itself.
    let mut ws = RawWs::open(hub.addr, &events_path(&hub, "n"));
    ws.send(true, op::CLOSE, &1000u16.to_be_bytes());
    assert!(
        ws.ends(DEADLINE).0,
        "worker socket kept after the peer's close"
    );
    let mut p = RawWs::panel(&hub);
    p.send(true, op::CLOSE, &1000u16.to_be_bytes());
    assert!(p.ends(DEADLINE).0, "panel kept after the peer's close");
    let mut big = RawWs::open(hub.addr, &events_path(&hub, "n"));
    big.write(&announce(op::TEXT, 5000)).unwrap();
    assert_eq!(big.ends(DEADLINE), (true, Some(1009)));
    let mut old = RawWs::open(hub.addr, &events_path(&hub, "n"));
    // The hub asks a connection it has registered for status; only a
    // connection registered after it supersedes it.
    old.next_text(|v| v["type"] == "signal");
    let mut new = RawWs::open(hub.addr, &events_path(&hub, "n"));
    assert_eq!(old.ends(DEADLINE), (true, Some(4001)));
    // A confirmation answered by the operator whose worker never closes:
    // cut after the 3 s close grace.
    new.text(&envelope("n", "w", 1, "ready", json!({})));
    wait_session(&hub, "n", |s| s["identity"]["state"] == "live");
    let mut c = RawWs::open(hub.addr, &confirm_path(&hub, "n"));
    c.text(&confirmation_request("n", "w", "cf", json!({})));
    wait_session(&hub, "n", |s| {
        s["confirmations"][0]["state"] == "awaiting-decision"
    });
    let res = post(
        &hub,
        "/api/sessions/n/confirmations/cf",
        json!({"decision": "approved"}),
    );
    assert_eq!(res.status, 200, "{}", res.text());
    let decided = Instant::now();
    let answer = c.next_text(|v| v["type"] == "confirmation_response");
    assert_eq!(answer["data"]["decision"], "approved");
    assert!(
        c.ends(DEADLINE).0,
        "confirmation socket kept after its grace"
    );
    assert!(
        decided.elapsed() >= Duration::from_millis(2500),
        "{:?}",
        decided.elapsed()
    );
    wait_session(&hub, "n", |s| s["confirmations"] == json!([]));
    drop(new);
    assert!(
        threads_settle(&hub, baseline),
        "threads {} > {baseline}",
        hub.threads()
    );
}

#[test]
fn a_peer_that_vanishes_mid_frame_frees_its_threads() {
    let dir = TempDir::new("hostile-vanish");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "g");
    let baseline = hub.threads();
    let mut healthy = RawWs::panel(&hub);
    let with_healthy = baseline + 2; // the poll thread, at most its writer
    for round in 0..3 {
        for path in [
            events_path(&hub, "g"),
            confirm_path(&hub, "g"),
            "/panel/ws".to_string(),
        ] {
            let mut ws = RawWs::open(hub.addr, &path);
            // a header announcing 1000 bytes, then 10 of them, then gone
            let mut half = frame(true, op::TEXT, &[b'a'; 1000]);
            half.truncate(8 + 10);
            ws.write(&half).unwrap();
            if round == 1 {
                ws.s.shutdown(Shutdown::Write).unwrap();
            }
            drop(ws);
        }
        // half an upgrade request, then gone
        let mut s = TcpStream::connect(hub.addr).unwrap();
        let up = upgrade_request(hub.addr, &events_path(&hub, "g"), &[]);
        s.write_all(&up.as_bytes()[..up.len() / 2]).unwrap();
        drop(s);
    }
    assert!(
        threads_settle(&hub, with_healthy),
        "threads {} > {with_healthy}",
        hub.threads()
    );
    assert_eq!(get_session(&hub, "g")["connected"], false);
    assert!(healthy.panel_round_trip() < Duration::from_secs(5));
}
