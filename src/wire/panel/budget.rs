//! The byte budgets the hub enforces on panel connections: the outbound
//! budget and frame ceiling, a frame's wire cost, replay page planning,
//! the approval-preview share and its water-filling, and the `logs` tail
//! limits.

use std::ops::Range;

use crate::wire::websocket::frame_header_len;

/// Pending outbound bytes (frames including their headers) one panel
/// connection may have; a send that would exceed it ends the connection.
pub const OUTBOUND_BUDGET: usize = 4 * 1024 * 1024;

/// Ceiling of one indivisible display frame (`welcome`, `sessions`,
/// `session`, `created`, legacy `subscribed`, `snapshot`), header included.
pub const FRAME_CEILING: usize = 2 * 1024 * 1024;

/// Target size of one paged replay frame, metadata and header included.
pub const PAGE_TARGET: usize = 512 * 1024;

/// Encoded argument-preview bytes all approvals in one description frame
/// share.
pub const APPROVALS_SHARE: usize = 512 * 1024;

/// Text bytes of the newest log lines a `logs` reply carries.
pub const LOG_TAIL_BYTES: usize = 256 * 1024;

/// Longest preview of one log line in a `logs` reply, bytes.
pub const LOG_LINE_PREVIEW: usize = 8 * 1024;

/// Most log lines a `logs` reply carries.
pub const MAX_LOG_LINES: usize = 2000;

/// Bytes a frame costs on the wire: its UTF-8 length plus the unmasked
/// header (2, 4 or 10 bytes).
pub fn wire_cost(text_len: usize) -> usize {
    text_len.saturating_add(frame_header_len(text_len))
}

/// Splits transcript entries (serialized, in order; `entry_lens` are their
/// byte lengths) into consecutive pages whose complete `subscribed` frame
/// costs at most [`PAGE_TARGET`] on the wire: `overhead` (the frame's
/// length with an empty transcript) + entries + separating commas + header.
/// An entry that does not fit a page even alone gets a page of its own (the
/// caller refuses it if that frame exceeds [`OUTBOUND_BUDGET`]). Returns the
/// pages as index ranges covering `0..entry_lens.len()` in order.
pub fn plan_pages(entry_lens: &[usize], overhead: usize) -> Vec<Range<usize>> {
    let mut pages = Vec::new();
    let mut start = 0;
    // Frame text length of the page being built.
    let mut text = overhead;
    for (i, len) in entry_lens.iter().enumerate() {
        if i > start {
            let grown = text.saturating_add(1).saturating_add(*len);
            if wire_cost(grown) <= PAGE_TARGET {
                text = grown;
                continue;
            }
            pages.push(start..i);
            start = i;
        }
        text = overhead.saturating_add(*len);
    }
    if start < entry_lens.len() {
        pages.push(start..entry_lens.len());
    }
    pages
}

/// Per-prompt argument-preview caps under a shared allowance (water-filling).
///
/// `preview_sizes` are the encoded sizes of the previews as they stand
/// (each already within 64 KiB). When they fit `share` together, every cap
/// is its size (nothing changes). Otherwise a common level is chosen, the
/// largest whole number such that `sum(min(size, level)) <= share`, and each
/// cap is `min(size, level)`: small previews stay whole, larger ones are
/// reduced first and to the same level. The caller regenerates each prompt
/// whose cap is below its size from the original call (`Prompt::describe`
/// with that budget); identities and lifecycle fields are untouched.
///
/// A level below `display::MIN_BUDGET` (more than `share / 64` large
/// prompts) still yields minimal previews of up to 64 bytes each; the frame
/// ceiling check stays the caller's final guard.
pub fn allocate_previews(preview_sizes: &[usize], share: usize) -> Vec<usize> {
    let total = preview_sizes
        .iter()
        .fold(0usize, |acc, s| acc.saturating_add(*s));
    if total <= share {
        return preview_sizes.to_vec();
    }
    let mut sorted = preview_sizes.to_vec();
    sorted.sort_unstable();
    let mut remaining = share;
    let mut level = usize::MAX;
    for (i, size) in sorted.iter().enumerate() {
        let left = sorted.len() - i;
        if *size <= remaining / left {
            remaining -= size;
        } else {
            level = remaining / left;
            break;
        }
    }
    preview_sizes.iter().map(|s| (*s).min(level)).collect()
}

