//! Who may reach the hub's listeners: the Host names the main listener
//! accepts (`listen.allowedHosts`) and the Shard endpoints' public host,
//! origins and trusted proxy (`shard.*`, parsed by `wire::shard::access`).

use serde_json::Value;

use super::check::Check;

impl Check<'_> {
    pub(super) fn allowed_hosts(&mut self, path: &str) -> Vec<String> {
        let hosts = self.strings(path);
        for (i, host) in hosts.iter().enumerate() {
            if !is_allowed_host(host) {
                self.fail_at(
                    path,
                    format!("{path}[{i}]"),
                    Value::from(host.as_str()),
                    "must be a host name without port: non-empty, no whitespace, '/', '@' or ':' \
                     (an IPv6 address goes in brackets)",
                );
            }
        }
        hosts
    }

    // Who may reach the Shard endpoints (`wire::shard::access`).

    pub(super) fn public_host(
        &mut self,
        path: &str,
    ) -> Option<crate::wire::shard::access::PublicHost> {
        let text = self.string(path, false);
        if text.is_empty() {
            return None;
        }
        match crate::wire::shard::access::parse_public_host(&text) {
            Ok(host) => Some(host),
            Err(reason) => {
                self.fail(
                    path,
                    Value::from(text),
                    format!(
                        "must be empty or host:port with an explicit port (IPv6 in brackets): {reason}"
                    ),
                );
                None
            }
        }
    }

    pub(super) fn allowed_origins(&mut self, path: &str) -> Vec<String> {
        let texts = self.strings(path);
        let mut origins = Vec::with_capacity(texts.len());
        for (i, text) in texts.iter().enumerate() {
            match crate::wire::shard::access::parse_origin(text) {
                Ok(origin) => origins.push(origin),
                Err(reason) => self.fail_at(
                    path,
                    format!("{path}[{i}]"),
                    Value::from(text.as_str()),
                    format!(
                        "must be an origin, http:// or https:// then host[:port], nothing after: {reason}"
                    ),
                ),
            }
        }
        origins
    }

    pub(super) fn trust_proxy(
        &mut self,
        path: &str,
    ) -> Option<crate::wire::shard::access::Upstream> {
        let text = self.string(path, false);
        if text.is_empty() {
            return None;
        }
        match crate::wire::shard::access::parse_upstream(&text) {
            Ok(upstream) => Some(upstream),
            Err(reason) => {
                self.fail(
                    path,
                    Value::from(text),
                    format!("must be empty, \"loopback\" or an IP address: {reason}"),
                );
                None
            }
        }
    }
}

/// A host name for `listen.allowedHosts`: no port, no path, no userinfo;
/// IPv6 only in brackets.
fn is_allowed_host(host: &str) -> bool {
    if let Some(inner) = host
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
    {
        return inner.contains(':')
            && inner
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.');
    }
    !host.is_empty()
        && !host.chars().any(|c| {
            c.is_whitespace() || c.is_control() || matches!(c, '/' | '@' | ':' | '[' | ']')
        })
}
