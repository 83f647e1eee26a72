//! Worker event frames (worker -> hub on `/agent/<session>/events`): parsing
//! one text frame into an [`Envelope`] with its correlation fields checked,
//! and the bounded metadata of an envelope kept in the transcript's `raw`.
//!
//! Pure: no I/O, clock or locks. Never panics on any input. Fatal problems
//! (no identity, wrong session, oversized ids) are errors; missing
//! correlation fields are issues recorded on the envelope.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;
use std::sync::OnceLock;

use serde_json::{Map, Value};

use super::canonical::{self, Member};
use super::display::{clip, describe, kind, quote};

/// Event names the current worker emits. Others are kept and forwarded.
pub const KNOWN_EVENTS: &[&str] = &[
    "ready",
    "status",
    "options",
    "input_admitted",
    "input_rejected",
    "run_started",
    "input_committed",
    "model_response",
    "tool_calls",
    "tool_results",
    "persisted",
    "export_error",
    "error",
    "run_finished",
    "compact_finished",
    "history",
    "history_error",
    "answer",
    "answer_error",
];

/// Longest accepted correlation field (worker_id, session_id, request_id,
/// run_id, event name), UTF-8 bytes.
pub const MAX_ID_BYTES: usize = 128;

/// Longest string value kept by [`raw_metadata`], bytes.
pub const RAW_STRING_MAX: usize = 256;

/// Most top-level members [`raw_metadata`] keeps; the rest are counted.
pub const RAW_MEMBERS_MAX: usize = 64;

/// Longest top-level key [`raw_metadata`] keeps, bytes; longer ones are
/// counted, never cut (a cut key could collide with another).
pub const RAW_KEY_MAX: usize = 128;

/// One parsed worker event.
#[derive(Debug, Clone)]
pub struct Envelope {
    /// `event`, `session_id`, `worker_id`, `request_id` and `run_id`
    /// (see their accessors).
    ids: Ids,
    /// `None` when missing or not an unsigned 64-bit integer (issue recorded).
    pub sequence: Option<u64>,
    /// Whether `event` is in [`KNOWN_EVENTS`].
    pub known: bool,
    /// Non-fatal problems, e.g. "missing request_id".
    pub issues: Vec<String>,
    /// `serde_json`'s compact encoding of the complete original object,
    /// unknown fields included (the frame as received when it already was
    /// that, see `canonical`).
    text: String,
    /// The top-level members within `text`, when the frame took the
    /// canonical path; empty (and `object` set) otherwise.
    members: Vec<Member>,
    /// Where the members the hub reads are in `members`.
    slots: Slots,
    /// The parsed object, built on first use when the frame took the
    /// canonical path.
    object: OnceLock<Map<String, Value>>,
    /// The parsed `data` member alone, built on first use (canonical path).
    data: OnceLock<Option<Value>>,
}

impl PartialEq for Envelope {
    fn eq(&self, other: &Self) -> bool {
        self.ids == other.ids
            && self.sequence == other.sequence
            && self.known == other.known
            && self.issues == other.issues
            && self.object() == other.object()
    }
}

impl Envelope {
    /// The event name.
    pub fn event(&self) -> &str {
        self.ids.get(Ids::EVENT)
    }

    /// The session id (the route's).
    pub fn session_id(&self) -> &str {
        self.ids.get(Ids::SESSION)
    }

    /// The worker's id.
    pub fn worker_id(&self) -> &str {
        self.ids.get(Ids::WORKER)
    }

    /// `""` when missing or not a string (with an issue recorded).
    pub fn request_id(&self) -> &str {
        self.ids.get(Ids::REQUEST)
    }

    /// `""` when missing or not a string (with an issue recorded).
    pub fn run_id(&self) -> &str {
        self.ids.get(Ids::RUN)
    }

    /// The complete original object, unknown fields included, untouched.
    pub fn object(&self) -> &Map<String, Value> {
        self.object.get_or_init(|| {
            match serde_json::from_str::<Value>(&self.text) {
                Ok(Value::Object(object)) => object,
                // Unreachable: `text` is an encoded object.
                _ => Map::new(),
            }
        })
    }

    /// The `data` member, whatever its type.
    pub fn data(&self) -> Option<&Value> {
        if let Some(object) = self.object.get() {
            return object.get("data");
        }
        self.data
            .get_or_init(|| {
                let member = self.member(DATA)?;
                serde_json::from_str(&self.text[member.value.clone()]).ok()
            })
            .as_ref()
    }

    /// `serde_json::to_string(self.object())`, without building the object.
    pub fn json(&self) -> &str {
        &self.text
    }

