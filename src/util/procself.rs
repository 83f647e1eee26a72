//! The hub process's own figures as Linux reports them: resident memory
//! and threads from `/proc/self/status`, open descriptors from
//! `/proc/self/fd`, and the descriptor limit. Read on demand only (the
//! health view asks); nothing samples them in the background.
//!
//! [`parse_status`] is pure; [`read`] does the I/O.

use std::io;

/// What `/proc/self/status` says (a field the kernel did not print is
/// `None`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Status {
    /// `VmRSS`, in bytes.
    pub rss_bytes: Option<u64>,
    /// `VmHWM` (the peak resident set), in bytes.
    pub peak_rss_bytes: Option<u64>,
    /// `VmSize`, in bytes.
    pub virtual_bytes: Option<u64>,
    /// `Threads`.
    pub threads: Option<u64>,
}

/// The process's figures at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Figures {
    pub status: Status,
    /// Open file descriptors (the one this count itself opened excluded).
    pub open_fds: u64,
    /// The soft `RLIMIT_NOFILE`, when it could be read.
    pub fd_limit: Option<u64>,
}

/// Reads `status` text: `Key:<whitespace>value[ kB]` lines. Unknown keys,
/// malformed values and a missing unit are skipped, never guessed; sizes
/// are in kB (KiB) as the kernel prints them and come back in bytes.
pub fn parse_status(text: &str) -> Status {
    let mut out = Status::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key {
            "VmRSS" => out.rss_bytes = kib(value),
            "VmHWM" => out.peak_rss_bytes = kib(value),
            "VmSize" => out.virtual_bytes = kib(value),
            "Threads" => out.threads = value.parse().ok(),
            _ => {}
        }
    }
    out
}

/// `"1234 kB"` as bytes.
fn kib(value: &str) -> Option<u64> {
    let number = value.strip_suffix("kB")?.trim_end();
    number.parse::<u64>().ok()?.checked_mul(1024)
}

/// Reads the figures now. Fails where there is no `/proc` (not Linux, or
/// a sandbox that hides it).
pub fn read() -> io::Result<Figures> {
    let status = parse_status(&std::fs::read_to_string("/proc/self/status")?);
    // The listing includes the descriptor the listing itself holds open.
    let listed = std::fs::read_dir("/proc/self/fd")?.count() as u64;
    Ok(Figures {
        status,
        open_fds: listed.saturating_sub(1),
        fd_limit: super::fdlimit::current().ok(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "Name:\tsimplex-hub\nUmask:\t0022\nState:\tS (sleeping)\n\
        VmPeak:\t  120000 kB\nVmSize:\t  118000 kB\nVmHWM:\t    9000 kB\n\
        VmRSS:\t    8192 kB\nRssAnon:\t    4000 kB\nThreads:\t7\nSigQ:\t0/63000\n";

    #[test]
    fn reads_the_fields_it_knows() {
        assert_eq!(
            parse_status(SAMPLE),
            Status {
                rss_bytes: Some(8192 * 1024),
                peak_rss_bytes: Some(9000 * 1024),
                virtual_bytes: Some(118_000 * 1024),
                threads: Some(7),
            }
        );
    }

    #[test]
    fn malformed_or_missing_values_are_none() {
        let s = parse_status("VmRSS:\t12 MB\nVmHWM:\tkB\nVmSize:\t-4 kB\nThreads:\tmany\n");
        assert_eq!(s, Status::default());
        assert_eq!(parse_status(""), Status::default());
        assert_eq!(parse_status("garbage\n\n:::\nThreads\n"), Status::default());
        let huge = format!("VmRSS:\t{} kB\n", u64::MAX);
        assert_eq!(
            parse_status(&huge).rss_bytes,
            None,
            "overflow is not wrapped"
        );
    }

    #[test]
    fn keys_match_exactly_and_the_last_line_wins() {
        let s = parse_status("vmrss:\t1 kB\nVmRSSx:\t2 kB\nThreads: 3\nThreads:\t4\n");
        assert_eq!(s.rss_bytes, None);
        assert_eq!(s.threads, Some(4));
    }

    #[test]
    fn this_process_can_be_read() {
        let figures = read().expect("/proc/self on Linux");
        assert!(figures.status.rss_bytes.unwrap() > 0);
        assert!(figures.status.threads.unwrap() >= 1);
        // stdin, stdout and stderr at least.
        assert!(figures.open_fds >= 3, "{figures:?}");
    }
}
