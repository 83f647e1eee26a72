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
//! callers name `protocol::X` whichever file `X` lives in.

mod budget;
mod client;
mod frames;

pub use budget::{
    allocate_previews, approvals_allowance, plan_pages, wire_cost, APPROVALS_SHARE, FRAME_CEILING,
    LOG_LINE_PREVIEW, LOG_TAIL_BYTES, MAX_LOG_LINES, OUTBOUND_BUDGET, PAGE_TARGET,
};
pub use client::{
    parse_client, ClientMsg, Decision, PanelError, WorkerAction, MAX_REQUEST_ID_BYTES, POLICIES,
};
pub use frames::{
    accepted, confirmation, connection, created, error, event_frame, event_frame_head, logs, plan,
    pong, process, request, session, session_removed, sessions, snapshot, subscribed, welcome,
    Paging,
};

/// The protocol version every message carries as `"v"`.
pub const VERSION: u64 = 1;

/// The protocol's error codes (`error.error`). Codes are stable; messages
/// are not.
pub mod code {
    pub const BAD_JSON: &str = "bad_json";
    pub const BAD_MESSAGE: &str = "bad_message";
    pub const UNSUPPORTED_VERSION: &str = "unsupported_version";
    pub const UNKNOWN_SESSION: &str = "unknown_session";
    pub const INVALID_SESSION: &str = "invalid_session";
    pub const SESSION_EXISTS: &str = "session_exists";
    pub const SESSION_BUSY: &str = "session_busy";
    pub const HEADLESS_RESTRICTED: &str = "headless_restricted";
    pub const INVALID_POLICY: &str = "invalid_policy";
    pub const INPUT_NOT_SENT: &str = "input_not_sent";
    pub const SIGNAL_NOT_SENT: &str = "signal_not_sent";
    pub const UNKNOWN_CONFIRMATION: &str = "unknown_confirmation";
    pub const CONFIRMATION_REJECTED: &str = "confirmation_rejected";
    pub const WORKER_ACTION_FAILED: &str = "worker_action_failed";
    pub const BINARY_NOT_SUPPORTED: &str = "binary_not_supported";
    pub const INTERNAL_ERROR: &str = "internal_error";
    pub const DISPLAY_SNAPSHOT_TOO_LARGE: &str = "display_snapshot_too_large";
}
