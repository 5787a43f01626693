//! What the graceful and recovery arms must show for the demo to pass (and CI with it): the
//! drain's promises, and for the recovery arm the history's, checked on the arm's figures. The
//! control arm has no verdict: it is the contrast.

use std::process::ExitCode;

use super::measures::{Arm, ArmMeasures};

/// The close codes a drain may send.
const DRAIN_CODES: [u16; 2] = [1001, 1012];

/// What a failure of `arm` starts with in the report's list (the graceful arm's: nothing).
pub fn prefix(arm: Arm) -> &'static str {
    match arm {
        Arm::Recovery => "[recovery] ",
        Arm::Control | Arm::Graceful => "",
    }
}

/// The rules the graceful or recovery arm broke, one sentence each (the recovery arm's after
/// [`prefix`]); empty when it met them all, and for the control arm.
// i[impl xtask.drain-demo.verdict+2]
pub fn failures(arm: &ArmMeasures) -> Vec<String> {
    if arm.arm == Arm::Control {
        return Vec::new();
    }
    let mut out = drain_failures(arm);
    if arm.arm == Arm::Recovery {
        if arm.missed_in_gap != 0 {
            out.push(format!(
                "{} of {} deliveries published in a reconnect gap were never received",
                arm.missed_in_gap, arm.deliveries_in_gap
            ));
        }
        if arm.duplicates != 0 {
            out.push(format!("{} messages were received twice", arm.duplicates));
        }
        if arm.history_gaps != 0 {
            out.push(format!(
                "{} rejoins were told the history no longer reached back",
                arm.history_gaps
            ));
        }
    }
    let prefix = prefix(arm.arm);
    out.into_iter().map(|f| format!("{prefix}{f}")).collect()
}

/// The drain's promises, for either arm that drains.
fn drain_failures(arm: &ArmMeasures) -> Vec<String> {
    let mut out = Vec::new();
    let drain_closes: usize = arm
        .close_codes
        .iter()
        .filter(|(code, _)| DRAIN_CODES.contains(code))
        .map(|(_, n)| n)
        .sum();
    if drain_closes != arm.clients_on_a {
        out.push(format!(
            "{} of {} clients of gw-a received a 1012 or 1001 close frame (codes: {:?})",
            drain_closes, arm.clients_on_a, arm.close_codes
        ));
    }
    match arm.registration_gone_at_first_close {
        Some(true) => {}
        Some(false) => out.push(format!(
            "gw-a's registration was still in etcd when its first client had received a close \
             ({:.0} ms after the signal)",
            arm.first_notice_ms.unwrap_or(f64::NAN)
        )),
        None => out.push(
            "gw-a's registration could not be read at the first close (no close, or etcd failed)"
                .to_owned(),
        ),
    }
    if arm.stop_ms.is_none() {
        out.push("gw-a did not exit".to_owned());
    }
    if arm.reconnected_to_b != arm.clients_on_a {
        out.push(format!(
            "{} of {} clients of gw-a joined again on gw-b",
            arm.reconnected_to_b, arm.clients_on_a
        ));
    }
    if arm.closes_on_b != 0 {
        out.push(format!("{} connections on gw-b ended", arm.closes_on_b));
    }
    if arm.push_errors != 0 {
        out.push(format!("{} pushes through gw-b failed", arm.push_errors));
    }
    if arm.lost_while_joined != 0 {
        out.push(format!(
            "{} deliveries owed to joined connections were lost",
            arm.lost_while_joined
        ));
    }
    out
}

/// How the demo exits once its outputs are written: 0 when the graceful arm broke no rule (or did
/// not run), else 1, with a line for stderr per rule broken.
// i[impl xtask.drain-demo.verdict+2]
pub fn exit_status(failures: &[String]) -> (ExitCode, Vec<String>) {
    if failures.is_empty() {
        return (ExitCode::SUCCESS, Vec::new());
    }
    let lines = failures
        .iter()
        .map(
            |failure| match failure.strip_prefix(prefix(Arm::Recovery)) {
                Some(f) => format!("drain-demo: recovery arm failed: {f}"),
                None => format!("drain-demo: graceful arm failed: {failure}"),
            },
        )
        .collect();
    (ExitCode::FAILURE, lines)
}

#[cfg(test)]
mod tests {
    use super::super::measures::{NO_CLOSE_FRAME, measure, tests::fixture};
    use super::*;

