//! Runs an approved `run_command` call for real: `/bin/sh -c <command>` in
//! the workspace, stdin from `/dev/null`, stdout and stderr captured (each
//! drained on its own thread, kept up to [`OUTPUT_LIMIT`]), killed with its
//! process group when it outlives the time limit.
//!
//! Runs on a helper thread; the shell reads [`Running::pgid`] to kill the
//! command's process group if the worker exits first.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::conversation::clip;
use super::engine::ToolOutput;

/// Captured output kept per stream, and in the combined text (1 MiB).
pub(crate) const OUTPUT_LIMIT: usize = 1024 * 1024;
/// How often the child is polled for exit.
const POLL: Duration = Duration::from_millis(20);
/// How long pipes held open by background descendants are waited for
/// after the command itself exited.
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// The process group of the command being run (0 when none).
#[derive(Default)]
pub(crate) struct Running {
    pub pgid: AtomicI32,
}

#[derive(Default)]
struct Capture {
    bytes: Vec<u8>,
    discarded: usize,
    done: bool,
}

fn drain(mut pipe: impl Read + Send + 'static, capture: Arc<Mutex<Capture>>) {
    thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let mut c = capture.lock().unwrap_or_else(|e| e.into_inner());
                    let room = OUTPUT_LIMIT.saturating_sub(c.bytes.len()).min(n);
                    c.bytes.extend_from_slice(&buf[..room]);
                    c.discarded += n - room;
                }
            }
        }
        capture.lock().unwrap_or_else(|e| e.into_inner()).done = true;
    });
}

/// Runs `command`; never panics, every failure is described in the output.
pub(crate) fn run(
    command: &str,
    workspace: &Path,
    limit: Duration,
    running: &Running,
) -> ToolOutput {
    if let Err(err) = std::fs::create_dir_all(workspace) {
        return failed(format!(
            "cannot create workspace {}: {err}",
            workspace.display()
        ));
    }
    let spawned = Command::new("/bin/sh")
        .arg("-c")
        .arg(command)
        .current_dir(workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(err) => return failed(format!("cannot start /bin/sh: {err}")),
    };
    let pid = child.id() as i32;
    running.pgid.store(pid, Ordering::SeqCst);
    let out = Arc::new(Mutex::new(Capture::default()));
    let err = Arc::new(Mutex::new(Capture::default()));
    if let Some(pipe) = child.stdout.take() {
        drain(pipe, out.clone());
    }
    if let Some(pipe) = child.stderr.take() {
        drain(pipe, err.clone());
    }
    let started = Instant::now();
    let deadline = started + limit;
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => {
                timed_out = true;
                // SAFETY: signalling the process group this function created.
                unsafe { libc::killpg(pid, libc::SIGKILL) };
                break child.wait().ok();
            }
            Ok(None) => thread::sleep(POLL),
            Err(_) => break None,
        }
    };
    running.pgid.store(0, Ordering::SeqCst);
    let grace = Instant::now() + PIPE_GRACE;
    while Instant::now() < grace {
        let finished = |c: &Arc<Mutex<Capture>>| c.lock().map(|c| c.done).unwrap_or(true);
        if finished(&out) && finished(&err) {
            break;
        }
        thread::sleep(POLL);
    }
    let take = |c: &Arc<Mutex<Capture>>| {
        let c = c.lock().unwrap_or_else(|e| e.into_inner());
        (String::from_utf8_lossy(&c.bytes).into_owned(), c.discarded)
    };
    let (stdout, lost_out) = take(&out);
    let (stderr, lost_err) = take(&err);
    let exit_code = status.and_then(|s| s.code());
    let signal = status.and_then(|s| s.signal());
    let report = Report {
        exit_code,
        signal,
        timed_out,
        milliseconds: started.elapsed().as_millis(),
    };
    let mut raw = document(&report, (&stdout, lost_out > 0), (&stderr, lost_err > 0));
    let mut truncated = lost_out + lost_err > 0;
    if raw.len() > OUTPUT_LIMIT {
        raw = clip(&raw, OUTPUT_LIMIT).to_string();
        truncated = true;
    }
    ToolOutput {
        raw,
        exit_code,
        signal,
        timed_out,
        truncated,
        error: None,
    }
}

