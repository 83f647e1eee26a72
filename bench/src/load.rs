//! Load tools: a fake worker that floods (or paces) realistic envelopes
//! into `/agent/<id>/events`, and panel clients on `/panel/ws` that
//! subscribe, count, check `hub_seq` order and time each delivery from the
//! send time the envelope carries in its data (`extras.bench_t`, ns since
//! the harness's clock base); or Shard clients on `/shard/ws` (hub only)
//! that attach as observers and count the one Shard event each envelope
//! becomes (`message_complete`, `tool_call`, `tool_result`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::server::{self, Env, Kind, Opts, Server};
use crate::wire::{self, Frame, RawWs};

pub const SESSION: &str = "bench";

/// Hub configuration for load runs: no worker pings (the fake worker never
/// answers them); otherwise defaults (5000-event / 32 MiB ring).
pub const HUB_LOAD_CONFIG: &str = r#"{ "limits": { "pingIntervalMs": 0 } }"#;

/// Event kinds a worker sends most during a run.
#[derive(Clone, Copy, Debug)]
pub enum EventKind {
    ModelResponse,
    ToolCalls,
    ToolResults,
}

/// One envelope shape, pre-rendered around the two numbers that change.
struct Template {
    prefix: Vec<u8>,
    mid: Vec<u8>,
    /// When set, the send time is written a second time after it (a
    /// call's `arguments` carry it for Shard clients, whose `tool_call`
    /// event keeps them, and its `extras` as every other shape).
    mid2: Option<Vec<u8>>,
    suffix: Vec<u8>,
}

/// A cycle of envelope shapes and sizes.
pub struct Mix {
    templates: Vec<Template>,
    pub name: &'static str,
}

/// About 0.5 KiB per envelope: the chatty part of a run (short model
/// messages, a call, a short result). The relay study used 512 B too.
pub const SMALL: &[(EventKind, usize)] = &[
    (EventKind::ModelResponse, 512),
    (EventKind::ToolCalls, 420),
    (EventKind::ToolResults, 600),
];

/// 0.2 KiB to 64 KiB, average about 6 KiB: a run with file reads and long
/// tool output.
pub const MIXED: &[(EventKind, usize)] = &[
    (EventKind::ModelResponse, 200),
    (EventKind::ToolCalls, 300),
    (EventKind::ToolResults, 1024),
    (EventKind::ModelResponse, 800),
    (EventKind::ToolCalls, 400),
    (EventKind::ToolResults, 4096),
    (EventKind::ModelResponse, 1500),
    (EventKind::ToolCalls, 250),
    (EventKind::ToolResults, 16384),
    (EventKind::ModelResponse, 600),
    (EventKind::ToolCalls, 350),
    (EventKind::ToolResults, 65536),
    (EventKind::ModelResponse, 2500),
    (EventKind::ToolCalls, 300),
    (EventKind::ToolResults, 2048),
    (EventKind::ModelResponse, 400),
];

/// 2 KiB tool results (slow-panel runs: fills a stalled panel's budget in
/// a couple of seconds at 2000 events/s).
pub const TWO_KIB: &[(EventKind, usize)] = &[(EventKind::ToolResults, 2048)];

/// About 1 KiB per envelope (transcript fill for the replay run).
pub const ONE_KIB: &[(EventKind, usize)] = &[
    (EventKind::ModelResponse, 1024),
    (EventKind::ToolCalls, 900),
    (EventKind::ToolResults, 1200),
];

fn filler(len: usize) -> String {
    const WORDS: &[&str] = &[
        "the",
        "worker",
        "reads",
        "src/main.rs",
        "and",
        "finds",
        "a",
        "bounded",
        "queue",
        "of",
        "events;",
        "cargo",
        "test",
        "passed",
        "in",
        "0.42s",
        "fn",
        "main()",
        "{",
        "}",
        "ok",
        "=>",
        "result",
        "value",
    ];
    let mut s = String::with_capacity(len + 16);
    let mut i = 0usize;
    let mut col = 0;
    while s.len() < len {
        if col > 64 {
            s.push_str("\\n");
            col = 0;
        } else {
            if col > 0 {
                s.push(' ');
            }
            let w = WORDS[(i * 7 + i / 3) % WORDS.len()];
            s.push_str(w);
            col += w.len() + 1;
            i += 1;
        }
    }
    // Never end inside an escape (nor with the half of one the trim left).
    while s.len() > len.max(2) && !s.ends_with(' ') {
        s.pop();
    }
    while s.ends_with('\\') {
        s.pop();
    }
    s
}

