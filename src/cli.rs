//! Command-line parsing, compatible with the Node.js hub's flags. Pure:
//! takes the argument list, returns what to run or a usage error. `main`
//! maps usage errors to exit status 2.

use std::fmt;
use std::path::PathBuf;

use crate::config::{self, Overrides};
use crate::shard::stdio::{StdioArgs, Target};

/// What the command line asks for.
#[derive(Debug)]
pub enum Command {
    Serve(ServeArgs),
    CheckConfig(ServeArgs),
    MockWorker(MockWorkerArgs),
    ShardStdio(StdioArgs),
    Help,
    Version,
}

/// Flags of `serve` (and `check-config`, which accepts the same overrides).
#[derive(Debug, Default)]
pub struct ServeArgs {
    pub config: Option<PathBuf>,
    pub overrides: Overrides,
    pub log_level: Option<String>,
    pub static_dir: Option<PathBuf>,
}

/// Arguments of the built-in worker, the same as the real worker's.
#[derive(Debug, Default)]
pub struct MockWorkerArgs {
    pub config: PathBuf,
    pub session: String,
    pub threads: u32,
}

/// A malformed command line.
#[derive(Debug, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

pub const HELP: &str = "\
simplex-hub: supervise agent workers and drive them from a browser

usage:
  simplex-hub [serve] [options]          run the hub (default)
  simplex-hub check-config [FILE] [options]
                                         validate and print the resolved configuration
  simplex-hub mock-worker --config FILE --session ID [--threads N]
                                         the built-in worker (started by the hub)
  simplex-hub shard-stdio (--agent ID | --create [--cwd DIR] [--model M] [--provider P])
                          [--data-dir DIR] [--config FILE] [--socket PATH]
                                         a direct Shard connection to one agent of the
                                         running hub, JSONL on stdin/stdout (exit status:
                                         0 stdin ended, 1 could not start, 2 usage,
                                         3 the agent ended, 4 the hub went away)

options:
  -c, --config FILE            configuration file (default <data-dir>/hub.config.jsonc)
  -l, --listen HOST:PORT       main listener (default 127.0.0.1:8800; [::1]:PORT for IPv6; port 0 = any)
      --tools-port PORT        remote-tools listener port (toolRequests.port, default 8801; 0 = any)
      --data-dir DIR           data directory (default ~/.simplex/hub)
      --worker-bin PATH        worker executable (worker.bin)
      --panel-token T          panel token (panel.token); required off loopback
      --mock / --no-mock       enable or disable the offline mock model provider (mock.enabled)
      --force-kill-process-group
                               escalate SIGKILL to the worker's process group
      --static-dir DIR         serve the panel from DIR instead of the embedded copy (development)
      --public-host HOST:PORT  Shard remote mode: the pinned public host (shard.publicHost)
      --allowed-origin ORIGIN  Shard: an allowed browser origin, repeatable (shard.allowedOrigins)
      --trust-proxy loopback|IP
                               Shard: honour X-Forwarded-Proto/-Host from this peer (shard.trustProxy)
      --allow-insecure-remote  Shard: allow remote clients over plain HTTP (shard.allowInsecureRemote)
  -v, --verbose                log level debug
      --log-level LEVEL        trace|debug|info|warn|error|silent (default info)
  -h, --help                   print this help
  -V, --version                print the version
";

