//! The demo's outputs as text: `report.json` (every figure) and `report.md` (a table per arm).

use std::fmt::Write as _;

use serde::Serialize;

use super::measures::{Arm, ArmMeasures};

/// The whole run, as written to `report.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The command line that produced it.
    pub command: String,
    /// Clients per arm.
    pub clients: usize,
    /// Stream messages pushed per second.
    pub rate_per_s: u32,
    /// The room every client joined.
    pub room: String,
    /// The etcd lease TTL the replicas registered with.
    pub lease_ttl_s: u64,
    /// CPUs and load of the machine it ran on.
    pub machine: Machine,
    /// The arms, in the order they ran.
    pub arms: Vec<ArmMeasures>,
    /// The graceful arm's rules it broke (empty: met, or no graceful arm ran).
    pub failures: Vec<String>,
}

/// Where the run happened.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Machine {
    /// Available parallelism.
    pub cpus: usize,
    /// `/proc/loadavg` before the run.
    pub loadavg_before: String,
}

fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.0} ms"))
}

fn share(part: usize, whole: usize) -> String {
    if whole == 0 {
        return "-".to_owned();
    }
    format!("{:.1} %", 100.0 * part as f64 / whole as f64)
}

/// One row per measure, one column per arm: the arms side by side.
fn rows(arm: &ArmMeasures) -> Vec<(&'static str, String)> {
    let codes: Vec<String> = arm
        .close_codes
        .iter()
        .map(|(code, n)| format!("{code} × {n} ({})", share(*n, arm.clients_on_a)))
        .collect();
    vec![
        (
            "clients (on A / on B)",
            format!(
                "{} ({} / {})",
                arm.clients,
                arm.clients_on_a,
                arm.clients - arm.clients_on_a
            ),
        ),
        (
            "close codes received by A's clients (1006: no close frame)",
            if codes.is_empty() {
                "-".to_owned()
            } else {
                codes.join(", ")
            },
        ),
        (
            "time to notice p50 / p95 (signal → close or error)",
            format!(
                "{} / {} ({} of {} noticed)",
                ms(arm.notice_p50_ms),
                ms(arm.notice_p95_ms),
                arm.noticed,
                arm.clients_on_a
            ),
        ),
        (
            "registration outlived the stop",
            match arm.registration_outlived_ms {
                Some(v) => format!("{v:.0} ms"),
                None => format!("still present after {:.0} ms", arm.registration_watched_ms),
            },
        ),
        (
            "registration gone when A's first client had its close (first close at)",
            format!(
                "{} ({})",
                match arm.registration_gone_at_first_close {
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "-",
                },
                ms(arm.first_notice_ms)
            ),
        ),
        ("A's stop (signal → exit)", ms(arm.stop_ms)),
        (
            "messages sent / push errors (achieved rate)",
            format!(
                "{} / {} ({})",
                arm.messages_sent,
                arm.push_errors,
                arm.stream_rate_per_s
                    .map_or_else(|| "-".to_owned(), |r| format!("{r:.1}/s"))
            ),
        ),
        (
            "deliveries expected / received / lost (lost by A's clients)",
            format!(
                "{} / {} / {} ({})",
                arm.deliveries_expected, arm.deliveries_received, arm.lost, arm.lost_by_a_clients
            ),
        ),
        (
            "deliveries owed to joined connections / lost",
            format!(
                "{} / {}",
                arm.deliveries_expected_while_joined, arm.lost_while_joined
            ),
        ),
        (
            "deliveries published in a reconnect gap / missed",
            format!("{} / {}", arm.deliveries_in_gap, arm.missed_in_gap),
        ),
        (
            "duplicates / rejoins told of a history gap",
            format!("{} / {}", arm.duplicates, arm.history_gaps),
        ),
        (
            "A's clients reconnected to B",
            format!("{} of {}", arm.reconnected_to_b, arm.clients_on_a),
        ),
        (
            "frames on the survivor (A's clients, after reconnecting)",
            arm.frames_on_survivor.to_string(),
        ),
        ("connections on B that ended", arm.closes_on_b.to_string()),
    ]
}

