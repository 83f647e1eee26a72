//! Docker launches, the I/O part: the management context kept at a start
//! (and read back after a hub restart), the bounded `docker kill` and
//! `docker inspect` runs, following a container whose CLI has exited, and
//! the stop ladder by container. The decisions are `docker`'s (pure).
//!
//! The context is kept in `<dataDir>/docker/<session>.json` (0600 in a
//! 0700 directory, `context`), written before the CLI is spawned and
//! removed just before the worker's end is recorded. It is not in the session
//! directory, which a Docker launch usually mounts into the container.
//!
//! Every management command runs the executable the launch resolved, in
//! its working directory, with the kept environment only, and is bounded:
//! [`COMMAND_TIMEOUT`] and [`OUTPUT_CAP`] bytes of each output stream.

use std::fmt;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::context::{self, ContextError};
use super::docker::{self, Inspected, Management, Recognised, Signal, Stored};
use super::launch::Invocation;
use super::stop::{StopFailed, StopHow, StopMode, StopResult, Stopped};
use super::sys::Pinned;
use super::tracked;
use crate::config::Config;
use crate::session::{Session, Sessions};
use crate::store::ProcessRecord;

/// How long one `docker kill` or `docker inspect` may take.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// Bytes of stdout and of stderr kept from one management command (the
/// rest is read and dropped).
pub const OUTPUT_CAP: usize = 4096;

/// `docker run`'s own failure status (the daemon refused: a name in use,
/// an image it cannot find, …): whatever container has the name is not
/// this start's.
const DOCKER_RUN_FAILED: i32 = 125;

/// How long a stopped `--rm` container may take to be removed before it
/// is taken as over anyway.
const REMOVAL_WAIT: Duration = Duration::from_secs(10);

/// How often a container whose CLI has exited is inspected, and how often
/// while a stop is in progress (or its removal is awaited).
const FOLLOW_POLL: Duration = Duration::from_secs(1);
const STOPPING_POLL: Duration = Duration::from_millis(100);

/// How often a stop inspects the container, and how long it waits on the
/// CLI's pidfd at a time.
const LADDER_POLL: Duration = Duration::from_millis(100);
const CLI_SLICE: Duration = Duration::from_millis(250);

/// What the Docker side works with: the session registry and the hub's
/// settings (its data directory, the stop rules).
#[derive(Clone, Copy)]
pub struct Handles<'a> {
    pub sessions: &'a Sessions,
    pub config: &'a Config,
}

fn dir(at: Handles<'_>) -> PathBuf {
    context::dir_in(&at.config.data_dir)
}

/// The context file of session `id`.
fn file(at: Handles<'_>, id: &str) -> PathBuf {
    dir(at).join(format!("{id}.json"))
}

/// The hub's environment, as text (a variable that is not UTF-8 is left
/// out: it could not be kept).
fn hub_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// At a start: when `invocation` is a foreground `docker run` of a named
/// container, resolves its executable and keeps its management context
/// (written before the spawn); the CLI is then spawned as
/// `management.executable`. `Ok(None)` for any other launch. An error
/// fails the start.
pub fn prepare(
    at: Handles<'_>,
    id: &str,
    lifecycle_id: &str,
    invocation: &Invocation,
    pass_through: &[String],
) -> Result<Option<Arc<Management>>, PrepareError> {
    let target = match docker::recognise(&invocation.program, &invocation.args) {
        Recognised::NotDocker => return Ok(None),
        Recognised::Unmanaged(why) => {
            log::warn!(
                "session {id}: {why}; the docker CLI is supervised as an ordinary process \
                 (a container it leaves running is not stopped)"
            );
            return Ok(None);
        }
        Recognised::Container(_) if invocation.pid_file.is_some() => {
            log::warn!(
                "session {id}: launcher.pidFile is set, so the docker run is followed through \
                 its pid file, not by its container"
            );
            return Ok(None);
        }
        Recognised::Container(target) => target,
    };
    let cwd = if invocation.cwd.is_absolute() {
        invocation.cwd.clone()
    } else {
        std::env::current_dir()
            .map_err(PrepareError::Cwd)?
            .join(&invocation.cwd)
    };
    let startup = docker::effective_env(hub_env(), &invocation.env);
    let path_var = startup
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str());
    let executable = docker::executable_candidates(&invocation.program, &cwd, path_var)
        .into_iter()
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| PrepareError::NoExecutable(invocation.program.clone()))?;
    let pass_through = pass_through.to_vec();
    let management = Management {
        executable,
        cwd,
        env: docker::management_env(startup, &pass_through),
        pass_through,
        target,
    };
    let stored = Stored {
        session: id.to_string(),
        lifecycle_id: lifecycle_id.to_string(),
        management,
    };
    context::write(&at.config.data_dir, &stored).map_err(PrepareError::Context)?;
    let m = stored.management;
    log::info!(
        "session {id}: container {} is the worker: stopped with docker kill and judged by docker \
         inspect through {}",
        m.target.name,
        m.executable.display()
    );
    Ok(Some(Arc::new(m)))
}

