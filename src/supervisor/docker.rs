//! Docker launches, the pure part: recognising a foreground `docker run
//! … --name NAME` in a worker's command line, the management context the
//! hub keeps for it, the `docker kill` and `docker inspect` command lines,
//! and what `docker inspect` printed.
//!
//! Such a launch is not the process the hub spawned: the `docker` CLI only
//! attaches to a container the daemon runs. Killing the CLI can leave the
//! container running, and the CLI's exit alone says nothing about the
//! container. So the hub manages the container by name: it signals it with
//! `docker kill --signal TERM|KILL`, and judges its end by `docker
//! inspect`, run with the same executable, working directory and a small,
//! allow-listed environment that were in force at the start (kept
//! privately, so a restarted hub still reaches the same daemon).
//!
//! Recognition follows the CLI's own option grammar (pflag): global
//! options, then `run` (or `container run`), then `run`'s options up to the
//! image. A launch is managed by its container only when it names the
//! container (`--name X` or `--name=X`) and runs in the foreground (no
//! `-d`/`--detach`). Long `run` options this module does not know are taken
//! to need a value, as the CLI does for every option that is not a flag.
//!
//! No I/O here: `container` runs the commands and keeps the record.

use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

/// The one executable name recognised (any directory).
pub const DOCKER: &str = "docker";

/// Longest container name accepted, in bytes.
const MAX_NAME: usize = 201;

/// What `docker inspect --format` prints: the container's id and its state
/// object, one JSON object on one line.
pub const INSPECT_FORMAT: &str = r#"{"Id":{{json .Id}},"State":{{json .State}}}"#;

/// Environment the management commands keep from the startup environment
/// (when set there): the CLI's daemon, context, configuration and TLS
/// variables, executable and home lookup, the SSH agent (`ssh://` hosts),
/// proxies and trust roots. No wildcard: other `DOCKER_*` variables may
/// hold anything. `launcher.dockerManagementEnv` adds names to it.
pub const MANAGEMENT_ENV: &[&str] = &[
    "DOCKER_HOST",
    "DOCKER_CONTEXT",
    "DOCKER_CONFIG",
    "DOCKER_CERT_PATH",
    "DOCKER_TLS",
    "DOCKER_TLS_VERIFY",
    "DOCKER_API_VERSION",
    "DOCKER_CUSTOM_HEADERS",
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SSH_AUTH_SOCK",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// The container a launch runs, and how to reach its daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The `--name` given to `docker run`.
    pub name: String,
    /// The CLI's global options before `run` (`--context X`, `-H URL`,
    /// `--tlsverify`, …), exactly as written; they come first in every
    /// management command too, so it talks to the same daemon.
    pub global_args: Vec<String>,
    /// `--rm`: the daemon removes the container once it has exited, and
    /// only then is it over (its name is free again).
    pub auto_remove: bool,
}

/// What a worker command line is, as far as Docker goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recognised {
    /// Not a `docker run`: an ordinary process.
    NotDocker,
    /// A `docker run` the hub cannot manage by its container (why, for the
    /// log); the CLI process is supervised like any other.
    Unmanaged(Unmanaged),
    /// A foreground `docker run` of a named container.
    Container(Target),
}

/// Why a `docker run` is not managed by its container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unmanaged {
    /// An option the CLI grammar does not accept.
    Option(OptionError),
    /// `-d`/`--detach`.
    Detached,
    /// No `--name`.
    Unnamed,
    /// `--name` is not a container name ([`valid_name`]).
    BadName,
}

impl fmt::Display for Unmanaged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unmanaged::Option(err) => write!(f, "{err}"),
            Unmanaged::Detached => f.write_str(
                "a detached docker run (-d/--detach) ends at once; only a foreground run is \
                 managed by its container",
            ),
            Unmanaged::Unnamed => {
                f.write_str("docker run has no --name to manage its container by")
            }
            Unmanaged::BadName => f.write_str(
                "docker run's --name is not a container name ([A-Za-z0-9][A-Za-z0-9_.-]*, \
                 at most 201 bytes)",
            ),
        }
    }
}

impl std::error::Error for Unmanaged {}

/// Why an option of a command line cannot be read; each names the
/// option as written (`--name`, `-n`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptionError {
    /// A flag with a value that is not Go's boolean.
    NotBoolean(String),
    /// An option the grammar does not know.
    Unknown(String),
    /// An option that takes a value, with none after it.
    NoValue(String),
}

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptionError::NotBoolean(option) => write!(f, "{option} takes true or false"),
            OptionError::Unknown(option) => write!(f, "unknown docker option {option}"),
            OptionError::NoValue(option) => write!(f, "{option} needs a value"),
        }
    }
}

impl std::error::Error for OptionError {}

/// One option's grammar: which names are flags and which take a value.
struct Grammar {
    long_flags: &'static [&'static str],
    /// Long options that take a value; `None`: every long option that is
    /// not a flag does.
    long_values: Option<&'static [&'static str]>,
    /// Short flags, with the long name they stand for.
    short_flags: &'static [(char, &'static str)],
    /// Short options that take a value, with their long names.
    short_values: &'static [(char, &'static str)],
}

/// The CLI's global options (before the subcommand).
const GLOBAL: Grammar = Grammar {
    long_flags: &["debug", "tls", "tlsverify", "version", "help"],
    long_values: Some(&[
        "config",
        "context",
        "host",
        "log-level",
        "tlscacert",
        "tlscert",
        "tlskey",
    ]),
    short_flags: &[('D', "debug"), ('v', "version"), ('h', "help")],
    short_values: &[('c', "context"), ('H', "host"), ('l', "log-level")],
};

