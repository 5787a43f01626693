//! The core's decisions, driven by hand: the test performs (or withholds) each action and
//! reports results at a caller's clock that only moves when the test moves it. No runtime, no
//! polling. Real pulls against dockerd are in `tests/dockerd.rs`; the shell's own duties
//! (spawning, joining, cancelling) are tested in `actuator/tests.rs`.

use std::collections::VecDeque;
use std::time::Duration;

use holdfast_retry::{Jitter, Policy};

use super::*;

const IMG: &str = "127.0.0.1:5000/holdfast/busybox:latest";
const OTHER: &str = "127.0.0.1:5000/holdfast/other:1";

/// The core plus a record of what it asked for: the pulls started and not yet answered, the
/// probes outstanding, and what was cancelled. Probes are answered by [`Sim::settle`].
struct Sim {
    core: Reconciler,
    pulls: VecDeque<(String, AttemptId)>,
    probes: Vec<AttemptId>,
    cancelled: Vec<AttemptId>,
    probe_answer: Result<(), PullError>,
    probe_calls: u32,
}

impl Sim {
    fn new(config: PullConfig) -> Self {
        Sim {
            core: Reconciler::new(config),
            pulls: VecDeque::new(),
            probes: Vec::new(),
            cancelled: Vec::new(),
            probe_answer: Ok(()),
            probe_calls: 0,
        }
    }

    fn ensure(&mut self, reference: &str, now: Instant) -> ImageState {
        let (state, actions) = self.core.ensure(reference, now);
        self.perform(actions);
        state
    }

    fn perform(&mut self, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Pull { reference, attempt } => self.pulls.push_back((reference, attempt)),
                Action::Probe { attempt } => {
                    self.probe_calls += 1;
                    self.probes.push(attempt);
                }
                Action::Cancel { attempt } => {
                    self.cancelled.push(attempt);
                    self.pulls.retain(|(_, a)| *a != attempt);
                    self.probes.retain(|a| *a != attempt);
                }
            }
        }
    }

    fn pending(&self) -> usize {
        self.pulls.len()
    }

    fn next_call(&mut self) -> (String, AttemptId) {
        self.pulls.pop_front().expect("an attempt was started")
    }

    /// Reports the result of pull `attempt` of `IMG`-or-other at `now`.
    fn finish(
        &mut self,
        call: (String, AttemptId),
        result: Result<Fetched, PullError>,
        now: Instant,
    ) {
        self.core.on_result(
            Completion::Pull {
                reference: call.0,
                attempt: call.1,
                result,
            },
            now,
        );
    }

    /// Answers every outstanding probe at `now` with the current probe answer.
    fn settle(&mut self, now: Instant) {
        for attempt in std::mem::take(&mut self.probes) {
            self.core.on_result(
                Completion::Probe {
                    attempt,
                    result: self.probe_answer.clone(),
                },
                now,
            );
        }
    }

    fn forget(&mut self, reference: &str) {
        let actions = self.core.forget(reference);
        self.perform(actions);
    }

    fn faults(&self) -> Vec<Fault> {
        self.core.faults()
    }

    fn daemon_fault(&self) -> bool {
        self.faults()
            .iter()
            .any(|f| f.subject == FaultSubject::Daemon.subject())
    }
}

fn policy(stale_after: Duration) -> Policy {
    Policy::builder()
        .base(Duration::from_secs(5))
        .cap(Duration::from_secs(300))
        .escalate_after(5)
        .jitter(Jitter::None)
        .stale_after(stale_after)
        .build()
        .unwrap()
}

fn config(stale_after: Duration) -> PullConfig {
    let policy = policy(stale_after);
    PullConfig::builder(0)
        .image_policy(policy)
        .daemon_policy(policy)
        .stall_timeout(Duration::from_secs(1))
        .build()
        .unwrap()
}

fn unreachable() -> PullError {
    PullError::new(
        PullErrorKind::RegistryUnreachable,
        "Get \"http://127.0.0.1:5099/v2/\": dial tcp 127.0.0.1:5099: connect: connection refused",
    )
}

fn daemon_down() -> PullError {
    PullError::new(PullErrorKind::DaemonUnreachable, "daemon socket not found")
}

