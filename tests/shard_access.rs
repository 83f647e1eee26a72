//! Who may reach the Shard endpoints (seed 004 §4.1, issue 16 "Transport
//! and authentication"), against the real hub binary: every request is
//! written byte by byte here from the seed's rules, and only the HTTP
//! status, the headers and the JSON error code are read back.
//!
//! Ticket expiry is not tested here: the lifetime is fixed at the seed's
//! 60 s (no setting shortens it), so the edge is tested in the pure ticket
//! book's unit tests (`src/wire/shard/ticket.rs`).

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};

use serde_json::Value;

use crate::util::*;

const TOKEN: &str = "shard-test-token";
const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
/// The accept value RFC 6455 gives for `KEY`.
const ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

/// An answer as the client sees it: status, headers and (when refused)
/// the JSON error body.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn code(&self) -> &str {
        self.body["error"].as_str().unwrap_or("")
    }
}

/// Writes `head` (a complete request head, no body) to `addr` and reads
/// the answer: the head, then a refusal's `Content-Length` body. A 101 is
/// read up to its head only (what follows belongs to the protocol).
fn exchange(addr: SocketAddr, head: &str) -> Answer {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s.set_write_timeout(Some(DEADLINE)).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let raw_head = read_head(&mut s).expect("an answer head");
    let parsed = parse_response(raw_head.as_bytes()).expect("a status line");
    let mut body = Vec::new();
    if parsed.status != 101 {
        let len = parsed
            .header("Content-Length")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0);
        body.resize(len, 0);
        s.read_exact(&mut body).unwrap();
    }
    Answer {
        status: parsed.status,
        headers: parsed.headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    }
}

/// A WebSocket upgrade of `target` (path and query) naming `host`, with
/// `extra` headers.
fn upgrade(addr: SocketAddr, target: &str, host: &str, extra: &[(&str, &str)]) -> Answer {
    let mut head = format!(
        "GET {target} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {KEY}\r\n"
    );
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    exchange(addr, &head)
}

/// `POST /shard/ticket` naming `host`, with `extra` headers.
fn ticket_request(addr: SocketAddr, host: &str, extra: &[(&str, &str)]) -> Answer {
    let mut head = format!(
        "POST /shard/ticket HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n"
    );
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    exchange(addr, &head)
}

/// Asserts a 101 that completes the handshake; `selected` is the
/// `Sec-WebSocket-Protocol` it must carry (`None`: no such header).
#[track_caller]
fn assert_admitted(answer: &Answer, selected: Option<&str>) {
    assert_eq!(answer.status, 101, "{answer:?}");
    assert_eq!(
        answer.header("Sec-WebSocket-Accept"),
        Some(ACCEPT),
        "{answer:?}"
    );
    assert_eq!(
        answer.header("Sec-WebSocket-Protocol"),
        selected,
        "{answer:?}"
    );
}

#[track_caller]
fn assert_refused(answer: &Answer, status: u16, code: &str) {
    assert_eq!((answer.status, answer.code()), (status, code), "{answer:?}");
    assert!(answer.body["message"].is_string(), "{answer:?}");
}

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

/// A ticket for `origin`, from a panel-authenticated request naming the
/// listener.
fn issue(hub: &TestHub, origin: &str) -> String {
    issue_at(hub, &hub.addr.to_string(), origin)
}

