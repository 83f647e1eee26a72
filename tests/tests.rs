//! The one integration test binary: every module starts real processes or
//! real sockets on loopback (port 0) with its own temporary data directory.

mod util;

// HTTP API, auth, static panel and hostile HTTP input against the real hub.
mod api;
// Command line, configuration files, exit statuses, restart persistence.
mod cli;
// The tiny_http fork's connection, header and deadline bounds.
mod http_limits;