impl Template {
    fn new(kind: EventKind, size: usize) -> Template {
        let build = |fill: &str| -> (String, String, Option<String>, String) {
            let head = match kind {
                EventKind::ModelResponse => "model_response",
                EventKind::ToolCalls => "tool_calls",
                EventKind::ToolResults => "tool_results",
            };
            let prefix = format!(
                "{{\"type\":\"event\",\"event\":\"{head}\",\"session_id\":\"{SESSION}\",\
                 \"worker_id\":\"6f1c2a9e-bench-4e0b-9d3a-5a1f00c0ffee\",\"request_id\":\"req-000042\",\
                 \"run_id\":\"run-000042\",\"sequence\":"
            );
            let (mid, mid2, suffix) = match kind {
                EventKind::ModelResponse => (
                    format!(
                        ",\"data\":{{\"type\":\"model_response\",\"role\":\"assistant\",\"content\":[{{\"type\":\"text\",\
                         \"modality\":\"text\",\"text\":\"{fill}\"}}],\"cost\":{{\"input_tokens\":18234,\
                         \"output_tokens\":412}},\"extras\":{{\"bench_t\":"
                    ),
                    None,
                    "}}}".to_string(),
                ),
                EventKind::ToolCalls => (
                    format!(
                        ",\"data\":[{{\"id\":\"call-7\",\"name\":\"run_command\",\"arguments\":{{\"command\":\"{fill}\",\
                         \"bench_t\":"
                    ),
                    Some(
                        "},\"type\":\"serial_write\",\"security\":\"require_confirm\",\"extras\":{\"bench_t\":"
                            .to_string(),
                    ),
                    "}}]}".to_string(),
                ),
                EventKind::ToolResults => (
                    format!(
                        ",\"data\":[{{\"query\":{{\"id\":\"call-7\",\"name\":\"read_file\",\"arguments\":{{\"path\":\
                         \"src/hub.rs\"}},\"type\":\"read_only\",\"security\":\"trusted\"}},\"output\":{{\"type\":\
                         \"text\",\"modality\":\"text\",\"raw\":\"{fill}\"}},\"extras\":{{\"exit_code\":0,\"bench_t\":"
                    ),
                    None,
                    "}}]}".to_string(),
                ),
            };
            (prefix, mid, mid2, suffix)
        };
        let (p, m, m2, s) = build("");
        // Typical digits of the sequence and timestamp(s).
        let times = if m2.is_some() { 2 } else { 1 };
        let base =
            p.len() + m.len() + m2.as_ref().map_or(0, String::len) + s.len() + 6 + 11 * times;
        let fill = filler(size.saturating_sub(base));
        let (p, m, m2, s) = build(&fill);
        Template {
            prefix: p.into_bytes(),
            mid: m.into_bytes(),
            mid2: m2.map(String::into_bytes),
            suffix: s.into_bytes(),
        }
    }

    fn render(&self, seq: u64, t: u64, out: &mut Vec<u8>) {
        let mut num = itoa(seq);
        out.extend_from_slice(&self.prefix);
        out.extend_from_slice(num.as_bytes());
        out.extend_from_slice(&self.mid);
        num = itoa(t);
        out.extend_from_slice(num.as_bytes());
        if let Some(mid2) = &self.mid2 {
            out.extend_from_slice(mid2);
            out.extend_from_slice(num.as_bytes());
        }
        out.extend_from_slice(&self.suffix);
    }
}

fn itoa(v: u64) -> String {
    v.to_string()
}

impl Mix {
    pub fn new(name: &'static str, spec: &[(EventKind, usize)]) -> Mix {
        Mix {
            templates: spec.iter().map(|&(k, s)| Template::new(k, s)).collect(),
            name,
        }
    }

    /// Renders envelope `i` (sequence `i + 1`) with send time `t`.
    pub fn render(&self, i: usize, t: u64, out: &mut Vec<u8>) {
        self.templates[i % self.templates.len()].render(i as u64 + 1, t, out);
    }

    pub fn size(&self, i: usize) -> usize {
        let mut v = Vec::new();
        self.render(i, 12_345_678_901, &mut v);
        v.len()
    }

    pub fn mean_size(&self) -> f64 {
        let n = self.templates.len();
        (0..n).map(|i| self.size(i)).sum::<usize>() as f64 / n as f64
    }
}

