//! Client tokens: standard JWTs (RFC 7519) verified through the `jsonwebtoken` crate.
//!
//! A [`TokenKey`] holds the keys tokens are verified with — HS256 secrets, RS256, ES256 and
//! EdDSA public keys — and the claims checked besides the signature (`exp` required, `nbf` and
//! `iat`, the configured `aud` and `iss`, with a leeway). Keys come from files of a declared kind
//! ([`KeySource`]): secret files holding an HS256 secret (read only when private to their owner)
//! and public key files (a PEM public key, or a JWKS whose keys are chosen by the token's `kid`).
//! A file's kind is never guessed from its content, so a public key can never become an HMAC
//! secret. Several files are used at once so one can be rotated, and the files can be re-read
//! ([`TokenKey::reload`]): a broken new file keeps the previous keys and records a fault. [`Signer`] mints HS256 tokens (the
//! `holdfast gateway token` command, tests, benches and demos).
//!
//! No secret appears in `Debug` output or logs.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};

/// The default leeway on `exp`, `nbf` and `iat`: clocks of a backend and a node drift apart.
pub const DEFAULT_LEEWAY: Duration = Duration::from_secs(30);
/// How often the gateway re-reads its key files by default.
pub const DEFAULT_KEY_RELOAD: Duration = Duration::from_secs(5);
/// The shortest HS256 secret accepted (bytes): a shorter one is guessable.
pub const MIN_SECRET_LEN: usize = 16;

/// The algorithms the gateway accepts; `none` and the rest are refused.
const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::HS256,
    Algorithm::RS256,
    Algorithm::ES256,
    Algorithm::EdDSA,
];

/// Why a token was refused. [`TokenError::reason`] is its metric label.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a JWT, or its header or claims are not the expected JSON.
    #[error("invalid token")]
    Malformed,
    /// The header names an algorithm the gateway does not accept.
    #[error("token algorithm not accepted")]
    Algorithm,
    /// No configured key matches the token's algorithm and `kid`.
    #[error("unknown token key")]
    UnknownKey,
    /// No key of the token's algorithm and `kid` verifies its signature.
    #[error("invalid token signature")]
    Signature,
    /// A required claim (`exp`, `sub`, and `aud`/`iss` when configured) is missing or empty.
    #[error("token lacks claim {0}")]
    MissingClaim(&'static str),
    /// `exp` plus the leeway has passed.
    #[error("token expired")]
    Expired,
    /// `nbf` lies further ahead than the leeway.
    #[error("token not yet valid")]
    NotYetValid,
    /// `iat` lies further ahead than the leeway.
    #[error("token issued in the future")]
    IssuedInFuture,
    /// `aud` does not name a configured audience.
    #[error("token audience not accepted")]
    Audience,
    /// `iss` is not the configured issuer.
    #[error("token issuer not accepted")]
    Issuer,
    /// `exp` lies beyond any time this system can represent: refused rather than trusted for
    /// ever.
    #[error("token expiry out of range")]
    ExpiryOutOfRange,
    /// A subscription token (with `room`) given to authenticate, or an auth token (with
    /// `rooms`, or without `room`) given to join a room.
    #[error("token of the wrong kind")]
    WrongKind,
}

impl TokenError {
    /// Every reason label, in a fixed order (the stats keep one counter each).
    pub const REASONS: [&'static str; 12] = [
        "malformed",
        "algorithm",
        "unknown_key",
        "signature",
        "missing_claim",
        "expired",
        "not_yet_valid",
        "issued_in_future",
        "audience",
        "issuer",
        "expiry_out_of_range",
        "wrong_kind",
    ];

