//! The scripted worker as a pure state machine. It owns the protocol state
//! a real worker owns (identity and event sequence, the payload queue, the
//! duplicate-id window, the one active run, runtime options, the
//! conversation) and answers every input with a list of [`Action`]s: event
//! frames to send, and the slow work (a delay, a confirmation exchange, a
//! command, a remote-tool call) for the I/O shell to perform and report
//! back.
//!
//! No sockets, no clock, no threads: identifiers come from an injected
//! generator and files from an injected [`Storage`], so every behaviour is
//! unit-tested below. Only the run thread of `mock_worker::run` calls it.

use std::collections::{HashSet, VecDeque};

use serde_json::{json, Value};

use super::conversation::{text_of, Conversation, Execution, LoopProgress, Memory, Step, Turn};
use super::subagent;
use super::validate::{self, ConfirmMode, Operation, Rejection};

/// Capabilities advertised in `ready` and `status`.
pub(crate) const CAPABILITIES: [&str; 3] = ["session-history", "context-compact", "answer-pages"];
/// Admitted request ids remembered for duplicate detection.
const DUPLICATE_WINDOW: usize = 4096;
/// `mock-slow`: every model reply waits this long.
pub(crate) const SLOW_REPLY_MS: u64 = 1500;
/// Knob ceilings, so a typo cannot exhaust memory or hang a test forever.
pub(crate) const MAX_SLEEP_MS: u64 = 3_600_000;
pub(crate) const MAX_BIG_BYTES: usize = 64 * 1024 * 1024;
pub(crate) const MAX_FLOOD: u64 = 1_000_000;
/// Flood events produced per [`Engine::resume`] call.
const FLOOD_BATCH: u64 = 500;

/// What the shell must do next, in order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Action {
    /// Send one event frame (serialized JSON) on the event connection.
    Emit(String),
    /// Call [`Engine::delay_elapsed`] after `ms` milliseconds, unless the
    /// run is aborted first.
    Wait { run_id: String, ms: u64 },
    /// Open a confirmation socket, send `frame`, and report the decision
    /// with [`Engine::confirmation_decided`].
    Confirm(ConfirmRequest),
    /// Run `command` with `/bin/sh -c` and report with
    /// [`Engine::command_finished`].
    Execute { run_id: String, command: String },
    /// Open a remote-tool socket for `call.route`, send `call.frame`, and
    /// report the outcome text with [`Engine::remote_finished`].
    Remote(RemoteCall),
    /// Call [`Engine::resume`] soon, after looking at other inputs.
    Resume { run_id: String },
    /// Stop the delay or confirmation working for this run; its report
    /// will be ignored.
    Abort { run_id: String },
    /// One line for the worker's stdout log.
    Note(String),
    /// Deliver the events emitted so far, then end the process with
    /// `code`. `close` asks for a normal WebSocket close first.
    Exit { code: i32, close: bool },
}

/// One confirmation exchange for the shell to perform.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ConfirmRequest {
    pub run_id: String,
    pub confirmation_id: String,
    /// The complete `confirmation_request` message.
    pub frame: Value,
}

/// One remote-tool exchange for the shell to perform.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RemoteCall {
    pub run_id: String,
    /// `plan/replace`, `plan/read`: appended to `hub_remote_call.endpoint`.
    pub route: String,
    /// The complete `tool_request` message.
    pub frame: Value,
}

/// The outcome of a confirmation exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decision {
    pub approved: bool,
    pub reason: String,
}

/// What running a command produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ToolOutput {
    /// Human-readable output: stdout, then a `[stderr]` section.
    pub raw: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// Output beyond the capture bound was discarded.
    pub truncated: bool,
    /// The command could not be started at all.
    pub error: Option<String>,
}

/// Where the conversation is persisted. `Err` values are diagnostics.
pub(crate) trait Storage {
    /// Writes `state.json` (and `readable.md` when configured). `Ok(Some)`
    /// reports a failed optional Markdown export after a good JSON write.
    fn save(&mut self, conversation: &Conversation) -> Result<Option<String>, String>;
    /// Writes a compact archive; returns the absolute `memory.md` path.
    fn archive(&mut self, run_id: &str, markdown: &str) -> Result<String, String>;
    /// Applies archive retention, keeping `current`; returns
    /// `(removed_archives, removed_bytes)`.
    fn cleanup(&mut self, current: &str) -> Result<(u64, u64), String>;
}

/// Fixed facts the engine is built with.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub session_id: String,
    pub worker_id: String,
    /// The configured model (`providers[driver_model].model`).
    pub model: String,
    pub max_exchanges: u64,
    pub payload_capacity: usize,
    pub persistence: bool,
    pub save_on_step: bool,
    pub save_on_run: bool,
    pub save_on_shutdown: bool,
    pub max_archives: usize,
    /// A confirmation endpoint is configured.
    pub confirmation_endpoint: bool,
    /// A remote-tools endpoint (`hub_remote_call.endpoint`) is configured.
    pub tools_endpoint: bool,
    /// `mock-ignore-shutdown`: the shutdown signal is ignored.
    pub ignore_shutdown: bool,
}

/// What a message's text asks the scripted model to do.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Script {
    Echo(String),
    Tool(String),
    Sleep(u64, String),
    Big(usize),
    Flood(u64, String),
    Crash,
    /// `/plan <markdown>`: `plan/replace` through the hub's tools listener.
    Plan(String),
    /// `/plan-read`: `plan/read`.
    PlanRead,
    /// `/fork`, `/receive`, `/send`, `/subagent`, ...: trusted tool calls
    /// to the hub's `subagent/*` routes, made one after another.
    Subagent(Vec<subagent::Call>),
    Continue,
    Compact,
}

impl Script {
    fn parse(text: &str) -> Script {
        let mut words = text.split_whitespace();
        let first = words.next().unwrap_or("");
        let number = |max: u64| {
            words
                .clone()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .map(|n| n.min(max))
        };
        match first {
            "/run" => {
                let command = text.trim_start()["/run".len()..].trim();
                if command.is_empty() {
                    Script::Echo(text.to_string())
                } else {
                    Script::Tool(command.to_string())
                }
            }
            "/sleep" => match number(MAX_SLEEP_MS) {
                Some(ms) => Script::Sleep(ms, text.to_string()),
                None => Script::Echo(text.to_string()),
            },
            "/big" => match number(MAX_BIG_BYTES as u64) {
                Some(bytes) => Script::Big(bytes as usize),
                None => Script::Echo(text.to_string()),
            },
            "/flood" => match number(MAX_FLOOD) {
                Some(n) => Script::Flood(n, text.to_string()),
                None => Script::Echo(text.to_string()),
            },
            "/crash" => Script::Crash,
            "/plan" => {
                let rest = &text.trim_start()["/plan".len()..];
                // One separating space or line break; the rest is verbatim.
                let markdown = rest
                    .strip_prefix(|c: char| c.is_whitespace())
                    .unwrap_or(rest);
                Script::Plan(markdown.to_string())
            }
            "/plan-read" => Script::PlanRead,
            _ => match subagent::parse(text) {
                Some(calls) => Script::Subagent(calls),
                None => Script::Echo(text.to_string()),
            },
        }
    }
}

/// Where the active run is waiting.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stage {
    /// Between steps (never observed from outside a call).
    Busy,
    /// Waiting for [`Engine::delay_elapsed`] before a model reply.
    Thinking,
    Confirming,
    Executing,
    /// Waiting for [`Engine::remote_finished`].
    Calling,
    Flooding {
        sent: u64,
        total: u64,
    },
}

#[derive(Debug)]
struct Run {
    run_id: String,
    request_id: String,
    operation: Operation,
    script: Script,
    /// Effective model of this run (`mock-slow` delays replies).
    model: String,
    /// Confirmation policy, frozen at admission.
    mode: ConfirmMode,
    /// The turn this run writes into.
    turn: usize,
    exchanges: u64,
    stage: Stage,
    cancel_requested: bool,
    call: Option<Value>,
    /// The subagent tool calls in flight ([`Script::Subagent`]).
    batch: Option<Batch>,
    /// The compact archive written for this run.
    archive: Option<String>,
}

/// The remote calls of one subagent tool batch, made one at a time.
#[derive(Debug)]
struct Batch {
    /// The tool-call objects, as emitted in `tool_calls`.
    invokes: Vec<Value>,
    /// One exchange per call, all with the run's request id.
    requests: Vec<RemoteCall>,
    /// One result per finished call, in order.
    results: Vec<Value>,
}

impl Batch {
    /// Records the outcome text of the call in flight; the next exchange,
    /// if any is left.
    fn record(&mut self, outcome: &str) -> Option<RemoteCall> {
        let index = self.results.len();
        self.results
            .push(remote_result(&self.invokes[index], outcome));
        self.requests.get(index + 1).cloned()
    }

    /// Fails every call that has no result yet with `reason`.
    fn abandon(&mut self, reason: &str) {
        while let Some(request) = self.requests.get(self.results.len()) {
            let outcome = format!("{} failed: {reason}", request.route);
            self.record(&outcome);
        }
    }
}

/// A bounded set of recently admitted request ids.
#[derive(Debug, Default)]
struct RecentIds {
    order: VecDeque<String>,
    set: HashSet<String>,
}

impl RecentIds {
    fn contains(&self, id: &str) -> bool {
        self.set.contains(id)
    }

    fn insert(&mut self, id: &str) {
        if self.set.insert(id.to_string()) {
            self.order.push_back(id.to_string());
            if self.order.len() > DUPLICATE_WINDOW {
                if let Some(old) = self.order.pop_front() {
                    self.set.remove(&old);
                }
            }
        }
    }
}

