//! The handles every service shares: the settings, the store, the session
//! registry, the publisher, the socket table, the listener addresses, the
//! worker hooks and the shutdown flag, with the operations that need
//! several of them at once (a session's creation and removal in
//! [`lifecycle`], plans in [`plans`], a session object built from its
//! record). The supervisor, the worker sockets and the subagent service
//! take this instead of the hub; the hub (`hub.rs`) builds it, wires the
//! front-ends to it and shuts it down.
//!
//! Lock rule: the registry (`sessions`) is locked once per unit of work
//! and never across I/O; the store's mutex guards only the SQLite
//! connection. The plan lock serializes plan publication (store commit,
//! `plan.json`, panel note) and is never taken while another lock is held.

mod error;
pub mod lifecycle;
pub mod plans;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;

use crate::config::Config;
use crate::session::{
    self, PromptView, Publisher, Session, SessionView, Sessions, SpecDefaults, WorkerHooks,
};
use crate::store::{Db, ProcessRecord, SessionRecord, Store};
use crate::transcript::Transcript;
use crate::util::bounded_writer::{self, BoundedWriter};
use crate::wire::worker::plan::PlanRecord;
use crate::wsconn::sockets::Sockets;

pub use error::HubError;
pub use lifecycle::{new_token, remove_session_dir};

/// The shared handles (see the module documentation).
pub struct Services {
    pub config: Config,
    /// The store handle (`hub.db`).
    pub store: Arc<Db>,
    /// The session registry (the one way to a session record).
    pub sessions: Arc<Sessions>,
    /// The publisher (the one way changes are announced).
    pub publisher: Arc<Publisher>,
    /// Every accepted socket, so shutdown can close them all.
    pub sockets: Arc<Sockets>,
    local_addr: OnceLock<SocketAddr>,
    /// The bound remote-tools listener address.
    tools_addr: OnceLock<SocketAddr>,
    /// The offline model provider's base URL, once it listens.
    mock_base_url: OnceLock<String>,
    /// Open tool sockets, bounded by `toolRequests.maxConnections`.
    tool_sockets: Arc<AtomicUsize>,
    /// Serializes plan replacements so revisions, `plan.json` and panel
    /// notes follow commit order. Never held with another lock.
    plan_lock: Mutex<()>,
    shutting_down: AtomicBool,
    /// The headless subagent service's worker hooks, wired in by `run.rs`
    /// once the hub exists (none until then: a hub that serves no worker
    /// needs none).
    hooks: OnceLock<Arc<dyn WorkerHooks>>,
}

impl Services {
    /// The handles over an opened store, with an empty registry.
    pub fn new(config: Config, store: Store) -> Services {
        Services {
            config,
            store: Arc::new(Db::new(store)),
            sessions: Arc::new(Sessions::default()),
            publisher: Arc::new(Publisher::default()),
            sockets: Arc::new(Sockets::default()),
            local_addr: OnceLock::new(),
            tools_addr: OnceLock::new(),
            mock_base_url: OnceLock::new(),
            tool_sockets: Arc::new(AtomicUsize::new(0)),
            plan_lock: Mutex::new(()),
            shutting_down: AtomicBool::new(false),
            hooks: OnceLock::new(),
        }
    }

    /// Records the bound main listener's address (once).
    pub fn set_local_addr(&self, addr: SocketAddr) {
        let _ = self.local_addr.set(addr);
    }

    /// Records the bound remote-tools listener's address (once).
    pub fn set_tools_addr(&self, addr: SocketAddr) {
        let _ = self.tools_addr.set(addr);
    }

    /// The bound remote-tools listener address, once bound.
    pub fn tools_addr(&self) -> Option<SocketAddr> {
        self.tools_addr.get().copied()
    }

    /// The bound main listener address (once bound).
    pub fn local_addr(&self) -> SocketAddr {
        *self
            .local_addr
            .get()
            .expect("local_addr read before the listener was bound")
    }

    /// The port workers are told for remote tools: the port the tools
    /// listener is actually bound to (the configured one before binding).
    pub fn tools_port(&self) -> u16 {
        self.tools_addr
            .get()
            .map_or(self.config.tool_requests.port, SocketAddr::port)
    }

