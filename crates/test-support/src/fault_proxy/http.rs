//! Just enough HTTP/1.1 request framing to count requests on a stream and answer them.
//!
//! The proxy must count requests, not only connections, because dockerd keeps connections to a
//! registry alive across requests. The tracker follows request heads and skips bodies by
//! `Content-Length` or chunked encoding; a stream that does not look like HTTP stops being tracked
//! rather than being miscounted.

/// The largest request head the tracker accepts before it decides the stream is not HTTP.
const MAX_HEAD: usize = 64 * 1024;

/// A request whose head has been read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// The request line, e.g. `GET /v2/ HTTP/1.1`.
    pub line: String,
    /// The method, e.g. `GET`.
    pub method: String,
    /// The client asked to close the connection after this request.
    pub close: bool,
}

/// What feeding bytes to the tracker produced, in stream order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A request head is complete (its body may still be arriving).
    Head(RequestHead),
    /// The body of the last request is complete: the request can be answered.
    Complete,
}

#[derive(Debug)]
enum State {
    Head,
    Body(u64),
    ChunkSize,
    ChunkData(u64),
    ChunkDataEnd(u8),
    Trailers,
    /// Not HTTP as far as we can tell: stop tracking.
    Lost,
}

/// Incremental request framing over one client→server byte stream.
#[derive(Debug)]
pub struct RequestTracker {
    state: State,
    line: Vec<u8>,
}

impl Default for RequestTracker {
    fn default() -> Self {
        RequestTracker {
            state: State::Head,
            line: Vec::new(),
        }
    }
}

impl RequestTracker {
    /// True once the stream stopped looking like HTTP.
    pub fn lost(&self) -> bool {
        matches!(self.state, State::Lost)
    }

    /// Consumes `data`, returning the heads and completions it contained, in order.
    pub fn feed(&mut self, mut data: &[u8]) -> Vec<Event> {
        let mut events = Vec::new();
        while !data.is_empty() {
            match self.state {
                State::Lost => break,
                State::Head => {
                    let (taken, done) = take_until(&mut self.line, data, b"\r\n\r\n");
                    data = &data[taken..];
                    if done {
                        let head = std::mem::take(&mut self.line);
                        match parse_head(&head) {
                            Some((head, body)) => {
                                events.push(Event::Head(head));
                                self.state = body;
                                if let State::Body(0) = self.state {
                                    self.state = State::Head;
                                    events.push(Event::Complete);
                                }
                            }
                            None => self.state = State::Lost,
                        }
                    } else if self.line.len() > MAX_HEAD {
                        self.state = State::Lost;
                    }
                }
                State::Body(remaining) => {
                    let n = remaining.min(data.len() as u64);
                    data = &data[n as usize..];
                    if remaining == n {
                        self.state = State::Head;
                        events.push(Event::Complete);
                    } else {
                        self.state = State::Body(remaining - n);
                    }
                }
                State::ChunkSize => {
                    let (taken, done) = take_until(&mut self.line, data, b"\r\n");
                    data = &data[taken..];
                    if done {
                        let line = std::mem::take(&mut self.line);
                        let text = String::from_utf8_lossy(&line);
                        let size = text.trim_end().split(';').next().unwrap_or("").trim();
                        self.state = match u64::from_str_radix(size, 16) {
                            Ok(0) => State::Trailers,
                            Ok(n) => State::ChunkData(n),
                            Err(_) => State::Lost,
                        };
                    } else if self.line.len() > MAX_HEAD {
                        self.state = State::Lost;
                    }
                }
                State::ChunkData(remaining) => {
                    let n = remaining.min(data.len() as u64);
                    data = &data[n as usize..];
                    self.state = if remaining == n {
                        State::ChunkDataEnd(2)
                    } else {
                        State::ChunkData(remaining - n)
                    };
                }
                State::ChunkDataEnd(left) => {
                    let n = (left as usize).min(data.len());
                    data = &data[n..];
                    self.state = if left as usize == n {
                        State::ChunkSize
                    } else {
                        State::ChunkDataEnd(left - n as u8)
                    };
                }
                State::Trailers => {
                    let (taken, done) = take_until(&mut self.line, data, b"\r\n");
                    data = &data[taken..];
                    if done {
                        let line = std::mem::take(&mut self.line);
                        if line == b"\r\n" {
                            self.state = State::Head;
                            events.push(Event::Complete);
                        }
                    } else if self.line.len() > MAX_HEAD {
                        self.state = State::Lost;
                    }
                }
            }
        }
        events
    }
}

