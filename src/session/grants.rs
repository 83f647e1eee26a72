//! Permission grants, pure: the exact calls a session's requests are
//! allowed for without asking (Shard's `allow_always`, seed 004 §9.5:
//! "repeat this exact request", never a scope a client authors or the
//! hub infers). A grant names the tool and the call's arguments as JSON
//! with sorted keys; a request matches when both are equal. A grant is
//! one session's: it never applies to another. The store keeps them
//! (`grants` table); they change only through these transitions.

use serde_json::Value;

use super::Session;
use crate::wire::sorted_json;

/// Grants one session holds at most.
pub const MAX_GRANTS: usize = 256;

/// One grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub id: String,
    /// The call's `name`.
    pub tool: String,
    /// The call's `arguments` as JSON with sorted keys.
    pub arguments: String,
    pub created_at: String,
}

/// What a grant of `call` would hold: its tool and its arguments with
/// sorted keys.
pub fn key_of(call: &Value) -> (String, String) {
    let tool = call.get("name").and_then(Value::as_str).unwrap_or("");
    let arguments = call.get("arguments").unwrap_or(&Value::Null);
    (tool.to_string(), sorted_json::to_string(arguments))
}

impl Grant {
    /// The arguments it allows, as JSON (`null` if the stored text is not
    /// JSON).
    pub fn arguments_json(&self) -> Value {
        serde_json::from_str(&self.arguments).unwrap_or(Value::Null)
    }

    /// Whether `call` is exactly the call this grant allows.
    pub fn matches(&self, call: &Value) -> bool {
        let (tool, arguments) = key_of(call);
        tool == self.tool && arguments == self.arguments
    }
}

/// The session already holds [`MAX_GRANTS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantsFull;

impl Session {
    /// The session's grants, oldest first.
    pub fn grants(&self) -> &[Grant] {
        &self.grants
    }

    /// The grant that allows `call`, if one does.
    pub fn grant_for(&self, call: &Value) -> Option<&Grant> {
        self.grants.iter().find(|g| g.matches(call))
    }

    /// Holds a new grant (one equal to a held one is not added twice).
    pub fn add_grant(&mut self, grant: Grant) -> Result<(), GrantsFull> {
        if self
            .grants
            .iter()
            .any(|g| g.tool == grant.tool && g.arguments == grant.arguments)
        {
            return Ok(());
        }
        if self.grants.len() >= MAX_GRANTS {
            return Err(GrantsFull);
        }
        self.grants.push(grant);
        Ok(())
    }

    /// Revokes grant `id`; false when the session holds none by that id.
    pub fn revoke_grant(&mut self, id: &str) -> bool {
        let before = self.grants.len();
        self.grants.retain(|g| g.id != id);
        self.grants.len() != before
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::session::testkit;

    fn grant(id: &str, call: &Value) -> Grant {
        let (tool, arguments) = key_of(call);
        Grant {
            id: id.into(),
            tool,
            arguments,
            created_at: "t".into(),
        }
    }

    #[test]
    fn a_grant_allows_exactly_its_call() {
        let call = json!({"id": "c1", "name": "run_command",
            "arguments": {"command": "make", "cwd": "/w"}});
        let g = grant("g1", &call);
        // Another id, the members in another order: the same call.
        assert!(g.matches(&json!({"id": "c9", "name": "run_command",
            "arguments": {"cwd": "/w", "command": "make"}})));
        assert!(!g.matches(&json!({"name": "run_command",
            "arguments": {"command": "make test", "cwd": "/w"}})));
        assert!(!g.matches(&json!({"name": "write_file",
            "arguments": {"command": "make", "cwd": "/w"}})));
    }

    #[test]
    fn grants_are_added_once_bounded_and_revoked() {
        let mut s = testkit::session("a");
        let call = |n: usize| json!({"name": "t", "arguments": {"n": n}});
        assert_eq!(s.add_grant(grant("g0", &call(0))), Ok(()));
        assert_eq!(s.add_grant(grant("g0b", &call(0))), Ok(()));
        assert_eq!(s.grants().len(), 1, "an equal grant is not added twice");
        assert_eq!(s.grant_for(&call(0)).map(|g| g.id.as_str()), Some("g0"));
        for n in 1..MAX_GRANTS {
            assert_eq!(s.add_grant(grant(&format!("g{n}"), &call(n))), Ok(()));
        }
        assert_eq!(
            s.add_grant(grant("over", &call(MAX_GRANTS))),
            Err(GrantsFull)
        );
        assert!(s.revoke_grant("g0"));
        assert!(!s.revoke_grant("g0"));
        assert!(s.grant_for(&call(0)).is_none());
    }
}
