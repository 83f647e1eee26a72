//! Pure: the HTTP replies of the offline provider, in the OpenAI
//! chat-completions dialect the worker's provider plugins read.
//!
//! A streamed answer (the default) is one `text/event-stream` body, sent
//! whole with a `Content-Length`:
//!
//! ```text
//! data: {"id":…,"object":"chat.completion.chunk",…,"choices":[{"index":0,
//!        "delta":{"role":"assistant","content":"mock response"},"finish_reason":null}]}
//!
//! data: {…,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}
//!
//! data: [DONE]
//! ```
//!
//! A tool call is the same with `"delta":{"role":"assistant","tool_calls":[
//! {"index":0,"id":"mock-call-1","type":"function","function":{"name":
//! "run_command","arguments":"{…}"}}]}` and `finish_reason: "tool_calls"`.
//! A request with `"stream": false` gets one `chat.completion` object.

use serde_json::{json, Value};

use super::scenario::{self, Answer, Outcome, Scenario};

/// What a reply needs beyond the answer: the completion's id (one for all
/// its chunks), its creation time in Unix seconds, and the model name it
/// reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub id: String,
    pub created: u64,
    pub model: String,
}

/// One HTTP reply, ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    /// Extra headers besides `Content-Type` and `Content-Length`.
    pub headers: &'static [(&'static str, &'static str)],
    pub body: Vec<u8>,
    /// Send only after the `slow` scenario's wait.
    pub slow: bool,
}

const JSON: &str = "application/json";
const EVENT_STREAM: &str = "text/event-stream";

impl Reply {
    fn json(status: u16, body: Value) -> Reply {
        Reply {
            status,
            content_type: JSON,
            headers: &[],
            body: body.to_string().into_bytes(),
            slow: false,
        }
    }
}

/// The request as the I/O side read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request<'a> {
    /// A method other than POST.
    NotPost,
    /// A body longer than the limit (declared or read); nothing of it kept.
    TooLarge { max: usize },
    /// A body sent with `Transfer-Encoding` (chunked), never read.
    Chunked,
    /// A POST with its complete body.
    Post(&'a [u8]),
}

/// The settings [`reply`] reads.
#[derive(Debug, Clone, Copy)]
pub struct Script<'a> {
    /// For a model name that names no scenario (`mock.scenario`).
    pub fallback: Scenario,
    /// What `auto` proposes.
    pub tool_command: &'a str,
}

/// The whole provider for one request: method, body, scenario, answer.
/// `completion` supplies the id and time; its `model` is used only when the
/// request names none.
pub fn reply(script: Script<'_>, request: Request<'_>, completion: Completion) -> Reply {
    let body = match request {
        Request::NotPost => {
            let mut reply = Reply::json(405, json!({"error": "POST only"}));
            reply.headers = &[("Allow", "POST")];
            return reply;
        }
        Request::TooLarge { max } => {
            return Reply::json(
                413,
                json!({
                    "error": "payload_too_large",
                    "message": format!("the request body exceeds {max} bytes"),
                }),
            )
        }
        Request::Chunked => {
            return Reply::json(
                411,
                json!({
                    "error": "length_required",
                    "message": "send the body with a Content-Length, not Transfer-Encoding",
                }),
            )
        }
        Request::Post(body) => body,
    };
    let request = match scenario::parse_request(body) {
        Ok(request) => request,
        Err(err) => return failure(&err.to_string()),
    };
    let scenario = scenario::scenario_for_model(request.model.as_deref(), script.fallback);
    let completion = Completion {
        model: request.model.clone().unwrap_or(completion.model),
        ..completion
    };
    match scenario::decide(scenario, &request, script.tool_command) {
        Outcome::Fail => Reply::json(
            500,
            json!({"error": {"message": "mock provider scenario error"}}),
        ),
        Outcome::Answer { answer, slow } => {
            let mut reply = if request.stream {
                Reply {
                    status: 200,
                    content_type: EVENT_STREAM,
                    headers: &[("Cache-Control", "no-cache")],
                    body: event_stream(&answer, &completion).into_bytes(),
                    slow: false,
                }
            } else {
                Reply::json(200, whole(&answer, &completion))
            };
            reply.slow = slow;
            reply
        }
    }
}

