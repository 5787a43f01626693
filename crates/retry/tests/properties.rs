//! The gate's invariants as properties over arbitrary sequences of outcomes and clock advances.

// Test helpers outside #[test] fns: a broken setup should fail loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use holdfast_retry::{
    AttemptToken, Escalation, History, HistoryAttempt, Jitter, KeyedGate, NotYet, Policy, Reason,
    Transition, stable_hash,
};
use proptest::prelude::*;

const KEYS: [&str; 3] = ["a", "b", "c"];

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Begin(usize),
    Fail(usize, Option<u64>),
    Succeed(usize),
    /// End the attempt without an outcome.
    Release(usize),
    Check(usize),
}

fn jitter() -> impl Strategy<Value = Jitter> {
    prop_oneof![
        Just(Jitter::None),
        Just(Jitter::Additive),
        Just(Jitter::Full),
        Just(Jitter::Equal),
        Just(Jitter::Decorrelated),
    ]
}

fn policy() -> impl Strategy<Value = Policy> {
    (
        1u64..500,
        1u32..64,
        1u32..8,
        jitter(),
        1u64..10_000,
        1u64..5_000,
        any::<u64>(),
    )
        .prop_map(|(base, mult, escalate, jitter, hint_cap, stale, seed)| {
            let ms = Duration::from_millis;
            Policy::builder()
                .base(ms(base))
                .cap(ms(base) * mult)
                .escalate_after(escalate)
                .jitter(jitter)
                .hint_cap(ms(hint_cap))
                .stale_after(ms(stale))
                .seed(seed)
                .build()
                .expect("valid by construction")
        })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u64..20_000).prop_map(Op::Advance),
        3 => (0..KEYS.len()).prop_map(Op::Begin),
        3 => (0..KEYS.len(), proptest::option::of(0u64..20_000)).prop_map(|(k, h)| Op::Fail(k, h)),
        1 => (0..KEYS.len()).prop_map(Op::Succeed),
        2 => (0..KEYS.len()).prop_map(Op::Release),
        2 => (0..KEYS.len()).prop_map(Op::Check),
    ]
}

/// What the gate and a `History` said about one outcome agree: equal transitions, or the gate
/// had already dropped a key that held no information (its memory rule), so it answers
/// `Superseded` where the history, which never forgets, still names the stale attempt.
fn agree(
    gate: &Transition<&'static str>,
    history: &Transition<(), Instant>,
    dropped: bool,
) -> Result<(), TestCaseError> {
    let gate = gate.clone().with_key(());
    if gate != *history {
        prop_assert!(
            dropped && gate.reason == Reason::Superseded && history.escalation.is_none(),
            "gate {:?} but history {:?}",
            gate,
            history
        );
    }
    Ok(())
}

struct Run {
    policy: Policy,
    gate: KeyedGate<&'static str>,
    tokens: HashMap<usize, (AttemptToken<&'static str>, HistoryAttempt<Instant>)>,
    histories: Vec<History<Instant>>,
    now: Instant,
}

impl Run {
    fn new(policy: Policy) -> Self {
        Self {
            policy,
            gate: KeyedGate::new(policy),
            tokens: HashMap::new(),
            histories: KEYS.iter().map(|k| History::new(stable_hash(k))).collect(),
            now: Instant::now(),
        }
    }

    fn until(result: &Result<(), NotYet>) -> Result<(), Instant> {
        result.as_ref().map(|_| ()).map_err(|n| n.until)
    }

