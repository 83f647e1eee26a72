//! The one rule for commands that can block: a worker start forks and
//! writes SQLite, a stop waits on its ladder, a new agent waits for its
//! worker's start. A socket reader (a panel's, a Shard connection's) that
//! receives one does not run it itself: it hands the command to a
//! short-lived thread of its own, so the reader keeps serving its
//! connection, and the outcome is delivered from whichever thread
//! completes the command. The JSON API needs none of this: each HTTP
//! connection has its own thread already.

use crate::util::thread::{self, Stack};

use super::{ErrorKind, OpError};

/// Runs `work(input)` on a thread named `name`. When the OS refuses a
/// thread, `input` comes back with the refusal to answer with
/// (`internal_error`, naming `what`), on the caller's thread.
pub(super) fn run<I: Send + 'static>(
    name: &'static str,
    what: &str,
    input: I,
    work: impl FnOnce(I) + Send + 'static,
) -> Result<(), (OpError, I)> {
    match thread::spawn_with(name, Stack::Large, input, work) {
        Ok(_) => Ok(()),
        Err((err, input)) => {
            log::error!("cannot start a thread for {what}: {err}");
            let refusal = OpError::new(
                ErrorKind::Internal,
                format!("the hub could not start the {what}"),
            );
            Err((refusal, input))
        }
    }
}
