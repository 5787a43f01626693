//! The node's configuration: TOML, validated in full before anything starts.
//!
//! Every error names the file, line, column and key (`FILE:LINE:COL: KEY: message`); unknown keys
//! are errors with a did-you-mean; durations are written `"5s"`, `"5m"`. The embedded default is
//! `examples/single-node.toml`, included verbatim so that the two cannot drift apart.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use holdfast_retry::Policy;
use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::duration::ConfigDuration;

// i[impl node.config.default]
/// The embedded single-node default (`examples/single-node.toml`).
pub const DEFAULT_CONFIG: &str = include_str!("../../../examples/single-node.toml");
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
    pub gateway: Option<Spanned<crate::gateway_config::GatewaySection>>,
    /// `[testing]`: test-only modules for the binary's own tests. Only in builds with the
    /// `testing-modules` feature; elsewhere `[testing]` is an unknown section.
    #[cfg(feature = "testing-modules")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub testing: Option<TestingSection>,
}

/// `[node]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
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
#[derive(Debug, Clone, Deserialize, Serialize)]
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

impl AdminSection {
    /// `allowed_hosts`, parsed (entries [`Config::parse`] refused never get here).
    pub fn allowed_hosts(&self) -> Vec<crate::admin::AllowedHost> {
        self.allowed_hosts
            .iter()
            .filter_map(|entry| crate::admin::AllowedHost::parse(entry.get_ref()).ok())
            .collect()
    }
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
#[derive(Debug, Clone, Deserialize, Serialize)]
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

/// The three settings of a retry policy, borrowed from a section.
struct PolicySection<'a> {
    base: &'a Spanned<ConfigDuration>,
    cap: &'a Spanned<ConfigDuration>,
    escalate_after: &'a Spanned<u32>,
}

impl PullSection {
    fn policy_section(&self) -> PolicySection<'_> {
        PolicySection {
            base: &self.base,
            cap: &self.cap,
            escalate_after: &self.escalate_after,
        }
    }
}

impl SuperviseSection {
    fn policy_section(&self) -> PolicySection<'_> {
        PolicySection {
            base: &self.base,
            cap: &self.cap,
            escalate_after: &self.escalate_after,
        }
    }
}

/// `[pull]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
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
#[derive(Debug, Clone, Deserialize, Serialize)]
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
    /// The health check: `cmd` or `shell`, `interval`, `timeout`, `start_period`, `retries`, or
    /// `disable = true` (default: the image's own `HEALTHCHECK`, if it has one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<Spanned<holdfast_workload::HealthCheck>>,
    /// Workloads that must be ready (running, and healthy if checked) before this one starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<Spanned<Vec<String>>>,
    /// A file in the Docker config format (mode 0600 or stricter) holding the credentials for
    /// this image's registry, used instead of `pull.docker_config` (default: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_file: Option<Spanned<PathBuf>>,
    /// `"missing"` (default) or `"digest"`: check the tag against the registry and follow it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_policy: Option<Spanned<PullPolicy>>,
}

impl Workload {
    /// The workload as holdfast-workload runs it (defaults filled in, the env file's variables
    /// under `env`). The env file was read and checked when the config was loaded; if it has
    /// become unreadable since, that is logged and the workload runs without it.
    pub fn to_config(&self) -> holdfast_workload::WorkloadConfig {
        let mut w = self.shaped_config();
        if let Err(e) = w.load_env_file() {
            tracing::warn!(workload = %w.name, error = %e, "env file no longer readable");
        }
        w
    }

    // i[impl node.workloads.shape]
    /// The entry as holdfast-workload's config, its env file not yet read.
    fn shaped_config(&self) -> holdfast_workload::WorkloadConfig {
        let mut w = holdfast_workload::WorkloadConfig::new(
            self.name.get_ref().clone(),
            self.image.get_ref().clone(),
        );
        if let Some(command) = &self.command {
            w.command = command.get_ref().clone();
        }
        if let Some(env) = &self.env {
            w.env = env.get_ref().clone();
        }
        if let Some(restart) = &self.restart {
            w.restart = *restart.get_ref();
        }
        if let Some(min_run) = &self.min_run {
            w.min_run = min_run.get_ref().get();
        }
        if let Some(stop_timeout) = &self.stop_timeout {
            w.stop_timeout = stop_timeout.get_ref().get();
        }
        let get = |v: &Option<Spanned<String>>| v.as_ref().map(|s| s.get_ref().clone());
        w.ports = self
            .ports
            .as_ref()
            .map(|v| v.get_ref().clone())
            .unwrap_or_default();
        w.volumes = self
            .volumes
            .as_ref()
            .map(|v| v.get_ref().clone())
            .unwrap_or_default();
        w.network = get(&self.network);
        w.user = get(&self.user);
        w.workdir = get(&self.workdir);
        w.env_file = self.env_file.as_ref().map(|p| p.get_ref().clone());
        w.labels = self
            .labels
            .as_ref()
            .map(|v| v.get_ref().clone())
            .unwrap_or_default();
        w.memory = self.memory.as_ref().map(|v| *v.get_ref());
        w.cpus = self.cpus.as_ref().map(|v| *v.get_ref());
        w.pids_limit = self.pids_limit.as_ref().map(|v| *v.get_ref());
        w.read_only = self.read_only.as_ref().is_some_and(|v| *v.get_ref());
        w.cap_add = self
            .cap_add
            .as_ref()
            .map(|v| v.get_ref().clone())
            .unwrap_or_default();
        w.cap_drop = self
            .cap_drop
            .as_ref()
            .map(|v| v.get_ref().clone())
            .unwrap_or_default();
        w.init = self.init.as_ref().is_some_and(|v| *v.get_ref());
        if let Some(log) = &self.log {
            w.log = log.get_ref().clone();
        }
        w.health = self.health.as_ref().map(|h| h.get_ref().clone());
        w.depends_on = self
            .depends_on
            .as_ref()
            .map(|d| d.get_ref().clone())
            .unwrap_or_default();
        w
    }

    /// Where `field` (as holdfast-workload's error names it) is written, else the entry's name.
    fn span_of(&self, field: &str) -> std::ops::Range<usize> {
        let span = match field {
            "image" => Some(self.image.span()),
            "command" => self.command.as_ref().map(Spanned::span),
            "env" => self.env.as_ref().map(Spanned::span),
            "restart" => self.restart.as_ref().map(Spanned::span),
            "min_run" => self.min_run.as_ref().map(Spanned::span),
            "stop_timeout" => self.stop_timeout.as_ref().map(Spanned::span),
            "ports" => self.ports.as_ref().map(Spanned::span),
            "volumes" => self.volumes.as_ref().map(Spanned::span),
            "network" => self.network.as_ref().map(Spanned::span),
            "user" => self.user.as_ref().map(Spanned::span),
            "workdir" => self.workdir.as_ref().map(Spanned::span),
            "env_file" => self.env_file.as_ref().map(Spanned::span),
            "labels" => self.labels.as_ref().map(Spanned::span),
            "memory" => self.memory.as_ref().map(Spanned::span),
            "cpus" => self.cpus.as_ref().map(Spanned::span),
            "pids_limit" => self.pids_limit.as_ref().map(Spanned::span),
            "read_only" => self.read_only.as_ref().map(Spanned::span),
            "cap_add" => self.cap_add.as_ref().map(Spanned::span),
            "cap_drop" => self.cap_drop.as_ref().map(Spanned::span),
            "init" => self.init.as_ref().map(Spanned::span),
            "log" => self.log.as_ref().map(Spanned::span),
            "health" => self.health.as_ref().map(Spanned::span),
            "depends_on" => self.depends_on.as_ref().map(Spanned::span),
            "credentials_file" => self.credentials_file.as_ref().map(Spanned::span),
            "pull_policy" => self.pull_policy.as_ref().map(Spanned::span),
            _ => None,
        };
        span.unwrap_or_else(|| self.name.span())
    }
}

