//! Read-only worker queries (`history` and `answer` payloads): a bounded
//! registry of pending queries and [`Queries::ask`], the one primitive
//! every hub-side caller uses (`POST /api/sessions/:id/answer`,
//! the subagent conversation refresh and answer proxy).
//!
//! One query: [`Queries::begin`] reserves a slot (at most
//! [`MAX_PENDING`] in the hub and [`MAX_PENDING_PER_SESSION`] per session)
//! under the session lock, recording the exact event connection (`conn_id`)
//! and worker identity the payload goes to; the payload is written on that
//! connection's socket after the lock is released; [`Pending::wait`] then
//! blocks on a channel until the reply, a failure or the deadline.
//!
//! The event socket thread hands every `history`, `history_error`,
//! `answer` and `answer_error` event to [`Queries::resolve_envelope`]. A
//! reply satisfies a query only when its request id, its connection, its
//! worker id and its event name (the query's own kind) all match; anything
//! else leaves the query pending and is forwarded to panels as before. When
//! a connection ends or is superseded, [`Queries::fail_connection`] fails
//! its pending queries at once.
//!
//! Queries are never recorded as session `requests`, never change run
//! state, and answers are never cached. Every slot is released when its
//! [`Pending`] is dropped, on every path (reply, failure, timeout,
//! cancellation, panic). The registry mutex is taken alone or under the
//! session lock, never across I/O or the wait.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use serde_json::Value;

use crate::session::{IdentityState, Sessions};
use crate::wire::code;
use crate::wire::worker::envelope::Envelope;
use crate::wire::worker::payload;

pub use crate::wire::worker::answer::QueryKind;

/// Queries pending in the whole hub at once.
pub const MAX_PENDING: usize = 64;

/// Queries pending for one session (one worker) at once.
pub const MAX_PENDING_PER_SESSION: usize = 2;

/// How long a query waits for its reply.
pub const QUERY_DEADLINE: Duration = Duration::from_secs(10);

/// A worker's error code and message are kept up to this many bytes each.
const MAX_DIAGNOSTIC_BYTES: usize = 1024;

/// Which bound refused a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusyScope {
    /// [`MAX_PENDING`] in the whole hub.
    Hub,
    /// [`MAX_PENDING_PER_SESSION`] for the session.
    Session,
}

/// Why a query produced no reply data.
#[derive(Debug, Clone, PartialEq)]
pub enum QueryError {
    UnknownSession(String),
    /// The payload is not a valid read-only query; nothing was sent.
    Invalid(String),
    /// No worker is connected, or its identity is not live yet.
    NotConnected(String),
    /// The connected worker does not advertise the needed capability.
    Unsupported(String),
    /// Too many queries are pending; nothing was sent.
    Busy {
        scope: BusyScope,
        limit: usize,
    },
    /// The socket write failed.
    WriteFailed(String),
    /// The connection the query was sent on ended or was superseded.
    Disconnected,
    /// The worker answered with `history_error` / `answer_error`.
    Rejected {
        code: Option<String>,
        message: String,
    },
    /// No reply within the deadline.
    TimedOut(Duration),
    /// The caller cancelled the wait (e.g. its client went away).
    Cancelled,
}

impl QueryError {
    /// A short stable name of the failure, for error bodies and logs:
    /// `unknown_session`, `invalid_arguments`, `not_connected`,
    /// `unsupported`, `too_many_queries`, `write_failed`, `disconnected`,
    /// `worker_error`, `timeout`, `cancelled`.
    pub fn reason(&self) -> &'static str {
        match self {
            QueryError::UnknownSession(_) => code::UNKNOWN_SESSION,
            QueryError::Invalid(_) => code::INVALID_ARGUMENTS,
            QueryError::NotConnected(_) => "not_connected",
            QueryError::Unsupported(_) => "unsupported",
            QueryError::Busy { .. } => code::TOO_MANY_QUERIES,
            QueryError::WriteFailed(_) => "write_failed",
            QueryError::Disconnected => "disconnected",
            QueryError::Rejected { .. } => "worker_error",
            QueryError::TimedOut(_) => "timeout",
            QueryError::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueryError::UnknownSession(id) => {
                write!(f, "no session {}", crate::wire::worker::display::quote(id))
            }
            QueryError::Invalid(msg)
            | QueryError::NotConnected(msg)
            | QueryError::Unsupported(msg) => f.write_str(msg),
            QueryError::Busy {
                scope: BusyScope::Hub,
                limit,
            } => write!(f, "{limit} worker queries are already pending in the hub"),
            QueryError::Busy {
                scope: BusyScope::Session,
                limit,
            } => write!(
                f,
                "{limit} worker queries are already pending for this session"
            ),
            QueryError::WriteFailed(msg) => write!(f, "query not sent: {msg}"),
            QueryError::Disconnected => {
                f.write_str("the worker connection the query was sent on ended before it answered")
            }
            QueryError::Rejected {
                code: Some(code),
                message,
            } => write!(f, "the worker refused the query ({code}): {message}"),
            QueryError::Rejected {
                code: None,
                message,
            } => {
                write!(f, "the worker refused the query: {message}")
            }
            QueryError::TimedOut(after) => write!(
                f,
                "the worker did not answer within {} ms",
                after.as_millis()
            ),
            QueryError::Cancelled => f.write_str("the query was cancelled"),
        }
    }
}

