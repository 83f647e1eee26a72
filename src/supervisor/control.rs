//! Starting and stopping workers. A start renders the worker's
//! configuration, spawns it in its own process group, pins the incarnation
//! (pidfd + `/proc` start time) and records it durably. A stop climbs the
//! protocol-first ladder on a thread of its own, waiting on the pidfd, so
//! no request or panel thread sleeps through the deadlines.
//!
//! Threads per running worker: one waiter (blocks in `wait()`), two pipe
//! readers (see `capture`). Each stop has one ladder thread. Signals only
//! ever go through the pinned incarnation.
//!
//! A launcher that daemonizes (`launcher.pidFile`) exits soon after its
//! start; the waiter then finds the worker it left behind through the pid
//! file (`daemon`), pins it, makes it the session's process (store record
//! included, so a restarted hub adopts it) and waits on its pidfd instead.
//! A stop that runs meanwhile follows the record to the new process.
//!
//! A foreground `docker run` of a named container (`docker`, `container`)
//! is the container: the waiter follows the container once the CLI has
//! exited, and a stop climbs the same ladder with `docker kill` on the
//! container, judging the end by `docker inspect`.

use std::borrow::Cow;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::container::PrepareError;
use super::daemon::{self, Found};
use super::launch::LaunchError;
use super::process::{ProcessInfo, StopSettings};
use super::render::RenderError;
use super::stop::{follows_pid_file, recorded_stop_settings, stop_settings, stopped};
pub use super::stop::{StopFailed, StopHow, StopMode, StopResult};
use super::sys::{self, Identity, Pinned};
use super::tracked::waited;
use super::{capture, container, launch, refresh, render};
use crate::config::Config;
use crate::library::store::BadLaunchSnapshot;
use crate::services::Services;
use crate::session::Note;
use crate::session::{NoStop, Session, SpecError, StartRefused};
use crate::store::ProcessRecord;
use crate::util::thread::{self, Stack};
use crate::util::{fsutil, time};

/// A started worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    pub pid: u32,
    /// The worker configuration it was started with.
    pub config: String,
}

/// Why a start failed (nothing is left running).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartFailed(pub String);

impl fmt::Display for StartFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The outcome of a start.
pub type StartResult = Result<Started, StartFailed>;

/// Startup snapshot files captured at every supervised launch.
pub const STARTUP_WORKER: &str = "startup-worker.yaml";
pub const STARTUP_LAUNCH: &str = "startup-launch.jsonc";

/// The configuration session `id`'s worker is launched, signalled and
/// addressed with: the hub's own, or, for a session created from the
/// configuration library, the hub's with the session's launch snapshot
/// (`config/launch.jsonc`) applied. Reads the snapshot (no lock held).
pub fn session_config<'a>(
    sv: &'a Services,
    id: &str,
) -> Result<Cow<'a, Config>, BadLaunchSnapshot> {
    let config_dir = sv.session_dir(id).join("config");
    Ok(match crate::library::store::session_launch(&config_dir)? {
        None => Cow::Borrowed(&sv.config),
        Some(doc) => Cow::Owned(doc.apply(&sv.config, &config_dir)),
    })
}

/// Why a reserved start spawned no worker (its message is the start's
/// error, [`StartFailed`]).
#[derive(Debug)]
enum SpawnError {
    CreateDir {
        path: PathBuf,
        err: io::Error,
    },
    LaunchSnapshot(BadLaunchSnapshot),
    /// The spec with the start's overrides is not valid.
    Spec(SpecError),
    /// The start's spec overrides are not a JSON object.
    SpecNotObject,
    Read {
        path: PathBuf,
        err: io::Error,
    },
    /// A library session without its worker snapshot (`config/config.yaml`).
    WorkerSnapshotMissing(PathBuf),
    /// The worker configuration cannot be rendered or refreshed.
    Prepare(RenderError),
    Write {
        path: PathBuf,
        err: io::Error,
    },
    /// The startup launch snapshot cannot be encoded.
    Encode(serde_json::Error),
    /// This executable's path (the worker command may name it).
    SelfExe(io::Error),
    /// The worker command line cannot be built.
    Launch(LaunchError),
    /// A Docker launch's management context cannot be kept.
    Docker(PrepareError),
    Spawn {
        program: String,
        err: io::Error,
    },
    /// No thread for the waiter (the worker was killed again).
    Waiter(io::Error),
}

