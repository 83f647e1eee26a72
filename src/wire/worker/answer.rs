//! The worker protocol's read-only queries (`history`, `answer`), pure:
//! the query kinds with their capability and reply events, and the
//! arguments of an answer request (`POST /api/sessions/:id/answer`,
//! `subagent/receive {answer}`) with its `source` rules. Sending a query
//! and waiting for its reply is `worker::query`.

use std::fmt;

use serde_json::{Map, Value};

use super::display;
use super::envelope::MAX_ID_BYTES;
use super::payload;

/// Keys of an answer request (`POST /api/sessions/:id/answer`, subagent
/// answer arguments).
pub const ANSWER_FIELDS: &[&str] = &["source", "part", "offset"];

/// A read-only query operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryKind {
    History,
    Answer,
}

impl QueryKind {
    /// The kind of a payload `operation`; `None` for run operations.
    pub fn from_operation(operation: &str) -> Option<QueryKind> {
        match operation {
            "history" => Some(QueryKind::History),
            "answer" => Some(QueryKind::Answer),
            _ => None,
        }
    }

    pub fn operation(self) -> &'static str {
        match self {
            QueryKind::History => "history",
            QueryKind::Answer => "answer",
        }
    }

    /// The worker capability the query needs.
    pub fn capability(self) -> &'static str {
        match self {
            QueryKind::History => "session-history",
            QueryKind::Answer => "answer-pages",
        }
    }

    /// The event that answers the query.
    pub fn reply_event(self) -> &'static str {
        self.operation()
    }

    /// The event that refuses the query.
    pub fn error_event(self) -> &'static str {
        match self {
            QueryKind::History => "history_error",
            QueryKind::Answer => "answer_error",
        }
    }
}

/// Checks the arguments of an answer request, `{source, part?, offset?}`
/// (`part` and `offset` default to 0), and returns the worker `answer`
/// payload (without `request_id`). `source` follows [`check_source`].
/// Unknown keys are refused. The error names the first problem.
pub fn answer_payload(args: &Value) -> Result<Value, AnswerArgsError> {
    let Value::Object(fields) = args else {
        return Err(AnswerArgsError::NotAnObject);
    };
    if let Some(extra) = fields.keys().find(|k| !ANSWER_FIELDS.contains(&k.as_str())) {
        return Err(AnswerArgsError::UnknownField(extra.clone()));
    }
    let source = fields.get("source").ok_or(AnswerArgsError::MissingSource)?;
    check_source(source).map_err(AnswerArgsError::Source)?;
    let index = |name: &'static str| -> Result<u64, AnswerArgsError> {
        match fields.get(name) {
            None => Ok(0),
            Some(v) => v.as_u64().ok_or(AnswerArgsError::NotAnIndex(name)),
        }
    };
    let (part, offset) = (index("part")?, index("offset")?);
    let mut payload = Map::new();
    payload.insert("operation".into(), Value::from("answer"));
    payload.insert("source".into(), source.clone());
    payload.insert("part".into(), Value::from(part));
    payload.insert("offset".into(), Value::from(offset));
    Ok(Value::Object(payload))
}

/// Why the arguments of an answer request were refused ([`answer_payload`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerArgsError {
    /// The arguments are not a JSON object.
    NotAnObject,
    /// A key that is not `source`, `part` or `offset` (the first one).
    UnknownField(String),
    /// No `source`.
    MissingSource,
    /// `source` breaks a rule.
    Source(SourceProblem),
    /// `part` or `offset` is not an integer >= 0.
    NotAnIndex(&'static str),
}

impl fmt::Display for AnswerArgsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AnswerArgsError::NotAnObject => {
                f.write_str("the arguments must be a JSON object {source, part, offset}")
            }
            AnswerArgsError::UnknownField(key) => write!(
                f,
                "unknown field {}; expected source, part, offset",
                display::quote(key)
            ),
            AnswerArgsError::MissingSource => f.write_str("source is required"),
            AnswerArgsError::Source(SourceProblem::NotAnObject) => {
                f.write_str("source must be an object")
            }
            AnswerArgsError::Source(SourceProblem::Unknown(key)) => {
                write!(f, "source has unknown field {}", display::quote(key))
            }
            AnswerArgsError::Source(SourceProblem::Missing(field)) => {
                write!(f, "source is missing {field}")
            }
            AnswerArgsError::Source(SourceProblem::Invalid { field, expected }) => {
                write!(f, "source {field} must be {expected}")
            }
            AnswerArgsError::NotAnIndex(name) => write!(f, "{name} must be an integer >= 0"),
        }
    }
}

impl std::error::Error for AnswerArgsError {}

/// The first problem [`check_source`] finds in an answer `source`. Field
/// names are the bare [`payload::SOURCE_FIELDS`] entries; each caller maps
/// the problem to its own error (the HTTP answer route's message, the
/// `subagent/receive` argument error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceProblem {
    /// `source` is not a JSON object.
    NotAnObject,
    /// A key that is not one of the five fields (the first one).
    Unknown(String),
    /// A required field is absent.
    Missing(&'static str),
    /// A field breaks its rule; `expected` describes the rule.
    Invalid {
        field: &'static str,
        expected: &'static str,
    },
}

