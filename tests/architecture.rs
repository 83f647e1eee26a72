//! The layer check: the crate's own imports against the layer tables in
//! `docs/ARCHITECTURE.md`, read from the source text (no build, no crates).
//!
//! The tables sit between `<!-- layers:begin -->` and `<!-- layers:end -->`
//! and are recognised by their header rows:
//!
//! - `| rank | layer | units |`: every top-level module of `src/` (a unit:
//!   `src/x.rs` or `src/x/`; `lib.rs` and `main.rs` are exempt) in exactly
//!   one row; rank 0 is the bottom.
//! - `| from | to | reason |`: an import written in a module whose path
//!   starts with `from` (prefixes match whole segments: `http` covers
//!   `http::api`) of a path that starts with `to` is allowed although it
//!   goes up a layer or closes a circle.
//! - `| fuzz target | links | reason |`: a fuzz target (a file stem in
//!   `fuzz/fuzz_targets/`) may use `simplex_hub::<links>…` besides `wire`.
//!
//! The rules: no import goes up a layer; no units of one layer import each
//! other in a circle; an exception that allows nothing the rules would
//! reject is stale; fuzz targets use only `simplex_hub::wire`.
//!
//! The scanner reads the paths that start with `crate::`, `self::` or
//! `super::` (`simplex_hub::` in fuzz targets), in `use` trees and anywhere
//! in code, after dropping comments and literals. A path through a name
//! brought in by an earlier `use` counts at that `use`. Code under
//! `#[cfg(test)]` counts like any other, marked "test code" in messages so
//! its exception can say "tests only". Macros are read as plain text, so a
//! path a macro assembles from pieces is not seen; `#[path]` is not handled.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::path::Path;
use std::sync::OnceLock;

const BEGIN: &str = "<!-- layers:begin -->";
const END: &str = "<!-- layers:end -->";
const DOC: &str = "docs/ARCHITECTURE.md";

// ------------------------------------------------------------------ tables

#[derive(Debug, Default)]
struct Tables {
    layers: Vec<Layer>,
    exceptions: Vec<Row>,
    /// `from` is the fuzz target, `to` the path it may use.
    fuzz: Vec<Row>,
}

#[derive(Debug)]
struct Layer {
    rank: u32,
    name: String,
    units: Vec<String>,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "layer {} ({})", self.rank, self.name)
    }
}

#[derive(Debug)]
struct Row {
    from: String,
    to: String,
    line: usize,
}

const HEADERS: [&str; 3] = [
    "rank | layer | units",
    "from | to | reason",
    "fuzz target | links | reason",
];

fn parse_tables(doc: &str) -> Result<Tables, Vec<String>> {
    let (mut tables, mut errors) = (Tables::default(), Vec::new());
    let (mut inside, mut closed, mut kind, mut seen) = (false, false, None, [false; 3]);
    for (i, text) in doc.lines().map(str::trim).enumerate() {
        if text == BEGIN || text == END {
            closed |= inside && text == END;
            inside = text == BEGIN;
        } else if inside && text.starts_with('|') {
            let cells: Vec<&str> = text.trim_matches('|').split('|').map(str::trim).collect();
            if let Some(k) = HEADERS.iter().position(|h| *h == cells.join(" | ")) {
                (kind, seen[k]) = (Some(k), true);
            } else if !cells.iter().all(|c| c.contains("---")) {
                if let Err(what) = parse_row(&mut tables, kind, &cells, i + 1) {
                    errors.push(format!("{DOC}:{}: `{text}`: {what}", i + 1));
                }
            }
        }
    }
    if !closed {
        errors.push(format!("{DOC}: no `{BEGIN}` … `{END}` block"));
    }
    for (header, _) in HEADERS.iter().zip(seen).filter(|(_, seen)| !seen) {
        errors.push(format!("{DOC}: no table headed `| {header} |`"));
    }
    errors.is_empty().then_some(tables).ok_or(errors)
}

type RowResult = Result<(), &'static str>;

fn parse_row(tables: &mut Tables, kind: Option<usize>, cells: &[&str], line: usize) -> RowResult {
    const RANK: &str = "a layer's rank is a number, 0 at the bottom";
    const UNITS: &str = "a layer's units are backticked module names: `a`, `b`";
    const PATHS: &str = "the first two cells are module paths such as `session::link`";
    let [a, b, c] = cells else {
        return Err("a row has three cells");
    };
    match kind {
        None => Err("a row before any table header"),
        Some(0) => {
            let (rank, units) = (a.parse().map_err(|_| RANK)?, unit_list(c).ok_or(UNITS)?);
            let name = b.to_string();
            tables.layers.push(Layer { rank, name, units });
            Ok(())
        }
        Some(_) if c.is_empty() => Err("the reason is empty: say why this is allowed"),
        Some(kind) => {
            let (from, to) = path_cell(a).zip(path_cell(b)).ok_or(PATHS)?;
            let rows = match kind {
                1 => &mut tables.exceptions,
                _ => &mut tables.fuzz,
            };
            rows.push(Row { from, to, line });
            Ok(())
        }
    }
}

