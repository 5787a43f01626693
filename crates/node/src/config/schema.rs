//! The low layer: the TOML schema as serde reads it, with spans (`toml::Spanned`) where an error
//! must point, and the defaults. Nothing here checks more than serde's types, and nothing here
//! knows any module of the node.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::duration::ConfigDuration;

// i[impl node.config.default]
/// The embedded single-node default (`examples/single-node.toml`).
pub const DEFAULT_CONFIG: &str = include_str!("../../../../examples/single-node.toml");
/// The name the embedded default is reported under in errors.
pub const DEFAULT_CONFIG_NAME: &str = "<embedded single-node default>";

/// A whole node configuration.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[node]`: identity, data directory, stop budget, tick.
    pub node: NodeSection,
    /// `[admin]`: the admin API.
    #[serde(default)]
    pub admin: AdminSection,
    /// `[log]`: log format and level.
    #[serde(default)]
    pub log: LogSection,
    /// `[pull]`: the image actuation module.
    #[serde(default)]
    pub pull: PullSection,
    /// `[supervise]`: how modules are started and restarted.
    #[serde(default)]
    pub supervise: SuperviseSection,
    /// `[[workload]]`: the containers the node runs (and whose images it keeps present).
    #[serde(default, rename = "workload")]
    pub workloads: Vec<Workload>,
    /// `[workloads]`: settings of the workload module as a whole.
    #[serde(default, rename = "workloads")]
    pub workloads_module: WorkloadsSection,
    /// `[issuance]`: certificates (holdfast-issuance's own config). The module runs only when the
    /// section is present.
    #[serde(default, skip_serializing)]
    pub issuance: Option<Spanned<holdfast_issuance::IssuanceConfig>>,
    /// `[forward]`: UDP forwards over QUIC. The module runs only when the section is present.
    #[serde(default, skip_serializing)]
    pub forward: Option<Spanned<ForwardSection>>,
    /// `[gateway]`: the WebSocket gateway. The module runs only when the section is present.
    #[serde(default, skip_serializing)]
    pub gateway: Option<Spanned<crate::config::GatewaySection>>,
    /// `[testing]`: test-only modules for the binary's own tests. Only in builds with the
    /// `testing-modules` feature; elsewhere `[testing]` is an unknown section.
    #[cfg(feature = "testing-modules")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub testing: Option<TestingSection>,
}

/// `[node]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSection {
    /// The node's identity (jitter seeds derive from it); else /etc/machine-id, else the hostname.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Spanned<String>>,
    /// Where the node keeps its state (created with mode 0700).
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    /// The total time the stop plan may take on SIGTERM.
    #[serde(default = "default_stop_budget")]
    pub stop_budget: Spanned<ConfigDuration>,
    /// How often reconcilers look at their desired state.
    #[serde(default = "default_tick")]
    pub tick: Spanned<ConfigDuration>,
}

fn default_data_dir() -> PathBuf {
    PathBuf::from("/var/lib/holdfast")
}
fn default_stop_budget() -> Spanned<ConfigDuration> {
    Spanned::new(0..0, ConfigDuration(Duration::from_secs(10)))
}
fn default_tick() -> Spanned<ConfigDuration> {
    Spanned::new(0..0, ConfigDuration(Duration::from_secs(5)))
}

/// The admin API's default TCP address.
pub const DEFAULT_ADMIN_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 7480);

/// `[admin]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AdminSection {
    /// TCP address, or `"off"` (default `127.0.0.1:7480`; port 0 picks one and writes it to
    /// `DATA_DIR/admin.addr`).
    #[serde(default = "default_listen")]
    pub listen: Spanned<Listen>,
    /// A Unix socket to serve on as well (created with mode 0600); mutating calls are allowed on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<PathBuf>,
    /// A file (mode 0600 or stricter) holding the bearer token that mutating calls over TCP need.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<Spanned<PathBuf>>,
    /// Must be true to bind `listen` to a non-loopback address.
    #[serde(default)]
    pub allow_non_loopback: bool,
    /// Names (and addresses) the TCP listener answers for besides its own address and
    /// `localhost`, with its port or none: a scraper's or a health probe's name for the node.
    /// Each a DNS name or an IP address, without a port (default: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_hosts: Vec<Spanned<String>>,
}

