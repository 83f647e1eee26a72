//! The predefined skill library (seed 002, "Predefined skill library";
//! the file format is `docs/skills.md`): YAML files under
//! `<dataDir>/skills/<id>.yaml`, each a named instruction text that a
//! client expands into ordinary message content before sending. The hub
//! only serves them, read-only; the worker protocol and the `input`
//! message are unchanged.
//!
//! This file is pure: the id rule, the document's fields and their limits,
//! the reference syntax (`{{skill:ID}}`, `{{input}}`) and the expansion of
//! references with its limits, and the revision. `store.rs` reads the
//! files.

pub mod store;

use std::fmt;

use serde_json::{json, Value};

use crate::wire::sha256::Sha256;
use crate::wire::yaml_edit::read;

/// Largest skill file, in bytes.
pub const MAX_FILE_BYTES: usize = 64 * 1024;
/// Most files a list reads; a library with more fails the list.
pub const MAX_FILES: usize = 256;
/// Longest id (the file name's stem).
pub const MAX_ID_BYTES: usize = 128;
/// Longest `name`.
pub const MAX_NAME_BYTES: usize = 64;
/// Longest `title`.
pub const MAX_TITLE_BYTES: usize = 200;
/// Longest `description`.
pub const MAX_DESCRIPTION_BYTES: usize = 2000;
/// Most `keywords`, and the longest one.
pub const MAX_KEYWORDS: usize = 32;
pub const MAX_KEYWORD_BYTES: usize = 64;
/// How deep `{{skill:ID}}` references may nest.
pub const MAX_DEPTH: usize = 4;
/// Most references one expansion may resolve (all levels together).
pub const MAX_REFERENCES: usize = 32;
/// Longest expanded `text`, in bytes.
pub const MAX_EXPANDED_BYTES: usize = 64 * 1024;

/// The id reserved for the template route.
pub const RESERVED_ID: &str = "template";

/// Where the client puts the typed message.
pub const INPUT_MARKER: &str = "{{input}}";
const SKILL_MARKER: &str = "{{skill:";

/// The fields a skill file may have.
const KEYS: [&str; 5] = ["name", "title", "description", "keywords", "text"];

/// Whether `id` may name a skill file: 1 to 128 ASCII letters, digits, `_`
/// or `-`, and not `template`.
pub fn is_valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_BYTES
        && id != RESERVED_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Why a skill cannot be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkillError {
    /// The id is not a skill id (or is `template`).
    InvalidId,
    /// No such file.
    NotFound,
    /// The file or its document breaks a rule (the message says which; it
    /// never repeats the file's text).
    Invalid(String),
    /// The library holds more than [`MAX_FILES`] files.
    TooMany(usize),
    /// The directory could not be read.
    Storage(String),
}

impl fmt::Display for SkillError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkillError::InvalidId => write!(
                f,
                "a skill id is 1-128 characters of [A-Za-z0-9_-] and not \"{RESERVED_ID}\""
            ),
            SkillError::NotFound => f.write_str("no such skill"),
            SkillError::Invalid(message) | SkillError::Storage(message) => f.write_str(message),
            SkillError::TooMany(n) => write!(
                f,
                "the skill library holds {n} files; at most {MAX_FILES} are served"
            ),
        }
    }
}

impl std::error::Error for SkillError {}

fn invalid(message: impl Into<String>) -> SkillError {
    SkillError::Invalid(message.into())
}

/// One parsed skill file, its `text` not yet expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    pub title: String,
    pub description: String,
    pub keywords: Vec<String>,
    pub text: String,
}

