//! The process's file-descriptor limit: raised to its hard limit at start
//! (every idle HTTP connection holds one), and the share of it the HTTP
//! front door may fill with connections.

use std::io;

/// Descriptors always left to everything but HTTP connections (workers'
/// pipes and sockets, the store, log files): this many, or an eighth of
/// the limit when that is more.
pub const RESERVED: u64 = 256;

/// The fewest connections the front door is ever allowed.
pub const MIN_CONNECTIONS: usize = 16;

/// The connections the front door may hold under a descriptor limit of
/// `limit`, whatever is configured above it. Pure.
pub fn connection_cap(limit: u64) -> usize {
    let reserve = RESERVED.max(limit / 8);
    let cap = limit.saturating_sub(reserve);
    usize::try_from(cap)
        .unwrap_or(usize::MAX)
        .max(MIN_CONNECTIONS)
}

/// The soft limit now.
pub fn current() -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit for the call to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(lim.rlim_cur)
}

/// Raises the soft limit to the hard one; returns (before, after).
pub fn raise() -> io::Result<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit for the call to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let before = lim.rlim_cur;
    if lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: `lim` is a valid rlimit read above, with the soft limit
        // set to the hard one.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok((before, lim.rlim_cur))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_front_door_leaves_room_for_everything_else() {
        assert_eq!(connection_cap(20_000), 17_500);
        assert_eq!(connection_cap(1024), 768);
        assert_eq!(connection_cap(300), 44);
        assert_eq!(connection_cap(100), MIN_CONNECTIONS);
        assert_eq!(connection_cap(1 << 20), (1 << 20) - (1 << 17));
    }
}
