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
fn connection_limit_answers_503_then_recovers() {
    let _serial = serial();
    let server = start(
        ServerLimits {
            max_connections: 2,
            ..limits()
        },
        ok_handler,
    );

    let idle: Vec<TcpStream> = (0..2).map(|_| connect(&server)).collect();
    wait_for("2 active connections", IO_TIMEOUT, || {
        server.active_connections() == 2
    });

    let mut third = connect(&server);
    let (head, _) = read_response(&mut third).unwrap();
    assert!(head.starts_with("HTTP/1.1 503 "), "got {head:?}");
    read_until_closed(&mut third, IO_TIMEOUT);
    assert_eq!(server.active_connections(), 2);

    drop(idle);
    wait_for("idle connections to end", IO_TIMEOUT, || {
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
fn shutdown_is_prompt_and_threads_return_to_baseline() {
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
    assert_eq!(server_thread_count(), 6); // accept + 5 connections
    let addr = server.server_addr();

    let started = Instant::now();
    server.shutdown();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "shutdown took {:?}",
        started.elapsed()
    );
    assert!(TcpStream::connect(addr).is_err(), "still accepting");
    assert_eq!(server_thread_count(), 5, "accept thread still running");

    // connections accepted before the shutdown are still served
    let (head, _) = get(&mut clients[0], "/");
    assert!(head.starts_with("HTTP/1.1 200 "), "got {head:?}");

    drop(clients);
    wait_for("connection threads to end", IO_TIMEOUT, || {
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
