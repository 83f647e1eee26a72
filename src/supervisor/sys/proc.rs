//! What `/proc` says about a process: its start time (the identity a pid
//! is pinned by), its parent and process group (`/proc/<pid>/stat`), and
//! this process's children.

#![forbid(unsafe_code)]

use std::fs;
use std::io;
use std::path::Path;

/// Field 22 (`starttime`, clock ticks since boot) of a `/proc/<pid>/stat`
/// line. The comm field (2) may contain spaces and parentheses, so the
/// fields are counted after the last `)`. `None` for anything malformed.
#[cfg(test)]
pub fn parse_stat_start_time(stat: &str) -> Option<u64> {
    parse_stat(stat.as_bytes()).map(|s| s.start_time)
}

/// The start time of process `pid` from `/proc/<pid>/stat`.
/// `ErrorKind::NotFound` when no such process exists (it was reaped);
/// `ErrorKind::InvalidData` if the file cannot be parsed.
pub fn proc_start_time(pid: u32) -> io::Result<u64> {
    read_stat(pid).map(|s| s.start_time)
}

/// What [`check_identity`] can tell about a recorded process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// The pid exists and has the recorded start time (a zombie that has not
    /// been reaped yet still counts).
    Same,
    /// No such process, or the pid now belongs to a different process.
    Gone,
    /// `/proc` could not be read for another reason; nothing can be said.
    Unknown,
}

/// Whether process `pid` is still the incarnation that started at `start`.
/// A point-in-time answer: to act on it, use [`Pinned::open`](super::Pinned::open).
pub fn check_identity(pid: u32, start: u64) -> Identity {
    if pid == 0 {
        return Identity::Gone;
    }
    match proc_start_time(pid) {
        Ok(found) if found == start => Identity::Same,
        Ok(_) => Identity::Gone,
        Err(err) if err.kind() == io::ErrorKind::NotFound => Identity::Gone,
        Err(_) => Identity::Unknown,
    }
}

/// The fields of `/proc/<pid>/stat` this module uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stat {
    /// Field 3: R, S, D, Z, T, ...
    pub(super) state: u8,
    /// Field 4: the parent's process id.
    pub(super) ppid: u32,
    /// Field 5: the process group id.
    pub(super) pgrp: u32,
    /// Field 22: start time in clock ticks since boot.
    pub(super) start_time: u64,
}

/// Parses a stat line as bytes (comm need not be UTF-8).
pub(super) fn parse_stat(line: &[u8]) -> Option<Stat> {
    let open = line.iter().position(|&b| b == b'(')?;
    let close = line.iter().rposition(|&b| b == b')')?;
    if close < open {
        return None;
    }
    let pid = std::str::from_utf8(&line[..open]).ok()?.trim();
    pid.parse::<u32>().ok()?;
    let rest = std::str::from_utf8(&line[close + 1..]).ok()?;
    // Fields from 3 on; field n is at index n - 3.
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?;
    let [state] = state.as_bytes() else {
        return None;
    };
    let ppid = fields.next()?.parse::<u32>().ok()?;
    let pgrp = fields.next()?.parse::<u32>().ok()?;
    let start_time = fields.nth(22 - 6)?.parse::<u64>().ok()?;
    Some(Stat {
        state: *state,
        ppid,
        pgrp,
        start_time,
    })
}

/// Reads and parses `/proc/<pid>/stat`. NotFound when the process is gone.
pub(super) fn read_stat(pid: u32) -> io::Result<Stat> {
    if pid == 0 {
        return Err(io::Error::new(io::ErrorKind::NotFound, "pid 0"));
    }
    let bytes = match fs::read(format!("/proc/{pid}/stat")) {
        Ok(bytes) => bytes,
        // A process that exits between open and read may answer ESRCH.
        Err(err) if err.raw_os_error() == Some(libc::ESRCH) => {
            return Err(io::Error::new(io::ErrorKind::NotFound, err));
        }
        Err(err) => return Err(err),
    };
    parse_stat(&bytes).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("/proc/{pid}/stat cannot be parsed"),
        )
    })
}

/// This process's children (any thread's), zombies included.
pub fn list_children() -> Vec<u32> {
    let me = std::process::id();
    let probe = format!("/proc/self/task/{me}/children");
    if Path::new(&probe).exists() {
        children_from_task_files()
    } else {
        children_by_scan(me)
    }
}

/// Children from `/proc/self/task/<tid>/children` (CONFIG_PROC_CHILDREN):
/// each thread lists the children it forked or that were reparented to it.
fn children_from_task_files() -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = fs::read_dir("/proc/self/task") else {
        return out;
    };
    for task in tasks.flatten() {
        // A thread may exit between the listing and the read: skip it.
        if let Ok(text) = fs::read_to_string(task.path().join("children")) {
            for pid in parse_pid_list(&text) {
                if !out.contains(&pid) {
                    out.push(pid);
                }
            }
        }
    }
    out
}

/// Children found by scanning every `/proc/<pid>/stat` for `parent` as ppid
/// (field 4 is the parent's process id, whichever thread forked).
pub(super) fn children_by_scan(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return out;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        // Processes come and go during the scan: skip unreadable ones.
        if let Ok(stat) = read_stat(pid) {
            if stat.ppid == parent {
                out.push(pid);
            }
        }
    }
    out
}

/// Space-separated pids, as in a `children` file.
pub(super) fn parse_pid_list(text: &str) -> Vec<u32> {
    text.split_ascii_whitespace()
        .filter_map(|p| p.parse::<u32>().ok())
        .collect()
}
