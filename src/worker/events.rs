//! The worker event connection `GET /agent/<id>/events?token=`: one thread
//! per socket reads frames, parses them (pure `envelope`), applies them to
//! the session under one short lock, and hands the serialized transcript
//! entry to the events file and the panel notifier after unlocking.
//!
//! The thread also pings the worker every `limits.pingIntervalMs` (using
//! the read timeout as its clock) and terminates a socket that misses the
//! pong. It is woken for shutdown by the socket being shut down.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::CloseFrame;
use tungstenite::{Error as WsError, Message};

use super::query::Queries;
use crate::session::{
    Followup, IdentityState, Note, Publisher, Session, Sessions, WorkerHooks, WorkerLink,
};
use crate::util::time;
use crate::wire::jsonw;
use crate::wire::worker::canonical;
use crate::wire::worker::envelope::{self, Envelope};
use crate::ws::{close, Accepted};
use crate::wsconn::sockets::Sockets;

/// Protocol errors one connection may record before it is closed (1008).
pub const MAX_PROTOCOL_ERRORS: u32 = 20;

/// Events whose replies are forwarded live but never retained.
const TRANSIENT: &[&str] = &["history", "history_error", "answer", "answer_error"];

/// What a worker's event socket works with: the registry, the
/// publisher, the socket table, the query registry, the worker hooks, and
/// two limits.
#[derive(Clone)]
pub struct Events {
    pub sessions: Arc<Sessions>,
    pub publisher: Arc<Publisher>,
    pub sockets: Arc<Sockets>,
    pub queries: Arc<Queries>,
    pub hooks: Arc<dyn WorkerHooks>,
    /// `limits.pingIntervalMs`.
    pub ping_interval_ms: u64,
    /// `limits.transcriptBytes`.
    pub transcript_bytes: usize,
}