/// A ticket for `origin` from a request naming `host`.
fn issue_at(hub: &TestHub, host: &str, origin: &str) -> String {
    let answer = ticket_request(
        hub.addr,
        host,
        &[("Authorization", &bearer()), ("Origin", origin)],
    );
    assert_eq!(answer.status, 200, "{answer:?}");
    answer.body["ticket"].as_str().unwrap().to_owned()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[test]
fn a_ticket_admits_once_from_its_own_origin() {
    let dir = TempDir::new("shard-ticket");
    let hub = TestHub::start(
        dir.path(),
        &[
            "--panel-token",
            TOKEN,
            "--allowed-origin",
            "http://other.test:1234",
            "--log-level",
            "debug",
        ],
    );
    let host = hub.addr.to_string();
    let origin = format!("http://{host}");

    // The ticket: {ticket, expires_at} with expires_at in Unix ms, 60 s on.
    let before = now_ms();
    let answer = ticket_request(
        hub.addr,
        &host,
        &[("Authorization", &bearer()), ("Origin", &origin)],
    );
    let after = now_ms();
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.header("Cache-Control"), Some("no-store"));
    let ticket = answer.body["ticket"].as_str().unwrap().to_owned();
    assert!(
        ticket.len() >= 32 && ticket.bytes().all(|b| b.is_ascii_hexdigit()),
        "{ticket}"
    );
    let expires_at = answer.body["expires_at"].as_u64().unwrap();
    assert!(
        (before + 60_000..=after + 60_000).contains(&expires_at),
        "{before} {expires_at} {after}"
    );
    assert_eq!(answer.body.as_object().unwrap().len(), 2, "{answer:?}");

    // Offered beside shard.v0: admitted, shard.v0 selected.
    let offer = format!("shard.v0, shard-ticket.{ticket}");
    let with_ticket = |origin: &str, offer: &str| {
        upgrade(
            hub.addr,
            "/shard/ws",
            &host,
            &[("Origin", origin), ("Sec-WebSocket-Protocol", offer)],
        )
    };
    assert_admitted(&with_ticket(&origin, &offer), Some("shard.v0"));
    // Replayed: 401.
    assert_refused(&with_ticket(&origin, &offer), 401, "invalid_ticket");
    // Never issued: 401.
    assert_refused(
        &with_ticket(&origin, "shard.v0, shard-ticket.0123456789abcdef"),
        401,
        "invalid_ticket",
    );
    // The protocols may come on separate lines too.
    let ticket = issue(&hub, &origin);
    let answer = upgrade(
        hub.addr,
        "/shard/ws",
        &host,
        &[
            ("Origin", &origin),
            ("Sec-WebSocket-Protocol", &format!("shard-ticket.{ticket}")),
            ("Sec-WebSocket-Protocol", "shard.v0"),
        ],
    );
    assert_admitted(&answer, Some("shard.v0"));

    // Bound to the origin it was requested from: another allowed origin
    // gets 401, and the ticket is spent by that attempt.
    let ticket = issue(&hub, &origin);
    let offer = format!("shard.v0, shard-ticket.{ticket}");
    assert_refused(
        &with_ticket("http://other.test:1234", &offer),
        401,
        "invalid_ticket",
    );
    assert_refused(&with_ticket(&origin, &offer), 401, "invalid_ticket");

    // An origin outside the allowlist, or none at all, is 400 before the
    // ticket is looked at, so the ticket still works afterwards.
    let ticket = issue(&hub, &origin);
    let offer = format!("shard.v0, shard-ticket.{ticket}");
    assert_refused(
        &with_ticket("http://evil.test", &offer),
        400,
        "origin_not_allowed",
    );
    assert_refused(&with_ticket("null", &offer), 400, "origin_not_allowed");
    let no_origin = upgrade(
        hub.addr,
        "/shard/ws",
        &host,
        &[("Sec-WebSocket-Protocol", &offer)],
    );
    assert_refused(&no_origin, 400, "origin_required");
    assert_admitted(&with_ticket(&origin, &offer), Some("shard.v0"));

    // Two tickets at once are not a credential.
    let (a, b) = (issue(&hub, &origin), issue(&hub, &origin));
    let two = format!("shard.v0, shard-ticket.{a}, shard-ticket.{b}");
    assert_refused(&with_ticket(&origin, &two), 400, "bad_request");

    // A ticket from another allowed origin can be requested only from a
    // page of that origin (the front door's cross-site check), and it then
    // works from there.
    let ticket_request_from = |origin: &str, auth: Option<&str>| {
        let mut headers = vec![("Origin", origin)];
        if let Some(auth) = auth {
            headers.push(("Authorization", auth));
        }
        ticket_request(hub.addr, &host, &headers)
    };
    assert_refused(
        &ticket_request_from("http://other.test:1234", Some(&bearer())),
        403,
        "forbidden_origin",
    );
    assert_refused(&ticket_request_from(&origin, None), 401, "unauthorized");
    assert_refused(
        &ticket_request_from(&origin, Some("Bearer wrong")),
        401,
        "unauthorized",
    );
    assert_refused(
        &ticket_request(hub.addr, &host, &[("Authorization", &bearer())]),
        400,
        "origin_required",
    );
    // The cookie and the query token are panel credentials here too.
    let cookie = format!("simplex_hub_token={TOKEN}");
    let by_cookie = ticket_request(hub.addr, &host, &[("Cookie", &cookie), ("Origin", &origin)]);
    assert_eq!(by_cookie.status, 200, "{by_cookie:?}");
    let by_query = exchange(
        hub.addr,
        &format!(
            "POST /shard/ticket?token={TOKEN} HTTP/1.1\r\nHost: {host}\r\nOrigin: {origin}\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n"
        ),
    );
    assert_eq!(by_query.status, 200, "{by_query:?}");

    // Other methods and paths.
    let get = exchange(
        hub.addr,
        &format!("GET /shard/ticket HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
    );
    assert_refused(&get, 405, "method_not_allowed");
    assert_eq!(get.header("Allow"), Some("POST"));
    let plain_get = exchange(
        hub.addr,
        &format!("GET /shard/ws HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
    );
    assert_refused(&plain_get, 400, "bad_request");
    assert_refused(
        &upgrade(hub.addr, "/shard/nope", &host, &[]),
        404,
        "not_found",
    );

    // No ticket ever reaches the log, even at debug level.
    let log = hub.log_text();
    assert!(
        log.contains("/shard/ticket"),
        "the debug log shows requests"
    );
    assert!(!log.contains(&ticket), "a ticket was logged:\n{log}");
}

#[test]
fn the_panel_token_admits_with_or_without_origin() {
    let dir = TempDir::new("shard-token");
    let hub = TestHub::start(dir.path(), &["--panel-token", TOKEN]);
    let host = hub.addr.to_string();
    let origin = format!("http://{host}");
    let cookie = format!("simplex_hub_token={TOKEN}");

    // No Origin (not a browser), no subprotocol: no Sec-WebSocket-Protocol.
    let answer = upgrade(
        hub.addr,
        "/shard/ws",
        &host,
        &[("Authorization", &bearer())],
    );
    assert_admitted(&answer, None);
    // Each panel credential, with the implicit origin, offering shard.v0.
    for (target, headers) in [
        (format!("/shard/ws?token={TOKEN}"), vec![]),
        ("/shard/ws".to_string(), vec![("Cookie", cookie.as_str())]),
        (
            "/shard/ws".to_string(),
            vec![("Authorization", "bearer shard-test-token")],
        ),
    ] {
        let mut headers = headers;
        headers.push(("Origin", &origin));
        headers.push(("Sec-WebSocket-Protocol", "chat, shard.v0"));
        assert_admitted(
            &upgrade(hub.addr, &target, &host, &headers),
            Some("shard.v0"),
        );
    }
    // Only shard.v0 is ever selected.
    let other = upgrade(
        hub.addr,
        "/shard/ws",
        &host,
        &[
            ("Authorization", &bearer()),
            ("Sec-WebSocket-Protocol", "chat"),
        ],
    );
    assert_admitted(&other, None);
    // Wrong or missing token: 401.
    assert_refused(
        &upgrade(hub.addr, "/shard/ws", &host, &[]),
        401,
        "unauthorized",
    );
    assert_refused(
        &upgrade(
            hub.addr,
            "/shard/ws?token=nope",
            &host,
            &[("Origin", &origin)],
        ),
        401,
        "unauthorized",
    );
    // A present Origin outside the allowlist is refused even with the
    // token; the check runs before authentication.
    for bad in [
        "http://localhost:1",
        "http://evil.test",
        "null",
        &format!("https://{host}"),
    ] {
        let answer = upgrade(
            hub.addr,
            "/shard/ws",
            &host,
            &[("Authorization", &bearer()), ("Origin", bad)],
        );
        assert_refused(&answer, 400, "origin_not_allowed");
    }
    let unauthenticated = upgrade(
        hub.addr,
        "/shard/ws",
        &host,
        &[("Origin", "http://evil.test")],
    );
    assert_refused(&unauthenticated, 400, "origin_not_allowed");
    // A malformed handshake after admission is the front door's 400.
    let head = format!(
        "GET /shard/ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Authorization: Bearer {TOKEN}\r\nSec-WebSocket-Version: 8\r\nSec-WebSocket-Key: {KEY}\r\n\r\n"
    );
    assert_refused(&exchange(hub.addr, &head), 400, "bad_request");
}

#[test]
fn host_names_the_listener_exactly() {
    let dir = TempDir::new("shard-host");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let named = format!("named.test:{port}");
    let hub = TestHub::start(
        dir.path(),
        &[
            "--listen",
            &listen,
            "--panel-token",
            TOKEN,
            "--public-host",
            &named,
        ],
    );
    assert_eq!(hub.addr.port(), port);
    let other_port = if port == 65535 { port - 1 } else { port + 1 };
    let try_host =
        |host: &str| upgrade(hub.addr, "/shard/ws", host, &[("Authorization", &bearer())]);
    assert_admitted(&try_host(&listen), None);
    // The configured name, exactly (letter case aside, as in DNS).
    assert_admitted(&try_host(&named), None);
    assert_admitted(&try_host(&format!("NAMED.test:{port}")), None);
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{other_port}"),
        "127.0.0.1".to_string(),
        format!("[::1]:{port}"),
        format!("127.0.0.1.nip.io:{port}"),
        format!("127.1:{port}"),
        format!("0x7f.0.0.1:{port}"),
        format!("127.0.0.2:{port}"),
        format!("2130706433:{port}"),
        format!("named.test:{other_port}"),
        "named.test".to_string(),
        format!("x.named.test:{port}"),
        format!("named.test.evil.test:{port}"),
        format!("named.test.:{port}"),
    ] {
        assert_refused(&try_host(&host), 403, "forbidden_host");
        // The ticket endpoint checks the same way.
        let answer = ticket_request(
            hub.addr,
            &host,
            &[
                ("Authorization", &bearer()),
                ("Origin", &format!("http://{host}")),
            ],
        );
        assert_refused(&answer, 403, "forbidden_host");
    }
    for malformed in ["127.0.0.1:99999", "127.0.0.1:x", "127.0.0.1:", "a b"] {
        assert_refused(&try_host(malformed), 400, "bad_request");
    }
    // The rest of the hub keeps its own rules: localhost still reaches
    // the API.
    let api = http(
        hub.addr,
        "GET",
        "/api/meta",
        &[
            ("Host".into(), format!("localhost:{port}")),
            ("Authorization".into(), bearer()),
        ],
        b"",
    );
    assert_eq!(api.status, 200, "{}", api.text());
}

#[test]
fn an_ipv6_listener_is_named_as_its_own_loopback() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        println!("skipped: no IPv6 loopback on this machine");
        return;
    }
    let dir = TempDir::new("shard-v6");
    let hub = TestHub::start(dir.path(), &["--listen", "[::1]:0", "--panel-token", TOKEN]);
    assert!(hub.addr.is_ipv6());
    let port = hub.addr.port();
    let origin = format!("http://[::1]:{port}");
    let answer = upgrade(
        hub.addr,
        "/shard/ws",
        &format!("[::1]:{port}"),
        &[("Authorization", &bearer()), ("Origin", &origin)],
    );
    assert_admitted(&answer, None);
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[0:0:0:0:0:0:0:1]:{port}"),
    ] {
        let answer = upgrade(
            hub.addr,
            "/shard/ws",
            &host,
            &[("Authorization", &bearer())],
        );
        assert_refused(&answer, 403, "forbidden_host");
    }
    let answer = upgrade(
        hub.addr,
        "/shard/ws",
        &format!("[::1]:{port}"),
        &[
            ("Authorization", &bearer()),
            ("Origin", &format!("http://127.0.0.1:{port}")),
        ],
    );
    assert_refused(&answer, 400, "origin_not_allowed");
}

