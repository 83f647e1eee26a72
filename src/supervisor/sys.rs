//! The operating-system edge of process supervision, and the only place with
//! `unsafe` for process control: `/proc/<pid>/stat` start times, pinned
//! process handles (pidfds), signals to children and process groups, the
//! child-subreaper flag and reaping of orphans.
//!
//! PID-reuse rules (perf-reliability reference, section 3a):
//!
//! - A pid we spawned and have not reaped cannot be reused (the zombie keeps
//!   it), so `kill`/`killpg` on it are safe until the reaping `wait` returns
//!   (`signal_child`, `signal_group_of_child`: the module's tests signal
//!   their own children with these; the hub itself signals only through
//!   [`Pinned`]).
//! - Any other pid (an adopted worker, or our own after the waiter thread
//!   reaped it) goes through [`Pinned`]: `pidfd_open` first, then the start
//!   time comparison, then `pidfd_send_signal`, which can only ever reach
//!   the pinned incarnation.
//!
//! Linux only; pidfds need Linux 5.3 or later.

use std::fmt;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

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
/// A point-in-time answer: to act on it, use [`Pinned::open`].
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

/// Why [`Pinned::open`] failed.
#[derive(Debug)]
pub enum PinError {
    /// The process does not exist, or the pid belongs to a different process
    /// (start time mismatch, or not a process but a thread).
    Gone,
    /// pidfds are not available (kernel older than 5.3, or the syscall is
    /// filtered out by a seccomp policy).
    Unsupported,
    /// Any other failure (`/proc` unreadable, out of file descriptors, ...).
    Io(io::Error),
}

impl fmt::Display for PinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PinError::Gone => {
                f.write_str("the process is gone or the pid belongs to another process")
            }
            PinError::Unsupported => {
                f.write_str("pidfd_open is not available (Linux 5.3 or later is needed)")
            }
            PinError::Io(err) => write!(f, "cannot pin the process: {err}"),
        }
    }
}

impl std::error::Error for PinError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PinError::Io(err) => Some(err),
            PinError::Gone | PinError::Unsupported => None,
        }
    }
}

/// A pinned handle on one process incarnation: a pidfd opened *before* the
/// start time was compared, so every signal sent through it reaches that
/// incarnation or nobody (never a process that later got the same pid).
/// The fd is close-on-exec (pidfds always are), so workers never inherit it.
/// `Send + Sync`: several threads may wait on and signal the same handle.
#[derive(Debug)]
pub struct Pinned {
    pid: u32,
    start: u64,
    /// It led its own process group when it was pinned (workers the hub
    /// spawns do; a daemon a launcher left behind usually does not).
    leader: bool,
    fd: OwnedFd,
}

