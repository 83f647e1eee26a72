//! Panel protocol v1, client side and budgets.
//!
//! `parse_client` never panics; an error carries one of the five codes the
//! parser may produce, a bounded message, and echoes `request_id` only when
//! it is a string of 1-128 bytes; an accepted message is consistent (known
//! kind, session named, `input` stripped of `v`/`type`/`session`); and
//! re-encoding the JSON (decode -> encode -> decode) gives the same result.
//!
//! The same bytes, read as numbers, drive the budget functions:
//! `plan_pages` covers every entry in order with pages that fit
//! `PAGE_TARGET` (or hold one oversized entry) and are greedy;
//! `allocate_previews` keeps sizes when they fit and otherwise water-fills
//! to the largest common level within the share; `approvals_allowance`
//! stays within both the share and the frame ceiling.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use simplex_hub::wire::ids::is_valid_id;
use simplex_hub::wire::panel::{
    allocate_previews, approvals_allowance, code, echo, parse_client, plan_pages, wire_cost,
    ClientMsg, APPROVALS_SHARE, ECHO_STRING_BYTES, FRAME_CEILING, MAX_REQUEST_ID_BYTES,
    PAGE_TARGET,
};
use simplex_hub_fuzz::{encode, text, Reader};

const PARSE_CODES: &[&str] = &[
    code::BAD_JSON,
    code::BAD_MESSAGE,
    code::UNSUPPORTED_VERSION,
    code::INVALID_SESSION,
    code::INVALID_POLICY,
];

fn check_parse(text: &str) {
    let parsed = parse_client(text);
    let value = serde_json::from_str::<Value>(text);
    match &parsed {
        Err((err, request_id)) => {
            assert!(PARSE_CODES.contains(&err.code), "code {}", err.code);
            assert!(err.message.len() <= 600, "message of {}", err.message.len());
            assert_eq!(err.code == code::BAD_JSON, value.is_err());
            if let Some(id) = request_id {
                assert!(!id.is_empty() && id.len() <= MAX_REQUEST_ID_BYTES);
                let given = value.as_ref().ok().and_then(|v| v.get("request_id"));
                assert_eq!(given, Some(&Value::from(id.as_str())));
            }
        }
        Ok(msg) => check_msg(msg),
    }
    // An error's echo of the message is bounded: small scalars only.
    let echoed = echo(text);
    assert_eq!(echoed.is_some(), value.as_ref().is_ok_and(Value::is_object));
    for member in echoed
        .iter()
        .flat_map(|e| e.as_object())
        .flat_map(|m| m.values())
    {
        assert!(!member.is_array() && !member.is_object());
        assert!(member.as_str().is_none_or(|s| s.len() <= ECHO_STRING_BYTES));
    }
    // Decode -> encode -> decode: whitespace, escapes and number spelling
    // of the frame do not change what it means.
    if let Ok(value) = value {
        let again = parse_client(&encode(&value));
        match (&parsed, &again) {
            (Ok(a), Ok(b)) => assert_eq!(a, b),
            (Err((a, ra)), Err((b, rb))) => {
                assert_eq!(a.code, b.code);
                assert_eq!(ra, rb);
            }
            _ => panic!("re-encoding changed the outcome: {parsed:?} vs {again:?}"),
        }
    }
}

fn check_msg(msg: &ClientMsg) {
    match msg {
        ClientMsg::Unknown { kind } => assert_eq!(msg.kind(), kind),
        ClientMsg::ListSessions | ClientMsg::Ping => assert!(msg.session().is_none()),
        ClientMsg::CreateSession { session, .. } => assert!(is_valid_id(session)),
        ClientMsg::Input { input, .. } => {
            let m = input.as_object().expect("input is an object");
            for key in ["v", "type", "session"] {
                assert!(!m.contains_key(key), "input keeps {key}");
            }
        }
        ClientMsg::Subscribe { request_id, .. }
        | ClientMsg::History { request_id, .. }
        | ClientMsg::Confirmation { request_id, .. } => {
            if let Some(id) = request_id {
                assert!(!id.is_empty() && id.len() <= MAX_REQUEST_ID_BYTES);
            }
        }
        _ => {}
    }
    if !matches!(
        msg,
        ClientMsg::Unknown { .. } | ClientMsg::ListSessions | ClientMsg::Ping
    ) {
        assert!(msg.session().is_some());
    }
}

