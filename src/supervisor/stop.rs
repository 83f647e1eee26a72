//! What a stop is asked to do and how it ended: the stop ladder's result
//! types, shared by the ladder (`control`) and the Docker variant of it
//! (`container`).

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
