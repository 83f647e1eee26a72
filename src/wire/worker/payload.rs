//! Hub -> worker frames on the event connection (`payload` and `signal`),
//! built from panel input and validated by the worker's own rules so a
//! mistake is reported before the round trip. The confirmation socket's
//! frames are in `confirm_frames`.
//!
//! Pure: no I/O, clock or locks (request ids come from a caller-supplied
//! generator). Never panics on any input. The worker stays authoritative.

use std::fmt;

use serde_json::{Map, Value};

use super::display::{clip, describe, kind, quote};
use super::envelope::MAX_ID_BYTES;

/// Longest request id, UTF-8 bytes.
pub const MAX_REQUEST_ID_BYTES: usize = 128;

/// The worker rejects history and answer query envelopes above this many
/// encoded bytes (`query_too_large`).
pub const MAX_QUERY_FRAME_BYTES: usize = 16 * 1024;

/// Largest `limit` of a history query.
pub const MAX_HISTORY_LIMIT: u64 = 10;

/// Content part encodings (`type`).
pub const PART_TYPES: &[&str] = &["text", "binary", "external_ref"];

/// Content part media categories (`modality`).
pub const MODALITIES: &[&str] = &["text", "image", "audio", "video", "document"];

/// Confirmation policies a payload may select.
pub const CONFIRMATION_MODES: &[&str] = &["ask", "approve", "deny"];

/// Keys the worker refuses inside payload `data`, even when null.
pub const FORBIDDEN_KEYS: &[&str] = &["role", "invokes", "invoke_return", "type"];

/// Fields of an answer `source`, all required, no others.
pub const SOURCE_FIELDS: &[&str] = &[
    "worker_id",
    "turn",
    "step",
    "commit_sequence",
    "fingerprint",
];

/// A payload operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Message,
    Continue,
    Compact,
    History,
    Answer,
}

impl Operation {
    pub const ALL: [Operation; 5] = [
        Operation::Message,
        Operation::Continue,
        Operation::Compact,
        Operation::History,
        Operation::Answer,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Message => "message",
            Self::Continue => "continue",
            Self::Compact => "compact",
            Self::History => "history",
            Self::Answer => "answer",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|op| op.as_str() == s)
    }

    /// Whether the operation starts a run (and so accepts `options`).
    pub fn starts_run(self) -> bool {
        matches!(self, Self::Message | Self::Continue | Self::Compact)
    }

    /// Input fields this operation accepts besides `operation` and
    /// `request_id`.
    fn fields(self) -> &'static [&'static str] {
        match self {
            Self::Message => &["content", "options"],
            Self::Continue | Self::Compact => &["options"],
            Self::History => &["start", "step", "limit"],
            Self::Answer => &["source", "part", "offset"],
        }
    }
}

/// Every input field some operation accepts.
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

/// Why panel input cannot become a payload, or a signal cannot be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayloadError {
    /// The input is not a JSON object.
    NotAnObject { found: &'static str },
    /// `operation` is not one of the five (or not a string).
    UnknownOperation { op: String },
    /// A top-level input field no operation knows.
    UnknownField { field: String },
    /// A known field that this operation does not take, e.g. `start` on a
    /// message or `options` on a history query.
    FieldNotAllowed {
        field: &'static str,
        operation: &'static str,
    },
    /// `role`, `invokes`, `invoke_return` or `type` (refused even when null).
    ForbiddenKey { key: &'static str },
    /// The former `text` field (refused for every operation, even when null).
    LegacyText,
    /// A message without `content`.
    MissingContent,
    /// `content` is not an array.
    ContentNotArray { found: &'static str },
    /// `content` is an empty array.
    EmptyContent,
    /// `content` on an operation that takes none (even null or empty).
    ContentForbidden { operation: &'static str },
    /// Content part `index` (0-based) breaks a rule.
    BadPart { index: usize, reason: PartError },
    /// `options` breaks a rule.
    BadOptions { reason: String },
    /// `request_id` (given or generated) breaks a rule.
    BadRequestId { reason: String },
    /// A history field breaks a rule.
    BadHistory { reason: String },
    /// An answer field breaks a rule.
    BadAnswer { reason: String },
    /// A history or answer frame the worker would refuse as too large.
    QueryTooLarge { bytes: usize, max: usize },
    /// A signal operation other than status, options, cancel, shutdown.
    UnknownSignal { op: String },
    /// `cancel` without a run id and no run observed yet.
    MissingRunId,
    /// The cancel run id is longer than [`MAX_ID_BYTES`].
    RunIdTooLong { bytes: usize, max: usize },
}

impl fmt::Display for PayloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotAnObject { found } => write!(f, "input must be a JSON object, found {found}"),
            Self::UnknownOperation { op } => write!(
                f,
                "unknown operation {op}; expected message, continue, compact, history or answer"
            ),
            Self::UnknownField { field } => write!(f, "unknown field {}", quote(field)),
            Self::FieldNotAllowed { field, operation } => {
                write!(
                    f,
                    "field \"{field}\" is not accepted by operation {operation}"
                )
            }
            Self::ForbiddenKey { key } => write!(
                f,
                "field \"{key}\" is worker-owned and refused in payload data, even when null"
            ),
            Self::LegacyText => write!(
                f,
                "field \"text\" is no longer accepted; send content as \
                 [{{\"type\":\"text\",\"modality\":\"text\",\"raw\":...}}]"
            ),
            Self::MissingContent => write!(f, "operation message requires content"),
            Self::ContentNotArray { found } => {
                write!(f, "content must be an array of parts, found {found}")
            }
            Self::EmptyContent => write!(f, "content must contain at least one part"),
            Self::ContentForbidden { operation } => write!(
                f,
                "operation {operation} does not accept content, even when null or empty"
            ),
            Self::BadPart { index, reason } => write!(f, "content part {index}: {reason}"),
            Self::BadOptions { reason } => write!(f, "options: {reason}"),
            Self::BadRequestId { reason } => write!(f, "request_id {reason}"),
            Self::BadHistory { reason } => write!(f, "history: {reason}"),
            Self::BadAnswer { reason } => write!(f, "answer: {reason}"),
            Self::QueryTooLarge { bytes, max } => write!(
                f,
                "query frame is {bytes} bytes, larger than the worker's {max}-byte limit"
            ),
            Self::UnknownSignal { op } => write!(
                f,
                "unknown signal {op}; expected status, options, cancel or shutdown"
            ),
            Self::MissingRunId => write!(
                f,
                "cancel needs a run_id and no run has been observed on this session"
            ),
            Self::RunIdTooLong { bytes, max } => {
                write!(
                    f,
                    "run_id is {bytes} bytes, longer than the {max}-byte limit"
                )
            }
        }
    }
}

