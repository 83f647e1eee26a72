//! The start-up wiring: opens the hub, creates the front-ends' own state
//! (the panel registry, the Shard front-end), subscribes them to the hub's
//! notifications, binds and serves both listeners, the Shard unix socket
//! (unless `shard.socket` is empty) and, when `mock.enabled`, the offline
//! model provider, adopts recorded workers; and the shutdown order that
//! takes it all apart again. This is the one place that knows every layer.

use std::sync::Arc;

use crate::config::Config;
use crate::hub::{Hub, RunOptions, StartError, MAIN_LISTENER, TOOLS_LISTENER};
use crate::mock_provider::{MockProvider, MockProviderConfig, Scenario, MOCK_LISTENER};
use crate::panel::Panels;
use crate::shard::socket::{self, SocketServer};
use crate::shard::Shard;

/// A started hub: the shared state, the two listener handles, the Shard
/// front-end and its unix socket, and the offline model provider when it
/// runs.
pub struct Running {
    pub hub: Arc<Hub>,
    server: tiny_http::ServerHandle,
    tools: tiny_http::ServerHandle,
    shard: Arc<Shard>,
    socket: Option<SocketServer>,
    mock: Option<MockProvider>,
    reaper: Option<Arc<crate::shard::reaper::Reaper>>,
}

impl Running {
    /// Opens, binds both listeners (main, then remote tools), starts the
    /// offline model provider when `mock.enabled` (before any worker is
    /// adopted or launched, so every worker configuration can point at it)
    /// and starts serving. If a bind or start fails, whatever was already
    /// bound is released (dropping a listener, a server handle or the
    /// provider closes it) and the start fails naming the listener.
    pub fn start(config: Config, options: RunOptions) -> Result<Running, StartError> {
        crate::util::time::start_monotonic();
        let hub = Arc::new(Hub::open(config, options)?);
        hub.set_hooks(Arc::new(crate::subagents::hooks::Subagents::new(
            &hub.subagents,
        )));
        report_fd_limit(&hub);
        let panels = Panels::new();
        hub.subscribe(panels.clone());
        let gate = Arc::new(crate::shard::gate::Gate::new(&hub.config));
        let shard = Shard::new(crate::ops::sessions::read_all(&hub, |s| s.id().to_string()));
        hub.subscribe(shard.clone());
        hub.subscribe(crate::ops::worker::DeferredStops::new(&hub));
        hub.subscribe(crate::ops::confirm::HeadlessDeny::new(
            &hub,
            vec![panels.clone(), shard.clone()],
        ));
        if let Err(err) = crate::supervisor::sys::set_child_subreaper() {
            log::warn!("cannot become a child subreaper: {err}");
        }
        let listener = hub.bind()?;
        // On failure `listener` is dropped here, releasing the main port.
        let tools_listener = hub.bind_tools()?;
        // Bound before any worker is adopted or started; a live socket of
        // another process refuses the start (the file is left alone).
        let bound = match hub.config.shard_socket_path() {
            Some(path) => Some(socket::bind(&path).map_err(|err| StartError::Socket {
                path: err.path,
                why: err.why,
            })?),
            None => None,
        };
        let mock = if hub.config.mock.enabled {
            let settings = provider_settings(&hub.config);
            let provider = MockProvider::start(&settings).map_err(|err| StartError::Bind {
                listener: MOCK_LISTENER,
                addr: settings.listen.clone(),
                err,
            })?;
            log::info!("mock provider: {}", provider.base_url());
            hub.set_mock_base_url(provider.base_url().to_owned());
            Some(provider)
        } else {
            None
        };
        let recorded = hub.stored_processes();
        let launched: Vec<String> = recorded.iter().map(|r| r.session_id.clone()).collect();
        crate::supervisor::control::adopt(&hub.services, recorded);
        crate::subagents::family::restore(&hub.subagents, &launched);
        let server = crate::http::start(hub.clone(), panels, gate.clone(), shard.clone(), listener)
            .map_err(|err| StartError::Bind {
                listener: MAIN_LISTENER,
                addr: crate::reply::display_addr(&hub.local_addr()),
                err,
            })?;
        let tools_addr = tools_listener.local_addr().ok();
        let tools = match crate::http::tools::start(hub.clone(), tools_listener) {
            Ok(tools) => tools,
            Err(err) => {
                server.shutdown();
                return Err(StartError::Bind {
                    listener: TOOLS_LISTENER,
                    addr: tools_addr.map_or_else(String::new, |a| crate::reply::display_addr(&a)),
                    err,
                });
            }
        };
        if let Some(addr) = hub.tools_addr() {
            log::info!("tools: ws://{}", crate::reply::display_addr(&addr));
        }
        let socket = match bound {
            Some(bound) => {
                let path = hub.config.shard_socket_path().unwrap_or_default();
                match SocketServer::start(&hub, &shard, bound) {
                    Ok(socket) => Some(socket),
                    Err(err) => {
                        server.shutdown();
                        tools.shutdown();
                        return Err(StartError::Socket {
                            path,
                            why: format!("cannot start its thread: {err}"),
                        });
                    }
                }
            }
            None => {
                log::info!("shard socket: off (shard.socket is empty)");
                None
            }
        };
        crate::shard::gate::announce(&hub, &gate);
        let reaper = crate::shard::reaper::Reaper::start(&hub, &shard);
        Ok(Running {
            hub,
            server,
            tools,
            shard,
            socket,
            mock,
            reaper,
        })
    }

