//! Editing a few scalar values of a YAML file in place: the hub-owned
//! fields of a worker configuration (`sessions/<id>/config/config.yaml`),
//! which an operator may have rewritten by hand in ordinary block YAML with
//! comments and keys the hub does not know.
//!
//! [`edit`] sets each [`Edit`]'s path to its value, one edit at a time:
//!
//! - an existing scalar value is replaced where it stands (its span only),
//!   keeping its quoting when that can hold the new value, else written
//!   double-quoted; a value that already reads as the new one is left
//!   byte for byte;
//! - a missing key is inserted after the last entry of its mapping with the
//!   indentation of its siblings (block) or after the last entry (flow,
//!   on a line of its own when the entries are), with missing parent
//!   mappings; an empty or `null` parent becomes a mapping;
//! - every other byte (comments, blank lines, unknown keys, order, quoting,
//!   `---`/`...`, line endings) stays as it was.
//!
//! What it cannot edit safely it refuses, naming the key and the line, and
//! changes nothing: a file that is not one valid YAML mapping document, a
//! hub-owned key twice, an anchor, tag or alias on a hub-owned path, a
//! merge key (`<<`) in a mapping on it, a block scalar, sequence or mapping
//! where a scalar is expected, a scalar or sequence where a mapping is
//! expected, tabs in indentation, a bare carriage return. After every edit
//! the text is read again with the YAML parser ([`read`]) and must equal
//! the previous reading with exactly that one value set; otherwise the
//! edit is refused too ([`Refusal::Unverified`]).
//!
//! Pure: no I/O. No refusal repeats any of the file's text.

pub mod read;
mod scan;

use std::fmt;
use std::ops::Range;

use read::{ReadError, Yaml};
use scan::{BlockMap, Doc, Entry, FlowMap, Node, Root, Style};

/// A value the editor writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NewValue {
    Str(String),
    Int(u64),
}

impl NewValue {
    fn as_yaml(&self) -> Yaml {
        match self {
            NewValue::Str(s) => Yaml::Str(s.clone()),
            NewValue::Int(n) => Yaml::Int(i128::from(*n)),
        }
    }
}

/// When an edit applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Always: the key ends up holding the value.
    Always,
    /// Only when the key is absent: an existing value (any value) stays.
    IfAbsent,
}

/// One key to set: `path` of nested mapping keys from the top.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    pub path: Vec<String>,
    pub value: NewValue,
    pub when: When,
}

impl Edit {
    /// `Always` set `path` (dotted segments given separately) to a string.
    pub fn string(path: &[&str], value: &str) -> Edit {
        Edit {
            path: path.iter().map(|s| (*s).to_owned()).collect(),
            value: NewValue::Str(value.to_owned()),
            when: When::Always,
        }
    }

    fn dotted(&self, depth: usize) -> String {
        self.path[..=depth].join(".")
    }
}

/// The edited text and what changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edited {
    pub text: String,
    /// The dotted paths whose values were written.
    pub changed: Vec<String>,
    /// Byte ranges of `text` that are new (inserted keys and values).
    /// When no existing byte was replaced, removing them gives the input.
    pub inserted: Vec<Range<usize>>,
    /// Whether any existing byte was replaced or removed.
    pub replaced: bool,
}

/// Why a file was left unchanged. Lines are 1-based.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The YAML parser's reading failed (see [`ReadError`]).
    Read(ReadError),
    /// A carriage return not followed by a line feed.
    BareCarriageReturn { line: usize },
    /// The editor could not follow the file's layout at `line`.
    Layout { line: usize, what: &'static str },
    /// A hub-owned key (dotted `key`) cannot be edited safely.
    Key {
        key: String,
        line: usize,
        reason: String,
    },
    /// The edited text did not read back as the expected document, so the
    /// edit of `key` was not made. A bug in the editor, never the file's.
    Unverified { key: String },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Read(err) => write!(f, "the file {err}"),
            Refusal::BareCarriageReturn { line } => {
                write!(f, "line {line} ends with a bare carriage return")
            }
            Refusal::Layout { line, what } => write!(
                f,
                "the editor cannot follow the layout at line {line}: {what}"
            ),
            Refusal::Key { key, line, reason } => {
                write!(f, "cannot edit {key} (line {line}): {reason}")
            }
            Refusal::Unverified { key } => write!(
                f,
                "the edit of {key} did not read back as expected, so it was not made"
            ),
        }
    }
}