    /// Apply one op to both the gate and the key's `History`, checking they agree: the same
    /// refusals, grants, expiries and transitions (property e).
    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let p = self.policy;
        match *op {
            Op::Advance(ms) => self.now += Duration::from_millis(ms),
            Op::Check(k) => {
                let gate = Self::until(&self.gate.check(&KEYS[k], self.now));
                let history = self.histories[k]
                    .clone()
                    .begin(&p, self.now)
                    .map(|_| ())
                    .map_err(|n| n.until);
                prop_assert_eq!(gate, history, "check {}", KEYS[k]);
            }
            Op::Begin(k) => {
                // Only a sweep of an earlier call can have dropped the key: a call decides on its
                // own key before it sweeps.
                let dropped_before = self.gate.state(&KEYS[k]).is_none();
                let got = self.gate.begin(&KEYS[k], self.now);
                let history = &mut self.histories[k];
                // The gate's sweep (inside `begin`) may drop a stale attempt's key that holds no
                // information once settled, and with it an expiry that escalates nothing.
                let droppable = dropped_before && {
                    let mut h = *history;
                    let expiry = h.settle(&p, self.now);
                    expiry.is_some_and(|e| e.escalation.is_none())
                        && !h.escalated
                        && h.next_attempt_at(&p)
                            .is_none_or(|at| self.now.saturating_duration_since(at) > p.cap())
                };
                let expiry_agrees =
                    |gate: &Option<Transition<(), Instant>>,
                     history: &Option<Transition<(), Instant>>| {
                        gate == history || (gate.is_none() && droppable)
                    };
                let expected = history.begin(&p, self.now);
                match (got, expected) {
                    (Ok(mut token), Ok((attempt, expired))) => {
                        prop_assert_eq!(token.attempt(), attempt.attempt);
                        let gate_expired = token.expired.take();
                        prop_assert!(
                            expiry_agrees(&gate_expired, &expired),
                            "expiry of {}: {:?} {:?}",
                            KEYS[k],
                            gate_expired,
                            expired
                        );
                        // A superseded token stays with us: finishing it later must change nothing.
                        if let Some((old, old_attempt)) = self.tokens.insert(k, (token, attempt)) {
                            let before = self.gate.state(&KEYS[k]);
                            let late = self.gate.fail(old, self.now, Some(Duration::from_secs(1)));
                            prop_assert_eq!(late.reason, Reason::Superseded);
                            prop_assert_eq!(self.gate.state(&KEYS[k]), before);
                            let snapshot = *history;
                            let late_history = history.fail(
                                &p,
                                old_attempt,
                                self.now,
                                Some(Duration::from_secs(1)),
                            );
                            prop_assert_eq!(late_history.reason, Reason::Superseded);
                            prop_assert_eq!(*history, snapshot);
                            // The same answer in full: streak and next deadline too.
                            agree(&late, &late_history, false)?;
                        }
                    }
                    (Err(refused), Err(expected)) => {
                        prop_assert_eq!(refused.until, expected.until, "begin {}", KEYS[k]);
                        prop_assert_eq!(refused.reason, expected.reason, "begin {}", KEYS[k]);
                        let (gate_expired, expired) =
                            (refused.expired.map(|e| *e), expected.expired.map(|e| *e));
                        prop_assert!(
                            expiry_agrees(&gate_expired, &expired),
                            "expiry of {}: {:?} {:?}",
                            KEYS[k],
                            gate_expired,
                            expired
                        );
                    }
                    (got, expected) => prop_assert!(
                        false,
                        "begin {}: gate {:?} but history {:?}",
                        KEYS[k],
                        got.map(|_| ()),
                        expected.map(|_| ())
                    ),
                }
            }
            Op::Fail(k, hint) => {
                if let Some((token, attempt)) = self.tokens.remove(&k) {
                    let hint = hint.map(Duration::from_millis);
                    // Dropped before this call (by a sweep that another call ran): the attempt's
                    // own outcome is judged before any sweep it runs itself.
                    let dropped = self.gate.state(&KEYS[k]).is_none();
                    let t = self.gate.fail(token, self.now, hint);
                    let h = self.histories[k].fail(&p, attempt, self.now, hint);
                    agree(&t, &h, dropped)?;
                }
            }
            Op::Release(k) => {
                if let Some((token, attempt)) = self.tokens.remove(&k) {
                    let dropped = self.gate.state(&KEYS[k]).is_none();
                    let t = self.gate.release(token, self.now);
                    let h = self.histories[k].release(&p, attempt, self.now);
                    agree(&t, &h, dropped)?;
                    if t.reason == Reason::Released {
                        prop_assert_eq!(t.escalation, None);
                    }
                }
            }
            Op::Succeed(k) => {
                if let Some((token, attempt)) = self.tokens.remove(&k) {
                    let dropped = self.gate.state(&KEYS[k]).is_none();
                    let t = self.gate.succeed(token, self.now);
                    let h = self.histories[k].succeed(&p, attempt);
                    agree(&t, &h, dropped)?;
                    prop_assert_eq!(
                        t.escalation,
                        h.escalation,
                        "recovery reported exactly when the history says so"
                    );
                }
            }
        }
        Ok(())
    }

    /// Property (d): after a call that may sweep, no idle, non-escalated key has been eligible for
    /// longer than the cap plus the sweep interval (a quarter cap).
    fn check_memory(&self) -> Result<(), TestCaseError> {
        let p = self.policy;
        for key in KEYS {
            if let Some(state) = self.gate.state(&key) {
                if !state.in_flight && !state.escalated {
                    let idle = self.now.saturating_duration_since(state.next_attempt_at);
                    prop_assert!(
                        idle <= p.cap() + p.cap() / 4,
                        "{key} held idle for {idle:?} (cap {:?})",
                        p.cap()
                    );
                }
            }
        }
        Ok(())
    }
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(op(), 1..120)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    // r[verify retry.pure-decision]
    // r[verify retry.token.stale]
    // r[verify retry.token.release]
    // r[verify retry.history]
    #[test]
    fn gate_and_pure_function_decide_identically(policy in policy(), ops in ops()) {
        let mut run = Run::new(policy);
        for op in &ops {
            run.apply(op)?;
        }
    }

