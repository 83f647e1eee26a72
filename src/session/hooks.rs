//! What a service layered on sessions (the headless subagents) adds to a
//! worker's lifecycle. The worker side and the supervisor call these
//! hooks instead of that service, so they do not import it; `run.rs`
//! wires the implementation in (`Services::set_hooks`).

use super::Session;
use crate::wire::worker::envelope::Envelope;

/// The hooks. An implementation holds what its work needs.
pub trait WorkerHooks: Send + Sync {
    /// Under the registry lock, after the session took in `env`: the
    /// service's own changes to `s`, and work to run after the lock.
    fn event(&self, s: &mut Session, env: &Envelope, now: &str) -> Followup;
    /// Under the registry lock, when the worker's connection ended.
    fn disconnected(&self, s: &mut Session, now: &str) -> Followup;
    /// A stop of session `id`'s worker begins (no lock held).
    fn stopping(&self, id: &str);
    /// Session `id`'s worker process is confirmed gone and its output
    /// pipes are closed (no lock held).
    fn process_gone(&self, id: &str);
    /// Why every worker launch is refused now, if it is (the service's
    /// own storage needs repair first).
    fn launch_blocked(&self) -> Option<String>;
}

/// No service layered on sessions.
pub struct NoHooks;

impl WorkerHooks for NoHooks {
    fn event(&self, _: &mut Session, _: &Envelope, _: &str) -> Followup {
        Followup::default()
    }

    fn disconnected(&self, _: &mut Session, _: &str) -> Followup {
        Followup::default()
    }

    fn stopping(&self, _: &str) {}

    fn process_gone(&self, _: &str) {}

    fn launch_blocked(&self) -> Option<String> {
        None
    }
}

/// Work a hook leaves for after the registry lock.
pub type AfterLock = Box<dyn FnOnce() + Send>;

/// What a [`WorkerHooks`] call leaves for its caller.
#[derive(Default)]
pub struct Followup {
    /// The session's description changed (announce it).
    pub changed: bool,
    /// To run once the registry lock is released.
    pub work: Option<AfterLock>,
}

impl Followup {
    /// Runs the deferred work, if any (no lock may be held).
    pub fn run(self) {
        if let Some(work) = self.work {
            work();
        }
    }
}
