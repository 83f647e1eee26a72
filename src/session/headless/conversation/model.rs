//! The projection itself: [`Text`], [`Step`], [`Turn`] and [`Conversation`]
//! with their accessors, what live worker events (`input_committed`,
//! `model_response`, `compact_finished`, connection changes, gaps) change,
//! and the eviction that keeps the stored size within the cap.

use serde_json::Value;

use super::clip::{clip_bytes, clip_escaped, escaped_len};
use super::{MAX_SOURCE_BYTES, MAX_STEPS_PER_TURN, MIN_CONVERSATION_BYTES};
use crate::wire::worker::display::encoded_len;

/// A visible text and whether it is only a prefix of the original.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text {
    pub text: String,
    pub truncated: bool,
}

/// `,"truncated":true`
const FLAG_BYTES: usize = 17;

impl Text {
    /// Shortens the text so its stored encoding loses at least `excess`
    /// bytes (counting the truncated flag it may gain).
    pub(super) fn clip_by(&mut self, excess: usize) {
        let current = escaped_len(&self.text);
        let flag = if self.truncated { 0 } else { FLAG_BYTES };
        let target = current.saturating_sub(excess + flag);
        let end = clip_escaped(&self.text, target);
        self.text.truncate(end);
        self.truncated = true;
    }

    pub(super) fn new(text: String, truncated: bool, max: usize) -> Text {
        let end = clip_bytes(&text, max);
        Text {
            truncated: truncated || end < text.len(),
            text: text[..end].to_string(),
        }
    }
}

/// One committed model response's visible text.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub(super) index: Option<u64>,
    pub(super) text: Text,
    pub(super) answer_source: Option<Value>,
}

impl Step {
    /// The worker's step index within its turn, when known.
    pub fn index(&self) -> Option<u64> {
        self.index
    }
    pub fn text(&self) -> &Text {
        &self.text
    }
    /// The worker's answer source for the complete response, when given.
    pub fn answer_source(&self) -> Option<&Value> {
        self.answer_source.as_ref()
    }
}

/// One user interaction and the responses that answered it, or a compact
/// result (`summary` set, no index, no user, no steps).
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub(super) index: Option<u64>,
    pub(super) user: Option<Text>,
    pub(super) steps: Vec<Step>,
    pub(super) omitted_steps: u64,
    pub(super) summary: Option<Text>,
    /// The run that committed this turn's input live, for associating its
    /// responses before their answer sources name the turn.
    pub(super) run_id: Option<String>,
    /// Compact JSON size of `to_json()`.
    pub(super) bytes: usize,
}

impl Turn {
    pub(super) fn new(index: Option<u64>, user: Option<Text>, run_id: Option<String>) -> Turn {
        let mut turn = Turn {
            index,
            user,
            steps: Vec::new(),
            omitted_steps: 0,
            summary: None,
            run_id,
            bytes: 0,
        };
        turn.measure();
        turn
    }

    fn compact(summary: Text) -> Turn {
        let mut turn = Turn::new(None, None, None);
        turn.summary = Some(summary);
        turn.measure();
        turn
    }

    /// The worker's turn index, when known (never for a compact result).
    pub fn index(&self) -> Option<u64> {
        self.index
    }
    /// The committed user text; `None` when unknown or host-internal.
    pub fn user(&self) -> Option<&Text> {
        self.user.as_ref()
    }
    /// The kept (final) steps, oldest first.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }
    /// Older steps of this turn that are not kept.
    pub fn omitted_steps(&self) -> u64 {
        self.omitted_steps
    }
    /// The compact summary, for a compact result entry.
    pub fn summary(&self) -> Option<&Text> {
        self.summary.as_ref()
    }
    pub fn is_compact(&self) -> bool {
        self.summary.is_some()
    }

    pub(super) fn measure(&mut self) {
        self.bytes = encoded_len(&self.to_json());
    }

    /// Keeps the final [`MAX_STEPS_PER_TURN`] steps.
    pub(super) fn cap_steps(&mut self) {
        if self.steps.len() > MAX_STEPS_PER_TURN {
            let drop = self.steps.len() - MAX_STEPS_PER_TURN;
            self.steps.drain(..drop);
            self.omitted_steps += drop as u64;
        }
    }

