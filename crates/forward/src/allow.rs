//! The target allow-list: the only targets the node relays to.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};
use thiserror::Error;

use crate::auth::{Credential, CredentialDigest};

/// One allowed range of targets: an address prefix and a port range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowRule {
    net: IpAddr,
    prefix: u8,
    ports: RangeInclusive<u16>,
}

/// Why an allow-list entry did not parse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "allow-list entry {entry:?}: {reason} (expected ADDR[/PREFIX]:PORT[-PORT], e.g. 10.0.0.0/8:53 or [::1]:5000-5100)"
)]
pub struct AllowParseError {
    /// The entry as written.
    pub entry: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl AllowRule {
    /// A rule from its parts; `prefix` is clamped to the address family's length. A rule inside
    /// the IPv4-mapped range (`::ffff:0:0/96`) is the IPv4 rule it means.
    // r[impl forward.allow+2]
    pub fn new(net: IpAddr, prefix: u8, ports: RangeInclusive<u16>) -> Self {
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.min(max);
        let (net, prefix) = match net {
            IpAddr::V6(v6) if prefix >= 96 => match v6.to_ipv4_mapped() {
                Some(v4) => (IpAddr::V4(v4), prefix - 96),
                None => (net, prefix),
            },
            _ => (net, prefix),
        };
        AllowRule { net, prefix, ports }
    }

    /// Whether `target` falls inside this rule. An IPv4-mapped target is matched as the IPv4
    /// address it reaches (the node's flow sockets are dual-stack), so only an IPv4 rule admits it;
    /// a special target only when this rule lies inside its special range.
    // r[impl forward.allow+2]
    // r[impl forward.allow.special]
    pub fn allows(&self, target: &SocketAddr) -> bool {
        if !self.ports.contains(&target.port()) {
            return false;
        }
        let ip = canonical(target.ip());
        self.contains(ip) && special_prefix(ip).is_none_or(|special| self.prefix >= special)
    }

    /// Whether `ip` lies in this rule's network.
    fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            // An IPv4 rule never admits an IPv6 target, and vice versa.
            _ => false,
        }
    }
}

/// The prefix length of the special range `ip` lies in (loopback, link-local, unspecified,
/// multicast, IPv4 broadcast), if any: such a target is reached only through a rule of at least
/// that length, a rule inside the range, never through one that merely contains it (`0.0.0.0/0`).
/// Since the rule contains the target too, a rule at least as long as the range lies within it.
// r[impl forward.allow.special]
fn special_prefix(ip: IpAddr) -> Option<u8> {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            match (a, b) {
                // The cloud metadata address (169.254.169.254) is link-local.
                (169, 254) => Some(16),
                (127, _) => Some(8),
                // 0.0.0.0 reaches this host; the rest of 0/8 is "this network".
                (0, _) => Some(8),
                _ if v4.is_broadcast() => Some(32),
                _ if v4.is_multicast() => Some(4),
                _ => None,
            }
        }
        IpAddr::V6(v6) => {
            if v6.is_loopback() || v6.is_unspecified() {
                Some(128)
            } else if v6.is_unicast_link_local() {
                Some(10)
            } else if v6.is_multicast() {
                Some(8)
            } else {
                None
            }
        }
    }
}

/// The address a packet sent to `ip` reaches: an IPv4-mapped IPv6 address is its IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

impl fmt::Display for AllowRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.net {
            IpAddr::V4(ip) => write!(f, "{ip}/{}", self.prefix)?,
            IpAddr::V6(ip) => write!(f, "[{ip}/{}]", self.prefix)?,
        }
        write!(f, ":{}-{}", self.ports.start(), self.ports.end())
    }
}

impl FromStr for AllowRule {
    type Err = AllowParseError;

