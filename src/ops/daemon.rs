//! The hub process itself: a client's request for the ordinary shutdown.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{ErrorKind, OpError};
use crate::hub::Hub;
use crate::util::thread::{self, Stack};

/// How long a graceful shutdown waits for active runs to finish before it
/// stops the workers anyway (their stop cancels what still runs).
pub const RUN_WAIT: Duration = Duration::from_secs(600);

/// How often the wait looks at the sessions.
const RUN_POLL: Duration = Duration::from_millis(100);

/// Asks the main thread for the ordinary shutdown (`Running::stop`: stop
/// accepting, stop every worker protocol first, close sockets, close the
/// store). Without `force` it first waits, on a thread of its own, until
/// no session has an active run (at most [`RUN_WAIT`]). `internal_error`
/// when this process offers no shutdown request (the hub runs inside
/// another program).
pub fn shutdown(hub: &Arc<Hub>, force: bool) -> Result<(), OpError> {
    available(hub)?;
    if force {
        log::info!("shutdown requested by a client (force)");
        return requested(hub);
    }
    log::info!("shutdown requested by a client: waiting for active runs to finish");
    let waiter = hub.clone();
    thread::spawn("shutdown-wait", Stack::Small, move || {
        let deadline = Instant::now() + RUN_WAIT;
        while active_runs(&waiter) > 0 && Instant::now() < deadline {
            #[expect(
                clippy::disallowed_methods,
                reason = "a run's end is seen only in the session records, which have no \
                          change signal: looked at every RUN_POLL, at most RUN_WAIT"
            )]
            std::thread::sleep(RUN_POLL);
        }
        let _ = requested(&waiter);
    })
    .map_err(|err| {
        OpError::new(
            ErrorKind::Internal,
            format!("cannot start the shutdown: {err}"),
        )
    })?;
    Ok(())
}

/// Whether a shutdown can be requested here (`internal_error` otherwise).
pub fn available(hub: &Hub) -> Result<(), OpError> {
    if hub.can_request_shutdown() {
        Ok(())
    } else {
        Err(OpError::new(
            ErrorKind::Internal,
            "this process offers no shutdown request",
        ))
    }
}

fn requested(hub: &Hub) -> Result<(), OpError> {
    if hub.request_shutdown() {
        Ok(())
    } else {
        Err(OpError::new(
            ErrorKind::Internal,
            "this process offers no shutdown request",
        ))
    }
}

/// Sessions whose worker is executing a run.
fn active_runs(hub: &Hub) -> usize {
    hub.sessions.scan(|s| s.active_run().map(drop)).len()
}