    pub(super) fn any_truncated(&self) -> bool {
        self.user.as_ref().is_some_and(|t| t.truncated)
            || self.summary.as_ref().is_some_and(|t| t.truncated)
            || self.steps.iter().any(|s| s.text.truncated)
    }
}

/// The bounded projection.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    pub(super) cap_bytes: usize,
    pub(super) revision: u64,
    /// Bumped by every live commit, compaction, event gap and connection
    /// change; a refresh from an older generation cannot publish.
    pub(super) generation: u64,
    pub(super) worker_id: Option<String>,
    pub(super) refreshed_at: Option<String>,
    pub(super) history_revision: Option<u64>,
    pub(super) stale: bool,
    pub(super) incomplete: bool,
    pub(super) truncated: bool,
    /// Older turns of the worker history not in the projection.
    pub(super) omitted_turns: u64,
    pub(super) turns: Vec<Turn>,
}

impl Conversation {
    /// An empty projection bounded by `cap_bytes` (at least
    /// [`MIN_CONVERSATION_BYTES`]).
    pub fn new(cap_bytes: usize) -> Conversation {
        Conversation {
            cap_bytes: cap_bytes.max(MIN_CONVERSATION_BYTES),
            revision: 0,
            generation: 0,
            worker_id: None,
            refreshed_at: None,
            history_revision: None,
            stale: false,
            incomplete: false,
            truncated: false,
            omitted_turns: 0,
            turns: Vec::new(),
        }
    }

    pub fn cap_bytes(&self) -> usize {
        self.cap_bytes
    }
    /// Advances on every change; receive cursors address one revision.
    pub fn revision(&self) -> u64 {
        self.revision
    }
    pub fn generation(&self) -> u64 {
        self.generation
    }
    pub fn worker_id(&self) -> Option<&str> {
        self.worker_id.as_deref()
    }
    pub fn refreshed_at(&self) -> Option<&str> {
        self.refreshed_at.as_deref()
    }
    /// The worker history revision last observed (refresh or compact).
    pub fn history_revision(&self) -> Option<u64> {
        self.history_revision
    }
    pub fn stale(&self) -> bool {
        self.stale
    }
    pub fn incomplete(&self) -> bool {
        self.incomplete
    }
    pub fn truncated(&self) -> bool {
        self.truncated
    }
    pub fn omitted_turns(&self) -> u64 {
        self.omitted_turns
    }
    /// The bounded turn array, oldest first.
    pub fn turns(&self) -> &[Turn] {
        &self.turns
    }

    /// Compact JSON size of [`Conversation::to_json`], never above the cap.
    pub fn byte_len(&self) -> usize {
        let commas = self.turns.len().saturating_sub(1);
        encoded_len(&self.header_json())
            + self.turns.iter().map(|t| t.bytes).sum::<usize>()
            + commas
    }

    pub(super) fn max_text(&self) -> usize {
        self.cap_bytes / 4
    }

    pub(super) fn changed(&mut self) {
        self.revision = self.revision.saturating_add(1);
        self.enforce_cap();
    }

    fn live_change(&mut self) {
        self.generation += 1;
        self.changed();
    }

    /// The last entry if it is an ordinary turn.
    fn last_turn_mut(&mut self) -> Option<&mut Turn> {
        self.turns.last_mut().filter(|t| !t.is_compact())
    }

    /// The index a new live turn gets: the previous one plus one, or 0
    /// right after a compact result, while the projection is not stale.
    fn next_turn_index(&self) -> Option<u64> {
        if self.stale {
            return None;
        }
        match self.turns.last() {
            Some(t) if t.is_compact() => Some(0),
            Some(t) => t.index.and_then(|i| i.checked_add(1)),
            None => None,
        }
    }

    /// `input_committed`: a new turn. The event carries no content, so
    /// `data` is what the caller knows of the committed input: the
    /// `content` array it sent with the request, or an object holding
    /// `content`; anything else records the user text as unknown. Only
    /// text parts of text modality are kept.
    pub fn on_input_committed(&mut self, run_id: &str, data: &Value) {
        let parts = match data {
            Value::Array(parts) => Some(parts),
            Value::Object(fields) => fields.get("content").and_then(Value::as_array),
            _ => None,
        };
        let user = parts.map(|parts| {
            let (text, truncated) = visible_text(parts);
            Text::new(text, truncated, self.max_text())
        });
        self.truncated |= user.as_ref().is_some_and(|u| u.truncated);
        let turn = Turn::new(self.next_turn_index(), user, Some(run_id.to_string()));
        self.turns.push(turn);
        self.live_change();
    }