/// Why a Docker launch's management context could not be kept (the
/// start fails).
#[derive(Debug)]
pub enum PrepareError {
    /// The hub's working directory (a relative launch directory is
    /// resolved against it) cannot be read.
    Cwd(io::Error),
    /// No executable file of the program's name (on `PATH`).
    NoExecutable(String),
    Context(ContextError),
}

impl fmt::Display for PrepareError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrepareError::Cwd(err) => write!(f, "cannot resolve the launch directory: {err}"),
            PrepareError::NoExecutable(program) => write!(
                f,
                "cannot spawn {program}: no such executable file (looked up for the Docker \
                 management context)"
            ),
            PrepareError::Context(err) => write!(f, "{err}"),
        }
    }
}

impl std::error::Error for PrepareError {}

/// Removes session `id`'s kept context, if it is `lifecycle_id`'s.
pub fn forget(at: Handles<'_>, id: &str, lifecycle_id: &str) {
    let path = file(at, id);
    let ours = context::read(&path).is_ok_and(|s| s.lifecycle_id == lifecycle_id);
    if ours {
        if let Err(err) = std::fs::remove_file(&path) {
            log::warn!("session {id}: cannot remove {}: {err}", path.display());
        }
    }
}

/// After a hub restart: the context kept for the recorded process `rec`,
/// when there is a valid one of its start.
pub fn load(at: Handles<'_>, rec: &ProcessRecord) -> Option<Arc<Management>> {
    let path = file(at, &rec.session_id);
    match context::read(&path) {
        Ok(stored)
            if stored.session == rec.session_id && stored.lifecycle_id == rec.lifecycle_id =>
        {
            Some(Arc::new(stored.management))
        }
        Ok(_) => None,
        Err(err) => {
            if path.exists() {
                log::warn!(
                    "session {}: the Docker management context {} is not usable ({err}); \
                     a container it ran is not managed",
                    rec.session_id,
                    path.display()
                );
            }
            None
        }
    }
}

/// After adoption: removes every kept context but those of `keep`.
pub fn sweep(at: Handles<'_>, keep: &[String]) {
    let Ok(entries) = std::fs::read_dir(dir(at)) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".json")) else {
            continue;
        };
        if !keep.iter().any(|k| k == id) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// What one management command did.
#[derive(Debug)]
struct Ran {
    /// Its exit status; `None` when a signal ended it.
    status: Option<i32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// Why a management command gave no answer; `what` names it (the
/// executable and the subcommand).
#[derive(Debug)]
struct CommandError {
    what: String,
    failure: Failure,
}

/// What went wrong with a management command.
#[derive(Debug)]
enum Failure {
    /// It could not be started.
    Spawn(io::Error),
    /// It did not end within [`COMMAND_TIMEOUT`] (it was killed).
    TimedOut,
    /// Its exit could not be waited for.
    Wait(io::Error),
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = &self.what;
        match &self.failure {
            Failure::Spawn(err) => write!(f, "cannot run {what}: {err}"),
            Failure::TimedOut => write!(
                f,
                "{what}: no answer within {} s",
                COMMAND_TIMEOUT.as_secs_f32()
            ),
            Failure::Wait(err) => write!(f, "{what}: cannot wait for it: {err}"),
        }
    }
}

