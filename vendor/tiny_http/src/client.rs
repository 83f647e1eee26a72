use ascii::AsciiString;

use std::io::Error as IoError;
use std::io::Result as IoResult;
use std::io::{BufReader, BufWriter, ErrorKind, Read, Write};

use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;

use crate::common::{HTTPVersion, Header, Method, StatusCode};
use crate::limits::{ConnControl, ServerLimits};
use crate::util::RefinedTcpStream;
use crate::util::{SequentialReader, SequentialReaderBuilder, SequentialWriterBuilder};
use crate::Request;

/// A ClientConnection is an object that will store a socket to a client
/// and return Request objects.
pub struct ClientConnection {
    // address of the client
    remote_addr: IoResult<Option<SocketAddr>>,

    // sequence of Readers to the stream, so that the data is not read in
    //  the wrong order
    source: SequentialReaderBuilder<BufReader<RefinedTcpStream>>,

    // sequence of Writers to the stream, to avoid writing response #2 before
    //  response #1
    sink: SequentialWriterBuilder<BufWriter<RefinedTcpStream>>,

    // Reader to read the next header from
    next_header_source: SequentialReader<BufReader<RefinedTcpStream>>,

    // set to true if we know that the previous request is the last one
    no_more_requests: bool,

    // true if the connection goes through SSL
    secure: bool,

    // Fork: bounds on the request head (request line + header lines)
    max_header_bytes: usize,
    max_headers: usize,

    // Fork: request deadline / upgrade state (`serve_with_limits` only)
    control: Option<Arc<ConnControl>>,
}

/// Error that can happen when reading a request.
#[derive(Debug)]
enum ReadError {
    WrongRequestLine,
    WrongHeader(HTTPVersion),
    /// the client sent an unrecognized `Expect` header
    ExpectationFailed(HTTPVersion),
    /// Fork: the head exceeded `max_header_bytes` or `max_headers`
    HeadersTooLarge,
    /// Fork: a head byte that no well-formed request contains (NUL or
    /// another control character, a bare CR or LF, a non-ASCII byte), more
    /// than one `Host`, or a `Content-Length` that is malformed or
    /// contradicts another: answered `400` and the connection closed,
    /// since where the next request starts is unknown.
    MalformedHead,
    ReadIoError(IoError),
}

impl ClientConnection {
    /// Creates a new `ClientConnection` that takes ownership of the `TcpStream`.
    pub fn new(write_socket: RefinedTcpStream, read_socket: RefinedTcpStream) -> ClientConnection {
        let defaults = ServerLimits::default();
        Self::with_limits(
            write_socket,
            read_socket,
            defaults.max_header_bytes,
            defaults.max_headers,
            None,
        )
    }

    /// Fork: like `new`, with head limits and an optional connection control.
    pub(crate) fn with_limits(
        write_socket: RefinedTcpStream,
        mut read_socket: RefinedTcpStream,
        max_header_bytes: usize,
        max_headers: usize,
        control: Option<Arc<ConnControl>>,
    ) -> ClientConnection {
        let remote_addr = read_socket.peer_addr();
        let secure = read_socket.secure();

        let mut source = SequentialReaderBuilder::new(BufReader::with_capacity(1024, read_socket));
        let first_header = source.next().unwrap();

        ClientConnection {
            source,
            sink: SequentialWriterBuilder::new(BufWriter::with_capacity(1024, write_socket)),
            remote_addr,
            next_header_source: first_header,
            no_more_requests: false,
            secure,
            max_header_bytes,
            max_headers,
            control,
        }
    }

    /// true if the connection is HTTPS
    pub fn secure(&self) -> bool {
        self.secure
    }

    /// Fork: whether another request may follow on this connection (the
    /// last one did not close it).
    pub(crate) fn may_continue(&self) -> bool {
        !self.no_more_requests
    }

    /// Fork: the bytes read from the socket but not consumed yet (the start
    /// of the next request), copied; `None` while the last request's body
    /// reader is still alive somewhere.
    pub(crate) fn take_unread(&mut self) -> Option<Vec<u8>> {
        let reader = self.next_header_source.try_inner()?;
        let mut rest = reader.buffer().to_vec();
        rest.extend_from_slice(reader.get_ref().unread_prefix());
        Some(rest)
    }

