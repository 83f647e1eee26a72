//! JSONL framing for the Shard unix-socket and stdio transports (seed 004,
//! 2.1): one JSON object per line, split on `\n` only, one trailing `\r`
//! stripped, empty lines ignored. `U+2028` and `U+2029` are ordinary
//! characters (the split is on the byte `\n`, which never occurs inside a
//! multi-byte UTF-8 sequence).
//!
//! [`Splitter`] is incremental and pure: bytes arrive in pieces of any
//! size, and every complete line comes out exactly once, in order, as the
//! same records a split of the whole stream would give. A line is
//! borrowed from the piece it arrived in when it lies within it (no
//! allocation on that path); only a line spanning pieces is copied into
//! the splitter's buffer. A line longer than the limit is reported as
//! [`Record::TooLong`] with its length and the limit, and its bytes are
//! discarded as they arrive (memory stays within the limit); a line that
//! is not UTF-8 is [`Record::NotUtf8`]. Either way the next line is read
//! normally. What is left without a `\n` at the end of the stream is
//! reported by [`Splitter::finish`] and dropped.

use crate::wire::line_splitter::find_lf;

/// The default longest line, in bytes (without its `\n` and one `\r`): the
/// same as the WebSocket message limit.
pub const DEFAULT_MAX_LINE: usize = 4 * 1024 * 1024;

/// Buffer capacity kept between lines that span pieces; a larger one (left
/// by a long line) is released once that line is out.
const KEEP_CAPACITY: usize = 64 * 1024;

/// One line of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record<'a> {
    /// A line's text, without its terminator.
    Line(&'a str),
    /// A line of `bytes` bytes, over `max`; its bytes were discarded.
    TooLong { bytes: u64, max: usize },
    /// A line that is not valid UTF-8 (`bytes` long).
    NotUtf8 { bytes: usize },
}

/// The incremental splitter of one input stream.
#[derive(Debug)]
pub struct Splitter {
    max: usize,
    /// The current line's bytes so far, when it spans pieces.
    line: Vec<u8>,
    /// Bytes of the current line discarded past the limit (0: within it).
    discarded: u64,
}

impl Splitter {
    /// A splitter for lines of at most `max` bytes.
    pub fn new(max: usize) -> Splitter {
        Splitter {
            max,
            line: Vec::new(),
            discarded: 0,
        }
    }

    /// The limit.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Feeds `chunk`; `each` is called for every line it completes, in
    /// order.
    pub fn push(&mut self, chunk: &[u8], mut each: impl FnMut(Record<'_>)) {
        let mut rest = chunk;
        while let Some(nl) = find_lf(rest) {
            let (piece, after) = (&rest[..nl], &rest[nl + 1..]);
            rest = after;
            if self.line.is_empty() && self.discarded == 0 {
                // The whole line is in this piece: borrow it.
                if let Some(record) = classify(piece, self.max) {
                    each(record);
                }
                continue;
            }
            self.take(piece);
            let record = if self.discarded > 0 {
                let bytes = self.discarded + self.line.len() as u64;
                let trailing_cr = self.line.last() == Some(&b'\r');
                Some(Record::TooLong {
                    bytes: bytes - u64::from(trailing_cr),
                    max: self.max,
                })
            } else {
                classify(&self.line, self.max)
            };
            if let Some(record) = record {
                each(record);
            }
            self.line.clear();
            if self.line.capacity() > KEEP_CAPACITY {
                self.line = Vec::new();
            }
            self.discarded = 0;
        }
        self.take(rest);
    }

    /// The end of the stream: the length of a partial last line that is
    /// dropped (`None` when the stream ended with a `\n`).
    pub fn finish(&mut self) -> Option<u64> {
        let partial = self.discarded + self.line.len() as u64;
        self.line = Vec::new();
        self.discarded = 0;
        (partial > 0).then_some(partial)
    }

    /// Keeps `bytes` of the current line, discarding what goes past the
    /// limit (one byte more is kept: it may be the `\r` that is stripped).
    fn take(&mut self, bytes: &[u8]) {
        if self.discarded > 0 {
            // Only the last byte matters now (a trailing `\r`).
            if let Some(&last) = bytes.last() {
                self.discarded += self.line.len() as u64 + bytes.len() as u64 - 1;
                self.line.clear();
                self.line.push(last);
            }
            return;
        }
        let room = (self.max + 1).saturating_sub(self.line.len());
        if bytes.len() <= room {
            self.line.extend_from_slice(bytes);
            return;
        }
        let total = self.line.len() as u64 + bytes.len() as u64;
        self.line.clear();
        self.line.push(bytes[bytes.len() - 1]);
        self.discarded = total - 1;
    }
}

/// A complete line's record (`None` for an empty one).
fn classify(line: &[u8], max: usize) -> Option<Record<'_>> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.is_empty() {
        return None;
    }
    if line.len() > max {
        return Some(Record::TooLong {
            bytes: line.len() as u64,
            max,
        });
    }
    Some(match std::str::from_utf8(line) {
        Ok(text) => Record::Line(text),
        Err(_) => Record::NotUtf8 { bytes: line.len() },
    })
}

