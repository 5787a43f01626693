//! Image actuation against a real Docker Engine and a real registry (started by
//! `cargo xtask test`), with faults injected by the fault proxy in front of the registry.
//!
//! dockerd pulls from the registry named in the reference, so each test names the seeded image
//! through its own proxy: `127.0.0.1:PROXYPORT/holdfast/busybox:latest`. 127.0.0.0/8 is insecure
//! by default for dockerd, so plain HTTP works. Pacing runs on a manual clock (the caller's `now`)
//! while every granted attempt is a real pull.

// Test helpers outside `#[test]` functions: clippy.toml's test allowance does not reach them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::query_parameters::RemoveImageOptionsBuilder;
use holdfast_pull::{
    Actuator, DaemonEndpoint, DockerFetcher, FaultSubject, ImageState, PullConfig, PullErrorKind,
};
use holdfast_retry::{Jitter, Policy};
use holdfast_test_support::fault_proxy::{FaultProxy, Mode};
use holdfast_test_support::services;

fn policy() -> Policy {
    policy_with_stale(Duration::from_secs(600))
}

fn policy_with_stale(stale_after: Duration) -> Policy {
    // The reference numbers: base 5 s, cap 300 s, escalation after 5 failures; additive jitter
    // (the default) only ever lengthens a wait, so the nominal schedule bounds the attempt count.
    Policy::builder()
        .base(Duration::from_secs(5))
        .cap(Duration::from_secs(300))
        .escalate_after(5)
        .jitter(Jitter::Additive)
        .seed(7)
        .stale_after(stale_after)
        .build()
        .unwrap()
}

fn actuator(docker_host: &str, stall_timeout: Duration) -> Actuator<DockerFetcher> {
    actuator_with(docker_host, stall_timeout, policy())
}

fn actuator_with(
    docker_host: &str,
    stall_timeout: Duration,
    policy: Policy,
) -> Actuator<DockerFetcher> {
    let config = PullConfig::builder(7)
        .image_policy(policy)
        .daemon_policy(policy)
        .stall_timeout(stall_timeout)
        .build()
        .unwrap();
    let fetcher = DockerFetcher::new(
        DaemonEndpoint::from_docker_host(Some(docker_host)),
        stall_timeout,
    );
    Actuator::new(fetcher, config).unwrap()
}

/// The seeded image, named through `proxy`.
fn through(proxy: &FaultProxy, registry: &services::Registry) -> String {
    format!("{}/{}", proxy.addr(), registry.image_path)
}

async fn remove_local(docker_host: &str, reference: &str) {
    let docker = Docker::connect_with_host(docker_host).unwrap();
    let options = RemoveImageOptionsBuilder::default().force(true).build();
    // Absent is fine: this only makes sure the next pull really pulls.
    let _ = docker.remove_image(reference, Some(options), None).await;
}