/// Appends bytes of `data` to `buf` until `buf` ends with `delim`; returns (bytes taken, found).
fn take_until(buf: &mut Vec<u8>, data: &[u8], delim: &[u8]) -> (usize, bool) {
    for (i, byte) in data.iter().enumerate() {
        buf.push(*byte);
        if buf.ends_with(delim) {
            return (i + 1, true);
        }
    }
    (data.len(), false)
}

fn parse_head(head: &[u8]) -> Option<(RequestHead, State)> {
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split("\r\n");
    let line = lines.next()?.to_owned();
    let mut parts = line.split(' ');
    let method = parts.next()?.to_owned();
    let _target = parts.next()?;
    let version = parts.next()?;
    if method.is_empty() || !version.starts_with("HTTP/1.") {
        return None;
    }
    let mut body = State::Body(0);
    let mut close = version == "HTTP/1.0";
    for header in lines.filter(|l| !l.is_empty()) {
        let (name, value) = header.split_once(':')?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            if !matches!(body, State::ChunkSize) {
                body = State::Body(value.parse().ok()?);
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            if value.to_ascii_lowercase().contains("chunked") {
                body = State::ChunkSize;
            }
        } else if name.eq_ignore_ascii_case("connection") {
            close = value.eq_ignore_ascii_case("close");
        }
    }
    Some((
        RequestHead {
            line,
            method,
            close,
        },
        body,
    ))
}

/// The bytes of a canned response to one request.
pub fn canned_response(
    status: u16,
    retry_after: Option<&str>,
    body: &str,
    head_only: bool,
    close: bool,
) -> Vec<u8> {
    let content_type = if body.trim_start().starts_with('{') {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n",
        reason_phrase(status),
        body.len()
    );
    if let Some(retry_after) = retry_after {
        out.push_str(&format!("Retry-After: {retry_after}\r\n"));
    }
    out.push_str(if close {
        "Connection: close\r\n\r\n"
    } else {
        "Connection: keep-alive\r\n\r\n"
    });
    let mut bytes = out.into_bytes();
    if !head_only {
        bytes.extend_from_slice(body.as_bytes());
    }
    bytes
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heads(events: &[Event]) -> Vec<&str> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::Head(h) => Some(h.line.as_str()),
                Event::Complete => None,
            })
            .collect()
    }

    #[test]
    fn counts_pipelined_requests_with_bodies_byte_by_byte() {
        let stream = b"GET /v2/ HTTP/1.1\r\nHost: x\r\n\r\n\
PUT /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello\
PATCH /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: v\r\n\r\n\
HEAD /v2/x/manifests/latest HTTP/1.1\r\n\r\n";
        // Feeding one byte at a time proves the framing never depends on read boundaries.
        let mut tracker = RequestTracker::default();
        let mut events = Vec::new();
        for byte in stream.iter() {
            events.extend(tracker.feed(std::slice::from_ref(byte)));
        }
        assert_eq!(
            heads(&events),
            [
                "GET /v2/ HTTP/1.1",
                "PUT /a HTTP/1.1",
                "PATCH /b HTTP/1.1",
                "HEAD /v2/x/manifests/latest HTTP/1.1"
            ]
        );
        let completes = events.iter().filter(|e| **e == Event::Complete).count();
        assert_eq!(completes, 4);
        assert!(!tracker.lost());
    }

    #[test]
    fn a_body_that_looks_like_a_request_is_not_counted() {
        let mut tracker = RequestTracker::default();
        let body = "GET /fake HTTP/1.1\r\n\r\n";
        let req = format!(
            "POST /x HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        assert_eq!(heads(&tracker.feed(req.as_bytes())), ["POST /x HTTP/1.1"]);
    }

    #[test]
    fn non_http_bytes_stop_tracking() {
        let mut tracker = RequestTracker::default();
        assert!(tracker.feed(b"\x16\x03\x01 hello\r\n\r\n").is_empty());
        assert!(tracker.lost());
        assert!(tracker.feed(b"GET / HTTP/1.1\r\n\r\n").is_empty());
    }

    #[test]
    fn canned_response_carries_retry_after_and_omits_body_for_head() {
        let full = String::from_utf8(canned_response(429, Some("7"), "{}", false, false)).unwrap();
        assert!(full.starts_with("HTTP/1.1 429 Too Many Requests\r\n"));
        assert!(full.contains("Retry-After: 7\r\n"));
        assert!(full.contains("Content-Length: 2\r\n"));
        assert!(full.ends_with("\r\n\r\n{}"));
        let head = String::from_utf8(canned_response(404, None, "gone", true, true)).unwrap();
        assert!(head.ends_with("Connection: close\r\n\r\n"));
        assert!(!head.contains("Retry-After"));
    }
}
