use super::*;

fn refresh_edits(token: &str) -> Vec<Edit> {
    vec![
        Edit::string(&["persistence", "directory"], "/data/sessions/demo"),
        Edit::string(
            &["client", "endpoint"],
            &format!("ws://127.0.0.1:8800/agent/demo/events?token={token}"),
        ),
        Edit::string(
            &["security", "confirmation", "endpoint"],
            &format!("ws://127.0.0.1:8800/agent/demo/confirm?token={token}"),
        ),
    ]
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let out = edit(text, edits).unwrap_or_else(|err| panic!("{err}\n{text}"));
    // Editing again changes nothing.
    let again = edit(&out.text, edits).unwrap();
    assert_eq!(again.text, out.text, "not idempotent");
    assert!(again.changed.is_empty());
    out.text
}

const OPERATOR: &str = "\
# Worker configuration, edited by hand.
driver_model: deepseek   # the driver

providers:
  deepseek:
    model: deepseek-chat
    endpoint:
      api_key: ${DEEPSEEK_API_KEY}   # never expanded by the hub

client:
  # where the hub listens
  endpoint: ws://127.0.0.1:1111/agent/demo/events?token=old
  payload_capacity: 256
security:
  confirmation:
    endpoint: 'ws://127.0.0.1:1111/agent/demo/confirm?token=old'
    timeout_ms: 120000
my_notes: {owner: ops, tags: [a, b]}
persistence:
  directory: \"/old/place\"
  state: state
";

#[test]
fn comments_unknown_keys_and_layout_are_kept() {
    let out = apply(OPERATOR, &refresh_edits("new"));
    let expected = OPERATOR
        .replace(
            "ws://127.0.0.1:1111/agent/demo/events?token=old",
            "ws://127.0.0.1:8800/agent/demo/events?token=new",
        )
        .replace(
            "'ws://127.0.0.1:1111/agent/demo/confirm?token=old'",
            "'ws://127.0.0.1:8800/agent/demo/confirm?token=new'",
        )
        .replace("\"/old/place\"", "\"/data/sessions/demo\"");
    assert_eq!(out, expected);
}

#[test]
fn an_equal_value_is_left_byte_for_byte() {
    let text = "client:\n  endpoint: \"ws://h/x\"   # same\n";
    let out = edit(text, &[Edit::string(&["client", "endpoint"], "ws://h/x")]).unwrap();
    assert_eq!(out.text, text);
    assert!(out.changed.is_empty());
    let single = "client: {endpoint: 'ws://h/x'}\n";
    let out = edit(single, &[Edit::string(&["client", "endpoint"], "ws://h/x")]).unwrap();
    assert_eq!(out.text, single);
}

#[test]
fn quoting_follows_the_old_style_when_it_can_hold_the_value() {
    let set = |text: &str, value: &str| apply(text, &[Edit::string(&["a", "b"], value)]);
    // plain stays plain for a URL or path
    assert_eq!(
        set("a:\n  b: ws://x\n", "ws://y/z?t=1&u=%20"),
        "a:\n  b: ws://y/z?t=1&u=%20\n"
    );
    // but not for text a loader could take for something else
    for (value, written) in [
        ("true", "\"true\""),
        ("", "\"\""),
        ("a b", "\"a b\""),
        ("ws://x #y", "\"ws://x #y\""),
        ("ws://h:", "\"ws://h:\""),
        ("say \"hi\"\n", "\"say \\\"hi\\\"\\n\""),
        ("tab\there", "\"tab\\there\""),
        ("\u{85}\u{2028}\u{feff}", "\"\\u0085\\u2028\\ufeff\""),
        ("naïve/日本", "\"naïve/日本\""),
    ] {
        assert_eq!(
            set("a:\n  b: ws://x\n", value),
            format!("a:\n  b: {written}\n"),
            "{value:?}"
        );
    }
    // single-quoted stays single-quoted, quotes doubled
    assert_eq!(set("a: {b: 'x'}\n", "it's/ok"), "a: {b: 'it''s/ok'}\n");
    assert_eq!(
        set("a:\n  b: 'x'\n", "line\nbreak"),
        "a:\n  b: \"line\\nbreak\"\n"
    );
    // a multi-line plain value becomes one line
    assert_eq!(
        set("a:\n  b: ws://x\n    /more\nc: 1\n", "ws://q"),
        "a:\n  b: ws://q\nc: 1\n"
    );
    // a plain value in a flow mapping is written double-quoted
    assert_eq!(
        set("a: {b: x, c: 1}\n", "ws://q"),
        "a: {b: \"ws://q\", c: 1}\n"
    );
    // an empty value gets one
    assert_eq!(
        set("a:\n  b:   # later\n", "ws://q"),
        "a:\n  b: \"ws://q\"   # later\n"
    );
    // numbers are plain
    let out = apply(
        "a:\n  b: 5\n",
        &[Edit {
            path: vec!["a".into(), "b".into()],
            value: NewValue::Int(7),
            when: When::Always,
        }],
    );
    assert_eq!(out, "a:\n  b: 7\n");
}

