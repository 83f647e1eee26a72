//! The `subagent/*` argument grammar and receipt hash
//! (`wire::worker::subagent_args::{parse_call, receipt_hash}`).
//!
//! `parse_call` never panics, for each of the three routes and for every
//! other route the input suggests (which it must decline). An accepted call
//! agrees with its arguments (ids, cursors, limits, the answer source,
//! content and options as given), its arguments re-serialized are within
//! `MAX_ARGUMENT_BYTES`, and an answer call's arguments also build the
//! worker `answer` payload (`wire::worker::answer::answer_payload`, the HTTP
//! route's rules). A refusal is `invalid_arguments` with a short message.
//! Acceptance does not depend on key order, and the 64 KiB limit is exact.
//! `receipt_hash` is 64 lowercase hex digits, equal for a copy with every
//! object's keys reordered, and different for each route.
//!
//! Input: the arguments as JSON text. Every string in the value (and a few
//! near-miss spellings of the routes) is also tried as a route.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};
use simplex_hub::wire::worker::answer::{answer_payload, check_source};
use simplex_hub::wire::worker::payload::{validate_content, validate_options};
use simplex_hub::wire::worker::subagent_args::{
    is_subagent_id, is_subagent_route, parse_call, receipt_hash, ArgError, Call, SendOp,
    CLEAN_FORK, DEFAULT_LIMIT, MAX_ARGUMENT_BYTES, MAX_LIMIT, RECEIVE, SEND,
};
use simplex_hub_fuzz::{encode, text, walk};

const ROUTES: [&str; 3] = [CLEAN_FORK, RECEIVE, SEND];

