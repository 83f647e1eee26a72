//! Docker launches end to end: a worker launched by a foreground `docker
//! run … --name X` is stopped by its container (`docker kill --signal`),
//! its end is judged by `docker inspect` and not by the CLI's exit, the
//! management context survives a hub restart, and headless cleanup waits
//! for the container.
//!
//! Most tests drive the real hub through [`STAND_IN`], a small shell
//! script standing in for the external Docker CLI (not for any part of the
//! hub): `run --name X IMAGE CMD…` runs CMD as the "container" in a
//! session of its own (so killing the CLI leaves it running, as with a real
//! daemon) and waits for it in the foreground; `kill --signal S X`
//! signals it; `inspect X` prints the JSON the real CLI prints for the
//! hub's `--format`. Every call is logged, with whether the secret the
//! launch got was visible to it. The last test runs the real Docker
//! engine when one can be reached (`scripts/docker-engine.sh` starts one
//! in CI) and says so when it cannot.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::util::*;

/// The stand-in for the external Docker CLI (see the module header).
const STAND_IN: &str = r#"#!/bin/sh
# Stand-in for the external Docker CLI, written by tests/docker.rs.
state=${STANDIN_STATE:?STANDIN_STATE is not set}
cmd=${1:-}
[ $# -gt 0 ] && shift
note() { printf '%s\n' "$*" >> "$state/calls.log"; }
find_dir() {
  if [ -d "$state/containers/$1" ]; then echo "$state/containers/$1"; return 0; fi
  for d in "$state"/containers/*; do
    if [ -f "$d/id" ] && [ "$(cat "$d/id")" = "$1" ]; then echo "$d"; return 0; fi
  done
  return 1
}
case $cmd in
run)
  rm=; name=
  while [ $# -gt 0 ]; do
    case $1 in
      --rm) rm=1; shift ;;
      --init) shift ;;
      --name) name=$2; shift 2 ;;
      --name=*) name=${1#--name=}; shift ;;
      -*) echo "stand-in docker: unsupported run option $1" >&2; exit 125 ;;
      *) break ;;
    esac
  done
  shift
  mkdir -p "$state/containers"
  dir=$state/containers/$name
  if ! mkdir "$dir" 2>/dev/null; then
    echo "docker: Error response from daemon: Conflict. The container name \"/$name\" is already in use." >&2
    exit 125
  fi
  od -An -N32 -tx1 /dev/urandom | tr -d ' \n' > "$dir/id"
  note "run $name secret=${MODEL_API_KEY:+set}"
  setsid -w sh -c '
    dir=$1; rm=$2; shift 2
    "$@" </dev/null >"$dir/output" 2>&1 &
    echo $! > "$dir/pid.tmp" && mv "$dir/pid.tmp" "$dir/pid"
    wait $!; code=$?
    if [ -n "$rm" ]; then rm -rf "$dir"; else echo $code > "$dir/exit"; fi
    exit $code
  ' container "$dir" "$rm" "$@" &
  wait $!
  exit $?
  ;;
kill)
  signal=KILL
  while [ $# -gt 0 ]; do
    case $1 in
      --signal|-s) signal=$2; shift 2 ;;
      *) break ;;
    esac
  done
  note "kill $signal $1 secret=${MODEL_API_KEY:+set}"
  dir=$(find_dir "$1") || { echo "Error response from daemon: No such container: $1" >&2; exit 1; }
  pid=$(cat "$dir/pid" 2>/dev/null)
  if [ -f "$dir/exit" ] || [ -z "$pid" ]; then
    echo "Error response from daemon: Cannot kill container: $1: container is not running" >&2
    exit 1
  fi
  kill -s "$signal" "$pid"
  echo "$1"
  ;;
inspect)
  target=
  while [ $# -gt 0 ]; do
    case $1 in
      --type|--format|-f) shift 2 ;;
      *) target=$1; shift ;;
    esac
  done
  note "inspect $target path=${PATH:+set} secret=${MODEL_API_KEY:+set}"
  dir=$(find_dir "$target") || { echo "Error: No such container: $target" >&2; exit 1; }
  id=$(cat "$dir/id" 2>/dev/null) || { echo "Error: No such container: $target" >&2; exit 1; }
  if [ -f "$dir/exit" ]; then
    set -- exited false 0 "$(cat "$dir/exit")"
  elif [ -f "$dir/pid" ]; then
    set -- running true "$(cat "$dir/pid")" 0
  else
    set -- created false 0 0
  fi
  printf '{"Id":"%s","State":{"Status":"%s","Running":%s,"Paused":false,"Restarting":false,"OOMKilled":false,"Dead":false,"Pid":%s,"ExitCode":%s,"Error":"","StartedAt":"","FinishedAt":""}}\n' "$id" "$1" "$2" "$3" "$4"
  ;;
*)
  echo "stand-in docker: unsupported command $cmd" >&2
  exit 1
  ;;
esac
"#;

/// The stand-in's executable (named `docker`) and its state directory.
/// Dropping it kills whatever "container" a failed test left running.
struct StandIn {
    exe: PathBuf,
    state: PathBuf,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        let Ok(dirs) = std::fs::read_dir(self.state.join("containers")) else {
            return;
        };
        for dir in dirs.flatten() {
            let pid = std::fs::read_to_string(dir.path().join("pid"));
            if let Some(pid) = pid.ok().and_then(|t| t.trim().parse::<u32>().ok()) {
                if pid_alive(pid) && !dir.path().join("exit").exists() {
                    signal(pid, libc::SIGKILL);
                }
            }
        }
    }
}

impl StandIn {
    fn new(dir: &TempDir) -> StandIn {
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let exe = bin.join("docker");
        std::fs::write(&exe, STAND_IN).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let state = dir.path().join("standin");
        std::fs::create_dir_all(&state).unwrap();
        StandIn { exe, state }
    }

    /// Every call the hub made, in order.
    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.state.join("calls.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The "container" process of `name`, once it started.
    fn container_pid(&self, name: &str) -> u32 {
        let path = self.state.join("containers").join(name).join("pid");
        let mut pid = None;
        wait_for("the container's pid", DEADLINE, || {
            pid = std::fs::read_to_string(&path)
                .ok()
                .and_then(|t| t.trim().parse().ok());
            pid.is_some()
        });
        pid.unwrap()
    }

    fn container_exists(&self, name: &str) -> bool {
        self.state.join("containers").join(name).exists()
    }

    /// The launch spec of a session: its provider and the environment the
    /// stand-in needs (and a secret the management commands must not see).
    fn spec(&self, model: &str) -> Value {
        json!({
            "provider": "mock",
            "model": model,
            "env": {
                "STANDIN_STATE": self.state.to_str().unwrap(),
                "MODEL_API_KEY": "for-the-container-only",
            },
        })
    }
}

/// A hub whose launcher is `<stand-in> run --rm --name sx-{session} image`
/// followed by `container` (placeholders expanded), keeping
/// `STANDIN_STATE` for the management commands.
fn docker_hub(dir: &TempDir, standin: &StandIn, container: &[&str], extra: &[&str]) -> TestHub {
    docker_hub_with(dir, standin, &["--rm"], container, extra)
}

/// `docker_hub` with other `run` options than `--rm`.
fn docker_hub_with(
    dir: &TempDir,
    standin: &StandIn,
    run_options: &[&str],
    container: &[&str],
    extra: &[&str],
) -> TestHub {
    let mut command = vec![standin.exe.to_str().unwrap(), "run"];
    command.extend_from_slice(run_options);
    command.extend_from_slice(&["--name", "sx-{session}", "stand-in-image"]);
    command.extend_from_slice(container);
    hub_with_args(
        dir,
        json!({
            "launcher": {
                "kind": "command",
                "command": command,
                "dockerManagementEnv": ["STANDIN_STATE"],
            },
            "worker": short_stop_ladder(),
        }),
        extra,
    )
}

/// The built-in worker as the container's command.
const WORKER: &[&str] = &[
    BIN,
    "mock-worker",
    "--config",
    "{config}",
    "--session",
    "{session}",
    "--threads",
    "{threads}",
];

/// Creates and starts `id`; returns the pid of its docker CLI.
fn start(hub: &TestHub, standin: &StandIn, id: &str, model: &str) -> u32 {
    create_session_with_spec(hub, id, standin.spec(model));
    let started = action(hub, id, "start").json();
    assert_eq!(started["ok"], true, "{started}");
    started["pid"].as_u64().unwrap() as u32
}

/// Starts `id` again; returns the pid of its new docker CLI.
fn start_again(hub: &TestHub, id: &str) -> u32 {
    let started = action(hub, id, "start").json();
    assert_eq!(started["ok"], true, "{started}");
    started["pid"].as_u64().unwrap() as u32
}

fn context_file(hub: &TestHub, id: &str) -> PathBuf {
    hub.data_dir.join("docker").join(format!("{id}.json"))
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_docker_worker_is_stopped_by_its_container_and_outlives_a_killed_cli() {
    let dir = TempDir::new("docker-cli");
    let standin = StandIn::new(&dir);
    let hub = docker_hub(&dir, &standin, WORKER, &[]);
    let cli = start(&hub, &standin, "a", "mock-flash");
    wait_session(&hub, "a", |s| s["identity"]["state"] == "live");
    let worker = standin.container_pid("sx-a");
    assert_ne!(worker, cli);
    // The launch itself inherited everything, the secret included.
    assert!(standin.calls().contains(&"run sx-a secret=set".to_string()));

    // The management context: private, outside the session directory
    // (which a docker launch usually mounts into the container), with the
    // allow-listed and named variables only.
    let file = context_file(&hub, "a");
    assert_eq!(mode(&file), 0o600);
    assert_eq!(mode(file.parent().unwrap()), 0o700);
    let kept: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(kept["executable"], standin.exe.to_str().unwrap());
    assert_eq!(kept["name"], "sx-a");
    assert_eq!(
        kept["env"]["STANDIN_STATE"],
        standin.state.to_str().unwrap()
    );
    assert!(kept["env"]["PATH"].is_string(), "{kept}");
    assert!(kept["env"].get("MODEL_API_KEY").is_none(), "{kept}");
    assert!(!std::fs::read_to_string(&file)
        .unwrap()
        .contains("for-the-container-only"));

    // The CLI dies; the container (and the worker in it) does not, and
    // neither does the session's worker.
    signal(cli, libc::SIGKILL);
    wait_for("the hub to follow the container", DEADLINE, || {
        hub.log_text()
            .contains("session a: the docker CLI exited but container sx-a runs on")
    });
    let s = get_session(&hub, "a");
    assert_eq!(s["process"]["state"], "running", "{s}");
    assert_eq!(s["identity"]["state"], "live", "{s}");
    assert!(pid_alive(worker));
    assert!(!pid_alive(cli));

    // A stop reaches it (by the protocol) and its end is the container's.
    let stopped = action(&hub, "a", "stop").json();
    assert_eq!(
        stopped,
        json!({"ok": true, "how": "shutdown-signal", "forced": false})
    );
    let s = wait_session(&hub, "a", |s| s["process"]["state"] == "exited");
    assert_eq!(s["process"]["exit_code"], Value::Null, "{s}");
    assert!(!standin.container_exists("sx-a"));
    assert!(!pid_alive(worker));
    assert!(!file.exists());

    // The name is free again; a restart with a live CLI ends with the
    // CLI, which exits with its container's status.
    let cli = start_again(&hub, "a");
    wait_session(&hub, "a", |s| s["identity"]["state"] == "live");
    let restarted = action(&hub, "a", "restart").json();
    assert_eq!(restarted["ok"], true, "{restarted}");
    assert_eq!(restarted["stop"], "shutdown-signal", "{restarted}");
    assert!(!pid_alive(cli));
    wait_session(&hub, "a", |s| s["identity"]["state"] == "live");
    let stopped = action(&hub, "a", "stop").json();
    assert_eq!(stopped["how"], "shutdown-signal", "{stopped}");
    let s = wait_session(&hub, "a", |s| s["process"]["state"] == "exited");
    assert_eq!(s["process"]["exit_code"], 0, "{s}");
    assert!(!file.exists());
    // Management commands ran with the kept environment only.
    let calls = standin.calls();
    let inspects: Vec<&String> = calls.iter().filter(|c| c.starts_with("inspect ")).collect();
    assert!(!inspects.is_empty(), "{calls:?}");
    for call in inspects {
        assert!(call.ends_with("path=set secret="), "{call}");
    }
}

#[test]
fn the_ladder_signals_the_container_term_then_kill() {
    let dir = TempDir::new("docker-ladder");
    let standin = StandIn::new(&dir);
    let mut hub = docker_hub(&dir, &standin, WORKER, &[]);

    // A worker that ignores the protocol shutdown gets TERM, through the
    // daemon; the CLI exits with the container's status.
    let cli = start(&hub, &standin, "t", "mock-ignore-shutdown");
    wait_session(&hub, "t", |s| s["identity"]["state"] == "live");
    let worker = standin.container_pid("sx-t");
    let stopped = action(&hub, "t", "stop").json();
    assert_eq!(
        stopped,
        json!({"ok": true, "how": "sigterm", "forced": true})
    );
    let s = wait_session(&hub, "t", |s| s["process"]["state"] == "exited");
    assert_eq!(s["process"]["exit_code"], 0, "{s}");
    assert!(!pid_alive(worker) && !pid_alive(cli));
    let kills: Vec<String> = standin
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("kill "))
        .collect();
    assert_eq!(kills.len(), 1, "{kills:?}");
    assert!(
        kills[0].starts_with("kill TERM ") && kills[0].ends_with(" secret="),
        "{kills:?}"
    );

    // Force-kill goes straight to KILL for the whole container.
    start(&hub, &standin, "f", "mock-flash");
    wait_session(&hub, "f", |s| s["identity"]["state"] == "live");
    let worker = standin.container_pid("sx-f");
    let killed = action(&hub, "f", "force-kill").json();
    assert_eq!(
        killed,
        json!({"ok": true, "how": "sigkill-process-group", "forced": true})
    );
    wait_session(&hub, "f", |s| s["process"]["state"] == "exited");
    assert!(!pid_alive(worker));
    assert!(standin.calls().iter().any(|c| c.starts_with("kill KILL ")));

    // Hub shutdown stops a container whose CLI is gone, too.
    let cli = start_again(&hub, "f");
    wait_session(&hub, "f", |s| s["identity"]["state"] == "live");
    let worker = standin.container_pid("sx-f");
    signal(cli, libc::SIGKILL);
    wait_for("the hub to follow the container", DEADLINE, || {
        hub.log_text().contains("container sx-f runs on")
    });
    assert_eq!(hub.terminate().code(), Some(0));
    assert!(!pid_alive(worker));
    assert!(!standin.container_exists("sx-f"));
}

#[test]
fn a_container_that_ignores_term_gets_kill_after_the_grace() {
    let dir = TempDir::new("docker-kill");
    let standin = StandIn::new(&dir);
    // No --rm: the ended container stays, with its exit status.
    let hub = docker_hub_with(
        &dir,
        &standin,
        &[],
        &["/bin/sh", "-c", "trap '' TERM; exec sleep 3600"],
        &[],
    );
    let cli = start(&hub, &standin, "k", "mock-flash");
    let sleeper = standin.container_pid("sx-k");
    // Its CLI gone, the container is all that is left to stop.
    signal(cli, libc::SIGKILL);
    wait_for("the hub to follow the container", DEADLINE, || {
        hub.log_text().contains("container sx-k runs on")
    });
    let began = Instant::now();
    let stopped = action(&hub, "k", "stop").json();
    assert_eq!(
        stopped,
        json!({"ok": true, "how": "sigkill", "forced": true})
    );
    // Not connected: TERM at once, KILL after sigtermGraceMs (1 s).
    assert!(began.elapsed() >= Duration::from_millis(900));
    assert!(!pid_alive(sleeper));
    let kills: Vec<String> = standin
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("kill "))
        .collect();
    assert_eq!(kills.len(), 2, "{kills:?}");
    assert!(kills[0].starts_with("kill TERM "), "{kills:?}");
    assert!(kills[1].starts_with("kill KILL "), "{kills:?}");
    // The container was named by the id inspect reported.
    let id = kills[1].split_whitespace().nth(2).unwrap();
    assert_eq!(id.len(), 64, "{kills:?}");
    let s = wait_session(&hub, "k", |s| s["process"]["state"] == "exited");
    // The container's status (128 + SIGKILL), as inspect reported it.
    assert_eq!(s["process"]["exit_code"], 137, "{s}");
    assert!(standin.container_exists("sx-k"));
}

#[test]
fn a_restarted_hub_adopts_docker_workers_through_their_kept_context() {
    let dir = TempDir::new("docker-restart");
    let standin = StandIn::new(&dir);
    let mut first = docker_hub(&dir, &standin, WORKER, &[]);
    let cli1 = start(&first, &standin, "r1", "mock-flash");
    let cli2 = start(&first, &standin, "r2", "mock-flash");
    for id in ["r1", "r2"] {
        wait_session(&first, id, |s| s["identity"]["state"] == "live");
    }
    let w1 = standin.container_pid("sx-r1");
    let w2 = standin.container_pid("sx-r2");
    first.kill9();
    // One CLI outlives the hub; the other dies too, its container does not.
    signal(cli2, libc::SIGKILL);
    wait_for("the second CLI's end", DEADLINE, || !pid_alive(cli2));
    assert!(pid_alive(cli1) && pid_alive(w1) && pid_alive(w2));

    // The new hub's own environment has no STANDIN_STATE: only the kept
    // context lets its management commands reach the stand-in.
    assert!(std::env::var_os("STANDIN_STATE").is_none());
    let listen = first.addr.to_string();
    let tools = first.tools_addr.unwrap().port().to_string();
    let second = docker_hub(
        &dir,
        &standin,
        WORKER,
        &["--listen", &listen, "--tools-port", &tools],
    );
    for id in ["r1", "r2"] {
        let s = wait_session(&second, id, |s| {
            s["process"]["adopted"] == true && s["identity"]["state"] == "live"
        });
        assert_eq!(s["process"]["state"], "running", "{s}");
    }
    assert!(
        second
            .log_text()
            .contains("session r2: adopted container sx-r2 (its docker CLI"),
        "{}",
        second.log_text()
    );

    // Its CLI gone after the restart too, r1 is followed by its container.
    signal(cli1, libc::SIGKILL);
    wait_for("the hub to follow r1's container", DEADLINE, || {
        second.log_text().contains("container sx-r1 runs on")
    });
    for (id, worker) in [("r1", w1), ("r2", w2)] {
        let stopped = action(&second, id, "stop").json();
        assert_eq!(stopped["ok"], true, "{id}: {stopped}");
        wait_session(&second, id, |s| s["process"]["state"] == "exited");
        assert!(!pid_alive(worker), "{id}");
        assert!(!standin.container_exists(&format!("sx-{id}")));
    }
    assert!(std::fs::read_dir(second.data_dir.join("docker"))
        .unwrap()
        .next()
        .is_none());
}

/// A Node hub's data directory whose one session runs a Docker worker:
/// the import keeps the Node hub's `docker_management` as this hub's
/// context, so the container is adopted, followed once its CLI is gone,
/// and stopped by `docker kill`, never reaching the secret the Node hub
/// had kept with it.
#[test]
fn a_node_hubs_docker_worker_is_imported_with_its_management_context() {
    let dir = TempDir::new("docker-node");
    let standin = StandIn::new(&dir);
    // The worker as the Node hub left it: started (here by this hub, whose
    // store is then replaced by the Node hub's hub.json), still running.
    let mut first = docker_hub(&dir, &standin, WORKER, &[]);
    let cli = start(&first, &standin, "n1", "mock-flash");
    wait_session(&first, "n1", |s| s["identity"]["state"] == "live");
    let worker = standin.container_pid("sx-n1");
    first.kill9();
    let data = first.data_dir.clone();
    let (token, spec, lifecycle, command, args, cwd): (
        String,
        String,
        String,
        String,
        String,
        String,
    ) = {
        let conn = rusqlite::Connection::open(data.join("hub.db")).unwrap();
        conn.query_row(
            "SELECT s.token, s.spec, s.lifecycle_id, p.command, p.args, p.cwd
               FROM sessions s JOIN processes p ON p.session_id = s.id WHERE s.id = 'n1'",
            [],
            |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                ))
            },
        )
        .unwrap()
    };
    for name in ["hub.db", "hub.db-wal", "hub.db-shm"] {
        let _ = std::fs::remove_file(data.join(name));
    }
    std::fs::remove_dir_all(data.join("docker")).unwrap();
    let args: Value = serde_json::from_str(&args).unwrap();
    let node = json!({"version": 1, "saved_at": "2026-05-01T10:00:00.000Z", "sessions": [{
        "id": "n1",
        "token": token,
        "spec": serde_json::from_str::<Value>(&spec).unwrap(),
        "created_at": "2026-05-01T09:00:00.000Z",
        "lifecycle_id": lifecycle,
        "process": {
            "pid": cli,
            "pid_start_time": proc_start_time(cli),
            "started_at": "2026-05-01T09:00:01.000Z",
            "command": command,
            "args": args,
            "cwd": cwd,
            "pid_file": null,
            "log_path": null,
            "state": "running",
            // The Node hub kept its whole startup environment here.
            "docker_management": {
                "executable": standin.exe,
                "cwd": cwd,
                "env": {
                    "PATH": std::env::var("PATH").unwrap(),
                    "STANDIN_STATE": standin.state,
                    "MODEL_API_KEY": "for-the-container-only",
                },
                "name": "sx-n1",
            },
        },
    }]});
    std::fs::write(
        data.join("hub.json"),
        serde_json::to_vec_pretty(&node).unwrap(),
    )
    .unwrap();

    let listen = first.addr.to_string();
    let tools = first.tools_addr.unwrap().port().to_string();
    let second = docker_hub(
        &dir,
        &standin,
        WORKER,
        &["--listen", &listen, "--tools-port", &tools],
    );
    let s = wait_session(&second, "n1", |s| {
        s["process"]["adopted"] == true && s["identity"]["state"] == "live"
    });
    assert_eq!(s["process"]["state"], "running", "{s}");
    let log = second.log_text();
    assert!(
        log.contains("node import: session n1: container sx-n1 is managed"),
        "{log}"
    );
    let kept_path = context_file(&second, "n1");
    assert_eq!(mode(&kept_path), 0o600);
    let kept: Value = serde_json::from_slice(&std::fs::read(&kept_path).unwrap()).unwrap();
    assert!(kept["env"].get("MODEL_API_KEY").is_none(), "{kept}");
    assert_eq!(kept["lifecycle_id"], json!(lifecycle));

    signal(cli, libc::SIGKILL);
    wait_for("the hub to follow n1's container", DEADLINE, || {
        second.log_text().contains("container sx-n1 runs on")
    });
    let stopped = action(&second, "n1", "stop").json();
    assert_eq!(stopped["ok"], true, "{stopped}");
    wait_session(&second, "n1", |s| s["process"]["state"] == "exited");
    assert!(!pid_alive(worker));
    assert!(!standin.container_exists("sx-n1"));
    // Every management command ran with the kept environment only.
    let calls = standin.calls();
    assert!(calls.len() > 1, "{calls:?}");
    assert!(
        calls
            .iter()
            .filter(|c| !c.starts_with("run "))
            .all(|c| c.ends_with("secret=")),
        "{calls:?}"
    );
}

#[test]
fn a_headless_child_is_removed_only_once_its_container_is_gone() {
    let dir = TempDir::new("docker-headless");
    let standin = StandIn::new(&dir);
    let hub = docker_hub(&dir, &standin, WORKER, &[]);
    start(&hub, &standin, "lead", "mock-flash");
    wait_session(&hub, "lead", |s| s["identity"]["state"] == "live");
    let forked = succeeded(&run_tools(&hub, "lead", "/fork")[0], "subagent/clean-fork");
    let child = forked["subagent_id"].as_str().unwrap().to_string();
    let s = wait_session(&hub, &child, |s| s["subagent"]["lifecycle"] == "ready");
    let cli = s["process"]["pid"].as_u64().unwrap() as u32;
    let name = format!("sx-{child}");
    let worker = standin.container_pid(&name);
    let child_dir = hub.data_dir.join("subagents").join(&child);

    // The child's CLI dies. Its container runs on, so the child is not
    // over: it stays, directory and all.
    signal(cli, libc::SIGKILL);
    wait_for("the hub to follow the child's container", DEADLINE, || {
        hub.log_text()
            .contains(&format!("container {name} runs on"))
    });
    let inspected = standin.calls().len();
    wait_for("another look at the container", DEADLINE, || {
        standin.calls().len() > inspected
    });
    let s = get_session(&hub, &child);
    assert_eq!(s["subagent"]["lifecycle"], "ready", "{s}");
    assert_eq!(s["process"]["state"], "running", "{s}");
    assert!(child_dir.exists());

    // Once the container has ended, the child is stopped and removed.
    signal(worker, libc::SIGKILL);
    wait_for("the child's removal", DEADLINE, || {
        !child_dir.exists() && !session_ids(&hub).contains(&child)
    });
    assert!(!standin.container_exists(&name));
    let s = get_session(&hub, "lead");
    assert_eq!(s["process"]["state"], "running", "{s}");

    // Stopping the parent stops a child's container through the daemon
    // too, and the child goes once it is over.
    let forked = succeeded(&run_tools(&hub, "lead", "/fork")[0], "subagent/clean-fork");
    let child = forked["subagent_id"].as_str().unwrap().to_string();
    wait_session(&hub, &child, |s| s["subagent"]["lifecycle"] == "ready");
    let worker = standin.container_pid(&format!("sx-{child}"));
    let stopped = action(&hub, "lead", "stop").json();
    assert_eq!(stopped["ok"], true, "{stopped}");
    wait_for("the second child's removal", DEADLINE, || {
        !session_ids(&hub).contains(&child)
    });
    assert!(!pid_alive(worker));
    assert!(!hub.data_dir.join("subagents").join(&child).exists());
}

// ---------------------------------------------------------------------
// The real Docker engine.

/// The image the real-engine test runs: an empty root with the usual
/// links into `/usr`, which the container mounts read-only from the host
/// (so the hub binary runs in it unchanged). `/sbin` is a directory of
/// its own: `--init` mounts docker's init there.
const IMAGE: &str = "simplex-hub-test-hostfs:2";

/// Runs `docker args…` with a deadline; its stdout, or why not.
fn docker(args: &[&str], within: Duration) -> Result<String, String> {
    let mut child = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run docker: {e}"))?;
    match wait_exit(&mut child, within) {
        None => {
            let _ = child.kill();
            let _ = child.wait();
            Err(format!(
                "docker {} gave no answer within {within:?}",
                args[0]
            ))
        }
        Some(status) => {
            let out = child.wait_with_output().map_err(|e| e.to_string())?;
            if status.success() {
                Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
            } else {
                Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
            }
        }
    }
}

/// Why the real engine cannot be used here, if it cannot.
fn engine_unavailable() -> Option<String> {
    if let Err(why) = docker(
        &["version", "--format", "{{.Server.Version}}"],
        Duration::from_secs(20),
    ) {
        return Some(why.lines().next().unwrap_or("").to_string());
    }
    if docker(&["image", "inspect", IMAGE], Duration::from_secs(20)).is_ok() {
        return None;
    }
    let root = TempDir::new("docker-image");
    let rootfs = root.path().join("root");
    for sub in ["usr", "tmp", "etc", "proc", "dev", "sys", "sbin"] {
        std::fs::create_dir_all(rootfs.join(sub)).unwrap();
    }
    for (link, to) in [
        ("bin", "usr/bin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
    ] {
        std::os::unix::fs::symlink(to, rootfs.join(link)).unwrap();
    }
    let import = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "tar -C '{}' -c . | docker import - {IMAGE}",
            rootfs.display()
        ))
        .output();
    match import {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(format!(
            "cannot build the test image: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Some(format!("cannot build the test image: {e}")),
    }
}

/// Removes a container left by a failed run.
struct RemoveContainer(String);

impl Drop for RemoveContainer {
    fn drop(&mut self) {
        let _ = docker(&["rm", "-f", &self.0], Duration::from_secs(20));
    }
}

fn container_state(name: &str) -> Result<String, String> {
    docker(
        &[
            "inspect",
            "--type",
            "container",
            "--format",
            "{{.State.Status}}",
            name,
        ],
        Duration::from_secs(20),
    )
}

#[test]
fn the_real_engine_runs_and_stops_a_docker_worker_by_its_container() {
    if let Some(why) = engine_unavailable() {
        // Written past the test harness's capture, so it always shows.
        let _ = writeln!(std::io::stderr(), "skipped: no Docker engine ({why})");
        return;
    }
    let dir = TempDir::new("docker-real");
    let bin_mount = format!("{BIN}:{BIN}:ro");
    let suffix = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    let mut command = vec![
        "docker",
        "run",
        "--rm",
        "--init",
        "--name",
        "sxr-{session}",
        "--network",
        "host",
        "-v",
        "/usr:/usr:ro",
        "-v",
        "{session_dir}:{session_dir}",
        "-v",
        &bin_mount,
        IMAGE,
    ];
    command.extend_from_slice(WORKER);
    let hub = hub_with(
        &dir,
        json!({
            "launcher": {"kind": "command", "command": command},
            "worker": short_stop_ladder(),
        }),
    );
    for (session, model, how) in [
        (format!("a{suffix}"), "mock-flash", "shutdown-signal"),
        (format!("t{suffix}"), "mock-ignore-shutdown", "sigterm"),
    ] {
        let name = format!("sxr-{session}");
        let _cleanup = RemoveContainer(name.clone());
        create_session_with_spec(&hub, &session, json!({"provider": "mock", "model": model}));
        let started = action(&hub, &session, "start").json();
        assert_eq!(started["ok"], true, "{started}");
        let cli = started["pid"].as_u64().unwrap() as u32;
        wait_session(&hub, &session, |s| s["identity"]["state"] == "live");
        assert_eq!(container_state(&name).as_deref(), Ok("running"));
        signal(cli, libc::SIGKILL);
        wait_for("the hub to follow the container", DEADLINE, || {
            hub.log_text()
                .contains(&format!("container {name} runs on"))
        });
        assert_eq!(container_state(&name).as_deref(), Ok("running"));
        let s = get_session(&hub, &session);
        assert_eq!(s["process"]["state"], "running", "{s}");
        let stopped = action(&hub, &session, "stop").json();
        assert_eq!(stopped["ok"], true, "{stopped}");
        assert_eq!(stopped["how"], how, "{stopped}");
        wait_session(&hub, &session, |s| s["process"]["state"] == "exited");
        // Its end was recorded once --rm had removed it: the name is free
        // for the next start, whose CLI stays and ends with the container.
        let gone = container_state(&name).unwrap_err();
        assert!(gone.contains("No such"), "{gone}");
        start_again(&hub, &session);
        wait_session(&hub, &session, |s| s["identity"]["state"] == "live");
        let stopped = action(&hub, &session, "stop").json();
        assert_eq!(stopped["how"], how, "{stopped}");
        let s = wait_session(&hub, &session, |s| s["process"]["state"] == "exited");
        assert_eq!(s["process"]["exit_code"], 0, "{s}");
        let gone = container_state(&name).unwrap_err();
        assert!(gone.contains("No such"), "{gone}");
    }
}
