//! Processes: signals, exits, liveness, and `/proc` readings of threads
//! and memory (of a hub child or of the test process itself).

use std::process::{Child, ExitStatus};
use std::time::Duration;

use super::poll_until;

pub const KIB: u64 = 1;
pub const MIB: u64 = 1024 * KIB;

/// What glibc may keep beyond the live data after a flood: it keeps
/// per-thread arenas and does not hand every freed page back, so RSS after
/// a flood sits above the live data even when nothing leaks. An unbounded
/// structure overshoots a ceiling derived from the limits by far more.
pub const ALLOCATOR_SLACK_KIB: u64 = 32 * MIB;

pub fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) with a pid we spawned; no memory is involved.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

pub fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    poll_until(timeout, || child.try_wait().ok().flatten())
}

/// A child process (a hand-started worker) killed and reaped on drop.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether `pid` is a live (not zombie) process.
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .next();
            state != Some("Z")
        }
        Err(_) => false,
    }
}

/// A `/proc/<pid>/status` field: KiB for sizes, a plain count otherwise.
pub fn proc_status_field(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Names of the threads of `pid` (`comm`), sorted.
pub fn thread_names_of(pid: u32) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .map(|name| name.trim_end().to_string())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// `/proc/<pid>/stat` field 22, the start time in clock ticks since boot,
/// as decimal text (how the Node hub records `pid_start_time`).
pub fn proc_start_time(pid: u32) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 1..];
    after_name.split_whitespace().nth(19).unwrap().to_string()
}

/// Sends SIGKILL to every process whose working directory is `dir` or
/// under it (workers a test's hubs started there and no hub knows of any
/// more); returns how many. Only the test's own temporary directories are
/// passed here.
pub fn kill_processes_under(dir: &std::path::Path) -> usize {
    let mut killed = 0;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cwd) = std::fs::read_link(entry.path().join("cwd")) else {
            continue;
        };
        // A removed directory reads as "<path> (deleted)".
        let cwd = cwd
            .to_string_lossy()
            .trim_end_matches(" (deleted)")
            .to_string();
        if std::path::Path::new(&cwd).starts_with(dir) && pid_alive(pid) {
            signal(pid, libc::SIGKILL);
            killed += 1;
        }
    }
    killed
}
