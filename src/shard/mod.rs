//! The Shard wire protocol (seed 004): the hub as a Shard daemon. Every
//! session is an agent; its worker is the agent's runtime. Who may reach
//! the endpoints: `access` and `ticket` are the pure rules, `gate`
//! applies them on the main listener and does the upgrade. `jsonl` is the
//! line framing of the unix-socket and stdio transports (pure). The
//! protocol core is pure and transport-neutral (`wire`: the envelope, correlation
//! and the error registry; `catalog`: the commands; `translate`: worker
//! envelopes as Shard events; `track`: each agent's status; `agent`:
//! `AgentInfo`; `window`: a `sync`'s live window; `attach`: one
//! connection's attachments and waiting commands; `render`: the events
//! the hub writes itself; `direct`: the rules of a connection bound to one
//! agent). Commands run through `ops` (`dispatch`), hub notifications
//! become events (`fanout`, a publisher subscriber). The transports:
//! `service` is the WebSocket one (`GET /shard/ws`) and what every
//! connection shares; `socket` (the listener) and `lines` (a connection's
//! reading side) are the unix socket's, JSONL; `stdio` is the
//! `shard-stdio` command, a direct connection over the unix socket on
//! stdin and stdout. Every connection runs on the shared connection
//! machinery (`wsconn`); `conn` holds its framing.
//!
//! [`Shard`] is the front-end's own state: the connected clients, their
//! poller, and what is kept of each agent.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

pub mod agent;
pub mod attach;
pub mod conn;
pub mod delegate;
pub mod dispatch;
pub mod fanout;
pub mod gate;
pub mod lines;
pub mod reaper;
pub mod refusal;
pub mod render;
pub mod service;
pub mod socket;
pub mod stdio;
pub mod sync;
pub mod track;
pub mod window;

use conn::ShardConn;
use track::Track;

/// The connected Shard clients and the agents' state.
#[derive(Default)]
pub struct Shard {
    /// Replaced whole on connect and disconnect, so the fan-out's snapshot
    /// is one reference count.
    list: Mutex<Arc<[Arc<ShardConn>]>>,
    /// Idle client sockets waiting for input.
    poller: service::Poller,
    /// Each agent's state, by id (a leaf lock: nothing is taken while it
    /// is held).
    agents: Mutex<HashMap<String, Track>>,
    /// When the keepalive last pinged every client (ms since the epoch).
    last_ping: AtomicU64,
    /// The hub is shutting down: a worker stopped now does not end the
    /// direct connections bound to its agent (they end with the hub).
    stopping: AtomicBool,
}

impl Shard {
    /// The front-end's state, knowing the agents that exist now (a later
    /// one is announced as spawned).
    pub fn new(agents: impl IntoIterator<Item = String>) -> Arc<Shard> {
        let shard = Shard::default();
        shard.agents().extend(agents.into_iter().map(|id| {
            let mut track = Track::default();
            track.known = true;
            (id, track)
        }));
        Arc::new(shard)
    }

    pub fn add(&self, conn: Arc<ShardConn>) {
        let mut list = self.list.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = list.to_vec();
        next.push(conn);
        *list = next.into();
    }

    pub fn remove(&self, id: u64) {
        let mut list = self.list.lock().unwrap_or_else(|p| p.into_inner());
        if list.iter().any(|c| c.id == id) {
            let next: Vec<Arc<ShardConn>> = list.iter().filter(|c| c.id != id).cloned().collect();
            *list = next.into();
        }
    }

    /// Detaches `conn` from every agent and takes it off the list (no
    /// event or broadcast reaches it after this).
    pub fn detach(&self, conn: &ShardConn) {
        let agents = conn.state().detach_all();
        for agent in agents {
            self.agent(&agent, |t| t.attached = t.attached.saturating_sub(1));
        }
        self.remove(conn.id);
    }

    /// A snapshot of the connected clients (the lock is released at once).
    pub fn snapshot(&self) -> Arc<[Arc<ShardConn>]> {
        self.list.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn agents(&self) -> MutexGuard<'_, HashMap<String, Track>> {
        self.agents.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on agent `id`'s state (created when there is none; the id
    /// is copied only then), once a deferred entry has been taken in.
    pub fn agent<R>(&self, id: &str, f: impl FnOnce(&mut Track) -> R) -> R {
        let mut agents = self.agents();
        if let Some(track) = agents.get_mut(id) {
            track.settle(id);
            return f(track);
        }
        f(agents.entry(id.to_string()).or_default())
    }

    /// Whether any connection is attached to agent `id` (its deferred
    /// entry, if any, stays unread).
    pub fn attached(&self, id: &str) -> bool {
        self.agents().get(id).is_some_and(|t| t.attached > 0)
    }

    /// Keeps `entry` (a `tool_calls` or `tool_results` of agent `id`) to be
    /// read when the agent's state is next looked at ([`Track::defer`]).
    pub fn defer_entry(&self, id: &str, entry: &Arc<str>) {
        let mut agents = self.agents();
        if let Some(track) = agents.get_mut(id) {
            return track.defer(entry);
        }
        agents.entry(id.to_string()).or_default().defer(entry);
    }

    /// Whether any client is connected at all (nothing rendered for
    /// clients is needed otherwise).
    pub fn has_clients(&self) -> bool {
        !self
            .list
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// The hub's shutdown has begun (`run.rs`, before workers are stopped).
    pub fn set_stopping(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Forgets a deleted agent.
    pub fn forget(&self, id: &str) {
        self.agents().remove(id);
    }
}

/// A connection attached to the agent as interactive, or bound to it
/// (direct), may answer its requests, and so may one attached interactively
/// to the ancestor its requests are delegated to (`delegate`); an observer
/// may not. The headless rule governs daemon agents and their children.
impl crate::ops::confirm::Responders for Shard {
    fn governs(&self, hub: &crate::hub::Hub, session: &str) -> bool {
        delegate::governed(hub, self, session)
    }

    fn can_answer(&self, hub: &crate::hub::Hub, session: &str) -> bool {
        delegate::responds(self, session) || delegate::target(hub, self, session).is_some()
    }
}

/// The health view's list of Shard connections (`ops::health`).
impl crate::ops::health::Front for Shard {
    fn connections(&self) -> Vec<crate::ops::health::Connection> {
        self.snapshot()
            .iter()
            .map(|c| {
                let f = c.outbound().figures();
                crate::ops::health::Connection {
                    id: c.id,
                    pending_bytes: f.pending_bytes,
                    queued_items: f.queued_items,
                    budget_bytes: f.budget_bytes,
                    detail: crate::ops::health::Detail::Shard {
                        transport: match c.transport() {
                            conn::Transport::WebSocket => "websocket",
                            conn::Transport::Socket => "unix",
                        },
                        direct: c.direct().map(str::to_string),
                    },
                }
            })
            .collect()
    }
}
