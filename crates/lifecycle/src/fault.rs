//! The node's fault board: one open fault per subject, filed and cleared by every module.
//!
//! Messages are written by the modules that file them and are logged and served by the admin
//! API as they are: a caller must never put a secret (a token, a key, credentials in a URL) in a
//! fault's kind or message.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use holdfast_retry::{Escalation, Reason, Transition};

/// What a fault is about: a module and a name inside it (an image reference, a hostname, a peer).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Subject {
    /// The module that owns the fault ("pull", "issuance", ...).
    pub module: String,
    /// What inside the module is failing.
    pub name: String,
}

impl Subject {
    /// A subject of `module`.
    pub fn new(module: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            module: module.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.module, self.name)
    }
}

/// One open fault.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Fault {
    /// What it is about.
    pub subject: Subject,
    /// A short machine-readable kind, e.g. "unreachable", "not_found", "crash_loop".
    pub kind: String,
    /// The latest failure's message, for the operator (never a secret).
    pub message: String,
    /// The streak length when it was last refreshed.
    pub failures: u32,
    /// When the fault was filed (wall clock, caller-supplied).
    pub since: SystemTime,
    /// When it was last refreshed (wall clock, caller-supplied).
    pub updated: SystemTime,
}

/// One fault board for the whole node: every module files and clears here; the admin API lists
/// it. Cheap to clone (clones share one board); all methods take `&self`.
// r[impl lifecycle.fault.board]
#[derive(Debug, Clone, Default)]
pub struct FaultBoard {
    faults: Arc<Mutex<BTreeMap<Subject, Fault>>>,
}

impl FaultBoard {
    /// An empty board.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<Subject, Fault>> {
        // A panic elsewhere while holding the lock leaves a map that is still consistent (every
        // mutation is a single insert or remove), so a poisoned lock is used as is.
        self.faults
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Files a fault, or refreshes the open one for the same subject (kind, message, failures,
    /// updated; `since` kept). Returns true when it was newly filed.
    pub fn file(
        &self,
        subject: Subject,
        kind: &str,
        message: &str,
        failures: u32,
        now: SystemTime,
    ) -> bool {
        let mut faults = self.lock();
        if refresh_open(&mut faults, &subject, kind, message, failures, now) {
            return false;
        }
        tracing::warn!(subject = %subject, kind, failures, message, "fault filed");
        faults.insert(
            subject.clone(),
            Fault {
                subject,
                kind: kind.to_owned(),
                message: message.to_owned(),
                failures,
                since: now,
                updated: now,
            },
        );
        true
    }

    /// Refreshes the subject's open fault (kind, message, failures, updated; `since` kept) and
    /// files nothing when none is open. Returns whether one was open. The check and the refresh
    /// are one step, so a failure racing a clear on another thread never files the fault again.
    pub fn refresh(
        &self,
        subject: &Subject,
        kind: &str,
        message: &str,
        failures: u32,
        now: SystemTime,
    ) -> bool {
        refresh_open(&mut self.lock(), subject, kind, message, failures, now)
    }

    /// Clears the subject's fault; returns whether one was open.
    pub fn clear(&self, subject: &Subject) -> bool {
        let removed = self.lock().remove(subject);
        if let Some(fault) = &removed {
            tracing::info!(subject = %subject, kind = fault.kind.as_str(), "fault cleared");
        }
        removed.is_some()
    }

    /// Files on `Escalated`, clears on `Recovered`, refreshes an open fault otherwise.
    ///
    /// "Otherwise" means a failure (`Failed`, `Expired`): it refreshes an open fault and files
    /// nothing. A success without `Recovered` clears an open fault too (the condition is gone,
    /// for instance after an operator reset); a superseded or released attempt changes nothing.
    pub fn apply<K>(
        &self,
        subject: Subject,
        transition: &Transition<K>,
        kind: &str,
        message: &str,
        now: SystemTime,
    ) {
        match (transition.escalation, transition.reason) {
            (Some(Escalation::Escalated), _) => {
                self.file(subject, kind, message, transition.failures, now);
            }
            (Some(Escalation::Recovered), _) | (None, Reason::Succeeded) => {
                self.clear(&subject);
            }
            (None, Reason::Failed { .. } | Reason::Expired) => {
                self.refresh(&subject, kind, message, transition.failures, now);
            }
            (None, Reason::Superseded | Reason::Released) => {}
        }
    }

    /// The subject's open fault.
    pub fn get(&self, subject: &Subject) -> Option<Fault> {
        self.lock().get(subject).cloned()
    }

    /// Every open fault, ordered by subject.
    pub fn list(&self) -> Vec<Fault> {
        self.lock().values().cloned().collect()
    }

    /// The open faults of one module, ordered by subject.
    pub fn of_module(&self, module: &str) -> Vec<Fault> {
        self.lock()
            .values()
            .filter(|f| f.subject.module == module)
            .cloned()
            .collect()
    }

    /// Clears every fault of one module (it was removed from the config); returns how many.
    pub fn clear_module(&self, module: &str) -> usize {
        let mut faults = self.lock();
        let before = faults.len();
        faults.retain(|subject, _| subject.module != module);
        let cleared = before - faults.len();
        if cleared > 0 {
            tracing::info!(module, cleared, "faults of module cleared");
        }
        cleared
    }

    /// How many faults are open.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// No fault is open.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

/// Refreshes `subject`'s open fault in the locked map; whether one was open.
fn refresh_open(
    faults: &mut BTreeMap<Subject, Fault>,
    subject: &Subject,
    kind: &str,
    message: &str,
    failures: u32,
    now: SystemTime,
) -> bool {
    let Some(open) = faults.get_mut(subject) else {
        return false;
    };
    open.kind = kind.to_owned();
    open.message = message.to_owned();
    open.failures = failures;
    open.updated = now;
    tracing::debug!(subject = %subject, kind, failures, message, "fault refreshed");
    true
}
