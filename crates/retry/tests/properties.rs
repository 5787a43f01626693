//! The gate's invariants as properties over arbitrary sequences of outcomes and clock advances.

// Test helpers outside #[test] fns: a broken setup should fail loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use holdfast_retry::{
    AttemptToken, Decision, Escalation, History, Jitter, KeyedGate, NotYet, Policy, Reason,
    WaitReason, decide, stable_hash,
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

/// The pure function's view of one key: its history and the attempt in flight, if any.
#[derive(Debug, Clone)]
struct Model {
    history: History<Instant>,
    in_flight: Option<Instant>,
    /// The start of an attempt counted as failed when it went stale, while no newer one began:
    /// its late success still resets the key.
    expired: Option<Instant>,
}

impl Model {
    fn new(key: &str) -> Self {
        Self {
            history: History::new(stable_hash(&key)),
            in_flight: None,
            expired: None,
        }
    }

    /// Count a stale attempt as failed at the moment it became stale (as the gate does).
    fn settle(&mut self, p: &Policy, now: Instant) {
        if let Some(began) = self.in_flight {
            let stale_at = began + p.stale_after();
            if now >= stale_at {
                self.history.record_failure(p, stale_at, None);
                self.in_flight = None;
                self.expired = Some(began);
            }
        }
    }

    /// The decision the pure function makes, with single flight on top.
    fn decide(&self, p: &Policy, now: Instant) -> Result<(), Instant> {
        if let Some(began) = self.in_flight {
            let stale_at = began + p.stale_after();
            if now < stale_at {
                return Err(stale_at);
            }
            let mut settled = self.clone();
            settled.settle(p, now);
            return settled.decide(p, now);
        }
        match decide(p, &self.history, now) {
            Decision::Eligible => Ok(()),
            Decision::WaitUntil(t) => Err(t),
        }
    }
}

struct Run {
    policy: Policy,
    gate: KeyedGate<&'static str>,
    tokens: HashMap<usize, AttemptToken<&'static str>>,
    models: Vec<Model>,
    now: Instant,
}

impl Run {
    fn new(policy: Policy) -> Self {
        Self {
            policy,
            gate: KeyedGate::new(policy),
            tokens: HashMap::new(),
            models: KEYS.iter().map(|k| Model::new(k)).collect(),
            now: Instant::now(),
        }
    }

    fn until(result: &Result<(), NotYet>) -> Result<(), Instant> {
        result.as_ref().map(|_| ()).map_err(|n| n.until)
    }