// r[verify actuate.image.single-flight+3]
#[test]
fn a_healthy_long_pull_is_not_stale_and_a_superseded_one_is_cancelled() {
    let config = PullConfig::new(3);
    assert_eq!(
        config.image_policy().stale_after(),
        crate::DEFAULT_PULL_STALE_AFTER
    );
    let mut sim = Sim::new(config);
    let t0 = Instant::now();
    sim.ensure(IMG, t0);
    let a = sim.next_call();
    // An hour in, the pull is still the one in flight: not stale, nothing new started.
    let hour = t0 + Duration::from_secs(3600);
    assert!(matches!(sim.ensure(IMG, hour), ImageState::Pulling { .. }));
    assert_eq!(sim.pending(), 0);
    assert!(sim.cancelled.is_empty(), "the healthy pull keeps running");
    // Past the stale timeout (and its back-off) a successor supersedes it and it is cancelled.
    let mut now = t0 + crate::DEFAULT_PULL_STALE_AFTER;
    while sim.pending() == 0 {
        sim.ensure(IMG, now);
        now += Duration::from_secs(1);
        assert!(now < t0 + crate::DEFAULT_PULL_STALE_AFTER + Duration::from_secs(60));
    }
    assert_eq!(
        sim.cancelled,
        vec![a.1],
        "the superseded attempt was cancelled"
    );
    assert_ne!(sim.next_call().1, a.1, "its successor runs");
}

// r[verify actuate.image.single-flight+3]
// r[verify actuate.image.ensure+2]
#[test]
fn one_attempt_per_reference_then_present() {
    let mut sim = Sim::new(config(Duration::from_secs(600)));
    let t0 = Instant::now();
    assert!(matches!(sim.ensure(IMG, t0), ImageState::Pulling { .. }));
    for s in 1..20 {
        assert!(matches!(
            sim.ensure(IMG, t0 + Duration::from_secs(s)),
            ImageState::Pulling { .. }
        ));
    }
    assert_eq!(sim.pending(), 1, "single flight");
    let call = sim.next_call();
    assert_eq!(call.0, IMG);
    assert_eq!(sim.core.live_attempt(IMG), Some(call.1));
    sim.finish(call, Ok(Fetched::Pulled), t0 + Duration::from_secs(20));
    assert_eq!(
        sim.ensure(IMG, t0 + Duration::from_secs(21)),
        ImageState::Present
    );
    assert_eq!(sim.pending(), 0);
    assert!(!sim.core.has_live_attempts());
    assert!(sim.faults().is_empty());
}

// r[verify actuate.image.retry]
// r[verify actuate.image.fault]
#[test]
fn failures_are_paced_escalate_once_and_a_success_recovers() {
    let mut sim = Sim::new(config(Duration::from_secs(600)));
    let t0 = Instant::now();
    let mut attempts = Vec::new();
    let mut fault_since = None;
    for s in 0..=1000u64 {
        let now = t0 + Duration::from_secs(s);
        let state = sim.ensure(IMG, now);
        if sim.pending() == 0 {
            continue;
        }
        assert!(matches!(state, ImageState::Pulling { .. }));
        attempts.push(s);
        let call = sim.next_call();
        sim.finish(call, Err(unreachable()), now);
        let faults = sim.faults();
        if attempts.len() < 5 {
            assert!(faults.is_empty(), "no fault before the threshold");
            assert!(matches!(sim.ensure(IMG, now), ImageState::Waiting { .. }));
        } else {
            assert_eq!(faults.len(), 1, "one fault per reference");
            let since = faults[0].since;
            assert_eq!(*fault_since.get_or_insert(since), since, "filed once");
            match sim.ensure(IMG, now) {
                ImageState::Escalated {
                    failures,
                    last_error,
                    until,
                } => {
                    assert_eq!(failures as usize, attempts.len());
                    assert_eq!(last_error.kind, PullErrorKind::RegistryUnreachable);
                    assert!(until > now, "escalated is still paced, not terminal");
                }
                other => panic!("expected escalated, got {other:?}"),
            }
        }
    }
    let gaps: Vec<u64> = attempts.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(
        gaps,
        vec![5, 10, 20, 40, 80, 160, 300, 300],
        "attempts at {attempts:?}"
    );
    // The registry is back: the next attempt succeeds and clears the fault; nothing else needed.
    let mut s = 1001;
    while sim.pending() == 0 {
        sim.ensure(IMG, t0 + Duration::from_secs(s));
        s += 1;
    }
    assert!(
        s - 1 - attempts[attempts.len() - 1] <= 300,
        "within one cap interval"
    );
    let call = sim.next_call();
    sim.finish(call, Ok(Fetched::Pulled), t0 + Duration::from_secs(s));
    assert_eq!(
        sim.ensure(IMG, t0 + Duration::from_secs(s)),
        ImageState::Present
    );
    assert!(sim.faults().is_empty(), "fault cleared by the success");
    // Success reset the reference: after invalidation it starts fresh, with no fault.
    let now = t0 + Duration::from_secs(s + 1);
    sim.core.invalidate(IMG);
    sim.ensure(IMG, now);
    let call = sim.next_call();
    sim.finish(call, Err(unreachable()), now);
    match sim.ensure(IMG, now) {
        ImageState::Waiting {
            failures, until, ..
        } => {
            assert_eq!(failures, 1);
            assert_eq!(until, now + Duration::from_secs(5));
        }
        other => panic!("expected a fresh streak, got {other:?}"),
    }
}