    fn from_str(entry: &str) -> Result<Self, Self::Err> {
        let fail = |reason| AllowParseError {
            entry: entry.to_owned(),
            reason,
        };
        let (net, ports) = if let Some(rest) = entry.strip_prefix('[') {
            let (net, ports) = rest
                .split_once("]:")
                .ok_or(fail("missing ']:' after IPv6 prefix"))?;
            (net, ports)
        } else {
            entry.rsplit_once(':').ok_or(fail("missing ':PORT'"))?
        };
        let (addr, prefix) = match net.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (net, None),
        };
        let ip: IpAddr = addr.parse().map_err(|_| fail("not an IP address"))?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or(fail("prefix length out of range"))?,
            None => max,
        };
        let port = |p: &str| p.parse::<u16>().map_err(|_| fail("not a port number"));
        let ports = match ports.split_once('-') {
            _ if ports == "*" => 0..=u16::MAX,
            Some((lo, hi)) => {
                let (lo, hi) = (port(lo)?, port(hi)?);
                if lo > hi {
                    return Err(fail("port range is empty"));
                }
                lo..=hi
            }
            None => {
                let p = port(ports)?;
                p..=p
            }
        };
        Ok(AllowRule::new(ip, prefix, ports))
    }
}

/// The node's allow-list. Empty allows nothing: the node is never an open relay.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    rules: Vec<AllowRule>,
}

impl AllowList {
    /// A list of rules.
    pub fn new(rules: Vec<AllowRule>) -> Self {
        AllowList { rules }
    }

    /// Parses each entry (see [`AllowRule`]'s `FromStr`).
    pub fn parse<'a>(entries: impl IntoIterator<Item = &'a str>) -> Result<Self, AllowParseError> {
        Ok(AllowList {
            rules: entries
                .into_iter()
                .map(str::parse)
                .collect::<Result<_, _>>()?,
        })
    }

    /// Whether `target` is allowed: inside at least one rule.
    // r[impl forward.allow+2]
    pub fn allows(&self, target: &SocketAddr) -> bool {
        self.rules.iter().any(|r| r.allows(target))
    }

    /// The rules.
    pub fn rules(&self) -> &[AllowRule] {
        &self.rules
    }
}

/// Which allow-list each credential reaches: its own, when the node's configuration gives it one,
/// else the node's. Opens refused for a target outside the credential's list are counted here.
pub struct Grants {
    global: Arc<AllowList>,
    /// SHA-256 of each credential with its own list, and that list.
    own: Vec<([u8; 32], Arc<AllowList>)>,
    /// Shared with the grants that replace these ([`Grants::replacing`]), so the count spans
    /// updates.
    refused: Arc<AtomicU64>,
}

impl fmt::Debug for Grants {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // No credential (nor its digest) in any output.
        write!(
            f,
            "Grants({} global rules, {} credentials with their own)",
            self.global.rules.len(),
            self.own.len()
        )
    }
}

