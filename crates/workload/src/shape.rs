//! The container's shape: the `[[workload]]` keys that say how its container is made beyond image,
//! command and environment (published ports, volumes, limits, log rotation…), their written forms
//! and parsers, and the env file's format.
//!
//! Each written form parses into a typed value whose `Display` is the canonical written form, so a
//! config round-trips and the spec hash sees the same value however it was spelled.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::time::Duration;

/// A written value that does not parse; the message says what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ShapeError(pub String);

fn bad(message: impl Into<String>) -> ShapeError {
    ShapeError(message.into())
}

/// Serde through `FromStr`/`Display`, for the written forms.
macro_rules! serde_via_text {
    ($t:ty, $what:literal) => {
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = <String as serde::Deserialize>::deserialize(d)?;
                text.parse()
                    .map_err(|e: ShapeError| serde::de::Error::custom(format!("{text:?}: {e}")))
            }
        }
    };
}

/// A published port's protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Protocol {
    /// TCP (the default).
    #[default]
    Tcp,
    /// UDP.
    Udp,
}

impl Protocol {
    /// As the Engine API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

/// One published port: `[HOST_IP:]HOST_PORT:CONTAINER_PORT[/PROTO]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortSpec {
    /// The host address it is published on (`None`: every address).
    pub host_ip: Option<IpAddr>,
    /// The host port.
    pub host_port: u16,
    /// The container's port.
    pub container_port: u16,
    /// TCP or UDP.
    pub protocol: Protocol,
}

fn port(text: &str, which: &str) -> Result<u16, ShapeError> {
    match text.parse::<u16>() {
        Ok(0) => Err(bad(format!("{which} port must be 1 to 65535, not 0"))),
        Ok(p) if text.bytes().all(|b| b.is_ascii_digit()) => Ok(p),
        _ => Err(bad(format!(
            "{which} port {text:?} is not a number from 1 to 65535"
        ))),
    }
}

// r[impl workload.shape.ports]
impl FromStr for PortSpec {
    type Err = ShapeError;

    fn from_str(text: &str) -> Result<Self, ShapeError> {
        const FORM: &str = "write [HOST_IP:]HOST_PORT:CONTAINER_PORT[/tcp|/udp]";
        let (ports, protocol) = match text.rsplit_once('/') {
            Some((ports, "tcp")) => (ports, Protocol::Tcp),
            Some((ports, "udp")) => (ports, Protocol::Udp),
            Some((_, other)) => {
                return Err(bad(format!(
                    "protocol {other:?} is neither tcp nor udp ({FORM})"
                )));
            }
            None => (text, Protocol::Tcp),
        };
        let (host_ip, rest) = if let Some(v6) = ports.strip_prefix('[') {
            let (ip, rest) = v6
                .split_once("]:")
                .ok_or_else(|| bad(format!("an IPv6 host address is written [ADDR]: ({FORM})")))?;
            let ip: std::net::Ipv6Addr = ip
                .parse()
                .map_err(|_| bad(format!("{ip:?} is not an IPv6 address")))?;
            (Some(IpAddr::V6(ip)), rest)
        } else {
            match ports.split(':').count() {
                2 => (None, ports),
                3 => {
                    let (ip, rest) = ports.split_once(':').unwrap_or((ports, ""));
                    let ip: std::net::Ipv4Addr = ip.parse().map_err(|_| {
                        bad(format!(
                            "{ip:?} is not an IPv4 address (an IPv6 one is written in brackets)"
                        ))
                    })?;
                    (Some(IpAddr::V4(ip)), rest)
                }
                _ => {
                    return Err(bad(format!(
                        "expected two or three ':'-separated parts ({FORM})"
                    )));
                }
            }
        };
        let (host, container) = rest
            .split_once(':')
            .ok_or_else(|| bad(format!("a host and a container port are needed ({FORM})")))?;
        Ok(PortSpec {
            host_ip,
            host_port: port(host, "host")?,
            container_port: port(container, "container")?,
            protocol,
        })
    }
}

impl fmt::Display for PortSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.host_ip {
            Some(IpAddr::V4(ip)) => write!(f, "{ip}:")?,
            Some(IpAddr::V6(ip)) => write!(f, "[{ip}]:")?,
            None => {}
        }
        write!(f, "{}:{}", self.host_port, self.container_port)?;
        if self.protocol == Protocol::Udp {
            f.write_str("/udp")?;
        }
        Ok(())
    }
}

serde_via_text!(PortSpec, "port");

impl PortSpec {
    // r[impl workload.shape.ports]
    /// Whether the two cannot both be published: the same port and protocol on the same host
    /// address, or on every address (none written, `0.0.0.0` or `[::]`) beside any other.
    pub fn clashes_with(&self, other: &PortSpec) -> bool {
        let every = |ip: Option<IpAddr>| ip.is_none_or(|ip| ip.is_unspecified());
        self.host_port == other.host_port
            && self.protocol == other.protocol
            && (self.host_ip == other.host_ip || every(self.host_ip) || every(other.host_ip))
    }

    /// The container port as the Engine API keys it (`80/tcp`).
    pub fn container_key(&self) -> String {
        format!("{}/{}", self.container_port, self.protocol.as_str())
    }
}

/// Where a volume comes from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum VolumeSource {
    /// A host path (absolute).
    Bind(String),
    /// A named volume (created by the daemon when missing).
    Named(String),
}

/// One volume: `SOURCE:TARGET[:ro|:rw]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VolumeSpec {
    /// A host path or a volume name.
    pub source: VolumeSource,
    /// The absolute path in the container.
    pub target: String,
    /// Mounted read-only.
    pub read_only: bool,
}