/// A request the provider could not serve (500, as the Node hub's provider
/// answers it, with the reason in `message`).
pub fn failure(message: &str) -> Reply {
    Reply::json(
        500,
        json!({"error": "mock provider failure", "message": message}),
    )
}

/// The answer to a `slow` request still waiting when the provider stops.
pub fn stopping() -> Reply {
    Reply::json(
        503,
        json!({"error": "mock provider stopping", "message": "the offline provider is shutting down"}),
    )
}

/// The stream's chunks, in order (without the final `[DONE]`).
pub fn chunks(answer: &Answer, completion: &Completion) -> Vec<Value> {
    let delta = match answer {
        Answer::Text(text) => json!({"role": "assistant", "content": text}),
        Answer::ToolCall {
            id,
            name,
            arguments,
        } => json!({
            "role": "assistant",
            "tool_calls": [{
                "index": 0,
                "id": id,
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }],
        }),
    };
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": completion.id,
            "object": "chat.completion.chunk",
            "created": completion.created,
            "model": completion.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
    };
    vec![
        chunk(delta, Value::Null),
        chunk(json!({}), Value::from(answer.finish_reason())),
    ]
}

/// The server-sent-events body: each chunk as a `data:` event, then
/// `data: [DONE]`.
pub fn event_stream(answer: &Answer, completion: &Completion) -> String {
    let mut out = String::new();
    for chunk in chunks(answer, completion) {
        out.push_str("data: ");
        out.push_str(&chunk.to_string());
        out.push_str("\n\n");
    }
    out.push_str("data: [DONE]\n\n");
    out
}

