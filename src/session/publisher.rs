//! The publisher handle: whatever changes session state announces it here
//! ([`Publisher::notify`] with a [`Note`]), and every subscriber (the
//! panel and Shard front-ends, the deferred stops) hears it, in the order
//! the changes were announced. A note carries typed views; each
//! subscriber renders its own wire from them. Whoever announces changes
//! and needs nothing else of the hub takes this handle.

use std::sync::{Arc, Mutex, MutexGuard};

use super::{ClosedPrompt, RequestRecord};
use crate::supervisor::process::ProcessView;
use crate::wire::worker::plan::PlanRecord;

/// Something panels may need to hear about. Produced after the session lock
/// is released; the panel socket layer turns these into frames.
#[derive(Debug, Clone)]
pub enum Note {
    /// A worker envelope. `hub_seq` is its `hub_sequence`; a transient
    /// reply (`retained: false`, such as history) carries the session's
    /// current sequence without consuming one.
    Event {
        session: String,
        hub_seq: u64,
        retained: bool,
        json: Arc<str>,
        /// Where the worker's event name is in `json` (between its quotes;
        /// empty when it has an escape, which no name the hub acts on has).
        event: std::ops::Range<usize>,
    },
    Connection {
        session: String,
        connected: bool,
        replaced: bool,
    },
    /// A payload the hub sent was admitted, rejected or orphaned (or has
    /// just been sent).
    Request {
        session: String,
        request: RequestRecord,
    },
    /// The worker process record changed.
    Process {
        session: String,
        process: Option<ProcessView>,
    },
    /// A session was created or its description changed.
    SessionChanged { session: String },
    /// A session is gone.
    SessionRemoved { session: String },
    /// A confirmation prompt can be decided now (it opened with a worker
    /// identity that was judged, or its identity was confirmed later);
    /// subscribers describe it as it is when they hear of it.
    ConfirmationOpened {
        session: String,
        confirmation_id: String,
    },
    /// A confirmation's exchange ended; `closed` is the prompt as it was
    /// then.
    ConfirmationClosed { closed: ClosedPrompt },
    /// An open confirmation was decided (the decision is written to the
    /// worker; the prompt closes when the worker closes the exchange).
    /// `source` says who decided: `panel`, `api`, `shard`, `policy` (a
    /// headless child's operator policy) or `hub` (the hub's own denial:
    /// a foreign worker, an identity never verified).
    Decided {
        session: String,
        confirmation_id: String,
        approved: bool,
        source: &'static str,
        /// The answer also made a grant (`allow_always`).
        always: bool,
    },
    /// The session plan was replaced; `plan` as committed to the store.
    Plan { session: String, plan: PlanRecord },
}

/// One subscriber: called with every note, under the publish lock, on the
/// thread that announced it. It queues what it sends without blocking.
pub type Listener = Box<dyn Fn(&Note) + Send + Sync>;

/// The subscribers and the lock that orders their notes.
#[derive(Default)]
pub struct Publisher {
    /// Serializes publishing: every note is turned into frames and queued
    /// to subscribers under this lock, reading the state it describes at
    /// that moment, so they see changes in the order they happened.
    publish: Mutex<()>,
    /// Who hears of changes, set by the start-up wiring.
    listeners: Mutex<Arc<[Arc<Listener>]>>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher").finish_non_exhaustive()
    }
}

impl Publisher {
    /// Announces a change to every subscriber, in the order changes are
    /// announced. Never called with a registry or store lock held. The
    /// frames queued are written once the publish lock is released (a
    /// batch, `util::wakes`), or at the end of the caller's own batch.
    pub fn notify(&self, note: Note) {
        let listeners = self
            .listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        // Declared before the lock, so it ends (and writes) after it.
        let _batch = crate::util::wakes::batch();
        let _ordered = self.ordered();
        for listener in listeners.iter() {
            listener(&note);
        }
    }

    /// Adds a subscriber to every later note.
    pub fn subscribe(&self, listener: Listener) {
        let mut list = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = list.to_vec();
        next.push(Arc::new(listener));
        *list = next.into();
    }

    /// The publish lock: held while notes are queued to subscribers, so
    /// whoever holds it queues in the order the state changed (taken
    /// before the registry lock, never the other way round).
    pub fn ordered(&self) -> MutexGuard<'_, ()> {
        self.publish.lock().unwrap_or_else(|p| p.into_inner())
    }
}
