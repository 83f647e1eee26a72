//! The stored form, `conversation.json`: serializing the projection (whose
//! exact compact size is what the cap bounds) and reading it back under a
//! possibly different cap, refusing foreign or malformed records.

use std::fmt;

use serde_json::{json, Map, Value};

use super::model::{sanitize_source, Conversation, Step, Text, Turn};
use super::{FORMAT, MAX_HEADER_TEXT};
use crate::wire::worker::display::kind;

impl Text {
    pub(super) fn to_json(&self) -> Value {
        let mut out = json!({ "text": self.text });
        if self.truncated {
            out["truncated"] = json!(true);
        }
        out
    }

    pub(super) fn from_json(v: &Value, what: &str) -> Result<Text, ConversationError> {
        let fields = object(v, what)?;
        let text = match fields.get("text") {
            Some(Value::String(s)) => s.clone(),
            _ => return Err(bad(what, "text must be a string")),
        };
        let truncated = flag(fields, "truncated", what)?;
        Ok(Text { text, truncated })
    }
}

impl Step {
    pub(super) fn to_json(&self) -> Value {
        let mut out = json!({"index": self.index, "text": self.text.text});
        if self.text.truncated {
            out["truncated"] = json!(true);
        }
        if let Some(source) = &self.answer_source {
            out["answer_source"] = source.clone();
        }
        out
    }
}

impl Turn {
    pub(super) fn to_json(&self) -> Value {
        let mut out = json!({
            "index": self.index,
            "user": self.user.as_ref().map(Text::to_json),
            "steps": self.steps.iter().map(Step::to_json).collect::<Vec<_>>(),
        });
        if self.omitted_steps > 0 {
            out["omitted_steps"] = json!(self.omitted_steps);
        }
        if let Some(summary) = &self.summary {
            out["summary"] = summary.to_json();
        }
        if let Some(run_id) = &self.run_id {
            out["run_id"] = json!(run_id);
        }
        out
    }

    pub(super) fn from_json(v: &Value) -> Result<Turn, ConversationError> {
        let fields = object(v, "turn")?;
        let index = optional_u64(fields, "index", "turn")?;
        let user = match fields.get("user") {
            None | Some(Value::Null) => None,
            Some(u) => Some(Text::from_json(u, "turn user")?),
        };
        let summary = match fields.get("summary") {
            None | Some(Value::Null) => None,
            Some(s) => Some(Text::from_json(s, "turn summary")?),
        };
        let omitted_steps = optional_u64(fields, "omitted_steps", "turn")?.unwrap_or(0);
        let run_id = match fields.get("run_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(bad("turn", "run_id must be a string")),
        };
        let Some(Value::Array(items)) = fields.get("steps") else {
            return Err(bad("turn", "steps must be an array"));
        };
        let mut steps = Vec::with_capacity(items.len());
        for item in items {
            let step = object(item, "step")?;
            let text = Text::from_json(item, "step")?;
            steps.push(Step {
                index: optional_u64(step, "index", "step")?,
                text,
                answer_source: step.get("answer_source").and_then(sanitize_source),
            });
        }
        let mut turn = Turn {
            index,
            user,
            steps,
            omitted_steps,
            summary,
            run_id,
            bytes: 0,
        };
        turn.cap_steps();
        turn.measure();
        Ok(turn)
    }
}

/// Why `conversation.json` could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationError {
    pub message: String,
}

impl fmt::Display for ConversationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid conversation record: {}", self.message)
    }
}

impl std::error::Error for ConversationError {}

fn bad(what: &str, message: &str) -> ConversationError {
    ConversationError {
        message: format!("{what}: {message}"),
    }
}

fn object<'a>(v: &'a Value, what: &str) -> Result<&'a Map<String, Value>, ConversationError> {
    v.as_object()
        .ok_or_else(|| bad(what, &format!("must be an object, found {}", kind(v))))
}

fn flag(fields: &Map<String, Value>, name: &str, what: &str) -> Result<bool, ConversationError> {
    match fields.get(name) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(bad(what, &format!("{name} must be a boolean"))),
    }
}

fn optional_u64(
    fields: &Map<String, Value>,
    name: &str,
    what: &str,
) -> Result<Option<u64>, ConversationError> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| bad(what, &format!("{name} must be an integer >= 0"))),
    }
}

fn optional_string(
    fields: &Map<String, Value>,
    name: &str,
) -> Result<Option<String>, ConversationError> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(bad("conversation", &format!("{name} must be a string"))),
    }
}

impl Conversation {
    pub(super) fn header_json(&self) -> Value {
        json!({
            "format": FORMAT,
            "revision": self.revision,
            "worker_id": self.worker_id,
            "refreshed_at": self.refreshed_at,
            "history_revision": self.history_revision,
            "stale": self.stale,
            "incomplete": self.incomplete,
            "truncated": self.truncated,
            "omitted_turns": self.omitted_turns,
            "turns": [],
        })
    }