impl Pinned {
    /// Pins process `pid` if it still has start time `expected_start`.
    ///
    /// Order matters: the pidfd is opened first and the start time read
    /// afterwards. If the pid was reused before `pidfd_open`, the fd pins
    /// the stranger and the start time differs; if the process exits after
    /// `pidfd_open`, the fd still refers to it and signals fail with ESRCH.
    ///
    /// `Err(PinError::Gone)` if the process does not exist or its start time
    /// differs (also for pid 0, pids beyond `pid_t` and thread ids),
    /// `Err(PinError::Unsupported)` without pidfd support,
    /// `Err(PinError::Io)` otherwise.
    pub fn open(pid: u32, expected_start: u64) -> Result<Pinned, PinError> {
        let Some(raw_pid) = to_pid(pid) else {
            return Err(PinError::Gone);
        };
        let flags: libc::c_uint = 0;
        // SAFETY: pidfd_open(pid_t pid, unsigned int flags) takes two plain
        // integers and touches no memory of ours. On success it returns a
        // new file descriptor that nothing else owns.
        let rc = unsafe { libc::syscall(libc::SYS_pidfd_open, raw_pid, flags) };
        if rc < 0 {
            let err = io::Error::last_os_error();
            return Err(match err.raw_os_error() {
                // ESRCH: no such process. EINVAL (older kernels) or ENOENT
                // (6.x): the pid is a thread, not a thread-group leader, so
                // not the process that was recorded.
                Some(libc::ESRCH) | Some(libc::EINVAL) | Some(libc::ENOENT) => PinError::Gone,
                // ENOSYS: kernel < 5.3. EPERM is not a documented
                // pidfd_open error; it is what seccomp filters return.
                Some(libc::ENOSYS) | Some(libc::EPERM) => PinError::Unsupported,
                _ => PinError::Io(err),
            });
        }
        let Ok(raw_fd) = libc::c_int::try_from(rc) else {
            return Err(PinError::Io(io::Error::other(
                "pidfd_open returned an out-of-range descriptor",
            )));
        };
        // SAFETY: raw_fd was just returned by a successful pidfd_open, is
        // open, and is owned by nobody else; OwnedFd takes sole ownership
        // and closes it exactly once.
        let fd = unsafe { OwnedFd::from_raw_fd(raw_fd) };
        match read_stat(pid) {
            Ok(stat) if stat.start_time == expected_start => Ok(Pinned {
                pid,
                start: expected_start,
                leader: stat.pgrp == pid,
                fd,
            }),
            Ok(_) => Err(PinError::Gone),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Err(PinError::Gone),
            Err(err) => Err(PinError::Io(err)),
        }
    }

    /// The pinned process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The start time the process was pinned with (clock ticks since boot).
    pub fn start_time(&self) -> u64 {
        self.start
    }

    /// Sends `sig` to the pinned process only. `Ok(true)` if delivered,
    /// `Ok(false)` if it has already exited (zombie or reaped: nothing was
    /// sent). Never reaches another process, whatever happened to the pid.
    pub fn signal(&self, sig: i32) -> io::Result<bool> {
        if !self.is_alive() {
            return Ok(false);
        }
        let flags: libc::c_uint = 0;
        // SAFETY: pidfd_send_signal(int pidfd, int sig, siginfo_t *info,
        // unsigned int flags): the fd is a live pidfd we own, info is NULL
        // (the kernel fills in a SI_USER siginfo), flags must be 0. No memory
        // of ours is read or written.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.fd.as_raw_fd(),
                sig,
                std::ptr::null_mut::<libc::siginfo_t>(),
                flags,
            )
        };
        if rc == 0 {
            return Ok(true);
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::ESRCH) {
            Ok(false)
        } else {
            Err(err)
        }
    }

    /// Whether the pinned process is still running. A pidfd polls readable
    /// once the process has exited (zombie or reaped), so a zombie is *not*
    /// alive here. If the poll itself fails (it cannot with an owned fd,
    /// short of ENOMEM), answers `true`: never claim an exit not seen.
    pub fn is_alive(&self) -> bool {
        loop {
            match poll_fd(&self.fd, 0) {
                Ok(exited) => return !exited,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => {
                    log::warn!("poll on the pidfd of {} failed: {err}", self.pid);
                    return true;
                }
            }
        }
    }

    /// Blocks up to `timeout` until the pinned process exits (poll on the
    /// pidfd; no signal handlers, no sleeping loop). `true` if it exited.
    pub fn wait_exit(&self, timeout: Duration) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let remaining = match deadline {
                Some(deadline) => deadline.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(3600),
            };
            match poll_fd(&self.fd, timeout_ms(remaining)) {
                Ok(true) => return true,
                Ok(false) => {}
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => {
                    log::warn!("poll on the pidfd of {} failed: {err}", self.pid);
                    // Do not spin on a persistent error; retry until the deadline.
                    #[expect(
                        clippy::disallowed_methods,
                        reason = "back-off between retries of a failing poll(2) on the pidfd"
                    )]
                    std::thread::sleep(remaining.min(Duration::from_millis(10)));
                }
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return !self.is_alive();
            }
        }
    }

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
}

