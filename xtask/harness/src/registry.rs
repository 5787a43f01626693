//! The registry (Debian's `docker-registry`, distribution 2.8), and seeding it with a tiny image.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, bail};
use holdfast_test_support::services::{
    AUTH_PASSWORD_VAR, AUTH_REGISTRY_VAR, AUTH_USER_VAR, REGISTRY_VAR,
};

use super::layout::{ServiceDir, loopback};
use super::probe;
use super::process::Supervisor;

/// The seeded image's repository and tag inside the registry.
pub const IMAGE_PATH: &str = "holdfast/busybox:latest";

/// The user the authenticated registry accepts.
pub const AUTH_USER: &str = "holdfast";

/// A user name and password.
#[derive(Clone, Copy)]
pub struct Login<'a> {
    /// User name.
    pub username: &'a str,
    /// Password.
    pub password: &'a str,
}

impl std::fmt::Debug for Login<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// The variables [`start`] exports.
pub const EXPORTS: [&str; 1] = [REGISTRY_VAR];
/// The variables [`start_authenticated`] exports.
pub const AUTH_EXPORTS: [&str; 3] = [AUTH_REGISTRY_VAR, AUTH_USER_VAR, AUTH_PASSWORD_VAR];

// i[impl harness.services.registry]
/// Starts the registry and waits for `/v2/`; returns its exported variables.
pub fn start(
    supervisor: &mut Supervisor,
    dir: &ServiceDir,
    port: u16,
) -> anyhow::Result<Vec<(&'static str, String)>> {
    serve(supervisor, dir, port, "", 200)?;
    Ok(crate::layout::exports(
        EXPORTS,
        [format!("127.0.0.1:{port}")],
    ))
}

// i[impl harness.services.auth-registry]
/// Starts a second registry that demands `login` (htpasswd, bcrypt) and waits until `/v2/`
/// answers 401 without it; returns its exported variables (address, user, password).
pub fn start_authenticated(
    supervisor: &mut Supervisor,
    dir: &ServiceDir,
    port: u16,
    login: Login<'_>,
) -> anyhow::Result<Vec<(&'static str, String)>> {
    let htpasswd = dir.file("htpasswd");
    // Cost 4, bcrypt's least: this guards a test registry, and every request checks it.
    let hash = bcrypt::hash(login.password, 4).context("hashing the test password")?;
    std::fs::write(&htpasswd, format!("{}:{hash}\n", login.username))?;
    let auth = format!(
        "auth:\n  htpasswd:\n    realm: holdfast-test\n    path: {}\n",
        htpasswd.display()
    );
    // Ready once it refuses an anonymous client: auth is on.
    serve(supervisor, dir, port, &auth, 401)?;
    Ok(crate::layout::exports(
        AUTH_EXPORTS,
        [
            format!("127.0.0.1:{port}"),
            login.username.to_owned(),
            login.password.to_owned(),
        ],
    ))
}

/// A password for this run of the authenticated registry, not guessable from outside it.
pub fn fresh_password() -> String {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    format!("hf-{:016x}", h.finish())
}

/// Writes the registry's config (with `extra` top-level YAML), spawns it, and waits until an
/// anonymous `GET /v2/` answers `ready_status`.
fn serve(
    supervisor: &mut Supervisor,
    dir: &ServiceDir,
    port: u16,
    extra: &str,
    ready_status: u16,
) -> anyhow::Result<()> {
    let config = format!(
        "version: 0.1\n\
         log:\n  level: info\n\
         storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n\
         http:\n  addr: 127.0.0.1:{port}\n{extra}",
        dir.data().display()
    );
    let config_path = dir.file("config.yml");
    std::fs::write(&config_path, config)?;
    let mut command = Command::new("docker-registry");
    command.arg("serve").arg(&config_path);
    let service = supervisor.spawn(dir.name, command, &dir.log(), Duration::from_secs(10))?;
    probe::wait_ready(service, "GET /v2/", Duration::from_secs(30), || {
        probe::http_get(loopback(port), "/v2/").is_ok_and(|(status, _)| status == ready_status)
    })
}

/// Builds a rootfs holding a static busybox (and `/bin/sh`), imports it into dockerd as
/// `<registry>/holdfast/busybox:latest`, pushes it, and removes the local copy so tests pull for
/// real. Returns the image reference.
// i[impl harness.registry.seed]
pub fn seed(
    dir: &ServiceDir,
    docker_host: &str,
    registry: &str,
    busybox: &Path,
) -> anyhow::Result<String> {
    seed_as(dir, docker_host, registry, busybox, None)
}