/// A copy of `value` with every object's keys in reverse order (serde_json
/// keeps insertion order here: `preserve_order`). The parser's depth limit
/// (128) bounds the recursion.
fn reordered(value: &Value) -> Value {
    match value {
        Value::Array(items) => Value::Array(items.iter().map(reordered).collect()),
        Value::Object(map) => {
            let mut out = Map::new();
            for (k, v) in map.iter().rev() {
                out.insert(k.clone(), reordered(v));
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

fn check_call(route: &str, args: &Value, call: &Call) {
    let size = encode(args).len();
    assert!(size <= MAX_ARGUMENT_BYTES, "accepted {size} bytes");
    let fields = args.as_object().expect("accepted arguments are an object");
    let u64_of = |v: Option<&Value>| v.map(|v| v.as_u64().expect("an integer"));
    match call {
        Call::CleanFork => {
            assert_eq!(route, CLEAN_FORK);
            assert!(fields.is_empty());
        }
        Call::List => {
            assert_eq!(route, RECEIVE);
            assert!(fields.is_empty());
        }
        Call::Inspect {
            subagent_id,
            cursor,
            limit,
        } => {
            assert_eq!(route, RECEIVE);
            assert!(is_subagent_id(subagent_id));
            assert_eq!(fields["subagent_id"], json!(subagent_id));
            assert!(!fields.contains_key("answer"));
            assert_eq!(
                *cursor as u64,
                u64_of(fields.get("cursor")).unwrap_or(0),
                "cursor"
            );
            assert!((1..=MAX_LIMIT).contains(limit));
            assert_eq!(
                *limit as u64,
                u64_of(fields.get("limit")).unwrap_or(DEFAULT_LIMIT as u64)
            );
        }
        Call::Answer {
            subagent_id,
            source,
            part,
            offset,
        } => {
            assert_eq!(route, RECEIVE);
            assert!(is_subagent_id(subagent_id));
            assert_eq!(fields["subagent_id"], json!(subagent_id));
            assert!(!fields.contains_key("cursor") && !fields.contains_key("limit"));
            let answer = &fields["answer"];
            assert_eq!(&answer["source"], source);
            assert_eq!(*part, u64_of(answer.get("part")).unwrap_or(0));
            assert_eq!(*offset, u64_of(answer.get("offset")).unwrap_or(0));
            assert_eq!(check_source(source), Ok(()));
            // Both answer requests accept the same answers.
            let payload = answer_payload(answer).expect("the HTTP route accepts it too");
            assert_eq!(
                payload,
                json!({"operation": "answer", "source": source, "part": part, "offset": offset})
            );
        }
        Call::Send { subagent_id, op } => {
            assert_eq!(route, SEND);
            assert!(is_subagent_id(subagent_id));
            assert_eq!(fields["subagent_id"], json!(subagent_id));
            assert_eq!(fields["operation"], json!(op.name()));
            assert_eq!(op.options(), fields.get("options"));
            if let Some(options) = op.options() {
                assert!(validate_options(options).is_ok());
                assert!(!options.as_object().unwrap().contains_key("confirmation"));
            }
            match op {
                SendOp::Message { content, .. } => {
                    assert_eq!(Some(content), fields.get("content"));
                    assert!(validate_content(content).is_ok());
                }
                _ => assert!(!fields.contains_key("content")),
            }
            if *op == SendOp::Stop {
                assert!(!fields.contains_key("options"));
            }
        }
    }
}

/// Parses `args` for `route` and checks the outcome; `Some(accepted)` for
/// a subagent route.
fn check(route: &str, args: &Value) -> Option<bool> {
    let outcome = parse_call(route, args);
    assert_eq!(outcome.is_some(), is_subagent_route(route), "{route:?}");
    match outcome? {
        Ok(call) => {
            check_call(route, args, &call);
            Some(true)
        }
        Err(err) => {
            assert_eq!(err.code(), "invalid_arguments");
            let message = err.to_string();
            assert!(!message.is_empty() && message.len() <= 1024, "{message}");
            Some(false)
        }
    }
}

/// The size limit is exact: `args` padded with one more member to exactly
/// the limit is not `TooLarge`, one byte more is.
fn check_limit(args: &Map<String, Value>) {
    let mut padded = args.clone();
    padded.insert("\u{1}pad".into(), json!(""));
    let base = encode(&Value::Object(padded.clone())).len();
    if base > MAX_ARGUMENT_BYTES {
        return;
    }
    for extra in [0, 1] {
        let pad = "x".repeat(MAX_ARGUMENT_BYTES - base + extra);
        padded.insert("\u{1}pad".into(), json!(pad));
        let value = Value::Object(padded.clone());
        assert_eq!(encode(&value).len(), MAX_ARGUMENT_BYTES + extra);
        let refused = matches!(
            parse_call(RECEIVE, &value),
            Some(Err(ArgError::TooLarge { bytes, max: MAX_ARGUMENT_BYTES, .. }))
                if bytes == MAX_ARGUMENT_BYTES + 1
        );
        assert_eq!(refused, extra == 1);
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(args) = serde_json::from_str::<Value>(&text(data)) else {
        return;
    };
    let reordered = reordered(&args);
    let mut hashes = Vec::new();
    for route in ROUTES {
        let accepted = check(route, &args).expect("a subagent route");
        assert_eq!(
            check(route, &reordered),
            Some(accepted),
            "key order changed the outcome"
        );
        let hash = receipt_hash(route, &args);
        assert_eq!(hash.len(), 64);
        assert!(hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
        assert_eq!(hash, receipt_hash(route, &reordered), "key order");
        hashes.push(hash);
    }
    assert!(hashes[0] != hashes[1] && hashes[1] != hashes[2] && hashes[0] != hashes[2]);

    // Other routes: near misses and the strings of the input.
    let mut routes: Vec<String> = [
        "subagent/receive/",
        "subagent",
        "Subagent/send",
        "plan/read",
    ]
    .map(String::from)
    .to_vec();
    walk(&args, |v| {
        if let Value::String(s) = v {
            if routes.len() < 16 {
                routes.push(s.clone());
            }
        }
    });
    for route in &routes {
        check(route, &args);
        let hash = receipt_hash(route, &args);
        assert!(!hashes.contains(&hash) || ROUTES.contains(&route.as_str()));
    }

    if let Value::Object(map) = &args {
        check_limit(map);
    }
});
