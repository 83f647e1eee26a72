//! Process-level figures: resident memory idle, with 100 supervised
//! sessions, with 1000 panel sockets and with 1000 idle HTTP connections
//! (plus thread and descriptor counts before, during and after), an
//! operator's requests under a slowloris crowd, startup to listening,
//! binary size, `--help`.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::load;
use crate::server::{self, Env, Kind, Opts, Server};
use crate::wire;

#[derive(Debug, Default, Clone)]
pub struct Counts {
    pub rss_kib: u64,
    pub threads: u64,
    pub fds: u64,
}

fn counts(s: &Server) -> Counts {
    Counts {
        rss_kib: s.rss_kib(),
        threads: s.threads(),
        fds: s.fds(),
    }
}

pub fn idle(env: &Env, kind: Kind) -> Counts {
    let s = Server::start(env, kind, &Opts::default());
    std::thread::sleep(Duration::from_secs(1));
    let c = counts(&s);
    s.stop();
    c
}

#[derive(Debug, Default)]
pub struct PanelsResult {
    pub before: Counts,
    pub during: Counts,
    pub after: Counts,
    pub opened: usize,
    pub failed: usize,
    /// Seconds until threads and fds were back at `before` (None: never
    /// within the wait).
    pub settled_after: Option<f64>,
}

/// Which kind of socket [`sockets`] opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Socket {
    /// A panel, subscribed to the bench session.
    Panel,
    /// A Shard client attached to the bench session as an observer (the
    /// hub only).
    Shard,
}

/// Opens `n` subscribed panel sockets, measures, closes them all and
/// waits (up to 10 s) for threads and descriptors to return.
pub fn panels(env: &Env, kind: Kind, n: usize) -> PanelsResult {
    sockets(env, kind, n, Socket::Panel)
}

/// [`panels`] for either kind of socket.
pub fn sockets(env: &Env, kind: Kind, n: usize, socket: Socket) -> PanelsResult {
    let s = Server::start(env, kind, &Opts::default());
    s.create_session(load::SESSION);
    std::thread::sleep(Duration::from_millis(300));
    let mut r = PanelsResult {
        before: counts(&s),
        ..PanelsResult::default()
    };
    let mut open = Vec::with_capacity(n);
    for _ in 0..n {
        let connect = || match socket {
            Socket::Panel => load::panel_connect(s.addr, None),
            Socket::Shard => load::shard_connect(s.addr, None),
        };
        match std::panic::catch_unwind(connect) {
            Ok(ws) => open.push(ws),
            Err(_) => r.failed += 1,
        }
    }
    r.opened = open.len();
    std::thread::sleep(Duration::from_secs(1));
    r.during = counts(&s);
    if let Ok(dir) = std::env::var("BENCH_SMAPS") {
        // Diagnostics: the server's memory map while the sockets are open.
        let _ = std::fs::copy(
            format!("/proc/{}/smaps", s.pid()),
            format!("{dir}/smaps-{}-{n}.txt", kind.label()),
        );
    }
    drop(open);
    let closed_at = Instant::now();
    let end = closed_at + Duration::from_secs(10);
    while Instant::now() < end {
        let c = counts(&s);
        if c.threads <= r.before.threads && c.fds <= r.before.fds {
            r.settled_after = Some(closed_at.elapsed().as_secs_f64());
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(1));
    r.after = counts(&s);
    s.stop();
    r
}

#[derive(Debug, Default)]
pub struct HttpIdleResult {
    pub before: Counts,
    pub during: Counts,
    pub opened: usize,
}

/// Opens `n` HTTP connections, each serving one keep-alive `GET
/// /api/sessions/:id`
/// and then left open and idle, and measures the server with them open.
pub fn http_idle(env: &Env, kind: Kind, n: usize) -> HttpIdleResult {
    use std::io::{Read, Write};
    let s = Server::start(env, kind, &Opts::default());
    s.create_session(load::SESSION);
    std::thread::sleep(Duration::from_millis(300));
    let mut r = HttpIdleResult {
        before: counts(&s),
        ..HttpIdleResult::default()
    };
    let request = format!(
        "GET /api/sessions/{} HTTP/1.1\r\nHost: {}\r\n\r\n",
        load::SESSION,
        s.addr
    );
    let mut open = Vec::with_capacity(n);
    let mut buf = [0u8; 4096];
    for _ in 0..n {
        let Ok(mut c) = std::net::TcpStream::connect(s.addr) else {
            continue;
        };
        let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
        if c.write_all(request.as_bytes()).is_err() {
            continue;
        }
        // The answer's head and its small body arrive together.
        let mut got = Vec::new();
        while wire::find(&got, b"\r\n\r\n").is_none() {
            match c.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(k) => got.extend_from_slice(&buf[..k]),
            }
        }
        if got.starts_with(b"HTTP/1.1 200") {
            open.push(c);
        }
    }
    r.opened = open.len();
    std::thread::sleep(Duration::from_secs(2));
    r.during = counts(&s);
    drop(open);
    s.stop();
    r
}