    /// `model_response`: one committed response. Only its `content` text
    /// parts are kept (no reasoning, invokes, tool results or extras),
    /// with its `answer_source`. The source's turn/step place it; without
    /// one it continues the last turn.
    pub fn on_model_response(&mut self, run_id: &str, data: &Value) {
        let parts = data
            .get("content")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let (text, mut truncated) = visible_text(parts);
        truncated |= data
            .get("omitted_parts")
            .and_then(Value::as_u64)
            .is_some_and(|n| n > 0);
        let text = Text::new(text, truncated, self.max_text());
        self.truncated |= text.truncated;
        let mut source = data.get("answer_source").and_then(sanitize_source);
        if let (Some(src), Some(worker)) = (&source, &self.worker_id) {
            if src.get("worker_id").and_then(Value::as_str) != Some(worker.as_str()) {
                source = None;
                self.stale = true;
            }
        }
        let placed = source
            .as_ref()
            .and_then(|src| Some((src.get("turn")?.as_u64()?, src.get("step")?.as_u64()?)));
        let mut gap = false;
        let step_index;
        match placed {
            Some((turn_index, index)) => {
                let reuse = match self.turns.last() {
                    Some(last) if !last.is_compact() => {
                        last.index == Some(turn_index)
                            || (last.index.is_none() && last.run_id.as_deref() == Some(run_id))
                    }
                    _ => false,
                };
                if !reuse {
                    let previous = self.last_turn_mut().and_then(|t| t.index);
                    gap = previous.is_some_and(|p| Some(turn_index) != p.checked_add(1));
                    self.turns
                        .push(Turn::new(Some(turn_index), None, Some(run_id.to_string())));
                }
                let turn = self.turns.last_mut().expect("a turn");
                turn.index = Some(turn_index);
                if let Some(last) = turn.steps.last().and_then(|s| s.index) {
                    gap |= index > last.saturating_add(1);
                } else if turn.steps.is_empty() && turn.omitted_steps == 0 {
                    gap |= index > 0 && turn.user.is_some();
                }
                step_index = Some(index);
            }
            None => {
                if self.last_turn_mut().is_none() {
                    self.turns
                        .push(Turn::new(None, None, Some(run_id.to_string())));
                }
                let turn = self.turns.last_mut().expect("a turn");
                step_index = match turn.steps.last() {
                    Some(last) => last.index.and_then(|i| i.checked_add(1)),
                    None if turn.omitted_steps == 0 && turn.run_id.as_deref() == Some(run_id) => {
                        Some(0)
                    }
                    None => None,
                };
            }
        }
        let turn = self.turns.last_mut().expect("a turn");
        let step = Step {
            index: step_index,
            text,
            answer_source: source,
        };
        match step_index.and_then(|i| turn.steps.iter().position(|s| s.index == Some(i))) {
            // A repeated commit replaces its earlier copy.
            Some(at) => turn.steps[at] = step,
            None => turn.steps.push(step),
        }
        turn.cap_steps();
        turn.measure();
        if gap {
            self.stale = true;
        }
        self.live_change();
    }

    /// `compact_finished`: the worker history now holds no turns; the
    /// projection becomes the compact summary alone. `removed_turns` below
    /// the turns held here means the projection had diverged: it is marked
    /// stale.
    pub fn on_compact_finished(&mut self, data: &Value) {
        let summary = match data.get("summary") {
            Some(Value::String(s)) => Text::new(s.clone(), false, self.max_text()),
            // An omission object stands in for an oversized summary.
            _ => Text {
                text: String::new(),
                truncated: true,
            },
        };
        let held = self.turns.iter().filter(|t| !t.is_compact()).count() as u64;
        if let Some(removed) = data.get("removed_turns").and_then(Value::as_u64) {
            if removed < held {
                self.stale = true;
            }
        }
        if let Some(revision) = data.get("revision").and_then(Value::as_u64) {
            self.history_revision = Some(revision);
        }
        self.truncated = summary.truncated;
        self.incomplete = false;
        self.omitted_turns = 0;
        self.turns = vec![Turn::compact(summary)];
        self.live_change();
    }

