//! Worker envelopes as Shard events (seed 004 §9.4), pure. The input is a
//! transcript entry as the hub retains it (the worker's envelope plus the
//! hub's members, `hub_sequence` among them); the output is the events an
//! attached client receives, each tagged with the agent's id.
//!
//! | worker event | Shard events |
//! | --- | --- |
//! | `run_started` | `turn_start {turn_id: run_id}` |
//! | `model_response` | `message_complete` (text, `thinking` from `reasoning`, `tool_call` blocks from `invokes`), then `usage` from `cost` |
//! | `tool_calls` | one `tool_call` per call (`read_only` from the call's `type`) |
//! | `tool_results` | one `tool_result` per result |
//! | `run_finished` | `turn_end {turn_id, usage}` (the run's summed costs); a failed run first an `error` |
//! | `compact_finished` | `compaction {index: revision, removed_turns, summary}` |
//! | `error` | `error` (`fatal` when the worker says its saves stopped, `durable: false`) |
//!
//! Message ids are `msg-<hub_sequence>`, so a message has the same id live
//! and in a `sync` window rebuilt from the transcript.

use serde_json::{json, Map, Value};

use super::wire::Code;

/// Token counts summed from worker `cost` objects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    /// Whether any cost was reported (an absent cost means unknown).
    pub reported: bool,
}

impl Usage {
    /// The worker's `{prompt, generated, cache_hit}`.
    pub fn of_cost(cost: &Value) -> Option<Usage> {
        let cost = cost.as_object()?;
        let n = |k: &str| cost.get(k).and_then(Value::as_u64).unwrap_or(0);
        Some(Usage {
            input: n("prompt"),
            output: n("generated"),
            cache_read: n("cache_hit"),
            reported: true,
        })
    }

    pub fn add(&mut self, other: Usage) {
        self.input += other.input;
        self.output += other.output;
        self.cache_read += other.cache_read;
        self.reported |= other.reported;
    }

    /// The seed's `Usage` object.
    pub fn to_json(self) -> Value {
        json!({"input": self.input, "output": self.output, "cache_read": self.cache_read})
    }
}

/// The id of the message an entry holds.
pub fn message_id(entry: &Value) -> String {
    format!("msg-{}", entry["hub_sequence"].as_u64().unwrap_or(0))
}

/// The text of a worker content part, when it is text.
fn text_of(part: &Value) -> Option<&str> {
    let text = part.get("type").and_then(Value::as_str) == Some("text")
        && part
            .get("modality")
            .and_then(Value::as_str)
            .unwrap_or("text")
            == "text";
    text.then(|| part.get("raw").and_then(Value::as_str))
        .flatten()
}

/// A call's arguments as the seed's `args` object.
fn args_of(call: &Value) -> Value {
    match call.get("arguments") {
        Some(Value::Object(map)) => Value::Object(map.clone()),
        None | Some(Value::Null) => json!({}),
        Some(other) => json!({"value": other}),
    }
}

/// The assistant message of a `model_response` entry: `thinking` from the
/// reasoning part, a `text` block per text part, a `tool_call` block per
/// proposed call. Parts that are not text (images, binary) have no block
/// in the seed's content types and are left out.
pub fn response_message(entry: &Value) -> Option<Value> {
    let data = entry.get("data")?.as_object()?;
    let mut blocks = Vec::new();
    if let Some(text) = data.get("reasoning").and_then(text_of) {
        blocks.push(json!({"type": "thinking", "text": text}));
    }
    for part in data
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(text) = text_of(part) {
            blocks.push(json!({"type": "text", "text": text}));
        }
    }
    for call in data
        .get("invokes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        blocks.push(json!({
            "type": "tool_call",
            "id": call.get("id").and_then(Value::as_str).unwrap_or(""),
            "name": call.get("name").and_then(Value::as_str).unwrap_or(""),
            "args": args_of(call),
        }));
    }
    Some(json!({"id": message_id(entry), "role": "assistant", "content": blocks}))
}

