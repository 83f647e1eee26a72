//! One validation pass over the merged JSON ([`Check`]): the value at a
//! key path, violations and the keys whose rule failed, the sections that
//! must stay objects, and the readers of plain JSON types (booleans,
//! strings, secrets, paths, integer ranges, ports, string lists).

use serde_json::Value;

use super::SAFE_MAX;
use crate::config::schema;
use crate::config::Violation;

/// One validation pass over the merged JSON.
pub(super) struct Check<'a> {
    pub(super) root: &'a Value,
    pub(super) violations: Vec<Violation>,
    /// Key paths (without array indices) whose own rule failed.
    pub(super) failed: Vec<String>,
}

impl<'a> Check<'a> {
    /// The value at a dotted schema path; `None` when an enclosing section
    /// is not an object (already reported by [`Check::sections`]).
    pub(super) fn get(&self, path: &str) -> Option<&'a Value> {
        let mut current = self.root;
        for part in path.split('.') {
            current = current.as_object()?.get(part)?;
        }
        Some(current)
    }

    pub(super) fn fail(&mut self, path: &str, value: Value, rule: impl Into<String>) {
        self.fail_at(path, path.to_owned(), value, rule);
    }

    /// Records a violation reported under `key` (which may carry an index
    /// or a profile name) against the schema key `path`.
    pub(super) fn fail_at(
        &mut self,
        path: &str,
        key: String,
        value: Value,
        rule: impl Into<String>,
    ) {
        self.failed.push(path.to_owned());
        self.violations.push(Violation {
            key,
            value,
            rule: rule.into(),
        });
    }

    /// True when neither `path` nor an enclosing section failed.
    pub(super) fn ok(&self, path: &str) -> bool {
        !self.failed.iter().any(|failed| {
            path == failed
                || (path.starts_with(failed.as_str())
                    && path.as_bytes().get(failed.len()) == Some(&b'.'))
        })
    }

    /// Every object node of the schema must still be an object.
    pub(super) fn sections(&mut self) {
        let mut nodes = Vec::new();
        section_paths(&schema::defaults(), "", &mut nodes);
        for path in nodes {
            if let Some(value) = self.get(&path).filter(|value| !value.is_object()) {
                self.fail(&path, value.clone(), "must be an object");
            }
        }
    }

    pub(super) fn boolean(&mut self, path: &str) -> bool {
        match self.get(path) {
            Some(Value::Bool(value)) => *value,
            Some(other) => {
                self.fail(path, other.clone(), "must be true or false");
                false
            }
            None => false,
        }
    }

    pub(super) fn string(&mut self, path: &str, non_empty: bool) -> String {
        match self.get(path) {
            Some(Value::String(value)) if !(non_empty && value.is_empty()) => value.clone(),
            Some(other) => {
                let rule = if non_empty {
                    "must be a non-empty string"
                } else {
                    "must be a string"
                };
                self.fail(path, other.clone(), rule);
                String::new()
            }
            None => String::new(),
        }
    }

    /// One of `options` (the first when the value is missing or wrong).
    pub(super) fn one_of(&mut self, path: &str, options: &[&'static str]) -> &'static str {
        let value = self.get(path);
        if let Some(found) = value
            .and_then(Value::as_str)
            .and_then(|v| options.iter().find(|o| **o == v))
        {
            return found;
        }
        if let Some(value) = value {
            let names: Vec<String> = options.iter().map(|o| format!("\"{o}\"")).collect();
            self.fail(
                path,
                value.clone(),
                format!("must be one of {}", names.join(", ")),
            );
        }
        options[0]
    }

    /// A string whose value must not appear in messages.
    pub(super) fn secret_string(&mut self, path: &str) -> String {
        match self.get(path) {
            Some(Value::String(value)) => value.clone(),
            Some(other) => {
                self.fail(path, placeholder(other), "must be a string");
                String::new()
            }
            None => String::new(),
        }
    }

    /// A string that names a file or directory: no NUL bytes.
    pub(super) fn path(&mut self, path: &str, non_empty: bool) -> String {
        let value = self.string(path, non_empty);
        if value.contains('\0') {
            self.fail(path, Value::from(value), "must not contain a NUL character");
            return String::new();
        }
        value
    }

    pub(super) fn int(&mut self, path: &str, min: u64, max: u64) -> u64 {
        match self.get(path) {
            Some(value) => match value.as_u64() {
                Some(n) if (min..=max).contains(&n) => n,
                _ => {
                    self.fail(path, value.clone(), int_rule(min, max));
                    0
                }
            },
            None => 0,
        }
    }

    pub(super) fn usize(&mut self, path: &str, min: u64, max: u64) -> usize {
        usize::try_from(self.int(path, min, max)).unwrap_or(usize::MAX)
    }

    pub(super) fn port(&mut self, path: &str) -> u16 {
        u16::try_from(self.int(path, 0, u64::from(u16::MAX))).unwrap_or(0)
    }

    pub(super) fn strings(&mut self, path: &str) -> Vec<String> {
        match self.get(path) {
            Some(Value::Array(items)) if items.iter().all(Value::is_string) => items
                .iter()
                .filter_map(|item| item.as_str().map(str::to_owned))
                .collect(),
            Some(other) => {
                self.fail(path, other.clone(), "must be an array of strings");
                Vec::new()
            }
            None => Vec::new(),
        }
    }
}

/// Paths of the schema's object nodes (sections), parents first.
fn section_paths(node: &Value, prefix: &str, out: &mut Vec<String>) {
    if let Value::Object(map) = node {
        for (key, value) in map {
            let path = schema::join(prefix, key);
            if value.is_object() && schema::feature_of(&path).is_none() {
                out.push(path.clone());
                section_paths(value, &path, out);
            }
        }
    }
}

/// The rule text for an integer range.
fn int_rule(min: u64, max: u64) -> String {
    match (min, max) {
        (1, SAFE_MAX) => "must be a positive integer".to_owned(),
        (min, SAFE_MAX) => format!("must be an integer >= {min}"),
        (min, max) => format!("must be an integer from {min} to {max}"),
    }
}

/// Stands in for a value that may be a secret: only its JSON type shows.
pub(super) fn placeholder(value: &Value) -> Value {
    let kind = match value {
        Value::Null => return Value::Null,
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    Value::from(format!("<redacted {kind}>"))
}
