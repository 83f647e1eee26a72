//! Who may reach the Shard endpoints (`GET /shard/ws`, `POST
//! /shard/ticket`): seed 004 §4.1. Pure: the settings, the bound listener,
//! the request's headers and its peer address are passed in; nothing here
//! reads a clock, a socket or a lock. `gate` applies these rules to real
//! requests and `config` uses the parsers and [`mode`] to validate
//! `shard.*` at start.
//!
//! The rules, in the order a request meets them:
//!
//! 1. the mode: a non-loopback listener without any `shard.*` setting
//!    leaves the endpoints off ([`Mode::Off`], 403);
//! 2. the effective scheme: `X-Forwarded-Proto` counts only from the
//!    configured upstream peer (`shard.trustProxy`);
//! 3. `Host`, exactly (the port included; a missing port means the
//!    scheme's default, as in HTTP): in loopback mode the listener's own
//!    `127.0.0.1:<port>` (`[::1]:<port>` for an IPv6 listener) or
//!    `shard.publicHost`; in remote mode only `shard.publicHost`;
//! 4. `X-Forwarded-Host`, from the upstream only, must name
//!    `shard.publicHost` (400 otherwise); it never chooses the host.
//!    `X-Forwarded-For` is never read;
//! 5. `Origin`, when present, must be one of the allowed origins, compared
//!    byte for byte with their serialized form: in loopback mode the
//!    implicit `http://<listener>` plus `shard.allowedOrigins`, in remote
//!    mode `shard.allowedOrigins` only.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use crate::wire::http::url;

/// The subprotocol the hub selects when a client offers it.
pub const SUBPROTOCOL: &str = "shard.v0";

/// A pinned public `host:port` (`shard.publicHost`): the host lower-cased,
/// an IPv6 address in brackets, the port explicit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicHost {
    pub host: String,
    pub port: u16,
}

impl fmt::Display for PublicHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// The peer whose forwarded headers are honoured (`shard.trustProxy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upstream {
    /// `127.0.0.1` or `::1`.
    Loopback,
    /// Exactly this address.
    Ip(IpAddr),
}

impl Upstream {
    /// Whether `peer` is this upstream. An IPv4-mapped IPv6 peer (what an
    /// IPv6 listener reports for an IPv4 client) counts as its IPv4 form.
    pub fn matches(self, peer: IpAddr) -> bool {
        let peer = peer.to_canonical();
        match self {
            Upstream::Loopback => {
                peer == IpAddr::from([127, 0, 0, 1])
                    || peer == IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1])
            }
            Upstream::Ip(ip) => peer == ip.to_canonical(),
        }
    }
}

impl fmt::Display for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Upstream::Loopback => f.write_str("loopback"),
            Upstream::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// The validated `shard.*` settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    pub public_host: Option<PublicHost>,
    /// Serialized origins ([`parse_origin`]).
    pub allowed_origins: Vec<String>,
    pub trust_proxy: Option<Upstream>,
    pub allow_insecure_remote: bool,
}

impl Settings {
    /// Whether any remote setting is given.
    pub fn any(&self) -> bool {
        self.public_host.is_some()
            || !self.allowed_origins.is_empty()
            || self.trust_proxy.is_some()
            || self.allow_insecure_remote
    }
}

/// Parses `shard.publicHost`: `host:port` (IPv6 in brackets), port 1-65535.
pub fn parse_public_host(text: &str) -> Result<PublicHost, &'static str> {
    if text.trim() != text {
        return Err("it has surrounding whitespace");
    }
    let parsed = url::parse_host(text).map_err(|_| "it is not host:port")?;
    match parsed.port {
        None => Err("the port is missing"),
        Some(0) => Err("the port is 0"),
        Some(port) => Ok(PublicHost {
            host: parsed.host,
            port,
        }),
    }
}