/// The scripted worker.
pub(crate) struct Engine {
    settings: Settings,
    ids: Box<dyn FnMut() -> String + Send>,
    storage: Box<dyn Storage + Send>,
    sequence: u64,
    request_id: String,
    run_id: String,
    conversation: Conversation,
    admitted: RecentIds,
    queue: VecDeque<Value>,
    active: Option<Run>,
    rejected_payloads: u64,
    storage_failed: bool,
    stopping: bool,
    model: String,
    mode: ConfirmMode,
    calls: u64,
    /// Events the connection dropped while disconnected (shell-reported).
    dropped_events: u64,
}

type Out = Vec<Action>;

impl Engine {
    /// A worker with a restored (or empty) conversation. A run that was in
    /// progress when the previous process stopped is recorded as failed.
    pub(crate) fn new(
        settings: Settings,
        mut conversation: Conversation,
        storage: Box<dyn Storage + Send>,
        ids: Box<dyn FnMut() -> String + Send>,
    ) -> Engine {
        if conversation.loop_progress.status == "running" {
            conversation.loop_progress = LoopProgress {
                status: "failed".into(),
                phase: "ready".into(),
                completed_exchanges: conversation.loop_progress.completed_exchanges,
                error: "the previous worker process stopped during the run".into(),
            };
        }
        Engine {
            model: settings.model.clone(),
            settings,
            ids,
            storage,
            sequence: 0,
            request_id: String::new(),
            run_id: String::new(),
            conversation,
            admitted: RecentIds::default(),
            queue: VecDeque::new(),
            active: None,
            rejected_payloads: 0,
            storage_failed: false,
            stopping: false,
            mode: ConfirmMode::Ask,
            calls: 0,
            dropped_events: 0,
        }
    }

    /// Records how many events the connection has dropped so far, for the
    /// status object.
    pub(crate) fn set_dropped_events(&mut self, dropped: u64) {
        self.dropped_events = dropped;
    }

    /// The `ready` event, once per process.
    pub(crate) fn start(&mut self) -> Vec<Action> {
        let mut out = Vec::new();
        let status = self.status();
        self.emit(&mut out, "ready", status);
        out
    }

    /// A `type: payload` message from the hub.
    pub(crate) fn handle_payload(&mut self, data: &Value) -> Vec<Action> {
        let mut out = Vec::new();
        match data.get("operation").and_then(Value::as_str) {
            Some("history") => self.answer_history(data, &mut out),
            Some("answer") => self.answer_answer(data, &mut out),
            _ if self.stopping => self.reject(Rejection::new(data, "worker is stopping"), &mut out),
            _ if self.queue.len() >= self.settings.payload_capacity => {
                self.rejected_payloads += 1;
                let rejection = Rejection::new(
                    data,
                    "Worker input queue is full. Wait for current work to finish, then retry.",
                )
                .with_code("payload_queue_full");
                self.reject(rejection, &mut out);
            }
            _ => self.queue.push_back(data.clone()),
        }
        self.pump(&mut out);
        out
    }

    /// A `type: signal` message from the hub.
    pub(crate) fn handle_signal(&mut self, data: &Value) -> Vec<Action> {
        let mut out = Vec::new();
        match data.get("operation").and_then(Value::as_str) {
            Some("status") => {
                let status = self.status();
                self.emit(&mut out, "status", status);
            }
            Some("options") => {
                let options = self.options();
                self.emit(&mut out, "options", options);
            }
            Some("cancel") => match data.get("run_id").and_then(Value::as_str) {
                Some(run_id) if !run_id.is_empty() => self.cancel(run_id, &mut out),
                _ => self.emit(
                    &mut out,
                    "error",
                    json!({"message": "cancel requires a nonempty string run_id"}),
                ),
            },
            Some("shutdown") if self.settings.ignore_shutdown => {
                out.push(Action::Note(
                    "shutdown signal ignored (mock-ignore-shutdown)".into(),
                ));
            }
            Some("shutdown") => self.stop(&mut out),
            Some(other) => {
                let message = format!("unknown signal operation {other:?}");
                self.emit(&mut out, "error", json!({ "message": message }));
            }
            None => self.emit(
                &mut out,
                "error",
                json!({"message": "signal data must be an object with a string operation"}),
            ),
        }
        self.pump(&mut out);
        out
    }

    /// SIGTERM: settle, persist, exit 0 (like `shutdown`, never ignored).
    pub(crate) fn terminate(&mut self) -> Vec<Action> {
        let mut out = Vec::new();
        self.stop(&mut out);
        out
    }

    /// A [`Action::Wait`] finished.
    pub(crate) fn delay_elapsed(&mut self, run_id: &str) -> Vec<Action> {
        let mut out = Vec::new();
        if self.stage_of(run_id) == Some(Stage::Thinking) {
            self.respond(&mut out);
        }
        self.pump(&mut out);
        out
    }

    /// A [`Action::Confirm`] exchange settled.
    pub(crate) fn confirmation_decided(&mut self, run_id: &str, decision: Decision) -> Vec<Action> {
        let mut out = Vec::new();
        if self.stage_of(run_id) == Some(Stage::Confirming) {
            let run = self.active.as_mut().expect("confirming run");
            if decision.approved {
                run.stage = Stage::Executing;
                let command = run.call.as_ref().map_or(String::new(), |call| {
                    call["arguments"]["command"]
                        .as_str()
                        .unwrap_or("")
                        .to_string()
                });
                out.push(Action::Execute {
                    run_id: run_id.to_string(),
                    command,
                });
            } else {
                let result = denied(run.call.as_ref(), &decision.reason);
                self.tools_settled(vec![result], &mut out);
            }
        }
        self.pump(&mut out);
        out
    }

    /// A [`Action::Execute`] command finished.
    pub(crate) fn command_finished(&mut self, run_id: &str, output: ToolOutput) -> Vec<Action> {
        let mut out = Vec::new();
        if self.stage_of(run_id) == Some(Stage::Executing) {
            let call = self.active.as_ref().and_then(|run| run.call.clone());
            let mut extras = json!({ "exit_code": output.exit_code });
            if let Some(signal) = output.signal {
                extras["signal"] = json!(signal);
            }
            if output.timed_out {
                extras["timed_out"] = json!(true);
            }
            if output.truncated {
                extras["truncated"] = json!(true);
            }
            if let Some(error) = &output.error {
                extras["error"] = json!({"stage": "invoke", "code": "invoke", "message": error});
            }
            let result = json!({
                "query": call,
                "output": {"type": "text", "modality": "text", "raw": output.raw},
                "extras": extras,
            });
            self.tools_settled(vec![result], &mut out);
        }
        self.pump(&mut out);
        out
    }

    /// A [`Action::Remote`] exchange ended; `outcome` is the text the
    /// scripted model answers with (`/plan`), or the output of the
    /// subagent call's tool result.
    pub(crate) fn remote_finished(&mut self, run_id: &str, outcome: String) -> Vec<Action> {
        let mut out = Vec::new();
        if self.stage_of(run_id) == Some(Stage::Calling) {
            if let Some(batch) = self.run_mut().batch.as_mut() {
                match batch.record(&outcome) {
                    Some(next) => out.push(Action::Remote(next)),
                    None => {
                        let results = std::mem::take(&mut batch.results);
                        self.tools_settled(results, &mut out);
                    }
                }
                self.pump(&mut out);
                return out;
            }
            self.run_mut().stage = Stage::Busy;
            self.commit(vec![text_part(&outcome)], None, &mut out);
            self.finish("completed", "", None, &mut out);
        }
        self.pump(&mut out);
        out
    }

    /// A [`Action::Resume`] came due: the next batch of flood events.
    pub(crate) fn resume(&mut self, run_id: &str) -> Vec<Action> {
        let mut out = Vec::new();
        if let Some(Stage::Flooding { sent, total }) = self.stage_of(run_id) {
            let batch = (total - sent).min(FLOOD_BATCH);
            for n in sent + 1..=sent + batch {
                let data = json!({
                    "type": "model_response", "role": "assistant",
                    "content": [text_part(&format!("flood {n}/{total}"))],
                });
                self.emit(&mut out, "model_response", data);
            }
            let sent = sent + batch;
            if sent < total {
                self.active.as_mut().expect("flooding run").stage = Stage::Flooding { sent, total };
                out.push(Action::Resume {
                    run_id: run_id.to_string(),
                });
            } else {
                self.finish("completed", "", None, &mut out);
            }
        }
        self.pump(&mut out);
        out
    }

    // ----------------------------------------------------------- events --

    fn emit(&mut self, out: &mut Out, event: &str, data: Value) {
        let (request_id, run_id) = (self.request_id.clone(), self.run_id.clone());
        self.emit_as(out, event, &request_id, &run_id, data);
    }

    fn emit_as(&mut self, out: &mut Out, event: &str, request_id: &str, run_id: &str, data: Value) {
        self.sequence += 1;
        let frame = json!({
            "type": "event",
            "event": event,
            "session_id": self.settings.session_id,
            "worker_id": self.settings.worker_id,
            "request_id": request_id,
            "run_id": run_id,
            "sequence": self.sequence,
            "data": data,
        });
        out.push(Action::Emit(frame.to_string()));
    }

    fn status(&self) -> Value {
        let progress = &self.conversation.loop_progress;
        json!({
            "active": self.active.is_some(),
            "stopping": self.stopping,
            "storage_failed": self.storage_failed,
            "rejected_payloads": self.rejected_payloads,
            "dropped_events": self.dropped_events,
            "capabilities": CAPABILITIES,
            "memory_retention": {"max_archives": self.settings.max_archives},
            "loop": {
                "status": progress.status,
                "phase": progress.phase,
                "completed_exchanges": progress.completed_exchanges,
                "committed_response_sequence": self.conversation.committed_response_sequence,
                "error": progress.error,
                "pending_results": [],
            },
        })
    }