/// One output line: compact JSON and its `\n`. Compact JSON escapes every
/// control character inside strings, so the text holds no raw newline.
pub fn encode_line(value: &serde_json::Value) -> String {
    let mut line = value.to_string();
    debug_assert!(!line.contains('\n'));
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the splitter gives for `input` fed in pieces of `sizes` (cycled).
    fn split(input: &[u8], max: usize, sizes: &[usize]) -> (Vec<String>, Option<u64>) {
        let mut s = Splitter::new(max);
        let mut out = Vec::new();
        let mut at = 0;
        let mut i = 0;
        while at < input.len() {
            let n = sizes[i % sizes.len()].max(1).min(input.len() - at);
            s.push(&input[at..at + n], |r| out.push(format!("{r:?}")));
            at += n;
            i += 1;
        }
        (out, s.finish())
    }

    #[test]
    fn lines_split_on_lf_only_with_one_cr_stripped() {
        let input =
            "{\"a\":1}\r\n\n{\"b\":\"x\u{2028}y\u{2029}z\"}\n\r\n{\"c\":\"\r\"}\r\r\n".as_bytes();
        let (out, rest) = split(input, 64, &[input.len()]);
        assert_eq!(
            out,
            [
                "Line(\"{\\\"a\\\":1}\")",
                "Line(\"{\\\"b\\\":\\\"x\\u{2028}y\\u{2029}z\\\"}\")",
                "Line(\"{\\\"c\\\":\\\"\\r\\\"}\\r\")",
            ]
        );
        assert_eq!(rest, None);
        // Any piece sizes give the same records.
        for sizes in [&[1][..], &[2, 3], &[7, 1, 5], &[13]] {
            assert_eq!(split(input, 64, sizes).0, out, "{sizes:?}");
        }
    }

    #[test]
    fn a_line_over_the_limit_is_reported_and_the_next_one_read() {
        let mut input = vec![b'x'; 20];
        input.extend_from_slice(b"\r\n{}\n");
        input.extend_from_slice(&[b'y'; 10]);
        input.extend_from_slice(b"\r\n");
        input.extend_from_slice(&[b'z'; 11]);
        input.extend_from_slice(b"\n");
        for sizes in [&[input.len()][..], &[1], &[3, 4], &[9]] {
            let (out, rest) = split(&input, 10, sizes);
            assert_eq!(
                out,
                [
                    "TooLong { bytes: 20, max: 10 }",
                    "Line(\"{}\")",
                    "Line(\"yyyyyyyyyy\")",
                    "TooLong { bytes: 11, max: 10 }",
                ],
                "{sizes:?}"
            );
            assert_eq!(rest, None);
        }
    }

    #[test]
    fn memory_stays_within_the_limit_for_a_huge_line() {
        let mut s = Splitter::new(100);
        let chunk = vec![b'a'; 4096];
        for _ in 0..1000 {
            s.push(&chunk, |r| panic!("no line yet: {r:?}"));
            assert!(s.line.len() <= 101);
        }
        let mut got = None;
        s.push(b"\n", |r| got = Some(format!("{r:?}")));
        assert_eq!(got.unwrap(), "TooLong { bytes: 4096000, max: 100 }");
    }

    #[test]
    fn invalid_utf8_spoils_its_line_only() {
        let input = b"{\"a\":\"\xff\"}\n{\"b\":2}\n\xe2\x80\n";
        for sizes in [&[input.len()][..], &[1], &[5]] {
            let (out, _) = split(input, 64, sizes);
            assert_eq!(
                out,
                [
                    "NotUtf8 { bytes: 9 }",
                    "Line(\"{\\\"b\\\":2}\")",
                    "NotUtf8 { bytes: 2 }"
                ],
                "{sizes:?}"
            );
        }
    }

    #[test]
    fn a_partial_last_line_is_dropped_and_counted() {
        assert_eq!(split(b"{}\n{\"a\"", 64, &[3]).1, Some(4));
        let mut long = b"{}\n".to_vec();
        long.extend_from_slice(&[b'q'; 300]);
        assert_eq!(split(&long, 64, &[7]).1, Some(300));
        assert_eq!(split(b"{}\n", 64, &[1]).1, None);
    }

    #[test]
    fn a_line_of_exactly_the_limit_passes_with_or_without_cr() {
        for input in [&b"0123456789\n"[..], b"0123456789\r\n"] {
            for sizes in [&[input.len()][..], &[1], &[4]] {
                let (out, _) = split(input, 10, sizes);
                assert_eq!(out, ["Line(\"0123456789\")"], "{input:?} {sizes:?}");
            }
        }
    }

    #[test]
    fn a_line_within_one_piece_is_borrowed_from_it() {
        // The fast path: no copy (and no allocation) per line.
        let chunk = b"{\"a\":1}\r\n{\"b\":2}\n{\"c\"";
        let range = chunk.as_ptr_range();
        let mut s = Splitter::new(64);
        let mut seen = 0;
        s.push(chunk, |r| {
            let Record::Line(text) = r else {
                panic!("{r:?}")
            };
            assert!(range.contains(&text.as_ptr()), "{text} was copied");
            seen += 1;
        });
        assert_eq!(seen, 2);
        assert_eq!(s.line.len(), 4, "only the unfinished line is kept");
        // A line spanning pieces is the one that is copied.
        s.push(b":3}\n", |r| assert_eq!(r, Record::Line("{\"c\":3}")));
    }

    #[test]
    fn an_encoded_line_is_one_line() {
        let v = serde_json::json!({"text": "a\nb\r\u{2028}", "n": 1});
        let line = encode_line(&v);
        assert_eq!(line.matches('\n').count(), 1);
        assert!(line.ends_with('\n'));
        let (out, _) = split(line.as_bytes(), 1024, &[3]);
        assert_eq!(out.len(), 1);
    }
}
