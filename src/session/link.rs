//! The worker link's transitions: a worker event connection attaches, its
//! envelopes are observed, it detaches. Each is a method on [`Session`]
//! that changes the identity, statistics, capabilities, run and request
//! state together and says what changed; pure (no clock: `now` is given,
//! no I/O, no locks), so every transition is unit-tested on its own.

use serde_json::Value;

use super::{IdentityState, RequestRecord, RequestState, Session, WorkerLink};
use crate::wire::worker::envelope::Envelope;

impl Session {
    /// A new event connection becomes the session's link. The worker's
    /// identity is unknown until its first envelope; capabilities and
    /// status are the new connection's to tell. Returns the superseded
    /// link, which the caller closes.
    ///
    /// Connection ids are taken before the upgrade is answered, so a
    /// larger id is a later connection. A link older than the current one
    /// (its thread got here late) is refused and handed back (`Err`):
    /// the newest connection always wins, whatever order the threads run.
    pub fn attach_link(&mut self, link: WorkerLink) -> Result<Option<WorkerLink>, WorkerLink> {
        if self.link.as_ref().is_some_and(|l| l.conn_id > link.conn_id) {
            return Err(link);
        }
        let old = self.link.replace(link);
        self.identity = IdentityState::Unknown;
        self.capabilities = None;
        self.status = None;
        Ok(old)
    }

    /// The connection `conn_id` ended. If it is still the current link:
    /// the identity becomes stale, capabilities unknown, and every request
    /// still `sent` becomes `unknown` (nothing is resent); returns the
    /// changed requests. `None` when a newer connection already replaced
    /// it.
    pub fn detach_link(&mut self, conn_id: u64, now: &str) -> Option<Vec<RequestRecord>> {
        if self.link.as_ref().map(|l| l.conn_id) != Some(conn_id) {
            return None;
        }
        self.link = None;
        if self.worker_id.is_some() {
            self.identity = IdentityState::Stale;
        }
        self.capabilities = None;
        let mut changed = Vec::new();
        for record in self.requests.iter_mut() {
            if record.state == RequestState::Sent {
                record.state = RequestState::Unknown;
                record.updated_at = now.to_string();
                changed.push(record.clone());
            }
        }
        Some(changed)
    }

    /// One envelope from the current link: identity (a new `worker_id` is
    /// a new incarnation, which runs nothing of its predecessor's),
    /// sequence gaps and duplicates, the last and the active run,
    /// capabilities and status, and the request a worker admitted or
    /// rejected. Returns that request as it is now, if it changed.
    pub fn observe_envelope(&mut self, env: &Envelope, now: &str) -> Option<RequestRecord> {
        self.stats.events += 1;
        if self.worker_id.as_deref() != Some(env.worker_id()) {
            if self.worker_id.is_some() {
                self.stats.incarnations += 1;
            }
            self.worker_id = Some(env.worker_id().to_string());
            self.identity_since = Some(now.to_string());
            self.last_sequence = None;
            self.active_run = None;
        } else if self.identity != IdentityState::Live {
            self.identity_since = Some(now.to_string());
        }
        self.identity = IdentityState::Live;
        if let Some(seq) = env.sequence {
            let last = self.last_sequence.as_ref().map(|(_, last)| *last);
            match last {
                Some(last) if seq <= last => self.stats.duplicates += 1,
                Some(last) if seq > last + 1 => self.stats.gaps += 1,
                _ => {}
            }
            let newest = last.map_or(seq, |last| last.max(seq));
            match &mut self.last_sequence {
                Some((worker, last)) if *worker == env.worker_id() => *last = newest,
                other => *other = Some((env.worker_id().to_string(), newest)),
            }
        }
        if !env.run_id().is_empty() {
            set_string(&mut self.last_run_id, env.run_id());
            match env.event() {
                "run_started" | "input_admitted" => set_string(&mut self.active_run, env.run_id()),
                "run_finished" if self.active_run.as_deref() == Some(env.run_id()) => {
                    self.active_run = None
                }
                _ => {}
            }
        }
        set_string(&mut self.last_event, env.event());
        set_string(&mut self.last_event_at, now);
        match env.event() {
            "ready" | "status" => {
                let data = env.data();
                if let Some(caps) = data
                    .and_then(|d| d.get("capabilities"))
                    .and_then(Value::as_array)
                {
                    self.capabilities = Some(
                        caps.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect(),
                    );
                }
                if env.event() == "status" {
                    self.status = data.cloned();
                }
                None
            }
            "input_admitted" => {
                let id = env.request_id().to_string();
                self.settle_request(&id, RequestState::Admitted, None, now)
            }
            "input_rejected" => {
                let data = env.data();
                let id = data
                    .and_then(|d| d.get("request_id"))
                    .and_then(Value::as_str)
                    .filter(|id| !id.is_empty())
                    .unwrap_or(env.request_id())
                    .to_string();
                let detail = data.cloned();
                self.settle_request(&id, RequestState::Rejected, detail, now)
            }
            _ => None,
        }
    }