    fn options(&self) -> Value {
        let mut models = vec![self.settings.model.clone()];
        for known in ["mock-flash", "mock-slow"] {
            if !models.iter().any(|m| m == known) {
                models.push(known.to_string());
            }
        }
        json!({
            "model": {
                "available": [{"name": "model", "options": models}],
                "current": {"model": self.model},
            },
            "tools": {"available": [], "current": {}},
            "confirmation": {
                "available": [{"name": "mode", "options": ["ask", "approve", "deny"]}],
                "current": {"mode": self.mode.name()},
            },
            "models": models.iter().map(|name| json!({ "name": name })).collect::<Vec<_>>(),
        })
    }

    fn reject(&mut self, rejection: Rejection, out: &mut Out) {
        let envelope_id = rejection.request_id.as_str().unwrap_or("").to_string();
        let mut data = json!({
            "request_id": rejection.request_id,
            "message": rejection.message,
        });
        if let Some(operation) = rejection.operation {
            data["operation"] = json!(operation.name());
        }
        if let Some(code) = rejection.code {
            data["code"] = json!(code);
        }
        self.emit_as(out, "input_rejected", &envelope_id, "", data);
    }

    fn answer_history(&mut self, data: &Value, out: &mut Out) {
        let reply = validate::parse_history(data).and_then(|query| {
            self.conversation
                .history_page(&query, &self.settings.worker_id)
                .map_err(|message| (json!(query.request_id), message))
        });
        match reply {
            Ok(page) => self.emit(out, "history", page),
            Err((request_id, message)) => self.emit(
                out,
                "history_error",
                json!({"request_id": request_id, "message": message}),
            ),
        }
    }

    fn answer_answer(&mut self, data: &Value, out: &mut Out) {
        let reply = validate::parse_answer(data).and_then(|query| {
            self.conversation
                .answer_page(&query, &self.settings.worker_id)
                .map_err(|message| (json!(query.request_id), message))
        });
        match reply {
            Ok(page) => self.emit(out, "answer", page),
            Err((request_id, message)) => self.emit(
                out,
                "answer_error",
                json!({"request_id": request_id, "message": message}),
            ),
        }
    }

    // ------------------------------------------------------- admission --

    fn stage_of(&self, run_id: &str) -> Option<Stage> {
        self.active
            .as_ref()
            .filter(|run| run.run_id == run_id)
            .map(|run| run.stage.clone())
    }

    /// Admits queued requests while no run is active.
    fn pump(&mut self, out: &mut Out) {
        while self.active.is_none() && !self.stopping {
            let Some(data) = self.queue.pop_front() else {
                break;
            };
            self.admit(&data, out);
        }
    }

    fn admit(&mut self, data: &Value, out: &mut Out) {
        let request = match validate::parse_run(data) {
            Ok(request) => request,
            Err(rejection) => return self.reject(rejection, out),
        };
        let refuse = |message: &str| Rejection::new(data, message);
        let conversation = &self.conversation;
        let refusal = if self.storage_failed {
            Some(refuse("a required state save failed; admission is stopped"))
        } else if self.admitted.contains(&request.request_id) {
            Some(
                refuse("duplicate request_id in the recent admission window")
                    .with_code("duplicate_request_id"),
            )
        } else if request.operation == Operation::Continue
            && conversation.turns.is_empty()
            && conversation.memory.is_none()
        {
            Some(refuse(
                "continue requires an existing turn or compact memory",
            ))
        } else if request.operation == Operation::Compact && !self.settings.persistence {
            Some(refuse("compact requires enabled persistence"))
        } else if request.operation == Operation::Compact && conversation.turns.is_empty() {
            Some(refuse("compact requires at least one conversation turn"))
        } else {
            None
        };
        if let Some(rejection) = refusal {
            return self.reject(rejection, out);
        }
        if let Some(model) = request.options.model {
            self.model = model;
        }
        if let Some(mode) = request.options.confirmation {
            self.mode = mode;
        }
        self.admitted.insert(&request.request_id);
        self.request_id = request.request_id.clone();
        self.run_id = (self.ids)();
        self.emit(
            out,
            "input_admitted",
            json!({"operation": request.operation.name()}),
        );
        let script = match request.operation {
            Operation::Message => Script::parse(&text_of(&request.content)),
            Operation::Continue => Script::Continue,
            Operation::Compact => Script::Compact,
        };
        self.active = Some(Run {
            run_id: self.run_id.clone(),
            request_id: request.request_id,
            operation: request.operation,
            script,
            model: self.model.clone(),
            mode: self.mode,
            turn: 0,
            exchanges: 0,
            stage: Stage::Busy,
            cancel_requested: false,
            call: None,
            batch: None,
            archive: None,
        });
        self.conversation.loop_progress = LoopProgress {
            status: "running".into(),
            phase: "model".into(),
            completed_exchanges: 0,
            error: String::new(),
        };
        match request.operation {
            Operation::Message => {
                self.emit(out, "run_started", json!({}));
                self.conversation.turns.push(Turn {
                    user: request.content,
                    internal: false,
                    steps: Vec::new(),
                });
                self.conversation.revision += 1;
                self.set_turn();
                self.emit(out, "input_committed", json!({}));
                if self.run().script == Script::Crash {
                    out.push(Action::Note(format!(
                        "run {} crashing on request (/crash)",
                        self.run_id
                    )));
                    out.push(Action::Exit {
                        code: 3,
                        close: false,
                    });
                    return;
                }
            }
            Operation::Continue => {
                self.emit(out, "run_started", json!({}));
                if self.conversation.turns.is_empty() {
                    // Continuing from compact memory: a private host turn.
                    self.conversation.turns.push(Turn {
                        user: Vec::new(),
                        internal: true,
                        steps: Vec::new(),
                    });
                    self.conversation.revision += 1;
                }
                self.set_turn();
            }
            Operation::Compact => {
                let markdown = self.conversation.to_markdown(&self.settings.session_id);
                let run_id = self.run_id.clone();
                match self.storage.archive(&run_id, &markdown) {
                    Ok(path) => {
                        self.run_mut().archive = Some(path);
                        self.emit(out, "run_started", json!({}));
                    }
                    Err(err) => {
                        let error = format!("compact archive export failed: {err}");
                        return self.finish("failed", &error, None, out);
                    }
                }
            }
        }
        self.begin_exchange(out);
    }

    fn set_turn(&mut self) {
        let last = self.conversation.turns.len() - 1;
        self.run_mut().turn = last;
    }

    fn run(&self) -> &Run {
        self.active.as_ref().expect("an active run")
    }

    fn run_mut(&mut self) -> &mut Run {
        self.active.as_mut().expect("an active run")
    }

    // ------------------------------------------------------------ runs --

    /// Starts the next model exchange: budget check, then an optional delay.
    fn begin_exchange(&mut self, out: &mut Out) {
        let run = self.run();
        if run.exchanges >= self.settings.max_exchanges {
            return self.finish("exchange_limit", "", None, out);
        }
        let mut delay = match (&run.script, run.exchanges) {
            (Script::Sleep(ms, _), 0) => *ms,
            _ => 0,
        };
        if run.model == "mock-slow" {
            delay += SLOW_REPLY_MS;
        }
        self.conversation.loop_progress.phase = "model".into();
        if delay > 0 {
            let run = self.run_mut();
            run.stage = Stage::Thinking;
            out.push(Action::Wait {
                run_id: run.run_id.clone(),
                ms: delay,
            });
        } else {
            self.respond(out);
        }
    }

    /// The scripted model's reply for the current exchange.
    fn respond(&mut self, out: &mut Out) {
        self.run_mut().stage = Stage::Busy;
        let run = self.run();
        match (run.script.clone(), run.exchanges) {
            (Script::Compact, _) => self.finish_compact(out),
            (Script::Tool(command), 0) => self.propose_tool(&command, out),
            (Script::Subagent(calls), 0) => self.call_subagents(&calls, out),
            (Script::Tool(_) | Script::Subagent(_), _) => {
                let turn = &self.conversation.turns[self.run().turn];
                let results = turn.steps.last().map_or(0, |step| step.tool_results.len());
                let text = format!("finished after {results} tool result(s)");
                self.commit(vec![text_part(&text)], None, out);
                self.finish("completed", "", None, out);
            }
            (Script::Big(bytes), _) => {
                self.commit(vec![text_part(&big_text(bytes))], None, out);
                self.finish("completed", "", None, out);
            }
            (Script::Flood(total, text), _) => {
                self.commit(vec![text_part(&echo(&text))], None, out);
                if total == 0 {
                    return self.finish("completed", "", None, out);
                }
                let run = self.run_mut();
                run.stage = Stage::Flooding { sent: 0, total };
                out.push(Action::Resume {
                    run_id: run.run_id.clone(),
                });
            }
            (Script::Continue, _) => {
                self.commit(vec![text_part("continued")], None, out);
                self.finish("completed", "", None, out);
            }
            (Script::Echo(text) | Script::Sleep(_, text), _) => {
                let reply = if text.is_empty() {
                    let parts = self.conversation.turns[self.run().turn].user.len();
                    format!("echo: ({parts} non-text part(s))")
                } else {
                    echo(&text)
                };
                self.commit(vec![text_part(&reply)], None, out);
                self.finish("completed", "", None, out);
            }
            (Script::Plan(markdown), _) => {
                self.call_tool("plan/replace", json!({ "markdown": markdown }), out)
            }
            (Script::PlanRead, _) => self.call_tool("plan/read", json!({"operation": "read"}), out),
            (Script::Crash, _) => self.finish("completed", "", None, out),
        }
    }

    /// Asks the shell for one remote-tool exchange on behalf of the run;
    /// without an endpoint the reply says so at once.
    fn call_tool(&mut self, route: &str, arguments: Value, out: &mut Out) {
        if !self.settings.tools_endpoint {
            let text = format!("{route} failed: no hub_remote_call endpoint is configured");
            self.commit(vec![text_part(&text)], None, out);
            return self.finish("completed", "", None, out);
        }
        let call = self.tool_request(route, arguments);
        self.run_mut().stage = Stage::Calling;
        out.push(Action::Remote(call));
    }