    // r[verify retry.eligible]
    #[test]
    fn a_key_is_always_eligible_after_the_maximum_wait(policy in policy(), ops in ops()) {
        let mut run = Run::new(policy);
        for op in &ops {
            run.apply(op)?;
        }
        // Finish what is in flight with failures carrying the largest hints, then wait max_wait.
        for (_, (token, _)) in std::mem::take(&mut run.tokens) {
            let _ = run.gate.fail(token, run.now, Some(Duration::MAX));
        }
        run.now += policy.max_wait();
        for key in KEYS {
            prop_assert!(run.gate.check(&key, run.now).is_ok(), "{} not eligible after max_wait", key);
        }
        // Lost tokens: the attempt goes stale, then the same bound applies.
        let mut lost = Run::new(policy);
        for op in &ops {
            lost.apply(op)?;
        }
        lost.now += policy.stale_after() + policy.max_wait();
        for key in KEYS {
            prop_assert!(lost.gate.begin(&key, lost.now).is_ok(), "{} not eligible after stale + max_wait", key);
        }
    }

    // r[verify retry.schedule]
    #[test]
    fn nominal_delay_is_monotone_and_capped(policy in policy(), n in any::<u32>()) {
        let d = policy.nominal_delay(n);
        prop_assert!(d <= policy.cap());
        prop_assert!(d <= policy.nominal_delay(n.saturating_add(1)));
        if n > 0 {
            prop_assert!(d >= policy.base());
        }
    }

    // r[verify retry.jitter+2]
    #[test]
    fn additive_jitter_never_waits_less_than_nominal(
        policy in policy(),
        n in any::<u32>(),
        key in any::<u64>(),
        hint in proptest::option::of(0u64..100_000),
    ) {
        let p = Policy::builder()
            .base(policy.base())
            .cap(policy.cap())
            .hint_cap(policy.hint_cap())
            .seed(policy.seed())
            .jitter(Jitter::Additive)
            .build()
            .unwrap();
        let nominal = p.nominal_delay(n);
        prop_assert!(p.jittered_delay(n, key) >= nominal);
        prop_assert!(p.wait_after(n, key, hint.map(Duration::from_millis)) >= nominal);
        prop_assert!(p.wait_after(n, key, hint.map(Duration::from_millis)) <= p.max_wait());
    }

    // r[verify retry.memory+2]
    #[test]
    fn memory_never_holds_an_idle_key_past_the_cap_once_touched_or_swept(
        policy in policy(),
        ops in ops(),
    ) {
        let mut run = Run::new(policy);
        for op in &ops {
            // Only begin and finished attempts reach the gate's mutating calls (and so its sweep).
            let finishes = match op {
                Op::Fail(k, _) | Op::Succeed(k) | Op::Release(k) => run.tokens.contains_key(k),
                Op::Begin(_) => true,
                Op::Advance(_) | Op::Check(_) => false,
            };
            run.apply(op)?;
            if finishes {
                run.check_memory()?;
            }
        }
    }
}

/// One provisional success: how long what it started ran, how long it had to last, and whether
/// (and how far into the run) the caller asked to confirm it.
#[derive(Debug, Clone)]
struct Run2 {
    wait_extra_ms: u64,
    ran_ms: u64,
    must_last_ms: u64,
    confirm_at_ms: Option<u64>,
}

