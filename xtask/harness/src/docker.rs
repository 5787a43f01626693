//! A private dockerd: its own data root, exec root, socket and pid file; vfs storage, no iptables,
//! no bridge. It starts its own containerd under the exec root.

use std::process::Command;
use std::time::Duration;

use holdfast_test_support::services::DOCKER_HOST_VAR;

use super::layout::ServiceDir;
use super::probe;
use super::process::Supervisor;

/// The variables [`start`] exports.
pub const EXPORTS: [&str; 1] = [DOCKER_HOST_VAR];

// i[impl harness.services.docker]
/// Starts dockerd and waits for `/_ping`; returns its exported variables.
pub fn start(
    supervisor: &mut Supervisor,
    dir: &ServiceDir,
) -> anyhow::Result<Vec<(&'static str, String)>> {
    let socket = dir.sock();
    let host = format!("unix://{}", socket.display());
    // An empty daemon.json of our own, so the machine's /etc/docker/daemon.json plays no part.
    let config = dir.file("daemon.json");
    std::fs::write(&config, "{}\n")?;
    let mut command = Command::new("dockerd");
    command
        .arg("--config-file")
        .arg(&config)
        .arg("--data-root")
        .arg(dir.data())
        .arg("--exec-root")
        .arg(dir.file("exec"))
        .args(["-H", &host])
        .arg("--pidfile")
        .arg(dir.file("dockerd.pid"))
        .args([
            "--storage-driver",
            "vfs",
            "--iptables=false",
            "--bridge=none",
        ]);
    // Stopping containers and containerd can take a while; dockerd's own shutdown timeout is 15 s.
    let service = supervisor.spawn(dir.name, command, &dir.log(), Duration::from_secs(30))?;
    probe::wait_ready(service, "GET /_ping", Duration::from_secs(90), || {
        pinged(probe::unix_http_get(&socket, "/_ping"))
    })?;
    Ok(crate::layout::exports(EXPORTS, [host]))
}

/// dockerd answers: `/_ping` says 200 `OK`.
// i[impl harness.services.ready]
fn pinged(answer: std::io::Result<(u16, String)>) -> bool {
    answer.is_ok_and(|(status, body)| status == 200 && body == "OK")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::processes_under;
    use crate::testing::{Run, installed};

    // i[verify harness.services.docker]
    #[test]
    fn dockerd_starts_privately_and_exports_its_socket() {
        if !installed(&["dockerd", "containerd"]) {
            return;
        }
        let mut run = Run::new();
        let dir = run.dir("dockerd");
        let env = start(&mut run.supervisor, &dir).unwrap();
        let socket = dir.sock();
        assert_eq!(
            env,
            [(DOCKER_HOST_VAR, format!("unix://{}", socket.display()))]
        );
        // The engine answers on that socket, storing in this run's data root with vfs.
        let (status, info) = probe::unix_http_get(&socket, "/info").unwrap();
        assert_eq!(status, 200, "{info}");
        let info: serde_json::Value = serde_json::from_str(&info).unwrap();
        assert_eq!(info["DockerRootDir"], dir.data().display().to_string());
        assert_eq!(info["Driver"], "vfs");
        // This run's dockerd and its own containerd (under its exec root), beside any other.
        assert_eq!(processes_under(run.root(), &["dockerd"]).len(), 1);
        assert_eq!(processes_under(run.root(), &["containerd"]).len(), 1);
        run.supervisor.stop_all();
        assert!(processes_under(run.root(), &["dockerd", "containerd"]).is_empty());
    }

    // i[verify harness.services.ready]
    #[test]
    fn dockerd_is_ready_only_once_ping_answers_200_ok() {
        let answer = |status: u16, body: &str| Ok((status, body.to_owned()));
        assert!(pinged(answer(200, "OK")));
        assert!(!pinged(answer(200, "")));
        assert!(!pinged(answer(500, "OK")));
        assert!(!pinged(Err(std::io::ErrorKind::NotFound.into())));
    }
}
