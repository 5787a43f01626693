//! The node under attack: a real `holdfast run` with every listener on loopback, its readiness,
//! and its process's descriptors and memory read from /proc.

use std::fs;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use holdfast_forward::Fingerprint;

use crate::verdict::TasksUnread;

/// The secrets and addresses the probes need.
#[derive(Debug, Clone)]
pub struct Edges {
    /// The admin API.
    pub admin: SocketAddr,
    /// The HTTP-01 responder.
    pub http01: SocketAddr,
    /// The forward's QUIC listener.
    pub forward: SocketAddr,
    /// The gateway's WebSocket listener.
    pub gateway: SocketAddr,
    /// The forward's credential (the real client's).
    pub forward_token: String,
    /// Another credential of the forward, the authenticated attackers' own: the bound on one
    /// credential's connections is theirs to fill, not the real client's.
    pub attacker_token: String,
    /// A UDP echo on loopback that the forward allows: the real client's forward target.
    pub echo: SocketAddr,
    /// The forward's pinned identity.
    pub pin: Fingerprint,
    /// The gateway's token key.
    pub gateway_key: Vec<u8>,
}

/// A running node; killed when dropped.
pub struct Node {
    child: Child,
    log: PathBuf,
    /// What the probes and floods need.
    pub edges: Edges,
}

/// A free loopback TCP port (and, the ports being separate, nothing on its UDP twin in practice).
fn free_port() -> anyhow::Result<SocketAddr> {
    let l = TcpListener::bind("127.0.0.1:0").context("binding a probe port")?;
    Ok(l.local_addr()?)
}

/// A fresh hex secret from the kernel's random pool.
fn secret(bytes: usize) -> anyhow::Result<String> {
    let mut buf = vec![0u8; bytes];
    let mut f = fs::File::open("/dev/urandom").context("/dev/urandom")?;
    std::io::Read::read_exact(&mut f, &mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

impl Node {
    /// Writes a config with every listener under `dir` and starts `bin` on it; returns once its
    /// admin API answers `/readyz` with 200 (30 s at most).
    pub fn start(bin: &Path, dir: &Path) -> anyhow::Result<Node> {
        let data = dir.join("data");
        fs::create_dir_all(&data)?;
        let (admin, http01, forward, gateway) =
            (free_port()?, free_port()?, free_port()?, free_port()?);
        let forward_token = secret(32)?;
        let attacker_token = secret(32)?;
        let echo = echo()?;
        let gateway_key = secret(32)?;
        let key_file = dir.join("gateway.key");
        write_private(&key_file, gateway_key.as_bytes())?;
        let config = format!(
            r#"# Written by holdfast-attack: every listener on loopback.
[node]
data_dir = "{data}"
stop_budget = "5s"
[admin]
listen = "{admin}"
[pull]
enabled = false
[issuance]
[[issuance.hostname]]
name = "attack.holdfast.test"
source = "acme"
[issuance.acme]
# Nothing listens there: attempts fail and are paced; the responder is what is attacked.
directory = "https://127.0.0.1:9/directory"
http01_bind = "{http01}"
[forward]
listen = "{forward}"
tokens = ["{forward_token}", "{attacker_token}"]
allow = ["127.0.0.1:9", "{echo}"]
[gateway]
listen = "{gateway}"
token_key_file = "{key}"
"#,
            data = data.display(),
            key = key_file.display(),
        );
        let config_path = dir.join("holdfast.toml");
        fs::write(&config_path, config)?;
        let pin = identity(bin, &data)?;
        let log = dir.join("node.log");
        let out = fs::File::create(&log)?;
        let child = Command::new(bin)
            .args(["run", "-c"])
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let node = Node {
            child,
            log,
            edges: Edges {
                admin,
                http01,
                forward,
                gateway,
                forward_token,
                attacker_token,
                echo,
                pin,
                gateway_key: gateway_key.into_bytes(),
            },
        };
        node.wait_ready(Duration::from_secs(30))?;
        Ok(node)
    }

    fn wait_ready(&self, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if crate::probe::blocking_status(self.edges.admin, "/readyz") == Some(200) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!(
            "the node was not ready within {limit:?}; its log: {}",
            self.log.display()
        )
    }

    /// The node's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Lines of the node's log that report a panic.
    pub fn panics(&self) -> usize {
        fs::read_to_string(&self.log)
            .map(|s| s.lines().filter(|l| l.contains("panicked")).count())
            .unwrap_or(0)
    }

    /// Where the node's log is.
    pub fn log(&self) -> &Path {
        &self.log
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A UDP echo on 127.0.0.1, on its own thread for the rest of the run.
fn echo() -> anyhow::Result<SocketAddr> {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").context("binding the echo")?;
    let addr = socket.local_addr()?;
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((n, peer)) = socket.recv_from(&mut buf) {
            let _ = socket.send_to(&buf[..n], peer);
        }
    });
    Ok(addr)
}

fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| path.display().to_string())?;
    f.write_all(bytes)?;
    Ok(())
}

/// The forward's pin, from `holdfast forward identity` (which creates the identity the node loads).
fn identity(bin: &Path, data: &Path) -> anyhow::Result<Fingerprint> {
    let out = Command::new(bin)
        .args(["forward", "identity", "--data-dir"])
        .arg(data)
        .output()
        .context("holdfast forward identity")?;
    if !out.status.success() {
        bail!(
            "holdfast forward identity: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse()
        .map_err(|e| anyhow::anyhow!("holdfast forward identity printed {text:?}: {e:?}"))
}

/// The tasks alive on the node's runtime, from its `/metrics` (`holdfast_runtime_tasks_alive`);
/// or why not: the series absent, or `/metrics` not answering.
pub async fn tasks(admin: SocketAddr) -> Result<u64, TasksUnread> {
    let body = crate::probe::http_body(admin, "/metrics")
        .await
        .ok_or(TasksUnread::NoAnswer)?;
    tasks_in(&body).ok_or(TasksUnread::Absent)
}

fn tasks_in(metrics: &str) -> Option<u64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("holdfast_runtime_tasks_alive "))
        .and_then(|v| v.trim().parse().ok())
}

/// One sample of a process's open descriptors and resident memory (KiB), from /proc.
pub fn sample(pid: u32) -> Option<(u64, u64)> {
    let fds = fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())?;
    Some((fds, rss))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_count_is_read_from_its_series_and_nothing_else() {
        let text = "# HELP holdfast_runtime_tasks_alive Tasks\n\
                    # TYPE holdfast_runtime_tasks_alive gauge\n\
                    holdfast_runtime_tasks_alive_other 3\n\
                    holdfast_runtime_tasks_alive 42\n";
        assert_eq!(tasks_in(text), Some(42));
        assert_eq!(tasks_in("holdfast_draining 0\n"), None);
    }
}
