//! The worker-facing side of the hub: the Simplex Loop Worker Protocol.
//!
//! `envelope` parses worker event frames, `payload` builds and validates what
//! the hub sends (payloads, signals), `confirm_frames` parses confirmation
//! requests and builds their responses, `display` bounds untrusted JSON for
//! display, `tool_frames` parses remote-tool requests and builds their
//! responses, `plan` validates the plan routes'
//! arguments, `route_args` is the argument refusal the tool routes share.
//! These submodules are pure: no I/O, clock or locks.

pub mod canonical;
pub mod confirm_frames;
pub mod display;
pub mod envelope;
pub mod payload;
pub mod plan;
pub mod route_args;
pub mod tool_frames;

// Socket-owning parts (not pure): one thread per socket.
pub mod confirm;
pub mod events;
pub mod query;
pub mod tools;
