//! The provider's I/O: binding `mock.listen`, the tiny_http server (the
//! fork's bounded thread-per-connection mode, threads `mock-accept` and
//! `mock-conn`), reading each body under the limit, the `slow` wait, and
//! stopping.
//!
//! A request is served wholly on its connection thread: read the body
//! (refused with 413 past the limit, 411 when chunked), hand it to the pure
//! [`wire::reply`], wait if the scenario is `slow`, write the reply. The
//! wait is on a condition variable that [`MockProvider::stop`] signals, so a
//! stop never waits out `mock.slowMs`; the stop then waits (at most
//! [`ANSWER_DEADLINE`]) until every request it woke has written its 503,
//! so the hub does not exit under them.

use std::io::{self, Read};
use std::net::{TcpListener, ToSocketAddrs};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tiny_http::{Header, Method, Request, Response, ServerHandle, ServerLimits, ThreadNames};

use super::wire::{self, Completion, Reply, Script};
use super::{MockProviderConfig, Scenario};
use crate::util::time;

/// Thread names, so the provider's threads are told apart from the main
/// listener's (`http-accept`, `http-conn`).
const THREADS: ThreadNames = ThreadNames {
    accept: "mock-accept",
    connection: "mock-conn",
};

/// Head limits: a chat request's head is a few hundred bytes.
const MAX_HEADER_BYTES: usize = 16 * 1024;
const MAX_HEADERS: usize = 100;
/// Connection threads parse JSON bodies; the same class as the hub's own.
const CONNECTION_STACK: usize = 256 * 1024;

/// How long a stop waits for the requests it woke to write their 503.
const ANSWER_DEADLINE: Duration = Duration::from_secs(1);

/// A running provider. Dropping it stops it.
pub struct MockProvider {
    server: ServerHandle,
    base_url: String,
    stop: Arc<Stop>,
}

/// The settings every connection thread reads.
struct Shared {
    fallback: Scenario,
    tool_command: String,
    slow: Duration,
    max_body_bytes: usize,
    stop: Arc<Stop>,
}

impl MockProvider {
    /// Binds `config.listen` (each address the host resolves to, in turn,
    /// until one binds) and starts serving.
    pub fn start(config: &MockProviderConfig) -> io::Result<MockProvider> {
        let (host, port) = super::parse_listen(&config.listen)
            .map_err(|err| io::Error::new(io::ErrorKind::InvalidInput, err))?;
        let listener = bind(&host, port)?;
        let local = listener.local_addr()?;
        if !local.ip().is_loopback() {
            log::warn!(
                "the offline model provider listens on {local}, beyond loopback; it has no \
                 authentication"
            );
        }
        let advertised =
            crate::supervisor::render::connect_host(&config.advertise_host, local.ip());
        let base_url = super::base_url(&advertised, local.port());
        let stop = Arc::new(Stop::default());
        let shared = Arc::new(Shared {
            fallback: config.scenario,
            tool_command: config.tool_command().to_owned(),
            slow: Duration::from_millis(config.slow_ms),
            max_body_bytes: config.max_body_bytes,
            stop: stop.clone(),
        });
        let limits = ServerLimits {
            // Idle keep-alive connections wait in the front door; requests
            // are served by at most `max_connections` threads.
            max_connections: config.max_connections * 4,
            max_handlers: config.max_connections,
            head_timeout: config.request_timeout.min(Duration::from_secs(10)),
            min_head_rate: 128,
            max_header_bytes: MAX_HEADER_BYTES,
            max_headers: MAX_HEADERS,
            idle_timeout: config.idle_timeout,
            request_timeout: config.request_timeout,
            thread_stack_size: CONNECTION_STACK,
        };
        let handler: Arc<dyn Fn(Request) + Send + Sync> = Arc::new(move |rq| handle(&shared, rq));
        let server =
            tiny_http::Server::serve_with_limits_named(listener, limits, THREADS, handler)?;
        Ok(MockProvider {
            server,
            base_url,
            stop,
        })
    }

    /// `http://<advertised host>:<bound port>`: what workers are given.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Stops accepting and wakes every request in the `slow` wait (each is
    /// answered 503, and the stop waits up to [`ANSWER_DEADLINE`] for
    /// those answers to be written). Requests already past it finish; idle
    /// keep-alive connections end at their idle timeout or when the client
    /// closes. Idempotent.
    pub fn stop(&self) {
        self.stop.set();
        self.stop.drain(ANSWER_DEADLINE);
        self.server.shutdown();
    }
}

impl Drop for MockProvider {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Binds the first address `host` resolves to that accepts the bind.
fn bind(host: &str, port: u16) -> io::Result<TcpListener> {
    let mut last = None;
    for addr in (host, port).to_socket_addrs()? {
        match TcpListener::bind(addr) {
            Ok(listener) => return Ok(listener),
            Err(err) => last = Some(err),
        }
    }
    Err(last.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::AddrNotAvailable,
            format!("{host} resolves to no address"),
        )
    }))
}

