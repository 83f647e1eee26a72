//! Incremental UTF-8 decoding and line splitting for one worker pipe.
//!
//! Bytes arrive in arbitrary read-sized pieces; the splitter yields exactly
//! the lines `String::from_utf8_lossy` + split-on-LF would give for the whole
//! stream (CRLF normalized, one trailing CR stripped per line), each capped
//! at `cap` bytes of text with a ` [hub: truncated N UTF-8 bytes]` suffix.
//! Memory stays within about `cap` bytes whatever the input. Pure: no I/O,
//! no clock, no locks, and no input makes it panic.

/// The per-line cap of decoded text a worker pipe keeps.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// The smallest cap [`LineSplitter::with_cap`] accepts (smaller is raised).
pub const MIN_CAP: usize = 4;

/// Text before the count in a truncation annotation.
pub const TRUNCATED_PREFIX: &str = " [hub: truncated ";
/// Text after the count in a truncation annotation.
pub const TRUNCATED_SUFFIX: &str = " UTF-8 bytes]";

const REPLACEMENT: &str = "\u{FFFD}";

/// The annotation a truncated line ends with (leading space included).
pub fn truncation_annotation(discarded: u64) -> String {
    format!("{TRUNCATED_PREFIX}{discarded}{TRUNCATED_SUFFIX}")
}

/// One finished line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// Decoded text without its terminator; ends with the annotation when
    /// `truncated_bytes > 0`.
    pub text: String,
    /// Content bytes (decoded UTF-8) discarded from this line.
    pub truncated_bytes: u64,
}

/// One finished line, borrowed from the input (or, for a line that spans
/// pushes, from the splitter) for the duration of the callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineRef<'a> {
    /// As [`Line::text`].
    pub text: &'a str,
    /// As [`Line::truncated_bytes`].
    pub truncated_bytes: u64,
}

impl LineRef<'_> {
    /// An owned copy.
    pub fn to_line(&self) -> Line {
        Line {
            text: self.text.to_owned(),
            truncated_bytes: self.truncated_bytes,
        }
    }
}

/// Line-buffer capacity kept between lines; a larger buffer (left by a
/// long line) is released once that line is out.
const KEEP_LINE_CAPACITY: usize = 4 * 1024;

/// The decoder and splitter of one pipe (stdout and stderr each own one).
#[derive(Debug)]
pub struct LineSplitter {
    cap: usize,
    /// Kept text of the current line; never longer (nor larger in
    /// capacity) than `cap`.
    line: String,
    /// Content bytes of the current line discarded past the cap.
    discarded: u64,
    /// A CR ending the last piece of text, not yet known to precede LF.
    cr_pending: bool,
    /// A valid but incomplete UTF-8 sequence ending the last push.
    pending: [u8; 4],
    pending_len: usize,
}

impl Default for LineSplitter {
    fn default() -> Self {
        Self::new()
    }
}

impl LineSplitter {
    /// A splitter with the [`MAX_LINE_BYTES`] cap.
    pub fn new() -> Self {
        Self::with_cap(MAX_LINE_BYTES)
    }

    /// A splitter keeping at most `cap` bytes of text per line (raised to
    /// [`MIN_CAP`]).
    pub fn with_cap(cap: usize) -> Self {
        Self {
            cap: cap.max(MIN_CAP),
            line: String::new(),
            discarded: 0,
            cr_pending: false,
            pending: [0; 4],
            pending_len: 0,
        }
    }

    /// Bytes held between calls: the allocated capacity of the current
    /// line plus the carried CR and partial UTF-8 sequence. At most
    /// `cap + 4`.
    pub fn buffered_bytes(&self) -> usize {
        self.line.capacity() + self.pending_len + usize::from(self.cr_pending)
    }

