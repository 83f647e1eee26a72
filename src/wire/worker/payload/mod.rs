//! Hub -> worker `payload` frames on the event connection, built from panel
//! (or REST) input and validated by the worker's own rules so a mistake is
//! reported before the round trip: the five operations, their fields and
//! defaults, request ids, the history and answer query fields, and
//! [`PayloadError`], which the content rules (`content.rs`) and `signal`
//! frames (`signal.rs`) report with too. The confirmation socket's frames
//! are in `confirm_frames`.
//!
//! Pure: no I/O, clock or locks (request ids come from a caller-supplied
//! generator). Never panics on any input. The worker stays authoritative.

mod content;
mod signal;
#[cfg(test)]
mod tests;

use std::fmt;

use serde_json::{Map, Value};

use super::display::{clip, describe, kind, quote};

pub use content::{
    validate_content, validate_options, PartError, CONFIRMATION_MODES, MODALITIES, PART_TYPES,
};
pub use signal::{build_signal, SignalOp};

/// Longest request id, UTF-8 bytes.
pub const MAX_REQUEST_ID_BYTES: usize = 128;

/// The worker rejects history and answer query envelopes above this many
/// encoded bytes (`query_too_large`).
pub const MAX_QUERY_FRAME_BYTES: usize = 16 * 1024;

/// Largest `limit` of a history query.
pub const MAX_HISTORY_LIMIT: u64 = 10;

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
    /// The cancel run id is longer than
    /// [`MAX_ID_BYTES`](super::envelope::MAX_ID_BYTES).
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