/// Pushes a fresh image whose one layer (256 KiB that does not compress) no daemon has seen, so
/// pulling it really fetches a blob; returns its repository path inside the registry.
async fn seed_unique_image(docker_host: &str, registry: &services::Registry) -> String {
    use bollard::auth::DockerCredentials;
    use bollard::query_parameters::PushImageOptionsBuilder;
    use futures_util::TryStreamExt;

    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        ^ u128::from(std::process::id());
    // xorshift: incompressible, so the layer blob stays about 256 KiB on the wire.
    let mut x = (nonce as u64) | 1;
    let content: Vec<u8> = (0..256 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let path = format!("holdfast/unique-{nonce:x}");
    let repo = format!("{}/{path}", registry.addr);
    let docker = Docker::connect_with_host(docker_host).unwrap();
    common::import(&docker, &repo, "latest", &content).await;
    let push = PushImageOptionsBuilder::default().tag("latest").build();
    let pushed = docker
        .push_image(&repo, Some(push), Some(DockerCredentials::default()))
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    assert!(!pushed.is_empty());
    remove_local(docker_host, &format!("{repo}:latest")).await;
    format!("{path}:latest")
}

struct Setup {
    docker: services::Docker,
    proxy: FaultProxy,
    image: String,
}

async fn setup() -> Option<Setup> {
    let docker = services::docker()?;
    let registry = services::registry()?;
    let proxy = FaultProxy::start(registry.addr).await.unwrap();
    let image = through(&proxy, &registry);
    remove_local(&docker.host, &image).await;
    Some(Setup {
        docker,
        proxy,
        image,
    })
}

impl Setup {
    async fn cleanup(self) {
        remove_local(&self.docker.host, &self.image).await;
    }
}

/// Calls `ensure` once per simulated second from `from` until an attempt has been started and
/// has finished; returns the time at which it started, or `None` if none started before `until`.
async fn next_attempt(
    act: &mut Actuator<DockerFetcher>,
    image: &str,
    clock: &mut Instant,
    until: Instant,
) -> Option<Instant> {
    while *clock <= until {
        let state = act.ensure(image, *clock);
        if matches!(state, ImageState::Pulling { .. }) {
            let started = *clock;
            act.settle(started).await;
            return Some(started);
        }
        *clock += Duration::from_secs(1);
    }
    None
}

// r[verify actuate.image.ensure+2]
// r[verify actuate.image.progress]
#[tokio::test]
async fn the_seeded_image_is_pulled_once_and_then_present() {
    let Some(s) = setup().await else { return };
    let mut act = actuator(&s.docker.host, Duration::from_secs(60));
    let t0 = Instant::now();
    assert!(matches!(
        act.ensure(&s.image, t0),
        ImageState::Pulling { .. }
    ));
    act.settle(t0).await;
    let requests_after_pull = s.proxy.request_count();
    let connections_after_pull = s.proxy.connections();
    // dockerd asks the registry for the manifest (and fetches only the blobs its store lacks:
    // other suites may already hold the seeded layer under another name).
    assert!(
        s.proxy.requests().iter().any(|r| r.contains("/manifests/")),
        "the image came through the registry: {:?}",
        s.proxy.requests()
    );
    for sec in 0..60 {
        assert_eq!(
            act.ensure(&s.image, t0 + Duration::from_secs(sec)),
            ImageState::Present
        );
    }
    assert_eq!(s.proxy.request_count(), requests_after_pull, "pulled once");
    assert_eq!(s.proxy.connections(), connections_after_pull);
    assert!(act.faults().is_empty());
    s.cleanup().await;
}

// r[verify actuate.image.retry]
// r[verify actuate.image.fault]
#[tokio::test]
async fn a_ten_minute_outage_is_paced_escalated_once_and_recovers_without_restart() {
    let Some(s) = setup().await else { return };
    let mut act = actuator(&s.docker.host, Duration::from_secs(60));
    let policy = policy();
    s.proxy.set_mode(Mode::Reset).await.unwrap();

    let t0 = Instant::now();
    let end = t0 + Duration::from_secs(600);
    let mut clock = t0;
    let mut attempts = Vec::new();
    let mut fault_since = None;
    let mut per_attempt = None;
    while let Some(at) = next_attempt(&mut act, &s.image, &mut clock, end).await {
        attempts.push(at.duration_since(t0).as_secs());
        // How many connections one pull attempt makes to a resetting registry (dockerd's HTTP
        // client retries a reset GET once), measured on the first attempt.
        per_attempt.get_or_insert(s.proxy.connections());
        let state = act.ensure(&s.image, clock);
        let faults = act.faults();
        if attempts.len() < 5 {
            assert!(faults.is_empty(), "no fault before the threshold");
            let ImageState::Waiting { last_error, .. } = &state else {
                panic!("expected waiting, got {state:?}");
            };
            assert_eq!(last_error.kind, PullErrorKind::RegistryUnreachable);
        } else {
            assert!(matches!(state, ImageState::Escalated { .. }), "{state:?}");
            assert_eq!(faults.len(), 1, "one fault for the reference");
            assert_eq!(
                faults[0].subject,
                FaultSubject::Image(s.image.clone()).subject()
            );
            let since = faults[0].since;
            assert_eq!(*fault_since.get_or_insert(since), since, "filed once");
        }
        clock += Duration::from_secs(1);
    }
    let connections = s.proxy.connections();

    // The schedule's allowance in 600 s: attempt k+1 no earlier than attempt k plus the nominal
    // delay after k failures (jitter only lengthens waits).
    let mut allowance = 0u32;
    let mut at = Duration::ZERO;
    while at <= Duration::from_secs(600) {
        allowance += 1;
        at += policy.nominal_delay(allowance);
    }
    let per_attempt = per_attempt.unwrap_or(0);
    eprintln!(
        "OUTAGE: {} pull attempts in 600 simulated s at {:?} s (allowance {allowance}); \
         {connections} proxy connections ({per_attempt} per attempt)",
        attempts.len(),
        attempts
    );
    assert!(
        attempts.len() as u32 <= allowance,
        "{attempts:?} > {allowance}"
    );
    assert!(
        attempts.len() >= 5,
        "the threshold was reached: {attempts:?}"
    );
    assert!(per_attempt >= 1, "the first attempt reached the proxy");
    assert!(
        connections <= per_attempt * u64::from(allowance),
        "the proxy saw no more pull attempts than the schedule allows: \
         {connections} connections > {per_attempt} x {allowance}"
    );
    assert!(fault_since.is_some(), "the fault was filed");

    // The registry comes back: the next paced attempt succeeds and clears the fault.
    s.proxy.set_mode(Mode::Forward).await.unwrap();
    let last = t0 + Duration::from_secs(*attempts.last().unwrap());
    let recovered = next_attempt(
        &mut act,
        &s.image,
        &mut clock,
        last + policy.max_wait() + Duration::from_secs(1),
    )
    .await
    .expect("an attempt within one cap interval");
    assert_eq!(act.ensure(&s.image, recovered), ImageState::Present);
    assert!(act.faults().is_empty(), "fault cleared by the pull");
    eprintln!(
        "OUTAGE: recovered at {} s by the first attempt after the registry returned",
        recovered.duration_since(t0).as_secs()
    );
    s.cleanup().await;
}

/// When a connection opened, and when its client closed it (`None`: still open).
type Lifetime = (std::time::Instant, Option<std::time::Instant>);

/// A forwarder that records when each client connection opens and when the client closes it: the
/// place where a cancelled pull becomes visible. In front of the daemon's socket it shows our side
/// dropping the request; in front of the registry (forwarding at most `budget` bytes of each
/// answer, then holding the connection silent) it shows what the daemon does with its fetch.
struct Recorder {
    /// `host:port` (TCP) or the socket path (Unix).
    addr: String,
    connections: std::sync::Arc<std::sync::Mutex<Vec<Lifetime>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Recorder {
    /// In front of the registry at `upstream`.
    async fn tcp(upstream: std::net::SocketAddr, budget: u64) -> Recorder {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let connections = std::sync::Arc::default();
        let seen = std::sync::Arc::clone(&connections);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                    continue;
                };
                tokio::spawn(relay(client, server, budget, std::sync::Arc::clone(&seen)));
            }
        });
        Recorder {
            addr,
            connections,
            task,
        }
    }

    /// In front of the daemon's socket at `upstream`, at `path`.
    async fn unix(path: &Path, upstream: &Path) -> Recorder {
        let listener = tokio::net::UnixListener::bind(path).unwrap();
        let upstream = upstream.to_owned();
        let connections = std::sync::Arc::default();
        let seen = std::sync::Arc::clone(&connections);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::UnixStream::connect(&upstream).await else {
                    continue;
                };
                tokio::spawn(relay(
                    client,
                    server,
                    u64::MAX,
                    std::sync::Arc::clone(&seen),
                ));
            }
        });
        Recorder {
            addr: path.display().to_string(),
            connections,
            task,
        }
    }

    fn connections(&self) -> Vec<Lifetime> {
        self.connections.lock().unwrap().clone()
    }

    /// Waits (in real time) until `check` holds for the connections, or `timeout` passes.
    async fn wait_for(&self, timeout: Duration, check: impl Fn(&[Lifetime]) -> bool) -> bool {
        let end = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < end {
            if check(&self.connections()) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        check(&self.connections())
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Relays one connection, the server's answer only up to `budget` bytes (then silence, the
/// connection held open), and records when the client closes its side.
async fn relay<C, S>(
    client: C,
    server: S,
    budget: u64,
    seen: std::sync::Arc<std::sync::Mutex<Vec<Lifetime>>>,
) where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let index = {
        let mut all = seen.lock().unwrap();
        all.push((std::time::Instant::now(), None));
        all.len() - 1
    };
    let (mut client_rx, mut client_tx) = tokio::io::split(client);
    let (mut server_rx, mut server_tx) = tokio::io::split(server);
    let answers = tokio::spawn(async move {
        let mut left = budget;
        let mut buf = vec![0u8; 16 * 1024];
        while left > 0 {
            let n = match server_rx.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let take = n.min(usize::try_from(left).unwrap_or(usize::MAX));
            if client_tx.write_all(&buf[..take]).await.is_err() {
                break;
            }
            left -= take as u64;
        }
        // Out of budget: hold the connection open and silent.
        std::future::pending::<()>().await;
        drop((server_rx, client_tx));
    });
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match client_rx.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if server_tx.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        }
    }
    seen.lock().unwrap()[index].1 = Some(std::time::Instant::now());
    answers.abort();
}