impl std::error::Error for PayloadError {}

/// Why a content part was refused ([`PayloadError::BadPart`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartError {
    /// The part is not a JSON object.
    NotAnObject {
        found: &'static str,
    },
    /// A key other than `type`, `modality`, `raw` and `extras` (the first).
    UnknownKey {
        key: String,
    },
    MissingType,
    /// `type` names a modality (`image`, ...) instead of an encoding.
    MediaType {
        found: String,
    },
    /// `type` is not `text`, `binary` or `external_ref`.
    BadType {
        found: String,
    },
    MissingModality,
    /// `modality` is not one of the five.
    BadModality {
        found: String,
    },
    EmptyRaw,
    MissingRaw,
    RawNotString {
        found: &'static str,
    },
    ExtrasNotObject {
        found: &'static str,
    },
}

impl fmt::Display for PartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotAnObject { found } => write!(f, "must be an object, found {found}"),
            Self::UnknownKey { key } => write!(
                f,
                "unknown key {}; part metadata belongs in extras",
                quote(key)
            ),
            Self::MissingType => f.write_str("type is required (text, binary or external_ref)"),
            Self::MediaType { found } => write!(
                f,
                "type {} is a media category, not an encoding; use type \"external_ref\" \
                 or \"binary\" with modality {}",
                quote(found),
                quote(found)
            ),
            Self::BadType { found } => {
                write!(f, "type must be text, binary or external_ref, found {found}")
            }
            Self::MissingModality => f.write_str(
                "modality is required (text, image, audio, video or document); it is never inferred",
            ),
            Self::BadModality { found } => write!(
                f,
                "modality must be text, image, audio, video or document, found {found}"
            ),
            Self::EmptyRaw => f.write_str("raw must not be empty"),
            Self::MissingRaw => f.write_str("raw is required"),
            Self::RawNotString { found } => write!(f, "raw must be a string, found {found}"),
            Self::ExtrasNotObject { found } => write!(f, "extras must be an object, found {found}"),
        }
    }
}

impl std::error::Error for PartError {}

/// A non-negative integer field of a query, parsed losslessly.
fn unsigned(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        _ => None,
    }
}

fn check_request_id(v: &Value) -> Result<String, PayloadError> {
    let bad = |reason: String| Err(PayloadError::BadRequestId { reason });
    match v {
        Value::String(s) if s.is_empty() => bad("must not be empty".into()),
        Value::String(s) if s.len() > MAX_REQUEST_ID_BYTES => bad(format!(
            "is {} bytes, longer than the {MAX_REQUEST_ID_BYTES}-byte limit",
            s.len()
        )),
        Value::String(s) => Ok(s.clone()),
        other => bad(format!("must be a string, found {}", kind(other))),
    }
}

/// Builds a payload frame from panel (or REST) input.
///
/// `input` is an object with optional `operation` (default `"message"`),
/// `content`, `request_id`, `options`, and for history `start`, `step`,
/// `limit`, for answer `source`, `part`, `offset`. Unknown top-level fields
/// are errors. Returns the request id used (the given one, or `new_id()`
/// when absent) and the complete frame `{"type":"payload","data":{...}}`.
/// Defaults (history `start`/`step`/`limit`, answer `part`/`offset`) are
/// written out explicitly.
pub fn build_payload(
    input: &Value,
    new_id: &mut dyn FnMut() -> String,
) -> Result<(String, Value), PayloadError> {
    let Value::Object(fields) = input else {
        return Err(PayloadError::NotAnObject { found: kind(input) });
    };
    // Worker-owned and legacy keys first: they get their own explanation.
    for key in FORBIDDEN_KEYS {
        if fields.contains_key(*key) {
            return Err(PayloadError::ForbiddenKey { key });
        }
    }
    if fields.contains_key("text") {
        return Err(PayloadError::LegacyText);
    }
    if let Some(field) = fields.keys().find(|k| !INPUT_FIELDS.contains(&k.as_str())) {
        return Err(PayloadError::UnknownField {
            field: clip(field, 64),
        });
    }
    let operation = match fields.get("operation") {
        None => Operation::Message,
        Some(Value::String(s)) => {
            Operation::parse(s).ok_or_else(|| PayloadError::UnknownOperation { op: quote(s) })?
        }
        Some(other) => {
            return Err(PayloadError::UnknownOperation {
                op: describe(other),
            })
        }
    };
    let allowed = operation.fields();
    for field in INPUT_FIELDS.iter().skip(2) {
        if fields.contains_key(*field) && !allowed.contains(field) {
            if *field == "content" {
                return Err(PayloadError::ContentForbidden {
                    operation: operation.as_str(),
                });
            }
            return Err(PayloadError::FieldNotAllowed {
                field,
                operation: operation.as_str(),
            });
        }
    }

    let mut data = Map::new();
    data.insert("operation".into(), Value::from(operation.as_str()));
    let request_id = match fields.get("request_id") {
        Some(v) => check_request_id(v)?,
        None => check_request_id(&Value::String(new_id()))?,
    };
    data.insert("request_id".into(), Value::String(request_id.clone()));

    match operation {
        Operation::Message => {
            let content = fields.get("content").ok_or(PayloadError::MissingContent)?;
            validate_content(content)?;
            data.insert("content".into(), content.clone());
        }
        Operation::Continue | Operation::Compact => {}
        Operation::History => {
            let start = query_int(fields, "start", 0, PayloadError::bad_history)?;
            let step = query_int(fields, "step", 0, PayloadError::bad_history)?;
            let limit = query_int(
                fields,
                "limit",
                MAX_HISTORY_LIMIT,
                PayloadError::bad_history,
            )?;
            if !(1..=MAX_HISTORY_LIMIT).contains(&limit) {
                return Err(PayloadError::BadHistory {
                    reason: format!("limit must be 1-{MAX_HISTORY_LIMIT} turns, found {limit}"),
                });
            }
            data.insert("start".into(), Value::from(start));
            data.insert("step".into(), Value::from(step));
            data.insert("limit".into(), Value::from(limit));
        }
        Operation::Answer => {
            let source = fields
                .get("source")
                .ok_or_else(|| PayloadError::BadAnswer {
                    reason: "source is required".into(),
                })?;
            validate_source(source)?;
            let part = query_int(fields, "part", 0, PayloadError::bad_answer)?;
            let offset = query_int(fields, "offset", 0, PayloadError::bad_answer)?;
            data.insert("source".into(), source.clone());
            data.insert("part".into(), Value::from(part));
            data.insert("offset".into(), Value::from(offset));
        }
    }
    if operation.starts_run() {
        if let Some(options) = fields.get("options") {
            validate_options(options)?;
            data.insert("options".into(), options.clone());
        }
    }

    let mut frame = Map::new();
    frame.insert("type".into(), Value::from("payload"));
    frame.insert("data".into(), Value::Object(data));
    let frame = Value::Object(frame);
    if !operation.starts_run() {
        let bytes = super::display::encoded_len(&frame);
        if bytes > MAX_QUERY_FRAME_BYTES {
            return Err(PayloadError::QueryTooLarge {
                bytes,
                max: MAX_QUERY_FRAME_BYTES,
            });
        }
    }
    Ok((request_id, frame))
}

