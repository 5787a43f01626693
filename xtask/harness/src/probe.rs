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
    ready: impl FnMut() -> bool,
) -> anyhow::Result<()> {
    let start = Instant::now();
    let clock = Clock {
        elapsed: || start.elapsed(),
        sleep: std::thread::sleep,
    };
    wait_ready_on(clock, service, what, timeout, ready)
}

/// How long to wait between two probes.
const POLL: Duration = Duration::from_millis(100);

/// The time [`wait_ready_on`] goes by: the wall clock in a run, a counted one in tests.
struct Clock<E, S> {
    /// Time since the wait began.
    elapsed: E,
    /// Waits that long.
    sleep: S,
}

/// [`wait_ready`] on `clock`.
// i[impl harness.services.ready]
fn wait_ready_on(
    mut clock: Clock<impl Fn() -> Duration, impl FnMut(Duration)>,
    service: &mut Running,
    what: &str,
    timeout: Duration,
    mut ready: impl FnMut() -> bool,
) -> anyhow::Result<()> {
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
                (clock.elapsed)().as_secs_f64()
            );
            return Ok(());
        }
        // The bound is the service's to use whole: it fails once the bound has passed.
        if (clock.elapsed)() > timeout {
            bail!(
                "{} did not answer {what} within {timeout:?}; see its log: {}",
                service.name,
                service.log.display()
            );
        }
        (clock.sleep)(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::Supervisor;

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

    /// A service that runs (and never answers anything) until the supervisor stops it.
    fn sleeper<'a>(supervisor: &'a mut Supervisor, dir: &Path) -> &'a mut Running {
        let mut command = std::process::Command::new("sh");
        command.args(["-c", "exec sleep 600"]);
        supervisor
            .spawn("slow", command, &dir.join("log"), Duration::from_secs(5))
            .unwrap()
    }

    // i[verify harness.services.ready]
    #[test]
    fn readiness_waits_for_the_probe_not_for_the_process() {
        let dir = tempfile::tempdir().unwrap();
        let mut supervisor = Supervisor::new(dir.path().to_owned());
        let service = sleeper(&mut supervisor, dir.path());
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

    // i[verify harness.services.ready]
    #[test]
    fn a_service_is_probed_until_its_bound_has_passed() {
        let dir = tempfile::tempdir().unwrap();
        let mut supervisor = Supervisor::new(dir.path().to_owned());
        let service = sleeper(&mut supervisor, dir.path());
        // A counted clock: each sleep moves it on by exactly the pause asked for.
        let now = std::cell::Cell::new(Duration::ZERO);
        let clock = Clock {
            elapsed: || now.get(),
            sleep: |pause| now.set(now.get() + pause),
        };
        let mut probed_at = Vec::new();
        let bound = Duration::from_millis(300);
        let err = wait_ready_on(clock, service, "a probe", bound, || {
            probed_at.push(now.get().as_millis());
            false
        })
        .unwrap_err();
        assert!(format!("{err}").contains("within 300ms"), "{err}");
        // Probed at the very end of the bound too; failed by the first probe after it.
        assert_eq!(probed_at, [0, 100, 200, 300, 400]);
    }
}
