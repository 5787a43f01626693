//! `[gateway]` converted (the high layer): holdfast-gateway's config, the token keys' sources,
//! the limits a running gateway takes live, and what a reload compares.

use std::path::{Path, PathBuf};
use std::time::Duration;

use holdfast_gateway::{AuthSettings, ClusterConfig, GatewayConfig, KeySource, TlsFiles, TokenKey};
use toml::Spanned;

use super::gateway::{CloseSetting, GatewaySection, RoomsDefaultSetting, issuance_bundle};
use crate::duration::ConfigDuration;

pub(super) fn value<T: Copy>(v: &Option<Spanned<T>>, default: T) -> T {
    v.as_ref().map_or(default, |v| *v.get_ref())
}

pub(super) fn duration(v: &Option<Spanned<ConfigDuration>>, default: Duration) -> Duration {
    v.as_ref().map_or(default, |v| v.get_ref().get())
}

// i[impl node.gateway.token-key+2]
/// Reads the HS256 secret of `token_key_file` (or of a file of `[gateway.auth] secrets`) with
/// holdfast-gateway's reader: a regular file, not a symlink, no group or other permission bits,
/// at most 1 MiB, read from the descriptor it checked; its text trimmed, at least
/// [`MIN_TOKEN_KEY_LEN`] bytes, and not a public key.
pub fn read_token_secret(path: &Path) -> Result<Vec<u8>, String> {
    holdfast_gateway::read_secret(path).map_err(|e| e.to_string())
}

/// Where a section's token keys come from, and the claims checked: what each start of the
/// module reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenKeySources {
    /// `token_key_file`, then `[gateway.auth] secrets`.
    pub secret_files: Vec<PathBuf>,
    /// `[gateway.auth] public_keys`.
    pub public_key_files: Vec<PathBuf>,
    /// The claims checked.
    pub settings: AuthSettings,
}

impl TokenKeySources {
    // r[impl gateway.auth.keys]
    /// The keys, every file read as its declared kind; the gateway re-reads them when they
    /// change.
    pub fn load(&self) -> Result<TokenKey, String> {
        TokenKey::from_sources(self.sources(), self.settings.clone()).map_err(|e| e.to_string())
    }

    /// Every file with its kind.
    pub fn sources(&self) -> Vec<KeySource> {
        self.secret_files
            .iter()
            .map(KeySource::secret)
            .chain(self.public_key_files.iter().map(KeySource::public))
            .collect()
    }

    /// The HS256 secret `holdfast gateway token` signs with: the first secret file's
    /// (`token_key_file`, else the first of `[gateway.auth] secrets`).
    pub fn hs256_secret(&self) -> Result<Vec<u8>, String> {
        match self.secret_files.first() {
            Some(f) => read_token_secret(f),
            None => Err(
                "the configured token keys hold no HS256 secret (give gateway.token_key_file, \
                 or a file in [gateway.auth] secrets): a token signed with a public key's \
                 private half cannot be minted here"
                    .into(),
            ),
        }
    }
}

// i[impl node.gateway.token]
/// An HS256 token for `user` from `section`'s secret, valid from `now` for `ttl`, allowed
/// `rooms` when given, with the configured audience (the first) and issuer so the gateway
/// accepts it.
pub fn mint_token(
    section: &GatewaySection,
    user: &str,
    rooms: Option<Vec<String>>,
    ttl: Duration,
    now: std::time::SystemTime,
) -> Result<String, String> {
    if rooms
        .as_ref()
        .is_some_and(|r| r.iter().any(|r| r.is_empty()))
    {
        return Err("--rooms: a room name must not be empty".into());
    }
    if ttl.as_secs() == 0 {
        return Err("--ttl: must be at least 1s".into());
    }
    let sources = section.token_key_sources();
    let secret = sources.hs256_secret()?;
    let now = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| "the clock is before 1970".to_owned())?
        .as_secs();
    let claims = holdfast_gateway::MintClaims {
        sub: user.to_owned(),
        exp: now.saturating_add(ttl.as_secs()),
        iat: Some(now),
        aud: sources.settings.audience.first().cloned(),
        iss: sources.settings.issuer.clone(),
        rooms,
        ..holdfast_gateway::MintClaims::default()
    };
    holdfast_gateway::Signer::new(&secret)
        .sign(&claims)
        .map_err(|e| e.to_string())
}

