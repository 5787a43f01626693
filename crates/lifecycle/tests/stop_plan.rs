//! The stop plan under tokio's paused clock: order, shares, cut-offs, aborts, failures.

// Test helpers outside #[test] fns: a broken setup should fail loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use holdfast_lifecycle::{
    StopError, StopOutcome, StopPlan, StopReason, StopReport, StopRequest, stopper_fn,
};
use tokio::time::{Instant, sleep};

const S: Duration = Duration::from_secs(1);

/// Records (what, when) pairs from inside stoppers.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<(String, Instant)>>>);

impl Log {
    fn push(&self, what: &str) {
        self.0
            .lock()
            .unwrap()
            .push((what.to_owned(), Instant::now()));
    }
    fn at(&self, what: &str) -> Option<Instant> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .find(|(w, _)| w == what)
            .map(|(_, t)| *t)
    }
}

/// A stopper that logs when it is asked, works for `work`, then logs that it is done.
fn working(log: &Log, name: &'static str, work: Duration) -> Box<dyn holdfast_lifecycle::Stopper> {
    let log = log.clone();
    stopper_fn(move |_request| async move {
        log.push(&format!("{name} asked"));
        sleep(work).await;
        log.push(&format!("{name} done"));
        Ok(())
    })
}

fn outcome(report: &StopReport, module: &str) -> StopOutcome {
    report
        .modules
        .iter()
        .find(|m| m.module == module)
        .unwrap()
        .outcome
        .clone()
}

fn module<'a>(report: &'a StopReport, name: &str) -> &'a holdfast_lifecycle::ModuleStop {
    report.modules.iter().find(|m| m.module == name).unwrap()
}

// r[verify lifecycle.stop.order]
#[tokio::test(start_paused = true)]
async fn groups_run_in_order_and_stoppers_within_a_group_concurrently() {
    let log = Log::default();
    let mut plan = StopPlan::new(10 * S);
    let first = plan.group("first", 1);
    let second = plan.group("second", 1);
    plan.add(first, "a", working(&log, "a", S));
    plan.add(first, "b", working(&log, "b", S));
    plan.add(second, "c", working(&log, "c", S));
    let start = Instant::now();
    let report = plan.run(StopReason::Shutdown, std::future::pending()).await;

    // a and b were asked together and both done after 1 s, not 2 s: they ran concurrently.
    assert_eq!(log.at("a asked"), Some(start));
    assert_eq!(log.at("b asked"), Some(start));
    assert_eq!(log.at("b done"), Some(start + S));
    // c was asked only once both of the first group had returned.
    assert_eq!(log.at("c asked"), Some(start + S));
    assert_eq!(report.took, 2 * S);
    assert!(report.clean());
    let order: Vec<_> = report
        .modules
        .iter()
        .map(|m| (m.group.as_str(), m.module.as_str()))
        .collect();
    assert_eq!(order, [("first", "a"), ("first", "b"), ("second", "c")]);
}

// r[verify lifecycle.stop.order]
#[tokio::test(start_paused = true)]
async fn every_stopper_is_told_the_reason_and_its_groups_deadline() {
    let seen: Arc<Mutex<Vec<StopRequest>>> = Arc::default();
    let mut plan = StopPlan::new(9 * S);
    for (name, share) in [("one", 1), ("two", 2)] {
        let g = plan.group(name, share);
        let seen = seen.clone();
        plan.add(
            g,
            name,
            stopper_fn(move |request| async move {
                seen.lock().unwrap().push(request);
                Ok(())
            }),
        );
    }
    let start = Instant::now();
    plan.run(StopReason::Restart, std::future::pending()).await;
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|r| r.reason == StopReason::Restart));
    assert_eq!(seen[0].deadline, start + 3 * S); // a third of 9 s
    assert_eq!(seen[1].deadline, start + 9 * S); // the last group: all that is left
}

// r[verify lifecycle.stop.budget]
// r[verify lifecycle.stop.cutoff]
#[tokio::test(start_paused = true)]
async fn a_hung_stopper_is_cut_off_and_the_plan_returns_by_the_cap() {
    let mut plan = StopPlan::new(10 * S);
    let only = plan.group("only", 1);
    plan.add(only, "hung", stopper_fn(|_| std::future::pending()));
    plan.add(only, "quick", stopper_fn(|_| async { Ok(()) }));
    let start = Instant::now();
    let report = plan.run(StopReason::Shutdown, std::future::pending()).await;
    assert_eq!(Instant::now(), start + 10 * S);
    assert_eq!(report.took, 10 * S);
    assert_eq!(report.budget, 10 * S);
    assert_eq!(outcome(&report, "hung"), StopOutcome::CutOff);
    assert_eq!(module(&report, "hung").took, 10 * S);
    assert_eq!(outcome(&report, "quick"), StopOutcome::Stopped);
    assert_eq!(module(&report, "quick").took, Duration::ZERO);
    assert!(!report.clean());
    assert!(!report.aborted);
}