    /// Whether the object has a member named one of `keys` (names without
    /// `"`, `\\` or control characters).
    pub fn contains_any_key(&self, keys: &[&str]) -> bool {
        if self.members.is_empty() {
            keys.iter().any(|k| self.object().contains_key(*k))
        } else {
            // A key with an escape holds a character none of `keys` has.
            let text = self.text.as_str();
            self.members
                .iter()
                .any(|m| m.plain_key(text).is_some_and(|k| keys.contains(&k)))
        }
    }

    /// Where the `event` name is in [`json`](Self::json), between its
    /// quotes, when the frame took the canonical path and the name has no
    /// escape.
    pub fn event_range(&self) -> Option<Range<usize>> {
        let m = self.member(EVENT)?;
        m.plain_string.then(|| m.value.start + 1..m.value.end - 1)
    }

    /// A top-level member found by the canonical scan.
    fn member(&self, slot: usize) -> Option<&Member> {
        self.members.get(usize::from(*self.slots.0.get(slot)?))
    }
}

/// How many top-level members the hub reads by name ([`slot_of`]).
const SLOTS: usize = 8;

const EVENT: usize = 1;
const DATA: usize = 7;

/// Index in `members` of each member [`slot_of`] names, or [`Slots::NONE`];
/// found in one pass over the members.
#[derive(Debug, Clone)]
struct Slots([u16; SLOTS]);

impl Slots {
    const NONE: u16 = u16::MAX;

    fn find(text: &str, members: &[Member]) -> Slots {
        let mut slots = [Self::NONE; SLOTS];
        for (i, m) in members.iter().enumerate() {
            let Some(key) = m.plain_key(text) else {
                continue;
            };
            if let (Some(slot), Ok(i)) = (slot_of(key), u16::try_from(i)) {
                slots[slot] = i;
            }
        }
        Slots(slots)
    }
}

/// The slot of each name the hub reads (`type`, the five correlation
/// strings, `sequence`, `data`).
fn slot_of(name: &str) -> Option<usize> {
    Some(match name {
        "type" => 0,
        "event" => EVENT,
        "session_id" => 2,
        "worker_id" => 3,
        "request_id" => 4,
        "run_id" => 5,
        "sequence" => 6,
        "data" => DATA,
        _ => return None,
    })
}

/// Why an event frame was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvelopeError {
    /// The text is not one JSON document.
    NotJson { detail: String },
    /// The document is not a JSON object.
    NotObject,
    /// `type` is not `"event"`; `found` describes what it was.
    WrongType { found: String },
    /// `event` is missing, empty or not a string.
    MissingEvent,
    /// `worker_id` is missing, empty or not a string.
    MissingWorkerId,
    /// `session_id` is missing or not 1-128 of `[A-Za-z0-9_-]`.
    BadSessionId { value: String },
    /// `session_id` is valid but names another session than the route.
    SessionMismatch { expected: String, found: String },
    /// A correlation field or the event name is over [`MAX_ID_BYTES`].
    FieldTooLong {
        field: &'static str,
        bytes: usize,
        max: usize,
    },
}

impl fmt::Display for EnvelopeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotJson { detail } => write!(f, "event frame is not valid JSON: {detail}"),
            Self::NotObject => write!(f, "event frame is not a JSON object"),
            Self::WrongType { found } => {
                write!(f, "event frame type is {found}, expected \"event\"")
            }
            Self::MissingEvent => write!(f, "event frame has no event name"),
            Self::MissingWorkerId => write!(f, "event frame has no worker_id"),
            Self::BadSessionId { value } => write!(
                f,
                "event frame session_id {value} is not 1-128 characters of [A-Za-z0-9_-]"
            ),
            Self::SessionMismatch { expected, found } => write!(
                f,
                "event frame session_id {found} does not match the route's {expected}"
            ),
            Self::FieldTooLong { field, bytes, max } => write!(
                f,
                "event frame {field} is {bytes} bytes, longer than the {max}-byte limit"
            ),
        }
    }
}

impl std::error::Error for EnvelopeError {}

/// Checks a correlation field's length.
fn check_len(field: &'static str, s: &str) -> Result<(), EnvelopeError> {
    if s.len() > MAX_ID_BYTES {
        return Err(EnvelopeError::FieldTooLong {
            field,
            bytes: s.len(),
            max: MAX_ID_BYTES,
        });
    }
    Ok(())
}

/// One top-level member as the checks see it, from the parsed object or
/// from the canonical text.
struct Field<'a> {
    /// The decoded string, when the value is one.
    string: Option<Cow<'a, str>>,
    kind: &'static str,
    /// The value as an unsigned 64-bit integer, when it is one.
    as_u64: Option<u64>,
    source: Source<'a>,
}

