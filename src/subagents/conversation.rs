//! The child's bounded conversation projection (pure): committed user text
//! and visible assistant text with their turn/step association, kept from
//! live worker events, reconciled from paged worker `history`, bounded by
//! `subagents.conversationBytes`, rendered as `subagent/receive` pages and
//! stored as `conversation.json` (seed 003, "Persistence and lifetime",
//! "Remote routes"). Reasoning, tool calls/results and extras never enter
//! it. No I/O, clock or locks: timestamps and identities come from the
//! caller.
//!
//! Bounds and choices:
//! - The stored size is the exact compact JSON size of [`Conversation::to_json`];
//!   it never exceeds the cap. Over it, the oldest turns go first, then the
//!   oldest steps of the newest turn, then texts are clipped (user input,
//!   then the compact summary, then the answer).
//! - One visible text is at most a quarter of the cap when stored; longer
//!   texts keep a UTF-8-safe prefix and are marked truncated.
//! - A turn keeps its final [`MAX_STEPS_PER_TURN`] steps; `omitted_steps`
//!   counts the older ones (an omission marker, not truncation).
//! - A compact result is an entry of the turn array with `summary` set and
//!   no index; it leads the turns committed after it.
//! - Turn and step indices are the worker's, when known: from answer
//!   sources, from history pages, or (for a new live turn) the previous
//!   index plus one while the projection is not stale. Never guessed from a
//!   stale projection.

use std::fmt;

use serde_json::{json, Map, Value};

use crate::worker::display::{encoded_len, kind, quoted_len};

/// Longest `worker_id` or `refreshed_at` a stored projection may carry.
pub const MAX_HEADER_TEXT: usize = 256;

/// Smallest accepted `subagents.conversationBytes`.
pub const MIN_CONVERSATION_BYTES: usize = 4096;
/// Steps kept per turn (the final ones).
pub const MAX_STEPS_PER_TURN: usize = 32;
/// History page requests per refresh attempt.
pub const MAX_REFRESH_PAGES: usize = 64;
/// Turns asked for by one history query (the worker's maximum).
pub const HISTORY_PAGE_TURNS: u64 = 10;
/// The receive result's shared body budget.
pub const PAGE_BODY_BUDGET: usize = 96 * 1024;
/// Non-body bytes (indices, sources, labels) one receive page may spend on
/// its turns; a turn that does not fit is omitted whole.
pub const PAGE_SKELETON_BYTES: usize = 64 * 1024;
/// An answer source larger than this (compact JSON) is not kept.
pub const MAX_SOURCE_BYTES: usize = 1024;
/// Tag of `conversation.json`.
pub const FORMAT: &str = "simplex-hub/subagent-conversation/1";

/// `,"truncated":true`
const FLAG_BYTES: usize = 17;
/// `,"output_truncated":true`
const OUTPUT_FLAG_BYTES: usize = 24;

/// A visible text and whether it is only a prefix of the original.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text {
    pub text: String,
    pub truncated: bool,
}

impl Text {
    fn new(text: String, truncated: bool, max: usize) -> Text {
        let end = clip_bytes(&text, max);
        Text {
            truncated: truncated || end < text.len(),
            text: text[..end].to_string(),
        }
    }

    fn to_json(&self) -> Value {
        let mut out = json!({ "text": self.text });
        if self.truncated {
            out["truncated"] = json!(true);
        }
        out
    }

    fn from_json(v: &Value, what: &str) -> Result<Text, ConversationError> {
        let fields = object(v, what)?;
        let text = match fields.get("text") {
            Some(Value::String(s)) => s.clone(),
            _ => return Err(bad(what, "text must be a string")),
        };
        let truncated = flag(fields, "truncated", what)?;
        Ok(Text { text, truncated })
    }
}

/// One committed model response's visible text.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    index: Option<u64>,
    text: Text,
    answer_source: Option<Value>,
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

    fn to_json(&self) -> Value {
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

/// One user interaction and the responses that answered it, or a compact
/// result (`summary` set, no index, no user, no steps).
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    index: Option<u64>,
    user: Option<Text>,
    steps: Vec<Step>,
    omitted_steps: u64,
    summary: Option<Text>,
    /// The run that committed this turn's input live, for associating its
    /// responses before their answer sources name the turn.
    run_id: Option<String>,
    /// Compact JSON size of `to_json()`.
    bytes: usize,
}

impl Turn {
    fn new(index: Option<u64>, user: Option<Text>, run_id: Option<String>) -> Turn {
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

    fn measure(&mut self) {
        self.bytes = encoded_len(&self.to_json());
    }

    /// Keeps the final [`MAX_STEPS_PER_TURN`] steps.
    fn cap_steps(&mut self) {
        if self.steps.len() > MAX_STEPS_PER_TURN {
            let drop = self.steps.len() - MAX_STEPS_PER_TURN;
            self.steps.drain(..drop);
            self.omitted_steps += drop as u64;
        }
    }

    fn any_truncated(&self) -> bool {
        self.user.as_ref().is_some_and(|t| t.truncated)
            || self.summary.as_ref().is_some_and(|t| t.truncated)
            || self.steps.iter().any(|s| s.text.truncated)
    }

    fn to_json(&self) -> Value {
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

    fn from_json(v: &Value) -> Result<Turn, ConversationError> {
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

/// Why a refresh snapshot was not published; the previous projection stays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishError {
    /// A live commit, compaction, gap or connection change came after the
    /// refresh started.
    StaleGeneration { snapshot: u64, current: u64 },
    /// The snapshot was read from another worker incarnation.
    WorkerChanged,
}

impl fmt::Display for PublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::StaleGeneration { snapshot, current } => write!(
                f,
                "the history snapshot (generation {snapshot}) predates later live changes \
                 (generation {current})"
            ),
            Self::WorkerChanged => write!(
                f,
                "the history snapshot belongs to another worker incarnation"
            ),
        }
    }
}

impl std::error::Error for PublishError {}

