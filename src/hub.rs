//! The hub: owns the configuration, the store, the session registry and
//! the transcript epoch; starts the listeners (main and remote tools) and
//! shuts everything down in a fixed order. HTTP, panel and worker socket
//! handlers call its methods.
//!
//! Lock rule: `sessions` is locked once per unit of work and never across
//! I/O; the store's mutex guards only the SQLite connection. `plan_lock`
//! serializes plan publication (store commit, `plan.json`, panel note) and
//! is never taken while another hub lock is held.

use std::fmt;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{json, Value};

use crate::capabilities;
use crate::config::Config;

use crate::session::{self, Note, Publisher, Session, Sessions, SpecDefaults, WorkerHooks};
use crate::store::{Db, ProcessRecord, SessionRecord, Store, StoreError};
use crate::transcript::Transcript;
use crate::util::bounded_writer::{self, BoundedWriter};
use crate::util::{fsutil, time};
use crate::wire::worker::plan::PlanRecord;
use crate::wsconn::sockets::Sockets;

/// A front-end that pushes changes to its clients (the panel socket, and
/// the Shard transports after it). `publish` runs under the hub's publish
/// lock, on the thread that made the change: it reads what it needs
/// through the hub, queues frames without blocking, and returns.
pub trait Subscriber: Send + Sync {
    fn publish(&self, hub: &Hub, note: &Note);
}

/// Failures of hub operations, mapped to stable codes by the API layer.
#[derive(Debug)]
pub enum HubError {
    /// The id or spec is not acceptable.
    InvalidSession(String),
    SessionExists(String),
    UnknownSession(String),
    SessionBusy {
        id: String,
        reason: &'static str,
    },
    /// The store refused or failed a read or write.
    Store(StoreError),
    /// A session directory could not be created.
    Files {
        path: PathBuf,
        err: std::io::Error,
    },
}

impl fmt::Display for HubError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HubError::InvalidSession(msg) => f.write_str(msg),
            HubError::SessionExists(id) => {
                write!(
                    f,
                    "session {} already exists",
                    crate::wire::worker::display::quote(id)
                )
            }
            HubError::UnknownSession(id) => {
                write!(f, "no session {}", crate::wire::worker::display::quote(id))
            }
            HubError::SessionBusy { id, reason } => write!(
                f,
                "session {} is busy: {reason}",
                crate::wire::worker::display::quote(id)
            ),
            HubError::Store(err) => write!(f, "storage failure: {err}"),
            HubError::Files { path, err } => {
                write!(
                    f,
                    "storage failure: cannot create {}: {err}",
                    path.display()
                )
            }
        }
    }
}

impl HubError {
    /// Whether the write failed because the data directory's disk is full.
    pub fn is_disk_full(&self) -> bool {
        match self {
            HubError::Store(err) => err.is_disk_full(),
            HubError::Files { err, .. } => crate::store::io_is_disk_full(err),
            _ => false,
        }
    }
}

impl std::error::Error for HubError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HubError::Store(err) => Some(err),
            HubError::Files { err, .. } => Some(err),
            _ => None,
        }
    }
}

/// Failures that stop the hub from starting.
#[derive(Debug)]
pub enum StartError {
    DataDir {
        path: PathBuf,
        err: std::io::Error,
    },
    Store(StoreError),
    /// A listener could not be bound or started; `listener` names which
    /// (the main listener or the remote-tools listener).
    Bind {
        listener: &'static str,
        addr: String,
        err: std::io::Error,
    },
    /// The Shard unix socket (`shard.socket`) could not be put in place.
    Socket {
        path: PathBuf,
        why: String,
    },
}

/// Names of the two listeners, as start errors and logs spell them.
pub const MAIN_LISTENER: &str = "main listener (listen)";
pub const TOOLS_LISTENER: &str = "remote-tools listener (toolRequests)";

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::DataDir { path, err } => {
                write!(f, "cannot create data directory {}: {err}", path.display())
            }
            StartError::Store(err) => write!(f, "{err}"),
            StartError::Bind {
                listener,
                addr,
                err,
            } => write!(f, "cannot listen on {addr} for the {listener}: {err}"),
            StartError::Socket { path, why } => write!(
                f,
                "cannot listen on {} for the Shard socket (shard.socket): {why}",
                path.display()
            ),
        }
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StartError::DataDir { err, .. } | StartError::Bind { err, .. } => Some(err),
            StartError::Store(err) => Some(err),
            StartError::Socket { .. } => None,
        }
    }
}