impl fmt::Display for SpawnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpawnError::CreateDir { path, err } => {
                write!(f, "cannot create {}: {err}", path.display())
            }
            SpawnError::LaunchSnapshot(err) => write!(f, "{err}"),
            SpawnError::Spec(err) => write!(f, "{err}"),
            SpawnError::SpecNotObject => f.write_str("spec must be an object"),
            SpawnError::Read { path, err } => write!(f, "cannot read {}: {err}", path.display()),
            SpawnError::WorkerSnapshotMissing(path) => write!(
                f,
                "the session's worker snapshot {} is missing; apply a configuration pair \
                 to the stopped session again",
                path.display()
            ),
            SpawnError::Prepare(err) => write!(f, "cannot prepare session configuration: {err}"),
            SpawnError::Write { path, err } => {
                write!(f, "cannot write {}: {err}", path.display())
            }
            SpawnError::Encode(err) => write!(f, "{err}"),
            SpawnError::SelfExe(err) => write!(f, "cannot locate this executable: {err}"),
            SpawnError::Launch(err) => write!(f, "{err}"),
            SpawnError::Docker(err) => write!(f, "{err}"),
            SpawnError::Spawn { program, err } => write!(f, "cannot spawn {program}: {err}"),
            SpawnError::Waiter(err) => write!(f, "cannot start the waiter thread: {err}"),
        }
    }
}

impl std::error::Error for SpawnError {}

/// Starts the worker of session `id`. `spec` (optional) overrides launch
/// fields of the session's spec for this and later starts.
pub fn start(sv: &Arc<Services>, id: &str, spec: Option<&Value>) -> StartResult {
    if sv.is_shutting_down() {
        return Err(StartFailed("the hub is shutting down".into()));
    }
    if let Some(reason) = sv.hooks().launch_blocked() {
        return Err(StartFailed(format!(
            "worker launches are blocked until the subagent storage is repaired: {reason}"
        )));
    }
    let lifecycle_id = uuid::Uuid::new_v4().to_string();
    // Reserve the start under the lock: a second start is refused.
    let reserved_at = time::now_rfc3339();
    let reserved = sv.sessions.with(id, |s| {
        s.reserve_start(&lifecycle_id, &reserved_at)?;
        Ok::<_, StartRefused>((s.spec().clone(), s.token().to_string()))
    });
    let (current_spec, token) = match reserved {
        None => return Err(StartFailed(format!("no session {id:?}"))),
        Some(Err(err)) => return Err(StartFailed(err.to_string())),
        Some(Ok(v)) => v,
    };
    // The lifecycle id is durable, so it means the same after a restart
    // (recovery requests name it).
    if let Err(err) = sv.store.lock().set_lifecycle_id(id, &lifecycle_id) {
        log::warn!("session {id}: lifecycle id not stored: {err}");
    }
    match spawn(sv, id, &lifecycle_id, current_spec, spec, &token) {
        Ok(started) => Ok(started),
        Err(error) => {
            let error = error.to_string();
            log::warn!("session {id}: worker start failed: {error}");
            let now = time::now_rfc3339();
            let described = sv.sessions.with(id, |s| {
                s.record_start_failed(&lifecycle_id, &error, &now)
                    .then(|| s.process_view())
            });
            if let Some(Some(process)) = described {
                sv.publisher.notify(Note::Process {
                    session: id.to_string(),
                    process,
                });
            }
            Err(StartFailed(error))
        }
    }
}

