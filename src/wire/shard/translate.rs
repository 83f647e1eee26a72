//! Worker envelopes as Shard events (seed 004 §9.4), pure. The input is a
//! transcript entry as the hub retains it (the worker's envelope plus the
//! hub's members, `hub_sequence` among them); the output is the events an
//! attached client receives, each tagged with the agent's id, as JSON text
//! (rendered once for every recipient).
//!
//! | worker event | Shard events |
//! | --- | --- |
//! | `run_started` | `turn_start {turn_id: run_id}` |
//! | `model_response` | `message_complete` (text, `thinking` from `reasoning`, `tool_call` blocks from `invokes`), then `usage` from `cost` |
//! | `tool_calls` | one `tool_call` per call (`read_only` from the call's `type`) |
//! | `tool_results` | one `tool_result` per result |
//! | `run_finished` | `turn_end {turn_id, usage}` (the run's summed costs); a failed run first an `error` |
//! | `compact_finished` | `compaction {index: revision, removed_turns, summary}` |
//! | `error` | `error` (`fatal` when the worker says its saves stopped, `durable: false`) |
//!
//! The three frequent events (`model_response`, `tool_calls`,
//! `tool_results`) are read into typed views that borrow the entry's text
//! and written out without building a JSON tree; any other event, and a
//! frequent one whose shape the views do not take, goes through
//! `serde_json::Value`.
//!
//! When no connection is attached to an agent its events are not
//! translated, only taken in by its status (`track`): `tool_calls` and
//! `tool_results` are then read by [`parse_status`] into what the status
//! needs alone (the worker, the run, the first call's name), the rest of
//! the entry skipped without being built.
//!
//! Message ids are `msg-<hub_sequence>`, so a message has the same id live
//! and in a `sync` window rebuilt from the transcript.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::message::Code;

/// Token counts summed from worker `cost` objects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    /// Whether any cost was reported (an absent cost means unknown).
    pub reported: bool,
}

impl Usage {
    /// The worker's `{prompt, generated, cache_hit}` (`None` for anything
    /// else: absence means unknown, not zero).
    pub fn of_cost(cost: &Value) -> Option<Usage> {
        let cost = cost.as_object()?;
        if !["prompt", "generated", "cache_hit"]
            .iter()
            .any(|k| cost.get(*k).is_some_and(Value::is_u64))
        {
            return None;
        }
        let n = |k: &str| cost.get(k).and_then(Value::as_u64).unwrap_or(0);
        Some(Usage {
            input: n("prompt"),
            output: n("generated"),
            cache_read: n("cache_hit"),
            reported: true,
        })
    }

    pub fn add(&mut self, other: Usage) {
        self.input += other.input;
        self.output += other.output;
        self.cache_read += other.cache_read;
        self.reported |= other.reported;
    }

    /// The seed's `Usage` object.
    pub fn to_json(self) -> Value {
        json!({"input": self.input, "output": self.output, "cache_read": self.cache_read})
    }
}

/// The members of an entry every view reads.
#[derive(Deserialize)]
pub struct Entry<'a, D> {
    #[serde(borrow, default)]
    worker_id: Cow<'a, str>,
    #[serde(borrow, default)]
    run_id: Cow<'a, str>,
    #[serde(default)]
    hub_sequence: u64,
    data: D,
}

/// A worker content part.
#[derive(Deserialize, Default)]
struct Part<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    modality: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    raw: Option<Cow<'a, str>>,
}

impl Part<'_> {
    /// The text of a text part.
    fn text(&self) -> Option<&str> {
        let text = self.kind == "text" && self.modality.as_deref().unwrap_or("text") == "text";
        text.then_some(self.raw.as_deref()).flatten()
    }
}

/// A `model_response`'s data.
#[derive(Deserialize)]
pub struct Response<'a> {
    #[serde(borrow, default)]
    content: Vec<Part<'a>>,
    #[serde(borrow, default)]
    reasoning: Option<Part<'a>>,
    #[serde(borrow, default)]
    invokes: Vec<Call<'a>>,
    #[serde(default)]
    cost: Option<Value>,
}

