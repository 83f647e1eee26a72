//! Bounded display copies.
//!
//! `wire::worker::display::preview(value, budget)`: the encoding of the preview
//! is at most `max(budget, 64)` bytes; when the original fits it is
//! returned identical and unmarked, otherwise it is flagged and carries a
//! `display_*` marker; `original_bytes`, `encoded_len` and
//! `encoded_len_capped` agree with really encoding the value; `deep_clone`
//! is a clone, even past `MAX_PREVIEW_DEPTH` and serde_json's nesting limit.
//!
//! `util::log_ring`: a ring stays within its line count and byte ceiling,
//! every kept line within the ceiling, a previewed line is a prefix of the
//! original plus the combined truncation annotation, and the truncated
//! byte total adds up; `panel_tail` previews stay within `line_cap` and
//! their sum within `budget`, the newest lines first to be shown.
//!
//! Input: two bytes of budget, one byte of extra nesting, then a JSON
//! document. The log ring reads its limits from the first bytes and feeds
//! the whole input through a `LineSplitter`, so lines carry real
//! truncation annotations.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use simplex_hub::harness::log_ring::{
    panel_tail, LogRing, Stream, MIN_RING_BYTES, OMITTED_PREFIX, OMITTED_SUFFIX,
};
use simplex_hub::wire::line_splitter::{truncation_annotation, Line, LineSplitter};
use simplex_hub::wire::worker::display::{
    deep_clone, encoded_len, encoded_len_capped, preview, MIN_BUDGET,
};
use simplex_hub_fuzz::{encode, has_key, Reader};

const MARKERS: &[&str] = &[
    "display_truncated",
    "display_omitted",
    "display_omitted_keys",
];

fn check_preview(value: &Value, budget: usize) {
    let encoded = encode(value).len();
    assert_eq!(encoded_len(value), encoded);
    for cap in [0, budget, encoded.saturating_sub(1), encoded] {
        let n = encoded_len_capped(value, cap);
        if encoded <= cap {
            assert_eq!(n, encoded, "capped at {cap}");
        } else {
            assert!(n > cap, "capped at {cap}: {n} for {encoded}");
        }
    }
    assert!(deep_clone(value) == *value);

    let p = preview(value, budget);
    let limit = budget.max(MIN_BUDGET);
    assert_eq!(p.original_bytes, encoded);
    let shown = encode(&p.value).len();
    assert!(shown <= limit, "preview of {shown} bytes over {limit}");
    if encoded <= limit {
        assert!(!p.truncated);
        assert!(p.value == *value, "fitting value changed");
    } else {
        assert!(p.truncated);
        assert!(MARKERS.iter().any(|m| has_key(&p.value, m)), "unmarked");
    }
}

/// `[[[..value..]]]`, `depth` arrays deep.
fn nest(value: Value, depth: usize) -> Value {
    (0..depth).fold(value, |v, _| Value::Array(vec![v]))
}

fn check_ring(r: &mut Reader, input: &[u8]) {
    let max_lines = usize::from(r.u8() % 16);
    let max_bytes = usize::from(r.u16() % 512);
    let ceiling = max_bytes.max(MIN_RING_BYTES);
    let cap = 4 + usize::from(r.u16() % 1024);
    let mut splitter = LineSplitter::with_cap(cap);
    let mut lines = Vec::new();
    splitter.push(input, &mut lines);
    splitter.finish(&mut lines);

    let mut ring = LogRing::new(max_lines, max_bytes);
    let mut truncated = 0u64;
    for (i, line) in lines.iter().enumerate() {
        let before = ring.truncated_bytes();
        let stream = if i % 3 == 0 {
            Stream::Stderr
        } else {
            Stream::Stdout
        };
        ring.push(stream, line.clone(), i as u64);
        let kept = ring.tail(1)[0];
        assert_eq!(
            (kept.stream, kept.at_ms),
            (stream, i as u64),
            "newest line lost"
        );
        assert!(
            kept.text.len() <= ceiling,
            "line of {} over {ceiling}",
            kept.text.len()
        );
        assert!(ring.len() <= max_lines.max(1));
        assert!(ring.bytes() <= ceiling);
        assert_eq!(
            ring.bytes(),
            ring.tail(usize::MAX)
                .iter()
                .map(|l| l.text.len())
                .sum::<usize>()
        );
        let removed = ring.truncated_bytes() - before;
        if kept.text == line.text {
            assert_eq!(removed, line.truncated_bytes);
        } else {
            check_ring_preview(line, &kept.text, removed);
        }
        truncated += removed;
    }
    assert_eq!(ring.truncated_bytes(), truncated);

    let max = usize::from(r.u8());
    let budget = usize::from(r.u16());
    let line_cap = usize::from(r.u16() % 2048);
    let tail = panel_tail(&ring, max, budget, line_cap);
    let (shown, omitted) = (&tail.lines, tail.omitted);
    assert!(shown.len() <= max);
    assert_eq!(shown.len(), tail.meta.len());
    assert_eq!(shown.len() as u64 + omitted, ring.len() as u64);
    let newest = ring.tail(shown.len());
    let mut used = 0;
    for ((text, meta), line) in shown.iter().zip(&tail.meta).zip(newest) {
        let text = text.as_str();
        assert!(
            text.len() <= line_cap,
            "tail line of {} over {line_cap}",
            text.len()
        );
        if !line.text.starts_with(text) {
            // Otherwise a prefix and a notice counting the rest.
            let at = text.rfind(OMITTED_PREFIX).expect("omission notice");
            let count = text[at + OMITTED_PREFIX.len()..]
                .strip_suffix(OMITTED_SUFFIX)
                .and_then(|n| n.parse::<usize>().ok());
            let body = &text[..at];
            assert!(line.text.starts_with(body), "not a prefix");
            assert_eq!(count, Some(line.text.len() - body.len()), "notice count");
        }
        assert_eq!(meta["stream"], line.stream.as_str());
        used += text.len();
    }
    assert!(used <= budget, "tail of {used} over {budget}");
}

/// A line the ring had to cut: a prefix of its content plus one annotation
/// counting everything removed, by the splitter and by the ring.
fn check_ring_preview(line: &Line, kept: &str, removed: u64) {
    let annotation = truncation_annotation(removed);
    let content = match line
        .text
        .strip_suffix(&truncation_annotation(line.truncated_bytes))
    {
        Some(c) if line.truncated_bytes > 0 => c,
        _ => line.text.as_str(),
    };
    match kept.strip_suffix(&annotation) {
        Some(prefix) => {
            assert!(content.starts_with(prefix), "not a prefix");
            let cut = (content.len() - prefix.len()) as u64;
            assert_eq!(removed, line.truncated_bytes + cut);
        }
        None => panic!("cut line without its annotation: {kept:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let budget = usize::from(r.u16());
    let depth = usize::from(r.u8()) * 4;
    let rest = r.rest();
    if let Ok(value) = serde_json::from_slice::<Value>(rest) {
        check_preview(&value, budget);
        if depth > 0 {
            check_preview(&nest(value, depth), budget);
        }
    }
    check_ring(&mut Reader::new(data), data);
});
