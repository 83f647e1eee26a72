//! Reading a worker configuration with a real YAML 1.2 parser
//! (`saphyr-parser`, docs/dependencies.md): the one source of truth for
//! what a file means. The editor reads the file before and after every
//! edit with it, and the hub and the built-in worker read the values they
//! need through [`read_json`].
//!
//! The tree is built here from the parser's events, so the limits are ours:
//! one document, a mapping at the top, no key twice in a mapping, at most
//! [`MAX_ALIASES`] aliases expanding to at most [`MAX_NODES`] nodes, at most
//! [`MAX_DEPTH`] levels. Plain scalars are resolved with the YAML 1.2 core
//! schema. No error carries any of the file's text: it may hold credentials.

use std::fmt;

use saphyr_parser::{Event, Parser, ScalarStyle};
use serde_json::{Map, Number, Value};

/// Aliases a document may use (the Node hub's bound).
pub const MAX_ALIASES: usize = 100;
/// Nodes a document may hold once its aliases are expanded (a worker
/// configuration has a few hundred).
pub const MAX_NODES: usize = 20_000;
/// Nesting levels of mappings and sequences.
pub const MAX_DEPTH: usize = 128;

/// A parsed YAML node. Mappings keep their order.
#[derive(Debug, Clone)]
pub enum Yaml {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Yaml>),
    Map(Vec<(Yaml, Yaml)>),
}

impl PartialEq for Yaml {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Yaml::Null, Yaml::Null) => true,
            (Yaml::Bool(a), Yaml::Bool(b)) => a == b,
            (Yaml::Int(a), Yaml::Int(b)) => a == b,
            // NaN equals itself here: a value that did not change compares
            // equal to itself.
            (Yaml::Float(a), Yaml::Float(b)) => a.to_bits() == b.to_bits() || a == b,
            (Yaml::Str(a), Yaml::Str(b)) => a == b,
            (Yaml::Seq(a), Yaml::Seq(b)) => a == b,
            (Yaml::Map(a), Yaml::Map(b)) => a == b,
            _ => false,
        }
    }
}

impl Yaml {
    /// The value of `key` in a mapping.
    pub fn get(&self, key: &str) -> Option<&Yaml> {
        match self {
            Yaml::Map(entries) => entries
                .iter()
                .find(|(k, _)| matches!(k, Yaml::Str(s) if s == key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// The value at `path` of nested mappings.
    pub fn lookup(&self, path: &[&str]) -> Option<&Yaml> {
        path.iter().try_fold(self, |node, key| node.get(key))
    }

    /// What kind of node this is, as an error message names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Yaml::Null => "null",
            Yaml::Bool(_) => "a boolean",
            Yaml::Int(_) | Yaml::Float(_) => "a number",
            Yaml::Str(_) => "a string",
            Yaml::Seq(_) => "a sequence",
            Yaml::Map(_) => "a mapping",
        }
    }
}

/// Why a file cannot be read. Lines are 1-based, columns 1-based.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// The YAML parser refused the text.
    Syntax { line: usize, column: usize },
    /// The file holds no document (empty, or only comments).
    Empty,
    /// More than one document (`---` separated).
    MultipleDocuments { line: usize },
    /// The document is not a mapping.
    NotAMapping { found: &'static str },
    /// A mapping has the same key twice; `key` is the dotted path.
    DuplicateKey { key: String, line: usize },
    /// Too many aliases, or aliases expanding to too many nodes.
    TooManyAliases { line: usize },
    /// Nested more than [`MAX_DEPTH`] levels.
    TooDeep { line: usize },
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Syntax { line, column } => {
                write!(f, "is not valid YAML (line {line}, column {column})")
            }
            ReadError::Empty => f.write_str("holds no YAML document"),
            ReadError::MultipleDocuments { line } => write!(
                f,
                "holds more than one YAML document (the second starts on line {line})"
            ),
            ReadError::NotAMapping { found } => {
                write!(f, "must be a mapping at the top level, found {found}")
            }
            ReadError::DuplicateKey { key, line } => {
                let key = shown_key(key);
                write!(f, "has the key {key} twice (again on line {line})")
            }
            ReadError::TooManyAliases { line } => write!(
                f,
                "uses more than {MAX_ALIASES} aliases or expands past {MAX_NODES} nodes \
                 (line {line})"
            ),
            ReadError::TooDeep { line } => {
                write!(f, "nests more than {MAX_DEPTH} levels (line {line})")
            }
        }
    }
}

impl std::error::Error for ReadError {}

/// The most of a duplicate key's dotted path a message shows, in bytes: a
/// key may be as long as the file.
const SHOWN_KEY_BYTES: usize = 200;

