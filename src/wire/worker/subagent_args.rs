//! The `subagent/*` remote-tool routes' arguments (pure): the grammar of
//! `subagent/clean-fork`, `subagent/receive` and `subagent/send` (seed 003,
//! "Remote routes" and "Complete child answers"), the 64 KiB argument
//! limit, generated child ids, and the canonical route + arguments hash
//! that keys mutation receipts. No I/O, clock, locks or hub types; the
//! routes' side effects live elsewhere.
//!
//! Every refusal is `invalid_arguments` ([`ArgError::code`]), including an
//! argument object over [`MAX_ARGUMENT_BYTES`]: the seed lists no code for
//! that case, `limit_exceeded` is the quota refusal, and an oversized
//! object is a malformed call, not an exhausted resource.

use serde_json::{Map, Value};

use super::answer::{self as query, SourceProblem, ANSWER_FIELDS};
use super::display::{describe, kind, quote};
use super::payload::{validate_content, validate_options};
use crate::wire::{sha256, sorted_json};

/// The subagent routes.
pub const CLEAN_FORK: &str = "subagent/clean-fork";
pub const RECEIVE: &str = "subagent/receive";
pub const SEND: &str = "subagent/send";

/// Largest argument object, as compact serialized UTF-8 bytes.
pub const MAX_ARGUMENT_BYTES: usize = 64 * 1024;

/// What [`MAX_ARGUMENT_BYTES`] measures, in refusals.
const ARGUMENTS_SUBJECT: &str = "the argument object, serialized as UTF-8,";

/// Default and largest `limit` of a conversation page.
pub const DEFAULT_LIMIT: usize = 5;
pub const MAX_LIMIT: usize = 10;

/// Generated child ids are this prefix followed by a canonical lowercase
/// UUID v4.
pub const SUBAGENT_ID_PREFIX: &str = "subagent-";

/// One validated subagent call.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    /// `subagent/clean-fork` with `{}`.
    CleanFork,
    /// `subagent/receive` with `{}`: the caller's direct children.
    List,
    /// `subagent/receive` with `subagent_id` and optional `cursor`/`limit`.
    Inspect {
        subagent_id: String,
        cursor: usize,
        limit: usize,
    },
    /// `subagent/receive` with `subagent_id` and `answer`; `source` is the
    /// object as given (its five fields checked).
    Answer {
        subagent_id: String,
        source: Value,
        part: u64,
        offset: u64,
    },
    /// `subagent/send`.
    Send { subagent_id: String, op: SendOp },
}

/// A `subagent/send` operation. `content` and `options` are the argument
/// values as given (validated).
#[derive(Debug, Clone, PartialEq)]
pub enum SendOp {
    Message {
        content: Value,
        options: Option<Value>,
    },
    Continue {
        options: Option<Value>,
    },
    Compact {
        options: Option<Value>,
    },
    Stop,
}

impl SendOp {
    /// The `operation` argument naming this operation.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Message { .. } => "message",
            Self::Continue { .. } => "continue",
            Self::Compact { .. } => "compact",
            Self::Stop => "stop",
        }
    }

    /// The validated `options`, if any (never for `stop`).
    pub fn options(&self) -> Option<&Value> {
        match self {
            Self::Message { options, .. }
            | Self::Continue { options }
            | Self::Compact { options } => options.as_ref(),
            Self::Stop => None,
        }
    }
}

pub use super::route_args::ArgError;

/// Whether `route` is one of the subagent routes.
pub fn is_subagent_route(route: &str) -> bool {
    matches!(route, CLEAN_FORK | RECEIVE | SEND)
}

/// Whether `id` is a generated child id: [`SUBAGENT_ID_PREFIX`] and a
/// canonical (lowercase, hyphenated) UUID version 4, RFC 4122 variant.
pub fn is_subagent_id(id: &str) -> bool {
    let Some(uuid) = id.strip_prefix(SUBAGENT_ID_PREFIX) else {
        return false;
    };
    let bytes = uuid.as_bytes();
    if bytes.len() != 36 {
        return false;
    }
    for (i, &b) in bytes.iter().enumerate() {
        let ok = match i {
            8 | 13 | 18 | 23 => b == b'-',
            14 => b == b'4',
            19 => matches!(b, b'8' | b'9' | b'a' | b'b'),
            _ => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
        };
        if !ok {
            return false;
        }
    }
    true
}