/// Options that are not configuration keys.
#[derive(Debug, Default, Clone)]
pub struct RunOptions {
    /// Serve the panel from this directory instead of the embedded copy.
    pub static_dir: Option<PathBuf>,
}

/// The running hub's shared state.
pub struct Hub {
    pub config: Config,
    pub static_dir: Option<PathBuf>,
    /// Fresh per hub process; tells clients their replay cursor is stale.
    pub epoch: String,
    /// The store handle (`hub.db`).
    pub store: Arc<Db>,
    /// The session registry (the one way to a session record).
    pub sessions: Arc<Sessions>,
    local_addr: OnceLock<SocketAddr>,
    /// The bound remote-tools listener address.
    tools_addr: OnceLock<SocketAddr>,
    /// The offline model provider's base URL, once it listens.
    mock_base_url: OnceLock<String>,
    /// Open tool sockets, bounded by `toolRequests.maxConnections`.
    tool_sockets: Arc<AtomicUsize>,
    /// Serializes plan replacements so revisions, `plan.json` and panel
    /// notes follow commit order. Never held with another hub lock.
    plan_lock: Mutex<()>,
    /// The publisher (the one way changes are announced).
    pub publisher: Arc<Publisher>,
    /// Every accepted socket, so shutdown can close them all.
    pub sockets: Arc<Sockets>,
    shutting_down: AtomicBool,
    /// Headless subagent families: fork serialization, terminal records,
    /// the recovery block.
    pub family: crate::subagents::family::Family,
    /// Pending read-only worker queries (`worker::query`).
    pub queries: Arc<crate::worker::query::Queries>,
    /// The headless subagent service's worker hooks, wired in by `run.rs`
    /// once the hub exists (none until then: a hub that serves no worker
    /// needs none).
    hooks: OnceLock<Arc<dyn WorkerHooks>>,
    /// Asks the process's main thread to run the ordinary shutdown (set by
    /// `entry.rs`; absent when the hub runs inside another program).
    shutdown_request: OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// The configuration library (`<dataDir>/configs`).
    pub library: crate::library::store::Library,
    /// The predefined skills (`<dataDir>/skills`).
    pub skills: crate::skills::store::Skills,
}

impl Hub {
    /// Creates the data directory, opens the store and restores sessions.
    pub fn open(config: Config, options: RunOptions) -> Result<Hub, StartError> {
        let data_dir = config.data_dir.clone();
        for dir in [
            data_dir.clone(),
            data_dir.join("sessions"),
            data_dir.join("subagents"),
        ] {
            fsutil::create_private_dir(&dir).map_err(|err| StartError::DataDir {
                path: dir.clone(),
                err,
            })?;
        }
        let library =
            crate::library::store::Library::open(&data_dir).map_err(|err| StartError::DataDir {
                path: data_dir.join("configs"),
                err,
            })?;
        let skills =
            crate::skills::store::Skills::open(&data_dir).map_err(|err| StartError::DataDir {
                path: data_dir.join("skills"),
                err,
            })?;
        let mut store = Store::open(&data_dir.join("hub.db")).map_err(StartError::Store)?;
        // An existing Node hub's sessions come along, once (docs/store.md).
        let pass_through = &config.launcher.docker_management_env;
        crate::store::import::run(&mut store, &data_dir, &mut |batch| {
            crate::supervisor::context::import_node(&data_dir, pass_through, batch)
        })
        .map_err(StartError::Store)?;
        let records = store.load_sessions().map_err(StartError::Store)?;
        crate::supervisor::context::sweep(&data_dir);
        let hub = Hub {
            library,
            skills,
            config,
            static_dir: options.static_dir,
            epoch: uuid::Uuid::new_v4().to_string(),
            store: Arc::new(Db::new(store)),
            sessions: Arc::new(Sessions::default()),
            local_addr: OnceLock::new(),
            tools_addr: OnceLock::new(),
            mock_base_url: OnceLock::new(),
            tool_sockets: Arc::new(AtomicUsize::new(0)),
            plan_lock: Mutex::new(()),
            publisher: Arc::new(Publisher::default()),
            sockets: Arc::new(Sockets::default()),
            shutting_down: AtomicBool::new(false),
            family: crate::subagents::family::Family::default(),
            queries: Arc::new(crate::worker::query::Queries::new()),
            hooks: OnceLock::new(),
            shutdown_request: OnceLock::new(),
        };
        for rec in records {
            if !session::is_valid_id(&rec.id) {
                log::warn!("skipping stored session with invalid id {:?}", rec.id);
                continue;
            }
            let rec = hub.settle_library_snapshot(rec);
            let s = hub.new_session(rec);
            hub.sessions.lock().insert(s);
        }
        crate::subagents::family::load(&hub);
        Ok(hub)
    }