impl GatewaySection {
    /// Where this section's token keys come from.
    pub fn token_key_sources(&self) -> TokenKeySources {
        let a = &self.auth;
        let list = |l: &Option<Spanned<Vec<PathBuf>>>| {
            l.as_ref().map(|k| k.get_ref().clone()).unwrap_or_default()
        };
        TokenKeySources {
            secret_files: self
                .token_key_file
                .iter()
                .map(|f| f.get_ref().clone())
                .chain(list(&a.secrets))
                .collect(),
            public_key_files: list(&a.public_keys),
            settings: AuthSettings {
                audience: a
                    .audience
                    .as_ref()
                    .map(|v| v.get_ref().clone())
                    .unwrap_or_default(),
                issuer: a.issuer.as_ref().map(|i| i.get_ref().clone()),
                leeway: duration(&a.leeway, holdfast_gateway::DEFAULT_LEEWAY),
                rooms_default: value(&a.rooms_default, RoomsDefaultSetting::None).into(),
            },
        }
    }

    /// The limits a running gateway takes live (`r[node.reload.live-gateway+2]`): this section's,
    /// else holdfast-gateway's defaults. Reads no file.
    pub fn live_limits(&self) -> holdfast_gateway::LiveLimits {
        let defaults = GatewayConfig::new(
            *self.listen.get_ref(),
            String::new(),
            TokenKey::new(Vec::new()),
        )
        .live_limits();
        holdfast_gateway::LiveLimits {
            per_ip_limit: value(&self.per_ip_limit, defaults.per_ip_limit),
            unauthenticated_limit: value(
                &self.unauthenticated_limit,
                defaults.unauthenticated_limit,
            ),
            unauthenticated_per_ip_limit: value(
                &self.unauthenticated_per_ip_limit,
                defaults.unauthenticated_per_ip_limit,
            ),
            max_rooms_per_connection: value(
                &self.max_rooms_per_connection,
                defaults.max_rooms_per_connection,
            ),
            max_room_name: value(&self.max_room_name, defaults.max_room_name),
        }
    }

    // r[impl node.reload.diff+4]
    /// This section converted, no file read: what the gateway module is built from and what a
    /// reload compares. `data_dir` holds the issuance store (for `tls.from_issuance`); `seed`
    /// seeds the cluster's backoff.
    pub fn settings(&self, data_dir: &Path, seed: u64) -> GatewaySettings {
        let d = GatewayConfig::new(
            *self.listen.get_ref(),
            String::new(),
            TokenKey::new(Vec::new()),
        );
        let max_message_size = value(&self.max_message_size, d.max_message_size);
        GatewaySettings {
            listen: *self.listen.get_ref(),
            replica_id: self.replica_id.as_ref().map(|r| r.get_ref().clone()),
            advertise: self.advertise.as_ref().map(|a| a.get_ref().clone()),
            token_keys: self.token_key_sources(),
            key_reload_interval: duration(&self.auth.reload_interval, d.key_reload_interval),
            publish_token_file: self
                .publish_token_file
                .as_ref()
                .map(|f| f.get_ref().clone()),
            max_message_size,
            send_queue: value(&self.send_queue, d.send_queue),
            ping_interval: duration(&self.ping_interval, d.ping_interval),
            idle_timeout: duration(&self.idle_timeout, d.idle_timeout),
            drain_total: duration(&self.drain.total, d.drain.total),
            drain_close: value(&self.drain.close, CloseSetting::FromReason).into(),
            drain_retry_after_secs: self
                .drain
                .retry_after
                .as_ref()
                .map_or(d.drain.retry_after_secs, |r| {
                    retry_after_secs(r.get_ref().get())
                }),
            limits: self.live_limits(),
            history: holdfast_gateway::HistoryConfig {
                size: value(&self.history_size, d.history.size),
                ttl: duration(&self.history_ttl, d.history.ttl),
                max_bytes: value(&self.history_max_bytes, d.history.max_bytes),
            },
            tls: self.tls.as_ref().and_then(|t| {
                let t = t.get_ref();
                match (&t.from_issuance, &t.cert, &t.key) {
                    // The issuance store keeps key and chain in one bundle: both files are it.
                    (Some(host), _, _) => {
                        let bundle = issuance_bundle(data_dir, host);
                        Some(TlsFiles {
                            cert: bundle.clone(),
                            key: bundle,
                        })
                    }
                    (None, Some(cert), Some(key)) => Some(TlsFiles {
                        cert: cert.clone(),
                        key: key.clone(),
                    }),
                    // Refused when the config was validated.
                    _ => None,
                }
            }),
            cluster: self.cluster_config(seed),
        }
    }