    /// This refusal's label (one of [`TokenError::REASONS`]).
    pub fn reason(&self) -> &'static str {
        Self::REASONS[self.index()]
    }

    pub(crate) fn index(&self) -> usize {
        match self {
            Self::Malformed => 0,
            Self::Algorithm => 1,
            Self::UnknownKey => 2,
            Self::Signature => 3,
            Self::MissingClaim(_) => 4,
            Self::Expired => 5,
            Self::NotYetValid => 6,
            Self::IssuedInFuture => 7,
            Self::Audience => 8,
            Self::Issuer => 9,
            Self::ExpiryOutOfRange => 10,
            Self::WrongKind => 11,
        }
    }
}

/// Why key files could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// A file could not be read.
    #[error("{path}: {message}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the system said.
        message: String,
    },
    /// A file's content is not a key the gateway can use.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// No file was given.
    #[error("no token key configured")]
    Empty,
}

/// What a valid token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// The user (`sub`).
    pub user: String,
    /// The rooms the user may join (`rooms`: names, or prefixes ending in `*`); `None`: any
    /// (only for a token without `rooms` under [`RoomsDefault::Any`]).
    pub rooms: Option<Vec<String>>,
    /// The room a subscription token is for (`room`).
    pub room: Option<String>,
}

// r[impl gateway.rooms.permissions]
/// Whether `rooms` (names, or prefixes such as `chat:*`) allows `room`.
pub fn room_allowed(rooms: &[String], room: &str) -> bool {
    rooms.iter().any(|r| match r.strip_suffix('*') {
        Some(prefix) => room.starts_with(prefix),
        None => r == room,
    })
}

/// The claims the gateway reads; the rest of a token's claims are ignored.
#[derive(Debug, serde::Deserialize)]
struct RawClaims {
    sub: Option<String>,
    exp: Option<u64>,
    nbf: Option<u64>,
    iat: Option<u64>,
    /// Outer `Some`: the claim is present (`null` included), so a subscription token carrying
    /// `rooms: null` is still told apart from one without the claim.
    #[serde(default, deserialize_with = "present")]
    rooms: Option<Option<Vec<String>>>,
    room: Option<String>,
}

fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// What a token without a `rooms` claim may join.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RoomsDefault {
    /// No room (only rooms opened by subscription tokens).
    #[default]
    None,
    /// Any room.
    Any,
}

/// The claims checked besides the signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthSettings {
    /// Accepted audiences: when not empty, a token's `aud` must name one of them.
    pub audience: Vec<String>,
    /// When set, a token's `iss` must be this.
    pub issuer: Option<String>,
    /// Allowed clock skew on `exp`, `nbf` and `iat`.
    pub leeway: Duration,
    /// What an auth token without `rooms` may join.
    pub rooms_default: RoomsDefault,
}

impl Default for AuthSettings {
    fn default() -> Self {
        Self {
            audience: Vec::new(),
            issuer: None,
            leeway: DEFAULT_LEEWAY,
            rooms_default: RoomsDefault::None,
        }
    }
}

/// One verification key.
struct Key {
    kid: Option<String>,
    alg: Algorithm,
    key: DecodingKey,
}

/// What a key file holds, as the configuration declares it: never guessed from its content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// An HS256 secret (the file's text, trimmed, at least [`MIN_SECRET_LEN`] bytes); the file
    /// must be a regular file, not a symlink, neither group nor others may read or write it.
    Secret,
    /// A PEM public key (RSA, EC P-256 or Ed25519) or a JWKS of public keys, told apart by which
    /// of the two parses; never read as a secret.
    Public,
}

/// A key file and its declared kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySource {
    /// The file.
    pub path: PathBuf,
    /// What it holds.
    pub kind: KeyKind,
}

impl KeySource {
    /// A secret file.
    pub fn secret(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            kind: KeyKind::Secret,
        }
    }

    /// A public key file (PEM or JWKS).
    pub fn public(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            kind: KeyKind::Public,
        }
    }
}

/// What a reload found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyReload {
    /// The key set has no files (a secret given in code).
    Off,
    /// Every file reads as it did.
    Unchanged,
    /// A file changed and the new keys are in use.
    Reloaded,
    /// A file changed but could not be used: the previous keys stay.
    Failed(KeyError),
}

