//! The process record of one session's worker: its state machine and the
//! `process` object of the session description. Pure data, held in the
//! session under the registry lock.

use std::sync::Arc;

use super::docker::Management;
use super::sys::Pinned;

/// Where a worker process is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcState {
    Starting,
    Running,
    Stopping,
    Exited,
    Failed,
}

impl ProcState {
    pub fn as_str(self) -> &'static str {
        match self {
            ProcState::Starting => "starting",
            ProcState::Running => "running",
            ProcState::Stopping => "stopping",
            ProcState::Exited => "exited",
            ProcState::Failed => "failed",
        }
    }

    /// Starting, running or stopping: a second start is refused.
    pub fn is_active(self) -> bool {
        matches!(
            self,
            ProcState::Starting | ProcState::Running | ProcState::Stopping
        )
    }
}

/// How a start's worker is stopped, when not with the hub-wide settings:
/// a configuration-library session's launch file's timings and pid-file
/// rule, fixed when the worker started (or was adopted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopSettings {
    pub stop_timeout_ms: u64,
    pub sigterm_grace_ms: u64,
    pub sigkill_grace_ms: u64,
    /// A daemonizing launcher's pid file is followed.
    pub follows_pid_file: bool,
}

/// Everything the hub knows about one worker process.
#[derive(Debug, Clone)]
pub struct ProcessInfo {
    pub state: ProcState,
    pub pid: Option<u32>,
    pub start_time: Option<u64>,
    pub started_at: Option<String>,
    pub exited_at: Option<String>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub error: Option<String>,
    pub stop_requested: bool,
    pub command: String,
    pub args: Vec<String>,
    pub cwd: String,
    pub process_group_killed: bool,
    pub log_path: Option<String>,
    /// Adopted from an earlier hub run: no pipes, no exit status.
    pub adopted: bool,
    /// The pinned incarnation; signals go only through it. For a Docker
    /// launch this is the `docker` CLI, and it is dropped when the CLI
    /// exits while its container runs on.
    pub pinned: Option<Arc<Pinned>>,
    /// A foreground `docker run` of a named container: the container is
    /// the worker, stopped with `docker kill` and judged by `docker
    /// inspect` through this context (`supervisor::container`).
    pub docker: Option<Arc<Management>>,
    /// The container's id, once `docker inspect` reported it; later
    /// commands name the container by it, so a container that took the
    /// name afterwards is never mistaken for this one.
    pub container_id: Option<String>,
    /// Lifecycle id of the start that created this record.
    pub lifecycle_id: String,
    /// The stop settings of a library session; `None`: the hub-wide ones.
    pub stop: Option<StopSettings>,
}

impl ProcessInfo {
    /// A record for a start in progress.
    pub fn starting(command: String, args: Vec<String>, cwd: String, lifecycle_id: String) -> Self {
        ProcessInfo {
            state: ProcState::Starting,
            pid: None,
            start_time: None,
            started_at: None,
            exited_at: None,
            exit_code: None,
            signal: None,
            error: None,
            stop_requested: false,
            command,
            args,
            cwd,
            process_group_killed: false,
            log_path: None,
            adopted: false,
            pinned: None,
            docker: None,
            container_id: None,
            lifecycle_id,
            stop: None,
        }
    }

    /// Records the end of the process. A non-zero exit or a signal that was
    /// not requested is `failed`; everything else is `exited`.
    pub fn ended(&mut self, code: Option<i32>, signal: Option<i32>, now: String) {
        self.exit_code = code;
        self.signal = signal;
        self.exited_at = Some(now);
        // Nothing may be signalled any more: close the pidfd now rather
        // than when the session is deleted (a stop ladder still running
        // keeps its own reference until it returns).
        self.pinned = None;
        let clean = code == Some(0) || (code.is_none() && signal.is_none());
        self.state = if clean || self.stop_requested {
            ProcState::Exited
        } else {
            ProcState::Failed
        };
        if self.state == ProcState::Failed && self.error.is_none() {
            self.error = Some(match (code, signal) {
                (Some(code), _) => format!("exited with status {code}"),
                (None, Some(sig)) => format!("killed by {}", signal_name(sig)),
                _ => "exited".to_string(),
            });
        }
    }

