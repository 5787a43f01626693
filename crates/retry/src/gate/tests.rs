//! The keyed gate's unit tests.

use super::*;
use crate::{Clock, History, Jitter, ManualClock, decide};

const S: fn(u64) -> Duration = Duration::from_secs;

fn policy() -> Policy {
    Policy::builder()
        .base(S(5))
        .cap(S(300))
        .escalate_after(5)
        .stale_after(S(600))
        .hint_cap(S(3600))
        .build()
        .unwrap()
}

/// Begin and fail `key` at `now`; panics if the gate refuses.
fn fail_now(
    gate: &mut KeyedGate<&'static str>,
    key: &'static str,
    now: Instant,
) -> Transition<&'static str> {
    let token = gate.begin(&key, now).expect("eligible");
    gate.fail(token, now, None)
}

// r[verify retry.eligible]
#[test]
fn attempts_are_withheld_until_the_delay_and_allowed_at_exactly_the_boundary() {
    let clock = ManualClock::new();
    let mut gate = KeyedGate::new(policy());
    let failed = fail_now(&mut gate, "img", clock.now());
    let deadline = failed.next_attempt_at.unwrap();
    let wait = deadline - clock.now();
    assert!(wait >= S(5) && wait < S(6), "{wait:?}");
    clock.advance(wait - Duration::from_nanos(1));
    let refused = gate.begin(&"img", clock.now()).unwrap_err();
    assert_eq!(refused.until, deadline);
    assert_eq!(
        refused.reason,
        WaitReason::Backoff {
            failures: 1,
            escalated: false
        }
    );
    assert_eq!(gate.check(&"img", clock.now()), Err(refused));
    clock.advance(Duration::from_nanos(1));
    assert_eq!(gate.check(&"img", clock.now()), Ok(()));
    assert!(
        gate.begin(&"img", clock.now()).is_ok(),
        "allowed at exactly the deadline"
    );
}

// r[verify retry.eligible]
// r[verify retry.schedule]
#[test]
fn a_99_failure_streak_stays_at_the_cap_and_stays_eligible_after_max_wait() {
    let clock = ManualClock::new();
    let p = policy();
    let mut gate = KeyedGate::new(p);
    let mut waits = Vec::new();
    for _ in 0..99 {
        let t = fail_now(&mut gate, "img", clock.now());
        let wait = t.next_attempt_at.unwrap() - clock.now();
        waits.push(wait);
        assert!(wait <= p.max_wait());
        clock.advance(wait);
    }
    assert_eq!(gate.state(&"img").unwrap().failures, 99);
    for w in &waits[7..] {
        assert!(*w >= p.cap() && *w < p.cap() * 6 / 5, "{w:?}");
    }
    // And a streak of u32::MAX (replayed through the pure decision) is no different.
    let mut h = History::<Duration>::new(42);
    h.failures = u32::MAX - 1;
    h.last_failure = Some(Duration::ZERO);
    h.record_failure(&p, Duration::ZERO, None);
    assert_eq!(h.failures, u32::MAX);
    h.record_failure(&p, Duration::ZERO, None);
    assert_eq!(h.failures, u32::MAX, "saturates");
    assert!(decide(&p, &h, p.max_wait()).is_eligible());
    assert!(!decide(&p, &h, p.cap() - Duration::from_nanos(1)).is_eligible());
}

// r[verify retry.eligible]
#[test]
fn the_maximum_wait_is_the_longer_of_the_jittered_cap_and_hint_cap() {
    let build = |jitter, hint_cap| {
        Policy::builder()
            .base(S(1))
            .cap(S(300))
            .hint_cap(hint_cap)
            .jitter(jitter)
            .build()
            .unwrap()
    };
    // Additive backoff reaches up to 1.2 × cap; a hint is always jittered additively.
    assert_eq!(build(Jitter::Additive, S(100)).max_wait(), S(360));
    assert_eq!(build(Jitter::Additive, S(3600)).max_wait(), S(4320));
    for jitter in [
        Jitter::None,
        Jitter::Full,
        Jitter::Equal,
        Jitter::Decorrelated,
    ] {
        assert_eq!(build(jitter, S(100)).max_wait(), S(300), "{jitter:?}");
        assert_eq!(build(jitter, S(3600)).max_wait(), S(4320), "{jitter:?}");
    }
}

// r[verify retry.eligible]
#[test]
fn the_pure_decision_admits_at_exactly_the_deadline_and_not_before() {
    let p = policy();
    let mut h = History::<Duration>::new(7);
    h.record_failure(&p, S(100), None);
    let at = h.next_attempt_at(&p).expect("a deadline after a failure");
    assert!(at > S(100));
    assert!(decide(&p, &h, at).is_eligible(), "eligible at the deadline");
    assert!(!decide(&p, &h, at - Duration::from_nanos(1)).is_eligible());
}

// r[verify retry.keys-independent]
#[test]
fn keys_are_paced_independently() {
    let clock = ManualClock::new();
    let mut gate = KeyedGate::new(policy());
    for _ in 0..3 {
        let t = fail_now(&mut gate, "a", clock.now());
        clock.advance(t.next_attempt_at.unwrap() - clock.now());
    }
    assert_eq!(gate.check(&"b", clock.now()), Ok(()));
    let t = fail_now(&mut gate, "b", clock.now());
    assert_eq!(t.failures, 1);
    let wait = t.next_attempt_at.unwrap() - clock.now();
    assert!(wait < S(6), "b starts at base, not at a's delay: {wait:?}");
    assert_eq!(gate.state(&"a").unwrap().failures, 3);
    // An attempt in flight on one key does not hold back another.
    let token = gate.begin(&"a", clock.now()).unwrap();
    assert_eq!(gate.check(&"c", clock.now()), Ok(()));
    let _ = gate.succeed(token, clock.now());
    assert_eq!(gate.state(&"b").unwrap().failures, 1);
}

// r[verify retry.keys-independent]
#[test]
fn many_keys_each_keep_their_own_streak() {
    // Enough keys that many share a bucket's tag: a lookup that took another key's entry would
    // show as a streak of the wrong length.
    let clock = ManualClock::new();
    let mut gate = KeyedGate::<String>::new(policy());
    let keys: Vec<String> = (0..600).map(|k| format!("image-{k}")).collect();
    let streak = |k: usize| u32::try_from(k % 3 + 1).unwrap();
    for round in 1..=3 {
        for (k, key) in keys.iter().enumerate() {
            if streak(k) < round {
                continue;
            }
            let token = gate.begin(key.as_str(), clock.now()).expect("eligible");
            let t = gate.fail(token, clock.now(), None);
            assert_eq!(t.failures, round, "{key}");
        }
        // Past every wait, within the cap: no key is dropped or starts a new streak.
        clock.advance(S(60));
    }
    for (k, key) in keys.iter().enumerate() {
        assert_eq!(
            gate.state(key.as_str()).map(|s| s.failures),
            Some(streak(k)),
            "{key}"
        );
    }
    // One key's success resets that key alone.
    let token = gate.begin(keys[0].as_str(), clock.now()).unwrap();
    let _ = gate.succeed(token, clock.now());
    assert_eq!(gate.state(keys[0].as_str()), None);
    for (k, key) in keys.iter().enumerate().skip(1) {
        assert_eq!(
            gate.state(key.as_str()).map(|s| s.failures),
            Some(streak(k)),
            "{key}"
        );
    }
}

