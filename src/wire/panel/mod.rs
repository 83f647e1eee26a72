//! Panel protocol v1 messages, pure: parsing a client text frame into a
//! [`ClientMsg`], building every hub -> client message (each carries
//! `"v": 1`), and the byte budgets the hub enforces on panel connections
//! (frame cost, replay page planning, the shared approval-preview allowance).
//!
//! No I/O, no locks, no clock. Every function is total: any input yields a
//! value or an error, never a panic. Frames that carry already serialized
//! transcript JSON (`subscribed`, `snapshot`, `event`) are assembled as text
//! and splice that JSON verbatim, so an event is serialized once however many
//! panels receive it.
//!
//! Layout: `client` parses client frames ([`ClientMsg`], [`parse_client`]),
//! `frames` builds the hub -> client messages, `budget` holds the byte
//! budgets and the planning over them; everything is re-exported here, so
//! callers name `wire::panel::X` whichever file `X` lives in.

mod budget;
mod client;
mod frames;

pub use budget::{
    allocate_previews, approvals_allowance, plan_pages, wire_cost, APPROVALS_SHARE, FRAME_CEILING,
    LOG_LINE_PREVIEW, LOG_TAIL_BYTES, MAX_LOG_LINES, OUTBOUND_BUDGET, PAGE_TARGET,
};
pub use client::{
    echo, parse_client, ClientMsg, Decision, PanelError, WorkerAction, ECHO_STRING_BYTES,
    MAX_REQUEST_ID_BYTES, POLICIES,
};
pub use frames::{
    accepted, confirmation, connection, created, error, error_with, event_frame, event_frame_head,
    log_tail, logs, outcome, plan, pong, process, request, session, session_removed, sessions,
    snapshot, subscribed, welcome, Paging,
};

/// The protocol version every message carries as `"v"`.
pub const VERSION: u64 = 1;

/// The panel protocol's error codes: the command layer's wire codes.
pub use crate::wire::code;