/// Validates the arguments of a subagent route; `None` for any other route.
pub fn parse_call(route: &str, arguments: &Value) -> Option<Result<Call, ArgError>> {
    let route: &'static str = match route {
        CLEAN_FORK => CLEAN_FORK,
        RECEIVE => RECEIVE,
        SEND => SEND,
        _ => return None,
    };
    Some(parse(route, arguments))
}

fn parse(route: &'static str, arguments: &Value) -> Result<Call, ArgError> {
    let Value::Object(args) = arguments else {
        return Err(ArgError::NotAnObject {
            found: kind(arguments),
        });
    };
    let bytes = super::display::encoded_len(arguments);
    if bytes > MAX_ARGUMENT_BYTES {
        return Err(ArgError::TooLarge {
            subject: ARGUMENTS_SUBJECT,
            bytes,
            max: MAX_ARGUMENT_BYTES,
        });
    }
    match route {
        CLEAN_FORK => {
            only_keys(route, args, &[], "")?;
            Ok(Call::CleanFork)
        }
        RECEIVE => parse_receive(args),
        _ => parse_send(args),
    }
}

/// Refuses the first key of `map` not in `allowed`; `prefix` is prepended
/// to nested keys in the message (`"answer."`).
fn only_keys(
    route: &'static str,
    map: &Map<String, Value>,
    allowed: &[&str],
    prefix: &str,
) -> Result<(), ArgError> {
    match map.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(ArgError::Unknown {
            route,
            key: format!("{prefix}{key}"),
        }),
        None => Ok(()),
    }
}

fn found(v: &Value) -> String {
    match v {
        Value::String(s) => quote(s),
        other => describe(other),
    }
}

fn invalid(field: &'static str, expected: &'static str, v: &Value) -> ArgError {
    ArgError::Invalid {
        field,
        expected,
        found: found(v),
    }
}

/// A non-negative integer (never a float, string or negative number).
fn unsigned(field: &'static str, v: &Value) -> Result<u64, ArgError> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .ok_or_else(|| invalid(field, "an integer >= 0", v)),
        _ => Err(invalid(field, "an integer >= 0", v)),
    }
}

fn subagent_id(args: &Map<String, Value>) -> Result<String, ArgError> {
    match args.get("subagent_id") {
        None => Err(ArgError::Missing {
            field: "subagent_id",
        }),
        Some(Value::String(id)) if is_subagent_id(id) => Ok(id.clone()),
        Some(other) => Err(invalid(
            "subagent_id",
            "a generated child id (subagent-<lowercase UUID v4>)",
            other,
        )),
    }
}

fn parse_receive(args: &Map<String, Value>) -> Result<Call, ArgError> {
    only_keys(
        RECEIVE,
        args,
        &["subagent_id", "cursor", "limit", "answer"],
        "",
    )?;
    if args.is_empty() {
        return Ok(Call::List);
    }
    let subagent_id = subagent_id(args)?;
    if let Some(answer) = args.get("answer") {
        if let Some(other) = ["cursor", "limit"]
            .into_iter()
            .find(|k| args.contains_key(*k))
        {
            return Err(ArgError::Conflict {
                field: "answer",
                other,
            });
        }
        return parse_answer(subagent_id, answer);
    }
    let cursor = match args.get("cursor") {
        None => 0,
        Some(v) => {
            let n = unsigned("cursor", v)?;
            usize::try_from(n).map_err(|_| invalid("cursor", "an integer >= 0", v))?
        }
    };
    let limit = match args.get("limit") {
        None => DEFAULT_LIMIT,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=MAX_LIMIT as u64).contains(&n) => n as usize,
            _ => return Err(invalid("limit", "an integer from 1 to 10", v)),
        },
    };
    Ok(Call::Inspect {
        subagent_id,
        cursor,
        limit,
    })
}