// r[verify lifecycle.stop.cutoff]
#[tokio::test(start_paused = true)]
async fn a_stopper_that_finishes_late_is_cut_off_at_its_deadline_and_runs_no_further() {
    let finished = Arc::new(AtomicBool::new(false));
    let log = Log::default();
    let mut plan = StopPlan::new(9 * S);
    let first = plan.group("first", 1); // 3 s of 9
    let second = plan.group("second", 2);
    let flag = finished.clone();
    plan.add(
        first,
        "late",
        stopper_fn(move |_| async move {
            sleep(5 * S).await;
            flag.store(true, Ordering::SeqCst);
            Ok(())
        }),
    );
    plan.add(second, "next", working(&log, "next", S));
    let start = Instant::now();
    let report = plan.run(StopReason::Shutdown, std::future::pending()).await;
    assert_eq!(outcome(&report, "late"), StopOutcome::CutOff);
    assert_eq!(module(&report, "late").budget, 3 * S);
    assert_eq!(module(&report, "late").took, 3 * S);
    // The next group started at the cut-off, not when the late stopper would have finished.
    assert_eq!(log.at("next asked"), Some(start + 3 * S));
    assert_eq!(outcome(&report, "next"), StopOutcome::Stopped);
    assert_eq!(module(&report, "next").budget, 6 * S);
    sleep(10 * S).await;
    assert!(
        !finished.load(Ordering::SeqCst),
        "a cut-off stopper must not run on"
    );
}

// r[verify lifecycle.stop.budget]
#[tokio::test(start_paused = true)]
async fn time_a_group_does_not_use_passes_on_to_the_later_groups() {
    let log = Log::default();
    let mut plan = StopPlan::new(9 * S);
    let g1 = plan.group("one", 1);
    let g2 = plan.group("two", 1);
    let g3 = plan.group("three", 1);
    plan.add(g1, "fast", working(&log, "fast", S)); // budget 3 s, uses 1 s
    plan.add(g2, "hung", stopper_fn(|_| std::future::pending())); // (9-1)/2 = 4 s
    plan.add(g3, "last", stopper_fn(|_| std::future::pending())); // what is left: 4 s
    let start = Instant::now();
    let report = plan.run(StopReason::Shutdown, std::future::pending()).await;
    let budgets: Vec<_> = report.modules.iter().map(|m| m.budget).collect();
    assert_eq!(budgets, [3 * S, 4 * S, 4 * S]);
    assert_eq!(outcome(&report, "fast"), StopOutcome::Stopped);
    assert_eq!(outcome(&report, "hung"), StopOutcome::CutOff);
    assert_eq!(outcome(&report, "last"), StopOutcome::CutOff);
    assert_eq!(Instant::now(), start + 9 * S);
    assert_eq!(report.took, 9 * S);
}

// r[verify lifecycle.stop.budget]
#[tokio::test(start_paused = true)]
async fn empty_groups_and_zero_shares_still_leave_every_group_time() {
    let mut plan = StopPlan::new(8 * S);
    let _empty = plan.group("empty", 5);
    let zero = plan.group("zero", 0); // counts as 1
    let rest = plan.group("rest", 1);
    plan.add(zero, "z", stopper_fn(|_| std::future::pending()));
    plan.add(rest, "r", stopper_fn(|_| std::future::pending()));
    let report = plan.run(StopReason::Shutdown, std::future::pending()).await;
    // The empty group used nothing: its 5/7 passed on, so "zero" gets half of all 8 s.
    assert_eq!(module(&report, "z").budget, 4 * S);
    assert_eq!(module(&report, "r").budget, 4 * S);
    assert_eq!(report.took, 8 * S);
}

