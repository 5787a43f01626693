//! The node's own HTTP-01 responder: answers `/.well-known/acme-challenge/TOKEN` with the key
//! authorization of a challenge in progress, and 404 for anything else — or, when asked
//! ([`crate::redirect`]), a 308 to https for a configured name.
//!
//! It listens on a public address (port 80 by default), so every peer on the internet can reach
//! it: [`ResponderLimits`] bounds the connections in all and per source (an IPv4 address or an
//! IPv6 /64, holdfast-source's `Source`), the time to send
//! a request's header and the time a connection may stay silent, and [`Http01Responder::stop`]
//! ends every connection still open.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use holdfast_source::Source;

use crate::redirect::{OtherAnswer, OtherRequests};

const PREFIX: &str = "/.well-known/acme-challenge/";

/// Default of [`ResponderLimits::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// Default of [`ResponderLimits::max_connections_per_address`].
pub const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS: usize = 16;
/// Default of [`ResponderLimits::header_timeout`] (nginx's `client_header_timeout` is 60 s; an
/// ACME validator sends its whole request at once).
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of [`ResponderLimits::idle_timeout`].
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// The most a connection's read buffer holds (hyper's smallest allowed): a request head larger
/// than this is refused, so a peer cannot make the node hold more per connection.
pub const MAX_REQUEST_HEAD_BYTES: usize = 8192;

/// Limits of the HTTP-01 responder, which any peer on the network can reach
/// (`[issuance.acme.http01_limits]`; durations written `"10s"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "RawLimits")]
pub struct ResponderLimits {
    /// Connections open at once from all peers; one more is closed as soon as it is accepted
    /// (default [`DEFAULT_MAX_CONNECTIONS`]).
    pub max_connections: usize,
    /// Connections open at once from one source (an IPv4 address, an IPv4-mapped IPv6 address
    /// counting as its IPv4 address, or an IPv6 /64); one more from that source is closed as soon
    /// as it is accepted (default [`DEFAULT_MAX_CONNECTIONS_PER_ADDRESS`]).
    pub max_connections_per_address: usize,
    /// Time a peer has to send a request's whole header, from the connection's start or from the
    /// end of the previous response (default [`DEFAULT_HEADER_TIMEOUT`]).
    pub header_timeout: Duration,
    /// Time a connection may pass with nothing read or written before it is closed (default
    /// [`DEFAULT_IDLE_TIMEOUT`]).
    pub idle_timeout: Duration,
}

/// [`ResponderLimits`] as written (durations as text, missing keys defaulted), before
/// [`ResponderLimits::validate`].
#[derive(serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct RawLimits {
    max_connections: usize,
    max_connections_per_address: usize,
    #[serde(deserialize_with = "duration_text")]
    header_timeout: Duration,
    #[serde(deserialize_with = "duration_text")]
    idle_timeout: Duration,
}

impl Default for RawLimits {
    fn default() -> Self {
        let d = ResponderLimits::default();
        Self {
            max_connections: d.max_connections,
            max_connections_per_address: d.max_connections_per_address,
            header_timeout: d.header_timeout,
            idle_timeout: d.idle_timeout,
        }
    }
}

impl TryFrom<RawLimits> for ResponderLimits {
    type Error = ResponderLimitsError;

    fn try_from(raw: RawLimits) -> Result<Self, Self::Error> {
        ResponderLimits {
            max_connections: raw.max_connections,
            max_connections_per_address: raw.max_connections_per_address,
            header_timeout: raw.header_timeout,
            idle_timeout: raw.idle_timeout,
        }
        .validate()
    }
}

impl Default for ResponderLimits {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_address: DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }
}

/// A duration written as text (`"10s"`), for both listeners' limits.
pub(crate) fn duration_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = <String as serde::Deserialize>::deserialize(d)?;
    holdfast_retry::duration_text::parse(&text).map_err(serde::de::Error::custom)
}