/// The approval-preview allowance of a description frame whose other
/// contents (everything but the argument previews) take `other_len` bytes:
/// [`APPROVALS_SHARE`], less whatever would push the frame past
/// [`FRAME_CEILING`] (the largest frame header included).
pub fn approvals_allowance(other_len: usize) -> usize {
    APPROVALS_SHARE.min(FRAME_CEILING.saturating_sub(other_len.saturating_add(10)))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{json, Value};

    use super::*;
    use crate::util::testkit::Rng;
    use crate::wire::panel::{subscribed, Paging};

    fn parsed(text: &str) -> Value {
        serde_json::from_str(text).expect("valid JSON")
    }

    #[test]
    fn wire_cost_headers() {
        assert_eq!(wire_cost(0), 2);
        assert_eq!(wire_cost(125), 127);
        assert_eq!(wire_cost(126), 130);
        assert_eq!(wire_cost(65535), 65539);
        assert_eq!(wire_cost(65536), 65546);
        assert_eq!(wire_cost(usize::MAX), usize::MAX);
    }

    /// Frame text length of a page of `lens` under `overhead`.
    fn page_text(lens: &[usize], overhead: usize) -> usize {
        lens.iter()
            .fold(overhead, |acc, l| acc.saturating_add(*l))
            .saturating_add(lens.len().saturating_sub(1))
    }

    fn check_pages(lens: &[usize], overhead: usize) {
        let pages = plan_pages(lens, overhead);
        let mut next = 0;
        for page in &pages {
            assert_eq!(page.start, next, "pages are contiguous and in order");
            assert!(page.end > page.start, "no empty page");
            next = page.end;
            let cost = wire_cost(page_text(&lens[page.clone()], overhead));
            if page.len() > 1 {
                assert!(cost <= PAGE_TARGET, "multi-entry page over target: {cost}");
            }
            // greedy: the next entry would not have fit
            if page.end < lens.len() {
                let grown = wire_cost(page_text(&lens[page.start..page.end + 1], overhead));
                assert!(grown > PAGE_TARGET, "page closed early");
            }
        }
        assert_eq!(next, lens.len(), "pages cover every entry");
        for (i, len) in lens.iter().enumerate() {
            if wire_cost(overhead.saturating_add(*len)) > PAGE_TARGET {
                assert!(pages.contains(&(i..i + 1)), "oversized entry {i} alone");
            }
        }
    }

    #[test]
    fn plan_pages_properties() {
        assert!(plan_pages(&[], 100).is_empty());
        assert_eq!(plan_pages(&[10], 100), vec![0..1]);
        assert_eq!(plan_pages(&[PAGE_TARGET * 3], 100), vec![0..1]);
        assert_eq!(
            plan_pages(&[1, 1, 1], PAGE_TARGET * 2),
            vec![0..1, 1..2, 2..3]
        );
        let mut rng = Rng::new(0x1234_5678_9ABC_DEF1);
        for _ in 0..300 {
            let n = rng.below(200);
            let scale = [100usize, 10_000, 100_000, 600_000][rng.below(4)];
            let lens: Vec<usize> = (0..n)
                .map(|_| {
                    if rng.below(20) == 0 {
                        PAGE_TARGET + rng.below(1_000_000)
                    } else {
                        1 + rng.below(scale)
                    }
                })
                .collect();
            let overhead = rng.below(4096) + 100;
            check_pages(&lens, overhead);
        }
        // boundary: a page exactly at the target
        let overhead = 1000;
        let first = PAGE_TARGET - 10 - overhead - 1 - 100;
        check_pages(&[first, 100, 1], overhead);
        assert_eq!(plan_pages(&[first, 100, 1], overhead), vec![0..2, 2..3]);
        // huge lengths saturate instead of overflowing
        check_pages(&[usize::MAX, 1, usize::MAX], usize::MAX - 5);
    }

    #[test]
    fn planned_subscribed_frames_really_fit() {
        let mut rng = Rng::new(0xDEAD_BEEF_CAFE_F00D);
        let desc =
            json!({"session_id": "demo", "confirmations": [], "spec": {"x": "y".repeat(3000)}});
        let logs_v = json!({"lines": [{"text": "z".repeat(2000)}], "dropped": 0, "omitted": 0});
        let plan_v = json!({"markdown": "plan", "revision": 1, "updated_at": null});
        let mut seq = 40u64;
        let items: Vec<(u64, Arc<str>)> = (0..400)
            .map(|_| {
                seq += 1 + rng.below(3) as u64;
                let body = "é\"\n".repeat(rng.below(30_000));
                let text =
                    json!({"hub_sequence": seq, "event": "model_reply", "data": body}).to_string();
                (seq, Arc::from(text))
            })
            .collect();
        let all: Vec<Arc<str>> = items.iter().map(|(_, e)| e.clone()).collect();
        for first in [true, false] {
            let meta = |entries: &[Arc<str>], latest: u64| {
                subscribed(
                    "demo",
                    entries,
                    logs_v.clone(),
                    latest,
                    "3f1c2e0a-epoch",
                    plan_v.clone(),
                    Some(Paging {
                        replay_more: true,
                        replay_reset: first,
                    }),
                    Some("req-123"),
                    desc.clone(),
                )
            };
            let overhead = meta(&[], u64::MAX).len();
            let lens: Vec<usize> = all.iter().map(|e| e.len()).collect();
            let pages = plan_pages(&lens, overhead);
            assert!(pages.len() > 1);
            for page in pages {
                let latest = items[page.end - 1].0;
                let frame = meta(&all[page.clone()], latest);
                assert_eq!(
                    parsed(&frame)["transcript"].as_array().map(Vec::len),
                    Some(page.len())
                );
                if page.len() > 1 {
                    assert!(wire_cost(frame.len()) <= PAGE_TARGET, "{}", frame.len());
                }
            }
        }
    }

    #[test]
    fn allocate_previews_fits_or_keeps() {
        assert_eq!(allocate_previews(&[], 10), Vec::<usize>::new());
        assert_eq!(allocate_previews(&[3, 4, 5], 12), vec![3, 4, 5]);
        assert_eq!(allocate_previews(&[1, 100, 50], 61), vec![1, 30, 30]);
        assert_eq!(allocate_previews(&[10, 10], 5), vec![2, 2]);
        assert_eq!(allocate_previews(&[10, 10], 0), vec![0, 0]);
        assert_eq!(
            allocate_previews(&[usize::MAX, usize::MAX, 7], 1000),
            vec![496, 496, 7]
        );
        let mut rng = Rng::new(0x0BAD_5EED_1234_5678);
        for _ in 0..500 {
            let n = rng.below(300);
            let sizes: Vec<usize> = (0..n)
                .map(|_| match rng.below(3) {
                    0 => rng.below(200),
                    1 => rng.below(8192),
                    _ => rng.below(65_536),
                })
                .collect();
            let share = match rng.below(3) {
                0 => APPROVALS_SHARE,
                1 => rng.below(1 << 20),
                _ => rng.below(5000),
            };
            let caps = allocate_previews(&sizes, share);
            assert_eq!(caps.len(), sizes.len());
            let total: usize = sizes.iter().sum();
            let used: usize = caps.iter().sum();
            if total <= share {
                assert_eq!(caps, sizes, "everything fits: nothing changes");
                continue;
            }
            assert!(used <= share, "{used} > {share}");
            // caps are min(size, level) for one level
            let level = caps
                .iter()
                .zip(&sizes)
                .filter(|(c, s)| c < s)
                .map(|(c, _)| *c)
                .next()
                .expect("something was reduced");
            for (c, s) in caps.iter().zip(&sizes) {
                assert_eq!(*c, (*s).min(level));
            }
            // monotone: a larger original never gets a smaller cap
            for i in 0..n {
                for j in 0..n {
                    if sizes[i] >= sizes[j] {
                        assert!(caps[i] >= caps[j]);
                    }
                }
            }
            // the level is the largest that fits
            let next: usize = sizes.iter().map(|s| (*s).min(level + 1)).sum();
            assert!(next > share, "level {level} is not maximal");
        }
    }

    #[test]
    fn approvals_allowance_shrinks_near_the_ceiling() {
        assert_eq!(approvals_allowance(0), APPROVALS_SHARE);
        assert_eq!(
            approvals_allowance(FRAME_CEILING - APPROVALS_SHARE - 10),
            APPROVALS_SHARE
        );
        assert_eq!(approvals_allowance(FRAME_CEILING - 1000), 990);
        assert_eq!(approvals_allowance(FRAME_CEILING), 0);
        assert_eq!(approvals_allowance(usize::MAX), 0);
    }
}