/// The indices of the connections still open.
fn still_open(all: &[Lifetime]) -> Vec<usize> {
    (0..all.len()).filter(|&i| all[i].1.is_none()).collect()
}

/// Whether every connection in `which` has been closed by its client.
fn all_closed(all: &[Lifetime], which: &[usize]) -> bool {
    which.iter().all(|&i| all[i].1.is_some())
}

// r[verify actuate.image.single-flight+3]
// r[verify actuate.image.attempt-token]
#[tokio::test]
async fn a_superseded_real_pull_is_cancelled_and_does_not_disturb_the_live_one() {
    let Some(docker) = services::docker() else {
        return;
    };
    let Some(registry) = services::registry() else {
        return;
    };
    // A layer no daemon has, so A really fetches a blob; the registry's answers are cut after
    // 4 KiB each (enough for the ping, the manifest and the config), so A hangs mid-blob.
    let path = seed_unique_image(&docker.host, &registry).await;
    let upstream = Recorder::tcp(registry.addr, 4096).await;
    let image = format!("{}/{path}", upstream.addr);
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("docker.sock");
    let daemon = Recorder::unix(&socket, &docker.socket).await;
    // The watchdog would end an attempt after 8 real seconds; on the caller's clock an attempt
    // is stale after 30 s and may then be superseded.
    let stall = Duration::from_secs(8);
    let mut act = actuator_with(
        &format!("unix://{}", daemon.addr),
        stall,
        policy_with_stale(Duration::from_secs(30)),
    );
    let t0 = Instant::now();
    assert!(matches!(act.ensure(&image, t0), ImageState::Pulling { .. }));
    let a_started = std::time::Instant::now();
    // A is fetching its layer when its progress shows the layer.
    let mut fetching = false;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        match act.ensure(&image, t0) {
            ImageState::Pulling { progress } if progress.layers > 0 => {
                fetching = true;
                break;
            }
            ImageState::Pulling { .. } => {}
            other => panic!("A ended before fetching its layer: {other:?}"),
        }
    }
    assert!(fetching, "A reached its layer");
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Single flight: ticks while A is in flight start nothing.
    for sec in 1..30 {
        let state = act.ensure(&image, t0 + Duration::from_secs(sec));
        assert!(matches!(state, ImageState::Pulling { .. }), "{state:?}");
    }
    // A's hanging connections: its pull request to the daemon, and the daemon's blob fetch.
    let a_daemon = still_open(&daemon.connections());
    let a_registry = still_open(&upstream.connections());
    assert!(
        !a_daemon.is_empty(),
        "A's pull request to the daemon is open"
    );
    assert!(
        !a_registry.is_empty(),
        "A's blob fetch from the registry is open"
    );
    // A goes stale on the caller's clock (counted once, as stalled); B supersedes it as soon as
    // the gate allows, while A is still hanging in real time.
    let mut now = t0 + Duration::from_secs(30);
    loop {
        match act.ensure(&image, now) {
            ImageState::Pulling { .. } => break,
            ImageState::Waiting {
                failures: 1,
                last_error,
                ..
            } => {
                assert_eq!(last_error.kind, PullErrorKind::Stalled, "{last_error}");
                now += Duration::from_secs(1);
            }
            other => panic!("expected A to be counted stale, got {other:?}"),
        }
        assert!(now < t0 + Duration::from_secs(100), "B never started");
    }
    // A was cancelled when B superseded it: its pull request to the daemon is dropped at once,
    // long before A's own watchdog could have ended it. (What the daemon then does with its own
    // fetch from the registry is the daemon's: dockerd 20.10 lets an in-flight blob read run on
    // until it returns, so that connection is reported, not asserted.)
    let dropped = daemon
        .wait_for(Duration::from_secs(5), |c| all_closed(c, &a_daemon))
        .await;
    let closed_at = |all: Vec<Lifetime>, which: &[usize]| {
        which
            .iter()
            .map(|&i| all[i].1.map(|at| at - a_started))
            .collect::<Option<Vec<_>>>()
            .and_then(|all| all.into_iter().max())
    };
    let daemon_closed = closed_at(daemon.connections(), &a_daemon);
    let registry_closed = closed_at(upstream.connections(), &a_registry);
    eprintln!(
        "SUPERSEDE: after A started, its request to the daemon closed at {daemon_closed:?}; \
         the daemon's blob fetch for A closed at {registry_closed:?} (None: still open); \
         watchdog {stall:?}"
    );
    assert!(
        dropped,
        "A's request to the daemon was dropped: {:?}",
        daemon.connections()
    );
    let closed = daemon_closed.unwrap();
    assert!(
        closed < stall,
        "closed by the cancellation ({closed:?}), not by A's watchdog"
    );
    // B is the live attempt.
    let state = act.ensure(&image, now);
    assert!(
        matches!(state, ImageState::Pulling { .. }),
        "B is the live attempt: {state:?}"
    );
    // B's own failure is counted: A's expiry once, B once; anything late from A (had it raced
    // its cancellation) not at all.
    act.settle(now).await;
    match act.ensure(&image, now) {
        ImageState::Waiting {
            failures,
            last_error,
            ..
        } => {
            assert_eq!(failures, 2);
            assert_eq!(last_error.kind, PullErrorKind::Stalled, "{last_error}");
        }
        other => panic!("expected waiting after B, got {other:?}"),
    }
    remove_local(&docker.host, &image).await;
}

