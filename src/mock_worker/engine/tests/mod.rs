//! The engine's unit tests: an in-memory storage, helpers that read the
//! emitted frames, and one test per behaviour.

use super::*;

mod queue;
mod tools;
use std::sync::{Arc, Mutex};

/// In-memory storage recording every save.
#[derive(Default)]
struct Recorded {
    saves: Vec<Conversation>,
    archives: Vec<String>,
    fail_saves: bool,
}

#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Recorded>>);

impl Storage for Shared {
    fn save(&mut self, conversation: &Conversation) -> Result<Option<String>, String> {
        let mut memory = self.0.lock().unwrap();
        if memory.fail_saves {
            return Err("disk full".into());
        }
        memory.saves.push(conversation.clone());
        Ok(None)
    }
    fn archive(&mut self, run_id: &str, _markdown: &str) -> Result<String, String> {
        let path = format!("/root/memory/{run_id}/memory.md");
        self.0.lock().unwrap().archives.push(path.clone());
        Ok(path)
    }
    fn cleanup(&mut self, _current: &str) -> Result<(u64, u64), String> {
        Ok((0, 0))
    }
}

fn settings() -> Settings {
    Settings {
        session_id: "demo".into(),
        worker_id: "worker-1".into(),
        model: "mock-flash".into(),
        max_exchanges: 512,
        payload_capacity: 2,
        event_capacity: 1024,
        write_capacity: 4096,
        persistence: true,
        save_on_step: true,
        save_on_run: true,
        save_on_shutdown: true,
        max_archives: 5,
        confirmation_endpoint: true,
        tools_endpoint: true,
        ignore_shutdown: false,
    }
}

fn engine_with(settings: Settings) -> (Engine, Shared) {
    let storage = Shared::default();
    let mut counter = 0;
    let ids = Box::new(move || {
        counter += 1;
        format!("id-{counter}")
    });
    let engine = Engine::new(
        settings,
        Conversation::default(),
        Box::new(storage.clone()),
        ids,
    );
    (engine, storage)
}

fn engine() -> Engine {
    engine_with(settings()).0
}

/// The emitted events as parsed envelopes.
fn events(actions: &[Action]) -> Vec<Value> {
    actions
        .iter()
        .filter_map(|action| match action {
            Action::Emit(text) => Some(serde_json::from_str(text).unwrap()),
            _ => None,
        })
        .collect()
}

fn names(actions: &[Action]) -> Vec<String> {
    events(actions)
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect()
}

fn find(actions: &[Action], name: &str) -> Value {
    events(actions)
        .into_iter()
        .find(|e| e["event"] == name)
        .unwrap_or_else(|| panic!("no {name} in {:?}", names(actions)))
}

/// The exit in `actions`; only frames may follow it (the shell ends the
/// process once they are written).
fn exit_of(actions: &[Action]) -> &Action {
    let at = actions
        .iter()
        .position(|a| matches!(a, Action::Exit { .. }))
        .expect("an exit");
    assert!(
        actions[at + 1..]
            .iter()
            .all(|a| matches!(a, Action::Emit(_))),
        "{actions:?}"
    );
    &actions[at]
}

/// The connection wrote every frame handed out so far; returns what that
/// set off (the admission of a queued request).
fn written(e: &mut Engine) -> Vec<Action> {
    let frames = e.outbox.in_transport();
    e.written(frames)
}

/// A payload that arrives once the hub has read everything before it.
fn send(e: &mut Engine, data: &Value) -> Vec<Action> {
    let mut actions = written(e);
    actions.extend(e.handle_payload(data));
    actions
}

fn message(id: &str, text: &str) -> Value {
    json!({"operation": "message", "request_id": id,
           "content": [{"type": "text", "raw": text, "modality": "text"}]})
}

fn signal(operation: &str) -> Value {
    json!({ "operation": operation })
}

fn cancel(run_id: &str) -> Value {
    json!({"operation": "cancel", "run_id": run_id})
}

