//! What the Shard front-end keeps of each agent between hub notifications,
//! pure: the run in progress (its kind, the tool it runs, its summed
//! usage), whether the last run failed, the permission requests announced
//! and recently resolved, and the status and mode last announced, so a
//! change is announced once. The agent's status (seed 004 §9.1) is
//! derived from this and from the session's facts ([`Facts`]).

use std::collections::{BTreeMap, VecDeque};

use serde_json::Value;

use crate::wire::shard::translate::{self, Parsed, Usage};

/// The runtime (worker process) as the session record shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    Stopped,
    Starting,
    Running,
    Stopping,
    Failed,
}

impl Runtime {
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Stopped => "stopped",
            Runtime::Starting => "starting",
            Runtime::Running => "running",
            Runtime::Stopping => "stopping",
            Runtime::Failed => "failed",
        }
    }

    /// From the description's `process.state` and whether a worker is
    /// connected (a worker launched by hand has no process record).
    pub fn of(process_state: Option<&str>, connected: bool) -> Runtime {
        match process_state {
            Some("starting") => Runtime::Starting,
            Some("running") => Runtime::Running,
            Some("stopping") => Runtime::Stopping,
            _ if connected => Runtime::Running,
            Some("failed") => Runtime::Failed,
            _ => Runtime::Stopped,
        }
    }
}

/// The seed's `AgentStatus` (this hub never is `waiting_for_ui`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Idle,
    Streaming,
    WaitingForPermission,
    Compacting,
    Error,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Idle => "idle",
            Status::Streaming => "streaming",
            Status::WaitingForPermission => "waiting_for_permission",
            Status::Compacting => "compacting",
            Status::Error => "error",
        }
    }
}

/// What the session record says right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    pub runtime: Runtime,
    pub connected: bool,
    /// Open confirmation prompts an operator can decide.
    pub decidable: usize,
}

/// An agent's status, runtime state and coarse activity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Derived {
    pub status: Status,
    pub runtime: Runtime,
    /// `agent_activity.phase`: idle, thinking, tool, waiting, compacting, error.
    pub phase: &'static str,
    /// The tool running, for `agent_activity` (a name, never arguments).
    pub tool: Option<String>,
}

/// The run the worker executes.
#[derive(Debug, Clone, Default, PartialEq)]
struct Run {
    id: String,
    compact: bool,
    tool: Option<String>,
    usage: Usage,
}

/// Requests resolved lately, so a late answer is discarded silently.
const RECENTLY_RESOLVED: usize = 256;

/// Gated tool calls remembered at most (a run proposes a few at a time;
/// the oldest is forgotten first).
const GATED_CALLS: usize = 256;

/// A tool call that may need a permission before it runs (seed 004 §9.4:
/// `tool_call` means the tool is about to execute, after permission).
#[derive(Debug, PartialEq)]
enum Gate {
    /// Proposed, not decided: its `tool_call` event waits (the text when
    /// the agent had attachments to translate it for).
    Held(Option<String>),
    /// Decided while its proposal was not held (it had not reached the
    /// hub yet, or went by untranslated): an allowed call's `tool_call`
    /// was sent with the decision, so a proposal arriving later adds none.
    Decided,
}

/// A permission request shown to clients: the call it asks for.
#[derive(Debug)]
pub struct Asked {
    /// The call's id.
    pub call_id: String,
    /// Its `tool_call` event rendered from the request (for a call whose
    /// proposal was not translated).
    pub event: Option<String>,
}

