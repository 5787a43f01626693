//! The `[gateway]` section: the WebSocket gateway as the node runs it, mapped onto
//! holdfast-gateway's [`GatewayConfig`].
//!
//! Client tokens are JWTs. Their keys come from files of a declared kind: `token_key_file` and
//! `[gateway.auth] secrets` (HS256 secrets: regular files private to their owner, not symlinks)
//! and `[gateway.auth] public_keys` (PEM public keys or JWKS files, never read as secrets). Every
//! file is read by holdfast-gateway's one reader, at validation, at each start of the module and
//! at each reload of the running gateway; no key appears in any output.

use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use holdfast_gateway::{
    AuthSettings, CloseChoice, ClusterConfig, GatewayConfig, KeyKind, KeySource, RoomsDefault,
    TlsFiles, TokenKey,
};
use serde::Deserialize;
use toml::Spanned;

use crate::config::ConfigError;
use crate::duration::ConfigDuration;

/// The shortest token key accepted (bytes): a shorter HMAC secret is guessable.
pub const MIN_TOKEN_KEY_LEN: usize = holdfast_gateway::MIN_SECRET_LEN;

/// `[gateway]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewaySection {
    /// The TCP address clients connect to (port 0 picks one; `/v1/gateway` names it).
    pub listen: Spanned<SocketAddr>,
    /// This replica's id in the cluster (default: the node id).
    #[serde(default)]
    pub replica_id: Option<Spanned<String>>,
    /// The address the service registry advertises (default: the bound address).
    #[serde(default)]
    pub advertise: Option<Spanned<String>>,
    /// A file holding an HS256 secret client tokens (JWTs) may be signed with (mode 0600 or
    /// stricter); required unless `[gateway.auth]` names a secret or a public key.
    #[serde(default)]
    pub token_key_file: Option<Spanned<PathBuf>>,
    /// A file holding the bearer token application backends publish with (`POST /v1/publish`),
    /// readable by its owner only; distinct from `admin.token_file`, so a backend that can
    /// publish cannot drain or reload (default: none, `/v1/publish` only over the Unix socket).
    #[serde(default)]
    pub publish_token_file: Option<Spanned<PathBuf>>,
    /// `[gateway.auth]`: more token keys and the claims checked.
    #[serde(default)]
    pub auth: AuthSection,
    /// The largest message (and frame) a client may send, in bytes (default 65536).
    #[serde(default)]
    pub max_message_size: Option<Spanned<usize>>,
    /// Messages queued per connection before it counts as a slow consumer (default 64).
    #[serde(default)]
    pub send_queue: Option<Spanned<usize>>,
    /// How often the server pings (default 20 s).
    #[serde(default)]
    pub ping_interval: Option<Spanned<ConfigDuration>>,
    /// A connection from which nothing arrived for this long is closed (default 60 s).
    #[serde(default)]
    pub idle_timeout: Option<Spanned<ConfigDuration>>,
    /// Open connections allowed per source IP, authenticated or not (default 256; 0: no limit).
    #[serde(default)]
    pub per_ip_limit: Option<Spanned<usize>>,
    /// Connections allowed not yet authenticated, in all (default 1024; 0: no limit).
    #[serde(default)]
    pub unauthenticated_limit: Option<Spanned<usize>>,
    /// Connections allowed not yet authenticated per source IP (an IPv4 address or an IPv6 /64),
    /// so one source cannot take the unauthenticated places from every other (default 32; 0: no
    /// limit).
    #[serde(default)]
    pub unauthenticated_per_ip_limit: Option<Spanned<usize>>,
    /// Rooms one connection may be in at once (default 64; 0: no limit).
    #[serde(default)]
    pub max_rooms_per_connection: Option<Spanned<usize>>,
    /// The longest room name a client may join, in bytes (default 128; 0: no limit).
    #[serde(default)]
    pub max_room_name: Option<Spanned<usize>>,
    /// Messages each room keeps for clients that rejoin with `since` (default 100, at most
    /// 100000; 0: no history, such a rejoin is told of a gap).
    #[serde(default)]
    pub history_size: Option<Spanned<usize>>,
    /// The age after which a message leaves its room's history (default 5 m, at most 24 h).
    #[serde(default)]
    pub history_ttl: Option<Spanned<ConfigDuration>>,
    /// The bytes of message text all rooms' histories hold together on one node (default
    /// 64 MiB, at least 1; in a cluster Redis holds the history, bound by `history_size`).
    #[serde(default)]
    pub history_max_bytes: Option<Spanned<usize>>,
    /// `[gateway.drain]`.
    #[serde(default)]
    pub drain: DrainSection,
    /// `[gateway.tls]`: serve `wss://` (absent: plain `ws://`).
    #[serde(default)]
    pub tls: Option<Spanned<TlsSection>>,
    /// `[gateway.cluster]`: etcd and Redis (absent: the single-node memory backends).
    #[serde(default)]
    pub cluster: Option<Spanned<ClusterSection>>,
}