/// Parses the arguments after the program name.
pub fn parse(args: &[String]) -> Result<Command, UsageError> {
    let (sub, rest) = match args.first().map(String::as_str) {
        Some("serve") => ("serve", &args[1..]),
        Some("check-config") => ("check-config", &args[1..]),
        Some("mock-worker") => return parse_mock_worker(&args[1..]).map(Command::MockWorker),
        Some("shard-stdio") => return parse_shard_stdio(&args[1..]).map(Command::ShardStdio),
        Some("help") => return Ok(Command::Help),
        Some(other) if !other.starts_with('-') => {
            return Err(UsageError(format!("unknown command: {other}")))
        }
        _ => ("serve", args),
    };
    let mut out = ServeArgs::default();
    let mut positional = Vec::new();
    let mut it = Flags::new(rest);
    while let Some(arg) = it.next_arg() {
        match arg.name.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "-V" | "--version" => return Ok(Command::Version),
            "-c" | "--config" => out.config = Some(PathBuf::from(it.value(&arg)?)),
            "-l" | "--listen" => {
                let value = it.value(&arg)?;
                let parsed = config::parse_listen(&value)
                    .map_err(|err| UsageError(format!("--listen: {err}")))?;
                out.overrides.listen = Some(parsed);
            }
            "--tools-port" => {
                let value = it.value(&arg)?;
                let port = Some(value.as_str())
                    .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|v| v.parse::<u16>().ok())
                    .ok_or_else(|| {
                        UsageError(format!(
                            "--tools-port: {value:?} is not a port from 0 to 65535"
                        ))
                    })?;
                out.overrides.tools_port = Some(port);
            }
            "--data-dir" => {
                out.overrides.data_dir = Some(PathBuf::from(non_empty(&arg, it.value(&arg)?)?))
            }
            "--worker-bin" => {
                out.overrides.worker_bin = Some(PathBuf::from(non_empty(&arg, it.value(&arg)?)?))
            }
            "--panel-token" => out.overrides.panel_token = Some(it.value(&arg)?),
            "--mock" => out.overrides.mock = Some(it.no_value(&arg, true)?),
            "--no-mock" => out.overrides.mock = Some(it.no_value(&arg, false)?),
            "--force-kill-process-group" => {
                out.overrides.force_kill_process_group = it.no_value(&arg, true)?
            }
            "--public-host" => out.overrides.public_host = Some(non_empty(&arg, it.value(&arg)?)?),
            "--allowed-origin" => out
                .overrides
                .allowed_origins
                .push(non_empty(&arg, it.value(&arg)?)?),
            "--trust-proxy" => out.overrides.trust_proxy = Some(non_empty(&arg, it.value(&arg)?)?),
            "--allow-insecure-remote" => {
                out.overrides.allow_insecure_remote = it.no_value(&arg, true)?
            }
            "--static-dir" => {
                out.static_dir = Some(PathBuf::from(non_empty(&arg, it.value(&arg)?)?))
            }
            "-v" | "--verbose" => out.log_level = Some(it.no_value(&arg, "debug".to_string())?),
            "--log-level" => {
                let level = it.value(&arg)?;
                if !LEVELS.contains(&level.as_str()) {
                    return Err(UsageError(format!(
                        "--log-level: {level:?} is not one of {}",
                        LEVELS.join("|")
                    )));
                }
                out.log_level = Some(level);
            }
            name if name.starts_with('-') && name.len() > 1 => {
                return Err(UsageError(format!("unknown option: {name}")))
            }
            _ => positional.push(arg.name),
        }
    }
    match (sub, positional.as_slice()) {
        ("check-config", []) => Ok(Command::CheckConfig(out)),
        ("check-config", [file]) if out.config.is_none() => {
            out.config = Some(PathBuf::from(file));
            Ok(Command::CheckConfig(out))
        }
        (_, []) => Ok(Command::Serve(out)),
        (_, [.., extra]) => Err(UsageError(format!("unexpected argument: {extra}"))),
    }
}

/// Accepted `--log-level` values.
pub const LEVELS: &[&str] = &["trace", "debug", "info", "warn", "error", "silent"];

fn parse_mock_worker(args: &[String]) -> Result<MockWorkerArgs, UsageError> {
    let mut config = None;
    let mut session = None;
    let mut threads = 1u32;
    let mut it = Flags::new(args);
    while let Some(arg) = it.next_arg() {
        match arg.name.as_str() {
            "--config" => config = Some(PathBuf::from(non_empty(&arg, it.value(&arg)?)?)),
            "--session" => session = Some(it.value(&arg)?),
            "--threads" => {
                let value = it.value(&arg)?;
                threads = value.parse().ok().filter(|n| *n >= 1).ok_or_else(|| {
                    UsageError(format!("--threads: {value:?} is not a positive integer"))
                })?;
            }
            other => {
                return Err(UsageError(format!(
                    "mock-worker: unexpected argument: {other}"
                )))
            }
        }
    }
    let config =
        config.ok_or_else(|| UsageError("mock-worker: --config FILE is required".into()))?;
    let session =
        session.ok_or_else(|| UsageError("mock-worker: --session ID is required".into()))?;
    if !crate::wire::ids::is_valid_id(&session) {
        return Err(UsageError(format!(
            "mock-worker: --session {session:?} must be 1-128 characters of [A-Za-z0-9_-]"
        )));
    }
    Ok(MockWorkerArgs {
        config,
        session,
        threads,
    })
}

