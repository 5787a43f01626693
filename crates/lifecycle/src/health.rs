//! Module health: what each module says about itself, and what the node reads and reports.

use tokio::sync::watch;

/// A module's health as the node reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", content = "reason", rename_all = "snake_case")]
pub enum Health {
    /// Started, not yet serving.
    Starting,
    /// Serving.
    Ready,
    /// Running without something it needs (a backend is absent); the reason says what.
    Degraded(String),
    /// Stopping: no longer accepting new work.
    Draining,
    /// Stopped.
    Stopped,
}

/// The writing end (held by the module) and reading end (held by the node) of one module's
/// health. Health starts as [`Health::Starting`].
// r[impl lifecycle.health]
pub fn health_channel() -> (HealthReporter, HealthWatch) {
    let (tx, rx) = watch::channel(Health::Starting);
    (
        HealthReporter { tx },
        HealthWatch {
            rx,
            last: Health::Starting,
        },
    )
}

/// The writing end of a module's health. Clones write to the same channel.
#[derive(Debug, Clone)]
pub struct HealthReporter {
    tx: watch::Sender<Health>,
}

impl HealthReporter {
    /// Sets the module's health. Setting the health it already has wakes no watcher; setting it
    /// with no watcher left is not an error (the node may not be reading yet, or any more).
    pub fn set(&self, health: Health) {
        self.tx.send_if_modified(|current| {
            if *current == health {
                false
            } else {
                *current = health;
                true
            }
        });
    }
}

/// The reading end of a module's health.
#[derive(Debug, Clone)]
pub struct HealthWatch {
    rx: watch::Receiver<Health>,
    /// What `changed` last returned (initially the channel's first value): a change back to it
    /// before the watcher looked is no change.
    last: Health,
}

impl HealthWatch {
    /// The latest health.
    pub fn get(&self) -> Health {
        self.rx.borrow().clone()
    }

    /// Waits until the health differs from what this watch last returned from `changed`, and
    /// returns the new value (intermediate values may be skipped: only the latest is kept).
    /// `None` once every reporter is gone and the latest value has been seen.
    pub async fn changed(&mut self) -> Option<Health> {
        loop {
            self.rx.changed().await.ok()?;
            let current = self.rx.borrow_and_update().clone();
            if current != self.last {
                self.last = current.clone();
                return Some(current);
            }
        }
    }
}