/// One agent's state.
#[derive(Debug, Default)]
pub struct Track {
    worker_id: String,
    run: Option<Run>,
    failed: bool,
    /// Announced permission requests not yet resolved.
    open: BTreeMap<String, Asked>,
    /// Gated calls by id, oldest first.
    gates: VecDeque<(String, Gate)>,
    resolved: VecDeque<String>,
    last: Option<Derived>,
    /// The mode last announced.
    pub mode: Option<String>,
    /// Shard connections attached to this agent (its events are translated
    /// only while there are any).
    pub attached: usize,
    /// Announced to clients (it existed when the front-end started, or
    /// `agent_spawned` was sent).
    pub known: bool,
    /// A daemon agent: created or attached through Shard since the hub
    /// started. Its requests follow seed 004 §6.3's headless rule (denied
    /// when no client could answer); a session only the panels and the
    /// JSON API know keeps the Node hub's (open until its deadline).
    pub daemon: bool,
    /// When the status last announced was announced (ms since the epoch;
    /// the idle-runtime reaper's clock).
    pub since: u64,
    /// The session's facts as last read. Worker events do not change them
    /// (the process, the connection and the prompts have notes of their
    /// own), so a status change caused by an event is derived from these.
    pub facts: Option<Facts>,
    /// The latest `tool_calls` or `tool_results` entry taken in while no
    /// client was connected, not read yet ([`Track::defer`]).
    unread: Option<std::sync::Arc<str>>,
}

impl Track {
    /// Keeps a `tool_calls` or `tool_results` entry for later instead of
    /// reading it now (no client is connected, so nothing is announced):
    /// of a run of them only the latest changes the state (the tool it
    /// names or clears; a new worker's resets the run either way, and a
    /// worker id never comes back), so it replaces any kept before. It is
    /// read by [`Track::settle`] before the state is next looked at.
    pub fn defer(&mut self, entry: &std::sync::Arc<str>) {
        self.unread = Some(entry.clone());
    }

    /// Takes in the entry [`Track::defer`] kept, if any.
    pub fn settle(&mut self, agent: &str) {
        let Some(json) = self.unread.take() else {
            return;
        };
        let name = super::window::event_name(&json).unwrap_or("");
        let read = translate::parse_status(name, &json).or_else(|| translate::parse(name, &json));
        if let Some(entry) = read {
            self.observe(agent, name, &entry, false);
        }
    }

    /// Takes in one transcript entry (or a transient event) named
    /// `event` and returns its Shard events (JSON text) when `translate`
    /// (the agent has attachments).
    pub fn observe(
        &mut self,
        agent: &str,
        event: &str,
        entry: &Parsed<'_>,
        translate: bool,
    ) -> Vec<String> {
        let worker = entry.worker_id();
        if !worker.is_empty() && worker != self.worker_id {
            // A new worker process runs nothing of its predecessor's.
            self.worker_id = worker.to_string();
            self.run = None;
            self.failed = false;
            self.gates.clear();
        }
        let run_id = entry.run_id();
        let data = entry.data();
        let mut finished_usage = None;
        match event {
            "input_admitted" => {
                let compact = data.get("operation").and_then(Value::as_str) == Some("compact");
                self.run = Some(Run {
                    id: run_id.to_string(),
                    compact,
                    ..Run::default()
                });
                self.failed = false;
            }
            "run_started" => {
                if self.run.as_ref().is_none_or(|r| r.id != run_id) {
                    self.run = Some(Run {
                        id: run_id.to_string(),
                        ..Run::default()
                    });
                }
                self.failed = false;
            }
            "model_response" => {
                if let (Some(run), Some(usage)) = (self.run.as_mut(), entry.cost()) {
                    run.usage.add(usage);
                }
            }
            "tool_calls" => {
                if let Some(run) = self.run.as_mut() {
                    let first = entry.first_call();
                    if run.tool.as_deref() != first {
                        run.tool = first.map(str::to_string);
                    }
                }
            }
            "tool_results" => {
                if let Some(run) = self.run.as_mut() {
                    run.tool = None;
                }
            }
            "run_finished" => {
                let mine = self.run.as_ref().is_some_and(|r| r.id == run_id);
                if mine {
                    finished_usage = self.run.take().map(|r| r.usage);
                }
                self.failed = data.get("status").and_then(Value::as_str) == Some("failed");
                // What was held of the run never runs now.
                self.gates.retain(|(_, g)| !matches!(g, Gate::Held(_)));
            }
            _ => {}
        }
        match entry {
            Parsed::Calls(_) => self.proposed(agent, entry, translate),
            Parsed::Results(_) => self.outcomes(agent, entry, translate),
            _ if translate => translate::events(agent, entry, finished_usage),
            _ => Vec::new(),
        }
    }

