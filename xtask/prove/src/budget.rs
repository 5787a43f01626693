//! A bound on one `prove` run (CI's): at most so many mutants, at most so many seconds. A rule is
//! run whole or not at all, so every recorded proof is complete; a rule still running when the
//! seconds are spent is cut off and recorded as unrun; the rules left unrun are named.

use std::time::{Duration, Instant};

use spec_engine::model::proof::Proof;

/// The caps of a run and what it has spent.
#[derive(Debug)]
pub struct Budget {
    max_mutants: Option<usize>,
    seconds: Option<Duration>,
    started: Instant,
    mutants: usize,
    spent: Duration,
    unrun: Vec<String>,
}

impl Budget {
    /// A budget of `max_mutants` mutants and `seconds` of wall clock (each optional).
    pub fn new(max_mutants: Option<usize>, seconds: Option<u64>) -> Self {
        Budget {
            max_mutants,
            seconds: seconds.map(Duration::from_secs),
            started: Instant::now(),
            mutants: 0,
            spent: Duration::ZERO,
            unrun: Vec::new(),
        }
    }

    /// Whether any cap is set (only then are a rule's mutants counted before it runs).
    pub fn bounded(&self) -> bool {
        self.max_mutants.is_some() || self.seconds.is_some()
    }

    /// Whether a rule of `count` mutants may start now; the reason when not.
    pub fn admit_rule(&self, provable: bool, count: usize) -> Result<(), String> {
        self.admit_rule_at(provable, count, self.started.elapsed())
    }

    /// `admit_rule` with the run's elapsed time given: a rule that runs no mutant (not provable)
    /// and any rule of an unbounded run start; otherwise none once a cap is reached or the time
    /// spent, whatever its size, nor one that `admit_at` refuses.
    // i[impl prove.budget+3]
    pub fn admit_rule_at(
        &self,
        provable: bool,
        count: usize,
        elapsed: Duration,
    ) -> Result<(), String> {
        if !provable || !self.bounded() {
            return Ok(());
        }
        match self.spent_at(elapsed) {
            Some(why) => Err(why),
            None => self.admit_at(count, elapsed),
        }
    }

    /// Why no further rule may start, whatever its size (a cap reached, the time spent), with
    /// the run's elapsed time given.
    // i[impl prove.budget+3]
    pub fn spent_at(&self, elapsed: Duration) -> Option<String> {
        if let Some(max) = self.max_mutants
            && self.mutants >= max
        {
            return Some(format!("the cap of {max} mutants is reached"));
        }
        match self.seconds {
            Some(seconds) if elapsed >= seconds => Some(format!(
                "the {}s budget is spent ({}s elapsed)",
                seconds.as_secs(),
                elapsed.as_secs()
            )),
            _ => None,
        }
    }

    /// `admit` with the run's elapsed time given (the clock is injected for tests).
    // i[impl prove.budget+3]
    pub fn admit_at(&self, count: usize, elapsed: Duration) -> Result<(), String> {
        if let Some(max) = self.max_mutants
            && self.mutants + count > max
        {
            return Err(format!(
                "its {count} mutants would exceed the cap of {max} ({} already tried)",
                self.mutants
            ));
        }
        if let Some(seconds) = self.seconds {
            if elapsed >= seconds {
                return Err(format!(
                    "the {}s budget is spent ({}s elapsed)",
                    seconds.as_secs(),
                    elapsed.as_secs()
                ));
            }
            // The run's pace so far predicts this rule's time; the first rule has none to go by.
            if self.mutants > 0 {
                let per_mutant = self.spent / u32::try_from(self.mutants).unwrap_or(u32::MAX);
                let estimate = per_mutant * u32::try_from(count).unwrap_or(u32::MAX);
                if elapsed + estimate > seconds {
                    return Err(format!(
                        "its {count} mutants would take about {}s, past the {}s budget ({}s elapsed)",
                        estimate.as_secs(),
                        seconds.as_secs(),
                        elapsed.as_secs()
                    ));
                }
            }
        }
        Ok(())
    }

