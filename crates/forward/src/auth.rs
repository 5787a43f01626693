//! Client credentials: a token the node's configuration allows, compared in constant time.

use std::fmt;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use holdfast_retry::{Jitter, KeyedGate, Policy};
use holdfast_source::Source;
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

/// The SHA-256 of a presented credential: what an authenticated connection keeps of it, to be
/// counted per credential and re-checked when the node's credentials change. Its `Debug` never
/// shows it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct CredentialDigest(pub(crate) [u8; 32]);

impl CredentialDigest {
    /// The digest of `presented`.
    pub(crate) fn of(presented: &[u8]) -> Self {
        CredentialDigest(digest(presented))
    }
}

impl fmt::Debug for CredentialDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CredentialDigest(<redacted>)")
    }
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
        self.matching_digest(&CredentialDigest::of(presented))
    }

    /// [`Credentials::matching`] for a credential already hashed ([`CredentialDigest::of`]): how
    /// a connection re-checks its credential after an update without keeping the token.
    // r[impl forward.auth]
    pub(crate) fn matching_digest(&self, presented: &CredentialDigest) -> Option<usize> {
        let presented = presented.0;
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

/// The default pacing of a source after a failed authentication: 1 s after the first failure,
/// doubling with each further one up to 60 s, without jitter (nothing here needs spreading).
pub fn default_auth_pacing() -> Policy {
    Policy::builder()
        .base(Duration::from_secs(1))
        .cap(Duration::from_secs(60))
        .jitter(Jitter::None)
        .escalate_after(u32::MAX)
        .build()
        // A constant policy that builds; the fallback only keeps a panic off this path.
        .unwrap_or_default()
}

/// A burst of failed authentications from one source, to log once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Burst {
    /// Failures from the source in its current streak (this one included).
    pub failures: u32,
    /// How long new connections from it are refused from now.
    pub paced_for: Duration,
}

/// Failed authentications, paced per source through holdfast-retry's gate: each failure starts or
/// lengthens a wait during which new connections from its source are refused before their
/// handshake. Caller-clocked (every call takes `now`), as the gate is.
#[derive(Debug)]
pub struct AuthPacer {
    gate: KeyedGate<Source>,
}

impl AuthPacer {
    /// Pacing by `policy`.
    pub fn new(policy: Policy) -> Self {
        AuthPacer {
            gate: KeyedGate::new(policy),
        }
    }

    /// Whether a new connection from `ip` is refused at `now` (its source failed recently).
    // r[impl forward.auth.pacing+3]
    pub fn paced(&self, ip: IpAddr, now: Instant) -> bool {
        self.gate.check(&Source::of(ip), now).is_err()
    }

    /// A connection from `ip` failed to authenticate at `now`. The failure that starts (or, once
    /// the wait has passed, lengthens) the source's wait is the burst to log; failures of
    /// connections let in before the wait began are part of that burst, so `None`.
    // r[impl forward.auth.pacing+3]
    pub fn failed(&mut self, ip: IpAddr, now: Instant) -> Option<Burst> {
        let token = self.gate.begin(&Source::of(ip), now).ok()?;
        let transition = self.gate.fail(token, now, None);
        Some(Burst {
            failures: transition.failures,
            paced_for: transition
                .next_attempt_at
                .map_or(Duration::ZERO, |at| at.saturating_duration_since(now)),
        })
    }

    /// A connection from `ip` authenticated: its source starts afresh.
    pub fn succeeded(&mut self, ip: IpAddr) {
        self.gate.forget(&Source::of(ip));
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
        // A credential listed twice is its first place; empty ones hold no place.
        let empty = Credential::new("");
        let listed = Credentials::new([&empty, &b, &a, &b, &a]);
        assert_eq!(listed.matching(b"beta-token"), Some(0));
        assert_eq!(listed.matching(b"alpha-token"), Some(1));
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    // r[verify forward.auth.pacing+3]
    #[test]
    fn a_source_that_fails_is_refused_for_a_doubling_wait_and_logged_once_per_burst() {
        let mut pacer = AuthPacer::new(default_auth_pacing());
        let t0 = Instant::now();
        let (attacker, other) = (ip("192.0.2.7"), ip("198.51.100.1"));
        assert!(!pacer.paced(attacker, t0));
        // Eight connections let in at once all fail: one burst, one line.
        let bursts: Vec<_> = (0..8).filter_map(|_| pacer.failed(attacker, t0)).collect();
        assert_eq!(
            bursts,
            vec![Burst {
                failures: 1,
                paced_for: Duration::from_secs(1)
            }]
        );
        assert!(pacer.paced(attacker, t0 + Duration::from_millis(999)));
        assert!(!pacer.paced(other, t0), "other sources are not paced");
        // Once the wait has passed, the next failure is the next burst: a longer wait.
        let t1 = t0 + Duration::from_secs(1);
        assert!(!pacer.paced(attacker, t1));
        assert_eq!(
            pacer.failed(attacker, t1),
            Some(Burst {
                failures: 2,
                paced_for: Duration::from_secs(2)
            })
        );
        // A guesser that tries at every chance gets a handful of attempts in ten minutes.
        let mut now = t1;
        let mut attempts = 2;
        let end = t0 + Duration::from_secs(600);
        while now < end {
            if !pacer.paced(attacker, now) && pacer.failed(attacker, now).is_some() {
                attempts += 1;
            }
            now += Duration::from_millis(100);
        }
        assert!(attempts <= 16, "{attempts} attempts in 10 minutes");
        // An IPv6 host is paced by its /64.
        pacer.failed(ip("2001:db8::1"), t0);
        assert!(pacer.paced(ip("2001:db8::ffff"), t0));
        // A success starts its source afresh.
        pacer.succeeded(attacker);
        assert!(!pacer.paced(attacker, now));
    }
}
