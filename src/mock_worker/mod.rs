//! The built-in worker, `simplex-hub mock-worker --config FILE --session ID
//! [--threads N]`: a real WebSocket client of the hub that speaks the worker
//! protocol faithfully, with a scripted model instead of an LLM, so the
//! whole chain runs offline. `docs/mock-worker.md` lists its behaviour and
//! test knobs.
//!
//! Threads: the run thread (this module's loop, the caller's thread) owns
//! the pure [`engine::Engine`] and performs its actions; the event
//! connection thread ([`connection`]) owns the socket; short-lived helper
//! threads do one slow thing each (a delay, a confirmation exchange, a
//! command, a remote-tool call) and report back on the inbound channel. Nothing is shared but
//! channels and the running command's process group id.
//!
//! Events wait in the engine's queue ([`queue`]); the run thread hands the
//! connection thread at most `client.transport.write_capacity` frames at a
//! time, and the connection thread reports each written batch back
//! ([`Inbound::Written`]), which is what lets a queued run be admitted.

// A test program: its sleeps pace polls that have deadlines (a command's
// exit, its output readers, an idle run loop).
#![allow(clippy::disallowed_methods)]

mod command;
mod config;
mod confirm;
mod connection;
mod conversation;
mod engine;
pub mod error;
mod logger;
mod queue;
mod remote;
mod storage;
mod subagent;
mod transport;
mod validate;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use serde_json::Value;

use crate::cli::MockWorkerArgs;
use config::WorkerConfig;
use connection::{Link, Outbound};
use engine::{Action, ConfirmRequest, Decision, Engine, RemoteCall, Settings, ToolOutput};
pub(crate) use error::MockError;
use storage::FileStorage;

/// What reaches the run thread.
pub(crate) enum Inbound {
    /// A hub `payload` frame's data.
    Payload(Value),
    /// A hub `signal` frame's data.
    Signal(Value),
    /// The hub broke framing on the event connection.
    Fatal(String),
    DelayElapsed(String),
    Decided(String, Decision),
    CommandDone(String, ToolOutput),
    /// A remote-tool call ended: the run id and the reply text.
    RemoteDone(String, String),
    /// The connection thread is done with this many more event frames
    /// (written, or lost with a failed write), oldest first.
    Written(usize),
}

/// Per-process behaviour chosen by the configured model name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Knobs {
    ignore_shutdown: bool,
    ignore_sigterm: bool,
    grandchild: bool,
}

impl Knobs {
    fn for_model(model: &str) -> Knobs {
        Knobs {
            ignore_shutdown: model == "mock-ignore-shutdown",
            ignore_sigterm: model == "mock-ignore-sigterm",
            grandchild: model == "mock-grandchild",
        }
    }
}

/// How long the run thread sleeps between looks at the SIGTERM flag.
const TICK: Duration = Duration::from_millis(100);
/// How long exit waits for queued events to be written.
const EXIT_FLUSH: Duration = Duration::from_secs(3);
/// How often the session root is checked for existence.
const ROOT_CHECK: Duration = Duration::from_secs(1);

static TERM_REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigterm(_: libc::c_int) {
    TERM_REQUESTED.store(true, Ordering::SeqCst);
}

/// SIGTERM either sets [`TERM_REQUESTED`] or, with `mock-ignore-sigterm`,
/// is ignored outright.
fn install_sigterm(ignore: bool) {
    let handler = if ignore {
        libc::SIG_IGN
    } else {
        on_sigterm as extern "C" fn(libc::c_int) as libc::sighandler_t
    };
    // SAFETY: the handler only stores to an atomic, which is
    // async-signal-safe; the sigaction struct is fully initialised.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
    }
}

