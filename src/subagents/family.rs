//! Headless families at run time: clean-fork (quota, ownership files, the
//! durable record, scheduled startup), the startup deadline, stopping with
//! cascade to every descendant, cleanup of a child's whole directory once
//! its process is confirmed gone (bounded automatic retries), restoring
//! families after a hub restart, and the short-lived terminal records a
//! parent can still receive after its child is gone.
//!
//! Locks: the session registry lock is never held across store writes,
//! file I/O or process signals; `Family::fork` serializes quota decisions.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::child::{self, Child, Lifecycle, ParentRef, MAX_CLEANUP_ATTEMPTS};
use super::{Refusal, KIND};
use crate::hub::{Hub, Note};
use crate::store::{ReceiptRecord, SessionRecord, SubagentRecord};
use crate::supervisor::control::{self, StopMode};
use crate::supervisor::render;
use crate::util::{fsutil, time};

/// Terminal records kept for parents, at most.
pub const MAX_TERMINAL: usize = 128;

/// Delays before the second and third automatic cleanup attempts.
pub const RETRY_DELAYS_MS: [u64; 2] = [10_000, 20_000];

/// How often pending cleanups are looked at.
const RETRY_TICK: Duration = Duration::from_secs(5);

/// How often the startup watcher looks at a starting child.
const STARTUP_POLL: Duration = Duration::from_millis(100);

/// How long hub shutdown waits for child cleanups running elsewhere, and
/// how often it looks.
const SHUTDOWN_SETTLE: Duration = Duration::from_secs(10);
const SETTLE_POLL: Duration = Duration::from_millis(10);

/// Stack of the short-lived subagent threads (launch, startup watch,
/// conversation write, history refresh, cleanup ticker).
const THREAD_STACK: usize = 256 * 1024;

/// Runs `work` on a new named thread; `Err` when none could start.
fn spawn_thread(name: &str, work: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(name.into())
        .stack_size(THREAD_STACK)
        .spawn(work)
        .map(drop)
}

/// Startup snapshot files captured at every supervised launch.
pub const STARTUP_WORKER: &str = "startup-worker.yaml";
pub const STARTUP_LAUNCH: &str = "startup-launch.jsonc";

/// What a parent can still learn about a child that is gone.
#[derive(Debug, Clone)]
pub struct Terminal {
    pub id: String,
    pub parent: ParentRef,
    pub reason: Option<String>,
    pub outcomes: Vec<Value>,
    pub removed_ms: u64,
}