/// A call object.
#[derive(Deserialize)]
pub struct Call<'a> {
    #[serde(borrow, default)]
    id: Cow<'a, str>,
    #[serde(borrow, default)]
    name: Cow<'a, str>,
    #[serde(default)]
    arguments: Value,
    #[serde(rename = "type", borrow, default)]
    kind: Cow<'a, str>,
    /// `default_deny`, `require_confirm` or `trusted`.
    #[serde(borrow, default)]
    security: Cow<'a, str>,
}

impl Call<'_> {
    /// Whether the call may need a permission before it runs: every call
    /// the worker does not mark `trusted` (`require_confirm` asks,
    /// `default_deny` is refused unless allowed; a call naming no level is
    /// taken as the stricter).
    fn gated(&self) -> bool {
        self.security != "trusted"
    }
}

/// The call a result answers (its id).
#[derive(Deserialize, Default)]
struct CallRef<'a> {
    #[serde(borrow, default)]
    id: Cow<'a, str>,
}

/// A result object.
#[derive(Deserialize)]
pub struct ToolResult<'a> {
    #[serde(borrow, default)]
    query: CallRef<'a>,
    #[serde(borrow, default)]
    output: Part<'a>,
    #[serde(default)]
    extras: Option<Value>,
}

/// One transcript entry, read for translation.
pub enum Parsed<'a> {
    Response(Entry<'a, Response<'a>>),
    Calls(Entry<'a, Vec<Call<'a>>>),
    Results(Entry<'a, Vec<ToolResult<'a>>>),
    /// Every other event, or a frequent one in another shape.
    Other(Value),
    /// A `tool_calls` or `tool_results` entry read only for the agent's
    /// status ([`parse_status`]); it translates to nothing.
    Status(Entry<'a, FirstCall<'a>>),
}

/// The first call's name of a `tool_calls` list (every other element and
/// member skipped); for `tool_results`, any `data` at all.
#[derive(Default)]
pub struct FirstCall<'a>(Option<Cow<'a, str>>);

/// A call object's name alone.
#[derive(Deserialize)]
struct Named<'a> {
    #[serde(borrow, default)]
    name: Cow<'a, str>,
}

/// Reads the first element of a list as [`Named`] and skips the rest; a
/// value that is not a list fails (the typed view would not take it).
struct FirstOfList;

impl<'de> serde::de::Visitor<'de> for FirstOfList {
    type Value = FirstCall<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of calls")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let first: Option<Named<'de>> = seq.next_element()?;
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(FirstCall(first.map(|n| n.name)))
    }
}

impl<'de> Deserialize<'de> for FirstCall<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_seq(FirstOfList)
    }
}

/// `data` skipped whatever it is (a `tool_results` entry's status needs
/// none of it).
struct AnyData;

impl<'de> Deserialize<'de> for AnyData {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d).map(|_| AnyData)
    }
}

/// Reads a `tool_calls` or `tool_results` entry for the agent's status
/// only (no connection is attached, so nothing is translated): the same
/// worker, run and first call name [`parse`] would give, without building
/// the calls, their arguments or the results. `None` for every other
/// event, and for a shape only the full reading takes (the caller then
/// uses [`parse`]).
pub fn parse_status<'a>(event: &str, json: &'a str) -> Option<Parsed<'a>> {
    match event {
        "tool_calls" => serde_json::from_str(json).ok().map(Parsed::Status),
        "tool_results" => serde_json::from_str::<Entry<'a, AnyData>>(json)
            .ok()
            .map(|e| {
                Parsed::Status(Entry {
                    worker_id: e.worker_id,
                    run_id: e.run_id,
                    hub_sequence: e.hub_sequence,
                    data: FirstCall(None),
                })
            }),
        _ => None,
    }
}

