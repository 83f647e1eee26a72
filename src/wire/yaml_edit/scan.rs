//! The editor's own view of a document's layout: where each mapping entry
//! of block and flow mappings starts and ends, and the byte span of each
//! scalar value, so that a value can be replaced or a key inserted without
//! touching any other byte. Sequences, block scalars and aliases are
//! followed only far enough to skip them.
//!
//! This is not a YAML parser: it runs on text the real parser
//! ([`super::read`]) has already accepted, and whatever it gets wrong the
//! editor's read-back check catches. What it cannot follow it refuses,
//! naming the line.

use std::ops::Range;

use super::read::MAX_DEPTH;

/// How a scalar is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Plain,
    Single,
    Double,
}

/// A value in a mapping entry.
#[derive(Debug)]
pub enum Node {
    Block(BlockMap),
    Flow(FlowMap),
    /// A one- or multi-line plain or quoted scalar at `span`.
    Scalar {
        span: Range<usize>,
        style: Style,
    },
    /// `key:` with nothing after it; `at` is just after the `:`.
    Empty {
        at: usize,
    },
    /// A flow entry with no `:` at all (`{key}`).
    KeyOnly,
    /// Anything else, skipped: "a sequence", "a block scalar", "an alias".
    Other(&'static str),
}

/// One `key: value` of a mapping.
#[derive(Debug)]
pub struct Entry {
    pub key: String,
    pub key_style: Style,
    /// 1-based line of the key.
    pub line: usize,
    /// The value carries an anchor (`&a`) or a tag (`!t`).
    pub props: bool,
    pub value: Node,
    /// Block: the start of the line after the entry's last line (or the end
    /// of the text). Flow: just after the value (or the key).
    pub end: usize,
}

/// A block mapping whose keys are at column `indent`.
#[derive(Debug)]
pub struct BlockMap {
    pub indent: usize,
    pub entries: Vec<Entry>,
    /// The 1-based line of a merge key (`<<`), which makes the mapping's
    /// keys depend on another node.
    pub merge: Option<usize>,
}

/// A flow mapping `{ … }`.
#[derive(Debug)]
pub struct FlowMap {
    /// Offset of the `{`.
    pub open: usize,
    pub entries: Vec<Entry>,
    pub merge: Option<usize>,
    /// The column of the first entry when it starts on a line of its own
    /// (pretty-printed JSON): new entries go on lines of their own there.
    pub entry_column: Option<usize>,
}

/// The document: its top-level mapping.
#[derive(Debug)]
pub enum Root {
    Block(BlockMap),
    Flow(FlowMap),
}

/// What the scanner found.
#[derive(Debug)]
pub struct Doc {
    pub root: Root,
    /// A block scalar runs to the end of a text without a final line
    /// break: text appended there would change that scalar's value.
    pub open_block_scalar_at_end: bool,
}

/// Why the layout could not be followed. `line` is 1-based.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfollowable {
    pub line: usize,
    pub what: &'static str,
}

type Scan<T> = Result<T, Unfollowable>;

/// Reads the layout of `text`.
pub fn scan(text: &str) -> Scan<Doc> {
    let mut scanner = Scanner::new(text);
    let root = scanner.document()?;
    Ok(Doc {
        root,
        open_block_scalar_at_end: scanner.open_block_scalar_at_end,
    })
}

struct Scanner<'a> {
    b: &'a [u8],
    line_starts: Vec<usize>,
    /// The length of a byte-order mark at the start: the first line's
    /// columns count from after it.
    bom: usize,
    depth: usize,
    open_block_scalar_at_end: bool,
}

fn is_ws(c: u8) -> bool {
    c == b' ' || c == b'\t' || c == b'\r'
}

fn is_flow_indicator(c: u8) -> bool {
    matches!(c, b',' | b'[' | b']' | b'{' | b'}')
}

impl<'a> Scanner<'a> {
    fn new(text: &'a str) -> Self {
        let b = text.as_bytes();
        let mut line_starts = vec![0];
        line_starts.extend(
            b.iter()
                .enumerate()
                .filter(|(_, c)| **c == b'\n')
                .map(|(i, _)| i + 1),
        );
        Scanner {
            b,
            line_starts,
            bom: if text.starts_with('\u{feff}') { 3 } else { 0 },
            depth: 0,
            open_block_scalar_at_end: false,
        }
    }