impl std::error::Error for CommandError {}

/// Runs `docker <args>` through `m`, bounded (see the module header).
fn run(m: &Management, args: &[String]) -> Result<Ran, CommandError> {
    let mut command = Command::new(&m.executable);
    command
        .args(args)
        .current_dir(&m.cwd)
        .env_clear()
        .envs(m.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let failed = |failure| CommandError {
        what: format!(
            "{} {}",
            m.executable.display(),
            args.first().map_or("", |a| a)
        ),
        failure,
    };
    let mut child = tracked::spawn_tracked(&mut command).map_err(|e| failed(Failure::Spawn(e)))?;
    let pid = child.id();
    let result = collect(&mut child, Instant::now() + COMMAND_TIMEOUT);
    tracked::untrack(pid);
    result.map_err(failed)
}

/// One output pipe of a management command and what was kept of it.
struct Pipe {
    /// `None` once it reached its end.
    reader: Option<Box<dyn Read>>,
    fd: std::os::fd::RawFd,
    kept: Vec<u8>,
}

impl Pipe {
    fn new<P: Read + std::os::fd::AsRawFd + 'static>(pipe: Option<P>) -> Pipe {
        let fd = pipe.as_ref().map_or(-1, |p| p.as_raw_fd());
        Pipe {
            reader: pipe.map(|p| Box::new(p) as Box<dyn Read>),
            fd,
            kept: Vec::new(),
        }
    }

    /// Reads what is there (the poll said so): keeps up to
    /// [`OUTPUT_CAP`] bytes, drops the rest, closes at the end.
    fn read_some(&mut self, buf: &mut [u8]) {
        let Some(reader) = self.reader.as_mut() else {
            return;
        };
        match reader.read(buf) {
            Ok(0) | Err(_) => self.reader = None,
            Ok(n) => {
                let room = OUTPUT_CAP.saturating_sub(self.kept.len());
                self.kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

/// Reads both pipes of `child` (capped) and reaps it by `deadline`; kills
/// and reaps it when the deadline passes.
fn collect(child: &mut Child, deadline: Instant) -> Result<Ran, Failure> {
    let mut pipes = [
        Pipe::new(child.stdout.take()),
        Pipe::new(child.stderr.take()),
    ];
    let mut buf = [0u8; 4096];
    let timed_out = |child: &mut Child| {
        let _ = child.kill();
        let _ = child.wait();
        Err(Failure::TimedOut)
    };
    loop {
        let open: Vec<usize> = (0..2).filter(|&i| pipes[i].reader.is_some()).collect();
        if open.is_empty() {
            break;
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return timed_out(child);
        }
        let mut entries: Vec<libc::pollfd> = open
            .iter()
            .map(|&i| crate::util::poll::pollin(pipes[i].fd))
            .collect();
        if crate::util::poll::wait(&mut entries, remaining) == 0 {
            continue;
        }
        for (entry, &i) in entries.iter().zip(&open) {
            if entry.revents != 0 {
                pipes[i].read_some(&mut buf);
            }
        }
    }
    // Both pipes are closed: its exit is waited for on a pidfd, opened
    // once it is seen still running (an unreaped child of ours, so its pid
    // cannot be another process's meanwhile).
    let mut pidfd: Option<Option<Pinned>> = None;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let [stdout, stderr] = pipes;
                return Ok(Ran {
                    status: status.code(),
                    stdout: stdout.kept,
                    stderr: stderr.kept,
                });
            }
            Ok(None) => {}
            Err(err) => return Err(Failure::Wait(err)),
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return timed_out(child);
        }
        let pin = pidfd.get_or_insert_with(|| {
            let pid = child.id();
            super::sys::proc_start_time(pid)
                .ok()
                .and_then(|start| Pinned::open(pid, start).ok())
        });
        match pin {
            Some(pin) => {
                pin.wait_exit(remaining);
            }
            None => {
                #[expect(
                    clippy::disallowed_methods,
                    reason = "no pidfd (kernel before 5.3, or a seccomp filter) and `Child` \
                              has no timed wait: its exit is looked for every 2 ms until \
                              the deadline"
                )]
                std::thread::sleep(remaining.min(Duration::from_millis(2)));
            }
        }
    }
}