fn spawn(
    sv: &Arc<Services>,
    id: &str,
    lifecycle_id: &str,
    current_spec: Value,
    override_spec: Option<&Value>,
    token: &str,
) -> Result<Started, SpawnError> {
    let session_dir = sv.session_dir(id);
    let config_dir = session_dir.join("config");
    if let Err(err) = fsutil::create_private_dir(&config_dir) {
        return Err(SpawnError::CreateDir {
            path: config_dir,
            err,
        });
    }
    let launch_doc =
        crate::library::store::session_launch(&config_dir).map_err(SpawnError::LaunchSnapshot)?;
    let session_config = launch_doc
        .as_ref()
        .map(|doc| doc.apply(&sv.config, &config_dir));
    let library = session_config.is_some();
    let config = session_config.as_ref().unwrap_or(&sv.config);
    let mut spec = match override_spec {
        Some(Value::Object(over)) => {
            let mut merged = current_spec.as_object().cloned().unwrap_or_default();
            for (k, v) in over {
                // The library pair changes only with a new snapshot
                // (`POST /api/sessions/:id/configurations`), never here.
                if k != "launchConfig" && k != "workerConfig" {
                    merged.insert(k.clone(), v.clone());
                }
            }
            sv.normalize_spec(&Value::Object(merged))
                .map_err(SpawnError::Spec)?
        }
        Some(Value::Null) | None => current_spec,
        Some(_) => return Err(SpawnError::SpecNotObject),
    };
    let (addr, tools_addr) = sv.worker_addrs();
    let endpoints = render::session_endpoints(config, addr, tools_addr, id, token);
    let config_path = config_dir.join("config.yaml");
    let existing = match std::fs::read_to_string(&config_path) {
        Ok(existing) => Some(existing),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
        Err(err) => {
            return Err(SpawnError::Read {
                path: config_path,
                err,
            })
        }
    };
    let mock = sv.mock_base_url().map(|base_url| refresh::MockTarget {
        profile: &config.mock.profile,
        base_url,
    });
    // A file the editor refuses is left as it is and the start fails. A
    // library session launches from its snapshot only: its hub-owned
    // fields (placeholders until the first launch) are filled in, and an
    // optional section it leaves out stays out.
    let prepared = match (library, existing.as_deref()) {
        (true, None) => return Err(SpawnError::WorkerSnapshotMissing(config_path)),
        (true, Some(existing)) => {
            refresh::refresh_snapshot(existing, &session_dir, &endpoints, mock)
        }
        (false, existing) => {
            refresh::prepare(config, &spec, existing, &session_dir, &endpoints, mock)
        }
    };
    let refresh::Prepared { text, document } = prepared.map_err(SpawnError::Prepare)?;
    if existing.as_deref() != Some(text.as_str()) {
        if let Err(err) = fsutil::write_private_atomic(&config_path, text.as_bytes()) {
            return Err(SpawnError::Write {
                path: config_path,
                err,
            });
        }
    }
    spec = render::spec_from_document(&spec, &document);
    if let Some(doc) = &launch_doc {
        // A library session's threads are its launch file's.
        spec["threads"] = Value::from(doc.threads);
    }
    sv.persist_spec(id, &spec);
    // This incarnation's startup snapshot: what a clean fork of it starts
    // from, whatever later edits or payload options change.
    let launch_text = serde_json::to_string_pretty(&spec).map_err(SpawnError::Encode)?;
    for (name, bytes) in [
        (STARTUP_WORKER, text.as_bytes()),
        (STARTUP_LAUNCH, launch_text.as_bytes()),
    ] {
        let path = config_dir.join(name);
        if let Err(err) = fsutil::write_private_atomic(&path, bytes) {
            return Err(SpawnError::Write { path, err });
        }
    }

    let self_exe = std::env::current_exe().map_err(SpawnError::SelfExe)?;
    // A library session's environment is its launch file's `env`, never
    // shown in its spec (it may hold secrets).
    let launch_spec = match &launch_doc {
        Some(doc) => {
            let mut launch_spec = spec.clone();
            launch_spec["env"] = Value::Object(
                doc.env
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
                    .collect(),
            );
            launch_spec
        }
        None => spec.clone(),
    };
    let invocation = launch::invocation(&launch::LaunchInput {
        config,
        spec: &launch_spec,
        session: id,
        session_dir: &session_dir,
        config_path: &config_path,
        data_dir: &config.data_dir,
        endpoints: &endpoints,
        token,
        self_exe: &self_exe,
    })
    .map_err(SpawnError::Launch)?;

    let logs_dir = session_dir.join("logs");
    if let Err(err) = fsutil::create_private_dir(&logs_dir) {
        return Err(SpawnError::CreateDir {
            path: logs_dir,
            err,
        });
    }
    let log_path = logs_dir.join("worker.log");
    capture::rotate(&log_path, config.limits.log_bytes, config.limits.log_files);

    // A foreground `docker run` of a named container: its context is kept
    // before the spawn, and the CLI runs as the executable resolved for it.
    let docker = container::prepare(
        docker_handles(sv),
        id,
        lifecycle_id,
        &invocation,
        &config.launcher.docker_management_env,
    )
    .map_err(SpawnError::Docker)?;
    let program: &std::ffi::OsStr = match &docker {
        Some(m) => m.executable.as_os_str(),
        None => invocation.program.as_ref(),
    };
    let mut command = Command::new(program);
    command
        .args(&invocation.args)
        .current_dir(&invocation.cwd)
        .envs(invocation.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut child = {
        let mut waited = waited();
        let child = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                drop(waited);
                container::forget(docker_handles(sv), id, lifecycle_id);
                return Err(SpawnError::Spawn {
                    program: invocation.program.clone(),
                    err: e,
                });
            }
        };
        waited.push(child.id());
        child
    };
    let pid = child.id();
    let start_time = sys::proc_start_time(pid).ok();
    let pinned = start_time
        .and_then(|st| Pinned::open(pid, st).ok())
        .map(Arc::new);
    let started_at = time::now_rfc3339();
    let record = ProcessRecord {
        session_id: id.to_string(),
        pid,
        start_time,
        started_at: started_at.clone(),
        command: invocation.program.clone(),
        args: invocation
            .args
            .iter()
            .map(|a| a.replace(token, "<token>"))
            .collect(),
        cwd: invocation.cwd.display().to_string(),
        log_path: Some(log_path.display().to_string()),
        state: "running".into(),
        lifecycle_id: lifecycle_id.to_string(),
    };
    if let Err(err) = sv.store.lock().put_process(&record) {
        log::warn!("session {id}: process record not stored: {err}");
    }
    // The process record is shown to panels: never show the worker token a
    // `command` template may have placed in the arguments.
    let shown_args: Vec<String> = invocation
        .args
        .iter()
        .map(|a| a.replace(token, "<token>"))
        .collect();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let writer = capture::log_writer(id, &log_path);
    let described = sv.sessions.with(id, |s| {
        let mut info = ProcessInfo::starting(
            invocation.program.clone(),
            shown_args.clone(),
            invocation.cwd.display().to_string(),
            lifecycle_id.to_string(),
        );
        info.pid = Some(pid);
        info.start_time = start_time;
        info.started_at = Some(started_at.clone());
        info.log_path = Some(log_path.display().to_string());
        info.pinned = pinned.clone();
        info.docker = docker.clone();
        info.stop = stop_settings(config, library);
        s.record_started(info);
        let previous = s.reset_logs(writer.clone());
        (s.process_view(), previous)
    });
    let described = described.map(|(process, _previous)| process);
    if let Some(process) = described {
        sv.publisher.notify(Note::Process {
            session: id.to_string(),
            process,
        });
    }
    log::info!("session {id}: worker started (pid {pid})");
    let exited = Arc::new(capture::ExitFlag::default());
    let readers = capture::spawn_readers(
        &sv.sessions,
        id,
        lifecycle_id,
        stdout,
        stderr,
        writer,
        exited.clone(),
    );
    let hub2 = sv.clone();
    let sid = id.to_string();
    let lid = lifecycle_id.to_string();
    let pid_file = invocation.pid_file.clone();
    let waiter = thread::spawn_with("worker-wait", Stack::Small, child, move |mut child| {
        let status = child.wait();
        waited().retain(|&p| p != pid);
        let (code, signal) = match status {
            Ok(status) => {
                use std::os::unix::process::ExitStatusExt;
                (status.code(), status.signal())
            }
            Err(_) => (None, None),
        };
        // A clean exit of a launcher that declares a pid file: the worker
        // is the daemon it left behind, if any.
        let followed = match (&pid_file, start_time) {
            (Some(file), Some(launcher_start)) if code == Some(0) => follow_daemon(
                &hub2,
                &sid,
                &lid,
                Launched {
                    pid_file: file,
                    pid,
                    start_time: launcher_start,
                    wait: daemon::PID_FILE_WAIT,
                },
                &record,
            ),
            _ => None,
        };
        // The daemon may have held the pipes until now.
        exited.set();
        let (code, signal) = followed.unwrap_or((code, signal));
        // A Docker launch ends with its container, not its CLI.
        let (code, signal) = match &docker {
            Some(m) => container::follow(docker_handles(&hub2), &sid, &lid, m, code, signal),
            None => (code, signal),
        };
        process_ended(&hub2, &sid, &lid, code, signal);
        for reader in readers {
            let _ = reader.join();
        }
        reap_orphans();
        hub2.hooks().process_gone(&sid);
    });
    if let Err((err, mut child)) = waiter {
        // Without a waiter nobody would notice its end: the worker this
        // start launched is killed and reaped here, and the start fails.
        let _ = child.kill();
        let _ = child.wait();
        waited().retain(|&p| p != pid);
        let _ = sv.store.lock().clear_process(id);
        container::forget(docker_handles(sv), id, lifecycle_id);
        return Err(SpawnError::Waiter(err));
    }
    Ok(Started {
        pid,
        config: config_path.display().to_string(),
    })
}

