//! A single-member etcd (v3 API, with its JSON gateway) on loopback ports.

use std::process::Command;
use std::time::Duration;

use holdfast_test_support::services::ETCD_VAR;

use super::layout::{ServiceDir, loopback};
use super::probe;
use super::process::Supervisor;

/// The variables [`start`] exports.
pub const EXPORTS: [&str; 1] = [ETCD_VAR];

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
    Ok(crate::layout::exports(EXPORTS, [client]))
}

/// etcd answers: `/health` says 200 `"health":"true"`.
// i[impl harness.services.ready]
fn healthy(answer: std::io::Result<(u16, String)>) -> bool {
    answer.is_ok_and(|(status, body)| status == 200 && body.contains(r#""health":"true""#))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::free_ports;
    use crate::process::processes_under;
    use crate::testing::{Run, installed};

    // i[verify harness.services.etcd]
    #[test]
    fn etcd_starts_privately_and_exports_its_client_url() {
        if !installed(&["etcd"]) {
            return;
        }
        let mut run = Run::new();
        let dir = run.dir("etcd");
        let ports = free_ports(2).unwrap();
        let env = start(&mut run.supervisor, &dir, ports[0], ports[1]).unwrap();
        let url = format!("http://127.0.0.1:{}", ports[0]);
        assert_eq!(env, [(ETCD_VAR, url)]);
        // An etcd 3 answers on the exported port...
        let (status, body) = probe::http_get(loopback(ports[0]), "/version").unwrap();
        assert_eq!(status, 200, "{body}");
        assert!(body.contains(r#""etcdserver":"3."#), "{body}");
        // ...one of this run's, keeping its state in this run's directory.
        assert_eq!(processes_under(run.root(), &["etcd"]).len(), 1);
        assert!(dir.data().join("member").is_dir());
        run.supervisor.stop_all();
        assert!(processes_under(run.root(), &["etcd"]).is_empty());
    }

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
