//! The scripted worker as a pure state machine. It owns the protocol state
//! a real worker owns (identity and event sequence, the payload queue, the
//! duplicate-id window, the one active run, runtime options, the
//! conversation) and answers every input with a list of [`Action`]s: event
//! frames to send, and the slow work (a delay, a confirmation exchange, a
//! command, a remote-tool call) for the I/O shell to perform and report
//! back.
//!
//! Events go through the worker's outbound queue ([`Outbox`], the
//! protocol's queue contract): lifecycle events are never dropped,
//! metadata is coalesced, noncritical output is omitted and counted under
//! pressure, and a queued run is admitted only once the frames before it
//! have been written ([`Engine::written`]). An event goes to the
//! transport at once while fewer than `client.transport.write_capacity`
//! frames are unwritten, so only a real backlog waits in the queue (and
//! only there can it be coalesced or omitted). Each entry point returns
//! the frames handed out as [`Action::Emit`]s after its other actions.
//!
//! No sockets, no clock, no threads: identifiers come from an injected
//! generator and files from an injected [`Storage`], so every behaviour is
//! unit-tested (`tests/`). Only the run thread of `mock_worker::run` calls
//! it.
//!
//! Files: this one holds the types, the entry points, events, queries and
//! admission; `run.rs` the active run (exchanges, tool calls, compaction,
//! checkpoints, settlement, cancellation, shutdown); `script.rs` the test
//! knobs a message's text selects.

mod run;
mod script;

use std::collections::{HashSet, VecDeque};

use serde_json::{json, Value};

