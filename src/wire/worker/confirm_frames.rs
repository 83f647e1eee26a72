//! The one-shot confirmation frames of a worker's confirmation socket:
//! parsing its `confirmation_request` (ids bounded, session matching the
//! route, a well-formed call) and building the `confirmation_response`
//! that echoes the four ids with the decision.
//!
//! Pure: no I/O, clock or locks. Never panics on any input.

use std::fmt;

use serde_json::{Map, Value};

use super::display::{describe, kind, quote};
use super::envelope::MAX_ID_BYTES;

/// One parsed `confirmation_request`.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfirmationRequest {
    pub worker_id: String,
    pub session_id: String,
    pub run_id: String,
    pub confirmation_id: String,
    /// The call object, untouched.
    pub call: Value,
}

/// Why a confirmation frame was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfirmFrameError {
    /// The text is not one JSON document.
    NotJson,
    /// The document is not a JSON object (a non-object `data` is
    /// `MissingField { field: "data" }`).
    NotObject,
    /// `type` is not `"confirmation_request"`.
    WrongType { found: String },
    /// A required field is missing, empty or of the wrong type.
    MissingField { field: &'static str },
    /// `data.session_id` names another session than the route.
    SessionMismatch { expected: String, found: String },
    /// An id is longer than [`MAX_ID_BYTES`].
    FieldTooLong {
        field: &'static str,
        bytes: usize,
        max: usize,
    },
    /// `call` is not an object with string `id` and `name`.
    BadCall { reason: String },
}

impl fmt::Display for ConfirmFrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotJson => write!(f, "confirmation frame is not valid JSON"),
            Self::NotObject => write!(f, "confirmation frame is not a JSON object"),
            Self::WrongType { found } => write!(
                f,
                "confirmation frame type is {found}, expected \"confirmation_request\""
            ),
            Self::MissingField { field } => write!(
                f,
                "confirmation frame has no {field} (or it is empty or of the wrong type)"
            ),
            Self::SessionMismatch { expected, found } => write!(
                f,
                "confirmation frame session_id {found} does not match the route's {expected}"
            ),
            Self::FieldTooLong { field, bytes, max } => write!(
                f,
                "confirmation frame {field} is {bytes} bytes, longer than the {max}-byte limit"
            ),
            Self::BadCall { reason } => write!(f, "confirmation frame call {reason}"),
        }
    }
}

impl std::error::Error for ConfirmFrameError {}

/// Parses the one `{"type":"confirmation_request","data":{worker_id,
/// session_id, run_id, confirmation_id, call}}` frame of a confirmation
/// socket on `/agent/<route_session>/confirm`. All four ids are non-empty
/// strings of at most [`MAX_ID_BYTES`]; `call` is an object with string
/// `id` and `name`. Unknown fields are ignored.
pub fn parse_confirmation_request(
    text: &str,
    route_session: &str,
) -> Result<ConfirmationRequest, ConfirmFrameError> {
    let value: Value = serde_json::from_str(text).map_err(|_| ConfirmFrameError::NotJson)?;
    let Value::Object(mut frame) = value else {
        return Err(ConfirmFrameError::NotObject);
    };
    match frame.get("type") {
        Some(Value::String(t)) if t == "confirmation_request" => {}
        Some(other) => {
            return Err(ConfirmFrameError::WrongType {
                found: describe(other),
            })
        }
        None => {
            return Err(ConfirmFrameError::WrongType {
                found: "missing".into(),
            })
        }
    }
    let Some(Value::Object(mut data)) = frame.remove("data") else {
        return Err(ConfirmFrameError::MissingField { field: "data" });
    };
    let id = |field: &'static str| -> Result<String, ConfirmFrameError> {
        match data.get(field) {
            Some(Value::String(s)) if !s.is_empty() => {
                if s.len() > MAX_ID_BYTES {
                    return Err(ConfirmFrameError::FieldTooLong {
                        field,
                        bytes: s.len(),
                        max: MAX_ID_BYTES,
                    });
                }
                Ok(s.clone())
            }
            _ => Err(ConfirmFrameError::MissingField { field }),
        }
    };
    let worker_id = id("worker_id")?;
    let session_id = id("session_id")?;
    let run_id = id("run_id")?;
    let confirmation_id = id("confirmation_id")?;
    if session_id != route_session {
        return Err(ConfirmFrameError::SessionMismatch {
            expected: quote(route_session),
            found: quote(&session_id),
        });
    }
    let call = data
        .remove("call")
        .ok_or(ConfirmFrameError::MissingField { field: "call" })?;
    let Value::Object(fields) = &call else {
        return Err(ConfirmFrameError::BadCall {
            reason: format!("must be an object, found {}", kind(&call)),
        });
    };
    for key in ["id", "name"] {
        match fields.get(key) {
            Some(Value::String(_)) => {}
            Some(other) => {
                return Err(ConfirmFrameError::BadCall {
                    reason: format!("{key} must be a string, found {}", kind(other)),
                })
            }
            None => {
                return Err(ConfirmFrameError::BadCall {
                    reason: format!("has no {key}"),
                })
            }
        }
    }
    Ok(ConfirmationRequest {
        worker_id,
        session_id,
        run_id,
        confirmation_id,
        call,
    })
}

