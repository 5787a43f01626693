//! Reaching the daemon the way the Docker CLI does, and pulling one reference through it.
//!
//! The endpoint is `DOCKER_HOST` when set, else the default socket `unix:///var/run/docker.sock`.
//! Podman's Docker-compatible service works the same way: point `DOCKER_HOST` at its socket
//! (`unix:///run/podman/podman.sock`, or `$XDG_RUNTIME_DIR/podman/podman.sock` rootless). The API
//! version is negotiated on connect (bollard's `negotiate_version`), so an older daemon — Debian
//! 12's dockerd speaks API 1.41 — is addressed in its own version.
//!
//! Connecting is lazy and repeated: a missing socket is a daemon-unreachable failure of that
//! attempt, not an error at construction, and after a daemon-unreachable failure the next attempt
//! reconnects (and renegotiates, since the daemon may have been upgraded while it was down).

use std::future::Future;
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::CreateImageOptionsBuilder;
use tokio::sync::watch;

use crate::classify::{PullError, PullErrorKind, classify_bollard};
use crate::credentials::{Credentials, RegistryAuth, registry_host};
pub use crate::daemon_wait::daemon_within;
use crate::progress::{ProgressTracker, PullProgress};
use crate::reference::ImageReference;
use crate::watchdog::{Watched, drive};

/// The default daemon endpoint when `DOCKER_HOST` is not set.
pub const DEFAULT_DOCKER_HOST: &str = "unix:///var/run/docker.sock";

/// Where the daemon listens, as a `DOCKER_HOST`-style URL (`unix://…`, `tcp://…`, `http://…`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonEndpoint {
    host: String,
}

impl DaemonEndpoint {
    // r[impl actuate.image.daemon.connect]
    /// The endpoint the Docker CLI would use: `DOCKER_HOST` if set and not empty, else the
    /// default socket.
    pub fn from_env() -> Self {
        Self::from_docker_host(std::env::var("DOCKER_HOST").ok().as_deref())
    }

    // r[impl actuate.image.daemon.connect]
    /// The endpoint for a given `DOCKER_HOST` value (`None` or empty: the default socket).
    pub fn from_docker_host(value: Option<&str>) -> Self {
        match value.map(str::trim).filter(|v| !v.is_empty()) {
            Some(host) => DaemonEndpoint {
                host: host.to_owned(),
            },
            None => DaemonEndpoint {
                host: DEFAULT_DOCKER_HOST.to_owned(),
            },
        }
    }

    /// The endpoint URL.
    pub fn host(&self) -> &str {
        &self.host
    }

    // r[impl actuate.image.gc+4]
    /// Whether the daemon is reached through a socket on this host (`unix://`), the one case in
    /// which its data root's path can be measured here; over TCP, or with no scheme, it may be
    /// another machine's path.
    pub fn is_local_socket(&self) -> bool {
        self.host.starts_with("unix://")
    }

    // r[impl actuate.image.daemon.connect]
    /// Connects and negotiates the API version. Fails with [`PullErrorKind::DaemonUnreachable`]
    /// when the socket is missing or refuses, like any pull would.
    pub async fn connect(&self) -> Result<Docker, PullError> {
        let docker = Docker::connect_with_host(&self.host).map_err(|e| classify_bollard(&e))?;
        docker
            .negotiate_version()
            .await
            .map_err(|e| classify_bollard(&e))
    }
}

// r[impl actuate.image.watchdog+3]
/// Awaits the daemon's answer to `what` under the stall bound: bollard's own timeout (120 s) only
/// bounds the response headers of each request, and a daemon that accepts and never answers a
/// connect, a version negotiation or an inspect must not hold an attempt longer than a stalled
/// pull stream would. No answer within `bound` is a stalled failure.
pub async fn within<T>(
    bound: Duration,
    what: &str,
    answer: impl Future<Output = Result<T, PullError>>,
) -> Result<T, PullError> {
    // tokio's timeout treats a bound too large to add to now as no deadline at all.
    match tokio::time::timeout(bound, answer).await {
        Ok(result) => result,
        Err(_elapsed) => Err(PullError::new(
            PullErrorKind::Stalled,
            format!(
                "no answer from the daemon to {what} within {}s; attempt abandoned",
                bound.as_secs()
            ),
        )),
    }
}

