//! The `subagent/*` remote-tool routes once the tools socket has verified
//! the caller (live worker, active run): direct-parent ownership, durable
//! receipts for the mutating calls (fork, send), dispatch to the child's
//! worker with request outcomes, and the receive snapshots.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::family::{self, Caller};
use super::Refusal;
use crate::session::headless::conversation::PAGE_BODY_BUDGET;
use crate::session::headless::{Lifecycle, OutcomeState, ParentRef, RECEIVE_OUTCOMES};
use crate::session::IdentityState;
use crate::session::SendError;
use crate::store::ReceiptRecord;
use crate::subagents::Service;
use crate::util::time;
use crate::wire::worker::subagent_args::{self as args, Call, SendOp};
use crate::worker::query::{self, QueryError};

/// Runs one validated subagent call for a verified caller.
pub fn execute(
    sv: &Arc<Service>,
    caller: &Caller,
    route: &str,
    arguments: &Value,
    call: Call,
) -> Result<Value, Refusal> {
    let lifecycle_id = sv
        .sessions
        .with(&caller.session_id, |s| s.lifecycle_id().to_string())
        .ok_or_else(|| Refusal::Unauthorized("the caller session is gone".into()))?;
    let me = ParentRef {
        session_id: caller.session_id.clone(),
        lifecycle_id,
        worker_id: caller.worker_id.clone(),
    };
    match call {
        Call::List => Ok(list(sv, &me)),
        Call::Inspect {
            subagent_id,
            cursor,
            limit,
        } => inspect(sv, &me, &subagent_id, cursor, limit),
        Call::Answer {
            subagent_id,
            source,
            part,
            offset,
        } => answer(sv, &me, &subagent_id, source, part, offset),
        Call::CleanFork => {
            let receipt = Receipts::new(sv, &me, caller, route, arguments);
            if let Some(replay) = receipt.replay()? {
                return Ok(replay);
            }
            family::fork(sv, caller, |result| receipt.record(result))
        }
        Call::Send { subagent_id, op } => {
            let receipt = Receipts::new(sv, &me, caller, route, arguments);
            if let Some(replay) = receipt.replay()? {
                return Ok(replay);
            }
            send(sv, &me, &subagent_id, op, &receipt)
        }
    }
}

/// The receipt of one mutating call: key and hash, lookup and write.
struct Receipts<'a> {
    sv: &'a Service,
    key: String,
    hash: String,
}

impl<'a> Receipts<'a> {
    fn new(
        sv: &'a Service,
        me: &ParentRef,
        caller: &Caller,
        route: &str,
        arguments: &Value,
    ) -> Receipts<'a> {
        let key = [
            me.session_id.as_str(),
            me.lifecycle_id.as_str(),
            caller.worker_id.as_str(),
            caller.run_id.as_str(),
            caller.request_id.as_str(),
        ]
        .join("\u{1f}");
        Receipts {
            sv,
            key,
            hash: args::receipt_hash(route, arguments),
        }
    }

    /// The recorded result of an identical earlier call within retention
    /// (`replayed: true`); `request_conflict` for changed arguments.
    fn replay(&self) -> Result<Option<Value>, Refusal> {
        let stored = self
            .sv
            .store
            .lock()
            .get_receipt(&self.key)
            .map_err(|err| Refusal::Storage(err.to_string()))?;
        let Some(stored) = stored else {
            return Ok(None);
        };
        let ttl = self.sv.config.subagents.receipt_ttl_ms;
        if time::now_millis().saturating_sub(stored.created_ms) > ttl {
            return Ok(None);
        }
        if stored.hash != self.hash {
            return Err(Refusal::RequestConflict(
                "this request id was already used with different arguments".into(),
            ));
        }
        let mut result = stored.result;
        if let Some(map) = result.as_object_mut() {
            map.insert("replayed".into(), json!(true));
        }
        Ok(Some(result))
    }

    /// The receipt record for `result`.
    fn record(&self, result: &Value) -> ReceiptRecord {
        ReceiptRecord {
            key: self.key.clone(),
            hash: self.hash.clone(),
            result: result.clone(),
            created_ms: time::now_millis(),
        }
    }

    /// Stores the receipt for `result` and prunes old ones.
    fn commit(&self, result: &Value) -> Result<(), Refusal> {
        let store = self.sv.store.lock();
        store
            .put_receipt(&self.record(result))
            .map_err(|err| Refusal::Storage(err.to_string()))?;
        let limits = &self.sv.config.subagents;
        let oldest = time::now_millis().saturating_sub(limits.receipt_ttl_ms);
        if let Err(err) = store.prune_receipts(oldest, limits.max_receipts) {
            log::warn!("subagent receipts not pruned: {err}");
        }
        Ok(())
    }
}

