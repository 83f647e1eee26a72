//! `wire::http::url` and `wire::http::auth`: never panic, and
//! - `split_target` cuts an origin-form target at `?` and `#`;
//! - `percent_encode` -> `percent_decode` is the identity (with and without
//!   `+` as space), the encoding is unreserved characters and `%XX` only,
//!   and a decoded string re-encodes and decodes to itself;
//! - a token placed first in a query or a cookie is read back exactly;
//! - `parse_host` yields a non-empty lowercase host without whitespace,
//!   and writing it back out parses to the same result;
//! - `panel_authorized` equals a plain (not constant-time) reference over
//!   the same three sources, and accepts each source carrying the token;
//!   `constant_time_eq` is `==`.
//!
//! Input: text split on LF into target, host, authorization, cookie and
//! expected token (missing parts are empty).
#![no_main]

use libfuzzer_sys::fuzz_target;
use simplex_hub::wire::http::auth::{
    bearer_token, constant_time_eq, panel_authorized, Presented, TOKEN_COOKIE,
};
use simplex_hub::wire::http::url::{
    cookie_value, parse_host, percent_decode, percent_decode_bytes, percent_encode, query_param,
    split_target,
};
use simplex_hub_fuzz::text;

fn check_round_trip(s: &str) {
    let encoded = percent_encode(s);
    assert!(encoded
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.~%".contains(&b)));
    assert_eq!(percent_decode(&encoded, false).as_deref(), Ok(s));
    assert_eq!(percent_decode(&encoded, true).as_deref(), Ok(s));
}

fn check_decode(raw: &str) {
    for plus in [false, true] {
        let bytes = percent_decode_bytes(raw, plus);
        let text = percent_decode(raw, plus);
        match (&bytes, &text) {
            (Ok(b), Ok(t)) => {
                assert_eq!(b, t.as_bytes());
                check_round_trip(t);
            }
            (Ok(b), Err(_)) => assert!(std::str::from_utf8(b).is_err()),
            (Err(a), Err(b)) => assert_eq!(a, b),
            (Err(_), Ok(_)) => panic!("text decoded where bytes did not"),
        }
        if !raw.contains('%') && (!plus || !raw.contains('+')) {
            assert_eq!(text.as_deref(), Ok(raw));
        }
    }
}

fn check_target(target: &str) {
    let Ok((path, query)) = split_target(target) else {
        assert!(!target.starts_with('/'));
        return;
    };
    assert!(path.starts_with('/') && target.starts_with(path));
    assert!(!path.contains(['?', '#']) && !query.contains('#'));
    if !query.is_empty() {
        assert!(target[path.len()..].starts_with('?'));
        assert!(target[path.len() + 1..].starts_with(query));
    }
    check_decode(path);
    check_decode(query);
    for name in ["token", "since", ""] {
        let _ = query_param(query, name);
    }
}

fn check_host(value: &str) {
    let Ok(h) = parse_host(value) else {
        return;
    };
    assert!(!h.host.is_empty());
    assert!(!h.host.chars().any(char::is_whitespace), "{h:?}");
    assert_eq!(h.host, h.host.to_ascii_lowercase());
    assert!(!h.host.contains(['/', '@', '?', '#']), "{h:?}");
    let written = match h.port {
        Some(port) => format!("{}:{port}", h.host),
        None => h.host.clone(),
    };
    assert_eq!(parse_host(&written).as_ref(), Ok(&h), "{written}");
}

fn reference(expected: &str, p: &Presented<'_>) -> bool {
    if expected.is_empty() {
        return true;
    }
    let query = matches!(query_param(p.query, "token"), Some(Ok(t)) if t == expected);
    let bearer = p.authorization.and_then(bearer_token) == Some(expected);
    let cookie = p
        .cookie
        .and_then(|c| cookie_value(c, TOKEN_COOKIE))
        .as_deref()
        == Some(expected);
    query || bearer || cookie
}

fn check_auth(query: &str, authorization: &str, cookie: &str, expected: &str) {
    let presented = Presented {
        query,
        authorization: Some(authorization),
        cookie: Some(cookie),
    };
    assert_eq!(
        panel_authorized(expected, &presented),
        reference(expected, &presented)
    );
    assert_eq!(
        panel_authorized(expected, &Presented::default()),
        expected.is_empty()
    );

    // Each source carrying the token is enough, whatever follows it.
    let enc = percent_encode(expected);
    let q = format!("token={enc}&{query}");
    assert_eq!(query_param(&q, "token"), Some(Ok(expected.to_string())));
    let only_query = Presented {
        query: &q,
        ..Presented::default()
    };
    assert!(panel_authorized(expected, &only_query));
    let c = format!("{TOKEN_COOKIE}={enc}; {cookie}");
    assert_eq!(cookie_value(&c, TOKEN_COOKIE).as_deref(), Some(expected));
    let only_cookie = Presented {
        cookie: Some(&c),
        ..Presented::default()
    };
    assert!(panel_authorized(expected, &only_cookie));
    let trimmed = expected.trim();
    if !trimmed.is_empty() && trimmed == expected && !expected.contains(' ') {
        let a = format!("Bearer {expected}");
        let only_bearer = Presented {
            authorization: Some(&a),
            ..Presented::default()
        };
        assert!(panel_authorized(expected, &only_bearer));
    }
    let (a, b) = (authorization.as_bytes(), expected.as_bytes());
    assert_eq!(constant_time_eq(a, b), a == b);
    assert!(constant_time_eq(b, b));
}

fuzz_target!(|data: &[u8]| {
    let text = text(data);
    let mut parts = text.split('\n');
    let mut next = || parts.next().unwrap_or("");
    let (target, host, authorization, cookie, expected) = (next(), next(), next(), next(), next());
    check_target(target);
    check_host(host);
    check_host(target);
    check_round_trip(target);
    check_decode(cookie);
    let query = split_target(target).map_or(target, |(_, q)| q);
    check_auth(query, authorization, cookie, expected);
});