struct State {
    /// The files the keys come from (replaced whole by [`TokenKey::replace`]).
    sources: Vec<KeySource>,
    keys: Arc<Vec<Key>>,
    /// The files' contents the keys were loaded from.
    seen: Vec<Vec<u8>>,
    /// The last reload's failure, until a reload succeeds or the files read as they did.
    fault: Option<KeyError>,
    /// One more at each change of the keys in use (a replace, a reload that took new ones): a
    /// reload that read under an older one commits nothing, even when the files are the same
    /// again (S, then T, then S: what was read of the first S is not the second's).
    generation: u64,
}

/// What a reload read, under which generation of the state: [`TokenKey::commit`]'s input.
struct ReadKeys {
    generation: u64,
    /// `None`: the files read as the keys in use came from.
    read: Result<Option<Changed>, KeyError>,
}

/// Files that changed: their contents, and the keys parsed from them.
type Changed = (Vec<Vec<u8>>, Vec<Key>);

struct Shared {
    settings: AuthSettings,
    state: Mutex<State>,
}

/// Key files read and parsed, not in use yet: what [`TokenKey::replace`] swaps in. Reading them
/// is the slow part (blocking file I/O), so it happens before, and apart from, the swap.
pub struct NewKeys {
    sources: Vec<KeySource>,
    keys: Vec<Key>,
    seen: Vec<Vec<u8>>,
}

// The keys are secrets: only the files are shown.
impl std::fmt::Debug for NewKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewKeys")
            .field("sources", &self.sources)
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl NewKeys {
    // r[impl gateway.auth.key-replace]
    /// Reads and parses every file of `sources` as its declared kind (as
    /// [`TokenKey::from_sources`] does). Blocking file I/O: call it off the async runtime's
    /// workers.
    pub fn read(sources: Vec<KeySource>) -> Result<Self, KeyError> {
        if sources.is_empty() {
            return Err(KeyError::Empty);
        }
        let seen = read_all(&sources)?;
        let keys = parse_all(&sources, &seen)?;
        Ok(Self {
            sources,
            keys,
            seen,
        })
    }

    /// The files these keys come from.
    pub fn sources(&self) -> &[KeySource] {
        &self.sources
    }
}

/// The keys client tokens are verified with, and the claims checked.
#[derive(Clone)]
pub struct TokenKey {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenKey")
            .field("sources", &self.sources())
            .field("settings", &self.shared.settings)
            .field("keys", &"<redacted>")
            .finish()
    }
}

impl TokenKey {
    /// One HS256 secret given in code, default settings (its length is the caller's
    /// responsibility; files are held to [`MIN_SECRET_LEN`]).
    pub fn new(secret: impl Into<Vec<u8>>) -> Self {
        Self::with_secret(secret, AuthSettings::default())
    }

    /// One HS256 secret given in code.
    pub fn with_secret(secret: impl Into<Vec<u8>>, settings: AuthSettings) -> Self {
        let key = Key {
            kid: None,
            alg: Algorithm::HS256,
            key: DecodingKey::from_secret(&secret.into()),
        };
        Self::from_keys(vec![key], Vec::new(), Vec::new(), settings)
    }

    /// The keys in `sources` (see [`load_source`]), re-read by [`TokenKey::reload`].
    pub fn from_sources(sources: Vec<KeySource>, settings: AuthSettings) -> Result<Self, KeyError> {
        if sources.is_empty() {
            return Err(KeyError::Empty);
        }
        let contents = read_all(&sources)?;
        let keys = parse_all(&sources, &contents)?;
        Ok(Self::from_keys(keys, sources, contents, settings))
    }