    /// What clients are shown of the record, with the log counters the
    /// capture side keeps.
    pub fn view(&self, logs: LogCounters) -> ProcessView {
        ProcessView {
            record: self.clone(),
            logs,
            redacted: false,
        }
    }
}

/// A worker process as clients are shown it: a snapshot of its record
/// and log counters, taken under the registry lock and rendered by
/// whoever publishes it.
#[derive(Debug, Clone)]
pub struct ProcessView {
    record: ProcessInfo,
    logs: LogCounters,
    /// A headless child's launch details are private to the hub.
    redacted: bool,
}

impl ProcessView {
    /// A headless child's launch details (its command, arguments,
    /// directory and log path) are shown empty.
    pub fn redacted(mut self) -> ProcessView {
        self.redacted = true;
        self
    }

    /// The process record it shows.
    pub fn info(&self) -> &ProcessInfo {
        &self.record
    }

    /// The log counters at the moment it was taken.
    pub fn logs(&self) -> &LogCounters {
        &self.logs
    }

    /// Whether its launch details are to be shown empty.
    pub fn is_redacted(&self) -> bool {
        self.redacted
    }
}

/// The name of Linux signal `number` as Node reports a child's end
/// (`SIGTERM`, `SIGKILL`, ...); real-time signals are `SIGRTMIN+n`, and a
/// number no name is known for `SIG<number>`.
pub fn signal_name(number: i32) -> String {
    const NAMES: [&str; 31] = [
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    match number {
        1..=31 => NAMES[number as usize - 1].to_string(),
        34..=64 => format!("SIGRTMIN+{}", number - 34),
        _ => format!("SIG{number}"),
    }
}

/// Log statistics shown with the process.
#[derive(Debug, Clone, Default)]
pub struct LogCounters {
    pub lines: usize,
    pub dropped: u64,
    pub truncated_bytes: u64,
    pub file_dropped: u64,
    pub file_failed: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_classification() {
        let mut p = ProcessInfo::starting("w".into(), vec![], "/".into(), "l".into());
        p.ended(Some(0), None, "t".into());
        assert_eq!(p.state, ProcState::Exited);
        let mut p = ProcessInfo::starting("w".into(), vec![], "/".into(), "l".into());
        p.ended(Some(3), None, "t".into());
        assert_eq!(p.state, ProcState::Failed);
        assert!(p.error.as_deref().unwrap().contains('3'));
        let mut p = ProcessInfo::starting("w".into(), vec![], "/".into(), "l".into());
        p.stop_requested = true;
        p.ended(None, Some(15), "t".into());
        assert_eq!(p.state, ProcState::Exited);
        let mut p = ProcessInfo::starting("w".into(), vec![], "/".into(), "l".into());
        p.ended(None, Some(9), "t".into());
        assert_eq!(p.state, ProcState::Failed);
    }

    #[test]
    fn the_pin_is_released_at_exit() {
        let pid = std::process::id();
        let start = super::super::sys::proc_start_time(pid).unwrap();
        let Ok(pinned) = Pinned::open(pid, start) else {
            eprintln!("skipped: no pidfd support here");
            return;
        };
        let pinned = Arc::new(pinned);
        let mut p = ProcessInfo::starting("w".into(), vec![], "/".into(), "l".into());
        p.pinned = Some(pinned.clone());
        p.ended(Some(0), None, "t".into());
        assert!(p.pinned.is_none());
        assert_eq!(Arc::strong_count(&pinned), 1);
    }

    #[test]
    fn signals_are_named_as_node_names_them() {
        assert_eq!(signal_name(libc::SIGTERM), "SIGTERM");
        assert_eq!(signal_name(libc::SIGKILL), "SIGKILL");
        assert_eq!(signal_name(libc::SIGHUP), "SIGHUP");
        assert_eq!(signal_name(libc::SIGSYS), "SIGSYS");
        assert_eq!(signal_name(libc::SIGSEGV), "SIGSEGV");
        assert_eq!(signal_name(34), "SIGRTMIN+0");
        assert_eq!(signal_name(0), "SIG0");
        let mut p = ProcessInfo::starting("w".into(), vec![], "/".into(), "l".into());
        p.ended(None, Some(libc::SIGKILL), "t".into());
        assert_eq!(p.signal, Some(libc::SIGKILL));
        assert_eq!(p.error.as_deref(), Some("killed by SIGKILL"));
    }
}
