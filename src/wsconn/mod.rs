//! The connection machinery the WebSocket front-ends share (the panel's
//! `/panel/ws` and the Shard `/shard/ws`): one connection's budgeted
//! outbound queue and its writer thread ([`outbound`]), and the one thread
//! per front-end that waits on every idle socket and hands a socket with
//! input to a short-lived reader thread ([`poller`]). A front-end adds its
//! own per-connection state around an [`outbound::Outbound`] and
//! implements [`poller::Service`].

pub mod outbound;
pub mod poller;
