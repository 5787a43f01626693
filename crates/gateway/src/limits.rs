//! Admission at accept: open connections per source (an IPv4 address or an IPv6 /64), and
//! connections not yet authenticated in total.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use holdfast_source::Source;

use crate::config::LiveLimits;

/// Why a connection was refused at accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Its source address already holds the per-address limit of open connections.
    PerIp,
    /// The limit of unauthenticated connections is reached.
    Unauthenticated,
    /// Its source already holds the per-address limit of unauthenticated connections.
    UnauthenticatedPerIp,
}

impl Refusal {
    /// The body of the 503 the upgrade is answered with.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Refusal::PerIp => "too many connections from this address",
            Refusal::Unauthenticated => "too many unauthenticated connections",
            Refusal::UnauthenticatedPerIp => {
                "too many unauthenticated connections from this address"
            }
        }
    }
}

/// What one source holds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Held {
    /// Admitted connections, authenticated or not.
    open: usize,
    /// Admitted connections not yet authenticated.
    unauthenticated: usize,
}

/// What each source holds, keyed on holdfast-source's [`Source`] (`r[source.key]`): an IPv4
/// address (an IPv4-mapped IPv6 address being that IPv4 address) or an IPv6 /64.
// r[impl gateway.edge.source]
#[derive(Debug, Default)]
struct Counts {
    per_ip: HashMap<Source, Held>,
}

/// The limits and what currently counts against them. The limits may be replaced while the
/// gateway runs ([`Limits::set`]): each admission and join reads them as they are then.
#[derive(Debug)]
pub(crate) struct Limits {
    per_ip_limit: AtomicUsize,
    unauthenticated_limit: AtomicUsize,
    unauthenticated_per_ip_limit: AtomicUsize,
    max_rooms_per_connection: AtomicUsize,
    max_room_name: AtomicUsize,
    counts: Mutex<Counts>,
    unauthenticated: AtomicUsize,
}

impl Limits {
    /// Limits as configured (0: none).
    pub(crate) fn new(limits: LiveLimits) -> Arc<Self> {
        Arc::new(Self {
            per_ip_limit: AtomicUsize::new(limits.per_ip_limit),
            unauthenticated_limit: AtomicUsize::new(limits.unauthenticated_limit),
            unauthenticated_per_ip_limit: AtomicUsize::new(limits.unauthenticated_per_ip_limit),
            max_rooms_per_connection: AtomicUsize::new(limits.max_rooms_per_connection),
            max_room_name: AtomicUsize::new(limits.max_room_name),
            counts: Mutex::new(Counts::default()),
            unauthenticated: AtomicUsize::new(0),
        })
    }

    /// Replaces every limit. What is admitted or joined already stays: a lowered limit refuses
    /// what comes next until the count falls under it.
    // r[impl gateway.edge.live-limits]
    pub(crate) fn set(&self, live: LiveLimits) {
        // Under the admission lock, so that one admission never sees half of an update.
        let _counts = crate::sync::lock(&self.counts);
        let store = |a: &AtomicUsize, v: usize| a.store(v, Ordering::SeqCst);
        store(&self.per_ip_limit, live.per_ip_limit);
        store(&self.unauthenticated_limit, live.unauthenticated_limit);
        store(
            &self.unauthenticated_per_ip_limit,
            live.unauthenticated_per_ip_limit,
        );
        store(
            &self.max_rooms_per_connection,
            live.max_rooms_per_connection,
        );
        store(&self.max_room_name, live.max_room_name);
    }

    /// The limits in force now.
    pub(crate) fn get(&self) -> LiveLimits {
        let load = |a: &AtomicUsize| a.load(Ordering::SeqCst);
        LiveLimits {
            per_ip_limit: load(&self.per_ip_limit),
            unauthenticated_limit: load(&self.unauthenticated_limit),
            unauthenticated_per_ip_limit: load(&self.unauthenticated_per_ip_limit),
            max_rooms_per_connection: load(&self.max_rooms_per_connection),
            max_room_name: load(&self.max_room_name),
        }
    }

    /// Rooms one connection may be in at once (0: no limit).
    pub(crate) fn max_rooms_per_connection(&self) -> usize {
        self.max_rooms_per_connection.load(Ordering::SeqCst)
    }

    /// Whether `room`'s name is past the longest a client may join now (in bytes; 0: no limit):
    /// one test for joins and for pushes.
    pub(crate) fn room_name_too_long(&self, room: &str) -> bool {
        let max = self.max_room_name.load(Ordering::SeqCst);
        max != 0 && room.len() > max
    }