impl PayloadError {
    fn bad_history(reason: String) -> Self {
        Self::BadHistory { reason }
    }
    fn bad_answer(reason: String) -> Self {
        Self::BadAnswer { reason }
    }
}

/// An optional integer >= 0 of a query, with its default.
fn query_int(
    fields: &Map<String, Value>,
    name: &str,
    default: u64,
    err: fn(String) -> PayloadError,
) -> Result<u64, PayloadError> {
    match fields.get(name) {
        None => Ok(default),
        Some(v) => unsigned(v).ok_or_else(|| {
            err(format!(
                "{name} must be an integer >= 0, found {}",
                describe(v)
            ))
        }),
    }
}

/// Checks an answer `source`: exactly worker_id (string), turn and step
/// (integers >= 0), commit_sequence (string or integer >= 0, kept as
/// given) and fingerprint (string).
fn validate_source(source: &Value) -> Result<(), PayloadError> {
    let bad = |reason: String| Err(PayloadError::BadAnswer { reason });
    let Value::Object(fields) = source else {
        return bad(format!("source must be an object, found {}", kind(source)));
    };
    if let Some(extra) = fields.keys().find(|k| !SOURCE_FIELDS.contains(&k.as_str())) {
        return bad(format!("source has unknown field {}", quote(extra)));
    }
    for name in SOURCE_FIELDS {
        let Some(v) = fields.get(*name) else {
            return bad(format!("source is missing {name}"));
        };
        let ok = match *name {
            "worker_id" | "fingerprint" => v.is_string(),
            "turn" | "step" => unsigned(v).is_some(),
            _ => v.is_string() || unsigned(v).is_some(),
        };
        if !ok {
            let rule = match *name {
                "worker_id" | "fingerprint" => "a string",
                "turn" | "step" => "an integer >= 0",
                _ => "a string or an integer >= 0",
            };
            return bad(format!(
                "source {name} must be {rule}, found {}",
                describe(v)
            ));
        }
    }
    Ok(())
}

/// Checks a message's `content`: a non-empty array of parts, each an object
/// with `type` (text, binary, external_ref), `modality` (text, image, audio,
/// video, document; required), `raw` (non-empty string), optional `extras`
/// (object) and no other keys.
pub fn validate_content(content: &Value) -> Result<(), PayloadError> {
    let Value::Array(parts) = content else {
        return Err(PayloadError::ContentNotArray {
            found: kind(content),
        });
    };
    if parts.is_empty() {
        return Err(PayloadError::EmptyContent);
    }
    for (index, part) in parts.iter().enumerate() {
        validate_part(part).map_err(|reason| PayloadError::BadPart { index, reason })?;
    }
    Ok(())
}

fn validate_part(part: &Value) -> Result<(), PartError> {
    let Value::Object(fields) = part else {
        return Err(PartError::NotAnObject { found: kind(part) });
    };
    if let Some(extra) = fields
        .keys()
        .find(|k| !["type", "modality", "raw", "extras"].contains(&k.as_str()))
    {
        return Err(PartError::UnknownKey { key: extra.clone() });
    }
    match fields.get("type") {
        None => return Err(PartError::MissingType),
        Some(Value::String(t)) if PART_TYPES.contains(&t.as_str()) => {}
        Some(Value::String(t)) if MODALITIES.contains(&t.as_str()) && t != "text" => {
            return Err(PartError::MediaType { found: t.clone() })
        }
        Some(other) => {
            return Err(PartError::BadType {
                found: describe(other),
            })
        }
    }
    match fields.get("modality") {
        None => return Err(PartError::MissingModality),
        Some(Value::String(m)) if MODALITIES.contains(&m.as_str()) => {}
        Some(other) => {
            return Err(PartError::BadModality {
                found: describe(other),
            })
        }
    }
    match fields.get("raw") {
        Some(Value::String(r)) if !r.is_empty() => {}
        Some(Value::String(_)) => return Err(PartError::EmptyRaw),
        None => return Err(PartError::MissingRaw),
        Some(other) => return Err(PartError::RawNotString { found: kind(other) }),
    }
    match fields.get("extras") {
        None | Some(Value::Object(_)) => Ok(()),
        Some(other) => Err(PartError::ExtrasNotObject { found: kind(other) }),
    }
}