/// `report.md`: a heading, what each arm does, then one table with the arms side by side, then
/// each checked arm's verdict.
// i[impl xtask.drain-demo.outputs+2]
pub fn markdown(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# drain-demo: {} clients over two replicas\n\n`{}` — a room stream of {} messages/s \
         pushed through replica B; replica A stopped once per arm (etcd lease TTL {} s; {} CPUs, \
         load before: {}).\n",
        report.clients,
        report.command,
        report.rate_per_s,
        report.lease_ttl_s,
        report.machine.cpus,
        report.machine.loadavg_before,
    );
    for arm in &report.arms {
        let what = match arm.arm {
            Arm::Control => "no drain, the process is killed; clients rejoin",
            Arm::Graceful => "the node drains the gateway; clients rejoin",
            Arm::Recovery => {
                "the node drains the gateway; clients rejoin with `since` and recover from history"
            }
        };
        let _ = writeln!(out, "- {} arm: {} ({what})", arm.arm.name(), arm.signal);
    }
    let _ = write!(out, "\n| measure |");
    for arm in &report.arms {
        let _ = write!(out, " {} |", arm.arm.name());
    }
    let _ = write!(out, "\n| --- |");
    for _ in &report.arms {
        let _ = write!(out, " --- |");
    }
    let _ = writeln!(out);
    let columns: Vec<Vec<(&str, String)>> = report.arms.iter().map(rows).collect();
    if let Some(first) = columns.first() {
        for (i, (name, _)) in first.iter().enumerate() {
            let _ = write!(out, "| {name} |");
            for column in &columns {
                let _ = write!(out, " {} |", column[i].1);
            }
            let _ = writeln!(out);
        }
    }
    for (arm, title) in [(Arm::Graceful, "Graceful"), (Arm::Recovery, "Recovery")] {
        if !report.arms.iter().any(|a| a.arm == arm) {
            continue;
        }
        let prefix = super::verdict::prefix(arm);
        let broken: Vec<&str> = report
            .failures
            .iter()
            .filter_map(|f| f.strip_prefix(prefix))
            .filter(|f| arm != Arm::Graceful || !f.starts_with('['))
            .collect();
        if broken.is_empty() {
            let _ = writeln!(out, "\n{title} arm: every rule met.");
        } else {
            let _ = writeln!(out, "\n{title} arm: rules broken:\n");
            for failure in broken {
                let _ = writeln!(out, "- {failure}");
            }
        }
    }
    out
}

/// `report.json`: the report, pretty-printed.
// i[impl xtask.drain-demo.outputs+2]
pub fn json(report: &Report) -> String {
    serde_json::to_string_pretty(report).unwrap_or_default() + "\n"
}

#[cfg(test)]
mod tests {
    use super::super::measures::{measure, tests::fixture};
    use super::*;

    pub(crate) fn fixed_report() -> Report {
        Report {
            command: "cargo xtask drain-demo --clients 4".into(),
            clients: 4,
            rate_per_s: 20,
            room: "demo".into(),
            lease_ttl_s: 10,
            machine: Machine {
                cpus: 2,
                loadavg_before: "0.50 0.40 0.30 1/100 1234".into(),
            },
            arms: vec![
                measure(&fixture(Arm::Control)),
                measure(&fixture(Arm::Graceful)),
                measure(&fixture(Arm::Recovery)),
            ],
            failures: vec![
                "4 deliveries owed to joined connections were lost".into(),
                "[recovery] 2 rejoins were told the history no longer reached back".into(),
            ],
        }
    }

    // i[verify xtask.drain-demo.outputs+2]
    #[test]
    fn the_markdown_report_has_a_table_per_arm() {
        insta::assert_snapshot!(markdown(&fixed_report()));
        // The control arm alone has no verdict to state.
        let mut control_only = fixed_report();
        control_only
            .arms
            .retain(|a| a.arm == super::super::measures::Arm::Control);
        let text = markdown(&control_only);
        assert!(!text.contains("Graceful arm"), "{text}");
        // The graceful arm alone states its verdict: the rules it broke, or that it met them all.
        let mut graceful_only = fixed_report();
        graceful_only
            .arms
            .retain(|a| a.arm == super::super::measures::Arm::Graceful);
        let text = markdown(&graceful_only);
        assert!(
            text.contains(
                "\nGraceful arm: rules broken:\n\n- 4 deliveries owed to joined connections were lost\n"
            ),
            "{text}"
        );
        graceful_only.failures.clear();
        let text = markdown(&graceful_only);
        assert!(text.contains("\nGraceful arm: every rule met.\n"), "{text}");
        assert!(!text.contains("rules broken"), "{text}");
    }

    // i[verify xtask.drain-demo.outputs+2]
    #[test]
    fn the_json_report_carries_every_figure() {
        let v: serde_json::Value = serde_json::from_str(&json(&fixed_report())).unwrap();
        assert_eq!(v["clients"], 4);
        assert_eq!(v["arms"][0]["arm"], "control");
        assert_eq!(v["arms"][0]["close_codes"]["1006"], 2);
        assert_eq!(
            v["arms"][0]["registration_outlived_ms"],
            serde_json::Value::Null
        );
        assert_eq!(v["arms"][1]["arm"], "graceful");
        assert_eq!(v["arms"][1]["close_codes"]["1012"], 2);
        assert_eq!(v["arms"][1]["registration_outlived_ms"], 3.5);
        assert_eq!(v["arms"][1]["frames_on_survivor"], 6);
        assert_eq!(v["arms"][2]["arm"], "recovery");
        assert_eq!(v["arms"][2]["history_gaps"], 2);
        assert_eq!(v["arms"][2]["missed_in_gap"], 0);
    }
}
