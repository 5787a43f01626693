//! One `[[workload]]` of the node's configuration, and the module's own settings.
//!
//! The node owns the TOML file (and names file, line and column); this module owns what a workload
//! is, its defaults, and its validation, whose errors name the offending key.

use std::collections::BTreeMap;
use std::time::Duration;

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
}

/// `Duration` fields written as holdfast-retry's duration text (`"10s"`, `"250ms"`, `"5m"`).
mod serde_text {
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
        }
    }

    // r[impl workload.config]
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
        if self.image.trim().is_empty() || self.image.contains(char::is_whitespace) {
            return Err(err(
                "image",
                format!("{:?} is not an image reference", self.image),
            ));
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

    // r[impl workload.replace]
    /// The hash of what the container is made from (image, command, environment), carried as the
    /// `holdfast.spec` label: a container whose label differs is replaced. The restart policy,
    /// minimum run and stop timeout are holdfast's own and change no container. Stable across
    /// processes and builds (FNV-1a over a length-prefixed encoding).
    pub fn spec_hash(&self) -> String {
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
        format!("{:016x}", h.0)
    }
}

/// FNV-1a, 64-bit, each field prefixed with its length so no two specs collide by concatenation.
struct Fnv(u64);

impl Fnv {
    fn field(&mut self, bytes: &[u8]) {
        for b in (bytes.len() as u64).to_le_bytes().iter().chain(bytes) {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// Checks a whole list of workloads: each one, and that names are unique.
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
    Ok(())
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
}

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
        }
    }
}

// r[impl workload.restart.backoff]
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
mod tests {
    use super::*;

    // r[verify workload.config]
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

    // r[verify workload.config]
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
        for bad in ["10", "s", "", "1m30s", "10 s", "-1s"] {
            assert!(parse(bad).is_err(), "{bad:?} must be rejected");
        }
        let mut w = WorkloadConfig::new("a", "b");
        w.min_run = Duration::from_millis(1500);
        assert_eq!(serde_json::to_value(&w).unwrap()["min_run"], "1500ms");
    }

    // r[verify workload.config]
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

    // r[verify workload.replace]
    #[test]
    fn the_spec_hash_covers_what_the_container_is_made_of_and_nothing_else() {
        let base = WorkloadConfig::new("web", "busybox");
        let h = base.spec_hash();
        assert_eq!(h, base.clone().spec_hash());
        // Pinned: the label must mean the same after a rebuild or the node would replace
        // every container on upgrade.
        assert_eq!(h, "bd7fc74e4b946348");
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
        assert_eq!(holdfast_only.spec_hash(), h);
    }

    // r[verify workload.config]
    #[test]
    fn the_limits_are_inclusive_and_an_image_reference_has_no_space() {
        let key = |w: &WorkloadConfig| w.validate().map_err(|e| e.key);
        let bad = |field: &str| Err(format!("workload[web].{field}"));
        assert_eq!(key(&WorkloadConfig::new("web", "busy box")), bad("image"));
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

    // r[verify workload.restart.backoff]
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
