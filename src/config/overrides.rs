//! The command line's configuration values ([`Overrides`], `--listen`
//! parsed by [`parse_listen`]) and the layer they make, which wins over the
//! file.

use std::path::PathBuf;

use serde_json::{Map, Value};

use super::{paths, ConfigError};

/// Values from the command line. They win over the file; relative paths
/// among them resolve against the current directory.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `-l/--listen host:port`, already parsed by [`parse_listen`].
    pub listen: Option<(String, u16)>,
    /// `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// `--worker-bin`.
    pub worker_bin: Option<PathBuf>,
    /// `--panel-token`.
    pub panel_token: Option<String>,
    /// `--mock` (`Some(true)`) or `--no-mock` (`Some(false)`):
    /// `mock.enabled`, the offline model provider.
    pub mock: Option<bool>,
    /// `--force-kill-process-group`; `false` leaves the file's value.
    pub force_kill_process_group: bool,
    /// `--tools-port PORT`: `toolRequests.port` (0 lets the system pick).
    pub tools_port: Option<u16>,
    /// `--public-host HOST:PORT`: `shard.publicHost`.
    pub public_host: Option<String>,
    /// Every `--allowed-origin ORIGIN`, in order: `shard.allowedOrigins`
    /// (replacing the file's list when any is given).
    pub allowed_origins: Vec<String>,
    /// `--trust-proxy loopback|IP`: `shard.trustProxy`.
    pub trust_proxy: Option<String>,
    /// `--allow-insecure-remote`; `false` leaves the file's value.
    pub allow_insecure_remote: bool,
}

impl Overrides {
    /// The overrides as a configuration layer, shaped like the file.
    pub(super) fn to_layer(&self) -> Result<Value, ConfigError> {
        let mut layer = Map::new();
        if let Some((host, port)) = &self.listen {
            layer.insert(
                "listen".into(),
                serde_json::json!({ "host": host, "port": port }),
            );
        }
        if let Some(dir) = &self.data_dir {
            let dir = paths::to_string("dataDir", dir.clone())?;
            layer.insert("dataDir".into(), Value::String(dir));
        }
        if let Some(bin) = &self.worker_bin {
            let bin = paths::to_string("worker.bin", bin.clone())?;
            layer.insert("worker".into(), serde_json::json!({ "bin": bin }));
        }
        if let Some(token) = &self.panel_token {
            layer.insert("panel".into(), serde_json::json!({ "token": token }));
        }
        if let Some(enabled) = self.mock {
            layer.insert("mock".into(), serde_json::json!({ "enabled": enabled }));
        }
        if self.force_kill_process_group {
            layer.insert("forceKillProcessGroup".into(), Value::Bool(true));
        }
        if let Some(port) = self.tools_port {
            layer.insert("toolRequests".into(), serde_json::json!({ "port": port }));
        }
        let mut shard = Map::new();
        if let Some(host) = &self.public_host {
            shard.insert("publicHost".into(), Value::from(host.as_str()));
        }
        if !self.allowed_origins.is_empty() {
            shard.insert(
                "allowedOrigins".into(),
                Value::from(self.allowed_origins.clone()),
            );
        }
        if let Some(upstream) = &self.trust_proxy {
            shard.insert("trustProxy".into(), Value::from(upstream.as_str()));
        }
        if self.allow_insecure_remote {
            shard.insert("allowInsecureRemote".into(), Value::Bool(true));
        }
        if !shard.is_empty() {
            layer.insert("shard".into(), Value::Object(shard));
        }
        Ok(Value::Object(layer))
    }
}

/// Parses a `--listen` value: `host:port` or `[v6]:port`. The host must be
/// non-empty (brackets are removed from an IPv6 host) and the port a
/// number from 0 to 65535.
pub fn parse_listen(s: &str) -> Result<(String, u16), ConfigError> {
    let fail = |reason| ConfigError::Listen {
        input: s.to_owned(),
        reason,
    };
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| fail("missing ']' after the IPv6 address"))?;
        let port = after
            .strip_prefix(':')
            .ok_or_else(|| fail("expected ':' and a port after ']'"))?;
        (host, port)
    } else {
        let (host, port) = s
            .rsplit_once(':')
            .ok_or_else(|| fail("expected host:port"))?;
        if host.contains(':') {
            return Err(fail("an IPv6 host must be in brackets, as in [::1]:8800"));
        }
        (host, port)
    };
    if host.is_empty() {
        return Err(fail("the host is empty"));
    }
    if host.chars().any(char::is_whitespace) {
        return Err(fail("the host contains whitespace"));
    }
    let port = Some(port)
        .filter(|port| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|port| port.parse::<u16>().ok())
        .ok_or_else(|| fail("the port must be a number from 0 to 65535"))?;
    Ok((host.to_owned(), port))
}