    /// Apply one op to both the gate and the model, checking they agree (property e).
    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let p = self.policy;
        match *op {
            Op::Advance(ms) => self.now += Duration::from_millis(ms),
            Op::Check(k) => {
                let gate = Self::until(&self.gate.check(&KEYS[k], self.now));
                prop_assert_eq!(
                    gate,
                    self.models[k].decide(&p, self.now),
                    "check {}",
                    KEYS[k]
                );
            }
            Op::Begin(k) => {
                let expected = self.models[k].decide(&p, self.now);
                let got = self.gate.begin(&KEYS[k], self.now);
                prop_assert_eq!(
                    got.as_ref().map(|_| ()).map_err(|n| n.until),
                    expected,
                    "begin {}",
                    KEYS[k]
                );
                let model = &mut self.models[k];
                model.settle(&p, self.now);
                if let Ok(token) = got {
                    model.history.begin_attempt(&p, self.now);
                    model.in_flight = Some(self.now);
                    model.expired = None;
                    // A superseded token stays with us: finishing it later must change nothing.
                    if let Some(old) = self.tokens.insert(k, token) {
                        let before = self.gate.state(&KEYS[k]);
                        let late = self.gate.fail(old, self.now, Some(Duration::from_secs(1)));
                        prop_assert_eq!(late.reason, holdfast_retry::Reason::Superseded);
                        prop_assert_eq!(self.gate.state(&KEYS[k]), before);
                    }
                } else if let Err(refused) = got {
                    if let WaitReason::Backoff { failures, .. } = refused.reason {
                        prop_assert_eq!(failures, model.history.failures);
                    }
                }
            }
            Op::Fail(k, hint) => {
                if let Some(token) = self.tokens.remove(&k) {
                    let hint = hint.map(Duration::from_millis);
                    let model = &mut self.models[k];
                    let ours = model.in_flight == Some(token.began());
                    if ours {
                        // A stale attempt already failed at its stale moment.
                        model.settle(&p, self.now);
                    }
                    let live = ours && model.in_flight.is_some();
                    let t = self.gate.fail(token, self.now, hint);
                    if live {
                        let model = &mut self.models[k];
                        model.history.record_failure(&p, self.now, hint);
                        model.in_flight = None;
                        prop_assert_eq!(t.failures, model.history.failures);
                        prop_assert_eq!(t.next_attempt_at, model.history.next_attempt_at(&p));
                    }
                }
            }
            Op::Release(k) => {
                if let Some(token) = self.tokens.remove(&k) {
                    let model = &mut self.models[k];
                    let ours = model.in_flight == Some(token.began());
                    if ours {
                        // A stale attempt already failed at its stale moment.
                        model.settle(&p, self.now);
                    }
                    let live = ours && model.in_flight.is_some();
                    let before = self.gate.state(&KEYS[k]);
                    let t = self.gate.release(token, self.now);
                    let model = &mut self.models[k];
                    if live {
                        // The pure history records nothing for a release: it stays as `begin`
                        // left it, and only the attempt in flight ends.
                        model.in_flight = None;
                        prop_assert_eq!(t.reason, holdfast_retry::Reason::Released);
                        prop_assert_eq!(t.escalation, None);
                        prop_assert_eq!(t.failures, model.history.failures);
                        prop_assert_eq!(t.next_attempt_at, model.history.next_attempt_at(&p));
                    } else if ours {
                        // Counted as failed at its stale moment; if that was long enough ago the
                        // call's sweep already dropped the key, which then holds nothing to report.
                        if t.reason == holdfast_retry::Reason::Expired {
                            prop_assert_eq!(t.failures, model.history.failures);
                        } else {
                            prop_assert_eq!(t.reason, holdfast_retry::Reason::Superseded);
                            prop_assert_eq!(self.gate.state(&KEYS[k]), None);
                        }
                    } else {
                        prop_assert_eq!(t.reason, holdfast_retry::Reason::Superseded);
                        // Nothing changes, except that the call's sweep may drop the key if it
                        // already held nothing a fresh key lacks.
                        let after = self.gate.state(&KEYS[k]);
                        let droppable = before.is_some_and(|s| {
                            !s.in_flight
                                && !s.escalated
                                && self.now.saturating_duration_since(s.next_attempt_at) > p.cap()
                        });
                        prop_assert!(
                            after == before || (after.is_none() && droppable),
                            "{:?} became {:?}",
                            before,
                            after
                        );
                    }
                }
            }
            Op::Succeed(k) => {
                if let Some(token) = self.tokens.remove(&k) {
                    let model = &self.models[k];
                    let live = model.in_flight == Some(token.began())
                        || model.expired == Some(token.began());
                    let before = self.gate.state(&KEYS[k]);
                    let t = self.gate.succeed(token, self.now);
                    if !live {
                        prop_assert_eq!(t.reason, holdfast_retry::Reason::Superseded);
                        prop_assert_eq!(self.gate.state(&KEYS[k]), before);
                    } else {
                        let model = &mut self.models[k];
                        let done = model.history.record_success();
                        model.in_flight = None;
                        model.expired = None;
                        prop_assert_eq!(
                            t.escalation.is_some(),
                            done.recovered,
                            "recovery reported exactly when the pure history says so"
                        );
                    }
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
        for (_, token) in std::mem::take(&mut run.tokens) {
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

    // r[verify retry.jitter]
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