// r[verify actuate.image.progress]
#[test]
fn status_reports_without_starting_anything() {
    let mut sim = Sim::new(config(Duration::from_secs(600)));
    let t0 = Instant::now();
    assert_eq!(sim.core.status(IMG), None);
    sim.ensure(IMG, t0);
    assert!(matches!(
        sim.core.status(IMG),
        Some(ImageState::Pulling { .. })
    ));
    let call = sim.next_call();
    sim.finish(call, Err(unreachable()), t0);
    match sim.core.status(IMG) {
        Some(ImageState::Waiting {
            failures: 1, until, ..
        }) => {
            assert_eq!(until, t0 + Duration::from_secs(5));
        }
        other => panic!("expected waiting, got {other:?}"),
    }
    // Due at 5 s, but status starts nothing.
    assert!(sim.core.status(IMG).is_some());
    assert_eq!(sim.pending(), 0);
    assert_eq!(sim.core.references(), vec![IMG.to_owned()]);
}

// r[verify actuate.image.classify.policy]
#[test]
fn not_found_files_its_fault_at_once_and_is_still_retried() {
    let mut sim = Sim::new(config(Duration::from_secs(600)));
    let t0 = Instant::now();
    sim.ensure(IMG, t0);
    let not_found = PullError {
        kind: PullErrorKind::NotFound,
        status: holdfast_retry::http::StatusCode::new(404),
        message: "manifest unknown".into(),
        retry_after: None,
    };
    let call = sim.next_call();
    sim.finish(call, Err(not_found), t0);
    assert!(matches!(
        sim.ensure(IMG, t0),
        ImageState::Escalated { failures: 1, .. }
    ));
    assert_eq!(sim.faults().len(), 1);
    assert_eq!(sim.faults()[0].kind, PullErrorKind::NotFound.as_str());
    // Not terminal: the next attempt comes on schedule.
    sim.ensure(IMG, t0 + Duration::from_secs(5));
    assert_eq!(sim.pending(), 1);
}

// r[verify actuate.image.classify.policy]
#[test]
fn a_typed_retry_after_hint_lengthens_the_wait() {
    let mut sim = Sim::new(config(Duration::from_secs(600)));
    let t0 = Instant::now();
    sim.ensure(IMG, t0);
    let limited = PullError {
        kind: PullErrorKind::RateLimited,
        status: holdfast_retry::http::StatusCode::new(500),
        message: "toomanyrequests: slow down".into(),
        retry_after: Some(Duration::from_secs(120)),
    };
    let call = sim.next_call();
    sim.finish(call, Err(limited), t0);
    match sim.ensure(IMG, t0) {
        ImageState::Waiting {
            until, last_error, ..
        } => {
            assert!(until >= t0 + Duration::from_secs(120), "hint honoured");
            assert_eq!(last_error.kind, PullErrorKind::RateLimited);
        }
        other => panic!("expected waiting, got {other:?}"),
    }
}