fn default_listen() -> Spanned<Listen> {
    Spanned::new(0..0, Listen::Tcp(DEFAULT_ADMIN_LISTEN))
}

impl Default for AdminSection {
    fn default() -> Self {
        AdminSection {
            listen: default_listen(),
            socket: None,
            token_file: None,
            allow_non_loopback: false,
            allowed_hosts: Vec::new(),
        }
    }
}

/// Where the admin API listens over TCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listen {
    /// On this address.
    Tcp(SocketAddr),
    /// Not over TCP (the Unix socket only).
    Off,
}

impl<'de> Deserialize<'de> for Listen {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if text == "off" {
            return Ok(Listen::Off);
        }
        text.parse().map(Listen::Tcp).map_err(|_| {
            serde::de::Error::custom(format!(
                "invalid address {text:?}: write IP:PORT, e.g. \"127.0.0.1:7480\", or \"off\""
            ))
        })
    }
}

impl Serialize for Listen {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Listen::Tcp(addr) => s.collect_str(addr),
            Listen::Off => s.serialize_str("off"),
        }
    }
}

/// `[log]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LogSection {
    /// `"human"` (default) or `"json"`.
    #[serde(default)]
    pub format: LogFormat,
    /// A tracing filter, e.g. `"info"` or `"info,holdfast_pull=debug"` (`RUST_LOG` overrides it).
    #[serde(default = "default_level")]
    pub level: Spanned<String>,
}

fn default_level() -> Spanned<String> {
    Spanned::new(0..0, "info".to_owned())
}

impl Default for LogSection {
    fn default() -> Self {
        LogSection {
            format: LogFormat::Human,
            level: default_level(),
        }
    }
}

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// One readable line per event.
    #[default]
    Human,
    /// One JSON object per event.
    Json,
}

/// `[pull]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PullSection {
    /// Run the pull module (default true).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// The Docker Engine API endpoint (default: `DOCKER_HOST`, else the default socket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker_host: Option<String>,
    /// First wait after a failed pull of an image (default 5 s).
    #[serde(default = "default_pull_base")]
    pub base: Spanned<ConfigDuration>,
    /// Longest wait between pulls of an image (default 5 m).
    #[serde(default = "default_cap")]
    pub cap: Spanned<ConfigDuration>,
    /// Consecutive failures of an image after which a fault is filed (default 5).
    #[serde(default = "default_escalate")]
    pub escalate_after: Spanned<u32>,
    /// A pull with no progress for this long is abandoned (default 60 s).
    #[serde(default = "default_stall")]
    pub stall_timeout: Spanned<ConfigDuration>,
    /// The Docker config file registry credentials are read from (`auths`, `credHelpers`,
    /// `credsStore`); it must exist when set (default: `$DOCKER_CONFIG/config.json`, else
    /// `~/.docker/config.json`, and none there means anonymous pulls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker_config: Option<Spanned<PathBuf>>,
    /// `[pull.auth."REGISTRY"]`: a user name and password file per registry, used for it
    /// instead of the Docker config (default: none). REGISTRY is read as an image's registry
    /// is (`docker.io`, `index.docker.io` and `registry-1.docker.io` are Docker Hub).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub auth: std::collections::BTreeMap<String, PullAuth>,
    /// How often a tag is checked against its registry for a workload with
    /// `pull_policy = "digest"` (default 15 m).
    #[serde(default = "default_digest_interval")]
    pub digest_interval: Spanned<ConfigDuration>,
    /// Collect images no workload is configured to use when the daemon's disk fills (default
    /// true).
    #[serde(default = "yes")]
    pub gc: bool,
    /// Disk use, in percent of the daemon's data root filesystem, at which image collection
    /// starts (default 85, the kubelet's).
    #[serde(default = "default_gc_high_percent")]
    pub gc_high_percent: Spanned<u8>,
    /// Disk use image collection frees down to, in percent, below `gc_high_percent` (default 80).
    #[serde(default = "default_gc_low_percent")]
    pub gc_low_percent: Spanned<u8>,
    /// How long an image must have been unused before it may be collected (default 2 m).
    #[serde(default = "default_gc_grace")]
    pub gc_grace: Spanned<ConfigDuration>,
    /// How often image collection looks at the disk (default 5 m).
    #[serde(default = "default_gc_interval")]
    pub gc_interval: Spanned<ConfigDuration>,
}

