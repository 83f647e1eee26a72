//! The worker process record's transitions, as one state machine:
//! reserve a start, record the spawned (or adopted) process or the failed
//! start, follow a daemon or a container the launcher leaves running,
//! begin a stop, give a stop back that could not begin, record the end. The supervisor does the process work around them; these only
//! change the record, so a start and a stop can never both own it. Pure:
//! times are given, nothing is signalled here.

use std::sync::Arc;

use super::Session;
use crate::supervisor::process::{ProcState, ProcessInfo};
use crate::supervisor::sys::Pinned;

/// Why a stop could not begin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoStop {
    /// No worker was ever started.
    NotStarted,
    /// The worker had already ended.
    AlreadyExited,
    /// The worker runs, but the hub holds no verified identity to signal
    /// (neither a pinned process nor a container).
    Unpinned,
}

/// Why a start could not be reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartRefused {
    /// The session's configuration snapshot is being replaced.
    Reconfiguring,
    /// A worker is starting, running or stopping (the state it is in).
    Active(ProcState),
}

impl std::fmt::Display for StartRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartRefused::Reconfiguring => {
                f.write_str("the session's configuration is being replaced")
            }
            StartRefused::Active(state) => {
                write!(f, "a worker is already {} for this session", state.as_str())
            }
        }
    }
}

impl std::error::Error for StartRefused {}

/// A stop that began: the pinned incarnation to signal (`None` when only
/// its container is left: a Docker launch whose CLI has exited), and
/// whether a worker is connected (the ladder asks it to shut down first).
#[derive(Debug, Clone)]
pub struct StopBegun {
    pub pinned: Option<Arc<Pinned>>,
    pub connected: bool,
}

impl Session {
    /// The worker process record, once one was started or adopted.
    pub fn process(&self) -> Option<&ProcessInfo> {
        self.process.as_ref()
    }

    /// Reserves a start under `lifecycle_id` (`starting`, its `started_at`
    /// `now` until the spawn records the real time); refused while a worker
    /// is starting, running or stopping, and while the session's
    /// configuration snapshot is being replaced.
    pub fn reserve_start(&mut self, lifecycle_id: &str, now: &str) -> Result<(), StartRefused> {
        if self.reconfiguring {
            return Err(StartRefused::Reconfiguring);
        }
        if let Some(p) = &self.process {
            if p.state.is_active() {
                return Err(StartRefused::Active(p.state));
            }
        }
        let mut reserved = ProcessInfo::starting(
            String::new(),
            vec![],
            String::new(),
            lifecycle_id.to_string(),
        );
        reserved.started_at = Some(now.to_string());
        self.process = Some(reserved);
        self.lifecycle_id = lifecycle_id.to_string();
        Ok(())
    }

    /// The start under `lifecycle_id` spawned `info` (state `running`).
    pub fn record_started(&mut self, mut info: ProcessInfo) {
        // A stop deferred for an earlier worker's run is not this one's.
        self.stop_after_run = false;
        info.state = ProcState::Running;
        self.process = Some(info);
    }

    /// A worker recorded by an earlier hub run is still alive: `info`
    /// (its record, pinned) becomes the session's, as `running`.
    pub fn record_adopted(&mut self, mut info: ProcessInfo) {
        info.state = ProcState::Running;
        info.adopted = true;
        self.lifecycle_id = info.lifecycle_id.clone();
        self.process = Some(info);
    }

    /// The start under `lifecycle_id` failed (`failed`, with `error`);
    /// false when a newer start owns the record.
    pub fn record_start_failed(&mut self, lifecycle_id: &str, error: &str, now: &str) -> bool {
        let Some(p) = self.current_process(lifecycle_id) else {
            return false;
        };
        p.state = ProcState::Failed;
        p.error = Some(error.to_string());
        p.exited_at = Some(now.to_string());
        true
    }

    /// The process of `lifecycle_id` ended; returns its final state
    /// (`exited` or `failed`), `None` when a newer start owns the record.
    pub fn record_ended(
        &mut self,
        lifecycle_id: &str,
        code: Option<i32>,
        signal: Option<i32>,
        now: &str,
    ) -> Option<ProcState> {
        let p = self.current_process(lifecycle_id)?;
        p.ended(code, signal, now.to_string());
        Some(p.state)
    }

    /// The launcher of `lifecycle_id` daemonized: `pinned` (named by its
    /// pid file) is the worker from now on. The state stays what it was (a
    /// stop in progress goes on against the new process). False when the
    /// record is not this start's or has ended.
    pub fn record_daemonized(&mut self, lifecycle_id: &str, pinned: Arc<Pinned>) -> bool {
        let Some(p) = self.current_process(lifecycle_id) else {
            return false;
        };
        if !p.state.is_active() {
            return false;
        }
        p.pid = Some(pinned.pid());
        p.start_time = Some(pinned.start_time());
        p.pinned = Some(pinned);
        true
    }