/// A module path in a cell, backticks optional: `session::link`.
fn path_cell(cell: &str) -> Option<String> {
    let path = cell.trim_matches('`');
    path.split("::").all(is_ident).then(|| path.to_string())
}

/// `` `config`, `capabilities` ``: backticked top-level module names.
fn unit_list(cell: &str) -> Option<Vec<String>> {
    let unit = |u: &str| Some(u.strip_prefix('`')?.strip_suffix('`')?.to_string());
    let units: Option<Vec<String>> = cell.split(',').map(|u| unit(u.trim())).collect();
    units.filter(|units| units.iter().all(|u| is_ident(u)))
}

fn is_ident(s: &str) -> bool {
    let word = s.chars().all(|c| c.is_alphanumeric() || c == '_');
    word && s.starts_with(|c: char| c.is_alphabetic() || c == '_')
}

/// `path` starts with `prefix` at a segment boundary.
fn prefix_matches(path: &str, prefix: &str) -> bool {
    let rest = path.strip_prefix(prefix);
    rest.is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
}

// ----------------------------------------------------------------- sources

struct SourceFile {
    path: String,
    /// `a::b` for `src/a/b.rs` and `src/a/b/mod.rs`; the stem of a fuzz target.
    module: String,
    text: String,
}

impl SourceFile {
    fn new(path: &str, text: &str) -> SourceFile {
        let stem = path.trim_end_matches(".rs");
        let module = match stem.strip_prefix("src/") {
            Some("lib" | "main") => String::new(),
            Some(rel) => rel.trim_end_matches("/mod").replace('/', "::"),
            None => stem.rsplit('/').next().unwrap_or(stem).to_string(),
        };
        let (path, text) = (path.to_string(), text.to_string());
        SourceFile { path, module, text }
    }
}

fn read_tree(root: &Path, rel: &str, out: &mut Vec<SourceFile>) {
    let dir = fs::read_dir(root.join(rel)).unwrap_or_else(|e| panic!("cannot read {rel}/: {e}"));
    let name = |e: fs::DirEntry| e.file_name().to_string_lossy().into_owned();
    let mut names: Vec<String> = dir.flatten().map(name).collect();
    names.sort();
    for path in names.iter().map(|name| format!("{rel}/{name}")) {
        if root.join(&path).is_dir() {
            read_tree(root, &path, out);
        } else if path.ends_with(".rs") {
            let text = fs::read_to_string(root.join(&path)).expect("a source file is UTF-8");
            out.push(SourceFile::new(&path, &text));
        }
    }
}

/// Identifiers and punctuation (`::` as one token) with their lines, without
/// comments, literals (strings, raw strings, chars, numbers) and lifetimes.
fn tokens(text: &str) -> Vec<(String, usize)> {
    let c: Vec<char> = text.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let is_word = |c: &&char| c.is_alphanumeric() || **c == '_';
    let word = |i: usize| c[i..].iter().take_while(is_word).count();
    // The index after a literal whose body starts at `i` and ends with `close`.
    let skip = |mut i: usize, close: &str, escapes: bool, line: &mut usize| {
        let close: Vec<char> = close.chars().collect();
        while i < c.len() && !c[i..].starts_with(&close) {
            *line += usize::from(c[i] == '\n');
            i += 1 + usize::from(escapes && c[i] == '\\' && at(i + 1) != '\n');
        }
        i + close.len()
    };
    let (mut out, mut i, mut line) = (Vec::new(), 0, 1);
    while i < c.len() {
        let (ch, next) = (c[i], at(i + 1));
        let p = i + usize::from(matches!(ch, 'b' | 'c') && matches!(next, 'r' | '"' | '\''));
        let hashes = c[p + 1..].iter().take_while(|&&h| h == '#').count();
        if at(p) == 'r' && at(p + 1 + hashes) == '"' {
            let close = format!("\"{}", "#".repeat(hashes));
            i = skip(p + hashes + 2, &close, false, &mut line);
        } else if at(p) == '"' {
            i = skip(p + 1, "\"", true, &mut line);
        } else if at(p) == '\'' && (at(p + 1) == '\\' || at(p + 2) == '\'') {
            let body = p + 2 + usize::from(at(p + 1) == '\\');
            i = skip(body, "'", false, &mut line);
        } else if ch == '\'' {
            i += 1 + word(i + 1); // a lifetime or a label
        } else if ch == '/' && next == '/' {
            i += c[i..].iter().take_while(|&&c| c != '\n').count();
        } else if ch == '/' && next == '*' {
            let mut depth = 0; // block comments nest
            loop {
                match (at(i), at(i + 1)) {
                    ('/', '*') => (depth, i) = (depth + 1, i + 2),
                    ('*', '/') => (depth, i) = (depth - 1, i + 2),
                    ('\0', _) => break,
                    (ch, _) => (line, i) = (line + usize::from(ch == '\n'), i + 1),
                }
                if depth == 0 {
                    break;
                }
            }
        } else if is_word(&&ch) {
            // A raw identifier keeps its `r#`, so `r#use` is never the keyword.
            let raw = 2 * usize::from((ch, next) == ('r', '#'));
            let len = raw + word(i + raw);
            if !ch.is_ascii_digit() {
                out.push((c[i..i + len].iter().collect(), line));
            }
            i += len;
            while ch.is_ascii_digit() && at(i) == '.' && at(i + 1).is_ascii_digit() {
                i += 1 + word(i + 1);
            }
        } else if (ch, next) == (':', ':') {
            out.push(("::".to_string(), line));
            i += 2;
        } else {
            line += usize::from(ch == '\n');
            if !ch.is_whitespace() {
                out.push((ch.to_string(), line));
            }
            i += 1;
        }
    }
    out
}