/// Checks `options`: an object with optional `model` (object), `tools`
/// (exactly `{}`) and `confirmation` (`{}` or `{"mode": ask|approve|deny}`).
/// Unknown categories are rejected; `{}` is a no-op.
pub fn validate_options(options: &Value) -> Result<(), PayloadError> {
    let bad = |reason: String| Err(PayloadError::BadOptions { reason });
    let Value::Object(categories) = options else {
        return bad(format!("must be an object, found {}", kind(options)));
    };
    for (name, value) in categories {
        match (name.as_str(), value) {
            ("model", Value::Object(_)) => {}
            ("tools", Value::Object(m)) if m.is_empty() => {}
            ("tools", Value::Object(_)) => {
                return bad("tools is reserved and must be the empty object {}".into())
            }
            ("confirmation", Value::Object(m)) => {
                for (key, mode) in m {
                    if key != "mode" {
                        return bad(format!(
                            "confirmation has unknown key {}; only mode is accepted",
                            quote(key)
                        ));
                    }
                    match mode {
                        Value::String(s) if CONFIRMATION_MODES.contains(&s.as_str()) => {}
                        other => {
                            return bad(format!(
                                "confirmation mode must be ask, approve or deny, found {}",
                                describe(other)
                            ))
                        }
                    }
                }
            }
            ("model" | "tools" | "confirmation", other) => {
                return bad(format!("{name} must be an object, found {}", kind(other)))
            }
            _ => {
                return bad(format!(
                    "unknown category {}; expected model, tools or confirmation",
                    quote(name)
                ))
            }
        }
    }
    Ok(())
}

/// A signal operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalOp {
    Status,
    Options,
    Cancel,
    Shutdown,
}

impl SignalOp {
    pub const ALL: [SignalOp; 4] = [
        SignalOp::Status,
        SignalOp::Options,
        SignalOp::Cancel,
        SignalOp::Shutdown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Status => "status",
            Self::Options => "options",
            Self::Cancel => "cancel",
            Self::Shutdown => "shutdown",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|op| op.as_str() == s)
    }
}

