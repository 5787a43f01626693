//! The node's own health probes (`health.http`, `health.tcp`): the kubelet's model, for images
//! that have no `wget`, `curl` or `nc` for a check run inside the container.
//!
//! [`Prober`] is the pure decision (when to probe, which failures count, when the verdict
//! changes), driven by the caller's clock; [`run`] is the shell that inspects the container for
//! its address, makes the probe with hyper or a `TcpStream` within the timeout, and reports each
//! changed verdict as the same [`ContainerEvent::Health`] the daemon's checks produce.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::query_parameters::InspectContainerOptions;
use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::rt::TokioIo;

use crate::reconciler::ContainerEvent;
use crate::shape::{HealthCheck, NodeProbe};
use crate::state::HealthStatus;

// r[impl workload.health.probe]
/// The decision core of one container's node-side probe: when the next probe is due, which
/// failures count (none within the start period until a probe has passed), and when the verdict
/// changes (`retries` counted failures in a row: unhealthy; a pass: healthy).
#[derive(Debug, Clone)]
pub struct Prober {
    interval: Duration,
    retries: u32,
    counted_from: Instant,
    passed_once: bool,
    failures: u32,
    next: Instant,
    verdict: HealthStatus,
}

impl Prober {
    /// A prober for a container started (or adopted) at `started`.
    pub fn new(check: &HealthCheck, started: Instant) -> Self {
        Prober {
            interval: check.interval,
            retries: check.retries.max(1),
            counted_from: started + check.start_period,
            passed_once: false,
            failures: 0,
            next: started + check.interval,
            verdict: HealthStatus::Starting,
        }
    }

    /// When the next probe is due.
    pub fn due(&self) -> Instant {
        self.next
    }

    /// The current verdict.
    pub fn verdict(&self) -> HealthStatus {
        self.verdict
    }

    /// Failures counted in a row.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// A round begun at `began` in which the container's address could not be looked up (the
    /// daemon unreachable, slow or restarting): no probe of the container was made, so nothing is
    /// counted; the next round is an interval later.
    pub fn skip(&mut self, began: Instant) {
        self.next = began + self.interval;
    }

    /// A probe begun at `began` passed or not; returns the new verdict when it changed.
    pub fn record(&mut self, began: Instant, passed: bool) -> Option<HealthStatus> {
        self.next = began + self.interval;
        let before = self.verdict;
        if passed {
            self.passed_once = true;
            self.failures = 0;
            self.verdict = HealthStatus::Healthy;
        } else if self.passed_once || began >= self.counted_from {
            self.failures = self.failures.saturating_add(1);
            if self.failures >= self.retries {
                self.verdict = HealthStatus::Unhealthy;
            }
        }
        (self.verdict != before).then_some(self.verdict)
    }
}

/// How long the shell waits for the daemon to tell it a container's address: the lookup is not
/// part of the probe (a slow daemon is not an unhealthy container), but a hung one must not stall
/// the probe's task for ever.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

// r[impl workload.health.probe]
/// Probes `container` for as long as the task lives, sending each changed verdict on `tx`.
/// The caller aborts the task when the container is no longer the workload's running one.
/// `network` is the daemon's name of the workload's configured network, preferred when the
/// container has an address on several.
///
/// The container's address is looked up once, outside the probe's timeout, and again only after
/// a probe could not connect: a round in which the daemon cannot say it (unreachable, slow,
/// restarting) is skipped, not counted against the container.
pub(crate) async fn run<T>(
    host: String,
    container: String,
    network: Option<String>,
    check: HealthCheck,
    started: Instant,
    tx: tokio::sync::mpsc::UnboundedSender<T>,
    wrap: fn(ContainerEvent) -> T,
) {
    let mut prober = Prober::new(&check, started);
    let mut docker: Option<Docker> = None;
    let mut target: Option<Target> = None;
    loop {
        tokio::time::sleep_until(tokio::time::Instant::from_std(prober.due())).await;
        // The task's clock is tokio's (paused in tests); the core takes its std instants.
        let began = tokio::time::Instant::now().into_std();
        let found = match target.take() {
            Some(found) => found,
            None => {
                let lookup = lookup(&mut docker, &host, &container, network.as_deref());
                match tokio::time::timeout(LOOKUP_TIMEOUT, lookup).await {
                    Ok(Ok(found)) => found,
                    Ok(Err(e)) => {
                        tracing::debug!(%container, error = %e, "health probe skipped: no address");
                        prober.skip(began);
                        continue;
                    }
                    Err(_) => {
                        tracing::debug!(%container, "health probe skipped: the daemon is slow");
                        docker = None;
                        prober.skip(began);
                        continue;
                    }
                }
            }
        };
        let outcome = tokio::time::timeout(check.timeout, probe_once(&check, found.ip))
            .await
            .unwrap_or(Err(Failure::TimedOut));
        let output = match &outcome {
            Ok(()) => Vec::new(),
            Err(failure) => vec![failure.text(&found, check.timeout)],
        };
        if let Err(failure) = &outcome {
            tracing::debug!(%container, error = %output[0], "health probe failed");
            if failure.reconnect() {
                // The container may have moved (a restart, a network change): ask again.
                target = None;
            } else {
                target = Some(found);
            }
        } else {
            target = Some(found);
        }
        if let Some(status) = prober.record(began, outcome.is_ok()) {
            let event = ContainerEvent::Health {
                id: container.clone(),
                status,
                output,
            };
            if tx.send(wrap(event)).is_err() {
                return;
            }
        }
    }
}