/// `docker run`'s options.
const RUN: Grammar = Grammar {
    long_flags: &[
        "detach",
        "interactive",
        "tty",
        "rm",
        "init",
        "privileged",
        "publish-all",
        "read-only",
        "no-healthcheck",
        "oom-kill-disable",
        "disable-content-trust",
        "sig-proxy",
        "quiet",
        "use-api-socket",
        "help",
    ],
    long_values: None,
    short_flags: &[
        ('d', "detach"),
        ('i', "interactive"),
        ('t', "tty"),
        ('P', "publish-all"),
        ('q', "quiet"),
    ],
    short_values: &[
        ('a', "attach"),
        ('c', "cpu-shares"),
        ('e', "env"),
        ('h', "hostname"),
        ('l', "label"),
        ('m', "memory"),
        ('p', "publish"),
        ('u', "user"),
        ('v', "volume"),
        ('w', "workdir"),
    ],
};

/// One option read from a command line.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Opt {
    Flag(&'static str, bool),
    Value(String, String),
}

/// Go's `strconv.ParseBool`, which the CLI uses for `--flag=value`.
fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// Reads the option at `args[i]` (which starts with `-` and is not `-` or
/// `--`); returns what it set and the index after it.
fn read_option(g: &Grammar, args: &[String], i: usize) -> Result<(Vec<Opt>, usize), OptionError> {
    let arg = &args[i];
    if let Some(long) = arg.strip_prefix("--") {
        let (name, inline) = match long.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (long, None),
        };
        if let Some(flag) = g.long_flags.iter().find(|f| **f == name) {
            let value = match inline {
                None => true,
                Some(text) => {
                    parse_bool(text).ok_or_else(|| OptionError::NotBoolean(format!("--{name}")))?
                }
            };
            return Ok((vec![Opt::Flag(flag, value)], i + 1));
        }
        if let Some(known) = g.long_values {
            if !known.contains(&name) {
                return Err(OptionError::Unknown(format!("--{name}")));
            }
        }
        return match inline {
            Some(value) => Ok((vec![Opt::Value(name.into(), value.into())], i + 1)),
            None => match args.get(i + 1) {
                Some(value) => Ok((vec![Opt::Value(name.into(), value.clone())], i + 2)),
                None => Err(OptionError::NoValue(format!("--{name}"))),
            },
        };
    }
    let group = &arg[1..];
    let mut out = Vec::new();
    for (at, c) in group.char_indices() {
        let rest = &group[at + c.len_utf8()..];
        if let Some((_, flag)) = g.short_flags.iter().find(|(s, _)| *s == c) {
            if let Some(text) = rest.strip_prefix('=') {
                let value =
                    parse_bool(text).ok_or_else(|| OptionError::NotBoolean(format!("-{c}")))?;
                out.push(Opt::Flag(flag, value));
                return Ok((out, i + 1));
            }
            out.push(Opt::Flag(flag, true));
            continue;
        }
        if let Some((_, long)) = g.short_values.iter().find(|(s, _)| *s == c) {
            let inline = rest.strip_prefix('=').unwrap_or(rest);
            if !inline.is_empty() {
                out.push(Opt::Value((*long).into(), inline.into()));
                return Ok((out, i + 1));
            }
            return match args.get(i + 1) {
                Some(value) => {
                    out.push(Opt::Value((*long).into(), value.clone()));
                    Ok((out, i + 2))
                }
                None => Err(OptionError::NoValue(format!("-{c}"))),
            };
        }
        return Err(OptionError::Unknown(format!("-{c}")));
    }
    Ok((out, i + 1))
}

/// Whether `arg` is an option (not a positional argument, not `--`).
fn is_option(arg: &str) -> bool {
    arg.starts_with('-') && arg != "-" && arg != "--"
}

/// Whether docker would take `name` as a container name (and it is short
/// enough to be kept).
pub fn valid_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    name.len() <= MAX_NAME
        && matches!(bytes.next(), Some(b) if b.is_ascii_alphanumeric())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Recognises a worker command line (`program`, then `args`); see the
/// module header for the rules.
pub fn recognise(program: &str, args: &[String]) -> Recognised {
    if Path::new(program).file_name().and_then(|n| n.to_str()) != Some(DOCKER) {
        return Recognised::NotDocker;
    }
    // (Such a command line cannot be run at all.)
    if program.contains('\0') || args.iter().any(|a| a.contains('\0')) {
        return Recognised::NotDocker;
    }
    let mut i = 0;
    while i < args.len() && is_option(&args[i]) {
        match read_option(&GLOBAL, args, i) {
            Ok((opts, next)) => {
                if opts
                    .iter()
                    .any(|o| matches!(o, Opt::Flag("version" | "help", true)))
                {
                    return Recognised::NotDocker;
                }
                i = next;
            }
            Err(why) => return Recognised::Unmanaged(Unmanaged::Option(why)),
        }
    }
    let global_args = args[..i].to_vec();
    match (
        args.get(i).map(String::as_str),
        args.get(i + 1).map(String::as_str),
    ) {
        (Some("run"), _) => i += 1,
        (Some("container"), Some("run")) => i += 2,
        _ => return Recognised::NotDocker,
    }
    let mut name = None;
    let mut detach = false;
    let mut auto_remove = false;
    while i < args.len() && is_option(&args[i]) {
        let (opts, next) = match read_option(&RUN, args, i) {
            Ok(read) => read,
            Err(why) => return Recognised::Unmanaged(Unmanaged::Option(why)),
        };
        for opt in opts {
            match opt {
                Opt::Flag("detach", on) => detach = on,
                Opt::Flag("rm", on) => auto_remove = on,
                Opt::Flag("help", true) => return Recognised::NotDocker,
                Opt::Value(key, value) if key == "name" => name = Some(value),
                _ => {}
            }
        }
        i = next;
    }
    if detach {
        return Recognised::Unmanaged(Unmanaged::Detached);
    }
    let Some(name) = name else {
        return Recognised::Unmanaged(Unmanaged::Unnamed);
    };
    if !valid_name(&name) {
        return Recognised::Unmanaged(Unmanaged::BadName);
    }
    Recognised::Container(Target {
        name,
        global_args,
        auto_remove,
    })
}