impl Pinned {
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
/// of `children` (from [`list_children`]) not in `keep`. A caller that
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

/// A pid as `pid_t`, if it is a positive one.
fn to_pid(pid: u32) -> Option<libc::pid_t> {
    libc::pid_t::try_from(pid).ok().filter(|p| *p > 0)
}

/// Polls a pidfd for readability (= the process exited). `Ok(true)` if it
/// exited, `Ok(false)` on timeout.
fn poll_fd(fd: &OwnedFd, timeout_ms: libc::c_int) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: pfd is a live, initialized pollfd on our stack and nfds is 1,
    // so the kernel reads and writes exactly that one struct; fd is owned by
    // the caller and stays open for the duration of the call.
    let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    match rc {
        0 => Ok(false),
        // A pidfd reports only POLLIN (exited) and, on newer kernels,
        // POLLHUP (reaped); either means the process is gone.
        n if n > 0 => Ok(pfd.revents != 0),
        _ => Err(io::Error::last_os_error()),
    }
}

/// A duration as a `poll` timeout in milliseconds, rounded up (so a wait
/// never ends before the deadline) and capped at `c_int::MAX`.
fn timeout_ms(d: Duration) -> libc::c_int {
    let ms = d.as_nanos().div_ceil(1_000_000);
    libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX)
}

/// The fields of `/proc/<pid>/stat` this module uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    /// Field 3: R, S, D, Z, T, ...
    state: u8,
    /// Field 4: the parent's process id.
    ppid: u32,
    /// Field 5: the process group id.
    pgrp: u32,
    /// Field 22: start time in clock ticks since boot.
    start_time: u64,
}