/// `[gateway.auth]`: how client tokens (JWTs) are verified.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    /// HS256 secret files, checked as `token_key_file` is (default: none). All keys are used at
    /// once, so a new key can be added before the old one goes.
    #[serde(default)]
    pub secrets: Option<Spanned<Vec<PathBuf>>>,
    /// Public key files, each a PEM public key (RSA for RS256, EC P-256 for ES256, Ed25519 for
    /// EdDSA) or a JWKS (`{"keys": [...]}`, chosen by the token's `kid`); never read as a
    /// secret (default: none).
    #[serde(default)]
    pub public_keys: Option<Spanned<Vec<PathBuf>>>,
    /// What an auth token without a `rooms` claim may join: `"none"` (default) or `"any"`.
    #[serde(default)]
    pub rooms_default: Option<Spanned<RoomsDefaultSetting>>,
    /// Accepted audiences: when given, a token's `aud` must name one (default: not checked).
    #[serde(default)]
    pub audience: Option<Spanned<Vec<String>>>,
    /// When given, a token's `iss` must be this (default: not checked).
    #[serde(default)]
    pub issuer: Option<Spanned<String>>,
    /// Clock skew allowed on `exp`, `nbf` and `iat` (default 30 s, at most 5 m).
    #[serde(default)]
    pub leeway: Option<Spanned<ConfigDuration>>,
    /// How often the key files are checked for a change (default 5 s).
    #[serde(default)]
    pub reload_interval: Option<Spanned<ConfigDuration>>,
}

/// `gateway.auth.rooms_default`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RoomsDefaultSetting {
    /// No room: such a token joins only the rooms its subscription tokens open.
    #[default]
    None,
    /// Any room.
    Any,
}

impl From<RoomsDefaultSetting> for RoomsDefault {
    fn from(r: RoomsDefaultSetting) -> Self {
        match r {
            RoomsDefaultSetting::None => RoomsDefault::None,
            RoomsDefaultSetting::Any => RoomsDefault::Any,
        }
    }
}

/// The longest `gateway.auth.leeway` accepted.
pub const MAX_LEEWAY: Duration = Duration::from_secs(300);

/// `[gateway.tls]`: a PEM pair, or the issuance module's certificate for a hostname.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// The certificate chain (PEM).
    #[serde(default)]
    pub cert: Option<PathBuf>,
    /// The private key (PEM).
    #[serde(default)]
    pub key: Option<PathBuf>,
    /// A hostname of the `[issuance]` section: its key and chain in the issuance store.
    #[serde(default)]
    pub from_issuance: Option<String>,
}

/// `[gateway.cluster]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSection {
    /// etcd endpoints (`http://HOST:PORT`); empty keeps the service registry in memory.
    #[serde(default)]
    pub etcd: Option<Spanned<Vec<String>>>,
    /// The etcd key prefix (default `/holdfast/gateway`).
    #[serde(default)]
    pub etcd_prefix: Option<String>,
    /// The registration lease's time to live (default 10 s).
    #[serde(default)]
    pub lease_ttl: Option<Spanned<ConfigDuration>>,
    /// The Redis URL (`redis://HOST:PORT`); absent keeps the routing map and the bus in memory.
    #[serde(default)]
    pub redis: Option<Spanned<String>>,
    /// The Redis key and channel prefix (default `holdfast:gateway`).
    #[serde(default)]
    pub redis_prefix: Option<String>,
    /// The bound on every backend call (default 2 s).
    #[serde(default)]
    pub timeout: Option<Spanned<ConfigDuration>>,
}