    /// When a rule starting at `now` is cut off, if the run has a time cap: once the run's
    /// seconds are spent.
    // i[impl prove.budget+3]
    pub fn deadline(&self, now: Instant) -> Option<Instant> {
        self.remaining_at(now.saturating_duration_since(self.started))
            .map(|left| now + left)
    }

    /// `remaining` with the run's elapsed time given. The first rule has no pace to be judged by
    /// before it starts, so this is what holds the time cap for it (and for any rule whose
    /// mutants are slower than the run's pace so far).
    // i[impl prove.budget+3]
    pub fn remaining_at(&self, elapsed: Duration) -> Option<Duration> {
        self.seconds.map(|seconds| seconds.saturating_sub(elapsed))
    }

    /// Records a rule that ran `count` mutants in `took`.
    pub fn ran(&mut self, count: usize, took: Duration) {
        self.mutants += count;
        self.spent += took;
    }

    /// Records a rule the budget left unrun.
    pub fn left_unrun(&mut self, rule: &str) {
        self.unrun.push(rule.to_owned());
    }

    /// The warning naming the rules left unrun, if any.
    pub fn warning(&self) -> Option<String> {
        if self.unrun.is_empty() {
            return None;
        }
        Some(format!(
            "prove: WARNING: {} rule{} NOT RUN within the budget, so not proven by this run: {} \
             (run `cargo xtask prove RULE` for each)",
            self.unrun.len(),
            if self.unrun.len() == 1 { "" } else { "s" },
            self.unrun.join(", ")
        ))
    }
}

/// The order a bounded run takes its rules in, given each one's mutants (0 for a rule that runs
/// none): fewest first, so the caps judge as many rules as they can; equal counts keep the order
/// chosen.
// i[impl prove.budget+3]
pub fn order(counts: &[usize]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..counts.len()).collect();
    order.sort_by_key(|&i| counts[i]);
    order
}

