//! Bounded display copies of untrusted JSON: approval argument previews whose
//! compact encoding fits a byte budget, plus the small helpers the other
//! worker-protocol modules use to quote offending values in error messages.
//!
//! Pure: no I/O, clock or locks. Deterministic, never panics, and never
//! recurses deeper than `MAX_PREVIEW_DEPTH` however deep the input is
//! (sizes and intact copies are computed with explicit stacks).

use serde_json::{Map, Number, Value};

/// Smallest budget `preview` honours; smaller budgets are raised to this.
/// It is the room an array needs for its largest omission marker.
pub const MIN_BUDGET: usize = 64;

/// Containers nested deeper than this are never traversed when they have to
/// be shortened: they become `{"display_omitted":true}`.
pub const MAX_PREVIEW_DEPTH: usize = 32;

/// Encoded size of `{"display_omitted":true}`.
const OMIT_LEN: usize = 24;

/// A kept array item is given at least this many bytes (or its full size
/// when smaller), so a kept large item shows more than a bare marker.
const ARRAY_ITEM_FLOOR: usize = 64;

/// A kept object member's value is given at least this many bytes (or its
/// full size when smaller): keys are informative even when the value is not.
const OBJECT_VALUE_FLOOR: usize = OMIT_LEN;

/// A bounded display copy of a JSON value.
#[derive(Debug, Clone, PartialEq)]
pub struct Preview {
    /// The copy; equal to the original when `truncated` is false.
    pub value: Value,
    /// Whether anything was shortened, dropped or omitted.
    pub truncated: bool,
    /// `serde_json::to_string(original).len()`.
    pub original_bytes: usize,
}

/// A copy of `value` whose compact JSON encoding is at most `budget` bytes
/// (budgets below [`MIN_BUDGET`] are raised to it).
///
/// An original that fits is returned unchanged. Otherwise strings become
/// `{"display_truncated":true,"bytes":N,"preview":"<prefix>"}`, values that
/// cannot fit become `{"display_omitted":true}`, a dropped array tail is
/// counted by a final `{"display_omitted":true,"omitted_items":N}`, and object
/// members keep their keys in order while space lasts (the rest are counted
/// in a final `"display_omitted_keys": N` member). Within a container the
/// budget is water-filled: values below the common level stay intact and
/// only the largest are reduced.
pub fn preview(value: &Value, budget: usize) -> Preview {
    let budget = budget.max(MIN_BUDGET);
    let original_bytes = encoded_len(value);
    if original_bytes <= budget {
        return Preview {
            value: deep_clone(value),
            truncated: false,
            original_bytes,
        };
    }
    let value = match shrink(value, budget, 0) {
        Some(v) if encoded_len_capped(&v, budget) <= budget => v,
        _ => omitted(),
    };
    Preview {
        value,
        truncated: true,
        original_bytes,
    }
}

/// The length of `serde_json::to_string(value)`, computed without
/// serializing and without recursion.
pub fn encoded_len(value: &Value) -> usize {
    encoded_len_capped(value, usize::MAX)
}

/// Like [`encoded_len`], but stops counting once the size exceeds `cap`;
/// any result above `cap` only means "larger than `cap`".
pub fn encoded_len_capped(value: &Value, cap: usize) -> usize {
    let mut total = 0usize;
    let mut stack: Vec<&Value> = vec![value];
    while let Some(v) = stack.pop() {
        let own = match v {
            // A string is at least its bytes plus quotes: skip the exact
            // count when that alone is over the cap.
            Value::String(s) if s.len().saturating_add(2) > cap - total => s.len() + 2,
            other => shallow_len(other),
        };
        total = total.saturating_add(own);
        if total > cap {
            return total;
        }
        match v {
            Value::Array(items) => stack.extend(items.iter()),
            Value::Object(map) => stack.extend(map.values()),
            _ => {}
        }
    }
    total
}

/// Bytes a value contributes itself, children excluded (for containers:
/// brackets, commas, and for objects the quoted keys and colons).
fn shallow_len(v: &Value) -> usize {
    match v {
        Value::Null => 4,
        Value::Bool(true) => 4,
        Value::Bool(false) => 5,
        Value::Number(n) => number_len(n),
        Value::String(s) => quoted_len(s),
        Value::Array(items) => 2 + items.len().saturating_sub(1),
        Value::Object(map) => {
            let keys: usize = map.keys().map(|k| quoted_len(k) + 1).sum();
            2 + map.len().saturating_sub(1) + keys
        }
    }
}