/// Family-wide state held by the hub.
#[derive(Default)]
pub struct Family {
    /// Serializes forks: quota is decided and reserved under it.
    fork: Mutex<()>,
    terminal: Mutex<VecDeque<Terminal>>,
    /// Why new forks and launches are refused (unsafe ownership storage).
    blocked: Mutex<Option<String>>,
    /// The cleanup retry ticker is running.
    ticker: Mutex<bool>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Family {
    /// Why forks are blocked, if they are.
    pub fn blocked(&self) -> Option<String> {
        lock(&self.blocked).clone()
    }

    fn block(&self, reason: String) {
        log::error!("subagents: {reason}; new forks are refused until repaired");
        lock(&self.blocked).get_or_insert(reason);
    }

    /// Keeps a terminal record for `ttl_ms`, at most [`MAX_TERMINAL`].
    fn remember(&self, record: Terminal) {
        let mut list = lock(&self.terminal);
        list.retain(|t| t.id != record.id);
        while list.len() >= MAX_TERMINAL {
            list.pop_front();
        }
        list.push_back(record);
    }

    /// Terminal records not older than `ttl_ms`, oldest first.
    pub fn terminals(&self, now_ms: u64, ttl_ms: u64) -> Vec<Terminal> {
        let mut list = lock(&self.terminal);
        list.retain(|t| now_ms.saturating_sub(t.removed_ms) <= ttl_ms);
        list.iter().cloned().collect()
    }
}

/// The caller of a subagent route, as verified by the tools socket.
#[derive(Debug, Clone)]
pub struct Caller {
    pub session_id: String,
    pub worker_id: String,
    pub run_id: String,
    pub request_id: String,
}

/// Restores children from the store into their (already loaded) sessions.
/// Unreadable ownership records block new forks; their data stays.
pub fn load(hub: &Hub) {
    let records = match hub.store().load_subagents() {
        Ok(records) => records,
        Err(err) => {
            hub.family
                .block(format!("subagent records cannot be read: {err}"));
            return;
        }
    };
    let bytes = hub.config.subagents.conversation_bytes;
    for rec in records {
        match Child::from_stored(&rec.meta, &rec.outcomes, bytes) {
            Ok(mut child) => {
                if let Some(conversation) = load_conversation(hub, &rec.id) {
                    child.conversation = conversation;
                }
                // Delivery that was not confirmed before the restart is
                // unknown; it is never resent.
                let now = time::now_rfc3339();
                for o in child.outcomes.iter_mut() {
                    if o.state == "intent" || o.state == "sent" {
                        o.state = "unknown".into();
                        o.updated_at = now.clone();
                        child.outcomes_unpersisted = true;
                    }
                }
                let attached = hub.with_session(&rec.id, |s| {
                    s.subagent = Some(Box::new(child));
                });
                if attached.is_none() {
                    hub.family
                        .block(format!("subagent {} has no session record", rec.id));
                } else {
                    persist_outcomes(hub, &rec.id);
                }
            }
            Err(err) => hub
                .family
                .block(format!("subagent {} is quarantined: {err}", rec.id)),
        }
    }
    // A headless session row without an ownership record is quarantined.
    let orphans: Vec<String> = hub
        .sessions()
        .list()
        .into_iter()
        .filter(|s| s.kind == KIND && s.subagent.is_none())
        .map(|s| s.id.clone())
        .collect();
    for id in orphans {
        hub.family
            .block(format!("headless session {id} has no ownership record"));
    }
}

/// Creates one clean child of `caller` and schedules its startup.
/// `receipt` is committed with the child's records.
pub fn fork(
    hub: &Arc<Hub>,
    caller: &Caller,
    receipt: impl FnOnce(&Value) -> ReceiptRecord,
) -> Result<Value, Refusal> {
    if let Some(reason) = hub.family.blocked() {
        return Err(Refusal::new("recovery_required", reason));
    }
    if hub.is_shutting_down() {
        return Err(Refusal::new("lifecycle_closed", "the hub is shutting down"));
    }
    let limits = &hub.config.subagents;
    let _serial = lock(&hub.family.fork);
    // The caller's standing and the quotas, under one look at the registry.
    let (parent, depth) = {
        let sessions = hub.sessions();
        let Some(s) = sessions.get(&caller.session_id) else {
            return Err(Refusal::new("unauthorized", "the caller session is gone"));
        };
        if s.process
            .as_ref()
            .is_some_and(|p| p.state == crate::supervisor::process::ProcState::Stopping)
        {
            return Err(Refusal::new(
                "lifecycle_closed",
                "the caller's worker is stopping",
            ));
        }
        let depth = match &s.subagent {
            None => 1,
            Some(c) if c.frozen || c.lifecycle.is_closing() => {
                return Err(Refusal::new(
                    "lifecycle_closed",
                    "the caller's family is closed",
                ))
            }
            Some(c) => c.depth as usize + 1,
        };
        if depth > limits.max_depth {
            return Err(Refusal::new(
                "limit_exceeded",
                format!(
                    "a child at depth {depth} exceeds subagents.maxDepth ({})",
                    limits.max_depth
                ),
            ));
        }
        let all = sessions.list();
        let live = all.iter().filter(|x| x.subagent.is_some()).count();
        if live >= limits.max_live {
            return Err(Refusal::new(
                "limit_exceeded",
                format!("{live} subagents are live (subagents.maxLive)"),
            ));
        }
        let children = all
            .iter()
            .filter(|x| {
                x.subagent
                    .as_ref()
                    .is_some_and(|c| c.parent.session_id == caller.session_id)
            })
            .count();
        if children >= limits.max_children {
            return Err(Refusal::new(
                "limit_exceeded",
                format!("the caller has {children} children (subagents.maxChildren)"),
            ));
        }
        let supervised = s.process.as_ref().is_some_and(|p| p.state.is_active());
        if !supervised {
            return Err(Refusal::new(
                "unsupported_launch",
                "the caller is not a worker this hub launched",
            ));
        }
        let parent = ParentRef {
            session_id: caller.session_id.clone(),
            lifecycle_id: s.lifecycle_id.clone(),
            worker_id: caller.worker_id.clone(),
        };
        (parent, depth)
    };
    // The caller incarnation's startup snapshot.
    let parent_config = hub.session_dir(&caller.session_id).join("config");
    let startup_worker = read_snapshot(&parent_config.join(STARTUP_WORKER))?;
    let startup_launch = read_snapshot(&parent_config.join(STARTUP_LAUNCH))?;
    let spec: Value = serde_json::from_str(&startup_launch).map_err(|_| {
        Refusal::new(
            "unsupported_launch",
            "the caller's startup launch snapshot is not readable",
        )
    })?;

    let id = child::new_id();
    let token = crate::hub::new_token();
    let lifecycle_id = uuid::Uuid::new_v4().to_string();
    let dir = hub.session_dir(&id);
    let config_dir = dir.join("config");
    fsutil::create_private_dir(&dir)
        .and_then(|()| fsutil::create_private_dir(&config_dir))
        .map_err(|err| Refusal::new("storage_error", format!("cannot create the child: {err}")))?;
    let cleanup_dir = || {
        let _ = crate::hub::remove_session_dir(&dir);
    };
    let document =
        match render::fork_document(&startup_worker, &dir, hub.config.tool_requests.timeout_ms) {
            Ok(doc) => doc,
            Err(err) => {
                cleanup_dir();
                return Err(Refusal::new(
                    "unsupported_launch",
                    format!("the caller's startup configuration cannot be forked: {err}"),
                ));
            }
        };
    let text = serde_json::to_string_pretty(&document).unwrap_or_default();
    if let Err(err) = fsutil::write_private_atomic(&config_dir.join("config.yaml"), text.as_bytes())
    {
        cleanup_dir();
        return Err(Refusal::new(
            "storage_error",
            format!("cannot write the child configuration: {err}"),
        ));
    }
    let created_at = time::now_rfc3339();
    let child = Child::new(
        parent,
        depth as u32,
        created_at.clone(),
        hub.config.subagents.conversation_bytes,
    );
    let result = json!({"subagent_id": id, "lifecycle": Lifecycle::Preparing.as_str()});
    let session_rec = SessionRecord {
        id: id.clone(),
        created_at,
        spec,
        token,
        lifecycle_id,
        kind: KIND.into(),
    };
    let child_rec = SubagentRecord {
        id: id.clone(),
        meta: child.meta_json(),
        outcomes: json!([]),
    };
    let receipt = receipt(&result);
    if let Err(err) = hub
        .store()
        .insert_subagent(&session_rec, &child_rec, Some(&receipt))
    {
        cleanup_dir();
        return Err(Refusal::new(
            "storage_error",
            format!("cannot record the child: {err}"),
        ));
    }
    let mut session = hub.new_session(session_rec);
    session.subagent = Some(Box::new(child));
    hub.sessions().insert(session);
    drop(_serial);
    log::info!("session {}: forked headless child {id}", caller.session_id);
    hub.notify(Note::SessionChanged {
        session: id.clone(),
    });
    let hub2 = hub.clone();
    let id2 = id.clone();
    if let Err(err) = spawn_thread("subagent-start", move || launch(&hub2, &id2)) {
        log::error!("cannot start a subagent launch thread: {err}");
        set_reason(hub, &id, "the hub could not schedule the startup");
        begin_stop(hub, &id, None);
    }
    Ok(result)
}

fn read_snapshot(path: &Path) -> Result<String, Refusal> {
    fsutil::read_private_file(path).map_err(|_| {
        Refusal::new(
            "unsupported_launch",
            "the caller has no supervised startup snapshot (was it launched by this hub?)",
        )
    })
}

/// Starts a prepared child and watches its startup deadline.
fn launch(hub: &Arc<Hub>, id: &str) {
    // Time spent launching counts toward the deadline.
    let deadline = startup_deadline(hub);
    if !transition(hub, id, |c| {
        (c.lifecycle == Lifecycle::Preparing).then_some(Lifecycle::Starting)
    }) {
        return;
    }
    if let Err(why) = control::start(hub, id, None) {
        log::warn!("subagent {id}: start failed: {why}");
        set_reason(hub, id, &format!("start failed: {why}"));
        begin_stop(hub, id, None);
        return;
    }
    watch_startup(hub, id, deadline);
}

fn startup_deadline(hub: &Hub) -> Instant {
    Instant::now() + Duration::from_millis(hub.config.subagents.startup_timeout_ms)
}

/// Stops a child that is not ready within `subagents.startupTimeoutMs`.
fn watch_startup(hub: &Arc<Hub>, id: &str, deadline: Instant) {
    loop {
        let state = hub
            .with_session(id, |s| s.subagent.as_ref().map(|c| c.lifecycle))
            .flatten();
        match state {
            Some(Lifecycle::Preparing | Lifecycle::Starting) => {}
            _ => return,
        }
        if Instant::now() >= deadline {
            log::warn!("subagent {id}: not ready within the startup timeout");
            set_reason(hub, id, "startup_timeout: the child was not ready in time");
            begin_stop(hub, id, None);
            return;
        }
        std::thread::sleep(STARTUP_POLL);
    }
}

/// Applies `change` to the child's lifecycle; persists and announces a
/// change. Returns whether it changed.
pub fn transition(
    hub: &Hub,
    id: &str,
    change: impl FnOnce(&mut Child) -> Option<Lifecycle>,
) -> bool {
    let changed = hub
        .with_session(id, |s| {
            let c = s.subagent.as_mut()?;
            let next = change(c)?;
            c.lifecycle = next;
            Some(c.meta_json())
        })
        .flatten();
    match changed {
        Some(meta) => {
            persist_meta(hub, id, &meta);
            hub.notify(Note::SessionChanged {
                session: id.to_string(),
            });
            true
        }
        None => false,
    }
}

/// Writes the child's metadata; a failure marks the child degraded.
pub fn persist_meta(hub: &Hub, id: &str, meta: &Value) {
    if let Err(err) = hub.store().put_subagent_meta(id, meta) {
        log::warn!("subagent {id}: metadata not stored: {err}");
        hub.with_session(id, |s| {
            if let Some(c) = s.subagent.as_mut() {
                c.degraded = true;
            }
        });
    }
}

/// Writes the child's outcome tail if it changed.
pub fn persist_outcomes(hub: &Hub, id: &str) {
    let outcomes = hub
        .with_session(id, |s| {
            let c = s.subagent.as_ref()?;
            c.outcomes_unpersisted.then(|| c.outcomes_json())
        })
        .flatten();
    let Some(outcomes) = outcomes else { return };
    let stored = hub.store().put_subagent_outcomes(id, &outcomes);
    hub.with_session(id, |s| {
        if let Some(c) = s.subagent.as_mut() {
            match &stored {
                Ok(()) => c.outcomes_unpersisted = false,
                Err(err) => {
                    log::warn!("subagent {id}: outcomes not stored: {err}");
                    c.degraded = true;
                }
            }
        }
    });
}

fn set_reason(hub: &Hub, id: &str, reason: &str) {
    hub.with_session(id, |s| {
        if let Some(c) = s.subagent.as_mut() {
            c.reason.get_or_insert_with(|| reason.to_string());
        }
    });
}

/// Direct children of `parent`, by id.
pub fn children_of(hub: &Hub, parent: &str) -> Vec<String> {
    hub.sessions()
        .list()
        .into_iter()
        .filter(|s| {
            s.subagent
                .as_ref()
                .is_some_and(|c| c.parent.session_id == parent)
        })
        .map(|s| s.id.clone())
        .collect()
}

/// Every descendant of `root`, nearest first.
fn descendants_of(hub: &Hub, root: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut queue = VecDeque::from([root.to_string()]);
    while let Some(next) = queue.pop_front() {
        for child in children_of(hub, &next) {
            if !out.contains(&child) && child != root {
                queue.push_back(child.clone());
                out.push(child);
            }
        }
    }
    out
}

/// Closes admission of every descendant of `parent` at once (its worker
/// is being stopped): no forks, no sends through them.
pub fn freeze_descendants(hub: &Hub, parent: &str) {
    freeze(hub, descendants_of(hub, parent));
}

/// Closes admission of every family (hub shutdown).
pub fn freeze_all(hub: &Hub) {
    let ids = hub
        .sessions()
        .list()
        .into_iter()
        .filter(|s| s.subagent.is_some())
        .map(|s| s.id.clone())
        .collect();
    freeze(hub, ids);
}

fn freeze(hub: &Hub, ids: Vec<String>) {
    for id in ids {
        hub.with_session(&id, |s| {
            if let Some(c) = s.subagent.as_mut() {
                c.frozen = true;
            }
        });
    }
}

/// Stops every direct child of `parent` (each cascades further). One
/// child's failure never skips its siblings.
pub fn stop_children(hub: &Arc<Hub>, parent: &str, reason: &str) {
    freeze_descendants(hub, parent);
    for id in children_of(hub, parent) {
        set_reason(hub, &id, reason);
        begin_stop(hub, &id, None);
    }
}

/// Begins a child's supervised stop (idempotent): persists `stopping`,
/// stops its own children, then its worker; cleanup follows once the
/// process is confirmed gone. `on_stopping` runs after the stopping
/// state is durable (the stop receipt is written by the caller first).
pub fn begin_stop(hub: &Arc<Hub>, id: &str, on_stopping: Option<Box<dyn FnOnce() + Send>>) {
    let entered = hub
        .with_session(id, |s| {
            let c = s.subagent.as_mut()?;
            c.frozen = true;
            if c.lifecycle.is_closing() {
                return Some(None);
            }
            c.lifecycle = Lifecycle::Stopping;
            Some(Some(c.meta_json()))
        })
        .flatten();
    match entered {
        None => return,
        Some(None) => {}
        Some(Some(meta)) => {
            persist_meta(hub, id, &meta);
            hub.notify(Note::SessionChanged {
                session: id.to_string(),
            });
            log::info!("subagent {id}: stopping");
        }
    }
    if let Some(f) = on_stopping {
        f();
    }
    stop_children(hub, id, "an ancestor stopped");
    stop_worker(hub, id, StopMode::Graceful);
}

/// Stops a closing child's worker. A worker that never ran (or already
/// exited) has no waiter to report it gone, so cleanup runs here;
/// otherwise `process_gone` runs it. A stop that cannot confirm the end
/// (no verified identity, alive after SIGKILL) leaves the child
/// `cleanup-pending`.
fn stop_worker(hub: &Arc<Hub>, id: &str, mode: StopMode) {
    let hub2 = hub.clone();
    let id2 = id.to_string();
    control::stop(
        hub,
        id,
        mode,
        Box::new(move |result| match result {
            Err(failed) => cleanup_failed(&hub2, &id2, &failed.reason, false),
            Ok(stopped) if stopped.how.found_nothing() => cleanup(&hub2, &id2),
            Ok(_) => {}
        }),
    );
}

/// Called once a supervised worker's process is confirmed gone and its
/// output pipes are closed: a parent's children are stopped; a child is
/// stopped (if it was not already) and cleaned up.
pub fn process_gone(hub: &Arc<Hub>, id: &str) {
    stop_children(hub, id, "the parent worker exited");
    let closing = hub
        .with_session(id, |s| {
            s.subagent.as_ref().map(|c| c.lifecycle.is_closing())
        })
        .flatten();
    match closing {
        None => {}
        Some(true) => cleanup(hub, id),
        Some(false) => {
            set_reason(hub, id, "the child worker exited");
            begin_stop(hub, id, None);
            cleanup(hub, id);
        }
    }
}

/// Deletes a stopped child: its directory, then its records; keeps a
/// terminal record for the parent. A failure leaves the child
/// `cleanup-pending` with a bounded automatic retry.
pub fn cleanup(hub: &Arc<Hub>, id: &str) {
    // A child with descendants still present waits for them: the last
    // one's cleanup comes back here.
    if !children_of(hub, id).is_empty() {
        return;
    }
    let claimed = hub
        .with_session(id, |s| {
            let alive = s.process.as_ref().is_some_and(|p| p.state.is_active());
            let c = s.subagent.as_mut()?;
            if c.cleanup_in_flight || alive || !c.lifecycle.is_closing() {
                return None;
            }
            c.cleanup_in_flight = true;
            c.cleanup_attempts += 1;
            Some((
                c.parent.clone(),
                c.reason.clone(),
                c.latest_outcomes(child::MAX_OUTCOMES),
            ))
        })
        .flatten();
    let Some((parent, reason, outcomes)) = claimed else {
        return;
    };
    match remove_child(hub, id) {
        Ok(()) => {
            hub.family.remember(Terminal {
                id: id.to_string(),
                parent: parent.clone(),
                reason,
                outcomes,
                removed_ms: time::now_millis(),
            });
            hub.notify(Note::SessionRemoved {
                session: id.to_string(),
            });
            log::info!("subagent {id}: stopped and removed");
            // A parent child waiting on this one may now be removable.
            if child::is_child_id(&parent.session_id) {
                cleanup(hub, &parent.session_id);
            }
        }
        Err(err) => cleanup_failed(hub, id, &err, true),
    }
}

/// Records a failed cleanup (or a stop that could not confirm the end):
/// `cleanup-pending`, with the next automatic attempt scheduled while the
/// budget lasts. `counted` says whether an attempt was spent.
fn cleanup_failed(hub: &Arc<Hub>, id: &str, err: &str, counted: bool) {
    log::warn!("subagent {id}: cleanup failed: {err}");
    let meta = hub
        .with_session(id, |s| {
            let c = s.subagent.as_mut()?;
            c.cleanup_in_flight = false;
            c.lifecycle = Lifecycle::CleanupPending;
            c.reason = Some(format!("cleanup failed: {err}"));
            if !counted {
                c.cleanup_attempts += 1;
            }
            let attempt = c.cleanup_attempts.max(1) as usize;
            if c.automatic_retry && attempt < MAX_CLEANUP_ATTEMPTS as usize {
                c.retry_at_ms = Some(time::now_millis() + RETRY_DELAYS_MS[attempt - 1]);
            } else {
                c.automatic_retry = false;
                c.retry_at_ms = None;
            }
            Some(c.meta_json())
        })
        .flatten();
    if let Some(meta) = meta {
        persist_meta(hub, id, &meta);
        hub.notify(Note::SessionChanged {
            session: id.to_string(),
        });
        start_ticker(hub);
    }
}

/// One automatic or operator retry: stop a worker that is still alive
/// (force-kill), else clean up.
fn retry_cleanup(hub: &Arc<Hub>, id: &str) {
    let alive = hub
        .with_session(id, |s| {
            if let Some(c) = s.subagent.as_mut() {
                c.retry_at_ms = None;
            }
            s.process.as_ref().is_some_and(|p| p.state.is_active())
        })
        .unwrap_or(false);
    if alive {
        stop_worker(hub, id, StopMode::ForceKill);
    } else {
        cleanup(hub, id);
    }
}

/// Removes the directory (never through a link, never outside the
/// managed root) and the records of a stopped child.
fn remove_child(hub: &Hub, id: &str) -> Result<(), String> {
    let root = hub.config.data_dir.join("subagents");
    let dir = hub.session_dir(id);
    if dir.parent() != Some(root.as_path()) || !child::is_child_id(id) {
        return Err("the child directory is outside the managed root".into());
    }
    if let Ok(meta) = std::fs::symlink_metadata(&root) {
        if meta.file_type().is_symlink() {
            return Err("the subagents root is a symbolic link".into());
        }
    }
    if let Some(file) = hub.with_session(id, |s| s.log_file.take()).flatten() {
        file.close(Duration::from_secs(5));
    }
    crate::hub::remove_session_dir(&dir)
        .map_err(|err| format!("cannot remove {}: {err}", dir.display()))?;
    hub.store()
        .delete_session(id)
        .map_err(|err| format!("cannot delete the child's records: {err}"))?;
    hub.sessions().remove(id);
    Ok(())
}

/// Runs due automatic cleanups every five seconds while any is pending.
fn start_ticker(hub: &Arc<Hub>) {
    {
        let mut running = lock(&hub.family.ticker);
        if *running {
            return;
        }
        *running = true;
    }
    let hub2 = hub.clone();
    let spawned = spawn_thread("subagent-cleanup", move || loop {
        let hub = &hub2;
        std::thread::sleep(RETRY_TICK);
        if hub.is_shutting_down() {
            *lock(&hub.family.ticker) = false;
            return;
        }
        let now = time::now_millis();
        let (due, pending) = pending_cleanups(hub, now);
        for id in due {
            retry_cleanup(hub, &id);
        }
        if pending == 0 {
            *lock(&hub.family.ticker) = false;
            return;
        }
    });
    if let Err(err) = spawned {
        log::error!("cannot start the subagent cleanup thread: {err}");
        *lock(&hub.family.ticker) = false;
    }
}

/// Children due for an automatic cleanup attempt, and how many still wait.
fn pending_cleanups(hub: &Hub, now: u64) -> (Vec<String>, usize) {
    let sessions = hub.sessions();
    let mut due = Vec::new();
    let mut pending = 0;
    for s in sessions.list() {
        let Some(c) = &s.subagent else { continue };
        if c.lifecycle != Lifecycle::CleanupPending || !c.automatic_retry {
            continue;
        }
        match c.retry_at_ms {
            Some(at) if at <= now => due.push(s.id.clone()),
            Some(_) => pending += 1,
            None => {}
        }
    }
    let waiting = pending + due.len();
    (due, waiting)
}

/// After a restart (processes already adopted; `launched` are the sessions
/// that had a process record before adoption): keeps ready children of a
/// live parent incarnation, gives unfinished startups a deadline, and
/// stops and cleans up stale families and stopping intents. A child that
/// was starting without any process record may have a worker nobody knows
/// of: it is kept `cleanup-pending` for the operator (`uncertain_start`).
pub fn restore(hub: &Arc<Hub>, launched: &[String]) {
    let children: Vec<(String, ParentRef, Lifecycle, bool)> = hub
        .sessions()
        .list()
        .into_iter()
        .filter_map(|s| {
            let c = s.subagent.as_ref()?;
            let alive = s.process.as_ref().is_some_and(|p| p.state.is_active());
            Some((s.id.clone(), c.parent.clone(), c.lifecycle, alive))
        })
        .collect();
    for (id, parent, lifecycle, alive) in children {
        if lifecycle == Lifecycle::Starting && !alive && !launched.contains(&id) {
            let meta = hub
                .with_session(&id, |s| {
                    let c = s.subagent.as_mut()?;
                    c.uncertain_start = true;
                    c.frozen = true;
                    c.automatic_retry = false;
                    c.retry_at_ms = None;
                    c.lifecycle = Lifecycle::CleanupPending;
                    c.reason = Some(
                        "uncertain startup: the hub stopped between launching the worker and \
                         recording it; stop any such worker, then confirm-terminated"
                            .into(),
                    );
                    Some(c.meta_json())
                })
                .flatten();
            if let Some(meta) = meta {
                persist_meta(hub, &id, &meta);
            }
            log::warn!("subagent {id}: uncertain startup; kept for operator recovery");
            continue;
        }
        let parent_live = hub
            .with_session(&parent.session_id, |p| {
                p.lifecycle_id == parent.lifecycle_id
                    && p.process.as_ref().is_some_and(|x| x.state.is_active())
            })
            .unwrap_or(false);
        let stale = !parent_live;
        if lifecycle == Lifecycle::CleanupPending {
            // Retained: its stored attempt count and backoff stand; a
            // restart neither resets nor skips them (the ticker retries).
            hub.with_session(&id, |s| {
                if let Some(c) = s.subagent.as_mut() {
                    c.frozen = true;
                }
            });
            continue;
        }
        if stale || lifecycle.is_closing() {
            if stale {
                set_reason(hub, &id, "the parent incarnation is gone");
            }
            log::info!("subagent {id}: stale after restart; stopping and cleaning up");
            begin_stop(hub, &id, None);
            if !alive {
                cleanup(hub, &id);
            }
            continue;
        }
        match (lifecycle, alive) {
            (Lifecycle::Ready, true) => {
                log::info!("subagent {id}: kept ready, awaiting its reconnection");
            }
            (Lifecycle::Preparing | Lifecycle::Starting, true) => {
                let (hub2, id2) = (hub.clone(), id.clone());
                let deadline = startup_deadline(hub);
                if let Err(err) = spawn_thread("subagent-start", move || {
                    watch_startup(&hub2, &id2, deadline)
                }) {
                    log::error!("subagent {id}: cannot watch its startup: {err}");
                }
            }
            (Lifecycle::Preparing, false) => {
                let (hub2, id2) = (hub.clone(), id.clone());
                if let Err(err) = spawn_thread("subagent-start", move || launch(&hub2, &id2)) {
                    log::error!("subagent {id}: cannot schedule its startup: {err}");
                }
            }
            _ => {
                set_reason(hub, &id, "the child worker is gone after a hub restart");
                begin_stop(hub, &id, None);
                cleanup(hub, &id);
            }
        }
    }
    if !pending_cleanups(hub, u64::MAX).0.is_empty() {
        start_ticker(hub);
    }
}

/// Hub shutdown, after every worker was stopped: cleans up every child
/// whose process is gone (descendants first), and waits (bounded) for
/// cleanups that worker waiter threads are running at the same time.
pub fn shutdown(hub: &Arc<Hub>) {
    let mut ids: Vec<(u32, String)> = hub
        .sessions()
        .list()
        .into_iter()
        .filter_map(|s| Some((s.subagent.as_ref()?.depth, s.id.clone())))
        .collect();
    ids.sort_by_key(|entry| std::cmp::Reverse(entry.0));
    // One attempt each, as at any stop: a failed one leaves the child
    // `cleanup-pending` with its attempt counted, for the next start.
    for (_, id) in &ids {
        hub.with_session(id, |s| {
            if let Some(c) = s.subagent.as_mut() {
                if !c.lifecycle.is_closing() {
                    c.lifecycle = Lifecycle::Stopping;
                    c.reason.get_or_insert_with(|| "the hub shut down".into());
                }
            }
        });
        cleanup(hub, id);
    }
    // A waiter thread may be removing a child right now (its worker
    // exited during the stop), or may not have reported the exit yet (it
    // then cleans up itself): the hub must not exit under it.
    let busy = || {
        ids.iter()
            .filter(|(_, id)| {
                hub.with_session(id, |s| {
                    let alive = s.process.as_ref().is_some_and(|p| p.state.is_active());
                    alive || s.subagent.as_ref().is_some_and(|c| c.cleanup_in_flight)
                })
                .unwrap_or(false)
            })
            .count()
    };
    let deadline = Instant::now() + SHUTDOWN_SETTLE;
    loop {
        let left = busy();
        if left == 0 {
            return;
        }
        if Instant::now() >= deadline {
            log::warn!(
                "{left} subagent cleanups still running at shutdown; left for the next start"
            );
            return;
        }
        std::thread::sleep(SETTLE_POLL);
    }
}

/// `GET /api/sessions/:id/recovery`: a headless child's cleanup state,
/// without tokens, launch arguments or environment. `None` if `id` is not
/// a headless child.
pub fn recovery_info(hub: &Hub, id: &str) -> Option<Value> {
    hub.with_session(id, |s| {
        let c = s.subagent.as_ref()?;
        let alive = s.process.as_ref().is_some_and(|p| p.state.is_active());
        Some(json!({
            "session_id": s.id,
            "lifecycle_id": s.lifecycle_id,
            "lifecycle": c.lifecycle.as_str(),
            "uncertain_start": c.uncertain_start,
            "termination_confirmed": c.termination_confirmed || (s.process.is_some() && !alive),
            "process_alive": alive,
            "connected": s.connected(),
            "cleanup_attempts": c.cleanup_attempts,
            "max_cleanup_attempts": MAX_CLEANUP_ATTEMPTS,
            "automatic_retry": c.automatic_retry && c.retry_at_ms.is_some(),
            "retry_at": c.retry_at_ms.map(time::rfc3339_from_millis),
            "reason": c.reason,
        }))
    })
    .flatten()
}

/// What an operator asks of a retained child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoverAction {
    /// A fresh bounded cleanup budget.
    Retry,
    /// The operator attests the worker is gone.
    ConfirmTerminated,
}