/// Waits for the single attempt started at `now` and returns the reference's state after it.
async fn one_attempt(act: &mut Actuator<DockerFetcher>, image: &str, now: Instant) -> ImageState {
    assert!(matches!(act.ensure(image, now), ImageState::Pulling { .. }));
    act.settle(now).await;
    act.ensure(image, now)
}

// r[verify actuate.image.watchdog+3]
#[tokio::test]
async fn a_registry_that_never_answers_is_ended_by_the_watchdog() {
    let Some(s) = setup().await else { return };
    let mut act = actuator(&s.docker.host, Duration::from_secs(3));
    s.proxy
        .set_mode(Mode::Stall { after_bytes: 0 })
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let state = one_attempt(&mut act, &s.image, Instant::now()).await;
    let took = started.elapsed();
    let ImageState::Waiting { last_error, .. } = &state else {
        panic!("expected waiting, got {state:?}");
    };
    assert_eq!(last_error.kind, PullErrorKind::Stalled, "{last_error}");
    assert!(
        took >= Duration::from_secs(3),
        "abandoned after the bound, took {took:?}"
    );
    assert!(s.proxy.connections() >= 1, "the pull reached the registry");
    s.proxy.set_mode(Mode::Forward).await.unwrap();
    s.cleanup().await;
}

