//! Which new connection attempts the node lets into its handshake: the decision on each QUIC
//! `Incoming`, before any handshake work, kept free of I/O so it can be tested on its own.
//!
//! A connection counts against these bounds from its admission until it has authenticated or
//! ended: that is all an unauthenticated peer can make the node hold.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;

use holdfast_source::Source;

/// Default bound on connections in their handshake or not yet authenticated, in all.
pub const DEFAULT_MAX_UNAUTHENTICATED: usize = 256;

/// Default bound on connections in their handshake or not yet authenticated from one source (an
/// IPv4 address or an IPv6 /64).
pub const DEFAULT_MAX_UNAUTHENTICATED_PER_SOURCE: usize = 8;

/// Default number of unauthenticated connections above which a new one must first prove its
/// address with a QUIC Retry: 0, always. A Retry costs one round trip on a connection meant to
/// last hours, and only a validated address makes the per-source bound mean anything (a forged
/// source could otherwise use up another host's places); it also keeps the node from answering
/// a forged Initial with a handshake flight to its victim.
pub const DEFAULT_VALIDATE_ABOVE: usize = 0;

/// The admission bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionLimits {
    /// Connections in their handshake or unauthenticated, in all.
    pub max_unauthenticated: usize,
    /// The same, from one source.
    pub max_per_source: usize,
    /// While at least this many are unauthenticated, an attempt from an address not yet
    /// validated is answered with a Retry (0: always).
    pub validate_above: usize,
}

impl Default for AdmissionLimits {
    fn default() -> Self {
        AdmissionLimits {
            max_unauthenticated: DEFAULT_MAX_UNAUTHENTICATED,
            max_per_source: DEFAULT_MAX_UNAUTHENTICATED_PER_SOURCE,
            validate_above: DEFAULT_VALIDATE_ABOVE,
        }
    }
}

/// What becomes of a connection attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Let into its handshake (and counted until it authenticates or ends).
    Admit,
    /// Answered with a Retry: the peer must prove it receives at its address first.
    Retry,
    /// Refused before its handshake.
    Refuse(Refused),
}

/// Why an attempt was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The bound on unauthenticated connections in all was reached.
    Total,
    /// The bound on unauthenticated connections from its source was reached.
    PerSource,
}

/// The unauthenticated connections the node holds now, by source, and the decision on each new
/// attempt.
#[derive(Debug, Default)]
pub struct Admission {
    limits: AdmissionLimits,
    total: usize,
    /// Keyed on holdfast-source's [`Source`] (`r[source.key]`): IPv4 address or IPv6 /64.
    by_source: HashMap<Source, usize>,
}

impl Admission {
    /// No connection yet, under `limits`.
    pub fn new(limits: AdmissionLimits) -> Self {
        Admission {
            limits,
            total: 0,
            by_source: HashMap::new(),
        }
    }

    /// The decision on an attempt from `ip`, whose address is `validated` or not; an admitted
    /// one is counted (give it back with [`Admission::release`]).
    // r[impl forward.limits.unauthenticated+2]
    pub fn decide(&mut self, ip: IpAddr, validated: bool) -> Decision {
        // A Retry first: it costs the node nothing, and every count below is then of addresses
        // that answered.
        if !validated && self.total >= self.limits.validate_above {
            return Decision::Retry;
        }
        let source = Source::of(ip);
        let from_source = self.by_source.get(&source).copied().unwrap_or(0);
        if from_source >= self.limits.max_per_source {
            return Decision::Refuse(Refused::PerSource);
        }
        if self.total >= self.limits.max_unauthenticated {
            return Decision::Refuse(Refused::Total);
        }
        self.total += 1;
        *self.by_source.entry(source).or_insert(0) += 1;
        Decision::Admit
    }

    /// An admitted connection from `ip` authenticated or ended: its place is free.
    pub fn release(&mut self, ip: IpAddr) {
        let source = Source::of(ip);
        if let Some(count) = self.by_source.get_mut(&source) {
            *count -= 1;
            self.total = self.total.saturating_sub(1);
            if *count == 0 {
                // Sources that hold nothing are forgotten: the map is bounded by the places.
                self.by_source.remove(&source);
            }
        }
    }

