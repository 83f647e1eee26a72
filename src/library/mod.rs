//! The configuration library: reusable launch files (JSONC: how the hub
//! starts a worker) and worker files (YAML: the worker's own startup
//! document) under `<dataDir>/configs/{launch,worker}/`, and the snapshot
//! of one of each that a session launches from
//! (`sessions/<id>/config/{launch.jsonc,config.yaml,source.json}`).
//!
//! This file holds the pure rules every part shares: the two kinds, the
//! names a file may have, the size bound, the revision (a content hash),
//! the refusals and the seeded templates. `launch.rs` and `worker.rs`
//! validate the two kinds of document (pure); `store.rs` does the file
//! I/O. The reference is `docs/configuration.md` ("Configuration
//! library").

pub mod launch;
pub mod store;
pub mod template;
pub mod worker;

use std::fmt;

use crate::wire::sha256::Sha256;

/// Largest library file, request text or snapshot source, in bytes.
pub const MAX_FILE_BYTES: usize = 1024 * 1024;

/// Longest file id.
pub const MAX_ID_CHARS: usize = 128;

/// The two kinds of library file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// How the hub starts the worker process (`configs/launch/<id>.jsonc`).
    Launch,
    /// The worker's startup document (`configs/worker/<id>.yaml`).
    Worker,
}

impl Kind {
    /// `launch` or `worker`, as routes and file records spell it.
    pub fn parse(text: &str) -> Result<Kind, LibraryError> {
        match text {
            "launch" => Ok(Kind::Launch),
            "worker" => Ok(Kind::Worker),
            _ => Err(LibraryError::invalid(
                "the configuration kind must be \"launch\" or \"worker\"",
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Launch => "launch",
            Kind::Worker => "worker",
        }
    }

    /// The file name suffix the id gets on disk.
    pub fn suffix(self) -> &'static str {
        match self {
            Kind::Launch => ".jsonc",
            Kind::Worker => ".yaml",
        }
    }

    pub const ALL: [Kind; 2] = [Kind::Launch, Kind::Worker];
}

/// Whether `id` may name a library file: 1 to 128 ASCII letters, digits,
/// `_` or `-`. So an id is never a path, never hidden, and carries no
/// suffix of its own.
pub fn is_valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_CHARS
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `Ok` for a valid id, else the refusal every route gives.
pub fn check_id(id: &str) -> Result<(), LibraryError> {
    if is_valid_id(id) {
        Ok(())
    } else {
        Err(LibraryError::invalid(
            "a configuration id is 1-128 characters of [A-Za-z0-9_-]",
        ))
    }
}

/// The revision of a file's text: the lower-case hex SHA-256 of its bytes.
/// Clients treat it as opaque and send it back when they save or delete.
pub fn revision(text: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(text.as_bytes());
    hash.finish_hex()
}

/// A session's pair of saved files: `spec.launchConfig` and
/// `spec.workerConfig`, always both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    pub launch: String,
    pub worker: String,
}

impl Selection {
    /// The selection in a spec or request body: `None` when it names
    /// neither; refused when it names only one, or a value that is not an
    /// id.
    pub fn from_object(
        map: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Option<Selection>, LibraryError> {
        let launch = map.get("launchConfig").filter(|v| !v.is_null());
        let worker = map.get("workerConfig").filter(|v| !v.is_null());
        match (launch, worker) {
            (None, None) => Ok(None),
            (Some(serde_json::Value::String(l)), Some(serde_json::Value::String(w))) => {
                check_id(l)?;
                check_id(w)?;
                Ok(Some(Selection {
                    launch: l.clone(),
                    worker: w.clone(),
                }))
            }
            _ => Err(LibraryError::invalid(
                "select both a launch configuration (launchConfig) and a worker configuration \
                 (workerConfig), as ids",
            )),
        }
    }
}

/// Why a library operation was refused. Each maps to one stable wire code
/// and HTTP status (`ops::ErrorKind`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LibraryError {
    /// A bad kind, id, request or document (400).
    Invalid(String),
    /// No such file (404).
    NotFound(String),
    /// The revision given is not the file's current one, or a new file's
    /// name is taken (409).
    Conflict(String),
    /// A file or text over [`MAX_FILE_BYTES`] (413).
    TooLarge(String),
    /// The library's files could not be read or written (500).
    Storage(String),
}

