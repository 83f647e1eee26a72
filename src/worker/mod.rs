//! The worker-facing side of the hub: the socket threads of the Simplex
//! Loop Worker Protocol (one thread per socket). The protocol's pure parts
//! (envelopes, payloads, frames, display previews) are `wire::worker`.
//!
//! `events`: a worker's event socket; `confirm`: one-shot confirmation
//! sockets; `tools`: remote-tool sockets; `query`: read-only history
//! queries a front-end waits on.

pub mod confirm;
pub mod events;
pub mod query;
pub mod tools;
