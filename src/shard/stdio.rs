//! `simplex-hub shard-stdio`: a direct Shard connection (seed 004 §5.2) on
//! stdin and stdout, for an SDK that spawns it as a subprocess. It holds no
//! hub state: it connects to the running hub's unix socket (no token: the
//! socket file's permissions), sends one `direct.bind` (an existing agent,
//! or one it asks the hub to create), and from the bind's response on
//! copies bytes both ways: stdin to the socket unread (the hub splits the
//! lines and applies every JSONL rule), the socket's lines to stdout. The
//! direct connection's rules (per-agent messages only, no `agent_id`,
//! `hello` then `sync`) are the hub's (`direct`), so they exist once.
//!
//! Logs go to stderr. The exit status says how it ended ([`exit`]): stdin
//! ended (the connection detaches, the agent keeps running), the agent
//! ended (the hub's last line names why), the hub went away, or it could
//! not start. What the handshake reads and what the last line means are
//! pure ([`Handshake`], [`ending`]).

use std::io::{self, BufWriter, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};

use crate::wire::shard::direct::{self, End};
use crate::wire::shard::jsonl::{Record, Splitter};

/// The exit statuses of `shard-stdio`.
pub mod exit {
    /// Stdin ended (or stdout was closed): the connection was detached;
    /// the agent keeps running.
    pub const DETACHED: u8 = 0;
    /// It could not start: no hub listens on the socket, the configuration
    /// could not be read, or the hub refused the bind (an unknown agent, a
    /// worker that is not running, a create that failed).
    pub const FAILED: u8 = 1;
    // 2 is a malformed command line, as for every command (`entry`).
    /// The agent ended: its worker exited, or its session was deleted.
    pub const AGENT_ENDED: u8 = 3;
    /// The hub went away: the connection ended without the hub saying
    /// why (it stopped or crashed, or dropped this client past its
    /// outbound budget).
    pub const HUB_GONE: u8 = 4;
}

/// The correlation id of the bind.
const BIND_ID: &str = "shard-stdio-bind";

/// The longest line the hub writes (its outbound budget ends a connection
/// before one this long could be queued).
const MAX_HUB_LINE: usize = 64 * 1024 * 1024;

/// Lines longer than this are never the hub's last word, so only shorter
/// ones are kept to look at after the end.
const LAST_LINE_KEPT: usize = 16 * 1024;

/// What to bind to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Agent(String),
    Create {
        /// The new agent's working directory (`None`: the current one; a
        /// relative one is taken from the current one).
        cwd: Option<PathBuf>,
        model: Option<String>,
        provider: Option<String>,
    },
}

/// The command line of `shard-stdio`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdioArgs {
    pub target: Target,
    /// `--socket PATH`; otherwise the hub's configuration says
    /// (`shard.socket`, from `--config`/`--data-dir`).
    pub socket: Option<PathBuf>,
    pub config: Option<PathBuf>,
    pub data_dir: Option<PathBuf>,
}

/// The `direct.bind` line for `target`, a relative `cwd` taken from
/// `here`.
pub fn bind_message(target: &Target, here: &std::path::Path) -> Value {
    match target {
        Target::Agent(agent) => json!({"type": direct::BIND, "id": BIND_ID, "agent_id": agent}),
        Target::Create {
            cwd,
            model,
            provider,
        } => {
            let cwd = match cwd {
                Some(cwd) => here.join(cwd),
                None => here.to_path_buf(),
            };
            let mut create = json!({"cwd": cwd});
            if let Some(model) = model {
                create["model"] = json!(model);
            }
            if let Some(provider) = provider {
                create["provider"] = json!(provider);
            }
            json!({"type": direct::BIND, "id": BIND_ID, "create": create})
        }
    }
}

/// Where the handshake is: before the bind's response, every line is the
/// daemon connection's (its `hello`, broadcasts) and is not passed on.
#[derive(Debug, Clone, PartialEq)]
pub enum Handshake {
    Waiting,
    /// Bound to this agent: every later line goes to stdout.
    Bound(String),
    /// The hub refused the bind: its error.
    Refused(Value),
}

impl Handshake {
    /// Takes one line of the hub's.
    pub fn take(&mut self, line: &str) {
        if *self != Handshake::Waiting {
            return;
        }
        let Ok(msg) = serde_json::from_str::<Value>(line) else {
            return;
        };
        if msg["type"] != "response" || msg["id"] != BIND_ID {
            return;
        }
        *self = if msg["success"] == true {
            Handshake::Bound(msg["data"]["agent_id"].as_str().unwrap_or("").to_string())
        } else {
            Handshake::Refused(msg["error"].clone())
        };
    }
}