#[derive(Debug, Default)]
pub struct SlowlorisResult {
    /// `GET /api/sessions/:id` round trips on fresh connections while the crowd
    /// is open, in µs.
    pub samples_us: Vec<f64>,
    pub refused: usize,
    pub threads: u64,
    pub baseline_threads: u64,
}

/// `n` connections, half idle and half trickling a head (one byte each
/// per 500 ms, replaced when the server cuts them), for 5 s; meanwhile a
/// client asks `GET /api/sessions/:id` every 100 ms on a fresh connection.
pub fn slowloris(env: &Env, kind: Kind, n: usize) -> SlowlorisResult {
    use std::io::{Read, Write};
    let s = Server::start(env, kind, &Opts::default());
    s.create_session(load::SESSION);
    std::thread::sleep(Duration::from_millis(300));
    let mut r = SlowlorisResult {
        baseline_threads: s.threads(),
        ..SlowlorisResult::default()
    };
    let head = b"GET /api/sessions/x HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
    let connect = || std::net::TcpStream::connect(s.addr).ok();
    let idle: Vec<_> = (0..n / 2).filter_map(|_| connect()).collect();
    let mut trickling: Vec<std::net::TcpStream> = Vec::new();
    let ask = format!(
        "GET /api/sessions/{} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        load::SESSION,
        s.addr
    );
    let started = Instant::now();
    let mut last_drip = Instant::now() - Duration::from_secs(1);
    while started.elapsed() < Duration::from_secs(5) {
        if last_drip.elapsed() >= Duration::from_millis(500) {
            trickling.retain_mut(|c| c.write_all(b"a").is_ok());
            while trickling.len() < n / 2 {
                let Some(mut c) = connect() else { break };
                if c.write_all(head).is_err() {
                    break;
                }
                trickling.push(c);
            }
            last_drip = Instant::now();
        }
        r.threads = r.threads.max(s.threads());
        let t = Instant::now();
        let answered = connect().and_then(|mut c| {
            c.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
            c.write_all(ask.as_bytes()).ok()?;
            let mut reply = Vec::new();
            let _ = c.read_to_end(&mut reply);
            Some(reply.starts_with(b"HTTP/1.1 200"))
        });
        match answered {
            Some(true) => r.samples_us.push(t.elapsed().as_secs_f64() * 1e6),
            _ => r.refused += 1,
        }
        // the probing client's pace
        std::thread::sleep(Duration::from_millis(100));
    }
    drop((idle, trickling));
    s.stop();
    r
}

#[derive(Debug, Default)]
pub struct SessionsResult {
    pub before: Counts,
    pub during: Counts,
    pub after: Counts,
    pub after_delete: Counts,
    pub connected: usize,
    pub workers_rss_kib: u64,
    pub start_secs: f64,
    pub stop_secs: f64,
}

/// 100 sessions, each started through `POST /api/sessions/:id/start` (a
/// real `simplex-hub mock-worker` process each), measured once all are
/// connected; then all stopped through the API.
pub fn sessions(env: &Env, n: usize) -> SessionsResult {
    let s = Server::start(env, Kind::Hub, &Opts::default());
    let ids: Vec<String> = (0..n).map(|i| format!("s{i:03}")).collect();
    for id in &ids {
        let body = format!("{{\"session\":\"{id}\"}}");
        let (st, reply) = wire::http(s.addr, "POST", "/api/sessions", &body).unwrap();
        assert_eq!(st, 201, "{reply}");
    }
    std::thread::sleep(Duration::from_millis(500));
    let mut r = SessionsResult {
        before: counts(&s),
        ..SessionsResult::default()
    };
    let t0 = Instant::now();
    parallel(&ids, 4, |id| {
        let (st, reply) =
            wire::http(s.addr, "POST", &format!("/api/sessions/{id}/start"), "{}").unwrap();
        if st != 200 {
            eprintln!("[bench] start {id}: {st} {reply}");
        }
    });
    let end = Instant::now() + Duration::from_secs(60);
    while Instant::now() < end {
        r.connected = connected(s.addr);
        if r.connected >= n {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    r.start_secs = t0.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_secs(2));
    r.during = counts(&s);
    r.workers_rss_kib = children(s.pid())
        .iter()
        .map(|&pid| server::status_field(pid, "VmRSS:").unwrap_or(0))
        .sum();
    let t1 = Instant::now();
    parallel(&ids, 8, |id| {
        match wire::http(s.addr, "POST", &format!("/api/sessions/{id}/stop"), "{}") {
            Ok((200, _)) => {}
            other => eprintln!("[bench] stop {id}: {other:?}"),
        }
    });
    r.stop_secs = t1.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_secs(3));
    r.after = counts(&s);
    parallel(&ids, 4, |id| {
        let _ = wire::http(s.addr, "DELETE", &format!("/api/sessions/{id}"), "");
    });
    std::thread::sleep(Duration::from_secs(2));
    r.after_delete = counts(&s);
    s.stop();
    r
}

