//! Tool calls: `/run` confirmations and commands, the remote-tool
//! triggers (`/plan`, subagent calls), cancellation while calling, and the
//! exchange budget of a tool run.

use super::*;

/// The events of a message run up to its tool calls.
const PROPOSED: [&str; 6] = [
    "input_admitted",
    "run_started",
    "input_committed",
    "model_response",
    "tool_calls",
    "persisted",
];

/// A tool batch of `results` results settled and the run completed
/// after its second exchange.
fn assert_settled(done: &[Action], results: usize) {
    assert_eq!(
        names(done),
        [
            "tool_results",
            "persisted",
            "model_response",
            "persisted",
            "run_finished"
        ]
    );
    assert_eq!(
        find(done, "tool_results")["data"].as_array().map(Vec::len),
        Some(results)
    );
    assert_eq!(
        find(done, "model_response")["data"]["content"][0]["raw"],
        format!("finished after {results} tool result(s)")
    );
    let finished = find(done, "run_finished")["data"].clone();
    assert_eq!(
        (finished["status"].as_str(), finished["exchanges"].as_u64()),
        (Some("completed"), Some(2))
    );
}

pub(super) fn run_tool(e: &mut Engine) -> (Vec<Action>, ConfirmRequest) {
    let actions = send(e, &message("t", "/run echo hi"));
    let confirm = actions
        .iter()
        .find_map(|a| match a {
            Action::Confirm(request) => Some(request.clone()),
            _ => None,
        })
        .expect("a confirmation");
    (actions, confirm)
}

#[test]
fn approved_tool_calls_run_the_command() {
    let mut e = engine();
    let (actions, confirm) = run_tool(&mut e);
    assert_eq!(names(&actions), PROPOSED);
    let call = json!({"id": "call-1", "name": "run_command", "arguments": {"command": "echo hi"},
                      "type": "serial_write", "security": "require_confirm"});
    assert_eq!(
        find(&actions, "model_response")["data"]["invokes"],
        json!([call])
    );
    assert_eq!(find(&actions, "tool_calls")["data"], json!([call]));
    assert_eq!(
        find(&actions, "persisted")["data"]["boundary"],
        "before_tools"
    );
    assert_eq!(confirm.frame["type"], "confirmation_request");
    assert_eq!(
        confirm.frame["data"],
        json!({"worker_id": "worker-1", "session_id": "demo", "run_id": "id-1",
               "confirmation_id": "id-2", "call": call})
    );
    let approved = e.confirmation_decided(
        "id-1",
        Decision {
            approved: true,
            reason: "ok".into(),
        },
    );
    assert_eq!(
        approved,
        [Action::Execute {
            run_id: "id-1".into(),
            command: "echo hi".into()
        }]
    );
    let output = ToolOutput {
        raw: "hi\n".into(),
        exit_code: Some(0),
        ..ToolOutput::default()
    };
    let done = e.command_finished("id-1", output);
    assert_settled(&done, 1);
    let result = &find(&done, "tool_results")["data"][0];
    assert_eq!(result["query"], call);
    assert_eq!(result["output"]["raw"], "hi\n");
    assert_eq!(result["extras"], json!({"exit_code": 0}));
}

#[test]
fn denied_tool_calls_still_complete() {
    let mut e = engine();
    run_tool(&mut e);
    let done = e.confirmation_decided(
        "id-1",
        Decision {
            approved: false,
            reason: "no way".into(),
        },
    );
    assert!(!done.iter().any(|a| matches!(a, Action::Execute { .. })));
    let result = &find(&done, "tool_results")["data"][0];
    assert_eq!(result["extras"]["error"]["code"], "security_check");
    assert_eq!(result["extras"]["error"]["message"], "no way");
    assert!(result["output"]["raw"].as_str().unwrap().contains("denied"));
    assert_eq!(find(&done, "run_finished")["data"]["status"], "completed");
}