    /// One `tool_request` of the active run. Its `request_id` is the
    /// run's, so every call a run makes shares it (the hub's receipts are
    /// keyed by it).
    fn tool_request(&self, route: &str, arguments: Value) -> RemoteCall {
        let run = self.run();
        let frame = json!({
            "type": "tool_request",
            "data": {
                "worker_id": self.settings.worker_id,
                "session_id": self.settings.session_id,
                "run_id": run.run_id,
                "request_id": run.request_id,
                "arguments": arguments,
            },
        });
        RemoteCall {
            run_id: run.run_id.clone(),
            route: route.to_string(),
            frame,
        }
    }

    /// Proposes the trusted subagent tool calls (no confirmation) and
    /// starts the first exchange; the results follow in one `tool_results`
    /// once every call has an outcome.
    fn call_subagents(&mut self, calls: &[subagent::Call], out: &mut Out) {
        let mut invokes = Vec::new();
        for call in calls {
            self.calls += 1;
            invokes.push(call.invoke(&format!("call-{}", self.calls)));
        }
        let summary: Vec<String> = calls
            .iter()
            .map(|call| format!("{}: {}", call.name(), call.shown))
            .collect();
        self.commit(
            vec![text_part(&summary.join("\n"))],
            Some(invokes.clone()),
            out,
        );
        self.emit(out, "tool_calls", Value::Array(invokes.clone()));
        self.conversation.loop_progress.phase = "tools".into();
        self.checkpoint("before_tools", out);
        let requests: Vec<RemoteCall> = calls
            .iter()
            .map(|call| self.tool_request(&call.route, call.arguments.clone()))
            .collect();
        let first = requests[0].clone();
        let mut batch = Batch {
            invokes,
            requests,
            results: Vec::new(),
        };
        if !self.settings.tools_endpoint {
            batch.abandon("no hub_remote_call endpoint is configured");
            return self.tools_settled(batch.results, out);
        }
        let run = self.run_mut();
        run.batch = Some(batch);
        run.stage = Stage::Calling;
        out.push(Action::Remote(first));
    }

    /// Commits one model response to the conversation and emits it.
    fn commit(&mut self, content: Vec<Value>, invokes: Option<Vec<Value>>, out: &mut Out) {
        let sequence = self.conversation.committed_response_sequence + 1;
        self.conversation.committed_response_sequence = sequence;
        let mut response =
            json!({"type": "model_response", "role": "assistant", "content": content});
        if let Some(invokes) = invokes {
            response["invokes"] = Value::Array(invokes);
        }
        let worker_id = self.settings.worker_id.clone();
        let run = self.run_mut();
        run.exchanges += 1;
        let turn = run.turn;
        let execution = Execution {
            worker_id,
            request_id: run.request_id.clone(),
            run_id: run.run_id.clone(),
        };
        let generated: usize =
            text_of(response["content"].as_array().map_or(&[], Vec::as_slice)).len();
        let prompt: usize = self.conversation.turns[turn]
            .user
            .iter()
            .map(|part| part["raw"].as_str().map_or(0, str::len))
            .sum();
        self.conversation.turns[turn].steps.push(Step {
            response: response.clone(),
            commit_sequence: sequence,
            execution,
            tool_results: Vec::new(),
        });
        self.conversation.revision += 1;
        self.conversation.loop_progress.completed_exchanges = self.run().exchanges;
        let step = self.conversation.turns[turn].steps.len() - 1;
        response["cost"] =
            json!({"prompt": prompt / 4 + 8, "generated": generated / 4 + 1, "cache_hit": 0});
        response["commit_sequence"] = json!(sequence.to_string());
        response["answer_source"] =
            self.conversation
                .answer_source(&self.settings.worker_id, turn, step);
        self.emit(out, "model_response", response);
    }

    fn propose_tool(&mut self, command: &str, out: &mut Out) {
        self.calls += 1;
        let call = json!({
            "id": format!("call-{}", self.calls),
            "name": "run_command",
            "arguments": {"command": command},
            "type": "serial_write",
            "security": "require_confirm",
        });
        self.commit(
            vec![text_part(&format!("run_command: {command}"))],
            Some(vec![call.clone()]),
            out,
        );
        self.emit(out, "tool_calls", json!([call]));
        self.conversation.loop_progress.phase = "tools".into();
        self.checkpoint("before_tools", out);
        let endpoint = self.settings.confirmation_endpoint;
        let run = self.run_mut();
        run.call = Some(call.clone());
        let run_id = run.run_id.clone();
        match run.mode {
            ConfirmMode::Approve => {
                run.stage = Stage::Executing;
                out.push(Action::Execute {
                    run_id,
                    command: command.to_string(),
                });
            }
            ConfirmMode::Deny => {
                let result = denied(
                    Some(&call),
                    "denied by the run's confirmation policy (deny)",
                );
                self.tools_settled(vec![result], out);
            }
            ConfirmMode::Ask if !endpoint => {
                let result = denied(Some(&call), "no confirmation endpoint is configured");
                self.tools_settled(vec![result], out);
            }
            ConfirmMode::Ask => {
                run.stage = Stage::Confirming;
                let confirmation_id = (self.ids)();
                let frame = json!({
                    "type": "confirmation_request",
                    "data": {
                        "worker_id": self.settings.worker_id,
                        "session_id": self.settings.session_id,
                        "run_id": run_id,
                        "confirmation_id": confirmation_id,
                        "call": call,
                    },
                });
                out.push(Action::Confirm(ConfirmRequest {
                    run_id,
                    confirmation_id,
                    frame,
                }));
            }
        }
    }

    /// The batch's results are in: project them, then continue the loop.
    fn tools_settled(&mut self, results: Vec<Value>, out: &mut Out) {
        self.emit(out, "tool_results", Value::Array(results.clone()));
        let turn = self.run().turn;
        if let Some(step) = self.conversation.turns[turn].steps.last_mut() {
            step.tool_results.extend(results);
        }
        self.run_mut().batch = None;
        self.conversation.loop_progress.phase = "model".into();
        if self.settings.save_on_step {
            self.checkpoint("step_finished", out);
        }
        self.run_mut().stage = Stage::Busy;
        if self.run().cancel_requested {
            self.finish("cancelled", "", None, out);
        } else {
            self.begin_exchange(out);
        }
    }

    fn finish_compact(&mut self, out: &mut Out) {
        let memory_file = self.run().archive.clone().unwrap_or_default();
        let summary = self.conversation.summary();
        let removed_turns = self.conversation.turns.len();
        let mut next = self.conversation.clone();
        next.turns.clear();
        next.memory = Some(Memory {
            summary: summary.clone(),
            memory_file: memory_file.clone(),
        });
        next.revision += 1;
        next.loop_progress = LoopProgress {
            status: "completed".into(),
            phase: "ready".into(),
            completed_exchanges: 1,
            error: String::new(),
        };
        self.run_mut().exchanges = 1;
        // The new snapshot is saved before it replaces the live state.
        match self.storage.save(&next) {
            Ok(export_error) => {
                self.conversation = next;
                self.emit(
                    out,
                    "persisted",
                    json!({"boundary": "compact", "format": "json"}),
                );
                if let Some(message) = export_error {
                    self.emit(out, "export_error", json!({ "message": message }));
                }
            }
            Err(err) => {
                self.storage_failed = true;
                let message = format!("compact state save failed: {err}");
                self.emit(out, "error", json!({"message": message, "durable": false}));
                return self.finish("failed", &message, Some(false), out);
            }
        }
        let mut data = json!({
            "summary": summary,
            "memory_file": memory_file,
            "removed_turns": removed_turns,
            "revision": self.conversation.revision,
            "durable": true,
        });
        if self.settings.max_archives > 0 {
            match self.storage.cleanup(&memory_file) {
                Ok((archives, bytes)) => {
                    data["archive_cleanup"] =
                        json!({"removed_archives": archives, "removed_bytes": bytes})
                }
                Err(err) => data["archive_cleanup_error"] = json!(err),
            }
        }
        self.emit(out, "compact_finished", data);
        self.finish("completed", "", Some(true), out);
    }

    /// Saves the conversation at a boundary; true when it is durable.
    fn checkpoint(&mut self, boundary: &str, out: &mut Out) -> bool {
        if !self.settings.persistence || self.storage_failed {
            return false;
        }
        match self.storage.save(&self.conversation) {
            Ok(export_error) => {
                self.emit(
                    out,
                    "persisted",
                    json!({"boundary": boundary, "format": "json"}),
                );
                if let Some(message) = export_error {
                    self.emit(out, "export_error", json!({ "message": message }));
                }
                true
            }
            Err(err) => {
                self.storage_failed = true;
                let message = format!("state save failed at {boundary}: {err}");
                self.emit(out, "error", json!({"message": message, "durable": false}));
                false
            }
        }
    }

    /// Settles the active run: final save (unless `durable` is given),
    /// `run_finished`, a log line.
    fn finish(&mut self, status: &str, error: &str, durable: Option<bool>, out: &mut Out) {
        let Some(run) = self.active.as_ref() else {
            return;
        };
        let exchanges = run.exchanges;
        self.conversation.loop_progress = LoopProgress {
            status: status.into(),
            phase: "ready".into(),
            completed_exchanges: exchanges,
            error: error.into(),
        };
        let durable = match durable {
            Some(durable) => durable,
            None if status == "cancelled" => self.checkpoint("cancelled", out),
            None if self.settings.save_on_run => self.checkpoint("run_finished", out),
            None => false,
        };
        let run = self.active.take().expect("an active run");
        let mut data = json!({
            "status": status,
            "error": error,
            "exchanges": exchanges,
            "durable": durable,
        });
        if status == "failed" {
            let can_continue =
                !self.conversation.turns.is_empty() || self.conversation.memory.is_some();
            data["failure"] = json!({"stage": "other", "can_continue": can_continue});
        }
        self.emit(out, "run_finished", data);
        out.push(Action::Note(format!(
            "run {} ({}, request {}) {status} after {exchanges} exchange(s)",
            run.run_id,
            run.operation.name(),
            run.request_id
        )));
    }