/// A [`ResponderLimits`] setting that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}: must be more than zero")]
pub struct ResponderLimitsError(pub &'static str);

impl ResponderLimits {
    /// Every limit must be more than zero (a zero cap or timeout would refuse every validator);
    /// the error names the setting.
    pub fn validate(self) -> Result<Self, ResponderLimitsError> {
        if self.max_connections == 0 {
            return Err(ResponderLimitsError("max_connections"));
        }
        if self.max_connections_per_address == 0 {
            return Err(ResponderLimitsError("max_connections_per_address"));
        }
        if self.header_timeout.is_zero() {
            return Err(ResponderLimitsError("header_timeout"));
        }
        if self.idle_timeout.is_zero() {
            return Err(ResponderLimitsError("idle_timeout"));
        }
        Ok(self)
    }
}

/// What the responder has turned away or cut off, since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResponderStats {
    /// Connections open now.
    pub open: usize,
    /// Connections closed at accept because [`ResponderLimits::max_connections`] were open.
    pub refused_over_total: u64,
    /// Connections closed at accept because their source had
    /// [`ResponderLimits::max_connections_per_address`] open.
    pub refused_over_address: u64,
    /// Connections closed because their request header did not arrive in time.
    pub header_timeouts: u64,
    /// Connections closed because nothing was read or written for the idle timeout.
    pub idle_timeouts: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) refused_over_total: AtomicU64,
    pub(crate) refused_over_address: AtomicU64,
    pub(crate) header_timeouts: AtomicU64,
    pub(crate) idle_timeouts: AtomicU64,
}

/// The connections open now, in all and per source.
#[derive(Debug, Default)]
struct Open {
    total: usize,
    /// Keyed on holdfast-source's [`Source`] (`r[source.key]`): one host holding a /64 is one
    /// source, not 2^64.
    per_source: HashMap<Source, usize>,
}

#[derive(Debug, Default)]
pub(crate) struct Shared {
    pub(crate) counters: Counters,
    open: Mutex<Open>,
}

/// One admitted connection's place under the caps, given back when the connection ends however
/// it ends (served, timed out, errored or aborted by a stop).
pub(crate) struct Slot {
    pub(crate) shared: Arc<Shared>,
    source: Source,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self
            .shared
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.per_source.get_mut(&self.source) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.per_source.remove(&self.source);
            }
        }
    }
}

impl Shared {
    /// Connections holding a place now.
    pub(crate) fn open(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .total
    }

    /// A place for a connection from `ip` (counted under its [`Source`]), or `None` (counted)
    /// when a cap is reached.
    // r[impl issue.responder.limits+2]
    pub(crate) fn admit(
        self: &Arc<Self>,
        ip: IpAddr,
        max_connections: usize,
        max_connections_per_address: usize,
    ) -> Option<Slot> {
        let source = Source::of(ip);
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if open.total >= max_connections {
            self.counters
                .refused_over_total
                .fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let from_source = open.per_source.entry(source).or_insert(0);
        if *from_source >= max_connections_per_address {
            self.counters
                .refused_over_address
                .fetch_add(1, Ordering::Relaxed);
            return None;
        }
        *from_source += 1;
        open.total += 1;
        Some(Slot {
            shared: self.clone(),
            source,
        })
    }
}

/// Tokens being answered, shared with the ACME source.
#[derive(Debug, Clone, Default)]
pub struct Challenges(Arc<Mutex<HashMap<String, String>>>);

impl Challenges {
    /// Answers `token` with `key_authorization` until removed.
    pub fn insert(&self, token: &str, key_authorization: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(token.to_owned(), key_authorization.to_owned());
    }
    /// Stops answering `token`.
    pub fn remove(&self, token: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(token);
    }
    pub(crate) fn get(&self, token: &str) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(token)
            .cloned()
    }
}