// r[verify retry.single-flight]
#[test]
fn one_attempt_in_flight_per_key() {
    let clock = ManualClock::new();
    let mut gate = KeyedGate::new(policy());
    let token = gate.begin(&"img", clock.now()).unwrap();
    let refused = gate.begin(&"img", clock.now()).unwrap_err();
    assert_eq!(refused.reason, WaitReason::InFlight { attempt: 1 });
    assert_eq!(refused.until, clock.now() + S(600));
    clock.advance(S(599));
    assert!(gate.begin(&"img", clock.now()).is_err());
    let done = gate.succeed(token, clock.now());
    assert_eq!(done.reason, Reason::Succeeded);
    let token = gate.begin(&"img", clock.now()).unwrap();
    // A refusal names an attempt in flight only while one is: after its failure the key backs off.
    let t = gate.fail(token, clock.now(), None);
    assert!(matches!(
        gate.begin(&"img", clock.now()).unwrap_err().reason,
        WaitReason::Backoff { failures: 1, .. }
    ));
    // Refused until the attempt goes stale, and no longer refused as in flight at that moment.
    clock.advance(t.next_attempt_at.unwrap() - clock.now());
    let _live = gate.begin(&"img", clock.now()).unwrap();
    let refused = gate.begin(&"img", clock.now()).unwrap_err();
    assert_eq!(refused.reason, WaitReason::InFlight { attempt: 2 });
    assert_eq!(refused.until, clock.now() + S(600));
    clock.advance(S(600) - Duration::from_nanos(1));
    assert!(matches!(
        gate.begin(&"img", clock.now()).unwrap_err().reason,
        WaitReason::InFlight { .. }
    ));
    clock.advance(Duration::from_nanos(1));
    assert!(!matches!(
        gate.begin(&"img", clock.now()).unwrap_err().reason,
        WaitReason::InFlight { .. }
    ));
}

// r[verify retry.token.stale]
// r[verify retry.in-flight.expiry]
#[test]
fn a_late_failure_from_a_superseded_attempt_changes_nothing() {
    let clock = ManualClock::new();
    let p = policy();
    let mut gate = KeyedGate::new(p);
    let old = gate.begin(&"img", clock.now()).unwrap();
    // The attempt hangs past the stale timeout: it counts as failure 1 at the stale moment.
    clock.advance(S(600));
    let refused = gate.begin(&"img", clock.now()).unwrap_err();
    let expired = refused.expired.expect("the stale attempt is reported once");
    assert_eq!(
        (expired.reason, expired.attempt, expired.failures),
        (Reason::Expired, 1, 1)
    );
    assert_eq!(
        refused.reason,
        WaitReason::Backoff {
            failures: 1,
            escalated: false
        }
    );
    clock.advance(refused.until - clock.now());
    let live = gate.begin(&"img", clock.now()).unwrap();
    assert!(live.expired.is_none());
    assert_eq!(live.attempt(), 2);
    let before = gate.state(&"img");
    // The old attempt finally fails (or even succeeds): ignored.
    let late = gate.fail(old, clock.now(), Some(S(3000)));
    assert_eq!(late.reason, Reason::Superseded);
    assert_eq!(gate.state(&"img"), before);
    assert!(
        gate.begin(&"img", clock.now()).is_err(),
        "the live attempt is still in flight"
    );
    let t = gate.fail(live, clock.now(), None);
    assert_eq!(
        (t.reason, t.failures),
        (
            Reason::Failed {
                hint_applied: false
            },
            2
        )
    );
}

// r[verify retry.token.release]
#[test]
fn a_released_fresh_key_stays_fresh_and_eligible() {
    let clock = ManualClock::new();
    let mut gate = KeyedGate::new(policy());
    let token = gate.begin(&"img", clock.now()).unwrap();
    clock.advance(S(3));
    let t = gate.release(token, clock.now());
    assert_eq!(
        t,
        Transition {
            key: "img",
            attempt: 1,
            reason: Reason::Released,
            failures: 0,
            next_attempt_at: None,
            escalation: None,
        }
    );
    assert_eq!(
        t.to_string(),
        "img attempt 1: released, no outcome (0 in a row)"
    );
    // Nothing left behind: the key is as fresh as before, and eligible at once.
    assert_eq!(gate.state(&"img"), None);
    assert!(gate.is_empty());
    assert_eq!(gate.check(&"img", clock.now()), Ok(()));
    let token = gate.begin(&"img", clock.now()).unwrap();
    assert_eq!(token.attempt(), 1);
    let t = gate.fail(token, clock.now(), None);
    assert_eq!(t.failures, 1, "the release counted for nothing");
}

