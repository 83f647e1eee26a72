//! The layers merged and validated, pure: built-in defaults, the file and
//! the overrides into one value with its paths resolved, then the typed
//! [`Config`] ([`resolve`]); a library launch file's settings on their own
//! ([`launch_profile`]); the file's JSONC read into a JSON object.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::{paths, schema, validate, Config, ConfigError, Feature, Overrides, BUILT_FEATURES};
use crate::wire::jsonc;

/// Where the configuration came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// This file (absolute, normalized).
    File(PathBuf),
    /// No file: built-in defaults plus overrides.
    Defaults,
}

/// A loaded configuration.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    pub source: ConfigSource,
    /// The merged configuration with paths resolved, in schema key order,
    /// holding only keys of the features validation ran with, so it is
    /// itself a valid file for this build. Contains secrets; see
    /// [`redacted`](super::redacted).
    pub resolved: Value,
}

/// Validates and resolves a configuration: built-in defaults, then the
/// file (`file` is its path and text), then `overrides`. Relative paths in
/// the file resolve against the file's directory, those in `overrides`
/// against `cwd`; a leading `~` in `dataDir` expands to `home`. Keys of
/// features not in `features` are refused in the file.
pub fn resolve(
    file: Option<(&Path, &str)>,
    overrides: &Overrides,
    cwd: &Path,
    home: &Path,
    features: &[Feature],
) -> Result<Loaded, ConfigError> {
    let mut merged = schema::defaults();
    paths::resolve_layer(&mut merged, cwd, home)?;

    let source = match file {
        Some((path, text)) => {
            let path = paths::absolute(cwd, path);
            let mut layer = parse_file(&path, text)?;
            if let Value::Object(map) = &layer {
                schema::check_keys(map, features)?;
            }
            let dir = path.parent().unwrap_or_else(|| Path::new("/"));
            paths::resolve_layer(&mut layer, dir, home)?;
            schema::merge(&mut merged, &layer);
            ConfigSource::File(path)
        }
        None => {
            schema::merge(&mut merged, &schema::fresh_start());
            ConfigSource::Defaults
        }
    };

    let mut layer = overrides.to_layer()?;
    paths::resolve_layer(&mut layer, cwd, home)?;
    schema::merge(&mut merged, &layer);
    paths::check_home(&merged)?;

    let config = validate::build(&merged, features)?;
    if let Value::Object(map) = &mut merged {
        schema::prune(map, "", features);
    }
    Ok(Loaded {
        config,
        source,
        resolved: merged,
    })
}

/// Validates the launch settings of a configuration-library launch file
/// (`layer`: an object with any of `launcher`, `worker` and `endpoints`,
/// already limited by the caller to the keys a launch file may hold) with
/// the same rules as the hub configuration, against the built-in defaults
/// rather than this hub's settings: an omitted key means the same whatever
/// configuration the hub runs with. Paths are not resolved (`worker.bin`
/// stays as written). The caller reads `launcher`, `endpoints` and the
/// launch fields of `worker` from the result.
pub fn launch_profile(layer: &Map<String, Value>) -> Result<Config, ConfigError> {
    schema::check_keys(layer, BUILT_FEATURES)?;
    let mut merged = schema::defaults();
    schema::merge(&mut merged, &Value::Object(layer.clone()));
    validate::build(&merged, BUILT_FEATURES)
}

/// Test helper: `text` resolved as the file `/etc/simplex/hub.jsonc` with no
/// overrides, cwd `/work/cwd`, home `/home/op` and every feature; panics if
/// it does not resolve.
#[cfg(test)]
pub fn test_config(text: &str) -> Config {
    resolve(
        Some((Path::new("/etc/simplex/hub.jsonc"), text)),
        &Overrides::default(),
        Path::new("/work/cwd"),
        Path::new("/home/op"),
        Feature::ALL,
    )
    .unwrap()
    .config
}

/// `text` with its comments blanked out (`wire::jsonc`); an unterminated
/// block comment is a [`ConfigError::UnterminatedComment`] with no path.
pub fn strip_jsonc(text: &str) -> Result<String, ConfigError> {
    jsonc::strip_jsonc(text).map_err(|at| ConfigError::UnterminatedComment {
        path: None,
        line: at.line,
        column: at.column,
    })
}

/// Strips comments, parses, and insists on a top-level object.
fn parse_file(path: &Path, text: &str) -> Result<Value, ConfigError> {
    let json = strip_jsonc(text).map_err(|err| match err {
        ConfigError::UnterminatedComment { line, column, .. } => ConfigError::UnterminatedComment {
            path: Some(path.to_owned()),
            line,
            column,
        },
        other => other,
    })?;
    let value: Value = serde_json::from_str(&json).map_err(|source| ConfigError::Syntax {
        path: path.to_owned(),
        line: source.line(),
        column: source.column(),
        source,
    })?;
    let found = match &value {
        Value::Object(_) => return Ok(value),
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
    };
    Err(ConfigError::NotAnObject {
        path: path.to_owned(),
        found,
    })
}
