//! The registry (Debian's `docker-registry`, distribution 2.8), and seeding it with a tiny image.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, bail};
use holdfast_test_support::services::REGISTRY_VAR;

use super::layout::{ServiceDir, loopback};
use super::probe;
use super::process::Supervisor;

/// The seeded image's repository and tag inside the registry.
pub const IMAGE_PATH: &str = "holdfast/busybox:latest";

// i[impl harness.services.registry]
/// Starts the registry and waits for `/v2/`; returns its exported variables.
pub fn start(
    supervisor: &mut Supervisor,
    dir: &ServiceDir,
    port: u16,
) -> anyhow::Result<Vec<(&'static str, String)>> {
    let config = format!(
        "version: 0.1\n\
         log:\n  level: info\n\
         storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n\
         http:\n  addr: 127.0.0.1:{port}\n",
        dir.data().display()
    );
    let config_path = dir.file("config.yml");
    std::fs::write(&config_path, config)?;
    let mut command = Command::new("docker-registry");
    command.arg("serve").arg(&config_path);
    let service = supervisor.spawn(dir.name, command, &dir.log(), Duration::from_secs(10))?;
    probe::wait_ready(service, "GET /v2/", Duration::from_secs(30), || {
        probe::http_get(loopback(port), "/v2/").is_ok_and(|(status, _)| status == 200)
    })?;
    Ok(vec![(REGISTRY_VAR, format!("127.0.0.1:{port}"))])
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
    run(&mut docker(&["push", &image]), &log)?;
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
        assert_eq!(
            env,
            [("HOLDFAST_TEST_REGISTRY", format!("127.0.0.1:{port}"))]
        );
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
}
