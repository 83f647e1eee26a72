//! `session::headless::conversation::Conversation`, the child's bounded
//! conversation projection, driven by an arbitrary sequence of live
//! events, connections, gaps, history refreshes, receive pages and
//! `conversation.json` round trips, next to a model of the worker's
//! history.
//!
//! After every step: the stored size (`to_json`, compact) equals
//! `byte_len` and is within the cap. A refresh answered from the model
//! (pages that follow the worker's cursor rules, a few steps per page)
//! never fails, asks only valid queries (`limit` 1-10, never past the
//! history) within `MAX_REFRESH_PAGES`, publishes unless a live change
//! came in between, and leaves the projection equal to a tail of the
//! model, turn for turn from the newest: the turn indices the model's
//! (`omitted_turns` = the model turns before them), each turn's final
//! steps with `omitted_steps` + kept = the model's count, texts prefixes of
//! the model's (shorter only when marked truncated), answer sources the
//! model's. While the projection is not stale and only the model's own
//! events came since, the same holds (a live turn may not know its index).
//! Refreshes fed arbitrary pages and arbitrary event data never panic and
//! keep the cap. A receive page has `cursor`/`next`/`total` consistent
//! with the turn array, one entry per turn (whole or `{index, omitted}`),
//! texts that are prefixes of the stored ones (`output_truncated` exactly
//! when clipped or stored truncated), bodies within the body budget and
//! structure within `PAGE_SKELETON_BYTES`, and nothing clipped when
//! everything fits. `from_json(to_json())` gives the same record; under a
//! smaller cap it fits that cap.
//!
//! Input: a cap selector and steps-per-history-page byte, then operations:
//! a selector byte and its arguments (sizes, flags), text bytes taken
//! from the input (and repeated to reach the caps), JSON taken from the
//! input for the arbitrary data. See `src/lib.rs`, `Reader`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use simplex_hub::harness::conversation::{
    Conversation, HistoryQuery, Next, PublishError, Text, MAX_REFRESH_PAGES,
    MIN_CONVERSATION_BYTES, PAGE_SKELETON_BYTES,
};
use simplex_hub::wire::worker::display::quoted_len;
use simplex_hub_fuzz::{encode, Reader};

const WORKERS: [&str; 3] = ["worker-1", "worker-2", "w-0123456789abcdef0123456789abcdef"];

fn part(raw: &str) -> Value {
    json!({"type": "text", "modality": "text", "raw": raw})
}

fn escaped_len(s: &str) -> usize {
    quoted_len(s) - 2
}

/// Text from the input: up to `n` bytes, lossily decoded, repeated.
fn text(r: &mut Reader) -> String {
    let n = usize::from(r.u8() % 64);
    let times = match r.u8() {
        0..=223 => 1,
        255 => 1024,
        x => usize::from(x - 223) * 8,
    };
    String::from_utf8_lossy(r.bytes(n)).repeat(times)
}

