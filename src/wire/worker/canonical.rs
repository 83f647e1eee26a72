//! Whether a worker's JSON object text is already what `serde_json` would
//! write after parsing it (compact, members in order, its escapes, its
//! number forms), and where its top-level members are.
//!
//! The hub forwards every envelope as `serde_json`'s compact encoding of the
//! parsed object. Most workers send exactly that text, so when this scanner
//! proves it (or proves that removing insignificant whitespace gives it),
//! the hub uses the text as it came and never builds the `Value` tree of
//! the envelope's `data`. Anything the scanner does not prove canonical
//! (another escape form, `-0`, `1e5`, a duplicate key, deep nesting, invalid
//! JSON) returns `None`, and the caller takes the full `serde_json` path, so
//! the result is identical either way; the `envelope` fuzz target checks
//! that against `serde_json` itself.
//!
//! Pure: no I/O, clock or locks. Never panics; iterative (no recursion).

use std::borrow::Cow;
use std::ops::Range;

/// Deepest nesting the scanner follows; deeper text takes the full path
/// (where `serde_json` refuses 128 levels).
pub const MAX_DEPTH: usize = 100;

/// Most members of one object the scanner checks for duplicate keys; a
/// larger object takes the full path.
pub const MAX_MEMBERS: usize = 256;

/// One top-level member: byte ranges of its key (the string token, quotes
/// included) and of its value, in the canonical text, and which of the two
/// string tokens have no escape (then the text between the quotes is the
/// decoded string).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub key: Range<usize>,
    pub value: Range<usize>,
    /// The key has no `\\`.
    pub plain_key: bool,
    /// The value is a string token without `\\`.
    pub plain_string: bool,
}

impl Member {
    /// The key's name when it has no escape.
    pub fn plain_key<'t>(&self, text: &'t str) -> Option<&'t str> {
        self.plain_key
            .then(|| text.get(self.key.start + 1..self.key.end - 1))
            .flatten()
    }

    /// The value's string when it is a string token without escapes.
    pub fn plain_string<'t>(&self, text: &'t str) -> Option<&'t str> {
        self.plain_string
            .then(|| text.get(self.value.start + 1..self.value.end - 1))
            .flatten()
    }
}

/// The canonical text of a JSON object and its top-level members in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canonical<'a> {
    /// `text` itself, or `text` without its insignificant whitespace.
    pub text: Cow<'a, str>,
    pub members: Vec<Member>,
}

/// `Some` when `serde_json::to_string(&serde_json::from_str::<Value>(text)?)`
/// is exactly the returned text and `text` is a JSON object.
pub fn canonical_object(text: &str) -> Option<Canonical<'_>> {
    let mut members = Vec::with_capacity(16);
    if !scan(text.as_bytes(), &mut members)? {
        return Some(Canonical {
            text: Cow::Borrowed(text),
            members,
        });
    }
    // Whitespace between tokens: drop it (outside strings) and scan again.
    let stripped = strip_whitespace(text);
    members.clear();
    match scan(stripped.as_bytes(), &mut members) {
        Some(false) => Some(Canonical {
            text: Cow::Owned(stripped),
            members,
        }),
        _ => None,
    }
}

/// The text of a string token (quotes included) without escapes, if it
/// has none: then it is the decoded string.
pub fn plain_string(token: &str) -> Option<&str> {
    let inner = token.get(1..token.len().checked_sub(1)?)?;
    (!inner.contains('\\')).then_some(inner)
}

/// `text` without JSON whitespace outside string tokens. Only called on
/// text `scan` accepted, where whitespace occurs only between tokens.
fn strip_whitespace(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    let mut run = 0;
    for (i, b) in text.bytes().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else if b == b'"' {
            in_string = true;
        } else if matches!(b, b' ' | b'\n' | b'\t' | b'\r') {
            out.push_str(&text[run..i]);
            run = i + 1;
        }
    }
    out.push_str(&text[run..]);
    out
}