/// `key` cut at a character boundary to [`SHOWN_KEY_BYTES`], with `…`.
fn shown_key(key: &str) -> std::borrow::Cow<'_, str> {
    if key.len() <= SHOWN_KEY_BYTES {
        return key.into();
    }
    let mut end = SHOWN_KEY_BYTES;
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &key[..end]).into()
}

/// A container being built, with the key awaiting its value.
enum Open {
    Seq(Vec<Yaml>, Option<usize>),
    Map(Vec<(Yaml, Yaml)>, Option<Yaml>, Option<usize>),
}

/// Parses `text` as one YAML document whose top level is a mapping.
pub fn parse(text: &str) -> Result<Yaml, ReadError> {
    let mut parser = Parser::new_from_str(text);
    let mut anchors: Vec<(usize, Yaml)> = Vec::new();
    let mut stack: Vec<Open> = Vec::new();
    let mut root: Option<Yaml> = None;
    let mut documents = 0;
    let mut aliases = 0;
    let mut nodes = 0usize;
    loop {
        let (event, span) = match parser.next_event() {
            None => break,
            Some(Ok(next)) => next,
            Some(Err(err)) => {
                let at = err.marker();
                return Err(ReadError::Syntax {
                    line: at.line(),
                    column: at.col() + 1,
                });
            }
        };
        let line = span.start.line();
        let (node, anchor) = match event {
            Event::StreamEnd => break,
            Event::DocumentStart(_) => {
                documents += 1;
                if documents > 1 {
                    return Err(ReadError::MultipleDocuments { line });
                }
                continue;
            }
            Event::StreamStart | Event::DocumentEnd | Event::Nothing => continue,
            Event::SequenceStart(anchor, _) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(ReadError::TooDeep { line });
                }
                stack.push(Open::Seq(Vec::new(), anchor_id(anchor)));
                continue;
            }
            Event::MappingStart(anchor, _) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(ReadError::TooDeep { line });
                }
                stack.push(Open::Map(Vec::new(), None, anchor_id(anchor)));
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => match stack.pop() {
                Some(Open::Seq(items, anchor)) => (Yaml::Seq(items), anchor),
                Some(Open::Map(entries, _, anchor)) => (Yaml::Map(entries), anchor),
                None => continue,
            },
            Event::Scalar(value, style, anchor, tag) => {
                let tag = tag.map(|t| (t.handle.clone(), t.suffix.clone()));
                (scalar(&value, style, tag), anchor_id(anchor))
            }
            Event::Alias(id) => {
                aliases += 1;
                let target = anchors.iter().rev().find(|(a, _)| *a == id);
                let Some((_, target)) = target else {
                    return Err(ReadError::Syntax {
                        line,
                        column: span.start.col() + 1,
                    });
                };
                nodes = nodes.saturating_add(count(target));
                if aliases > MAX_ALIASES || nodes > MAX_NODES {
                    return Err(ReadError::TooManyAliases { line });
                }
                (target.clone(), None)
            }
        };
        nodes = nodes.saturating_add(1);
        if nodes > MAX_NODES {
            return Err(ReadError::TooManyAliases { line });
        }
        if let Some(id) = anchor {
            anchors.push((id, node.clone()));
        }
        match stack.last_mut() {
            None => root = Some(node),
            Some(Open::Seq(items, _)) => items.push(node),
            Some(Open::Map(entries, pending, _)) => match pending.take() {
                None => *pending = Some(node),
                Some(key) => {
                    if entries.iter().any(|(k, _)| *k == key) {
                        let mut path = path_of(&stack);
                        path.push(key_text(&key));
                        return Err(ReadError::DuplicateKey {
                            key: path.join("."),
                            line,
                        });
                    }
                    entries.push((key, node));
                }
            },
        }
    }
    match root {
        None => Err(ReadError::Empty),
        Some(map @ Yaml::Map(_)) => Ok(map),
        Some(other) => Err(ReadError::NotAMapping {
            found: other.kind(),
        }),
    }
}

/// Parses `text` (see [`parse`]) and converts it to JSON for the code that
/// reads worker configurations as `serde_json` values: scalar keys become
/// their text, floats that JSON cannot hold (`.inf`, `.nan`) become `null`,
/// integers beyond 64 bits become floats. A key that is itself a mapping or
/// sequence, or two keys with the same text, make it fail.
pub fn read_json(text: &str) -> Result<Value, ReadError> {
    to_json(&parse(text)?, &mut Vec::new())
}