fn parse_shard_stdio(args: &[String]) -> Result<StdioArgs, UsageError> {
    let mut agent = None;
    let mut create = false;
    let (mut cwd, mut model, mut provider) = (None, None, None);
    let (mut socket, mut config, mut data_dir) = (None, None, None);
    let mut it = Flags::new(args);
    while let Some(arg) = it.next_arg() {
        let path = |it: &mut Flags<'_>| -> Result<PathBuf, UsageError> {
            Ok(PathBuf::from(non_empty(&arg, it.value(&arg)?)?))
        };
        match arg.name.as_str() {
            "--agent" => agent = Some(non_empty(&arg, it.value(&arg)?)?),
            "--create" => create = it.no_value(&arg, true)?,
            "--cwd" => cwd = Some(path(&mut it)?),
            "--model" => model = Some(non_empty(&arg, it.value(&arg)?)?),
            "--provider" => provider = Some(non_empty(&arg, it.value(&arg)?)?),
            "--socket" => socket = Some(path(&mut it)?),
            "-c" | "--config" => config = Some(path(&mut it)?),
            "--data-dir" => data_dir = Some(path(&mut it)?),
            other => {
                return Err(UsageError(format!(
                    "shard-stdio: unexpected argument: {other}"
                )))
            }
        }
    }
    let target = match (agent, create) {
        (Some(_), true) => {
            return Err(UsageError(
                "shard-stdio: --agent and --create are mutually exclusive".into(),
            ))
        }
        (None, false) => {
            return Err(UsageError(
                "shard-stdio: --agent ID or --create is required".into(),
            ))
        }
        (Some(agent), false) => {
            if cwd.is_some() || model.is_some() || provider.is_some() {
                return Err(UsageError(
                    "shard-stdio: --cwd, --model and --provider go with --create".into(),
                ));
            }
            Target::Agent(agent)
        }
        (None, true) => Target::Create {
            cwd,
            model,
            provider,
        },
    };
    Ok(StdioArgs {
        target,
        socket,
        config,
        data_dir,
    })
}

fn non_empty(arg: &Arg, value: String) -> Result<String, UsageError> {
    if value.is_empty() {
        Err(UsageError(format!("{} needs a non-empty value", arg.name)))
    } else {
        Ok(value)
    }
}

/// One flag as written, with an inline `--flag=value` if given.
struct Arg {
    name: String,
    inline: Option<String>,
}

struct Flags<'a> {
    args: &'a [String],
    pos: usize,
}

