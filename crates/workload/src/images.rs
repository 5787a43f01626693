//! Whether a workload's image is present: asked through a trait of this crate's own.
//!
//! The node implements it with the pull module (whose `ensure` pulls with its own pacing and
//! faults); this crate uses holdfast-pull only to read image references (its config), never to
//! pull. Tests implement it with a fake or by asking dockerd.

use std::time::Instant;

/// Where an image stands for the workload that needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImagePresence {
    /// In the daemon's store: the container can be created.
    Present,
    /// Not yet (being pulled, or the pull is failing): `detail` says why, for the workload's state.
    Pending {
        /// The pull module's own account, e.g. "pulling" or "waiting 20 s after 2 failures: …".
        detail: String,
    },
}

/// Asked every tick for each workload that is ready to start, at the caller's `now`.
pub trait Images {
    /// Where `reference` stands; may start a pull (paced by the implementer).
    fn ensure(&mut self, reference: &str, now: Instant) -> ImagePresence;

    /// Where `reference` stands for a workload that checks its tag before each creation
    /// (`pull_policy = "always"`): present only once a check of the tag made at or after `since`
    /// (when the workload became ready to start) has settled, the image pulled again first if the
    /// tag moved. The default does not check: it is [`Images::ensure`].
    fn ensure_fresh(&mut self, reference: &str, since: Instant, now: Instant) -> ImagePresence {
        let _ = since;
        self.ensure(reference, now)
    }
}

impl<F: FnMut(&str, Instant) -> ImagePresence> Images for F {
    fn ensure(&mut self, reference: &str, now: Instant) -> ImagePresence {
        self(reference, now)
    }
}
