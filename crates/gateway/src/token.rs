//! Client tokens: standard JWTs (RFC 7519) verified through the `jsonwebtoken` crate.
//!
//! A [`TokenKey`] holds the keys tokens are verified with — HS256 secrets, RS256, ES256 and
//! EdDSA public keys — and the claims checked besides the signature (`exp` required, `nbf` and
//! `iat`, the configured `aud` and `iss`, with a leeway). Keys come from files (a PEM public key,
//! a JWKS whose keys are chosen by the token's `kid`, or a file holding an HS256 secret), several
//! at once so one can be rotated, and the files can be re-read ([`TokenKey::reload`]): a broken
//! new file keeps the previous keys and records a fault. [`Signer`] mints HS256 tokens (the
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
}

impl TokenError {
    /// Every reason label, in a fixed order (the stats keep one counter each).
    pub const REASONS: [&'static str; 11] = [
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
    /// The rooms the user may join (`rooms`: names, or prefixes ending in `*`); `None`: any.
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
    rooms: Option<Vec<String>>,
    room: Option<String>,
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
}

impl Default for AuthSettings {
    fn default() -> Self {
        Self {
            audience: Vec::new(),
            issuer: None,
            leeway: DEFAULT_LEEWAY,
        }
    }
}

/// One verification key.
struct Key {
    kid: Option<String>,
    alg: Algorithm,
    key: DecodingKey,
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
    keys: Arc<Vec<Key>>,
    /// The files' contents the keys were loaded from.
    seen: Vec<Vec<u8>>,
    /// The last reload's failure, until a reload succeeds.
    fault: Option<KeyError>,
}

struct Shared {
    settings: AuthSettings,
    files: Vec<PathBuf>,
    state: Mutex<State>,
}

/// The keys client tokens are verified with, and the claims checked.
#[derive(Clone)]
pub struct TokenKey {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenKey")
            .field("files", &self.shared.files)
            .field("settings", &self.shared.settings)
            .field("keys", &"<redacted>")
            .finish()
    }
}

impl TokenKey {
    /// One HS256 secret given in code, default settings.
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

    /// The keys in `files` (see [`load_file`]), re-read by [`TokenKey::reload`].
    pub fn from_files(files: Vec<PathBuf>, settings: AuthSettings) -> Result<Self, KeyError> {
        if files.is_empty() {
            return Err(KeyError::Empty);
        }
        let (keys, seen) = load_all(&files)?;
        Ok(Self::from_keys(keys, files, seen, settings))
    }