    /// Admits a connection from `ip`, or says which limit it is over. An admitted connection
    /// counts as open for its address and as unauthenticated until its [`Admission`] says
    /// otherwise or is dropped; a refused one counts toward neither.
    // r[impl gateway.edge.limits+3]
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Admission, Refusal> {
        let source = Source::of(ip);
        let mut counts = crate::sync::lock(&self.counts);
        let held = counts.per_ip.get(&source).copied().unwrap_or_default();
        let per_ip_limit = self.per_ip_limit.load(Ordering::SeqCst);
        if per_ip_limit != 0 && held.open >= per_ip_limit {
            return Err(Refusal::PerIp);
        }
        if let Some(refusal) = self.unauthenticated_per_ip_refusal(held) {
            return Err(refusal);
        }
        // Under the same lock as the per-address count, so two admissions cannot both take the
        // last unauthenticated place.
        let unauth = self.unauthenticated.load(Ordering::SeqCst);
        let unauthenticated_limit = self.unauthenticated_limit.load(Ordering::SeqCst);
        if unauthenticated_limit != 0 && unauth >= unauthenticated_limit {
            return Err(Refusal::Unauthenticated);
        }
        self.unauthenticated.fetch_add(1, Ordering::SeqCst);
        let held = counts.per_ip.entry(source).or_default();
        held.open += 1;
        held.unauthenticated += 1;
        Ok(Admission {
            limits: self.clone(),
            source,
            unauthenticated: true,
        })
    }

    /// Whether a source holding `held` is at its own limit of unauthenticated connections:
    /// checked before the pool, so a source that fills its share is refused for that, and the
    /// pool needs many sources to fill.
    // r[impl gateway.edge.unauthenticated-per-source]
    fn unauthenticated_per_ip_refusal(&self, held: Held) -> Option<Refusal> {
        let limit = self.unauthenticated_per_ip_limit.load(Ordering::SeqCst);
        (limit != 0 && held.unauthenticated >= limit).then_some(Refusal::UnauthenticatedPerIp)
    }

    /// Admitted connections not yet authenticated.
    pub(crate) fn unauthenticated(&self) -> usize {
        self.unauthenticated.load(Ordering::SeqCst)
    }

    /// Admitted connections open from `ip`.
    #[cfg(test)]
    fn open_from(&self, ip: IpAddr) -> usize {
        crate::sync::lock(&self.counts)
            .per_ip
            .get(&Source::of(ip))
            .map_or(0, |h| h.open)
    }

    /// Admitted connections from `ip` not yet authenticated.
    #[cfg(test)]
    fn unauthenticated_from(&self, ip: IpAddr) -> usize {
        crate::sync::lock(&self.counts)
            .per_ip
            .get(&Source::of(ip))
            .map_or(0, |h| h.unauthenticated)
    }
}

/// An admitted connection's place under the limits, given back when it is dropped.
#[derive(Debug)]
pub(crate) struct Admission {
    limits: Arc<Limits>,
    source: Source,
    unauthenticated: bool,
}