/// The name management commands use for the container: its id once
/// known, else its name.
fn handle<'a>(m: &'a Management, container_id: Option<&'a str>) -> &'a str {
    container_id.unwrap_or(&m.target.name)
}

/// `docker kill --signal SIG` on the container. Best effort: a container
/// that already ended refuses, and the end is judged by inspect anyway.
fn kill(id: &str, m: &Management, container_id: Option<&str>, signal: Signal) {
    let name = handle(m, container_id);
    match run(m, &docker::kill_args(&m.target, name, signal)) {
        Ok(ran) if ran.status == Some(0) => {
            log::info!("session {id}: sent {} to container {name}", signal.as_str());
        }
        Ok(ran) => log::info!(
            "session {id}: docker kill --signal {} {name} refused: {}",
            signal.as_str(),
            String::from_utf8_lossy(&ran.stderr).trim()
        ),
        Err(err) => log::warn!("session {id}: {err}"),
    }
}

/// Runs `docker inspect` on the container of `id`'s start `lifecycle_id`
/// and keeps the id it reports.
fn inspect(at: Handles<'_>, id: &str, lifecycle_id: &str, m: &Management) -> Inspected {
    let known = at
        .sessions
        .with(id, |s| s.process().and_then(|p| p.container_id.clone()))
        .flatten();
    let seen = match run(
        m,
        &docker::inspect_args(&m.target, handle(m, known.as_deref())),
    ) {
        Ok(ran) => docker::read_inspect(ran.status, &ran.stdout, &ran.stderr),
        Err(err) => Inspected::Unknown(err.to_string()),
    };
    if let (None, Some(found)) = (&known, seen.id()) {
        at.sessions
            .with(id, |s| s.note_container_id(lifecycle_id, found));
    }
    seen
}

/// After a restart, for a recorded Docker launch whose CLI is gone:
/// whether its container may still run (running, or its state unknown).
pub fn may_still_run(rec: &ProcessRecord, m: &Management) -> bool {
    match run(m, &docker::inspect_args(&m.target, &m.target.name)) {
        Ok(ran) => match docker::read_inspect(ran.status, &ran.stdout, &ran.stderr) {
            Inspected::Running { .. } => true,
            Inspected::Unknown(why) => {
                log::warn!(
                    "session {}: cannot tell whether container {} still runs ({why}); it is \
                     followed until it can",
                    rec.session_id,
                    m.target.name
                );
                true
            }
            Inspected::Stopped { .. } | Inspected::Gone => false,
        },
        Err(err) => {
            log::warn!(
                "session {}: {err}; the container is followed",
                rec.session_id
            );
            true
        }
    }
}

