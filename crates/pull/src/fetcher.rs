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
use crate::credentials::RegistryAuth;
use crate::progress::PullProgress;
use crate::tag::{TagCheck, check_tag};

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
    auth: RegistryAuth,
    /// References whose tag moved: pulled at their next attempt even though present.
    again: std::sync::Mutex<std::collections::BTreeSet<String>>,
    connection: Mutex<Option<Docker>>,
}

impl DockerFetcher {
    /// A fetcher for `endpoint` whose pulls are abandoned after `stall_timeout` without progress.
    /// Registry credentials are looked up as the Docker CLI does ([`RegistryAuth::from_env`]).
    pub fn new(endpoint: DaemonEndpoint, stall_timeout: Duration) -> Self {
        Self::with_auth(endpoint, stall_timeout, RegistryAuth::from_env())
    }

    /// A fetcher that pulls with the registry credentials `auth` finds.
    pub fn with_auth(
        endpoint: DaemonEndpoint,
        stall_timeout: Duration,
        auth: RegistryAuth,
    ) -> Self {
        DockerFetcher {
            inner: Arc::new(DockerFetcherInner {
                endpoint,
                stall_timeout,
                auth,
                again: std::sync::Mutex::default(),
                connection: Mutex::new(None),
            }),
        }
    }

    /// The endpoint this fetcher talks to.
    pub fn endpoint(&self) -> &DaemonEndpoint {
        &self.inner.endpoint
    }

    // r[impl actuate.image.tag-moved]
    /// `reference`'s tag moved: its next attempt pulls it although an image is present (until
    /// one such pull succeeds). The caller then has the actuator `invalidate` it, so the attempt
    /// is paced, classified and faulted like any pull.
    pub fn pull_again(&self, reference: &str) {
        self.inner.again_set().insert(reference.to_owned());
    }

    /// Whether `reference` waits to be pulled again.
    pub fn pulls_again(&self, reference: &str) -> bool {
        self.inner.again_set().contains(reference)
    }

    // r[impl actuate.image.tag-moved]
    /// Checks whether `reference`'s tag moved in its registry (see [`crate::tag::check_tag`]).
    pub fn check_tag(&self, reference: String) -> BoxFuture<Result<TagCheck, PullError>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let docker = inner.docker().await?;
            let result = check_tag(&docker, &reference, inner.stall_timeout, &inner.auth).await;
            if let Err(err) = &result {
                inner.forget_connection_after(err).await;
            }
            result
        })
    }
}