/// Runs the hub with `args` (plus a private data directory), expects it
/// to refuse to start, and returns its stderr.
fn refused_start(dir: &TempDir, args: &[&str]) -> String {
    let data = dir.path().display().to_string();
    let mut all = vec!["--data-dir", data.as_str(), "--tools-port", "0"];
    if !args.contains(&"--listen") {
        all.extend(["--listen", "127.0.0.1:0"]);
    }
    all.extend_from_slice(args);
    let out = run_bin(&all, dir.path());
    let err = stderr_of(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{args:?} should be refused: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(!err.contains("panel: http://"), "it started: {err}");
    err
}

#[test]
fn remote_mode_refuses_to_start_naming_what_is_missing() {
    let dir = TempDir::new("shard-refuse");
    // A non-loopback listener with one setting: both host and origin.
    let err = refused_start(
        &dir,
        &[
            "--listen",
            "0.0.0.0:0",
            "--panel-token",
            TOKEN,
            "--allow-insecure-remote",
        ],
    );
    assert!(
        err.contains("shard.publicHost") && err.contains("--public-host"),
        "{err}"
    );
    assert!(
        err.contains("shard.allowedOrigins") && err.contains("--allowed-origin"),
        "{err}"
    );
    assert!(!err.contains("shard.allowInsecureRemote"), "{err}");
    // Plain HTTP off loopback needs the explicit consent.
    let err = refused_start(
        &dir,
        &[
            "--listen",
            "0.0.0.0:0",
            "--panel-token",
            TOKEN,
            "--public-host",
            "hub.lan:8800",
            "--allowed-origin",
            "http://hub.lan:8800",
        ],
    );
    assert!(
        err.contains("shard.allowInsecureRemote") && err.contains("--allow-insecure-remote"),
        "{err}"
    );
    assert!(!err.contains("shard.publicHost"), "{err}");
    // A trusted proxy: host and origin.
    let err = refused_start(&dir, &["--panel-token", TOKEN, "--trust-proxy", "loopback"]);
    assert!(
        err.contains("shard.publicHost") && err.contains("shard.allowedOrigins"),
        "{err}"
    );
    assert!(err.contains("shard.trustProxy is set"), "{err}");
    let err = refused_start(
        &dir,
        &[
            "--panel-token",
            TOKEN,
            "--trust-proxy",
            "loopback",
            "--public-host",
            "hub.example.com:443",
        ],
    );
    assert!(
        err.contains("shard.allowedOrigins") && !err.contains("shard.publicHost"),
        "{err}"
    );
    let err = refused_start(
        &dir,
        &[
            "--panel-token",
            TOKEN,
            "--trust-proxy",
            "loopback",
            "--allowed-origin",
            "https://hub.example.com",
        ],
    );
    assert!(
        err.contains("shard.publicHost") && !err.contains("shard.allowedOrigins"),
        "{err}"
    );
    // A proxy serving a plain-HTTP origin needs the consent too.
    let err = refused_start(
        &dir,
        &[
            "--panel-token",
            TOKEN,
            "--trust-proxy",
            "loopback",
            "--public-host",
            "hub.lan:80",
            "--allowed-origin",
            "http://hub.lan",
        ],
    );
    assert!(
        err.contains("shard.allowInsecureRemote") && err.contains("http://hub.lan"),
        "{err}"
    );
    // And a proxy in front of a tokenless loopback hub needs the token.
    let err = refused_start(
        &dir,
        &[
            "--trust-proxy",
            "loopback",
            "--public-host",
            "hub.example.com:443",
            "--allowed-origin",
            "https://hub.example.com",
        ],
    );
    assert!(
        err.contains("panel.token") && err.contains("--panel-token"),
        "{err}"
    );
    // Malformed values name their key.
    for (flag, value, key) in [
        ("--public-host", "hub.example.com", "shard.publicHost"),
        (
            "--allowed-origin",
            "https://hub.example.com/",
            "shard.allowedOrigins[0]",
        ),
        ("--trust-proxy", "proxy.example", "shard.trustProxy"),
    ] {
        let err = refused_start(&dir, &["--panel-token", TOKEN, flag, value]);
        assert!(err.contains(key), "{flag} {value}: {err}");
    }
    // check-config reports the same.
    let data = dir.path().display().to_string();
    let out = run_bin(
        &[
            "check-config",
            "--data-dir",
            &data,
            "--trust-proxy",
            "loopback",
            "--panel-token",
            TOKEN,
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_of(&out).contains("shard.publicHost"),
        "{}",
        stderr_of(&out)
    );
}

#[test]
fn the_insecure_remote_consent_logs_one_warning_line() {
    let dir = TempDir::new("shard-insecure");
    let hub = TestHub::start(
        dir.path(),
        &[
            "--panel-token",
            TOKEN,
            "--trust-proxy",
            "loopback",
            "--public-host",
            "hub.lan:80",
            "--allowed-origin",
            "http://hub.lan",
            "--allow-insecure-remote",
        ],
    );
    let log = hub.log_text();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("--allow-insecure-remote"))
        .collect();
    assert_eq!(warnings.len(), 1, "{log}");
    assert!(
        warnings[0].contains("WARN") && warnings[0].contains("plain HTTP"),
        "{log}"
    );
    // It works as configured: through the proxy, over plain HTTP.
    let answer = upgrade(
        hub.addr,
        "/shard/ws",
        "hub.lan",
        &[
            ("Authorization", &bearer()),
            ("Origin", "http://hub.lan"),
            ("X-Forwarded-Proto", "http"),
            ("X-Forwarded-Host", "hub.lan"),
        ],
    );
    assert_admitted(&answer, None);
}

#[test]
fn forwarded_headers_count_only_from_the_trusted_proxy() {
    let dir = TempDir::new("shard-proxy");
    let public = [
        "--panel-token",
        TOKEN,
        "--public-host",
        "hub.example.com:443",
        "--allowed-origin",
        "https://hub.example.com",
        "--trust-proxy",
    ];
    let mut args = public.to_vec();
    args.push("loopback");
    let hub = TestHub::start(dir.path(), &args);
    let through = |host: &str, headers: &[(&str, &str)]| {
        let mut all = vec![("Authorization", bearer())];
        all.extend(headers.iter().map(|(k, v)| (*k, v.to_string())));
        let all: Vec<(&str, &str)> = all.iter().map(|(k, v)| (*k, v.as_str())).collect();
        upgrade(hub.addr, "/shard/ws", host, &all)
    };
    let tls = [
        ("Origin", "https://hub.example.com"),
        ("X-Forwarded-Proto", "https"),
        ("X-Forwarded-Host", "hub.example.com"),
        // Never read: it could say anything.
        ("X-Forwarded-For", "203.0.113.9"),
    ];
    assert_admitted(&through("hub.example.com", &tls), None);
    assert_admitted(&through("hub.example.com:443", &tls[..2]), None);
    // A forwarded host that is not the pinned public host: 400.
    for forwarded in [
        "evil.example",
        "hub.example.com:8443",
        "hub.example.com.evil.test",
    ] {
        let answer = through(
            "hub.example.com",
            &[tls[0], tls[1], ("X-Forwarded-Host", forwarded)],
        );
        assert_refused(&answer, 400, "forwarded_host_mismatch");
    }
    let twice = through(
        "hub.example.com",
        &[
            tls[0],
            tls[1],
            tls[2],
            ("X-Forwarded-Host", "hub.example.com"),
        ],
    );
    assert_refused(&twice, 400, "forwarded_host_mismatch");
    // Without https from the proxy the scheme is http, and a bare Host
    // means port 80, which is not the public host.
    assert_refused(
        &through("hub.example.com", &[tls[0]]),
        403,
        "forbidden_host",
    );
    // Behind a proxy the listener's own name and origin are not accepted.
    let own = hub.addr.to_string();
    assert_refused(&through(&own, &[]), 403, "forbidden_host");
    let implicit = format!("http://{own}");
    assert_refused(
        &through("hub.example.com", &[("Origin", &implicit), tls[1]]),
        400,
        "origin_not_allowed",
    );
    // A ticket through the proxy, for the public origin.
    let answer = ticket_request(
        hub.addr,
        "hub.example.com",
        &[("Authorization", &bearer()), tls[0], tls[1], tls[2]],
    );
    assert_eq!(answer.status, 200, "{answer:?}");
    let offer = format!(
        "shard.v0, shard-ticket.{}",
        answer.body["ticket"].as_str().unwrap()
    );
    let answer = upgrade(
        hub.addr,
        "/shard/ws",
        "hub.example.com",
        &[tls[0], tls[1], tls[2], ("Sec-WebSocket-Protocol", &offer)],
    );
    assert_admitted(&answer, Some("shard.v0"));
    drop(hub);

    // Trusting another address: this test's requests come from 127.0.0.1,
    // so their forwarded headers are ignored and they are direct (http).
    let dir = TempDir::new("shard-proxy-other");
    let mut args = public.to_vec();
    args.push("192.0.2.254");
    let hub = TestHub::start(dir.path(), &args);
    let direct = |host: &str, headers: &[(&str, &str)]| {
        let mut all = vec![("Authorization", bearer())];
        all.extend(headers.iter().map(|(k, v)| (*k, v.to_string())));
        let all: Vec<(&str, &str)> = all.iter().map(|(k, v)| (*k, v.as_str())).collect();
        upgrade(hub.addr, "/shard/ws", host, &all)
    };
    let spoofed = [
        ("Origin", "https://hub.example.com"),
        ("X-Forwarded-Proto", "https"),
        ("X-Forwarded-Host", "evil.example"),
    ];
    assert_admitted(&direct("hub.example.com:443", &spoofed), None);
    assert_refused(&direct("hub.example.com", &spoofed), 403, "forbidden_host");
}

/// A non-loopback IPv4 address of this machine, if it has one.
fn non_loopback_ipv4() -> Option<IpAddr> {
    let mut found = None;
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a list we free below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return None;
    }
    let mut cursor = list;
    while !cursor.is_null() && found.is_none() {
        // SAFETY: `cursor` is a node of the list getifaddrs returned.
        let entry = unsafe { &*cursor };
        if !entry.ifa_addr.is_null()
            // SAFETY: a non-null ifa_addr points to a sockaddr.
            && i32::from(unsafe { (*entry.ifa_addr).sa_family }) == libc::AF_INET
        {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let sin = unsafe { &*(entry.ifa_addr as *const libc::sockaddr_in) };
            let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            if !ip.is_loopback() && !ip.is_unspecified() {
                found = Some(IpAddr::V4(ip));
            }
        }
        cursor = entry.ifa_next;
    }
    // SAFETY: `list` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    found
}

