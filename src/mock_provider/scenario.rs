//! Pure: which scenario a request gets, what the request says, and what the
//! scripted model answers.
//!
//! A scenario is chosen by the model name the client asks for:
//!
//! ```text
//! mock-auto, mock-flash, mock-tool   auto: propose run_command, then finish
//! mock-text                          text: "mock response"
//! mock-echo                          echo: "echo: <last user content>"
//! mock-slow                          slow: wait mock.slowMs, then "mock response"
//! mock-error                         error: HTTP 500
//! anything else                      the configured fallback (mock.scenario)
//! ```
//!
//! `auto` decides from the conversation alone: with no `role: "tool"`
//! message yet it proposes one `run_command` call; once tool results exist
//! it finishes with a text naming how many there are. So a worker that runs
//! the command and sends its result back sees a two-step run.

use serde_json::{json, Value};

/// The prefix that marks a model name as one of ours.
const MODEL_PREFIX: &str = "mock-";

/// What the `run_command` proposal claims the command will take, in
/// milliseconds (`expected_runtime_milliseconds`).
pub const TOOL_EXPECTED_RUNTIME_MS: u64 = 1000;

/// The id of the proposed tool call.
pub const TOOL_CALL_ID: &str = "mock-call-1";

/// The name of the proposed tool.
pub const TOOL_NAME: &str = "run_command";

/// One scripted model behaviour. `mock.scenario` takes the names of
/// [`Scenario::name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    Auto,
    Text,
    Echo,
    Slow,
    Error,
}

impl Scenario {
    /// Every scenario, in the order the configuration documents them.
    pub const ALL: [Scenario; 5] = [
        Scenario::Auto,
        Scenario::Text,
        Scenario::Echo,
        Scenario::Slow,
        Scenario::Error,
    ];

    /// The configuration spelling.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Auto => "auto",
            Scenario::Text => "text",
            Scenario::Echo => "echo",
            Scenario::Slow => "slow",
            Scenario::Error => "error",
        }
    }

    /// The scenario spelled `name` (exactly, as `mock.scenario` holds it).
    pub fn parse(name: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The names, joined for a validation message.
    pub fn names() -> String {
        Scenario::ALL.map(Scenario::name).join(", ")
    }
}

/// The scenario for a requested model name: `mock-<scenario>`, with `flash`
/// and `tool` as aliases of `auto` (they name a model, not a behaviour);
/// `fallback` for a missing name, a name without the prefix, or an unknown
/// suffix.
pub fn scenario_for_model(model: Option<&str>, fallback: Scenario) -> Scenario {
    let Some(suffix) = model.and_then(|m| m.strip_prefix(MODEL_PREFIX)) else {
        return fallback;
    };
    match suffix {
        "flash" | "tool" => Scenario::Auto,
        other => Scenario::parse(other).unwrap_or(fallback),
    }
}

/// What the scripted model reads from a chat-completions request body.
/// Everything else in the body (tools, sampling options) is ignored.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// `model`, when it is a string.
    pub model: Option<String>,
    /// How many `messages` have `role: "tool"`.
    pub tool_results: usize,
    /// The `content` of the last `role: "user"` message; `None` when there
    /// is no user message, `Some(Value::Null)` when it has no content.
    pub last_user_content: Option<Value>,
    /// False only when the body says `"stream": false`; the default, as for
    /// the Node hub's provider, is a stream.
    pub stream: bool,
}

/// Why a request body cannot be read as a chat-completions request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadBody {
    /// Not JSON; the parser's message (it never quotes the input).
    NotJson(String),
    /// JSON, but not an object.
    NotAnObject,
}

impl std::fmt::Display for BadBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadBody::NotJson(err) => write!(f, "the request body is not JSON: {err}"),
            BadBody::NotAnObject => write!(f, "the request body is not a JSON object"),
        }
    }
}