#[derive(Clone, Copy)]
enum State {
    Value,
    Key,
    After,
}

/// Validates `b` as one JSON object in canonical form, allowing
/// whitespace between tokens. `Some(saw_whitespace)` when valid and
/// canonical apart from whitespace; top-level members go to `members`.
fn scan(b: &[u8], members: &mut Vec<Member>) -> Option<bool> {
    let mut s = Scanner {
        b,
        pos: 0,
        ws: false,
    };
    s.skip_ws();
    if s.peek() != Some(b'{') {
        return None;
    }
    // Open containers, innermost last: true for an object. `bases[i]` is
    // where the keys of the i-th open object start in `keys`.
    let mut stack = Stack::default();
    let mut bases = [0usize; MAX_DEPTH];
    let mut objects = 0;
    let mut keys = Keys::default();
    let mut member_key = 0..0;
    let mut member_start = 0;
    let mut plain_key = false;
    let mut plain_string = false;
    let mut state = State::Value;
    loop {
        match state {
            State::Value => {
                s.skip_ws();
                let start = s.pos;
                if stack.len() == 1 {
                    member_start = start;
                }
                match s.peek()? {
                    open @ (b'{' | b'[') => {
                        if stack.len() >= MAX_DEPTH {
                            return None;
                        }
                        s.pos += 1;
                        s.skip_ws();
                        let close = if open == b'{' { b'}' } else { b']' };
                        if s.peek() == Some(close) {
                            s.pos += 1;
                            state = State::After;
                        } else if open == b'{' {
                            stack.push(true);
                            bases[objects] = keys.len();
                            objects += 1;
                            state = State::Key;
                        } else {
                            stack.push(false);
                            state = State::Value;
                        }
                        continue;
                    }
                    b'"' => {
                        let escaped = s.string()?;
                        if stack.len() == 1 {
                            plain_string = !escaped;
                        }
                    }
                    b'-' | b'0'..=b'9' => s.number()?,
                    b't' => s.literal(b"true")?,
                    b'f' => s.literal(b"false")?,
                    b'n' => s.literal(b"null")?,
                    _ => return None,
                }
                state = State::After;
            }
            State::Key => {
                s.skip_ws();
                if s.peek() != Some(b'"') {
                    return None;
                }
                let start = s.pos;
                let escaped = s.string()?;
                let key = start..s.pos;
                let base = bases[objects.checked_sub(1)?];
                if keys.len() - base >= MAX_MEMBERS {
                    return None;
                }
                // Canonical escapes are unique, so equal keys are equal text.
                if keys.contains_from(base, b, &key) {
                    return None;
                }
                keys.push(key.clone());
                if stack.len() == 1 {
                    member_key = key;
                    plain_key = !escaped;
                    plain_string = false;
                }
                s.skip_ws();
                if s.peek() != Some(b':') {
                    return None;
                }
                s.pos += 1;
                state = State::Value;
            }
            State::After => {
                if stack.len() == 1 {
                    members.push(Member {
                        key: member_key.clone(),
                        value: member_start..s.pos,
                        plain_key,
                        plain_string,
                    });
                }
                s.skip_ws();
                let Some(object) = stack.last() else {
                    // The top-level object is complete: only whitespace may
                    // follow.
                    return (s.pos == b.len()).then_some(s.ws);
                };
                match (s.peek()?, object) {
                    (b',', true) => {
                        s.pos += 1;
                        state = State::Key;
                    }
                    (b',', false) => {
                        s.pos += 1;
                        state = State::Value;
                    }
                    (b'}', true) => {
                        s.pos += 1;
                        stack.pop();
                        objects = objects.checked_sub(1)?;
                        keys.truncate(bases[objects]);
                        state = State::After;
                    }
                    (b']', false) => {
                        s.pos += 1;
                        stack.pop();
                        state = State::After;
                    }
                    _ => return None,
                }
            }
        }
    }
}

