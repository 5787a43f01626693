//! Which floods run, against which edge, and how big each is: pure, so the bounds CI runs are
//! pinned by tests and the full run is the same list at full size.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use serde::Serialize;

/// The node's listeners: each flood attacks one, and a real client is measured on every one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Edge {
    /// The admin API over TCP.
    Admin,
    /// The ACME HTTP-01 responder.
    Http01,
    /// The forward's QUIC listener.
    Forward,
    /// The gateway's WebSocket listener.
    Gateway,
}

impl Edge {
    /// Every edge, in report order.
    pub const ALL: [Edge; 4] = [Edge::Admin, Edge::Http01, Edge::Forward, Edge::Gateway];

    /// The name in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Edge::Admin => "admin",
            Edge::Http01 => "http01",
            Edge::Forward => "forward",
            Edge::Gateway => "gateway",
        }
    }
}

/// What one flood does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Attack {
    /// TCP connections that send half a request and then one header byte a second, never
    /// finishing it (slowloris).
    Slowloris {
        /// Connections opened.
        connections: usize,
    },
    /// QUIC connections that complete the handshake and never authenticate.
    QuicUnauthenticated {
        /// Connections opened.
        connections: usize,
    },
    /// WebSocket upgrades that never send their token.
    WsUnauthenticated {
        /// Connections opened.
        connections: usize,
    },
    /// WebSocket connections that each send something hostile after the upgrade, one after
    /// another, from `workers` at once.
    WsHostile {
        /// Concurrent attackers.
        workers: usize,
        /// What each sends.
        sends: WsPayload,
    },
    /// QUIC connections that each present a wrong credential, one after another, from `workers`
    /// at once.
    QuicBadTokens {
        /// Concurrent attackers.
        workers: usize,
    },
    /// Authenticated QUIC connections (the attackers' own credential) that try to open every
    /// stream they can and write requests on their control stream without ever reading the
    /// node's answers (a stream and window flood).
    QuicStreams {
        /// Connections opened.
        connections: usize,
    },
    /// Authenticated QUIC connections that open forwards and send datagrams, each from a flow
    /// never seen before, to churn the node's pool of flow sockets.
    FlowChurn {
        /// Connections opened.
        connections: usize,
    },
    /// QUIC Initial packets (a real client's first flight, replayed) from ever-new source ports
    /// on several addresses, that never answer the node's Retry: connection attempts that never
    /// complete address validation.
    QuicUnvalidated {
        /// Initial packets sent in all.
        packets: usize,
    },
}

impl Attack {
    /// Whether the node must end every connection of this attack (each carries something it
    /// refuses), rather than hold up to its caps of them.
    pub fn ends_all(self) -> bool {
        matches!(
            self,
            Attack::WsHostile { .. }
                | Attack::QuicBadTokens { .. }
                | Attack::QuicUnvalidated { .. }
        )
    }

    /// Whether its attackers authenticate (with their own credential), so what they may hold is
    /// that credential's bound on connections.
    pub fn authenticated(self) -> bool {
        matches!(self, Attack::QuicStreams { .. } | Attack::FlowChurn { .. })
    }
}

/// What a hostile WebSocket client sends once upgraded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WsPayload {
    /// An `auth` message whose token is not one.
    BadToken,
    /// A 1 MiB text message (the gateway's limit is 64 KiB).
    Oversized,
    /// Bytes that are no WebSocket frame.
    Malformed,
}

/// One flood of the suite.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Flood {
    /// Its name in the report and for `--only`.
    pub name: &'static str,
    /// The edge it attacks.
    pub edge: Edge,
    /// What it does.
    pub attack: Attack,
    /// How many distinct loopback source addresses the attackers use.
    pub sources: u8,
    /// The first of them; the others follow it.
    pub first_source: Ipv4Addr,
    /// How long it runs once its connections are open; it stops by itself.
    #[serde(with = "secs")]
    pub duration: Duration,
}

impl Flood {
    /// The `i`th attacker's source address: `sources` addresses from `first_source` on, in turn.
    pub fn source(&self, i: usize) -> IpAddr {
        let n = u8::try_from(i % usize::from(self.sources.max(1))).unwrap_or(0);
        let [a, b, c, d] = self.first_source.octets();
        IpAddr::V4(Ipv4Addr::new(a, b, c, d.saturating_add(n)))
    }

    /// Every source address its attackers use.
    #[cfg(test)]
    pub fn addresses(&self) -> impl Iterator<Item = IpAddr> + '_ {
        (0..usize::from(self.sources)).map(|i| self.source(i))
    }
}

/// How large the floods are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scale {
    /// The full floods `docs/security.md` names.
    Full,
    /// The bounded version CI runs: the same floods, smaller and shorter.
    Ci,
}

