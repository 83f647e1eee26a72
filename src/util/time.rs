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

/// The current time as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn now_rfc3339() -> String {
    rfc3339_from_millis(now_millis())
}

/// [`now_rfc3339`], reusing this thread's last formatted date and time of
/// day within the same second (the worker event threads stamp every
/// event).
pub fn now_rfc3339_cached() -> String {
    rfc3339_cached(now_millis())
}

/// [`rfc3339_from_millis`] through this thread's one-second cache.
fn rfc3339_cached(ms: u64) -> String {
    use std::cell::RefCell;
    thread_local! {
        static LAST: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
    }
    let secs = ms / 1000;
    LAST.try_with(|last| {
        let mut last = last.try_borrow_mut().ok()?;
        if last.0 != secs {
            let full = rfc3339_from_millis(ms);
            // `YYYY-MM-DDTHH:MM:SS.` (the year has four digits or more).
            last.1 = full[..full.len() - 4].to_string();
            last.0 = secs;
        }
        let mut out = String::with_capacity(last.1.len() + 4);
        out.push_str(&last.1);
        let millis = (ms % 1000) as u32;
        for d in [millis / 100, millis / 10 % 10, millis % 10] {
            out.push(char::from(b'0' + d as u8));
        }
        out.push('Z');
        Some(out)
    })
    .ok()
    .flatten()
    .unwrap_or_else(|| rfc3339_from_millis(ms))
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
            assert_eq!(rfc3339_cached(ms), rfc3339_from_millis(ms), "{ms}");
        }
        let now = now_rfc3339_cached();
        assert_eq!(now.len(), 24);
        assert!(now.ends_with('Z'));
    }
}