impl std::error::Error for QueryError {}

/// What a waiting query receives.
type Outcome = Result<Value, QueryError>;

/// Where one pending query was sent and who waits for it.
struct Route {
    session: String,
    conn_id: u64,
    worker_id: String,
    kind: QueryKind,
    reply: Sender<Outcome>,
}

#[derive(Default)]
struct Table {
    /// Unanswered queries by request id.
    routes: HashMap<String, Route>,
    /// Reserved slots per session (answered queries keep theirs until
    /// their [`Pending`] is dropped).
    per_session: HashMap<String, usize>,
    total: usize,
}

/// The pending read-only queries of the hub (a field of the hub).
pub struct Queries {
    table: Arc<Mutex<Table>>,
    max_total: usize,
    max_per_session: usize,
}

impl Default for Queries {
    fn default() -> Self {
        Queries::new()
    }
}

impl Queries {
    /// A registry with the hub's bounds ([`MAX_PENDING`],
    /// [`MAX_PENDING_PER_SESSION`]).
    pub fn new() -> Queries {
        Queries::with_limits(MAX_PENDING, MAX_PENDING_PER_SESSION)
    }

    /// A registry with other bounds (tests).
    pub fn with_limits(max_total: usize, max_per_session: usize) -> Queries {
        Queries {
            table: Arc::new(Mutex::new(Table::default())),
            max_total,
            max_per_session,
        }
    }

    /// A fresh, unguessable request id: `q-<uuid>`.
    pub fn new_request_id() -> String {
        format!("q-{}", uuid::Uuid::new_v4())
    }

    /// Reserves a slot for a query with `request_id` about to be written on
    /// event connection `conn_id` of `session`, whose live worker is
    /// `worker_id`. Fails with [`QueryError::Busy`] at the bounds. The slot
    /// is held until the returned [`Pending`] is dropped.
    ///
    /// Call it under the session lock, in the same look that read the
    /// session's link: the event socket thread fails a connection's queries
    /// after it replaced or cleared that link, so a query registered
    /// against a stale link can never be missed. [`Queries::ask`]
    /// does this.
    pub fn begin(
        &self,
        session: &str,
        conn_id: u64,
        worker_id: &str,
        kind: QueryKind,
        request_id: &str,
    ) -> Result<Pending, QueryError> {
        let mut table = lock(&self.table);
        if table.total >= self.max_total {
            return Err(QueryError::Busy {
                scope: BusyScope::Hub,
                limit: self.max_total,
            });
        }
        let held = table.per_session.get(session).copied().unwrap_or(0);
        if held >= self.max_per_session {
            return Err(QueryError::Busy {
                scope: BusyScope::Session,
                limit: self.max_per_session,
            });
        }
        if table.routes.contains_key(request_id) {
            return Err(QueryError::Invalid(format!(
                "request id {} is already pending",
                crate::wire::worker::display::quote(request_id)
            )));
        }
        let (tx, rx) = crossbeam_channel::bounded(1);
        table.routes.insert(
            request_id.to_string(),
            Route {
                session: session.to_string(),
                conn_id,
                worker_id: worker_id.to_string(),
                kind,
                reply: tx,
            },
        );
        *table.per_session.entry(session.to_string()).or_insert(0) += 1;
        table.total += 1;
        Ok(Pending {
            request_id: request_id.to_string(),
            session: session.to_string(),
            table: self.table.clone(),
            reply: rx,
        })
    }