/// Reads a request body. An empty body is an empty request (every field
/// absent), as the Node hub's provider reads it. `messages` that is not an
/// array counts as no messages; a message that is not an object is skipped.
pub fn parse_request(body: &[u8]) -> Result<ChatRequest, BadBody> {
    let value = if body.is_empty() {
        Value::Object(Default::default())
    } else {
        serde_json::from_slice::<Value>(body).map_err(|err| BadBody::NotJson(err.to_string()))?
    };
    let Value::Object(map) = value else {
        return Err(BadBody::NotAnObject);
    };
    let messages: &[Value] = match map.get("messages") {
        Some(Value::Array(items)) => items,
        _ => &[],
    };
    let role = |m: &Value| m.get("role").and_then(Value::as_str).map(str::to_owned);
    let tool_results = messages
        .iter()
        .filter(|m| role(m).as_deref() == Some("tool"))
        .count();
    let last_user_content = messages
        .iter()
        .rev()
        .find(|m| role(m).as_deref() == Some("user"))
        .map(|m| m.get("content").cloned().unwrap_or(Value::Null));
    Ok(ChatRequest {
        model: map.get("model").and_then(Value::as_str).map(str::to_owned),
        tool_results,
        last_user_content,
        stream: map.get("stream") != Some(&Value::Bool(false)),
    })
}

/// The assistant's answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Text content, finishing with `finish_reason: "stop"`.
    Text(String),
    /// One function call, finishing with `finish_reason: "tool_calls"`.
    /// `arguments` is the JSON text the call carries.
    ToolCall {
        id: String,
        name: String,
        arguments: String,
    },
}

impl Answer {
    /// The `finish_reason` that ends this answer.
    pub fn finish_reason(&self) -> &'static str {
        match self {
            Answer::Text(_) => "stop",
            Answer::ToolCall { .. } => "tool_calls",
        }
    }
}

/// What to do with one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Answer (after the `slow` wait when `slow` is true).
    Answer { answer: Answer, slow: bool },
    /// The `error` scenario: fail the request.
    Fail,
}

/// The scripted model: the outcome of `request` under `scenario`, with
/// `tool_command` as the command `auto` proposes.
pub fn decide(scenario: Scenario, request: &ChatRequest, tool_command: &str) -> Outcome {
    let text = |t: String| Outcome::Answer {
        answer: Answer::Text(t),
        slow: scenario == Scenario::Slow,
    };
    match scenario {
        Scenario::Error => Outcome::Fail,
        Scenario::Text | Scenario::Slow => text("mock response".to_owned()),
        Scenario::Echo => text(format!("echo: {}", echo_text(&request.last_user_content))),
        Scenario::Auto if request.tool_results == 0 => Outcome::Answer {
            answer: Answer::ToolCall {
                id: TOOL_CALL_ID.to_owned(),
                name: TOOL_NAME.to_owned(),
                arguments: json!({
                    "command": tool_command,
                    "expected_runtime_milliseconds": TOOL_EXPECTED_RUNTIME_MS,
                })
                .to_string(),
            },
            slow: false,
        },
        Scenario::Auto => text(format!(
            "finished after {} tool result(s)",
            request.tool_results
        )),
    }
}