    fn cancel(&mut self, run_id: &str, out: &mut Out) {
        let status = self.status();
        self.emit(out, "status", status);
        let Some(stage) = self.stage_of(run_id) else {
            return; // a stale or unknown id changes nothing
        };
        self.settle_cancelled(stage, "cancelled before a decision", out);
    }

    /// Cancels the active run at whatever it is waiting for. A running
    /// command is allowed to settle; its result is then projected.
    fn settle_cancelled(&mut self, stage: Stage, reason: &str, out: &mut Out) {
        let run_id = self.run().run_id.clone();
        match stage {
            Stage::Executing => self.run_mut().cancel_requested = true,
            Stage::Confirming => {
                out.push(Action::Abort { run_id });
                self.run_mut().cancel_requested = true;
                let result = denied(self.run().call.as_ref(), reason);
                self.tools_settled(vec![result], out);
            }
            Stage::Calling if self.run().batch.is_some() => {
                out.push(Action::Abort { run_id });
                self.run_mut().cancel_requested = true;
                let mut batch = self.run_mut().batch.take().expect("a subagent batch");
                batch.abandon(reason);
                self.tools_settled(batch.results, out);
            }
            Stage::Thinking | Stage::Calling | Stage::Flooding { .. } | Stage::Busy => {
                out.push(Action::Abort { run_id });
                self.finish("cancelled", "", None, out);
            }
        }
    }

    /// Shutdown: no further admission, cancel the active run, save, exit 0.
    fn stop(&mut self, out: &mut Out) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        self.queue.clear();
        if let Some(run) = &self.active {
            let stage = run.stage.clone();
            if stage == Stage::Executing {
                // The shell kills the command as the process exits.
                let output = ToolOutput {
                    raw: "interrupted by worker shutdown".into(),
                    error: Some("worker shutdown".into()),
                    ..ToolOutput::default()
                };
                self.run_mut().cancel_requested = true;
                let run_id = self.run().run_id.clone();
                out.extend(self.command_finished(&run_id, output));
            } else {
                self.settle_cancelled(stage, "worker shutdown", out);
            }
        }
        if self.settings.save_on_shutdown {
            self.checkpoint("shutdown", out);
        }
        out.push(Action::Note("shutting down".into()));
        out.push(Action::Exit {
            code: 0,
            close: true,
        });
    }
}

fn text_part(raw: &str) -> Value {
    json!({"type": "text", "modality": "text", "raw": raw})
}

fn echo(text: &str) -> String {
    format!("echo: {text}")
}

/// Exactly `bytes` bytes of printable ASCII in 64-byte lines.
fn big_text(bytes: usize) -> String {
    const LINE: &[u8; 64] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.\n";
    let data: Vec<u8> = LINE.iter().copied().cycle().take(bytes).collect();
    String::from_utf8(data).expect("ASCII")
}

/// The result of a subagent call: the remote outcome text (as `/plan`
/// replies) is the output.
fn remote_result(call: &Value, outcome: &str) -> Value {
    json!({"query": call, "output": text_part(outcome)})
}

