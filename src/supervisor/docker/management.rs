//! The management context the hub keeps for a Docker launch: the
//! allow-listed environment, the executable as a shell would find it, and
//! its stored form (written and read back by `supervisor::context`), also
//! made from a Node hub's `docker_management` record; why a context is
//! refused ([`InvalidContext`]).

use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use super::{recognise, Recognised, Target, Unmanaged, DOCKER};

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
