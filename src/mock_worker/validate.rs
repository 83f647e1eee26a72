//! Validation of hub payloads exactly as the real worker's input boundary
//! does it: run requests (`message`, `continue`, `compact`) with their
//! content parts and options, and the read-only `history` and `answer`
//! queries. Pure; every failure carries the diagnostic that goes on the
//! wire (`input_rejected`, `history_error`, `answer_error`).
//!
//! The vocabulary (part types, modalities, forbidden keys) is shared with
//! the hub's `wire::worker::payload`; the rules are applied independently, the
//! way the real worker applies them (unknown part fields are dropped, not
//! refused), so this worker also checks what the hub sends.

use serde_json::Value;

use super::conversation::{AnswerQuery, HistoryQuery};
use crate::wire::worker::payload::{
    FORBIDDEN_KEYS as FORBIDDEN, MODALITIES, PART_TYPES as ENCODINGS,
};

/// The run-starting operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    Message,
    Continue,
    Compact,
}

impl Operation {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Operation::Message => "message",
            Operation::Continue => "continue",
            Operation::Compact => "compact",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<Operation> {
        match name {
            "message" => Some(Operation::Message),
            "continue" => Some(Operation::Continue),
            "compact" => Some(Operation::Compact),
            _ => None,
        }
    }
}

/// How `require_confirm` calls are decided (`options.confirmation.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConfirmMode {
    Ask,
    Approve,
    Deny,
}

impl ConfirmMode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            ConfirmMode::Ask => "ask",
            ConfirmMode::Approve => "approve",
            ConfirmMode::Deny => "deny",
        }
    }
}

/// Options a run request selected; `None` keeps the current value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Options {
    pub model: Option<String>,
    pub confirmation: Option<ConfirmMode>,
}

/// A valid `message`, `continue` or `compact` request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunRequest {
    pub request_id: String,
    pub operation: Operation,
    /// User content parts (`message` only), as admitted.
    pub content: Vec<Value>,
    pub options: Options,
}

/// Why a run request is refused: the `input_rejected` data.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rejection {
    /// The supplied `request_id` as sent, or `null`.
    pub request_id: Value,
    pub message: String,
    pub operation: Option<Operation>,
    /// A stable code: `invalid_options`, `payload_queue_full`,
    /// `duplicate_request_id`.
    pub code: Option<&'static str>,
}

impl Rejection {
    pub(crate) fn new(data: &Value, message: impl Into<String>) -> Rejection {
        Rejection {
            request_id: data.get("request_id").cloned().unwrap_or(Value::Null),
            message: message.into(),
            operation: data["operation"].as_str().and_then(Operation::from_name),
            code: None,
        }
    }

    pub(crate) fn with_code(mut self, code: &'static str) -> Rejection {
        self.code = Some(code);
        self
    }
}

/// A nonempty `request_id` of at most 128 UTF-8 bytes.
fn request_id(data: &Value) -> Result<String, String> {
    match data.get("request_id") {
        Some(Value::String(id)) if !id.is_empty() && id.len() <= 128 => Ok(id.clone()),
        Some(Value::String(_)) => Err("request_id must contain 1..128 bytes".into()),
        Some(_) => Err("request_id must be a string".into()),
        None => Err("request_id is required".into()),
    }
}

