//! The hub's own health, for operators of small hosts (a simplex-hub
//! extension, `GET /api/hub/health`): the process's memory, threads and
//! descriptors; each panel and Shard connection's pending outbound bytes
//! against its budget; each session's worker event rate and retained
//! transcript against its ring's bounds.
//!
//! Everything is read when asked and nothing in between: `/proc/self` once
//! per call, two atomic loads per connection (`wsconn::outbound::Figures`),
//! and one pass over the registry under its lock copying counters the
//! sessions keep anyway (the event-rate meter is a few instructions per
//! event, `util::rate`). No thread samples anything, so the view costs
//! nothing while nobody looks.
//!
//! The front-ends' connection lists come in through [`Front`], which the
//! panel registry and the Shard front-end implement, so this module
//! imports neither.

use serde::Serialize;

use crate::hub::Hub;
use crate::util::{procself, rate, time};
use crate::wire::code;

/// The most entries one list carries; past it the entries under the most
/// pressure are kept and `omitted` counts the rest (the totals still cover
/// every one).
pub const LIST_LIMIT: usize = 200;

/// One front-end connection's figures, as the front-end reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    pub id: u64,
    pub pending_bytes: usize,
    pub queued_items: usize,
    pub budget_bytes: usize,
    pub detail: Detail,
}

/// What one kind of connection adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detail {
    /// Sessions the panel is subscribed to.
    Panel { subscriptions: usize },
    /// `websocket` or `unix`, and the agent a direct connection is bound to.
    Shard {
        transport: &'static str,
        direct: Option<String>,
    },
}

/// A front-end that can list its connections (a snapshot; taking it holds
/// no lock across anything else).
pub trait Front {
    fn connections(&self) -> Vec<Connection>;
}

/// The whole report (`docs/protocol-panel.md`, "Hub health").
#[derive(Debug, Serialize)]
pub struct Health {
    pub hub: HubFigures,
    /// `None` when `/proc/self` could not be read (see `errors`).
    pub process: Option<ProcessFigures>,
    pub panels: Connections,
    pub shard: Connections,
    pub workers: Workers,
    /// Parts that could not be read, each with a stable code.
    pub errors: Vec<PartError>,
}

