//! Reaping: one exited child's status, the child-subreaper flag that makes
//! orphaned descendants our children, and the reaping of exited children
//! the supervisor's own waiters do not wait for.
//!
//! `unsafe`: `waitpid`, `prctl`.

use std::io;

#[cfg(test)]
use super::proc::list_children;
use super::to_pid;

/// Reaps `pid` if it is an exited child of this process, and returns its
/// exit code or terminating signal. `None` if it is not our child (any
/// more), or has not exited. Only for a pid the caller has kept out of
/// [`reap_exited`] (and pinned), so the status is its own.
pub fn reap_child(pid: u32) -> Option<(Option<i32>, Option<i32>)> {
    let raw_pid = to_pid(pid)?;
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: waitpid(pid_t, int *, int): status points to a live local
        // c_int the kernel writes into; raw_pid is positive, so at most that
        // one child is reaped.
        let rc = unsafe { libc::waitpid(raw_pid, &mut status, libc::WNOHANG) };
        if rc == raw_pid {
            break;
        }
        if rc < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return None;
    }
    if libc::WIFEXITED(status) {
        Some((Some(libc::WEXITSTATUS(status)), None))
    } else if libc::WIFSIGNALED(status) {
        Some((None, Some(libc::WTERMSIG(status))))
    } else {
        Some((None, None))
    }
}

/// Makes this process a child subreaper (`PR_SET_CHILD_SUBREAPER`): orphans
/// among the descendants of our workers (daemonized grandchildren) are
/// reparented to the hub instead of init, so [`reap_exited`] can reap them.
/// Affects the whole process, for the rest of its life.
pub fn set_child_subreaper() -> io::Result<()> {
    let (on, unused): (libc::c_ulong, libc::c_ulong) = (1, 0);
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER, arg2) reads only its integer
    // arguments; the unused ones are passed as 0 as the man page asks.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, on, unused, unused, unused) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reaps every exited child of this process whose pid is not in `keep`
/// (the pids the supervisor's own waiter threads wait on). Returns the
/// reaped pids.
///
/// `waitpid(-1, WNOHANG)` would steal our own workers' statuses, so the
/// children are listed from `/proc` (`/proc/self/task/*/children` where the
/// kernel has `CONFIG_PROC_CHILDREN`, otherwise a scan of `/proc/*/stat`
/// for our pid as parent) and each one not kept gets `waitpid(pid,
/// WNOHANG)`. Every child process of the hub that something else waits on
/// (any `std::process::Child`) must be in `keep`, or its `wait` fails with
/// ECHILD; spawn under the same lock that builds `keep`.
#[cfg(test)]
pub fn reap_orphans(keep: &[u32]) -> Vec<u32> {
    reap_exited(&list_children(), keep)
}

/// The reaping half of [`reap_orphans`]: `waitpid(pid, WNOHANG)` for each
/// of `children` (from [`list_children`](super::list_children)) not in `keep`. A caller that
/// lists without a lock takes its spawn lock only around this call.
pub fn reap_exited(children: &[u32], keep: &[u32]) -> Vec<u32> {
    let mut reaped = Vec::new();
    for &child in children {
        if keep.contains(&child) {
            continue;
        }
        let Some(raw_pid) = to_pid(child) else {
            continue;
        };
        let mut status: libc::c_int = 0;
        loop {
            // SAFETY: waitpid(pid_t, int *, int): status points to a live
            // local c_int the kernel writes the exit status into; raw_pid is
            // a positive pid, so only that one child can be reaped.
            let rc = unsafe { libc::waitpid(raw_pid, &mut status, libc::WNOHANG) };
            if rc == raw_pid {
                reaped.push(child);
            } else if rc < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // 0: still running; ECHILD: reaped elsewhere meanwhile.
            break;
        }
    }
    reaped
}
