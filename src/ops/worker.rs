//! Worker commands: start, stop, restart and force-kill of a session's
//! worker process; inputs, history queries and signals sent to the
//! connected worker; complete-answer pages read from it.
//!
//! Threads: a start runs on the caller's thread (fork/exec, SQLite writes),
//! so front-ends whose thread serves many requests (a panel socket's
//! reader) call [`act`] from a short-lived thread of their own. A stop, a
//! force-kill and a restart hand their result over from the stop ladder's
//! thread; the caller never waits through the ladder's deadlines.

use std::sync::Arc;

use serde_json::{json, Value};

use super::error::not_sent;
use super::{operable, ErrorKind, OpError};
use crate::hub::Hub;
use crate::supervisor::control::{self, StartResult, StopMode, StopResult};
use crate::worker::query;

/// A worker action requested by an operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Start,
    Stop,
    Restart,
    ForceKill,
}

impl Action {
    pub const ALL: [Action; 4] = [
        Action::Start,
        Action::Stop,
        Action::Restart,
        Action::ForceKill,
    ];

    pub fn parse(name: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.as_str() == name)
    }

    /// The wire spelling (`"force-kill"` for [`Action::ForceKill`]).
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Start => "start",
            Action::Stop => "stop",
            Action::Restart => "restart",
            Action::ForceKill => "force-kill",
        }
    }
}

/// What a worker action did.
#[derive(Debug, Clone)]
pub enum ActionResult {
    Start(StartResult),
    Stop(StopResult),
    /// `start` is `None` when the stop did not end the worker.
    Restart {
        stop: StopResult,
        start: Option<StartResult>,
    },
}

impl ActionResult {
    /// Whether the action did what was asked.
    pub fn is_ok(&self) -> bool {
        match self {
            ActionResult::Start(start) => start.is_ok(),
            ActionResult::Stop(stop) => stop.is_ok(),
            ActionResult::Restart { stop, start } => {
                stop.is_ok() && start.as_ref().is_some_and(Result::is_ok)
            }
        }
    }

    /// Why it did not, for people.
    pub fn error(&self) -> Option<String> {
        match self {
            ActionResult::Start(Err(failed)) => Some(failed.0.clone()),
            ActionResult::Stop(Err(failed)) => Some(failed.reason.clone()),
            ActionResult::Restart { start: None, .. } => {
                Some("the stop did not end the worker".into())
            }
            ActionResult::Restart {
                start: Some(Err(failed)),
                ..
            } => Some(failed.0.clone()),
            _ => None,
        }
    }

    /// The result object both front-ends show, as the Node hub's
    /// supervisor shapes it: `{ok, pid, config}` for a start, `{ok, how,
    /// forced}` for a stop (with `error` when it failed), a restart's start
    /// result with `stop` (the stop's `how`) and this hub's `stop_result`
    /// (the whole stop result).
    pub fn to_json(&self) -> Value {
        match self {
            ActionResult::Start(start) => start_json(start),
            ActionResult::Stop(stop) => stop_json(stop),
            ActionResult::Restart { stop, start } => {
                let mut out = match start {
                    Some(start) => start_json(start),
                    None => json!({"ok": false, "error": self.error()}),
                };
                let stopped = stop_json(stop);
                out["stop"] = stopped["how"].clone();
                out["stop_result"] = stopped;
                out
            }
        }
    }
}

fn start_json(start: &StartResult) -> Value {
    match start {
        Ok(started) => json!({"ok": true, "pid": started.pid, "config": started.config}),
        Err(failed) => json!({"ok": false, "error": failed.0}),
    }
}

fn stop_json(stop: &StopResult) -> Value {
    match stop {
        Ok(stopped) => json!({"ok": true, "how": stopped.how.as_str(), "forced": stopped.forced}),
        Err(failed) => json!({
            "ok": false,
            "how": failed.how.as_str(),
            "forced": failed.forced,
            "error": failed.reason,
        }),
    }
}

/// What [`act`] hands its outcome to.
pub type ActionDone = Box<dyn FnOnce(Result<ActionResult, OpError>) + Send>;

