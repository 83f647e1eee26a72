//! `wire::yaml_edit::edit`, the in-place editor of the worker
//! configuration's hub-owned fields, checked against the YAML parser's
//! reading (`yaml_edit::read::parse`) and a model of the edits written here.
//!
//! For any text and any of the edits below, `edit` either refuses or
//! returns a text that reads as YAML and equals the input's reading with
//! exactly the edited paths set (parents created, `null` parents made
//! mappings, `IfAbsent` values kept), every other value equal. It refuses
//! with a reading error exactly when the parser refuses the input, and
//! never because its own result failed the read-back check (`Unverified`
//! is a bug in the editor). Editing the result again changes nothing, byte
//! for byte. When nothing was replaced (in particular when the input has
//! none of the paths), the result minus the reported inserted ranges is
//! the input, byte for byte.
//!
//! Input: one selector byte (which edits, which values), then the file as
//! (lossily decoded) UTF-8.
#![no_main]

use libfuzzer_sys::fuzz_target;
use simplex_hub::wire::yaml_edit::read::{self, Yaml};
use simplex_hub::wire::yaml_edit::{edit, Edit, NewValue, Refusal, When};
use simplex_hub_fuzz::text;

/// Values that need every quoting rule: URLs and paths, text a loader reads
/// as something else, indicators, quotes, breaks and odd characters.
const VALUES: &[&str] = &[
    "ws://127.0.0.1:8800/agent/demo/events?token=a%20b&x=1",
    "/data/sessions/demo",
    "",
    "true",
    "null",
    "12",
    "a b # c",
    "it's \"quoted\"",
    "line\nbreak\r\n",
    "\u{85}\u{2028}\u{feff}\t\u{1}",
    "naïve/日本/😀",
    "{[,]}: - ? &a *b !t |>",
    "ws://h:",
];

const PATHS: &[&[&str]] = &[
    &["client", "endpoint"],
    &["security", "confirmation", "endpoint"],
    &["persistence", "directory"],
    &["providers", "mock", "endpoint", "base_url"],
    &["hub_remote_call", "endpoint"],
];

fn edits(selector: u8) -> Vec<Edit> {
    let value = VALUES[usize::from(selector >> 4) % VALUES.len()];
    let mut out: Vec<Edit> = PATHS
        .iter()
        .enumerate()
        .filter(|(i, _)| selector & (1 << i) != 0)
        .map(|(i, path)| {
            // Each path gets a different value of the list.
            let v = VALUES[(usize::from(selector >> 4) + i) % VALUES.len()];
            Edit::string(path, if i == 0 { value } else { v })
        })
        .collect();
    if selector & 0x20 != 0 {
        out.push(Edit {
            path: vec!["hub_remote_call".into(), "timeout_ms".into()],
            value: NewValue::Int(u64::from(selector)),
            when: When::IfAbsent,
        });
    }
    if out.is_empty() {
        out.push(Edit::string(PATHS[0], value));
    }
    out
}

/// The model of one edit on a reading.
fn model(doc: &mut Yaml, path: &[String], value: &NewValue, when: When) {
    let mut node = doc;
    for (depth, key) in path.iter().enumerate() {
        if *node == Yaml::Null {
            *node = Yaml::Map(Vec::new());
        }
        let Yaml::Map(entries) = node else {
            panic!("an accepted edit went through a non-mapping at {key}");
        };
        let last = depth + 1 == path.len();
        let at = match entries
            .iter()
            .position(|(k, _)| *k == Yaml::Str(key.clone()))
        {
            Some(_) if last && when == When::IfAbsent => return,
            Some(at) => at,
            None => {
                entries.push((Yaml::Str(key.clone()), Yaml::Map(Vec::new())));
                entries.len() - 1
            }
        };
        node = &mut entries[at].1;
        if last {
            *node = match value {
                NewValue::Str(s) => Yaml::Str(s.clone()),
                NewValue::Int(n) => Yaml::Int(i128::from(*n)),
            };
        }
    }
}

/// Whether the reading has none of the edits' keys or `null` parents.
fn untouched(doc: &Yaml, edits: &[Edit]) -> bool {
    edits.iter().all(|e| {
        let mut node = doc;
        for key in &e.path {
            match node.get(key) {
                None => return true,
                Some(Yaml::Null) => return false,
                Some(next) => node = next,
            }
        }
        false
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let input = text(rest);
    let edits = edits(selector);
    let before = read::parse(&input);
    let result = edit(&input, &edits);
    let out = match result {
        Err(Refusal::Unverified { key }) => panic!("edit of {key} failed its read-back check"),
        Err(Refusal::Read(err)) => {
            assert_eq!(before, Err(err), "the editor's reading differs");
            return;
        }
        Err(refusal) => {
            assert!(before.is_ok() || matches!(refusal, Refusal::BareCarriageReturn { .. }));
            let message = refusal.to_string();
            assert!(message.len() < 300, "{message}");
            return;
        }
        Ok(out) => out,
    };
    let before = before.expect("an edited input reads as YAML");
    let after = read::parse(&out.text).expect("the edited text reads as YAML");
    let mut expected = before.clone();
    for e in &edits {
        model(&mut expected, &e.path, &e.value, e.when);
    }
    assert_eq!(after, expected, "only the edited values may change");

    let again = edit(&out.text, &edits).expect("the edited text edits again");
    assert_eq!(again.text, out.text, "editing twice changes more");
    assert!(again.changed.is_empty());

    if untouched(&before, &edits) {
        assert!(
            !out.replaced,
            "an input without the keys had bytes replaced"
        );
    }
    if !out.replaced {
        let mut stripped = out.text.clone();
        for r in out.inserted.iter().rev() {
            stripped.replace_range(r.clone(), "");
        }
        assert_eq!(stripped, input, "more than the inserted keys changed");
    } else {
        assert!(!out.changed.is_empty());
    }
});