impl std::error::Error for Refusal {}

impl From<ReadError> for Refusal {
    fn from(err: ReadError) -> Self {
        Refusal::Read(err)
    }
}

impl From<scan::Unfollowable> for Refusal {
    fn from(err: scan::Unfollowable) -> Self {
        Refusal::Layout {
            line: err.line,
            what: err.what,
        }
    }
}

/// One replacement: `range` of the current text becomes `with`.
struct Splice {
    range: Range<usize>,
    with: String,
}

/// Applies `edits` in order to `text` (see the module documentation).
pub fn edit(text: &str, edits: &[Edit]) -> Result<Edited, Refusal> {
    if let Some(at) = text
        .bytes()
        .enumerate()
        .position(|(i, c)| c == b'\r' && text.as_bytes().get(i + 1) != Some(&b'\n'))
    {
        let line = text.as_bytes()[..at]
            .iter()
            .filter(|&&c| c == b'\n')
            .count()
            + 1;
        return Err(Refusal::BareCarriageReturn { line });
    }
    let mut current = text.to_owned();
    let mut tree = read::parse(&current)?;
    let mut out = Edited {
        text: String::new(),
        changed: Vec::new(),
        inserted: Vec::new(),
        replaced: false,
    };
    // Check every edit's path before changing anything, so that a refusal
    // does not depend on which edit comes first.
    let root = scan::scan(&current)?;
    for e in edits {
        plan(&current, &root, &tree, e)?;
    }
    for e in edits {
        let root = scan::scan(&current)?;
        let Some(mut splices) = plan(&current, &root, &tree, e)? else {
            continue;
        };
        splices.sort_by_key(|s| std::cmp::Reverse(s.range.start));
        let mut next = current.clone();
        for s in &splices {
            next.replace_range(s.range.clone(), &s.with);
            track(&mut out, s);
        }
        let key = e.path.join(".");
        let mut expected = tree.clone();
        set(&mut expected, &e.path, &e.value, e.when);
        match read::parse(&next) {
            Ok(after) if after == expected => tree = after,
            _ => return Err(Refusal::Unverified { key }),
        }
        current = next;
        out.changed.push(key);
    }
    out.text = current;
    Ok(out)
}

