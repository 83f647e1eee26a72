//! The confirmation client: one new WebSocket per prompt to
//! `security.confirmation.endpoint`, exactly one `confirmation_request`
//! out, exactly one `confirmation_response` in, then a normal close, all
//! within `security.confirmation.timeout_ms`. Anything short of a valid
//! answer echoing all four ids is a denial, as in the real worker.
//!
//! Runs on its own helper thread. Wakes for cancellation by polling its
//! cancel channel between short reads; a cancelled exchange closes the
//! socket and is denied.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use serde_json::Value;
use tungstenite::{Message, WebSocket};

use super::engine::{ConfirmRequest, Decision};
use super::transport::{self, cancelled, timed_out, WsUrl};

/// How long one read waits before the cancel channel is checked again.
const POLL: Duration = Duration::from_millis(20);
/// The reason a response without one gets.
const DEFAULT_REASON: &str = "operator decision";

fn deny(reason: impl Into<String>) -> Decision {
    Decision {
        approved: false,
        reason: reason.into(),
    }
}

/// Judges one response frame against the request's `data`.
pub(crate) fn judge(text: &str, request: &Value) -> Decision {
    let Ok(response) = serde_json::from_str::<Value>(text) else {
        return deny("confirmation response is not JSON");
    };
    if response["type"] != "confirmation_response" || !response["data"].is_object() {
        return deny("confirmation response has the wrong envelope");
    }
    let data = &response["data"];
    for id in ["worker_id", "session_id", "run_id", "confirmation_id"] {
        if !data[id].is_string() || data[id] != request[id] {
            return deny(format!(
                "confirmation response {id} does not match the request"
            ));
        }
    }
    let reason = match data.get("reason") {
        None => DEFAULT_REASON.to_string(),
        Some(Value::String(reason)) => reason.clone(),
        Some(_) => return deny("confirmation response reason is not a string"),
    };
    match data["decision"].as_str() {
        Some("approved") => Decision {
            approved: true,
            reason,
        },
        Some("denied") => deny(reason),
        _ => deny("confirmation response decision is not approved or denied"),
    }
}

/// Performs one exchange; never retries.
pub(crate) fn exchange(
    url: &WsUrl,
    request: &ConfirmRequest,
    timeout: Duration,
    cancel: &Receiver<()>,
) -> Decision {
    let deadline = Instant::now() + timeout;
    let mut ws = match transport::connect(url, timeout) {
        Ok(ws) => ws,
        Err(err) => return deny(format!("confirmation connection failed: {err}")),
    };
    let decision = converse(&mut ws, request, deadline, cancel);
    match decision {
        Ok(decision) => finish(&mut ws, decision, deadline, cancel),
        Err(reason) => {
            abort(&mut ws);
            deny(reason)
        }
    }
}

/// Sends the request and reads the one response.
fn converse(
    ws: &mut WebSocket<TcpStream>,
    request: &ConfirmRequest,
    deadline: Instant,
    cancel: &Receiver<()>,
) -> Result<Decision, String> {
    ws.get_ref()
        .set_read_timeout(Some(POLL))
        .map_err(|err| err.to_string())?;
    ws.send(Message::text(request.frame.to_string()))
        .map_err(|err| format!("confirmation request write failed: {err}"))?;
    loop {
        if cancelled(cancel) {
            return Err("the run was cancelled".into());
        }
        if Instant::now() >= deadline {
            return Err("confirmation timed out".into());
        }
        match ws.read() {
            Ok(Message::Text(text)) => return Ok(judge(text.as_str(), &request.frame["data"])),
            Ok(Message::Binary(_)) => return Err("binary confirmation response".into()),
            Ok(Message::Close(_)) => {
                return Err("the hub closed the confirmation socket without a response".into())
            }
            Ok(_) => {}
            Err(err) if timed_out(&err) => {}
            Err(err) => return Err(format!("confirmation socket failed: {err}")),
        }
    }
}

/// Closes normally after a response; the decision stands only if the
/// close completes before the deadline and the run was not cancelled.
fn finish(
    ws: &mut WebSocket<TcpStream>,
    decision: Decision,
    deadline: Instant,
    cancel: &Receiver<()>,
) -> Decision {
    if ws.close(None).is_err() {
        return decision;
    }
    loop {
        if cancelled(cancel) {
            abort(ws);
            return deny("the run was cancelled");
        }
        if Instant::now() >= deadline {
            abort(ws);
            return deny("confirmation close did not finish before the deadline");
        }
        match ws.read() {
            // The hub's close frame completes the handshake.
            Ok(Message::Close(_)) => return decision,
            Ok(_) => {}
            Err(err) if timed_out(&err) => {
                let _ = ws.flush();
            }
            Err(_) => return decision, // closed
        }
    }
}

/// Drops the exchange: a close frame if possible, then the socket.
fn abort(ws: &mut WebSocket<TcpStream>) {
    let _ = ws.close(None);
    let _ = ws.flush();
    let _ = ws.get_ref().shutdown(std::net::Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request() -> Value {
        json!({"worker_id": "w", "session_id": "s", "run_id": "r", "confirmation_id": "c",
               "call": {"id": "call-1"}})
    }

    fn response(data: Value) -> String {
        json!({"type": "confirmation_response", "data": data}).to_string()
    }

    #[test]
    fn valid_answers() {
        let approved = judge(
            &response(json!({"worker_id": "w", "session_id": "s", "run_id": "r",
                             "confirmation_id": "c", "decision": "approved", "extra": 1})),
            &request(),
        );
        assert_eq!(
            approved,
            Decision {
                approved: true,
                reason: DEFAULT_REASON.into()
            }
        );
        let denied = judge(
            &response(json!({"worker_id": "w", "session_id": "s", "run_id": "r",
                             "confirmation_id": "c", "decision": "denied", "reason": "nope"})),
            &request(),
        );
        assert_eq!(
            denied,
            Decision {
                approved: false,
                reason: "nope".into()
            }
        );
    }

    #[test]
    fn anything_else_is_a_denial() {
        let ids =
            json!({"worker_id": "w", "session_id": "s", "run_id": "r", "confirmation_id": "c"});
        let with = |key: &str, value: Value| {
            let mut data = ids.clone();
            data["decision"] = json!("approved");
            data[key] = value;
            response(data)
        };
        for text in [
            "garbage".to_string(),
            json!({"type": "confirmation_request", "data": ids}).to_string(),
            json!({"type": "confirmation_response", "data": "x"}).to_string(),
            with("worker_id", json!("other")),
            with("session_id", json!(null)),
            with("run_id", json!("r2")),
            with("confirmation_id", json!("c2")),
            with("decision", json!("maybe")),
            with("reason", json!(5)),
        ] {
            assert!(!judge(&text, &request()).approved, "{text}");
        }
        let mut missing = ids.clone();
        missing.as_object_mut().unwrap().remove("worker_id");
        missing["decision"] = json!("approved");
        assert!(!judge(&response(missing), &request()).approved);
    }
}
