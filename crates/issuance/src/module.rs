//! The module as the node runs it: `[issuance]` config, [`start`], and the handle it returns.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use holdfast_lifecycle::{BoxFuture, FaultBoard, StopError, StopRequest, Stopper};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::acme::{self, AcmeConfig, Eab};
use crate::decision::{IssuePolicy, IssuePolicyError};
use crate::deploy::{DeployConfig, DeployError};
use crate::dns01::{Challenge, Dns01, DnsProvider};
use crate::history::{HistoryDb, HistoryError};
use crate::hook::Hook;
use crate::issuer::{Hostname, Issuer, IssuerError, Outputs, WallClock};
use crate::local::{LocalEndpoint, LocalEndpointError, LocalProvider};
use crate::redirect::{Http01Other, OtherRequests};
use crate::responder::{Http01Responder, ResponderLimits, ResponderStats};
use crate::store::{CertStore, StoreError};
use crate::tls_alpn::{AlpnChallenges, AlpnLimits, AlpnStats, TlsAlpnResponder};
use holdfast_retry::PolicyConfig;

/// Which source serves a hostname.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// ACME (`[issuance.acme]`).
    Acme,
    /// The local provider (`[issuance.local]`).
    Local,
}

/// One `[[issuance.hostname]]`.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostnameConfig {
    /// The DNS name.
    pub name: String,
    /// Its source.
    pub source: SourceKind,
    /// The ACME challenge it answers: `"http-01"` (the default) or `"dns-01"` (through
    /// `[issuance.dns01]`; the only one a wildcard can use).
    #[serde(default)]
    pub challenge: Challenge,
    /// Its own deploy (files in `deploy.dir` itself), over `[issuance.deploy]`.
    #[serde(default)]
    pub deploy: Option<DeployConfig>,
    /// Its own `on_renew` command (argv, no shell), over `[issuance]`'s.
    #[serde(default)]
    pub on_renew: Option<Vec<String>>,
}

/// One `[[issuance.certificate]]`: one certificate for several names, issued in one attempt.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertificateConfig {
    /// The names it carries; the first is its key (its file, its row in `holdfast certs`, its
    /// attempt history and block).
    pub names: Vec<String>,
    /// Its source.
    pub source: SourceKind,
    /// The ACME challenge it answers: `"http-01"` (the default) or `"dns-01"` (through
    /// `[issuance.dns01]`; the only one a wildcard can use).
    #[serde(default)]
    pub challenge: Challenge,
    /// Its own deploy (files in `deploy.dir` itself), over `[issuance.deploy]`.
    #[serde(default)]
    pub deploy: Option<DeployConfig>,
    /// Its own `on_renew` command (argv, no shell), over `[issuance]`'s.
    #[serde(default)]
    pub on_renew: Option<Vec<String>>,
}

/// An entry of `[issuance]` that lists names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// `[[issuance.hostname]]` number `i` (one name).
    Hostname(usize),
    /// `[[issuance.certificate]]` number `i`.
    Certificate(usize),
}

/// Where one name is written: its entry and, in a certificate, its index in `names` (`None`: the
/// `names` list itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamePlace {
    /// The entry.
    pub entry: Entry,
    /// The index in the entry's `names`.
    pub name: Option<usize>,
}

impl NamePlace {
    /// The key under `[issuance]`: `hostname[0].name`, `certificate[1].names[2]`.
    pub fn key(&self) -> String {
        match (self.entry, self.name) {
            (Entry::Hostname(i), _) => format!("hostname[{i}].name"),
            (Entry::Certificate(i), Some(j)) => format!("certificate[{i}].names[{j}]"),
            (Entry::Certificate(i), None) => format!("certificate[{i}].names"),
        }
    }

    /// How another error refers to this place: the hostname entry, or the certificate's name.
    fn reference(&self) -> String {
        match self.entry {
            Entry::Hostname(i) => format!("issuance.hostname[{i}]"),
            Entry::Certificate(_) => format!("issuance.{}", self.key()),
        }
    }
}

/// Why a name of `[issuance]` is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Not a DNS name.
    #[error(transparent)]
    NotDnsName(crate::hostname::HostnameError),
    /// A certificate with no names.
    #[error("a certificate lists at least one name")]
    Empty,
    /// The name is written at an earlier place too (case-insensitively).
    #[error("{name:?} is listed more than once (also {})", first.reference())]
    Duplicate {
        /// The name as written here.
        name: String,
        /// Where it is written first.
        first: NamePlace,
    },
    /// A wildcard on an ACME certificate that is not on DNS-01: HTTP-01 cannot validate it.
    #[error(
        "{0:?} is a wildcard: a wildcard needs challenge = \"dns-01\" (HTTP-01 and TLS-ALPN-01 \
         cannot validate a wildcard); set it on this certificate with an [issuance.dns01] provider, list each name, \
         or use the local source"
    )]
    Wildcard(String),
}

/// One certificate as the module runs it, whichever entry wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedCertificate {
    /// The entry that wrote it.
    pub entry: Entry,
    /// Its names, the key first.
    pub names: Vec<String>,
    /// Its source.
    pub source: SourceKind,
    /// Its ACME challenge.
    pub challenge: Challenge,
    /// Its deploy, and whether it is the shared `[issuance.deploy]` (files in `DIR/NAME/`).
    pub deploy: Option<(DeployConfig, bool)>,
    /// Its `on_renew` command.
    pub on_renew: Option<Vec<String>>,
}

/// `[issuance.acme]`.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcmeSettings {
    /// The directory URL.
    pub directory: String,
    /// Contact URLs.
    #[serde(default)]
    pub contact: Vec<String>,
    /// External account binding.
    pub eab: Option<Eab>,
    /// A certificate profile to request.
    pub profile: Option<String>,
    /// A PEM root for the ACME server's TLS.
    pub ca_pem: Option<PathBuf>,
    /// Where the HTTP-01 responder listens (default `0.0.0.0:80`).
    #[serde(default = "default_http01_bind")]
    pub http01_bind: SocketAddr,
    /// The HTTP-01 responder's connection caps and timeouts (defaults in [`ResponderLimits`]).
    #[serde(default)]
    pub http01_limits: ResponderLimits,
    /// What the HTTP-01 responder answers to a request that is not a challenge: `"not_found"`
    /// (404, the default) or `"redirect"` (308 to https, for a configured name).
    #[serde(default)]
    pub http01_other: Http01Other,
    /// Where the TLS-ALPN-01 listener listens (default `0.0.0.0:443`), bound only when a
    /// certificate has `challenge = "tls-alpn-01"`.
    #[serde(default = "default_tls_alpn01_bind")]
    pub tls_alpn01_bind: SocketAddr,
    /// The TLS-ALPN-01 listener's connection caps and handshake timeout (defaults in
    /// [`AlpnLimits`]).
    #[serde(default)]
    pub tls_alpn01_limits: AlpnLimits,
}

fn default_http01_bind() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 80))
}

fn default_tls_alpn01_bind() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 443))
}

/// `[issuance.local]`.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalSettings {
    /// Where the provider listens.
    pub endpoint: LocalEndpoint,
}

/// Which DNS-01 provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dns01ProviderKind {
    /// RFC 2136 dynamic update with TSIG.
    Rfc2136,
    /// A command, as lego's exec provider.
    Exec,
}

/// How long the rfc2136 provider waits for the server's answer to one update.
const RFC2136_TIMEOUT: Duration = Duration::from_secs(10);

/// `[issuance.dns01]`: the provider of `challenge = "dns-01"` certificates.
// r[impl issue.dns01.rfc2136]
// r[impl issue.dns01.exec]
// r[impl issue.dns01.propagation]
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dns01Settings {
    /// `"rfc2136"` or `"exec"`.
    pub provider: Dns01ProviderKind,
    /// rfc2136: the primary server, `"IP:PORT"`.
    pub server: Option<SocketAddr>,
    /// rfc2136: the zone updated (every dns-01 name must be inside it).
    pub zone: Option<String>,
    /// rfc2136: the TSIG key's name.
    pub tsig_key_name: Option<String>,
    /// rfc2136: `"hmac-sha256"` (the default), `"hmac-sha384"` or `"hmac-sha512"`.
    #[serde(default)]
    pub tsig_algorithm: crate::rfc2136::TsigAlgo,
    /// rfc2136: a file holding the TSIG secret, base64 (read at start, never logged).
    pub tsig_secret_file: Option<PathBuf>,
    /// rfc2136: the records' TTL in seconds (default 60).
    #[serde(default = "default_dns_ttl")]
    pub ttl: u32,
    /// exec: the command (argv, no shell), run as `COMMAND... present|cleanup FQDN VALUE`.
    pub command: Option<Vec<String>>,
    /// exec: how long one run may take before it is killed (default `"60s"`, at most `"10m"`).
    #[serde(default, with = "holdfast_retry::duration_text::option")]
    pub command_timeout: Option<Duration>,
    /// Servers (`"IP:PORT"`) that must all answer the TXT value before the CA is told (default:
    /// rfc2136's `server`; required with exec).
    #[serde(default)]
    pub propagation_servers: Vec<SocketAddr>,
    /// How long to wait for a record to propagate (default `"120s"`).
    #[serde(default, with = "holdfast_retry::duration_text::option")]
    pub propagation_timeout: Option<Duration>,
    /// The time between two rounds of propagation queries (default `"2s"`).
    #[serde(default, with = "holdfast_retry::duration_text::option")]
    pub propagation_interval: Option<Duration>,
}

fn default_dns_ttl() -> u32 {
    60
}

