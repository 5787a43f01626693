//! The synchronous core of image actuation: every decision, no I/O, no runtime.
//!
//! [`Reconciler::ensure`] answers where a reference stands at the caller's `now` and says which
//! [`Action`]s to perform (start a pull, probe the daemon, cancel a superseded attempt);
//! [`Reconciler::on_result`] takes an attempt's result back, at the caller's `now`. The shell
//! ([`Actuator`](crate::Actuator)) performs the actions on tokio and feeds results back; this
//! module never spawns, awaits or reads a clock, so it is tested by calling it.

use std::collections::HashMap;
use std::time::Instant;

use crate::classify::{FaultPolicy, PullError, PullErrorKind};
use crate::client::Fetched;
use crate::config::PullConfig;
use holdfast_lifecycle::{Fault, FaultBoard};

use crate::fault::{FaultSubject, PullFaults};
use crate::pacing::{Failed, Finished, Pacer, Permit, Token};
use crate::progress::PullProgress;
use crate::state::ImageState;

/// The attempt id the core hands out with an action and expects back with its result.
pub type AttemptId = Token;

/// Something the shell must do for the core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Start attempt `attempt`: make `reference` present (inspect, then pull if absent).
    Pull {
        /// The reference to make present.
        reference: String,
        /// Reported back with the result.
        attempt: AttemptId,
    },
    /// Start attempt `attempt`: check that the daemon answers.
    Probe {
        /// Reported back with the result.
        attempt: AttemptId,
    },
    /// Stop attempt `attempt` (superseded, or its reference forgotten). A result that still
    /// comes back for it changes nothing.
    Cancel {
        /// The attempt to stop.
        attempt: AttemptId,
    },
}

/// An attempt's result, as the shell reports it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    /// A pull attempt ended.
    Pull {
        /// The reference it was for.
        reference: String,
        /// The id it was started with.
        attempt: AttemptId,
        /// What it found (a panic of the attempt arrives as a [`PullErrorKind::Panicked`] error).
        result: Result<Fetched, PullError>,
    },
    /// A daemon probe ended.
    Probe {
        /// The id it was started with.
        attempt: AttemptId,
        /// Whether the daemon answered.
        result: Result<(), PullError>,
    },
}

/// Per-reference bookkeeping besides the gate's.
#[derive(Debug, Default)]
struct Reference {
    present: bool,
    live: Option<AttemptId>,
    /// An attempt the gate counted as stale that no newer attempt has superseded yet: no longer
    /// reported as in flight, but its result still counts, and it is cancelled when superseded.
    stale: Option<AttemptId>,
    last_error: Option<PullError>,
}

#[derive(Debug, Default)]
struct Daemon {
    /// Set when an attempt found the daemon unreachable; cleared by a successful probe or pull.
    down: Option<DaemonDown>,
    probe: Option<AttemptId>,
}

#[derive(Debug)]
struct DaemonDown {
    failures: u32,
    until: Instant,
    last_error: PullError,
}

/// Every decision of image actuation, on the caller's clock.
#[derive(Debug)]
pub struct Reconciler {
    config: PullConfig,
    images: Pacer<String>,
    daemon_gate: Pacer<()>,
    references: HashMap<String, Reference>,
    daemon: Daemon,
    faults: PullFaults,
}

impl Reconciler {
    /// A core with nothing known yet, filing its faults on a board of its own.
    pub fn new(config: PullConfig) -> Self {
        Self::with_fault_board(config, FaultBoard::new())
    }

    /// A core with nothing known yet, filing its faults on `board` (the node's, shared with every
    /// module), under module "pull".
    pub fn with_fault_board(config: PullConfig, board: FaultBoard) -> Self {
        Reconciler {
            config,
            images: Pacer::new(*config.image_policy()),
            daemon_gate: Pacer::new(*config.daemon_policy()),
            references: HashMap::new(),
            daemon: Daemon::default(),
            faults: PullFaults::new(board),
        }
    }

    /// The configuration in use.
    pub fn config(&self) -> &PullConfig {
        &self.config
    }