/// Where a container is probed: its address and the network that gave it.
#[derive(Debug, Clone)]
struct Target {
    ip: IpAddr,
    network: String,
}

/// The container's [`Target`], through a client connected once and again after an error.
async fn lookup(
    docker: &mut Option<Docker>,
    host: &str,
    container: &str,
    network: Option<&str>,
) -> Result<Target, String> {
    if docker.is_none() {
        *docker = Some(
            crate::docker::connect(host)
                .await
                .map_err(|e| format!("docker: {e}"))?,
        );
    }
    let client = docker.as_ref().ok_or("docker: not connected")?;
    let found = address(client, container, network).await;
    if found.is_err() {
        *docker = None;
    }
    found
}

/// Why a probe failed.
#[derive(Debug)]
enum Failure {
    /// No connection; `unreachable`: no route to the address (EHOSTUNREACH, ENETUNREACH).
    Connect { message: String, unreachable: bool },
    /// Connected, but the answer was not a pass.
    Answer(String),
    /// Nothing within the timeout.
    TimedOut,
}

impl Failure {
    fn connect(what: String, e: &std::io::Error) -> Self {
        let unreachable = matches!(
            e.kind(),
            std::io::ErrorKind::HostUnreachable | std::io::ErrorKind::NetworkUnreachable
        );
        Failure::Connect {
            message: format!("{what}: {e}"),
            unreachable,
        }
    }

    /// Whether the address is to be looked up again before the next probe.
    fn reconnect(&self) -> bool {
        !matches!(self, Failure::Answer(_))
    }

    // r[impl workload.health.probe]
    /// The probe's output: a timeout or no route says the node could not reach the container
    /// on its network (the node must be able to route to it).
    fn text(&self, target: &Target, timeout: Duration) -> String {
        let unreach = format!(
            "the node could not reach {} on {}",
            target.ip, target.network
        );
        match self {
            Failure::Connect {
                message,
                unreachable: true,
            } => format!("{unreach}: {message}"),
            Failure::Connect { message, .. } | Failure::Answer(message) => message.clone(),
            Failure::TimedOut => format!(
                "{unreach}: no answer within {}",
                holdfast_retry::duration_text::format(timeout)
            ),
        }
    }
}

// r[impl workload.health.probe]
/// The container's address: its IP on `preferred` (the workload's own network) when it has one
/// there, else on the first network that gives it one (by network name, so the choice is
/// stable); loopback for a container on the host's network.
async fn address(
    docker: &Docker,
    container: &str,
    preferred: Option<&str>,
) -> Result<Target, String> {
    let inspect = docker
        .inspect_container(container, None::<InspectContainerOptions>)
        .await
        .map_err(|e| format!("inspect: {e}"))?;
    let host_mode = inspect
        .host_config
        .as_ref()
        .and_then(|h| h.network_mode.as_deref())
        == Some("host");
    if host_mode {
        return Ok(Target {
            ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            network: "host".to_owned(),
        });
    }
    let networks = inspect
        .network_settings
        .and_then(|n| n.networks)
        .unwrap_or_default();
    let mut names: Vec<&String> = networks.keys().collect();
    names.sort_by_key(|n| (Some(n.as_str()) != preferred, n.as_str()));
    names
        .into_iter()
        .filter_map(|n| networks.get(n).map(|e| (n, e)))
        .flat_map(|(n, e)| {
            [e.ip_address.as_deref(), e.global_ipv6_address.as_deref()]
                .into_iter()
                .flatten()
                .map(move |ip| (n, ip))
        })
        .find_map(|(n, ip)| {
            ip.parse::<IpAddr>().ok().map(|ip| Target {
                ip,
                network: n.clone(),
            })
        })
        .ok_or_else(|| "the container has no address on any network".to_owned())
}

