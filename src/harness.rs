//! The crate's only public surface besides [`crate::main`]: what the fuzz
//! targets (`fuzz/`) and the benchmark harness (`bench/`) link. Every
//! other module is crate-private; a module or item joins this list only
//! when something outside the crate must drive it, and each entry says
//! who does.
//!
//! Whole modules are re-exported where the outside drives a pure parser
//! or state machine through its full interface; single items where it
//! needs one function or type of a module that also does I/O.

/// Fuzz `envelope`: worker event envelopes and raw metadata.
pub use crate::worker::envelope;

/// Fuzz `envelope`: canonical JSON of a raw member object.
pub use crate::worker::canonical;

/// Fuzz `confirm_request`: one-shot confirmation frames.
pub use crate::worker::confirm_frames;

/// Fuzz `display_preview`, `payload`, `conversation`: bounded previews
/// and encoded-size accounting.
pub use crate::worker::display;

/// Fuzz `payload`, `subagent_args`: payload and signal builders.
pub use crate::worker::payload;

/// Fuzz `tool_request`: the plan tool's state.
pub use crate::worker::plan;

/// Fuzz `tool_request`: remote-tool request frames.
pub use crate::worker::tool_frames;

/// Fuzz `subagent_args`: the answer-page query checks (the rest of
/// `worker::query` runs queries against live workers).
pub mod query {
    pub use crate::worker::query::{answer_payload, check_source};
}

/// Fuzz `http_parsing`, `static_path`: request-line, cookie and query
/// parsing, token checks and embedded-asset paths.
pub use crate::http::{assets, auth, url};

/// Fuzz `jsonc_config`: the configuration parser and resolver (loading
/// files and writing the first-run file stay private).
pub mod config {
    pub use crate::config::{resolve, strip_jsonc, ConfigError, Overrides, BUILT_FEATURES};
}

/// Fuzz `line_splitter`, `display_preview`; bench `micro`: bounded line
/// splitting and the worker log ring.
pub use crate::util::{line_splitter, log_ring};

/// Fuzz `jsonl_splitter`; bench `micro`: the Shard transports' JSONL
/// line framing.
pub use crate::shard::jsonl;

/// Fuzz `shard_message`: the Shard message parser (the envelope, the
/// command catalog) and the direct connection's rules.
pub mod shard {
    pub use crate::shard::{catalog, direct, wire};
}

/// Fuzz `yaml_edit`: the worker configuration's YAML editor and the YAML
/// reader it checks every edit with (the supervisor's refresh uses both).
pub use crate::util::yaml_edit;

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

/// Fuzz `panel_message`: session id rules.
pub mod session {
    pub use crate::session::is_valid_id;
}

/// Fuzz `subagent_args`: the `subagent/*` argument grammar.
pub use crate::subagents::args;

/// Fuzz `docker_launch`: recognising a Docker launch, reading `docker
/// inspect`'s output and a kept management context.
pub use crate::supervisor::docker;

/// Fuzz `panel_message`: panel message parsing, frame budgets and codes.
pub use crate::panel::protocol;

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