/// Parses an allowed origin and returns its serialized form, the one a
/// browser sends: `http` or `https`, then `://`, the host lower-cased
/// (IPv6 in brackets), and the port only when it is not the scheme's
/// default. No path (not even `/`), query, fragment or credentials.
pub fn parse_origin(text: &str) -> Result<String, &'static str> {
    let (scheme, rest) = text
        .split_once("://")
        .ok_or("it is not scheme://host[:port]")?;
    let scheme = scheme.to_ascii_lowercase();
    let default = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return Err("the scheme is not http or https"),
    };
    if rest.contains(['/', '?', '#']) {
        return Err("it has a path, query or fragment (an origin ends after the port)");
    }
    if rest.contains('@') {
        return Err("it carries credentials");
    }
    if rest.trim() != rest {
        return Err("it has whitespace");
    }
    let parsed = url::parse_host(rest).map_err(|_| "the host or port is malformed")?;
    Ok(match parsed.port {
        Some(0) => return Err("the port is 0"),
        Some(port) if port != default => format!("{scheme}://{}:{port}", parsed.host),
        _ => format!("{scheme}://{}", parsed.host),
    })
}

/// Parses `shard.trustProxy`: `loopback` or an IP literal (an IPv6 one
/// with or without brackets).
pub fn parse_upstream(text: &str) -> Result<Upstream, &'static str> {
    if text == "loopback" {
        return Ok(Upstream::Loopback);
    }
    let bare = text
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .unwrap_or(text);
    bare.parse::<IpAddr>()
        .map(Upstream::Ip)
        .map_err(|_| "it is neither \"loopback\" nor an IP address")
}

/// How the Shard endpoints are reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A loopback listener without a trusted proxy (seed §4.1.1).
    Loopback,
    /// A non-loopback listener, remote settings complete (§4.1.2 direct).
    Direct,
    /// A trusted reverse proxy in front (§4.1.2), whatever the listener.
    Proxy,
    /// A non-loopback listener without any `shard.*` setting: the panel
    /// works as before and the Shard endpoints answer 403.
    Off,
}

impl Mode {
    /// Whether the endpoints face clients on other machines.
    pub fn is_remote(self) -> bool {
        matches!(self, Mode::Direct | Mode::Proxy)
    }
}

/// A start-up refusal: the setting that is missing, its flag, and why it
/// is required.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    pub key: &'static str,
    pub flag: &'static str,
    pub because: String,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}) is required {}",
            self.key, self.flag, self.because
        )
    }
}

/// The mode of a configuration, or every setting it lacks (seed §4.1.2,
/// D3 and decisions 4–5). `listener_loopback` is whether `listen.host` is
/// a loopback spelling, `panel_token` whether `panel.token` is set.
///
/// - A non-loopback listener with no `shard.*` setting: [`Mode::Off`].
/// - A non-loopback listener, or a trusted proxy: both
///   `shard.publicHost` and `shard.allowedOrigins` are required.
/// - Plain HTTP to remote clients (a non-loopback listener, or a proxy
///   with an `http://` allowed origin) requires
///   `shard.allowInsecureRemote`.
/// - A proxy in front of a loopback listener requires `panel.token`
///   (a non-loopback listener already does, for the panel).
pub fn mode(
    listener_loopback: bool,
    panel_token: bool,
    settings: &Settings,
) -> Result<Mode, Vec<Missing>> {
    if !listener_loopback && !settings.any() {
        return Ok(Mode::Off);
    }
    let proxy = settings.trust_proxy.is_some();
    let why_remote = if listener_loopback {
        "because shard.trustProxy is set".to_owned()
    } else {
        "because listen.host is not a loopback address".to_owned()
    };
    let mut missing = Vec::new();
    if !listener_loopback || proxy {
        if settings.public_host.is_none() {
            missing.push(Missing {
                key: "shard.publicHost",
                flag: "--public-host HOST:PORT",
                because: why_remote.clone(),
            });
        }
        if settings.allowed_origins.is_empty() {
            missing.push(Missing {
                key: "shard.allowedOrigins",
                flag: "--allowed-origin ORIGIN",
                because: why_remote.clone(),
            });
        }
        if listener_loopback && !panel_token {
            missing.push(Missing {
                key: "panel.token",
                flag: "--panel-token TOKEN",
                because: why_remote.clone(),
            });
        }
    }
    let plain_origin = settings
        .allowed_origins
        .iter()
        .find(|origin| origin.starts_with("http://"));
    let plaintext = if !listener_loopback {
        Some(
            "because listen.host is not a loopback address and the hub speaks plain HTTP"
                .to_owned(),
        )
    } else if let (true, Some(origin)) = (proxy, plain_origin) {
        Some(format!(
            "because the trusted proxy serves the plain-HTTP origin {origin}"
        ))
    } else {
        None
    };
    if let (Some(because), false) = (plaintext, settings.allow_insecure_remote) {
        missing.push(Missing {
            key: "shard.allowInsecureRemote",
            flag: "--allow-insecure-remote",
            because,
        });
    }
    if !missing.is_empty() {
        return Err(missing);
    }
    Ok(match (listener_loopback, proxy) {
        (_, true) => Mode::Proxy,
        (true, false) => Mode::Loopback,
        (false, false) => Mode::Direct,
    })
}

