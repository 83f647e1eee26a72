//! SIGKILL of the hub at random moments (issue 18): 50 trials, each
//! killing the hub while it writes sessions, plans, subagent receipts and
//! worker configuration files at once. After each kill the store is sound
//! (`PRAGMA integrity_check`) and every hub-written file is whole (the old
//! or the new version, never a torn one); after each restart every
//! acknowledged write is there. The kill moment comes from a seeded
//! xorshift; the seed is printed, and `SIMPLEX_KILL_SEED=<n>` replays it.
//!
//! The writers, all at once against one hub:
//! - two clients creating sessions (`POST /api/sessions`, acknowledged
//!   by 201);
//! - `plan/replace` on the tools listener from a session's live worker
//!   (acknowledged by `succeeded` with its revision);
//! - `subagent/send` from that worker to its headless child (acknowledged
//!   by `succeeded`; the receipt is committed before the answer);
//! - force-kill and start of a third session's worker, each start writing
//!   its configuration snapshots (and `config.yaml` when the endpoints
//!   changed: every restarted hub listens on a new port).
//!
//! Workers are `sleep` under the `command` launcher: they outlive the
//! killed hub and are adopted by the next one, as real workers are; raw
//! sockets speak for them.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::util::*;

const TRIALS: u64 = 50;

/// The kill lands this long after the writers start, at most.
const MAX_KILL_AFTER_MS: u64 = 500;

/// xorshift64: the kill moments, reproducible from the printed seed.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