/// Checks that `id` is a live direct child of `me`.
fn owned(sv: &Service, me: &ParentRef, id: &str) -> Result<(), Refusal> {
    let parent = sv
        .sessions
        .with(id, |s| s.headless().map(|c| c.parent().clone()))
        .flatten();
    match parent {
        Some(p) if &p == me => Ok(()),
        Some(_) => Err(Refusal::Unauthorized(
            "only the live parent worker can reach this child".into(),
        )),
        None if retained(sv, me, id).is_some() => Err(Refusal::LifecycleClosed(
            "the child has stopped and was cleaned up".into(),
        )),
        None => Err(Refusal::Unauthorized("no such child of the caller".into())),
    }
}

/// The caller's terminal record of `id`, if one is retained.
fn retained(sv: &Service, me: &ParentRef, id: &str) -> Option<family::Terminal> {
    sv.family
        .terminals(time::now_millis(), sv.config.subagents.receipt_ttl_ms)
        .into_iter()
        .find(|t| t.id == id && &t.parent == me)
}

/// One child's status object: its description block plus what a parent
/// needs to address it (the Node hub's `process_state`, `run_id` and
/// `error` among them).
fn status(s: &crate::session::Session) -> Option<Value> {
    let c = s.headless()?;
    let mut out = crate::session::headless::block(&crate::session::headless::view(s, c));
    let failed = c.lifecycle() == Lifecycle::CleanupPending;
    for (key, value) in [
        ("subagent_id", json!(s.id())),
        ("connected", json!(s.connected())),
        ("created_at", json!(c.created_at())),
        ("worker_id", json!(s.worker_id())),
        ("retained", json!(false)),
        (
            "process_state",
            json!(s.process().map_or("not-started", |p| p.state.as_str())),
        ),
        ("run_id", json!(s.active_run())),
        (
            "error",
            // The failure reason of a child waiting for cleanup.
            match out["reason"].as_str() {
                Some(reason) if failed && !reason.is_empty() => json!(reason),
                _ => Value::Null,
            },
        ),
    ] {
        out[key] = value;
    }
    Some(out)
}

/// The status of a stopped child whose terminal record is retained.
fn terminal_status(t: &family::Terminal) -> Value {
    json!({
        "subagent_id": t.id,
        "parent": t.parent.session_id,
        "lifecycle": Lifecycle::Stopped.as_str(),
        "policy": "ask",
        "health": "unknown",
        "reason": t.reason.as_deref().unwrap_or(""),
        "observed_at": null,
        "active": false,
        "process_state": "exited",
        "connected": false,
        "run_id": null,
        "pending_approvals": 0,
        "error": null,
        "active_run": false,
        "retained": true,
    })
}

/// `subagent/receive {subagent_id}`: the Node hub's shape, the child's
/// status fields at the top level, then this hub's `status` (the same
/// object) and the rest of `extra`.
fn with_status(status: Value, extra: Value) -> Value {
    let mut out = status.clone();
    out["status"] = status;
    if let (Some(out), Value::Object(extra)) = (out.as_object_mut(), extra) {
        out.extend(extra);
    }
    out
}

/// `subagent/receive {}`: the caller's direct children, with retained
/// terminal records.
fn list(sv: &Service, me: &ParentRef) -> Value {
    let mut children: Vec<Value> = sv.sessions.scan(|s| {
        s.headless()
            .is_some_and(|c| c.parent() == me)
            .then(|| status(s))
            .flatten()
    });
    for t in sv
        .family
        .terminals(time::now_millis(), sv.config.subagents.receipt_ttl_ms)
    {
        if &t.parent == me {
            children.push(terminal_status(&t));
        }
    }
    // `subagents` as the Node hub names the list; `children` as this hub
    // did before.
    json!({"count": children.len(), "subagents": children, "children": children})
}