use super::conversation::{text_of, Conversation, LoopProgress, Turn};
use super::queue::{Class, Outbox, DEFAULT_SOFT_BYTES};
use super::validate::{self, ConfirmMode, Operation, Rejection};
use run::{denied, remote_result, text_part};
use script::Script;

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
    /// Send one event frame (serialized JSON) on the event connection,
    /// then report it with [`Engine::written`] once it is written (or
    /// lost). Frames come in order, after the other actions of the same
    /// call.
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
    /// Deliver the events emitted so far (every queued frame follows as
    /// an [`Action::Emit`] in the same list, whatever the window), then end
    /// the process with `code`. `close` asks for a normal WebSocket close
    /// first.
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
    /// The output document (`command::run`): `[[name]]: value` fields,
    /// then a `stdout` and a `stderr` block, as the real worker lays out
    /// its process-tool results.
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
    /// `worker.event_capacity`: noncritical events the queue holds.
    pub event_capacity: usize,
    /// `client.transport.write_capacity`: frames handed to the
    /// connection and not yet written.
    pub write_capacity: usize,
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
    /// The outbound event queue; it also numbers the events.
    outbox: Outbox,
    /// Frames taken from the outbox for the transport, not yet returned
    /// as [`Action::Emit`]s.
    handed: Vec<String>,
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
        let outbox = Outbox::new(
            &settings.session_id,
            &settings.worker_id,
            settings.event_capacity,
            DEFAULT_SOFT_BYTES,
        );
        Engine {
            model: settings.model.clone(),
            settings,
            ids,
            storage,
            outbox,
            handed: Vec::new(),
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
        }
    }

    /// The `ready` event, once per process.
    pub(crate) fn start(&mut self) -> Vec<Action> {
        let mut out = Vec::new();
        let status = self.status();
        self.emit("ready", status);
        self.deliver(&mut out);
        out
    }

    /// The connection is done with the oldest `frames` frames it was
    /// handed: written to the socket, or lost with a failed write. A
    /// queued run may now be admitted.
    pub(crate) fn written(&mut self, frames: usize) -> Vec<Action> {
        let mut out = Vec::new();
        self.outbox.sent(frames);
        self.flow(self.settings.write_capacity);
        self.pump(&mut out);
        out
    }

    /// A `type: payload` message from the hub.
    pub(crate) fn handle_payload(&mut self, data: &Value) -> Vec<Action> {
        let mut out = Vec::new();
        match data.get("operation").and_then(Value::as_str) {
            Some("history") => self.answer_history(data),
            Some("answer") => self.answer_answer(data),
            _ if self.stopping => {
                let rejection = Rejection::new(data, "worker is stopping");
                self.reject(rejection, Class::Feedback);
            }
            _ if self.queue.len() >= self.settings.payload_capacity => {
                self.rejected_payloads += 1;
                let rejection = Rejection::new(
                    data,
                    "Worker input queue is full. Wait for current work to finish, then retry.",
                )
                .with_code("payload_queue_full");
                self.reject(rejection, Class::Feedback);
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
                self.emit("status", status);
            }
            Some("options") => {
                let options = self.options();
                self.emit("options", options);
            }
            Some("cancel") => match data.get("run_id").and_then(Value::as_str) {
                Some(run_id) if !run_id.is_empty() => self.cancel(run_id, &mut out),
                _ => self.emit(
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
                self.emit("error", json!({ "message": message }));
            }
            None => self.emit(
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
        self.deliver(&mut out);
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
            self.commit(vec![text_part(&outcome)], None);
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
                if self.outbox.skip(Class::Display) {
                    continue; // omitted and counted without building it
                }
                let data = json!({
                    "type": "model_response", "role": "assistant",
                    "content": [text_part(&format!("flood {n}/{total}"))],
                });
                self.emit("model_response", data);
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

    /// Offers an event of the current (or last admitted) run to the
    /// queue, classed by its name.
    fn emit(&mut self, event: &str, data: Value) {
        let class = Class::of(event, &data);
        let (request_id, run_id) = (self.request_id.clone(), self.run_id.clone());
        self.outbox.offer(class, event, &request_id, &run_id, data);
        self.flow(self.settings.write_capacity);
    }

    /// Moves queued frames to the transport while fewer than `window`
    /// are unwritten.
    fn flow(&mut self, window: usize) {
        while let Some(frame) = self.outbox.take(window) {
            self.handed.push(frame);
        }
    }

    /// Returns the frames handed to the transport as [`Action::Emit`]s;
    /// when the process is about to exit (an [`Action::Exit`] is in
    /// `out`), every queued frame, since nothing is written after the
    /// exit's flush.
    fn deliver(&mut self, out: &mut Out) {
        if out
            .iter()
            .any(|action| matches!(action, Action::Exit { .. }))
        {
            self.flow(usize::MAX);
        }
        out.extend(self.handed.drain(..).map(Action::Emit));
    }

    fn status(&self) -> Value {
        let progress = &self.conversation.loop_progress;
        json!({
            "active": self.active.is_some(),
            "stopping": self.stopping,
            "storage_failed": self.storage_failed,
            "rejected_payloads": self.rejected_payloads,
            "unreported_rejections": self.outbox.total().feedback,
            "event_queue": self.outbox.snapshot(),
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

    /// An `input_rejected`: [`Class::Feedback`] for a rejection on
    /// arrival, [`Class::Lifecycle`] for a request taken off the queue.
    fn reject(&mut self, rejection: Rejection, class: Class) {
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
        self.outbox
            .offer(class, "input_rejected", &envelope_id, "", data);
        self.flow(self.settings.write_capacity);
    }

    fn answer_history(&mut self, data: &Value) {
        if self.outbox.skip(Class::Query) {
            return; // no room: omitted and counted before building a page
        }
        let reply = validate::parse_history(data).and_then(|query| {
            self.conversation
                .history_page(&query, &self.settings.worker_id)
                .map_err(|message| (json!(query.request_id), message))
        });
        match reply {
            Ok(page) => self.emit("history", page),
            Err((request_id, message)) => self.emit(
                "history_error",
                json!({"request_id": request_id, "message": message}),
            ),
        }
    }

    fn answer_answer(&mut self, data: &Value) {
        if self.outbox.skip(Class::Query) {
            return;
        }
        let reply = validate::parse_answer(data).and_then(|query| {
            self.conversation
                .answer_page(&query, &self.settings.worker_id)
                .map_err(|message| (json!(query.request_id), message))
        });
        match reply {
            Ok(page) => self.emit("answer", page),
            Err((request_id, message)) => self.emit(
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

    /// Admits queued requests while no run is active, each only once
    /// every frame emitted before it has been written: a new run's
    /// lifecycle events never pile up behind an older backlog. While a
    /// request waits for that, new noncritical output is omitted and
    /// counted, so steady polling cannot keep the backlog from draining.
    /// Then hands frames to the transport; every entry point but
    /// [`Engine::start`] and [`Engine::terminate`] ends here.
    fn pump(&mut self, out: &mut Out) {
        while self.active.is_none() && !self.stopping && self.outbox.drained() {
            let Some(data) = self.queue.pop_front() else {
                break;
            };
            self.outbox.pause(false);
            self.admit(&data, out);
        }
        let waiting = self.active.is_none() && !self.stopping && !self.queue.is_empty();
        self.outbox.pause(waiting);
        self.deliver(out);
    }

    fn admit(&mut self, data: &Value, out: &mut Out) {
        let request = match validate::parse_run(data) {
            Ok(request) => request,
            Err(rejection) => return self.reject(rejection, Class::Lifecycle),
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
            return self.reject(rejection, Class::Lifecycle);
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
                self.emit("run_started", json!({}));
                self.conversation.turns.push(Turn {
                    user: request.content,
                    internal: false,
                    steps: Vec::new(),
                });
                self.conversation.revision += 1;
                self.set_turn();
                self.emit("input_committed", json!({}));
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
                self.emit("run_started", json!({}));
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
                        self.emit("run_started", json!({}));
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
}

#[cfg(test)]
mod tests;