impl Grants {
    /// `global` for every credential not in `own`; each of `own` reaches only its own list.
    pub fn new<'a>(
        global: AllowList,
        own: impl IntoIterator<Item = (&'a Credential, &'a AllowList)>,
    ) -> Self {
        Grants {
            global: Arc::new(global),
            own: own
                .into_iter()
                .map(|(credential, list)| {
                    (
                        Sha256::digest(credential.expose()).into(),
                        Arc::new(list.clone()),
                    )
                })
                .collect(),
            refused: Arc::new(AtomicU64::new(0)),
        }
    }

    /// These grants, taking over `previous`'s count of refusals: what a live update of the
    /// node's allow-lists installs, so [`Grants::refused`] counts across updates.
    pub(crate) fn replacing(mut self, previous: &Grants) -> Self {
        self.refused = previous.refused.clone();
        self
    }

    /// The list an authenticated connection that presented `presented` reaches: the first own
    /// list of that credential, else the node's. Every entry is compared, in constant time, as
    /// the credential check does, so the time taken says nothing about which entry matched.
    // r[impl forward.allow.credential]
    pub fn list_for(&self, presented: &[u8]) -> Arc<AllowList> {
        self.list_for_digest(&CredentialDigest::of(presented))
    }

    /// [`Grants::list_for`] for a credential already hashed: how a connection finds its list
    /// again after an update.
    // r[impl forward.allow.credential]
    pub(crate) fn list_for_digest(&self, presented: &CredentialDigest) -> Arc<AllowList> {
        let presented = presented.0;
        // 0: the node's list; i + 1: own entry i. Entries are visited last to first so that the
        // first one listed wins.
        let mut chosen = 0u64;
        for (i, (digest, _)) in self.own.iter().enumerate().rev() {
            let index = u64::try_from(i + 1).unwrap_or(u64::MAX);
            chosen.conditional_assign(&index, digest.ct_eq(&presented));
        }
        usize::try_from(chosen)
            .ok()
            .and_then(|i| i.checked_sub(1))
            .and_then(|i| self.own.get(i))
            .map_or_else(|| self.global.clone(), |(_, list)| list.clone())
    }

    /// Whether a forward to `target` may open under `list` (from [`Grants::list_for`]); a refusal
    /// is counted.
    // r[impl forward.allow.credential]
    pub fn admits(&self, list: &AllowList, target: &SocketAddr) -> bool {
        let admitted = list.allows(target);
        if !admitted {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        admitted
    }

    /// Opens refused because their target was outside the credential's list.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use proptest::prelude::*;

    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().expect("socket address")
    }

    // r[verify forward.allow+2]
    #[test]
    fn only_targets_inside_a_rule_are_allowed() {
        let list = AllowList::parse(["10.0.0.0/8:53", "127.0.0.1:5000-5100", "[fd00::/8]:*"])
            .expect("parses");
        assert!(list.allows(&sa("10.1.2.3:53")));
        assert!(!list.allows(&sa("10.1.2.3:54")));
        assert!(!list.allows(&sa("11.0.0.1:53")));
        assert!(list.allows(&sa("127.0.0.1:5000")));
        assert!(list.allows(&sa("127.0.0.1:5100")));
        assert!(!list.allows(&sa("127.0.0.1:5101")));
        assert!(!list.allows(&sa("127.0.0.2:5000")));
        assert!(list.allows(&sa("[fd12::1]:9")));
        assert!(!AllowList::default().allows(&sa("127.0.0.1:53")));
        assert!(
            AllowList::parse(["0.0.0.0/0:*"])
                .expect("parses")
                .allows(&sa("1.2.3.4:1"))
        );
        for bad in [
            "10.0.0.0/33:53",
            "10.0.0.1",
            "x:53",
            "10.0.0.1:9-1",
            "[::1:53",
        ] {
            assert!(AllowList::parse([bad]).is_err(), "{bad}");
        }
    }

    // r[verify forward.allow+2]
    #[test]
    fn an_ipv4_mapped_address_is_matched_as_the_ipv4_address_it_reaches() {
        // The flow socket is dual-stack: [::ffff:a.b.c.d] reaches a.b.c.d.
        let wide = AllowList::parse(["[::/0]:53"]).expect("parses");
        assert!(!wide.allows(&sa("[::ffff:127.0.0.53]:53")));
        assert!(!wide.allows(&sa("[::ffff:10.0.0.1]:53")));
        assert!(wide.allows(&sa("[2001:db8::1]:53")));
        let v4 = AllowList::parse(["10.0.0.0/8:53"]).expect("parses");
        assert!(v4.allows(&sa("[::ffff:10.0.0.1]:53")));
        assert!(!v4.allows(&sa("[::ffff:11.0.0.1]:53")));
        // A rule written in the mapped form is the IPv4 rule it means.
        let mapped: AllowRule = "[::ffff:10.0.0.0/104]:53".parse().expect("parses");
        assert_eq!(mapped, "10.0.0.0/8:53".parse().expect("parses"));
        assert!(
            AllowList::new(vec![mapped.clone()]).allows(&sa("10.1.2.3:53")),
            "{mapped}"
        );
        assert!(!AllowList::new(vec![mapped]).allows(&sa("[2001:db8::1]:53")));
    }

    fn v4_rule() -> impl Strategy<Value = (Ipv4Addr, u8)> {
        (any::<u32>(), 0u8..=32).prop_map(|(ip, prefix)| (Ipv4Addr::from(ip), prefix))
    }

    proptest! {
        // r[verify forward.allow+2]
        #[test]
        fn a_mapped_target_is_allowed_exactly_as_its_ipv4_address(
            (net, prefix) in v4_rule(),
            ip in any::<u32>(),
            port in any::<u16>(),
            wide in 0u8..=96,
        ) {
            let ip = Ipv4Addr::from(ip);
            let rule = AllowRule::new(IpAddr::V4(net), prefix, 0..=u16::MAX);
            let plain = SocketAddr::from((ip, port));
            let mapped = SocketAddr::from((ip.to_ipv6_mapped(), port));
            prop_assert_eq!(rule.allows(&mapped), rule.allows(&plain));
            // The same rule written in the mapped form.
            let as_v6 = AllowRule::new(IpAddr::V6(net.to_ipv6_mapped()), prefix + 96, 0..=u16::MAX);
            prop_assert_eq!(&as_v6, &rule);
            // An IPv6 rule wider than the mapped range never reaches an IPv4 address through it.
            let v6 = AllowRule::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), wide, 0..=u16::MAX);
            prop_assert!(!v6.allows(&mapped));
        }
    }

    // r[verify forward.allow.special]
    #[test]
    fn a_special_target_needs_a_rule_that_names_it() {
        let broad = AllowList::parse(["0.0.0.0/0:*", "[::/0]:*"]).expect("parses");
        for special in [
            "127.0.0.1:53",
            "127.0.0.53:53",
            "169.254.169.254:80",
            "169.254.0.1:53",
            "0.0.0.0:53",
            "0.1.2.3:53",
            "224.0.0.251:5353",
            "239.255.255.250:1900",
            "255.255.255.255:67",
            "[::1]:53",
            "[::]:53",
            "[fe80::1]:53",
            "[febf::1]:53",
            "[ff02::fb]:5353",
            "[::ffff:127.0.0.1]:53",
            "[::ffff:169.254.169.254]:80",
        ] {
            assert!(
                !broad.allows(&sa(special)),
                "{special} through a broad rule"
            );
        }
        for ordinary in [
            "10.0.0.1:53",
            "1.1.1.1:53",
            "[2001:db8::1]:53",
            "[fec0::1]:53",
        ] {
            assert!(broad.allows(&sa(ordinary)), "{ordinary}");
        }
        // Rules inside the special range name it.
        let named = AllowList::parse([
            "127.0.0.1/32:53",
            "169.254.169.254:80",
            "224.0.0.0/4:*",
            "[::1]:53",
            "[fe80::/10]:*",
        ])
        .expect("parses");
        assert!(named.allows(&sa("127.0.0.1:53")));
        assert!(!named.allows(&sa("127.0.0.2:53")));
        assert!(named.allows(&sa("169.254.169.254:80")));
        assert!(named.allows(&sa("239.1.1.1:9")));
        assert!(named.allows(&sa("[::1]:53")));
        assert!(named.allows(&sa("[fe80::1234]:9")));
        assert!(named.allows(&sa("[::ffff:127.0.0.1]:53")));
        assert!(
            AllowList::parse(["127.0.0.0/8:*"])
                .expect("parses")
                .allows(&sa("127.9.9.9:1"))
        );
        // A rule wider than the special range does not name it.
        assert!(
            !AllowList::parse(["96.0.0.0/3:*"])
                .expect("parses")
                .allows(&sa("127.0.0.1:53"))
        );
        assert!(
            !AllowList::parse(["169.0.0.0/8:*"])
                .expect("parses")
                .allows(&sa("169.254.169.254:80"))
        );
        assert!(
            !AllowList::parse(["[fe00::/7]:*"])
                .expect("parses")
                .allows(&sa("[fe80::1]:53"))
        );
    }

    /// The special ranges, as (network, prefix).
    const SPECIAL: &[(&str, u8)] = &[
        ("127.0.0.0", 8),
        ("169.254.0.0", 16),
        ("0.0.0.0", 8),
        ("224.0.0.0", 4),
        ("255.255.255.255", 32),
        ("::1", 128),
        ("::", 128),
        ("fe80::", 10),
        ("ff00::", 8),
    ];

    /// An address inside special range `which`, from `bits`.
    fn inside(which: usize, bits: u128) -> IpAddr {
        let (net, prefix) = SPECIAL[which % SPECIAL.len()];
        match net.parse::<IpAddr>().expect("range") {
            IpAddr::V4(net) => {
                let host = u32::MAX.checked_shr(u32::from(prefix)).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(net) | (bits as u32 & host)))
            }
            IpAddr::V6(net) => {
                let host = u128::MAX.checked_shr(u32::from(prefix)).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(net) | (bits & host)))
            }
        }
    }

    proptest! {
        // r[verify forward.allow.special]
        #[test]
        fn a_special_target_is_reached_only_by_a_rule_inside_its_range(
            which in 0usize..64,
            bits in any::<u128>(),
            wide in 0u8..=128,
            narrow in 0u8..=128,
            port in any::<u16>(),
        ) {
            let ip = inside(which, bits);
            let (_, range) = SPECIAL[which % SPECIAL.len()];
            let target = SocketAddr::new(ip, port);
            let max = if ip.is_ipv4() { 32 } else { 128 };
            // Any rule around the target wider than its special range refuses it.
            let wide = wide % range.max(1);
            if range > 0 && wide < range {
                let rule = AllowRule::new(ip, wide, 0..=u16::MAX);
                prop_assert!(!rule.allows(&target), "{} admits {}", rule, target);
            }
            // Any rule around it no wider than the range admits it.
            let narrow = range + narrow % (max - range + 1);
            let rule = AllowRule::new(ip, narrow, 0..=u16::MAX);
            prop_assert!(rule.allows(&target), "{} refuses {}", rule, target);
            // So does its IPv4-mapped form, when it has one.
            if let IpAddr::V4(v4) = ip {
                let mapped = SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), port);
                prop_assert!(rule.allows(&mapped));
            }
        }
    }

    // r[verify forward.allow.credential]
    #[test]
    fn a_credential_with_its_own_list_reaches_only_its_targets() {
        let global = AllowList::parse(["10.0.0.1:53"]).expect("parses");
        let (alice, bob) = (Credential::new("alice-token"), Credential::new("bob-token"));
        let (alice_list, bob_list) = (
            AllowList::parse(["10.0.0.2:53"]).expect("parses"),
            AllowList::parse(["10.0.0.3:53", "10.0.0.4:53"]).expect("parses"),
        );
        let grants = Grants::new(global.clone(), [(&alice, &alice_list), (&bob, &bob_list)]);
        assert_eq!(*grants.list_for(b"alice-token"), alice_list);
        assert_eq!(*grants.list_for(b"bob-token"), bob_list);
        assert_eq!(*grants.list_for(b"anyone-else"), global);
        let alice = grants.list_for(b"alice-token");
        assert!(grants.admits(&alice, &sa("10.0.0.2:53")));
        assert!(!grants.admits(&alice, &sa("10.0.0.1:53")));
        assert!(!grants.admits(&alice, &sa("10.0.0.3:53")));
        assert_eq!(grants.refused(), 2);
        assert!(!format!("{grants:?}").contains("token"));
    }
}