#[test]
fn ready_and_status_before_admission_have_empty_ids() {
    let mut e = engine();
    let ready = events(&e.start()).remove(0);
    assert_eq!(ready["event"], "ready");
    assert_eq!(ready["sequence"], 1);
    assert_eq!(
        (ready["request_id"].as_str(), ready["run_id"].as_str()),
        (Some(""), Some(""))
    );
    assert_eq!(ready["data"]["capabilities"], json!(CAPABILITIES));
    let status = events(&e.handle_signal(&signal("status"))).remove(0);
    assert_eq!(status["sequence"], 2);
    assert_eq!(status["data"]["active"], false);
    assert_eq!(status["data"]["loop"]["status"], "idle");
    assert_eq!(status["data"]["storage_failed"], false);
    assert_eq!(status["session_id"], "demo");
    assert_eq!(status["worker_id"], "worker-1");
}

#[test]
fn a_message_runs_to_completion() {
    let mut e = engine();
    e.start();
    let actions = send(&mut e, &message("req-1", "hello"));
    assert_eq!(
        names(&actions),
        [
            "input_admitted",
            "run_started",
            "input_committed",
            "model_response",
            "persisted",
            "run_finished"
        ]
    );
    let all = events(&actions);
    let sequences: Vec<u64> = all
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(sequences, [2, 3, 4, 5, 6, 7]);
    for event in &all {
        assert_eq!(event["request_id"], "req-1");
        assert_eq!(event["run_id"], "id-1");
    }
    assert_eq!(all[0]["data"], json!({"operation": "message"}));
    let response = &all[3]["data"];
    assert_eq!(
        response["content"][0],
        json!({"type": "text", "modality": "text", "raw": "echo: hello"})
    );
    assert_eq!(response["commit_sequence"], "1");
    assert_eq!(response["answer_source"]["worker_id"], "worker-1");
    assert_eq!(
        all[4]["data"],
        json!({"boundary": "run_finished", "format": "json"})
    );
    assert_eq!(
        all[5]["data"],
        json!({"status": "completed", "error": "", "exchanges": 1, "durable": true})
    );
    assert!(actions.iter().any(|a| matches!(a, Action::Note(_))));
    // The ids stay after the run finished.
    let status = events(&e.handle_signal(&signal("status"))).remove(0);
    assert_eq!(
        (status["request_id"].as_str(), status["run_id"].as_str()),
        (Some("req-1"), Some("id-1"))
    );
    assert_eq!(status["data"]["loop"]["status"], "completed");
}

#[test]
fn runs_queue_and_overflow_is_rejected() {
    let mut e = engine();
    let first = send(&mut e, &message("a", "/sleep 500"));
    assert!(first.contains(&Action::Wait {
        run_id: "id-1".into(),
        ms: 500
    }));
    assert!(!names(&first).contains(&"model_response".to_string()));
    assert!(send(&mut e, &message("b", "two")).is_empty());
    assert!(send(&mut e, &message("c", "three")).is_empty());
    let overflow = events(&send(&mut e, &message("d", "four"))).remove(0);
    assert_eq!(overflow["event"], "input_rejected");
    assert_eq!(overflow["request_id"], "d");
    assert_eq!(overflow["run_id"], "");
    assert_eq!(overflow["data"]["code"], "payload_queue_full");
    assert_eq!(overflow["data"]["operation"], "message");
    let status = events(&e.handle_signal(&signal("status"))).remove(0);
    assert_eq!(status["data"]["rejected_payloads"], 1);
    assert_eq!(status["data"]["active"], true);
    assert_eq!(status["data"]["loop"]["status"], "running");
    // A stale delay report is ignored; the real one answers.
    assert!(events(&e.delay_elapsed("nope")).is_empty());
    let rest = e.delay_elapsed("id-1");
    assert_eq!(
        find(&rest, "model_response")["data"]["content"][0]["raw"],
        "echo: /sleep 500"
    );
    assert_eq!(find(&rest, "run_finished")["request_id"], "a");
    // Each queued run is admitted once the frames before it are written.
    assert!(!names(&rest).contains(&"input_admitted".to_string()));
    let second = written(&mut e);
    assert_eq!(find(&second, "run_finished")["request_id"], "b");
    assert!(e.written(0).is_empty());
    let third = written(&mut e);
    assert_eq!(find(&third, "run_finished")["request_id"], "c");
    assert!(written(&mut e).is_empty());
}

