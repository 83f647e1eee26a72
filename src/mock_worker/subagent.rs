//! Subagent triggers (pure): user-message commands that call the hub's
//! `subagent/*` remote-tool routes, so tests and operators can drive
//! headless subagents through a mock parent. Each trigger becomes one or
//! two trusted tool calls shaped like the real worker's intrinsic
//! `subagent_fork`, `subagent_send` and `subagent_receive`; the engine
//! emits them as `tool_calls`, performs one `tool_request` per call and
//! projects each outcome as a `tool_results` entry.
//!
//! | text | route | arguments |
//! | --- | --- | --- |
//! | `/fork` | `subagent/clean-fork` | `{}` |
//! | `/receive` | `subagent/receive` | `{}` |
//! | `/receive <id> [cursor] [limit]` | `subagent/receive` | `{subagent_id, cursor?, limit?}` |
//! | `/send <id> <text>` | `subagent/send` | `{subagent_id, operation: "message", content: [text part]}` |
//! | `/continue <id>`, `/compact-child <id>`, `/stop-child <id>` | `subagent/send` | `{subagent_id, operation}` |
//! | `/subagent <operation> <json>` | `subagent/<operation>` | the JSON, verbatim |
//! | `/subagent-repeat <operation> <json> [<operation> <json>]` | two calls, one request id | each JSON, verbatim |
//!
//! A malformed trigger is not a trigger: [`parse`] returns `None` and the
//! message is echoed.

use serde_json::{json, Map, Value};

/// One remote call a subagent trigger makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Call {
    /// `subagent/<operation>`, appended to `hub_remote_call.endpoint`.
    pub route: String,
    /// The `tool_request` arguments, sent verbatim.
    pub arguments: Value,
    /// The arguments of the tool call in `tool_calls`: the real worker's
    /// tool arguments (`request` text for a message), else `arguments`.
    pub shown: Value,
}

impl Call {
    fn new(operation: &str, arguments: Value) -> Call {
        Call {
            route: format!("subagent/{operation}"),
            shown: arguments.clone(),
            arguments,
        }
    }

    fn operation(&self) -> &str {
        self.route.strip_prefix("subagent/").unwrap_or(&self.route)
    }

    /// The real worker's tool name for the route: `subagent_fork`,
    /// `subagent_receive`, `subagent_send`; any other operation becomes
    /// `subagent_<operation>` with `-`, `.` and `/` as `_`.
    pub(crate) fn name(&self) -> String {
        match self.operation() {
            "clean-fork" => "subagent_fork".into(),
            other => format!("subagent_{}", other.replace(['-', '.', '/'], "_")),
        }
    }

    /// The tool-call object: trusted (no parent confirmation), `read_only`
    /// for receive, `serial_write` otherwise.
    pub(crate) fn invoke(&self, id: &str) -> Value {
        let kind = if self.operation() == "receive" {
            "read_only"
        } else {
            "serial_write"
        };
        json!({
            "id": id,
            "name": self.name(),
            "arguments": self.shown,
            "type": kind,
            "security": "trusted",
        })
    }
}

/// The calls a subagent trigger makes, all under the run's request id, or
/// `None` when `text` is not a well-formed subagent trigger.
pub(crate) fn parse(text: &str) -> Option<Vec<Call>> {
    let text = text.trim_start();
    let first = text.split_whitespace().next()?;
    let rest = &text[first.len()..];
    let words: Vec<&str> = rest.split_whitespace().collect();
    let call = match (first, words.as_slice()) {
        // Like `/plan-read`, `/fork` ignores any further text.
        ("/fork", _) => Call::new("clean-fork", json!({})),
        ("/receive", []) => Call::new("receive", json!({})),
        ("/receive", [id, page @ ..]) if page.len() <= 2 => {
            let mut arguments = Map::new();
            arguments.insert("subagent_id".into(), json!(id));
            for (key, word) in ["cursor", "limit"].into_iter().zip(page) {
                arguments.insert(key.into(), json!(word.parse::<u64>().ok()?));
            }
            Call::new("receive", Value::Object(arguments))
        }
        ("/send", [id, _, ..]) => {
            let request = verbatim(rest.trim_start()[id.len()..].to_string());
            let mut call = Call::new(
                "send",
                json!({
                    "subagent_id": id,
                    "operation": "message",
                    "content": [{"type": "text", "modality": "text", "raw": request}],
                }),
            );
            call.shown = json!({"subagent_id": id, "operation": "message", "request": request});
            call
        }
        ("/continue", [id]) => send(id, "continue"),
        ("/compact-child", [id]) => send(id, "compact"),
        ("/stop-child", [id]) => send(id, "stop"),
        ("/subagent", _) => {
            let (call, tail) = raw(rest)?;
            if !tail.trim().is_empty() {
                return None;
            }
            call
        }
        ("/subagent-repeat", _) => {
            let (first, tail) = raw(rest)?;
            let second = if tail.trim().is_empty() {
                first.clone()
            } else {
                match raw(tail)? {
                    (second, end) if end.trim().is_empty() => second,
                    _ => return None,
                }
            };
            return Some(vec![first, second]);
        }
        _ => return None,
    };
    Some(vec![call])
}

/// The message text after the id: one separating space or line break
/// dropped, the rest kept verbatim (it may span lines).
fn verbatim(after_id: String) -> String {
    after_id
        .strip_prefix(|c: char| c.is_whitespace())
        .unwrap_or(&after_id)
        .to_string()
}

/// `subagent/send` with an operation that carries no content.
fn send(id: &str, operation: &str) -> Call {
    Call::new("send", json!({"subagent_id": id, "operation": operation}))
}

