//! The in-memory tail of one worker's output: finished lines from both
//! pipes, bounded by a line count and a byte ceiling (sum of text lengths),
//! oldest evicted first. A line larger than the whole ceiling is kept as a
//! code-point-safe prefix with one combined truncation annotation.
//!
//! Pure data structure: no I/O, no clock, no locks; it lives in a session's
//! registry entry. `panel_tail` builds the bounded `logs` reply lines.

use std::borrow::Cow;
use std::collections::VecDeque;

use serde_json::{json, Value};

use super::time::rfc3339_from_millis;
use crate::wire::line_splitter::{
    floor_char_boundary, truncation_annotation, Line, TRUNCATED_PREFIX, TRUNCATED_SUFFIX,
};

/// The smallest byte ceiling a ring accepts (smaller is raised); every
/// annotation fits in it.
pub const MIN_RING_BYTES: usize = 64;

/// Text before the count in a panel omission notice.
pub const OMITTED_PREFIX: &str = " [hub: ";
/// Text after the count in a panel omission notice.
pub const OMITTED_SUFFIX: &str = " more UTF-8 bytes not shown]";

/// Which pipe a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// One retained line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub stream: Stream,
    pub text: String,
    /// Milliseconds since the Unix epoch when the hub read it.
    pub at_ms: u64,
}

/// Worker output lines bounded by count and bytes.
#[derive(Debug, Clone)]
pub struct LogRing {
    lines: VecDeque<LogLine>,
    max_lines: usize,
    max_bytes: usize,
    bytes: usize,
    dropped: u64,
    truncated: u64,
}

impl LogRing {
    /// A ring of at most `max_lines` lines (at least 1) and `max_bytes`
    /// bytes of text (at least [`MIN_RING_BYTES`]).
    pub fn new(max_lines: usize, max_bytes: usize) -> Self {
        Self {
            lines: VecDeque::new(),
            max_lines: max_lines.max(1),
            max_bytes: max_bytes.max(MIN_RING_BYTES),
            bytes: 0,
            dropped: 0,
            truncated: 0,
        }
    }

    /// Admits a finished line, previewing it when its text alone exceeds
    /// the byte ceiling, then evicts the oldest lines until both bounds
    /// hold. The newest line always survives.
    pub fn push(&mut self, stream: Stream, line: Line, at_ms: u64) {
        let prior = line.truncated_bytes;
        let mut text = line.text;
        let mut removed = prior;
        if text.len() > self.max_bytes {
            let annotation = truncation_annotation(prior);
            let content_len = if prior > 0 && text.ends_with(&annotation) {
                text.len() - annotation.len()
            } else {
                text.len()
            };
            let content = &text[..content_len];
            match fit_annotated(
                content,
                self.max_bytes,
                prior,
                TRUNCATED_PREFIX,
                TRUNCATED_SUFFIX,
            ) {
                Some((cut, n)) => {
                    text.truncate(cut);
                    text.push_str(&truncation_annotation(n));
                    removed = n;
                }
                None => {
                    // Unreachable with the 64-byte floor; stay bounded anyway.
                    let cut = floor_char_boundary(content, self.max_bytes);
                    removed = prior.saturating_add((content_len - cut) as u64);
                    text.truncate(cut);
                }
            }
            text.shrink_to_fit();
        }
        self.truncated = self.truncated.saturating_add(removed);
        self.bytes += text.len();
        self.lines.push_back(LogLine {
            stream,
            text,
            at_ms,
        });
        while self.lines.len() > self.max_lines || self.bytes > self.max_bytes {
            if self.lines.len() <= 1 {
                break;
            }
            let Some(old) = self.lines.pop_front() else {
                break;
            };
            self.bytes -= old.text.len();
            self.dropped += 1;
        }
    }

    /// The newest `limit` lines, oldest first.
    pub fn tail(&self, limit: usize) -> Vec<&LogLine> {
        let skip = self.lines.len().saturating_sub(limit);
        self.lines.iter().skip(skip).collect()
    }

