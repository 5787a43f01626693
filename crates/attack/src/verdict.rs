//! The budgets `docs/security.md` states, and the verdict of a run against them: pure, so each
//! budget's edge is pinned by a test.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::latency::Summary;
use crate::plan::Edge;

/// What the attackers of one flood saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub struct Attackers {
    /// Connections (or attempts) the attackers made.
    pub attempted: usize,
    /// Connections the node accepted (TCP connected, QUIC handshake done, WebSocket upgraded),
    /// or unvalidated attempts it answered at all (a refusal included: what reached the node of
    /// those is a Retry, counted as ended by the node, or an overreach).
    pub accepted: usize,
    /// Accepted connections the node welcomed with the attackers' own credential (only floods
    /// whose attackers authenticate).
    pub authenticated: usize,
    /// Accepted connections the node ended before the flood did.
    pub ended_by_node: usize,
    /// Accepted connections still open when the flood ended.
    pub held_at_end: usize,
    /// Unvalidated attempts the node refused outright (Initial packets only: a CONNECTION_CLOSE)
    /// rather than answering with a Retry: its pacing of a source that failed to authenticate
    /// (`r[forward.auth.pacing+3]`); quinn drops, never answers, an Initial past its bounds.
    pub refused: usize,
    /// What the node let the attackers do past its bounds: a stream beyond the control stream,
    /// an unvalidated connection attempt taken into a handshake (a Handshake packet in the
    /// answer, or an answer that reads as neither a Retry nor a refusal).
    pub overreach: usize,
}

/// One resource of the node's process: before a flood, its peak during, and after the settle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub struct Resource {
    /// Before the flood.
    pub baseline: u64,
    /// The highest sample during it.
    pub peak: u64,
    /// After the flood, once settled (or at the settle's deadline).
    pub after: u64,
}

/// What one flood measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FloodResult {
    /// The flood's name.
    pub name: String,
    /// The edge it attacked.
    pub edge: Edge,
    /// How many source addresses its attackers used.
    pub sources: u8,
    /// Its attackers send what the node must end every time (bad credentials, hostile frames):
    /// no connection may be left held.
    pub ends_all: bool,
    /// Its attackers authenticate (with their own credential): what they may hold is that
    /// credential's bound on connections, not the listener's unauthenticated caps.
    pub authenticated: bool,
    /// Its attackers send unvalidated Initials and never answer: what reaches the node is an
    /// Initial it answers with a Retry (or takes further), never one it refuses.
    pub unvalidated: bool,
    /// What its attackers saw.
    pub attackers: Attackers,
    /// A real client's latency on every edge during the flood.
    pub latency: BTreeMap<Edge, Summary>,
    /// The node's open file descriptors.
    pub fds: Resource,
    /// The node's resident memory, KiB.
    pub rss_kib: Resource,
    /// The tasks alive on the node's runtime (`holdfast_runtime_tasks_alive`); none when the
    /// node does not publish them (an older build): not measured, never a zero.
    pub tasks: Option<Resource>,
    /// Why the tasks were not measured, when they were not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tasks_unread: Option<TasksUnread>,
}

/// Why the node's runtime tasks could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TasksUnread {
    /// `/metrics` answered without `holdfast_runtime_tasks_alive` (an older build).
    Absent,
    /// `/metrics` did not answer (with a 200) at all.
    NoAnswer,
}

impl TasksUnread {
    /// Why, in a report's words.
    pub fn why(self) -> &'static str {
        match self {
            TasksUnread::Absent => {
                "`holdfast_runtime_tasks_alive` absent from its `/metrics`: an older build?"
            }
            TasksUnread::NoAnswer => "its `/metrics` did not answer",
        }
    }
}

/// A whole run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    /// Each flood, in the order run.
    pub floods: Vec<FloodResult>,
    /// The node was still running after the last flood.
    pub node_alive: bool,
    /// Lines of the node's log that report a panic.
    pub panics: usize,
}

impl Outcome {
    /// The floods during which the node's runtime tasks could not be read.
    pub fn tasks_unmeasured(&self) -> Vec<&str> {
        self.floods
            .iter()
            .filter(|f| f.tasks.is_none())
            .map(|f| f.name.as_str())
            .collect()
    }

    /// The floods the suite could not launch (no attempt made: the Initials not caught, the
    /// client config or every source address failed): not the node's doing, so not judged.
    pub fn unlaunched(&self) -> Vec<&str> {
        self.floods
            .iter()
            .filter(|f| f.attackers.attempted == 0)
            .map(|f| f.name.as_str())
            .collect()
    }
}