/// `[workloads]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
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
#[derive(Debug, Clone, Deserialize)]
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
    fn bounds(&self) -> [(&'static str, Option<&Spanned<usize>>); 4] {
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

/// The shortest forward token accepted, in bytes. A token is compared as the bytes written, so
/// its strength is its length times the bits each character carries; hex, the weakest alphabet
/// tokens are commonly drawn from, gives 128 bits at 32 characters (`openssl rand -hex 16`),
/// beyond guessing over the network, and base64 of 32 random bytes (44 characters) passes too. A
/// shorter token is likely typed by hand or a placeholder left in place.
// r[impl node.forward.config+3]
pub const MIN_FORWARD_TOKEN_LEN: usize = 32;

/// Why a token of `len` bytes is refused.
fn short_token(len: usize) -> String {
    format!(
        "is {len} bytes long; a forward token must be at least {MIN_FORWARD_TOKEN_LEN} \
         (e.g. `openssl rand -hex 16`)"
    )
}

/// Reads the tokens of a forward token file (mode checked first; one a line, `#` comments and
/// blank lines skipped), each at least [`MIN_FORWARD_TOKEN_LEN`] bytes: a shorter one is refused
/// naming its line, never the token.
// r[impl node.forward.config+3]
pub fn read_forward_tokens(
    path: &std::path::Path,
) -> Result<Vec<holdfast_forward::Credential>, String> {
    let text = crate::admin::token::read_secret_file(path)?;
    let mut tokens = Vec::new();
    for (line, token) in text.lines().enumerate() {
        let token = token.trim();
        if token.is_empty() || token.starts_with('#') {
            continue;
        }
        if token.len() < MIN_FORWARD_TOKEN_LEN {
            return Err(format!(
                "token file {} line {}: the token {}",
                path.display(),
                line + 1,
                short_token(token.len())
            ));
        }
        tokens.push(holdfast_forward::Credential::new(token.to_owned()));
    }
    Ok(tokens)
}

/// `[[forward.client]]`: tokens (inline or from a file) and the only targets they reach.
#[derive(Debug, Clone, Deserialize)]
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
#[derive(Clone, Deserialize)]
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
#[derive(Debug, Clone, Deserialize, Serialize)]
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

/// A config error, located in its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (or [`DEFAULT_CONFIG_NAME`]).
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub column: usize,
    /// The dotted key, e.g. `admin.listen` or `workload[1].image`.
    pub key: String,
    /// What is wrong, and how to fix it.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}: {}",
            self.file, self.line, self.column, self.key, self.message
        )
    }
}

impl std::error::Error for ConfigError {}

/// A failure to load a config file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("{file}: cannot read: {source}")]
    Read {
        /// The file.
        file: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a valid config.
    #[error("{0}")]
    Invalid(#[from] ConfigError),
}

/// Converts a byte offset to a 1-based (line, column in characters).
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
    (line, column)
}

struct Locator<'a> {
    file: &'a str,
    text: &'a str,
}

impl Locator<'_> {
    fn at(&self, span: Option<std::ops::Range<usize>>, key: &str, message: String) -> ConfigError {
        let (line, column) = span.map_or((1, 1), |s| line_col(self.text, s.start));
        ConfigError {
            file: self.file.to_owned(),
            line,
            column,
            key: if key.is_empty() {
                "(top level)".to_owned()
            } else {
                key.to_owned()
            },
            message: without_value(&message),
        }
    }
}

// i[impl node.config.no-values]
/// `message` without the value serde's "invalid type"/"invalid value" messages quote (a token
/// written in the wrong shape would otherwise be shown back wherever the error goes: the
/// terminal, the log, the unauthenticated fault list): `invalid type: string, expected a
/// sequence`. The kind of value and what was expected stay.
fn without_value(message: &str) -> String {
    for prefix in ["invalid type: ", "invalid value: "] {
        let Some(rest) = message.strip_prefix(prefix) else {
            continue;
        };
        // serde writes `KIND "value"` or `KIND `value``; the value may hold anything, the
        // expectation (the code's own text) comes last.
        let kind = rest.split(['"', '`']).next().unwrap_or_default().trim_end();
        let expected = rest
            .rfind(", expected ")
            .and_then(|at| rest.get(at..))
            .unwrap_or_default();
        return format!("{prefix}{kind}{expected}");
    }
    message.to_owned()
}

/// The keys `serde` lists in an "unknown field" message, and the closest one.
fn did_you_mean(message: &str) -> Option<(String, String)> {
    let rest = message.strip_prefix("unknown field `")?;
    let (unknown, rest) = rest.split_once('`')?;
    let expected: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
    let hint = expected
        .iter()
        .map(|k| (strsim::damerau_levenshtein(unknown, k), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 3))
        .min()
        .map(|(_, k)| format!("; did you mean `{k}`?"))
        .unwrap_or_else(|| {
            if expected.is_empty() {
                String::new()
            } else {
                format!("; expected one of {}", expected.join(", "))
            }
        });
    Some((unknown.to_owned(), format!("unknown key `{unknown}`{hint}")))
}

fn missing_field(message: &str) -> Option<&str> {
    message.strip_prefix("missing field `")?.strip_suffix('`')
}

