//! Shared test support: a temporary directory, the real hub binary started
//! on port 0 with its stderr captured, a small raw HTTP client, and
//! deadline polling. Every socket has a read timeout so a hang fails fast.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Path of the binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_simplex-hub");

/// Generous deadline for anything that should happen "soon".
pub const DEADLINE: Duration = Duration::from_secs(20);

/// A directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!(
            "simplex-hub-test-{tag}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Polls `cond` until it is true or `timeout` passes.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The hub binary running in a child process.
pub struct TestHub {
    pub child: Child,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl TestHub {
    /// Starts `simplex-hub serve --listen 127.0.0.1:0 --data-dir <dir>` plus
    /// `extra` and waits for the readiness line.
    pub fn start(data_dir: &Path, extra: &[&str]) -> TestHub {
        let mut args: Vec<String> = vec![
            "serve".into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--data-dir".into(),
            data_dir.display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::start_args(data_dir, &args)
    }

    /// Starts the binary with exactly `args` and waits for readiness.
    pub fn start_args(data_dir: &Path, args: &[String]) -> TestHub {
        let mut child = Command::new(BIN)
            .args(args)
            .env("HOME", data_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn hub");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.split("panel: http://").nth(1) {
                    let _ = tx.send(url.trim().to_string());
                }
                sink.lock().unwrap().push(line);
            }
        });
        let addr = match rx.recv_timeout(DEADLINE) {
            Ok(addr) => addr.parse().expect("readiness address"),
            Err(_) => {
                let _ = child.kill();
                panic!("hub did not become ready; log: {:#?}", log.lock().unwrap());
            }
        };
        TestHub {
            child,
            addr,
            data_dir: data_dir.to_path_buf(),
            log,
        }
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        signal(self.child.id(), libc::SIGTERM);
        wait_exit(&mut self.child, DEADLINE).expect("hub did not exit after SIGTERM")
    }

    pub fn get(&self, path: &str) -> Response {
        self.request("GET", path, &[], b"")
    }

    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Response {
        let mut all = vec![("Host".to_string(), self.addr.to_string())];
        all.extend(headers.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        http(self.addr, method, path, &all, body)
    }

    /// Thread count of the hub process.
    pub fn threads(&self) -> usize {
        proc_status_field(self.child.id(), "Threads:").unwrap_or(0) as usize
    }

    /// Resident set size of the hub process in KiB.
    pub fn rss_kib(&self) -> u64 {
        proc_status_field(self.child.id(), "VmRSS:").unwrap_or(0)
    }
}

impl Drop for TestHub {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) with a pid we spawned; no memory is involved.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

pub fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let end = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn proc_status_field(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// A parsed HTTP response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|err| {
            panic!("not JSON ({err}): {}", String::from_utf8_lossy(&self.body))
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One request on a fresh connection (`Connection: close`).
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Response {
    let mut head = format!("{method} {path} HTTP/1.1\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("Connection: close\r\n\r\n");
    let mut raw = head.into_bytes();
    raw.extend_from_slice(body);
    raw_exchange(addr, &raw).expect("http exchange")
}

/// Writes `raw` bytes and reads until the server closes; parses the reply.
pub fn raw_exchange(addr: SocketAddr, raw: &[u8]) -> std::io::Result<Response> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(DEADLINE))?;
    stream.set_write_timeout(Some(DEADLINE))?;
    stream.write_all(raw)?;
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply)?;
    parse_response(&reply).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            String::from_utf8_lossy(&reply).into_owned(),
        )
    })
}

/// Parses a complete HTTP/1.1 response (Content-Length or read-to-close).
pub fn parse_response(raw: &[u8]) -> Option<Response> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..split]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if let Some(len) = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok())
    {
        body.truncate(len);
    }
    Some(Response {
        status,
        headers,
        body,
    })
}
