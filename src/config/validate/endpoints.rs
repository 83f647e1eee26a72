//! What workers are told to dial: the advertised endpoint origins
//! (`endpoints.*`) and the host of the hub's own listener
//! (`worker.connectHost`).

use serde_json::Value;

use super::check::Check;

impl Check<'_> {
    /// Empty, or a WebSocket origin with an optional path prefix; returned
    /// without its trailing `/` and with a lower-case scheme.
    pub(super) fn origin(&mut self, path: &str) -> String {
        let text = self.string(path, false);
        if text.is_empty() {
            return text;
        }
        match parse_origin(&text) {
            Ok(origin) => origin,
            Err(reason) => {
                self.fail(
                    path,
                    Value::from(text),
                    format!(
                        "must be empty or a ws:// or wss:// origin with an optional path prefix, \
                         without query, fragment or credentials: {reason}"
                    ),
                );
                String::new()
            }
        }
    }

    pub(super) fn connect_host(&mut self, path: &str) -> String {
        let host = self.string(path, false);
        if !host.is_empty() && !is_bare_host(&host) {
            self.fail(
                path,
                Value::from(host),
                "must be empty or a bare host: no scheme, port, path, '?', '#', '@' or whitespace \
                 (so no raw IPv6 address)",
            );
            return String::new();
        }
        host
    }
}

/// Checks an advertised endpoint origin (`ws[s]://host[:port][/prefix]`)
/// and returns it with a lower-case scheme and without a trailing `/`.
fn parse_origin(text: &str) -> Result<String, &'static str> {
    let lower = text.to_ascii_lowercase();
    let (scheme, rest) = if lower.starts_with("wss://") {
        ("wss://", &text[6..])
    } else if lower.starts_with("ws://") {
        ("ws://", &text[5..])
    } else {
        return Err("the scheme is not ws:// or wss://");
    };
    if text
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '\\')
    {
        return Err("it contains whitespace, a control character or a backslash");
    }
    if rest.contains(['?', '#']) {
        return Err("it has a query or a fragment");
    }
    let (authority, prefix) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if authority.contains('@') {
        return Err("it carries credentials");
    }
    let port = if let Some(inner) = authority.strip_prefix('[') {
        let (host, after) = inner.split_once(']').ok_or("an IPv6 host lacks its ']'")?;
        if !host.contains(':')
            || !host
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
        {
            return Err("the bracketed host is not an IPv6 address");
        }
        match after {
            "" => None,
            _ => Some(
                after
                    .strip_prefix(':')
                    .ok_or("a ']' must be followed by ':' and a port")?,
            ),
        }
    } else {
        let (host, port) = match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        };
        if host.is_empty() {
            return Err("the host is empty");
        }
        if host.contains([':', '[', ']']) {
            return Err("an IPv6 host must be in brackets");
        }
        port
    };
    if let Some(port) = port {
        let valid = !port.is_empty()
            && port.bytes().all(|b| b.is_ascii_digit())
            && port.parse::<u16>().is_ok_and(|p| p > 0);
        if !valid {
            return Err("the port is not a number from 1 to 65535");
        }
    }
    let prefix = prefix.strip_suffix('/').unwrap_or(prefix);
    Ok(format!("{scheme}{authority}{prefix}"))
}

/// A host a worker can put in `ws://<host>:<port>` without reparsing it.
fn is_bare_host(host: &str) -> bool {
    !host.chars().any(|c| {
        c.is_whitespace()
            || c.is_control()
            || matches!(c, ':' | '/' | '?' | '#' | '@' | '\\' | '[' | ']')
    })
}
