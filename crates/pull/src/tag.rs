//! Tags that move: whether the registry's digest for a tag is still the one the local image was
//! pulled as, checked on an interval per reference.
//!
//! The decision is pure ([`tag_moved`], [`DigestChecks`]): the registry's digest comes from the
//! daemon's distribution inspect (`GET /distribution/NAME/json`, bollard's
//! `inspect_registry_image`, with the registry's credentials), the local one from the image's
//! `RepoDigests`. A moved tag is pulled again through the actuator (paced, classified, with its
//! faults) by marking it on the fetcher ([`crate::DockerFetcher::pull_again`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bollard::Docker;

use crate::classify::{PullError, classify_bollard};
use crate::client::{daemon_within, within};
use crate::credentials::{Credentials, RegistryAuth};

/// The default interval between two checks of one tag (15 min).
pub const DEFAULT_DIGEST_INTERVAL: Duration = Duration::from_secs(15 * 60);

/// What a check of a tag found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagCheck {
    /// The registry's digest for the tag is one the local image was pulled as.
    Unchanged,
    /// The registry now has other content under the tag.
    Moved {
        /// The registry's digest for the tag now.
        remote: String,
    },
}

// r[impl actuate.image.tag-moved]
/// Whether `reference`'s tag moved: the registry's digest `remote` is none of the digests the
/// local image was pulled as (`RepoDigests`, each `REPOSITORY@DIGEST`). A reference pinned by
/// digest never moves. An image with no repo digest at all (built or imported here) counts as
/// moved, so the registry's content replaces it.
pub fn tag_moved(reference: &str, local_repo_digests: &[String], remote: &str) -> bool {
    // A text that is not a reference is never pulled, so it has nothing that could move.
    match crate::reference::parse(reference) {
        Ok(parsed) if !parsed.is_pinned() => {}
        _ => return false,
    }
    !local_repo_digests
        .iter()
        .filter_map(|entry| entry.rsplit_once('@'))
        .any(|(_, digest)| digest == remote)
}

// r[impl actuate.image.tag-moved]
/// When each reference's tag is next checked: at once the first time it is asked about, then
/// `interval` after each check (plus, [`jittered`](Self::jittered), up to a tenth of it more,
/// drawn per node and tag so nodes do not ask a registry in step), whether it succeeded or
/// failed (a registry that cannot answer is asked again at the same pace, never sooner). On the
/// caller's clock.
#[derive(Debug, Clone)]
pub struct DigestChecks {
    interval: Duration,
    next: HashMap<String, Instant>,
    seed: Option<u64>,
}

impl DigestChecks {
    /// Checks every `interval`.
    pub fn new(interval: Duration) -> Self {
        DigestChecks {
            interval,
            next: HashMap::new(),
            seed: None,
        }
    }

