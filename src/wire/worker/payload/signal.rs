//! Hub -> worker `signal` frames on the event connection: status, options,
//! cancel (with its run id) and shutdown.
//!
//! Pure: no I/O, clock or locks. Never panics on any input.

use serde_json::{Map, Value};

use super::PayloadError;
use crate::wire::worker::display::quote;
use crate::wire::worker::envelope::MAX_ID_BYTES;

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