    /// The event connection named `worker_id`. A new incarnation marks the
    /// projection stale (its history must be re-read) and cancels
    /// obsolete refreshes; the kept turns stay. Returns whether it changed.
    pub fn on_connection(&mut self, worker_id: &str) -> bool {
        if self.worker_id.as_deref() == Some(worker_id) {
            return false;
        }
        self.worker_id = Some(worker_id.to_string());
        self.stale = true;
        self.live_change();
        true
    }

    /// Events may have been missed (a sequence gap, a hub restart): stale,
    /// and refreshes collected before now cannot publish.
    pub fn on_event_gap(&mut self) {
        self.stale = true;
        self.live_change();
    }

    /// Marks the projection stale (and incomplete when asked), e.g. after
    /// refresh attempts ran out or a conversation write failed.
    pub fn mark_stale(&mut self, incomplete: bool) {
        if self.stale && (self.incomplete || !incomplete) {
            return;
        }
        self.stale = true;
        self.incomplete |= incomplete;
        self.changed();
    }

    /// Evicts until the stored size fits the cap: oldest turns, then the
    /// newest turn's oldest steps, then clipped texts.
    fn enforce_cap(&mut self) {
        loop {
            let total = self.byte_len();
            if total <= self.cap_bytes {
                return;
            }
            let excess = total - self.cap_bytes;
            self.truncated = true;
            if self.turns.len() > 1 {
                let removed = self.turns.remove(0);
                if !removed.is_compact() {
                    self.omitted_turns += 1;
                }
                continue;
            }
            let Some(turn) = self.turns.last_mut() else {
                return;
            };
            if turn.steps.len() > 1 {
                turn.steps.remove(0);
                turn.omitted_steps += 1;
                turn.measure();
                continue;
            }
            let clipped = [
                turn.user.as_mut(),
                turn.summary.as_mut(),
                turn.steps.last_mut().map(|s| &mut s.text),
            ]
            .into_iter()
            .flatten()
            .find(|t| !t.text.is_empty())
            .map(|text| text.clip_by(excess))
            .is_some();
            if !clipped {
                // Only structure is left: drop what is optional.
                if let Some(step) = turn.steps.last_mut().filter(|s| s.answer_source.is_some()) {
                    step.answer_source = None;
                } else if turn.run_id.is_some() {
                    turn.run_id = None;
                } else {
                    turn.measure();
                    return;
                }
            }
            turn.measure();
        }
    }
}

/// Visible text of content parts: text parts of text modality, joined by
/// newlines; and whether any of them is a shortened display copy.
pub(super) fn visible_text(parts: &[Value]) -> (String, bool) {
    let mut texts = Vec::new();
    let mut truncated = false;
    for part in parts {
        if part.get("type").and_then(Value::as_str) != Some("text")
            || part.get("modality").and_then(Value::as_str) != Some("text")
        {
            continue;
        }
        if let Some(raw) = part.get("raw").and_then(Value::as_str) {
            texts.push(raw);
            truncated |= part.get("truncated") == Some(&Value::Bool(true));
        }
    }
    (texts.join("\n"), truncated)
}

