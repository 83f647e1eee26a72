//! The Shard wire protocol (seed 004), its pure parts: messages and the
//! error-code registry, the command catalog, event translation, direct
//! binding, the access parsers (Host, Origin, forwarded headers), tickets
//! and the JSONL framing of the unix socket and stdio bridge.

pub mod access;
pub mod catalog;
pub mod direct;
pub mod jsonl;
pub mod message;
pub mod ticket;
pub mod translate;