#[test]
fn local_policies_skip_the_confirmation_socket() {
    let mut e = engine();
    let approve = send(
        &mut e,
        &json!({"operation": "message", "request_id": "a",
        "options": {"confirmation": {"mode": "approve"}},
        "content": [{"type": "text", "raw": "/run true", "modality": "text"}]}),
    );
    assert!(approve.contains(&Action::Execute {
        run_id: "id-1".into(),
        command: "true".into()
    }));
    assert!(!approve.iter().any(|a| matches!(a, Action::Confirm(_))));
    e.command_finished("id-1", ToolOutput::default());
    let deny = send(
        &mut e,
        &json!({"operation": "message", "request_id": "d",
        "options": {"confirmation": {"mode": "deny"}},
        "content": [{"type": "text", "raw": "/run true", "modality": "text"}]}),
    );
    assert_eq!(find(&deny, "run_finished")["data"]["status"], "completed");
    assert!(!deny
        .iter()
        .any(|a| matches!(a, Action::Execute { .. } | Action::Confirm(_))));
    let options = events(&e.handle_signal(&signal("options"))).remove(0);
    assert_eq!(options["data"]["confirmation"]["current"]["mode"], "deny");
    assert_eq!(
        options["data"]["tools"],
        json!({"available": [], "current": {}})
    );
    assert_eq!(options["data"]["models"][0], json!({"name": "mock-flash"}));

    let mut none = engine_with(Settings {
        confirmation_endpoint: false,
        ..settings()
    })
    .0;
    let denied = send(&mut none, &message("x", "/run true"));
    assert_eq!(find(&denied, "run_finished")["data"]["status"], "completed");
    assert!(
        find(&denied, "tool_results")["data"][0]["extras"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no confirmation endpoint")
    );
}

#[test]
fn cancel_while_confirming_never_runs_the_command() {
    let mut e = engine();
    run_tool(&mut e);
    let stale = e.handle_signal(&cancel("other-run"));
    assert_eq!(names(&stale), ["status"]);
    let actions = e.handle_signal(&cancel("id-1"));
    assert!(actions.contains(&Action::Abort {
        run_id: "id-1".into()
    }));
    assert_eq!(
        names(&actions),
        [
            "status",
            "tool_results",
            "persisted",
            "persisted",
            "run_finished"
        ]
    );
    let finished = find(&actions, "run_finished");
    assert_eq!(finished["data"]["status"], "cancelled");
    assert_eq!(finished["data"]["durable"], true);
    // The late decision is ignored.
    assert!(e
        .confirmation_decided(
            "id-1",
            Decision {
                approved: true,
                reason: String::new()
            }
        )
        .is_empty());
}

#[test]
fn cancel_while_executing_lets_the_command_settle() {
    let mut e = engine();
    run_tool(&mut e);
    e.confirmation_decided(
        "id-1",
        Decision {
            approved: true,
            reason: String::new(),
        },
    );
    assert_eq!(names(&e.handle_signal(&cancel("id-1"))), ["status"]);
    let done = e.command_finished(
        "id-1",
        ToolOutput {
            raw: "x".into(),
            exit_code: Some(0),
            ..Default::default()
        },
    );
    assert_eq!(
        names(&done),
        ["tool_results", "persisted", "persisted", "run_finished"]
    );
    assert_eq!(find(&done, "run_finished")["data"]["status"], "cancelled");
}

fn remote(actions: &[Action]) -> RemoteCall {
    actions
        .iter()
        .find_map(|a| match a {
            Action::Remote(call) => Some(call.clone()),
            _ => None,
        })
        .expect("a remote call")
}

/// The `tool_request` frame of the first run (`id-1`).
fn first_request(request_id: &str, arguments: Value) -> Value {
    json!({"type": "tool_request", "data": {
        "worker_id": "worker-1", "session_id": "demo", "run_id": "id-1",
        "request_id": request_id, "arguments": arguments}})
}

#[test]
fn plan_triggers_call_the_tools_listener() {
    let mut e = engine();
    let actions = send(&mut e, &message("p", "/plan # Steps\n- [ ] one"));
    assert_eq!(
        names(&actions),
        ["input_admitted", "run_started", "input_committed"]
    );
    let call = remote(&actions);
    assert_eq!(call.route, "plan/replace");
    assert_eq!(
        call.frame,
        first_request("p", json!({"markdown": "# Steps\n- [ ] one"}))
    );
    // Queued input waits behind the call.
    assert!(send(&mut e, &message("q", "later")).is_empty());
    let done = e.remote_finished("id-1", "plan/replace succeeded: {}".into());
    let response = find(&done, "model_response");
    assert_eq!(
        response["data"]["content"][0]["raw"],
        "plan/replace succeeded: {}"
    );
    assert_eq!(find(&done, "run_finished")["data"]["status"], "completed");
    // It is admitted once the finished run's frames are written.
    assert!(!names(&done).contains(&"input_admitted".to_string()));
    assert!(names(&written(&mut e)).contains(&"input_admitted".to_string()));

    let read = send(&mut e, &message("r", "/plan-read please"));
    let call = remote(&read);
    assert_eq!(call.route, "plan/read");
    assert_eq!(
        call.frame["data"]["arguments"],
        json!({"operation": "read"})
    );
}

/// Cancels a run whose remote call `text` started: the socket is
/// dropped, the run ends cancelled and a late outcome is ignored.
fn cancel_a_call(text: &str) -> Vec<Action> {
    let mut e = engine();
    send(&mut e, &message("p", text));
    let actions = e.handle_signal(&cancel("id-1"));
    assert!(actions.contains(&Action::Abort {
        run_id: "id-1".into()
    }));
    assert_eq!(
        find(&actions, "run_finished")["data"]["status"],
        "cancelled"
    );
    assert!(e.remote_finished("id-1", "late".into()).is_empty());
    actions
}

/// Runs `text` without a remote-tools endpoint: no exchange, and the
/// run completes.
fn call_without_an_endpoint(text: &str) -> Vec<Action> {
    let mut none = engine_with(Settings {
        tools_endpoint: false,
        ..settings()
    })
    .0;
    let actions = send(&mut none, &message("p", text));
    assert!(!actions.iter().any(|a| matches!(a, Action::Remote(_))));
    assert_eq!(
        find(&actions, "run_finished")["data"]["status"],
        "completed"
    );
    actions
}

#[test]
fn remote_calls_can_be_cancelled_and_need_an_endpoint() {
    cancel_a_call("/plan x");
    let actions = call_without_an_endpoint("/plan x");
    assert!(
        find(&actions, "model_response")["data"]["content"][0]["raw"]
            .as_str()
            .unwrap()
            .contains("no hub_remote_call endpoint")
    );

    // Subagent calls settle every call of the batch as failed.
    let actions = cancel_a_call("/subagent-repeat clean-fork {}");
    let results = find(&actions, "tool_results")["data"].clone();
    assert_eq!(results.as_array().unwrap().len(), 2);
    for result in results.as_array().unwrap() {
        assert_eq!(
            result["output"]["raw"],
            "subagent/clean-fork failed: cancelled before a decision"
        );
    }
    let actions = call_without_an_endpoint("/stop-child s");
    assert_eq!(
        find(&actions, "tool_results")["data"][0]["output"]["raw"],
        "subagent/send failed: no hub_remote_call endpoint is configured"
    );
}

#[test]
fn subagent_triggers_are_trusted_tool_calls() {
    let mut e = engine();
    let actions = send(&mut e, &message("f", "/fork"));
    assert_eq!(names(&actions), PROPOSED);
    assert!(!actions.iter().any(|a| matches!(a, Action::Confirm(_))));
    let invoke = json!({"id": "call-1", "name": "subagent_fork", "arguments": {},
                        "type": "serial_write", "security": "trusted"});
    assert_eq!(find(&actions, "tool_calls")["data"], json!([invoke]));
    assert_eq!(
        find(&actions, "model_response")["data"]["invokes"],
        json!([invoke])
    );
    let call = remote(&actions);
    assert_eq!(call.route, "subagent/clean-fork");
    assert_eq!(call.frame, first_request("f", json!({})));
    let outcome =
        r#"subagent/clean-fork succeeded: {"subagent_id":"subagent-1","lifecycle":"preparing"}"#;
    let done = e.remote_finished("id-1", outcome.into());
    assert_settled(&done, 1);
    assert_eq!(
        find(&done, "tool_results")["data"],
        json!([{"query": invoke,
                "output": {"type": "text", "modality": "text", "raw": outcome}}])
    );
    // The results are committed with the step, as for `/run`.
    assert_eq!(e.conversation.turns[0].steps[0].tool_results.len(), 1);

    let sent = send(&mut e, &message("s", "/send subagent-1 do it"));
    let call = remote(&sent);
    assert_eq!(call.route, "subagent/send");
    assert_eq!(call.frame["data"]["request_id"], "s");
    assert_eq!(
        call.frame["data"]["arguments"],
        json!({"subagent_id": "subagent-1", "operation": "message",
               "content": [{"type": "text", "modality": "text", "raw": "do it"}]})
    );
    assert_eq!(
        find(&sent, "tool_calls")["data"][0]["arguments"],
        json!({"subagent_id": "subagent-1", "operation": "message", "request": "do it"})
    );
    let rejected =
        r#"subagent/send rejected: {"code":"not_implemented","message":"no such route"}"#;
    let done = e.remote_finished("id-2", rejected.into());
    assert_eq!(
        find(&done, "tool_results")["data"][0]["output"]["raw"],
        rejected
    );

    let receive = send(&mut e, &message("r", "/receive subagent-1 0 5"));
    let call = remote(&receive);
    assert_eq!(
        call.frame["data"]["arguments"],
        json!({"subagent_id": "subagent-1", "cursor": 0, "limit": 5})
    );
    assert_eq!(find(&receive, "tool_calls")["data"][0]["type"], "read_only");
}

#[test]
fn subagent_repeats_reuse_the_request_id() {
    let mut e = engine();
    let actions = send(
        &mut e,
        &message(
            "rep",
            r#"/subagent-repeat send {"subagent_id":"s","operation":"stop"}"#,
        ),
    );
    let calls = find(&actions, "tool_calls")["data"].clone();
    assert_eq!(calls.as_array().unwrap().len(), 2);
    assert_eq!(
        (calls[0]["id"].as_str(), calls[1]["id"].as_str()),
        (Some("call-1"), Some("call-2"))
    );
    let first = remote(&actions);
    // One exchange at a time.
    let remotes = actions
        .iter()
        .filter(|a| matches!(a, Action::Remote(_)))
        .count();
    assert_eq!(remotes, 1);
    let next = e.remote_finished(
        "id-1",
        "subagent/send succeeded: {\"replayed\":false}".into(),
    );
    assert_eq!(names(&next), Vec::<String>::new());
    let second = remote(&next);
    assert_eq!(second, first);
    assert_eq!(second.frame["data"]["request_id"], "rep");
    let done = e.remote_finished(
        "id-1",
        "subagent/send succeeded: {\"replayed\":true}".into(),
    );
    let results = find(&done, "tool_results")["data"].clone();
    assert_eq!(results[0]["query"]["id"], "call-1");
    assert_eq!(
        results[0]["output"]["raw"],
        "subagent/send succeeded: {\"replayed\":false}"
    );
    assert_eq!(results[1]["query"]["id"], "call-2");
    assert_eq!(
        results[1]["output"]["raw"],
        "subagent/send succeeded: {\"replayed\":true}"
    );
    assert_settled(&done, 2);
}

#[test]
fn the_exchange_budget_ends_a_tool_run() {
    let mut e = engine_with(Settings {
        max_exchanges: 1,
        ..settings()
    })
    .0;
    run_tool(&mut e);
    e.confirmation_decided(
        "id-1",
        Decision {
            approved: false,
            reason: "no".into(),
        },
    );
    let status = events(&e.handle_signal(&signal("status"))).remove(0);
    assert_eq!(status["data"]["loop"]["status"], "exchange_limit");
}
