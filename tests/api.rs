//! The JSON API, authentication, static serving and security headers of a
//! real hub process.

use serde_json::json;

use crate::util::{http, raw_exchange, TempDir, TestHub};

fn post_json(hub: &TestHub, path: &str, body: serde_json::Value) -> crate::util::Response {
    hub.request(
        "POST",
        path,
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    )
}

#[test]
fn meta_is_open_and_has_the_protocol_shape() {
    let dir = TempDir::new("meta");
    let hub = TestHub::start(dir.path(), &["--panel-token", "s3cret"]);
    let res = hub.get("/api/meta");
    assert_eq!(res.status, 200);
    assert_eq!(res.header("Cache-Control"), Some("no-store"));
    let meta = res.json();
    assert_eq!(
        meta["protocol"],
        json!({"name": "simplex-hub-panel", "version": 1})
    );
    assert!(meta["capabilities"].is_array());
    assert!(meta["transcript_epoch"]
        .as_str()
        .is_some_and(|e| !e.is_empty()));
    assert_eq!(meta["listen"]["port"], hub.addr.port());
    // A fresh data directory: the built-in worker, no mock model provider.
    assert_eq!(meta["launcher"]["kind"], "built-in");
    assert_eq!(meta["mock"]["enabled"], false);
    assert_eq!(meta["force_kill_process_group"], false);
    assert!(meta["providers"]
        .as_array()
        .unwrap()
        .contains(&json!("mock")));
    let text = res.text();
    assert!(!text.contains("s3cret"), "token leaked in meta");
    assert!(
        !text.contains(&dir.path().display().to_string()),
        "path leaked in meta"
    );
}

#[test]
fn session_lifecycle_over_rest() {
    let dir = TempDir::new("crud");
    let hub = TestHub::start(dir.path(), &[]);
    assert_eq!(hub.get("/api/sessions").json(), json!({"sessions": []}));

    let res = post_json(
        &hub,
        "/api/sessions",
        json!({"session": "demo", "spec": {"model": "mock-flash"}}),
    );
    assert_eq!(res.status, 201, "{}", res.text());
    let s = &res.json()["session"];
    assert_eq!(s["session_id"], "demo");
    assert_eq!(s["spec"]["provider"], "mock");
    assert_eq!(s["spec"]["model"], "mock-flash");
    assert_eq!(s["process"], json!(null));
    assert_eq!(s["confirmations"], json!([]));
    assert_eq!(s["requests"], json!([]));
    assert_eq!(s["identity"]["state"], "unknown");
    let session_dir = dir.path().join("sessions/demo");
    assert!(session_dir.is_dir());
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&session_dir)
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o700
    );

    let dup = post_json(&hub, "/api/sessions", json!({"session": "demo"}));
    assert_eq!(
        (dup.status, dup.json()["error"].clone()),
        (409, json!("session_exists"))
    );

    for bad in [
        json!("a/b"),
        json!(""),
        json!("x".repeat(129)),
        json!("subagent-1"),
        json!(7),
    ] {
        let res = post_json(&hub, "/api/sessions", json!({"session": bad}));
        assert_eq!(
            (res.status, res.json()["error"].clone()),
            (400, json!("invalid_session")),
            "{bad}"
        );
    }
    let ok128 = post_json(&hub, "/api/sessions", json!({"session": "y".repeat(128)}));
    assert_eq!(ok128.status, 201);
    let bad_spec = post_json(
        &hub,
        "/api/sessions",
        json!({"session": "s2", "spec": {"provider": "nope"}}),
    );
    assert_eq!(
        (bad_spec.status, bad_spec.json()["error"].clone()),
        (400, json!("invalid_session"))
    );
    let bad_spec = post_json(
        &hub,
        "/api/sessions",
        json!({"session": "s2", "spec": "text"}),
    );
    assert_eq!(bad_spec.status, 400);

    assert_eq!(
        hub.get("/api/sessions/demo").json()["session"]["session_id"],
        "demo"
    );
    let list = hub.get("/api/sessions").json();
    assert_eq!(list["sessions"].as_array().unwrap().len(), 2);
    let missing = hub.get("/api/sessions/nope");
    assert_eq!(
        (missing.status, missing.json()["error"].clone()),
        (404, json!("unknown_session"))
    );

    std::fs::write(session_dir.join("marker.txt"), "tool output").unwrap();
    let del = hub.request("DELETE", "/api/sessions/demo", &[], b"");
    assert_eq!(del.status, 200);
    assert_eq!(del.json(), json!({"removed": "demo"}));
    assert!(!session_dir.exists(), "session directory left behind");
    assert_eq!(hub.get("/api/sessions/demo").status, 404);
    let again = hub.request("DELETE", "/api/sessions/demo", &[], b"");
    assert_eq!(again.status, 404);

    // Recreating the id starts empty.
    assert_eq!(
        post_json(&hub, "/api/sessions", json!({"session": "demo"})).status,
        201
    );
    assert!(!session_dir.join("marker.txt").exists());
}

