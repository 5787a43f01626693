//! A fault proxy: sits in front of a real service, counts what passes, and injects faults.
//!
//! [`FaultProxy`] is a TCP proxy on a loopback port of its own. Point the code under test at
//! [`FaultProxy::addr`] instead of the service, then switch [`Mode`] at run time to make the
//! "service" refuse connections, close or reset them, stall, or answer every HTTP request with a
//! chosen status. [`UdpFaultProxy`] does the same for datagrams (forward or drop).
//!
//! Counting is exact: a connection is counted when it is accepted and a request when its head has
//! been read, both before a single byte of it reaches the service or an answer goes back, so once a
//! client has seen the outcome of an attempt, the count already includes it.

mod http;
mod udp;
mod udp_errors;

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::task::{JoinHandle, JoinSet};

pub use http::{RequestHead, RequestTracker};
pub use udp::{UdpConfig, UdpFaultProxy, UdpMode, UdpStats};

/// How the proxy treats connections.
///
/// A mode applies to connections accepted after [`FaultProxy::set_mode`] returns. Connections that
/// are being forwarded when the mode changes keep being forwarded, except that [`Mode::Stall`]
/// freezes them and [`Mode::Reset`] resets them, stalled ones included (a registry that hangs or
/// dies mid-pull).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Forward both directions to the upstream service.
    Forward,
    /// Stop listening: connecting fails with "connection refused", as if the service were down.
    /// Refused connects never reach the proxy, so they are not counted.
    Refuse,
    /// Accept (and count), then close the connection at once without a byte.
    Close,
    /// Accept (and count), then reset the connection (RST, via `SO_LINGER` 0).
    Reset,
    /// Accept (and count), forward up to `after_bytes` of the service's answer, then go silent
    /// while holding the connection open. `after_bytes: 0` never answers at all (and never
    /// contacts the service).
    Stall {
        /// Bytes of the upstream's response stream to let through before stalling.
        after_bytes: u64,
    },
    /// Answer every HTTP request on every connection with this status, never contacting the
    /// service.
    HttpStatus {
        /// The status code, e.g. 429.
        status: u16,
        /// A `Retry-After` header value (delta-seconds or an HTTP-date), if any.
        retry_after: Option<String>,
        /// The response body (sent as JSON when it starts with `{`).
        body: String,
    },
}

impl Mode {
    /// `HttpStatus` with no Retry-After and an empty body.
    pub fn status(status: u16) -> Self {
        Mode::HttpStatus {
            status,
            retry_after: None,
            body: String::new(),
        }
    }
}

struct Shared {
    upstream: SocketAddr,
    connections: AtomicU64,
    requests: Mutex<Vec<String>>,
    /// Woken whenever a count grows.
    counted: Notify,
}

impl Shared {
    fn record_request(&self, head: &RequestHead) {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(head.line.clone());
        self.counted.notify_waiters();
    }
}

struct Command {
    mode: Mode,
    done: oneshot::Sender<io::Result<()>>,
}

