//! The UDP side of the fault proxy: forwards datagrams per client, counts them, or drops them.
//!
//! Each client address gets a session: its own upstream socket, so replies find their way back.
//! A session that carries nothing in either direction for [`UdpConfig::session_idle`] is dropped,
//! like a NAT mapping timing out, so a long test with many short-lived clients does not pile up
//! sockets and tasks. Socket errors are classified (see `udp_errors`): a transient one is retried,
//! a run of them is paced, and a persistent one ends the loop it came from instead of spinning.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::sync::Notify;
use tokio::task::{AbortHandle, JoinHandle, JoinSet};
use tokio::time::Instant;

use super::udp_errors::{ErrorClass, ErrorStreak, Next, classify};

/// How the UDP proxy treats datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UdpMode {
    /// Relay client datagrams to the upstream and its replies back to that client.
    Forward,
    /// Drop datagrams in both directions (counted as dropped), like a black-holed path.
    Drop,
}

/// Settings of a [`UdpFaultProxy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpConfig {
    /// A client's session is dropped after this long without a datagram in either direction
    /// (default 60 s). A datagram from that client afterwards opens a new session, from a new
    /// upstream port.
    pub session_idle: Duration,
}

impl Default for UdpConfig {
    fn default() -> Self {
        UdpConfig {
            session_idle: Duration::from_secs(60),
        }
    }
}

/// Datagram counts so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Datagrams received from clients (in any mode).
    pub from_clients: u64,
    /// Client datagrams sent on to the upstream.
    pub forwarded: u64,
    /// Upstream replies delivered back to their client.
    pub replies: u64,
    /// Datagrams dropped, in either direction (by `Drop` mode or a failed send).
    pub dropped: u64,
    /// Client sessions open now.
    pub sessions: u64,
    /// Sessions dropped for being idle, so far.
    pub expired: u64,
    /// Socket errors met so far, by any of the proxy's sockets.
    pub errors: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    from_clients: AtomicU64,
    forwarded: AtomicU64,
    replies: AtomicU64,
    dropped: AtomicU64,
    sessions: AtomicU64,
    expired: AtomicU64,
    errors: AtomicU64,
    dropping: AtomicBool,
    failure: Mutex<Option<String>>,
    counted: Notify,
}

impl Counters {
    fn bump(&self, counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::SeqCst);
        self.counted.notify_waiters();
    }

    fn set_sessions(&self, open: usize) {
        self.sessions.store(open as u64, Ordering::SeqCst);
        self.counted.notify_waiters();
    }

    fn fail(&self, why: String) {
        *self.failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(why);
        self.set_sessions(0);
    }

    fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn stats(&self) -> UdpStats {
        UdpStats {
            from_clients: self.from_clients.load(Ordering::SeqCst),
            forwarded: self.forwarded.load(Ordering::SeqCst),
            replies: self.replies.load(Ordering::SeqCst),
            dropped: self.dropped.load(Ordering::SeqCst),
            sessions: self.sessions.load(Ordering::SeqCst),
            expired: self.expired.load(Ordering::SeqCst),
            errors: self.errors.load(Ordering::SeqCst),
        }
    }
}

/// A UDP fault proxy in front of one upstream address; each client address gets its own upstream
/// socket so replies find their way back. Dropping it stops relaying.
pub struct UdpFaultProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    counters: Arc<Counters>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for UdpFaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpFaultProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.upstream)
            .field("stats", &self.stats())
            .finish()
    }
}

impl UdpFaultProxy {
    /// Starts a proxy on a free loopback port, relaying to `upstream`, with the default
    /// [`UdpConfig`]. Needs a tokio runtime.
    pub async fn start(upstream: SocketAddr) -> io::Result<Self> {
        Self::start_with(upstream, UdpConfig::default()).await
    }

    /// Starts a proxy on a free loopback port, relaying to `upstream`. Needs a tokio runtime.
    pub async fn start_with(upstream: SocketAddr, config: UdpConfig) -> io::Result<Self> {
        let front = Arc::new(UdpSocket::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?);
        let addr = front.local_addr()?;
        let counters = Arc::new(Counters::default());
        let task = tokio::spawn(relay(front, upstream, counters.clone(), config));
        Ok(UdpFaultProxy {
            addr,
            upstream,
            counters,
            task,
        })
    }

