//! The worker's outbound event queue under the worker protocol's queue
//! contract (upstream `docs/core/worker-protocol.md`, "Delivery,
//! backpressure, and reconnects"). Pure: no sockets, clock or threads; the
//! engine offers every event here and the shell hands the frames it takes
//! to the event connection.
//!
//! What pressure does to each [`Class`] of event:
//!
//! - control and correlation events ([`Class::Lifecycle`]) are never
//!   dropped or replaced. They stay bounded because the engine admits a
//!   new run only once [`Outbox::drained`] holds, so at most one run's few
//!   lifecycle events wait at a time;
//! - latest-value metadata ([`Class::Metadata`]) replaces a queued event
//!   with the same event name, request id and run id in place, keeping
//!   that event's sequence number, and has [`METADATA_SLOTS`] slots;
//! - everything else (display previews, query replies, rejection
//!   feedback) shares `worker.event_capacity` slots. What does not fit is
//!   omitted and counted;
//! - metadata and the noncritical classes also share a byte budget that
//!   counts the frames in the transport as well ([`DEFAULT_SOFT_BYTES`]).
//!   A single frame larger than the whole budget still passes when no
//!   other budgeted frame is queued or in the transport, so one oversized
//!   event (`/big`) is never starved, and memory stays bounded by one;
//! - while [`Outbox::pause`] is on (a request waits for the backlog to
//!   drain), every event but a lifecycle one is omitted and counted, so
//!   polling cannot keep the backlog from ever draining.
//!
//! Sequence numbers are assigned when an event is queued; an omitted
//! event consumes none, so omissions leave no gap. The counts since the
//! previous settlement are written into the next settling event
//! (`run_finished`, or an `error` with `durable: false`) as it is queued;
//! cumulative counts are in [`Outbox::snapshot`] for the status object.

use std::collections::VecDeque;

use serde_json::{json, Value};

/// Latest-value metadata slots (`persisted`, `status`, `options`,
/// `export_error`, a nonterminal `error`).
pub(crate) const METADATA_SLOTS: usize = 6;
/// The byte budget shared by metadata and noncritical frames, queued or
/// in the transport.
pub(crate) const DEFAULT_SOFT_BYTES: usize = 8 * 1024 * 1024;

/// How the queue treats an event under pressure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// Control and correlation: `ready`, `input_admitted`, `run_started`,
    /// `input_committed`, `compact_finished`, `run_finished`, an `error`
    /// with `durable: false`, and the `input_rejected` of a request taken
    /// off the payload queue. Never dropped.
    Lifecycle,
    /// `persisted`, `status`, `options`, `export_error` and a nonterminal
    /// `error`: replaced in place by a newer one of the same identity.
    Metadata,
    /// `model_response`, `tool_calls`, `tool_results`: previews of what
    /// the conversation (and `history`) holds in full.
    Display,
    /// Read-only query replies: `history`, `history_error`, `answer`,
    /// `answer_error`.
    Query,
    /// Rejection notices given on arrival (`input_rejected` for a full
    /// payload queue, or while stopping): best effort, and an omitted one
    /// counts as an unreported rejection.
    Feedback,
}

impl Class {
    /// The class of an event by its name (and, for `error`, its
    /// `durable` flag). `input_rejected` is lifecycle here; the engine
    /// offers arrival-time rejections as [`Class::Feedback`] itself. A name
    /// this worker does not emit counts as display, so it stays bounded.
    pub(crate) fn of(event: &str, data: &Value) -> Class {
        match event {
            "ready" | "input_admitted" | "input_rejected" | "run_started" | "input_committed"
            | "compact_finished" | "run_finished" => Class::Lifecycle,
            "error" if settles(event, data) => Class::Lifecycle,
            "persisted" | "status" | "options" | "export_error" | "error" => Class::Metadata,
            "history" | "history_error" | "answer" | "answer_error" => Class::Query,
            _ => Class::Display,
        }
    }
}

/// Whether an event settles the omission counts: `run_finished`, or the
/// terminal `error` of a failed required save.
fn settles(event: &str, data: &Value) -> bool {
    event == "run_finished" || (event == "error" && data.get("durable") == Some(&json!(false)))
}

