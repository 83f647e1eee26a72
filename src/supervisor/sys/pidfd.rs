//! Pinned process handles ([`Pinned`]): a pidfd opened before the start
//! time is compared, the signals sent through it, and waiting for the
//! process to exit (`poll` on the pidfd). Its signals to process groups are
//! `group.rs`.
//!
//! `unsafe`: `pidfd_open` and the ownership of the descriptor it returns,
//! `pidfd_send_signal`, `poll`.

use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use super::proc::read_stat;
use super::to_pid;

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
    pub(super) pid: u32,
    pub(super) start: u64,
    /// It led its own process group when it was pinned (workers the hub
    /// spawns do; a daemon a launcher left behind usually does not).
    pub(super) leader: bool,
    pub(super) fd: OwnedFd,
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