/// A worker result object's Shard form: `(tool_call_id, content,
/// is_error, exit_code)`. A result whose `extras.error` is set (a denial,
/// a failed dispatch) is an `error` content; a command that exited
/// non-zero or timed out is an error result with its text.
fn result_parts(result: &Value) -> (String, Value, bool, Option<i64>) {
    let id = result
        .pointer("/query/id")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let extras = result.get("extras").and_then(Value::as_object);
    let exit_code = extras
        .and_then(|e| e.get("exit_code"))
        .and_then(Value::as_i64);
    let output = result.get("output").cloned().unwrap_or(Value::Null);
    if let Some(error) = extras.and_then(|e| e.get("error")).filter(|e| !e.is_null()) {
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .or_else(|| text_of(&output))
            .unwrap_or("the tool call failed");
        return (
            id,
            json!({"kind": "error", "message": message}),
            true,
            exit_code,
        );
    }
    let timed_out = extras
        .and_then(|e| e.get("timed_out"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let is_error = timed_out || exit_code.is_some_and(|c| c != 0);
    let content = match text_of(&output) {
        Some(text) => json!({"kind": "text", "text": text}),
        None => json!({"kind": "json", "value": output}),
    };
    (id, content, is_error, exit_code)
}

/// The results of a `tool_results` entry as `tool_result` content blocks
/// of one user message (for a `sync` window).
pub fn results_message(entry: &Value) -> Option<Value> {
    let results = results_of(entry)?;
    let blocks: Vec<Value> = results
        .iter()
        .map(|r| {
            let (id, content, is_error, _) = result_parts(r);
            json!({"type": "tool_result", "tool_call_id": id, "content": content, "is_error": is_error})
        })
        .collect();
    Some(json!({"id": message_id(entry), "role": "user", "content": blocks}))
}

/// `data` as an array, or its `results`/`calls` member (older shapes).
fn list_of<'a>(entry: &'a Value, member: &str) -> Option<&'a Vec<Value>> {
    let data = entry.get("data")?;
    data.as_array()
        .or_else(|| data.get(member).and_then(Value::as_array))
}

fn results_of(entry: &Value) -> Option<&Vec<Value>> {
    list_of(entry, "results")
}