impl RecoverAction {
    pub fn parse(s: &str) -> Option<RecoverAction> {
        match s {
            "retry" => Some(RecoverAction::Retry),
            "confirm-terminated" => Some(RecoverAction::ConfirmTerminated),
            _ => None,
        }
    }
}

/// `POST /api/sessions/:id/recover`. `Err` carries a stable code:
/// `not_found`, `invalid_policy` (not headless), `stale_lifecycle`,
/// `recovery_conflict` (alive, connected, in flight, or not retained) or
/// `cleanup_failed` (the attempt failed; the data stays).
pub fn recover(
    hub: &Arc<Hub>,
    id: &str,
    action: RecoverAction,
    lifecycle_id: &str,
) -> Result<Value, Refusal> {
    let checked = hub
        .with_session(id, |s| {
            let alive = s.process.as_ref().is_some_and(|p| p.state.is_active());
            let connected = s.connected();
            let current = s.lifecycle_id.clone();
            let c = s.subagent.as_mut()?;
            if current != lifecycle_id {
                return Some(Err(Refusal::new(
                    "stale_lifecycle",
                    "the lifecycle id is not the child's current one",
                )));
            }
            if c.cleanup_in_flight {
                return Some(Err(Refusal::new(
                    "recovery_conflict",
                    "a cleanup attempt is in flight",
                )));
            }
            if !c.lifecycle.is_closing() {
                return Some(Err(Refusal::new(
                    "recovery_conflict",
                    format!("the child is {}, not retained", c.lifecycle.as_str()),
                )));
            }
            match action {
                RecoverAction::ConfirmTerminated if alive || connected => {
                    return Some(Err(Refusal::new(
                        "recovery_conflict",
                        "the recorded worker is known to be alive or connected",
                    )))
                }
                RecoverAction::ConfirmTerminated => {
                    c.termination_confirmed = true;
                }
                RecoverAction::Retry => {}
            }
            c.cleanup_attempts = 0;
            c.automatic_retry = true;
            c.retry_at_ms = None;
            Some(Ok((c.meta_json(), alive)))
        })
        .flatten();
    let (meta, alive) = match checked {
        None if hub.with_session(id, |_| ()).is_some() => {
            return Err(Refusal::new(
                "invalid_policy",
                "recovery applies to headless sessions only",
            ))
        }
        None => return Err(Refusal::new("not_found", "no such session")),
        Some(Err(refusal)) => return Err(refusal),
        Some(Ok(v)) => v,
    };
    // The attestation (or the fresh budget) is saved before cleanup.
    persist_meta(hub, id, &meta);
    if alive {
        // Retry of a child whose worker still runs: stop it again; the
        // waiter cleans up once it is gone.
        hub.with_session(id, |s| {
            if let Some(c) = s.subagent.as_mut() {
                c.lifecycle = Lifecycle::Stopping;
            }
        });
        stop_children(hub, id, "an ancestor stopped");
        stop_worker(hub, id, StopMode::ForceKill);
        return Ok(json!({"session_id": id, "state": "stopping"}));
    }
    cleanup(hub, id);
    match recovery_info(hub, id) {
        None => Ok(json!({"session_id": id, "state": "removed"})),
        Some(info) => Err(Refusal::new(
            "cleanup_failed",
            info["reason"]
                .as_str()
                .unwrap_or("cleanup did not complete")
                .to_string(),
        )),
    }
}