#[test]
fn a_non_loopback_listener_without_shard_settings_keeps_the_endpoints_off() {
    let Some(ip) = non_loopback_ipv4() else {
        println!(
            "skipped: no non-loopback IPv4 address (the decision is unit-tested in wire::shard::access)"
        );
        return;
    };
    let dir = TempDir::new("shard-off");
    let hub = TestHub::start(
        dir.path(),
        &["--listen", &format!("{ip}:0"), "--panel-token", TOKEN],
    );
    let host = hub.addr.to_string();
    // The panel and the API work as before.
    let api = http(
        hub.addr,
        "GET",
        "/api/meta",
        &[
            ("Host".into(), host.clone()),
            ("Authorization".into(), bearer()),
        ],
        b"",
    );
    assert_eq!(api.status, 200, "{}", api.text());
    // The Shard endpoints are off, saying what would turn them on.
    let origin = format!("http://{host}");
    for answer in [
        upgrade(
            hub.addr,
            "/shard/ws",
            &host,
            &[("Authorization", &bearer())],
        ),
        ticket_request(
            hub.addr,
            &host,
            &[("Authorization", &bearer()), ("Origin", &origin)],
        ),
    ] {
        assert_refused(&answer, 403, "shard_off");
        let message = answer.body["message"].as_str().unwrap();
        for key in [
            "shard.publicHost",
            "shard.allowedOrigins",
            "shard.allowInsecureRemote",
            "--public-host",
        ] {
            assert!(message.contains(key), "{message}");
        }
    }
    let log = hub.log_text();
    let off: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("the Shard endpoints are off"))
        .collect();
    assert_eq!(off.len(), 1, "{log}");
    drop(hub);

    // The same address in direct remote mode, with every setting: the
    // public host is the only Host, its origin the only Origin.
    let dir = TempDir::new("shard-direct");
    let port = free_port();
    let public = format!("{ip}:{port}");
    let origin = format!("http://{public}");
    let hub = TestHub::start(
        dir.path(),
        &[
            "--listen",
            &public,
            "--panel-token",
            TOKEN,
            "--public-host",
            &public,
            "--allowed-origin",
            &origin,
            "--allow-insecure-remote",
        ],
    );
    assert_eq!(hub.addr.port(), port);
    let answer = upgrade(
        hub.addr,
        "/shard/ws",
        &public,
        &[("Authorization", &bearer()), ("Origin", &origin)],
    );
    assert_admitted(&answer, None);
    assert_refused(
        &upgrade(
            hub.addr,
            "/shard/ws",
            &format!("127.0.0.1:{port}"),
            &[("Authorization", &bearer())],
        ),
        403,
        "forbidden_host",
    );
    let ticket = issue_at(&hub, &public, &origin);
    let answer = upgrade(
        hub.addr,
        "/shard/ws",
        &public,
        &[
            ("Origin", &origin),
            (
                "Sec-WebSocket-Protocol",
                &format!("shard.v0, shard-ticket.{ticket}"),
            ),
        ],
    );
    assert_admitted(&answer, Some("shard.v0"));
    assert_eq!(
        hub.log_text()
            .lines()
            .filter(|line| line.contains("--allow-insecure-remote"))
            .count(),
        1,
        "{}",
        hub.log_text()
    );
}
