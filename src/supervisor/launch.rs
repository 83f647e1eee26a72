//! The worker command line: program, arguments, working directory and
//! environment overrides for one session start.
//!
//! Three shapes, one per `launcher.kind`: `"built-in"`, this executable's
//! `mock-worker` subcommand; `"simplex-worker"`, which runs `worker.bin`
//! with the fixed worker flags; and `"command"`, an argv template with
//! `{placeholder}`s. No shell is ever involved. The two external kinds may
//! name a pid file (`launcher.pidFile`, a template too) for a launcher that
//! daemonizes.
//!
//! Pure apart from reading the hub's uid and gid for `{uid}`/`{gid}`. The
//! supervisor spawns the process.

use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::render::Endpoints;
use crate::config::{Config, LauncherKind};

/// How to start one worker process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// Run as given: a path, or a bare name looked up through `PATH`.
    pub program: String,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    /// `spec.env`, applied on top of the inherited hub environment.
    pub env: Vec<(String, String)>,
    /// `launcher.pidFile`, expanded: where a daemonizing launcher leaves
    /// the worker's pid. `None` when not configured.
    pub pid_file: Option<PathBuf>,
}

/// Everything [`invocation`] needs to know about a start.
#[derive(Debug, Clone, Copy)]
pub struct LaunchInput<'a> {
    pub config: &'a Config,
    /// The session's normalized spec.
    pub spec: &'a Value,
    /// The session id.
    pub session: &'a str,
    pub session_dir: &'a Path,
    /// The worker configuration file, `<session dir>/config/config.yaml`.
    pub config_path: &'a Path,
    pub data_dir: &'a Path,
    pub endpoints: &'a Endpoints,
    /// The session token, unencoded (for `{token}`).
    pub token: &'a str,
    /// This executable, for the built-in worker.
    pub self_exe: &'a Path,
}

/// Why a worker command line cannot be built. The spawn is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaunchError {
    /// A `{name}` that is not one of the placeholders. `name` is `None`
    /// when the braces hold something that does not even look like a
    /// placeholder name; it is then not repeated, since it may be a secret
    /// passed as a literal argument.
    UnknownPlaceholder { name: Option<String>, field: String },
    /// A `{` without its closing `}`.
    Unterminated { field: String },
    /// The program to run came out empty.
    EmptyProgram,
    /// A path that must be passed as text is not valid UTF-8.
    NonUtf8Path { what: &'static str },
    /// A spec field has the wrong shape (the spec should have been
    /// normalized).
    BadSpec { field: String, rule: &'static str },
    /// `launcher.pidFile` expanded to something that is not an absolute
    /// path.
    RelativePidFile,
}

impl fmt::Display for LaunchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LaunchError::UnknownPlaceholder {
                name: Some(name),
                field,
            } => write!(
                f,
                "unknown placeholder {{{name}}} in {field} (write {{{{ and }}}} for literal braces)"
            ),
            LaunchError::UnknownPlaceholder { name: None, field } => write!(
                f,
                "{field} has braces around something that is not a placeholder name \
                 (write {{{{ and }}}} for literal braces)"
            ),
            LaunchError::Unterminated { field } => {
                write!(f, "unterminated '{{' in {field}")
            }
            LaunchError::EmptyProgram => write!(f, "the worker command is empty"),
            LaunchError::NonUtf8Path { what } => {
                write!(f, "the {what} path is not valid UTF-8")
            }
            LaunchError::BadSpec { field, rule } => {
                write!(f, "session spec field {field} {rule}")
            }
            LaunchError::RelativePidFile => {
                write!(f, "launcher.pidFile does not expand to an absolute path")
            }
        }
    }
}

impl std::error::Error for LaunchError {}

