//! What does the real work of an attempt: the [`Fetcher`] trait, and [`DockerFetcher`], which
//! talks to a Docker Engine API endpoint and caches its connection.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;
use tokio::sync::{Mutex, watch};

use crate::classify::{PullError, PullErrorKind};
use crate::client::{DaemonEndpoint, Fetched, daemon_within, fetch};
use crate::progress::PullProgress;

/// A boxed future, so that [`Fetcher`] stays object-safe.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What does the real work of an attempt. [`DockerFetcher`] is the one that talks to a daemon;
/// tests of the actuator's bookkeeping may supply their own to control when attempts finish.
pub trait Fetcher: Send + Sync + 'static {
    /// Makes `reference` present (inspect, then pull if absent), publishing progress.
    fn fetch(
        &self,
        reference: String,
        progress: watch::Sender<PullProgress>,
    ) -> BoxFuture<Result<Fetched, PullError>>;

    /// Checks that the daemon answers (used while it is known to be unreachable).
    fn probe(&self) -> BoxFuture<Result<(), PullError>>;
}

/// A [`Fetcher`] over a Docker Engine API endpoint. Connects lazily, and reconnects (renegotiating
/// the API version) after the daemon was unreachable.
#[derive(Clone)]
pub struct DockerFetcher {
    inner: Arc<DockerFetcherInner>,
}

struct DockerFetcherInner {
    endpoint: DaemonEndpoint,
    stall_timeout: Duration,
    connection: Mutex<Option<Docker>>,
}

impl DockerFetcher {
    /// A fetcher for `endpoint` whose pulls are abandoned after `stall_timeout` without progress.
    pub fn new(endpoint: DaemonEndpoint, stall_timeout: Duration) -> Self {
        DockerFetcher {
            inner: Arc::new(DockerFetcherInner {
                endpoint,
                stall_timeout,
                connection: Mutex::new(None),
            }),
        }
    }

    /// The endpoint this fetcher talks to.
    pub fn endpoint(&self) -> &DaemonEndpoint {
        &self.inner.endpoint
    }
}

impl DockerFetcherInner {
    async fn docker(&self) -> Result<Docker, PullError> {
        if let Some(docker) = self.connection.lock().await.as_ref() {
            return Ok(docker.clone());
        }
        // Connect without holding the lock, so a daemon that never answers holds up only this
        // attempt (for at most the stall bound), not every other attempt waiting for the lock.
        let docker = daemon_within(
            self.stall_timeout,
            "connect and version negotiation",
            self.endpoint.connect(),
        )
        .await?;
        Ok(self.connection.lock().await.get_or_insert(docker).clone())
    }

    async fn forget_connection_after(&self, err: &PullError) {
        if err.kind == PullErrorKind::DaemonUnreachable {
            *self.connection.lock().await = None;
        }
    }
}

