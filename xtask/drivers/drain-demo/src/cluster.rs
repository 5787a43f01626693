//! The two `holdfast run -c` processes: their configs (one cluster, distinct replicas), starting
//! them, signalling replica A and restarting it.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::http;

/// What both replicas share: the cluster's backends and the token key.
#[derive(Debug, Clone)]
pub struct Shared {
    /// etcd's client URL.
    pub etcd: String,
    /// The key prefix the replicas register under.
    pub etcd_prefix: String,
    /// Redis' URL.
    pub redis: String,
    /// The key prefix of the routing map and bus.
    pub redis_prefix: String,
    /// The registration lease's TTL.
    pub lease_ttl: Duration,
    /// The shared HMAC secret's file (mode 0600).
    pub token_key_file: PathBuf,
}

/// One replica's own settings.
#[derive(Debug, Clone)]
pub struct ReplicaSpec {
    /// Its node and replica id.
    pub id: String,
    /// Where its gateway listens.
    pub listen: SocketAddr,
    /// Its data directory (and logs).
    pub dir: PathBuf,
    /// Its admin socket (kept short: Unix socket paths are limited to 108 bytes).
    pub socket: PathBuf,
}

/// The TOML config of one replica: the admin API on its socket only, no pull module, the gateway
/// in cluster mode on the shared etcd and Redis.
// i[impl xtask.drain-demo.cluster]
pub fn config(spec: &ReplicaSpec, shared: &Shared) -> String {
    format!(
        "[node]\nid = \"{id}\"\ndata_dir = \"{data}\"\nstop_budget = \"10s\"\ntick = \"1s\"\n\n\
         [admin]\nlisten = \"off\"\nsocket = \"{socket}\"\n\n\
         [log]\nformat = \"human\"\nlevel = \"info\"\n\n\
         [pull]\nenabled = false\n\n\
         [gateway]\nlisten = \"{listen}\"\nreplica_id = \"{id}\"\ntoken_key_file = \"{key}\"\n\n\
         [gateway.drain]\ntotal = \"5s\"\nclose = \"from-reason\"\n\n\
         [gateway.cluster]\netcd = [\"{etcd}\"]\netcd_prefix = \"{etcd_prefix}\"\n\
         lease_ttl = \"{ttl}s\"\nredis = \"{redis}\"\nredis_prefix = \"{redis_prefix}\"\n",
        id = spec.id,
        data = spec.dir.join("data").display(),
        socket = spec.socket.display(),
        listen = spec.listen,
        key = shared.token_key_file.display(),
        etcd = shared.etcd,
        etcd_prefix = shared.etcd_prefix,
        ttl = shared.lease_ttl.as_secs().max(1),
        redis = shared.redis,
        redis_prefix = shared.redis_prefix,
    )
}

/// A running replica process; killed when dropped.
#[derive(Debug)]
pub struct Replica {
    /// Its settings.
    pub spec: ReplicaSpec,
    child: Child,
    /// How many times it was started (its log is `log.N`).
    starts: u32,
    binary: PathBuf,
}

impl Replica {
    /// Writes its config and starts `holdfast run -c`, waiting until its gateway is ready.
    pub async fn start(binary: &Path, spec: ReplicaSpec, shared: &Shared) -> anyhow::Result<Self> {
        std::fs::create_dir_all(&spec.dir)
            .with_context(|| format!("creating {}", spec.dir.display()))?;
        let path = spec.dir.join("holdfast.toml");
        std::fs::write(&path, config(&spec, shared))
            .with_context(|| format!("writing {}", path.display()))?;
        let child = spawn(binary, &spec, 1)?;
        let mut replica = Replica {
            spec,
            child,
            starts: 1,
            binary: binary.to_owned(),
        };
        replica.wait_ready().await?;
        Ok(replica)
    }