// i[impl harness.services.auth-registry]
/// [`seed`], into a registry that demands `login`: the push logs in through a private client
/// config (an `auths` entry), which is removed afterwards.
pub fn seed_as(
    dir: &ServiceDir,
    docker_host: &str,
    registry: &str,
    busybox: &Path,
    login: Option<Login<'_>>,
) -> anyhow::Result<String> {
    let image = format!("{registry}/{IMAGE_PATH}");
    let rootfs = dir.file("seed/rootfs");
    std::fs::create_dir_all(rootfs.join("bin"))?;
    std::fs::copy(busybox, rootfs.join("bin/busybox"))
        .with_context(|| format!("copying {}", busybox.display()))?;
    std::os::unix::fs::symlink("busybox", rootfs.join("bin/sh"))?;
    let tarball = dir.file("seed/rootfs.tar");
    let log = dir.file("seed.log");
    run(
        Command::new("tar")
            .arg("-C")
            .arg(&rootfs)
            .arg("-cf")
            .arg(&tarball)
            .arg("."),
        &log,
    )?;
    // A private client config, so the user's ~/.docker (credentials, contexts) plays no part.
    let client_config = dir.file("docker-client");
    std::fs::create_dir_all(&client_config)?;
    let client_file = client_config.join("config.json");
    if let Some(login) = login {
        use base64::Engine as _;
        let auth = base64::engine::general_purpose::STANDARD
            .encode(format!("{}:{}", login.username, login.password));
        let config = serde_json::json!({ "auths": { registry: { "auth": auth } } });
        // Created readable by its owner only: it holds the password.
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&client_file)?
            .write_all(config.to_string().as_bytes())?;
    }
    let docker = |args: &[&str]| {
        let mut command = Command::new("docker");
        command
            .args(["-H", docker_host])
            .args(args)
            .env("DOCKER_CONFIG", &client_config)
            .env_remove("DOCKER_CONTEXT")
            .env_remove("DOCKER_HOST");
        command
    };
    run(docker(&["import"]).arg(&tarball).arg(&image), &log)?;
    let pushed = run(&mut docker(&["push", &image]), &log);
    // The login is not needed past the push.
    let _ = std::fs::remove_file(&client_file);
    pushed?;
    run(&mut docker(&["image", "rm", &image]), &log)?;
    let still_there = docker(&["image", "inspect", &image])
        .output()
        .context("running docker image inspect")?;
    if still_there.status.success() {
        bail!("{image} is still in dockerd's local store after removal");
    }
    eprintln!("xtask test: seeded {image}");
    Ok(image)
}

