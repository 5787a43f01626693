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
        let expires = UNIX_EPOCH + Duration::from_secs(secs);
        if now >= expires {
            return Err(TokenError::Expired);
        }
        Ok(user.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
