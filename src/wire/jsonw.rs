//! Appending JSON tokens to a `String` exactly as `serde_json` writes them,
//! without `fmt` machinery or an allocation: the hot paths that assemble
//! entries and frames from already-encoded parts use these.
//!
//! Pure: no I/O, clock or locks.

/// Appends `n` in decimal.
pub fn push_u64(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[at..] {
        out.push(char::from(d));
    }
}

/// Whether `s` as a JSON string is `"` + `s` + `"` (no byte needs an
/// escape).
pub fn is_plain(s: &str) -> bool {
    s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\')
}

/// Appends `s` as a JSON string, as `serde_json` writes it.
pub fn push_string(out: &mut String, s: &str) {
    if is_plain(s) {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        out.push_str(&serde_json::Value::from(s).to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_as_serde_json_writes_them() {
        for n in [
            0,
            1,
            9,
            10,
            99,
            100,
            12_345,
            u64::from(u32::MAX),
            u64::MAX - 1,
            u64::MAX,
        ] {
            let mut out = String::from("x");
            push_u64(&mut out, n);
            assert_eq!(out, format!("x{}", serde_json::to_string(&n).unwrap()));
        }
    }

    #[test]
    fn strings_are_written_as_serde_json_writes_them() {
        for s in [
            "",
            "plain",
            "é ü",
            "q\"uote",
            "back\\slash",
            "\n\t\u{1}",
            "\u{7f}",
            "\u{2028}",
        ] {
            let mut out = String::new();
            push_string(&mut out, s);
            assert_eq!(out, serde_json::to_string(s).unwrap(), "{s:?}");
            assert_eq!(is_plain(s), out.len() == s.len() + 2, "{s:?}");
        }
    }
}
