//! Sending to a session's worker: the registry handle's one piece of
//! I/O. A payload (an input) or a signal is built by the worker protocol's
//! rules, the session's link and request record are read and changed under
//! the registry lock, and the frame is written on the link after the lock
//! is released. Nothing is ever resent.

use std::fmt;

use serde_json::Value;

use super::{Note, Publisher, RequestRecord, RequestState, Sessions};
use crate::util::time;
use crate::wire::worker::payload;

/// Why an input or signal was not sent.
#[derive(Debug)]
pub enum SendError {
    UnknownSession(String),
    /// Validation failed before anything was written.
    Invalid(String),
    /// No worker is connected, or it lacks the needed capability.
    NotConnected(String),
    /// The socket write failed; nothing was recorded as sent.
    WriteFailed(String),
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::UnknownSession(id) => {
                write!(f, "no session {}", crate::wire::worker::display::quote(id))
            }
            SendError::Invalid(msg) | SendError::NotConnected(msg) => f.write_str(msg),
            SendError::WriteFailed(msg) => write!(f, "not sent: {msg}"),
        }
    }
}

impl std::error::Error for SendError {}

impl Sessions {
    /// Validates an input, sends it as a payload and records it as `sent`.
    /// Returns the request id. Nothing is ever resent.
    pub fn send_input(
        &self,
        publisher: &Publisher,
        session_id: &str,
        input: &Value,
    ) -> Result<String, SendError> {
        let mut new_id = || uuid::Uuid::new_v4().to_string();
        let (request_id, frame) = payload::build_payload(input, &mut new_id)
            .map_err(|e| SendError::Invalid(e.to_string()))?;
        let operation = frame["data"]["operation"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let needs = match operation.as_str() {
            "compact" => Some("context-compact"),
            "history" => Some("session-history"),
            "answer" => Some("answer-pages"),
            _ => None,
        };
        let tracked = matches!(operation.as_str(), "message" | "continue" | "compact");
        let now = time::now_rfc3339();
        let writer = self
            .with(session_id, |s| {
                let link = s
                    .link()
                    .cloned()
                    .ok_or_else(|| SendError::NotConnected("no worker is connected".to_string()))?;
                if let Some(cap) = needs {
                    if !s.has_capability(cap) {
                        return Err(SendError::NotConnected(format!(
                            "the connected worker does not advertise {cap}"
                        )));
                    }
                }
                if tracked {
                    s.push_request(RequestRecord {
                        request_id: request_id.clone(),
                        operation: operation.clone(),
                        state: RequestState::Sent,
                        sent_at: now.clone(),
                        updated_at: now.clone(),
                        detail: None,
                    });
                }
                Ok(link.writer)
            })
            .ok_or_else(|| SendError::UnknownSession(session_id.to_string()))??;
        if let Err(err) = writer.send_text(&frame.to_string()) {
            if tracked {
                self.with(session_id, |s| {
                    s.forget_request(&request_id);
                });
            }
            return Err(SendError::WriteFailed(err.to_string()));
        }
        if tracked {
            let described = self.with(session_id, |s| s.request(&request_id).cloned());
            if let Some(Some(request)) = described {
                publisher.notify(Note::Request {
                    session: session_id.to_string(),
                    request,
                });
            }
        }
        Ok(request_id)
    }

    /// Sends a signal; `cancel` defaults to the most recently observed run.
    pub fn send_signal(
        &self,
        session_id: &str,
        operation: &str,
        run_id: Option<&str>,
    ) -> Result<(), SendError> {
        let (link, last_run) = self
            .with(session_id, |s| {
                (s.link().cloned(), s.last_run_id().map(str::to_string))
            })
            .ok_or_else(|| SendError::UnknownSession(session_id.to_string()))?;
        let frame = payload::build_signal(operation, run_id, last_run.as_deref())
            .map_err(|e| SendError::Invalid(e.to_string()))?;
        let link =
            link.ok_or_else(|| SendError::NotConnected("no worker is connected".to_string()))?;
        link.writer
            .send_text(&frame.to_string())
            .map_err(|e| SendError::WriteFailed(e.to_string()))
    }
}