// r[verify actuate.image.watchdog+3]
// r[verify actuate.image.progress]
#[tokio::test]
async fn a_registry_that_stops_mid_blob_is_ended_by_the_watchdog() {
    let Some(docker) = services::docker() else {
        return;
    };
    let Some(registry) = services::registry() else {
        return;
    };
    let path = seed_unique_image(&docker.host, &registry).await;
    let proxy = FaultProxy::start(registry.addr).await.unwrap();
    let s = Setup {
        image: format!("{}/{path}", proxy.addr()),
        docker,
        proxy,
    };
    let mut act = actuator(&s.docker.host, Duration::from_secs(3));
    // Enough for the ping, the manifest and the config; the 256 KiB layer blob then stops.
    s.proxy
        .set_mode(Mode::Stall { after_bytes: 4096 })
        .await
        .unwrap();
    let now = Instant::now();
    assert!(matches!(
        act.ensure(&s.image, now),
        ImageState::Pulling { .. }
    ));
    // While it hangs, its progress is observable (polled in real time: the pull is real).
    let mut seen = holdfast_pull::PullProgress::default();
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        match act.ensure(&s.image, now) {
            ImageState::Pulling { progress } => {
                if progress.layers > 0 {
                    seen = progress;
                    break;
                }
            }
            other => panic!("ended before showing progress: {other:?}"),
        }
    }
    act.settle(now).await;
    let state = act.ensure(&s.image, now);
    let ImageState::Waiting { last_error, .. } = &state else {
        panic!("expected waiting, got {state:?}");
    };
    assert_eq!(last_error.kind, PullErrorKind::Stalled, "{last_error}");
    eprintln!(
        "MID-BLOB: progress {seen:?}; requests seen {:?}",
        s.proxy.requests()
    );
    assert!(seen.layers >= 1, "progress showed the layer: {seen:?}");
    assert!(
        s.proxy.requests().iter().any(|r| r.contains("/blobs/")),
        "the pull had started fetching blobs"
    );
    s.proxy.set_mode(Mode::Forward).await.unwrap();
    s.cleanup().await;
}