/// `GET /api/subagents/recovery`: `{blocked, reason}`.
pub fn global_recovery(hub: &Hub) -> Value {
    let reason = hub.family.blocked();
    json!({"blocked": reason.is_some(), "reason": reason})
}

/// Sets a child's operator policy (new requests only); persisted at once.
/// `Err` with `invalid_policy` when `id` is not a headless child.
pub fn set_policy(hub: &Hub, id: &str, policy: child::Policy) -> Result<Value, Refusal> {
    let meta = hub
        .with_session(id, |s| {
            let c = s.subagent.as_mut()?;
            c.policy = policy;
            Some(c.meta_json())
        })
        .ok_or_else(|| Refusal::new("not_found", "no such session"))?
        .ok_or_else(|| {
            Refusal::new(
                "invalid_policy",
                "the safety policy applies to headless sessions only",
            )
        })?;
    persist_meta(hub, id, &meta);
    hub.notify(Note::SessionChanged {
        session: id.to_string(),
    });
    Ok(json!({"session_id": id, "policy": policy.as_str()}))
}

/// The coalescing window of `conversation.json` writes; later events do
/// not postpone a scheduled write.
pub const CONVERSATION_WINDOW: Duration = Duration::from_millis(200);

/// History refresh attempts per connection or run settlement.
pub const REFRESH_ATTEMPTS: u32 = 3;