/// The text `echo` repeats: a string content as it is; anything else (a
/// content-part array, a missing user message or content) as compact JSON,
/// with a missing one standing for the empty string (`""`).
fn echo_text(content: &Option<Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Null) | None => "\"\"".to_owned(),
        Some(other) => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: Value) -> ChatRequest {
        parse_request(body.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn model_names_map_to_scenarios() {
        let cases = [
            (Some("mock-auto"), Scenario::Auto),
            (Some("mock-flash"), Scenario::Auto),
            (Some("mock-tool"), Scenario::Auto),
            (Some("mock-text"), Scenario::Text),
            (Some("mock-echo"), Scenario::Echo),
            (Some("mock-slow"), Scenario::Slow),
            (Some("mock-error"), Scenario::Error),
        ];
        for (model, expected) in cases {
            assert_eq!(
                scenario_for_model(model, Scenario::Text),
                expected,
                "{model:?}"
            );
        }
        // the fallback: no name, no prefix, an unknown suffix, a case change
        for model in [
            None,
            Some("deepseek-flash"),
            Some("mock-"),
            Some("mock-nope"),
            Some("MOCK-text"),
        ] {
            assert_eq!(
                scenario_for_model(model, Scenario::Echo),
                Scenario::Echo,
                "{model:?}"
            );
        }
    }

    #[test]
    fn scenario_names_round_trip() {
        for scenario in Scenario::ALL {
            assert_eq!(Scenario::parse(scenario.name()), Some(scenario));
        }
        assert_eq!(Scenario::parse("Auto"), None);
        assert_eq!(Scenario::parse("flash"), None);
        assert_eq!(Scenario::names(), "auto, text, echo, slow, error");
    }

    #[test]
    fn requests_are_read_leniently() {
        let r = request(json!({
            "model": "mock-echo",
            "stream": true,
            "messages": [
                {"role": "system", "content": "s"},
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": null, "tool_calls": []},
                {"role": "tool", "content": "out", "tool_call_id": "mock-call-1"},
                7,
                {"role": "user", "content": [{"type": "text", "text": "second"}]},
                {"role": "tool", "content": "out2"}
            ]
        }));
        assert_eq!(r.model.as_deref(), Some("mock-echo"));
        assert_eq!(r.tool_results, 2);
        assert_eq!(
            r.last_user_content,
            Some(json!([{"type": "text", "text": "second"}]))
        );
        assert!(r.stream);

        let empty = parse_request(b"").unwrap();
        assert_eq!(
            empty,
            ChatRequest {
                model: None,
                tool_results: 0,
                last_user_content: None,
                stream: true
            }
        );
        let odd = request(json!({"model": 5, "messages": {"role": "user"}, "stream": "no"}));
        assert_eq!(odd.model, None);
        assert_eq!(odd.tool_results, 0);
        assert!(odd.stream, "only an explicit false turns streaming off");
        assert!(!request(json!({"stream": false})).stream);
        let no_content = request(json!({"messages": [{"role": "user"}]}));
        assert_eq!(no_content.last_user_content, Some(Value::Null));
    }

    #[test]
    fn bad_bodies_are_named_without_their_content() {
        let err = parse_request(b"{\"model\": \"secret-token").unwrap_err();
        assert!(matches!(err, BadBody::NotJson(_)));
        assert!(!err.to_string().contains("secret"), "{err}");
        assert_eq!(parse_request(b"[1, 2]"), Err(BadBody::NotAnObject));
        assert_eq!(parse_request(b"null"), Err(BadBody::NotAnObject));
        assert_eq!(
            BadBody::NotAnObject.to_string(),
            "the request body is not a JSON object"
        );
    }

    #[test]
    fn auto_proposes_the_command_until_a_tool_result_exists() {
        let first =
            request(json!({"model": "mock-auto", "messages": [{"role": "user", "content": "go"}]}));
        let Outcome::Answer { answer, slow } = decide(Scenario::Auto, &first, "echo hi") else {
            panic!("auto failed");
        };
        assert!(!slow);
        assert_eq!(answer.finish_reason(), "tool_calls");
        let Answer::ToolCall {
            id,
            name,
            arguments,
        } = answer
        else {
            panic!("no tool call: {answer:?}");
        };
        assert_eq!((id.as_str(), name.as_str()), ("mock-call-1", "run_command"));
        assert_eq!(
            arguments,
            r#"{"command":"echo hi","expected_runtime_milliseconds":1000}"#
        );

        let after = request(json!({"messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": null},
            {"role": "tool", "content": "hi"}
        ]}));
        assert_eq!(
            decide(Scenario::Auto, &after, "echo hi"),
            Outcome::Answer {
                answer: Answer::Text("finished after 1 tool result(s)".into()),
                slow: false
            }
        );
    }

    #[test]
    fn text_echo_slow_and_error() {
        let r = request(json!({"messages": [{"role": "user", "content": "hello"}]}));
        let text = |s: &str, slow| Outcome::Answer {
            answer: Answer::Text(s.into()),
            slow,
        };
        assert_eq!(
            decide(Scenario::Text, &r, "x"),
            text("mock response", false)
        );
        assert_eq!(decide(Scenario::Slow, &r, "x"), text("mock response", true));
        assert_eq!(decide(Scenario::Echo, &r, "x"), text("echo: hello", false));
        assert_eq!(decide(Scenario::Error, &r, "x"), Outcome::Fail);
        // tool results do not turn text scenarios into tool calls
        let with_tool = request(json!({"messages": [{"role": "tool", "content": "t"}]}));
        assert_eq!(
            decide(Scenario::Text, &with_tool, "x"),
            text("mock response", false)
        );
    }

    #[test]
    fn echo_repeats_non_text_content_as_json() {
        let parts = request(
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}]}),
        );
        assert_eq!(
            decide(Scenario::Echo, &parts, ""),
            Outcome::Answer {
                answer: Answer::Text(r#"echo: [{"type":"text","text":"a"}]"#.into()),
                slow: false
            }
        );
        for body in [json!({}), json!({"messages": [{"role": "user"}]})] {
            assert_eq!(
                decide(Scenario::Echo, &request(body), ""),
                Outcome::Answer {
                    answer: Answer::Text("echo: \"\"".into()),
                    slow: false
                }
            );
        }
    }
}
