//! The Shard transports' JSONL `Splitter` against a reference model, for
//! any chunking.
//!
//! Input: byte 0 picks the limit (1..=64, or up to 1087 when its top bit
//! is set, from one more byte); the next byte says how many chunk sizes
//! follow (0-15), one byte each (0-31; 0 is an empty push); the rest is the
//! stream, fed in those sizes round-robin.
//!
//! The model is the definition in the module docs, applied to the whole
//! stream at once: split on `\n`; the piece after the last `\n` is the
//! partial line; in every other piece strip one trailing `\r`, skip it
//! when empty, else it is too long past the limit, not UTF-8, or a line.
#![no_main]

use libfuzzer_sys::fuzz_target;
use simplex_hub::wire::shard::jsonl::{Record, Splitter};
use simplex_hub_fuzz::Reader;

#[derive(Debug, PartialEq, Eq)]
enum Owned {
    Line(String),
    TooLong(u64),
    NotUtf8(usize),
}

fn own(r: Record<'_>) -> Owned {
    match r {
        Record::Line(text) => Owned::Line(text.to_owned()),
        Record::TooLong { bytes, .. } => Owned::TooLong(bytes),
        Record::NotUtf8 { bytes } => Owned::NotUtf8(bytes),
    }
}

fn model(stream: &[u8], max: usize) -> (Vec<Owned>, Option<u64>) {
    let mut pieces: Vec<&[u8]> = stream.split(|&b| b == b'\n').collect();
    let partial = pieces.pop().unwrap_or_default();
    let mut out = Vec::new();
    for piece in pieces {
        let line = piece.strip_suffix(b"\r").unwrap_or(piece);
        if line.is_empty() {
            continue;
        }
        out.push(if line.len() > max {
            Owned::TooLong(line.len() as u64)
        } else {
            match std::str::from_utf8(line) {
                Ok(text) => Owned::Line(text.to_owned()),
                Err(_) => Owned::NotUtf8(line.len()),
            }
        });
    }
    let partial = (!partial.is_empty()).then_some(partial.len() as u64);
    (out, partial)
}

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let first = r.u8();
    let max = if first & 0x80 != 0 {
        64 + usize::from(r.u8()) * 4 + usize::from(first & 0x7f)
    } else {
        1 + usize::from(first & 0x3f)
    };
    let count = usize::from(r.u8() & 0x0f);
    let sizes: Vec<usize> = (0..count).map(|_| usize::from(r.u8() & 0x1f)).collect();
    let stream = r.rest();

    let mut splitter = Splitter::new(max);
    let mut got = Vec::new();
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
        splitter.push(chunk, |rec| {
            if let Record::Line(text) = rec {
                assert!(text.len() <= max, "a line over the limit came out");
            }
            got.push(own(rec));
        });
        rest = tail;
    }
    let partial = splitter.finish();
    let (want, want_partial) = model(stream, max);
    assert_eq!(
        got, want,
        "records differ from the model (limit {max}, sizes {sizes:?})"
    );
    assert_eq!(partial, want_partial, "the partial last line differs");
});
