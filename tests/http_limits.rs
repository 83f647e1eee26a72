//! Resource bounds of the in-tree tiny_http fork (`vendor/tiny_http`,
//! `Server::serve_with_limits`). Each test starts a server on 127.0.0.1:0,
//! talks raw TCP to it and proves one bound.
//!
//! These tests run one at a time (`serial()`): they measure process-wide
//! numbers (threads, RSS) and rely on timing bounds. Other modules of the
//! test binary only start hub child processes, so the server threads here
//! (named `http-accept` / `http-conn`) are the only ones with those names.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use tiny_http::{Request, Response, Server, ServerHandle, ServerLimits};

use crate::util::{proc_status_field, read_head, thread_names_of, wait_for};

/// Read/write timeout of every test socket: a hung server fails the test
/// instead of hanging it.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn limits() -> ServerLimits {
    ServerLimits {
        max_connections: 8,
        max_handlers: 8,
        head_timeout: Duration::from_secs(10),
        min_head_rate: 0,
        max_header_bytes: 16 * 1024,
        max_headers: 100,
        idle_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(10),
        thread_stack_size: 256 * 1024,
    }
}

fn start(limits: ServerLimits, handler: impl Fn(Request) + Send + Sync + 'static) -> ServerHandle {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    Server::serve_with_limits(listener, limits, Arc::new(handler)).unwrap()
}

fn ok_handler(rq: Request) {
    let _ = rq.respond(Response::from_string("ok"));
}

fn connect(server: &ServerHandle) -> TcpStream {
    let stream = TcpStream::connect(server.server_addr()).unwrap();
    stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    stream
}

/// Reads one response: the head byte by byte (never past it), then a body of
/// `Content-Length` bytes (none without that header).
fn read_response(stream: &mut TcpStream) -> io::Result<(String, Vec<u8>)> {
    let head = read_head(stream)?;
    let length = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .map_or(0, |(_, v)| v.trim().parse::<usize>().unwrap());
    let mut body = vec![0; length];
    stream.read_exact(&mut body)?;
    Ok((head, body))
}

fn get(stream: &mut TcpStream, path: &str) -> (String, Vec<u8>) {
    write!(stream, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    read_response(stream).unwrap()
}

/// Reads until the server closes the connection (EOF or reset); returns what
/// was received. Panics if it is still open after `timeout`.
fn read_until_closed(stream: &mut TcpStream, timeout: Duration) -> Vec<u8> {
    let deadline = Instant::now() + timeout;
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return received,
            Ok(n) => received.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return received, // reset
        }
        assert!(
            Instant::now() < deadline,
            "connection still open after {timeout:?}"
        );
    }
}

/// Sends `prefix`, then one byte of `filler` every `period` until the server
/// closes the connection. Returns the time from the first byte to the close
/// and what the server sent. Panics if the connection outlives `timeout`.
fn drip_until_closed(
    stream: &mut TcpStream,
    prefix: &[u8],
    period: Duration,
    timeout: Duration,
) -> (Duration, Vec<u8>) {
    let start = Instant::now();
    stream.write_all(prefix).unwrap();
    stream.set_read_timeout(Some(period)).unwrap();
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        assert!(
            start.elapsed() < timeout,
            "slow client still connected after {timeout:?}"
        );
        // the read timeout paces the bytes
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => received.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
        if stream.write_all(b"a").is_err() {
            // the server closed; collect a response it may have sent
            received.extend(read_until_closed(stream, IO_TIMEOUT));
            break;
        }
    }
    (start.elapsed(), received)
}

fn proc_status(field: &str) -> usize {
    proc_status_field(std::process::id(), field)
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status")) as usize
}

fn thread_count() -> usize {
    proc_status("Threads:")
}

/// Threads of this process named like the fork's server threads. Unlike the
/// total (`Threads:`), other test modules running in parallel cannot move it.
fn server_thread_count() -> usize {
    thread_names_of(std::process::id())
        .iter()
        .filter(|name| matches!(name.as_str(), "http-accept" | "http-conn"))
        .count()
}

fn rss_kib() -> usize {
    proc_status("VmRSS:")
}