/// Letters, digits, `_`, `.`, `-`, starting with a letter or digit.
fn name_chars_ok(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphanumeric())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// A volume name as the daemon takes it (`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`: two characters or more).
fn volume_name_ok(name: &str) -> bool {
    name.len() >= 2 && name_chars_ok(name)
}

// r[impl workload.shape.volumes]
impl FromStr for VolumeSpec {
    type Err = ShapeError;

    fn from_str(text: &str) -> Result<Self, ShapeError> {
        const FORM: &str = "write SOURCE:TARGET[:ro]";
        let parts: Vec<&str> = text.split(':').collect();
        let (source, target, read_only) = match parts[..] {
            [s, t] => (s, t, false),
            [s, t, "ro"] => (s, t, true),
            [s, t, "rw"] => (s, t, false),
            [_, _, mode] => return Err(bad(format!("mode {mode:?} is neither ro nor rw"))),
            _ => {
                return Err(bad(format!(
                    "expected two or three ':'-separated parts ({FORM})"
                )));
            }
        };
        if !target.starts_with('/') {
            return Err(bad(format!(
                "the target {target:?} must be an absolute path in the container"
            )));
        }
        let source = if source.starts_with('/') {
            VolumeSource::Bind(source.to_owned())
        } else if source.starts_with('.') || source.contains('/') {
            return Err(bad(format!(
                "the bind source {source:?} must be an absolute host path"
            )));
        } else if volume_name_ok(source) {
            VolumeSource::Named(source.to_owned())
        } else {
            return Err(bad(format!(
                "{source:?} is neither an absolute host path nor a volume name (two or more letters, digits, '_', '.', '-')"
            )));
        };
        Ok(VolumeSpec {
            source,
            target: target.to_owned(),
            read_only,
        })
    }
}

impl fmt::Display for VolumeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            VolumeSource::Bind(s) | VolumeSource::Named(s) => s,
        };
        write!(f, "{source}:{}", self.target)?;
        if self.read_only {
            f.write_str(":ro")?;
        }
        Ok(())
    }
}

serde_via_text!(VolumeSpec, "volume");

/// The smallest memory limit the daemon accepts (6 MiB).
pub const MIN_MEMORY: u64 = 6 * 1024 * 1024;

/// A byte size: a number (a fraction allowed) and an optional unit, e.g. `"512m"`, `"1.5GiB"`.
/// How a unit without `i` is read depends on the key (see [`ByteSize::from_str`] and
/// [`ByteSize::parse_decimal`]), as Docker reads each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(pub u64);

/// The units a size is displayed in, largest first: Docker's own spelling.
const UNITS: [(char, u64); 3] = [('g', 1 << 30), ('m', 1 << 20), ('k', 1 << 10)];

/// The unit spellings a size may end in (any case): bytes, then each prefix alone, with `b`, or
/// with `ib`.
const UNIT_SPELLINGS: [&str; 17] = [
    "", "b", "k", "kb", "kib", "m", "mb", "mib", "g", "gb", "gib", "t", "tb", "tib", "p", "pb",
    "pib",
];

/// Whether `text` has a byte size's shape: digits, optionally `.` and digits, optionally one
/// space, then one of [`UNIT_SPELLINGS`] in any case. parse-size alone also takes
/// exponents (`1e3`), spaces and underscores inside or after the number, and `e` as exa.
fn has_size_shape(text: &str) -> bool {
    let number_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, rest) = text.split_at(number_end);
    let (whole, fraction) = match number.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (number, None),
    };
    let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    let unit = rest
        .strip_prefix(' ')
        .filter(|u| !u.is_empty())
        .unwrap_or(rest);
    let unit = unit.to_ascii_lowercase();
    digits(whole) && fraction.is_none_or(digits) && UNIT_SPELLINGS.contains(&unit.as_str())
}

impl ByteSize {
    /// A size with its unit read as `system` says, after its shape is checked.
    fn parse_with(text: &str, config: &parse_size::Config) -> Result<Self, ShapeError> {
        if !has_size_shape(text) {
            return Err(bad(format!(
                "{text:?} is not a size: write a number and a unit such as \"512m\", \"512MiB\" or \"1.5g\""
            )));
        }
        let bytes = config
            .parse_size(text)
            .map_err(|e| bad(format!("{text:?}: {e}")))?;
        // The Engine API takes sizes as i64.
        i64::try_from(bytes)
            .map(|_| ByteSize(bytes))
            .map_err(|_| bad(format!("{text:?} is too large")))
    }

    // r[impl workload.shape.bytes+2]
    /// A size read as Docker reads a log driver's `max-size` (go-units' `FromHumanSize`): every
    /// unit a power of 1000 (`10m` and `10MB` are 10,000,000 bytes), except that one with an
    /// `i` is a power of 1024 (`10MiB`, which Docker would misread as 10 MB).
    pub fn parse_decimal(text: &str) -> Result<Self, ShapeError> {
        ByteSize::parse_with(text, &parse_size::Config::new())
    }
}

// r[impl workload.shape.bytes+2]
impl FromStr for ByteSize {
    type Err = ShapeError;

    /// A size read as Docker reads `memory` (go-units' `RAMInBytes`): every unit a power of 1024
    /// (`512m`, `512MB` and `512MiB` alike); a fraction (`1.5g`) is taken to the byte.
    fn from_str(text: &str) -> Result<Self, ShapeError> {
        ByteSize::parse_with(text, &parse_size::Config::new().with_binary())
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (unit, multiple) in UNITS {
            if self.0 >= multiple && self.0 % multiple == 0 {
                return write!(f, "{}{unit}", self.0 / multiple);
            }
        }
        write!(f, "{}b", self.0)
    }
}

