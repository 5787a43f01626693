//! Operator-visible faults: one per failing subject (an image reference, or the daemon itself),
//! filed once when the subject escalates and cleared by its next success.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::classify::{PullError, PullErrorKind};

/// What a fault is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultSubject {
    /// An image reference that cannot be pulled.
    Image(String),
    /// The Docker daemon (or Podman service) cannot be reached; no image can be pulled.
    Daemon,
}

impl std::fmt::Display for FaultSubject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FaultSubject::Image(reference) => write!(f, "image {reference}"),
            FaultSubject::Daemon => f.write_str("docker daemon"),
        }
    }
}

/// One open fault, as the operator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// What is failing.
    pub subject: FaultSubject,
    /// The kind of the failure that filed the fault.
    pub kind: PullErrorKind,
    /// The latest failure's message.
    pub last_error: String,
    /// Consecutive failures so far.
    pub failures: u32,
    /// When the fault was filed (caller's clock).
    pub since: Instant,
}

/// The set of open faults. Filing is idempotent per subject: a subject has at most one fault.
#[derive(Debug, Default)]
pub struct FaultBoard {
    open: BTreeMap<FaultSubject, Fault>,
}

impl FaultBoard {
    /// An empty board.
    pub fn new() -> Self {
        Self::default()
    }

    // r[impl actuate.image.fault]
    /// Files a fault for `subject` unless one is already open, in which case the open one is
    /// refreshed (latest error, failure count) but not filed again. Returns whether it was new.
    pub fn file(
        &mut self,
        subject: FaultSubject,
        error: &PullError,
        failures: u32,
        now: Instant,
    ) -> bool {
        if let Some(open) = self.open.get_mut(&subject) {
            open.kind = error.kind;
            open.last_error = error.message.clone();
            open.failures = failures;
            return false;
        }
        tracing::warn!(
            subject = %subject,
            kind = %error.kind,
            failures,
            error = %error.message,
            "fault filed"
        );
        self.open.insert(
            subject.clone(),
            Fault {
                subject,
                kind: error.kind,
                last_error: error.message.clone(),
                failures,
                since: now,
            },
        );
        true
    }

    /// Refreshes an open fault's latest error and count; does nothing when none is open.
    pub fn refresh(&mut self, subject: &FaultSubject, error: &PullError, failures: u32) {
        if let Some(open) = self.open.get_mut(subject) {
            open.kind = error.kind;
            open.last_error = error.message.clone();
            open.failures = failures;
        }
    }

    /// Clears the fault for `subject`, returning it if one was open.
    pub fn clear(&mut self, subject: &FaultSubject) -> Option<Fault> {
        let cleared = self.open.remove(subject);
        if let Some(fault) = &cleared {
            tracing::info!(subject = %fault.subject, kind = %fault.kind, "fault cleared");
        }
        cleared
    }

    /// The fault open for `subject`, if any.
    pub fn get(&self, subject: &FaultSubject) -> Option<&Fault> {
        self.open.get(subject)
    }

    /// All open faults, ordered by subject.
    pub fn list(&self) -> Vec<Fault> {
        self.open.values().cloned().collect()
    }

    /// How many faults are open.
    pub fn len(&self) -> usize {
        self.open.len()
    }

    /// Whether no fault is open.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify actuate.image.fault]
    #[test]
    fn one_fault_per_subject_until_cleared() {
        let mut board = FaultBoard::new();
        let now = Instant::now();
        let img = FaultSubject::Image("r/a:1".into());
        let e = PullError::new(PullErrorKind::RegistryUnreachable, "dial tcp: refused");
        assert!(board.file(img.clone(), &e, 5, now));
        assert!(!board.file(img.clone(), &e, 6, now));
        assert_eq!(board.len(), 1);
        assert_eq!(board.get(&img).map(|f| f.failures), Some(6));
        assert!(board.file(FaultSubject::Daemon, &e, 5, now));
        assert_eq!(board.len(), 2);
        assert!(board.clear(&img).is_some());
        assert!(board.clear(&img).is_none());
        assert!(board.file(img, &e, 5, now));
    }
}