/// The keys of the open objects, innermost last, as byte ranges of the
/// text: the first [`INLINE_KEYS`] on the stack, the rest in a vector, so
/// an ordinary envelope's scan allocates nothing for them.
struct Keys {
    inline: [(usize, usize); INLINE_KEYS],
    more: Vec<(usize, usize)>,
    len: usize,
}

const INLINE_KEYS: usize = 48;

impl Default for Keys {
    fn default() -> Self {
        Keys {
            inline: [(0, 0); INLINE_KEYS],
            more: Vec::new(),
            len: 0,
        }
    }
}

impl Keys {
    fn len(&self) -> usize {
        self.len
    }

    fn get(&self, i: usize) -> (usize, usize) {
        match self.inline.get(i) {
            Some(&key) => key,
            None => self.more[i - INLINE_KEYS],
        }
    }

    fn push(&mut self, key: Range<usize>) {
        let key = (key.start, key.end);
        match self.inline.get_mut(self.len) {
            Some(slot) => *slot = key,
            None => self.more.push(key),
        }
        self.len += 1;
    }

    fn truncate(&mut self, len: usize) {
        self.len = len;
        self.more.truncate(len.saturating_sub(INLINE_KEYS));
    }

    /// Whether a key from index `base` on has the same text as `key`.
    fn contains_from(&self, base: usize, b: &[u8], key: &Range<usize>) -> bool {
        let name = &b[key.clone()];
        (base..self.len).any(|i| {
            let (start, end) = self.get(i);
            &b[start..end] == name
        })
    }
}

/// The open containers as bits (1 = object), at most [`MAX_DEPTH`] < 128.
#[derive(Default)]
struct Stack {
    bits: u128,
    len: usize,
}

impl Stack {
    fn len(&self) -> usize {
        self.len
    }

    fn push(&mut self, object: bool) {
        self.bits = (self.bits << 1) | u128::from(object);
        self.len += 1;
    }

    fn pop(&mut self) {
        self.bits >>= 1;
        self.len -= 1;
    }

    /// Whether the innermost open container is an object.
    fn last(&self) -> Option<bool> {
        (self.len > 0).then_some(self.bits & 1 == 1)
    }
}