async fn classify_through(mode: Mode) -> Option<holdfast_pull::PullError> {
    let mut s = setup().await?;
    // dockerd tries HTTPS first at an insecure registry and falls back to HTTP when the answer is
    // plain HTTP. A proxy answering a status waits for an HTTP request that a TLS ClientHello
    // never completes, so dockerd gave up on the probe only at its 10 s TLS handshake timeout:
    // a front answers the probe as a plain-HTTP registry does, at once.
    let front = matches!(mode, Mode::HttpStatus { .. }).then(|| plain_http_front(s.proxy.addr()));
    let front = match front {
        Some(front) => Some(front.await),
        None => None,
    };
    if let Some(front) = &front {
        let registry = services::registry()?;
        s.image = format!("{}/{}", front.addr, registry.image_path);
        remove_local(&s.docker.host, &s.image).await;
    }
    let mut act = actuator(&s.docker.host, Duration::from_secs(20));
    s.proxy.set_mode(mode).await.unwrap();
    let now = Instant::now();
    let state = one_attempt(&mut act, &s.image, now).await;
    let err = match state {
        ImageState::Waiting { last_error, .. } | ImageState::Escalated { last_error, .. } => {
            last_error
        }
        other => panic!("expected a failure, got {other:?}"),
    };
    // Whatever the class, the reference is paced, not given up on.
    match act.ensure(&s.image, now + Duration::from_secs(4)) {
        ImageState::Waiting { until, .. } | ImageState::Escalated { until, .. } => {
            assert!(until >= now + Duration::from_secs(5));
        }
        other => panic!("expected paced, got {other:?}"),
    }
    s.cleanup().await;
    Some(err)
}

