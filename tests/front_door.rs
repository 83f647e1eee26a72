//! The front door against crowds of slow or hostile clients, with the real
//! hub and its default limits: a thousand slow connections, WebSocket
//! upgrades that stop mid-handshake, and a hub out of file descriptors.
//! Each test prints its figures (`front door: ...`); `docs/security.md`
//! carries them.
//!
//! These run one at a time (`heavy()`): they hold many sockets and measure
//! the hub's threads and CPU. Their sleeps pace an attacker on purpose.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::util::*;

/// Opens `n` connections to `addr`; the first `half` of them then send
/// half a request head (`head`), the others nothing.
fn crowd(addr: SocketAddr, n: usize, half: usize, head: &str) -> Vec<TcpStream> {
    let mut conns = Vec::with_capacity(n);
    for i in 0..n {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        if i < half {
            s.write_all(head.as_bytes()).unwrap();
        }
        conns.push(s);
    }
    conns
}

/// How long `GET /api/meta` takes on a fresh connection (it must succeed).
fn meta_round_trip(addr: SocketAddr) -> Duration {
    let raw = format!("GET /api/meta HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let started = Instant::now();
    let reply = exchange_within(addr, raw.as_bytes(), Duration::from_secs(10))
        .expect("no answer within 10 s");
    assert_eq!(status_line_code(&reply), 200, "{reply}");
    started.elapsed()
}

/// The hub's CPU time so far (user + system), from `/proc/<pid>/stat`.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    // utime and stime are fields 14 and 15 (1-based), 12 and 13 here.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / hz)
}

#[test]
fn a_thousand_slow_connections_leave_the_operator_served() {
    let _heavy = heavy();
    let dir = TempDir::new("door-thousand");
    let hub = hub_with(&dir, json!({}));
    let baseline_threads = hub.threads();
    let baseline_rss = hub.rss_kib();
    let addr = hub.addr;
    // 500 sockets that never send a byte and 500 trickling a head, one
    // byte every 500 ms. The front door cuts a trickling head once it falls
    // below `http.minHeadBytesPerSecond` (after 2 s); the attacker replaces
    // every one it cuts.
    let head = "GET /api/meta HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
    let idle = crowd(addr, 500, 0, "");
    let mut trickling = crowd(addr, 500, 500, head);
    let mut cut = 0usize;
    let mut slowest = Duration::ZERO;
    let mut max_threads = 0;
    let mut max_rss = 0;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(5) {
        let before = trickling.len();
        trickling.retain_mut(|s| s.write_all(b"a").is_ok());
        cut += before - trickling.len();
        while trickling.len() < 500 {
            trickling.extend(crowd(addr, 1, 1, head));
        }
        max_threads = max_threads.max(hub.threads());
        max_rss = max_rss.max(hub.rss_kib());
        // Of two requests in a row the faster counts: a crowd that held
        // the door would slow both, a busy machine's scheduler one.
        slowest = slowest.max(meta_round_trip(addr).min(meta_round_trip(addr)));
        // the attacker's pace
        thread::sleep(Duration::from_millis(500));
    }
    // The idle half is all still open (idle for less than 30 s).
    let open = hub.fds();
    assert!(open >= 500, "{open} descriptors: idle ones were closed");
    assert!(cut > 0, "no trickling head was cut");
    assert!(
        slowest < Duration::from_secs(1),
        "slowest answer {slowest:?}"
    );
    // The crowd holds no thread: a handler or two come and go for the
    // operator's requests.
    assert!(
        max_threads <= baseline_threads + 4,
        "{max_threads} threads (baseline {baseline_threads}): {:?}",
        hub.thread_names()
    );
    let per_conn = (max_rss.saturating_sub(baseline_rss) as f64) / 1000.0;
    assert!(per_conn < 16.0, "{per_conn:.1} KiB per slow connection");
    drop((idle, trickling));
    assert!(threads_settle(&hub, baseline_threads + 1));
    eprintln!(
        "front door: 1000 slow connections (500 idle, 500 trickling, {cut} of those cut \
         below the head rate and replaced); operator's GET slowest {slowest:?}; threads max \
         {max_threads} (baseline {baseline_threads}); RSS {per_conn:.1} KiB per connection"
    );
}

