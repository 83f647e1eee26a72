//! `wire::worker::envelope::parse_event`: never panics; an accepted envelope is
//! consistent with its own object, re-encodes and re-parses to the same
//! envelope, and keeps every correlation field within 128 bytes;
//! `raw_metadata` stays bounded. The envelope's text (taken from the frame
//! when `wire::worker::canonical` proves it canonical) is exactly `serde_json`'s
//! encoding of the frame parsed with `serde_json`, its `data` is that
//! object's, and `write_raw_metadata` writes `raw_metadata`'s encoding.
//!
//! Input: one worker text frame. It is parsed for the route `demo` and, when
//! it names another string session id, for that route too, so frames for
//! any session reach the checks past the session match.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use simplex_hub::wire::worker::canonical::canonical_object;
use simplex_hub::wire::worker::envelope::{
    parse_event, raw_metadata, write_raw_metadata, Envelope, KNOWN_EVENTS, MAX_ID_BYTES,
    RAW_KEY_MAX, RAW_MEMBERS_MAX, RAW_STRING_MAX,
};
use simplex_hub_fuzz::{encode, text};

fn check(text: &str, route: &str) {
    let env = match parse_event(text, route) {
        Ok(env) => env,
        Err(err) => {
            // Errors quote offending values clipped; never the frame.
            let message = err.to_string();
            assert!(message.len() <= 600, "unbounded error: {}", message.len());
            return;
        }
    };
    check_envelope(&env, route);

    // The text and `data` are what serde_json itself makes of the frame.
    let Ok(Value::Object(parsed)) = serde_json::from_str::<Value>(text) else {
        panic!("accepted a frame serde_json does not parse as an object");
    };
    let expected = encode(&Value::Object(parsed.clone()));
    assert_eq!(
        env.json(),
        expected,
        "envelope text differs from serde_json's"
    );
    assert_eq!(env.data(), parsed.get("data"));
    assert_eq!(env.object(), &parsed);

    // Decode -> encode -> decode.
    let again = encode(&Value::Object(env.object().clone()));
    match parse_event(&again, route) {
        Ok(second) => assert_eq!(second, env, "re-parse of {again}"),
        Err(err) => panic!("re-encoded envelope refused: {err}: {again}"),
    }

    let raw = raw_metadata(&env, text.len());
    let mut written = String::new();
    write_raw_metadata(&env, text.len(), &mut written);
    assert_eq!(written, encode(&raw), "write_raw_metadata differs");
    let Value::Object(raw) = raw else {
        panic!("raw_metadata is not an object");
    };
    assert!(!raw.contains_key("data"));
    assert!(raw.len() <= RAW_MEMBERS_MAX + 3, "{} members", raw.len());
    assert_eq!(raw.get("bytes"), Some(&Value::from(text.len() as u64)));
    for (key, value) in &raw {
        assert!(key.len() <= RAW_KEY_MAX);
        match value {
            Value::String(s) => assert!(s.len() <= RAW_STRING_MAX + '…'.len_utf8()),
            Value::Array(_) => panic!("raw keeps an array"),
            Value::Object(m) if key != "data" => {
                assert_eq!(
                    encode(&Value::Object(m.clone())),
                    r#"{"display_omitted":true}"#
                )
            }
            _ => {}
        }
    }
}

/// The typed fields agree with the object they were read from.
fn check_envelope(env: &Envelope, route: &str) {
    let o = env.object();
    assert_eq!(o.get("type"), Some(&Value::from("event")));
    assert_eq!(env.session_id(), route);
    assert!(!env.event().is_empty() && !env.worker_id().is_empty());
    for id in [
        env.event(),
        env.session_id(),
        env.worker_id(),
        env.request_id(),
        env.run_id(),
    ] {
        assert!(id.len() <= MAX_ID_BYTES, "id of {} bytes", id.len());
    }
    assert_eq!(o.get("event"), Some(&Value::from(env.event())));
    if let Some(range) = env.event_range() {
        assert_eq!(&env.json()[range], env.event());
    }
    assert_eq!(o.get("worker_id"), Some(&Value::from(env.worker_id())));
    assert_eq!(o.get("session_id"), Some(&Value::from(env.session_id())));
    for (field, value) in [("request_id", env.request_id()), ("run_id", env.run_id())] {
        match o.get(field) {
            Some(Value::String(s)) => assert_eq!(s, value),
            Some(_) => {
                assert!(value.is_empty());
                assert!(env.issues.iter().any(|i| i.starts_with(field)));
            }
            None => {
                assert!(value.is_empty());
                assert!(env.issues.contains(&format!("missing {field}")));
            }
        }
    }
    assert_eq!(env.sequence, o.get("sequence").and_then(Value::as_u64));
    assert_eq!(env.known, KNOWN_EVENTS.contains(&env.event()));
    assert!(env.issues.len() <= 4, "{:?}", env.issues);
}

/// Whatever the scanner calls canonical is serde_json's own encoding.
fn check_canonical(text: &str) {
    if let Some(c) = canonical_object(text) {
        match serde_json::from_str::<Value>(text) {
            Ok(v @ Value::Object(_)) => assert_eq!(encode(&v), c.text, "not canonical: {text}"),
            other => panic!("claimed canonical, serde_json says {other:?}: {text}"),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let text = text(data);
    check_canonical(&text);
    check(&text, "demo");
    if let Ok(Value::Object(o)) = serde_json::from_str::<Value>(&text) {
        if let Some(Value::String(session)) = o.get("session_id") {
            if session != "demo" {
                check(&text, session);
            }
        }
    }
});
