//! Idle runtimes are reaped (seed 004 §6.4): a daemon agent whose status
//! has been `idle` or `error` for `shard.runtimeIdleMs` has its worker
//! stopped gracefully. The agent stays; the next attach or new work starts
//! it again (`ops::agents::ready`). Active states (`streaming`,
//! `waiting_for_permission`, `compacting`) never expire. One thread, only
//! while the setting is not 0: it looks once a second (or at the setting,
//! when shorter) and ends with the hub.

use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use super::track::{Runtime, Status};
use super::Shard;
use crate::hub::Hub;
use crate::ops;
use crate::util::thread::{self, Stack};
use crate::util::time;

/// The reaper thread's handle: [`Reaper::stop`] ends it.
pub struct Reaper {
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl Reaper {
    /// Starts the reaper when `shard.runtimeIdleMs` is not 0.
    pub fn start(hub: &Arc<Hub>, shard: &Arc<Shard>) -> Option<Arc<Reaper>> {
        let idle_ms = hub.config.shard_daemon.runtime_idle_ms;
        if idle_ms == 0 {
            return None;
        }
        let reaper = Arc::new(Reaper {
            stopped: Mutex::new(false),
            wake: Condvar::new(),
        });
        let every = Duration::from_millis(idle_ms.clamp(10, 1000));
        let input = (
            Arc::downgrade(hub),
            shard.clone(),
            reaper.clone(),
            idle_ms,
            every,
        );
        let started = thread::spawn_with(
            "shard-reaper",
            Stack::Medium,
            input,
            |(hub, shard, reaper, idle_ms, every)| reaper.run(&hub, &shard, idle_ms, every),
        );
        match started {
            Ok(_) => Some(reaper),
            Err((err, _)) => {
                log::error!("cannot start the idle-runtime reaper: {err}");
                None
            }
        }
    }

    /// Ends the thread (at its next look at the latest).
    pub fn stop(&self) {
        *self.stopped.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.wake.notify_all();
    }

    fn run(&self, hub: &Weak<Hub>, shard: &Shard, idle_ms: u64, every: Duration) {
        let mut stopped = self.stopped.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            stopped = self
                .wake
                .wait_timeout(stopped, every)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            if *stopped || shard.is_stopping() {
                return;
            }
            let Some(hub) = hub.upgrade() else {
                return;
            };
            // Not under the reaper's lock: a stop writes SQLite.
            drop(stopped);
            for agent in shard.idle_longer_than(idle_ms, time::now_millis()) {
                if ops::agents::reap(&hub, &agent) {
                    log::info!(
                        "agent {agent}: its runtime was idle for {idle_ms} ms \
                         (shard.runtimeIdleMs); stopped, the next attach or prompt starts it"
                    );
                }
            }
            stopped = self.stopped.lock().unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl Shard {
    /// The daemon agents whose runtime runs and whose status has been
    /// `idle` or `error` since at least `idle_ms` before `now`. An agent
    /// whose status has not been announced since the hub started has its
    /// clock started now.
    fn idle_longer_than(&self, idle_ms: u64, now: u64) -> Vec<String> {
        let mut due = Vec::new();
        for (id, t) in self.agents().iter_mut() {
            let idle = t.daemon
                && t.last().is_some_and(|d| {
                    matches!(d.status, Status::Idle | Status::Error)
                        && d.runtime == Runtime::Running
                });
            if !idle {
                continue;
            }
            if t.since == 0 {
                t.since = now;
            }
            if now.saturating_sub(t.since) >= idle_ms {
                due.push(id.clone());
            }
        }
        due
    }
}
