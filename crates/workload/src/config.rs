//! One `[[workload]]` of the node's configuration, and the module's own settings.
//!
//! The node owns the TOML file (and names file, line and column); this module owns what a workload
//! is, its defaults, and its validation, whose errors name the offending key.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::shape::{ByteSize, Cpus, HealthCheck, LogConfig, MIN_MEMORY, PortSpec, VolumeSpec};

use holdfast_retry::{CrashLoopDetector, Jitter, Policy};

use holdfast_retry::duration_text;

/// The default minimum run time: a start counts as a success only once it has lasted this long.
pub const DEFAULT_MIN_RUN: Duration = Duration::from_secs(10);
/// The default time a container gets to stop (SIGTERM, then SIGKILL), as `docker stop` gives.
pub const DEFAULT_STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest minimum run time accepted: an attempt is held in flight for that long, and the
/// restart gate's stale timeout is set above it.
pub const MAX_MIN_RUN: Duration = Duration::from_secs(3600);
/// The longest stop timeout accepted.
pub const MAX_STOP_TIMEOUT: Duration = Duration::from_secs(600);

/// When a workload's container is started again after it exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RestartPolicy {
    /// After every exit (the default).
    #[default]
    Always,
    /// After an exit with a non-zero code, or one before the minimum run time; a run that
    /// lasted and exited 0 has completed and stays stopped.
    OnFailure,
    /// Never: the first exit leaves the workload stopped, and its state says so.
    Never,
}

/// One `[[workload]]`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadConfig {
    /// Unique on the node; the container carries it as the `holdfast.workload` label.
    pub name: String,
    /// The image reference (kept present by the pull module).
    pub image: String,
    /// The command (argv); empty: the image's own.
    #[serde(default)]
    pub command: Vec<String>,
    /// Environment variables of the container.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// When the container is started again after it exited.
    #[serde(default)]
    pub restart: RestartPolicy,
    /// How long a start must last to count as a success ("10s").
    #[serde(default = "default_min_run", with = "serde_text")]
    pub min_run: Duration,
    /// How long the container gets to stop before it is killed ("10s"); the daemon counts whole
    /// seconds, so a fraction is rounded up (`"500ms"` waits 1 s; only `"0s"` kills at once).
    #[serde(default = "default_stop_timeout", with = "serde_text")]
    pub stop_timeout: Duration,
    /// Published ports (`"8080:80"`, `"127.0.0.1:8443:443/tcp"`, `"5353:53/udp"`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<PortSpec>,
    /// Bind mounts (`"/host:/ctr[:ro]"`) and named volumes (`"name:/ctr[:ro]"`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeSpec>,
    /// An existing network the container joins instead of the default bridge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// The user the process runs as (`"1000"`, `"1000:1000"`, `"nobody"`); unset: the image's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The working directory (absolute); unset: the image's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// A file of `KEY=VALUE` lines merged under `env` by [`WorkloadConfig::load_env_file`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_file: Option<PathBuf>,
    /// Labels of the container (none under `holdfast.`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The memory limit (`"512m"`); unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<ByteSize>,
    /// The CPU quota in CPUs (`1.5`); unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<Cpus>,
    /// The most processes the container may hold; unset: the daemon's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids_limit: Option<i64>,
    /// Mount the container's root filesystem read-only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
    /// Capabilities added.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cap_add: Vec<String>,
    /// Capabilities dropped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cap_drop: Vec<String>,
    /// Run an init process as PID 1 (reaps zombies, forwards signals).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub init: bool,
    /// The log driver and its options (default: `json-file`, 10m × 3).
    #[serde(default, skip_serializing_if = "LogConfig::is_default")]
    pub log: LogConfig,
    /// The health check (unset: the image's own, if it has one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthCheck>,
    /// Workloads that must be ready before this one is created.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// Certificates of the node's issuance mounted read-only at `/run/holdfast/certs/NAME/`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub certificates: Vec<crate::certs::CertificateMount>,
    /// What the container is told when one of its certificates is renewed (unset: nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_cert_renew: Option<crate::certs::CertRenew>,
    /// The tag is checked against the registry before each creation of the container
    /// (`pull_policy = "always"`). Holdfast's own ([`HOLDFAST_ONLY`]): not in the spec hash.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pull_always: bool,
}

/// `Duration` fields written as holdfast-retry's duration text (`"10s"`, `"250ms"`, `"5m"`).
pub(crate) mod serde_text {
    use std::time::Duration;

    use holdfast_retry::duration_text;

    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&duration_text::format(*d))
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = <String as serde::Deserialize>::deserialize(d)?;
        duration_text::parse(&text).map_err(serde::de::Error::custom)
    }
}

fn default_min_run() -> Duration {
    DEFAULT_MIN_RUN
}

fn default_stop_timeout() -> Duration {
    DEFAULT_STOP_TIMEOUT
}

/// A workload setting that cannot work; `key` names it as the config file spells it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct WorkloadConfigError {
    /// The key, e.g. `workload[web].min_run`.
    pub key: String,
    /// What is wrong with it.
    pub message: String,
}

