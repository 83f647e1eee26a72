//! `wire::worker::payload` builders: `build_payload`, `validate_content`,
//! `validate_options` and `build_signal` never panic, and
//! - an accepted payload's frame is `{"type":"payload","data":{..}}` whose
//!   data holds only input fields, never a worker-owned key;
//! - fed back as input, that data is accepted again with the same request
//!   id and the same frame (the builder is idempotent: defaults it wrote
//!   out and the id it generated are simply given this time);
//! - a message is accepted exactly when its content validates, options
//!   exactly when `validate_options` accepts them;
//! - query frames stay within the worker's 16 KiB, measured both by
//!   `display::encoded_len` and by really encoding them;
//! - a signal carries the operation asked for and, for cancel, the first
//!   non-empty run id of at most 128 bytes.
//!
//! Input: one JSON document (the panel's `input` fields). For signals its
//! `operation`, `run_id` and `default_run` members are used when strings.
#![no_main]

use std::cell::Cell;

use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use simplex_hub::wire::worker::display::encoded_len;
use simplex_hub::wire::worker::envelope::MAX_ID_BYTES;
use simplex_hub::wire::worker::payload::{
    build_payload, build_signal, validate_content, validate_options, Operation, PayloadError,
    FORBIDDEN_KEYS, MAX_QUERY_FRAME_BYTES, MAX_REQUEST_ID_BYTES,
};
use simplex_hub_fuzz::{encode, text};

const INPUT_FIELDS: &[&str] = &[
    "operation",
    "request_id",
    "content",
    "options",
    "start",
    "step",
    "limit",
    "source",
    "part",
    "offset",
];

fn bounded(err: &PayloadError) {
    let message = err.to_string();
    assert!(!message.is_empty());
    assert!(message.len() <= 600, "unbounded error: {}", message.len());
}

fn check_payload(input: &Value) {
    let calls = Cell::new(0u32);
    let mut new_id = || {
        calls.set(calls.get() + 1);
        "gen-1".to_string()
    };
    let (id, frame) = match build_payload(input, &mut new_id) {
        Ok(built) => built,
        Err(err) => return bounded(&err),
    };
    let given = input.get("request_id").is_some();
    assert_eq!(calls.get(), u32::from(!given), "generator use");
    assert!(!id.is_empty() && id.len() <= MAX_REQUEST_ID_BYTES);
    if !given {
        assert_eq!(id, "gen-1");
    }

    let Value::Object(top) = &frame else {
        panic!("frame is not an object");
    };
    assert_eq!(top.len(), 2);
    assert_eq!(top.get("type"), Some(&json!("payload")));
    let Some(Value::Object(data)) = top.get("data") else {
        panic!("frame data is not an object");
    };
    for key in data.keys() {
        assert!(INPUT_FIELDS.contains(&key.as_str()), "data key {key}");
        assert!(!FORBIDDEN_KEYS.contains(&key.as_str()));
    }
    assert_eq!(data.get("request_id"), Some(&Value::from(id.as_str())));
    let op = data
        .get("operation")
        .and_then(Value::as_str)
        .and_then(Operation::parse)
        .expect("data.operation is an operation");
    match input.get("operation") {
        None => assert_eq!(op, Operation::Message),
        Some(given) => assert_eq!(given, &json!(op.as_str())),
    }
    if let Some(content) = data.get("content") {
        assert!(validate_content(content).is_ok());
        assert_eq!(Some(content), input.get("content"));
    }
    if let Some(options) = data.get("options") {
        assert!(op.starts_run());
        assert!(validate_options(options).is_ok());
    }
    if !op.starts_run() {
        let bytes = encode(&frame).len();
        assert_eq!(encoded_len(&frame), bytes);
        assert!(bytes <= MAX_QUERY_FRAME_BYTES);
    }

    // Idempotence: the data, given back as input, builds the same frame.
    let mut never = || -> String { panic!("request id regenerated") };
    let again = build_payload(&Value::Object(data.clone()), &mut never);
    assert_eq!(
        again,
        Ok((id, frame.clone())),
        "rebuilding {}",
        encode(&frame)
    );
}

/// Message/continue inputs wrapping `v` agree with the validators.
fn check_validators(v: &Value) {
    let mut id = || "x".to_string();
    let content = validate_content(v);
    if let Err(err) = &content {
        bounded(err);
    }
    let built = build_payload(&json!({ "content": v }), &mut id);
    assert_eq!(built.is_ok(), content.is_ok(), "content {}", encode(v));
    if let Err(err) = content {
        assert_eq!(built.err(), Some(err));
    }

    let options = validate_options(v);
    if let Err(err) = &options {
        bounded(err);
    }
    let built = build_payload(&json!({"operation": "continue", "options": v}), &mut id);
    assert_eq!(built.is_ok(), options.is_ok(), "options {}", encode(v));
    if let Err(err) = options {
        assert_eq!(built.err(), Some(err));
    }
}

fn check_signal(input: &Value) {
    let field = |name: &str| input.get(name).and_then(Value::as_str);
    let op = field("operation").unwrap_or("status");
    let run = field("run_id");
    let default_run = field("default_run");
    let frame = match build_signal(op, run, default_run) {
        Ok(frame) => frame,
        Err(err) => return bounded(&err),
    };
    assert_eq!(frame["type"], json!("signal"));
    assert_eq!(frame["data"]["operation"], json!(op));
    let data = frame["data"].as_object().expect("signal data");
    if op == "cancel" {
        let expect = run.filter(|r| !r.is_empty()).or(default_run).unwrap_or("");
        assert_eq!(data.get("run_id"), Some(&json!(expect)));
        assert!(!expect.is_empty() && expect.len() <= MAX_ID_BYTES);
        assert_eq!(data.len(), 2);
    } else {
        assert_eq!(data.len(), 1);
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(input) = serde_json::from_str::<Value>(&text(data)) else {
        return;
    };
    check_payload(&input);
    check_signal(&input);
    check_validators(&input);
    for key in ["content", "options"] {
        if let Some(v) = input.get(key) {
            check_validators(v);
        }
    }
});
