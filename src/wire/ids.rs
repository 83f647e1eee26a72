//! Identifiers every protocol carries: the session id grammar the panel
//! protocol, the Shard agent ids and the worker envelopes share.

/// Longest session id, in bytes (ids are ASCII).
pub const MAX_SESSION_ID: usize = 128;

/// What a valid session id is, for error messages.
pub const ID_GRAMMAR: &str = "session id must be 1-128 characters of [A-Za-z0-9_-]";

/// Whether `id` is 1-128 characters of `[A-Za-z0-9_-]`.
pub fn is_valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_SESSION_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_short_ascii_words() {
        assert!(is_valid_id("demo_1-A"));
        assert!(is_valid_id(&"a".repeat(MAX_SESSION_ID)));
        assert!(!is_valid_id(&"a".repeat(MAX_SESSION_ID + 1)));
        for bad in ["", "a/b", "a b", "é", "a.b"] {
            assert!(!is_valid_id(bad), "{bad:?}");
        }
    }
}