struct Scanner<'a> {
    b: &'a [u8],
    pos: usize,
    ws: bool,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.pos += 1;
            self.ws = true;
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if self.b.get(self.pos..self.pos + word.len())? != word {
            return None;
        }
        self.pos += word.len();
        Some(())
    }

    /// A string token at `pos` (on its `"`) whose escapes are the ones
    /// `serde_json` writes: `\"`, `\\`, `\b`, `\t`, `\n`, `\f`, `\r`, and
    /// `\u00xx` (lower-case hex) for the other control characters.
    /// `Some(true)` when it has an escape.
    fn string(&mut self) -> Option<bool> {
        let b = self.b;
        let mut i = self.pos + 1;
        let mut escaped = false;
        loop {
            // Long runs: 32 bytes at a time (a fixed-size loop the
            // compiler turns into vector compares) while none is special.
            while let Some(chunk) = b.get(i..i + 32) {
                let special = chunk.iter().fold(false, |any, &c| {
                    any | (c == b'"') | (c == b'\\') | (c < 0x20)
                });
                if special {
                    break;
                }
                i += 32;
            }
            // Eight bytes at a time while none is `"`, `\` or a control;
            // then straight to the first one that is.
            while let Some(chunk) = b.get(i..i + 8) {
                let special = special_bytes(u64::from_le_bytes(chunk.try_into().ok()?));
                if special != 0 {
                    i += (special.trailing_zeros() / 8) as usize;
                    break;
                }
                i += 8;
            }
            match *b.get(i)? {
                b'"' => {
                    self.pos = i + 1;
                    return Some(escaped);
                }
                b'\\' => match *b.get(i + 1)? {
                    b'"' | b'\\' | b'b' | b't' | b'n' | b'f' | b'r' => {
                        escaped = true;
                        i += 2;
                    }
                    b'u' => {
                        let hex = b.get(i + 2..i + 6)?;
                        if hex[0] != b'0' || hex[1] != b'0' {
                            return None;
                        }
                        let code = lower_hex(hex[2])? * 16 + lower_hex(hex[3])?;
                        if code >= 0x20 || matches!(code, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d) {
                            return None;
                        }
                        escaped = true;
                        i += 6;
                    }
                    _ => return None,
                },
                0..=0x1f => return None,
                _ => i += 1,
            }
        }
    }

    /// A number token at `pos` in the form `serde_json` writes back: an
    /// integer within `u64` (or a negative one within `i64`, not `-0`), or
    /// a float exactly as its shortest round-trip form.
    fn number(&mut self) -> Option<()> {
        let b = self.b;
        let start = self.pos;
        let mut i = start;
        let negative = b.get(i) == Some(&b'-');
        if negative {
            i += 1;
        }
        let digits = |mut i: usize| {
            while let Some(b'0'..=b'9') = b.get(i) {
                i += 1;
            }
            i
        };
        match b.get(i)? {
            b'0' => i += 1,
            b'1'..=b'9' => i = digits(i + 1),
            _ => return None,
        }
        let mut float = false;
        if b.get(i) == Some(&b'.') {
            let end = digits(i + 1);
            if end == i + 1 {
                return None;
            }
            i = end;
            float = true;
        }
        if let Some(b'e' | b'E') = b.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = b.get(i) {
                i += 1;
            }
            let end = digits(i);
            if end == i {
                return None;
            }
            i = end;
            float = true;
        }
        if float {
            let token = std::str::from_utf8(&b[start..i]).ok()?;
            let value: f64 = token.parse().ok()?;
            if !value.is_finite() {
                return None;
            }
            let mut buf = [0u8; 40];
            let written = {
                let mut out: &mut [u8] = &mut buf;
                serde_json::to_writer(&mut out, &value).ok()?;
                40 - out.len()
            };
            if &buf[..written] != token.as_bytes() {
                return None;
            }
        } else {
            // An integer (no leading zero, checked above): within `u64`, or
            // a negative one within `i64` other than `-0`, compared as
            // digit strings.
            let digits = &b[start + usize::from(negative)..i];
            let limit: &[u8] = if negative {
                b"9223372036854775808"
            } else {
                b"18446744073709551615"
            };
            let fits =
                digits.len() < limit.len() || (digits.len() == limit.len() && digits <= limit);
            if !fits || (negative && digits == b"0") {
                return None;
            }
        }
        self.pos = i;
        Some(())
    }
}

/// The high bit of every byte of `w` (little-endian) that is `"`, `\` or
/// below 0x20. Only bytes above the first such byte can be flagged
/// wrongly (a borrow carries upward), so the lowest flag is exact.
fn special_bytes(w: u64) -> u64 {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let quote = w ^ (LO * u64::from(b'"'));
    let slash = w ^ (LO * u64::from(b'\\'));
    ((quote.wrapping_sub(LO) & !quote)
        | (slash.wrapping_sub(LO) & !slash)
        | (w.wrapping_sub(LO * 0x20) & !w))
        & HI
}