fn seed() -> u64 {
    std::env::var("SIMPLEX_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
        | 1 // xorshift needs a state other than 0
}

/// What one trial's clients were told succeeded.
#[derive(Default)]
struct Acks {
    /// Sessions whose creation was answered 201.
    created: Vec<String>,
    /// Sessions whose deletion was asked for (it may or may not have
    /// happened when no answer came).
    deleting: Vec<String>,
    /// Sessions whose deletion was answered 200.
    deleted: Vec<String>,
    /// (revision, markdown) of each succeeded plan replacement.
    plans: Vec<(u64, String)>,
    /// The tool request id of each succeeded send, its text, and the
    /// request id the child's worker was given.
    sends: Vec<(String, String, String)>,
    /// Starts answered `ok`.
    starts: u64,
}

/// A worker event frame with run and request ids.
fn run_event(session: &str, worker: &str, seq: u64, event: &str) -> String {
    json!({
        "type": "event", "event": event, "session_id": session, "worker_id": worker,
        "request_id": "req-1", "run_id": "r1", "sequence": seq, "data": {},
    })
    .to_string()
}

fn tool_request(session: &str, request_id: &str, arguments: Value) -> String {
    json!({"type": "tool_request", "data": {
        "worker_id": "w", "session_id": session, "run_id": "r1",
        "request_id": request_id, "arguments": arguments,
    }})
    .to_string()
}

fn send_arguments(child: &str, text: &str) -> Value {
    json!({"subagent_id": child, "operation": "message",
           "content": [{"type": "text", "modality": "text", "raw": text}]})
}

/// A raw worker socket whose frames from the hub are read and dropped by
/// a thread of its own (payloads, pings), so the hub never waits on it.
fn worker_socket(hub: &TestHub, id: &str) -> (RawWs, JoinHandle<()>) {
    let ws = RawWs::open(hub.addr, &events_path(hub, id));
    let mut reader = RawWs {
        s: ws.s.try_clone().unwrap(),
    };
    let drain = thread::spawn(move || while reader.read_frame().is_ok() {});
    (ws, drain)
}

/// The sockets that speak for the parent's and the child's workers on
/// one hub.
struct Workers {
    sockets: Vec<RawWs>,
    drains: Vec<JoinHandle<()>>,
}

impl Drop for Workers {
    /// Disconnects both workers (their drain threads see the end).
    fn drop(&mut self) {
        for ws in &self.sockets {
            let _ = ws.s.shutdown(std::net::Shutdown::Both);
        }
        for drain in self.drains.drain(..) {
            let _ = drain.join();
        }
    }
}

/// Connects both workers: the parent live with run `r1` active (proved by
/// a `plan/read` that succeeds), the child live and ready.
fn connect_workers(hub: &TestHub, child: &str, seq: &mut u64) -> Workers {
    let (mut parent, parent_drain) = worker_socket(hub, "parent");
    for event in ["input_admitted", "run_started"] {
        *seq += 1;
        parent.text(&run_event("parent", "w", *seq, event));
    }
    let (mut child_ws, child_drain) = worker_socket(hub, child);
    *seq += 1;
    child_ws.text(&envelope(child, "cw", *seq, "ready", json!({})));
    let tools = hub.tools_addr.unwrap();
    let path = tool_path(hub, "parent", "plan/read");
    let ready = wait_until(DEADLINE, || {
        tool_exchange(tools, &path, &tool_request("parent", "probe", json!({})))
            .is_ok_and(|v| v["data"]["status"] == "succeeded")
    });
    assert!(ready, "the parent's run never became active");
    wait_session(hub, child, |s| {
        s["subagent"]["lifecycle"] == "ready" && s["identity"]["state"] == "live"
    });
    Workers {
        sockets: vec![parent, child_ws],
        drains: vec![parent_drain, child_drain],
    }
}

fn tool_path(hub: &TestHub, id: &str, route: &str) -> String {
    format!(
        "/agent/{id}/tools/{route}?token={}",
        worker_token(&hub.data_dir, id)
    )
}

/// `POST path` without a body on its own connection; `None` when the hub
/// is gone.
fn post_once(addr: std::net::SocketAddr, path: &str) -> Option<Response> {
    let raw = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    let reply = exchange_within(addr, raw.as_bytes(), DEADLINE).ok()?;
    parse_response(reply.as_bytes())
}

/// Starts the four writers; each stops when the hub stops answering.
fn start_writers(
    hub: &TestHub,
    trial: u64,
    child: &str,
    acks: &Arc<Mutex<Acks>>,
) -> Vec<JoinHandle<()>> {
    let mut writers = Vec::new();
    let addr = hub.addr;
    let tools = hub.tools_addr.unwrap();
    // Each session client creates a session and deletes it again, so the
    // store holds few sessions however many trials run.
    for t in 0..2 {
        let acks = acks.clone();
        writers.push(thread::spawn(move || {
            for i in 0.. {
                let id = format!("k{trial}-{t}-{i}");
                let body = json!({"session": id}).to_string();
                let raw = format!(
                    "POST /api/sessions HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n{body}",
                    body.len()
                );
                match exchange_within(addr, raw.as_bytes(), DEADLINE) {
                    Ok(reply) if reply.starts_with("HTTP/1.1 201 ") => {
                        acks.lock().unwrap().created.push(id.clone());
                    }
                    _ => return, // the hub is gone
                }
                acks.lock().unwrap().deleting.push(id.clone());
                let raw = format!(
                    "DELETE /api/sessions/{id} HTTP/1.1\r\nHost: {addr}\r\n\
                     Connection: close\r\n\r\n"
                );
                match exchange_within(addr, raw.as_bytes(), DEADLINE) {
                    Ok(reply) if reply.starts_with("HTTP/1.1 200 ") => {
                        acks.lock().unwrap().deleted.push(id);
                    }
                    _ => return,
                }
            }
        }));
    }
    let plan_path = tool_path(hub, "parent", "plan/replace");
    let plan_acks = acks.clone();
    writers.push(thread::spawn(move || {
        for n in 0.. {
            let markdown = format!("# trial {trial}\n- [ ] write {n}");
            let request = tool_request(
                "parent",
                &format!("plan-{trial}-{n}"),
                json!({"markdown": markdown}),
            );
            match tool_exchange(tools, &plan_path, &request) {
                Ok(v) if v["data"]["status"] == "succeeded" => {
                    let revision = v["data"]["result"]["revision"].as_u64().unwrap();
                    plan_acks.lock().unwrap().plans.push((revision, markdown));
                }
                _ => return,
            }
        }
    }));
    let send_path = tool_path(hub, "parent", "subagent/send");
    let send_acks = acks.clone();
    let child = child.to_string();
    writers.push(thread::spawn(move || {
        for n in 0.. {
            let request_id = format!("send-{trial}-{n}");
            let text = format!("message {trial}-{n}");
            let request = tool_request("parent", &request_id, send_arguments(&child, &text));
            match tool_exchange(tools, &send_path, &request) {
                Ok(v) if v["data"]["status"] == "succeeded" => {
                    let given = v["data"]["result"]["request_id"]
                        .as_str()
                        .unwrap()
                        .to_string();
                    send_acks
                        .lock()
                        .unwrap()
                        .sends
                        .push((request_id, text, given));
                }
                _ => return,
            }
        }
    }));
    let start_acks = acks.clone();
    writers.push(thread::spawn(move || loop {
        let (Some(_), Some(start)) = (
            post_once(addr, "/api/sessions/cfg/force-kill"),
            post_once(addr, "/api/sessions/cfg/start"),
        ) else {
            return; // the hub is gone
        };
        if start.status == 200 && start.json()["ok"] == true {
            start_acks.lock().unwrap().starts += 1;
        }
    }));
    writers
}

/// Hub-written files under `dir` that must always be whole: the worker
/// configurations and their startup snapshots, `plan.json`, a child's
/// `conversation.json`. Returns (files, leftover temporary siblings).
fn check_files_whole(dir: &Path, ports: &[u16]) -> (usize, usize) {
    let (mut checked, mut temps) = (0, 0);
    let mut stack: Vec<PathBuf> = vec![dir.join("sessions"), dir.join("subagents")];
    while let Some(at) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if name.starts_with('.') && name.ends_with(".tmp") {
                // A write cut short before its rename: never read by the hub.
                temps += 1;
                continue;
            }
            if !matches!(
                name.as_str(),
                "config.yaml"
                    | "startup-worker.yaml"
                    | "startup-launch.jsonc"
                    | "plan.json"
                    | "conversation.json"
            ) {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let value: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is torn: {e}\n{text}", path.display()));
            if name.ends_with(".yaml") {
                // The old or the new version: an endpoint of one of the
                // hubs that ran, never something in between.
                let endpoint = value["client"]["endpoint"].as_str().unwrap_or("");
                assert!(
                    ports
                        .iter()
                        .any(|p| endpoint.starts_with(&format!("ws://127.0.0.1:{p}/"))),
                    "{}: {endpoint} is no hub's endpoint",
                    path.display()
                );
            }
            checked += 1;
        }
    }
    (checked, temps)
}

