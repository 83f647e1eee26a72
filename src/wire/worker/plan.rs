//! The session plan routes' arguments (pure): `plan/read` takes nothing
//! but an optional `operation: "read"`; `plan/replace` takes `markdown`,
//! at most [`MAX_PLAN_BYTES`] of UTF-8, blank or whitespace-only meaning
//! "clear". The hub's side effects live in `Services::replace_plan`; the socket
//! thread is `worker::tools`.

use serde_json::{json, Map, Value};

use super::display::{kind, quote};

/// A session's plan. Revision 0 with empty markdown means "no plan yet".
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PlanRecord {
    pub markdown: String,
    pub revision: u64,
    pub updated_at: Option<String>,
}

/// Largest plan text, in UTF-8 bytes.
pub const MAX_PLAN_BYTES: usize = 64 * 1024;

/// Largest plan text once JSON-escaped, so a `plan/read` response always
/// fits the 256 KiB response ceiling (control characters escape to six
/// bytes each, so 64 KiB of them would not).
pub const MAX_PLAN_ENCODED_BYTES: usize = 200 * 1024;

/// The plan routes.
pub const READ: &str = "plan/read";
pub const REPLACE: &str = "plan/replace";

/// One validated plan call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanCall {
    Read,
    /// The normalized text: blank input is already `""`.
    Replace {
        markdown: String,
    },
}

pub use super::route_args::ArgError;

/// Whether `route` is one of the plan routes.
pub fn is_plan_route(route: &str) -> bool {
    route == READ || route == REPLACE
}

/// Validates the arguments of a plan route; `None` for any other route.
pub fn parse_call(
    route: &str,
    arguments: &Map<String, Value>,
) -> Option<Result<PlanCall, ArgError>> {
    match route {
        READ => Some(parse_read(arguments)),
        REPLACE => Some(parse_replace(arguments)),
        _ => None,
    }
}

/// `operation`, when present, must name the route's own operation.
fn check_operation(arguments: &Map<String, Value>, expected: &'static str) -> Result<(), ArgError> {
    match arguments.get("operation") {
        None => Ok(()),
        Some(Value::String(op)) if op == expected => Ok(()),
        Some(other) => Err(ArgError::Invalid {
            field: "operation",
            expected: if expected == "read" {
                "\"read\""
            } else {
                "\"replace\""
            },
            found: found(other),
        }),
    }
}

fn parse_read(arguments: &Map<String, Value>) -> Result<PlanCall, ArgError> {
    if let Some(key) = arguments.keys().find(|k| *k != "operation") {
        return Err(ArgError::Unknown {
            route: READ,
            key: key.clone(),
        });
    }
    check_operation(arguments, "read")?;
    Ok(PlanCall::Read)
}

fn parse_replace(arguments: &Map<String, Value>) -> Result<PlanCall, ArgError> {
    if let Some(key) = arguments
        .keys()
        .find(|k| *k != "operation" && *k != "markdown")
    {
        return Err(ArgError::Unknown {
            route: REPLACE,
            key: key.clone(),
        });
    }
    check_operation(arguments, "replace")?;
    let markdown = match arguments.get("markdown") {
        None => return Err(ArgError::Missing { field: "markdown" }),
        Some(Value::String(text)) => text,
        Some(other) => {
            return Err(ArgError::Invalid {
                field: "markdown",
                expected: "a string",
                found: found(other),
            })
        }
    };
    if markdown.len() > MAX_PLAN_BYTES {
        return Err(ArgError::TooLarge {
            subject: "markdown",
            bytes: markdown.len(),
            max: MAX_PLAN_BYTES,
        });
    }
    let encoded = Value::String(markdown.clone()).to_string().len();
    if encoded > MAX_PLAN_ENCODED_BYTES {
        return Err(ArgError::TooLarge {
            subject: "markdown, JSON-escaped,",
            bytes: encoded,
            max: MAX_PLAN_ENCODED_BYTES,
        });
    }
    Ok(PlanCall::Replace {
        markdown: normalize(markdown),
    })
}

/// Blank or whitespace-only text clears the plan; anything else is kept
/// exactly as written.
pub fn normalize(markdown: &str) -> String {
    if markdown.trim().is_empty() {
        String::new()
    } else {
        markdown.to_string()
    }
}

