//! Tags checked before each start (`pull_policy = "always"`): which asks a check answers.
//!
//! A workload that became ready to start at `since` asks whether its image's tag was checked at
//! or after `since`; the pull module begins one check per such ask (never two at once for one
//! reference), and a check that found the tag moved is settled only once the pull again has
//! ended, succeeded or failed. A failed check or pull settles the ask too: the start goes on from
//! the local image. Pure, on the caller's clock.

use std::collections::HashMap;
use std::time::Instant;

// r[impl workload.image.always]
/// The asks for a fresh check of a tag, and the checks that answer them.
#[derive(Debug, Clone, Default)]
pub struct StartChecks {
    /// The newest `since` asked and not yet answered, per reference.
    asked: HashMap<String, Instant>,
    /// When the check under way began.
    in_flight: HashMap<String, Instant>,
    /// A check found the tag moved: its image is being pulled again.
    pulling: HashMap<String, Instant>,
    /// When the last settled check (or pull again) was made.
    settled: HashMap<String, Instant>,
}

impl StartChecks {
    /// No asks yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `reference` was checked at or after `since`, its outcome settled; if not, the ask
    /// is remembered for the next [`begin`](Self::begin).
    pub fn ask(&mut self, reference: &str, since: Instant) -> bool {
        if self.settled.get(reference).is_some_and(|at| *at >= since) {
            return true;
        }
        let asked = self.asked.entry(reference.to_owned()).or_insert(since);
        *asked = (*asked).max(since);
        false
    }

    /// Whether a check of `reference` is to begin at `now`: an ask is unanswered and no check or
    /// pull again of it is under way. `true` marks it begun.
    pub fn begin(&mut self, reference: &str, now: Instant) -> bool {
        if !self.asked.contains_key(reference)
            || self.in_flight.contains_key(reference)
            || self.pulling.contains_key(reference)
        {
            return false;
        }
        self.in_flight.insert(reference.to_owned(), now);
        true
    }

    /// The check of `reference` begun at `began` ended: `moved`, its image is pulled again first
    /// (settled by [`pull_ended`](Self::pull_ended)); otherwise (unchanged, or the check failed)
    /// the asks made before it began are answered. A late result of a check no longer under way
    /// (forgotten, reset, begun again since) answers nothing.
    pub fn answered(&mut self, reference: &str, began: Instant, moved: bool) {
        if self.in_flight.get(reference) != Some(&began) {
            return;
        }
        self.in_flight.remove(reference);
        if moved {
            self.pulling.insert(reference.to_owned(), began);
        } else {
            self.settle(reference, began);
        }
    }

    /// A pull again of `reference` ended at `now` (the new content is present, or the attempt
    /// failed): an ask waiting on it is answered, the start going on with what is local.
    pub fn pull_ended(&mut self, reference: &str, now: Instant) {
        if self.pulling.remove(reference).is_some() || self.asked.contains_key(reference) {
            self.settle(reference, now);
        }
    }

    /// Whether `reference` is being pulled again for a check of this kind.
    pub fn pulling(&self, reference: &str) -> bool {
        self.pulling.contains_key(reference)
    }

    /// The module that answers the checks (re)starts: a check or pull again the old one had under
    /// way will never end, so each is dropped and its ask, kept, begins again.
    pub fn reset_under_way(&mut self) {
        self.in_flight.clear();
        self.pulling.clear();
    }