/// Where the issuance module keeps `hostname`'s key and chain (one PEM bundle), under the node's
/// data directory.
pub fn issuance_bundle(data_dir: &Path, hostname: &str) -> PathBuf {
    data_dir
        .join("issuance")
        .join("certs")
        .join(format!("{hostname}.pem"))
}

/// `[gateway.drain]`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainSection {
    /// The cap on the whole drain (default 5 s; the stop plan's share for the gateway group caps
    /// it too).
    #[serde(default)]
    pub total: Option<Spanned<ConfigDuration>>,
    /// Which close code the drain sends (default `"from-reason"`).
    #[serde(default)]
    pub close: Option<Spanned<CloseSetting>>,
    /// The Retry-After sent with a 503 to upgrades refused while draining (default 2 s; whole
    /// seconds, rounded up).
    #[serde(default)]
    pub retry_after: Option<Spanned<ConfigDuration>>,
}

/// `gateway.drain.close`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CloseSetting {
    /// 1012 when the node restarts (SIGTERM, SIGINT, `holdfast drain --restart`), 1001 when it
    /// leaves for good (`holdfast drain`).
    #[default]
    FromReason,
    /// Always 1012 (Service Restart) with a reconnect hint.
    Restart,
    /// Always 1001 (Going Away).
    GoingAway,
}

impl From<CloseSetting> for CloseChoice {
    fn from(c: CloseSetting) -> Self {
        match c {
            CloseSetting::FromReason => CloseChoice::FromReason,
            CloseSetting::Restart => CloseChoice::Restart,
            CloseSetting::GoingAway => CloseChoice::GoingAway,
        }
    }
}

fn value<T: Copy>(v: &Option<Spanned<T>>, default: T) -> T {
    v.as_ref().map_or(default, |v| *v.get_ref())
}

fn duration(v: &Option<Spanned<ConfigDuration>>, default: Duration) -> Duration {
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

    /// The limits a running gateway takes live (`r[node.reload.live-gateway]`): this section's,
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
        let replica_id = self
            .replica_id
            .as_ref()
            .map_or_else(|| node_id.to_owned(), |r| r.get_ref().clone());
        let mut c = GatewayConfig::new(*self.listen.get_ref(), replica_id, key);
        c.advertise = self.advertise.as_ref().map(|a| a.get_ref().clone());
        c.max_message_size = value(&self.max_message_size, c.max_message_size);
        // A frame can never carry more than the message it belongs to.
        c.max_frame_size = c.max_message_size;
        c.send_queue = value(&self.send_queue, c.send_queue);
        c.ping_interval = duration(&self.ping_interval, c.ping_interval);
        c.idle_timeout = duration(&self.idle_timeout, c.idle_timeout);
        c.key_reload_interval = duration(&self.auth.reload_interval, c.key_reload_interval);
        c.drain.total = duration(&self.drain.total, c.drain.total);
        c.drain.close = value(&self.drain.close, CloseSetting::FromReason).into();
        if let Some(r) = &self.drain.retry_after {
            c.drain.retry_after_secs = retry_after_secs(r.get_ref().get());
        }
        let limits = self.live_limits();
        c.per_ip_limit = limits.per_ip_limit;
        c.unauthenticated_limit = limits.unauthenticated_limit;
        c.unauthenticated_per_ip_limit = limits.unauthenticated_per_ip_limit;
        c.max_rooms_per_connection = limits.max_rooms_per_connection;
        c.max_room_name = limits.max_room_name;
        c.history.size = value(&self.history_size, c.history.size);
        c.history.ttl = duration(&self.history_ttl, c.history.ttl);
        c.history.max_bytes = value(&self.history_max_bytes, c.history.max_bytes);
        // Checked at validation; a file broken since then leaves publishing over TCP refused,
        // and says so here (the 403 alone would read as "no key configured").
        c.publish_key = self.publish_token_file.as_ref().and_then(|f| {
            match crate::config::token::read(f.get_ref()) {
                // i[impl node.gateway.publish.distinct]
                // Validation compared the files; either may have changed since.
                Ok(t)
                    if admin_token_file
                        .and_then(|a| crate::config::token::read(a).ok())
                        .is_some_and(|a| a.matches(t.expose())) =>
                {
                    tracing::error!(
                        file = %f.get_ref().display(),
                        "gateway.publish_token_file holds the admin token: POST /v1/publish over TCP is refused until it differs and the gateway restarts"
                    );
                    None
                }
                Ok(t) => Some(holdfast_gateway::PublishKey::new(t.expose())),
                Err(error) => {
                    tracing::error!(
                        file = %f.get_ref().display(),
                        %error,
                        "cannot read gateway.publish_token_file: POST /v1/publish over TCP is refused until it is fixed and the gateway restarts"
                    );
                    None
                }
            }
        });
        c.tls = self.tls.as_ref().and_then(|t| {
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
        });
        c
    }

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