/// What the rules judge a request by.
#[derive(Debug, Clone, Copy)]
pub struct Policy<'a> {
    pub mode: Mode,
    pub settings: &'a Settings,
    /// The bound main listener.
    pub listener: SocketAddr,
}

/// The parts of a request the rules read. The caller passes a header
/// given more than once as a value no rule accepts (`gate` uses `", "`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Seen<'a> {
    pub host: Option<&'a str>,
    pub origin: Option<&'a str>,
    pub forwarded_proto: Option<&'a str>,
    pub forwarded_host: Option<&'a str>,
    /// The direct peer (the TCP connection's other end).
    pub peer: Option<IpAddr>,
}

/// The scheme the client used, as far as the hub can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// A request that passed the mode, Host, forwarded-header and Origin
/// rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Passed {
    pub scheme: Scheme,
    /// Whether the request came from the trusted upstream.
    pub via_proxy: bool,
}

/// Why a request was refused before authentication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The endpoints are off ([`Mode::Off`]): 403.
    Off,
    /// `Host` is missing or malformed: 400.
    BadHost,
    /// `Host` names something else: 403.
    WrongHost,
    /// `X-Forwarded-Host` from the upstream does not name the public
    /// host: 400.
    ForwardedHost,
    /// `Origin` is present and not an allowed origin: 400.
    OriginNotAllowed,
}

/// The name of the listener as loopback mode accepts it in `Host`:
/// `127.0.0.1`, or `[::1]` for an IPv6 listener.
pub fn listener_name(listener: SocketAddr) -> &'static str {
    match listener {
        SocketAddr::V4(_) => "127.0.0.1",
        SocketAddr::V6(_) => "[::1]",
    }
}

/// The implicit origin of loopback mode, serialized:
/// `http://127.0.0.1:<port>` (without the port when it is 80).
pub fn implicit_origin(listener: SocketAddr) -> String {
    let name = listener_name(listener);
    match listener.port() {
        80 => format!("http://{name}"),
        port => format!("http://{name}:{port}"),
    }
}

