//! Clean-fork: the caller's standing and the quotas (`maxDepth`,
//! `maxLive`, `maxChildren`) decided under the fork lock, the child's
//! private directory and configuration forked from the caller
//! incarnation's startup snapshot, the durable records with the receipt,
//! and the scheduled startup.

use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};

use super::startup::launch;
use super::stop::begin_stop;
use super::{lock, set_reason, spawn_thread};
use crate::session::headless::{self as child, Child, Lifecycle, ParentRef};
use crate::session::Note;
use crate::store::{ReceiptRecord, SessionRecord, SubagentRecord};
use crate::subagents::Service;
use crate::subagents::{Refusal, KIND};
use crate::supervisor::refresh;
use crate::util::{fsutil, time};

pub use crate::supervisor::control::{STARTUP_LAUNCH, STARTUP_WORKER};

/// The caller of a subagent route, as verified by the tools socket.
#[derive(Debug, Clone)]
pub struct Caller {
    pub session_id: String,
    pub worker_id: String,
    pub run_id: String,
    pub request_id: String,
}

/// Creates one clean child of `caller` and schedules its startup.
/// `receipt` is committed with the child's records.
pub fn fork(
    sv: &Arc<Service>,
    caller: &Caller,
    receipt: impl FnOnce(&Value) -> ReceiptRecord,
) -> Result<Value, Refusal> {
    if let Some(reason) = sv.family.blocked() {
        return Err(Refusal::RecoveryRequired(reason));
    }
    if sv.is_shutting_down() {
        return Err(Refusal::LifecycleClosed("the hub is shutting down".into()));
    }
    let limits = &sv.config.subagents;
    let _serial = lock(&sv.family.fork);
    // The caller's standing and the quotas, under one look at the registry.
    let (parent, depth) = {
        // One look at the caller and its whole family for the quota.
        let sessions = sv.sessions.lock_all();
        let Some(s) = sessions.get(&caller.session_id) else {
            return Err(Refusal::Unauthorized("the caller session is gone".into()));
        };
        if s.process()
            .is_some_and(|p| p.state == crate::supervisor::process::ProcState::Stopping)
        {
            return Err(Refusal::LifecycleClosed(
                "the caller's worker is stopping".into(),
            ));
        }
        let depth = match s.headless() {
            None => 1,
            Some(c) if c.closed_to_admission() => {
                return Err(Refusal::LifecycleClosed(
                    "the caller's family is closed".into(),
                ))
            }
            Some(c) => c.depth() as usize + 1,
        };
        if depth > limits.max_depth {
            return Err(Refusal::LimitExceeded(format!(
                "a child at depth {depth} exceeds subagents.maxDepth ({})",
                limits.max_depth
            )));
        }
        let all = sessions.list();
        let live = all.iter().filter(|x| x.is_headless()).count();
        if live >= limits.max_live {
            return Err(Refusal::LimitExceeded(format!(
                "{live} subagents are live (subagents.maxLive)"
            )));
        }
        let children = all
            .iter()
            .filter(|x| {
                x.headless()
                    .is_some_and(|c| c.parent().session_id == caller.session_id)
            })
            .count();
        if children >= limits.max_children {
            return Err(Refusal::LimitExceeded(format!(
                "the caller has {children} children (subagents.maxChildren)"
            )));
        }
        let supervised = s.process().is_some_and(|p| p.state.is_active());
        if !supervised {
            return Err(Refusal::UnsupportedLaunch(
                "the caller is not a worker this hub launched".into(),
            ));
        }
        let parent = ParentRef {
            session_id: caller.session_id.clone(),
            lifecycle_id: s.lifecycle_id().to_string(),
            worker_id: caller.worker_id.clone(),
        };
        (parent, depth)
    };
    // The caller incarnation's startup snapshot.
    let parent_config = sv.session_dir(&caller.session_id).join("config");
    let startup_worker = read_snapshot(&parent_config.join(STARTUP_WORKER))?;
    let startup_launch = read_snapshot(&parent_config.join(STARTUP_LAUNCH))?;
    let spec: Value = serde_json::from_str(&startup_launch).map_err(|_| {
        Refusal::UnsupportedLaunch("the caller's startup launch snapshot is not readable".into())
    })?;

    let id = child::new_id();
    let token = crate::services::new_token();
    let lifecycle_id = uuid::Uuid::new_v4().to_string();
    let dir = sv.session_dir(&id);
    let config_dir = dir.join("config");
    fsutil::create_private_dir(&dir)
        .and_then(|()| fsutil::create_private_dir(&config_dir))
        .map_err(|err| Refusal::Storage(format!("cannot create the child: {err}")))?;
    let cleanup_dir = || {
        let _ = crate::services::remove_session_dir(&dir);
    };
    let text =
        match refresh::fork_document(&startup_worker, &dir, sv.config.tool_requests.timeout_ms) {
            Ok(text) => text,
            Err(err) => {
                cleanup_dir();
                return Err(Refusal::UnsupportedLaunch(format!(
                    "the caller's startup configuration cannot be forked: {err}"
                )));
            }
        };
    if let Err(err) = fsutil::write_private_atomic(&config_dir.join("config.yaml"), text.as_bytes())
    {
        cleanup_dir();
        return Err(Refusal::Storage(format!(
            "cannot write the child configuration: {err}"
        )));
    }
    // A library session's child launches as its parent did: from the
    // parent's launch snapshot (which cannot change while the parent runs),
    // not the hub-wide launcher.
    let launch_snapshot = crate::library::store::session_launch_for_child(&parent_config)
        .map_err(|err| {
            Refusal::UnsupportedLaunch(format!(
                "the caller's launch snapshot cannot be forked: {}",
                err.message()
            ))
        })
        .and_then(|launch| match launch {
            None => Ok(()),
            Some(text) => fsutil::write_private_atomic(
                &config_dir.join(crate::library::store::SNAPSHOT_LAUNCH),
                text.as_bytes(),
            )
            .map_err(|err| {
                Refusal::Storage(format!("cannot write the child's launch snapshot: {err}"))
            }),
        });
    if let Err(refusal) = launch_snapshot {
        cleanup_dir();
        return Err(refusal);
    }
    let created_at = time::now_rfc3339();
    let child = Child::new(
        parent,
        depth as u32,
        created_at.clone(),
        sv.config.subagents.conversation_bytes,
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
    if let Err(err) = sv
        .store
        .lock()
        .insert_subagent(&session_rec, &child_rec, Some(&receipt))
    {
        cleanup_dir();
        return Err(Refusal::Storage(format!("cannot record the child: {err}")));
    }
    let mut session = sv.new_session(session_rec);
    session.attach_headless(child);
    sv.sessions.insert(session);
    drop(_serial);
    log::info!("session {}: forked headless child {id}", caller.session_id);
    sv.publisher.notify(Note::SessionChanged {
        session: id.clone(),
    });
    let hub2 = sv.clone();
    let id2 = id.clone();
    if let Err(err) = spawn_thread("subagent-start", move || launch(&hub2, &id2)) {
        log::error!("cannot start a subagent launch thread: {err}");
        set_reason(sv, &id, "the hub could not schedule the startup");
        begin_stop(sv, &id, None);
    }
    Ok(result)
}

fn read_snapshot(path: &Path) -> Result<String, Refusal> {
    fsutil::read_private_file(path).map_err(|_| {
        Refusal::UnsupportedLaunch(
            "the caller has no supervised startup snapshot (was it launched by this hub?)".into(),
        )
    })
}
