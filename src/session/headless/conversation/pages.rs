//! `subagent/receive` conversation pages: which turns of a cursor window
//! fit the skeleton budget, how the shared body budget is planned across
//! answers, summaries, older steps and user input (the text clipping is
//! `clip`'s).

use serde_json::{json, Value};

use super::clip::{clip_escaped, escaped_len};
use super::model::{Conversation, Turn};
use super::PAGE_SKELETON_BYTES;
use crate::wire::worker::display::encoded_len;

/// `,"output_truncated":true`
const OUTPUT_FLAG_BYTES: usize = 24;

impl Conversation {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::headless::conversation::test_support::*;
    use crate::session::headless::conversation::{MAX_SOURCE_BYTES, PAGE_BODY_BUDGET};

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
    fn water_fill_shares_evenly() {
        assert_eq!(water_fill(&[1, 2, 3], 10), vec![1, 2, 3]);
        assert_eq!(water_fill(&[1, 10, 10], 9), vec![1, 4, 4]);
        assert_eq!(water_fill(&[5, 5], 0), vec![0, 0]);
        assert_eq!(water_fill(&[], 5), Vec::<usize>::new());
    }
}
