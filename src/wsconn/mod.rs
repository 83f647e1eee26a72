//! The connection machinery the front-ends share (the panel's
//! `/panel/ws`, the Shard `/shard/ws` and the Shard unix socket, whose
//! frames are JSONL lines): one connection's budgeted
//! outbound queue and its writer thread ([`outbound`]), and the one thread
//! per front-end that waits on every idle socket and hands a socket with
//! input to a short-lived reader thread ([`poller`]). A front-end adds its
//! own per-connection state around an [`outbound::Outbound`] and
//! implements [`poller::Service`]. Every accepted socket of any kind is
//! registered in [`sockets::Sockets`], so shutdown closes them all.

pub mod outbound;
pub mod poller;
pub mod sockets;
