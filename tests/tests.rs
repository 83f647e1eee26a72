//! The one integration test binary: every module starts real processes or
//! real sockets on loopback (port 0) with its own temporary data directory.

// Sleeps here pace a poll that has a deadline, an attacker or a probe, or
// mark a deliberate moment (a kill, a measurement window); none stands in
// for a wait on a condition.
#![allow(clippy::disallowed_methods)]

mod util;

// HTTP API, auth, static panel and hostile HTTP input against the real hub.
mod api;
// Command line, configuration files, exit statuses, restart persistence.
mod cli;
// The tiny_http fork's connection, header and deadline bounds.
mod http_limits;
// The front door against crowds of slow clients and a hub out of descriptors.
mod front_door;
// Worker event sockets, requests, transcript and the events file.
mod worker_side;
// Complete runs and confirmations with the built-in worker.
mod worker_runs;
// Launching, stopping, adopting and capturing real worker processes.
mod supervisor;
// Docker launches: stopped by container, judged by inspect, after restarts and for children.
mod docker;
// The configuration library: files, revisions, templates, snapshots, library sessions.
mod configurations;
// The predefined skill library: list, errors, limits, references, template.
mod skills;
// A Node hub's configuration: its first-run file, spec fields, pid files, advertised endpoints.
mod node_config;
// The panel WebSocket protocol.
mod panel;
// GET /api/hub/health: process figures, connections' pending bytes, workers' rates.
mod health;
// Who may reach the Shard endpoints: Host, Origin, forwarded headers, tickets, remote mode.
mod shard_access;
// The Shard wire protocol over /shard/ws, with a client written from the seed alone.
mod shard;
// The Shard unix socket and shard-stdio (JSONL), beside WebSocket clients and panels.
mod shard_local;
// The remote-tools listener: exchange close codes, limits and session plans.
mod tools;
// Hostile HTTP input: malformed heads, escapes, methods, traversal, CSRF, host names.
mod hostile_http;
// WebSocket abuse: tokens, origins, bad frames, limits, peers that never close or vanish.
mod hostile_ws;
// Floods and slow peers: huge bodies, slowloris, ping and event floods, non-readers.
mod hostile_floods;
// Misbehaving workers and processes: no identity, huge lines, closed pipes, instant exits.
mod hostile_worker;
// Failing storage: read-only directories, a full disk, SIGKILL during writes.
mod hostile_storage;
// POST /api/sessions/:id/answer: read-only worker answer queries.
mod answer;
// Headless subagents through the operator API and panel socket.
mod headless_api;
// Headless subagents end to end.
mod subagents;
// The offline model provider: scenarios, bounds, worker configurations.
mod mock_provider;
// An existing Node hub's data directory: the one-time import and adoption.
mod node_import;
// The Node hub's wire shapes: every frame and response checked against them.
mod wire_drift;
// A hand-edited block-YAML worker configuration across hub restarts.
mod worker_config_yaml;
// Faults tried with figures: a full data directory, a flood on every socket, disk writers.
mod faults;
// Fifty SIGKILLs of the hub while it writes sessions, plans, receipts and configurations.
mod kill_trials;
// The layer table of docs/ARCHITECTURE.md held against the crate's imports.
mod architecture;