/// Reads the entry `json` whose event is `event` (from
/// `window::event_name`); `None` when it is not JSON.
pub fn parse<'a>(event: &str, json: &'a str) -> Option<Parsed<'a>> {
    let typed = match event {
        "model_response" => serde_json::from_str(json).ok().map(Parsed::Response),
        "tool_calls" => serde_json::from_str(json).ok().map(Parsed::Calls),
        "tool_results" => serde_json::from_str(json).ok().map(Parsed::Results),
        _ => None,
    };
    typed.or_else(|| serde_json::from_str(json).ok().map(Parsed::Other))
}

impl Parsed<'_> {
    pub fn worker_id(&self) -> &str {
        match self {
            Parsed::Response(e) => &e.worker_id,
            Parsed::Calls(e) => &e.worker_id,
            Parsed::Results(e) => &e.worker_id,
            Parsed::Status(e) => &e.worker_id,
            Parsed::Other(v) => v["worker_id"].as_str().unwrap_or(""),
        }
    }

    pub fn run_id(&self) -> &str {
        match self {
            Parsed::Response(e) => &e.run_id,
            Parsed::Calls(e) => &e.run_id,
            Parsed::Results(e) => &e.run_id,
            Parsed::Status(e) => &e.run_id,
            Parsed::Other(v) => v["run_id"].as_str().unwrap_or(""),
        }
    }

    /// The data of an event read as a `Value` (`Null` for the others).
    pub fn data(&self) -> &Value {
        match self {
            Parsed::Other(v) => v.get("data").unwrap_or(&Value::Null),
            _ => &Value::Null,
        }
    }

    /// The cost of a `model_response`.
    pub fn cost(&self) -> Option<Usage> {
        match self {
            Parsed::Response(e) => e.data.cost.as_ref().and_then(Usage::of_cost),
            Parsed::Other(v) => v.pointer("/data/cost").and_then(Usage::of_cost),
            _ => None,
        }
    }

    /// The first call's name of a `tool_calls`.
    pub fn first_call(&self) -> Option<&str> {
        match self {
            Parsed::Calls(e) => e.data.first().map(|c| &*c.name),
            Parsed::Status(e) => e.data.0.as_deref(),
            Parsed::Other(v) => calls_of(v)?.first()?.get("name")?.as_str(),
            _ => None,
        }
    }
}

/// `data` as an array, or its `member` (older shapes).
fn list_in<'v>(entry: &'v Value, member: &str) -> Option<&'v Vec<Value>> {
    let data = entry.get("data")?;
    data.as_array()
        .or_else(|| data.get(member).and_then(Value::as_array))
}

fn calls_of(entry: &Value) -> Option<&Vec<Value>> {
    list_in(entry, "calls")
}

/// `{}` on the wire.
#[derive(Serialize)]
struct Empty {}

/// A call's arguments as the seed's `args` object.
#[derive(Serialize)]
#[serde(untagged)]
enum Args<'a> {
    Object(&'a Value),
    Wrapped { value: &'a Value },
    Empty(Empty),
}

impl<'a> Args<'a> {
    fn of(arguments: &'a Value) -> Args<'a> {
        match arguments {
            Value::Object(_) => Args::Object(arguments),
            Value::Null => Args::Empty(Empty {}),
            other => Args::Wrapped { value: other },
        }
    }
}

/// A content block of a message.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Thinking {
        text: &'a str,
    },
    Text {
        text: &'a str,
    },
    ToolCall {
        id: &'a str,
        name: &'a str,
        args: Args<'a>,
    },
    ToolResult {
        tool_call_id: &'a str,
        content: Content<'a>,
        is_error: bool,
    },
}

/// A tool result's content.
#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Content<'a> {
    Text { text: &'a str },
    Error { message: &'a str },
    Json { value: OutputPart<'a> },
}

/// A non-text output part, as the worker sent it.
#[derive(Serialize)]
struct OutputPart<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    modality: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    raw: Option<&'a str>,
}

/// The seed's `Message`.
#[derive(Serialize)]
struct Message<'a> {
    id: &'a str,
    role: &'static str,
    content: Vec<Block<'a>>,
}

/// The id of the message entry `hub_sequence` holds.
fn message_id(hub_sequence: u64) -> String {
    format!("msg-{hub_sequence}")
}