fn dotted(path: &serde_path_to_error::Path) -> String {
    let mut out = String::new();
    for segment in path.iter() {
        match segment {
            // toml's `Spanned` wraps the value in a private field: not a key the operator wrote.
            serde_path_to_error::Segment::Map { key } if key.starts_with("$__serde_spanned") => {}
            serde_path_to_error::Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            serde_path_to_error::Segment::Map { key }
            | serde_path_to_error::Segment::Enum { variant: key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            serde_path_to_error::Segment::Unknown => {}
        }
    }
    out
}

impl Config {
    /// The embedded single-node default.
    pub fn embedded() -> Result<Config, ConfigError> {
        Config::parse(DEFAULT_CONFIG_NAME, DEFAULT_CONFIG)
    }

    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<Config, LoadError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
            file: file.clone(),
            source,
        })?;
        Ok(Config::parse(&file, &text)?)
    }

    // i[impl node.config.errors]
    /// Parses and validates `text`, naming `file` in errors.
    pub fn parse(file: &str, text: &str) -> Result<Config, ConfigError> {
        let loc = Locator { file, text };
        let deserializer = toml::Deserializer::parse(text)
            .map_err(|e| loc.at(e.span(), "", e.message().to_owned()))?;
        let config: Config = serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let mut key = dotted(e.path());
            let inner = e.inner();
            let message = match did_you_mean(inner.message()) {
                Some((unknown, message)) => {
                    if !key.ends_with(&unknown) {
                        key = if key.is_empty() {
                            unknown
                        } else {
                            format!("{key}.{unknown}")
                        };
                    }
                    message
                }
                None => match missing_field(inner.message()) {
                    Some(field) if key.is_empty() => {
                        key = field.to_owned();
                        format!("missing section [{field}]")
                    }
                    Some(field) => {
                        key = format!("{key}.{field}");
                        format!("missing key `{field}`")
                    }
                    None => inner.message().to_owned(),
                },
            };
            loc.at(inner.span(), &key, message)
        })?;
        config.validate(&loc)?;
        Ok(config)
    }

    // i[impl node.config.validate]
    fn validate(&self, loc: &Locator<'_>) -> Result<(), ConfigError> {
        if let Some(id) = &self.node.id {
            if id.get_ref().trim().is_empty() {
                return Err(loc.at(
                    Some(id.span()),
                    "node.id",
                    "must not be empty (remove it to use /etc/machine-id or the hostname)".into(),
                ));
            }
        }
        for (key, d) in [
            ("node.stop_budget", &self.node.stop_budget),
            ("node.tick", &self.node.tick),
        ] {
            if d.get_ref().get().is_zero() {
                return Err(loc.at(Some(d.span()), key, "must be longer than zero".into()));
            }
        }
        self.refuse_non_loopback_admin(loc)?;
        self.check_allowed_hosts(loc)?;
        if matches!(self.admin.listen.get_ref(), Listen::Off) && self.admin.socket.is_none() {
            return Err(loc.at(
                Some(self.admin.listen.span()),
                "admin.listen",
                "is \"off\" and no admin.socket is set: the admin API would be unreachable".into(),
            ));
        }
        if let Some(token_file) = &self.admin.token_file {
            if let Err(message) = crate::admin::token::check_mode(token_file.get_ref()) {
                return Err(loc.at(Some(token_file.span()), "admin.token_file", message));
            }
        }
        let level = self.log.level.get_ref();
        if let Err(e) = tracing_subscriber::EnvFilter::builder().parse(level) {
            return Err(loc.at(
                Some(self.log.level.span()),
                "log.level",
                format!("invalid filter {level:?}: {e}"),
            ));
        }
        let pull_policy = self.pull.policy_section().build(loc, "pull", 0)?;
        if let Err(e) = crate::modules::pull::pull_config(
            &pull_policy,
            self.pull.stall_timeout.get_ref().get(),
            0,
        ) {
            return Err(loc.at(
                Some(self.pull.stall_timeout.span()),
                "pull.stall_timeout",
                e.to_string(),
            ));
        }
        self.validate_pull_credentials(loc)?;
        self.validate_pull_gc(loc)?;
        self.supervise.policy_section().build(loc, "supervise", 0)?;
        if *self.supervise.crash_loop_threshold.get_ref() == 0 {
            return Err(loc.at(
                Some(self.supervise.crash_loop_threshold.span()),
                "supervise.crash_loop_threshold",
                "must be at least 1".into(),
            ));
        }
        if let Some(issuance) = &self.issuance {
            validate_issuance(loc, issuance)?;
        }
        if let Some(forward) = &self.forward {
            validate_forward(loc, forward)?;
        }
        if let Some(gateway) = &self.gateway {
            let hosts: Vec<String> = self
                .issuance
                .as_ref()
                // Every certificate, by its first name (which names its file in the store).
                .map(|i| {
                    i.get_ref()
                        .planned()
                        .into_iter()
                        .filter_map(|c| c.names.into_iter().next())
                        .collect()
                })
                .unwrap_or_default();
            crate::gateway_config::validate(gateway, &hosts, &|span, key, message| {
                loc.at(span, key, message)
            })?;
        }
        self.validate_workloads(loc)
    }

    // i[impl node.admin.host+2]
    /// Each `admin.allowed_hosts` entry a DNS name or an IP address, without a port.
    fn check_allowed_hosts(&self, loc: &Locator<'_>) -> Result<(), ConfigError> {
        for (i, entry) in self.admin.allowed_hosts.iter().enumerate() {
            if let Err(message) = crate::admin::AllowedHost::parse(entry.get_ref()) {
                return Err(loc.at(
                    Some(entry.span()),
                    &format!("admin.allowed_hosts[{i}]"),
                    message,
                ));
            }
        }
        Ok(())
    }

    // i[impl node.admin.non-loopback]
    /// A TCP admin address beyond loopback only with `admin.allow_non_loopback`.
    fn refuse_non_loopback_admin(&self, loc: &Locator<'_>) -> Result<(), ConfigError> {
        match self.admin.listen.get_ref() {
            Listen::Tcp(addr) if !addr.ip().is_loopback() && !self.admin.allow_non_loopback => {
                Err(loc.at(
                    Some(self.admin.listen.span()),
                    "admin.listen",
                    format!("{addr} is not a loopback address; set admin.allow_non_loopback = true to expose the admin API beyond this machine"),
                ))
            }
            _ => Ok(()),
        }
    }

    // i[impl node.config.validate]
    // i[impl node.workloads.config]
    // i[impl node.workloads.shape]
    // r[impl workload.depends-on]
    /// Every `[[workload]]` entry: a valid, unique name, an image, and what holdfast-workload
    /// asks of the rest.
    fn validate_workloads(&self, loc: &Locator<'_>) -> Result<(), ConfigError> {
        let mut names = std::collections::HashMap::new();
        for (i, w) in self.workloads.iter().enumerate() {
            let name = w.name.get_ref();
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                return Err(loc.at(
                    Some(w.name.span()),
                    &format!("workload[{i}].name"),
                    format!("invalid name {name:?}: use letters, digits, '-', '_' and '.'"),
                ));
            }
            if let Some(first) = names.insert(name.clone(), i) {
                return Err(loc.at(
                    Some(w.name.span()),
                    &format!("workload[{i}].name"),
                    format!("duplicate workload name {name:?} (also workload[{first}])"),
                ));
            }
            if w.image.get_ref().trim().is_empty() {
                return Err(loc.at(
                    Some(w.image.span()),
                    &format!("workload[{i}].image"),
                    "must not be empty".into(),
                ));
            }
            // holdfast-workload owns what a workload may be; its error names the field.
            let check = || {
                let mut config = w.shaped_config();
                config.validate()?;
                config.load_env_file()
            };
            if let Err(e) = check() {
                let field = e.key.rsplit('.').next().unwrap_or("name");
                return Err(loc.at(
                    Some(w.span_of(field)),
                    &format!("workload[{i}].{field}"),
                    e.message,
                ));
            }
        }
        // Across entries: dependencies name configured workloads, and form no cycle.
        let configs: Vec<_> = self.workloads.iter().map(Workload::shaped_config).collect();
        if let Err(e) = holdfast_workload::config::validate_dependencies(&configs) {
            let name = e
                .key
                .strip_prefix("workload[")
                .and_then(|k| k.strip_suffix("].depends_on"))
                .unwrap_or_default();
            let i = self
                .workloads
                .iter()
                .position(|w| w.name.get_ref() == name)
                .unwrap_or(0);
            let span = self.workloads.get(i).map(|w| w.span_of("depends_on"));
            return Err(loc.at(span, &format!("workload[{i}].depends_on"), e.message));
        }
        Ok(())
    }

    // i[impl node.pull.gc]
    /// The image collection's marks make a policy and its interval is not zero.
    fn validate_pull_gc(&self, loc: &Locator<'_>) -> Result<(), ConfigError> {
        let p = &self.pull;
        if p.gc_interval.get_ref().get().is_zero() {
            return Err(loc.at(
                Some(p.gc_interval.span()),
                "pull.gc_interval",
                "must be longer than zero".into(),
            ));
        }
        let high = *p.gc_high_percent.get_ref();
        let low = *p.gc_low_percent.get_ref();
        if high > 100 {
            return Err(loc.at(
                Some(p.gc_high_percent.span()),
                "pull.gc_high_percent",
                format!("{high} is not a percentage (0 to 100)"),
            ));
        }
        if low >= high {
            return Err(loc.at(
                Some(p.gc_low_percent.span()),
                "pull.gc_low_percent",
                format!("{low} must be below pull.gc_high_percent ({high})"),
            ));
        }
        Ok(())
    }

    // i[impl node.pull.gc]
    /// The image collection's policy and interval, `None` when `pull.gc = false`.
    pub fn image_gc(&self) -> Option<(holdfast_pull::GcPolicy, Duration)> {
        let p = &self.pull;
        if !p.gc {
            return None;
        }
        let policy = holdfast_pull::GcPolicy::new(
            *p.gc_high_percent.get_ref(),
            *p.gc_low_percent.get_ref(),
            p.gc_grace.get_ref().get(),
        )
        .unwrap_or_default();
        Some((policy, p.gc_interval.get_ref().get()))
    }

    // i[impl node.pull.credentials]
    /// `pull.docker_config` exists when set; each `credentials_file` exists and is private.
    fn validate_pull_credentials(&self, loc: &Locator<'_>) -> Result<(), ConfigError> {
        if let Some(path) = &self.pull.docker_config {
            if !path.get_ref().is_file() {
                return Err(loc.at(
                    Some(path.span()),
                    "pull.docker_config",
                    format!("{} is not a file", path.get_ref().display()),
                ));
            }
        }
        if self.pull.digest_interval.get_ref().get().is_zero() {
            return Err(loc.at(
                Some(self.pull.digest_interval.span()),
                "pull.digest_interval",
                "must be longer than zero".into(),
            ));
        }
        // Credentials are per image: two files for one image would be a silent choice.
        let mut per_image: std::collections::BTreeMap<&str, (usize, &PathBuf)> =
            std::collections::BTreeMap::new();
        for (i, w) in self.workloads.iter().enumerate() {
            if let Some(path) = &w.credentials_file {
                let key = format!("workload[{i}].credentials_file");
                if let Err(message) = holdfast_pull::credentials::check_private(path.get_ref()) {
                    return Err(loc.at(Some(path.span()), &key, message));
                }
                let image = w.image.get_ref().as_str();
                match per_image.get(image) {
                    Some((first, other)) if *other != path.get_ref() => {
                        return Err(loc.at(
                            Some(path.span()),
                            &key,
                            format!(
                                "image {image} already has credentials_file {} (workload[{first}]); \
                                 credentials are per image: use the same file",
                                other.display()
                            ),
                        ));
                    }
                    Some(_) => {}
                    None => {
                        per_image.insert(image, (i, path.get_ref()));
                    }
                }
            }
        }
        Ok(())
    }

    // i[impl node.pull.credentials]
    /// Where the pull module finds registry credentials: `pull.docker_config` (else the Docker
    /// CLI's default), and each workload's `credentials_file` for its image.
    pub fn registry_auth(&self) -> holdfast_pull::RegistryAuth {
        let mut auth = holdfast_pull::RegistryAuth::from_env();
        if let Some(path) = &self.pull.docker_config {
            auth = auth.with_docker_config(path.get_ref());
        }
        for w in &self.workloads {
            if let Some(path) = &w.credentials_file {
                auth = auth.with_file_for(w.image.get_ref().clone(), path.get_ref());
            }
        }
        auth
    }

    // i[impl node.pull.policy]
    /// The images whose tags the pull module follows (`pull_policy = "digest"`), and how often.
    pub fn tag_checks(&self) -> crate::modules::pull::TagChecks {
        crate::modules::pull::TagChecks {
            images: self
                .workloads
                .iter()
                .filter(|w| {
                    w.pull_policy
                        .as_ref()
                        .is_some_and(|p| *p.get_ref() == PullPolicy::Digest)
                })
                .fold(std::collections::BTreeMap::new(), |mut images, w| {
                    images
                        .entry(w.image.get_ref().clone())
                        .or_insert_with(Vec::new)
                        .push(w.name.get_ref().clone());
                    images
                }),
            interval: self.pull.digest_interval.get_ref().get(),
        }
    }

    /// holdfast-pull's configuration, seeded (validated when the config was parsed).
    pub fn pull_config(&self, seed: u64) -> holdfast_pull::PullConfig {
        crate::modules::pull::pull_config(
            &self.pull.policy_section().policy(seed),
            self.pull.stall_timeout.get_ref().get(),
            seed,
        )
        .unwrap_or_else(|_| holdfast_pull::PullConfig::new(seed))
    }

    /// The module supervisor's restart policy, seeded.
    pub fn supervise_policy(&self, seed: u64) -> Policy {
        self.supervise.policy_section().policy(seed)
    }
}

