//! Recognising a managed Docker launch in a worker's command line: a
//! foreground `docker run … --name NAME`, read with the CLI's own option
//! grammar (pflag): global options, then `run` (or `container run`), then
//! `run`'s options up to the image; and why a run is not managed.

use std::fmt;
use std::path::Path;

use super::DOCKER;

/// Longest container name accepted, in bytes.
const MAX_NAME: usize = 201;

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
/// `docker` module's header for the rules.
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