/// A listener in front of `upstream` that answers a TLS ClientHello (a first byte 0x16, a
/// handshake record) with `400 Bad Request` in plain HTTP and closes, as a plain-HTTP registry
/// does, and relays every other connection to `upstream`. It stops listening when dropped.
struct PlainHttpFront {
    addr: std::net::SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PlainHttpFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn plain_http_front(upstream: std::net::SocketAddr) -> PlainHttpFront {
    use tokio::io::AsyncWriteExt as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut first = [0u8; 1];
                if client.peek(&mut first).await.is_ok_and(|n| n == 1) && first[0] == 0x16 {
                    let _ = client
                        .write_all(b"HTTP/1.0 400 Bad Request\r\n\r\nA TLS handshake was sent to a plain-HTTP server.\n")
                        .await;
                    let _ = client.shutdown().await;
                    return;
                }
                if let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    PlainHttpFront { addr, task }
}

fn registry_error_body(code: &str, message: &str) -> String {
    format!(r#"{{"errors":[{{"code":"{code}","message":"{message}","detail":null}}]}}"#)
}

// r[verify actuate.image.classify+2]
#[tokio::test]
async fn manifest_unknown_is_not_found() {
    let Some(err) = classify_through(Mode::HttpStatus {
        status: 404,
        retry_after: None,
        body: registry_error_body("MANIFEST_UNKNOWN", "manifest unknown"),
    })
    .await
    else {
        return;
    };
    eprintln!("404: {err:?}");
    assert_eq!(err.kind, PullErrorKind::NotFound, "{err}");
}

// r[verify actuate.image.classify+2]
#[tokio::test]
async fn a_missing_tag_in_the_real_registry_is_not_found() {
    let Some(docker) = services::docker() else {
        return;
    };
    let Some(registry) = services::registry() else {
        return;
    };
    let mut act = actuator(&docker.host, Duration::from_secs(20));
    let image = format!("{}/holdfast/busybox:no-such-tag", registry.addr);
    let state = one_attempt(&mut act, &image, Instant::now()).await;
    let ImageState::Escalated { last_error, .. } = &state else {
        panic!("not found files its fault at once; got {state:?}");
    };
    assert_eq!(last_error.kind, PullErrorKind::NotFound, "{last_error}");
    assert_eq!(last_error.status.map(|s| s.as_u16()), Some(404));
}

// r[verify actuate.image.classify+2]
// r[verify actuate.image.classify.policy]
#[tokio::test]
async fn a_registry_429_with_retry_after_is_rate_limited_and_paced() {
    let Some(err) = classify_through(Mode::HttpStatus {
        status: 429,
        retry_after: Some("42".into()),
        body: registry_error_body("TOOMANYREQUESTS", "slow down"),
    })
    .await
    else {
        return;
    };
    eprintln!("429+Retry-After: {err:?}");
    assert_eq!(err.kind, PullErrorKind::RateLimited, "{err}");
    // dockerd does not forward the registry's Retry-After: there is no typed hint to honour.
    assert_eq!(err.retry_after, None);
}

// r[verify actuate.image.classify+2]
#[tokio::test]
async fn a_registry_429_without_retry_after_is_rate_limited() {
    let Some(err) = classify_through(Mode::HttpStatus {
        status: 429,
        retry_after: None,
        body: registry_error_body("TOOMANYREQUESTS", "slow down"),
    })
    .await
    else {
        return;
    };
    eprintln!("429: {err:?}");
    assert_eq!(err.kind, PullErrorKind::RateLimited, "{err}");
}

// r[verify actuate.image.classify+2]
#[tokio::test]
async fn a_registry_500_is_a_registry_error() {
    let Some(err) = classify_through(Mode::status(500)).await else {
        return;
    };
    eprintln!("500: {err:?}");
    assert_eq!(err.kind, PullErrorKind::RegistryError, "{err}");
}

// r[verify actuate.image.classify+2]
#[tokio::test]
async fn a_reset_registry_is_unreachable() {
    let Some(err) = classify_through(Mode::Reset).await else {
        return;
    };
    assert_eq!(err.kind, PullErrorKind::RegistryUnreachable, "{err}");
}

/// A stand-in for "dockerd starts": a Unix socket that appears at `path` and forwards every
/// connection to the real daemon's socket.
async fn serve_socket(path: &Path, daemon_socket: &Path) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::UnixListener::bind(path).unwrap();
    let daemon_socket = daemon_socket.to_owned();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let daemon_socket = daemon_socket.clone();
            tokio::spawn(async move {
                if let Ok(mut daemon) = tokio::net::UnixStream::connect(&daemon_socket).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut daemon).await;
                }
            });
        }
    })
}

