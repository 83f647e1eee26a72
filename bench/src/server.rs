//! The two servers under test and what the harness reads about a process:
//! A = the simplex-hub release binary, B = the Node.js `ws` relay
//! (`bench/baselines/relay.js`). Both are started the same way (pinned to
//! the server core, stderr captured, ready when they print
//! `panel: http://ADDR`) and driven through the same wire shapes.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::wire;

/// Whether this hub build accepts `toolRequests.port` (cleared on refusal).
static TOOLS_KEY: AtomicBool = AtomicBool::new(true);

/// Whether this hub build has the `built-in` launcher kind (cleared on
/// refusal: older builds ran the built-in worker without naming it, and a
/// configuration file without `launcher.kind` now means Node's
/// `simplex-worker`).
static BUILTIN_KIND: AtomicBool = AtomicBool::new(true);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Hub,
    Node,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Hub => "hub",
            Kind::Node => "node",
        }
    }
}

/// Paths and CPU placement shared by every scenario.
#[derive(Clone, Debug)]
pub struct Env {
    pub hub_bin: PathBuf,
    pub relay_js: PathBuf,
    pub node_bin: PathBuf,
    /// CPU the servers are pinned to (None: no pinning).
    pub server_cpu: Option<usize>,
    pub tmp: PathBuf,
}

impl Env {
    pub fn detect() -> Env {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap()
            .to_path_buf();
        let hub_bin = std::env::var_os("BENCH_HUB_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target/release/simplex-hub"));
        let relay_js = root.join("bench/baselines/relay.js");
        let node_bin =
            std::env::var_os("BENCH_NODE").map_or_else(|| PathBuf::from("node"), PathBuf::from);
        // Online CPUs, not this process's affinity (which a `taskset` in
        // front of the harness would narrow).
        // SAFETY: sysconf has no memory effects.
        let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
        let pin = std::env::var("BENCH_NO_PIN").is_err() && cpus >= 2;
        let tmp = std::env::temp_dir().join(format!("simplex-bench-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        if pin {
            // The load side (this process and its threads) runs on CPU 1.
            pin_self(1);
        }
        Env {
            hub_bin,
            relay_js,
            node_bin,
            server_cpu: pin.then_some(0),
            tmp,
        }
    }