/// Validates a run request as the real worker does when it dequeues it.
pub(crate) fn parse_run(data: &Value) -> Result<RunRequest, Rejection> {
    let reject = |message: &str| Rejection::new(data, message);
    if !data.is_object() {
        return Err(reject("payload must be an object"));
    }
    let request_id = request_id(data).map_err(|m| reject(&m))?;
    let operation = match data.get("operation") {
        Some(Value::String(name)) => Operation::from_name(name)
            .ok_or_else(|| reject("operation must be message, continue, or compact"))?,
        _ => return Err(reject("operation must be a string")),
    };
    if FORBIDDEN.iter().any(|key| data.get(key).is_some()) {
        return Err(reject("payload cannot contain message metadata"));
    }
    let mut content = Vec::new();
    if operation == Operation::Message {
        if data.get("text").is_some() {
            return Err(reject("message requires content instead of text"));
        }
        let parts = match data.get("content") {
            Some(Value::Array(parts)) if !parts.is_empty() => parts,
            _ => return Err(reject("content must be a nonempty array")),
        };
        for part in parts {
            content.push(parse_part(part).map_err(&reject)?);
        }
    } else if data.get("content").is_some() || data.get("text").is_some() {
        return Err(reject(&format!(
            "{} cannot contain content or text",
            operation.name()
        )));
    }
    let options = match data.get("options") {
        None => Options::default(),
        Some(options) => parse_options(options)
            .map_err(|m| Rejection::new(data, m).with_code("invalid_options"))?,
    };
    Ok(RunRequest {
        request_id,
        operation,
        content,
        options,
    })
}

/// One content part: known `type` and `modality`, nonempty `raw`, object
/// `extras`. Unknown fields are dropped.
fn parse_part(part: &Value) -> Result<Value, &'static str> {
    if !part.is_object() {
        return Err("each content part must be an object");
    }
    match part.get("type").and_then(Value::as_str) {
        Some(t) if ENCODINGS.contains(&t) => {}
        _ => return Err("unknown content type"),
    }
    match part.get("modality").and_then(Value::as_str) {
        Some(m) if MODALITIES.contains(&m) => {}
        _ => return Err("unknown content modality"),
    }
    match part.get("raw") {
        Some(Value::String(raw)) if !raw.is_empty() => {}
        _ => return Err("content raw must be a nonempty string"),
    }
    let mut admitted = serde_json::json!({
        "type": part["type"], "raw": part["raw"], "modality": part["modality"],
    });
    match part.get("extras") {
        None => {}
        Some(extras @ Value::Object(_)) => admitted["extras"] = extras.clone(),
        Some(_) => return Err("content extras must be an object"),
    }
    Ok(admitted)
}

/// `options`: categories `model` (the mock provider knows one key,
/// `model`, a nonempty string), `tools` (must be empty) and `confirmation`
/// (`mode` only). Anything else is `invalid_options`.
fn parse_options(options: &Value) -> Result<Options, String> {
    let Some(categories) = options.as_object() else {
        return Err("options must be an object".into());
    };
    let mut out = Options::default();
    for (category, values) in categories {
        let Some(values) = values.as_object() else {
            return Err("each options category must be an object".into());
        };
        match category.as_str() {
            "model" => {
                for (key, value) in values {
                    match (key.as_str(), value) {
                        ("model", Value::String(name)) if !name.is_empty() => {
                            out.model = Some(name.clone())
                        }
                        ("model", _) => {
                            return Err("model option model must be a nonempty string".into())
                        }
                        (other, _) => {
                            return Err(format!("mock provider has no model option {other:?}"))
                        }
                    }
                }
            }
            "tools" if values.is_empty() => {}
            "confirmation" => {
                for (key, value) in values {
                    out.confirmation = Some(match (key.as_str(), value.as_str()) {
                        ("mode", Some("ask")) => ConfirmMode::Ask,
                        ("mode", Some("approve")) => ConfirmMode::Approve,
                        ("mode", Some("deny")) => ConfirmMode::Deny,
                        ("mode", _) => {
                            return Err("confirmation mode must be ask, approve, or deny".into())
                        }
                        (other, _) => return Err(format!("unknown confirmation option {other:?}")),
                    });
                }
            }
            other => return Err(format!("unsupported options category: {other}")),
        }
    }
    Ok(out)
}

/// A nonnegative integer field with a default.
fn index(data: &Value, key: &str, default: usize) -> Result<usize, String> {
    match data.get(key) {
        None => Ok(default),
        Some(value) => value
            .as_u64()
            .map(|n| n as usize)
            .ok_or_else(|| format!("{key} must be a nonnegative integer")),
    }
}

/// Read-only queries accept none of the message fields.
fn no_message_fields(data: &Value, what: &str) -> Result<(), String> {
    for key in ["content", "options", "text"]
        .iter()
        .chain(FORBIDDEN.iter())
    {
        if data.get(key).is_some() {
            return Err(format!(
                "{what} request cannot carry message content, options, or metadata"
            ));
        }
    }
    Ok(())
}