    fn at(&self, i: usize) -> u8 {
        self.b.get(i).copied().unwrap_or(0)
    }

    fn eof(&self, i: usize) -> bool {
        i >= self.b.len()
    }

    /// 1-based line of offset `i`.
    fn line(&self, i: usize) -> usize {
        self.line_starts.partition_point(|&s| s <= i)
    }

    fn line_start(&self, i: usize) -> usize {
        self.line_starts[self.line(i) - 1].max(self.bom.min(i))
    }

    fn column(&self, i: usize) -> usize {
        i - self.line_start(i)
    }

    /// The offset of the `\n` ending the line of `i`, or the end.
    fn eol(&self, i: usize) -> usize {
        self.b[i.min(self.b.len())..]
            .iter()
            .position(|&c| c == b'\n')
            .map_or(self.b.len(), |p| i + p)
    }

    fn next_line(&self, i: usize) -> usize {
        (self.eol(i) + 1).min(self.b.len())
    }

    fn fail<T>(&self, i: usize, what: &'static str) -> Scan<T> {
        Err(Unfollowable {
            line: self.line(i.min(self.b.len())),
            what,
        })
    }

    fn skip_inline_ws(&self, mut i: usize) -> usize {
        while is_ws(self.at(i)) {
            i += 1;
        }
        i
    }

    /// Whether `i` is at the end of the line's content (end, newline, or a
    /// comment).
    fn at_line_end(&self, i: usize) -> bool {
        let c = self.at(i);
        self.eof(i) || c == b'\n' || c == b'#'
    }

    /// After `i` on its line only blanks or a comment follow.
    fn rest_is_blank(&self, i: usize) -> Scan<()> {
        let j = self.skip_inline_ws(i);
        if self.at_line_end(j) && (self.at(j) != b'#' || j > i || i == self.line_start(i)) {
            Ok(())
        } else {
            self.fail(j, "more content after a value on the same line")
        }
    }

    /// The indentation and the first content byte of the line starting at
    /// `ls`, or `None` for a blank or comment-only line.
    fn content(&self, ls: usize) -> Scan<Option<(usize, usize)>> {
        let mut i = ls;
        while self.at(i) == b' ' {
            i += 1;
        }
        let j = self.skip_inline_ws(i);
        if self.at_line_end(j) {
            return Ok(None);
        }
        if j != i {
            return self.fail(i, "a tab in the indentation");
        }
        Ok(Some((i - ls, i)))
    }

    /// The next content line at or after the line starting at `ls`:
    /// `(indent, first content byte)`.
    fn next_content(&self, mut ls: usize) -> Scan<Option<(usize, usize)>> {
        while !self.eof(ls) {
            if let Some(found) = self.content(ls)? {
                return Ok(Some(found));
            }
            ls = self.next_line(ls);
        }
        Ok(None)
    }

    /// `---` or `...` at the start of a line, followed by a blank or the end.
    fn is_marker(&self, i: usize) -> bool {
        i == self.line_start(i)
            && (self.b[i..].starts_with(b"---") || self.b[i..].starts_with(b"..."))
            && (self.eof(i + 3) || is_ws(self.at(i + 3)) || self.at(i + 3) == b'\n')
    }

    /// A `-` sequence indicator at `i`.
    fn is_item(&self, i: usize) -> bool {
        self.at(i) == b'-' && {
            let c = self.at(i + 1);
            self.eof(i + 1) || is_ws(c) || c == b'\n'
        }
    }