#[test]
fn oversized_header_line_gets_431() {
    let _serial = serial();
    let server = start(limits(), ok_handler);
    let mut client = connect(&server);

    let mut request = b"GET / HTTP/1.1\r\nHost: test\r\nX-Big: ".to_vec();
    request.extend(std::iter::repeat_n(b'a', 20 * 1024));
    request.extend_from_slice(b"\r\n\r\n");
    client.write_all(&request).unwrap();

    let (head, _) = read_response(&mut client).unwrap();
    assert!(head.starts_with("HTTP/1.1 431 "), "got {head:?}");
    assert!(head.to_ascii_lowercase().contains("connection: close"));
    read_until_closed(&mut client, IO_TIMEOUT);

    // a head just under the limit is fine
    let mut client = connect(&server);
    let mut request = b"GET / HTTP/1.1\r\nHost: test\r\nX-Big: ".to_vec();
    request.extend(std::iter::repeat_n(b'a', 15 * 1024));
    request.extend_from_slice(b"\r\n\r\n");
    client.write_all(&request).unwrap();
    let (head, body) = read_response(&mut client).unwrap();
    assert!(head.starts_with("HTTP/1.1 200 "), "got {head:?}");
    assert_eq!(body, b"ok");
}

#[test]
fn huge_header_stream_is_cut_off_without_buffering() {
    let _serial = serial();
    let server = start(limits(), ok_handler);
    let rss_before = rss_kib();
    let mut client = connect(&server);

    // Up to 32 MiB of one header line (more than loopback socket buffers
    // can absorb): the server must close long before the end.
    client
        .write_all(b"GET / HTTP/1.1\r\nHost: test\r\nX-Big: ")
        .unwrap();
    let chunk = vec![b'a'; 64 * 1024];
    let mut sent = 0usize;
    let mut write_error = None;
    while sent < 32 * 1024 * 1024 {
        match client.write(&chunk) {
            Ok(n) => sent += n,
            Err(e) => {
                write_error = Some(e);
                break;
            }
        }
    }
    if let Some(e) = &write_error {
        // a write timeout would mean the server stopped reading but kept
        // the connection open
        assert!(
            !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "server neither read nor closed: {e}"
        );
    }
    let received = read_until_closed(&mut client, IO_TIMEOUT);
    let got_431 = received.starts_with(b"HTTP/1.1 431 ");
    assert!(
        write_error.is_some() || got_431,
        "server accepted all {sent} bytes without answering 431"
    );
    if !received.is_empty() {
        assert!(got_431, "got {:?}", String::from_utf8_lossy(&received));
    }

    wait_for("connection thread to end", IO_TIMEOUT, || {
        server.active_connections() == 0
    });
    let grown_kib = rss_kib().saturating_sub(rss_before);
    assert!(
        grown_kib < 16 * 1024,
        "RSS grew by {grown_kib} KiB after sending {sent} bytes of header"
    );
}

#[test]
fn too_many_headers_gets_431() {
    let _serial = serial();
    let server = start(
        ServerLimits {
            max_headers: 10,
            ..limits()
        },
        ok_handler,
    );

    let request = |count: usize| {
        let mut r = String::from("GET / HTTP/1.1\r\n");
        for i in 0..count {
            r.push_str(&format!("X-Header-{i}: {i}\r\n"));
        }
        r.push_str("\r\n");
        r
    };

    let mut client = connect(&server);
    client.write_all(request(11).as_bytes()).unwrap();
    let (head, _) = read_response(&mut client).unwrap();
    assert!(head.starts_with("HTTP/1.1 431 "), "got {head:?}");
    read_until_closed(&mut client, IO_TIMEOUT);

    let mut client = connect(&server);
    client.write_all(request(10).as_bytes()).unwrap();
    let (head, _) = read_response(&mut client).unwrap();
    assert!(head.starts_with("HTTP/1.1 200 "), "got {head:?}");
}