/// Runs one accepted event socket until it ends. Called on a thread of its
/// own.
///
/// `conn_id` was taken with `Sockets::reserve_id` before the upgrade
/// was answered, so a later connection of the same session always has a
/// larger id and wins the link, whichever thread gets here first.
pub fn run(ev: Events, session_id: String, conn_id: u64, accepted: Accepted) {
    let Accepted { mut socket, writer } = accepted;
    ev.sockets.register_as(conn_id, writer.clone());
    let attached = ev.sessions.with(&session_id, |s| {
        s.attach_link(WorkerLink {
            conn_id,
            writer: writer.clone(),
        })
    });
    let old = match attached {
        None => {
            // The session was deleted between the route check and here.
            writer.close_and_shutdown(close::POLICY, "unknown session");
            ev.sockets.unregister(conn_id);
            return;
        }
        Some(Err(_late)) => {
            log::warn!("session {session_id}: a newer worker event connection is already attached");
            writer.close_and_shutdown(close::SUPERSEDED, "superseded by a new connection");
            ev.sockets.unregister(conn_id);
            return;
        }
        Some(Ok(old)) => old,
    };
    let replaced = old.is_some();
    if let Some(old) = old {
        log::warn!("session {session_id}: a new worker event connection supersedes the old one");
        old.writer
            .close_and_shutdown(close::SUPERSEDED, "superseded by a new connection");
        // Queries sent on the old connection can never be answered.
        ev.queries.fail_connection(&session_id, old.conn_id);
    }
    ev.publisher.notify(Note::Connection {
        session: session_id.clone(),
        connected: true,
        replaced,
    });
    log::info!("session {session_id}: worker connected");
    // `ready` comes once per worker process, so a reconnect asks for status.
    let _ = writer.send_text(r#"{"type":"signal","data":{"operation":"status"}}"#);

    let ping_every = ev.ping_interval_ms;
    let timeout = (ping_every > 0).then(|| Duration::from_millis(ping_every));
    let _ = socket.get_ref().set_read_timeout(timeout);
    let mut awaiting_pong = false;
    let mut protocol_errors = 0u32;
    // Every event's `received_at`, written into one buffer.
    let mut stamp = String::with_capacity(32);
    loop {
        let message = match socket.read() {
            Ok(message) => message,
            Err(WsError::Io(err))
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if awaiting_pong {
                    log::warn!("session {session_id}: worker missed a pong; terminating");
                    break;
                }
                awaiting_pong = writer.send_ping().is_ok();
                continue;
            }
            Err(WsError::Capacity(err)) => {
                record_protocol_error(&ev, &session_id, &format!("frame too large: {err}"));
                writer.close_and_shutdown(close::TOO_BIG, "message too large");
                break;
            }
            Err(WsError::Utf8(_)) => {
                record_protocol_error(&ev, &session_id, "text frame is not UTF-8");
                writer.close_and_shutdown(close::INVALID_PAYLOAD, "invalid UTF-8");
                break;
            }
            Err(err) => {
                log::debug!("session {session_id}: event socket ended: {err}");
                break;
            }
        };
        let problem = match message {
            Message::Text(text) => {
                let text = text.as_str();
                match envelope::parse_event(text, &session_id) {
                    Ok(env) => {
                        ingest(&ev, &session_id, conn_id, env, text.len(), &mut stamp);
                        None
                    }
                    Err(err) => Some(err.to_string()),
                }
            }
            Message::Binary(_) => Some("binary frames are not part of the protocol".to_string()),
            Message::Pong(_) => {
                awaiting_pong = false;
                None
            }
            Message::Ping(_) | Message::Frame(_) | Message::Close(_) => None,
        };
        if let Some(problem) = problem {
            record_protocol_error(&ev, &session_id, &problem);
            protocol_errors += 1;
            if protocol_errors >= MAX_PROTOCOL_ERRORS {
                log::warn!("session {session_id}: {protocol_errors} protocol errors; closing 1008");
                let _ = socket.close(Some(CloseFrame {
                    code: CloseCode::from(close::POLICY),
                    reason: "too many protocol errors".into(),
                }));
                let _ = socket.flush();
                break;
            }
        }
    }
    writer.terminate();
    ev.sockets.unregister(conn_id);
    disconnected(&ev, &session_id, conn_id);
    ev.queries.fail_connection(&session_id, conn_id);
}

fn record_protocol_error(ev: &Events, session_id: &str, problem: &str) {
    log::warn!("session {session_id}: worker protocol error: {problem}");
    ev.sessions.with(session_id, Session::count_protocol_error);
}

/// Fields the hub adds to every transcript entry.
const HUB_FIELDS: &[&str] = &["received_at", "known", "issues", "raw", "hub_sequence"];

