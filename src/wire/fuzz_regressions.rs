//! Inputs the fuzz targets in `fuzz/` failed on, kept as plain unit tests so
//! `cargo test` guards them without cargo-fuzz or a nightly toolchain. Each
//! test is named `r_<issue>_<target>_<bug>` (issue 7: fuzzing the parsers;
//! issue 15: the worker configuration's YAML editor; issue 28: the wire
//! layer) and says what went wrong and where it was fixed.

use serde_json::Value;

use crate::util::testkit::Rng;
use crate::wire::worker::envelope::parse_event;

/// `envelope`: the decode -> encode -> decode check failed on a frame
/// holding `127898.88888888889`. serde_json's default float parser is not
/// correctly rounded, so the hub forwarded a worker's number changed in its
/// last digit, and its own output did not parse back to the same value.
/// Fixed by serde_json's `float_roundtrip` feature (`Cargo.toml`).
#[test]
fn r_7_envelope_float_keeps_its_value() {
    let text = r#"{"type":"event","event":"status","session_id":"demo","worker_id":"w","request_id":"","run_id":"","sequence":1,"data":{"x":127898.88888888889}}"#;
    let env = parse_event(text, "demo").unwrap();
    assert_eq!(env.data().unwrap()["x"].to_string(), "127898.88888888889");
    let again = Value::Object(env.object().clone()).to_string();
    assert_eq!(parse_event(&again, "demo").unwrap(), env);
}

/// The same property over arbitrary bit patterns: before the fix about one
/// finite f64 in three did not survive `to_string` and `from_str`.
#[test]
fn r_7_envelope_every_float_round_trips() {
    let mut rng = Rng::new(0x7F4A_7C15_9E37_79B9);
    for _ in 0..20_000 {
        let f = f64::from_bits(rng.next());
        if !f.is_finite() {
            continue;
        }
        let text = Value::from(f).to_string();
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back.as_f64(), Some(f), "{text}");
    }
}

/// `yaml_edit`: a byte-order mark at the start was counted as the first
/// line's indentation, so a key inserted into the top-level mapping was
/// indented by 3 and read back as something else (the editor refused it as
/// `Unverified`). Fixed in `wire::yaml_edit::scan` (`Scanner::line_start`).
#[test]
fn r_15_yaml_edit_byte_order_mark_is_not_indentation() {
    use crate::wire::yaml_edit::{edit, Edit};
    let text = "\u{feff}e: &bSSSSSSSS abs://x\n";
    let e = [Edit::string(
        &["providers", "mock", "endpoint", "base_url"],
        "http://h:1",
    )];
    let out = edit(text, &e).unwrap();
    assert_eq!(
        out.text,
        "\u{feff}e: &bSSSSSSSS abs://x\nproviders:\n  mock:\n    endpoint:\n      base_url: \"http://h:1\"\n"
    );
}

/// `yaml_edit`: a key appended to a file that ends inside a block scalar
/// without a final line break changed that scalar (the line break the
/// insertion adds becomes its content; here the parser also read the
/// whitespace-only last line differently). Such an append is refused now
/// (`wire::yaml_edit::plan`); with the line break it is made.
#[test]
fn r_15_yaml_edit_append_after_an_open_block_scalar() {
    use crate::wire::yaml_edit::{edit, Edit};
    let e = [Edit::string(&["client", "endpoint"], "ws://e")];
    for text in ["prompt: |\n  text\r\n ", "prompt: |\n  text"] {
        let err = edit(text, &e).unwrap_err().to_string();
        assert!(
            err.starts_with("cannot edit client.endpoint (line ")
                && err.contains("block scalar that ends the file without a line break"),
            "{err}"
        );
    }
    let out = edit("prompt: |\n  text\n", &e).unwrap();
    assert_eq!(
        out.text,
        "prompt: |\n  text\nclient:\n  endpoint: \"ws://e\"\n"
    );
}

/// `skill_document`: a skill file whose duplicate key was nearly a
/// kilobyte long (multi-byte characters included) was refused with a
/// message that repeated the whole key. The YAML reader now shows at most
/// 200 bytes of it, cut at a character boundary.
#[test]
fn r_19_a_duplicate_keys_message_is_bounded() {
    let key = format!("k{}", "\u{fffd}".repeat(400));
    let text = format!("{key}: 1\n{key}: 2\n");
    let err = crate::wire::yaml_edit::read::read_json(&text).unwrap_err();
    let message = err.to_string();
    assert!(message.len() < 300, "{} bytes: {message}", message.len());
    assert!(message.contains("twice (again on line 2)"), "{message}");
    assert!(message.contains('…'), "{message}");
    let short = crate::wire::yaml_edit::read::read_json("a: 1\na: 2\n").unwrap_err();
    assert_eq!(short.to_string(), "has the key a twice (again on line 2)");
}

/// `shard_message`: `{"id":3,"type":""}` was refused for its `id` with the
/// empty `type` echoed as the message's type, which names no command (the
/// same message with a string id is refused for its `type`, echoing none).
/// Fixed in `wire::shard::message::parse`: only a non-empty `type` is
/// echoed.
#[test]
fn r_28_shard_message_an_empty_type_is_not_echoed() {
    let bad = crate::wire::shard::message::parse(r#"{"id":3,"type":""}"#).unwrap_err();
    assert_eq!((bad.id, bad.kind), (None, None));
    let bad = crate::wire::shard::message::parse(r#"{"id":3,"type":"x"}"#).unwrap_err();
    assert_eq!(bad.kind.as_deref(), Some("x"));
}