    /// Whether the source of `ip` holds its whole cap of unauthenticated places.
    // r[impl forward.auth.pacing+3]
    pub fn at_cap(&self, ip: IpAddr) -> bool {
        self.by_source.get(&Source::of(ip)).copied().unwrap_or(0) >= self.limits.max_per_source
    }

    /// Connections admitted and not yet released.
    pub fn unauthenticated(&self) -> usize {
        self.total
    }

    /// Sources holding at least one place.
    #[cfg(test)]
    pub fn sources(&self) -> usize {
        self.by_source.len()
    }
}

/// Why an authenticated connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionRefused {
    /// The bound on authenticated connections in all was reached.
    Total,
    /// The bound on its credential's connections was reached.
    PerCredential,
}

/// The authenticated connections the node holds now, by credential (`K`: the server keys them by
/// the credential's digest, which stays the same when a live update reorders the allowed ones),
/// and the decision on each newly authenticated one.
#[derive(Debug)]
pub struct Sessions<K> {
    max_total: usize,
    max_per_credential: usize,
    total: usize,
    by_credential: HashMap<K, usize>,
}

impl<K: Hash + Eq> Sessions<K> {
    /// No connection yet; at most `max_total` in all and `max_per_credential` of one credential.
    pub fn new(max_total: usize, max_per_credential: usize) -> Self {
        Sessions {
            max_total,
            max_per_credential,
            total: 0,
            by_credential: HashMap::new(),
        }
    }

    /// Counts a connection that authenticated with `credential`, unless a bound is reached.
    // r[impl forward.limits.per-credential+2]
    pub fn admit(&mut self, credential: K) -> Result<(), SessionRefused> {
        let of_credential = self.by_credential.get(&credential).copied().unwrap_or(0);
        if of_credential >= self.max_per_credential {
            return Err(SessionRefused::PerCredential);
        }
        if self.total >= self.max_total {
            return Err(SessionRefused::Total);
        }
        self.total += 1;
        *self.by_credential.entry(credential).or_insert(0) += 1;
        Ok(())
    }

    /// A connection of `credential` ended.
    pub fn release(&mut self, credential: &K) {
        if let Some(count) = self.by_credential.get_mut(credential) {
            *count -= 1;
            self.total = self.total.saturating_sub(1);
            if *count == 0 {
                self.by_credential.remove(credential);
            }
        }
    }