    /// A stored session as its files leave it after a crash: unfinished
    /// temporary files are removed, a configuration snapshot replacement
    /// cut short is settled, and the spec names the pair the snapshot on
    /// disk was taken from.
    fn settle_library_snapshot(&self, mut rec: SessionRecord) -> SessionRecord {
        let dir = self.session_dir(&rec.id);
        // What a write cut short left: the temporary siblings of the files
        // only the hub writes (the worker writes its own beside them).
        let hub_files =
            |name: &str| name == "plan.json" || name == crate::subagents::family::CONVERSATION_FILE;
        for (folder, owned) in [
            (dir.clone(), &hub_files as &dyn Fn(&str) -> bool),
            (dir.join("config"), &|_: &str| true),
        ] {
            match fsutil::sweep_temp(&folder, owned) {
                Ok(0) => {}
                Ok(n) => log::info!(
                    "session {}: removed {n} unfinished temporary file(s) in {}",
                    rec.id,
                    folder.display()
                ),
                Err(err) => log::warn!("session {}: {}: {err}", rec.id, folder.display()),
            }
        }
        if let Err(err) = crate::library::store::settle_snapshot(&dir) {
            log::warn!(
                "session {}: configuration snapshot not settled: {err}",
                rec.id
            );
        }
        if let Some(spec) =
            crate::library::store::spec_with_snapshot_pair(&rec.spec, &dir.join("config"))
        {
            log::warn!(
                "session {}: its spec named another configuration pair than its snapshot; \
                 it now names the snapshot's",
                rec.id
            );
            if let Err(err) = self.store.lock().update_session_spec(&rec.id, &spec) {
                log::warn!("session {}: spec not stored: {err}", rec.id);
            }
            rec.spec = spec;
        }
        rec
    }

    /// Binds the main listener (resolving `localhost` and bracketed IPv6).
    pub fn bind(&self) -> Result<TcpListener, StartError> {
        let (listener, local) = bind_host(
            &self.config.listen.host,
            self.config.listen.port,
            MAIN_LISTENER,
        )?;
        let _ = self.local_addr.set(local);
        Ok(listener)
    }

    /// Binds the remote-tools listener on `toolRequests.host` (empty:
    /// `listen.host`) and `toolRequests.port`.
    pub fn bind_tools(&self) -> Result<TcpListener, StartError> {
        let (listener, local) = bind_host(
            self.config.tools_host(),
            self.config.tool_requests.port,
            TOOLS_LISTENER,
        )?;
        let _ = self.tools_addr.set(local);
        Ok(listener)
    }

