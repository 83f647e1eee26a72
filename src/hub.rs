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
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use serde_json::{json, Value};

use crate::capabilities;
use crate::config::Config;
use crate::services::Services;
use crate::session::{self, Note};
use crate::store::{SessionRecord, Store, StoreError};
use crate::util::fsutil;

/// A front-end that pushes changes to its clients (the panel socket, and
/// the Shard transports after it). `publish` runs under the hub's publish
/// lock, on the thread that made the change: it reads what it needs
/// through the hub, queues frames without blocking, and returns.
pub trait Subscriber: Send + Sync {
    fn publish(&self, hub: &Hub, note: &Note);
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

/// The running hub: the shared handles ([`Services`], reached through
/// `Deref`), the services layered on them, and what only the front-ends
/// need.
pub struct Hub {
    /// The shared handles (see `services`).
    pub services: Arc<Services>,
    pub static_dir: Option<PathBuf>,
    /// Fresh per hub process; tells clients their replay cursor is stale.
    pub epoch: String,
    /// The headless subagent service (families, their recovery).
    pub subagents: Arc<crate::subagents::Service>,
    /// Pending read-only worker queries (`worker::query`).
    pub queries: Arc<crate::worker::query::Queries>,
    /// Asks the process's main thread to run the ordinary shutdown (set by
    /// `entry.rs`; absent when the hub runs inside another program).
    shutdown_request: OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// The configuration library (`<dataDir>/configs`).
    pub library: crate::library::store::Library,
    /// The predefined skills (`<dataDir>/skills`).
    pub skills: crate::skills::store::Skills,
}

impl std::ops::Deref for Hub {
    type Target = Services;

    fn deref(&self) -> &Services {
        &self.services
    }
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
        let grants = store.load_grants().map_err(StartError::Store)?;
        crate::supervisor::context::sweep(&data_dir);
        let services = Arc::new(Services::new(config, store));
        let queries = Arc::new(crate::worker::query::Queries::new());
        let hub = Hub {
            library,
            skills,
            subagents: Arc::new(crate::subagents::Service::new(
                services.clone(),
                queries.clone(),
            )),
            services,
            static_dir: options.static_dir,
            epoch: uuid::Uuid::new_v4().to_string(),
            queries,
            shutdown_request: OnceLock::new(),
        };
        for rec in records {
            if !session::is_valid_id(&rec.id) {
                log::warn!("skipping stored session with invalid id {:?}", rec.id);
                continue;
            }
            let rec = hub.settle_library_snapshot(rec);
            let s = hub.new_session(rec);
            hub.sessions.insert(s);
        }
        for g in grants {
            let grant = session::Grant {
                id: g.id,
                tool: g.tool,
                arguments: g.arguments,
                created_at: g.created_at,
            };
            hub.sessions.with(&g.session_id, |s| s.add_grant(grant));
        }
        crate::subagents::family::load(&hub.subagents);
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
        self.services.set_local_addr(local);
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
        self.services.set_tools_addr(local);
        Ok(listener)
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

    /// Closes every worker and confirmation socket (prompts are retired by
    /// their threads), flushes the events files and the worker logs with
    /// a one-second deadline for all, then checkpoints and closes the
    /// store.
    pub fn shutdown(&self) {
        self.services.begin_shutdown();
        self.sockets.close_all();
        self.services.close_session_files();
        // Connection threads may still hold the hub; the store is closed
        // here, not when the last of them lets go.
        if let Err(err) = self.store.lock().close() {
            log::warn!("the store did not close cleanly: {err}");
        }
        log::info!("hub stopped");
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