/// The entry's JSON without its closing brace and without `hub_sequence`,
/// built outside any lock: the worker's object as `serde_json` encodes it
/// (the frame's own text when it already is that), then the hub's fields.
/// A worker object that already uses one of the hub's names is rebuilt so
/// the entry never carries a duplicate key. One with a missing or
/// ill-typed correlation field (an `issues` entry) is rebuilt with the
/// values the hub read, as the Node hub forwards them: `request_id` and
/// `run_id` strings (empty when unusable), `sequence` a number or null,
/// and `data` (`{}` when missing); the `raw` metadata keeps what was sent.
/// Capacity is left for the `hub_sequence` member spliced in under the
/// lock. Also returns where the event name is in the text (empty when it
/// has an escape).
fn entry_prefix(env: &Envelope, frame_bytes: usize, now: &str) -> (String, Range<usize>) {
    let rebuilt;
    let clash = env.contains_any_key(HUB_FIELDS);
    let object = if clash || !env.issues.is_empty() {
        let mut object = env.object().clone();
        for key in HUB_FIELDS {
            object.remove(*key);
        }
        if !env.issues.is_empty() {
            object.insert("request_id".into(), json!(env.request_id()));
            object.insert("run_id".into(), json!(env.run_id()));
            object.insert("sequence".into(), json!(env.sequence));
            if !object.contains_key("data") {
                object.insert("data".into(), json!({}));
            }
        }
        rebuilt = Value::Object(object).to_string();
        rebuilt.as_str()
    } else {
        env.json()
    };
    let event = match env.event_range() {
        Some(range) if !clash && env.issues.is_empty() => range,
        // The rebuilt text (or the full path's) is serde_json's own, so
        // the scanner finds its members.
        _ => event_range_in(object).unwrap_or(0..0),
    };
    let mut text = String::with_capacity(object.len() + 320 + SEQUENCE_ROOM);
    text.push_str(&object[..object.len() - 1]); // the object's closing brace
    if text.len() > 1 {
        text.push(',');
    }
    text.push_str("\"received_at\":");
    jsonw::push_string(&mut text, now);
    text.push_str(if env.known {
        ",\"known\":true,\"issues\":"
    } else {
        ",\"known\":false,\"issues\":"
    });
    if env.issues.is_empty() {
        text.push_str("[]");
    } else {
        text.push_str(&serde_json::to_string(&env.issues).unwrap_or_else(|_| "[]".into()));
    }
    text.push_str(",\"raw\":");
    envelope::write_raw_metadata(env, frame_bytes, &mut text);
    (text, event)
}

/// Where the `event` member's string is in an object's canonical text,
/// between its quotes, when it has no escape.
fn event_range_in(object: &str) -> Option<Range<usize>> {
    let canonical = canonical::canonical_object(object)?;
    let m = canonical
        .members
        .iter()
        .find(|m| m.plain_key(&canonical.text) == Some("event"))?;
    m.plain_string(&canonical.text)?;
    Some(m.value.start + 1..m.value.end - 1)
}

/// Room for `,"hub_sequence":18446744073709551615}`.
const SEQUENCE_ROOM: usize = 40;

/// Completes an entry prefix with its `hub_sequence`.
fn finish_entry(mut prefix: String, seq: u64) -> Arc<str> {
    prefix.push_str(",\"hub_sequence\":");
    jsonw::push_u64(&mut prefix, seq);
    prefix.push('}');
    prefix.into()
}

/// Applies one parsed envelope to its session and publishes it. The entry
/// is serialized before the lock; under it only `hub_sequence` is spliced.
fn ingest(
    ev: &Events,
    session_id: &str,
    conn_id: u64,
    env: Envelope,
    frame_bytes: usize,
    stamp: &mut String,
) {
    time::now_rfc3339_cached(stamp);
    let now: &str = stamp;
    let mono = time::mono_millis();
    let transient = TRANSIENT.contains(&env.event());
    let (prefix, event) = entry_prefix(&env, frame_bytes, now);
    // The events whose `data` the session state reads: parse it before the
    // lock (a headless child's projection parses under it, on first use).
    if matches!(env.event(), "ready" | "status" | "input_rejected") {
        let _ = env.data();
    }
    // An entry too large for the ring is kept as an omission record; a
    // model response's answer source goes into it, so the complete answer
    // stays reachable (seed 002). Read before the lock, only then.
    let source =
        if env.event() == "model_response" && prefix.len() + SEQUENCE_ROOM > ev.transcript_bytes {
            kept_answer_source(&env)
        } else {
            None
        };
    let published = ev.sessions.with(session_id, |s| {
        let was_live = s.identity() == IdentityState::Live;
        s.meter_event(mono);
        let request_change = s.observe_envelope(&env, now);
        // Capabilities, status and identity are part of the description
        // every panel lists.
        let describe = !was_live || matches!(env.event(), "ready" | "status");
        // A headless child's events are consumed transiently (seed 003).
        let followup = ev.hooks.event(s, &env, now);
        // A transient reply is stamped with the current sequence, which it
        // does not consume: retained entries stay contiguous.
        let retained = !transient && !s.is_headless();
        let (seq, json) = if retained {
            s.retain_event(
                |seq| finish_entry(prefix, seq),
                |seq, bytes| omission_record(seq, &env, bytes, source.as_ref()),
            )
        } else {
            let latest = s.transcript().latest();
            (latest, finish_entry(prefix, latest))
        };
        (
            seq,
            retained,
            json,
            request_change,
            s.events_file().cloned(),
            describe,
            followup,
        )
    });
    let Some((seq, retained, json, request_change, file, describe, followup)) = published else {
        return;
    };
    let describe = describe || followup.changed;
    followup.run();
    if let (true, Some(file)) = (retained, file) {
        file.write_record(&json);
    }
    if let Some(request) = request_change {
        ev.publisher.notify(Note::Request {
            session: session_id.to_string(),
            request,
        });
    }
    // A reply to one of the hub's own queries goes to its waiter only.
    let consumed = transient && ev.queries.resolve_envelope(session_id, conn_id, &env);
    if !consumed {
        ev.publisher.notify(Note::Event {
            session: session_id.to_string(),
            hub_seq: seq,
            retained,
            json,
            event,
        });
    }
    if describe {
        ev.publisher.notify(Note::SessionChanged {
            session: session_id.to_string(),
        });
    }
}