#[test]
fn panel_token_from_query_bearer_or_cookie() {
    let dir = TempDir::new("auth");
    let hub = TestHub::start(dir.path(), &["--panel-token", "tok en"]);
    let res = hub.get("/api/sessions");
    assert_eq!(
        (res.status, res.json()["error"].clone()),
        (401, json!("unauthorized"))
    );
    assert_eq!(hub.get("/api/sessions?token=wrong").status, 401);
    assert_eq!(hub.get("/api/sessions?token=tok%20en").status, 200);
    assert_eq!(
        hub.request(
            "GET",
            "/api/sessions",
            &[("Authorization", "Bearer tok en")],
            b""
        )
        .status,
        200
    );
    assert_eq!(
        hub.request(
            "GET",
            "/api/sessions",
            &[("Authorization", "Bearer nope")],
            b""
        )
        .status,
        401
    );
    assert_eq!(
        hub.request(
            "GET",
            "/api/sessions",
            &[("Cookie", "simplex_hub_token=tok%20en")],
            b""
        )
        .status,
        200
    );
    // A malformed cookie counts as absent, and a valid bearer still works.
    assert_eq!(
        hub.request(
            "GET",
            "/api/sessions",
            &[("Cookie", "simplex_hub_token=%zz")],
            b""
        )
        .status,
        401
    );
    assert_eq!(
        hub.request(
            "GET",
            "/api/sessions",
            &[
                ("Cookie", "simplex_hub_token=%zz"),
                ("Authorization", "Bearer tok en")
            ],
            b""
        )
        .status,
        200
    );
    assert!(!hub.log_text().contains("tok en"), "token logged");
}

