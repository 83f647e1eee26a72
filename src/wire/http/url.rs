//! Pure parsing of the parts of an HTTP request the hub reads: the request
//! target (path and query), percent-escapes, query parameters, cookies and
//! the `Host` header. No I/O; everything here is fuzzed.

use std::fmt;

/// Why a request target or header could not be understood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlError {
    /// A `%` not followed by two hex digits.
    BadEscape,
    /// The decoded bytes are not UTF-8.
    NotUtf8,
    /// The target does not start with `/` (absolute-form and `*` are refused).
    NotOriginForm,
    /// The `Host` header is missing or not `host[:port]`.
    BadHost,
}

impl fmt::Display for UrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UrlError::BadEscape => f.write_str("malformed percent-escape"),
            UrlError::NotUtf8 => f.write_str("percent-decoded text is not UTF-8"),
            UrlError::NotOriginForm => f.write_str("request target must start with '/'"),
            UrlError::BadHost => f.write_str("malformed Host header"),
        }
    }
}

impl std::error::Error for UrlError {}

/// Splits an origin-form request target into its raw path and raw query
/// (without the `?`). A fragment, which clients never send, is dropped.
pub fn split_target(target: &str) -> Result<(&str, &str), UrlError> {
    if !target.starts_with('/') {
        return Err(UrlError::NotOriginForm);
    }
    let target = target.split('#').next().unwrap_or("");
    Ok(match target.split_once('?') {
        Some((path, query)) => (path, query),
        None => (target, ""),
    })
}

/// Decodes `%XX` escapes; with `plus_is_space`, `+` becomes a space (query
/// strings). Fails on a malformed escape.
pub fn percent_decode_bytes(raw: &str, plus_is_space: bool) -> Result<Vec<u8>, UrlError> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hi = bytes.get(i + 1).and_then(|b| hex_value(*b));
                let lo = bytes.get(i + 2).and_then(|b| hex_value(*b));
                match (hi, lo) {
                    (Some(hi), Some(lo)) => out.push(hi << 4 | lo),
                    _ => return Err(UrlError::BadEscape),
                }
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Ok(out)
}

/// Like [`percent_decode_bytes`] but requires the result to be UTF-8.
pub fn percent_decode(raw: &str, plus_is_space: bool) -> Result<String, UrlError> {
    String::from_utf8(percent_decode_bytes(raw, plus_is_space)?).map_err(|_| UrlError::NotUtf8)
}

/// Percent-encodes everything outside the RFC 3986 unreserved set, for
/// tokens and ids placed in URLs.
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The first value of query parameter `name`, decoded. `None` when absent;
/// `Some(Err)` when present but malformed.
pub fn query_param(query: &str, name: &str) -> Option<Result<String, UrlError>> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .find_map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match percent_decode(key, true) {
                Ok(key) if key == name => Some(percent_decode(value, true)),
                _ => None,
            }
        })
}

/// The value of cookie `name` from a `Cookie` header, percent-decoded.
/// A malformed value counts as absent, as does a missing cookie.
pub fn cookie_value(header: &str, name: &str) -> Option<String> {
    header.split(';').find_map(|part| {
        let (key, value) = part.trim().split_once('=')?;
        if key.trim() != name {
            return None;
        }
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(value);
        percent_decode(value, false).ok()
    })
}

/// A parsed `Host` header: a lowercased host name or IP literal (IPv6 kept
/// in brackets) and an optional port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostHeader {
    pub host: String,
    pub port: Option<u16>,
}

/// Parses a `Host` header value. Refuses empty hosts, whitespace, userinfo,
/// paths, and ports that are not 1-5 digits fitting in u16.
pub fn parse_host(value: &str) -> Result<HostHeader, UrlError> {
    let value = value.trim();
    if value.is_empty() {
        return Err(UrlError::BadHost);
    }
    let (host, port) = if let Some(rest) = value.strip_prefix('[') {
        let (inner, after) = rest.split_once(']').ok_or(UrlError::BadHost)?;
        if inner.is_empty()
            || !inner
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        {
            return Err(UrlError::BadHost);
        }
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':').ok_or(UrlError::BadHost)?),
        };
        (format!("[{}]", inner.to_ascii_lowercase()), port)
    } else {
        let (host, port) = match value.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (value, None),
        };
        let valid = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
        if !valid {
            return Err(UrlError::BadHost);
        }
        (host.to_ascii_lowercase(), port)
    };
    let port = match port {
        None => None,
        Some(p) if !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => {
            Some(p.parse::<u16>().map_err(|_| UrlError::BadHost)?)
        }
        Some(_) => return Err(UrlError::BadHost),
    };
    Ok(HostHeader { host, port })
}