/// Deadline of one history page request.
const REFRESH_QUERY_DEADLINE: Duration = Duration::from_secs(3);

/// `conversation.json` inside a child's directory.
pub const CONVERSATION_FILE: &str = "conversation.json";

/// Schedules one coalesced `conversation.json` write for `id`, unless one
/// is already scheduled.
pub fn schedule_conversation_write(hub: &Arc<Hub>, id: &str) {
    let first = hub
        .with_session(id, |s| {
            let c = s.subagent.as_mut()?;
            if !c.conversation_dirty || c.conversation_write_scheduled {
                return None;
            }
            c.conversation_write_scheduled = true;
            Some(())
        })
        .flatten()
        .is_some();
    if !first {
        return;
    }
    let hub2 = hub.clone();
    let id2 = id.to_string();
    let spawned = spawn_thread("subagent-conv", move || {
        std::thread::sleep(CONVERSATION_WINDOW);
        write_conversation(&hub2, &id2);
    });
    if spawned.is_err() {
        write_conversation(hub, id);
    }
}

/// Writes the projection now (atomically, 0600). Never recreates a
/// removed child directory; a failure keeps the previous file and marks
/// the projection stale and the child degraded.
fn write_conversation(hub: &Hub, id: &str) {
    let doc = hub
        .with_session(id, |s| {
            let c = s.subagent.as_mut()?;
            c.conversation_write_scheduled = false;
            if !c.conversation_dirty || c.cleanup_in_flight {
                return None;
            }
            c.conversation_dirty = false;
            Some(c.conversation.to_json())
        })
        .flatten();
    let Some(doc) = doc else { return };
    let path = hub.session_dir(id).join(CONVERSATION_FILE);
    let written = fsutil::write_private_atomic(&path, doc.to_string().as_bytes());
    hub.with_session(id, |s| {
        if let Some(c) = s.subagent.as_mut() {
            match &written {
                Ok(()) => c.conversation_failed = false,
                Err(err) => {
                    log::warn!("subagent {id}: {} not written: {err}", path.display());
                    c.conversation_failed = true;
                    c.conversation.mark_stale(true);
                }
            }
        }
    });
}