impl Fetcher for DockerFetcher {
    fn fetch(
        &self,
        reference: String,
        progress: watch::Sender<PullProgress>,
    ) -> BoxFuture<Result<Fetched, PullError>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let result = match inner.docker().await {
                Ok(docker) => fetch(&docker, &reference, inner.stall_timeout, &progress).await,
                Err(err) => Err(err),
            };
            if let Err(err) = &result {
                inner.forget_connection_after(err).await;
            }
            result
        })
    }

    fn probe(&self) -> BoxFuture<Result<(), PullError>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            *inner.connection.lock().await = None;
            inner.docker().await.map(|_| ())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A daemon socket that accepts connections; each request head is answered by `answer`
    /// (given the request line), or never when it returns `None`.
    fn fake_daemon(
        socket: &std::path::Path,
        answer: fn(&str) -> Option<String>,
    ) -> tokio::task::JoinHandle<()> {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::UnixListener::bind(socket).unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((mut stream, _)) = listener.accept().await {
                held.push(tokio::spawn(async move {
                    let mut seen = Vec::new();
                    let mut buf = [0u8; 4096];
                    loop {
                        let Ok(n) = stream.read(&mut buf).await else { return };
                        if n == 0 {
                            return;
                        }
                        seen.extend_from_slice(&buf[..n]);
                        let text = String::from_utf8_lossy(&seen).into_owned();
                        let Some(end) = text.find("\r\n\r\n") else { continue };
                        let line = text.lines().next().unwrap_or_default().to_owned();
                        seen.drain(..end + 4);
                        match answer(&line) {
                            Some(body) => {
                                let response = format!(
                                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                                    body.len()
                                );
                                if stream.write_all(response.as_bytes()).await.is_err() {
                                    return;
                                }
                            }
                            // Holds the connection open and silent.
                            None => std::future::pending::<()>().await,
                        }
                    }
                }));
            }
        })
    }

    fn endpoint(socket: &std::path::Path) -> DaemonEndpoint {
        DaemonEndpoint::from_docker_host(Some(&format!("unix://{}", socket.display())))
    }

    // r[verify actuate.image.daemon.hung+2]
    #[tokio::test(start_paused = true)]
    async fn a_daemon_that_accepts_and_never_answers_is_unreachable_for_a_pull_within_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("docker.sock");
        let _daemon = fake_daemon(&socket, |_| None);
        let fetcher = DockerFetcher::new(endpoint(&socket), Duration::from_secs(5));
        let start = tokio::time::Instant::now();
        let (progress, _) = watch::channel(PullProgress::default());
        let err = fetcher
            .fetch("reg/app:1".into(), progress)
            .await
            .expect_err("the daemon never answers");
        assert_eq!(err.kind, PullErrorKind::DaemonUnreachable, "{err}");
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }

    // r[verify actuate.image.daemon.hung+2]
    #[tokio::test(start_paused = true)]
    async fn a_daemon_that_negotiates_and_never_answers_the_inspect_is_unreachable() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("docker.sock");
        let _daemon = fake_daemon(&socket, |line| {
            line.contains("/version")
                .then(|| r#"{"ApiVersion":"1.41","MinAPIVersion":"1.12"}"#.to_owned())
        });
        let fetcher = DockerFetcher::new(endpoint(&socket), Duration::from_secs(5));
        let start = tokio::time::Instant::now();
        let (progress, _) = watch::channel(PullProgress::default());
        let err = fetcher
            .fetch("reg/app:1".into(), progress)
            .await
            .expect_err("the daemon never answers the inspect");
        assert_eq!(err.kind, PullErrorKind::DaemonUnreachable, "{err}");
        assert!(err.message.contains("image inspect"), "{err}");
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(5),
            "one bound, for the inspect"
        );
    }

    // r[verify actuate.image.daemon.hung+2]
    #[tokio::test(start_paused = true)]
    async fn a_hung_daemon_is_one_daemon_fault_that_says_so_and_counts_against_no_image() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("docker.sock");
        let _daemon = fake_daemon(&socket, |_| None);
        let config = crate::PullConfig::builder(7)
            .stall_timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        let mut actuator = crate::Actuator::new(
            DockerFetcher::new(endpoint(&socket), config.stall_timeout()),
            config,
        )
        .unwrap();
        let images = ["reg/a:1", "reg/b:1"];
        let t0 = std::time::Instant::now();
        // Twenty minutes of ticks: far past the daemon's escalation threshold on its schedule.
        for step in 0..120u64 {
            let now = t0 + Duration::from_secs(10 * step);
            for image in images {
                actuator.ensure(image, now);
            }
            actuator.settle(now).await;
        }
        let faults = actuator.faults();
        assert_eq!(
            faults.len(),
            1,
            "one fault for the daemon, none per image: {faults:?}"
        );
        let fault = &faults[0];
        assert_eq!(fault.subject, crate::FaultSubject::Daemon.subject());
        assert_eq!(fault.kind, PullErrorKind::DaemonUnreachable.as_str());
        assert!(
            fault
                .message
                .contains("the daemon accepts connections but does not answer"),
            "{fault:?}"
        );
        assert!(
            fault.message.contains("connect and version negotiation"),
            "names the request that went unanswered: {fault:?}"
        );
        for image in images {
            assert_eq!(actuator.reference_failures(image), 0, "{image}");
            assert!(matches!(
                actuator.status(image),
                Some(crate::ImageState::DaemonUnreachable { .. })
            ));
        }
    }

    // r[verify actuate.image.watchdog+3]
    // r[verify actuate.image.daemon.hung+2]
    #[tokio::test(start_paused = true)]
    async fn a_daemon_that_accepts_and_never_answers_fails_the_probe_within_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("docker.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        // Accepts connections and never answers on them.
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        let fetcher = DockerFetcher::new(
            DaemonEndpoint::from_docker_host(Some(&format!("unix://{}", socket.display()))),
            Duration::from_secs(5),
        );
        let start = tokio::time::Instant::now();
        let err = fetcher.probe().await.expect_err("the daemon never answers");
        assert_eq!(err.kind, PullErrorKind::DaemonUnreachable, "{err}");
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(5),
            "the stall bound, not bollard's 120 s"
        );
    }
}
