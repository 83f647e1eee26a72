//! Test fixtures shared by the conversation unit tests: live-event
//! builders, a size check, and a scripted worker `History` that answers
//! queries by the worker's cursor rules, with helpers to run refreshes.

use serde_json::{json, Value};

use super::{Conversation, HistoryQuery, Next, Refresh, RefreshError, RefreshSnapshot};

pub(super) const W: &str = "worker-1";

pub(super) fn part(raw: &str) -> Value {
    json!({"type": "text", "modality": "text", "raw": raw})
}

pub(super) fn source(turn: u64, step: u64) -> Value {
    json!({"worker_id": W, "turn": turn, "step": step,
           "commit_sequence": turn.wrapping_mul(100).wrapping_add(step).to_string(), "fingerprint": "f".repeat(64)})
}

pub(super) fn response(raw: &str, turn: u64, step: u64) -> Value {
    json!({
        "type": "model_response", "role": "assistant",
        "content": [part(raw)],
        "answer_source": source(turn, step),
        "commit_sequence": turn.wrapping_mul(100).wrapping_add(step).to_string(),
    })
}

/// A connected projection with `turns` live turns of one answer each.
pub(super) fn live(cap: usize, turns: u64) -> Conversation {
    let mut c = Conversation::new(cap);
    c.on_connection(W);
    for t in 0..turns {
        c.on_input_committed(&format!("run{t}"), &json!([part(&format!("question {t}"))]));
        c.on_model_response(&format!("run{t}"), &response(&format!("answer {t}"), t, 0));
    }
    c
}

pub(super) fn assert_sized(c: &Conversation) {
    let encoded = serde_json::to_vec(&c.to_json()).unwrap().len();
    assert_eq!(c.byte_len(), encoded);
    assert!(encoded <= c.cap_bytes(), "{encoded} > {}", c.cap_bytes());
}

/// A worker history answering queries by the worker's cursor rules,
/// with at most `per_page` steps on one page.
pub(super) struct History {
    pub(super) revision: u64,
    /// User text (`None`: host-internal) and step texts.
    pub(super) turns: Vec<(Option<String>, Vec<String>)>,
    pub(super) per_page: usize,
    pub(super) queries: Vec<HistoryQuery>,
}

impl History {
    pub(super) fn new(turns: Vec<(Option<String>, Vec<String>)>, per_page: usize) -> History {
        History {
            revision: 17,
            turns,
            per_page,
            queries: Vec::new(),
        }
    }

    pub(super) fn uniform(turns: usize, steps: usize, per_page: usize) -> History {
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

    pub(super) fn from_conversation(c: &Conversation, per_page: usize) -> History {
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

    pub(super) fn page(&mut self, q: HistoryQuery) -> Value {
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

pub(super) fn run_refresh(
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

pub(super) fn reconcile(c: &mut Conversation, history: &mut History) -> Result<(), RefreshError> {
    let mut refresh = c.start_refresh().unwrap();
    let snapshot = run_refresh(&mut refresh, history)?;
    c.publish_refresh(snapshot, "2024-01-01T00:00:00Z").unwrap();
    Ok(())
}

/// Runs a refresh against `history`, letting `tamper` edit the page
/// answering query number `at` (1-based).
pub(super) fn tampered(
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