    /// The board this core files its faults on.
    pub fn fault_board(&self) -> &FaultBoard {
        self.faults.board()
    }

    // r[impl actuate.image.ensure+2]
    // r[impl actuate.image.retry]
    /// Where `reference` stands at `now`, and what to do about it: at most one new attempt when
    /// pacing allows one, the cancellation of any attempt that one supersedes, or a probe of the
    /// daemon while it is down. A `Pulling` answer carries no progress: the shell, which holds
    /// the running attempt, fills it in.
    pub fn ensure(&mut self, reference: &str, now: Instant) -> (ImageState, Vec<Action>) {
        let mut actions = Vec::new();
        let entry = self.references.entry(reference.to_owned()).or_default();
        if entry.present {
            return (ImageState::Present, actions);
        }
        if let Some(down) = &self.daemon.down {
            let state = ImageState::DaemonUnreachable {
                until: down.until,
                failures: down.failures,
                last_error: down.last_error.clone(),
            };
            self.probe_daemon(now, &mut actions);
            return (state, actions);
        }
        // r[impl actuate.image.single-flight+3]
        let state = match self.images.begin(reference.to_owned(), now) {
            Permit::Granted {
                token: attempt,
                expired,
            } => {
                if let Some(expired) = expired {
                    self.record_expired(reference, expired);
                }
                self.start_attempt(reference, attempt, &mut actions);
                pulling()
            }
            Permit::InFlight => pulling(),
            Permit::Wait {
                until,
                failures,
                expired,
            } => {
                if let Some(expired) = expired {
                    // The attempt in flight went stale and this refusal counted it: it is a
                    // stalled failure now, no longer reported as a pull in flight.
                    self.record_expired(reference, expired);
                    if let Some(entry) = self.references.get_mut(reference) {
                        entry.stale = entry.live.take().or(entry.stale.take());
                    }
                }
                self.waiting_state(reference, until, failures)
            }
        };
        (state, actions)
    }

    // r[impl actuate.image.ensure+2]
    /// The answer for a reference the gate holds back: its own latest failure if one was
    /// recorded, else that the gate defers it (never an error that did not happen).
    fn waiting_state(&self, reference: &str, until: Instant, failures: u32) -> ImageState {
        // The gate's own count is the truth about the streak, whatever the refusal reported.
        let failures = failures.max(self.reference_failures(reference));
        let Some(last_error) = self
            .references
            .get(reference)
            .and_then(|e| e.last_error.clone())
        else {
            return ImageState::Deferred { until, failures };
        };
        if self
            .faults
            .is_open(&FaultSubject::Image(reference.to_owned()))
        {
            ImageState::Escalated {
                until,
                failures,
                last_error,
            }
        } else {
            ImageState::Waiting {
                until,
                failures,
                last_error,
            }
        }
    }

    /// The gate superseded an attempt that stayed in flight past its stale timeout and counted it
    /// as failed; record it like any stalled attempt.
    fn record_expired(&mut self, reference: &str, expired: Failed) {
        let err = PullError::new(
            PullErrorKind::Stalled,
            "attempt still in flight past the stale timeout; superseded",
        );
        if let Some(entry) = self.references.get_mut(reference) {
            entry.last_error = Some(err.clone());
        }
        let subject = FaultSubject::Image(reference.to_owned());
        if expired.escalated {
            self.faults.file(&subject, &err, expired.failures);
        } else {
            self.faults.refresh(&subject, &err, expired.failures);
        }
    }

    fn start_attempt(&mut self, reference: &str, attempt: AttemptId, actions: &mut Vec<Action>) {
        // r[impl actuate.image.single-flight+3]
        // The gate granted a new attempt, so any older one still running was superseded: cancel
        // it rather than let it go on pulling beside its successor.
        if let Some(entry) = self.references.get_mut(reference) {
            for old in [entry.live.take(), entry.stale.take()]
                .into_iter()
                .flatten()
            {
                self.images.discard(old);
                actions.push(Action::Cancel { attempt: old });
                tracing::debug!(reference, "superseded pull attempt cancelled");
            }
            entry.live = Some(attempt);
        }
        tracing::debug!(reference, "image pull attempt started");
        actions.push(Action::Pull {
            reference: reference.to_owned(),
            attempt,
        });
    }

