//! The queue contract through the engine: a hub that reads slowly (or a
//! lost connection, which looks the same from here) never costs a control
//! event, a queued run waits for the backlog before it is admitted, and
//! what was left out is counted in `run_finished` and the status object.

use super::*;

/// A hub that reads the worker's frames only when told to. It keeps every
/// frame handed out, in order, and the flood batches that are due.
#[derive(Default)]
struct SlowHub {
    frames: Vec<Value>,
    unread: usize,
    resumes: Vec<String>,
}

impl SlowHub {
    fn take(&mut self, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Emit(frame) => {
                    self.frames.push(serde_json::from_str(&frame).unwrap());
                    self.unread += 1;
                }
                Action::Resume { run_id } => self.resumes.push(run_id),
                _ => {}
            }
        }
    }

    /// Reads `frames` of the frames handed out (all when more).
    fn read(&mut self, e: &mut Engine, frames: usize) {
        let frames = frames.min(self.unread);
        self.unread -= frames;
        let actions = e.written(frames);
        self.take(actions);
    }

    /// Reads one frame at a time until nothing more comes.
    fn catch_up(&mut self, e: &mut Engine) {
        while self.unread > 0 {
            self.read(e, 1);
            assert!(e.outbox.lifecycle_queued() <= 8, "lifecycle backlog grew");
        }
    }

    /// Runs the due flood batches until none is left.
    fn flood(&mut self, e: &mut Engine) {
        while let Some(run_id) = self.resumes.pop() {
            let actions = e.resume(&run_id);
            self.take(actions);
        }
    }

    /// The first frame of `event` for `request_id`, and where it is.
    fn find(&self, event: &str, request_id: &str) -> (usize, &Value) {
        self.frames
            .iter()
            .enumerate()
            .find(|(_, f)| f["event"] == event && f["request_id"] == request_id)
            .unwrap_or_else(|| panic!("no {event} for {request_id}"))
    }

    fn count(&self, event: &str, run_id: &str) -> u64 {
        self.frames
            .iter()
            .filter(|f| f["event"] == event && f["run_id"] == run_id)
            .count() as u64
    }

    fn assert_no_sequence_gaps(&self) {
        let sequences: Vec<u64> = self
            .frames
            .iter()
            .map(|f| f["sequence"].as_u64().unwrap())
            .collect();
        let expected: Vec<u64> = (1..=self.frames.len() as u64).collect();
        assert_eq!(sequences, expected);
    }
}

fn small(event_capacity: usize, write_capacity: usize) -> Engine {
    engine_with(Settings {
        event_capacity,
        write_capacity,
        payload_capacity: 1,
        ..settings()
    })
    .0
}

#[test]
fn a_prompt_sent_during_a_flood_is_admitted_once_the_backlog_drains() {
    let mut e = small(8, 4);
    let mut hub = SlowHub::default();
    hub.take(e.start());
    hub.read(&mut e, 1);
    // The hub stops reading: the flood outruns it.
    hub.take(e.handle_payload(&message("flood", "/flood 2000")));
    let first = hub.resumes.pop().expect("a flood batch");
    hub.take(e.resume(&first));
    hub.take(e.handle_payload(&message("prompt", "hello")));
    hub.flood(&mut e);
    // The flood is over, but its end and the prompt wait for the hub.
    assert!(hub.frames.iter().all(|f| f["event"] != "run_finished"));
    assert!(e.outbox.lifecycle_queued() <= 8);
    hub.catch_up(&mut e);

    let flood_run = hub.find("input_admitted", "flood").1["run_id"].clone();
    for event in [
        "input_admitted",
        "run_started",
        "input_committed",
        "run_finished",
    ] {
        hub.find(event, "flood");
        hub.find(event, "prompt");
    }
    let (flood_end, finished) = hub.find("run_finished", "flood");
    let (admitted, _) = hub.find("input_admitted", "prompt");
    assert!(
        admitted > flood_end,
        "the prompt was admitted before the backlog drained"
    );
    let reply = hub.find("model_response", "prompt").1;
    assert_eq!(reply["data"]["content"][0]["raw"], "echo: hello");
    assert_eq!(
        hub.find("run_finished", "prompt").1["data"]["status"],
        "completed"
    );

    // Every flood response was either delivered or counted as omitted.
    let omitted = finished["data"]["omitted_display_events"].as_u64().unwrap();
    let delivered = hub.count("model_response", flood_run.as_str().unwrap());
    assert!(omitted > 1900, "{omitted} omitted");
    assert_eq!(omitted + delivered, 2001);
    hub.assert_no_sequence_gaps();

    hub.take(e.handle_signal(&signal("status")));
    let status = hub.frames.last().unwrap()["data"].clone();
    assert_eq!(status["event_queue"]["omitted_display_events"], omitted);
    assert_eq!(status["event_queue"]["count"], 0);
    assert_eq!(status["unreported_rejections"], 0);
}

