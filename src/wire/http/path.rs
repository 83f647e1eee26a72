//! A static request path (still percent-encoded) turned into a relative
//! asset name, or refused: traversal in every spelling, encoded
//! separators, empty segments, backslashes and NUL never name a file.
//! The front door looks the name up in the embedded panel files
//! (`http::assets`).

use std::fmt;

use super::url;

/// Why a static path was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathError {
    /// A malformed percent-escape or a decoded NUL byte: the request is bad.
    Malformed,
    /// Traversal, an encoded separator, an empty segment or a backslash: the
    /// path can name no asset.
    Refused,
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathError::Malformed => f.write_str("malformed static path"),
            PathError::Refused => f.write_str("static path refused"),
        }
    }
}

/// Turns a raw request path (still percent-encoded, starting with `/`) into
/// a relative asset name. `/` is `index.html`.
pub fn resolve_path(raw: &str) -> Result<String, PathError> {
    let lower = raw.to_ascii_lowercase();
    if lower.contains("%2f") || lower.contains("%5c") {
        return Err(PathError::Refused);
    }
    let decoded = url::percent_decode(raw, false).map_err(|_| PathError::Malformed)?;
    if decoded.contains('\0') {
        return Err(PathError::Malformed);
    }
    let rest = decoded.strip_prefix('/').ok_or(PathError::Refused)?;
    if rest.is_empty() {
        return Ok("index.html".to_string());
    }
    let ok = rest.split('/').all(|segment| {
        !segment.is_empty() && segment != "." && segment != ".." && !segment.contains('\\')
    });
    if ok {
        Ok(rest.to_string())
    } else {
        Err(PathError::Refused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_plain_paths() {
        assert_eq!(resolve_path("/").unwrap(), "index.html");
        assert_eq!(resolve_path("/app.js").unwrap(), "app.js");
        assert_eq!(resolve_path("/a%20b/c.css").unwrap(), "a b/c.css");
    }

    #[test]
    fn refuses_traversal_in_every_spelling() {
        for raw in [
            "/../../etc/passwd",
            "/..%2f..%2fetc/passwd",
            "/..%2F..%2Fetc/passwd",
            "/a/../../b",
            "//etc/passwd",
            "/./../../x",
            "/%2e%2e/%2e%2e/etc/passwd",
            "/..\\..\\etc",
            "/a%5c..%5cb",
            "/a//b",
        ] {
            assert_eq!(resolve_path(raw), Err(PathError::Refused), "{raw}");
        }
    }

    #[test]
    fn nul_and_bad_escapes_are_malformed() {
        assert_eq!(resolve_path("/a%00.js"), Err(PathError::Malformed));
        assert_eq!(resolve_path("/%ZZ"), Err(PathError::Malformed));
    }
}