    /// The documented shutdown order: stop accepting on both listeners and
    /// the Shard socket (its file removed), stop workers, stop the offline
    /// model provider (the workers may use it until they are gone), close
    /// every socket (tool sockets included), flush the events files, close
    /// the store.
    pub fn stop(self) {
        self.server.shutdown();
        self.tools.shutdown();
        // From now on a stopped worker does not end its direct
        // connections: they end with the hub (step 3), as a hub that
        // went away.
        self.shard.set_stopping();
        if let Some(reaper) = &self.reaper {
            reaper.stop();
        }
        if let Some(socket) = self.socket {
            socket.shutdown();
        }
        crate::subagents::family::freeze_all(&self.hub.subagents);
        crate::supervisor::control::stop_all(&self.hub.services);
        crate::subagents::family::shutdown(&self.hub.subagents);
        if let Some(mock) = &self.mock {
            mock.stop();
        }
        self.hub.shutdown();
    }
}

/// The offline model provider's settings from a validated configuration
/// (`mock.*`, and `worker.connectHost` as the host it is advertised on).
fn provider_settings(config: &Config) -> MockProviderConfig {
    let mock = &config.mock;
    MockProviderConfig {
        listen: mock.listen.clone(),
        // validation admits only scenario names
        scenario: Scenario::parse(&mock.scenario).unwrap_or(Scenario::Auto),
        slow_ms: mock.slow_ms,
        tool_command: mock.tool_command.clone(),
        advertise_host: config.worker.connect_host.clone(),
        ..MockProviderConfig::default()
    }
}

/// Raises the descriptor limit to its hard limit (every idle HTTP
/// connection holds one) and says what the front door may hold.
fn report_fd_limit(hub: &Hub) {
    use crate::util::fdlimit;
    let limit = match fdlimit::raise() {
        Ok((before, now)) if before < now => {
            log::info!("file descriptors: limit raised from {before} to {now}");
            now
        }
        Ok((_, now)) => now,
        Err(err) => {
            log::warn!("cannot raise the file-descriptor limit: {err}");
            match fdlimit::current() {
                Ok(now) => now,
                Err(_) => return,
            }
        }
    };
    let configured = hub.config.http.max_connections;
    let cap = fdlimit::connection_cap(limit);
    if configured > cap {
        log::warn!(
            "http.maxConnections {configured} is above what {limit} file descriptors allow; \
             each listener holds at most {cap} connections"
        );
    } else {
        log::info!(
            "front door: at most {configured} connections and {} handler threads per listener \
             ({limit} file descriptors)",
            hub.config.http.max_handler_threads
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock_provider::DEFAULT_TOOL_COMMAND;

    #[test]
    fn the_provider_settings_follow_the_configuration() {
        let config = crate::config::test_config(
            r#"{"mock": {"listen": "[::1]:0", "scenario": "echo", "slowMs": 5, "toolCommand": "id"},
                "worker": {"connectHost": "10.0.0.2"}}"#,
        );
        let p = provider_settings(&config);
        assert_eq!(p.listen, "[::1]:0");
        assert_eq!(p.scenario, Scenario::Echo);
        assert_eq!(p.slow_ms, 5);
        assert_eq!(p.tool_command(), "id");
        assert_eq!(p.advertise_host, "10.0.0.2");
        let defaults = provider_settings(&crate::config::test_config("{}"));
        assert_eq!(defaults.listen, "127.0.0.1:0");
        assert_eq!(defaults.scenario, Scenario::Auto);
        assert_eq!(defaults.slow_ms, 1500);
        assert_eq!(defaults.tool_command(), DEFAULT_TOOL_COMMAND);
        assert_eq!(defaults.advertise_host, "");
    }
}