/// The largest `max_message_size` accepted (bytes).
pub const MAX_MESSAGE_SIZE: usize = 64 * 1024 * 1024;
/// The largest `send_queue` accepted.
pub const MAX_SEND_QUEUE: usize = 65_536;
/// The largest `history_size` accepted.
pub const MAX_HISTORY_SIZE: usize = 100_000;
/// The longest `history_ttl` accepted.
pub const MAX_HISTORY_TTL: Duration = Duration::from_secs(24 * 3600);

type At<'a> = &'a dyn Fn(Option<Range<usize>>, &str, String) -> ConfigError;

/// Whether the gateway listening on `listen` holds the TLS-ALPN-01 bind `bind`: the same port
/// (not 0) on addresses that overlap (the same, or either unspecified), so the two could not
/// both bind it (`r[node.gateway.tls-alpn01]`).
pub fn holds_tls_alpn01_bind(listen: std::net::SocketAddr, bind: std::net::SocketAddr) -> bool {
    bind.port() != 0
        && listen.port() == bind.port()
        && (listen.ip() == bind.ip() || listen.ip().is_unspecified() || bind.ip().is_unspecified())
}

// i[impl node.gateway.config+4]
/// `[gateway]` beyond its types: a token key file that is safe, readable and long enough; sizes
/// and durations in range; an idle timeout longer than the ping interval; a TLS source that is
/// one pair or one issuance hostname (of `issuance_hosts`); cluster endpoints that are URLs.
pub fn validate(
    section: &Spanned<GatewaySection>,
    issuance_hosts: &[String],
    at: At<'_>,
) -> Result<(), ConfigError> {
    let g = section.get_ref();
    if let Some(tls) = &g.tls {
        validate_tls(tls, issuance_hosts, at)?;
    }
    if let Some(cluster) = &g.cluster {
        validate_cluster(cluster, at)?;
    }
    if let Some(id) = &g.replica_id {
        if id.get_ref().trim().is_empty() {
            return Err(at(
                Some(id.span()),
                "gateway.replica_id",
                "must not be empty (remove it to use the node id)".into(),
            ));
        }
    }
    if let Some(a) = &g.advertise {
        if a.get_ref().trim().is_empty() {
            return Err(at(
                Some(a.span()),
                "gateway.advertise",
                "must not be empty (remove it to advertise the bound address)".into(),
            ));
        }
    }
    validate_auth(section, at)?;
    // i[impl node.gateway.publish]
    if let Some(f) = &g.publish_token_file {
        if let Err(message) = crate::config::token::read(f.get_ref()) {
            return Err(at(Some(f.span()), "gateway.publish_token_file", message));
        }
    }
    if let Some(size) = &g.max_message_size {
        if !(1..=MAX_MESSAGE_SIZE).contains(size.get_ref()) {
            return Err(at(
                Some(size.span()),
                "gateway.max_message_size",
                format!("must be between 1 and {MAX_MESSAGE_SIZE} bytes"),
            ));
        }
    }
    if let Some(queue) = &g.send_queue {
        if !(1..=MAX_SEND_QUEUE).contains(queue.get_ref()) {
            return Err(at(
                Some(queue.span()),
                "gateway.send_queue",
                format!("must be between 1 and {MAX_SEND_QUEUE}"),
            ));
        }
    }
    if let Some(size) = &g.history_size {
        if *size.get_ref() > MAX_HISTORY_SIZE {
            return Err(at(
                Some(size.span()),
                "gateway.history_size",
                format!("must be at most {MAX_HISTORY_SIZE} (0: no history)"),
            ));
        }
    }
    if let Some(bytes) = &g.history_max_bytes {
        if *bytes.get_ref() == 0 {
            return Err(at(
                Some(bytes.span()),
                "gateway.history_max_bytes",
                "must be at least 1 (history_size = 0 turns history off)".into(),
            ));
        }
    }
    if let Some(ttl) = &g.history_ttl {
        if ttl.get_ref().get() > MAX_HISTORY_TTL {
            return Err(at(
                Some(ttl.span()),
                "gateway.history_ttl",
                "must be at most 24h".into(),
            ));
        }
    }
    for (key, d) in [
        ("gateway.history_ttl", &g.history_ttl),
        ("gateway.ping_interval", &g.ping_interval),
        ("gateway.idle_timeout", &g.idle_timeout),
        ("gateway.drain.total", &g.drain.total),
        ("gateway.drain.retry_after", &g.drain.retry_after),
    ] {
        if let Some(d) = d {
            if d.get_ref().get().is_zero() {
                return Err(at(Some(d.span()), key, "must be longer than zero".into()));
            }
        }
    }
    let defaults = GatewayConfig::new(*g.listen.get_ref(), "-", TokenKey::new(Vec::<u8>::new()));
    let ping = duration(&g.ping_interval, defaults.ping_interval);
    let idle = duration(&g.idle_timeout, defaults.idle_timeout);
    if idle <= ping {
        let span = g
            .idle_timeout
            .as_ref()
            .or(g.ping_interval.as_ref())
            .map(Spanned::span);
        return Err(at(
            span,
            "gateway.idle_timeout",
            format!(
                "must be longer than gateway.ping_interval ({ping:?}): a client answering every \
                 ping would still be closed as idle"
            ),
        ));
    }
    if let Some(total) = &g.drain.total {
        if total.get_ref().get() > Duration::from_secs(600) {
            return Err(at(
                Some(total.span()),
                "gateway.drain.total",
                "must be at most 10m".into(),
            ));
        }
    }
    Ok(())
}