#[derive(Clone, Debug)]
struct Import {
    file: String,
    line: usize,
    /// The module it is written in, inline modules included: `a::b::tests`.
    scope: String,
    /// The path it names, from the crate root and without `crate::`.
    target: String,
    test_only: bool,
}

impl Import {
    fn source_unit(&self) -> &str {
        unit(&self.scope)
    }

    fn target_unit(&self) -> &str {
        unit(&self.target)
    }
}

/// Tokens with their lines.
type Toks = [(String, usize)];

/// A path as written, one segment an entry, and its line.
type Leaf = (Vec<String>, usize);

/// Every path into the crate in `file`, and the modules it declares under
/// `#[cfg(test)]` (`mod tests;`). `krate` names the crate: `crate` in it,
/// `simplex_hub` in a fuzz target.
fn scan(file: &SourceFile, krate: &str) -> (Vec<Import>, Vec<String>) {
    let toks = tokens(&file.text);
    let tok = |k: usize| toks.get(k).map_or("", |t| t.0.as_str());
    let (mut imports, mut test_mods) = (Vec::new(), Vec::new());
    // The inline modules around the current token: name, brace depth, cfg(test).
    let mut mods: Vec<(&str, usize, bool)> = Vec::new();
    let mut test_blocks: Vec<usize> = Vec::new();
    let (mut depth, mut nest, mut pending_test, mut pending_mod) = (0, 0, false, None);
    let scope_of = |mods: &[(&str, usize, bool)], name: Option<&str>| -> Vec<String> {
        let outer = file.module.split("::").filter(|s| !s.is_empty());
        let inner = mods.iter().map(|m| m.0).chain(name);
        outer.chain(inner).map(str::to_string).collect()
    };
    let mut k = 0;
    while k < toks.len() {
        let in_test = pending_test || !test_blocks.is_empty() || mods.iter().any(|m| m.2);
        let mut found: Vec<Leaf> = Vec::new();
        match tok(k) {
            "#" if tok(k + 1) == "[" => {
                let end = (k..toks.len()).find(|&e| tok(e) == "]").unwrap_or(k);
                let attr: String = toks[k + 2..end].iter().map(|t| t.0.as_str()).collect();
                pending_test |= attr == "cfg(test)";
                k = end;
            }
            "use" => {
                k = use_tree(&toks, k + 1, &[], &mut found);
                k += (k..toks.len()).take_while(|&e| tok(e) != ";").count();
                pending_test = false;
            }
            "mod" if is_ident(tok(k + 1)) && tok(k + 2) == "{" => pending_mod = Some(tok(k + 1)),
            "mod" if is_ident(tok(k + 1)) && tok(k + 2) == ";" && pending_test => {
                test_mods.push(scope_of(&mods, Some(tok(k + 1))).join("::"));
            }
            "{" => {
                depth += 1;
                match pending_mod.take() {
                    Some(name) => mods.push((name, depth, pending_test)),
                    None if pending_test => test_blocks.push(depth),
                    None => {}
                }
                pending_test = false;
            }
            "}" => {
                mods.retain(|m| m.1 != depth);
                test_blocks.retain(|&d| d != depth);
                (depth, pending_test) = (depth.saturating_sub(1), false);
            }
            "(" | "[" => nest += 1,
            ")" | "]" => nest -= 1,
            ";" if nest == 0 => pending_test = false,
            t if tok(k + 1) == "::" && [krate, "self", "super"].contains(&t) => {
                let mut path = vec![t.to_string()];
                while tok(k + 1) == "::" && is_ident(tok(k + 2)) {
                    path.push(tok(k + 2).to_string());
                    k += 2;
                }
                found.push((path, toks[k].1));
            }
            _ => {}
        }
        for (path, line) in found {
            let scope = scope_of(&mods, None);
            if let Some(target) = resolve(&scope, &path, krate) {
                let (file, scope, test_only) = (file.path.clone(), scope.join("::"), in_test);
                imports.push(Import {
                    file,
                    line,
                    scope,
                    target,
                    test_only,
                });
            }
        }
        k += 1;
    }
    (imports, test_mods)
}

