//! The built-in worker's conversation: turns of user content and committed
//! model responses, the display revision, compact memory and loop progress.
//! It is what `state.json` holds, and it answers the read-only queries:
//! `history` pages (the real worker's display projection and cursor rules)
//! and `answer` pages (32 KiB of one response part, addressed by an
//! answer source with a SHA-256 fingerprint). Pure: no I/O, no clock.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::wire::sha256::Sha256;

/// Tag written into `state.json` so a foreign file is recognised.
pub(crate) const STATE_FORMAT: &str = "simplex-mock-worker/1";
/// Compact JSON of one history `data` object (252 KiB).
pub(crate) const HISTORY_PAGE_MAX_BYTES: usize = 258_048;
/// Original UTF-8 bytes in one answer page (32 KiB).
pub(crate) const ANSWER_PAGE_BYTES: usize = 32 * 1024;
/// Aggregate preview allowance of one response in a history page.
const RESPONSE_PREVIEW_BYTES: usize = 96 * 1024;
/// Response parts shown in a history step.
const RESPONSE_PREVIEW_PARTS: usize = 128;
/// User parts shown in a history turn.
const USER_PREVIEW_PARTS: usize = 4;
/// A compact summary is at most this many bytes.
pub(crate) const SUMMARY_MAX_BYTES: usize = 32 * 1024;

/// Correlates a committed response with the run that produced it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Execution {
    pub worker_id: String,
    pub request_id: String,
    pub run_id: String,
}

/// One committed model response and the tool results projected after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Step {
    /// The message object: `type`, `role`, `content`, optional `invokes`.
    pub response: Value,
    pub commit_sequence: u64,
    pub execution: Execution,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_results: Vec<Value>,
}

/// One user interaction and the model steps that answered it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Turn {
    /// User content parts as admitted (`type`, `modality`, `raw`, `extras`).
    pub user: Vec<Value>,
    /// A host-inserted turn (a continuation from memory), hidden from the
    /// history user projection.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub internal: bool,
    pub steps: Vec<Step>,
}

/// Summary left by the last successful compaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Memory {
    pub summary: String,
    pub memory_file: String,
}

/// The `loop` object of the status event, also persisted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LoopProgress {
    /// `idle`, `running`, `completed`, `cancelled`, `exchange_limit`, `failed`.
    pub status: String,
    /// `ready`, `model`, `tools`.
    pub phase: String,
    pub completed_exchanges: u64,
    pub error: String,
}

impl Default for LoopProgress {
    fn default() -> Self {
        LoopProgress {
            status: "idle".into(),
            phase: "ready".into(),
            completed_exchanges: 0,
            error: String::new(),
        }
    }
}

/// Everything the worker persists.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Conversation {
    /// Display revision; advances on every visible change.
    pub revision: u64,
    /// Responses committed across runs; the next commit gets this plus one.
    pub committed_response_sequence: u64,
    #[serde(default)]
    pub memory: Option<Memory>,
    #[serde(default, rename = "loop")]
    pub loop_progress: LoopProgress,
    pub turns: Vec<Turn>,
}

/// A parsed `history` query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HistoryQuery {
    pub request_id: String,
    pub start: usize,
    pub step: usize,
    pub limit: usize,
}

/// A parsed `answer` query.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AnswerQuery {
    pub request_id: String,
    /// The source object as sent, echoed in the reply.
    pub source: Value,
    pub worker_id: String,
    pub turn: usize,
    pub step: usize,
    pub commit_sequence: String,
    pub fingerprint: String,
    pub part: usize,
    pub offset: usize,
}