fn number_len(n: &Number) -> usize {
    n.to_string().len()
}

/// Encoded length of one character as serde_json escapes it.
fn escaped_char_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\u{8}' | '\t' | '\n' | '\u{c}' | '\r' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// Encoded length of a string including its quotes.
pub fn quoted_len(s: &str) -> usize {
    2 + s.chars().map(escaped_char_len).sum::<usize>()
}

fn digits(mut n: usize) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

fn omitted() -> Value {
    let mut m = Map::new();
    m.insert("display_omitted".into(), Value::Bool(true));
    Value::Object(m)
}

/// Encoded size of `{"display_omitted":true,"omitted_items":N}`.
fn tail_marker_len(n: usize) -> usize {
    41 + digits(n)
}

fn tail_marker(n: usize) -> Value {
    let mut m = Map::new();
    m.insert("display_omitted".into(), Value::Bool(true));
    m.insert("omitted_items".into(), Value::from(n as u64));
    Value::Object(m)
}

/// Encoded size of `"display_omitted_keys":N`.
fn omitted_keys_member_len(n: usize) -> usize {
    23 + digits(n)
}

/// Encoded size of the truncated-string marker without its prefix:
/// `{"display_truncated":true,"bytes":N,"preview":""}`.
fn truncated_overhead(bytes: usize) -> usize {
    48 + digits(bytes)
}

fn truncated_string(s: &str, budget: usize) -> Option<Value> {
    let overhead = truncated_overhead(s.len());
    if overhead > budget {
        return None;
    }
    let room = budget - overhead;
    let mut used = 0;
    let mut end = 0;
    for (i, c) in s.char_indices() {
        let l = escaped_char_len(c);
        if used + l > room {
            break;
        }
        used += l;
        end = i + c.len_utf8();
    }
    let mut m = Map::new();
    m.insert("display_truncated".into(), Value::Bool(true));
    m.insert("bytes".into(), Value::from(s.len() as u64));
    m.insert("preview".into(), Value::String(s[..end].to_string()));
    Some(Value::Object(m))
}

/// A value whose encoding is at most `budget`, or `None` when not even
/// the omission marker fits.
fn shrink(value: &Value, budget: usize, depth: usize) -> Option<Value> {
    if encoded_len_capped(value, budget) <= budget {
        return Some(deep_clone(value));
    }
    let fallback = || (budget >= OMIT_LEN).then(omitted);
    let built = match value {
        Value::String(s) => truncated_string(s, budget),
        Value::Array(items) if depth < MAX_PREVIEW_DEPTH => shrink_array(items, budget, depth),
        Value::Object(map) if depth < MAX_PREVIEW_DEPTH => shrink_object(map, budget, depth),
        _ => None,
    };
    match built {
        Some(v) if encoded_len_capped(&v, budget) <= budget => Some(v),
        _ => fallback(),
    }
}

/// The water level for `sizes` in `available` bytes: the largest `c` with
/// `sum(min(size, c)) <= available` (unbounded when everything fits).
fn water_level(sizes: &[usize], available: usize) -> usize {
    let mut sorted: Vec<usize> = sizes.to_vec();
    sorted.sort_unstable();
    let mut remaining = available;
    let n = sorted.len();
    for (i, &s) in sorted.iter().enumerate() {
        let left = n - i;
        let level = remaining / left;
        if s > level {
            return level;
        }
        remaining -= s;
    }
    usize::MAX
}

/// Shrinks `values` (already sized) into `available` bytes: values at or
/// below the water level stay intact, larger ones share the rest in order,
/// each later one inheriting what earlier ones left unused.
fn fill(values: &[&Value], sizes: &[usize], available: usize, depth: usize) -> Vec<Value> {
    let level = water_level(sizes, available);
    let intact: usize = sizes.iter().filter(|&&s| s <= level).sum();
    let mut large_left = sizes.iter().filter(|&&s| s > level).count();
    let mut rest = available.saturating_sub(intact);
    let mut out = Vec::with_capacity(values.len());
    for (v, &s) in values.iter().zip(sizes) {
        if s <= level {
            out.push(deep_clone(v));
            continue;
        }
        let share = rest / large_left.max(1);
        let shrunk = shrink(v, share, depth + 1).unwrap_or_else(omitted);
        rest = rest.saturating_sub(encoded_len_capped(&shrunk, share));
        large_left = large_left.saturating_sub(1);
        out.push(shrunk);
    }
    out
}