/// Parses and checks one skill file's text (every rule but the references'
/// targets, which [`expand`] resolves).
pub fn parse(source: &str) -> Result<Skill, SkillError> {
    if source.len() > MAX_FILE_BYTES {
        return Err(invalid(format!(
            "a skill file is at most {MAX_FILE_BYTES} bytes"
        )));
    }
    let doc = read::read_json(source).map_err(|err| invalid(format!("the skill file {err}")))?;
    let Value::Object(map) = doc else {
        return Err(invalid("a skill file must be a YAML mapping"));
    };
    if let Some(key) = map.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(invalid(format!(
            "unknown field {} (a skill has {})",
            crate::wire::worker::display::quote(key),
            KEYS.join(", ")
        )));
    }
    let string = |key: &str, required: bool, max: usize| -> Result<String, SkillError> {
        match map.get(key) {
            None | Some(Value::Null) if !required => Ok(String::new()),
            Some(Value::String(s)) if s.len() > max => {
                Err(invalid(format!("{key} is longer than {max} bytes")))
            }
            Some(Value::String(s)) if required && s.trim().is_empty() => {
                Err(invalid(format!("{key} must not be empty")))
            }
            Some(Value::String(s)) if s.chars().any(|c| c == '\0') => {
                Err(invalid(format!("{key} must not contain NUL")))
            }
            Some(Value::String(s)) => Ok(s.clone()),
            _ if required => Err(invalid(format!("{key} is required (a string)"))),
            _ => Err(invalid(format!("{key} must be a string"))),
        }
    };
    let name = string("name", true, MAX_NAME_BYTES)?;
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
    {
        return Err(invalid(
            "name must be lower-case letters, digits, '-' or '_'",
        ));
    }
    let title = string("title", true, MAX_TITLE_BYTES)?;
    if title.contains(['\n', '\r']) {
        return Err(invalid("title must be one line"));
    }
    let description = string("description", false, MAX_DESCRIPTION_BYTES)?;
    let keywords = match map.get("keywords") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            if items.len() > MAX_KEYWORDS {
                return Err(invalid(format!(
                    "keywords has more than {MAX_KEYWORDS} entries"
                )));
            }
            items
                .iter()
                .map(|k| match k {
                    Value::String(s)
                        if !s.trim().is_empty()
                            && s.len() <= MAX_KEYWORD_BYTES
                            && !s.chars().any(char::is_control) =>
                    {
                        Ok(s.clone())
                    }
                    _ => Err(invalid(format!(
                        "keywords must be non-empty one-line strings of at most \
                         {MAX_KEYWORD_BYTES} bytes"
                    ))),
                })
                .collect::<Result<_, _>>()?
        }
        Some(_) => return Err(invalid("keywords must be a list of strings")),
    };
    let text = string("text", true, MAX_EXPANDED_BYTES)?;
    for piece in pieces(&text)? {
        if let Piece::Reference(id) = piece {
            if !is_valid_id(id) {
                return Err(invalid(format!(
                    "{{{{skill:…}}}} must name a skill id (1-128 characters of \
                     [A-Za-z0-9_-], not \"{RESERVED_ID}\")"
                )));
            }
        }
    }
    Ok(Skill {
        name,
        title,
        description,
        keywords,
        text,
    })
}

/// A part of a `text`: literal text, a reference, or the input marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Piece<'a> {
    Text(&'a str),
    Reference(&'a str),
    Input,
}

/// Splits `text` at its markers. Only `{{skill:` and `{{input}}` are
/// markers; any other braces are literal text.
fn pieces(text: &str) -> Result<Vec<Piece<'_>>, SkillError> {
    let mut out = Vec::new();
    let mut rest = text;
    loop {
        let next = [rest.find(SKILL_MARKER), rest.find(INPUT_MARKER)]
            .into_iter()
            .flatten()
            .min();
        let Some(at) = next else {
            if !rest.is_empty() {
                out.push(Piece::Text(rest));
            }
            return Ok(out);
        };
        if at > 0 {
            out.push(Piece::Text(&rest[..at]));
        }
        let marker = &rest[at..];
        if let Some(after) = marker.strip_prefix(INPUT_MARKER) {
            out.push(Piece::Input);
            rest = after;
        } else {
            let body = &marker[SKILL_MARKER.len()..];
            let Some(end) = body.find("}}") else {
                return Err(invalid("a {{skill: reference is not closed with }}"));
            };
            out.push(Piece::Reference(&body[..end]));
            rest = &body[end + 2..];
        }
    }
}

/// A skill as served: its text expanded and its revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    pub id: String,
    pub skill: Skill,
    /// The expanded text.
    pub text: String,
    /// An opaque hash of everything served.
    pub revision: String,
}

impl Served {
    /// `SkillSummary`: the document without `text`.
    pub fn summary(&self) -> Value {
        json!({
            "id": self.id,
            "name": self.skill.name,
            "title": self.skill.title,
            "description": self.skill.description,
            "keywords": self.skill.keywords,
            "revision": self.revision,
        })
    }

    /// `SkillDocument`: the summary with the expanded `text`.
    pub fn document(&self) -> Value {
        let mut doc = self.summary();
        doc["text"] = Value::String(self.text.clone());
        doc
    }
}