/// A TCP fault proxy in front of one upstream address. Dropping it closes every connection.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    commands: mpsc::UnboundedSender<Command>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.shared.upstream)
            .finish_non_exhaustive()
    }
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port, forwarding to `upstream`. Needs a tokio runtime.
    pub async fn start(upstream: SocketAddr) -> io::Result<Self> {
        let listener = listen(SocketAddr::from(([127, 0, 0, 1], 0)))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            connections: AtomicU64::new(0),
            requests: Mutex::new(Vec::new()),
            counted: Notify::new(),
        });
        let (commands, command_rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(accept_loop(listener, addr, shared.clone(), command_rx));
        Ok(FaultProxy {
            addr,
            shared,
            commands,
            task,
        })
    }

    /// The proxy's own address: give this to the code under test.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The service behind the proxy.
    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// Switches the mode; when this returns, the proxy acts on the new mode (a `Refuse` proxy no
    /// longer listens; a proxy leaving `Refuse` listens again on the same port).
    // i[impl harness.fault-proxy.modes+2]
    pub async fn set_mode(&self, mode: Mode) -> io::Result<()> {
        let (done, answer) = oneshot::channel();
        self.commands
            .send(Command { mode, done })
            .map_err(|_| io::Error::other("fault proxy task has ended"))?;
        answer
            .await
            .map_err(|_| io::Error::other("fault proxy task has ended"))?
    }

    /// Connections accepted so far (in every mode but `Refuse`).
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// The request lines (`GET /v2/ HTTP/1.1`) of the HTTP requests seen so far, in arrival order,
    /// in the modes that read requests (`Forward`, `Stall`, `HttpStatus`).
    pub fn requests(&self) -> Vec<String> {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many HTTP requests were seen so far.
    pub fn request_count(&self) -> usize {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Waits until at least `n` connections were accepted, or `timeout` passes; returns the count.
    pub async fn wait_for_connections(&self, n: u64, timeout: Duration) -> u64 {
        self.wait_until(timeout, || self.connections() >= n).await;
        self.connections()
    }

    /// Waits until at least `n` HTTP requests were seen, or `timeout` passes; returns the count.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> usize {
        self.wait_until(timeout, || self.request_count() >= n).await;
        self.request_count()
    }

    async fn wait_until(&self, timeout: Duration, done: impl Fn() -> bool) {
        let wait = async {
            loop {
                let notified = self.shared.counted.notified();
                if done() {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(timeout, wait).await;
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Aborting the accept task drops its JoinSet, which aborts every connection task.
        self.task.abort();
    }
}

fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = TcpSocket::new_v4()?;
    // Rebinding the same port after `Refuse` must not trip over connections in TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

enum Step {
    Command(Option<Command>),
    Accepted(io::Result<TcpStream>),
    Reaped,
}

async fn accept_loop(
    listener: TcpListener,
    addr: SocketAddr,
    shared: Arc<Shared>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let mut listener = Some(listener);
    let (mode_tx, _) = watch::channel(Mode::Forward);
    let mut connections = JoinSet::new();
    loop {
        let step = {
            let accept = async {
                match &listener {
                    Some(l) => l.accept().await.map(|(stream, _)| stream),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                command = commands.recv() => Step::Command(command),
                accepted = accept => Step::Accepted(accepted),
                Some(_) = connections.join_next(), if !connections.is_empty() => Step::Reaped,
            }
        };
        match step {
            Step::Command(None) => return,
            Step::Command(Some(Command { mode, done })) => {
                let result = if mode == Mode::Refuse {
                    listener = None;
                    Ok(())
                } else if listener.is_none() {
                    listen(addr).map(|l| listener = Some(l))
                } else {
                    Ok(())
                };
                if result.is_ok() {
                    mode_tx.send_replace(mode);
                }
                let _ = done.send(result);
            }
            Step::Accepted(Ok(stream)) => {
                // i[impl harness.fault-proxy.count]
                shared.connections.fetch_add(1, Ordering::SeqCst);
                shared.counted.notify_waiters();
                let mode = mode_tx.borrow().clone();
                connections.spawn(handle(stream, mode, shared.clone(), mode_tx.subscribe()));
            }
            // Accept errors (e.g. out of file descriptors) are about one connection; keep going.
            Step::Accepted(Err(_)) => tokio::task::yield_now().await,
            Step::Reaped => {}
        }
    }
}

async fn handle(stream: TcpStream, mode: Mode, shared: Arc<Shared>, modes: watch::Receiver<Mode>) {
    match mode {
        Mode::Forward => forward(stream, None, shared, modes).await,
        Mode::Stall { after_bytes: 0 } => swallow(stream, &shared, modes).await,
        Mode::Stall { after_bytes } => forward(stream, Some(after_bytes), shared, modes).await,
        Mode::Close => {
            let mut stream = stream;
            let _ = stream.shutdown().await;
        }
        Mode::Reset | Mode::Refuse => reset(&stream),
        Mode::HttpStatus {
            status,
            retry_after,
            body,
        } => answer(stream, status, retry_after.as_deref(), &body, &shared).await,
    }
}

/// Drops the connection with an RST instead of a FIN.
fn reset(stream: &TcpStream) {
    #[allow(deprecated)] // set_zero_linger is newer than the tokio this workspace may resolve to.
    let _ = stream.set_linger(Some(Duration::ZERO));
}

/// Reads and discards (counting requests) until the client gives up or the mode becomes
/// `Reset`; never answers.
async fn swallow(mut stream: TcpStream, shared: &Shared, mut modes: watch::Receiver<Mode>) {
    let mut tracker = RequestTracker::default();
    let mut buf = vec![0u8; 16 * 1024];
    // `modes` was subscribed when the connection was accepted: every switch since then counts.
    loop {
        let step = tokio::select! {
            r = stream.read(&mut buf) => Pump::FromClient(r),
            r = modes.changed() => Pump::ModeChanged(r.is_ok()),
        };
        match step {
            Pump::FromClient(Ok(0) | Err(_)) | Pump::ModeChanged(false) => return,
            Pump::FromClient(Ok(n)) => {
                for event in tracker.feed(&buf[..n]) {
                    if let http::Event::Head(head) = event {
                        shared.record_request(&head);
                    }
                }
            }
            Pump::ModeChanged(true) => {
                // A hung service that then dies: the promise of `Mode`'s docs, stalled ones included.
                if *modes.borrow_and_update() == Mode::Reset {
                    reset(&stream);
                    return;
                }
            }
            Pump::FromUpstream(_) => {}
        }
    }
}

/// Answers every request on the connection with the canned status.
async fn answer(
    mut stream: TcpStream,
    status: u16,
    retry_after: Option<&str>,
    body: &str,
    shared: &Shared,
) {
    let mut tracker = RequestTracker::default();
    let mut buf = vec![0u8; 16 * 1024];
    let mut current: Option<RequestHead> = None;
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        for event in tracker.feed(&buf[..n]) {
            match event {
                http::Event::Head(head) => {
                    shared.record_request(&head);
                    current = Some(head);
                }
                http::Event::Complete => {
                    let (head_only, close) = current
                        .take()
                        .map(|h| (h.method == "HEAD", h.close))
                        .unwrap_or((false, false));
                    let response =
                        http::canned_response(status, retry_after, body, head_only, close);
                    if stream.write_all(&response).await.is_err() {
                        return;
                    }
                    if close {
                        let _ = stream.shutdown().await;
                        return;
                    }
                }
            }
        }
        if tracker.lost() {
            return;
        }
    }
}

enum Pump {
    FromClient(io::Result<usize>),
    FromUpstream(io::Result<usize>),
    ModeChanged(bool),
}

/// Forwards both directions, counting requests on the way up; with a budget, stalls once that many
/// response bytes went down.
async fn forward(
    mut client: TcpStream,
    mut budget: Option<u64>,
    shared: Arc<Shared>,
    mut modes: watch::Receiver<Mode>,
) {
    let upstream = match TcpStream::connect(shared.upstream).await {
        Ok(upstream) => upstream,
        Err(_) => {
            // The service itself is down: the client sees its connection die, not a hang.
            reset(&client);
            return;
        }
    };
    // Borrowed halves: an owned write half shuts its side down (a FIN) when dropped, and a FIN
    // ahead of the RST would let a reset connection look cleanly closed to a client that reads.
    let (mut client_read, mut client_write) = client.split();
    let (mut upstream_read, mut upstream_write) = upstream.into_split();
    let mut tracker = RequestTracker::default();
    let mut up_buf = vec![0u8; 16 * 1024];
    let mut down_buf = vec![0u8; 16 * 1024];
    let (mut client_open, mut upstream_open) = (true, true);
    modes.mark_unchanged();
    while client_open || upstream_open {
        let step = tokio::select! {
            r = client_read.read(&mut up_buf), if client_open => Pump::FromClient(r),
            r = upstream_read.read(&mut down_buf), if upstream_open => Pump::FromUpstream(r),
            r = modes.changed() => Pump::ModeChanged(r.is_ok()),
        };
        match step {
            Pump::FromClient(Ok(0) | Err(_)) => {
                client_open = false;
                let _ = upstream_write.shutdown().await;
            }
            Pump::FromClient(Ok(n)) => {
                for event in tracker.feed(&up_buf[..n]) {
                    if let http::Event::Head(head) = event {
                        shared.record_request(&head);
                    }
                }
                if upstream_write.write_all(&up_buf[..n]).await.is_err() {
                    return;
                }
            }
            Pump::FromUpstream(Ok(0) | Err(_)) => {
                upstream_open = false;
                let _ = client_write.shutdown().await;
            }
            Pump::FromUpstream(Ok(n)) => {
                let allowed = budget.map_or(n, |b| b.min(n as u64) as usize);
                if client_write.write_all(&down_buf[..allowed]).await.is_err() {
                    return;
                }
                if let Some(b) = budget.as_mut() {
                    *b -= allowed as u64;
                    if *b == 0 {
                        break;
                    }
                }
            }
            Pump::ModeChanged(false) => return,
            Pump::ModeChanged(true) => {
                let mode = modes.borrow_and_update().clone();
                match mode {
                    Mode::Stall { .. } => break,
                    Mode::Reset => {
                        reset(client_write.as_ref());
                        return;
                    }
                    _ => {}
                }
            }
        }
    }
    if !client_open && !upstream_open {
        return;
    }
    // Stalled: hold both connections open and silent until the client gives up, or the mode
    // becomes `Reset` (a hung service that then dies).
    drop(upstream_read);
    let _keep_upstream = upstream_write;
    let mut discard = vec![0u8; 16 * 1024];
    loop {
        let step = tokio::select! {
            r = client_read.read(&mut discard) => Pump::FromClient(r),
            r = modes.changed() => Pump::ModeChanged(r.is_ok()),
        };
        match step {
            Pump::FromClient(Ok(0) | Err(_)) | Pump::ModeChanged(false) => return,
            Pump::FromClient(Ok(n)) => {
                for event in tracker.feed(&discard[..n]) {
                    if let http::Event::Head(head) = event {
                        shared.record_request(&head);
                    }
                }
            }
            Pump::ModeChanged(true) => {
                if *modes.borrow_and_update() == Mode::Reset {
                    reset(client_write.as_ref());
                    return;
                }
            }
            Pump::FromUpstream(_) => {}
        }
    }
}