    /// The proxy's own address: give this to the code under test.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Switches the mode; datagrams handled after this returns see the new mode.
    // i[impl harness.fault-proxy.udp]
    pub fn set_mode(&self, mode: UdpMode) {
        self.counters
            .dropping
            .store(mode == UdpMode::Drop, Ordering::SeqCst);
    }

    /// The counts so far.
    pub fn stats(&self) -> UdpStats {
        self.counters.stats()
    }

    /// Why the proxy stopped relaying, if it did: its client-facing socket failed persistently.
    pub fn failure(&self) -> Option<String> {
        self.counters.failure()
    }

    /// Waits until `done(stats)` holds or `timeout` passes; returns the stats at that point.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        done: impl Fn(&UdpStats) -> bool,
    ) -> UdpStats {
        let wait = async {
            loop {
                let notified = self.counters.counted.notified();
                if done(&self.stats()) {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(timeout, wait).await;
        self.stats()
    }
}

impl Drop for UdpFaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A socket the relay receives client datagrams on and sends replies from; a seam so the
/// relay's error handling can be tested against a socket that fails on demand.
pub(crate) trait FrontSocket: Send + Sync + 'static {
    /// `UdpSocket::recv_from`.
    fn recv_from<'a>(
        &'a self,
        buf: &'a mut [u8],
    ) -> impl Future<Output = io::Result<(usize, SocketAddr)>> + Send + 'a;
    /// `UdpSocket::send_to`.
    fn send_to<'a>(
        &'a self,
        buf: &'a [u8],
        to: SocketAddr,
    ) -> impl Future<Output = io::Result<usize>> + Send + 'a;
}

impl FrontSocket for UdpSocket {
    fn recv_from<'a>(
        &'a self,
        buf: &'a mut [u8],
    ) -> impl Future<Output = io::Result<(usize, SocketAddr)>> + Send + 'a {
        UdpSocket::recv_from(self, buf)
    }
    fn send_to<'a>(
        &'a self,
        buf: &'a [u8],
        to: SocketAddr,
    ) -> impl Future<Output = io::Result<usize>> + Send + 'a {
        UdpSocket::send_to(self, buf, to)
    }
}

/// One client's session: its own upstream socket and the task relaying replies back.
struct Session {
    id: u64,
    socket: Arc<UdpSocket>,
    last_active: Arc<Mutex<Instant>>,
    replies: AbortHandle,
}

fn touch(last_active: &Mutex<Instant>) {
    *last_active.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
}

fn last(last_active: &Mutex<Instant>) -> Instant {
    *last_active.lock().unwrap_or_else(PoisonError::into_inner)
}

enum Step {
    Received(io::Result<(usize, SocketAddr)>),
    Sweep,
    Ended(Result<(SocketAddr, u64), tokio::task::JoinError>),
}