    /// Lines held.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Bytes of text held (sum of `text.len()`).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Lines evicted to respect the bounds.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Content bytes removed from admitted lines, by the splitter's cap and
    /// by this ring's preview, each byte counted once.
    pub fn truncated_bytes(&self) -> u64 {
        self.truncated
    }
}

/// The tail of a ring as clients are shown it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tail {
    /// Line texts (previews), oldest first: the Node hub's `lines`.
    pub lines: Vec<String>,
    /// `{stream, at}` of each line, in the same order.
    pub meta: Vec<Value>,
    /// Older ring lines the bounds left out.
    pub omitted: u64,
}

/// The panel's `logs` lines: the newest lines (at most `max_lines`) whose
/// previews (each at most `line_cap` bytes, with a
/// ` [hub: N more UTF-8 bytes not shown]` notice when cut) total at most
/// `budget` bytes of text, oldest first, with each line's stream and time
/// beside them and the number of older ring lines left out. Evicted lines
/// are not counted here (see [`LogRing::dropped`]).
pub fn panel_tail(ring: &LogRing, max_lines: usize, budget: usize, line_cap: usize) -> Tail {
    let mut used = 0usize;
    let mut shown = Vec::new();
    for line in ring.lines.iter().rev().take(max_lines) {
        let text = preview(&line.text, line_cap);
        let total = used.saturating_add(text.len());
        if total > budget {
            break;
        }
        used = total;
        shown.push((line, text));
    }
    let omitted = (ring.lines.len() - shown.len()) as u64;
    let mut tail = Tail {
        lines: Vec::with_capacity(shown.len()),
        meta: Vec::with_capacity(shown.len()),
        omitted,
    };
    for (line, text) in shown.into_iter().rev() {
        tail.lines.push(text.into_owned());
        tail.meta.push(json!({
            "stream": line.stream.as_str(),
            "at": rfc3339_from_millis(line.at_ms),
        }));
    }
    tail
}

/// `text` cut to at most `cap` bytes with an omission notice; a plain
/// prefix when `cap` cannot even hold the notice.
fn preview(text: &str, cap: usize) -> Cow<'_, str> {
    if text.len() <= cap {
        return Cow::Borrowed(text);
    }
    match fit_annotated(text, cap, 0, OMITTED_PREFIX, OMITTED_SUFFIX) {
        Some((cut, n)) => Cow::Owned(format!(
            "{}{OMITTED_PREFIX}{n}{OMITTED_SUFFIX}",
            &text[..cut]
        )),
        None => Cow::Borrowed(&text[..floor_char_boundary(text, cap)]),
    }
}

/// The longest prefix of `content` (cut at a char boundary) that fits in
/// `limit` bytes together with `prefix N suffix`, where
/// `N = base + bytes cut`. Returns `(cut, N)`, or `None` when not even the
/// bare annotation fits.
fn fit_annotated(
    content: &str,
    limit: usize,
    base: u64,
    prefix: &str,
    suffix: &str,
) -> Option<(usize, u64)> {
    // A longer count leaves less room, so the first digit count d whose
    // cut yields an N of at most d digits gives the longest prefix.
    for digits in 1..=20 {
        let fixed = prefix.len() + suffix.len() + digits;
        if fixed > limit {
            return None;
        }
        let cut = floor_char_boundary(content, limit - fixed);
        let n = base.saturating_add((content.len() - cut) as u64);
        if decimal_digits(n) <= digits {
            return Some((cut, n));
        }
    }
    None
}

