//! `skills::parse` and `skills::expand`: a skill file's YAML document and
//! the expansion of its `{{skill:ID}}` references.
//!
//! For any text, `parse` either accepts it or refuses it as invalid (never
//! another kind of error, never a panic), and a refusal's message is bounded (the key it names is clipped).
//! An accepted skill keeps every documented limit (name charset and length,
//! one-line title, field lengths, keyword count). Written back out as JSON
//! (a YAML subset), it parses to the same skill. Expanding it with every
//! reference resolving to a second skill from the same input either fails
//! as invalid or yields a text within the expansion limit with at most one
//! `{{input}}`; a text without references expands to itself, and the
//! revision is the same for the same expansion.
//!
//! Input: the skill file as (lossily decoded) UTF-8; a second skill
//! (what every reference resolves to) follows a NUL byte, when present.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use simplex_hub::harness::skills::{self, Skill, SkillError};
use simplex_hub_fuzz::text;

fn check_limits(skill: &Skill) {
    assert!(!skill.name.is_empty() && skill.name.len() <= skills::MAX_NAME_BYTES);
    assert!(skill
        .name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_'));
    assert!(!skill.title.trim().is_empty() && skill.title.len() <= skills::MAX_TITLE_BYTES);
    assert!(!skill.title.contains(['\n', '\r']));
    assert!(skill.description.len() <= skills::MAX_DESCRIPTION_BYTES);
    assert!(skill.keywords.len() <= skills::MAX_KEYWORDS);
    for keyword in &skill.keywords {
        assert!(!keyword.trim().is_empty() && keyword.len() <= skills::MAX_KEYWORD_BYTES);
    }
    assert!(!skill.text.trim().is_empty());
}

fn parsed(input: &str) -> Option<Skill> {
    match skills::parse(input) {
        Ok(skill) => {
            check_limits(&skill);
            // The same document written as JSON reads back the same.
            let again = json!({
                "name": skill.name,
                "title": skill.title,
                "description": skill.description,
                "keywords": skill.keywords,
                "text": skill.text,
            })
            .to_string();
            if again.len() <= skills::MAX_FILE_BYTES {
                assert_eq!(skills::parse(&again).as_ref(), Ok(&skill), "round trip");
            }
            Some(skill)
        }
        Err(SkillError::Invalid(message)) => {
            assert!(message.len() < 1000, "{message}");
            None
        }
        Err(other) => panic!("parse refused with {other:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let input = text(data);
    let (first, second) = match input.split_once('\0') {
        Some((a, b)) => (a, Some(b)),
        None => (input.as_ref(), None),
    };
    let Some(skill) = parsed(first) else {
        return;
    };
    let other = second.and_then(parsed);
    let mut lookup = |_: &str| other.clone().ok_or(SkillError::NotFound);
    let result = skills::expand("fuzzed", skill.clone(), &mut lookup);
    match &result {
        Ok(served) => {
            assert!(served.text.len() <= skills::MAX_EXPANDED_BYTES);
            assert!(served.text.matches(skills::INPUT_MARKER).count() <= 1);
            if !skill.text.contains("{{skill:") {
                assert_eq!(served.text, skill.text);
            }
            let mut lookup = |_: &str| other.clone().ok_or(SkillError::NotFound);
            let again = skills::expand("fuzzed", skill.clone(), &mut lookup).unwrap();
            assert_eq!(again.revision, served.revision);
        }
        Err(SkillError::Invalid(message)) => assert!(message.len() < 1000, "{message}"),
        Err(other) => panic!("expand refused with {other:?}"),
    }
});
