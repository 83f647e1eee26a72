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
use super::transport::{self, abort, cancelled, timed_out, Peer, WsUrl};

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
    let data = match transport::reply_data(text, request, Peer::Confirmation) {
        Ok(data) => data,
        Err(reason) => return deny(reason),
    };
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
    let reply = transport::converse(
        &mut ws,
        &request.frame,
        deadline,
        cancel,
        Peer::Confirmation,
    );
    match reply {
        Ok(text) => {
            let decision = judge(&text, &request.frame["data"]);
            finish(&mut ws, decision, deadline, cancel)
        }
        Err(reason) => {
            abort(&mut ws);
            deny(reason)
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
