//! The crate's public surface besides [`crate::main`] and the wire layer
//! ([`crate::wire`], which every fuzz target links): what the benchmark
//! harness (`bench/`) drives, and the fuzz targets whose subject is not a
//! wire format (each listed with its reason in `docs/ARCHITECTURE.md`,
//! checked by `tests/architecture.rs`). Every
//! other module is crate-private; a module or item joins this list only
//! when something outside the crate must drive it, and each entry says
//! who does.
//!
//! Whole modules are re-exported where the outside drives a pure parser
//! or state machine through its full interface; single items where it
//! needs one function or type of a module that also does I/O.

/// Fuzz `jsonc_config`: the configuration parser and resolver (loading
/// files and writing the first-run file stay private).
pub mod config {
    pub use crate::config::{resolve, strip_jsonc, ConfigError, Overrides, BUILT_FEATURES};
}

/// Fuzz `display_preview`: the worker log ring.
pub use crate::util::log_ring;

/// Fuzz `skill_document`: the skill file parser and the reference
/// expansion (reading the files stays private).
pub mod skills {
    pub use crate::skills::{
        expand, is_valid_id, parse, Served, Skill, SkillError, INPUT_MARKER, MAX_DEPTH,
        MAX_DESCRIPTION_BYTES, MAX_EXPANDED_BYTES, MAX_FILE_BYTES, MAX_KEYWORDS, MAX_KEYWORD_BYTES,
        MAX_NAME_BYTES, MAX_REFERENCES, MAX_TITLE_BYTES, TEMPLATE,
    };
}

/// Fuzz `transcript_ops`: the bounded event transcript.
pub mod transcript {
    pub use crate::transcript::*;
}

/// Fuzz `conversation`: a headless child's conversation projection.
pub use crate::session::headless::conversation;

/// Fuzz `docker_launch`: recognising a Docker launch, reading `docker
/// inspect`'s output and a kept management context.
pub use crate::supervisor::docker;

/// Bench `sys`: the panel writer queue's entry type.
pub mod panel_conn {
    pub use crate::wsconn::outbound::Outgoing;
}

/// Bench `micro`: the SQLite store (records and fsync'd commits); fuzz
/// `node_files`: the Node hub's files as the import parses them
/// (`store::node`).
pub mod store {
    pub use crate::store::*;
}
