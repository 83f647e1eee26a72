//! Session descriptions for panel frames: every approval preview in one
//! frame shares the frame's approval allowance (512 KiB, less when the
//! rest of the frame nears the 2 MiB ceiling), small ones kept whole and
//! the largest reduced first.

use serde_json::Value;

use super::render;
use crate::hub::Hub;
use crate::session::Session;
use crate::wire::panel as protocol;

/// Every session, for an aggregate frame (`welcome`, `sessions`).
pub fn all(hub: &Hub) -> Vec<Value> {
    // One look at every session: the allowance is shared among them.
    let sessions = hub.sessions.lock_all();
    under_share(&sessions.list())
}

/// One session, for a `session` frame.
pub fn one(hub: &Hub, id: &str) -> Option<Value> {
    let sessions = hub.sessions.lock_all();
    let s = sessions.get(id)?;
    under_share(&[s]).pop()
}

/// One session already locked, for a `subscribed` frame (every page of a
/// replay carries it).
pub fn locked(s: &Session) -> Value {
    under_share(&[s]).pop().unwrap_or(Value::Null)
}

/// Describes `list` with every approval preview bounded so that all of
/// them together fit the frame's approval allowance.
fn under_share(list: &[&Session]) -> Vec<Value> {
    let sizes: Vec<Vec<usize>> = list.iter().map(|s| s.preview_sizes()).collect();
    let flat: Vec<usize> = sizes.iter().flatten().copied().collect();
    // Everything but the previews: the descriptions with minimal previews.
    let other: usize = list
        .iter()
        .map(|s| render::session(&s.view(&mut |_| 0)).to_string().len())
        .sum();
    let caps = protocol::allocate_previews(&flat, protocol::approvals_allowance(other));
    let mut next = 0;
    list.iter()
        .zip(&sizes)
        .map(|(s, sz)| {
            let base = next;
            next += sz.len();
            render::session(&s.view(&mut |i| caps.get(base + i).copied().unwrap_or(0)))
        })
        .collect()
}