    /// The confirmation mode inputs are sent with, when one was chosen.
    pub fn mode(&self) -> Option<&str> {
        self.mode.as_deref()
    }

    /// Chooses the confirmation mode later inputs are sent with; returns
    /// the previous one.
    pub fn set_mode(&mut self, mode: &str) -> Option<String> {
        self.mode.replace(mode.to_string())
    }

    /// Asks for the worker to be stopped once its active run finishes.
    /// False (nothing recorded) when no run is active: the caller stops it
    /// now.
    pub fn defer_stop(&mut self) -> bool {
        self.stop_after_run = self.active_run.is_some();
        self.stop_after_run
    }

    /// Whether a deferred stop is due (asked for, and no run is active any
    /// more); taking it clears the request.
    pub fn take_due_stop(&mut self) -> bool {
        if self.stop_after_run && self.active_run.is_none() {
            self.stop_after_run = false;
            return true;
        }
        false
    }

    /// Whether a stop waits for the active run to finish.
    #[cfg(test)]
    pub fn stop_deferred(&self) -> bool {
        self.stop_after_run
    }

    /// A protocol error on the current link (counted in the statistics).
    pub fn count_protocol_error(&mut self) {
        self.stats.protocol_errors += 1;
    }

    /// Settles a `sent` request as admitted or rejected; a request that is
    /// not `sent` any more keeps its state (the first outcome wins).
    fn settle_request(
        &mut self,
        request_id: &str,
        state: RequestState,
        detail: Option<Value>,
        now: &str,
    ) -> Option<RequestRecord> {
        let record = self.request_mut(request_id)?;
        if record.state != RequestState::Sent {
            return None;
        }
        record.state = state;
        record.detail = detail;
        record.updated_at = now.to_string();
        Some(record.clone())
    }
}