/// Reads the use tree at `k` (after `prefix`) into `out`, one path per leaf:
/// `a::{b, c::{d as e}, self, *}` gives `a::b`, `a::c::d`, `a` and `a`.
/// Returns the index after the tree.
fn use_tree(toks: &Toks, mut k: usize, prefix: &[String], out: &mut Vec<Leaf>) -> usize {
    let tok = |k: usize| toks.get(k).map_or("", |t| t.0.as_str());
    let mut path = prefix.to_vec();
    loop {
        match tok(k) {
            "::" => k += 1,
            "*" => {
                out.push((path, toks[k].1));
                return k + 1;
            }
            "{" => {
                k += 1;
                while k < toks.len() && tok(k) != "}" {
                    k = use_tree(toks, k, &path, out).max(k + 1);
                    k += usize::from(tok(k) == ",");
                }
                return k + 1;
            }
            t if is_ident(t) => {
                if t != "self" || path.is_empty() {
                    path.push(t.to_string());
                }
                if tok(k + 1) != "::" {
                    out.push((path, toks[k].1));
                    return k + if tok(k + 1) == "as" { 3 } else { 1 };
                }
                k += 1;
            }
            _ => return k,
        }
    }
}

/// The path from the crate root that `path`, written in `scope`, names;
/// `None` for other crates' paths and for the crate root itself.
fn resolve(scope: &[String], path: &[String], krate: &str) -> Option<String> {
    let relative = krate == "crate"; // a fuzz target's `self::` is its own
    let (base, rest): (&[String], &[String]) = match path.first()?.as_str() {
        root if root == krate => (&[], &path[1..]),
        "self" if relative => (scope, &path[1..]),
        "super" if relative => {
            let ups = path.iter().take_while(|s| *s == "super").count();
            (&scope[..scope.len().checked_sub(ups)?], &path[ups..])
        }
        _ => return None,
    };
    let full = [base, rest].concat();
    (!full.is_empty()).then(|| full.join("::"))
}

// ------------------------------------------------------------------- model

struct Model {
    tables: Tables,
    /// The top-level modules of `src/`.
    units: BTreeSet<String>,
    /// Every file's module, to name the module an import reaches.
    modules: BTreeSet<String>,
    /// The imports from one unit into another.
    imports: Vec<Import>,
    fuzz_targets: BTreeSet<String>,
    /// The fuzz targets' `simplex_hub::` paths.
    fuzz: Vec<Import>,
}

fn unit(path: &str) -> &str {
    path.split("::").next().unwrap_or("")
}

fn build(tables: Tables, src: &[SourceFile], fuzz: &[SourceFile]) -> Model {
    let modules: BTreeSet<String> = src.iter().map(|f| f.module.clone()).collect();
    let mut units: BTreeSet<String> = modules.iter().map(|m| unit(m).to_string()).collect();
    units.remove("");
    let (mut imports, mut test_mods) = (Vec::new(), Vec::new());
    for file in src.iter().filter(|f| !f.module.is_empty()) {
        let (found, tests) = scan(file, "crate");
        imports.extend(found);
        test_mods.extend(tests);
    }
    for imp in &mut imports {
        imp.test_only |= test_mods.iter().any(|t| prefix_matches(&imp.scope, t));
    }
    imports.retain(|i| i.source_unit() != i.target_unit() && units.contains(i.target_unit()));
    let fuzz_targets = fuzz.iter().map(|f| f.module.clone()).collect();
    let fuzz = fuzz.iter().flat_map(|f| scan(f, "simplex_hub").0).collect();
    Model {
        tables,
        units,
        modules,
        imports,
        fuzz_targets,
        fuzz,
    }
}

impl Model {
    fn layer(&self, unit: &str) -> Option<&Layer> {
        let has = |l: &&Layer| l.units.iter().any(|u| u == unit);
        self.tables.layers.iter().find(has)
    }

    fn exception(&self, imp: &Import) -> Option<&Row> {
        let covers = |e: &&Row| covers(e, imp);
        self.tables.exceptions.iter().find(covers)
    }

    /// The layers of the importing and the imported unit.
    fn layers(&self, imp: &Import) -> Option<(&Layer, &Layer)> {
        self.layer(imp.source_unit())
            .zip(self.layer(imp.target_unit()))
    }

    fn upward(&self, imp: &Import) -> Option<(&Layer, &Layer)> {
        self.layers(imp).filter(|(from, to)| from.rank < to.rank)
    }

