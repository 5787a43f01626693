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
        healthy(probe::http_get(loopback(client_port), "/health"))
    })?;
    Ok(vec![("HOLDFAST_TEST_ETCD", client)])
}

/// etcd answers: `/health` says 200 `"health":"true"`.
// i[impl harness.services.ready]
fn healthy(answer: std::io::Result<(u16, String)>) -> bool {
    answer.is_ok_and(|(status, body)| status == 200 && body.contains(r#""health":"true""#))
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify harness.services.ready]
    #[test]
    fn etcd_is_ready_only_once_health_answers_200_true() {
        let answer = |status: u16, body: &str| Ok((status, body.to_owned()));
        assert!(healthy(answer(200, r#"{"health":"true","reason":""}"#)));
        assert!(!healthy(answer(
            200,
            r#"{"health":"false","reason":"NOSPACE"}"#
        )));
        assert!(!healthy(answer(503, r#"{"health":"true"}"#)));
        assert!(!healthy(Err(std::io::ErrorKind::ConnectionRefused.into())));
    }
}