    /// Authenticated connections now.
    pub fn authenticated(&self) -> usize {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    fn limits(total: usize, per_source: usize, validate_above: usize) -> AdmissionLimits {
        AdmissionLimits {
            max_unauthenticated: total,
            max_per_source: per_source,
            validate_above,
        }
    }

    // r[verify forward.limits.unauthenticated+2]
    #[test]
    fn an_address_not_yet_validated_is_retried_above_the_threshold_and_admitted_once_it_is() {
        let mut always = Admission::new(limits(4, 2, 0));
        assert_eq!(always.decide(ip("10.0.0.1"), false), Decision::Retry);
        assert_eq!(always.unauthenticated(), 0, "a Retry holds nothing");
        assert_eq!(always.decide(ip("10.0.0.1"), true), Decision::Admit);

        let mut under_pressure = Admission::new(limits(4, 4, 2));
        assert_eq!(
            under_pressure.decide(ip("10.0.0.1"), false),
            Decision::Admit
        );
        assert_eq!(
            under_pressure.decide(ip("10.0.0.2"), false),
            Decision::Admit
        );
        assert_eq!(
            under_pressure.decide(ip("10.0.0.3"), false),
            Decision::Retry
        );
        assert_eq!(under_pressure.decide(ip("10.0.0.3"), true), Decision::Admit);
        under_pressure.release(ip("10.0.0.1"));
        under_pressure.release(ip("10.0.0.2"));
        assert_eq!(
            under_pressure.decide(ip("10.0.0.4"), false),
            Decision::Admit
        );
    }

    // r[verify forward.limits.unauthenticated+2]
    #[test]
    fn one_source_is_refused_at_its_bound_and_others_still_get_in() {
        let mut admission = Admission::new(limits(10, 2, 0));
        assert_eq!(admission.decide(ip("10.0.0.1"), true), Decision::Admit);
        assert_eq!(admission.decide(ip("10.0.0.1"), true), Decision::Admit);
        assert_eq!(
            admission.decide(ip("10.0.0.1"), true),
            Decision::Refuse(Refused::PerSource)
        );
        assert_eq!(admission.decide(ip("10.0.0.2"), true), Decision::Admit);
        // An IPv4-mapped IPv6 address is the same source.
        assert_eq!(
            admission.decide(ip("::ffff:10.0.0.1"), true),
            Decision::Refuse(Refused::PerSource)
        );
        admission.release(ip("10.0.0.1"));
        assert_eq!(admission.decide(ip("10.0.0.1"), true), Decision::Admit);
        assert_eq!(admission.unauthenticated(), 3);
    }

    // r[verify forward.limits.unauthenticated+2]
    #[test]
    fn an_ipv6_64_is_one_source() {
        let mut admission = Admission::new(limits(10, 2, 0));
        assert_eq!(
            admission.decide(ip("2001:db8:1:2::1"), true),
            Decision::Admit
        );
        assert_eq!(
            admission.decide(ip("2001:db8:1:2:ffff::9"), true),
            Decision::Admit
        );
        assert_eq!(
            admission.decide(ip("2001:db8:1:2:abcd::1"), true),
            Decision::Refuse(Refused::PerSource)
        );
        assert_eq!(
            admission.decide(ip("2001:db8:1:3::1"), true),
            Decision::Admit
        );
    }

    // r[verify forward.limits.unauthenticated+2]
    #[test]
    fn the_bound_in_all_refuses_every_source_until_a_place_is_released() {
        let mut admission = Admission::new(limits(2, 2, 0));
        assert_eq!(admission.decide(ip("10.0.0.1"), true), Decision::Admit);
        assert_eq!(admission.decide(ip("10.0.0.2"), true), Decision::Admit);
        assert_eq!(
            admission.decide(ip("10.0.0.3"), true),
            Decision::Refuse(Refused::Total)
        );
        admission.release(ip("10.0.0.2"));
        assert_eq!(admission.decide(ip("10.0.0.3"), true), Decision::Admit);
        // Releasing a source that holds nothing frees nothing.
        admission.release(ip("10.9.9.9"));
        assert_eq!(admission.unauthenticated(), 2);
    }

    // r[verify forward.limits.per-credential+2]
    #[test]
    fn a_credential_is_refused_at_its_bound_and_the_total_bound_refuses_every_credential() {
        let mut sessions = Sessions::new(3, 2);
        assert_eq!(sessions.admit(0), Ok(()));
        assert_eq!(sessions.admit(0), Ok(()));
        assert_eq!(sessions.admit(0), Err(SessionRefused::PerCredential));
        assert_eq!(sessions.admit(1), Ok(()));
        assert_eq!(sessions.admit(2), Err(SessionRefused::Total));
        sessions.release(&0);
        assert_eq!(sessions.admit(2), Ok(()));
        assert_eq!(sessions.authenticated(), 3);
        sessions.release(&7);
        assert_eq!(
            sessions.authenticated(),
            3,
            "a credential that holds nothing frees nothing"
        );
    }

    proptest! {
        // Whatever the order of attempts and releases, the counts never pass the bounds, and
        // releasing everything admitted leaves nothing held.
        // r[verify forward.limits.unauthenticated+2]
        #[test]
        fn the_bounds_hold_for_any_sequence(
            total in 1usize..8,
            per_source in 1usize..4,
            validate_above in 0usize..4,
            steps in proptest::collection::vec((0u8..6, any::<bool>(), any::<bool>()), 0..200),
        ) {
            let mut admission = Admission::new(limits(total, per_source, validate_above));
            let mut held: Vec<IpAddr> = Vec::new();
            for (host, validated, release) in steps {
                let addr = IpAddr::from([10, 0, 0, host]);
                if release {
                    if let Some(pos) = held.iter().position(|h| *h == addr) {
                        admission.release(held.swap_remove(pos));
                    }
                    continue;
                }
                if admission.decide(addr, validated) == Decision::Admit {
                    held.push(addr);
                }
                prop_assert!(admission.unauthenticated() <= total);
                prop_assert_eq!(admission.unauthenticated(), held.len());
                let from_host = held.iter().filter(|h| **h == addr).count();
                prop_assert!(from_host <= per_source);
            }
            for addr in held.drain(..) {
                admission.release(addr);
            }
            prop_assert_eq!(admission.unauthenticated(), 0);
            prop_assert_eq!(admission.sources(), 0);
        }
    }
}