#[test]
fn missing_keys_are_inserted_with_their_siblings_indentation() {
    let text = "\
# top
client:
    payload_capacity: 256   # kept
    transport:
        write_capacity: 1
worker:
    max_exchanges: 3
";
    let out = edit(text, &refresh_edits("t")).unwrap();
    assert_eq!(
        out.text,
        "\
# top
client:
    payload_capacity: 256   # kept
    transport:
        write_capacity: 1
    endpoint: \"ws://127.0.0.1:8800/agent/demo/events?token=t\"
worker:
    max_exchanges: 3
persistence:
    directory: \"/data/sessions/demo\"
security:
    confirmation:
        endpoint: \"ws://127.0.0.1:8800/agent/demo/confirm?token=t\"
"
    );
    assert!(!out.replaced);
    let mut stripped = out.text.clone();
    for r in out.inserted.iter().rev() {
        stripped.replace_range(r.clone(), "");
    }
    assert_eq!(stripped, text);
    // no final newline, CRLF line endings
    let crlf = "a: 1\r\nclient:\r\n  x: 2";
    let out = apply(crlf, &[Edit::string(&["client", "endpoint"], "ws://e")]);
    assert_eq!(
        out,
        "a: 1\r\nclient:\r\n  x: 2\r\n  endpoint: \"ws://e\"\r\n"
    );
}

#[test]
fn empty_and_null_parents_become_mappings() {
    let e = [Edit::string(
        &["security", "confirmation", "endpoint"],
        "ws://c",
    )];
    assert_eq!(
        apply("security:   # soon\nz: 1\n", &e),
        "security:   # soon\n  confirmation:\n    endpoint: \"ws://c\"\nz: 1\n"
    );
    assert_eq!(
        apply("security: ~\n", &e),
        "security: \n  confirmation:\n    endpoint: \"ws://c\"\n"
    );
    assert_eq!(
        apply("{\"security\": null, \"z\": 1}", &e),
        "{\"security\": {\"confirmation\": {\"endpoint\": \"ws://c\"}}, \"z\": 1}"
    );
    assert_eq!(
        apply("{\"security\": {}}", &e),
        "{\"security\": {\"confirmation\": {\"endpoint\": \"ws://c\"}}}"
    );
}

#[test]
fn json_documents_stay_json() {
    let doc = serde_json::json!({
        "providers": {"mock": {"model": "mock-echo", "endpoint": {"base_url": "http://127.0.0.1:0"}}},
        "client": {"payload_capacity": 256},
        "persistence": {"directory": "/old"}
    });
    let text = serde_json::to_string_pretty(&doc).unwrap();
    let mut edits = refresh_edits("tok");
    edits.push(Edit::string(
        &["providers", "mock", "endpoint", "base_url"],
        "http://127.0.0.1:4000",
    ));
    let out = apply(&text, &edits);
    let mut expected = doc.clone();
    expected["persistence"]["directory"] = "/data/sessions/demo".into();
    expected["client"]["endpoint"] = "ws://127.0.0.1:8800/agent/demo/events?token=tok".into();
    expected["security"] = serde_json::json!({"confirmation": {"endpoint": "ws://127.0.0.1:8800/agent/demo/confirm?token=tok"}});
    expected["providers"]["mock"]["endpoint"]["base_url"] = "http://127.0.0.1:4000".into();
    let parsed: serde_json::Value = serde_json::from_str(&out).expect("still JSON");
    assert_eq!(parsed, expected);
    assert_eq!(
        out,
        text.replace("\"/old\"", "\"/data/sessions/demo\"")
            .replace("http://127.0.0.1:0", "http://127.0.0.1:4000")
            .replace(
                "\"payload_capacity\": 256",
                "\"payload_capacity\": 256,\n    \"endpoint\": \"ws://127.0.0.1:8800/agent/demo/events?token=tok\""
            )
            .replace(
                "\"directory\": \"/data/sessions/demo\"\n  }",
                "\"directory\": \"/data/sessions/demo\"\n  },\n  \"security\": {\"confirmation\": {\"endpoint\": \"ws://127.0.0.1:8800/agent/demo/confirm?token=tok\"}}"
            )
    );
}

#[test]
fn if_absent_keeps_any_existing_value() {
    let e = Edit {
        path: vec!["hub_remote_call".into(), "timeout_ms".into()],
        value: NewValue::Int(5000),
        when: When::IfAbsent,
    };
    assert_eq!(
        apply(
            "hub_remote_call:\n  timeout_ms: 9\n",
            std::slice::from_ref(&e)
        ),
        "hub_remote_call:\n  timeout_ms: 9\n"
    );
    assert_eq!(
        apply(
            "hub_remote_call:\n  timeout_ms: [1]\n",
            std::slice::from_ref(&e)
        ),
        "hub_remote_call:\n  timeout_ms: [1]\n"
    );
    assert_eq!(
        apply("x: 1\n", &[e]),
        "x: 1\nhub_remote_call:\n  timeout_ms: 5000\n"
    );
}

