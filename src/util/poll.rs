//! `poll(2)` for one descriptor's input, and the entry a poll array holds
//! for it. Used by the worker pipe readers, the panel poller and the
//! bounded Docker management commands (both of their pipes at once).

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

/// Waits up to `timeout` until one of `entries` has an event; returns how
/// many do (0 after the timeout, an interrupted wait or a failed call).
pub fn wait(entries: &mut [libc::pollfd], timeout: Duration) -> usize {
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    let Ok(count) = libc::nfds_t::try_from(entries.len()) else {
        return 0;
    };
    // SAFETY: `entries` is a live, initialized slice of pollfd for the
    // duration of the call and `count` is its length; the caller keeps the
    // descriptors open meanwhile.
    let n = unsafe { libc::poll(entries.as_mut_ptr(), count, ms) };
    usize::try_from(n).unwrap_or(0)
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

    #[test]
    fn wait_reports_which_of_several_has_input() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let (_c, d) = UnixStream::pair().unwrap();
        let mut entries = [pollin(b.as_raw_fd()), pollin(d.as_raw_fd())];
        assert_eq!(wait(&mut entries, Duration::ZERO), 0);
        a.write_all(b"x").unwrap();
        assert_eq!(wait(&mut entries, Duration::from_secs(10)), 1);
        assert_ne!(entries[0].revents & libc::POLLIN, 0);
        assert_eq!(entries[1].revents, 0);
    }
}