    fn from_keys(
        keys: Vec<Key>,
        sources: Vec<KeySource>,
        seen: Vec<Vec<u8>>,
        settings: AuthSettings,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                settings,
                state: Mutex::new(State {
                    sources,
                    keys: Arc::new(keys),
                    seen,
                    fault: None,
                    generation: 0,
                }),
            }),
        }
    }

    /// The files the keys come from now (empty for a secret given in code).
    pub fn sources(&self) -> Vec<KeySource> {
        self.state().sources.clone()
    }

    /// The settings the claims are checked with.
    pub fn settings(&self) -> &AuthSettings {
        &self.shared.settings
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The last reload's failure, until a reload succeeds.
    pub fn fault(&self) -> Option<KeyError> {
        self.state().fault.clone()
    }

    // r[impl gateway.auth.key-reload+2]
    /// Re-reads the key files; when one changed, uses the new keys, or keeps the previous ones
    /// and records the failure if they cannot be used. Blocking file I/O: call it off the async
    /// runtime's workers.
    pub fn reload(&self) -> KeyReload {
        match self.read_keys() {
            None => KeyReload::Off,
            Some(read) => self.commit(read),
        }
    }

    /// The reload's read: the files in use now, read and (when they changed) parsed, without
    /// the state locked. `None`: the key set has no files.
    fn read_keys(&self) -> Option<ReadKeys> {
        let (sources, seen, generation) = {
            let state = self.state();
            (state.sources.clone(), state.seen.clone(), state.generation)
        };
        if sources.is_empty() {
            return None;
        }
        let read = read_all(&sources).and_then(|contents| {
            if contents == seen {
                return Ok(None);
            }
            let keys = parse_all(&sources, &contents)?;
            Ok(Some((contents, keys)))
        });
        Some(ReadKeys { generation, read })
    }

    /// The reload's outcome: nothing changes when the keys in use changed since `read` began (a
    /// replace, or another reload, took newer ones: what this one read is not theirs to undo,
    /// nor its failure theirs to report).
    fn commit(&self, read: ReadKeys) -> KeyReload {
        let mut state = self.state();
        if state.generation != read.generation {
            return KeyReload::Unchanged;
        }
        match read.read {
            Ok(None) => {
                // Back to what the keys in use came from: whatever failed before is over.
                state.fault = None;
                KeyReload::Unchanged
            }
            Ok(Some((contents, keys))) => {
                state.keys = Arc::new(keys);
                state.seen = contents;
                state.fault = None;
                state.generation = state.generation.wrapping_add(1);
                KeyReload::Reloaded
            }
            Err(e) => {
                state.fault = Some(e.clone());
                KeyReload::Failed(e)
            }
        }
    }

    // r[impl gateway.auth.key-replace]
    /// Verifies tokens with `new` from now on, in place of every key in use, and re-reads its
    /// files from then on (at each [`TokenKey::reload`]): a key of the files left out verifies
    /// no token any more. The last reload's fault is over.
    pub fn replace(&self, new: NewKeys) {
        let mut state = self.state();
        state.sources = new.sources;
        state.keys = Arc::new(new.keys);
        state.seen = new.seen;
        state.fault = None;
        state.generation = state.generation.wrapping_add(1);
    }

    // r[impl gateway.rooms.permissions]
    /// The claims of an auth token (`auth` message): one without `room`. A token without
    /// `rooms` gets the configured [`RoomsDefault`].
    pub fn verify_auth(&self, token: &str, now: SystemTime) -> Result<Claims, TokenError> {
        let c = self.verify_raw(token, now)?;
        if c.room.is_some() {
            return Err(TokenError::WrongKind);
        }
        let rooms = match (c.rooms, self.shared.settings.rooms_default) {
            (Some(Some(r)), _) => Some(r),
            (_, RoomsDefault::Any) => None,
            (_, RoomsDefault::None) => Some(Vec::new()),
        };
        Ok(Claims {
            user: c.user,
            rooms,
            room: None,
        })
    }

    // r[impl gateway.rooms.permissions]
    /// The claims of a subscription token (in a `join`): one with `room` and without `rooms`.
    pub fn verify_subscription(&self, token: &str, now: SystemTime) -> Result<Claims, TokenError> {
        let c = self.verify_raw(token, now)?;
        match (c.room, c.rooms) {
            (Some(room), None) => Ok(Claims {
                user: c.user,
                rooms: Some(Vec::new()),
                room: Some(room),
            }),
            _ => Err(TokenError::WrongKind),
        }
    }

    // r[impl gateway.auth.token+2]
    // r[impl gateway.auth.expiry-range+2]
    /// A token's user and room claims if one of the keys verifies it and its claims hold at
    /// `now`.
    fn verify_raw(&self, token: &str, now: SystemTime) -> Result<Verified, TokenError> {
        // The header's `alg` is read as text first: `none` and other names jsonwebtoken has no
        // variant for are refused as an algorithm, not as a malformed token.
        header_alg_accepted(token)?;
        let header = jsonwebtoken::decode_header(token).map_err(|_| TokenError::Malformed)?;
        if !ALGORITHMS.contains(&header.alg) {
            return Err(TokenError::Algorithm);
        }
        let keys = self.state().keys.clone();
        let settings = &self.shared.settings;
        let mut validation = Validation::new(header.alg);
        // Times are checked below against `now`, with the leeway; the library reads the clock.
        validation.validate_exp = false;
        validation.validate_nbf = false;
        let mut required = vec!["exp", "sub"];
        if settings.audience.is_empty() {
            validation.validate_aud = false;
        } else {
            validation.set_audience(&settings.audience);
            required.push("aud");
        }
        if let Some(iss) = &settings.issuer {
            validation.set_issuer(&[iss]);
            required.push("iss");
        }
        validation.set_required_spec_claims(&required);
        let candidates = keys.iter().filter(|k| {
            k.alg == header.alg
                && match (&k.kid, &header.kid) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                }
        });
        let mut result = Err(TokenError::UnknownKey);
        for key in candidates {
            match jsonwebtoken::decode::<RawClaims>(token, &key.key, &validation) {
                Ok(data) => {
                    result = Ok(data.claims);
                    break;
                }
                Err(e) => {
                    let e = map_error(e.kind());
                    // Another key of the same algorithm may still verify it (rotation).
                    let next = e == TokenError::Signature;
                    result = Err(e);
                    if !next {
                        break;
                    }
                }
            }
        }
        let claims = result?;
        check_times(&claims, now, settings.leeway)?;
        match claims.sub {
            Some(user) if !user.is_empty() => Ok(Verified {
                user,
                rooms: claims.rooms,
                room: claims.room,
            }),
            _ => Err(TokenError::MissingClaim("sub")),
        }
    }
}