/// `<operation> <json>` at the start of `text`: the call and what follows
/// the JSON value. The operation is one word of ASCII letters, digits,
/// `-`, `_`, `.` or `/` (so it can probe the hub's route grammar without
/// breaking the URL); the JSON may be any value.
fn raw(text: &str) -> Option<(Call, &str)> {
    let text = text.trim_start();
    let operation = text.split_whitespace().next()?;
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/');
    if !operation.chars().all(allowed) {
        return None;
    }
    let json = &text[operation.len()..];
    let mut values = serde_json::Deserializer::from_str(json).into_iter::<Value>();
    let arguments = values.next()?.ok()?;
    let end = values.byte_offset();
    Some((Call::new(operation, arguments), &json[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> Call {
        let mut calls = parse(text).unwrap_or_else(|| panic!("{text:?} is a trigger"));
        assert_eq!(calls.len(), 1, "{text:?}");
        calls.remove(0)
    }

    #[test]
    fn fork_and_receive() {
        let fork = one("/fork");
        assert_eq!(fork.route, "subagent/clean-fork");
        assert_eq!(fork.arguments, json!({}));
        assert_eq!(one(" /fork now please").arguments, json!({}));
        assert_eq!(
            fork.invoke("call-1"),
            json!({"id": "call-1", "name": "subagent_fork", "arguments": {},
                   "type": "serial_write", "security": "trusted"})
        );

        let list = one("/receive");
        assert_eq!(list.route, "subagent/receive");
        assert_eq!(list.arguments, json!({}));
        assert_eq!(list.invoke("c")["type"], "read_only");
        assert_eq!(list.invoke("c")["name"], "subagent_receive");
        assert_eq!(
            one("/receive subagent-1").arguments,
            json!({"subagent_id": "subagent-1"})
        );
        assert_eq!(
            one("/receive s 3").arguments,
            json!({"subagent_id": "s", "cursor": 3})
        );
        let page = one("/receive s 0 11");
        assert_eq!(
            page.arguments,
            json!({"subagent_id": "s", "cursor": 0, "limit": 11})
        );
        assert_eq!(page.shown, page.arguments);
        for bad in ["/receive s x", "/receive s 1 -2", "/receive s 1 2 3"] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn send_operations() {
        let message = one("/send subagent-1 Inspect the parser.\n  Report back. ");
        assert_eq!(message.route, "subagent/send");
        assert_eq!(
            message.arguments,
            json!({"subagent_id": "subagent-1", "operation": "message",
                   "content": [{"type": "text", "modality": "text",
                                "raw": "Inspect the parser.\n  Report back. "}]})
        );
        assert_eq!(
            message.invoke("call-2"),
            json!({"id": "call-2", "name": "subagent_send",
                   "arguments": {"subagent_id": "subagent-1", "operation": "message",
                                 "request": "Inspect the parser.\n  Report back. "},
                   "type": "serial_write", "security": "trusted"})
        );
        assert_eq!(
            one("/send s\nline one").arguments["content"][0]["raw"],
            "line one"
        );
        for (text, operation) in [
            ("/continue s", "continue"),
            ("/compact-child s", "compact"),
            ("/stop-child  s ", "stop"),
        ] {
            let call = one(text);
            assert_eq!(call.route, "subagent/send");
            assert_eq!(
                call.arguments,
                json!({"subagent_id": "s", "operation": operation})
            );
            assert_eq!(call.invoke("c")["name"], "subagent_send");
        }
        for bad in [
            "/send",
            "/send s",
            "/send s   ",
            "/continue",
            "/continue s t",
            "/stop-child",
            "/compact-child a b",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn raw_arguments_are_verbatim() {
        let call = one(r#"/subagent send {"subagent_id":"x","operation":"stop","content":[]}"#);
        assert_eq!(call.route, "subagent/send");
        assert_eq!(
            call.arguments,
            json!({"subagent_id": "x", "operation": "stop", "content": []})
        );
        assert_eq!(call.shown, call.arguments);
        let odd = one("/subagent bogus-op [1, 2]");
        assert_eq!(odd.route, "subagent/bogus-op");
        assert_eq!(odd.arguments, json!([1, 2]));
        assert_eq!(odd.invoke("c")["name"], "subagent_bogus_op");
        assert_eq!(odd.invoke("c")["type"], "serial_write");
        assert_eq!(
            one("/subagent receive\n{\"subagent_id\": \"s\", \"limit\": 0}\n").arguments,
            json!({"subagent_id": "s", "limit": 0})
        );
        for bad in [
            "/subagent",
            "/subagent send",
            "/subagent send {",
            "/subagent send {} extra",
            "/subagent se?nd {}",
            "/subagentx send {}",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn repeats_make_two_calls() {
        let same = parse(r#"/subagent-repeat clean-fork {}"#).unwrap();
        assert_eq!(same.len(), 2);
        assert_eq!(same[0], same[1]);
        assert_eq!(same[0].route, "subagent/clean-fork");

        let changed = parse(
            r#"/subagent-repeat send {"subagent_id":"s","operation":"stop"} send {"subagent_id":"t","operation":"stop"}"#,
        )
        .unwrap();
        assert_eq!(changed[0].arguments["subagent_id"], "s");
        assert_eq!(changed[1].arguments["subagent_id"], "t");
        let rerouted = parse("/subagent-repeat clean-fork {} receive {}").unwrap();
        assert_eq!(rerouted[1].route, "subagent/receive");
        for bad in [
            "/subagent-repeat",
            "/subagent-repeat send",
            "/subagent-repeat send {} receive",
            "/subagent-repeat send {} receive {} x",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn other_text_is_not_a_trigger() {
        for text in ["hello /fork", "/forked", "/plan x", "", "   "] {
            assert_eq!(parse(text), None, "{text:?}");
        }
    }
}
