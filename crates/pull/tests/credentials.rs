//! Pulls from a registry that demands credentials (the harness's htpasswd registry), through a
//! real dockerd: refused without them or with a wrong password (the unauthorized fault, naming the
//! registry and never the password), pulled with them from a Docker config file and from a
//! credential helper.

// Test helpers outside `#[test]` functions: clippy.toml's test allowance does not reach them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::query_parameters::RemoveImageOptionsBuilder;
use futures_util::TryStreamExt as _;
use holdfast_pull::{
    Actuator, DaemonEndpoint, DockerFetcher, ImageState, PullConfig, PullErrorKind, RegistryAuth,
};
use holdfast_test_support::services;

async fn remove_local(docker_host: &str, reference: &str) {
    let docker = Docker::connect_with_host(docker_host).unwrap();
    let options = RemoveImageOptionsBuilder::default().force(true).build();
    // Absent is fine: this only makes sure the next pull really pulls.
    let _ = docker.remove_image(reference, Some(options), None).await;
}

/// A copy of the private image under a tag of `test`'s own, pushed to the private registry and
/// absent from the daemon: each test pulls and removes only its own, so tests run side by side
/// (each in a process of its own under nextest) never see each other's pulls or removals.
async fn own_copy(docker_host: &str, registry: &services::AuthRegistry, test: &str) -> String {
    let docker = Docker::connect_with_host(docker_host).unwrap();
    let credentials = || bollard::auth::DockerCredentials {
        username: Some(registry.username.clone()),
        password: Some(registry.password.clone()),
        serveraddress: Some(registry.addr.to_string()),
        ..Default::default()
    };
    let (repo, tag) = registry.image.rsplit_once(':').unwrap();
    let pull = bollard::query_parameters::CreateImageOptionsBuilder::default()
        .from_image(repo)
        .tag(tag)
        .build();
    docker
        .create_image(Some(pull), None, Some(credentials()))
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    let own_tag = format!(
        "{test}-{}-{:x}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    docker
        .tag_image(
            &registry.image,
            Some(bollard::query_parameters::TagImageOptions {
                repo: Some(repo.to_owned()),
                tag: Some(own_tag.clone()),
            }),
        )
        .await
        .unwrap();
    let push = bollard::query_parameters::PushImageOptionsBuilder::default()
        .tag(&own_tag)
        .build();
    docker
        .push_image(repo, Some(push), Some(credentials()))
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    let own = format!("{repo}:{own_tag}");
    // Only the tag is removed: the image stays under the seeded tag another test may be using.
    remove_local(docker_host, &own).await;
    own
}

/// A Docker config file with `auths` for `registry` (or none), mode 0600.
fn docker_config(dir: &Path, name: &str, login: Option<(&str, &str)>, registry: &str) -> PathBuf {
    use base64::Engine as _;
    let path = dir.join(name);
    let text = match login {
        Some((user, password)) => {
            let auth =
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            serde_json::json!({ "auths": { registry: { "auth": auth } } }).to_string()
        }
        None => "{}".to_owned(),
    };
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

fn actuator(docker_host: &str, auth: RegistryAuth) -> Actuator<DockerFetcher> {
    let config = PullConfig::builder(7)
        .stall_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let fetcher = DockerFetcher::with_auth(
        DaemonEndpoint::from_docker_host(Some(docker_host)),
        config.stall_timeout(),
        auth,
    );
    Actuator::new(fetcher, config).unwrap()
}

/// One attempt, run to its end; the state it leaves. Prints how long it took and what it left,
/// in milliseconds since `start` (shown with `--nocapture`): the measured pull timeline.
async fn attempt(
    act: &mut Actuator<DockerFetcher>,
    image: &str,
    start: Instant,
    what: &str,
) -> ImageState {
    attempt_at(act, image, start, what, Instant::now()).await
}

/// [`attempt`] at `now` on the actuator's clock (a paced attempt's time, say).
async fn attempt_at(
    act: &mut Actuator<DockerFetcher>,
    image: &str,
    start: Instant,
    what: &str,
    now: Instant,
) -> ImageState {
    // Real time, not `now`: a paced attempt's `now` lies ahead of the wall clock.
    let began = Instant::now();
    act.ensure(image, now);
    act.settle(now).await;
    let state = act.ensure(image, now);
    let outcome = match &state {
        ImageState::Present => "present".to_owned(),
        ImageState::Escalated {
            last_error, until, ..
        } => format!(
            "fault {:?}, the next attempt paced {} ms later",
            last_error.kind,
            until.saturating_duration_since(now).as_millis()
        ),
        other => format!("{other:?}"),
    };
    eprintln!(
        "[timeline private-pull] +{:>6} ms  {what}: the attempt took {} ms: {outcome}",
        start.elapsed().as_millis(),
        began.elapsed().as_millis()
    );
    state
}

// r[verify actuate.image.credentials+2]
// r[verify actuate.image.credentials.refused]
// r[verify actuate.image.credentials.secret]
#[tokio::test]
async fn a_private_image_is_refused_without_credentials_and_pulled_with_those_of_the_docker_config()
{
    let Some(docker) = services::docker() else {
        return;
    };
    let Some(registry) = services::auth_registry() else {
        return;
    };
    let host = registry.addr.to_string();
    let dir = tempfile::tempdir().unwrap();
    let image = own_copy(&docker.host, &registry, "config").await;
    let start = Instant::now();

    // No credentials for it: refused, one fault at once, saying where none were found.
    let empty = docker_config(dir.path(), "empty.json", None, &host);
    let mut act = actuator(
        &docker.host,
        RegistryAuth::default().with_docker_config(&empty),
    );
    match attempt(&mut act, &image, start, "no credentials").await {
        ImageState::Escalated { last_error, .. } => {
            assert_eq!(last_error.kind, PullErrorKind::Unauthorized, "{last_error}");
            assert!(
                last_error
                    .message
                    .contains(&format!("registry {host} refused")),
                "{last_error}"
            );
            assert!(last_error.message.contains("empty.json"), "{last_error}");
        }
        other => panic!("expected the unauthorized fault at once, got {other:?}"),
    }
    assert_eq!(act.faults().len(), 1);

    // A wrong password: refused; the fault names the user, not the password it was given.
    let wrong = docker_config(
        dir.path(),
        "wrong.json",
        Some((&registry.username, "not-the-password")),
        &host,
    );
    let mut act = actuator(
        &docker.host,
        RegistryAuth::default().with_docker_config(&wrong),
    );
    let state = attempt(&mut act, &image, start, "a wrong password").await;
    let shown = format!("{state:?} {:?}", act.faults());
    match state {
        ImageState::Escalated {
            last_error, until, ..
        } => {
            assert_eq!(last_error.kind, PullErrorKind::Unauthorized, "{last_error}");
            assert!(
                last_error.message.contains(&registry.username),
                "{last_error}"
            );
            // Paced like any failure: no second attempt before the back-off's first step.
            assert!(
                until > Instant::now() + Duration::from_secs(1),
                "the next attempt is not paced: {until:?}"
            );
        }
        other => panic!("expected the unauthorized fault, got {other:?}"),
    }
    assert!(!shown.contains("not-the-password"), "{shown}");
    assert!(!shown.contains(&registry.password), "{shown}");

    // The right ones, from a Docker config file: pulled.
    let right = docker_config(
        dir.path(),
        "config.json",
        Some((&registry.username, &registry.password)),
        &host,
    );
    let mut act = actuator(
        &docker.host,
        RegistryAuth::default().with_docker_config(&right),
    );
    let state = attempt(
        &mut act,
        &image,
        start,
        "the right credentials from a Docker config file",
    )
    .await;
    assert_eq!(state, ImageState::Present, "{state:?}");
    assert!(act.faults().is_empty());
    remove_local(&docker.host, &image).await;
}

/// A password file, mode 0600, holding `password` and a final newline (as `echo` writes it).
fn password_file(dir: &Path, name: &str, password: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("{password}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

// r[verify actuate.image.credentials.configured]
// r[verify actuate.image.credentials.refused]
// r[verify actuate.image.credentials.secret]
#[tokio::test]
async fn a_private_image_is_pulled_with_a_configured_login_that_wins_over_the_docker_config() {
    let Some(docker) = services::docker() else {
        return;
    };
    let Some(registry) = services::auth_registry() else {
        return;
    };
    let host = registry.addr.to_string();
    let dir = tempfile::tempdir().unwrap();
    let image = own_copy(&docker.host, &registry, "login").await;
    let start = Instant::now();
    // The Docker config has a wrong password for the registry: the login must win over it.
    let stale = docker_config(
        dir.path(),
        "stale.json",
        Some((&registry.username, "stale-password")),
        &host,
    );
    let with_login = |file: &Path| {
        RegistryAuth::default()
            .with_docker_config(&stale)
            // Named with a scheme and a path, as `docker login` files it: the same registry.
            .with_login(
                &format!("https://{host}/v2/"),
                registry.username.clone(),
                file,
                format!("[pull.auth.{host:?}]"),
            )
    };

    // Without the login, the Docker config's stale password is refused.
    let mut act = actuator(
        &docker.host,
        RegistryAuth::default().with_docker_config(&stale),
    );
    match attempt(
        &mut act,
        &image,
        start,
        "no [pull.auth], a stale Docker config",
    )
    .await
    {
        ImageState::Escalated { last_error, .. } => {
            assert_eq!(last_error.kind, PullErrorKind::Unauthorized, "{last_error}");
        }
        other => panic!("expected the unauthorized fault, got {other:?}"),
    }

    // A wrong password in the password file: refused, naming the table, paced, no secret shown.
    let wrong = password_file(dir.path(), "wrong", "not-the-password");
    let mut act = actuator(&docker.host, with_login(&wrong));
    let state = attempt(&mut act, &image, start, "[pull.auth] with a wrong password").await;
    let shown = format!("{state:?} {:?}", act.faults());
    let paced = match state {
        ImageState::Escalated {
            last_error, until, ..
        } => {
            assert_eq!(last_error.kind, PullErrorKind::Unauthorized, "{last_error}");
            for part in [
                format!("registry {host} refused"),
                format!("[pull.auth.{host:?}]"),
                registry.username.clone(),
            ] {
                assert!(last_error.message.contains(&part), "{part}: {last_error}");
            }
            assert!(
                until > Instant::now() + Duration::from_secs(1),
                "the next attempt is not paced: {until:?}"
            );
            until
        }
        other => panic!("expected the unauthorized fault, got {other:?}"),
    };
    assert_eq!(act.faults().len(), 1);
    assert!(!shown.contains("not-the-password"), "{shown}");
    assert!(!shown.contains("stale-password"), "{shown}");

    // The file rotated to the right password: the same actuator's next paced attempt takes
    // it, without a restart; not before it is due.
    std::fs::write(&wrong, format!("{}\n", registry.password)).unwrap();
    let early = act.ensure(&image, paced - Duration::from_millis(1));
    assert!(matches!(early, ImageState::Escalated { .. }), "{early:?}");
    let state = attempt_at(
        &mut act,
        &image,
        start,
        "[pull.auth] after the file was rotated, at the paced attempt",
        paced,
    )
    .await;
    assert_eq!(state, ImageState::Present, "{state:?}");
    assert!(act.faults().is_empty());
    remove_local(&docker.host, &image).await;

    // A password file open to others: the attempt fails naming the file and its mode.
    std::fs::set_permissions(&wrong, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut act = actuator(&docker.host, with_login(&wrong));
    match attempt(
        &mut act,
        &image,
        start,
        "[pull.auth] with a 0644 password file",
    )
    .await
    {
        ImageState::Escalated { last_error, .. } => {
            assert_eq!(last_error.kind, PullErrorKind::Unauthorized, "{last_error}");
            assert!(last_error.message.contains("0644"), "{last_error}");
            assert!(
                last_error
                    .message
                    .contains(&format!("[pull.auth.{host:?}]")),
                "{last_error}"
            );
        }
        other => panic!("expected the unauthorized fault, got {other:?}"),
    }
}

/// Where the helper test's child finds the Docker config naming the helper.
const HELPER_CONFIG_VAR: &str = "HOLDFAST_TEST_HELPER_DOCKER_CONFIG";
/// The image the helper test's child pulls (the test's own copy).
const HELPER_IMAGE_VAR: &str = "HOLDFAST_TEST_HELPER_IMAGE";

// r[verify actuate.image.credentials+2]
#[tokio::test]
async fn a_private_image_is_pulled_with_the_credentials_a_credential_helper_gives() {
    use std::os::unix::fs::OpenOptionsExt as _;
    let Some(docker) = services::docker() else {
        return;
    };
    let Some(registry) = services::auth_registry() else {
        return;
    };
    let host = registry.addr.to_string();
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    // Written by the helper when asked: the pull below used its answer.
    let asked = dir.path().join("helper-asked");
    std::fs::create_dir(&bin).unwrap();
    // A helper as the Docker CLI runs one: `get`, the server on stdin, JSON on stdout; for any
    // other server, the not-found answer.
    let script = format!(
        "#!/bin/sh\nread server\n[ \"$1\" = get ] || exit 3\n\
         if [ \"$server\" = '{host}' ]; then\n\
           echo \"$server\" >> '{}'\n\
           printf '{{\"ServerURL\":\"%s\",\"Username\":\"{}\",\"Secret\":\"{}\"}}' \"$server\"\n\
         else echo 'credentials not found in native keychain'; exit 1; fi\n",
        asked.display(),
        registry.username,
        registry.password
    );
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .open(bin.join("docker-credential-holdfasttest"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, script.as_bytes()))
        .unwrap();
    let config = dir.path().join("config.json");
    let text = serde_json::json!({ "credHelpers": { host.as_str(): "holdfasttest" } }).to_string();
    std::fs::write(&config, text).unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
    let image = own_copy(&docker.host, &registry, "helper").await;
    // The node finds helpers on its PATH, as the Docker CLI does: the pull runs in a child of
    // this test binary whose PATH starts with the helper's directory (this process's own
    // environment is left alone).
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![bin.clone()];
    paths.extend(std::env::split_paths(&path));
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "pull_in_a_child_with_the_helper_on_path",
            "--ignored",
            "--nocapture",
        ])
        .env("PATH", std::env::join_paths(paths).unwrap())
        .env(HELPER_CONFIG_VAR, &config)
        .env(HELPER_IMAGE_VAR, &image)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Bounded: a child stuck on the daemon is killed, not waited for for ever.
    let pid = child.id();
    let waiting = tokio::task::spawn_blocking(move || child.wait_with_output());
    let out = match tokio::time::timeout(Duration::from_secs(120), waiting).await {
        Ok(out) => out.unwrap().unwrap(),
        Err(_) => {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
            panic!("the helper test's child ran past 120 s and was killed");
        }
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprint!("{stderr}");
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("1 passed"),
        "the child ran no test: {stdout}"
    );
    let asked = std::fs::read_to_string(&asked).unwrap_or_default();
    assert_eq!(
        asked.lines().next(),
        Some(host.as_str()),
        "the helper was not asked"
    );
    remove_local(&docker.host, &image).await;
}

/// The child of the helper test (ignored on its own: it needs the helper on `PATH`).
#[tokio::test]
#[ignore = "run by a_private_image_is_pulled_with_the_credentials_a_credential_helper_gives"]
async fn pull_in_a_child_with_the_helper_on_path() {
    let config = std::env::var_os(HELPER_CONFIG_VAR).expect("run by the helper test");
    let image = std::env::var(HELPER_IMAGE_VAR).expect("run by the helper test");
    let (Some(docker), Some(_registry)) = (services::docker(), services::auth_registry()) else {
        panic!("the helper test's child runs only with the services");
    };
    let mut act = actuator(
        &docker.host,
        RegistryAuth::default().with_docker_config(PathBuf::from(config)),
    );
    let state = attempt(
        &mut act,
        &image,
        Instant::now(),
        "the right credentials from a credential helper",
    )
    .await;
    assert_eq!(state, ImageState::Present, "{state:?}");
    assert!(act.faults().is_empty());
}