/// `*slot = Some(value.to_string())`, reusing the slot's allocation.
fn set_string(slot: &mut Option<String>, value: &str) {
    match slot {
        Some(current) => {
            if current != value {
                current.clear();
                current.push_str(value);
            }
        }
        None => *slot = Some(value.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::session::{testkit, RequestRecord};
    use crate::wire::worker::envelope;

    fn session() -> Session {
        testkit::session("life")
    }

    fn link(conn_id: u64) -> WorkerLink {
        WorkerLink {
            conn_id,
            writer: testkit::writer(),
        }
    }

    fn env(event: &str, worker: &str, seq: u64, run: &str, request: &str, data: Value) -> Envelope {
        let frame = json!({"type": "event", "event": event, "session_id": "s",
            "worker_id": worker, "request_id": request, "run_id": run,
            "sequence": seq, "data": data});
        envelope::parse_event(&frame.to_string(), "s").unwrap()
    }

    fn sent(s: &mut Session, id: &str) {
        s.push_request(RequestRecord {
            request_id: id.into(),
            operation: "message".into(),
            state: RequestState::Sent,
            sent_at: "t".into(),
            updated_at: "t".into(),
            detail: None,
        });
    }

    #[test]
    fn attaching_resets_what_the_new_connection_must_tell() {
        let mut s = session();
        assert!(s.attach_link(link(1)).unwrap().is_none());
        s.observe_envelope(
            &env("status", "w", 1, "", "", json!({"capabilities": ["a"]})),
            "t1",
        );
        assert_eq!(s.identity(), IdentityState::Live);
        assert_eq!(s.capabilities(), Some(&["a".to_string()][..]));
        let old = s
            .attach_link(link(2))
            .unwrap()
            .expect("the first link is superseded");
        assert_eq!(old.conn_id, 1);
        assert_eq!(s.identity(), IdentityState::Unknown);
        assert_eq!(s.capabilities(), None);
        assert!(s.status().is_none());
    }

    #[test]
    fn a_late_older_connection_never_supersedes_a_newer_one() {
        let mut s = session();
        s.attach_link(link(5)).unwrap();
        s.observe_envelope(&env("status", "w", 1, "", "", json!({})), "t1");
        let refused = s.attach_link(link(3)).expect_err("older than the current");
        assert_eq!(refused.conn_id, 3);
        assert_eq!(s.link().map(|l| l.conn_id), Some(5));
        assert_eq!(s.identity(), IdentityState::Live, "nothing was reset");
    }

    #[test]
    fn a_new_worker_id_is_a_new_incarnation_without_its_run() {
        let mut s = session();
        s.attach_link(link(1)).unwrap();
        s.observe_envelope(&env("run_started", "w1", 1, "r1", "", json!({})), "t1");
        assert_eq!(s.active_run(), Some("r1"));
        s.observe_envelope(&env("status", "w2", 1, "", "", json!({})), "t2");
        assert_eq!(s.active_run(), None);
        assert_eq!(s.stats().incarnations, 1);
        assert_eq!(s.worker_id(), Some("w2"));
    }

    #[test]
    fn sequence_gaps_and_duplicates_are_counted() {
        let mut s = session();
        s.attach_link(link(1)).unwrap();
        for seq in [1, 2, 2, 5, 3, 6] {
            s.observe_envelope(&env("status", "w", seq, "", "", json!({})), "t");
        }
        assert_eq!((s.stats().gaps, s.stats().duplicates), (1, 2));
        assert_eq!(s.stats().events, 6);
    }

    #[test]
    fn runs_start_and_finish_only_their_own() {
        let mut s = session();
        s.attach_link(link(1)).unwrap();
        s.observe_envelope(&env("input_admitted", "w", 1, "r1", "", json!({})), "t");
        assert_eq!(s.active_run(), Some("r1"));
        s.observe_envelope(&env("run_finished", "w", 2, "r0", "", json!({})), "t");
        assert_eq!(s.active_run(), Some("r1"), "another run's end");
        s.observe_envelope(&env("run_finished", "w", 3, "r1", "", json!({})), "t");
        assert_eq!(s.active_run(), None);
        assert_eq!(s.last_run_id(), Some("r1"));
    }

    #[test]
    fn the_first_outcome_of_a_request_wins() {
        let mut s = session();
        s.attach_link(link(1)).unwrap();
        sent(&mut s, "q1");
        let admitted =
            s.observe_envelope(&env("input_admitted", "w", 1, "r", "q1", json!({})), "t1");
        assert_eq!(admitted.unwrap().state, RequestState::Admitted);
        let again = s.observe_envelope(
            &env(
                "input_rejected",
                "w",
                2,
                "",
                "",
                json!({"request_id": "q1"}),
            ),
            "t2",
        );
        assert!(again.is_none());
        sent(&mut s, "q2");
        let rejected = s.observe_envelope(
            &env(
                "input_rejected",
                "w",
                3,
                "",
                "",
                json!({"request_id": "q2", "code": "x"}),
            ),
            "t3",
        );
        let rejected = rejected.unwrap();
        assert_eq!(rejected.state, RequestState::Rejected);
        // the outcome in words (the message, else the code) and the
        // worker's whole data
        assert_eq!(rejected.detail_text(), "x");
        assert_eq!(rejected.detail.as_ref().unwrap()["code"], "x");
        assert_eq!(rejected.updated_at, "t3");
    }

    #[test]
    fn detaching_the_current_link_orphans_sent_requests_only() {
        let mut s = session();
        s.attach_link(link(1)).unwrap();
        s.observe_envelope(
            &env("status", "w", 1, "", "", json!({"capabilities": []})),
            "t",
        );
        sent(&mut s, "q1");
        sent(&mut s, "q2");
        s.observe_envelope(&env("input_admitted", "w", 2, "r", "q1", json!({})), "t");
        // A connection that was already superseded changes nothing.
        assert!(s.detach_link(7, "t9").is_none());
        assert!(s.connected());
        let changed = s.detach_link(1, "t9").unwrap();
        assert_eq!(changed.len(), 1);
        assert_eq!(changed[0].request_id, "q2");
        assert_eq!(changed[0].state, RequestState::Unknown);
        assert!(!s.connected());
        assert_eq!(s.identity(), IdentityState::Stale);
        assert_eq!(s.capabilities(), None);
    }

    #[test]
    fn a_deferred_stop_waits_for_the_active_run() {
        let mut s = session();
        s.attach_link(link(1)).unwrap();
        assert!(!s.defer_stop(), "no run: stop now");
        assert!(!s.take_due_stop());
        s.observe_envelope(&env("run_started", "w", 1, "r1", "", json!({})), "t");
        assert!(s.defer_stop());
        assert!(s.stop_deferred());
        assert!(!s.take_due_stop(), "the run is still active");
        s.observe_envelope(&env("run_finished", "w", 2, "r1", "", json!({})), "t");
        assert!(s.take_due_stop());
        assert!(!s.take_due_stop(), "taken once");
        assert!(!s.stop_deferred());
    }

    #[test]
    fn the_mode_is_remembered() {
        let mut s = session();
        assert_eq!(s.mode(), None);
        assert_eq!(s.set_mode("approve"), None);
        assert_eq!(s.set_mode("deny").as_deref(), Some("approve"));
        assert_eq!(s.mode(), Some("deny"));
    }

    #[test]
    fn a_link_that_never_spoke_leaves_the_identity_unknown() {
        let mut s = session();
        s.attach_link(link(1)).unwrap();
        s.detach_link(1, "t").unwrap();
        assert_eq!(s.identity(), IdentityState::Unknown);
    }
}