    /// The bound remote-tools listener address (after [`Hub::bind_tools`]).
    pub fn tools_addr(&self) -> Option<SocketAddr> {
        self.tools_addr.get().copied()
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

    /// The bound main listener address (after [`Hub::bind`]).
    pub fn local_addr(&self) -> SocketAddr {
        *self
            .local_addr
            .get()
            .expect("local_addr read before the listener was bound")
    }

    /// A session object with its transcript and events file, from a record.
    pub(crate) fn new_session(&self, rec: SessionRecord) -> Session {
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
        let headless = rec.kind == crate::subagents::KIND;
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
        s = s
            .with_kind(rec.kind)
            .with_events_file(events_file)
            .with_plan(plan);
        s
    }

    /// Normalizes a spec against this hub's defaults.
    pub fn normalize_spec(&self, spec: &Value) -> Result<Value, session::SpecError> {
        session::normalize_spec(Some(spec), &self.spec_defaults())
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

    /// The port workers are told for remote tools: the port the tools
    /// listener is actually bound to (the configured one before binding).
    /// The addresses workers dial: the main listener, and the tools
    /// listener (bound elsewhere when `toolRequests.host` says so).
    pub fn worker_addrs(&self) -> (SocketAddr, SocketAddr) {
        let main = self.local_addr();
        let tools = self
            .tools_addr()
            .unwrap_or_else(|| SocketAddr::new(main.ip(), self.tools_port()));
        (main, tools)
    }

    pub fn tools_port(&self) -> u16 {
        self.tools_addr
            .get()
            .map_or(self.config.tool_requests.port, SocketAddr::port)
    }

    /// Sessions whose worker process is starting, running or stopping.
    pub fn active_worker_sessions(&self) -> Vec<String> {
        self.sessions
            .lock()
            .list()
            .into_iter()
            .filter(|s| s.process().is_some_and(|p| p.state.is_active()))
            .map(|s| s.id().to_string())
            .collect()
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
        self.sessions.lock().get(id).map(|s| s.token().to_string())
    }

    /// Sets how a client's shutdown request reaches the main thread.
    pub fn set_shutdown_request(&self, request: Box<dyn Fn() + Send + Sync>) {
        let _ = self.shutdown_request.set(request);
    }

    /// Whether this process offers a shutdown request.
    pub fn can_request_shutdown(&self) -> bool {
        self.shutdown_request.get().is_some()
    }

    /// Asks for the ordinary shutdown (`Running::stop` on the main
    /// thread). False when this process offers no way to.
    pub fn request_shutdown(&self) -> bool {
        match self.shutdown_request.get() {
            Some(request) => {
                request();
                true
            }
            None => false,
        }
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    /// The handles and limits a worker's event socket works with.
    pub fn worker_events(&self) -> crate::worker::events::Events {
        crate::worker::events::Events {
            sessions: self.sessions.clone(),
            publisher: self.publisher.clone(),
            sockets: self.sockets.clone(),
            queries: self.queries.clone(),
            hooks: self.hooks(),
            ping_interval_ms: self.config.limits.ping_interval_ms,
            transcript_bytes: self.config.limits.transcript_bytes,
        }
    }

    /// The handles and timings the confirmation sockets work with.
    pub fn confirmations(&self) -> crate::worker::confirm::Confirmations {
        crate::worker::confirm::Confirmations {
            sessions: self.sessions.clone(),
            publisher: self.publisher.clone(),
            sockets: self.sockets.clone(),
            timeout: std::time::Duration::from_millis(self.config.worker.confirmation_timeout_ms),
            hold: std::time::Duration::from_millis(self.config.limits.confirm_identity_hold_ms),
        }
    }

    /// Adds a front-end subscriber to the publisher: it hears every later
    /// note with the hub at hand (held weakly: a subscriber does not keep
    /// the hub alive).
    pub fn subscribe(self: &Arc<Self>, subscriber: Arc<dyn Subscriber>) {
        let hub = Arc::downgrade(self);
        self.publisher.subscribe(Box::new(move |note| {
            if let Some(hub) = hub.upgrade() {
                subscriber.publish(&hub, note);
            }
        }));
    }

    /// The `hub` object of the panel's `welcome`.
    pub fn panel_info(&self) -> Value {
        self.meta()
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

    /// The stored plan of session `id` (revision 0, empty, no timestamp
    /// when none was ever written).
    pub fn read_plan(&self, id: &str) -> Result<PlanRecord, HubError> {
        self.store.lock().get_plan(id).map_err(HubError::Store)
    }

    /// Replaces the plan of session `id` with `markdown` (already
    /// validated and normalized by the caller). Identical text changes
    /// nothing. Otherwise the revision is bumped and committed to the store
    /// first; then `plan.json` is mirrored (best effort: the store is the
    /// authority) and panels are notified. The caller answers the worker
    /// after this returns, so the commit precedes the reply.
    pub fn replace_plan(&self, id: &str, markdown: &str) -> Result<PlanChange, HubError> {
        let _publishing = self.plan_lock.lock().unwrap_or_else(|p| p.into_inner());
        let current = self.read_plan(id)?;
        if current.markdown == markdown {
            return Ok(PlanChange {
                plan: current,
                changed: false,
            });
        }
        let next = PlanRecord {
            markdown: markdown.to_string(),
            revision: current.revision + 1,
            updated_at: Some(time::now_rfc3339()),
        };
        self.store
            .lock()
            .put_plan(id, &next)
            .map_err(HubError::Store)?;
        let value = crate::wire::worker::plan::read_result(&next);
        let path = self.session_dir(id).join("plan.json");
        let text = serde_json::to_vec_pretty(&value).unwrap_or_default();
        if let Err(err) = fsutil::write_private_atomic(&path, &text) {
            log::warn!(
                "session {id}: plan revision {} stored, but {} not written: {err}",
                next.revision,
                path.display()
            );
        }
        log::info!("session {id}: plan revision {}", next.revision);
        // Published to the cache before the broadcast, under the lock that
        // subscriptions take: a subscriber sees this revision either in its
        // `subscribed` frame or in the `plan` message after it.
        self.sessions.with(id, |s| s.publish_plan(next.clone()));
        self.publisher.notify(Note::Plan {
            session: id.to_string(),
            plan: next.clone(),
        });
        Ok(PlanChange {
            plan: next,
            changed: true,
        })
    }

    /// Transcript entries after `since`, at most `limit`, plus the latest
    /// sequence. `None` for an unknown session.
    pub fn events_since(&self, id: &str, since: u64, limit: usize) -> Option<(u64, Vec<Arc<str>>)> {
        self.sessions.with(id, |s| {
            let entries = s.transcript().since(since, limit);
            (
                s.transcript().latest(),
                entries.into_iter().map(|e| e.json).collect(),
            )
        })
    }

    /// `<dataDir>/sessions/<id>`, or `<dataDir>/subagents/<id>` for a
    /// headless child (the generated namespace).
    pub fn session_dir(&self, id: &str) -> PathBuf {
        let root = if crate::session::headless::is_child_id(id) {
            "subagents"
        } else {
            "sessions"
        };
        self.config.data_dir.join(root).join(id)
    }

    /// `/api/meta`: what a client needs before it authenticates. No paths,
    /// no credentials.
    pub fn meta(&self) -> Value {
        let addr = self.local_addr();
        json!({
            "name": "simplex-hub",
            "version": env!("CARGO_PKG_VERSION"),
            "protocol": {"name": capabilities::PROTOCOL_NAME, "version": capabilities::PROTOCOL_VERSION},
            "worker_protocol": capabilities::WORKER_PROTOCOL,
            "capabilities": capabilities::IMPLEMENTED,
            "transcript_epoch": self.epoch,
            "listen": {"host": addr.ip().to_string(), "port": addr.port()},
            "launcher": {"kind": self.config.launcher.kind, "owns_config": false},
            "provider_profiles": self.config.provider_profiles.keys().collect::<Vec<_>>(),
            // The same list under this hub's earlier name, for its older clients.
            "providers": self.config.provider_profiles.keys().collect::<Vec<_>>(),
            "mock": {"enabled": self.config.mock.enabled},
            "force_kill_process_group": self.config.force_kill_process_group,
            "auth": {"token_required": !self.config.panel.token.is_empty()},
        })
    }

    fn spec_defaults(&self) -> SpecDefaults {
        SpecDefaults::from_config(&self.config)
    }

    pub fn describe_sessions(&self) -> Vec<Value> {
        self.sessions
            .lock()
            .list()
            .into_iter()
            .map(Session::describe)
            .collect()
    }

    /// The current description of one open prompt (64 KiB preview).
    pub fn describe_prompt(&self, session: &str, confirmation_id: &str) -> Option<Value> {
        self.sessions
            .with(session, |s| {
                s.prompt(confirmation_id)
                    .map(|p| s.describe_prompt(p, crate::session::PROMPT_PREVIEW_BYTES))
            })
            .flatten()
    }

    pub fn describe_session(&self, id: &str) -> Option<Value> {
        self.sessions.lock().get(id).map(Session::describe)
    }

    /// `None` for an unknown session, else whether it is headless (one
    /// registry look for the command layer's checks).
    pub fn session_kind(&self, id: &str) -> Option<bool> {
        self.sessions
            .lock()
            .get(id)
            .map(|s| s.is_headless() || s.kind() == crate::subagents::KIND)
    }

    /// Creates a session: validates, records it durably, creates its
    /// directory, runs `prepare` on it (a configuration snapshot), then
    /// makes it visible. A failed `prepare` undoes the creation.
    pub fn create_session_with<E: From<HubError>>(
        &self,
        id: &str,
        spec: Option<&Value>,
        prepare: impl FnOnce(&Path) -> Result<(), E>,
    ) -> Result<Value, E> {
        session::check_new_id(id).map_err(|e| HubError::InvalidSession(e.to_string()))?;
        let spec = session::normalize_spec(spec, &self.spec_defaults())
            .map_err(|e| HubError::InvalidSession(e.to_string()))?;
        if self.sessions.lock().contains(id) {
            return Err(HubError::SessionExists(id.into()).into());
        }
        let record = SessionRecord {
            id: id.into(),
            created_at: time::now_rfc3339(),
            spec,
            token: new_token(),
            lifecycle_id: uuid::Uuid::new_v4().to_string(),
            kind: "ordinary".into(),
        };
        match self.store.lock().insert_session(&record) {
            Ok(()) => {}
            Err(StoreError::SessionExists { .. }) => {
                return Err(HubError::SessionExists(id.into()).into())
            }
            Err(err) => return Err(HubError::Store(err).into()),
        }
        let dir = self.session_dir(id);
        let existed = std::fs::symlink_metadata(&dir).is_ok();
        if let Err(err) = fsutil::create_private_dir(&dir) {
            let _ = self.store.lock().delete_session(id);
            return Err(HubError::Files { path: dir, err }.into());
        }
        if let Err(err) = prepare(&dir) {
            let _ = self.store.lock().delete_session(id);
            if !existed {
                let _ = remove_session_dir(&dir);
            }
            return Err(err);
        }
        let session = self.new_session(record);
        let described = session.describe();
        self.sessions.lock().insert(session);
        log::info!("session {id} created");
        Ok(described)
    }

    /// Deletes a session that is not busy: the store record, then the whole
    /// session directory.
    pub fn delete_session(&self, id: &str) -> Result<(), HubError> {
        {
            let mut sessions = self.sessions.lock();
            let session = sessions
                .get_mut(id)
                .ok_or_else(|| HubError::UnknownSession(id.into()))?;
            session
                .begin_removal()
                .map_err(|reason| HubError::SessionBusy {
                    id: id.into(),
                    reason,
                })?;
        }
        let result = self
            .store
            .lock()
            .delete_session(id)
            .map_err(HubError::Store);
        if let Err(err) = result {
            if let Some(s) = self.sessions.lock().get_mut(id) {
                s.cancel_removal();
            }
            return Err(err);
        }
        // Taken out of the registry first: the files are closed with no
        // lock held, before the directory goes.
        let removed = self.sessions.lock().remove(id);
        if let Some(mut removed) = removed {
            let log_file = removed.take_log_file();
            for file in removed.events_file().into_iter().chain(log_file.as_ref()) {
                file.close(std::time::Duration::from_millis(200));
            }
        }
        let dir = self.session_dir(id);
        if let Err(err) = remove_session_dir(&dir) {
            // The session is gone from the store; a leftover directory is
            // reported, and a later create of the same id starts over it.
            log::warn!("session {id} removed, but {} remains: {err}", dir.display());
        }
        log::info!("session {id} deleted");
        Ok(())
    }

    /// Closes every worker and confirmation socket (prompts are retired by
    /// their threads), flushes the events files and the worker logs with
    /// a one-second deadline for all, then checkpoints and closes the
    /// store.
    pub fn shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
        self.sockets.close_all();
        let files: Vec<Arc<BoundedWriter>> = self
            .sessions
            .lock()
            .list()
            .into_iter()
            .flat_map(|s| [s.events_file().cloned(), s.log_file().cloned()])
            .flatten()
            .collect();
        let deadline = std::time::Instant::now() + bounded_writer::CLOSE_DEADLINE;
        for file in files {
            file.close(deadline.saturating_duration_since(std::time::Instant::now()));
        }
        // Connection threads may still hold the hub; the store is closed
        // here, not when the last of them lets go.
        if let Err(err) = self.store.lock().close() {
            log::warn!("the store did not close cleanly: {err}");
        }
        log::info!("hub stopped");
    }
}

/// The outcome of [`Hub::replace_plan`].
#[derive(Debug, Clone, PartialEq)]
pub struct PlanChange {
    pub plan: PlanRecord,
    /// False when the text was identical (nothing was written).
    pub changed: bool,
}

/// One reserved tool socket slot (see [`Hub::try_tool_slot`]).
#[derive(Debug)]
pub struct ToolSlot(Arc<AtomicUsize>);

impl Drop for ToolSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Binds `host:port` (resolving `localhost` and bracketed IPv6); returns
/// the listener and its bound address.
fn bind_host(
    host: &str,
    port: u16,
    listener: &'static str,
) -> Result<(TcpListener, SocketAddr), StartError> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addr = format!("{host}:{port}");
    let bind_err = |err| StartError::Bind {
        listener,
        addr: addr.clone(),
        err,
    };
    let candidates: Vec<SocketAddr> = (bare, port).to_socket_addrs().map_err(bind_err)?.collect();
    let mut last = None;
    for candidate in candidates {
        match TcpListener::bind(candidate) {
            Ok(bound) => {
                let local = bound.local_addr().map_err(bind_err)?;
                return Ok((bound, local));
            }
            Err(err) => last = Some(err),
        }
    }
    Err(bind_err(last.unwrap_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::AddrNotAvailable, "no address")
    })))
}

