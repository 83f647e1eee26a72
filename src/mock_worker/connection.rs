//! The event connection thread: connects to `client.endpoint`, reconnects
//! forever with exponential backoff, forwards hub frames to the run thread
//! and writes the run thread's events in order.
//!
//! One thread owns the socket. It reads with a short timeout and, between
//! reads, drains the outbound channel, so events go out within about
//! [`READ_POLL`]. It holds only the frames the run thread handed it (at
//! most `client.transport.write_capacity`; the engine's queue holds the
//! rest and applies the queue contract), keeps them in order across
//! reconnects, and reports each written batch back
//! ([`Inbound::Written`]). A frame taken off for writing is never resent,
//! even if its write failed (its delivery is unknown, as with the real
//! worker); it is reported done all the same.
//!
//! Wakes for shutdown on: an [`Outbound::Close`] request (normal close,
//! then the thread ends), or the outbound channel disconnecting.

use std::collections::VecDeque;
use std::io;
use std::net::TcpStream;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use serde_json::Value;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::CloseFrame;
use tungstenite::{Message, WebSocket};

use super::transport::{self, WsUrl};
use super::Inbound;

/// How long one socket read waits before the thread looks at its
/// outbound channel again.
const READ_POLL: Duration = Duration::from_millis(10);
/// TCP connect plus upgrade.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// A connection that lasted this long resets the backoff.
const STABLE_AFTER: Duration = Duration::from_secs(30);
/// How long a normal close waits for the hub's close frame.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// What the run thread asks of the connection thread.
pub(crate) enum Outbound {
    /// One event frame.
    Event(String),
    /// Reply once every earlier event was written (at once when
    /// disconnected: nothing more can be delivered).
    Flush(Sender<()>),
    /// Write what is pending, close normally, end the thread, reply.
    Close(Sender<()>),
}

/// Parses one hub text frame: `{"type":"payload"|"signal","data":...}`.
/// Anything else is a fatal framing error (`Err` names it).
pub(crate) fn parse_frame(text: &str) -> Result<Inbound, String> {
    let value: Value =
        serde_json::from_str(text).map_err(|err| format!("unparseable JSON frame: {err}"))?;
    let data = value
        .get("data")
        .cloned()
        .ok_or_else(|| "frame has no data".to_string())?;
    match value.get("type").and_then(Value::as_str) {
        Some("payload") => Ok(Inbound::Payload(data)),
        Some("signal") => Ok(Inbound::Signal(data)),
        Some(other) => Err(format!("unknown frame type {other:?}")),
        None => Err("frame has no string type".into()),
    }
}

/// Settings of the connection thread.
pub(crate) struct Link {
    pub url: WsUrl,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

/// How one connection ended.
enum Ended {
    /// The socket failed or the hub closed it: reconnect.
    Lost,
    /// A requested close completed: the thread ends.
    Closed,
    /// The hub broke framing: the thread ends without reconnecting.
    Fatal,
}

struct State {
    link: Link,
    outbound: Receiver<Outbound>,
    inbound: Sender<Inbound>,
    pending: VecDeque<String>,
    flushes: Vec<Sender<()>>,
    closing: Option<Sender<()>>,
}

/// Starts the connection thread.
pub(crate) fn spawn(
    link: Link,
    outbound: Receiver<Outbound>,
    inbound: Sender<Inbound>,
) -> io::Result<JoinHandle<()>> {
    let state = State {
        link,
        outbound,
        inbound,
        pending: VecDeque::new(),
        flushes: Vec::new(),
        closing: None,
    };
    thread::Builder::new()
        .name("mock-events".into())
        .spawn(move || state.run())
}

impl State {
    fn run(mut self) {
        let mut backoff = self.link.initial_backoff;
        loop {
            match transport::connect(&self.link.url, CONNECT_TIMEOUT) {
                Ok(ws) => {
                    log::info!("connected to {}", self.link.url.redacted());
                    let started = Instant::now();
                    match self.serve(ws) {
                        Ended::Closed | Ended::Fatal => return,
                        Ended::Lost => log::warn!("event connection lost; reconnecting"),
                    }
                    if started.elapsed() >= STABLE_AFTER {
                        backoff = self.link.initial_backoff;
                    }
                }
                Err(err) => log::warn!(
                    "cannot connect to {}: {err}; retrying in {} ms",
                    self.link.url.redacted(),
                    backoff.as_millis()
                ),
            }
            if let Some(done) = self.closing.take() {
                // Stopping while disconnected: nothing more can be sent.
                let _ = done.send(());
                return;
            }
            let until = Instant::now() + backoff;
            backoff = (backoff * 2).min(self.link.max_backoff);
            if !self.wait_offline(until) {
                return;
            }
        }
    }

    /// Queues events until `until`. False when the thread must end.
    fn wait_offline(&mut self, until: Instant) -> bool {
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            match self.outbound.recv_timeout(left) {
                Ok(Outbound::Event(frame)) => self.queue(frame),
                Ok(Outbound::Flush(done)) => {
                    let _ = done.send(());
                }
                Ok(Outbound::Close(done)) => {
                    let _ = done.send(());
                    return false;
                }
                Err(RecvTimeoutError::Timeout) => return true,
                Err(RecvTimeoutError::Disconnected) => return false,
            }
        }
    }

    /// Keeps a frame until it can be written; the run thread never hands
    /// over more than its window, so nothing is ever dropped here.
    fn queue(&mut self, frame: String) {
        self.pending.push_back(frame);
    }

    /// Tells the run thread that `frames` more frames are done.
    fn report(&self, frames: usize) {
        if frames > 0 {
            let _ = self.inbound.send(Inbound::Written(frames));
        }
    }

