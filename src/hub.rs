//! The hub: owns the configuration, the store, the session registry and
//! the transcript epoch; starts the listeners and shuts everything down in
//! a fixed order. HTTP and (later) panel handlers call its methods.
//!
//! Lock rule: `sessions` is locked once per unit of work and never across
//! I/O; the store's mutex guards only the SQLite connection.

use std::fmt;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use serde_json::{json, Value};

use crate::capabilities;
use crate::config::Config;
use crate::session::{self, Registry, Session, SpecDefaults};
use crate::store::{SessionRecord, Store, StoreError};
use crate::util::{fsutil, time};

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
    /// The store or the session directory could not be written.
    Storage(String),
}

impl fmt::Display for HubError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HubError::InvalidSession(msg) => f.write_str(msg),
            HubError::SessionExists(id) => write!(f, "session {id:?} already exists"),
            HubError::UnknownSession(id) => write!(f, "no session {id:?}"),
            HubError::SessionBusy { id, reason } => write!(f, "session {id:?} is busy: {reason}"),
            HubError::Storage(msg) => write!(f, "storage failure: {msg}"),
        }
    }
}

impl std::error::Error for HubError {}

/// Failures that stop the hub from starting.
#[derive(Debug)]
pub enum StartError {
    DataDir { path: PathBuf, err: std::io::Error },
    Store(StoreError),
    Bind { addr: String, err: std::io::Error },
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::DataDir { path, err } => {
                write!(f, "cannot create data directory {}: {err}", path.display())
            }
            StartError::Store(err) => write!(f, "{err}"),
            StartError::Bind { addr, err } => write!(f, "cannot listen on {addr}: {err}"),
        }
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StartError::DataDir { err, .. } | StartError::Bind { err, .. } => Some(err),
            StartError::Store(err) => Some(err),
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
    store: Mutex<Store>,
    sessions: Mutex<Registry>,
    local_addr: OnceLock<SocketAddr>,
}

impl Hub {
    /// Creates the data directory, opens the store and restores sessions.
    pub fn open(config: Config, options: RunOptions) -> Result<Hub, StartError> {
        let data_dir = config.data_dir.clone();
        for dir in [data_dir.clone(), data_dir.join("sessions")] {
            fsutil::create_private_dir(&dir).map_err(|err| StartError::DataDir {
                path: dir.clone(),
                err,
            })?;
        }
        let store = Store::open(&data_dir.join("hub.db")).map_err(StartError::Store)?;
        let mut registry = Registry::default();
        for rec in store.load_sessions().map_err(StartError::Store)? {
            if !session::is_valid_id(&rec.id) {
                log::warn!("skipping stored session with invalid id {:?}", rec.id);
                continue;
            }
            let mut s = Session::new(
                rec.id,
                rec.created_at,
                rec.spec,
                rec.token,
                rec.lifecycle_id,
            );
            s.kind = rec.kind;
            registry.insert(s);
        }
        Ok(Hub {
            config,
            static_dir: options.static_dir,
            epoch: uuid::Uuid::new_v4().to_string(),
            store: Mutex::new(store),
            sessions: Mutex::new(registry),
            local_addr: OnceLock::new(),
        })
    }