// r[verify retry.token.release]
#[test]
fn a_release_on_a_key_with_a_streak_keeps_its_wait() {
    let clock = ManualClock::new();
    let p = policy();
    let mut gate = KeyedGate::new(p);
    // A streak of 2, the second failure with a server hint that sets the wait.
    let t = fail_now(&mut gate, "img", clock.now());
    clock.advance(t.next_attempt_at.unwrap() - clock.now());
    let token = gate.begin(&"img", clock.now()).unwrap();
    let failed = gate.fail(token, clock.now(), Some(S(120)));
    assert_eq!(failed.reason, Reason::Failed { hint_applied: true });
    let deadline = failed.next_attempt_at.unwrap();
    clock.advance(deadline - clock.now() + S(7));
    let before = gate.state(&"img").unwrap();
    assert_eq!(gate.check(&"img", clock.now()), Ok(()));
    let token = gate.begin(&"img", clock.now()).unwrap();
    assert_eq!(token.attempt(), 3);
    clock.advance(S(30));
    let t = gate.release(token, clock.now());
    assert_eq!(
        (
            t.reason,
            t.attempt,
            t.failures,
            t.next_attempt_at,
            t.escalation
        ),
        (Reason::Released, 3, 2, Some(deadline), None)
    );
    assert_eq!(
        t.to_string(),
        "img attempt 3: released, no outcome (2 in a row)"
    );
    // Exactly as before the attempt: same streak, same deadline (hint included), idle.
    assert_eq!(gate.state(&"img"), Some(before));
    assert!(!before.in_flight);
    assert_eq!(gate.check(&"img", clock.now()), Ok(()));
    // The next attempt is still attempt 3, and its failure is failure 3 on the schedule.
    let token = gate.begin(&"img", clock.now()).unwrap();
    assert_eq!(token.attempt(), 3);
    let t = gate.fail(token, clock.now(), None);
    assert_eq!(t.failures, 3);
    assert_eq!(
        t.next_attempt_at.unwrap() - clock.now(),
        p.jittered_delay(3, stable_hash(&"img"))
    );
    // A release of an attempt that began after a gap past the cap (a new streak) also leaves
    // the key as it was, and the attempt after it starts the new streak just the same.
    clock.advance(t.next_attempt_at.unwrap() - clock.now() + p.cap() + S(1));
    let before = gate.state(&"img").unwrap();
    assert_eq!(before.failures, 3);
    let token = gate.begin(&"img", clock.now()).unwrap();
    assert_eq!(token.attempt(), 1);
    let t = gate.release(token, clock.now());
    // The gap had already started a new, empty streak when the attempt began; the release
    // leaves it so, and a fresh key's state is no state at all.
    assert_eq!(
        (t.reason, t.failures, t.next_attempt_at, t.escalation),
        (Reason::Released, 0, None, None)
    );
    assert_eq!(gate.state(&"img"), None);
    assert_eq!(gate.check(&"img", clock.now()), Ok(()));
    let token = gate.begin(&"img", clock.now()).unwrap();
    assert_eq!(token.attempt(), 1);
    assert_eq!(gate.fail(token, clock.now(), None).failures, 1);
}

// r[verify retry.token.release]
#[test]
fn a_stale_or_superseded_release_changes_nothing() {
    let clock = ManualClock::new();
    let p = policy();
    let mut gate = KeyedGate::new(p);
    let old = gate.begin(&"img", clock.now()).unwrap();
    // The attempt hangs past the stale timeout; it is counted as failed and superseded.
    clock.advance(S(600));
    let refused = gate.begin(&"img", clock.now()).unwrap_err();
    clock.advance(refused.until - clock.now());
    let live = gate.begin(&"img", clock.now()).unwrap();
    assert_eq!(live.attempt(), 2);
    let before = gate.state(&"img");
    let late = gate.release(old, clock.now());
    assert_eq!(late.reason, Reason::Superseded);
    assert_eq!(gate.state(&"img"), before, "the live attempt is untouched");
    assert!(gate.state(&"img").unwrap().in_flight);
    assert_eq!(gate.fail(live, clock.now(), None).failures, 2);
    // A token whose key was forgotten meanwhile: nothing comes back.
    let token = gate.begin(&"other", clock.now()).unwrap();
    let _ = gate.forget(&"other");
    assert_eq!(gate.release(token, clock.now()).reason, Reason::Superseded);
    assert_eq!(gate.state(&"other"), None);
    // Released only after its stale timeout: it already failed at the stale moment, and its
    // release undoes none of that.
    let t0 = clock.now();
    let hung = gate.begin(&"hung", t0).unwrap();
    clock.advance(S(900));
    let t = gate.release(hung, clock.now());
    assert_eq!((t.reason, t.attempt, t.failures), (Reason::Expired, 1, 1));
    assert_eq!(
        t.next_attempt_at.unwrap() - (t0 + S(600)),
        p.jittered_delay(1, stable_hash(&"hung"))
    );
    assert_eq!(gate.state(&"hung").unwrap().failures, 1);
}

// r[verify retry.token.release]
#[test]
fn releases_never_count_toward_escalation() {
    let clock = ManualClock::new();
    let mut gate = KeyedGate::new(policy());
    for _ in 0..4 {
        let t = fail_now(&mut gate, "img", clock.now());
        assert_eq!(t.escalation, None);
        clock.advance(t.next_attempt_at.unwrap() - clock.now());
    }
    for _ in 0..20 {
        let token = gate.begin(&"img", clock.now()).unwrap();
        clock.advance(S(1));
        let t = gate.release(token, clock.now());
        assert_eq!((t.failures, t.escalation), (4, None));
    }
    let state = gate.state(&"img").unwrap();
    assert_eq!((state.failures, state.escalated), (4, false));
    // The next granted failure is the fifth, and it escalates.
    let t = fail_now(&mut gate, "img", clock.now());
    assert_eq!((t.failures, t.escalation), (5, Some(Escalation::Escalated)));
    // An escalated key's release neither recovers it nor files the escalation again.
    clock.advance(t.next_attempt_at.unwrap() - clock.now());
    let token = gate.begin(&"img", clock.now()).unwrap();
    let t = gate.release(token, clock.now());
    assert_eq!((t.failures, t.escalation), (5, None));
    assert!(gate.state(&"img").unwrap().escalated);
    let token = gate.begin(&"img", clock.now()).unwrap();
    assert_eq!(
        gate.succeed(token, clock.now()).escalation,
        Some(Escalation::Recovered)
    );
}

// r[verify retry.token.release]
#[test]
fn a_shared_gate_releases_like_a_keyed_gate() {
    let clock = ManualClock::new();
    let gate = crate::SharedGate::new(policy());
    let token = gate.begin(&"img", clock.now()).unwrap();
    let failed = gate.fail(token, clock.now(), None);
    clock.advance(failed.next_attempt_at.unwrap() - clock.now());
    let before = gate.state(&"img");
    let token = gate.begin(&"img", clock.now()).unwrap();
    assert!(gate.begin(&"img", clock.now()).is_err(), "in flight");
    let t = gate.release(token, clock.now());
    assert_eq!((t.reason, t.failures), (Reason::Released, 1));
    assert_eq!(gate.state(&"img"), before);
    assert!(gate.begin(&"img", clock.now()).is_ok());
}

// r[verify retry.in-flight.expiry]
#[test]
fn a_hung_attempt_fails_at_its_stale_moment_and_its_late_failure_adds_nothing() {
    let clock = ManualClock::new();
    let p = policy();
    let mut gate = KeyedGate::new(p);
    let t0 = clock.now();
    let token = gate.begin(&"img", t0).unwrap();
    clock.advance(S(900));
    // Nobody superseded it, but it is past the stale timeout: it failed at t0 + 600 s.
    let t = gate.fail(token, clock.now(), Some(S(3000)));
    assert_eq!((t.reason, t.attempt, t.failures), (Reason::Expired, 1, 1));
    let next = t.next_attempt_at.unwrap();
    assert_eq!(
        next - (t0 + S(600)),
        p.jittered_delay(1, stable_hash(&"img"))
    );
    assert_eq!(
        gate.check(&"img", clock.now()),
        Ok(()),
        "the hint of the late failure is ignored"
    );
    // A late success, with no newer attempt begun, still resets the key.
    let token = gate.begin(&"img", clock.now()).unwrap();
    clock.advance(S(700));
    assert_eq!(gate.succeed(token, clock.now()).reason, Reason::Succeeded);
    assert_eq!(gate.state(&"img"), None);
}