    /// Takes everything the run thread has sent so far.
    fn drain(&mut self) {
        loop {
            match self.outbound.try_recv() {
                Ok(Outbound::Event(frame)) => self.queue(frame),
                Ok(Outbound::Flush(done)) => self.flushes.push(done),
                Ok(Outbound::Close(done)) => self.closing = Some(done),
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => {
                    // The run thread is gone: close as if asked to.
                    self.closing
                        .get_or_insert_with(|| crossbeam_channel::bounded(1).0);
                    return;
                }
            }
        }
    }

    fn serve(&mut self, mut ws: WebSocket<TcpStream>) -> Ended {
        if let Err(err) = ws.get_ref().set_read_timeout(Some(READ_POLL)) {
            log::warn!("event socket: {err}");
            return Ended::Lost;
        }
        loop {
            self.drain();
            let mut written = 0;
            while let Some(frame) = self.pending.pop_front() {
                written += 1;
                if let Err(err) = ws.send(Message::text(frame)) {
                    log::warn!("event write failed: {err}");
                    self.report(written);
                    return Ended::Lost;
                }
            }
            self.report(written);
            for done in self.flushes.drain(..) {
                let _ = done.send(());
            }
            if let Some(done) = self.closing.take() {
                close(&mut ws);
                let _ = done.send(());
                return Ended::Closed;
            }
            match ws.read() {
                Ok(Message::Text(text)) => match parse_frame(text.as_str()) {
                    Ok(input) => {
                        if self.inbound.send(input).is_err() {
                            return Ended::Closed;
                        }
                    }
                    Err(reason) => return self.fatal(&mut ws, reason),
                },
                Ok(Message::Binary(_)) => {
                    return self.fatal(&mut ws, "binary application frame".into())
                }
                Ok(Message::Close(frame)) => {
                    // Send the close reply; the handshake is then complete.
                    let _ = ws.flush();
                    log::info!(
                        "the hub closed the event connection ({})",
                        frame.map_or_else(|| "no code".to_string(), |f| f.to_string())
                    );
                    return Ended::Lost;
                }
                Ok(_) => {} // ping and pong: tungstenite answers pings
                Err(tungstenite::Error::Io(err))
                    if matches!(
                        err.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    // Sends any queued pong or close reply.
                    if let Err(err) = ws.flush() {
                        if !matches!(err, tungstenite::Error::Io(ref e) if e.kind() == io::ErrorKind::WouldBlock)
                        {
                            return Ended::Lost;
                        }
                    }
                }
                Err(tungstenite::Error::ConnectionClosed) => {
                    log::info!("the hub closed the event connection");
                    return Ended::Lost;
                }
                Err(err) => {
                    log::warn!("event read failed: {err}");
                    return Ended::Lost;
                }
            }
        }
    }

    fn fatal(&mut self, ws: &mut WebSocket<TcpStream>, reason: String) -> Ended {
        let frame = CloseFrame {
            code: CloseCode::Policy,
            reason: "protocol error".into(),
        };
        let _ = ws.close(Some(frame));
        let _ = ws.flush();
        let _ = self.inbound.send(Inbound::Fatal(reason));
        Ended::Fatal
    }
}

/// A normal close: send the close frame, wait briefly for the hub's.
fn close(ws: &mut WebSocket<TcpStream>) {
    let frame = CloseFrame {
        code: CloseCode::Normal,
        reason: "worker shutdown".into(),
    };
    if ws.close(Some(frame)).is_err() {
        return;
    }
    let deadline = Instant::now() + CLOSE_WAIT;
    while Instant::now() < deadline {
        match ws.read() {
            Ok(Message::Close(_)) => return,
            Ok(_) => {}
            Err(tungstenite::Error::Io(err))
                if matches!(
                    err.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                let _ = ws.flush();
            }
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offline_frames_are_kept_in_order_and_writes_are_reported() {
        let (out_tx, outbound) = crossbeam_channel::unbounded();
        let (inbound, in_rx) = crossbeam_channel::unbounded();
        let mut state = State {
            link: Link {
                url: WsUrl::parse("ws://127.0.0.1:9/x").unwrap(),
                initial_backoff: Duration::from_millis(1),
                max_backoff: Duration::from_millis(2),
            },
            outbound,
            inbound,
            pending: VecDeque::new(),
            flushes: Vec::new(),
            closing: None,
        };
        for frame in ["1", "2", "3", "4"] {
            out_tx.send(Outbound::Event(frame.to_string())).unwrap();
        }
        assert!(state.wait_offline(Instant::now() + Duration::from_millis(20)));
        assert_eq!(state.pending, ["1", "2", "3", "4"]);
        state.report(0);
        state.report(3);
        assert!(matches!(in_rx.try_recv(), Ok(Inbound::Written(3))));
        assert!(in_rx.try_recv().is_err());
    }

    #[test]
    fn frames() {
        match parse_frame(r#"{"type":"payload","data":{"operation":"message"},"extra":1}"#) {
            Ok(Inbound::Payload(data)) => assert_eq!(data["operation"], "message"),
            _ => panic!("payload"),
        }
        match parse_frame(r#"{"type":"signal","data":{"operation":"status"}}"#) {
            Ok(Inbound::Signal(data)) => assert_eq!(data["operation"], "status"),
            _ => panic!("signal"),
        }
        for bad in [
            "not json",
            r#"{"type":"event","data":{}}"#,
            r#"{"type":"payload"}"#,
            r#"{"data":{}}"#,
            r#"[1]"#,
        ] {
            assert!(parse_frame(bad).is_err(), "{bad}");
        }
    }
}