/// What a verified token says, before its kind is checked.
struct Verified {
    user: String,
    rooms: Option<Option<Vec<String>>>,
    room: Option<String>,
}

/// Refuses a token whose header's `alg` is not one of [`ALGORITHMS`] (a header that is not a
/// JSON object with a string `alg` is left to jsonwebtoken to call malformed).
fn header_alg_accepted(token: &str) -> Result<(), TokenError> {
    use base64::Engine as _;
    #[derive(serde::Deserialize)]
    struct H {
        alg: String,
    }
    let Some(head) = token.split('.').next() else {
        return Ok(());
    };
    let Ok(bytes) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(head) else {
        return Ok(());
    };
    let Ok(h) = serde_json::from_slice::<H>(&bytes) else {
        return Ok(());
    };
    if ["HS256", "RS256", "ES256", "EdDSA"].contains(&h.alg.as_str()) {
        Ok(())
    } else {
        Err(TokenError::Algorithm)
    }
}

fn map_error(kind: &ErrorKind) -> TokenError {
    match kind {
        ErrorKind::InvalidSignature => TokenError::Signature,
        ErrorKind::MissingRequiredClaim(c) => TokenError::MissingClaim(match c.as_str() {
            "exp" => "exp",
            "sub" => "sub",
            "aud" => "aud",
            "iss" => "iss",
            _ => "?",
        }),
        ErrorKind::InvalidAudience => TokenError::Audience,
        ErrorKind::InvalidIssuer => TokenError::Issuer,
        ErrorKind::InvalidAlgorithm | ErrorKind::MissingAlgorithm => TokenError::Algorithm,
        // A key of the token's algorithm that does not work as one verifies nothing: the
        // signature is not proven, and the next key is tried.
        ErrorKind::InvalidEcdsaKey
        | ErrorKind::InvalidEddsaKey
        | ErrorKind::InvalidRsaKey(_)
        | ErrorKind::InvalidKeyFormat => TokenError::Signature,
        _ => TokenError::Malformed,
    }
}