/// The Shard events of one transcript entry of agent `agent`, in order.
/// `run_usage` is the run's summed usage (for `turn_end`).
pub fn events(agent: &str, entry: &Value, run_usage: Option<Usage>) -> Vec<Value> {
    let event = entry.get("event").and_then(Value::as_str).unwrap_or("");
    let run_id = entry.get("run_id").and_then(Value::as_str).unwrap_or("");
    let data = entry.get("data").unwrap_or(&Value::Null);
    let mut out = Vec::new();
    match event {
        "run_started" => {
            out.push(json!({"type": "turn_start", "agent_id": agent, "turn_id": run_id}))
        }
        "model_response" => {
            if let Some(message) = response_message(entry) {
                out.push(json!({
                    "type": "message_complete",
                    "agent_id": agent,
                    "message_id": message_id(entry),
                    "message": message,
                }));
                if let Some(usage) = data.get("cost").and_then(Usage::of_cost) {
                    let mut event = usage.to_json();
                    event["type"] = json!("usage");
                    event["agent_id"] = json!(agent);
                    out.push(event);
                }
            }
        }
        "tool_calls" => {
            for call in list_of(entry, "calls").into_iter().flatten() {
                out.push(json!({
                    "type": "tool_call",
                    "agent_id": agent,
                    "tool_call_id": call.get("id").and_then(Value::as_str).unwrap_or(""),
                    "name": call.get("name").and_then(Value::as_str).unwrap_or(""),
                    "args": args_of(call),
                    "read_only": call.get("type").and_then(Value::as_str) == Some("read_only"),
                }));
            }
        }
        "tool_results" => {
            for result in results_of(entry).into_iter().flatten() {
                let (id, content, is_error, exit_code) = result_parts(result);
                let mut event = json!({
                    "type": "tool_result",
                    "agent_id": agent,
                    "tool_call_id": id,
                    "content": content,
                    "is_error": is_error,
                });
                if let Some(code) = exit_code {
                    event["exit_code"] = json!(code);
                }
                out.push(event);
            }
        }
        "run_finished" => {
            if data.get("status").and_then(Value::as_str) == Some("failed") {
                let code = if data.pointer("/failure/stage").and_then(Value::as_str)
                    == Some("model_request")
                {
                    Code::ProviderError
                } else {
                    Code::InternalError
                };
                let message = data
                    .get("error")
                    .and_then(Value::as_str)
                    .filter(|m| !m.is_empty())
                    .unwrap_or("the run failed");
                out.push(super::wire::error_event(agent, code, message, false));
            }
            let mut end = json!({"type": "turn_end", "agent_id": agent, "turn_id": run_id});
            if let Some(usage) = run_usage.filter(|u| u.reported) {
                end["usage"] = usage.to_json();
            }
            out.push(end);
        }
        "compact_finished" => {
            let mut event = Map::new();
            event.insert("type".into(), json!("compaction"));
            event.insert("agent_id".into(), json!(agent));
            event.insert(
                "index".into(),
                data.get("revision").cloned().unwrap_or(json!(0)),
            );
            for key in ["removed_turns", "summary"] {
                if let Some(value) = data.get(key) {
                    event.insert(key.into(), value.clone());
                }
            }
            out.push(Value::Object(event));
        }
        "error" => {
            let message = data
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("the worker reported an error");
            let fatal = data.get("durable").and_then(Value::as_bool) == Some(false);
            out.push(super::wire::error_event(
                agent,
                Code::InternalError,
                message,
                fatal,
            ));
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(event: &str, seq: u64, data: Value) -> Value {
        json!({"type": "event", "event": event, "session_id": "s", "worker_id": "w",
            "request_id": "q", "run_id": "r1", "sequence": seq, "data": data,
            "hub_sequence": seq})
    }

    #[test]
    fn a_model_response_is_a_complete_message_and_its_usage() {
        let e = entry(
            "model_response",
            4,
            json!({"type": "model_response", "role": "assistant",
                "reasoning": {"type": "text", "modality": "text", "raw": "hmm"},
                "content": [{"type": "text", "modality": "text", "raw": "hello"},
                            {"type": "binary", "modality": "image", "raw": "AAAA"}],
                "invokes": [{"id": "c1", "name": "run_command", "arguments": {"command": "ls"},
                             "type": "serial_write"}],
                "cost": {"prompt": 10, "generated": 3, "cache_hit": 2}}),
        );
        let out = events("a", &e, None);
        assert_eq!(out.len(), 2);
        assert_eq!(
            out[0],
            json!({"type": "message_complete", "agent_id": "a", "message_id": "msg-4",
                "message": {"id": "msg-4", "role": "assistant", "content": [
                    {"type": "thinking", "text": "hmm"},
                    {"type": "text", "text": "hello"},
                    {"type": "tool_call", "id": "c1", "name": "run_command", "args": {"command": "ls"}}]}})
        );
        assert_eq!(
            out[1],
            json!({"type": "usage", "agent_id": "a", "input": 10, "output": 3, "cache_read": 2})
        );
        // No cost: no usage event (absence means unknown, not zero).
        let bare = entry("model_response", 5, json!({"content": []}));
        assert_eq!(events("a", &bare, None).len(), 1);
        // A display omission (data null) has no message to show.
        assert!(events("a", &entry("model_response", 6, Value::Null), None).is_empty());
    }

    #[test]
    fn calls_and_results_are_one_event_each() {
        let calls = entry(
            "tool_calls",
            2,
            json!([{"id": "c1", "name": "read", "arguments": {"p": 1}, "type": "read_only"},
                   {"id": "c2", "name": "run_command", "arguments": "x", "type": "serial_write"}]),
        );
        let out = events("a", &calls, None);
        assert_eq!(out[0]["read_only"], true);
        assert_eq!(out[0]["tool_call_id"], "c1");
        assert_eq!(out[1]["read_only"], false);
        assert_eq!(out[1]["args"], json!({"value": "x"}));
        let results = entry(
            "tool_results",
            3,
            json!([
                {"query": {"id": "c1"}, "output": {"type": "text", "modality": "text", "raw": "ok"},
                 "extras": {"exit_code": 0}},
                {"query": {"id": "c2"}, "output": {"type": "text", "modality": "text", "raw": "Tool call denied: no"},
                 "extras": {"error": {"stage": "security_check", "message": "no"}}},
                {"query": {"id": "c3"}, "output": {"type": "text", "modality": "text", "raw": "boom"},
                 "extras": {"exit_code": 2}},
            ]),
        );
        let out = events("a", &results, None);
        assert_eq!(
            out[0],
            json!({"type": "tool_result", "agent_id": "a", "tool_call_id": "c1",
                "content": {"kind": "text", "text": "ok"}, "is_error": false, "exit_code": 0})
        );
        assert_eq!(out[1]["content"], json!({"kind": "error", "message": "no"}));
        assert_eq!(out[1]["is_error"], true);
        assert_eq!(out[2]["is_error"], true);
        assert_eq!(out[2]["exit_code"], 2);
        let message = results_message(&results).unwrap();
        assert_eq!(message["role"], "user");
        assert_eq!(message["content"][1]["type"], "tool_result");
    }

    #[test]
    fn runs_start_and_end_with_their_usage_and_failures() {
        assert_eq!(
            events("a", &entry("run_started", 1, json!({})), None),
            vec![json!({"type": "turn_start", "agent_id": "a", "turn_id": "r1"})]
        );
        let usage = Usage {
            input: 5,
            output: 1,
            cache_read: 0,
            reported: true,
        };
        let done = events(
            "a",
            &entry("run_finished", 9, json!({"status": "completed"})),
            Some(usage),
        );
        assert_eq!(
            done,
            vec![json!({"type": "turn_end", "agent_id": "a", "turn_id": "r1",
                "usage": {"input": 5, "output": 1, "cache_read": 0}})]
        );
        let failed = events(
            "a",
            &entry(
                "run_finished",
                9,
                json!({"status": "failed", "error": "provider down", "failure": {"stage": "model_request"}}),
            ),
            None,
        );
        assert_eq!(failed[0]["type"], "error");
        assert_eq!(failed[0]["code"], "PROVIDER_ERROR");
        assert_eq!(failed[0]["message"], "provider down");
        assert_eq!(failed[1]["type"], "turn_end");
        assert!(failed[1].get("usage").is_none());
    }

    #[test]
    fn compactions_errors_and_the_rest() {
        let c = events(
            "a",
            &entry(
                "compact_finished",
                3,
                json!({"summary": "s", "memory_file": "/x", "removed_turns": 2, "revision": 7}),
            ),
            None,
        );
        assert_eq!(
            c,
            vec![
                json!({"type": "compaction", "agent_id": "a", "index": 7, "removed_turns": 2, "summary": "s"})
            ]
        );
        let e = events(
            "a",
            &entry(
                "error",
                3,
                json!({"message": "save failed", "durable": false}),
            ),
            None,
        );
        assert_eq!(e[0]["fatal"], true);
        assert_eq!(e[0]["code"], "INTERNAL_ERROR");
        for quiet in [
            "persisted",
            "status",
            "input_admitted",
            "input_committed",
            "history",
        ] {
            assert!(
                events("a", &entry(quiet, 1, json!({})), None).is_empty(),
                "{quiet}"
            );
        }
    }
}