serde_via_text!(ByteSize, "size");

/// The most CPUs a workload may be given.
pub const MAX_CPUS: u64 = 1024;
/// The fewest CPUs a workload may be given (the daemon refuses a smaller quota).
pub const MIN_CPUS: f64 = 0.01;

/// A CPU quota, written as a number of CPUs (`1.5`), held as nano-CPUs as the Engine API takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cpus(pub u64);

impl Cpus {
    /// From a number of CPUs: at least [`MIN_CPUS`], at most [`MAX_CPUS`].
    pub fn from_cpus(cpus: f64) -> Result<Self, ShapeError> {
        if !(cpus.is_finite() && cpus >= MIN_CPUS && cpus <= MAX_CPUS as f64) {
            return Err(bad(format!(
                "{cpus} is not a number of CPUs from {MIN_CPUS} to {MAX_CPUS}"
            )));
        }
        // Exact enough: a billionth of a CPU is below anything the scheduler honours.
        Ok(Cpus((cpus * 1e9).round() as u64))
    }

    /// As a number of CPUs.
    pub fn as_cpus(self) -> f64 {
        self.0 as f64 / 1e9
    }
}

impl serde::Serialize for Cpus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.as_cpus())
    }
}

impl<'de> serde::Deserialize<'de> for Cpus {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let cpus = <f64 as serde::Deserialize>::deserialize(d)?;
        Cpus::from_cpus(cpus).map_err(serde::de::Error::custom)
    }
}

/// The default log driver.
pub const DEFAULT_LOG_DRIVER: &str = "json-file";

/// The default log rotation of the `json-file` driver.
pub const DEFAULT_LOG_OPTIONS: [(&str, &str); 2] = [("max-size", "10m"), ("max-file", "3")];

/// A workload's `log` table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// The daemon's log driver (default `json-file`).
    #[serde(default = "default_log_driver")]
    pub driver: String,
    /// The driver's options; unset: the default rotation for `json-file`, none for another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<BTreeMap<String, String>>,
}

fn default_log_driver() -> String {
    DEFAULT_LOG_DRIVER.to_owned()
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            driver: default_log_driver(),
            options: None,
        }
    }
}

impl LogConfig {
    // r[impl workload.shape.log]
    /// The options the daemon is given: the configured ones, else `json-file`'s rotation.
    pub fn effective_options(&self) -> BTreeMap<String, String> {
        match &self.options {
            Some(options) => options
                .iter()
                .map(|(k, v)| (k.clone(), self.option_for_daemon(k, v)))
                .collect(),
            None if self.driver == DEFAULT_LOG_DRIVER => DEFAULT_LOG_OPTIONS
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            None => BTreeMap::new(),
        }
    }

    // r[impl workload.shape.bytes+2]
    /// Whether the options hold what the daemon can take: a rotation size (`max-size`) of the
    /// drivers that rotate (`json-file`, `local`) is a positive byte size.
    pub fn validate(&self) -> Result<(), ShapeError> {
        if let Some(size) = self.rotation_size() {
            let bytes = ByteSize::parse_decimal(size)
                .map_err(|e| bad(format!("options.max-size {size:?}: {e}")))?;
            if bytes.0 == 0 {
                return Err(bad(format!(
                    "options.max-size {size:?}: the driver refuses a size of 0"
                )));
            }
        }
        Ok(())
    }

    fn rotation_size(&self) -> Option<&str> {
        if !matches!(self.driver.as_str(), "json-file" | "local") {
            return None;
        }
        self.options.as_ref()?.get("max-size").map(String::as_str)
    }

    // r[impl workload.shape.bytes+2]
    /// An option as the daemon is given it: a rotation size always as its number of bytes, read
    /// as Docker reads it (decimal units) except that an `i` unit means what it says, so no
    /// spelling depends on the daemon's reading.
    fn option_for_daemon(&self, key: &str, value: &str) -> String {
        if key == "max-size" && self.rotation_size() == Some(value) {
            if let Ok(size) = ByteSize::parse_decimal(value) {
                return size.0.to_string();
            }
        }
        value.to_owned()
    }

    /// Whether this is the default (for leaving it out of a serialized config).
    pub fn is_default(&self) -> bool {
        *self == LogConfig::default()
    }
}

/// Docker's default health-check interval and timeout.
pub const DEFAULT_HEALTH_INTERVAL: Duration = Duration::from_secs(30);
/// Docker's default number of failed probes before unhealthy.
pub const DEFAULT_HEALTH_RETRIES: u32 = 3;
/// The longest a start may wait for its first verdict: `start_period + retries × (interval +
/// timeout)` beyond this would outlast the restart gate's stale timeout.
pub const MAX_HEALTH_WAIT: Duration = Duration::from_secs(3600);

/// An HTTP GET probe the node makes against the container (`health.http`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpProbe {
    /// The container's port.
    pub port: u16,
    /// The path asked for (default `/`).
    #[serde(default = "default_probe_path")]
    pub path: String,
}

fn default_probe_path() -> String {
    "/".to_owned()
}

/// A TCP connect probe the node makes against the container (`health.tcp`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpProbe {
    /// The container's port.
    pub port: u16,
}