/// A signal for the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Term,
    Kill,
}

impl Signal {
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Term => "TERM",
            Signal::Kill => "KILL",
        }
    }
}

/// `docker [global options] kill --signal SIG CONTAINER`. `container` is
/// the id once known, else the name.
pub fn kill_args(target: &Target, container: &str, signal: Signal) -> Vec<String> {
    let mut args = target.global_args.clone();
    args.extend(
        ["kill", "--signal", signal.as_str(), container]
            .iter()
            .map(|s| s.to_string()),
    );
    args
}

/// `docker [global options] inspect --type container --format
/// INSPECT_FORMAT CONTAINER`.
pub fn inspect_args(target: &Target, container: &str) -> Vec<String> {
    let mut args = target.global_args.clone();
    args.extend(
        [
            "inspect",
            "--type",
            "container",
            "--format",
            INSPECT_FORMAT,
            container,
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    args
}

/// What `docker inspect` said about the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inspected {
    /// Running (also while paused or restarting).
    Running { id: Option<String> },
    /// It exists and runs nothing: exited (with its status), dead,
    /// created but never started, or being removed.
    Stopped {
        id: Option<String>,
        code: Option<i32>,
    },
    /// No such container (removed, e.g. by `--rm`).
    Gone,
    /// The daemon could not be asked or the answer cannot be read; never
    /// evidence of an end.
    Unknown(String),
}

impl Inspected {
    /// Whether the container certainly runs nothing any more.
    pub fn runs_nothing(&self) -> bool {
        matches!(self, Inspected::Stopped { .. } | Inspected::Gone)
    }

    /// Whether the container is over: gone, or (without `--rm`, when
    /// nothing will remove it) stopped. A `--rm` container that has
    /// stopped is over once the daemon has removed it.
    pub fn over(&self, auto_remove: bool) -> bool {
        match self {
            Inspected::Gone => true,
            Inspected::Stopped { .. } => !auto_remove,
            _ => false,
        }
    }

    /// The container id it reported, if any.
    pub fn id(&self) -> Option<&str> {
        match self {
            Inspected::Running { id } | Inspected::Stopped { id, .. } => id.as_deref(),
            _ => None,
        }
    }
}

/// The longest stderr excerpt an [`Inspected::Unknown`] keeps.
const REASON_BYTES: usize = 200;

/// Reads the result of [`inspect_args`]: its exit status (`None` when it
/// was ended by a signal), stdout and stderr.
pub fn read_inspect(status: Option<i32>, stdout: &[u8], stderr: &[u8]) -> Inspected {
    if status != Some(0) {
        let text = String::from_utf8_lossy(stderr);
        let lower = text.to_ascii_lowercase();
        if lower.contains("no such container") || lower.contains("no such object") {
            return Inspected::Gone;
        }
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        let reason = match status {
            Some(code) => format!("docker inspect exited with status {code}"),
            None => "docker inspect was killed by a signal".to_owned(),
        };
        return Inspected::Unknown(if first.is_empty() {
            reason
        } else {
            format!("{reason}: {}", clip(first.trim(), REASON_BYTES))
        });
    }
    let text = String::from_utf8_lossy(stdout);
    let unreadable = || Inspected::Unknown("docker inspect printed no container state".to_owned());
    let Ok(Value::Object(found)) = serde_json::from_str::<Value>(text.trim()) else {
        return unreadable();
    };
    let Some(Value::Object(state)) = found.get("State") else {
        return unreadable();
    };
    let id = found
        .get("Id")
        .and_then(Value::as_str)
        .filter(|id| valid_id(id))
        .map(str::to_owned);
    let flag = |key: &str| state.get(key).and_then(Value::as_bool).unwrap_or(false);
    let status = state.get("Status").and_then(Value::as_str).unwrap_or("");
    if flag("Running")
        || flag("Restarting")
        || matches!(status, "running" | "restarting" | "paused")
    {
        return Inspected::Running { id };
    }
    let code = match status {
        "exited" | "dead" => state
            .get("ExitCode")
            .and_then(Value::as_i64)
            .and_then(|c| i32::try_from(c).ok()),
        _ => None,
    };
    Inspected::Stopped { id, code }
}

/// A container id as the daemon reports it: 64 lower-case hex digits.
pub fn valid_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn clip(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The startup environment a launch runs with: the hub's own, with the
/// session spec's `env` on top.
pub fn effective_env(
    hub: impl IntoIterator<Item = (String, String)>,
    overrides: &[(String, String)],
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = hub
        .into_iter()
        .filter(|(k, _)| !overrides.iter().any(|(o, _)| o == k))
        .collect();
    env.extend(overrides.iter().cloned());
    env
}

/// The part of `env` the management commands keep: the names of
/// [`MANAGEMENT_ENV`] and `pass_through`, when present; sorted by name.
pub fn management_env(
    env: impl IntoIterator<Item = (String, String)>,
    pass_through: &[String],
) -> Vec<(String, String)> {
    let mut kept: Vec<(String, String)> = env
        .into_iter()
        .filter(|(k, _)| MANAGEMENT_ENV.contains(&k.as_str()) || pass_through.contains(k))
        .collect();
    kept.sort();
    kept.dedup_by(|a, b| a.0 == b.0);
    kept
}

/// Where the executable `program` may be, in order: itself (against `cwd`)
/// when it names a directory, else each `PATH` entry (an empty entry is
/// `cwd`; no `PATH` means `/usr/bin:/bin`).
pub fn executable_candidates(program: &str, cwd: &Path, path_var: Option<&str>) -> Vec<PathBuf> {
    if program.contains('/') {
        return vec![cwd.join(program)];
    }
    path_var
        .unwrap_or("/usr/bin:/bin")
        .split(':')
        .map(|dir| {
            if dir.is_empty() {
                cwd.join(program)
            } else {
                cwd.join(dir).join(program)
            }
        })
        .collect()
}

/// Everything the hub keeps to manage one launch's container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Management {
    /// The docker executable the launch ran, resolved to an absolute path
    /// once at the start (a later `PATH` cannot pick another CLI).
    pub executable: PathBuf,
    /// The launch's working directory (absolute).
    pub cwd: PathBuf,
    /// The kept environment ([`management_env`]); nothing else is passed.
    pub env: Vec<(String, String)>,
    /// The `launcher.dockerManagementEnv` names in force at the start.
    pub pass_through: Vec<String>,
    pub target: Target,
}

/// A management context as stored for one start of one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub session: String,
    pub lifecycle_id: String,
    pub management: Management,
}