    fn same_layer(&self, imp: &Import) -> bool {
        self.layers(imp)
            .is_some_and(|(from, to)| from.rank == to.rank)
    }

    /// The longest file module that `path` starts with: `hub` for `hub::Hub`.
    fn module_of<'a>(&self, path: &'a str) -> &'a str {
        let mut ends: Vec<usize> = path.match_indices("::").map(|(i, _)| i).collect();
        ends.push(path.len());
        let mut modules = ends.iter().rev().map(|&i| &path[..i]);
        let known = modules.find(|m| self.modules.contains(*m));
        known.unwrap_or(unit(path))
    }

    /// The exception row that would allow `imp`.
    fn row_for(&self, imp: &Import) -> String {
        let from = SourceFile::new(&imp.file, "").module;
        let to = self.module_of(&imp.target);
        let why = match imp.test_only {
            true => "tests only",
            false => "why it is deliberate",
        };
        format!("| `{from}` | `{to}` | {why} |")
    }
}

fn covers(row: &Row, imp: &Import) -> bool {
    prefix_matches(&imp.scope, &row.from) && prefix_matches(&imp.target, &row.to)
}

// ------------------------------------------------------------------- graph

/// Unit-level edges with the imports behind each.
type Edges<'a> = BTreeMap<(&'a str, &'a str), Vec<&'a Import>>;

fn unit_edges<'a>(imports: impl Iterator<Item = &'a Import>) -> Edges<'a> {
    let mut edges = Edges::new();
    for imp in imports {
        let edge = edges.entry((imp.source_unit(), imp.target_unit()));
        edge.or_default().push(imp);
    }
    edges
}

/// The strongly connected components of more than one unit (Tarjan).
fn circles<'a>(edges: &Edges<'a>) -> Vec<Vec<&'a str>> {
    let nodes: BTreeSet<&str> = edges.keys().flat_map(|&(a, b)| [a, b]).collect();
    let nodes: Vec<&str> = nodes.into_iter().collect();
    let id = |u: &str| nodes.binary_search(&u).expect("a node of the graph");
    let next = |u: &str| edges.keys().filter(|e| e.0 == u).map(|e| id(e.1)).collect();
    let mut walk = Tarjan {
        next: nodes.iter().map(|u| next(u)).collect(),
        index: vec![None; nodes.len()],
        low: vec![0; nodes.len()],
        ..Tarjan::default()
    };
    for v in 0..nodes.len() {
        if walk.index[v].is_none() {
            walk.visit(v);
        }
    }
    let names = |c: &Vec<usize>| c.iter().map(|&v| nodes[v]).collect();
    walk.out.iter().map(names).collect()
}

#[derive(Default)]
struct Tarjan {
    next: Vec<Vec<usize>>,
    index: Vec<Option<usize>>,
    low: Vec<usize>,
    stack: Vec<usize>,
    count: usize,
    out: Vec<Vec<usize>>,
}

impl Tarjan {
    fn visit(&mut self, v: usize) {
        (self.index[v], self.low[v]) = (Some(self.count), self.count);
        self.count += 1;
        self.stack.push(v);
        for w in self.next[v].clone() {
            match self.index[w] {
                None => {
                    self.visit(w);
                    self.low[v] = self.low[v].min(self.low[w]);
                }
                Some(i) if self.stack.contains(&w) => self.low[v] = self.low[v].min(i),
                Some(_) => {}
            }
        }
        if Some(self.low[v]) == self.index[v] {
            let at = self
                .stack
                .iter()
                .rposition(|&u| u == v)
                .expect("v is on the stack");
            let mut component = self.stack.split_off(at);
            component.sort_unstable();
            if component.len() > 1 {
                self.out.push(component);
            }
        }
    }
}

// ------------------------------------------------------------------- rules

fn test_note(imp: &Import) -> &'static str {
    if imp.test_only {
        " (test code)"
    } else {
        ""
    }
}

fn unit_errors(m: &Model) -> Vec<String> {
    let mut errors = Vec::new();
    for u in &m.units {
        let rows = m.tables.layers.iter().filter(|l| l.units.contains(u));
        let rows: Vec<String> = rows.map(|l| l.to_string()).collect();
        if rows.is_empty() {
            errors.push(format!(
                "src/{u}: the unit `{u}` is in no row of the layer table in {DOC}: add it to the \
                 layer it belongs to (it may import its own layer and the ones below)"
            ));
        } else if rows.len() > 1 {
            let rows = rows.join(" and ");
            errors.push(format!(
                "src/{u}: the unit `{u}` is in {rows}: keep it in one"
            ));
        }
    }
    for layer in &m.tables.layers {
        for u in layer.units.iter().filter(|u| !m.units.contains(*u)) {
            let why = match u.as_str() {
                "lib" | "main" => "is exempt".to_string(),
                _ => format!("has no src/{u}.rs or src/{u}/"),
            };
            errors.push(format!(
                "{DOC}: {layer} names `{u}`, which {why}: remove it"
            ));
        }
    }
    errors
}

