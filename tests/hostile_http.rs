//! Hostile HTTP input against the real hub binary: malformed request
//! lines and headers, bad percent-escapes, unknown methods, path traversal
//! in every encoding, a request in one-byte writes, cross-site requests,
//! and proxied or rebound host names. Each test proves the hub refuses
//! what it should, without a panic, and keeps serving a well-behaved
//! client. `docs/security.md` maps every class of hostile input to the
//! test that proves how it is handled.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::Duration;

use serde_json::{json, Value};

use crate::util::*;

#[test]
fn malformed_request_lines_and_headers_get_400_and_close() {
    let dir = TempDir::new("hostile-malformed");
    let hub = TestHub::start(dir.path(), &["--panel-token", "tok"]);
    let baseline = hub.threads();
    let host = hub.addr.to_string();
    let ok = |extra: &str| {
        format!("GET /api/meta HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n")
            .into_bytes()
    };
    let with_target = |target: &[u8]| {
        let mut raw = b"GET ".to_vec();
        raw.extend_from_slice(target);
        raw.extend_from_slice(format!(" HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes());
        raw
    };
    let with_header = |line: &[u8]| {
        let mut raw = format!("GET /api/meta HTTP/1.1\r\nHost: {host}\r\n").into_bytes();
        raw.extend_from_slice(line);
        raw.extend_from_slice(b"\r\n\r\n");
        raw
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "no version",
            format!("GET /api/meta\r\nHost: {host}\r\n\r\n").into_bytes(),
        ),
        (
            "two spaces",
            format!("GET  /api/meta HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes(),
        ),
        (
            "bad version",
            format!("GET /api/meta HTTP/x.y\r\nHost: {host}\r\n\r\n").into_bytes(),
        ),
        ("empty line first", b"\r\n\r\n".to_vec()),
        (
            "bare LF",
            format!("GET /api/meta HTTP/1.1\nHost: {host}\n\n").into_bytes(),
        ),
        ("header without colon", with_header(b"NoColonHere")),
        ("obsolete line folding", with_header(b"X-A: a\r\n folded")),
        ("NUL in target", with_target(b"/api/meta\0")),
        ("NUL in static target", with_target(b"/index.html\0.js")),
        ("raw non-ASCII target", with_target(b"/\xff\xfe")),
        ("control byte in target", with_target(b"/api/\x01meta")),
        ("NUL in header value", with_header(b"X-A: a\0b")),
        ("NUL in header name", with_header(b"X-\0A: b")),
        (
            "NUL in Host",
            format!("GET / HTTP/1.1\r\nHost: {host}\0\r\n\r\n").into_bytes(),
        ),
        (
            "NUL in token header",
            with_header(b"Authorization: Bearer tok\0"),
        ),
        ("control byte in header", with_header(b"X-A: a\x01b")),
        ("DEL in header", with_header(b"X-A: a\x7fb")),
        ("bare CR in header", with_header(b"X-A: a\rX-B: b")),
        ("non-ASCII header value", with_header(b"X-A: caf\xc3\xa9")),
        ("two Hosts", ok(&format!("Host: {host}\r\n"))),
        ("two different Hosts", ok("Host: evil.example:1\r\n")),
        ("Content-Length not a number", ok("Content-Length: abc\r\n")),
        ("negative Content-Length", ok("Content-Length: -1\r\n")),
        ("signed Content-Length", ok("Content-Length: +0\r\n")),
        (
            "Content-Length overflow",
            ok("Content-Length: 99999999999999999999999\r\n"),
        ),
        (
            "conflicting Content-Lengths",
            ok("Content-Length: 0\r\nContent-Length: 5\r\n"),
        ),
    ];
    for (what, raw) in &cases {
        // A second, valid request pipelined behind the bad one must never
        // be answered: after a malformed head the stream position is lost.
        let mut pipelined = raw.clone();
        pipelined.extend_from_slice(&ok(""));
        let reply = exchange_within(hub.addr, &pipelined, DEADLINE)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(status_line_code(&reply), 400, "{what}: {reply:?}");
        assert_eq!(
            reply.matches("HTTP/1.1 ").count(),
            1,
            "{what}: a request after a malformed head was answered: {reply:?}"
        );
    }
    // Equal duplicate Content-Lengths are one length (RFC 9112 §6.3).
    let reply = exchange_within(
        hub.addr,
        &ok("Content-Length: 0\r\nContent-Length: 0\r\n"),
        DEADLINE,
    )
    .unwrap();
    assert_eq!(status_line_code(&reply), 200, "{reply:?}");
    // Tabs are legal whitespace in a header value.
    let reply = exchange_within(hub.addr, &ok("X-A: a\tb\r\n"), DEADLINE).unwrap();
    assert_eq!(status_line_code(&reply), 200, "{reply:?}");
    assert!(answers_within(&hub, Duration::from_secs(5)));
    assert!(
        threads_settle(&hub, baseline),
        "threads {} > {baseline}",
        hub.threads()
    );
    assert!(!hub.log_text().contains("panicked"), "{}", hub.log_text());
}

#[test]
fn bad_percent_escapes_everywhere_are_refused_not_crashed_on() {
    let dir = TempDir::new("hostile-escapes");
    let hub = TestHub::start(dir.path(), &["--panel-token", "tok"]);
    create_session_with_token(&hub, "s", "tok");
    let status = |method: &str, target: &str, headers: &[(&str, &str)]| -> (u16, Value) {
        let res = hub.request(method, target, headers, b"");
        let body = serde_json::from_slice(&res.body).unwrap_or(Value::Null);
        (res.status, body)
    };
    // Paths and query values the hub decodes: 400 bad_request.
    for target in [
        "/%ZZ",
        "/%4",
        "/%",
        "/%ff",
        "/%c3%28",
        "/index.html%00",
        "/api/sessions/%ZZ?token=tok",
        "/api/sessions/%E0%80?token=tok",
        "/api/sessions/s/events?token=tok&since=%ZZ",
        "/api/sessions/s/events?token=tok&limit=%4",
        "/api/sessions/s/logs?token=tok&limit=%G1",
    ] {
        let (code, body) = status("GET", target, &[]);
        assert_eq!(
            (code, body["error"].clone()),
            (400, json!("bad_request")),
            "{target}"
        );
    }
    // Credentials with a bad escape count as absent: 401, never 500.
    for (target, headers) in [
        ("/api/sessions?token=%ZZ", vec![]),
        ("/api/sessions?token=tok%", vec![]),
        (
            "/api/sessions",
            vec![("Cookie", "simplex_hub_token=tok%zz")],
        ),
        ("/api/sessions", vec![("Authorization", "Bearer %ZZ")]),
    ] {
        let (code, body) = status("GET", target, &headers);
        assert_eq!(
            (code, body["error"].clone()),
            (401, json!("unauthorized")),
            "{target}"
        );
    }
    // A malformed pair elsewhere in the query does not hide a good token.
    assert_eq!(status("GET", "/api/sessions?%ZZ=1&token=tok", &[]).0, 200);
    // Upgrades: the panel token and the worker token and id.
    assert_eq!(
        RawWs::connect(hub.addr, "/panel/ws?token=%ZZ", &[]).err(),
        Some(401)
    );
    assert_eq!(
        RawWs::connect(hub.addr, "/agent/s/events?token=%ZZ", &[]).err(),
        Some(401)
    );
    assert_eq!(
        RawWs::connect(hub.addr, "/agent/s/confirm?token=%", &[]).err(),
        Some(401)
    );
    assert_eq!(
        RawWs::connect(hub.addr, "/agent/%ZZ/events?token=x", &[]).err(),
        Some(404)
    );
    assert_eq!(
        RawWs::connect(hub.addr, "/agent/%ff/confirm?token=x", &[]).err(),
        Some(404)
    );
    assert!(answers_within(&hub, Duration::from_secs(5)));
    assert!(!hub.log_text().contains("panicked"));
}

#[test]
fn unknown_methods_are_405_or_404_everywhere() {
    let dir = TempDir::new("hostile-methods");
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "s");
    let long = "X".repeat(200);
    for method in ["BREW", "PROPFIND", "TRACE", "CONNECT", long.as_str()] {
        for (path, expected) in [
            ("/", 405),
            ("/app.js", 405),
            ("/api/meta", 405),
            ("/api/sessions", 405),
            ("/api/sessions/s", 405),
            ("/api/sessions/s/events", 405),
            ("/api/sessions/s/start", 405),
            ("/api/nope", 404),
            ("/agent/s/events", 404),
        ] {
            let res = hub.request(method, path, &[], b"");
            assert_eq!(
                res.status,
                expected,
                "{} {path}",
                &method[..method.len().min(10)]
            );
            assert!(res.json()["error"].is_string());
        }
    }
    assert!(answers_within(&hub, Duration::from_secs(5)));
}

#[test]
fn path_traversal_in_every_encoding_names_no_file() {
    let dir = TempDir::new("hostile-traversal");
    let root = dir.path().join("panel");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::write(root.join("index.html"), "<p>panel</p>").unwrap();
    std::fs::write(root.join("sub/ok.txt"), "fine").unwrap();
    std::fs::write(dir.path().join("secret.txt"), "TOP-SECRET").unwrap();
    std::os::unix::fs::symlink(dir.path().join("secret.txt"), root.join("link.txt")).unwrap();
    std::os::unix::fs::symlink(dir.path(), root.join("updir")).unwrap();
    let data = dir.path().join("data");
    let embedded = TestHub::start(&data, &[]);
    let dev = TestHub::start(
        &dir.path().join("data2"),
        &["--static-dir", root.to_str().unwrap()],
    );
    assert_eq!(dev.get("/sub/ok.txt").text(), "fine");
    let attempts = [
        "/../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2E%2E/secret.txt",
        "/.%2e/secret.txt",
        "/%2e./secret.txt",
        "/..%2fsecret.txt",
        "/..%2Fsecret.txt",
        "/%2e%2e%2fsecret.txt",
        "/%2e%2e%2f%2e%2e%2fsecret.txt",
        "/..%5csecret.txt",
        "/..%5Csecret.txt",
        "/..\\secret.txt",
        "/sub/..\\..\\secret.txt",
        "/%252e%252e/secret.txt",
        "/%252e%252e%252fsecret.txt",
        "/%c0%ae%c0%ae/secret.txt",
        "/%c0%af../secret.txt",
        "/%e0%80%ae%e0%80%ae/secret.txt",
        "/%u002e%u002e/secret.txt",
        "/%ef%bc%8e%ef%bc%8e/secret.txt",
        "/./../secret.txt",
        "/sub/../../secret.txt",
        "/sub/./../../secret.txt",
        "/index.html/../../secret.txt",
        "//secret.txt",
        "/%2fsecret.txt",
        "/%2f..%2fsecret.txt",
        "/..;/secret.txt",
        "/.../secret.txt",
        "/%00../secret.txt",
        "/..%00/secret.txt",
        "/C:%5Csecret.txt",
        "/\\\\server\\share\\secret.txt",
        "/link.txt",
        "/updir/secret.txt",
        "/updir/data/hub.db",
    ];
    for hub in [&embedded, &dev] {
        for path in attempts {
            let res = hub.get(path);
            assert!(
                matches!(res.status, 400 | 404),
                "{path}: {} {}",
                res.status,
                res.text()
            );
            assert!(!res.text().contains("TOP-SECRET"), "{path} escaped");
        }
    }
    // The API and worker routes decode ids too: nothing outside a session.
    create_session(&embedded, "victim");
    let victim = data.join("sessions/victim");
    std::fs::write(victim.join("marker"), "x").unwrap();
    for id in [
        "..",
        "%2e%2e",
        "..%2fvictim",
        "victim%2f..",
        "%2e%2e%2fsessions%2fvictim",
        "victim%00",
    ] {
        let res = embedded.request("DELETE", &format!("/api/sessions/{id}"), &[], b"");
        assert!(matches!(res.status, 400 | 404), "{id}: {}", res.status);
        let res = embedded.get(&format!("/api/sessions/{id}/snapshot"));
        assert!(matches!(res.status, 400 | 404), "{id}: {}", res.status);
        let code = RawWs::connect(embedded.addr, &format!("/agent/{id}/events?token=x"), &[]).err();
        assert_eq!(code, Some(404), "{id}");
    }
    assert!(
        victim.join("marker").is_file(),
        "a traversal reached the session"
    );
    assert!(data.join("hub.db").is_file());
}

#[test]
fn a_request_split_into_one_byte_writes_still_succeeds() {
    let dir = TempDir::new("hostile-bytewise");
    let hub = hub_with(&dir, json!({"http": {"requestTimeoutMs": 15000}}));
    // One byte per write, paced so each arrives on its own (the pacing is
    // what is tested, not a wait for the hub).
    let drip = |s: &mut TcpStream, bytes: &[u8]| {
        for b in bytes {
            s.write_all(&[*b]).unwrap();
            thread::sleep(Duration::from_millis(2));
        }
    };
    let body = json!({"session": "bytewise"}).to_string();
    let raw = format!(
        "POST /api/sessions HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}\
         GET /api/sessions/bytewise HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        hub.addr,
        body.len(),
        hub.addr
    );
    let mut s = TcpStream::connect(hub.addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    drip(&mut s, raw.as_bytes());
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let codes: Vec<u16> = reply
        .match_indices("HTTP/1.1 ")
        .map(|(i, _)| status_line_code(&reply[i..]))
        .collect();
    assert_eq!(codes, vec![201, 200], "{reply}");

    // An upgrade and then a frame, each one byte per write.
    let path = events_path(&hub, "bytewise");
    let mut s = TcpStream::connect(hub.addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    drip(&mut s, upgrade_request(hub.addr, &path, &[]).as_bytes());
    let head = read_head(&mut s).unwrap();
    assert_eq!(status_line_code(&head), 101, "{head}");
    let event = envelope("bytewise", "w", 1, "status", json!({"slow": true}));
    drip(&mut s, &frame(true, op::TEXT, event.as_bytes()));
    let e = wait_event(&hub, "bytewise", |e| e["data"]["slow"] == true);
    assert_eq!(e["worker_id"], "w");
}

#[test]
fn cross_site_requests_cannot_drive_the_api() {
    let dir = TempDir::new("hostile-csrf");
    // The loopback default: no panel token, so only the browser's own
    // marks tell a visited page's request from the panel's.
    let hub = TestHub::start(dir.path(), &[]);
    create_session(&hub, "s");
    let same = format!("http://{}", hub.addr);
    let body = json!({"session": "csrf"}).to_string();
    let send = |method: &str, path: &str, headers: &[(&str, &str)]| -> (u16, Value) {
        let body = if method == "POST" {
            body.as_bytes()
        } else {
            b""
        };
        let res = hub.request(method, path, headers, body);
        let json = serde_json::from_slice(&res.body).unwrap_or(Value::Null);
        (res.status, json)
    };
    let refused = (403, json!("forbidden_origin"));
    for headers in [
        vec![("Origin", "http://evil.example")],
        vec![("Origin", "null")],
        vec![
            ("Origin", "http://evil.example"),
            ("Content-Type", "text/plain"),
        ],
        vec![("Origin", "http://localhost:1")],
        vec![("Sec-Fetch-Site", "cross-site")],
        vec![("Sec-Fetch-Site", "same-site"), ("Origin", same.as_str())],
    ] {
        for (method, path) in [
            ("POST", "/api/sessions"),
            ("POST", "/api/sessions/s/start"),
            ("POST", "/api/sessions/s/input"),
            ("POST", "/api/sessions/s/signal"),
            ("DELETE", "/api/sessions/s"),
            ("PUT", "/api/sessions/s"),
        ] {
            let (code, json) = send(method, path, &headers);
            assert_eq!(
                (code, json["error"].clone()),
                refused,
                "{method} {path} {headers:?}"
            );
        }
    }
    assert_eq!(hub.get("/api/sessions/csrf").status, 404);
    assert_eq!(hub.get("/api/sessions/s").status, 200);
    // Reads stay open (no CORS header lets another origin read them).
    let res = hub.request(
        "GET",
        "/api/sessions",
        &[("Origin", "http://evil.example")],
        b"",
    );
    assert_eq!(res.status, 200);
    assert!(res.header("Access-Control-Allow-Origin").is_none());
    // The panel's own requests, a same-origin form under the panel's
    // no-referrer policy (`Origin: null`), and non-browser clients pass.
    assert_eq!(send("POST", "/api/sessions", &[("Origin", &same)]).0, 201);
    assert_eq!(
        hub.request("DELETE", "/api/sessions/csrf", &[("Origin", &same)], b"")
            .status,
        200
    );
    let form = [("Origin", "null"), ("Sec-Fetch-Site", "same-origin")];
    assert_eq!(send("POST", "/api/sessions", &form).0, 201);
    assert_eq!(
        hub.request("DELETE", "/api/sessions/csrf", &[], b"").status,
        200
    );
    assert_eq!(
        send("POST", "/api/sessions", &[("Sec-Fetch-Site", "none")]).0,
        201
    );
}

#[test]
fn reverse_proxy_names_pass_and_rebound_names_do_not() {
    let dir = TempDir::new("hostile-proxy");
    let hub = hub_with(
        &dir,
        json!({"listen": {"allowedHosts": ["hub.example.com"]}, "panel": {"token": "tok"}}),
    );
    let port = hub.addr.port();
    let status = |host: &str, path: &str, extra: &str| -> u16 {
        let raw =
            format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n");
        status_line_code(&exchange_within(hub.addr, raw.as_bytes(), DEADLINE).unwrap())
    };
    // What a TLS proxy on 443 (or 8443) forwards: the browser's Host.
    for host in [
        "hub.example.com",
        "HUB.example.com",
        "hub.example.com:443",
        "hub.example.com:8443",
    ] {
        assert_eq!(status(host, "/api/meta", ""), 200, "{host}");
        assert_eq!(status(host, "/api/sessions?token=tok", ""), 200, "{host}");
    }
    // Rebound or unlisted names, and loopback names with a foreign port.
    for host in [
        "evil.example".to_string(),
        "hub.example.com.evil.example".to_string(),
        "example.com".to_string(),
        format!("127.0.0.1:{}", port.wrapping_add(1)),
        format!("localhost:{}", port.wrapping_add(1)),
    ] {
        assert_eq!(status(&host, "/api/meta", ""), 403, "{host}");
    }
    // The panel socket through the proxy: the browser's Origin matches the
    // forwarded Host; any other page's Origin does not.
    let upgrade = "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
                   Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
    let ws = |host: &str, origin: &str| -> u16 {
        let raw = format!(
            "GET /panel/ws?token=tok HTTP/1.1\r\nHost: {host}\r\nOrigin: {origin}\r\n{upgrade}\
             Connection: Upgrade\r\n\r\n"
        );
        let mut s = TcpStream::connect(hub.addr).unwrap();
        s.set_read_timeout(Some(DEADLINE)).unwrap();
        s.write_all(raw.as_bytes()).unwrap();
        status_line_code(&read_head(&mut s).unwrap())
    };
    assert_eq!(ws("hub.example.com", "https://hub.example.com"), 101);
    assert_eq!(
        ws("hub.example.com:8443", "https://hub.example.com:8443"),
        101
    );
    assert_eq!(ws("hub.example.com", "https://evil.example"), 403);
    assert_eq!(ws("hub.example.com", "http://hub.example.com:8080"), 403);
    assert_eq!(ws("evil.example", "https://evil.example"), 403);
    // A state-changing request through the proxy carries the browser's
    // Origin, which names the forwarded Host.
    let body = json!({"session": "via-proxy"}).to_string();
    let post = |origin: &str| -> u16 {
        let raw = format!(
            "POST /api/sessions?token=tok HTTP/1.1\r\nHost: hub.example.com\r\nOrigin: {origin}\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        status_line_code(&exchange_within(hub.addr, raw.as_bytes(), DEADLINE).unwrap())
    };
    assert_eq!(post("https://evil.example"), 403);
    assert_eq!(post("https://hub.example.com"), 201);
}