// r[verify actuate.image.panic]
#[test]
fn a_panicked_attempt_is_a_failure_of_its_reference_and_is_retried() {
    let mut sim = Sim::new(config(Duration::from_secs(600)));
    let t0 = Instant::now();
    sim.ensure(IMG, t0);
    let call = sim.next_call();
    let panicked = PullError::new(PullErrorKind::Panicked, "the attempt panicked: boom");
    sim.finish(call, Err(panicked), t0);
    assert!(!sim.core.has_live_attempts(), "nothing is left in flight");
    match sim.ensure(IMG, t0) {
        ImageState::Waiting {
            failures: 1,
            until,
            last_error,
        } => {
            assert_eq!(until, t0 + Duration::from_secs(5));
            assert_eq!(last_error.kind, PullErrorKind::Panicked);
        }
        other => panic!("expected a paced failure, got {other:?}"),
    }
    assert!(matches!(
        sim.ensure(IMG, t0 + Duration::from_secs(5)),
        ImageState::Pulling { .. }
    ));
    assert_eq!(
        sim.pending(),
        1,
        "retried on schedule, not wedged until the stale timeout"
    );
}

// r[verify actuate.image.ensure+2]
#[test]
fn a_wait_without_a_recorded_failure_is_reported_as_deferred_not_as_an_invented_error() {
    let sim = Sim::new(config(Duration::from_secs(600)));
    let until = Instant::now() + Duration::from_secs(5);
    // The gate's refusal came with no failure this core recorded (a node-wide budget would do
    // this): the answer says so instead of making up a daemon error.
    assert_eq!(
        sim.core.waiting_state(IMG, until, 0),
        ImageState::Deferred { until, failures: 0 }
    );
}

/// Starts attempt A, lets it go stale, and returns once attempt B superseded it.
fn supersede(sim: &mut Sim, t0: Instant) -> ((String, AttemptId), (String, AttemptId), Instant) {
    sim.ensure(IMG, t0);
    let a = sim.next_call();
    let mut s = 1;
    let now = loop {
        let now = t0 + Duration::from_secs(s);
        sim.ensure(IMG, now);
        if sim.pending() > 0 {
            break now;
        }
        s += 1;
        assert!(s < 1000, "the stale attempt was never superseded");
    };
    let b = sim.next_call();
    (a, b, now)
}

// r[verify actuate.image.attempt-token]
#[test]
fn a_superseded_attempt_failing_late_does_not_disturb_the_live_one() {
    let mut sim = Sim::new(config(Duration::from_secs(30)));
    let t0 = Instant::now();
    let (a, b, now) = supersede(&mut sim, t0);
    assert_eq!(sim.cancelled, vec![a.1], "A no longer runs beside B");
    // A failure of A that raced its cancellation changes nothing.
    sim.finish(a, Err(unreachable()), now);
    assert!(
        matches!(sim.ensure(IMG, now), ImageState::Pulling { .. }),
        "B is still in flight"
    );
    assert_eq!(sim.pending(), 0, "and no third attempt started");
    sim.finish(b, Ok(Fetched::Pulled), now);
    assert_eq!(sim.ensure(IMG, now), ImageState::Present);
}

// r[verify actuate.image.attempt-token]
#[test]
fn a_superseded_attempt_succeeding_late_does_not_resurrect_stale_state() {
    let mut sim = Sim::new(config(Duration::from_secs(30)));
    let t0 = Instant::now();
    let (a, b, now) = supersede(&mut sim, t0);
    assert_eq!(sim.cancelled, vec![a.1]);
    sim.finish(b, Err(unreachable()), now);
    let before = sim.ensure(IMG, now);
    let ImageState::Waiting { failures, .. } = &before else {
        panic!("expected waiting after B failed, got {before:?}");
    };
    assert_eq!(*failures, 2, "A counted as stale, B as failed");
    sim.finish(a, Ok(Fetched::Pulled), now);
    assert_eq!(
        sim.ensure(IMG, now),
        before,
        "A's late success changed nothing"
    );
}