#[test]
fn errors_have_stable_codes_and_the_hub_keeps_serving() {
    let dir = TempDir::new("errors");
    let hub = TestHub::start(dir.path(), &[]);
    let res = hub.get("/api/nope");
    assert_eq!(
        (res.status, res.json()["error"].clone()),
        (404, json!("not_found"))
    );
    assert_eq!(res.header("Cache-Control"), Some("no-store"));

    let res = hub.request("POST", "/", &[], b"x");
    assert_eq!(res.status, 405);
    let res = hub.request("PUT", "/app.js", &[], b"x");
    assert_eq!(res.status, 405);

    let res = hub.request("POST", "/api/sessions", &[], b"{not json");
    assert_eq!(
        (res.status, res.json()["error"].clone()),
        (400, json!("bad_json"))
    );
    let res = hub.request("POST", "/api/sessions", &[], b"[1]");
    assert_eq!(res.status, 400);

    let big = vec![b' '; 1024 * 1024 + 1];
    let res = hub.request("POST", "/api/sessions", &[], &big);
    assert_eq!(
        (res.status, res.json()["error"].clone()),
        (413, json!("payload_too_large"))
    );
    let edge = format!("{{\"session\":\"edge\"}}{}", " ".repeat(1024 * 1024 - 18));
    assert_eq!(edge.len(), 1024 * 1024);
    assert_eq!(
        hub.request("POST", "/api/sessions", &[], edge.as_bytes())
            .status,
        201
    );

    let chunked = b"POST /api/sessions HTTP/1.1\r\nHost: HOST\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nffffffffffffffffffffffff";
    let chunked = String::from_utf8_lossy(chunked).replace("HOST", &hub.addr.to_string());
    let res = raw_exchange(hub.addr, chunked.as_bytes()).unwrap();
    assert_eq!(
        (res.status, res.json()["error"].clone()),
        (411, json!("length_required"))
    );

    let res = hub.get("/api/sessions/%ZZ");
    assert_eq!(
        (res.status, res.json()["error"].clone()),
        (400, json!("bad_request"))
    );
    assert!(!res.text().contains("URIError"));
    assert_eq!(hub.get("/%ZZ").status, 400);

    // A malformed Host header, on a plain request and on an upgrade.
    let raw = b"GET /api/meta HTTP/1.1\r\nHost: foo bar\r\nConnection: close\r\n\r\n";
    assert_eq!(raw_exchange(hub.addr, raw).unwrap().status, 400);
    let raw = b"GET /panel/ws HTTP/1.1\r\nHost: foo bar\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
    assert_eq!(raw_exchange(hub.addr, raw).unwrap().status, 400);
    // An upgrade to a path with no WebSocket route.
    let raw = format!(
        "GET /nowhere HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
        hub.addr
    );
    assert_eq!(raw_exchange(hub.addr, raw.as_bytes()).unwrap().status, 404);
    // Garbage request line.
    let res = raw_exchange(hub.addr, b"\x00\x01 nonsense\r\n\r\n").unwrap();
    assert_eq!(res.status, 400);

    assert_eq!(hub.get("/api/meta").status, 200, "hub stopped serving");
}

#[test]
fn dns_rebinding_hosts_are_refused_on_loopback() {
    let dir = TempDir::new("host");
    let hub = TestHub::start(dir.path(), &[]);
    let port = hub.addr.port();
    for ok in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("LOCALHOST:{port}"),
    ] {
        let res = http(
            hub.addr,
            "GET",
            "/api/meta",
            &[("Host".into(), ok.clone())],
            b"",
        );
        assert_eq!(res.status, 200, "{ok}");
    }
    for bad in [
        format!("evil.example:{port}"),
        format!("127.0.0.1:{}", port.wrapping_add(1)),
        "127.0.0.1".to_string(),
        format!("127.0.0.2:{port}"),
    ] {
        let res = http(
            hub.addr,
            "GET",
            "/api/meta",
            &[("Host".into(), bad.clone())],
            b"",
        );
        assert_eq!(
            (res.status, res.json()["error"].clone()),
            (403, json!("forbidden_host")),
            "{bad}"
        );
    }
    let res = raw_exchange(
        hub.addr,
        b"GET /api/meta HTTP/1.1\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    assert_eq!(res.status, 400, "missing Host accepted");
}

#[test]
fn configured_host_names_are_allowed() {
    let dir = TempDir::new("allowed");
    let cfg = dir.path().join("hub.config.jsonc");
    std::fs::write(
        &cfg,
        r#"{ "listen": { "allowedHosts": ["hub.internal"] } }"#,
    )
    .unwrap();
    let hub = TestHub::start(dir.path(), &["-c", cfg.to_str().unwrap()]);
    let host = format!("hub.internal:{}", hub.addr.port());
    let res = http(hub.addr, "GET", "/api/meta", &[("Host".into(), host)], b"");
    assert_eq!(res.status, 200);
}