fn decimal_digits(mut n: u64) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::line_splitter::LineSplitter;

    fn plain(text: &str) -> Line {
        Line {
            text: text.into(),
            truncated_bytes: 0,
        }
    }

    fn texts(ring: &LogRing) -> Vec<&str> {
        ring.tail(usize::MAX)
            .into_iter()
            .map(|l| l.text.as_str())
            .collect()
    }

    fn count(hay: &str, needle: &str) -> usize {
        hay.matches(needle).count()
    }

    fn split(cap: usize, input: &[u8]) -> Line {
        let mut s = LineSplitter::with_cap(cap);
        let mut out = Vec::new();
        s.push(input, &mut out);
        s.finish(&mut out);
        assert_eq!(out.len(), 1);
        out.remove(0)
    }

    #[test]
    fn evicts_by_count() {
        let mut ring = LogRing::new(3, 1024);
        for t in ["a", "b", "c"] {
            ring.push(Stream::Stdout, plain(t), 1);
        }
        assert_eq!((ring.len(), ring.dropped()), (3, 0));
        ring.push(Stream::Stderr, plain("d"), 2);
        assert_eq!(texts(&ring), ["b", "c", "d"]);
        assert_eq!((ring.len(), ring.bytes(), ring.dropped()), (3, 3, 1));
        assert_eq!(ring.tail(2)[0].text, "c");
        assert_eq!(ring.tail(0).len(), 0);
    }

    #[test]
    fn evicts_by_bytes_at_the_edge() {
        let mut ring = LogRing::new(100, 64);
        let a = "a".repeat(32);
        ring.push(Stream::Stdout, plain(&a), 1);
        ring.push(Stream::Stdout, plain(&a), 2);
        // Exactly 64 bytes: both kept.
        assert_eq!((ring.len(), ring.bytes(), ring.dropped()), (2, 64, 0));
        ring.push(Stream::Stdout, plain(""), 3);
        assert_eq!((ring.len(), ring.bytes(), ring.dropped()), (3, 64, 0));
        // One more byte evicts the oldest.
        ring.push(Stream::Stdout, plain("x"), 4);
        assert_eq!((ring.len(), ring.bytes(), ring.dropped()), (3, 33, 1));
        // A line of exactly max_bytes empties everything else.
        ring.push(Stream::Stdout, plain(&"z".repeat(64)), 5);
        assert_eq!((ring.len(), ring.bytes(), ring.dropped()), (1, 64, 4));
        assert_eq!(ring.truncated_bytes(), 0);
    }

    #[test]
    fn newest_oversized_line_survives_as_prefix() {
        let mut ring = LogRing::new(10, 64);
        ring.push(Stream::Stdout, plain("old"), 1);
        ring.push(Stream::Stdout, plain(&"y".repeat(200)), 2);
        assert_eq!(ring.len(), 1);
        assert_eq!(ring.dropped(), 1);
        let text = &ring.tail(1)[0].text;
        assert!(text.len() <= 64, "{text}");
        assert_eq!(count(text, "[hub: truncated"), 1);
        let kept = text.find(' ').unwrap();
        let removed = 200 - kept;
        assert_eq!(
            text,
            &format!(
                "{}{}",
                "y".repeat(kept),
                truncation_annotation(removed as u64)
            )
        );
        // The longest prefix that fits: one more byte would not.
        assert!(kept + 1 + truncation_annotation(removed as u64 - 1).len() > 64);
        assert_eq!(ring.truncated_bytes(), removed as u64);
        assert_eq!(ring.bytes(), text.len());
    }

    #[test]
    fn annotations_combine_counts() {
        let line = split(100, &[b'k'; 150]);
        assert_eq!(line.truncated_bytes, 50);
        let mut ring = LogRing::new(10, 64);
        ring.push(Stream::Stderr, line, 7);
        let text = &ring.tail(1)[0].text;
        assert!(text.len() <= 64);
        assert_eq!(count(text, "[hub:"), 1);
        let kept = text.find(' ').unwrap();
        let n = 150 - kept as u64;
        assert!(text.ends_with(&truncation_annotation(n)), "{text}");
        assert_eq!(ring.truncated_bytes(), n);
    }

    #[test]
    fn annotation_alone_pushing_past_the_ceiling_is_replaced() {
        // Content fits 64 bytes but content + splitter annotation does not.
        let line = split(60, &[b'm'; 61]);
        assert_eq!(line.truncated_bytes, 1);
        assert!(line.text.len() > 64);
        let mut ring = LogRing::new(10, 64);
        ring.push(Stream::Stdout, line, 1);
        let text = &ring.tail(1)[0].text;
        let kept = text.find(' ').unwrap();
        assert_eq!(
            text,
            &format!(
                "{}{}",
                "m".repeat(kept),
                truncation_annotation(61 - kept as u64)
            )
        );
        assert_eq!(ring.truncated_bytes(), 61 - kept as u64);
    }

    #[test]
    fn truncated_bytes_counts_once() {
        let mut ring = LogRing::new(10, 1024);
        let line = split(8, b"0123456789abcdef");
        ring.push(Stream::Stdout, line, 1);
        assert_eq!(ring.truncated_bytes(), 8);
        assert_eq!(count(&ring.tail(1)[0].text, "[hub:"), 1);
        ring.push(Stream::Stdout, split(8, b"0123456789"), 2);
        assert_eq!(ring.truncated_bytes(), 10);
        // Eviction does not count as truncation.
        let mut small = LogRing::new(1, 64);
        small.push(Stream::Stdout, plain("a"), 1);
        small.push(Stream::Stdout, plain("b"), 1);
        assert_eq!((small.truncated_bytes(), small.dropped()), (0, 1));
    }

    #[test]
    fn multibyte_prefix_stays_on_char_boundaries() {
        for max in 64..80 {
            let mut ring = LogRing::new(4, max);
            let line = "€".repeat(40) + "😀😀";
            ring.push(Stream::Stdout, plain(&line), 1);
            let text = &ring.tail(1)[0].text;
            assert!(text.len() <= max);
            let kept = text.find(' ').unwrap();
            assert_eq!(kept % 3, 0);
            let n = (line.len() - kept) as u64;
            assert!(text.ends_with(&truncation_annotation(n)));
            assert!(kept + 3 + truncation_annotation(n - 3).len() > max);
        }
    }

    #[test]
    fn tiny_bounds_are_raised() {
        let mut ring = LogRing::new(0, 0);
        ring.push(Stream::Stdout, plain(&"q".repeat(500)), 1);
        assert_eq!(ring.len(), 1);
        assert!(ring.bytes() <= MIN_RING_BYTES);
    }

    #[test]
    fn fit_is_optimal() {
        let content = "ab€😀".repeat(30);
        for limit in 0..content.len() + 60 {
            for base in [0u64, 7, 95, 999, u64::MAX - 3] {
                let got = fit_annotated(&content, limit, base, TRUNCATED_PREFIX, TRUNCATED_SUFFIX);
                let best = (0..=content.len())
                    .rev()
                    .filter(|&c| content.is_char_boundary(c))
                    .map(|c| (c, base.saturating_add((content.len() - c) as u64)))
                    .find(|&(c, n)| c + truncation_annotation(n).len() <= limit);
                assert_eq!(got, best, "limit {limit} base {base}");
            }
        }
    }

    /// The tail as `{stream, text, at}` objects, and its omitted count.
    fn tail(ring: &LogRing, max: usize, budget: usize, cap: usize) -> (Vec<Value>, u64) {
        let t = panel_tail(ring, max, budget, cap);
        assert_eq!(t.lines.len(), t.meta.len());
        let objects = t
            .lines
            .iter()
            .zip(&t.meta)
            .map(|(text, meta)| {
                let mut line = meta.clone();
                line["text"] = json!(text);
                line
            })
            .collect();
        (objects, t.omitted)
    }

    fn text_of(v: &Value) -> &str {
        v["text"].as_str().unwrap()
    }

    #[test]
    fn panel_tail_respects_budget_exactly() {
        let mut ring = LogRing::new(100, 10_000);
        for i in 0..10 {
            ring.push(Stream::Stdout, plain(&"x".repeat(10 + i)), i as u64);
        }
        // Newest lines are 19, 18, 17 bytes: 54 fits exactly, 53 does not.
        let (lines, omitted) = tail(&ring, 2000, 54, 8192);
        assert_eq!(lines.len(), 3);
        assert_eq!(omitted, 7);
        let total: usize = lines.iter().map(|v| text_of(v).len()).sum();
        assert_eq!(total, 54);
        assert_eq!(text_of(&lines[0]).len(), 17);
        assert_eq!(lines[2]["stream"], "stdout");
        assert_eq!(lines[2]["at"], "1970-01-01T00:00:00.009Z");
        let (lines, omitted) = tail(&ring, 2000, 53, 8192);
        assert_eq!((lines.len(), omitted), (2, 8));
        let (lines, omitted) = tail(&ring, 4, usize::MAX, 8192);
        assert_eq!((lines.len(), omitted), (4, 6));
        let (lines, omitted) = tail(&ring, 2000, 0, 8192);
        assert_eq!((lines.len(), omitted), (0, 10));
    }

    #[test]
    fn panel_tail_previews_long_lines() {
        let mut ring = LogRing::new(100, 1 << 20);
        let long = "é".repeat(5000); // 10_000 bytes
        ring.push(Stream::Stderr, plain(&long), 1);
        ring.push(Stream::Stdout, plain("short"), 2);
        let (lines, omitted) = tail(&ring, 2000, 256 * 1024, 8192);
        assert_eq!((lines.len(), omitted), (2, 0));
        let text = text_of(&lines[0]);
        assert!(text.len() <= 8192);
        let kept = text.find(" [hub: ").unwrap();
        assert_eq!(kept % 2, 0);
        let n = 10_000 - kept;
        assert_eq!(
            text,
            format!("{}{OMITTED_PREFIX}{n}{OMITTED_SUFFIX}", &long[..kept])
        );
        // The longest prefix: two more bytes (one 'é') would not fit.
        assert!(kept + 2 + OMITTED_PREFIX.len() + OMITTED_SUFFIX.len() + 4 > 8192);
        assert_eq!(lines[0]["stream"], "stderr");
        assert_eq!(text_of(&lines[1]), "short");
        // The budget counts previews, not the original lengths.
        let (lines, _) = tail(&ring, 2000, text.len() + 5, 8192);
        assert_eq!(lines.len(), 2);
    }

    #[test]
    fn panel_tail_line_cap_edges() {
        let mut ring = LogRing::new(100, 1 << 20);
        ring.push(Stream::Stdout, plain(&"a".repeat(100)), 1);
        let (lines, _) = tail(&ring, 10, 1000, 100);
        assert_eq!(text_of(&lines[0]), "a".repeat(100));
        let (lines, _) = tail(&ring, 10, 1000, 99);
        let text = text_of(&lines[0]);
        assert!(text.len() <= 99);
        assert!(text.ends_with(" more UTF-8 bytes not shown]"));
        // A cap too small for the notice gives a plain prefix.
        let (lines, _) = tail(&ring, 10, 1000, 10);
        assert_eq!(text_of(&lines[0]), "a".repeat(10));
        let mut ring = LogRing::new(100, 1 << 20);
        ring.push(Stream::Stdout, plain("€€€€"), 1);
        let (lines, _) = tail(&ring, 10, 1000, 10);
        assert_eq!(text_of(&lines[0]), "€€€");
    }

    #[test]
    fn panel_tail_many_lines_random() {
        let mut seed = 0x1234_5678_9ABC_DEF1u64;
        let mut ring = LogRing::new(500, 200_000);
        for i in 0..800 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = (seed % 900) as usize;
            let unit = if i % 3 == 0 { "ü" } else { "w" };
            ring.push(Stream::Stdout, plain(&unit.repeat(len)), i);
        }
        for (budget, cap) in [(10_000, 300), (50_000, 64), (1_000_000, 8192), (777, 77)] {
            let (lines, omitted) = tail(&ring, 2000, budget, cap);
            let total: usize = lines.iter().map(|v| text_of(v).len()).sum();
            assert!(total <= budget);
            assert!(lines.iter().all(|v| text_of(v).len() <= cap));
            assert_eq!(lines.len() as u64 + omitted, ring.len() as u64);
            if omitted > 0 {
                let next = &ring.tail(lines.len() + 1)[0].text;
                assert!(total + preview(next, cap).len() > budget);
            }
        }
    }
}