/// JSON from the input: `n` bytes parsed, or a string of them.
fn json_value(r: &mut Reader) -> Value {
    let n = usize::from(r.u16() % 2048);
    let bytes = r.bytes(n);
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

struct ModelStep {
    text: String,
    commit: u64,
}

struct ModelTurn {
    user: String,
    steps: Vec<ModelStep>,
}

/// The worker's history, as the built-in worker keeps it.
struct Worker {
    id: String,
    revision: u64,
    commits: u64,
    turns: Vec<ModelTurn>,
    /// Steps shown per history page (the worker's byte budget, in steps).
    per_page: usize,
}

impl Worker {
    fn source(&self, turn: usize, step: usize) -> Value {
        let s = &self.turns[turn].steps[step];
        json!({
            "worker_id": self.id, "turn": turn, "step": step,
            "commit_sequence": s.commit.to_string(),
            "fingerprint": format!("{:064x}", s.commit.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
        })
    }

    /// One `history` page, by the worker's cursor rules.
    fn page(&self, q: HistoryQuery) -> Value {
        let total = self.turns.len() as u64;
        assert!((1..=10).contains(&q.limit), "query limit {}", q.limit);
        assert!(q.start < total || q.step == 0, "a step past the history");
        let start = q.start.min(total);
        let end = start + q.limit.min(total - start);
        let mut budget = self.per_page;
        let mut turns = Vec::new();
        let (mut next, mut next_step) = (start, 0);
        for index in start..end {
            let turn = &self.turns[index as usize];
            let n = turn.steps.len();
            let first = if index == start { q.step as usize } else { 0 };
            assert!(first <= n, "a step past the turn");
            let take = budget.min(n - first);
            if take == 0 && first < n {
                break;
            }
            budget -= take;
            let steps: Vec<Value> = (first..first + take)
                .map(|i| {
                    let step = &turn.steps[i];
                    json!({
                        "index": i, "content": [part(&step.text)], "tool_calls": 0,
                        "omitted_parts": 0, "commit_sequence": step.commit.to_string(),
                        "answer_source": self.source(index as usize, i),
                    })
                })
                .collect();
            turns.push(json!({
                "index": index, "user": [part(&turn.user)], "steps": steps,
                "omitted_user_parts": 0, "omitted_steps": n - first - take,
            }));
            if first + take < n {
                next = index;
                next_step = (first + take) as u64;
                break;
            }
            next = index + 1;
        }
        json!({
            "request_id": "q-fuzz", "revision": self.revision, "start": start,
            "step": q.step, "next": next, "next_step": next_step, "total": total,
            "turns": turns,
        })
    }
}

/// `shown` is a prefix of `stored`, shorter only when marked.
fn prefix(shown: &Text, stored: &str) {
    assert!(stored.starts_with(&shown.text), "not a prefix");
    assert!(
        shown.truncated || shown.text.len() == stored.len(),
        "unmarked clip"
    );
}

fn check_size(c: &Conversation) {
    let len = encode(&c.to_json()).len();
    assert_eq!(len, c.byte_len());
    assert!(len <= c.cap_bytes(), "{len} > cap {}", c.cap_bytes());
    assert!(c.cap_bytes() >= MIN_CONVERSATION_BYTES);
}

/// The projection is a tail of the worker's history, turn for turn from
/// the newest. `live`: turns committed live while no earlier index was
/// known do not know theirs (until an answer source names it); after a
/// refresh every index is known.
fn check_against(c: &Conversation, w: &Worker, live: bool) {
    let all = c.turns();
    if all.len() > 1 {
        assert!(
            all[1..].iter().all(|t| !t.is_compact()),
            "compact not first"
        );
    }
    let turns: Vec<_> = all.iter().filter(|t| !t.is_compact()).collect();
    assert!(turns.len() <= w.turns.len(), "more turns than the history");
    let first = w.turns.len() - turns.len();
    assert_eq!(c.omitted_turns(), first as u64, "omitted turns");
    for (k, turn) in turns.into_iter().enumerate() {
        let index = first + k;
        match turn.index() {
            None if live => {}
            other => assert_eq!(other, Some(index as u64), "turn index"),
        }
        let model = &w.turns[index];
        prefix(turn.user().expect("user text"), &model.user);
        let n = model.steps.len() as u64;
        assert_eq!(turn.omitted_steps() + turn.steps().len() as u64, n);
        for (i, step) in turn.steps().iter().enumerate() {
            let at = turn.omitted_steps() as usize + i;
            assert_eq!(step.index(), Some(at as u64));
            prefix(step.text(), &model.steps[at].text);
            if let Some(source) = step.answer_source() {
                assert_eq!(source, &w.source(index, at));
            }
        }
    }
}

fn check_page(c: &Conversation, cursor: usize, limit: usize, budget: usize) {
    let page = c.page(cursor, limit, budget);
    let total = c.turns().len();
    let start = cursor.min(total);
    let end = start.saturating_add(limit).min(total);
    assert_eq!(page["cursor"], json!(start));
    assert_eq!(page["next"], json!(end));
    assert_eq!(page["total"], json!(total));
    let shown = page["turns"].as_array().expect("turns");
    assert_eq!(shown.len(), end - start);
    let (mut bodies, mut full, mut skeleton, mut omitted) = (0, 0, 0, false);
    let mut clipped = false;
    for (entry, turn) in shown.iter().zip(&c.turns()[start..end]) {
        assert_eq!(entry["index"], json!(turn.index()));
        if entry.get("omitted").is_some() {
            assert_eq!(entry, &json!({"index": turn.index(), "omitted": true}));
            omitted = true;
            continue;
        }
        let mut body = 0;
        let mut text = |entry: &Value, stored: &Text| {
            let t = entry["text"].as_str().expect("text");
            assert!(stored.text.starts_with(t), "page text not a prefix");
            let cut = t.len() < stored.text.len();
            clipped |= cut;
            assert_eq!(
                entry.get("output_truncated") == Some(&json!(true)),
                cut || stored.truncated
            );
            body += escaped_len(t);
            full += escaped_len(&stored.text);
        };
        match turn.user() {
            None => assert!(entry["user"].is_null()),
            Some(user) => text(&entry["user"], user),
        }
        match turn.summary() {
            None => assert!(entry.get("summary").is_none()),
            Some(summary) => text(&entry["summary"], summary),
        }
        let steps = entry["steps"].as_array().expect("steps");
        assert_eq!(steps.len(), turn.steps().len());
        for (s, step) in steps.iter().zip(turn.steps()) {
            assert_eq!(s["index"], json!(step.index()));
            text(s, step.text());
            let source = step
                .answer_source()
                .filter(|src| src["worker_id"].as_str() == c.worker_id());
            assert_eq!(s.get("answer_source"), source);
        }
        match turn.omitted_steps() {
            0 => assert!(entry.get("omitted_steps").is_none()),
            n => assert_eq!(entry["omitted_steps"], json!(n)),
        }
        skeleton += encode(entry).len() - body;
        bodies += body;
    }
    assert!(bodies <= budget, "bodies {bodies} > budget {budget}");
    assert!(skeleton <= PAGE_SKELETON_BYTES, "skeleton {skeleton}");
    if full <= budget {
        assert!(!clipped, "clipped although everything fits");
    }
    assert_eq!(page["truncated"], json!(c.truncated() || omitted));
    assert_eq!(page["revision"], json!(c.revision()));
}

fn check_round_trip(c: &Conversation, smaller: usize) -> Conversation {
    let json = c.to_json();
    let back = Conversation::from_json(&json, c.cap_bytes()).expect("own record");
    assert_eq!(back.to_json(), json);
    assert_eq!(back.turns(), c.turns());
    let text = encode(&json);
    let reread = Conversation::from_json(&serde_json::from_str(&text).unwrap(), c.cap_bytes())
        .expect("own record as text");
    assert_eq!(reread.to_json(), json);
    let small = Conversation::from_json(&json, smaller).expect("own record, smaller cap");
    check_size(&small);
    back
}

/// A refresh answered by the model; `true` when it published.
fn faithful_refresh(c: &mut Conversation, w: &Worker, r: &mut Reader) -> bool {
    let Some(mut refresh) = c.start_refresh() else {
        assert!(c.worker_id().is_none());
        return false;
    };
    assert_eq!(refresh.worker_id(), w.id);
    let snapshot = loop {
        assert!(refresh.pages() <= MAX_REFRESH_PAGES);
        match refresh.accept_page(&w.page(refresh.query())) {
            Ok(Next::Query(_)) => continue,
            Ok(Next::Done(snapshot)) => break snapshot,
            Err(err) => panic!("a faithful history failed to refresh: {err}"),
        }
    };
    assert_eq!(snapshot.history_total(), w.turns.len() as u64);
    assert_eq!(snapshot.history_revision(), w.revision);
    let live_change = match r.u8() % 4 {
        0 => {
            c.on_event_gap();
            true
        }
        1 => {
            c.mark_stale(true);
            false
        }
        _ => false,
    };
    let outcome = c.publish_refresh(snapshot, "2024-01-01T00:00:00.000Z");
    check_size(c);
    if live_change {
        assert!(matches!(outcome, Err(PublishError::StaleGeneration { .. })));
        return false;
    }
    outcome.expect("publish");
    assert!(!c.stale());
    assert_eq!(c.history_revision(), Some(w.revision));
    check_against(c, w, false);
    true
}

/// A refresh fed pages from the input.
fn arbitrary_refresh(c: &mut Conversation, r: &mut Reader) {
    let Some(mut refresh) = c.start_refresh() else {
        return;
    };
    for _ in 0..(r.u8() % 4 + 1) {
        match refresh.accept_page(&json_value(r)) {
            Ok(Next::Query(_)) => continue,
            Ok(Next::Done(snapshot)) => {
                let _ = c.publish_refresh(snapshot, "now");
                check_size(c);
            }
            Err(err) => assert!(err.to_string().len() < 1024),
        }
        break;
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let cap = match r.u8() % 4 {
        0 => MIN_CONVERSATION_BYTES,
        1 => usize::from(r.u16()),
        2 => MIN_CONVERSATION_BYTES + usize::from(r.u16()),
        _ => 1 << 20,
    };
    let mut c = Conversation::new(cap);
    let mut w = Worker {
        id: String::new(),
        revision: 0,
        commits: 0,
        turns: Vec::new(),
        per_page: usize::from(r.u8() % 4) + 1,
    };
    // Only the worker's own events since the last faithful refresh.
    let mut synced = false;
    let mut ops = 0;
    while !r.is_empty() && ops < 128 {
        ops += 1;
        let revision = c.revision();
        let op = r.u8() % 12;
        match op {
            0 | 1 => {
                let user = text(&mut r);
                let content = json!([part(&user)]);
                let data = if r.bool() {
                    json!({ "content": content })
                } else {
                    content
                };
                w.turns.push(ModelTurn {
                    user,
                    steps: Vec::new(),
                });
                w.revision += 1;
                c.on_input_committed(&format!("run-{}", w.turns.len()), &data);
            }
            2 | 3 => {
                if w.turns.is_empty() {
                    continue;
                }
                let raw = text(&mut r);
                w.commits += 1;
                w.revision += 1;
                let turn = w.turns.len() - 1;
                w.turns[turn].steps.push(ModelStep {
                    text: raw.clone(),
                    commit: w.commits,
                });
                let step = w.turns[turn].steps.len() - 1;
                let mut content = vec![part(&raw)];
                if r.bool() {
                    content.push(json!({"type": "binary", "modality": "image", "raw": "AAAA"}));
                }
                let data = json!({
                    "type": "model_response", "role": "assistant", "content": content,
                    "cost": {"prompt": 10, "generated": 5, "cache_hit": 0},
                    "commit_sequence": w.commits.to_string(),
                    "answer_source": w.source(turn, step),
                });
                c.on_model_response(&format!("run-{}", w.turns.len()), &data);
            }
            4 => {
                let summary = text(&mut r);
                let removed = w.turns.len();
                w.turns.clear();
                w.revision += 1;
                c.on_compact_finished(&json!({
                    "summary": summary, "removed_turns": removed, "revision": w.revision,
                    "durable": true,
                }));
            }
            5 => {
                let id = WORKERS[usize::from(r.u8()) % WORKERS.len()];
                w.id = id.to_string();
                let changed = c.on_connection(id);
                assert_eq!(changed, c.revision() != revision);
            }
            6 => c.on_event_gap(),
            7 => c.mark_stale(r.bool()),
            8 => synced |= faithful_refresh(&mut c, &w, &mut r),
            9 => {
                arbitrary_refresh(&mut c, &mut r);
                synced = false;
            }
            10 => {
                let data = json_value(&mut r);
                match r.u8() % 3 {
                    0 => c.on_input_committed("run-x", &data),
                    1 => c.on_model_response("run-x", &data),
                    _ => c.on_compact_finished(&data),
                }
                synced = false;
            }
            _ => {
                check_size(&c);
                let cursor = usize::from(r.u8() % 8);
                let limit = usize::from(r.u8() % 12);
                let budget = r.size(4096);
                check_page(&c, cursor, limit, budget);
                let smaller = usize::from(r.u16());
                let back = check_round_trip(&c, smaller);
                if r.bool() {
                    c = back;
                }
            }
        }
        assert!(c.revision() >= revision);
        // The exact encoding is compared in `check_size` (pages, round
        // trips, refreshes and the end); every step checks the sum.
        assert!(c.byte_len() <= c.cap_bytes(), "over the cap");
        if synced && !c.stale() {
            check_against(&c, &w, true);
        }
    }
    check_size(&c);
    check_page(&c, 0, 10, 96 * 1024);
    check_round_trip(&c, MIN_CONVERSATION_BYTES);
});