    /// The Docker CLI of `lifecycle_id` exited but its container runs on
    /// (or its state cannot be read): the container alone is the worker
    /// from now on. The pin on the CLI is dropped; the state stays what it
    /// was (a stop in progress goes on against the container). False when
    /// the record is not this start's, has ended, or is no Docker launch.
    pub fn record_container_followed(&mut self, lifecycle_id: &str) -> bool {
        let Some(p) = self.current_process(lifecycle_id) else {
            return false;
        };
        if !p.state.is_active() || p.docker.is_none() {
            return false;
        }
        p.pinned = None;
        true
    }

    /// `docker inspect` reported the id of `lifecycle_id`'s container:
    /// kept from the first report on (later commands name it). True when
    /// it was new to the record.
    pub fn note_container_id(&mut self, lifecycle_id: &str, id: &str) -> bool {
        let Some(p) = self.current_process(lifecycle_id) else {
            return false;
        };
        if !p.state.is_active() || p.docker.is_none() || p.container_id.is_some() {
            return false;
        }
        p.container_id = Some(id.to_string());
        true
    }

    /// Begins a stop (`stopping`): only a running worker with a verified
    /// identity (a pinned process, or a container) can be stopped; a second
    /// stop while one runs begins again on the same incarnation.
    pub fn begin_stop(&mut self) -> Result<StopBegun, NoStop> {
        let connected = self.connected();
        let p = self.process.as_mut().ok_or(NoStop::NotStarted)?;
        if !p.state.is_active() {
            return Err(NoStop::AlreadyExited);
        }
        let pinned = p.pinned.clone();
        if pinned.is_none() && p.docker.is_none() {
            return Err(NoStop::Unpinned);
        }
        p.stop_requested = true;
        p.state = ProcState::Stopping;
        Ok(StopBegun { pinned, connected })
    }

    /// A stop that began but could not run (no thread for its ladder): the
    /// worker was not signalled and is `running` again. False when the
    /// record is not `stopping`.
    pub fn abandon_stop(&mut self) -> bool {
        match self.process.as_mut() {
            Some(p) if p.state == ProcState::Stopping => {
                p.state = ProcState::Running;
                p.stop_requested = false;
                true
            }
            _ => false,
        }
    }

    /// The stop ladder signalled the worker's whole process group.
    pub fn note_group_killed(&mut self) {
        if let Some(p) = self.process.as_mut() {
            p.process_group_killed = true;
        }
    }