    /// The addresses workers dial: the main listener, and the tools
    /// listener (bound elsewhere when `toolRequests.host` says so).
    pub fn worker_addrs(&self) -> (SocketAddr, SocketAddr) {
        let main = self.local_addr();
        let tools = self
            .tools_addr()
            .unwrap_or_else(|| SocketAddr::new(main.ip(), self.tools_port()));
        (main, tools)
    }

    /// Records the offline model provider's base URL (`run.rs`, once it
    /// listens); worker configurations written after this point at it.
    pub fn set_mock_base_url(&self, url: String) {
        let _ = self.mock_base_url.set(url);
    }

    /// The offline model provider's base URL, while it runs.
    pub fn mock_base_url(&self) -> Option<&str> {
        self.mock_base_url.get().map(String::as_str)
    }

    /// Reserves one of the `toolRequests.maxConnections` tool socket
    /// slots; `None` when all are taken. The slot is freed when dropped.
    pub fn try_tool_slot(&self) -> Option<ToolSlot> {
        let max = self.config.tool_requests.max_connections;
        self.tool_sockets
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < max).then_some(open + 1)
            })
            .ok()
            .map(|_| ToolSlot(self.tool_sockets.clone()))
    }

    /// The worker hooks (see [`WorkerHooks`]).
    pub fn hooks(&self) -> Arc<dyn WorkerHooks> {
        match self.hooks.get() {
            Some(hooks) => hooks.clone(),
            None => Arc::new(session::NoHooks),
        }
    }

    /// Wires in the service layered on sessions (once; later calls are
    /// ignored).
    pub fn set_hooks(&self, hooks: Arc<dyn WorkerHooks>) {
        let _ = self.hooks.set(hooks);
    }

    /// Marks the start of the shutdown: supervisors and services stop
    /// starting new work from here on.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    /// `<dataDir>/sessions/<id>`, or `<dataDir>/subagents/<id>` for a
    /// headless child (the generated namespace).
    pub fn session_dir(&self, id: &str) -> PathBuf {
        let root = if session::headless::is_child_id(id) {
            "subagents"
        } else {
            "sessions"
        };
        self.config.data_dir.join(root).join(id)
    }

    /// A session object with its transcript and events file, from a record.
    pub fn new_session(&self, rec: SessionRecord) -> Session {
        let limits = &self.config.limits;
        let transcript = Transcript::new(limits.transcript_events, limits.transcript_bytes);
        let events_path = self.session_dir(&rec.id).join("events.jsonl");
        let mut s = Session::new(
            rec.id,
            rec.created_at,
            rec.spec,
            rec.token,
            rec.lifecycle_id,
            transcript,
        );
        let headless = rec.kind == session::headless::KIND;
        s.set_log_caps(limits.log_lines, limits.log_ring_bytes);
        // Headless events are consumed transiently: no events file.
        let events_file = (!headless).then(|| {
            Arc::new(BoundedWriter::new(
                events_path,
                bounded_writer::DEFAULT_BUDGET,
                bounded_writer::jsonl_omission_marker,
                format!("session {} events.jsonl", s.id()),
            ))
        });
        let plan = match self.store.lock().get_plan(s.id()) {
            Ok(plan) => plan,
            Err(err) => {
                log::warn!("session {}: plan not readable: {err}", s.id());
                PlanRecord::default()
            }
        };
        s.with_kind(rec.kind)
            .with_events_file(events_file)
            .with_plan(plan)
    }

    /// Normalizes a spec against this hub's defaults.
    pub fn normalize_spec(&self, spec: &Value) -> Result<Value, session::SpecError> {
        session::normalize_spec(Some(spec), &self.spec_defaults())
    }

    pub(crate) fn spec_defaults(&self) -> SpecDefaults {
        SpecDefaults::from_config(&self.config)
    }

    /// Replaces a session's spec in memory and in the store.
    pub fn persist_spec(&self, id: &str, spec: &Value) {
        let changed = self
            .sessions
            .with(id, |s| s.replace_spec(spec))
            .unwrap_or(false);
        if changed {
            if let Err(err) = self.store.lock().update_session_spec(id, spec) {
                log::warn!("session {id}: spec not stored: {err}");
            }
        }
    }

    /// Sessions whose worker process is starting, running or stopping.
    pub fn active_worker_sessions(&self) -> Vec<String> {
        self.sessions.scan(|s| {
            s.process()
                .is_some_and(|p| p.state.is_active())
                .then(|| s.id().to_string())
        })
    }

    /// Recorded worker processes from the store (for adoption at start).
    pub fn stored_processes(&self) -> Vec<ProcessRecord> {
        self.store.lock().load_processes().unwrap_or_else(|err| {
            log::warn!("cannot read process records: {err}");
            Vec::new()
        })
    }

    /// The worker token of session `id` (copied out for a comparison done
    /// outside the lock).
    pub fn session_token(&self, id: &str) -> Option<String> {
        self.sessions.with(id, |s| s.token().to_string())
    }

    /// Transcript entries after `since`, at most `limit`, plus the latest
    /// sequence. `None` for an unknown session.
    pub fn events_since(&self, id: &str, since: u64, limit: usize) -> Option<(u64, Vec<Arc<str>>)> {
        self.sessions.with(id, |s| {
            let t = s.transcript();
            (t.latest(), t.texts_since(since, limit))
        })
    }

    /// Every session's view, each approval preview bounded to 64 KiB.
    pub fn session_views(&self) -> Vec<SessionView> {
        self.sessions
            .scan(|s| Some(s.view(&mut |_| session::PROMPT_PREVIEW_BYTES)))
    }

    /// One session's view, each approval preview bounded to 64 KiB.
    pub fn session_view(&self, id: &str) -> Option<SessionView> {
        self.sessions
            .with(id, |s| s.view(&mut |_| session::PROMPT_PREVIEW_BYTES))
    }

    /// One open prompt as it is now (64 KiB preview).
    pub fn prompt_view(&self, session: &str, confirmation_id: &str) -> Option<PromptView> {
        self.sessions
            .with(session, |s| {
                s.prompt(confirmation_id)
                    .map(|p| s.prompt_view(p, session::PROMPT_PREVIEW_BYTES))
            })
            .flatten()
    }

    /// `None` for an unknown session, else whether it is headless (one
    /// registry look for the command layer's checks).
    pub fn session_kind(&self, id: &str) -> Option<bool> {
        self.sessions.with(id, |s| {
            s.is_headless() || s.kind() == session::headless::KIND
        })
    }

    /// Flushes every session's events file and worker log, with one
    /// deadline for all (`bounded_writer::CLOSE_DEADLINE`).
    pub fn close_session_files(&self) {
        let files: Vec<Arc<BoundedWriter>> = self
            .sessions
            .scan(|s| Some([s.events_file().cloned(), s.log_file().cloned()]))
            .into_iter()
            .flatten()
            .flatten()
            .collect();
        let deadline = std::time::Instant::now() + bounded_writer::CLOSE_DEADLINE;
        for file in files {
            file.close(deadline.saturating_duration_since(std::time::Instant::now()));
        }
    }
}