    /// A `tool_calls` entry's `tool_call` events: a trusted call's at
    /// once, a gated one's once it may run ([`Track::resolve_request`], or
    /// its result); none for a call decided already.
    fn proposed(&mut self, agent: &str, entry: &Parsed<'_>, translate: bool) -> Vec<String> {
        let mut out = Vec::new();
        for call in translate::proposed(agent, entry) {
            if !call.gated {
                if translate {
                    out.push(call.event);
                }
                continue;
            }
            match self.take_gate(call.id) {
                Some(Gate::Decided) => {}
                Some(Gate::Held(_)) | None => {
                    let held = translate.then_some(call.event);
                    self.gate(call.id, Gate::Held(held));
                }
            }
        }
        out
    }

    /// A `tool_results` entry's `tool_result` events, each after its
    /// call's held `tool_call` when the worker ran it without asking the
    /// hub (a call the worker refused has none).
    fn outcomes(&mut self, agent: &str, entry: &Parsed<'_>, translate: bool) -> Vec<String> {
        let mut out = Vec::new();
        for result in translate::outcomes(agent, entry) {
            if let Some(Gate::Held(held)) = self.take_gate(result.id) {
                if !result.refused && translate {
                    out.extend(held);
                }
            }
            if translate {
                out.push(result.event);
            }
        }
        out
    }

    fn take_gate(&mut self, id: &str) -> Option<Gate> {
        let at = self.gates.iter().position(|(i, _)| i == id)?;
        self.gates.remove(at).map(|(_, g)| g)
    }

    fn gate(&mut self, id: &str, gate: Gate) {
        if self.gates.len() >= GATED_CALLS {
            self.gates.pop_front();
        }
        self.gates.push_back((id.to_string(), gate));
    }

    /// The worker's connection closed: a run it had not finished never
    /// will (a crash, a kill). Returns its turn id (the run is over; its
    /// held calls never run).
    pub fn lost(&mut self) -> Option<String> {
        let run = self.run.take()?;
        self.gates.retain(|(_, g)| !matches!(g, Gate::Held(_)));
        Some(run.id)
    }

    /// The status now.
    pub fn derive(&self, facts: &Facts) -> Derived {
        let run = self.run.as_ref().filter(|_| facts.connected);
        let (status, phase, tool) = if facts.runtime == Runtime::Failed {
            (Status::Error, "error", None)
        } else if facts.decidable > 0 {
            (Status::WaitingForPermission, "waiting", None)
        } else if let Some(run) = run {
            if run.compact {
                (Status::Compacting, "compacting", None)
            } else if let Some(tool) = &run.tool {
                (Status::Streaming, "tool", Some(tool.clone()))
            } else {
                (Status::Streaming, "thinking", None)
            }
        } else if self.failed {
            (Status::Error, "error", None)
        } else {
            (Status::Idle, "idle", None)
        };
        Derived {
            status,
            runtime: facts.runtime,
            phase,
            tool,
        }
    }

    /// Records `now` as announced `at` (ms since the epoch); returns
    /// whether it differs from what was announced before (the first look
    /// always does).
    pub fn announce(&mut self, now: &Derived, at: u64) -> bool {
        if self.last.as_ref() == Some(now) {
            return false;
        }
        self.last = Some(now.clone());
        self.since = at;
        true
    }

    /// The status last announced.
    pub fn last(&self) -> Option<&Derived> {
        self.last.as_ref()
    }

    /// A permission request for a call is shown to clients; false when it
    /// already was.
    pub fn open_request(&mut self, request_id: &str, asked: Asked) -> bool {
        if self.open.contains_key(request_id) {
            return false;
        }
        self.open.insert(request_id.to_string(), asked);
        true
    }