/// The plan of `id` as a freshly subscribed panel sees it.
fn stored_plan(hub: &TestHub, id: &str) -> Value {
    let mut panel = RawWs::panel(hub);
    panel.text(&format!(r#"{{"v":1,"type":"subscribe","session":"{id}"}}"#));
    panel.next_text(|v| v["type"] == "subscribed")["plan"].clone()
}

#[test]
fn fifty_sigkills_at_random_moments_lose_no_acknowledged_write() {
    let _heavy = heavy();
    let seed = seed();
    let mut rng = XorShift(seed);
    eprintln!("kill trials: seed {seed} (SIMPLEX_KILL_SEED={seed} replays these moments)");
    let dir = TempDir::new("kill-trials");
    let config = json!({
        "launcher": {"kind": "command", "command": ["/bin/sh", "-c", "exec sleep 300"]},
        "worker": short_stop_ladder(),
        "subagents": {"maxReceipts": 1000},
    });
    let mut hub = hub_with(&dir, config);
    let config_path = dir.path().join("hub.test.jsonc");
    let config_arg = config_path.to_str().unwrap().to_string();
    let restart = |dir: &TempDir| TestHub::start(dir.path(), &["-c", &config_arg]);
    let mut ports = vec![hub.addr.port()];

    // The parent session's worker (hub-launched, so it may fork) and its
    // one headless child, which every send goes to.
    create_session(&hub, "parent");
    create_session(&hub, "cfg");
    assert_eq!(action(&hub, "parent", "start").json()["ok"], true);
    let mut seq = 0u64;
    let (mut parent, parent_drain) = worker_socket(&hub, "parent");
    for event in ["input_admitted", "run_started"] {
        seq += 1;
        parent.text(&run_event("parent", "w", seq, event));
    }
    let tools = hub.tools_addr.unwrap();
    let forked = poll_until(DEADLINE, || {
        tool_exchange(
            tools,
            &tool_path(&hub, "parent", "subagent/clean-fork"),
            &tool_request("parent", "fork-1", json!({})),
        )
        .ok()
        .filter(|v| v["data"]["status"] == "succeeded")
    })
    .expect("the clean fork never succeeded");
    let child = forked["data"]["result"]["subagent_id"]
        .as_str()
        .unwrap()
        .to_string();
    drop(Workers {
        sockets: vec![parent],
        drains: vec![parent_drain],
    });
    let mut workers = connect_workers(&hub, &child, &mut seq);

    let mut kept: Vec<String> = vec!["parent".into(), "cfg".into()];
    let (mut created, mut deleted) = (0usize, 0usize);
    let (mut plans, mut sends, mut starts) = (0usize, 0usize, 0u64);
    let (mut files_checked, mut max_temps) = (0usize, 0usize);
    let mut moments = Vec::new();
    let mut last_send: Option<(String, String, String)> = None;
    let mut acked_revision = 0u64;
    let started = Instant::now();
    for trial in 1..=TRIALS {
        // The previous trial's last acknowledged send is replayed from its
        // receipt: the same call is answered, not executed again.
        if let Some((request_id, text, given)) = last_send.take() {
            let replay = tool_exchange(
                hub.tools_addr.unwrap(),
                &tool_path(&hub, "parent", "subagent/send"),
                &tool_request("parent", &request_id, send_arguments(&child, &text)),
            )
            .expect("the replay was answered");
            assert_eq!(replay["data"]["status"], "succeeded", "{replay}");
            assert_eq!(replay["data"]["result"]["replayed"], true, "{replay}");
            assert_eq!(replay["data"]["result"]["request_id"], given.as_str());
        }

        let acks = Arc::new(Mutex::new(Acks::default()));
        let writers = start_writers(&hub, trial, &child, &acks);
        let kill_after = Duration::from_millis(rng.next() % (MAX_KILL_AFTER_MS + 1));
        moments.push(kill_after.as_millis() as u64);
        // The kill moment is the point of the trial: a deliberate wait.
        thread::sleep(kill_after);
        hub.kill9();
        for w in writers {
            w.join().unwrap();
        }
        drop(workers);

        // The hub is dead: the files it left are sound.
        assert_eq!(integrity_check(dir.path()), "ok", "trial {trial}");
        let (checked, temps) = check_files_whole(dir.path(), &ports);
        files_checked += checked;
        max_temps = max_temps.max(temps);
        let acks = std::mem::take(&mut *acks.lock().unwrap());
        let keys: Vec<String> = {
            let conn = rusqlite::Connection::open(dir.path().join("hub.db")).unwrap();
            let mut stmt = conn.prepare("SELECT key FROM subagent_receipts").unwrap();
            let rows = stmt.query_map([], |r| r.get(0)).unwrap();
            rows.map(Result::unwrap).collect()
        };
        for (request_id, _, _) in &acks.sends {
            let suffix = format!("\u{1f}r1\u{1f}{request_id}");
            assert!(
                keys.iter().any(|k| k.ends_with(&suffix)),
                "trial {trial}: the receipt of {request_id} is lost"
            );
        }

        // A new hub: every acknowledged write is there.
        hub = restart(&dir);
        ports.push(hub.addr.port());
        let listed = session_ids(&hub);
        for id in &acks.created {
            if acks.deleted.contains(id) {
                assert!(!listed.contains(id), "trial {trial}: deleted {id} is back");
            } else if !acks.deleting.contains(id) {
                assert!(listed.contains(id), "trial {trial}: session {id} lost");
            }
        }
        // Sessions kept by earlier trials are still there.
        for id in &kept {
            assert!(listed.contains(id), "trial {trial}: session {id} lost");
        }
        kept.extend(
            acks.created
                .iter()
                .filter(|id| !acks.deleting.contains(id))
                .cloned(),
        );
        created += acks.created.len();
        deleted += acks.deleted.len();
        if let Some((revision, markdown)) = acks.plans.last() {
            acked_revision = *revision;
            let plan = stored_plan(&hub, "parent");
            let stored = plan["revision"].as_u64().unwrap();
            assert!(
                stored >= *revision,
                "trial {trial}: revision {revision} acknowledged, {stored} stored"
            );
            if stored == *revision {
                assert_eq!(plan["markdown"], markdown.as_str(), "trial {trial}");
            }
            let mirrored: Value = serde_json::from_slice(
                &std::fs::read(dir.path().join("sessions/parent/plan.json")).unwrap(),
            )
            .unwrap();
            assert!(mirrored["revision"].as_u64().unwrap() <= stored);
        }
        plans += acks.plans.len();
        sends += acks.sends.len();
        starts += acks.starts;
        last_send = acks.sends.last().cloned();
        workers = connect_workers(&hub, &child, &mut seq);
    }
    let took = started.elapsed();
    // The last hub stops the workers it knows of; a worker spawned by a
    // start that a kill cut before its record was written is known to
    // none (it would reconnect to the next hub, which cannot stop it).
    drop(workers);
    drop(hub);
    let strays = kill_processes_under(dir.path());
    assert!(
        plans > 0 && sends > 0 && starts > 0,
        "{plans} {sends} {starts}"
    );
    let total = created + deleted + plans + sends + starts as usize;
    moments.sort_unstable();
    eprintln!(
        "kill trials: {TRIALS} SIGKILLs in {took:?} (seed {seed}; kill {}..{} ms, median {} ms \
         after the writers started); {total} acknowledged writes all found after restart: \
         {created} sessions created and {deleted} deleted, {plans} plan revisions (last \
         {acked_revision}), {sends} subagent receipts, \
         {starts} starts' configuration files; integrity_check ok {TRIALS} times; {files_checked} \
         hub-written files whole; {max_temps} temporary files left behind by writes cut before \
         their rename (never read); {strays} workers spawned by a start the kill cut before \
         its record, known to no hub (ended by the test)",
        moments[0],
        moments[moments.len() - 1],
        moments[moments.len() / 2],
    );
}