/// Whether `origin` (`scheme://host[:port]`) names `host` (`host[:port]`).
pub fn origin_matches(origin: &str, host: &str) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    if !matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https") || rest.contains('/') {
        return false;
    }
    let (Ok(o), Ok(h)) = (parse_host(rest), parse_host(host)) else {
        return false;
    };
    let default = if scheme.eq_ignore_ascii_case("https") {
        443
    } else {
        80
    };
    o.host == h.host && o.port.unwrap_or(default) == h.port.unwrap_or(default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_targets() {
        assert_eq!(split_target("/a/b?x=1&y").unwrap(), ("/a/b", "x=1&y"));
        assert_eq!(split_target("/").unwrap(), ("/", ""));
        assert_eq!(split_target("/p#frag").unwrap(), ("/p", ""));
        assert_eq!(split_target("http://x/"), Err(UrlError::NotOriginForm));
        assert_eq!(split_target("*"), Err(UrlError::NotOriginForm));
    }

    #[test]
    fn decodes_escapes() {
        assert_eq!(percent_decode("a%20b+c", true).unwrap(), "a b c");
        assert_eq!(percent_decode("a+b", false).unwrap(), "a+b");
        assert_eq!(percent_decode("%ZZ", false), Err(UrlError::BadEscape));
        assert_eq!(percent_decode("%4", false), Err(UrlError::BadEscape));
        assert_eq!(percent_decode("%", false), Err(UrlError::BadEscape));
        assert_eq!(percent_decode("%ff", false), Err(UrlError::NotUtf8));
        assert_eq!(percent_decode_bytes("%00", false).unwrap(), vec![0]);
    }

    #[test]
    fn encodes_round_trip() {
        let text = "a b/c?d=e&f%ü";
        assert_eq!(percent_decode(&percent_encode(text), false).unwrap(), text);
    }

    #[test]
    fn reads_query_params() {
        assert_eq!(
            query_param("a=1&token=s%20t", "token"),
            Some(Ok("s t".into()))
        );
        assert_eq!(query_param("a=1", "token"), None);
        assert_eq!(query_param("token", "token"), Some(Ok(String::new())));
        assert_eq!(
            query_param("token=%zz", "token"),
            Some(Err(UrlError::BadEscape))
        );
    }

    #[test]
    fn reads_cookies() {
        let header = "a=1; simplex_hub_token=abc%2Fd; b=2";
        assert_eq!(
            cookie_value(header, "simplex_hub_token").as_deref(),
            Some("abc/d")
        );
        assert_eq!(
            cookie_value("simplex_hub_token=%E0%A4%A", "simplex_hub_token"),
            None
        );
        assert_eq!(cookie_value("x=1", "simplex_hub_token"), None);
        assert_eq!(cookie_value("t=\"q\"", "t").as_deref(), Some("q"));
    }

    #[test]
    fn parses_hosts() {
        let h = parse_host("LocalHost:8800").unwrap();
        assert_eq!((h.host.as_str(), h.port), ("localhost", Some(8800)));
        let h = parse_host("[::1]:80").unwrap();
        assert_eq!((h.host.as_str(), h.port), ("[::1]", Some(80)));
        assert_eq!(parse_host("127.0.0.1").unwrap().port, None);
        for bad in [
            "", "foo bar", "a:b", "a:", "a:99999", "a:123456", "[::1", "[]", "u@h", "h/p", "[::1]x",
        ] {
            assert!(parse_host(bad).is_err(), "{bad:?} should be refused");
        }
    }
}