fn parse_answer(subagent_id: String, answer: &Value) -> Result<Call, ArgError> {
    let Value::Object(fields) = answer else {
        return Err(invalid(
            "answer",
            "an object {source, part, offset}",
            answer,
        ));
    };
    only_keys(RECEIVE, fields, ANSWER_FIELDS, "answer.")?;
    let source = fields.get("source").ok_or(ArgError::Missing {
        field: "answer.source",
    })?;
    check_source(source)?;
    let part = fields
        .get("part")
        .map_or(Ok(0), |v| unsigned("answer.part", v))?;
    let offset = fields
        .get("offset")
        .map_or(Ok(0), |v| unsigned("answer.offset", v))?;
    Ok(Call::Answer {
        subagent_id,
        source: source.clone(),
        part,
        offset,
    })
}

/// An answer source, by the rules every answer request shares
/// ([`query::check_source`]), its problem named as the argument
/// `answer.source[.<field>]`.
fn check_source(source: &Value) -> Result<(), ArgError> {
    query::check_source(source).map_err(|problem| match problem {
        SourceProblem::NotAnObject => invalid(
            "answer.source",
            "an object with worker_id, turn, step, commit_sequence and fingerprint",
            source,
        ),
        SourceProblem::Unknown(key) => ArgError::Unknown {
            route: RECEIVE,
            key: format!("answer.source.{key}"),
        },
        SourceProblem::Missing(field) => ArgError::Missing {
            field: source_field(field),
        },
        SourceProblem::Invalid { field, expected } => invalid(
            source_field(field),
            expected,
            source.get(field).unwrap_or(&Value::Null),
        ),
    })
}

/// The argument name of a source field.
fn source_field(field: &str) -> &'static str {
    match field {
        "worker_id" => "answer.source.worker_id",
        "turn" => "answer.source.turn",
        "step" => "answer.source.step",
        "commit_sequence" => "answer.source.commit_sequence",
        "fingerprint" => "answer.source.fingerprint",
        _ => "answer.source",
    }
}

fn parse_send(args: &Map<String, Value>) -> Result<Call, ArgError> {
    only_keys(
        SEND,
        args,
        &["subagent_id", "operation", "content", "options"],
        "",
    )?;
    let subagent_id = subagent_id(args)?;
    let operation: &'static str = match args.get("operation") {
        None => return Err(ArgError::Missing { field: "operation" }),
        Some(Value::String(op)) => match op.as_str() {
            "message" => "message",
            "continue" => "continue",
            "compact" => "compact",
            "stop" => "stop",
            _ => {
                return Err(invalid(
                    "operation",
                    "message, continue, compact or stop",
                    &Value::String(op.clone()),
                ))
            }
        },
        Some(other) => {
            return Err(invalid(
                "operation",
                "message, continue, compact or stop",
                other,
            ))
        }
    };
    if operation != "message" && args.contains_key("content") {
        return Err(ArgError::Forbidden {
            field: "content",
            operation,
        });
    }
    if operation == "stop" && args.contains_key("options") {
        return Err(ArgError::Forbidden {
            field: "options",
            operation,
        });
    }
    let options = args.get("options").map(check_options).transpose()?;
    let op = match operation {
        "message" => {
            let content = args
                .get("content")
                .ok_or(ArgError::Missing { field: "content" })?;
            validate_content(content).map_err(|error| ArgError::Payload {
                field: "content",
                error,
            })?;
            SendOp::Message {
                content: content.clone(),
                options,
            }
        }
        "continue" => SendOp::Continue { options },
        "compact" => SendOp::Compact { options },
        _ => SendOp::Stop,
    };
    Ok(Call::Send { subagent_id, op })
}