/// Builds the command line for `input`'s session (see the module header for
/// the three shapes). The working directory is `launcher.cwd` when set
/// (expanded; a relative result is taken against the session directory),
/// else the session directory; the built-in worker always runs in the
/// session directory and ignores `launcher.args` and `launcher.cwd`.
pub fn invocation(input: &LaunchInput) -> Result<Invocation, LaunchError> {
    let config = input.config;
    let session = input.session.to_owned();
    let config_path = utf8(input.config_path, "worker configuration")?;
    let threads = match input.spec.get("threads") {
        None | Some(Value::Null) => config.worker.threads,
        Some(value) => value
            .as_u64()
            .filter(|n| *n >= 1)
            .ok_or(LaunchError::BadSpec {
                field: "threads".into(),
                rule: "must be a positive integer",
            })?,
    }
    .to_string();
    let extra_args = strings(input.spec, "extraArgs")?;
    let env = environment(input.spec)?;
    let fixed = vec![
        "--config".to_owned(),
        config_path.clone(),
        "--session".to_owned(),
        session.clone(),
        "--threads".to_owned(),
        threads.clone(),
    ];

    let launcher = &config.launcher;
    if launcher.kind == LauncherKind::BuiltIn {
        let mut args = vec!["mock-worker".to_owned()];
        args.extend(fixed);
        return Ok(Invocation {
            program: utf8(input.self_exe, "hub executable")?,
            args,
            cwd: input.session_dir.to_path_buf(),
            env,
            pid_file: None,
        });
    }

    let vars = Vars {
        session: &session,
        config: &config_path,
        data_dir: &utf8(input.data_dir, "data directory")?,
        session_dir: &utf8(input.session_dir, "session directory")?,
        endpoints: input.endpoints,
        token: input.token,
        threads: &threads,
        worker_bin: &utf8(&config.worker.bin, "worker.bin")?,
    };
    let (program, args) = match launcher.kind {
        // (`BuiltIn` returned above.)
        LauncherKind::SimplexWorker | LauncherKind::BuiltIn => {
            let mut args = fixed;
            args.extend(launcher.args.iter().cloned());
            args.extend(config.worker.args.iter().cloned());
            args.extend(extra_args);
            (vars.worker_bin.to_owned(), args)
        }
        LauncherKind::Command => {
            let mut argv = Vec::with_capacity(launcher.command.len() + launcher.args.len());
            for (i, item) in launcher.command.iter().enumerate() {
                argv.push(expand(item, &|n| vars.get(n), || {
                    format!("launcher.command[{i}]")
                })?);
            }
            for (i, item) in launcher.args.iter().enumerate() {
                argv.push(expand(item, &|n| vars.get(n), || {
                    format!("launcher.args[{i}]")
                })?);
            }
            argv.extend(extra_args);
            let mut argv = argv.into_iter();
            let program = argv.next().unwrap_or_default();
            (program, argv.collect())
        }
    };
    if program.is_empty() {
        return Err(LaunchError::EmptyProgram);
    }
    let cwd = if launcher.cwd.is_empty() {
        input.session_dir.to_path_buf()
    } else {
        input
            .session_dir
            .join(expand(&launcher.cwd, &|n| vars.get(n), || {
                "launcher.cwd".to_owned()
            })?)
    };
    let pid_file = pid_file(config, input.session, input.session_dir, input.data_dir)?;
    Ok(Invocation {
        program,
        args,
        cwd,
        env,
        pid_file,
    })
}

/// `launcher.pidFile` for `session`, expanded, or `None` when the launcher
/// declares no pid file (always for the built-in worker). Its template may
/// use `{session}`, `{session_dir}` and `{data_dir}` only, so the path is
/// known again when a restarted hub adopts the worker.
pub fn pid_file(
    config: &Config,
    session: &str,
    session_dir: &Path,
    data_dir: &Path,
) -> Result<Option<PathBuf>, LaunchError> {
    let template = &config.launcher.pid_file;
    if template.is_empty() || config.launcher.kind == LauncherKind::BuiltIn {
        return Ok(None);
    }
    let session_dir = utf8(session_dir, "session directory")?;
    let data_dir = utf8(data_dir, "data directory")?;
    let vars = |name: &str| match name {
        "session" => Some(session.to_owned()),
        "session_dir" => Some(session_dir.clone()),
        "data_dir" => Some(data_dir.clone()),
        _ => None,
    };
    let file = expand(template, &vars, || "launcher.pidFile".to_owned())?;
    if !file.starts_with('/') {
        return Err(LaunchError::RelativePidFile);
    }
    Ok(Some(PathBuf::from(file)))
}

/// The values placeholders expand to.
struct Vars<'a> {
    session: &'a str,
    config: &'a str,
    data_dir: &'a str,
    session_dir: &'a str,
    endpoints: &'a Endpoints,
    token: &'a str,
    threads: &'a str,
    worker_bin: &'a str,
}

