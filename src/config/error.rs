//! The one error type of configuration loading, and the pieces it carries.
//!
//! Every message names what was wrong with the value that was found, so an
//! operator can fix the file without reading the source.

use std::fmt;
use std::io;
use std::path::PathBuf;

use serde_json::Value;

use super::Feature;

/// Why loading, validating or writing the configuration failed.
#[derive(Debug)]
pub enum ConfigError {
    /// Reading the configuration file, finding the current directory or
    /// writing the first-run file failed.
    Io {
        path: PathBuf,
        /// What was being done, as a verb phrase: "read", "create".
        op: &'static str,
        source: io::Error,
    },
    /// A `/*` comment is never closed. `path` is `None` when the text did
    /// not come from a file.
    UnterminatedComment {
        path: Option<PathBuf>,
        line: usize,
        column: usize,
    },
    /// The file is not valid JSON once its comments are blanked out.
    /// `line` and `column` are serde_json's (1-based, column in bytes).
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        source: serde_json::Error,
    },
    /// The file holds valid JSON whose top level is not an object.
    NotAnObject { path: PathBuf, found: &'static str },
    /// The file names keys the schema does not have, or keys this build
    /// does not support yet. All of them, in file order.
    UnknownKeys { keys: Vec<UnknownKey> },
    /// The file uses a key that existed in older hubs and was removed.
    RemovedKey { key: String, hint: &'static str },
    /// Values break the schema's rules. All violations found, in schema
    /// order, then the rules that relate several keys.
    Invalid { violations: Vec<Violation> },
    /// A `--listen` value is not `host:port` or `[v6]:port`.
    Listen { input: String, reason: &'static str },
    /// A path given on the command line is not valid UTF-8, so it cannot be
    /// stored in the JSON configuration.
    NonUtf8Path { key: &'static str, path: PathBuf },
    /// A path starts with `~` but no home directory is known.
    NoHome { key: &'static str, value: String },
}

/// A key path the schema rejected, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownKey {
    /// Dotted key path, e.g. `listen.bogus`.
    pub path: String,
    /// `Some(feature)` when the key exists in the schema but belongs to a
    /// feature this build does not have; `None` when it does not exist.
    pub unbuilt: Option<Feature>,
}

/// One broken rule: the key, the value found and the rule it breaks.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    /// Dotted key path, with `[i]` for array entries.
    pub key: String,
    /// The offending value (`null` when the key is missing). Secrets are
    /// replaced by a placeholder naming their JSON type.
    pub value: Value,
    /// The rule, phrased to follow the value: "must be ...".
    pub rule: String,
}

/// Longest rendering of an offending value inside a message.
const VALUE_DISPLAY_MAX: usize = 120;

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shown = self.value.to_string();
        if shown.len() > VALUE_DISPLAY_MAX {
            let mut cut = VALUE_DISPLAY_MAX;
            while !shown.is_char_boundary(cut) {
                cut -= 1;
            }
            shown.truncate(cut);
            shown.push_str("...");
        }
        write!(f, "{} = {}: {}", self.key, shown, self.rule)
    }
}

impl fmt::Display for UnknownKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.path)?;
        if self.unbuilt.is_some() {
            f.write_str(" (not supported by this build yet)")?;
        }
        Ok(())
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Io { path, op, source } => {
                write!(f, "cannot {op} {}: {source}", path.display())
            }
            ConfigError::UnterminatedComment { path, line, column } => {
                if let Some(path) = path {
                    write!(f, "{}:{line}:{column}: ", path.display())?;
                } else {
                    write!(f, "line {line} column {column}: ")?;
                }
                f.write_str("unterminated block comment")
            }
            ConfigError::Syntax {
                path,
                line,
                column,
                source,
            } => {
                // serde_json appends " at line L column C"; the position is
                // already in front, so drop the repeat.
                let full = source.to_string();
                let suffix = format!(" at line {line} column {column}");
                let message = full.strip_suffix(&suffix).unwrap_or(&full);
                write!(
                    f,
                    "{}:{line}:{column}: invalid JSON: {message}",
                    path.display()
                )
            }
            ConfigError::NotAnObject { path, found } => write!(
                f,
                "{}: the top level must be a JSON object, found {found}",
                path.display()
            ),
            ConfigError::UnknownKeys { keys } => {
                f.write_str("unknown configuration key(s): ")?;
                for (i, key) in keys.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{key}")?;
                }
                Ok(())
            }
            ConfigError::RemovedKey { key, hint } => {
                write!(f, "configuration key {key} is no longer supported: {hint}")
            }
            ConfigError::Invalid { violations } => {
                f.write_str("invalid configuration: ")?;
                for (i, violation) in violations.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{violation}")?;
                }
                Ok(())
            }
            ConfigError::Listen { input, reason } => {
                write!(f, "invalid listen address {input:?}: {reason}")
            }
            ConfigError::NonUtf8Path { key, path } => {
                write!(f, "{key}: path {} is not valid UTF-8", path.display())
            }
            ConfigError::NoHome { key, value } => {
                write!(f, "{key}: cannot expand {value:?} because HOME is not set")
            }
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::Io { source, .. } => Some(source),
            ConfigError::Syntax { source, .. } => Some(source),
            _ => None,
        }
    }
}