// r[verify actuate.image.attempt-token]
#[test]
fn a_stale_attempt_ending_before_a_successor_leaves_nothing_in_flight() {
    let mut sim = Sim::new(config(Duration::from_secs(30)));
    let t0 = Instant::now();
    sim.ensure(IMG, t0);
    let a = sim.next_call();
    // Stale at 30 s: counted as failed then, next attempt due 5 s later.
    let now = t0 + Duration::from_secs(31);
    assert!(matches!(
        sim.ensure(IMG, now),
        ImageState::Waiting { failures: 1, .. }
    ));
    assert!(
        !sim.core.has_live_attempts(),
        "the stale attempt is not live"
    );
    sim.finish(a, Err(unreachable()), now);
    // Its late failure adds nothing to the failure counted at the stale moment.
    assert!(matches!(
        sim.ensure(IMG, now),
        ImageState::Waiting { failures: 1, .. }
    ));
    assert!(matches!(
        sim.ensure(IMG, t0 + Duration::from_secs(35)),
        ImageState::Pulling { .. }
    ));
    assert_eq!(sim.pending(), 1);
    assert!(
        sim.cancelled.is_empty(),
        "the stale attempt had already ended"
    );
}

// r[verify actuate.image.attempt-token]
// r[verify actuate.image.fault]
#[test]
fn an_attempt_that_goes_stale_while_refused_is_a_stalled_failure_and_may_escalate() {
    let policy = Policy::builder()
        .base(Duration::from_secs(5))
        .cap(Duration::from_secs(300))
        .escalate_after(1)
        .jitter(Jitter::None)
        .stale_after(Duration::from_secs(30))
        .build()
        .unwrap();
    let cfg = PullConfig::builder(0)
        .image_policy(policy)
        .stall_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let mut sim = Sim::new(cfg);
    let t0 = Instant::now();
    sim.ensure(IMG, t0);
    let _hung = sim.next_call();
    // At 30 s the gate counts the hung attempt and refuses a new one until 35 s.
    let now = t0 + Duration::from_secs(30);
    let state = sim.ensure(IMG, now);
    match &state {
        ImageState::Escalated {
            failures: 1,
            until,
            last_error,
        } => {
            assert_eq!(*until, t0 + Duration::from_secs(35));
            assert_eq!(last_error.kind, PullErrorKind::Stalled);
        }
        other => panic!("expected the stale attempt to escalate, got {other:?}"),
    }
    assert_eq!(
        sim.core.status(IMG).as_ref(),
        Some(&state),
        "no longer Pulling"
    );
    assert!(!sim.core.has_live_attempts());
    let faults = sim.faults();
    assert_eq!(
        faults.len(),
        1,
        "the escalation files the fault: {faults:?}"
    );
    assert_eq!(faults[0].kind, PullErrorKind::Stalled.as_str());
    assert_eq!(sim.pending(), 0, "nothing new started before 35 s");
}

// r[verify actuate.image.attempt-token]
#[test]
fn a_stale_attempt_succeeding_before_a_successor_began_makes_the_image_present() {
    let mut sim = Sim::new(config(Duration::from_secs(30)));
    let t0 = Instant::now();
    sim.ensure(IMG, t0);
    let a = sim.next_call();
    let now = t0 + Duration::from_secs(31);
    assert!(matches!(
        sim.ensure(IMG, now),
        ImageState::Waiting { failures: 1, .. }
    ));
    // No newer attempt began, so its token is not superseded: its late success still resets
    // the reference (the retry in-flight expiry rule); the image is there.
    sim.finish(a, Ok(Fetched::Pulled), now);
    assert!(!sim.core.has_live_attempts());
    assert_eq!(sim.ensure(IMG, now), ImageState::Present);
    assert_eq!(sim.pending(), 0, "nothing more to pull");
    assert!(sim.faults().is_empty());
}

// r[verify actuate.image.attempt-token]
// r[verify actuate.image.single-flight+3]
#[test]
fn a_forgotten_reference_is_cancelled_and_ignores_its_late_result() {
    let mut sim = Sim::new(config(Duration::from_secs(600)));
    let t0 = Instant::now();
    sim.ensure(IMG, t0);
    let old = sim.next_call();
    sim.forget(IMG);
    assert_eq!(
        sim.cancelled,
        vec![old.1],
        "a forgotten reference's pull is cancelled"
    );
    sim.finish(old, Err(unreachable()), t0);
    assert!(sim.faults().is_empty());
    // Asked for again, it is a fresh reference: an attempt starts at once.
    assert!(matches!(sim.ensure(IMG, t0), ImageState::Pulling { .. }));
    assert_eq!(sim.pending(), 1);
}