/// A session id is 1-128 ASCII letters, digits, `_` or `-`.
fn valid_session_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Runs the worker until a protocol shutdown or SIGTERM (`Ok`), a startup
/// failure or fatal framing error (`Err`, exit 1). `/crash` exits the
/// process with status 3 from inside.
pub fn run(args: &MockWorkerArgs) -> Result<(), MockError> {
    if !valid_session_id(&args.session) {
        return Err(MockError::SessionId {
            value: args.session.clone(),
        });
    }
    let config = config::load(&args.config)?;
    logger::init();
    let knobs = Knobs::for_model(&config.model);
    install_sigterm(knobs.ignore_sigterm);
    let worker_id = uuid::Uuid::new_v4().to_string();
    stdout_line(&format!(
        "mock-worker: session {} worker {worker_id} model {} threads {} (pid {})",
        args.session,
        config.model,
        args.threads,
        std::process::id()
    ));
    stderr_line(&format!(
        "mock-worker: session {} starting; events {}",
        args.session,
        config.endpoint.redacted()
    ));
    if knobs.grandchild {
        spawn_grandchild();
    }
    let storage = FileStorage::open(&config.persistence, &args.session)?;
    let conversation = if config.persistence.enabled {
        storage.restore(config.persistence.restore)?
    } else {
        conversation::Conversation::default()
    };
    if !conversation.turns.is_empty() {
        log::info!("restored {} turn(s)", conversation.turns.len());
    }
    let settings = Settings {
        session_id: args.session.clone(),
        worker_id,
        model: config.model.clone(),
        max_exchanges: config.max_exchanges,
        payload_capacity: config.payload_capacity,
        event_capacity: config.event_capacity,
        write_capacity: config.write_capacity,
        persistence: config.persistence.enabled,
        save_on_step: config.persistence.on_step_finished,
        save_on_run: config.persistence.on_run_finished,
        save_on_shutdown: config.persistence.on_shutdown,
        max_archives: config.persistence.max_archives,
        confirmation_endpoint: config.confirmation.is_some(),
        tools_endpoint: config.tools.is_some(),
        ignore_shutdown: knobs.ignore_shutdown,
    };
    let engine = Engine::new(
        settings,
        conversation,
        Box::new(storage),
        Box::new(|| uuid::Uuid::new_v4().to_string()),
    );
    // Unbounded in type only: the engine hands out at most
    // `write_capacity` unwritten frames, plus its whole (bounded) queue at
    // exit, and at most one flush or close request follows.
    let (outbound, outbound_rx) = crossbeam_channel::unbounded();
    let (inbound_tx, inbound) = crossbeam_channel::unbounded();
    let link = Link {
        url: config.endpoint.clone(),
        initial_backoff: config.initial_backoff,
        max_backoff: config.max_backoff,
    };
    connection::spawn(link, outbound_rx, inbound_tx.clone())
        .map_err(|err| MockError::io("mock-events thread", "spawn", err))?;
    let shell = Shell {
        config,
        outbound,
        inbound,
        inbound_tx,
        helper: None,
        resume: None,
        running: Arc::new(command::Running::default()),
    };
    match shell.run(engine)? {
        0 => Ok(()),
        code => std::process::exit(code),
    }
}

/// `mock-grandchild`: a long sleeper in the worker's process group that
/// shares its stdout and stderr, left running when the worker exits.
fn spawn_grandchild() {
    match std::process::Command::new("sleep")
        .arg("3600")
        .stdin(std::process::Stdio::null())
        .spawn()
    {
        Ok(child) => log::info!("spawned grandchild sleep 3600 (pid {})", child.id()),
        Err(err) => log::warn!("cannot spawn the grandchild: {err}"),
    }
}

/// The run thread's side of the I/O.
struct Shell {
    config: WorkerConfig,
    outbound: Sender<Outbound>,
    inbound: Receiver<Inbound>,
    inbound_tx: Sender<Inbound>,
    /// The cancel token of the helper working for the active run: dropping
    /// it aborts a delay or a confirmation exchange.
    helper: Option<(String, Sender<()>)>,
    /// A flood batch is due ([`Action::Resume`]).
    resume: Option<String>,
    running: Arc<command::Running>,
}