/// A launcher that ended, and where it was to leave its daemon's pid.
struct Launched<'a> {
    pid_file: &'a Path,
    pid: u32,
    start_time: u64,
    /// How long the pid file may take to name the worker.
    wait: Duration,
}

/// After `launcher` (of session `id`'s start `lifecycle_id`) ended: finds
/// the worker it daemonized through its pid file, makes it the session's
/// process (`record`, the store's copy, is updated too) and waits for its
/// end. Returns that end's exit status (`(None, None)` when the worker was
/// not our child, so no status is known), or `None` when there is no
/// daemon to follow.
fn follow_daemon(
    sv: &Services,
    id: &str,
    lifecycle_id: &str,
    launcher: Launched<'_>,
    record: &ProcessRecord,
) -> Option<(Option<i32>, Option<i32>)> {
    let found = daemon::find(
        launcher.pid_file,
        launcher.pid,
        launcher.start_time,
        launcher.wait,
    );
    let pinned = match found {
        Found::Worker(pinned) => Arc::new(pinned),
        Found::Launcher => return None,
        Found::Nothing => {
            log::warn!(
                "session {id}: the launcher exited, but {} names no live worker started \
                 after it; the worker is taken as ended",
                launcher.pid_file.display()
            );
            return None;
        }
    };
    let worker = pinned.pid();
    // Its exit status is ours to collect, not the orphan reaper's.
    waited().push(worker);
    let described = sv.sessions.with(id, |s| {
        s.record_daemonized(lifecycle_id, pinned.clone())
            .then(|| s.process_view())
    });
    let Some(Some(process)) = described else {
        waited().retain(|&p| p != worker);
        return None;
    };
    let mut daemonized = record.clone();
    daemonized.pid = worker;
    daemonized.start_time = Some(pinned.start_time());
    if let Err(err) = sv.store.lock().put_process(&daemonized) {
        log::warn!("session {id}: process record not stored: {err}");
    }
    log::info!(
        "session {id}: the launcher (pid {}) daemonized; following the worker pid {worker} \
         named by {}",
        launcher.pid,
        launcher.pid_file.display()
    );
    sv.publisher.notify(Note::Process {
        session: id.to_string(),
        process,
    });
    while !pinned.wait_exit(Duration::from_secs(3600)) {}
    let status = sys::reap_child(worker);
    waited().retain(|&p| p != worker);
    Some(status.unwrap_or((None, None)))
}