    /// The `conversation.json` record.
    pub fn to_json(&self) -> Value {
        let mut out = self.header_json();
        out["turns"] = Value::Array(self.turns.iter().map(Turn::to_json).collect());
        out
    }

    /// Reads a `conversation.json` record under (possibly another) cap;
    /// over the cap it is evicted as usual. The generation restarts at 0
    /// and the flags are kept as stored: a restarted hub that may have
    /// missed events says so with [`Conversation::on_event_gap`].
    pub fn from_json(value: &Value, cap_bytes: usize) -> Result<Conversation, ConversationError> {
        let fields = object(value, "conversation")?;
        if fields.get("format").and_then(Value::as_str) != Some(FORMAT) {
            return Err(bad("conversation", "unknown format"));
        }
        let Some(Value::Array(items)) = fields.get("turns") else {
            return Err(bad("conversation", "turns must be an array"));
        };
        let mut conversation = Conversation::new(cap_bytes);
        conversation.revision = optional_u64(fields, "revision", "conversation")?.unwrap_or(0);
        conversation.worker_id = optional_string(fields, "worker_id")?;
        conversation.refreshed_at = optional_string(fields, "refreshed_at")?;
        // The header cannot be shrunk to fit the cap, so a file with an
        // absurd one is refused rather than loaded over the bound.
        for (name, value) in [
            ("worker_id", &conversation.worker_id),
            ("refreshed_at", &conversation.refreshed_at),
        ] {
            if value.as_ref().is_some_and(|v| v.len() > MAX_HEADER_TEXT) {
                return Err(bad(name, "too long"));
            }
        }
        conversation.history_revision = optional_u64(fields, "history_revision", "conversation")?;
        conversation.stale = flag(fields, "stale", "conversation")?;
        conversation.incomplete = flag(fields, "incomplete", "conversation")?;
        conversation.truncated = flag(fields, "truncated", "conversation")?;
        conversation.omitted_turns =
            optional_u64(fields, "omitted_turns", "conversation")?.unwrap_or(0);
        conversation.turns = items
            .iter()
            .map(Turn::from_json)
            .collect::<Result<_, _>>()?;
        if conversation.byte_len() > conversation.cap_bytes {
            conversation.changed();
        }
        Ok(conversation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::headless::conversation::test_support::*;
    use crate::session::headless::conversation::MIN_CONVERSATION_BYTES;

    #[test]
    fn stored_headers_are_bounded_and_revisions_saturate() {
        let mut c = Conversation::new(4096);
        c.on_connection("w1");
        let mut stored = c.to_json();
        stored["worker_id"] = json!("w".repeat(MAX_HEADER_TEXT + 1));
        assert!(Conversation::from_json(&stored, 4096).is_err());
        let mut stored = c.to_json();
        stored["revision"] = json!(u64::MAX);
        let mut back = Conversation::from_json(&stored, 4096).unwrap();
        back.on_event_gap();
        assert_eq!(back.revision(), u64::MAX);
    }

    #[test]
    fn json_round_trips() {
        let mut c = live(1 << 20, 3);
        c.on_compact_finished(&json!({"summary": "sum ü", "removed_turns": 3, "revision": 5}));
        c.on_input_committed("r9", &json!([part("q\n\"x\"")]));
        for s in 0..35 {
            c.on_model_response("r9", &response(&format!("é {s}"), 0, s));
        }
        c.mark_stale(true);
        let json = c.to_json();
        assert_eq!(json["format"], FORMAT);
        let back = Conversation::from_json(&json, 1 << 20).unwrap();
        assert_eq!(back.to_json(), json);
        assert_eq!(back.turns(), c.turns());
        assert_eq!(back.byte_len(), c.byte_len());
        assert_eq!(back.page(0, 5, 1000), c.page(0, 5, 1000));
        // Through text, as the file is stored.
        let text = serde_json::to_string(&json).unwrap();
        let reread =
            Conversation::from_json(&serde_json::from_str(&text).unwrap(), 1 << 20).unwrap();
        assert_eq!(reread.to_json(), json);
        // A smaller cap evicts on load.
        let small = Conversation::from_json(&json, MIN_CONVERSATION_BYTES).unwrap();
        assert_sized(&small);
        assert!(small.truncated());
        assert!(small.revision() > c.revision());
        // Foreign or malformed records are refused.
        for bad in [
            json!([]),
            json!({"format": "other", "turns": []}),
            json!({"format": FORMAT}),
            json!({"format": FORMAT, "turns": [{"index": -1, "steps": []}]}),
            json!({"format": FORMAT, "turns": [{"index": 0}]}),
            json!({"format": FORMAT, "turns": [{"index": 0, "steps": [{"text": 1}]}]}),
            json!({"format": FORMAT, "turns": [], "stale": "yes"}),
        ] {
            let err = Conversation::from_json(&bad, 1 << 20).unwrap_err();
            assert!(!err.to_string().is_empty());
        }
    }
}
