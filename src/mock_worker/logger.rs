//! A minimal `log` backend for the built-in worker process: one line per
//! record on stderr, `<time> <LEVEL> mock-worker: <message>`, so the hub's
//! log capture sees the worker's diagnostics. Endpoint tokens are never
//! logged (callers log redacted URLs).

use std::io::Write;

use crate::util::time;

struct StderrLogger;

static LOGGER: StderrLogger = StderrLogger;

impl log::Log for StderrLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) || !record.target().starts_with("simplex_hub") {
            return;
        }
        let line = format!(
            "{} {:<5} mock-worker: {}\n",
            time::now_rfc3339(),
            record.level(),
            record.args()
        );
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {}
}

/// Installs the logger at `info` (once; later calls do nothing).
pub(crate) fn init() {
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
}