#[test]
fn at_the_connection_limit_the_oldest_idle_one_makes_room_else_503() {
    let _serial = serial();
    let server = start(
        ServerLimits {
            max_connections: 2,
            ..limits()
        },
        ok_handler,
    );

    // Two idle connections fill the limit; a third closes the older one
    // and is served.
    let mut oldest = connect(&server);
    wait_for("1 open connection", IO_TIMEOUT, || {
        server.active_connections() == 1
    });
    let mut second = connect(&server);
    wait_for("2 open connections", IO_TIMEOUT, || {
        server.active_connections() == 2
    });
    let mut third = connect(&server);
    let (head, body) = get(&mut third, "/");
    assert!(head.starts_with("HTTP/1.1 200 "), "got {head:?}");
    assert_eq!(body, b"ok");
    assert!(read_until_closed(&mut oldest, IO_TIMEOUT).is_empty());
    let (head, _) = get(&mut second, "/");
    assert!(head.starts_with("HTTP/1.1 200 "), "got {head:?}");

    // Both now in the middle of a head: nothing is idle, so a new
    // connection is refused.
    second.write_all(b"GET / HTTP/1.1\r\n").unwrap();
    third.write_all(b"GET / HTTP/1.1\r\n").unwrap();
    let mut refused = None;
    wait_for("a 503 for a fourth connection", IO_TIMEOUT, || {
        let mut fourth = connect(&server);
        match read_response(&mut fourth) {
            Ok((head, _)) if head.starts_with("HTTP/1.1 503 ") => {
                refused = Some(head);
                true
            }
            _ => false,
        }
    });
    assert!(refused.is_some());
    assert_eq!(server.active_connections(), 2);

    drop((second, third));
    wait_for("the connections to end", IO_TIMEOUT, || {
        server.active_connections() == 0
    });
    let mut client = connect(&server);
    let (head, body) = get(&mut client, "/");
    assert!(head.starts_with("HTTP/1.1 200 "), "got {head:?}");
    assert_eq!(body, b"ok");
}

#[test]
fn slow_request_head_is_cut_at_deadline() {
    let _serial = serial();
    let server = start(
        ServerLimits {
            idle_timeout: Duration::from_millis(500),
            request_timeout: Duration::from_secs(1),
            ..limits()
        },
        ok_handler,
    );
    let mut client = connect(&server);

    // one byte every 200 ms: never idle for 500 ms, so only the 1 s
    // request deadline can end it
    let (elapsed, received) = drip_until_closed(
        &mut client,
        b"G",
        Duration::from_millis(200),
        Duration::from_secs(5),
    );
    // (no lower bound here: a starved test thread could let the idle
    // timeout fire first; the stalled-head test checks the deadline timing)
    assert!(elapsed < Duration::from_secs(5));
    let text = String::from_utf8_lossy(&received);
    assert!(text.starts_with("HTTP/1.1 408 "), "got {text:?}");
    wait_for("connection thread to end", IO_TIMEOUT, || {
        server.active_connections() == 0
    });
}

#[test]
fn stalled_head_is_cut_at_deadline_not_idle_timeout() {
    let _serial = serial();
    let idle_timeout = Duration::from_secs(4);
    let server = start(
        ServerLimits {
            idle_timeout,
            request_timeout: Duration::from_secs(1),
            ..limits()
        },
        ok_handler,
    );
    let mut client = connect(&server);

    // the read timeout is min(idle_timeout, time left): a client that stops
    // mid-head is answered at the 1 s deadline, not after 4 s idle
    let started = Instant::now();
    client.write_all(b"GET / HTTP/1.1\r\nHost: te").unwrap();
    let received = read_until_closed(&mut client, IO_TIMEOUT);
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < idle_timeout - Duration::from_secs(1),
        "closed after {elapsed:?}"
    );
    let text = String::from_utf8_lossy(&received);
    assert!(text.starts_with("HTTP/1.1 408 "), "got {text:?}");
}