/// One probe against `ip`: `Ok` when it passed, else what happened.
async fn probe_once(check: &HealthCheck, ip: IpAddr) -> Result<(), Failure> {
    match check.node_probe() {
        Some(NodeProbe::Tcp(tcp)) => {
            let addr = SocketAddr::new(ip, tcp.port);
            tokio::net::TcpStream::connect(addr)
                .await
                .map(drop)
                .map_err(|e| Failure::connect(format!("connect {addr}"), &e))
        }
        Some(NodeProbe::Http(http)) => {
            let addr = SocketAddr::new(ip, http.port);
            let url = format!("http://{addr}{}", http.path);
            let stream = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| Failure::connect(format!("GET {url}"), &e))?;
            let answer = |e: &dyn std::fmt::Display| Failure::Answer(format!("GET {url}: {e}"));
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| answer(&e))?;
            let conn = tokio::spawn(conn);
            // Aborted however this future ends (a timeout drops it): the connection is closed.
            let _conn = AbortOnDrop(conn);
            let request = hyper::Request::get(http.path.as_str())
                .header(hyper::header::HOST, addr.to_string())
                .header(hyper::header::USER_AGENT, "holdfast-health-probe")
                .body(Empty::<Bytes>::new())
                .map_err(|e| answer(&e))?;
            let status = sender
                .send_request(request)
                .await
                .map_err(|e| answer(&e))?
                .status();
            if status.is_success() || status.is_redirection() {
                Ok(())
            } else {
                Err(answer(&status))
            }
        }
        None => Err(Failure::Answer("not a node probe".to_owned())),
    }
}

/// Aborts the task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<Result<(), hyper::Error>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(interval_ms: u64, start_period_ms: u64, retries: u32) -> HealthCheck {
        HealthCheck {
            tcp: Some(crate::shape::TcpProbe { port: 5432 }),
            interval: Duration::from_millis(interval_ms),
            timeout: Duration::from_millis(100),
            start_period: Duration::from_millis(start_period_ms),
            retries,
            ..HealthCheck::default()
        }
    }

    // r[verify workload.health.probe]
    #[test]
    fn a_round_whose_address_lookup_failed_counts_nothing() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut p = Prober::new(&check(500, 0, 2), t0);
        assert_eq!(p.record(t0 + ms(500), true), Some(HealthStatus::Healthy));
        assert_eq!(p.record(t0 + ms(1000), false), None);
        assert_eq!(p.failures(), 1);
        // The daemon restarts: rounds skipped, the count and the verdict as they were.
        for at in [1500, 2000, 2500] {
            p.skip(t0 + ms(at));
            assert_eq!(p.failures(), 1);
            assert_eq!(p.verdict(), HealthStatus::Healthy);
            assert_eq!(p.due(), t0 + ms(at + 500));
        }
        assert_eq!(p.record(t0 + ms(3000), true), None);
        assert_eq!(p.failures(), 0);
    }

    // r[verify workload.health.probe]
    #[test]
    fn the_first_probe_is_an_interval_after_the_start_and_each_next_after_the_last_began() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut p = Prober::new(&check(500, 0, 3), t0);
        assert_eq!(p.due(), t0 + ms(500));
        assert_eq!(p.verdict(), HealthStatus::Starting);
        p.record(t0 + ms(500), false);
        assert_eq!(p.due(), t0 + ms(1000));
        // A probe that began late: the next is an interval after it began.
        p.record(t0 + ms(1300), false);
        assert_eq!(p.due(), t0 + ms(1800));
    }

    // r[verify workload.health.probe]
    #[test]
    fn retries_failures_in_a_row_are_unhealthy_and_a_pass_is_healthy() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut p = Prober::new(&check(500, 0, 3), t0);
        assert_eq!(p.record(t0 + ms(500), true), Some(HealthStatus::Healthy));
        assert_eq!(p.record(t0 + ms(1000), true), None, "no change, no verdict");
        assert_eq!(p.record(t0 + ms(1500), false), None);
        assert_eq!(p.record(t0 + ms(2000), false), None);
        // A pass between failures starts the count again.
        assert_eq!(p.record(t0 + ms(2500), true), None);
        assert_eq!(p.failures(), 0);
        assert_eq!(p.record(t0 + ms(3000), false), None);
        assert_eq!(p.record(t0 + ms(3500), false), None);
        assert_eq!(
            p.record(t0 + ms(4000), false),
            Some(HealthStatus::Unhealthy)
        );
        assert_eq!(p.record(t0 + ms(4500), false), None, "still unhealthy");
        assert_eq!(p.record(t0 + ms(5000), true), Some(HealthStatus::Healthy));
    }

    // r[verify workload.health.probe]
    #[test]
    fn a_check_that_never_passes_is_unhealthy_after_retries_probes_never_before() {
        let t0 = Instant::now();
        for retries in 1..=5 {
            let mut p = Prober::new(&check(200, 0, retries), t0);
            for n in 1..=retries {
                let at = p.due();
                let change = p.record(at, false);
                if n < retries {
                    assert_eq!(change, None, "retries {retries}, failure {n}");
                } else {
                    assert_eq!(change, Some(HealthStatus::Unhealthy), "retries {retries}");
                }
            }
        }
    }

    // r[verify workload.health.probe]
    #[test]
    fn failures_within_the_start_period_do_not_count_until_a_probe_passed() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut p = Prober::new(&check(500, 2000, 1), t0);
        for at in [500, 1000, 1500] {
            assert_eq!(
                p.record(t0 + ms(at), false),
                None,
                "within the start period"
            );
            assert_eq!(p.verdict(), HealthStatus::Starting);
        }
        assert_eq!(
            p.record(t0 + ms(2000), false),
            Some(HealthStatus::Unhealthy),
            "counted from the end of the start period"
        );
        // A pass within the start period ends it: the next failure counts.
        let mut p = Prober::new(&check(500, 10_000, 1), t0);
        assert_eq!(p.record(t0 + ms(500), true), Some(HealthStatus::Healthy));
        assert_eq!(
            p.record(t0 + ms(1000), false),
            Some(HealthStatus::Unhealthy)
        );
    }
}