/// One reserved tool socket slot (see [`Services::try_tool_slot`]).
#[derive(Debug)]
pub struct ToolSlot(Arc<AtomicUsize>);

impl Drop for ToolSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
pub(crate) mod testkit {
    use serde_json::{json, Value};

    use super::Services;
    use crate::store::Store;
    use crate::util::testkit::TempDir;

    /// Handles over a store in `tmp`, with `toolRequests` as given.
    pub fn open_services(tmp: &TempDir, tool_requests: Value) -> Services {
        let text = json!({
            "dataDir": tmp.path().display().to_string(),
            "listen": {"port": 0},
            "toolRequests": tool_requests,
        })
        .to_string();
        let config = crate::config::test_config(&text);
        std::fs::create_dir_all(config.data_dir.join("sessions")).unwrap();
        let store = Store::open(&config.data_dir.join("hub.db")).unwrap();
        Services::new(config, store)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::testkit::open_services;
    use crate::util::testkit::TempDir;

    #[test]
    fn tool_slots_are_capped_and_freed_on_drop() {
        let tmp = TempDir::new("hub-slots");
        let hub = open_services(&tmp, json!({"maxConnections": 2}));
        let a = hub.try_tool_slot().unwrap();
        let _b = hub.try_tool_slot().unwrap();
        assert!(hub.try_tool_slot().is_none());
        drop(a);
        assert!(hub.try_tool_slot().is_some());
    }
}
