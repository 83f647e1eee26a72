//! The hub binary under test: started on port 0 with its stderr captured,
//! with a configuration file or a shell launcher; sessions over the JSON
//! API; deadline polling of what the hub reports; and its threads and
//! memory as `/proc` shows them.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{
    exchange_within, http, proc_status_field, signal, text_content, thread_names_of, wait_exit,
    wait_until, Response, TempDir, BIN, DEADLINE,
};

/// The hub binary running in a child process.
pub struct TestHub {
    pub child: Child,
    pub addr: SocketAddr,
    /// The remote-tools listener (from the `tools: ws://…` start line).
    pub tools_addr: Option<SocketAddr>,
    pub data_dir: PathBuf,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl TestHub {
    /// Starts `simplex-hub serve --listen 127.0.0.1:0 --tools-port 0
    /// --data-dir <dir>` plus `extra` and waits for the readiness line.
    /// Both listeners take free ports, so hubs can run in parallel.
    pub fn start(data_dir: &Path, extra: &[&str]) -> TestHub {
        let mut args: Vec<String> = vec![
            "serve".into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--tools-port".into(),
            "0".into(),
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
        // The tools line is logged before the readiness line.
        let tools_addr = log
            .lock()
            .unwrap()
            .iter()
            .find_map(|line| line.split("tools: ws://").nth(1))
            .and_then(|addr| addr.trim().parse().ok());
        TestHub {
            child,
            addr,
            tools_addr,
            data_dir: data_dir.to_path_buf(),
            log,
        }
    }

    /// The offline model provider's address, from its `mock provider:
    /// http://…` start line (logged before the readiness line).
    pub fn mock_provider_addr(&self) -> Option<SocketAddr> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .find_map(|line| line.split("mock provider: http://").nth(1))
            .and_then(|addr| addr.trim().parse().ok())
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        signal(self.child.id(), libc::SIGTERM);
        wait_exit(&mut self.child, DEADLINE).expect("hub did not exit after SIGTERM")
    }

    /// Sends SIGKILL and waits until the hub is gone.
    pub fn kill9(&mut self) {
        signal(self.child.id(), libc::SIGKILL);
        wait_exit(&mut self.child, DEADLINE).expect("the hub survived SIGKILL");
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

    /// Names of the hub's threads, sorted (for failure messages).
    pub fn thread_names(&self) -> Vec<String> {
        thread_names_of(self.child.id())
    }

    /// Hub threads whose name starts with `prefix` (`worker-std` for pipe
    /// readers, `http-conn`, `panel-`, `worker-events`, `disk-writer`).
    pub fn threads_named(&self, prefix: &str) -> usize {
        self.thread_names()
            .iter()
            .filter(|name| name.starts_with(prefix))
            .count()
    }

    /// Open file descriptors of the hub process.
    pub fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// Resident set size of the hub process in KiB.
    pub fn rss_kib(&self) -> u64 {
        proc_status_field(self.child.id(), "VmRSS:").unwrap_or(0)
    }

    /// Peak resident set size of the hub so far, in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        proc_status_field(self.child.id(), "VmHWM:").unwrap_or(0)
    }
}

impl Drop for TestHub {
    /// Stops the hub the way an operator would (SIGTERM: it stops its
    /// workers first), and kills it only if it does not exit in time.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            signal(self.child.id(), libc::SIGTERM);
            if wait_exit(&mut self.child, Duration::from_secs(10)).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

/// A hub started with `config` as its configuration file
/// (`<dir>/hub.test.jsonc`). Unless `config` sets `launcher.kind`, the file
/// gets `"built-in"`: sessions run the built-in worker, as on a fresh data
/// directory (a file without the key would mean `simplex-worker`, as it
/// does to the Node hub).
pub fn hub_with(dir: &TempDir, config: Value) -> TestHub {
    hub_with_args(dir, config, &[])
}

/// `hub_with` plus more command line arguments.
pub fn hub_with_args(dir: &TempDir, mut config: Value, extra: &[&str]) -> TestHub {
    if let Value::Object(map) = &mut config {
        let launcher = map.entry("launcher").or_insert_with(|| json!({}));
        if let Value::Object(launcher) = launcher {
            launcher.entry("kind").or_insert_with(|| json!("built-in"));
        }
    }
    let path = dir.path().join("hub.test.jsonc");
    std::fs::write(&path, config.to_string()).unwrap();
    let mut args = vec!["-c", path.to_str().unwrap()];
    args.extend_from_slice(extra);
    TestHub::start(dir.path(), &args)
}

/// Short stop-ladder timings (`worker` section), so escalation tests
/// finish quickly.
pub fn short_stop_ladder() -> Value {
    json!({"stopTimeoutMs": 1500, "sigtermGraceMs": 1000, "sigkillGraceMs": 3000})
}

/// A hub whose `command` launcher runs `script` under /bin/sh, with the
/// short stop ladder.
pub fn shell_hub(dir: &TempDir, script: &str) -> TestHub {
    hub_with(
        dir,
        json!({
            "launcher": {"kind": "command", "command": ["/bin/sh", "-c", script]},
            "worker": short_stop_ladder(),
        }),
    )
}

pub fn post(hub: &TestHub, path: &str, body: Value) -> Response {
    hub.request("POST", path, &[], body.to_string().as_bytes())
}

/// `POST /api/sessions` `{session: id}`; asserts 201.
#[track_caller]
pub fn create_session(hub: &TestHub, id: &str) {
    create_session_at(hub, "/api/sessions", json!({"session": id}));
}

/// `create_session` on a hub that wants the panel token `token`.
#[track_caller]
pub fn create_session_with_token(hub: &TestHub, id: &str, token: &str) {
    create_session_at(
        hub,
        &format!("/api/sessions?token={token}"),
        json!({"session": id}),
    );
}

/// `create_session` with a launch `spec`.
#[track_caller]
pub fn create_session_with_spec(hub: &TestHub, id: &str, spec: Value) {
    create_session_at(hub, "/api/sessions", json!({"session": id, "spec": spec}));
}

#[track_caller]
fn create_session_at(hub: &TestHub, path: &str, body: Value) {
    let res = post(hub, path, body);
    assert_eq!(res.status, 201, "{}", res.text());
}

/// `GET /api/sessions/<id>`: the session's description.
pub fn get_session(hub: &TestHub, id: &str) -> Value {
    hub.get(&format!("/api/sessions/{id}")).json()["session"].clone()
}

/// The ids `GET /api/sessions` lists, in its order.
pub fn session_ids(hub: &TestHub) -> Vec<String> {
    hub.get("/api/sessions").json()["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_string())
        .collect()
}

/// `POST /api/sessions/<id>/<what>` without a body (start, stop, …).
pub fn action(hub: &TestHub, id: &str, what: &str) -> Response {
    hub.request("POST", &format!("/api/sessions/{id}/{what}"), &[], b"")
}

/// The raw body of `GET /api/sessions/<id>/logs`.
pub fn logs_text(hub: &TestHub, id: &str) -> String {
    hub.get(&format!("/api/sessions/{id}/logs")).text()
}

/// One string field of every captured log line: `text` (the `lines`
/// themselves) or `stream`/`at` (from `line_meta`).
pub fn log_lines(hub: &TestHub, id: &str, field: &str) -> Vec<String> {
    let page = hub.get(&format!("/api/sessions/{id}/logs")).json();
    let (list, key) = match field {
        "text" => (&page["lines"], None),
        other => (&page["line_meta"], Some(other)),
    };
    list.as_array()
        .unwrap_or_else(|| panic!("no log lines: {page}"))
        .iter()
        .map(|l| {
            let value = key.map_or(l, |k| &l[k]);
            value.as_str().unwrap().to_string()
        })
        .collect()
}

/// Polls `GET /api/sessions/<id>` until `pred` holds; returns the session.
#[track_caller]
pub fn wait_session(hub: &TestHub, session: &str, mut pred: impl FnMut(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    let ok = wait_until(DEADLINE, || {
        last = get_session(hub, session);
        pred(&last)
    });
    assert!(ok, "session never reached the expected state: {last:#}");
    last
}

/// Waits until the hub has applied `events` envelopes of session `id`.
#[track_caller]
pub fn wait_events(hub: &TestHub, id: &str, events: u64) -> Value {
    wait_session(hub, id, |s| s["stats"]["events"] == events)
}

/// Polls the transcript until an event satisfies `pred`; returns it.
#[track_caller]
pub fn wait_event(hub: &TestHub, session: &str, pred: impl FnMut(&Value) -> bool) -> Value {
    wait_event_at(hub, &format!("/api/sessions/{session}/events"), pred)
}

/// `wait_event` on the transcript at `events` (a path with a query, such
/// as a panel token).
#[track_caller]
pub fn wait_event_at(hub: &TestHub, events: &str, mut pred: impl FnMut(&Value) -> bool) -> Value {
    let mut found = Value::Null;
    let ok = wait_until(DEADLINE, || {
        let page = hub.get(events).json();
        match page["events"]
            .as_array()
            .and_then(|e| e.iter().find(|e| pred(e)))
        {
            Some(e) => {
                found = e.clone();
                true
            }
            None => false,
        }
    });
    assert!(
        ok,
        "no matching event; transcript: {:#}",
        hub.get(events).json()
    );
    found
}

/// The `stdout` block of a built-in worker's `run_command` result text
/// (`stdout (N bytes):` and exactly N bytes; `docs/mock-worker.md`), or
/// None when the text has none.
pub fn stdout_block(text: &str) -> Option<&str> {
    let at = text.find("\nstdout (")? + "\nstdout (".len();
    let rest = &text[at..];
    let (count, body) = rest.split_once(" bytes):\n")?;
    body.get(..count.parse::<usize>().ok()?)
}

/// Sends `text` to `session` and returns the raw outcome lines of the
/// run's tool results once it finished.
pub fn run_tools(hub: &TestHub, session: &str, text: &str) -> Vec<String> {
    let res = post(
        hub,
        &format!("/api/sessions/{session}/input"),
        text_content(text),
    );
    assert_eq!(res.status, 202, "{}", res.text());
    let request_id = res.json()["request_id"].as_str().unwrap().to_string();
    let finished = wait_event(hub, session, |e| {
        e["event"] == "run_finished" && e["request_id"] == request_id.as_str()
    });
    let run_id = finished["run_id"].clone();
    let results = wait_event(hub, session, |e| {
        e["event"] == "tool_results" && e["run_id"] == run_id
    });
    results["data"]
        .as_array()
        .or_else(|| results["data"]["results"].as_array())
        .unwrap_or_else(|| panic!("tool results without a list: {results}"))
        .iter()
        .map(|r| r["output"]["raw"].as_str().unwrap().to_string())
        .collect()
}

/// The JSON of a `<route> succeeded: {...}` line.
pub fn succeeded(line: &str, route: &str) -> Value {
    let rest = line
        .strip_prefix(&format!("{route} succeeded: "))
        .unwrap_or_else(|| panic!("{line:?} is not a success of {route}"));
    serde_json::from_str(rest).unwrap()
}

/// A session's worker token, read from the hub's store (as an operator
/// configuring a hand-launched worker would).
pub fn worker_token(data_dir: &Path, session: &str) -> String {
    let conn = rusqlite::Connection::open(data_dir.join("hub.db")).unwrap();
    // The hub may hold the write lock for a moment (a commit, a checkpoint).
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .unwrap();
    conn.query_row("SELECT token FROM sessions WHERE id = ?1", [session], |r| {
        r.get(0)
    })
    .unwrap()
}

/// The worker event route of session `id`, with its token.
pub fn events_path(hub: &TestHub, id: &str) -> String {
    let token = worker_token(&hub.data_dir, id);
    format!("/agent/{id}/events?token={token}")
}

/// The worker confirmation route of session `id`, with its token.
pub fn confirm_path(hub: &TestHub, id: &str) -> String {
    let token = worker_token(&hub.data_dir, id);
    format!("/agent/{id}/confirm?token={token}")
}

/// `PRAGMA integrity_check` of the store in `data_dir` (`ok` when sound).
pub fn integrity_check(data_dir: &Path) -> String {
    let conn = rusqlite::Connection::open(data_dir.join("hub.db")).unwrap();
    conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap()
}

/// Starts the built-in worker by hand for `session`, with the generated
/// configuration a hub would write (the supervisor does this itself).
pub fn spawn_mock_worker(hub: &TestHub, session: &str, model: &str) -> Child {
    let token = worker_token(&hub.data_dir, session);
    let root = hub.data_dir.join("sessions").join(session);
    spawn_worker_at(&root, session, &token, hub.addr, hub.tools_addr, model)
}

/// Starts the built-in worker for `session` with its root (persistence
/// directory) `root`, pointed at a hub on `addr` (which need not listen
/// yet: the worker reconnects every 50-500 ms) with `token`: the worker
/// an earlier hub launched. Its configuration goes to
/// `<root>/config/config.yaml`.
pub fn spawn_worker_at(
    root: &Path,
    session: &str,
    token: &str,
    addr: SocketAddr,
    tools_addr: Option<SocketAddr>,
    model: &str,
) -> Child {
    let config = json!({
        "client": {
            "endpoint": format!("ws://{addr}/agent/{session}/events?token={token}"),
            "transport": {"initial_backoff_ms": 50, "max_backoff_ms": 500},
        },
        "security": {"confirmation": {
            "endpoint": format!("ws://{addr}/agent/{session}/confirm?token={token}"),
            "timeout_ms": 60000,
        }},
        "hub_remote_call": tools_addr.map(|tools| json!({
            "endpoint": format!("ws://{tools}/agent/{session}/tools?token={token}"),
            "timeout_ms": 60000,
        })),
        "worker": {"max_exchanges": 16, "event_capacity": 1024, "environment": {"workspace": ""}},
        "persistence": {"enabled": true, "directory": root, "state": "state", "memory": "memory",
                        "restore": "if_present", "readable": false},
        "providers": {"mock": {"plugin": "deepseek", "model": model}},
        "driver_model": "mock",
    });
    std::fs::create_dir_all(root.join("config")).unwrap();
    let path = root.join("config").join("config.yaml");
    std::fs::write(&path, config.to_string()).unwrap();
    Command::new(BIN)
        .args([
            "mock-worker",
            "--config",
            path.to_str().unwrap(),
            "--session",
            session,
        ])
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn mock worker")
}

/// Runs the hub binary with `args` (HOME = `home`) to its exit, with its
/// output captured (for start failures and the other subcommands).
pub fn run_bin(args: &[&str], home: &Path) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .env("HOME", home)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_exit(&mut child, DEADLINE).expect("command did not finish");
    child.wait_with_output().unwrap()
}

/// The captured stderr of `out` as text.
pub fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A loopback port that was free a moment ago (for a hub that must come
/// up on an address a worker already knows).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until the hub has at most `max` threads besides its disk writers;
/// panics with the thread names otherwise. Disk writers (`disk-writer`)
/// are one per session's events.jsonl and one per worker's worker.log,
/// kept while the session lives, so they are bounded separately: at most
/// two per session.
#[track_caller]
pub fn threads_settle(hub: &TestHub, max: usize) -> bool {
    let others = || {
        hub.threads()
            .saturating_sub(hub.threads_named("disk-writer"))
    };
    if !wait_until(DEADLINE, || others() <= max) {
        panic!("{} threads > {max}: {:?}", others(), hub.thread_names());
    }
    let sessions = hub.get("/api/sessions").json()["sessions"]
        .as_array()
        .map_or(0, Vec::len);
    let writers = hub.threads_named("disk-writer");
    assert!(
        writers <= 2 * sessions,
        "{writers} disk writers for {sessions} sessions"
    );
    true
}

/// Whether the hub answers `GET /api/meta` within `within`.
pub fn answers_within(hub: &TestHub, within: Duration) -> bool {
    let raw = format!(
        "GET /api/meta HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        hub.addr
    );
    let started = Instant::now();
    match exchange_within(hub.addr, raw.as_bytes(), within) {
        Ok(reply) => reply.starts_with("HTTP/1.1 200 ") && started.elapsed() <= within,
        Err(_) => false,
    }
}

static HEAVY: Mutex<()> = Mutex::new(());

/// Tests that flood or measure hold this while they run, one at a time, so
/// a slow 2-core machine gives each the CPU it needs.
pub fn heavy() -> MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts a supervised parent session `p` and has its worker fork one
/// child; returns the child's id once it is ready and connected.
pub fn fork_child(hub: &TestHub) -> String {
    create_session(hub, "p");
    let started = post(hub, "/api/sessions/p/start", json!({}));
    assert_eq!(started.status, 200, "{}", started.text());
    wait_session(hub, "p", |s| s["identity"]["state"] == "live");
    fork_from(hub, "p")
}

/// Has the live session `parent`'s worker clean-fork a child; returns the
/// child's id once it is ready and live.
pub fn fork_from(hub: &TestHub, parent: &str) -> String {
    let res = post(
        hub,
        &format!("/api/sessions/{parent}/input"),
        text_content("/fork"),
    );
    assert_eq!(res.status, 202, "{}", res.text());
    let mut child = String::new();
    let ok = wait_until(DEADLINE, || {
        let list = hub.get("/api/sessions").json()["sessions"].clone();
        let found = list.as_array().unwrap().iter().find(|s| {
            s["kind"] == "headless"
                && s["subagent"]["lifecycle"] == "ready"
                && s["identity"]["state"] == "live"
        });
        if let Some(s) = found {
            child = s["session_id"].as_str().unwrap().to_string();
        }
        found.is_some()
    });
    assert!(ok, "no ready child; hub log:\n{}", hub.log_text());
    assert!(child.starts_with("subagent-"), "{child}");
    child
}

/// Has the parent send `raw` to the child as a message.
pub fn send_to_child(hub: &TestHub, child: &str, raw: &str) {
    let res = post(
        hub,
        "/api/sessions/p/input",
        text_content(&format!("/send {child} {raw}")),
    );
    assert_eq!(res.status, 202, "{}", res.text());
}