/// The first attacker address: the real client probes from 127.0.0.1.
const FIRST_SOURCE: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

// i[impl attack.floods+3]
/// The suite at `scale`, each flood running `duration` (the full run's default is 20 s).
pub fn floods(scale: Scale, duration: Duration) -> Vec<Flood> {
    let (slow, quic, ws, workers) = match scale {
        Scale::Full => (2_000, 1_000, 2_000, 64),
        Scale::Ci => (400, 200, 400, 16),
    };
    let (streams, churn, initials) = match scale {
        Scale::Full => (32, 4, 20_000),
        Scale::Ci => (20, 2, 4_000),
    };
    let hostile = |name, sends| Flood {
        name,
        edge: Edge::Gateway,
        attack: Attack::WsHostile { workers, sends },
        sources: 4,
        first_source: FIRST_SOURCE,
        duration,
    };
    let mut plan = vec![
        Flood {
            name: "admin-slowloris",
            edge: Edge::Admin,
            attack: Attack::Slowloris { connections: slow },
            sources: 8,
            first_source: FIRST_SOURCE,
            duration,
        },
        Flood {
            name: "http01-slowloris",
            edge: Edge::Http01,
            attack: Attack::Slowloris { connections: slow },
            sources: 8,
            first_source: FIRST_SOURCE,
            duration,
        },
        Flood {
            name: "forward-unauthenticated",
            edge: Edge::Forward,
            attack: Attack::QuicUnauthenticated { connections: quic },
            sources: 10,
            first_source: FIRST_SOURCE,
            duration,
        },
        Flood {
            name: "gateway-unauthenticated",
            edge: Edge::Gateway,
            attack: Attack::WsUnauthenticated { connections: ws },
            sources: 4,
            first_source: FIRST_SOURCE,
            duration,
        },
        hostile("gateway-bad-tokens", WsPayload::BadToken),
        hostile("gateway-oversized", WsPayload::Oversized),
        hostile("gateway-malformed", WsPayload::Malformed),
        Flood {
            name: "forward-bad-tokens",
            edge: Edge::Forward,
            attack: Attack::QuicBadTokens {
                workers: workers / 2,
            },
            sources: 4,
            first_source: FIRST_SOURCE,
            duration,
        },
        Flood {
            name: "forward-streams",
            edge: Edge::Forward,
            attack: Attack::QuicStreams {
                connections: streams,
            },
            sources: 4,
            first_source: FIRST_SOURCE,
            duration,
        },
        Flood {
            name: "forward-flow-churn",
            edge: Edge::Forward,
            attack: Attack::FlowChurn { connections: churn },
            sources: 2,
            first_source: FIRST_SOURCE,
            duration,
        },
        Flood {
            name: "forward-unvalidated",
            edge: Edge::Forward,
            attack: Attack::QuicUnvalidated { packets: initials },
            sources: 10,
            first_source: FIRST_SOURCE,
            duration,
        },
    ];
    // Each flood its own addresses, one range after another: the node paces a source that
    // failed to authenticate (up to 60 s), so a flood sharing a source with an earlier one could
    // be kept out by what that one did, and measure nothing.
    if place(&mut plan, FIRST_SOURCE).is_none() {
        panic!("the floods' source addresses run past 127.0.0.254: fewer sources per flood");
    }
    plan
}

/// Gives each flood of `plan` its own range of addresses, one after another from `first`; none
/// when they would run past 127.0.0.254 (a saturated octet would give two floods one address).
fn place(plan: &mut [Flood], first: Ipv4Addr) -> Option<()> {
    let mut next = first;
    for flood in plan {
        flood.first_source = next;
        let [a, b, c, d] = next.octets();
        // The range's last address is one before `next`, so `next` may be at most .255.
        next = Ipv4Addr::new(a, b, c, d.checked_add(flood.sources)?);
    }
    Some(())
}

/// The flood names, for `--only`'s help and errors.
pub fn names() -> Vec<&'static str> {
    floods(Scale::Ci, Duration::ZERO)
        .iter()
        .map(|f| f.name)
        .collect()
}