impl Shell {
    /// Returns the exit status.
    fn run(mut self, mut engine: Engine) -> Result<i32, MockError> {
        let mut terminating = false;
        let mut root_checked = Instant::now();
        if let Some(code) = self.perform(engine.start()) {
            return Ok(code);
        }
        loop {
            if root_checked.elapsed() >= ROOT_CHECK {
                root_checked = Instant::now();
                if self.root_is_gone() {
                    log::warn!("the session directory was removed; exiting");
                    return Ok(self.leave(0, true));
                }
            }
            if !terminating && TERM_REQUESTED.load(Ordering::SeqCst) {
                terminating = true;
                log::info!("SIGTERM received");
                if let Some(code) = self.perform(engine.terminate()) {
                    return Ok(code);
                }
            }
            let input = match self.next_input() {
                Some(Ok(input)) => input,
                Some(Err(run_id)) => {
                    let actions = engine.resume(&run_id);
                    if let Some(code) = self.perform(actions) {
                        return Ok(code);
                    }
                    continue;
                }
                None => continue,
            };
            let actions = match input {
                Inbound::Payload(data) => engine.handle_payload(&data),
                Inbound::Signal(data) => engine.handle_signal(&data),
                Inbound::Fatal(reason) => {
                    self.kill_command();
                    return Err(MockError::Protocol { reason });
                }
                Inbound::DelayElapsed(run_id) => engine.delay_elapsed(&run_id),
                Inbound::Decided(run_id, decision) => {
                    engine.confirmation_decided(&run_id, decision)
                }
                Inbound::CommandDone(run_id, output) => engine.command_finished(&run_id, output),
                Inbound::RemoteDone(run_id, outcome) => engine.remote_finished(&run_id, outcome),
                Inbound::Written(frames) => engine.written(frames),
            };
            if let Some(code) = self.perform(actions) {
                return Ok(code);
            }
        }
    }