/// How the connection's end reads: the status and what to say on stderr.
/// `last` is the hub's last line (when short), `detached` whether stdin
/// ended or stdout was closed first.
pub fn ending(last: Option<&str>, detached: bool) -> (u8, Option<String>) {
    let end = last
        .and_then(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|msg| msg["type"] == "error")
        .and_then(|msg| {
            let end = End::parse(msg["end_reason"].as_str()?)?;
            Some((end, msg["message"].as_str().unwrap_or("").to_string()))
        });
    match end {
        Some((_, message)) => (exit::AGENT_ENDED, Some(message)),
        None if detached => (exit::DETACHED, None),
        None => (
            exit::HUB_GONE,
            Some(
                "the hub closed the connection (it stopped or went away, or dropped this \
                 client)"
                    .into(),
            ),
        ),
    }
}

/// Runs `shard-stdio` to its exit status.
pub fn run(args: &StdioArgs) -> u8 {
    let socket_path = match socket_path(args) {
        Ok(path) => path,
        Err(err) => {
            say(&err.to_string());
            return exit::FAILED;
        }
    };
    let stream = match UnixStream::connect(&socket_path) {
        Ok(stream) => stream,
        Err(err) => {
            say(&format!(
                "no hub is listening on {}: {err}",
                socket_path.display()
            ));
            return exit::FAILED;
        }
    };
    let here = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let mut bind = bind_message(&args.target, &here).to_string();
    bind.push('\n');
    if let Err(err) = (&stream).write_all(bind.as_bytes()) {
        say(&format!("the hub closed the connection: {err}"));
        return exit::HUB_GONE;
    }
    let detached = Arc::new(AtomicBool::new(false));
    let mut pump = Some((stream.try_clone(), detached.clone()));
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(64 * 1024, stdout.lock());
    let mut handshake = Handshake::Waiting;
    let mut last: Option<String> = None;
    let mut stdout_closed = false;
    let mut splitter = Splitter::new(MAX_HUB_LINE);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match (&stream).read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        splitter.push(&buf[..n], |record| {
            let Record::Line(line) = record else {
                return;
            };
            if !matches!(handshake, Handshake::Bound(_)) {
                handshake.take(line);
                return;
            }
            last = (line.len() <= LAST_LINE_KEPT).then(|| line.to_string());
            if !stdout_closed
                && (out.write_all(line.as_bytes()).is_err() || out.write_all(b"\n").is_err())
            {
                stdout_closed = true;
            }
        });
        if !stdout_closed && out.flush().is_err() {
            stdout_closed = true;
        }
        if stdout_closed {
            // Nobody reads any more: detach.
            let _ = stream.shutdown(Shutdown::Both);
            return exit::DETACHED;
        }
        match &handshake {
            Handshake::Refused(error) => {
                say(&format!(
                    "the hub refused to bind: {} {}",
                    error["code"].as_str().unwrap_or("?"),
                    error["message"].as_str().unwrap_or("")
                ));
                return exit::FAILED;
            }
            Handshake::Bound(agent) => {
                if let Some((stream, detached)) = pump.take() {
                    let Ok(stream) = stream else {
                        say("cannot copy stdin to the hub's socket");
                        return exit::FAILED;
                    };
                    say(&format!(
                        "bound to agent {agent} ({})",
                        socket_path.display()
                    ));
                    let spawned = std::thread::Builder::new()
                        .name("shard-stdin".into())
                        .spawn(move || copy_stdin(stream, &detached));
                    if spawned.is_err() {
                        say("cannot start the stdin thread");
                        return exit::FAILED;
                    }
                }
            }
            Handshake::Waiting => {}
        }
    }
    if let Some(partial) = splitter.finish() {
        say(&format!(
            "the hub's last {partial} bytes were not a whole line; dropped"
        ));
    }
    if handshake == Handshake::Waiting {
        say("the hub closed the connection before answering the bind");
        return exit::HUB_GONE;
    }
    let (status, message) = ending(last.as_deref(), detached.load(Ordering::Acquire));
    if let Some(message) = message {
        say(&message);
    }
    status
}

