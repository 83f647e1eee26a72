//! The panels' use of the shared poller (`wsconn::poller`): one thread
//! waits on every idle panel socket and hands a socket with input to a
//! short-lived `panel-reader` thread, which runs [`service::drain`].

use std::sync::Arc;

use super::conn::PanelConn;
use super::{service, Panels};
use crate::hub::Hub;
use crate::wsconn::outbound::Outbound;
use crate::wsconn::poller::{self, Service};

/// A parked panel socket.
pub type Parked = poller::Parked<PanelConn>;
/// What a panel reader did with its socket's input.
pub type Drained = poller::Drained<PanelConn>;
/// The idle panel sockets.
pub type Poller = poller::Poller<Panels>;

impl Service for Panels {
    type Ctx = Hub;
    type Conn = PanelConn;
    type Socket = tungstenite::WebSocket<crate::ws::SplitStream>;
    const POLL_THREAD: &'static str = "panel-poll";
    const READER_THREAD: &'static str = "panel-reader";

    fn poller(&self) -> &Poller {
        &self.poller
    }

    fn outbound(conn: &PanelConn) -> &Outbound {
        conn.outbound()
    }

    fn drain(hub: &Arc<Hub>, panels: &Arc<Panels>, parked: Parked) -> Drained {
        service::drain(hub, panels, parked)
    }

    fn release(hub: &Hub, panels: &Panels, conn: &PanelConn) {
        service::release(hub, panels, conn)
    }
}
