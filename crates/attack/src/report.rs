//! The run's report: `report.json` for tools, `report.md` for people; both say which budgets broke.

use std::fmt::Write as _;

use serde::Serialize;

use crate::plan::{Edge, Flood};
use crate::verdict::{Budgets, Outcome, TasksUnread, Violation};

/// Everything a run found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// How the run was made (scale, flood duration, the node binary), as one line.
    pub command: String,
    /// The floods as planned.
    pub plan: Vec<Flood>,
    /// The budgets judged.
    pub budgets: Budgets,
    /// What was measured.
    pub outcome: Outcome,
    /// Budgets broken; empty when the run passed.
    pub violations: Vec<Violation>,
}

/// How a run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every budget held (exit 0).
    Held,
    /// A budget broke (exit 1).
    Broken,
    /// No budget broke, but a figure could not be measured or a flood launched (exit 2): not
    /// every budget could be judged.
    Unmeasured,
}

// i[impl attack.report+3]
impl Report {
    /// How the run ends: a broken budget outweighs what was not measured (it broke whatever
    /// the rest would have shown); otherwise a figure not measured means not every budget was
    /// judged.
    pub fn verdict(&self) -> Verdict {
        if !self.violations.is_empty() {
            Verdict::Broken
        } else if self.unjudged().is_empty() {
            Verdict::Held
        } else {
            Verdict::Unmeasured
        }
    }

    /// What could not be judged, for the verdict line: the tasks not measured, the floods not
    /// launched.
    fn unjudged(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.outcome.tasks_unmeasured().is_empty() {
            out.push("tasks not measured".to_owned());
        }
        let unlaunched = self.outcome.unlaunched();
        if !unlaunched.is_empty() {
            out.push(format!("not launched: {}", unlaunched.join(", ")));
        }
        out
    }