#[test]
fn slow_body_is_cut_at_deadline() {
    let _serial = serial();
    let (tx, rx) = mpsc::channel::<io::Result<usize>>();
    let tx = Mutex::new(tx);
    let server = start(
        ServerLimits {
            idle_timeout: Duration::from_millis(500),
            request_timeout: Duration::from_secs(1),
            ..limits()
        },
        move |mut rq: Request| {
            let mut body = Vec::new();
            let result = rq.as_reader().read_to_end(&mut body);
            let status = if result.is_ok() { 200 } else { 408 };
            tx.lock().unwrap().send(result).unwrap();
            let _ = rq.respond(Response::empty(status));
        },
    );

    // a body the handler reads through `as_reader`
    let mut client = connect(&server);
    let (elapsed, received) = drip_until_closed(
        &mut client,
        b"POST / HTTP/1.1\r\nHost: test\r\nContent-Length: 100000\r\n\r\n",
        Duration::from_millis(200),
        Duration::from_secs(5),
    );
    assert!(elapsed < Duration::from_secs(5));
    let err = rx.recv_timeout(IO_TIMEOUT).unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TimedOut);
    let text = String::from_utf8_lossy(&received);
    assert!(text.starts_with("HTTP/1.1 408 "), "got {text:?}");

    // a small body, which the server reads before calling the handler
    let mut client = connect(&server);
    let (elapsed, received) = drip_until_closed(
        &mut client,
        b"POST / HTTP/1.1\r\nHost: test\r\nContent-Length: 500\r\n\r\n",
        Duration::from_millis(200),
        Duration::from_secs(5),
    );
    assert!(elapsed < Duration::from_secs(5));
    assert!(rx.try_recv().is_err(), "the handler must not be called");
    let text = String::from_utf8_lossy(&received);
    assert!(text.starts_with("HTTP/1.1 408 "), "got {text:?}");
    wait_for("connection threads to end", IO_TIMEOUT, || {
        server.active_connections() == 0
    });
}

#[test]
fn keep_alive_deadline_is_per_request() {
    let _serial = serial();
    let idle_timeout = Duration::from_secs(3);
    let request_timeout = Duration::from_millis(500);
    let server = start(
        ServerLimits {
            idle_timeout,
            request_timeout,
            ..limits()
        },
        ok_handler,
    );
    let mut client = connect(&server);

    let (head, body) = get(&mut client, "/one");
    assert!(head.starts_with("HTTP/1.1 200 "), "got {head:?}");
    assert_eq!(body, b"ok");

    // The idle gap under test: longer than request_timeout, well under
    // idle_timeout (a sleep on purpose, not a wait for the server).
    let gap = request_timeout * 2;
    assert!(gap * 2 < idle_timeout);
    thread::sleep(gap);

    let (head, body) = get(&mut client, "/two");
    assert!(head.starts_with("HTTP/1.1 200 "), "got {head:?}");
    assert_eq!(body, b"ok");
    assert_eq!(server.active_connections(), 1);

    // an idle keep-alive connection is closed after idle_timeout, silently
    let idle_start = Instant::now();
    let received = read_until_closed(&mut client, idle_timeout + IO_TIMEOUT);
    assert!(idle_start.elapsed() >= idle_timeout - Duration::from_millis(100));
    assert!(
        received.is_empty(),
        "got {:?}",
        String::from_utf8_lossy(&received)
    );
}