fn shrink_array(items: &[Value], budget: usize, depth: usize) -> Option<Value> {
    let n = items.len();
    // Largest k: the first k items at their floor cost, commas, brackets
    // and (when k < n) the tail marker fit.
    let mut sizes = Vec::new();
    let mut floor_sum = 0usize;
    let mut best: Option<usize> = None;
    for k in 0..=n {
        let commas = k.saturating_sub(1);
        let base = 2 + floor_sum + commas;
        if base > budget {
            break;
        }
        let need = if k < n {
            base + tail_marker_len(n - k) + usize::from(k > 0)
        } else {
            base
        };
        if need <= budget {
            best = Some(k);
        }
        if let Some(item) = items.get(k) {
            let s = encoded_len_capped(item, budget);
            sizes.push(s);
            floor_sum = floor_sum.saturating_add(s.min(ARRAY_ITEM_FLOOR));
        }
    }
    let k = best?;
    let dropped = n - k;
    let mut overhead = 2 + k.saturating_sub(1);
    if dropped > 0 {
        overhead += tail_marker_len(dropped) + usize::from(k > 0);
    }
    let available = budget.saturating_sub(overhead);
    let kept: Vec<&Value> = items[..k].iter().collect();
    let mut out = fill(&kept, &sizes[..k], available, depth);
    if dropped > 0 {
        out.push(tail_marker(dropped));
    }
    Some(Value::Array(out))
}

fn shrink_object(map: &Map<String, Value>, budget: usize, depth: usize) -> Option<Value> {
    let entries: Vec<(&String, &Value)> = map.iter().collect();
    let n = entries.len();
    let mut sizes = Vec::new();
    let mut fixed_sum = 0usize; // quoted keys and colons of the first k
    let mut floor_sum = 0usize;
    let mut best: Option<usize> = None;
    for k in 0..=n {
        let commas = k.saturating_sub(1);
        let base = 2usize
            .saturating_add(fixed_sum)
            .saturating_add(floor_sum)
            .saturating_add(commas);
        if base > budget {
            break;
        }
        let need = if k < n {
            base + omitted_keys_member_len(n - k) + usize::from(k > 0)
        } else {
            base
        };
        if need <= budget {
            best = Some(k);
        }
        if let Some(&(key, value)) = entries.get(k) {
            let s = encoded_len_capped(value, budget);
            sizes.push(s);
            fixed_sum = fixed_sum.saturating_add(quoted_len(key) + 1);
            floor_sum = floor_sum.saturating_add(s.min(OBJECT_VALUE_FLOOR));
        }
    }
    let k = best?;
    let dropped = n - k;
    let keys: usize = entries[..k]
        .iter()
        .map(|(key, _)| quoted_len(key) + 1)
        .sum();
    let mut overhead = 2 + k.saturating_sub(1) + keys;
    if dropped > 0 {
        overhead += omitted_keys_member_len(dropped) + usize::from(k > 0);
    }
    let available = budget.saturating_sub(overhead);
    let kept: Vec<&Value> = entries[..k].iter().map(|(_, v)| *v).collect();
    let values = fill(&kept, &sizes[..k], available, depth);
    let mut out = Map::new();
    for ((key, _), v) in entries[..k].iter().zip(values) {
        out.insert((*key).clone(), v);
    }
    if dropped > 0 {
        out.insert("display_omitted_keys".into(), Value::from(dropped as u64));
    }
    Some(Value::Object(out))
}