#[test]
fn websocket_upgrades_stopping_mid_handshake_hold_nothing() {
    let _heavy = heavy();
    let dir = TempDir::new("door-upgrades");
    let hub = hub_with(&dir, json!({}));
    let baseline_threads = hub.threads();
    let addr = hub.addr;
    let head = format!(
        "GET /panel/ws HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: "
    );
    let before = hub.fds();
    let conns = crowd(addr, 300, 300, &head);
    // The door has taken every one of them (a descriptor each) before the
    // threads are counted.
    wait_for("the hub to hold the 300 connections", DEADLINE, || {
        hub.fds() >= before + 300
    });
    let threads = hub.threads();
    let answer = meta_round_trip(addr);
    // A real panel still connects and gets its welcome.
    let _panel = panel(&hub);
    assert!(answer < Duration::from_secs(1), "{answer:?}");
    assert!(
        threads <= baseline_threads + 2,
        "{threads} threads (baseline {baseline_threads})"
    );
    drop(conns);
    eprintln!(
        "front door: 300 WebSocket upgrades stopped mid-handshake; GET answered in \
         {answer:?}; threads {threads} (baseline {baseline_threads})"
    );
}

#[test]
fn out_of_descriptors_the_hub_rests_accept_and_serves_again() {
    let _heavy = heavy();
    let dir = TempDir::new("door-emfile");
    let hub = hub_with(&dir, json!({}));
    let pid = hub.child.id();
    let addr = hub.addr;
    // Leave the hub 8 descriptors beyond what it holds now.
    let limit = hub.fds() as u64 + 8;
    let set = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: both rlimit structs are valid for the call.
    let r = unsafe { libc::prlimit(pid as libc::pid_t, libc::RLIMIT_NOFILE, &set, &mut old) };
    assert_eq!(r, 0, "prlimit: {}", std::io::Error::last_os_error());

    // Connections in the middle of a head take the last descriptors (none
    // of them is idle, so none can be closed for a newcomer), until accept
    // fails; a few more then wait in the listen backlog.
    let half = "GET /api/meta HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    let mut held = Vec::new();
    assert!(
        wait_until(DEADLINE, || {
            if held.len() < 64 {
                held.extend(crowd(addr, 1, 1, half));
            }
            hub.log_text().contains("accept failed")
        }),
        "{} connections: {}",
        held.len(),
        hub.log_text()
    );
    let mut waiting = crowd(addr, 4, 0, "");
    // Out of descriptors, accept rests instead of spinning a core.
    let before = cpu_time(pid);
    // the measurement window
    thread::sleep(Duration::from_secs(2));
    let spent = cpu_time(pid) - before;
    assert!(
        spent < Duration::from_millis(300),
        "{spent:?} of CPU in 2 s"
    );

    // Descriptors come back: the waiting connections are accepted and
    // answered.
    for s in held.drain(..held.len().min(6)) {
        drop(s);
    }
    let raw = format!("GET /api/meta HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let s = &mut waiting[0];
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(raw.as_bytes()).unwrap();
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    let reply = String::from_utf8_lossy(&reply).into_owned();
    assert_eq!(status_line_code(&reply), 200, "{reply}");

    // Idle connections holding every descriptor: one is closed for the
    // newcomer instead.
    drop(held);
    drop(waiting);
    // Idle connections are opened until the door has closed one of them
    // for a newcomer: only then is it known to hold every descriptor it may
    // with idle connections. (Its count of descriptors is no witness: at the
    // limit with an empty backlog, accept(2) still fails EMFILE and the door
    // closes an idle connection, so it rests one below the limit.)
    let mut idle: Vec<TcpStream> = Vec::new();
    let evicted = |idle: &[TcpStream]| {
        idle.iter().any(|mut s| {
            s.set_nonblocking(true).unwrap();
            match s.read(&mut [0u8; 1]) {
                Ok(n) => n == 0,
                Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
            }
        })
    };
    let saturated = wait_until(DEADLINE, || {
        if evicted(&idle) {
            return true;
        }
        if idle.len() < 64 {
            if let Ok(s) = TcpStream::connect(addr) {
                idle.push(s);
            }
        }
        false
    });
    assert!(
        saturated,
        "no idle connection was closed: the hub holds {} descriptors of {limit} with {} \
         idle connections open: {}",
        hub.fds(),
        idle.len(),
        hub.log_text()
    );
    let answered = meta_round_trip(addr);
    // SAFETY: `old` is the limit read above.
    unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            &old,
            std::ptr::null_mut(),
        )
    };
    eprintln!(
        "front door: out of descriptors (limit {limit}); accept rested, {spent:?} of CPU in \
         2 s; answered again after descriptors freed, and with only idle connections \
         holding them in {answered:?}"
    );
}