#[test]
fn rejections_carry_the_request_and_no_run() {
    let mut e = engine();
    send(&mut e, &message("a", "hi"));
    let duplicate = events(&send(&mut e, &message("a", "again"))).remove(0);
    assert_eq!(duplicate["event"], "input_rejected");
    assert_eq!(duplicate["data"]["code"], "duplicate_request_id");
    assert_eq!(
        (
            duplicate["request_id"].as_str(),
            duplicate["run_id"].as_str()
        ),
        (Some("a"), Some(""))
    );
    let bad = events(&send(
        &mut e,
        &json!({"operation": "message", "request_id": 7, "content": []}),
    ))
    .remove(0);
    assert_eq!(bad["request_id"], "");
    assert_eq!(bad["data"]["request_id"], 7);
    let options = events(&send(
        &mut e,
        &json!({"operation": "continue", "request_id": "o",
                                                   "options": {"sampling": {}}}),
    ))
    .remove(0);
    assert_eq!(options["data"]["code"], "invalid_options");
    // A rejected id was not consumed.
    let later = events(&send(
        &mut e,
        &json!({"operation": "continue", "request_id": "o"}),
    ));
    assert_eq!(later[0]["event"], "input_admitted");
    // The envelope keeps naming the last admitted run.
    assert_eq!(later[0]["request_id"], "o");
}

#[test]
fn continue_needs_a_turn() {
    let mut e = engine();
    let refused = events(&send(
        &mut e,
        &json!({"operation": "continue", "request_id": "c1"}),
    ));
    assert_eq!(refused[0]["event"], "input_rejected");
    assert_eq!(refused[0]["data"]["operation"], "continue");
    send(&mut e, &message("m", "hi"));
    let actions = send(
        &mut e,
        &json!({"operation": "continue", "request_id": "c2"}),
    );
    assert_eq!(
        names(&actions),
        [
            "input_admitted",
            "run_started",
            "model_response",
            "persisted",
            "run_finished"
        ]
    );
    assert_eq!(
        find(&actions, "input_admitted")["data"]["operation"],
        "continue"
    );
    assert_eq!(
        find(&actions, "model_response")["data"]["content"][0]["raw"],
        "continued"
    );
    assert_eq!(e.conversation.turns[0].steps.len(), 2);
}

#[test]
fn cancel_while_sleeping() {
    let mut e = engine();
    send(&mut e, &message("s", "/sleep 60000"));
    let actions = e.handle_signal(&cancel("id-1"));
    assert!(actions.contains(&Action::Abort {
        run_id: "id-1".into()
    }));
    assert_eq!(
        find(&actions, "run_finished")["data"]["status"],
        "cancelled"
    );
    assert!(e.delay_elapsed("id-1").is_empty());
    // The turn was committed without a response.
    assert_eq!(e.conversation.turns[0].steps.len(), 0);
}