/// The `plan/read` result.
pub fn read_result(plan: &PlanRecord) -> Value {
    json!({"markdown": plan.markdown, "revision": plan.revision, "updated_at": plan.updated_at})
}

/// The `plan/replace` result.
pub fn replace_result(plan: &PlanRecord, changed: bool) -> Value {
    json!({"revision": plan.revision, "updated_at": plan.updated_at, "changed": changed})
}

fn found(v: &Value) -> String {
    match v {
        Value::String(s) => quote(s),
        other => kind(other).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn read_takes_only_its_operation() {
        assert_eq!(parse_call(READ, &args(json!({}))), Some(Ok(PlanCall::Read)));
        assert_eq!(
            parse_call(READ, &args(json!({"operation": "read"}))),
            Some(Ok(PlanCall::Read))
        );
        for bad in [
            json!({"markdown": "x"}),
            json!({"operation": "replace"}),
            json!({"operation": 1}),
            json!({"other": null}),
        ] {
            assert!(
                matches!(parse_call(READ, &args(bad.clone())), Some(Err(_))),
                "{bad}"
            );
        }
        assert_eq!(
            parse_call(READ, &args(json!({"markdown": "x"}))),
            Some(Err(ArgError::Unknown {
                route: READ,
                key: "markdown".into()
            }))
        );
    }

    #[test]
    fn replace_needs_a_bounded_string() {
        assert_eq!(
            parse_call(REPLACE, &args(json!({"markdown": "# plan\n- a"}))),
            Some(Ok(PlanCall::Replace {
                markdown: "# plan\n- a".into()
            }))
        );
        assert_eq!(
            parse_call(
                REPLACE,
                &args(json!({"markdown": "  x  ", "operation": "replace"}))
            ),
            Some(Ok(PlanCall::Replace {
                markdown: "  x  ".into()
            }))
        );
        for blank in ["", "   ", "\n\t \r\n"] {
            assert_eq!(
                parse_call(REPLACE, &args(json!({ "markdown": blank }))),
                Some(Ok(PlanCall::Replace {
                    markdown: String::new()
                }))
            );
        }
        assert_eq!(
            parse_call(REPLACE, &args(json!({}))),
            Some(Err(ArgError::Missing { field: "markdown" }))
        );
        for bad in [
            json!({"markdown": 5}),
            json!({"markdown": null}),
            json!({"markdown": ["x"]}),
            json!({"markdown": "x", "extra": 1}),
            json!({"markdown": "x", "operation": "read"}),
        ] {
            assert!(
                matches!(parse_call(REPLACE, &args(bad.clone())), Some(Err(_))),
                "{bad}"
            );
        }
        let limit = "é".repeat(MAX_PLAN_BYTES / 2);
        assert!(matches!(
            parse_call(REPLACE, &args(json!({ "markdown": limit }))),
            Some(Ok(_))
        ));
        let over = "x".repeat(MAX_PLAN_BYTES + 1);
        assert_eq!(
            parse_call(REPLACE, &args(json!({ "markdown": over }))),
            Some(Err(ArgError::TooLarge {
                subject: "markdown",
                bytes: MAX_PLAN_BYTES + 1,
                max: MAX_PLAN_BYTES
            }))
        );
        // Within the byte limit, but its encoding would not fit a response.
        let controls = "\u{1}".repeat(MAX_PLAN_BYTES);
        assert!(matches!(
            parse_call(REPLACE, &args(json!({ "markdown": controls }))),
            Some(Err(ArgError::TooLarge { .. }))
        ));
    }

    #[test]
    fn other_routes_are_not_plan_calls() {
        assert_eq!(parse_call("plan/delete", &Map::new()), None);
        assert!(is_plan_route(READ) && is_plan_route(REPLACE));
        assert!(!is_plan_route("plan"));
    }

    #[test]
    fn results_have_the_protocol_shape() {
        let plan = PlanRecord {
            markdown: "m".into(),
            revision: 3,
            updated_at: Some("t".into()),
        };
        assert_eq!(
            read_result(&plan),
            json!({"markdown": "m", "revision": 3, "updated_at": "t"})
        );
        assert_eq!(
            replace_result(&PlanRecord::default(), false),
            json!({"revision": 0, "updated_at": null, "changed": false})
        );
    }
}
