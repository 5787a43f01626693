//! Readiness probes: tiny blocking clients that ask a service whether it answers.

use std::io::{self, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;

use super::process::{Running, interrupted};

const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// `GET path` over HTTP/1.0 (the server closes after answering); returns (status, body).
pub fn http_get(addr: SocketAddr, path: &str) -> io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    exchange(&mut stream, path)
}

/// `GET path` over HTTP/1.0 on a Unix socket (the Docker Engine API).
pub fn unix_http_get(socket: &Path, path: &str) -> io::Result<(u16, String)> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    exchange(&mut stream, path)
}

fn exchange(stream: &mut (impl io::Read + io::Write), path: &str) -> io::Result<(u16, String)> {
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not an HTTP response"))?;
    Ok((status, body.to_owned()))
}

/// Redis `PING` → `+PONG`.
pub fn redis_ping(addr: SocketAddr) -> io::Result<bool> {
    let mut stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.write_all(b"PING\r\n")?;
    let mut buf = [0u8; 7];
    stream.read_exact(&mut buf)?;
    Ok(&buf == b"+PONG\r\n")
}

/// A TCP connect succeeds.
pub fn accepts(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, IO_TIMEOUT).is_ok()
}

/// Polls `ready` until it holds; fails early when the service exits or the user interrupts, and
/// late (naming the log) when it does not answer within `timeout`.
// i[impl harness.services.ready]
pub fn wait_ready(
    service: &mut Running,
    what: &str,
    timeout: Duration,
    mut ready: impl FnMut() -> bool,
) -> anyhow::Result<()> {
    let start = Instant::now();
    loop {
        if interrupted() {
            bail!("interrupted while waiting for {}", service.name);
        }
        if let Some(status) = service.exited() {
            bail!(
                "{} exited ({status}) before it answered {what}; see its log: {}",
                service.name,
                service.log.display()
            );
        }
        if ready() {
            eprintln!(
                "xtask test: {} ready in {:.1}s",
                service.name,
                start.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        if start.elapsed() > timeout {
            bail!(
                "{} did not answer {what} within {timeout:?}; see its log: {}",
                service.name,
                service.log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::process::Supervisor;

    // i[verify harness.logs]
    // i[verify harness.services.ready]
    #[test]
    fn a_service_that_dies_before_answering_fails_fast_naming_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut supervisor = Supervisor::new(dir.path().to_owned());
        let log = dir.path().join("log");
        let mut command = std::process::Command::new("sh");
        command.args(["-c", "echo 'bind: address already in use' >&2; exit 3"]);
        let service = supervisor
            .spawn("flaky", command, &log, Duration::from_secs(1))
            .unwrap();
        let started = Instant::now();
        let err = wait_ready(service, "PING", Duration::from_secs(60), || false).unwrap_err();
        let text = format!("{err:#}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "did not fail fast"
        );
        assert!(text.contains("flaky exited"), "{text}");
        assert!(text.contains(&log.display().to_string()), "{text}");
        assert!(
            std::fs::read_to_string(&log)
                .unwrap()
                .contains("address already in use")
        );
    }

    // i[verify harness.services.ready]
    #[test]
    fn readiness_waits_for_the_probe_not_for_the_process() {
        let dir = tempfile::tempdir().unwrap();
        let mut supervisor = Supervisor::new(dir.path().to_owned());
        let mut command = std::process::Command::new("sh");
        command.args(["-c", "exec sleep 600"]);
        let service = supervisor
            .spawn(
                "slow",
                command,
                &dir.path().join("log"),
                Duration::from_secs(5),
            )
            .unwrap();
        let mut probes = 0;
        wait_ready(service, "a probe", Duration::from_secs(60), || {
            probes += 1;
            probes == 3
        })
        .unwrap();
        assert_eq!(probes, 3);
        let err = wait_ready(service, "a probe", Duration::from_millis(250), || false).unwrap_err();
        assert!(
            format!("{err}").contains("did not answer a probe within"),
            "{err}"
        );
    }
}
