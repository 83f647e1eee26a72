//! The history refresh state machine: a [`Refresh`] reads the worker's
//! paged `history` newest turns first within a page budget, validates
//! every page, and yields a [`RefreshSnapshot`] that
//! [`Conversation::publish_refresh`] accepts only for the same generation
//! and worker.

use std::fmt;

use serde_json::{json, Map, Value};

use super::model::{sanitize_source, visible_text, Conversation, Step, Text, Turn};
use super::{HISTORY_PAGE_TURNS, MAX_REFRESH_PAGES, MAX_STEPS_PER_TURN, MIN_CONVERSATION_BYTES};
use crate::wire::worker::display::kind;

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

impl Conversation {
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
}

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
    use crate::session::headless::conversation::test_support::*;

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
}
