//! The stable wire codes of panel protocol v1 and the JSON API (the
//! front door's included), in one place. Front-ends spell a code only
//! through these constants. (The worker protocol's tool-route codes are
//! that protocol's own registry, `wire::worker::tool_frames::code`.)
pub const BAD_REQUEST: &str = "bad_request";
pub const BAD_JSON: &str = "bad_json";
pub const BAD_MESSAGE: &str = "bad_message";
pub const UNSUPPORTED_VERSION: &str = "unsupported_version";
pub const UNAUTHORIZED: &str = "unauthorized";
pub const NOT_FOUND: &str = "not_found";
pub const METHOD_NOT_ALLOWED: &str = "method_not_allowed";
pub const LENGTH_REQUIRED: &str = "length_required";
pub const FORBIDDEN_ORIGIN: &str = "forbidden_origin";
pub const FORBIDDEN_HOST: &str = "forbidden_host";
// The Shard endpoints' front door (`shard::gate`).
pub const SHARD_OFF: &str = "shard_off";
pub const ORIGIN_NOT_ALLOWED: &str = "origin_not_allowed";
pub const ORIGIN_REQUIRED: &str = "origin_required";
pub const FORWARDED_HOST_MISMATCH: &str = "forwarded_host_mismatch";
pub const INVALID_TICKET: &str = "invalid_ticket";
pub const TOO_MANY_TICKETS: &str = "too_many_tickets";
pub const UNKNOWN_SESSION: &str = "unknown_session";
pub const INVALID_SESSION: &str = "invalid_session";
pub const SESSION_EXISTS: &str = "session_exists";
pub const SESSION_BUSY: &str = "session_busy";
pub const HEADLESS_RESTRICTED: &str = "headless_restricted";
pub const INVALID_POLICY: &str = "invalid_policy";
pub const INVALID_ARGUMENTS: &str = "invalid_arguments";
pub const STALE_LIFECYCLE: &str = "stale_lifecycle";
pub const RECOVERY_CONFLICT: &str = "recovery_conflict";
pub const CLEANUP_FAILED: &str = "cleanup_failed";
pub const INPUT_NOT_SENT: &str = "input_not_sent";
pub const SIGNAL_NOT_SENT: &str = "signal_not_sent";
pub const UNKNOWN_CONFIRMATION: &str = "unknown_confirmation";
pub const CONFIRMATION_REJECTED: &str = "confirmation_rejected";
pub const UNKNOWN_GRANT: &str = "unknown_grant";
pub const TOO_MANY_GRANTS: &str = "too_many_grants";
pub const WORKER_ACTION_FAILED: &str = "worker_action_failed";
pub const BINARY_NOT_SUPPORTED: &str = "binary_not_supported";
pub const DISPLAY_SNAPSHOT_TOO_LARGE: &str = "display_snapshot_too_large";
pub const TOO_MANY_QUERIES: &str = "too_many_queries";
pub const ANSWER_UNAVAILABLE: &str = "answer_unavailable";
pub const STORAGE_ERROR: &str = "storage_error";
// The configuration library.
pub const INVALID_CONFIGURATION: &str = "invalid_configuration";
pub const CONFIGURATION_NOT_FOUND: &str = "configuration_not_found";
pub const CONFIGURATION_CONFLICT: &str = "configuration_conflict";
pub const CONFIGURATION_TOO_LARGE: &str = "configuration_too_large";
// The skill library.
pub const INVALID_SKILL: &str = "invalid_skill";
pub const SKILL_NOT_FOUND: &str = "skill_not_found";
pub const TOO_MANY_SKILLS: &str = "too_many_skills";
pub const INTERNAL_ERROR: &str = "internal_error";
// The hub health view: a part of the report that could not be read.
pub const PROC_UNAVAILABLE: &str = "proc_unavailable";
