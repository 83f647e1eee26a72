//! The active run: model exchanges, tool calls, compaction, checkpoints,
//! settlement, cancellation and shutdown, as more methods of [`Engine`].

use serde_json::{json, Value};

use super::super::conversation::{text_of, Execution, LoopProgress, Memory, Step};
use super::super::subagent;
use super::super::validate::ConfirmMode;
use super::SLOW_REPLY_MS;
use super::{Action, Batch, ConfirmRequest, Engine, Out, RemoteCall, Script, Stage, ToolOutput};

impl Engine {
    /// Starts the next model exchange: budget check, then an optional delay.
    pub(super) fn begin_exchange(&mut self, out: &mut Out) {
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
    pub(super) fn respond(&mut self, out: &mut Out) {
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
                self.commit(vec![text_part(&text)], None);
                self.finish("completed", "", None, out);
            }
            (Script::Big(bytes), _) => {
                self.commit(vec![text_part(&big_text(bytes))], None);
                self.finish("completed", "", None, out);
            }
            (Script::Flood(total, text), _) => {
                self.commit(vec![text_part(&echo(&text))], None);
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
                self.commit(vec![text_part("continued")], None);
                self.finish("completed", "", None, out);
            }
            (Script::Echo(text) | Script::Sleep(_, text), _) => {
                let reply = if text.is_empty() {
                    let parts = self.conversation.turns[self.run().turn].user.len();
                    format!("echo: ({parts} non-text part(s))")
                } else {
                    echo(&text)
                };
                self.commit(vec![text_part(&reply)], None);
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
            self.commit(vec![text_part(&text)], None);
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
        self.commit(vec![text_part(&summary.join("\n"))], Some(invokes.clone()));
        self.emit("tool_calls", Value::Array(invokes.clone()));
        self.conversation.loop_progress.phase = "tools".into();
        self.checkpoint("before_tools");
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
    pub(super) fn commit(&mut self, content: Vec<Value>, invokes: Option<Vec<Value>>) {
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
        self.emit("model_response", response);
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
        );
        self.emit("tool_calls", json!([call]));
        self.conversation.loop_progress.phase = "tools".into();
        self.checkpoint("before_tools");
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
    pub(super) fn tools_settled(&mut self, results: Vec<Value>, out: &mut Out) {
        self.emit("tool_results", Value::Array(results.clone()));
        let turn = self.run().turn;
        if let Some(step) = self.conversation.turns[turn].steps.last_mut() {
            step.tool_results.extend(results);
        }
        self.run_mut().batch = None;
        self.conversation.loop_progress.phase = "model".into();
        if self.settings.save_on_step {
            self.checkpoint("step_finished");
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
                    "persisted",
                    json!({"boundary": "compact", "format": "json"}),
                );
                if let Some(message) = export_error {
                    self.emit("export_error", json!({ "message": message }));
                }
            }
            Err(err) => {
                self.storage_failed = true;
                let message = format!("compact state save failed: {err}");
                self.emit("error", json!({"message": message, "durable": false}));
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
        self.emit("compact_finished", data);
        self.finish("completed", "", Some(true), out);
    }

    /// Saves the conversation at a boundary; true when it is durable.
    fn checkpoint(&mut self, boundary: &str) -> bool {
        if !self.settings.persistence || self.storage_failed {
            return false;
        }
        match self.storage.save(&self.conversation) {
            Ok(export_error) => {
                self.emit("persisted", json!({"boundary": boundary, "format": "json"}));
                if let Some(message) = export_error {
                    self.emit("export_error", json!({ "message": message }));
                }
                true
            }
            Err(err) => {
                self.storage_failed = true;
                let message = format!("state save failed at {boundary}: {err}");
                self.emit("error", json!({"message": message, "durable": false}));
                false
            }
        }
    }

    /// Settles the active run: final save (unless `durable` is given),
    /// `run_finished`, a log line.
    pub(super) fn finish(
        &mut self,
        status: &str,
        error: &str,
        durable: Option<bool>,
        out: &mut Out,
    ) {
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
            None if status == "cancelled" => self.checkpoint("cancelled"),
            None if self.settings.save_on_run => self.checkpoint("run_finished"),
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
        self.emit("run_finished", data);
        out.push(Action::Note(format!(
            "run {} ({}, request {}) {status} after {exchanges} exchange(s)",
            run.run_id,
            run.operation.name(),
            run.request_id
        )));
    }

    pub(super) fn cancel(&mut self, run_id: &str, out: &mut Out) {
        let status = self.status();
        self.emit("status", status);
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
    pub(super) fn stop(&mut self, out: &mut Out) {
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
            self.checkpoint("shutdown");
        }
        out.push(Action::Note("shutting down".into()));
        out.push(Action::Exit {
            code: 0,
            close: true,
        });
    }
}

pub(super) fn text_part(raw: &str) -> Value {
    json!({"type": "text", "modality": "text", "raw": raw})
}

pub(super) fn echo(text: &str) -> String {
    format!("echo: {text}")
}

/// Exactly `bytes` bytes of printable ASCII in 64-byte lines.
pub(super) fn big_text(bytes: usize) -> String {
    const LINE: &[u8; 64] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.\n";
    let data: Vec<u8> = LINE.iter().copied().cycle().take(bytes).collect();
    String::from_utf8(data).expect("ASCII")
}

/// The result of a subagent call: the remote outcome text (as `/plan`
/// replies) is the output.
pub(super) fn remote_result(call: &Value, outcome: &str) -> Value {
    json!({"query": call, "output": text_part(outcome)})
}

/// The result of a call that was not executed.
pub(super) fn denied(call: Option<&Value>, reason: &str) -> Value {
    json!({
        "query": call,
        "output": {
            "type": "text", "modality": "text",
            "raw": format!("Tool call denied: {reason}"),
        },
        "extras": {"error": {"stage": "security_check", "code": "security_check", "message": reason}},
    })
}