/// Records the end of a worker process (spawned or adopted).
fn process_ended(
    sv: &Services,
    id: &str,
    lifecycle_id: &str,
    code: Option<i32>,
    signal: Option<i32>,
) {
    let now = time::now_rfc3339();
    let described = sv.sessions.with(id, |s| {
        let state = s.record_ended(lifecycle_id, code, signal, &now)?;
        Some((s.process_view(), state))
    });
    if let Some(Some((process, state))) = described {
        log::info!(
            "session {id}: worker {} (code {code:?}, signal {signal:?})",
            state.as_str()
        );
        let _ = sv.store.lock().set_process_state(id, state.as_str());
        sv.publisher.notify(Note::Process {
            session: id.to_string(),
            process,
        });
    }
}

/// Starts a stop of session `id`'s worker; `done` gets the result on the
/// ladder thread (or at once when there is nothing to stop).
pub fn stop(
    sv: &Arc<Services>,
    id: &str,
    mode: StopMode,
    done: Box<dyn FnOnce(StopResult) + Send>,
) {
    let begun = sv.sessions.with(id, |s| match s.begin_stop() {
        Ok(begun) => {
            let lifecycle = s.process().map(|p| p.lifecycle_id.clone());
            // A Docker launch is stopped by its container (its CLI may be
            // gone); anything else through the pinned process.
            let first = match (s.process().and_then(|p| p.docker.clone()), begun.pinned) {
                (Some(m), cli) => First::Container(m, cli),
                (None, Some(pinned)) => First::Process(Target { pinned }),
                (None, None) => {
                    // (begin_stop refuses such a record; never signal blind.)
                    s.abandon_stop();
                    return Err(Err(StopFailed {
                        how: StopHow::NotStarted,
                        forced: false,
                        reason: "the worker has no verified process identity".into(),
                    }));
                }
            };
            Ok((
                lifecycle.unwrap_or_default(),
                first,
                begun.connected,
                s.process_view(),
            ))
        }
        Err(NoStop::NotStarted) => Err(stopped(StopHow::NotStarted, false)),
        Err(NoStop::AlreadyExited) => Err(stopped(StopHow::AlreadyExited, false)),
        Err(NoStop::Unpinned) => Err(Err(StopFailed {
            how: StopHow::NotStarted,
            forced: false,
            reason: "the worker has no verified process identity".into(),
        })),
    });
    let (lifecycle, first, connected, described) = match begun {
        None => {
            return done(Err(StopFailed {
                how: StopHow::NotStarted,
                forced: false,
                reason: format!("no session {id:?}"),
            }))
        }
        Some(Err(result)) => return done(result),
        Some(Ok(v)) => v,
    };
    sv.hooks().stopping(id);
    sv.publisher.notify(Note::Process {
        session: id.to_string(),
        process: described,
    });
    let input = (sv.clone(), id.to_string(), done);
    // Large: a restart's start runs here once the stop is done (launch
    // file validation, the worker configuration, SQLite).
    let spawned = thread::spawn_with("worker-stop", Stack::Large, input, move |(sv, id, done)| {
        let result = match first {
            First::Container(m, cli) => container::ladder(
                docker_handles(&sv),
                &id,
                &lifecycle,
                &m,
                cli,
                connected,
                mode,
            ),
            First::Process(first) => {
                // A library session stops with its launch file's
                // timings.
                let settings = recorded_stop_settings(&sv.sessions, &sv.config, &id);
                let watch = Watch {
                    sv: &sv,
                    id: &id,
                    lifecycle: &lifecycle,
                    follows: settings.follows_pid_file,
                    first,
                };
                ladder(&watch, connected, mode, &settings)
            }
        };
        if let Err(failed) = &result {
            log::warn!(
                "session {id}: stop did not end the worker ({})",
                failed.how.as_str()
            );
        }
        done(result);
    });
    if let Err((err, (sv, id, done))) = spawned {
        // Nothing was signalled: the worker runs on as before.
        log::error!("session {id}: cannot start a stop thread: {err}");
        let described = sv
            .sessions
            .with(&id, |s| s.abandon_stop().then(|| s.process_view()));
        if let Some(Some(process)) = described {
            sv.publisher.notify(Note::Process {
                session: id.clone(),
                process,
            });
        }
        done(Err(StopFailed {
            how: StopHow::NotStarted,
            forced: false,
            reason: format!("the hub could not start the stop: {err}"),
        }));
    }
}