/// Records a splice (applied in descending order within one edit) in the
/// inserted ranges.
fn track(out: &mut Edited, s: &Splice) {
    let removed = s.range.len();
    let added = s.with.len();
    for r in &mut out.inserted {
        if r.start >= s.range.end {
            r.start = r.start - removed + added;
            r.end = r.end - removed + added;
        } else if r.end > s.range.start {
            r.end = r.end - removed + added;
        }
    }
    if removed > 0 {
        out.replaced = true;
    } else if added > 0 {
        out.inserted.push(s.range.start..s.range.start + added);
    }
    out.inserted.sort_by_key(|r| r.start);
    let mut merged: Vec<Range<usize>> = Vec::new();
    for r in out.inserted.drain(..) {
        match merged.last_mut() {
            Some(last) if last.end >= r.start => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    out.inserted = merged;
}

/// The expected reading after an edit: `path` set to `value`, parents
/// created (or made mappings where they are `null`) and appended.
pub fn set(doc: &mut Yaml, path: &[String], value: &NewValue, when: When) {
    let mut node = doc;
    for (depth, key) in path.iter().enumerate() {
        if matches!(node, Yaml::Null) {
            *node = Yaml::Map(Vec::new());
        }
        let Yaml::Map(entries) = node else { return };
        let at = entries
            .iter()
            .position(|(k, _)| matches!(k, Yaml::Str(s) if s == key));
        let last = depth + 1 == path.len();
        let at = match at {
            Some(_) if last && when == When::IfAbsent => return,
            Some(at) => at,
            None => {
                let fresh = if last {
                    Yaml::Null
                } else {
                    Yaml::Map(Vec::new())
                };
                entries.push((Yaml::Str(key.clone()), fresh));
                entries.len() - 1
            }
        };
        node = &mut entries[at].1;
        if last {
            *node = value.as_yaml();
        }
    }
}

/// A mapping on an edit's path.
#[derive(Clone, Copy)]
enum MapRef<'r> {
    Block(&'r BlockMap),
    Flow(&'r FlowMap),
}

impl<'r> MapRef<'r> {
    fn entries(self) -> &'r [Entry] {
        match self {
            MapRef::Block(m) => &m.entries,
            MapRef::Flow(m) => &m.entries,
        }
    }

    fn merge(self) -> Option<usize> {
        match self {
            MapRef::Block(m) => m.merge,
            MapRef::Flow(m) => m.merge,
        }
    }
}

/// How the document writes things, for inserted text.
struct Layout<'t> {
    text: &'t str,
    newline: &'static str,
    /// Indentation added per nesting level of block mappings.
    step: usize,
    /// The document is JSON-style (a flow mapping at the top): keys written
    /// double-quoted.
    json: bool,
}

/// The splices for one edit, `None` when nothing needs to change, or the
/// refusal.
fn plan(text: &str, doc: &Doc, tree: &Yaml, e: &Edit) -> Result<Option<Vec<Splice>>, Refusal> {
    let root = &doc.root;
    let splices = locate(text, root, tree, e)?;
    let appends = splices.as_ref().is_some_and(|all| {
        all.iter()
            .any(|s| s.range.start == text.len() && !s.with.is_empty())
    });
    if appends && doc.open_block_scalar_at_end {
        let line = text.bytes().filter(|&c| c == b'\n').count() + 1;
        return Err(refuse(
            e,
            e.path.len() - 1,
            line,
            "would go after a block scalar that ends the file without a line break, which \
             would change that scalar; end the file with a line break"
                .into(),
        ));
    }
    Ok(splices)
}

/// [`plan`] without the end-of-file check.
fn locate(text: &str, root: &Root, tree: &Yaml, e: &Edit) -> Result<Option<Vec<Splice>>, Refusal> {
    if e.path.is_empty() {
        return Ok(None);
    }
    let layout = Layout {
        text,
        newline: if text.contains("\r\n") { "\r\n" } else { "\n" },
        step: block_step(root).unwrap_or(2),
        json: matches!(root, Root::Flow(_)),
    };
    let mut map = match root {
        Root::Block(m) => MapRef::Block(m),
        Root::Flow(m) => MapRef::Flow(m),
    };
    let last = e.path.len() - 1;
    for (depth, key) in e.path.iter().enumerate() {
        if let Some(line) = map.merge() {
            let owner = if depth == 0 {
                "the top-level mapping".to_owned()
            } else {
                e.path[..depth].join(".")
            };
            return Err(refuse(
                e,
                depth,
                line,
                format!("{owner} has a merge key (<<), so its keys cannot be edited safely"),
            ));
        }
        let mut found = map.entries().iter().filter(|en| &en.key == key);
        let Some(entry) = found.next() else {
            return Ok(Some(vec![insert_entry(
                &layout,
                &map,
                &e.path[depth..],
                &e.value,
            )]));
        };
        if let Some(again) = found.next() {
            return Err(refuse(e, depth, again.line, "appears twice".into()));
        }
        if entry.props {
            return Err(refuse(
                e,
                depth,
                entry.line,
                "has an anchor or a tag".into(),
            ));
        }
        let in_flow = matches!(map, MapRef::Flow(_));
        if depth == last {
            let kind = match &entry.value {
                Node::Scalar { span, style } => {
                    if e.when == When::IfAbsent
                        || tree.lookup(&path_refs(&e.path)) == Some(&e.value.as_yaml())
                    {
                        return Ok(None);
                    }
                    let with = render(&e.value, Some(*style), in_flow);
                    return Ok(Some(vec![Splice {
                        range: span.clone(),
                        with,
                    }]));
                }
                Node::Empty { at } => {
                    if e.when == When::IfAbsent {
                        return Ok(None);
                    }
                    let with = format!(" {}", render(&e.value, None, in_flow));
                    return Ok(Some(vec![Splice {
                        range: *at..*at,
                        with,
                    }]));
                }
                Node::KeyOnly => "nothing (a key without `:`)",
                Node::Block(_) | Node::Flow(_) => "a mapping",
                Node::Other(kind) => kind,
            };
            if e.when == When::IfAbsent {
                return Ok(None);
            }
            return Err(refuse(
                e,
                depth,
                entry.line,
                format!("must be a scalar, found {kind}"),
            ));
        }
        map = match &entry.value {
            Node::Block(m) => MapRef::Block(m),
            Node::Flow(m) => MapRef::Flow(m),
            Node::Empty { at } => {
                return Ok(Some(create_under(
                    &layout,
                    &map,
                    entry,
                    *at..*at,
                    &e.path[depth + 1..],
                    &e.value,
                )));
            }
            Node::Scalar { span, .. }
                if matches!(tree.lookup(&path_refs(&e.path[..=depth])), Some(Yaml::Null)) =>
            {
                return Ok(Some(create_under(
                    &layout,
                    &map,
                    entry,
                    span.clone(),
                    &e.path[depth + 1..],
                    &e.value,
                )));
            }
            Node::Scalar { .. } => {
                let found = tree
                    .lookup(&path_refs(&e.path[..=depth]))
                    .map_or("a scalar", Yaml::kind);
                return Err(refuse(
                    e,
                    depth,
                    entry.line,
                    format!("must be a mapping, found {found}"),
                ));
            }
            Node::KeyOnly => {
                return Err(refuse(
                    e,
                    depth,
                    entry.line,
                    "must be a mapping, found nothing (a key without `:`)".into(),
                ))
            }
            Node::Other(kind) => {
                return Err(refuse(
                    e,
                    depth,
                    entry.line,
                    format!("must be a mapping, found {kind}"),
                ))
            }
        };
    }
    Ok(None)
}

fn refuse(e: &Edit, depth: usize, line: usize, reason: String) -> Refusal {
    Refusal::Key {
        key: e.dotted(depth),
        line,
        reason,
    }
}

fn path_refs(path: &[String]) -> Vec<&str> {
    path.iter().map(String::as_str).collect()
}

/// The indentation step of the first block mapping nested in another.
fn block_step(root: &Root) -> Option<usize> {
    fn walk(map: &BlockMap) -> Option<usize> {
        map.entries.iter().find_map(|en| match &en.value {
            Node::Block(child) if child.indent > map.indent => Some(child.indent - map.indent),
            _ => None,
        })
    }
    match root {
        Root::Block(m) => walk(m),
        Root::Flow(_) => None,
    }
}

/// A new entry for `keys` (the first is the missing key, the rest nested
/// under it) ending in `value`, after the last entry of `map`.
fn insert_entry(layout: &Layout, map: &MapRef, keys: &[String], value: &NewValue) -> Splice {
    match map {
        MapRef::Block(m) => {
            let last = m.entries.last().expect("a block mapping has an entry");
            let quoted = m.entries.iter().all(|en| en.key_style == Style::Double);
            let at = last.end;
            let mut with = String::new();
            if at == layout.text.len() && !layout.text.ends_with('\n') {
                with.push_str(layout.newline);
            }
            with.push_str(&block_lines(layout, m.indent, keys, value, quoted));
            Splice {
                range: at..at,
                with,
            }
        }
        MapRef::Flow(m) => {
            let quoted = if m.entries.is_empty() {
                layout.json
            } else {
                m.entries.iter().all(|en| en.key_style == Style::Double)
            };
            let entry = flow_entry(keys, value, quoted);
            match m.entries.last() {
                None => Splice {
                    range: m.open + 1..m.open + 1,
                    with: entry,
                },
                Some(last) => {
                    let with = match m.entry_column {
                        Some(column) => format!(",{}{}{entry}", layout.newline, " ".repeat(column)),
                        None => format!(", {entry}"),
                    };
                    Splice {
                        range: last.end..last.end,
                        with,
                    }
                }
            }
        }
    }
}

/// Makes the empty or `null` value of `entry` (its text at `replace`) a
/// mapping holding `keys` with `value`.
fn create_under(
    layout: &Layout,
    map: &MapRef,
    entry: &Entry,
    replace: Range<usize>,
    keys: &[String],
    value: &NewValue,
) -> Vec<Splice> {
    match map {
        MapRef::Block(m) => {
            let mut with = String::new();
            if entry.end == layout.text.len() && !layout.text.ends_with('\n') {
                with.push_str(layout.newline);
            }
            with.push_str(&block_lines(
                layout,
                m.indent + layout.step,
                keys,
                value,
                false,
            ));
            let mut splices = vec![Splice {
                range: entry.end..entry.end,
                with,
            }];
            if !replace.is_empty() {
                splices.push(Splice {
                    range: replace,
                    with: String::new(),
                });
            }
            splices
        }
        MapRef::Flow(m) => {
            let quoted = m.entries.iter().all(|en| en.key_style == Style::Double);
            let inner = flow_entry(keys, value, quoted);
            let with = if replace.is_empty() {
                format!(" {{{inner}}}")
            } else {
                format!("{{{inner}}}")
            };
            vec![Splice {
                range: replace,
                with,
            }]
        }
    }
}

/// Block lines `k1:` / `  k2:` / … / `    kn: value`, the first at
/// `indent`, each ending in a newline.
fn block_lines(
    layout: &Layout,
    indent: usize,
    keys: &[String],
    value: &NewValue,
    quoted: bool,
) -> String {
    let mut out = String::new();
    for (i, key) in keys.iter().enumerate() {
        out.push_str(&" ".repeat(indent + i * layout.step));
        out.push_str(&render_key(key, quoted));
        out.push(':');
        if i + 1 == keys.len() {
            out.push(' ');
            out.push_str(&render(value, None, false));
        }
        out.push_str(layout.newline);
    }
    out
}

/// `k1: {k2: … value}` in flow style.
fn flow_entry(keys: &[String], value: &NewValue, quoted: bool) -> String {
    let mut out = format!("{}: ", render_key(&keys[0], quoted));
    if keys.len() == 1 {
        out.push_str(&render(value, None, true));
    } else {
        out.push('{');
        out.push_str(&flow_entry(&keys[1..], value, quoted));
        out.push('}');
    }
    out
}

fn render_key(key: &str, quoted: bool) -> String {
    let plain = key
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && matches!(read::resolve(key), Yaml::Str(_));
    if plain && !quoted {
        key.to_owned()
    } else {
        double_quoted(key)
    }
}

/// A value as YAML text. A string keeps the style it replaces (`old`) when
/// that style can hold it: plain (block context only) for a URL or path
/// of safe characters, single-quoted for printable text; else it is
/// double-quoted with JSON-compatible escapes.
fn render(value: &NewValue, old: Option<Style>, flow: bool) -> String {
    let s = match value {
        NewValue::Int(n) => return n.to_string(),
        NewValue::Str(s) => s,
    };
    match old {
        Some(Style::Plain) if !flow && plain_safe(s) => s.clone(),
        Some(Style::Single) if s.chars().all(|c| !needs_escape(c)) => {
            format!("'{}'", s.replace('\'', "''"))
        }
        _ => double_quoted(s),
    }
}

/// Safe as a plain scalar in block context, and read as a string by any
/// YAML loader: nonempty, of letters, digits and `-_.~/:?=&%+@`, starting
/// with a letter, digit or `/`, holding a `/` (no number, boolean or null
/// does), not ending in `:`.
fn plain_safe(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '/')
        && s.contains('/')
        && !s.ends_with(':')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.~/:?=&%+@".contains(c))
}

/// Characters a double-quoted scalar escapes: everything outside YAML's
/// printable set, line breaks and the ones some loaders take for breaks or
/// byte-order marks.
fn needs_escape(c: char) -> bool {
    !matches!(c, ' '..='~' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..)
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}')
}

/// A double-quoted scalar that is also a JSON string.
pub fn double_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if needs_escape(c) => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests;