fn lasting_runs() -> impl Strategy<Value = Vec<Run2>> {
    proptest::collection::vec(
        (
            0u64..2_000,
            0u64..20_000,
            0u64..10_000,
            proptest::option::of(0u64..20_000),
        )
            .prop_map(
                |(wait_extra_ms, ran_ms, must_last_ms, confirm_at_ms)| Run2 {
                    wait_extra_ms,
                    ran_ms,
                    must_last_ms,
                    confirm_at_ms: confirm_at_ms.map(|c| c.min(ran_ms)),
                },
            ),
        1..40,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    // r[verify retry.lasting]
    #[test]
    fn an_early_end_never_resets_the_streak_and_a_lasting_run_always_does(
        policy in policy(),
        runs in lasting_runs(),
    ) {
        let mut gate: KeyedGate<&str> = KeyedGate::new(policy);
        let mut now = Instant::now();
        let ms = Duration::from_millis;
        for run in runs {
            // Attempt as soon as eligible (plus a little), as a reconciler would.
            if let Err(refused) = gate.check(&"k", now) {
                now = refused.until;
            }
            now += ms(run.wait_extra_ms);
            let token = gate.begin(&"k", now).expect("eligible");
            let streak_before = token.attempt() - 1;
            let escalated_before = gate.state(&"k").is_some_and(|s| s.escalated);
            let started = now;
            let must_last = ms(run.must_last_ms);
            let mut lasting = gate.succeed_provisionally(token, started, must_last);
            let mut recovered = 0;
            if let Some(at) = run.confirm_at_ms {
                let confirmed = gate.confirm(&mut lasting, started + ms(at));
                prop_assert_eq!(confirmed.is_some(), ms(at) >= must_last);
                recovered += usize::from(confirmed.is_some_and(|t| t.escalation == Some(Escalation::Recovered)));
            }
            now = started + ms(run.ran_ms);
            let ended = gate.ended(lasting, now, None);
            recovered += usize::from(ended.escalation == Some(Escalation::Recovered));
            if ms(run.ran_ms) < must_last {
                // Ended before it lasted: one more failure of the same streak, never a reset.
                prop_assert!(matches!(ended.reason, Reason::Failed { .. }), "{:?}", ended);
                prop_assert_eq!(ended.failures, streak_before + 1);
                let state = gate.state(&"k").expect("still failing");
                prop_assert_eq!(state.failures, streak_before + 1);
                prop_assert!(!state.in_flight, "free for the next attempt");
                prop_assert_eq!(recovered, 0);
            } else {
                // It lasted: the streak is reset, and a recovery is reported once if escalated.
                prop_assert_eq!(gate.state(&"k"), None);
                prop_assert_eq!(recovered, usize::from(escalated_before));
            }
        }
    }
}

/// One step of a key's persisted history, as a process (that may crash) drives it.
#[cfg(feature = "serde")]
#[derive(Debug, Clone)]
enum Step {
    Advance(u64),
    Begin,
    Fail(Option<u64>),
    Succeed,
    Release,
    /// The process crashes: the attempt in flight never reports (its row stays open).
    Crash,
    ForceRetry,
}

#[cfg(feature = "serde")]
fn steps() -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(
        prop_oneof![
            3 => (0u64..20_000).prop_map(Step::Advance),
            3 => Just(Step::Begin),
            3 => proptest::option::of(0u64..20_000).prop_map(Step::Fail),
            1 => Just(Step::Succeed),
            1 => Just(Step::Release),
            1 => Just(Step::Crash),
            1 => Just(Step::ForceRetry),
        ],
        1..120,
    )
}

#[cfg(feature = "serde")]
proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    // r[verify retry.history]
    #[test]
    fn a_history_stored_and_restored_at_any_point_decides_as_one_never_stored(
        policy in policy(),
        steps in steps(),
    ) {
        use std::time::SystemTime;
        let p = policy;
        let mut now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut kept: History<SystemTime> = History::for_key("example.org");
        let mut stored = kept;
        let mut attempt: Option<HistoryAttempt<SystemTime>> = None;
        let round_trip = |h: &History<SystemTime>| -> History<SystemTime> {
            serde_json::from_str(&serde_json::to_string(h).expect("serializes"))
                .expect("deserializes")
        };
        for step in &steps {
            // The stored copy goes through its serialized form before every step: every point
            // of the run is a restart.
            stored = round_trip(&stored);
            let attempt_stored = attempt.map(|a| {
                serde_json::from_str::<HistoryAttempt<SystemTime>>(
                    &serde_json::to_string(&a).expect("serializes"),
                )
                .expect("deserializes")
            });
            prop_assert_eq!(attempt_stored, attempt);
            match (step, attempt) {
                (Step::Advance(ms), _) => now += Duration::from_millis(*ms),
                (Step::Begin, _) => {
                    let a = kept.begin(&p, now);
                    let b = stored.begin(&p, now);
                    prop_assert_eq!(&a, &b);
                    if let Ok((granted, _)) = a {
                        attempt = Some(granted);
                    }
                }
                (Step::Fail(hint), Some(at)) => {
                    let hint = hint.map(Duration::from_millis);
                    prop_assert_eq!(kept.fail(&p, at, now, hint), stored.fail(&p, at, now, hint));
                    attempt = None;
                }
                (Step::Succeed, Some(at)) => {
                    prop_assert_eq!(kept.succeed(&p, at), stored.succeed(&p, at));
                    attempt = None;
                }
                (Step::Release, Some(at)) => {
                    prop_assert_eq!(kept.release(&p, at, now), stored.release(&p, at, now));
                    attempt = None;
                }
                (Step::Crash, _) => attempt = None,
                (Step::ForceRetry, _) => {
                    prop_assert_eq!(kept.force_retry(), stored.force_retry());
                }
                (Step::Fail(_) | Step::Succeed | Step::Release, None) => {}
            }
            prop_assert_eq!(kept, stored);
            prop_assert_eq!(
                holdfast_retry::decide(&p, &kept, now),
                holdfast_retry::decide(&p, &stored, now)
            );
        }
    }
}
