//! Paged replay of a ~40 MiB transcript: fill one session through the
//! worker socket, then one panel pages through all of it (`subscribe` with
//! `paged: true`) while a sampler thread records the hub's VmRSS.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::load::{self, Mix, Send, SESSION};
use crate::server::{self, Env, Kind, Opts, Server};
use crate::wire::{self, Frame, RawWs};

/// The ring must hold the whole fill: 64 MiB and enough entries.
pub const REPLAY_CONFIG: &str = r#"{ "limits": { "pingIntervalMs": 0,
  "transcriptBytes": 67108864, "transcriptEvents": 100000 } }"#;

#[derive(Debug, Default, Clone)]
pub struct Pass {
    pub secs: f64,
    pub pages: u64,
    pub entries: u64,
    pub bytes: u64,
    pub rss_before_kib: u64,
    pub rss_peak_kib: u64,
    pub largest_frame: u64,
}

#[derive(Debug, Default)]
pub struct ReplayResult {
    pub fill_secs: f64,
    pub rss_empty_kib: u64,
    pub cold: Pass,
    pub warm: Pass,
}

pub fn run(env: &Env, events: usize) -> ReplayResult {
    let s = Server::start(
        env,
        Kind::Hub,
        &Opts {
            hub_config: Some(REPLAY_CONFIG.into()),
            ..Opts::default()
        },
    );
    let token = s.create_session(SESSION);
    let mut r = ReplayResult {
        rss_empty_kib: s.rss_kib(),
        ..ReplayResult::default()
    };
    let mix = Mix::new("1k", load::ONE_KIB);
    let mut worker = RawWs::connect(s.addr, &s.worker_path(SESSION, &token)).unwrap();
    let base = Instant::now();
    let stop = AtomicBool::new(false);
    let plan = Send {
        events,
        period: None,
        window_bytes: usize::MAX,
    };
    let t = Instant::now();
    load::worker_send(
        &mut worker,
        &mix,
        &plan,
        &[],
        base,
        base + Duration::from_secs(120),
        &stop,
    );
    // Ingested once `latest` reaches the count.
    let end = Instant::now() + Duration::from_secs(120);
    while Instant::now() < end {
        let path = format!(
            "/api/sessions/{SESSION}/events?since={}&limit=1",
            events - 1
        );
        if let Ok((200, body)) = wire::http(s.addr, "GET", &path, "") {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            if v["latest"].as_u64() == Some(events as u64) {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    r.fill_secs = t.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_secs(1));
    r.cold = pass(&s);
    std::thread::sleep(Duration::from_millis(500));
    r.warm = pass(&s);
    drop(worker);
    s.stop();
    r
}

fn pass(s: &Server) -> Pass {
    let pid = s.pid();
    let mut p = Pass {
        rss_before_kib: s.rss_kib(),
        ..Pass::default()
    };
    let peak = Arc::new(AtomicU64::new(p.rss_before_kib));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (peak.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                let v = server::status_field(pid, "VmRSS:").unwrap_or(0);
                peak.fetch_max(v, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let mut ws = RawWs::connect(s.addr, "/panel/ws").unwrap();
    let sub = format!(
        "{{\"v\":1,\"type\":\"subscribe\",\"session\":\"{SESSION}\",\"paged\":true,\"request_id\":\"replay\"}}"
    );
    let t = Instant::now();
    ws.send_text(sub.as_bytes()).unwrap();
    let deadline = t + Duration::from_secs(120);
    while Instant::now() < deadline {
        match ws.next_frame() {
            Ok(Frame::Message(_, m)) => {
                if !m.starts_with(b"{\"v\":1,\"type\":\"subscribed\"") {
                    continue;
                }
                p.largest_frame = p.largest_frame.max(m.len() as u64);
                if wire::find(m, b"\"replay_more\":false").is_some() {
                    break;
                }
                p.pages += 1;
                p.bytes += m.len() as u64;
                p.entries += memchr::memmem::find_iter(m, b"\"hub_sequence\":").count() as u64;
            }
            Ok(Frame::Closed) | Err(_) => break,
        }
    }
    p.secs = t.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    p.rss_peak_kib = peak.load(Ordering::Relaxed);
    p
}
