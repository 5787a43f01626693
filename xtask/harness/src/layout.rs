//! Where each service keeps its state: `target/holdfast-services/<service>/`.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// One service's private directory.
#[derive(Debug, Clone)]
pub struct ServiceDir {
    /// The service's name.
    pub name: &'static str,
    /// `target/holdfast-services/<service>`.
    pub root: PathBuf,
}

impl ServiceDir {
    /// Creates `<services root>/<name>/data` afresh (the previous run's state is removed).
    // i[impl harness.services.private]
    pub fn fresh(services_root: &Path, name: &'static str) -> anyhow::Result<Self> {
        let root = services_root.join(name);
        if root.exists() {
            std::fs::remove_dir_all(&root)
                .with_context(|| format!("removing the previous run's {}", root.display()))?;
        }
        std::fs::create_dir_all(root.join("data"))
            .with_context(|| format!("creating {}", root.display()))?;
        Ok(ServiceDir { name, root })
    }

    /// The service's data directory.
    pub fn data(&self) -> PathBuf {
        self.root.join("data")
    }

    /// The service's log file (its stdout and stderr).
    pub fn log(&self) -> PathBuf {
        self.root.join("log")
    }

    /// The service's socket, for services that listen on one.
    pub fn sock(&self) -> PathBuf {
        self.root.join("sock")
    }

    /// Any other file of the service (config, certificates, pid file).
    pub fn file(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }
}

/// A service's exported environment: its `names` (the module's `EXPORTS`, the names the runner's
/// test checks against holdfast-test-support's) paired with their `values`, as many of each.
pub fn exports<const N: usize>(
    names: [&'static str; N],
    values: [String; N],
) -> Vec<(&'static str, String)> {
    names.into_iter().zip(values).collect()
}

/// `n` distinct free loopback ports: all bound at once (so none repeats), then released.
pub fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .context("binding a free loopback port")?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

/// `127.0.0.1:port`.
pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify harness.services.private]
    #[test]
    fn a_fresh_service_dir_drops_the_previous_runs_state() {
        let tmp = tempfile::tempdir().unwrap();
        let old = ServiceDir::fresh(tmp.path(), "etcd").unwrap();
        std::fs::write(old.data().join("member"), "old state").unwrap();
        std::fs::write(old.log(), "old log").unwrap();
        let new = ServiceDir::fresh(tmp.path(), "etcd").unwrap();
        assert_eq!(new.root, tmp.path().join("etcd"));
        assert!(new.data().is_dir());
        assert!(!new.data().join("member").exists());
        assert!(!new.log().exists());
    }

    // i[verify harness.services.private]
    #[test]
    fn free_ports_are_distinct_loopback_ports() {
        let ports = free_ports(8).unwrap();
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), 8);
        assert!(ports.iter().all(|&p| p != 0));
        // Released: each can be bound again.
        for port in ports {
            drop(TcpListener::bind(loopback(port)).unwrap());
        }
    }
}