    /// The fixture's graceful arm with nothing lost while joined: it meets every rule.
    fn passing() -> ArmMeasures {
        let mut log = fixture(Arm::Graceful);
        for client in &mut log.clients {
            client.seqs = vec![1, 2, 3, 4, 5, 6];
        }
        measure(&log)
    }

    // i[verify xtask.drain-demo.verdict+2]
    #[test]
    fn a_graceful_arm_that_kept_the_drains_promises_passes() {
        assert_eq!(failures(&passing()), Vec::<String>::new());
        // 1001 (a shutdown) is a drain's close too.
        let mut m = passing();
        m.close_codes = [(1001, 2)].into();
        assert_eq!(failures(&m), Vec::<String>::new());
    }

    // i[verify xtask.drain-demo.verdict+2]
    #[test]
    fn each_broken_promise_fails_the_graceful_arm() {
        type Breaks = Box<dyn Fn(&mut ArmMeasures)>;
        let broken: Vec<(&str, Breaks)> = vec![
            (
                "1012 or 1001",
                Box::new(|m| m.close_codes = [(1012, 1), (NO_CLOSE_FRAME, 1)].into()),
            ),
            (
                "1012 or 1001",
                Box::new(|m| m.close_codes = [(1012, 1)].into()),
            ),
            (
                "still in etcd",
                Box::new(|m| m.registration_gone_at_first_close = Some(false)),
            ),
            (
                "could not be read",
                Box::new(|m| m.registration_gone_at_first_close = None),
            ),
            ("did not exit", Box::new(|m| m.stop_ms = None)),
            ("joined again", Box::new(|m| m.reconnected_to_b = 1)),
            ("on gw-b ended", Box::new(|m| m.closes_on_b = 1)),
            ("pushes", Box::new(|m| m.push_errors = 1)),
            ("owed", Box::new(|m| m.lost_while_joined = 1)),
        ];
        for (says, breaks) in broken {
            let mut m = passing();
            breaks(&mut m);
            let f = failures(&m);
            assert_eq!(f.len(), 1, "{says}: {f:?}");
            assert!(f[0].contains(says), "{says}: {f:?}");
        }
    }

    // i[verify xtask.drain-demo.verdict+2]
    #[test]
    fn the_recovery_arm_must_also_miss_nothing_in_the_gap_once_each() {
        let mut log = fixture(Arm::Recovery);
        for client in &mut log.clients {
            client.seqs = vec![1, 2, 3, 4, 5, 6];
            client.gaps = 0;
        }
        let ok = measure(&log);
        assert_eq!(failures(&ok), Vec::<String>::new());
        type Breaks = Box<dyn Fn(&mut ArmMeasures)>;
        let broken: Vec<(&str, Breaks)> = vec![
            ("reconnect gap", Box::new(|m| m.missed_in_gap = 1)),
            ("twice", Box::new(|m| m.duplicates = 1)),
            ("no longer reached back", Box::new(|m| m.history_gaps = 1)),
            ("owed", Box::new(|m| m.lost_while_joined = 1)),
        ];
        for (says, breaks) in broken {
            let mut m = ok.clone();
            breaks(&mut m);
            let f = failures(&m);
            assert_eq!(f.len(), 1, "{says}: {f:?}");
            assert!(
                f[0].starts_with("[recovery] ") && f[0].contains(says),
                "{says}: {f:?}"
            );
            let (_, lines) = exit_status(&f);
            assert!(
                lines[0].starts_with("drain-demo: recovery arm failed: "),
                "{lines:?}"
            );
        }
    }

    // i[verify xtask.drain-demo.verdict+2]
    #[test]
    fn the_control_arm_has_no_verdict() {
        let m = measure(&fixture(Arm::Control));
        assert_eq!(m.close_codes, [(NO_CLOSE_FRAME, 2)].into());
        assert_eq!(failures(&m), Vec::<String>::new());
    }

    // i[verify xtask.drain-demo.verdict+2]
    #[test]
    fn the_demo_exits_1_with_a_line_per_broken_rule_and_0_without() {
        assert_eq!(exit_status(&[]), (ExitCode::SUCCESS, vec![]));
        let broken = [
            "gw-a did not exit".to_owned(),
            "1 pushes through gw-b failed".to_owned(),
        ];
        assert_eq!(
            exit_status(&broken),
            (
                ExitCode::FAILURE,
                vec![
                    "drain-demo: graceful arm failed: gw-a did not exit".to_owned(),
                    "drain-demo: graceful arm failed: 1 pushes through gw-b failed".to_owned(),
                ]
            )
        );
    }
}