/// `exp` (required), `nbf` and `iat` against `now`, each with the leeway, in whole seconds.
fn check_times(c: &RawClaims, now: SystemTime, leeway: Duration) -> Result<(), TokenError> {
    let exp = c.exp.ok_or(TokenError::MissingClaim("exp"))?;
    // A peer chooses `exp`: refuse what the clock cannot hold rather than trust it for ever.
    if UNIX_EPOCH.checked_add(Duration::from_secs(exp)).is_none() {
        return Err(TokenError::ExpiryOutOfRange);
    }
    let now = now
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    let leeway = leeway.as_secs();
    if now >= exp.saturating_add(leeway) {
        return Err(TokenError::Expired);
    }
    if c.nbf.is_some_and(|nbf| nbf > now.saturating_add(leeway)) {
        return Err(TokenError::NotYetValid);
    }
    if c.iat.is_some_and(|iat| iat > now.saturating_add(leeway)) {
        return Err(TokenError::IssuedInFuture);
    }
    Ok(())
}

/// The largest key file read (bytes): a JWKS of many RSA keys fits well within it.
pub const MAX_KEY_FILE: u64 = 1 << 20;

// r[impl gateway.auth.keys]
/// Reads one key file without blocking on a FIFO or reading without end: opened with
/// `O_NONBLOCK` (and `O_NOFOLLOW` for a secret), checked on the open descriptor to be a regular
/// file of at most [`MAX_KEY_FILE`] bytes — and for a secret, private to its owner — then read
/// from that descriptor, so what was checked is what is read.
pub fn read_key_file(source: &KeySource) -> Result<Vec<u8>, KeyError> {
    use std::io::Read as _;
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
    let path = &source.path;
    let fail = |message: String| KeyError::Read {
        path: path.clone(),
        message,
    };
    let secret = source.kind == KeyKind::Secret;
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC;
    if secret {
        flags |= libc::O_NOFOLLOW;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| {
            if secret && e.raw_os_error() == Some(libc::ELOOP) {
                fail("a symlink: a secret file must be the file itself".into())
            } else {
                fail(e.to_string())
            }
        })?;
    let meta = file.metadata().map_err(|e| fail(e.to_string()))?;
    if !meta.file_type().is_file() {
        return Err(fail("not a regular file".into()));
    }
    if secret && meta.mode() & 0o077 != 0 {
        return Err(fail(format!(
            "mode {:o}: group or others may read or write this secret (chmod 600)",
            meta.mode() & 0o777
        )));
    }
    if meta.len() > MAX_KEY_FILE {
        return Err(fail(format!("larger than {MAX_KEY_FILE} bytes")));
    }
    let mut bytes = Vec::new();
    file.take(MAX_KEY_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(e.to_string()))?;
    if bytes.len() as u64 > MAX_KEY_FILE {
        return Err(fail(format!("larger than {MAX_KEY_FILE} bytes")));
    }
    Ok(bytes)
}

fn read_all(sources: &[KeySource]) -> Result<Vec<Vec<u8>>, KeyError> {
    sources.iter().map(read_key_file).collect()
}