/// The assistant message of a `model_response`: `thinking` from the
/// reasoning part, a `text` block per text part, a `tool_call` block per
/// proposed call. Parts that are not text (images, binary) have no block
/// in the seed's content types and are left out.
fn response_message<'a>(e: &'a Entry<'a, Response<'a>>, id: &'a str) -> Message<'a> {
    let mut content = Vec::new();
    if let Some(text) = e.data.reasoning.as_ref().and_then(Part::text) {
        content.push(Block::Thinking { text });
    }
    for text in e.data.content.iter().filter_map(Part::text) {
        content.push(Block::Text { text });
    }
    for call in &e.data.invokes {
        content.push(Block::ToolCall {
            id: &call.id,
            name: &call.name,
            args: Args::of(&call.arguments),
        });
    }
    Message {
        id,
        role: "assistant",
        content,
    }
}

/// A result's Shard form: `(tool_call_id, content, is_error, exit_code)`.
/// A result whose `extras.error` is set (a denial, a failed dispatch) is
/// an `error` content; a command that exited non-zero or timed out is an
/// error result with its text.
fn result_parts<'a>(r: &'a ToolResult<'a>) -> (&'a str, Content<'a>, bool, Option<i64>) {
    let extras = r.extras.as_ref().and_then(Value::as_object);
    let exit_code = extras
        .and_then(|e| e.get("exit_code"))
        .and_then(Value::as_i64);
    if let Some(error) = extras.and_then(|e| e.get("error")).filter(|e| !e.is_null()) {
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .or_else(|| r.output.text())
            .unwrap_or("the tool call failed");
        return (&r.query.id, Content::Error { message }, true, exit_code);
    }
    let timed_out = extras
        .and_then(|e| e.get("timed_out"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let is_error = timed_out || exit_code.is_some_and(|c| c != 0);
    let content = match r.output.text() {
        Some(text) => Content::Text { text },
        None => Content::Json {
            value: OutputPart {
                kind: &r.output.kind,
                modality: r.output.modality.as_deref(),
                raw: r.output.raw.as_deref(),
            },
        },
    };
    (&r.query.id, content, is_error, exit_code)
}

/// The user message holding a `tool_results`' results as `tool_result`
/// blocks.
fn results_message<'a>(e: &'a Entry<'a, Vec<ToolResult<'a>>>, id: &'a str) -> Message<'a> {
    let content = e
        .data
        .iter()
        .map(|r| {
            let (tool_call_id, content, is_error, _) = result_parts(r);
            Block::ToolResult {
                tool_call_id,
                content,
                is_error,
            }
        })
        .collect();
    Message {
        id,
        role: "user",
        content,
    }
}

/// The message an entry holds, for a `sync` window: a `model_response`'s
/// or a `tool_results`' (`None` for anything else).
pub fn window_message(parsed: &Parsed<'_>) -> Option<Value> {
    match parsed {
        Parsed::Response(e) => {
            let id = message_id(e.hub_sequence);
            serde_json::to_value(response_message(e, &id)).ok()
        }
        Parsed::Results(e) => {
            let id = message_id(e.hub_sequence);
            serde_json::to_value(results_message(e, &id)).ok()
        }
        _ => None,
    }
}

#[derive(Serialize)]
struct MessageComplete<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    agent_id: &'a str,
    message_id: &'a str,
    message: Message<'a>,
}

#[derive(Serialize)]
struct UsageEvent<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    agent_id: &'a str,
    input: u64,
    output: u64,
    cache_read: u64,
}

#[derive(Serialize)]
struct ToolCallEvent<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    agent_id: &'a str,
    tool_call_id: &'a str,
    name: &'a str,
    args: Args<'a>,
    read_only: bool,
}

#[derive(Serialize)]
struct ToolResultEvent<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    agent_id: &'a str,
    tool_call_id: &'a str,
    content: Content<'a>,
    is_error: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i64>,
}

