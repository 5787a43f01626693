//! Signed client tokens: `base64url(user "\n" expiry-unix-seconds) "." base64url(HMAC-SHA256)`.
//!
//! The secret never appears in `Debug` output or logs.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The token is not of the expected shape or its signature does not match.
    #[error("invalid token")]
    Invalid,
    /// The token's signature is good but it has expired.
    #[error("token expired")]
    Expired,
    /// The token's signature is good but its expiry lies beyond any time this system can
    /// represent: a token meant to never expire, or a signer's bug, refused rather than trusted
    /// for ever.
    #[error("token expiry out of range")]
    ExpiryOutOfRange,
}

/// Signs and verifies tokens with one shared secret.
#[derive(Clone)]
pub struct TokenKey {
    secret: Vec<u8>,
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey(<redacted>)")
    }
}

impl TokenKey {
    /// A key from a shared secret.
    pub fn new(secret: impl Into<Vec<u8>>) -> Self {
        Self {
            secret: secret.into(),
        }
    }

    fn mac(&self, payload: &[u8]) -> HmacSha256 {
        // HMAC takes a key of any length, so this cannot fail.
        let mut mac = match HmacSha256::new_from_slice(&self.secret) {
            Ok(m) => m,
            Err(_) => unreachable!("HMAC accepts keys of every length"),
        };
        mac.update(payload);
        mac
    }

    /// A token for `user` that expires at `expires`.
    pub fn sign(&self, user: &str, expires: SystemTime) -> String {
        let secs = expires
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_secs();
        self.sign_unix(user, secs)
    }

    /// A token for `user` that expires `secs` seconds after the Unix epoch, as a backend that
    /// works in Unix seconds signs it (any `u64`, representable or not).
    pub fn sign_unix(&self, user: &str, secs: u64) -> String {
        let payload = format!("{user}\n{secs}");
        let sig = self.mac(payload.as_bytes()).finalize().into_bytes();
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(payload),
            URL_SAFE_NO_PAD.encode(sig)
        )
    }

    // r[impl gateway.auth.token]
    /// The user a token names, if its signature matches and it has not expired at `now`.
    pub fn verify(&self, token: &str, now: SystemTime) -> Result<String, TokenError> {
        let (payload, sig) = token.split_once('.').ok_or(TokenError::Invalid)?;
        let payload = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| TokenError::Invalid)?;
        let sig = URL_SAFE_NO_PAD
            .decode(sig)
            .map_err(|_| TokenError::Invalid)?;
        // Constant-time comparison of the signature.
        self.mac(&payload)
            .verify_slice(&sig)
            .map_err(|_| TokenError::Invalid)?;
        let text = String::from_utf8(payload).map_err(|_| TokenError::Invalid)?;
        let (user, secs) = text.rsplit_once('\n').ok_or(TokenError::Invalid)?;
        let secs: u64 = secs.parse().map_err(|_| TokenError::Invalid)?;
        if user.is_empty() {
            return Err(TokenError::Invalid);
        }
        // A peer chooses `secs`: `SystemTime + Duration` panics past what the clock can hold.
        let expires = expires_at(secs)?;
        if now >= expires {
            return Err(TokenError::Expired);
        }
        Ok(user.to_owned())
    }
}

/// The instant a token's expiry names, if the system clock can hold it.
// r[impl gateway.auth.expiry-range]
fn expires_at(secs: u64) -> Result<SystemTime, TokenError> {
    UNIX_EPOCH
        .checked_add(Duration::from_secs(secs))
        .ok_or(TokenError::ExpiryOutOfRange)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the first version did with an expiry it could not add to the epoch: it panicked.
    fn verify_at(key: &TokenKey, secs: u64, now: SystemTime) -> Result<String, TokenError> {
        let t = key.sign_unix("ann", secs);
        key.verify(&t, now)
    }

    // r[verify gateway.auth.expiry-range]
    #[test]
    fn an_expiry_past_what_the_clock_can_hold_is_refused_not_a_panic() {
        let key = TokenKey::new("s3cret");
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(
            verify_at(&key, u64::MAX, now),
            Err(TokenError::ExpiryOutOfRange)
        );
        assert_eq!(
            TokenError::ExpiryOutOfRange.to_string(),
            "token expiry out of range"
        );
        // Far but representable: still a good token.
        assert_eq!(verify_at(&key, 1 << 40, now), Ok("ann".into()));
    }

    proptest::proptest! {
        // r[verify gateway.auth.expiry-range]
        #[test]
        fn every_expiry_is_accepted_expired_or_refused_never_a_panic(secs in proptest::prelude::any::<u64>(), now_secs in 0u64..(1 << 40)) {
            let key = TokenKey::new("s3cret");
            let now = UNIX_EPOCH + Duration::from_secs(now_secs);
            let r = verify_at(&key, secs, now);
            match UNIX_EPOCH.checked_add(Duration::from_secs(secs)) {
                None => proptest::prop_assert_eq!(r, Err(TokenError::ExpiryOutOfRange)),
                Some(exp) if now >= exp => proptest::prop_assert_eq!(r, Err(TokenError::Expired)),
                Some(_) => proptest::prop_assert_eq!(r, Ok("ann".to_owned())),
            }
        }
    }

    // r[verify gateway.auth.token]
    #[test]
    fn tokens_verify_until_expiry_and_forgeries_fail() {
        let key = TokenKey::new("s3cret");
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let t = key.sign("ann", now + Duration::from_secs(60));
        assert_eq!(key.verify(&t, now), Ok("ann".into()));
        assert_eq!(
            key.verify(&t, now + Duration::from_secs(60)),
            Err(TokenError::Expired)
        );
        assert_eq!(
            TokenKey::new("other").verify(&t, now),
            Err(TokenError::Invalid)
        );
        let (p, s) = t.split_once('.').unwrap();
        let forged_payload = URL_SAFE_NO_PAD.encode("bob\n9999999999");
        assert_eq!(
            key.verify(&format!("{forged_payload}.{s}"), now),
            Err(TokenError::Invalid)
        );
        assert_eq!(key.verify(p, now), Err(TokenError::Invalid));
        assert_eq!(key.verify("", now), Err(TokenError::Invalid));
        assert_eq!(key.verify("!!.!!", now), Err(TokenError::Invalid));
        assert!(!format!("{key:?}").contains("s3cret"));
    }
}
