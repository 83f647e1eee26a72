use std::io::Result as IoResult;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::Arc;

use crate::connection::Connection;
use crate::limits::ConnControl;

// Fork: the TLS (`Https`) variant was removed together with the ssl features.
pub(crate) enum Stream {
    Http(Connection),
}

impl Clone for Stream {
    fn clone(&self) -> Self {
        match self {
            Stream::Http(tcp_stream) => Stream::Http(tcp_stream.try_clone().unwrap()),
        }
    }
}

impl From<Connection> for Stream {
    fn from(tcp_stream: Connection) -> Self {
        Stream::Http(tcp_stream)
    }
}

impl Stream {
    fn secure(&self) -> bool {
        false
    }

    fn peer_addr(&mut self) -> IoResult<Option<SocketAddr>> {
        match self {
            Stream::Http(tcp_stream) => tcp_stream.peer_addr(),
        }
    }

    fn shutdown(&mut self, how: Shutdown) -> IoResult<()> {
        match self {
            Stream::Http(tcp_stream) => tcp_stream.shutdown(how),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        match self {
            Stream::Http(tcp_stream) => tcp_stream.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> IoResult<usize> {
        match self {
            Stream::Http(tcp_stream) => tcp_stream.write(buf),
        }
    }

    fn flush(&mut self) -> IoResult<()> {
        match self {
            Stream::Http(tcp_stream) => tcp_stream.flush(),
        }
    }
}

pub struct RefinedTcpStream {
    stream: Stream,
    close_read: bool,
    close_write: bool,
    // Fork: set for connections served by `Server::serve_with_limits`. Reads
    // go through it (read timeout / request deadline), and the drop-time
    // shutdown is skipped once the socket was handed over by `upgrade_raw`
    // or goes back to the front door.
    control: Option<Arc<ConnControl>>,
    // Fork: bytes already read from the socket (by the front door), read
    // before the socket itself; `prefix_at` is how many were read.
    prefix: Vec<u8>,
    prefix_at: usize,
}

impl RefinedTcpStream {
    pub(crate) fn new<S>(stream: S) -> (RefinedTcpStream, RefinedTcpStream)
    where
        S: Into<Stream>,
    {
        let stream: Stream = stream.into();

        let (read, write) = (stream.clone(), stream);
        Self::from_halves(read, write, None)
    }

    /// Fork: builds the read and write halves from two already-cloned
    /// sockets (no panicking `try_clone`), both sharing `control`.
    pub(crate) fn from_halves<S>(
        read: S,
        write: S,
        control: Option<Arc<ConnControl>>,
    ) -> (RefinedTcpStream, RefinedTcpStream)
    where
        S: Into<Stream>,
    {
        let read = RefinedTcpStream {
            stream: read.into(),
            close_read: true,
            close_write: false,
            control: control.clone(),
            prefix: Vec::new(),
            prefix_at: 0,
        };

        let write = RefinedTcpStream {
            stream: write.into(),
            close_read: false,
            close_write: true,
            control,
            prefix: Vec::new(),
            prefix_at: 0,
        };

        (read, write)
    }

    /// Fork: `prefix` is read before the socket.
    pub(crate) fn with_prefix(mut self, prefix: Vec<u8>) -> Self {
        self.prefix = prefix;
        self.prefix_at = 0;
        self
    }

    /// Fork: the part of the prefix not read yet.
    pub(crate) fn unread_prefix(&self) -> &[u8] {
        &self.prefix[self.prefix_at..]
    }

    /// Returns true if this struct wraps around a secure connection.
    #[inline]
    pub(crate) fn secure(&self) -> bool {
        self.stream.secure()
    }

    pub(crate) fn peer_addr(&mut self) -> IoResult<Option<SocketAddr>> {
        self.stream.peer_addr()
    }
}

impl Drop for RefinedTcpStream {
    fn drop(&mut self) {
        if let Some(control) = &self.control {
            if control.is_handed_over() {
                // the socket now belongs to the caller of `upgrade_raw`, or
                // goes back to the front door
                return;
            }
        }

        if self.close_read {
            self.stream.shutdown(Shutdown::Read).ok();
        }

        if self.close_write {
            self.stream.shutdown(Shutdown::Write).ok();
        }
    }
}

impl Read for RefinedTcpStream {
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        if self.prefix_at < self.prefix.len() {
            let rest = &self.prefix[self.prefix_at..];
            let n = rest.len().min(buf.len());
            buf[..n].copy_from_slice(&rest[..n]);
            self.prefix_at += n;
            if self.prefix_at == self.prefix.len() {
                self.prefix = Vec::new();
                self.prefix_at = 0;
            }
            return Ok(n);
        }
        match &self.control {
            None => self.stream.read(buf),
            Some(control) => {
                control.before_read()?;
                self.stream.read(buf).map_err(|e| control.map_read_error(e))
            }
        }
    }
}

impl Write for RefinedTcpStream {
    fn write(&mut self, buf: &[u8]) -> IoResult<usize> {
        self.stream.write(buf)
    }

    fn flush(&mut self) -> IoResult<()> {
        self.stream.flush()
    }
}