#[test]
fn upgrade_raw_hands_over_socket_and_frees_slot() {
    let _serial = serial();
    let idle_timeout = Duration::from_secs(10);
    let (tx, rx) = mpsc::channel::<TcpStream>();
    let tx = Mutex::new(tx);
    let server = start(
        ServerLimits {
            max_connections: 1,
            idle_timeout,
            ..limits()
        },
        move |rq: Request| {
            if rq.url() == "/upgrade" {
                let stream = rq.upgrade_raw("test-proto", Response::empty(101)).unwrap();
                tx.lock().unwrap().send(stream).unwrap();
            } else {
                ok_handler(rq);
            }
        },
    );

    let mut client = connect(&server);
    client
        .write_all(
            b"GET /upgrade HTTP/1.1\r\nHost: test\r\nConnection: Upgrade\r\n\
              Upgrade: test-proto\r\n\r\n",
        )
        .unwrap();
    let (head, _) = read_response(&mut client).unwrap();
    assert!(head.starts_with("HTTP/1.1 101 "), "got {head:?}");
    assert!(head.to_ascii_lowercase().contains("upgrade: test-proto"));

    let mut upgraded = rx.recv_timeout(IO_TIMEOUT).unwrap();
    assert_eq!(upgraded.read_timeout().unwrap(), None);
    assert_eq!(upgraded.write_timeout().unwrap(), Some(idle_timeout));
    upgraded.set_read_timeout(Some(IO_TIMEOUT)).unwrap();

    // the connection thread ends and releases the only slot...
    wait_for(
        "the upgraded connection to leave the count",
        IO_TIMEOUT,
        || server.active_connections() == 0,
    );
    // ...without shutting the handed-over socket down
    client.write_all(b"ping").unwrap();
    let mut buf = [0u8; 4];
    upgraded.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"ping");
    let mut writer = upgraded.try_clone().unwrap();
    writer.write_all(b"pong").unwrap();
    client.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"pong");

    // max_connections = 1, yet a new HTTP connection is served
    let mut other = connect(&server);
    let (head, _) = get(&mut other, "/");
    assert!(head.starts_with("HTTP/1.1 200 "), "got {head:?}");

    upgraded.shutdown(Shutdown::Both).unwrap();
    assert!(read_until_closed(&mut client, IO_TIMEOUT).is_empty());
}

#[test]
fn upgrade_raw_outside_serve_with_limits_is_unsupported() {
    let _serial = serial();
    let rq = tiny_http::TestRequest::new().with_path("/upgrade");
    let err = Request::from(rq)
        .upgrade_raw("x", Response::empty(101))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
}

#[test]
fn idle_connections_hold_no_thread_and_shutdown_closes_them() {
    let _serial = serial();
    // server threads left by earlier tests end once their clients are gone
    wait_for("earlier server threads to end", IO_TIMEOUT, || {
        server_thread_count() == 0
    });
    let baseline = thread_count();
    let server = start(limits(), ok_handler);

    let mut clients: Vec<TcpStream> = (0..5).map(|_| connect(&server)).collect();
    for client in &mut clients {
        let (head, _) = get(client, "/");
        assert!(head.starts_with("HTTP/1.1 200 "), "got {head:?}");
    }
    assert_eq!(server.active_connections(), 5);
    // Between requests the five wait in the front door: the handler
    // threads end once they have had nothing to do for a second.
    wait_for("only the front door thread", IO_TIMEOUT, || {
        server_thread_count() == 1
    });
    // A kept-alive connection is served again.
    let (head, _) = get(&mut clients[0], "/");
    assert!(head.starts_with("HTTP/1.1 200 "), "got {head:?}");
    let addr = server.server_addr();

    let started = Instant::now();
    server.shutdown();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "shutdown took {:?}",
        started.elapsed()
    );
    assert!(TcpStream::connect(addr).is_err(), "still accepting");
    // The connections waiting for their next request are closed.
    for client in &mut clients[1..] {
        assert!(read_until_closed(client, IO_TIMEOUT).is_empty());
    }
    wait_for("connections to end", IO_TIMEOUT, || {
        server.active_connections() == 0
    });
    wait_for("server threads to end", IO_TIMEOUT, || {
        server_thread_count() == 0
    });
    // The process total is shared with tests of other modules running in
    // parallel (their helper threads come and go), so it gets a margin.
    wait_for("thread count back near its baseline", IO_TIMEOUT, || {
        thread_count() <= baseline + 2
    });
    drop(server); // second shutdown is a no-op
}

#[test]
fn a_crowd_of_half_heads_and_idle_sockets_holds_no_threads() {
    let _serial = serial();
    wait_for("earlier server threads to end", IO_TIMEOUT, || {
        server_thread_count() == 0
    });
    let server = start(
        ServerLimits {
            max_connections: 2048,
            ..limits()
        },
        ok_handler,
    );
    let rss_before = rss_kib();
    // 300 sockets that never send a byte and 300 that stop half-way
    // through their head: all of them wait in the front door.
    let mut crowd: Vec<TcpStream> = (0..600).map(|_| connect(&server)).collect();
    for half in &mut crowd[300..] {
        half.write_all(b"GET /slow HTTP/1.1\r\nHost: te").unwrap();
    }
    wait_for("600 open connections", IO_TIMEOUT, || {
        server.active_connections() == 600
    });
    assert_eq!(server_thread_count(), 1, "only the front door thread");
    let grown = rss_kib().saturating_sub(rss_before);
    assert!(grown < 600 * 16, "RSS grew {grown} KiB for 600 connections");

    // An ordinary request is answered at once.
    let started = Instant::now();
    let mut client = connect(&server);
    let (head, body) = get(&mut client, "/");
    assert!(head.starts_with("HTTP/1.1 200 "), "got {head:?}");
    assert_eq!(body, b"ok");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    drop(crowd);
    wait_for("the crowd to be gone", IO_TIMEOUT, || {
        server.active_connections() == 1
    });
}

