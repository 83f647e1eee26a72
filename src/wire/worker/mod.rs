//! The worker protocol (`spec/worker-protocol.md`), its pure parts: the
//! event envelope, canonical JSON, request payloads, display previews,
//! confirmation and remote-tool frames, plan and route arguments, the
//! read-only queries' arguments and the `subagent/*` routes' arguments.

pub mod answer;
pub mod canonical;
pub mod confirm_frames;
pub mod display;
pub mod envelope;
pub mod payload;
pub mod plan;
pub mod route_args;
pub mod subagent_args;
pub mod tool_frames;