fn connected(addr: SocketAddr) -> usize {
    let Ok((200, body)) = wire::http(addr, "GET", "/api/sessions", "") else {
        return 0;
    };
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    v["sessions"]
        .as_array()
        .map_or(0, |a| a.iter().filter(|s| s["connected"] == true).count())
}

fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(text) = std::fs::read_to_string(t.path().join("children")) {
                out.extend(
                    text.split_whitespace()
                        .filter_map(|p| p.parse::<u32>().ok()),
                );
            }
        }
    }
    out
}

fn parallel(items: &[String], threads: usize, f: impl Fn(&str) + Sync) {
    let next = Mutex::new(0usize);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = {
                    let mut n = next.lock().unwrap();
                    let i = *n;
                    *n += 1;
                    i
                };
                let Some(id) = items.get(i) else { break };
                f(id);
            });
        }
    });
}

#[derive(Debug, Default)]
pub struct Startup {
    pub to_ready_ms: Vec<f64>,
    pub to_connect_ms: Vec<f64>,
}

/// Spawn → readiness line and spawn → first accepted TCP connect, `reps`
/// times on a warm data directory.
pub fn startup(env: &Env, kind: Kind, reps: usize) -> Startup {
    let dir = env.fresh_dir(&format!("startup-{}", kind.label()));
    // Warm-up start: first-run files, page cache.
    Server::start(
        env,
        kind,
        &Opts {
            data_dir: Some(dir.clone()),
            ..Opts::default()
        },
    )
    .stop();
    let mut out = Startup::default();
    for _ in 0..reps {
        let port = server::free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let connected = Arc::new(Mutex::new(None::<Instant>));
        let poller = {
            let stop = stop.clone();
            let connected = connected.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if std::net::TcpStream::connect(addr).is_ok() {
                        *connected.lock().unwrap() = Some(Instant::now());
                        return;
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
            })
        };
        let spawned = Instant::now();
        let s = Server::start(
            env,
            kind,
            &Opts {
                data_dir: Some(dir.clone()),
                listen: Some(addr.to_string()),
                ..Opts::default()
            },
        );
        let wait_end = Instant::now() + Duration::from_secs(5);
        while connected.lock().unwrap().is_none() && Instant::now() < wait_end {
            std::thread::sleep(Duration::from_millis(1));
        }
        stop.store(true, Ordering::Relaxed);
        let _ = poller.join();
        out.to_ready_ms.push(s.ready_after.as_secs_f64() * 1e3);
        if let Some(at) = *connected.lock().unwrap() {
            out.to_connect_ms.push((at - spawned).as_secs_f64() * 1e3);
        }
        s.stop();
    }
    out
}

#[derive(Debug, Default)]
pub struct Size {
    pub hub_bytes: u64,
    pub hub_stripped_bytes: u64,
    pub node_bin_bytes: u64,
    pub node_modules_bytes: u64,
}

pub fn size(env: &Env) -> Size {
    let mut out = Size {
        hub_bytes: std::fs::metadata(&env.hub_bin).map_or(0, |m| m.len()),
        ..Size::default()
    };
    let copy = env.tmp.join("simplex-hub.stripped");
    if std::fs::copy(&env.hub_bin, &copy).is_ok() {
        let ok = Command::new("strip")
            .arg(&copy)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if ok {
            out.hub_stripped_bytes = std::fs::metadata(&copy).map_or(0, |m| m.len());
        }
    }
    if let Ok(o) = Command::new("sh")
        .args([
            "-c",
            &format!("readlink -f \"$(command -v {})\"", env.node_bin.display()),
        ])
        .output()
    {
        let path = String::from_utf8_lossy(&o.stdout).trim().to_string();
        out.node_bin_bytes = std::fs::metadata(path).map_or(0, |m| m.len());
    }
    out.node_modules_bytes = dir_size(&env.relay_js.with_file_name("node_modules"));
    out
}

fn dir_size(p: &std::path::Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(p) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Wall time of `argv` from spawn to exit, `reps` times (ms each).
pub fn exec_times(argv: &[&str], reps: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        let st = Command::new(argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if st.is_ok() {
            out.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    out
}

/// Resident cost of one panel's outbound queue as the hub creates it
/// (`crossbeam_channel::bounded(16 * 1024)` of `panel::conn::Outgoing`):
/// this process's RSS growth over `n` such channels, in KiB each.
pub fn queue_cost_kib(n: usize) -> (usize, f64) {
    use simplex_hub::harness::panel_conn::Outgoing;
    let me = std::process::id();
    let before = server::status_field(me, "VmRSS:").unwrap_or(0);
    let chans: Vec<_> = (0..n)
        .map(|_| crossbeam_channel::bounded::<Outgoing>(16 * 1024))
        .collect();
    let after = server::status_field(me, "VmRSS:").unwrap_or(0);
    drop(chans);
    (
        std::mem::size_of::<Outgoing>(),
        (after.saturating_sub(before)) as f64 / n as f64,
    )
}