/// What a node-side check probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeProbe<'a> {
    /// A GET of a path.
    Http(&'a HttpProbe),
    /// A connect.
    Tcp(&'a TcpProbe),
}

/// A workload's `health` table: Docker's own health check run by the daemon in the container
/// (`cmd`, `shell`), or a probe the node makes (`http`, `tcp`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthCheck {
    /// The probe's argv (Docker's `CMD` form).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cmd: Vec<String>,
    /// The probe as a shell command line (Docker's `CMD-SHELL` form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
    /// An HTTP GET the node makes (a 2xx or 3xx passes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpProbe>,
    /// A TCP connect the node makes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpProbe>,
    /// No check at all, not even the image's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable: bool,
    /// Between probes (default 30 s).
    #[serde(
        default = "default_health_interval",
        with = "crate::config::serde_text"
    )]
    pub interval: Duration,
    /// A probe longer than this failed (default 30 s).
    #[serde(
        default = "default_health_interval",
        with = "crate::config::serde_text"
    )]
    pub timeout: Duration,
    /// Failures within this long after the start do not count (default 0 s).
    #[serde(default, with = "crate::config::serde_text")]
    pub start_period: Duration,
    /// Failed probes in a row that make the container unhealthy (default 3).
    #[serde(default = "default_health_retries")]
    pub retries: u32,
}

fn default_health_interval() -> Duration {
    DEFAULT_HEALTH_INTERVAL
}

fn default_health_retries() -> u32 {
    DEFAULT_HEALTH_RETRIES
}

impl Default for HealthCheck {
    fn default() -> Self {
        HealthCheck {
            cmd: Vec::new(),
            shell: None,
            http: None,
            tcp: None,
            disable: false,
            interval: DEFAULT_HEALTH_INTERVAL,
            timeout: DEFAULT_HEALTH_INTERVAL,
            start_period: Duration::ZERO,
            retries: DEFAULT_HEALTH_RETRIES,
        }
    }
}

impl HealthCheck {
    // r[impl workload.health+2]
    /// What is wrong with the check, if anything.
    pub fn problem(&self) -> Option<String> {
        let kinds: Vec<&str> = [
            (!self.cmd.is_empty(), "cmd"),
            (self.shell.is_some(), "shell"),
            (self.http.is_some(), "http"),
            (self.tcp.is_some(), "tcp"),
            (self.disable, "disable"),
        ]
        .into_iter()
        .filter_map(|(set, kind)| set.then_some(kind))
        .collect();
        if kinds.len() > 1 {
            return Some(format!(
                "give one of cmd, shell, http, tcp or disable, not {}",
                kinds.join(" and ")
            ));
        }
        if self.cmd.first().is_some_and(String::is_empty)
            || self.shell.as_deref().is_some_and(|s| s.trim().is_empty())
        {
            return Some("the probe is empty".into());
        }
        let port = self
            .http
            .as_ref()
            .map(|h| h.port)
            .or(self.tcp.as_ref().map(|t| t.port));
        if port == Some(0) {
            return Some("the probe's port must be 1 to 65535, not 0".into());
        }
        if let Some(http) = &self.http {
            let is_path = http.path.starts_with('/')
                && http
                    .path
                    .parse::<hyper::http::uri::PathAndQuery>()
                    .is_ok_and(|p| p.as_str() == http.path);
            if !is_path {
                return Some(format!(
                    "the probe's path must be a URI path starting with /, not {:?}",
                    http.path
                ));
            }
        }
        if self.interval < Duration::from_millis(1) || self.timeout < Duration::from_millis(1) {
            return Some("interval and timeout must be at least 1ms".into());
        }
        if !(1..=100).contains(&self.retries) {
            return Some(format!("retries must be 1 to 100, not {}", self.retries));
        }
        let wait = self
            .interval
            .saturating_add(self.timeout)
            .saturating_mul(self.retries)
            .saturating_add(self.start_period);
        if wait > MAX_HEALTH_WAIT {
            return Some(format!(
                "start_period + retries × (interval + timeout) is {}s, above the hour a start may wait",
                wait.as_secs()
            ));
        }
        None
    }

    /// The probe the node makes, if this is an `http` or `tcp` check.
    pub fn node_probe(&self) -> Option<NodeProbe<'_>> {
        match (&self.http, &self.tcp) {
            (Some(http), _) => Some(NodeProbe::Http(http)),
            (None, Some(tcp)) => Some(NodeProbe::Tcp(tcp)),
            (None, None) => None,
        }
    }

    // r[impl workload.health.probe]
    /// The test as the Engine API takes it: `[]` keeps the image's, `["NONE"]` disables (also
    /// for a check the node makes, so the image's own does not run beside it).
    pub fn test(&self) -> Vec<String> {
        if self.disable || self.node_probe().is_some() {
            vec!["NONE".into()]
        } else if let Some(shell) = &self.shell {
            vec!["CMD-SHELL".into(), shell.clone()]
        } else if !self.cmd.is_empty() {
            std::iter::once("CMD".to_owned())
                .chain(self.cmd.iter().cloned())
                .collect()
        } else {
            Vec::new()
        }
    }
}

/// A bad line of an env file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct EnvFileError {
    /// 1-based.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// Whether `key` can name an environment variable in a container.
pub fn env_name_ok(key: &str) -> bool {
    !key.is_empty() && !key.contains(['=', '\0']) && !key.contains(char::is_whitespace)
}

// r[impl workload.shape.env-file]
/// Parses an env file's text as `docker run --env-file` does: `KEY=VALUE` lines, values literal to
/// the end of the line, blank lines and `#` comments skipped, a leading UTF-8 byte order mark
/// ignored. A later line wins over an earlier. An error names the line by number and at most its
/// key: the rest may be a secret.
pub fn parse_env_file(text: &str) -> Result<BTreeMap<String, String>, EnvFileError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut vars = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |message: String| EnvFileError {
            line: i + 1,
            message,
        };
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| err("not KEY=VALUE".to_owned()))?;
        if !env_name_ok(key) {
            return Err(err(format!("{key:?} is not an environment variable name")));
        }
        vars.insert(key.to_owned(), value.to_owned());
    }
    Ok(vars)
}