impl Dns01Settings {
    /// The first setting that cannot work, with its key under `[issuance.dns01]`.
    // r[impl issue.dns01.rfc2136]
    // r[impl issue.dns01.exec]
    // r[impl issue.dns01.propagation]
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let zero = |d: Option<Duration>| d == Some(Duration::ZERO);
        if zero(self.propagation_timeout) {
            return Err(("propagation_timeout", "must be more than zero".into()));
        }
        if zero(self.propagation_interval) {
            return Err(("propagation_interval", "must be more than zero".into()));
        }
        match self.provider {
            Dns01ProviderKind::Rfc2136 => {
                let missing = |key| Err((key, "is required with provider = \"rfc2136\"".into()));
                if self.server.is_none() {
                    return missing("server");
                }
                let Some(zone) = &self.zone else {
                    return missing("zone");
                };
                if !crate::hostname::is_dns_name(zone.trim_end_matches('.'))
                    || zone.starts_with("*.")
                {
                    return Err(("zone", format!("{zone:?} is not a DNS name")));
                }
                let Some(key) = &self.tsig_key_name else {
                    return missing("tsig_key_name");
                };
                if !crate::hostname::is_dns_name(key.trim_end_matches('.')) {
                    return Err(("tsig_key_name", format!("{key:?} is not a DNS name")));
                }
                if self.tsig_secret_file.is_none() {
                    return missing("tsig_secret_file");
                }
                if self.ttl == 0 {
                    return Err(("ttl", "must be more than zero".into()));
                }
            }
            Dns01ProviderKind::Exec => {
                match self.command.as_ref().and_then(|c| c.first()) {
                    None => {
                        return Err((
                            "command",
                            "is required with provider = \"exec\": write [\"/path/to/program\", ...]"
                                .into(),
                        ));
                    }
                    Some(p) if p.is_empty() => {
                        return Err(("command", "the program is empty".into()));
                    }
                    Some(_) => {}
                }
                if zero(self.command_timeout) {
                    return Err(("command_timeout", "must be more than zero".into()));
                }
                if self
                    .command_timeout
                    .is_some_and(|t| t > crate::hook::MAX_TIMEOUT)
                {
                    return Err(("command_timeout", "must be at most 10m".into()));
                }
                if self.propagation_servers.is_empty() {
                    return Err((
                        "propagation_servers",
                        "is required with provider = \"exec\": the zone's authoritative servers, \
                         [\"IP:PORT\", ...]"
                            .into(),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Whether `name` (a certificate's name) is inside the rfc2136 zone (always, for exec).
    pub fn covers(&self, name: &str) -> bool {
        let (Dns01ProviderKind::Rfc2136, Some(zone)) = (self.provider, &self.zone) else {
            return true;
        };
        let zone = zone.trim_end_matches('.').to_ascii_lowercase();
        let name = name.strip_prefix("*.").unwrap_or(name).to_ascii_lowercase();
        name == zone || name.ends_with(&format!(".{zone}"))
    }

    /// The provider and its propagation check, the TSIG secret read from its file.
    pub fn build(&self) -> Result<Dns01, String> {
        let provider: Arc<dyn DnsProvider> = match self.provider {
            Dns01ProviderKind::Rfc2136 => {
                let (Some(server), Some(zone), Some(key), Some(secret)) = (
                    self.server,
                    &self.zone,
                    &self.tsig_key_name,
                    &self.tsig_secret_file,
                ) else {
                    return Err(self
                        .check()
                        .err()
                        .map_or_else(String::new, |(k, e)| format!("{k}: {e}")));
                };
                let secret = crate::rfc2136::read_secret(secret).map_err(|e| e.to_string())?;
                Arc::new(
                    crate::rfc2136::Rfc2136::new(crate::rfc2136::Rfc2136Config {
                        server,
                        zone: zone.clone(),
                        tsig_key_name: key.clone(),
                        tsig_algorithm: self.tsig_algorithm,
                        tsig_secret: secret,
                        ttl: self.ttl,
                        timeout: RFC2136_TIMEOUT,
                    })
                    .map_err(|e| e.to_string())?,
                )
            }
            Dns01ProviderKind::Exec => Arc::new(crate::dns_exec::ExecProvider::new(
                self.command.clone().unwrap_or_default(),
                self.command_timeout
                    .unwrap_or(crate::dns_exec::DEFAULT_COMMAND_TIMEOUT),
            )),
        };
        let servers = if self.propagation_servers.is_empty() {
            self.server.into_iter().collect()
        } else {
            self.propagation_servers.clone()
        };
        Ok(Dns01 {
            provider,
            propagation: Some(crate::propagation::Propagation {
                servers,
                timeout: self
                    .propagation_timeout
                    .unwrap_or(crate::propagation::DEFAULT_TIMEOUT),
                interval: self
                    .propagation_interval
                    .unwrap_or(crate::propagation::DEFAULT_INTERVAL),
                lookup: Arc::new(crate::propagation::HickoryLookup::default()),
            }),
            cleanups: crate::dns01::Cleanups::default(),
        })
    }
}

/// `[issuance]`.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuanceConfig {
    /// The hostnames: certificates with one name each.
    #[serde(default, rename = "hostname")]
    pub hostnames: Vec<HostnameConfig>,
    /// Certificates with one or more names each.
    #[serde(default, rename = "certificate")]
    pub certificates: Vec<CertificateConfig>,
    /// Copies of every certificate in `DIR/NAME/` for other services (none by default).
    #[serde(default)]
    pub deploy: Option<DeployConfig>,
    /// A command (argv, no shell) run after each new certificate of every certificate that has
    /// none of its own (none by default).
    #[serde(default)]
    pub on_renew: Option<Vec<String>>,
    /// How long one run of an `on_renew` command may take before it is killed (default `"60s"`,
    /// at most `"10m"`: a tick waits for its hooks).
    #[serde(default, with = "holdfast_retry::duration_text::option")]
    pub on_renew_timeout: Option<Duration>,
    /// The ACME source.
    pub acme: Option<AcmeSettings>,
    /// The local provider.
    pub local: Option<LocalSettings>,
    /// The DNS-01 provider, for certificates with `challenge = "dns-01"`.
    pub dns01: Option<Dns01Settings>,
    /// Time between decisions (default `"60s"`).
    #[serde(default, with = "holdfast_retry::duration_text::option")]
    pub tick: Option<Duration>,
    /// Time one attempt may take, end to end (default `"5m"`).
    #[serde(default, with = "holdfast_retry::duration_text::option")]
    pub attempt_timeout: Option<Duration>,
    /// Attempt rows kept per hostname (default 50).
    #[serde(default = "default_keep")]
    pub keep_attempts_per_host: usize,
    /// Pacing of failed attempts over [`IssuePolicy::standard`]'s (`base = "5m"`, `cap = "6h"`, …).
    #[serde(default)]
    pub pacing: PolicyConfig,
    /// Consecutive failures that block a hostname (default 6).
    pub block_after: Option<u32>,
    /// How long a block lasts (default `"6h"`, at most the pacing cap).
    #[serde(default, with = "holdfast_retry::duration_text::option")]
    pub block_for: Option<Duration>,
}

fn default_keep() -> usize {
    50
}

impl IssuanceConfig {
    /// The policy this config asks for, over the defaults, with the node's seed for this module.
    pub fn policy(&self, seed: u64) -> Result<IssuePolicy, StartError> {
        let defaults = IssuePolicy::standard(seed);
        let retry = self
            .pacing
            .build(&defaults.retry, seed)
            .map_err(|e| StartError::Config(format!("pacing.{e}")))?;
        Ok(IssuePolicy {
            retry,
            block_after: self.block_after.unwrap_or(defaults.block_after),
            block_for: self.block_for.unwrap_or(defaults.block_for),
        }
        .validate()?)
    }

    /// Every certificate: each `[[issuance.hostname]]` as a one-name certificate, then each
    /// `[[issuance.certificate]]`, so both take one path.
    // r[impl issue.certificates]
    pub fn planned(&self) -> Vec<PlannedCertificate> {
        let hostnames = self
            .hostnames
            .iter()
            .enumerate()
            .map(|(i, h)| PlannedCertificate {
                entry: Entry::Hostname(i),
                names: vec![h.name.clone()],
                source: h.source,
                challenge: h.challenge,
                deploy: self.deploy_of(h.deploy.as_ref()),
                on_renew: h.on_renew.clone().or_else(|| self.on_renew.clone()),
            });
        let certificates = self
            .certificates
            .iter()
            .enumerate()
            .map(|(i, c)| PlannedCertificate {
                entry: Entry::Certificate(i),
                names: c.names.clone(),
                source: c.source,
                challenge: c.challenge,
                deploy: self.deploy_of(c.deploy.as_ref()),
                on_renew: c.on_renew.clone().or_else(|| self.on_renew.clone()),
            });
        hostnames.chain(certificates).collect()
    }

    /// An entry's own deploy, else the shared one.
    fn deploy_of(&self, own: Option<&DeployConfig>) -> Option<(DeployConfig, bool)> {
        match own {
            Some(d) => Some((d.clone(), false)),
            None => self.deploy.clone().map(|d| (d, true)),
        }
    }

    /// The first `on_renew` that cannot run (an empty list or program), with its key under
    /// `[issuance]`, or an `on_renew_timeout` of zero or over ten minutes.
    // r[impl issue.on-renew]
    pub fn check_hooks(&self) -> Result<(), (String, &'static str)> {
        if self.on_renew_timeout == Some(Duration::ZERO) {
            return Err(("on_renew_timeout".into(), "must be more than zero"));
        }
        // A tick waits for its hooks: an unbounded one would stall every certificate.
        if self
            .on_renew_timeout
            .is_some_and(|t| t > crate::hook::MAX_TIMEOUT)
        {
            return Err(("on_renew_timeout".into(), "must be at most 10m"));
        }
        let shared = self.on_renew.iter().map(|h| ("on_renew".to_owned(), h));
        let hosts =
            self.hostnames.iter().enumerate().filter_map(|(i, h)| {
                Some((format!("hostname[{i}].on_renew"), h.on_renew.as_ref()?))
            });
        let certs = self.certificates.iter().enumerate().filter_map(|(i, c)| {
            Some((format!("certificate[{i}].on_renew"), c.on_renew.as_ref()?))
        });
        for (key, argv) in shared.chain(hosts).chain(certs) {
            match argv.first() {
                None => {
                    return Err((
                        key,
                        "names no program: write [\"/path/to/program\", \"arg\", ...]",
                    ));
                }
                Some(p) if p.is_empty() => return Err((key, "the program is empty")),
                Some(_) => {}
            }
        }
        Ok(())
    }

    fn on_renew_timeout(&self) -> Duration {
        self.on_renew_timeout
            .unwrap_or(crate::hook::DEFAULT_TIMEOUT)
    }

    /// The first deploy section that cannot work (a relative or unsafe directory, an owner or
    /// group that does not exist, a directory another certificate deploys to), with its key
    /// under `[issuance]`.
    // r[impl issue.deploy]
    pub fn check_deploys(&self) -> Result<(), (String, DeployError)> {
        let shared = self.deploy.iter().map(|d| ("deploy".to_owned(), d));
        let hosts = self
            .hostnames
            .iter()
            .enumerate()
            .filter_map(|(i, h)| Some((format!("hostname[{i}].deploy"), h.deploy.as_ref()?)));
        let certs =
            self.certificates.iter().enumerate().filter_map(|(i, c)| {
                Some((format!("certificate[{i}].deploy"), c.deploy.as_ref()?))
            });
        for (key, deploy) in shared.chain(hosts).chain(certs) {
            if let Err(e) = deploy.check() {
                let key = match e.key() {
                    Some(field) => format!("{key}.{field}"),
                    None => key,
                };
                return Err((key, e));
            }
        }
        // Every certificate's own directory, so no two write the same files.
        let mut seen: std::collections::HashMap<PathBuf, String> = Default::default();
        for cert in self.planned() {
            let (Some((deploy, shared)), Some(first)) = (&cert.deploy, cert.names.first()) else {
                continue;
            };
            let dir = deploy.dir_of(first, *shared);
            let key = match (*shared, cert.entry) {
                (true, _) => "deploy".to_owned(),
                (false, Entry::Hostname(i)) => format!("hostname[{i}].deploy"),
                (false, Entry::Certificate(i)) => format!("certificate[{i}].deploy"),
            };
            let entry = match cert.entry {
                Entry::Hostname(i) => format!("hostname[{i}] ({first})"),
                Entry::Certificate(i) => format!("certificate[{i}] ({first})"),
            };
            // Lexically the same (`/a/./b/` is `/a/b`), or the same directory through a link.
            let same: PathBuf =
                std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.components().collect());
            if let Some(earlier) = seen.get(&same) {
                let e = DeployError::Duplicate {
                    dir,
                    first: earlier.clone(),
                    second: entry,
                };
                return Err((format!("{key}.dir"), e));
            }
            seen.insert(same, entry);
        }
        Ok(())
    }

    /// The first refused name, with where it is written: one that is not a DNS name, a wildcard
    /// on an ACME certificate, a certificate with no names, or a name written before (in any
    /// entry, case-insensitively).
    // r[impl issue.certificates.names+2]
    // r[impl issue.hostnames]
    pub fn check_names(&self) -> Result<(), (NamePlace, NameError)> {
        let mut seen: std::collections::HashMap<String, NamePlace> =
            std::collections::HashMap::new();
        for cert in self.planned() {
            if cert.names.is_empty() {
                let place = NamePlace {
                    entry: cert.entry,
                    name: None,
                };
                return Err((place, NameError::Empty));
            }
            for (j, name) in cert.names.iter().enumerate() {
                let place = NamePlace {
                    entry: cert.entry,
                    name: Some(j),
                };
                if !crate::hostname::is_dns_name(name) {
                    let e = crate::hostname::HostnameError::NotDnsName(name.clone());
                    return Err((place, NameError::NotDnsName(e)));
                }
                if cert.source == SourceKind::Acme
                    && cert.challenge != Challenge::Dns01
                    && name.starts_with("*.")
                {
                    return Err((place, NameError::Wildcard(name.clone())));
                }
                if let Some(first) = seen.insert(name.to_ascii_lowercase(), place) {
                    let name = name.clone();
                    return Err((place, NameError::Duplicate { name, first }));
                }
            }
        }
        Ok(())
    }

    /// `[issuance.dns01]` that cannot work, or a `dns-01` certificate without it or outside its
    /// zone, with the key under `[issuance]`.
    // r[impl issue.dns01.choice]
    pub fn check_dns01(&self) -> Result<(), (String, String)> {
        self.check_listeners()?;
        if let Some(dns01) = &self.dns01
            && let Err((key, e)) = dns01.check()
        {
            return Err((format!("dns01.{key}"), e));
        }
        // r[impl issue.dns01.propagation]
        if let Some(dns01) = &self.dns01 {
            // One presentation and the whole propagation wait must fit in the attempt's bound,
            // or every attempt would be cut off before the CA is told.
            let provider = match dns01.provider {
                Dns01ProviderKind::Rfc2136 => RFC2136_TIMEOUT,
                Dns01ProviderKind::Exec => dns01
                    .command_timeout
                    .unwrap_or(crate::dns_exec::DEFAULT_COMMAND_TIMEOUT),
            };
            let wait = dns01
                .propagation_timeout
                .unwrap_or(crate::propagation::DEFAULT_TIMEOUT);
            let bound = self.attempt_bound();
            if wait + provider >= bound {
                return Err((
                    "dns01.propagation_timeout".into(),
                    format!(
                        "{wait:?} plus the provider's own timeout ({provider:?}) does not fit in \
                         attempt_timeout ({bound:?}): shorten it or raise attempt_timeout"
                    ),
                ));
            }
        }
        for cert in self.planned() {
            let key = match cert.entry {
                Entry::Hostname(i) => format!("hostname[{i}].challenge"),
                Entry::Certificate(i) => format!("certificate[{i}].challenge"),
            };
            // r[impl issue.challenge.acme-only]
            let named = match cert.challenge {
                Challenge::Http01 => None,
                Challenge::Dns01 => Some("dns-01"),
                Challenge::TlsAlpn01 => Some("tls-alpn-01"),
            };
            if let Some(named) = named
                && cert.source != SourceKind::Acme
            {
                return Err((
                    key,
                    format!(
                        "\"{named}\" is an ACME challenge; this certificate's source is not ACME"
                    ),
                ));
            }
            if cert.source != SourceKind::Acme || cert.challenge != Challenge::Dns01 {
                continue;
            }
            let Some(dns01) = &self.dns01 else {
                return Err((
                    key,
                    "\"dns-01\" needs an [issuance.dns01] section (its provider)".into(),
                ));
            };
            if let Some(outside) = cert.names.iter().find(|n| !dns01.covers(n)) {
                return Err((
                    key,
                    format!(
                        "{outside} is outside dns01.zone {:?}",
                        dns01.zone.as_deref().unwrap_or_default()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// A `tls_alpn01_bind` that would collide with `http01_bind` when both listeners are bound
    /// (found here, with the key, instead of as an EADDRINUSE at every start).
    // r[impl issue.acme.tls-alpn01.bind]
    fn check_listeners(&self) -> Result<(), (String, String)> {
        let Some(acme) = &self.acme else {
            return Ok(());
        };
        let uses = |challenge| {
            self.planned()
                .iter()
                .any(|c| c.source == SourceKind::Acme && c.challenge == challenge)
        };
        let (http, tls) = (acme.http01_bind, acme.tls_alpn01_bind);
        let overlap = http.port() == tls.port()
            && http.port() != 0
            && (http.ip() == tls.ip() || http.ip().is_unspecified() || tls.ip().is_unspecified());
        if overlap && uses(Challenge::Http01) && uses(Challenge::TlsAlpn01) {
            return Err((
                "acme.tls_alpn01_bind".into(),
                format!(
                    "{tls} overlaps http01_bind {http}: the HTTP-01 responder and the \
                     TLS-ALPN-01 listener both bind, so they need different ports"
                ),
            ));
        }
        Ok(())
    }

    /// The `rfc2136` provider's `tsig_secret_file` read as the module will read it (owner-only,
    /// not a symlink, base64), so the configuration check reports it: the key and why, never
    /// the secret.
    // r[impl issue.dns01.rfc2136]
    pub fn check_dns01_secret(&self) -> Result<(), (String, String)> {
        let Some(dns01) = &self.dns01 else {
            return Ok(());
        };
        match (&dns01.provider, &dns01.tsig_secret_file) {
            (Dns01ProviderKind::Rfc2136, Some(file)) => crate::rfc2136::read_secret(file)
                .map(drop)
                .map_err(|e| ("dns01.tsig_secret_file".to_owned(), e.to_string())),
            _ => Ok(()),
        }
    }

    fn tick_every(&self) -> Duration {
        self.tick
            .unwrap_or(Duration::from_secs(60))
            .max(Duration::from_millis(100))
    }

    fn attempt_bound(&self) -> Duration {
        self.attempt_timeout.unwrap_or(Duration::from_secs(300))
    }
}

/// The module could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A setting that cannot work (names the key).
    #[error("issuance: {0}")]
    Config(String),
    /// A hostname names a source that is not configured.
    #[error("issuance: hostname {0} uses the {1} source, which is not configured")]
    MissingSource(String, &'static str),
    /// The policy.
    #[error("issuance: {0}")]
    Policy(#[from] IssuePolicyError),
    /// The attempts table.
    #[error("issuance: {0}")]
    History(#[from] HistoryError),
    /// The certificate store.
    #[error("issuance: {0}")]
    Store(#[from] StoreError),
    /// The issuer.
    #[error("issuance: {0}")]
    Issuer(#[from] IssuerError),
    /// The local provider's endpoint is not on this node (a TCP address off loopback).
    #[error("issuance: local.endpoint: {0}")]
    Local(#[from] LocalEndpointError),
    /// The TLS-ALPN-01 listener could not bind.
    #[error("issuance: tls-alpn-01 listener on {addr}: {source}")]
    BindTlsAlpn {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP-01 responder could not bind.
    #[error("issuance: http-01 responder on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Every name is a DNS name, listed once, and no ACME name is a wildcard
/// ([`IssuanceConfig::check_names`]).
// r[impl issue.hostnames]
// r[impl issue.certificates.names+2]
fn check_names(config: &IssuanceConfig) -> Result<(), StartError> {
    config
        .check_names()
        .map_err(|(at, e)| StartError::Config(format!("{}: {e}", at.key())))
}

/// Which TLS listener answers TLS-ALPN-01 validations.
#[derive(Debug, Clone, Default)]
pub enum TlsAlpnListener {
    /// The module's own, bound at `tls_alpn01_bind` when a certificate asks for TLS-ALPN-01.
    #[default]
    Own,
    /// Another listener on that port (the gateway's) that answers from these challenges: the
    /// module binds none and puts its challenges there.
    Shared(AlpnChallenges),
}

/// A running issuance module.
#[derive(Debug)]
pub struct Issuance {
    issuer: Arc<Issuer>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    responder: Option<Http01Responder>,
    tls_alpn01: Option<TlsAlpnResponder>,
    cleanups: crate::dns01::Cleanups,
    /// The sources started, by the source kind and challenge each serves.
    sources: Sources,
}

/// The sources a running module started, by the source kind and challenge each serves.
#[derive(Clone)]
struct Sources(Vec<((SourceKind, Challenge), Arc<dyn crate::Source>)>);

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(serves, _)| serves))
            .finish()
    }
}

/// Starts the module: opens the attempts table (in memory, with a fault, when the file cannot be
/// used) and the store under `data_dir/issuance`, binds the
/// HTTP-01 responder if a hostname uses ACME, and ticks every `tick` on the tokio runtime. `seed`
/// is the node's jitter seed for this module (`NodeIdentity::seed("issuance")`).
/// It installs no signal handler and returns at once; stop it through [`Issuance::stop`].
pub async fn start(
    config: &IssuanceConfig,
    data_dir: &Path,
    seed: u64,
    clock: Arc<dyn WallClock>,
    faults: FaultBoard,
) -> Result<Issuance, StartError> {
    start_with(config, data_dir, seed, clock, faults, TlsAlpnListener::Own).await
}

/// [`start`], with TLS-ALPN-01 validations answered by `tls_alpn01`'s listener.
// r[impl issue.module]
// r[impl issue.history.unavailable]
// r[impl issue.local.loopback]
// r[impl issue.acme.tls-alpn01+3]
pub async fn start_with(
    config: &IssuanceConfig,
    data_dir: &Path,
    seed: u64,
    clock: Arc<dyn WallClock>,
    faults: FaultBoard,
    tls_alpn01: TlsAlpnListener,
) -> Result<Issuance, StartError> {
    let alpn_listener = tls_alpn01;
    let policy = config.policy(seed)?;
    check_names(config)?;
    config
        .check_deploys()
        .map_err(|(key, e)| StartError::Config(format!("{key}: {e}")))?;
    config
        .check_hooks()
        .map_err(|(key, e)| StartError::Config(format!("{key}: {e}")))?;
    config
        .check_dns01()
        .map_err(|(key, e)| StartError::Config(format!("{key}: {e}")))?;
    if let Some(local) = &config.local {
        local.endpoint.check()?;
    }
    let dir = data_dir.join("issuance");
    let store = CertStore::new(&dir.join("certs"))?;
    // An attempts table that cannot be used (corrupt, locked, newer) must not stop renewals:
    // attempts are kept in memory instead, the file is left as it is, and a fault says so.
    let (db, history_unavailable) =
        match HistoryDb::open(&dir.join("attempts.sqlite"), config.keep_attempts_per_host) {
            Ok(db) => (db, None),
            Err(err) => {
                tracing::error!(%err, "attempts table unusable; attempts kept in memory");
                let why = format!(
                    "{err}; attempts are kept in memory until a restart finds the file usable, \
                     so pacing does not survive a restart meanwhile"
                );
                (
                    HistoryDb::in_memory(config.keep_attempts_per_host)?,
                    Some(why),
                )
            }
        };
    let mut responder = None;
    let mut acme_source: Option<Arc<acme::AcmeSource>> = None;
    let mut dns01_source: Option<Arc<dyn crate::Source>> = None;
    let mut tls_alpn01 = None;
    let mut tls_alpn01_source: Option<Arc<dyn crate::Source>> = None;
    // The DNS-01 record removals under way: the stop waits for them.
    let cleanups = crate::dns01::Cleanups::default();
    let mut local_source = None;
    // Each source by what it serves, for certificates a reload adds.
    let mut sources: Vec<((SourceKind, Challenge), Arc<dyn crate::Source>)> = Vec::new();
    let mut hosts = Vec::new();
    let mut outputs = std::collections::HashMap::new();
    for h in config.planned() {
        let Some(key) = h.names.first().cloned() else {
            continue;
        };
        let source = match h.source {
            SourceKind::Acme => {
                let Some(settings) = &config.acme else {
                    return Err(StartError::MissingSource(key, "acme"));
                };
                if acme_source.is_none() {
                    // The responder is bound only when a certificate answers HTTP-01.
                    let http01 = config
                        .planned()
                        .iter()
                        .any(|c| c.source == SourceKind::Acme && c.challenge == Challenge::Http01);
                    let mut challenges = crate::responder::Challenges::default();
                    if http01 {
                        let limits = settings
                            .http01_limits
                            .validate()
                            .map_err(|e| StartError::Config(format!("acme.http01_limits.{e}")))?;
                        // Redirects go only to the node's own names, whichever source serves
                        // them.
                        let names = config.planned().into_iter().flat_map(|c| c.names);
                        let other = OtherRequests::new(settings.http01_other, names);
                        let r = Http01Responder::bind_serving(settings.http01_bind, limits, other)
                            .await
                            .map_err(|source| StartError::Bind {
                                addr: settings.http01_bind,
                                source,
                            })?;
                        challenges = r.challenges().clone();
                        responder = Some(r);
                    }
                    acme_source = Some(Arc::new(acme::AcmeSource::new(
                        AcmeConfig {
                            directory: settings.directory.clone(),
                            contact: settings.contact.clone(),
                            eab: settings.eab.clone(),
                            profile: settings.profile.clone(),
                            ca_pem: settings.ca_pem.clone(),
                            account_path: dir.join("acme-account.json"),
                            order_timeout: config.attempt_bound() / 2,
                        },
                        challenges,
                    )));
                }
                match (h.challenge, &acme_source) {
                    (Challenge::Http01, Some(acme)) => Some(acme.clone() as Arc<dyn crate::Source>),
                    // r[impl issue.dns01.choice]
                    (Challenge::Dns01, Some(acme)) => {
                        if dns01_source.is_none() {
                            let Some(dns01) = &config.dns01 else {
                                return Err(StartError::MissingSource(key, "dns01"));
                            };
                            let mut dns01 = dns01
                                .build()
                                .map_err(|e| StartError::Config(format!("dns01: {e}")))?;
                            dns01.cleanups = cleanups.clone();
                            dns01_source =
                                Some(Arc::new(acme.with_dns01(dns01)) as Arc<dyn crate::Source>);
                        }
                        dns01_source.clone()
                    }
                    // r[impl issue.acme.tls-alpn01+3]
                    (Challenge::TlsAlpn01, Some(acme)) => {
                        if let (None, TlsAlpnListener::Shared(challenges)) =
                            (&tls_alpn01_source, &alpn_listener)
                        {
                            tls_alpn01_source =
                                Some(Arc::new(acme.with_tls_alpn01(challenges.clone()))
                                    as Arc<dyn crate::Source>);
                        }
                        if tls_alpn01_source.is_none() {
                            let limits = settings.tls_alpn01_limits.validate().map_err(|e| {
                                StartError::Config(format!("acme.tls_alpn01_limits.{e}"))
                            })?;
                            let listener = TlsAlpnResponder::bind(settings.tls_alpn01_bind, limits)
                                .await
                                .map_err(|source| StartError::BindTlsAlpn {
                                    addr: settings.tls_alpn01_bind,
                                    source,
                                })?;
                            tls_alpn01_source = Some(Arc::new(
                                acme.with_tls_alpn01(listener.challenges().clone()),
                            )
                                as Arc<dyn crate::Source>);
                            tls_alpn01 = Some(listener);
                        }
                        tls_alpn01_source.clone()
                    }
                    (_, None) => None,
                }
            }
            SourceKind::Local => {
                let Some(settings) = &config.local else {
                    return Err(StartError::MissingSource(key, "local"));
                };
                Some(
                    local_source
                        .get_or_insert_with(|| {
                            Arc::new(LocalProvider::new(
                                settings.endpoint.clone(),
                                Duration::from_secs(30),
                            )) as Arc<dyn crate::Source>
                        })
                        .clone(),
                )
            }
        };
        if let Some(source) = source {
            sources.push(((h.source, h.challenge), source.clone()));
            let (host, out) = certificate(config, h, source, &key)?;
            if let Some(out) = out {
                outputs.insert(key, out);
            }
            hosts.push(host);
        }
    }
    let mut issuer = Issuer::new(policy, hosts, db, store, clock, config.attempt_bound())?
        .with_outputs(outputs)
        .with_fault_board(faults);
    if let Some(why) = history_unavailable {
        issuer = issuer.with_history_unavailable(why);
    }
    let issuer = Arc::new(issuer);
    let (stop, mut stopped) = watch::channel(false);
    let every = config.tick_every();
    let ticking = issuer.clone();
    let task = tokio::spawn(async move {
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stopped.changed() => break,
                _ = interval.tick() => {}
            }
            // A failed tick (the attempts table locked, say) is reported; the next tick tries
            // again. Nothing here ends the loop but a stop.
            let tick = tokio::select! {
                _ = stopped.changed() => break,
                tick = ticking.tick() => tick,
            };
            if let Err(err) = tick {
                tracing::error!(%err, "issuance tick failed");
            }
        }
    });
    Ok(Issuance {
        issuer,
        stop,
        task,
        responder,
        tls_alpn01,
        cleanups,
        sources: Sources(sources),
    })
}

/// One planned certificate as the issuer runs it, with its deploy and hook if it has either.
fn certificate(
    config: &IssuanceConfig,
    h: PlannedCertificate,
    source: Arc<dyn crate::Source>,
    key: &str,
) -> Result<(Hostname, Option<Outputs>), StartError> {
    let deploy = match &h.deploy {
        Some((deploy, shared)) => Some(
            deploy
                .target(key, *shared)
                .map_err(|e| StartError::Config(format!("deploy: {e}")))?,
        ),
        None => None,
    };
    let on_renew = h.on_renew.clone().map(|argv| Hook {
        argv,
        timeout: config.on_renew_timeout(),
    });
    let out = (deploy.is_some() || on_renew.is_some()).then_some(Outputs { deploy, on_renew });
    Ok((Hostname::certificate(h.names, source), out))
}

/// A running module's new certificates, checked ([`Issuance::plan_certificates`]) and not yet
/// given to its issuer.
pub struct Certificates {
    hosts: Vec<Hostname>,
    outputs: std::collections::HashMap<String, Outputs>,
}

impl std::fmt::Debug for Certificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.hosts.iter().map(|h| h.name.as_str()).collect();
        f.debug_struct("Certificates")
            .field("hosts", &names)
            .field("outputs", &self.outputs)
            .finish()
    }
}

/// A running module's sources, to check new certificates against
/// ([`Issuance::planner`]).
#[derive(Clone)]
pub struct Planner {
    sources: Sources,
}

impl std::fmt::Debug for Planner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let serves: Vec<_> = self.sources.0.iter().map(|(serves, _)| serves).collect();
        f.debug_struct("Planner").field("sources", &serves).finish()
    }
}

impl Planner {
    /// [`Issuance::plan_certificates`], apart from the module.
    // r[impl issue.live-certificates]
    pub fn plan(&self, config: &IssuanceConfig) -> Result<Certificates, StartError> {
        check_names(config)?;
        config
            .check_deploys()
            .map_err(|(key, e)| StartError::Config(format!("{key}: {e}")))?;
        config
            .check_hooks()
            .map_err(|(key, e)| StartError::Config(format!("{key}: {e}")))?;
        config
            .check_dns01()
            .map_err(|(key, e)| StartError::Config(format!("{key}: {e}")))?;
        let mut hosts = Vec::new();
        let mut outputs = std::collections::HashMap::new();
        for h in config.planned() {
            let Some(key) = h.names.first().cloned() else {
                continue;
            };
            let Some((_, source)) = self
                .sources
                .0
                .iter()
                .find(|(serves, _)| *serves == (h.source, h.challenge))
            else {
                return Err(StartError::Config(format!(
                    "{key}: its source ({:?}, {:?}) is not running: a restart starts it",
                    h.source, h.challenge
                )));
            };
            let (host, out) = certificate(config, h, source.clone(), &key)?;
            if let Some(out) = out {
                outputs.insert(key, out);
            }
            hosts.push(host);
        }
        Ok(Certificates { hosts, outputs })
    }
}

impl Issuance {
    /// Replaces the certificates while the module runs, from `config`'s
    /// `[[issuance.hostname]]` and `[[issuance.certificate]]` entries (its other settings are
    /// those the module started with). Each certificate must use a source and challenge the
    /// module already runs (else nothing changes and the error says so: a restart starts it).
    /// Those kept keep their state; one added is decided at the next tick; one removed is no
    /// longer renewed ([`Issuer::replace_hosts`]).
    // r[impl issue.live-certificates]
    pub fn set_certificates(&self, config: &IssuanceConfig) -> Result<(), StartError> {
        let certificates = self.plan_certificates(config)?;
        self.apply_certificates(certificates);
        Ok(())
    }

    /// [`Issuance::set_certificates`]'s checks, changing nothing: what
    /// [`Issuance::apply_certificates`] then gives the issuer.
    // r[impl issue.live-certificates]
    pub fn plan_certificates(&self, config: &IssuanceConfig) -> Result<Certificates, StartError> {
        self.planner().plan(config)
    }

    /// What [`Issuance::plan_certificates`] needs of the running module (its sources), to plan
    /// without holding whatever guards the module: the checks look users and groups up.
    pub fn planner(&self) -> Planner {
        Planner {
            sources: self.sources.clone(),
        }
    }

    /// Gives the issuer the certificates [`Issuance::plan_certificates`] checked.
    pub fn apply_certificates(&self, certificates: Certificates) {
        self.issuer
            .replace_hosts(certificates.hosts, certificates.outputs);
    }

    /// The issuer (status, force-retry, the store).
    pub fn issuer(&self) -> &Arc<Issuer> {
        &self.issuer
    }

    /// The certificate store other modules read.
    pub fn store(&self) -> CertStore {
        self.issuer.store().clone()
    }

    /// Where the HTTP-01 responder listens, if one runs.
    pub fn http01_addr(&self) -> Option<SocketAddr> {
        self.responder.as_ref().map(Http01Responder::addr)
    }

    /// The HTTP-01 responder's open connections and what it refused or cut off, if one runs.
    pub fn http01_stats(&self) -> Option<ResponderStats> {
        self.responder.as_ref().map(Http01Responder::stats)
    }

    /// Where the TLS-ALPN-01 listener listens, if one runs.
    pub fn tls_alpn01_addr(&self) -> Option<SocketAddr> {
        self.tls_alpn01.as_ref().map(TlsAlpnResponder::addr)
    }

    /// The TLS-ALPN-01 listener's open connections and what it refused, cut off or answered, if
    /// one runs.
    pub fn tls_alpn01_stats(&self) -> Option<AlpnStats> {
        self.tls_alpn01.as_ref().map(TlsAlpnResponder::stats)
    }

    /// Stops ticking and the responder, by `deadline`. An attempt in flight is cancelled and its
    /// row settled as interrupted now (or, if the process dies first, on the next start).
    pub async fn shutdown(self, deadline: tokio::time::Instant) -> Result<(), String> {
        let _ = self.stop.send(true);
        let mut task = self.task;
        let mut result = match tokio::time::timeout_at(deadline, &mut task).await {
            Ok(_) => Ok(()),
            Err(_) => {
                task.abort();
                Err("the tick loop did not end by the deadline; cut off".to_owned())
            }
        };
        if let Err(err) = self.issuer.settle_interrupted() {
            result = Err(format!("settling interrupted attempts: {err}"));
        }
        // The cut attempt handed its DNS-01 records to `cleanups`: wait for their removal (each
        // record still there at the deadline is logged as left behind).
        // r[impl issue.dns01.cleanup]
        let left = self.cleanups.wait(deadline).await;
        if !left.is_empty() && result.is_ok() {
            let names: Vec<&str> = left.iter().map(|(fqdn, _)| fqdn.as_str()).collect();
            result = Err(format!(
                "dns-01 records left behind at the deadline: {}",
                names.join(", ")
            ));
        }
        if let Some(r) = &self.responder {
            r.stop();
        }
        if let Some(r) = &self.tls_alpn01 {
            r.stop();
        }
        result
    }
}

impl Stopper for Issuance {
    fn stop(self: Box<Self>, request: StopRequest) -> BoxFuture<Result<(), StopError>> {
        Box::pin(async move { self.shutdown(request.deadline).await.map_err(StopError) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify issue.deploy]
    #[test]
    fn two_certificates_deploying_to_the_same_directory_are_refused_naming_both() {
        let config =
            |json: serde_json::Value| -> IssuanceConfig { serde_json::from_value(json).unwrap() };
        let ok = config(serde_json::json!({
            "deploy": { "dir": "/srv/holdfast-certs" },
            "hostname": [
                { "name": "a.example", "source": "acme" },
                { "name": "b.example", "source": "acme", "deploy": { "dir": "/srv/b" } },
            ],
            "certificate": [{ "names": ["c.example", "a.other"], "source": "acme" }],
        }));
        assert!(ok.check_deploys().is_ok());
        // Two own deploys in one directory (written differently).
        let twice = config(serde_json::json!({
            "hostname": [
                { "name": "a.example", "source": "acme", "deploy": { "dir": "/srv/x" } },
                { "name": "b.example", "source": "acme", "deploy": { "dir": "/srv/./x/" } },
            ],
        }));
        let (key, err) = twice.check_deploys().unwrap_err();
        assert_eq!(key, "hostname[1].deploy.dir");
        let text = err.to_string();
        assert!(
            text.contains("hostname[0] (a.example)") && text.contains("hostname[1] (b.example)"),
            "{text}"
        );
        // An own deploy in the shared directory's place for another certificate.
        let clash = config(serde_json::json!({
            "deploy": { "dir": "/srv/holdfast-certs" },
            "hostname": [{ "name": "a.example", "source": "acme" }],
            "certificate": [{
                "names": ["c.example"], "source": "acme",
                "deploy": { "dir": "/srv/holdfast-certs/a.example" },
            }],
        }));
        let (key, err) = clash.check_deploys().unwrap_err();
        assert_eq!(key, "certificate[0].deploy.dir");
        assert!(matches!(err, DeployError::Duplicate { .. }), "{err}");
    }

    // r[verify issue.module]
    #[test]
    fn config_durations_are_text_and_bad_settings_name_their_key() {
        let config: IssuanceConfig = serde_json::from_value(serde_json::json!({
            "tick": "30s",
            "pacing": { "base": "10m", "cap": "12h" },
            "block_for": "8h",
        }))
        .unwrap();
        assert_eq!(config.tick_every(), Duration::from_secs(30));
        let policy = config.policy(7).unwrap();
        assert_eq!(policy.retry.base(), Duration::from_secs(600));
        assert_eq!(policy.block_for, Duration::from_secs(8 * 3600));
        assert_eq!(policy.block_after, 6);
        let bad: IssuanceConfig =
            serde_json::from_value(serde_json::json!({ "pacing": { "base": "7h" } })).unwrap();
        let err = bad.policy(7).unwrap_err().to_string();
        assert!(err.contains("pacing.base"), "{err}");
        let bad: IssuanceConfig =
            serde_json::from_value(serde_json::json!({ "block_for": "1d" })).unwrap();
        assert!(bad.policy(7).unwrap_err().to_string().contains("block_for"));
        assert!(
            serde_json::from_value::<IssuanceConfig>(serde_json::json!({ "tick": 30 })).is_err()
        );
        assert!(
            serde_json::from_value::<IssuanceConfig>(serde_json::json!({ "nope": 1 })).is_err()
        );
    }

    // r[verify issue.responder.limits+2]
    #[tokio::test]
    async fn the_responder_limits_are_set_in_the_acme_section_and_a_zero_names_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let acme = |limits| {
            serde_json::json!({
                "hostname": [{ "name": "a.example", "source": "acme" }],
                "acme": {
                    "directory": "https://127.0.0.1:9/dir",
                    "http01_bind": "127.0.0.1:0",
                    "http01_limits": limits,
                },
            })
        };
        // Refused when the config is read, naming the key...
        let read = serde_json::from_value::<IssuanceConfig>(acme(
            serde_json::json!({ "max_connections": 0 }),
        ))
        .unwrap_err();
        assert!(read.to_string().contains("max_connections"), "{read}");
        let mut config: IssuanceConfig =
            serde_json::from_value(acme(serde_json::json!({ "header_timeout": "5s" }))).unwrap();
        let settings = config.acme.as_mut().unwrap();
        assert_eq!(
            settings.http01_limits.header_timeout,
            Duration::from_secs(5)
        );
        // ... and at start, when built in code.
        settings.http01_limits.max_connections = 0;
        let err = start(
            &config,
            dir.path(),
            1,
            Arc::new(crate::SystemWallClock),
            FaultBoard::new(),
        )
        .await
        .map(|_| ())
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("acme.http01_limits.max_connections"),
            "{err}"
        );
        let acme = serde_json::json!({ "directory": "https://127.0.0.1:9/dir" });
        let settings: AcmeSettings = serde_json::from_value(acme).unwrap();
        assert_eq!(settings.http01_limits, ResponderLimits::default());
        assert_eq!(settings.http01_other, Http01Other::NotFound);
    }

    // Started with another listener's challenges, the module binds nothing on the port that
    // listener holds (here a socket bound first, which its own listener could not bind).
    // r[verify issue.acme.tls-alpn01+3]
    #[tokio::test]
    async fn with_a_shared_listener_the_module_binds_no_tls_alpn01_listener() {
        let dir = tempfile::tempdir().unwrap();
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = held.local_addr().unwrap();
        let config: IssuanceConfig = serde_json::from_value(serde_json::json!({
            "certificate": [{
                "names": ["a.example"], "source": "acme", "challenge": "tls-alpn-01",
            }],
            "acme": {
                "directory": "https://127.0.0.1:9/dir",
                "tls_alpn01_bind": port.to_string(),
            },
        }))
        .unwrap();
        let own = start(
            &config,
            dir.path(),
            1,
            Arc::new(crate::SystemWallClock),
            FaultBoard::new(),
        )
        .await;
        assert!(
            matches!(own, Err(StartError::BindTlsAlpn { addr, .. }) if addr == port),
            "{own:?}"
        );
        let challenges = AlpnChallenges::default();
        let started = start_with(
            &config,
            dir.path(),
            1,
            Arc::new(crate::SystemWallClock),
            FaultBoard::new(),
            TlsAlpnListener::Shared(challenges),
        )
        .await
        .unwrap();
        assert_eq!(started.tls_alpn01_addr(), None);
        assert_eq!(started.tls_alpn01_stats(), None);
        started
            .shutdown(tokio::time::Instant::now() + Duration::from_secs(5))
            .await
            .unwrap();
    }

    // r[verify issue.live-certificates]
    #[tokio::test]
    async fn certificates_given_live_must_use_a_running_source_else_nothing_changes() {
        let dir = tempfile::tempdir().unwrap();
        let config = |certificates: serde_json::Value| -> IssuanceConfig {
            serde_json::from_value(serde_json::json!({
                "certificate": certificates,
                "acme": {
                    "directory": "https://127.0.0.1:9/dir",
                    "http01_bind": "127.0.0.1:0",
                    "tls_alpn01_bind": "127.0.0.1:0",
                },
            }))
            .unwrap()
        };
        let alpn = |name: &str| serde_json::json!({ "names": [name], "source": "acme", "challenge": "tls-alpn-01" });
        let started = start(
            &config(serde_json::json!([alpn("a.example")])),
            dir.path(),
            1,
            Arc::new(crate::SystemWallClock),
            FaultBoard::new(),
        )
        .await
        .unwrap();
        let listed = |issuance: &Issuance| -> Vec<String> {
            let statuses = issuance.issuer().statuses().unwrap();
            statuses.into_iter().map(|s| s.hostname).collect()
        };
        // HTTP-01 is not running (no certificate used it at the start): refused, naming it.
        let http01 =
            serde_json::json!({ "names": ["b.example"], "source": "acme", "challenge": "http-01" });
        let err = started
            .set_certificates(&config(serde_json::json!([alpn("a.example"), http01])))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("b.example") && err.contains("not running"),
            "{err}"
        );
        assert_eq!(listed(&started), ["a.example"], "a refusal changed nothing");
        // The running source: taken.
        started
            .set_certificates(&config(serde_json::json!([
                alpn("a.example"),
                alpn("c.example")
            ])))
            .unwrap();
        assert_eq!(listed(&started), ["a.example", "c.example"]);
        started
            .shutdown(tokio::time::Instant::now() + Duration::from_secs(5))
            .await
            .unwrap();
    }

    // r[verify issue.acme.tls-alpn01+3]
    // r[verify issue.acme.tls-alpn01.limits]
    #[tokio::test]
    async fn a_tls_alpn01_certificate_binds_the_tls_listener_and_no_http01_responder() {
        let dir = tempfile::tempdir().unwrap();
        let acme = |limits| {
            serde_json::json!({
                "certificate": [{
                    "names": ["a.example", "www.a.example"], "source": "acme",
                    "challenge": "tls-alpn-01",
                }],
                "acme": {
                    "directory": "https://127.0.0.1:9/dir",
                    "http01_bind": "127.0.0.1:0",
                    "tls_alpn01_bind": "127.0.0.1:0",
                    "tls_alpn01_limits": limits,
                },
            })
        };
        let config: IssuanceConfig =
            serde_json::from_value(acme(serde_json::json!({ "handshake_timeout": "5s" }))).unwrap();
        assert_eq!(config.planned()[0].challenge, Challenge::TlsAlpn01);
        let started = start(
            &config,
            dir.path(),
            1,
            Arc::new(crate::SystemWallClock),
            FaultBoard::new(),
        )
        .await
        .unwrap();
        let addr = started.tls_alpn01_addr().expect("the tls-alpn-01 listener");
        assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");
        assert_eq!(
            started.http01_addr(),
            None,
            "no certificate answers HTTP-01"
        );
        assert_eq!(started.tls_alpn01_stats(), Some(AlpnStats::default()));
        started
            .shutdown(tokio::time::Instant::now() + Duration::from_secs(5))
            .await
            .unwrap();
        // A zero limit is refused when read, naming its key; built in code, at start.
        let read = serde_json::from_value::<IssuanceConfig>(acme(
            serde_json::json!({ "max_connections": 0 }),
        ))
        .unwrap_err();
        assert!(read.to_string().contains("max_connections"), "{read}");
        let mut config = config;
        if let Some(acme) = config.acme.as_mut() {
            acme.tls_alpn01_limits.handshake_timeout = Duration::ZERO;
        }
        let err = start(
            &config,
            dir.path(),
            1,
            Arc::new(crate::SystemWallClock),
            FaultBoard::new(),
        )
        .await
        .map(|_| ())
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("acme.tls_alpn01_limits.handshake_timeout"),
            "{err}"
        );
        // The defaults: :443 and the default limits.
        let settings: AcmeSettings =
            serde_json::from_value(serde_json::json!({ "directory": "https://127.0.0.1:9/dir" }))
                .unwrap();
        assert_eq!(settings.tls_alpn01_bind, "0.0.0.0:443".parse().unwrap());
        assert_eq!(settings.tls_alpn01_limits, AlpnLimits::default());
    }

    // r[verify issue.responder.redirect]
    #[tokio::test]
    async fn http01_other_redirect_makes_the_started_responder_redirect_to_configured_names() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let dir = tempfile::tempdir().unwrap();
        let config: IssuanceConfig = serde_json::from_value(serde_json::json!({
            "tick": "1h",
            "certificate": [{ "names": ["a.example", "www.a.example"], "source": "acme" }],
            "hostname": [{ "name": "b.example", "source": "local" }],
            "local": { "endpoint": { "tcp": "127.0.0.1:9" } },
            "acme": {
                "directory": "https://127.0.0.1:9/dir",
                "http01_bind": "127.0.0.1:0",
                "http01_other": "redirect",
            },
        }))
        .unwrap();
        let issuance = start(
            &config,
            dir.path(),
            1,
            Arc::new(crate::SystemWallClock),
            FaultBoard::new(),
        )
        .await
        .unwrap();
        let addr = issuance.http01_addr().unwrap();
        for (host, want) in [
            ("www.a.example", "HTTP/1.1 308"),
            ("b.example", "HTTP/1.1 308"),
            ("c.example", "HTTP/1.1 404"),
        ] {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(format!("GET /p HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            assert!(out.starts_with(want), "{host}: {out}");
        }
        let bad = serde_json::from_value::<AcmeSettings>(serde_json::json!({
            "directory": "https://127.0.0.1:9/dir",
            "http01_other": "moved",
        }))
        .unwrap_err();
        assert!(bad.to_string().contains("redirect"), "{bad}");
        issuance
            .shutdown(tokio::time::Instant::now() + Duration::from_secs(5))
            .await
            .unwrap();
    }

    // r[verify issue.local.loopback]
    #[tokio::test]
    async fn a_local_provider_off_loopback_is_refused_at_start_with_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut config: IssuanceConfig = serde_json::from_value(serde_json::json!({
            "hostname": [{ "name": "a.example", "source": "local" }],
            "local": { "endpoint": { "tcp": "127.0.0.1:9" } },
        }))
        .unwrap();
        // Built in code, past the config reader's own check.
        let addr: SocketAddr = "192.0.2.1:8099".parse().unwrap();
        config.local = Some(LocalSettings {
            endpoint: LocalEndpoint::Tcp(addr),
        });
        let err = start(
            &config,
            dir.path(),
            1,
            Arc::new(crate::SystemWallClock),
            FaultBoard::new(),
        )
        .await
        .map(|_| ())
        .unwrap_err();
        assert!(
            matches!(err, StartError::Local(LocalEndpointError::NotLoopback(a)) if a == addr),
            "{err}"
        );
        assert!(err.to_string().contains("local.endpoint"), "{err}");
        // And through the config reader, the node's path.
        let read = serde_json::from_value::<IssuanceConfig>(serde_json::json!({
            "local": { "endpoint": { "tcp": "10.0.0.2:8099" } },
        }))
        .unwrap_err();
        assert!(
            read.to_string().contains("not a loopback address"),
            "{read}"
        );
    }

    // r[verify issue.hostnames]
    #[tokio::test]
    async fn a_hostname_that_is_not_a_dns_name_or_is_listed_twice_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        for (names, key) in [
            (vec!["../../escape"], "hostname[0].name"),
            (vec!["a.example", "a/b.example"], "hostname[1].name"),
            (vec![""], "hostname[0].name"),
            (vec!["a.example", "A.example"], "hostname[1].name"),
            (vec!["*.a.example", "a.*.example"], "hostname[1].name"),
        ] {
            let hostnames: Vec<_> = names
                .iter()
                .map(|n| serde_json::json!({ "name": n, "source": "local" }))
                .collect();
            let config: IssuanceConfig = serde_json::from_value(serde_json::json!({
                "hostname": hostnames,
                "local": { "endpoint": { "tcp": "127.0.0.1:9" } },
            }))
            .unwrap();
            let err = start(
                &config,
                dir.path(),
                1,
                Arc::new(crate::SystemWallClock),
                FaultBoard::new(),
            )
            .await
            .map(|_| ())
            .unwrap_err();
            assert!(matches!(err, StartError::Config(_)), "{names:?}: {err}");
            assert!(err.to_string().contains(key), "{names:?}: {err}");
        }
        // Nothing was written outside the data directory.
        assert!(!dir.path().join("escape.pem").exists());
        assert!(!dir.path().join("issuance/escape.pem").exists());
    }

    // r[verify issue.certificates.names+2]
    #[tokio::test]
    async fn certificate_names_are_checked_across_entries_and_an_acme_wildcard_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let config = |value: serde_json::Value| -> IssuanceConfig {
            let mut value = value;
            value["local"] = serde_json::json!({ "endpoint": { "tcp": "127.0.0.1:9" } });
            value["acme"] = serde_json::json!({
                "directory": "https://127.0.0.1:9/dir",
                "http01_bind": "127.0.0.1:0",
            });
            serde_json::from_value(value).unwrap()
        };
        let cases = [
            (
                serde_json::json!({
                    "hostname": [{ "name": "a.example", "source": "local" }],
                    "certificate": [{ "names": ["b.example", "A.example"], "source": "local" }],
                }),
                "certificate[0].names[1]",
                "\"A.example\" is listed more than once (also issuance.hostname[0])",
            ),
            (
                serde_json::json!({
                    "certificate": [
                        { "names": ["a.example", "www.a.example"], "source": "acme" },
                        { "names": ["c.example", "www.a.example"], "source": "local" },
                    ],
                }),
                "certificate[1].names[1]",
                "(also issuance.certificate[0].names[1])",
            ),
            (
                serde_json::json!({
                    "certificate": [{ "names": ["a.example", "*.a.example"], "source": "acme" }],
                }),
                "certificate[0].names[1]",
                "a wildcard needs challenge = \"dns-01\"",
            ),
            (
                serde_json::json!({
                    "hostname": [{ "name": "*.a.example", "source": "acme" }],
                }),
                "hostname[0].name",
                "wildcard",
            ),
            (
                serde_json::json!({
                    "hostname": [
                        { "name": "*.b.example", "source": "acme", "challenge": "tls-alpn-01" },
                    ],
                }),
                "hostname[0].name",
                "TLS-ALPN-01 cannot validate a wildcard",
            ),
            (
                serde_json::json!({ "certificate": [{ "names": [], "source": "local" }] }),
                "certificate[0].names",
                "at least one name",
            ),
            (
                serde_json::json!({
                    "certificate": [{ "names": ["a.example", "a/b.example"], "source": "local" }],
                }),
                "certificate[0].names[1]",
                "is not a DNS name",
            ),
        ];
        for (value, key, says) in cases {
            let config = config(value.clone());
            let (at, e) = config.check_names().unwrap_err();
            assert_eq!(at.key(), key, "{value}");
            assert!(e.to_string().contains(says), "{value}: {e}");
            let err = start(
                &config,
                dir.path(),
                1,
                Arc::new(crate::SystemWallClock),
                FaultBoard::new(),
            )
            .await
            .map(|_| ())
            .unwrap_err();
            assert!(
                err.to_string().contains(&format!("{key}: ")),
                "{value}: {err}"
            );
        }
        // The local provider may hand out a wildcard.
        let ok = config(serde_json::json!({
            "certificate": [{ "names": ["*.a.example", "a.example"], "source": "local" }],
        }));
        assert_eq!(ok.check_names(), Ok(()));
    }

    fn dns01_config(json: serde_json::Value) -> IssuanceConfig {
        let mut value = json;
        value["acme"] = serde_json::json!({ "directory": "https://acme.invalid/dir" });
        serde_json::from_value(value).unwrap()
    }

    // r[verify issue.challenge.acme-only]
    #[test]
    fn a_challenge_on_a_certificate_that_is_not_acme_is_refused_at_its_key() {
        for challenge in ["dns-01", "tls-alpn-01"] {
            let config: IssuanceConfig = serde_json::from_value(serde_json::json!({
                "hostname": [{ "name": "a.example", "source": "acme" }],
                "certificate": [{
                    "names": ["b.example"], "source": "local", "challenge": challenge,
                }],
                "local": { "endpoint": { "tcp": "127.0.0.1:8099" } },
                "acme": { "directory": "https://acme.invalid/dir" },
            }))
            .unwrap();
            let (key, e) = config.check_dns01().unwrap_err();
            assert_eq!(key, "certificate[0].challenge", "{challenge}");
            assert!(e.contains(challenge) && e.contains("ACME"), "{e}");
        }
    }

    // r[verify issue.acme.tls-alpn01.bind]
    #[test]
    fn a_tls_alpn01_bind_on_the_http01_port_is_refused_when_both_listeners_are_bound() {
        let config = |challenges: &[&str], http: &str, tls: &str| -> IssuanceConfig {
            let certificate: Vec<_> = challenges
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    serde_json::json!({
                        "names": [format!("n{i}.example")], "source": "acme", "challenge": c,
                    })
                })
                .collect();
            serde_json::from_value(serde_json::json!({
                "certificate": certificate,
                "acme": {
                    "directory": "https://acme.invalid/dir",
                    "http01_bind": http, "tls_alpn01_bind": tls,
                },
            }))
            .unwrap()
        };
        let both = ["http-01", "tls-alpn-01"];
        for (http, tls) in [
            ("0.0.0.0:8080", "0.0.0.0:8080"),
            ("0.0.0.0:8080", "127.0.0.1:8080"),
            ("127.0.0.1:8080", "0.0.0.0:8080"),
            ("[::]:8080", "127.0.0.1:8080"),
            ("127.0.0.1:8080", "127.0.0.1:8080"),
        ] {
            let (key, e) = config(&both, http, tls).check_dns01().unwrap_err();
            assert_eq!(key, "acme.tls_alpn01_bind", "{http} {tls}");
            assert!(e.contains("http01_bind") && e.contains(http), "{e}");
        }
        // Different ports or addresses, an ephemeral port, or only one listener bound: accepted.
        for (challenges, http, tls) in [
            (&both[..], "0.0.0.0:80", "0.0.0.0:443"),
            (&both[..], "127.0.0.1:8080", "127.0.0.2:8080"),
            (&both[..], "127.0.0.1:0", "127.0.0.1:0"),
            (&["http-01"][..], "0.0.0.0:8080", "0.0.0.0:8080"),
            (&["tls-alpn-01"][..], "0.0.0.0:8080", "0.0.0.0:8080"),
        ] {
            assert_eq!(
                config(challenges, http, tls).check_dns01(),
                Ok(()),
                "{challenges:?} {http} {tls}"
            );
        }
    }

    // r[verify issue.dns01.propagation]
    #[test]
    fn a_propagation_wait_that_cannot_fit_in_the_attempt_is_refused() {
        let config = |attempt: &str, wait: &str| {
            dns01_config(serde_json::json!({
                "attempt_timeout": attempt,
                "dns01": {
                    "provider": "exec", "command": ["/usr/local/bin/dns"],
                    "command_timeout": "60s", "propagation_timeout": wait,
                    "propagation_servers": ["192.0.2.53:53"],
                },
            }))
        };
        assert_eq!(config("5m", "120s").check_dns01(), Ok(()));
        let (key, e) = config("2m", "120s").check_dns01().unwrap_err();
        assert_eq!(key, "dns01.propagation_timeout");
        assert!(e.contains("attempt_timeout"), "{e}");
    }

    // r[verify issue.dns01.choice]
    // r[verify issue.certificates.names+2]
    #[test]
    fn a_wildcard_on_dns01_is_accepted_and_dns01_needs_a_provider_covering_its_names() {
        let rfc2136 = serde_json::json!({
            "provider": "rfc2136", "server": "127.0.0.1:5353", "zone": "example.test",
            "tsig_key_name": "holdfast", "tsig_secret_file": "/etc/holdfast/tsig.key",
        });
        let ok = dns01_config(serde_json::json!({
            "certificate": [{
                "names": ["*.example.test", "example.test"], "source": "acme", "challenge": "dns-01",
            }],
            "hostname": [{ "name": "www.other.test", "source": "acme" }],
            "dns01": rfc2136.clone(),
        }));
        assert_eq!(ok.check_names(), Ok(()));
        assert_eq!(ok.check_dns01(), Ok(()));
        assert_eq!(ok.planned()[0].challenge, Challenge::Http01, "the default");
        assert_eq!(ok.planned()[1].challenge, Challenge::Dns01);
        // No provider: refused at the certificate's `challenge`.
        let none = dns01_config(serde_json::json!({
            "certificate": [{ "names": ["*.example.test"], "source": "acme", "challenge": "dns-01" }],
        }));
        let (key, e) = none.check_dns01().unwrap_err();
        assert_eq!(key, "certificate[0].challenge");
        assert!(e.contains("[issuance.dns01]"), "{e}");
        // A name outside the rfc2136 zone.
        let outside = dns01_config(serde_json::json!({
            "hostname": [{ "name": "a.other.test", "source": "acme", "challenge": "dns-01" }],
            "dns01": rfc2136,
        }));
        let (key, e) = outside.check_dns01().unwrap_err();
        assert_eq!(key, "hostname[0].challenge");
        assert!(e.contains("a.other.test"), "{e}");
        // An unknown challenge is a type error.
        assert!(
            serde_json::from_value::<IssuanceConfig>(serde_json::json!({
                "hostname": [{ "name": "a.test", "source": "acme", "challenge": "tls-alpn-02" }],
            }))
            .is_err()
        );
    }

    // r[verify issue.dns01.rfc2136]
    // r[verify issue.dns01.exec]
    // r[verify issue.dns01.propagation]
    #[test]
    fn dns01_settings_name_the_key_that_cannot_work() {
        let settings =
            |json: serde_json::Value| -> Dns01Settings { serde_json::from_value(json).unwrap() };
        let cases = [
            (serde_json::json!({ "provider": "rfc2136" }), "server"),
            (
                serde_json::json!({ "provider": "rfc2136", "server": "127.0.0.1:53" }),
                "zone",
            ),
            (
                serde_json::json!({
                    "provider": "rfc2136", "server": "127.0.0.1:53", "zone": "a.test",
                }),
                "tsig_key_name",
            ),
            (
                serde_json::json!({
                    "provider": "rfc2136", "server": "127.0.0.1:53", "zone": "a.test",
                    "tsig_key_name": "k",
                }),
                "tsig_secret_file",
            ),
            (
                serde_json::json!({
                    "provider": "rfc2136", "server": "127.0.0.1:53", "zone": "a.test",
                    "tsig_key_name": "k", "tsig_secret_file": "/k", "ttl": 0,
                }),
                "ttl",
            ),
            (serde_json::json!({ "provider": "exec" }), "command"),
            (
                serde_json::json!({ "provider": "exec", "command": [""] }),
                "command",
            ),
            (
                serde_json::json!({ "provider": "exec", "command": ["/bin/true"] }),
                "propagation_servers",
            ),
            (
                serde_json::json!({
                    "provider": "exec", "command": ["/bin/true"],
                    "propagation_servers": ["127.0.0.1:53"], "command_timeout": "11m",
                }),
                "command_timeout",
            ),
            (
                serde_json::json!({
                    "provider": "exec", "command": ["/bin/true"],
                    "propagation_servers": ["127.0.0.1:53"], "propagation_timeout": "0s",
                }),
                "propagation_timeout",
            ),
        ];
        for (json, want) in cases {
            let (key, _) = settings(json.clone()).check().unwrap_err();
            assert_eq!(key, want, "{json}");
        }
        let exec = settings(serde_json::json!({
            "provider": "exec", "command": ["/bin/true"], "propagation_servers": ["127.0.0.1:53"],
        }));
        assert_eq!(exec.check(), Ok(()));
        let rfc = settings(serde_json::json!({
            "provider": "rfc2136", "server": "127.0.0.1:53", "zone": "a.test",
            "tsig_key_name": "k", "tsig_secret_file": "/k", "tsig_algorithm": "hmac-sha512",
        }));
        assert_eq!(rfc.check(), Ok(()));
        assert_eq!(rfc.ttl, 60);
        assert!(rfc.covers("*.a.test") && rfc.covers("x.A.test") && !rfc.covers("xa.test"));
        assert!(
            serde_json::from_value::<Dns01Settings>(serde_json::json!({
                "provider": "rfc2136", "tsig_algorithm": "hmac-md5",
            }))
            .is_err()
        );
    }

    // r[verify issue.certificates]
    #[test]
    fn a_hostname_entry_is_a_one_name_certificate_on_the_same_path() {
        let config: IssuanceConfig = serde_json::from_value(serde_json::json!({
            "hostname": [{ "name": "a.example", "source": "local" }],
            "certificate": [{ "names": ["b.example", "www.b.example"], "source": "acme" }],
        }))
        .unwrap();
        assert_eq!(
            config.planned(),
            vec![
                PlannedCertificate {
                    entry: Entry::Hostname(0),
                    names: vec!["a.example".into()],
                    source: SourceKind::Local,
                    challenge: Challenge::Http01,
                    deploy: None,
                    on_renew: None,
                },
                PlannedCertificate {
                    entry: Entry::Certificate(0),
                    names: vec!["b.example".into(), "www.b.example".into()],
                    source: SourceKind::Acme,
                    challenge: Challenge::Http01,
                    deploy: None,
                    on_renew: None,
                },
            ]
        );
        assert!(
            serde_json::from_value::<IssuanceConfig>(serde_json::json!({
                "certificate": [{ "name": "b.example", "source": "acme" }],
            }))
            .is_err(),
            "`names`, not `name`"
        );
    }

    // r[verify issue.on-renew]
    #[test]
    fn on_renew_is_an_argv_list_given_to_every_certificate_or_its_own() {
        let config: IssuanceConfig = serde_json::from_value(serde_json::json!({
            "on_renew": ["/usr/sbin/nginx", "-s", "reload"],
            "on_renew_timeout": "20s",
            "hostname": [{ "name": "a.example", "source": "local" }],
            "certificate": [{
                "names": ["b.example"], "source": "local",
                "on_renew": ["/usr/local/bin/reload-b"],
            }],
        }))
        .unwrap();
        assert_eq!(config.check_hooks(), Ok(()));
        assert_eq!(config.on_renew_timeout(), Duration::from_secs(20));
        let planned = config.planned();
        assert_eq!(
            planned[0].on_renew.as_deref(),
            Some(&["/usr/sbin/nginx".to_owned(), "-s".into(), "reload".into()][..])
        );
        assert_eq!(
            planned[1].on_renew.as_deref(),
            Some(&["/usr/local/bin/reload-b".to_owned()][..])
        );
        // A shell line is not an argv: a string is refused.
        assert!(
            serde_json::from_value::<IssuanceConfig>(serde_json::json!({
                "on_renew": "systemctl reload nginx",
            }))
            .is_err()
        );
        for (value, key) in [
            (serde_json::json!({ "on_renew": [] }), "on_renew"),
            (
                serde_json::json!({
                    "certificate": [{ "names": ["b.example"], "source": "local", "on_renew": [""] }],
                }),
                "certificate[0].on_renew",
            ),
            (
                serde_json::json!({ "on_renew_timeout": "0s" }),
                "on_renew_timeout",
            ),
            (
                serde_json::json!({ "on_renew_timeout": "601s" }),
                "on_renew_timeout",
            ),
        ] {
            let config: IssuanceConfig = serde_json::from_value(value.clone()).unwrap();
            assert_eq!(config.check_hooks().unwrap_err().0, key, "{value}");
        }
        // A tick waits for its hooks: at most ten minutes.
        let longest: IssuanceConfig =
            serde_json::from_value(serde_json::json!({ "on_renew_timeout": "10m" })).unwrap();
        assert_eq!(longest.check_hooks(), Ok(()));
        let longer: IssuanceConfig =
            serde_json::from_value(serde_json::json!({ "on_renew_timeout": "11m" })).unwrap();
        assert_eq!(
            longer.check_hooks(),
            Err(("on_renew_timeout".into(), "must be at most 10m"))
        );
    }
}