/// One panel's view of a run.
#[derive(Default, Debug)]
pub struct PanelStats {
    pub events: u64,
    pub bytes: u64,
    pub order_errors: u64,
    pub latencies_ns: Vec<u32>,
    pub done_at: Option<Instant>,
    /// The server closed or reset the connection before the run ended.
    pub cut: bool,
}

/// Connects a panel and subscribes it (legacy, live from now on).
pub fn panel_connect(addr: SocketAddr, rcvbuf: Option<i32>) -> RawWs {
    let mut ws = RawWs::connect_with(addr, "/panel/ws", rcvbuf).expect("panel connect");
    let sub = format!("{{\"v\":1,\"type\":\"subscribe\",\"session\":\"{SESSION}\"}}");
    ws.send_text(sub.as_bytes()).unwrap();
    loop {
        match ws.next_frame().expect("panel read") {
            Frame::Message(_, m) if m.starts_with(b"{\"v\":1,\"type\":\"subscribed\"") => break,
            Frame::Message(_, m) if m.starts_with(b"{\"v\":1,\"type\":\"error\"") => {
                panic!("subscribe failed: {}", String::from_utf8_lossy(m))
            }
            Frame::Message(..) => {}
            Frame::Closed => panic!("panel closed before subscribed"),
        }
    }
    ws
}

const EVENT_PREFIX: &[u8] = b"{\"v\":1,\"type\":\"event\"";

/// Which front-end the clients of a run use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clients {
    Panel,
    /// Shard observers (the hub only).
    Shard,
    /// The first half panels, the rest Shard observers, all on the one
    /// session (the hub only).
    Mixed,
}

impl Clients {
    /// Whether client `i` of `n` is a Shard client.
    pub fn is_shard(self, i: usize, n: usize) -> bool {
        match self {
            Clients::Panel => false,
            Clients::Shard => true,
            Clients::Mixed => i >= n / 2,
        }
    }
}

/// Connects a Shard client, reads `hello`, and attaches it to the bench
/// session as an observer (its `sync` read).
pub fn shard_connect(addr: SocketAddr, rcvbuf: Option<i32>) -> RawWs {
    let mut ws = RawWs::connect_with(addr, "/shard/ws", rcvbuf).expect("shard connect");
    let attach = format!(
        "{{\"type\":\"agent.attach\",\"id\":\"a\",\"agent_id\":\"{SESSION}\",\"role\":\"observer\"}}"
    );
    ws.send_text(attach.as_bytes()).unwrap();
    loop {
        match ws.next_frame().expect("shard read") {
            Frame::Message(_, m) if m.starts_with(b"{\"type\":\"sync\"") => break,
            Frame::Message(_, m)
                if m.starts_with(b"{\"type\":\"response\"")
                    && find_bytes(m, b"\"success\":false") =>
            {
                panic!("attach failed: {}", String::from_utf8_lossy(m))
            }
            Frame::Message(..) => {}
            Frame::Closed => panic!("shard client closed before its sync"),
        }
    }
    ws
}

