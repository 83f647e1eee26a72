//! The remote-tool client: one new WebSocket per call to
//! `hub_remote_call.endpoint` + `/<route>`, exactly one `tool_request` out,
//! exactly one `tool_response` in, then the hub's normal close, all within
//! `hub_remote_call.timeout_ms`. The outcome is one line of text, so tests
//! can read it from the transcript (the scripted model's reply for `/plan`,
//! the tool result's output for the subagent triggers):
//! `<route> succeeded: <result JSON>`, `<route> rejected: <error JSON>` or
//! `<route> failed: <reason>`. The exchange itself is
//! [`transport::converse`].
//!
//! Runs on its own helper thread. Wakes for cancellation by polling its
//! cancel channel between short reads; a cancelled call closes the socket
//! (the hub then never commits it).

use std::net::TcpStream;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use serde_json::Value;
use tungstenite::{Message, WebSocket};

use super::engine::RemoteCall;
use super::transport::{self, abort, cancelled, timed_out, Peer, WsUrl};

/// Judges one response frame against the request; the reply text.
pub(crate) fn judge(text: &str, route: &str, request: &Value) -> String {
    let failed = |why: &str| format!("{route} failed: {why}");
    let data = match transport::reply_data(text, request, Peer::Tool) {
        Ok(data) => data,
        Err(reason) => return failed(&reason),
    };
    match data["status"].as_str() {
        Some("succeeded") => format!("{route} succeeded: {}", data["result"]),
        Some("rejected") => format!("{route} rejected: {}", data["error"]),
        _ => failed("the tool response status is not succeeded or rejected"),
    }
}

/// Performs one call; never retries.
pub(crate) fn call(
    base: &WsUrl,
    call: &RemoteCall,
    timeout: Duration,
    cancel: &Receiver<()>,
) -> String {
    let route = call.route.as_str();
    let deadline = Instant::now() + timeout;
    let url = base.with_route(route);
    let mut ws = match transport::connect(&url, timeout) {
        Ok(ws) => ws,
        Err(err) => return format!("{route} failed: connection failed: {err}"),
    };
    let reply = transport::converse(&mut ws, &call.frame, deadline, cancel, Peer::Tool);
    match reply {
        Ok(text) => {
            finish(&mut ws, deadline, cancel);
            judge(&text, route, &call.frame["data"])
        }
        Err(reason) => {
            abort(&mut ws);
            format!("{route} failed: {reason}")
        }
    }
}

/// After the response: answer the hub's close (tungstenite replies on the
/// next flush), or give up at the deadline.
fn finish(ws: &mut WebSocket<TcpStream>, deadline: Instant, cancel: &Receiver<()>) {
    loop {
        if cancelled(cancel) || Instant::now() >= deadline {
            return abort(ws);
        }
        match ws.read() {
            Ok(Message::Close(_)) => {
                let _ = ws.flush();
            }
            Ok(_) => {}
            Err(err) if timed_out(&err) => {
                let _ = ws.flush();
            }
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request() -> Value {
        json!({"worker_id": "w", "session_id": "s", "run_id": "r", "request_id": "q",
               "arguments": {}})
    }

    fn response(data: Value) -> String {
        json!({"type": "tool_response", "data": data}).to_string()
    }

    #[test]
    fn answers_become_reply_text() {
        let ids = json!({"worker_id": "w", "session_id": "s", "run_id": "r", "request_id": "q"});
        let mut ok = ids.clone();
        ok["status"] = json!("succeeded");
        ok["result"] = json!({"revision": 1});
        assert_eq!(
            judge(&response(ok), "plan/replace", &request()),
            "plan/replace succeeded: {\"revision\":1}"
        );
        let mut no = ids.clone();
        no["status"] = json!("rejected");
        no["error"] = json!({"code": "unauthorized", "message": "m"});
        assert_eq!(
            judge(&response(no), "plan/read", &request()),
            "plan/read rejected: {\"code\":\"unauthorized\",\"message\":\"m\"}"
        );
        let mut wrong = ids.clone();
        wrong["run_id"] = json!("other");
        wrong["status"] = json!("succeeded");
        assert!(judge(&response(wrong), "x", &request()).starts_with("x failed:"));
        assert!(judge("nope", "x", &request()).starts_with("x failed:"));
        assert!(judge(&response(ids), "x", &request()).starts_with("x failed:"));
    }
}
