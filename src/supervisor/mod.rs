//! Worker process supervision: spawning, stopping, adoption, log capture.
//!
//! `sys` wraps the OS calls (pidfd, process groups, subreaper); `render`
//! and `launch` build the worker's configuration and command line (pure);
//! `process` is the record and its description (pure); `control` starts
//! and stops workers (`stop`: what a stop is asked and how it ended;
//! `tracked`: the spawn lock and the children the hub reaps itself); `daemon` finds the worker a daemonizing launcher
//! left behind (`launcher.pidFile`); `docker` recognises a foreground
//! `docker run` and decides its management commands (pure), `container`
//! runs them, `context` keeps their context on disk; `capture` reads their pipes;
//! `snapshot` reads their persisted state for the panel.

pub mod capture;
pub mod container;
pub mod context;
pub mod control;
pub mod daemon;
pub mod docker;
pub mod launch;
pub mod process;
pub mod refresh;
pub mod render;
pub mod snapshot;
pub mod stop;
pub mod sys;
pub mod tracked;