fn upward_errors(m: &Model) -> Vec<String> {
    let mut errors = Vec::new();
    for imp in m.imports.iter().filter(|i| m.exception(i).is_none()) {
        let Some((from, to)) = m.upward(imp) else {
            continue;
        };
        let (file, line, note, row) = (&imp.file, imp.line, test_note(imp), m.row_for(imp));
        let (target, rank) = (m.module_of(&imp.target), from.rank);
        let (from_unit, to_unit) = (imp.source_unit(), imp.target_unit());
        errors.push(format!(
            "{file}:{line}: this import of `crate::{target}`{note} goes up a layer: `{from_unit}` is \
             {from}, `{to_unit}` is {to}.\n  Move what it uses down to layer {rank} or lower (or \
             this code up), or add the row\n  {row}\n  to the exceptions table in {DOC}."
        ));
    }
    errors.dedup(); // `use crate::hub::{Hub, Note};` once
    errors
}

fn circle_errors(m: &Model) -> Vec<String> {
    // Without the imports that go up a layer (the rule above has those), a
    // circle cannot leave its layer.
    let kept = m.imports.iter().filter(|i| m.same_layer(i));
    let edges = unit_edges(kept.filter(|i| m.exception(i).is_none()));
    let mut errors = Vec::new();
    for circle in circles(&edges) {
        let names: Vec<String> = circle.iter().map(|u| format!("`{u}`")).collect();
        let (names, layer) = (names.join(", "), m.layer(circle[0]).expect("a layer"));
        let mut text = format!("the units {names} in {layer} import each other in a circle:");
        for ((from, to), imps) in &edges {
            if circle.contains(from) && circle.contains(to) {
                let (n, imp) = (imps.len(), imps[0]);
                let (file, line, target) = (&imp.file, imp.line, &imp.target);
                let note = test_note(imp);
                text += &format!("\n  {from} → {to}: {n} import(s), e.g. {file}:{line}");
                text += &format!(" `crate::{target}`{note}");
            }
        }
        text += &format!(
            "\n  Break it: move what both sides use into one of them (or a lower layer), or add a \
             row for the direction that should not exist, with its reason, to the exceptions \
             table in {DOC}."
        );
        errors.push(text);
    }
    errors
}

/// An exception is in use while it allows an import that the rules would
/// reject without it: one that goes up a layer or closes a circle.
fn stale_errors(m: &Model) -> Vec<String> {
    let sideways = unit_edges(m.imports.iter().filter(|i| m.same_layer(i)));
    let circles = circles(&sideways);
    let in_circle = |i: &Import| {
        let (from, to) = (i.source_unit(), i.target_unit());
        circles.iter().any(|c| c.contains(&from) && c.contains(&to))
    };
    let needed = |i: &&Import| m.upward(i).is_some() || m.same_layer(i) && in_circle(i);
    let mut errors = Vec::new();
    for row @ Row { from, to, line } in &m.tables.exceptions {
        let covered: Vec<&Import> = m.imports.iter().filter(|i| covers(row, i)).collect();
        let why = match covered.len() {
            0 => "matches no import".to_string(),
            n => format!("matches only {n} import(s) that need no exception (none goes up or closes a circle)"),
        };
        if !covered.iter().any(needed) {
            errors.push(format!(
                "{DOC}:{line}: the exception `{from}` → `{to}` {why}: delete it"
            ));
        }
    }
    for row in &m.tables.fuzz {
        let (target, links, line) = (&row.from, &row.to, row.line);
        let path = format!("fuzz/fuzz_targets/{target}.rs");
        let uses = |i: &Import| i.source_unit() == target && prefix_matches(&i.target, links);
        if !m.fuzz_targets.contains(target) {
            errors.push(format!(
                "{DOC}:{line}: the fuzz row `{target}`: there is no {path}"
            ));
        } else if !m.fuzz.iter().any(|i| uses(i) && i.target_unit() != "wire") {
            let what = format!("{path} does not use `simplex_hub::{links}`: delete the row");
            errors.push(format!(
                "{DOC}:{line}: the fuzz row `{target}` → `{links}`: {what}"
            ));
        }
    }
    errors
}

