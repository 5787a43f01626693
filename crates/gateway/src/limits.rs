//! Admission at accept: open connections per source address, and connections not yet
//! authenticated in total.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Why a connection was refused at accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Its source address already holds the per-address limit of open connections.
    PerIp,
    /// The limit of unauthenticated connections is reached.
    Unauthenticated,
}

impl Refusal {
    /// The body of the 503 the upgrade is answered with.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Refusal::PerIp => "too many connections from this address",
            Refusal::Unauthenticated => "too many unauthenticated connections",
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    per_ip: HashMap<IpAddr, usize>,
}

/// The limits and what currently counts against them.
#[derive(Debug)]
pub(crate) struct Limits {
    per_ip_limit: usize,
    unauthenticated_limit: usize,
    counts: Mutex<Counts>,
    unauthenticated: AtomicUsize,
}

impl Limits {
    /// Limits as configured (0: none).
    pub(crate) fn new(per_ip_limit: usize, unauthenticated_limit: usize) -> Arc<Self> {
        Arc::new(Self {
            per_ip_limit,
            unauthenticated_limit,
            counts: Mutex::new(Counts::default()),
            unauthenticated: AtomicUsize::new(0),
        })
    }

    /// Admits a connection from `ip`, or says which limit it is over. An admitted connection
    /// counts as open for its address and as unauthenticated until its [`Admission`] says
    /// otherwise or is dropped; a refused one counts toward neither.
    // r[impl gateway.edge.limits]
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Admission, Refusal> {
        // An IPv4 client seen through a dual-stack socket is the same client.
        let ip = ip.to_canonical();
        let mut counts = crate::server::lock(&self.counts);
        let open = counts.per_ip.get(&ip).copied().unwrap_or(0);
        if self.per_ip_limit != 0 && open >= self.per_ip_limit {
            return Err(Refusal::PerIp);
        }
        // Under the same lock as the per-address count, so two admissions cannot both take the
        // last unauthenticated place.
        let unauth = self.unauthenticated.load(Ordering::SeqCst);
        if self.unauthenticated_limit != 0 && unauth >= self.unauthenticated_limit {
            return Err(Refusal::Unauthenticated);
        }
        self.unauthenticated.fetch_add(1, Ordering::SeqCst);
        *counts.per_ip.entry(ip).or_insert(0) += 1;
        Ok(Admission {
            limits: self.clone(),
            ip,
            unauthenticated: true,
        })
    }

    /// Admitted connections not yet authenticated.
    pub(crate) fn unauthenticated(&self) -> usize {
        self.unauthenticated.load(Ordering::SeqCst)
    }

    /// Admitted connections open from `ip`.
    #[cfg(test)]
    fn open_from(&self, ip: IpAddr) -> usize {
        crate::server::lock(&self.counts)
            .per_ip
            .get(&ip.to_canonical())
            .copied()
            .unwrap_or(0)
    }
}

/// An admitted connection's place under the limits, given back when it is dropped.
#[derive(Debug)]
pub(crate) struct Admission {
    limits: Arc<Limits>,
    ip: IpAddr,
    unauthenticated: bool,
}

impl Admission {
    /// The connection authenticated: it no longer counts as unauthenticated (idempotent).
    pub(crate) fn authenticated(&mut self) {
        if std::mem::take(&mut self.unauthenticated) {
            self.limits.unauthenticated.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.authenticated();
        let mut counts = crate::server::lock(&self.limits.counts);
        if let Some(n) = counts.per_ip.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                // Addresses that left hold no memory.
                counts.per_ip.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    // r[verify gateway.edge.limits]
    #[test]
    fn each_limit_refuses_past_its_count_and_frees_its_place_on_drop() {
        let limits = Limits::new(2, 3);
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
        assert!(crate::server::lock(&limits.counts).per_ip.is_empty());
    }

    #[test]
    fn zero_means_no_limit() {
        let limits = Limits::new(0, 0);
        let held: Vec<_> = (0..1000)
            .map(|_| limits.admit(ip("10.0.0.1")).unwrap())
            .collect();
        assert_eq!(limits.unauthenticated(), 1000);
        drop(held);
        assert_eq!(limits.unauthenticated(), 0);
    }
}