/// `subagent/receive {subagent_id, cursor, limit}`: status, the latest
/// outcomes, and the conversation page.
fn inspect(
    sv: &Service,
    me: &ParentRef,
    id: &str,
    cursor: usize,
    limit: usize,
) -> Result<Value, Refusal> {
    if let Some(t) = retained(sv, me, id) {
        if sv.sessions.with(id, |_| ()).is_none() {
            let total = t.outcomes.len();
            let skip = total.saturating_sub(RECEIVE_OUTCOMES);
            return Ok(with_status(
                terminal_status(&t),
                json!({
                    "requests": t.outcomes[skip..],
                    "requests_truncated": total > RECEIVE_OUTCOMES,
                    "conversation": null,
                }),
            ));
        }
    }
    owned(sv, me, id)?;
    sv.sessions
        .with(id, |s| {
            let c = s.headless()?;
            let conversation = c.conversation().page(cursor, limit, PAGE_BODY_BUDGET);
            let mut result = with_status(
                status(s)?,
                json!({
                    "requests": c.latest_outcomes(RECEIVE_OUTCOMES),
                    "requests_truncated": c.outcome_count() > RECEIVE_OUTCOMES,
                    "conversation": conversation,
                }),
            );
            fit_requests(&mut result);
            Some(result)
        })
        .flatten()
        .ok_or_else(|| Refusal::LifecycleClosed("the child is gone".into()))
}

/// Room a receive result leaves for the tool response envelope.
const RESPONSE_SLACK: usize = 4 * 1024;

/// Drops the oldest shown outcomes until the result fits the response
/// limit (`requests_truncated` then says so).
fn fit_requests(result: &mut Value) {
    let limit = crate::wire::worker::tool_frames::MAX_RESPONSE_BYTES - RESPONSE_SLACK;
    while result.to_string().len() > limit {
        let Some(list) = result["requests"].as_array_mut() else {
            return;
        };
        if list.is_empty() {
            return;
        }
        list.remove(0);
        result["requests_truncated"] = json!(true);
    }
}

/// `subagent/receive {subagent_id, answer}`: one exact 32 KiB page of a
/// child's answer, read from its worker; ownership is checked again
/// after the awaited query.
fn answer(
    sv: &Service,
    me: &ParentRef,
    id: &str,
    source: Value,
    part: u64,
    offset: u64,
) -> Result<Value, Refusal> {
    owned(sv, me, id)?;
    let payload = crate::wire::worker::answer::answer_payload(
        &json!({"source": source, "part": part, "offset": offset}),
    )
    .map_err(|err| Refusal::InvalidArguments(err.to_string()))?;
    let page = sv
        .queries
        .ask(&sv.sessions, id, &payload, query::QUERY_DEADLINE);
    owned(sv, me, id)?;
    match page {
        Ok(page) => {
            // As the Node hub: the child's status with the page beside it.
            let current = sv.sessions.with(id, |s| status(s)).flatten();
            let extra = json!({
                "requests": [],
                "requests_truncated": false,
                "conversation": null,
                "answer": page,
            });
            Ok(match current {
                Some(current) => with_status(current, extra),
                None => json!({"subagent_id": id, "answer": extra["answer"]}),
            })
        }
        Err(QueryError::Busy { .. }) => Err(Refusal::LimitExceeded(
            "too many answer queries are pending".into(),
        )),
        Err(QueryError::Invalid(err)) => Err(Refusal::InvalidArguments(err)),
        Err(err @ QueryError::Unsupported(_)) => {
            Err(Refusal::UnsupportedOperation(err.to_string()))
        }
        Err(err @ (QueryError::NotConnected(_) | QueryError::Disconnected)) => {
            Err(Refusal::Disconnected(err.to_string()))
        }
        Err(err) => Err(Refusal::AnswerUnavailable(format!(
            "the answer page is unavailable: {err}"
        ))),
    }
}