impl WorkloadConfig {
    /// A workload with the defaults: restart always, minimum run 10 s, stop timeout 10 s.
    pub fn new(name: impl Into<String>, image: impl Into<String>) -> Self {
        WorkloadConfig {
            name: name.into(),
            image: image.into(),
            command: Vec::new(),
            env: BTreeMap::new(),
            restart: RestartPolicy::default(),
            min_run: DEFAULT_MIN_RUN,
            stop_timeout: DEFAULT_STOP_TIMEOUT,
            ports: Vec::new(),
            volumes: Vec::new(),
            network: None,
            user: None,
            workdir: None,
            env_file: None,
            labels: BTreeMap::new(),
            memory: None,
            cpus: None,
            pids_limit: None,
            read_only: false,
            cap_add: Vec::new(),
            cap_drop: Vec::new(),
            init: false,
            log: LogConfig::default(),
            health: None,
            depends_on: Vec::new(),
            certificates: Vec::new(),
            on_cert_renew: None,
            pull_always: false,
        }
    }

    // r[impl workload.shape.env-file]
    /// Reads `env_file` (when set) and merges its variables under `env`: a variable `env` sets
    /// wins. The error names the file and the line.
    pub fn load_env_file(&mut self) -> Result<(), WorkloadConfigError> {
        let Some(path) = &self.env_file else {
            return Ok(());
        };
        let err = |message: String| WorkloadConfigError {
            key: format!("workload[{}].env_file", self.name),
            message,
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| err(format!("cannot read {}: {e}", path.display())))?;
        let vars = crate::shape::parse_env_file(&text)
            .map_err(|e| err(format!("{}:{}: {}", path.display(), e.line, e.message)))?;
        for (k, v) in vars {
            self.env.entry(k).or_insert(v);
        }
        Ok(())
    }

    // r[impl workload.config+3]
    /// Checks every field; the error names the first bad key.
    pub fn validate(&self) -> Result<(), WorkloadConfigError> {
        let err = |field: &str, message: String| WorkloadConfigError {
            key: if field == "name" {
                "workload.name".to_owned()
            } else {
                format!("workload[{}].{field}", self.name)
            },
            message,
        };
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 63
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !name_ok {
            return Err(err(
                "name",
                format!(
                    "{:?} must be 1 to 63 characters of letters, digits, '-', '_' or '.'",
                    self.name
                ),
            ));
        }
        // Read as the pull reads it, so a reference accepted here is one it can pull.
        if let Err(not_a_reference) = holdfast_pull::reference::parse(&self.image) {
            return Err(err("image", not_a_reference.to_string()));
        }
        for key in self.env.keys() {
            if key.is_empty() || key.contains('=') || key.contains('\0') {
                return Err(err(
                    "env",
                    format!("{key:?} is not an environment variable name"),
                ));
            }
        }
        if self.min_run.is_zero() || self.min_run > MAX_MIN_RUN {
            return Err(err(
                "min_run",
                format!(
                    "must be between 1ms and {}",
                    duration_text::format(MAX_MIN_RUN)
                ),
            ));
        }
        self.validate_shape(&err)?;
        if self.stop_timeout > MAX_STOP_TIMEOUT {
            return Err(err(
                "stop_timeout",
                format!(
                    "must be at most {}",
                    duration_text::format(MAX_STOP_TIMEOUT)
                ),
            ));
        }
        Ok(())
    }

    // r[impl workload.shape+2]
    /// The container's shape: what no single value's parser can see.
    fn validate_shape(
        &self,
        err: &dyn Fn(&str, String) -> WorkloadConfigError,
    ) -> Result<(), WorkloadConfigError> {
        for (i, p) in self.ports.iter().enumerate() {
            if let Some(q) = self.ports[..i].iter().find(|q| p.clashes_with(q)) {
                return Err(err(
                    "ports",
                    format!("{p} publishes a host port {q} already takes"),
                ));
            }
        }
        let mut targets = std::collections::BTreeSet::new();
        for v in &self.volumes {
            if !targets.insert(v.target.clone()) {
                return Err(err("volumes", format!("{} is mounted twice", v.target)));
            }
        }
        self.validate_certificates(&mut targets, err)?;
        if let Some(network) = &self.network {
            if !crate::shape::network_name_ok(network) {
                return Err(err("network", format!("{network:?} is not a network name")));
            }
        }
        if let Some(user) = &self.user {
            if user.is_empty() || user.contains(char::is_whitespace) {
                return Err(err("user", format!("{user:?} is not a user")));
            }
        }
        if let Some(workdir) = &self.workdir {
            if !workdir.starts_with('/') {
                return Err(err(
                    "workdir",
                    format!("{workdir:?} is not an absolute path"),
                ));
            }
        }
        for key in self.labels.keys() {
            if key.is_empty() || key.starts_with("holdfast.") {
                return Err(err(
                    "labels",
                    format!("{key:?}: empty, or under the reserved \"holdfast.\" prefix"),
                ));
            }
        }
        if let Some(memory) = self.memory {
            if memory.0 < MIN_MEMORY {
                return Err(err(
                    "memory",
                    format!("{memory} is below the daemon's minimum of 6m"),
                ));
            }
        }
        if self.pids_limit.is_some_and(|n| n < 1) {
            return Err(err("pids_limit", "must be at least 1".into()));
        }
        for (field, caps) in [("cap_add", &self.cap_add), ("cap_drop", &self.cap_drop)] {
            if let Some(cap) = caps.iter().find(|c| !crate::shape::capability_ok(c)) {
                return Err(err(
                    field,
                    format!("{cap:?} is not a capability name such as \"NET_ADMIN\" or \"ALL\""),
                ));
            }
        }
        if let Some(problem) = self.health.as_ref().and_then(HealthCheck::problem) {
            return Err(err("health", problem));
        }
        // r[impl workload.health.probe]
        // Every probe would fail, so the container would be replaced for ever.
        if self.network.as_deref() == Some("none")
            && self
                .health
                .as_ref()
                .is_some_and(|h| h.node_probe().is_some())
        {
            return Err(err(
                "health",
                "the node cannot probe a container on network \"none\" (it has no address): \
                 give cmd or shell, or another network"
                    .into(),
            ));
        }
        if self.log.driver.is_empty() || self.log.driver.contains(char::is_whitespace) {
            return Err(err(
                "log",
                format!("{:?} is not a log driver", self.log.driver),
            ));
        }
        self.log.validate().map_err(|e| err("log", e.to_string()))?;
        Ok(())
    }

