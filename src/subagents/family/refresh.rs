//! History refresh runs: claiming a refresh of a child's conversation
//! projection when it is idle and advertises `session-history`, reading
//! its history pages on a short-lived thread, and publishing the validated
//! tail (then scheduling a `conversation.json` write).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::persist::schedule_conversation_write;
use super::spawn_thread;
use crate::session::headless::conversation::{Next, Refresh, RefreshError};
use crate::subagents::Service;
use crate::util::time;
use crate::worker::query::QueryError;

/// History refresh attempts per connection or run settlement.
pub const REFRESH_ATTEMPTS: u32 = 3;

/// Deadline of one history page request.
const REFRESH_QUERY_DEADLINE: Duration = Duration::from_secs(3);

/// Starts a history refresh of the child's projection when one is allowed
/// (idle, `session-history` advertised, attempts left, none running).
pub fn start_refresh(sv: &Arc<Service>, id: &str) {
    let claimed = sv
        .sessions
        .with(id, |s| {
            let history = s.has_capability("session-history");
            let idle = s.active_run().is_none() && s.connected();
            s.headless_mut()?
                .claim_refresh(history, idle, REFRESH_ATTEMPTS)
        })
        .flatten();
    let Some(refresh) = claimed else { return };
    let hub2 = sv.clone();
    let id2 = id.to_string();
    if spawn_thread("subagent-refresh", move || {
        run_refresh(&hub2, &id2, refresh)
    })
    .is_err()
    {
        sv.sessions.with(id, |s| {
            if let Some(c) = s.headless_mut() {
                c.refresh_abandoned();
            }
        });
    }
}

/// Reads history pages (newest turns first) and publishes the validated
/// tail, unless a live change or a new worker came in meanwhile.
fn run_refresh(sv: &Arc<Service>, id: &str, mut refresh: Refresh) {
    let mut query = refresh.query();
    let outcome = loop {
        let idle = sv
            .sessions
            .with(id, |s| s.active_run().is_none() && s.connected())
            .unwrap_or(false);
        if !idle {
            break Err(RefreshFailed::NotIdle);
        }
        let page =
            match sv
                .queries
                .ask(&sv.sessions, id, &query.to_data(""), REFRESH_QUERY_DEADLINE)
            {
                Ok(page) => page,
                Err(err) => break Err(RefreshFailed::Query(err)),
            };
        match refresh.accept_page(&page) {
            Ok(Next::Query(next)) => query = next,
            Ok(Next::Done(snapshot)) => break Ok(snapshot),
            Err(err) => break Err(RefreshFailed::Page(err)),
        }
    };
    let now = time::now_rfc3339();
    let published = sv
        .sessions
        .with(id, |s| {
            let finished = s.headless_mut()?.finish_refresh(outcome, &now);
            Some(finished.unwrap_or_else(|err| {
                log::debug!("subagent {id}: {err}");
                false
            }))
        })
        .flatten();
    if published == Some(true) {
        schedule_conversation_write(sv, id);
    }
}

/// Why a history refresh read no snapshot.
#[derive(Debug)]
enum RefreshFailed {
    /// The child started a run or disconnected.
    NotIdle,
    /// A history page could not be read from the worker.
    Query(QueryError),
    /// A page broke the refresh's rules.
    Page(RefreshError),
}

impl fmt::Display for RefreshFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefreshFailed::NotIdle => f.write_str("the child is busy or disconnected"),
            RefreshFailed::Query(err) => write!(f, "{err}"),
            RefreshFailed::Page(err) => write!(f, "{err}"),
        }
    }
}

impl std::error::Error for RefreshFailed {}