/// Runs a worker action on session `id`; `spec` (start and restart)
/// overrides launch fields of the session's spec for this and later
/// starts. `done` gets the outcome: on this thread for a refusal and a
/// start, on the stop ladder's thread for the others.
pub fn act(hub: &Arc<Hub>, id: &str, action: Action, spec: Option<Value>, done: ActionDone) {
    if let Err(err) = operable(hub, id, &format!("worker {}", action.as_str())) {
        return done(Err(err));
    }
    match action {
        Action::Start => done(Ok(ActionResult::Start(control::start(
            &hub.services,
            id,
            spec.as_ref(),
        )))),
        Action::Stop | Action::ForceKill => {
            let mode = if action == Action::Stop {
                StopMode::Graceful
            } else {
                StopMode::ForceKill
            };
            // Answered once the exit is recorded too: a client that saw
            // the stop succeed may act on the stopped session at once
            // (apply a configuration, delete it).
            let hub2 = hub.services.clone();
            let sid = id.to_string();
            let stopped = Box::new(move |stop: StopResult| {
                if stop.is_ok() {
                    control::wait_recorded_exit(&hub2, &sid);
                }
                done(Ok(ActionResult::Stop(stop)))
            });
            control::stop(&hub.services, id, mode, stopped);
        }
        Action::Restart => {
            let hub2 = hub.services.clone();
            let sid = id.to_string();
            let stopped = Box::new(move |stop: StopResult| {
                let start = stop.is_ok().then(|| {
                    control::wait_recorded_exit(&hub2, &sid);
                    control::start(&hub2, &sid, spec.as_ref())
                });
                done(Ok(ActionResult::Restart { stop, start }))
            });
            control::stop(&hub.services, id, StopMode::Graceful, stopped);
        }
    }
}

/// [`act`] off the caller's socket reader ([`super::off_reader`]): `done`
/// gets the outcome from the action's own thread or its stop ladder's, or
/// an `internal_error` on this thread when no thread can be started.
pub fn act_off_reader(
    hub: &Arc<Hub>,
    id: &str,
    action: Action,
    spec: Option<Value>,
    done: ActionDone,
) {
    let input = (hub.clone(), id.to_string(), spec, done);
    let started = super::off_reader::run(
        "worker-action",
        "worker action",
        input,
        move |(hub, id, spec, done)| act(&hub, &id, action, spec, done),
    );
    if let Err((refusal, (_, _, _, done))) = started {
        done(Err(refusal));
    }
}

/// Sends an input (a message, `continue`, `compact`, or a read-only
/// query) to the connected worker; returns its request id. Nothing is
/// ever resent.
pub fn input(hub: &Hub, id: &str, input: &Value) -> Result<String, OpError> {
    operable(hub, id, "input")?;
    hub.sessions
        .send_input(&hub.publisher, id, input)
        .map_err(|err| not_sent(err, ErrorKind::InputNotSent))
}

/// A `history` query's page arguments, as the client gave them.
#[derive(Debug, Clone, Default)]
pub struct HistoryPage {
    pub request_id: Option<String>,
    pub start: Option<Value>,
    pub step: Option<Value>,
    pub limit: Option<Value>,
}

/// Sends a read-only `history` query; the worker's reply arrives as a
/// transient event. Returns the request id.
pub fn history(hub: &Hub, id: &str, page: HistoryPage) -> Result<String, OpError> {
    operable(hub, id, "history")?;
    let mut query = json!({"operation": "history"});
    for (key, value) in [
        ("start", page.start),
        ("step", page.step),
        ("limit", page.limit),
    ] {
        if let Some(value) = value {
            query[key] = value;
        }
    }
    if let Some(request_id) = page.request_id {
        query["request_id"] = json!(request_id);
    }
    hub.sessions
        .send_input(&hub.publisher, id, &query)
        .map_err(|err| not_sent(err, ErrorKind::InputNotSent))
}

/// Sends a signal (`cancel` defaults to the most recently observed run).
pub fn signal(hub: &Hub, id: &str, operation: &str, run_id: Option<&str>) -> Result<(), OpError> {
    operable(hub, id, "signal")?;
    hub.sessions
        .send_signal(id, operation, run_id)
        .map_err(|err| not_sent(err, ErrorKind::SignalNotSent))
}