#[derive(Debug, Serialize)]
pub struct HubFigures {
    pub version: &'static str,
    pub pid: u32,
    /// Since the hub started (monotonic).
    pub uptime_ms: u64,
    /// When these figures were read (wall clock).
    pub sampled_at: String,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct ProcessFigures {
    pub rss_bytes: Option<u64>,
    pub peak_rss_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    pub threads: Option<u64>,
    pub open_fds: u64,
    pub fd_limit: Option<u64>,
}

/// One front-end's connections.
#[derive(Debug, Serialize, PartialEq)]
pub struct Connections {
    /// Connections open now.
    pub count: usize,
    /// Pending bytes of all of them together.
    pub pending_bytes: u64,
    /// The most pending bytes of any one.
    pub max_pending_bytes: usize,
    /// The listed connections, oldest first.
    pub connections: Vec<ConnectionFigures>,
    /// Connections left out of `connections` ([`LIST_LIMIT`]).
    pub omitted: usize,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct ConnectionFigures {
    pub id: u64,
    pub pending_bytes: usize,
    pub budget_bytes: usize,
    pub queued_items: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscriptions: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transport: Option<&'static str>,
    /// A Shard connection bound direct to this agent (`null` when not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direct: Option<Option<String>>,
}

/// Every session's worker figures.
#[derive(Debug, Serialize, PartialEq)]
pub struct Workers {
    /// Sessions in the registry.
    pub count: usize,
    /// The rate window's length when full ([`rate::WINDOW_SECONDS`]).
    pub window_ms: u64,
    /// Events per second of all sessions together.
    pub events_per_second: f64,
    /// Transcript bytes all sessions retain together.
    pub retained_bytes: u64,
    /// The listed sessions, in creation order.
    pub sessions: Vec<WorkerFigures>,
    /// Sessions left out of `sessions` ([`LIST_LIMIT`]).
    pub omitted: usize,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct WorkerFigures {
    pub session: String,
    pub kind: String,
    /// The process state (`starting`, `running`, …), `null` before any.
    pub process: Option<&'static str>,
    pub pid: Option<u32>,
    /// A worker event connection is open.
    pub connected: bool,
    /// Events received over the session's lifetime in this hub run.
    pub events_total: u64,
    /// Events in the rate window, and the window's length so far.
    pub events_window: u64,
    pub window_ms: u64,
    pub events_per_second: f64,
    pub retained_bytes: usize,
    pub retained_bytes_budget: usize,
    pub retained_events: usize,
    pub retained_events_budget: usize,
    /// Entries the ring has evicted to stay in bounds.
    pub evicted_events: u64,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct PartError {
    /// Which part is missing (`process`).
    pub part: &'static str,
    pub error: &'static str,
    pub message: String,
}

/// Reads the hub's health now.
pub fn collect(hub: &Hub, panels: &dyn Front, shard: &dyn Front) -> Health {
    let mut errors = Vec::new();
    let process = match procself::read() {
        Ok(f) => Some(ProcessFigures {
            rss_bytes: f.status.rss_bytes,
            peak_rss_bytes: f.status.peak_rss_bytes,
            virtual_bytes: f.status.virtual_bytes,
            threads: f.status.threads,
            open_fds: f.open_fds,
            fd_limit: f.fd_limit,
        }),
        Err(err) => {
            errors.push(PartError {
                part: "process",
                error: code::PROC_UNAVAILABLE,
                message: format!("cannot read /proc/self: {err}"),
            });
            None
        }
    };
    let now = time::mono_millis();
    let sessions = super::sessions::read_all(hub, |s| {
        let reading = s.event_rate(now);
        let transcript = s.transcript();
        let proc = s.process();
        WorkerFigures {
            session: s.id().to_string(),
            kind: s.kind().to_string(),
            process: proc.map(|p| p.state.as_str()),
            pid: proc.and_then(|p| p.pid),
            connected: s.connected(),
            events_total: s.stats().events,
            events_window: reading.events,
            window_ms: reading.window_ms,
            events_per_second: round2(reading.per_second()),
            retained_bytes: transcript.bytes(),
            retained_bytes_budget: transcript.max_bytes(),
            retained_events: transcript.len(),
            retained_events_budget: transcript.max_events(),
            evicted_events: transcript.evicted(),
        }
    });
    Health {
        hub: HubFigures {
            version: env!("CARGO_PKG_VERSION"),
            pid: std::process::id(),
            uptime_ms: time::uptime_millis(),
            sampled_at: time::now_rfc3339(),
        },
        process,
        panels: connections(panels.connections()),
        shard: connections(shard.connections()),
        workers: workers(sessions),
        errors,
    }
}

/// Totals over every connection, and the [`LIST_LIMIT`] under the most
/// pressure listed oldest first. Pure.
fn connections(all: Vec<Connection>) -> Connections {
    let count = all.len();
    let pending_bytes = all.iter().map(|c| c.pending_bytes as u64).sum();
    let max_pending_bytes = all.iter().map(|c| c.pending_bytes).max().unwrap_or(0);
    let mut listed = all;
    if listed.len() > LIST_LIMIT {
        listed.sort_by(|a, b| b.pending_bytes.cmp(&a.pending_bytes).then(a.id.cmp(&b.id)));
        listed.truncate(LIST_LIMIT);
    }
    listed.sort_by_key(|c| c.id);
    let connections: Vec<ConnectionFigures> = listed
        .into_iter()
        .map(|c| {
            let (subscriptions, transport, direct) = match c.detail {
                Detail::Panel { subscriptions } => (Some(subscriptions), None, None),
                Detail::Shard { transport, direct } => (None, Some(transport), Some(direct)),
            };
            ConnectionFigures {
                id: c.id,
                pending_bytes: c.pending_bytes,
                budget_bytes: c.budget_bytes,
                queued_items: c.queued_items,
                subscriptions,
                transport,
                direct,
            }
        })
        .collect();
    Connections {
        count,
        pending_bytes,
        max_pending_bytes,
        omitted: count - connections.len(),
        connections,
    }
}

/// Totals over every session, and the [`LIST_LIMIT`] busiest (events in
/// the window, then retained bytes) listed in creation order. Pure.
fn workers(all: Vec<WorkerFigures>) -> Workers {
    let count = all.len();
    let events_per_second = round2(all.iter().map(|w| w.events_per_second).sum());
    let retained_bytes = all.iter().map(|w| w.retained_bytes as u64).sum();
    let mut listed: Vec<(usize, WorkerFigures)> = all.into_iter().enumerate().collect();
    if listed.len() > LIST_LIMIT {
        listed.sort_by(|(ia, a), (ib, b)| {
            b.events_window
                .cmp(&a.events_window)
                .then(b.retained_bytes.cmp(&a.retained_bytes))
                .then(ia.cmp(ib))
        });
        listed.truncate(LIST_LIMIT);
        listed.sort_by_key(|(i, _)| *i);
    }
    let sessions: Vec<WorkerFigures> = listed.into_iter().map(|(_, w)| w).collect();
    Workers {
        count,
        window_ms: rate::WINDOW_SECONDS * 1000,
        events_per_second,
        retained_bytes,
        omitted: count - sessions.len(),
        sessions,
    }
}

/// Two decimals are all a person reads of a rate.
fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn panel(id: u64, pending: usize) -> Connection {
        Connection {
            id,
            pending_bytes: pending,
            queued_items: pending / 100,
            budget_bytes: 4 << 20,
            detail: Detail::Panel { subscriptions: 1 },
        }
    }

    fn worker(i: usize, events_window: u64, retained: usize) -> WorkerFigures {
        WorkerFigures {
            session: format!("s{i}"),
            kind: "ordinary".into(),
            process: None,
            pid: None,
            connected: false,
            events_total: events_window,
            events_window,
            window_ms: 10_000,
            events_per_second: events_window as f64 / 10.0,
            retained_bytes: retained,
            retained_bytes_budget: 1 << 20,
            retained_events: 0,
            retained_events_budget: 1000,
            evicted_events: 0,
        }
    }

    #[test]
    fn a_short_list_is_whole_and_oldest_first() {
        let c = connections(vec![panel(7, 10), panel(3, 0), panel(5, 99)]);
        assert_eq!(c.count, 3);
        assert_eq!(c.pending_bytes, 109);
        assert_eq!(c.max_pending_bytes, 99);
        assert_eq!(c.omitted, 0);
        let ids: Vec<u64> = c.connections.iter().map(|c| c.id).collect();
        assert_eq!(ids, [3, 5, 7]);
        assert_eq!(c.connections[0].subscriptions, Some(1));
        assert_eq!(c.connections[0].transport, None);
    }

    #[test]
    fn a_long_list_keeps_the_most_pending_and_totals_everything() {
        let all: Vec<Connection> = (0..LIST_LIMIT as u64 + 50)
            .map(|id| panel(id, if id % 5 == 0 { 1000 + id as usize } else { 0 }))
            .collect();
        let total: u64 = all.iter().map(|c| c.pending_bytes as u64).sum();
        let c = connections(all);
        assert_eq!(c.count, LIST_LIMIT + 50);
        assert_eq!(c.omitted, 50);
        assert_eq!(c.pending_bytes, total);
        assert_eq!(c.connections.len(), LIST_LIMIT);
        // Every connection with pending bytes is listed.
        let busy = c.connections.iter().filter(|c| c.pending_bytes > 0).count();
        assert_eq!(busy, (LIST_LIMIT + 50).div_ceil(5));
        assert!(c.connections.windows(2).all(|w| w[0].id < w[1].id));
    }

    #[test]
    fn shard_connections_say_their_transport_and_binding() {
        let c = connections(vec![Connection {
            id: 1,
            pending_bytes: 0,
            queued_items: 0,
            budget_bytes: 4 << 20,
            detail: Detail::Shard {
                transport: "unix",
                direct: None,
            },
        }]);
        let json = serde_json::to_value(&c.connections[0]).unwrap();
        assert_eq!(json["transport"], "unix");
        assert!(json["direct"].is_null() && json.get("direct").is_some());
        assert!(json.get("subscriptions").is_none());
    }

    #[test]
    fn a_long_session_list_keeps_the_busiest_in_creation_order() {
        let all: Vec<WorkerFigures> = (0..LIST_LIMIT + 10)
            .map(|i| worker(i, if i >= 10 { 1 } else { 0 }, i))
            .collect();
        let w = workers(all);
        assert_eq!(w.count, LIST_LIMIT + 10);
        assert_eq!(w.omitted, 10);
        assert_eq!(w.sessions[0].session, "s10");
        assert_eq!(
            w.sessions.last().unwrap().session,
            format!("s{}", LIST_LIMIT + 9)
        );
        assert!((w.events_per_second - LIST_LIMIT as f64 / 10.0).abs() < 1e-6);
    }

    #[test]
    fn rates_are_rounded_for_people() {
        assert_eq!(round2(5.263157), 5.26);
        assert_eq!(round2(0.0), 0.0);
    }
}
