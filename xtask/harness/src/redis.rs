//! redis-server on a loopback port, no persistence.

use std::process::Command;
use std::time::Duration;

use holdfast_test_support::services::REDIS_VAR;

use super::layout::{ServiceDir, loopback};
use super::probe;
use super::process::Supervisor;

/// The variables [`start`] exports.
pub const EXPORTS: [&str; 1] = [REDIS_VAR];

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
    Ok(crate::layout::exports(
        EXPORTS,
        [format!("redis://127.0.0.1:{port}")],
    ))
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};

    use super::*;
    use crate::layout::free_ports;
    use crate::testing::{Run, installed};

    // i[verify harness.services.redis]
    #[test]
    fn redis_starts_privately_without_persistence_and_exports_its_url() {
        if !installed(&["redis-server"]) {
            return;
        }
        let mut run = Run::new();
        let dir = run.dir("redis");
        let port = free_ports(1).unwrap()[0];
        let env = start(&mut run.supervisor, &dir, port).unwrap();
        assert_eq!(env, [(REDIS_VAR, format!("redis://127.0.0.1:{port}"))]);
        // It answers on that port (on loopback only), works in this run's data directory, and
        // saves nothing there: no snapshots (an empty `save`), no append-only file.
        assert!(probe::redis_ping(loopback(port)).unwrap());
        let mut redis = std::net::TcpStream::connect(loopback(port)).unwrap();
        redis
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        redis
            .write_all(b"CONFIG GET bind\r\nCONFIG GET dir\r\nCONFIG GET save\r\nCONFIG GET appendonly\r\n")
            .unwrap();
        let data = dir.data().display().to_string();
        let expected = format!(
            "*2\r\n$4\r\nbind\r\n$9\r\n127.0.0.1\r\n\
             *2\r\n$3\r\ndir\r\n${}\r\n{data}\r\n\
             *2\r\n$4\r\nsave\r\n$0\r\n\r\n\
             *2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n",
            data.len()
        );
        let mut reply = vec![0u8; expected.len()];
        redis.read_exact(&mut reply).unwrap();
        assert_eq!(String::from_utf8_lossy(&reply), expected);
        run.supervisor.stop_all();
        assert!(
            probe::redis_ping(loopback(port)).is_err(),
            "still answering"
        );
    }
}