/// Serves one request on its connection thread.
fn handle(shared: &Shared, mut rq: Request) {
    let chunked = crate::reply::header(&rq, "Transfer-Encoding").is_some();
    let body;
    let request = if *rq.method() != Method::Post {
        wire::Request::NotPost
    } else if chunked {
        // The chunked decoder buffers a chunk-size line without limit, so
        // such a body is never read (the hub's front door does the same).
        wire::Request::Chunked
    } else {
        match read_body(&mut rq, shared.max_body_bytes) {
            Ok(Some(read)) => {
                body = read;
                wire::Request::Post(&body)
            }
            Ok(None) => wire::Request::TooLarge {
                max: shared.max_body_bytes,
            },
            Err(err) => {
                log::debug!("mock provider: cannot read a request body: {err}");
                return send(rq, wire::failure("the request body could not be read"));
            }
        }
    };
    let completion = Completion {
        id: format!("chatcmpl-mock-{}", uuid::Uuid::new_v4().simple()),
        created: time::now_millis() / 1000,
        model: "mock".to_owned(),
    };
    let script = Script {
        fallback: shared.fallback,
        tool_command: &shared.tool_command,
    };
    let mut reply = wire::reply(script, request, completion);
    // Counted from the wait until the reply is written.
    let _slow = reply.slow.then(|| shared.stop.enter());
    if reply.slow && !shared.stop.wait(shared.slow) {
        reply = wire::stopping();
    }
    if reply.status >= 400 {
        log::debug!("mock provider: answered {}", reply.status);
    }
    send(rq, reply);
}

/// The body, or `None` when it (declared or read) exceeds `max`; never
/// reads more than `max + 1` bytes.
fn read_body(rq: &mut Request, max: usize) -> io::Result<Option<Vec<u8>>> {
    if rq.body_length().is_some_and(|len| len > max) {
        return Ok(None);
    }
    let mut body = Vec::new();
    rq.as_reader().take(max as u64 + 1).read_to_end(&mut body)?;
    Ok((body.len() <= max).then_some(body))
}

/// Writes `reply` with a `Content-Length` (never chunked).
fn send(rq: Request, reply: Reply) {
    let mut response = Response::from_data(reply.body)
        .with_status_code(reply.status)
        .with_chunked_threshold(usize::MAX);
    let headers = [("Content-Type", reply.content_type)]
        .into_iter()
        .chain(reply.headers.iter().copied());
    for (name, value) in headers {
        if let Ok(h) = Header::from_bytes(name.as_bytes(), value.as_bytes()) {
            response.add_header(h);
        }
    }
    if let Err(err) = rq.respond(response) {
        log::debug!("mock provider: cannot write a reply: {err}");
    }
}

/// The stop flag the `slow` waits sleep on, and how many slow requests
/// have not written their reply yet.
#[derive(Default)]
struct Stop {
    state: Mutex<StopState>,
    wake: Condvar,
}

#[derive(Default)]
struct StopState {
    stopped: bool,
    slow: usize,
}

/// A slow request being served; dropped once its reply is written.
struct Slow<'a>(&'a Stop);

impl Drop for Slow<'_> {
    fn drop(&mut self) {
        self.0.lock().slow -= 1;
        self.0.wake.notify_all();
    }
}

impl Stop {
    fn lock(&self) -> std::sync::MutexGuard<'_, StopState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set(&self) {
        self.lock().stopped = true;
        self.wake.notify_all();
    }

    /// Counts a slow request until the guard drops.
    fn enter(&self) -> Slow<'_> {
        self.lock().slow += 1;
        Slow(self)
    }

    /// Sleeps `duration`; false when the provider stopped first.
    fn wait(&self, duration: Duration) -> bool {
        let deadline = Instant::now() + duration;
        let mut state = self.lock();
        loop {
            if state.stopped {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            state = self
                .wake
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Waits until no slow request is left unanswered, or `deadline` has
    /// passed; true when none is.
    fn drain(&self, deadline: Duration) -> bool {
        let until = Instant::now() + deadline;
        let mut state = self.lock();
        while state.slow > 0 {
            let now = Instant::now();
            if now >= until {
                return false;
            }
            state = self
                .wake
                .wait_timeout(state, until - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn a_stop_wakes_a_waiter_at_once() {
        let stop = Arc::new(Stop::default());
        let waiter = stop.clone();
        let (tx, rx) = mpsc::channel();
        let started = Instant::now();
        std::thread::spawn(move || tx.send(waiter.wait(Duration::from_secs(600))).unwrap());
        stop.set();
        let slept = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(!slept);
        assert!(started.elapsed() < Duration::from_secs(10));
        // once stopped, a wait returns at once
        assert!(!stop.wait(Duration::from_secs(600)));
    }

    #[test]
    fn a_stop_waits_for_the_woken_requests_to_answer() {
        let stop = Arc::new(Stop::default());
        let (entered_tx, entered) = mpsc::channel();
        let (answer_tx, answer) = mpsc::channel::<()>();
        let serving = stop.clone();
        let server = std::thread::spawn(move || {
            let slow = serving.enter();
            entered_tx.send(()).unwrap();
            assert!(!serving.wait(Duration::from_secs(600)));
            // The reply is being written: the stop is still waiting.
            answer.recv().unwrap();
            drop(slow);
        });
        entered.recv_timeout(Duration::from_secs(10)).unwrap();
        stop.set();
        assert!(
            !stop.drain(Duration::from_millis(20)),
            "the reply is not written yet"
        );
        answer_tx.send(()).unwrap();
        assert!(stop.drain(Duration::from_secs(10)));
        server.join().unwrap();
        // With nothing in flight a drain returns at once.
        assert!(stop.drain(Duration::ZERO));
    }

    #[test]
    fn a_wait_without_a_stop_lasts_its_duration() {
        let stop = Stop::default();
        let started = Instant::now();
        assert!(stop.wait(Duration::from_millis(30)));
        assert!(started.elapsed() >= Duration::from_millis(30));
        assert!(stop.wait(Duration::ZERO));
    }
}