/// `value.clone()` without recursion, so arbitrarily deep values can be
/// copied on small thread stacks.
pub fn deep_clone(value: &Value) -> Value {
    enum Frame<'a> {
        Array(std::slice::Iter<'a, Value>, Vec<Value>),
        Object(
            serde_json::map::Iter<'a>,
            Map<String, Value>,
            Option<String>,
        ),
    }
    fn open(v: &Value) -> Result<Value, Frame<'_>> {
        match v {
            Value::Array(items) if !items.is_empty() => {
                Err(Frame::Array(items.iter(), Vec::with_capacity(items.len())))
            }
            Value::Object(map) if !map.is_empty() => {
                Err(Frame::Object(map.iter(), Map::new(), None))
            }
            other => Ok(shallow_clone(other)),
        }
    }
    let mut stack = match open(value) {
        Ok(done) => return done,
        Err(frame) => vec![frame],
    };
    loop {
        let Some(top) = stack.last_mut() else {
            return Value::Null; // unreachable: the loop returns on the root
        };
        let next = match top {
            Frame::Array(iter, _) => iter.next(),
            Frame::Object(iter, _, pending) => iter.next().map(|(k, v)| {
                *pending = Some(k.clone());
                v
            }),
        };
        let mut finished = match next {
            Some(child) => match open(child) {
                Ok(done) => Some(done),
                Err(frame) => {
                    stack.push(frame);
                    None
                }
            },
            None => match stack.pop() {
                Some(Frame::Array(_, out)) => Some(Value::Array(out)),
                Some(Frame::Object(_, out, _)) => Some(Value::Object(out)),
                None => None,
            },
        };
        // Attach a finished value to its parent, or return the root.
        if let Some(done) = finished.take() {
            match stack.last_mut() {
                None => return done,
                Some(Frame::Array(_, out)) => out.push(done),
                Some(Frame::Object(_, out, pending)) => {
                    let key = pending.take().unwrap_or_default();
                    out.insert(key, done);
                }
            }
        }
    }
}

fn shallow_clone(v: &Value) -> Value {
    match v {
        Value::Array(_) => Value::Array(Vec::new()),
        Value::Object(_) => Value::Object(Map::new()),
        other => other.clone(),
    }
}

/// Name of a JSON value's type, as used in messages.
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Longest part of an offending string quoted in an error message, bytes.
pub const QUOTE_MAX: usize = 64;

/// `s` cut to at most `max` bytes on a char boundary, with "…" appended
/// when it was cut.
pub fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// A bounded description of an offending value for an error message:
/// strings quoted (and clipped), scalars as JSON, containers by kind.
pub fn describe(v: &Value) -> String {
    match v {
        Value::String(s) => quote(s),
        Value::Array(_) => "an array".to_string(),
        Value::Object(_) => "an object".to_string(),
        other => other.to_string(),
    }
}