/// Validates a `history` query. `Err` is `(request_id as sent, message)`.
pub(crate) fn parse_history(data: &Value) -> Result<HistoryQuery, (Value, String)> {
    let fail = |message: String| {
        (
            data.get("request_id").cloned().unwrap_or(Value::Null),
            message,
        )
    };
    let request_id = request_id(data).map_err(fail)?;
    no_message_fields(data, "history").map_err(fail)?;
    let start = index(data, "start", 0).map_err(fail)?;
    let step = index(data, "step", 0).map_err(fail)?;
    let limit = index(data, "limit", 10).map_err(fail)?;
    if !(1..=10).contains(&limit) {
        return Err(fail("history limit must be between 1 and 10".into()));
    }
    Ok(HistoryQuery {
        request_id,
        start,
        step,
        limit,
    })
}

/// Validates an `answer` query. `Err` is `(request_id as sent, message)`.
pub(crate) fn parse_answer(data: &Value) -> Result<AnswerQuery, (Value, String)> {
    let fail = |message: String| {
        (
            data.get("request_id").cloned().unwrap_or(Value::Null),
            message,
        )
    };
    let request_id = request_id(data).map_err(fail)?;
    no_message_fields(data, "answer").map_err(fail)?;
    let source = data
        .get("source")
        .filter(|s| s.is_object())
        .ok_or_else(|| fail("answer source must be an object".into()))?;
    let text = |key: &str| {
        source
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .ok_or_else(|| fail(format!("answer source {key} must be a nonempty string")))
    };
    Ok(AnswerQuery {
        worker_id: text("worker_id")?,
        commit_sequence: text("commit_sequence")?,
        fingerprint: text("fingerprint")?,
        turn: index(source, "turn", usize::MAX)
            .ok()
            .filter(|&t| t != usize::MAX)
            .ok_or_else(|| fail("answer source turn must be a nonnegative integer".into()))?,
        step: index(source, "step", usize::MAX)
            .ok()
            .filter(|&s| s != usize::MAX)
            .ok_or_else(|| fail("answer source step must be a nonnegative integer".into()))?,
        part: index(data, "part", 0).map_err(fail)?,
        offset: index(data, "offset", 0).map_err(fail)?,
        source: source.clone(),
        request_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(extra: Value) -> Value {
        let mut data = json!({"operation": "message", "request_id": "r1",
            "content": [{"type": "text", "raw": "hi", "modality": "text"}]});
        for (k, v) in extra.as_object().unwrap() {
            data[k] = v.clone();
        }
        data
    }

    #[test]
    fn accepts_valid_requests() {
        let ok = parse_run(&message(json!({"ignored": 1}))).unwrap();
        assert_eq!(ok.operation, Operation::Message);
        assert_eq!(
            ok.content,
            vec![json!({"type": "text", "raw": "hi", "modality": "text"})]
        );
        let image = parse_run(&message(json!({"content": [
            {"type": "external_ref", "raw": "https://x/p.png", "modality": "image",
             "extras": {"detail": "low"}, "junk": true}]})))
        .unwrap();
        assert_eq!(image.content[0]["extras"]["detail"], "low");
        assert!(image.content[0].get("junk").is_none());
        let cont = parse_run(&json!({"operation": "continue", "request_id": "c"})).unwrap();
        assert_eq!(cont.operation, Operation::Continue);
        let options = parse_run(&message(json!({"options": {
            "model": {"model": "mock-slow"}, "tools": {}, "confirmation": {"mode": "approve"}}})))
        .unwrap()
        .options;
        assert_eq!(options.model.as_deref(), Some("mock-slow"));
        assert_eq!(options.confirmation, Some(ConfirmMode::Approve));
        assert_eq!(
            parse_run(&message(json!({"options": {}}))).unwrap().options,
            Options::default()
        );
    }

    #[test]
    fn rejects_what_the_real_worker_rejects() {
        let cases = [
            message(json!({"request_id": ""})),
            message(json!({"request_id": "x".repeat(129)})),
            message(json!({"request_id": 5})),
            message(json!({"operation": "shout"})),
            message(json!({"role": null})),
            message(json!({"type": "user"})),
            message(json!({"invokes": []})),
            message(json!({"invoke_return": {}})),
            message(json!({"text": "legacy"})),
            message(json!({"content": []})),
            message(json!({"content": "hi"})),
            message(json!({"content": ["hi"]})),
            message(json!({"content": [{"type": "image", "raw": "u", "modality": "image"}]})),
            message(json!({"content": [{"type": "text", "raw": "u"}]})),
            message(json!({"content": [{"type": "text", "raw": "u", "modality": "smell"}]})),
            message(json!({"content": [{"type": "text", "raw": "", "modality": "text"}]})),
            message(
                json!({"content": [{"type": "text", "raw": "u", "modality": "text", "extras": 1}]}),
            ),
            json!({"operation": "continue", "request_id": "c", "content": null}),
            json!({"operation": "compact", "request_id": "c", "text": "x"}),
            json!("not an object"),
        ];
        for data in cases {
            let rejection = parse_run(&data).expect_err(&data.to_string());
            assert_eq!(rejection.code, None, "{data}");
        }
        let rejected = parse_run(&message(json!({"request_id": 5}))).unwrap_err();
        assert_eq!(rejected.request_id, json!(5));
        assert_eq!(rejected.operation, Some(Operation::Message));
    }

    #[test]
    fn invalid_options_have_their_code() {
        for options in [
            json!(null),
            json!([]),
            json!({"model": 1}),
            json!({"model": {"reasoning_effort": "max"}}),
            json!({"model": {"model": ""}}),
            json!({"tools": {"x": 1}}),
            json!({"confirmation": {"mode": "sometimes"}}),
            json!({"confirmation": {"mode": null}}),
            json!({"confirmation": {"other": "ask"}}),
            json!({"sampling": {}}),
        ] {
            let rejection = parse_run(&message(json!({"options": options}))).unwrap_err();
            assert_eq!(rejection.code, Some("invalid_options"), "{options}");
        }
    }

    #[test]
    fn history_queries() {
        let q = parse_history(&json!({"operation": "history", "request_id": "h"})).unwrap();
        assert_eq!((q.start, q.step, q.limit), (0, 0, 10));
        for bad in [
            json!({"operation": "history"}),
            json!({"operation": "history", "request_id": "h", "limit": 0}),
            json!({"operation": "history", "request_id": "h", "limit": 11}),
            json!({"operation": "history", "request_id": "h", "start": -1}),
            json!({"operation": "history", "request_id": "h", "step": "1"}),
            json!({"operation": "history", "request_id": "h", "options": {}}),
        ] {
            assert!(parse_history(&bad).is_err(), "{bad}");
        }
        let (id, _) = parse_history(&json!({"request_id": "h", "limit": 20})).unwrap_err();
        assert_eq!(id, json!("h"));
    }

    #[test]
    fn answer_queries() {
        let source = json!({"worker_id": "w", "turn": 0, "step": 1,
                            "commit_sequence": "2", "fingerprint": "ab"});
        let q = parse_answer(&json!({"operation": "answer", "request_id": "a",
                                     "source": source, "part": 1, "offset": 5}))
        .unwrap();
        assert_eq!((q.turn, q.step, q.part, q.offset), (0, 1, 1, 5));
        assert_eq!(q.source, source);
        for bad in [
            json!({"request_id": "a"}),
            json!({"request_id": "a", "source": {"worker_id": "w", "turn": 0, "step": 0,
                                                 "commit_sequence": "1"}}),
            json!({"request_id": "a", "source": {"worker_id": "w", "turn": -1, "step": 0,
                                                 "commit_sequence": "1", "fingerprint": "f"}}),
            json!({"request_id": "a", "source": source, "offset": -1}),
        ] {
            assert!(parse_answer(&bad).is_err(), "{bad}");
        }
    }
}
