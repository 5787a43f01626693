//! The high layer: the validated schema converted, once, into what each module runs with. Every
//! conversion here reads a config [`Config::parse`] has already validated, so what could fail was
//! refused there, at its `FILE:LINE:COL`.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use holdfast_pull::{DEFAULT_PULL_STALE_AFTER, PullConfig, PullConfigError};
use holdfast_retry::Policy;
use toml::Spanned;

use crate::duration::ConfigDuration;

use super::schema::{AdminSection, Config, PullPolicy, PullSection, SuperviseSection, Workload};

impl AdminSection {
    /// `allowed_hosts`, parsed (entries [`Config::parse`] refused never get here).
    pub fn allowed_hosts(&self) -> Vec<AllowedHost> {
        self.allowed_hosts
            .iter()
            .filter_map(|entry| AllowedHost::parse(entry.get_ref()).ok())
            .collect()
    }
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

    // i[impl node.workloads.shape+2]
    /// The entry as holdfast-workload's config, its env file not yet read.
    pub fn shaped_config(&self) -> holdfast_workload::WorkloadConfig {
        let mut w = holdfast_workload::WorkloadConfig::new(
            self.name.get_ref().clone(),
            self.image.get_ref().clone(),
        );
        // i[impl node.pull.policy+2]
        w.pull_always = self
            .pull_policy
            .as_ref()
            .is_some_and(|p| *p.get_ref() == PullPolicy::Always);
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
        w.certificates = self.certificate_mounts.clone();
        w.on_cert_renew = self.on_cert_renew.as_ref().map(|r| r.get_ref().clone());
        w
    }
}

impl Config {
    // i[impl node.workloads.certificates]
    // r[impl workload.certs+2]
    /// Every certificate of `[issuance]` by its first name, with the directory its files are
    /// deployed in (`None`: it has no deploy).
    pub fn certificate_dirs(&self) -> BTreeMap<String, Option<PathBuf>> {
        let Some(issuance) = &self.issuance else {
            return BTreeMap::new();
        };
        issuance
            .get_ref()
            .planned()
            .into_iter()
            .filter_map(|c| {
                let name = c.names.first()?.clone();
                let dir = c
                    .deploy
                    .map(|(deploy, shared)| deploy.dir_of(&name, shared));
                Some((name, dir))
            })
            .collect()
    }