/// Largest answer source an omission record carries (its five fields are
/// far smaller; a larger value is not a usable source).
const MAX_KEPT_SOURCE: usize = 1024;

/// A model response's `answer_source` when it is an object of at most
/// [`MAX_KEPT_SOURCE`] encoded bytes.
fn kept_answer_source(env: &Envelope) -> Option<Value> {
    let source = env.data()?.get("answer_source")?;
    let small = source.is_object() && serde_json::to_string(source).ok()?.len() <= MAX_KEPT_SOURCE;
    small.then(|| source.clone())
}

/// The record kept in place of an envelope larger than the whole ring:
/// the envelope's correlation fields (so it is still a worker envelope to
/// a client), `data: null`, what was left out, and a model response's
/// `answer_source` when it had one.
fn omission_record(seq: u64, env: &Envelope, bytes: usize, source: Option<&Value>) -> Arc<str> {
    let mut record = json!({
        "type": "event",
        "event": env.event(),
        "session_id": env.session_id(),
        "worker_id": env.worker_id(),
        "request_id": env.request_id(),
        "run_id": env.run_id(),
        "sequence": env.sequence,
        "data": null,
        "hub_sequence": seq,
        "display_omitted": true,
        "bytes": bytes,
    });
    if let Some(source) = source {
        record["answer_source"] = source.clone();
    }
    record.to_string().into()
}