fn find_bytes(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The Shard events one bench envelope becomes (one each).
const SHARD_EVENTS: [&[u8]; 3] = [
    b"{\"type\":\"message_complete\"",
    b"{\"type\":\"tool_call\"",
    b"{\"type\":\"tool_result\"",
];

/// Reads until `expect` Shard events arrived, the socket closed or
/// `deadline` (no order check: Shard events do not carry the hub's
/// sequence). With `latency`, each `tool_call` event is timed from the
/// send time its call's `arguments` carry (`bench_t`): one sample per
/// three envelopes, the first `skip` events' not kept.
pub fn shard_read(
    mut ws: RawWs,
    expect: u64,
    counter: &AtomicU64,
    base: Instant,
    latency: bool,
    skip: u64,
    deadline: Instant,
) -> PanelStats {
    let _ = ws.stream.set_read_timeout(Some(Duration::from_millis(200)));
    let mut st = PanelStats::default();
    while st.events < expect {
        match ws.next_frame() {
            Ok(Frame::Message(wire::OP_TEXT, m)) => {
                if !SHARD_EVENTS.iter().any(|p| m.starts_with(p)) {
                    continue;
                }
                let now = Instant::now();
                if latency && st.events >= skip && m.starts_with(SHARD_EVENTS[1]) {
                    if let Some(t) = wire::number_after(m, b"\"bench_t\":") {
                        let at = (now - base).as_nanos() as u64;
                        st.latencies_ns
                            .push(at.saturating_sub(t).min(u32::MAX as u64) as u32);
                    }
                }
                st.events += 1;
                st.bytes += m.len() as u64;
                counter.store(st.events, Ordering::Release);
            }
            Ok(Frame::Message(..)) => {}
            Ok(Frame::Closed) => {
                st.cut = true;
                break;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if Instant::now() > deadline {
                    break;
                }
            }
            Err(_) => {
                st.cut = true;
                break;
            }
        }
    }
    if st.events >= expect {
        st.done_at = Some(Instant::now());
    }
    counter.store(u64::MAX, Ordering::Release);
    st
}

/// Reads until `expect` events arrived, the socket closed or `deadline`.
pub fn panel_read(
    mut ws: RawWs,
    expect: u64,
    counter: &AtomicU64,
    base: Instant,
    latency: bool,
    skip: u64,
    deadline: Instant,
) -> PanelStats {
    let _ = ws.stream.set_read_timeout(Some(Duration::from_millis(200)));
    let mut st = PanelStats::default();
    if latency {
        st.latencies_ns.reserve(expect as usize);
    }
    let mut last_seq = 0u64;
    while st.events < expect {
        match ws.next_frame() {
            Ok(Frame::Message(wire::OP_TEXT, m)) => {
                if !m.starts_with(EVENT_PREFIX) {
                    continue;
                }
                let now = Instant::now();
                let head = &m[..m.len().min(160)];
                let seq = wire::number_after(head, b"\"hub_seq\":").unwrap_or(0);
                if seq <= last_seq {
                    st.order_errors += 1;
                }
                last_seq = seq;
                if latency && seq > skip {
                    if let Some(t) = wire::number_after(m, b"\"bench_t\":") {
                        let at = (now - base).as_nanos() as u64;
                        st.latencies_ns
                            .push(at.saturating_sub(t).min(u32::MAX as u64) as u32);
                    }
                }
                st.events += 1;
                st.bytes += m.len() as u64;
                counter.store(st.events, Ordering::Release);
            }
            Ok(Frame::Message(..)) => {}
            Ok(Frame::Closed) => {
                st.cut = true;
                break;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if Instant::now() > deadline {
                    break;
                }
            }
            Err(_) => {
                st.cut = true;
                break;
            }
        }
    }
    if st.events >= expect {
        st.done_at = Some(Instant::now());
    }
    // A finished or cut panel must not hold the worker's window.
    counter.store(u64::MAX, Ordering::Release);
    st
}

/// How the fake worker sends.
pub struct Send {
    pub events: usize,
    /// None: flood with the in-flight window; Some: one event per period.
    pub period: Option<Duration>,
    /// Envelope bytes allowed in flight beyond the slowest panel (flood
    /// only). Keeps a flood from outrunning the 4 MiB panel budget, so the
    /// run measures throughput, not drops.
    pub window_bytes: usize,
}

/// Sends `plan.events` envelopes; returns (first write, last write).
pub fn worker_send(
    ws: &mut RawWs,
    mix: &Mix,
    plan: &Send,
    counters: &[Arc<AtomicU64>],
    base: Instant,
    deadline: Instant,
    stop: &AtomicBool,
) -> (Instant, Instant) {
    use std::io::Write;
    let sizes: Vec<usize> = (0..mix.templates.len()).map(|i| mix.size(i)).collect();
    let mut cum = Vec::with_capacity(plan.events + 1);
    cum.push(0u64);
    for i in 0..plan.events {
        cum.push(cum[i] + sizes[i % sizes.len()] as u64);
    }
    let min_received = || {
        counters
            .iter()
            .map(|c| c.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX)
            .min(plan.events as u64) as usize
    };
    let mut payload = Vec::with_capacity(128 * 1024);
    let mut out = Vec::with_capacity(256 * 1024);
    let first = Instant::now();
    let mut last = first;
    let mut slowest = 0usize;
    let mut i = 0usize;
    while i < plan.events {
        if stop.load(Ordering::Relaxed) || Instant::now() > deadline {
            break;
        }
        match plan.period {
            Some(period) => {
                let due = first + period * i as u32;
                loop {
                    let now = Instant::now();
                    if now >= due {
                        break;
                    }
                    let left = due - now;
                    if left > Duration::from_micros(200) {
                        std::thread::sleep(left - Duration::from_micros(100));
                    } else {
                        std::hint::spin_loop();
                    }
                }
                payload.clear();
                out.clear();
                let t = (Instant::now() - base).as_nanos() as u64;
                mix.render(i, t, &mut payload);
                wire::push_masked_frame(&mut out, &payload);
                if ws.stream.write_all(&out).is_err() {
                    break;
                }
                last = Instant::now();
                i += 1;
            }
            None => {
                out.clear();
                let mut batch = 0;
                while i < plan.events && batch < 32 && out.len() < 64 * 1024 {
                    if cum[i + 1] - cum[slowest] > plan.window_bytes as u64 {
                        slowest = min_received();
                        if cum[i + 1] - cum[slowest] > plan.window_bytes as u64 {
                            break;
                        }
                    }
                    payload.clear();
                    let t = (Instant::now() - base).as_nanos() as u64;
                    mix.render(i, t, &mut payload);
                    wire::push_masked_frame(&mut out, &payload);
                    i += 1;
                    batch += 1;
                }
                if out.is_empty() {
                    std::thread::sleep(Duration::from_micros(20));
                    slowest = min_received();
                    continue;
                }
                if ws.stream.write_all(&out).is_err() {
                    break;
                }
                last = Instant::now();
            }
        }
    }
    (first, last)
}

/// Result of one fan-out or latency run.
#[derive(Debug, Default)]
pub struct RunResult {
    pub deliveries: u64,
    pub expected: u64,
    pub secs: f64,
    pub server_cpu: Duration,
    pub load_cpu: Duration,
    pub order_errors: u64,
    pub cut_panels: usize,
    pub bytes: u64,
    pub latencies_ns: Vec<u32>,
    /// The Shard clients' samples of a mixed run (`latencies_ns` then
    /// holds the panels' alone).
    pub shard_latencies_ns: Vec<u32>,
    /// Slow-panel runs: when the slow panel was cut, after the first send
    /// (from the server's own log line), and what the server logged.
    pub slow_cut_after: Option<Duration>,
    pub slow_cut_line: Option<String>,
    pub slow_received: u64,
}

pub struct RunSpec<'a> {
    pub kind: Kind,
    /// Panel or Shard clients (Shard: the hub only).
    pub clients: Clients,
    pub panels: usize,
    pub mix: &'a Mix,
    pub send: Send,
    pub latency: bool,
    /// Latency samples of the first `skip` events are not kept (warm-up).
    pub skip: u64,
    /// Add one panel that never reads (slow-panel isolation).
    pub slow_panel: bool,
    pub limit: Duration,
}

