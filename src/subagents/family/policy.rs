//! The operator's safety policy of a headless child (`deny`, `approve`,
//! `ask`): set at once for new requests, persisted with its metadata.

use serde_json::{json, Value};

use super::persist::persist_meta;
use crate::session::headless as child;
use crate::session::Note;
use crate::subagents::Refusal;
use crate::subagents::Service;

/// Sets a child's operator policy (new requests only); persisted at once.
/// `Err` with `invalid_policy` when `id` is not a headless child.
pub fn set_policy(sv: &Service, id: &str, policy: child::Policy) -> Result<Value, Refusal> {
    let meta = sv
        .sessions
        .with(id, |s| {
            let c = s.headless_mut()?;
            c.set_policy(policy);
            Some(c.meta_json())
        })
        .ok_or_else(|| Refusal::NotFound("no such session".into()))?
        .ok_or_else(|| {
            Refusal::InvalidPolicy("the safety policy applies to headless sessions only".into())
        })?;
    persist_meta(sv, id, &meta);
    sv.publisher.notify(Note::SessionChanged {
        session: id.to_string(),
    });
    Ok(json!({"session_id": id, "policy": policy.as_str()}))
}
