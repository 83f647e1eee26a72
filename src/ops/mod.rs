//! The command layer: one function per command a client can give the hub,
//! used by every front-end. A front-end (the JSON API, the panel socket,
//! and the Shard transports after them) parses its own wire, calls one of
//! these functions, and renders the typed result or [`OpError`] in its own
//! shape; it decides no refusal and spells no error code itself.
//!
//! - [`agents`]: a new agent in one command (session, mode, worker
//!   started), as a Shard client asks for one.
//! - [`sessions`]: list, describe, create, delete; events, transcript
//!   snapshots, worker logs, the worker's state snapshot.
//! - [`worker`]: start, stop, restart, force-kill; input, history,
//!   signals; complete-answer pages.
//! - [`confirm`]: an operator's decision on an open confirmation.
//! - [`headless`]: the operator's policy and recovery of headless children.
//! - [`daemon`]: a client's request for the hub's ordinary shutdown.
//! - [`configurations`]: the configuration library (list, templates, read,
//!   save, delete, rename, validate, endpoint preview) and replacing a
//!   stopped session's snapshot.
//! - [`skills`]: the predefined skill library (list, template, one skill).
//! - [`health`]: the hub's own figures (memory, threads, descriptors,
//!   connections' pending bytes, workers' event rates and retained bytes).
//!
//! Which commands a headless session takes is decided here too: each
//! command that is not for one refuses it with `headless_restricted`
//! (seed 002: description, confirmations, policy and recovery only).
//!
//! Commands that block (a worker start, a stop's ladder, a new agent's
//! start) offer an `_off_reader` form that a socket reader calls: the one
//! rule for running them on a thread of their own is [`off_reader`].
//!
//! Commands announce what they changed through `Publisher::notify` (the
//! publisher), so every front-end's subscribers hear of a change whichever
//! front-end asked for it.

pub mod agents;
pub mod configurations;
pub mod confirm;
pub mod daemon;
pub mod error;
pub mod headless;
pub mod health;
mod off_reader;
pub mod sessions;
pub mod skills;
pub mod worker;

pub use error::{ErrorKind, NotSent, OpError};

use crate::hub::Hub;

/// The session exists and may be driven by an operator: `unknown_session`
/// when it does not exist, `headless_restricted` (naming `what`) when it is
/// a headless child, which only its parent worker drives.
pub fn operable(hub: &Hub, id: &str, what: &str) -> Result<(), OpError> {
    match hub.session_kind(id) {
        None => Err(OpError::unknown_session(id)),
        Some(true) => Err(OpError::headless_restricted(what, id)),
        Some(false) => Ok(()),
    }
}

/// The session exists: `unknown_session` otherwise.
pub fn exists(hub: &Hub, id: &str) -> Result<(), OpError> {
    match hub.session_kind(id) {
        None => Err(OpError::unknown_session(id)),
        Some(_) => Ok(()),
    }
}