/// Runs a seeding step with its output appended to `log`; fails naming the step and the log.
fn run(command: &mut Command, log: &Path) -> anyhow::Result<()> {
    let out = std::fs::File::options()
        .create(true)
        .append(true)
        .open(log)?;
    let status = command
        .stdout(out.try_clone()?)
        .stderr(out)
        .status()
        .with_context(|| format!("running {command:?}"))?;
    if !status.success() {
        bail!(
            "seeding the registry failed at {command:?} ({status}); see {}",
            log.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::free_ports;
    use crate::testing::{Run, installed};

    // i[verify harness.services.registry]
    #[test]
    fn the_registry_starts_privately_and_exports_where_it_answers() {
        if !installed(&["docker-registry"]) {
            return;
        }
        let mut run = Run::new();
        let dir = run.dir("registry");
        let port = free_ports(1).unwrap()[0];
        let env = start(&mut run.supervisor, &dir, port).unwrap();
        assert_eq!(env, [(REGISTRY_VAR, format!("127.0.0.1:{port}"))]);
        // The exported address answers the registry API (plain HTTP), storing in this run's root.
        let addr: std::net::SocketAddr = env[0].1.parse().unwrap();
        let (status, body) = probe::http_get(addr, "/v2/").unwrap();
        assert_eq!(status, 200, "{body}");
        let config = std::fs::read_to_string(dir.file("config.yml")).unwrap();
        assert!(
            config.contains(&format!("rootdirectory: {}", dir.data().display())),
            "{config}"
        );
        run.supervisor.stop_all();
        assert!(!probe::accepts(addr), "the registry still answers");
    }

    // i[verify harness.registry.seed]
    #[test]
    fn the_seeded_image_is_in_the_registry_and_not_in_dockerds_store() {
        let programs = [
            "docker-registry",
            "dockerd",
            "containerd",
            "docker",
            "tar",
            "busybox",
        ];
        if !installed(&programs) {
            return;
        }
        let path = std::env::var("PATH").unwrap_or_default();
        let busybox = crate::packages::locate("busybox", &path).unwrap();
        let mut run = Run::new();
        let (registry_dir, docker_dir) = (run.dir("registry"), run.dir("dockerd"));
        let port = free_ports(1).unwrap()[0];
        start(&mut run.supervisor, &registry_dir, port).unwrap();
        let docker = crate::docker::start(&mut run.supervisor, &docker_dir).unwrap();
        let registry = format!("127.0.0.1:{port}");
        let image = seed(&registry_dir, &docker[0].1, &registry, &busybox).unwrap();
        assert_eq!(image, format!("{registry}/holdfast/busybox:latest"));
        // The registry holds it...
        let (status, tags) =
            probe::http_get(loopback(port), "/v2/holdfast/busybox/tags/list").unwrap();
        assert_eq!(status, 200, "{tags}");
        let tags: serde_json::Value = serde_json::from_str(&tags).unwrap();
        assert_eq!(tags["tags"], serde_json::json!(["latest"]));
        // ...built from busybox alone, in one layer...
        let (status, manifest) =
            probe::http_get(loopback(port), "/v2/holdfast/busybox/manifests/latest").unwrap();
        assert_eq!(status, 200, "{manifest}");
        // Asked without an Accept header, the registry answers in schema 1.
        let manifest: serde_json::Value = serde_json::from_str(&manifest).unwrap();
        assert_eq!(manifest["fsLayers"].as_array().map(Vec::len), Some(1));
        // ...and dockerd's local store does not: a test that wants it must pull it.
        let (status, images) = probe::unix_http_get(&docker_dir.sock(), "/images/json").unwrap();
        assert_eq!(status, 200, "{images}");
        assert_eq!(images.trim(), "[]");
    }

    /// `GET /v2/` with an optional basic `Authorization`, answering the status.
    fn status_with(addr: std::net::SocketAddr, login: Option<(&str, &str)>) -> u16 {
        use base64::Engine as _;
        use std::io::{Read as _, Write as _};
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let auth = login.map_or(String::new(), |(user, password)| {
            let token =
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            format!("Authorization: Basic {token}\r\n")
        });
        write!(stream, "GET /v2/ HTTP/1.0\r\nHost: {addr}\r\n{auth}\r\n").unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    // i[verify harness.services.auth-registry]
    #[test]
    fn the_authenticated_registry_refuses_anyone_without_its_password() {
        if !installed(&["docker-registry"]) {
            return;
        }
        let mut run = Run::new();
        let dir = run.dir("auth-registry");
        let port = free_ports(1).unwrap()[0];
        let password = fresh_password();
        assert_ne!(password, fresh_password(), "a password per run");
        let login = Login {
            username: AUTH_USER,
            password: &password,
        };
        assert!(!format!("{login:?}").contains(&password));
        let env = start_authenticated(&mut run.supervisor, &dir, port, login).unwrap();
        assert_eq!(
            env,
            [
                (AUTH_REGISTRY_VAR, format!("127.0.0.1:{port}")),
                (AUTH_USER_VAR, AUTH_USER.to_owned()),
                (AUTH_PASSWORD_VAR, password.clone()),
            ]
        );
        let addr = loopback(port);
        assert_eq!(status_with(addr, None), 401);
        assert_eq!(status_with(addr, Some((AUTH_USER, "wrong"))), 401);
        assert_eq!(status_with(addr, Some((AUTH_USER, &password))), 200);
        // The htpasswd holds a bcrypt hash, not the password.
        let htpasswd = std::fs::read_to_string(dir.file("htpasswd")).unwrap();
        assert!(htpasswd.starts_with("holdfast:$2"), "{htpasswd}");
        assert!(!htpasswd.contains(&password));
        run.supervisor.stop_all();
        assert!(!probe::accepts(addr), "the registry still answers");
    }

    // i[verify harness.services.auth-registry]
    #[test]
    fn the_authenticated_registry_is_seeded_with_the_login_which_is_not_left_behind() {
        let programs = [
            "docker-registry",
            "dockerd",
            "containerd",
            "docker",
            "tar",
            "busybox",
        ];
        if !installed(&programs) {
            return;
        }
        let path = std::env::var("PATH").unwrap_or_default();
        let busybox = crate::packages::locate("busybox", &path).unwrap();
        let mut run = Run::new();
        let (registry_dir, docker_dir) = (run.dir("auth-registry"), run.dir("dockerd"));
        let port = free_ports(1).unwrap()[0];
        let password = fresh_password();
        let login = Login {
            username: AUTH_USER,
            password: &password,
        };
        start_authenticated(&mut run.supervisor, &registry_dir, port, login).unwrap();
        let docker = crate::docker::start(&mut run.supervisor, &docker_dir).unwrap();
        let registry = format!("127.0.0.1:{port}");
        let image = seed_as(
            &registry_dir,
            &docker[0].1,
            &registry,
            &busybox,
            Some(login),
        )
        .unwrap();
        assert_eq!(image, format!("{registry}/holdfast/busybox:latest"));
        assert!(!registry_dir.file("docker-client/config.json").exists());
        // Anonymous: refused; the tag list is there for the user.
        let (status, _) =
            probe::http_get(loopback(port), "/v2/holdfast/busybox/tags/list").unwrap();
        assert_eq!(status, 401);
    }
}
