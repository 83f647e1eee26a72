//! `LineSplitter` against a reference model, for any chunking.
//!
//! Input: byte 0 picks the cap (4..=67, or up to 1027 when its top bit is
//! set, from one more byte); the next byte says how many chunk sizes follow
//! (0-15), one byte each (0-31; 0 is an empty push); the rest is the pipe's
//! byte stream, fed in those sizes round-robin.
//!
//! The model is the definition in the module docs: lossy-decode the whole
//! stream, split on LF (a trailing empty piece is no line), strip one CR
//! per line, keep at most `cap` bytes cut at a char boundary and append
//! ` [hub: truncated N UTF-8 bytes]`, N counting decoded bytes (U+FFFD is 3).
#![no_main]

use libfuzzer_sys::fuzz_target;
use simplex_hub::wire::line_splitter::{
    reference_lines, truncation_annotation, Line, LineSplitter, MIN_CAP,
};
use simplex_hub_fuzz::Reader;

/// Feeds `stream` in `sizes` round-robin, checking the memory bound after
/// every push.
fn run(splitter: &mut LineSplitter, stream: &[u8], sizes: &[usize], cap: usize) -> Vec<Line> {
    let mut out = Vec::new();
    let mut rest = stream;
    let progress = sizes.iter().any(|&s| s > 0);
    let mut i = 0;
    while !rest.is_empty() {
        let n = if progress {
            sizes[i % sizes.len()]
        } else {
            rest.len()
        };
        i += 1;
        let (chunk, tail) = rest.split_at(n.min(rest.len()));
        splitter.push(chunk, &mut out);
        rest = tail;
        assert!(
            splitter.buffered_bytes() <= cap + 4,
            "buffered {} > cap {cap} + 4",
            splitter.buffered_bytes()
        );
    }
    splitter.finish(&mut out);
    assert_eq!(splitter.buffered_bytes(), 0, "state left after finish");
    out
}

fn replacements(lines: &[Line]) -> usize {
    lines
        .iter()
        .map(|l| l.text.matches('\u{FFFD}').count())
        .sum()
}

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let b = r.u8();
    let cap = if b & 0x80 != 0 {
        MIN_CAP + ((usize::from(b & 0x03) << 8) | usize::from(r.u8()))
    } else {
        MIN_CAP + usize::from(b & 0x3F)
    };
    let count = usize::from(r.u8() % 16);
    let sizes: Vec<usize> = r.bytes(count).iter().map(|b| usize::from(b % 32)).collect();
    let stream = r.rest();

    let expect = reference_lines(stream, cap);
    let mut splitter = LineSplitter::with_cap(cap);
    let got = run(&mut splitter, stream, &sizes, cap);
    for line in &got {
        let limit = if line.truncated_bytes > 0 {
            cap + truncation_annotation(line.truncated_bytes).len()
        } else {
            cap
        };
        assert!(line.text.len() <= limit, "line over cap: {line:?}");
    }
    assert_eq!(replacements(&got), replacements(&expect), "U+FFFD differ");
    assert_eq!(got, expect, "cap {cap}, sizes {sizes:?}");

    // After finish the splitter starts a fresh stream: a second pass, in
    // one piece this time, gives the same lines.
    let again = run(&mut splitter, stream, &[], cap);
    assert_eq!(again, expect, "second stream on a reused splitter");
});