// r[verify retry.token.stale]
#[test]
fn a_late_success_of_a_superseded_attempt_changes_nothing() {
    let clock = ManualClock::new();
    let mut gate = KeyedGate::new(policy());
    let old = gate.begin(&"img", clock.now()).unwrap();
    clock.advance(S(700));
    let live = gate.begin(&"img", clock.now()).unwrap();
    assert_eq!(
        live.expired.as_ref().map(|e| e.reason),
        Some(Reason::Expired)
    );
    let late = gate.succeed(old, clock.now());
    assert_eq!(late.reason, Reason::Superseded);
    assert!(gate.state(&"img").unwrap().in_flight);
    let t = gate.fail(live, clock.now(), None);
    assert_eq!(t.failures, 2);
}

// r[verify retry.in-flight.expiry]
#[test]
fn a_stale_attempts_late_success_resets_the_key_after_a_refused_begin_recorded_its_expiry() {
    let clock = ManualClock::new();
    let p = Policy::builder()
        .base(S(5))
        .cap(S(300))
        .escalate_after(1)
        .stale_after(S(600))
        .build()
        .unwrap();
    let mut gate = KeyedGate::new(p);
    let hung = gate.begin(&"img", clock.now()).unwrap();
    clock.advance(S(601));
    // Another caller asks: the hung attempt is counted as failed (and escalates), and the key
    // is backing off, so no newer attempt begins.
    let refused = gate.begin(&"img", clock.now()).unwrap_err();
    let expired = refused.expired.expect("the expiry is reported");
    assert_eq!(
        (expired.reason, expired.escalation),
        (Reason::Expired, Some(Escalation::Escalated))
    );
    // The hung attempt finally succeeds: the key is reset and the fault cleared.
    let late = gate.succeed(hung, clock.now());
    assert_eq!(
        (late.reason, late.failures, late.escalation),
        (Reason::Succeeded, 0, Some(Escalation::Recovered))
    );
    assert_eq!(gate.state(&"img"), None);
    assert_eq!(gate.check(&"img", clock.now()), Ok(()));
}

// r[verify retry.in-flight.expiry]
// r[verify retry.token.stale]
#[test]
fn a_stale_attempts_late_outcome_changes_nothing_once_a_newer_attempt_began() {
    let clock = ManualClock::new();
    let mut gate = KeyedGate::new(policy());
    let hung = gate.begin(&"img", clock.now()).unwrap();
    clock.advance(S(601));
    let refused = gate.begin(&"img", clock.now()).unwrap_err();
    clock.advance(refused.until - clock.now());
    let live = gate.begin(&"img", clock.now()).unwrap();
    let before = gate.state(&"img");
    assert_eq!(gate.succeed(hung, clock.now()).reason, Reason::Superseded);
    assert_eq!(gate.state(&"img"), before);
    assert_eq!(gate.fail(live, clock.now(), None).failures, 2);
}

// r[verify retry.token.stale]
#[test]
fn a_token_whose_generation_came_round_again_is_still_superseded() {
    let clock = ManualClock::new();
    let mut gate = KeyedGate::new(policy());
    let old = gate.begin(&"img", clock.now()).unwrap();
    let _ = gate.succeed(old, clock.now());
    // Fake the counter wrapping: the next grant reuses generation 0, at a later time.
    gate.core.generation = 0;
    let replayed_generation = AttemptToken {
        key: "img",
        generation: 0,
        attempt: 1,
        began: clock.now(),
        prior: None,
        expired: None,
    };
    clock.advance(S(1));
    let live = gate.begin(&"img", clock.now()).unwrap();
    assert_eq!(live.generation, replayed_generation.generation);
    let late = gate.fail(replayed_generation, clock.now(), None);
    assert_eq!(late.reason, Reason::Superseded);
    assert!(gate.state(&"img").unwrap().in_flight);
    assert_eq!(gate.succeed(live, clock.now()).reason, Reason::Succeeded);
}

// r[verify retry.token.stale]
#[test]
fn a_stale_attempts_late_success_changes_nothing_once_a_newer_attempt_went_stale_too() {
    let clock = ManualClock::new();
    let mut gate = KeyedGate::new(policy());
    let first = gate.begin(&"img", clock.now()).unwrap();
    clock.advance(S(600));
    let refused = gate.begin(&"img", clock.now()).unwrap_err();
    clock.advance(refused.until - clock.now());
    let second = gate.begin(&"img", clock.now()).unwrap();
    clock.advance(S(600));
    assert!(gate.begin(&"img", clock.now()).is_err(), "backing off");
    let before = gate.state(&"img");
    assert_eq!(before.map(|s| s.failures), Some(2));
    // Both went stale; only the newer one's late success is the key's.
    assert_eq!(gate.succeed(first, clock.now()).reason, Reason::Superseded);
    assert_eq!(gate.state(&"img"), before);
    assert_eq!(gate.succeed(second, clock.now()).reason, Reason::Succeeded);
    assert_eq!(gate.state(&"img"), None);
}

// r[verify retry.token.granted-only]
#[test]
fn refused_calls_never_grow_the_streak() {
    let clock = ManualClock::new();
    let mut gate = KeyedGate::new(policy());
    let t = fail_now(&mut gate, "img", clock.now());
    for _ in 0..1000 {
        assert!(gate.begin(&"img", clock.now()).is_err());
        clock.advance(Duration::from_millis(1));
    }
    assert_eq!(gate.state(&"img").unwrap().failures, 1);
    assert_eq!(
        gate.state(&"img").unwrap().next_attempt_at,
        t.next_attempt_at.unwrap()
    );
    // A token from another gate names a generation this gate never granted.
    let mut other = KeyedGate::new(policy());
    let _ = other.begin(&"img", clock.now()).unwrap();
    let foreign = other.begin(&"x", clock.now()).unwrap();
    let mut fresh = KeyedGate::new(policy());
    let _live = fresh.begin(&"x", clock.now()).unwrap();
    assert_eq!(
        fresh.fail(foreign, clock.now(), None).reason,
        Reason::Superseded
    );
    assert_eq!(fresh.state(&"x").unwrap().failures, 0);
}