/// Copies stdin to the socket as it comes; at its end the socket's
/// sending side is shut (the hub detaches, writes what it had queued, and
/// closes).
fn copy_stdin(stream: UnixStream, detached: &AtomicBool) {
    let stdin = io::stdin();
    let mut input = stdin.lock();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if (&stream).write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    detached.store(true, Ordering::Release);
    let _ = stream.shutdown(Shutdown::Write);
}

/// The hub's socket: `--socket`, or `shard.socket` of the configuration
/// the hub would read.
fn socket_path(args: &StdioArgs) -> Result<PathBuf, NoSocket> {
    if let Some(path) = &args.socket {
        return Ok(path.clone());
    }
    let overrides = crate::config::Overrides {
        data_dir: args.data_dir.clone(),
        ..Default::default()
    };
    let loaded =
        crate::config::load(args.config.as_deref(), &overrides).map_err(NoSocket::Config)?;
    loaded.config.shard_socket_path().ok_or(NoSocket::Off)
}

/// Why the hub's socket is not known.
#[derive(Debug)]
enum NoSocket {
    /// The hub's configuration cannot be read.
    Config(crate::config::ConfigError),
    /// `shard.socket` is empty.
    Off,
}

impl std::fmt::Display for NoSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoSocket::Config(err) => write!(f, "cannot read the hub's configuration: {err}"),
            NoSocket::Off => f.write_str(
                "the hub's unix socket is off (shard.socket is empty in its configuration)",
            ),
        }
    }
}

impl std::error::Error for NoSocket {}

fn say(message: &str) {
    eprintln!("simplex-hub shard-stdio: {message}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bind_names_the_agent_or_what_to_create() {
        let here = std::path::Path::new("/here");
        assert_eq!(
            bind_message(&Target::Agent("a".into()), here),
            json!({"type": "direct.bind", "id": BIND_ID, "agent_id": "a"})
        );
        let create = bind_message(
            &Target::Create {
                cwd: Some("w".into()),
                model: Some("m".into()),
                provider: None,
            },
            here,
        );
        assert_eq!(create["create"], json!({"cwd": "/here/w", "model": "m"}));
        let create = bind_message(
            &Target::Create {
                cwd: Some("/abs".into()),
                model: None,
                provider: Some("p".into()),
            },
            here,
        );
        assert_eq!(create["create"], json!({"cwd": "/abs", "provider": "p"}));
        let create = bind_message(
            &Target::Create {
                cwd: None,
                model: None,
                provider: None,
            },
            here,
        );
        assert_eq!(create["create"], json!({"cwd": "/here"}));
    }

    #[test]
    fn the_handshake_waits_for_the_binds_response() {
        let mut h = Handshake::Waiting;
        for line in [
            r#"{"type":"hello","protocol_version":"0.1.0"}"#,
            r#"{"type":"agent_activity","agent_id":"a"}"#,
            r#"{"type":"response","id":"other","command":"direct.bind","success":true}"#,
            "not json",
        ] {
            h.take(line);
            assert_eq!(h, Handshake::Waiting, "{line}");
        }
        h.take(r#"{"type":"response","id":"shard-stdio-bind","command":"direct.bind","success":true,"data":{"agent_id":"a"}}"#);
        assert_eq!(h, Handshake::Bound("a".into()));
        let mut r = Handshake::Waiting;
        r.take(r#"{"type":"response","id":"shard-stdio-bind","success":false,"error":{"code":"NOT_FOUND","message":"no"}}"#);
        assert_eq!(
            r,
            Handshake::Refused(json!({"code": "NOT_FOUND", "message": "no"}))
        );
    }

    #[test]
    fn the_end_is_the_agents_the_clients_or_the_hubs() {
        let end = direct::end_event("a", End::WorkerExited, Some("stopped"), None);
        let line = direct::without_agent_id(&end.to_string()).into_owned();
        let (status, message) = ending(Some(&line), false);
        assert_eq!(status, exit::AGENT_ENDED);
        assert!(message.unwrap().contains("worker exited"));
        assert_eq!(ending(Some(&line), true).0, exit::AGENT_ENDED);
        let fatal = r#"{"type":"error","code":"INTERNAL_ERROR","message":"x","fatal":true}"#;
        assert_eq!(ending(Some(fatal), false).0, exit::HUB_GONE);
        assert_eq!(ending(Some(fatal), true), (exit::DETACHED, None));
        assert_eq!(ending(None, false).0, exit::HUB_GONE);
    }
}
