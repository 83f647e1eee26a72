//! In-process figures: the worker-output line splitter against memchr and
//! `std::str::from_utf8` on the same 64 MiB buffers, and the SQLite write
//! path through the hub's own `Store`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use simplex_hub::harness::store::{ProcessRecord, SessionRecord, Store};
use simplex_hub::wire::line_splitter::LineSplitter;

/// Counts allocations (the splitter's per-line cost is mostly allocation).
pub struct Counting;

pub static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

const BUF: usize = 64 << 20;
const CHUNK: usize = 64 << 10;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Worker-log-like text: lines of 20–160 printable ASCII bytes.
fn ascii(crlf: bool) -> Vec<u8> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut v = Vec::with_capacity(BUF + 256);
    let words: &[&[u8]] = &[
        b"INFO",
        b"compiling",
        b"simplex-hub",
        b"v0.1.0",
        b"(/work/main)",
        b"test",
        b"result:",
        b"ok.",
        b"passed;",
        b"0",
        b"failed;",
        b"finished",
        b"in",
        b"1.23s",
        b"warning:",
        b"unused",
    ];
    while v.len() < BUF {
        let len = 20 + rng.below(141) as usize;
        let start = v.len();
        while v.len() - start < len {
            v.extend_from_slice(words[rng.below(words.len() as u64) as usize]);
            v.push(b' ');
        }
        if crlf {
            v.push(b'\r');
        }
        v.push(b'\n');
    }
    v.truncate(BUF);
    v
}

/// The ASCII text with one two-byte character per 16 bytes on average
/// (the relay study's "mixed" text).
fn mixed() -> Vec<u8> {
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let src = ascii(false);
    let mut v = Vec::with_capacity(BUF + 1024);
    for &b in &src {
        if b != b'\n' && rng.below(16) == 0 {
            v.extend_from_slice("é".as_bytes());
        } else {
            v.push(b);
        }
        if v.len() >= BUF {
            break;
        }
    }
    v.truncate(BUF);
    // Never end inside a character.
    while std::str::from_utf8(&v).is_err() {
        v.pop();
    }
    v
}

/// The mixed text with an invalid sequence every ~256 bytes (lone
/// continuation bytes, 0xFF, truncated three-byte sequences).
fn invalid() -> Vec<u8> {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let mut v = mixed();
    let bad: &[&[u8]] = &[b"\x80", b"\xFF", b"\xE2\x82", b"\xC0"];
    let mut at = 0;
    loop {
        at += 128 + rng.below(256) as usize;
        if at + 2 >= v.len() {
            break;
        }
        if v[at] == b'\n' {
            continue;
        }
        let b = bad[rng.below(bad.len() as u64) as usize];
        v[at..at + b.len()].copy_from_slice(b);
    }
    v
}

/// Lines of 100 KiB (over the 64 KiB cap: truncation on every line).
fn long_lines() -> Vec<u8> {
    let mut v = Vec::with_capacity(BUF);
    let line = b"x".repeat(100 * 1024);
    while v.len() < BUF {
        v.extend_from_slice(&line);
        v.push(b'\n');
    }
    v.truncate(BUF);
    v
}

pub struct SplitterCase {
    pub name: &'static str,
    /// Floors, to explain the splitter's figure: `from_utf8` of each 64 KiB
    /// chunk alone, and memchr line finding plus one `String` per line
    /// (the splitter's output type) without any validation.
    pub validate_chunks_mbs: Vec<f64>,
    pub alloc_lines_mbs: Vec<f64>,
    pub splitter_mbs: Vec<f64>,
    /// `push` into a `Vec<Line>` (one `String` per line).
    pub owned_mbs: Vec<f64>,
    pub memchr_mbs: Vec<f64>,
    pub from_utf8_mbs: Vec<f64>,
    /// The Shard transports' JSONL splitter (`harness::jsonl`) over the
    /// same bytes: records borrowed, UTF-8 checked per line.
    pub jsonl_mbs: Vec<f64>,
    pub lines: u64,
    pub allocs_per_line: f64,
}

fn mbs(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e6
}

/// The splitter as the hub's pipe readers use it: each line handed to a
/// callback as `&str` (borrowed from the chunk when it lies within it).
fn split_jsonl(buf: &[u8]) -> u64 {
    let mut s = simplex_hub::wire::shard::jsonl::Splitter::new(
        simplex_hub::wire::shard::jsonl::DEFAULT_MAX_LINE,
    );
    let mut records = 0u64;
    for chunk in buf.chunks(CHUNK) {
        s.push(chunk, |r| {
            records += 1;
            black_box(r);
        });
    }
    black_box(s.finish());
    records
}

fn split_once(buf: &[u8]) -> u64 {
    let mut s = LineSplitter::new();
    let mut lines = 0u64;
    let mut bytes = 0usize;
    for chunk in buf.chunks(CHUNK) {
        s.push_with(chunk, |line| {
            lines += 1;
            bytes += black_box(line.text).len();
        });
    }
    s.finish_with(|line| {
        lines += 1;
        bytes += black_box(line.text).len();
    });
    black_box(bytes);
    lines
}

/// The convenience API: one owned `Line` (a `String`) per line.
fn split_owned(buf: &[u8]) -> u64 {
    let mut s = LineSplitter::new();
    let mut out = Vec::with_capacity(4096);
    let mut lines = 0u64;
    for chunk in buf.chunks(CHUNK) {
        s.push(chunk, &mut out);
        lines += out.len() as u64;
        black_box(&out);
        out.clear();
    }
    s.finish(&mut out);
    lines + out.len() as u64
}