// r[verify retry.escalation]
// r[verify retry.observe+2]
#[test]
fn escalated_once_per_streak_recovered_once_and_pacing_unchanged() {
    let clock = ManualClock::new();
    let p = policy();
    let mut gate = KeyedGate::new(p);
    let mut escalations = Vec::new();
    for n in 1..=9u32 {
        let token = gate.begin(&"img", clock.now()).unwrap();
        assert_eq!(token.attempt(), n);
        let t = gate.fail(token, clock.now(), None);
        assert_eq!((t.key, t.attempt, t.failures), ("img", n, n));
        let next = t.next_attempt_at.unwrap();
        assert_eq!(
            next - clock.now(),
            p.jittered_delay(n, stable_hash(&"img")),
            "pacing is the schedule"
        );
        escalations.push(t.escalation);
        clock.advance(next - clock.now());
    }
    let expected: Vec<_> = (1..=9)
        .map(|n| (n == 5).then_some(Escalation::Escalated))
        .collect();
    assert_eq!(escalations, expected);
    assert!(gate.state(&"img").unwrap().escalated);
    let token = gate.begin(&"img", clock.now()).unwrap();
    let t = gate.succeed(token, clock.now());
    assert_eq!(
        t,
        Transition {
            key: "img",
            attempt: 10,
            reason: Reason::Succeeded,
            failures: 0,
            next_attempt_at: None,
            escalation: Some(Escalation::Recovered)
        }
    );
    assert_eq!(t.to_string(), "img attempt 10: succeeded, recovered");
    let token = gate.begin(&"img", clock.now()).unwrap();
    assert_eq!(
        gate.succeed(token, clock.now()).escalation,
        None,
        "recovered once"
    );
}

// r[verify retry.success-reset]
#[test]
fn success_resets_the_key_fully() {
    let clock = ManualClock::new();
    let mut gate = KeyedGate::new(policy());
    for _ in 0..6 {
        let t = fail_now(&mut gate, "img", clock.now());
        clock.advance(t.next_attempt_at.unwrap() - clock.now());
    }
    let token = gate.begin(&"img", clock.now()).unwrap();
    let _ = gate.succeed(token, clock.now());
    assert_eq!(gate.state(&"img"), None);
    assert!(gate.is_empty());
    let t = fail_now(&mut gate, "img", clock.now());
    assert_eq!((t.attempt, t.failures, t.escalation), (1, 1, None));
    assert!(t.next_attempt_at.unwrap() - clock.now() < S(6));
}

// r[verify retry.gap-reset]
#[test]
fn a_gap_past_the_cap_starts_a_new_streak() {
    let clock = ManualClock::new();
    let p = policy();
    let mut gate = KeyedGate::new(p);
    for _ in 0..8 {
        let t = fail_now(&mut gate, "img", clock.now());
        clock.advance(t.next_attempt_at.unwrap() - clock.now());
    }
    // Prompt retry at the cap, even a whole cap late: same streak.
    clock.advance(p.cap());
    let t = fail_now(&mut gate, "img", clock.now());
    assert_eq!(t.failures, 9);
    // Quiet for longer than the cap after becoming eligible: a new streak at n = 1.
    clock.advance(t.next_attempt_at.unwrap() - clock.now() + p.cap() + S(1));
    let token = gate.begin(&"img", clock.now()).unwrap();
    assert_eq!(token.attempt(), 1);
    let t = gate.fail(token, clock.now(), None);
    assert_eq!(t.failures, 1);
    assert!(t.next_attempt_at.unwrap() - clock.now() < S(6));
    assert_eq!(t.escalation, None, "the open escalation is not filed twice");
}

// r[verify retry.retry-after]
#[test]
fn retry_after_is_merged_into_the_keys_pacing() {
    let clock = ManualClock::new();
    let mut gate = KeyedGate::new(policy());
    let token = gate.begin(&"img", clock.now()).unwrap();
    let t = gate.fail(token, clock.now(), Some(S(120)));
    let wait = t.next_attempt_at.unwrap() - clock.now();
    assert!(wait >= S(120) && wait < S(144), "{wait:?}");
    assert_eq!(t.reason, Reason::Failed { hint_applied: true });
    clock.advance(wait);
    let token = gate.begin(&"img", clock.now()).unwrap();
    let t = gate.fail(token, clock.now(), Some(S(1)));
    let wait = t.next_attempt_at.unwrap() - clock.now();
    assert!(
        wait >= S(10) && wait < S(12),
        "a short hint is ignored: {wait:?}"
    );
    assert_eq!(
        t.reason,
        Reason::Failed {
            hint_applied: false
        }
    );
    clock.advance(wait);
    let token = gate.begin(&"img", clock.now()).unwrap();
    let t = gate.fail(token, clock.now(), Some(S(86_400)));
    let wait = t.next_attempt_at.unwrap() - clock.now();
    assert!(
        wait >= S(3600) && wait < S(4320),
        "capped at the hint cap: {wait:?}"
    );
}

// r[verify retry.memory+2]
#[test]
fn idle_keys_are_dropped_during_ordinary_calls() {
    let clock = ManualClock::new();
    let p = policy();
    let mut gate = KeyedGate::new(p);
    let keys: Vec<String> = (0..10_000).map(|i| format!("image-{i}")).collect();
    for k in &keys {
        let token = gate.begin(k, clock.now()).unwrap();
        let _ = gate.fail(token, clock.now(), None);
    }
    assert_eq!(gate.len(), 10_000);
    // Eligible since at most 6 s; one cap later nothing is known that a fresh key lacks.
    clock.advance(S(6) + p.cap());
    let busy = "busy".to_string();
    let token = gate.begin(&busy, clock.now()).unwrap();
    let _ = gate.fail(token, clock.now(), None);
    clock.advance(p.cap() / 4 + S(1));
    assert!(gate.check(&keys[0], clock.now()).is_ok());
    // A quarter cap after they held nothing, the next ordinary call has dropped them all:
    // what is left is `busy` (backing off) and `other` (in flight).
    let token = gate.begin(&"other".to_string(), clock.now()).unwrap();
    assert_eq!(gate.len(), 2, "idle keys dropped");
    assert!(gate.state(&busy).is_some() && gate.state(&keys[0]).is_none());
    let _ = gate.succeed(token, clock.now());
    // A dropped key decides as it would have: eligible, and its next failure is failure 1.
    let token = gate.begin(&keys[0], clock.now()).unwrap();
    assert_eq!(gate.fail(token, clock.now(), None).failures, 1);
}

// r[verify retry.memory+2]
#[test]
fn keys_in_flight_are_kept_until_stale() {
    let clock = ManualClock::new();
    let p = policy();
    let mut gate = KeyedGate::new(p);
    let token = gate.begin(&"slow", clock.now()).unwrap();
    clock.advance(S(599));
    let _ = gate.begin(&"other", clock.now());
    assert!(gate.state(&"slow").unwrap().in_flight);
    let _ = gate.succeed(token, clock.now());
    // A lost token: the attempt goes stale, counts as a failure, and is then forgotten.
    let _lost = gate.begin(&"lost", clock.now()).unwrap();
    clock.advance(p.stale_after() + p.max_wait() + p.cap() + p.cap() / 4 + S(1));
    let _ = gate.begin(&"other2", clock.now());
    assert_eq!(gate.state(&"lost"), None);
}

