//! Remote-tool frames (pure): the route grammar, the one
//! `{"type":"tool_request","data":{worker_id, session_id, run_id,
//! request_id, arguments}}` frame a tool socket carries, and the one
//! `tool_response` the hub answers with. No I/O, clock or locks; the socket
//! thread is `worker::tools`, the fuzz target calls [`parse_tool_request`]
//! and [`parse_route`] directly.

use std::fmt;

use serde_json::{json, Map, Value};

use super::display::{describe, quote};
pub use super::envelope::MAX_ID_BYTES;

/// Largest request frame, whatever `limits.maxMessageBytes` says.
pub const MAX_FRAME_BYTES: usize = 1024 * 1024;

/// Largest response frame the hub writes.
pub const MAX_RESPONSE_BYTES: usize = 256 * 1024;

/// Longest route (`plan/replace`, `subagent/clean-fork`, ...), in bytes.
pub const MAX_ROUTE_BYTES: usize = 128;

/// The stable error codes of rejected tool responses.
pub mod code {
    /// The caller is not the live worker of an active run.
    pub const UNAUTHORIZED: &str = "unauthorized";
    /// Unknown, missing or ill-typed arguments.
    pub const INVALID_ARGUMENTS: &str = "invalid_arguments";
    /// The store could not be read or written.
    pub const STORAGE_ERROR: &str = "storage_error";
    /// The route exists in the grammar but this hub does not serve it.
    pub const NOT_IMPLEMENTED: &str = "not_implemented";
    // The `subagent/*` routes (`subagents::Refusal`).
    /// The caller's worker was not started by this hub's launcher, or its
    /// startup snapshot cannot be forked.
    pub const UNSUPPORTED_LAUNCH: &str = "unsupported_launch";
    /// The child's worker does not offer the operation.
    pub const UNSUPPORTED_OPERATION: &str = "unsupported_operation";
    /// The child, its caller's family or the hub is closing, or the child
    /// is gone.
    pub const LIFECYCLE_CLOSED: &str = "lifecycle_closed";
    /// The child's worker is not ready and connected.
    pub const DISCONNECTED: &str = "disconnected";
    /// A depth, live-child, children or pending-query limit.
    pub const LIMIT_EXCEEDED: &str = "limit_exceeded";
    /// The request id was used before with other arguments.
    pub const REQUEST_CONFLICT: &str = "request_conflict";
    /// Subagent launches are blocked until the subagent storage is repaired.
    pub const RECOVERY_REQUIRED: &str = "recovery_required";
    /// The payload may or may not have reached the child's worker.
    pub const DELIVERY_UNKNOWN: &str = "delivery_unknown";
    /// A child's answer page could not be read from its worker.
    pub const ANSWER_UNAVAILABLE: &str = "answer_unavailable";
    /// A `subagent/*` result over the response limit.
    pub const RESULT_TOO_LARGE: &str = "result_too_large";
}

/// Whether `route` is one or more `/`-separated segments of
/// `[a-z][a-z0-9_-]*`, at most [`MAX_ROUTE_BYTES`] long.
pub fn parse_route(route: &str) -> bool {
    !route.is_empty()
        && route.len() <= MAX_ROUTE_BYTES
        && route.split('/').all(|segment| {
            let mut bytes = segment.bytes();
            bytes.next().is_some_and(|b| b.is_ascii_lowercase())
                && bytes
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        })
}

/// One parsed tool request. The ids are non-empty and at most
/// [`MAX_ID_BYTES`]; `session_id` equals the route's session.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolRequest {
    pub worker_id: String,
    pub session_id: String,
    pub run_id: String,
    pub request_id: String,
    pub arguments: Map<String, Value>,
}

/// Why a request frame was refused (the socket closes with 1008).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The text is not one JSON document.
    NotJson,
    /// The document is not a JSON object.
    NotObject,
    /// `type` is not `"tool_request"`.
    WrongType { found: String },
    /// `data` or an id is missing, empty or not a string/object.
    MissingField { field: &'static str },
    /// An id is longer than [`MAX_ID_BYTES`].
    FieldTooLong {
        field: &'static str,
        bytes: usize,
        max: usize,
    },
    /// `data.arguments` is missing or not an object.
    BadArguments { found: String },
    /// `data.session_id` names another session than the route.
    SessionMismatch { expected: String, found: String },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotJson => f.write_str("tool request is not valid JSON"),
            Self::NotObject => f.write_str("tool request is not a JSON object"),
            Self::WrongType { found } => {
                write!(f, "tool request type is {found}, expected \"tool_request\"")
            }
            Self::MissingField { field } => write!(
                f,
                "tool request has no {field} (or it is empty or of the wrong type)"
            ),
            Self::FieldTooLong { field, bytes, max } => write!(
                f,
                "tool request {field} is {bytes} bytes, longer than the {max}-byte limit"
            ),
            Self::BadArguments { found } => {
                write!(f, "tool request arguments must be an object, found {found}")
            }
            Self::SessionMismatch { expected, found } => write!(
                f,
                "tool request session_id {found} does not match the route's {expected}"
            ),
        }
    }
}