/// Reads one page of a complete answer (`{source, part, offset}`) from
/// the connected worker as one read-only `answer` query, waiting at most
/// 10 s for its reply (`POST /api/sessions/:id/answer`).
///
/// Refusals: `invalid_arguments` (nothing sent), `unknown_session`,
/// `too_many_queries` (64 pending in the hub, 2 per session), and
/// `answer_unavailable` for every other failure (no live worker, the
/// capability missing, a connection change, the worker's `answer_error`,
/// the deadline), with `reason` and, for a worker refusal,
/// `worker_error {code, message}` among the details. The caller's thread
/// waits; no hub lock is held meanwhile. The wait also ends (reason
/// `cancelled`) as soon as `cancel` receives: the caller's client went away
/// (`http::hangup`).
pub fn answer(
    hub: &Hub,
    id: &str,
    args: &Value,
    cancel: &crossbeam_channel::Receiver<()>,
) -> Result<Value, OpError> {
    operable(hub, id, "answer")?;
    let payload = crate::wire::worker::answer::answer_payload(args)
        .map_err(|err| OpError::invalid_arguments(err.to_string()))?;
    Ok(hub
        .queries
        .ask_or_cancel(&hub.sessions, id, &payload, query::QUERY_DEADLINE, cancel)?)
}

/// The confirmation modes a client may choose (the worker protocol's
/// `options.confirmation.mode`), with what each means.
pub const MODES: [(&str, &str); 3] = [
    (
        "ask",
        "every call that needs confirmation is asked of the operators",
    ),
    ("approve", "every such call is approved without asking"),
    ("deny", "every such call is denied without asking"),
];

/// The mode a session's worker starts in.
pub const DEFAULT_MODE: &str = "ask";

/// A prompt from a client that drives the conversation (Shard).
#[derive(Debug, Clone, Copy)]
pub struct Prompt<'a> {
    /// The payload's request id (the caller's, so it can wait for the
    /// outcome before the worker can report it).
    pub request_id: &'a str,
    pub text: &'a str,
    /// `(base64 data, mime type)` of each image.
    pub images: &'a [(String, String)],
    /// Queue behind the active run (the worker's payload queue) rather
    /// than refuse while one runs.
    pub follow_up: bool,
}

/// Sends a prompt as a `message` input: the text part, then one image
/// part per image (`binary`, modality `image`, the mime type in
/// `extras`), and the session's chosen confirmation mode as
/// `options.confirmation.mode` when one was chosen. While a run is active
/// it is refused (`session_busy`) unless `follow_up`. Returns the request
/// id; its outcome arrives as a request note.
pub fn prompt(hub: &Hub, id: &str, prompt: &Prompt<'_>) -> Result<String, OpError> {
    operable(hub, id, "prompt")?;
    let (busy, mode) = hub
        .sessions
        .with(id, |s| {
            (s.active_run().is_some(), s.mode().map(str::to_string))
        })
        .ok_or_else(|| OpError::unknown_session(id))?;
    if busy && !prompt.follow_up {
        return Err(OpError::new(
            ErrorKind::SessionBusy,
            "a run is active: send the prompt with streaming_behavior follow_up to queue it",
        ));
    }
    let mut content = Vec::new();
    if !prompt.text.is_empty() {
        content.push(json!({"type": "text", "modality": "text", "raw": prompt.text}));
    }
    for (data, mime) in prompt.images {
        content.push(json!({"type": "binary", "modality": "image", "raw": data,
            "extras": {"mime_type": mime}}));
    }
    let mut input = json!({"request_id": prompt.request_id, "content": content});
    if let Some(mode) = mode {
        input["options"] = json!({"confirmation": {"mode": mode}});
    }
    hub.sessions
        .send_input(&hub.publisher, id, &input)
        .map_err(|err| not_sent(err, ErrorKind::InputNotSent))
}

/// Asks the worker to compact its conversation (`compact` input) under
/// `request_id`: refused while a run is active or an input waits for the
/// worker's answer (`session_busy`), and when the worker does not
/// advertise `context-compact` (`input_not_sent`).
pub fn compact(hub: &Hub, id: &str, request_id: &str) -> Result<String, OpError> {
    operable(hub, id, "compact")?;
    let busy = hub
        .sessions
        .with(id, |s| {
            s.active_run().is_some() || s.has_unsettled_request()
        })
        .ok_or_else(|| OpError::unknown_session(id))?;
    if busy {
        return Err(OpError::new(
            ErrorKind::SessionBusy,
            "compaction runs between turns: a run is active or an input is queued",
        ));
    }
    let input = json!({"operation": "compact", "request_id": request_id});
    hub.sessions
        .send_input(&hub.publisher, id, &input)
        .map_err(|err| not_sent(err, ErrorKind::InputNotSent))
}

