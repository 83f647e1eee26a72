//! JSONC: JSON plus `//` line comments and `/* */` block comments.
//!
//! Comments are blanked out rather than removed: every byte of a comment
//! becomes a space except newlines, which stay. The text keeps its length
//! and its line breaks, so the line and column serde_json reports for a
//! syntax error point at the same place in the file the operator edits.
//! Nothing here touches the disk.

/// A block comment that never closes, at its opening `/*` (1-based line
/// and column; columns count bytes, as serde_json's do).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnterminatedComment {
    pub line: usize,
    pub column: usize,
}

/// Where the scanner is between two bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Code,
    /// Inside a string literal; `escaped` is true right after a backslash.
    Str {
        escaped: bool,
    },
    Line,
    /// Inside a block comment that opened at this byte offset.
    Block {
        start: usize,
    },
}

/// Replaces comments in `text` with spaces, keeping newlines, and leaves
/// comment markers inside string literals alone.
///
/// Fails only on a block comment that never closes; the error gives the
/// 1-based line and column of its opening `/*` (columns count bytes, as
/// serde_json's do). Other malformed input is passed through for the JSON
/// parser to report.
pub fn strip_jsonc(text: &str) -> Result<String, UnterminatedComment> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut state = State::Code;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let next = bytes.get(i + 1).copied();
        match state {
            State::Code => match (b, next) {
                (b'"', _) => {
                    state = State::Str { escaped: false };
                    out.push(b);
                }
                (b'/', Some(b'/')) => {
                    state = State::Line;
                    out.extend_from_slice(b"  ");
                    i += 1;
                }
                (b'/', Some(b'*')) => {
                    state = State::Block { start: i };
                    out.extend_from_slice(b"  ");
                    i += 1;
                }
                _ => out.push(b),
            },
            State::Str { escaped } => {
                out.push(b);
                state = match (escaped, b) {
                    (true, _) => State::Str { escaped: false },
                    (false, b'\\') => State::Str { escaped: true },
                    (false, b'"') => State::Code,
                    (false, _) => State::Str { escaped: false },
                };
            }
            State::Line => {
                if b == b'\n' {
                    state = State::Code;
                    out.push(b'\n');
                } else {
                    out.push(b' ');
                }
            }
            State::Block { .. } => {
                if b == b'*' && next == Some(b'/') {
                    state = State::Code;
                    out.extend_from_slice(b"  ");
                    i += 1;
                } else {
                    out.push(if b == b'\n' { b'\n' } else { b' ' });
                }
            }
        }
        i += 1;
    }
    if let State::Block { start } = state {
        let (line, column) = line_column(bytes, start);
        return Err(UnterminatedComment { line, column });
    }
    // Comments start and end on ASCII bytes, so only whole UTF-8 sequences
    // were replaced and the output is still valid UTF-8.
    Ok(String::from_utf8(out)
        .unwrap_or_else(|err| String::from_utf8_lossy(err.as_bytes()).into_owned()))
}

/// 1-based line and column of byte offset `at`, counting columns in bytes.
fn line_column(bytes: &[u8], at: usize) -> (usize, usize) {
    let before = &bytes[..at];
    let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |p| p + 1);
    (line, at - line_start + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_line_and_block_comments_keeping_length_and_newlines() {
        let text = "{ // hello\n  \"a\": 1, /* one\ntwo */ \"b\": 2 }\n";
        let out = strip_jsonc(text).unwrap();
        assert_eq!(out.len(), text.len());
        assert_eq!(out.lines().count(), text.lines().count());
        let value: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(value, serde_json::json!({"a": 1, "b": 2}));
        assert_eq!(out, "{         \n  \"a\": 1,       \n       \"b\": 2 }\n");
    }

    #[test]
    fn leaves_markers_inside_strings_alone() {
        let text =
            r#"{"url": "http://x/*y*/", "c": "// not a comment", "q": "say \"/*\" // ok"} // end"#;
        let out = strip_jsonc(text).unwrap();
        let value: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(value["url"], "http://x/*y*/");
        assert_eq!(value["c"], "// not a comment");
        assert_eq!(value["q"], "say \"/*\" // ok");
    }

    #[test]
    fn escaped_backslash_before_quote_ends_the_string() {
        // "a\\" is a complete string holding one backslash; the // after it
        // is a real comment.
        let text = "{\"a\": \"x\\\\\" // gone\n}";
        let out = strip_jsonc(text).unwrap();
        let value: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(value["a"], "x\\");
    }

    #[test]
    fn multibyte_text_in_comments_keeps_byte_offsets() {
        let text = "{ /* héllo → */ \"a\": 1 }";
        let out = strip_jsonc(text).unwrap();
        assert_eq!(out.len(), text.len());
        assert!(out.is_ascii());
    }

    #[test]
    fn parse_errors_point_at_the_original_line() {
        let text = "{\n  /* a\n  b */\n  // c\n  \"a\": 1,,\n}";
        let out = strip_jsonc(text).unwrap();
        let err = serde_json::from_str::<serde_json::Value>(&out).unwrap_err();
        assert_eq!(err.line(), 5);
        assert_eq!(err.column(), 10);
    }

    #[test]
    fn unterminated_block_comment_is_an_error_at_its_opening() {
        let err = strip_jsonc("{\n  \"a\": 1 /* open\n}").unwrap_err();
        assert_eq!((err.line, err.column), (2, 10));
        // A block opener inside a line comment opens nothing.
        assert!(strip_jsonc("{} // /* not a block\n").is_ok());
        // `/*/` is an opener followed by a lone slash, not a whole comment.
        assert!(strip_jsonc("{} /*/").is_err());
    }
}