    // r[impl workload.certs+2]
    // r[impl workload.certs.renew+2]
    /// The certificates: each named once, mounted where no volume is, and `on_cert_renew` only
    /// with a certificate to be renewed.
    fn validate_certificates(
        &self,
        targets: &mut std::collections::BTreeSet<String>,
        err: &dyn Fn(&str, String) -> WorkloadConfigError,
    ) -> Result<(), WorkloadConfigError> {
        for c in &self.certificates {
            if let Some(problem) = c.problem() {
                return Err(err("certificates", problem));
            }
            if !targets.insert(c.target()) {
                return Err(err(
                    "certificates",
                    format!("{} is named twice or mounted by a volume too", c.target()),
                ));
            }
        }
        if self.on_cert_renew.is_some() && self.certificates.is_empty() {
            return Err(err(
                "on_cert_renew",
                "names no certificate to be renewed: set `certificates` too".into(),
            ));
        }
        Ok(())
    }

    // r[impl workload.replace+2]
    /// The hash of what the container is made from, carried as the `holdfast.spec` label: a
    /// container whose label differs is replaced. Every key is in it except those in
    /// [`HOLDFAST_ONLY`], which holdfast alone acts on, so a key added later is covered unless it
    /// is listed there. Stable across processes and builds: FNV-1a over a canonical encoding of
    /// the config's serialized form (object keys sorted, whatever serde_json's map keeps).
    pub fn spec_hash(&self) -> String {
        let mut value = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        if let Some(map) = value.as_object_mut() {
            for key in HOLDFAST_ONLY {
                map.remove(key);
            }
        }
        let mut h = Fnv(0xcbf2_9ce4_8422_2325);
        h.value(&value);
        format!("{:016x}", h.0)
    }

    // r[impl workload.replace+2]
    /// The spec hash the release before the container's shape keys gave this workload's
    /// container (FNV-1a over image, command and environment), while the config sets none of the
    /// keys added since (`None` once it sets one: such a container must change). A running
    /// container labelled with it is the same container and is adopted, not replaced, so an
    /// upgrade does not destroy every container's writable layer.
    pub fn legacy_spec_hash(&self) -> Option<String> {
        let legacy = WorkloadConfig {
            command: self.command.clone(),
            env: self.env.clone(),
            restart: self.restart,
            min_run: self.min_run,
            stop_timeout: self.stop_timeout,
            env_file: self.env_file.clone(),
            depends_on: self.depends_on.clone(),
            on_cert_renew: self.on_cert_renew.clone(),
            pull_always: self.pull_always,
            ..WorkloadConfig::new(self.name.clone(), self.image.clone())
        };
        if *self != legacy {
            return None;
        }
        let mut h = Fnv(0xcbf2_9ce4_8422_2325);
        h.field(self.image.as_bytes());
        h.field(&(self.command.len() as u64).to_le_bytes());
        for arg in &self.command {
            h.field(arg.as_bytes());
        }
        h.field(&(self.env.len() as u64).to_le_bytes());
        for (k, v) in &self.env {
            h.field(k.as_bytes());
            h.field(v.as_bytes());
        }
        Some(format!("{:016x}", h.0))
    }
}

/// The keys of a `[[workload]]` that shape no container (left out of the spec hash): the name is
/// the label, the env file's variables are in `env`.
pub const HOLDFAST_ONLY: [&str; 8] = [
    "name",
    "restart",
    "min_run",
    "stop_timeout",
    "env_file",
    "depends_on",
    "on_cert_renew",
    "pull_always",
];

/// FNV-1a, 64-bit, each field prefixed with its length so no two specs collide by concatenation.
struct Fnv(u64);