fn fuzz_errors(m: &Model) -> Vec<String> {
    let mut errors = Vec::new();
    for imp in m.fuzz.iter().filter(|i| i.target_unit() != "wire") {
        let (target, path) = (imp.source_unit(), &imp.target);
        let allows = |f: &Row| f.from == target && prefix_matches(path, &f.to);
        if m.tables.fuzz.iter().any(allows) {
            continue;
        }
        let (file, line) = (&imp.file, imp.line);
        let links = path.split("::").take(2).collect::<Vec<_>>().join("::");
        errors.push(format!(
            "{file}:{line}: `simplex_hub::{path}` is outside `wire`, the layer fuzz targets use. \
             Move the code it fuzzes into `wire` (pure parsing, no I/O), or expose it through \
             `harness` and add the row\n  | `{target}` | `{links}` | why it cannot move yet |\n  \
             to the fuzz table in {DOC}."
        ));
    }
    errors
}

// -------------------------------------------------------------- the crate

fn real() -> &'static Model {
    static MODEL: OnceLock<Model> = OnceLock::new();
    MODEL.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let doc = fs::read_to_string(root.join(DOC)).expect("docs/ARCHITECTURE.md is readable");
        let tables = parse_tables(&doc).unwrap_or_else(|errors| {
            panic!("the layer tables do not parse:\n\n{}\n", errors.join("\n"))
        });
        let (mut src, mut fuzz) = (Vec::new(), Vec::new());
        read_tree(root, "src", &mut src);
        read_tree(root, "fuzz/fuzz_targets", &mut fuzz);
        build(tables, &src, &fuzz)
    })
}

fn assert_clean(errors: Vec<String>) {
    let (n, all) = (errors.len(), errors.join("\n\n"));
    assert!(
        errors.is_empty(),
        "{n} violation(s) of the layer tables in {DOC}:\n\n{all}\n"
    );
}

#[test]
fn the_check_reads_the_crate() {
    let m = real();
    assert!(
        m.units.contains("wire") && m.units.contains("hub"),
        "{:?}",
        m.units
    );
    assert!(
        m.imports.len() > 100,
        "only {} imports found",
        m.imports.len()
    );
    assert!(
        !m.fuzz.is_empty(),
        "no `simplex_hub::` path in fuzz targets"
    );
}

#[test]
fn every_unit_is_in_one_layer() {
    assert_clean(unit_errors(real()));
}

#[test]
fn no_import_goes_up_a_layer() {
    assert_clean(upward_errors(real()));
}

#[test]
fn no_units_import_each_other_in_a_circle() {
    assert_clean(circle_errors(real()));
}

#[test]
fn no_exception_is_stale() {
    assert_clean(stale_errors(real()));
}

#[test]
fn fuzz_targets_use_only_the_wire_layer() {
    assert_clean(fuzz_errors(real()));
}

// -------------------------------------------------------- the check itself

type Files<'a> = [(&'a str, &'a str)];

/// Three units: `low` in layer 0, `high` and `side` in layer 1.
fn synthetic(exceptions: &str, fuzz_rows: &str, src: &Files, fuzz: &Files) -> Model {
    let doc = format!(
        "{BEGIN}\n| rank | layer | units |\n| --- | --- | --- |\n| 0 | bottom | `low` |\n\
         | 1 | top | `high`, `side` |\n\n| from | to | reason |\n| --- | --- | --- |\n\
         {exceptions}\n| fuzz target | links | reason |\n| --- | --- | --- |\n{fuzz_rows}{END}\n"
    );
    let files = |set: &Files| set.iter().map(|(p, t)| SourceFile::new(p, t)).collect();
    let (src, fuzz): (Vec<_>, Vec<_>) = (files(src), files(fuzz));
    build(parse_tables(&doc).expect("the tables parse"), &src, &fuzz)
}

const NONE: [String; 0] = [];

#[test]
fn an_upward_import_fails_the_check() {
    let src = [
        ("src/low.rs", "pub fn f() {\n    crate::high::g();\n}\n"),
        ("src/high.rs", "use crate::low::f;\npub fn g() {}\n"),
        ("src/side.rs", ""),
    ];
    let errors = upward_errors(&synthetic("", "", &src, &[]));
    let want = "src/low.rs:2: this import of `crate::high` goes up a layer: `low` is layer 0 \
                (bottom), `high` is layer 1 (top).";
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(errors[0].starts_with(want), "{}", errors[0]);
    assert!(errors[0].contains("| `low` | `high` |"), "{}", errors[0]);

    let allowed = synthetic("| `low` | `high::g` | a callback |\n", "", &src, &[]);
    assert_eq!(upward_errors(&allowed), NONE);
    assert_eq!(stale_errors(&allowed), NONE);
    assert_eq!(unit_errors(&allowed), NONE);
}

