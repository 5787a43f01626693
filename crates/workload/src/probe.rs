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

/// Probes `container` for as long as the task lives, sending each changed verdict on `tx`.
/// The caller aborts the task when the container is no longer the workload's running one.
pub(crate) async fn run<T>(
    host: String,
    container: String,
    check: HealthCheck,
    started: Instant,
    tx: tokio::sync::mpsc::UnboundedSender<T>,
    wrap: fn(ContainerEvent) -> T,
) {
    let mut prober = Prober::new(&check, started);
    let mut docker: Option<Docker> = None;
    loop {
        tokio::time::sleep_until(tokio::time::Instant::from_std(prober.due())).await;
        let began = Instant::now();
        let outcome = tokio::time::timeout(check.timeout, async {
            if docker.is_none() {
                docker = Some(
                    crate::docker::connect(&host)
                        .await
                        .map_err(|e| format!("docker: {e}"))?,
                );
            }
            let docker = docker.as_ref().ok_or("docker: not connected")?;
            let ip = address(docker, &container).await?;
            probe_once(&check, ip).await
        })
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "no answer within {}",
                holdfast_retry::duration_text::format(check.timeout)
            ))
        });
        let output = match &outcome {
            Ok(()) => Vec::new(),
            Err(e) => vec![e.clone()],
        };
        if let Err(e) = &outcome {
            tracing::debug!(%container, error = %e, "health probe failed");
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

/// The container's address: its IP on the first network that gives it one (by network name,
/// so the choice is stable), loopback for a container on the host's network.
async fn address(docker: &Docker, container: &str) -> Result<IpAddr, String> {
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
        return Ok(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    let networks = inspect
        .network_settings
        .and_then(|n| n.networks)
        .unwrap_or_default();
    let mut names: Vec<&String> = networks.keys().collect();
    names.sort();
    names
        .into_iter()
        .filter_map(|n| networks.get(n))
        .flat_map(|e| [e.ip_address.as_deref(), e.global_ipv6_address.as_deref()])
        .flatten()
        .find_map(|ip| ip.parse::<IpAddr>().ok())
        .ok_or_else(|| "the container has no address on any network".to_owned())
}

/// One probe against `ip`: `Ok` when it passed, else what happened.
async fn probe_once(check: &HealthCheck, ip: IpAddr) -> Result<(), String> {
    match check.node_probe() {
        Some(NodeProbe::Tcp(tcp)) => {
            let addr = SocketAddr::new(ip, tcp.port);
            tokio::net::TcpStream::connect(addr)
                .await
                .map(drop)
                .map_err(|e| format!("connect {addr}: {e}"))
        }
        Some(NodeProbe::Http(http)) => {
            let addr = SocketAddr::new(ip, http.port);
            let url = format!("http://{addr}{}", http.path);
            let stream = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| format!("GET {url}: {e}"))?;
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| format!("GET {url}: {e}"))?;
            let conn = tokio::spawn(conn);
            let request = hyper::Request::get(http.path.as_str())
                .header(hyper::header::HOST, addr.to_string())
                .header(hyper::header::USER_AGENT, "holdfast-health-probe")
                .body(Empty::<Bytes>::new())
                .map_err(|e| format!("GET {url}: {e}"))?;
            let answer = sender.send_request(request).await;
            conn.abort();
            let status = answer.map_err(|e| format!("GET {url}: {e}"))?.status();
            if status.is_success() || status.is_redirection() {
                Ok(())
            } else {
                Err(format!("GET {url}: {status}"))
            }
        }
        None => Err("not a node probe".to_owned()),
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