impl LibraryError {
    pub fn invalid(message: impl Into<String>) -> LibraryError {
        LibraryError::Invalid(message.into())
    }

    pub fn message(&self) -> &str {
        match self {
            LibraryError::Invalid(m)
            | LibraryError::NotFound(m)
            | LibraryError::Conflict(m)
            | LibraryError::TooLarge(m)
            | LibraryError::Storage(m) => m,
        }
    }
}

impl fmt::Display for LibraryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for LibraryError {}

/// Where a template comes from (`?source=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateSource {
    /// The bundled example of the kind (`local` for launch files).
    Default,
    /// This hub's own startup settings, as a starting point for moving a
    /// hub-wide launcher or worker setup into the library.
    Deployment,
    /// The bundled Docker launch example (launch files only).
    Docker,
}

impl TemplateSource {
    /// `None` (absent) means `default`.
    pub fn parse(text: Option<&str>) -> Result<TemplateSource, LibraryError> {
        match text.unwrap_or("default") {
            "default" => Ok(TemplateSource::Default),
            "deployment" => Ok(TemplateSource::Deployment),
            "docker" => Ok(TemplateSource::Docker),
            _ => Err(LibraryError::invalid(
                "the template source must be \"default\", \"deployment\" or \"docker\"",
            )),
        }
    }
}

/// The bundled launch template that runs `simplex run` on the hub host
/// (seeded as `local`).
pub const LOCAL_LAUNCH: &str = include_str!("templates/local.jsonc");
/// The bundled Docker launch template (seeded as `docker`).
pub const DOCKER_LAUNCH: &str = include_str!("templates/docker.jsonc");
/// The bundled provider-neutral worker template (seeded as `default`).
pub const DEFAULT_WORKER: &str = include_str!("templates/worker.yaml");

/// The files seeded into an empty library at start-up, when absent.
pub const SEEDS: [(Kind, &str, &str); 3] = [
    (Kind::Launch, "local", LOCAL_LAUNCH),
    (Kind::Launch, "docker", DOCKER_LAUNCH),
    (Kind::Worker, "default", DEFAULT_WORKER),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_names_never_paths() {
        for good in ["local", "a", "A-b_9", &"x".repeat(128)] {
            assert!(is_valid_id(good), "{good}");
        }
        let long = "x".repeat(129);
        for bad in [
            "", "..", ".", "../x", "a/b", "a\\b", "a.jsonc", ".hidden", "a b", "é", &long, "a\0",
        ] {
            assert!(!is_valid_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn kinds_and_sources_parse() {
        assert_eq!(Kind::parse("launch"), Ok(Kind::Launch));
        assert_eq!(Kind::parse("worker"), Ok(Kind::Worker));
        assert!(Kind::parse("Launch").is_err());
        assert!(Kind::parse("../launch").is_err());
        assert_eq!(TemplateSource::parse(None), Ok(TemplateSource::Default));
        assert_eq!(
            TemplateSource::parse(Some("docker")),
            Ok(TemplateSource::Docker)
        );
        assert!(TemplateSource::parse(Some("other")).is_err());
    }

    #[test]
    fn the_revision_is_the_content_hash() {
        assert_eq!(
            revision("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_ne!(revision("a"), revision("a "));
    }

    #[test]
    fn every_seed_passes_its_own_validation() {
        for (kind, id, text) in SEEDS {
            let checked = match kind {
                Kind::Launch => launch::parse(text).map(|_| ()),
                Kind::Worker => worker::check(text),
            };
            assert_eq!(checked, Ok(()), "{id}");
        }
    }
}