// i[impl node.pull.auth]
/// One `[pull.auth."REGISTRY"]` table.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PullAuth {
    /// The registry user.
    pub username: Spanned<String>,
    /// A file holding the password (its content without a final line ending), owned by the
    /// node's user with mode 0600 or stricter; read at every pull, so a rotated one is taken at
    /// the next.
    pub password_file: Spanned<PathBuf>,
}

// i[impl node.pull.gc]
fn default_gc_high_percent() -> Spanned<u8> {
    sp(holdfast_pull::DEFAULT_GC_HIGH_PERCENT)
}
fn default_gc_low_percent() -> Spanned<u8> {
    sp(holdfast_pull::DEFAULT_GC_LOW_PERCENT)
}
fn default_gc_grace() -> Spanned<ConfigDuration> {
    sp(ConfigDuration(holdfast_pull::DEFAULT_GC_GRACE))
}
fn default_gc_interval() -> Spanned<ConfigDuration> {
    sp(ConfigDuration(holdfast_pull::DEFAULT_GC_INTERVAL))
}

fn default_digest_interval() -> Spanned<ConfigDuration> {
    sp(secs(15 * 60))
}

/// A workload's `pull_policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PullPolicy {
    /// Pulled when absent, never checked again (the default).
    #[default]
    Missing,
    /// The tag is checked against the registry before each creation of the container, pulled
    /// again first when it moved.
    Always,
    /// The tag is checked against the registry on `pull.digest_interval`, pulled again and the
    /// container replaced when it moved.
    Digest,
}

fn yes() -> bool {
    true
}
fn sp<T>(v: T) -> Spanned<T> {
    Spanned::new(0..0, v)
}
fn secs(n: u64) -> ConfigDuration {
    ConfigDuration(Duration::from_secs(n))
}
fn default_pull_base() -> Spanned<ConfigDuration> {
    sp(secs(5))
}
fn default_cap() -> Spanned<ConfigDuration> {
    sp(secs(300))
}
fn default_escalate() -> Spanned<u32> {
    sp(5)
}
fn default_stall() -> Spanned<ConfigDuration> {
    sp(secs(60))
}

impl Default for PullSection {
    fn default() -> Self {
        PullSection {
            enabled: true,
            docker_host: None,
            base: default_pull_base(),
            cap: default_cap(),
            escalate_after: default_escalate(),
            stall_timeout: default_stall(),
            docker_config: None,
            auth: std::collections::BTreeMap::new(),
            digest_interval: default_digest_interval(),
            gc: true,
            gc_high_percent: default_gc_high_percent(),
            gc_low_percent: default_gc_low_percent(),
            gc_grace: default_gc_grace(),
            gc_interval: default_gc_interval(),
        }
    }
}

/// `[supervise]`: module starts and restarts.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SuperviseSection {
    /// First wait after a failed start or a crash (default 1 s).
    #[serde(default = "default_supervise_base")]
    pub base: Spanned<ConfigDuration>,
    /// Longest wait between starts (default 5 m).
    #[serde(default = "default_cap")]
    pub cap: Spanned<ConfigDuration>,
    /// Consecutive failed starts after which a fault is filed (default 5).
    #[serde(default = "default_escalate")]
    pub escalate_after: Spanned<u32>,
    /// A start counts as a success only once the module has stayed up this long (default 30 s).
    #[serde(default = "default_must_last")]
    pub must_last: ConfigDuration,
    /// Crashes within `crash_loop_window` that make a crash loop (default 3).
    #[serde(default = "default_crash_threshold")]
    pub crash_loop_threshold: Spanned<u32>,
    /// The crash-loop window (default 60 s).
    #[serde(default = "default_crash_window")]
    pub crash_loop_window: ConfigDuration,
}

fn default_supervise_base() -> Spanned<ConfigDuration> {
    sp(secs(1))
}
fn default_must_last() -> ConfigDuration {
    secs(30)
}
fn default_crash_threshold() -> Spanned<u32> {
    sp(3)
}
fn default_crash_window() -> ConfigDuration {
    secs(60)
}