/// What a successful attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fetched {
    /// The image was already in the daemon's store; nothing was pulled.
    AlreadyPresent,
    /// The image was pulled.
    Pulled,
}

// r[impl actuate.image.reference]
/// `reference` read as Docker reads it; a text that is not a reference fails the attempt as
/// rejected (the daemon would refuse it the same way), before the daemon or any credentials are
/// asked.
pub(crate) fn parsed(reference: &str) -> Result<ImageReference, PullError> {
    crate::reference::parse(reference)
        .map_err(|e| PullError::new(PullErrorKind::Rejected, e.to_string()))
}

/// One attempt: inspect the image; if the daemon does not have it (or `again`: its tag moved),
/// look up the registry's credentials in `auth` and pull it with them under the progress
/// watchdog, publishing progress on `progress`.
pub async fn fetch(
    docker: &Docker,
    reference: &str,
    stall_timeout: Duration,
    progress: &watch::Sender<PullProgress>,
    auth: &RegistryAuth,
    again: bool,
) -> Result<Fetched, PullError> {
    let image_ref = parsed(reference)?;
    let name = image_ref.to_string();
    let inspected = !again
        && daemon_within(stall_timeout, "the image inspect", async {
            match docker.inspect_image(&name).await {
                Ok(_) => Ok(true),
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                }) => Ok(false),
                Err(other) => Err(classify_bollard(&other)),
            }
        })
        .await?;
    if inspected {
        return Ok(Fetched::AlreadyPresent);
    }
    let (image, tag) = image_ref.pull_parameters();
    let mut options = CreateImageOptionsBuilder::default().from_image(&image);
    if !tag.is_empty() {
        options = options.tag(&tag);
    }
    let options = options.build();
    let credentials = credentials_for(auth, reference, stall_timeout).await?;
    let stream = docker.create_image(
        Some(options),
        None,
        credentials.as_ref().map(Credentials::to_docker),
    );
    let mut tracker = ProgressTracker::new();
    let outcome = drive(stream, stall_timeout, |info| {
        let advanced = tracker.observe(info);
        // Shown whenever it changed (a new layer, a new status line); only an advance moves the
        // watchdog.
        let snapshot = tracker.snapshot();
        progress.send_if_modified(|shown| {
            let changed = *shown != snapshot;
            if changed {
                *shown = snapshot;
            }
            changed
        });
        advanced
    })
    .await;
    match outcome {
        Watched::Completed => Ok(Fetched::Pulled),
        Watched::Failed(err) => Err(refused(
            classify_bollard(&err),
            reference,
            credentials.as_ref(),
            auth,
        )),
        Watched::Stalled { idle } => Err(PullError::new(
            PullErrorKind::Stalled,
            format!(
                "no pull progress for {}s; attempt abandoned",
                idle.as_secs()
            ),
        )),
    }
}

// r[impl actuate.image.credentials+2]
/// The credentials for `reference`'s registry, a credential helper given the stall bound to
/// answer (and killed past it). Credentials configured but unreadable, or a helper that does not
/// answer, fail the attempt as unauthorized, naming the registry and the helper.
pub(crate) async fn credentials_for(
    auth: &RegistryAuth,
    reference: &str,
    stall_timeout: Duration,
) -> Result<Option<Credentials>, PullError> {
    auth.lookup(reference, stall_timeout)
        .await
        .map_err(|e| PullError::new(PullErrorKind::Unauthorized, e.to_string()))
}

