//! Client credentials: a token the node's configuration allows, compared in constant time.

use std::fmt;

use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

/// A client credential (a token). Its `Debug` never shows it, so it cannot leak into a log.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential(Vec<u8>);

impl Credential {
    /// A credential from its bytes.
    pub fn new(token: impl Into<Vec<u8>>) -> Self {
        Credential(token.into())
    }

    /// The bytes, for the wire.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Credential(<redacted>)")
    }
}

/// The credentials a node allows.
#[derive(Clone, Default)]
pub struct Credentials {
    digests: Vec<[u8; 32]>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Credentials({} allowed)", self.digests.len())
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

impl Credentials {
    /// Allows each of `allowed`.
    pub fn new<'a>(allowed: impl IntoIterator<Item = &'a Credential>) -> Self {
        Credentials {
            digests: allowed
                .into_iter()
                .filter(|c| !c.0.is_empty())
                .map(|c| digest(&c.0))
                .collect(),
        }
    }

    /// Whether `presented` is allowed. Digests of equal length are compared in constant time, and
    /// every allowed one is compared, so the time taken says nothing about the token or which
    /// entry matched. An empty token is never allowed.
    // r[impl forward.auth]
    pub fn allows(&self, presented: &[u8]) -> bool {
        self.matching(presented).is_some()
    }

    /// Which allowed credential `presented` is (its place in the list given to
    /// [`Credentials::new`], empty ones left out), compared as [`Credentials::allows`] does: every
    /// entry, in constant time, the index chosen without a branch on the comparison.
    // r[impl forward.auth]
    pub fn matching(&self, presented: &[u8]) -> Option<usize> {
        let presented = digest(presented);
        let mut found = subtle::Choice::from(0);
        let mut index = 0u64;
        for (i, allowed) in self.digests.iter().enumerate() {
            let same = allowed.ct_eq(&presented);
            index = u64::conditional_select(&index, &(i as u64), same & !found);
            found |= same;
        }
        bool::from(found).then_some(index as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify forward.auth]
    #[test]
    fn only_a_configured_token_is_allowed_and_none_is_printed() {
        let a = Credential::new("alpha-token");
        let b = Credential::new("beta-token");
        let creds = Credentials::new([&a, &b]);
        assert!(creds.allows(b"alpha-token"));
        assert!(creds.allows(b"beta-token"));
        assert!(!creds.allows(b"alpha-toke"));
        assert!(!creds.allows(b""));
        assert!(!Credentials::default().allows(b"alpha-token"));
        assert!(!Credentials::new([&Credential::new("")]).allows(b""));
        assert!(!format!("{a:?} {creds:?}").contains("alpha"));
        assert_eq!(creds.matching(b"alpha-token"), Some(0));
        assert_eq!(creds.matching(b"beta-token"), Some(1));
        assert_eq!(creds.matching(b"gamma-token"), None);
    }
}
