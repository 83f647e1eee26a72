//! What a stop is asked to do, with which timings, and how it ended: the
//! stop ladder's settings and result types, shared by the ladder
//! (`control`) and the Docker variant of it (`container`).

use super::process::StopSettings;
use crate::config::Config;
use crate::session::Sessions;

/// How a stop is carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMode {
    /// Protocol shutdown, then SIGTERM, then SIGKILL.
    Graceful,
    /// SIGKILL to the whole process group at once.
    ForceKill,
}

/// How a stop ended, or where it gave up (`how` on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopHow {
    /// No worker was ever started for the session.
    NotStarted,
    /// The worker had already ended.
    AlreadyExited,
    /// The worker obeyed the protocol `shutdown` signal.
    ShutdownSignal,
    Sigterm,
    Sigkill,
    SigkillProcessGroup,
}

impl StopHow {
    pub fn as_str(self) -> &'static str {
        match self {
            StopHow::NotStarted => "not-started",
            StopHow::AlreadyExited => "already-exited",
            StopHow::ShutdownSignal => "shutdown-signal",
            StopHow::Sigterm => "sigterm",
            StopHow::Sigkill => "sigkill",
            StopHow::SigkillProcessGroup => "sigkill-process-group",
        }
    }

    /// Whether no worker process was running when the stop began.
    pub fn found_nothing(self) -> bool {
        matches!(self, StopHow::NotStarted | StopHow::AlreadyExited)
    }
}

/// A stop that ended the worker (or found none to end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    pub how: StopHow,
    /// A signal, not the protocol, ended it.
    pub forced: bool,
}

/// A stop that could not confirm the worker's end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopFailed {
    pub how: StopHow,
    pub forced: bool,
    pub reason: String,
}

/// The outcome of a stop.
pub type StopResult = Result<Stopped, StopFailed>;

pub(super) fn stopped(how: StopHow, forced: bool) -> StopResult {
    Ok(Stopped { how, forced })
}

/// The stop settings a start under `config` records: `None` when they are
/// the hub-wide ones (`library` false).
pub(super) fn stop_settings(config: &Config, library: bool) -> Option<StopSettings> {
    library.then(|| settings_of(config))
}

fn settings_of(config: &Config) -> StopSettings {
    StopSettings {
        stop_timeout_ms: config.worker.stop_timeout_ms,
        sigterm_grace_ms: config.worker.sigterm_grace_ms,
        sigkill_grace_ms: config.worker.sigkill_grace_ms,
        follows_pid_file: follows_pid_file(config),
    }
}

/// The stop settings a stop of session `id`'s current worker uses: its
/// record's, else the hub-wide ones.
pub(super) fn recorded_stop_settings(
    sessions: &Sessions,
    config: &Config,
    id: &str,
) -> StopSettings {
    sessions
        .with(id, |s| s.process().and_then(|p| p.stop))
        .flatten()
        .unwrap_or_else(|| settings_of(config))
}

/// Whether workers may hand over to a daemon named by `launcher.pidFile`.
pub(super) fn follows_pid_file(config: &Config) -> bool {
    let launcher = &config.launcher;
    !launcher.pid_file.is_empty() && launcher.kind != crate::config::LauncherKind::BuiltIn
}
