//! `parse_confirmation_request` + `confirmation_response`: never panic; an
//! accepted request's ids are the frame's own, non-empty and within 128
//! bytes, its call an object with string `id` and `name`; the response
//! echoes the four ids exactly, carries the decision and reason asked for,
//! and never contains the call.
//!
//! Input: one confirmation-socket text frame, parsed for the route `demo`
//! and, when it names another string session id, for that route too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use simplex_hub::wire::worker::confirm_frames::{
    confirmation_response, parse_confirmation_request,
};
use simplex_hub::wire::worker::envelope::MAX_ID_BYTES;
use simplex_hub_fuzz::{encode, text};

const IDS: [&str; 4] = ["worker_id", "session_id", "run_id", "confirmation_id"];

fn check(text: &str, route: &str) {
    let req = match parse_confirmation_request(text, route) {
        Ok(req) => req,
        Err(err) => {
            let message = err.to_string();
            assert!(message.len() <= 600, "unbounded error: {}", message.len());
            return;
        }
    };
    let frame: Value = serde_json::from_str(text).expect("accepted text is JSON");
    let data = &frame["data"];
    let ids = [
        &req.worker_id,
        &req.session_id,
        &req.run_id,
        &req.confirmation_id,
    ];
    for (field, id) in IDS.iter().zip(ids) {
        assert_eq!(data[field], json!(id), "{field}");
        assert!(!id.is_empty() && id.len() <= MAX_ID_BYTES);
    }
    assert_eq!(req.session_id, route);
    assert_eq!(&req.call, &data["call"]);
    assert!(req.call["id"].is_string() && req.call["name"].is_string());

    let call_text = encode(&req.call);
    // A reason taken from the call, to tempt an echo of it.
    let from_call = call_text.get(..64).unwrap_or(&call_text);
    for (approved, reason) in [
        (true, None),
        (false, Some("denied by fuzz")),
        (true, Some(from_call)),
    ] {
        let resp = confirmation_response(&req, approved, reason);
        assert_eq!(resp["type"], json!("confirmation_response"));
        let Some(out) = resp["data"].as_object() else {
            panic!("response data is not an object");
        };
        for (field, id) in IDS.iter().zip(ids) {
            assert_eq!(out.get(*field), Some(&json!(id)), "{field} not echoed");
        }
        let decision = if approved { "approved" } else { "denied" };
        assert_eq!(out.get("decision"), Some(&json!(decision)));
        assert_eq!(out.get("reason"), reason.map(Value::from).as_ref());
        assert_eq!(out.len(), 5 + usize::from(reason.is_some()));
        assert_eq!(resp.as_object().map(|m| m.len()), Some(2));
        // Every value in the response is a string, so an object (the call)
        // can only appear in its encoding as structure, never escaped.
        let encoded = encode(&resp);
        assert!(!encoded.contains(&call_text), "call echoed: {encoded}");
        assert!(!out.contains_key("call"));
    }
}

fuzz_target!(|data: &[u8]| {
    let text = text(data);
    check(&text, "demo");
    if let Ok(frame) = serde_json::from_str::<Value>(&text) {
        if let Some(session) = frame["data"]["session_id"].as_str() {
            if session != "demo" {
                check(&text, session);
            }
        }
    }
});