    /// holdfast-gateway's config for this section: `node_id` is the default replica id,
    /// `data_dir` holds the issuance store (for `tls.from_issuance`).
    pub fn gateway_config(&self, node_id: &str, key: TokenKey, data_dir: &Path) -> GatewayConfig {
        self.gateway_config_beside(node_id, key, data_dir, None)
    }

    /// As [`GatewaySection::gateway_config`], on a node whose admin token is in
    /// `admin_token_file`: a publish token that is now the admin token gives no publish key.
    pub fn gateway_config_beside(
        &self,
        node_id: &str,
        key: TokenKey,
        data_dir: &Path,
        admin_token_file: Option<&Path>,
    ) -> GatewayConfig {
        self.settings(data_dir, 0)
            .gateway_config(node_id, key, admin_token_file)
    }
}

/// `[gateway]` converted, no file read: what the gateway module is built from, and what a reload
/// compares (two are equal exactly when the module would be built the same). Its key files are
/// named, never read here; a Redis URL's password is hidden by `ClusterConfig`'s `Debug`.
#[derive(Debug, Clone, PartialEq)]
pub struct GatewaySettings {
    /// `listen`.
    pub listen: std::net::SocketAddr,
    /// `replica_id` (none: the node id).
    pub replica_id: Option<String>,
    /// `advertise`.
    pub advertise: Option<String>,
    /// The token keys' files and the claims checked.
    pub token_keys: TokenKeySources,
    /// `[gateway.auth] reload_interval`.
    pub key_reload_interval: Duration,
    /// `publish_token_file`.
    pub publish_token_file: Option<PathBuf>,
    /// `max_message_size` (and the largest frame).
    pub max_message_size: usize,
    /// `send_queue`.
    pub send_queue: usize,
    /// `ping_interval`.
    pub ping_interval: Duration,
    /// `idle_timeout`.
    pub idle_timeout: Duration,
    /// `[gateway.drain] total`.
    pub drain_total: Duration,
    /// `[gateway.drain] close`.
    pub drain_close: holdfast_gateway::CloseChoice,
    /// `[gateway.drain] retry_after`, in whole seconds.
    pub drain_retry_after_secs: u32,
    /// The limits a running gateway takes live.
    pub limits: holdfast_gateway::LiveLimits,
    /// `history_size`, `history_ttl`, `history_max_bytes`.
    pub history: holdfast_gateway::HistoryConfig,
    /// `[gateway.tls]`: the files served.
    pub tls: Option<TlsFiles>,
    /// `[gateway.cluster]`.
    pub cluster: ClusterConfig,
}