/// After the CLI of `id`'s start `lifecycle_id` exited with `code` and
/// `signal` (both `None` when it was not our child): waits until the
/// container is over (`Inspected::over`), following it while it runs on,
/// and returns the end to record. The kept context is removed just before.
///
/// - `docker run` failed (status 125): the end is the CLI's; a container
///   of that name is not this start's.
/// - The container was already over: the CLI's status (a foreground run
///   exits with its container's), or the container's when the CLI was
///   killed and the container reported one.
/// - It ran on: the container's exit status when it reported one (a
///   `--rm` container's is read before its removal, when seen).
///
/// An unknown state is never taken for an end. A `--rm` container that
/// stopped but is still not removed after [`REMOVAL_WAIT`] is taken as
/// over (with a warning): it runs nothing.
pub fn follow(
    at: Handles<'_>,
    id: &str,
    lifecycle_id: &str,
    m: &Management,
    code: Option<i32>,
    signal: Option<i32>,
) -> (Option<i32>, Option<i32>) {
    if code == Some(DOCKER_RUN_FAILED) {
        forget(at, id, lifecycle_id);
        return (code, signal);
    }
    let auto_remove = m.target.auto_remove;
    let mut followed = false;
    let mut unknown: Option<String> = None;
    let mut container_code = None;
    let mut stopped_at: Option<Instant> = None;
    loop {
        let seen = inspect(at, id, lifecycle_id, m);
        match &seen {
            Inspected::Stopped { code, .. } => {
                container_code = code.or(container_code);
                stopped_at.get_or_insert_with(Instant::now);
            }
            Inspected::Running { .. } => stopped_at = None,
            _ => {}
        }
        let overdue = stopped_at.is_some_and(|at| at.elapsed() >= REMOVAL_WAIT);
        if seen.over(auto_remove) || (seen.runs_nothing() && overdue) {
            if !seen.over(auto_remove) {
                log::warn!(
                    "session {id}: container {} stopped but was not removed within {} s;                      taken as ended",
                    m.target.name,
                    REMOVAL_WAIT.as_secs()
                );
            }
            forget(at, id, lifecycle_id);
            return match (followed, code) {
                (false, Some(_)) => (code, signal),
                (false, None) if container_code.is_none() => (None, signal),
                _ => (container_code, None),
            };
        }
        if let Inspected::Unknown(why) = &seen {
            if unknown.as_deref() != Some(why.as_str()) {
                log::warn!(
                    "session {id}: cannot tell whether container {} still runs: {why}",
                    m.target.name
                );
                unknown = Some(why.clone());
            }
        } else {
            unknown = None;
        }
        if seen.runs_nothing() {
            // Stopped, and the daemon is removing it (--rm).
            #[expect(
                clippy::disallowed_methods,
                reason = "the container lives in the Docker daemon: nothing local to wait on, \
                          so `docker inspect` is run again after STOPPING_POLL"
            )]
            std::thread::sleep(STOPPING_POLL);
            continue;
        }
        if !followed {
            let still = at
                .sessions
                .with(id, |s| s.record_container_followed(lifecycle_id))
                .unwrap_or(false);
            if !still {
                forget(at, id, lifecycle_id);
                return (code, signal);
            }
            followed = true;
            log::info!(
                "session {id}: the docker CLI exited but container {} runs on; following the \
                 container",
                m.target.name
            );
        }
        let stopping = at
            .sessions
            .with(id, |s| {
                s.process()
                    .is_some_and(|p| p.state == super::process::ProcState::Stopping)
            })
            .unwrap_or(false);
        #[expect(
            clippy::disallowed_methods,
            reason = "the container lives in the Docker daemon: nothing local to wait on, \
                      so `docker inspect` is run again after FOLLOW_POLL (STOPPING_POLL \
                      while a stop is in progress)"
        )]
        std::thread::sleep(if stopping { STOPPING_POLL } else { FOLLOW_POLL });
    }
}

/// What a wait for the container's end found at its deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    /// It runs nothing any more (or its end was recorded).
    Gone,
    /// It still runs.
    Running,
    /// It runs nothing, but the CLI has not exited.
    CliStuck,
    Unknown(String),
}

/// A stop by container of session `id`'s start `lifecycle`.
struct Ladder<'a> {
    at: Handles<'a>,
    id: &'a str,
    lifecycle: &'a str,
    m: &'a Management,
}