/// Applies rules 1 to 5 of the module documentation to one request.
pub fn check(policy: &Policy<'_>, seen: &Seen<'_>) -> Result<Passed, Refusal> {
    if policy.mode == Mode::Off {
        return Err(Refusal::Off);
    }
    let via_proxy = policy.mode == Mode::Proxy
        && match (policy.settings.trust_proxy, seen.peer) {
            (Some(upstream), Some(peer)) => upstream.matches(peer),
            _ => false,
        };
    let scheme = match seen.forwarded_proto {
        Some(proto) if via_proxy && proto.trim().eq_ignore_ascii_case("https") => Scheme::Https,
        _ => Scheme::Http,
    };
    let host = seen
        .host
        .ok_or(Refusal::BadHost)
        .and_then(|h| url::parse_host(h).map_err(|_| Refusal::BadHost))?;
    let port = host.port.unwrap_or(scheme.default_port());
    let is_public = |name: &str, port: u16| {
        policy
            .settings
            .public_host
            .as_ref()
            .is_some_and(|public| public.host == name && public.port == port)
    };
    let is_listener = policy.mode == Mode::Loopback
        && host.host == listener_name(policy.listener)
        && port == policy.listener.port();
    if !is_listener && !is_public(&host.host, port) {
        return Err(Refusal::WrongHost);
    }
    if let (true, Some(forwarded)) = (via_proxy, seen.forwarded_host) {
        let named = url::parse_host(forwarded)
            .is_ok_and(|f| is_public(&f.host, f.port.unwrap_or(scheme.default_port())));
        if !named {
            return Err(Refusal::ForwardedHost);
        }
    }
    if let Some(origin) = seen.origin {
        let implicit = policy.mode == Mode::Loopback && origin == implicit_origin(policy.listener);
        if !implicit && !policy.settings.allowed_origins.iter().any(|o| o == origin) {
            return Err(Refusal::OriginNotAllowed);
        }
    }
    Ok(Passed { scheme, via_proxy })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PORT: u16 = 43123;

    fn v4() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], PORT))
    }

    fn v6() -> SocketAddr {
        "[::1]:43123".parse().unwrap()
    }

    fn settings(
        public: Option<&str>,
        origins: &[&str],
        proxy: Option<&str>,
        insecure: bool,
    ) -> Settings {
        Settings {
            public_host: public.map(|p| parse_public_host(p).unwrap()),
            allowed_origins: origins.iter().map(|o| parse_origin(o).unwrap()).collect(),
            trust_proxy: proxy.map(|p| parse_upstream(p).unwrap()),
            allow_insecure_remote: insecure,
        }
    }

    fn host_only(host: &str) -> Seen<'_> {
        Seen {
            host: Some(host),
            peer: Some(IpAddr::from([127, 0, 0, 1])),
            ..Seen::default()
        }
    }

    #[test]
    fn public_hosts_need_an_explicit_port() {
        let ok = [
            ("hub.example.com:443", "hub.example.com", 443),
            ("HUB.Example.com:8800", "hub.example.com", 8800),
            ("192.0.2.7:1", "192.0.2.7", 1),
            ("[2001:DB8::1]:65535", "[2001:db8::1]", 65535),
        ];
        for (text, host, port) in ok {
            let parsed = parse_public_host(text).unwrap();
            assert_eq!((parsed.host.as_str(), parsed.port), (host, port), "{text}");
        }
        assert_eq!(
            parse_public_host("a.example:80").unwrap().to_string(),
            "a.example:80"
        );
        for bad in [
            "hub.example.com",
            "hub.example.com:",
            "hub.example.com:0",
            "hub.example.com:65536",
            ":443",
            "[::1]",
            "::1:443",
            "https://hub.example.com:443",
            "hub.example.com:443/",
            " hub.example.com:443",
            "user@hub:443",
            "",
        ] {
            assert!(parse_public_host(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn origins_are_kept_in_their_serialized_form() {
        let ok = [
            ("https://hub.example.com", "https://hub.example.com"),
            ("HTTPS://Hub.Example.COM", "https://hub.example.com"),
            ("https://hub.example.com:443", "https://hub.example.com"),
            (
                "https://hub.example.com:8443",
                "https://hub.example.com:8443",
            ),
            ("http://127.0.0.1:80", "http://127.0.0.1"),
            ("http://127.0.0.1:443", "http://127.0.0.1:443"),
            ("http://[::1]:8800", "http://[::1]:8800"),
        ];
        for (text, serialized) in ok {
            assert_eq!(parse_origin(text).as_deref(), Ok(serialized), "{text}");
        }
        for bad in [
            "hub.example.com",
            "ws://hub.example.com",
            "https://hub.example.com/",
            "https://hub.example.com/app",
            "https://hub.example.com?x",
            "https://hub.example.com#x",
            "https://u:p@hub.example.com",
            "https://",
            "https://hub.example.com:0",
            "https://hub.example.com:99999",
            "https://hub example.com",
            "null",
            "",
        ] {
            assert!(parse_origin(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn upstreams_are_loopback_or_one_address() {
        assert_eq!(parse_upstream("loopback"), Ok(Upstream::Loopback));
        assert_eq!(
            parse_upstream("10.0.0.5"),
            Ok(Upstream::Ip(IpAddr::from([10, 0, 0, 5])))
        );
        assert_eq!(parse_upstream("[::1]"), parse_upstream("::1"));
        for bad in [
            "",
            "Loopback",
            "localhost",
            "10.0.0.5:80",
            "10.0.0.0/8",
            "proxy.example",
        ] {
            assert!(parse_upstream(bad).is_err(), "{bad:?}");
        }
        let lo = Upstream::Loopback;
        assert!(lo.matches(IpAddr::from([127, 0, 0, 1])));
        assert!(lo.matches("::1".parse().unwrap()));
        assert!(lo.matches("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!lo.matches(IpAddr::from([127, 0, 0, 2])));
        assert!(!lo.matches(IpAddr::from([10, 0, 0, 5])));
        let one = parse_upstream("10.0.0.5").unwrap();
        assert!(one.matches(IpAddr::from([10, 0, 0, 5])));
        assert!(one.matches("::ffff:10.0.0.5".parse().unwrap()));
        assert!(!one.matches(IpAddr::from([10, 0, 0, 6])));
        assert!(!one.matches(IpAddr::from([127, 0, 0, 1])));
    }

    /// Each configuration of seed §4.1.2's table, and what each one lacks.
    #[test]
    fn startup_rules_name_what_is_missing() {
        let keys = |result: Result<Mode, Vec<Missing>>| -> Result<Mode, Vec<&'static str>> {
            result.map_err(|missing| missing.iter().map(|m| m.key).collect())
        };
        let none = Settings::default();
        // Loopback, nothing set; and the drop-in case.
        assert_eq!(keys(mode(true, false, &none)), Ok(Mode::Loopback));
        assert_eq!(keys(mode(false, true, &none)), Ok(Mode::Off));
        // Loopback with extra names and origins stays loopback mode.
        let extra = settings(
            Some("tunnel.example:9000"),
            &["http://tunnel.example:9000"],
            None,
            false,
        );
        assert_eq!(keys(mode(true, false, &extra)), Ok(Mode::Loopback));
        // Direct non-loopback: every one of the three flags.
        let direct = settings(
            Some("192.0.2.2:8800"),
            &["http://192.0.2.2:8800"],
            None,
            true,
        );
        assert_eq!(keys(mode(false, true, &direct)), Ok(Mode::Direct));
        for (s, lacking) in [
            (
                settings(None, &["http://a.example"], None, true),
                vec!["shard.publicHost"],
            ),
            (
                settings(Some("a.example:80"), &[], None, true),
                vec!["shard.allowedOrigins"],
            ),
            (
                settings(Some("a.example:80"), &["http://a.example"], None, false),
                vec!["shard.allowInsecureRemote"],
            ),
            (
                settings(None, &[], None, true),
                vec!["shard.publicHost", "shard.allowedOrigins"],
            ),
            (
                settings(Some("a.example:80"), &[], None, false),
                vec!["shard.allowedOrigins", "shard.allowInsecureRemote"],
            ),
        ] {
            assert_eq!(keys(mode(false, true, &s)), Err(lacking), "{s:?}");
        }
        // A proxy in front of loopback: TLS origins need no insecure flag.
        let proxy = settings(
            Some("hub.example.com:443"),
            &["https://hub.example.com"],
            Some("loopback"),
            false,
        );
        assert_eq!(keys(mode(true, true, &proxy)), Ok(Mode::Proxy));
        assert_eq!(keys(mode(true, false, &proxy)), Err(vec!["panel.token"]));
        let proxy_only = settings(None, &[], Some("loopback"), false);
        assert_eq!(
            keys(mode(true, true, &proxy_only)),
            Err(vec!["shard.publicHost", "shard.allowedOrigins"])
        );
        // A proxy fronting plain HTTP needs the flag; with it, it starts.
        let plain = settings(
            Some("hub.lan:80"),
            &["http://hub.lan"],
            Some("loopback"),
            false,
        );
        assert_eq!(
            keys(mode(true, true, &plain)),
            Err(vec!["shard.allowInsecureRemote"])
        );
        let plain_ok = Settings {
            allow_insecure_remote: true,
            ..plain.clone()
        };
        assert_eq!(keys(mode(true, true, &plain_ok)), Ok(Mode::Proxy));
        // A proxy in front of a non-loopback listener is plain HTTP on
        // the network between them.
        let far = settings(
            Some("hub.example.com:443"),
            &["https://hub.example.com"],
            Some("10.0.0.5"),
            false,
        );
        assert_eq!(
            keys(mode(false, true, &far)),
            Err(vec!["shard.allowInsecureRemote"])
        );
        // Any single setting on a non-loopback listener turns the rules on.
        let only_insecure = settings(None, &[], None, true);
        assert_eq!(
            keys(mode(false, true, &only_insecure)),
            Err(vec!["shard.publicHost", "shard.allowedOrigins"])
        );
        // The messages say why, naming the flag.
        let message = mode(
            false,
            true,
            &settings(None, &["http://a.example"], None, true),
        )
        .unwrap_err()[0]
            .to_string();
        assert_eq!(
            message,
            "shard.publicHost (--public-host HOST:PORT) is required because listen.host is not a loopback address"
        );
        let message = mode(true, true, &plain).unwrap_err()[0].to_string();
        assert!(message.contains("http://hub.lan"), "{message}");
    }

    #[test]
    fn loopback_hosts_are_exact() {
        let none = Settings::default();
        let policy = Policy {
            mode: Mode::Loopback,
            settings: &none,
            listener: v4(),
        };
        assert!(check(&policy, &host_only("127.0.0.1:43123")).is_ok());
        for (host, refusal) in [
            ("localhost:43123", Refusal::WrongHost),
            ("LOCALHOST:43123", Refusal::WrongHost),
            ("127.0.0.1:43124", Refusal::WrongHost),
            ("127.0.0.1", Refusal::WrongHost),
            ("127.0.0.1:80", Refusal::WrongHost),
            ("[::1]:43123", Refusal::WrongHost),
            ("127.1:43123", Refusal::WrongHost),
            ("0x7f.0.0.1:43123", Refusal::WrongHost),
            ("0177.0.0.1:43123", Refusal::WrongHost),
            ("2130706433:43123", Refusal::WrongHost),
            ("127.0.0.2:43123", Refusal::WrongHost),
            ("127.0.0.1.:43123", Refusal::WrongHost),
            ("127.0.0.1.nip.io:43123", Refusal::WrongHost),
            ("a.127.0.0.1:43123", Refusal::WrongHost),
            ("[::ffff:127.0.0.1]:43123", Refusal::WrongHost),
            ("127.0.0.1:043123", Refusal::BadHost),
            ("127.0.0.1:", Refusal::BadHost),
            ("", Refusal::BadHost),
            ("u@127.0.0.1:43123", Refusal::BadHost),
        ] {
            assert_eq!(check(&policy, &host_only(host)), Err(refusal), "{host:?}");
        }
        assert_eq!(check(&policy, &Seen::default()), Err(Refusal::BadHost));

        // An IPv6 listener: only [::1]:<port>.
        let policy6 = Policy {
            listener: v6(),
            ..policy
        };
        assert!(check(&policy6, &host_only("[::1]:43123")).is_ok());
        for host in [
            "127.0.0.1:43123",
            "[0:0:0:0:0:0:0:1]:43123",
            "[::1]:43124",
            "[::1]",
        ] {
            assert_eq!(
                check(&policy6, &host_only(host)),
                Err(Refusal::WrongHost),
                "{host}"
            );
        }

        // On port 80 a Host without port means port 80, as in HTTP.
        let policy80 = Policy {
            listener: SocketAddr::from(([127, 0, 0, 1], 80)),
            ..policy
        };
        assert!(check(&policy80, &host_only("127.0.0.1")).is_ok());
        assert!(check(&policy80, &host_only("127.0.0.1:80")).is_ok());
    }

    #[test]
    fn a_configured_name_is_exact_too() {
        let s = settings(Some("Tunnel.Example:9000"), &[], None, false);
        let policy = Policy {
            mode: Mode::Loopback,
            settings: &s,
            listener: v4(),
        };
        assert!(check(&policy, &host_only("tunnel.example:9000")).is_ok());
        assert!(check(&policy, &host_only("TUNNEL.example:9000")).is_ok());
        assert!(check(&policy, &host_only("127.0.0.1:43123")).is_ok());
        for host in [
            "tunnel.example",
            "tunnel.example:43123",
            "tunnel.example.:9000",
            "x.tunnel.example:9000",
            "tunnel.example.evil.test:9000",
            "tunnel.exampl:9000",
        ] {
            assert_eq!(
                check(&policy, &host_only(host)),
                Err(Refusal::WrongHost),
                "{host}"
            );
        }
    }

    #[test]
    fn origins_are_compared_byte_for_byte() {
        let s = settings(None, &["https://app.example:8443"], None, false);
        let policy = Policy {
            mode: Mode::Loopback,
            settings: &s,
            listener: v4(),
        };
        let with = |origin| Seen {
            origin: Some(origin),
            ..host_only("127.0.0.1:43123")
        };
        assert!(check(&policy, &with("http://127.0.0.1:43123")).is_ok());
        assert!(check(&policy, &with("https://app.example:8443")).is_ok());
        for origin in [
            "http://localhost:43123",
            "http://127.0.0.1:43124",
            "http://127.0.0.1",
            "https://127.0.0.1:43123",
            "HTTP://127.0.0.1:43123",
            "http://127.0.0.1:43123/",
            "http://[::1]:43123",
            "https://app.example",
            "https://APP.example:8443",
            "https://app.example:8443.evil.test",
            "null",
            "",
        ] {
            assert_eq!(
                check(&policy, &with(origin)),
                Err(Refusal::OriginNotAllowed),
                "{origin:?}"
            );
        }
        assert_eq!(implicit_origin(v6()), "http://[::1]:43123");
        assert_eq!(
            implicit_origin(SocketAddr::from(([127, 0, 0, 1], 80))),
            "http://127.0.0.1"
        );
    }

    #[test]
    fn remote_mode_pins_the_public_host_and_drops_the_implicit_origin() {
        let s = settings(
            Some("192.0.2.2:8800"),
            &["http://192.0.2.2:8800"],
            None,
            true,
        );
        let policy = Policy {
            mode: Mode::Direct,
            settings: &s,
            listener: SocketAddr::from(([0, 0, 0, 0], 8800)),
        };
        let seen = |host, origin| Seen {
            host: Some(host),
            origin,
            peer: Some(IpAddr::from([192, 0, 2, 9])),
            ..Seen::default()
        };
        assert_eq!(
            check(
                &policy,
                &seen("192.0.2.2:8800", Some("http://192.0.2.2:8800"))
            ),
            Ok(Passed {
                scheme: Scheme::Http,
                via_proxy: false
            })
        );
        assert_eq!(
            check(&policy, &seen("127.0.0.1:8800", None)),
            Err(Refusal::WrongHost)
        );
        assert_eq!(
            check(&policy, &seen("0.0.0.0:8800", None)),
            Err(Refusal::WrongHost)
        );
        assert_eq!(
            check(
                &policy,
                &seen("192.0.2.2:8800", Some("http://127.0.0.1:8800"))
            ),
            Err(Refusal::OriginNotAllowed)
        );
        let off = Policy {
            mode: Mode::Off,
            ..policy
        };
        assert_eq!(
            check(&off, &seen("192.0.2.2:8800", None)),
            Err(Refusal::Off)
        );
    }

    #[test]
    fn forwarded_headers_count_only_from_the_upstream() {
        let s = settings(
            Some("hub.example.com:443"),
            &["https://hub.example.com"],
            Some("loopback"),
            false,
        );
        let policy = Policy {
            mode: Mode::Proxy,
            settings: &s,
            listener: v4(),
        };
        let from = |peer: [u8; 4], host, proto, fwd_host| Seen {
            host: Some(host),
            origin: Some("https://hub.example.com"),
            forwarded_proto: proto,
            forwarded_host: fwd_host,
            peer: Some(IpAddr::from(peer)),
        };
        let lo = [127, 0, 0, 1];
        let https = Ok(Passed {
            scheme: Scheme::Https,
            via_proxy: true,
        });
        // Through the proxy: the effective scheme is https, so a Host
        // without port means 443.
        assert_eq!(
            check(&policy, &from(lo, "hub.example.com", Some("https"), None)),
            https
        );
        assert_eq!(
            check(
                &policy,
                &from(
                    lo,
                    "hub.example.com",
                    Some("HTTPS"),
                    Some("hub.example.com")
                )
            ),
            https
        );
        assert_eq!(
            check(
                &policy,
                &from(
                    lo,
                    "hub.example.com:443",
                    Some("https"),
                    Some("hub.example.com:443")
                )
            ),
            https
        );
        // X-Forwarded-Host is checked, never trusted.
        for forwarded in [
            "evil.example",
            "hub.example.com:8443",
            "hub.example.com.evil.test",
            "hub.example.com, evil.example",
            "",
            "a b",
        ] {
            assert_eq!(
                check(
                    &policy,
                    &from(lo, "hub.example.com", Some("https"), Some(forwarded))
                ),
                Err(Refusal::ForwardedHost),
                "{forwarded:?}"
            );
        }
        // Without https the scheme is http: a bare Host means port 80.
        assert_eq!(
            check(&policy, &from(lo, "hub.example.com", Some("http"), None)),
            Err(Refusal::WrongHost)
        );
        assert_eq!(
            check(
                &policy,
                &from(lo, "hub.example.com", Some("https, http"), None)
            ),
            Err(Refusal::WrongHost)
        );
        assert_eq!(
            check(&policy, &from(lo, "hub.example.com:443", None, None)),
            Ok(Passed {
                scheme: Scheme::Http,
                via_proxy: true
            })
        );
        // The listener's own name is not accepted behind a proxy.
        assert_eq!(
            check(&policy, &from(lo, "127.0.0.1:43123", Some("https"), None)),
            Err(Refusal::WrongHost)
        );
        // Another peer's forwarded headers are ignored: the request is
        // direct (http), and a wrong X-Forwarded-Host does not matter.
        let other = [192, 0, 2, 9];
        assert_eq!(
            check(
                &policy,
                &from(
                    other,
                    "hub.example.com:443",
                    Some("https"),
                    Some("evil.example")
                )
            ),
            Ok(Passed {
                scheme: Scheme::Http,
                via_proxy: false
            })
        );
        assert_eq!(
            check(
                &policy,
                &from(other, "hub.example.com", Some("https"), None)
            ),
            Err(Refusal::WrongHost)
        );
        // No peer address at all: nothing is trusted.
        let unknown = Seen {
            peer: None,
            ..from(lo, "hub.example.com", Some("https"), None)
        };
        assert_eq!(check(&policy, &unknown), Err(Refusal::WrongHost));
    }
}
