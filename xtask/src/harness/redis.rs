//! redis-server on a loopback port, no persistence.

use std::process::Command;
use std::time::Duration;

use super::layout::{ServiceDir, loopback};
use super::probe;
use super::process::Supervisor;

// i[impl harness.services.redis]
/// Starts redis and waits for `PING`; returns its exported variables.
pub fn start(
    supervisor: &mut Supervisor,
    dir: &ServiceDir,
    port: u16,
) -> anyhow::Result<Vec<(&'static str, String)>> {
    let mut command = Command::new("redis-server");
    command
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .args(["--logfile", ""])
        .arg("--dir")
        .arg(dir.data());
    let service = supervisor.spawn(dir.name, command, &dir.log(), Duration::from_secs(10))?;
    probe::wait_ready(service, "PING", Duration::from_secs(30), || {
        probe::redis_ping(loopback(port)).unwrap_or(false)
    })?;
    Ok(vec![(
        "HOLDFAST_TEST_REDIS",
        format!("redis://127.0.0.1:{port}"),
    )])
}
