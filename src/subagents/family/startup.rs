//! Startup: moving a prepared child to `starting`, launching its worker,
//! and stopping it when it is not ready within
//! `subagents.startupTimeoutMs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::persist::transition;
use super::set_reason;
use super::stop::begin_stop;
use crate::session::headless::{Lifecycle, LifecycleEvent};
use crate::subagents::Service;
use crate::supervisor::control;

/// How often the startup watcher looks at a starting child.
const STARTUP_POLL: Duration = Duration::from_millis(100);

/// Starts a prepared child and watches its startup deadline.
pub(super) fn launch(sv: &Arc<Service>, id: &str) {
    // Time spent launching counts toward the deadline.
    let deadline = startup_deadline(sv);
    if !transition(sv, id, LifecycleEvent::Launch) {
        return;
    }
    if let Err(why) = control::start(&sv.services, id, None) {
        log::warn!("subagent {id}: start failed: {why}");
        set_reason(sv, id, &format!("start failed: {why}"));
        begin_stop(sv, id, None);
        return;
    }
    watch_startup(sv, id, deadline);
}

pub(super) fn startup_deadline(sv: &Service) -> Instant {
    Instant::now() + Duration::from_millis(sv.config.subagents.startup_timeout_ms)
}

/// Stops a child that is not ready within `subagents.startupTimeoutMs`.
pub(super) fn watch_startup(sv: &Arc<Service>, id: &str, deadline: Instant) {
    loop {
        let state = sv
            .sessions
            .with(id, |s| s.headless().map(|c| c.lifecycle()))
            .flatten();
        match state {
            Some(Lifecycle::Preparing | Lifecycle::Starting) => {}
            _ => return,
        }
        if Instant::now() >= deadline {
            log::warn!("subagent {id}: not ready within the startup timeout");
            set_reason(sv, id, "startup_timeout: the child was not ready in time");
            begin_stop(sv, id, None);
            return;
        }
        #[expect(
            clippy::disallowed_methods,
            reason = "the child's lifecycle has no change signal: looked at every \
                      STARTUP_POLL until the startup deadline"
        )]
        std::thread::sleep(STARTUP_POLL);
    }
}