#[test]
fn static_panel_is_embedded_with_security_headers() {
    let dir = TempDir::new("static");
    let hub = TestHub::start(dir.path(), &[]);
    let res = hub.get("/");
    assert_eq!(res.status, 200);
    assert!(res.header("Content-Type").unwrap().starts_with("text/html"));
    assert!(res.text().contains("app.js"));
    let csp = res.header("Content-Security-Policy").unwrap();
    for directive in [
        "default-src 'self'",
        "script-src 'self';",
        "style-src 'self';",
        "object-src 'none'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    ] {
        assert!(csp.contains(directive), "CSP lacks {directive}");
    }
    // the embedded panel allows no inline code at all
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("sha256-"),
        "{csp}"
    );
    assert_eq!(res.header("X-Content-Type-Options"), Some("nosniff"));
    assert_eq!(res.header("Referrer-Policy"), Some("no-referrer"));
    assert_eq!(res.header("X-Frame-Options"), Some("DENY"));
    assert!(hub
        .get("/app.js")
        .header("Content-Type")
        .unwrap()
        .starts_with("text/javascript"));
    let head = hub.request("HEAD", "/", &[], b"");
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert_eq!(hub.get("/missing.css").status, 404);

    for path in [
        "/../../etc/passwd",
        "/..%2f..%2fetc/passwd",
        "/a/../../b",
        "//etc/passwd",
        "/./../../x",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/..\\..\\etc\\passwd",
    ] {
        let res = hub.get(path);
        assert_eq!(res.status, 404, "{path}");
        assert!(!res.text().contains("root:"), "{path} escaped");
    }
    assert_eq!(hub.get("/index.html%00.js").status, 400);
}

#[test]
fn static_dir_override_serves_from_disk() {
    let dir = TempDir::new("staticdir");
    let root = dir.path().join("panel");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("index.html"), "<p>dev copy</p>").unwrap();
    std::fs::write(dir.path().join("secret.txt"), "secret").unwrap();
    // a document with an inline script (the Node hub's panel sets its theme
    // with one); this body's SHA-256 is the CSP specification's example
    let inline = "alert('Hello, world.');";
    let page = format!(
        "<html><head><script>{inline}</script><script type=\"module\" src=\"/assets/index-abc.js\"></script></head></html>"
    );
    std::fs::write(root.join("node.html"), &page).unwrap();
    std::fs::create_dir_all(root.join("assets")).unwrap();
    std::fs::write(root.join("assets/index-abc.js"), "export {};").unwrap();
    let hub = TestHub::start(dir.path(), &["--static-dir", root.to_str().unwrap()]);
    assert_eq!(hub.get("/").text(), "<p>dev copy</p>");
    assert_eq!(hub.get("/../secret.txt").status, 404);
    assert_eq!(hub.get("/%2e%2e/secret.txt").status, 404);
    // the directory's documents allow their own inline scripts by hash, and
    // inline styles; nothing else is widened
    let res = hub.get("/node.html");
    assert_eq!(res.text(), page);
    let csp = res.header("Content-Security-Policy").unwrap().to_string();
    assert!(
        csp.contains("script-src 'self' 'sha256-qznLcsROx4GACP2dm0UCKCzCG+HiZ1guq6ZZDob/Tng=';"),
        "{csp}"
    );
    assert!(csp.contains("style-src 'self' 'unsafe-inline'"), "{csp}");
    assert!(!csp.contains("script-src 'self' 'unsafe-inline'"), "{csp}");
    for kept in [
        "default-src 'self'",
        "object-src 'none'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(kept), "{csp} lacks {kept}");
    }
    // other files keep the strict policy
    let script = hub.get("/assets/index-abc.js");
    assert_eq!(script.status, 200);
    assert!(script
        .header("Content-Type")
        .unwrap()
        .starts_with("text/javascript"));
    assert!(!script
        .header("Content-Security-Policy")
        .unwrap()
        .contains("unsafe-inline"));
}