impl std::error::Error for FrameError {}

/// Parses the request frame of a tool socket on
/// `/agent/<route_session>/tools/<route>`. Unknown fields are ignored.
pub fn parse_tool_request(text: &str, route_session: &str) -> Result<ToolRequest, FrameError> {
    let value: Value = serde_json::from_str(text).map_err(|_| FrameError::NotJson)?;
    let Value::Object(mut frame) = value else {
        return Err(FrameError::NotObject);
    };
    match frame.get("type") {
        Some(Value::String(t)) if t == "tool_request" => {}
        Some(other) => {
            return Err(FrameError::WrongType {
                found: describe(other),
            })
        }
        None => {
            return Err(FrameError::WrongType {
                found: "missing".into(),
            })
        }
    }
    let Some(Value::Object(mut data)) = frame.remove("data") else {
        return Err(FrameError::MissingField { field: "data" });
    };
    let mut id = |field: &'static str| -> Result<String, FrameError> {
        match data.remove(field) {
            Some(Value::String(s)) if !s.is_empty() => {
                if s.len() > MAX_ID_BYTES {
                    return Err(FrameError::FieldTooLong {
                        field,
                        bytes: s.len(),
                        max: MAX_ID_BYTES,
                    });
                }
                Ok(s)
            }
            _ => Err(FrameError::MissingField { field }),
        }
    };
    let worker_id = id("worker_id")?;
    let session_id = id("session_id")?;
    let run_id = id("run_id")?;
    let request_id = id("request_id")?;
    if session_id != route_session {
        return Err(FrameError::SessionMismatch {
            expected: quote(route_session),
            found: quote(&session_id),
        });
    }
    let arguments = match data.remove("arguments") {
        Some(Value::Object(arguments)) => arguments,
        Some(other) => {
            return Err(FrameError::BadArguments {
                found: describe(&other),
            })
        }
        None => {
            return Err(FrameError::BadArguments {
                found: "nothing".into(),
            })
        }
    };
    Ok(ToolRequest {
        worker_id,
        session_id,
        run_id,
        request_id,
        arguments,
    })
}

/// The response's `data` with the four ids echoed unchanged.
fn response(request: &ToolRequest, route: &str, status: &str) -> Map<String, Value> {
    let mut data = Map::new();
    data.insert("worker_id".into(), json!(request.worker_id));
    data.insert("session_id".into(), json!(request.session_id));
    data.insert("run_id".into(), json!(request.run_id));
    data.insert("request_id".into(), json!(request.request_id));
    data.insert("route".into(), json!(route));
    data.insert("status".into(), json!(status));
    data
}

/// `{"type":"tool_response","data":{ids, route, "status":"succeeded",
/// "result": result}}`.
pub fn succeeded(request: &ToolRequest, route: &str, result: Value) -> String {
    let mut data = response(request, route, "succeeded");
    data.insert("result".into(), result);
    json!({"type": "tool_response", "data": data}).to_string()
}