/// Expands the references of skill `id` (`skill`), looking other skills up
/// with `lookup`: each `{{skill:ID}}` is replaced by that skill's expanded
/// text, at most [`MAX_DEPTH`] levels deep and [`MAX_REFERENCES`]
/// references in all, without cycles, to at most [`MAX_EXPANDED_BYTES`];
/// `{{input}}` is kept for the client and may appear at most once in the
/// result.
pub fn expand(
    id: &str,
    skill: Skill,
    lookup: &mut dyn FnMut(&str) -> Result<Skill, SkillError>,
) -> Result<Served, SkillError> {
    let mut state = Expansion {
        out: String::new(),
        references: 0,
        inputs: 0,
        chain: vec![id.to_string()],
        lookup,
    };
    state.text(&skill.text, 0)?;
    if state.inputs > 1 {
        return Err(invalid(format!(
            "{INPUT_MARKER} appears {} times once references are expanded; at most once",
            state.inputs
        )));
    }
    let text = state.out;
    let mut hash = Sha256::new();
    for part in [
        id,
        &skill.name,
        &skill.title,
        &skill.description,
        &skill.keywords.join("\u{1f}"),
        &text,
    ] {
        hash.update(&(part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    Ok(Served {
        id: id.to_string(),
        skill,
        text,
        revision: hash.finish_hex(),
    })
}

struct Expansion<'a> {
    out: String,
    references: usize,
    inputs: usize,
    /// The skills being expanded, outermost first.
    chain: Vec<String>,
    lookup: &'a mut dyn FnMut(&str) -> Result<Skill, SkillError>,
}

impl Expansion<'_> {
    fn text(&mut self, text: &str, depth: usize) -> Result<(), SkillError> {
        for piece in pieces(text)? {
            match piece {
                Piece::Text(t) => self.push(t)?,
                Piece::Input => {
                    self.inputs += 1;
                    self.push(INPUT_MARKER)?;
                }
                Piece::Reference(target) => {
                    self.references += 1;
                    if self.references > MAX_REFERENCES {
                        return Err(invalid(format!(
                            "more than {MAX_REFERENCES} skill references in one expansion"
                        )));
                    }
                    if depth + 1 > MAX_DEPTH {
                        return Err(invalid(format!(
                            "skill references nest more than {MAX_DEPTH} levels"
                        )));
                    }
                    if self.chain.iter().any(|c| c == target) {
                        return Err(invalid(format!(
                            "skill references form a cycle: {} -> {target}",
                            self.chain.join(" -> ")
                        )));
                    }
                    let referenced = (self.lookup)(target).map_err(|err| match err {
                        SkillError::NotFound => {
                            invalid(format!("the referenced skill {target} does not exist"))
                        }
                        other => invalid(format!("the referenced skill {target}: {other}")),
                    })?;
                    self.chain.push(target.to_string());
                    self.text(&referenced.text, depth + 1)?;
                    self.chain.pop();
                }
            }
        }
        Ok(())
    }

    fn push(&mut self, text: &str) -> Result<(), SkillError> {
        if self.out.len() + text.len() > MAX_EXPANDED_BYTES {
            return Err(invalid(format!(
                "the expanded text exceeds {MAX_EXPANDED_BYTES} bytes"
            )));
        }
        self.out.push_str(text);
        Ok(())
    }
}

/// The authoring template (`GET /api/skills/template`); it passes its own
/// validation.
pub const TEMPLATE: &str = include_str!("template.yaml");

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn skill(text: &str) -> Skill {
        Skill {
            name: "s".into(),
            title: "S".into(),
            description: String::new(),
            keywords: vec![],
            text: text.into(),
        }
    }

    fn library(entries: &[(&str, &str)]) -> HashMap<String, Skill> {
        entries
            .iter()
            .map(|(id, text)| (id.to_string(), skill(text)))
            .collect()
    }

    fn expand_in(lib: &HashMap<String, Skill>, id: &str) -> Result<Served, SkillError> {
        let mut lookup = |target: &str| lib.get(target).cloned().ok_or(SkillError::NotFound);
        expand(id, lib[id].clone(), &mut lookup)
    }

    fn refused(result: Result<impl std::fmt::Debug, SkillError>) -> String {
        match result {
            Err(SkillError::Invalid(m)) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_template_passes_its_own_validation() {
        let skill = parse(TEMPLATE).unwrap();
        assert!(skill.text.contains(INPUT_MARKER));
        let mut none = |_: &str| Err(SkillError::NotFound);
        let served = expand("example", skill, &mut none).unwrap();
        assert_eq!(served.document()["id"], "example");
        assert!(served.summary().get("text").is_none());
    }

    #[test]
    fn ids_are_stems_never_paths_and_template_is_reserved() {
        assert!(is_valid_id("review-changes_2"));
        for bad in [
            "",
            "template",
            "a.yaml",
            "../x",
            "a/b",
            ".x",
            "a b",
            &"x".repeat(129),
        ] {
            assert!(!is_valid_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn fields_are_checked() {
        let ok = "name: a\ntitle: A\ntext: go\n";
        parse(ok).unwrap();
        for (text, needle) in [
            ("- a\n", "mapping"),
            ("name: a\ntitle: A\n", "text is required"),
            ("title: A\ntext: x\n", "name is required"),
            ("name: A\ntitle: A\ntext: x\n", "lower-case"),
            ("name: a\ntitle: \"A\\nB\"\ntext: x\n", "one line"),
            ("name: a\ntitle: A\ntext: '  '\n", "empty"),
            ("name: a\ntitle: A\ntext: x\nextra: 1\n", "unknown field"),
            ("name: a\ntitle: A\ntext: x\nkeywords: k\n", "keywords"),
            ("name: a\ntitle: A\ntext: x\nkeywords: ['']\n", "keywords"),
            ("name: a\ntitle: A\ntext: '{{skill:../x}}'\n", "skill id"),
            ("name: a\ntitle: A\ntext: '{{skill:x'\n", "not closed"),
            ("name: a\ntitle: [\n", "YAML"),
        ] {
            let message = refused(parse(text));
            assert!(message.contains(needle), "{text}: {message}");
        }
        let big = format!("name: a\ntitle: A\ntext: {}\n", "x".repeat(MAX_FILE_BYTES));
        assert!(refused(parse(&big)).contains("at most"));
        let many = format!(
            "name: a\ntitle: A\ntext: x\nkeywords: [{}]\n",
            vec!["k"; MAX_KEYWORDS + 1].join(",")
        );
        assert!(refused(parse(&many)).contains("more than"));
    }

    #[test]
    fn references_expand_with_limits() {
        let lib = library(&[
            ("a", "A({{skill:b}}) {{input}}"),
            ("b", "B[{{skill:c}}]"),
            ("c", "C {not a marker} {{other}}"),
        ]);
        let served = expand_in(&lib, "a").unwrap();
        assert_eq!(served.text, "A(B[C {not a marker} {{other}}]) {{input}}");
        // Cycles, missing targets, depth, count, size, two inputs.
        let cyc = library(&[("a", "{{skill:b}}"), ("b", "{{skill:a}}")]);
        assert!(refused(expand_in(&cyc, "a")).contains("cycle"));
        let own = library(&[("a", "{{skill:a}}")]);
        assert!(refused(expand_in(&own, "a")).contains("cycle"));
        let missing = library(&[("a", "{{skill:zz}}")]);
        assert!(refused(expand_in(&missing, "a")).contains("does not exist"));
        let deep = library(&[
            ("a", "{{skill:b}}"),
            ("b", "{{skill:c}}"),
            ("c", "{{skill:d}}"),
            ("d", "{{skill:e}}"),
            ("e", "{{skill:f}}"),
            ("f", "end"),
        ]);
        assert!(refused(expand_in(&deep, "a")).contains("levels"));
        assert_eq!(expand_in(&deep, "b").unwrap().text, "end");
        let wide_text = "{{skill:b}}".repeat(MAX_REFERENCES + 1);
        let wide = library(&[("a", &wide_text), ("b", "x")]);
        assert!(refused(expand_in(&wide, "a")).contains("references"));
        let half = "y".repeat(MAX_EXPANDED_BYTES / 2 + 1);
        let big = library(&[("a", "{{skill:b}}{{skill:b}}"), ("b", &half)]);
        assert!(refused(expand_in(&big, "a")).contains("exceeds"));
        let inputs = library(&[("a", "{{input}} {{skill:b}}"), ("b", "{{input}}")]);
        assert!(refused(expand_in(&inputs, "a")).contains("at most once"));
    }

    #[test]
    fn the_revision_follows_what_is_served() {
        let lib = library(&[("a", "A {{skill:b}}"), ("b", "B")]);
        let first = expand_in(&lib, "a").unwrap().revision;
        assert_eq!(first, expand_in(&lib, "a").unwrap().revision);
        let changed = library(&[("a", "A {{skill:b}}"), ("b", "B2")]);
        assert_ne!(first, expand_in(&changed, "a").unwrap().revision);
        assert_eq!(first.len(), 64);
    }
}