// r[impl node.issuance.config+2]
/// `[issuance]` beyond its types: a policy that builds, hostnames that holdfast-issuance accepts
/// (DNS names, each listed once) and that are served by a configured source.
fn validate_issuance(
    loc: &Locator<'_>,
    section: &Spanned<holdfast_issuance::IssuanceConfig>,
) -> Result<(), ConfigError> {
    use holdfast_issuance::module::{Entry, NamePlace, SourceKind};
    let span = Some(section.span());
    let issuance = section.get_ref();
    if let Err(e) = issuance.policy(0) {
        let text = e.to_string();
        let (key, message) = policy_error_key(&text);
        return Err(loc.at(span, &key, message.to_owned()));
    }
    if let Err((at, e)) = issuance.check_names() {
        return Err(loc.at(
            name_span(loc.text, at, false).or(span),
            &format!("issuance.{}", at.key()),
            e.to_string(),
        ));
    }
    // r[impl issue.deploy]
    if let Err((key, e)) = issuance.check_deploys() {
        return Err(loc.at(span, &format!("issuance.{key}"), e.to_string()));
    }
    // r[impl issue.on-renew]
    if let Err((key, message)) = issuance.check_hooks() {
        return Err(loc.at(span, &format!("issuance.{key}"), message.to_owned()));
    }
    // r[impl issue.dns01.choice]
    if let Err((key, message)) = issuance.check_dns01() {
        let at = challenge_span(loc.text, &key).or(span);
        return Err(loc.at(at, &format!("issuance.{key}"), message));
    }
    // r[impl issue.dns01.rfc2136]
    if let Err((key, message)) = issuance.check_dns01_secret() {
        let at = challenge_span(loc.text, &key).or(span);
        return Err(loc.at(at, &format!("issuance.{key}"), message));
    }
    for cert in issuance.planned() {
        let at = NamePlace {
            entry: cert.entry,
            name: None,
        };
        let key = match cert.entry {
            Entry::Hostname(i) => format!("issuance.hostname[{i}]"),
            Entry::Certificate(i) => format!("issuance.certificate[{i}]"),
        };
        let name = cert.names.first().map_or("", String::as_str);
        let missing = match cert.source {
            SourceKind::Acme if issuance.acme.is_none() => Some("acme"),
            SourceKind::Local if issuance.local.is_none() => Some("local"),
            _ => None,
        };
        if let Some(source) = missing {
            return Err(loc.at(
                name_span(loc.text, at, true).or(span),
                &format!("{key}.source"),
                format!(
                    "{name} uses the {source} source, but there is no [issuance.{source}] section"
                ),
            ));
        }
    }
    Ok(())
}