/// Events left out (or, for metadata, replaced by a newer value).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Omissions {
    pub display: u64,
    pub query: u64,
    /// Rejection notices: each is also an unreported rejection.
    pub feedback: u64,
    /// Metadata replaced in place, or left out for want of a slot.
    pub coalesced: u64,
}

impl Omissions {
    fn note(&mut self, class: Class) {
        match class {
            Class::Display => self.display += 1,
            Class::Query => self.query += 1,
            Class::Feedback => self.feedback += 1,
            Class::Metadata => self.coalesced += 1,
            Class::Lifecycle => unreachable!("lifecycle events are never omitted"),
        }
    }

    /// The nonzero counts under their wire names.
    fn write_into(&self, data: &mut serde_json::Map<String, Value>) {
        for (name, count) in [
            ("omitted_display_events", self.display),
            ("omitted_query_events", self.query),
            ("omitted_feedback_events", self.feedback),
            ("coalesced_metadata_events", self.coalesced),
        ] {
            if count > 0 {
                data.insert(name.into(), json!(count));
            }
        }
    }
}

/// What became of an offered event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offer {
    Queued,
    /// A queued metadata event of the same identity now carries it.
    Replaced,
    /// Left out and counted.
    Omitted,
}

#[derive(Debug)]
struct Entry {
    class: Class,
    event: String,
    request_id: String,
    run_id: String,
    sequence: u64,
    frame: String,
}

/// A frame handed to the transport and not yet reported done.
#[derive(Debug, Clone, Copy)]
struct InTransport {
    bytes: usize,
    /// Counted against the byte budget (not a lifecycle frame).
    budgeted: bool,
}

/// The queue. See the module documentation for the policy.
#[derive(Debug)]
pub(crate) struct Outbox {
    session_id: String,
    worker_id: String,
    /// Slots shared by display, query and feedback events.
    capacity: usize,
    soft_bytes: usize,
    entries: VecDeque<Entry>,
    ordinary: usize,
    metadata: usize,
    lifecycle: usize,
    queued_bytes: usize,
    /// Bytes of budgeted frames, queued or in the transport.
    budget_used: usize,
    transport: VecDeque<InTransport>,
    transport_bytes: usize,
    sequence: u64,
    paused: bool,
    since_settlement: Omissions,
    total: Omissions,
}

impl Outbox {
    /// A queue whose events carry `session_id` and `worker_id`, with
    /// `capacity` noncritical slots (`worker.event_capacity`, at least 1)
    /// and a byte budget of `soft_bytes`.
    pub(crate) fn new(
        session_id: &str,
        worker_id: &str,
        capacity: usize,
        soft_bytes: usize,
    ) -> Outbox {
        Outbox {
            session_id: session_id.to_string(),
            worker_id: worker_id.to_string(),
            capacity: capacity.max(1),
            soft_bytes,
            entries: VecDeque::new(),
            ordinary: 0,
            metadata: 0,
            lifecycle: 0,
            queued_bytes: 0,
            budget_used: 0,
            transport: VecDeque::new(),
            transport_bytes: 0,
            sequence: 0,
            paused: false,
            since_settlement: Omissions::default(),
            total: Omissions::default(),
        }
    }