    pub fn fresh_dir(&self, tag: &str) -> PathBuf {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = self.tmp.join(format!("{tag}-{n}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.tmp);
    }
}

pub fn pin_self(cpu: usize) {
    // SAFETY: sched_setaffinity on this process with a zeroed, then filled
    // cpu_set_t of the right size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        // Tighter sleeps for the paced sender.
        libc::prctl(libc::PR_SET_TIMERSLACK, 1u64, 0, 0, 0);
    }
    // Threads spawned later inherit the mask.
}

/// A running server.
pub struct Server {
    pub kind: Kind,
    pub child: Child,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    /// stderr lines with the instant each arrived.
    pub log: Arc<Mutex<Vec<(Instant, String)>>>,
    /// From spawn to the readiness line.
    pub ready_after: Duration,
}

/// Options for one server start.
#[derive(Default, Clone)]
pub struct Opts {
    /// Hub configuration file contents (JSONC); ignored by the relay.
    pub hub_config: Option<String>,
    /// `--listen` address (default 127.0.0.1:0).
    pub listen: Option<String>,
    /// Reuse this data directory instead of a fresh one.
    pub data_dir: Option<PathBuf>,
}

impl Server {
    pub fn start(env: &Env, kind: Kind, opts: &Opts) -> Server {
        let data_dir = opts
            .data_dir
            .clone()
            .unwrap_or_else(|| env.fresh_dir(kind.label()));
        let listen = opts.listen.clone().unwrap_or_else(|| "127.0.0.1:0".into());
        let mut cmd = match kind {
            Kind::Hub => {
                let mut c = Command::new(&env.hub_bin);
                c.args(["serve", "--listen", &listen, "--data-dir"])
                    .arg(&data_dir)
                    .env("HOME", &data_dir);
                // Always a configuration file: the remote-tools listener
                // (where the build has it) must not take a fixed port.
                let mut cfg: serde_json::Value = opts
                    .hub_config
                    .as_deref()
                    .map(|t| serde_json::from_str(t).expect("hub config is JSON"))
                    .unwrap_or_else(|| serde_json::json!({}));
                if TOOLS_KEY.load(Ordering::Relaxed) {
                    cfg["toolRequests"] = serde_json::json!({"port": 0});
                }
                if BUILTIN_KIND.load(Ordering::Relaxed) && cfg.get("launcher").is_none() {
                    cfg["launcher"] = serde_json::json!({"kind": "built-in"});
                }
                let path = data_dir.join("bench.config.json");
                std::fs::write(&path, cfg.to_string()).unwrap();
                c.arg("-c").arg(path);
                c
            }
            Kind::Node => {
                let mut c = Command::new(&env.node_bin);
                c.arg(&env.relay_js).args(["--listen", &listen]);
                c
            }
        };
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let cpu = env.server_cpu;
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if let Some(cpu) = cpu {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu, &mut set);
                    libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
                }
                // An interrupted harness stops its servers too (servers are
                // always started from the main thread, which lives until
                // the end).
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let spawned = Instant::now();
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {kind:?}: {e}"));
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let now = Instant::now();
                if let Some(url) = line.split("panel: http://").nth(1) {
                    let _ = tx.send((now, url.trim().to_string()));
                }
                sink.lock().unwrap().push((now, line));
            }
        });
        let (at, addr) = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(v) => v,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                // Let the stderr reader finish: it drops `tx` at the end of
                // the stream (at most a second, should another process
                // still hold the pipe).
                let end = Instant::now() + Duration::from_secs(1);
                while rx
                    .recv_timeout(end.saturating_duration_since(Instant::now()))
                    .is_ok()
                {}
                let lines: Vec<String> = log.lock().unwrap().iter().map(|l| l.1.clone()).collect();
                let refused = lines
                    .iter()
                    .any(|l| l.contains("toolRequests") && l.contains("not supported"));
                if kind == Kind::Hub && refused && TOOLS_KEY.swap(false, Ordering::Relaxed) {
                    // A build without the remote-tools listener.
                    return Server::start(env, kind, opts);
                }
                let no_builtin = lines.iter().any(|l| l.contains("launcher.kind"));
                if kind == Kind::Hub && no_builtin && BUILTIN_KIND.swap(false, Ordering::Relaxed) {
                    // A build from before the `built-in` launcher kind.
                    return Server::start(env, kind, opts);
                }
                panic!("{kind:?} did not become ready: {lines:#?}");
            }
        };
        Server {
            kind,
            child,
            addr: addr.parse().expect("readiness address"),
            data_dir,
            log,
            ready_after: at - spawned,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Creates a session and returns its worker token.
    pub fn create_session(&self, id: &str) -> String {
        let body = format!("{{\"session\":\"{id}\"}}");
        let (status, reply) = wire::http(self.addr, "POST", "/api/sessions", &body).unwrap();
        assert_eq!(status, 201, "create session {id}: {reply}");
        match self.kind {
            Kind::Node => "bench".into(),
            Kind::Hub => {
                let conn = rusqlite::Connection::open(self.data_dir.join("hub.db")).unwrap();
                conn.query_row("SELECT token FROM sessions WHERE id = ?1", [id], |r| {
                    r.get(0)
                })
                .unwrap()
            }
        }
    }

    pub fn worker_path(&self, session: &str, token: &str) -> String {
        format!("/agent/{session}/events?token={token}")
    }

    pub fn cpu(&self) -> Duration {
        proc_cpu(self.pid())
    }

    pub fn rss_kib(&self) -> u64 {
        status_field(self.pid(), "VmRSS:").unwrap_or(0)
    }

    pub fn threads(&self) -> u64 {
        status_field(self.pid(), "Threads:").unwrap_or(0)
    }

    pub fn fds(&self) -> u64 {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid())).map_or(0, |d| d.count() as u64)
    }

    /// stderr lines containing `needle`, with their arrival instants.
    pub fn log_lines(&self, needle: &str) -> Vec<(Instant, String)> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.1.contains(needle))
            .cloned()
            .collect()
    }

    /// SIGTERM, then SIGKILL after `grace`.
    pub fn stop(mut self) {
        self.stop_in_place();
    }

    fn stop_in_place(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill(2) on our own child.
            unsafe {
                libc::kill(self.child.id() as i32, libc::SIGTERM);
            }
            let end = Instant::now() + Duration::from_secs(20);
            while Instant::now() < end {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop_in_place();
    }
}

/// utime + stime of a process (all its threads, live and exited).
pub fn proc_cpu(pid: u32) -> Duration {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses.
    let rest = text.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); utime is field 14, stime field 15.
    let ticks: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_nanos(ticks * 1_000_000_000 / hz)
}

pub fn status_field(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// CPU time of this (load-generating) process.
pub fn self_cpu() -> Duration {
    // SAFETY: getrusage writes into a zeroed struct we own.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
