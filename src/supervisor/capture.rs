//! Worker output capture: one reader thread per pipe feeds its own line
//! splitter, then the session's bounded log ring (under the registry lock,
//! once per read) and the optional `logs/worker.log` (never waited on).
//! After the worker exits, a reader gives its pipe one more second to reach
//! EOF (a grandchild may hold it open), then flushes and ends.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::session::Sessions;
use crate::util::bounded_writer::{self, BoundedWriter};
use crate::util::log_ring::Stream;
use crate::util::thread::Stack;
use crate::util::time;
use crate::wire::line_splitter::{Line, LineSplitter};

/// How long a pipe may stay open after its worker exited.
pub const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(1);

/// Set by the waiter thread when the worker exits (milliseconds since the
/// Unix epoch; 0 while running).
#[derive(Debug, Default)]
pub struct ExitFlag(AtomicU64);

impl ExitFlag {
    pub fn set(&self) {
        self.0.store(time::now_millis().max(1), Ordering::Release);
    }

    fn exited_at(&self) -> Option<u64> {
        match self.0.load(Ordering::Acquire) {
            0 => None,
            ms => Some(ms),
        }
    }
}

/// The worker.log writer of one worker process.
pub fn log_writer(session: &str, path: &Path) -> Arc<BoundedWriter> {
    Arc::new(BoundedWriter::new(
        path.to_path_buf(),
        bounded_writer::DEFAULT_BUDGET,
        bounded_writer::worker_log_omission_marker,
        format!("session {session} worker.log"),
    ))
}

/// Rotates `worker.log` at start when it has reached `max_bytes`: `.1` is
/// the newest old generation, at most `files` generations are kept. A
/// failure is logged and never blocks the start.
pub fn rotate(path: &Path, max_bytes: u64, files: usize) {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return;
    };
    if !meta.is_file() || meta.len() < max_bytes {
        return;
    }
    let generation = |n: usize| path.with_extension(format!("log.{n}"));
    let _ = std::fs::remove_file(generation(files));
    for n in (1..files).rev() {
        let _ = std::fs::rename(generation(n), generation(n + 1));
    }
    if files == 0 {
        let _ = std::fs::remove_file(path);
    } else if let Err(err) = std::fs::rename(path, generation(1)) {
        log::warn!("cannot rotate {}: {err}", path.display());
    }
}

/// Starts one reader thread per pipe.
pub fn spawn_readers(
    sessions: &Arc<Sessions>,
    session: &str,
    lifecycle_id: &str,
    stdout: Option<std::process::ChildStdout>,
    stderr: Option<std::process::ChildStderr>,
    file: Arc<BoundedWriter>,
    exited: Arc<ExitFlag>,
) -> Vec<JoinHandle<()>> {
    let mut handles = Vec::new();
    let pipes: [(Stream, Option<Box<dyn PipeRead>>); 2] = [
        (
            Stream::Stdout,
            stdout.map(|p| Box::new(p) as Box<dyn PipeRead>),
        ),
        (
            Stream::Stderr,
            stderr.map(|p| Box::new(p) as Box<dyn PipeRead>),
        ),
    ];
    for (stream, pipe) in pipes {
        let Some(pipe) = pipe else { continue };
        let sessions = sessions.clone();
        let session = session.to_string();
        let lifecycle = lifecycle_id.to_string();
        let file = file.clone();
        let exited = exited.clone();
        let name = format!("worker-{}", stream.as_str());
        let spawned = crate::util::thread::spawn(&name, Stack::Medium, move || {
            read_pipe(
                &sessions, &session, &lifecycle, stream, pipe, &file, &exited,
            )
        });
        match spawned {
            Ok(handle) => handles.push(handle),
            Err(err) => log::error!("cannot start a pipe reader: {err}"),
        }
    }
    handles
}

/// A readable pipe with a raw fd for `poll`.
pub trait PipeRead: Read + AsRawFd + Send {}
impl<T: Read + AsRawFd + Send> PipeRead for T {}

fn read_pipe(
    sessions: &Sessions,
    session: &str,
    lifecycle: &str,
    stream: Stream,
    mut pipe: Box<dyn PipeRead>,
    file: &BoundedWriter,
    exited: &ExitFlag,
) {
    let mut splitter = LineSplitter::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut lines = Vec::new();
    let fd = pipe.as_raw_fd();
    loop {
        if let Some(at) = exited.exited_at() {
            let deadline = Duration::from_millis(at) + DRAIN_AFTER_EXIT;
            let now = Duration::from_millis(time::now_millis());
            if now >= deadline {
                break;
            }
        }
        if !crate::util::poll::readable(fd, Duration::from_millis(250)) {
            continue;
        }
        match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => splitter.push(&buf[..n], &mut lines),
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
        if !lines.is_empty() {
            deliver(sessions, session, lifecycle, stream, &mut lines, file);
        }
    }
    splitter.finish(&mut lines);
    deliver(sessions, session, lifecycle, stream, &mut lines, file);
}

/// Hands finished lines to the ring (one lock per batch) and the file.
fn deliver(
    sessions: &Sessions,
    session: &str,
    lifecycle: &str,
    stream: Stream,
    lines: &mut Vec<Line>,
    file: &BoundedWriter,
) {
    if lines.is_empty() {
        return;
    }
    for line in lines.iter() {
        file.write_record(&line.text);
    }
    let now = time::now_millis();
    let batch = std::mem::take(lines);
    sessions.with(session, |s| s.capture_output(lifecycle, stream, batch, now));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testkit::TempDir;

    #[test]
    fn rotation_keeps_the_configured_generations() {
        let dir = TempDir::new("rotate");
        let log = dir.join("worker.log");
        let write = |text: &str| std::fs::write(&log, text).unwrap();
        let read = |n: usize| std::fs::read_to_string(log.with_extension(format!("log.{n}"))).ok();
        write("small");
        rotate(&log, 100, 2);
        assert!(log.exists(), "a file under the threshold is not rotated");
        for generation in ["first", "second", "third"] {
            write(&generation.repeat(40));
            rotate(&log, 100, 2);
            assert!(!log.exists());
        }
        assert_eq!(read(1).unwrap(), "third".repeat(40));
        assert_eq!(read(2).unwrap(), "second".repeat(40));
        assert_eq!(read(3), None, "only two generations are kept");
    }
}