#[test]
fn compact_archives_and_clears_the_turns() {
    let (mut e, storage) = engine_with(settings());
    let refused = events(&send(
        &mut e,
        &json!({"operation": "compact", "request_id": "k0"}),
    ));
    assert_eq!(refused[0]["event"], "input_rejected");
    send(&mut e, &message("m1", "one"));
    send(&mut e, &message("m2", "two"));
    let actions = send(&mut e, &json!({"operation": "compact", "request_id": "k1"}));
    assert_eq!(
        names(&actions),
        [
            "input_admitted",
            "run_started",
            "persisted",
            "compact_finished",
            "run_finished"
        ]
    );
    assert_eq!(find(&actions, "persisted")["data"]["boundary"], "compact");
    let compact = find(&actions, "compact_finished")["data"].clone();
    assert_eq!(compact["removed_turns"], 2);
    assert_eq!(compact["durable"], true);
    assert_eq!(compact["memory_file"], "/root/memory/id-3/memory.md");
    assert!(compact["summary"].as_str().unwrap().contains("\"one\""));
    assert_eq!(
        compact["archive_cleanup"],
        json!({"removed_archives": 0, "removed_bytes": 0})
    );
    assert_eq!(compact["revision"], e.conversation.revision);
    assert_eq!(storage.0.lock().unwrap().archives.len(), 1);
    let saved = storage.0.lock().unwrap().saves.last().unwrap().clone();
    assert!(saved.turns.is_empty() && saved.memory.is_some());
    // History is empty, continue works from memory.
    let history = events(&send(
        &mut e,
        &json!({"operation": "history", "request_id": "h"}),
    ))
    .remove(0);
    assert_eq!(history["data"]["total"], 0);
    let cont = send(&mut e, &json!({"operation": "continue", "request_id": "c"}));
    assert_eq!(find(&cont, "run_finished")["data"]["status"], "completed");
    let history = events(&send(
        &mut e,
        &json!({"operation": "history", "request_id": "h2"}),
    ))
    .remove(0);
    assert_eq!(history["data"]["turns"][0]["internal_input"], "continue");
}

#[test]
fn history_and_answer_queries_are_read_only() {
    let mut e = engine();
    let run = send(&mut e, &message("m", "hello"));
    let response = find(&run, "model_response");
    let before = events(&run).last().unwrap()["sequence"].as_u64().unwrap();
    let history = events(&send(
        &mut e,
        &json!({"operation": "history", "request_id": "h", "limit": 5}),
    ))
    .remove(0);
    assert_eq!(history["event"], "history");
    assert_eq!(history["data"]["request_id"], "h");
    assert_eq!(history["data"]["turns"][0]["user"][0]["raw"], "hello");
    assert_eq!(
        history["data"]["turns"][0]["steps"][0]["content"][0]["raw"],
        "echo: hello"
    );
    assert_eq!(history["sequence"].as_u64(), Some(before + 1));
    let bad = events(&send(
        &mut e,
        &json!({"operation": "history", "request_id": "h", "limit": 0}),
    ))
    .remove(0);
    assert_eq!(bad["event"], "history_error");
    assert_eq!(bad["data"]["request_id"], "h");
    let source = response["data"]["answer_source"].clone();
    let answer = events(&send(
        &mut e,
        &json!({"operation": "answer", "request_id": "a",
                                                  "source": source, "part": 0, "offset": 6}),
    ))
    .remove(0);
    assert_eq!(answer["event"], "answer");
    assert_eq!(answer["data"]["raw"], "hello");
    assert_eq!(answer["data"]["done"], true);
    let wrong = events(&send(
        &mut e,
        &json!({"operation": "answer", "request_id": "a2",
                                                 "source": source, "part": 3}),
    ))
    .remove(0);
    assert_eq!(wrong["event"], "answer_error");
    // Queries started no run and consumed no id.
    assert_eq!(e.run_id, "id-1");
}

