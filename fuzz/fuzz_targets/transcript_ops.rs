//! `transcript::Transcript` against a `VecDeque` model, the way redb's
//! harness checks its tables against a `BTreeMap`: an arbitrary sequence of
//! pushes (of any size, with omission records of any size) and `since`
//! reads, with every counter and every read compared after each step.
//!
//! Input: byte 0 is `max_events` (0-15), two bytes `max_bytes` (0-2047),
//! then operations of four bytes each: a selector and three bytes of
//! arguments.
#![no_main]

use std::collections::VecDeque;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use simplex_hub::harness::transcript::{Entry, Pushed, Stored, Transcript};
use simplex_hub_fuzz::Reader;

/// JSON of exactly `len` bytes (at least the minimum) carrying the
/// sequence, as the hub's entries and omission records do.
fn entry(seq: u64, tag: &str, len: usize) -> Arc<str> {
    let head = format!("{{\"hub_sequence\":{seq},\"{tag}\":\"");
    let pad = len.saturating_sub(head.len() + 2);
    format!("{head}{}\"}}", "x".repeat(pad)).into()
}

#[derive(Default)]
struct Model {
    entries: VecDeque<(u64, Arc<str>)>,
    next: u64,
    latest: u64,
    evicted: u64,
    gaps: u64,
}

impl Model {
    fn bytes(&self) -> usize {
        self.entries.iter().map(|(_, j)| j.len()).sum()
    }

    fn push(
        &mut self,
        max_events: usize,
        max_bytes: usize,
        json: Arc<str>,
        record: Arc<str>,
    ) -> Pushed {
        let seq = self.next;
        self.next += 1;
        let (json, stored) = if json.len() <= max_bytes {
            (json, Stored::Full)
        } else {
            (record, Stored::Omitted)
        };
        if json.len() > max_bytes || max_events == 0 {
            let evicted = self.entries.len();
            let evicted_bytes = self.bytes();
            self.entries.clear();
            self.evicted += evicted as u64;
            self.gaps += 1;
            return Pushed {
                hub_sequence: seq,
                stored: Stored::Gap,
                evicted,
                evicted_bytes,
            };
        }
        self.entries.push_back((seq, json));
        self.latest = seq;
        let (mut evicted, mut evicted_bytes) = (0, 0);
        while self.entries.len() > max_events || self.bytes() > max_bytes {
            let (_, old) = self.entries.pop_front().expect("the new entry fits");
            evicted += 1;
            evicted_bytes += old.len();
        }
        self.evicted += evicted as u64;
        Pushed {
            hub_sequence: seq,
            stored,
            evicted,
            evicted_bytes,
        }
    }

    fn since(&self, since: u64, limit: usize) -> Vec<Entry> {
        self.entries
            .iter()
            .filter(|(seq, _)| *seq > since)
            .take(limit)
            .map(|(seq, json)| Entry {
                hub_sequence: *seq,
                json: json.clone(),
            })
            .collect()
    }
}

fn compare(t: &Transcript, m: &Model) {
    assert_eq!(t.next_sequence(), m.next);
    assert_eq!(t.latest(), m.latest);
    assert_eq!(t.len(), m.entries.len());
    assert_eq!(t.is_empty(), m.entries.is_empty());
    assert_eq!(t.bytes(), m.bytes());
    assert_eq!(t.evicted(), m.evicted);
    assert_eq!(t.gaps(), m.gaps);
    assert_eq!(t.first_retained(), m.entries.front().map(|(s, _)| *s));
}

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let max_events = usize::from(r.u8() % 16);
    let max_bytes = usize::from(r.u16() % 2048);
    let mut t = Transcript::new(max_events, max_bytes);
    let mut m = Model {
        next: 1,
        ..Model::default()
    };
    compare(&t, &m);

    while !r.is_empty() {
        let op = r.u8();
        let (a, b, c) = (r.u8(), r.u8(), r.u8());
        if op % 4 == 3 {
            // A read: a cursor near the live range, any limit.
            let since = match a % 4 {
                0 => 0,
                1 => u64::MAX,
                _ => m.next.saturating_sub(u64::from(b)),
            };
            let limit = if c == 255 {
                usize::MAX
            } else {
                usize::from(c % 32)
            };
            assert_eq!(
                t.since(since, limit),
                m.since(since, limit),
                "since({since}, {limit})"
            );
            continue;
        }
        // A push: entry and omission record sizes, scaled around the ceiling.
        let scale = |x: u8| (usize::from(x) * (max_bytes + 64)) / 128;
        let seq = t.next_sequence();
        let json = entry(seq, "p", scale(a) + usize::from(op >> 2));
        let record = entry(seq, "display_omitted", scale(b));
        let got = t.push(json.clone(), |s, len| {
            assert_eq!((s, len), (seq, json.len()), "omission arguments");
            record.clone()
        });
        let expect = m.push(max_events, max_bytes, json, record);
        assert_eq!(got, expect);
        compare(&t, &m);
    }
    assert_eq!(t.since(0, usize::MAX), m.since(0, usize::MAX));
});