    /// The JSON report.
    pub fn json(&self) -> String {
        // A report of plain data always serialises; the fallback keeps the signature honest.
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// The Markdown report: one table of a real client's latency per flood and edge, one of the
    /// node's descriptors and memory, one of what the attackers saw, then the verdict.
    pub fn markdown(&self) -> String {
        let mut md = String::new();
        let _ = writeln!(md, "# holdfast attack report\n\n`{}`\n", self.command);
        let _ = writeln!(
            md,
            "Budgets: a real client's p99 under {} ms on every edge during every flood, {} probe(s) \
             unserved at most; at most {} descriptors and {} MiB resident; after each flood, back \
             within {:.0} % of baseline ({} descriptors, {} MiB and {} runtime tasks at least), and \
             after the last within {:.0} % of the first baseline's memory ({} MiB at least); connections \
             the attackers hold at a flood's end at most the listener's cap per source times the \
             sources, and its cap in all (admin {}/{}, http01 {}/{}, forward {}/{}, gateway \
             {}/{}), or their credential's {} when they authenticate; nothing past a bound.\n",
            self.budgets.p99.as_millis(),
            self.budgets.failed_probes,
            self.budgets.fd_cap,
            self.budgets.rss_cap_kib / 1024,
            self.budgets.settle_fraction * 100.0,
            self.budgets.settle_fds,
            self.budgets.settle_rss_kib / 1024,
            self.budgets.settle_tasks,
            self.budgets.settle_fraction * 100.0,
            self.budgets.run_rss_kib / 1024,
            self.budgets.held.admin.per_source,
            self.budgets.held.admin.total,
            self.budgets.held.http01.per_source,
            self.budgets.held.http01.total,
            self.budgets.held.forward.per_source,
            self.budgets.held.forward.total,
            self.budgets.held.gateway.per_source,
            self.budgets.held.gateway.total,
            self.budgets.held.forward_per_credential
        );
        md.push_str("## A real client during each flood (p50 / p99 ms, unserved of probes)\n\n");
        md.push_str("| flood |");
        for edge in Edge::ALL {
            let _ = write!(md, " {} |", edge.name());
        }
        md.push_str("\n|---|");
        for _ in Edge::ALL {
            md.push_str("---|");
        }
        md.push('\n');
        for f in &self.outcome.floods {
            let _ = write!(md, "| {} |", f.name);
            for edge in Edge::ALL {
                match f.latency.get(&edge) {
                    Some(s) => {
                        let mark = if edge == f.edge { "**" } else { "" };
                        let _ = write!(
                            md,
                            " {mark}{:.1} / {:.1}{mark}, {} of {} |",
                            s.p50_ms, s.p99_ms, s.failed, s.probes
                        );
                    }
                    None => md.push_str(" — |"),
                }
            }
            md.push('\n');
        }
        md.push_str("\n(The attacked edge in bold.)\n\n## The node\n\n");
        md.push_str(
            "| flood | fds before | fds peak | fds after | RSS before KiB | RSS peak KiB | RSS after KiB \
             | tasks before | tasks peak | tasks after |\n\
             |---|---|---|---|---|---|---|---|---|---|\n",
        );
        for f in &self.outcome.floods {
            let tasks = match f.tasks {
                Some(t) => format!("{} | {} | {}", t.baseline, t.peak, t.after),
                None => "— | — | —".to_owned(),
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {tasks} |",
                f.name,
                f.fds.baseline,
                f.fds.peak,
                f.fds.after,
                f.rss_kib.baseline,
                f.rss_kib.peak,
                f.rss_kib.after,
            );
        }
        md.push_str(
            "\n## The attackers\n\n| flood | attempted | accepted | authenticated | ended by the node \
             | refused | held at the end | past a bound |\n\
             |---|---|---|---|---|---|---|---|\n",
        );
        for f in &self.outcome.floods {
            let a = f.attackers;
            // Only attackers with a credential of their own can be welcomed.
            let authenticated = if f.authenticated {
                a.authenticated.to_string()
            } else {
                "—".to_owned()
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {authenticated} | {} | {} | {} | {} |",
                f.name,
                a.attempted,
                a.accepted,
                a.ended_by_node,
                a.refused,
                a.held_at_end,
                a.overreach
            );
        }
        if let (Some(first), Some(last)) = (self.outcome.floods.first(), self.outcome.floods.last())
        {
            let _ = writeln!(
                md,
                "\nResident memory over the run: {} KiB before the first flood, {} KiB after the \
                 last (limit {} KiB).",
                first.rss_kib.baseline,
                last.rss_kib.after,
                self.budgets.run_rss_limit(first.rss_kib.baseline)
            );
        }
        let _ = writeln!(
            md,
            "\nNode running after the floods: {}; panics in its log: {}.\n",
            if self.outcome.node_alive { "yes" } else { "no" },
            self.outcome.panics
        );
        let unmeasured: Vec<String> = self
            .outcome
            .floods
            .iter()
            .filter(|f| f.tasks.is_none())
            .map(|f| {
                let why = f.tasks_unread.map_or("not read", TasksUnread::why);
                format!("{} ({why})", f.name)
            })
            .collect();
        if !unmeasured.is_empty() {
            let _ = writeln!(
                md,
                "**Not measured:** the node's runtime tasks during {}. The tasks budget was not \
                 judged there; every other figure and budget is above and below, and the suite \
                 exits 2 (could not measure) unless a budget broke.\n",
                unmeasured.join(", ")
            );
        }
        let unlaunched = self.outcome.unlaunched();
        if !unlaunched.is_empty() {
            let _ = writeln!(
                md,
                "**Not measured:** {} could not be launched (no attempt was made: see the suite's \
                 errors); not judged as the node's, and the suite exits 2 (could not measure) unless a budget broke.\n",
                unlaunched.join(", ")
            );
        }
        let unjudged = self.unjudged();
        if self.violations.is_empty() && unjudged.is_empty() {
            md.push_str("**Verdict: every budget held.**\n");
        } else if self.violations.is_empty() {
            let _ = writeln!(
                md,
                "**Verdict: every budget judged held; {}.**",
                unjudged.join("; ")
            );
        } else {
            let _ = writeln!(
                md,
                "**Verdict: {} budget(s) broken.**\n",
                self.violations.len()
            );
            for v in &self.violations {
                match &v.flood {
                    Some(flood) => {
                        let _ = writeln!(md, "- {flood}: {}", v.what);
                    }
                    None => {
                        let _ = writeln!(md, "- {}", v.what);
                    }
                }
            }
        }
        md
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::plan::{Scale, floods};
    use crate::verdict::{judge, tests::passing};

    fn report(outcome: Outcome) -> Report {
        let budgets = Budgets::default();
        Report {
            command: "holdfast-attack --scale ci --duration 5".into(),
            plan: floods(Scale::Ci, Duration::from_secs(5)),
            budgets,
            violations: judge(&outcome, &budgets),
            outcome,
        }
    }

    // i[verify attack.report+3]
    #[test]
    fn the_markdown_report_is_pinned_and_names_every_broken_budget() {
        insta::assert_snapshot!("passing", report(passing()).markdown());
        let mut broken = passing();
        broken.node_alive = false;
        broken.floods[0].fds.after = 100;
        let md = report(broken).markdown();
        assert!(md.contains("**Verdict: 2 budget(s) broken.**"), "{md}");
        assert!(
            md.contains("- the node was not running after the floods"),
            "{md}"
        );
        assert!(
            md.contains("- admin-slowloris: descriptors did not return: 100 after"),
            "{md}"
        );
        assert_eq!(report(passing()).verdict(), Verdict::Held);
        // A node that does not publish its tasks: the rest of the report is still written, the
        // tasks are shown as not measured, and the run ends as unmeasured unless a budget broke
        // (a broken budget is found whatever was not measured).
        let mut older = passing();
        older.floods[0].tasks = None;
        older.floods[0].tasks_unread = Some(crate::verdict::TasksUnread::Absent);
        let r = report(older.clone());
        assert_eq!(r.verdict(), Verdict::Unmeasured);
        let md = r.markdown();
        assert!(
            md.contains(
                "| admin-slowloris | 40 | 8192 | 48 | 10000 | 262144 | 11000 | — | — | — |"
            ),
            "{md}"
        );
        assert!(
            md.contains("**Not measured:** the node's runtime tasks during admin-slowloris"),
            "{md}"
        );
        assert!(
            md.contains("**Verdict: every budget judged held; tasks not measured.**"),
            "{md}"
        );
        assert!(!md.contains("every budget held"), "{md}");
        // Why: the series absent from `/metrics`, or `/metrics` not answering at all.
        assert!(
            md.contains(
                "admin-slowloris (`holdfast_runtime_tasks_alive` absent from its `/metrics`: an \
                 older build?)"
            ),
            "{md}"
        );
        let mut silent = older.clone();
        silent.floods[0].tasks_unread = Some(crate::verdict::TasksUnread::NoAnswer);
        let md = report(silent).markdown();
        assert!(
            md.contains("admin-slowloris (its `/metrics` did not answer)"),
            "{md}"
        );
        assert!(!md.contains("older build"), "{md}");
        older.floods[0].fds.after = 100;
        assert_eq!(report(older).verdict(), Verdict::Broken);
        let mut broke = passing();
        broke.floods[0].fds.after = 100;
        assert_eq!(report(broke).verdict(), Verdict::Broken);
        // A flood the suite could not launch is not measured (exit 2), not a node budget.
        let mut unlaunched = passing();
        unlaunched.floods[0].attackers = crate::verdict::Attackers::default();
        let r = report(unlaunched);
        assert_eq!(r.violations, vec![]);
        assert_eq!(r.verdict(), Verdict::Unmeasured);
        let md = r.markdown();
        assert!(
            md.contains(
                "**Not measured:** admin-slowloris could not be launched (no attempt was made:"
            ),
            "{md}"
        );
        assert!(
            md.contains("**Verdict: every budget judged held; not launched: admin-slowloris.**"),
            "{md}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&report(passing()).json()).unwrap_or_default();
        assert_eq!(json["violations"], serde_json::json!([]));
        assert_eq!(json["budgets"]["p99"], serde_json::json!(1000.0));
        assert_eq!(json["plan"][0]["attack"]["kind"], "slowloris");
        assert_eq!(
            json["outcome"]["floods"][0]["latency"]["forward"]["p99_ms"],
            serde_json::json!(999.0)
        );
    }
}
