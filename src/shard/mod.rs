//! The Shard wire protocol front-end (seed 004): the hub as a Shard
//! daemon. `access` and `ticket` are the pure rules of who may reach the
//! endpoints; `gate` applies them on the main listener. `jsonl` is the
//! line framing of the unix-socket and stdio transports (pure).

pub mod access;
pub mod gate;
pub mod jsonl;
pub mod ticket;