pub fn run(env: &Env, spec: &RunSpec) -> RunResult {
    let server = Server::start(
        env,
        spec.kind,
        &Opts {
            hub_config: Some(HUB_LOAD_CONFIG.into()),
            ..Opts::default()
        },
    );
    let r = run_on(&server, spec);
    server.stop();
    r
}

pub fn run_on(server: &Server, spec: &RunSpec) -> RunResult {
    let token = server.create_session(SESSION);
    let base = Instant::now();
    let deadline = base + spec.limit;
    let n = spec.panels;
    let panels: Vec<RawWs> = (0..n)
        .map(|i| {
            if spec.clients.is_shard(i, n) {
                shard_connect(server.addr, None)
            } else {
                panel_connect(server.addr, None)
            }
        })
        .collect();
    // The stalled panel: a small receive buffer, and nobody reads it.
    let slow = spec
        .slow_panel
        .then(|| panel_connect(server.addr, Some(4096)));
    let mut worker =
        RawWs::connect(server.addr, &server.worker_path(SESSION, &token)).expect("worker connect");
    let expect = spec.send.events as u64;
    let counters: Vec<Arc<AtomicU64>> = (0..spec.panels)
        .map(|_| Arc::new(AtomicU64::new(0)))
        .collect();
    let stop = AtomicBool::new(false);
    let profiler = attach_profiler(server.pid(), server.kind);
    let cpu0 = server.cpu();
    let load0 = server::self_cpu();
    let (stats, (first, _last)) = std::thread::scope(|scope| {
        let handles: Vec<_> = panels
            .into_iter()
            .zip(counters.iter())
            .enumerate()
            .map(|(i, (ws, c))| {
                let c = c.clone();
                let (latency, skip) = (spec.latency, spec.skip);
                let shard = spec.clients.is_shard(i, n);
                scope.spawn(move || {
                    if shard {
                        shard_read(ws, expect, &c, base, latency, skip, deadline)
                    } else {
                        panel_read(ws, expect, &c, base, latency, skip, deadline)
                    }
                })
            })
            .collect();
        let sent = worker_send(
            &mut worker,
            spec.mix,
            &spec.send,
            &counters,
            base,
            deadline,
            &stop,
        );
        let stats: Vec<PanelStats> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        (stats, sent)
    });
    let cpu1 = server.cpu();
    let load1 = server::self_cpu();
    detach_profiler(profiler);
    let mut r = RunResult {
        expected: expect * spec.panels as u64,
        server_cpu: cpu1 - cpu0,
        load_cpu: load1 - load0,
        ..RunResult::default()
    };
    let mut end = first;
    let mixed = spec.clients == Clients::Mixed;
    for (i, s) in stats.into_iter().enumerate() {
        r.deliveries += s.events;
        r.bytes += s.bytes;
        r.order_errors += s.order_errors;
        r.cut_panels += usize::from(s.cut);
        if let Some(at) = s.done_at {
            end = end.max(at);
        } else {
            end = end.max(Instant::now());
        }
        if mixed && spec.clients.is_shard(i, n) {
            r.shard_latencies_ns.extend(s.latencies_ns);
        } else {
            r.latencies_ns.extend(s.latencies_ns);
        }
    }
    r.secs = (end - first).as_secs_f64();
    if r.deliveries < r.expected {
        // Say why: the server's last words.
        let lines = server.log_lines("");
        for (_, line) in lines.iter().rev().take(5).rev() {
            eprintln!("[bench] server said: {}", line.trim());
        }
    }
    if let Some(mut slow) = slow {
        // Was it cut? Drain what the kernel holds, then expect EOF/RST.
        let _ = slow
            .stream
            .set_read_timeout(Some(Duration::from_millis(500)));
        let mut received = 0u64;
        let drain_end = Instant::now() + Duration::from_secs(10);
        let mut closed = false;
        while Instant::now() < drain_end {
            match slow.next_frame() {
                Ok(Frame::Message(_, m)) => {
                    if m.starts_with(EVENT_PREFIX) {
                        received += 1;
                    }
                }
                Ok(Frame::Closed) => {
                    closed = true;
                    break;
                }
                Err(_) => break,
            }
        }
        r.slow_received = received;
        let needle = match server.kind {
            Kind::Hub => "outbound budget exceeded",
            Kind::Node => "budget exceeded",
        };
        if closed {
            if let Some((at, line)) = server.log_lines(needle).into_iter().next() {
                r.slow_cut_after = Some(at.saturating_duration_since(first));
                r.slow_cut_line = Some(line);
            } else {
                r.slow_cut_after = Some(Duration::ZERO);
            }
        }
    }
    drop(worker);
    r
}