    fn enter(&mut self, i: usize) -> Scan<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return self.fail(i, "nesting too deep");
        }
        Ok(())
    }

    fn document(&mut self) -> Scan<Root> {
        let mut ls = self.bom;
        let mut started = false;
        let mut after_marker = false;
        let start = loop {
            if self.eof(ls) {
                return self.fail(ls, "no mapping in the document");
            }
            let Some((_, i)) = self.content(ls)? else {
                ls = self.next_line(ls);
                continue;
            };
            if !started && self.at(i) == b'%' && i == ls {
                ls = self.next_line(ls);
                continue;
            }
            if !started && self.is_marker(i) && self.at(i) == b'-' {
                started = true;
                let j = self.skip_inline_ws(i + 3);
                if self.at_line_end(j) {
                    ls = self.next_line(ls);
                    continue;
                }
                after_marker = true;
                break j;
            }
            break i;
        };
        let (root, end) = match self.at(start) {
            b'{' => {
                let (map, close) = self.flow_map(start)?;
                self.rest_is_blank(close)?;
                (Root::Flow(map), self.next_line(close))
            }
            _ if after_marker => return self.fail(start, "a block mapping on the `---` line"),
            b'&' | b'!' => return self.fail(start, "an anchor or tag on the whole document"),
            _ if self.looks_like_key(start) => {
                let (map, end) = self.block_map(self.column(start), start)?;
                (Root::Block(map), end)
            }
            _ => return self.fail(start, "a document that is not a mapping"),
        };
        // Only blanks, comments and a closing `...` may follow.
        let mut ls = end;
        while !self.eof(ls) {
            if let Some((_, i)) = self.content(ls)? {
                if !(self.is_marker(i) && self.at(i) == b'.') {
                    return self.fail(i, "content after the top-level mapping");
                }
            }
            ls = self.next_line(ls);
        }
        Ok(root)
    }

    /// Whether the content at `i` starts a `key:` entry.
    fn looks_like_key(&self, i: usize) -> bool {
        match self.at(i) {
            b'?' if self.is_indicator_at(i) => true,
            b'"' | b'\'' => match self.quoted_end_on_line(i) {
                Some(e) => {
                    let j = self.skip_inline_ws(e);
                    self.at(j) == b':' && self.is_indicator_at(j)
                }
                None => false,
            },
            b'-' if self.is_item(i) => false,
            b'[' | b'{' | b'|' | b'>' | b'*' | b'&' | b'!' | b'#' => false,
            _ => self.plain_key_colon(i).is_some(),
        }
    }

    /// `c` at `i` followed by a blank or the end of the line.
    fn is_indicator_at(&self, i: usize) -> bool {
        let c = self.at(i + 1);
        self.eof(i + 1) || is_ws(c) || c == b'\n'
    }

    /// The `:` ending a plain key that starts at `i` on this line.
    fn plain_key_colon(&self, i: usize) -> Option<usize> {
        let eol = self.eol(i);
        let mut j = i;
        while j < eol {
            let c = self.at(j);
            if c == b':' && self.is_indicator_at(j) {
                return Some(j);
            }
            if c == b'#' && j > i && is_ws(self.at(j - 1)) {
                return None;
            }
            j += 1;
        }
        None
    }

    /// The end (after the closing quote) of a quoted scalar at `i` when it
    /// closes on the same line.
    fn quoted_end_on_line(&self, i: usize) -> Option<usize> {
        let e = self.quoted_end(i).ok()?;
        (self.line(e - 1) == self.line(i)).then_some(e)
    }

    /// The end (after the closing quote) of the quoted scalar at `i`.
    fn quoted_end(&self, i: usize) -> Scan<usize> {
        let quote = self.at(i);
        let mut j = i + 1;
        while !self.eof(j) {
            let c = self.at(j);
            if quote == b'"' && c == b'\\' {
                j += 2;
                continue;
            }
            if c == quote {
                if quote == b'\'' && self.at(j + 1) == b'\'' {
                    j += 2;
                    continue;
                }
                return Ok(j + 1);
            }
            j += 1;
        }
        self.fail(i, "an unterminated quoted scalar")
    }

    /// A key at `i` (plain, or quoted and on one line): its text, style,
    /// and the offset just after its `:`.
    fn block_key(&self, i: usize) -> Scan<(String, Style, usize)> {
        match self.at(i) {
            b'"' | b'\'' => {
                let Some(e) = self.quoted_end_on_line(i) else {
                    return self.fail(i, "a key that is not `key: value`");
                };
                let j = self.skip_inline_ws(e);
                if self.at(j) != b':' || !self.is_indicator_at(j) {
                    return self.fail(i, "a key that is not `key: value`");
                }
                let (key, style) = self.decode_quoted(i, e)?;
                Ok((key, style, j + 1))
            }
            _ => {
                let Some(colon) = self.plain_key_colon(i) else {
                    return self.fail(i, "a line that is not `key: value`");
                };
                let key = self.text(i, colon).trim_end_matches([' ', '\t']);
                Ok((key.to_owned(), Style::Plain, colon + 1))
            }
        }
    }

    fn text(&self, from: usize, to: usize) -> &'a str {
        // Offsets always fall on ASCII syntax bytes, so on char boundaries.
        std::str::from_utf8(&self.b[from..to]).unwrap_or("")
    }

    /// The text of a one-line quoted key `[i, e)`.
    fn decode_quoted(&self, i: usize, e: usize) -> Scan<(String, Style)> {
        let inner = self.text(i + 1, e - 1);
        if self.at(i) == b'\'' {
            return Ok((inner.replace("''", "'"), Style::Single));
        }
        let mut out = String::new();
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            let escaped = match chars.next() {
                Some('0') => '\0',
                Some('a') => '\u{7}',
                Some('b') => '\u{8}',
                Some('t') | Some('\t') => '\t',
                Some('n') => '\n',
                Some('v') => '\u{b}',
                Some('f') => '\u{c}',
                Some('r') => '\r',
                Some('e') => '\u{1b}',
                Some(' ') => ' ',
                Some('"') => '"',
                Some('/') => '/',
                Some('\\') => '\\',
                Some('N') => '\u{85}',
                Some('_') => '\u{a0}',
                Some('L') => '\u{2028}',
                Some('P') => '\u{2029}',
                Some(x @ ('x' | 'u' | 'U')) => {
                    let width = match x {
                        'x' => 2,
                        'u' => 4,
                        _ => 8,
                    };
                    let hex: String = chars.by_ref().take(width).collect();
                    match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                        Some(c) if hex.len() == width => c,
                        _ => return self.fail(i, "an escape in a key"),
                    }
                }
                _ => return self.fail(i, "an escape in a key"),
            };
            out.push(escaped);
        }
        Ok((out, Style::Double))
    }

    /// A block mapping with keys at column `indent`, its first key at `first`
    /// (which may follow a `- ` on its line). Returns it and its end.
    fn block_map(&mut self, indent: usize, first: usize) -> Scan<(BlockMap, usize)> {
        self.enter(first)?;
        let mut map = BlockMap {
            indent,
            entries: Vec::new(),
            merge: None,
        };
        let mut i = first;
        let end = loop {
            match self.at(i) {
                b'?' if self.is_indicator_at(i) => return self.fail(i, "an explicit `?` key"),
                b'-' if self.is_item(i) => {
                    return self.fail(i, "a sequence item where a key was expected")
                }
                b'&' | b'!' | b'*' => return self.fail(i, "an anchor, tag or alias on a key"),
                b'[' | b'{' => return self.fail(i, "a sequence or mapping used as a key"),
                _ => {}
            }
            let line = self.line(i);
            let (key, key_style, after) = self.block_key(i)?;
            if key == "<<" && key_style == Style::Plain {
                map.merge.get_or_insert(line);
            }
            let (props, value, end) = self.block_value(indent, after)?;
            map.entries.push(Entry {
                key,
                key_style,
                line,
                props,
                value,
                end,
            });
            match self.next_content(end)? {
                Some((n, j)) if n == indent && !self.is_marker(j) => i = j,
                Some((n, j)) if n > indent => {
                    return self.fail(j, "a line indented more than its mapping's keys")
                }
                _ => break end,
            }
        };
        self.depth -= 1;
        Ok((map, end))
    }

    /// Anchors and tags at `i`: whether there were any, and the offset after.
    fn props(&self, mut i: usize, flow: bool) -> (bool, usize) {
        let mut any = false;
        while matches!(self.at(i), b'&' | b'!') {
            any = true;
            while !self.eof(i) && !is_ws(self.at(i)) && self.at(i) != b'\n' {
                if flow && is_flow_indicator(self.at(i)) {
                    break;
                }
                i += 1;
            }
            i = self.skip_inline_ws(i);
        }
        (any, i)
    }

    /// The value of a block entry whose mapping is at `indent`, starting
    /// just after its `:` at `after`: whether it has properties, the node,
    /// and the entry's end.
    fn block_value(&mut self, indent: usize, after: usize) -> Scan<(bool, Node, usize)> {
        let i = self.skip_inline_ws(after);
        let (props, i) = self.props(i, false);
        if !self.at_line_end(i) {
            let (node, end) = self.inline(indent, i)?;
            return Ok((props, node, end));
        }
        let next = self.next_line(i);
        match self.next_content(next)? {
            Some((n, j)) if n > indent => {
                let (node, end) = self.own_line(indent, n, j)?;
                Ok((props, node, end))
            }
            Some((n, j)) if n == indent && self.is_item(j) => {
                let end = self.block_seq(n, j)?;
                Ok((props, Node::Other("a sequence"), end))
            }
            _ => Ok((props, Node::Empty { at: after }, next)),
        }
    }

    /// A node starting on a line of its own at `i` (indentation `n`) inside
    /// a parent at `parent`.
    fn own_line(&mut self, parent: usize, n: usize, i: usize) -> Scan<(Node, usize)> {
        if self.is_item(i) {
            let end = self.block_seq(n, i)?;
            return Ok((Node::Other("a sequence"), end));
        }
        if matches!(self.at(i), b'&' | b'!') {
            return self.fail(i, "an anchor or tag on a line of its own");
        }
        if self.looks_like_key(i) {
            let (map, end) = self.block_map(n, i)?;
            return Ok((Node::Block(map), end));
        }
        self.inline(parent, i)
    }

    /// A block sequence with its `-` at column `indent`, the first at
    /// `first`. Returns its end.
    fn block_seq(&mut self, indent: usize, first: usize) -> Scan<usize> {
        self.enter(first)?;
        let mut i = first;
        let end = loop {
            let j = self.skip_inline_ws(i + 1);
            let (_, j) = self.props(j, false);
            let end = if self.at_line_end(j) {
                let next = self.next_line(j);
                match self.next_content(next)? {
                    Some((n, k)) if n > indent => self.own_line(indent, n, k)?.1,
                    _ => next,
                }
            } else if self.is_item(j) {
                self.block_seq(self.column(j), j)?
            } else if self.looks_like_key(j) {
                self.block_map(self.column(j), j)?.1
            } else {
                self.inline(indent, j)?.1
            };
            match self.next_content(end)? {
                Some((n, k)) if n == indent && self.is_item(k) => i = k,
                Some((n, k)) if n > indent => {
                    return self.fail(k, "a line indented more than its sequence")
                }
                _ => break end,
            }
        };
        self.depth -= 1;
        Ok(end)
    }

    /// A value that starts at `i` on a line, inside a block parent at
    /// `parent`: the node and the start of the line after it.
    fn inline(&mut self, parent: usize, i: usize) -> Scan<(Node, usize)> {
        match self.at(i) {
            b'"' | b'\'' => {
                let e = self.quoted_end(i)?;
                self.rest_is_blank(e)?;
                let style = if self.at(i) == b'"' {
                    Style::Double
                } else {
                    Style::Single
                };
                Ok((Node::Scalar { span: i..e, style }, self.next_line(e)))
            }
            b'{' => {
                let (map, close) = self.flow_map(i)?;
                self.rest_is_blank(close)?;
                Ok((Node::Flow(map), self.next_line(close)))
            }
            b'[' => {
                let close = self.skip_flow(i)?;
                self.rest_is_blank(close)?;
                Ok((Node::Other("a sequence"), self.next_line(close)))
            }
            b'*' => {
                let mut e = i;
                while !self.eof(e) && !is_ws(self.at(e)) && self.at(e) != b'\n' {
                    e += 1;
                }
                self.rest_is_blank(e)?;
                Ok((Node::Other("an alias"), self.next_line(e)))
            }
            b'|' | b'>' => Ok((Node::Other("a block scalar"), self.block_scalar(parent, i)?)),
            b'@' | b'`' | b'%' => self.fail(i, "a reserved character starting a value"),
            b'-' | b'?' | b':' if self.is_indicator_at(i) => {
                self.fail(i, "an indicator where a value was expected")
            }
            _ => {
                let (span, end) = self.plain_block(parent, i)?;
                Ok((
                    Node::Scalar {
                        span,
                        style: Style::Plain,
                    },
                    end,
                ))
            }
        }
    }

    /// A block scalar whose header is at `i`: the lines after it that are
    /// blank or indented more than `parent`, trailing blank lines included.
    fn block_scalar(&mut self, parent: usize, i: usize) -> Scan<usize> {
        let mut ls = self.next_line(i);
        while !self.eof(ls) {
            let mut j = ls;
            while self.at(j) == b' ' {
                j += 1;
            }
            let k = self.skip_inline_ws(j);
            let blank = self.eof(k) || self.at(k) == b'\n';
            if !blank && j - ls <= parent {
                break;
            }
            ls = self.next_line(ls);
        }
        if self.eof(ls) && !self.b.ends_with(b"\n") {
            self.open_block_scalar_at_end = true;
        }
        Ok(ls)
    }

    /// A plain scalar at `i` in block context under `parent`: its span
    /// (without trailing blanks) and the start of the line after it.
    fn plain_block(&self, parent: usize, i: usize) -> Scan<(Range<usize>, usize)> {
        let (mut end, mut commented) = self.plain_line(i);
        let mut ls = self.next_line(i);
        while !commented && !self.eof(ls) {
            let mut j = ls;
            while self.at(j) == b' ' {
                j += 1;
            }
            let k = self.skip_inline_ws(j);
            if self.eof(k) || self.at(k) == b'\n' {
                ls = self.next_line(ls);
                continue;
            }
            if self.at(k) == b'#' || j - ls <= parent || self.is_marker(j) {
                break;
            }
            if k != j {
                return self.fail(j, "a tab in the indentation");
            }
            (end, commented) = self.plain_line(j);
            ls = self.next_line(j);
        }
        Ok((i..end, self.next_line(end.max(i))))
    }

    /// One line of a block plain scalar from `i`: where its text ends
    /// (before trailing blanks) and whether a comment follows.
    fn plain_line(&self, i: usize) -> (usize, bool) {
        let eol = self.eol(i);
        let mut end = i;
        let mut j = i;
        while j < eol {
            let c = self.at(j);
            if c == b'#' && j > i && is_ws(self.at(j - 1)) {
                return (end, true);
            }
            if !is_ws(c) {
                end = j + 1;
            }
            j += 1;
        }
        (end, false)
    }

    /// Blanks, line breaks and comments inside a flow collection.
    fn skip_flow_ws(&self, mut i: usize) -> usize {
        loop {
            let c = self.at(i);
            if self.eof(i) {
                return i;
            }
            if is_ws(c) || c == b'\n' {
                i += 1;
            } else if c == b'#'
                && (i == 0 || matches!(self.at(i - 1), b' ' | b'\t' | b'\n' | b'\r'))
            {
                i = self.eol(i);
            } else {
                return i;
            }
        }
    }

    /// The end of a plain scalar at `i` in flow context, and the end of its
    /// text without trailing blanks.
    fn plain_flow(&self, i: usize) -> usize {
        let mut j = i;
        let mut end = i;
        while !self.eof(j) {
            let c = self.at(j);
            if is_flow_indicator(c) {
                break;
            }
            if c == b':' {
                let n = self.at(j + 1);
                if self.eof(j + 1) || is_ws(n) || n == b'\n' || is_flow_indicator(n) {
                    break;
                }
            }
            if c == b'#' && j > i && matches!(self.at(j - 1), b' ' | b'\t' | b'\n' | b'\r') {
                break;
            }
            if !is_ws(c) && c != b'\n' {
                end = j + 1;
            }
            j += 1;
        }
        end
    }

    /// A flow collection at `i` (`[` or `{`), skipped: the offset after its
    /// closing bracket.
    fn skip_flow(&mut self, i: usize) -> Scan<usize> {
        let mut depth = 0usize;
        let mut j = i;
        // After a quoted scalar or a closing bracket a `:` is an indicator
        // even without a blank after it (a JSON-like key).
        let mut json_like = false;
        loop {
            j = self.skip_flow_ws(j);
            if self.eof(j) {
                return self.fail(i, "an unterminated flow collection");
            }
            let c = self.at(j);
            match c {
                b'[' | b'{' => {
                    depth += 1;
                    if depth > MAX_DEPTH {
                        return self.fail(j, "nesting too deep");
                    }
                    j += 1;
                    json_like = false;
                }
                b']' | b'}' => {
                    depth -= 1;
                    j += 1;
                    if depth == 0 {
                        return Ok(j);
                    }
                    json_like = true;
                }
                b',' => {
                    j += 1;
                    json_like = false;
                }
                b'"' | b'\'' => {
                    j = self.quoted_end(j)?;
                    json_like = true;
                }
                b':' if json_like || self.flow_indicator_at(j) => {
                    j += 1;
                    json_like = false;
                }
                b'?' if self.flow_indicator_at(j) => j += 1,
                b'&' | b'!' | b'*' => {
                    j = self.props_token_end(j);
                    json_like = false;
                }
                _ => {
                    j = self.plain_flow(j).max(j + 1);
                    json_like = false;
                }
            }
        }
    }

    /// `:` or `?` at `i` followed by a blank, a break or a flow indicator.
    fn flow_indicator_at(&self, i: usize) -> bool {
        let n = self.at(i + 1);
        self.eof(i + 1) || is_ws(n) || n == b'\n' || is_flow_indicator(n)
    }

    /// The end of an anchor, tag or alias token in flow context.
    fn props_token_end(&self, mut i: usize) -> usize {
        i += 1;
        while !self.eof(i)
            && !is_ws(self.at(i))
            && self.at(i) != b'\n'
            && !is_flow_indicator(self.at(i))
        {
            i += 1;
        }
        i
    }

    /// A flow mapping at `i` (`{`): its entries, and the offset after `}`.
    fn flow_map(&mut self, i: usize) -> Scan<(FlowMap, usize)> {
        self.enter(i)?;
        let mut map = FlowMap {
            open: i,
            entries: Vec::new(),
            merge: None,
            entry_column: None,
        };
        let mut j = i + 1;
        loop {
            j = self.skip_flow_ws(j);
            if self.eof(j) {
                return self.fail(i, "an unterminated flow mapping");
            }
            if self.at(j) == b'}' {
                break;
            }
            if map.entries.is_empty() && self.line(j) != self.line(i) {
                map.entry_column = Some(self.column(j));
            }
            let line = self.line(j);
            let (key, key_style, key_end) = match self.at(j) {
                b'?' if self.flow_indicator_at(j) => return self.fail(j, "an explicit `?` key"),
                b'[' | b'{' => return self.fail(j, "a sequence or mapping used as a key"),
                b'&' | b'!' | b'*' => return self.fail(j, "an anchor, tag or alias on a key"),
                b',' | b']' => return self.fail(j, "an empty flow entry"),
                b'"' | b'\'' => {
                    let e = self.quoted_end(j)?;
                    if self.line(e - 1) != line {
                        return self.fail(j, "a key over more than one line");
                    }
                    let (key, style) = self.decode_quoted(j, e)?;
                    (key, style, e)
                }
                _ => {
                    let e = self.plain_flow(j);
                    if self.line(e.max(j + 1) - 1) != line {
                        return self.fail(j, "a key over more than one line");
                    }
                    (self.text(j, e).to_owned(), Style::Plain, e)
                }
            };
            if key == "<<" && key_style == Style::Plain {
                map.merge.get_or_insert(line);
            }
            let k = self.skip_flow_ws(key_end);
            let json_like = key_style != Style::Plain;
            let (props, value, end) =
                if self.at(k) == b':' && (json_like || self.flow_indicator_at(k)) {
                    self.flow_value(k + 1)?
                } else {
                    (false, Node::KeyOnly, key_end)
                };
            map.entries.push(Entry {
                key,
                key_style,
                line,
                props,
                value,
                end,
            });
            j = self.skip_flow_ws(end);
            match self.at(j) {
                b',' => j += 1,
                b'}' => break,
                _ => return self.fail(j, "a flow mapping entry not followed by `,` or `}`"),
            }
        }
        self.depth -= 1;
        Ok((map, j + 1))
    }

    /// The value of a flow entry after its `:` at `colon_end`.
    fn flow_value(&mut self, colon_end: usize) -> Scan<(bool, Node, usize)> {
        let v = self.skip_flow_ws(colon_end);
        let (props, v) = self.props(v, true);
        let v = self.skip_flow_ws(v);
        Ok(match self.at(v) {
            b',' | b'}' => (props, Node::Empty { at: colon_end }, colon_end),
            b'{' => {
                let (map, close) = self.flow_map(v)?;
                (props, Node::Flow(map), close)
            }
            b'[' => (props, Node::Other("a sequence"), self.skip_flow(v)?),
            b'"' | b'\'' => {
                let e = self.quoted_end(v)?;
                let style = if self.at(v) == b'"' {
                    Style::Double
                } else {
                    Style::Single
                };
                (props, Node::Scalar { span: v..e, style }, e)
            }
            b'*' => (props, Node::Other("an alias"), self.props_token_end(v)),
            b']' => return self.fail(v, "a `]` inside a flow mapping"),
            _ if self.eof(v) => return self.fail(v, "an unterminated flow mapping"),
            _ => {
                let e = self.plain_flow(v).max(v + 1);
                (
                    props,
                    Node::Scalar {
                        span: v..e,
                        style: Style::Plain,
                    },
                    e,
                )
            }
        })
    }
}