/// `s` clipped to [`QUOTE_MAX`] bytes and quoted as a JSON string.
pub fn quote(s: &str) -> String {
    Value::String(clip(s, QUOTE_MAX)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testkit::Rng;
    use serde_json::json;

    const ALPHABET: &[char] = &[
        'a', 'b', 'z', ' ', '"', '\\', '\n', '\t', '\u{1}', '\u{1f}', '\u{7f}', 'é', '€', '😀',
        '中', '/', '<',
    ];

    fn gen_string(rng: &mut Rng, max_len: usize) -> String {
        let len = rng.below(max_len + 1);
        (0..len).map(|_| rng.pick(ALPHABET)).collect()
    }

    /// A random value of at most `depth` levels; `nodes` bounds the total
    /// number of nodes so wide levels cannot multiply.
    fn gen_value(rng: &mut Rng, depth: u32) -> Value {
        let mut nodes = 300usize;
        gen_bounded(rng, depth, &mut nodes)
    }

    fn gen_bounded(rng: &mut Rng, depth: u32, nodes: &mut usize) -> Value {
        *nodes = nodes.saturating_sub(1);
        let pick = if depth == 0 || *nodes == 0 {
            rng.below(5)
        } else {
            rng.below(8)
        };
        match pick {
            0 => Value::Null,
            1 => Value::Bool(rng.below(2) == 0),
            2 => match rng.below(4) {
                0 => json!(rng.next()),
                1 => json!(-(rng.below(1 << 40) as i64)),
                2 => json!((rng.below(1 << 30) as f64) / 7.0),
                _ => json!(rng.below(100)),
            },
            3 | 4 => {
                let max = if rng.below(4) == 0 { 3000 } else { 40 };
                Value::String(gen_string(rng, max))
            }
            5 => {
                let wide = rng.below(5) == 0;
                let n = rng.below(if wide { 200 } else { 6 });
                let mut items = Vec::new();
                for _ in 0..n {
                    if *nodes == 0 {
                        break;
                    }
                    items.push(gen_bounded(rng, depth - 1, nodes));
                }
                Value::Array(items)
            }
            _ => {
                let wide = rng.below(5) == 0;
                let n = rng.below(if wide { 100 } else { 6 });
                let mut m = Map::new();
                for _ in 0..n {
                    if *nodes == 0 {
                        break;
                    }
                    let key = gen_string(rng, 12);
                    m.insert(key, gen_bounded(rng, depth - 1, nodes));
                }
                Value::Object(m)
            }
        }
    }

    fn strings_in(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) => out.push(s.clone()),
            Value::Array(items) => items.iter().for_each(|i| strings_in(i, out)),
            Value::Object(m) => m.values().for_each(|i| strings_in(i, out)),
            _ => {}
        }
    }

    fn previews_in(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Array(items) => items.iter().for_each(|i| previews_in(i, out)),
            Value::Object(m) => {
                if m.get("display_truncated") == Some(&Value::Bool(true)) {
                    if let Some(Value::String(p)) = m.get("preview") {
                        out.push(p.clone());
                    }
                }
                m.values().for_each(|i| previews_in(i, out));
            }
            _ => {}
        }
    }

    fn enc(v: &Value) -> usize {
        serde_json::to_string(v).unwrap().len()
    }

    fn check(value: &Value, budget: usize) {
        let p = preview(value, budget);
        let limit = budget.max(MIN_BUDGET);
        let out = serde_json::to_string(&p.value).unwrap();
        assert!(out.len() <= limit, "{} > {limit}: {out}", out.len());
        assert_eq!(p.original_bytes, enc(value));
        if p.original_bytes <= limit {
            assert!(!p.truncated);
            assert_eq!(&p.value, value);
        } else {
            assert!(p.truncated);
            assert_ne!(&p.value, value);
            assert!(
                out.contains("display_truncated") || out.contains("display_omitted"),
                "{out}"
            );
            let mut originals = Vec::new();
            strings_in(value, &mut originals);
            let mut previews = Vec::new();
            previews_in(&p.value, &mut previews);
            for pre in previews {
                // A preview is a prefix of some original string (or an
                // original that itself looked like a marker).
                assert!(
                    originals.iter().any(|o| o.starts_with(&pre)),
                    "preview {pre:?} is not a prefix"
                );
            }
        }
        // Deterministic.
        assert_eq!(preview(value, budget), p);
    }

    #[test]
    fn encoded_len_matches_serde_json() {
        let mut rng = Rng::new(0x1234_5678_9abc_def1);
        for _ in 0..2000 {
            let v = gen_value(&mut rng, 4);
            assert_eq!(encoded_len(&v), enc(&v), "{v}");
        }
        for s in ["", "\u{0}", "\u{8}\u{c}\r\n\t", "\"\\", "\u{7f}é😀"] {
            assert_eq!(quoted_len(s), enc(&json!(s)));
        }
        for n in [
            json!(0),
            json!(-1),
            json!(u64::MAX),
            json!(i64::MIN),
            json!(1.5e300),
        ] {
            assert_eq!(encoded_len(&n), enc(&n));
        }
    }

    #[test]
    fn marker_sizes_match_their_encoding() {
        assert_eq!(enc(&omitted()), OMIT_LEN);
        for n in [0, 9, 10, 12345, usize::MAX] {
            assert_eq!(enc(&tail_marker(n)), tail_marker_len(n));
            let mut m = Map::new();
            m.insert("display_omitted_keys".into(), json!(n as u64));
            assert_eq!(enc(&Value::Object(m)), omitted_keys_member_len(n) + 2);
            let t = json!({"display_truncated": true, "bytes": n as u64, "preview": ""});
            assert_eq!(enc(&t), truncated_overhead(n));
        }
        assert_eq!(2 + tail_marker_len(usize::MAX), MIN_BUDGET - 1);
    }

    #[test]
    fn property_random_values_and_budgets() {
        let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
        for round in 0..1500 {
            let v = gen_value(&mut rng, 1 + (round % 6) as u32);
            let budget = match rng.below(4) {
                0 => rng.below(64),
                1 => 64 + rng.below(64),
                2 => 64 + rng.below(2000),
                _ => 64 + rng.below(70_000),
            };
            check(&v, budget);
        }
    }

    #[test]
    fn every_budget_from_64_on_one_value() {
        let mut rng = Rng::new(42);
        let v = json!({
            "command": "x".repeat(500),
            "cwd": "/tmp",
            "env": {"A": "1", "B": gen_string(&mut rng, 400)},
            "list": (0..50).map(|i| json!(i)).collect::<Vec<_>>(),
            "nested": [[["deep", "é".repeat(100)]]],
        });
        let full = enc(&v);
        for budget in 0..=full + 2 {
            check(&v, budget);
        }
    }

    #[test]
    fn fitting_value_is_unchanged() {
        let v = json!({"a": [1, 2, {"b": "c"}], "d": null});
        let p = preview(&v, 64);
        assert!(!p.truncated);
        assert_eq!(p.value, v);
        assert_eq!(p.original_bytes, enc(&v));
        let p = preview(&v, usize::MAX);
        assert_eq!(p.value, v);
    }

    #[test]
    fn long_string_keeps_a_char_boundary_prefix() {
        let s = "é".repeat(1000);
        let p = preview(&json!(s), 100);
        assert!(p.truncated);
        let m = p.value.as_object().unwrap();
        assert_eq!(m["display_truncated"], json!(true));
        assert_eq!(m["bytes"], json!(2000));
        let pre = m["preview"].as_str().unwrap();
        assert!(s.starts_with(pre));
        assert!(!pre.is_empty());
        assert!(enc(&p.value) <= 100);
        // Escapes count: a string of quotes shrinks to half as many chars.
        let q = "\"".repeat(200);
        let p = preview(&json!(q), 100);
        assert!(enc(&p.value) <= 100);
        assert!(q.starts_with(p.value["preview"].as_str().unwrap()));
    }

    #[test]
    fn small_members_survive_and_the_largest_shrinks() {
        let v = json!({
            "path": "/etc/hosts",
            "content": "x".repeat(10_000),
            "mode": 420,
            "flags": ["a", "b"],
        });
        let p = preview(&v, 300);
        let m = p.value.as_object().unwrap();
        let keys: Vec<&String> = m.keys().collect();
        assert_eq!(keys, ["path", "content", "mode", "flags"]);
        assert_eq!(m["path"], json!("/etc/hosts"));
        assert_eq!(m["mode"], json!(420));
        assert_eq!(m["flags"], json!(["a", "b"]));
        assert_eq!(m["content"]["display_truncated"], json!(true));
        assert_eq!(m["content"]["bytes"], json!(10_000));
        assert!(enc(&p.value) <= 300);
        // The budget is used well: the preview is close to the limit.
        assert!(enc(&p.value) >= 280, "{}", enc(&p.value));
    }

    #[test]
    fn two_large_values_share_the_budget() {
        let v = json!({"a": "a".repeat(5000), "b": "b".repeat(5000)});
        let p = preview(&v, 1000);
        let a = p.value["a"]["preview"].as_str().unwrap().len();
        let b = p.value["b"]["preview"].as_str().unwrap().len();
        assert!(a > 400 && b > 400, "{a} {b}");
        assert!(enc(&p.value) <= 1000);
    }

    #[test]
    fn array_tail_is_counted() {
        let v = Value::Array((0..1000).map(|i| json!(i)).collect());
        let p = preview(&v, 100);
        let items = p.value.as_array().unwrap();
        let last = items.last().unwrap();
        assert_eq!(last["display_omitted"], json!(true));
        let dropped = last["omitted_items"].as_u64().unwrap() as usize;
        assert_eq!(items.len() - 1 + dropped, 1000);
        for (i, item) in items[..items.len() - 1].iter().enumerate() {
            assert_eq!(item, &json!(i));
        }
        assert!(enc(&p.value) <= 100);
        // Budget 64 still has room for the marker alone.
        let huge = Value::Array(vec![json!("x".repeat(1000)); 3]);
        let p = preview(&huge, 0);
        assert!(enc(&p.value) <= 64);
        assert!(serde_json::to_string(&p.value)
            .unwrap()
            .contains("display_omitted"));
    }

    #[test]
    fn object_members_beyond_space_are_counted() {
        let mut m = Map::new();
        for i in 0..500 {
            m.insert(format!("key{i}"), json!(i));
        }
        let v = Value::Object(m);
        let p = preview(&v, 200);
        let out = p.value.as_object().unwrap();
        let omitted = out["display_omitted_keys"].as_u64().unwrap() as usize;
        assert_eq!(out.len() - 1 + omitted, 500);
        for (i, (k, val)) in out.iter().take(out.len() - 1).enumerate() {
            assert_eq!(k, &format!("key{i}"));
            assert_eq!(val, &json!(i));
        }
        assert_eq!(out.keys().next_back().unwrap(), "display_omitted_keys");
        // A single enormous key cannot be shown at all.
        let v = json!({ "k".repeat(1000): 1 });
        let p = preview(&v, 64);
        assert_eq!(p.value, json!({"display_omitted_keys": 1}));
    }

    #[test]
    fn colliding_marker_key_stays_within_budget() {
        let mut rng = Rng::new(7);
        for _ in 0..300 {
            let mut m = Map::new();
            m.insert(
                "display_omitted_keys".into(),
                json!(gen_string(&mut rng, 30)),
            );
            for i in 0..rng.below(40) {
                m.insert(format!("k{i}"), json!(gen_string(&mut rng, 60)));
            }
            check(&Value::Object(m), 64 + rng.below(200));
        }
    }

    fn deep_array(depth: usize) -> Value {
        let mut v = json!("x".repeat(100));
        for _ in 0..depth {
            v = Value::Array(vec![v, json!(1)]);
        }
        v
    }

    fn deep_object(depth: usize) -> Value {
        let mut v = json!("leaf");
        for _ in 0..depth {
            let mut m = Map::new();
            m.insert("k".into(), v);
            v = Value::Object(m);
        }
        v
    }

    /// Builds, checks and drops the deep value on a big stack, previews it
    /// on a small one: proves `preview` never recurses with the depth.
    /// Returns (truncated, original_bytes, output bytes).
    fn on_small_stack(depth: usize, budget: usize, object: bool) -> (bool, usize, usize) {
        std::thread::Builder::new()
            .stack_size(512 << 20)
            .spawn(move || {
                let v = if object {
                    deep_object(depth)
                } else {
                    deep_array(depth)
                };
                let (v, p) = std::thread::Builder::new()
                    .stack_size(128 << 10)
                    .spawn(move || {
                        let p = preview(&v, budget);
                        (v, p)
                    })
                    .unwrap()
                    .join()
                    .unwrap();
                let out = serde_json::to_string(&p.value).unwrap().len();
                assert_eq!(p.original_bytes, serde_json::to_string(&v).unwrap().len());
                if !p.truncated {
                    assert!(p.value == v);
                }
                (p.truncated, p.original_bytes, out)
            })
            .unwrap()
            .join()
            .unwrap()
    }

    #[test]
    fn deep_nesting_never_recurses_with_the_depth() {
        for (depth, budget, object) in [
            (100_000, 64, false),
            (100_000, 4096, true),
            (50_000, 1 << 20, false), // fits: returned intact, copied iteratively
            (50_000, 1 << 20, true),
        ] {
            let (truncated, original, out) = on_small_stack(depth, budget, object);
            assert_eq!(truncated, original > budget);
            assert!(out <= budget);
        }
    }

    #[test]
    fn parsed_values_at_serde_depth_limit() {
        let text = format!("{}{}", "[".repeat(127), "]".repeat(127));
        let v: Value = serde_json::from_str(&text).unwrap();
        for budget in [0, 64, 100, 200, 300] {
            check(&v, budget);
        }
        let text = format!("{}1{}", "{\"a\":".repeat(120), "}".repeat(120));
        let v: Value = serde_json::from_str(&text).unwrap();
        for budget in [64, 100, 500, 1000] {
            check(&v, budget);
        }
    }

    #[test]
    fn deep_clone_matches_clone() {
        let mut rng = Rng::new(99);
        for _ in 0..500 {
            let v = gen_value(&mut rng, 5);
            assert_eq!(deep_clone(&v), v);
        }
        assert_eq!(
            deep_clone(&json!([[], {}, [[]], {"a": {}}])),
            json!([[], {}, [[]], {"a": {}}])
        );
    }

    #[test]
    fn clip_and_describe() {
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("abcd", 3), "abc…");
        assert_eq!(clip("éé", 3), "é…");
        assert_eq!(describe(&json!("a\"b")), "\"a\\\"b\"");
        assert_eq!(describe(&json!(1.5)), "1.5");
        assert_eq!(describe(&json!([1])), "an array");
        assert_eq!(describe(&json!({})), "an object");
        assert!(describe(&json!("x".repeat(1000))).len() < 80);
        assert_eq!(kind(&json!(null)), "null");
    }
}