    fn current_process(&mut self, lifecycle_id: &str) -> Option<&mut ProcessInfo> {
        self.process
            .as_mut()
            .filter(|p| p.lifecycle_id == lifecycle_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Session {
        crate::session::testkit::session("old")
    }

    fn spawned(lifecycle_id: &str) -> ProcessInfo {
        let mut info = ProcessInfo::starting("w".into(), vec![], "/".into(), lifecycle_id.into());
        info.pid = Some(4242);
        info
    }

    #[test]
    fn a_start_is_reserved_once() {
        let mut s = session();
        s.reserve_start("l1", "t").unwrap();
        assert_eq!(s.lifecycle_id, "l1");
        assert_eq!(s.process().unwrap().state, ProcState::Starting);
        let again = s.reserve_start("l2", "t").unwrap_err();
        assert_eq!(again, StartRefused::Active(ProcState::Starting));
        assert_eq!(
            again.to_string(),
            "a worker is already starting for this session"
        );
        s.record_started(spawned("l1"));
        assert_eq!(
            s.reserve_start("l3", "t"),
            Err(StartRefused::Active(ProcState::Running))
        );
    }

    #[test]
    fn a_stale_start_cannot_touch_a_newer_record() {
        let mut s = session();
        s.reserve_start("l1", "t").unwrap();
        assert!(s.record_start_failed("l1", "boom", "t1"));
        assert_eq!(s.process().unwrap().state, ProcState::Failed);
        s.reserve_start("l2", "t").unwrap();
        assert!(!s.record_start_failed("l1", "late", "t2"));
        assert_eq!(s.record_ended("l1", Some(0), None, "t3"), None);
        assert_eq!(s.process().unwrap().state, ProcState::Starting);
    }

    #[test]
    fn ends_are_exited_or_failed() {
        let mut s = session();
        s.reserve_start("l1", "t").unwrap();
        s.record_started(spawned("l1"));
        assert_eq!(
            s.record_ended("l1", Some(7), None, "t"),
            Some(ProcState::Failed)
        );
        s.reserve_start("l2", "t").unwrap();
        s.record_started(spawned("l2"));
        assert_eq!(
            s.record_ended("l2", Some(0), None, "t"),
            Some(ProcState::Exited)
        );
    }

    #[test]
    fn stops_need_a_running_pinned_worker() {
        let mut s = session();
        assert_eq!(s.begin_stop().unwrap_err(), NoStop::NotStarted);
        s.reserve_start("l1", "t").unwrap();
        s.record_started(spawned("l1"));
        assert_eq!(s.begin_stop().unwrap_err(), NoStop::Unpinned);
        assert_eq!(s.process().unwrap().state, ProcState::Running);
        s.record_ended("l1", Some(0), None, "t");
        assert_eq!(s.begin_stop().unwrap_err(), NoStop::AlreadyExited);
        assert!(!s.abandon_stop());
    }

    #[test]
    fn a_stop_that_cannot_run_is_given_back() {
        // Pinned to this test process itself: nothing is ever signalled.
        let me = std::process::id();
        let start = crate::supervisor::sys::proc_start_time(me).unwrap();
        let mut s = session();
        s.reserve_start("l1", "t").unwrap();
        let mut info = spawned("l1");
        info.pinned = Some(Arc::new(Pinned::open(me, start).unwrap()));
        s.record_started(info);
        let begun = s.begin_stop().unwrap();
        assert!(!begun.connected);
        assert_eq!(s.process().unwrap().state, ProcState::Stopping);
        assert!(s.process().unwrap().stop_requested);
        assert!(s.abandon_stop());
        assert_eq!(s.process().unwrap().state, ProcState::Running);
        assert!(!s.process().unwrap().stop_requested);
        // A stop that ends normally makes the end `exited`, whatever code.
        s.begin_stop().unwrap();
        assert_eq!(
            s.record_ended("l1", Some(143), None, "t"),
            Some(ProcState::Exited)
        );
    }

    #[test]
    fn a_daemonized_worker_replaces_its_launcher_in_the_record() {
        let me = std::process::id();
        let start = crate::supervisor::sys::proc_start_time(me).unwrap();
        let pin = || Arc::new(Pinned::open(me, start).unwrap());
        let mut s = session();
        s.reserve_start("l1", "t").unwrap();
        s.record_started(spawned("l1"));
        assert!(!s.record_daemonized("other", pin()));
        assert!(s.record_daemonized("l1", pin()));
        let p = s.process().unwrap();
        assert_eq!((p.pid, p.start_time), (Some(me), Some(start)));
        assert_eq!(p.state, ProcState::Running);
        // A stop in progress stays one.
        s.begin_stop().unwrap();
        assert!(s.record_daemonized("l1", pin()));
        assert_eq!(s.process().unwrap().state, ProcState::Stopping);
        // An ended record is never revived.
        s.record_ended("l1", Some(0), None, "t");
        assert!(!s.record_daemonized("l1", pin()));
        assert_eq!(s.process().unwrap().state, ProcState::Exited);
    }

    fn docker_launch(lifecycle_id: &str) -> ProcessInfo {
        use crate::supervisor::docker::{Management, Target};
        let mut info = spawned(lifecycle_id);
        info.docker = Some(Arc::new(Management {
            executable: "/usr/bin/docker".into(),
            cwd: "/".into(),
            env: vec![],
            pass_through: vec![],
            target: Target {
                name: "w1".into(),
                global_args: vec![],
                auto_remove: true,
            },
        }));
        info
    }

    #[test]
    fn a_container_outlives_its_cli_in_the_record() {
        let me = std::process::id();
        let start = crate::supervisor::sys::proc_start_time(me).unwrap();
        let mut s = session();
        s.reserve_start("l1", "t").unwrap();
        // An ordinary process has no container to follow.
        s.record_started(spawned("l1"));
        assert!(!s.record_container_followed("l1"));
        assert!(!s.note_container_id("l1", "abc"));
        s.record_ended("l1", Some(0), None, "t");

        s.reserve_start("l2", "t").unwrap();
        let mut info = docker_launch("l2");
        info.pinned = Some(Arc::new(Pinned::open(me, start).unwrap()));
        s.record_started(info);
        assert!(!s.record_container_followed("l1"), "an older start");
        assert!(s.note_container_id("l2", "abc"));
        assert!(!s.note_container_id("l2", "def"), "the first id stays");
        assert_eq!(s.process().unwrap().container_id.as_deref(), Some("abc"));
        assert!(s.record_container_followed("l2"));
        let p = s.process().unwrap();
        assert!(p.pinned.is_none());
        assert_eq!(p.state, ProcState::Running);
        // Only the container is left, and it can still be stopped.
        let begun = s.begin_stop().unwrap();
        assert!(begun.pinned.is_none());
        assert_eq!(s.process().unwrap().state, ProcState::Stopping);
        assert!(s.record_container_followed("l2"), "a stop goes on");
        assert_eq!(s.process().unwrap().state, ProcState::Stopping);
        assert_eq!(
            s.record_ended("l2", Some(0), None, "t"),
            Some(ProcState::Exited)
        );
        // An ended record is never revived.
        assert!(!s.record_container_followed("l2"));
        assert!(!s.note_container_id("l2", "x"));
        assert_eq!(s.begin_stop().unwrap_err(), NoStop::AlreadyExited);
    }

    #[test]
    fn adoption_takes_the_recorded_lifecycle() {
        let mut s = session();
        s.record_adopted(spawned("recorded"));
        assert_eq!(s.lifecycle_id, "recorded");
        let p = s.process().unwrap();
        assert!(p.adopted);
        assert_eq!(p.state, ProcState::Running);
    }
}