    /// Feeds one read's bytes; complete lines are appended to `out` (one
    /// `String` each; [`push_with`](Self::push_with) allocates none).
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<Line>) {
        self.push_with(bytes, |line| out.push(line.to_line()));
    }

    /// End of stream, appending to `out`; see [`finish_with`](Self::finish_with).
    pub fn finish(&mut self, out: &mut Vec<Line>) {
        self.finish_with(|line| out.push(line.to_line()));
    }

    /// Feeds one read's bytes and hands each complete line to `emit`, in
    /// order. A line that lies within `bytes` is handed over as a slice of
    /// it (no copy, no allocation); only a line that spans pushes, or is
    /// truncated, passes through the splitter's own buffer.
    pub fn push_with<F: FnMut(LineRef<'_>)>(&mut self, bytes: &[u8], mut emit: F) {
        let emit = &mut emit;
        let mut rest = bytes;
        while self.pending_len > 0 && !rest.is_empty() {
            rest = self.resolve_pending(rest, emit);
        }
        if rest.is_empty() {
            return;
        }
        let split = incomplete_tail_start(rest);
        let (body, tail) = rest.split_at(split);
        // The body never ends inside a sequence that more bytes could
        // complete: one cut short there is followed by the tail's lead byte.
        self.decode(body, false, emit);
        self.decode(tail, true, emit);
    }

    /// End of stream: flushes the final partial line, if any. An incomplete
    /// final UTF-8 sequence becomes U+FFFD and a final CR is stripped.
    /// The splitter is then ready for a new stream.
    pub fn finish_with<F: FnMut(LineRef<'_>)>(&mut self, mut emit: F) {
        let emit = &mut emit;
        if self.pending_len > 0 {
            self.pending_len = 0;
            self.feed(REPLACEMENT, emit);
        }
        let started = self.cr_pending || self.discarded > 0 || !self.line.is_empty();
        self.cr_pending = false;
        if started {
            self.emit(emit);
        }
        self.line = String::new();
    }

    /// Decodes `bytes` (starting on a sequence boundary) with the
    /// standard decoder: valid text in one `from_utf8` (its fast path);
    /// from the first error on, in one pass of `Utf8Chunks` (each valid
    /// run, then the invalid sequence after it, which becomes one U+FFFD
    /// as `from_utf8_lossy` makes it). An incomplete sequence at the end
    /// is kept as pending when `may_continue`, replaced otherwise.
    fn decode<F: FnMut(LineRef<'_>)>(&mut self, bytes: &[u8], may_continue: bool, emit: &mut F) {
        let rest = match std::str::from_utf8(bytes) {
            Ok(text) => {
                if !text.is_empty() {
                    self.feed(text, emit);
                }
                return;
            }
            Err(err) => {
                let (valid, rest) = bytes.split_at(err.valid_up_to());
                if let Ok(text) = std::str::from_utf8(valid) {
                    if !text.is_empty() {
                        self.feed(text, emit);
                    }
                }
                rest
            }
        };
        let mut chunks = rest.utf8_chunks().peekable();
        while let Some(chunk) = chunks.next() {
            if !chunk.valid().is_empty() {
                self.feed(chunk.valid(), emit);
            }
            let invalid = chunk.invalid();
            if invalid.is_empty() {
                continue;
            }
            let cut_short = chunks.peek().is_none()
                && invalid.len() < 4
                && std::str::from_utf8(invalid).is_err_and(|err| err.error_len().is_none());
            if may_continue && cut_short {
                self.pending[..invalid.len()].copy_from_slice(invalid);
                self.pending_len = invalid.len();
                return;
            }
            self.feed(REPLACEMENT, emit);
        }
    }

    /// Decodes the first unit of `pending ++ bytes` and returns the input
    /// left after it.
    fn resolve_pending<'a, F: FnMut(LineRef<'_>)>(
        &mut self,
        bytes: &'a [u8],
        emit: &mut F,
    ) -> &'a [u8] {
        let held = self.pending_len;
        let take = bytes.len().min(4);
        let mut tmp = [0u8; 8];
        tmp[..held].copy_from_slice(&self.pending[..held]);
        tmp[held..held + take].copy_from_slice(&bytes[..take]);
        let tmp = &tmp[..held + take];
        let used = match std::str::from_utf8(tmp) {
            Err(err) if err.valid_up_to() == 0 => match err.error_len() {
                Some(n) => {
                    self.feed(REPLACEMENT, emit);
                    n
                }
                None => {
                    // Still incomplete: everything joins the pending bytes.
                    let keep = tmp.len().min(4);
                    self.pending[..keep].copy_from_slice(&tmp[..keep]);
                    self.pending_len = keep;
                    return &[];
                }
            },
            Ok(text) => self.feed_first_char(text, emit),
            Err(err) => {
                let text = std::str::from_utf8(&tmp[..err.valid_up_to()]).unwrap_or("");
                self.feed_first_char(text, emit)
            }
        };
        if used < held {
            // Not reachable for valid-prefix pending bytes; kept total.
            self.pending.copy_within(used..held, 0);
            self.pending_len = held - used;
            bytes
        } else {
            self.pending_len = 0;
            bytes.get(used - held..).unwrap_or(&[])
        }
    }

    /// Feeds the first character of `text`, returning its byte length.
    fn feed_first_char<F: FnMut(LineRef<'_>)>(&mut self, text: &str, emit: &mut F) -> usize {
        let n = text.chars().next().map_or(1, char::len_utf8);
        self.feed(text.get(..n).unwrap_or(""), emit);
        n
    }

    /// Splits decoded text into lines.
    fn feed<F: FnMut(LineRef<'_>)>(&mut self, mut text: &str, emit: &mut F) {
        if text.is_empty() {
            return;
        }
        if self.cr_pending {
            self.cr_pending = false;
            if let Some(after) = text.strip_prefix('\n') {
                self.emit(emit);
                text = after;
            } else {
                self.add("\r");
            }
        }
        while let Some(lf) = find_lf(text.as_bytes()) {
            let segment = &text[..lf];
            let segment = segment.strip_suffix('\r').unwrap_or(segment);
            if self.line.is_empty() && self.discarded == 0 && segment.len() <= self.cap {
                emit(LineRef {
                    text: segment,
                    truncated_bytes: 0,
                });
            } else {
                self.add(segment);
                self.emit(emit);
            }
            text = &text[lf + 1..];
        }
        if let Some(head) = text.strip_suffix('\r') {
            self.cr_pending = true;
            text = head;
        }
        self.add(text);
    }

    /// Adds line content, keeping at most `cap` bytes.
    fn add(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        if self.discarded > 0 {
            self.discarded = self.discarded.saturating_add(text.len() as u64);
            return;
        }
        let room = self.cap.saturating_sub(self.line.len());
        let kept = floor_char_boundary(text, room);
        if kept > 0 {
            if self.line.capacity() - self.line.len() < kept {
                let want = (self.line.capacity() * 2)
                    .max(self.line.len() + kept)
                    .max(64)
                    .min(self.cap);
                self.line.reserve_exact(want - self.line.len());
            }
            self.line.push_str(&text[..kept]);
        }
        self.discarded = (text.len() - kept) as u64;
    }

    /// Ends the current line.
    fn emit<F: FnMut(LineRef<'_>)>(&mut self, emit: &mut F) {
        let truncated_bytes = std::mem::take(&mut self.discarded);
        if truncated_bytes > 0 {
            let annotation = truncation_annotation(truncated_bytes);
            let mut text = String::with_capacity(self.line.len() + annotation.len());
            text.push_str(&self.line);
            text.push_str(&annotation);
            emit(LineRef {
                text: &text,
                truncated_bytes,
            });
        } else {
            emit(LineRef {
                text: &self.line,
                truncated_bytes: 0,
            });
        }
        if self.line.capacity() > KEEP_LINE_CAPACITY {
            self.line = String::new();
        } else {
            self.line.clear();
        }
    }
}