/// How long a stop waits for the waiter's verdict on a launcher that
/// exited while its pid file is read (a bit longer than the reading).
const HANDOVER_SETTLE: Duration = Duration::from_secs(6);

/// The process a stop acts on: whatever the session's record of the
/// stopped start pins at the moment, which changes once when a launcher
/// hands over to its daemon (`follows`).
struct Watch<'a> {
    sv: &'a Services,
    id: &'a str,
    lifecycle: &'a str,
    follows: bool,
    /// What the record pinned when the stop began: the group kill still
    /// reaches its leftover group members when the record ended meanwhile.
    first: Target,
}

/// One pinned process of the record.
struct Target {
    pinned: Arc<Pinned>,
}

/// What a stop acts on, as it began.
enum First {
    /// A Docker launch: its management context and the CLI's pin, if the
    /// CLI is still pinned.
    Container(Arc<super::docker::Management>, Option<Arc<Pinned>>),
    /// Any other worker: its pinned process.
    Process(Target),
}

impl Watch<'_> {
    /// The record's pinned process while the record is this start's and
    /// active; `None` once it has ended.
    fn lookup(&self) -> Option<Target> {
        self.sv
            .sessions
            .with(self.id, |s| {
                s.process()
                    .filter(|p| p.lifecycle_id == self.lifecycle && p.state.is_active())
                    .and_then(|p| p.pinned.clone())
                    .map(|pinned| Target { pinned })
            })
            .flatten()
    }

    /// Like [`Watch::lookup`], but when the pinned process is a launcher
    /// that has exited while the waiter reads its pid file, first waits
    /// (bounded) for the waiter to hand over or to end the record.
    fn settled(&self) -> Option<Target> {
        let deadline = Instant::now() + HANDOVER_SETTLE;
        loop {
            let target = self.lookup()?;
            if !self.follows || target.pinned.is_alive() || Instant::now() >= deadline {
                return Some(target);
            }
            #[expect(
                clippy::disallowed_methods,
                reason = "the waiter thread's hand-over is seen only in the session record, \
                          which has no change signal: looked at every 10 ms, at most \
                          HANDOVER_SETTLE"
            )]
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits up to `timeout` until the worker is gone: its process exited
    /// and, when following a pid file, no daemon took over. `true` if gone.
    fn gone_within(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let Some(target) = self.lookup() else {
                return true;
            };
            let remaining = deadline.saturating_duration_since(Instant::now());
            if target.pinned.is_alive() {
                if !target.pinned.wait_exit(remaining) {
                    return false;
                }
                if !self.follows {
                    return true;
                }
            } else if !self.follows {
                return true;
            } else if remaining.is_zero() {
                // A launcher gone, its pid file still being read.
                return false;
            } else {
                #[expect(
                    clippy::disallowed_methods,
                    reason = "the launcher has exited and the waiter thread reads its pid \
                              file; its verdict is seen only in the session record, which \
                              has no change signal: looked at every 10 ms until the grace ends"
                )]
                std::thread::sleep(remaining.min(Duration::from_millis(10)));
            }
        }
    }
}

