//! Remote-tool frames (`wire::worker::tool_frames`) and plan arguments
//! (`wire::worker::plan`).
//!
//! `parse_tool_request` never panics; an accepted request's ids are the
//! frame's own, non-empty and within 128 bytes, its session the route's,
//! its arguments the frame's object; a frame rebuilt from the request
//! parses to the same request; `succeeded`/`rejected` echo the four ids
//! exactly, name the route and status, and never echo the arguments.
//! `parse_route` agrees with a reference of its grammar. `plan::parse_call`
//! never panics on the arguments and keeps an accepted plan within its
//! limits.
//!
//! Input: one tool-socket text frame, parsed for the route session `demo`
//! and, when it names another string session id, for that one too. Every
//! whitespace-separated word of the input is also tried as a route.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use simplex_hub::wire::worker::plan::{self, PlanCall, MAX_PLAN_BYTES};
use simplex_hub::wire::worker::tool_frames::{
    parse_route, parse_tool_request, rejected, succeeded, ToolRequest, MAX_ID_BYTES,
    MAX_ROUTE_BYTES,
};
use simplex_hub_fuzz::{encode, text};

const IDS: [&str; 4] = ["worker_id", "session_id", "run_id", "request_id"];

fn ids(req: &ToolRequest) -> [&String; 4] {
    [
        &req.worker_id,
        &req.session_id,
        &req.run_id,
        &req.request_id,
    ]
}

fn route_model(route: &str) -> bool {
    let segment = |s: &str| {
        let mut chars = s.chars();
        matches!(chars.next(), Some('a'..='z'))
            && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_' | '-'))
    };
    (1..=MAX_ROUTE_BYTES).contains(&route.len()) && route.split('/').all(segment)
}

fn check_response(req: &ToolRequest, route: &str, text: &str, status: &str) {
    let value: Value = serde_json::from_str(text).expect("response is JSON");
    assert_eq!(value["type"], json!("tool_response"));
    let data = value["data"].as_object().expect("response data");
    for (field, id) in IDS.iter().zip(ids(req)) {
        assert_eq!(data.get(*field), Some(&json!(id)), "{field} not echoed");
    }
    assert_eq!(data.get("route"), Some(&json!(route)));
    assert_eq!(data.get("status"), Some(&json!(status)));
    assert!(!data.contains_key("arguments"));
}

fn check(text: &str, route_session: &str) {
    let req = match parse_tool_request(text, route_session) {
        Ok(req) => req,
        Err(err) => {
            let message = err.to_string();
            assert!(message.len() <= 600, "unbounded error: {}", message.len());
            return;
        }
    };
    let frame: Value = serde_json::from_str(text).expect("accepted text is JSON");
    let data = &frame["data"];
    for (field, id) in IDS.iter().zip(ids(&req)) {
        assert_eq!(data[field], json!(id), "{field}");
        assert!(!id.is_empty() && id.len() <= MAX_ID_BYTES);
    }
    assert_eq!(req.session_id, route_session);
    assert_eq!(data["arguments"], Value::Object(req.arguments.clone()));

    // Decode -> encode -> decode.
    let rebuilt = json!({"type": "tool_request", "data": {
        "worker_id": req.worker_id, "session_id": req.session_id,
        "run_id": req.run_id, "request_id": req.request_id,
        "arguments": req.arguments,
    }});
    assert_eq!(
        parse_tool_request(&encode(&rebuilt), route_session).as_ref(),
        Ok(&req)
    );

    for route in [plan::READ, plan::REPLACE, "other/route"] {
        let ok = succeeded(&req, route, json!({"ok": true}));
        check_response(&req, route, &ok, "succeeded");
        let no = rejected(&req, route, "invalid_arguments", "fuzz");
        check_response(&req, route, &no, "rejected");

        match plan::parse_call(route, &req.arguments) {
            None => assert!(!plan::is_plan_route(route)),
            Some(Ok(PlanCall::Read)) => assert_eq!(route, plan::READ),
            Some(Ok(PlanCall::Replace { markdown })) => {
                assert_eq!(route, plan::REPLACE);
                assert!(markdown.len() <= MAX_PLAN_BYTES);
                let given = req.arguments.get("markdown").and_then(Value::as_str);
                assert!(markdown.is_empty() || given == Some(markdown.as_str()));
            }
            Some(Err(err)) => {
                let message = err.to_string();
                assert!(message.len() <= 600, "unbounded error: {}", message.len());
            }
        }
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
    for word in std::iter::once(text.as_ref()).chain(text.split_whitespace()) {
        assert_eq!(parse_route(word), route_model(word), "route {word:?}");
    }
});