/// The turns of the worker's conversation (a one-turn `history` page's
/// `total`), so a compaction with nothing to compact can be answered
/// without asking for it: the worker refuses a compact of a conversation
/// without turns, with a message and no stable code. Fails as the query
/// does (a worker without `session-history`, a disconnect, a deadline).
pub fn conversation_turns(hub: &Hub, id: &str) -> Result<u64, OpError> {
    operable(hub, id, "history")?;
    let payload = json!({"operation": "history", "start": 0, "limit": 1});
    let page = hub
        .queries
        .ask(&hub.sessions, id, &payload, query::QUERY_DEADLINE)?;
    page.get("total").and_then(Value::as_u64).ok_or_else(|| {
        OpError::new(
            ErrorKind::Internal,
            "the worker's history page has no total",
        )
    })
}

/// The modes a client may choose and the session's current one.
pub fn modes(hub: &Hub, id: &str) -> Result<String, OpError> {
    operable(hub, id, "modes")?;
    hub.sessions
        .with(id, |s| s.mode().unwrap_or(DEFAULT_MODE).to_string())
        .ok_or_else(|| OpError::unknown_session(id))
}

/// What [`set_mode`] changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModeChange {
    pub previous: String,
    pub mode: String,
}

impl ModeChange {
    pub fn changed(&self) -> bool {
        self.previous != self.mode
    }
}

/// Chooses the confirmation mode later prompts are sent with (`ask`,
/// `approve`, `deny`; anything else is `unknown_choice`). A real change
/// is announced (the session's description changed).
pub fn set_mode(hub: &Hub, id: &str, mode: &str) -> Result<ModeChange, OpError> {
    operable(hub, id, "set_mode")?;
    if !MODES.iter().any(|(name, _)| *name == mode) {
        return Err(OpError::new(
            ErrorKind::UnknownChoice,
            format!("unknown mode {mode:?} (ask, approve or deny)"),
        ));
    }
    let previous = hub
        .sessions
        .with(id, |s| s.set_mode(mode))
        .ok_or_else(|| OpError::unknown_session(id))?
        .unwrap_or_else(|| DEFAULT_MODE.to_string());
    let change = ModeChange {
        previous,
        mode: mode.to_string(),
    };
    if change.changed() {
        hub.publisher.notify(crate::session::Note::SessionChanged {
            session: id.to_string(),
        });
    }
    Ok(change)
}

/// Stops the worker when it is inactive: at once when no run is active
/// (`Ok(false)`, `done` gets the stop's outcome), or once the active run
/// finishes (`Ok(true)`: deferred; `done` is not called). The deferred stop
/// is carried out by [`DeferredStops`] when the run's end is announced.
pub fn terminate(hub: &Arc<Hub>, id: &str, done: ActionDone) -> Result<bool, OpError> {
    operable(hub, id, "worker stop")?;
    let deferred = hub
        .sessions
        .with(id, |s| s.defer_stop())
        .ok_or_else(|| OpError::unknown_session(id))?;
    if !deferred {
        act(hub, id, Action::Stop, None, done);
    }
    Ok(deferred)
}

/// The publisher subscriber that carries out deferred stops: when a
/// session's run ends (its `run_finished` event is announced) and a stop
/// waits for it, the worker is stopped gracefully, from a short-lived
/// thread (a stop writes SQLite; subscribers run under the publish lock).
pub struct DeferredStops {
    hub: std::sync::Weak<Hub>,
}

impl DeferredStops {
    pub fn new(hub: &Arc<Hub>) -> Arc<DeferredStops> {
        Arc::new(DeferredStops {
            hub: Arc::downgrade(hub),
        })
    }
}

impl crate::hub::Subscriber for DeferredStops {
    fn publish(&self, hub: &Hub, note: &crate::session::Note) {
        let crate::session::Note::Event {
            session,
            json,
            event,
            ..
        } = note
        else {
            return;
        };
        // A cheap look first: only a run's end can make a stop due.
        if json.get(event.clone()) != Some("run_finished") {
            return;
        }
        if hub.sessions.with(session, |s| s.take_due_stop()) != Some(true) {
            return;
        }
        let Some(hub) = self.hub.upgrade() else {
            return;
        };
        let id = session.clone();
        let started = crate::util::thread::spawn_with(
            "deferred-stop",
            crate::util::thread::Stack::Large,
            (hub, id),
            |(hub, id)| {
                log::info!("session {id}: its run finished; stopping the worker as asked");
                control::stop(&hub.services, &id, StopMode::Graceful, Box::new(|_| {}));
            },
        );
        if let Err((err, (_, id))) = started {
            log::error!("session {id}: cannot start the deferred stop: {err}");
        }
    }
}