/// The result of a call that was not executed.
fn denied(call: Option<&Value>, reason: &str) -> Value {
    json!({
        "query": call,
        "output": {
            "type": "text", "modality": "text",
            "raw": format!("Tool call denied: {reason}"),
        },
        "extras": {"error": {"stage": "security_check", "code": "security_check", "message": reason}},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// In-memory storage recording every save.
    #[derive(Default)]
    struct Recorded {
        saves: Vec<Conversation>,
        archives: Vec<String>,
        fail_saves: bool,
    }

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Recorded>>);

    impl Storage for Shared {
        fn save(&mut self, conversation: &Conversation) -> Result<Option<String>, String> {
            let mut memory = self.0.lock().unwrap();
            if memory.fail_saves {
                return Err("disk full".into());
            }
            memory.saves.push(conversation.clone());
            Ok(None)
        }
        fn archive(&mut self, run_id: &str, _markdown: &str) -> Result<String, String> {
            let path = format!("/root/memory/{run_id}/memory.md");
            self.0.lock().unwrap().archives.push(path.clone());
            Ok(path)
        }
        fn cleanup(&mut self, _current: &str) -> Result<(u64, u64), String> {
            Ok((0, 0))
        }
    }

    fn settings() -> Settings {
        Settings {
            session_id: "demo".into(),
            worker_id: "worker-1".into(),
            model: "mock-flash".into(),
            max_exchanges: 512,
            payload_capacity: 2,
            persistence: true,
            save_on_step: true,
            save_on_run: true,
            save_on_shutdown: true,
            max_archives: 5,
            confirmation_endpoint: true,
            tools_endpoint: true,
            ignore_shutdown: false,
        }
    }

    fn engine_with(settings: Settings) -> (Engine, Shared) {
        let storage = Shared::default();
        let mut counter = 0;
        let ids = Box::new(move || {
            counter += 1;
            format!("id-{counter}")
        });
        let engine = Engine::new(
            settings,
            Conversation::default(),
            Box::new(storage.clone()),
            ids,
        );
        (engine, storage)
    }

    fn engine() -> Engine {
        engine_with(settings()).0
    }

    /// The emitted events as parsed envelopes.
    fn events(actions: &[Action]) -> Vec<Value> {
        actions
            .iter()
            .filter_map(|action| match action {
                Action::Emit(text) => Some(serde_json::from_str(text).unwrap()),
                _ => None,
            })
            .collect()
    }

    fn names(actions: &[Action]) -> Vec<String> {
        events(actions)
            .iter()
            .map(|e| e["event"].as_str().unwrap().to_string())
            .collect()
    }

    fn find(actions: &[Action], name: &str) -> Value {
        events(actions)
            .into_iter()
            .find(|e| e["event"] == name)
            .unwrap_or_else(|| panic!("no {name} in {:?}", names(actions)))
    }

    fn message(id: &str, text: &str) -> Value {
        json!({"operation": "message", "request_id": id,
               "content": [{"type": "text", "raw": text, "modality": "text"}]})
    }

    fn signal(operation: &str) -> Value {
        json!({ "operation": operation })
    }

    fn cancel(run_id: &str) -> Value {
        json!({"operation": "cancel", "run_id": run_id})
    }

    #[test]
    fn ready_and_status_before_admission_have_empty_ids() {
        let mut e = engine();
        let ready = events(&e.start()).remove(0);
        assert_eq!(ready["event"], "ready");
        assert_eq!(ready["sequence"], 1);
        assert_eq!(
            (ready["request_id"].as_str(), ready["run_id"].as_str()),
            (Some(""), Some(""))
        );
        assert_eq!(ready["data"]["capabilities"], json!(CAPABILITIES));
        let status = events(&e.handle_signal(&signal("status"))).remove(0);
        assert_eq!(status["sequence"], 2);
        assert_eq!(status["data"]["active"], false);
        assert_eq!(status["data"]["loop"]["status"], "idle");
        assert_eq!(status["data"]["storage_failed"], false);
        assert_eq!(status["session_id"], "demo");
        assert_eq!(status["worker_id"], "worker-1");
    }

    #[test]
    fn a_message_runs_to_completion() {
        let mut e = engine();
        e.start();
        let actions = e.handle_payload(&message("req-1", "hello"));
        assert_eq!(
            names(&actions),
            [
                "input_admitted",
                "run_started",
                "input_committed",
                "model_response",
                "persisted",
                "run_finished"
            ]
        );
        let all = events(&actions);
        let sequences: Vec<u64> = all
            .iter()
            .map(|e| e["sequence"].as_u64().unwrap())
            .collect();
        assert_eq!(sequences, [2, 3, 4, 5, 6, 7]);
        for event in &all {
            assert_eq!(event["request_id"], "req-1");
            assert_eq!(event["run_id"], "id-1");
        }
        assert_eq!(all[0]["data"], json!({"operation": "message"}));
        let response = &all[3]["data"];
        assert_eq!(
            response["content"][0],
            json!({"type": "text", "modality": "text", "raw": "echo: hello"})
        );
        assert_eq!(response["commit_sequence"], "1");
        assert_eq!(response["answer_source"]["worker_id"], "worker-1");
        assert_eq!(
            all[4]["data"],
            json!({"boundary": "run_finished", "format": "json"})
        );
        assert_eq!(
            all[5]["data"],
            json!({"status": "completed", "error": "", "exchanges": 1, "durable": true})
        );
        assert!(actions.iter().any(|a| matches!(a, Action::Note(_))));
        // The ids stay after the run finished.
        let status = events(&e.handle_signal(&signal("status"))).remove(0);
        assert_eq!(
            (status["request_id"].as_str(), status["run_id"].as_str()),
            (Some("req-1"), Some("id-1"))
        );
        assert_eq!(status["data"]["loop"]["status"], "completed");
    }

    #[test]
    fn runs_queue_and_overflow_is_rejected() {
        let mut e = engine();
        let first = e.handle_payload(&message("a", "/sleep 500"));
        assert!(first.contains(&Action::Wait {
            run_id: "id-1".into(),
            ms: 500
        }));
        assert!(!names(&first).contains(&"model_response".to_string()));
        assert!(e.handle_payload(&message("b", "two")).is_empty());
        assert!(e.handle_payload(&message("c", "three")).is_empty());
        let overflow = events(&e.handle_payload(&message("d", "four"))).remove(0);
        assert_eq!(overflow["event"], "input_rejected");
        assert_eq!(overflow["request_id"], "d");
        assert_eq!(overflow["run_id"], "");
        assert_eq!(overflow["data"]["code"], "payload_queue_full");
        assert_eq!(overflow["data"]["operation"], "message");
        let status = events(&e.handle_signal(&signal("status"))).remove(0);
        assert_eq!(status["data"]["rejected_payloads"], 1);
        assert_eq!(status["data"]["active"], true);
        assert_eq!(status["data"]["loop"]["status"], "running");
        // A stale delay report is ignored; the real one answers and drains the queue.
        assert!(events(&e.delay_elapsed("nope")).is_empty());
        let rest = e.delay_elapsed("id-1");
        let finished: Vec<Value> = events(&rest)
            .into_iter()
            .filter(|e| e["event"] == "run_finished")
            .collect();
        assert_eq!(finished.len(), 3);
        assert_eq!(finished[2]["request_id"], "c");
        assert_eq!(
            find(&rest, "model_response")["data"]["content"][0]["raw"],
            "echo: /sleep 500"
        );
    }

    #[test]
    fn rejections_carry_the_request_and_no_run() {
        let mut e = engine();
        e.handle_payload(&message("a", "hi"));
        let duplicate = events(&e.handle_payload(&message("a", "again"))).remove(0);
        assert_eq!(duplicate["event"], "input_rejected");
        assert_eq!(duplicate["data"]["code"], "duplicate_request_id");
        assert_eq!(
            (
                duplicate["request_id"].as_str(),
                duplicate["run_id"].as_str()
            ),
            (Some("a"), Some(""))
        );
        let bad = events(
            &e.handle_payload(&json!({"operation": "message", "request_id": 7, "content": []})),
        )
        .remove(0);
        assert_eq!(bad["request_id"], "");
        assert_eq!(bad["data"]["request_id"], 7);
        let options = events(
            &e.handle_payload(&json!({"operation": "continue", "request_id": "o",
                                                       "options": {"sampling": {}}})),
        )
        .remove(0);
        assert_eq!(options["data"]["code"], "invalid_options");
        // A rejected id was not consumed.
        let later = events(&e.handle_payload(&json!({"operation": "continue", "request_id": "o"})));
        assert_eq!(later[0]["event"], "input_admitted");
        // The envelope keeps naming the last admitted run.
        assert_eq!(later[0]["request_id"], "o");
    }

    #[test]
    fn continue_needs_a_turn() {
        let mut e = engine();
        let refused =
            events(&e.handle_payload(&json!({"operation": "continue", "request_id": "c1"})));
        assert_eq!(refused[0]["event"], "input_rejected");
        assert_eq!(refused[0]["data"]["operation"], "continue");
        e.handle_payload(&message("m", "hi"));
        let actions = e.handle_payload(&json!({"operation": "continue", "request_id": "c2"}));
        assert_eq!(
            names(&actions),
            [
                "input_admitted",
                "run_started",
                "model_response",
                "persisted",
                "run_finished"
            ]
        );
        assert_eq!(
            find(&actions, "input_admitted")["data"]["operation"],
            "continue"
        );
        assert_eq!(
            find(&actions, "model_response")["data"]["content"][0]["raw"],
            "continued"
        );
        assert_eq!(e.conversation.turns[0].steps.len(), 2);
    }

    /// The events of a message run up to its tool calls.
    const PROPOSED: [&str; 6] = [
        "input_admitted",
        "run_started",
        "input_committed",
        "model_response",
        "tool_calls",
        "persisted",
    ];

    /// A tool batch of `results` results settled and the run completed
    /// after its second exchange.
    fn assert_settled(done: &[Action], results: usize) {
        assert_eq!(
            names(done),
            [
                "tool_results",
                "persisted",
                "model_response",
                "persisted",
                "run_finished"
            ]
        );
        assert_eq!(
            find(done, "tool_results")["data"].as_array().map(Vec::len),
            Some(results)
        );
        assert_eq!(
            find(done, "model_response")["data"]["content"][0]["raw"],
            format!("finished after {results} tool result(s)")
        );
        let finished = find(done, "run_finished")["data"].clone();
        assert_eq!(
            (finished["status"].as_str(), finished["exchanges"].as_u64()),
            (Some("completed"), Some(2))
        );
    }

    fn run_tool(e: &mut Engine) -> (Vec<Action>, ConfirmRequest) {
        let actions = e.handle_payload(&message("t", "/run echo hi"));
        let confirm = actions
            .iter()
            .find_map(|a| match a {
                Action::Confirm(request) => Some(request.clone()),
                _ => None,
            })
            .expect("a confirmation");
        (actions, confirm)
    }

    #[test]
    fn approved_tool_calls_run_the_command() {
        let mut e = engine();
        let (actions, confirm) = run_tool(&mut e);
        assert_eq!(names(&actions), PROPOSED);
        let call = json!({"id": "call-1", "name": "run_command", "arguments": {"command": "echo hi"},
                          "type": "serial_write", "security": "require_confirm"});
        assert_eq!(
            find(&actions, "model_response")["data"]["invokes"],
            json!([call])
        );
        assert_eq!(find(&actions, "tool_calls")["data"], json!([call]));
        assert_eq!(
            find(&actions, "persisted")["data"]["boundary"],
            "before_tools"
        );
        assert_eq!(confirm.frame["type"], "confirmation_request");
        assert_eq!(
            confirm.frame["data"],
            json!({"worker_id": "worker-1", "session_id": "demo", "run_id": "id-1",
                   "confirmation_id": "id-2", "call": call})
        );
        let approved = e.confirmation_decided(
            "id-1",
            Decision {
                approved: true,
                reason: "ok".into(),
            },
        );
        assert_eq!(
            approved,
            [Action::Execute {
                run_id: "id-1".into(),
                command: "echo hi".into()
            }]
        );
        let output = ToolOutput {
            raw: "hi\n".into(),
            exit_code: Some(0),
            ..ToolOutput::default()
        };
        let done = e.command_finished("id-1", output);
        assert_settled(&done, 1);
        let result = &find(&done, "tool_results")["data"][0];
        assert_eq!(result["query"], call);
        assert_eq!(result["output"]["raw"], "hi\n");
        assert_eq!(result["extras"], json!({"exit_code": 0}));
    }

    #[test]
    fn denied_tool_calls_still_complete() {
        let mut e = engine();
        run_tool(&mut e);
        let done = e.confirmation_decided(
            "id-1",
            Decision {
                approved: false,
                reason: "no way".into(),
            },
        );
        assert!(!done.iter().any(|a| matches!(a, Action::Execute { .. })));
        let result = &find(&done, "tool_results")["data"][0];
        assert_eq!(result["extras"]["error"]["code"], "security_check");
        assert_eq!(result["extras"]["error"]["message"], "no way");
        assert!(result["output"]["raw"].as_str().unwrap().contains("denied"));
        assert_eq!(find(&done, "run_finished")["data"]["status"], "completed");
    }

    #[test]
    fn local_policies_skip_the_confirmation_socket() {
        let mut e = engine();
        let approve = e.handle_payload(&json!({"operation": "message", "request_id": "a",
            "options": {"confirmation": {"mode": "approve"}},
            "content": [{"type": "text", "raw": "/run true", "modality": "text"}]}));
        assert!(approve.contains(&Action::Execute {
            run_id: "id-1".into(),
            command: "true".into()
        }));
        assert!(!approve.iter().any(|a| matches!(a, Action::Confirm(_))));
        e.command_finished("id-1", ToolOutput::default());
        let deny = e.handle_payload(&json!({"operation": "message", "request_id": "d",
            "options": {"confirmation": {"mode": "deny"}},
            "content": [{"type": "text", "raw": "/run true", "modality": "text"}]}));
        assert_eq!(find(&deny, "run_finished")["data"]["status"], "completed");
        assert!(!deny
            .iter()
            .any(|a| matches!(a, Action::Execute { .. } | Action::Confirm(_))));
        let options = events(&e.handle_signal(&signal("options"))).remove(0);
        assert_eq!(options["data"]["confirmation"]["current"]["mode"], "deny");
        assert_eq!(
            options["data"]["tools"],
            json!({"available": [], "current": {}})
        );
        assert_eq!(options["data"]["models"][0], json!({"name": "mock-flash"}));

        let mut none = engine_with(Settings {
            confirmation_endpoint: false,
            ..settings()
        })
        .0;
        let denied = none.handle_payload(&message("x", "/run true"));
        assert_eq!(find(&denied, "run_finished")["data"]["status"], "completed");
        assert!(
            find(&denied, "tool_results")["data"][0]["extras"]["error"]["message"]
                .as_str()
                .unwrap()
                .contains("no confirmation endpoint")
        );
    }

    #[test]
    fn cancel_while_confirming_never_runs_the_command() {
        let mut e = engine();
        run_tool(&mut e);
        let stale = e.handle_signal(&cancel("other-run"));
        assert_eq!(names(&stale), ["status"]);
        let actions = e.handle_signal(&cancel("id-1"));
        assert!(actions.contains(&Action::Abort {
            run_id: "id-1".into()
        }));
        assert_eq!(
            names(&actions),
            [
                "status",
                "tool_results",
                "persisted",
                "persisted",
                "run_finished"
            ]
        );
        let finished = find(&actions, "run_finished");
        assert_eq!(finished["data"]["status"], "cancelled");
        assert_eq!(finished["data"]["durable"], true);
        // The late decision is ignored.
        assert!(e
            .confirmation_decided(
                "id-1",
                Decision {
                    approved: true,
                    reason: String::new()
                }
            )
            .is_empty());
    }

    #[test]
    fn cancel_while_executing_lets_the_command_settle() {
        let mut e = engine();
        run_tool(&mut e);
        e.confirmation_decided(
            "id-1",
            Decision {
                approved: true,
                reason: String::new(),
            },
        );
        assert_eq!(names(&e.handle_signal(&cancel("id-1"))), ["status"]);
        let done = e.command_finished(
            "id-1",
            ToolOutput {
                raw: "x".into(),
                exit_code: Some(0),
                ..Default::default()
            },
        );
        assert_eq!(
            names(&done),
            ["tool_results", "persisted", "persisted", "run_finished"]
        );
        assert_eq!(find(&done, "run_finished")["data"]["status"], "cancelled");
    }

    fn remote(actions: &[Action]) -> RemoteCall {
        actions
            .iter()
            .find_map(|a| match a {
                Action::Remote(call) => Some(call.clone()),
                _ => None,
            })
            .expect("a remote call")
    }

    /// The `tool_request` frame of the first run (`id-1`).
    fn first_request(request_id: &str, arguments: Value) -> Value {
        json!({"type": "tool_request", "data": {
            "worker_id": "worker-1", "session_id": "demo", "run_id": "id-1",
            "request_id": request_id, "arguments": arguments}})
    }

    #[test]
    fn plan_triggers_call_the_tools_listener() {
        let mut e = engine();
        let actions = e.handle_payload(&message("p", "/plan # Steps\n- [ ] one"));
        assert_eq!(
            names(&actions),
            ["input_admitted", "run_started", "input_committed"]
        );
        let call = remote(&actions);
        assert_eq!(call.route, "plan/replace");
        assert_eq!(
            call.frame,
            first_request("p", json!({"markdown": "# Steps\n- [ ] one"}))
        );
        // Queued input waits behind the call.
        assert!(e.handle_payload(&message("q", "later")).is_empty());
        let done = e.remote_finished("id-1", "plan/replace succeeded: {}".into());
        let response = find(&done, "model_response");
        assert_eq!(
            response["data"]["content"][0]["raw"],
            "plan/replace succeeded: {}"
        );
        assert_eq!(find(&done, "run_finished")["data"]["status"], "completed");
        assert!(names(&done).contains(&"input_admitted".to_string()));

        let read = e.handle_payload(&message("r", "/plan-read please"));
        let call = remote(&read);
        assert_eq!(call.route, "plan/read");
        assert_eq!(
            call.frame["data"]["arguments"],
            json!({"operation": "read"})
        );
    }

    /// Cancels a run whose remote call `text` started: the socket is
    /// dropped, the run ends cancelled and a late outcome is ignored.
    fn cancel_a_call(text: &str) -> Vec<Action> {
        let mut e = engine();
        e.handle_payload(&message("p", text));
        let actions = e.handle_signal(&cancel("id-1"));
        assert!(actions.contains(&Action::Abort {
            run_id: "id-1".into()
        }));
        assert_eq!(
            find(&actions, "run_finished")["data"]["status"],
            "cancelled"
        );
        assert!(e.remote_finished("id-1", "late".into()).is_empty());
        actions
    }

    /// Runs `text` without a remote-tools endpoint: no exchange, and the
    /// run completes.
    fn call_without_an_endpoint(text: &str) -> Vec<Action> {
        let mut none = engine_with(Settings {
            tools_endpoint: false,
            ..settings()
        })
        .0;
        let actions = none.handle_payload(&message("p", text));
        assert!(!actions.iter().any(|a| matches!(a, Action::Remote(_))));
        assert_eq!(
            find(&actions, "run_finished")["data"]["status"],
            "completed"
        );
        actions
    }

    #[test]
    fn remote_calls_can_be_cancelled_and_need_an_endpoint() {
        cancel_a_call("/plan x");
        let actions = call_without_an_endpoint("/plan x");
        assert!(
            find(&actions, "model_response")["data"]["content"][0]["raw"]
                .as_str()
                .unwrap()
                .contains("no hub_remote_call endpoint")
        );

        // Subagent calls settle every call of the batch as failed.
        let actions = cancel_a_call("/subagent-repeat clean-fork {}");
        let results = find(&actions, "tool_results")["data"].clone();
        assert_eq!(results.as_array().unwrap().len(), 2);
        for result in results.as_array().unwrap() {
            assert_eq!(
                result["output"]["raw"],
                "subagent/clean-fork failed: cancelled before a decision"
            );
        }
        let actions = call_without_an_endpoint("/stop-child s");
        assert_eq!(
            find(&actions, "tool_results")["data"][0]["output"]["raw"],
            "subagent/send failed: no hub_remote_call endpoint is configured"
        );
    }

    #[test]
    fn subagent_triggers_are_trusted_tool_calls() {
        let mut e = engine();
        let actions = e.handle_payload(&message("f", "/fork"));
        assert_eq!(names(&actions), PROPOSED);
        assert!(!actions.iter().any(|a| matches!(a, Action::Confirm(_))));
        let invoke = json!({"id": "call-1", "name": "subagent_fork", "arguments": {},
                            "type": "serial_write", "security": "trusted"});
        assert_eq!(find(&actions, "tool_calls")["data"], json!([invoke]));
        assert_eq!(
            find(&actions, "model_response")["data"]["invokes"],
            json!([invoke])
        );
        let call = remote(&actions);
        assert_eq!(call.route, "subagent/clean-fork");
        assert_eq!(call.frame, first_request("f", json!({})));
        let outcome = r#"subagent/clean-fork succeeded: {"subagent_id":"subagent-1","lifecycle":"preparing"}"#;
        let done = e.remote_finished("id-1", outcome.into());
        assert_settled(&done, 1);
        assert_eq!(
            find(&done, "tool_results")["data"],
            json!([{"query": invoke,
                    "output": {"type": "text", "modality": "text", "raw": outcome}}])
        );
        // The results are committed with the step, as for `/run`.
        assert_eq!(e.conversation.turns[0].steps[0].tool_results.len(), 1);

        let send = e.handle_payload(&message("s", "/send subagent-1 do it"));
        let call = remote(&send);
        assert_eq!(call.route, "subagent/send");
        assert_eq!(call.frame["data"]["request_id"], "s");
        assert_eq!(
            call.frame["data"]["arguments"],
            json!({"subagent_id": "subagent-1", "operation": "message",
                   "content": [{"type": "text", "modality": "text", "raw": "do it"}]})
        );
        assert_eq!(
            find(&send, "tool_calls")["data"][0]["arguments"],
            json!({"subagent_id": "subagent-1", "operation": "message", "request": "do it"})
        );
        let rejected =
            r#"subagent/send rejected: {"code":"not_implemented","message":"no such route"}"#;
        let done = e.remote_finished("id-2", rejected.into());
        assert_eq!(
            find(&done, "tool_results")["data"][0]["output"]["raw"],
            rejected
        );

        let receive = e.handle_payload(&message("r", "/receive subagent-1 0 5"));
        let call = remote(&receive);
        assert_eq!(
            call.frame["data"]["arguments"],
            json!({"subagent_id": "subagent-1", "cursor": 0, "limit": 5})
        );
        assert_eq!(find(&receive, "tool_calls")["data"][0]["type"], "read_only");
    }

    #[test]
    fn subagent_repeats_reuse_the_request_id() {
        let mut e = engine();
        let actions = e.handle_payload(&message(
            "rep",
            r#"/subagent-repeat send {"subagent_id":"s","operation":"stop"}"#,
        ));
        let calls = find(&actions, "tool_calls")["data"].clone();
        assert_eq!(calls.as_array().unwrap().len(), 2);
        assert_eq!(
            (calls[0]["id"].as_str(), calls[1]["id"].as_str()),
            (Some("call-1"), Some("call-2"))
        );
        let first = remote(&actions);
        // One exchange at a time.
        let remotes = actions
            .iter()
            .filter(|a| matches!(a, Action::Remote(_)))
            .count();
        assert_eq!(remotes, 1);
        let next = e.remote_finished(
            "id-1",
            "subagent/send succeeded: {\"replayed\":false}".into(),
        );
        assert_eq!(names(&next), Vec::<String>::new());
        let second = remote(&next);
        assert_eq!(second, first);
        assert_eq!(second.frame["data"]["request_id"], "rep");
        let done = e.remote_finished(
            "id-1",
            "subagent/send succeeded: {\"replayed\":true}".into(),
        );
        let results = find(&done, "tool_results")["data"].clone();
        assert_eq!(results[0]["query"]["id"], "call-1");
        assert_eq!(
            results[0]["output"]["raw"],
            "subagent/send succeeded: {\"replayed\":false}"
        );
        assert_eq!(results[1]["query"]["id"], "call-2");
        assert_eq!(
            results[1]["output"]["raw"],
            "subagent/send succeeded: {\"replayed\":true}"
        );
        assert_settled(&done, 2);
    }

    #[test]
    fn cancel_while_sleeping() {
        let mut e = engine();
        e.handle_payload(&message("s", "/sleep 60000"));
        let actions = e.handle_signal(&cancel("id-1"));
        assert!(actions.contains(&Action::Abort {
            run_id: "id-1".into()
        }));
        assert_eq!(
            find(&actions, "run_finished")["data"]["status"],
            "cancelled"
        );
        assert!(e.delay_elapsed("id-1").is_empty());
        // The turn was committed without a response.
        assert_eq!(e.conversation.turns[0].steps.len(), 0);
    }

    #[test]
    fn the_exchange_budget_ends_a_tool_run() {
        let mut e = engine_with(Settings {
            max_exchanges: 1,
            ..settings()
        })
        .0;
        run_tool(&mut e);
        e.confirmation_decided(
            "id-1",
            Decision {
                approved: false,
                reason: "no".into(),
            },
        );
        let status = events(&e.handle_signal(&signal("status"))).remove(0);
        assert_eq!(status["data"]["loop"]["status"], "exchange_limit");
    }

    #[test]
    fn compact_archives_and_clears_the_turns() {
        let (mut e, storage) = engine_with(settings());
        let refused =
            events(&e.handle_payload(&json!({"operation": "compact", "request_id": "k0"})));
        assert_eq!(refused[0]["event"], "input_rejected");
        e.handle_payload(&message("m1", "one"));
        e.handle_payload(&message("m2", "two"));
        let actions = e.handle_payload(&json!({"operation": "compact", "request_id": "k1"}));
        assert_eq!(
            names(&actions),
            [
                "input_admitted",
                "run_started",
                "persisted",
                "compact_finished",
                "run_finished"
            ]
        );
        assert_eq!(find(&actions, "persisted")["data"]["boundary"], "compact");
        let compact = find(&actions, "compact_finished")["data"].clone();
        assert_eq!(compact["removed_turns"], 2);
        assert_eq!(compact["durable"], true);
        assert_eq!(compact["memory_file"], "/root/memory/id-3/memory.md");
        assert!(compact["summary"].as_str().unwrap().contains("\"one\""));
        assert_eq!(
            compact["archive_cleanup"],
            json!({"removed_archives": 0, "removed_bytes": 0})
        );
        assert_eq!(compact["revision"], e.conversation.revision);
        assert_eq!(storage.0.lock().unwrap().archives.len(), 1);
        let saved = storage.0.lock().unwrap().saves.last().unwrap().clone();
        assert!(saved.turns.is_empty() && saved.memory.is_some());
        // History is empty, continue works from memory.
        let history =
            events(&e.handle_payload(&json!({"operation": "history", "request_id": "h"})))
                .remove(0);
        assert_eq!(history["data"]["total"], 0);
        let cont = e.handle_payload(&json!({"operation": "continue", "request_id": "c"}));
        assert_eq!(find(&cont, "run_finished")["data"]["status"], "completed");
        let history =
            events(&e.handle_payload(&json!({"operation": "history", "request_id": "h2"})))
                .remove(0);
        assert_eq!(history["data"]["turns"][0]["internal_input"], "continue");
    }

    #[test]
    fn history_and_answer_queries_are_read_only() {
        let mut e = engine();
        let response = find(&e.handle_payload(&message("m", "hello")), "model_response");
        let before = e.sequence;
        let history = events(
            &e.handle_payload(&json!({"operation": "history", "request_id": "h", "limit": 5})),
        )
        .remove(0);
        assert_eq!(history["event"], "history");
        assert_eq!(history["data"]["request_id"], "h");
        assert_eq!(history["data"]["turns"][0]["user"][0]["raw"], "hello");
        assert_eq!(
            history["data"]["turns"][0]["steps"][0]["content"][0]["raw"],
            "echo: hello"
        );
        assert_eq!(history["sequence"].as_u64(), Some(before + 1));
        let bad = events(
            &e.handle_payload(&json!({"operation": "history", "request_id": "h", "limit": 0})),
        )
        .remove(0);
        assert_eq!(bad["event"], "history_error");
        assert_eq!(bad["data"]["request_id"], "h");
        let source = response["data"]["answer_source"].clone();
        let answer = events(
            &e.handle_payload(&json!({"operation": "answer", "request_id": "a",
                                                      "source": source, "part": 0, "offset": 6})),
        )
        .remove(0);
        assert_eq!(answer["event"], "answer");
        assert_eq!(answer["data"]["raw"], "hello");
        assert_eq!(answer["data"]["done"], true);
        let wrong = events(
            &e.handle_payload(&json!({"operation": "answer", "request_id": "a2",
                                                     "source": source, "part": 3})),
        )
        .remove(0);
        assert_eq!(wrong["event"], "answer_error");
        // Queries started no run and consumed no id.
        assert_eq!(e.run_id, "id-1");
    }

    #[test]
    fn big_flood_and_slow_replies() {
        let mut e = engine();
        let big = find(
            &e.handle_payload(&message("b", "/big 100000")),
            "model_response",
        );
        assert_eq!(
            big["data"]["content"][0]["raw"].as_str().unwrap().len(),
            100_000
        );

        let mut actions = e.handle_payload(&message("f", "/flood 1200"));
        let mut responses = 0;
        loop {
            responses += names(&actions)
                .iter()
                .filter(|n| *n == "model_response")
                .count();
            let resume = actions.iter().find_map(|a| match a {
                Action::Resume { run_id } => Some(run_id.clone()),
                _ => None,
            });
            match resume {
                Some(run_id) => actions = e.resume(&run_id),
                None => break,
            }
        }
        assert_eq!(responses, 1201);
        assert_eq!(
            find(&actions, "run_finished")["data"]["status"],
            "completed"
        );

        let slow = e.handle_payload(&json!({"operation": "message", "request_id": "s",
            "options": {"model": {"model": "mock-slow"}},
            "content": [{"type": "text", "raw": "hi", "modality": "text"}]}));
        assert!(slow.contains(&Action::Wait {
            run_id: "id-3".into(),
            ms: SLOW_REPLY_MS
        }));
    }

    #[test]
    fn crash_exits_after_run_started() {
        let mut e = engine();
        let actions = e.handle_payload(&message("c", "/crash"));
        assert_eq!(
            names(&actions),
            ["input_admitted", "run_started", "input_committed"]
        );
        assert_eq!(
            actions.last(),
            Some(&Action::Exit {
                code: 3,
                close: false
            })
        );
    }

    #[test]
    fn shutdown_settles_saves_and_exits() {
        let mut ignoring = engine_with(Settings {
            ignore_shutdown: true,
            ..settings()
        })
        .0;
        assert!(events(&ignoring.handle_signal(&signal("shutdown"))).is_empty());

        let mut e = engine();
        e.handle_payload(&message("s", "/sleep 60000"));
        e.handle_payload(&message("q", "queued"));
        let actions = e.handle_signal(&signal("shutdown"));
        assert_eq!(names(&actions), ["persisted", "run_finished", "persisted"]);
        assert_eq!(
            find(&actions, "run_finished")["data"]["status"],
            "cancelled"
        );
        assert_eq!(events(&actions)[2]["data"]["boundary"], "shutdown");
        assert_eq!(
            actions.last(),
            Some(&Action::Exit {
                code: 0,
                close: true
            })
        );
        // Nothing is admitted afterwards.
        let late = events(&e.handle_payload(&message("late", "x"))).remove(0);
        assert_eq!(late["event"], "input_rejected");

        let mut executing = engine();
        run_tool(&mut executing);
        executing.confirmation_decided(
            "id-1",
            Decision {
                approved: true,
                reason: String::new(),
            },
        );
        let actions = executing.terminate();
        assert_eq!(
            find(&actions, "run_finished")["data"]["status"],
            "cancelled"
        );
        assert_eq!(
            actions.last(),
            Some(&Action::Exit {
                code: 0,
                close: true
            })
        );
    }

    #[test]
    fn storage_failure_stops_admission() {
        let (mut e, storage) = engine_with(settings());
        storage.0.lock().unwrap().fail_saves = true;
        let actions = e.handle_payload(&message("a", "hi"));
        let error = find(&actions, "error");
        assert_eq!(error["data"]["durable"], false);
        assert_eq!(find(&actions, "run_finished")["data"]["durable"], false);
        let status = events(&e.handle_signal(&signal("status"))).remove(0);
        assert_eq!(status["data"]["storage_failed"], true);
        let refused = events(&e.handle_payload(&message("b", "again"))).remove(0);
        assert_eq!(refused["event"], "input_rejected");
    }

    #[test]
    fn bad_signals_are_errors_and_restored_runs_are_failed() {
        let mut e = engine();
        assert_eq!(names(&e.handle_signal(&signal("dance"))), ["error"]);
        assert_eq!(
            names(&e.handle_signal(&json!({"operation": "cancel"}))),
            ["error"]
        );
        assert_eq!(names(&e.handle_signal(&json!(5))), ["error"]);

        let mut conversation = Conversation::default();
        conversation.loop_progress.status = "running".into();
        let restored = Engine::new(
            settings(),
            conversation,
            Box::new(Shared::default()),
            Box::new(String::new),
        );
        assert_eq!(restored.conversation.loop_progress.status, "failed");
    }

    #[test]
    fn scripts() {
        assert_eq!(Script::parse("/run  ls -l "), Script::Tool("ls -l".into()));
        assert_eq!(Script::parse("/run"), Script::Echo("/run".into()));
        assert_eq!(
            Script::parse("/sleep 20 then"),
            Script::Sleep(20, "/sleep 20 then".into())
        );
        assert_eq!(Script::parse("/sleep x"), Script::Echo("/sleep x".into()));
        assert_eq!(
            Script::parse("/big 999999999999"),
            Script::Big(MAX_BIG_BYTES)
        );
        assert_eq!(
            Script::parse("/flood 3"),
            Script::Flood(3, "/flood 3".into())
        );
        assert_eq!(Script::parse("/crash"), Script::Crash);
        assert_eq!(
            Script::parse(" /plan  two\nlines "),
            Script::Plan(" two\nlines ".into())
        );
        assert_eq!(Script::parse("/plan"), Script::Plan(String::new()));
        assert_eq!(Script::parse("/plan\n# x"), Script::Plan("# x".into()));
        assert_eq!(Script::parse("/plan-read"), Script::PlanRead);
        assert_eq!(Script::parse("/planx"), Script::Echo("/planx".into()));
        assert_eq!(
            Script::parse("/fork"),
            Script::Subagent(subagent::parse("/fork").unwrap())
        );
        assert_eq!(Script::parse("/send s"), Script::Echo("/send s".into()));
        assert_eq!(
            Script::parse("/receive s x"),
            Script::Echo("/receive s x".into())
        );
        assert_eq!(
            Script::parse("hello /run x"),
            Script::Echo("hello /run x".into())
        );
        assert_eq!(big_text(130).len(), 130);
    }
}
