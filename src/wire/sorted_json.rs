//! JSON with every object's keys sorted (by their bytes), compact: one
//! text for a value whatever order its members came in. Receipts hash it
//! (`worker::subagent_args::receipt_hash`); permission grants compare
//! calls by it. Iterative: deep nesting does not recurse.

use serde_json::Value;

/// Writes `value` as compact JSON with sorted object keys.
pub fn write(value: &Value, out: &mut dyn FnMut(&[u8])) {
    enum Item<'a> {
        Value(&'a Value),
        Raw(&'static [u8]),
        Key(&'a str),
    }
    let mut stack = vec![Item::Value(value)];
    while let Some(item) = stack.pop() {
        match item {
            Item::Raw(bytes) => out(bytes),
            Item::Key(key) => {
                out(Value::String(key.to_string()).to_string().as_bytes());
                out(b":");
            }
            Item::Value(Value::Array(items)) => {
                out(b"[");
                stack.push(Item::Raw(b"]"));
                for (i, v) in items.iter().enumerate().rev() {
                    stack.push(Item::Value(v));
                    if i > 0 {
                        stack.push(Item::Raw(b","));
                    }
                }
            }
            Item::Value(Value::Object(map)) => {
                out(b"{");
                stack.push(Item::Raw(b"}"));
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                for (i, (k, v)) in entries.into_iter().enumerate().rev() {
                    stack.push(Item::Value(v));
                    stack.push(Item::Key(k));
                    if i > 0 {
                        stack.push(Item::Raw(b","));
                    }
                }
            }
            Item::Value(scalar) => out(scalar.to_string().as_bytes()),
        }
    }
}

/// [`write`] into a string.
pub fn to_string(value: &Value) -> String {
    let mut out = Vec::new();
    write(value, &mut |bytes| out.extend_from_slice(bytes));
    // Only whole JSON tokens are written: valid UTF-8.
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_sorted_at_every_depth() {
        let value = json!({"b": {"d": [true, null, 1.5, "\"q\""], "c": {}}, "a": []});
        assert_eq!(
            to_string(&value),
            r#"{"a":[],"b":{"c":{},"d":[true,null,1.5,"\"q\""]}}"#
        );
        assert_eq!(
            to_string(&json!({"y": 1, "x": 2})),
            to_string(&json!({"x": 2, "y": 1}))
        );
    }
}
