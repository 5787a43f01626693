//! How many connections an admin listener lets in: overall, and (over TCP) per source address,
//! so that one source, or a few, holding all they may cannot lock another out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use holdfast_source::Source;

/// The source of a listener's peer address: `None` for a peer without one (the Unix socket),
/// whose connections count only toward the listener's overall cap.
pub(super) trait PeerSource {
    /// Its source, if it has one.
    fn source(&self) -> Option<Source>;
}

// i[impl node.admin.limits+2]
/// A TCP peer counts under holdfast-source's [`Source`] of its address (`r[source.key]`): its
/// IPv4 address (an IPv4-mapped IPv6 address being that IPv4 address), or the /64 of its IPv6
/// address (one host is given a whole /64, so counting single IPv6 addresses would cap nothing).
impl PeerSource for std::net::SocketAddr {
    fn source(&self) -> Option<Source> {
        Some(Source::of(self.ip()))
    }
}

impl PeerSource for tokio::net::unix::SocketAddr {
    fn source(&self) -> Option<Source> {
        None
    }
}

/// Why a connection was not let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    /// The listener holds all the connections it may.
    ConnectionLimit,
    /// The connection's source holds all the connections one source may.
    PerSourceLimit,
}

impl Refused {
    /// Its `holdfast_admin_refused_total` reason.
    pub(super) fn reason(self) -> &'static str {
        match self {
            Self::ConnectionLimit => "connection_limit",
            Self::PerSourceLimit => "per_source_limit",
        }
    }
}

// i[impl node.admin.limits+2]
/// The connections one listener holds, overall and per source: whether one more may open.
#[derive(Debug)]
pub(super) struct Places {
    max_total: usize,
    /// `None`: no per-source cap (the Unix socket).
    max_per_source: Option<usize>,
    /// Always `unsourced` plus the sum of `per_source`.
    total: usize,
    /// Connections from peers without an address.
    unsourced: usize,
    /// Only sources holding at least one place: never more entries than open connections.
    per_source: HashMap<Source, usize>,
}

impl Places {
    /// At most `max_total` connections, and at most `max_per_source` from one source.
    pub(super) fn new(max_total: usize, max_per_source: Option<usize>) -> Self {
        Self {
            max_total,
            max_per_source,
            total: 0,
            unsourced: 0,
            per_source: HashMap::new(),
        }
    }

    /// Takes a place for a connection from `source`, or says why there is none. The per-source
    /// cap is checked first: a source at its cap is refused as such even when the listener is
    /// full too.
    pub(super) fn admit(&mut self, source: Option<Source>) -> Result<(), Refused> {
        let held = source.map_or(0, |s| self.open_from(s));
        if let (Some(_), Some(max)) = (source, self.max_per_source) {
            if held >= max {
                return Err(Refused::PerSourceLimit);
            }
        }
        if self.total >= self.max_total {
            return Err(Refused::ConnectionLimit);
        }
        self.total += 1;
        match source {
            Some(source) => *self.per_source.entry(source).or_insert(0) += 1,
            None => self.unsourced += 1,
        }
        Ok(())
    }

    /// Gives back a place [`admit`](Self::admit) gave `source`. Giving back one never taken
    /// changes nothing (no count goes below zero).
    pub(super) fn release(&mut self, source: Option<Source>) {
        let given = match source {
            Some(source) => match self.per_source.get_mut(&source) {
                Some(held) if *held > 1 => {
                    *held -= 1;
                    true
                }
                Some(_) => self.per_source.remove(&source).is_some(),
                None => false,
            },
            None if self.unsourced > 0 => {
                self.unsourced -= 1;
                true
            }
            None => false,
        };
        if given {
            self.total = self.total.saturating_sub(1);
        }
    }

    /// Connections open.
    #[cfg(test)]
    pub(super) fn open(&self) -> usize {
        self.total
    }

    /// Connections open from `source`.
    pub(super) fn open_from(&self, source: Source) -> usize {
        self.per_source.get(&source).copied().unwrap_or(0)
    }
}

/// A listener's [`Places`], shared by its accept loop and its connections.
pub(super) type SharedPlaces = Arc<Mutex<Places>>;

/// One connection's place, given back when it is dropped (its connection over, however it
/// ended).
#[derive(Debug)]
pub(super) struct Place {
    places: SharedPlaces,
    source: Option<Source>,
}

/// Takes a place in `places` for a connection from `source`.
pub(super) fn take(places: &SharedPlaces, source: Option<Source>) -> Result<Place, Refused> {
    lock(places).admit(source)?;
    Ok(Place {
        places: places.clone(),
        source,
    })
}

impl Drop for Place {
    fn drop(&mut self) {
        lock(&self.places).release(self.source);
    }
}

