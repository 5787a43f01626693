//! `Attempts`: the gate's answers behind `Copy` ids, and expiry reported once.

use super::*;
use crate::ManualClock;
use crate::time::Clock;

const S: fn(u64) -> Duration = Duration::from_secs;

fn policy() -> Policy {
    Policy::builder()
        .base(S(5))
        .cap(S(300))
        .escalate_after(2)
        .stale_after(S(60))
        .jitter(crate::Jitter::None)
        .build()
        .unwrap()
}

fn granted(p: Permit) -> AttemptId {
    match p {
        Permit::Granted { id, expired: None } => id,
        other => panic!("expected a grant, got {other:?}"),
    }
}

// r[verify retry.attempts]
#[test]
fn ids_map_back_to_the_gates_answers() {
    let clock = ManualClock::new();
    let mut attempts: Attempts<String> = Attempts::new(policy());
    let id = granted(attempts.begin("img", clock.now()));
    assert_eq!(attempts.begin("img", clock.now()), Permit::InFlight);
    assert_eq!(attempts.outstanding(), 1);
    let failed = attempts.fail(id, clock.now(), None);
    assert_eq!(
        failed,
        Finished::Failed(Failed {
            failures: 1,
            until: clock.now() + S(5),
            escalated: false
        })
    );
    assert_eq!(
        attempts.fail(id, clock.now(), None),
        Finished::Superseded,
        "used once"
    );
    assert_eq!(
        attempts.begin("img", clock.now()),
        Permit::Wait {
            until: clock.now() + S(5),
            failures: 1,
            expired: None
        }
    );
    clock.advance(S(5));
    let id = granted(attempts.begin("img", clock.now()));
    let Finished::Failed(second) = attempts.fail(id, clock.now(), None) else {
        panic!("counted")
    };
    assert!(second.escalated && second.failures == 2);
    clock.advance(S(10));
    let id = granted(attempts.begin("img", clock.now()));
    assert_eq!(attempts.release(id, clock.now()), Finished::Released);
    assert_eq!(attempts.state("img").unwrap().failures, 2);
    let id = granted(attempts.begin("img", clock.now()));
    assert_eq!(
        attempts.succeed(id, clock.now()),
        Finished::Succeeded { recovered: true }
    );
    assert_eq!(attempts.state("img"), None);
    assert_eq!(attempts.outstanding(), 0);

    // Forgetting a key drops its outstanding ids: their results change nothing.
    let id = granted(attempts.begin("img", clock.now()));
    assert!(attempts.forget("img").unwrap().in_flight);
    assert_eq!(attempts.outstanding(), 0);
    assert_eq!(attempts.fail(id, clock.now(), None), Finished::Superseded);
    assert_eq!(attempts.state("img"), None);
    // A discarded id is gone too; the key stays as the gate holds it.
    let id = granted(attempts.begin("img", clock.now()));
    attempts.discard(id);
    assert_eq!(attempts.succeed(id, clock.now()), Finished::Superseded);
    assert!(attempts.state("img").unwrap().in_flight);
}

// r[verify retry.attempts]
#[test]
fn a_stale_attempts_expiry_is_reported_exactly_once() {
    let clock = ManualClock::new();
    let mut attempts: Attempts<&str> = Attempts::new(policy());
    let stale = granted(attempts.begin(&"img", clock.now()));
    clock.advance(S(60));
    // The refusal that first sees it stale records and reports the expiry (and escalation is
    // not yet reached: one failure)...
    let Permit::Wait {
        failures: 1,
        expired: Some(expiry),
        ..
    } = attempts.begin(&"img", clock.now())
    else {
        panic!("the expiry is reported by the refusal that recorded it")
    };
    assert_eq!(expiry.failures, 1);
    // ...and never again: not by the next refusal, not by the stale attempt's late failure.
    assert!(matches!(
        attempts.begin(&"img", clock.now()),
        Permit::Wait { expired: None, .. }
    ));
    clock.advance(S(5));
    let live = granted(attempts.begin(&"img", clock.now()));
    assert_eq!(
        attempts.fail(stale, clock.now(), None),
        Finished::Superseded
    );
    assert!(attempts.state(&"img").unwrap().in_flight);
    // Superseded at once by a grant: the grant carries the expiry, and it escalates.
    clock.advance(S(60 + 10));
    let Permit::Granted {
        id: newest,
        expired: Some(expiry),
    } = attempts.begin(&"img", clock.now())
    else {
        panic!("a grant that supersedes a stale attempt reports its expiry")
    };
    assert!(expiry.escalated && expiry.failures == 2);
    assert_eq!(attempts.fail(live, clock.now(), None), Finished::Superseded);
    assert_eq!(
        attempts.succeed(newest, clock.now()),
        Finished::Succeeded { recovered: true }
    );
}

// r[verify retry.attempts]
#[test]
fn a_budget_refusal_keeps_the_keys_streak() {
    let clock = ManualClock::new();
    let budget = RetryBudget::new(1, S(3600)).unwrap();
    let mut attempts: Attempts<&str> = Attempts::new(policy()).with_budget(budget);
    let id = granted(attempts.begin(&"img", clock.now())); // a first attempt: no budget
    let _ = attempts.fail(id, clock.now(), None);
    clock.advance(S(5));
    let id = granted(attempts.begin(&"img", clock.now())); // a retry: the budget's one token
    let _ = attempts.fail(id, clock.now(), None);
    clock.advance(S(10));
    let Permit::Wait {
        until, failures, ..
    } = attempts.begin(&"img", clock.now())
    else {
        panic!("the budget is spent")
    };
    assert!(until > clock.now());
    assert_eq!(failures, 2, "the streak, not zero");
}