/// The bounded projection.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    cap_bytes: usize,
    revision: u64,
    /// Bumped by every live commit, compaction, event gap and connection
    /// change; a refresh from an older generation cannot publish.
    generation: u64,
    worker_id: Option<String>,
    refreshed_at: Option<String>,
    history_revision: Option<u64>,
    stale: bool,
    incomplete: bool,
    truncated: bool,
    /// Older turns of the worker history not in the projection.
    omitted_turns: u64,
    turns: Vec<Turn>,
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

    fn max_text(&self) -> usize {
        self.cap_bytes / 4
    }

    fn changed(&mut self) {
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

    /// A refresh of the current generation and worker; `None` before a
    /// worker identity is known.
    pub fn start_refresh(&self) -> Option<Refresh> {
        let worker_id = self.worker_id.as_deref()?;
        Some(Refresh::new(self.generation, worker_id, self.cap_bytes))
    }

    /// Replaces the projection with a validated history tail. Refused when
    /// a live change came after the refresh started or the worker changed;
    /// the previous projection then stays. A compact result leading the
    /// projection is kept ahead of the refreshed turns.
    pub fn publish_refresh(
        &mut self,
        snapshot: RefreshSnapshot,
        refreshed_at: &str,
    ) -> Result<(), PublishError> {
        if snapshot.generation != self.generation {
            return Err(PublishError::StaleGeneration {
                snapshot: snapshot.generation,
                current: self.generation,
            });
        }
        if self.worker_id.as_deref() != Some(snapshot.worker_id.as_str()) {
            return Err(PublishError::WorkerChanged);
        }
        let max_text = self.max_text();
        let mut turns: Vec<Turn> = self
            .turns
            .iter()
            .rev()
            .find(|t| t.is_compact())
            .cloned()
            .into_iter()
            .collect();
        for mut turn in snapshot.turns {
            for text in turn
                .user
                .iter_mut()
                .chain(turn.steps.iter_mut().map(|s| &mut s.text))
            {
                if text.text.len() > max_text {
                    *text = Text::new(std::mem::take(&mut text.text), text.truncated, max_text);
                }
            }
            turn.measure();
            turns.push(turn);
        }
        self.turns = turns;
        self.stale = false;
        self.incomplete = snapshot.incomplete;
        self.truncated = snapshot.truncated || self.turns.iter().any(Turn::any_truncated);
        self.omitted_turns = snapshot.omitted_turns;
        self.history_revision = Some(snapshot.history_revision);
        self.refreshed_at = Some(refreshed_at.to_string());
        self.changed();
        Ok(())
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
            .map(|text| clip_by(text, excess))
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

    fn header_json(&self) -> Value {
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

    /// The receive result's conversation page: turns `cursor..cursor+limit`
    /// of the bounded turn array, their texts sharing `body_budget` bytes
    /// (JSON-escaped). When everything does not fit, each turn's latest
    /// nonempty step and compact summaries are served first, then older
    /// steps, then user input; within a rank the budget is shared evenly.
    /// Clipped texts keep UTF-8-safe prefixes marked `output_truncated`.
    /// A turn whose structure does not fit [`PAGE_SKELETON_BYTES`] is
    /// replaced by `{index, omitted: true}` and the page is `truncated`.
    /// Answer sources of another worker incarnation are not shown.
    pub fn page(&self, cursor: usize, limit: usize, body_budget: usize) -> Value {
        let total = self.turns.len();
        let start = cursor.min(total);
        let end = start.saturating_add(limit).min(total);
        let selected = &self.turns[start..end];

        // Which turns fit, by their structure alone.
        let mut skeleton = 0usize;
        let mut included = Vec::with_capacity(selected.len());
        for turn in selected {
            let bodies = usize::from(turn.user.is_some())
                + usize::from(turn.summary.is_some())
                + turn.steps.len();
            let bytes = encoded_len(&self.render_turn(turn, &mut |_| (String::new(), false)))
                + bodies * OUTPUT_FLAG_BYTES;
            let fits = skeleton + bytes <= PAGE_SKELETON_BYTES;
            if fits {
                skeleton += bytes;
            }
            included.push(fits);
        }

        // Body allocation by rank.
        let mut bodies: Vec<(usize, BodyRef, usize, u8)> = Vec::new();
        for (at, turn) in selected.iter().enumerate() {
            if !included[at] {
                continue;
            }
            let latest = turn.steps.iter().rposition(|s| !s.text.text.is_empty());
            if let Some(summary) = &turn.summary {
                bodies.push((at, BodyRef::Summary, escaped_len(&summary.text), 0));
            }
            for (i, step) in turn.steps.iter().enumerate() {
                let rank = if Some(i) == latest { 0 } else { 1 };
                bodies.push((at, BodyRef::Step(i), escaped_len(&step.text.text), rank));
            }
            if let Some(user) = &turn.user {
                bodies.push((at, BodyRef::User, escaped_len(&user.text), 2));
            }
        }
        let mut allowance = vec![0usize; bodies.len()];
        let mut remaining = body_budget;
        for rank in 0..=2u8 {
            let members: Vec<usize> = (0..bodies.len()).filter(|&i| bodies[i].3 == rank).collect();
            let lens: Vec<usize> = members.iter().map(|&i| bodies[i].2).collect();
            let given = water_fill(&lens, remaining);
            for (&i, &g) in members.iter().zip(&given) {
                allowance[i] = g;
                remaining -= g;
            }
        }

        let mut omitted = false;
        let mut turns = Vec::with_capacity(selected.len());
        for (at, turn) in selected.iter().enumerate() {
            if !included[at] {
                omitted = true;
                turns.push(json!({"index": turn.index, "omitted": true}));
                continue;
            }
            let mut render = |body: BodyRef| {
                let k = bodies
                    .iter()
                    .position(|b| b.0 == at && b.1 == body)
                    .expect("every body is ranked");
                let text = match body {
                    BodyRef::User => turn.user.as_ref(),
                    BodyRef::Summary => turn.summary.as_ref(),
                    BodyRef::Step(i) => Some(&turn.steps[i].text),
                }
                .expect("a ranked body exists");
                let end = clip_escaped(&text.text, allowance[k]);
                (
                    text.text[..end].to_string(),
                    text.truncated || end < text.text.len(),
                )
            };
            turns.push(self.render_turn(turn, &mut render));
        }

        json!({
            "revision": self.revision,
            "worker_id": self.worker_id,
            "refreshed_at": self.refreshed_at,
            "stale": self.stale,
            "incomplete": self.incomplete,
            "truncated": self.truncated || omitted,
            "omitted_turns": self.omitted_turns,
            "cursor": start,
            "next": end,
            "total": total,
            "turns": turns,
        })
    }

    /// One page entry; `body` gives each text and whether it is shown
    /// clipped.
    fn render_turn(&self, turn: &Turn, body: &mut dyn FnMut(BodyRef) -> (String, bool)) -> Value {
        let mut shown = |which: BodyRef| {
            let (text, clipped) = body(which);
            let mut out = json!({ "text": text });
            if clipped {
                out["output_truncated"] = json!(true);
            }
            out
        };
        let user = match turn.user {
            Some(_) => shown(BodyRef::User),
            None => Value::Null,
        };
        let steps: Vec<Value> = turn
            .steps
            .iter()
            .enumerate()
            .map(|(i, step)| {
                let mut out = json!({"index": step.index});
                let text = shown(BodyRef::Step(i));
                out["text"] = text["text"].clone();
                if let Some(source) = step.answer_source.as_ref().filter(|s| {
                    s.get("worker_id").and_then(Value::as_str) == self.worker_id.as_deref()
                }) {
                    out["answer_source"] = source.clone();
                }
                if text.get("output_truncated").is_some() {
                    out["output_truncated"] = json!(true);
                }
                out
            })
            .collect();
        let mut out = json!({"index": turn.index, "user": user, "steps": steps});
        if turn.omitted_steps > 0 {
            out["omitted_steps"] = json!(turn.omitted_steps);
        }
        if turn.summary.is_some() {
            out["summary"] = shown(BodyRef::Summary);
        }
        out
    }
}

/// A text of one page entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyRef {
    User,
    Summary,
    Step(usize),
}

/// Shares `budget` among items of sizes `lens`: everything when it fits,
/// otherwise a common level that small items stay below.
fn water_fill(lens: &[usize], budget: usize) -> Vec<usize> {
    if lens.iter().sum::<usize>() <= budget {
        return lens.to_vec();
    }
    let mut sorted = lens.to_vec();
    sorted.sort_unstable();
    let mut remaining = budget;
    let mut level = usize::MAX;
    for (i, &len) in sorted.iter().enumerate() {
        let share = remaining / (sorted.len() - i);
        if len > share {
            level = share;
            break;
        }
        remaining -= len;
    }
    lens.iter().map(|&len| len.min(level)).collect()
}

/// Shortens `text` so its stored encoding loses at least `excess` bytes
/// (counting the truncated flag it may gain).
fn clip_by(text: &mut Text, excess: usize) {
    let current = escaped_len(&text.text);
    let flag = if text.truncated { 0 } else { FLAG_BYTES };
    let target = current.saturating_sub(excess + flag);
    let end = clip_escaped(&text.text, target);
    text.text.truncate(end);
    text.truncated = true;
}

/// Visible text of content parts: text parts of text modality, joined by
/// newlines; and whether any of them is a shortened display copy.
fn visible_text(parts: &[Value]) -> (String, bool) {
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
fn sanitize_source(source: &Value) -> Option<Value> {
    let fields = source.as_object()?;
    fields.get("turn")?.as_u64()?;
    fields.get("step")?.as_u64()?;
    fields.get("worker_id")?.as_str()?;
    (encoded_len(source) <= MAX_SOURCE_BYTES).then(|| source.clone())
}

/// JSON-escaped length of `s`, quotes excluded.
fn escaped_len(s: &str) -> usize {
    quoted_len(s) - 2
}

fn escaped_char_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\u{8}' | '\t' | '\n' | '\u{c}' | '\r' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// End of the longest prefix of `s` whose escaped length is at most `max`.
fn clip_escaped(s: &str, max: usize) -> usize {
    let mut used = 0;
    for (at, c) in s.char_indices() {
        used += escaped_char_len(c);
        if used > max {
            return at;
        }
    }
    s.len()
}

/// End of the longest prefix of `s` of at most `max` bytes on a character
/// boundary.
fn clip_bytes(s: &str, max: usize) -> usize {
    if s.len() <= max {
        return s.len();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    end
}

// ------------------------------------------------------------- refresh --

/// One history query: `start` turn, first `step`, `limit` turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryQuery {
    pub start: u64,
    pub step: u64,
    pub limit: u64,
}

impl HistoryQuery {
    /// The payload `data` of this query.
    pub fn to_data(&self, request_id: &str) -> Value {
        json!({
            "operation": "history",
            "request_id": request_id,
            "start": self.start,
            "step": self.step,
            "limit": self.limit,
        })
    }
}

/// What a refresh wants after a page.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Send this query next.
    Query(HistoryQuery),
    /// Finished: publish with [`Conversation::publish_refresh`].
    Done(RefreshSnapshot),
}

/// A validated newest tail of the worker history.
#[derive(Debug, Clone, PartialEq)]
pub struct RefreshSnapshot {
    generation: u64,
    worker_id: String,
    history_revision: u64,
    history_total: u64,
    turns: Vec<Turn>,
    incomplete: bool,
    truncated: bool,
    omitted_turns: u64,
}

impl RefreshSnapshot {
    pub fn generation(&self) -> u64 {
        self.generation
    }
    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }
    pub fn history_revision(&self) -> u64 {
        self.history_revision
    }
    /// Turns in the worker history.
    pub fn history_total(&self) -> u64 {
        self.history_total
    }
    pub fn turns(&self) -> &[Turn] {
        &self.turns
    }
    /// The page budget ran out before the oldest turn.
    pub fn incomplete(&self) -> bool {
        self.incomplete
    }
    pub fn truncated(&self) -> bool {
        self.truncated
    }
    /// Older history turns left out of the tail.
    pub fn omitted_turns(&self) -> u64 {
        self.omitted_turns
    }
}