    fn from_keys(
        keys: Vec<Key>,
        files: Vec<PathBuf>,
        seen: Vec<Vec<u8>>,
        settings: AuthSettings,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                settings,
                files,
                state: Mutex::new(State {
                    keys: Arc::new(keys),
                    seen,
                    fault: None,
                }),
            }),
        }
    }

    /// The files the keys come from (empty for a secret given in code).
    pub fn files(&self) -> &[PathBuf] {
        &self.shared.files
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

    // r[impl gateway.auth.key-reload]
    /// Re-reads the key files; when one changed, uses the new keys, or keeps the previous ones
    /// and records the failure if they cannot be used.
    pub fn reload(&self) -> KeyReload {
        if self.shared.files.is_empty() {
            return KeyReload::Off;
        }
        let contents = match read_all(&self.shared.files) {
            Ok(c) => c,
            Err(e) => {
                self.state().fault = Some(e.clone());
                return KeyReload::Failed(e);
            }
        };
        if contents == self.state().seen {
            return KeyReload::Unchanged;
        }
        let parsed: Result<Vec<Key>, KeyError> = self
            .shared
            .files
            .iter()
            .zip(&contents)
            .map(|(path, bytes)| parse(path, bytes))
            .collect::<Result<Vec<_>, _>>()
            .map(|v| v.into_iter().flatten().collect());
        let mut state = self.state();
        match parsed {
            Ok(keys) => {
                state.keys = Arc::new(keys);
                state.seen = contents;
                state.fault = None;
                KeyReload::Reloaded
            }
            Err(e) => {
                state.fault = Some(e.clone());
                KeyReload::Failed(e)
            }
        }
    }

    // r[impl gateway.auth.token+2]
    // r[impl gateway.auth.expiry-range+2]
    /// The claims of `token` if one of the keys verifies it and its claims hold at `now`.
    pub fn verify(&self, token: &str, now: SystemTime) -> Result<Claims, TokenError> {
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
        let mut candidates = keys.iter().filter(|k| {
            k.alg == header.alg
                && match (&k.kid, &header.kid) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                }
        });
        let mut result = Err(TokenError::UnknownKey);
        for key in &mut candidates {
            match jsonwebtoken::decode::<RawClaims>(token, &key.key, &validation) {
                Ok(data) => {
                    result = Ok(data.claims);
                    break;
                }
                Err(e) => {
                    let e = map_error(e.kind());
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
            Some(user) if !user.is_empty() => Ok(Claims {
                user,
                rooms: claims.rooms,
                room: claims.room,
            }),
            _ => Err(TokenError::MissingClaim("sub")),
        }
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
        // A key of the token's algorithm that does not parse as one (a JWKS `x` of the wrong
        // length) verifies nothing: the signature is not proven.
        ErrorKind::InvalidEcdsaKey | ErrorKind::InvalidEddsaKey | ErrorKind::InvalidRsaKey(_) => {
            TokenError::Signature
        }
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

fn read_all(files: &[PathBuf]) -> Result<Vec<Vec<u8>>, KeyError> {
    files
        .iter()
        .map(|p| {
            std::fs::read(p).map_err(|e| KeyError::Read {
                path: p.clone(),
                message: e.to_string(),
            })
        })
        .collect()
}

fn load_all(files: &[PathBuf]) -> Result<(Vec<Key>, Vec<Vec<u8>>), KeyError> {
    let contents = read_all(files)?;
    let mut keys = Vec::new();
    for (path, bytes) in files.iter().zip(&contents) {
        keys.extend(parse(path, bytes)?);
    }
    Ok((keys, contents))
}

/// Checks that `path` holds keys the gateway can use, and how many.
pub fn load_file(path: &Path) -> Result<usize, KeyError> {
    let bytes = std::fs::read(path).map_err(|e| KeyError::Read {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    parse(path, &bytes).map(|k| k.len())
}

/// The keys one file holds: a JWKS (`{"keys": [...]}`), a PEM public key (RSA, EC P-256 or
/// Ed25519), or else an HS256 secret (the file's text, trimmed).
fn parse(path: &Path, bytes: &[u8]) -> Result<Vec<Key>, KeyError> {
    let bad = |message: String| KeyError::Parse {
        path: path.to_owned(),
        message,
    };
    let text = std::str::from_utf8(bytes)
        .map_err(|_| bad("not text: give a PEM public key, a JWKS or an HS256 secret".into()))?
        .trim();
    if text.starts_with('{') {
        let set: JwkSet =
            serde_json::from_str(text).map_err(|e| bad(format!("not a JWKS: {e}")))?;
        if set.keys.is_empty() {
            return Err(bad("the JWKS has no keys".into()));
        }
        return set
            .keys
            .iter()
            .enumerate()
            .map(|(i, jwk)| {
                let alg = jwk_algorithm(jwk).map_err(|m| bad(format!("key {i}: {m}")))?;
                let key = DecodingKey::from_jwk(jwk).map_err(|e| bad(format!("key {i}: {e}")))?;
                Ok(Key {
                    kid: jwk.common.key_id.clone(),
                    alg,
                    key,
                })
            })
            .collect();
    }
    if text.starts_with("-----BEGIN") {
        let pem = text.as_bytes();
        if text.contains("PRIVATE KEY") {
            return Err(bad(
                "a private key: give the public key (the gateway only verifies)".into(),
            ));
        }
        let (alg, key) = if let Ok(k) = DecodingKey::from_rsa_pem(pem) {
            (Algorithm::RS256, k)
        } else if let Ok(k) = DecodingKey::from_ec_pem(pem) {
            (Algorithm::ES256, k)
        } else if let Ok(k) = DecodingKey::from_ed_pem(pem) {
            (Algorithm::EdDSA, k)
        } else {
            return Err(bad(
                "not an RSA, EC P-256 or Ed25519 public key in PEM".into()
            ));
        };
        return Ok(vec![Key {
            kid: None,
            alg,
            key,
        }]);
    }
    if text.len() < MIN_SECRET_LEN {
        return Err(bad(format!(
            "an HS256 secret of {} bytes; a secret needs at least {MIN_SECRET_LEN} \
             (e.g. `head -c 32 /dev/urandom | base64 > FILE`)",
            text.len()
        )));
    }
    Ok(vec![Key {
        kid: None,
        alg: Algorithm::HS256,
        key: DecodingKey::from_secret(text.as_bytes()),
    }])
}

/// The algorithm a JWK is for: its `alg`, else what its key type implies.
fn jwk_algorithm(jwk: &jsonwebtoken::jwk::Jwk) -> Result<Algorithm, String> {
    let alg = match (&jwk.common.key_algorithm, &jwk.algorithm) {
        (Some(a), _) => a
            .to_string()
            .parse::<Algorithm>()
            .map_err(|_| format!("algorithm {a} not accepted"))?,
        (None, AlgorithmParameters::RSA(_)) => Algorithm::RS256,
        (None, AlgorithmParameters::EllipticCurve(p)) if p.curve == EllipticCurve::P256 => {
            Algorithm::ES256
        }
        (None, AlgorithmParameters::OctetKeyPair(p)) if p.curve == EllipticCurve::Ed25519 => {
            Algorithm::EdDSA
        }
        (None, AlgorithmParameters::OctetKey(_)) => Algorithm::HS256,
        (None, _) => return Err("a curve the gateway does not accept".into()),
    };
    if !ALGORITHMS.contains(&alg) {
        return Err(format!("algorithm {alg:?} not accepted"));
    }
    Ok(alg)
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

    /// A token for `user` that expires at `expires`, issued now.
    pub fn token(&self, user: &str, expires: SystemTime) -> Result<String, SignError> {
        let secs = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        self.sign(&MintClaims {
            sub: user.to_owned(),
            exp: secs(expires),
            iat: Some(secs(SystemTime::now())),
            ..MintClaims::default()
        })
    }
}

#[cfg(test)]
mod tests;
