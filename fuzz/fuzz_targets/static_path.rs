//! `wire::http::path::resolve_path`: an accepted name is relative (never starts
//! with `/`), non-empty, and has no empty, `.` or `..` segment, no
//! backslash and no NUL; it is exactly the percent-decoded path without its
//! leading `/` (or `index.html` for `/`); `Malformed` means a bad escape or
//! a decoded NUL.
//!
//! Input: the raw request path (still percent-encoded).
#![no_main]

use libfuzzer_sys::fuzz_target;
use simplex_hub::wire::http::path::{resolve_path, PathError};
use simplex_hub::wire::http::url::percent_decode;
use simplex_hub_fuzz::text;

fuzz_target!(|data: &[u8]| {
    let raw = text(data);
    let decoded = percent_decode(&raw, false);
    match resolve_path(&raw) {
        Ok(name) => {
            assert!(!name.is_empty() && !name.starts_with('/'), "{name:?}");
            assert!(!name.contains(['\\', '\0']), "{name:?}");
            for segment in name.split('/') {
                assert!(!matches!(segment, "" | "." | ".."), "{name:?}");
            }
            let decoded = decoded.expect("accepted path decodes");
            let expect = match decoded.as_str() {
                "/" => "index.html",
                d => d.strip_prefix('/').expect("accepted path starts with /"),
            };
            assert_eq!(name, expect);
        }
        Err(PathError::Malformed) => {
            assert!(decoded.map_or(true, |d| d.contains('\0')));
        }
        Err(PathError::Refused) => {}
    }
});
