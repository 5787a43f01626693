//! A single-member etcd (v3 API, with its JSON gateway) on loopback ports.

use std::process::Command;
use std::time::Duration;

use super::layout::{ServiceDir, loopback};
use super::probe;
use super::process::Supervisor;

// i[impl harness.services.etcd]
/// Starts etcd and waits for `/health`; returns its exported variables.
pub fn start(
    supervisor: &mut Supervisor,
    dir: &ServiceDir,
    client_port: u16,
    peer_port: u16,
) -> anyhow::Result<Vec<(&'static str, String)>> {
    let client = format!("http://127.0.0.1:{client_port}");
    let peer = format!("http://127.0.0.1:{peer_port}");
    let mut command = Command::new("etcd");
    command
        .args(["--name", "default"])
        .arg("--data-dir")
        .arg(dir.data())
        .args(["--listen-client-urls", &client])
        .args(["--advertise-client-urls", &client])
        .args(["--listen-peer-urls", &peer])
        .args(["--initial-advertise-peer-urls", &peer])
        .args(["--initial-cluster", &format!("default={peer}")])
        .args(["--initial-cluster-state", "new"])
        .args(["--logger", "zap", "--log-outputs", "stderr"]);
    let service = supervisor.spawn(dir.name, command, &dir.log(), Duration::from_secs(10))?;
    probe::wait_ready(service, "GET /health", Duration::from_secs(60), || {
        probe::http_get(loopback(client_port), "/health")
            .is_ok_and(|(status, body)| status == 200 && body.contains(r#""health":"true""#))
    })?;
    Ok(vec![("HOLDFAST_TEST_ETCD", client)])
}