/// `{"type":"signal","data":{"operation":..}}`. `cancel` carries a
/// non-empty `run_id`: the given one, else `default_run` (the most recently
/// observed run id), else [`PayloadError::MissingRunId`]. An empty id counts
/// as not given. Other operations ignore `run_id`.
pub fn build_signal(
    op: &str,
    run_id: Option<&str>,
    default_run: Option<&str>,
) -> Result<Value, PayloadError> {
    let op = SignalOp::parse(op).ok_or_else(|| PayloadError::UnknownSignal { op: quote(op) })?;
    let mut data = Map::new();
    data.insert("operation".into(), Value::from(op.as_str()));
    if op == SignalOp::Cancel {
        let run = run_id
            .filter(|r| !r.is_empty())
            .or(default_run.filter(|r| !r.is_empty()))
            .ok_or(PayloadError::MissingRunId)?;
        if run.len() > MAX_ID_BYTES {
            return Err(PayloadError::RunIdTooLong {
                bytes: run.len(),
                max: MAX_ID_BYTES,
            });
        }
        data.insert("run_id".into(), Value::from(run));
    }
    let mut frame = Map::new();
    frame.insert("type".into(), Value::from("signal"));
    frame.insert("data".into(), Value::Object(data));
    Ok(Value::Object(frame))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testkit::Rng;
    use crate::wire::worker::confirm_frames::parse_confirmation_request;
    use serde_json::json;

    fn ids() -> impl FnMut() -> String {
        let mut n = 0;
        move || {
            n += 1;
            format!("gen-{n}")
        }
    }

    fn build(input: Value) -> Result<(String, Value), PayloadError> {
        build_payload(&input, &mut ids())
    }

    fn text_part(raw: &str) -> Value {
        json!({"type": "text", "modality": "text", "raw": raw})
    }

    fn part_error(part: Value) -> String {
        match build(json!({"content": [text_part("ok"), part]})) {
            Err(PayloadError::BadPart { index: 1, reason }) => reason.to_string(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn operation_names_round_trip() {
        for op in Operation::ALL {
            assert_eq!(Operation::parse(op.as_str()), Some(op));
        }
        for op in SignalOp::ALL {
            assert_eq!(SignalOp::parse(op.as_str()), Some(op));
        }
        assert_eq!(Operation::parse("Message"), None);
        assert_eq!(SignalOp::parse("ping"), None);
    }

    #[test]
    fn message_with_generated_id() {
        let (id, frame) = build(json!({"content": [text_part("Hello")]})).unwrap();
        assert_eq!(id, "gen-1");
        assert_eq!(
            frame.to_string(),
            r#"{"type":"payload","data":{"operation":"message","request_id":"gen-1","content":[{"type":"text","modality":"text","raw":"Hello"}]}}"#
        );
    }

    #[test]
    fn documented_message_example_is_kept_as_given() {
        let content = json!([
            {"type": "text", "raw": "Describe this image.", "modality": "text"},
            {"type": "external_ref", "raw": "https://example.com/photo.png",
             "modality": "image", "extras": {"detail": "low"}}
        ]);
        let options = json!({
            "model": {"model": "deepseek-v4-pro", "reasoning_effort": "max"},
            "tools": {},
            "confirmation": {"mode": "ask"}
        });
        let (id, frame) = build(json!({
            "operation": "message", "request_id": "req-001",
            "content": content, "options": options
        }))
        .unwrap();
        assert_eq!(id, "req-001");
        assert_eq!(frame["type"], json!("payload"));
        assert_eq!(frame["data"]["content"], content);
        assert_eq!(frame["data"]["options"], options);
        assert_eq!(frame["data"]["request_id"], json!("req-001"));
        let keys: Vec<&String> = frame["data"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["operation", "request_id", "content", "options"]);
    }

    #[test]
    fn generated_id_is_used_only_when_absent() {
        let mut calls = 0;
        let mut gen = || {
            calls += 1;
            "x".to_string()
        };
        let input = json!({"request_id": "mine", "operation": "continue"});
        let (id, _) = build_payload(&input, &mut gen).unwrap();
        assert_eq!(id, "mine");
        assert_eq!(calls, 0);
        // A broken generator is caught too.
        let mut empty = String::new;
        assert!(matches!(
            build_payload(&json!({"operation": "continue"}), &mut empty),
            Err(PayloadError::BadRequestId { .. })
        ));
    }

    #[test]
    fn request_id_edges() {
        let ok = format!("{}é", "a".repeat(126));
        assert_eq!(ok.len(), 128);
        let (id, _) = build(json!({"operation": "continue", "request_id": ok})).unwrap();
        assert_eq!(id, ok);
        let too_long = format!("{}€", "a".repeat(126));
        assert_eq!(too_long.len(), 129);
        let err = build(json!({"operation": "continue", "request_id": too_long})).unwrap_err();
        assert_eq!(
            err.to_string(),
            "request_id is 129 bytes, longer than the 128-byte limit"
        );
        for bad in [json!(""), json!(null), json!(1), json!(["a"])] {
            assert!(
                matches!(
                    build(json!({"operation": "continue", "request_id": bad})),
                    Err(PayloadError::BadRequestId { .. })
                ),
                "{bad}"
            );
        }
        assert_eq!(
            build(json!({"operation": "continue", "request_id": 7}))
                .unwrap_err()
                .to_string(),
            "request_id must be a string, found number"
        );
        // Whitespace is a valid (non-empty) id.
        assert!(build(json!({"operation": "continue", "request_id": " "})).is_ok());
    }

    #[test]
    fn input_shape_and_operation() {
        assert_eq!(
            build(json!([1])),
            Err(PayloadError::NotAnObject { found: "array" })
        );
        assert_eq!(
            build(json!({"operation": "launch"})),
            Err(PayloadError::UnknownOperation {
                op: "\"launch\"".into()
            })
        );
        assert_eq!(
            build(json!({"operation": null})),
            Err(PayloadError::UnknownOperation { op: "null".into() })
        );
        assert_eq!(
            build(json!({"operation": "continue", "bogus": 1})),
            Err(PayloadError::UnknownField {
                field: "bogus".into()
            })
        );
        let e = build(json!({"operation": "launch"}))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "unknown operation \"launch\"; expected message, continue, compact, history or answer"
        );
    }

    #[test]
    fn forbidden_keys_even_when_null() {
        for key in FORBIDDEN_KEYS {
            for value in [json!(null), json!("user"), json!([])] {
                let input = json!({"content": [text_part("x")], *key: value});
                assert_eq!(build(input), Err(PayloadError::ForbiddenKey { key }));
                let input = json!({"operation": "continue", *key: value});
                assert_eq!(build(input), Err(PayloadError::ForbiddenKey { key }));
            }
        }
    }

    #[test]
    fn legacy_text_is_never_accepted() {
        for op in ["message", "continue", "compact", "history", "answer"] {
            for value in [json!("hi"), json!(null), json!("")] {
                assert_eq!(
                    build(json!({"operation": op, "text": value, "content": [text_part("x")]})),
                    Err(PayloadError::LegacyText),
                    "{op}"
                );
            }
        }
    }

    #[test]
    fn message_content_rules() {
        assert_eq!(build(json!({})), Err(PayloadError::MissingContent));
        assert_eq!(
            build(json!({"content": []})),
            Err(PayloadError::EmptyContent)
        );
        assert_eq!(
            build(json!({"content": "hello"})),
            Err(PayloadError::ContentNotArray { found: "string" })
        );
        assert_eq!(
            build(json!({"content": null})),
            Err(PayloadError::ContentNotArray { found: "null" })
        );
        assert_eq!(
            build(json!({"content": [1]})),
            Err(PayloadError::BadPart {
                index: 0,
                reason: PartError::NotAnObject { found: "number" }
            })
        );
    }

    #[test]
    fn part_rules() {
        // Every encoding and modality pairing is admitted by core.
        for t in PART_TYPES {
            for m in MODALITIES {
                let part = json!({"type": t, "modality": m, "raw": "r"});
                assert!(build(json!({ "content": [part] })).is_ok(), "{t} {m}");
            }
        }
        let with_extras = json!({"type": "external_ref", "modality": "document",
            "raw": "https://x/y.pdf", "extras": {"file_id": "f"}});
        assert!(build(json!({ "content": [with_extras] })).is_ok());
        let empty_extras = json!({"type": "text", "modality": "text", "raw": "r", "extras": {}});
        assert!(build(json!({ "content": [empty_extras] })).is_ok());

        let image = part_error(json!({"type": "image", "modality": "image", "raw": "u"}));
        assert!(
            image.contains("use type \"external_ref\" or \"binary\" with modality"),
            "{image}"
        );
        assert!(
            part_error(json!({"type": "video", "modality": "video", "raw": "u"}))
                .contains("media category")
        );
        assert_eq!(
            part_error(json!({"type": "url", "modality": "image", "raw": "u"})),
            "type must be text, binary or external_ref, found \"url\""
        );
        assert!(part_error(json!({"modality": "text", "raw": "u"})).starts_with("type is required"));
        assert!(
            part_error(json!({"type": 1, "modality": "text", "raw": "u"}))
                .starts_with("type must be")
        );
        assert!(part_error(json!({"type": "text", "raw": "u"})).contains("modality is required"));
        assert!(
            part_error(json!({"type": "text", "raw": "u", "modality": null}))
                .starts_with("modality must be")
        );
        assert_eq!(
            part_error(json!({"type": "text", "raw": "u", "modality": "picture"})),
            "modality must be text, image, audio, video or document, found \"picture\""
        );
        assert_eq!(
            part_error(json!({"type": "text", "modality": "text", "raw": ""})),
            "raw must not be empty"
        );
        assert_eq!(
            part_error(json!({"type": "text", "modality": "text"})),
            "raw is required"
        );
        assert_eq!(
            part_error(json!({"type": "text", "modality": "text", "raw": 5})),
            "raw must be a string, found number"
        );
        assert_eq!(
            part_error(json!({"type": "text", "modality": "text", "raw": "x", "extras": null})),
            "extras must be an object, found null"
        );
        assert_eq!(
            part_error(json!({"type": "text", "modality": "text", "raw": "x", "detail": "low"})),
            "unknown key \"detail\"; part metadata belongs in extras"
        );
        // Text is not trimmed: whitespace is a non-empty raw.
        assert!(build(json!({ "content": [text_part(" ")] })).is_ok());
        let e = build(json!({"content": [text_part("a"), {"type": "image"}]})).unwrap_err();
        assert!(e.to_string().starts_with("content part 1: type \"image\""));
    }

    #[test]
    fn validate_content_directly() {
        assert!(validate_content(&json!([text_part("a")])).is_ok());
        assert_eq!(
            validate_content(&json!([])),
            Err(PayloadError::EmptyContent)
        );
        assert_eq!(
            validate_content(&json!({})),
            Err(PayloadError::ContentNotArray { found: "object" })
        );
    }

    #[test]
    fn continue_and_compact_forbid_content() {
        for op in ["continue", "compact"] {
            let (id, frame) = build(json!({"operation": op, "request_id": "r"})).unwrap();
            assert_eq!(id, "r");
            assert_eq!(
                frame,
                json!({"type": "payload", "data": {"operation": op, "request_id": "r"}})
            );
            for content in [json!(null), json!([]), json!([text_part("x")])] {
                assert_eq!(
                    build(json!({"operation": op, "content": content})),
                    Err(PayloadError::ContentForbidden {
                        operation: op_static(op)
                    })
                );
            }
            let (_, frame) =
                build(json!({"operation": op, "options": {"confirmation": {"mode": "deny"}}}))
                    .unwrap();
            assert_eq!(
                frame["data"]["options"],
                json!({"confirmation": {"mode": "deny"}})
            );
            assert_eq!(
                build(json!({"operation": op, "start": 0})),
                Err(PayloadError::FieldNotAllowed {
                    field: "start",
                    operation: op_static(op)
                })
            );
        }
    }

    fn op_static(op: &str) -> &'static str {
        Operation::parse(op).unwrap().as_str()
    }

    #[test]
    fn options_rules() {
        for ok in [
            json!({}),
            json!({"model": {}}),
            json!({"model": {"model": "deepseek-flash", "reasoning_effort": "low"}}),
            json!({"tools": {}}),
            json!({"confirmation": {}}),
            json!({"confirmation": {"mode": "ask"}}),
            json!({"confirmation": {"mode": "approve"}}),
            json!({"confirmation": {"mode": "deny"}}),
        ] {
            assert_eq!(validate_options(&ok), Ok(()), "{ok}");
        }
        for (bad, reason) in [
            (json!(null), "must be an object, found null"),
            (json!([]), "must be an object, found array"),
            (
                json!({"model": null}),
                "model must be an object, found null",
            ),
            (
                json!({"model": "x"}),
                "model must be an object, found string",
            ),
            (
                json!({"tools": {"a": 1}}),
                "tools is reserved and must be the empty object {}",
            ),
            (json!({"tools": []}), "tools must be an object, found array"),
            (
                json!({"confirmation": null}),
                "confirmation must be an object, found null",
            ),
            (
                json!({"confirmation": {"mode": "auto"}}),
                "confirmation mode must be ask, approve or deny, found \"auto\"",
            ),
            (
                json!({"confirmation": {"mode": null}}),
                "confirmation mode must be ask, approve or deny, found null",
            ),
            (
                json!({"confirmation": {"mode": "ask", "timeout_ms": 5}}),
                "confirmation has unknown key \"timeout_ms\"; only mode is accepted",
            ),
            (
                json!({"generation": {}}),
                "unknown category \"generation\"; expected model, tools or confirmation",
            ),
        ] {
            assert_eq!(
                validate_options(&bad),
                Err(PayloadError::BadOptions {
                    reason: reason.into()
                }),
                "{bad}"
            );
        }
        assert!(matches!(
            build(json!({"content": [text_part("x")], "options": {"tools": {"x": 1}}})),
            Err(PayloadError::BadOptions { .. })
        ));
        assert_eq!(
            validate_options(&json!({"x": 1})).unwrap_err().to_string(),
            "options: unknown category \"x\"; expected model, tools or confirmation"
        );
    }

    #[test]
    fn history_defaults_and_limits() {
        let (id, frame) = build(json!({"operation": "history"})).unwrap();
        assert_eq!(id, "gen-1");
        assert_eq!(
            frame,
            json!({"type": "payload", "data": {"operation": "history", "request_id": "gen-1",
                "start": 0, "step": 0, "limit": 10}})
        );
        let (_, frame) = build(json!({"operation": "history", "request_id": "history-1",
            "start": 4, "step": 2, "limit": 1}))
        .unwrap();
        assert_eq!(frame["data"]["start"], json!(4));
        assert_eq!(frame["data"]["step"], json!(2));
        assert_eq!(frame["data"]["limit"], json!(1));
        let (_, frame) = build(json!({"operation": "history", "start": u64::MAX})).unwrap();
        assert_eq!(frame["data"]["start"], json!(u64::MAX));
        for (input, reason) in [
            (json!({"limit": 0}), "limit must be 1-10 turns, found 0"),
            (json!({"limit": 11}), "limit must be 1-10 turns, found 11"),
            (
                json!({"limit": 2.0}),
                "limit must be an integer >= 0, found 2.0",
            ),
            (
                json!({"start": -1}),
                "start must be an integer >= 0, found -1",
            ),
            (
                json!({"start": 1.5}),
                "start must be an integer >= 0, found 1.5",
            ),
            (
                json!({"start": "3"}),
                "start must be an integer >= 0, found \"3\"",
            ),
            (
                json!({"step": null}),
                "step must be an integer >= 0, found null",
            ),
        ] {
            let mut input = input;
            input["operation"] = json!("history");
            assert_eq!(
                build(input.clone()),
                Err(PayloadError::BadHistory {
                    reason: reason.into()
                }),
                "{input}"
            );
        }
        let big: Value =
            serde_json::from_str(r#"{"operation":"history","start":18446744073709551616}"#)
                .unwrap();
        assert!(matches!(build(big), Err(PayloadError::BadHistory { .. })));
        for (field, value) in [
            ("content", json!([text_part("x")])),
            ("options", json!({})),
            ("source", json!({})),
        ] {
            let mut input = json!({"operation": "history"});
            input[field] = value;
            let err = build(input).unwrap_err();
            assert!(
                matches!(
                    err,
                    PayloadError::ContentForbidden {
                        operation: "history"
                    } | PayloadError::FieldNotAllowed {
                        operation: "history",
                        ..
                    }
                ),
                "{field}: {err:?}"
            );
        }
        assert_eq!(
            build(json!({"operation": "history", "options": {}}))
                .unwrap_err()
                .to_string(),
            "field \"options\" is not accepted by operation history"
        );
    }

    fn source() -> Value {
        json!({"worker_id": "worker-incarnation", "turn": 0, "step": 1,
            "commit_sequence": "2", "fingerprint": "a".repeat(64)})
    }

    #[test]
    fn answer_rules() {
        let (id, frame) = build(json!({"operation": "answer", "request_id": "answer-1",
            "source": source(), "part": 0, "offset": 0}))
        .unwrap();
        assert_eq!(id, "answer-1");
        assert_eq!(
            frame,
            json!({"type": "payload", "data": {"operation": "answer", "request_id": "answer-1",
                "source": source(), "part": 0, "offset": 0}})
        );
        // Defaults written out; integer commit_sequence kept as given.
        let mut src = source();
        src["commit_sequence"] = json!(2);
        let (_, frame) =
            build(json!({"operation": "answer", "source": src.clone(), "part": 3})).unwrap();
        assert_eq!(frame["data"]["source"], src);
        assert_eq!(frame["data"]["part"], json!(3));
        assert_eq!(frame["data"]["offset"], json!(0));

        let answer_err = |input: Value| match build(input) {
            Err(PayloadError::BadAnswer { reason }) => reason,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            answer_err(json!({"operation": "answer"})),
            "source is required"
        );
        assert_eq!(
            answer_err(json!({"operation": "answer", "source": "x"})),
            "source must be an object, found string"
        );
        for field in SOURCE_FIELDS {
            let mut src = source();
            src.as_object_mut().unwrap().shift_remove(*field);
            assert_eq!(
                answer_err(json!({"operation": "answer", "source": src})),
                format!("source is missing {field}")
            );
        }
        let mut src = source();
        src["extra"] = json!(1);
        assert_eq!(
            answer_err(json!({"operation": "answer", "source": src})),
            "source has unknown field \"extra\""
        );
        for (field, value, rule) in [
            ("worker_id", json!(1), "a string"),
            ("fingerprint", json!(null), "a string"),
            ("turn", json!(-1), "an integer >= 0"),
            ("step", json!(1.5), "an integer >= 0"),
            ("step", json!("1"), "an integer >= 0"),
            ("commit_sequence", json!(-2), "a string or an integer >= 0"),
            ("commit_sequence", json!(2.5), "a string or an integer >= 0"),
        ] {
            let mut src = source();
            src[field] = value.clone();
            assert_eq!(
                answer_err(json!({"operation": "answer", "source": src})),
                format!("source {field} must be {rule}, found {}", describe(&value))
            );
        }
        for (field, value) in [
            ("part", json!(-1)),
            ("offset", json!(0.5)),
            ("offset", json!(null)),
        ] {
            let mut input = json!({"operation": "answer", "source": source()});
            input[field] = value;
            assert!(answer_err(input).starts_with(&format!("{field} must be an integer >= 0")));
        }
        assert_eq!(
            build(json!({"operation": "answer", "source": source(), "options": {}})),
            Err(PayloadError::FieldNotAllowed {
                field: "options",
                operation: "answer"
            })
        );
        assert_eq!(
            build(json!({"operation": "answer", "source": source(), "content": []})),
            Err(PayloadError::ContentForbidden {
                operation: "answer"
            })
        );
    }

    #[test]
    fn queries_over_16_kib_are_refused() {
        let mut src = source();
        src["fingerprint"] = json!("f".repeat(MAX_QUERY_FRAME_BYTES));
        let err = build(json!({"operation": "answer", "source": src})).unwrap_err();
        let PayloadError::QueryTooLarge { bytes, max } = err else {
            panic!("{err:?}");
        };
        assert!(bytes > MAX_QUERY_FRAME_BYTES);
        assert_eq!(max, MAX_QUERY_FRAME_BYTES);
        // Exactly at the limit is accepted.
        let (_, frame) =
            build(json!({"operation": "answer", "request_id": "r", "source": source()})).unwrap();
        let len = serde_json::to_string(&frame).unwrap().len();
        let mut src = source();
        let fp = "a".repeat(64 + MAX_QUERY_FRAME_BYTES - len);
        src["fingerprint"] = json!(fp);
        let (_, frame) =
            build(json!({"operation": "answer", "request_id": "r", "source": src.clone()}))
                .unwrap();
        assert_eq!(
            serde_json::to_string(&frame).unwrap().len(),
            MAX_QUERY_FRAME_BYTES
        );
        src["fingerprint"] = json!(format!("{fp}a"));
        assert!(matches!(
            build(json!({"operation": "answer", "request_id": "r", "source": src})),
            Err(PayloadError::QueryTooLarge { .. })
        ));
        // Runs are not capped here.
        let big = "x".repeat(100_000);
        assert!(build(json!({"content": [text_part(&big)]})).is_ok());
    }

    #[test]
    fn signals() {
        for op in ["status", "options", "shutdown"] {
            assert_eq!(
                build_signal(op, Some("ignored"), Some("r")).unwrap(),
                json!({"type": "signal", "data": {"operation": op}})
            );
        }
        assert_eq!(
            build_signal("cancel", Some("run-1"), Some("run-0"))
                .unwrap()
                .to_string(),
            r#"{"type":"signal","data":{"operation":"cancel","run_id":"run-1"}}"#
        );
        assert_eq!(
            build_signal("cancel", None, Some("run-0")).unwrap()["data"]["run_id"],
            json!("run-0")
        );
        assert_eq!(
            build_signal("cancel", Some(""), Some("run-0")).unwrap()["data"]["run_id"],
            json!("run-0")
        );
        assert_eq!(
            build_signal("cancel", None, None),
            Err(PayloadError::MissingRunId)
        );
        assert_eq!(
            build_signal("cancel", Some(""), Some("")),
            Err(PayloadError::MissingRunId)
        );
        let ok = "r".repeat(128);
        assert!(build_signal("cancel", Some(&ok), None).is_ok());
        assert_eq!(
            build_signal("cancel", Some(&"r".repeat(129)), None),
            Err(PayloadError::RunIdTooLong {
                bytes: 129,
                max: 128
            })
        );
        assert_eq!(
            build_signal("reboot", None, None),
            Err(PayloadError::UnknownSignal {
                op: "\"reboot\"".into()
            })
        );
        assert_eq!(
            build_signal("reboot", None, None).unwrap_err().to_string(),
            "unknown signal \"reboot\"; expected status, options, cancel or shutdown"
        );
    }

    #[test]
    fn error_messages_are_lowercase_without_period() {
        let errors: Vec<Box<dyn std::error::Error>> = vec![
            Box::new(PayloadError::MissingContent),
            Box::new(PayloadError::EmptyContent),
            Box::new(PayloadError::LegacyText),
            Box::new(PayloadError::MissingRunId),
            Box::new(PayloadError::ForbiddenKey { key: "role" }),
            Box::new(PayloadError::QueryTooLarge {
                bytes: 20000,
                max: 16384,
            }),
            Box::new(PayloadError::NotAnObject { found: "array" }),
        ];
        for e in errors {
            let s = e.to_string();
            assert!(s.starts_with(|c: char| c.is_ascii_lowercase()), "{s}");
            assert!(!s.ends_with('.'), "{s}");
        }
        assert_eq!(
            PayloadError::QueryTooLarge {
                bytes: 20000,
                max: 16384
            }
            .to_string(),
            "query frame is 20000 bytes, larger than the worker's 16384-byte limit"
        );
    }

    #[test]
    fn never_panics_on_generated_input() {
        let keys = [
            "operation",
            "content",
            "request_id",
            "options",
            "start",
            "step",
            "limit",
            "source",
            "part",
            "offset",
            "text",
            "role",
            "type",
            "modality",
            "raw",
            "extras",
            "model",
            "tools",
            "confirmation",
            "mode",
            "worker_id",
            "turn",
            "commit_sequence",
            "fingerprint",
            "x",
        ];
        let scalars = [
            json!(null),
            json!(true),
            json!(0),
            json!(-1),
            json!(1.5),
            json!(u64::MAX),
            json!(""),
            json!("message"),
            json!("history"),
            json!("answer"),
            json!("continue"),
            json!("text"),
            json!("image"),
            json!("ask"),
            json!("é"),
            json!(11),
        ];
        let mut rng = Rng::new(0x0123_4567_89ab_cdef);
        fn gen(rng: &mut Rng, keys: &[&str], scalars: &[Value], d: u32) -> Value {
            match rng.below(if d == 0 { 2 } else { 4 }) {
                0 | 1 => scalars[rng.below(scalars.len())].clone(),
                2 => Value::Array(
                    (0..rng.below(4))
                        .map(|_| gen(rng, keys, scalars, d - 1))
                        .collect(),
                ),
                _ => {
                    let mut m = Map::new();
                    for _ in 0..rng.below(5) {
                        m.insert(rng.pick(keys).to_string(), gen(rng, keys, scalars, d - 1));
                    }
                    Value::Object(m)
                }
            }
        }
        let mut accepted = 0;
        for _ in 0..20_000 {
            let v = gen(&mut rng, &keys, &scalars, 4);
            if let Ok((id, frame)) = build_payload(&v, &mut ids()) {
                accepted += 1;
                assert!(!id.is_empty() && id.len() <= MAX_REQUEST_ID_BYTES);
                assert_eq!(frame["data"]["request_id"], json!(id));
            }
            let _ = validate_options(&v);
            let _ = validate_content(&v);
            let text = json!({"type": "confirmation_request", "data": v}).to_string();
            let _ = parse_confirmation_request(&text, "demo");
        }
        assert!(accepted > 0);
    }
}