fn text(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// The Shard events of one transcript entry of agent `agent`, in order,
/// as JSON text. `run_usage` is the run's summed usage (for `turn_end`).
pub fn events(agent: &str, parsed: &Parsed<'_>, run_usage: Option<Usage>) -> Vec<String> {
    let mut out = Vec::new();
    match parsed {
        Parsed::Response(e) => {
            let id = message_id(e.hub_sequence);
            out.push(text(&MessageComplete {
                kind: "message_complete",
                agent_id: agent,
                message_id: &id,
                message: response_message(e, &id),
            }));
            if let Some(usage) = parsed.cost() {
                out.push(text(&UsageEvent {
                    kind: "usage",
                    agent_id: agent,
                    input: usage.input,
                    output: usage.output,
                    cache_read: usage.cache_read,
                }));
            }
        }
        Parsed::Calls(_) => out.extend(proposed(agent, parsed).into_iter().map(|p| p.event)),
        Parsed::Results(_) => out.extend(outcomes(agent, parsed).into_iter().map(|o| o.event)),
        Parsed::Other(entry) => out.extend(
            other_events(agent, entry, run_usage)
                .iter()
                .map(Value::to_string),
        ),
        Parsed::Status(_) => {}
    }
    out
}

/// A `tool_call` event of a proposed call, and whether the call may need
/// a permission first (seed 004 §9.4: the event means the tool is about
/// to execute, so a gated call's is held until it may).
pub struct Proposed<'a> {
    pub id: &'a str,
    pub gated: bool,
    pub event: String,
}

/// The `tool_call` events of a `tool_calls` entry read by the typed view
/// (none for any other entry).
pub fn proposed<'a>(agent: &str, parsed: &'a Parsed<'_>) -> Vec<Proposed<'a>> {
    let Parsed::Calls(e) = parsed else {
        return Vec::new();
    };
    e.data
        .iter()
        .map(|call| Proposed {
            id: &call.id,
            gated: call.gated(),
            event: tool_call_event(agent, call),
        })
        .collect()
}

fn tool_call_event(agent: &str, call: &Call<'_>) -> String {
    text(&ToolCallEvent {
        kind: "tool_call",
        agent_id: agent,
        tool_call_id: &call.id,
        name: &call.name,
        args: Args::of(&call.arguments),
        read_only: call.kind == "read_only",
    })
}

/// The `tool_call` event of a call object as a confirmation carries it
/// (`None` when it is not one).
pub fn call_event(agent: &str, call: &Value) -> Option<String> {
    let call = Call::deserialize(call).ok()?;
    Some(tool_call_event(agent, &call))
}

/// A `tool_result` event, and whether the result is a permission's
/// refusal (the worker's `security_check` error: the call never ran).
pub struct Outcome<'a> {
    pub id: &'a str,
    pub refused: bool,
    pub event: String,
}

/// The `tool_result` events of a `tool_results` entry read by the typed
/// view (none for any other entry).
pub fn outcomes<'a>(agent: &str, parsed: &'a Parsed<'_>) -> Vec<Outcome<'a>> {
    let Parsed::Results(e) = parsed else {
        return Vec::new();
    };
    e.data
        .iter()
        .map(|result| {
            let (tool_call_id, content, is_error, exit_code) = result_parts(result);
            Outcome {
                id: tool_call_id,
                refused: refused(result),
                event: text(&ToolResultEvent {
                    kind: "tool_result",
                    agent_id: agent,
                    tool_call_id,
                    content,
                    is_error,
                    exit_code,
                }),
            }
        })
        .collect()
}

/// Whether a result is the worker's refusal of its call on security
/// grounds (`extras.error.stage` or `.code` `security_check`).
fn refused(result: &ToolResult<'_>) -> bool {
    let error = result.extras.as_ref().and_then(|e| e.get("error"));
    ["stage", "code"]
        .iter()
        .any(|k| error.and_then(|e| e.get(*k)).and_then(Value::as_str) == Some("security_check"))
}