impl Admission {
    /// The connection authenticated: it no longer counts as unauthenticated (idempotent).
    pub(crate) fn authenticated(&mut self) {
        if std::mem::take(&mut self.unauthenticated) {
            let mut counts = crate::sync::lock(&self.limits.counts);
            self.limits.unauthenticated.fetch_sub(1, Ordering::SeqCst);
            if let Some(held) = counts.per_ip.get_mut(&self.source) {
                held.unauthenticated = held.unauthenticated.saturating_sub(1);
            }
        }
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.authenticated();
        let mut counts = crate::sync::lock(&self.limits.counts);
        if let Some(held) = counts.per_ip.get_mut(&self.source) {
            held.open = held.open.saturating_sub(1);
            if held.open == 0 {
                // Addresses that left hold no memory.
                counts.per_ip.remove(&self.source);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Admission limits only (no room limits).
    fn admission(
        per_ip: usize,
        unauthenticated: usize,
        unauthenticated_per_ip: usize,
    ) -> LiveLimits {
        LiveLimits {
            per_ip_limit: per_ip,
            unauthenticated_limit: unauthenticated,
            unauthenticated_per_ip_limit: unauthenticated_per_ip,
            max_rooms_per_connection: 0,
            max_room_name: 0,
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    // r[verify gateway.edge.limits+3]
    #[test]
    fn each_limit_refuses_past_its_count_and_frees_its_place_on_drop() {
        let limits = Limits::new(admission(2, 3, 0));
        let a1 = limits.admit(ip("10.0.0.1")).unwrap();
        let mut a2 = limits.admit(ip("::ffff:10.0.0.1")).unwrap();
        assert_eq!(limits.admit(ip("10.0.0.1")).unwrap_err(), Refusal::PerIp);
        let b1 = limits.admit(ip("10.0.0.2")).unwrap();
        // Three unauthenticated: a fourth address is refused for that, not for its own count.
        assert_eq!(
            limits.admit(ip("10.0.0.3")).unwrap_err(),
            Refusal::Unauthenticated
        );
        // Authenticating frees an unauthenticated place but not the address's place.
        a2.authenticated();
        a2.authenticated();
        assert_eq!(limits.unauthenticated(), 2);
        let c1 = limits.admit(ip("10.0.0.3")).unwrap();
        assert_eq!(limits.admit(ip("10.0.0.1")).unwrap_err(), Refusal::PerIp);
        drop(a1);
        assert_eq!(limits.open_from(ip("10.0.0.1")), 1);
        drop(a2);
        assert_eq!(limits.open_from(ip("10.0.0.1")), 0);
        drop((b1, c1));
        assert_eq!(limits.unauthenticated(), 0);
        assert!(crate::sync::lock(&limits.counts).per_ip.is_empty());
    }

    // r[verify gateway.edge.live-limits]
    #[test]
    fn limits_replaced_live_hold_what_comes_next_and_close_nothing() {
        let limits = Limits::new(admission(3, 0, 0));
        let held: Vec<_> = (0..3)
            .map(|_| limits.admit(ip("10.0.0.1")).unwrap())
            .collect();
        assert_eq!(limits.admit(ip("10.0.0.1")).unwrap_err(), Refusal::PerIp);
        let live = |per_ip_limit, unauthenticated_limit| crate::config::LiveLimits {
            per_ip_limit,
            unauthenticated_limit,
            unauthenticated_per_ip_limit: 0,
            max_rooms_per_connection: 2,
            max_room_name: 9,
        };
        // Raised: one more is admitted.
        limits.set(live(4, 0));
        let fourth = limits.admit(ip("10.0.0.1")).unwrap();
        assert_eq!(limits.max_rooms_per_connection(), 2);
        assert!(!limits.room_name_too_long("nine-byte") && limits.room_name_too_long("ten-bytes!"));
        // Lowered under what is open: what is open stays, nothing new comes in.
        limits.set(live(1, 5));
        assert_eq!(limits.open_from(ip("10.0.0.1")), 4);
        assert_eq!(limits.admit(ip("10.0.0.1")).unwrap_err(), Refusal::PerIp);
        // The pool of unauthenticated connections (four held) is full at five after one more.
        let other = limits.admit(ip("10.0.0.2")).unwrap();
        assert_eq!(
            limits.admit(ip("10.0.0.3")).unwrap_err(),
            Refusal::Unauthenticated
        );
        drop((held, fourth, other));
        let _one = limits.admit(ip("10.0.0.1")).unwrap();
        assert_eq!(limits.get(), live(1, 5));
    }

    // r[verify gateway.edge.unauthenticated-per-source]
    #[test]
    fn one_source_cannot_take_the_unauthenticated_pool() {
        // Four places per source and a pool of ten: the first source is stopped at four.
        let limits = Limits::new(admission(0, 10, 4));
        let mut a: Vec<_> = (0..4)
            .map(|i| limits.admit(ip(&format!("2001:db8::{i}"))).unwrap())
            .collect();
        assert_eq!(
            limits.admit(ip("2001:db8::99")).unwrap_err(),
            Refusal::UnauthenticatedPerIp
        );
        assert_eq!(limits.unauthenticated_from(ip("2001:db8::")), 4);
        // Another source still gets in, and the pool is six short of full.
        let b = limits.admit(ip("192.0.2.1")).unwrap();
        assert_eq!(limits.unauthenticated(), 5);
        // Authenticating gives the source its place back, not the open place.
        a[0].authenticated();
        assert_eq!(limits.unauthenticated_from(ip("2001:db8::")), 3);
        assert_eq!(limits.open_from(ip("2001:db8::")), 4);
        let a4 = limits.admit(ip("2001:db8::4")).unwrap();
        assert_eq!(
            limits.admit(ip("2001:db8::5")).unwrap_err(),
            Refusal::UnauthenticatedPerIp
        );
        // An unauthenticated one leaving gives it back too; nothing is left once all are gone.
        a.pop();
        let a5 = limits.admit(ip("2001:db8::5")).unwrap();
        drop((a, a4, a5, b));
        assert_eq!(limits.unauthenticated(), 0);
        assert!(crate::sync::lock(&limits.counts).per_ip.is_empty());
    }

    // r[verify gateway.edge.unauthenticated-per-source]
    #[test]
    fn the_pool_still_caps_many_sources_under_their_own_limit() {
        let limits = Limits::new(admission(0, 3, 2));
        let _held: Vec<_> = (1..=3)
            .map(|i| limits.admit(ip(&format!("10.0.0.{i}"))).unwrap())
            .collect();
        assert_eq!(
            limits.admit(ip("10.0.0.4")).unwrap_err(),
            Refusal::Unauthenticated
        );
    }

    // r[verify gateway.edge.source]
    #[test]
    fn one_ipv6_slash_64_shares_one_per_address_limit() {
        let limits = Limits::new(admission(2, 0, 0));
        let _a = limits.admit(ip("2001:db8::1")).unwrap();
        let _b = limits.admit(ip("2001:db8::ffff:2")).unwrap();
        // A third interface identifier in the same /64 is the same source.
        assert_eq!(limits.admit(ip("2001:db8::3")).unwrap_err(), Refusal::PerIp);
        assert_eq!(limits.open_from(ip("2001:db8::42")), 2);
        // The next /64 is another source.
        let _c = limits.admit(ip("2001:db8:0:1::1")).unwrap();
    }

    #[test]
    fn zero_means_no_limit() {
        let limits = Limits::new(admission(0, 0, 0));
        let held: Vec<_> = (0..1000)
            .map(|_| limits.admit(ip("10.0.0.1")).unwrap())
            .collect();
        assert_eq!(limits.unauthenticated(), 1000);
        drop(held);
        assert_eq!(limits.unauthenticated(), 0);
    }
}