/// The non-streamed `chat.completion` object.
pub fn whole(answer: &Answer, completion: &Completion) -> Value {
    let message = match answer {
        Answer::Text(text) => json!({"role": "assistant", "content": text}),
        Answer::ToolCall {
            id,
            name,
            arguments,
        } => json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [{
                "id": id,
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }],
        }),
    };
    json!({
        "id": completion.id,
        "object": "chat.completion",
        "created": completion.created,
        "model": completion.model,
        "choices": [{"index": 0, "message": message, "finish_reason": answer.finish_reason()}],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: Script<'static> = Script {
        fallback: Scenario::Auto,
        tool_command: "touch marker",
    };

    fn completion() -> Completion {
        Completion {
            id: "chatcmpl-1".into(),
            created: 1_700_000_000,
            model: "mock".into(),
        }
    }

    fn post(body: Value) -> Reply {
        reply(
            SCRIPT,
            Request::Post(body.to_string().as_bytes()),
            completion(),
        )
    }

    /// The `data:` payloads of an event-stream body, checking the framing.
    fn events(body: &[u8]) -> Vec<String> {
        let text = std::str::from_utf8(body).unwrap();
        assert!(text.ends_with("\n\n"), "{text:?}");
        text.trim_end_matches("\n\n")
            .split("\n\n")
            .map(|event| {
                event
                    .strip_prefix("data: ")
                    .unwrap_or_else(|| panic!("not a data event: {event:?}"))
                    .to_owned()
            })
            .collect()
    }

    #[test]
    fn a_text_answer_streams_two_chunks_and_done() {
        let r = post(json!({"model": "mock-text", "messages": []}));
        assert_eq!((r.status, r.content_type), (200, "text/event-stream"));
        assert_eq!(r.headers, &[("Cache-Control", "no-cache")]);
        assert!(!r.slow);
        let events = events(&r.body);
        assert_eq!(events.len(), 3);
        assert_eq!(events[2], "[DONE]");
        let first: Value = serde_json::from_str(&events[0]).unwrap();
        assert_eq!(
            first,
            json!({
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "created": 1_700_000_000u64,
                "model": "mock-text",
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": "mock response"}, "finish_reason": null}]
            })
        );
        let last: Value = serde_json::from_str(&events[1]).unwrap();
        assert_eq!(last["id"], "chatcmpl-1");
        assert_eq!(
            last["choices"],
            json!([{"index": 0, "delta": {}, "finish_reason": "stop"}])
        );
    }

    #[test]
    fn a_tool_call_streams_one_complete_call() {
        let r = post(json!({"model": "mock-tool", "messages": [{"role": "user", "content": "x"}]}));
        let events = events(&r.body);
        let first: Value = serde_json::from_str(&events[0]).unwrap();
        let call = &first["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(call["index"], 0);
        assert_eq!(call["id"], "mock-call-1");
        assert_eq!(call["type"], "function");
        assert_eq!(call["function"]["name"], "run_command");
        let args: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(
            args,
            json!({"command": "touch marker", "expected_runtime_milliseconds": 1000})
        );
        let last: Value = serde_json::from_str(&events[1]).unwrap();
        assert_eq!(last["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(events[2], "[DONE]");
    }

    #[test]
    fn the_fallback_scenario_and_default_model_name_apply() {
        let r = reply(
            Script {
                fallback: Scenario::Echo,
                tool_command: "",
            },
            Request::Post(br#"{"messages":[{"role":"user","content":"hi"}]}"#),
            completion(),
        );
        let first: Value = serde_json::from_str(&events(&r.body)[0]).unwrap();
        assert_eq!(first["model"], "mock");
        assert_eq!(first["choices"][0]["delta"]["content"], "echo: hi");
    }

    #[test]
    fn slow_is_marked_for_the_wait() {
        let r = post(json!({"model": "mock-slow"}));
        assert!(r.slow);
        assert_eq!(r.status, 200);
        let first: Value = serde_json::from_str(&events(&r.body)[0]).unwrap();
        assert_eq!(first["choices"][0]["delta"]["content"], "mock response");
    }

    #[test]
    fn errors_and_refusals() {
        let r = post(json!({"model": "mock-error"}));
        assert_eq!((r.status, r.content_type), (500, "application/json"));
        assert_eq!(
            serde_json::from_slice::<Value>(&r.body).unwrap(),
            json!({"error": {"message": "mock provider scenario error"}})
        );

        let r = reply(SCRIPT, Request::NotPost, completion());
        assert_eq!(r.status, 405);
        assert_eq!(r.headers, &[("Allow", "POST")]);
        assert_eq!(r.body, br#"{"error":"POST only"}"#);

        let r = reply(SCRIPT, Request::TooLarge { max: 10 }, completion());
        assert_eq!(r.status, 413);
        assert_eq!(
            serde_json::from_slice::<Value>(&r.body).unwrap()["message"],
            "the request body exceeds 10 bytes"
        );

        let r = reply(SCRIPT, Request::Chunked, completion());
        assert_eq!(r.status, 411);
        assert_eq!(
            serde_json::from_slice::<Value>(&r.body).unwrap()["error"],
            "length_required"
        );

        let r = reply(SCRIPT, Request::Post(b"{not json"), completion());
        assert_eq!(r.status, 500);
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(body["error"], "mock provider failure");
        assert!(body["message"]
            .as_str()
            .unwrap()
            .starts_with("the request body is not JSON"));

        let r = stopping();
        assert_eq!(r.status, 503);
    }

    #[test]
    fn stream_false_gets_one_completion_object() {
        let r = post(json!({"model": "mock-auto", "stream": false}));
        assert_eq!((r.status, r.content_type), (200, "application/json"));
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(body["object"], "chat.completion");
        let choice = &body["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls");
        assert_eq!(choice["message"]["content"], Value::Null);
        assert_eq!(choice["message"]["tool_calls"][0]["id"], "mock-call-1");
        assert!(choice["message"]["tool_calls"][0].get("index").is_none());

        let r = post(json!({"model": "mock-text", "stream": false}));
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(
            body["choices"],
            json!([{"index": 0, "message": {"role": "assistant", "content": "mock response"}, "finish_reason": "stop"}])
        );
    }
}