// r[verify lifecycle.stop.abort]
#[tokio::test(start_paused = true)]
async fn an_abort_cuts_every_running_stopper_off_at_once_and_skips_the_rest() {
    let asked = Arc::new(AtomicBool::new(false));
    let mut plan = StopPlan::new(10 * S);
    let first = plan.group("first", 3);
    let second = plan.group("second", 1);
    plan.add(first, "hung", stopper_fn(|_| std::future::pending()));
    plan.add(
        first,
        "slow",
        stopper_fn(|_| async {
            sleep(5 * S).await;
            Ok(())
        }),
    );
    plan.add(first, "quick", stopper_fn(|_| async { Ok(()) }));
    let flag = asked.clone();
    plan.add(
        second,
        "never",
        stopper_fn(move |_| async move {
            flag.store(true, Ordering::SeqCst);
            Ok(())
        }),
    );
    let start = Instant::now();
    let report = plan.run(StopReason::Shutdown, sleep(2 * S)).await;
    assert_eq!(
        Instant::now(),
        start + 2 * S,
        "returns at the abort, not at a deadline"
    );
    assert!(report.aborted);
    assert!(!report.clean());
    assert_eq!(report.took, 2 * S);
    assert_eq!(outcome(&report, "quick"), StopOutcome::Stopped);
    assert_eq!(outcome(&report, "hung"), StopOutcome::Aborted);
    assert_eq!(outcome(&report, "slow"), StopOutcome::Aborted);
    assert_eq!(module(&report, "slow").took, 2 * S);
    assert_eq!(outcome(&report, "never"), StopOutcome::Aborted);
    assert_eq!(module(&report, "never").budget, Duration::ZERO);
    sleep(S).await;
    assert!(
        !asked.load(Ordering::SeqCst),
        "a skipped group's stopper is never asked"
    );
}

// r[verify lifecycle.stop.cutoff]
#[tokio::test(start_paused = true)]
async fn an_error_or_a_panic_is_a_failure_and_the_plan_goes_on() {
    let log = Log::default();
    let mut plan = StopPlan::new(10 * S);
    let first = plan.group("first", 1);
    let second = plan.group("second", 1);
    plan.add(
        first,
        "errs",
        stopper_fn(|_| async { Err(StopError("redis gone".into())) }),
    );
    plan.add(first, "panics", stopper_fn(|_| async { panic!("boom") }));
    plan.add(second, "after", working(&log, "after", S));
    let start = Instant::now();
    let report = plan.run(StopReason::Shutdown, std::future::pending()).await;
    assert_eq!(
        outcome(&report, "errs"),
        StopOutcome::Failed("redis gone".into())
    );
    assert_eq!(
        outcome(&report, "panics"),
        StopOutcome::Failed("panicked: boom".into())
    );
    assert_eq!(log.at("after asked"), Some(start));
    assert_eq!(outcome(&report, "after"), StopOutcome::Stopped);
    assert!(!report.clean());
    assert!(!report.aborted);
}

/// A panic while building the stop future (before any `.await`) is a failure too.
// r[verify lifecycle.stop.cutoff]
#[tokio::test(start_paused = true)]
async fn a_stopper_that_panics_when_asked_is_a_failure() {
    struct Explodes;
    impl holdfast_lifecycle::Stopper for Explodes {
        fn stop(
            self: Box<Self>,
            _request: StopRequest,
        ) -> holdfast_lifecycle::BoxFuture<Result<(), StopError>> {
            panic!("at once")
        }
    }
    let mut plan = StopPlan::new(10 * S);
    let g = plan.group("g", 1);
    plan.add(g, "explodes", Box::new(Explodes));
    let report = plan.run(StopReason::Shutdown, std::future::pending()).await;
    assert_eq!(
        outcome(&report, "explodes"),
        StopOutcome::Failed("panicked: at once".into())
    );
}

#[test]
fn the_report_serialises_with_snake_case_outcomes() {
    let json = serde_json::to_value(StopOutcome::Failed("x".into())).unwrap();
    assert_eq!(json, serde_json::json!({"outcome": "failed", "error": "x"}));
    let json = serde_json::to_value(StopOutcome::CutOff).unwrap();
    assert_eq!(json, serde_json::json!({"outcome": "cut_off"}));
    let json = serde_json::to_value(StopReason::Restart).unwrap();
    assert_eq!(json, serde_json::json!("restart"));
}

/// A second signal that came before a group started (say, while the previous group's last
/// stopper was returning): that group is skipped, its modules never asked.
// r[verify lifecycle.stop.abort]
#[tokio::test(start_paused = true)]
async fn an_abort_that_fired_before_a_group_started_skips_that_group_unasked() {
    let asked = Arc::new(AtomicBool::new(false));
    let mut plan = StopPlan::new(10 * S);
    let only = plan.group("only", 1);
    let flag = asked.clone();
    plan.add(
        only,
        "gateway",
        stopper_fn(move |_| {
            flag.store(true, Ordering::SeqCst);
            async { Ok(()) }
        }),
    );
    let report = plan.run(StopReason::Shutdown, std::future::ready(())).await;
    assert!(report.aborted);
    assert_eq!(outcome(&report, "gateway"), StopOutcome::Aborted);
    assert_eq!(
        module(&report, "gateway").budget,
        Duration::ZERO,
        "skipped, not started and cut off"
    );
    assert_eq!(report.took, Duration::ZERO);
    sleep(S).await;
    assert!(!asked.load(Ordering::SeqCst), "never asked");
}