/// The text of the text-modality parts of `parts`, joined by newlines.
pub(crate) fn text_of(parts: &[Value]) -> String {
    parts
        .iter()
        .filter(|part| part["type"] == "text" && part["modality"] == "text")
        .filter_map(|part| part["raw"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The longest prefix of `text` of at most `max` bytes that ends on a
/// character boundary.
pub(crate) fn clip(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// SHA-256 over the ordered answer parts: encoding, modality, byte length
/// and bytes of each, separated so no two part lists collide.
pub(crate) fn fingerprint(parts: &[Value]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        let raw = part["raw"].as_str().unwrap_or("");
        hasher.update(part["type"].as_str().unwrap_or("").as_bytes());
        hasher.update(&[0]);
        hasher.update(part["modality"].as_str().unwrap_or("").as_bytes());
        hasher.update(&[0]);
        hasher.update(raw.len().to_string().as_bytes());
        hasher.update(&[0]);
        hasher.update(raw.as_bytes());
        hasher.update(&[0]);
    }
    hasher.finish_hex()
}

fn content_of(step: &Step) -> &[Value] {
    step.response["content"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The display copy of one part, `raw` clipped to `max` bytes (binary
/// values are never shown).
fn display_part(part: &Value, max: usize) -> Value {
    let mut shown = json!({"type": part["type"], "modality": part["modality"]});
    let raw = part["raw"].as_str().unwrap_or("");
    if part["type"] == "binary" {
        shown["raw"] = json!("");
        shown["omitted"] = json!(true);
        shown["bytes"] = json!(raw.len());
    } else {
        shown["raw"] = json!(clip(raw, max));
        if raw.len() > max {
            shown["truncated"] = json!(true);
            shown["bytes"] = json!(raw.len());
        }
    }
    shown
}

fn display_user(parts: &[Value]) -> Value {
    parts
        .iter()
        .take(USER_PREVIEW_PARTS)
        .map(|part| {
            let max = if part["modality"] == "text" {
                4096
            } else {
                2048
            };
            display_part(part, max)
        })
        .collect()
}

fn encoded_len(value: &Value) -> usize {
    serde_json::to_vec(value).map(|v| v.len()).unwrap_or(0)
}

impl Conversation {
    /// The answer source of a committed step, as live `model_response`
    /// events and history steps carry it.
    pub(crate) fn answer_source(&self, worker_id: &str, turn: usize, step: usize) -> Value {
        let committed = &self.turns[turn].steps[step];
        json!({
            "worker_id": worker_id,
            "turn": turn,
            "step": step,
            "commit_sequence": committed.commit_sequence.to_string(),
            "fingerprint": fingerprint(content_of(committed)),
        })
    }

    fn display_step(&self, worker_id: &str, turn: usize, index: usize) -> Value {
        let step = &self.turns[turn].steps[index];
        let parts = content_of(step);
        let mut allowance = RESPONSE_PREVIEW_BYTES;
        let shown: Vec<Value> = parts
            .iter()
            .take(RESPONSE_PREVIEW_PARTS)
            .map(|part| {
                let value = display_part(part, allowance);
                allowance -= value["raw"].as_str().map_or(0, str::len);
                value
            })
            .collect();
        json!({
            "index": index,
            "content": shown,
            "tool_calls": step.response["invokes"].as_array().map_or(0, Vec::len),
            "omitted_parts": parts.len().saturating_sub(RESPONSE_PREVIEW_PARTS),
            "commit_sequence": step.commit_sequence.to_string(),
            "execution": step.execution,
            "answer_source": self.answer_source(worker_id, turn, index),
        })
    }

    /// One history page, following the real worker's cursor rules: whole
    /// turns and steps within a byte budget, a long turn continued with
    /// `next_step`. `Err` is the `history_error` message.
    pub(crate) fn history_page(
        &self,
        query: &HistoryQuery,
        worker_id: &str,
    ) -> Result<Value, String> {
        let total = self.turns.len();
        if query.start >= total && query.step != 0 {
            return Err("history step is outside the available turns".into());
        }
        let start = query.start.min(total);
        let end = start + query.limit.min(total - start);
        let mut page = json!({
            "request_id": query.request_id, "revision": self.revision,
            "start": start, "step": query.step, "next": total,
            "next_step": u64::MAX, "total": total, "turns": [],
        });
        let mut page_bytes = encoded_len(&page);
        let mut turns = Vec::new();
        let mut next = start;
        let mut next_step = 0;
        for index in start..end {
            let turn = &self.turns[index];
            let first_step = if index == start { query.step } else { 0 };
            if first_step > turn.steps.len() {
                return Err("history step is outside the selected turn".into());
            }
            let mut projected = json!({
                "index": index,
                "user": if turn.internal { json!([]) } else { display_user(&turn.user) },
                "steps": [],
                "omitted_user_parts": if turn.internal { 0 } else {
                    turn.user.len().saturating_sub(USER_PREVIEW_PARTS)
                },
                "omitted_steps": turn.steps.len() - first_step,
            });
            if turn.internal {
                projected["internal_input"] = json!("continue");
            }
            let separator = usize::from(!turns.is_empty());
            let mut turn_bytes = encoded_len(&projected);
            if page_bytes + separator + turn_bytes > HISTORY_PAGE_MAX_BYTES {
                if turns.is_empty() {
                    return Err("history turn exceeds the display budget".into());
                }
                break;
            }
            let mut steps = Vec::new();
            let mut step_index = first_step;
            while step_index < turn.steps.len() {
                let step = self.display_step(worker_id, index, step_index);
                let bytes = encoded_len(&step) + usize::from(!steps.is_empty());
                if page_bytes + separator + turn_bytes + bytes > HISTORY_PAGE_MAX_BYTES {
                    break;
                }
                turn_bytes += bytes;
                steps.push(step);
                step_index += 1;
            }
            if step_index == first_step && step_index < turn.steps.len() {
                if turns.is_empty() {
                    return Err("history step exceeds the display budget".into());
                }
                break;
            }
            projected["omitted_steps"] = json!(turn.steps.len() - step_index);
            projected["steps"] = Value::Array(steps);
            page_bytes += separator + turn_bytes;
            turns.push(projected);
            if step_index < turn.steps.len() {
                next = index;
                next_step = step_index;
                break;
            }
            next = index + 1;
        }
        page["turns"] = Value::Array(turns);
        page["next"] = json!(next);
        page["next_step"] = json!(next_step);
        Ok(page)
    }

    /// One answer page. `Err` is the `answer_error` message.
    pub(crate) fn answer_page(
        &self,
        query: &AnswerQuery,
        worker_id: &str,
    ) -> Result<Value, String> {
        if query.worker_id != worker_id {
            return Err("answer source belongs to another worker process".into());
        }
        let step = self
            .turns
            .get(query.turn)
            .and_then(|turn| turn.steps.get(query.step))
            .ok_or("answer source is no longer available")?;
        let parts = content_of(step);
        if step.commit_sequence.to_string() != query.commit_sequence
            || fingerprint(parts) != query.fingerprint
        {
            return Err("answer source is no longer available".into());
        }
        let part = parts
            .get(query.part)
            .ok_or("answer part is outside the response")?;
        if part["type"] == "binary" {
            return Err("binary answer parts are unavailable as text".into());
        }
        let raw = part["raw"].as_str().unwrap_or("");
        if query.offset > raw.len() || !raw.is_char_boundary(query.offset) {
            return Err("answer offset is not a character boundary of the part".into());
        }
        let page = clip(&raw[query.offset..], ANSWER_PAGE_BYTES);
        let next_offset = query.offset + page.len();
        let finished = next_offset == raw.len();
        let next_part = query.part + usize::from(finished);
        Ok(json!({
            "request_id": query.request_id,
            "source": query.source,
            "part": query.part,
            "offset": query.offset,
            "raw": page,
            "type": part["type"],
            "modality": part["modality"],
            "bytes": raw.len(),
            "next_offset": next_offset,
            "next_part": next_part,
            "total_parts": parts.len(),
            "done": finished && next_part == parts.len(),
        }))
    }

    /// The compact summary: one line per turn, bounded by
    /// [`SUMMARY_MAX_BYTES`].
    pub(crate) fn summary(&self) -> String {
        let mut out = format!("Summary of {} earlier turn(s).\n", self.turns.len());
        if let Some(memory) = &self.memory {
            out.push_str(&format!(
                "Earlier memory: {}\n",
                clip(&memory.summary, 1024)
            ));
        }
        for (index, turn) in self.turns.iter().enumerate() {
            let answer = turn
                .steps
                .last()
                .map(|step| text_of(content_of(step)))
                .unwrap_or_default();
            let line = format!(
                "- turn {index}: user: {:?}; assistant: {:?}\n",
                clip(&text_of(&turn.user), 200),
                clip(&answer, 200)
            );
            if out.len() + line.len() + 64 > SUMMARY_MAX_BYTES {
                out.push_str(&format!(
                    "- ... {} more turn(s)\n",
                    self.turns.len() - index
                ));
                break;
            }
            out.push_str(&line);
        }
        out
    }

    /// A readable Markdown rendering of the whole conversation
    /// (`readable.md`, compact archives). Binary parts are omitted.
    pub(crate) fn to_markdown(&self, session_id: &str) -> String {
        let mut out = format!("# Session {session_id}\n\nRevision {}.\n", self.revision);
        if let Some(memory) = &self.memory {
            out.push_str(&format!("\n## Memory\n\n{}\n", memory.summary));
        }
        for (index, turn) in self.turns.iter().enumerate() {
            out.push_str(&format!("\n## Turn {index}\n\n"));
            if turn.internal {
                out.push_str("*(continued from memory)*\n");
            }
            for part in &turn.user {
                out.push_str(&markdown_part("User", part));
            }
            for (number, step) in turn.steps.iter().enumerate() {
                out.push_str(&format!("\n### Step {number}\n\n"));
                for part in content_of(step) {
                    out.push_str(&markdown_part("Assistant", part));
                }
                for call in step.response["invokes"].as_array().into_iter().flatten() {
                    out.push_str(&format!(
                        "\n**Tool call** `{}` {}\n",
                        call["name"].as_str().unwrap_or(""),
                        call["arguments"]
                    ));
                }
                for result in &step.tool_results {
                    out.push_str(&format!(
                        "\n**Tool result**\n\n```\n{}\n```\n",
                        result["output"]["raw"].as_str().unwrap_or("")
                    ));
                }
            }
        }
        out
    }
}

fn markdown_part(who: &str, part: &Value) -> String {
    let raw = part["raw"].as_str().unwrap_or("");
    if part["type"] == "binary" {
        format!(
            "**{who}** [{} binary, {} bytes]\n",
            part["modality"],
            raw.len()
        )
    } else if part["type"] == "text" {
        format!("**{who}**\n\n{raw}\n")
    } else {
        format!("**{who}** [{} reference] {raw}\n", part["modality"])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(raw: &str) -> Value {
        json!({"type": "text", "modality": "text", "raw": raw})
    }

    fn step(sequence: u64, raw: &str) -> Step {
        Step {
            response: json!({"type": "model_response", "role": "assistant", "content": [text(raw)]}),
            commit_sequence: sequence,
            execution: Execution {
                worker_id: "w".into(),
                request_id: format!("r{sequence}"),
                run_id: format!("run{sequence}"),
            },
            tool_results: vec![],
        }
    }

    fn conversation(turns: usize, steps: usize, size: usize) -> Conversation {
        let mut c = Conversation::default();
        for t in 0..turns {
            let mut turn = Turn {
                user: vec![text(&format!("question {t}"))],
                internal: false,
                steps: vec![],
            };
            for _ in 0..steps {
                c.committed_response_sequence += 1;
                let body = "y".repeat(size);
                turn.steps.push(step(c.committed_response_sequence, &body));
            }
            c.turns.push(turn);
        }
        c.revision = 7;
        c
    }

    fn query(start: usize, step: usize, limit: usize) -> HistoryQuery {
        HistoryQuery {
            request_id: "h".into(),
            start,
            step,
            limit,
        }
    }

    #[test]
    fn history_pages_by_limit() {
        let c = conversation(12, 1, 10);
        let page = c.history_page(&query(0, 0, 10), "w").unwrap();
        assert_eq!(page["total"], 12);
        assert_eq!(page["revision"], 7);
        assert_eq!(page["next"], 10);
        assert_eq!(page["next_step"], 0);
        let turns = page["turns"].as_array().unwrap();
        assert_eq!(turns.len(), 10);
        assert_eq!(turns[3]["index"], 3);
        assert_eq!(turns[3]["user"][0]["raw"], "question 3");
        assert_eq!(turns[3]["steps"][0]["content"][0]["raw"], "y".repeat(10));
        assert_eq!(turns[3]["steps"][0]["commit_sequence"], "4");
        assert_eq!(turns[3]["steps"][0]["execution"]["run_id"], "run4");
        assert_eq!(turns[3]["steps"][0]["answer_source"]["turn"], 3);
        let last = c.history_page(&query(10, 0, 10), "w").unwrap();
        assert_eq!(
            (
                last["next"].as_u64(),
                last["turns"].as_array().unwrap().len()
            ),
            (Some(12), 2)
        );
        let past = c.history_page(&query(50, 0, 10), "w").unwrap();
        assert_eq!(past["start"], 12);
        assert!(past["turns"].as_array().unwrap().is_empty());
        assert!(c.history_page(&query(50, 1, 10), "w").is_err());
        assert!(c.history_page(&query(0, 2, 10), "w").is_err());
    }

    #[test]
    fn long_turns_continue_with_next_step() {
        // Each step previews 96 KiB, so only two fit one 252 KiB page.
        let c = conversation(2, 5, 200 * 1024);
        let mut cursor = (0usize, 0usize);
        let mut seen = Vec::new();
        while cursor != (2, 0) {
            let page = c.history_page(&query(cursor.0, cursor.1, 10), "w").unwrap();
            assert!(encoded_len(&page) <= HISTORY_PAGE_MAX_BYTES);
            for turn in page["turns"].as_array().unwrap() {
                for step in turn["steps"].as_array().unwrap() {
                    assert_eq!(step["content"][0]["truncated"], true);
                    assert_eq!(step["content"][0]["bytes"], 200 * 1024);
                    seen.push((
                        turn["index"].as_u64().unwrap(),
                        step["index"].as_u64().unwrap(),
                    ));
                }
            }
            let next = (
                page["next"].as_u64().unwrap() as usize,
                page["next_step"].as_u64().unwrap() as usize,
            );
            assert_ne!(next, cursor, "the cursor must advance");
            cursor = next;
        }
        let expected: Vec<(u64, u64)> = (0..2).flat_map(|t| (0..5).map(move |s| (t, s))).collect();
        assert_eq!(seen, expected);
    }

    fn answer_query(
        c: &Conversation,
        turn: usize,
        step: usize,
        part: usize,
        offset: usize,
    ) -> AnswerQuery {
        let source = c.answer_source("w", turn, step);
        AnswerQuery {
            request_id: "a".into(),
            worker_id: "w".into(),
            turn,
            step,
            commit_sequence: source["commit_sequence"].as_str().unwrap().into(),
            fingerprint: source["fingerprint"].as_str().unwrap().into(),
            source,
            part,
            offset,
        }
    }

    #[test]
    fn answer_pages_reassemble_the_full_text() {
        let mut c = conversation(1, 1, 0);
        let body: String = "é".repeat(20_000) + "tail";
        c.turns[0].steps[0].response["content"] = json!([text(&body), text("second")]);
        let mut assembled = String::new();
        let mut cursor = (0usize, 0usize);
        loop {
            let page = c
                .answer_page(&answer_query(&c, 0, 0, cursor.0, cursor.1), "w")
                .unwrap();
            let raw = page["raw"].as_str().unwrap();
            assert!(raw.len() <= ANSWER_PAGE_BYTES);
            if cursor.0 == 0 {
                assembled.push_str(raw);
            }
            assert_eq!(page["total_parts"], 2);
            if page["done"] == true {
                assert_eq!(page["raw"], "second");
                break;
            }
            let next_part = page["next_part"].as_u64().unwrap() as usize;
            cursor = if next_part != cursor.0 {
                (next_part, 0)
            } else {
                (cursor.0, page["next_offset"].as_u64().unwrap() as usize)
            };
        }
        assert_eq!(assembled, body);
    }

    #[test]
    fn answer_errors() {
        let c = conversation(1, 1, 10);
        let good = answer_query(&c, 0, 0, 0, 0);
        let mut other_worker = good.clone();
        other_worker.worker_id = "x".into();
        assert!(c.answer_page(&other_worker, "w").is_err());
        let mut stale = good.clone();
        stale.fingerprint = "0".repeat(64);
        assert!(c.answer_page(&stale, "w").is_err());
        let mut beyond = good.clone();
        beyond.offset = 11;
        assert!(c.answer_page(&beyond, "w").is_err());
        let mut no_part = good.clone();
        no_part.part = 1;
        assert!(c.answer_page(&no_part, "w").is_err());
        assert!(c.answer_page(&good, "w").is_ok());
    }

    #[test]
    fn state_round_trips_and_summaries_are_bounded() {
        let mut c = conversation(300, 1, 500);
        c.memory = Some(Memory {
            summary: "older".into(),
            memory_file: "/m".into(),
        });
        let text = serde_json::to_string(&c).unwrap();
        let back: Conversation = serde_json::from_str(&text).unwrap();
        assert_eq!(back, c);
        let summary = c.summary();
        assert!(summary.len() <= SUMMARY_MAX_BYTES);
        assert!(summary.contains("Earlier memory: older"));
        assert!(summary.contains("more turn(s)"));
        let markdown = c.to_markdown("demo");
        assert!(markdown.starts_with("# Session demo"));
        assert!(markdown.contains("## Turn 299"));
    }
}