/// The stop ladder. Runs on its own thread; waits on the pidfd of the
/// process the record pins (see [`Watch`]).
fn ladder(watch: &Watch<'_>, connected: bool, mode: StopMode, w: &StopSettings) -> StopResult {
    let sv = watch.sv;
    let id = watch.id;
    let group_kill = mode == StopMode::ForceKill || sv.config.force_kill_process_group;
    if mode == StopMode::Graceful {
        if connected
            && sv.sessions.send_signal(id, "shutdown", None).is_ok()
            && watch.gone_within(Duration::from_millis(w.stop_timeout_ms))
        {
            return stopped(StopHow::ShutdownSignal, false);
        }
        let Some(target) = watch.settled().filter(|t| t.pinned.is_alive()) else {
            return stopped(StopHow::ShutdownSignal, false);
        };
        let _ = target.pinned.signal(libc::SIGTERM);
        if watch.gone_within(Duration::from_millis(w.sigterm_grace_ms)) {
            return stopped(StopHow::Sigterm, true);
        }
    }
    let settled = watch.settled();
    let target = settled.as_ref().unwrap_or(&watch.first);
    let how = if group_kill {
        sv.sessions.with(id, Session::note_group_killed);
        let _ = target.pinned.signal_own_group(libc::SIGKILL);
        StopHow::SigkillProcessGroup
    } else {
        let _ = target.pinned.signal(libc::SIGKILL);
        StopHow::Sigkill
    };
    if watch.gone_within(Duration::from_millis(w.sigkill_grace_ms)) {
        stopped(how, true)
    } else {
        Err(StopFailed {
            how,
            forced: true,
            reason: "the worker is still alive after SIGKILL".into(),
        })
    }
}

