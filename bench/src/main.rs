//! `bench`: simplex-hub (A) against a Node.js `ws` relay (B), measured in one
//! run, alternating A and B, with medians, spread and ratios.
//!
//!     cargo run --release --manifest-path bench/Cargo.toml -- <scenario>|all [--reps N] [--quick]
//!
//! Scenarios: fanout, shard, latency, slow, memory, sessions, startup,
//! size, splitter, replay, sqlite. Build the hub (`cargo build --release`) and
//! `npm install` in `bench/baselines/` first; `scripts/bench.sh` does all
//! of it. Method: docs/benchmarks.md.

#![allow(
    clippy::disallowed_methods,
    reason = "the harness's sleeps are part of its method (settle periods before a reading, \
              measurement windows, the load generators' pacing, deadline polls of servers \
              it does not control); changing one changes the recorded figures"
)]

mod load;
mod micro;
mod replay;
mod report;
mod server;
mod sys;
mod wire;

use std::time::Duration;

use load::{Mix, RunSpec, Send};
use report::{median, Better, Report, Target};
use server::{Env, Kind};

#[global_allocator]
static GLOBAL: micro::Counting = micro::Counting;

const MIB: f64 = 1024.0 * 1024.0;

struct Args {
    scenarios: Vec<String>,
    reps: usize,
    quick: bool,
    json: Option<String>,
}

fn parse_args() -> Args {
    let mut a = Args {
        scenarios: vec![],
        reps: 3,
        quick: false,
        json: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--reps" => a.reps = it.next().and_then(|v| v.parse().ok()).unwrap_or(3).max(1),
            "--quick" => a.quick = true,
            "--json" => a.json = it.next(),
            "-h" | "--help" => {
                println!(
                    "usage: bench <fanout|fanout1|fanout10|fanout100|shard|shardlat|latency|slow|memory|http|sessions|startup|size|splitter|replay|sqlite|all>... \
                     [--reps N] [--quick] [--json FILE]"
                );
                std::process::exit(0);
            }
            other => a.scenarios.push(other.to_string()),
        }
    }
    if a.scenarios.is_empty() || a.scenarios.iter().any(|s| s == "all") {
        a.scenarios = [
            "fanout", "shard", "shardlat", "latency", "slow", "memory", "sessions", "startup",
            "size", "splitter", "replay", "sqlite",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
    }
    if a.quick {
        a.reps = a.reps.min(1);
    }
    a
}

/// Compiler processes running on this machine now (other builds would
/// steal the measured cores).
fn compilers() -> Vec<String> {
    let mut out = vec![];
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            if let Ok(comm) = std::fs::read_to_string(e.path().join("comm")) {
                let comm = comm.trim();
                if matches!(
                    comm,
                    "rustc" | "cc1" | "cc1plus" | "ld" | "ld.lld" | "collect2"
                ) {
                    out.push(comm.to_string());
                }
            }
        }
    }
    out
}

/// Share of all CPUs busy over `d` (from /proc/stat), in percent.
fn cpu_busy(d: Duration) -> f64 {
    let read = || -> (u64, u64) {
        let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let f: Vec<u64> = text
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .skip(1)
            .filter_map(|v| v.parse().ok())
            .collect();
        let total: u64 = f.iter().take(8).sum();
        let idle = f.get(3).copied().unwrap_or(0) + f.get(4).copied().unwrap_or(0);
        (total, idle)
    };
    let (t0, i0) = read();
    std::thread::sleep(d);
    let (t1, i1) = read();
    let dt = (t1 - t0).max(1) as f64;
    100.0 * (1.0 - (i1 - i0) as f64 / dt)
}

