//! Worker process supervision: spawning, stopping, adoption, log capture.
//!
//! `sys` wraps the OS calls (pidfd, process groups, subreaper); `render`
//! and `launch` build the worker's configuration and command line (pure);
//! `process` is the record and its description (pure); `control` starts
//! and stops workers; `daemon` finds the worker a daemonizing launcher
//! left behind (`launcher.pidFile`); `docker` recognises a foreground
//! `docker run` and decides its management commands (pure), `container`
//! runs them and keeps their context; `capture` reads their pipes;
//! `snapshot` reads their persisted state for the panel.

pub mod capture;
pub mod container;
pub mod control;
pub mod daemon;
pub mod docker;
pub mod launch;
pub mod process;
pub mod refresh;
pub mod render;
pub mod snapshot;
pub mod sys;