    /// Binds the main listener (resolving `localhost` and bracketed IPv6).
    pub fn bind(&self) -> Result<TcpListener, StartError> {
        let host = self
            .config
            .listen
            .host
            .trim_start_matches('[')
            .trim_end_matches(']');
        let addr = format!("{}:{}", self.config.listen.host, self.config.listen.port);
        let bind_err = |err| StartError::Bind {
            addr: addr.clone(),
            err,
        };
        let candidates: Vec<SocketAddr> = (host, self.config.listen.port)
            .to_socket_addrs()
            .map_err(bind_err)?
            .collect();
        let mut last = None;
        for candidate in candidates {
            match TcpListener::bind(candidate) {
                Ok(listener) => {
                    let local = listener.local_addr().map_err(bind_err)?;
                    let _ = self.local_addr.set(local);
                    return Ok(listener);
                }
                Err(err) => last = Some(err),
            }
        }
        Err(bind_err(last.unwrap_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::AddrNotAvailable, "no address")
        })))
    }

    /// The bound main listener address (after [`Hub::bind`]).
    pub fn local_addr(&self) -> SocketAddr {
        *self
            .local_addr
            .get()
            .expect("local_addr read before the listener was bound")
    }

    fn sessions(&self) -> MutexGuard<'_, Registry> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `<dataDir>/sessions/<id>`.
    pub fn session_dir(&self, id: &str) -> PathBuf {
        self.config.data_dir.join("sessions").join(id)
    }

    /// `/api/meta`: what a client needs before it authenticates. No paths,
    /// no credentials.
    pub fn meta(&self) -> Value {
        let addr = self.local_addr();
        json!({
            "name": "simplex-hub",
            "version": env!("CARGO_PKG_VERSION"),
            "protocol": {"name": capabilities::PROTOCOL_NAME, "version": capabilities::PROTOCOL_VERSION},
            "capabilities": capabilities::IMPLEMENTED,
            "transcript_epoch": self.epoch,
            "listen": {"host": addr.ip().to_string(), "port": addr.port()},
            "launcher": {"kind": self.config.launcher.kind, "owns_config": false},
            "providers": self.config.provider_profiles.keys().collect::<Vec<_>>(),
            "mock": {"enabled": self.config.mock.enabled},
            "force_kill_process_group": self.config.force_kill_process_group,
            "auth": {"token_required": !self.config.panel.token.is_empty()},
        })
    }

    fn spec_defaults(&self) -> SpecDefaults {
        let c = &self.config;
        let profiles: Vec<String> = c.provider_profiles.keys().cloned().collect();
        let provider = if c.mock.enabled && profiles.contains(&c.mock.profile) {
            c.mock.profile.clone()
        } else {
            profiles.first().cloned().unwrap_or_default()
        };
        SpecDefaults {
            provider,
            profiles,
            threads: c.worker.threads,
            max_exchanges: c.worker.max_exchanges,
            system_prompt_file: c.worker.system_prompt_file.clone(),
            workspace: c.worker.environment.workspace.clone(),
            platform: c.worker.environment.platform.clone(),
            software: c.worker.environment.software.clone(),
            persistence_enabled: c.worker.persistence.enabled,
            persistence_readable: c.worker.persistence.readable,
        }
    }

    pub fn describe_sessions(&self) -> Vec<Value> {
        self.sessions()
            .list()
            .into_iter()
            .map(Session::describe)
            .collect()
    }

    pub fn describe_session(&self, id: &str) -> Option<Value> {
        self.sessions().get(id).map(Session::describe)
    }

    /// Creates a session: validates, records it durably, creates its
    /// directory, then makes it visible.
    pub fn create_session(&self, id: &str, spec: Option<&Value>) -> Result<Value, HubError> {
        session::check_new_id(id).map_err(|e| HubError::InvalidSession(e.to_string()))?;
        let spec = session::normalize_spec(spec, &self.spec_defaults())
            .map_err(|e| HubError::InvalidSession(e.to_string()))?;
        if self.sessions().contains(id) {
            return Err(HubError::SessionExists(id.into()));
        }
        let record = SessionRecord {
            id: id.into(),
            created_at: time::now_rfc3339(),
            spec,
            token: new_token(),
            lifecycle_id: uuid::Uuid::new_v4().to_string(),
            kind: "ordinary".into(),
        };
        match self.store().insert_session(&record) {
            Ok(()) => {}
            Err(StoreError::SessionExists { .. }) => {
                return Err(HubError::SessionExists(id.into()))
            }
            Err(err) => return Err(HubError::Storage(err.to_string())),
        }
        let dir = self.session_dir(id);
        if let Err(err) = fsutil::create_private_dir(&dir) {
            let _ = self.store().delete_session(id);
            return Err(HubError::Storage(format!(
                "cannot create {}: {err}",
                dir.display()
            )));
        }
        let session = Session::new(
            record.id,
            record.created_at,
            record.spec,
            record.token,
            record.lifecycle_id,
        );
        let described = session.describe();
        self.sessions().insert(session);
        log::info!("session {id} created");
        Ok(described)
    }

    /// Deletes a session that is not busy: the store record, then the whole
    /// session directory.
    pub fn delete_session(&self, id: &str) -> Result<(), HubError> {
        {
            let mut sessions = self.sessions();
            let session = sessions
                .get_mut(id)
                .ok_or_else(|| HubError::UnknownSession(id.into()))?;
            if let Some(reason) = session.busy_reason() {
                return Err(HubError::SessionBusy {
                    id: id.into(),
                    reason,
                });
            }
            session.removing = true;
        }
        let result = self
            .store()
            .delete_session(id)
            .map_err(|err| HubError::Storage(err.to_string()));
        if let Err(err) = result {
            if let Some(s) = self.sessions().get_mut(id) {
                s.removing = false;
            }
            return Err(err);
        }
        self.sessions().remove(id);
        let dir = self.session_dir(id);
        if let Err(err) = remove_session_dir(&dir) {
            // The session is gone from the store; a leftover directory is
            // reported, and a later create of the same id starts over it.
            log::warn!("session {id} removed, but {} remains: {err}", dir.display());
        }
        log::info!("session {id} deleted");
        Ok(())
    }

    /// Last step of shutdown: the store is checkpointed and closed when the
    /// hub is dropped; nothing else is pending in this build.
    pub fn shutdown(&self) {
        log::info!("hub stopped");
    }
}

/// Removes a session directory without following a symlink in its place.
fn remove_session_dir(dir: &Path) -> std::io::Result<()> {
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
fn new_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// A started hub: the shared state and the listener handle.
pub struct Running {
    pub hub: Arc<Hub>,
    server: tiny_http::ServerHandle,
}

impl Running {
    /// Opens, binds and starts serving.
    pub fn start(config: Config, options: RunOptions) -> Result<Running, StartError> {
        let hub = Arc::new(Hub::open(config, options)?);
        let listener = hub.bind()?;
        let server = crate::http::start(hub.clone(), listener).map_err(|err| StartError::Bind {
            addr: crate::http::display_addr(&hub.local_addr()),
            err,
        })?;
        Ok(Running { hub, server })
    }

    /// The documented shutdown order: stop accepting, then (as later
    /// features land) stop workers and close sockets, then close the store.
    pub fn stop(self) {
        self.server.shutdown();
        self.hub.shutdown();
    }
}
