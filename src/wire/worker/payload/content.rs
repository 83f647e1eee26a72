//! The rules of a message's `content` parts and of a run's `options`, as
//! the worker checks them, and why a part was refused ([`PartError`]):
//! used for `payload` frames and, on their own, for the arguments of
//! `subagent/send` (`worker::subagent_args`).
//!
//! Pure: no I/O, clock or locks. Never panics on any input.

use std::fmt;

use serde_json::Value;

use super::PayloadError;
use crate::wire::worker::display::{describe, kind, quote};

/// Content part encodings (`type`).
pub const PART_TYPES: &[&str] = &["text", "binary", "external_ref"];

/// Content part media categories (`modality`).
pub const MODALITIES: &[&str] = &["text", "image", "audio", "video", "document"];

/// Confirmation policies a payload may select.
pub const CONFIRMATION_MODES: &[&str] = &["ask", "approve", "deny"];

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
