//! The child's bounded conversation projection (pure): committed user text
//! and visible assistant text with their turn/step association, kept from
//! live worker events, reconciled from paged worker `history`, bounded by
//! `subagents.conversationBytes`, rendered as `subagent/receive` pages and
//! stored as `conversation.json` (seed 003, "Persistence and lifetime",
//! "Remote routes"). Reasoning, tool calls/results and extras never enter
//! it. No I/O, clock or locks: timestamps and identities come from the
//! caller.
//!
//! Bounds and choices:
//! - The stored size is the exact compact JSON size of [`Conversation::to_json`];
//!   it never exceeds the cap. Over it, the oldest turns go first, then the
//!   oldest steps of the newest turn, then texts are clipped (user input,
//!   then the compact summary, then the answer).
//! - One visible text is at most a quarter of the cap when stored; longer
//!   texts keep a UTF-8-safe prefix and are marked truncated.
//! - A turn keeps its final [`MAX_STEPS_PER_TURN`] steps; `omitted_steps`
//!   counts the older ones (an omission marker, not truncation).
//! - A compact result is an entry of the turn array with `summary` set and
//!   no index; it leads the turns committed after it.
//! - Turn and step indices are the worker's, when known: from answer
//!   sources, from history pages, or (for a new live turn) the previous
//!   index plus one while the projection is not stale. Never guessed from a
//!   stale projection.
//!
//! Layout: the bounds are the constants below; `model` holds the
//! projection, its live events and cap enforcement, `stored` its
//! `conversation.json` form, `pages` the `subagent/receive` pages and text
//! clipping, `refresh` the paged history reconciliation.

mod clip;
mod model;
mod pages;
mod refresh;
mod stored;
#[cfg(test)]
mod test_support;

pub use model::{Conversation, Step, Text, Turn};
pub use refresh::{HistoryQuery, Next, PublishError, Refresh, RefreshError, RefreshSnapshot};
pub use stored::ConversationError;

/// Longest `worker_id` or `refreshed_at` a stored projection may carry.
pub const MAX_HEADER_TEXT: usize = 256;

/// Smallest accepted `subagents.conversationBytes`.
pub const MIN_CONVERSATION_BYTES: usize = 4096;
/// Steps kept per turn (the final ones).
pub const MAX_STEPS_PER_TURN: usize = 32;
/// History page requests per refresh attempt.
pub const MAX_REFRESH_PAGES: usize = 64;
/// Turns asked for by one history query (the worker's maximum).
pub const HISTORY_PAGE_TURNS: u64 = 10;
/// The receive result's shared body budget.
pub const PAGE_BODY_BUDGET: usize = 96 * 1024;
/// Non-body bytes (indices, sources, labels) one receive page may spend on
/// its turns; a turn that does not fit is omitted whole.
pub const PAGE_SKELETON_BYTES: usize = 64 * 1024;
/// An answer source larger than this (compact JSON) is not kept.
pub const MAX_SOURCE_BYTES: usize = 1024;
/// Tag of `conversation.json`.
pub const FORMAT: &str = "simplex-hub/subagent-conversation/1";