fn check_pages(r: &mut Reader) {
    let overhead = r.size(PAGE_TARGET);
    let n = usize::from(r.u8() % 64);
    let lens: Vec<usize> = (0..n).map(|_| r.size(PAGE_TARGET / 4)).collect();
    let pages = plan_pages(&lens, overhead);
    let mut next = 0;
    for page in &pages {
        assert_eq!(page.start, next, "pages not contiguous");
        assert!(page.end > page.start, "empty page");
        next = page.end;
        let entries = &lens[page.clone()];
        if entries.len() > 1 {
            let text = frame_text(overhead, entries);
            assert!(
                wire_cost_u128(text) <= PAGE_TARGET as u128,
                "page over target"
            );
        }
    }
    assert_eq!(next, lens.len(), "pages do not cover every entry");
    // Greedy: each page ended because the next entry would not fit.
    for pair in pages.windows(2) {
        let grown = frame_text(overhead, &lens[pair[0].start..=pair[0].end]);
        assert!(
            wire_cost_u128(grown) > PAGE_TARGET as u128,
            "page closed early"
        );
    }
}

/// Frame text length of a page: overhead, entries and separating commas.
fn frame_text(overhead: usize, entries: &[usize]) -> u128 {
    let sum: u128 = entries.iter().map(|&l| l as u128).sum();
    overhead as u128 + sum + entries.len().saturating_sub(1) as u128
}

fn wire_cost_u128(text: u128) -> u128 {
    match usize::try_from(text) {
        Ok(t) if t < usize::MAX - 10 => wire_cost(t) as u128,
        _ => text,
    }
}

fn check_previews(r: &mut Reader) {
    let share = r.size(APPROVALS_SHARE);
    let n = usize::from(r.u8() % 32);
    // Documented precondition: each preview is already within 64 KiB.
    let sizes: Vec<usize> = (0..n)
        .map(|_| r.size(64 * 1024) % (64 * 1024 + 1))
        .collect();
    let caps = allocate_previews(&sizes, share);
    assert_eq!(caps.len(), sizes.len());
    let total: u128 = sizes.iter().map(|&s| s as u128).sum();
    if total <= share as u128 {
        assert_eq!(caps, sizes);
        return;
    }
    let capped = |level: u128| -> u128 { sizes.iter().map(|&s| (s as u128).min(level)).sum() };
    let used: u128 = caps.iter().map(|&c| c as u128).sum();
    assert!(used <= share as u128, "caps exceed the share");
    // One common level: every reduced preview is cut to it, the others
    // stay whole, and one more byte of level would not fit.
    let level = caps
        .iter()
        .zip(&sizes)
        .filter(|(c, s)| c < s)
        .map(|(c, _)| *c)
        .max()
        .expect("something was reduced");
    for (&c, &s) in caps.iter().zip(&sizes) {
        assert_eq!(c, s.min(level));
    }
    assert_eq!(capped(level as u128), used);
    assert!(
        capped(level as u128 + 1) > share as u128,
        "level not maximal"
    );
}

fn check_allowance(r: &mut Reader) {
    let other = r.size(FRAME_CEILING);
    let allowance = approvals_allowance(other);
    assert!(allowance <= APPROVALS_SHARE);
    if allowance > 0 {
        assert!(other as u128 + 10 + allowance as u128 <= FRAME_CEILING as u128);
    }
}

fuzz_target!(|data: &[u8]| {
    check_parse(&text(data));
    let mut r = Reader::new(data);
    check_pages(&mut r);
    check_previews(&mut r);
    check_allowance(&mut r);
});