/// Nothing panics while holding the lock (plain counting); a poisoned one is still consistent.
fn lock(places: &SharedPlaces) -> std::sync::MutexGuard<'_, Places> {
    places.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn v4(last: u8) -> Option<Source> {
        Some(Source::of(IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))))
    }

    // i[verify node.admin.limits+2]
    #[test]
    fn a_source_at_its_cap_is_refused_while_another_is_let_in() {
        let mut places = Places::new(5, Some(2));
        assert_eq!(places.admit(v4(2)), Ok(()));
        assert_eq!(places.admit(v4(2)), Ok(()));
        assert_eq!(places.admit(v4(2)), Err(Refused::PerSourceLimit));
        assert_eq!(places.admit(v4(1)), Ok(()));
        assert_eq!(places.admit(v4(3)), Ok(()));
        assert_eq!(places.admit(v4(3)), Ok(()));
        // Full: a new source is refused for the listener's cap; a full source for its own.
        assert_eq!(places.admit(v4(4)), Err(Refused::ConnectionLimit));
        assert_eq!(places.admit(v4(2)), Err(Refused::PerSourceLimit));
        assert_eq!(places.open(), 5);
        places.release(v4(2));
        assert_eq!(places.open_from(v4(2).unwrap()), 1);
        assert_eq!(places.admit(v4(4)), Ok(()));
        // Giving back a place never taken changes nothing.
        places.release(v4(9));
        assert_eq!(places.open(), 5);
    }

    // i[verify node.admin.limits+2]
    #[test]
    fn a_tcp_peers_cap_is_shared_by_its_ipv6_64_and_by_its_mapped_and_plain_ipv4_address() {
        let peer = |text: &str| text.parse::<std::net::SocketAddr>().unwrap().source();
        let mut places = Places::new(8, Some(1));
        assert_eq!(places.admit(peer("[2001:db8:1:2::1]:40000")), Ok(()));
        assert_eq!(
            places.admit(peer("[2001:db8:1:2:ffff::9]:40001")),
            Err(Refused::PerSourceLimit)
        );
        assert_eq!(places.admit(peer("[2001:db8:1:3::1]:40000")), Ok(()));
        assert_eq!(places.admit(peer("[::ffff:192.0.2.7]:40000")), Ok(()));
        assert_eq!(
            places.admit(peer("192.0.2.7:40001")),
            Err(Refused::PerSourceLimit)
        );
        assert_eq!(places.admit(peer("192.0.2.8:40000")), Ok(()));
    }

    // i[verify node.admin.limits+2]
    #[test]
    fn without_sources_only_the_overall_cap_applies() {
        let mut places = Places::new(3, None);
        for _ in 0..3 {
            assert_eq!(places.admit(None), Ok(()));
        }
        assert_eq!(places.admit(None), Err(Refused::ConnectionLimit));
        places.release(None);
        assert_eq!(places.admit(None), Ok(()));
        // A per-source cap only counts peers that have an address.
        let mut places = Places::new(3, Some(1));
        assert_eq!(places.admit(None), Ok(()));
        assert_eq!(places.admit(None), Ok(()));
        assert_eq!(places.admit(v4(2)), Ok(()));
        assert_eq!(places.admit(None), Err(Refused::ConnectionLimit));
    }

    // i[verify node.admin.limits+2]
    #[test]
    fn a_dropped_place_is_given_back() {
        let places: SharedPlaces = Arc::new(Mutex::new(Places::new(4, Some(1))));
        let held = take(&places, v4(2)).unwrap();
        assert_eq!(take(&places, v4(2)).unwrap_err(), Refused::PerSourceLimit);
        drop(held);
        assert_eq!(lock(&places).open(), 0);
        let again = take(&places, v4(2)).unwrap();
        assert_eq!(lock(&places).open_from(v4(2).unwrap()), 1);
        drop(again);
        assert!(lock(&places).per_source.is_empty());
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// A connection from this source (`None`: no address) asks for a place.
        Admit(Option<u8>),
        /// The n-th place held (modulo how many) is given back.
        Release(usize),
        /// A place never given out is given back.
        Stray(Option<u8>),
    }

    fn op() -> impl Strategy<Value = Op> {
        let source = prop::option::weighted(0.9, 0u8..6);
        prop_oneof![
            4 => source.clone().prop_map(Op::Admit),
            3 => any::<usize>().prop_map(Op::Release),
            1 => source.prop_map(Op::Stray),
        ]
    }

    proptest! {
        // i[verify node.admin.limits+2]
        #[test]
        fn counts_never_go_negative_or_past_a_cap_and_a_released_place_is_reusable(
            max_total in 0usize..8,
            max_per_source in prop::option::of(0usize..4),
            ops in prop::collection::vec(op(), 0..80),
        ) {
            let mut places = Places::new(max_total, max_per_source);
            let source = |s: Option<u8>| s.and_then(v4);
            // The places this model has been given, by source.
            let mut held: Vec<Option<Source>> = Vec::new();
            for op in ops {
                match op {
                    Op::Admit(s) => {
                        let s = source(s);
                        let from = held.iter().filter(|h| **h == s && s.is_some()).count();
                        let expected = match (s, max_per_source) {
                            (Some(_), Some(max)) if from >= max => Err(Refused::PerSourceLimit),
                            _ if held.len() >= max_total => Err(Refused::ConnectionLimit),
                            _ => Ok(()),
                        };
                        prop_assert_eq!(places.admit(s), expected);
                        if expected.is_ok() {
                            held.push(s);
                        }
                    }
                    Op::Release(n) if !held.is_empty() => {
                        let s = held.swap_remove(n % held.len());
                        places.release(s);
                        // The place just given back is taken again at once by its source.
                        prop_assert_eq!(places.admit(s), Ok(()));
                        places.release(s);
                    }
                    Op::Release(_) => places.release(None),
                    // Only a source holding nothing: otherwise it would be a real release.
                    Op::Stray(s) if !held.contains(&source(s)) => places.release(source(s)),
                    Op::Stray(_) => {}
                }
                prop_assert_eq!(places.open(), held.len());
                prop_assert!(places.open() <= max_total);
                for (s, n) in &places.per_source {
                    prop_assert!(*n > 0, "an empty entry for {:?} was kept", s);
                    prop_assert_eq!(*n, held.iter().filter(|h| **h == Some(*s)).count());
                    if let Some(max) = max_per_source {
                        prop_assert!(*n <= max);
                    }
                }
                let sourced = held.iter().filter(|h| h.is_some()).count();
                prop_assert_eq!(places.per_source.values().sum::<usize>(), sourced);
                prop_assert_eq!(places.unsourced, held.len() - sourced);
            }
        }
    }
}