/// The largest char boundary of `text` at or below `limit`.
pub fn floor_char_boundary(text: &str, limit: usize) -> usize {
    if limit >= text.len() {
        return text.len();
    }
    let mut i = limit;
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The index of the first LF: 16 bytes per step with the SWAR zero-byte
/// test (the lowest flagged byte is always exact), then a plain scan.
pub fn find_lf(bytes: &[u8]) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    const LF: u64 = LO * b'\n' as u64;
    let word = |b: &[u8]| u64::from_le_bytes(<[u8; 8]>::try_from(b).unwrap_or_default()) ^ LF;
    let hit = |w: u64| w.wrapping_sub(LO) & !w & HI;
    let mut blocks = bytes.chunks_exact(16);
    let mut at = 0;
    for block in &mut blocks {
        let (a, b) = block.split_at(8);
        let (a, b) = (hit(word(a)), hit(word(b)));
        if a != 0 {
            return Some(at + (a.trailing_zeros() / 8) as usize);
        }
        if b != 0 {
            return Some(at + 8 + (b.trailing_zeros() / 8) as usize);
        }
        at += 16;
    }
    blocks
        .remainder()
        .iter()
        .position(|&b| b == b'\n')
        .map(|p| at + p)
}

/// Where a trailing sequence that later bytes might complete starts
/// (`bytes.len()` when the end is not inside such a sequence).
fn incomplete_tail_start(bytes: &[u8]) -> usize {
    let len = bytes.len();
    for back in 1..=len.min(3) {
        let b = bytes[len - back];
        if b & 0xC0 == 0x80 {
            continue;
        }
        let width = match b {
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => 1,
        };
        return if width > back { len - back } else { len };
    }
    len
}