/// Checks an answer `source` for both answer requests
/// (`POST /api/sessions/:id/answer` and `subagent/receive {answer}`):
/// exactly the five [`payload::SOURCE_FIELDS`]; `worker_id` a non-empty
/// string of at most [`MAX_ID_BYTES`] bytes; `turn` and `step` integers at
/// least 0; `commit_sequence` such an integer or the same as a decimal
/// string (workers send 64-bit values losslessly as strings);
/// `fingerprint` a non-empty string. Unknown keys are reported first, then
/// the fields in [`payload::SOURCE_FIELDS`] order.
pub fn check_source(source: &Value) -> Result<(), SourceProblem> {
    let Value::Object(fields) = source else {
        return Err(SourceProblem::NotAnObject);
    };
    if let Some(extra) = fields
        .keys()
        .find(|k| !payload::SOURCE_FIELDS.contains(&k.as_str()))
    {
        return Err(SourceProblem::Unknown(extra.clone()));
    }
    for &field in payload::SOURCE_FIELDS {
        let value = fields.get(field).ok_or(SourceProblem::Missing(field))?;
        let (ok, expected) = match field {
            "worker_id" => (
                value
                    .as_str()
                    .is_some_and(|s| !s.is_empty() && s.len() <= MAX_ID_BYTES),
                "a non-empty string of at most 128 bytes",
            ),
            "fingerprint" => (
                value.as_str().is_some_and(|s| !s.is_empty()),
                "a non-empty string",
            ),
            "commit_sequence" => (
                value.as_u64().is_some()
                    || value.as_str().is_some_and(|s| {
                        !s.is_empty()
                            && s.bytes().all(|b| b.is_ascii_digit())
                            && s.parse::<u64>().is_ok()
                    }),
                "an integer >= 0 or its decimal string",
            ),
            _ => (value.as_u64().is_some(), "an integer >= 0"),
        };
        if !ok {
            return Err(SourceProblem::Invalid { field, expected });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn source() -> Value {
        json!({"worker_id": "w", "turn": 0, "step": 1, "commit_sequence": "3",
            "fingerprint": "f"})
    }

    /// Every rule of an answer source, once (both answer requests use it).
    #[test]
    fn answer_sources() {
        let with = |field: &str, value: Value| {
            let mut src = source();
            src[field] = value;
            check_source(&src)
        };
        assert_eq!(check_source(&source()), Ok(()));
        for (field, value) in [
            ("worker_id", json!("w".repeat(MAX_ID_BYTES))),
            ("turn", json!(u64::MAX)),
            ("commit_sequence", json!(0)),
            ("commit_sequence", json!("0")),
            ("commit_sequence", json!("007")),
            ("commit_sequence", json!(u64::MAX.to_string())),
        ] {
            assert_eq!(with(field, value.clone()), Ok(()), "{field} = {value}");
        }
        for (field, value) in [
            ("worker_id", json!("")),
            ("worker_id", json!("w".repeat(MAX_ID_BYTES + 1))),
            ("worker_id", json!(1)),
            ("fingerprint", json!("")),
            ("fingerprint", json!(null)),
            ("turn", json!(-1)),
            ("turn", json!("0")),
            ("step", json!(1.5)),
            ("commit_sequence", json!("")),
            ("commit_sequence", json!("-1")),
            ("commit_sequence", json!("+1")),
            ("commit_sequence", json!("1e3")),
            ("commit_sequence", json!("2a")),
            ("commit_sequence", json!("18446744073709551616")),
            ("commit_sequence", json!(-1)),
            ("commit_sequence", json!(1.0)),
            ("commit_sequence", json!(true)),
            ("commit_sequence", json!(null)),
        ] {
            assert!(
                matches!(
                    with(field, value.clone()),
                    Err(SourceProblem::Invalid { field: f, .. }) if f == field
                ),
                "{field} = {value}"
            );
        }
        for field in payload::SOURCE_FIELDS {
            let mut src = source();
            src.as_object_mut().unwrap().remove(*field);
            assert_eq!(check_source(&src), Err(SourceProblem::Missing(field)));
        }
        // An unknown key is named before any missing field.
        assert_eq!(
            check_source(&json!({"more": 1})),
            Err(SourceProblem::Unknown("more".into()))
        );
        for not_object in [json!([]), json!("x"), json!(null)] {
            assert_eq!(check_source(&not_object), Err(SourceProblem::NotAnObject));
        }
    }

    #[test]
    fn answer_arguments() {
        let payload = answer_payload(&json!({"source": source(), "part": 1, "offset": 5})).unwrap();
        assert_eq!(
            payload,
            json!({"operation": "answer", "source": source(), "part": 1, "offset": 5})
        );
        // part and offset default to 0; an integer commit_sequence is kept.
        let mut src = source();
        src["commit_sequence"] = json!(3);
        let payload = answer_payload(&json!({"source": src.clone()})).unwrap();
        assert_eq!(
            (&payload["part"], &payload["offset"]),
            (&json!(0), &json!(0))
        );
        assert_eq!(payload["source"], src);

        let refused = |args: Value| answer_payload(&args).unwrap_err().to_string();
        assert!(refused(json!([])).contains("JSON object"));
        assert!(refused(json!({})).contains("source is required"));
        assert!(refused(json!({"source": source(), "extra": 1})).contains("unknown field"));
        // Each source problem as a message.
        assert_eq!(refused(json!({"source": "x"})), "source must be an object");
        let mut src = source();
        src["more"] = json!(1);
        assert_eq!(
            refused(json!({ "source": src })),
            "source has unknown field \"more\""
        );
        let mut src = source();
        src.as_object_mut().unwrap().remove("step");
        assert_eq!(refused(json!({ "source": src })), "source is missing step");
        let mut src = source();
        src["commit_sequence"] = json!("+1");
        assert_eq!(
            refused(json!({ "source": src })),
            "source commit_sequence must be an integer >= 0 or its decimal string"
        );
        for (field, value) in [
            ("part", json!(-1)),
            ("part", json!("1")),
            ("offset", json!(0.5)),
            ("offset", json!(null)),
        ] {
            let mut args = json!({"source": source()});
            args[field] = value;
            assert!(refused(args).starts_with(&format!("{field} must be")));
        }
    }
}
