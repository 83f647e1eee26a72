//! The configuration's I/O: finding and reading the file for this process
//! ([`load`]: `--config`, else the data directory's, else defaults) and the
//! first-run file ([`write_first_run`]).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::resolve::{resolve, ConfigSource, Loaded};
use super::{paths, schema, ConfigError, Feature, Overrides, BUILT_FEATURES};
use crate::util::fsutil;

/// File names looked up in the data directory when no `--config` is given,
/// in order. The first run writes the first one.
const FILE_NAMES: [&str; 2] = ["hub.config.jsonc", "hub.config.json"];

/// Loads the configuration for this process: the `explicit` file (which
/// must exist), else `<dataDir>/hub.config.jsonc`, else
/// `<dataDir>/hub.config.json`, else defaults alone. `dataDir` for the
/// lookup is the override or the default. Reads `HOME` and the current
/// directory, and validates with [`BUILT_FEATURES`].
pub fn load(explicit: Option<&Path>, overrides: &Overrides) -> Result<Loaded, ConfigError> {
    let cwd = std::env::current_dir().map_err(|source| ConfigError::Io {
        path: PathBuf::from("."),
        op: "resolve the current directory",
        source,
    })?;
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    load_in(explicit, overrides, &cwd, &home, BUILT_FEATURES)
}

/// [`load`] with the current directory, home and features given.
pub(super) fn load_in(
    explicit: Option<&Path>,
    overrides: &Overrides,
    cwd: &Path,
    home: &Path,
    features: &[Feature],
) -> Result<Loaded, ConfigError> {
    if let Some(path) = explicit {
        let path = paths::absolute(cwd, path);
        let text = read(&path)?;
        return resolve(Some((&path, &text)), overrides, cwd, home, features);
    }

    // The lookup directory is what dataDir would be without a file.
    let mut lookup = schema::defaults();
    paths::resolve_layer(&mut lookup, cwd, home)?;
    let mut layer = overrides.to_layer()?;
    paths::resolve_layer(&mut layer, cwd, home)?;
    schema::merge(&mut lookup, &layer);
    paths::check_home(&lookup)?;
    let dir = PathBuf::from(lookup["dataDir"].as_str().unwrap_or_default());

    for name in FILE_NAMES {
        let path = dir.join(name);
        match fs::read_to_string(&path) {
            Ok(text) => return resolve(Some((&path, &text)), overrides, cwd, home, features),
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(ConfigError::Io {
                    path,
                    op: "read",
                    source,
                })
            }
        }
    }
    resolve(None, overrides, cwd, home, features)
}

fn read(path: &Path) -> Result<String, ConfigError> {
    fs::read_to_string(path).map_err(|source| ConfigError::Io {
        path: path.to_owned(),
        op: "read",
        source,
    })
}

/// The comment written at the top of a first-run configuration file.
const FIRST_RUN_HEADER: &str = "\
// simplex-hub configuration, written on first start with every key at the
// value it had then. JSONC: // and /* */ comments are allowed. The hub never
// rewrites this file; edit it and restart. Reference: docs/configuration.md
";

/// First run: when the configuration came from defaults, creates the data
/// directory (0700, with parents) and writes the resolved configuration to
/// `<dataDir>/hub.config.jsonc` (0600, create-exclusive). An existing file
/// is never touched. Returns the path written, or `None` when nothing was.
pub fn write_first_run(loaded: &Loaded) -> Result<Option<PathBuf>, ConfigError> {
    if loaded.source != ConfigSource::Defaults {
        return Ok(None);
    }
    let dir = &loaded.config.data_dir;
    fsutil::create_private_dir(dir).map_err(|source| ConfigError::Io {
        path: dir.clone(),
        op: "create directory",
        source,
    })?;
    let path = dir.join(FILE_NAMES[0]);
    let mut text = String::from(FIRST_RUN_HEADER);
    // Serializing a `Value` cannot fail.
    text.push_str(&serde_json::to_string_pretty(&loaded.resolved).unwrap_or_default());
    text.push('\n');
    match fsutil::write_private_new(&path, text.as_bytes()) {
        Ok(true) => Ok(Some(path)),
        Ok(false) => Ok(None),
        Err(source) => Err(ConfigError::Io {
            path,
            op: "write",
            source,
        }),
    }
}
