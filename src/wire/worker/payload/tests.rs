//! Unit tests of `payload` frames, content and options rules and `signal`
//! frames.

use super::*;
use crate::util::testkit::Rng;
use crate::wire::worker::confirm_frames::parse_confirmation_request;
use serde_json::json;

fn ids() -> impl FnMut() -> String {
    let mut n = 0;
    move || {
        n += 1;
        format!("gen-{n}")
    }
}

fn build(input: Value) -> Result<(String, Value), PayloadError> {
    build_payload(&input, &mut ids())
}

fn text_part(raw: &str) -> Value {
    json!({"type": "text", "modality": "text", "raw": raw})
}

fn part_error(part: Value) -> String {
    match build(json!({"content": [text_part("ok"), part]})) {
        Err(PayloadError::BadPart { index: 1, reason }) => reason.to_string(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn operation_names_round_trip() {
    for op in Operation::ALL {
        assert_eq!(Operation::parse(op.as_str()), Some(op));
    }
    for op in SignalOp::ALL {
        assert_eq!(SignalOp::parse(op.as_str()), Some(op));
    }
    assert_eq!(Operation::parse("Message"), None);
    assert_eq!(SignalOp::parse("ping"), None);
}

#[test]
fn message_with_generated_id() {
    let (id, frame) = build(json!({"content": [text_part("Hello")]})).unwrap();
    assert_eq!(id, "gen-1");
    assert_eq!(
        frame.to_string(),
        r#"{"type":"payload","data":{"operation":"message","request_id":"gen-1","content":[{"type":"text","modality":"text","raw":"Hello"}]}}"#
    );
}

#[test]
fn documented_message_example_is_kept_as_given() {
    let content = json!([
        {"type": "text", "raw": "Describe this image.", "modality": "text"},
        {"type": "external_ref", "raw": "https://example.com/photo.png",
         "modality": "image", "extras": {"detail": "low"}}
    ]);
    let options = json!({
        "model": {"model": "deepseek-v4-pro", "reasoning_effort": "max"},
        "tools": {},
        "confirmation": {"mode": "ask"}
    });
    let (id, frame) = build(json!({
        "operation": "message", "request_id": "req-001",
        "content": content, "options": options
    }))
    .unwrap();
    assert_eq!(id, "req-001");
    assert_eq!(frame["type"], json!("payload"));
    assert_eq!(frame["data"]["content"], content);
    assert_eq!(frame["data"]["options"], options);
    assert_eq!(frame["data"]["request_id"], json!("req-001"));
    let keys: Vec<&String> = frame["data"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["operation", "request_id", "content", "options"]);
}

#[test]
fn generated_id_is_used_only_when_absent() {
    let mut calls = 0;
    let mut gen = || {
        calls += 1;
        "x".to_string()
    };
    let input = json!({"request_id": "mine", "operation": "continue"});
    let (id, _) = build_payload(&input, &mut gen).unwrap();
    assert_eq!(id, "mine");
    assert_eq!(calls, 0);
    // A broken generator is caught too.
    let mut empty = String::new;
    assert!(matches!(
        build_payload(&json!({"operation": "continue"}), &mut empty),
        Err(PayloadError::BadRequestId { .. })
    ));
}

#[test]
fn request_id_edges() {
    let ok = format!("{}é", "a".repeat(126));
    assert_eq!(ok.len(), 128);
    let (id, _) = build(json!({"operation": "continue", "request_id": ok})).unwrap();
    assert_eq!(id, ok);
    let too_long = format!("{}€", "a".repeat(126));
    assert_eq!(too_long.len(), 129);
    let err = build(json!({"operation": "continue", "request_id": too_long})).unwrap_err();
    assert_eq!(
        err.to_string(),
        "request_id is 129 bytes, longer than the 128-byte limit"
    );
    for bad in [json!(""), json!(null), json!(1), json!(["a"])] {
        assert!(
            matches!(
                build(json!({"operation": "continue", "request_id": bad})),
                Err(PayloadError::BadRequestId { .. })
            ),
            "{bad}"
        );
    }
    assert_eq!(
        build(json!({"operation": "continue", "request_id": 7}))
            .unwrap_err()
            .to_string(),
        "request_id must be a string, found number"
    );
    // Whitespace is a valid (non-empty) id.
    assert!(build(json!({"operation": "continue", "request_id": " "})).is_ok());
}

#[test]
fn input_shape_and_operation() {
    assert_eq!(
        build(json!([1])),
        Err(PayloadError::NotAnObject { found: "array" })
    );
    assert_eq!(
        build(json!({"operation": "launch"})),
        Err(PayloadError::UnknownOperation {
            op: "\"launch\"".into()
        })
    );
    assert_eq!(
        build(json!({"operation": null})),
        Err(PayloadError::UnknownOperation { op: "null".into() })
    );
    assert_eq!(
        build(json!({"operation": "continue", "bogus": 1})),
        Err(PayloadError::UnknownField {
            field: "bogus".into()
        })
    );
    let e = build(json!({"operation": "launch"}))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "unknown operation \"launch\"; expected message, continue, compact, history or answer"
    );
}

#[test]
fn forbidden_keys_even_when_null() {
    for key in FORBIDDEN_KEYS {
        for value in [json!(null), json!("user"), json!([])] {
            let input = json!({"content": [text_part("x")], *key: value});
            assert_eq!(build(input), Err(PayloadError::ForbiddenKey { key }));
            let input = json!({"operation": "continue", *key: value});
            assert_eq!(build(input), Err(PayloadError::ForbiddenKey { key }));
        }
    }
}

#[test]
fn legacy_text_is_never_accepted() {
    for op in ["message", "continue", "compact", "history", "answer"] {
        for value in [json!("hi"), json!(null), json!("")] {
            assert_eq!(
                build(json!({"operation": op, "text": value, "content": [text_part("x")]})),
                Err(PayloadError::LegacyText),
                "{op}"
            );
        }
    }
}

#[test]
fn message_content_rules() {
    assert_eq!(build(json!({})), Err(PayloadError::MissingContent));
    assert_eq!(
        build(json!({"content": []})),
        Err(PayloadError::EmptyContent)
    );
    assert_eq!(
        build(json!({"content": "hello"})),
        Err(PayloadError::ContentNotArray { found: "string" })
    );
    assert_eq!(
        build(json!({"content": null})),
        Err(PayloadError::ContentNotArray { found: "null" })
    );
    assert_eq!(
        build(json!({"content": [1]})),
        Err(PayloadError::BadPart {
            index: 0,
            reason: PartError::NotAnObject { found: "number" }
        })
    );
}

#[test]
fn part_rules() {
    // Every encoding and modality pairing is admitted by core.
    for t in PART_TYPES {
        for m in MODALITIES {
            let part = json!({"type": t, "modality": m, "raw": "r"});
            assert!(build(json!({ "content": [part] })).is_ok(), "{t} {m}");
        }
    }
    let with_extras = json!({"type": "external_ref", "modality": "document",
        "raw": "https://x/y.pdf", "extras": {"file_id": "f"}});
    assert!(build(json!({ "content": [with_extras] })).is_ok());
    let empty_extras = json!({"type": "text", "modality": "text", "raw": "r", "extras": {}});
    assert!(build(json!({ "content": [empty_extras] })).is_ok());

    let image = part_error(json!({"type": "image", "modality": "image", "raw": "u"}));
    assert!(
        image.contains("use type \"external_ref\" or \"binary\" with modality"),
        "{image}"
    );
    assert!(
        part_error(json!({"type": "video", "modality": "video", "raw": "u"}))
            .contains("media category")
    );
    assert_eq!(
        part_error(json!({"type": "url", "modality": "image", "raw": "u"})),
        "type must be text, binary or external_ref, found \"url\""
    );
    assert!(part_error(json!({"modality": "text", "raw": "u"})).starts_with("type is required"));
    assert!(
        part_error(json!({"type": 1, "modality": "text", "raw": "u"})).starts_with("type must be")
    );
    assert!(part_error(json!({"type": "text", "raw": "u"})).contains("modality is required"));
    assert!(
        part_error(json!({"type": "text", "raw": "u", "modality": null}))
            .starts_with("modality must be")
    );
    assert_eq!(
        part_error(json!({"type": "text", "raw": "u", "modality": "picture"})),
        "modality must be text, image, audio, video or document, found \"picture\""
    );
    assert_eq!(
        part_error(json!({"type": "text", "modality": "text", "raw": ""})),
        "raw must not be empty"
    );
    assert_eq!(
        part_error(json!({"type": "text", "modality": "text"})),
        "raw is required"
    );
    assert_eq!(
        part_error(json!({"type": "text", "modality": "text", "raw": 5})),
        "raw must be a string, found number"
    );
    assert_eq!(
        part_error(json!({"type": "text", "modality": "text", "raw": "x", "extras": null})),
        "extras must be an object, found null"
    );
    assert_eq!(
        part_error(json!({"type": "text", "modality": "text", "raw": "x", "detail": "low"})),
        "unknown key \"detail\"; part metadata belongs in extras"
    );
    // Text is not trimmed: whitespace is a non-empty raw.
    assert!(build(json!({ "content": [text_part(" ")] })).is_ok());
    let e = build(json!({"content": [text_part("a"), {"type": "image"}]})).unwrap_err();
    assert!(e.to_string().starts_with("content part 1: type \"image\""));
}

#[test]
fn validate_content_directly() {
    assert!(validate_content(&json!([text_part("a")])).is_ok());
    assert_eq!(
        validate_content(&json!([])),
        Err(PayloadError::EmptyContent)
    );
    assert_eq!(
        validate_content(&json!({})),
        Err(PayloadError::ContentNotArray { found: "object" })
    );
}

#[test]
fn continue_and_compact_forbid_content() {
    for op in ["continue", "compact"] {
        let (id, frame) = build(json!({"operation": op, "request_id": "r"})).unwrap();
        assert_eq!(id, "r");
        assert_eq!(
            frame,
            json!({"type": "payload", "data": {"operation": op, "request_id": "r"}})
        );
        for content in [json!(null), json!([]), json!([text_part("x")])] {
            assert_eq!(
                build(json!({"operation": op, "content": content})),
                Err(PayloadError::ContentForbidden {
                    operation: op_static(op)
                })
            );
        }
        let (_, frame) =
            build(json!({"operation": op, "options": {"confirmation": {"mode": "deny"}}})).unwrap();
        assert_eq!(
            frame["data"]["options"],
            json!({"confirmation": {"mode": "deny"}})
        );
        assert_eq!(
            build(json!({"operation": op, "start": 0})),
            Err(PayloadError::FieldNotAllowed {
                field: "start",
                operation: op_static(op)
            })
        );
    }
}

fn op_static(op: &str) -> &'static str {
    Operation::parse(op).unwrap().as_str()
}

#[test]
fn options_rules() {
    for ok in [
        json!({}),
        json!({"model": {}}),
        json!({"model": {"model": "deepseek-flash", "reasoning_effort": "low"}}),
        json!({"tools": {}}),
        json!({"confirmation": {}}),
        json!({"confirmation": {"mode": "ask"}}),
        json!({"confirmation": {"mode": "approve"}}),
        json!({"confirmation": {"mode": "deny"}}),
    ] {
        assert_eq!(validate_options(&ok), Ok(()), "{ok}");
    }
    for (bad, reason) in [
        (json!(null), "must be an object, found null"),
        (json!([]), "must be an object, found array"),
        (
            json!({"model": null}),
            "model must be an object, found null",
        ),
        (
            json!({"model": "x"}),
            "model must be an object, found string",
        ),
        (
            json!({"tools": {"a": 1}}),
            "tools is reserved and must be the empty object {}",
        ),
        (json!({"tools": []}), "tools must be an object, found array"),
        (
            json!({"confirmation": null}),
            "confirmation must be an object, found null",
        ),
        (
            json!({"confirmation": {"mode": "auto"}}),
            "confirmation mode must be ask, approve or deny, found \"auto\"",
        ),
        (
            json!({"confirmation": {"mode": null}}),
            "confirmation mode must be ask, approve or deny, found null",
        ),
        (
            json!({"confirmation": {"mode": "ask", "timeout_ms": 5}}),
            "confirmation has unknown key \"timeout_ms\"; only mode is accepted",
        ),
        (
            json!({"generation": {}}),
            "unknown category \"generation\"; expected model, tools or confirmation",
        ),
    ] {
        assert_eq!(
            validate_options(&bad),
            Err(PayloadError::BadOptions {
                reason: reason.into()
            }),
            "{bad}"
        );
    }
    assert!(matches!(
        build(json!({"content": [text_part("x")], "options": {"tools": {"x": 1}}})),
        Err(PayloadError::BadOptions { .. })
    ));
    assert_eq!(
        validate_options(&json!({"x": 1})).unwrap_err().to_string(),
        "options: unknown category \"x\"; expected model, tools or confirmation"
    );
}

#[test]
fn history_defaults_and_limits() {
    let (id, frame) = build(json!({"operation": "history"})).unwrap();
    assert_eq!(id, "gen-1");
    assert_eq!(
        frame,
        json!({"type": "payload", "data": {"operation": "history", "request_id": "gen-1",
            "start": 0, "step": 0, "limit": 10}})
    );
    let (_, frame) = build(json!({"operation": "history", "request_id": "history-1",
        "start": 4, "step": 2, "limit": 1}))
    .unwrap();
    assert_eq!(frame["data"]["start"], json!(4));
    assert_eq!(frame["data"]["step"], json!(2));
    assert_eq!(frame["data"]["limit"], json!(1));
    let (_, frame) = build(json!({"operation": "history", "start": u64::MAX})).unwrap();
    assert_eq!(frame["data"]["start"], json!(u64::MAX));
    for (input, reason) in [
        (json!({"limit": 0}), "limit must be 1-10 turns, found 0"),
        (json!({"limit": 11}), "limit must be 1-10 turns, found 11"),
        (
            json!({"limit": 2.0}),
            "limit must be an integer >= 0, found 2.0",
        ),
        (
            json!({"start": -1}),
            "start must be an integer >= 0, found -1",
        ),
        (
            json!({"start": 1.5}),
            "start must be an integer >= 0, found 1.5",
        ),
        (
            json!({"start": "3"}),
            "start must be an integer >= 0, found \"3\"",
        ),
        (
            json!({"step": null}),
            "step must be an integer >= 0, found null",
        ),
    ] {
        let mut input = input;
        input["operation"] = json!("history");
        assert_eq!(
            build(input.clone()),
            Err(PayloadError::BadHistory {
                reason: reason.into()
            }),
            "{input}"
        );
    }
    let big: Value =
        serde_json::from_str(r#"{"operation":"history","start":18446744073709551616}"#).unwrap();
    assert!(matches!(build(big), Err(PayloadError::BadHistory { .. })));
    for (field, value) in [
        ("content", json!([text_part("x")])),
        ("options", json!({})),
        ("source", json!({})),
    ] {
        let mut input = json!({"operation": "history"});
        input[field] = value;
        let err = build(input).unwrap_err();
        assert!(
            matches!(
                err,
                PayloadError::ContentForbidden {
                    operation: "history"
                } | PayloadError::FieldNotAllowed {
                    operation: "history",
                    ..
                }
            ),
            "{field}: {err:?}"
        );
    }
    assert_eq!(
        build(json!({"operation": "history", "options": {}}))
            .unwrap_err()
            .to_string(),
        "field \"options\" is not accepted by operation history"
    );
}

fn source() -> Value {
    json!({"worker_id": "worker-incarnation", "turn": 0, "step": 1,
        "commit_sequence": "2", "fingerprint": "a".repeat(64)})
}

#[test]
fn answer_rules() {
    let (id, frame) = build(json!({"operation": "answer", "request_id": "answer-1",
        "source": source(), "part": 0, "offset": 0}))
    .unwrap();
    assert_eq!(id, "answer-1");
    assert_eq!(
        frame,
        json!({"type": "payload", "data": {"operation": "answer", "request_id": "answer-1",
            "source": source(), "part": 0, "offset": 0}})
    );
    // Defaults written out; integer commit_sequence kept as given.
    let mut src = source();
    src["commit_sequence"] = json!(2);
    let (_, frame) =
        build(json!({"operation": "answer", "source": src.clone(), "part": 3})).unwrap();
    assert_eq!(frame["data"]["source"], src);
    assert_eq!(frame["data"]["part"], json!(3));
    assert_eq!(frame["data"]["offset"], json!(0));

    let answer_err = |input: Value| match build(input) {
        Err(PayloadError::BadAnswer { reason }) => reason,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        answer_err(json!({"operation": "answer"})),
        "source is required"
    );
    assert_eq!(
        answer_err(json!({"operation": "answer", "source": "x"})),
        "source must be an object, found string"
    );
    for field in SOURCE_FIELDS {
        let mut src = source();
        src.as_object_mut().unwrap().shift_remove(*field);
        assert_eq!(
            answer_err(json!({"operation": "answer", "source": src})),
            format!("source is missing {field}")
        );
    }
    let mut src = source();
    src["extra"] = json!(1);
    assert_eq!(
        answer_err(json!({"operation": "answer", "source": src})),
        "source has unknown field \"extra\""
    );
    for (field, value, rule) in [
        ("worker_id", json!(1), "a string"),
        ("fingerprint", json!(null), "a string"),
        ("turn", json!(-1), "an integer >= 0"),
        ("step", json!(1.5), "an integer >= 0"),
        ("step", json!("1"), "an integer >= 0"),
        ("commit_sequence", json!(-2), "a string or an integer >= 0"),
        ("commit_sequence", json!(2.5), "a string or an integer >= 0"),
    ] {
        let mut src = source();
        src[field] = value.clone();
        assert_eq!(
            answer_err(json!({"operation": "answer", "source": src})),
            format!("source {field} must be {rule}, found {}", describe(&value))
        );
    }
    for (field, value) in [
        ("part", json!(-1)),
        ("offset", json!(0.5)),
        ("offset", json!(null)),
    ] {
        let mut input = json!({"operation": "answer", "source": source()});
        input[field] = value;
        assert!(answer_err(input).starts_with(&format!("{field} must be an integer >= 0")));
    }
    assert_eq!(
        build(json!({"operation": "answer", "source": source(), "options": {}})),
        Err(PayloadError::FieldNotAllowed {
            field: "options",
            operation: "answer"
        })
    );
    assert_eq!(
        build(json!({"operation": "answer", "source": source(), "content": []})),
        Err(PayloadError::ContentForbidden {
            operation: "answer"
        })
    );
}

#[test]
fn queries_over_16_kib_are_refused() {
    let mut src = source();
    src["fingerprint"] = json!("f".repeat(MAX_QUERY_FRAME_BYTES));
    let err = build(json!({"operation": "answer", "source": src})).unwrap_err();
    let PayloadError::QueryTooLarge { bytes, max } = err else {
        panic!("{err:?}");
    };
    assert!(bytes > MAX_QUERY_FRAME_BYTES);
    assert_eq!(max, MAX_QUERY_FRAME_BYTES);
    // Exactly at the limit is accepted.
    let (_, frame) =
        build(json!({"operation": "answer", "request_id": "r", "source": source()})).unwrap();
    let len = serde_json::to_string(&frame).unwrap().len();
    let mut src = source();
    let fp = "a".repeat(64 + MAX_QUERY_FRAME_BYTES - len);
    src["fingerprint"] = json!(fp);
    let (_, frame) =
        build(json!({"operation": "answer", "request_id": "r", "source": src.clone()})).unwrap();
    assert_eq!(
        serde_json::to_string(&frame).unwrap().len(),
        MAX_QUERY_FRAME_BYTES
    );
    src["fingerprint"] = json!(format!("{fp}a"));
    assert!(matches!(
        build(json!({"operation": "answer", "request_id": "r", "source": src})),
        Err(PayloadError::QueryTooLarge { .. })
    ));
    // Runs are not capped here.
    let big = "x".repeat(100_000);
    assert!(build(json!({"content": [text_part(&big)]})).is_ok());
}

#[test]
fn signals() {
    for op in ["status", "options", "shutdown"] {
        assert_eq!(
            build_signal(op, Some("ignored"), Some("r")).unwrap(),
            json!({"type": "signal", "data": {"operation": op}})
        );
    }
    assert_eq!(
        build_signal("cancel", Some("run-1"), Some("run-0"))
            .unwrap()
            .to_string(),
        r#"{"type":"signal","data":{"operation":"cancel","run_id":"run-1"}}"#
    );
    assert_eq!(
        build_signal("cancel", None, Some("run-0")).unwrap()["data"]["run_id"],
        json!("run-0")
    );
    assert_eq!(
        build_signal("cancel", Some(""), Some("run-0")).unwrap()["data"]["run_id"],
        json!("run-0")
    );
    assert_eq!(
        build_signal("cancel", None, None),
        Err(PayloadError::MissingRunId)
    );
    assert_eq!(
        build_signal("cancel", Some(""), Some("")),
        Err(PayloadError::MissingRunId)
    );
    let ok = "r".repeat(128);
    assert!(build_signal("cancel", Some(&ok), None).is_ok());
    assert_eq!(
        build_signal("cancel", Some(&"r".repeat(129)), None),
        Err(PayloadError::RunIdTooLong {
            bytes: 129,
            max: 128
        })
    );
    assert_eq!(
        build_signal("reboot", None, None),
        Err(PayloadError::UnknownSignal {
            op: "\"reboot\"".into()
        })
    );
    assert_eq!(
        build_signal("reboot", None, None).unwrap_err().to_string(),
        "unknown signal \"reboot\"; expected status, options, cancel or shutdown"
    );
}

#[test]
fn error_messages_are_lowercase_without_period() {
    let errors: Vec<Box<dyn std::error::Error>> = vec![
        Box::new(PayloadError::MissingContent),
        Box::new(PayloadError::EmptyContent),
        Box::new(PayloadError::LegacyText),
        Box::new(PayloadError::MissingRunId),
        Box::new(PayloadError::ForbiddenKey { key: "role" }),
        Box::new(PayloadError::QueryTooLarge {
            bytes: 20000,
            max: 16384,
        }),
        Box::new(PayloadError::NotAnObject { found: "array" }),
    ];
    for e in errors {
        let s = e.to_string();
        assert!(s.starts_with(|c: char| c.is_ascii_lowercase()), "{s}");
        assert!(!s.ends_with('.'), "{s}");
    }
    assert_eq!(
        PayloadError::QueryTooLarge {
            bytes: 20000,
            max: 16384
        }
        .to_string(),
        "query frame is 20000 bytes, larger than the worker's 16384-byte limit"
    );
}

#[test]
fn never_panics_on_generated_input() {
    let keys = [
        "operation",
        "content",
        "request_id",
        "options",
        "start",
        "step",
        "limit",
        "source",
        "part",
        "offset",
        "text",
        "role",
        "type",
        "modality",
        "raw",
        "extras",
        "model",
        "tools",
        "confirmation",
        "mode",
        "worker_id",
        "turn",
        "commit_sequence",
        "fingerprint",
        "x",
    ];
    let scalars = [
        json!(null),
        json!(true),
        json!(0),
        json!(-1),
        json!(1.5),
        json!(u64::MAX),
        json!(""),
        json!("message"),
        json!("history"),
        json!("answer"),
        json!("continue"),
        json!("text"),
        json!("image"),
        json!("ask"),
        json!("é"),
        json!(11),
    ];
    let mut rng = Rng::new(0x0123_4567_89ab_cdef);
    fn gen(rng: &mut Rng, keys: &[&str], scalars: &[Value], d: u32) -> Value {
        match rng.below(if d == 0 { 2 } else { 4 }) {
            0 | 1 => scalars[rng.below(scalars.len())].clone(),
            2 => Value::Array(
                (0..rng.below(4))
                    .map(|_| gen(rng, keys, scalars, d - 1))
                    .collect(),
            ),
            _ => {
                let mut m = Map::new();
                for _ in 0..rng.below(5) {
                    m.insert(rng.pick(keys).to_string(), gen(rng, keys, scalars, d - 1));
                }
                Value::Object(m)
            }
        }
    }
    let mut accepted = 0;
    for _ in 0..20_000 {
        let v = gen(&mut rng, &keys, &scalars, 4);
        if let Ok((id, frame)) = build_payload(&v, &mut ids()) {
            accepted += 1;
            assert!(!id.is_empty() && id.len() <= MAX_REQUEST_ID_BYTES);
            assert_eq!(frame["data"]["request_id"], json!(id));
        }
        let _ = validate_options(&v);
        let _ = validate_content(&v);
        let text = json!({"type": "confirmation_request", "data": v}).to_string();
        let _ = parse_confirmation_request(&text, "demo");
    }
    assert!(accepted > 0);
}