/// Nearest-rank quantile of sorted values.
pub fn quantile(sorted: &[u32], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[idx] as f64
}

/// `BENCH_ATTACH='perf record -g -p {pid} -o /tmp/{kind}.data'` (or `strace -c
/// -f -p {pid}`...): started against the server once the panels are
/// subscribed, interrupted (SIGINT) when the run's deliveries are done.
fn attach_profiler(pid: u32, kind: Kind) -> Option<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let cmd = std::env::var("BENCH_ATTACH").ok()?;
    let child = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec {}",
            cmd.replace("{pid}", &pid.to_string())
                .replace("{kind}", kind.label())
        ))
        .process_group(0)
        .spawn()
        .ok()?;
    std::thread::sleep(Duration::from_millis(500));
    Some(child)
}

fn detach_profiler(child: Option<std::process::Child>) {
    if let Some(mut child) = child {
        // SAFETY: kill(2) on the process group of a child we started.
        unsafe {
            libc::kill(-(child.id() as i32), libc::SIGINT);
        }
        let _ = child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_envelope_is_json_of_about_its_size() {
        for (name, spec) in [
            ("small", SMALL),
            ("mixed", MIXED),
            ("2k", TWO_KIB),
            ("1k", ONE_KIB),
        ] {
            let mix = Mix::new(name, spec);
            for (i, (_, size)) in spec.iter().enumerate() {
                let mut out = Vec::new();
                mix.render(i, 12_345_678_901, &mut out);
                let text = String::from_utf8(out).unwrap();
                let v: serde_json::Value = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("{name} {i}: {e}: {text}"));
                assert_eq!(v["type"], "event");
                assert!(text.contains("\"bench_t\":12345678901"), "{text}");
                // (Below about 400 B the skeleton alone is larger.)
                if *size >= 420 {
                    assert!(
                        text.len().abs_diff(*size) < 64,
                        "{name} {i}: {} for {size}",
                        text.len()
                    );
                }
            }
        }
    }
}