/// The stored form (JSON).
pub fn to_json(stored: &Stored) -> Value {
    let m = &stored.management;
    let env: Map<String, Value> = m
        .env
        .iter()
        .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
        .collect();
    json!({
        "session": stored.session,
        "lifecycle_id": stored.lifecycle_id,
        "executable": m.executable.to_str(),
        "cwd": m.cwd.to_str(),
        "name": m.target.name,
        "global_args": m.target.global_args,
        "auto_remove": m.target.auto_remove,
        "pass_through": m.pass_through,
        "env": env,
    })
}

/// Why a management context read back ([`from_json`]) or a Node hub's
/// ([`from_node`]) is refused; a key names the member at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InvalidContext {
    /// A Node hub's context is not a JSON object.
    NotAnObject,
    /// Missing, not a string, or with a NUL byte.
    NotText(&'static str),
    NotAnArray(&'static str),
    /// An array with an item that is not text.
    NonTextItem(&'static str),
    NotAbsolute(&'static str),
    NotABoolean(&'static str),
    /// The name and global options are not a managed run.
    BadTarget,
    BadPassThrough,
    EnvNotObject,
    /// The environment variable's value is not text.
    EnvNotText(String),
    EnvBadName,
    /// A Node hub's context names another container than its command line
    /// runs.
    OtherContainer {
        named: String,
        runs: String,
    },
    /// A Node hub's command line is a run the hub cannot manage.
    Unmanaged(Unmanaged),
    /// A Node hub's command line is not a `docker run`.
    NotDocker,
}

impl fmt::Display for InvalidContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InvalidContext::NotAnObject => f.write_str("it is not an object"),
            InvalidContext::NotText(key) => write!(f, "{key} is not text"),
            InvalidContext::NotAnArray(key) => write!(f, "{key} is not an array"),
            InvalidContext::NonTextItem(key) => write!(f, "{key} holds a non-text item"),
            InvalidContext::NotAbsolute(key) => write!(f, "{key} is not an absolute path"),
            InvalidContext::NotABoolean(key) => write!(f, "{key} is not a boolean"),
            InvalidContext::BadTarget => {
                f.write_str("the container name or global options are not valid")
            }
            InvalidContext::BadPassThrough => {
                f.write_str("pass_through holds a bad or repeated name")
            }
            InvalidContext::EnvNotObject => f.write_str("env is not an object"),
            InvalidContext::EnvNotText(key) => write!(f, "env {key} is not text"),
            InvalidContext::EnvBadName => f.write_str("env holds a bad name"),
            InvalidContext::OtherContainer { named, runs } => {
                write!(
                    f,
                    "it names container {named}, the command line runs {runs}"
                )
            }
            InvalidContext::Unmanaged(why) => write!(f, "{why}"),
            InvalidContext::NotDocker => f.write_str("the command line is not a docker run"),
        }
    }
}

impl std::error::Error for InvalidContext {}

/// The `env` object of a stored context: text values without NUL, under
/// names `name_ok` accepts.
fn env_object(
    value: &Value,
    name_ok: impl Fn(&str) -> bool,
) -> Result<Vec<(String, String)>, InvalidContext> {
    let mut env = Vec::new();
    for (key, item) in value
        .get("env")
        .and_then(Value::as_object)
        .ok_or(InvalidContext::EnvNotObject)?
    {
        let Some(item) = item.as_str().filter(|s| !s.contains('\0')) else {
            return Err(InvalidContext::EnvNotText(key.clone()));
        };
        if !name_ok(key) {
            return Err(InvalidContext::EnvBadName);
        }
        env.push((key.clone(), item.to_owned()));
    }
    Ok(env)
}

/// Reads a stored context back, refusing anything the hub would not have
/// written: relative or non-text paths, NUL bytes, a bad name, global
/// options the CLI grammar does not accept, bad environment names. The
/// environment is filtered again to the built-in names and the stored
/// pass-through names; nothing is filled in from the current environment.
pub fn from_json(value: &Value) -> Result<Stored, InvalidContext> {
    let text = |key: &'static str| -> Result<String, InvalidContext> {
        value
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.contains('\0'))
            .map(str::to_owned)
            .ok_or(InvalidContext::NotText(key))
    };
    let strings = |key: &'static str| -> Result<Vec<String>, InvalidContext> {
        value
            .get(key)
            .and_then(Value::as_array)
            .ok_or(InvalidContext::NotAnArray(key))?
            .iter()
            .map(|item| {
                item.as_str()
                    .filter(|s| !s.contains('\0'))
                    .map(str::to_owned)
                    .ok_or(InvalidContext::NonTextItem(key))
            })
            .collect()
    };
    let absolute = |key: &'static str| -> Result<PathBuf, InvalidContext> {
        let path = PathBuf::from(text(key)?);
        if path.is_absolute() {
            Ok(path)
        } else {
            Err(InvalidContext::NotAbsolute(key))
        }
    };
    let name = text("name")?;
    let global_args = strings("global_args")?;
    let auto_remove = value
        .get("auto_remove")
        .and_then(Value::as_bool)
        .ok_or(InvalidContext::NotABoolean("auto_remove"))?;
    let mut argv = global_args.clone();
    argv.push("run".to_owned());
    if auto_remove {
        argv.push("--rm".to_owned());
    }
    argv.extend(["--name".to_owned(), name.clone()]);
    let target = match recognise(DOCKER, &argv) {
        Recognised::Container(target) if target.name == name => target,
        _ => return Err(InvalidContext::BadTarget),
    };
    let pass_through = strings("pass_through")?;
    if pass_through
        .iter()
        .enumerate()
        .any(|(i, n)| !crate::config::is_env_name(n) || pass_through[..i].contains(n))
    {
        return Err(InvalidContext::BadPassThrough);
    }
    let env = env_object(value, crate::config::is_env_name)?;
    Ok(Stored {
        session: text("session")?,
        lifecycle_id: text("lifecycle_id")?,
        management: Management {
            executable: absolute("executable")?,
            cwd: absolute("cwd")?,
            env: management_env(env, &pass_through),
            pass_through,
            target,
        },
    })
}