#[test]
fn sequences_block_scalars_and_other_values_elsewhere_are_skipped() {
    let text = "\
plugins:
  directories:
  - /a
  - /b   # comment
  enable: [x, \"y]\", {z: 1}]
prompt: |
  client:
    endpoint: not this one

  # nor this
software:
  - name: gcc
    version: \"12\"
  - - nested
    - seq
anchor: &base {k: 1}
alias: *base
folded: >-
    text
client:
  endpoint: ws://old
...
";
    let out = apply(text, &[Edit::string(&["client", "endpoint"], "ws://new")]);
    assert_eq!(out, text.replace("ws://old", "ws://new"));
}

#[test]
fn each_unsafe_construct_is_refused_naming_the_key_and_line() {
    let e = [Edit::string(&["client", "endpoint"], "ws://new")];
    for (text, message) in [
        ("client:\n  endpoint: &e ws://x\n", "cannot edit client.endpoint (line 2): has an anchor or a tag"),
        ("client:\n  endpoint: !!str ws://x\n", "cannot edit client.endpoint (line 2): has an anchor or a tag"),
        ("base: &b ws://x\nclient:\n  endpoint: *b\n", "cannot edit client.endpoint (line 3): must be a scalar, found an alias"),
        ("client: &c\n  endpoint: ws://x\nother: *c\n", "cannot edit client (line 1): has an anchor or a tag"),
        ("d: &d {endpoint: ws://x}\nclient: *d\n", "cannot edit client (line 2): must be a mapping, found an alias"),
        ("client:\n  endpoint: |\n    ws://x\n", "cannot edit client.endpoint (line 2): must be a scalar, found a block scalar"),
        ("client:\n  endpoint:\n    url: ws://x\n", "cannot edit client.endpoint (line 2): must be a scalar, found a mapping"),
        ("client:\n  endpoint: [ws://x]\n", "cannot edit client.endpoint (line 2): must be a scalar, found a sequence"),
        ("client: ws://x\n", "cannot edit client (line 1): must be a mapping, found a string"),
        ("client: 3\n", "cannot edit client (line 1): must be a mapping, found a number"),
        ("client:\n- a\n", "cannot edit client (line 1): must be a mapping, found a sequence"),
        ("client: {endpoint}\n", "cannot edit client.endpoint (line 1): must be a scalar, found nothing (a key without `:`)"),
        ("d: &d {x: 1}\nclient:\n  <<: *d\n  endpoint: ws://x\n", "cannot edit client.endpoint (line 3): client has a merge key (<<), so its keys cannot be edited safely"),
        ("client:\n  endpoint: ws://x\n  \"endpoint\": ws://y\n", "the file has the key client.endpoint twice (again on line 3)"),
        ("client:\n  endpoint: ws://x\n---\nclient: {}\n", "the file holds more than one YAML document (the second starts on line 3)"),
        ("client:\n\tendpoint: ws://x\n", "the file is not valid YAML (line 2, column 2)"),
        ("a: b\n \tc\nclient: {}\n", "the editor cannot follow the layout at line 2: a tab in the indentation"),
        ("client:\r  endpoint: x\n", "line 1 ends with a bare carriage return"),
        ("? client\n: {endpoint: x}\n", "the editor cannot follow the layout at line 1: an explicit `?` key"),
        ("", "the file holds no YAML document"),
        ("- client\n", "the file must be a mapping at the top level, found a sequence"),
    ] {
        let err = edit(text, &e).unwrap_err();
        assert_eq!(err.to_string(), message, "{text:?}");
    }
}

#[test]
fn a_refusal_checks_every_edit_before_changing_anything() {
    // The second edit is refused: the first is not made either (the caller
    // gets an error, never a half-edited text).
    let text = "client:\n  endpoint: ws://x\nsecurity: [no]\n";
    let err = edit(text, &refresh_edits("t")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot edit security (line 3): must be a mapping, found a sequence"
    );
}

#[test]
fn refusals_never_repeat_the_file() {
    for text in [
        "client:\n  endpoint: &sk-secret ws://x\n",
        "client: sk-secret\n",
        "client: [sk-secret\n",
        "client:\n  endpoint: ws://x\n  endpoint: sk-secret\n",
    ] {
        let err = edit(text, &refresh_edits("t")).unwrap_err();
        assert!(!err.to_string().contains("sk-secret"), "{err}");
        assert!(!format!("{err:?}").contains("sk-secret"), "{err:?}");
    }
}