/// What the process did, for the fields of the output document.
struct Report {
    exit_code: Option<i32>,
    signal: Option<i32>,
    timed_out: bool,
    milliseconds: u128,
}

/// The result text in the real worker's process-tool layout:
/// `[[name]]: value` fields, a blank line, then one block per stream,
/// `name (N bytes):` followed by exactly N bytes of output (and a line
/// break when the output does not end with one), blocks separated by a
/// blank line; `name: (empty)` for a stream with no output, and
/// `name (truncated, first N bytes):` when output beyond the capture
/// bound was discarded.
fn document(report: &Report, stdout: (&str, bool), stderr: (&str, bool)) -> String {
    use std::fmt::Write as _;
    let mut raw = String::new();
    let state = if report.timed_out || report.signal.is_some() {
        "killed"
    } else {
        "exited"
    };
    let _ = writeln!(raw, "[[state]]: {state}");
    if let Some(code) = report.exit_code {
        let _ = writeln!(raw, "[[exit_code]]: {code}");
    }
    if let Some(signal) = report.signal {
        let _ = writeln!(raw, "[[signal]]: {signal}");
    }
    if report.timed_out {
        raw.push_str("[[timed_out]]: true\n");
    }
    let _ = writeln!(raw, "[[running_milliseconds]]: {}", report.milliseconds);
    for (name, (text, truncated)) in [("stdout", stdout), ("stderr", stderr)] {
        raw.push('\n');
        match (text.is_empty(), truncated) {
            (true, false) => {
                let _ = writeln!(raw, "{name}: (empty)");
                continue;
            }
            (true, true) => {
                let _ = writeln!(raw, "{name}: (empty, truncated)");
                continue;
            }
            (false, false) => {
                let _ = writeln!(raw, "{name} ({} bytes):", text.len());
            }
            (false, true) => {
                let _ = writeln!(raw, "{name} (truncated, first {} bytes):", text.len());
            }
        }
        raw.push_str(text);
        if !text.ends_with('\n') {
            raw.push('\n');
        }
    }
    raw
}

fn failed(message: String) -> ToolOutput {
    ToolOutput {
        raw: message.clone(),
        error: Some(message),
        ..ToolOutput::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> std::path::PathBuf {
        std::env::temp_dir().join(format!("mock-command-{}", uuid::Uuid::new_v4()))
    }

    #[test]
    fn captures_both_streams_and_the_exit_code() {
        let dir = workspace();
        let running = Running::default();
        let output = run(
            "printf out; printf err >&2; touch marker; exit 7",
            &dir,
            Duration::from_secs(10),
            &running,
        );
        let fields = output.raw.split("\n\n").next().unwrap();
        assert!(
            fields.starts_with("[[state]]: exited\n[[exit_code]]: 7\n[[running_milliseconds]]: "),
            "{}",
            output.raw
        );
        assert!(
            output
                .raw
                .ends_with("\n\nstdout (3 bytes):\nout\n\nstderr (3 bytes):\nerr\n"),
            "{}",
            output.raw
        );
        assert_eq!(output.exit_code, Some(7));
        assert!(!output.timed_out && !output.truncated);
        assert!(dir.join("marker").exists(), "ran in the workspace");
        assert_eq!(running.pgid.load(Ordering::SeqCst), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn output_is_bounded_and_time_is_limited() {
        let dir = workspace();
        let running = Running::default();
        let big = run(
            "head -c 3000000 /dev/zero | tr '\\0' x",
            &dir,
            Duration::from_secs(20),
            &running,
        );
        assert_eq!(big.raw.len(), OUTPUT_LIMIT);
        assert!(big.truncated);
        assert!(big
            .raw
            .contains("\nstdout (truncated, first 1048576 bytes):\nxxx"));
        let started = Instant::now();
        let slow = run("sleep 30", &dir, Duration::from_millis(200), &running);
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(slow.timed_out);
        assert_eq!(slow.exit_code, None);
        assert_eq!(slow.signal, Some(libc::SIGKILL));
        assert!(slow
            .raw
            .starts_with("[[state]]: killed\n[[signal]]: 9\n[[timed_out]]: true\n"));
        assert!(
            slow.raw.ends_with("\nstdout: (empty)\n\nstderr: (empty)\n"),
            "{}",
            slow.raw
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