/// A Node hub's `docker_management` (its private startup snapshot in a
/// `hub.json` process record: `{executable, cwd, env, name}`) as this
/// hub's context for the same start. The record's own command line
/// (`program`, `args`) must be a managed foreground run of that very
/// container (its global options are taken from there); the paths must be
/// absolute, the environment text without `=` or NUL in a name. The
/// environment is cut down to the allow-list and `pass_through` (this
/// hub's `launcher.dockerManagementEnv`): the Node hub kept its whole
/// startup environment there. Anything else is refused with the reason,
/// and the container is then not managed (as the Node hub treats a
/// context it cannot restore).
pub fn from_node(
    session: &str,
    lifecycle_id: &str,
    program: &str,
    args: &[String],
    value: &Value,
    pass_through: &[String],
) -> Result<Stored, InvalidContext> {
    let obj = value.as_object().ok_or(InvalidContext::NotAnObject)?;
    let absolute = |key: &'static str| -> Result<PathBuf, InvalidContext> {
        match obj.get(key).and_then(Value::as_str) {
            Some(text) if !text.contains('\0') && Path::new(text).is_absolute() => {
                Ok(PathBuf::from(text))
            }
            _ => Err(InvalidContext::NotAbsolute(key)),
        }
    };
    let executable = absolute("executable")?;
    let cwd = absolute("cwd")?;
    let name = obj
        .get("name")
        .and_then(Value::as_str)
        .ok_or(InvalidContext::NotText("name"))?;
    let target = match recognise(program, args) {
        Recognised::Container(target) if target.name == name => target,
        Recognised::Container(target) => {
            return Err(InvalidContext::OtherContainer {
                named: name.to_owned(),
                runs: target.name,
            })
        }
        Recognised::Unmanaged(why) => return Err(InvalidContext::Unmanaged(why)),
        Recognised::NotDocker => return Err(InvalidContext::NotDocker),
    };
    // The Node hub's rule for a name: anything but empty, `=` or NUL.
    let env = env_object(value, |key| {
        !key.is_empty() && !key.contains('=') && !key.contains('\0')
    })?;
    let pass_through: Vec<String> = pass_through.to_vec();
    Ok(Stored {
        session: session.to_owned(),
        lifecycle_id: lifecycle_id.to_owned(),
        management: Management {
            executable,
            cwd,
            env: management_env(env, &pass_through),
            pass_through,
            target,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    fn container(program: &str, words: &[&str]) -> Target {
        match recognise(program, &argv(words)) {
            Recognised::Container(target) => target,
            other => panic!("{words:?}: {other:?}"),
        }
    }

    fn unmanaged(words: &[&str]) -> String {
        match recognise("docker", &argv(words)) {
            Recognised::Unmanaged(why) => why.to_string(),
            other => panic!("{words:?}: {other:?}"),
        }
    }

    #[test]
    fn a_foreground_named_run_is_managed_by_its_container() {
        // The Node hub's docker launch template.
        let node = [
            "run",
            "--rm",
            "--init",
            "--name",
            "simplex-worker-s1",
            "--add-host",
            "host.docker.internal:host-gateway",
            "--user",
            "0:1000",
            "-e",
            "MODEL_API_KEY",
            "-v",
            "/d/s1:/d/s1",
            "--entrypoint",
            "/bin/sh",
            "simplex-worker:latest",
            "-c",
            "exec \"$@\"",
        ];
        let t = container("docker", &node);
        assert_eq!(t.name, "simplex-worker-s1");
        assert!(t.global_args.is_empty());
        assert!(t.auto_remove);
        assert!(!container("docker", &["run", "--name", "w1", "i"]).auto_remove);
        assert!(
            !container(
                "docker",
                &["run", "--rm", "--rm=false", "--name", "w1", "i"]
            )
            .auto_remove
        );
        // Any directory, `--name=`, `container run`, the last --name wins.
        assert_eq!(
            container("/usr/local/bin/docker", &["run", "--name=w1", "img"]).name,
            "w1"
        );
        assert_eq!(
            container(
                "docker",
                &["container", "run", "--name", "a", "--name", "b1", "i"]
            )
            .name,
            "b1"
        );
        // Combined short flags and short options with their value attached
        // or following; `--detach=false` is a foreground run.
        for words in [
            &["run", "-it", "--name", "w1", "img"][..],
            &["run", "-e", "--name", "--name", "w1", "img"],
            &["run", "-eA=1", "-ti", "-v/x:/y", "--name", "w1", "img"],
            &["run", "-ite", "X", "--name", "w1", "img"],
            &["run", "--detach=false", "-d=0", "--name", "w1", "img"],
            &["run", "--detach-keys", "ctrl-x", "--name", "w1", "img"],
            &["run", "--some-new-option", "v", "--name", "w1", "img"],
            &["run", "--name", "w1", "--", "img", "-d"],
        ] {
            assert_eq!(container("docker", words).name, "w1", "{words:?}");
        }
    }

    #[test]
    fn a_name_after_the_image_belongs_to_the_container_command() {
        assert_eq!(
            unmanaged(&["run", "--rm", "img", "--name", "w1"]),
            "docker run has no --name to manage its container by"
        );
        // A value option swallows what follows, as the CLI does.
        assert!(unmanaged(&["run", "-e", "--name", "w1"]).contains("no --name"));
        assert_eq!(
            container("docker", &["run", "--name", "w1", "img", "--name", "w2"]).name,
            "w1"
        );
    }

    #[test]
    fn global_options_are_kept_for_the_management_commands() {
        let t = container(
            "docker",
            &[
                "--context",
                "remote",
                "-H=tcp://h:2376",
                "--tlsverify",
                "-D",
                "--log-level=warn",
                "run",
                "--name",
                "w1",
                "img",
            ],
        );
        assert_eq!(
            t.global_args,
            argv(&[
                "--context",
                "remote",
                "-H=tcp://h:2376",
                "--tlsverify",
                "-D",
                "--log-level=warn"
            ])
        );
        assert_eq!(
            kill_args(&t, "w1", Signal::Term),
            argv(&[
                "--context",
                "remote",
                "-H=tcp://h:2376",
                "--tlsverify",
                "-D",
                "--log-level=warn",
                "kill",
                "--signal",
                "TERM",
                "w1"
            ])
        );
        // An unknown global option cannot be replayed safely.
        assert!(unmanaged(&["--frobnicate", "run", "--name", "w1", "i"]).contains("--frobnicate"));
        assert!(unmanaged(&["-x", "run", "--name", "w1", "i"]).contains("-x"));
    }

    #[test]
    fn what_is_not_a_managed_run() {
        for (program, words) in [
            ("/bin/sh", &["-c", "docker run --name w1 img"][..]),
            ("dockerd", &["run", "--name", "w1", "img"]),
            ("docker-compose", &["run", "--name", "w1", "img"]),
            ("docker", &["start", "w1"]),
            ("docker", &["exec", "w1", "sh"]),
            ("docker", &["container", "start", "w1"]),
            ("docker", &["--version"]),
            ("docker", &["-v", "run", "--name", "w1"]),
            ("docker", &["run", "--help", "--name", "w1"]),
            ("docker", &[]),
            ("docker", &["--context", "a\0b", "run", "--name", "w1"]),
        ] {
            assert_eq!(
                recognise(program, &argv(words)),
                Recognised::NotDocker,
                "{program} {words:?}"
            );
        }
        for words in [
            &["run", "-d", "--name", "w1", "img"][..],
            &["run", "-dit", "--name", "w1", "img"],
            &["run", "--detach", "--name", "w1", "img"],
            &["run", "--name", "w1", "--detach=true", "img"],
        ] {
            assert!(unmanaged(words).contains("detached"), "{words:?}");
        }
        assert!(unmanaged(&["run", "--name", "-bad", "img"]).contains("not a container name"));
        assert!(unmanaged(&["run", "--name=", "img"]).contains("not a container name"));
        assert!(unmanaged(&["run", "--name", "a/b", "img"]).contains("not a container name"));
        let long = "a".repeat(202);
        assert!(unmanaged(&["run", "--name", &long, "img"]).contains("not a container name"));
        assert!(unmanaged(&["run", "--rm=maybe", "--name", "w1"]).contains("true or false"));
        assert!(unmanaged(&["run", "-Z", "--name", "w1"]).contains("-Z"));
        assert!(unmanaged(&["run", "--name"]).contains("needs a value"));
        assert!(unmanaged(&["run", "-e"]).contains("needs a value"));
    }

    #[test]
    fn names_docker_accepts() {
        for good in ["a", "A1", "simplex-worker-s_1.x", &"b".repeat(201)] {
            assert!(valid_name(good), "{good}");
        }
        for bad in ["", "_a", ".a", "-a", "a b", "a/b", "ä", &"b".repeat(202)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn inspect_asks_for_the_container_and_its_state_only() {
        let t = container("docker", &["run", "--name", "w1", "i"]);
        assert_eq!(
            inspect_args(&t, "w1"),
            argv(&[
                "inspect",
                "--type",
                "container",
                "--format",
                INSPECT_FORMAT,
                "w1"
            ])
        );
        assert_eq!(
            kill_args(&t, "w1", Signal::Kill),
            argv(&["kill", "--signal", "KILL", "w1"])
        );
    }

    const ID: &str = "0512f5bb4758dfb884c1e347bc5f91f0086341beebd90b9b8765943ed6e82828";

    fn state(fields: &str) -> Vec<u8> {
        format!(r#"{{"Id":"{ID}","State":{{{fields}}}}}"#).into_bytes()
    }

    #[test]
    fn inspect_output_decides_running_stopped_gone_or_unknown() {
        let id = Some(ID.to_owned());
        // What the real CLI printed for a running and an exited container.
        let running = state(
            r#""Dead":false,"Error":"","ExitCode":0,"FinishedAt":"0001-01-01T00:00:00Z","OOMKilled":false,"Paused":false,"Pid":26253,"Restarting":false,"Running":true,"StartedAt":"2026-12-01T14:12:08.030533185Z","Status":"running""#,
        );
        assert_eq!(
            read_inspect(Some(0), &running, b""),
            Inspected::Running { id: id.clone() }
        );
        let exited = state(
            r#""Dead":false,"ExitCode":3,"Paused":false,"Pid":0,"Restarting":false,"Running":false,"Status":"exited""#,
        );
        assert_eq!(
            read_inspect(Some(0), &exited, b""),
            Inspected::Stopped {
                id: id.clone(),
                code: Some(3)
            }
        );
        for (fields, expect_running) in [
            (r#""Running":true,"Paused":true,"Status":"paused""#, true),
            (
                r#""Running":false,"Restarting":true,"Status":"restarting""#,
                true,
            ),
            (r#""Running":false,"Status":"created","ExitCode":0"#, false),
            (r#""Running":false,"Status":"removing","ExitCode":0"#, false),
            (r#""Running":false,"Status":"dead","ExitCode":137"#, false),
        ] {
            let got = read_inspect(Some(0), &state(fields), b"");
            assert_eq!(
                matches!(got, Inspected::Running { .. }),
                expect_running,
                "{fields}"
            );
            assert_eq!(got.runs_nothing(), !expect_running, "{fields}");
            assert_eq!(got.over(false), !expect_running, "{fields}");
            assert!(
                !got.over(true),
                "{fields}: a --rm container is over once removed"
            );
        }
        // Only exited and dead containers have an exit status.
        assert_eq!(
            read_inspect(
                Some(0),
                &state(r#""Running":false,"Status":"created","ExitCode":0"#),
                b""
            ),
            Inspected::Stopped {
                id: id.clone(),
                code: None
            }
        );
        // A missing container, in the words of current and older CLIs.
        for stderr in [
            "Error: No such container: w1\n",
            "Error: No such object: w1\n",
            "Error response from daemon: no such container\n",
        ] {
            assert_eq!(
                read_inspect(Some(1), b"\n", stderr.as_bytes()),
                Inspected::Gone
            );
        }
        // Anything else is no evidence either way.
        let unknown = read_inspect(
            Some(1),
            b"",
            b"Cannot connect to the Docker daemon at unix:///var/run/docker.sock.\n",
        );
        assert!(
            matches!(&unknown, Inspected::Unknown(r) if r.contains("status 1") && r.contains("Cannot connect")),
            "{unknown:?}"
        );
        assert!(!unknown.runs_nothing() && !unknown.over(false));
        assert!(Inspected::Gone.over(true) && Inspected::Gone.over(false));
        assert!(
            matches!(read_inspect(None, b"", b""), Inspected::Unknown(r) if r.contains("signal"))
        );
        for stdout in [
            &b""[..],
            b"true",
            b"[]",
            b"{\"Id\":\"x\"}",
            b"{\"State\":3}",
            b"\xff",
        ] {
            assert!(
                matches!(read_inspect(Some(0), stdout, b""), Inspected::Unknown(_)),
                "{stdout:?}"
            );
        }
        // A long complaint is clipped.
        let reason = read_inspect(Some(2), b"", "x".repeat(1000).as_bytes());
        assert!(
            matches!(&reason, Inspected::Unknown(r) if r.len() < 300),
            "{reason:?}"
        );
        // An id in another shape is not kept.
        let odd = br#"{"Id":"ABC","State":{"Running":true}}"#;
        assert_eq!(
            read_inspect(Some(0), odd, b""),
            Inspected::Running { id: None }
        );
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn only_allow_listed_and_named_variables_are_kept() {
        let startup = effective_env(
            env(&[
                ("PATH", "/usr/bin"),
                ("HOME", "/root"),
                ("DOCKER_HOST", "unix:///run/d.sock"),
                ("DOCKER_SECRET_THING", "no"),
                ("MODEL_API_KEY", "hub-secret"),
                ("CUSTOM_TOKEN", "old"),
            ]),
            &env(&[("CUSTOM_TOKEN", "new"), ("EXTRA", "spec")]),
        );
        assert_eq!(
            startup.iter().filter(|(k, _)| k == "CUSTOM_TOKEN").count(),
            1
        );
        let kept = management_env(startup.clone(), &["CUSTOM_TOKEN".to_owned()]);
        assert_eq!(
            kept,
            env(&[
                ("CUSTOM_TOKEN", "new"),
                ("DOCKER_HOST", "unix:///run/d.sock"),
                ("HOME", "/root"),
                ("PATH", "/usr/bin"),
            ])
        );
        // Without the pass-through, only the built-in names.
        let plain = management_env(startup, &[]);
        assert!(plain
            .iter()
            .all(|(k, _)| MANAGEMENT_ENV.contains(&k.as_str())));
        assert!(!MANAGEMENT_ENV.iter().any(|n| n.contains('*')));
    }

    #[test]
    fn the_executable_is_looked_up_like_a_shell_would() {
        let cwd = Path::new("/work/s");
        assert_eq!(
            executable_candidates("docker", cwd, Some("/usr/local/bin::rel")),
            vec![
                PathBuf::from("/usr/local/bin/docker"),
                PathBuf::from("/work/s/docker"),
                PathBuf::from("/work/s/rel/docker"),
            ]
        );
        assert_eq!(
            executable_candidates("docker", cwd, None),
            vec![
                PathBuf::from("/usr/bin/docker"),
                PathBuf::from("/bin/docker")
            ]
        );
        assert_eq!(
            executable_candidates("/opt/docker", cwd, Some("/x")),
            vec![PathBuf::from("/opt/docker")]
        );
        assert_eq!(
            executable_candidates("bin/docker", cwd, Some("/x")),
            vec![PathBuf::from("/work/s/bin/docker")]
        );
    }

    fn stored() -> Stored {
        Stored {
            session: "s1".into(),
            lifecycle_id: "l1".into(),
            management: Management {
                executable: "/usr/bin/docker".into(),
                cwd: "/data/sessions/s1".into(),
                env: env(&[("CUSTOM_TOKEN", "t"), ("PATH", "/usr/bin")]),
                pass_through: vec!["CUSTOM_TOKEN".into()],
                target: Target {
                    name: "w-s1".into(),
                    global_args: argv(&["--context", "remote"]),
                    auto_remove: true,
                },
            },
        }
    }

    #[test]
    fn the_stored_context_round_trips_and_refuses_what_the_hub_never_writes() {
        let s = stored();
        assert_eq!(from_json(&to_json(&s)).unwrap(), s);
        let broken = |edit: &dyn Fn(&mut Value)| {
            let mut v = to_json(&s);
            edit(&mut v);
            from_json(&v)
        };
        for edit in [
            &(|v: &mut Value| v["executable"] = json!("docker")) as &dyn Fn(&mut Value),
            &|v: &mut Value| v["cwd"] = json!("rel"),
            &|v: &mut Value| v["executable"] = json!("/usr/bin/do\0cker"),
            &|v: &mut Value| v["name"] = json!("-x"),
            &|v: &mut Value| v["global_args"] = json!(["rm", "-f"]),
            &|v: &mut Value| v["global_args"] = json!(["--unknown"]),
            &|v: &mut Value| v["global_args"] = json!("x"),
            &|v: &mut Value| v["auto_remove"] = json!("yes"),
            &|v: &mut Value| v["pass_through"] = json!(["A", "A"]),
            &|v: &mut Value| v["pass_through"] = json!(["DOCKER_*"]),
            &|v: &mut Value| v["env"] = json!({"A=B": "x"}),
            &|v: &mut Value| v["env"] = json!({"PATH": 1}),
            &|v: &mut Value| v["env"] = json!([]),
            &|v: &mut Value| {
                v.as_object_mut().unwrap().remove("lifecycle_id");
            },
        ] {
            assert!(broken(edit).is_err(), "{}", {
                let mut v = to_json(&s);
                edit(&mut v);
                v
            });
        }
        // Variables beyond the allow-list and the stored names are dropped
        // on reading, never added.
        let read = broken(&|v: &mut Value| {
            v["env"]["MODEL_API_KEY"] = json!("leaked");
            v["pass_through"] = json!([]);
        })
        .unwrap();
        assert_eq!(read.management.env, env(&[("PATH", "/usr/bin")]));
    }

    #[test]
    fn a_node_hubs_context_becomes_ours_for_the_same_container() {
        let args = argv(&[
            "--context",
            "remote",
            "run",
            "--rm",
            "--name",
            "w-s1",
            "img",
            "w",
        ]);
        let node = json!({
            "executable": "/usr/bin/docker",
            "cwd": "/data/sessions/s1",
            "env": {"PATH": "/usr/bin", "CUSTOM_TOKEN": "t", "MODEL_API_KEY": "secret"},
            "name": "w-s1",
        });
        let pass = vec!["CUSTOM_TOKEN".to_string()];
        let got = from_node("s1", "l1", "docker", &args, &node, &pass).unwrap();
        assert_eq!(
            got,
            stored(),
            "the secret outside the allow-list is dropped"
        );
        // What it is written as reads back the same.
        assert_eq!(from_json(&to_json(&got)).unwrap(), got);

        let refused = |edit: &dyn Fn(&mut Value), args: &[String]| {
            let mut v = node.clone();
            edit(&mut v);
            from_node("s1", "l1", "/usr/bin/docker", args, &v, &pass)
        };
        let same = &|_: &mut Value| {};
        for (edit, args, why) in [
            (
                &(|v: &mut Value| v["name"] = json!("w-s2")) as &dyn Fn(&mut Value),
                args.clone(),
                "names container w-s2",
            ),
            (
                &|v: &mut Value| v["executable"] = json!("docker"),
                args.clone(),
                "executable",
            ),
            (
                &|v: &mut Value| v["cwd"] = json!("/a\0b"),
                args.clone(),
                "cwd",
            ),
            (
                &|v: &mut Value| v["env"] = json!({"A=B": "x"}),
                args.clone(),
                "bad name",
            ),
            (
                &|v: &mut Value| v["env"] = json!({"A": 1}),
                args.clone(),
                "env A",
            ),
            (
                &|v: &mut Value| v["env"] = json!("PATH=/bin"),
                args.clone(),
                "env is not",
            ),
            (
                &|v: &mut Value| *v = json!(null),
                args.clone(),
                "not an object",
            ),
            (
                same,
                argv(&["run", "-d", "--name", "w-s1", "img"]),
                "detached",
            ),
            (same, argv(&["ps"]), "not a docker run"),
        ] {
            let err = refused(edit, &args).unwrap_err().to_string();
            assert!(err.contains(why), "{why}: {err}");
        }
    }
}