impl Fnv {
    fn field(&mut self, bytes: &[u8]) {
        for b in (bytes.len() as u64).to_le_bytes().iter().chain(bytes) {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// A tag byte per kind, then the content; objects in sorted key order.
    fn value(&mut self, value: &serde_json::Value) {
        use serde_json::Value;
        match value {
            Value::Null => self.field(b"n"),
            Value::Bool(b) => self.field(if *b { b"t" } else { b"f" }),
            Value::Number(n) => {
                self.field(b"#");
                self.field(n.to_string().as_bytes());
            }
            Value::String(s) => {
                self.field(b"s");
                self.field(s.as_bytes());
            }
            Value::Array(items) => {
                self.field(b"[");
                self.field(&(items.len() as u64).to_le_bytes());
                for item in items {
                    self.value(item);
                }
            }
            Value::Object(map) => {
                self.field(b"{");
                self.field(&(map.len() as u64).to_le_bytes());
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                for key in keys {
                    self.field(key.as_bytes());
                    if let Some(v) = map.get(key) {
                        self.value(v);
                    }
                }
            }
        }
    }
}

/// Checks a whole list of workloads: each one, that names are unique, and their dependencies.
pub fn validate_all(workloads: &[WorkloadConfig]) -> Result<(), WorkloadConfigError> {
    let mut seen = std::collections::BTreeSet::new();
    for w in workloads {
        w.validate()?;
        if !seen.insert(w.name.as_str()) {
            return Err(WorkloadConfigError {
                key: "workload.name".to_owned(),
                message: format!("{:?} is configured twice", w.name),
            });
        }
    }
    validate_dependencies(workloads)
}

// r[impl workload.depends-on]
/// Every `depends_on` names another configured workload and no chain of them comes back: the
/// error is the first workload (by name) on a cycle, naming the cycle.
pub fn validate_dependencies(workloads: &[WorkloadConfig]) -> Result<(), WorkloadConfigError> {
    let graph: BTreeMap<&str, &[String]> = workloads
        .iter()
        .map(|w| (w.name.as_str(), w.depends_on.as_slice()))
        .collect();
    let err = |name: &str, message: String| WorkloadConfigError {
        key: format!("workload[{name}].depends_on"),
        message,
    };
    for (name, deps) in &graph {
        for dep in *deps {
            if dep == name {
                return Err(err(name, format!("{name:?} depends on itself")));
            }
            if !graph.contains_key(dep.as_str()) {
                return Err(err(name, format!("{dep:?} is not a configured workload")));
            }
        }
    }
    // Depth-first, each workload entered once; a workload met again while on the path closes
    // a cycle.
    let mut done = std::collections::BTreeSet::new();
    for start in graph.keys() {
        let mut path: Vec<&str> = Vec::new();
        if let Some(cycle) = find_cycle(&graph, start, &mut path, &mut done) {
            return Err(err(
                &cycle[0],
                format!("dependency cycle: {}", cycle.join(" → ")),
            ));
        }
    }
    Ok(())
}

fn find_cycle<'a>(
    graph: &BTreeMap<&'a str, &'a [String]>,
    node: &'a str,
    path: &mut Vec<&'a str>,
    done: &mut std::collections::BTreeSet<&'a str>,
) -> Option<Vec<String>> {
    if let Some(at) = path.iter().position(|n| *n == node) {
        let mut cycle: Vec<String> = path[at..].iter().map(|n| (*n).to_owned()).collect();
        cycle.push(node.to_owned());
        return Some(cycle);
    }
    if done.contains(node) {
        return None;
    }
    path.push(node);
    for dep in graph.get(node).copied().unwrap_or_default() {
        if let Some(cycle) = find_cycle(graph, dep, path, done) {
            return Some(cycle);
        }
    }
    path.pop();
    done.insert(node);
    None
}

/// The module's settings (not per workload).
#[derive(Debug, Clone)]
pub struct ModuleConfig {
    /// Restart pacing, per workload (default: base 10 s, cap 300 s, as the kubelet's
    /// CrashLoopBackOff; escalation after 5 failures).
    pub restart_policy: Policy,
    /// Repeated early exits that count as a crash loop (default 3 within 60 s).
    pub crash_loop: CrashLoopDetector,
    /// Pacing of the daemon's event stream reconnects (default base 1 s, cap 30 s).
    pub stream_policy: Policy,
    /// Stop the containers when holdfast stops (default false: they keep running, as the
    /// kubelet leaves them, and the next start adopts them).
    pub stop_on_exit: bool,
    /// How many lines of a container's log a crash-loop fault carries.
    pub log_tail_lines: usize,
    /// When set, this module's containers also carry `holdfast.owner=OWNER` and only containers
    /// with that label are listed, followed, adopted or removed: several holdfast instances (or
    /// test runs) can share one daemon without touching each other's containers.
    pub owner: Option<String>,
    /// The node's own network ([`NODE_NETWORK`] unless an embedder names another): a workload
    /// whose `network` names it has it created when missing (see [`ModuleConfig::node_network_name`]).
    pub node_network: String,
}

impl ModuleConfig {
    // r[impl workload.network+3]
    /// The daemon's name of the node's network: [`NODE_NETWORK`] with an owner is
    /// `holdfast-OWNER`, so nodes sharing one daemon under different owners never share a network
    /// (nor answer each other's workload names); any other name as it is.
    pub fn node_network_name(&self) -> String {
        match &self.owner {
            Some(owner) if self.node_network == NODE_NETWORK => format!("{NODE_NETWORK}-{owner}"),
            _ => self.node_network.clone(),
        }
    }