impl Ladder<'_> {
    /// The CLI's pin (while it is pinned) and the container id, while the
    /// record is this start's and active; `None` once it has ended.
    fn lookup(&self) -> Option<(Option<Arc<Pinned>>, Option<String>)> {
        self.at
            .sessions
            .with(self.id, |s| {
                s.process()
                    .filter(|p| p.lifecycle_id == self.lifecycle && p.state.is_active())
                    .map(|p| (p.pinned.clone(), p.container_id.clone()))
            })
            .flatten()
    }

    fn kill(&self, signal: Signal) {
        if let Some((_, container_id)) = self.lookup() {
            kill(self.id, self.m, container_id.as_deref(), signal);
        }
    }

    fn inspect(&self) -> Inspected {
        inspect(self.at, self.id, self.lifecycle, self.m)
    }

    /// Waits up to `timeout` for the container's end: while the CLI runs,
    /// for its exit (a foreground CLI exits with its container); then by
    /// inspecting the container.
    fn gone_within(&self, timeout: Duration) -> Verdict {
        let deadline = Instant::now() + timeout;
        loop {
            let Some((cli, _)) = self.lookup() else {
                return Verdict::Gone;
            };
            let remaining = deadline.saturating_duration_since(Instant::now());
            if let Some(cli) = cli.filter(|c| c.is_alive()) {
                if remaining.is_zero() {
                    return match self.inspect() {
                        Inspected::Running { .. } => Verdict::Running,
                        Inspected::Unknown(why) => Verdict::Unknown(why),
                        Inspected::Stopped { .. } | Inspected::Gone => Verdict::CliStuck,
                    };
                }
                cli.wait_exit(remaining.min(CLI_SLICE));
                continue;
            }
            match self.inspect() {
                seen if seen.over(self.m.target.auto_remove) => return Verdict::Gone,
                // Stopped; the daemon has not removed it yet (--rm).
                seen if seen.runs_nothing() && remaining.is_zero() => return Verdict::Gone,
                Inspected::Unknown(why) if remaining.is_zero() => return Verdict::Unknown(why),
                Inspected::Running { .. } if remaining.is_zero() => return Verdict::Running,
                #[expect(
                    clippy::disallowed_methods,
                    reason = "the container lives in the Docker daemon and its CLI has exited: \
                              nothing local to wait on, so `docker inspect` is run again after \
                              LADDER_POLL, until the grace ends"
                )]
                _ => std::thread::sleep(remaining.min(LADDER_POLL)),
            }
        }
    }
}