impl<'a> Flags<'a> {
    fn new(args: &'a [String]) -> Flags<'a> {
        Flags { args, pos: 0 }
    }

    fn next_arg(&mut self) -> Option<Arg> {
        let raw = self.args.get(self.pos)?;
        self.pos += 1;
        Some(match raw.split_once('=') {
            Some((name, value)) if name.starts_with("--") => Arg {
                name: name.to_string(),
                inline: Some(value.to_string()),
            },
            _ => Arg {
                name: raw.clone(),
                inline: None,
            },
        })
    }

    /// The flag's value: inline, or the next argument.
    fn value(&mut self, arg: &Arg) -> Result<String, UsageError> {
        if let Some(v) = &arg.inline {
            return Ok(v.clone());
        }
        let v = self
            .args
            .get(self.pos)
            .ok_or_else(|| UsageError(format!("{} needs a value", arg.name)))?;
        self.pos += 1;
        Ok(v.clone())
    }

    /// A switch: refuses an inline value.
    fn no_value<T>(&mut self, arg: &Arg, v: T) -> Result<T, UsageError> {
        match arg.inline {
            Some(_) => Err(UsageError(format!("{} takes no value", arg.name))),
            None => Ok(v),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn serve_is_the_default() {
        assert!(matches!(parse(&args(&[])), Ok(Command::Serve(_))));
        let Ok(Command::Serve(s)) = parse(&args(&[
            "-l",
            "[::1]:0",
            "--no-mock",
            "--panel-token=t",
            "--tools-port",
            "0",
        ])) else {
            panic!()
        };
        assert_eq!(s.overrides.listen.map(|(_, port)| port), Some(0));
        assert_eq!(s.overrides.mock, Some(false));
        assert_eq!(s.overrides.panel_token.as_deref(), Some("t"));
        assert_eq!(s.overrides.tools_port, Some(0));
    }

    #[test]
    fn usage_errors() {
        for bad in [
            &["--nope"][..],
            &["--listen"],
            &["--listen", "nohost"],
            &["--tools-port", "x"],
            &["--tools-port", "70000"],
            &["--tools-port", "-1"],
            &["--log-level", "loud"],
            &["--mock=yes"],
            &["serve", "extra"],
            &["frobnicate"],
            &["mock-worker", "--session", "x"],
            &["mock-worker", "--config", "f", "--session", "a/b"],
            &[
                "mock-worker",
                "--config",
                "f",
                "--session",
                "a",
                "--threads",
                "0",
            ],
            &["shard-stdio"],
            &["shard-stdio", "--agent"],
            &["shard-stdio", "--agent", ""],
            &["shard-stdio", "--agent", "a", "--create"],
            &["shard-stdio", "--agent", "a", "--cwd", "/w"],
            &["shard-stdio", "--create=yes"],
            &["shard-stdio", "--agent", "a", "extra"],
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn shard_flags_set_their_overrides() {
        let Ok(Command::Serve(s)) = parse(&args(&[
            "--public-host",
            "hub.example.com:443",
            "--allowed-origin",
            "https://hub.example.com",
            "--allowed-origin=https://app.example.com",
            "--trust-proxy=loopback",
            "--allow-insecure-remote",
        ])) else {
            panic!()
        };
        let o = &s.overrides;
        assert_eq!(o.public_host.as_deref(), Some("hub.example.com:443"));
        assert_eq!(
            o.allowed_origins,
            ["https://hub.example.com", "https://app.example.com"]
        );
        assert_eq!(o.trust_proxy.as_deref(), Some("loopback"));
        assert!(o.allow_insecure_remote);
        for bad in [
            &["--public-host"][..],
            &["--public-host", ""],
            &["--allowed-origin="],
            &["--trust-proxy"],
            &["--allow-insecure-remote=yes"],
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn check_config_takes_a_file() {
        let Ok(Command::CheckConfig(c)) = parse(&args(&["check-config", "x.jsonc"])) else {
            panic!()
        };
        assert_eq!(c.config, Some(PathBuf::from("x.jsonc")));
    }

    #[test]
    fn help_and_version() {
        assert!(matches!(parse(&args(&["-h"])), Ok(Command::Help)));
        assert!(matches!(parse(&args(&["--version"])), Ok(Command::Version)));
        assert!(matches!(
            parse(&args(&["serve", "-V"])),
            Ok(Command::Version)
        ));
    }

    #[test]
    fn shard_stdio_args() {
        let Ok(Command::ShardStdio(a)) =
            parse(&args(&["shard-stdio", "--agent", "a1", "--data-dir", "/d"]))
        else {
            panic!()
        };
        assert_eq!(a.target, Target::Agent("a1".into()));
        assert_eq!(a.data_dir, Some(PathBuf::from("/d")));
        let Ok(Command::ShardStdio(c)) = parse(&args(&[
            "shard-stdio",
            "--create",
            "--cwd=w",
            "--model",
            "m",
            "--socket",
            "/s.sock",
        ])) else {
            panic!()
        };
        assert_eq!(
            c.target,
            Target::Create {
                cwd: Some("w".into()),
                model: Some("m".into()),
                provider: None
            }
        );
        assert_eq!(c.socket, Some(PathBuf::from("/s.sock")));
    }

    #[test]
    fn mock_worker_args() {
        let Ok(Command::MockWorker(m)) = parse(&args(&[
            "mock-worker",
            "--config",
            "c.yaml",
            "--session",
            "s1",
            "--threads",
            "2",
        ])) else {
            panic!()
        };
        assert_eq!((m.session.as_str(), m.threads), ("s1", 2));
    }
}