/// Parses a stat line as bytes (comm need not be UTF-8).
fn parse_stat(line: &[u8]) -> Option<Stat> {
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
fn read_stat(pid: u32) -> io::Result<Stat> {
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
fn children_by_scan(parent: u32) -> Vec<u32> {
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
fn parse_pid_list(text: &str) -> Vec<u32> {
    text.split_ascii_whitespace()
        .filter_map(|p| p.parse::<u32>().ok())
        .collect()
}

#[cfg(test)]
// `poll_until` sleeps between looks, up to its deadline.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use std::process::{Child, Command, Stdio};

    /// Kills and waits a child on drop, so no test leaves `sleep 30` behind,
    /// whatever assertion failed.
    struct Guard(Child);

    impl Guard {
        fn pid(&self) -> u32 {
            self.0.id()
        }
    }

    impl Drop for Guard {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// Kills a pinned (non-child) process on drop: cleanup for grandchildren.
    struct PinnedGuard(Option<Pinned>);

    impl Drop for PinnedGuard {
        fn drop(&mut self) {
            if let Some(p) = &self.0 {
                let _ = p.signal(libc::SIGKILL);
            }
        }
    }

    fn sleeper() -> Guard {
        let child = Command::new("sleep")
            .arg("30")
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("spawn sleep");
        Guard(child)
    }

    fn poll_until(what: &str, mut ok: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ok() {
            assert!(Instant::now() < deadline, "timed out waiting for: {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Gone for a test's purposes: no /proc entry, a zombie, or another
    /// process (start time differs).
    fn gone(pid: u32, start: u64) -> bool {
        match read_stat(pid) {
            Ok(stat) => stat.state == b'Z' || stat.start_time != start,
            Err(err) => err.kind() == io::ErrorKind::NotFound,
        }
    }

    fn line(comm: &str, start: u64) -> String {
        // Fields 3..=21 then 22 (start time) then a few more.
        let mut s = format!("4242 ({comm}) S 1 4242 4242 0 -1 4194560");
        for _ in 10..=21 {
            s.push_str(" 7");
        }
        s.push_str(&format!(" {start} 12345 67 18446744073709551615 1 1 0\n"));
        s
    }

    #[test]
    fn parses_start_time_after_the_last_paren() {
        assert_eq!(
            parse_stat_start_time(&line("sleep", 987_654)),
            Some(987_654)
        );
        assert_eq!(parse_stat_start_time(&line("a) b) c", 42)), Some(42));
        assert_eq!(parse_stat_start_time(&line("(x) 9 9 9 (", 7)), Some(7));
        assert_eq!(parse_stat_start_time(&line("", 1)), Some(1));
        let parsed = parse_stat(line("a) R 3 (", 5).as_bytes()).unwrap();
        assert_eq!(
            parsed,
            Stat {
                state: b'S',
                ppid: 1,
                pgrp: 4242,
                start_time: 5
            }
        );
        // Non-UTF-8 comm is fine at the byte level.
        let mut bytes = b"12 (\xff\xfe) Z 77".to_vec();
        bytes.extend_from_slice(&b" 0".repeat(17));
        bytes.extend_from_slice(b" 99 0\n");
        assert_eq!(
            parse_stat(&bytes),
            Some(Stat {
                state: b'Z',
                ppid: 77,
                pgrp: 0,
                start_time: 99
            })
        );
    }

    #[test]
    fn rejects_garbage_stat_lines() {
        // Fields 5..=21 (17 of them), so the next one is field 22.
        let mid = " 0".repeat(17);
        let good = format!("12 (sleep) S 1{mid} 5 0");
        assert_eq!(parse_stat_start_time(&good), Some(5));
        for bad in [
            String::new(),
            "garbage".into(),
            "12 sleep S 1 2 3".into(),
            format!("12 (sleep S 1{mid} 5"),
            format!(") 12 (sleep S 1{mid} 5"),
            format!("x (sleep) S 1{mid} 5"),
            format!("(sleep) S 1{mid} 5"),
            format!("12 (sleep) S 1{mid}"),
            format!("12 (sleep) S 1{mid} -5"),
            format!("12 (sleep) S 1{mid} x5"),
            format!("12 (sleep) S 1{mid} 18446744073709551616"),
            format!("12 (sleep) SS 1{mid} 5"),
            format!("12 (sleep) S -1{mid} 5"),
        ] {
            assert_eq!(parse_stat_start_time(&bad), None, "{bad:?}");
        }
        assert_eq!(parse_pid_list("12 34 \n"), vec![12, 34]);
        assert_eq!(parse_pid_list(""), Vec::<u32>::new());
    }

    #[test]
    fn start_time_of_self_and_of_a_reaped_child() {
        let me = proc_start_time(std::process::id()).unwrap();
        assert!(me > 0);
        assert_eq!(
            proc_start_time(0).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );

        let mut child = sleeper();
        let pid = child.pid();
        let start = proc_start_time(pid).unwrap();
        assert!(start >= me);
        child.0.kill().unwrap();
        child.0.wait().unwrap();
        match proc_start_time(pid) {
            Err(err) => assert_eq!(err.kind(), io::ErrorKind::NotFound),
            // The pid was handed out again already: a different process.
            Ok(other) => assert_ne!(other, start),
        }
    }

    #[test]
    fn identity_same_then_gone() {
        let mut child = sleeper();
        let pid = child.pid();
        let start = proc_start_time(pid).unwrap();
        assert_eq!(check_identity(pid, start), Identity::Same);
        assert_eq!(check_identity(pid, start + 1), Identity::Gone);
        assert_eq!(check_identity(0, start), Identity::Gone);
        // A zombie is still the same process until reaped.
        signal_child(pid, libc::SIGKILL).unwrap();
        poll_until("zombie", || read_stat(pid).is_ok_and(|s| s.state == b'Z'));
        assert_eq!(check_identity(pid, start), Identity::Same);
        child.0.wait().unwrap();
        assert_eq!(check_identity(pid, start), Identity::Gone);
    }

    #[test]
    fn pinned_signal_reaches_the_right_process() {
        let mut child = sleeper();
        let pid = child.pid();
        let start = proc_start_time(pid).unwrap();
        let pinned = Pinned::open(pid, start).unwrap();
        assert_eq!(pinned.pid(), pid);
        assert_eq!(pinned.start_time(), start);
        assert!(pinned.is_alive());
        assert!(pinned.signal(0).unwrap(), "signal 0 probes a live process");
        assert!(pinned.signal(libc::SIGTERM).unwrap());
        let status = child.0.wait().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGTERM));
        assert!(!pinned.is_alive());
    }

    #[test]
    fn pinned_open_with_a_wrong_start_time_is_gone_and_sends_nothing() {
        let mut child = sleeper();
        let pid = child.pid();
        let start = proc_start_time(pid).unwrap();
        assert!(matches!(Pinned::open(pid, start + 1), Err(PinError::Gone)));
        assert!(matches!(
            Pinned::open(pid, start.wrapping_sub(1)),
            Err(PinError::Gone)
        ));
        assert!(matches!(Pinned::open(0, start), Err(PinError::Gone)));
        assert!(matches!(Pinned::open(u32::MAX, start), Err(PinError::Gone)));
        // Still alive: nothing was signalled.
        assert!(child.0.try_wait().unwrap().is_none());
        assert_eq!(check_identity(pid, start), Identity::Same);
    }

    #[test]
    fn pinned_thread_id_is_gone() {
        // A thread id is not a process: pidfd_open answers EINVAL.
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let handle = std::thread::spawn(move || {
            // SAFETY: gettid() takes no arguments and cannot fail.
            let tid = unsafe { libc::gettid() };
            tx.send(tid as u32).unwrap();
            let _ = done_rx.recv();
        });
        let tid = rx.recv().unwrap();
        if tid != std::process::id() {
            let start = proc_start_time(tid).unwrap();
            let r = Pinned::open(tid, start);
            assert!(matches!(r, Err(PinError::Gone)), "{r:?}");
        }
        done_tx.send(()).unwrap();
        handle.join().unwrap();
    }

    #[test]
    fn pinned_after_exit_and_reap_reports_already_exited() {
        let mut child = sleeper();
        let pid = child.pid();
        let start = proc_start_time(pid).unwrap();
        let pinned = Pinned::open(pid, start).unwrap();
        child.0.kill().unwrap();
        // Zombie (exited, not reaped): already exited, nothing sent.
        assert!(pinned.wait_exit(Duration::from_secs(10)));
        assert!(!pinned.is_alive());
        assert!(!pinned.signal(libc::SIGKILL).unwrap());
        // The zombie still holds the group id and is its only member: the
        // kernel counts a zombie as a member that "got" the signal.
        assert!(pinned.signal_group(libc::SIGKILL).unwrap());
        child.0.wait().unwrap();
        // Reaped: the pidfd still names the dead incarnation only.
        assert!(!pinned.is_alive());
        assert!(pinned.wait_exit(Duration::ZERO));
        for sig in [0, libc::SIGTERM, libc::SIGKILL] {
            assert!(!pinned.signal(sig).unwrap());
            assert!(!pinned.signal_group(sig).unwrap());
        }
        assert!(matches!(Pinned::open(pid, start), Err(PinError::Gone)));
    }

    #[test]
    fn signal_group_reaches_a_grandchild() {
        let mut child = Command::new("sh")
            .args(["-c", "sleep 30 & echo $!; wait"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("spawn sh");
        let stdout = child.stdout.take().unwrap();
        let child = Guard(child);
        let pid = child.pid();
        let mut text = String::new();
        BufReader::new(stdout).read_line(&mut text).unwrap();
        let gpid: u32 = text.trim().parse().expect("grandchild pid");
        let gstart = proc_start_time(gpid).unwrap();
        let _cleanup = PinnedGuard(Pinned::open(gpid, gstart).ok());

        let start = proc_start_time(pid).unwrap();
        let pinned = Pinned::open(pid, start).unwrap();
        assert!(pinned.signal_group(libc::SIGKILL).unwrap());
        assert!(pinned.wait_exit(Duration::from_secs(10)));
        poll_until("the grandchild is gone", || gone(gpid, gstart));
        drop(child);
    }

    #[test]
    fn a_member_signals_its_group_and_a_leader_is_known_as_one() {
        let mut child = Command::new("sh")
            .args(["-c", "sleep 30 & echo $!; wait"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("spawn sh");
        let stdout = child.stdout.take().unwrap();
        let mut child = Guard(child);
        let pid = child.pid();
        let mut text = String::new();
        BufReader::new(stdout).read_line(&mut text).unwrap();
        let gpid: u32 = text.trim().parse().expect("grandchild pid");
        let gstart = proc_start_time(gpid).unwrap();
        let member = Pinned::open(gpid, gstart).unwrap();
        let _cleanup = PinnedGuard(Pinned::open(gpid, gstart).ok());
        assert!(!member.leader);
        let leader = Pinned::open(pid, proc_start_time(pid).unwrap()).unwrap();
        assert!(leader.leader);
        // The member's group is the leader's: both end.
        assert!(member.signal_own_group(libc::SIGKILL).unwrap());
        assert!(member.wait_exit(Duration::from_secs(10)));
        let status = child.0.wait().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        // Once gone, a member signals nothing.
        assert!(!member.signal_member_group(libc::SIGKILL).unwrap());
    }

    #[test]
    fn reap_child_reports_the_status_of_an_exited_child_only() {
        let sh = |script: &str| {
            Command::new("sh")
                .args(["-c", script])
                .stdin(Stdio::null())
                .spawn()
                .expect("spawn sh")
        };
        let exits = sh("exit 7");
        let pid = exits.id();
        let pinned = Pinned::open(pid, proc_start_time(pid).unwrap()).unwrap();
        assert!(pinned.wait_exit(Duration::from_secs(10)));
        assert_eq!(reap_child(pid), Some((Some(7), None)));
        assert_eq!(reap_child(pid), None, "reaped once");
        drop(exits);

        let killed = sh("kill -TERM $$");
        let pid = killed.id();
        let pinned = Pinned::open(pid, proc_start_time(pid).unwrap()).unwrap();
        assert!(pinned.wait_exit(Duration::from_secs(10)));
        assert_eq!(reap_child(pid), Some((None, Some(libc::SIGTERM))));
        drop(killed);

        // Running, and not a child at all.
        let running = sleeper();
        assert_eq!(reap_child(running.pid()), None);
        assert_eq!(reap_child(1), None);
    }

    #[test]
    fn signal_group_after_the_leader_was_reaped_reaches_leftover_members() {
        // The leader exits at once, leaving `sleep` behind in its group.
        let mut leader = Command::new("sh")
            .args(["-c", "sleep 30 & echo $!"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("spawn sh");
        let stdout = leader.stdout.take().unwrap();
        let mut leader = Guard(leader);
        let pid = leader.pid();
        let start = proc_start_time(pid).unwrap();
        let pinned = Pinned::open(pid, start).unwrap();
        let mut text = String::new();
        BufReader::new(stdout).read_line(&mut text).unwrap();
        let gpid: u32 = text.trim().parse().expect("grandchild pid");
        let gstart = proc_start_time(gpid).unwrap();
        let _cleanup = PinnedGuard(Pinned::open(gpid, gstart).ok());
        assert!(leader.0.wait().unwrap().success());
        assert!(!pinned.is_alive());
        assert!(!gone(gpid, gstart), "the leftover member is still running");
        assert!(pinned.signal_group(libc::SIGKILL).unwrap());
        poll_until("the leftover member is gone", || gone(gpid, gstart));
    }

    #[test]
    fn wait_exit_times_out_then_sees_the_exit() {
        let mut child = sleeper();
        let pid = child.pid();
        let pinned = Pinned::open(pid, proc_start_time(pid).unwrap()).unwrap();
        let t0 = Instant::now();
        assert!(!pinned.wait_exit(Duration::from_millis(100)));
        assert!(t0.elapsed() >= Duration::from_millis(100));
        assert!(!pinned.wait_exit(Duration::ZERO));
        signal_child(pid, libc::SIGKILL).unwrap();
        assert!(pinned.wait_exit(Duration::from_secs(10)));
        assert_eq!(child.0.wait().unwrap().signal(), Some(libc::SIGKILL));
    }

    #[test]
    fn signal_child_and_group_of_child() {
        let mut child = sleeper();
        let pid = child.pid();
        assert!(signal_group_of_child(pid, 0).unwrap());
        signal_child(pid, 0).unwrap();
        assert!(signal_group_of_child(pid, libc::SIGKILL).unwrap());
        assert_eq!(child.0.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert!(
            !signal_group_of_child(pid, 0).unwrap(),
            "the group is empty"
        );
        // Dangerous targets are refused before any syscall.
        for bad in [0, 1, u32::MAX, 1 << 31] {
            assert_eq!(
                signal_child(bad, 0).unwrap_err().kind(),
                io::ErrorKind::InvalidInput
            );
            assert_eq!(
                signal_group_of_child(bad, 0).unwrap_err().kind(),
                io::ErrorKind::InvalidInput
            );
        }
        // SAFETY: getpgrp() takes no arguments and cannot fail.
        let own = unsafe { libc::getpgrp() } as u32;
        assert_eq!(
            signal_group_of_child(own, 0).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    #[test]
    fn pin_error_messages() {
        assert!(PinError::Gone.to_string().contains("gone"));
        assert!(PinError::Unsupported.to_string().contains("5.3"));
        let io = PinError::Io(io::Error::other("boom"));
        assert!(io.to_string().contains("boom"));
        assert!(std::error::Error::source(&io).is_some());
    }

    // ---- tests that need a process of their own ------------------------

    const INNER: &str = "SIMPLEX_HUB_SYS_INNER_TEST";

    /// Runs the test `name` of this module in a fresh copy of the test
    /// binary (optionally under `wrapper`), with INNER set so its body runs.
    /// Returns None if the wrapper could not start it.
    fn run_inner(name: &str, wrapper: &[&str]) -> Option<String> {
        let module = module_path!()
            .split_once("::")
            .map_or(module_path!(), |(_, m)| m);
        let filter = format!("{module}::{name}");
        let exe = std::env::current_exe().unwrap();
        let mut argv: Vec<String> = wrapper.iter().map(|s| s.to_string()).collect();
        argv.push(exe.display().to_string());
        argv.extend([
            filter,
            "--exact".into(),
            "--test-threads=1".into(),
            "--nocapture".into(),
        ]);
        let out = Command::new(&argv[0])
            .args(&argv[1..])
            .env(INNER, name)
            .stdin(Stdio::null())
            .output()
            .expect("run the test binary");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if !stdout.contains("running 1 test") {
            eprintln!("inner test {name} did not start: {stderr}");
            return None;
        }
        assert!(
            out.status.success() && stdout.contains(&format!("inner {name} ok")),
            "inner test {name} failed:\n{stdout}\n{stderr}"
        );
        Some(stdout)
    }

    fn is_inner(name: &str) -> bool {
        std::env::var(INNER).as_deref() == Ok(name)
    }

    #[test]
    fn subreaper_reaps_orphans_but_not_kept_children() {
        // The subreaper flag is process-wide, and reap_orphans reaps every
        // child not kept: run it in a process of its own.
        run_inner("inner_subreaper", &[]).expect("the inner test runs");
    }

    #[test]
    fn inner_subreaper() {
        if !is_inner("inner_subreaper") {
            return;
        }
        set_child_subreaper().unwrap();
        let me = std::process::id();
        // A kept child that exits: reap_orphans must leave it alone.
        let mut kept = sleeper();
        let kept_pid = kept.pid();
        signal_child(kept_pid, libc::SIGKILL).unwrap();
        poll_until("kept child is a zombie", || {
            read_stat(kept_pid).is_ok_and(|s| s.state == b'Z')
        });
        // Double fork: sh starts sleep and exits; sleep is orphaned to us.
        let mut sh = Command::new("sh")
            .args(["-c", "sleep 30 & echo $!"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn sh");
        let stdout = sh.stdout.take().unwrap();
        let mut sh = Guard(sh);
        let mut text = String::new();
        BufReader::new(stdout).read_line(&mut text).unwrap();
        let orphan: u32 = text.trim().parse().expect("orphan pid");
        let ostart = proc_start_time(orphan).unwrap();
        let _cleanup = PinnedGuard(Pinned::open(orphan, ostart).ok());
        assert!(sh.0.wait().unwrap().success());
        poll_until("the orphan is reparented to us", || {
            read_stat(orphan).is_ok_and(|s| s.ppid == me)
        });
        let children = list_children();
        assert!(children.contains(&orphan), "{children:?}");
        assert!(children.contains(&kept_pid), "{children:?}");
        assert_eq!(children_by_scan(me).len(), children.len());
        // Still running: nothing to reap.
        assert!(reap_orphans(&[kept_pid]).is_empty());
        signal_child(orphan, libc::SIGKILL).unwrap();
        let mut reaped = Vec::new();
        poll_until("the orphan is reaped", || {
            reaped.extend(reap_orphans(&[kept_pid]));
            reaped.contains(&orphan)
        });
        assert!(!reaped.contains(&kept_pid));
        assert!(gone(orphan, ostart));
        // The kept child's status is still ours to collect.
        assert_eq!(kept.0.wait().unwrap().signal(), Some(libc::SIGKILL));
        println!("inner inner_subreaper ok");
    }

    #[test]
    fn real_pid_reuse_never_reaches_the_stranger() {
        // Forcing a pid to be reused needs a pid namespace of our own (so
        // ns_last_pid touches nobody else): root and unshare(1) required.
        let wrapper = ["unshare", "--pid", "--fork", "--mount-proc"];
        if run_inner("inner_pid_reuse", &wrapper).is_none() {
            eprintln!("skipped: cannot create a pid namespace here");
        }
    }

    /// Clock ticks since boot, from /proc/uptime (centiseconds; USER_HZ is
    /// 100 on Linux).
    fn uptime_ticks() -> u64 {
        let text = fs::read_to_string("/proc/uptime").unwrap();
        let up = text.split_ascii_whitespace().next().unwrap();
        let (secs, centis) = up.split_once('.').unwrap();
        secs.parse::<u64>().unwrap() * 100 + centis.parse::<u64>().unwrap()
    }

    #[test]
    fn inner_pid_reuse() {
        if !is_inner("inner_pid_reuse") {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            assert!(Instant::now() < deadline, "could not get the pid reused");
            let mut old = sleeper();
            let pid = old.pid();
            let start = proc_start_time(pid).unwrap();
            let pinned = Pinned::open(pid, start).unwrap();
            old.0.kill().unwrap();
            old.0.wait().unwrap();
            // Let the clock tick past the old start time (10 ms resolution),
            // so the start-time check has something to tell apart.
            poll_until("a new clock tick", || uptime_ticks() > start + 1);
            fs::write("/proc/sys/kernel/ns_last_pid", format!("{}", pid - 1)).unwrap();
            let mut stranger = sleeper();
            let spid = stranger.pid();
            let sstart = proc_start_time(spid).unwrap();
            if spid != pid || sstart == start {
                // Not reused, or reused within the same clock tick (start
                // times have 10 ms resolution): try again.
                continue;
            }
            // The stranger has our old pid, and is its own group leader.
            assert!(!pinned.is_alive());
            assert!(pinned.wait_exit(Duration::ZERO));
            assert!(!pinned.signal(libc::SIGKILL).unwrap());
            assert!(!pinned.signal_group(libc::SIGKILL).unwrap());
            assert_eq!(check_identity(pid, start), Identity::Gone);
            assert!(matches!(Pinned::open(pid, start), Err(PinError::Gone)));
            assert_eq!(check_identity(pid, sstart), Identity::Same);
            let watch = Pinned::open(spid, sstart).unwrap();
            assert!(
                !watch.wait_exit(Duration::from_millis(100)),
                "the stranger was signalled"
            );
            assert!(
                stranger.0.try_wait().unwrap().is_none(),
                "the stranger was signalled"
            );
            break;
        }
        println!("inner inner_pid_reuse ok");
    }
}