fn to_json(node: &Yaml, path: &mut Vec<String>) -> Result<Value, ReadError> {
    Ok(match node {
        Yaml::Null => Value::Null,
        Yaml::Bool(b) => Value::Bool(*b),
        Yaml::Int(i) => {
            if let Ok(n) = i64::try_from(*i) {
                Value::from(n)
            } else if let Ok(n) = u64::try_from(*i) {
                Value::from(n)
            } else {
                Number::from_f64(*i as f64).map_or(Value::Null, Value::Number)
            }
        }
        Yaml::Float(f) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
        Yaml::Str(s) => Value::String(s.clone()),
        Yaml::Seq(items) => Value::Array(
            items
                .iter()
                .map(|item| to_json(item, path))
                .collect::<Result<_, _>>()?,
        ),
        Yaml::Map(entries) => {
            let mut map = Map::new();
            for (key, value) in entries {
                let text = match key {
                    Yaml::Seq(_) | Yaml::Map(_) => {
                        return Err(ReadError::NotAMapping {
                            found: "a mapping with a sequence or mapping as a key",
                        })
                    }
                    other => key_text(other),
                };
                path.push(text.clone());
                let converted = to_json(value, path)?;
                if map.insert(text, converted).is_some() {
                    return Err(ReadError::DuplicateKey {
                        key: path.join("."),
                        line: 0,
                    });
                }
                path.pop();
            }
            Value::Object(map)
        }
    })
}

fn anchor_id(id: usize) -> Option<usize> {
    (id != 0).then_some(id)
}

/// Nodes in `node`, counting itself.
fn count(node: &Yaml) -> usize {
    match node {
        Yaml::Seq(items) => items.iter().map(count).fold(1, usize::saturating_add),
        Yaml::Map(entries) => entries
            .iter()
            .map(|(k, v)| count(k).saturating_add(count(v)))
            .fold(1, usize::saturating_add),
        _ => 1,
    }
}

/// The keys leading to the innermost open mapping, for error messages.
fn path_of(stack: &[Open]) -> Vec<String> {
    stack
        .iter()
        .filter_map(|open| match open {
            Open::Map(_, Some(key), _) => Some(key_text(key)),
            _ => None,
        })
        .collect()
}

/// A key as text: strings as they are, other scalars in their canonical
/// spelling, collections as a placeholder.
fn key_text(key: &Yaml) -> String {
    match key {
        Yaml::Null => "null".into(),
        Yaml::Bool(b) => b.to_string(),
        Yaml::Int(i) => i.to_string(),
        Yaml::Float(f) => f.to_string(),
        Yaml::Str(s) => s.clone(),
        Yaml::Seq(_) => "(a sequence)".into(),
        Yaml::Map(_) => "(a mapping)".into(),
    }
}

/// A scalar event's value: quoted and block scalars are strings, plain ones
/// are resolved with the core schema; the core tags (`!!str`, `!!int`, …)
/// and the non-specific `!` decide instead where present.
fn scalar(value: &str, style: ScalarStyle, tag: Option<(String, String)>) -> Yaml {
    if let Some((handle, suffix)) = &tag {
        let core = handle == "tag:yaml.org,2002:" || handle == "!!";
        if (core && suffix == "str") || (handle.is_empty() && suffix == "!") {
            return Yaml::Str(value.to_owned());
        }
        if core && matches!(suffix.as_str(), "null" | "bool" | "int" | "float") {
            return match (suffix.as_str(), resolve(value)) {
                ("null", Yaml::Null) => Yaml::Null,
                ("bool", b @ Yaml::Bool(_)) => b,
                ("int", i @ Yaml::Int(_)) => i,
                ("float", Yaml::Int(i)) => Yaml::Float(i as f64),
                ("float", f @ Yaml::Float(_)) => f,
                _ => Yaml::Str(value.to_owned()),
            };
        }
    }
    match style {
        ScalarStyle::Plain => resolve(value),
        _ => Yaml::Str(value.to_owned()),
    }
}

/// The YAML 1.2 core schema for a plain scalar.
pub fn resolve(text: &str) -> Yaml {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Yaml::Null,
        "true" | "True" | "TRUE" => return Yaml::Bool(true),
        "false" | "False" | "FALSE" => return Yaml::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Yaml::Float(f64::INFINITY)
        }
        "-.inf" | "-.Inf" | "-.INF" => return Yaml::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Yaml::Float(f64::NAN),
        _ => {}
    }
    let digits = |s: &str, radix: u32| !s.is_empty() && s.chars().all(|c| c.is_digit(radix));
    let int = |s: &str, radix: u32| match i128::from_str_radix(s, radix) {
        Ok(i) => Yaml::Int(i),
        // Too large for 128 bits: a float, as most loaders make it.
        Err(_) => s
            .parse::<f64>()
            .map_or(Yaml::Str(text.to_owned()), Yaml::Float),
    };
    if let Some(hex) = text.strip_prefix("0x") {
        if digits(hex, 16) {
            return int(hex, 16);
        }
    }
    if let Some(oct) = text.strip_prefix("0o") {
        if digits(oct, 8) {
            return int(oct, 8);
        }
    }
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    if digits(unsigned, 10) {
        return int(text.strip_prefix('+').unwrap_or(text), 10);
    }
    if is_core_float(unsigned) {
        if let Ok(f) = text.parse::<f64>() {
            return Yaml::Float(f);
        }
    }
    Yaml::Str(text.to_owned())
}