/// The budgets a run is judged against (`docs/security.md`, "Budgets").
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Budgets {
    /// A real client's p99 on every edge, during every flood.
    #[serde(serialize_with = "ms")]
    pub p99: Duration,
    /// Probes a real client may see fail during a flood.
    pub failed_probes: usize,
    /// Open descriptors the node may hold at any time.
    pub fd_cap: u64,
    /// Resident memory the node may use at any time, KiB.
    pub rss_cap_kib: u64,
    /// After a flood, descriptors and memory are back within this fraction above baseline.
    pub settle_fraction: f64,
    /// ... or within this many descriptors (a small baseline's 10 % is less than one socket).
    pub settle_fds: u64,
    /// ... or within this much resident memory, KiB: what the allocator keeps of a flood's
    /// thousands of freed tasks and sockets (glibc returns freed pages lazily), not a leak —
    /// one is still caught, since it grows past this with every flood.
    pub settle_rss_kib: u64,
    /// After a flood, the node's runtime tasks are back within `settle_fraction` above
    /// baseline, or within this many (a task per connection the node is still closing).
    pub settle_tasks: u64,
    /// At the run's end, resident memory is within `settle_fraction` above the first flood's
    /// baseline, or within this much, KiB: each flood is judged against the baseline just
    /// before it, so memory creeping up a little with every flood is caught only here.
    pub run_rss_kib: u64,
    /// Connections the node may still hold for a flood's attackers at its end, per edge: the
    /// listener's documented cap on connections that have not authenticated (or not finished a
    /// request).
    pub held: HeldCaps,
}

/// Per edge, the connections the attackers may hold at a flood's end: the listener's cap per
/// source address and in all (of connections not yet authenticated, or not done with a request).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HeldCaps {
    /// The admin API over TCP.
    pub admin: Caps,
    /// The HTTP-01 responder.
    pub http01: Caps,
    /// The forward, unauthenticated connections.
    pub forward: Caps,
    /// The gateway, unauthenticated connections.
    pub gateway: Caps,
    /// The forward, authenticated connections of one credential (the attackers' own).
    pub forward_per_credential: usize,
}

/// One listener's caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Caps {
    /// Per source address.
    pub per_source: usize,
    /// In all.
    pub total: usize,
}

impl HeldCaps {
    /// What attackers from `sources` addresses may hold on `edge`: each source its own cap, and
    /// all of them together no more than the cap in all.
    pub fn of(&self, edge: Edge, sources: u8) -> usize {
        let caps = match edge {
            Edge::Admin => self.admin,
            Edge::Http01 => self.http01,
            Edge::Forward => self.forward,
            Edge::Gateway => self.gateway,
        };
        caps.total
            .min(caps.per_source.saturating_mul(usize::from(sources)))
    }
}

impl Default for Budgets {
    fn default() -> Self {
        Budgets {
            p99: Duration::from_secs(1),
            failed_probes: 0,
            // The forward's pool of 4,096 flow sockets, and as many again for everything else.
            fd_cap: 8_192,
            rss_cap_kib: 256 * 1024,
            settle_fraction: 0.10,
            settle_fds: 8,
            settle_rss_kib: 8 * 1024,
            settle_tasks: 8,
            // Twice one flood's allocator slack: what the allocator keeps after the largest flood
            // and a little of every other one's; a leak of 1.5 MiB a flood breaks it over the
            // eleven floods.
            run_rss_kib: 16 * 1024,
            held: HeldCaps {
                admin: Caps {
                    per_source: 16,
                    total: 256,
                },
                http01: Caps {
                    per_source: 16,
                    total: 256,
                },
                forward: Caps {
                    per_source: 8,
                    total: 256,
                },
                gateway: Caps {
                    per_source: 32,
                    total: 1_024,
                },
                forward_per_credential: 16,
            },
        }
    }
}

fn ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e3)
}

/// One broken budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// The flood during which it broke; none for the run as a whole.
    pub flood: Option<String>,
    /// What broke, with the figures.
    pub what: String,
}