// r[verify retry.memory+2]
#[test]
fn a_key_eligible_for_exactly_the_cap_still_holds_its_streak_and_is_kept() {
    let clock = ManualClock::new();
    let p = policy();
    let mut gate = KeyedGate::new(p);
    let t = fail_now(&mut gate, "img", clock.now());
    let eligible_at = t.next_attempt_at.unwrap();
    // Exactly a cap after it became eligible its next attempt still continues the streak (a gap
    // reset needs more than the cap), so the key holds information a fresh key lacks.
    clock.advance(eligible_at - clock.now() + p.cap());
    let token = gate.begin(&"img", clock.now()).unwrap();
    assert_eq!(token.attempt(), 2, "the streak continues");
    // Released at once, the key is back as it was (one failure, eligible for exactly the cap):
    // dropping it now would turn that continuing streak into a fresh one.
    let _ = gate.release(token, clock.now());
    assert_eq!(gate.state(&"img").map(|s| s.failures), Some(1));
    assert_eq!(gate.begin(&"img", clock.now()).unwrap().attempt(), 2);
}

// r[verify retry.escalation]
#[test]
fn forgetting_an_escalated_key_hands_back_its_state() {
    let clock = ManualClock::new();
    let p = policy();
    let mut gate = KeyedGate::new(p);
    for _ in 0..5 {
        let t = fail_now(&mut gate, "img", clock.now());
        clock.advance(t.next_attempt_at.unwrap() - clock.now());
    }
    // An escalated key is not dropped however long it sits idle: its fault is open.
    clock.advance(p.cap() * 10);
    let _ = gate.begin(&"other", clock.now());
    let state = gate.state(&"img").expect("kept while escalated");
    assert!(state.escalated && !state.in_flight);
    assert_eq!(gate.forget(&"img"), Some(state));
    assert_eq!(gate.state(&"img"), None);
    let t = fail_now(&mut gate, "img", clock.now());
    assert_eq!((t.failures, t.escalation), (1, None));
}

// r[verify retry.budget]
#[test]
fn the_global_budget_composes_with_per_key_pacing() {
    let clock = ManualClock::new();
    let p = Policy::builder()
        .base(S(1))
        .cap(S(60))
        .jitter(Jitter::None)
        .build()
        .unwrap();
    let budget = RetryBudget::new(2, S(20)).unwrap();
    let mut gate = KeyedGate::new(p).with_budget(budget);
    let keys = ["a", "b", "c", "d"];
    for k in keys {
        let t = fail_now(&mut gate, k, clock.now());
        assert_eq!(t.next_attempt_at.unwrap() - clock.now(), S(1));
    }
    clock.advance(S(1));
    // All four keys are due; the budget lets two retries through, then says when.
    assert!(gate.begin(&"a", clock.now()).is_ok());
    assert!(gate.begin(&"b", clock.now()).is_ok());
    let refused = gate.begin(&"c", clock.now()).unwrap_err();
    assert_eq!(refused.reason, WaitReason::Budget);
    assert_eq!(refused.until, clock.now() + S(10));
    assert_eq!(
        gate.check(&"d", clock.now()).unwrap_err().reason,
        WaitReason::Budget
    );
    // Per-key pacing still applies when it is the later of the two.
    assert_eq!(
        gate.check(&"a", clock.now()).unwrap_err().reason,
        WaitReason::InFlight { attempt: 2 }
    );
    // First attempts are not retries.
    assert!(gate.begin(&"fresh", clock.now()).is_ok());
    clock.advance(S(10));
    assert!(gate.begin(&"c", clock.now()).is_ok());
}

// r[verify retry.budget]
#[test]
fn an_attempt_that_starts_a_new_streak_does_not_wait_for_the_budget() {
    let clock = ManualClock::new();
    let p = Policy::builder()
        .base(S(1))
        .cap(S(60))
        .jitter(Jitter::None)
        .build()
        .unwrap();
    let mut gate = KeyedGate::new(p).with_budget(RetryBudget::new(1, S(3600)).unwrap());
    let _ = fail_now(&mut gate, "quiet", clock.now());
    let _ = fail_now(&mut gate, "busy", clock.now());
    clock.advance(S(1));
    // The one token goes to busy's retry; quiet's retry then waits for the next token.
    let token = gate
        .begin(&"busy", clock.now())
        .expect("the budget's token");
    let _ = gate.fail(token, clock.now(), None);
    let refused = gate.begin(&"quiet", clock.now()).unwrap_err();
    assert_eq!(refused.reason, WaitReason::Budget);
    // Quiet for more than the cap since it became eligible, its attempt starts a new streak, which
    // is no retry: it needs no token, although the bucket is still empty.
    clock.advance(p.cap() + S(1));
    let token = gate
        .begin(&"quiet", clock.now())
        .expect("a new streak needs no token");
    assert_eq!(token.attempt(), 1);
}

/// A composite key looked up by a borrowed view of it, without building the key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Forward {
    host: String,
    port: u16,
}

/// Hashes exactly as `Forward` does (its fields in order), as `Equivalent` requires.
#[derive(Hash)]
struct ForwardRef<'a> {
    host: &'a str,
    port: u16,
}

impl Equivalent<Forward> for ForwardRef<'_> {
    fn equivalent(&self, key: &Forward) -> bool {
        self.host == key.host && self.port == key.port
    }
}

// r[verify retry.borrowed-key]
#[test]
fn keys_are_looked_up_by_borrowed_forms() {
    let clock = ManualClock::new();
    let mut gate: KeyedGate<String> = KeyedGate::new(policy());
    let token = gate.begin("registry.local/app:1", clock.now()).unwrap();
    assert_eq!(token.key(), "registry.local/app:1");
    assert!(gate.check("registry.local/app:1", clock.now()).is_err());
    let failed = gate.fail(token, clock.now(), None);
    // The borrowed and the owned form find the same key, and jitter it alike.
    let owned = "registry.local/app:1".to_string();
    assert_eq!(gate.state("registry.local/app:1"), gate.state(&owned));
    let refused = gate.check("registry.local/app:1", clock.now()).unwrap_err();
    assert_eq!(Some(refused.until), failed.next_attempt_at);
    let mut by_owned: KeyedGate<String> = KeyedGate::new(policy());
    let t = by_owned.begin(&owned, clock.now()).unwrap();
    assert_eq!(
        by_owned.fail(t, clock.now(), None).next_attempt_at,
        failed.next_attempt_at
    );
    assert!(gate.forget("registry.local/app:1").is_some());
    assert!(gate.is_empty());

    // A composite key: check, state and forget by a view that holds only borrowed parts.
    let mut gate: KeyedGate<Forward> = KeyedGate::new(policy());
    let key = Forward {
        host: "db.internal".into(),
        port: 5432,
    };
    let view = ForwardRef {
        host: "db.internal",
        port: 5432,
    };
    let token = gate.begin(&key, clock.now()).unwrap();
    let _ = gate.fail(token, clock.now(), None);
    assert_eq!(gate.state(&view).unwrap().failures, 1);
    assert!(gate.check(&view, clock.now()).is_err());
    let other = ForwardRef {
        host: "db.internal",
        port: 5433,
    };
    assert!(gate.check(&other, clock.now()).is_ok());
    assert_eq!(gate.state(&other), None);
    assert!(gate.forget(&view).is_some());
    assert!(gate.is_empty());

    let shared: crate::SharedGate<String> = crate::SharedGate::new(policy());
    let token = shared.begin("registry.local/app:1", clock.now()).unwrap();
    assert!(shared.check("registry.local/app:1", clock.now()).is_err());
    assert!(shared.state("registry.local/app:1").unwrap().in_flight);
    let _ = shared.fail(token, clock.now(), None);
    assert_eq!(shared.forget("registry.local/app:1").unwrap().failures, 1);
}