/// A running responder; stops, with every connection it holds, when dropped or
/// [`Http01Responder::stop`]ped.
#[derive(Debug)]
pub struct Http01Responder {
    addr: SocketAddr,
    challenges: Challenges,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Http01Responder {
    /// Binds `addr` and starts answering, under the default [`ResponderLimits`].
    pub async fn bind(addr: SocketAddr) -> io::Result<Self> {
        Self::bind_with(addr, ResponderLimits::default()).await
    }

    /// Binds `addr` and starts answering under `limits`.
    pub async fn bind_with(addr: SocketAddr, limits: ResponderLimits) -> io::Result<Self> {
        Self::bind_serving(addr, limits, OtherRequests::NotFound).await
    }

    /// Binds `addr` and starts answering under `limits`, answering requests that are not
    /// challenges as `other` says (404, or a redirect to https).
    // r[impl issue.acme.http01]
    // r[impl issue.responder.redirect]
    pub async fn bind_serving(
        addr: SocketAddr,
        limits: ResponderLimits,
        other: OtherRequests,
    ) -> io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let challenges = Challenges::default();
        let shared = Arc::new(Shared::default());
        let task = tokio::spawn(accept_loop(
            listener,
            challenges.clone(),
            limits,
            shared.clone(),
            other,
        ));
        Ok(Self {
            addr,
            challenges,
            shared,
            task,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The tokens it answers.
    pub fn challenges(&self) -> &Challenges {
        &self.challenges
    }

    /// The connections open now and those refused or cut off so far.
    pub fn stats(&self) -> ResponderStats {
        let c = &self.shared.counters;
        ResponderStats {
            open: self
                .shared
                .open
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .total,
            refused_over_total: c.refused_over_total.load(Ordering::Relaxed),
            refused_over_address: c.refused_over_address.load(Ordering::Relaxed),
            header_timeouts: c.header_timeouts.load(Ordering::Relaxed),
            idle_timeouts: c.idle_timeouts.load(Ordering::Relaxed),
        }
    }

    /// Stops listening and ends every connection still open.
    // r[impl issue.responder.stop]
    pub fn stop(&self) {
        // The accept loop owns the connections' JoinSet: aborting it drops the set, which aborts
        // every connection task and so closes its socket.
        self.task.abort();
    }
}

impl Drop for Http01Responder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    challenges: Challenges,
    limits: ResponderLimits,
    shared: Arc<Shared>,
    other: OtherRequests,
) {
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            // Reap finished connections so the set does not grow.
            _ = connections.join_next(), if !connections.is_empty() => continue,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            // One failed accept (EMFILE, a connection reset before accept) is transient:
            // report, pause briefly, go on. The listener itself does not fail.
            Err(err) => {
                tracing::warn!(%err, "http-01 responder: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(slot) = shared.admit(
            peer.ip(),
            limits.max_connections,
            limits.max_connections_per_address,
        ) else {
            // Dropping the stream closes it at once; the refusal is counted in `admit`.
            tracing::debug!(%peer, "http-01 responder: connection cap reached; closed");
            continue;
        };
        connections.spawn(serve(
            stream,
            slot,
            challenges.clone(),
            limits,
            other.clone(),
        ));
    }
}

/// Serves one connection until it ends, its header is late or it stays silent too long.
// r[impl issue.responder.limits+2]
async fn serve(
    stream: TcpStream,
    slot: Slot,
    challenges: Challenges,
    limits: ResponderLimits,
    other: OtherRequests,
) {
    let activity = Activity::new();
    let io = Watched {
        inner: stream,
        activity: activity.clone(),
    };
    let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let response = respond(&req, &challenges, &other);
        async move { Ok::<_, Infallible>(response) }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        // One request a connection, as validators make: a peer cannot keep its place by asking
        // again before each timeout.
        .keep_alive(false)
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(MAX_REQUEST_HEAD_BYTES)
        .serve_connection(TokioIo::new(io), service);
    let counters = &slot.shared.counters;
    tokio::select! {
        served = connection => {
            // One connection's error ends only that connection.
            if let Err(err) = served {
                if err.is_timeout() {
                    counters.header_timeouts.fetch_add(1, Ordering::Relaxed);
                }
                tracing::debug!(%err, "http-01 responder: connection ended");
            }
        }
        () = activity.silent_for(limits.idle_timeout) => {
            // Dropping the connection closes the socket.
            counters.idle_timeouts.fetch_add(1, Ordering::Relaxed);
            tracing::debug!("http-01 responder: idle connection closed");
        }
    }
    drop(slot);
}

/// The answer to one request: a challenge's key authorization, 404 for an unknown token, and
/// for anything else what `other` says.
// r[impl issue.acme.http01]
// r[impl issue.responder.redirect]
fn respond<B>(
    req: &hyper::Request<B>,
    challenges: &Challenges,
    other: &OtherRequests,
) -> hyper::Response<Full<Bytes>> {
    let status = |code: hyper::StatusCode| {
        let mut r = hyper::Response::new(Full::new(Bytes::new()));
        *r.status_mut() = code;
        r
    };
    if let Some(token) = req.uri().path().strip_prefix(PREFIX) {
        return match challenges.get(token) {
            Some(body) => hyper::Response::new(Full::new(Bytes::from(body))),
            None => status(hyper::StatusCode::NOT_FOUND),
        };
    }
    let host = req.headers().get(hyper::header::HOST).map(|h| h.as_bytes());
    match crate::redirect::answer(other, host, req.uri()) {
        OtherAnswer::NotFound => status(hyper::StatusCode::NOT_FOUND),
        OtherAnswer::BadRequest => status(hyper::StatusCode::BAD_REQUEST),
        OtherAnswer::Redirect(location) => match hyper::header::HeaderValue::from_str(&location) {
            Ok(location) => {
                let mut r = status(hyper::StatusCode::PERMANENT_REDIRECT);
                r.headers_mut().insert(hyper::header::LOCATION, location);
                r
            }
            Err(_) => status(hyper::StatusCode::BAD_REQUEST),
        },
    }
}

/// When a connection last read or wrote a byte.
#[derive(Debug, Clone)]
struct Activity {
    since: Instant,
    /// Nanoseconds from `since` to the latest read or write.
    last: Arc<AtomicU64>,
}

impl Activity {
    fn new() -> Self {
        Self {
            since: Instant::now(),
            last: Arc::new(AtomicU64::new(0)),
        }
    }

    fn touch(&self) {
        let nanos = u64::try_from(self.since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last.fetch_max(nanos, Ordering::Relaxed);
    }

    /// Resolves once nothing has been read or written for `idle`.
    async fn silent_for(&self, idle: Duration) {
        loop {
            let last = self.since + Duration::from_nanos(self.last.load(Ordering::Relaxed));
            let deadline = last + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// A stream that records its reads and writes in an [`Activity`].
struct Watched<S> {
    inner: S,
    activity: Activity,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    /// A connection to `to` from the loopback address `from` (all of 127/8 is local on Linux).
    async fn connect_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::from((from, 0))).unwrap();
        socket.connect(to).await.unwrap()
    }

    /// Whether the peer closed `s` (end of stream or a reset), reading and discarding anything
    /// it sent first (a 408, say).
    async fn closed(s: &mut TcpStream) -> bool {
        let mut buf = [0u8; 512];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(_) => {}
            }
        }
    }

    /// Waits (real time, bounded) until the responder counts `n` open connections.
    async fn until_open(r: &Http01Responder, n: usize) {
        tokio::time::timeout(Duration::from_secs(10), async {
            while r.stats().open != n {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("never {n} open: {:?}", r.stats()));
    }

    fn limits(total: usize, per_address: usize) -> ResponderLimits {
        ResponderLimits {
            max_connections: total,
            max_connections_per_address: per_address,
            ..ResponderLimits::default()
        }
    }

    // r[verify issue.acme.http01]
    #[tokio::test]
    async fn answers_known_tokens_only() {
        let r = Http01Responder::bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        r.challenges().insert("tok", "tok.thumb");
        let ok = get(r.addr(), "/.well-known/acme-challenge/tok").await;
        assert!(
            ok.starts_with("HTTP/1.1 200") && ok.ends_with("tok.thumb"),
            "{ok}"
        );
        let missing = get(r.addr(), "/.well-known/acme-challenge/other").await;
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
        r.challenges().remove("tok");
        let gone = get(r.addr(), "/.well-known/acme-challenge/tok").await;
        assert!(gone.starts_with("HTTP/1.1 404"), "{gone}");
    }

    // r[verify issue.responder.limits+2]
    #[tokio::test(start_paused = true)]
    async fn a_half_request_line_is_closed_at_the_header_timeout() {
        let r = Http01Responder::bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let mut s = TcpStream::connect(r.addr()).await.unwrap();
        s.write_all(b"GET /.well-known/acme-chall").await.unwrap();
        let start = Instant::now();
        let early = DEFAULT_HEADER_TIMEOUT - Duration::from_secs(1);
        assert!(
            tokio::time::timeout(early, closed(&mut s)).await.is_err(),
            "closed before the header timeout"
        );
        let cut = tokio::time::timeout(Duration::from_secs(60), closed(&mut s)).await;
        assert_eq!(cut, Ok(true), "still open a minute later");
        assert!(
            start.elapsed() >= DEFAULT_HEADER_TIMEOUT,
            "{:?}",
            start.elapsed()
        );
        until_open(&r, 0).await;
        assert_eq!(r.stats().header_timeouts, 1, "{:?}", r.stats());
    }

    // r[verify issue.responder.limits+2]
    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_is_closed_at_the_idle_timeout() {
        let idle = Duration::from_secs(5);
        let r = Http01Responder::bind_with(
            "127.0.0.1:0".parse().unwrap(),
            ResponderLimits {
                header_timeout: Duration::from_secs(600),
                idle_timeout: idle,
                ..ResponderLimits::default()
            },
        )
        .await
        .unwrap();
        let mut s = TcpStream::connect(r.addr()).await.unwrap();
        let opened = Instant::now();
        assert!(
            tokio::time::timeout(idle - Duration::from_secs(1), closed(&mut s))
                .await
                .is_err(),
            "closed before the idle timeout"
        );
        let cut = tokio::time::timeout(Duration::from_secs(60), closed(&mut s)).await;
        assert_eq!(cut, Ok(true), "still open a minute later");
        assert!(opened.elapsed() >= idle, "{:?}", opened.elapsed());
        until_open(&r, 0).await;
        assert_eq!(r.stats().idle_timeouts, 1, "{:?}", r.stats());
    }

    // r[verify issue.responder.limits+2]
    #[tokio::test(start_paused = true)]
    async fn a_connection_is_closed_after_its_one_answer() {
        let r = Http01Responder::bind_with(
            "127.0.0.1:0".parse().unwrap(),
            ResponderLimits {
                header_timeout: Duration::from_secs(600),
                idle_timeout: Duration::from_secs(600),
                ..ResponderLimits::default()
            },
        )
        .await
        .unwrap();
        let mut s = TcpStream::connect(r.addr()).await.unwrap();
        s.write_all(b"GET /x HTTP/1.1\r\nHost: a.example\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut answer)).await;
        assert!(
            matches!(read, Ok(Ok(_))),
            "the connection stayed open after its answer: {read:?}"
        );
        assert!(answer.starts_with(b"HTTP/1.1 404"), "{answer:?}");
        until_open(&r, 0).await;
    }

    // A request head past hyper's buffer bound is answered 431 and its connection closed; the
    // next connection is served.
    // r[verify issue.responder.limits+2]
    #[tokio::test]
    async fn a_request_head_past_its_bound_is_refused_and_closed_and_the_next_is_served() {
        let r = Http01Responder::bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let mut s = TcpStream::connect(r.addr()).await.unwrap();
        let long = "a".repeat(MAX_REQUEST_HEAD_BYTES + 1024);
        let head = format!("GET /x HTTP/1.1\r\nHost: a.example\r\nX-Long: {long}\r\n\r\n");
        // The node may close before it has read it all: a failed write is a close too.
        let _ = s.write_all(head.as_bytes()).await;
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut answer)).await;
        assert!(read.is_ok(), "still open after an oversized head");
        assert!(
            answer.starts_with(b"HTTP/1.1 431"),
            "{:?}",
            String::from_utf8_lossy(&answer)
        );
        let mut next = TcpStream::connect(r.addr()).await.unwrap();
        next.write_all(b"GET /x HTTP/1.1\r\nHost: a.example\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        let read =
            tokio::time::timeout(Duration::from_secs(5), next.read_to_end(&mut answer)).await;
        assert!(matches!(read, Ok(Ok(_))), "{read:?}");
        assert!(answer.starts_with(b"HTTP/1.1 404"), "{answer:?}");
    }

    // r[verify issue.responder.limits+2]
    #[tokio::test]
    async fn past_the_per_address_cap_a_connection_is_closed_and_other_addresses_are_served() {
        let r = Http01Responder::bind_with("127.0.0.1:0".parse().unwrap(), limits(256, 2))
            .await
            .unwrap();
        r.challenges().insert("tok", "tok.thumb");
        let mut held = Vec::new();
        for _ in 0..2 {
            held.push(connect_from([127, 0, 0, 3], r.addr()).await);
        }
        until_open(&r, 2).await;
        let mut third = connect_from([127, 0, 0, 3], r.addr()).await;
        let refused = tokio::time::timeout(Duration::from_secs(5), closed(&mut third)).await;
        assert_eq!(refused, Ok(true), "the connection past the cap stayed open");
        assert_eq!(r.stats().refused_over_address, 1, "{:?}", r.stats());

        // Another source is served while 127.0.0.3 is at its cap.
        let mut other = connect_from([127, 0, 0, 2], r.addr()).await;
        other
            .write_all(b"GET /.well-known/acme-challenge/tok HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        other.read_to_string(&mut answer).await.unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 200") && answer.ends_with("tok.thumb"),
            "{answer}"
        );
        // The held ones are untouched.
        for s in &mut held {
            assert!(
                tokio::time::timeout(Duration::from_millis(50), closed(s))
                    .await
                    .is_err()
            );
        }
        // A held one closing frees its place.
        held.pop();
        until_open(&r, 1).await;
        let mut again = connect_from([127, 0, 0, 3], r.addr()).await;
        assert!(
            tokio::time::timeout(Duration::from_millis(200), closed(&mut again))
                .await
                .is_err(),
            "a connection under the cap was closed"
        );
    }

    // r[verify issue.responder.limits+2]
    #[test]
    fn the_addresses_of_one_ipv6_64_share_one_per_source_cap() {
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        let shared = Arc::new(Shared::default());
        let a = shared.admit(ip("2001:db8:1:2::1"), 256, 2).unwrap();
        let _b = shared.admit(ip("2001:db8:1:2:ffff::9"), 256, 2).unwrap();
        // A third interface identifier in the same /64 is the same source, at its cap.
        assert!(
            shared.admit(ip("2001:db8:1:2::3"), 256, 2).is_none(),
            "a third address of the /64 got past the per-source cap"
        );
        assert_eq!(
            shared.counters.refused_over_address.load(Ordering::Relaxed),
            1
        );
        // The next /64 is another source.
        let _c = shared.admit(ip("2001:db8:1:3::1"), 256, 2).unwrap();
        // An IPv4 peer counts as one source whether seen mapped or not.
        let _d = shared.admit(ip("::ffff:192.0.2.7"), 256, 2).unwrap();
        let _e = shared.admit(ip("192.0.2.7"), 256, 2).unwrap();
        assert!(shared.admit(ip("192.0.2.7"), 256, 2).is_none());
        // A connection of the /64 ending gives the /64 its place back.
        drop(a);
        let _f = shared.admit(ip("2001:db8:1:2::4"), 256, 2).unwrap();
        assert_eq!(
            shared.counters.refused_over_address.load(Ordering::Relaxed),
            2
        );
    }

    // r[verify issue.responder.limits+2]
    #[tokio::test]
    async fn past_the_total_cap_a_connection_is_closed() {
        let r = Http01Responder::bind_with("127.0.0.1:0".parse().unwrap(), limits(2, 16))
            .await
            .unwrap();
        let _a = connect_from([127, 0, 0, 4], r.addr()).await;
        let _b = connect_from([127, 0, 0, 5], r.addr()).await;
        until_open(&r, 2).await;
        let mut c = connect_from([127, 0, 0, 6], r.addr()).await;
        let refused = tokio::time::timeout(Duration::from_secs(5), closed(&mut c)).await;
        assert_eq!(refused, Ok(true), "the connection past the cap stayed open");
        let stats = r.stats();
        assert_eq!((stats.refused_over_total, stats.open), (1, 2), "{stats:?}");
    }

    // r[verify issue.responder.stop]
    #[tokio::test]
    async fn stop_closes_every_held_connection() {
        let r = Http01Responder::bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let mut silent = TcpStream::connect(r.addr()).await.unwrap();
        let mut half = TcpStream::connect(r.addr()).await.unwrap();
        half.write_all(b"GET /.well-kn").await.unwrap();
        until_open(&r, 2).await;
        r.stop();
        for s in [&mut silent, &mut half] {
            let cut = tokio::time::timeout(Duration::from_secs(5), closed(s)).await;
            assert_eq!(cut, Ok(true), "a held connection outlived stop()");
        }
        until_open(&r, 0).await;
        assert!(
            TcpStream::connect(r.addr()).await.is_err(),
            "still listening"
        );
    }

    // r[verify issue.responder.limits+2]
    #[test]
    fn limits_default_parse_as_text_and_zero_is_refused() {
        let d = ResponderLimits::default();
        assert_eq!(
            (d.max_connections, d.max_connections_per_address),
            (256, 16)
        );
        assert_eq!(
            (d.header_timeout, d.idle_timeout),
            (Duration::from_secs(10), Duration::from_secs(30))
        );
        let set: ResponderLimits = serde_json::from_value(
            serde_json::json!({ "header_timeout": "5s", "max_connections": 9 }),
        )
        .unwrap();
        assert_eq!(set.header_timeout, Duration::from_secs(5));
        assert_eq!(set.max_connections, 9);
        assert_eq!(set.idle_timeout, DEFAULT_IDLE_TIMEOUT);
        assert!(
            serde_json::from_value::<ResponderLimits>(serde_json::json!({ "nope": 1 })).is_err()
        );
        // A zero is refused when the config is read too, naming its key.
        let err =
            serde_json::from_value::<ResponderLimits>(serde_json::json!({ "idle_timeout": "0s" }))
                .unwrap_err()
                .to_string();
        assert!(
            err.contains("idle_timeout: must be more than zero"),
            "{err}"
        );
        let zero = ResponderLimits {
            max_connections_per_address: 0,
            ..d
        };
        assert_eq!(
            zero.validate(),
            Err(ResponderLimitsError("max_connections_per_address"))
        );
        assert_eq!(d.validate(), Ok(d));
    }
}