/// `options`: an object with optional `model` (object) and `tools` (exactly
/// `{}`); `confirmation` is refused by name, anything else as unknown.
fn check_options(options: &Value) -> Result<Value, ArgError> {
    let Value::Object(categories) = options else {
        return Err(invalid(
            "options",
            "an object with optional model and tools",
            options,
        ));
    };
    if categories.contains_key("confirmation") {
        return Err(ArgError::ConfirmationForbidden);
    }
    only_keys(SEND, categories, &["model", "tools"], "options.")?;
    validate_options(options).map_err(|error| ArgError::Payload {
        field: "options",
        error,
    })?;
    Ok(options.clone())
}

/// The canonical receipt hash of a call: SHA-256 (lowercase hex) over a
/// domain tag, the route and the arguments as compact JSON with every
/// object's keys sorted by their UTF-8 bytes, at every depth. Objects that
/// differ only in key order hash equal; any other change, or another
/// route, changes the hash. Works on any value, however deep (no
/// recursion).
pub fn receipt_hash(route: &str, arguments: &Value) -> String {
    let mut hasher = sha256::Sha256::new();
    hasher.update(b"simplex-hub/subagent-receipt/1\0");
    hasher.update(route.as_bytes());
    hasher.update(b"\0");
    sorted_json::write(arguments, &mut |bytes| hasher.update(bytes));
    hasher.finish_hex()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ID: &str = "subagent-12345678-1234-4123-8123-123456789abc";

    fn text(raw: &str) -> Value {
        json!([{"type": "text", "modality": "text", "raw": raw}])
    }

    fn source() -> Value {
        json!({
            "worker_id": "w-1", "turn": 0, "step": 1,
            "commit_sequence": "2", "fingerprint": "ab".repeat(32),
        })
    }

    fn err(route: &str, args: Value) -> ArgError {
        match parse_call(route, &args) {
            Some(Err(e)) => {
                assert_eq!(e.code(), "invalid_arguments");
                assert!(!e.to_string().is_empty());
                e
            }
            other => panic!("{route} {args}: expected an error, got {other:?}"),
        }
    }

    fn ok(route: &str, args: Value) -> Call {
        match parse_call(route, &args) {
            Some(Ok(call)) => call,
            other => panic!("{route} {args}: expected a call, got {other:?}"),
        }
    }

    #[test]
    fn routes_are_recognized() {
        for route in [CLEAN_FORK, RECEIVE, SEND] {
            assert!(is_subagent_route(route));
        }
        for route in [
            "subagent/stop",
            "subagent",
            "plan/read",
            "subagent/receive/",
        ] {
            assert!(!is_subagent_route(route));
            assert_eq!(parse_call(route, &json!({})), None);
        }
    }

    #[test]
    fn arguments_must_be_an_object() {
        for route in [CLEAN_FORK, RECEIVE, SEND] {
            for bad in [json!(null), json!([]), json!("x"), json!(1)] {
                assert!(matches!(err(route, bad), ArgError::NotAnObject { .. }));
            }
        }
    }

    #[test]
    fn clean_fork_takes_nothing() {
        assert_eq!(ok(CLEAN_FORK, json!({})), Call::CleanFork);
        for key in ["subagent_id", "operation", "x", "config"] {
            assert_eq!(
                err(CLEAN_FORK, json!({ key: null })),
                ArgError::Unknown {
                    route: CLEAN_FORK,
                    key: key.into()
                }
            );
        }
    }

    #[test]
    fn child_ids_are_canonical_uuid_v4() {
        assert!(is_subagent_id(ID));
        for bad in [
            "",
            "subagent-",
            "12345678-1234-4123-8123-123456789abc",
            "subagent-12345678-1234-4123-8123-123456789ABC",
            "subagent-12345678-1234-1123-8123-123456789abc",
            "subagent-12345678-1234-4123-c123-123456789abc",
            "subagent-12345678123441238123123456789abc",
            "subagent-{12345678-1234-4123-8123-123456789abc}",
            "subagent-12345678-1234-4123-8123-123456789abcd",
            "subagent-12345678-1234-4123-8123-123456789abg",
            "Subagent-12345678-1234-4123-8123-123456789abc",
            "subagent-12345678_1234-4123-8123-123456789abc",
        ] {
            assert!(!is_subagent_id(bad), "{bad}");
            assert!(matches!(
                err(RECEIVE, json!({ "subagent_id": bad })),
                ArgError::Invalid {
                    field: "subagent_id",
                    ..
                }
            ));
        }
        let generated = format!("subagent-{}", uuid::Uuid::new_v4());
        assert!(is_subagent_id(&generated));
        assert!(matches!(
            err(RECEIVE, json!({"subagent_id": 5})),
            ArgError::Invalid {
                field: "subagent_id",
                ..
            }
        ));
    }

    #[test]
    fn receive_lists_or_inspects() {
        assert_eq!(ok(RECEIVE, json!({})), Call::List);
        assert_eq!(
            ok(RECEIVE, json!({ "subagent_id": ID })),
            Call::Inspect {
                subagent_id: ID.into(),
                cursor: 0,
                limit: 5
            }
        );
        assert_eq!(
            ok(
                RECEIVE,
                json!({"subagent_id": ID, "cursor": 7, "limit": 10})
            ),
            Call::Inspect {
                subagent_id: ID.into(),
                cursor: 7,
                limit: 10
            }
        );
        for key in ["operation", "request", "content", "x"] {
            assert_eq!(
                err(RECEIVE, json!({"subagent_id": ID, key: 1})),
                ArgError::Unknown {
                    route: RECEIVE,
                    key: key.into()
                }
            );
        }
        for partial in [
            json!({"cursor": 0}),
            json!({"limit": 1}),
            json!({"answer": {}}),
        ] {
            assert_eq!(
                err(RECEIVE, partial),
                ArgError::Missing {
                    field: "subagent_id"
                }
            );
        }
    }

    #[test]
    fn receive_limits_and_cursors() {
        for (limit, good) in [(0, false), (1, true), (5, true), (10, true), (11, false)] {
            let args = json!({"subagent_id": ID, "limit": limit});
            match parse_call(RECEIVE, &args) {
                Some(Ok(Call::Inspect { limit: l, .. })) => {
                    assert!(good, "{limit}");
                    assert_eq!(l, limit);
                }
                Some(Err(ArgError::Invalid { field: "limit", .. })) => assert!(!good, "{limit}"),
                other => panic!("{other:?}"),
            }
        }
        for bad in [
            json!(-1),
            json!(1.5),
            json!(2.0),
            json!("3"),
            json!(null),
            json!(true),
        ] {
            assert!(matches!(
                err(RECEIVE, json!({"subagent_id": ID, "limit": bad})),
                ArgError::Invalid { field: "limit", .. }
            ));
            assert!(matches!(
                err(RECEIVE, json!({"subagent_id": ID, "cursor": bad})),
                ArgError::Invalid {
                    field: "cursor",
                    ..
                }
            ));
        }
        assert!(matches!(
            ok(RECEIVE, json!({"subagent_id": ID, "cursor": 0})),
            Call::Inspect { cursor: 0, .. }
        ));
    }

    #[test]
    fn receive_answer_pages() {
        let call = ok(
            RECEIVE,
            json!({"subagent_id": ID, "answer": {"source": source(), "part": 1, "offset": 32768}}),
        );
        assert_eq!(
            call,
            Call::Answer {
                subagent_id: ID.into(),
                source: source(),
                part: 1,
                offset: 32768
            }
        );
        // part and offset default to the first page.
        assert!(matches!(
            ok(
                RECEIVE,
                json!({"subagent_id": ID, "answer": {"source": source()}})
            ),
            Call::Answer {
                part: 0,
                offset: 0,
                ..
            }
        ));
        // An integer commit sequence is accepted as well as its string.
        let mut numeric = source();
        numeric["commit_sequence"] = json!(2);
        assert!(matches!(
            ok(
                RECEIVE,
                json!({"subagent_id": ID, "answer": {"source": numeric}})
            ),
            Call::Answer { .. }
        ));
        for (key, other) in [("cursor", 0), ("limit", 5)] {
            assert_eq!(
                err(
                    RECEIVE,
                    json!({"subagent_id": ID, "answer": {"source": source()}, key: other})
                ),
                ArgError::Conflict {
                    field: "answer",
                    other: if key == "cursor" { "cursor" } else { "limit" }
                }
            );
        }
        assert!(matches!(
            err(RECEIVE, json!({"subagent_id": ID, "answer": "x"})),
            ArgError::Invalid {
                field: "answer",
                ..
            }
        ));
        assert_eq!(
            err(RECEIVE, json!({"subagent_id": ID, "answer": {"part": 0}})),
            ArgError::Missing {
                field: "answer.source"
            }
        );
        assert_eq!(
            err(
                RECEIVE,
                json!({"subagent_id": ID, "answer": {"source": source(), "cursor": 1}})
            ),
            ArgError::Unknown {
                route: RECEIVE,
                key: "answer.cursor".into()
            }
        );
        for (field, bad) in [
            ("part", json!(-1)),
            ("offset", json!(0.5)),
            ("part", json!("0")),
        ] {
            let mut answer = json!({"source": source()});
            answer[field] = bad;
            assert!(matches!(
                err(RECEIVE, json!({"subagent_id": ID, "answer": answer})),
                ArgError::Invalid { .. }
            ));
        }
    }

    /// The source rules are `wire::worker::answer::check_source`'s (tested
    /// there); each of its problems maps to an argument error here.
    #[test]
    fn answer_source_problems_name_the_argument() {
        let refused = |source: Value| {
            err(
                RECEIVE,
                json!({"subagent_id": ID, "answer": {"source": source}}),
            )
        };
        for name in crate::wire::worker::payload::SOURCE_FIELDS {
            let mut incomplete = source();
            incomplete.as_object_mut().unwrap().remove(*name);
            match refused(incomplete) {
                ArgError::Missing { field } => assert_eq!(field, format!("answer.source.{name}")),
                other => panic!("{name}: {other:?}"),
            }
            let mut wrong = source();
            wrong[*name] = json!(null);
            match refused(wrong) {
                ArgError::Invalid { field, found, .. } => {
                    assert_eq!(field, format!("answer.source.{name}"));
                    assert_eq!(found, "null");
                }
                other => panic!("{name}: {other:?}"),
            }
        }
        let mut wrong = source();
        wrong["commit_sequence"] = json!("2a");
        assert_eq!(
            refused(wrong),
            ArgError::Invalid {
                field: "answer.source.commit_sequence",
                expected: "an integer >= 0 or its decimal string",
                found: "\"2a\"".into()
            }
        );
        let mut extra = source();
        extra["path"] = json!("/etc");
        assert_eq!(
            refused(extra),
            ArgError::Unknown {
                route: RECEIVE,
                key: "answer.source.path".into()
            }
        );
        assert!(matches!(
            refused(json!([])),
            ArgError::Invalid {
                field: "answer.source",
                ..
            }
        ));
    }

    #[test]
    fn send_operations() {
        assert_eq!(
            ok(
                SEND,
                json!({"subagent_id": ID, "operation": "message", "content": text("hi")})
            ),
            Call::Send {
                subagent_id: ID.into(),
                op: SendOp::Message {
                    content: text("hi"),
                    options: None
                }
            }
        );
        let options = json!({"model": {"model": "m", "reasoning_effort": "low"}, "tools": {}});
        let call = ok(
            SEND,
            json!({"subagent_id": ID, "operation": "message", "content": text("hi"), "options": options}),
        );
        let Call::Send { op, .. } = call else {
            panic!()
        };
        assert_eq!(op.name(), "message");
        assert_eq!(op.options(), Some(&options));
        for (name, expected) in [
            ("continue", SendOp::Continue { options: None }),
            ("compact", SendOp::Compact { options: None }),
            ("stop", SendOp::Stop),
        ] {
            let Call::Send { op, .. } = ok(SEND, json!({"subagent_id": ID, "operation": name}))
            else {
                panic!()
            };
            assert_eq!(op, expected);
            assert_eq!(op.name(), name);
        }
        let Call::Send { op, .. } = ok(
            SEND,
            json!({"subagent_id": ID, "operation": "compact", "options": {}}),
        ) else {
            panic!()
        };
        assert_eq!(
            op,
            SendOp::Compact {
                options: Some(json!({}))
            }
        );
        assert_eq!(SendOp::Stop.options(), None);
    }

    #[test]
    fn send_refusals() {
        for key in ["request", "request_id", "text", "x", "cursor"] {
            assert_eq!(
                err(
                    SEND,
                    json!({"subagent_id": ID, "operation": "message", "content": text("a"), key: 1})
                ),
                ArgError::Unknown {
                    route: SEND,
                    key: key.into()
                }
            );
        }
        assert_eq!(
            err(SEND, json!({"operation": "stop"})),
            ArgError::Missing {
                field: "subagent_id"
            }
        );
        assert_eq!(
            err(SEND, json!({ "subagent_id": ID })),
            ArgError::Missing { field: "operation" }
        );
        for op in [
            json!("history"),
            json!("answer"),
            json!("Message"),
            json!(1),
        ] {
            assert!(matches!(
                err(SEND, json!({"subagent_id": ID, "operation": op})),
                ArgError::Invalid {
                    field: "operation",
                    ..
                }
            ));
        }
        assert_eq!(
            err(SEND, json!({"subagent_id": ID, "operation": "message"})),
            ArgError::Missing { field: "content" }
        );
        for content in [
            json!(null),
            json!([]),
            json!("hi"),
            json!([{"type": "text"}]),
        ] {
            assert!(matches!(
                err(
                    SEND,
                    json!({"subagent_id": ID, "operation": "message", "content": content})
                ),
                ArgError::Payload {
                    field: "content",
                    ..
                }
            ));
        }
        for op in ["continue", "compact", "stop"] {
            for content in [json!(null), json!([]), text("x")] {
                assert_eq!(
                    err(
                        SEND,
                        json!({"subagent_id": ID, "operation": op, "content": content})
                    ),
                    ArgError::Forbidden {
                        field: "content",
                        operation: op_name(op)
                    }
                );
            }
        }
        for options in [json!({}), json!(null)] {
            assert_eq!(
                err(
                    SEND,
                    json!({"subagent_id": ID, "operation": "stop", "options": options})
                ),
                ArgError::Forbidden {
                    field: "options",
                    operation: "stop"
                }
            );
        }
    }

    fn op_name(op: &str) -> &'static str {
        match op {
            "continue" => "continue",
            "compact" => "compact",
            _ => "stop",
        }
    }

    #[test]
    fn send_options() {
        let send = |options: Value| {
            parse_call(
                SEND,
                &json!({"subagent_id": ID, "operation": "continue", "options": options}),
            )
            .unwrap()
        };
        assert!(send(json!({"model": {}})).is_ok());
        assert!(send(json!({"tools": {}})).is_ok());
        for confirmation in [json!({"mode": "approve"}), json!({}), json!(null)] {
            let e = send(json!({ "confirmation": confirmation })).unwrap_err();
            assert_eq!(e, ArgError::ConfirmationForbidden);
            assert!(e.to_string().contains("confirmation is forbidden"));
        }
        assert_eq!(
            send(json!({"model": {}, "confirmation": {"mode": "ask"}})).unwrap_err(),
            ArgError::ConfirmationForbidden
        );
        assert!(matches!(
            send(json!({"tools": {"shell": true}})).unwrap_err(),
            ArgError::Payload {
                field: "options",
                ..
            }
        ));
        assert!(matches!(
            send(json!({"model": "fast"})).unwrap_err(),
            ArgError::Payload {
                field: "options",
                ..
            }
        ));
        assert_eq!(
            send(json!({"budget": {}})).unwrap_err(),
            ArgError::Unknown {
                route: SEND,
                key: "options.budget".into()
            }
        );
        for bad in [json!(null), json!([]), json!("x")] {
            assert!(matches!(
                send(bad).unwrap_err(),
                ArgError::Invalid {
                    field: "options",
                    ..
                }
            ));
        }
    }

    /// A message whose serialized arguments are exactly `bytes` long.
    fn message_of_size(bytes: usize) -> Value {
        let mut args = json!({"subagent_id": ID, "operation": "message", "content": text("")});
        let base = crate::wire::worker::display::encoded_len(&args);
        args["content"][0]["raw"] =
            json!("é".repeat((bytes - base) / 2) + &"x".repeat((bytes - base) % 2));
        assert_eq!(serde_json::to_vec(&args).unwrap().len(), bytes);
        args
    }

    #[test]
    fn arguments_are_limited_to_64_kib() {
        assert!(matches!(
            ok(SEND, message_of_size(MAX_ARGUMENT_BYTES)),
            Call::Send { .. }
        ));
        assert_eq!(
            err(SEND, message_of_size(MAX_ARGUMENT_BYTES + 1)),
            ArgError::TooLarge {
                subject: ARGUMENTS_SUBJECT,
                bytes: MAX_ARGUMENT_BYTES + 1,
                max: MAX_ARGUMENT_BYTES
            }
        );
        // Escapes count as serialized bytes.
        let escaped = json!({"subagent_id": ID, "operation": "message",
            "content": text(&"\u{1}".repeat(MAX_ARGUMENT_BYTES / 6 + 1))});
        assert!(matches!(err(SEND, escaped), ArgError::TooLarge { .. }));
        let big = json!({ "x": "y".repeat(MAX_ARGUMENT_BYTES) });
        for route in [CLEAN_FORK, RECEIVE] {
            assert!(matches!(err(route, big.clone()), ArgError::TooLarge { .. }));
        }
    }

    #[test]
    fn receipt_hash_is_canonical() {
        let a: Value = serde_json::from_str(
            r#"{"subagent_id":"s","operation":"message","content":[{"type":"text","modality":"text","raw":"hi","extras":{"b":1,"a":[{"z":1,"y":2}]}}],"options":{"tools":{},"model":{}}}"#,
        )
        .unwrap();
        let b: Value = serde_json::from_str(
            r#"{"options":{"model":{},"tools":{}},"content":[{"extras":{"a":[{"y":2,"z":1}],"b":1},"raw":"hi","modality":"text","type":"text"}],"operation":"message","subagent_id":"s"}"#,
        )
        .unwrap();
        assert_ne!(a.to_string(), b.to_string());
        let h = receipt_hash(SEND, &a);
        assert_eq!(h.len(), 64);
        assert!(h
            .bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_eq!(h, receipt_hash(SEND, &b));
        assert_ne!(h, receipt_hash(CLEAN_FORK, &a));
        let mut changed = a.clone();
        changed["content"][0]["raw"] = json!("hi!");
        assert_ne!(h, receipt_hash(SEND, &changed));
        let mut reordered_array = a.clone();
        reordered_array["content"][0]["extras"]["a"] = json!([{"y": 2}, {"z": 1}]);
        assert_ne!(h, receipt_hash(SEND, &reordered_array));
        // Values that print alike in other encodings stay distinct.
        assert_ne!(
            receipt_hash(SEND, &json!({"a": 1})),
            receipt_hash(SEND, &json!({"a": "1"}))
        );
        assert_ne!(
            receipt_hash(SEND, &json!({"a": [1, 2]})),
            receipt_hash(SEND, &json!({"a": [12]}))
        );
        assert_ne!(
            receipt_hash("a", &json!({"b": 1})),
            receipt_hash("a\0", &json!({"b": 1}))
        );
        assert_eq!(
            receipt_hash(CLEAN_FORK, &json!({})),
            receipt_hash(CLEAN_FORK, &json!({}))
        );
    }

    #[test]
    fn receipt_hashes_do_not_recurse() {
        // Deep nesting does not recurse.
        let mut deep = json!(0);
        for _ in 0..100_000 {
            deep = Value::Array(vec![deep]);
        }
        assert_eq!(receipt_hash(SEND, &deep).len(), 64);
        // Dropping it recursively would overflow the stack; unwind it by hand.
        let mut cur = deep;
        while let Value::Array(mut items) = cur {
            cur = items.pop().unwrap_or(Value::Null);
        }
    }
}