// r[impl node.issuance.config+2]
// r[impl issue.certificates.names+2]
/// Where `at` is written: a `[[issuance.hostname]]`'s `name`, a `[[issuance.certificate]]`'s
/// `names[j]` (its `names` when `at` names no index), or the entry's `source` when `source` is
/// true. holdfast-issuance's config carries no spans, so the text is read once more for them,
/// only when an entry is refused.
fn name_span(
    text: &str,
    at: holdfast_issuance::module::NamePlace,
    source: bool,
) -> Option<std::ops::Range<usize>> {
    use holdfast_issuance::module::Entry;
    use serde::de::IgnoredAny;
    #[derive(Deserialize)]
    struct File {
        issuance: Option<Section>,
    }
    #[derive(Deserialize)]
    struct Section {
        #[serde(default)]
        hostname: Vec<HostEntry>,
        #[serde(default)]
        certificate: Vec<CertEntry>,
    }
    #[derive(Deserialize)]
    struct HostEntry {
        name: Option<Spanned<IgnoredAny>>,
        source: Option<Spanned<IgnoredAny>>,
    }
    #[derive(Deserialize)]
    struct CertEntry {
        names: Option<Spanned<Vec<Spanned<IgnoredAny>>>>,
        source: Option<Spanned<IgnoredAny>>,
    }
    let section = toml::from_str::<File>(text).ok()?.issuance?;
    match at.entry {
        Entry::Hostname(i) => {
            let entry = section.hostname.into_iter().nth(i)?;
            let field = if source { entry.source } else { entry.name };
            Some(field?.span())
        }
        Entry::Certificate(i) => {
            let entry = section.certificate.into_iter().nth(i)?;
            if source {
                return Some(entry.source?.span());
            }
            let names = entry.names?;
            let whole = names.span();
            match at.name {
                Some(j) => names.into_inner().into_iter().nth(j).map(|n| n.span()),
                None => Some(whole),
            }
        }
    }
}

// r[impl issue.dns01.choice]
/// Where the `challenge` of `hostname[i].challenge` or `certificate[i].challenge` is written,
/// or the `[issuance.dns01]` key a `dns01.KEY` error names (`None`: not written, or another key).
fn challenge_span(text: &str, key: &str) -> Option<std::ops::Range<usize>> {
    use serde::de::IgnoredAny;
    #[derive(Deserialize)]
    struct File {
        issuance: Option<Section>,
    }
    #[derive(Deserialize)]
    struct Section {
        #[serde(default)]
        hostname: Vec<Entry>,
        #[serde(default)]
        certificate: Vec<Entry>,
        dns01: Option<std::collections::BTreeMap<String, Spanned<IgnoredAny>>>,
    }
    #[derive(Deserialize)]
    struct Entry {
        challenge: Option<Spanned<IgnoredAny>>,
    }
    let section = toml::from_str::<File>(text).ok()?.issuance?;
    if let Some(field) = key.strip_prefix("dns01.") {
        return Some(section.dns01?.remove(field)?.span());
    }
    let (list, rest) = key.split_once('[')?;
    let index: usize = rest.split_once(']')?.0.parse().ok()?;
    let entries = match list {
        "hostname" => section.hostname,
        "certificate" => section.certificate,
        _ => return None,
    };
    Some(entries.into_iter().nth(index)?.challenge?.span())
}

// r[impl node.issuance.config+2]
/// The key and message of an error from holdfast-issuance's policy: it names the key first
/// ("issuance: pacing.base: ..."), when it can; a text that starts with no key is the section's.
fn policy_error_key(text: &str) -> (String, &str) {
    let text = text.strip_prefix("issuance: ").unwrap_or(text);
    match text.split_once(": ") {
        Some((key, message)) if !key.contains(' ') => (format!("issuance.{key}"), message),
        _ => ("issuance".to_owned(), text),
    }
}

// r[impl node.forward.config+3]
/// A part that could never be reached past its whole (a token allowed more connections than the
/// node holds in all) is an error at the part; so is a bound on unauthenticated connections above
/// the attempts the node's endpoint buffers, which would be no bound at all.
// r[impl node.forward.config+3]
fn validate_forward_bound_pairs(
    loc: &Locator<'_>,
    forward: &ForwardSection,
) -> Result<(), ConfigError> {
    let value = |b: &Option<Spanned<usize>>, default| b.as_ref().map_or(default, |b| *b.get_ref());
    let in_all = value(
        &forward.max_connections,
        holdfast_forward::DEFAULT_MAX_AUTHENTICATED,
    );
    let unauthenticated = value(
        &forward.max_unauthenticated,
        holdfast_forward::DEFAULT_MAX_UNAUTHENTICATED,
    );
    let pairs = [
        (
            "forward.max_connections_per_token",
            &forward.max_connections_per_token,
            "forward.max_connections",
            in_all,
        ),
        (
            "forward.max_unauthenticated_per_source",
            &forward.max_unauthenticated_per_source,
            "forward.max_unauthenticated",
            unauthenticated,
        ),
    ];
    for (key, part, whole_key, whole) in pairs {
        if let Some(part) = part.as_ref().filter(|p| *p.get_ref() > whole) {
            return Err(loc.at(
                Some(part.span()),
                key,
                format!(
                    "is {}, more than {whole_key} ({whole}): it could never be reached",
                    part.get_ref()
                ),
            ));
        }
    }
    let most = holdfast_forward::server::MAX_INCOMING;
    if let Some(b) = forward
        .max_unauthenticated
        .as_ref()
        .filter(|b| *b.get_ref() > most)
    {
        return Err(loc.at(
            Some(b.span()),
            "forward.max_unauthenticated",
            format!(
                "is {}, more than the {most} connection attempts the node's endpoint holds",
                b.get_ref()
            ),
        ));
    }
    Ok(())
}