/// The stop ladder of a Docker launch: the protocol shutdown (graceful
/// mode, connected worker), then `docker kill --signal TERM`, then
/// `--signal KILL`, each followed by its grace; the end is the container's
/// (see [`Ladder::gone_within`]). The CLI itself is signalled only when
/// its container has ended and it has not (SIGKILL, to its group with a
/// group kill), and a group kill also reaches what is left of the CLI's
/// process group once the container has ended.
pub(super) fn ladder(
    at: Handles<'_>,
    id: &str,
    lifecycle: &str,
    m: &Management,
    first_cli: Option<Arc<Pinned>>,
    connected: bool,
    mode: StopMode,
) -> StopResult {
    // A library session stops with its launch file's timings.
    let w = &super::stop::recorded_stop_settings(at.sessions, at.config, id);
    let group_kill = mode == StopMode::ForceKill || at.config.force_kill_process_group;
    let stop = Ladder {
        at,
        id,
        lifecycle,
        m,
    };
    let done = |how, forced| Ok(Stopped { how, forced });
    if mode == StopMode::Graceful {
        if connected
            && at.sessions.send_signal(id, "shutdown", None).is_ok()
            && stop.gone_within(Duration::from_millis(w.stop_timeout_ms)) == Verdict::Gone
        {
            return done(StopHow::ShutdownSignal, false);
        }
        if stop.lookup().is_none() {
            return done(StopHow::ShutdownSignal, false);
        }
        stop.kill(Signal::Term);
        if stop.gone_within(Duration::from_millis(w.sigterm_grace_ms)) == Verdict::Gone {
            return done(StopHow::Sigterm, true);
        }
    }
    let how = if group_kill {
        StopHow::SigkillProcessGroup
    } else {
        StopHow::Sigkill
    };
    stop.kill(Signal::Kill);
    let grace = Duration::from_millis(w.sigkill_grace_ms);
    let verdict = match stop.gone_within(grace) {
        Verdict::CliStuck => {
            log::warn!(
                "session {id}: container {} ended but its docker CLI did not; killing the CLI",
                m.target.name
            );
            let cli = stop.lookup().and_then(|(cli, _)| cli);
            if let Some(cli) = &cli {
                let _ = if group_kill {
                    cli.signal_own_group(libc::SIGKILL)
                } else {
                    cli.signal(libc::SIGKILL)
                };
            }
            stop.gone_within(grace)
        }
        other => other,
    };
    match verdict {
        Verdict::Gone => {
            if group_kill {
                if let Some(cli) = &first_cli {
                    at.sessions.with(id, Session::note_group_killed);
                    let _ = cli.signal_own_group(libc::SIGKILL);
                }
            }
            done(how, true)
        }
        Verdict::Running | Verdict::CliStuck => Err(StopFailed {
            how,
            forced: true,
            reason: "the container is still running after docker kill --signal KILL".into(),
        }),
        Verdict::Unknown(why) => Err(StopFailed {
            how,
            forced: true,
            reason: format!("the container's state is unknown: {why}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervisor::docker::Target;
    use crate::util::testkit::TempDir;

    /// A management context for a script standing in for the CLI.
    fn management(dir: &TempDir, script: &str, env: &[(&str, &str)]) -> Management {
        use std::os::unix::fs::PermissionsExt;
        let exe = dir.join("docker");
        std::fs::write(&exe, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        Management {
            executable: exe,
            cwd: dir.path().to_path_buf(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            pass_through: vec![],
            target: Target {
                name: "w1".into(),
                global_args: vec![],
                auto_remove: true,
            },
        }
    }

    #[test]
    fn a_command_sees_only_the_kept_environment_and_directory() {
        let dir = TempDir::new("docker-run-env");
        let m = management(
            &dir,
            "echo \"args=$* kept=$KEPT home=${HOME:-none} cwd=$(/bin/pwd)\"; echo warn >&2; exit 3",
            &[("KEPT", "yes"), ("PATH", "/usr/bin:/bin")],
        );
        let ran = run(&m, &["inspect".into(), "w1".into()]).unwrap();
        assert_eq!(ran.status, Some(3));
        assert_eq!(
            String::from_utf8_lossy(&ran.stdout).trim(),
            format!(
                "args=inspect w1 kept=yes home=none cwd={}",
                dir.path().display()
            )
        );
        assert_eq!(ran.stderr, b"warn\n");
    }

    #[test]
    fn a_command_is_bounded_in_output_and_time() {
        let dir = TempDir::new("docker-run-bounds");
        let m = management(
            &dir,
            "i=0; while [ $i -lt 3000 ]; do echo 0123456789; i=$((i+1)); done; exit 0",
            &[("PATH", "/usr/bin:/bin")],
        );
        let ran = run(&m, &[]).unwrap();
        assert_eq!(ran.status, Some(0));
        assert_eq!(ran.stdout.len(), OUTPUT_CAP);
        // A command that never answers is killed at the deadline; one that
        // closes its pipes but lingers, too.
        for script in ["exec sleep 30", "exec sleep 30 >/dev/null 2>&1"] {
            let m = management(&dir, script, &[("PATH", "/usr/bin:/bin")]);
            let began = Instant::now();
            let err = run(&m, &[]).unwrap_err();
            assert!(matches!(err.failure, Failure::TimedOut), "{err}");
            assert!(err.to_string().contains("no answer within"), "{err}");
            assert!(began.elapsed() < COMMAND_TIMEOUT + Duration::from_secs(5));
        }
        // An executable that is gone is an error, not a hang.
        let mut gone = management(&dir, "exit 0", &[]);
        gone.executable = dir.join("missing");
        let err = run(&gone, &[]).unwrap_err();
        assert!(matches!(err.failure, Failure::Spawn(_)), "{err}");
        assert!(err.to_string().contains("cannot run"), "{err}");
    }
}