    /// Delivers a reply event to its query. `true` when it satisfied one:
    /// same request id, same session, same connection, same worker id, and
    /// `event` is the query kind's reply or error event. Anything else
    /// (another connection, another worker, a late or unknown id) is not
    /// consumed and changes nothing.
    pub fn resolve(
        &self,
        session: &str,
        conn_id: u64,
        worker_id: &str,
        request_id: &str,
        event: &str,
        data: Option<&Value>,
    ) -> bool {
        let mut table = lock(&self.table);
        let matches = table.routes.get(request_id).is_some_and(|r| {
            r.session == session
                && r.conn_id == conn_id
                && r.worker_id == worker_id
                && (event == r.kind.reply_event() || event == r.kind.error_event())
        });
        if !matches {
            return false;
        }
        let Some(route) = table.routes.remove(request_id) else {
            return false;
        };
        drop(table);
        let outcome = if event == route.kind.reply_event() {
            Ok(data.cloned().unwrap_or(Value::Null))
        } else {
            Err(rejection(data))
        };
        // The waiter may already have given up (timeout): nothing to do.
        let _ = route.reply.try_send(outcome);
        true
    }

    /// [`Queries::resolve`] for an event envelope received on `conn_id`.
    /// The request id is `data.request_id` (where workers echo it), else
    /// the envelope's.
    pub fn resolve_envelope(&self, session: &str, conn_id: u64, env: &Envelope) -> bool {
        let data = env.data();
        let request_id = data
            .and_then(|d| d.get("request_id"))
            .and_then(Value::as_str)
            .unwrap_or(env.request_id());
        if request_id.is_empty() {
            return false;
        }
        self.resolve(
            session,
            conn_id,
            env.worker_id(),
            request_id,
            env.event(),
            data,
        )
    }

    /// Fails every query of `session` sent on connection `conn_id` with
    /// [`QueryError::Disconnected`] (the connection ended or was
    /// superseded). Returns how many.
    pub fn fail_connection(&self, session: &str, conn_id: u64) -> usize {
        self.fail_where(|r| r.session == session && r.conn_id == conn_id)
    }

    fn fail_where(&self, pred: impl Fn(&Route) -> bool) -> usize {
        let failed: Vec<Route> = {
            let mut table = lock(&self.table);
            let ids: Vec<String> = table
                .routes
                .iter()
                .filter(|(_, r)| pred(r))
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter()
                .filter_map(|id| table.routes.remove(id))
                .collect()
        };
        for route in &failed {
            let _ = route.reply.try_send(Err(QueryError::Disconnected));
        }
        failed.len()
    }

    /// Slots reserved in the whole hub.
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        lock(&self.table).total
    }

    /// Slots reserved for `session`.
    #[cfg(test)]
    pub fn pending_in(&self, session: &str) -> usize {
        lock(&self.table)
            .per_session
            .get(session)
            .copied()
            .unwrap_or(0)
    }
}

fn lock(table: &Mutex<Table>) -> MutexGuard<'_, Table> {
    table.lock().unwrap_or_else(|p| p.into_inner())
}

/// The worker's error code and message from a `*_error` event's data.
fn rejection(data: Option<&Value>) -> QueryError {
    let text = |key: &str| {
        data.and_then(|d| d.get(key))
            .and_then(Value::as_str)
            .map(|s| crate::wire::worker::display::clip(s, MAX_DIAGNOSTIC_BYTES))
    };
    QueryError::Rejected {
        code: text("code").filter(|c| !c.is_empty()),
        message: text("message").unwrap_or_else(|| "no message".to_string()),
    }
}

/// One reserved query slot; waits for the reply. Dropping it releases the
/// slot and forgets the query (a late reply then satisfies nothing).
pub struct Pending {
    request_id: String,
    session: String,
    table: Arc<Mutex<Table>>,
    reply: Receiver<Outcome>,
}

impl fmt::Debug for Pending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pending")
            .field("request_id", &self.request_id)
            .field("session", &self.session)
            .finish()
    }
}

impl Pending {
    /// Blocks until the reply (the event's `data`), a failure, or
    /// `deadline` ([`QueryError::TimedOut`]). Releases the slot.
    #[cfg(test)]
    pub fn wait(self, deadline: Duration) -> Result<Value, QueryError> {
        self.wait_or_cancel(deadline, &crossbeam_channel::never())
    }