    /// Resolves each workload's `certificates` to the mounts of their deploy directories (a name
    /// with none is left out: validation refuses it).
    pub(super) fn resolve_certificates(&mut self) {
        let dirs = self.certificate_dirs();
        for w in &mut self.workloads {
            w.certificate_mounts = w
                .certificates
                .iter()
                .flat_map(|c| c.get_ref().iter())
                .filter_map(|name| {
                    let dir = dirs.get(name)?.clone()?;
                    Some(holdfast_workload::CertificateMount {
                        name: name.clone(),
                        dir,
                    })
                })
                .collect();
        }
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
pub(super) fn short_token(len: usize) -> String {
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
    let text = super::token::read_secret_file(path)?;
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

impl Config {
    // i[impl node.pull.credentials]
    /// Where the pull module finds registry credentials: `pull.docker_config` (else the Docker
    /// CLI's default), `[pull.auth."REGISTRY"]` for its registry, and each workload's
    /// `credentials_file` for its image.
    pub fn registry_auth(&self) -> holdfast_pull::RegistryAuth {
        let mut auth = holdfast_pull::RegistryAuth::from_env();
        if let Some(path) = &self.pull.docker_config {
            auth = auth.with_docker_config(path.get_ref());
        }
        // i[impl node.pull.auth]
        for (name, login) in &self.pull.auth {
            auth = auth.with_login(
                name,
                login.username.get_ref().clone(),
                login.password_file.get_ref(),
                format!("[pull.auth.{name:?}]"),
            );
        }
        for w in &self.workloads {
            if let Some(path) = &w.credentials_file {
                auth = auth.with_file_for(w.image.get_ref().clone(), path.get_ref());
            }
        }
        auth
    }

    // i[impl node.pull.policy+2]
    /// The images whose tags the pull module follows (`pull_policy = "digest"`), and how often.
    pub fn tag_checks(&self) -> TagChecks {
        TagChecks {
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

    /// holdfast-pull's configuration, seeded (validated when the config was parsed).
    pub fn pull_config(&self, seed: u64) -> holdfast_pull::PullConfig {
        pull_config(
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

// r[impl node.reload.diff+4]
/// What the pull module is built from, converted. Built here, once, both for the module (`run`
/// composes it from this) and for the reload's comparison, so that nothing reaches one and not
/// the other.
#[derive(Debug, Clone, PartialEq)]
pub struct PullInputs {
    /// (workload name, image).
    pub workloads: Vec<(String, String)>,
    /// `pull.docker_host`.
    pub docker_host: Option<String>,
    /// holdfast-pull's config, seeded.
    pub config: PullConfig,
    /// Where registry credentials come from.
    pub auth: holdfast_pull::RegistryAuth,
    /// The images whose tags are followed.
    pub tag_checks: TagChecks,
    /// Image collection's policy and interval (`None`: off).
    pub gc: Option<(holdfast_pull::GcPolicy, Duration)>,
}

/// The workload module's settings besides its workloads (what it cannot take live), built here
/// once for the module and for the reload's comparison alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadSettings {
    /// `[workloads] stop_on_exit`.
    pub stop_on_exit: bool,
    /// `[workloads] owner`.
    pub owner: Option<String>,
    /// `pull.enabled`.
    pub pull_enabled: bool,
    /// `pull.docker_host`.
    pub docker_host: Option<String>,
}

impl Config {
    /// What the pull module is built from, seeded with `seed`.
    pub fn pull_inputs(&self, seed: u64) -> PullInputs {
        PullInputs {
            workloads: self
                .workloads
                .iter()
                .map(|w| (w.name.get_ref().clone(), w.image.get_ref().clone()))
                .collect(),
            docker_host: self.pull.docker_host.clone(),
            config: self.pull_config(seed),
            auth: self.registry_auth(),
            tag_checks: self.tag_checks(),
            gc: self.image_gc(),
        }
    }

    /// The workload module's settings.
    pub fn workload_settings(&self) -> WorkloadSettings {
        WorkloadSettings {
            stop_on_exit: self.workloads_module.stop_on_exit,
            owner: self.workloads_module.owner.clone(),
            pull_enabled: self.pull.enabled,
            docker_host: self.pull.docker_host.clone(),
        }
    }
}

/// The three settings of a retry policy, borrowed from a section.
pub(super) struct PolicySection<'a> {
    pub(super) base: &'a Spanned<ConfigDuration>,
    pub(super) cap: &'a Spanned<ConfigDuration>,
    pub(super) escalate_after: &'a Spanned<u32>,
}

impl PullSection {
    pub(super) fn policy_section(&self) -> PolicySection<'_> {
        PolicySection {
            base: &self.base,
            cap: &self.cap,
            escalate_after: &self.escalate_after,
        }
    }
}

impl SuperviseSection {
    pub(super) fn policy_section(&self) -> PolicySection<'_> {
        PolicySection {
            base: &self.base,
            cap: &self.cap,
            escalate_after: &self.escalate_after,
        }
    }
}

impl PolicySection<'_> {
    /// The builder of the policy these settings describe.
    pub(super) fn builder(&self, seed: u64) -> holdfast_retry::PolicyBuilder {
        Policy::builder()
            .base(self.base.get_ref().get())
            .cap(self.cap.get_ref().get())
            .escalate_after(*self.escalate_after.get_ref())
            .seed(seed)
    }

    /// The validated policy (validation ran when the config was parsed).
    pub(super) fn policy(&self, seed: u64) -> Policy {
        self.builder(seed).build().unwrap_or_default()
    }
}

/// The longest DNS name (RFC 1035 §2.3.4, in its dotted text form).
pub(crate) const MAX_NAME_LEN: usize = 253;
/// The longest DNS label (RFC 1035 §2.3.4).
const MAX_LABEL_LEN: usize = 63;

/// One `admin.allowed_hosts` entry: an authority, besides the listener's own, that the TCP
/// listener answers for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowedHost {
    /// A DNS name, lower-cased (compared without regard to case).
    Name(String),
    /// An IP address.
    Ip(IpAddr),
}

impl AllowedHost {
    // i[impl node.admin.host+2]
    /// Parses an entry: a DNS name (letters, digits and hyphens in dot-separated labels, the
    /// last not all digits) or an IP address (an IPv6 one with or without brackets), without a
    /// port. The error says what is wrong.
    pub fn parse(entry: &str) -> Result<AllowedHost, String> {
        let bracketed = entry
            .strip_prefix('[')
            .and_then(|rest| rest.strip_suffix(']'));
        if let Some(inside) = bracketed {
            return match inside.parse::<std::net::Ipv6Addr>() {
                Ok(ip) => Ok(AllowedHost::Ip(IpAddr::V6(ip))),
                Err(_) => Err(format!("{entry:?} is not an IPv6 address")),
            };
        }
        if let Ok(ip) = entry.parse::<IpAddr>() {
            return Ok(AllowedHost::Ip(ip));
        }
        if let Some((host, port)) = entry.rsplit_once(':') {
            if !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && AllowedHost::parse(host).is_ok()
            {
                return Err(format!(
                    "{entry:?} must not carry a port: {host:?} is answered with the listener's \
                     port or none"
                ));
            }
        }
        if is_dns_name(entry) {
            return Ok(AllowedHost::Name(entry.to_ascii_lowercase()));
        }
        Err(format!(
            "{entry:?} is neither a DNS name (letters, digits and hyphens in dot-separated labels, \
             no wildcard) nor an IP address"
        ))
    }
}

/// Whether `name` is a DNS host name: labels of 1 to 63 letters, digits and hyphens, not
/// starting or ending with a hyphen, at most 253 characters in all, the last label not all
/// digits (that would be a malformed IPv4 address, such as `256.1.1.1`).
fn is_dns_name(name: &str) -> bool {
    let label_ok = |label: &str| {
        (1..=MAX_LABEL_LEN).contains(&label.len())
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    name.len() <= MAX_NAME_LEN
        && name.split('.').all(label_ok)
        && name
            .rsplit('.')
            .next()
            .is_some_and(|last| !last.bytes().all(|b| b.is_ascii_digit()))
}

/// holdfast-pull's configuration from the node's `[pull]` numbers: `policy`'s base, cap and
/// escalation threshold pace both images (whose attempts go stale only after
/// [`DEFAULT_PULL_STALE_AFTER`]) and the daemon; `seed` is the node's seed for "pull".
pub fn pull_config(
    policy: &Policy,
    stall_timeout: Duration,
    seed: u64,
) -> Result<PullConfig, PullConfigError> {
    let defaults = PullConfig::new(seed);
    let with = |stale_after: Duration| {
        Policy::builder()
            .base(policy.base())
            .cap(policy.cap())
            .escalate_after(policy.escalate_after())
            .stale_after(stale_after)
            .build()
            .map_err(|source| PullConfigError::Policy {
                which: "image_policy",
                source,
            })
    };
    PullConfig::builder(seed)
        .image_policy(with(DEFAULT_PULL_STALE_AFTER)?)
        .daemon_policy(with(defaults.daemon_policy().stale_after())?)
        .stall_timeout(stall_timeout)
        .build()
}

/// The images whose tags are followed (`pull_policy = "digest"`), and how often each is checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TagChecks {
    /// The image references to check, each with the workloads that follow it (those replaced,
    /// one at a time, when it moves; a workload using it with another policy is not).
    pub images: std::collections::BTreeMap<String, Vec<String>>,
    /// The interval between two checks of one.
    pub interval: Duration,
}