    /// The next input, or `Err(run_id)` when a flood batch is due and
    /// nothing else is waiting. `None` after an idle tick.
    fn next_input(&mut self) -> Option<Result<Inbound, String>> {
        if let Some(run_id) = self.resume.take() {
            return match self.inbound.try_recv() {
                Ok(input) => {
                    self.resume = Some(run_id);
                    Some(Ok(input))
                }
                Err(TryRecvError::Empty) | Err(TryRecvError::Disconnected) => Some(Err(run_id)),
            };
        }
        match self.inbound.recv_timeout(TICK) {
            Ok(input) => Some(Ok(input)),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                thread::sleep(TICK);
                None
            }
        }
    }

    /// Performs actions in order; `Some(status)` when the process must end.
    /// An exit waits for the frames that follow it in the list (the
    /// engine's whole queue) and ends the process after them; nothing but
    /// those frames is performed once an exit is due.
    fn perform(&mut self, actions: Vec<Action>) -> Option<i32> {
        let mut exit = None;
        for action in actions {
            if exit.is_some() && !matches!(action, Action::Emit(_)) {
                continue;
            }
            match action {
                Action::Emit(frame) => {
                    let _ = self.outbound.send(Outbound::Event(frame));
                }
                Action::Wait { run_id, ms } => {
                    let cancel = self.new_helper(&run_id);
                    let report = self.inbound_tx.clone();
                    self.spawn_helper("mock-delay", move || {
                        if cancel.recv_timeout(Duration::from_millis(ms))
                            == Err(RecvTimeoutError::Timeout)
                        {
                            let _ = report.send(Inbound::DelayElapsed(run_id));
                        }
                    });
                }
                Action::Confirm(request) => self.confirm(request),
                Action::Remote(call) => self.remote(call),
                Action::Execute { run_id, command } => {
                    self.helper = None;
                    let report = self.inbound_tx.clone();
                    let workspace = self.config.workspace.clone();
                    let limit = self.config.confirmation_timeout;
                    let running = self.running.clone();
                    log::info!("run {run_id}: executing an approved command");
                    self.spawn_helper("mock-command", move || {
                        let output = command::run(&command, &workspace, limit, &running);
                        let _ = report.send(Inbound::CommandDone(run_id, output));
                    });
                }
                Action::Resume { run_id } => self.resume = Some(run_id),
                Action::Abort { run_id } => {
                    if self.helper.as_ref().is_some_and(|(id, _)| *id == run_id) {
                        self.helper = None;
                    }
                }
                Action::Note(line) => stdout_line(&format!("mock-worker: {line}")),
                Action::Exit { code, close } => exit = Some((code, close)),
            }
        }
        exit.map(|(code, close)| self.leave(code, close))
    }

    /// Kills a running command, delivers the queued events (closing the
    /// socket normally when `close`), and returns `code`.
    fn leave(&mut self, code: i32, close: bool) -> i32 {
        self.kill_command();
        let (done, wait) = crossbeam_channel::bounded(1);
        let request = if close {
            Outbound::Close(done)
        } else {
            Outbound::Flush(done)
        };
        if self.outbound.send(request).is_ok() {
            let _ = wait.recv_timeout(EXIT_FLUSH);
        }
        code
    }

    /// Persistence is on and the session root no longer exists: the
    /// session was deleted (or a test's temporary directory removed), so
    /// nothing this worker does can matter any more. The hub never deletes
    /// the directory of a running worker.
    fn root_is_gone(&self) -> bool {
        let root = &self.config.persistence.directory;
        self.config.persistence.enabled
            && matches!(std::fs::symlink_metadata(root), Err(err) if err.kind() == std::io::ErrorKind::NotFound)
    }

    fn confirm(&mut self, request: ConfirmRequest) {
        let cancel = self.new_helper(&request.run_id);
        let report = self.inbound_tx.clone();
        let timeout = self.config.confirmation_timeout;
        let Some(url) = self.config.confirmation.clone() else {
            let decision = Decision {
                approved: false,
                reason: "no confirmation endpoint is configured".into(),
            };
            let _ = report.send(Inbound::Decided(request.run_id, decision));
            return;
        };
        self.spawn_helper("mock-confirm", move || {
            let decision = confirm::exchange(&url, &request, timeout, &cancel);
            log::info!(
                "confirmation {}: {} ({})",
                request.confirmation_id,
                if decision.approved {
                    "approved"
                } else {
                    "denied"
                },
                decision.reason
            );
            let _ = report.send(Inbound::Decided(request.run_id, decision));
        });
    }

    fn remote(&mut self, call: RemoteCall) {
        let cancel = self.new_helper(&call.run_id);
        let report = self.inbound_tx.clone();
        let timeout = self.config.tools_timeout;
        let Some(base) = self.config.tools.clone() else {
            let text = format!(
                "{} failed: no hub_remote_call endpoint is configured",
                call.route
            );
            let _ = report.send(Inbound::RemoteDone(call.run_id, text));
            return;
        };
        self.spawn_helper("mock-remote", move || {
            let outcome = remote::call(&base, &call, timeout, &cancel);
            let summary = outcome.split(':').next().unwrap_or_default();
            log::info!("run {}: {summary}", call.run_id);
            let _ = report.send(Inbound::RemoteDone(call.run_id, outcome));
        });
    }

    /// A fresh cancel token for the helper of `run_id`, replacing any older
    /// one (whose helper is then aborted).
    fn new_helper(&mut self, run_id: &str) -> Receiver<()> {
        let (token, cancel) = crossbeam_channel::bounded(1);
        self.helper = Some((run_id.to_string(), token));
        cancel
    }

    fn spawn_helper(&self, name: &str, work: impl FnOnce() + Send + 'static) {
        if let Err(err) = thread::Builder::new().name(name.into()).spawn(work) {
            log::error!("cannot start the {name} thread: {err}");
        }
    }

    /// Kills the running command's process group, if any.
    fn kill_command(&self) {
        let pgid = self.running.pgid.load(Ordering::SeqCst);
        if pgid > 0 {
            // SAFETY: signalling the process group the command runner created.
            unsafe { libc::killpg(pgid, libc::SIGKILL) };
        }
    }
}

/// Writes one line to stdout, ignoring failures: after a hub is killed the
/// pipe it held is gone (EPIPE), and an adopted worker must keep running
/// for the next hub rather than die on its next log line.
fn stdout_line(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

/// Like [`stdout_line`], for stderr.
fn stderr_line(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids() {
        for good in ["demo", "a-b_C9", &"x".repeat(128)] {
            assert!(valid_session_id(good), "{good}");
        }
        for bad in ["", "a b", "../x", "é", &"x".repeat(129)] {
            assert!(!valid_session_id(bad), "{bad}");
        }
    }

    #[test]
    fn knobs_follow_the_model_name() {
        assert_eq!(Knobs::for_model("mock-flash"), Knobs::default());
        assert!(Knobs::for_model("mock-ignore-shutdown").ignore_shutdown);
        assert!(Knobs::for_model("mock-ignore-sigterm").ignore_sigterm);
        assert!(Knobs::for_model("mock-grandchild").grandchild);
    }
}
