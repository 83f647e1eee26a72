//! `poll(2)` for one descriptor's input, and the entry a poll array holds
//! for it. Used by the worker pipe readers and the panel poller.

use std::os::fd::RawFd;
use std::time::Duration;

/// A poll entry that waits for input (or a hang-up) on `fd`.
pub fn pollin(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// Waits until `fd` is readable (or hung up), at most `timeout`. An
/// interrupted wait (EINTR) reads as "not yet".
pub fn readable(fd: RawFd, timeout: Duration) -> bool {
    let mut entry = pollin(fd);
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid, initialized pollfd on our stack for the duration
    // of the call; the caller keeps `fd` open meanwhile.
    let n = unsafe { libc::poll(&mut entry, 1, ms) };
    n > 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn input_and_hang_up_are_readable_silence_is_not() {
        let (mut a, b) = UnixStream::pair().unwrap();
        assert!(!readable(b.as_raw_fd(), Duration::ZERO));
        a.write_all(b"x").unwrap();
        assert!(readable(b.as_raw_fd(), Duration::from_secs(10)));
        let (c, d) = UnixStream::pair().unwrap();
        drop(c);
        assert!(readable(d.as_raw_fd(), Duration::from_secs(10)));
    }
}