/// `{"type":"confirmation_response","data":{the four ids unchanged,
/// "decision":"approved"|"denied","reason":...}}`; `reason` is omitted when
/// `None`. Never includes the call.
pub fn confirmation_response(
    req: &ConfirmationRequest,
    approved: bool,
    reason: Option<&str>,
) -> Value {
    let mut data = Map::new();
    data.insert("worker_id".into(), Value::from(req.worker_id.as_str()));
    data.insert("session_id".into(), Value::from(req.session_id.as_str()));
    data.insert("run_id".into(), Value::from(req.run_id.as_str()));
    data.insert(
        "confirmation_id".into(),
        Value::from(req.confirmation_id.as_str()),
    );
    data.insert(
        "decision".into(),
        Value::from(if approved { "approved" } else { "denied" }),
    );
    if let Some(reason) = reason {
        data.insert("reason".into(), Value::from(reason));
    }
    let mut frame = Map::new();
    frame.insert("type".into(), Value::from("confirmation_response"));
    frame.insert("data".into(), Value::Object(data));
    Value::Object(frame)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request_text(data: Value) -> String {
        json!({"type": "confirmation_request", "data": data}).to_string()
    }

    fn request_data() -> Value {
        json!({
            "worker_id": "204d23ea-0f10-4dbb-b2ef-613bc3f7852d",
            "session_id": "demo",
            "run_id": "fd473c9f-f424-4c5a-bcc7-eb39698674de",
            "confirmation_id": "573e354f-7c5d-4ca6-bf34-72b4a68597b2",
            "call": {
                "type": "serial_write", "security": "require_confirm", "id": "call-001",
                "name": "run_command", "arguments": {"command": "printf 'hello\\n'"},
                "extras": {"x": [1, 2]}
            }
        })
    }

    #[test]
    fn confirmation_request_round_trip() {
        let req = parse_confirmation_request(&request_text(request_data()), "demo").unwrap();
        assert_eq!(req.worker_id, "204d23ea-0f10-4dbb-b2ef-613bc3f7852d");
        assert_eq!(req.session_id, "demo");
        assert_eq!(req.run_id, "fd473c9f-f424-4c5a-bcc7-eb39698674de");
        assert_eq!(req.confirmation_id, "573e354f-7c5d-4ca6-bf34-72b4a68597b2");
        assert_eq!(req.call, request_data()["call"]);
        let resp = confirmation_response(&req, true, Some("Approved by the operator"));
        assert_eq!(
            resp.to_string(),
            concat!(
                r#"{"type":"confirmation_response","data":{"worker_id":"204d23ea-0f10-4dbb-b2ef-613bc3f7852d","#,
                r#""session_id":"demo","run_id":"fd473c9f-f424-4c5a-bcc7-eb39698674de","#,
                r#""confirmation_id":"573e354f-7c5d-4ca6-bf34-72b4a68597b2","decision":"approved","#,
                r#""reason":"Approved by the operator"}}"#
            )
        );
        let denied = confirmation_response(&req, false, None);
        assert_eq!(denied["data"]["decision"], json!("denied"));
        assert!(denied["data"].get("reason").is_none());
        assert!(denied["data"].get("call").is_none());
        assert_eq!(denied["data"].as_object().unwrap().len(), 5);
    }

    #[test]
    fn confirmation_request_rules() {
        let parse = |data: Value| parse_confirmation_request(&request_text(data), "demo");
        assert_eq!(
            parse_confirmation_request("nope", "demo"),
            Err(ConfirmFrameError::NotJson)
        );
        assert_eq!(
            parse_confirmation_request("[]", "demo"),
            Err(ConfirmFrameError::NotObject)
        );
        assert_eq!(
            parse_confirmation_request(r#"{"type":"confirmation_response","data":{}}"#, "demo"),
            Err(ConfirmFrameError::WrongType {
                found: "\"confirmation_response\"".into()
            })
        );
        assert_eq!(
            parse_confirmation_request(r#"{"data":{}}"#, "demo"),
            Err(ConfirmFrameError::WrongType {
                found: "missing".into()
            })
        );
        assert_eq!(
            parse(json!([])),
            Err(ConfirmFrameError::MissingField { field: "data" })
        );
        for field in [
            "worker_id",
            "session_id",
            "run_id",
            "confirmation_id",
            "call",
        ] {
            let mut data = request_data();
            data.as_object_mut().unwrap().shift_remove(field);
            assert_eq!(parse(data), Err(ConfirmFrameError::MissingField { field }));
        }
        for field in ["worker_id", "session_id", "run_id", "confirmation_id"] {
            for bad in [json!(""), json!(1), json!(null)] {
                let mut data = request_data();
                data[field] = bad;
                assert_eq!(parse(data), Err(ConfirmFrameError::MissingField { field }));
            }
            let ok = format!("{}é", "a".repeat(126));
            let mut data = request_data();
            data[field] = json!(ok);
            let route = if field == "session_id" {
                ok.as_str()
            } else {
                "demo"
            };
            assert!(parse_confirmation_request(&request_text(data), route).is_ok());
            let mut data = request_data();
            data[field] = json!(format!("{}€", "a".repeat(126)));
            assert_eq!(
                parse(data),
                Err(ConfirmFrameError::FieldTooLong {
                    field,
                    bytes: 129,
                    max: 128
                })
            );
        }
        let mut data = request_data();
        data["session_id"] = json!("other");
        assert_eq!(
            parse(data),
            Err(ConfirmFrameError::SessionMismatch {
                expected: "\"demo\"".into(),
                found: "\"other\"".into()
            })
        );
        let mut data = request_data();
        data["call"] = json!("run_command");
        assert_eq!(
            parse(data),
            Err(ConfirmFrameError::BadCall {
                reason: "must be an object, found string".into()
            })
        );
        for key in ["id", "name"] {
            let mut data = request_data();
            data["call"].as_object_mut().unwrap().shift_remove(key);
            assert_eq!(
                parse(data),
                Err(ConfirmFrameError::BadCall {
                    reason: format!("has no {key}")
                })
            );
            let mut data = request_data();
            data["call"][key] = json!(5);
            assert_eq!(
                parse(data).unwrap_err().to_string(),
                format!("confirmation frame call {key} must be a string, found number")
            );
        }
        // Unknown fields are ignored.
        let mut data = request_data();
        data["future"] = json!(true);
        assert!(parse(data).is_ok());
    }

    #[test]
    fn error_messages_are_lowercase_without_period() {
        let errors: Vec<Box<dyn std::error::Error>> = vec![
            Box::new(ConfirmFrameError::NotJson),
            Box::new(ConfirmFrameError::MissingField { field: "run_id" }),
        ];
        for e in errors {
            let s = e.to_string();
            assert!(s.starts_with(|c: char| c.is_ascii_lowercase()), "{s}");
            assert!(!s.ends_with('.'), "{s}");
        }
    }
}