enum Source<'a> {
    Value(&'a Value),
    /// A canonical JSON value token.
    Text(&'a str),
}

impl<'a> Field<'a> {
    fn of_value(v: &'a Value) -> Field<'a> {
        Field {
            string: v.as_str().map(Cow::Borrowed),
            kind: kind(v),
            as_u64: v.as_u64(),
            source: Source::Value(v),
        }
    }

    /// A member's value in the canonical text.
    fn of_member(text: &'a str, m: &Member) -> Field<'a> {
        let token = &text[m.value.clone()];
        match m.plain_string(text) {
            Some(plain) => Field {
                string: Some(Cow::Borrowed(plain)),
                kind: "string",
                as_u64: None,
                source: Source::Text(token),
            },
            None => Field::of_text(token),
        }
    }

    fn of_text(token: &'a str) -> Field<'a> {
        let (string, kind, as_u64) = match token.as_bytes().first() {
            Some(b'"') => {
                let decoded = match canonical::plain_string(token) {
                    Some(plain) => Cow::Borrowed(plain),
                    None => Cow::Owned(serde_json::from_str::<String>(token).unwrap_or_default()),
                };
                (Some(decoded), "string", None)
            }
            Some(b'{') => (None, "object", None),
            Some(b'[') => (None, "array", None),
            Some(b't' | b'f') => (None, "boolean", None),
            Some(b'n') => (None, "null", None),
            _ => (None, "number", token.parse::<u64>().ok()),
        };
        Field {
            string,
            kind,
            as_u64,
            source: Source::Text(token),
        }
    }

    /// [`describe`] of the value.
    fn describe(&self) -> String {
        match self.source {
            Source::Value(v) => describe(v),
            Source::Text(token) => {
                describe(&serde_json::from_str::<Value>(token).unwrap_or(Value::Null))
            }
        }
    }
}

/// A required non-empty string field, or `missing` as the error.
fn required<'a>(
    field_value: Option<Field<'a>>,
    field: &'static str,
    missing: EnvelopeError,
) -> Result<Cow<'a, str>, EnvelopeError> {
    match field_value.and_then(|f| f.string) {
        Some(s) if !s.is_empty() => {
            check_len(field, &s)?;
            Ok(s)
        }
        _ => Err(missing),
    }
}

/// An optional string field: `""` plus an issue when missing or not a
/// string; too long is fatal.
fn optional<'a>(
    field_value: Option<Field<'a>>,
    field: &'static str,
    issues: &mut Vec<String>,
) -> Result<Cow<'a, str>, EnvelopeError> {
    match field_value {
        Some(Field {
            string: Some(s), ..
        }) => {
            check_len(field, &s)?;
            Ok(s)
        }
        Some(other) => {
            issues.push(format!("{field} is not a string (found {})", other.kind));
            Ok(Cow::Borrowed(""))
        }
        None => {
            issues.push(format!("missing {field}"));
            Ok(Cow::Borrowed(""))
        }
    }
}

/// The five correlation strings of an envelope in one buffer (one
/// allocation instead of five), each at most [`MAX_ID_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq)]
struct Ids {
    text: String,
    /// Where each string ends in `text`; each starts where the one before
    /// it ends.
    ends: [u16; 5],
}

impl Ids {
    const EVENT: usize = 0;
    const SESSION: usize = 1;
    const WORKER: usize = 2;
    const REQUEST: usize = 3;
    const RUN: usize = 4;

    /// From the strings in the order of the constants above.
    fn new(parts: [&str; 5]) -> Ids {
        let mut text = String::with_capacity(parts.iter().map(|p| p.len()).sum());
        let mut ends = [0u16; 5];
        for (end, part) in ends.iter_mut().zip(parts) {
            text.push_str(part);
            // Checked lengths: five of at most MAX_ID_BYTES fit.
            *end = u16::try_from(text.len()).unwrap_or(u16::MAX);
        }
        Ids { text, ends }
    }

    fn get(&self, i: usize) -> &str {
        let start = match i {
            0 => 0,
            _ => usize::from(self.ends[i - 1]),
        };
        self.text
            .get(start..usize::from(self.ends[i]))
            .unwrap_or_default()
    }
}

/// The checked fields of an envelope.
struct Checked {
    ids: Ids,
    sequence: Option<u64>,
    known: bool,
    issues: Vec<String>,
}