    /// Like [`Pending::wait`], but also ends with [`QueryError::Cancelled`]
    /// as soon as `cancel` receives a message or all its senders are
    /// dropped.
    pub fn wait_or_cancel(
        self,
        deadline: Duration,
        cancel: &Receiver<()>,
    ) -> Result<Value, QueryError> {
        let timeout = crossbeam_channel::after(deadline);
        crossbeam_channel::select! {
            recv(self.reply) -> outcome => outcome.unwrap_or(Err(QueryError::Disconnected)),
            recv(cancel) -> _ => Err(QueryError::Cancelled),
            recv(timeout) -> _ => Err(QueryError::TimedOut(deadline)),
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let mut table = lock(&self.table);
        table.routes.remove(&self.request_id);
        table.total = table.total.saturating_sub(1);
        let emptied = match table.per_session.get_mut(&self.session) {
            Some(held) => {
                *held = held.saturating_sub(1);
                *held == 0
            }
            None => false,
        };
        if emptied {
            table.per_session.remove(&self.session);
        }
    }
}

/// Validates a read-only query payload (`operation` `history` or `answer`,
/// with the worker protocol's fields) and builds its frame carrying a fresh
/// request id (any `request_id` given is replaced). Returns the kind, the
/// request id and the `{"type":"payload",...}` frame.
pub fn build_query(payload: &Value) -> Result<(QueryKind, String, Value), QueryError> {
    let Value::Object(fields) = payload else {
        return Err(QueryError::Invalid("a query must be a JSON object".into()));
    };
    let kind = fields
        .get("operation")
        .and_then(Value::as_str)
        .and_then(QueryKind::from_operation)
        .ok_or_else(|| QueryError::Invalid("operation must be \"history\" or \"answer\"".into()))?;
    let mut input = fields.clone();
    input.remove("request_id");
    let request_id = Queries::new_request_id();
    let mut id = || request_id.clone();
    let (request_id, frame) = payload::build_payload(&Value::Object(input), &mut id)
        .map_err(|err| QueryError::Invalid(err.to_string()))?;
    Ok((kind, request_id, frame))
}

/// Asking a worker: the registry of pending queries with the sessions
/// it asks through.
impl Queries {
    /// Sends one read-only query to the worker connected to `session` and
    /// waits for its reply; returns the reply event's `data` (the worker's
    /// `history` page or `answer` page object, unchanged).
    ///
    /// `payload` is the worker payload `data` object without `request_id`
    /// (one given is replaced by a fresh `q-<uuid>`):
    /// `{"operation": "history", "start", "step", "limit"}` or
    /// `{"operation": "answer", "source", "part", "offset"}`; it is
    /// validated by the worker protocol's rules first
    /// ([`QueryError::Invalid`], nothing sent).
    ///
    /// The worker must be connected with a live identity and advertise
    /// `session-history` / `answer-pages` ([`QueryError::NotConnected`],
    /// [`QueryError::Unsupported`]). At most [`MAX_PENDING`] queries in the
    /// hub and [`MAX_PENDING_PER_SESSION`] per session wait at once
    /// ([`QueryError::Busy`], nothing sent). The query is correlated to the
    /// exact connection it was written on: a connection change fails it at
    /// once ([`QueryError::Disconnected`]); a `*_error` reply is
    /// [`QueryError::Rejected`]; no reply within `deadline` (use
    /// [`QUERY_DEADLINE`]) is [`QueryError::TimedOut`]. Blocks the calling
    /// thread; holds no lock while waiting. Nothing is cached, recorded as
    /// a session request or forwarded to panels.
    pub fn ask(
        &self,
        sessions: &Sessions,
        session: &str,
        payload: &Value,
        deadline: Duration,
    ) -> Result<Value, QueryError> {
        self.ask_or_cancel(
            sessions,
            session,
            payload,
            deadline,
            &crossbeam_channel::never(),
        )
    }

