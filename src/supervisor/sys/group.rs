//! Signals to process groups: a pinned worker's own group, or the group it
//! belongs to, guarded by what pins the group id; and (for the tests) to a
//! child of ours that has not been reaped, and its group. `killpg` with the
//! guards every caller needs.
//!
//! `unsafe`: `kill`, `getpgrp`, `killpg`.

use std::io;

use super::pidfd::Pinned;
use super::proc::{proc_start_time, read_stat};
use super::to_pid;

impl Pinned {
    /// Sends `sig` to the process group whose id is the pinned pid (workers
    /// are spawned as their own group leaders, `process_group(0)`), so it
    /// also reaches the worker's children. `Ok(true)` if the group had a
    /// member (a zombie counts), `Ok(false)` if the group is empty or the id
    /// is no longer ours (nothing sent).
    ///
    /// There is no pidfd for a group, so this ends in `killpg(pid, sig)`,
    /// guarded by what pins the group id: a pid number stays allocated while
    /// any process still uses it as pid, group id or session id.
    ///
    /// - Leader alive (pidfd not readable): it holds the id, `killpg`.
    /// - Leader exited but not reaped (`/proc/<pid>` still shows the pinned
    ///   start time): the zombie holds the id, `killpg`.
    /// - `/proc/<pid>` shows another start time: the pid was reused, which
    ///   the kernel allows only once the old group was empty, so there is
    ///   nobody of ours left to signal: `Ok(false)`, nothing sent.
    /// - `/proc/<pid>` absent (leader reaped): leftover members, if any,
    ///   still hold the id, so `killpg` reaches them; ESRCH means the group
    ///   is empty (`Ok(false)`).
    ///
    /// Residual race (accepted): between the check and `killpg` the old
    /// group would have to empty completely, the pid be handed out again,
    /// and the new process make itself a group leader. Group-id reuse needs
    /// the leader's pid reused AND the old group empty.
    pub fn signal_group(&self, sig: i32) -> io::Result<bool> {
        if !self.is_alive() {
            match proc_start_time(self.pid) {
                Ok(found) if found == self.start => {}
                Ok(_) => return Ok(false),
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(err) => return Err(err),
            }
        }
        match raw_killpg(self.pid, sig) {
            Ok(()) => Ok(true),
            Err(err) if err.raw_os_error() == Some(libc::ESRCH) => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// Sends `sig` to the pinned process's process group:
    /// [`Pinned::signal_group`] when it led its group when pinned, else
    /// [`Pinned::signal_member_group`] (which needs it alive).
    pub fn signal_own_group(&self, sig: i32) -> io::Result<bool> {
        if self.leader {
            self.signal_group(sig)
        } else {
            self.signal_member_group(sig)
        }
    }

    /// Sends `sig` to the process group the pinned process belongs to,
    /// whoever leads it: the group of a worker that is not its own group
    /// leader (a daemon a launcher left behind). `Ok(true)` if sent,
    /// `Ok(false)` if the process has exited (nothing sent: once it is gone
    /// nothing pins its group id).
    ///
    /// The group id is read from `/proc` while the pidfd shows the process
    /// alive; as a member it keeps the id from being reused, so `killpg`
    /// reaches its group. Residual race (accepted, as for
    /// [`Pinned::signal_group`]): the process exits right after the check,
    /// the whole group empties and the id is handed out again before the
    /// `killpg`.
    pub fn signal_member_group(&self, sig: i32) -> io::Result<bool> {
        if !self.is_alive() {
            return Ok(false);
        }
        let stat = match read_stat(self.pid) {
            Ok(stat) if stat.start_time == self.start => stat,
            Ok(_) => return Ok(false),
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(err) => return Err(err),
        };
        if !self.is_alive() {
            return Ok(false);
        }
        match raw_killpg(stat.pgrp, sig) {
            Ok(()) => Ok(true),
            Err(err) if err.raw_os_error() == Some(libc::ESRCH) => Ok(false),
            Err(err) => Err(err),
        }
    }
}

/// Sends `sig` to `pid`, a child we spawned ourselves and have not reaped
/// (an unreaped child keeps its pid, even as a zombie, so this cannot reach
/// a stranger). Refuses pids 0 and 1 and pids beyond `pid_t`, which `kill`
/// would read as "my group" or "everyone".
#[cfg(test)]
pub fn signal_child(pid: u32, sig: i32) -> io::Result<()> {
    let raw_pid = match to_pid(pid) {
        Some(p) if p > 1 => p,
        _ => return Err(invalid_target(pid)),
    };
    // SAFETY: kill(pid_t, int) takes two integers; raw_pid is > 1, so it
    // names exactly one process, never a group or every process.
    let rc = unsafe { libc::kill(raw_pid, sig) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sends `sig` to process group `pgid`, the group of a child we spawned as
/// group leader and have not reaped (its unreaped pid pins the group id).
/// `Ok(true)` if the group had a member (a zombie counts), `Ok(false)` if
/// the group is empty (ESRCH). Refuses 0, 1, ids beyond `pid_t` and our own group.
#[cfg(test)]
pub fn signal_group_of_child(pgid: u32, sig: i32) -> io::Result<bool> {
    match raw_killpg(pgid, sig) {
        Ok(()) => Ok(true),
        Err(err) if err.raw_os_error() == Some(libc::ESRCH) => Ok(false),
        Err(err) => Err(err),
    }
}

/// `killpg(pgid, sig)` with the guards every caller needs: glibc's
/// `killpg(0)` is our own group and `killpg(1)` is `kill(-1)`, every process
/// we may signal; signalling our own group would stop the hub itself.
fn raw_killpg(pgid: u32, sig: i32) -> io::Result<()> {
    let raw = match to_pid(pgid) {
        Some(p) if p > 1 => p,
        _ => return Err(invalid_target(pgid)),
    };
    // SAFETY: getpgrp() takes no arguments and cannot fail.
    let own = unsafe { libc::getpgrp() };
    if raw == own {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("refusing to signal the hub's own process group {pgid}"),
        ));
    }
    // SAFETY: killpg(pid_t, int) takes two integers; raw is > 1 and not our
    // own group, so it names exactly one other process group.
    let rc = unsafe { libc::killpg(raw, sig) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn invalid_target(pid: u32) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("refusing to signal pid {pid}"),
    )
}