// i[impl attack.budgets+3]
/// Every budget `outcome` breaks; empty when the run passes.
pub fn judge(outcome: &Outcome, budgets: &Budgets) -> Vec<Violation> {
    let mut out = Vec::new();
    if !outcome.node_alive {
        out.push(Violation {
            flood: None,
            what: "the node was not running after the floods".into(),
        });
    }
    if outcome.panics > 0 {
        out.push(Violation {
            flood: None,
            what: format!("the node's log reports {} panic(s)", outcome.panics),
        });
    }
    let p99_ms = budgets.p99.as_secs_f64() * 1e3;
    for flood in &outcome.floods {
        let mut broke = |what: String| {
            out.push(Violation {
                flood: Some(flood.name.clone()),
                what,
            })
        };
        for (edge, s) in &flood.latency {
            let whose = if *edge == flood.edge {
                "attacked"
            } else {
                "other"
            };
            if s.probes == 0 {
                broke(format!("{} ({whose} edge): no probe was made", edge.name()));
            }
            if s.failed > budgets.failed_probes {
                broke(format!(
                    "{} ({whose} edge): {} of {} probes not served (budget {})",
                    edge.name(),
                    s.failed,
                    s.probes,
                    budgets.failed_probes
                ));
            }
            if s.p99_ms >= p99_ms {
                broke(format!(
                    "{} ({whose} edge): p99 {:.1} ms, budget under {p99_ms:.0} ms",
                    edge.name(),
                    s.p99_ms
                ));
            }
        }
        // A flood none of whose attackers got in pushed nothing: it must not pass as held.
        let a = flood.attackers;
        let (reached, how) = if flood.authenticated {
            (a.authenticated, "authenticated")
        } else if flood.unvalidated {
            // A refusal is an answer but not the flood: on this node only the pacing of a source
            // that failed to authenticate refuses an unvalidated Initial (quinn drops, never
            // answers, one past its bounds on attempts).
            (a.ended_by_node + a.overreach, "answered with a Retry")
        } else {
            (a.accepted, "accepted")
        };
        // No attempt at all is the suite's failure to launch, not the node keeping it out.
        if reached == 0 && a.attempted > 0 {
            broke(format!(
                "the flood measured nothing: none of the attackers' {} attempt(s) was {how}",
                flood.attackers.attempted
            ));
        }
        if flood.unvalidated && a.refused > 0 {
            broke(format!(
                "the flood was kept out by pacing: {} unvalidated attempt(s) refused (sources not \
                 isolated)",
                a.refused
            ));
        }
        let cap = if flood.ends_all {
            0
        } else if flood.authenticated {
            budgets.held.forward_per_credential
        } else {
            budgets.held.of(flood.edge, flood.sources)
        };
        if flood.attackers.held_at_end > cap {
            broke(format!(
                "the attackers held {} connections at the end, cap {cap}",
                flood.attackers.held_at_end
            ));
        }
        if flood.attackers.overreach > 0 {
            broke(format!(
                "the node let the attackers past its bounds {} time(s) (a stream beyond the \
                 control stream, or an unvalidated attempt taken into a handshake)",
                flood.attackers.overreach
            ));
        }
        if flood.fds.peak > budgets.fd_cap {
            broke(format!(
                "descriptors peaked at {}, cap {}",
                flood.fds.peak, budgets.fd_cap
            ));
        }
        if flood.rss_kib.peak > budgets.rss_cap_kib {
            broke(format!(
                "resident memory peaked at {} KiB, cap {} KiB",
                flood.rss_kib.peak, budgets.rss_cap_kib
            ));
        }
        let (fd_limit, rss_limit) =
            budgets.settle_limits(flood.fds.baseline, flood.rss_kib.baseline);
        if flood.fds.after > fd_limit {
            broke(format!(
                "descriptors did not return: {} after, baseline {}, limit {fd_limit}",
                flood.fds.after, flood.fds.baseline
            ));
        }
        if flood.rss_kib.after > rss_limit {
            broke(format!(
                "resident memory did not return: {} KiB after, baseline {} KiB, limit {rss_limit} KiB",
                flood.rss_kib.after, flood.rss_kib.baseline
            ));
        }
        // Not measured is not judged here: the run says so and exits 2 (`Report::verdict`).
        if let Some(tasks) = flood.tasks {
            let tasks_limit = budgets.settle_tasks_limit(tasks.baseline);
            if tasks.after > tasks_limit {
                broke(format!(
                    "tasks left behind: {} alive after, baseline {}, limit {tasks_limit}",
                    tasks.after, tasks.baseline
                ));
            }
        }
    }
    // The whole run: from before the first flood to after the last one settled. With one flood
    // that is the flood's own settle budget again, so it is judged only over several.
    if let [first, .., last] = outcome.floods.as_slice() {
        let limit = budgets.run_rss_limit(first.rss_kib.baseline);
        if last.rss_kib.after > limit {
            out.push(Violation {
                flood: None,
                what: format!(
                    "resident memory crept up over the run: {} KiB after the last flood, {} KiB \
                     before the first, limit {limit} KiB",
                    last.rss_kib.after, first.rss_kib.baseline
                ),
            });
        }
    }
    out
}