#[test]
fn a_stale_exception_fails_the_check() {
    let src = [("src/low.rs", ""), ("src/high.rs", "use crate::low::f;")];
    let fuzz = [("fuzz/fuzz_targets/envelope.rs", "use simplex_hub::wire::x;")];
    let rows = "| low | high | gone |\n| high | low | downward |\n";
    let fuzz_row = "| envelope | harness::skills | gone |\n";
    let errors = stale_errors(&synthetic(rows, fuzz_row, &src, &fuzz));
    let want = [
        format!("{DOC}:9: the exception `low` → `high` matches no import: delete it"),
        format!("{DOC}:10: the exception `high` → `low` matches only 1 import(s) that need"),
        format!("{DOC}:14: the fuzz row `envelope` → `harness::skills`: fuzz/fuzz_targets/"),
    ];
    assert_eq!(errors.len(), 3, "{errors:#?}");
    for (error, want) in errors.iter().zip(want) {
        assert!(
            error.starts_with(&want),
            "{error}\ndoes not start with\n{want}"
        );
    }
}

#[test]
fn a_circle_fails_the_check() {
    let src = [
        ("src/low.rs", ""),
        ("src/high.rs", "use crate::side::S;\npub struct H;\n"),
        ("src/side/mod.rs", "pub struct S(super::high::H);\n"),
    ];
    let m = synthetic("", "", &src, &[]);
    assert_eq!(
        upward_errors(&m),
        NONE,
        "imports within a layer are allowed"
    );
    let errors = circle_errors(&m);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    let parts = [
        "the units `high`, `side` in layer 1 (top)",
        "high → side: 1 import(s), e.g. src/high.rs:1",
        "side → high: 1 import(s), e.g. src/side/mod.rs:1",
    ];
    for part in parts {
        assert!(errors[0].contains(part), "{part:?} in {}", errors[0]);
    }
    let broken = synthetic("| side | high | the one way back |\n", "", &src, &[]);
    assert_eq!(circle_errors(&broken), NONE);
    assert_eq!(stale_errors(&broken), NONE);
}

#[test]
fn units_and_fuzz_targets_are_checked() {
    let src = [
        ("src/low.rs", ""),
        ("src/high.rs", ""),
        ("src/extra/mod.rs", ""),
    ];
    let src = [&src[..], &[("src/lib.rs", "pub mod low;")]].concat();
    let errors = unit_errors(&synthetic("", "", &src, &[]));
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert!(errors[0].starts_with("src/extra: the unit `extra` is in no row"));
    assert!(errors[1].contains("names `side`, which has no src/side.rs or src/side/"));

    let target = "use simplex_hub::wire::ids;\n\
                  use simplex_hub::{harness::skills::{self, Skill}, wire::x};\n\
                  fn f() { simplex_hub::harness::query::run(); }\n";
    let fuzz = [("fuzz/fuzz_targets/skill.rs", target)];
    let errors = fuzz_errors(&synthetic("", "", &[], &fuzz));
    let heads: Vec<&str> = errors
        .iter()
        .flat_map(|e| e.split(" is outside").next())
        .collect();
    let want = [
        "fuzz/fuzz_targets/skill.rs:2: `simplex_hub::harness::skills`",
        "fuzz/fuzz_targets/skill.rs:2: `simplex_hub::harness::skills::Skill`",
        "fuzz/fuzz_targets/skill.rs:3: `simplex_hub::harness::query::run`",
    ];
    assert_eq!(heads, want);
    assert!(
        errors[2].contains("| `skill` | `harness::query` |"),
        "{}",
        errors[2]
    );
    let allowed = synthetic("", "| skill | harness | not yet |\n", &[], &fuzz);
    assert_eq!(fuzz_errors(&allowed), NONE);
}

#[test]
fn the_scanner_reads_every_import_form() {
    let text = r##"//! Not code: crate::doc::x
use std::fmt;
pub(crate) use crate::a::{
    b::{C, d as e},
    f::{self, *},
};
pub use super::sibling::S;
/* block /* nested crate::no::x */ crate::no::y */
const S: &str = "crate::no::z \" crate::no::w";
const R: &str = r#"crate::no::raw "quoted" "#;
const Q: [char; 2] = ['"', '\''];
fn f<'a>(x: &'a str) -> crate::g::T { self::local::h(b"crate::no::b"); crate::g::T::new::<u8>(x) }
#[cfg(test)]
#[allow(unused)]
mod tests {
    use super::*;
    fn t() { crate::k::L::new(); }
}
fn after() -> super::super::top::U {}
"##;
    let (imports, _) = scan(&SourceFile::new("src/m/n.rs", text), "crate");
    let show = |i: &Import| format!("{} {} in {}{}", i.line, i.target, i.scope, test_note(i));
    let found: Vec<String> = imports.iter().map(show).collect();
    let want = [
        "4 a::b::C in m::n",
        "4 a::b::d in m::n",
        "5 a::f in m::n",
        "5 a::f in m::n",
        "7 m::sibling::S in m::n",
        "12 g::T in m::n",
        "12 m::n::local::h in m::n",
        "12 g::T::new in m::n",
        "16 m::n in m::n::tests (test code)",
        "17 k::L::new in m::n::tests (test code)",
        "19 top::U in m::n",
    ];
    assert_eq!(found, want);
}
