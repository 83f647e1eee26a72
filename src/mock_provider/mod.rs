//! The offline model provider (`mock.enabled`): a small chat-completions
//! server inside the hub, so a real worker (`simplex_worker` with its
//! OpenAI-compatible provider plugin) runs end to end without a model API
//! or a key. It answers `POST` on any path (clients use `/chat/completions`)
//! with a scripted model chosen by the requested model name
//! ([`scenario`]), streamed as server-sent events ([`wire`]).
//!
//! At start-up `run.rs` binds it on `mock.listen` (loopback, a free port by
//! default), records its base URL in the hub, and every worker
//! configuration the supervisor writes then points the `mock.profile`
//! provider profile's `endpoint.base_url` at it.
//!
//! It is a test and demonstration fixture: no authentication, so it binds
//! loopback unless told otherwise. It is bounded like the hub's own
//! listeners: [`MockProviderConfig::max_connections`] connection threads,
//! a body limit, head limits, idle and request deadlines; and a stop wakes
//! every request still in the `slow` wait.
//!
//! [`scenario`] and [`wire`] are pure; [`server`] does the I/O.

pub mod scenario;
pub mod server;
pub mod wire;

use std::time::Duration;

pub use scenario::Scenario;
pub use server::MockProvider;

/// The provider's name in start errors and logs.
pub const MOCK_LISTENER: &str = "offline model provider (mock.listen)";

/// The command `auto` proposes when `mock.toolCommand` is empty: a line on
/// stdout, a line on stderr, and a marker file in the worker's working
/// directory, so a test can tell that the command ran (or was cancelled).
pub const DEFAULT_TOOL_COMMAND: &str =
    r"printf 'mock stdout\n'; printf 'mock stderr\n' >&2; touch mock-tool-marker.txt";

/// Everything the provider needs. The first four mirror `mock.listen`,
/// `mock.scenario`, `mock.slowMs` and `mock.toolCommand` (with the Node
/// hub's defaults; `run.rs` fills them from the configuration, so this
/// module does not import it and the configuration can use its parsers);
/// the bounds are fixed for a configured hub and only tests change them.
#[derive(Debug, Clone)]
pub struct MockProviderConfig {
    /// `host:port`, an IPv6 host in brackets (`[::1]:0`); port 0 asks the
    /// system for a free one.
    pub listen: String,
    /// For a model name that names no scenario.
    pub scenario: Scenario,
    /// How long `slow` waits before answering, in milliseconds.
    pub slow_ms: u64,
    /// What `auto` proposes; empty means [`DEFAULT_TOOL_COMMAND`].
    pub tool_command: String,
    /// The host written into the base URL: `worker.connectHost` when set,
    /// else the bound address (`0.0.0.0` and `::` as `127.0.0.1`).
    pub advertise_host: String,
    /// Request bodies beyond this are refused with 413.
    pub max_body_bytes: usize,
    /// Concurrent connections (threads); the next one is answered 503.
    pub max_connections: usize,
    /// Socket read/write timeout, and how long an idle keep-alive
    /// connection is kept.
    pub idle_timeout: Duration,
    /// Deadline for reading one request, head and body.
    pub request_timeout: Duration,
}

impl Default for MockProviderConfig {
    fn default() -> Self {
        MockProviderConfig {
            listen: "127.0.0.1:0".to_owned(),
            scenario: Scenario::Auto,
            slow_ms: 1500,
            tool_command: String::new(),
            advertise_host: String::new(),
            max_body_bytes: 8 * 1024 * 1024,
            max_connections: 16,
            idle_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(30),
        }
    }
}

impl MockProviderConfig {
    /// The command `auto` proposes.
    pub fn tool_command(&self) -> &str {
        if self.tool_command.is_empty() {
            DEFAULT_TOOL_COMMAND
        } else {
            &self.tool_command
        }
    }
}

/// Splits `mock.listen` into host and port: `host:port` with a host free of
/// `:`, or `[v6]:port`; surrounding whitespace is ignored. The host must not
/// be empty and the port must fit 16 bits.
pub fn parse_listen(text: &str) -> Result<(String, u16), ListenError> {
    let text = text.trim();
    let refused = || ListenError::Malformed(text.to_string());
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, port) = rest.split_once("]:").ok_or_else(refused)?;
        if host.contains(['[', ']']) {
            return Err(refused());
        }
        (host, port)
    } else {
        let (host, port) = text.split_once(':').ok_or_else(refused)?;
        (host, port)
    };
    if host.is_empty() || port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(refused());
    }
    let port = port
        .parse::<u16>()
        .map_err(|_| ListenError::PortOutOfRange(port.to_string()))?;
    Ok((host.to_owned(), port))
}

/// Why a `host:port` was refused ([`parse_listen`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenError {
    /// Not `host:port` or `[v6]:port` (the text, trimmed).
    Malformed(String),
    /// A port beyond 65535 (its digits).
    PortOutOfRange(String),
}

impl std::fmt::Display for ListenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenError::Malformed(text) => {
                write!(
                    f,
                    "expects host:port (an IPv6 host in brackets), got {text:?}"
                )
            }
            ListenError::PortOutOfRange(port) => {
                write!(f, "port {port} is out of range (0 to 65535)")
            }
        }
    }
}

impl std::error::Error for ListenError {}

/// `http://<host>:<port>`, an IPv6 host in brackets.
pub fn base_url(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("http://[{host}]:{port}")
    } else {
        format!("http://{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_parse_like_the_node_hub() {
        assert_eq!(parse_listen("127.0.0.1:0"), Ok(("127.0.0.1".into(), 0)));
        assert_eq!(
            parse_listen(" localhost:8000 "),
            Ok(("localhost".into(), 8000))
        );
        assert_eq!(parse_listen("[::1]:65535"), Ok(("::1".into(), 65535)));
        assert_eq!(parse_listen("0.0.0.0:1"), Ok(("0.0.0.0".into(), 1)));
        for bad in [
            "",
            "host",
            ":80",
            "host:",
            "a:b:80",
            "::1:80",
            "[::1]",
            "[::1]80",
            "host:+1",
            "host:8 0",
            "[[::1]]:1",
        ] {
            let err = parse_listen(bad).unwrap_err().to_string();
            assert!(err.contains("expects host:port"), "{bad:?}: {err}");
        }
        assert_eq!(
            parse_listen("h:70000").unwrap_err().to_string(),
            "port 70000 is out of range (0 to 65535)"
        );
    }

    #[test]
    fn base_urls_bracket_ipv6() {
        assert_eq!(base_url("127.0.0.1", 9), "http://127.0.0.1:9");
        assert_eq!(base_url("::1", 9), "http://[::1]:9");
        assert_eq!(base_url("hub.local", 9), "http://hub.local:9");
    }

    #[test]
    fn the_default_tool_command_is_the_node_hubs() {
        let config = MockProviderConfig::default();
        assert_eq!(config.tool_command(), DEFAULT_TOOL_COMMAND);
        assert!(DEFAULT_TOOL_COMMAND.contains("touch mock-tool-marker.txt"));
        assert!(DEFAULT_TOOL_COMMAND.starts_with(r"printf 'mock stdout\n';"));
        let custom = MockProviderConfig {
            tool_command: "hostname".into(),
            ..MockProviderConfig::default()
        };
        assert_eq!(custom.tool_command(), "hostname");
    }
}