impl Vars<'_> {
    fn get(&self, name: &str) -> Option<String> {
        let value = match name {
            "session" => self.session,
            "config" => self.config,
            "data_dir" => self.data_dir,
            "session_dir" => self.session_dir,
            "endpoint" => &self.endpoints.events,
            "confirm_endpoint" => &self.endpoints.confirm,
            "tools_endpoint" => &self.endpoints.tools,
            "token" => self.token,
            "threads" => self.threads,
            "worker_bin" => self.worker_bin,
            // SAFETY: getuid and getgid take no arguments, cannot fail and
            // touch no memory of ours.
            "uid" => return Some(unsafe { libc::getuid() }.to_string()),
            // SAFETY: as for getuid.
            "gid" => return Some(unsafe { libc::getgid() }.to_string()),
            _ => return None,
        };
        Some(value.to_owned())
    }
}

/// Expands the placeholders of one template element. `{{` and `}}` stand
/// for literal braces; a lone `}` is kept as is. `field` names the element
/// in errors.
fn expand(
    template: &str,
    vars: &dyn Fn(&str) -> Option<String>,
    field: impl Fn() -> String,
) -> Result<String, LaunchError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find(['{', '}']) {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("{{").or_else(|| tail.strip_prefix("}}")) {
            out.push_str(&tail[..1]);
            rest = after;
        } else if let Some(after) = tail.strip_prefix('}') {
            out.push('}');
            rest = after;
        } else {
            let body = &tail[1..];
            let end = body
                .find('}')
                .ok_or_else(|| LaunchError::Unterminated { field: field() })?;
            let name = &body[..end];
            let value = vars(name).ok_or_else(|| LaunchError::UnknownPlaceholder {
                name: is_name(name).then(|| name.to_owned()),
                field: field(),
            })?;
            out.push_str(&value);
            rest = &body[end + 1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Whether `text` looks like a placeholder name (and so is safe to repeat
/// in an error): a short identifier.
fn is_name(text: &str) -> bool {
    let mut bytes = text.bytes();
    text.len() <= 32
        && matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// `spec.env` as ordered pairs.
fn environment(spec: &Value) -> Result<Vec<(String, String)>, LaunchError> {
    let Some(env) = spec.get("env").filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let bad = || LaunchError::BadSpec {
        field: "env".into(),
        rule: "must be an object of strings",
    };
    env.as_object()
        .ok_or_else(bad)?
        .iter()
        .map(|(name, value)| match value {
            Value::String(value) => Ok((name.clone(), value.clone())),
            _ => Err(bad()),
        })
        .collect()
}

/// A spec array of strings; absent means empty.
fn strings(spec: &Value, key: &str) -> Result<Vec<String>, LaunchError> {
    let bad = || LaunchError::BadSpec {
        field: key.to_owned(),
        rule: "must be an array of strings",
    };
    match spec.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().map(str::to_owned).ok_or_else(bad))
            .collect(),
        Some(_) => Err(bad()),
    }
}

fn utf8(path: &Path, what: &'static str) -> Result<String, LaunchError> {
    path.to_str()
        .map(str::to_owned)
        .ok_or(LaunchError::NonUtf8Path { what })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_config;
    use crate::supervisor::render::endpoints;
    use serde_json::json;

    fn run(config: &Config, spec: &Value) -> Result<Invocation, LaunchError> {
        let eps = endpoints("127.0.0.1", 8800, 8801, "demo", "t k");
        invocation(&LaunchInput {
            config,
            spec,
            session: "demo",
            session_dir: Path::new("/data/sessions/demo"),
            config_path: Path::new("/data/sessions/demo/config/config.yaml"),
            data_dir: Path::new("/data"),
            endpoints: &eps,
            token: "t k",
            self_exe: Path::new("/usr/bin/simplex-hub"),
        })
    }

    fn spec(provider: &str) -> Value {
        json!({"provider": provider, "threads": 3, "env": {"B": "2", "A": "1"},
               "extraArgs": ["--x={session}", "y"]})
    }

    const FIXED: [&str; 6] = [
        "--config",
        "/data/sessions/demo/config/config.yaml",
        "--session",
        "demo",
        "--threads",
        "3",
    ];

    #[test]
    fn the_built_in_launcher_runs_the_built_in_worker_for_every_provider() {
        let c = test_config(r#"{"launcher": {"kind": "built-in", "args": ["--l"], "cwd": "/x"}}"#);
        for provider in ["mock", "deepseek"] {
            let inv = run(&c, &spec(provider)).unwrap();
            assert_eq!(inv.program, "/usr/bin/simplex-hub");
            let mut expected = vec!["mock-worker"];
            expected.extend(FIXED);
            assert_eq!(inv.args, expected);
            assert_eq!(inv.cwd, Path::new("/data/sessions/demo"));
            assert_eq!(
                inv.env,
                [("B".into(), "2".into()), ("A".into(), "1".into())]
            );
            assert_eq!(inv.pid_file, None);
        }

        // Any other launcher runs for the mock profile too: mock.enabled
        // is the model provider, not a worker.
        let c = test_config(r#"{"mock": {"enabled": true}}"#);
        let inv = run(&c, &spec("mock")).unwrap();
        assert_eq!(inv.program, "simplex_worker");
        let c = test_config(r#"{"launcher": {"kind": "command", "command": ["docker"]}}"#);
        assert_eq!(run(&c, &spec("mock")).unwrap().program, "docker");
    }

    #[test]
    fn pid_file_templates() {
        let with = |kind: &str, pid_file: &str| {
            test_config(
                &json!({"launcher": {"kind": kind, "command": ["w"], "pidFile": pid_file}})
                    .to_string(),
            )
        };
        let pid_file = |c: &Config| run(c, &spec("deepseek")).map(|inv| inv.pid_file);
        assert_eq!(pid_file(&with("command", "")).unwrap(), None);
        assert_eq!(
            pid_file(&with("command", "/run/w.pid")).unwrap(),
            Some(PathBuf::from("/run/w.pid"))
        );
        assert_eq!(
            pid_file(&with("simplex-worker", "{session_dir}/w-{session}.pid")).unwrap(),
            Some(PathBuf::from("/data/sessions/demo/w-demo.pid"))
        );
        assert_eq!(
            pid_file(&with("command", "/{{x}}/{data_dir}")).unwrap(),
            Some(PathBuf::from("/{x}//data"))
        );
        // The three names are known again when a worker is adopted; the
        // others are not.
        let err = pid_file(&with("command", "/run/{token}.pid")).unwrap_err();
        assert_eq!(
            err,
            LaunchError::UnknownPlaceholder {
                name: Some("token".into()),
                field: "launcher.pidFile".into()
            }
        );
        let c = with("command", "/run/{session}.pid");
        assert_eq!(
            super::pid_file(&c, "s", Path::new("/d/sessions/s"), Path::new("/d")).unwrap(),
            Some(PathBuf::from("/run/s.pid"))
        );
    }

    #[test]
    fn simplex_worker_argv_order() {
        let c = test_config(
            r#"{"worker": {"bin": "/opt/w", "args": ["--w1", "{session}"]},
                "launcher": {"args": ["--l1"]}}"#,
        );
        let inv = run(&c, &spec("deepseek")).unwrap();
        assert_eq!(inv.program, "/opt/w");
        let mut expected = FIXED.to_vec();
        expected.extend(["--l1", "--w1", "{session}", "--x={session}", "y"]);
        assert_eq!(inv.args, expected);
        assert_eq!(inv.cwd, Path::new("/data/sessions/demo"));
        assert_eq!(inv.env.len(), 2);

        // Threads default to the configuration when the spec lacks them.
        let inv = run(&c, &json!({"provider": "deepseek"})).unwrap();
        assert_eq!(inv.args[5], "1");
        assert!(inv.env.is_empty());
    }

    #[test]
    fn command_launcher_expands_every_placeholder() {
        let c = test_config(
            r#"{"worker": {"bin": "/opt/w"}, "launcher": {"kind": "command",
            "command": ["docker", "run", "--name", "w-{session}", "--user", "0:{gid}",
                        "{config}", "{data_dir}", "{session_dir}", "{endpoint}",
                        "{confirm_endpoint}", "{tools_endpoint}", "{token}",
                        "{threads}", "{worker_bin}", "{uid}",
                        "{{literal}}", "a}}b{{", "}", "x{session}{threads}y"],
            "args": ["--arg={session_dir}/config"]}}"#,
        );
        let inv = run(&c, &spec("deepseek")).unwrap();
        // SAFETY: see `Vars::get`.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        assert_eq!(inv.program, "docker");
        let gid = format!("0:{gid}");
        let uid = uid.to_string();
        assert_eq!(
            inv.args,
            [
                "run",
                "--name",
                "w-demo",
                "--user",
                &gid,
                "/data/sessions/demo/config/config.yaml",
                "/data",
                "/data/sessions/demo",
                "ws://127.0.0.1:8800/agent/demo/events?token=t%20k",
                "ws://127.0.0.1:8800/agent/demo/confirm?token=t%20k",
                "ws://127.0.0.1:8801/agent/demo/tools?token=t%20k",
                "t k",
                "3",
                "/opt/w",
                &uid,
                "{literal}",
                "a}b{",
                "}",
                "xdemo3y",
                "--arg=/data/sessions/demo/config",
                // extraArgs are appended without expansion.
                "--x={session}",
                "y",
            ]
        );
        assert_eq!(inv.cwd, Path::new("/data/sessions/demo"));
    }

    #[test]
    fn template_errors_refuse_the_spawn() {
        let command = |items: Value| {
            test_config(&json!({"launcher": {"kind": "command", "command": items}}).to_string())
        };
        let err = run(
            &command(json!(["w", "--p={prompts_dir}"])),
            &spec("deepseek"),
        )
        .unwrap_err();
        assert_eq!(
            err,
            LaunchError::UnknownPlaceholder {
                name: Some("prompts_dir".into()),
                field: "launcher.command[1]".into()
            }
        );
        assert_eq!(
            err.to_string(),
            "unknown placeholder {prompts_dir} in launcher.command[1] \
             (write {{ and }} for literal braces)"
        );

        let err = run(
            &command(json!(["w", r#"{"api_key": "sk-1"}"#])),
            &spec("deepseek"),
        )
        .unwrap_err();
        assert!(!err.to_string().contains("sk-1"), "{err}");
        assert!(matches!(
            err,
            LaunchError::UnknownPlaceholder { name: None, .. }
        ));

        let err = run(&command(json!(["w{session"])), &spec("deepseek")).unwrap_err();
        assert_eq!(err.to_string(), "unterminated '{' in launcher.command[0]");

        let c =
            test_config(r#"{"launcher": {"kind": "command", "command": ["w"], "args": ["{x}"]}}"#);
        let err = run(&c, &spec("deepseek")).unwrap_err();
        assert_eq!(
            err,
            LaunchError::UnknownPlaceholder {
                name: Some("x".into()),
                field: "launcher.args[0]".into()
            }
        );

        let built_in = test_config(
            &json!({"launcher": {"kind": "built-in", "command": ["{nope}"]}}).to_string(),
        );
        let inv = run(&built_in, &spec("mock")).unwrap();
        assert_eq!(
            inv.program, "/usr/bin/simplex-hub",
            "the built-in worker never expands"
        );

        let err = run(&command(json!(["", "x"])), &spec("deepseek")).unwrap_err();
        assert_eq!(err, LaunchError::EmptyProgram);
    }

    #[test]
    fn cwd_rules() {
        let with_cwd = |kind: &str, cwd: &str| {
            test_config(
                &json!({"launcher": {"kind": kind, "command": ["w"], "cwd": cwd}}).to_string(),
            )
        };
        let cwd = |c: &Config| run(c, &spec("deepseek")).map(|inv| inv.cwd);
        assert_eq!(
            cwd(&with_cwd("command", "")).unwrap(),
            Path::new("/data/sessions/demo")
        );
        assert_eq!(
            cwd(&with_cwd("command", "/srv/{session}")).unwrap(),
            Path::new("/srv/demo")
        );
        assert_eq!(
            cwd(&with_cwd("simplex-worker", "{data_dir}/w")).unwrap(),
            Path::new("/data/w")
        );
        assert_eq!(
            cwd(&with_cwd("command", "work")).unwrap(),
            Path::new("/data/sessions/demo/work")
        );
        assert_eq!(
            cwd(&with_cwd("command", "{bad}")).unwrap_err().to_string(),
            "unknown placeholder {bad} in launcher.cwd (write {{ and }} for literal braces)"
        );
        // The built-in worker ignores launcher.cwd.
        let c = with_cwd("built-in", "/srv");
        assert_eq!(
            run(&c, &spec("mock")).unwrap().cwd,
            Path::new("/data/sessions/demo")
        );
    }

    #[test]
    fn malformed_spec_fields_are_refused() {
        let c = test_config("{}");
        for (spec, field) in [
            (json!({"provider": "deepseek", "threads": 0}), "threads"),
            (
                json!({"provider": "deepseek", "extraArgs": [1]}),
                "extraArgs",
            ),
            (json!({"provider": "deepseek", "env": {"A": 1}}), "env"),
            (json!({"provider": "deepseek", "env": []}), "env"),
        ] {
            let err = run(&c, &spec).unwrap_err();
            assert!(
                matches!(&err, LaunchError::BadSpec { field: f, .. } if f == field),
                "{spec}: {err}"
            );
        }
    }
}