    /// Reads the next line from self.next_header_source.
    ///
    /// Reads until `CRLF` is reached. The next read will start
    ///  at the first byte of the new line.
    ///
    /// Fork: each byte (CRLF included) is taken from `head_budget`; the read
    /// stops with `HeadersTooLarge` as soon as the budget is exceeded, so at
    /// most `max_header_bytes + 1` bytes of head are ever buffered. With
    /// `request_line`, the request deadline starts at the first byte.
    fn read_next_line(
        &mut self,
        head_budget: &mut usize,
        request_line: bool,
    ) -> Result<AsciiString, ReadError> {
        let mut buf = Vec::new();
        let mut prev_byte_was_cr = false;

        loop {
            let byte = self.next_header_source.by_ref().bytes().next();

            let byte = match byte {
                Some(b) => b.map_err(ReadError::ReadIoError)?,
                None => {
                    return Err(ReadError::ReadIoError(IoError::new(
                        ErrorKind::ConnectionAborted,
                        "Unexpected EOF",
                    )))
                }
            };

            if request_line && buf.is_empty() {
                if let Some(control) = &self.control {
                    control.start_request();
                }
            }

            if *head_budget == 0 {
                return Err(ReadError::HeadersTooLarge);
            }
            *head_budget -= 1;

            if byte == b'\n' && prev_byte_was_cr {
                buf.pop(); // removing the '\r'
                return AsciiString::from_ascii(buf).map_err(|_| ReadError::MalformedHead);
            }

            // Fork: a bare CR or LF, NUL and the other control characters
            // (tab aside) never occur in a valid head; refusing them keeps a
            // header from smuggling a line break or a NUL to the handler.
            let control = (byte < 0x20 && byte != b'\t') || byte == 0x7f;
            if prev_byte_was_cr || (control && byte != b'\r') {
                return Err(ReadError::MalformedHead);
            }

            prev_byte_was_cr = byte == b'\r';

            buf.push(byte);
        }
    }

    /// Reads a request from the stream.
    /// Blocks until the header has been read.
    fn read(&mut self) -> Result<Request, ReadError> {
        // Fork: waiting for the next request is bounded by the idle timeout
        // only; the request deadline starts with its first byte.
        if let Some(control) = &self.control {
            control.end_request();
        }
        let mut head_budget = self.max_header_bytes;

        let (method, path, version, headers) = {
            // reading the request line
            let (method, path, version) = {
                let line = self.read_next_line(&mut head_budget, true)?;

                parse_request_line(
                    line.as_str().trim(), // TODO: remove this conversion
                )?
            };

            // getting all headers
            let headers = {
                let mut headers = Vec::new();
                loop {
                    let line = self.read_next_line(&mut head_budget, false)?;

                    if line.is_empty() {
                        break;
                    };
                    if headers.len() >= self.max_headers {
                        return Err(ReadError::HeadersTooLarge);
                    }
                    headers.push(match FromStr::from_str(line.as_str().trim()) {
                        // TODO: remove this conversion
                        Ok(h) => h,
                        _ => return Err(ReadError::WrongHeader(version)),
                    });
                }

                if !framing_headers_ok(&headers) {
                    return Err(ReadError::MalformedHead);
                }
                headers
            };

            (method, path, version, headers)
        };

        // building the writer for the request
        let writer = self.sink.next().unwrap();

        // follow-up for next potential request
        let mut data_source = self.source.next().unwrap();
        std::mem::swap(&mut self.next_header_source, &mut data_source);

        // building the next reader
        let request = crate::request::new_request(
            self.secure,
            method,
            path,
            version.clone(),
            headers,
            *self.remote_addr.as_ref().unwrap(),
            data_source,
            writer,
        )
        .map(|rq| match &self.control {
            Some(control) => rq.with_control(control.clone()),
            None => rq,
        })
        .map_err(|e| {
            use crate::request;
            match e {
                request::RequestCreationError::CreationIoError(e) => ReadError::ReadIoError(e),
                request::RequestCreationError::ExpectationFailed => {
                    ReadError::ExpectationFailed(version)
                }
            }
        })?;

        // return the request
        Ok(request)
    }
}

impl Iterator for ClientConnection {
    type Item = Request;

