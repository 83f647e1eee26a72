//! Stopping with cascade: a child's descendants,
//! freezing admission, a child's idempotent supervised stop that stops its
//! own children first, and what happens once a worker's process is gone.

use std::collections::VecDeque;
use std::sync::Arc;

use super::cleanup::{cleanup, stop_worker};
use super::persist::persist_meta;
use super::{children_of, set_reason};
use crate::session::Note;
use crate::subagents::Service;
use crate::supervisor::control::StopMode;

/// Every descendant of `root`, nearest first.
fn descendants_of(sv: &Service, root: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut queue = VecDeque::from([root.to_string()]);
    while let Some(next) = queue.pop_front() {
        for child in children_of(sv, &next) {
            if !out.contains(&child) && child != root {
                queue.push_back(child.clone());
                out.push(child);
            }
        }
    }
    out
}

/// Closes admission of every descendant of `parent` at once (its worker
/// is being stopped): no forks, no sends through them.
pub fn freeze_descendants(sv: &Service, parent: &str) {
    freeze(sv, descendants_of(sv, parent));
}

/// Closes admission of every family (hub shutdown).
pub fn freeze_all(sv: &Service) {
    let ids = sv
        .sessions
        .scan(|s| s.is_headless().then(|| s.id().to_string()));
    freeze(sv, ids);
}

fn freeze(sv: &Service, ids: Vec<String>) {
    for id in ids {
        sv.sessions.with(&id, |s| {
            if let Some(c) = s.headless_mut() {
                c.freeze();
            }
        });
    }
}

/// Stops every direct child of `parent` (each cascades further). One
/// child's failure never skips its siblings.
pub fn stop_children(sv: &Arc<Service>, parent: &str, reason: &str) {
    freeze_descendants(sv, parent);
    for id in children_of(sv, parent) {
        set_reason(sv, &id, reason);
        begin_stop(sv, &id, None);
    }
}

/// Begins a child's supervised stop (idempotent): persists `stopping`,
/// stops its own children, then its worker; cleanup follows once the
/// process is confirmed gone. `on_stopping` runs after the stopping
/// state is durable (the stop receipt is written by the caller first).
pub fn begin_stop(sv: &Arc<Service>, id: &str, on_stopping: Option<Box<dyn FnOnce() + Send>>) {
    let entered = sv
        .sessions
        .with(id, |s| {
            let c = s.headless_mut()?;
            Some(c.begin_stop().then(|| c.meta_json()))
        })
        .flatten();
    match entered {
        None => return,
        Some(None) => {}
        Some(Some(meta)) => {
            persist_meta(sv, id, &meta);
            sv.publisher.notify(Note::SessionChanged {
                session: id.to_string(),
            });
            log::info!("subagent {id}: stopping");
        }
    }
    if let Some(f) = on_stopping {
        f();
    }
    stop_children(sv, id, "an ancestor stopped");
    stop_worker(sv, id, StopMode::Graceful);
}

/// Called once a supervised worker's process is confirmed gone and its
/// output pipes are closed: a parent's children are stopped; a child is
/// stopped (if it was not already) and cleaned up.
pub fn process_gone(sv: &Arc<Service>, id: &str) {
    stop_children(sv, id, "the parent worker exited");
    let closing = sv
        .sessions
        .with(id, |s| s.headless().map(|c| c.lifecycle().is_closing()))
        .flatten();
    match closing {
        None => {}
        Some(true) => cleanup(sv, id),
        Some(false) => {
            set_reason(sv, id, "the child worker exited");
            begin_stop(sv, id, None);
            cleanup(sv, id);
        }
    }
}
