//! holdfast-source: which *source* a peer address counts as, for per-source connection limits —
//! an IPv4 address is itself, an IPv4-mapped IPv6 address is its IPv4 address, any other IPv6
//! address is its /64. Every listener with a per-source limit keys its counts on [`Source`], so
//! they all count alike.
//!
//! The README follows.
//!
#![doc = include_str!("../README.md")]

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

/// The network half of an IPv6 address: its first 64 bits.
const SLASH_64: u128 = u128::MAX << 64;

/// What a peer's connections are counted under: an IPv4 address, or an IPv6 /64.
///
/// Ordered IPv4 sources first (by address), then IPv6 /64s (by network).
// r[impl source.key]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Source(IpAddr);

impl Source {
    /// The source of a peer at `ip`: an IPv4 address is itself, an IPv4-mapped IPv6 address is
    /// the IPv4 address it maps, any other IPv6 address is the /64 it lies in.
    // r[impl source.key]
    pub fn of(ip: IpAddr) -> Source {
        // An IPv4 peer seen through a dual-stack socket is the same peer.
        match ip.to_canonical() {
            IpAddr::V4(v4) => Source(IpAddr::V4(v4)),
            // One host is routinely given a whole /64 and picks its interface identifiers
            // freely: keyed on the full address, one host would be 2^64 sources.
            IpAddr::V6(v6) => Source(IpAddr::V6(Ipv6Addr::from_bits(v6.to_bits() & SLASH_64))),
        }
    }

    /// The source's address: the IPv4 address, or the /64's network address (its last 64 bits
    /// zero). [`Source::of`] that address is this source again.
    pub fn addr(self) -> IpAddr {
        self.0
    }
}

/// The IPv4 address (`192.0.2.7`), or the /64 in prefix notation (`2001:db8:1:2::/64`).
impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            IpAddr::V4(v4) => write!(f, "{v4}"),
            IpAddr::V6(v6) => write!(f, "{v6}/64"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    fn of(text: &str) -> Source {
        Source::of(text.parse().unwrap())
    }

    // r[verify source.key]
    #[test]
    fn an_ipv4_address_is_its_own_source_and_a_mapped_one_is_that_ipv4_address() {
        assert_eq!(
            of("192.0.2.7").addr(),
            "192.0.2.7".parse::<IpAddr>().unwrap()
        );
        assert_ne!(of("192.0.2.7"), of("192.0.2.8"));
        assert_eq!(of("::ffff:192.0.2.7"), of("192.0.2.7"));
        assert_eq!(of("::ffff:127.0.0.2"), of("127.0.0.2"));
        // Mapped addresses are not folded into the /64 of ::ffff:0:0.
        assert_ne!(of("::ffff:192.0.2.7"), of("::ffff:192.0.2.8"));
        // An IPv6 address is not taken for an IPv4 one with the same bits (IPv4-compatible
        // addresses are plain IPv6).
        assert_ne!(of("::7f00:2"), of("127.0.0.2"));
        assert_ne!(of("::c000:207"), of("192.0.2.7"));
    }

    // r[verify source.key]
    #[test]
    fn an_ipv6_address_is_its_64() {
        assert_eq!(
            of("2001:db8:1:2:aaaa:bbbb:cccc:dddd").addr(),
            "2001:db8:1:2::".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            of("2001:db8:1:2::1"),
            of("2001:db8:1:2:ffff:ffff:ffff:ffff")
        );
        assert_ne!(of("2001:db8:1:2::1"), of("2001:db8:1:3::1"));
        assert_eq!(of("::1"), of("::2"));
        assert_eq!(of("::1").addr(), "::".parse::<IpAddr>().unwrap());
    }

    // r[verify source.key]
    #[test]
    fn a_source_displays_as_its_address_or_its_64() {
        assert_eq!(of("192.0.2.7").to_string(), "192.0.2.7");
        assert_eq!(of("::ffff:192.0.2.7").to_string(), "192.0.2.7");
        assert_eq!(of("2001:db8:1:2::9").to_string(), "2001:db8:1:2::/64");
        assert_eq!(of("::1").to_string(), "::/64");
        assert!(
            of("255.255.255.255") < of("::1"),
            "IPv4 sources order first"
        );
    }

    /// An IPv6 address that is not IPv4-mapped.
    fn plain_v6() -> impl Strategy<Value = Ipv6Addr> {
        any::<u128>()
            .prop_map(Ipv6Addr::from_bits)
            .prop_filter("IPv4-mapped", |a| a.to_ipv4_mapped().is_none())
    }

    proptest! {
        // r[verify source.key]
        #[test]
        fn all_addresses_of_one_64_are_one_source(a in plain_v6(), host in any::<u64>()) {
            let other = Ipv6Addr::from_bits((a.to_bits() & SLASH_64) | u128::from(host));
            // `other` may be IPv4-mapped only if `a`'s /64 is ::/64, i.e. `a` was ::x.
            prop_assume!(other.to_ipv4_mapped().is_none());
            prop_assert_eq!(Source::of(IpAddr::V6(a)), Source::of(IpAddr::V6(other)));
            prop_assert_eq!(
                Source::of(IpAddr::V6(a)).addr(),
                IpAddr::V6(Ipv6Addr::from_bits(a.to_bits() & SLASH_64))
            );
        }

        // r[verify source.key]
        #[test]
        fn addresses_of_different_64s_are_different_sources(a in plain_v6(), b in plain_v6()) {
            prop_assume!(a.to_bits() >> 64 != b.to_bits() >> 64);
            prop_assert_ne!(Source::of(IpAddr::V6(a)), Source::of(IpAddr::V6(b)));
        }

        // r[verify source.key]
        #[test]
        fn a_mapped_address_is_its_ipv4_source_and_ipv4_sources_are_distinct(
            a in any::<u32>(),
            b in any::<u32>(),
        ) {
            let (a, b) = (Ipv4Addr::from(a), Ipv4Addr::from(b));
            let source = Source::of(IpAddr::V4(a));
            prop_assert_eq!(source.addr(), IpAddr::V4(a));
            prop_assert_eq!(Source::of(IpAddr::V6(a.to_ipv6_mapped())), source);
            prop_assert_eq!(Source::of(IpAddr::V4(b)) == source, a == b);
        }

        // Counting and releasing agree however a caller re-derives a source from its address.
        // r[verify source.key]
        #[test]
        fn the_source_of_a_sources_address_is_that_source(bits in any::<u128>(), v4 in any::<u32>()) {
            for ip in [IpAddr::V6(Ipv6Addr::from_bits(bits)), IpAddr::V4(Ipv4Addr::from(v4))] {
                let source = Source::of(ip);
                prop_assert_eq!(Source::of(source.addr()), source);
            }
        }
    }
}