/// The stored projection of a restored child, if readable.
fn load_conversation(hub: &Hub, id: &str) -> Option<super::conversation::Conversation> {
    let path = hub.session_dir(id).join(CONVERSATION_FILE);
    let text = fsutil::read_private_file(&path).ok()?;
    let value: Value = serde_json::from_str(&text).ok()?;
    let mut conversation = super::conversation::Conversation::from_json(
        &value,
        hub.config.subagents.conversation_bytes,
    )
    .ok()?;
    // Events may have been missed while the hub was down.
    conversation.on_event_gap();
    Some(conversation)
}

/// Starts a history refresh of the child's projection when one is allowed
/// (idle, `session-history` advertised, attempts left, none running).
pub fn start_refresh(hub: &Arc<Hub>, id: &str) {
    let claimed = hub
        .with_session(id, |s| {
            let history = s
                .capabilities
                .as_ref()
                .is_some_and(|caps| caps.iter().any(|c| c == "session-history"));
            let idle = s.active_run.is_none() && s.connected();
            let c = s.subagent.as_mut()?;
            if !history
                || !idle
                || c.refresh_running
                || c.refresh_attempts >= REFRESH_ATTEMPTS
                || c.lifecycle.is_closing()
            {
                return None;
            }
            let refresh = c.conversation.start_refresh()?;
            c.refresh_running = true;
            c.refresh_attempts += 1;
            Some(refresh)
        })
        .flatten();
    let Some(refresh) = claimed else { return };
    let hub2 = hub.clone();
    let id2 = id.to_string();
    if spawn_thread("subagent-refresh", move || {
        run_refresh(&hub2, &id2, refresh)
    })
    .is_err()
    {
        hub.with_session(id, |s| {
            if let Some(c) = s.subagent.as_mut() {
                c.refresh_running = false;
            }
        });
    }
}