// r[verify actuate.image.daemon+2]
// r[verify actuate.image.daemon.connect]
#[tokio::test]
async fn a_missing_daemon_socket_is_paced_and_recovers_when_the_daemon_appears() {
    let Some(s) = setup().await else { return };
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("docker.sock");
    let host = format!("unix://{}", socket.display());
    let mut act = actuator(&host, Duration::from_secs(60));
    let t0 = Instant::now();
    let mut clock = t0;
    let mut failures_seen = Vec::new();
    // 200 simulated seconds without a daemon.
    while clock <= t0 + Duration::from_secs(200) {
        let state = act.ensure(&s.image, clock);
        act.settle(clock).await;
        match act.ensure(&s.image, clock) {
            ImageState::DaemonUnreachable {
                failures,
                last_error,
                until,
            } => {
                assert_eq!(last_error.kind, PullErrorKind::DaemonUnreachable);
                assert!(until > clock || failures == 0);
                if failures_seen.last() != Some(&failures) {
                    failures_seen.push(failures);
                }
            }
            other => panic!("expected daemon unreachable, got {other:?} (before: {state:?})"),
        }
        // The outage is the daemon's: the reference's own streak never grows, not even by the
        // attempt that found the daemon missing.
        assert_eq!(
            act.reference_failures(&s.image),
            0,
            "the reference's streak at {:?}",
            clock - t0
        );
        clock += Duration::from_secs(1);
    }
    // Paced: 1 at 0 s, then probes at 5, 15, 35, 75, 155 s (nominal; jitter only delays).
    eprintln!("DAEMON: failures seen {failures_seen:?} in 200 simulated s");
    assert!(failures_seen.len() <= 6, "{failures_seen:?}");
    assert!(failures_seen.len() >= 4, "{failures_seen:?}");
    assert!(
        act.faults()
            .iter()
            .any(|f| f.subject == FaultSubject::Daemon.subject()),
        "daemon fault at the threshold: {:?}",
        act.faults()
    );
    assert!(
        !act.faults()
            .iter()
            .any(|f| f.subject.name.starts_with("image ")),
        "no fault against the image: {:?}",
        act.faults()
    );
    // The daemon appears. Within one cap interval a probe finds it and the pull goes through.
    let server = serve_socket(&socket, &s.docker.socket).await;
    let deadline = clock + policy().max_wait() + Duration::from_secs(1);
    let mut present = false;
    while clock <= deadline {
        act.ensure(&s.image, clock);
        act.settle(clock).await;
        assert_eq!(act.reference_failures(&s.image), 0);
        if act.ensure(&s.image, clock) == ImageState::Present {
            present = true;
            break;
        }
        clock += Duration::from_secs(1);
    }
    assert!(present, "the image was pulled once the daemon answered");
    assert!(
        act.faults().is_empty(),
        "daemon fault cleared: {:?}",
        act.faults()
    );
    server.abort();
    s.cleanup().await;
}