// r[impl actuate.image.credentials.refused]
// r[impl actuate.image.credentials.secret]
/// An unauthorized failure, said in the operator's terms: which registry refused, and with which
/// credentials (their source and user, never the secret) or that none were found. Other failures
/// are returned as they are.
fn refused(
    mut err: PullError,
    reference: &str,
    sent: Option<&Credentials>,
    auth: &RegistryAuth,
) -> PullError {
    if err.kind != PullErrorKind::Unauthorized {
        return err;
    }
    let host = registry_host(reference).unwrap_or_else(|_| "(none)".to_owned());
    let how = match sent {
        Some(c) => match c.username() {
            Some(user) => format!("the credentials of user {user:?} from {}", c.source()),
            None => format!("the identity token from {}", c.source()),
        },
        None => match auth.docker_config_path() {
            Some(path) => format!(
                "no credentials (none for {host} in {}; `docker login {host}` writes them there)",
                path.display()
            ),
            None => "no credentials (no Docker config file is known)".to_owned(),
        },
    };
    err.message = format!(
        "registry {host} refused the pull of {reference} with {how}: {}",
        err.message
    );
    err
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify actuate.image.gc+4]
    #[test]
    fn only_a_unix_socket_is_a_daemon_whose_disk_is_measured_here() {
        assert!(DaemonEndpoint::from_docker_host(None).is_local_socket());
        assert!(
            DaemonEndpoint::from_docker_host(Some("unix:///run/docker.sock")).is_local_socket()
        );
        for remote in [
            "tcp://10.0.0.2:2376",
            "http://127.0.0.1:2375",
            "ssh://host",
            "npipe:////./pipe/docker_engine",
        ] {
            assert!(
                !DaemonEndpoint::from_docker_host(Some(remote)).is_local_socket(),
                "{remote}"
            );
        }
    }

    // r[verify actuate.image.daemon.connect]
    #[test]
    fn docker_host_or_the_default_socket() {
        assert_eq!(
            DaemonEndpoint::from_docker_host(None).host(),
            "unix:///var/run/docker.sock"
        );
        assert_eq!(
            DaemonEndpoint::from_docker_host(Some("")).host(),
            "unix:///var/run/docker.sock"
        );
        assert_eq!(
            DaemonEndpoint::from_docker_host(Some("unix:///run/podman/podman.sock")).host(),
            "unix:///run/podman/podman.sock"
        );
        assert_eq!(
            DaemonEndpoint::from_docker_host(Some("tcp://127.0.0.1:2375")).host(),
            "tcp://127.0.0.1:2375"
        );
    }

    // r[verify actuate.image.daemon.connect]
    #[tokio::test]
    async fn a_missing_socket_is_daemon_unreachable() {
        let dir = std::env::temp_dir().join("holdfast-pull-no-such-dir");
        let endpoint = DaemonEndpoint::from_docker_host(Some(&format!(
            "unix://{}/docker.sock",
            dir.display()
        )));
        let err = endpoint.connect().await.expect_err("no daemon there");
        assert_eq!(err.kind, PullErrorKind::DaemonUnreachable);
    }

    // r[verify actuate.image.watchdog+3]
    #[tokio::test(start_paused = true)]
    async fn no_answer_before_the_stream_is_a_stall_within_the_bound() {
        let start = tokio::time::Instant::now();
        let err = within(
            Duration::from_secs(5),
            "the image inspect",
            std::future::pending::<Result<(), PullError>>(),
        )
        .await
        .expect_err("never answers");
        assert_eq!(err.kind, PullErrorKind::Stalled);
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        // A bound too large for the clock is no bound, not a panic.
        let ok = within(Duration::MAX, "connect", async { Ok::<_, PullError>(7) }).await;
        assert_eq!(ok.ok(), Some(7));
    }

    // r[verify actuate.image.reference]
    #[tokio::test]
    async fn a_text_that_is_not_a_reference_is_rejected_before_the_daemon_is_asked() {
        // No daemon listens there: an attempt that asked it would fail as unreachable.
        let docker =
            Docker::connect_with_http("http://127.0.0.1:1", 5, bollard::API_DEFAULT_VERSION)
                .unwrap();
        let (progress, _) = watch::channel(PullProgress::default());
        let err = fetch(
            &docker,
            "Nginx:latest",
            Duration::from_secs(1),
            &progress,
            &RegistryAuth::default(),
            false,
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind, PullErrorKind::Rejected, "{err:?}");
        assert!(
            err.message
                .contains("\"Nginx:latest\" is not an image reference"),
            "{err:?}"
        );
    }
}