    // r[impl workload.network+3]
    /// `spec` with the node's network under its daemon name ([`Self::node_network_name`]) when it
    /// joins it, and whether it does; other networks are left as written.
    pub fn on_node_network(
        &self,
        mut spec: crate::reconciler::ContainerSpec,
    ) -> (crate::reconciler::ContainerSpec, bool) {
        let joins = spec.shape.network.as_deref() == Some(self.node_network.as_str());
        if joins {
            spec.shape.network = Some(self.node_network_name());
        }
        (spec, joins)
    }
}

/// The name of the node's own network, created when a workload joins it and it is missing.
pub const NODE_NETWORK: &str = "holdfast";

impl ModuleConfig {
    /// The defaults, jitter seeded with `seed` (the node identity's seed for "workload").
    pub fn new(seed: u64) -> Self {
        // The schedule's defaults are valid by construction; fall back to the crate default
        // rather than panic if that ever changed.
        let restart_policy = restart_policy(seed);
        let stream_policy = Policy::builder()
            .base(Duration::from_secs(1))
            .cap(Duration::from_secs(30))
            .escalate_after(5)
            .seed(seed ^ 0x5354_5245_414d)
            .build()
            .unwrap_or_default();
        ModuleConfig {
            restart_policy,
            crash_loop: CrashLoopDetector::default(),
            stream_policy,
            stop_on_exit: false,
            log_tail_lines: 20,
            owner: None,
            node_network: NODE_NETWORK.to_owned(),
        }
    }
}

// r[impl workload.restart.backoff+2]
/// The workloads' restart gate: 10 s doubling to 300 s, escalated after 5 failures, and an
/// attempt in flight judged stale only well after the longest minimum run.
fn restart_policy(seed: u64) -> Policy {
    Policy::builder()
        .base(Duration::from_secs(10))
        .cap(Duration::from_secs(300))
        .escalate_after(5)
        .jitter(Jitter::Additive)
        .stale_after(MAX_MIN_RUN + Duration::from_secs(600))
        .seed(seed)
        .build()
        .unwrap_or_default()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    // r[verify workload.config+3]
    #[test]
    fn a_workload_from_toml_like_serde_with_defaults_and_text_durations() {
        let w: WorkloadConfig = serde_json::from_str(
            r#"{"name":"web","image":"busybox","command":["sleep","60"],
                "env":{"A":"1"},"restart":"on-failure","min_run":"2s"}"#,
        )
        .unwrap();
        assert_eq!(w.restart, RestartPolicy::OnFailure);
        assert_eq!(w.min_run, Duration::from_secs(2));
        assert_eq!(w.stop_timeout, DEFAULT_STOP_TIMEOUT);
        assert!(w.validate().is_ok());
        let back = serde_json::to_value(&w).unwrap();
        assert_eq!(back["min_run"], "2s");
        assert_eq!(back["stop_timeout"], "10s");
        let d: WorkloadConfig = serde_json::from_str(r#"{"name":"a","image":"b"}"#).unwrap();
        assert_eq!(d, WorkloadConfig::new("a", "b"));
        assert!(
            serde_json::from_str::<WorkloadConfig>(r#"{"name":"a","image":"b","min_run":"10"}"#)
                .is_err()
        );
        assert!(
            serde_json::from_str::<WorkloadConfig>(r#"{"name":"a","image":"b","bogus":1}"#)
                .is_err()
        );
    }

    // r[verify workload.config+3]
    #[test]
    fn durations_are_text_with_a_unit() {
        let parse = |text: &str| {
            serde_json::from_str::<WorkloadConfig>(&format!(
                r#"{{"name":"a","image":"b","min_run":"{text}"}}"#
            ))
            .map(|w| w.min_run)
        };
        assert_eq!(parse("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse("1h").unwrap(), Duration::from_secs(3600));
        // The one duration parser (holdfast-retry's) allows a space between number and unit.
        assert_eq!(parse("10 s").unwrap(), Duration::from_secs(10));
        for bad in ["10", "s", "", "1m30s", "10 x", "-1s"] {
            assert!(parse(bad).is_err(), "{bad:?} must be rejected");
        }
        let mut w = WorkloadConfig::new("a", "b");
        w.min_run = Duration::from_millis(1500);
        assert_eq!(serde_json::to_value(&w).unwrap()["min_run"], "1500ms");
    }

    // r[verify workload.config+3]
    #[test]
    fn validation_names_the_key() {
        let key = |w: WorkloadConfig| w.validate().unwrap_err().key;
        assert_eq!(key(WorkloadConfig::new("", "b")), "workload.name");
        assert_eq!(key(WorkloadConfig::new("a b", "b")), "workload.name");
        assert_eq!(key(WorkloadConfig::new("web", " ")), "workload[web].image");
        let mut w = WorkloadConfig::new("web", "busybox");
        w.min_run = Duration::ZERO;
        assert_eq!(key(w.clone()), "workload[web].min_run");
        w.min_run = Duration::from_secs(7200);
        assert_eq!(
            w.validate().unwrap_err().to_string().split(':').next(),
            Some("workload[web].min_run")
        );
        let mut w = WorkloadConfig::new("web", "busybox");
        w.stop_timeout = Duration::from_secs(3600);
        assert_eq!(key(w), "workload[web].stop_timeout");
        let mut w = WorkloadConfig::new("web", "busybox");
        w.env.insert("A=B".into(), "x".into());
        assert_eq!(key(w), "workload[web].env");
        let twice = [WorkloadConfig::new("a", "b"), WorkloadConfig::new("a", "c")];
        assert!(validate_all(&twice).unwrap_err().message.contains("twice"));
    }

    // r[verify workload.replace+2]
    #[test]
    fn the_spec_hash_covers_what_the_container_is_made_of_and_nothing_else() {
        let base = WorkloadConfig::new("web", "busybox");
        let h = base.spec_hash();
        assert_eq!(h, base.clone().spec_hash());
        // Pinned: the label must mean the same after a rebuild or the node would replace
        // every container on upgrade. (Changed once, with workload.replace+2: a container made
        // before, labelled with the legacy hash, is adopted while no shape key is set.)
        assert_eq!(h, "29bea12ecbc86e97");
        assert_eq!(h, WorkloadConfig::new("other", "busybox").spec_hash());
        let mut c = base.clone();
        c.command = vec!["sleep".into(), "1".into()];
        assert_ne!(c.spec_hash(), h);
        let mut c2 = base.clone();
        c2.command = vec!["sleep 1".into()];
        assert_ne!(c2.spec_hash(), c.spec_hash());
        let mut e = base.clone();
        e.env.insert("A".into(), "1".into());
        assert_ne!(e.spec_hash(), h);
        let mut i = base.clone();
        i.image = "busybox:2".into();
        assert_ne!(i.spec_hash(), h);
        let mut holdfast_only = base.clone();
        holdfast_only.restart = RestartPolicy::Never;
        holdfast_only.min_run = Duration::from_secs(1);
        holdfast_only.stop_timeout = Duration::from_secs(1);
        holdfast_only.pull_always = true;
        assert_eq!(holdfast_only.spec_hash(), h);
    }

    // r[verify workload.config+3]
    #[test]
    fn the_limits_are_inclusive_and_an_image_reference_has_no_space() {
        let key = |w: &WorkloadConfig| w.validate().map_err(|e| e.key);
        let bad = |field: &str| Err(format!("workload[web].{field}"));
        assert_eq!(key(&WorkloadConfig::new("web", "busy box")), bad("image"));
        // A URL is not a reference (its scheme would be read as the registry).
        assert_eq!(
            key(&WorkloadConfig::new("web", "http://reg.example/app:1")),
            bad("image")
        );
        assert_eq!(
            key(&WorkloadConfig::new("web", "reg.example:5000/app:1")),
            Ok(())
        );
        // What Docker's reference grammar refuses is refused here, saying why, not at the pull.
        for image in [
            "Nginx",
            "Registry/app",
            "app:",
            "app@sha256:abc",
            "a//b",
            "",
            "[::1/app",
        ] {
            assert_eq!(
                key(&WorkloadConfig::new("web", image)),
                bad("image"),
                "{image}"
            );
        }
        let why = WorkloadConfig::new("web", "Nginx:1")
            .validate()
            .unwrap_err();
        assert!(
            why.message.contains("repository name must be lowercase"),
            "{why:?}"
        );
        for image in [
            "busybox",
            "org/app:1.2-rc_3",
            "localhost/app",
            "[::1]:5000/app",
            "[fe80::1]/app:tag",
            "ghcr.io/o/a@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ] {
            assert_eq!(key(&WorkloadConfig::new("web", image)), Ok(()), "{image}");
        }
        let mut w = WorkloadConfig::new("web", "busybox");
        w.min_run = MAX_MIN_RUN;
        w.stop_timeout = MAX_STOP_TIMEOUT;
        assert_eq!(key(&w), Ok(()));
        w.min_run = MAX_MIN_RUN + Duration::from_millis(1);
        assert_eq!(key(&w), bad("min_run"));
        w.min_run = MAX_MIN_RUN;
        w.stop_timeout = MAX_STOP_TIMEOUT + Duration::from_millis(1);
        assert_eq!(key(&w), bad("stop_timeout"));
    }

    /// A workload with every key set away from its default.
    pub(crate) fn full() -> WorkloadConfig {
        let mut w = WorkloadConfig::new("web", "busybox:1.36");
        w.command = vec!["httpd".into(), "-f".into()];
        w.env.insert("A".into(), "1".into());
        w.restart = RestartPolicy::OnFailure;
        w.min_run = Duration::from_secs(2);
        w.stop_timeout = Duration::from_secs(3);
        w.ports = vec![
            "8080:80".parse().unwrap(),
            "127.0.0.1:8443:443/tcp".parse().unwrap(),
            "5353:53/udp".parse().unwrap(),
        ];
        w.volumes = vec![
            "/srv/www:/www:ro".parse().unwrap(),
            "data:/var/lib/data".parse().unwrap(),
        ];
        w.network = Some("backend".into());
        w.user = Some("1000:1000".into());
        w.workdir = Some("/www".into());
        w.env_file = Some("/etc/web.env".into());
        w.labels.insert("team".into(), "edge".into());
        w.memory = Some("512m".parse().unwrap());
        w.cpus = Some(Cpus::from_cpus(1.5).unwrap());
        w.pids_limit = Some(100);
        w.read_only = true;
        w.cap_add = vec!["NET_BIND_SERVICE".into()];
        w.cap_drop = vec!["ALL".into()];
        w.init = true;
        w.log = LogConfig {
            driver: "json-file".into(),
            options: Some(BTreeMap::from([("max-size".into(), "50m".into())])),
        };
        w.depends_on = vec!["db".into()];
        w.pull_always = true;
        w.health = Some(HealthCheck {
            cmd: vec![
                "wget".into(),
                "-q".into(),
                "-O-".into(),
                "http://127.0.0.1/".into(),
            ],
            interval: Duration::from_secs(5),
            timeout: Duration::from_secs(2),
            start_period: Duration::from_secs(10),
            retries: 3,
            ..HealthCheck::default()
        });
        w
    }

    // r[verify workload.replace+2]
    #[test]
    fn every_key_but_holdfasts_own_is_in_the_spec_identity() {
        let full = full();
        assert!(full.validate().is_ok(), "{:?}", full.validate());
        let json = serde_json::to_value(&full).unwrap();
        let keys: Vec<String> = json.as_object().unwrap().keys().cloned().collect();
        // The full example sets every key (a key added later must be added there).
        assert_eq!(keys.len(), 25, "{keys:?}");
        for key in keys {
            // The key back at its default (absent from the TOML).
            let mut without = json.clone();
            without.as_object_mut().unwrap().remove(&key);
            if key == "name" || key == "image" {
                without[&key] = "other".into();
            }
            let changed: WorkloadConfig = serde_json::from_value(without).unwrap();
            let same = changed.spec_hash() == full.spec_hash();
            assert_eq!(
                same,
                HOLDFAST_ONLY.contains(&key.as_str()),
                "{key}: in the spec identity unless holdfast alone acts on it"
            );
        }
    }

    // r[verify workload.replace+2]
    #[test]
    fn the_hash_before_the_shape_keys_is_kept_while_none_of_them_is_set() {
        // Pinned: what the release before the shape keys labelled these containers with.
        let base = WorkloadConfig::new("web", "busybox");
        assert_eq!(base.legacy_spec_hash().as_deref(), Some("bd7fc74e4b946348"));
        let mut w = base.clone();
        w.command = vec!["sleep".into(), "1".into()];
        w.env.insert("A".into(), "1".into());
        assert_eq!(w.legacy_spec_hash().as_deref(), Some("f4515083fb70e02f"));
        // Holdfast's own keys do not matter.
        w.restart = RestartPolicy::Never;
        w.min_run = Duration::from_secs(1);
        w.stop_timeout = Duration::from_secs(1);
        w.env_file = Some("/etc/web.env".into());
        w.depends_on = vec!["db".into()];
        assert_eq!(w.legacy_spec_hash().as_deref(), Some("f4515083fb70e02f"));
        // Any key added since, set: no legacy container is the same.
        let full = full();
        assert_eq!(full.legacy_spec_hash(), None);
        let json = serde_json::to_value(&full).unwrap();
        for key in json.as_object().unwrap().keys() {
            if ["name", "image", "command", "env"].contains(&key.as_str())
                || HOLDFAST_ONLY.contains(&key.as_str())
            {
                continue;
            }
            let mut only = serde_json::to_value(&base).unwrap();
            only[key] = json[key].clone();
            let set: WorkloadConfig = serde_json::from_value(only).unwrap();
            assert_eq!(set.legacy_spec_hash(), None, "{key}");
        }
        // And the current hash of a workload that sets every key is pinned too.
        assert_eq!(full.spec_hash(), "3d8a8941aa077858");
    }

    fn shaped() -> impl proptest::strategy::Strategy<Value = WorkloadConfig> {
        use proptest::prelude::*;
        let port = prop_oneof![Just("8080:80"), Just("127.0.0.1:81:80"), Just("53:53/udp")]
            .prop_map(|p| p.parse::<PortSpec>().unwrap());
        let volume = prop_oneof![Just("/srv:/srv"), Just("/srv:/srv:ro"), Just("data:/d")]
            .prop_map(|v| v.parse::<VolumeSpec>().unwrap());
        let word = || proptest::option::of(prop_oneof![Just("a".to_owned()), Just("b".to_owned())]);
        (
            (
                prop_oneof![Just("busybox"), Just("nginx")],
                proptest::collection::vec(port, 0..2),
                proptest::collection::vec(volume, 0..2),
                word(),
                word(),
                proptest::option::of(prop_oneof![Just("/a"), Just("/b")]),
                proptest::option::of(prop_oneof![Just(6u64 << 20), Just(1 << 30)]),
                proptest::option::of(prop_oneof![Just(1u64), Just(1_500_000_000)]),
            ),
            (
                proptest::option::of(1i64..3),
                any::<bool>(),
                any::<bool>(),
                proptest::collection::vec(prop_oneof![Just("ALL"), Just("NET_ADMIN")], 0..2),
                proptest::collection::vec(prop_oneof![Just("ALL"), Just("CHOWN")], 0..2),
                proptest::option::of(prop_oneof![Just("x"), Just("y")]),
                proptest::option::of(prop_oneof![Just("local"), Just("json-file")]),
                (any::<bool>(), any::<u8>()),
            ),
        )
            .prop_map(
                |(
                    (image, ports, volumes, network, user, workdir, memory, cpus),
                    (pids, read_only, init, cap_add, cap_drop, label, driver, (rest, seed)),
                )| {
                    let mut w = WorkloadConfig::new("web", image);
                    w.ports = ports;
                    w.volumes = volumes;
                    w.network = network;
                    w.user = user;
                    w.workdir = workdir.map(str::to_owned);
                    w.memory = memory.map(ByteSize);
                    w.cpus = cpus.map(Cpus);
                    w.pids_limit = pids;
                    w.read_only = read_only;
                    w.init = init;
                    w.cap_add = cap_add.into_iter().map(str::to_owned).collect();
                    w.cap_drop = cap_drop.into_iter().map(str::to_owned).collect();
                    if let Some(l) = label {
                        w.labels.insert("k".into(), l.into());
                    }
                    if let Some(d) = driver {
                        w.log.driver = d.into();
                    }
                    // Holdfast's own keys vary freely: they never change the identity.
                    if rest {
                        w.restart = RestartPolicy::Never;
                    }
                    w.min_run = Duration::from_millis(u64::from(seed) + 1);
                    w
                },
            )
    }

    /// What the spec hash must see: everything but holdfast's own keys.
    fn identity(w: &WorkloadConfig) -> WorkloadConfig {
        let mut w = w.clone();
        w.restart = RestartPolicy::default();
        w.min_run = DEFAULT_MIN_RUN;
        w.stop_timeout = DEFAULT_STOP_TIMEOUT;
        w.env_file = None;
        w
    }

    proptest::proptest! {
        // r[verify workload.replace+2]
        #[test]
        fn two_workloads_share_a_spec_hash_exactly_when_their_containers_would_be_the_same(
            a in shaped(),
            b in shaped(),
        ) {
            proptest::prop_assert_eq!(a.spec_hash() == b.spec_hash(), identity(&a) == identity(&b));
        }
    }

    // r[verify workload.shape+2]
    #[test]
    fn the_shape_is_validated_and_the_error_names_the_key() {
        let key = |f: &dyn Fn(&mut WorkloadConfig)| {
            let mut w = WorkloadConfig::new("web", "busybox");
            f(&mut w);
            w.validate().map_err(|e| e.key)
        };
        let bad = |field: &str| Err(format!("workload[web].{field}"));
        assert_eq!(key(&|_| {}), Ok(()));
        assert_eq!(
            key(&|w| w.ports = vec!["80:80".parse().unwrap(), "80:81".parse().unwrap()]),
            bad("ports")
        );
        // The same host port over another protocol or another address is not a clash...
        assert_eq!(
            key(&|w| {
                w.ports = vec![
                    "80:80".parse().unwrap(),
                    "80:80/udp".parse().unwrap(),
                    "127.0.0.1:81:80".parse().unwrap(),
                    "127.0.0.2:81:80".parse().unwrap(),
                ]
            }),
            Ok(())
        );
        // ... but every address (none written, 0.0.0.0 or [::]) takes the port on each of them.
        for (a, b) in [
            ("80:80", "127.0.0.1:80:80"),
            ("127.0.0.1:80:80", "80:80"),
            ("0.0.0.0:80:80", "127.0.0.1:80:81"),
            ("[::]:80:80", "[::1]:80:81"),
            ("0.0.0.0:80:80", "80:81"),
            ("[::]:53:53/udp", "127.0.0.1:53:53/udp"),
        ] {
            assert_eq!(
                key(&|w| w.ports = vec![a.parse().unwrap(), b.parse().unwrap()]),
                bad("ports"),
                "{a} with {b}"
            );
        }
        assert_eq!(
            key(&|w| w.volumes = vec!["ab:/d".parse().unwrap(), "/x:/d".parse().unwrap()]),
            bad("volumes")
        );
        assert_eq!(key(&|w| w.network = Some("a b".into())), bad("network"));
        assert_eq!(key(&|w| w.user = Some(String::new())), bad("user"));
        assert_eq!(key(&|w| w.workdir = Some("www".into())), bad("workdir"));
        assert_eq!(
            key(&|w| {
                w.labels.insert("holdfast.workload".into(), "x".into());
            }),
            bad("labels")
        );
        assert_eq!(key(&|w| w.memory = Some(ByteSize(1 << 20))), bad("memory"));
        assert_eq!(key(&|w| w.memory = Some(ByteSize(MIN_MEMORY))), Ok(()));
        assert_eq!(key(&|w| w.pids_limit = Some(0)), bad("pids_limit"));
        assert_eq!(
            key(&|w| w.cap_add = vec!["net admin".into()]),
            bad("cap_add")
        );
        assert_eq!(key(&|w| w.cap_drop = vec![String::new()]), bad("cap_drop"));
        assert_eq!(key(&|w| w.log.driver = String::new()), bad("log"));
    }

    // r[verify workload.shape.env-file]
    #[test]
    fn the_env_file_is_merged_under_env_and_a_bad_line_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("web.env");
        std::fs::write(&path, "# web\nA=from-file\nB=2\n").unwrap();
        let mut w = WorkloadConfig::new("web", "busybox");
        w.env.insert("A".into(), "from-env".into());
        w.env_file = Some(path.clone());
        let before = w.spec_hash();
        w.load_env_file().unwrap();
        assert_eq!(w.env["A"], "from-env");
        assert_eq!(w.env["B"], "2");
        // The file's variables are in the identity through `env`.
        assert_ne!(w.spec_hash(), before);
        std::fs::write(&path, "A=1\nnot a line\n").unwrap();
        let e = WorkloadConfig {
            env_file: Some(path.clone()),
            ..WorkloadConfig::new("web", "busybox")
        }
        .load_env_file()
        .unwrap_err();
        assert_eq!(e.key, "workload[web].env_file");
        assert_eq!(e.message, format!("{}:2: not KEY=VALUE", path.display()));
        let e = WorkloadConfig {
            env_file: Some(dir.path().join("missing.env")),
            ..WorkloadConfig::new("web", "busybox")
        }
        .load_env_file()
        .unwrap_err();
        assert!(e.message.starts_with("cannot read"), "{}", e.message);
    }

    // r[verify workload.depends-on]
    #[test]
    fn dependencies_name_configured_workloads_and_a_cycle_is_named() {
        let w = |name: &str, deps: &[&str]| WorkloadConfig {
            depends_on: deps.iter().map(|d| (*d).to_owned()).collect(),
            ..WorkloadConfig::new(name, "busybox")
        };
        assert_eq!(
            validate_all(&[
                w("web", &["db", "cache"]),
                w("db", &[]),
                w("cache", &["db"])
            ]),
            Ok(())
        );
        let e = validate_all(&[w("web", &["db"])]).unwrap_err();
        assert_eq!(e.key, "workload[web].depends_on");
        assert_eq!(e.message, "\"db\" is not a configured workload");
        let e = validate_all(&[w("web", &["web"])]).unwrap_err();
        assert_eq!(e.message, "\"web\" depends on itself");
        let e = validate_all(&[
            w("a", &["b"]),
            w("b", &["c"]),
            w("c", &["a"]),
            w("d", &["a"]),
        ])
        .unwrap_err();
        assert_eq!(e.key, "workload[a].depends_on");
        assert_eq!(e.message, "dependency cycle: a → b → c → a");
        let e = validate_all(&[w("x", &[]), w("web", &["db"]), w("db", &["web"])]).unwrap_err();
        assert_eq!(e.message, "dependency cycle: db → web → db");
    }

    // r[verify workload.restart.backoff+2]
    #[test]
    fn the_default_restart_gate_is_ten_seconds_doubling_to_five_minutes() {
        let p = ModuleConfig::new(7).restart_policy;
        assert_eq!(p.base(), Duration::from_secs(10));
        assert_eq!(p.cap(), Duration::from_secs(300));
        assert_eq!(p.seed(), 7);
        // A start is judged by its run, which may have to last up to the longest minimum run:
        // the gate must not call it stale before.
        assert!(p.stale_after() > MAX_MIN_RUN);
    }
}