/// The events of an entry read as a `Value` (the rare events, and the
/// frequent ones in a shape the typed views do not take).
fn other_events(agent: &str, entry: &Value, run_usage: Option<Usage>) -> Vec<Value> {
    let event = entry.get("event").and_then(Value::as_str).unwrap_or("");
    let run_id = entry.get("run_id").and_then(Value::as_str).unwrap_or("");
    let data = entry.get("data").unwrap_or(&Value::Null);
    let mut out = Vec::new();
    match event {
        "run_started" => {
            out.push(json!({"type": "turn_start", "agent_id": agent, "turn_id": run_id}))
        }
        "tool_calls" | "tool_results" => {
            // The older shape `{calls: [...]}` / `{results: [...]}`: its
            // list read by the typed view. (A display omission, `data:
            // null`, has nothing to show.)
            let member = if event == "tool_calls" {
                "calls"
            } else {
                "results"
            };
            if let Some(list) = list_in(entry, member) {
                let mut unwrapped = entry.clone();
                unwrapped["data"] = Value::Array(list.clone());
                let text = unwrapped.to_string();
                if let Some(parsed) = parse_typed(event, &text) {
                    return events(agent, &parsed, run_usage)
                        .iter()
                        .filter_map(|e| serde_json::from_str(e).ok())
                        .collect();
                }
            }
        }
        "run_finished" => {
            if data.get("status").and_then(Value::as_str) == Some("failed") {
                let code = if data.pointer("/failure/stage").and_then(Value::as_str)
                    == Some("model_request")
                {
                    Code::ProviderError
                } else {
                    Code::InternalError
                };
                let message = data
                    .get("error")
                    .and_then(Value::as_str)
                    .filter(|m| !m.is_empty())
                    .unwrap_or("the run failed");
                out.push(super::message::error_event(agent, code, message, false));
            }
            let mut end = json!({"type": "turn_end", "agent_id": agent, "turn_id": run_id});
            if let Some(usage) = run_usage.filter(|u| u.reported) {
                end["usage"] = usage.to_json();
            }
            out.push(end);
        }
        "compact_finished" => {
            let mut event = Map::new();
            event.insert("type".into(), json!("compaction"));
            event.insert("agent_id".into(), json!(agent));
            event.insert(
                "index".into(),
                data.get("revision").cloned().unwrap_or(json!(0)),
            );
            for key in ["removed_turns", "summary"] {
                if let Some(value) = data.get(key) {
                    event.insert(key.into(), value.clone());
                }
            }
            out.push(Value::Object(event));
        }
        "error" => {
            let message = data
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("the worker reported an error");
            let fatal = data.get("durable").and_then(Value::as_bool) == Some(false);
            out.push(super::message::error_event(
                agent,
                Code::InternalError,
                message,
                fatal,
            ));
        }
        _ => {}
    }
    out
}

