//! The wire layer: every pure parser, serializer and protocol state
//! machine of the hub's three protocols and their framings. Nothing here
//! does I/O, reads a clock, takes a lock or starts a thread; nothing here
//! imports the rest of the crate (tests may use `util::testkit`). This is
//! the part a security reviewer audits and every fuzz target links:
//! `docs/wire.md` says what each module parses, its limits, and which fuzz
//! target covers it.
//!
//! - [`worker`]: the worker protocol (envelopes, canonical JSON, payloads,
//!   display previews, confirmation and tool frames, plan and route
//!   arguments).
//! - [`panel`]: panel protocol v1 (client messages, server frames, replay
//!   budgets).
//! - [`shard`]: the Shard wire protocol (messages and codes, the command
//!   catalog, event translation, direct binding, access parsers, tickets,
//!   JSONL framing).
//! - [`http`]: the front door's pure parts (URL and query parsing, the
//!   token and Origin/Host checks).
//! - [`websocket`]: RFC 6455 frame headers, encoding, opcodes and close
//!   codes.
//! - [`code`]: the stable wire codes of panel protocol v1 and the JSON API.
//! - [`ids`]: the session id grammar.
//! - [`line_splitter`], [`jsonc`], [`jsonw`], [`yaml_edit`], [`sha256`],
//!   [`sorted_json`]: line framing, JSON with comments, JSON tokens without
//!   `fmt`, the worker configuration's YAML reader and editor, SHA-256,
//!   JSON with sorted keys.

#![forbid(unsafe_code)]

pub mod code;
#[cfg(test)]
mod fuzz_regressions;
pub mod http;
pub mod ids;
pub mod jsonc;
pub mod jsonw;
pub mod line_splitter;
pub mod panel;
pub mod sha256;
pub mod shard;
pub mod sorted_json;
pub mod websocket;
pub mod worker;
pub mod yaml_edit;