    /// Each check's next one up to a tenth of the interval later, drawn from `seed` (the node's
    /// pull seed) and the reference.
    pub fn jittered(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The extra delay of `reference`'s checks: stable per node and tag.
    fn spread(&self, reference: &str) -> Duration {
        let Some(seed) = self.seed else {
            return Duration::ZERO;
        };
        // The reference's stable hash, mixed with the seed: holdfast-retry's jitter keys.
        let x = holdfast_retry::mix64(holdfast_retry::stable_hash(reference) ^ seed);
        (self.interval / 10).mul_f64((x >> 11) as f64 / (1u64 << 53) as f64)
    }

    /// The interval between two checks of one tag (before any jitter).
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Whether `reference` is due for a check at `now`.
    pub fn due(&self, reference: &str, now: Instant) -> bool {
        self.next.get(reference).is_none_or(|next| now >= *next)
    }

    /// A check of `reference` began at `now`: the next is due an interval later.
    pub fn checked(&mut self, reference: &str, now: Instant) {
        let next = now
            .checked_add(self.interval + self.spread(reference))
            .unwrap_or(now);
        self.next.insert(reference.to_owned(), next);
    }

    /// `reference` is no longer needed.
    pub fn forget(&mut self, reference: &str) {
        self.next.remove(reference);
    }
}

/// Asks the registry (through the daemon, with the registry's credentials) for the tag's digest
/// and compares it with the local image's, each wait bounded by `stall_timeout`.
pub async fn check_tag(
    docker: &Docker,
    reference: &str,
    stall_timeout: Duration,
    auth: &RegistryAuth,
) -> Result<TagCheck, PullError> {
    let name = crate::client::parsed(reference)?.to_string();
    let credentials: Option<Credentials> =
        crate::client::credentials_for(auth, reference, stall_timeout).await?;
    let remote = within(stall_timeout, "the registry's digest", async {
        docker
            .inspect_registry_image(&name, credentials.as_ref().map(Credentials::to_docker))
            .await
            .map_err(|e| classify_bollard(&e))
    })
    .await?
    .descriptor
    .digest
    .unwrap_or_default();
    let local = daemon_within(stall_timeout, "the image inspect", async {
        docker
            .inspect_image(&name)
            .await
            .map_err(|e| classify_bollard(&e))
    })
    .await?
    .repo_digests
    .unwrap_or_default();
    if remote.is_empty() || !tag_moved(reference, &local, &remote) {
        return Ok(TagCheck::Unchanged);
    }
    Ok(TagCheck::Moved { remote })
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const NEW: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    // r[verify actuate.image.tag-moved]
    #[test]
    fn a_tag_moved_when_the_registrys_digest_is_none_the_image_was_pulled_as() {
        let local = vec![format!("127.0.0.1:5000/holdfast/busybox@{OLD}")];
        let reference = "127.0.0.1:5000/holdfast/busybox:latest";
        assert!(!tag_moved(reference, &local, OLD));
        assert!(tag_moved(reference, &local, NEW));
        // Pulled under two names: either digest is the image's.
        let both = vec![
            format!("127.0.0.1:5000/holdfast/busybox@{OLD}"),
            format!("mirror.example/holdfast/busybox@{NEW}"),
        ];
        assert!(!tag_moved(reference, &both, NEW));
        // Never pulled from a registry: the registry's content wins.
        assert!(tag_moved(reference, &[], OLD));
        // Pinned by digest: it cannot move.
        assert!(!tag_moved(
            &format!("127.0.0.1:5000/holdfast/busybox@{OLD}"),
            &[],
            NEW
        ));
    }

    // r[verify actuate.image.tag-moved]
    #[test]
    fn each_tag_is_checked_once_an_interval_whatever_the_outcome() {
        let t0 = Instant::now();
        let mut checks = DigestChecks::new(Duration::from_secs(900));
        assert!(checks.due("a:1", t0), "at once the first time");
        checks.checked("a:1", t0);
        assert!(!checks.due("a:1", t0 + Duration::from_secs(899)));
        assert!(checks.due("a:1", t0 + Duration::from_secs(900)));
        assert!(checks.due("b:1", t0), "per reference");
        // However many ticks ask, one check per interval.
        let mut begun = 0;
        for s in 0..3600u64 {
            let now = t0 + Duration::from_secs(s);
            if checks.due("c:1", now) {
                checks.checked("c:1", now);
                begun += 1;
            }
        }
        assert_eq!(begun, 4);
        checks.forget("c:1");
        assert!(checks.due("c:1", t0 + Duration::from_secs(3600)));
    }

    // r[verify actuate.image.tag-moved]
    #[test]
    fn jittered_checks_spread_over_a_tenth_of_the_interval_per_node_and_tag() {
        let t0 = Instant::now();
        let interval = Duration::from_secs(900);
        let next = |seed: u64, reference: &str| {
            let mut checks = DigestChecks::new(interval).jittered(seed);
            checks.checked(reference, t0);
            (0..=90u64)
                .find(|s| checks.due(reference, t0 + interval + Duration::from_secs(*s)))
                .expect("due within a tenth of the interval after it")
        };
        // Never sooner than the interval.
        let mut checks = DigestChecks::new(interval).jittered(7);
        checks.checked("a:1", t0);
        assert!(!checks.due("a:1", t0 + interval - Duration::from_secs(1)));
        // The same node and tag: the same delay; other nodes and tags: spread.
        assert_eq!(next(7, "a:1"), next(7, "a:1"));
        let delays: std::collections::BTreeSet<u64> = (0..20u64)
            .map(|seed| next(seed, "a:1"))
            .chain((0..20).map(|i| next(7, &format!("img{i}:1"))))
            .collect();
        assert!(delays.len() > 10, "{delays:?}");
    }
}