    /// The log file of the current (or last) start.
    pub fn log(&self) -> PathBuf {
        self.spec.dir.join(format!("log.{}", self.starts))
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: Signal) -> anyhow::Result<()> {
        let pid = Pid::from_raw(i32::try_from(self.child.id()).context("pid out of range")?);
        kill(pid, signal).with_context(|| format!("sending {signal} to {}", self.spec.id))
    }

    /// True once the process has exited.
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Starts the process again (after it exited), waiting until its gateway is ready.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        if !self.exited() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        self.starts += 1;
        self.child = spawn(&self.binary, &self.spec, self.starts)?;
        self.wait_ready().await
    }

    /// `GET /v1/gateway` on its admin socket, as JSON.
    pub async fn gateway_state(&self) -> anyhow::Result<serde_json::Value> {
        let (status, body) = http::unix(&self.spec.socket, "GET", "/v1/gateway", None).await?;
        if status != 200 {
            bail!("GET /v1/gateway on {}: {status} {body}", self.spec.id);
        }
        serde_json::from_str(&body).context("parsing /v1/gateway")
    }

    /// Polls `/v1/gateway` until it says ready; fails early when the process exits.
    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                bail!(
                    "replica {} exited ({status}) before it was ready; see {}",
                    self.spec.id,
                    self.log().display()
                );
            }
            if let Ok(state) = self.gateway_state().await
                && state["ready"] == true
            {
                return Ok(());
            }
            if started.elapsed() > Duration::from_secs(60) {
                bail!(
                    "replica {} was not ready within 60 s; see {}",
                    self.spec.id,
                    self.log().display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        // No replica outlives the demo, however it ends.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(binary: &Path, spec: &ReplicaSpec, start: u32) -> anyhow::Result<Child> {
    let log = spec.dir.join(format!("log.{start}"));
    let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let err = out.try_clone()?;
    Command::new(binary)
        .arg("run")
        .arg("-c")
        .arg(spec.dir.join("holdfast.toml"))
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        // A file, never a pipe nobody drains: a full pipe would block the node's logging.
        .stdout(out)
        .stderr(err)
        .spawn()
        .with_context(|| format!("starting {} {}", binary.display(), spec.id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(id: &str, port: u16) -> ReplicaSpec {
        ReplicaSpec {
            id: id.into(),
            listen: SocketAddr::from(([127, 0, 0, 1], port)),
            dir: PathBuf::from(format!("/demo/{id}")),
            socket: PathBuf::from(format!("/tmp/demo/{id}.sock")),
        }
    }

    // i[verify xtask.drain-demo.cluster]
    #[test]
    fn both_replicas_join_one_cluster_as_distinct_replicas() {
        let shared = Shared {
            etcd: "http://127.0.0.1:2379".into(),
            etcd_prefix: "/holdfast/drain-demo".into(),
            redis: "redis://127.0.0.1:6379".into(),
            redis_prefix: "holdfast:drain-demo".into(),
            lease_ttl: Duration::from_secs(10),
            token_key_file: PathBuf::from("/demo/token.key"),
        };
        let a = config(&spec("gw-a", 7001), &shared);
        let b = config(&spec("gw-b", 7002), &shared);
        insta::assert_snapshot!("replica_a_config", a);
        // B differs from A in its identity, ports and directories only.
        let differing: Vec<(&str, &str)> =
            a.lines().zip(b.lines()).filter(|(x, y)| x != y).collect();
        assert_eq!(
            differing,
            vec![
                ("id = \"gw-a\"", "id = \"gw-b\""),
                (
                    "data_dir = \"/demo/gw-a/data\"",
                    "data_dir = \"/demo/gw-b/data\""
                ),
                (
                    "socket = \"/tmp/demo/gw-a.sock\"",
                    "socket = \"/tmp/demo/gw-b.sock\""
                ),
                ("listen = \"127.0.0.1:7001\"", "listen = \"127.0.0.1:7002\""),
                ("replica_id = \"gw-a\"", "replica_id = \"gw-b\""),
            ]
        );
    }
}