/// Never measure while something else runs (other builds, tests,
/// fuzzers would steal the measured cores): waits, up to
/// `BENCH_QUIET_WAIT` seconds (default 900), until no compiler runs and
/// the machine is under 10 % busy; records what it saw.
fn wait_quiet(rep: &mut Report, scenario: &str) {
    let limit: u64 = std::env::var("BENCH_QUIET_WAIT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(900);
    let end = std::time::Instant::now() + Duration::from_secs(limit);
    let mut told = false;
    loop {
        let compiling = compilers();
        let busy = cpu_busy(Duration::from_millis(1000));
        if (compiling.is_empty() && busy < 10.0) || std::time::Instant::now() > end {
            if !compiling.is_empty() || busy >= 10.0 {
                let msg = format!(
                    "{scenario}: measured on a busy machine ({busy:.0} % CPU busy before the start, compilers: {compiling:?})"
                );
                progress(&msg);
                rep.notes.push(msg);
            }
            return;
        }
        if !told {
            progress(&format!(
                "waiting for a quiet machine ({busy:.0} % busy, compilers: {compiling:?})"
            ));
            told = true;
        }
        std::thread::sleep(Duration::from_secs(4));
    }
}

fn progress(msg: &str) {
    eprintln!("[bench] {msg}");
}

fn target(text: &str, check: fn(f64, Option<f64>) -> bool) -> Option<Target> {
    Some(Target {
        text: text.into(),
        check,
    })
}

/// Runs `f` for A and B in alternation, `reps` times.
fn ab<T>(reps: usize, mut f: impl FnMut(Kind, usize) -> T) -> (Vec<T>, Vec<T>) {
    let (mut a, mut b) = (vec![], vec![]);
    for rep in 0..reps {
        a.push(f(Kind::Hub, rep));
        b.push(f(Kind::Node, rep));
    }
    (a, b)
}

fn main() {
    let args = parse_args();
    let env = Env::detect();
    assert!(
        env.hub_bin.exists(),
        "{} is missing: run `cargo build --release` first",
        env.hub_bin.display()
    );
    let mut rep = Report::default();
    rep.notes.push(format!(
        "repetitions: {}; servers pinned to CPU {:?}, load generator to CPU 1 (None: not pinned)",
        args.reps, env.server_cpu
    ));
    let started = std::time::Instant::now();
    for s in args.scenarios.clone() {
        wait_quiet(&mut rep, &s);
        let t = std::time::Instant::now();
        match s.as_str() {
            "fanout" => fanout(&env, &args, &mut rep, None),
            "fanout1" => fanout(&env, &args, &mut rep, Some(1)),
            "fanout10" => fanout(&env, &args, &mut rep, Some(10)),
            "fanout100" => fanout(&env, &args, &mut rep, Some(100)),
            "shard" => shard(&env, &args, &mut rep),
            "shardlat" => shard_latency(&env, &args, &mut rep),
            "latency" => latency(&env, &args, &mut rep),
            "slow" => slow(&env, &args, &mut rep),
            "memory" => memory(&env, &args, &mut rep),
            "http" => {
                let n = if args.quick { 200 } else { 1000 };
                http_connections(&env, &args, &mut rep, n);
                flush_notes(&mut rep);
            }
            "sessions" => sessions(&env, &args, &mut rep),
            "startup" => startup(&env, &args, &mut rep),
            "size" => size(&env, &mut rep),
            "splitter" => splitter(&args, &mut rep),
            "replay" => replay_scenario(&env, &args, &mut rep),
            "sqlite" => sqlite(&env, &args, &mut rep),
            other => {
                eprintln!("unknown scenario {other}");
                std::process::exit(2);
            }
        }
        progress(&format!("{s} done in {:.1} s", t.elapsed().as_secs_f64()));
    }
    rep.notes.push(format!(
        "total run time {:.0} s",
        started.elapsed().as_secs_f64()
    ));
    println!("{}", rep.markdown());
    if let Some(path) = args.json {
        std::fs::write(path, rep.json()).expect("write json");
    }
}

fn fanout(env: &Env, args: &Args, rep: &mut Report, only: Option<usize>) {
    let small = Mix::new("small", load::SMALL);
    let mixed = Mix::new("mixed", load::MIXED);
    rep.notes.push(format!(
        "fan-out envelopes: `small` mean {:.0} B (model_response / tool_calls / tool_results), `mixed` mean {:.0} B (0.2–64 KiB); window 1 MiB in flight beyond the slowest panel",
        small.mean_size(),
        mixed.mean_size()
    ));
    let scale = if args.quick { 10 } else { 1 };
    let cases: [(usize, usize, &Mix); 4] = [
        (1, 60_000 / scale, &small),
        (10, 30_000 / scale, &small),
        (100, 4_000 / scale, &small),
        (10, 4_000 / scale, &mixed),
    ];
    for (panels, events, mix) in cases {
        if only.is_some_and(|n| n != panels || mix.name != "small") {
            continue;
        }
        progress(&format!(
            "fanout: {panels} panels, {events} {} events",
            mix.name
        ));
        let (a, b) = ab(args.reps, |kind, _| {
            let r = load::run(
                env,
                &RunSpec {
                    kind,
                    clients: load::Clients::Panel,
                    panels,
                    mix,
                    send: Send {
                        events,
                        period: None,
                        window_bytes: 1 << 20,
                    },
                    latency: false,
                    skip: 0,
                    slow_panel: false,
                    limit: Duration::from_secs(60),
                },
            );
            if r.order_errors > 0 || r.cut_panels > 0 || r.deliveries < r.expected {
                rep_note_later(format!(
                    "fanout {kind:?} {panels}×{}: {} of {} delivered, {} order errors, {} panels cut",
                    mix.name, r.deliveries, r.expected, r.order_errors, r.cut_panels
                ));
            }
            r
        });
        let rate = |v: &[load::RunResult]| -> Vec<f64> {
            v.iter().map(|r| r.deliveries as f64 / r.secs).collect()
        };
        let cpu = |v: &[load::RunResult]| -> Vec<f64> {
            v.iter()
                .map(|r| r.server_cpu.as_secs_f64() * 1e6 / r.deliveries.max(1) as f64)
                .collect()
        };
        let load_share = |v: &[load::RunResult]| -> Vec<f64> {
            v.iter()
                .map(|r| r.load_cpu.as_secs_f64() / r.secs * 100.0)
                .collect()
        };
        let server_share = |v: &[load::RunResult]| -> Vec<f64> {
            v.iter()
                .map(|r| r.server_cpu.as_secs_f64() / r.secs * 100.0)
                .collect()
        };
        let mbs = |v: &[load::RunResult]| -> Vec<f64> {
            v.iter().map(|r| r.bytes as f64 / r.secs / 1e6).collect()
        };
        let group = format!(
            "fan-out {panels} panel{} ({})",
            if panels > 1 { "s" } else { "" },
            mix.name
        );
        let (rate_target, cpu_target) = if panels == 10 && mix.name == "small" {
            (
                target("≥ 10× node and ≥ 0.7 M/s", |h, n| {
                    h >= 0.7e6 && n.is_none_or(|n| h >= 10.0 * n)
                }),
                target("≤ 0.1× node", |h, n| n.is_none_or(|n| h <= 0.1 * n)),
            )
        } else {
            (None, None)
        };
        rep.add(
            &group,
            "deliveries/s",
            "1/s",
            rate(&a),
            rate(&b),
            Better::Higher,
            rate_target,
            "",
        );
        rep.add(
            &group,
            "server CPU per delivery",
            "µs",
            cpu(&a),
            cpu(&b),
            Better::Lower,
            cpu_target,
            "",
        );
        rep.add(
            &group,
            "server CPU busy",
            "%",
            server_share(&a),
            server_share(&b),
            Better::None,
            None,
            "",
        );
        rep.add(
            &group,
            "load-generator CPU busy",
            "%",
            load_share(&a),
            load_share(&b),
            Better::None,
            None,
            "",
        );
        if mix.name != "small" {
            rep.add(
                &group,
                "delivered payload",
                "MB/s",
                mbs(&a),
                mbs(&b),
                Better::Higher,
                None,
                "",
            );
        }
    }
    flush_notes(rep);
}

/// Shard fan-out against the panel path on the same hub, alternated per
/// repetition: 10 clients, the `small` mix; and the RSS of idle Shard
/// connections. (The B column is the panel path here, not Node.)
fn shard(env: &Env, args: &Args, rep: &mut Report) {
    let small = Mix::new("small", load::SMALL);
    let events = if args.quick { 3_000 } else { 30_000 };
    progress(&format!(
        "shard: 10 Shard clients against 10 panels, {events} small events"
    ));
    let (mut shard, mut panel, mut mixed) = (vec![], vec![], vec![]);
    for _ in 0..args.reps {
        for (clients, out) in [
            (load::Clients::Shard, &mut shard),
            (load::Clients::Panel, &mut panel),
            (load::Clients::Mixed, &mut mixed),
        ] {
            let r = load::run(
                env,
                &RunSpec {
                    kind: Kind::Hub,
                    clients,
                    panels: 10,
                    mix: &small,
                    send: Send {
                        events,
                        period: None,
                        window_bytes: 1 << 20,
                    },
                    latency: false,
                    skip: 0,
                    slow_panel: false,
                    limit: Duration::from_secs(60),
                },
            );
            if r.cut_panels > 0 || r.deliveries < r.expected {
                rep_note_later(format!(
                    "shard fan-out {clients:?}: {} of {} delivered, {} clients cut",
                    r.deliveries, r.expected, r.cut_panels
                ));
            }
            out.push(r);
        }
    }
    let rate = |v: &[load::RunResult]| -> Vec<f64> {
        v.iter().map(|r| r.deliveries as f64 / r.secs).collect()
    };
    let cpu = |v: &[load::RunResult]| -> Vec<f64> {
        v.iter()
            .map(|r| r.server_cpu.as_secs_f64() * 1e6 / r.deliveries.max(1) as f64)
            .collect()
    };
    let group = "Shard fan-out 10 clients (small; B: 10 panels, same run)";
    rep.add(
        group,
        "deliveries/s",
        "1/s",
        rate(&shard),
        rate(&panel),
        Better::Higher,
        target("≥ 0.8× the panel path", |h, n| {
            n.is_none_or(|n| h >= 0.8 * n)
        }),
        "",
    );
    rep.add(
        group,
        "server CPU per delivery",
        "µs",
        cpu(&shard),
        cpu(&panel),
        Better::Lower,
        target("≤ 1.25× the panel path", |h, n| {
            n.is_none_or(|n| h <= 1.25 * n)
        }),
        "",
    );
    let group = "fan-out 5 panels + 5 Shard clients on one session (small; B: 10 panels, same run)";
    rep.add(
        group,
        "deliveries/s",
        "1/s",
        rate(&mixed),
        rate(&panel),
        Better::Higher,
        None,
        "",
    );
    rep.add(
        group,
        "server CPU per delivery",
        "µs",
        cpu(&mixed),
        cpu(&panel),
        Better::Lower,
        None,
        "",
    );
    let n = if args.quick { 200 } else { 1000 };
    progress(&format!(
        "shard: {n} idle Shard connections against {n} panels"
    ));
    let (mut idle_shard, mut idle_panel) = (vec![], vec![]);
    for _ in 0..args.reps {
        idle_shard.push(sys::sockets(env, Kind::Hub, n, sys::Socket::Shard));
        idle_panel.push(sys::sockets(env, Kind::Hub, n, sys::Socket::Panel));
    }
    let per = |v: &[sys::PanelsResult]| {
        v.iter()
            .map(|r| (r.during.rss_kib as f64 - r.before.rss_kib as f64) / r.opened.max(1) as f64)
            .collect::<Vec<_>>()
    };
    let thr = |v: &[sys::PanelsResult]| {
        v.iter()
            .map(|r| r.during.threads as f64)
            .collect::<Vec<_>>()
    };
    let g = format!("{n} idle Shard connections (B: {n} panel sockets)");
    rep.add(
        &g,
        "RSS per connection",
        "KiB",
        per(&idle_shard),
        per(&idle_panel),
        Better::Lower,
        None,
        "attached as observers",
    );
    rep.add(
        &g,
        "threads with connections open",
        "",
        thr(&idle_shard),
        thr(&idle_panel),
        Better::None,
        None,
        "",
    );
    flush_notes(rep);
}

thread_local! {
    static LATER: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn rep_note_later(s: String) {
    eprintln!("[bench] note: {s}");
    LATER.with(|l| l.borrow_mut().push(s));
}

fn flush_notes(rep: &mut Report) {
    LATER.with(|l| rep.notes.append(&mut l.borrow_mut()));
}

fn lat_quantiles(r: &load::RunResult) -> (f64, f64, f64) {
    let mut v = r.latencies_ns.clone();
    v.sort_unstable();
    (
        load::quantile(&v, 0.5) / 1e3,
        load::quantile(&v, 0.99) / 1e3,
        load::quantile(&v, 0.999) / 1e3,
    )
}

fn paced(
    kind: Kind,
    env: &Env,
    panels: usize,
    mix: &Mix,
    secs: u64,
    slow: bool,
    skip: u64,
) -> load::RunResult {
    paced_with(
        kind,
        load::Clients::Panel,
        env,
        panels,
        mix,
        secs,
        slow,
        skip,
    )
}

#[allow(clippy::too_many_arguments)]
fn paced_with(
    kind: Kind,
    clients: load::Clients,
    env: &Env,
    panels: usize,
    mix: &Mix,
    secs: u64,
    slow: bool,
    skip: u64,
) -> load::RunResult {
    let rate = 2000u64;
    load::run(
        env,
        &RunSpec {
            kind,
            clients,
            panels,
            mix,
            send: Send {
                events: (rate * secs) as usize,
                period: Some(Duration::from_nanos(1_000_000_000 / rate)),
                window_bytes: usize::MAX,
            },
            latency: true,
            skip,
            slow_panel: slow,
            limit: Duration::from_secs(secs + 20),
        },
    )
}

fn latency(env: &Env, args: &Args, rep: &mut Report) {
    let small = Mix::new("small", load::SMALL);
    let secs = if args.quick { 2 } else { 5 };
    progress(&format!(
        "latency: 2000 events/s × 10 panels, 1 s warm-up + {secs} s"
    ));
    let (a, b) = ab(args.reps, |kind, _| {
        let r = paced(kind, env, 10, &small, secs + 1, false, 2000);
        if r.deliveries < r.expected || r.order_errors > 0 {
            rep_note_later(format!(
                "latency {kind:?}: {} of {} delivered, {} order errors",
                r.deliveries, r.expected, r.order_errors
            ));
        }
        r
    });
    let q = |v: &[load::RunResult], i: usize| -> Vec<f64> {
        v.iter()
            .map(|r| {
                let (p50, p99, p999) = lat_quantiles(r);
                [p50, p99, p999][i]
            })
            .collect()
    };
    let cpu = |v: &[load::RunResult]| -> Vec<f64> {
        v.iter()
            .map(|r| r.server_cpu.as_secs_f64() / r.secs * 100.0)
            .collect()
    };
    let g = "latency 2000 ev/s × 10 panels (small, after 1 s warm-up)";
    rep.add(g, "p50", "µs", q(&a, 0), q(&b, 0), Better::Lower, None, "");
    rep.add(
        g,
        "p99",
        "µs",
        q(&a, 1),
        q(&b, 1),
        Better::Lower,
        target("< 500 µs", |h, _| h < 500.0),
        "",
    );
    rep.add(
        g,
        "p99.9",
        "µs",
        q(&a, 2),
        q(&b, 2),
        Better::Lower,
        None,
        "",
    );
    rep.add(
        g,
        "server CPU busy",
        "%",
        cpu(&a),
        cpu(&b),
        Better::Lower,
        None,
        "",
    );
    flush_notes(rep);
}

/// Latency at 2000 events/s for Shard clients (the hub only): 10 Shard
/// observers, and 5 panels + 5 Shard observers on the one session, each
/// run alternated with 10 panels on the same binary (the B column). A
/// Shard client's samples are its `tool_call` events (one envelope in
/// three carries its send time where the Shard event keeps it).
fn shard_latency(env: &Env, args: &Args, rep: &mut Report) {
    let small = Mix::new("small", load::SMALL);
    let secs = if args.quick { 2 } else { 5 };
    progress(&format!(
        "shardlat: 2000 events/s × 10 Shard clients, × 5 panels + 5 Shard clients, × 10 panels; 1 s warm-up + {secs} s"
    ));
    let (mut shard, mut mixed, mut panel) = (vec![], vec![], vec![]);
    for _ in 0..args.reps {
        for (clients, out) in [
            (load::Clients::Shard, &mut shard),
            (load::Clients::Mixed, &mut mixed),
            (load::Clients::Panel, &mut panel),
        ] {
            let r = paced_with(Kind::Hub, clients, env, 10, &small, secs + 1, false, 2000);
            if r.deliveries < r.expected || r.order_errors > 0 || r.cut_panels > 0 {
                rep_note_later(format!(
                    "shardlat {clients:?}: {} of {} delivered, {} order errors, {} cut",
                    r.deliveries, r.expected, r.order_errors, r.cut_panels
                ));
            }
            out.push(r);
        }
    }
    let q = |v: &[load::RunResult], shard_samples: bool, i: usize| -> Vec<f64> {
        v.iter()
            .map(|r| {
                let mut v = if shard_samples {
                    r.shard_latencies_ns.clone()
                } else {
                    r.latencies_ns.clone()
                };
                v.sort_unstable();
                load::quantile(&v, [0.5, 0.99, 0.999][i]) / 1e3
            })
            .collect()
    };
    let cpu = |v: &[load::RunResult]| -> Vec<f64> {
        v.iter()
            .map(|r| r.server_cpu.as_secs_f64() / r.secs * 100.0)
            .collect()
    };
    let groups: [(&str, &[load::RunResult], bool); 3] = [
        (
            "latency 2000 ev/s × 10 Shard clients (B: 10 panels, same run)",
            &shard,
            false,
        ),
        (
            "latency 2000 ev/s × 5 panels + 5 Shard: the panels (B: 10 panels)",
            &mixed,
            false,
        ),
        (
            "latency 2000 ev/s × 5 panels + 5 Shard: the Shard clients (B: 10 panels)",
            &mixed,
            true,
        ),
    ];
    for (g, runs, shard_samples) in groups {
        for (i, name) in ["p50", "p99", "p99.9"].into_iter().enumerate() {
            rep.add(
                g,
                name,
                "µs",
                q(runs, shard_samples, i),
                q(&panel, false, i),
                Better::Lower,
                None,
                "",
            );
        }
        if !shard_samples {
            rep.add(
                g,
                "server CPU busy",
                "%",
                cpu(runs),
                cpu(&panel),
                Better::Lower,
                None,
                "",
            );
        }
    }
    flush_notes(rep);
}

fn slow(env: &Env, args: &Args, rep: &mut Report) {
    let mix = Mix::new("2k", load::TWO_KIB);
    let secs = if args.quick { 3 } else { 6 };
    progress(&format!(
        "slow panel: 2000 × 2 KiB events/s, 9 readers ± 1 stalled panel, {secs} s"
    ));
    let mut base = (vec![], vec![]);
    let mut with = (vec![], vec![]);
    for _ in 0..args.reps {
        for kind in [Kind::Hub, Kind::Node] {
            let r0 = paced(kind, env, 9, &mix, secs, false, 1000);
            let r1 = paced(kind, env, 9, &mix, secs, true, 1000);
            if r1.deliveries < r1.expected {
                rep_note_later(format!(
                    "slow {kind:?}: readers got {} of {} events",
                    r1.deliveries, r1.expected
                ));
            }
            match &r1.slow_cut_line {
                Some(line) => rep_note_later(format!(
                    "slow {kind:?}: stalled panel cut {:.2} s after the first event, after {} events reached its socket; server said: `{}`",
                    r1.slow_cut_after.unwrap_or_default().as_secs_f64(),
                    r1.slow_received,
                    line.trim()
                )),
                None if r1.slow_cut_after.is_some() => rep_note_later(format!(
                    "slow {kind:?}: stalled panel closed without a budget log line ({} events reached it)",
                    r1.slow_received
                )),
                None => rep_note_later(format!(
                    "slow {kind:?}: stalled panel was NOT cut within the run ({} events reached it)",
                    r1.slow_received
                )),
            }
            let (x, y) = if kind == Kind::Hub {
                (&mut base.0, &mut with.0)
            } else {
                (&mut base.1, &mut with.1)
            };
            x.push(r0);
            y.push(r1);
        }
    }
    let q = |v: &[load::RunResult], i: usize| -> Vec<f64> {
        v.iter()
            .map(|r| {
                let (p50, p99, _) = lat_quantiles(r);
                [p50, p99][i]
            })
            .collect()
    };
    let cut = |v: &[load::RunResult]| -> Vec<f64> {
        v.iter()
            .map(|r| r.slow_cut_after.map_or(f64::NAN, |d| d.as_secs_f64()))
            .collect()
    };
    let g = "slow panel (2000 × 2 KiB ev/s, after 0.5 s warm-up)";
    rep.add(
        g,
        "9 readers p50, no stalled panel",
        "µs",
        q(&base.0, 0),
        q(&base.1, 0),
        Better::Lower,
        None,
        "",
    );
    rep.add(
        g,
        "9 readers p99, no stalled panel",
        "µs",
        q(&base.0, 1),
        q(&base.1, 1),
        Better::Lower,
        None,
        "",
    );
    rep.add(
        g,
        "9 readers p50, 1 stalled panel",
        "µs",
        q(&with.0, 0),
        q(&with.1, 0),
        Better::Lower,
        None,
        "",
    );
    rep.add(
        g,
        "9 readers p99, 1 stalled panel",
        "µs",
        q(&with.0, 1),
        q(&with.1, 1),
        Better::Lower,
        None,
        "",
    );
    rep.add(
        g,
        "stalled panel cut after",
        "s",
        cut(&with.0),
        cut(&with.1),
        Better::None,
        None,
        "",
    );
    flush_notes(rep);
}

fn memory(env: &Env, args: &Args, rep: &mut Report) {
    progress("memory: idle");
    let (a, b) = ab(args.reps, |kind, _| sys::idle(env, kind));
    let rss = |v: &[sys::Counts]| {
        v.iter()
            .map(|c| c.rss_kib as f64 / 1024.0)
            .collect::<Vec<_>>()
    };
    let thr = |v: &[sys::Counts]| v.iter().map(|c| c.threads as f64).collect::<Vec<_>>();
    rep.add(
        "memory",
        "RSS idle",
        "MiB",
        rss(&a),
        rss(&b),
        Better::Lower,
        target("< 8 MiB", |h, _| h < 8.0),
        "",
    );
    rep.add(
        "memory",
        "threads idle",
        "",
        thr(&a),
        thr(&b),
        Better::None,
        None,
        "",
    );
    let n = if args.quick { 200 } else { 1000 };
    progress(&format!("memory: {n} panel sockets"));
    let (a, b) = ab(args.reps, |kind, _| {
        let r = sys::panels(env, kind, n);
        rep_note_later(format!(
            "{n} panels {kind:?}: opened {} (failed {}); RSS {:.1} → {:.1} → {:.1} MiB, threads {} → {} → {}, fds {} → {} → {} (before → during → 1 s after settling); back to baseline after {}",
            r.opened, r.failed,
            r.before.rss_kib as f64 / 1024.0, r.during.rss_kib as f64 / 1024.0, r.after.rss_kib as f64 / 1024.0,
            r.before.threads, r.during.threads, r.after.threads,
            r.before.fds, r.during.fds, r.after.fds,
            r.settled_after.map_or("never (10 s)".to_string(), |s| format!("{s:.2} s")),
        ));
        r
    });
    let during = |v: &[sys::PanelsResult]| {
        v.iter()
            .map(|r| r.during.rss_kib as f64 / 1024.0)
            .collect::<Vec<_>>()
    };
    let per = |v: &[sys::PanelsResult]| {
        v.iter()
            .map(|r| (r.during.rss_kib as f64 - r.before.rss_kib as f64) / r.opened.max(1) as f64)
            .collect::<Vec<_>>()
    };
    let thr_d = |v: &[sys::PanelsResult]| {
        v.iter()
            .map(|r| r.during.threads as f64)
            .collect::<Vec<_>>()
    };
    let thr_a = |v: &[sys::PanelsResult]| {
        v.iter()
            .map(|r| r.after.threads as f64 - r.before.threads as f64)
            .collect::<Vec<_>>()
    };
    let fd_a = |v: &[sys::PanelsResult]| {
        v.iter()
            .map(|r| r.after.fds as f64 - r.before.fds as f64)
            .collect::<Vec<_>>()
    };
    let (slot, kib) = sys::queue_cost_kib(200);
    rep_note_later(format!(
        "for reference, the panel queue the hub used before it allocated on use, `crossbeam_channel::bounded(16384)` of `Outgoing` ({slot} B): {kib:.0} KiB resident each (this process's RSS growth over 200 of them)"
    ));
    let g = format!("{n} panel sockets");
    rep.add(
        &g,
        "RSS with sockets open",
        "MiB",
        during(&a),
        during(&b),
        Better::Lower,
        if n == 1000 {
            target("< 48 MiB", |h, _| h < 48.0)
        } else {
            None
        },
        "",
    );
    rep.add(
        &g,
        "RSS per socket",
        "KiB",
        per(&a),
        per(&b),
        Better::Lower,
        None,
        "",
    );
    rep.add(
        &g,
        "threads with sockets open",
        "",
        thr_d(&a),
        thr_d(&b),
        Better::None,
        None,
        "",
    );
    rep.add(
        &g,
        "threads after close − before",
        "",
        thr_a(&a),
        thr_a(&b),
        Better::None,
        target("0", |h, _| h <= 0.0),
        "",
    );
    rep.add(
        &g,
        "fds after close − before",
        "",
        fd_a(&a),
        fd_a(&b),
        Better::None,
        target("0", |h, _| h <= 0.0),
        "",
    );
    http_connections(env, args, rep, n);
    flush_notes(rep);
}

/// Idle HTTP connections (RSS and threads with `n` open) and an operator's
/// requests while `n` slow connections (half idle, half trickling a head)
/// are open.
fn http_connections(env: &Env, args: &Args, rep: &mut Report, n: usize) {
    progress(&format!("memory: {n} idle HTTP connections"));
    let (a, b) = ab(args.reps, |kind, _| {
        let r = sys::http_idle(env, kind, n);
        if r.opened < n {
            rep_note_later(format!(
                "idle HTTP {kind:?}: only {} of {n} connections were served",
                r.opened
            ));
        }
        r
    });
    let per = |v: &[sys::HttpIdleResult]| {
        v.iter()
            .map(|r| (r.during.rss_kib as f64 - r.before.rss_kib as f64) / r.opened.max(1) as f64)
            .collect::<Vec<_>>()
    };
    let thr = |v: &[sys::HttpIdleResult]| {
        v.iter()
            .map(|r| r.during.threads as f64 - r.before.threads as f64)
            .collect::<Vec<_>>()
    };
    let g = format!("{n} idle HTTP connections");
    rep.add(
        &g,
        "RSS per connection",
        "KiB",
        per(&a),
        per(&b),
        Better::Lower,
        None,
        "",
    );
    rep.add(
        &g,
        "threads with them open − before",
        "",
        thr(&a),
        thr(&b),
        Better::Lower,
        target("≤ 1", |h, _| h <= 1.0),
        "",
    );
    progress(&format!("slowloris: {n} slow connections"));
    let (a, b) = ab(args.reps, |kind, _| sys::slowloris(env, kind, n));
    let q = |v: &[sys::SlowlorisResult], p: f64| {
        v.iter()
            .map(|r| {
                let mut s: Vec<u32> = r.samples_us.iter().map(|&us| us as u32).collect();
                s.sort_unstable();
                load::quantile(&s, p)
            })
            .collect::<Vec<_>>()
    };
    let refused =
        |v: &[sys::SlowlorisResult]| v.iter().map(|r| r.refused as f64).collect::<Vec<_>>();
    let thr = |v: &[sys::SlowlorisResult]| {
        v.iter()
            .map(|r| r.threads as f64 - r.baseline_threads as f64)
            .collect::<Vec<_>>()
    };
    let g = format!(
        "slowloris: {} idle + {} trickling connections",
        n / 2,
        n / 2
    );
    rep.add(
        &g,
        "operator GET p50",
        "µs",
        q(&a, 0.5),
        q(&b, 0.5),
        Better::Lower,
        None,
        "",
    );
    rep.add(
        &g,
        "operator GET max",
        "µs",
        q(&a, 1.0),
        q(&b, 1.0),
        Better::Lower,
        target("< 1 s", |h, _| h < 1e6),
        "",
    );
    rep.add(
        &g,
        "operator GETs refused or unanswered",
        "",
        refused(&a),
        refused(&b),
        Better::Lower,
        target("0", |h, _| h <= 0.0),
        "",
    );
    rep.add(
        &g,
        "threads over idle (max)",
        "",
        thr(&a),
        thr(&b),
        Better::Lower,
        None,
        "",
    );
}

fn sessions(env: &Env, args: &Args, rep: &mut Report) {
    let n = if args.quick { 20 } else { 100 };
    progress(&format!(
        "memory: {n} sessions with a connected built-in worker each"
    ));
    let mut v = vec![];
    for _ in 0..args.reps {
        let r = sys::sessions(env, n);
        rep_note_later(format!(
            "{n} sessions: {} connected in {:.1} s; hub RSS {:.1} → {:.1} → {:.1} → {:.1} MiB, threads {} → {} → {} → {}, fds {} → {} → {} → {} (sessions created → all workers connected → 3 s after stopping all, which took {:.1} s → 2 s after deleting the sessions); the {n} mock workers together {:.0} MiB RSS",
            r.connected, r.start_secs,
            r.before.rss_kib as f64 / 1024.0, r.during.rss_kib as f64 / 1024.0, r.after.rss_kib as f64 / 1024.0,
            r.after_delete.rss_kib as f64 / 1024.0,
            r.before.threads, r.during.threads, r.after.threads, r.after_delete.threads,
            r.before.fds, r.during.fds, r.after.fds, r.after_delete.fds, r.stop_secs,
            r.workers_rss_kib as f64 / 1024.0,
        ));
        v.push(r);
    }
    let g = format!("{n} sessions + workers");
    rep.add(
        &g,
        "hub RSS, all workers connected",
        "MiB",
        v.iter().map(|r| r.during.rss_kib as f64 / 1024.0).collect(),
        vec![],
        Better::Lower,
        None,
        "",
    );
    rep.add(
        &g,
        "hub threads, all connected",
        "",
        v.iter().map(|r| r.during.threads as f64).collect(),
        vec![],
        Better::None,
        None,
        "",
    );
    rep.add(
        &g,
        "hub fds, all connected",
        "",
        v.iter().map(|r| r.during.fds as f64).collect(),
        vec![],
        Better::None,
        None,
        "",
    );
    rep.add(
        &g,
        "threads after stop − before",
        "",
        v.iter()
            .map(|r| r.after.threads as f64 - r.before.threads as f64)
            .collect(),
        vec![],
        Better::None,
        None,
        "sessions kept",
    );
    rep.add(
        &g,
        "fds after stop − before",
        "",
        v.iter()
            .map(|r| r.after.fds as f64 - r.before.fds as f64)
            .collect(),
        vec![],
        Better::None,
        None,
        "sessions kept",
    );
    rep.add(
        &g,
        "threads after delete − before",
        "",
        v.iter()
            .map(|r| r.after_delete.threads as f64 - r.before.threads as f64)
            .collect(),
        vec![],
        Better::None,
        target("0", |h, _| h <= 0.0),
        "",
    );
    rep.add(
        &g,
        "fds after delete − before",
        "",
        v.iter()
            .map(|r| r.after_delete.fds as f64 - r.before.fds as f64)
            .collect(),
        vec![],
        Better::None,
        target("0", |h, _| h <= 0.0),
        "",
    );
    flush_notes(rep);
}

fn startup(env: &Env, args: &Args, rep: &mut Report) {
    let reps = if args.quick { 5 } else { 20 };
    progress(&format!("startup: {reps} starts each"));
    let a = sys::startup(env, Kind::Hub, reps);
    let b = sys::startup(env, Kind::Node, reps);
    rep.add(
        "startup",
        "spawn → readiness line",
        "ms",
        a.to_ready_ms.clone(),
        b.to_ready_ms.clone(),
        Better::Lower,
        target("< 20 ms", |h, _| h < 20.0),
        &format!("{reps} starts"),
    );
    rep.add(
        "startup",
        "spawn → first TCP connect",
        "ms",
        a.to_connect_ms,
        b.to_connect_ms,
        Better::Lower,
        target("< 20 ms", |h, _| h < 20.0),
        &format!("{reps} starts"),
    );
    let hub = env.hub_bin.display().to_string();
    let node = env.node_bin.display().to_string();
    let n = if args.quick { 20 } else { 100 };
    let ha = sys::exec_times(&[&hub, "--help"], n);
    let hb = sys::exec_times(&[&node, "-e", "0"], n);
    rep.add(
        "startup",
        "`--help` (node: `node -e 0`)",
        "ms",
        ha,
        hb,
        Better::Lower,
        None,
        &format!("{n} runs"),
    );
}

fn size(env: &Env, rep: &mut Report) {
    let s = sys::size(env);
    rep.add(
        "size",
        "release binary",
        "MiB",
        vec![s.hub_bytes as f64 / MIB],
        vec![s.node_bin_bytes as f64 / MIB],
        Better::Lower,
        None,
        "node: the node binary",
    );
    rep.add(
        "size",
        "release binary, stripped",
        "MiB",
        vec![s.hub_stripped_bytes as f64 / MIB],
        vec![],
        Better::Lower,
        target("< 6 MiB", |h, _| h < 6.0),
        "panel embedded",
    );
    rep.add(
        "size",
        "relay node_modules",
        "KiB",
        vec![],
        vec![s.node_modules_bytes as f64 / 1024.0],
        Better::None,
        None,
        "",
    );
}

fn splitter(args: &Args, rep: &mut Report) {
    let reps = if args.quick { 2 } else { 5 };
    progress("splitter: 64 MiB buffers, 64 KiB chunks");
    for c in micro::splitter(reps) {
        let g = format!("line splitter ({})", c.name);
        let ratio: Vec<f64> = c
            .splitter_mbs
            .iter()
            .zip(&c.memchr_mbs)
            .map(|(s, m)| s / m * 100.0)
            .collect();
        rep.add(
            &g,
            "splitter",
            "MB/s",
            c.splitter_mbs.clone(),
            vec![],
            Better::Higher,
            None,
            &format!(
                "{} lines, {:.2} allocations per line; lines as &str",
                c.lines, c.allocs_per_line
            ),
        );
        rep.add(
            &g,
            "splitter, owned lines (push → Vec<Line>)",
            "MB/s",
            c.owned_mbs.clone(),
            vec![],
            Better::Higher,
            None,
            "one String per line",
        );
        rep.add(
            &g,
            "memchr newline count",
            "MB/s",
            c.memchr_mbs.clone(),
            vec![],
            Better::Higher,
            None,
            "",
        );
        rep.add(
            &g,
            "JSONL splitter (Shard socket and stdio)",
            "MB/s",
            c.jsonl_mbs.clone(),
            vec![],
            Better::Higher,
            None,
            "records borrowed, UTF-8 checked per line, 4 MiB line limit",
        );
        if matches!(c.name, "ascii" | "mixed") {
            rep.add(
                &g,
                "floor: from_utf8 per 64 KiB chunk",
                "MB/s",
                c.validate_chunks_mbs.clone(),
                vec![],
                Better::Higher,
                None,
                "",
            );
            rep.add(
                &g,
                "floor: memchr + one String per line",
                "MB/s",
                c.alloc_lines_mbs.clone(),
                vec![],
                Better::Higher,
                None,
                "no validation",
            );
        }
        rep.add(
            &g,
            "splitter ÷ memchr",
            "%",
            ratio,
            vec![],
            Better::Higher,
            if c.name == "ascii" {
                target("≥ 20 %", |h, _| h >= 20.0)
            } else {
                None
            },
            "",
        );
        if !c.from_utf8_mbs.is_empty() {
            let r2: Vec<f64> = c
                .splitter_mbs
                .iter()
                .zip(&c.from_utf8_mbs)
                .map(|(s, u)| s / u * 100.0)
                .collect();
            rep.add(
                &g,
                "std::str::from_utf8",
                "MB/s",
                c.from_utf8_mbs.clone(),
                vec![],
                Better::Higher,
                None,
                "",
            );
            rep.add(
                &g,
                "splitter ÷ from_utf8",
                "%",
                r2,
                vec![],
                Better::Higher,
                if c.name == "mixed" {
                    target("≥ 100 %", |h, _| h >= 100.0)
                } else {
                    None
                },
                "",
            );
        }
    }
}

fn replay_scenario(env: &Env, args: &Args, rep: &mut Report) {
    let events = if args.quick { 8_000 } else { 32_000 };
    progress(&format!(
        "replay: fill {events} ~1 KiB events, then one paged replay (cold, warm)"
    ));
    let mut v = vec![];
    for _ in 0..args.reps {
        let r = replay::run(env, events);
        rep_note_later(format!(
            "replay: {} entries in {} pages, {:.1} MiB on the wire, largest frame {} KiB; fill took {:.2} s; RSS empty {:.1} MiB, filled {:.1} MiB; cold {:.3} s peak +{:.2} MiB, warm {:.3} s peak +{:.2} MiB",
            r.cold.entries, r.cold.pages, r.cold.bytes as f64 / MIB, r.cold.largest_frame / 1024,
            r.fill_secs, r.rss_empty_kib as f64 / 1024.0, r.cold.rss_before_kib as f64 / 1024.0,
            r.cold.secs, (r.cold.rss_peak_kib - r.cold.rss_before_kib) as f64 / 1024.0,
            r.warm.secs, (r.warm.rss_peak_kib - r.warm.rss_before_kib) as f64 / 1024.0,
        ));
        v.push(r);
    }
    let g = "paged replay (~40 MiB transcript)";
    rep.add(
        g,
        "transcript replayed",
        "MiB",
        v.iter().map(|r| r.cold.bytes as f64 / MIB).collect(),
        vec![],
        Better::None,
        None,
        "",
    );
    rep.add(
        g,
        "time, cold (first replay)",
        "s",
        v.iter().map(|r| r.cold.secs).collect(),
        vec![],
        Better::Lower,
        None,
        "",
    );
    rep.add(
        g,
        "time, warm (second replay)",
        "s",
        v.iter().map(|r| r.warm.secs).collect(),
        vec![],
        Better::Lower,
        None,
        "",
    );
    rep.add(
        g,
        "pages/s, cold",
        "1/s",
        v.iter()
            .map(|r| r.cold.pages as f64 / r.cold.secs)
            .collect(),
        vec![],
        Better::Higher,
        None,
        "",
    );
    rep.add(
        g,
        "peak RSS growth during replay, cold",
        "MiB",
        v.iter()
            .map(|r| (r.cold.rss_peak_kib as f64 - r.cold.rss_before_kib as f64) / 1024.0)
            .collect(),
        vec![],
        Better::Lower,
        target("≈ a page (≪ 40 MiB)", |h, _| h < 4.0),
        "",
    );
    rep.add(
        g,
        "peak RSS growth during replay, warm",
        "MiB",
        v.iter()
            .map(|r| (r.warm.rss_peak_kib as f64 - r.warm.rss_before_kib as f64) / 1024.0)
            .collect(),
        vec![],
        Better::Lower,
        target("≈ a page (≪ 40 MiB)", |h, _| h < 4.0),
        "",
    );
    flush_notes(rep);
}

fn sqlite(env: &Env, args: &Args, rep: &mut Report) {
    let rows = if args.quick { 300 } else { 2000 };
    progress(&format!(
        "sqlite: {rows} session inserts and {rows} process upserts, one commit each"
    ));
    let dir = env.fresh_dir("sqlite");
    let r = micro::sqlite(&dir, args.reps, rows);
    rep.add(
        "SQLite (WAL, synchronous=FULL)",
        "session insert, 1 per transaction",
        "rows/s",
        r.session_inserts_per_s,
        vec![],
        Better::Higher,
        None,
        "",
    );
    rep.add(
        "SQLite (WAL, synchronous=FULL)",
        "process record upsert, 1 per transaction",
        "rows/s",
        r.process_upserts_per_s,
        vec![],
        Better::Higher,
        None,
        "",
    );
    let _ = median(&[]);
}