/// The correlation checks, in order, over the members `get` finds.
fn check<'a>(
    get: impl Fn(&str) -> Option<Field<'a>>,
    route_session: &str,
) -> Result<Checked, EnvelopeError> {
    match get("type") {
        Some(Field {
            string: Some(t), ..
        }) if t == "event" => {}
        Some(other) => {
            return Err(EnvelopeError::WrongType {
                found: other.describe(),
            })
        }
        None => {
            return Err(EnvelopeError::WrongType {
                found: "missing".into(),
            })
        }
    }
    let event = required(get("event"), "event", EnvelopeError::MissingEvent)?;
    let worker_id = required(
        get("worker_id"),
        "worker_id",
        EnvelopeError::MissingWorkerId,
    )?;
    let session_id = match get("session_id") {
        Some(Field {
            string: Some(s), ..
        }) => {
            check_len("session_id", &s)?;
            if !crate::wire::ids::is_valid_id(&s) {
                return Err(EnvelopeError::BadSessionId { value: quote(&s) });
            }
            s
        }
        Some(other) => {
            return Err(EnvelopeError::BadSessionId {
                value: other.describe(),
            })
        }
        None => {
            return Err(EnvelopeError::BadSessionId {
                value: "missing".into(),
            })
        }
    };
    if session_id != route_session {
        return Err(EnvelopeError::SessionMismatch {
            expected: quote(route_session),
            found: quote(&session_id),
        });
    }
    let mut issues = Vec::new();
    let request_id = optional(get("request_id"), "request_id", &mut issues)?;
    let run_id = optional(get("run_id"), "run_id", &mut issues)?;
    let sequence = match get("sequence") {
        Some(Field {
            kind: "number",
            as_u64: Some(n),
            ..
        }) => Some(n),
        Some(other) => {
            issues.push(format!(
                "sequence is not an unsigned 64-bit integer (found {})",
                other.describe()
            ));
            None
        }
        None => {
            issues.push("missing sequence".into());
            None
        }
    };
    match get("data").map(|f| f.kind) {
        Some("object" | "array") => {}
        Some(other) => issues.push(format!("data is not an object or array (found {other})")),
        None => issues.push("missing data".into()),
    }
    let known = KNOWN_EVENTS.contains(&&*event);
    Ok(Checked {
        ids: Ids::new([&event, &session_id, &worker_id, &request_id, &run_id]),
        sequence,
        known,
        issues,
    })
}

/// Parses one text frame received on `/agent/<route_session>/events`.
///
/// A frame that already is `serde_json`'s compact encoding of itself (or
/// is that plus whitespace) is checked and kept as text; its object and
/// `data` are parsed only when asked for. Any other frame is parsed into
/// a `Value` and re-encoded. Both paths give the same envelope.
pub fn parse_event(text: &str, route_session: &str) -> Result<Envelope, EnvelopeError> {
    let Some(canonical) = canonical::canonical_object(text) else {
        return parse_value(text, route_session);
    };
    let (text, members) = (canonical.text, canonical.members);
    let slots = Slots::find(&text, &members);
    let checked = {
        let text: &str = &text;
        let (members, slots) = (&members, &slots);
        check(
            |key| {
                let m = members.get(usize::from(slots.0[slot_of(key)?]))?;
                Some(Field::of_member(text, m))
            },
            route_session,
        )?
    };
    Ok(envelope(
        checked,
        text.into_owned(),
        members,
        slots,
        OnceLock::new(),
    ))
}

/// The full path: parse into a `Value`, check, re-encode.
fn parse_value(text: &str, route_session: &str) -> Result<Envelope, EnvelopeError> {
    let value: Value = serde_json::from_str(text).map_err(|err| EnvelopeError::NotJson {
        detail: clip(&err.to_string(), 200),
    })?;
    let Value::Object(object) = value else {
        return Err(EnvelopeError::NotObject);
    };
    let checked = check(|key| object.get(key).map(Field::of_value), route_session)?;
    let text = serde_json::to_string(&object).unwrap_or_else(|_| "{}".to_string());
    let slots = Slots([Slots::NONE; SLOTS]);
    Ok(envelope(
        checked,
        text,
        Vec::new(),
        slots,
        OnceLock::from(object),
    ))
}

fn envelope(
    c: Checked,
    text: String,
    members: Vec<Member>,
    slots: Slots,
    object: OnceLock<Map<String, Value>>,
) -> Envelope {
    Envelope {
        ids: c.ids,
        sequence: c.sequence,
        known: c.known,
        issues: c.issues,
        text,
        members,
        slots,
        object,
        data: OnceLock::new(),
    }
}

/// Bounded metadata of an envelope without its data body, for the
/// transcript's `raw` field: every top-level member except `data` (string
/// values cut to 256 bytes on a char boundary with "…" appended, scalars as
/// they are, nested containers replaced by `{"display_omitted":true}`), then
/// `data_kind` ("object", "array", "missing", or the type name) and `bytes`
/// (the frame's length, passed in). At most [`RAW_MEMBERS_MAX`] members with
/// keys up to [`RAW_KEY_MAX`] bytes are kept; the others are counted in
/// `display_omitted_keys`.
pub fn raw_metadata(env: &Envelope, frame_bytes: usize) -> Value {
    let mut out = Map::new();
    let mut omitted = 0u64;
    for (key, value) in env.object() {
        if key == "data" {
            continue;
        }
        if out.len() >= RAW_MEMBERS_MAX || key.len() > RAW_KEY_MAX {
            omitted += 1;
            continue;
        }
        let shown = match value {
            Value::String(s) => Value::String(clip(s, RAW_STRING_MAX)),
            Value::Array(_) | Value::Object(_) => {
                let mut m = Map::new();
                m.insert("display_omitted".into(), Value::Bool(true));
                Value::Object(m)
            }
            scalar => scalar.clone(),
        };
        out.insert(key.clone(), shown);
    }
    if omitted > 0 {
        out.insert("display_omitted_keys".into(), Value::from(omitted));
    }
    let data_kind = match env.object().get("data") {
        None => "missing",
        Some(v) => kind(v),
    };
    out.insert("data_kind".into(), Value::from(data_kind));
    out.insert("bytes".into(), Value::from(frame_bytes as u64));
    Value::Object(out)
}