// r[verify actuate.image.daemon+2]
#[test]
fn daemon_unreachable_is_its_own_paced_condition() {
    let mut sim = Sim::new(config(Duration::from_secs(600)));
    let t0 = Instant::now();
    sim.ensure(IMG, t0);
    sim.probe_answer = Err(daemon_down());
    let call = sim.next_call();
    sim.finish(call, Err(daemon_down()), t0);
    // The attempt that found the daemon down counted on the daemon, not on the image.
    assert_eq!(sim.core.reference_failures(IMG), 0);
    let mut probes_at = Vec::new();
    for s in 0..=700u64 {
        let now = t0 + Duration::from_secs(s);
        let before = sim.probe_calls;
        for reference in [IMG, OTHER] {
            assert!(matches!(
                sim.ensure(reference, now),
                ImageState::DaemonUnreachable { .. }
            ));
            assert_eq!(
                sim.core.reference_failures(reference),
                0,
                "a daemon outage grows no reference's streak"
            );
        }
        if sim.probe_calls > before {
            probes_at.push(s);
        }
        sim.settle(now);
        assert_eq!(sim.pending(), 0, "no pull starts while the daemon is down");
    }
    let gaps: Vec<u64> = probes_at.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(probes_at[0], 5);
    assert_eq!(
        gaps,
        vec![10, 20, 40, 80, 160, 300],
        "probes at {probes_at:?}"
    );
    assert!(sim.daemon_fault(), "daemon fault filed: {:?}", sim.faults());
    assert!(
        !sim.faults()
            .iter()
            .any(|f| f.subject.name.starts_with("image ")),
        "no image has a fault of its own: {:?}",
        sim.faults()
    );
    // The daemon comes back: the next probe succeeds, pulls resume, the daemon fault clears.
    sim.probe_answer = Ok(());
    let mut s = 701;
    loop {
        let now = t0 + Duration::from_secs(s);
        sim.ensure(IMG, now);
        sim.settle(now);
        if !sim.daemon_fault() {
            break;
        }
        s += 1;
        assert!(s < 1100, "daemon never recovered");
    }
    // At once, as for a reference that never failed.
    let now = t0 + Duration::from_secs(s);
    assert!(matches!(sim.ensure(IMG, now), ImageState::Pulling { .. }));
    assert_eq!(sim.core.reference_failures(IMG), 0);
    let call = sim.next_call();
    sim.finish(call, Ok(Fetched::Pulled), now);
    assert_eq!(sim.ensure(IMG, now), ImageState::Present);
}

/// Steps the clock a second at a time, probing (and failing) the daemon, until its fault is
/// filed; returns the second it was filed at.
fn until_the_daemon_escalates(sim: &mut Sim, t0: Instant, mut s: u64, limit: u64) -> u64 {
    while !sim.daemon_fault() {
        s += 1;
        assert!(s < limit, "the daemon never escalated");
        let now = t0 + Duration::from_secs(s);
        sim.ensure(IMG, now);
        sim.settle(now);
    }
    s
}

// r[verify actuate.image.daemon+2]
#[test]
fn a_daemon_that_answers_an_image_attempt_escalates_afresh_in_its_next_outage() {
    let mut sim = Sim::new(config(Duration::from_secs(600)));
    let t0 = Instant::now();
    // Two attempts in flight; the first finds the daemon down.
    sim.ensure(IMG, t0);
    sim.ensure(OTHER, t0);
    let img = sim.next_call();
    let late = sim.next_call();
    sim.probe_answer = Err(daemon_down());
    sim.finish(img, Err(daemon_down()), t0);
    // Probes fail until the daemon escalates (5 failures: at 0, 5, 15, 35, 75 s).
    let s = until_the_daemon_escalates(&mut sim, t0, 0, 200);
    // The attempt that was still in flight gets the daemon's answer (a registry failure): the
    // daemon is up, its fault clears, and it is fresh again.
    let now = t0 + Duration::from_secs(s);
    sim.finish(late, Err(unreachable()), now);
    assert!(!sim.daemon_fault());
    assert!(!sim.core.has_live_attempts(), "no probe left in flight");
    // The next outage starts a new daemon streak and escalates (and files) again.
    assert!(matches!(sim.ensure(IMG, now), ImageState::Pulling { .. }));
    let call = sim.next_call();
    sim.finish(call, Err(daemon_down()), now);
    assert!(matches!(
        sim.ensure(IMG, now),
        ImageState::DaemonUnreachable { failures: 1, .. }
    ));
    until_the_daemon_escalates(&mut sim, t0, s, s + 200);
}