    /// Offers one event. Its envelope gets the next sequence number only
    /// if it is queued.
    pub(crate) fn offer(
        &mut self,
        class: Class,
        event: &str,
        request_id: &str,
        run_id: &str,
        mut data: Value,
    ) -> Offer {
        if self.skip(class) {
            return Offer::Omitted;
        }
        match class {
            Class::Lifecycle => {
                let settling = settles(event, &data);
                if settling {
                    if let Some(map) = data.as_object_mut() {
                        self.since_settlement.write_into(map);
                        if self.total.feedback > 0 {
                            map.insert("unreported_rejections".into(), json!(self.total.feedback));
                        }
                    }
                }
                let frame = self.envelope(event, request_id, run_id, self.sequence + 1, data);
                self.push(class, event, request_id, run_id, frame);
                if settling {
                    self.since_settlement = Omissions::default();
                }
                Offer::Queued
            }
            Class::Metadata => {
                let same = self.entries.iter().position(|entry| {
                    entry.class == Class::Metadata
                        && entry.event == event
                        && entry.request_id == request_id
                        && entry.run_id == run_id
                });
                if let Some(index) = same {
                    let sequence = self.entries[index].sequence;
                    let frame = self.envelope(event, request_id, run_id, sequence, data);
                    let old = self.entries[index].frame.len();
                    let others = self.budget_used - old;
                    self.note(class);
                    if others > 0 && others + frame.len() > self.soft_bytes {
                        return Offer::Omitted;
                    }
                    self.budget_used = others + frame.len();
                    self.queued_bytes = self.queued_bytes - old + frame.len();
                    self.entries[index].frame = frame;
                    return Offer::Replaced;
                }
                self.admit_budgeted(class, event, request_id, run_id, data)
            }
            Class::Display | Class::Query | Class::Feedback => {
                self.admit_budgeted(class, event, request_id, run_id, data)
            }
        }
    }

    /// Whether an event of `class` would be left out for want of a slot
    /// or because of the pause; if so it is counted as omitted. For events
    /// that are costly to build (a history page) or many (a flood), asked
    /// before building them. The byte budget is checked only by
    /// [`Outbox::offer`].
    pub(crate) fn skip(&mut self, class: Class) -> bool {
        let full = match class {
            Class::Lifecycle => return false,
            Class::Metadata => false, // a replacement needs no slot
            Class::Display | Class::Query | Class::Feedback => self.ordinary >= self.capacity,
        };
        if self.paused || full {
            self.note(class);
            return true;
        }
        false
    }

    /// Hands the oldest queued frame to the transport, unless `window`
    /// frames are already there.
    pub(crate) fn take(&mut self, window: usize) -> Option<String> {
        if self.transport.len() >= window {
            return None;
        }
        let entry = self.entries.pop_front()?;
        *self.slots(entry.class) -= 1;
        let bytes = entry.frame.len();
        self.queued_bytes -= bytes;
        self.transport.push_back(InTransport {
            bytes,
            budgeted: entry.class != Class::Lifecycle,
        });
        self.transport_bytes += bytes;
        Some(entry.frame)
    }

    /// The transport is done with its oldest `frames` frames: written, or
    /// lost with a failed write.
    pub(crate) fn sent(&mut self, frames: usize) {
        for _ in 0..frames {
            let Some(done) = self.transport.pop_front() else {
                return;
            };
            self.transport_bytes -= done.bytes;
            if done.budgeted {
                self.budget_used -= done.bytes;
            }
        }
    }

    /// Nothing is queued and the transport is done with every frame.
    pub(crate) fn drained(&self) -> bool {
        self.entries.is_empty() && self.transport.is_empty()
    }

    /// While paused, every event but a lifecycle one is omitted.
    pub(crate) fn pause(&mut self, paused: bool) {
        self.paused = paused;
    }

    /// Frames handed to the transport and not yet reported done.
    #[cfg(test)]
    pub(crate) fn in_transport(&self) -> usize {
        self.transport.len()
    }

    /// Queued lifecycle events.
    #[cfg(test)]
    pub(crate) fn lifecycle_queued(&self) -> usize {
        self.lifecycle
    }

    /// Omissions since the worker started.
    pub(crate) fn total(&self) -> Omissions {
        self.total
    }

    /// The status object's `event_queue`: what is queued and in the
    /// transport now, and the cumulative omissions.
    pub(crate) fn snapshot(&self) -> Value {
        json!({
            "count": self.entries.len(),
            "bytes": self.queued_bytes,
            "transport_count": self.transport.len(),
            "transport_bytes": self.transport_bytes,
            "omitted_display_events": self.total.display,
            "omitted_query_events": self.total.query,
            "omitted_feedback_events": self.total.feedback,
            "coalesced_metadata_events": self.total.coalesced,
        })
    }

