//! The `live_window` of a `sync` (seed 004 §9.1), pure: the newest
//! messages of the conversation since its last compaction, rebuilt from
//! the hub's retained transcript and bounded in bytes. The hub retains the
//! worker's events, not the user's input, so the window holds the
//! assistant's messages (text, thinking, tool calls) and the tool results
//! (as `tool_result` blocks of user messages); the user's own messages are
//! not in it.

use serde_json::{json, Value};

use crate::transcript::Pick;
use crate::wire::shard::translate;

/// Encoded bytes of the messages one window carries at most.
pub const WINDOW_BYTES: usize = 256 * 1024;

/// Transcript bytes read back for one window at most.
pub const SOURCE_BYTES: usize = 1024 * 1024;

/// The worker event name of a transcript entry (its first `event`
/// member), read without parsing it.
pub fn event_name(json: &str) -> Option<&str> {
    const KEY: &str = "\"event\":\"";
    let start = json.find(KEY)? + KEY.len();
    let len = json[start..].find('"')?;
    Some(&json[start..start + len])
}

/// Which transcript entries a window is built from: messages and tool
/// results; the walk back ends at the last compaction.
pub fn pick(json: &str) -> Pick {
    match event_name(json) {
        Some("model_response" | "tool_results") => Pick::Keep,
        Some("compact_finished") => Pick::Boundary,
        _ => Pick::Skip,
    }
}

/// The window of `entries` (transcript entries' JSON, oldest first, as
/// [`pick`] chose them): at most `budget` bytes of encoded messages, the
/// newest kept. A compaction among them is the window's start
/// (`compaction_index`, its revision).
pub fn live_window<S: AsRef<str>>(entries: &[S], budget: usize) -> Value {
    let mut compaction_index = None;
    let mut messages = Vec::new();
    for entry in entries {
        let json = entry.as_ref();
        let Some(event) = event_name(json) else {
            continue;
        };
        let Some(parsed) = translate::parse(event, json) else {
            continue;
        };
        if event == "compact_finished" {
            compaction_index = parsed.data().get("revision").and_then(Value::as_u64);
            messages.clear();
        } else {
            messages.extend(translate::window_message(&parsed));
        }
    }
    let mut kept = Vec::new();
    let mut bytes = 0;
    for message in messages.into_iter().rev() {
        let len = message.to_string().len() + 1;
        if bytes + len > budget {
            break;
        }
        bytes += len;
        kept.push(message);
    }
    kept.reverse();
    let mut window = json!({"messages": kept});
    if let Some(index) = compaction_index {
        window["compaction_index"] = json!(index);
    }
    window
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(event: &str, seq: u64, data: Value) -> String {
        json!({"type": "event", "event": event, "worker_id": "w", "run_id": "r",
            "data": data, "hub_sequence": seq})
        .to_string()
    }

    fn text(raw: &str) -> Value {
        json!({"content": [{"type": "text", "modality": "text", "raw": raw}]})
    }

    #[test]
    fn entries_are_picked_by_their_event() {
        assert_eq!(
            event_name(r#"{"type":"event","event":"run_started","x":1}"#),
            Some("run_started")
        );
        assert_eq!(event_name(r#"{"type":"x"}"#), None);
        assert_eq!(pick(r#"{"event":"model_response"}"#), Pick::Keep);
        assert_eq!(pick(r#"{"event":"tool_results"}"#), Pick::Keep);
        assert_eq!(pick(r#"{"event":"compact_finished"}"#), Pick::Boundary);
        assert_eq!(pick(r#"{"event":"persisted"}"#), Pick::Skip);
    }

    #[test]
    fn the_window_starts_after_the_last_compaction_and_keeps_the_newest() {
        let entries = [
            entry("model_response", 1, text("old")),
            entry("compact_finished", 2, json!({"revision": 5})),
            entry("model_response", 3, text("one")),
            entry(
                "tool_results",
                4,
                json!([{"query": {"id": "c"}, "output": {"type": "text", "modality": "text", "raw": "r"}}]),
            ),
            entry("model_response", 5, text("two")),
        ];
        let w = live_window(&entries, WINDOW_BYTES);
        assert_eq!(w["compaction_index"], 5);
        let ids: Vec<&str> = w["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["msg-3", "msg-4", "msg-5"]);
        assert_eq!(w["messages"][1]["role"], "user");
        assert_eq!(w["messages"][2]["content"][0]["text"], "two");
        // A small budget keeps only the newest that fit.
        let one = w["messages"][2].to_string().len() + 1;
        let small = live_window(&entries, one);
        assert_eq!(small["messages"].as_array().unwrap().len(), 1);
        assert_eq!(small["messages"][0]["id"], "msg-5");
        let none = live_window(&entries, one - 1);
        assert_eq!(none["messages"], json!([]));
        assert!(live_window(&entries[..1], WINDOW_BYTES)
            .get("compaction_index")
            .is_none());
    }
}