impl GatewaySettings {
    /// holdfast-gateway's config: `node_id` is the default replica id; on a node whose admin
    /// token is in `admin_token_file`, a publish token that is now the admin token gives no
    /// publish key.
    pub fn gateway_config(
        &self,
        node_id: &str,
        key: TokenKey,
        admin_token_file: Option<&Path>,
    ) -> GatewayConfig {
        let replica_id = self
            .replica_id
            .clone()
            .unwrap_or_else(|| node_id.to_owned());
        let mut c = GatewayConfig::new(self.listen, replica_id, key);
        c.advertise = self.advertise.clone();
        c.max_message_size = self.max_message_size;
        // A frame can never carry more than the message it belongs to.
        c.max_frame_size = c.max_message_size;
        c.send_queue = self.send_queue;
        c.ping_interval = self.ping_interval;
        c.idle_timeout = self.idle_timeout;
        c.key_reload_interval = self.key_reload_interval;
        c.drain.total = self.drain_total;
        c.drain.close = self.drain_close;
        c.drain.retry_after_secs = self.drain_retry_after_secs;
        let limits = self.limits;
        c.per_ip_limit = limits.per_ip_limit;
        c.unauthenticated_limit = limits.unauthenticated_limit;
        c.unauthenticated_per_ip_limit = limits.unauthenticated_per_ip_limit;
        c.max_rooms_per_connection = limits.max_rooms_per_connection;
        c.max_room_name = limits.max_room_name;
        c.history = self.history;
        c.tls = self.tls.clone();
        // Checked at validation; a file broken since then leaves publishing over TCP refused,
        // and says so here (the 403 alone would read as "no key configured").
        c.publish_key = self.publish_token_file.as_ref().and_then(|f| {
            match crate::config::token::read(f) {
                // i[impl node.gateway.publish.distinct]
                // Validation compared the files; either may have changed since.
                Ok(t)
                    if admin_token_file
                        .and_then(|a| crate::config::token::read(a).ok())
                        .is_some_and(|a| a.matches(t.expose())) =>
                {
                    tracing::error!(
                        file = %f.display(),
                        "gateway.publish_token_file holds the admin token: POST /v1/publish over TCP is refused until it differs and the gateway restarts"
                    );
                    None
                }
                Ok(t) => Some(holdfast_gateway::PublishKey::new(t.expose())),
                Err(error) => {
                    tracing::error!(
                        file = %f.display(),
                        %error,
                        "cannot read gateway.publish_token_file: POST /v1/publish over TCP is refused until it is fixed and the gateway restarts"
                    );
                    None
                }
            }
        });
        c
    }
}

impl GatewaySection {
    /// holdfast-gateway's cluster settings (absent section: memory backends), seeded.
    pub fn cluster_config(&self, seed: u64) -> ClusterConfig {
        let mut c = ClusterConfig {
            seed: Some(seed),
            ..ClusterConfig::default()
        };
        if let Some(section) = &self.cluster {
            let s = section.get_ref();
            c.etcd = s
                .etcd
                .as_ref()
                .map(|e| e.get_ref().clone())
                .unwrap_or_default();
            if let Some(p) = &s.etcd_prefix {
                c.etcd_prefix = p.clone();
            }
            c.lease_ttl = duration(&s.lease_ttl, c.lease_ttl);
            c.redis = s.redis.as_ref().map(|r| r.get_ref().clone());
            if let Some(p) = &s.redis_prefix {
                c.redis_prefix = p.clone();
            }
            c.timeout = duration(&s.timeout, c.timeout);
        }
        c
    }
}

fn retry_after_secs(d: Duration) -> u32 {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    u32::try_from(secs).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify node.reload.live-gateway+2]
    #[test]
    fn the_live_limits_are_the_sections_and_the_started_gateways_with_a_file_gone() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("gone.token");
        let section: GatewaySection = toml::from_str(&format!(
            "listen = \"127.0.0.1:0\"\ntoken_key_file = \"{key}\"\n\
             publish_token_file = \"{key}\"\nper_ip_limit = 3\nmax_room_name = 7\n",
            key = missing.display()
        ))
        .unwrap();
        let limits = section.live_limits();
        assert_eq!(limits.per_ip_limit, 3);
        assert_eq!(limits.max_room_name, 7);
        // The unset ones are holdfast-gateway's defaults, as the gateway starts with.
        let started = section
            .gateway_config("n", TokenKey::new(Vec::new()), dir.path())
            .live_limits();
        assert_eq!(limits, started);
        let defaults = GatewayConfig::new(
            *section.listen.get_ref(),
            String::new(),
            TokenKey::new(Vec::new()),
        );
        assert_eq!(
            limits.max_rooms_per_connection,
            defaults.max_rooms_per_connection
        );
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_secs(Duration::from_secs(2)), 2);
        assert_eq!(retry_after_secs(Duration::from_millis(1500)), 2);
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
    }
}
