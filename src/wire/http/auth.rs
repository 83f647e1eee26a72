//! Panel authentication: where the panel token may come from (query,
//! `Authorization: Bearer`, cookie `simplex_hub_token`) and a constant-time
//! comparison. Pure functions; the caller supplies the header values.

use super::url;

/// Name of the cookie the browser panel stores its token in.
pub const TOKEN_COOKIE: &str = "simplex_hub_token";

/// The credentials a request presents, in the order they are tried.
#[derive(Debug, Default)]
pub struct Presented<'a> {
    /// Raw query string of the request target.
    pub query: &'a str,
    /// Value of the `Authorization` header, if any.
    pub authorization: Option<&'a str>,
    /// Value of the `Cookie` header, if any.
    pub cookie: Option<&'a str>,
}

/// Whether `presented` carries `expected`. An empty `expected` means the
/// panel is open (configuration allows that only on loopback). A malformed
/// query token or cookie counts as absent, and every candidate is checked
/// so that a bad early one cannot hide a good later one.
pub fn panel_authorized(expected: &str, presented: &Presented<'_>) -> bool {
    if expected.is_empty() {
        return true;
    }
    let mut ok = false;
    if let Some(Ok(token)) = url::query_param(presented.query, "token") {
        ok |= constant_time_eq(token.as_bytes(), expected.as_bytes());
    }
    if let Some(token) = presented.authorization.and_then(bearer_token) {
        ok |= constant_time_eq(token.as_bytes(), expected.as_bytes());
    }
    if let Some(token) = presented
        .cookie
        .and_then(|c| url::cookie_value(c, TOKEN_COOKIE))
    {
        ok |= constant_time_eq(token.as_bytes(), expected.as_bytes());
    }
    ok
}

/// The token of an `Authorization: Bearer <token>` header (scheme matched
/// case-insensitively).
pub fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// Compares two byte strings in time that depends only on their lengths,
/// never on where they differ. Unequal lengths still walk `b` fully.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u8 | u8::from(a.len() != b.len());
    for (i, byte) in b.iter().enumerate() {
        let other = a.get(i).copied().unwrap_or(!*byte);
        diff |= other ^ byte;
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_in_constant_time_correctly() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(!constant_time_eq(b"x", b""));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn accepts_each_source() {
        let q = Presented {
            query: "token=s3",
            ..Default::default()
        };
        assert!(panel_authorized("s3", &q));
        let b = Presented {
            authorization: Some("Bearer s3"),
            ..Default::default()
        };
        assert!(panel_authorized("s3", &b));
        let c = Presented {
            cookie: Some("x=1; simplex_hub_token=s3"),
            ..Default::default()
        };
        assert!(panel_authorized("s3", &c));
        assert!(!panel_authorized("s3", &Presented::default()));
        assert!(panel_authorized("", &Presented::default()));
    }

    #[test]
    fn malformed_cookie_is_absent_and_bearer_still_works() {
        let p = Presented {
            cookie: Some("simplex_hub_token=%zz"),
            authorization: Some("bearer s3"),
            ..Default::default()
        };
        assert!(panel_authorized("s3", &p));
        let p = Presented {
            cookie: Some("simplex_hub_token=%zz"),
            ..Default::default()
        };
        assert!(!panel_authorized("s3", &p));
    }

    #[test]
    fn wrong_tokens_refused() {
        let p = Presented {
            query: "token=nope",
            authorization: Some("Basic s3"),
            cookie: Some("simplex_hub_token=also-wrong"),
        };
        assert!(!panel_authorized("s3", &p));
    }
}