/// An answer source worth keeping: a small object naming its turn and
/// step; otherwise nothing.
pub(super) fn sanitize_source(source: &Value) -> Option<Value> {
    let fields = source.as_object()?;
    fields.get("turn")?.as_u64()?;
    fields.get("step")?.as_u64()?;
    fields.get("worker_id")?.as_str()?;
    (encoded_len(source) <= MAX_SOURCE_BYTES).then(|| source.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::headless::conversation::test_support::*;
    use crate::session::headless::conversation::PAGE_BODY_BUDGET;
    use serde_json::json;

    #[test]
    fn live_events_keep_visible_text_only() {
        let mut c = Conversation::new(1 << 20);
        assert!(c.on_connection(W));
        assert!(!c.on_connection(W));
        c.on_input_committed(
            "r1",
            &json!({"content": [
                part("look at src/a.rs"),
                {"type": "external_ref", "modality": "image", "raw": "https://x/y.png"},
                {"type": "text", "modality": "document", "raw": "not visible"},
                part("and b.rs"),
            ]}),
        );
        c.on_model_response(
            "r1",
            &json!({
                "type": "model_response", "role": "assistant",
                "content": [part("thinking done"), {"type": "binary", "modality": "text", "raw": "AAAA"}],
                "reasoning": part("SECRET REASONING"),
                "invokes": [{"id": "c1", "name": "run_command", "arguments": {"cmd": "SECRET TOOL"}}],
                "extras": {"secret": "SECRET EXTRA"},
                "answer_source": source(0, 0),
            }),
        );
        c.on_model_response("r1", &response("final answer", 0, 1));
        let page = c.page(0, 5, PAGE_BODY_BUDGET);
        let text = page.to_string();
        for secret in ["SECRET", "run_command", "not visible", "AAAA", "png"] {
            assert!(!text.contains(secret), "{secret} leaked: {text}");
        }
        let turn = &page["turns"][0];
        assert_eq!(turn["index"], 0);
        assert_eq!(turn["user"]["text"], "look at src/a.rs\nand b.rs");
        assert_eq!(turn["steps"][0]["text"], "thinking done");
        assert_eq!(turn["steps"][0]["index"], 0);
        assert_eq!(turn["steps"][1]["text"], "final answer");
        assert_eq!(turn["steps"][1]["answer_source"], source(0, 1));
        assert!(turn["steps"][1].get("output_truncated").is_none());
        assert_eq!(page["worker_id"], W);
        assert_eq!(
            page["stale"], true,
            "a first connection is not yet reconciled"
        );
        assert_eq!(page["truncated"], false);
        assert_eq!(page["revision"], c.revision());
        assert_sized(&c);
        // Nothing about the turn's tools or reasoning is persisted either.
        assert!(!c.to_json().to_string().contains("SECRET"));
    }

    #[test]
    fn every_change_advances_the_revision() {
        let mut c = Conversation::new(4096);
        let mut last = c.revision();
        let mut check = |c: &Conversation| {
            assert!(c.revision() > last);
            last = c.revision();
        };
        c.on_connection(W);
        check(&c);
        c.on_input_committed("r", &json!([part("q")]));
        check(&c);
        c.on_model_response("r", &response("a", 0, 0));
        check(&c);
        c.on_compact_finished(&json!({"summary": "s", "removed_turns": 1, "revision": 9}));
        check(&c);
        c.on_event_gap();
        check(&c);
        c.mark_stale(true);
        check(&c);
        let unchanged = c.revision();
        c.mark_stale(true);
        assert_eq!(c.revision(), unchanged);
    }

    #[test]
    fn turns_and_steps_follow_answer_sources() {
        let mut c = live(1 << 20, 2);
        // Continue resumes turn 1 without a new user turn.
        c.on_model_response("run-c", &response("continued", 1, 1));
        // A memory-only continuation: the worker's private turn 2.
        c.on_model_response("run-m", &response("from memory", 2, 0));
        let turns = c.turns();
        assert_eq!(turns.len(), 3);
        assert_eq!(turns[1].steps().len(), 2);
        assert_eq!(turns[1].steps()[1].text().text, "continued");
        assert_eq!(turns[2].index(), Some(2));
        assert!(turns[2].user().is_none());
        // A repeated commit replaces its copy instead of adding a step.
        c.on_model_response("run-m", &response("from memory (again)", 2, 0));
        assert_eq!(c.turns()[2].steps().len(), 1);
        assert_eq!(c.turns()[2].steps()[0].text().text, "from memory (again)");
        // A turn committed live while in sync gets the next index at once.
        c.on_event_gap();
        let fresh = live(1 << 20, 1);
        assert_eq!(fresh.turns()[0].index(), Some(0));
        // While stale, no index is guessed until the source names it.
        c.on_input_committed("run-x", &json!([part("q")]));
        assert_eq!(c.turns().last().unwrap().index(), None);
        c.on_model_response("run-x", &response("a", 3, 0));
        assert_eq!(c.turns().last().unwrap().index(), Some(3));
        assert_eq!(c.turns().len(), 4);
        // Unknown input content is recorded as unknown, not as empty text.
        c.on_input_committed("run-y", &json!({}));
        assert!(c.turns().last().unwrap().user().is_none());
    }

    #[test]
    fn missed_events_mark_the_projection_stale() {
        let mut c = live(1 << 20, 1);
        // Reconcile first so the projection is current.
        let mut history = History::from_conversation(&c, 4);
        reconcile(&mut c, &mut history).unwrap();
        assert!(!c.stale());
        c.on_model_response("run-z", &response("skipped a turn", 3, 0));
        assert!(c.stale());
        let mut c = live(1 << 20, 1);
        let mut history = History::from_conversation(&c, 4);
        reconcile(&mut c, &mut history).unwrap();
        c.on_model_response("run0", &response("skipped a step", 0, 5));
        assert!(c.stale());
        let mut c = live(1 << 20, 1);
        let mut history = History::from_conversation(&c, 4);
        reconcile(&mut c, &mut history).unwrap();
        let mut foreign = response("other worker", 1, 0);
        foreign["answer_source"]["worker_id"] = json!("worker-2");
        c.on_model_response("run1", &foreign);
        assert!(c.stale());
        let last = c.turns().last().unwrap().steps().last().unwrap();
        assert_eq!(last.text().text, "other worker");
        assert!(last.answer_source().is_none());
    }

    #[test]
    fn turns_keep_their_final_32_steps() {
        let mut c = Conversation::new(1 << 20);
        c.on_connection(W);
        c.on_input_committed("r", &json!([part("q")]));
        for step in 0..40 {
            c.on_model_response("r", &response(&format!("step {step}"), 0, step));
        }
        let turn = &c.turns()[0];
        assert_eq!(turn.steps().len(), MAX_STEPS_PER_TURN);
        assert_eq!(turn.omitted_steps(), 8);
        assert_eq!(turn.steps()[0].index(), Some(8));
        assert_eq!(turn.steps()[31].text().text, "step 39");
        let page = c.page(0, 1, PAGE_BODY_BUDGET);
        assert_eq!(page["turns"][0]["omitted_steps"], 8);
        assert_eq!(page["turns"][0]["steps"][0]["index"], 8);
        assert_eq!(page["truncated"], false, "omitted steps are a marker");
        // Without sources, step indices still count from the live input.
        let mut c = Conversation::new(1 << 20);
        c.on_input_committed("r", &json!([part("q")]));
        for step in 0..3 {
            c.on_model_response("r", &json!({"content": [part(&format!("s{step}"))]}));
        }
        let steps: Vec<_> = c.turns()[0].steps().iter().map(Step::index).collect();
        assert_eq!(steps, vec![Some(0), Some(1), Some(2)]);
    }

    #[test]
    fn the_byte_cap_evicts_oldest_first_at_the_edge() {
        let roomy = live(1 << 20, 40);
        let exact = roomy.byte_len();
        assert!(exact > MIN_CONVERSATION_BYTES);
        assert_sized(&roomy);
        // Exactly at the cap: nothing is evicted.
        let at = live(exact, 40);
        assert_eq!(at.byte_len(), exact);
        assert_eq!(at.turns().len(), 40);
        assert!(!at.truncated());
        assert_eq!(at.to_json(), roomy.to_json());
        // One byte under it: the oldest turn goes.
        let under = live(exact - 1, 40);
        assert_sized(&under);
        assert!(under.truncated());
        assert_eq!(under.turns().len(), 39);
        assert_eq!(under.turns()[0].index(), Some(1));
        assert_eq!(under.omitted_turns(), 1);
        assert_eq!(under.page(0, 10, PAGE_BODY_BUDGET)["omitted_turns"], 1);
        // The cap is never exceeded, however the projection grows.
        let mut c = Conversation::new(MIN_CONVERSATION_BYTES);
        c.on_connection(W);
        for t in 0..50u64 {
            c.on_input_committed("r", &json!([part(&"q".repeat(t as usize * 10))]));
            for s in 0..3 {
                c.on_model_response("r", &response(&"\u{1}\"é".repeat(t as usize * 7), t, s));
                assert_sized(&c);
            }
        }
        assert_eq!(c.turns().last().unwrap().index(), Some(49));
        assert!(c.truncated());
        // Small caps are raised to the minimum.
        assert_eq!(Conversation::new(10).cap_bytes(), MIN_CONVERSATION_BYTES);
    }

    #[test]
    fn oversized_text_keeps_a_utf8_prefix() {
        let cap = 8192;
        let mut c = Conversation::new(cap);
        c.on_connection(W);
        c.on_input_committed("r", &json!([part("q")]));
        let long = "é😀".repeat(2000);
        c.on_model_response("r", &response(&long, 0, 0));
        let step = &c.turns()[0].steps()[0];
        assert!(step.text().truncated);
        assert!(step.text().text.len() <= cap / 4);
        assert!(long.starts_with(&step.text().text));
        assert!(c.truncated());
        assert_sized(&c);
        // A single turn over the cap is clipped rather than dropped: user
        // input first, then the answer.
        let mut c = Conversation::new(MIN_CONVERSATION_BYTES);
        c.on_connection(W);
        c.on_input_committed("r", &json!([part(&"ü".repeat(500))]));
        c.on_model_response("r", &response(&"😀".repeat(250), 0, 0));
        c.on_model_response("r", &response(&"\n".repeat(1000), 0, 1));
        c.on_model_response("r", &response(&"€".repeat(333), 0, 2));
        assert_sized(&c);
        let turn = &c.turns()[0];
        assert_eq!(
            turn.steps().len(),
            1,
            "older steps of the newest turn go first"
        );
        assert_eq!(turn.omitted_steps(), 2);
        assert_eq!(turn.steps()[0].text().text, "€".repeat(333));
        assert!(!turn.user().unwrap().truncated);
        // Its escaped form (6 bytes a character) exceeds the cap alone.
        let controls = "\u{1}".repeat(1000);
        c.on_model_response("r", &response(&controls, 0, 3));
        assert_sized(&c);
        let turn = &c.turns()[0];
        assert_eq!(turn.steps().len(), 1);
        assert_eq!(turn.omitted_steps(), 3);
        let user = turn.user().unwrap();
        assert!(
            user.truncated && user.text.is_empty(),
            "user input is clipped first"
        );
        let answer = turn.steps()[0].text();
        assert!(answer.truncated && !answer.text.is_empty());
        assert!(controls.starts_with(&answer.text));
        assert_eq!(turn.steps()[0].index(), Some(3));
    }

    #[test]
    fn compaction_replaces_the_projection_with_its_summary() {
        let mut c = live(1 << 20, 3);
        let mut history = History::from_conversation(&c, 4);
        reconcile(&mut c, &mut history).unwrap();
        let generation = c.generation();
        c.on_compact_finished(
            &json!({"summary": "earlier work", "memory_file": "/m/state.md",
            "removed_turns": 3, "revision": 40, "durable": true}),
        );
        assert!(c.generation() > generation);
        assert_eq!(c.turns().len(), 1);
        assert_eq!(c.turns()[0].summary().unwrap().text, "earlier work");
        assert_eq!(c.history_revision(), Some(40));
        assert!(!c.stale());
        assert!(!c.to_json().to_string().contains("/m/state.md"));
        // The next live turn is the worker's turn 0.
        c.on_input_committed("r", &json!([part("next task")]));
        assert_eq!(c.turns()[1].index(), Some(0));
        // An omission object instead of the summary is shown as clipped.
        let mut d = live(1 << 20, 1);
        d.on_compact_finished(&json!({"summary": {"display_omitted": true}, "removed_turns": 0}));
        assert!(d.turns()[0].summary().unwrap().truncated);
        assert!(d.stale(), "fewer removed turns than held: diverged");
        let page = d.page(0, 1, PAGE_BODY_BUDGET);
        assert_eq!(page["turns"][0]["summary"]["output_truncated"], true);
    }

    #[test]
    fn a_new_worker_marks_stale_and_hides_old_sources() {
        let mut c = live(1 << 20, 2);
        let before = (c.revision(), c.generation(), c.turns().to_vec());
        assert!(c.on_connection("worker-2"));
        assert!(c.stale());
        assert!(c.revision() > before.0 && c.generation() > before.1);
        assert_eq!(c.turns(), &before.2[..], "kept turns stay");
        let page = c.page(0, 2, PAGE_BODY_BUDGET);
        assert!(page["turns"][0]["steps"][0].get("answer_source").is_none());
        assert_eq!(page["turns"][0]["steps"][0]["text"], "answer 0");
        assert_eq!(page["worker_id"], "worker-2");
    }

    #[test]
    fn extreme_indices_never_panic() {
        let mut c = live(1 << 20, 1);
        c.on_model_response("r", &response("a", u64::MAX, u64::MAX));
        c.on_model_response("r", &json!({"content": [part("b")]}));
        c.on_input_committed("r2", &json!("not content"));
        c.on_model_response("r2", &json!("not an object"));
        assert_sized(&c);
        let _ = c.page(usize::MAX, usize::MAX, usize::MAX);
        let mut history = History::uniform(3, 40, 5);
        let err = tampered(&mut history, 3, |p| {
            p["turns"][0]["omitted_steps"] = json!(u64::MAX);
        });
        assert!(err.is_err());
    }
}
