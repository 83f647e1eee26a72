//! Following a launcher that daemonizes (`launcher.pidFile`): when the
//! spawned launcher exits cleanly, the worker is the process whose pid it
//! left in the pid file. That pid is trusted only if the process is alive,
//! is not the launcher itself, and started no earlier than the launcher
//! did (`/proc` start times, the same evidence adoption uses), so a stale
//! pid file can never hand the hub a stranger that later took the number.
//! The process found is pinned through a pidfd before anything relies on
//! it.
//!
//! [`parse_pid`] is pure; [`find`] reads the file and `/proc`.

use std::path::Path;
use std::time::{Duration, Instant};

use super::sys::{self, Pinned};

/// How long after the launcher's exit the pid file may take to name the
/// worker (a daemon may write it after its parent has exited).
pub const PID_FILE_WAIT: Duration = Duration::from_secs(5);

/// How often the pid file is read while waiting for it.
const POLL: Duration = Duration::from_millis(20);

/// The pid in a pid file's text: one decimal number (surrounding
/// whitespace allowed), greater than 1. Anything else names nothing.
pub fn parse_pid(text: &str) -> Option<u32> {
    let text = text.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<u32>().ok().filter(|pid| *pid > 1)
}

/// What the pid file says after the launcher `launcher` (pid and start
/// time) exited.
#[derive(Debug)]
pub enum Found {
    /// A live process started at or after the launcher: the worker, pinned.
    Worker(Pinned),
    /// The file names the launcher itself: it was the worker, and it ended.
    Launcher,
    /// Nothing usable appeared before the deadline.
    Nothing,
}

/// Reads `pid_file` until it names the worker or `wait` passes (see the
/// module header for the rules). Sleeps between reads; run it on a thread
/// that may block.
pub fn find(pid_file: &Path, launcher: u32, launcher_start: u64, wait: Duration) -> Found {
    let deadline = Instant::now() + wait;
    loop {
        let named = std::fs::read_to_string(pid_file)
            .ok()
            .as_deref()
            .and_then(parse_pid);
        match named {
            Some(pid) if pid == launcher => return Found::Launcher,
            Some(pid) => {
                if let Some(pinned) = pin_if_newer(pid, launcher_start) {
                    return Found::Worker(pinned);
                }
            }
            None => {}
        }
        let now = Instant::now();
        if now >= deadline {
            return Found::Nothing;
        }
        #[expect(
            clippy::disallowed_methods,
            reason = "another process writes the pid file, with no signal to us: it is \
                      read again every POLL until PID_FILE_WAIT passes"
        )]
        std::thread::sleep(POLL.min(deadline - now));
    }
}

/// Pins `pid` if it is alive and started no earlier than `not_before`.
fn pin_if_newer(pid: u32, not_before: u64) -> Option<Pinned> {
    let start = sys::proc_start_time(pid).ok()?;
    if start < not_before {
        return None;
    }
    Pinned::open(pid, start).ok().filter(Pinned::is_alive)
}

#[cfg(test)]
// The late writer's pause is what the test is about.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use crate::util::testkit::TempDir;
    use std::process::{Command, Stdio};

    #[test]
    fn pid_file_text() {
        assert_eq!(parse_pid("1234\n"), Some(1234));
        assert_eq!(parse_pid("  77  "), Some(77));
        for bad in [
            "",
            "\n",
            "0",
            "1",
            "-5",
            "12x",
            "x12",
            "1 2",
            "99999999999",
            "+3",
        ] {
            assert_eq!(parse_pid(bad), None, "{bad:?}");
        }
    }

    /// A real child that runs until killed, reaped on drop.
    struct Sleeper(std::process::Child);

    impl Drop for Sleeper {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn sleeper() -> Sleeper {
        Sleeper(
            Command::new("sleep")
                .arg("60")
                .stdin(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }

    #[test]
    fn only_a_live_process_newer_than_the_launcher_is_the_worker() {
        let dir = TempDir::new("pidfile");
        let file = dir.join("w.pid");
        let me = std::process::id();
        let my_start = sys::proc_start_time(me).unwrap();

        let worker = sleeper();
        let pid = worker.0.id();
        let start = sys::proc_start_time(pid).unwrap();
        std::fs::write(&file, format!("{pid}\n")).unwrap();
        match find(&file, me, my_start, Duration::ZERO) {
            Found::Worker(pinned) => {
                assert_eq!(pinned.pid(), pid);
                assert_eq!(pinned.start_time(), start);
            }
            other => panic!("{other:?}"),
        }
        // A process that started before the launcher is a stale entry.
        assert!(matches!(
            find(&file, me, start + 1, Duration::ZERO),
            Found::Nothing
        ));
        // The launcher's own pid: it was the worker.
        std::fs::write(&file, format!("{me}")).unwrap();
        assert!(matches!(
            find(&file, me, my_start, Duration::ZERO),
            Found::Launcher
        ));
        // A dead pid, garbage, or no file at all name nothing.
        drop(worker);
        std::fs::write(&file, format!("{pid}")).unwrap();
        assert!(matches!(
            find(&file, me, my_start, Duration::ZERO),
            Found::Nothing
        ));
        std::fs::write(&file, "soon").unwrap();
        assert!(matches!(
            find(&file, me, my_start, Duration::ZERO),
            Found::Nothing
        ));
        assert!(matches!(
            find(&dir.join("missing.pid"), me, my_start, Duration::ZERO),
            Found::Nothing
        ));
    }

    #[test]
    fn a_pid_file_written_late_is_waited_for() {
        let dir = TempDir::new("pidfile-late");
        let file = dir.join("w.pid");
        let me = std::process::id();
        let my_start = sys::proc_start_time(me).unwrap();
        let worker = sleeper();
        let pid = worker.0.id();
        let writer = {
            let file = file.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(200));
                std::fs::write(file, pid.to_string()).unwrap();
            })
        };
        let found = find(&file, me, my_start, Duration::from_secs(30));
        writer.join().unwrap();
        assert!(matches!(found, Found::Worker(p) if p.pid() == pid));
    }
}