impl DockerFetcherInner {
    fn again_set(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<String>> {
        // A panic while holding it leaves a set of names, still coherent.
        self.again
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

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
                Ok(docker) => {
                    let again = inner.again_set().contains(&reference);
                    let result = fetch(
                        &docker,
                        &reference,
                        inner.stall_timeout,
                        &progress,
                        &inner.auth,
                        again,
                    )
                    .await;
                    if result.is_ok() {
                        inner.again_set().remove(&reference);
                    }
                    result
                }
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

    /// A daemon socket that answers each request by `answer(request line)` with a status and a
    /// JSON body, and records every request head (request line and headers).
    fn recording_daemon(
        socket: &std::path::Path,
        answer: fn(&str) -> (u16, String),
    ) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen_heads = std::sync::Arc::clone(&heads);
        let listener = tokio::net::UnixListener::bind(socket).unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let heads = std::sync::Arc::clone(&seen_heads);
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    let mut buf = [0u8; 4096];
                    loop {
                        let Ok(n) = stream.read(&mut buf).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        seen.extend_from_slice(&buf[..n]);
                        let text = String::from_utf8_lossy(&seen).into_owned();
                        let Some(end) = text.find("\r\n\r\n") else {
                            continue;
                        };
                        let head = text[..end].to_owned();
                        seen.drain(..end + 4);
                        let line = head.lines().next().unwrap_or_default().to_owned();
                        heads.lock().unwrap().push(head);
                        let (status, body) = answer(&line);
                        let response = format!(
                            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if stream.write_all(response.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        heads
    }

    /// Version negotiated, the image absent, and every pull refused as dockerd words it.
    fn refusing(line: &str) -> (u16, String) {
        if line.contains("/version") {
            (
                200,
                r#"{"ApiVersion":"1.41","MinAPIVersion":"1.12"}"#.to_owned(),
            )
        } else if line.contains("/json") {
            (
                404,
                r#"{"message":"No such image: reg.example/app:1"}"#.to_owned(),
            )
        } else {
            (
                500,
                r#"{"message":"Head \"https://reg.example/v2/app/manifests/1\": unauthorized: authentication required"}"#
                    .to_owned(),
            )
        }
    }

    fn private_config(dir: &std::path::Path) -> std::path::PathBuf {
        use base64::Engine as _;
        use std::os::unix::fs::PermissionsExt as _;
        let path = dir.join("config.json");
        let auth = base64::engine::general_purpose::STANDARD.encode("alice:hunter2");
        std::fs::write(
            &path,
            format!(r#"{{"auths": {{"reg.example": {{"auth": "{auth}"}}}}}}"#),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path
    }

    /// The `X-Registry-Auth` header of the image create, decoded.
    fn registry_auth_of_create(heads: &[String]) -> Option<serde_json::Value> {
        use base64::Engine as _;
        let create = heads.iter().find(|h| h.contains("/images/create"))?;
        let value = create.lines().find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("x-registry-auth")
                .then(|| value.trim().to_owned())
        })?;
        let json = base64::engine::general_purpose::URL_SAFE
            .decode(&value)
            .or_else(|_| base64::engine::general_purpose::STANDARD.decode(&value))
            .ok()?;
        serde_json::from_slice(&json).ok()
    }

    // r[verify actuate.image.credentials+2]
    // r[verify actuate.image.credentials.refused]
    // r[verify actuate.image.credentials.secret]
    #[tokio::test]
    async fn the_pull_carries_the_registrys_credentials_and_a_refusal_names_the_registry_not_the_password()
     {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("docker.sock");
        let heads = recording_daemon(&socket, refusing);
        let auth = RegistryAuth::default().with_docker_config(private_config(dir.path()));
        let fetcher = DockerFetcher::with_auth(endpoint(&socket), Duration::from_secs(5), auth);
        let (progress, _) = watch::channel(PullProgress::default());
        let err = fetcher
            .fetch("reg.example/app:1".into(), progress)
            .await
            .expect_err("refused");
        let sent = registry_auth_of_create(&heads.lock().unwrap()).expect("X-Registry-Auth sent");
        assert_eq!(sent["username"], "alice");
        assert_eq!(sent["password"], "hunter2");
        assert_eq!(sent["serveraddress"], "reg.example");
        assert_eq!(err.kind, PullErrorKind::Unauthorized, "{err}");
        let text = format!("{err} {err:?}");
        assert!(text.contains("registry reg.example refused"), "{text}");
        assert!(text.contains("\"alice\""), "{text}");
        assert!(!text.contains("hunter2"), "{text}");

        // Without credentials for it: nothing is sent, and the message says where none were found.
        let socket = dir.path().join("docker2.sock");
        let heads = recording_daemon(&socket, refusing);
        let empty = dir.path().join("empty.json");
        std::fs::write(&empty, "{}").unwrap();
        let fetcher = DockerFetcher::with_auth(
            endpoint(&socket),
            Duration::from_secs(5),
            RegistryAuth::default().with_docker_config(&empty),
        );
        let (progress, _) = watch::channel(PullProgress::default());
        let err = fetcher
            .fetch("reg.example/app:1".into(), progress)
            .await
            .expect_err("refused");
        let heads = heads.lock().unwrap();
        assert!(heads.iter().any(|h| h.contains("/images/create")));
        assert_eq!(registry_auth_of_create(&heads), None, "{heads:?}");
        assert_eq!(err.kind, PullErrorKind::Unauthorized);
        assert!(
            err.message
                .contains("no credentials (none for reg.example in")
                && err.message.contains("empty.json"),
            "{err}"
        );
    }

    // r[verify actuate.image.credentials.helper-named]
    #[tokio::test]
    async fn a_refusal_of_a_credential_helpers_password_names_the_helper_and_the_registry() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let helper = bin.join("docker-credential-holdfastrefused");
        std::fs::write(
            &helper,
            "#!/bin/sh\nread server\n\
             printf '{\"ServerURL\":\"%s\",\"Username\":\"helper-user\",\"Secret\":\"helper-pass\"}' \"$server\"\n",
        )
        .unwrap();
        std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o700)).unwrap();
        let config = dir.path().join("config.json");
        std::fs::write(
            &config,
            r#"{"credHelpers": {"reg.example": "holdfastrefused"}}"#,
        )
        .unwrap();
        let socket = dir.path().join("docker.sock");
        let heads = recording_daemon(&socket, refusing);
        let auth = RegistryAuth::default()
            .with_docker_config(&config)
            .with_helper_dir(&bin);
        let fetcher = DockerFetcher::with_auth(endpoint(&socket), Duration::from_secs(5), auth);
        let (progress, _) = watch::channel(PullProgress::default());
        let err = fetcher
            .fetch("reg.example/app:1".into(), progress)
            .await
            .expect_err("refused");
        let sent = registry_auth_of_create(&heads.lock().unwrap()).expect("X-Registry-Auth sent");
        assert_eq!(sent["username"], "helper-user");
        assert_eq!(err.kind, PullErrorKind::Unauthorized, "{err}");
        let text = format!("{err} {err:?}");
        for part in [
            "registry reg.example refused",
            "\"helper-user\"",
            "credential helper docker-credential-holdfastrefused",
            "config.json",
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
        assert!(!text.contains("helper-pass"), "{text}");
    }

    // r[verify actuate.image.credentials.refused]
    // r[verify actuate.image.credentials.secret]
    #[tokio::test(start_paused = true)]
    async fn a_refused_pull_is_one_fault_at_once_paced_on_the_schedule_without_the_password() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("docker.sock");
        let heads = recording_daemon(&socket, refusing);
        let config = crate::PullConfig::new(7);
        let auth = RegistryAuth::default().with_docker_config(private_config(dir.path()));
        let mut actuator = crate::Actuator::new(
            DockerFetcher::with_auth(endpoint(&socket), config.stall_timeout(), auth),
            config,
        )
        .unwrap();
        let t0 = std::time::Instant::now();
        // A minute of one-second ticks.
        for step in 0..60u64 {
            let now = t0 + Duration::from_secs(step);
            actuator.ensure("reg.example/app:1", now);
            actuator.settle(now).await;
            if step == 0 {
                let faults = actuator.faults();
                assert_eq!(faults.len(), 1, "filed at the first refusal: {faults:?}");
            }
        }
        let creates = heads
            .lock()
            .unwrap()
            .iter()
            .filter(|h| h.contains("/images/create"))
            .count();
        // Base 5 s doubling (jitter only lengthens): attempts no earlier than 0, 5, 15, 35 s.
        assert!(
            (2..=4).contains(&creates),
            "paced, not hot: {creates} pulls"
        );
        let faults = actuator.faults();
        assert_eq!(faults.len(), 1, "{faults:?}");
        assert_eq!(faults[0].kind, "unauthorized");
        assert!(
            faults[0].message.contains("registry reg.example refused"),
            "{faults:?}"
        );
        assert!(!format!("{faults:?}").contains("hunter2"));
    }

    /// Version negotiated, the image present, and a pull that completes at once.
    fn present(line: &str) -> (u16, String) {
        if line.contains("/version") {
            (
                200,
                r#"{"ApiVersion":"1.41","MinAPIVersion":"1.12"}"#.to_owned(),
            )
        } else if line.contains("/json") {
            (200, r#"{"Id":"sha256:1"}"#.to_owned())
        } else {
            (200, r#"{"status":"Downloaded newer image"}"#.to_owned())
        }
    }

    // r[verify actuate.image.tag-moved]
    #[tokio::test]
    async fn a_moved_tag_is_pulled_although_present_until_one_pull_succeeds() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("docker.sock");
        let heads = recording_daemon(&socket, present);
        let fetcher = DockerFetcher::with_auth(
            endpoint(&socket),
            Duration::from_secs(5),
            RegistryAuth::default().with_docker_config(dir.path().join("none.json")),
        );
        let creates = || {
            heads
                .lock()
                .unwrap()
                .iter()
                .filter(|h| h.contains("/images/create"))
                .count()
        };
        let (progress, _) = watch::channel(PullProgress::default());
        let found = fetcher
            .fetch("reg.example/app:1".into(), progress.clone())
            .await;
        assert_eq!(found, Ok(Fetched::AlreadyPresent));
        assert_eq!(creates(), 0);
        fetcher.pull_again("reg.example/app:1");
        assert!(fetcher.pulls_again("reg.example/app:1"));
        let found = fetcher
            .fetch("reg.example/app:1".into(), progress.clone())
            .await;
        assert_eq!(found, Ok(Fetched::Pulled));
        assert_eq!(creates(), 1);
        assert!(!fetcher.pulls_again("reg.example/app:1"));
        let found = fetcher.fetch("reg.example/app:1".into(), progress).await;
        assert_eq!(found, Ok(Fetched::AlreadyPresent));
    }
}