    fn probe_daemon(&mut self, now: Instant, actions: &mut Vec<Action>) {
        let (attempt, expired) = match self.daemon_gate.begin((), now) {
            Permit::Granted {
                token: attempt,
                expired,
            } => (Some(attempt), expired),
            Permit::Wait { expired, .. } => (None, expired),
            Permit::InFlight => (None, None),
        };
        if let Some(expired) = expired {
            // r[impl actuate.image.daemon.stale-probe]
            // A probe that never answered was counted as failed by the gate: record it, and file
            // the daemon fault if that failure escalated.
            let err = PullError::new(
                PullErrorKind::Stalled,
                "daemon probe still unanswered past the stale timeout; superseded",
            );
            if let Some(old) = self.daemon.probe.take() {
                self.daemon_gate.discard(old);
                actions.push(Action::Cancel { attempt: old });
            }
            self.record_daemon_failure(&err, expired);
        }
        if let Some(attempt) = attempt {
            if let Some(old) = self.daemon.probe.replace(attempt) {
                self.daemon_gate.discard(old);
                actions.push(Action::Cancel { attempt: old });
            }
            actions.push(Action::Probe { attempt });
        }
    }

    /// Where `reference` stands, for status output: like [`Reconciler::ensure`] but it starts
    /// nothing. `None` when nothing is known about it yet (never ensured, or fresh and not yet
    /// attempted).
    pub fn status(&self, reference: &str) -> Option<ImageState> {
        let entry = self.references.get(reference)?;
        if entry.present {
            return Some(ImageState::Present);
        }
        if let Some(down) = &self.daemon.down {
            return Some(ImageState::DaemonUnreachable {
                until: down.until,
                failures: down.failures,
                last_error: down.last_error.clone(),
            });
        }
        if entry.live.is_some() {
            return Some(pulling());
        }
        let key = self.images.state(&reference.to_owned())?;
        if key.failures == 0 {
            return None;
        }
        Some(self.waiting_state(reference, key.next_attempt_at, key.failures))
    }

    /// Every reference the core knows about, ordered.
    pub fn references(&self) -> Vec<String> {
        let mut all: Vec<String> = self.references.keys().cloned().collect();
        all.sort();
        all
    }

    /// The live (not stale, not superseded) attempt of `reference`, if one runs.
    pub fn live_attempt(&self, reference: &str) -> Option<AttemptId> {
        self.references.get(reference)?.live
    }

    /// The length of `reference`'s own failure streak (0 when it has none).
    pub fn reference_failures(&self, reference: &str) -> u32 {
        self.images
            .state(&reference.to_owned())
            .map_or(0, |state| state.failures)
    }

    /// Pull's open operator-visible faults (images and the daemon), from the board.
    pub fn faults(&self) -> Vec<Fault> {
        self.faults.list()
    }

    /// Forgets that `reference` is present, so the next `ensure` checks with the daemon again.
    pub fn invalidate(&mut self, reference: &str) {
        if let Some(entry) = self.references.get_mut(reference) {
            entry.present = false;
        }
    }

    /// Forgets `reference` entirely: its pacing, its open fault and its attempts, which are to
    /// be cancelled (their results, if they still come, are ignored).
    pub fn forget(&mut self, reference: &str) -> Vec<Action> {
        let mut actions = Vec::new();
        if let Some(entry) = self.references.remove(reference) {
            for attempt in [entry.live, entry.stale].into_iter().flatten() {
                actions.push(Action::Cancel { attempt });
            }
        }
        self.images.forget(&reference.to_owned());
        self.faults
            .clear(&FaultSubject::Image(reference.to_owned()));
        actions
    }

    /// Whether any attempt the core considers live (not stale, not superseded) is running.
    pub fn has_live_attempts(&self) -> bool {
        self.daemon.probe.is_some() || self.references.values().any(|r| r.live.is_some())
    }

