//! The panel WebSocket protocol v1: pure message handling in
//! `wire::panel`; connections and fan-out elsewhere (`conn`: one connection's budgeted
//! writer; `service`: the `/panel/ws` route, dispatch, replay and
//! fan-out, and the panels' use of the shared poller (one thread waiting
//! on every idle panel socket);
//! `describe`: session descriptions under the frame's approval share).
//!
//! [`Panels`] is the panel front-end's own state: the connected panels and
//! the poller. The start-up wiring creates it, subscribes it to the hub's
//! notifications, and hands it to the HTTP front door for `/panel/ws`.

use std::sync::{Arc, Mutex};

use crate::hub::{Hub, Subscriber};
use crate::session::Note;

pub mod conn;
pub mod describe;
pub mod render;
pub mod service;

use conn::PanelConn;

/// The connected panels and their poller.
#[derive(Default)]
pub struct Panels {
    /// Replaced whole on connect and disconnect, so the fan-out's snapshot
    /// is one reference count.
    list: Mutex<Arc<[Arc<PanelConn>]>>,
    /// Idle panel sockets waiting for input.
    poller: service::Poller,
}

impl Panels {
    pub fn new() -> Arc<Panels> {
        Arc::new(Panels::default())
    }

    pub fn add(&self, panel: Arc<PanelConn>) {
        let mut panels = self.list.lock().unwrap_or_else(|p| p.into_inner());
        let mut list = panels.to_vec();
        list.push(panel);
        *panels = list.into();
    }

    pub fn remove(&self, id: u64) {
        let mut panels = self.list.lock().unwrap_or_else(|p| p.into_inner());
        if panels.iter().any(|p| p.id == id) {
            let list: Vec<Arc<PanelConn>> = panels.iter().filter(|p| p.id != id).cloned().collect();
            *panels = list.into();
        }
    }

    /// A snapshot of the connected panels (the lock is released at once).
    pub fn snapshot(&self) -> Arc<[Arc<PanelConn>]> {
        self.list.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Every connected panel may answer any session's confirmation.
impl crate::ops::confirm::Responders for Panels {
    fn can_answer(&self, _hub: &crate::hub::Hub, _session: &str) -> bool {
        !self.snapshot().is_empty()
    }
}

/// The health view's list of panel connections (`ops::health`).
impl crate::ops::health::Front for Panels {
    fn connections(&self) -> Vec<crate::ops::health::Connection> {
        self.snapshot()
            .iter()
            .map(|p| {
                let f = p.outbound().figures();
                crate::ops::health::Connection {
                    id: p.id,
                    pending_bytes: f.pending_bytes,
                    queued_items: f.queued_items,
                    budget_bytes: f.budget_bytes,
                    detail: crate::ops::health::Detail::Panel {
                        subscriptions: p.subs().len(),
                    },
                }
            })
            .collect()
    }
}

/// Panels hear every hub notification (under the hub's publish lock).
impl Subscriber for Panels {
    fn publish(&self, hub: &Hub, note: &Note) {
        service::fan_out(hub, self, note);
    }
}
