//! Seed 004 §6.3's delegation: a headless child with no interactive
//! responder of its own has its permission requests shown to the clients
//! interactively attached to its nearest ancestor that has one, with the
//! child's `agent_id` kept; they may answer them (`ConnState::answers_for`)
//! and see them resolved. Delegation survives the ancestor's reconnect:
//! its attach's `sync` lists the requests delegated to it.

use super::Shard;
use crate::hub::Hub;
use crate::ops;
use crate::session::{PromptState, PromptView, Session, PROMPT_PREVIEW_BYTES};
use crate::wire::shard::catalog::Role;

/// Ancestors looked at, at most (families are at most
/// `subagents.maxDepth` ≤ 16 deep; a cycle cannot loop).
const MAX_DEPTH: usize = 32;

/// Whether a connection could answer `agent`'s requests itself: attached
/// to it as interactive, or bound to it (direct).
pub fn responds(shard: &Shard, agent: &str) -> bool {
    shard.snapshot().iter().any(|c| {
        c.direct() == Some(agent)
            || c.state()
                .attachment(agent)
                .is_some_and(|a| a.role == Role::Interactive)
    })
}

/// The parent of a headless child (`None` for any other session).
fn parent(hub: &Hub, agent: &str) -> Option<String> {
    ops::sessions::read(hub, agent, |s| {
        s.headless().map(|c| c.parent().session_id.clone())
    })
    .ok()
    .flatten()
}

/// `agent` and its ancestors, nearest first.
pub fn lineage(hub: &Hub, agent: &str) -> Vec<String> {
    let mut line = vec![agent.to_string()];
    while line.len() < MAX_DEPTH {
        match parent(hub, line.last().map(String::as_str).unwrap_or_default()) {
            Some(up) if !line.contains(&up) => line.push(up),
            _ => break,
        }
    }
    line
}

/// Where `child`'s requests are delegated: its nearest ancestor with an
/// interactive responder, when it has none of its own.
pub fn target(hub: &Hub, shard: &Shard, child: &str) -> Option<String> {
    let line = lineage(hub, child);
    if responds(shard, child) {
        return None;
    }
    line.into_iter().skip(1).find(|a| responds(shard, a))
}

/// Shows a request of `child` (its rendered `frame`) to every interactive
/// attachment of `ancestor`, once each, recording it as delegated there.
pub fn show(
    shard: &Shard,
    ancestor: &str,
    child: &str,
    request_id: &str,
    frame: &super::conn::Frame,
) {
    for conn in shard.snapshot().iter() {
        let mut state = conn.state();
        if state.interactive(ancestor) && state.delegate(ancestor, child, request_id) {
            drop(state);
            conn.send_frame(frame);
        }
    }
}

/// A session's requests that can be decided now, as their views (the
/// arguments bounded to the preview budget).
pub fn decidable(s: &Session) -> Vec<PromptView> {
    s.prompts()
        .iter()
        .filter(|p| p.state == PromptState::AwaitingDecision)
        .map(|p| s.prompt_view(p, PROMPT_PREVIEW_BYTES))
        .collect()
}

/// The decidable requests of `ancestor`'s descendants that are delegated
/// to it now (for its `sync`), each with its child's id.
pub fn pending_for(hub: &Hub, shard: &Shard, ancestor: &str) -> Vec<(String, PromptView)> {
    let waiting: Vec<(String, Vec<PromptView>)> = ops::sessions::read_all(hub, |s| {
        if !s.is_headless() {
            return None;
        }
        let prompts = decidable(s);
        (!prompts.is_empty()).then(|| (s.id().to_string(), prompts))
    })
    .into_iter()
    .flatten()
    .collect();
    let mut out = Vec::new();
    for (child, prompts) in waiting {
        if target(hub, shard, &child).as_deref() == Some(ancestor) {
            out.extend(prompts.into_iter().map(|p| (child.clone(), p)));
        }
    }
    out
}

/// Whether `agent` or one of its ancestors is a daemon agent (the
/// headless rule then applies to its requests).
pub fn governed(hub: &Hub, shard: &Shard, agent: &str) -> bool {
    lineage(hub, agent)
        .iter()
        .any(|a| shard.agent(a, |t| t.daemon))
}