mod secs {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify attack.floods+3]
    #[test]
    fn the_full_suite_is_the_documented_one_and_ci_runs_the_same_floods_smaller() {
        let full = floods(Scale::Full, Duration::from_secs(20));
        let ci = floods(Scale::Ci, Duration::from_secs(5));
        let edges: Vec<Edge> = full.iter().map(|f| f.edge).collect();
        for edge in Edge::ALL {
            assert!(edges.contains(&edge), "{edge:?} is attacked");
        }
        assert!(
            full.iter()
                .any(|f| f.attack == Attack::Slowloris { connections: 2_000 }
                    && f.edge == Edge::Admin)
        );
        assert!(full.iter().any(
            |f| f.attack == Attack::Slowloris { connections: 2_000 } && f.edge == Edge::Http01
        ));
        assert!(
            full.iter()
                .any(|f| f.attack == Attack::QuicUnauthenticated { connections: 1_000 })
        );
        for sends in [
            WsPayload::BadToken,
            WsPayload::Oversized,
            WsPayload::Malformed,
        ] {
            assert!(
                full.iter()
                    .any(|f| f.attack == Attack::WsHostile { workers: 64, sends }),
                "{sends:?}"
            );
        }
        assert!(
            full.iter()
                .any(|f| f.attack == Attack::QuicBadTokens { workers: 32 })
        );
        assert!(
            full.iter()
                .any(|f| f.attack == Attack::QuicStreams { connections: 32 })
        );
        assert!(
            full.iter()
                .any(|f| f.attack == Attack::FlowChurn { connections: 4 })
        );
        assert!(
            full.iter()
                .any(|f| f.attack == Attack::QuicUnvalidated { packets: 20_000 })
        );
        assert_eq!(
            full.iter().map(|f| f.name).collect::<Vec<_>>(),
            ci.iter().map(|f| f.name).collect::<Vec<_>>()
        );
        for (big, small) in full.iter().zip(&ci) {
            assert_eq!(big.edge, small.edge);
            assert!(size(small.attack) < size(big.attack), "{}", big.name);
            assert_eq!(small.duration, Duration::from_secs(5));
            assert!(
                big.sources >= 2,
                "{} comes from several addresses",
                big.name
            );
        }
        assert_eq!(names().len(), full.len());
    }

    fn of(sources: u8) -> Flood {
        Flood {
            name: "f",
            edge: Edge::Admin,
            attack: Attack::Slowloris { connections: 1 },
            sources,
            first_source: FIRST_SOURCE,
            duration: Duration::ZERO,
        }
    }

    // i[verify attack.floods+3]
    #[test]
    fn source_ranges_end_at_127_0_0_254_and_one_more_address_fails_loudly() {
        // From 127.0.0.2, 253 addresses run to 127.0.0.254.
        let mut fits = [of(200), of(53)];
        assert_eq!(place(&mut fits, FIRST_SOURCE), Some(()));
        assert_eq!(
            fits[1].source(52),
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, 254))
        );
        assert_eq!(place(&mut [of(200), of(54)], FIRST_SOURCE), None);
        assert_eq!(place(&mut [of(200), of(60), of(1)], FIRST_SOURCE), None);
    }

    // i[verify attack.floods+3]
    #[test]
    fn no_two_floods_share_a_source_address_nor_use_the_real_clients() {
        for scale in [Scale::Full, Scale::Ci] {
            let plan = floods(scale, Duration::from_secs(5));
            for (i, a) in plan.iter().enumerate() {
                let mine: Vec<IpAddr> = a.addresses().collect();
                assert_eq!(mine.len(), usize::from(a.sources), "{}", a.name);
                for ip in &mine {
                    assert!(ip.is_loopback(), "{}: {ip}", a.name);
                    assert_ne!(*ip, IpAddr::V4(Ipv4Addr::LOCALHOST), "{}", a.name);
                }
                for b in plan.iter().skip(i + 1) {
                    let shared: Vec<IpAddr> =
                        b.addresses().filter(|ip| mine.contains(ip)).collect();
                    assert!(
                        shared.is_empty(),
                        "{} and {} share {shared:?}: what the node remembers of one flood's \
                         sources (its authentication pacing) would keep the other out",
                        a.name,
                        b.name
                    );
                }
            }
        }
    }

    #[test]
    fn attackers_take_their_floods_sources_in_turn() {
        let plan = floods(Scale::Full, Duration::from_secs(5));
        let f = &plan[0];
        let seen: std::collections::BTreeSet<IpAddr> = (0..100).map(|i| f.source(i)).collect();
        assert_eq!(seen.len(), usize::from(f.sources));
        assert_eq!(f.source(0), IpAddr::V4(f.first_source));
        assert_eq!(f.source(usize::from(f.sources)), f.source(0));
    }

    fn size(attack: Attack) -> usize {
        match attack {
            Attack::Slowloris { connections }
            | Attack::QuicUnauthenticated { connections }
            | Attack::WsUnauthenticated { connections }
            | Attack::QuicStreams { connections }
            | Attack::FlowChurn { connections } => connections,
            Attack::QuicUnvalidated { packets } => packets,
            Attack::WsHostile { workers, .. } | Attack::QuicBadTokens { workers } => workers,
        }
    }
}