#[cfg(test)]
mod io_tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn http(port: u16) -> HealthCheck {
        HealthCheck {
            http: Some(crate::shape::HttpProbe {
                port,
                path: "/h".into(),
            }),
            ..HealthCheck::default()
        }
    }

    // A server that reads the request and never answers: the probe times out, and its
    // connection (the spawned hyper conn task) is closed with it.
    // r[verify workload.health.probe]
    #[tokio::test]
    async fn a_timed_out_http_probe_closes_its_connection() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let _ = s.read(&mut buf).await.unwrap();
            // Wait for EOF from the client.
            let n = tokio::time::timeout(Duration::from_secs(3), s.read(&mut buf)).await;
            matches!(n, Ok(Ok(0)) | Ok(Err(_)))
        });
        let r = tokio::time::timeout(
            Duration::from_millis(200),
            probe_once(&http(port), IpAddr::V4(Ipv4Addr::LOCALHOST)),
        )
        .await;
        assert!(r.is_err(), "timed out");
        assert!(
            server.await.unwrap(),
            "the probe's connection was left open after its timeout"
        );
    }

    // A 3xx passes without being followed; an answer that is not HTTP fails.
    // r[verify workload.health.probe]
    #[tokio::test]
    async fn a_redirect_passes_and_garbage_fails() {
        for (answer, want) in [
            (&b"HTTP/1.1 302 Found\r\nLocation: http://10.255.255.1/\r\nContent-Length: 0\r\n\r\n"[..], true),
            (&b"garbage\r\n\r\n"[..], false),
            (&b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n"[..], true),
        ] {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = l.local_addr().unwrap().port();
            let a = answer.to_vec();
            tokio::spawn(async move {
                let (mut s, _) = l.accept().await.unwrap();
                let mut buf = vec![0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(&a).await;
                tokio::time::sleep(Duration::from_secs(2)).await;
            });
            let r = tokio::time::timeout(
                Duration::from_millis(500),
                probe_once(&http(port), IpAddr::V4(Ipv4Addr::LOCALHOST)),
            )
            .await;
            assert_eq!(matches!(r, Ok(Ok(()))), want, "{:?}: {r:?}", String::from_utf8_lossy(answer));
        }
    }
}