/// Clears the link if this connection is still the current one: identity
/// becomes stale, capabilities unknown, unsettled requests `unknown`.
fn disconnected(ev: &Events, session_id: &str, conn_id: u64) {
    let now = time::now_rfc3339();
    let mut followup = Followup::default();
    let changed = ev.sessions.with(session_id, |s| {
        let changed = s.detach_link(conn_id, &now)?;
        followup = ev.hooks.disconnected(s, &now);
        Some(changed)
    });
    followup.run();
    if let Some(Some(changed)) = changed {
        log::info!("session {session_id}: worker disconnected");
        for request in changed {
            ev.publisher.notify(Note::Request {
                session: session_id.to_string(),
                request,
            });
        }
        ev.publisher.notify(Note::Connection {
            session: session_id.to_string(),
            connected: false,
            replaced: false,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(object: Value) -> Envelope {
        envelope::parse_event(&object.to_string(), "s").unwrap()
    }

    #[test]
    fn entry_prefix_appends_hub_fields_without_duplicates() {
        let env = parsed(
            json!({"type": "event", "event": "status", "session_id": "s",
            "worker_id": "w", "request_id": "", "run_id": "", "sequence": 1, "data": {"a": 1}}),
        );
        let text = format!("{},\"hub_sequence\":7}}", entry_prefix(&env, 1, "t").0);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["data"], json!({"a": 1}));
        assert_eq!(v["received_at"], "t");
        assert_eq!(v["hub_sequence"], 7);
        assert_eq!(v["raw"], envelope::raw_metadata(&env, 1));

        // A worker that sends a field with a hub name gets no duplicate key.
        let env = parsed(
            json!({"type": "event", "event": "status", "session_id": "s",
            "worker_id": "w", "request_id": "", "run_id": "", "sequence": 1, "data": {},
            "received_at": "forged", "hub_sequence": 999}),
        );
        let text = format!("{},\"hub_sequence\":8}}", entry_prefix(&env, 0, "real").0);
        // (`raw` shows the worker's members, nested.)
        let top =
            crate::wire::worker::canonical::canonical_object(&text).expect("no duplicate keys");
        let keys: Vec<&str> = top.members.iter().map(|m| &text[m.key.clone()]).collect();
        assert_eq!(keys.iter().filter(|k| **k == "\"received_at\"").count(), 1);
        assert_eq!(keys.iter().filter(|k| **k == "\"hub_sequence\"").count(), 1);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (v["received_at"].clone(), v["hub_sequence"].clone()),
            (json!("real"), json!(8))
        );
    }

    #[test]
    fn ill_formed_correlation_fields_are_forwarded_as_the_hub_read_them() {
        let env = parsed(
            json!({"type": "event", "event": "status", "session_id": "s",
            "worker_id": "w", "request_id": 5, "sequence": "x"}),
        );
        assert!(!env.issues.is_empty());
        let text = format!("{},\"hub_sequence\":3}}", entry_prefix(&env, 0, "t").0);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["request_id"], "");
        assert_eq!(v["run_id"], "");
        assert_eq!(v["sequence"], Value::Null);
        assert_eq!(v["data"], json!({}));
        assert_eq!(v["issues"].as_array().unwrap().len(), env.issues.len());
        // what was sent stays in `raw`
        assert_eq!(v["raw"], envelope::raw_metadata(&env, 0));
        assert!(v["raw"].to_string().contains('5'), "{}", v["raw"]);
        // a well-formed frame is kept as sent
        let env = parsed(
            json!({"type": "event", "event": "status", "session_id": "s",
            "worker_id": "w", "request_id": "", "run_id": "", "sequence": 1, "data": 3}),
        );
        let text = format!("{},\"hub_sequence\":4}}", entry_prefix(&env, 0, "t").0);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["data"], 3);
        assert_eq!(v["sequence"], 1);
    }

    #[test]
    fn the_event_name_is_found_in_the_entry_whatever_path_built_it() {
        let frame = |extra: &str| {
            format!(
                "{{\"type\":\"event\",\"data\":{{\"event\":\"decoy\"}},\"event\":\"run_finished\",\
                 \"session_id\":\"s\",\"worker_id\":\"w\",\"request_id\":\"\",\"run_id\":\"\",\
                 \"sequence\":1{extra}}}"
            )
        };
        for text in [
            frame(""),                                                 // canonical
            frame(",\"note\": \"spaced\""), // whitespace: canonical after stripping
            frame(",\"n\":1e5"),            // the full path
            frame(",\"raw\":1"),            // a hub name: rebuilt
            frame("").replace("\"sequence\":1", "\"sequence\":\"x\""), // an issue: rebuilt
        ] {
            let env = envelope::parse_event(&text, "s").unwrap();
            let (prefix, event) = entry_prefix(&env, text.len(), "t");
            assert_eq!(&prefix[event], "run_finished", "{text}");
        }
        // A name with an escape is never one the hub acts on: empty.
        let text = frame("").replace("run_finished", "run\\nfinished");
        let env = envelope::parse_event(&text, "s").unwrap();
        let (prefix, event) = entry_prefix(&env, text.len(), "t");
        assert!(event.is_empty() && prefix.get(event).is_some());
    }
}