/// Removes a session directory without following a symlink in its place.
pub(crate) fn remove_session_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.file_type().is_symlink() => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "refusing to delete through a symlink",
        )),
        Ok(_) => std::fs::remove_dir_all(dir),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err),
    }
}

/// A fresh per-session worker token: 256 random bits as hex.
pub(crate) fn new_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testkit::TempDir;

    /// A hub on `tmp` with `toolRequests` as given (listen port 0).
    fn open_hub(tmp: &TempDir, tool_requests: Value) -> Hub {
        let text = json!({
            "dataDir": tmp.path().display().to_string(),
            "listen": {"port": 0},
            "toolRequests": tool_requests,
        })
        .to_string();
        Hub::open(crate::config::test_config(&text), RunOptions::default()).unwrap()
    }

    #[test]
    fn plans_bump_only_on_change_and_are_mirrored() {
        let tmp = TempDir::new("hub-plan");
        let hub = open_hub(&tmp, json!({}));
        hub.create_session_with("p", None, |_| Ok::<(), HubError>(()))
            .unwrap();
        assert_eq!(hub.read_plan("p").unwrap(), PlanRecord::default());
        let first = hub.replace_plan("p", "# one").unwrap();
        assert!(first.changed);
        assert_eq!(first.plan.revision, 1);
        assert!(first.plan.updated_at.is_some());
        let same = hub.replace_plan("p", "# one").unwrap();
        assert_eq!(
            same,
            PlanChange {
                plan: first.plan.clone(),
                changed: false
            }
        );
        let cleared = hub.replace_plan("p", "").unwrap();
        assert_eq!((cleared.plan.revision, cleared.changed), (2, true));
        assert_eq!(
            hub.sessions.with("p", |s| s.plan().clone()),
            Some(cleared.plan.clone())
        );
        let file = hub.session_dir("p").join("plan.json");
        let mirrored: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(
            mirrored,
            crate::wire::worker::plan::read_result(&cleared.plan)
        );
        // A session that does not exist cannot get a plan.
        assert!(matches!(
            hub.replace_plan("nope", "x"),
            Err(HubError::Store(_))
        ));
    }

    #[test]
    fn tool_slots_are_capped_and_freed_on_drop() {
        let tmp = TempDir::new("hub-slots");
        let hub = open_hub(&tmp, json!({"maxConnections": 2}));
        let a = hub.try_tool_slot().unwrap();
        let _b = hub.try_tool_slot().unwrap();
        assert!(hub.try_tool_slot().is_none());
        drop(a);
        assert!(hub.try_tool_slot().is_some());
    }

    #[test]
    fn the_tools_port_is_the_bound_one() {
        let tmp = TempDir::new("hub-tools-port");
        let hub = open_hub(&tmp, json!({"port": 0}));
        assert_eq!(hub.tools_port(), 0);
        let listener = hub.bind_tools().unwrap();
        let bound = listener.local_addr().unwrap().port();
        assert_ne!(bound, 0);
        assert_eq!(hub.tools_port(), bound);
        assert_eq!(hub.tools_addr().map(|a| a.port()), Some(bound));
        // A port in use fails the bind and names the listener.
        let other_dir = TempDir::new("hub-tools-port-2");
        let other = open_hub(&other_dir, json!({ "port": bound }));
        let err = other.bind_tools().unwrap_err().to_string();
        assert!(err.contains("remote-tools listener"), "{err}");
    }
}