impl Budgets {
    /// The descriptors and resident memory (KiB) a node may be back at after a flood that began
    /// at these baselines: `settle_fraction` above each, and at least `settle_fds` descriptors
    /// and `settle_rss_kib` of memory.
    pub fn settle_limits(&self, fds: u64, rss_kib: u64) -> (u64, u64) {
        (
            settle_limit(fds, self.settle_fraction).max(fds + self.settle_fds),
            settle_limit(rss_kib, self.settle_fraction).max(rss_kib + self.settle_rss_kib),
        )
    }
}

impl Budgets {
    /// The resident memory (KiB) a node may be at after its last flood, when it was at `first`
    /// before its first: `settle_fraction` above, and at least `run_rss_kib` more.
    pub fn run_rss_limit(&self, first: u64) -> u64 {
        settle_limit(first, self.settle_fraction).max(first + self.run_rss_kib)
    }

    /// The runtime tasks a node may be back at after a flood that began with `tasks` alive:
    /// `settle_fraction` above, and at least `settle_tasks` more.
    pub fn settle_tasks_limit(&self, tasks: u64) -> u64 {
        settle_limit(tasks, self.settle_fraction).max(tasks + self.settle_tasks)
    }
}

/// `baseline` plus `fraction` of it, rounded down.
fn settle_limit(baseline: u64, fraction: f64) -> u64 {
    // Precision is irrelevant at these magnitudes (descriptors, KiB).
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let extra = (baseline as f64 * fraction) as u64;
    baseline + extra
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn passing() -> Outcome {
        let latency = Edge::ALL
            .iter()
            .map(|e| {
                (
                    *e,
                    Summary {
                        probes: 50,
                        failed: 0,
                        p50_ms: 1.0,
                        p99_ms: 999.0,
                        max_ms: 999.0,
                    },
                )
            })
            .collect();
        Outcome {
            floods: vec![FloodResult {
                name: "admin-slowloris".into(),
                edge: Edge::Admin,
                sources: 8,
                ends_all: false,
                authenticated: false,
                unvalidated: false,
                attackers: Attackers {
                    attempted: 10,
                    accepted: 10,
                    authenticated: 0,
                    ended_by_node: 10,
                    held_at_end: 0,
                    refused: 0,
                    overreach: 0,
                },
                latency,
                fds: Resource {
                    baseline: 40,
                    peak: 8_192,
                    after: 48,
                },
                rss_kib: Resource {
                    baseline: 10_000,
                    peak: 256 * 1024,
                    after: 11_000,
                },
                tasks: Some(Resource {
                    baseline: 60,
                    peak: 900,
                    after: 68,
                }),
                tasks_unread: None,
            }],
            node_alive: true,
            panics: 0,
        }
    }

    fn broken(change: impl FnOnce(&mut Outcome)) -> Vec<String> {
        let mut o = passing();
        change(&mut o);
        judge(&o, &Budgets::default())
            .into_iter()
            .map(|v| v.what)
            .collect()
    }

    // i[verify attack.budgets+3]
    #[test]
    fn each_budget_holds_at_its_edge_and_breaks_just_past_it() {
        assert_eq!(judge(&passing(), &Budgets::default()), vec![]);
        let p99 = broken(|o| {
            if let Some(s) = o.floods[0].latency.get_mut(&Edge::Forward) {
                s.p99_ms = 1000.0;
            }
        });
        assert_eq!(
            p99,
            vec!["forward (other edge): p99 1000.0 ms, budget under 1000 ms"]
        );
        let failed = broken(|o| {
            if let Some(s) = o.floods[0].latency.get_mut(&Edge::Admin) {
                s.failed = 1;
            }
        });
        assert_eq!(
            failed,
            vec!["admin (attacked edge): 1 of 50 probes not served (budget 0)"]
        );
        let none = broken(|o| {
            if let Some(s) = o.floods[0].latency.get_mut(&Edge::Gateway) {
                s.probes = 0;
            }
        });
        assert_eq!(none, vec!["gateway (other edge): no probe was made"]);
        assert_eq!(
            broken(|o| o.floods[0].fds.peak = 8_193),
            vec!["descriptors peaked at 8193, cap 8192"]
        );
        assert_eq!(
            broken(|o| o.floods[0].rss_kib.peak = 256 * 1024 + 1),
            vec!["resident memory peaked at 262145 KiB, cap 262144 KiB"]
        );
        // 40 descriptors: 10 % is 4, so the absolute slack of 8 is the limit.
        assert_eq!(
            broken(|o| o.floods[0].fds.after = 49),
            vec!["descriptors did not return: 49 after, baseline 40, limit 48"]
        );
        // 400 descriptors: 10 % (40) is more than the slack.
        assert_eq!(
            broken(|o| {
                o.floods[0].fds.baseline = 400;
                o.floods[0].fds.after = 440;
            }),
            Vec::<String>::new()
        );
        // 10,000 KiB: 10 % is less than the allocator's slack of 8 MiB, which is the limit ...
        assert_eq!(
            broken(|o| o.floods[0].rss_kib.after = 18_192),
            Vec::<String>::new()
        );
        assert_eq!(
            broken(|o| o.floods[0].rss_kib.after = 18_193),
            vec![
                "resident memory did not return: 18193 KiB after, baseline 10000 KiB, limit 18192 KiB"
            ]
        );
        // ... and at 200,000 KiB the 10 % is (one flood is the whole run: the run-wide budget
        // would only repeat the flood's own, and is not judged).
        assert_eq!(
            broken(|o| {
                o.floods[0].rss_kib.baseline = 200_000;
                o.floods[0].rss_kib.after = 220_001;
            }),
            vec![
                "resident memory did not return: 220001 KiB after, baseline 200000 KiB, limit 220000 KiB"
            ]
        );
        // Eight sources on the admin API: 16 each, 128 in all; with 20 sources the cap in all
        // (256) is the smaller.
        assert_eq!(
            broken(|o| o.floods[0].attackers.held_at_end = 128),
            Vec::<String>::new()
        );
        assert_eq!(
            broken(|o| o.floods[0].attackers.held_at_end = 129),
            vec!["the attackers held 129 connections at the end, cap 128"]
        );
        assert_eq!(
            broken(|o| {
                o.floods[0].sources = 20;
                o.floods[0].attackers.held_at_end = 257;
            }),
            vec!["the attackers held 257 connections at the end, cap 256"]
        );
        // A flood the node must end every time of: one connection kept is one too many.
        assert_eq!(
            broken(|o| {
                o.floods[0].ends_all = true;
                o.floods[0].attackers.held_at_end = 1;
            }),
            vec!["the attackers held 1 connections at the end, cap 0"]
        );
        // 60 tasks: 10 % is 6, so the slack of 8 is the limit; 400 tasks: 10 % (40) is.
        assert_eq!(
            broken(|o| o.floods[0].tasks = Some(Resource {
                baseline: 60,
                peak: 900,
                after: 69
            })),
            vec!["tasks left behind: 69 alive after, baseline 60, limit 68"]
        );
        assert_eq!(
            broken(|o| {
                o.floods[0].tasks = Some(Resource {
                    baseline: 400,
                    peak: 900,
                    after: 440,
                });
            }),
            Vec::<String>::new()
        );
        assert_eq!(
            broken(|o| {
                o.floods[0].tasks = Some(Resource {
                    baseline: 400,
                    peak: 900,
                    after: 441,
                });
            }),
            vec!["tasks left behind: 441 alive after, baseline 400, limit 440"]
        );
        assert_eq!(
            broken(|o| o.floods[0].attackers.overreach = 1),
            vec![
                "the node let the attackers past its bounds 1 time(s) (a stream beyond the \
                 control stream, or an unvalidated attempt taken into a handshake)"
            ]
        );
        // Authenticated attackers hold at most their credential's 16 connections.
        assert_eq!(
            broken(|o| {
                o.floods[0].authenticated = true;
                o.floods[0].attackers.authenticated = 16;
                o.floods[0].attackers.held_at_end = 16;
            }),
            Vec::<String>::new()
        );
        assert_eq!(
            broken(|o| {
                o.floods[0].authenticated = true;
                o.floods[0].attackers.authenticated = 16;
                o.floods[0].attackers.held_at_end = 17;
            }),
            vec!["the attackers held 17 connections at the end, cap 16"]
        );
        // A flood whose attackers were all kept out measured nothing: one attacker let in is
        // enough for it to count, none breaks it.
        assert_eq!(
            broken(|o| o.floods[0].attackers.accepted = 1),
            Vec::<String>::new()
        );
        assert_eq!(
            broken(|o| o.floods[0].attackers.accepted = 0),
            vec!["the flood measured nothing: none of the attackers' 10 attempt(s) was accepted"]
        );
        // A flood the suite could not launch (no attempt made: its Initials not caught, its
        // client config or a source address failed) is not the node's doing: not judged here,
        // the run says so and exits 2 (`Report::verdict`).
        assert_eq!(
            broken(|o| o.floods[0].attackers = Attackers::default()),
            Vec::<String>::new()
        );
        // Authenticating attackers must be welcomed: a handshake alone is not the flood.
        assert_eq!(
            broken(|o| {
                o.floods[0].authenticated = true;
                o.floods[0].attackers.authenticated = 1;
            }),
            Vec::<String>::new()
        );
        assert_eq!(
            broken(|o| o.floods[0].authenticated = true),
            vec![
                "the flood measured nothing: none of the attackers' 10 attempt(s) was authenticated"
            ]
        );
        // Unvalidated Initials reach the node only when it answers with a Retry (or goes
        // further): a refusal comes from its pacing of a source that failed to authenticate, so
        // every Initial refused is the flood kept out, and any refusal is its sources shared.
        let unvalidated = |a: Attackers| {
            broken(|o| {
                o.floods[0].ends_all = true;
                o.floods[0].unvalidated = true;
                o.floods[0].attackers = a;
            })
        };
        assert_eq!(
            unvalidated(Attackers {
                attempted: 4000,
                accepted: 4000,
                refused: 4000,
                ..Attackers::default()
            }),
            vec![
                "the flood measured nothing: none of the attackers' 4000 attempt(s) was answered \
                 with a Retry",
                "the flood was kept out by pacing: 4000 unvalidated attempt(s) refused (sources \
                 not isolated)"
            ]
        );
        assert_eq!(
            unvalidated(Attackers {
                attempted: 4000,
                accepted: 4000,
                ended_by_node: 3999,
                refused: 1,
                ..Attackers::default()
            }),
            vec![
                "the flood was kept out by pacing: 1 unvalidated attempt(s) refused (sources not \
                 isolated)"
            ]
        );
        assert_eq!(
            unvalidated(Attackers {
                attempted: 4000,
                accepted: 4000,
                ended_by_node: 4000,
                ..Attackers::default()
            }),
            Vec::<String>::new()
        );
        // The run as a whole: memory at its end against the first baseline. Three floods, each
        // beginning where the last ended and each back within its own budget, so only the
        // run-wide one can catch the creep. At 10,000 KiB the 10 % is less than the run's slack
        // of 16 MiB, which is the limit ...
        let creep = |marks: [u64; 4]| {
            broken(|o| {
                let first = o.floods[0].clone();
                o.floods = marks
                    .windows(2)
                    .map(|w| {
                        let mut f = first.clone();
                        f.rss_kib.baseline = w[0];
                        f.rss_kib.after = w[1];
                        f
                    })
                    .collect();
            })
        };
        assert_eq!(
            creep([10_000, 17_000, 24_000, 26_384]),
            Vec::<String>::new()
        );
        assert_eq!(
            creep([10_000, 17_000, 24_000, 26_385]),
            vec![
                "resident memory crept up over the run: 26385 KiB after the last flood, 10000 \
                 KiB before the first, limit 26384 KiB"
            ]
        );
        // ... and at 200,000 KiB the 10 % (20,000 KiB) is.
        assert_eq!(
            creep([200_000, 210_000, 215_000, 220_000]),
            Vec::<String>::new()
        );
        assert_eq!(
            creep([200_000, 210_000, 215_000, 220_001]),
            vec![
                "resident memory crept up over the run: 220001 KiB after the last flood, 200000 \
                 KiB before the first, limit 220000 KiB"
            ]
        );
        // Tasks not measured (a node that does not publish them) are not judged as 0: the run
        // says so and exits 2 instead.
        assert_eq!(broken(|o| o.floods[0].tasks = None), Vec::<String>::new());
        assert_eq!(
            broken(|o| o.node_alive = false),
            vec!["the node was not running after the floods"]
        );
        assert_eq!(
            broken(|o| o.panics = 2),
            vec!["the node's log reports 2 panic(s)"]
        );
    }
}