// r[verify actuate.image.daemon+2]
#[test]
fn a_stall_or_a_panic_is_no_answer_from_the_daemon() {
    for silent in [PullErrorKind::Stalled, PullErrorKind::Panicked] {
        let mut sim = Sim::new(config(Duration::from_secs(600)));
        let t0 = Instant::now();
        sim.ensure(IMG, t0);
        sim.ensure(OTHER, t0);
        let img = sim.next_call();
        let other = sim.next_call();
        sim.probe_answer = Err(daemon_down());
        sim.finish(img, Err(daemon_down()), t0);
        sim.finish(
            other,
            Err(PullError::new(silent, "no answer within 60s")),
            t0,
        );
        assert!(
            matches!(
                sim.ensure(IMG, t0),
                ImageState::DaemonUnreachable { failures: 1, .. }
            ),
            "{silent} does not count as the daemon answering"
        );
    }
}

// r[verify actuate.image.daemon+2]
#[test]
fn a_daemon_outage_keeps_a_failing_references_streak_and_wait() {
    let mut sim = Sim::new(config(Duration::from_secs(600)));
    let t0 = Instant::now();
    // Two registry failures: the reference waits 10 s after the second (at 5 s).
    sim.ensure(IMG, t0);
    let call = sim.next_call();
    sim.finish(call, Err(unreachable()), t0);
    let t5 = t0 + Duration::from_secs(5);
    assert!(matches!(sim.ensure(IMG, t5), ImageState::Pulling { .. }));
    let call = sim.next_call();
    sim.finish(call, Err(unreachable()), t5);
    assert_eq!(sim.core.reference_failures(IMG), 2);
    // Its third attempt finds the daemon down: the streak stays at 2.
    let t15 = t0 + Duration::from_secs(15);
    assert!(matches!(sim.ensure(IMG, t15), ImageState::Pulling { .. }));
    sim.probe_answer = Err(daemon_down());
    let call = sim.next_call();
    sim.finish(call, Err(daemon_down()), t15);
    assert_eq!(sim.core.reference_failures(IMG), 2);
    assert!(matches!(
        sim.ensure(IMG, t15),
        ImageState::DaemonUnreachable { failures: 1, .. }
    ));
    assert!(
        sim.faults()
            .iter()
            .all(|f| f.subject == FaultSubject::Daemon.subject())
    );
    // The daemon answers its first probe (at 20 s): the reference is eligible as before (its
    // wait ended at 15 s), and its next failure is its third, not its fourth.
    sim.probe_answer = Ok(());
    let t20 = t0 + Duration::from_secs(20);
    sim.ensure(IMG, t20);
    sim.settle(t20);
    assert!(sim.faults().is_empty(), "{:?}", sim.faults());
    assert!(matches!(sim.ensure(IMG, t20), ImageState::Pulling { .. }));
    let call = sim.next_call();
    sim.finish(call, Err(unreachable()), t20);
    assert_eq!(sim.core.reference_failures(IMG), 3);
    match sim.ensure(IMG, t20) {
        ImageState::Waiting {
            failures, until, ..
        } => {
            assert_eq!(failures, 3);
            assert_eq!(until, t20 + Duration::from_secs(20));
        }
        other => panic!("expected waiting, got {other:?}"),
    }
}