/// `( \. [0-9]+ | [0-9]+ ( \. [0-9]* )? ) ( [eE] [-+]? [0-9]+ )?`
fn is_core_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    let run = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    let whole = run(&mut i);
    if i < b.len() && b[i] == b'.' {
        i += 1;
        let frac = run(&mut i);
        if whole == 0 && frac == 0 {
            return false;
        }
    } else if whole == 0 {
        return false;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
            i += 1;
        }
        if run(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn block_flow_and_json_documents_read_alike() {
        let block = "# c\nclient:\n  endpoint: ws://h:1/x?token=a\n  n: 3\nlist: [a, 'b', \"c\"]\n";
        let flow = "{\"client\": {\"endpoint\": \"ws://h:1/x?token=a\", \"n\": 3}, \"list\": [\"a\", \"b\", \"c\"]}";
        assert_eq!(read_json(block).unwrap(), read_json(flow).unwrap());
        assert_eq!(
            read_json(block).unwrap(),
            json!({"client": {"endpoint": "ws://h:1/x?token=a", "n": 3}, "list": ["a", "b", "c"]})
        );
    }

    #[test]
    fn plain_scalars_follow_the_core_schema() {
        for (text, expected) in [
            ("~", Yaml::Null),
            ("", Yaml::Null),
            ("True", Yaml::Bool(true)),
            ("yes", Yaml::Str("yes".into())),
            ("0x1F", Yaml::Int(31)),
            ("0o17", Yaml::Int(15)),
            ("-12", Yaml::Int(-12)),
            ("+12", Yaml::Int(12)),
            ("1.5e3", Yaml::Float(1500.0)),
            (".5", Yaml::Float(0.5)),
            ("1.", Yaml::Float(1.0)),
            ("1e", Yaml::Str("1e".into())),
            ("+-5", Yaml::Str("+-5".into())),
            ("0x-1", Yaml::Str("0x-1".into())),
            (".nan", Yaml::Float(f64::NAN)),
            ("ws://x", Yaml::Str("ws://x".into())),
        ] {
            assert_eq!(resolve(text), expected, "{text:?}");
        }
        let doc = parse("a: !!str 1\nb: '1'\nc: !!int 7\nd: ! 8\n").unwrap();
        assert_eq!(doc.get("a"), Some(&Yaml::Str("1".into())));
        assert_eq!(doc.get("b"), Some(&Yaml::Str("1".into())));
        assert_eq!(doc.get("c"), Some(&Yaml::Int(7)));
        assert_eq!(doc.get("d"), Some(&Yaml::Str("8".into())));
    }

    #[test]
    fn refusals_name_the_line_and_never_the_text() {
        let cases: &[(&str, ReadError)] = &[
            ("a: [sk-secret\n", ReadError::Syntax { line: 2, column: 1 }),
            ("# only a comment\n", ReadError::Empty),
            (
                "a: 1\n---\nb: 2\n",
                ReadError::MultipleDocuments { line: 2 },
            ),
            (
                "- sk-secret\n",
                ReadError::NotAMapping {
                    found: "a sequence",
                },
            ),
            (
                "x:\n  y: 1\n  y: sk-secret\n",
                ReadError::DuplicateKey {
                    key: "x.y".into(),
                    line: 3,
                },
            ),
        ];
        for (text, expected) in cases {
            let err = parse(text).unwrap_err();
            assert_eq!(&err, expected, "{text:?}");
            assert!(!err.to_string().contains("sk-secret"));
        }
    }

    #[test]
    fn alias_expansion_is_bounded() {
        let mut bomb = String::from("a0: &a0 [x, x]\n");
        for i in 1..40 {
            bomb.push_str(&format!("a{i}: &a{i} [*a{}, *a{}]\n", i - 1, i - 1));
        }
        assert!(matches!(
            parse(&bomb),
            Err(ReadError::TooManyAliases { .. })
        ));
        let ok = parse("base: &b {k: 1}\nother: *b\n").unwrap();
        assert_eq!(ok.get("other"), ok.get("base"));
        let deep = format!("a: {}{}\n", "[".repeat(200), "]".repeat(200));
        assert!(matches!(parse(&deep), Err(ReadError::TooDeep { .. })));
    }
}