    /// Queues a metadata or noncritical event if it has a slot and fits
    /// the byte budget.
    fn admit_budgeted(
        &mut self,
        class: Class,
        event: &str,
        request_id: &str,
        run_id: &str,
        data: Value,
    ) -> Offer {
        let free = match class {
            Class::Metadata => self.metadata < METADATA_SLOTS,
            _ => self.ordinary < self.capacity,
        };
        let frame = self.envelope(event, request_id, run_id, self.sequence + 1, data);
        let fits = self.budget_used == 0 || self.budget_used + frame.len() <= self.soft_bytes;
        if !free || !fits {
            self.note(class);
            return Offer::Omitted;
        }
        self.budget_used += frame.len();
        self.push(class, event, request_id, run_id, frame);
        Offer::Queued
    }

    fn push(&mut self, class: Class, event: &str, request_id: &str, run_id: &str, frame: String) {
        self.sequence += 1;
        *self.slots(class) += 1;
        self.queued_bytes += frame.len();
        self.entries.push_back(Entry {
            class,
            event: event.to_string(),
            request_id: request_id.to_string(),
            run_id: run_id.to_string(),
            sequence: self.sequence,
            frame,
        });
    }

    fn slots(&mut self, class: Class) -> &mut usize {
        match class {
            Class::Lifecycle => &mut self.lifecycle,
            Class::Metadata => &mut self.metadata,
            Class::Display | Class::Query | Class::Feedback => &mut self.ordinary,
        }
    }

    fn note(&mut self, class: Class) {
        self.since_settlement.note(class);
        self.total.note(class);
    }

