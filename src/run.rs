//! The start-up wiring: opens the hub, creates the front-ends' own state
//! (the panel registry), subscribes it to the hub's notifications, binds
//! and serves both listeners, adopts recorded workers; and the shutdown
//! order that takes it all apart again. This is the one place that knows
//! every layer.

use std::sync::Arc;

use crate::config::Config;
use crate::hub::{Hub, RunOptions, StartError, MAIN_LISTENER, TOOLS_LISTENER};
use crate::panel::Panels;

/// A started hub: the shared state and the two listener handles.
pub struct Running {
    pub hub: Arc<Hub>,
    server: tiny_http::ServerHandle,
    tools: tiny_http::ServerHandle,
}

impl Running {
    /// Opens, binds both listeners (main, then remote tools) and starts
    /// serving. If either bind or start fails, whatever was already bound
    /// is released (dropping a listener or a server handle closes it) and
    /// the start fails naming the listener.
    pub fn start(config: Config, options: RunOptions) -> Result<Running, StartError> {
        let hub = Arc::new(Hub::open(config, options)?);
        let panels = Panels::new();
        hub.subscribe(panels.clone());
        if let Err(err) = crate::supervisor::sys::set_child_subreaper() {
            log::warn!("cannot become a child subreaper: {err}");
        }
        let listener = hub.bind()?;
        // On failure `listener` is dropped here, releasing the main port.
        let tools_listener = hub.bind_tools()?;
        let recorded = hub.stored_processes();
        let launched: Vec<String> = recorded.iter().map(|r| r.session_id.clone()).collect();
        crate::supervisor::control::adopt(&hub, recorded);
        crate::subagents::family::restore(&hub, &launched);
        let server =
            crate::http::start(hub.clone(), panels, listener).map_err(|err| StartError::Bind {
                listener: MAIN_LISTENER,
                addr: crate::http::display_addr(&hub.local_addr()),
                err,
            })?;
        let tools_addr = tools_listener.local_addr().ok();
        let tools = match crate::http::tools::start(hub.clone(), tools_listener) {
            Ok(tools) => tools,
            Err(err) => {
                server.shutdown();
                return Err(StartError::Bind {
                    listener: TOOLS_LISTENER,
                    addr: tools_addr.map_or_else(String::new, |a| crate::http::display_addr(&a)),
                    err,
                });
            }
        };
        if let Some(addr) = hub.tools_addr() {
            log::info!("tools: ws://{}", crate::http::display_addr(&addr));
        }
        Ok(Running { hub, server, tools })
    }

    /// The documented shutdown order: stop accepting on both listeners,
    /// stop workers, close every socket (tool sockets included), flush the
    /// events files, close the store.
    pub fn stop(self) {
        self.server.shutdown();
        self.tools.shutdown();
        crate::subagents::family::freeze_all(&self.hub);
        crate::supervisor::control::stop_all(&self.hub);
        crate::subagents::family::shutdown(&self.hub);
        self.hub.shutdown();
    }
}