    /// A shown request resolved, `allow`ed or not; `None` when it was not
    /// open (never shown, or resolved already), so it is resolved once.
    /// Allowed, its call may run: the call's `tool_call` event (the held
    /// proposal's, or the request's own when none is held).
    pub fn resolve_request(&mut self, request_id: &str, allow: bool) -> Option<Option<String>> {
        let asked = self.open.remove(request_id)?;
        if self.resolved.len() >= RECENTLY_RESOLVED {
            self.resolved.pop_front();
        }
        self.resolved.push_back(request_id.to_string());
        let run = match self.take_gate(&asked.call_id) {
            Some(Gate::Held(held)) if allow => held.or(asked.event),
            Some(Gate::Held(_)) => None,
            _ => {
                self.gate(&asked.call_id, Gate::Decided);
                asked.event.filter(|_| allow)
            }
        };
        Some(run)
    }

    /// Whether `request_id` was shown to clients, open or resolved lately:
    /// an answer to it that the hub refuses came too late (another
    /// answer won, whose resolution may not have been announced yet).
    pub fn knows(&self, request_id: &str) -> bool {
        self.open.contains_key(request_id) || self.resolved.iter().any(|r| r == request_id)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn entry(event: &str, run: &str, data: Value) -> (String, String) {
        let text = json!({"event": event, "worker_id": "w", "run_id": run, "data": data,
            "hub_sequence": 1})
        .to_string();
        (event.to_string(), text)
    }

    fn see(t: &mut Track, (event, text): (String, String), translate: bool) -> Vec<Value> {
        let parsed = translate::parse(&event, &text).unwrap();
        t.observe("a", &event, &parsed, translate)
            .iter()
            .map(|e| serde_json::from_str(e).unwrap())
            .collect()
    }

    const LIVE: Facts = Facts {
        runtime: Runtime::Running,
        connected: true,
        decidable: 0,
    };

    #[test]
    fn a_deferred_run_of_tool_events_ends_where_reading_each_would() {
        let events = [
            ("tool_calls", json!([{"name": "read_file"}, {"name": "x"}])),
            ("tool_results", json!([])),
            ("tool_calls", json!([{"name": "write_file"}])),
            ("tool_calls", json!({"calls": [{"name": "older_shape"}]})),
        ];
        for n in 1..=events.len() {
            let mut read = Track::default();
            let mut deferred = Track::default();
            for t in [&mut read, &mut deferred] {
                see(t, entry("run_started", "r1", json!({})), false);
            }
            for (event, data) in &events[..n] {
                see(&mut read, entry(event, "r1", data.clone()), false);
                deferred.defer(&std::sync::Arc::from(entry(event, "r1", data.clone()).1));
            }
            deferred.settle("a");
            assert_eq!(read.derive(&LIVE), deferred.derive(&LIVE), "after {n}");
            assert!(deferred.unread.is_none());
        }
        // A new worker's entry resets the run, deferred or not.
        let mut t = Track::default();
        see(&mut t, entry("run_started", "r1", json!({})), false);
        let other = json!({"event": "tool_calls", "worker_id": "w2", "run_id": "r1",
            "data": [{"name": "n"}], "hub_sequence": 2})
        .to_string();
        t.defer(&std::sync::Arc::from(other));
        t.settle("a");
        assert_eq!(t.derive(&LIVE).phase, "idle");
    }

    #[test]
    fn runtime_states_come_from_the_process_record() {
        assert_eq!(Runtime::of(None, false), Runtime::Stopped);
        assert_eq!(Runtime::of(None, true), Runtime::Running);
        assert_eq!(Runtime::of(Some("starting"), false), Runtime::Starting);
        assert_eq!(Runtime::of(Some("stopping"), true), Runtime::Stopping);
        assert_eq!(Runtime::of(Some("failed"), false), Runtime::Failed);
        assert_eq!(Runtime::of(Some("exited"), false), Runtime::Stopped);
        assert_eq!(Runtime::of(Some("exited"), true), Runtime::Running);
    }

    #[test]
    fn a_run_streams_uses_tools_and_ends_idle_or_in_error() {
        let mut t = Track::default();
        assert_eq!(t.derive(&LIVE).status, Status::Idle);
        see(
            &mut t,
            entry("input_admitted", "r1", json!({"operation": "message"})),
            false,
        );
        see(&mut t, entry("run_started", "r1", json!({})), false);
        let d = t.derive(&LIVE);
        assert_eq!((d.status, d.phase), (Status::Streaming, "thinking"));
        see(
            &mut t,
            entry(
                "tool_calls",
                "r1",
                json!([{"name": "run_command", "arguments": {"x": 1}}]),
            ),
            false,
        );
        let d = t.derive(&LIVE);
        assert_eq!((d.phase, d.tool.as_deref()), ("tool", Some("run_command")));
        let waiting = Facts {
            decidable: 1,
            ..LIVE
        };
        assert_eq!(t.derive(&waiting).status, Status::WaitingForPermission);
        see(&mut t, entry("tool_results", "r1", json!([])), false);
        assert_eq!(t.derive(&LIVE).phase, "thinking");
        see(
            &mut t,
            entry(
                "model_response",
                "r1",
                json!({"cost": {"prompt": 4, "generated": 2}}),
            ),
            false,
        );
        let end = see(
            &mut t,
            entry("run_finished", "r1", json!({"status": "failed"})),
            true,
        );
        assert_eq!(end.last().unwrap()["usage"]["input"], 4);
        assert_eq!(t.derive(&LIVE).status, Status::Error);
        // The next run clears the failure.
        see(&mut t, entry("run_started", "r2", json!({})), false);
        assert_eq!(t.derive(&LIVE).status, Status::Streaming);
        // A disconnected worker runs nothing; a failed process is an error.
        let gone = Facts {
            connected: false,
            runtime: Runtime::Stopped,
            decidable: 0,
        };
        assert_eq!(t.derive(&gone).status, Status::Idle);
        let failed = Facts {
            runtime: Runtime::Failed,
            ..gone
        };
        assert_eq!(t.derive(&failed).status, Status::Error);
    }

    #[test]
    fn compaction_runs_and_new_incarnations() {
        let mut t = Track::default();
        see(
            &mut t,
            entry("input_admitted", "r1", json!({"operation": "compact"})),
            false,
        );
        see(&mut t, entry("run_started", "r1", json!({})), false);
        assert_eq!(t.derive(&LIVE).status, Status::Compacting);
        assert!(t.run.is_some());
        let other = json!({"event": "status", "worker_id": "w2", "run_id": "", "data": {}});
        see(&mut t, ("status".into(), other.to_string()), false);
        assert!(t.run.is_none());
        assert_eq!(t.derive(&LIVE).status, Status::Idle);
    }

    fn kinds(events: &[Value]) -> Vec<String> {
        events
            .iter()
            .map(|e| format!("{}:{}", e["type"].as_str().unwrap(), e["tool_call_id"]))
            .collect()
    }

    fn call(id: &str, security: &str) -> Value {
        json!({"id": id, "name": "run_command", "arguments": {"command": "ls"},
            "type": "serial_write", "security": security})
    }

    fn result(id: &str, refused: bool) -> Value {
        let mut r = json!({"query": {"id": id}, "output": {"type": "text", "raw": "ok"}});
        if refused {
            r["extras"] = json!({"error": {"stage": "security_check", "message": "denied"}});
        }
        r
    }

    fn asked(call_id: &str) -> Asked {
        Asked {
            call_id: call_id.into(),
            event: Some(json!({"type": "tool_call", "tool_call_id": call_id}).to_string()),
        }
    }

    #[test]
    fn a_tool_call_is_announced_only_once_its_call_may_run() {
        let mut t = Track::default();
        see(&mut t, entry("run_started", "r1", json!({})), true);
        // A trusted call runs at once; a gated one waits for its decision.
        let proposed = see(
            &mut t,
            entry(
                "tool_calls",
                "r1",
                json!([call("t", "trusted"), call("c1", "require_confirm")]),
            ),
            true,
        );
        assert_eq!(kinds(&proposed), ["tool_call:\"t\""]);
        assert!(t.open_request("p1", asked("c1")));
        let allowed = t.resolve_request("p1", true).unwrap().unwrap();
        let allowed: Value = serde_json::from_str(&allowed).unwrap();
        assert_eq!(
            allowed["args"],
            json!({"command": "ls"}),
            "the proposal's own"
        );
        let results = see(
            &mut t,
            entry(
                "tool_results",
                "r1",
                json!([result("t", false), result("c1", false)]),
            ),
            true,
        );
        assert_eq!(kinds(&results), ["tool_result:\"t\"", "tool_result:\"c1\""]);

        // Denied: no tool_call, ever.
        see(
            &mut t,
            entry("tool_calls", "r1", json!([call("c2", "require_confirm")])),
            true,
        );
        assert!(t.open_request("p2", asked("c2")));
        assert_eq!(t.resolve_request("p2", false), Some(None));
        assert_eq!(t.resolve_request("p2", false), None, "resolved once");
        let results = see(
            &mut t,
            entry("tool_results", "r1", json!([result("c2", true)])),
            true,
        );
        assert_eq!(kinds(&results), ["tool_result:\"c2\""]);

        // The worker decided without asking: run, the call's tool_call
        // comes just before its result; refused, none.
        see(
            &mut t,
            entry(
                "tool_calls",
                "r1",
                json!([call("c3", "require_confirm"), call("c4", "default_deny")]),
            ),
            true,
        );
        let results = see(
            &mut t,
            entry(
                "tool_results",
                "r1",
                json!([result("c3", false), result("c4", true)]),
            ),
            true,
        );
        assert_eq!(
            kinds(&results),
            [
                "tool_call:\"c3\"",
                "tool_result:\"c3\"",
                "tool_result:\"c4\""
            ]
        );

        // Decided before the proposal reached the hub: the request's own
        // tool_call goes with the decision, the proposal adds none.
        assert!(t.open_request("p5", asked("c5")));
        assert!(t.resolve_request("p5", true).unwrap().is_some());
        let proposed = see(
            &mut t,
            entry("tool_calls", "r1", json!([call("c5", "require_confirm")])),
            true,
        );
        assert!(proposed.is_empty());
        let results = see(
            &mut t,
            entry("tool_results", "r1", json!([result("c5", false)])),
            true,
        );
        assert_eq!(kinds(&results), ["tool_result:\"c5\""]);

        // A run's end forgets what it held.
        see(
            &mut t,
            entry("tool_calls", "r1", json!([call("c6", "require_confirm")])),
            true,
        );
        see(
            &mut t,
            entry("run_finished", "r1", json!({"status": "cancelled"})),
            true,
        );
        assert!(t.gates.iter().all(|(_, g)| *g == Gate::Decided));
    }

    #[test]
    fn changes_are_announced_once_and_requests_resolved_once() {
        let mut t = Track::default();
        let d = t.derive(&LIVE);
        assert!(t.announce(&d, 5));
        assert!(!t.announce(&d, 6));
        assert_eq!(t.since, 5, "unchanged since it was announced");
        assert!(t.announce(
            &t.derive(&Facts {
                decidable: 1,
                ..LIVE
            }),
            7
        ));
        assert_eq!(t.since, 7);
        assert!(t.open_request("p1", asked("c")));
        assert!(!t.open_request("p1", asked("c")));
        assert!(t.knows("p1"));
        assert!(t.resolve_request("p1", true).is_some());
        assert!(t.resolve_request("p1", true).is_none());
        assert!(t.resolve_request("never", true).is_none());
        assert!(t.knows("p1"));
        assert!(!t.knows("never"));
        for i in 0..RECENTLY_RESOLVED {
            let id = format!("x{i}");
            t.open_request(&id, asked("c"));
            t.resolve_request(&id, false);
        }
        assert!(!t.knows("p1"), "bounded");
    }
}
