//! Docker launches, the pure part: recognising a foreground `docker run
//! … --name NAME` in a worker's command line, the management context the
//! hub keeps for it, the `docker kill` and `docker inspect` command lines,
//! and what `docker inspect` printed.
//!
//! Such a launch is not the process the hub spawned: the `docker` CLI only
//! attaches to a container the daemon runs. Killing the CLI can leave the
//! container running, and the CLI's exit alone says nothing about the
//! container. So the hub manages the container by name: it signals it with
//! `docker kill --signal TERM|KILL`, and judges its end by `docker
//! inspect`, run with the same executable, working directory and a small,
//! allow-listed environment that were in force at the start (kept
//! privately, so a restarted hub still reaches the same daemon).
//!
//! Recognition follows the CLI's own option grammar (pflag): global
//! options, then `run` (or `container run`), then `run`'s options up to the
//! image. A launch is managed by its container only when it names the
//! container (`--name X` or `--name=X`) and runs in the foreground (no
//! `-d`/`--detach`). Long `run` options this module does not know are taken
//! to need a value, as the CLI does for every option that is not a flag.
//!
//! No I/O here: `container` runs the commands and keeps the record. This
//! file holds the executable's name; recognising a launch is
//! `recognise.rs`, the management command lines and reading inspect's
//! output `inspect.rs`, the kept management context (its environment,
//! executable and stored forms, this hub's and the Node hub's)
//! `management.rs`.

mod inspect;
mod management;
mod recognise;
#[cfg(test)]
mod tests;

pub use inspect::{
    inspect_args, kill_args, read_inspect, valid_id, Inspected, Signal, INSPECT_FORMAT,
};
pub use management::{
    effective_env, executable_candidates, from_json, from_node, management_env, to_json,
    InvalidContext, Management, Stored, MANAGEMENT_ENV,
};
pub use recognise::{recognise, valid_name, OptionError, Recognised, Target, Unmanaged};

/// The one executable name recognised (any directory).
pub const DOCKER: &str = "docker";
