//! An event-rate meter that costs a few instructions per event and nothing
//! in between: one counter per second for the last [`WINDOW_SECONDS`]
//! seconds, advanced by the events themselves (no thread, no timer). A
//! reader asks for the count over the window ending at its own clock.
//!
//! Pure: the caller passes a monotonic time in milliseconds
//! (`util::time::mono_millis`, the coarse clock: a few ns per read).

/// Seconds the meter remembers (and the length of the window it reports).
pub const WINDOW_SECONDS: u64 = 10;

const SLOTS: usize = WINDOW_SECONDS as usize;

/// Events counted per second over the last [`WINDOW_SECONDS`] seconds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Meter {
    /// `slots[s % SLOTS]` counts the events of second `s`, for the seconds
    /// `newest - SLOTS + 1 ..= newest`.
    slots: [u32; SLOTS],
    /// The newest second counted into (0 before the first event).
    newest: u64,
}

/// What a meter reports at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// Events counted in the window.
    pub events: u64,
    /// The window's length in milliseconds: from the start of the oldest
    /// remembered second to `now` (between 9 and 10 s once the meter has
    /// run that long).
    pub window_ms: u64,
}

impl Reading {
    /// Events per second over the window (0 for an empty window).
    pub fn per_second(&self) -> f64 {
        if self.window_ms == 0 {
            return 0.0;
        }
        self.events as f64 * 1000.0 / self.window_ms as f64
    }
}

impl Meter {
    /// Counts one event at `now_ms`. An event stamped slightly before the
    /// newest one (clock read before another thread counted) goes into its
    /// own second while that is remembered, else into the newest.
    pub fn note(&mut self, now_ms: u64) {
        let second = now_ms / 1000;
        if second > self.newest {
            let skipped = second - self.newest;
            if skipped >= WINDOW_SECONDS {
                self.slots = [0; SLOTS];
            } else {
                for s in self.newest + 1..=second {
                    self.slots[slot(s)] = 0;
                }
            }
            self.newest = second;
        }
        let at = if self.newest - second < WINDOW_SECONDS {
            second
        } else {
            self.newest
        };
        let count = &mut self.slots[slot(at)];
        *count = count.saturating_add(1);
    }

    /// The events of the [`WINDOW_SECONDS`] seconds ending at `now_ms`
    /// (the current second included, so far as it has run).
    pub fn read(&self, now_ms: u64) -> Reading {
        let now_second = now_ms / 1000;
        let oldest = (now_second + 1).saturating_sub(WINDOW_SECONDS);
        let mut events = 0u64;
        // Seconds in the window that the meter still remembers.
        let from = oldest.max((self.newest + 1).saturating_sub(WINDOW_SECONDS));
        for s in from..=self.newest.min(now_second) {
            events += u64::from(self.slots[slot(s)]);
        }
        Reading {
            events,
            window_ms: now_ms - oldest * 1000,
        }
    }
}

fn slot(second: u64) -> usize {
    (second % WINDOW_SECONDS) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_within_the_window_and_forgets_after_it() {
        let mut m = Meter::default();
        let t0 = 1_000_000;
        for i in 0..50 {
            m.note(t0 + i * 100); // 10 per second for 5 s
        }
        let r = m.read(t0 + 5_500);
        assert_eq!(r.events, 50);
        assert_eq!(r.window_ms, 9_500);
        assert!((r.per_second() - 50.0 / 9.5).abs() < 1e-9);
        // Once the window starts at the last second, only it is left.
        let r = m.read(t0 + 13_400);
        assert_eq!(r.events, 10);
        // Past the window nothing remains.
        assert_eq!(m.read(t0 + 30_000).events, 0);
    }

    #[test]
    fn the_window_ends_at_the_readers_clock() {
        let mut m = Meter::default();
        m.note(20_000);
        m.note(20_999);
        m.note(21_000);
        let r = m.read(21_500);
        assert_eq!(r.events, 3);
        assert_eq!(r.window_ms, 9_500);
        // A reader one second later: the second 12 (not remembered) starts it.
        assert_eq!(m.read(22_000).events, 3);
        assert_eq!(m.read(30_000).events, 1, "second 20 left the window");
    }

    #[test]
    fn a_gap_longer_than_the_window_clears_everything() {
        let mut m = Meter::default();
        for i in 0..100 {
            m.note(5_000 + i);
        }
        m.note(60_000);
        assert_eq!(m.read(60_001).events, 1);
    }

    #[test]
    fn a_late_stamp_lands_in_its_own_second_or_the_newest() {
        let mut m = Meter::default();
        m.note(50_000);
        m.note(48_500); // read before the other thread's 50_000
        assert_eq!(m.read(50_100).events, 2);
        assert_eq!(m.read(57_600).events, 2);
        assert_eq!(m.read(58_000).events, 1, "second 48 left first");
        m.note(1_000); // far older than anything remembered
        assert_eq!(m.read(58_000).events, 2);
    }

    #[test]
    fn an_early_clock_reads_the_whole_history() {
        let mut m = Meter::default();
        m.note(0);
        m.note(2_500);
        let r = m.read(3_000);
        assert_eq!(r.events, 2);
        assert_eq!(r.window_ms, 3_000);
        assert_eq!(Meter::default().read(0).per_second(), 0.0);
    }

    #[test]
    fn counts_saturate() {
        let mut m = Meter {
            slots: [u32::MAX; SLOTS],
            newest: 9,
        };
        m.note(9_000);
        assert_eq!(m.read(9_999).events, u64::from(u32::MAX) * 10);
    }
}
