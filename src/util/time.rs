//! Wall-clock timestamps in the RFC 3339 form the panel protocol uses
//! (`2026-01-01T00:00:00.000Z`), written by hand so no date crate is needed.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, saturating at zero for clocks set
/// before 1970.
pub fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Milliseconds on the coarse monotonic clock (`CLOCK_MONOTONIC_COARSE`:
/// since boot, a few milliseconds' resolution, a few nanoseconds to read
/// through the vDSO): for per-second rates, which a wall-clock step must
/// not bend, on paths that run for every worker event.
pub fn mono_millis() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill; the clock id
    // is a constant the kernel knows (it fails only with EINVAL/EFAULT,
    // which leave `ts` zero).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1000
        + u64::try_from(ts.tv_nsec).unwrap_or(0) / 1_000_000
}

/// Records the hub's start on [`mono_millis`]'s clock (later calls do
/// nothing).
pub fn start_monotonic() {
    started();
}

/// Milliseconds since [`start_monotonic`] (or since the first call).
pub fn uptime_millis() -> u64 {
    mono_millis().saturating_sub(started())
}

fn started() -> u64 {
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *START.get_or_init(mono_millis)
}

/// The current time as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn now_rfc3339() -> String {
    rfc3339_from_millis(now_millis())
}

/// [`now_rfc3339`] written into `out` (replacing what it held), reusing
/// this thread's last formatted date and time of day within the same
/// second (the worker event threads stamp every event, into one buffer).
pub fn now_rfc3339_cached(out: &mut String) {
    rfc3339_cached(now_millis(), out)
}

/// [`rfc3339_from_millis`] through this thread's one-second cache, into
/// `out`.
fn rfc3339_cached(ms: u64, out: &mut String) {
    use std::cell::RefCell;
    thread_local! {
        static LAST: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
    }
    out.clear();
    let secs = ms / 1000;
    let cached = LAST
        .try_with(|last| {
            let mut last = last.try_borrow_mut().ok()?;
            if last.0 != secs {
                let full = rfc3339_from_millis(ms);
                // `YYYY-MM-DDTHH:MM:SS.` (the year has four digits or more).
                last.1 = full[..full.len() - 4].to_string();
                last.0 = secs;
            }
            out.push_str(&last.1);
            Some(())
        })
        .ok()
        .flatten();
    if cached.is_none() {
        out.push_str(&rfc3339_from_millis(ms));
        return;
    }
    let millis = (ms % 1000) as u32;
    for d in [millis / 100, millis / 10 % 10, millis % 10] {
        out.push(char::from(b'0' + d as u8));
    }
    out.push('Z');
}

/// Formats milliseconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn rfc3339_from_millis(ms: u64) -> String {
    let secs = ms / 1000;
    let millis = ms % 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Milliseconds since the Unix epoch of a UTC `YYYY-MM-DDTHH:MM:SS[.fff]Z`
/// timestamp (the form [`rfc3339_from_millis`] writes, and the Node hub's
/// `toISOString`); `None` for anything else or a time before 1970.
pub fn millis_from_rfc3339(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Option<u64> {
        let part = b.get(range)?;
        part.iter()
            .all(u8::is_ascii_digit)
            .then(|| part.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
    };
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (year, month, day) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
    let (hour, minute, second) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let rest = &text[19..];
    let (fraction, zone) = match rest.strip_prefix('.') {
        Some(frac) => {
            let end = frac.find(|c: char| !c.is_ascii_digit())?;
            if end == 0 {
                return None;
            }
            (&frac[..end], &frac[end..])
        }
        None => ("", rest),
    };
    if zone != "Z" {
        return None;
    }
    let millis = fraction
        .bytes()
        .chain(std::iter::repeat(b'0'))
        .take(3)
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    let days = days_from_civil(year as i64, month as u32, day as u32);
    let secs = days * 86_400 + (hour * 3600 + minute * 60 + second) as i64;
    u64::try_from(secs).ok().map(|s| s * 1000 + millis)
}

/// A proleptic Gregorian (year, month, day) to days since 1970-01-01 (the
/// inverse of [`civil_from_days`], Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day).
/// Howard Hinnant's `civil_from_days` algorithm.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_monotonic_clock_never_goes_back() {
        start_monotonic();
        let mut last = mono_millis();
        assert!(last > 0, "a clock since boot");
        for _ in 0..1000 {
            let now = mono_millis();
            assert!(now >= last);
            last = now;
        }
        let before = uptime_millis();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while uptime_millis() < before + 20 {
            assert!(std::time::Instant::now() < deadline, "coarse, but it moves");
            #[allow(clippy::disallowed_methods)] // a poll on a deadline
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339_from_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339_from_millis(1_767_225_600_123),
            "2026-01-01T00:00:00.123Z"
        );
        // A leap day.
        assert_eq!(
            rfc3339_from_millis(951_782_400_000),
            "2000-02-29T00:00:00.000Z"
        );
    }

    #[test]
    fn timestamps_parse_back() {
        for ms in [
            0,
            999,
            951_782_400_000,
            1_767_225_600_123,
            4_102_444_799_999,
        ] {
            assert_eq!(
                millis_from_rfc3339(&rfc3339_from_millis(ms)),
                Some(ms),
                "{ms}"
            );
        }
        assert_eq!(
            millis_from_rfc3339("2026-01-01T00:00:00Z"),
            Some(1_767_225_600_000)
        );
        assert_eq!(
            millis_from_rfc3339("2026-01-01T00:00:00.5Z"),
            Some(1_767_225_600_500)
        );
        for bad in [
            "",
            "2026-01-01",
            "2026-13-01T00:00:00Z",
            "2026-01-01T00:00:00+01:00",
            "2026-01-01T00:00:00.Z",
            "1969-12-31T23:59:59Z",
            "x026-01-01T00:00:00Z",
        ] {
            assert_eq!(millis_from_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_cached_form_is_the_same() {
        for ms in [
            0,
            999,
            1000,
            1_767_225_599_999,
            1_767_225_600_000,
            1_767_225_600_007,
        ]
        .into_iter()
        .chain((0..3000).map(|i| 951_782_399_000 + i * 7))
        {
            let mut out = String::from("left over");
            rfc3339_cached(ms, &mut out);
            assert_eq!(out, rfc3339_from_millis(ms), "{ms}");
        }
        let mut now = String::new();
        now_rfc3339_cached(&mut now);
        assert_eq!(now.len(), 24);
        assert!(now.ends_with('Z'));
    }
}