/// memchr line finding and one `String` per line, no UTF-8 validation
/// (lossy conversion stands in; the buffers here are mostly valid).
fn alloc_lines(buf: &[u8]) -> u64 {
    let mut out: Vec<String> = Vec::with_capacity(4096);
    let mut lines = 0u64;
    for chunk in buf.chunks(CHUNK) {
        let mut at = 0;
        for nl in memchr::memchr_iter(b'\n', chunk) {
            let line = &chunk[at..nl];
            // SAFETY: only measured on buffers that were checked valid.
            out.push(unsafe { std::str::from_utf8_unchecked(line) }.to_owned());
            at = nl + 1;
        }
        lines += out.len() as u64;
        black_box(&out);
        out.clear();
    }
    lines
}

pub fn splitter(reps: usize) -> Vec<SplitterCase> {
    let cases: Vec<(&'static str, Vec<u8>)> = vec![
        ("ascii", ascii(false)),
        ("ascii-crlf", ascii(true)),
        ("mixed", mixed()),
        ("invalid", invalid()),
        ("long-lines", long_lines()),
    ];
    let mut out = Vec::new();
    for (name, buf) in cases {
        let mut c = SplitterCase {
            name,
            splitter_mbs: vec![],
            owned_mbs: vec![],
            validate_chunks_mbs: vec![],
            alloc_lines_mbs: vec![],
            memchr_mbs: vec![],
            from_utf8_mbs: vec![],
            jsonl_mbs: vec![],
            lines: 0,
            allocs_per_line: 0.0,
        };
        // Warm the buffer.
        black_box(memchr::memchr_iter(b'\n', &buf).count());
        let valid = std::str::from_utf8(&buf).is_ok();
        for rep in 0..reps {
            let a0 = ALLOCS.load(Ordering::Relaxed);
            let t = Instant::now();
            let lines = black_box(split_once(black_box(&buf)));
            c.splitter_mbs.push(mbs(buf.len(), t.elapsed()));
            if rep == 0 {
                c.lines = lines;
                c.allocs_per_line =
                    (ALLOCS.load(Ordering::Relaxed) - a0) as f64 / lines.max(1) as f64;
            }
            let t = Instant::now();
            black_box(split_owned(black_box(&buf)));
            c.owned_mbs.push(mbs(buf.len(), t.elapsed()));
            let t = Instant::now();
            for chunk in black_box(&buf).chunks(CHUNK) {
                black_box(
                    std::str::from_utf8(chunk)
                        .map_err(|e| e.valid_up_to())
                        .err(),
                );
            }
            c.validate_chunks_mbs.push(mbs(buf.len(), t.elapsed()));
            if valid {
                let t = Instant::now();
                black_box(alloc_lines(black_box(&buf)));
                c.alloc_lines_mbs.push(mbs(buf.len(), t.elapsed()));
            }
            let t = Instant::now();
            black_box(memchr::memchr_iter(b'\n', black_box(&buf)).count());
            c.memchr_mbs.push(mbs(buf.len(), t.elapsed()));
            let t = Instant::now();
            black_box(split_jsonl(black_box(&buf)));
            c.jsonl_mbs.push(mbs(buf.len(), t.elapsed()));
            let t = Instant::now();
            let ok = black_box(std::str::from_utf8(black_box(&buf)).is_ok());
            if ok {
                c.from_utf8_mbs.push(mbs(buf.len(), t.elapsed()));
            }
        }
        out.push(c);
    }
    out
}

pub struct SqliteResult {
    pub session_inserts_per_s: Vec<f64>,
    pub process_upserts_per_s: Vec<f64>,
}

/// One session insert per transaction (as `POST /api/sessions` does), and
/// process-record upserts (as every start and state change does), each an
/// fsync'd WAL commit (`synchronous=FULL`), through `simplex_hub::harness::store`.
pub fn sqlite(dir: &std::path::Path, reps: usize, rows: usize) -> SqliteResult {
    let mut out = SqliteResult {
        session_inserts_per_s: vec![],
        process_upserts_per_s: vec![],
    };
    for rep in 0..reps {
        let path = dir.join(format!("hub-{rep}.db"));
        let store = Store::open(&path).expect("open store");
        let spec = serde_json::json!({"provider": "mock", "model": "mock-flash", "threads": 1,
                                      "workspace": "", "args": []});
        let t = Instant::now();
        for i in 0..rows {
            store
                .insert_session(&SessionRecord {
                    id: format!("session-{i:06}"),
                    created_at: "2026-11-30T12:00:00.000Z".into(),
                    spec: spec.clone(),
                    token: format!("{:032x}", i as u128 * 0x9E37_79B9_7F4A_7C15),
                    lifecycle_id: format!("{:032x}", i),
                    kind: "ordinary".into(),
                })
                .expect("insert");
        }
        out.session_inserts_per_s
            .push(rows as f64 / t.elapsed().as_secs_f64());
        let t = Instant::now();
        for i in 0..rows {
            let sid = format!("session-{:06}", i % 100);
            store
                .put_process(&ProcessRecord {
                    session_id: sid,
                    pid: 10_000 + i as u32,
                    start_time: Some(123_456 + i as u64),
                    started_at: "2026-11-30T12:00:00.000Z".into(),
                    command: "/usr/local/bin/simplex-hub".into(),
                    args: vec![
                        "mock-worker".into(),
                        "--config".into(),
                        "config/config.yaml".into(),
                    ],
                    cwd: "/root/.simplex/hub/sessions/x".into(),
                    log_path: Some("/root/.simplex/hub/sessions/x/worker.log".into()),
                    state: if i % 2 == 0 { "running" } else { "exited" }.into(),
                    lifecycle_id: format!("{:032x}", i),
                })
                .expect("upsert");
        }
        out.process_upserts_per_s
            .push(rows as f64 / t.elapsed().as_secs_f64());
        drop(store);
        let _ = std::fs::remove_file(&path);
    }
    out
}