fn parse_all(sources: &[KeySource], contents: &[Vec<u8>]) -> Result<Vec<Key>, KeyError> {
    let mut keys = Vec::new();
    for (source, bytes) in sources.iter().zip(contents) {
        keys.extend(parse(source, bytes)?);
    }
    Ok(keys)
}

/// Checks that `source` holds keys the gateway can use, and how many.
pub fn load_source(source: &KeySource) -> Result<usize, KeyError> {
    let bytes = read_key_file(source)?;
    parse(source, &bytes).map(|k| k.len())
}

/// The HS256 secret of a secret file (read and checked as [`read_key_file`] does, its text
/// trimmed, at least [`MIN_SECRET_LEN`] bytes): what the gateway verifies with and what
/// [`Signer`] signs with.
pub fn read_secret(path: &Path) -> Result<Vec<u8>, KeyError> {
    let source = KeySource::secret(path);
    let bytes = read_key_file(&source)?;
    secret_of(path, &bytes)
}

fn short_secret(len: usize) -> String {
    format!(
        "an HS256 secret of {len} bytes; a secret needs at least {MIN_SECRET_LEN} \
         (e.g. `head -c 32 /dev/urandom | base64 > FILE`)"
    )
}

/// A secret file's secret. Text that looks like a public key or a JWKS is refused rather than
/// used as an HMAC secret: its holder is not the only one who knows it.
fn secret_of(path: &Path, bytes: &[u8]) -> Result<Vec<u8>, KeyError> {
    let bad = |message: String| KeyError::Parse {
        path: path.to_owned(),
        message,
    };
    let text = std::str::from_utf8(bytes)
        .map_err(|_| bad("not text: an HS256 secret file holds the secret as text".into()))?;
    if text.starts_with('\u{feff}') {
        return Err(bad(
            "starts with a byte order mark: write the secret as plain text".into(),
        ));
    }
    let text = text.trim();
    if text.starts_with('{')
        || ["-----BEGIN", "PUBLIC KEY", "PRIVATE KEY", "ssh-"]
            .iter()
            .any(|m| text.contains(m))
    {
        return Err(bad(
            "looks like a key or a JWKS, not an HS256 secret: give key files in public_keys".into(),
        ));
    }
    if text.len() < MIN_SECRET_LEN {
        return Err(bad(short_secret(text.len())));
    }
    Ok(text.as_bytes().to_vec())
}

/// The keys one file holds, read as its declared kind.
fn parse(source: &KeySource, bytes: &[u8]) -> Result<Vec<Key>, KeyError> {
    let path = &source.path;
    if source.kind == KeyKind::Secret {
        let secret = secret_of(path, bytes)?;
        return Ok(vec![Key {
            kid: None,
            alg: Algorithm::HS256,
            key: DecodingKey::from_secret(&secret),
        }]);
    }
    let bad = |message: String| KeyError::Parse {
        path: path.to_owned(),
        message,
    };
    let text = std::str::from_utf8(bytes)
        .map_err(|_| bad("not text: give a PEM public key or a JWKS".into()))?;
    let text = text.trim_start_matches('\u{feff}').trim();
    match serde_json::from_str::<JwkSet>(text) {
        Ok(set) => return jwks_keys(&set).map_err(bad),
        // Only the position: the message of serde_json may quote the file's text.
        Err(e) if text.starts_with('{') => {
            return Err(bad(format!(
                "not a JWKS (line {}, column {})",
                e.line(),
                e.column()
            )));
        }
        Err(_) => {}
    }
    if text.contains("PRIVATE KEY") {
        return Err(bad(
            "a private key: give the public key (the gateway only verifies)".into(),
        ));
    }
    let pem = text.as_bytes();
    let (alg, key) = if let Ok(k) = DecodingKey::from_rsa_pem(pem) {
        (Algorithm::RS256, k)
    } else if let Ok(k) = DecodingKey::from_ec_pem(pem) {
        (Algorithm::ES256, k)
    } else if let Ok(k) = DecodingKey::from_ed_pem(pem) {
        (Algorithm::EdDSA, k)
    } else {
        return Err(bad(
            "neither a JWKS nor an RSA, EC P-256 or Ed25519 public key in PEM".into(),
        ));
    };
    Ok(vec![Key {
        kid: None,
        alg,
        key,
    }])
}

