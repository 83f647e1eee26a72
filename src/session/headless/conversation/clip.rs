//! Clipping a conversation's texts, pure: by bytes on a character
//! boundary, and by JSON-escaped length (what a stored or paged text
//! costs on the wire).

use crate::wire::worker::display::quoted_len;

/// JSON-escaped length of `s`, quotes excluded.
pub(super) fn escaped_len(s: &str) -> usize {
    quoted_len(s) - 2
}

fn escaped_char_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\u{8}' | '\t' | '\n' | '\u{c}' | '\r' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// End of the longest prefix of `s` whose escaped length is at most `max`.
pub(super) fn clip_escaped(s: &str, max: usize) -> usize {
    let mut used = 0;
    for (at, c) in s.char_indices() {
        used += escaped_char_len(c);
        if used > max {
            return at;
        }
    }
    s.len()
}

/// End of the longest prefix of `s` of at most `max` bytes on a character
/// boundary.
pub(super) fn clip_bytes(s: &str, max: usize) -> usize {
    if s.len() <= max {
        return s.len();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    end
}