impl Default for SuperviseSection {
    fn default() -> Self {
        SuperviseSection {
            base: default_supervise_base(),
            cap: default_cap(),
            escalate_after: default_escalate(),
            must_last: default_must_last(),
            crash_loop_threshold: default_crash_threshold(),
            crash_loop_window: default_crash_window(),
        }
    }
}

/// `[[workload]]`: holdfast-workload's [`WorkloadConfig`](holdfast_workload::WorkloadConfig),
/// with the spans the node's errors need.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Unique name.
    pub name: Spanned<String>,
    /// The image reference the workload runs (kept present by the pull module).
    pub image: Spanned<String>,
    /// The command (argv); empty: the image's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Spanned<Vec<String>>>,
    /// Environment variables of the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Spanned<std::collections::BTreeMap<String, String>>>,
    /// `"always"` (default), `"on-failure"` or `"never"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<Spanned<holdfast_workload::RestartPolicy>>,
    /// How long a start must last to count as a success (default 10 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_run: Option<Spanned<ConfigDuration>>,
    /// How long the container gets to stop before it is killed (default 10 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_timeout: Option<Spanned<ConfigDuration>>,
    /// Published ports: `"8080:80"`, `"127.0.0.1:8443:443/tcp"`, `"5353:53/udp"` (default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Spanned<Vec<holdfast_workload::PortSpec>>>,
    /// Bind mounts `"/host:/ctr[:ro]"` and named volumes `"name:/ctr[:ro]"` (default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Spanned<Vec<holdfast_workload::VolumeSpec>>>,
    /// An existing network to join instead of the default bridge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Spanned<String>>,
    /// The user the process runs as (default: the image's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<Spanned<String>>,
    /// The working directory, absolute (default: the image's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<Spanned<String>>,
    /// A file of `KEY=VALUE` lines read at load, under `env` (which wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_file: Option<Spanned<std::path::PathBuf>>,
    /// Labels of the container (none under `holdfast.`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Spanned<std::collections::BTreeMap<String, String>>>,
    /// The memory limit, e.g. `"512m"`, `"1g"` (default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Spanned<holdfast_workload::ByteSize>>,
    /// The CPU quota in CPUs, e.g. `1.5` (default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<Spanned<holdfast_workload::Cpus>>,
    /// The most processes the container may hold (default: the daemon's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids_limit: Option<Spanned<i64>>,
    /// A read-only root filesystem (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<Spanned<bool>>,
    /// Capabilities added (default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap_add: Option<Spanned<Vec<String>>>,
    /// Capabilities dropped (default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap_drop: Option<Spanned<Vec<String>>>,
    /// An init process as PID 1 (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init: Option<Spanned<bool>>,
    /// The log driver and options (default `json-file` rotated at 10m, 3 files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<Spanned<holdfast_workload::LogConfig>>,
    /// The health check: one of `cmd` or `shell` (run in the container by the daemon), `http =
    /// { port, path }` or `tcp = { port }` (probed by the node), or `disable = true`; with
    /// `interval`, `timeout`, `start_period`, `retries` (default: the image's own `HEALTHCHECK`,
    /// if it has one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<Spanned<holdfast_workload::HealthCheck>>,
    /// Workloads that must be ready (running, and healthy if checked) before this one starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<Spanned<Vec<String>>>,
    /// A file in the Docker config format (mode 0600 or stricter) holding the credentials for
    /// this image's registry, used instead of `pull.docker_config` (default: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_file: Option<Spanned<PathBuf>>,
    /// `"missing"` (default: pull only an image not present), `"digest"` (check the tag against
    /// the registry and follow it) or `"always"` (check the tag before each start of the
    /// container, pulling a moved one first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_policy: Option<Spanned<PullPolicy>>,
    /// Certificates of `[issuance]` (by first name) mounted read-only at
    /// `/run/holdfast/certs/NAME/`: their deployed files (default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificates: Option<Spanned<Vec<String>>>,
    /// `"restart"` or `"signal:HUP"` (any signal name): what the container is told when one of
    /// its `certificates` is renewed (default: nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_cert_renew: Option<Spanned<holdfast_workload::CertRenew>>,
    /// `certificates` resolved to their deploy directories once the whole file is read (not a
    /// key: filled by the loader).
    #[serde(skip)]
    pub certificate_mounts: Vec<holdfast_workload::CertificateMount>,
}