/// `subagent/send`: stop, or one payload to the child's worker.
fn send(
    sv: &Arc<Service>,
    me: &ParentRef,
    id: &str,
    op: SendOp,
    receipt: &Receipts,
) -> Result<Value, Refusal> {
    owned(sv, me, id)?;
    if let SendOp::Stop = op {
        let operation_id = format!("stop-{}", uuid::Uuid::new_v4());
        // The Node hub's `state`; `lifecycle` as this hub said before.
        let result = json!({
            "subagent_id": id,
            "operation_id": operation_id,
            "operation": "stop",
            "state": Lifecycle::Stopping.as_str(),
            "lifecycle": Lifecycle::Stopping.as_str(),
        });
        // The receipt is durable before any supervised work starts.
        receipt.commit(&result)?;
        family::begin_stop(sv, id, None);
        return Ok(result);
    }
    let operation = op.name();
    // The child must be ready, connected and open for admission.
    let standing = sv
        .sessions
        .with(id, |s| {
            let c = s.headless()?;
            if c.closed_to_admission() {
                return Some(Err(Refusal::LifecycleClosed(format!(
                    "the child is {}",
                    c.lifecycle().as_str()
                ))));
            }
            if c.lifecycle() != Lifecycle::Ready
                || !s.connected()
                || s.identity() != IdentityState::Live
            {
                return Some(Err(Refusal::Disconnected(
                    "the child is not ready and connected".into(),
                )));
            }
            if operation == "compact" && !s.has_capability("context-compact") {
                return Some(Err(Refusal::UnsupportedOperation(
                    "the child's worker does not advertise context-compact".into(),
                )));
            }
            Some(Ok(()))
        })
        .flatten();
    match standing {
        None => return Err(Refusal::LifecycleClosed("the child is gone".into())),
        Some(Err(refusal)) => return Err(refusal),
        Some(Ok(())) => {}
    }
    let request_id = format!("sub-{}", uuid::Uuid::new_v4());
    let now = time::now_rfc3339();
    // Intent first, durably, with a receipt that conservatively says
    // `unknown`: a crash before the write below is never replayed as sent.
    let content = match &op {
        SendOp::Message { content, .. } => Some(content.clone()),
        _ => None,
    };
    sv.sessions.with(id, |s| {
        if let Some(c) = s.headless_mut() {
            c.record_intent(&request_id, operation, content, &now);
        }
    });
    family::persist_outcomes(sv, id);
    let recorded = json!({
        "subagent_id": id,
        "request_id": request_id,
        "operation": operation,
        "state": "unknown",
    });
    receipt.commit(&recorded)?;
    let input = payload_input(&request_id, op);
    let sent = sv.sessions.send_input(&sv.publisher, id, &input);
    let (state, refusal) = match &sent {
        Ok(_) => (OutcomeState::Sent, None),
        Err(SendError::NotConnected(msg)) | Err(SendError::UnknownSession(msg)) => (
            OutcomeState::Rejected,
            Some(Refusal::Disconnected(msg.clone())),
        ),
        Err(SendError::Invalid(msg)) => (
            OutcomeState::Rejected,
            Some(Refusal::InvalidArguments(msg.clone())),
        ),
        Err(other) => (
            OutcomeState::Unknown,
            Some(Refusal::DeliveryUnknown(other.to_string())),
        ),
    };
    sv.sessions.with(id, |s| {
        if let Some(c) = s.headless_mut() {
            let error = refusal.as_ref().map(Refusal::message);
            c.settle_intent(&request_id, state, error, &time::now_rfc3339());
        }
    });
    family::persist_outcomes(sv, id);
    match refusal {
        Some(refusal) => Err(refusal),
        None => Ok(json!({
            "subagent_id": id,
            "request_id": request_id,
            "operation": operation,
            "state": "sent",
        })),
    }
}

/// The payload input for the child: the operation, its content, and the
/// options with `confirmation.mode: ask` always (the operator's child
/// policy answers at the confirmation boundary).
fn payload_input(request_id: &str, op: SendOp) -> Value {
    let mut input = Map::new();
    input.insert("operation".into(), json!(op.name()));
    input.insert("request_id".into(), json!(request_id));
    let options = op.options().cloned();
    if let SendOp::Message { content, .. } = op {
        input.insert("content".into(), content);
    }
    let mut options = match options {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    };
    options.insert("confirmation".into(), json!({"mode": "ask"}));
    input.insert("options".into(), Value::Object(options));
    Value::Object(input)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_always_ask_for_confirmation() {
        let input = payload_input(
            "r1",
            SendOp::Message {
                content: json!([{"type": "text", "modality": "text", "raw": "hi"}]),
                options: Some(json!({"model": {"temperature": 0.1}, "tools": {}})),
            },
        );
        assert_eq!(input["operation"], "message");
        assert_eq!(input["request_id"], "r1");
        assert_eq!(input["content"][0]["raw"], "hi");
        assert_eq!(input["options"]["confirmation"]["mode"], "ask");
        assert_eq!(input["options"]["model"]["temperature"], 0.1);
        let input = payload_input("r2", SendOp::Continue { options: None });
        assert!(input.get("content").is_none());
        assert_eq!(input["options"], json!({"confirmation": {"mode": "ask"}}));
    }
}
