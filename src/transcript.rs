//! The per-session transcript ring: the worker events a session retains in
//! memory for panel replay, each kept once as its final serialized JSON
//! (an `Arc<str>` shared with the live panel fan-out) plus its
//! `hub_sequence`, bounded by an event count and a UTF-8 byte ceiling.
//!
//! Pure data structure: no I/O and no locks. It lives in a session's
//! registry entry and is touched only by whichever thread holds that lock
//! (the worker reader pushing, panel connection threads replaying).

use std::collections::VecDeque;
use std::sync::Arc;

/// One retained event: its sequence and the exact JSON the panel receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub hub_sequence: u64,
    pub json: Arc<str>,
}

/// How a pushed entry was kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// The JSON as given.
    Full,
    /// The JSON alone exceeded the byte ceiling; the caller's omission
    /// record was stored in its place.
    Omitted,
    /// Not even the omission record fit: the ring was emptied and nothing
    /// was stored (a retention gap). The sequence is still consumed.
    Gap,
}

/// The outcome of [`Transcript::push`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pushed {
    /// The sequence the entry consumed.
    pub hub_sequence: u64,
    pub stored: Stored,
    /// Older entries evicted to make room (or emptied by a gap).
    pub evicted: usize,
    /// Their JSON bytes.
    pub evicted_bytes: usize,
}

/// What [`Transcript::tail`] does with one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    Skip,
    Keep,
    /// Keep it, and look no further back.
    Boundary,
}

/// A bounded ring of retained events, oldest first.
#[derive(Debug)]
pub struct Transcript {
    max_events: usize,
    max_bytes: usize,
    entries: VecDeque<Entry>,
    bytes: usize,
    next_sequence: u64,
    latest: u64,
    evicted: u64,
    gaps: u64,
}

impl Transcript {
    /// An empty transcript keeping at most `max_events` entries and
    /// `max_bytes` JSON bytes (`limits.transcriptEvents`,
    /// `limits.transcriptBytes`).
    pub fn new(max_events: usize, max_bytes: usize) -> Transcript {
        Transcript {
            max_events,
            max_bytes,
            entries: VecDeque::new(),
            bytes: 0,
            next_sequence: 1,
            latest: 0,
            evicted: 0,
            gaps: 0,
        }
    }

    /// Next hub_sequence to be assigned (1 for a new transcript). Sequences
    /// start at 1 per transcript and never repeat.
    pub fn next_sequence(&self) -> u64 {
        self.next_sequence
    }

    /// Appends an entry the caller built with [`next_sequence`]
    /// (`"hub_sequence":N` in compact JSON; checked in debug builds), then
    /// evicts the oldest entries while the count or byte ceiling is
    /// exceeded. An entry larger than the byte ceiling by itself is replaced
    /// by `omission(sequence, original_bytes)`; if that does not fit either,
    /// the ring is emptied and the push is counted as a retention gap. The
    /// sequence is consumed in every case.
    ///
    /// [`next_sequence`]: Transcript::next_sequence
    pub fn push(
        &mut self,
        json: Arc<str>,
        omission: impl FnOnce(u64, usize) -> Arc<str>,
    ) -> Pushed {
        let seq = self.next_sequence;
        debug_assert!(
            carries_sequence(&json, seq),
            "transcript entry does not carry \"hub_sequence\":{seq}"
        );
        self.next_sequence += 1;

        let (json, stored) = if json.len() <= self.max_bytes {
            (json, Stored::Full)
        } else {
            let record = omission(seq, json.len());
            debug_assert!(
                carries_sequence(&record, seq),
                "omission record does not carry \"hub_sequence\":{seq}"
            );
            (record, Stored::Omitted)
        };

        if json.len() > self.max_bytes || self.max_events == 0 {
            let evicted = self.entries.len();
            let evicted_bytes = self.bytes;
            self.entries.clear();
            self.bytes = 0;
            self.evicted += evicted as u64;
            self.gaps += 1;
            return Pushed {
                hub_sequence: seq,
                stored: Stored::Gap,
                evicted,
                evicted_bytes,
            };
        }

        self.bytes += json.len();
        self.entries.push_back(Entry {
            hub_sequence: seq,
            json,
        });
        self.latest = seq;
        let mut evicted = 0;
        let mut evicted_bytes = 0;
        while self.entries.len() > self.max_events || self.bytes > self.max_bytes {
            // The new entry fits alone, so the loop stops before reaching it.
            let Some(old) = self.entries.pop_front() else {
                break;
            };
            self.bytes -= old.json.len();
            evicted += 1;
            evicted_bytes += old.json.len();
        }
        self.evicted += evicted as u64;
        Pushed {
            hub_sequence: seq,
            stored,
            evicted,
            evicted_bytes,
        }
    }