    /// Applies an attempt's result at `now`.
    pub fn on_result(&mut self, completion: Completion, now: Instant) {
        match completion {
            Completion::Pull {
                reference,
                attempt,
                result,
            } => self.on_pull(&reference, attempt, result, now),
            Completion::Probe { attempt, result } => self.on_probe(attempt, result, now),
        }
    }

    // r[impl actuate.image.attempt-token]
    // r[impl actuate.image.retry]
    /// Takes a pull's result back: a live attempt's failure counts on the reference's own gate
    /// (paced by holdfast-retry), its success resets the reference; a superseded one changes
    /// nothing.
    fn on_pull(
        &mut self,
        reference: &str,
        attempt: AttemptId,
        result: Result<Fetched, PullError>,
        now: Instant,
    ) {
        // The gate decides whether the attempt is still the live one; a superseded attempt's
        // result changes nothing, here or there.
        let subject = FaultSubject::Image(reference.to_owned());
        match result {
            Ok(fetched) => {
                let finished = self.images.succeed(attempt, now);
                self.attempt_ended(reference, attempt);
                if finished == Finished::Superseded {
                    tracing::debug!(reference, "late success of a superseded attempt ignored");
                    return;
                }
                let entry = self.references.entry(reference.to_owned()).or_default();
                entry.present = true;
                entry.last_error = None;
                tracing::info!(reference, ?fetched, "image present");
                // r[impl actuate.image.fault]
                self.faults.clear(&subject);
                self.daemon_answered();
            }
            Err(err) => {
                // r[impl actuate.image.daemon+2]
                // An unreachable daemon says nothing about the image: the attempt ends without an
                // outcome for the reference and counts on the daemon's gate instead.
                let finished = if err.kind.is_daemon_condition() {
                    self.images.release(attempt, now)
                } else {
                    self.images.fail(attempt, now, err.retry_after)
                };
                self.attempt_ended(reference, attempt);
                let failed = match finished {
                    Finished::Failed(failed) => failed,
                    Finished::Released => {
                        tracing::debug!(reference, error = %err, "attempt released: the daemon is unreachable");
                        self.daemon_failed(err, now);
                        return;
                    }
                    Finished::Superseded | Finished::Succeeded { .. } => {
                        tracing::debug!(reference, error = %err, "late failure of a superseded attempt ignored");
                        return;
                    }
                };
                let entry = self.references.entry(reference.to_owned()).or_default();
                entry.last_error = Some(err.clone());
                tracing::warn!(
                    reference,
                    kind = %err.kind,
                    failures = failed.failures,
                    error = %err.message,
                    "image pull failed"
                );
                self.report_failure(&subject, &err, failed);
                if err.kind.is_daemon_condition() {
                    self.daemon_failed(err, now);
                } else if err.kind.is_daemon_answer() {
                    self.daemon_answered();
                }
            }
        }
    }

    // r[impl actuate.image.fault]
    // r[impl actuate.image.classify.policy]
    /// Shows a reference's counted failure to the operator: its fault is filed when the failure
    /// escalated the reference, or at once for a class that needs an operator; otherwise an open
    /// fault is only updated with the latest error.
    fn report_failure(&mut self, subject: &FaultSubject, err: &PullError, failed: Failed) {
        let file_now = failed.escalated || err.kind.fault_policy() == FaultPolicy::Immediately;
        if file_now {
            self.faults.file(subject, err, failed.failures);
        } else {
            self.faults.refresh(subject, err, failed.failures);
        }
    }

    /// The attempt has ended: if it is the reference's live (or stale, not yet superseded)
    /// attempt, nothing of it is running any more.
    fn attempt_ended(&mut self, reference: &str, attempt: AttemptId) {
        if let Some(entry) = self.references.get_mut(reference) {
            if entry.live == Some(attempt) {
                entry.live = None;
            }
            if entry.stale == Some(attempt) {
                entry.stale = None;
            }
        }
    }