#[test]
fn output_during_an_admission_wait_is_omitted_and_counted() {
    let mut e = small(8, 2);
    let mut hub = SlowHub::default();
    hub.take(e.start());
    hub.read(&mut e, 1);
    hub.take(e.handle_payload(&message("a", "first")));
    // "a" finished at once, but the hub has read none of it: "b" waits.
    hub.take(e.handle_payload(&message("b", "second")));
    assert!(!hub.frames.iter().any(|f| f["request_id"] == "b"));
    hub.take(e.handle_payload(&json!({"operation": "history", "request_id": "h1"})));
    hub.take(e.handle_signal(&signal("status")));
    // The payload queue (capacity 1) is full: the rejection notice is
    // feedback, omitted too, and counted as unreported.
    hub.take(e.handle_payload(&message("c", "third")));
    hub.catch_up(&mut e);

    assert!(hub.frames.iter().all(|f| f["event"] != "history"));
    assert!(hub.frames.iter().all(|f| f["event"] != "status"));
    assert!(hub.frames.iter().all(|f| f["event"] != "input_rejected"));
    let settled = hub.find("run_finished", "b").1["data"].clone();
    assert_eq!(settled["status"], "completed");
    assert_eq!(settled["omitted_query_events"], 1);
    assert_eq!(settled["coalesced_metadata_events"], 1);
    assert_eq!(settled["omitted_feedback_events"], 1);
    assert_eq!(settled["unreported_rejections"], 1);
    assert_eq!(
        hub.find("run_finished", "a").1["data"],
        json!({"status": "completed", "error": "", "exchanges": 1, "durable": true})
    );
    hub.assert_no_sequence_gaps();

    // Once nothing waits, queries are answered again.
    hub.take(e.handle_payload(&json!({"operation": "history", "request_id": "h2"})));
    hub.read(&mut e, usize::MAX);
    assert_eq!(hub.frames.last().unwrap()["event"], "history");
    hub.take(e.handle_signal(&signal("status")));
    let status = hub.frames.last().unwrap()["data"].clone();
    assert_eq!(status["unreported_rejections"], 1);
    assert_eq!(status["rejected_payloads"], 1);
}

#[test]
fn repeated_status_is_coalesced_behind_a_backlog() {
    let mut e = small(8, 1);
    let mut hub = SlowHub::default();
    hub.take(e.start());
    hub.read(&mut e, 1);
    hub.take(e.handle_payload(&message("s", "/sleep 100")));
    // input_admitted is in the transport; the rest waits in the queue.
    for _ in 0..3 {
        hub.take(e.handle_signal(&signal("status")));
    }
    hub.take(e.delay_elapsed("id-1"));
    hub.catch_up(&mut e);
    let statuses: Vec<&Value> = hub
        .frames
        .iter()
        .filter(|f| f["event"] == "status")
        .collect();
    assert_eq!(statuses.len(), 1);
    // The one left is the latest: it was built after one replacement.
    assert_eq!(
        statuses[0]["data"]["event_queue"]["coalesced_metadata_events"],
        1
    );
    let finished = hub.find("run_finished", "s").1;
    assert_eq!(finished["data"]["coalesced_metadata_events"], 2);
    hub.assert_no_sequence_gaps();
}

#[test]
fn an_exit_hands_over_the_whole_queue() {
    let mut e = small(8, 1);
    let mut hub = SlowHub::default();
    hub.take(e.start());
    hub.read(&mut e, 1);
    hub.take(e.handle_payload(&message("s", "/sleep 60000")));
    let actions = e.handle_signal(&signal("shutdown"));
    exit_of(&actions);
    let after: Vec<String> = actions
        .iter()
        .skip_while(|a| !matches!(a, Action::Exit { .. }))
        .filter_map(|a| match a {
            Action::Emit(frame) => Some(serde_json::from_str::<Value>(frame).unwrap()),
            _ => None,
        })
        .map(|f| f["event"].as_str().unwrap().to_string())
        .collect();
    // The shutdown checkpoint replaced the queued cancellation one.
    assert_eq!(
        after,
        [
            "run_started",
            "input_committed",
            "persisted",
            "run_finished"
        ]
    );
}