/// `{"type":"tool_response","data":{ids, route, "status":"rejected",
/// "error": {code, message}}}`.
pub fn rejected(request: &ToolRequest, route: &str, code: &str, message: &str) -> String {
    let mut data = response(request, route, "rejected");
    data.insert("error".into(), json!({"code": code, "message": message}));
    json!({"type": "tool_response", "data": data}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(data: Value) -> String {
        json!({"type": "tool_request", "data": data}).to_string()
    }

    fn good() -> Value {
        json!({"worker_id": "w", "session_id": "s", "run_id": "r", "request_id": "q",
               "arguments": {"markdown": "x"}, "extra": true})
    }

    #[test]
    fn routes_follow_the_grammar() {
        for ok in [
            "plan/read",
            "plan/replace",
            "subagent/clean-fork",
            "a",
            "a1_-/b",
        ] {
            assert!(parse_route(ok), "{ok}");
        }
        let long = "a".repeat(MAX_ROUTE_BYTES + 1);
        for bad in [
            "",
            "/plan",
            "plan/",
            "plan//read",
            "Plan/read",
            "1plan",
            "plan/Read",
            "pl an",
            "plan/re%61d",
            "plan/read?x",
            "-a",
            "_a",
            "plan/é",
            long.as_str(),
        ] {
            assert!(!parse_route(bad), "{bad}");
        }
        assert!(parse_route(&"a".repeat(MAX_ROUTE_BYTES)));
    }

    #[test]
    fn parses_a_request_and_ignores_unknown_fields() {
        let req = parse_tool_request(&frame(good()), "s").unwrap();
        assert_eq!(
            (
                req.worker_id.as_str(),
                req.session_id.as_str(),
                req.run_id.as_str(),
                req.request_id.as_str()
            ),
            ("w", "s", "r", "q")
        );
        assert_eq!(req.arguments["markdown"], "x");
    }

    #[test]
    fn refuses_malformed_frames() {
        assert_eq!(parse_tool_request("nope", "s"), Err(FrameError::NotJson));
        assert_eq!(parse_tool_request("[1]", "s"), Err(FrameError::NotObject));
        assert!(matches!(
            parse_tool_request(&json!({"type": "event", "data": good()}).to_string(), "s"),
            Err(FrameError::WrongType { .. })
        ));
        assert!(matches!(
            parse_tool_request(&json!({"data": good()}).to_string(), "s"),
            Err(FrameError::WrongType { .. })
        ));
        assert_eq!(
            parse_tool_request(&json!({"type": "tool_request", "data": 1}).to_string(), "s"),
            Err(FrameError::MissingField { field: "data" })
        );
        for field in ["worker_id", "session_id", "run_id", "request_id"] {
            for bad in [json!(null), json!(""), json!(5)] {
                let mut data = good();
                data[field] = bad;
                assert_eq!(
                    parse_tool_request(&frame(data), "s"),
                    Err(FrameError::MissingField { field })
                );
            }
            let mut data = good();
            data.as_object_mut().unwrap().remove(field);
            assert!(parse_tool_request(&frame(data), "s").is_err());
        }
        for bad in [json!(null), json!([]), json!("x")] {
            let mut data = good();
            data["arguments"] = bad;
            assert!(matches!(
                parse_tool_request(&frame(data), "s"),
                Err(FrameError::BadArguments { .. })
            ));
        }
        let mut data = good();
        data.as_object_mut().unwrap().remove("arguments");
        assert!(matches!(
            parse_tool_request(&frame(data), "s"),
            Err(FrameError::BadArguments { .. })
        ));
        assert!(matches!(
            parse_tool_request(&frame(good()), "other"),
            Err(FrameError::SessionMismatch { .. })
        ));
    }

    #[test]
    fn id_lengths_128_and_129_bytes() {
        let mut data = good();
        data["run_id"] = json!("r".repeat(MAX_ID_BYTES));
        assert!(parse_tool_request(&frame(data.clone()), "s").is_ok());
        data["run_id"] = json!("r".repeat(MAX_ID_BYTES + 1));
        assert_eq!(
            parse_tool_request(&frame(data), "s"),
            Err(FrameError::FieldTooLong {
                field: "run_id",
                bytes: MAX_ID_BYTES + 1,
                max: MAX_ID_BYTES
            })
        );
    }

    #[test]
    fn responses_echo_the_ids() {
        let req = parse_tool_request(&frame(good()), "s").unwrap();
        let ok: Value =
            serde_json::from_str(&succeeded(&req, "plan/read", json!({"revision": 0}))).unwrap();
        assert_eq!(
            ok,
            json!({"type": "tool_response", "data": {
                "worker_id": "w", "session_id": "s", "run_id": "r", "request_id": "q",
                "route": "plan/read", "status": "succeeded", "result": {"revision": 0}}})
        );
        let no: Value = serde_json::from_str(&rejected(
            &req,
            "x/y",
            code::NOT_IMPLEMENTED,
            "no such route",
        ))
        .unwrap();
        assert_eq!(no["data"]["status"], "rejected");
        assert_eq!(
            no["data"]["error"],
            json!({"code": "not_implemented", "message": "no such route"})
        );
        assert_eq!(no["data"]["request_id"], "q");
        assert!(no["data"].get("result").is_none());
    }

    #[test]
    fn never_panics_on_arbitrary_text() {
        let mut rng = crate::util::testkit::Rng::new(7);
        let pieces = [
            "{",
            "}",
            "\"type\"",
            ":",
            "\"tool_request\"",
            ",",
            "\"data\"",
            "\"worker_id\"",
            "\"s\"",
            "[",
            "]",
            "null",
            "1",
            "\"arguments\"",
            "\\",
            "\u{0}",
            "é",
        ];
        for _ in 0..2000 {
            let n = rng.below(24);
            let text: String = (0..n).map(|_| pieces[rng.below(pieces.len())]).collect();
            let _ = parse_tool_request(&text, "s");
            let _ = parse_route(&text);
        }
    }
}