/// `[forward]` beyond its types: allow-lists that parse and are not empty, token files that are
/// safe and readable, at least one credential, a token of its own for each
/// `[[forward.client]]`, and connection bounds of at least 1.
fn validate_forward(
    loc: &Locator<'_>,
    section: &Spanned<ForwardSection>,
) -> Result<(), ConfigError> {
    let forward = section.get_ref();
    for (key, bound) in forward.bounds() {
        if let Some(bound) = bound.filter(|b| *b.get_ref() == 0) {
            return Err(loc.at(
                Some(bound.span()),
                key,
                "must be at least 1 (0 would refuse every client)".into(),
            ));
        }
    }
    validate_forward_bound_pairs(loc, forward)?;
    validate_allow(loc, &forward.allow, "forward.allow")?;
    let mut credentials = count_tokens(loc, &forward.tokens, forward.token_file.as_ref(), None)?;
    for (i, client) in forward.client.iter().enumerate() {
        let key = format!("forward.client[{i}]");
        let entry = client.get_ref();
        validate_allow(loc, &entry.allow, &format!("{key}.allow"))?;
        let tokens = count_tokens(loc, &entry.tokens, entry.token_file.as_ref(), Some(i))?;
        if tokens == 0 {
            return Err(loc.at(
                Some(client.span()),
                &key,
                "has no token: set token_file (a 0600 file, one token a line) or tokens".into(),
            ));
        }
        credentials += tokens;
    }
    if credentials == 0 {
        return Err(loc.at(
            Some(section.span()),
            "forward",
            "no client credentials: set forward.token_file (a 0600 file, one token a line) or \
             forward.tokens"
                .into(),
        ));
    }
    Ok(())
}

/// An allow-list (`key`) that is not empty and parses.
fn validate_allow(
    loc: &Locator<'_>,
    allow: &Spanned<Vec<String>>,
    key: &str,
) -> Result<(), ConfigError> {
    if allow.get_ref().is_empty() {
        return Err(loc.at(
            Some(allow.span()),
            key,
            "is empty: every forward would be refused; list the targets, e.g. \"10.0.0.0/8:53\""
                .into(),
        ));
    }
    if let Err(e) = holdfast_forward::AllowList::parse(allow.get_ref().iter().map(String::as_str)) {
        return Err(loc.at(Some(allow.span()), key, e.to_string()));
    }
    Ok(())
}

/// The tokens of `[forward]` (`client` `None`) or of `[[forward.client]]` entry `client`: inline
/// and from its token file, which must be safe and readable; each at least
/// [`MIN_FORWARD_TOKEN_LEN`] bytes.
fn count_tokens(
    loc: &Locator<'_>,
    tokens: &[Secret],
    token_file: Option<&Spanned<PathBuf>>,
    client: Option<usize>,
) -> Result<usize, ConfigError> {
    let section = client.map_or_else(|| "forward".to_owned(), |i| format!("forward.client[{i}]"));
    if let Some((i, token)) = tokens
        .iter()
        .enumerate()
        .find(|(_, t)| t.0.len() < MIN_FORWARD_TOKEN_LEN)
    {
        return Err(loc.at(
            forward_token_span(loc.text, client, i),
            &format!("{section}.tokens[{i}]"),
            short_token(token.0.len()),
        ));
    }
    let mut count = tokens.len();
    if let Some(file) = token_file {
        match read_forward_tokens(file.get_ref()) {
            Ok(tokens) => count += tokens.len(),
            Err(message) => {
                return Err(loc.at(Some(file.span()), &format!("{section}.token_file"), message));
            }
        }
    }
    Ok(count)
}

/// Where inline token `index` of `[forward]` (`client` `None`) or of `[[forward.client]]` entry
/// `client` is written. The section's types keep no span per token (a token is a secret, shown
/// only redacted), so the text is read once more for it, only when a token is refused.
fn forward_token_span(
    text: &str,
    client: Option<usize>,
    index: usize,
) -> Option<std::ops::Range<usize>> {
    use serde::de::IgnoredAny;
    #[derive(Deserialize)]
    struct File {
        forward: Option<Tokens>,
    }
    #[derive(Deserialize)]
    struct Tokens {
        #[serde(default)]
        tokens: Vec<Spanned<IgnoredAny>>,
        #[serde(default)]
        client: Vec<Tokens>,
    }
    let file: File = toml::from_str(text).ok()?;
    let forward = file.forward?;
    let tokens = match client {
        None => forward.tokens,
        Some(i) => forward.client.into_iter().nth(i)?.tokens,
    };
    Some(tokens.into_iter().nth(index)?.span())
}