    /// [`Queries::ask`] that also gives up with
    /// [`QueryError::Cancelled`] when `cancel` receives a message or all
    /// its senders are dropped (e.g. the caller's client went away).
    pub fn ask_or_cancel(
        &self,
        sessions: &Sessions,
        session: &str,
        payload: &Value,
        deadline: Duration,
        cancel: &Receiver<()>,
    ) -> Result<Value, QueryError> {
        let started = Instant::now();
        let (kind, request_id, frame) = build_query(payload)?;
        let (writer, pending) = sessions
            .with(session, |s| {
                let link = s
                    .link()
                    .ok_or_else(|| QueryError::NotConnected("no worker is connected".into()))?;
                let worker_id = match (s.identity(), s.worker_id()) {
                    (IdentityState::Live, Some(worker_id)) => worker_id.to_string(),
                    _ => {
                        return Err(QueryError::NotConnected(
                            "the connected worker has not identified itself yet".into(),
                        ))
                    }
                };
                let capability = kind.capability();
                let advertised = s.has_capability(capability);
                if !advertised {
                    return Err(QueryError::Unsupported(format!(
                        "the connected worker does not advertise {capability}"
                    )));
                }
                let pending = self.begin(session, link.conn_id, &worker_id, kind, &request_id)?;
                Ok((link.writer.clone(), pending))
            })
            .ok_or_else(|| QueryError::UnknownSession(session.to_string()))??;
        writer
            .send_text(&frame.to_string())
            .map_err(|err| QueryError::WriteFailed(err.to_string()))?;
        let left = deadline.saturating_sub(started.elapsed());
        match pending.wait_or_cancel(left, cancel) {
            Err(QueryError::TimedOut(_)) => Err(QueryError::TimedOut(deadline)),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn begin(q: &Queries, session: &str, conn: u64, id: &str) -> Result<Pending, QueryError> {
        q.begin(session, conn, "w1", QueryKind::Answer, id)
    }

    #[test]
    fn slots_are_capped_per_session_and_globally() {
        let q = Queries::new();
        // Two per session; the third is refused for the session only.
        let a1 = begin(&q, "a", 1, "a1").unwrap();
        let a2 = begin(&q, "a", 1, "a2").unwrap();
        assert_eq!(
            begin(&q, "a", 1, "a3").unwrap_err(),
            QueryError::Busy {
                scope: BusyScope::Session,
                limit: 2
            }
        );
        assert_eq!(q.pending_in("a"), 2);
        drop(a1);
        assert_eq!(q.pending_in("a"), 1);
        let a3 = begin(&q, "a", 1, "a3").unwrap();
        drop((a2, a3));
        assert_eq!((q.pending(), q.pending_in("a")), (0, 0));

        // 64 in the hub: exactly 64 succeed, the 65th is refused.
        let mut held = Vec::new();
        for i in 0..MAX_PENDING {
            let session = format!("s{}", i / 2);
            held.push(begin(&q, &session, 1, &format!("g{i}")).unwrap());
        }
        assert_eq!(q.pending(), 64);
        assert_eq!(
            begin(&q, "fresh", 1, "g64").unwrap_err(),
            QueryError::Busy {
                scope: BusyScope::Hub,
                limit: 64
            }
        );
        held.pop();
        assert!(begin(&q, "fresh", 1, "g64").is_ok());
        drop(held);
        assert_eq!(q.pending(), 0);
    }

    #[test]
    fn a_duplicate_request_id_is_refused() {
        let q = Queries::new();
        let _a = begin(&q, "a", 1, "same").unwrap();
        assert!(matches!(
            begin(&q, "b", 1, "same"),
            Err(QueryError::Invalid(_))
        ));
    }

    #[test]
    fn replies_are_correlated_by_connection_worker_and_kind() {
        let q = Queries::new();
        let p = begin(&q, "a", 7, "r").unwrap();
        let page = json!({"request_id": "r", "raw": "text"});
        // Another connection, session, worker or kind never satisfies it.
        assert!(!q.resolve("a", 8, "w1", "r", "answer", Some(&page)));
        assert!(!q.resolve("b", 7, "w1", "r", "answer", Some(&page)));
        assert!(!q.resolve("a", 7, "w2", "r", "answer", Some(&page)));
        assert!(!q.resolve("a", 7, "w1", "r", "history", Some(&page)));
        assert!(!q.resolve("a", 7, "w1", "other", "answer", Some(&page)));
        // The right one does, once.
        assert!(q.resolve("a", 7, "w1", "r", "answer", Some(&page)));
        assert!(!q.resolve("a", 7, "w1", "r", "answer", Some(&page)));
        assert_eq!(q.pending_in("a"), 1, "the slot is held until the wait ends");
        assert_eq!(p.wait(Duration::from_secs(1)).unwrap(), page);
        assert_eq!(q.pending(), 0);
    }

    #[test]
    fn error_events_carry_the_workers_code_and_message() {
        let q = Queries::new();
        let p = q.begin("a", 1, "w1", QueryKind::History, "h").unwrap();
        let data = json!({"request_id": "h", "code": "query_queue_full", "message": "busy"});
        assert!(!q.resolve("a", 1, "w1", "h", "answer_error", Some(&data)));
        assert!(q.resolve("a", 1, "w1", "h", "history_error", Some(&data)));
        assert_eq!(
            p.wait(Duration::from_secs(1)).unwrap_err(),
            QueryError::Rejected {
                code: Some("query_queue_full".into()),
                message: "busy".into()
            }
        );
    }

    #[test]
    fn a_connection_change_fails_its_queries_at_once() {
        let q = Queries::new();
        let old = begin(&q, "a", 1, "old").unwrap();
        let other = begin(&q, "b", 1, "other").unwrap();
        let started = Instant::now();
        let waiter = std::thread::spawn(move || old.wait(Duration::from_secs(30)));
        // Most likely lets the waiter block first; the outcome is the same
        // if it has not (the failure is queued on its reply channel).
        #[allow(clippy::disallowed_methods)]
        std::thread::sleep(Duration::from_millis(50));
        // Another connection of the session is not this one.
        assert_eq!(q.fail_connection("a", 2), 0);
        assert_eq!(q.fail_connection("a", 1), 1);
        assert_eq!(waiter.join().unwrap(), Err(QueryError::Disconnected));
        assert!(started.elapsed() < Duration::from_secs(5));
        // A late reply satisfies nothing.
        assert!(!q.resolve("a", 1, "w1", "old", "answer", Some(&json!({}))));
        assert_eq!(q.pending_in("a"), 0);
        // Session b is untouched until its own connection fails.
        assert_eq!(q.fail_connection("b", 1), 1);
        assert_eq!(
            other.wait(Duration::from_secs(1)),
            Err(QueryError::Disconnected)
        );
        assert_eq!(q.pending(), 0);
    }

    #[test]
    fn the_deadline_and_cancellation_release_the_slot() {
        let q = Queries::with_limits(1, 1);
        let p = begin(&q, "a", 1, "t").unwrap();
        let started = Instant::now();
        assert_eq!(
            p.wait(Duration::from_millis(50)),
            Err(QueryError::TimedOut(Duration::from_millis(50)))
        );
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert_eq!(q.pending(), 0);
        // A reply after the timeout is not consumed.
        assert!(!q.resolve("a", 1, "w1", "t", "answer", Some(&json!({}))));

        let p = begin(&q, "a", 1, "c").unwrap();
        let (cancel, cancelled) = crossbeam_channel::bounded::<()>(1);
        cancel.send(()).unwrap();
        assert_eq!(
            p.wait_or_cancel(Duration::from_secs(30), &cancelled),
            Err(QueryError::Cancelled)
        );
        assert!(begin(&q, "a", 1, "next").is_ok());
    }

    #[test]
    fn envelopes_resolve_by_the_echoed_request_id() {
        let q = Queries::new();
        let p = begin(&q, "s", 3, "q-1").unwrap();
        let env = |data: Value| {
            crate::wire::worker::envelope::parse_event(
                &json!({"type": "event", "event": "answer", "session_id": "s",
                    "worker_id": "w1", "request_id": "run-req", "run_id": "", "sequence": 4,
                    "data": data})
                .to_string(),
                "s",
            )
            .unwrap()
        };
        assert!(!q.resolve_envelope("s", 3, &env(json!({"request_id": "q-2"}))));
        assert!(q.resolve_envelope("s", 3, &env(json!({"request_id": "q-1", "raw": "x"}))));
        assert_eq!(p.wait(Duration::from_secs(1)).unwrap()["raw"], "x");
    }

    fn source() -> Value {
        json!({"worker_id": "w", "turn": 0, "step": 1, "commit_sequence": "3",
            "fingerprint": "f"})
    }

    #[test]
    fn queries_are_validated_and_get_a_fresh_request_id() {
        let payload = json!({"operation": "answer", "request_id": "mine", "source": source()});
        let (kind, id, frame) = build_query(&payload).unwrap();
        assert_eq!(kind, QueryKind::Answer);
        assert!(id.starts_with("q-") && id != "mine");
        assert_eq!(frame["data"]["request_id"], id.as_str());
        assert_eq!(frame["type"], "payload");
        let (kind, _, frame) = build_query(&json!({"operation": "history", "limit": 2})).unwrap();
        assert_eq!(kind, QueryKind::History);
        assert_eq!(frame["data"]["limit"], 2);
        for bad in [
            json!({"operation": "message", "content": []}),
            json!({"operation": "compact"}),
            json!({"operation": "history", "limit": 11}),
            json!({"source": source()}),
            json!("answer"),
        ] {
            assert!(
                matches!(build_query(&bad), Err(QueryError::Invalid(_))),
                "{bad}"
            );
        }
    }
}