fn jwks_keys(set: &JwkSet) -> Result<Vec<Key>, String> {
    if set.keys.is_empty() {
        return Err("the JWKS has no keys".into());
    }
    set.keys
        .iter()
        .enumerate()
        .map(|(i, jwk)| {
            let alg = jwk_algorithm(jwk).map_err(|m| format!("key {i}: {m}"))?;
            let key = DecodingKey::from_jwk(jwk).map_err(|e| format!("key {i}: {e}"))?;
            Ok(Key {
                kid: jwk.common.key_id.clone(),
                alg,
                key,
            })
        })
        .collect()
}

/// The algorithm a public JWK is for: the one its key type and curve imply, which its `alg`
/// must name when given. Secrets (`oct`) and keys for encryption are refused.
fn jwk_algorithm(jwk: &jsonwebtoken::jwk::Jwk) -> Result<Algorithm, String> {
    use jsonwebtoken::jwk::PublicKeyUse;
    if let Some(u) = &jwk.common.public_key_use {
        if *u != PublicKeyUse::Signature {
            return Err("a key whose use is not sig".into());
        }
    }
    let implied = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => Algorithm::ES256,
        AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
            Algorithm::EdDSA
        }
        AlgorithmParameters::OctetKey(_) => {
            return Err(
                "an oct (secret) key: a public key file holds no secret; give secrets as \
                 secret files"
                    .into(),
            );
        }
        _ => return Err("a curve the gateway does not accept".into()),
    };
    if let Some(a) = &jwk.common.key_algorithm {
        let named = a.to_string().parse::<Algorithm>().ok();
        if named != Some(implied) {
            return Err(format!(
                "algorithm {a} does not fit its key type (which is for {implied:?})"
            ));
        }
    }
    Ok(implied)
}

/// Why a token could not be minted.
#[derive(Debug, thiserror::Error)]
#[error("cannot sign a token: {0}")]
pub struct SignError(String);

/// What a minted token says.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct MintClaims {
    /// The user.
    pub sub: String,
    /// Expiry, Unix seconds.
    pub exp: u64,
    /// Issued at, Unix seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iat: Option<u64>,
    /// Not before, Unix seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nbf: Option<u64>,
    /// The audience.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aud: Option<String>,
    /// The issuer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iss: Option<String>,
    /// The rooms the user may join (names, or prefixes ending in `*`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rooms: Option<Vec<String>>,
    /// The room a subscription token is for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub room: Option<String>,
}

/// Mints HS256 tokens with one secret.
#[derive(Clone)]
pub struct Signer {
    key: EncodingKey,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer(<redacted>)")
    }
}

impl Signer {
    /// A signer with an HS256 secret.
    pub fn new(secret: &[u8]) -> Self {
        Self {
            key: EncodingKey::from_secret(secret),
        }
    }

    /// A token carrying `claims`.
    pub fn sign(&self, claims: &MintClaims) -> Result<String, SignError> {
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, &self.key)
            .map_err(|e| SignError(e.to_string()))
    }

    /// A token for `user` that expires at `expires`, issued now, allowed every room
    /// (`rooms: ["*"]`).
    pub fn token(&self, user: &str, expires: SystemTime) -> Result<String, SignError> {
        let secs = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        self.sign(&MintClaims {
            sub: user.to_owned(),
            exp: secs(expires),
            iat: Some(secs(SystemTime::now())),
            rooms: Some(vec!["*".to_owned()]),
            ..MintClaims::default()
        })
    }
}

#[cfg(test)]
mod tests;