    /// Entries with hub_sequence > `since`, oldest first, at most `limit`.
    pub fn since(&self, since: u64, limit: usize) -> Vec<Entry> {
        self.after(since).take(limit).cloned().collect()
    }

    /// The JSON text of [`Transcript::since`]'s entries (what every
    /// front-end forwards).
    pub fn texts_since(&self, since: u64, limit: usize) -> Vec<Arc<str>> {
        self.after(since)
            .take(limit)
            .map(|e| e.json.clone())
            .collect()
    }

    fn after(&self, since: u64) -> impl Iterator<Item = &Entry> {
        let start = self.entries.partition_point(|e| e.hub_sequence <= since);
        self.entries.range(start..)
    }

    /// The newest entries `pick` selects, oldest first, at most
    /// `max_bytes` of their JSON together: the walk goes back from the
    /// newest entry, skips what `pick` answers [`Pick::Skip`] to, and ends
    /// at the first entry that does not fit or that `pick` calls a
    /// [`Pick::Boundary`] (which is kept when it fits).
    pub fn tail(&self, max_bytes: usize, mut pick: impl FnMut(&str) -> Pick) -> Vec<Entry> {
        let mut out = Vec::new();
        let mut bytes = 0;
        for entry in self.entries.iter().rev() {
            let choice = pick(&entry.json);
            if choice == Pick::Skip {
                continue;
            }
            if bytes + entry.json.len() > max_bytes {
                break;
            }
            bytes += entry.json.len();
            out.push(entry.clone());
            if choice == Pick::Boundary {
                break;
            }
        }
        out.reverse();
        out
    }

    /// hub_sequence of the newest entry ever stored (full or omission
    /// record), even if since evicted; 0 if none ever. A retention gap does
    /// not advance it (`next_sequence() - 1` does).
    pub fn latest(&self) -> u64 {
        self.latest
    }

    /// Entries retained now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is retained now.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// JSON bytes retained now (actual UTF-8 bytes).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The byte ceiling (`limits.transcriptBytes`).
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// The event-count ceiling (`limits.transcriptEvents`).
    pub fn max_events(&self) -> usize {
        self.max_events
    }

    /// Entries evicted over the transcript's lifetime (including those
    /// emptied by a retention gap).
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Pushes that became retention gaps.
    pub fn gaps(&self) -> u64 {
        self.gaps
    }

    /// hub_sequence of the oldest retained entry.
    pub fn first_retained(&self) -> Option<u64> {
        self.entries.front().map(|e| e.hub_sequence)
    }
}

