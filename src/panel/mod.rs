//! The panel WebSocket protocol v1: pure message handling in `protocol`;
//! connections and fan-out elsewhere (`conn`: one connection's budgeted
//! writer; `poller`: one thread waiting on every idle panel socket;
//! `service`: the `/panel/ws` route, dispatch, replay and fan-out).

pub mod conn;
pub mod poller;
pub mod protocol;
pub mod service;