fn lasting_policy() -> Policy {
    Policy::builder()
        .base(S(10))
        .cap(S(300))
        .escalate_after(3)
        .stale_after(S(60))
        .jitter(Jitter::None)
        .build()
        .unwrap()
}

// r[verify retry.lasting]
#[test]
fn an_end_before_it_lasted_is_a_failure_of_the_same_streak() {
    let clock = ManualClock::new();
    let mut gate = KeyedGate::new(lasting_policy());
    let must_last = S(600); // kubelet: 10 min of running resets CrashLoopBackOff
    let mut failures = Vec::new();
    for _ in 0..4 {
        let token = gate.begin(&"web", clock.now()).unwrap();
        let lasting = gate.succeed_provisionally(token, clock.now(), must_last);
        // While provisional: the streak is kept and the key stays in flight.
        let refused = gate.begin(&"web", clock.now()).unwrap_err();
        assert!(matches!(refused.reason, WaitReason::InFlight { .. }));
        clock.advance(S(30)); // the container exits after 30 s
        let mut lasting = lasting;
        assert_eq!(gate.confirm(&mut lasting, clock.now()), None);
        let t = gate.ended(lasting, clock.now(), None);
        assert!(matches!(t.reason, Reason::Failed { .. }));
        let wait = t.next_attempt_at.unwrap() - clock.now();
        failures.push((t.failures, t.escalation, wait));
        clock.advance(wait);
    }
    // Each early end grows one streak and backs off on the schedule from the end: the gate is
    // never re-armed by the partial success.
    assert_eq!(
        failures,
        [
            (1, None, S(10)),
            (2, None, S(20)),
            (3, Some(Escalation::Escalated), S(40)),
            (4, None, S(80))
        ]
    );
}

// r[verify retry.lasting]
#[test]
fn a_run_that_lasted_resets_the_streak_once() {
    let clock = ManualClock::new();
    let mut gate = KeyedGate::new(lasting_policy());
    for _ in 0..3 {
        let t = fail_now(&mut gate, "web", clock.now());
        clock.advance(t.next_attempt_at.unwrap() - clock.now());
    }
    assert!(gate.state(&"web").unwrap().escalated);
    let token = gate.begin(&"web", clock.now()).unwrap();
    let started = clock.now();
    let mut lasting = gate.succeed_provisionally(token, started, S(10));
    assert_eq!((lasting.started(), lasting.must_last()), (started, S(10)));
    assert_eq!(lasting.key(), &"web");
    clock.advance(S(9));
    assert_eq!(gate.confirm(&mut lasting, clock.now()), None, "not yet");
    assert_eq!(gate.state(&"web").unwrap().failures, 3, "streak kept");
    clock.advance(S(1));
    let confirmed = gate.confirm(&mut lasting, clock.now()).unwrap();
    assert_eq!(confirmed.reason, Reason::Succeeded);
    assert_eq!(confirmed.escalation, Some(Escalation::Recovered));
    assert_eq!(
        gate.confirm(&mut lasting, clock.now()),
        None,
        "reported once"
    );
    assert_eq!(gate.state(&"web"), None, "reset fully");
    clock.advance(S(3600));
    let ended = gate.ended(lasting, clock.now(), None);
    assert_eq!((ended.reason, ended.escalation), (Reason::Succeeded, None));
    assert!(gate.check(&"web", clock.now()).is_ok());

    // Never confirmed, ended after it lasted: the end reports the success (and the recovery).
    for _ in 0..3 {
        let t = fail_now(&mut gate, "web", clock.now());
        clock.advance(t.next_attempt_at.unwrap() - clock.now());
    }
    let token = gate.begin(&"web", clock.now()).unwrap();
    let lasting = gate.succeed_provisionally(token, clock.now(), S(10));
    clock.advance(S(45));
    let ended = gate.ended(lasting, clock.now(), Some(S(100)));
    assert_eq!(ended.reason, Reason::Succeeded);
    assert_eq!(ended.escalation, Some(Escalation::Recovered));
    assert_eq!(gate.state(&"web"), None);
}

// r[verify retry.lasting]
#[test]
fn a_lost_or_superseded_provisional_success_never_wedges_its_key() {
    let clock = ManualClock::new();
    let p = lasting_policy();
    let mut gate = KeyedGate::new(p);
    let token = gate.begin(&"web", clock.now()).unwrap();
    let lost = gate.succeed_provisionally(token, clock.now(), S(30));
    // In flight until it lasted plus the stale timeout; then a stale attempt, counted as failed.
    let refused = gate.check(&"web", clock.now()).unwrap_err();
    assert_eq!(refused.until, clock.now() + S(30) + p.stale_after());
    clock.advance(S(30) + p.stale_after());
    let refused = gate.begin(&"web", clock.now()).unwrap_err();
    assert_eq!(refused.expired.unwrap().reason, Reason::Expired);
    clock.advance(S(10));
    let live = gate.begin(&"web", clock.now()).unwrap();
    // The lost one, handed back after a newer attempt began, changes nothing.
    let late = gate.ended(lost, clock.now(), None);
    assert_eq!(late.reason, Reason::Superseded);
    assert!(gate.state(&"web").unwrap().in_flight);
    // A superseded token's provisional success is inert.
    let _ = gate.fail(live, clock.now(), None);
    let mut inert = gate.succeed_provisionally(
        AttemptToken {
            key: "web",
            generation: 12345,
            attempt: 1,
            began: clock.now(),
            prior: None,
            expired: None,
        },
        clock.now(),
        S(1),
    );
    assert!(inert.is_superseded());
    clock.advance(S(5));
    assert_eq!(gate.confirm(&mut inert, clock.now()), None);
    assert_eq!(
        gate.ended(inert, clock.now(), None).reason,
        Reason::Superseded
    );
    assert_eq!(gate.state(&"web").unwrap().failures, 2);

    // The same through a shared gate.
    let shared = crate::SharedGate::new(p);
    let token = shared.begin(&"web", clock.now()).unwrap();
    let lasting = shared.succeed_provisionally(token, clock.now(), S(30));
    assert!(shared.begin(&"web", clock.now()).is_err());
    clock.advance(S(1));
    let t = shared.ended(lasting, clock.now(), None);
    assert_eq!(t.failures, 1);
    let token = shared.begin(&"web", t.next_attempt_at.unwrap()).unwrap();
    let mut lasting = shared.succeed_provisionally(token, t.next_attempt_at.unwrap(), S(30));
    let at = t.next_attempt_at.unwrap() + S(30);
    assert_eq!(
        shared.confirm(&mut lasting, at).unwrap().reason,
        Reason::Succeeded
    );
    assert_eq!(shared.state(&"web"), None);
}