// r[verify actuate.image.daemon.stale-probe]
#[test]
fn a_probe_that_never_answers_is_counted_and_its_escalation_files_the_daemon_fault() {
    // The daemon escalates at its second failure; its probes go stale after 30 s.
    let daemon_policy = Policy::builder()
        .base(Duration::from_secs(5))
        .cap(Duration::from_secs(300))
        .escalate_after(2)
        .jitter(Jitter::None)
        .stale_after(Duration::from_secs(30))
        .build()
        .unwrap();
    let cfg = PullConfig::builder(0)
        .image_policy(policy(Duration::from_secs(600)))
        .daemon_policy(daemon_policy)
        .stall_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let mut sim = Sim::new(cfg);
    let t0 = Instant::now();
    sim.ensure(IMG, t0);
    let call = sim.next_call();
    sim.finish(call, Err(daemon_down()), t0);
    // First daemon failure at 0 s; the probe at 5 s hangs (it is never answered).
    let t5 = t0 + Duration::from_secs(5);
    sim.ensure(IMG, t5);
    assert_eq!(sim.probes.len(), 1, "a probe went out at 5 s");
    let hung = sim.probes[0];
    assert!(!sim.daemon_fault());
    // Past its stale timeout the gate counts it: the second failure, which escalates.
    let mut s = 6;
    while !sim.daemon_fault() {
        sim.ensure(IMG, t0 + Duration::from_secs(s));
        s += 1;
        assert!(
            s < 200,
            "the hung probe's escalation never filed the daemon fault"
        );
    }
    assert!(
        s <= 36,
        "filed when the probe went stale (at 35 s), not later: {s}"
    );
    assert!(
        sim.cancelled.contains(&hung),
        "the hung probe was cancelled"
    );
    match sim.ensure(IMG, t0 + Duration::from_secs(s)) {
        ImageState::DaemonUnreachable { failures, .. } => assert_eq!(failures, 2),
        other => panic!("expected daemon unreachable, got {other:?}"),
    }
    let fault = sim
        .faults()
        .into_iter()
        .find(|f| f.subject == FaultSubject::Daemon.subject())
        .unwrap();
    assert_eq!(fault.kind, PullErrorKind::Stalled.as_str());
    // Not terminal: a probe that answers clears it.
    sim.probe_answer = Ok(());
    while sim.daemon_fault() {
        let now = t0 + Duration::from_secs(s);
        sim.ensure(IMG, now);
        sim.settle(now);
        s += 1;
        assert!(s < 600, "the daemon never recovered");
    }
}

// r[verify actuate.image.config+2]
#[test]
fn two_nodes_seeded_from_their_identities_come_back_at_different_times() {
    use holdfast_lifecycle::NodeIdentity;
    let t0 = Instant::now();
    let first_retry = |node: &str| {
        let seed = NodeIdentity::resolve(Some(node)).unwrap().seed("pull");
        // The reference numbers, with the default additive jitter.
        let mut sim = Sim::new(PullConfig::new(seed));
        sim.ensure(IMG, t0);
        let call = sim.next_call();
        sim.finish(call, Err(unreachable()), t0);
        match sim.ensure(IMG, t0) {
            ImageState::Waiting { until, .. } => until,
            other => panic!("expected waiting, got {other:?}"),
        }
    };
    let a = first_retry("node-a");
    let b = first_retry("node-b");
    assert_eq!(a, first_retry("node-a"), "stable for one node");
    assert_ne!(a, b, "two nodes do not retry one image in lockstep");
    for until in [a, b] {
        assert!(until >= t0 + Duration::from_secs(5) && until <= t0 + Duration::from_secs(6));
    }
}

// r[verify actuate.image.daemon+2]
#[test]
fn a_pull_that_finds_the_daemon_down_while_a_probe_is_out_leaves_the_answer_to_the_probe() {
    let mut sim = Sim::new(config(Duration::from_secs(600)));
    let t0 = Instant::now();
    // Two pulls in flight when the daemon goes away; the first to notice takes it down.
    sim.ensure(IMG, t0);
    sim.ensure(OTHER, t0);
    let img = sim.next_call();
    let other = sim.next_call();
    sim.finish(img, Err(daemon_down()), t0);
    // The probe due at 5 s goes out.
    let t5 = t0 + Duration::from_secs(5);
    assert!(matches!(
        sim.ensure(IMG, t5),
        ImageState::DaemonUnreachable { failures: 1, .. }
    ));
    assert_eq!(sim.probes.len(), 1, "a probe is out");
    // The slower pull reports the same outage while the probe is out.
    sim.finish(other, Err(daemon_down()), t0 + Duration::from_secs(6));
    // The daemon is back and the probe says so: pulls resume at once.
    sim.probe_answer = Ok(());
    let t7 = t0 + Duration::from_secs(7);
    sim.settle(t7);
    assert!(!sim.daemon_fault());
    assert!(
        matches!(sim.ensure(IMG, t7), ImageState::Pulling { .. }),
        "the probe's answer was heard"
    );
    assert_eq!(sim.pending(), 1);
}