/// What a cut-off rule's NOT RUN line says: how far it got, and that nothing of it is recorded.
// i[impl prove.budget+3]
pub fn cut_off_reason(tried: &Option<Proof>, count: Option<usize>, took: Duration) -> String {
    let of = count.map_or(String::new(), |n| format!(" of {n}"));
    let far = match tried {
        Some(p) => format!(
            "{}{of} mutants tried ({} caught, {} missed{})",
            p.tried(),
            p.caught + p.timeout,
            p.missed,
            if p.survivors.is_empty() {
                String::new()
            } else {
                format!(": {}", p.survivors.join("; "))
            }
        ),
        None => format!("no mutant{of} judged"),
    };
    format!(
        "cut off when the run's time budget was spent, after {}s: {far}; no proof recorded \
         (run `cargo xtask prove RULE` without a budget)",
        took.as_secs()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify prove.budget+3]
    #[test]
    fn rules_past_either_cap_are_left_unrun_and_named() {
        let secs = Duration::from_secs;
        let mut budget = Budget::new(Some(10), Some(100));
        assert!(budget.bounded());
        assert!(!Budget::new(None, None).bounded());
        assert_eq!(budget.admit_at(10, secs(0)), Ok(()), "exactly the cap");
        assert!(budget.admit_at(11, secs(0)).is_err(), "one past the cap");
        budget.ran(4, secs(40));
        // 10 s per mutant so far: 6 more would end at 50 + 60 > 100.
        assert!(budget.admit_at(6, secs(50)).is_err());
        assert_eq!(budget.admit_at(5, secs(50)), Ok(()), "50 + 50 fits");
        assert!(budget.admit_at(7, secs(0)).is_err(), "4 + 7 > 10");
        assert!(budget.admit_at(0, secs(100)).is_err(), "the time is spent");
        assert_eq!(budget.spent_at(secs(99)), None);
        assert!(
            budget.spent_at(secs(100)).is_some(),
            "no rule starts, none is listed"
        );
        budget.ran(6, secs(10));
        assert!(
            budget.spent_at(secs(60)).is_some(),
            "the cap of 10 is reached"
        );
        assert_eq!(budget.warning(), None);
        budget.left_unrun("r[a.b]");
        budget.left_unrun("r[c.d]");
        let warning = budget.warning().expect("a warning");
        assert!(warning.contains("2 rules NOT RUN"), "{warning}");
        assert!(warning.contains("r[a.b], r[c.d]"), "{warning}");
    }

    // i[verify prove.budget+3]
    #[test]
    fn a_rule_may_run_only_for_what_is_left_of_the_seconds() {
        let secs = Duration::from_secs;
        let budget = Budget::new(Some(40), Some(240));
        assert_eq!(budget.remaining_at(secs(0)), Some(secs(240)));
        assert_eq!(budget.remaining_at(secs(200)), Some(secs(40)));
        assert_eq!(budget.remaining_at(secs(300)), Some(Duration::ZERO));
        assert_eq!(
            Budget::new(Some(40), None).remaining_at(secs(1000)),
            None,
            "no time cap, no cut-off"
        );
        let tried = Proof {
            caught: 3,
            missed: 1,
            unviable: 2,
            survivors: vec!["a.rs:1:2: replace > with >= in f".to_owned()],
            ..Proof::default()
        };
        let why = cut_off_reason(&Some(tried), Some(15), secs(241));
        assert!(why.starts_with("cut off"), "{why}");
        assert!(why.contains("after 241s"), "{why}");
        assert!(
            why.contains("6 of 15 mutants tried (3 caught, 1 missed"),
            "{why}"
        );
        assert!(
            why.contains("replace > with >= in f"),
            "the survivor seen is named: {why}"
        );
        assert!(why.contains("no proof recorded"), "{why}");
        let none = cut_off_reason(&None, None, secs(240));
        assert!(none.contains("no mutant judged"), "{none}");
    }

    // i[verify prove.budget+3]
    #[test]
    fn a_bounded_run_takes_the_smallest_rules_first_in_the_order_chosen() {
        assert_eq!(order(&[30, 0, 5, 30, 5, 1]), [1, 5, 2, 4, 0, 3]);
        assert_eq!(order(&[]), Vec::<usize>::new());
    }

    // i[verify prove.budget+3]
    #[test]
    fn a_rule_starts_only_within_the_caps_unless_it_runs_nothing() {
        let secs = Duration::from_secs;
        let unbounded = Budget::new(None, None);
        assert_eq!(unbounded.admit_rule_at(true, 1000, secs(1000)), Ok(()));
        let mut budget = Budget::new(Some(10), Some(100));
        assert_eq!(budget.admit_rule_at(true, 10, secs(0)), Ok(()));
        assert!(
            budget.admit_rule_at(true, 11, secs(0)).is_err(),
            "past the cap"
        );
        assert!(
            budget.admit_rule_at(true, 0, secs(100)).is_err(),
            "time spent"
        );
        assert_eq!(
            budget.admit_rule_at(false, 11, secs(100)),
            Ok(()),
            "a rule not provable runs no mutant: it is reported, never left unrun"
        );
        budget.ran(10, secs(10));
        let reached = budget.admit_rule_at(true, 0, secs(10));
        assert!(
            reached
                .as_ref()
                .is_err_and(|why| why.contains("cap of 10 mutants is reached")),
            "{reached:?}"
        );
    }

    // i[verify prove.budget+3]
    #[test]
    fn a_rule_is_cut_off_when_the_runs_seconds_are_spent() {
        let budget = Budget::new(None, Some(240));
        let at = |secs| budget.started + Duration::from_secs(secs);
        assert_eq!(budget.deadline(at(0)), Some(at(240)));
        assert_eq!(budget.deadline(at(200)), Some(at(240)));
        assert_eq!(
            budget.deadline(at(300)),
            Some(at(300)),
            "already spent: now"
        );
        assert_eq!(Budget::new(Some(40), None).deadline(at(0)), None);
    }
}