fn lower_hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testkit::Rng;
    use serde_json::Value;

    /// What the full path would produce, if the text parses as an object.
    fn reencoded(text: &str) -> Option<String> {
        match serde_json::from_str::<Value>(text) {
            Ok(v @ Value::Object(_)) => Some(v.to_string()),
            _ => None,
        }
    }

    fn check(text: &str) {
        if let Some(c) = canonical_object(text) {
            assert_eq!(
                reencoded(text).as_deref(),
                Some(&*c.text),
                "claimed canonical: {text:?}"
            );
            let v: Value = serde_json::from_str(&c.text).unwrap();
            let object = v.as_object().unwrap();
            assert_eq!(object.len(), c.members.len());
            for ((key, value), m) in object.iter().zip(&c.members) {
                assert_eq!(
                    &Value::from(key.as_str()).to_string(),
                    &c.text[m.key.clone()]
                );
                assert_eq!(&value.to_string(), &c.text[m.value.clone()]);
                assert_eq!(m.plain_key, !c.text[m.key.clone()].contains('\\'));
                let string = value.is_string() && !c.text[m.value.clone()].contains('\\');
                assert_eq!(m.plain_string, string, "{text:?}");
                assert_eq!(
                    m.plain_key(&c.text),
                    Some(key.as_str()).filter(|_| m.plain_key)
                );
                if string {
                    assert_eq!(m.plain_string(&c.text), value.as_str());
                }
            }
        }
    }

    #[test]
    fn canonical_frames_are_taken_as_they_are() {
        for text in [
            r#"{}"#,
            r#"{"a":1}"#,
            r#"{"a":[],"b":{},"c":[1,-2,3.5,-0.0,1e-7,1e+21,true,false,null],"d":"x\"\\\n\u0001é"}"#,
            r#"{"n":18446744073709551615,"m":-9223372036854775808}"#,
            r#"{"k":{"k":{"k":[[[]]]}}}"#,
        ] {
            let c = canonical_object(text).unwrap_or_else(|| panic!("{text}"));
            assert!(matches!(c.text, Cow::Borrowed(_)));
            check(text);
        }
    }

    #[test]
    fn a_special_byte_is_found_at_every_offset_of_a_long_string() {
        // The string scan skips 32 and then 8 bytes at a time; a quote,
        // an escape or a control character at any offset must still be
        // seen where it is (multi-byte UTF-8 around it included).
        for len in 0..80 {
            for at in 0..=len {
                for special in ["\\n", "\\\"", "\\u0001", "\u{1}", "\\/", "é"] {
                    let mut body = "x".repeat(len);
                    body.insert_str(at, special);
                    let text = format!("{{\"s\":\"{body}\",\"t\":\"{body}\"}}");
                    check(&text);
                    let canonical = !matches!(special, "\u{1}" | "\\/");
                    assert_eq!(canonical_object(&text).is_some(), canonical, "{text:?}");
                }
                // A quote that ends the string early leaves a bad object.
                let mut body = "x".repeat(len);
                body.insert(at, '"');
                check(&format!("{{\"s\":\"{body}\"}}"));
            }
        }
    }

    #[test]
    fn duplicate_keys_are_found_past_the_inline_room() {
        // More keys than the scanner keeps on its stack, in one object and
        // across nested ones; a duplicate anywhere is refused, the same
        // key in a sibling object is not.
        let keys = |n: usize| (0..n).map(|i| format!("\"k{i}\":{i}")).collect::<Vec<_>>();
        for n in [
            INLINE_KEYS - 1,
            INLINE_KEYS,
            INLINE_KEYS + 1,
            3 * INLINE_KEYS,
        ] {
            let wide = keys(n).join(",");
            check(&format!("{{{wide}}}"));
            assert!(canonical_object(&format!("{{{wide}}}")).is_some(), "{n}");
            for dup in [0, n / 2, n - 1] {
                let text = format!("{{{wide},\"k{dup}\":0}}");
                assert!(canonical_object(&text).is_none(), "{n} {dup}");
            }
            let nested =
                format!("{{{wide},\"in\":{{{wide},\"x\":{{{wide}}}}},\"after\":[{{{wide}}}]}}");
            assert!(canonical_object(&nested).is_some(), "{n}");
            check(&nested);
            let dup_inside = format!("{{{wide},\"in\":{{{wide},\"k0\":1}}}}");
            assert!(canonical_object(&dup_inside).is_none(), "{n}");
            // After a nested object closes, its keys are forgotten but the
            // outer ones are still there.
            let dup_after = format!("{{{wide},\"in\":{{{wide}}},\"k{}\":1}}", n - 1);
            assert!(canonical_object(&dup_after).is_none(), "{n}");
        }
    }

    #[test]
    fn integers_at_their_limits() {
        for (number, canonical) in [
            ("0", true),
            ("-1", true),
            ("9", true),
            ("18446744073709551615", true),
            ("18446744073709551616", false),
            ("99999999999999999999", false),
            ("100000000000000000000", false),
            ("-9223372036854775807", true),
            ("-9223372036854775808", true),
            ("-9223372036854775809", false),
            ("-10000000000000000000", false),
            ("-0", false),
            ("-", false),
            ("00", false),
        ] {
            let text = format!("{{\"n\":{number},\"a\":[{number}]}}");
            assert_eq!(canonical_object(&text).is_some(), canonical, "{number}");
            check(&text);
        }
    }

    #[test]
    fn whitespace_is_dropped() {
        let c = canonical_object(" {\"a\" : [ 1 , \"b c\" ] ,\n\t\"d\":{ } }\r\n").unwrap();
        assert_eq!(c.text, r#"{"a":[1,"b c"],"d":{}}"#);
        assert_eq!(c.members.len(), 2);
        assert_eq!(&c.text[c.members[0].value.clone()], r#"[1,"b c"]"#);
    }

    #[test]
    fn other_forms_take_the_full_path() {
        for text in [
            r#"{"a":"\/"}"#,
            r#"{"a":"\u00e9"}"#,
            r#"{"a":"\u001F"}"#,
            r#"{"a":"\u0009"}"#,
            r#"{"a":-0}"#,
            r#"{"a":1e5}"#,
            r#"{"a":1.50}"#,
            r#"{"a":1E21}"#,
            r#"{"a":1e21}"#,
            r#"{"a":18446744073709551616}"#,
            r#"{"a":-9223372036854775809}"#,
            r#"{"a":1e999}"#,
            r#"{"a":1,"a":2}"#,
            r#"{"a":{"b":1,"b":1}}"#,
            r#"[1]"#,
            r#"{"a":1} x"#,
            r#"{"a":1 2}"#,
            r#"{"a":tru e}"#,
            r#"{"a":01}"#,
            "{\"a\":\"\u{1}\"}",
            r#"{"a":"\ud83d\ude00"}"#,
            r#"{"a""#,
            "",
        ] {
            assert!(canonical_object(text).is_none(), "{text}");
        }
        let deep = format!(
            "{{\"a\":{}{}}}",
            "[".repeat(MAX_DEPTH),
            "]".repeat(MAX_DEPTH)
        );
        assert!(canonical_object(&deep).is_none());
        let wide: Vec<String> = (0..=MAX_MEMBERS).map(|i| format!("\"k{i}\":0")).collect();
        assert!(canonical_object(&format!("{{{}}}", wide.join(","))).is_none());
        // The same keys in sibling objects are not duplicates.
        assert!(canonical_object(r#"{"a":{"x":1},"b":{"x":1},"x":[{"x":1},{"x":2}]}"#).is_some());
    }

    #[test]
    fn agrees_with_serde_json_on_generated_text() {
        let pieces = [
            "{",
            "}",
            "[",
            "]",
            ",",
            ":",
            " ",
            "\"a\"",
            "\"b\"",
            "\"\\n\"",
            "\"\\u0000\"",
            "\"\\/\"",
            "\"é\"",
            "0",
            "-0",
            "1",
            "-1",
            "1.5",
            "0.1",
            "1e3",
            "1e21",
            "1e+21",
            "2.0",
            "-0.0",
            "true",
            "null",
            "18446744073709551615",
            "18446744073709551616",
        ];
        let mut rng = Rng::new(0x005e_ed0f_ca11);
        for _ in 0..50_000 {
            let mut text = String::from("{");
            let mut inner = rng.clone();
            for _ in 0..rng.below(20) {
                text.push_str(inner.pick(&pieces));
            }
            check(&text);
        }
        // Every finite float written by serde_json is canonical.
        for _ in 0..20_000 {
            let f = f64::from_bits(rng.next());
            if f.is_finite() {
                let text = format!("{{\"x\":{}}}", Value::from(f));
                assert!(canonical_object(&text).is_some(), "{text}");
            }
        }
    }
}