/// Keys [`raw_metadata`] adds itself: a worker member of the same name
/// would be overwritten in place.
const RAW_OWN_KEYS: &[&str] = &["display_omitted_keys", "data_kind", "bytes"];

/// Appends `serde_json::to_string(&raw_metadata(env, frame_bytes))` to
/// `out`, from the canonical text when the frame took that path (no
/// `Value` is built for plain members).
pub fn write_raw_metadata(env: &Envelope, frame_bytes: usize, out: &mut String) {
    let text = env.text.as_str();
    let plain = !env.members.is_empty()
        && env.members.iter().all(|m| {
            m.plain_key(text)
                .is_some_and(|k| !RAW_OWN_KEYS.contains(&k))
        });
    if !plain {
        out.push_str(&raw_metadata(env, frame_bytes).to_string());
        return;
    }
    out.push('{');
    let mut kept = 0usize;
    let mut omitted = 0u64;
    let mut data_kind = "missing";
    for (i, m) in env.members.iter().enumerate() {
        let key = m.plain_key(text).unwrap_or_default();
        let value = &text[m.value.clone()];
        if env.slots.0[DATA] == i as u16 {
            data_kind = Field::of_text(value).kind;
            continue;
        }
        if kept >= RAW_MEMBERS_MAX || key.len() > RAW_KEY_MAX {
            omitted += 1;
            continue;
        }
        if kept > 0 {
            out.push(',');
        }
        kept += 1;
        out.push_str(&text[m.key.clone()]);
        out.push(':');
        match value.as_bytes().first() {
            Some(b'"') => match m.plain_string(text) {
                Some(plain) if plain.len() <= RAW_STRING_MAX => out.push_str(value),
                _ => {
                    let decoded = serde_json::from_str::<String>(value).unwrap_or_default();
                    out.push_str(&Value::String(clip(&decoded, RAW_STRING_MAX)).to_string());
                }
            },
            Some(b'{' | b'[') => out.push_str(r#"{"display_omitted":true}"#),
            _ => out.push_str(value),
        }
    }
    use std::fmt::Write as _;
    let sep = if kept > 0 { "," } else { "" };
    if omitted > 0 {
        let _ = write!(out, "{sep}\"display_omitted_keys\":{omitted},");
    } else {
        out.push_str(sep);
    }
    let _ = write!(
        out,
        "\"data_kind\":\"{data_kind}\",\"bytes\":{frame_bytes}}}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testkit::Rng;
    use serde_json::json;

    fn frame(overrides: Value) -> String {
        let mut base = json!({
            "type": "event",
            "event": "run_started",
            "session_id": "demo",
            "worker_id": "204d23ea-0f10-4dbb-b2ef-613bc3f7852d",
            "request_id": "req-001",
            "run_id": "fd473c9f-f424-4c5a-bcc7-eb39698674de",
            "sequence": 3,
            "data": {}
        });
        let m = base.as_object_mut().unwrap();
        for (k, v) in overrides.as_object().unwrap() {
            if v == &json!("__remove__") {
                m.shift_remove(k);
            } else {
                m.insert(k.clone(), v.clone());
            }
        }
        base.to_string()
    }

    fn parse(overrides: Value) -> Result<Envelope, EnvelopeError> {
        parse_event(&frame(overrides), "demo")
    }

    #[test]
    fn the_documented_example_parses() {
        let env = parse(json!({})).unwrap();
        assert_eq!(env.event(), "run_started");
        assert_eq!(env.session_id(), "demo");
        assert_eq!(env.worker_id(), "204d23ea-0f10-4dbb-b2ef-613bc3f7852d");
        assert_eq!(env.request_id(), "req-001");
        assert_eq!(env.run_id(), "fd473c9f-f424-4c5a-bcc7-eb39698674de");
        assert_eq!(env.sequence, Some(3));
        assert!(env.known);
        assert!(env.issues.is_empty());
        assert_eq!(env.data(), Some(&json!({})));
        assert_eq!(env.object().len(), 8);
    }

    #[test]
    fn the_canonical_and_the_full_path_agree() {
        let canonical = frame(json!({"note": "x\ny", "n": 1.5, "k": "é", "bytes": 3}));
        let spaced = canonical.replace(',', " ,\n ").replace(':', ": ");
        let escaped = canonical.replace('é', "\\u00e9");
        for text in [&canonical, &spaced, &escaped] {
            let env = parse_event(text, "demo").unwrap();
            assert_eq!(env.json(), canonical, "{text}");
            assert_eq!(env, parse_event(&canonical, "demo").unwrap());
            assert_eq!(env.data(), Some(&json!({})));
            assert!(env.contains_any_key(&["x", "bytes"]) && !env.contains_any_key(&["byte"]));
            let mut raw = String::new();
            write_raw_metadata(&env, text.len(), &mut raw);
            assert_eq!(raw, raw_metadata(&env, text.len()).to_string());
        }
    }

    #[test]
    fn every_known_event_is_known() {
        for name in KNOWN_EVENTS {
            let env = parse(json!({"event": name})).unwrap();
            assert!(env.known, "{name}");
        }
        assert_eq!(KNOWN_EVENTS.len(), 19);
    }

    #[test]
    fn unknown_events_and_fields_are_kept() {
        let env =
            parse(json!({"event": "future_thing", "extra": {"nested": [1, 2]}, "z": 1})).unwrap();
        assert!(!env.known);
        assert!(env.issues.is_empty());
        assert_eq!(env.object()["extra"], json!({"nested": [1, 2]}));
        assert_eq!(env.object()["z"], json!(1));
        // Order of the original object is preserved.
        let keys: Vec<&String> = env.object().keys().collect();
        assert_eq!(keys.last().unwrap().as_str(), "z");
    }

    #[test]
    fn array_data_is_accepted() {
        let env =
            parse(json!({"event": "tool_calls", "data": [{"id": "c1", "name": "x"}]})).unwrap();
        assert!(env.issues.is_empty());
        assert_eq!(env.data().unwrap()[0]["id"], json!("c1"));
        let env = parse(json!({"event": "tool_results", "data": []})).unwrap();
        assert!(env.issues.is_empty());
    }

    #[test]
    fn non_container_data_is_an_issue() {
        for (data, found) in [
            (json!("x"), "string"),
            (json!(1), "number"),
            (json!(null), "null"),
            (json!(true), "boolean"),
        ] {
            let env = parse(json!({"data": data})).unwrap();
            assert_eq!(
                env.issues,
                vec![format!("data is not an object or array (found {found})")]
            );
            assert_eq!(env.data(), Some(&data));
        }
        let env = parse(json!({"data": "__remove__"})).unwrap();
        assert_eq!(env.issues, vec!["missing data"]);
        assert_eq!(env.data(), None);
    }

    #[test]
    fn missing_correlation_fields_are_issues() {
        let env = parse(json!({
            "request_id": "__remove__", "run_id": "__remove__",
            "sequence": "__remove__", "data": "__remove__"
        }))
        .unwrap();
        assert_eq!(
            env.issues,
            vec![
                "missing request_id",
                "missing run_id",
                "missing sequence",
                "missing data"
            ]
        );
        assert_eq!(env.request_id(), "");
        assert_eq!(env.run_id(), "");
        assert_eq!(env.sequence, None);
    }

    #[test]
    fn empty_ids_before_admission_are_fine() {
        let env = parse(json!({"event": "ready", "request_id": "", "run_id": ""})).unwrap();
        assert!(env.issues.is_empty());
        assert_eq!(env.request_id(), "");
    }

    #[test]
    fn non_string_ids_become_empty_with_an_issue() {
        let env = parse(json!({"request_id": 7, "run_id": null})).unwrap();
        assert_eq!(env.request_id(), "");
        assert_eq!(env.run_id(), "");
        assert_eq!(
            env.issues,
            vec![
                "request_id is not a string (found number)",
                "run_id is not a string (found null)"
            ]
        );
        assert_eq!(env.object()["request_id"], json!(7));
    }

    fn with_sequence(raw: &str) -> Envelope {
        let text = format!(
            r#"{{"type":"event","event":"status","session_id":"demo","worker_id":"w","request_id":"","run_id":"","sequence":{raw},"data":{{}}}}"#
        );
        parse_event(&text, "demo").unwrap()
    }

    #[test]
    fn sequence_edges() {
        assert_eq!(with_sequence("0").sequence, Some(0));
        assert_eq!(with_sequence("1").sequence, Some(1));
        let max = with_sequence("18446744073709551615");
        assert_eq!(max.sequence, Some(u64::MAX));
        assert!(max.issues.is_empty());
        for raw in [
            "18446744073709551616",
            "-1",
            "1.5",
            "1.0",
            "1e3",
            "\"3\"",
            "null",
            "[]",
            "99999999999999999999999999",
        ] {
            let env = with_sequence(raw);
            assert_eq!(env.sequence, None, "{raw}");
            assert_eq!(env.issues.len(), 1, "{raw}");
            assert!(
                env.issues[0].starts_with("sequence is not an unsigned 64-bit integer"),
                "{raw}: {:?}",
                env.issues
            );
        }
        assert!(with_sequence("\"3\"").issues[0].contains("\"3\""));
    }

    #[test]
    fn fatal_shapes() {
        assert!(matches!(
            parse_event("not json", "demo"),
            Err(EnvelopeError::NotJson { .. })
        ));
        assert!(matches!(
            parse_event("", "demo"),
            Err(EnvelopeError::NotJson { .. })
        ));
        assert!(matches!(
            parse_event("{} {}", "demo"),
            Err(EnvelopeError::NotJson { .. })
        ));
        for text in ["[]", "1", "\"event\"", "null"] {
            assert_eq!(parse_event(text, "demo"), Err(EnvelopeError::NotObject));
        }
        assert_eq!(
            parse(json!({"type": "payload"})),
            Err(EnvelopeError::WrongType {
                found: "\"payload\"".into()
            })
        );
        assert_eq!(
            parse(json!({"type": "__remove__"})),
            Err(EnvelopeError::WrongType {
                found: "missing".into()
            })
        );
        assert_eq!(
            parse(json!({"type": 1})),
            Err(EnvelopeError::WrongType { found: "1".into() })
        );
        for event in [json!(""), json!(null), json!(5), json!("__remove__")] {
            assert_eq!(
                parse(json!({"event": event})),
                Err(EnvelopeError::MissingEvent)
            );
        }
        for id in [json!(""), json!(null), json!(5), json!("__remove__")] {
            assert_eq!(
                parse(json!({"worker_id": id})),
                Err(EnvelopeError::MissingWorkerId)
            );
        }
    }

    #[test]
    fn session_id_rules() {
        assert_eq!(
            parse(json!({"session_id": "../etc"})),
            Err(EnvelopeError::BadSessionId {
                value: "\"../etc\"".into()
            })
        );
        assert_eq!(
            parse(json!({"session_id": ""})),
            Err(EnvelopeError::BadSessionId {
                value: "\"\"".into()
            })
        );
        assert_eq!(
            parse(json!({"session_id": 3})),
            Err(EnvelopeError::BadSessionId { value: "3".into() })
        );
        assert_eq!(
            parse(json!({"session_id": "__remove__"})),
            Err(EnvelopeError::BadSessionId {
                value: "missing".into()
            })
        );
        assert_eq!(
            parse(json!({"session_id": "other"})),
            Err(EnvelopeError::SessionMismatch {
                expected: "\"demo\"".into(),
                found: "\"other\"".into()
            })
        );
        // Case matters.
        assert!(matches!(
            parse(json!({"session_id": "Demo"})),
            Err(EnvelopeError::SessionMismatch { .. })
        ));
        let long = "s".repeat(128);
        let text = frame(json!({"session_id": long}));
        assert_eq!(parse_event(&text, &long).unwrap().session_id(), long);
        let longer = "s".repeat(129);
        let text = frame(json!({"session_id": longer}));
        assert_eq!(
            parse_event(&text, &longer),
            Err(EnvelopeError::FieldTooLong {
                field: "session_id",
                bytes: 129,
                max: 128
            })
        );
    }

    #[test]
    fn id_lengths_128_and_129_bytes() {
        // 126 ASCII + one 2-byte char = 128 bytes; + 3-byte char = 129.
        let ok = format!("{}é", "a".repeat(126));
        let too_long = format!("{}€", "a".repeat(126));
        assert_eq!(ok.len(), 128);
        assert_eq!(too_long.len(), 129);
        for field in ["worker_id", "request_id", "run_id", "event"] {
            let env = parse(json!({ field: ok })).unwrap();
            assert_eq!(env.object()[field], json!(ok));
            let err = parse(json!({ field: too_long })).unwrap_err();
            let EnvelopeError::FieldTooLong {
                field: f,
                bytes,
                max,
            } = err
            else {
                panic!("{field}: {err:?}");
            };
            assert_eq!((f, bytes, max), (field, 129, 128));
        }
        assert_eq!(parse(json!({"worker_id": ok})).unwrap().worker_id(), ok);
        assert_eq!(parse(json!({"run_id": ok})).unwrap().run_id(), ok);
        let env = parse(json!({"event": ok})).unwrap();
        assert!(!env.known);
    }

    #[test]
    fn error_messages() {
        let e = EnvelopeError::FieldTooLong {
            field: "run_id",
            bytes: 129,
            max: 128,
        };
        assert_eq!(
            e.to_string(),
            "event frame run_id is 129 bytes, longer than the 128-byte limit"
        );
        let e = parse(json!({"session_id": "../etc"})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "event frame session_id \"../etc\" is not 1-128 characters of [A-Za-z0-9_-]"
        );
        let e = parse(json!({"session_id": "x"})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "event frame session_id \"x\" does not match the route's \"demo\""
        );
        let e = parse_event("{", "demo").unwrap_err();
        assert!(e.to_string().starts_with("event frame is not valid JSON: "));
        let huge_type = "t".repeat(10_000);
        let e = parse(json!({"type": huge_type})).unwrap_err();
        assert!(e.to_string().len() < 200);
        for e in [
            EnvelopeError::NotObject,
            EnvelopeError::MissingEvent,
            EnvelopeError::MissingWorkerId,
        ] {
            let s = e.to_string();
            assert!(!s.ends_with('.'));
            assert!(s.starts_with(|c: char| c.is_ascii_lowercase()));
        }
    }

    #[test]
    fn raw_metadata_is_bounded_and_drops_data() {
        let text = frame(json!({
            "event": "model_response",
            "data": {"content": [{"type": "text", "raw": "x".repeat(5000)}]},
            "note": "é".repeat(300),
            "extra": [1, 2, 3],
            "flag": true,
            "nothing": null,
        }));
        let env = parse_event(&text, "demo").unwrap();
        let raw = raw_metadata(&env, text.len());
        let m = raw.as_object().unwrap();
        assert!(!m.contains_key("data"));
        assert_eq!(m["type"], json!("event"));
        assert_eq!(m["sequence"], json!(3));
        assert_eq!(m["flag"], json!(true));
        assert_eq!(m["nothing"], json!(null));
        assert_eq!(m["extra"], json!({"display_omitted": true}));
        let note = m["note"].as_str().unwrap();
        assert!(note.ends_with('…'));
        assert_eq!(note.len(), 256 + '…'.len_utf8());
        assert_eq!(m["data_kind"], json!("object"));
        assert_eq!(m["bytes"], json!(text.len()));
        let keys: Vec<&String> = m.keys().collect();
        assert_eq!(keys[0], "type");
        assert_eq!(keys[keys.len() - 2..], ["data_kind", "bytes"]);
    }

    #[test]
    fn raw_metadata_kinds_and_limits() {
        for (data, kind) in [
            (json!([]), "array"),
            (json!("s"), "string"),
            (json!(1), "number"),
            (json!(null), "null"),
            (json!("__remove__"), "missing"),
        ] {
            let env = parse(json!({ "data": data })).unwrap();
            assert_eq!(raw_metadata(&env, 10)["data_kind"], json!(kind));
        }
        let mut over = Map::new();
        for i in 0..200 {
            over.insert(format!("f{i}"), json!(i));
        }
        over.insert("k".repeat(129), json!(1));
        let env = parse(Value::Object(over)).unwrap();
        let raw = raw_metadata(&env, 0);
        let m = raw.as_object().unwrap();
        // 64 kept + display_omitted_keys + data_kind + bytes.
        assert_eq!(m.len(), RAW_MEMBERS_MAX + 3);
        // 8 envelope members (7 kept besides data) + 201 extra, 64 kept.
        assert_eq!(m["display_omitted_keys"], json!(7 + 201 - 64));
        // A 256-byte string is kept whole.
        let env = parse(json!({"note": "n".repeat(256)})).unwrap();
        assert_eq!(raw_metadata(&env, 0)["note"], json!("n".repeat(256)));
    }

    #[test]
    fn never_panics_on_generated_frames() {
        let pieces = [
            "{",
            "}",
            "[",
            "]",
            "\"type\"",
            "\"event\"",
            ":",
            ",",
            "\"session_id\"",
            "\"demo\"",
            "\"worker_id\"",
            "\"w\"",
            "\"sequence\"",
            "18446744073709551616",
            "-0",
            "1e999",
            "\"data\"",
            "null",
            "\"\\ud800\"",
            "\"é\"",
            "true",
        ];
        let mut rng = Rng::new(0x243f_6a88_85a3_08d3);
        for _ in 0..20_000 {
            let mut text = String::new();
            let n = rng.below(24);
            // The pieces come from a branch of the stream that starts where
            // the outer one stands, leaving the outer one untouched.
            let mut inner = rng.clone();
            for _ in 0..n {
                text.push_str(inner.pick(&pieces));
            }
            if let Ok(env) = parse_event(&text, "demo") {
                let _ = raw_metadata(&env, text.len());
            }
        }
        let good = r#"{"type":"event","event":"e","session_id":"demo","worker_id":"w","sequence":1e999,"data":{}}"#;
        let _ = parse_event(good, "demo");
    }
}