#[test]
fn big_flood_and_slow_replies() {
    let mut e = engine();
    let big = find(
        &send(&mut e, &message("b", "/big 100000")),
        "model_response",
    );
    assert_eq!(
        big["data"]["content"][0]["raw"].as_str().unwrap().len(),
        100_000
    );
    assert_eq!(run::big_text(130).len(), 130);

    let mut actions = send(&mut e, &message("f", "/flood 1200"));
    let mut responses = 0;
    loop {
        responses += names(&actions)
            .iter()
            .filter(|n| *n == "model_response")
            .count();
        let resume = actions.iter().find_map(|a| match a {
            Action::Resume { run_id } => Some(run_id.clone()),
            _ => None,
        });
        match resume {
            Some(run_id) => actions = e.resume(&run_id),
            None => break,
        }
    }
    assert_eq!(responses, 1201);
    assert_eq!(
        find(&actions, "run_finished")["data"]["status"],
        "completed"
    );

    let slow = send(
        &mut e,
        &json!({"operation": "message", "request_id": "s",
        "options": {"model": {"model": "mock-slow"}},
        "content": [{"type": "text", "raw": "hi", "modality": "text"}]}),
    );
    assert!(slow.contains(&Action::Wait {
        run_id: "id-3".into(),
        ms: SLOW_REPLY_MS
    }));
}

#[test]
fn crash_exits_after_run_started() {
    let mut e = engine();
    let actions = send(&mut e, &message("c", "/crash"));
    assert_eq!(
        names(&actions),
        ["input_admitted", "run_started", "input_committed"]
    );
    assert_eq!(
        exit_of(&actions),
        &Action::Exit {
            code: 3,
            close: false
        }
    );
}

#[test]
fn shutdown_settles_saves_and_exits() {
    let mut ignoring = engine_with(Settings {
        ignore_shutdown: true,
        ..settings()
    })
    .0;
    assert!(events(&ignoring.handle_signal(&signal("shutdown"))).is_empty());

    let mut e = engine();
    send(&mut e, &message("s", "/sleep 60000"));
    send(&mut e, &message("q", "queued"));
    let actions = e.handle_signal(&signal("shutdown"));
    assert_eq!(names(&actions), ["persisted", "run_finished", "persisted"]);
    assert_eq!(
        find(&actions, "run_finished")["data"]["status"],
        "cancelled"
    );
    assert_eq!(events(&actions)[2]["data"]["boundary"], "shutdown");
    assert_eq!(
        exit_of(&actions),
        &Action::Exit {
            code: 0,
            close: true
        }
    );
    // Nothing is admitted afterwards.
    let late = events(&send(&mut e, &message("late", "x"))).remove(0);
    assert_eq!(late["event"], "input_rejected");

    let mut executing = engine();
    tools::run_tool(&mut executing);
    executing.confirmation_decided(
        "id-1",
        Decision {
            approved: true,
            reason: String::new(),
        },
    );
    let actions = executing.terminate();
    assert_eq!(
        find(&actions, "run_finished")["data"]["status"],
        "cancelled"
    );
    assert_eq!(
        exit_of(&actions),
        &Action::Exit {
            code: 0,
            close: true
        }
    );
}

#[test]
fn storage_failure_stops_admission() {
    let (mut e, storage) = engine_with(settings());
    storage.0.lock().unwrap().fail_saves = true;
    let actions = send(&mut e, &message("a", "hi"));
    let error = find(&actions, "error");
    assert_eq!(error["data"]["durable"], false);
    assert_eq!(find(&actions, "run_finished")["data"]["durable"], false);
    let status = events(&e.handle_signal(&signal("status"))).remove(0);
    assert_eq!(status["data"]["storage_failed"], true);
    let refused = events(&send(&mut e, &message("b", "again"))).remove(0);
    assert_eq!(refused["event"], "input_rejected");
}

#[test]
fn bad_signals_are_errors_and_restored_runs_are_failed() {
    let mut e = engine();
    assert_eq!(names(&e.handle_signal(&signal("dance"))), ["error"]);
    assert_eq!(
        names(&e.handle_signal(&json!({"operation": "cancel"}))),
        ["error"]
    );
    assert_eq!(names(&e.handle_signal(&json!(5))), ["error"]);

    let mut conversation = Conversation::default();
    conversation.loop_progress.status = "running".into();
    let restored = Engine::new(
        settings(),
        conversation,
        Box::new(Shared::default()),
        Box::new(String::new),
    );
    assert_eq!(restored.conversation.loop_progress.status, "failed");
}