    // r[impl actuate.image.daemon+2]
    /// Records a pull's failure to reach the daemon on the daemon's own gate, and from then on
    /// starts no image attempt until a probe gets an answer. While a probe is out, the probe's
    /// answer is the one that counts: the pull's report (which may predate it) only updates the
    /// last error, and never takes the probe's place on the gate, which would leave the probe's
    /// answer, a success included, unheard.
    fn daemon_failed(&mut self, err: PullError, now: Instant) {
        if self.daemon.probe.is_some() {
            if let Some(down) = &mut self.daemon.down {
                down.last_error = err;
            }
            return;
        }
        self.daemon_gate_failed(None, err, now);
    }

    /// Counts a failure to reach the daemon on its gate: the probe `probe`'s own, or (for `None`)
    /// one found by a pull, on an attempt begun for it.
    fn daemon_gate_failed(&mut self, probe: Option<AttemptId>, err: PullError, now: Instant) {
        let attempt = match probe {
            Some(attempt) => Some(attempt),
            None => match self.daemon_gate.begin((), now) {
                Permit::Granted {
                    token: attempt,
                    expired,
                } => {
                    if let Some(expired) = expired {
                        self.record_daemon_failure(&err, expired);
                    }
                    Some(attempt)
                }
                Permit::Wait {
                    until,
                    failures,
                    expired,
                } => {
                    if let Some(expired) = expired {
                        self.record_daemon_failure(&err, expired);
                    }
                    // Already counted within this wait (several attempts found it down at once).
                    let down = self.daemon.down.get_or_insert(DaemonDown {
                        failures,
                        until,
                        last_error: err.clone(),
                    });
                    down.last_error = err;
                    return;
                }
                Permit::InFlight => None,
            },
        };
        let Some(attempt) = attempt else {
            if let Some(down) = &mut self.daemon.down {
                down.last_error = err;
            }
            return;
        };
        if let Finished::Failed(failed) = self.daemon_gate.fail(attempt, now, None) {
            tracing::warn!(failures = failed.failures, error = %err.message, "docker daemon unreachable");
            self.record_daemon_failure(&err, failed);
        }
    }

    /// A failure counted on the daemon's gate: the daemon is down until `failed.until`, and its
    /// fault is filed when the failure escalated (refreshed otherwise).
    fn record_daemon_failure(&mut self, err: &PullError, failed: Failed) {
        if failed.escalated {
            self.faults
                .file(&FaultSubject::Daemon, err, failed.failures);
        } else {
            self.faults
                .refresh(&FaultSubject::Daemon, err, failed.failures);
        }
        self.daemon.down = Some(DaemonDown {
            failures: failed.failures,
            until: failed.until,
            last_error: err.clone(),
        });
    }

    fn on_probe(&mut self, attempt: AttemptId, result: Result<(), PullError>, now: Instant) {
        if self.daemon.probe != Some(attempt) {
            return;
        }
        match result {
            Ok(()) => {
                self.daemon.probe = None;
                if self.daemon_gate.succeed(attempt, now) == Finished::Superseded {
                    return;
                }
                tracing::info!("docker daemon answers again");
                self.daemon.down = None;
                self.faults.clear(&FaultSubject::Daemon);
            }
            Err(err) => {
                let probe = self.daemon.probe.take();
                self.daemon_gate_failed(probe, err, now);
            }
        }
    }

    // r[impl actuate.image.daemon+2]
    /// An attempt got an answer from the daemon, so it is up: the daemon is as fresh as after a
    /// successful probe (its streak and escalation reset, any probe in flight no longer needed),
    /// so its next outage escalates and files its fault again.
    fn daemon_answered(&mut self) {
        if self.daemon.down.take().is_some() {
            self.faults.clear(&FaultSubject::Daemon);
        }
        if let Some(probe) = self.daemon.probe.take() {
            self.daemon_gate.discard(probe);
        }
        self.daemon_gate.forget(&());
    }
}

fn pulling() -> ImageState {
    ImageState::Pulling {
        progress: PullProgress::default(),
    }
}

#[cfg(test)]
mod tests;