    /// Blocks until the next Request is available.
    /// Returns None when no new Requests will come from the client.
    fn next(&mut self) -> Option<Request> {
        use crate::Response;

        // the client sent a "connection: close" header in this previous request
        //  or is using HTTP 1.0, meaning that no new request will come
        if self.no_more_requests {
            return None;
        }

        // Fork: the socket was upgraded (`upgrade_raw`) or a read of the
        // previous request timed out: the stream position is unknown, close.
        if let Some(control) = &self.control {
            if control.must_stop() {
                return None;
            }
        }

        loop {
            let rq = match self.read() {
                Err(ReadError::WrongRequestLine) => {
                    let writer = self.sink.next().unwrap();
                    let response = Response::new_empty(StatusCode(400));
                    response
                        .raw_print(writer, HTTPVersion(1, 1), &[], false, None)
                        .ok();
                    return None; // we don't know where the next request would start,
                                 // se we have to close
                }

                Err(ReadError::WrongHeader(ver)) => {
                    let writer = self.sink.next().unwrap();
                    let response = Response::new_empty(StatusCode(400));
                    response.raw_print(writer, ver, &[], false, None).ok();
                    return None; // we don't know where the next request would start,
                                 // se we have to close
                }

                Err(ReadError::ReadIoError(ref err)) if err.kind() == ErrorKind::TimedOut => {
                    // Fork: an idle keep-alive connection that times out
                    // before sending anything is closed silently.
                    let started = self.control.as_ref().map_or(true, |c| c.request_started());
                    if started {
                        // request timeout
                        let writer = self.sink.next().unwrap();
                        write_closing_response(writer, StatusCode(408)).ok();
                    }
                    return None; // closing the connection
                }

                Err(ReadError::HeadersTooLarge) => {
                    // Fork: stop reading the head and close the connection
                    let writer = self.sink.next().unwrap();
                    write_closing_response(writer, StatusCode(431)).ok();
                    return None;
                }

                Err(ReadError::MalformedHead) => {
                    // Fork: the stream position is unknown; answer and close
                    let writer = self.sink.next().unwrap();
                    write_closing_response(writer, StatusCode(400)).ok();
                    return None;
                }

                Err(ReadError::ExpectationFailed(ver)) => {
                    let writer = self.sink.next().unwrap();
                    let response = Response::new_empty(StatusCode(417));
                    response.raw_print(writer, ver, &[], true, None).ok();
                    return None; // TODO: should be recoverable, but needs handling in case of body
                }

                Err(ReadError::ReadIoError(_)) => return None,

                Ok(rq) => rq,
            };

            // checking HTTP version
            if *rq.http_version() > (1, 1) {
                let writer = self.sink.next().unwrap();
                let response = Response::from_string(
                    "This server only supports HTTP versions 1.0 and 1.1".to_owned(),
                )
                .with_status_code(StatusCode(505));
                response
                    .raw_print(writer, HTTPVersion(1, 1), &[], false, None)
                    .ok();
                // Fork: close rather than wait for another request on this
                // thread (the front door waits for heads).
                return None;
            }

            // updating the status of the connection
            let connection_header = rq
                .headers()
                .iter()
                .find(|h| h.field.equiv("Connection"))
                .map(|h| h.value.as_str());

            let lowercase = connection_header.map(|h| h.to_ascii_lowercase());

            match lowercase {
                Some(ref val) if val.contains("close") => self.no_more_requests = true,
                Some(ref val) if val.contains("upgrade") => self.no_more_requests = true,
                Some(ref val)
                    if !val.contains("keep-alive") && *rq.http_version() == HTTPVersion(1, 0) =>
                {
                    self.no_more_requests = true
                }
                None if *rq.http_version() == HTTPVersion(1, 0) => self.no_more_requests = true,
                _ => (),
            };

            // returning the request
            return Some(rq);
        }
    }
}

/// Fork: at most one `Host` (RFC 9112 §3.2), and every `Content-Length`
/// made of digits only and all of them equal (RFC 9112 §6.3): anything else
/// lets a proxy in front and this server disagree about which host is meant
/// or where the body ends.
fn framing_headers_ok(headers: &[Header]) -> bool {
    let hosts = headers.iter().filter(|h| h.field.equiv("Host")).count();
    let mut length: Option<u64> = None;
    for h in headers.iter().filter(|h| h.field.equiv("Content-Length")) {
        let value = h.value.as_str().trim();
        if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
            return false;
        }
        let Ok(parsed) = value.parse::<u64>() else {
            return false;
        };
        if length.is_some_and(|seen| seen != parsed) {
            return false;
        }
        length = Some(parsed);
    }
    hosts <= 1
}

/// Fork: a body-less error response announcing that the connection closes
/// (`Response` filters out a `Connection` header, so it is written directly).
fn write_closing_response<W: Write>(mut writer: W, status: StatusCode) -> IoResult<()> {
    write!(
        writer,
        "HTTP/1.1 {} {}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
        status.0,
        status.default_reason_phrase()
    )?;
    writer.flush()
}

/// Parses a "HTTP/1.1" string.
fn parse_http_version(version: &str) -> Result<HTTPVersion, ReadError> {
    let (major, minor) = match version {
        "HTTP/0.9" => (0, 9),
        "HTTP/1.0" => (1, 0),
        "HTTP/1.1" => (1, 1),
        "HTTP/2.0" => (2, 0),
        "HTTP/3.0" => (3, 0),
        _ => return Err(ReadError::WrongRequestLine),
    };

    Ok(HTTPVersion(major, minor))
}

/// Parses the request line of the request.
/// eg. GET / HTTP/1.1
fn parse_request_line(line: &str) -> Result<(Method, String, HTTPVersion), ReadError> {
    let mut parts = line.split(' ');

    let method = parts.next().and_then(|w| w.parse().ok());
    let path = parts.next().map(ToOwned::to_owned);
    let version = parts.next().and_then(|w| parse_http_version(w).ok());

    method
        .and_then(|method| Some((method, path?, version?)))
        .ok_or(ReadError::WrongRequestLine)
}

#[cfg(test)]
mod test {
    #[test]
    fn test_parse_request_line() {
        let (method, path, ver) = super::parse_request_line("GET /hello HTTP/1.1").unwrap();

        assert!(method == crate::Method::Get);
        assert!(path == "/hello");
        assert!(ver == crate::common::HTTPVersion(1, 1));

        assert!(super::parse_request_line("GET /hello").is_err());
        assert!(super::parse_request_line("qsd qsd qsd").is_err());
    }
}