/// Why a refresh attempt failed; the previous projection stays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefreshError {
    /// A page field is missing or malformed.
    Malformed { reason: String },
    /// The history revision changed between pages.
    RevisionChanged { expected: u64, found: u64 },
    /// The history turn count changed between pages.
    TotalChanged { expected: u64, found: u64 },
    /// Cursors or indices are out of order or do not echo the query.
    Ordering { reason: String },
    /// An answer source names another worker.
    WorkerMismatch,
    /// The page budget ran out before the newest turn was complete.
    LatestTurnUnfinished,
    /// The refresh already finished or failed.
    Finished,
}

impl fmt::Display for RefreshError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed { reason } => write!(f, "malformed history page: {reason}"),
            Self::RevisionChanged { expected, found } => write!(
                f,
                "history revision changed from {expected} to {found} during the refresh"
            ),
            Self::TotalChanged { expected, found } => write!(
                f,
                "history turn count changed from {expected} to {found} during the refresh"
            ),
            Self::Ordering { reason } => write!(f, "history page out of order: {reason}"),
            Self::WorkerMismatch => write!(f, "history page names another worker"),
            Self::LatestTurnUnfinished => {
                write!(f, "the page budget ran out before the newest turn was read")
            }
            Self::Finished => write!(f, "the refresh has already finished"),
        }
    }
}

impl std::error::Error for RefreshError {}

fn malformed(reason: impl Into<String>) -> RefreshError {
    RefreshError::Malformed {
        reason: reason.into(),
    }
}

fn ordering(reason: impl Into<String>) -> RefreshError {
    RefreshError::Ordering {
        reason: reason.into(),
    }
}

/// Turns `[start, end)` read forward, oldest first.
#[derive(Debug, Clone)]
struct Block {
    start: u64,
    end: u64,
    turns: Vec<Turn>,
}

/// One refresh attempt: discovers the history revision and turn count,
/// then reads blocks of turns newest first (the newest turn alone, then up
/// to [`HISTORY_PAGE_TURNS`] at a time), each block forward with `next` /
/// `next_step` continuations, skipping to a long turn's final
/// [`MAX_STEPS_PER_TURN`] steps. At most [`MAX_REFRESH_PAGES`] queries,
/// the first included. It stops early once the tail fills the cap.
///
/// The caller sends each query with its own request id and passes only
/// `history` events correlated to it (same worker and request id) to
/// [`Refresh::accept_page`].
#[derive(Debug, Clone)]
pub struct Refresh {
    generation: u64,
    worker_id: String,
    cap_bytes: usize,
    query: HistoryQuery,
    pages: usize,
    finished: bool,
    revision: Option<u64>,
    total: Option<u64>,
    block: Option<Block>,
    tail: Vec<Turn>,
    tail_bytes: usize,
}

/// One history page, parsed.
struct Page {
    revision: u64,
    total: u64,
    start: u64,
    step: u64,
    next: u64,
    next_step: u64,
    turns: Vec<PageTurn>,
}

struct PageTurn {
    index: u64,
    user: Option<Text>,
    steps: Vec<Step>,
    omitted_steps: u64,
}