/// Reads history pages (newest turns first) and publishes the validated
/// tail, unless a live change or a new worker came in meanwhile.
fn run_refresh(hub: &Arc<Hub>, id: &str, mut refresh: super::conversation::Refresh) {
    use super::conversation::Next;
    let mut query = refresh.query();
    let outcome = loop {
        let idle = hub
            .with_session(id, |s| s.active_run.is_none() && s.connected())
            .unwrap_or(false);
        if !idle {
            break Err("the child is busy or disconnected".to_string());
        }
        let page = match hub.query_worker(id, &query.to_data(""), REFRESH_QUERY_DEADLINE) {
            Ok(page) => page,
            Err(err) => break Err(err.to_string()),
        };
        match refresh.accept_page(&page) {
            Ok(Next::Query(next)) => query = next,
            Ok(Next::Done(snapshot)) => break Ok(snapshot),
            Err(err) => break Err(err.to_string()),
        }
    };
    let now = time::now_rfc3339();
    let published = hub
        .with_session(id, |s| {
            let c = s.subagent.as_mut()?;
            c.refresh_running = false;
            match outcome {
                Ok(snapshot) => match c.conversation.publish_refresh(snapshot, &now) {
                    Ok(()) => {
                        c.conversation_dirty = true;
                        Some(true)
                    }
                    Err(err) => {
                        log::debug!("subagent {id}: refresh not published: {err}");
                        Some(false)
                    }
                },
                Err(err) => {
                    log::debug!("subagent {id}: history refresh failed: {err}");
                    Some(false)
                }
            }
        })
        .flatten();
    if published == Some(true) {
        schedule_conversation_write(hub, id);
    }
}
