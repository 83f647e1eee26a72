//! The worker-facing side of the hub: the Simplex Loop Worker Protocol.
//!
//! `envelope` parses worker event frames, `payload` builds and validates what
//! the hub sends (payloads, signals, confirmation responses), `display`
//! bounds untrusted JSON for display. These submodules are pure: no I/O,
//! clock or locks.

pub mod display;
pub mod envelope;
pub mod payload;

// Socket-owning parts (not pure): one thread per socket.
pub mod confirm;
pub mod events;