/// `[workloads]`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadsSection {
    /// Stop the workloads' containers when holdfast stops (default false: they keep running and
    /// the next start adopts them, as the kubelet leaves its pods).
    #[serde(default)]
    pub stop_on_exit: bool,
    /// Label this node's containers `holdfast.owner=OWNER` and touch only those: for several
    /// nodes (or test runs) sharing one daemon. Unset in production.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// `[forward]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForwardSection {
    /// The UDP address the QUIC endpoint listens on.
    pub listen: Spanned<SocketAddr>,
    /// A file of client tokens (one a line, `#` comments; mode 0600 or stricter).
    #[serde(default)]
    pub token_file: Option<Spanned<PathBuf>>,
    /// Client tokens written inline (a secret in the config: prefer `token_file`). Never logged.
    #[serde(default)]
    pub tokens: Vec<Secret>,
    /// The targets forwards may reach: `ADDR[/PREFIX]:PORT[-PORT]` entries (required; nothing is
    /// reachable that is not listed).
    pub allow: Spanned<Vec<String>>,
    /// `[[forward.client]]`: clients with their own allow-list; their tokens reach only their
    /// own `allow` targets, not `forward.allow`'s.
    #[serde(default)]
    pub client: Vec<Spanned<ForwardClient>>,
    /// Authenticated connections, in all (default
    /// [`holdfast_forward::DEFAULT_MAX_AUTHENTICATED`]); at least 1.
    #[serde(default)]
    pub max_connections: Option<Spanned<usize>>,
    /// Authenticated connections of one token (default
    /// [`holdfast_forward::DEFAULT_MAX_PER_CREDENTIAL`]: a fleet may share a token); at least 1.
    #[serde(default)]
    pub max_connections_per_token: Option<Spanned<usize>>,
    /// Connections in their handshake or not yet authenticated, in all (default
    /// [`holdfast_forward::DEFAULT_MAX_UNAUTHENTICATED`]); at least 1.
    #[serde(default)]
    pub max_unauthenticated: Option<Spanned<usize>>,
    /// The same, from one source, an IPv4 address or an IPv6 /64 (default
    /// [`holdfast_forward::DEFAULT_MAX_UNAUTHENTICATED_PER_SOURCE`]); at least 1.
    #[serde(default)]
    pub max_unauthenticated_per_source: Option<Spanned<usize>>,
}

impl ForwardSection {
    /// The connection bounds that are set, by key.
    pub(super) fn bounds(&self) -> [(&'static str, Option<&Spanned<usize>>); 4] {
        [
            ("forward.max_connections", self.max_connections.as_ref()),
            (
                "forward.max_connections_per_token",
                self.max_connections_per_token.as_ref(),
            ),
            (
                "forward.max_unauthenticated",
                self.max_unauthenticated.as_ref(),
            ),
            (
                "forward.max_unauthenticated_per_source",
                self.max_unauthenticated_per_source.as_ref(),
            ),
        ]
    }
}

/// `[[forward.client]]`: tokens (inline or from a file) and the only targets they reach.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForwardClient {
    /// A file of this client's tokens (one a line, `#` comments; mode 0600 or stricter).
    #[serde(default)]
    pub token_file: Option<Spanned<PathBuf>>,
    /// This client's tokens written inline. Never logged.
    #[serde(default)]
    pub tokens: Vec<Secret>,
    /// The only targets this client's tokens reach (same syntax as `forward.allow`).
    pub allow: Spanned<Vec<String>>,
}

/// A secret from the config: its `Debug` hides it.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

// r[impl node.log.no-secrets]
impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Secret {
    /// The secret itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// `[testing]`: modules that exist only for the binary's own subprocess tests.
#[cfg(feature = "testing-modules")]
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TestingSection {
    /// Run a module named `testing-hang` whose stopper never returns (so the stop plan must cut it
    /// off at its budget).
    #[serde(default)]
    pub hang_on_stop: bool,
    /// Run a module named `testing-wedge` whose start never returns and blocks the thread it runs
    /// on (its supervisor's loop then never turns again, so the watchdog's pings stop).
    #[serde(default)]
    pub wedge_start: bool,
}