/// The reference model the splitter is checked against by its unit tests
/// and the `line_splitter` fuzz target (not used by the hub): lossy-decode
/// the whole stream, split on LF, strip one trailing CR per line, keep at
/// most `cap` bytes cut at a char boundary plus the truncation annotation.
#[doc(hidden)]
pub fn reference_lines(input: &[u8], cap: usize) -> Vec<Line> {
    let text = String::from_utf8_lossy(input);
    let mut parts: Vec<&str> = text.split('\n').collect();
    if parts.last() == Some(&"") {
        parts.pop();
    }
    parts
        .into_iter()
        .map(|p| {
            let p = p.strip_suffix('\r').unwrap_or(p);
            if p.len() <= cap {
                return Line {
                    text: p.to_owned(),
                    truncated_bytes: 0,
                };
            }
            let mut cut = cap;
            while !p.is_char_boundary(cut) {
                cut -= 1;
            }
            let n = (p.len() - cut) as u64;
            Line {
                text: format!("{}{}", &p[..cut], truncation_annotation(n)),
                truncated_bytes: n,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testkit::Rng;

    fn run(chunks: &[&[u8]], cap: usize) -> Vec<Line> {
        let mut s = LineSplitter::with_cap(cap);
        let mut out = Vec::new();
        for c in chunks {
            s.push(c, &mut out);
            assert!(s.buffered_bytes() <= s.cap + 4);
        }
        s.finish(&mut out);
        assert_eq!(s.buffered_bytes(), 0);
        out
    }

    fn run_split(input: &[u8], cuts: &[usize], cap: usize) -> Vec<Line> {
        let mut chunks = Vec::new();
        let mut at = 0;
        for &c in cuts {
            chunks.push(&input[at..c]);
            at = c;
        }
        chunks.push(&input[at..]);
        run(&chunks, cap)
    }

    fn texts(lines: &[Line]) -> Vec<&str> {
        lines.iter().map(|l| l.text.as_str()).collect()
    }

    const PIECES: &[&[u8]] = &[
        b"a",
        b"xyz",
        b"hello world",
        b"\n",
        b"\r",
        b"\r\n",
        b"\r\r\n",
        "é".as_bytes(),
        "€".as_bytes(),
        "😀".as_bytes(),
        "日本".as_bytes(),
        b"\x80",
        b"\xFF",
        b"\xC0\xAF",
        b"\xE2\x82",
        b"\xF0\x9F\x98",
        b"\xED\xA0\x80",
        b"\xF4\x90\x80\x80",
        b"\xE0\x80",
        b"\xC3",
        b"",
    ];

    fn generate(rng: &mut Rng, max_pieces: usize, cap: usize) -> Vec<u8> {
        let mut v = Vec::new();
        for _ in 0..rng.below(max_pieces + 1) {
            match rng.below(12) {
                0 => {
                    // A long run beyond the cap, sometimes multi-byte.
                    let unit: &[u8] = if rng.below(2) == 0 {
                        b"q"
                    } else {
                        "ß".as_bytes()
                    };
                    for _ in 0..cap + rng.below(cap * 2) {
                        v.extend_from_slice(unit);
                    }
                }
                1 => v.push(rng.byte()),
                _ => v.extend_from_slice(rng.pick(PIECES)),
            }
        }
        v
    }

    fn random_cuts(rng: &mut Rng, len: usize) -> Vec<usize> {
        let mut cuts: Vec<usize> = (0..rng.below(len + 1))
            .map(|_| rng.below(len + 1))
            .collect();
        cuts.sort_unstable();
        cuts
    }

    #[test]
    fn matches_model_for_generated_inputs_and_chunkings() {
        let mut rng = Rng::new(0x9E37_79B9_7F4A_7C15);
        for round in 0..600 {
            let cap = MIN_CAP + rng.below(13);
            let input = generate(&mut rng, 1 + round % 40, cap);
            let expect = reference_lines(&input, cap);
            assert_eq!(run(&[&input], cap), expect, "whole, cap {cap}: {input:?}");
            let ones: Vec<&[u8]> = input.chunks(1).collect();
            assert_eq!(run(&ones, cap), expect, "1-byte chunks: {input:?}");
            for _ in 0..8 {
                let cuts = random_cuts(&mut rng, input.len());
                assert_eq!(
                    run_split(&input, &cuts, cap),
                    expect,
                    "cuts {cuts:?}: {input:?}"
                );
            }
        }
    }

    #[test]
    fn matches_model_for_every_chunking_of_short_inputs() {
        let mut rng = Rng::new(0xD1B5_4A32_D192_ED03);
        let mut inputs: Vec<Vec<u8>> = vec![
            b"ab\r\ncd\re\n".to_vec(),
            "a€\r\n😀x".as_bytes().to_vec(),
            b"\xF0\x9F\x98\r\n\xE2\x82x".to_vec(),
            b"\xED\xA0\x80\xC3\n\r".to_vec(),
            "abcd€\n".as_bytes().to_vec(),
        ];
        while inputs.len() < 60 {
            let v = generate(&mut rng, 6, 4);
            if v.len() <= 11 {
                inputs.push(v);
            }
        }
        for input in &inputs {
            for cap in [4, 5, 6] {
                let expect = reference_lines(input, cap);
                let n = input.len();
                for mask in 0u32..(1 << n.saturating_sub(1)) {
                    let cuts: Vec<usize> = (1..n).filter(|i| mask & (1 << (i - 1)) != 0).collect();
                    assert_eq!(
                        run_split(input, &cuts, cap),
                        expect,
                        "cuts {cuts:?}: {input:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn matches_model_for_random_bytes() {
        let mut rng = Rng::new(0x2545_F491_4F6C_DD1D);
        for _ in 0..400 {
            let len = rng.below(300);
            let input: Vec<u8> = (0..len)
                .map(|_| match rng.below(4) {
                    0 => b'\n',
                    1 => 0x80 | rng.byte(),
                    _ => rng.byte(),
                })
                .collect();
            let cap = MIN_CAP + rng.below(40);
            let expect = reference_lines(&input, cap);
            assert_eq!(run(&[&input], cap), expect);
            let cuts = random_cuts(&mut rng, input.len());
            assert_eq!(run_split(&input, &cuts, cap), expect);
        }
    }

    #[test]
    fn multibyte_split_at_every_point() {
        for ch in ["é", "€", "😀"] {
            let input = format!("a{ch}b\n");
            let bytes = input.as_bytes();
            for cut in 0..=bytes.len() {
                let out = run_split(bytes, &[cut], 64);
                assert_eq!(texts(&out), [format!("a{ch}b")]);
            }
            for a in 0..=bytes.len() {
                for b in a..=bytes.len() {
                    assert_eq!(texts(&run_split(bytes, &[a, b], 64)), [format!("a{ch}b")]);
                }
            }
        }
    }

    #[test]
    fn crlf_split_across_pushes() {
        let out = run(&[b"one\r", b"\ntwo\r", b"\r\n", b"three\r\n"], 64);
        assert_eq!(texts(&out), ["one", "two\r", "three"]);
        assert!(out.iter().all(|l| l.truncated_bytes == 0));
    }

    #[test]
    fn lone_cr_is_kept() {
        let out = run(&[b"a\rb\n", b"c\r", b"d\n"], 64);
        assert_eq!(texts(&out), ["a\rb", "c\rd"]);
    }

    #[test]
    fn final_cr_is_stripped() {
        assert_eq!(texts(&run(&[b"tail\r"], 64)), ["tail"]);
        assert_eq!(texts(&run(&[b"x\n\r"], 64)), ["x", ""]);
    }

    #[test]
    fn invalid_byte_becomes_replacement() {
        let out = run(&[b"a\xFFb\xC0\n"], 64);
        assert_eq!(texts(&out), ["a\u{FFFD}b\u{FFFD}"]);
        // Maximal subpart: E2 82 followed by ASCII is one replacement.
        let out = run(&[b"\xE2", b"\x82x\n"], 64);
        assert_eq!(texts(&out), ["\u{FFFD}x"]);
    }

    #[test]
    fn incomplete_final_char_at_finish() {
        let out = run(&[b"ok\n", b"end\xF0\x9F\x98"], 64);
        assert_eq!(texts(&out), ["ok", "end\u{FFFD}"]);
        let out = run(&[b"\xE2"], 64);
        assert_eq!(texts(&out), ["\u{FFFD}"]);
        assert!(run(&[b"", b"done\n"], 64).len() == 1);
        assert!(run(&[], 64).is_empty());
    }

    #[test]
    fn exactly_cap_has_no_annotation() {
        let out = run(&[b"abcdefgh\n"], 8);
        assert_eq!(
            out,
            [Line {
                text: "abcdefgh".into(),
                truncated_bytes: 0
            }]
        );
        let out = run(&[b"abcdefgh\r\n"], 8);
        assert_eq!(texts(&out), ["abcdefgh"]);
        assert_eq!(out[0].truncated_bytes, 0);
    }

    #[test]
    fn cap_plus_one_is_annotated() {
        let out = run(&[b"abcdefghi\n"], 8);
        assert_eq!(
            out,
            [Line {
                text: "abcdefgh [hub: truncated 1 UTF-8 bytes]".into(),
                truncated_bytes: 1
            }]
        );
    }

    #[test]
    fn cut_respects_char_boundaries_and_counts_replacements() {
        // "abc" + "€" does not fit 5 bytes: "abc" kept, 3 + 3 (U+FFFD) discarded.
        let out = run(&[b"abc\xE2\x82\xAC\xFF\n"], 5);
        assert_eq!(texts(&out), ["abc [hub: truncated 6 UTF-8 bytes]"]);
        assert_eq!(out[0].truncated_bytes, 6);
        // Once truncation starts, later characters that would fit are dropped.
        let out = run(&[b"abcd", "€".as_bytes(), b"e\n"], 5);
        assert_eq!(out[0].truncated_bytes, 4);
        assert!(out[0].text.starts_with("abcd ["));
    }

    #[test]
    fn ten_mib_line_stays_bounded() {
        let cap = MAX_LINE_BYTES;
        // A 9-byte pattern, so 64 KiB chunks split characters; 10 MiB is
        // not a multiple of 9, so the stream ends inside a character.
        let pattern = "ab€😀".as_bytes();
        let data: Vec<u8> = pattern.iter().copied().cycle().take(10 << 20).collect();
        let mut s = LineSplitter::new();
        let mut out = Vec::new();
        for chunk in data.chunks(64 * 1024) {
            s.push(chunk, &mut out);
            assert!(out.is_empty());
            assert!(s.buffered_bytes() <= cap + 4, "{}", s.buffered_bytes());
        }
        s.finish(&mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out, reference_lines(&data, cap));
        let kept = out[0].text.len() - truncation_annotation(out[0].truncated_bytes).len();
        assert!(kept <= cap && kept > cap - 4);
        // Decoded length: the trailing E2 82 (2 bytes) became U+FFFD (3).
        assert_eq!(out[0].truncated_bytes, (data.len() + 1 - kept) as u64);
    }

    #[test]
    fn line_buffer_capacity_never_exceeds_cap() {
        let mut s = LineSplitter::with_cap(1000);
        let mut out = Vec::new();
        for n in [1, 7, 300, 999, 5000] {
            s.push(&vec![b'x'; n], &mut out);
            assert!(s.buffered_bytes() <= 1004);
        }
        s.push(b"\n", &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].truncated_bytes, 6307 - 1000);
    }

    #[test]
    fn find_lf_matches_position() {
        let mut rng = Rng::new(0xA076_1D64_78BD_642F);
        for _ in 0..3000 {
            let len = rng.below(80);
            let v: Vec<u8> = (0..len)
                .map(|_| match rng.below(6) {
                    0 => b'\n',
                    1 => 0x0B,
                    2 => 0x8A,
                    _ => rng.byte(),
                })
                .collect();
            assert_eq!(find_lf(&v), v.iter().position(|&b| b == b'\n'), "{v:?}");
        }
    }

    #[test]
    fn lines_within_a_push_are_borrowed_not_copied() {
        let mut s = LineSplitter::new();
        let input = b"one\r\ntwo\nthr";
        let mut seen = Vec::new();
        s.push_with(input, |l| {
            let range = input.as_ptr_range();
            assert!(range.contains(&l.text.as_ptr()), "{l:?} not borrowed");
            seen.push(l.to_line());
        });
        s.push_with(b"ee\n", |l| seen.push(l.to_line()));
        s.finish_with(|l| seen.push(l.to_line()));
        assert_eq!(texts(&seen), ["one", "two", "three"]);
    }

    #[test]
    fn tiny_cap_is_raised() {
        let out = run(&[b"abcdef\n"], 0);
        assert_eq!(texts(&out), ["abcd [hub: truncated 2 UTF-8 bytes]"]);
    }

    #[test]
    fn reusable_after_finish() {
        let mut s = LineSplitter::with_cap(16);
        let mut out = Vec::new();
        s.push(b"first\xE2", &mut out);
        s.finish(&mut out);
        s.push(b"second\n", &mut out);
        s.finish(&mut out);
        assert_eq!(texts(&out), ["first\u{FFFD}", "second"]);
    }
}