    fn envelope(
        &self,
        event: &str,
        request_id: &str,
        run_id: &str,
        sequence: u64,
        data: Value,
    ) -> String {
        json!({
            "type": "event",
            "event": event,
            "session_id": self.session_id,
            "worker_id": self.worker_id,
            "request_id": request_id,
            "run_id": run_id,
            "sequence": sequence,
            "data": data,
        })
        .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outbox(capacity: usize) -> Outbox {
        Outbox::new("demo", "worker-1", capacity, DEFAULT_SOFT_BYTES)
    }

    fn offer(q: &mut Outbox, event: &str, run: &str, data: Value) -> Offer {
        let class = Class::of(event, &data);
        q.offer(class, event, "req", run, data)
    }

    /// Every frame the transport may take now, parsed.
    fn take_all(q: &mut Outbox) -> Vec<Value> {
        std::iter::from_fn(|| q.take(usize::MAX))
            .map(|frame| serde_json::from_str(&frame).unwrap())
            .collect()
    }

    fn names(frames: &[Value]) -> Vec<&str> {
        frames
            .iter()
            .map(|f| f["event"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn events_are_classed_by_name() {
        let none = json!({});
        for (event, class) in [
            ("ready", Class::Lifecycle),
            ("input_admitted", Class::Lifecycle),
            ("input_rejected", Class::Lifecycle),
            ("run_started", Class::Lifecycle),
            ("input_committed", Class::Lifecycle),
            ("compact_finished", Class::Lifecycle),
            ("run_finished", Class::Lifecycle),
            ("persisted", Class::Metadata),
            ("status", Class::Metadata),
            ("options", Class::Metadata),
            ("export_error", Class::Metadata),
            ("error", Class::Metadata),
            ("model_response", Class::Display),
            ("tool_calls", Class::Display),
            ("tool_results", Class::Display),
            ("history", Class::Query),
            ("history_error", Class::Query),
            ("answer", Class::Query),
            ("answer_error", Class::Query),
            ("something_new", Class::Display),
        ] {
            assert_eq!(Class::of(event, &none), class, "{event}");
        }
        let terminal = json!({"message": "disk full", "durable": false});
        assert_eq!(Class::of("error", &terminal), Class::Lifecycle);
        assert_eq!(
            Class::of("error", &json!({"durable": true})),
            Class::Metadata
        );
    }

    #[test]
    fn control_events_are_never_dropped_at_capacity_or_while_paused() {
        let mut q = outbox(2);
        assert_eq!(
            offer(&mut q, "model_response", "r", json!({"n": 1})),
            Offer::Queued
        );
        assert_eq!(
            offer(&mut q, "model_response", "r", json!({"n": 2})),
            Offer::Queued
        );
        assert_eq!(
            offer(&mut q, "model_response", "r", json!({"n": 3})),
            Offer::Omitted
        );
        assert_eq!(offer(&mut q, "history", "r", json!({})), Offer::Omitted);
        // Six metadata identities fill the metadata slots; a seventh is left out.
        for run in ["a", "b", "c", "d", "e", "f"] {
            assert_eq!(offer(&mut q, "status", run, json!({})), Offer::Queued);
        }
        assert_eq!(offer(&mut q, "status", "g", json!({})), Offer::Omitted);
        for event in [
            "input_admitted",
            "run_started",
            "input_committed",
            "run_finished",
        ] {
            assert_eq!(
                offer(&mut q, event, "r", json!({})),
                Offer::Queued,
                "{event}"
            );
        }
        q.pause(true);
        assert_eq!(offer(&mut q, "ready", "", json!({})), Offer::Queued);
        assert_eq!(offer(&mut q, "status", "a", json!({})), Offer::Omitted);
        assert_eq!(q.lifecycle_queued(), 5);
        let frames = take_all(&mut q);
        assert_eq!(
            names(&frames),
            [
                "model_response",
                "model_response",
                "status",
                "status",
                "status",
                "status",
                "status",
                "status",
                "input_admitted",
                "run_started",
                "input_committed",
                "run_finished",
                "ready",
            ]
        );
        // Omitted events took no sequence numbers: no gaps.
        let sequences: Vec<u64> = frames
            .iter()
            .map(|f| f["sequence"].as_u64().unwrap())
            .collect();
        assert_eq!(sequences, (1..=13).collect::<Vec<u64>>());
        assert_eq!(frames[0]["session_id"], "demo");
        assert_eq!(frames[0]["worker_id"], "worker-1");
        assert_eq!(frames[0]["request_id"], "req");
        assert_eq!(frames[0]["type"], "event");
    }

    #[test]
    fn metadata_of_the_same_identity_is_replaced_in_place() {
        let mut q = outbox(8);
        offer(
            &mut q,
            "persisted",
            "r",
            json!({"boundary": "before_tools"}),
        );
        offer(&mut q, "tool_results", "r", json!([]));
        assert_eq!(
            offer(
                &mut q,
                "persisted",
                "r",
                json!({"boundary": "step_finished"})
            ),
            Offer::Replaced
        );
        // Another run's metadata is another identity.
        assert_eq!(
            offer(&mut q, "persisted", "s", json!({"boundary": "x"})),
            Offer::Queued
        );
        let frames = take_all(&mut q);
        assert_eq!(names(&frames), ["persisted", "tool_results", "persisted"]);
        assert_eq!(frames[0]["data"]["boundary"], "step_finished");
        assert_eq!(frames[0]["sequence"], 1, "the replacement keeps its place");
        assert_eq!(frames[1]["sequence"], 2);
        assert_eq!(frames[2]["sequence"], 3);
        // A frame the transport has taken is never replaced.
        assert_eq!(
            offer(&mut q, "persisted", "s", json!({"boundary": "y"})),
            Offer::Queued
        );
        assert_eq!(q.total().coalesced, 1);
        let frame: Value = serde_json::from_str(&q.take(usize::MAX).unwrap()).unwrap();
        assert_eq!(frame["sequence"], 4);
    }

    #[test]
    fn omissions_are_counted_and_settled_into_run_finished() {
        let mut q = outbox(1);
        offer(&mut q, "model_response", "r", json!({}));
        offer(&mut q, "model_response", "r", json!({}));
        offer(&mut q, "tool_calls", "r", json!([]));
        offer(&mut q, "answer", "r", json!({}));
        q.offer(
            Class::Feedback,
            "input_rejected",
            "late",
            "",
            json!({"request_id": "late"}),
        );
        q.pause(true);
        offer(&mut q, "options", "r", json!({}));
        q.pause(false);
        offer(&mut q, "run_finished", "r", json!({"status": "completed"}));
        offer(&mut q, "run_finished", "s", json!({"status": "completed"}));
        let frames = take_all(&mut q);
        assert_eq!(
            names(&frames),
            ["model_response", "run_finished", "run_finished"]
        );
        assert_eq!(
            frames[1]["data"],
            json!({"status": "completed", "omitted_display_events": 2,
                   "omitted_query_events": 1, "omitted_feedback_events": 1,
                   "coalesced_metadata_events": 1, "unreported_rejections": 1})
        );
        // Counts cover the time since the previous settlement; the
        // unreported rejections are cumulative.
        assert_eq!(
            frames[2]["data"],
            json!({"status": "completed", "unreported_rejections": 1})
        );
        let snapshot = q.snapshot();
        assert_eq!(snapshot["omitted_display_events"], 2);
        assert_eq!(snapshot["omitted_query_events"], 1);
        assert_eq!(snapshot["omitted_feedback_events"], 1);
        assert_eq!(snapshot["coalesced_metadata_events"], 1);
        assert_eq!(
            (
                snapshot["count"].as_u64(),
                snapshot["transport_count"].as_u64()
            ),
            (Some(0), Some(3))
        );
    }

    #[test]
    fn a_failed_required_save_settles_the_counts_too() {
        let mut q = outbox(1);
        offer(&mut q, "model_response", "r", json!({}));
        offer(&mut q, "model_response", "r", json!({}));
        assert_eq!(
            offer(
                &mut q,
                "error",
                "r",
                json!({"message": "m", "durable": false})
            ),
            Offer::Queued
        );
        offer(&mut q, "run_finished", "r", json!({"status": "completed"}));
        let frames = take_all(&mut q);
        assert_eq!(frames[1]["data"]["omitted_display_events"], 1);
        assert_eq!(frames[2]["data"], json!({"status": "completed"}));
    }

    #[test]
    fn drained_needs_an_empty_queue_and_a_done_transport() {
        let mut q = outbox(4);
        assert!(q.drained());
        offer(&mut q, "status", "", json!({}));
        offer(&mut q, "model_response", "", json!({}));
        offer(&mut q, "run_finished", "", json!({}));
        assert!(!q.drained());
        assert!(q.take(2).is_some());
        assert!(q.take(2).is_some());
        assert!(q.take(2).is_none(), "the window is full");
        assert_eq!(q.in_transport(), 2);
        q.sent(1);
        assert!(q.take(2).is_some());
        assert!(!q.drained());
        q.sent(5); // more than handed out: ignored
        assert!(q.drained());
        assert_eq!(q.snapshot()["transport_bytes"], 0);
    }

    #[test]
    fn the_byte_budget_counts_the_transport_and_lets_a_lone_large_frame_pass() {
        let mut q = Outbox::new("demo", "worker-1", 100, 1000);
        let large = json!({"raw": "x".repeat(5000)});
        assert_eq!(
            offer(&mut q, "model_response", "r", large.clone()),
            Offer::Queued
        );
        assert!(q.take(8).is_some());
        // The large frame is in the transport: nothing else budgeted fits.
        assert_eq!(
            offer(&mut q, "model_response", "r", json!({})),
            Offer::Omitted
        );
        assert_eq!(offer(&mut q, "status", "r", json!({})), Offer::Omitted);
        // Lifecycle frames are outside the budget.
        assert_eq!(offer(&mut q, "run_finished", "r", large), Offer::Queued);
        q.sent(1);
        assert_eq!(
            offer(&mut q, "model_response", "r", json!({})),
            Offer::Queued
        );
        assert_eq!(
            offer(
                &mut q,
                "model_response",
                "r",
                json!({"raw": "y".repeat(2000)})
            ),
            Offer::Omitted
        );
        assert_eq!(q.total().display, 2);
        assert_eq!(q.total().coalesced, 1);
    }

    #[test]
    fn skipping_counts_without_building() {
        let mut q = outbox(1);
        assert!(!q.skip(Class::Display));
        offer(&mut q, "model_response", "r", json!({}));
        assert!(q.skip(Class::Display));
        assert!(q.skip(Class::Query));
        assert!(!q.skip(Class::Lifecycle));
        assert!(!q.skip(Class::Metadata));
        q.pause(true);
        assert!(q.skip(Class::Metadata));
        let total = q.total();
        assert_eq!((total.display, total.query, total.coalesced), (1, 1, 1));
    }
}