fn page_u64(fields: &Map<String, Value>, name: &str) -> Result<u64, RefreshError> {
    fields
        .get(name)
        .and_then(Value::as_u64)
        .ok_or_else(|| malformed(format!("{name} must be an integer >= 0")))
}

impl Refresh {
    /// A refresh of `worker_id`'s history for projection `generation`.
    pub fn new(generation: u64, worker_id: &str, cap_bytes: usize) -> Refresh {
        Refresh {
            generation,
            worker_id: worker_id.to_string(),
            cap_bytes: cap_bytes.max(MIN_CONVERSATION_BYTES),
            query: HistoryQuery {
                start: 0,
                step: 0,
                limit: 1,
            },
            pages: 1,
            finished: false,
            revision: None,
            total: None,
            block: None,
            tail: Vec::new(),
            tail_bytes: 0,
        }
    }

    /// The query to send now (the first one right after `new`).
    pub fn query(&self) -> HistoryQuery {
        self.query
    }
    /// Queries issued so far, the outstanding one included.
    pub fn pages(&self) -> usize {
        self.pages
    }
    pub fn generation(&self) -> u64 {
        self.generation
    }
    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }

    /// Validates the answer to [`Refresh::query`] (a `history` event's
    /// data). Any error ends the attempt.
    pub fn accept_page(&mut self, page: &Value) -> Result<Next, RefreshError> {
        if self.finished {
            return Err(RefreshError::Finished);
        }
        let result = self.accept(page);
        if !matches!(result, Ok(Next::Query(_))) {
            self.finished = true;
        }
        result
    }

    fn accept(&mut self, value: &Value) -> Result<Next, RefreshError> {
        let page = self.parse(value)?;
        match (self.revision, self.total) {
            (Some(revision), Some(total)) => {
                if page.revision != revision {
                    return Err(RefreshError::RevisionChanged {
                        expected: revision,
                        found: page.revision,
                    });
                }
                if page.total != total {
                    return Err(RefreshError::TotalChanged {
                        expected: total,
                        found: page.total,
                    });
                }
            }
            _ => {
                self.revision = Some(page.revision);
                self.total = Some(page.total);
            }
        }
        let total = page.total;
        let end = self.query.start.saturating_add(self.query.limit).min(total);
        self.check_cursors(&page, end)?;
        if total == 0 {
            return Ok(Next::Done(self.snapshot(false, false, 0)));
        }
        let block = match self.block.take() {
            Some(block) => block,
            // The discovery page: it is the whole first block only when
            // the history holds one turn.
            None if total == 1 => Block {
                start: 0,
                end: 1,
                turns: Vec::new(),
            },
            None => {
                self.block = Some(Block {
                    start: total - 1,
                    end: total,
                    turns: Vec::new(),
                });
                return self.ask(HistoryQuery {
                    start: total - 1,
                    step: 0,
                    limit: 1,
                });
            }
        };
        self.merge(block, page)
    }

    fn parse(&self, value: &Value) -> Result<Page, RefreshError> {
        let fields = value
            .as_object()
            .ok_or_else(|| malformed(format!("must be an object, found {}", kind(value))))?;
        let Some(Value::Array(items)) = fields.get("turns") else {
            return Err(malformed("turns must be an array"));
        };
        let mut turns = Vec::with_capacity(items.len());
        for item in items {
            let turn = item
                .as_object()
                .ok_or_else(|| malformed("every turn must be an object"))?;
            let index = page_u64(turn, "index")?;
            let internal = turn.contains_key("internal_input");
            let user = match turn.get("user") {
                Some(Value::Array(parts)) if !parts.is_empty() && !internal => {
                    let (text, mut truncated) = visible_text(parts);
                    truncated |= turn
                        .get("omitted_user_parts")
                        .and_then(Value::as_u64)
                        .is_some_and(|n| n > 0);
                    Some(Text { text, truncated })
                }
                Some(Value::Array(_)) | None => None,
                Some(_) => return Err(malformed("turn user must be an array")),
            };
            let Some(Value::Array(step_items)) = turn.get("steps") else {
                return Err(malformed("turn steps must be an array"));
            };
            let mut steps = Vec::with_capacity(step_items.len());
            for item in step_items {
                let step = item
                    .as_object()
                    .ok_or_else(|| malformed("every step must be an object"))?;
                let step_index = page_u64(step, "index")?;
                let parts = match step.get("content") {
                    None => &[][..],
                    Some(Value::Array(parts)) => parts.as_slice(),
                    Some(_) => return Err(malformed("step content must be an array")),
                };
                let (text, mut truncated) = visible_text(parts);
                truncated |= step
                    .get("omitted_parts")
                    .and_then(Value::as_u64)
                    .is_some_and(|n| n > 0);
                let answer_source = match step.get("answer_source") {
                    None | Some(Value::Null) => None,
                    Some(source) => {
                        let worker = source.get("worker_id").and_then(Value::as_str);
                        if worker.is_some_and(|w| w != self.worker_id) {
                            return Err(RefreshError::WorkerMismatch);
                        }
                        let names = |key: &str| source.get(key).and_then(Value::as_u64);
                        if names("turn").is_some_and(|t| t != index)
                            || names("step").is_some_and(|s| s != step_index)
                        {
                            return Err(ordering("an answer source names another turn or step"));
                        }
                        sanitize_source(source)
                    }
                };
                steps.push(Step {
                    index: Some(step_index),
                    text: Text { text, truncated },
                    answer_source,
                });
            }
            let omitted_steps = match turn.get("omitted_steps") {
                None => 0,
                Some(v) => v
                    .as_u64()
                    .ok_or_else(|| malformed("omitted_steps must be an integer >= 0"))?,
            };
            turns.push(PageTurn {
                index,
                user,
                steps,
                omitted_steps,
            });
        }
        Ok(Page {
            revision: page_u64(fields, "revision")?,
            total: page_u64(fields, "total")?,
            start: page_u64(fields, "start")?,
            step: page_u64(fields, "step")?,
            next: page_u64(fields, "next")?,
            next_step: page_u64(fields, "next_step")?,
            turns,
        })
    }

    /// The page echoes the query, advances within `[start, end]`, and its
    /// turns and steps are contiguous and complete where they must be.
    fn check_cursors(&self, page: &Page, end: u64) -> Result<(), RefreshError> {
        let q = self.query;
        if page.start != q.start.min(page.total) || page.step != q.step {
            return Err(ordering(format!(
                "page starts at {}/{}, the query asked for {}/{}",
                page.start, page.step, q.start, q.step
            )));
        }
        if page.total == 0 {
            return if page.turns.is_empty() && page.next == 0 && page.next_step == 0 {
                Ok(())
            } else {
                Err(ordering("an empty history has no turns or cursor"))
            };
        }
        if page.next > end || (page.next == end && page.next_step != 0) {
            return Err(ordering(format!(
                "next {}/{} is past the requested end {end}",
                page.next, page.next_step
            )));
        }
        if (page.next, page.next_step) <= (page.start, page.step) {
            return Err(ordering("the cursor did not advance"));
        }
        let last = if page.next_step > 0 {
            page.next
        } else {
            page.next - 1
        };
        if page.turns.len() as u64 != last - page.start + 1 {
            return Err(ordering(format!(
                "expected turns {}..={last}, found {}",
                page.start,
                page.turns.len()
            )));
        }
        for (offset, turn) in page.turns.iter().enumerate() {
            let index = page.start + offset as u64;
            if turn.index != index {
                return Err(ordering(format!(
                    "turn {} where {index} was expected",
                    turn.index
                )));
            }
            let first = if offset == 0 { page.step } else { 0 };
            for (k, step) in turn.steps.iter().enumerate() {
                if step.index != Some(first.saturating_add(k as u64)) {
                    return Err(ordering(format!(
                        "steps of turn {index} are not contiguous"
                    )));
                }
            }
            let through = first.saturating_add(turn.steps.len() as u64);
            if index == last && page.next_step > 0 {
                if through != page.next_step || turn.omitted_steps == 0 {
                    return Err(ordering(format!(
                        "turn {index} does not continue at step {}",
                        page.next_step
                    )));
                }
            } else if turn.omitted_steps != 0 {
                return Err(ordering(format!(
                    "turn {index} is incomplete before the page cursor"
                )));
            }
        }
        Ok(())
    }

    fn merge(&mut self, mut block: Block, page: Page) -> Result<Next, RefreshError> {
        let partial_total = (page.next_step > 0).then(|| {
            let last = page.turns.last().expect("a partial turn");
            page.next_step.saturating_add(last.omitted_steps)
        });
        for (offset, turn) in page.turns.into_iter().enumerate() {
            let continues = offset == 0
                && page.step > 0
                && block.turns.last().and_then(|t| t.index) == Some(turn.index);
            if offset == 0 && page.step > 0 && !continues {
                return Err(ordering("a continuation page does not follow its turn"));
            }
            if continues {
                let target = block.turns.last_mut().expect("the continued turn");
                target.steps.extend(turn.steps);
                target.cap_steps();
                target.measure();
            } else {
                let mut fresh = Turn::new(Some(turn.index), turn.user, None);
                fresh.steps = turn.steps;
                fresh.cap_steps();
                fresh.measure();
                block.turns.push(fresh);
            }
        }
        if let Some(steps) = partial_total {
            // Skip to the turn's final steps.
            let target_step = page
                .next_step
                .max(steps.saturating_sub(MAX_STEPS_PER_TURN as u64));
            if target_step > page.next_step {
                let turn = block.turns.last_mut().expect("the partial turn");
                turn.steps.clear();
                turn.omitted_steps = target_step;
                turn.measure();
            }
            let query = HistoryQuery {
                start: page.next,
                step: target_step,
                limit: block.end - page.next,
            };
            self.block = Some(block);
            return self.ask(query);
        }
        if page.next < block.end {
            let query = HistoryQuery {
                start: page.next,
                step: 0,
                limit: block.end - page.next,
            };
            self.block = Some(block);
            return self.ask(query);
        }
        // The block is complete: it joins the tail.
        self.tail_bytes += block.turns.iter().map(|t| t.bytes).sum::<usize>();
        let start = block.start;
        block.turns.append(&mut self.tail);
        self.tail = block.turns;
        if start == 0 {
            return Ok(Next::Done(self.snapshot(false, false, 0)));
        }
        if self.tail_bytes >= self.cap_bytes {
            return Ok(Next::Done(self.snapshot(false, true, start)));
        }
        let next_start = start.saturating_sub(HISTORY_PAGE_TURNS);
        self.block = Some(Block {
            start: next_start,
            end: start,
            turns: Vec::new(),
        });
        self.ask(HistoryQuery {
            start: next_start,
            step: 0,
            limit: start - next_start,
        })
    }

    /// Issues `query` within the page budget; out of budget, publishes the
    /// validated tail (discarding the unfinished block) or fails when not
    /// even the newest turn is complete.
    fn ask(&mut self, query: HistoryQuery) -> Result<Next, RefreshError> {
        if self.pages >= MAX_REFRESH_PAGES {
            if self.tail.is_empty() {
                return Err(RefreshError::LatestTurnUnfinished);
            }
            let omitted = self.tail[0].index.unwrap_or(0);
            return Ok(Next::Done(self.snapshot(true, true, omitted)));
        }
        self.pages += 1;
        self.query = query;
        Ok(Next::Query(query))
    }

    fn snapshot(
        &mut self,
        incomplete: bool,
        truncated: bool,
        omitted_turns: u64,
    ) -> RefreshSnapshot {
        let turns = std::mem::take(&mut self.tail);
        RefreshSnapshot {
            generation: self.generation,
            worker_id: self.worker_id.clone(),
            history_revision: self.revision.unwrap_or(0),
            history_total: self.total.unwrap_or(0),
            truncated: truncated || turns.iter().any(Turn::any_truncated),
            turns,
            incomplete,
            omitted_turns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: &str = "worker-1";

    fn part(raw: &str) -> Value {
        json!({"type": "text", "modality": "text", "raw": raw})
    }

    fn source(turn: u64, step: u64) -> Value {
        json!({"worker_id": W, "turn": turn, "step": step,
               "commit_sequence": turn.wrapping_mul(100).wrapping_add(step).to_string(), "fingerprint": "f".repeat(64)})
    }

    fn response(raw: &str, turn: u64, step: u64) -> Value {
        json!({
            "type": "model_response", "role": "assistant",
            "content": [part(raw)],
            "answer_source": source(turn, step),
            "commit_sequence": turn.wrapping_mul(100).wrapping_add(step).to_string(),
        })
    }

    /// A connected projection with `turns` live turns of one answer each.
    fn live(cap: usize, turns: u64) -> Conversation {
        let mut c = Conversation::new(cap);
        c.on_connection(W);
        for t in 0..turns {
            c.on_input_committed(&format!("run{t}"), &json!([part(&format!("question {t}"))]));
            c.on_model_response(&format!("run{t}"), &response(&format!("answer {t}"), t, 0));
        }
        c
    }

    fn assert_sized(c: &Conversation) {
        let encoded = serde_json::to_vec(&c.to_json()).unwrap().len();
        assert_eq!(c.byte_len(), encoded);
        assert!(encoded <= c.cap_bytes(), "{encoded} > {}", c.cap_bytes());
    }

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
    fn pages_follow_cursor_and_limit() {
        let c = live(1 << 20, 7);
        let first = c.page(0, 5, PAGE_BODY_BUDGET);
        assert_eq!(
            (&first["cursor"], &first["next"], &first["total"]),
            (&json!(0), &json!(5), &json!(7))
        );
        assert_eq!(first["turns"].as_array().unwrap().len(), 5);
        assert_eq!(first["turns"][4]["index"], 4);
        let second = c.page(5, 5, PAGE_BODY_BUDGET);
        assert_eq!((&second["next"], &second["total"]), (&json!(7), &json!(7)));
        let turns = second["turns"].as_array().unwrap();
        assert_eq!(turns.len(), 2);
        assert_eq!(turns[0]["user"]["text"], "question 5");
        assert_eq!(turns[1]["steps"][0]["text"], "answer 6");
        let past = c.page(40, 5, PAGE_BODY_BUDGET);
        assert_eq!((&past["cursor"], &past["next"]), (&json!(7), &json!(7)));
        assert!(past["turns"].as_array().unwrap().is_empty());
        let one = c.page(3, 1, PAGE_BODY_BUDGET);
        assert_eq!(one["turns"][0]["index"], 3);
        assert_eq!(one["next"], 4);
        for key in [
            "revision",
            "worker_id",
            "refreshed_at",
            "stale",
            "incomplete",
            "truncated",
        ] {
            assert!(one.get(key).is_some(), "{key}");
        }
    }

    #[test]
    fn the_body_budget_serves_latest_answers_first() {
        let mut c = Conversation::new(1 << 22);
        c.on_connection(W);
        for t in 0..3u64 {
            c.on_input_committed("r", &json!([part(&"u".repeat(1000))]));
            c.on_model_response("r", &response(&"o".repeat(1000), t, 0));
            c.on_model_response("r", &response(&"a".repeat(1000), t, 1));
            // An empty final step does not count as the latest answer.
            c.on_model_response("r", &json!({"content": [], "answer_source": source(t, 2)}));
        }
        // Everything fits: nothing is clipped.
        let full = c.page(0, 3, 9000);
        assert!(!full.to_string().contains("output_truncated"));
        // Room for the three answers and half the older steps.
        let page = c.page(0, 3, 4500);
        for t in 0..3 {
            let turn = &page["turns"][t];
            assert_eq!(turn["steps"][1]["text"], "a".repeat(1000), "answer intact");
            assert!(turn["steps"][1].get("output_truncated").is_none());
            assert_eq!(turn["steps"][0]["text"], "o".repeat(500));
            assert_eq!(turn["steps"][0]["output_truncated"], true);
            assert_eq!(turn["user"]["text"], "");
            assert_eq!(turn["user"]["output_truncated"], true);
            assert_eq!(turn["steps"][2]["index"], 2, "indices stay visible");
        }
        // Less than the answers need: they share it evenly.
        let tight = c.page(0, 3, 1500);
        for t in 0..3 {
            assert_eq!(tight["turns"][t]["steps"][1]["text"], "a".repeat(500));
            assert_eq!(tight["turns"][t]["steps"][0]["text"], "");
        }
        // Compact summaries rank with the answers.
        let mut c = live(1 << 20, 0);
        c.on_compact_finished(
            &json!({"summary": "S".repeat(3000), "removed_turns": 0, "revision": 3}),
        );
        c.on_input_committed("r", &json!([part(&"u".repeat(3000))]));
        c.on_model_response("r", &response(&"a".repeat(3000), 0, 0));
        let page = c.page(0, 5, 6000);
        assert_eq!(page["turns"][0]["summary"]["text"], "S".repeat(3000));
        assert_eq!(page["turns"][0]["index"], Value::Null);
        assert_eq!(page["turns"][1]["steps"][0]["text"], "a".repeat(3000));
        assert_eq!(page["turns"][1]["user"]["output_truncated"], true);
    }

    #[test]
    fn page_clipping_is_utf8_safe_and_escape_aware() {
        let mut c = Conversation::new(1 << 20);
        c.on_connection(W);
        c.on_input_committed("r", &json!([part("q")]));
        let text = "é😀\"\n€".repeat(100);
        c.on_model_response("r", &response(&text, 0, 0));
        for budget in [0, 1, 2, 3, 5, 7, 11, 100, 333] {
            let page = c.page(0, 1, budget);
            let shown = page["turns"][0]["steps"][0]["text"].as_str().unwrap();
            assert!(text.starts_with(shown));
            assert!(escaped_len(shown) <= budget, "{budget}");
            assert_eq!(page["turns"][0]["steps"][0]["output_truncated"], true);
        }
    }

    #[test]
    fn oversized_turns_are_omitted_whole() {
        let mut c = Conversation::new(1 << 24);
        c.on_connection(W);
        for t in 0..4u64 {
            c.on_input_committed("r", &json!([part("q")]));
            for s in 0..32 {
                let mut r = response("a", t, s);
                // Large (but kept) sources make each turn's structure big.
                r["answer_source"]["fingerprint"] = json!("f".repeat(800));
                c.on_model_response("r", &r);
            }
        }
        let page = c.page(0, 4, PAGE_BODY_BUDGET);
        let turns = page["turns"].as_array().unwrap();
        assert_eq!(turns.len(), 4, "the cursor advances over omitted turns");
        assert_eq!(page["next"], 4);
        assert_eq!(page["truncated"], true);
        let omitted: Vec<_> = turns.iter().filter(|t| t["omitted"] == true).collect();
        assert!(!omitted.is_empty() && omitted.len() < 4);
        assert_eq!(turns[3]["omitted"], true);
        assert_eq!(turns[3]["index"], 3);
        assert!(encoded_len(&page) < PAGE_SKELETON_BYTES + PAGE_BODY_BUDGET);
        // Sources larger than the bound are not kept at all.
        let mut r = response("a", 4, 0);
        r["answer_source"]["fingerprint"] = json!("f".repeat(MAX_SOURCE_BYTES));
        c.on_input_committed("r", &json!([part("q")]));
        c.on_model_response("r", &r);
        assert!(c.turns().last().unwrap().steps()[0]
            .answer_source()
            .is_none());
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

    // ------------------------------------------------------ refresh --

    /// A worker history answering queries by the worker's cursor rules,
    /// with at most `per_page` steps on one page.
    struct History {
        revision: u64,
        /// User text (`None`: host-internal) and step texts.
        turns: Vec<(Option<String>, Vec<String>)>,
        per_page: usize,
        queries: Vec<HistoryQuery>,
    }

    impl History {
        fn new(turns: Vec<(Option<String>, Vec<String>)>, per_page: usize) -> History {
            History {
                revision: 17,
                turns,
                per_page,
                queries: Vec::new(),
            }
        }

        fn uniform(turns: usize, steps: usize, per_page: usize) -> History {
            History::new(
                (0..turns)
                    .map(|t| {
                        (
                            Some(format!("question {t}")),
                            (0..steps).map(|s| format!("answer {t}.{s}")).collect(),
                        )
                    })
                    .collect(),
                per_page,
            )
        }

        fn from_conversation(c: &Conversation, per_page: usize) -> History {
            History::new(
                c.turns()
                    .iter()
                    .filter(|t| !t.is_compact())
                    .map(|t| {
                        (
                            t.user().map(|u| u.text.clone()),
                            t.steps().iter().map(|s| s.text().text.clone()).collect(),
                        )
                    })
                    .collect(),
                per_page,
            )
        }

        fn page(&mut self, q: HistoryQuery) -> Value {
            self.queries.push(q);
            let total = self.turns.len() as u64;
            let start = q.start.min(total);
            let end = start + q.limit.min(total - start);
            let outside = match self.turns.get(start as usize) {
                Some(turn) => q.step > turn.1.len() as u64,
                None => q.step != 0,
            };
            if outside {
                // What a `history_error` would carry.
                return json!({"request_id": "h", "message": "history step is outside"});
            }
            let mut budget = self.per_page;
            let mut turns = Vec::new();
            let (mut next, mut next_step) = (start, 0);
            for index in start..end {
                let (user, steps) = &self.turns[index as usize];
                let first = if index == start { q.step } else { 0 } as usize;
                let mut shown = Vec::new();
                let mut at = first;
                while at < steps.len() && budget > 0 {
                    shown.push(json!({
                        "index": at, "content": [part(&steps[at])], "tool_calls": 0,
                        "reasoning": part("SECRET"),
                        "answer_source": source(index, at as u64),
                    }));
                    budget -= 1;
                    at += 1;
                }
                if at == first && at < steps.len() && !turns.is_empty() {
                    break;
                }
                let mut turn = json!({
                    "index": index, "steps": shown,
                    "user": user.as_ref().map_or(json!([]), |u| json!([part(u)])),
                    "omitted_user_parts": 0, "omitted_steps": steps.len() - at,
                });
                if user.is_none() {
                    turn["internal_input"] = json!("continue");
                }
                turns.push(turn);
                if at < steps.len() {
                    next = index;
                    next_step = at as u64;
                    break;
                }
                next = index + 1;
            }
            json!({"request_id": "h", "revision": self.revision, "start": start, "step": q.step,
                   "next": next, "next_step": next_step, "total": total, "turns": turns})
        }
    }

    fn run_refresh(
        refresh: &mut Refresh,
        history: &mut History,
    ) -> Result<RefreshSnapshot, RefreshError> {
        let mut query = refresh.query();
        loop {
            match refresh.accept_page(&history.page(query))? {
                Next::Query(q) => query = q,
                Next::Done(snapshot) => return Ok(snapshot),
            }
        }
    }

    fn reconcile(c: &mut Conversation, history: &mut History) -> Result<(), RefreshError> {
        let mut refresh = c.start_refresh().unwrap();
        let snapshot = run_refresh(&mut refresh, history)?;
        c.publish_refresh(snapshot, "2024-01-01T00:00:00Z").unwrap();
        Ok(())
    }

    fn q(start: u64, step: u64, limit: u64) -> HistoryQuery {
        HistoryQuery { start, step, limit }
    }

    #[test]
    fn refresh_reads_newest_turns_first() {
        let mut history = History::uniform(25, 2, 100);
        let mut c = Conversation::new(1 << 20);
        c.on_connection(W);
        assert!(c.stale());
        reconcile(&mut c, &mut history).unwrap();
        assert_eq!(
            history.queries,
            vec![
                q(0, 0, 1),
                q(24, 0, 1),
                q(14, 0, 10),
                q(4, 0, 10),
                q(0, 0, 4)
            ]
        );
        assert!(!c.stale() && !c.incomplete() && !c.truncated());
        assert_eq!(c.refreshed_at(), Some("2024-01-01T00:00:00Z"));
        assert_eq!(c.history_revision(), Some(17));
        assert_eq!(c.turns().len(), 25);
        for (t, turn) in c.turns().iter().enumerate() {
            assert_eq!(turn.index(), Some(t as u64));
            assert_eq!(turn.user().unwrap().text, format!("question {t}"));
            assert_eq!(turn.steps()[1].text().text, format!("answer {t}.1"));
            assert_eq!(turn.steps()[1].answer_source(), Some(&source(t as u64, 1)));
        }
        assert!(!c.to_json().to_string().contains("SECRET"));
        // Live commits continue the refreshed indices.
        c.on_input_committed("r", &json!([part("more")]));
        assert_eq!(c.turns()[25].index(), Some(25));
        // Empty and one-turn histories finish from the discovery page.
        for (turns, pages) in [(0, 1), (1, 1)] {
            let mut history = History::uniform(turns, 1, 100);
            let mut c = Conversation::new(1 << 20);
            c.on_connection(W);
            reconcile(&mut c, &mut history).unwrap();
            assert_eq!(history.queries.len(), pages);
            assert_eq!(c.turns().len(), turns);
        }
        let mut c = Conversation::new(1 << 20);
        assert!(c.start_refresh().is_none(), "no worker yet");
        c.on_connection(W);
        let refresh = c.start_refresh().unwrap();
        assert_eq!(
            refresh.query().to_data("h1"),
            json!({"operation": "history", "request_id": "h1", "start": 0, "step": 0, "limit": 1})
        );
    }

    #[test]
    fn refresh_merges_continuations_and_skips_to_final_steps() {
        // Turn 1 has 100 steps, three per page.
        let mut turns: Vec<(Option<String>, Vec<String>)> = (0..3)
            .map(|t| (Some(format!("q{t}")), vec![format!("a{t}")]))
            .collect();
        turns[1].1 = (0..100).map(|s| format!("s{s}")).collect();
        turns[2].0 = None;
        let mut history = History::new(turns, 3);
        let mut c = Conversation::new(1 << 20);
        c.on_connection(W);
        reconcile(&mut c, &mut history).unwrap();
        let long = &c.turns()[1];
        assert_eq!(long.steps().len(), MAX_STEPS_PER_TURN);
        assert_eq!(long.omitted_steps(), 68);
        assert_eq!(long.steps()[0].index(), Some(68));
        assert_eq!(long.steps()[31].text().text, "s99");
        assert_eq!(long.user().unwrap().text, "q1");
        assert!(
            c.turns()[2].user().is_none(),
            "host-internal input is hidden"
        );
        // After the block's first page the reader jumps to step 68.
        assert!(
            history.queries.contains(&q(1, 68, 1)),
            "{:?}",
            history.queries
        );
        assert!(!history
            .queries
            .iter()
            .any(|x| x.start == 1 && (3..68).contains(&x.step)));
        assert!(history.queries.len() <= MAX_REFRESH_PAGES);
    }

    #[test]
    fn refresh_stops_at_the_page_budget_with_a_validated_tail() {
        // 700 turns of 3 steps, four steps per page: a block of ten turns
        // takes eight pages, so the budget runs out inside a block.
        let mut history = History::uniform(700, 3, 4);
        let mut c = live(1 << 22, 1);
        let before = c.revision();
        let mut refresh = c.start_refresh().unwrap();
        let snapshot = run_refresh(&mut refresh, &mut history).unwrap();
        assert_eq!(history.queries.len(), MAX_REFRESH_PAGES);
        assert_eq!(refresh.pages(), MAX_REFRESH_PAGES);
        assert!(snapshot.incomplete() && snapshot.truncated());
        let indices: Vec<u64> = snapshot
            .turns()
            .iter()
            .map(|t| t.index().unwrap())
            .collect();
        assert_eq!(*indices.last().unwrap(), 699);
        assert!(
            indices.windows(2).all(|w| w[1] == w[0] + 1),
            "a contiguous tail"
        );
        // The interrupted block is discarded whole: the tail starts at a
        // block boundary.
        assert_eq!((699 - indices[0]) % 10, 0);
        assert!(snapshot.turns().iter().all(|t| t.steps().len() == 3));
        c.publish_refresh(snapshot, "t").unwrap();
        assert!(c.incomplete() && c.truncated() && !c.stale());
        assert!(c.revision() > before);
        assert_eq!(c.omitted_turns(), c.turns()[0].index().unwrap());
        assert!(matches!(
            refresh.accept_page(&json!({})),
            Err(RefreshError::Finished)
        ));
    }

    #[test]
    fn refresh_stops_once_the_tail_fills_the_cap() {
        let mut history = History::uniform(300, 1, 100);
        history
            .turns
            .iter_mut()
            .for_each(|t| t.1[0] = "x".repeat(500));
        let mut c = Conversation::new(MIN_CONVERSATION_BYTES * 2);
        c.on_connection(W);
        reconcile(&mut c, &mut history).unwrap();
        assert!(history.queries.len() < 5);
        assert!(c.truncated() && !c.incomplete());
        assert_eq!(c.turns().last().unwrap().index(), Some(299));
        assert_sized(&c);
    }

    #[test]
    fn a_refresh_older_than_a_live_commit_is_refused() {
        let mut c = live(1 << 20, 2);
        let mut history = History::from_conversation(&c, 10);
        let mut refresh = c.start_refresh().unwrap();
        // A live commit lands while the pages are collected.
        let Next::Query(next) = refresh.accept_page(&history.page(refresh.query())).unwrap() else {
            panic!()
        };
        c.on_input_committed("run2", &json!([part("live question")]));
        let mut refresh_rest = refresh.clone();
        let snapshot = {
            let mut query = next;
            loop {
                match refresh_rest.accept_page(&history.page(query)).unwrap() {
                    Next::Query(q) => query = q,
                    Next::Done(snapshot) => break snapshot,
                }
            }
        };
        let before = c.to_json();
        assert!(matches!(
            c.publish_refresh(snapshot.clone(), "t"),
            Err(PublishError::StaleGeneration { .. })
        ));
        assert_eq!(c.to_json(), before, "the live projection stays");
        // A connection change or compaction also outdates it.
        let mut c = live(1 << 20, 1);
        let snapshot = {
            let mut refresh = c.start_refresh().unwrap();
            run_refresh(&mut refresh, &mut History::from_conversation(&c, 10)).unwrap()
        };
        c.on_connection("worker-2");
        let err = c.publish_refresh(snapshot, "t").unwrap_err();
        assert!(err.to_string().contains("generation"));
        // A refresh for another worker cannot publish either.
        let mut c = live(1 << 20, 0);
        let mut other = Refresh::new(c.generation(), "worker-9", 1 << 20);
        let Next::Done(snapshot) = other
            .accept_page(&History::uniform(0, 0, 1).page(other.query()))
            .unwrap()
        else {
            panic!()
        };
        assert_eq!(
            c.publish_refresh(snapshot, "t"),
            Err(PublishError::WorkerChanged)
        );
        // A compact result stays ahead of refreshed turns.
        c.on_compact_finished(&json!({"summary": "s", "removed_turns": 0, "revision": 2}));
        let mut history = History::uniform(2, 1, 10);
        reconcile(&mut c, &mut history).unwrap();
        assert!(c.turns()[0].is_compact());
        assert_eq!(c.turns()[1].index(), Some(0));
        assert_eq!(c.turns().len(), 3);
    }

    /// Runs a refresh against `history`, letting `tamper` edit the page
    /// answering query number `at` (1-based).
    fn tampered(
        history: &mut History,
        at: usize,
        tamper: impl Fn(&mut Value),
    ) -> Result<RefreshSnapshot, RefreshError> {
        let mut refresh = Refresh::new(0, W, 1 << 20);
        let mut query = refresh.query();
        let mut n = 0;
        loop {
            n += 1;
            let mut page = history.page(query);
            if n == at {
                tamper(&mut page);
            }
            match refresh.accept_page(&page)? {
                Next::Query(next) => query = next,
                Next::Done(snapshot) => return Ok(snapshot),
            }
        }
    }

    #[test]
    fn refresh_validates_every_page() {
        let fresh = || History::uniform(25, 2, 5);
        assert!(tampered(&mut fresh(), 0, |_| {}).is_ok());
        type Tamper = Box<dyn Fn(&mut Value)>;
        let cases: Vec<(usize, Tamper, &str)> = vec![
            (3, Box::new(|p| p["revision"] = json!(18)), "revision"),
            (2, Box::new(|p| p["total"] = json!(26)), "count"),
            (2, Box::new(|p| p["start"] = json!(23)), "order"),
            (3, Box::new(|p| p["step"] = json!(1)), "order"),
            (
                3,
                Box::new(|p| {
                    let s = p["start"].clone();
                    p["next"] = s;
                    p["next_step"] = json!(0);
                }),
                "order",
            ),
            (3, Box::new(|p| p["turns"][1]["index"] = json!(99)), "order"),
            (
                3,
                Box::new(|p| p["turns"][0]["steps"][1]["index"] = json!(5)),
                "order",
            ),
            (
                3,
                Box::new(|p| {
                    p["turns"].as_array_mut().unwrap().pop();
                }),
                "order",
            ),
            (
                3,
                Box::new(|p| p["turns"][0]["omitted_steps"] = json!(1)),
                "order",
            ),
            (
                3,
                Box::new(|p| p["turns"][0]["steps"][0]["answer_source"]["worker_id"] = json!("w2")),
                "another worker",
            ),
            (
                3,
                Box::new(|p| p["turns"][0]["steps"][0]["answer_source"]["turn"] = json!(0)),
                "order",
            ),
            (3, Box::new(|p| p["next"] = json!(1000)), "order"),
            (1, Box::new(|p| p["revision"] = json!("17")), "malformed"),
            (3, Box::new(|p| p["turns"] = json!({})), "malformed"),
            (
                3,
                Box::new(|p| p["turns"][0]["steps"][0]["content"] = json!("x")),
                "malformed",
            ),
            (3, Box::new(|p| *p = json!([])), "malformed"),
        ];
        for (at, tamper, expected) in cases {
            let err = tampered(&mut fresh(), at, tamper).unwrap_err();
            assert!(
                err.to_string().contains(expected),
                "{err} (wanted {expected})"
            );
        }
        // An error ends the attempt and the projection keeps its content.
        let mut c = live(1 << 20, 2);
        let before = c.to_json();
        let mut refresh = c.start_refresh().unwrap();
        let mut page = History::from_conversation(&c, 10).page(refresh.query());
        page["revision"] = json!(null);
        assert!(refresh.accept_page(&page).is_err());
        assert_eq!(refresh.accept_page(&page), Err(RefreshError::Finished));
        c.mark_stale(true);
        assert!(c.stale() && c.incomplete());
        assert_eq!(
            c.turns(),
            Conversation::from_json(&before, 1 << 20).unwrap().turns()
        );
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

    #[test]
    fn water_fill_shares_evenly() {
        assert_eq!(water_fill(&[1, 2, 3], 10), vec![1, 2, 3]);
        assert_eq!(water_fill(&[1, 10, 10], 9), vec![1, 4, 4]);
        assert_eq!(water_fill(&[5, 5], 0), vec![0, 0]);
        assert_eq!(water_fill(&[], 5), Vec::<usize>::new());
    }
}