/// Waits (briefly) until the waiter thread has recorded the exit that a
/// successful stop observed through the pidfd.
pub fn wait_recorded_exit(sv: &Services, id: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while sv
        .sessions
        .with(id, |s| s.process().is_some_and(|p| p.state.is_active()))
        .unwrap_or(false)
        && std::time::Instant::now() < deadline
    {
        #[expect(
            clippy::disallowed_methods,
            reason = "the waiter thread records the exit in the session record, which has \
                      no change signal: looked at every 10 ms, at most 2 s"
        )]
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// After a hub restart: adopts every recorded worker whose pid and start
/// time still match (pinned through a pidfd), and every recorded Docker
/// launch whose container may still run (its kept context is read back;
/// its CLI may be gone); forgets the others.
pub fn adopt(sv: &Arc<Services>, records: Vec<ProcessRecord>) {
    let mut containers = Vec::new();
    for rec in records {
        let id = rec.session_id.clone();
        let pinned = match rec.start_time {
            Some(st) => match sys::check_identity(rec.pid, st) {
                Identity::Same => Pinned::open(rec.pid, st).ok(),
                Identity::Gone | Identity::Unknown => None,
            },
            None => None,
        }
        .map(Arc::new);
        let docker = container::load(docker_handles(sv), &rec);
        // A Docker CLI that already exited (a zombie nobody reaped yet) is
        // no part of it: only its container may be left.
        let pinned = pinned.filter(|p| docker.is_none() || p.is_alive());
        let alive = match (&pinned, &docker) {
            (Some(_), _) => true,
            (None, Some(m)) => container::may_still_run(&rec, m),
            (None, None) => false,
        };
        if !alive {
            log::info!(
                "session {id}: recorded worker pid {} is gone; not adopted",
                rec.pid
            );
            let _ = sv.store.lock().clear_process(&id);
            continue;
        }
        let lifecycle_id = rec.lifecycle_id.clone();
        // A library session keeps its launch file's stop settings and
        // pid-file rule (read before the lock).
        let (settings, library) = match session_config(sv, &id) {
            Ok(config) => {
                let library = matches!(config, Cow::Owned(_));
                (config, library)
            }
            Err(err) => {
                log::warn!("session {id}: {err}; adopted with the hub-wide settings");
                (Cow::Borrowed(&sv.config), false)
            }
        };
        let stop = stop_settings(&settings, library);
        let adopted = sv.sessions.with(&id, |s| {
            let mut info = ProcessInfo::starting(
                rec.command.clone(),
                rec.args.clone(),
                rec.cwd.clone(),
                lifecycle_id.clone(),
            );
            info.pid = Some(rec.pid);
            info.start_time = rec.start_time;
            info.started_at = Some(rec.started_at.clone());
            info.log_path = rec.log_path.clone();
            info.pinned = pinned.clone();
            info.docker = docker.clone();
            info.stop = stop;
            s.record_adopted(info);
        });
        if adopted.is_none() {
            continue;
        }
        match (&pinned, &docker) {
            (Some(_), None) => log::info!("session {id}: adopted running worker pid {}", rec.pid),
            (Some(_), Some(m)) => log::info!(
                "session {id}: adopted running worker pid {} (the docker CLI of container {})",
                rec.pid,
                m.target.name
            ),
            (None, _) => log::info!(
                "session {id}: adopted container {} (its docker CLI, pid {}, is gone)",
                docker.as_ref().map_or("", |m| m.target.name.as_str()),
                rec.pid
            ),
        }
        if docker.is_some() {
            containers.push(id.clone());
        }
        // Had the launcher not daemonized yet, its pid file is read once
        // when it exits (it has had every chance to write it by then).
        let pid_file = if follows_pid_file(&settings) && docker.is_none() {
            let session_dir = sv.session_dir(&id);
            launch::pid_file(&settings, &id, &session_dir, &sv.config.data_dir).unwrap_or_else(
                |err| {
                    log::warn!("session {id}: the pid file is not followed: {err}");
                    None
                },
            )
        } else {
            None
        };
        let hub2 = sv.clone();
        let watched = thread::spawn("worker-watch", Stack::Small, move || {
            let mut followed = None;
            if let Some(pinned) = &pinned {
                while !pinned.wait_exit(Duration::from_secs(3600)) {}
                followed = pid_file.as_deref().and_then(|file| {
                    let launched = Launched {
                        pid_file: file,
                        pid: pinned.pid(),
                        start_time: pinned.start_time(),
                        wait: Duration::ZERO,
                    };
                    follow_daemon(&hub2, &id, &lifecycle_id, launched, &rec)
                });
            }
            // Not our child: no exit status is available.
            let (code, signal) = followed.unwrap_or((None, None));
            let (code, signal) = match &docker {
                Some(m) => {
                    container::follow(docker_handles(&hub2), &id, &lifecycle_id, m, code, signal)
                }
                None => (code, signal),
            };
            process_ended(&hub2, &id, &lifecycle_id, code, signal);
            hub2.hooks().process_gone(&id);
        });
        if let Err(err) = watched {
            // The worker runs on and stays stoppable through its pidfd (or
            // its container); only its own exit would go unnoticed.
            log::error!("cannot watch an adopted worker: {err}");
        }
    }
    // Contexts of launches that were not adopted are of no use any more.
    container::sweep(docker_handles(sv), &containers);
}

/// Stops every running worker (protocol first) and waits for all ladders.
pub fn stop_all(sv: &Arc<Services>) {
    let ids: Vec<String> = sv.active_worker_sessions();
    let (tx, rx) = crossbeam_channel::unbounded();
    for id in &ids {
        let tx = tx.clone();
        let sid = id.clone();
        stop(
            sv,
            id,
            StopMode::Graceful,
            Box::new(move |r| {
                let _ = tx.send((sid, r));
            }),
        );
    }
    drop(tx);
    for (id, result) in rx.iter() {
        let how = match &result {
            Ok(stopped) => stopped.how,
            Err(failed) => failed.how,
        };
        log::info!(
            "session {id}: worker stopped at shutdown ({})",
            how.as_str()
        );
    }
}

/// Reaps exited orphans (daemonized grandchildren reparented to the hub as
/// subreaper) while leaving our own workers to their waiter threads.
pub fn reap_orphans() {
    let children = sys::list_children();
    let reaped = {
        let keep = waited();
        sys::reap_exited(&children, &keep)
    };
    if !reaped.is_empty() {
        log::debug!("reaped orphaned processes {reaped:?}");
    }
}

/// The handles a Docker launch's management takes.
fn docker_handles(sv: &Services) -> container::Handles<'_> {
    container::Handles {
        sessions: &sv.sessions,
        config: &sv.config,
    }
}
