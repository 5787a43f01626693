//! What does the real work of an attempt: the [`Fetcher`] trait, and [`DockerFetcher`], which
//! talks to a Docker Engine API endpoint and caches its connection.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;
use tokio::sync::{Mutex, watch};

use crate::classify::{PullError, PullErrorKind};
use crate::client::{DaemonEndpoint, Fetched, fetch, within};
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
        let docker = within(
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

    // r[verify actuate.image.watchdog+2]
    #[tokio::test(start_paused = true)]
    async fn a_daemon_that_accepts_and_never_answers_stalls_the_probe_within_the_bound() {
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
        assert_eq!(err.kind, PullErrorKind::Stalled, "{err}");
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(5),
            "the stall bound, not bollard's 120 s"
        );
    }
}
