//! `config::strip_jsonc` and `config::resolve`.
//!
//! `strip_jsonc` agrees with a reference written differently (search for
//! the next string, `//` or `/*`, then skip to its end): comment bytes
//! become spaces, newlines stay, everything else, string literals included,
//! is untouched, so the length and line breaks are kept; stripping twice
//! changes nothing; an unterminated block comment is reported at its `/*`.
//!
//! `resolve` with the input as the file never panics, and an accepted
//! file's `resolved` value, written back as the file, resolves again to the
//! same value (the module promises it is itself a valid file).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use simplex_hub::harness::config::{resolve, strip_jsonc, ConfigError, Overrides, BUILT_FEATURES};
use simplex_hub_fuzz::{encode, text};

fn blank(text: &str) -> String {
    text.bytes()
        .map(|b| if b == b'\n' { '\n' } else { ' ' })
        .collect()
}

/// The reference: `Err(offset)` of an unterminated `/*`.
fn model(text: &str) -> Result<String, usize> {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    loop {
        let rest = &text[at..];
        let next = [rest.find('"'), rest.find("//"), rest.find("/*")]
            .into_iter()
            .flatten()
            .min();
        let Some(start) = next else {
            out.push_str(rest);
            return Ok(out);
        };
        out.push_str(&rest[..start]);
        let rest = &rest[start..];
        let len = if rest.starts_with('"') {
            // To the closing quote (a backslash escapes one character), or
            // to the end of an unterminated string.
            let mut chars = rest.char_indices().skip(1);
            let mut end = rest.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        chars.next();
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    _ => {}
                }
            }
            out.push_str(&rest[..end]);
            end
        } else if rest.starts_with("//") {
            let end = rest.find('\n').unwrap_or(rest.len());
            out.push_str(&blank(&rest[..end]));
            end
        } else {
            let Some(close) = rest[2..].find("*/") else {
                return Err(at + start);
            };
            let end = close + 4;
            out.push_str(&blank(&rest[..end]));
            end
        };
        at += start + len;
    }
}

fn line_column(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at];
    let line = 1 + before.matches('\n').count();
    let line_start = before.rfind('\n').map_or(0, |p| p + 1);
    (line, at - line_start + 1)
}

fn check_strip(text: &str) {
    match (strip_jsonc(text), model(text)) {
        (Ok(out), Ok(expect)) => {
            assert_eq!(out.len(), text.len());
            for (a, b) in text.bytes().zip(out.bytes()) {
                assert_eq!(a == b'\n', b == b'\n', "newlines moved");
                assert!(a == b || b == b' ', "changed to {b:#x}, not blanked");
            }
            assert_eq!(out, expect);
            assert_eq!(
                strip_jsonc(&out).ok().as_deref(),
                Some(out.as_str()),
                "not idempotent"
            );
        }
        (Err(ConfigError::UnterminatedComment { line, column, .. }), Err(at)) => {
            assert_eq!((line, column), line_column(text, at));
            assert!(text[at..].starts_with("/*"));
        }
        (got, expect) => panic!("strip_jsonc {got:?}, reference {expect:?}"),
    }
}

fn check_resolve(text: &str) {
    let path = Path::new("/etc/simplex/hub.jsonc");
    let (cwd, home) = (Path::new("/work/cwd"), Path::new("/home/op"));
    let none = Overrides::default();
    let Ok(loaded) = resolve(Some((path, text)), &none, cwd, home, BUILT_FEATURES) else {
        return;
    };
    let written = serde_json::to_string_pretty(&loaded.resolved).unwrap_or_default();
    match resolve(Some((path, &written)), &none, cwd, home, BUILT_FEATURES) {
        Ok(again) => assert_eq!(again.resolved, loaded.resolved, "{written}"),
        Err(err) => panic!("resolved configuration refused: {err}\n{written}"),
    }
    assert!(
        matches!(loaded.resolved, Value::Object(_)),
        "{}",
        encode(&loaded.resolved)
    );
}

fuzz_target!(|data: &[u8]| {
    let text = text(data);
    check_strip(&text);
    check_resolve(&text);
});