/// Whether `name` can name a Docker network.
pub fn network_name_ok(name: &str) -> bool {
    name_chars_ok(name)
}

/// Whether `cap` is a capability as the daemon takes it (`NET_ADMIN`, `CAP_NET_ADMIN`, `ALL`).
pub fn capability_ok(cap: &str) -> bool {
    !cap.is_empty()
        && cap
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // r[verify workload.shape.ports]
    #[test]
    fn the_written_port_forms_parse_and_print_back_canonically() {
        let p = |t: &str| t.parse::<PortSpec>();
        assert_eq!(
            p("8080:80").unwrap(),
            PortSpec {
                host_ip: None,
                host_port: 8080,
                container_port: 80,
                protocol: Protocol::Tcp
            }
        );
        let tls = p("127.0.0.1:8443:443/tcp").unwrap();
        assert_eq!(tls.host_ip, Some("127.0.0.1".parse().unwrap()));
        assert_eq!(tls.to_string(), "127.0.0.1:8443:443");
        assert_eq!(tls.container_key(), "443/tcp");
        let dns = p("5353:53/udp").unwrap();
        assert_eq!(dns.protocol, Protocol::Udp);
        assert_eq!(dns.to_string(), "5353:53/udp");
        assert_eq!(dns.container_key(), "53/udp");
        assert_eq!(p("[::1]:80:80").unwrap().to_string(), "[::1]:80:80");
    }

    // r[verify workload.shape.ports]
    #[test]
    fn a_bad_port_says_what_is_wrong() {
        let e = |t: &str| t.parse::<PortSpec>().unwrap_err().to_string();
        assert!(e("80").contains("two or three"), "{}", e("80"));
        assert!(e("0:80").contains("host port must be 1 to 65535"));
        assert!(e("80:65536").contains("container port \"65536\""));
        assert!(e("80:80/sctp").contains("neither tcp nor udp"));
        assert!(e("localhost:80:80").contains("not an IPv4 address"));
        assert!(e("::1:80:80").contains("two or three"));
        assert!(e("[::1:80:80").contains("[ADDR]"));
        assert!(e("+80:80").contains("not a number"));
        assert!(e("a:b:c:d").contains("two or three"));
    }

    fn any_port() -> impl Strategy<Value = PortSpec> {
        (
            proptest::option::of(any::<IpAddr>()),
            1..=u16::MAX,
            1..=u16::MAX,
            any::<bool>(),
        )
            .prop_map(|(host_ip, host_port, container_port, udp)| PortSpec {
                host_ip,
                host_port,
                container_port,
                protocol: if udp { Protocol::Udp } else { Protocol::Tcp },
            })
    }

    proptest! {
        // r[verify workload.shape.ports]
        #[test]
        fn parse_of_display_is_the_identity(port in any_port()) {
            let text = port.to_string();
            prop_assert_eq!(text.parse::<PortSpec>(), Ok(port));
        }

        // r[verify workload.shape.ports]
        #[test]
        fn any_text_parses_to_its_canonical_form_or_is_rejected_with_a_message(text in "[0-9a-f:./\\[\\]tcpud]{0,24}") {
            match text.parse::<PortSpec>() {
                Ok(port) => prop_assert_eq!(port.to_string().parse::<PortSpec>(), Ok(port)),
                Err(e) => prop_assert!(!e.0.is_empty()),
            }
        }
    }

    // r[verify workload.shape.volumes]
    #[test]
    fn volumes_are_binds_of_absolute_paths_or_named_volumes() {
        let v = |t: &str| t.parse::<VolumeSpec>();
        assert_eq!(
            v("/srv/www:/www:ro").unwrap(),
            VolumeSpec {
                source: VolumeSource::Bind("/srv/www".into()),
                target: "/www".into(),
                read_only: true
            }
        );
        let data = v("data:/var/lib/data").unwrap();
        assert_eq!(data.source, VolumeSource::Named("data".into()));
        assert!(!data.read_only);
        assert_eq!(data.to_string(), "data:/var/lib/data");
        assert_eq!(v("data:/d:rw").unwrap().to_string(), "data:/d");
        let e = |t: &str| v(t).unwrap_err().to_string();
        assert!(e("./www:/www").contains("absolute host path"));
        assert!(e("www/x:/www").contains("absolute host path"));
        assert!(e("data:www").contains("absolute path in the container"));
        assert!(e("data:/d:rx").contains("neither ro nor rw"));
        assert!(e("/a").contains("two or three"));
        assert!(e("-x:/d").contains("volume name"));
        // The daemon's volume names have at least two characters.
        assert!(e("a:/d").contains("volume name"), "{}", e("a:/d"));
        assert_eq!(v("ab:/d").unwrap().source, VolumeSource::Named("ab".into()));
    }

    // r[verify workload.shape+2]
    #[test]
    fn byte_sizes_are_docker_binary_units() {
        let b = |t: &str| t.parse::<ByteSize>().map(|b| b.0);
        assert_eq!(b("512m"), Ok(512 << 20));
        assert_eq!(b("1g"), Ok(1 << 30));
        assert_eq!(b("1G"), Ok(1 << 30));
        assert_eq!(b("64k"), Ok(64 << 10));
        assert_eq!(b("100b"), Ok(100));
        assert_eq!(b("100"), Ok(100));
        for bad in ["", "m", "-1m", "99999999999g"] {
            assert!(b(bad).is_err(), "{bad:?}");
        }
        assert_eq!(ByteSize(512 << 20).to_string(), "512m");
        assert_eq!(ByteSize(1536 << 20).to_string(), "1536m");
        assert_eq!(ByteSize(100).to_string(), "100b");
    }

    // r[verify workload.shape.bytes+2]
    #[test]
    fn byte_sizes_take_iec_and_si_spellings_all_as_dockers_binary_units() {
        let b = |t: &str| t.parse::<ByteSize>().map(|b| b.0);
        assert_eq!(b("512MiB"), Ok(512 << 20));
        assert_eq!(b("512MB"), Ok(512 << 20));
        assert_eq!(b("512 m"), Ok(512 << 20));
        assert_eq!(b("1GiB"), Ok(1 << 30));
        assert_eq!(b("1.5g"), Ok(1536 << 20));
        assert_eq!(b("2KiB"), Ok(2048));
        for bad in ["", "m", "-1m", "1x", "99999999999g", "1 2m"] {
            assert!(b(bad).is_err(), "{bad:?}");
        }
    }

    // r[verify workload.shape.bytes+2]
    #[test]
    fn a_rotation_size_is_read_as_docker_reads_it_and_always_sent_in_bytes() {
        let log = |size: &str| LogConfig {
            driver: DEFAULT_LOG_DRIVER.into(),
            options: Some(BTreeMap::from([("max-size".into(), size.into())])),
        };
        let sent = |size: &str| log(size).effective_options()["max-size"].clone();
        // json-file and local read max-size with decimal units: "10m" and "10MB" are the same
        // ten million bytes, and both are sent as that number.
        assert_eq!(sent("10m"), "10000000");
        assert_eq!(sent("10MB"), sent("10m"));
        assert_eq!(sent("10mb"), "10000000");
        assert_eq!(sent("1.5m"), "1500000");
        assert_eq!(sent("10k"), "10000");
        // An "i" means a power of 1024, which the daemon itself would misread.
        assert_eq!(sent("10MiB"), "10485760");
        assert!(log("10MiB").validate().is_ok());
        for bad in ["ten", "0", "0m", "1e3", "10 _m"] {
            assert!(log(bad).validate().is_err(), "{bad:?}");
        }
        // Another driver's options are its own.
        let other = LogConfig {
            driver: "syslog".into(),
            options: Some(BTreeMap::from([("max-size".into(), "10m".into())])),
        };
        assert_eq!(other.effective_options()["max-size"], "10m");
    }

    // r[verify workload.shape.bytes+2]
    #[test]
    fn only_a_number_and_a_unit_are_a_size() {
        // What parse-size alone would take: exponents, "e" as exa, stray spaces and underscores.
        for bad in [
            "1e3", "1e3m", "1e-3g", "1e", "512 _m", "512  m", "512 ", " 512", "1.m", ".5m",
            "1_000", "1 2m", "5mm", "1.5.2k", "+1k",
        ] {
            assert!(bad.parse::<ByteSize>().is_err(), "{bad:?}");
        }
    }

    proptest! {
        // r[verify workload.shape.bytes+2]
        #[test]
        fn a_byte_size_is_its_number_times_its_binary_unit_and_displays_back(
            n in 0u64..(1 << 20),
            unit in prop::sample::select(vec![
                ("", 1u64), ("b", 1), ("k", 1 << 10), ("KiB", 1 << 10), ("kB", 1 << 10),
                ("m", 1 << 20), ("MiB", 1 << 20), ("MB", 1 << 20), ("g", 1 << 30),
                ("GiB", 1 << 30), ("G", 1 << 30),
            ]),
            space in any::<bool>(),
        ) {
            let text = format!("{n}{}{}", if space && !unit.0.is_empty() { " " } else { "" }, unit.0);
            let parsed: ByteSize = text.parse().unwrap();
            prop_assert_eq!(parsed.0, n * unit.1);
            prop_assert_eq!(parsed.to_string().parse::<ByteSize>().unwrap(), parsed);
        }
    }

    /// The rule's shape, written apart from the code: `DIGITS[.DIGITS][ ]UNIT` with UNIT one of
    /// b, k, m, g, t, p alone, with `b` or with `ib` (any case), or none. Answers the digits
    /// without the dot, how many were after it, and the unit's multiple in the binary and in
    /// the decimal reading.
    fn oracle(text: &str) -> Option<(u128, u32, u128, u128)> {
        let end = text
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(text.len());
        let (number, mut unit) = text.split_at(end);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty()
            || number.contains('.') && fraction.is_empty()
            || !(whole.bytes().chain(fraction.bytes())).all(|b| b.is_ascii_digit())
        {
            return None;
        }
        if let Some(rest) = unit.strip_prefix(' ') {
            if rest.is_empty() {
                return None;
            }
            unit = rest;
        }
        let unit = unit.to_ascii_lowercase();
        if !unit.is_ascii() {
            return None;
        }
        let (prefix, suffix) = unit.split_at(unit.len().min(1));
        let power = match prefix {
            "" => 0,
            "b" if suffix.is_empty() => 0,
            "k" => 1,
            "m" => 2,
            "g" => 3,
            "t" => 4,
            "p" => 5,
            _ => return None,
        };
        let (binary, decimal) = match (power, suffix) {
            (0, "") => (1, 1),
            (_, "" | "b") => (1024u128.pow(power), 1000u128.pow(power)),
            (_, "ib") => (1024u128.pow(power), 1024u128.pow(power)),
            _ => return None,
        };
        let digits: u128 = format!("{whole}{fraction}").parse().ok()?;
        Some((digits, fraction.len() as u32, binary, decimal))
    }

    proptest! {
        // r[verify workload.shape.bytes+2]
        #[test]
        fn a_size_is_accepted_iff_it_has_the_rules_shape_and_is_its_number_times_its_unit(
            text in prop_oneof![
                "[0-9]{0,4}(\\.[0-9]{0,3})?[ _]{0,2}[bBkKmMgGtTpPeEiI]{0,3}[ 0-9e+-]{0,2}",
                any::<String>(),
            ],
        ) {
            let expected = oracle(&text);
            for (parsed, binary) in [(text.parse::<ByteSize>(), true), (ByteSize::parse_decimal(&text), false)] {
                match expected {
                    None => prop_assert!(parsed.is_err(), "{text:?} accepted: {parsed:?}"),
                    Some((digits, scale, bin, dec)) => {
                        let exact = digits * if binary { bin } else { dec };
                        let ten = 10u128.pow(scale);
                        match parsed {
                            // Fractions are taken to the nearest byte.
                            Ok(size) => prop_assert!(
                                (u128::from(size.0) * ten).abs_diff(exact) * 2 <= ten,
                                "{text:?}: {} for {exact}/{ten}", size.0
                            ),
                            // Only a size too large for the Engine API is refused.
                            Err(_) => prop_assert!(exact / ten >= (1u128 << 63) - 1, "{text:?} refused"),
                        }
                    }
                }
            }
        }
    }

    // r[verify workload.health+2]
    // r[verify workload.health.probe]
    #[test]
    fn a_node_probe_is_http_or_tcp_and_exactly_one_kind_of_check_is_given() {
        let h = |json: &str| serde_json::from_str::<HealthCheck>(json).unwrap();
        let http = h(r#"{"http":{"port":8080,"path":"/healthz"},"interval":"2s"}"#);
        assert_eq!(http.problem(), None);
        assert_eq!(
            http.node_probe(),
            Some(NodeProbe::Http(&HttpProbe {
                port: 8080,
                path: "/healthz".into()
            }))
        );
        assert_eq!(
            http.test(),
            ["NONE"],
            "the daemon's check is off beside the node's"
        );
        let root = h(r#"{"http":{"port":80}}"#);
        assert_eq!(root.http.as_ref().map(|p| p.path.as_str()), Some("/"));
        let tcp = h(r#"{"tcp":{"port":5432}}"#);
        assert_eq!(tcp.problem(), None);
        assert_eq!(
            tcp.node_probe(),
            Some(NodeProbe::Tcp(&TcpProbe { port: 5432 }))
        );
        assert_eq!(tcp.test(), ["NONE"]);
        assert_eq!(h(r#"{"cmd":["true"]}"#).node_probe(), None);
        // Every pair of kinds is refused, naming both.
        let kinds = [
            ("cmd", r#""cmd":["true"]"#),
            ("shell", r#""shell":"true""#),
            ("http", r#""http":{"port":80}"#),
            ("tcp", r#""tcp":{"port":80}"#),
            ("disable", r#""disable":true"#),
        ];
        for (i, (a, ja)) in kinds.iter().enumerate() {
            assert_eq!(h(&format!("{{{ja}}}")).problem(), None, "{a} alone");
            for (b, jb) in &kinds[i + 1..] {
                let problem = h(&format!("{{{ja},{jb}}}")).problem().unwrap_or_default();
                assert!(
                    problem.contains(a) && problem.contains(b),
                    "{a} with {b}: {problem:?}"
                );
            }
        }
        for bad in [
            r#"{"http":{"port":0}}"#,
            r#"{"tcp":{"port":0}}"#,
            r#"{"http":{"port":80,"path":"healthz"}}"#,
            r#"{"http":{"port":80,"path":"/a b"}}"#,
            r#"{"http":{"port":80,"path":"/#frag"}}"#,
            r#"{"http":{"port":80,"path":""}}"#,
        ] {
            assert!(h(bad).problem().is_some(), "{bad}");
        }
        for unreadable in [
            r#"{"http":{"port":65536}}"#,
            r#"{"http":{"path":"/"}}"#,
            r#"{"tcp":{"port":80,"path":"/"}}"#,
        ] {
            assert!(
                serde_json::from_str::<HealthCheck>(unreadable).is_err(),
                "{unreadable}"
            );
        }
        assert_eq!(
            h(r#"{"http":{"port":80,"path":"/ready?full=1"}}"#).problem(),
            None
        );
    }

    // r[verify workload.shape+2]
    #[test]
    fn cpus_are_nano_cpus() {
        assert_eq!(Cpus::from_cpus(1.5), Ok(Cpus(1_500_000_000)));
        assert_eq!(Cpus::from_cpus(0.25).unwrap().as_cpus(), 0.25);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1025.0, 1e-12, 0.009] {
            assert!(Cpus::from_cpus(bad).is_err(), "{bad}");
        }
        // The daemon's smallest quota: a hundredth of a CPU.
        assert_eq!(Cpus::from_cpus(0.01), Ok(Cpus(10_000_000)));
        let c: Cpus = serde_json::from_str("2").unwrap();
        assert_eq!(c, Cpus(2_000_000_000));
    }

    // r[verify workload.shape.log]
    #[test]
    fn json_file_rotates_by_default_and_given_options_replace_the_default() {
        let default = LogConfig::default();
        assert_eq!(default.driver, "json-file");
        assert_eq!(
            default.effective_options(),
            BTreeMap::from([
                ("max-file".to_owned(), "3".to_owned()),
                ("max-size".to_owned(), "10m".to_owned())
            ])
        );
        let local: LogConfig = serde_json::from_str(r#"{"driver":"local"}"#).unwrap();
        assert!(local.effective_options().is_empty());
        let big: LogConfig = serde_json::from_str(r#"{"options":{"max-size":"50m"}}"#).unwrap();
        assert_eq!(big.driver, "json-file");
        assert_eq!(
            big.effective_options(),
            BTreeMap::from([("max-size".to_owned(), "50000000".to_owned())])
        );
    }

    // r[verify workload.health+2]
    #[test]
    fn a_health_check_is_dockers_with_its_defaults_and_its_limits() {
        let h = |json: &str| serde_json::from_str::<HealthCheck>(json).unwrap();
        let d = h("{}");
        assert_eq!(d, HealthCheck::default());
        assert_eq!(d.test(), Vec::<String>::new(), "the image's own test");
        assert_eq!(d.problem(), None);
        let exec = h(r#"{"cmd":["wget","-q","http://127.0.0.1/"],"interval":"2s","retries":2}"#);
        assert_eq!(exec.test(), ["CMD", "wget", "-q", "http://127.0.0.1/"]);
        assert_eq!(exec.interval, Duration::from_secs(2));
        assert_eq!(exec.timeout, DEFAULT_HEALTH_INTERVAL);
        assert_eq!(
            h(r#"{"shell":"nc -z 127.0.0.1 80"}"#).test(),
            ["CMD-SHELL", "nc -z 127.0.0.1 80"]
        );
        assert_eq!(h(r#"{"disable":true}"#).test(), ["NONE"]);
        for bad in [
            r#"{"cmd":["a"],"shell":"b"}"#,
            r#"{"disable":true,"shell":"b"}"#,
            r#"{"cmd":[""]}"#,
            r#"{"shell":" "}"#,
            r#"{"interval":"0s"}"#,
            r#"{"timeout":"0s"}"#,
            r#"{"retries":0}"#,
            r#"{"retries":101}"#,
            r#"{"start_period":"50m","interval":"5m","timeout":"1m","retries":2}"#,
        ] {
            assert!(h(bad).problem().is_some(), "{bad}");
        }
        // At the limit exactly: accepted.
        assert_eq!(
            h(r#"{"start_period":"40m","interval":"5m","timeout":"5m","retries":2}"#).problem(),
            None
        );
    }

    // r[verify workload.shape.env-file]
    #[test]
    fn an_env_file_is_key_value_lines_with_comments_and_a_bad_line_is_named() {
        let vars =
            parse_env_file("# the app\n\nA=1\n  B=two words # not a comment\nC=\nD=x=y\nA=again\n")
                .unwrap();
        assert_eq!(vars["A"], "again");
        assert_eq!(vars["B"], "two words # not a comment");
        assert_eq!(vars["C"], "");
        assert_eq!(vars["D"], "x=y");
        assert_eq!(vars.len(), 4);
        let e = parse_env_file("A=1\n\nJUSTAKEY\n").unwrap_err();
        assert_eq!(e.line, 3);
        // The line may be a secret pasted without its key: it is never echoed.
        assert_eq!(e.to_string(), "line 3: not KEY=VALUE");
        let e = parse_env_file("=x\n").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.message.contains("not an environment variable name"));
        // A bad name is named, its value never.
        let e = parse_env_file("BAD KEY=hunter2\n").unwrap_err();
        assert_eq!(e.message, "\"BAD KEY\" is not an environment variable name");
        // A file saved with a UTF-8 byte order mark: the first key is still the key.
        let vars = parse_env_file("\u{feff}DB_PASSWORD=x\nB=1\n").unwrap();
        assert_eq!(vars.keys().collect::<Vec<_>>(), ["B", "DB_PASSWORD"]);
    }

    proptest! {
        // r[verify workload.shape.env-file]
        #[test]
        fn an_env_file_error_never_shows_a_value(
            key in "[A-Z_]{1,8}",
            value in "[a-z0-9]{12,20}",
            bad in prop_oneof![Just("{value}"), Just("{key} {value}"), Just("{key}={value}\n{value}")],
        ) {
            let text = bad.replace("{key}", &key).replace("{value}", &value);
            if let Err(e) = parse_env_file(&text) {
                prop_assert!(!e.to_string().contains(&value), "{}", e);
            }
        }
    }

    proptest! {
        // r[verify workload.health.probe]
        // A path the validation accepts is one the probe can send as it is: starting with /,
        // a request target hyper builds, the same path on the wire.
        #[test]
        fn an_accepted_probe_path_is_the_request_target_the_probe_sends(
            path in prop_oneof![
                "/[a-zA-Z0-9._~%/?=&-]{0,20}",
                "[ -~]{0,20}",
                any::<String>(),
            ],
        ) {
            let check = HealthCheck {
                http: Some(HttpProbe { port: 8080, path: path.clone() }),
                ..HealthCheck::default()
            };
            if check.problem().is_none() {
                prop_assert!(path.starts_with('/'));
                let request = hyper::Request::get(path.as_str()).body(());
                prop_assert!(request.is_ok(), "{path:?}");
                let uri = request.unwrap().uri().clone();
                prop_assert_eq!(uri.path_and_query().map(|p| p.as_str()), Some(path.as_str()));
            } else {
                let request = hyper::Request::get(path.as_str()).body(());
                let sent = request.ok().and_then(|r| r.uri().path_and_query().map(|p| p.as_str().to_owned()));
                prop_assert!(
                    !path.starts_with('/') || sent.as_deref() != Some(path.as_str()),
                    "{path:?} refused but sendable as it is"
                );
            }
        }
    }
}