/// The typed view only (no `Value` fallback).
fn parse_typed<'a>(event: &str, json: &'a str) -> Option<Parsed<'a>> {
    match event {
        "model_response" => serde_json::from_str(json).ok().map(Parsed::Response),
        "tool_calls" => serde_json::from_str(json).ok().map(Parsed::Calls),
        "tool_results" => serde_json::from_str(json).ok().map(Parsed::Results),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(event: &str, seq: u64, data: Value) -> String {
        json!({"type": "event", "event": event, "session_id": "s", "worker_id": "w",
            "request_id": "q", "run_id": "r1", "sequence": seq, "data": data,
            "hub_sequence": seq})
        .to_string()
    }

    #[test]
    fn the_status_reading_gives_what_the_full_reading_gives() {
        let shapes = [
            (
                "tool_calls",
                json!([{"id": "c1", "name": "read_file", "arguments": {"path": "a"}, "type": "read_only"},
                {"id": "c2", "name": "write_file"}]),
            ),
            (
                "tool_calls",
                json!([{"id": "c1", "name": "esc\u{e9}\"aped"}]),
            ),
            ("tool_calls", json!([{"id": "c1"}])),
            ("tool_calls", json!([])),
            ("tool_calls", json!([{"name": 5}])),
            ("tool_calls", json!([7, {"name": "x"}])),
            ("tool_calls", json!({"calls": [{"name": "older"}]})),
            ("tool_calls", json!(null)),
            (
                "tool_results",
                json!([{"query": {"id": "c1"}, "output": {"type": "text", "raw": "ok"}}]),
            ),
            ("tool_results", json!({"results": []})),
            ("tool_results", json!("odd")),
        ];
        for (event, data) in shapes {
            let text = entry(event, 3, data.clone());
            let full = parse(event, &text).unwrap();
            let light = parse_status(event, &text).unwrap_or_else(|| parse(event, &text).unwrap());
            assert_eq!(light.worker_id(), full.worker_id(), "{data}");
            assert_eq!(light.run_id(), full.run_id(), "{data}");
            assert_eq!(light.first_call(), full.first_call(), "{data}");
        }
        let text = entry("tool_calls", 3, json!([{"name": "n"}]));
        assert!(matches!(
            parse_status("tool_calls", &text),
            Some(Parsed::Status(_))
        ));
        assert!(events("a", &parse_status("tool_calls", &text).unwrap(), None).is_empty());
        assert!(parse_status("model_response", &text).is_none());
    }

    fn translated(event: &str, seq: u64, data: Value, usage: Option<Usage>) -> Vec<Value> {
        let text = entry(event, seq, data);
        let parsed = parse(event, &text).unwrap();
        events("a", &parsed, usage)
            .iter()
            .map(|e| serde_json::from_str(e).unwrap())
            .collect()
    }

    #[test]
    fn a_model_response_is_a_complete_message_and_its_usage() {
        let data = json!({"type": "model_response", "role": "assistant",
            "reasoning": {"type": "text", "modality": "text", "raw": "hmm"},
            "content": [{"type": "text", "modality": "text", "raw": "hel\"lo"},
                        {"type": "binary", "modality": "image", "raw": "AAAA"}],
            "invokes": [{"id": "c1", "name": "run_command", "arguments": {"command": "ls"},
                         "type": "serial_write"}],
            "cost": {"prompt": 10, "generated": 3, "cache_hit": 2}});
        let out = translated("model_response", 4, data.clone(), None);
        assert_eq!(out.len(), 2);
        assert_eq!(
            out[0],
            json!({"type": "message_complete", "agent_id": "a", "message_id": "msg-4",
                "message": {"id": "msg-4", "role": "assistant", "content": [
                    {"type": "thinking", "text": "hmm"},
                    {"type": "text", "text": "hel\"lo"},
                    {"type": "tool_call", "id": "c1", "name": "run_command", "args": {"command": "ls"}}]}})
        );
        assert_eq!(
            out[1],
            json!({"type": "usage", "agent_id": "a", "input": 10, "output": 3, "cache_read": 2})
        );
        // The type comes first on the wire.
        let text = entry("model_response", 4, data);
        let first = &events("a", &parse("model_response", &text).unwrap(), None)[0];
        assert!(
            first.starts_with(r#"{"type":"message_complete","#),
            "{first}"
        );
        // No cost, or a cost in another shape: no usage event (absence
        // means unknown, not zero).
        assert_eq!(
            translated("model_response", 5, json!({"content": []}), None).len(),
            1
        );
        let other = json!({"cost": {"input_tokens": 3}});
        assert_eq!(translated("model_response", 5, other, None).len(), 1);
        // A display omission (data null) has no message to show.
        assert!(translated("model_response", 6, Value::Null, None).is_empty());
    }

    #[test]
    fn calls_and_results_are_one_event_each() {
        let calls = json!([
            {"id": "c1", "name": "read", "arguments": {"p": 1}, "type": "read_only"},
            {"id": "c2", "name": "run_command", "arguments": "x", "type": "serial_write"},
            {"id": "c3", "name": "noargs"}]);
        let out = translated("tool_calls", 2, calls, None);
        assert_eq!(out[0]["read_only"], true);
        assert_eq!(out[0]["tool_call_id"], "c1");
        assert_eq!(out[0]["args"], json!({"p": 1}));
        assert_eq!(out[1]["read_only"], false);
        assert_eq!(out[1]["args"], json!({"value": "x"}));
        assert_eq!(out[2]["args"], json!({}));
        // The older shape `{calls: [...]}` too.
        let wrapped = translated(
            "tool_calls",
            2,
            json!({"calls": [{"id": "c9", "name": "x", "type": "read_only"}]}),
            None,
        );
        assert_eq!(wrapped[0]["tool_call_id"], "c9");
        assert_eq!(wrapped[0]["read_only"], true);
        let results = json!([
            {"query": {"id": "c1"}, "output": {"type": "text", "modality": "text", "raw": "ok"},
             "extras": {"exit_code": 0}},
            {"query": {"id": "c2"}, "output": {"type": "text", "modality": "text", "raw": "Tool call denied: no"},
             "extras": {"error": {"stage": "security_check", "message": "no"}}},
            {"query": {"id": "c3"}, "output": {"type": "text", "modality": "text", "raw": "boom"},
             "extras": {"exit_code": 2}},
            {"query": {"id": "c4"}, "output": {"type": "binary", "modality": "image", "raw": "AA=="}},
        ]);
        let out = translated("tool_results", 3, results.clone(), None);
        assert_eq!(
            out[0],
            json!({"type": "tool_result", "agent_id": "a", "tool_call_id": "c1",
                "content": {"kind": "text", "text": "ok"}, "is_error": false, "exit_code": 0})
        );
        assert_eq!(out[1]["content"], json!({"kind": "error", "message": "no"}));
        assert_eq!(out[1]["is_error"], true);
        assert_eq!(out[2]["is_error"], true);
        assert_eq!(out[2]["exit_code"], 2);
        assert_eq!(
            out[3]["content"],
            json!({"kind": "json", "value": {"type": "binary", "modality": "image", "raw": "AA=="}})
        );
        let text = entry("tool_results", 3, results);
        let message = window_message(&parse("tool_results", &text).unwrap()).unwrap();
        assert_eq!(message["id"], "msg-3");
        assert_eq!(message["role"], "user");
        assert_eq!(message["content"][1]["type"], "tool_result");
        assert_eq!(message["content"][1]["is_error"], true);
    }

    #[test]
    fn runs_start_and_end_with_their_usage_and_failures() {
        assert_eq!(
            translated("run_started", 1, json!({}), None),
            vec![json!({"type": "turn_start", "agent_id": "a", "turn_id": "r1"})]
        );
        let usage = Usage {
            input: 5,
            output: 1,
            cache_read: 0,
            reported: true,
        };
        let done = translated(
            "run_finished",
            9,
            json!({"status": "completed"}),
            Some(usage),
        );
        assert_eq!(
            done,
            vec![json!({"type": "turn_end", "agent_id": "a", "turn_id": "r1",
                "usage": {"input": 5, "output": 1, "cache_read": 0}})]
        );
        let failed = translated(
            "run_finished",
            9,
            json!({"status": "failed", "error": "provider down", "failure": {"stage": "model_request"}}),
            None,
        );
        assert_eq!(failed[0]["type"], "error");
        assert_eq!(failed[0]["code"], "PROVIDER_ERROR");
        assert_eq!(failed[0]["message"], "provider down");
        assert_eq!(failed[1]["type"], "turn_end");
        assert!(failed[1].get("usage").is_none());
    }

    #[test]
    fn compactions_errors_and_the_rest() {
        let c = translated(
            "compact_finished",
            3,
            json!({"summary": "s", "memory_file": "/x", "removed_turns": 2, "revision": 7}),
            None,
        );
        assert_eq!(
            c,
            vec![
                json!({"type": "compaction", "agent_id": "a", "index": 7, "removed_turns": 2, "summary": "s"})
            ]
        );
        let e = translated(
            "error",
            3,
            json!({"message": "save failed", "durable": false}),
            None,
        );
        assert_eq!(e[0]["fatal"], true);
        assert_eq!(e[0]["code"], "INTERNAL_ERROR");
        for quiet in [
            "persisted",
            "status",
            "input_admitted",
            "input_committed",
            "history",
        ] {
            assert!(translated(quiet, 1, json!({}), None).is_empty(), "{quiet}");
        }
        assert!(parse("run_started", "not json").is_none());
    }
}