    /// Keeps only the references `keep` says are needed (an ask for one no workload uses would
    /// otherwise stay for the node's life).
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        for map in [
            &mut self.asked,
            &mut self.in_flight,
            &mut self.pulling,
            &mut self.settled,
        ] {
            map.retain(|reference, _| keep(reference));
        }
    }

    /// `reference` is no longer needed.
    pub fn forget(&mut self, reference: &str) {
        self.asked.remove(reference);
        self.in_flight.remove(reference);
        self.pulling.remove(reference);
        self.settled.remove(reference);
    }

    fn settle(&mut self, reference: &str, at: Instant) {
        let settled = self.settled.entry(reference.to_owned()).or_insert(at);
        *settled = (*settled).max(at);
        if self.asked.get(reference).is_some_and(|since| *since <= at) {
            self.asked.remove(reference);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;
    const REF: &str = "reg.example/app:1";

    // r[verify workload.image.always]
    #[test]
    fn an_ask_is_answered_by_a_check_begun_after_it() {
        let t0 = Instant::now();
        let mut c = StartChecks::new();
        assert!(!c.begin(REF, t0), "nothing asked, nothing checked");
        assert!(!c.ask(REF, t0));
        assert!(c.begin(REF, t0 + S(1)));
        // One check at a time, however often the workload asks.
        assert!(!c.ask(REF, t0));
        assert!(!c.begin(REF, t0 + S(2)));
        c.answered(REF, t0 + S(1), false);
        assert!(c.ask(REF, t0));
        // The next start (ready later) needs a check of its own.
        assert!(!c.ask(REF, t0 + S(30)));
        assert!(c.begin(REF, t0 + S(31)));
        c.answered(REF, t0 + S(31), false);
        assert!(c.ask(REF, t0 + S(30)));
        assert!(!c.begin(REF, t0 + S(32)), "answered: no further check");
    }

    // r[verify workload.image.always]
    #[test]
    fn a_moved_tag_answers_once_its_pull_again_ends_and_a_failure_lets_the_start_go_on() {
        let t0 = Instant::now();
        let mut c = StartChecks::new();
        assert!(!c.ask(REF, t0));
        assert!(c.begin(REF, t0));
        c.answered(REF, t0, true);
        assert!(c.pulling(REF));
        assert!(!c.ask(REF, t0), "waits for the new content");
        assert!(
            !c.begin(REF, t0 + S(1)),
            "no check while it is pulled again"
        );
        // The pull again fails (or succeeds): the start goes on.
        c.pull_ended(REF, t0 + S(5));
        assert!(c.ask(REF, t0));
        // A check that fails is answered as one that found nothing (`answered(_, _, false)`).
        assert!(!c.ask(REF, t0 + S(10)));
        assert!(c.begin(REF, t0 + S(10)));
        c.answered(REF, t0 + S(10), false);
        assert!(c.ask(REF, t0 + S(10)));
        // A pull again under way for another reason (`digest`) answers a waiting ask as it ends.
        assert!(!c.ask(REF, t0 + S(20)));
        c.pull_ended(REF, t0 + S(21));
        assert!(c.ask(REF, t0 + S(20)));
        c.forget(REF);
        assert!(!c.ask(REF, t0));
    }

    // r[verify workload.image.always]
    #[test]
    fn a_check_or_pull_again_lost_with_its_module_begins_again_after_a_reset() {
        let t0 = Instant::now();
        let other = "reg.example/other:2";
        let mut c = StartChecks::new();
        assert!(!c.ask(REF, t0));
        assert!(c.begin(REF, t0));
        assert!(!c.ask(other, t0));
        assert!(c.begin(other, t0));
        c.answered(other, t0, true);
        // The module stops: neither answer ever comes.
        assert!(!c.begin(REF, t0 + S(1)));
        assert!(!c.begin(other, t0 + S(1)));
        c.reset_under_way();
        assert!(!c.pulling(other));
        assert!(!c.ask(REF, t0), "the ask is kept");
        assert!(c.begin(REF, t0 + S(2)), "begun again by the new module");
        assert!(c.begin(other, t0 + S(2)));
        c.answered(REF, t0 + S(2), false);
        c.answered(other, t0 + S(2), false);
        assert!(c.ask(REF, t0));
        assert!(c.ask(other, t0));
    }

    // r[verify workload.image.always]
    #[test]
    fn only_the_references_still_needed_are_kept() {
        let t0 = Instant::now();
        let other = "reg.example/other:2";
        let mut c = StartChecks::new();
        assert!(!c.ask(REF, t0));
        assert!(!c.ask(other, t0));
        assert!(c.begin(other, t0));
        c.answered(other, t0, true);
        c.retain(|r| r == REF);
        assert!(!c.pulling(other));
        assert!(!c.begin(other, t0 + S(1)), "its ask is gone");
        assert!(c.begin(REF, t0 + S(1)), "the kept ask stays");
    }

    // r[verify workload.image.always]
    #[test]
    fn a_late_result_does_not_answer_a_check_begun_after_it() {
        let t0 = Instant::now();
        let mut c = StartChecks::new();
        assert!(!c.ask(REF, t0));
        assert!(c.begin(REF, t0));
        // Forgotten and needed again: a new ask, a new check.
        c.forget(REF);
        assert!(!c.ask(REF, t0 + S(10)));
        assert!(c.begin(REF, t0 + S(10)));
        // The old check's result comes late: it answers nothing.
        c.answered(REF, t0, false);
        assert!(!c.ask(REF, t0 + S(10)));
        c.answered(REF, t0 + S(10), false);
        assert!(c.ask(REF, t0 + S(10)));
    }
}