// i[impl node.gateway.auth]
fn validate_auth(section: &Spanned<GatewaySection>, at: At<'_>) -> Result<(), ConfigError> {
    let g = section.get_ref();
    let a = &g.auth;
    if let Some(f) = &g.token_key_file {
        if let Err(message) = read_token_secret(f.get_ref()) {
            return Err(at(Some(f.span()), "gateway.token_key_file", message));
        }
    }
    let none = Vec::new();
    let secrets = a.secrets.as_ref().map_or(&none, |k| k.get_ref());
    let public = a.public_keys.as_ref().map_or(&none, |k| k.get_ref());
    if g.token_key_file.is_none() && secrets.is_empty() && public.is_empty() {
        return Err(at(
            a.secrets
                .as_ref()
                .or(a.public_keys.as_ref())
                .map(Spanned::span)
                .or(Some(section.span())),
            "gateway.auth",
            "no token key: give gateway.token_key_file, or files in [gateway.auth] secrets \
             (HS256 secrets) or public_keys (PEM public keys, JWKS)"
                .into(),
        ));
    }
    for (key, list, kind) in [
        ("gateway.auth.secrets", &a.secrets, KeyKind::Secret),
        ("gateway.auth.public_keys", &a.public_keys, KeyKind::Public),
    ] {
        if let Some(l) = list {
            for f in l.get_ref() {
                let source = KeySource {
                    path: f.clone(),
                    kind,
                };
                if let Err(e) = holdfast_gateway::token::load_source(&source) {
                    return Err(at(Some(l.span()), key, e.to_string()));
                }
            }
        }
    }
    if let Some(aud) = &a.audience {
        if aud.get_ref().iter().any(|s| s.trim().is_empty()) {
            return Err(at(
                Some(aud.span()),
                "gateway.auth.audience",
                "an audience must not be empty".into(),
            ));
        }
    }
    if let Some(iss) = &a.issuer {
        if iss.get_ref().trim().is_empty() {
            return Err(at(
                Some(iss.span()),
                "gateway.auth.issuer",
                "must not be empty (remove it to accept any issuer)".into(),
            ));
        }
    }
    if let Some(l) = &a.leeway {
        if l.get_ref().get() > MAX_LEEWAY {
            return Err(at(
                Some(l.span()),
                "gateway.auth.leeway",
                "must be at most 5m".into(),
            ));
        }
    }
    if let Some(r) = &a.reload_interval {
        if r.get_ref().get().is_zero() {
            return Err(at(
                Some(r.span()),
                "gateway.auth.reload_interval",
                "must be longer than zero".into(),
            ));
        }
    }
    Ok(())
}