/// The second signal comes as the first group's stopper returns: the later groups are skipped
/// unasked, and the signal (an `async` block, which must not be polled once it resolved) is
/// not polled again.
// r[verify lifecycle.stop.abort]
#[tokio::test(start_paused = true)]
async fn an_abort_between_groups_skips_the_later_groups_and_is_polled_no_more() {
    let (signal, signalled) = tokio::sync::oneshot::channel::<()>();
    let signal = Arc::new(Mutex::new(Some(signal)));
    let asked = Arc::new(AtomicBool::new(false));
    let mut plan = StopPlan::new(10 * S);
    let first = plan.group("first", 1);
    let second = plan.group("second", 1);
    let third = plan.group("third", 1);
    plan.add(
        first,
        "signals",
        stopper_fn(move |_| {
            let signal = signal.clone();
            async move {
                // The abort is sent as this stopper returns: it is seen between the groups.
                if let Some(signal) = signal.lock().unwrap().take() {
                    let _ = signal.send(());
                }
                Ok(())
            }
        }),
    );
    for (group, name) in [(second, "second"), (third, "third")] {
        let flag = asked.clone();
        plan.add(
            group,
            name,
            stopper_fn(move |_| {
                flag.store(true, Ordering::SeqCst);
                async { Ok(()) }
            }),
        );
    }
    let report = plan
        .run(StopReason::Shutdown, async move {
            let _ = signalled.await;
        })
        .await;
    assert!(report.aborted);
    // Whether "signals" counts as stopped or aborted depends on which its group's wait saw first;
    // the rule is about the groups after it.
    assert_eq!(outcome(&report, "second"), StopOutcome::Aborted);
    assert_eq!(outcome(&report, "third"), StopOutcome::Aborted);
    assert!(
        !asked.load(Ordering::SeqCst),
        "skipped groups are never asked"
    );
}

/// An abort that cut a group off also skips every later group, without polling the signal again
/// (an `async` block panics when polled after it resolved).
// r[verify lifecycle.stop.abort]
#[tokio::test(start_paused = true)]
async fn an_abort_during_a_group_skips_every_later_group_without_polling_the_signal_again() {
    let asked = Arc::new(AtomicBool::new(false));
    let mut plan = StopPlan::new(10 * S);
    let first = plan.group("first", 1);
    let second = plan.group("second", 1);
    let third = plan.group("third", 1);
    plan.add(first, "hung", stopper_fn(|_| std::future::pending()));
    for (group, name) in [(second, "second"), (third, "third")] {
        let flag = asked.clone();
        plan.add(
            group,
            name,
            stopper_fn(move |_| {
                flag.store(true, Ordering::SeqCst);
                async { Ok(()) }
            }),
        );
    }
    let report = plan
        .run(StopReason::Shutdown, async { sleep(2 * S).await })
        .await;
    assert!(report.aborted);
    assert_eq!(outcome(&report, "hung"), StopOutcome::Aborted);
    assert_eq!(outcome(&report, "second"), StopOutcome::Aborted);
    assert_eq!(outcome(&report, "third"), StopOutcome::Aborted);
    assert_eq!(report.took, 2 * S);
    assert!(
        !asked.load(Ordering::SeqCst),
        "skipped groups are never asked"
    );
}

/// A signal still to come skips nothing: the group after one that stopped cleanly is asked, and
/// only the stopper still running when the signal comes is aborted.
// r[verify lifecycle.stop.abort]
#[tokio::test(start_paused = true)]
async fn groups_before_the_abort_run_as_planned() {
    let asked = Arc::new(AtomicBool::new(false));
    let mut plan = StopPlan::new(10 * S);
    let first = plan.group("first", 1);
    let second = plan.group("second", 1);
    plan.add(first, "quick", stopper_fn(|_| async { Ok(()) }));
    let flag = asked.clone();
    plan.add(
        second,
        "hung",
        stopper_fn(move |_| {
            flag.store(true, Ordering::SeqCst);
            std::future::pending()
        }),
    );
    let report = plan.run(StopReason::Shutdown, sleep(2 * S)).await;
    assert!(report.aborted);
    assert_eq!(outcome(&report, "quick"), StopOutcome::Stopped);
    assert!(asked.load(Ordering::SeqCst), "the second group was started");
    assert_eq!(outcome(&report, "hung"), StopOutcome::Aborted);
    assert_eq!(module(&report, "hung").took, 2 * S);
}