/// Whether compact JSON text carries `"hub_sequence":seq` (anywhere, so the
/// envelope may be wrapped in a panel frame). Debug check only.
fn carries_sequence(json: &str, seq: u64) -> bool {
    let needle = format!("\"hub_sequence\":{seq}");
    json.match_indices(&needle).any(|(at, _)| {
        !json[at + needle.len()..]
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_digit())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testkit::Rng;

    /// An event of exactly `len` bytes carrying `seq` (len must be >= the
    /// minimal JSON for that sequence).
    fn event(seq: u64, len: usize) -> Arc<str> {
        let head = format!("{{\"hub_sequence\":{seq},\"p\":\"");
        let tail = "\"}";
        let min = head.len() + tail.len();
        assert!(len >= min, "event of {len} bytes cannot carry seq {seq}");
        format!("{head}{}{tail}", "x".repeat(len - min)).into()
    }

    fn min_len(seq: u64) -> usize {
        format!("{{\"hub_sequence\":{seq},\"p\":\"\"}}").len()
    }

    fn omission(seq: u64, bytes: usize) -> Arc<str> {
        format!("{{\"hub_sequence\":{seq},\"omitted_bytes\":{bytes}}}").into()
    }

    fn no_omission(_: u64, _: usize) -> Arc<str> {
        panic!("omission built for an entry that fits")
    }

    fn push_len(t: &mut Transcript, len: usize) -> Pushed {
        let seq = t.next_sequence();
        t.push(event(seq, len), omission)
    }

    fn seqs(entries: &[Entry]) -> Vec<u64> {
        entries.iter().map(|e| e.hub_sequence).collect()
    }

    #[test]
    fn the_tail_is_the_newest_picked_entries_within_the_bytes() {
        let mut t = Transcript::new(100, 1_000_000);
        for _ in 0..10 {
            push_len(&mut t, 40);
        }
        let odd = |j: &str| {
            if j.contains("\"hub_sequence\":3,") {
                Pick::Boundary
            } else if j.contains("\"hub_sequence\":6,") {
                Pick::Skip
            } else {
                Pick::Keep
            }
        };
        assert_eq!(seqs(&t.tail(1_000, odd)), [3, 4, 5, 7, 8, 9, 10]);
        // 3 entries of 40 bytes fit in 120, not a fourth.
        assert_eq!(seqs(&t.tail(120, odd)), [8, 9, 10]);
        assert_eq!(seqs(&t.tail(119, odd)), [9, 10]);
        assert!(t.tail(1_000, |_| Pick::Skip).is_empty());
    }

    #[test]
    fn new_transcript_is_empty() {
        let t = Transcript::new(3, 1000);
        assert_eq!(t.next_sequence(), 1);
        assert_eq!(t.latest(), 0);
        assert_eq!(t.len(), 0);
        assert!(t.is_empty());
        assert_eq!(t.bytes(), 0);
        assert_eq!(t.evicted(), 0);
        assert_eq!(t.gaps(), 0);
        assert_eq!(t.first_retained(), None);
        assert!(t.since(0, 10).is_empty());
    }

    #[test]
    fn count_ceiling_exactly_fits_then_evicts_oldest() {
        let mut t = Transcript::new(3, 1_000_000);
        for seq in 1..=3 {
            let p = t.push(event(seq, 40), no_omission);
            assert_eq!(
                p,
                Pushed {
                    hub_sequence: seq,
                    stored: Stored::Full,
                    evicted: 0,
                    evicted_bytes: 0
                }
            );
        }
        assert_eq!(t.len(), 3);
        assert_eq!(t.bytes(), 120);
        let p = t.push(event(4, 40), no_omission);
        assert_eq!((p.evicted, p.evicted_bytes), (1, 40));
        assert_eq!(seqs(&t.since(0, 10)), vec![2, 3, 4]);
        assert_eq!(t.first_retained(), Some(2));
        assert_eq!(t.evicted(), 1);
        assert_eq!(t.bytes(), 120);
    }

    #[test]
    fn byte_ceiling_exactly_fits_then_one_more_byte_evicts() {
        let mut t = Transcript::new(100, 100);
        t.push(event(1, 50), no_omission);
        let p = t.push(event(2, 50), no_omission);
        assert_eq!(p.evicted, 0);
        assert_eq!(t.bytes(), 100);
        assert_eq!(t.len(), 2);

        // 100 + 1 > 100: the oldest goes.
        let mut t = Transcript::new(100, 100);
        t.push(event(1, 50), no_omission);
        let p = t.push(event(2, 51), no_omission);
        assert_eq!((p.evicted, p.evicted_bytes), (1, 50));
        assert_eq!(t.bytes(), 51);
        assert_eq!(t.first_retained(), Some(2));
    }

    #[test]
    fn one_large_entry_evicts_several() {
        let mut t = Transcript::new(100, 100);
        for _ in 0..4 {
            push_len(&mut t, 25);
        }
        let p = push_len(&mut t, 80);
        assert_eq!((p.evicted, p.evicted_bytes), (4, 100));
        assert_eq!(seqs(&t.since(0, 10)), vec![5]);
        // An entry of exactly max_bytes is stored as is.
        let p = push_len(&mut t, 100);
        assert_eq!(p.stored, Stored::Full);
        assert_eq!((p.evicted, p.evicted_bytes), (1, 80));
        assert_eq!(t.bytes(), 100);
    }

    #[test]
    fn bytes_are_utf8_bytes() {
        let mut t = Transcript::new(10, 1000);
        let json: Arc<str> = "{\"hub_sequence\":1,\"p\":\"é€😀\"}".into();
        assert_eq!(json.chars().count() + 6, json.len());
        t.push(json.clone(), no_omission);
        assert_eq!(t.bytes(), json.len());
    }

    #[test]
    fn oversized_entry_becomes_the_omission_record() {
        let mut t = Transcript::new(10, 100);
        push_len(&mut t, 60);
        let mut seen = None;
        let p = t.push(event(2, 101), |seq, bytes| {
            seen = Some((seq, bytes));
            omission(seq, bytes)
        });
        assert_eq!(seen, Some((2, 101)));
        assert_eq!(p.stored, Stored::Omitted);
        let record = omission(2, 101);
        // 60 + the record fits in 100, so nothing is evicted.
        assert_eq!(p.evicted, 0);
        let all = t.since(0, 10);
        assert_eq!(seqs(&all), vec![1, 2]);
        assert_eq!(all[1].json, record);
        assert_eq!(t.bytes(), 60 + record.len());
        assert_eq!(t.latest(), 2);
        assert_eq!(t.gaps(), 0);
    }

    #[test]
    fn omission_record_evicts_like_any_entry() {
        let mut t = Transcript::new(10, 60);
        push_len(&mut t, 50);
        let p = push_len(&mut t, 500);
        assert_eq!(p.stored, Stored::Omitted);
        assert_eq!((p.evicted, p.evicted_bytes), (1, 50));
        assert_eq!(seqs(&t.since(0, 10)), vec![2]);
    }

    #[test]
    fn omission_that_does_not_fit_is_a_gap_that_empties_the_ring() {
        let mut t = Transcript::new(10, 30);
        push_len(&mut t, min_len(1));
        push_len(&mut t, min_len(2));
        assert_eq!(t.len(), 1); // two minimal events exceed 30 bytes
        let before = t.bytes();
        let p = t.push(event(3, 31), |seq, bytes| {
            format!("{{\"hub_sequence\":{seq},\"omitted\":{bytes},\"pad\":\"....\"}}").into()
        });
        assert_eq!(
            p,
            Pushed {
                hub_sequence: 3,
                stored: Stored::Gap,
                evicted: 1,
                evicted_bytes: before
            }
        );
        assert!(t.is_empty());
        assert_eq!(t.bytes(), 0);
        assert_eq!(t.gaps(), 1);
        assert_eq!(t.evicted(), 2);
        assert_eq!(t.first_retained(), None);
        // The gap consumed its sequence but is not the newest retained.
        assert_eq!(t.latest(), 2);
        assert_eq!(t.next_sequence(), 4);
        let p = push_len(&mut t, 25);
        assert_eq!((p.hub_sequence, p.stored), (4, Stored::Full));
        assert_eq!(seqs(&t.since(0, 10)), vec![4]);
        assert_eq!(t.latest(), 4);
    }

    #[test]
    fn since_and_limit() {
        let mut t = Transcript::new(100, 100_000);
        for _ in 0..10 {
            push_len(&mut t, 30);
        }
        assert_eq!(seqs(&t.since(0, 100)), (1..=10).collect::<Vec<_>>());
        assert_eq!(seqs(&t.since(0, 3)), vec![1, 2, 3]);
        assert_eq!(seqs(&t.since(4, 3)), vec![5, 6, 7]);
        assert_eq!(seqs(&t.since(8, 100)), vec![9, 10]);
        assert!(t.since(10, 100).is_empty());
        assert!(t.since(11, 100).is_empty());
        assert!(t.since(u64::MAX, 100).is_empty());
        assert!(t.since(0, 0).is_empty());
        assert_eq!(t.latest(), 10);
    }

    #[test]
    fn since_before_the_first_retained_starts_at_the_oldest() {
        let mut t = Transcript::new(3, 100_000);
        for _ in 0..10 {
            push_len(&mut t, 30);
        }
        assert_eq!(seqs(&t.since(0, 100)), vec![8, 9, 10]);
        assert_eq!(seqs(&t.since(2, 100)), vec![8, 9, 10]);
        assert_eq!(seqs(&t.since(8, 1)), vec![9]);
    }

    #[test]
    fn entries_share_the_callers_json() {
        let mut t = Transcript::new(3, 1000);
        let json = event(1, 40);
        t.push(json.clone(), no_omission);
        assert!(Arc::ptr_eq(&t.since(0, 1)[0].json, &json));
    }

    #[test]
    fn sequences_are_monotonic_across_evictions() {
        let mut t = Transcript::new(2, 100);
        let mut last = 0;
        for i in 0..500 {
            let len = [30, 50, 99, 100, 150, 1000][i % 6];
            let p = push_len(&mut t, len);
            assert_eq!(p.hub_sequence, last + 1);
            last = p.hub_sequence;
            let retained = seqs(&t.since(0, 10));
            assert!(retained.windows(2).all(|w| w[0] < w[1]));
            assert_eq!(retained.last(), Some(&last));
            assert_eq!(t.next_sequence(), last + 1);
        }
    }

    #[test]
    fn zero_event_ceiling_retains_nothing() {
        let mut t = Transcript::new(0, 100);
        let p = push_len(&mut t, 30);
        assert_eq!(p.stored, Stored::Gap);
        assert!(t.is_empty());
        assert_eq!(t.next_sequence(), 2);
    }

    #[test]
    fn carries_sequence_matches_whole_numbers_only() {
        assert!(carries_sequence("{\"hub_sequence\":12}", 12));
        assert!(carries_sequence(
            "{\"e\":{\"hub_sequence\":12,\"x\":1}}",
            12
        ));
        assert!(!carries_sequence("{\"hub_sequence\":123}", 12));
        assert!(!carries_sequence("{\"hub_sequence\":1}", 12));
        assert!(carries_sequence(
            "{\"hub_sequence\":123,\"e\":{\"hub_sequence\":12}}",
            12
        ));
    }

    /// The obvious model: a Vec of (seq, json), evicting from the front.
    #[derive(Default)]
    struct Model {
        entries: Vec<(u64, Arc<str>)>,
        next: u64,
        latest: u64,
        evicted: u64,
        gaps: u64,
    }

    impl Model {
        fn push(
            &mut self,
            max_events: usize,
            max_bytes: usize,
            json: Arc<str>,
        ) -> (Stored, usize, usize) {
            let seq = self.next;
            self.next += 1;
            let (json, stored) = if json.len() > max_bytes {
                (omission(seq, json.len()), Stored::Omitted)
            } else {
                (json, Stored::Full)
            };
            let before_len = self.entries.len();
            let before_bytes = self.total();
            if json.len() > max_bytes || max_events == 0 {
                self.entries.clear();
                self.evicted += before_len as u64;
                self.gaps += 1;
                return (Stored::Gap, before_len, before_bytes);
            }
            self.entries.push((seq, json));
            self.latest = seq;
            let mut n = 0;
            let mut b = 0;
            while self.entries.len() > max_events || self.total() > max_bytes {
                let (_, old) = self.entries.remove(0);
                n += 1;
                b += old.len();
            }
            self.evicted += n as u64;
            (stored, n, b)
        }

        fn total(&self) -> usize {
            self.entries.iter().map(|(_, j)| j.len()).sum()
        }
    }

    #[test]
    fn matches_a_reference_model() {
        let mut rng = Rng::new(0x9E37_79B9_7F4A_7C15);
        let mut outcomes = [0usize; 3];
        for round in 0..20 {
            let max_events = 1 + rng.below(12);
            // Small ceilings make omissions and gaps frequent.
            let max_bytes = match round % 4 {
                // About the size of an omission record.
                0 => 30 + rng.below(20),
                _ => 20 + rng.below(400),
            };
            let mut t = Transcript::new(max_events, max_bytes);
            let mut m = Model {
                next: 1,
                ..Model::default()
            };
            for _ in 0..500 {
                let seq = t.next_sequence();
                assert_eq!(seq, m.next);
                let len = min_len(seq)
                    + match rng.below(10) {
                        0 => rng.below(2000),
                        1..=3 => rng.below(max_bytes + 2),
                        _ => rng.below(60),
                    };
                let json = event(seq, len);
                let p = t.push(json.clone(), omission);
                let (stored, n, b) = m.push(max_events, max_bytes, json);
                outcomes[stored as usize] += 1;
                assert_eq!(
                    (p.hub_sequence, p.stored, p.evicted, p.evicted_bytes),
                    (seq, stored, n, b),
                    "round {round}"
                );
                assert_eq!(t.len(), m.entries.len());
                assert_eq!(t.bytes(), m.total());
                assert!(t.len() <= max_events && t.bytes() <= max_bytes);
                assert_eq!(t.latest(), m.latest);
                assert_eq!(t.evicted(), m.evicted);
                assert_eq!(t.gaps(), m.gaps);
                assert_eq!(t.first_retained(), m.entries.first().map(|e| e.0));

                let since = rng.below((m.next + 2) as usize) as u64;
                let limit = rng.below(max_events + 3);
                let got: Vec<(u64, Arc<str>)> = t
                    .since(since, limit)
                    .into_iter()
                    .map(|e| (e.hub_sequence, e.json))
                    .collect();
                let want: Vec<(u64, Arc<str>)> = m
                    .entries
                    .iter()
                    .filter(|(s, _)| *s > since)
                    .take(limit)
                    .cloned()
                    .collect();
                assert_eq!(got, want, "round {round} since {since} limit {limit}");
            }
        }
        // Every path was exercised: full, omitted and gap.
        assert!(outcomes.iter().all(|&n| n > 0), "{outcomes:?}");
    }
}