fn validate_tls(
    section: &Spanned<TlsSection>,
    issuance_hosts: &[String],
    at: At<'_>,
) -> Result<(), ConfigError> {
    let t = section.get_ref();
    let span = Some(section.span());
    match (&t.from_issuance, &t.cert, &t.key) {
        (Some(host), None, None) => {
            // The store's file is named as the [issuance] section spells the hostname, so a
            // spelling differing in case only would name a file that is never written.
            if let Some(spelt) = issuance_hosts
                .iter()
                .find(|h| h.eq_ignore_ascii_case(host) && *h != host)
            {
                return Err(at(
                    span,
                    "gateway.tls.from_issuance",
                    format!(
                        "{host:?}: write the hostname as the [issuance] section does ({spelt:?}), \
                         which names its certificate file"
                    ),
                ));
            }
            if !issuance_hosts.iter().any(|h| h == host) {
                return Err(at(
                    span,
                    "gateway.tls.from_issuance",
                    format!(
                        "{host:?} is not a hostname of the [issuance] section: add it as an \
                         [[issuance.hostname]], or give cert and key"
                    ),
                ));
            }
            Ok(())
        }
        (None, Some(_), Some(_)) => Ok(()),
        (Some(_), _, _) => Err(at(
            span,
            "gateway.tls",
            "give either from_issuance or cert and key, not both".into(),
        )),
        (None, _, _) => Err(at(
            span,
            "gateway.tls",
            "needs both cert and key (PEM files), or from_issuance".into(),
        )),
    }
}

fn validate_cluster(section: &Spanned<ClusterSection>, at: At<'_>) -> Result<(), ConfigError> {
    let c = section.get_ref();
    let no_endpoints = Vec::new();
    let etcd = c.etcd.as_ref().map_or(&no_endpoints, |e| e.get_ref());
    let etcd_span = c.etcd.as_ref().map(Spanned::span);
    if let Some(bad) = etcd
        .iter()
        .find(|e| !(e.starts_with("http://") || e.starts_with("https://")))
    {
        return Err(at(
            etcd_span.clone(),
            "gateway.cluster.etcd",
            format!("invalid endpoint {bad:?}: write http://HOST:PORT"),
        ));
    }
    if !etcd.is_empty() && !holdfast_gateway::ETCD_SUPPORTED {
        return Err(at(
            etcd_span,
            "gateway.cluster.etcd",
            "this holdfast was built without etcd support (cargo feature `etcd`, which needs \
             protoc): rebuild with --features etcd (or holdfast-gateway/etcd), or remove etcd to keep the registry in memory"
                .into(),
        ));
    }
    if let Some(redis) = &c.redis {
        let url = redis.get_ref();
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            return Err(at(
                Some(redis.span()),
                "gateway.cluster.redis",
                format!("invalid URL {url:?}: write redis://HOST:PORT"),
            ));
        }
    }
    for (key, d) in [
        ("gateway.cluster.lease_ttl", &c.lease_ttl),
        ("gateway.cluster.timeout", &c.timeout),
    ] {
        if let Some(d) = d {
            if d.get_ref().get().is_zero() {
                return Err(at(Some(d.span()), key, "must be longer than zero".into()));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify node.reload.live-gateway]
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