#[test]
fn complete_heads_beyond_the_handler_bound_wait_their_turn() {
    let _serial = serial();
    wait_for("earlier server threads to end", IO_TIMEOUT, || {
        server_thread_count() == 0
    });
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = Mutex::new(release_rx);
    let server = start(
        ServerLimits {
            max_handlers: 2,
            ..limits()
        },
        move |rq: Request| {
            if rq.url() == "/hold" {
                let _ = release_rx.lock().unwrap().recv();
            }
            let _ = rq.respond(Response::from_string("ok"));
        },
    );
    let mut held: Vec<TcpStream> = (0..5).map(|_| connect(&server)).collect();
    for client in &mut held {
        client
            .write_all(b"GET /hold HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
    }
    wait_for("5 open connections", IO_TIMEOUT, || {
        server.active_connections() == 5
    });
    // Two handler threads, whatever waits.
    wait_for("the door and two handlers", IO_TIMEOUT, || {
        server_thread_count() == 3
    });
    // And no third handler starts meanwhile: every look for 100 ms sees
    // the same three.
    let window = Instant::now() + Duration::from_millis(100);
    while Instant::now() < window {
        assert_eq!(server_thread_count(), 3);
        thread::sleep(Duration::from_millis(5));
    }
    for _ in 0..5 {
        release_tx.send(()).unwrap();
    }
    for client in &mut held {
        let (head, _) = read_response(client).unwrap();
        assert!(head.starts_with("HTTP/1.1 200 "), "got {head:?}");
    }
}

#[test]
fn a_head_trickling_below_the_least_rate_is_cut() {
    let _serial = serial();
    let server = start(
        ServerLimits {
            min_head_rate: 50,
            head_timeout: Duration::from_secs(8),
            request_timeout: Duration::from_secs(8),
            ..limits()
        },
        ok_handler,
    );
    let mut client = connect(&server);
    // 10 bytes per second: cut once the 2 s grace is over, long before the
    // 8 s head deadline.
    let (elapsed, received) = drip_until_closed(
        &mut client,
        b"G",
        Duration::from_millis(100),
        Duration::from_secs(7),
    );
    assert!(elapsed >= Duration::from_millis(1900), "{elapsed:?}");
    let text = String::from_utf8_lossy(&received);
    assert!(text.starts_with("HTTP/1.1 408 "), "got {text:?}");
    // A head sent at once is well above any rate.
    let mut client = connect(&server);
    let (head, _) = get(&mut client, "/");
    assert!(head.starts_with("HTTP/1.1 200 "), "got {head:?}");
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let _serial = serial();
    let server = start(limits(), |rq: Request| {
        let url = rq.url().to_string();
        let _ = rq.respond(Response::from_string(url));
    });
    let mut client = connect(&server);
    client
        .write_all(
            b"GET /one HTTP/1.1\r\nHost: t\r\n\r\nGET /two HTTP/1.1\r\nHost: t\r\n\r\nGET /thr",
        )
        .unwrap();
    for expected in ["/one", "/two"] {
        let (head, body) = read_response(&mut client).unwrap();
        assert!(head.starts_with("HTTP/1.1 200 "), "got {head:?}");
        assert_eq!(body, expected.as_bytes());
    }
    // The third head, cut in two, completes later.
    client.write_all(b"ee HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let (_, body) = read_response(&mut client).unwrap();
    assert_eq!(body, b"/three");
}