// r[verify retry.history]
// r[verify retry.in-flight.expiry]
#[test]
fn a_long_hung_attempts_own_outcome_is_judged_before_the_sweep_drops_its_key() {
    let clock = ManualClock::new();
    let p = policy();
    // So late that the settled key holds nothing a fresh key lacks: the sweep would drop it.
    let late = p.stale_after() + p.max_wait() + p.cap() * 2;
    for outcome in ["fail", "succeed", "release", "provisional"] {
        let mut gate = KeyedGate::new(p);
        let mut history = History::for_key("img");
        let t0 = clock.now();
        let token = gate.begin(&"img", t0).unwrap();
        let (attempt, _) = history.begin(&p, t0).unwrap();
        let now = t0 + late;
        let (gate_says, history_says) = match outcome {
            "fail" => (
                gate.fail(token, now, None),
                history.fail(&p, attempt, now, None),
            ),
            "succeed" => (gate.succeed(token, now), history.succeed(&p, attempt)),
            "release" => (gate.release(token, now), history.release(&p, attempt, now)),
            _ => {
                let mut lasting = gate.succeed_provisionally(token, now, S(1));
                assert!(
                    !lasting.is_superseded(),
                    "its own late success still counts"
                );
                let confirmed = gate.confirm(&mut lasting, now + S(1)).unwrap();
                (confirmed, history.succeed(&p, attempt))
            }
        };
        // The outcome of the attempt is what the history (which never forgets) says it is: an
        // expiry for a late failure or release, a success for a late success.
        assert_ne!(gate_says.reason, Reason::Superseded, "{outcome}");
        assert_eq!(gate_says.with_key(()), history_says, "{outcome}");
    }
}

// r[verify retry.history]
// r[verify retry.token.stale]
#[test]
fn a_superseded_outcome_on_an_escalated_key_with_an_empty_streak_names_no_deadline() {
    let clock = ManualClock::new();
    let p = policy();
    let mut gate = KeyedGate::new(p);
    let mut history = History::for_key("img");
    let mut hung = None;
    for _ in 0..p.escalate_after() {
        let token = gate.begin(&"img", clock.now()).unwrap();
        let (attempt, _) = history.begin(&p, clock.now()).unwrap();
        let failed = gate.fail(token, clock.now(), None);
        assert_eq!(
            failed.clone().with_key(()),
            history.fail(&p, attempt, clock.now(), None)
        );
        hung.get_or_insert(attempt);
        clock.advance(failed.next_attempt_at.unwrap() - clock.now());
    }
    // Quiet for more than the cap: the next attempt starts a new streak, and its release leaves
    // that streak empty while the escalation stays open.
    clock.advance(p.cap() + S(1));
    let token = gate.begin(&"img", clock.now()).unwrap();
    let (attempt, _) = history.begin(&p, clock.now()).unwrap();
    let released = gate.release(token, clock.now());
    assert_eq!(
        released.clone().with_key(()),
        history.release(&p, attempt, clock.now())
    );
    assert_eq!((released.failures, released.next_attempt_at), (0, None));
    // An old attempt's late outcome: superseded, and saying what the key is (no deadline).
    let old = hung.unwrap();
    let stale_token = AttemptToken {
        key: "img",
        generation: 12345,
        attempt: old.attempt,
        began: old.began,
        prior: None,
        expired: None,
    };
    let late = gate.fail(stale_token, clock.now(), None);
    assert_eq!(late.reason, Reason::Superseded);
    assert_eq!(late.with_key(()), history.fail(&p, old, clock.now(), None));
}

// r[verify retry.lasting]
// r[verify retry.in-flight.expiry]
#[test]
fn a_stale_attempts_provisional_success_that_ends_early_counts_its_attempt_once() {
    let clock = ManualClock::new();
    let p = lasting_policy();
    let mut gate = KeyedGate::new(p);
    let slow = gate.begin(&"web", clock.now()).unwrap();
    clock.advance(p.stale_after());
    // The hung start counts as failure 1 at its stale moment...
    let refused = gate.begin(&"web", clock.now()).unwrap_err();
    assert_eq!(refused.expired.unwrap().failures, 1);
    // ...then it comes up after all (no newer attempt began), and exits before it lasted: that is
    // still one failed attempt, not two.
    let lasting = gate.succeed_provisionally(slow, clock.now(), S(30));
    assert!(!lasting.is_superseded());
    clock.advance(S(5));
    let ended = gate.ended(lasting, clock.now(), None);
    assert!(matches!(ended.reason, Reason::Failed { .. }));
    assert_eq!(ended.failures, 1, "one attempt, one failure");
    assert_eq!(ended.next_attempt_at, Some(clock.now() + p.base()));
    assert_eq!(gate.state(&"web").unwrap().failures, 1);
}

// r[verify retry.history]
// r[verify retry.attempts]
#[test]
fn a_grant_long_after_a_hung_attempt_reports_its_expiry_as_history_does() {
    let clock = ManualClock::new();
    let p = policy();
    let mut gate = KeyedGate::new(p);
    let mut history = History::for_key("img");
    let t0 = clock.now();
    let _hung = gate.begin(&"img", t0).unwrap();
    let _ = history.begin(&p, t0).unwrap();
    let now = t0 + p.stale_after() + p.max_wait() + p.cap() * 2;
    let mut token = gate.begin(&"img", now).unwrap();
    let (attempt, expired) = history.begin(&p, now).unwrap();
    assert_eq!(token.attempt(), attempt.attempt);
    let expired_by_gate = token.expired.take();
    assert!(expired.is_some(), "the hung attempt counts as failed, once");
    assert_eq!(expired_by_gate, expired);
    let _ = gate.release(token, now);
}
