//! Operator-visible faults, on the node's shared [`FaultBoard`] (holdfast-lifecycle): one per
//! failing subject (an image reference, or the daemon itself), filed once when the subject
//! escalates and cleared by its next success. This module only names pull's subjects and files
//! in pull's terms; the board is the node's.

use std::time::SystemTime;

use holdfast_lifecycle::{Fault, FaultBoard, Subject};

use crate::classify::PullError;

/// The module name pull's faults are filed under.
pub const MODULE: &str = "pull";

/// What a fault of pull's is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultSubject {
    /// An image reference that cannot be pulled.
    Image(String),
    /// The Docker daemon (or Podman service) cannot be reached; no image can be pulled.
    Daemon,
}

impl FaultSubject {
    /// The board's subject: module "pull", name "image REF" or "docker daemon".
    pub fn subject(&self) -> Subject {
        Subject::new(MODULE, self.to_string())
    }
}

impl std::fmt::Display for FaultSubject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FaultSubject::Image(reference) => write!(f, "image {reference}"),
            FaultSubject::Daemon => f.write_str("docker daemon"),
        }
    }
}

/// Pull's view of the node's board.
#[derive(Debug, Clone, Default)]
pub struct PullFaults {
    board: FaultBoard,
}

impl PullFaults {
    /// Files on `board` (shared with the rest of the node).
    pub fn new(board: FaultBoard) -> Self {
        PullFaults { board }
    }

    /// The board faults are filed on.
    pub fn board(&self) -> &FaultBoard {
        &self.board
    }

    // r[impl actuate.image.fault]
    /// Files a fault for `subject`, or refreshes the open one (latest error, failure count)
    /// without filing it again. Returns whether it was new.
    pub fn file(&self, subject: &FaultSubject, error: &PullError, failures: u32) -> bool {
        self.board.file(
            subject.subject(),
            error.kind.as_str(),
            &error.message,
            failures,
            SystemTime::now(),
        )
    }

    /// Refreshes an open fault's latest error and count; files nothing when none is open.
    pub fn refresh(&self, subject: &FaultSubject, error: &PullError, failures: u32) {
        // One step on the board: a fault the node clears meanwhile is not filed again.
        self.board.refresh(
            &subject.subject(),
            error.kind.as_str(),
            &error.message,
            failures,
            SystemTime::now(),
        );
    }

    /// Clears the fault for `subject`; returns whether one was open.
    pub fn clear(&self, subject: &FaultSubject) -> bool {
        self.board.clear(&subject.subject())
    }

    /// Whether a fault is open for `subject`.
    pub fn is_open(&self, subject: &FaultSubject) -> bool {
        self.board.get(&subject.subject()).is_some()
    }

    /// Pull's open faults, ordered by subject.
    pub fn list(&self) -> Vec<Fault> {
        self.board.of_module(MODULE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::PullErrorKind;

    // r[verify actuate.image.fault]
    #[test]
    fn one_fault_per_subject_until_cleared_on_the_shared_board() {
        let board = FaultBoard::new();
        let faults = PullFaults::new(board.clone());
        let img = FaultSubject::Image("r/a:1".into());
        let e = PullError::new(PullErrorKind::RegistryUnreachable, "dial tcp: refused");
        assert!(faults.file(&img, &e, 5));
        assert!(!faults.file(&img, &e, 6));
        assert_eq!(faults.list().len(), 1);
        let open = board.get(&Subject::new("pull", "image r/a:1")).unwrap();
        assert_eq!(open.failures, 6);
        assert_eq!(open.kind, "registry-unreachable");
        // Refreshing files nothing.
        faults.refresh(&FaultSubject::Daemon, &e, 1);
        assert!(!faults.is_open(&FaultSubject::Daemon));
        assert!(faults.file(&FaultSubject::Daemon, &e, 5));
        assert_eq!(
            board
                .get(&Subject::new("pull", "docker daemon"))
                .map(|f| f.failures),
            Some(5)
        );
        // Another module's fault is on the same board, and not pull's.
        board.file(
            Subject::new("issuance", "a.example"),
            "x",
            "y",
            1,
            SystemTime::now(),
        );
        assert_eq!(faults.list().len(), 2);
        assert_eq!(board.len(), 3);
        assert!(faults.clear(&img));
        assert!(!faults.clear(&img));
        assert!(faults.file(&img, &e, 5));
    }
}