impl PolicySection<'_> {
    fn builder(&self, seed: u64) -> holdfast_retry::PolicyBuilder {
        Policy::builder()
            .base(self.base.get_ref().get())
            .cap(self.cap.get_ref().get())
            .escalate_after(*self.escalate_after.get_ref())
            .seed(seed)
    }

    fn build(&self, loc: &Locator<'_>, section: &str, seed: u64) -> Result<Policy, ConfigError> {
        self.builder(seed).build().map_err(|e| {
            let field = match &e {
                holdfast_retry::PolicyError::Zero(field)
                | holdfast_retry::PolicyError::TooLong { field, .. } => field,
                _ => &"cap",
            };
            let span = match *field {
                "base" => self.base.span(),
                "escalate_after" => self.escalate_after.span(),
                _ => self.cap.span(),
            };
            let message = match &e {
                holdfast_retry::PolicyError::BaseAboveCap { .. } => {
                    format!("must not be shorter than {section}.base ({e})")
                }
                _ => e.to_string(),
            };
            loc.at(Some(span), &format!("{section}.{field}"), message)
        })
    }

    /// The validated policy (validation ran when the config was parsed).
    fn policy(&self, seed: u64) -> Policy {
        self.builder(seed).build().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify node.issuance.config+2]
    // Every error the issuance policy returns today starts with its key, so the fallback is
    // reached through no config: a message whose first ": " follows words, not a key.
    #[test]
    fn an_issuance_policy_error_is_keyed_only_by_a_key() {
        assert_eq!(
            policy_error_key("issuance: pacing.base: must be <= cap (7h > 6h)"),
            (
                "issuance.pacing.base".to_owned(),
                "must be <= cap (7h > 6h)"
            )
        );
        assert_eq!(
            policy_error_key("issuance: the pacing cannot work: base above cap"),
            (
                "issuance".to_owned(),
                "the pacing cannot work: base above cap"
            )
        );
        assert_eq!(
            policy_error_key("issuance: no key here"),
            ("issuance".to_owned(), "no key here")
        );
    }

    // r[verify issue.certificates.names+2]
    // r[verify issue.dns01.choice]
    // r[verify node.issuance.config+2]
    #[test]
    fn a_certificate_name_is_refused_at_file_line_col_and_a_wildcard_says_it_needs_dns01() {
        let base = "[node]\n[issuance]\n[issuance.acme]\ndirectory = \"https://acme.example/d\"\n\
                    [issuance.local]\nendpoint = { tcp = \"127.0.0.1:1\" }\n";
        // Two names on one certificate, and a hostname beside it: accepted.
        let ok = format!(
            "{base}[[issuance.hostname]]\nname = \"a.example\"\nsource = \"acme\"\n\
             [[issuance.certificate]]\nnames = [\"b.example\", \"www.b.example\"]\nsource = \"acme\"\n"
        );
        let config = Config::parse("ok.toml", &ok).unwrap();
        assert_eq!(
            config.issuance.unwrap().get_ref().certificates[0]
                .names
                .len(),
            2
        );
        let cases = [
            (
                // A wildcard on an ACME certificate: at the name, saying why.
                "[[issuance.certificate]]\nnames = [\"b.example\", \"*.b.example\"]\nsource = \"acme\"\n",
                "bad.toml:8:23: issuance.certificate[0].names[1]: \"*.b.example\" is a wildcard: \
                 a wildcard needs challenge = \"dns-01\"",
            ),
            (
                "[[issuance.hostname]]\nname = \"*.a.example\"\nsource = \"acme\"\n",
                "bad.toml:8:8: issuance.hostname[0].name: \"*.a.example\" is a wildcard",
            ),
            (
                // A name on two certificates: the error names both.
                "[[issuance.certificate]]\nnames = [\"a.example\", \"www.a.example\"]\nsource = \"acme\"\n\
                 [[issuance.certificate]]\nnames = [\"WWW.a.example\"]\nsource = \"local\"\n",
                "bad.toml:11:10: issuance.certificate[1].names[0]: \"WWW.a.example\" is listed more \
                 than once (also issuance.certificate[0].names[1])",
            ),
            (
                "[[issuance.certificate]]\nnames = []\nsource = \"acme\"\n",
                "bad.toml:8:9: issuance.certificate[0].names: a certificate lists at least one name",
            ),
            (
                "[[issuance.certificate]]\nnames = [\"a/b.example\"]\nsource = \"acme\"\n",
                "bad.toml:8:10: issuance.certificate[0].names[0]: \"a/b.example\" is not a DNS name",
            ),
        ];
        for (entries, want) in cases {
            let err = Config::parse("bad.toml", &format!("{base}{entries}"))
                .unwrap_err()
                .to_string();
            assert!(err.starts_with(want), "{err}\n  wanted: {want}");
        }
        // A wildcard on DNS-01 is accepted; DNS-01 without a provider is refused at `challenge`.
        let dns01 = "[[issuance.certificate]]\nnames = [\"*.b.example\", \"b.example\"]\n\
                     source = \"acme\"\nchallenge = \"dns-01\"\n";
        let err = Config::parse("bad.toml", &format!("{base}{dns01}"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "bad.toml:10:13: issuance.certificate[0].challenge: \"dns-01\" needs an \
                 [issuance.dns01] section"
            ),
            "{err}"
        );
        let provider = "[issuance.dns01]\nprovider = \"exec\"\ncommand = [\"/usr/local/bin/dns\"]\n\
                        propagation_servers = [\"192.0.2.53:53\"]\n";
        Config::parse("ok.toml", &format!("{base}{provider}{dns01}")).unwrap();
        // A provider setting that cannot work: at its key.
        let bad = "[issuance.dns01]\nprovider = \"exec\"\ncommand = [\"/usr/local/bin/dns\"]\n\
                   propagation_servers = []\n";
        let err = Config::parse("bad.toml", &format!("{base}{bad}{dns01}"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("bad.toml:10:23: issuance.dns01.propagation_servers: is required"),
            "{err}"
        );
        // A certificate whose source has no section: at its `source`.
        let text = "[node]\n[issuance]\n[[issuance.certificate]]\nnames = [\"a.example\"]\n\
                    source = \"local\"\n";
        let err = Config::parse("bad.toml", text).unwrap_err().to_string();
        assert!(
            err.starts_with(
                "bad.toml:5:10: issuance.certificate[0].source: a.example uses the local source, \
                 but there is no [issuance.local] section"
            ),
            "{err}"
        );
    }

    // r[verify issue.dns01.rfc2136]
    #[test]
    fn a_tsig_secret_file_readable_by_others_is_refused_at_its_key_without_its_text() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("tsig.key");
        std::fs::write(&secret, "c2VjcmV0LXNlY3JldA==\n").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
        let text = format!(
            "[node]\n[issuance]\n[issuance.acme]\ndirectory = \"https://acme.example/d\"\n\
             [issuance.dns01]\nprovider = \"rfc2136\"\nserver = \"192.0.2.53:53\"\n\
             zone = \"b.example\"\ntsig_key_name = \"holdfast\"\ntsig_secret_file = {:?}\n\
             [[issuance.certificate]]\nnames = [\"*.b.example\"]\nsource = \"acme\"\n\
             challenge = \"dns-01\"\n",
            secret.display().to_string()
        );
        let err = Config::parse("bad.toml", &text).unwrap_err().to_string();
        assert!(
            err.starts_with("bad.toml:10:20: issuance.dns01.tsig_secret_file: "),
            "{err}"
        );
        assert!(err.contains("0644"), "{err}");
        assert!(!err.contains("c2VjcmV0"), "{err}");
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        Config::parse("ok.toml", &text).unwrap();
    }

    // r[verify issue.deploy]
    #[test]
    fn a_deploy_mode_wider_than_allowed_or_an_unknown_owner_is_refused_at_its_key() {
        let base = "[node]\n[issuance]\n[issuance.local]\nendpoint = { tcp = \"127.0.0.1:1\" }\n\
                    [[issuance.hostname]]\nname = \"a.example\"\nsource = \"local\"\n";
        let ok = format!(
            "{base}[issuance.deploy]\ndir = \"/etc/holdfast/certs\"\nowner = \"root\"\ngroup = 0\n\
             mode = \"0640\"\n"
        );
        let config = Config::parse("ok.toml", &ok).unwrap();
        let deploy = config.issuance.unwrap().get_ref().deploy.clone().unwrap();
        assert_eq!(deploy.mode.0, 0o640);
        for (section, want) in [
            (
                "[issuance.deploy]\ndir = \"/etc/c\"\nmode = \"0644\"\n",
                "bad.toml:10:8: issuance.deploy.mode: mode 0644 is wider than 0640",
            ),
            (
                "[issuance.deploy]\ndir = \"/etc/c\"\ncert_mode = \"0666\"\n",
                "bad.toml:10:13: issuance.deploy.cert_mode: mode 0666 is wider than 0644",
            ),
            (
                "[issuance.deploy]\ndir = \"/etc/c\"\nmode = 640\n",
                "bad.toml:10:8: issuance.deploy.mode: ",
            ),
            (
                "[issuance.deploy]\ndir = \"/etc/c\"\nowner = \"no-such-user-holdfast\"\n",
                "bad.toml:2:1: issuance.deploy.owner: no user \"no-such-user-holdfast\"",
            ),
            (
                "[issuance.deploy]\ndir = \"certs\"\n",
                "bad.toml:2:1: issuance.deploy.dir: certs is not an absolute path",
            ),
        ] {
            let err = Config::parse("bad.toml", &format!("{base}{section}"))
                .unwrap_err()
                .to_string();
            assert!(err.starts_with(want), "{err}\n  wanted: {want}");
        }
    }

    // r[verify issue.on-renew]
    #[test]
    fn an_on_renew_that_cannot_run_is_refused_at_its_key() {
        let base = "[node]\n[issuance]\n";
        let ok = format!(
            "{base}on_renew = [\"/usr/sbin/nginx\", \"-s\", \"reload\"]\non_renew_timeout = \"30s\"\n"
        );
        assert!(Config::parse("ok.toml", &ok).is_ok());
        for (section, want) in [
            (
                "on_renew = \"systemctl reload nginx\"\n",
                "bad.toml:3:12: issuance.on_renew: ",
            ),
            (
                "on_renew = []\n",
                "bad.toml:2:1: issuance.on_renew: names no program",
            ),
            (
                "on_renew_timeout = \"0s\"\n",
                "bad.toml:2:1: issuance.on_renew_timeout: must be more than zero",
            ),
        ] {
            let err = Config::parse("bad.toml", &format!("{base}{section}"))
                .unwrap_err()
                .to_string();
            assert!(err.starts_with(want), "{err}\n  wanted: {want}");
        }
    }

    // r[verify issue.certificates]
    #[test]
    fn the_gateway_takes_a_certificate_of_several_names_by_its_first_name() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("token.key");
        std::fs::write(&key, [7u8; 64]).unwrap();
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let text = |name: &str| {
            format!(
                "[node]\n[gateway]\nlisten = \"127.0.0.1:7443\"\ntoken_key_file = \"{}\"\n\
                 [gateway.tls]\nfrom_issuance = \"{name}\"\n\
                 [issuance]\n[issuance.local]\nendpoint = {{ tcp = \"127.0.0.1:8099\" }}\n\
                 [[issuance.certificate]]\nnames = [\"app.example\", \"www.app.example\"]\n\
                 source = \"local\"\n",
                key.display()
            )
        };
        Config::parse("ok.toml", &text("app.example")).unwrap();
        // A further name is not a certificate: its file does not exist.
        let err = Config::parse("bad.toml", &text("www.app.example"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("gateway.tls.from_issuance"), "{err}");
    }

    // i[verify node.pull.gc]
    #[test]
    fn image_gc_keys_have_the_kubelets_defaults_and_bad_marks_are_located() {
        let config = Config::parse("t.toml", "[node]\n").unwrap();
        let (policy, interval) = config.image_gc().unwrap();
        assert_eq!(policy, holdfast_pull::GcPolicy::default());
        assert_eq!((policy.high_percent(), policy.low_percent()), (85, 80));
        assert_eq!(policy.grace(), std::time::Duration::from_secs(120));
        assert_eq!(interval, std::time::Duration::from_secs(300));
        let text = "[node]\n[pull]\ngc_high_percent = 90\ngc_low_percent = 70\ngc_grace = \"1h\"\n";
        let (policy, _) = Config::parse("t.toml", text).unwrap().image_gc().unwrap();
        assert_eq!(
            policy,
            holdfast_pull::GcPolicy::new(90, 70, std::time::Duration::from_secs(3600)).unwrap()
        );
        let off = Config::parse("t.toml", "[node]\n[pull]\ngc = false\n").unwrap();
        assert!(off.image_gc().is_none());
        let err = Config::parse("t.toml", "[node]\n[pull]\ngc_low_percent = 85\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("t.toml:3:18: pull.gc_low_percent: 85 must be below"),
            "{err}"
        );
        let err = Config::parse("t.toml", "[node]\n[pull]\ngc_high_percent = 101\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("t.toml:3:19: pull.gc_high_percent:"),
            "{err}"
        );
        let err = Config::parse("t.toml", "[node]\n[pull]\ngc_interval = \"0s\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("t.toml:3:15: pull.gc_interval:"), "{err}");
    }

    // i[verify node.pull.credentials]
    // i[verify node.pull.policy]
    #[test]
    fn registry_credentials_are_located_validated_and_reach_the_pull_module() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let docker_config = dir.path().join("config.json");
        std::fs::write(&docker_config, "{}").unwrap();
        let own = dir.path().join("app.json");
        std::fs::write(
            &own,
            r#"{"auths": {"reg.example": {"username": "app", "password": "pw"}}}"#,
        )
        .unwrap();
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o600)).unwrap();
        let text = format!(
            "[node]\n[pull]\ndocker_config = \"{}\"\n[[workload]]\nname = \"app\"\n\
             image = \"reg.example/app:1\"\ncredentials_file = \"{}\"\n",
            docker_config.display(),
            own.display()
        );
        let config = Config::parse("t.toml", &text).unwrap();
        let auth = config.registry_auth();
        assert_eq!(auth.docker_config_path(), Some(docker_config.clone()));
        let found = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(auth.lookup("reg.example/app:1", std::time::Duration::from_secs(5)))
            .unwrap()
            .unwrap();
        assert_eq!(found.username(), Some("app"));
        // Not part of the container's spec: changing the file replaces nothing.
        assert_eq!(
            config.workloads[0].to_config(),
            holdfast_workload::WorkloadConfig::new("app", "reg.example/app:1")
        );
        // Readable by others: located at the value.
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = Config::parse("t.toml", &text).unwrap_err().to_string();
        assert!(
            err.starts_with("t.toml:7:20: workload[0].credentials_file:") && err.contains("0644"),
            "{err}"
        );
        // pull_policy: followed tags reach the pull module; a bad value is located.
        let followed = text.replace(
            "credentials_file",
            "pull_policy = \"digest\"\ncredentials_file",
        );
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o600)).unwrap();
        let checks = Config::parse("t.toml", &followed).unwrap().tag_checks();
        assert_eq!(
            checks.images,
            [("reg.example/app:1".to_owned(), vec!["app".to_owned()])].into()
        );
        assert_eq!(checks.interval, std::time::Duration::from_secs(900));
        let bad = text.replace(
            "credentials_file",
            "pull_policy = \"sometimes\"\ncredentials_file",
        );
        let err = Config::parse("t.toml", &bad).unwrap_err().to_string();
        assert!(
            err.starts_with("t.toml:7:15: workload[0].pull_policy:"),
            "{err}"
        );
        // Two workloads of one image with different files: which one is used would be a
        // silent choice; refused, naming both, at the second.
        let other = dir.path().join("other.json");
        std::fs::copy(&own, &other).unwrap();
        let two = format!(
            "{text}[[workload]]\nname = \"app2\"\nimage = \"reg.example/app:1\"\n\
             credentials_file = \"{}\"\n",
            other.display()
        );
        let err = Config::parse("t.toml", &two).unwrap_err().to_string();
        assert!(
            err.starts_with("t.toml:11:20: workload[1].credentials_file:")
                && err.contains("workload[0]")
                && err.contains("reg.example/app:1"),
            "{err}"
        );
        // The same file twice is no conflict.
        let same = two.replace(&other.display().to_string(), &own.display().to_string());
        assert!(Config::parse("t.toml", &same).is_ok());
        let zero = text.replace("[[workload]]", "digest_interval = \"0s\"\n[[workload]]");
        let err = Config::parse("t.toml", &zero).unwrap_err().to_string();
        assert!(
            err.contains("pull.digest_interval: must be longer than zero"),
            "{err}"
        );
        // A docker_config that is not there.
        let missing = format!(
            "[node]\n[pull]\ndocker_config = \"{}\"\n",
            dir.path().join("nope.json").display()
        );
        let err = Config::parse("t.toml", &missing).unwrap_err().to_string();
        assert!(
            err.starts_with("t.toml:3:17: pull.docker_config:") && err.contains("nope.json"),
            "{err}"
        );
    }
}