// i[impl harness.fault-proxy.udp.errors]
// i[impl harness.fault-proxy.udp.idle]
pub(crate) async fn relay<F: FrontSocket>(
    front: Arc<F>,
    upstream: SocketAddr,
    counters: Arc<Counters>,
    config: UdpConfig,
) {
    let mut sessions: HashMap<SocketAddr, Session> = HashMap::new();
    let mut replies = JoinSet::new();
    let mut last_id = 0u64;
    // No session expires before this; recomputed from the sessions' own deadlines at each sweep.
    let mut next_sweep: Option<Instant> = None;
    let mut streak = ErrorStreak::default();
    let mut buf = vec![0u8; 65_536];
    loop {
        let step = {
            let sweep = async {
                match next_sweep {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                received = front.recv_from(&mut buf) => Step::Received(received),
                () = sweep => Step::Sweep,
                Some(ended) = replies.join_next(), if !replies.is_empty() => Step::Ended(ended),
            }
        };
        let (n, peer) = match step {
            Step::Received(Ok(received)) => {
                streak.on_success();
                received
            }
            Step::Received(Err(err)) => {
                counters.bump(&counters.errors);
                match streak.on_error(&err) {
                    Next::Continue => {}
                    Next::Pause(pause) => tokio::time::sleep(pause).await,
                    Next::End => {
                        // The front socket is unusable: stop relaying and say why.
                        counters.fail(format!("receiving from clients: {err}"));
                        return;
                    }
                }
                continue;
            }
            Step::Sweep => {
                next_sweep = sweep(
                    &mut sessions,
                    Instant::now(),
                    config.session_idle,
                    &counters,
                );
                counters.set_sessions(sessions.len());
                continue;
            }
            Step::Ended(ended) => {
                // An aborted (expired or dropped) session's loop ends in a `JoinError`: that
                // session was already removed.
                if let Ok((peer, id)) = ended {
                    if end_session(&mut sessions, peer, id) {
                        counters.set_sessions(sessions.len());
                    }
                }
                continue;
            }
        };
        counters.bump(&counters.from_clients);
        if counters.dropping.load(Ordering::SeqCst) {
            counters.bump(&counters.dropped);
            continue;
        }
        let session = match sessions.get(&peer) {
            Some(session) => {
                touch(&session.last_active);
                session.socket.clone()
            }
            None => match open_session(upstream).await {
                Ok(socket) => {
                    let socket = Arc::new(socket);
                    let opened = Instant::now();
                    let last_active = Arc::new(Mutex::new(opened));
                    let id = next_session_id(&mut last_id);
                    let replies = replies.spawn(relay_replies(
                        socket.clone(),
                        front.clone(),
                        peer,
                        id,
                        counters.clone(),
                        last_active.clone(),
                    ));
                    sessions.insert(
                        peer,
                        Session {
                            id,
                            socket: socket.clone(),
                            last_active,
                            replies,
                        },
                    );
                    counters.set_sessions(sessions.len());
                    // Any sweep already due is no later than this session's deadline.
                    next_sweep.get_or_insert(idle_deadline(opened, config.session_idle));
                    socket
                }
                Err(_) => {
                    counters.bump(&counters.errors);
                    counters.bump(&counters.dropped);
                    continue;
                }
            },
        };
        match session.send(&buf[..n]).await {
            Ok(_) => counters.bump(&counters.forwarded),
            Err(err) => {
                counters.bump(&counters.errors);
                counters.bump(&counters.dropped);
                if send_failed(&mut sessions, peer, &err) {
                    counters.set_sessions(sessions.len());
                }
            }
        }
    }
}

/// When a session last active at `last_active` falls idle: `idle` after it.
// i[impl harness.fault-proxy.udp.idle]
fn idle_deadline(last_active: Instant, idle: Duration) -> Instant {
    last_active + idle
}

/// The sweep at `now`: drops every session that has had no datagram for `idle` (stopping its
/// reply relay) and counts it as expired; a session is kept until its deadline, not after.
/// Returns when the next sweep is due: the earliest deadline of the sessions kept, if any.
// i[impl harness.fault-proxy.udp.idle]
fn sweep(
    sessions: &mut HashMap<SocketAddr, Session>,
    now: Instant,
    idle: Duration,
    counters: &Counters,
) -> Option<Instant> {
    sessions.retain(|_, session| {
        let expired = idle_deadline(last(&session.last_active), idle) <= now;
        if expired {
            session.replies.abort();
            counters.bump(&counters.expired);
        }
        !expired
    });
    sessions
        .values()
        .map(|s| idle_deadline(last(&s.last_active), idle))
        .min()
}

/// The id for the next session, after `last`: a new one each time, so the end of an old
/// session's reply relay is never taken for the end of a newer one of the same client.
// i[impl harness.fault-proxy.udp.errors]
fn next_session_id(last: &mut u64) -> u64 {
    *last += 1;
    *last
}

/// Session `id` of `peer` ended its reply relay on a persistent error: drops that session, and
/// not a newer one the client has opened since. Says whether a session was dropped.
// i[impl harness.fault-proxy.udp.errors]
fn end_session(sessions: &mut HashMap<SocketAddr, Session>, peer: SocketAddr, id: u64) -> bool {
    if sessions.get(&peer).is_some_and(|s| s.id == id) {
        sessions.remove(&peer);
        true
    } else {
        false
    }
}

/// A send on `peer`'s session socket failed with `err`: a persistent error drops that session
/// and its reply relay (the client's next datagram opens a new one); a transient one keeps it.
/// Says whether a session was dropped.
// i[impl harness.fault-proxy.udp.errors]
fn send_failed(
    sessions: &mut HashMap<SocketAddr, Session>,
    peer: SocketAddr,
    err: &io::Error,
) -> bool {
    if classify(err) != ErrorClass::Persistent {
        return false;
    }
    match sessions.remove(&peer) {
        Some(session) => {
            session.replies.abort();
            true
        }
        None => false,
    }
}

async fn open_session(upstream: SocketAddr) -> io::Result<UdpSocket> {
    let socket = UdpSocket::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    socket.connect(upstream).await?;
    Ok(socket)
}

/// Relays one session's replies to its client until the session socket fails for good (the
/// session is then removed) or the session is expired (the task is aborted).
async fn relay_replies<F: FrontSocket>(
    session: Arc<UdpSocket>,
    front: Arc<F>,
    peer: SocketAddr,
    id: u64,
    counters: Arc<Counters>,
    last_active: Arc<Mutex<Instant>>,
) -> (SocketAddr, u64) {
    let mut streak = ErrorStreak::default();
    let mut buf = vec![0u8; 65_536];
    loop {
        let n = match session.recv(&mut buf).await {
            Ok(n) => {
                streak.on_success();
                n
            }
            Err(err) => {
                // ECONNREFUSED from an ICMP port-unreachable is reported once per datagram that
                // met a closed port; the socket stays usable.
                counters.bump(&counters.errors);
                match streak.on_error(&err) {
                    Next::Continue => continue,
                    Next::Pause(pause) => {
                        tokio::time::sleep(pause).await;
                        continue;
                    }
                    Next::End => return (peer, id),
                }
            }
        };
        touch(&last_active);
        if counters.dropping.load(Ordering::SeqCst) {
            counters.bump(&counters.dropped);
            continue;
        }
        match front.send_to(&buf[..n], peer).await {
            Ok(_) => counters.bump(&counters.replies),
            Err(_) => {
                // A failing front socket shows up in the main loop's receives, which end the relay.
                counters.bump(&counters.errors);
                counters.bump(&counters.dropped);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault_proxy::udp_errors::{BURST, MAX_PAUSE};

    /// A front socket whose every receive fails with one OS error, at once, up to `limit` times
    /// (then it never answers, so a relay that spins stops at the limit instead of hanging).
    struct Failing {
        errno: nix::errno::Errno,
        calls: AtomicU64,
        limit: u64,
    }

    impl Failing {
        fn new(errno: nix::errno::Errno) -> Arc<Self> {
            Arc::new(Failing {
                errno,
                calls: AtomicU64::new(0),
                limit: 10_000,
            })
        }
        fn calls(&self) -> u64 {
            self.calls.load(Ordering::SeqCst)
        }
    }

    impl FrontSocket for Failing {
        async fn recv_from(&self, _buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
            if self.calls.fetch_add(1, Ordering::SeqCst) >= self.limit {
                std::future::pending::<()>().await;
            }
            Err(io::Error::from_raw_os_error(self.errno as i32))
        }
        async fn send_to(&self, buf: &[u8], _to: SocketAddr) -> io::Result<usize> {
            Ok(buf.len())
        }
    }

    fn nowhere() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 9))
    }

    // i[verify harness.fault-proxy.udp.errors]
    #[tokio::test(start_paused = true)]
    async fn a_persistent_receive_error_ends_the_relay_and_is_recorded() {
        let front = Failing::new(nix::errno::Errno::EBADF);
        let counters = Arc::new(Counters::default());
        let relay = relay(
            front.clone(),
            nowhere(),
            counters.clone(),
            UdpConfig::default(),
        );
        tokio::time::timeout(Duration::from_secs(1), relay)
            .await
            .expect("the relay ends instead of retrying a broken socket");
        assert_eq!(front.calls(), 1);
        assert_eq!(counters.stats().errors, 1);
        let why = counters.failure().expect("the end is recorded");
        assert!(why.contains("Bad file descriptor"), "{why}");
    }

    // i[verify harness.fault-proxy.udp.errors]
    #[tokio::test(start_paused = true)]
    async fn a_storm_of_transient_receive_errors_is_paced_not_spun() {
        let front = Failing::new(nix::errno::Errno::ECONNREFUSED);
        let counters = Arc::new(Counters::default());
        let relay = relay(
            front.clone(),
            nowhere(),
            counters.clone(),
            UdpConfig::default(),
        );
        let ran = tokio::time::timeout(Duration::from_secs(10), relay).await;
        assert!(ran.is_err(), "transient errors do not end the relay");
        // A burst at once, then pauses doubling from 1 ms to the 1 s cap: about 16 + 10 + 9 calls
        // in 10 s, where spinning would have made 10,000 without time passing.
        let calls = front.calls();
        let at_most = u64::from(BURST) + 10 + 10 * MAX_PAUSE.as_secs() + 1;
        assert!(
            calls > u64::from(BURST) && calls <= at_most,
            "{calls} receives in 10 s"
        );
        assert_eq!(counters.stats().errors, calls);
        assert!(counters.failure().is_none());
    }

    /// A session of `id`, last active at `last_active`, on a real loopback socket, whose reply
    /// relay waits forever; the handle tells whether that relay was stopped.
    async fn session(id: u64, last_active: Instant) -> (Session, JoinHandle<()>) {
        let socket = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
        let relay = tokio::spawn(std::future::pending::<()>());
        let session = Session {
            id,
            socket,
            last_active: Arc::new(Mutex::new(last_active)),
            replies: relay.abort_handle(),
        };
        (session, relay)
    }

    /// Whether a session's reply relay was stopped (a relay left running waits out the timeout).
    async fn stopped(relay: JoinHandle<()>) -> bool {
        matches!(
            tokio::time::timeout(Duration::from_secs(1), relay).await,
            Ok(Err(err)) if err.is_cancelled()
        )
    }

    fn peer(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    const IDLE: Duration = Duration::from_secs(10);
    const TICK: Duration = Duration::from_nanos(1);

    // i[verify harness.fault-proxy.udp.idle]
    #[tokio::test(start_paused = true)]
    async fn a_sweep_one_tick_before_the_idle_time_keeps_the_session_and_is_due_again_then() {
        let t0 = Instant::now();
        let (early, early_relay) = session(1, t0).await;
        let (later, later_relay) = session(2, t0 + Duration::from_secs(3)).await;
        let mut sessions = HashMap::from([(peer(1), early), (peer(2), later)]);
        let counters = Counters::default();

        let next = sweep(&mut sessions, t0 + IDLE - TICK, IDLE, &counters);

        assert_eq!(sessions.len(), 2, "neither has been idle for {IDLE:?}");
        assert_eq!(counters.stats().expired, 0);
        assert_eq!(next, Some(t0 + IDLE), "the earliest deadline: the first's");
        assert!(!stopped(early_relay).await);
        assert!(!stopped(later_relay).await);
    }

    // i[verify harness.fault-proxy.udp.idle]
    #[tokio::test(start_paused = true)]
    async fn a_sweep_at_exactly_the_idle_time_drops_that_session_and_stops_its_relay() {
        let t0 = Instant::now();
        let (early, early_relay) = session(1, t0).await;
        let (later, later_relay) = session(2, t0 + Duration::from_secs(3)).await;
        let mut sessions = HashMap::from([(peer(1), early), (peer(2), later)]);
        let counters = Counters::default();

        let next = sweep(&mut sessions, t0 + IDLE, IDLE, &counters);

        assert_eq!(sessions.keys().copied().collect::<Vec<_>>(), [peer(2)]);
        assert_eq!(counters.stats().expired, 1);
        assert_eq!(
            next,
            Some(t0 + Duration::from_secs(3) + IDLE),
            "the one kept"
        );
        assert!(
            stopped(early_relay).await,
            "an expired session's relay is stopped"
        );
        assert!(!stopped(later_relay).await);
    }

    // i[verify harness.fault-proxy.udp.idle]
    #[tokio::test(start_paused = true)]
    async fn a_sweep_long_past_every_deadline_drops_them_all_and_schedules_none() {
        let t0 = Instant::now();
        let (early, early_relay) = session(1, t0).await;
        let (later, later_relay) = session(2, t0 + Duration::from_secs(3)).await;
        let mut sessions = HashMap::from([(peer(1), early), (peer(2), later)]);
        let counters = Counters::default();

        let next = sweep(&mut sessions, t0 + 3 * IDLE, IDLE, &counters);

        assert!(sessions.is_empty());
        assert_eq!(counters.stats().expired, 2);
        assert_eq!(next, None, "nothing left to expire");
        assert!(stopped(early_relay).await);
        assert!(stopped(later_relay).await);
    }

    // i[verify harness.fault-proxy.udp.idle]
    #[test]
    fn a_new_session_falls_idle_the_idle_time_after_its_last_datagram() {
        let t0 = Instant::now();
        assert_eq!(idle_deadline(t0, IDLE), t0 + IDLE);
        assert_eq!(idle_deadline(t0, Duration::ZERO), t0);
    }

    // i[verify harness.fault-proxy.udp.errors]
    #[tokio::test(start_paused = true)]
    async fn an_ended_reply_relay_drops_its_own_session_and_not_a_newer_one_of_the_same_client() {
        let mut last_id = 0;
        let old = next_session_id(&mut last_id);
        let new = next_session_id(&mut last_id);
        assert_ne!(old, new, "each session gets its own id");
        let now = Instant::now();
        let (newer, _newer_relay) = session(new, now).await;
        let (other, _other_relay) = session(old, now).await;
        let mut sessions = HashMap::from([(peer(1), newer), (peer(2), other)]);

        // The client's old session (since replaced) ends: the newer one stays.
        assert!(!end_session(&mut sessions, peer(1), old));
        assert_eq!(sessions.get(&peer(1)).map(|s| s.id), Some(new));
        assert_eq!(sessions.len(), 2);

        // The newer session's own relay ends: that session goes, another client's stays.
        assert!(end_session(&mut sessions, peer(1), new));
        assert_eq!(sessions.keys().copied().collect::<Vec<_>>(), [peer(2)]);
        assert!(!end_session(&mut sessions, peer(1), new), "already gone");
    }

    // i[verify harness.fault-proxy.udp.errors]
    #[tokio::test(start_paused = true)]
    async fn a_persistent_send_error_drops_the_session_and_a_transient_one_keeps_it() {
        let now = Instant::now();
        let (first, first_relay) = session(1, now).await;
        let (second, second_relay) = session(2, now).await;
        let mut sessions = HashMap::from([(peer(1), first), (peer(2), second)]);
        let os = |errno: nix::errno::Errno| io::Error::from_raw_os_error(errno as i32);

        assert!(!send_failed(
            &mut sessions,
            peer(1),
            &os(nix::errno::Errno::ECONNREFUSED)
        ));
        assert!(!send_failed(
            &mut sessions,
            peer(1),
            &os(nix::errno::Errno::ENOBUFS)
        ));
        assert_eq!(sessions.len(), 2, "a transient error keeps the session");

        assert!(send_failed(
            &mut sessions,
            peer(1),
            &os(nix::errno::Errno::EBADF)
        ));
        assert_eq!(sessions.keys().copied().collect::<Vec<_>>(), [peer(2)]);
        assert!(
            stopped(first_relay).await,
            "the dropped session's relay is stopped"
        );
        assert!(!stopped(second_relay).await);
        assert!(
            !send_failed(&mut sessions, peer(1), &os(nix::errno::Errno::EBADF)),
            "no session left to drop"
        );
    }
}
