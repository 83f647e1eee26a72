//! The remote-tool client: one new WebSocket per call to
//! `hub_remote_call.endpoint` + `/<route>`, exactly one `tool_request` out,
//! exactly one `tool_response` in, then the hub's normal close, all within
//! `hub_remote_call.timeout_ms`. The outcome becomes the text of the
//! scripted model's reply, so tests can read it from the transcript:
//! `<route> succeeded: <result JSON>`, `<route> rejected: <error JSON>` or
//! `<route> failed: <reason>`.
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
use super::transport::{self, cancelled, timed_out, WsUrl};

/// How long one read waits before the cancel channel is checked again.
const POLL: Duration = Duration::from_millis(20);

/// Judges one response frame against the request; the reply text.
pub(crate) fn judge(text: &str, route: &str, request: &Value) -> String {
    let failed = |why: &str| format!("{route} failed: {why}");
    let Ok(response) = serde_json::from_str::<Value>(text) else {
        return failed("the tool response is not JSON");
    };
    if response["type"] != "tool_response" || !response["data"].is_object() {
        return failed("the tool response has the wrong envelope");
    }
    let data = &response["data"];
    for id in ["worker_id", "session_id", "run_id", "request_id"] {
        if !data[id].is_string() || data[id] != request[id] {
            return failed(&format!(
                "the tool response {id} does not match the request"
            ));
        }
    }
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
    let outcome = converse(&mut ws, call, deadline, cancel);
    match outcome {
        Ok(text) => {
            finish(&mut ws, deadline, cancel);
            text
        }
        Err(reason) => {
            abort(&mut ws);
            format!("{route} failed: {reason}")
        }
    }
}

/// Sends the request and reads the one response.
fn converse(
    ws: &mut WebSocket<TcpStream>,
    call: &RemoteCall,
    deadline: Instant,
    cancel: &Receiver<()>,
) -> Result<String, String> {
    ws.get_ref()
        .set_read_timeout(Some(POLL))
        .map_err(|err| err.to_string())?;
    ws.send(Message::text(call.frame.to_string()))
        .map_err(|err| format!("the request write failed: {err}"))?;
    loop {
        if cancelled(cancel) {
            return Err("the run was cancelled".into());
        }
        if Instant::now() >= deadline {
            return Err("timed out".into());
        }
        match ws.read() {
            Ok(Message::Text(text)) => {
                return Ok(judge(text.as_str(), &call.route, &call.frame["data"]))
            }
            Ok(Message::Binary(_)) => return Err("binary tool response".into()),
            Ok(Message::Close(frame)) => {
                let code = frame.map_or(0, |f| u16::from(f.code));
                return Err(format!(
                    "the hub closed the socket ({code}) without a response"
                ));
            }
            Ok(_) => {}
            Err(err) if timed_out(&err) => {}
            Err(err) => return Err(format!("the tool socket failed: {err}")),
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
