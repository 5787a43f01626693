//! Image garbage collection: images no configured workload uses are removed, oldest unused first,
//! when the daemon's data root fills past a high-water mark, down to a low-water mark.
//!
//! Split like the rest of the crate: [`plan`] is the pure decision (given the disk's usage, the
//! daemon's images, the images its containers use, the images workloads are configured to use and
//! how long each has been unused, which images to remove); [`ImageGc`] holds what a decision needs
//! across runs (when each image was last seen in use, a retry gate per image so a failed removal is
//! paced like any failure); [`collect`] asks the daemon and removes. The disk's usage comes through
//! [`Disk`], so tests can simulate a full disk; [`Statvfs`] is the real one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::query_parameters::{
    ListContainersOptionsBuilder, ListImagesOptionsBuilder, RemoveImageOptionsBuilder,
};
use holdfast_retry::{KeyedGate, Policy};

/// The kubelet's default high-water mark: collection starts above 85 % disk use.
pub const DEFAULT_GC_HIGH_PERCENT: u8 = 85;
/// The kubelet's default low-water mark: collection frees down to 80 % disk use.
pub const DEFAULT_GC_LOW_PERCENT: u8 = 80;
/// How long an image must have been unused before it may be removed (the kubelet's
/// `ImageMinimumGCAge`, 2 min).
pub const DEFAULT_GC_GRACE: Duration = Duration::from_secs(2 * 60);
/// How often collection runs (the kubelet's `ImageGCPeriod`, 5 min).
pub const DEFAULT_GC_INTERVAL: Duration = Duration::from_secs(5 * 60);

/// The water marks and the grace period, validated together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcPolicy {
    high_percent: u8,
    low_percent: u8,
    grace: Duration,
}

/// A GC policy that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GcPolicyError {
    /// The marks are not `0 <= low < high <= 100`.
    #[error(
        "gc_low_percent ({low}) must be below gc_high_percent ({high}), which must be at most 100"
    )]
    Marks {
        /// The high-water mark given.
        high: u8,
        /// The low-water mark given.
        low: u8,
    },
}

impl Default for GcPolicy {
    fn default() -> Self {
        GcPolicy {
            high_percent: DEFAULT_GC_HIGH_PERCENT,
            low_percent: DEFAULT_GC_LOW_PERCENT,
            grace: DEFAULT_GC_GRACE,
        }
    }
}

impl GcPolicy {
    /// A policy from its marks (percent of the data root's filesystem) and grace period.
    pub fn new(high_percent: u8, low_percent: u8, grace: Duration) -> Result<Self, GcPolicyError> {
        if high_percent > 100 || low_percent >= high_percent {
            return Err(GcPolicyError::Marks {
                high: high_percent,
                low: low_percent,
            });
        }
        Ok(GcPolicy {
            high_percent,
            low_percent,
            grace,
        })
    }

    /// Collection starts when use reaches this percentage.
    pub fn high_percent(&self) -> u8 {
        self.high_percent
    }

    /// Collection frees down to this percentage.
    pub fn low_percent(&self) -> u8 {
        self.low_percent
    }

    /// How long an image must have been unused.
    pub fn grace(&self) -> Duration {
        self.grace
    }
}

/// A filesystem's usage in bytes, as `df` counts it (see [`DiskUsage::from_statvfs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskUsage {
    /// Bytes in use: all blocks minus the free ones (root's reserved blocks are free, not used).
    pub used: u64,
    /// Bytes in use plus those an unprivileged writer could still use: the size less root's
    /// reserved blocks, the base of `df`'s percentage (the kubelet divides by the whole size).
    pub total: u64,
}

impl DiskUsage {
    /// Whether use is at or above `percent` of the size.
    fn at_least(&self, percent: u8) -> bool {
        u128::from(self.used) * 100 >= u128::from(self.total) * u128::from(percent)
    }

    /// Bytes to free to get down to `percent`.
    fn above(&self, percent: u8) -> u64 {
        let target = u128::from(self.total) * u128::from(percent) / 100;
        u64::try_from(u128::from(self.used).saturating_sub(target)).unwrap_or(u64::MAX)
    }
}

/// Where the disk usage of the daemon's data root comes from.
pub trait Disk: Send + Sync {
    /// The usage of the filesystem holding `data_root` (the daemon's `DockerRootDir`).
    fn usage(&self, data_root: &Path) -> std::io::Result<DiskUsage>;
}

/// The real disk: `statvfs(2)` on the daemon's data root (a daemon on this host), counted as
/// `df` counts it: used blocks against used plus available ones, so the blocks reserved for root
/// count neither way and the percentage is the one the operator sees in `df`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Statvfs;

impl Disk for Statvfs {
    fn usage(&self, data_root: &Path) -> std::io::Result<DiskUsage> {
        let s = nix::sys::statvfs::statvfs(data_root).map_err(std::io::Error::from)?;
        Ok(DiskUsage::from_statvfs(
            s.blocks(),
            s.blocks_free(),
            s.blocks_available(),
            s.fragment_size(),
        ))
    }
}

impl DiskUsage {
    /// A filesystem's usage from `statvfs(2)`'s block counts (all, free, available to an
    /// unprivileged writer) and fragment size.
    /// Counted as `df` counts it: the blocks reserved for root are neither used nor available.
    pub fn from_statvfs(blocks: u64, free: u64, available: u64, unit: u64) -> DiskUsage {
        let used = blocks.saturating_sub(free).saturating_mul(unit);
        DiskUsage {
            used,
            total: used.saturating_add(available.saturating_mul(unit)),
        }
    }
}

/// One image in the daemon's store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalImage {
    /// The image id (`sha256:…`).
    pub id: String,
    /// Its tags (`repo:tag`), empty for a dangling image.
    pub tags: Vec<String>,
    /// Its size in bytes, as the daemon reports it.
    pub size: u64,
    /// When it was created (seconds since the epoch), the tie-breaker between equally old ones.
    pub created: i64,
}

/// What one run decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Images to remove, in order.
    pub remove: Vec<LocalImage>,
    /// Bytes that had to be freed to reach the low-water mark (0 below the high-water mark).
    pub to_free: u64,
    /// Bytes the chosen images account for.
    pub freed: u64,
}

// r[impl actuate.image.gc+4]
/// Which images to remove. Nothing below the high-water mark; above it, images that no container
/// uses (`in_use`, image ids), that no workload is configured to use (`configured`, image ids or
/// tags) and that have been unused for the grace period (`unused_since`; an image absent from it
/// is not known to be unused) are chosen oldest unused first (then oldest created, then by id)
/// until their sizes reach what must be freed to get down to the low-water mark.
pub fn plan(
    policy: &GcPolicy,
    usage: DiskUsage,
    images: &[LocalImage],
    in_use: &BTreeSet<String>,
    configured: &BTreeSet<String>,
    unused_since: &BTreeMap<String, Instant>,
    now: Instant,
) -> Plan {
    if usage.total == 0 || !usage.at_least(policy.high_percent) {
        return Plan::default();
    }
    let to_free = usage.above(policy.low_percent);
    let mut eligible: Vec<(Instant, &LocalImage)> = images
        .iter()
        .filter(|image| !protected(image, in_use, configured))
        .filter_map(|image| {
            let since = *unused_since.get(&image.id)?;
            (now.saturating_duration_since(since) >= policy.grace).then_some((since, image))
        })
        .collect();
    eligible.sort_by(|(a_since, a), (b_since, b)| {
        a_since
            .cmp(b_since)
            .then(a.created.cmp(&b.created))
            .then(a.id.cmp(&b.id))
    });
    let mut out = Plan {
        to_free,
        ..Plan::default()
    };
    for (_, image) in eligible {
        if out.freed >= to_free {
            break;
        }
        out.freed = out.freed.saturating_add(image.size);
        out.remove.push(image.clone());
    }
    out
}

/// Whether a container uses `image` or a workload is configured to use it (by id or by a tag).
fn protected(image: &LocalImage, in_use: &BTreeSet<String>, configured: &BTreeSet<String>) -> bool {
    in_use.contains(&image.id)
        || configured.contains(&image.id)
        || image.tags.iter().any(|tag| configured.contains(tag))
}

/// What collection remembers between runs: since when each image has been unused, and a retry
/// gate per image id so a removal that failed is tried again only on its schedule.
#[derive(Debug)]
pub struct ImageGc {
    policy: GcPolicy,
    unused_since: BTreeMap<String, Instant>,
    gate: KeyedGate<String>,
    /// Ids with a failed removal, so the gate's state for them is forgotten when they go.
    failing: BTreeSet<String>,
    /// Only images with a reference matching this pattern are considered (the daemon's
    /// `reference` filter); `None`: every image.
    scope: Option<String>,
}

impl ImageGc {
    /// Collection with `policy`; failed removals are paced by `retry`.
    pub fn new(policy: GcPolicy, retry: Policy) -> Self {
        ImageGc {
            policy,
            unused_since: BTreeMap::new(),
            gate: KeyedGate::new(retry),
            failing: BTreeSet::new(),
            scope: None,
        }
    }

    /// Considers only the images with a reference matching `pattern` (the daemon's `reference`
    /// filter, e.g. `"holdfast-gc/*"`): a test sharing the daemon with others touches only its
    /// own images. Dangling images match no pattern.
    pub fn only_references(mut self, pattern: impl Into<String>) -> Self {
        self.scope = Some(pattern.into());
        self
    }

    /// The policy.
    pub fn policy(&self) -> &GcPolicy {
        &self.policy
    }

    /// Notes what is unused at `now` (an image first seen unused starts its grace period now; one
    /// in use or configured has none; one gone is forgotten) and decides, leaving out images whose
    /// last removal failed and whose retry is not due yet.
    pub fn decide(
        &mut self,
        usage: DiskUsage,
        images: &[LocalImage],
        in_use: &BTreeSet<String>,
        configured: &BTreeSet<String>,
        now: Instant,
    ) -> Plan {
        let present: BTreeSet<&str> = images.iter().map(|i| i.id.as_str()).collect();
        self.unused_since
            .retain(|id, _| present.contains(id.as_str()));
        for image in images {
            if protected(image, in_use, configured) {
                self.unused_since.remove(&image.id);
            } else {
                self.unused_since.entry(image.id.clone()).or_insert(now);
            }
        }
        // A failing image that went away (removed by someone else) leaves no state behind.
        let gate = &mut self.gate;
        self.failing.retain(|id| {
            let keep = present.contains(id.as_str());
            if !keep {
                gate.forget(id.as_str());
            }
            keep
        });
        let due: Vec<LocalImage> = images
            .iter()
            .filter(|image| self.gate.check(image.id.as_str(), now).is_ok())
            .cloned()
            .collect();
        plan(
            &self.policy,
            usage,
            &due,
            in_use,
            configured,
            &self.unused_since,
            now,
        )
    }

    /// Records a removal's outcome: a success forgets the image, a failure is paced.
    pub fn removed(&mut self, id: &str, ok: bool, now: Instant) {
        let Ok(token) = self.gate.begin(id, now) else {
            return;
        };
        if ok {
            self.gate.succeed(token, now);
            self.gate.forget(id);
            self.failing.remove(id);
            self.unused_since.remove(id);
        } else {
            self.gate.fail(token, now, None);
            self.failing.insert(id.to_owned());
        }
    }

    /// Whether a removal of `id` may be tried at `now`.
    pub fn due(&self, id: &str, now: Instant) -> bool {
        self.gate.check(id, now).is_ok()
    }
}

/// Why a run could not decide.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GcError {
    /// The daemon did not answer a request the decision needs.
    #[error("image GC: {what}: {source}")]
    Daemon {
        /// The request.
        what: &'static str,
        /// The daemon's error.
        source: bollard::errors::Error,
    },
    /// The daemon did not say where its data root is.
    #[error("image GC: the daemon reports no data root (DockerRootDir)")]
    NoDataRoot,
    /// The data root's filesystem could not be measured.
    #[error("image GC: cannot measure {path}: {source}")]
    Disk {
        /// The data root.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// One removal of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removal {
    /// The image.
    pub image: LocalImage,
    /// `Ok` when removed, else the daemon's error.
    pub result: Result<(), String>,
}

/// What a run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcRun {
    /// The data root's usage the run decided on.
    pub usage: Option<DiskUsage>,
    /// The decision.
    pub plan: Plan,
    /// Each removal tried and its outcome.
    pub removals: Vec<Removal>,
}

// r[impl actuate.image.gc+4]
/// One collection run against the daemon: its images, the images of all its containers (any
/// container, running or not, ours or not), the ids of the images the workloads are configured
/// to use (`configured`, references as written), the usage of its data root through `disk`; then
/// the removals [`ImageGc::decide`] chose, each checked again just before it is removed
/// ([`remove_listed`]) and recorded in `gc`. A reference that is absent or that the daemon calls
/// invalid protects nothing; one that cannot be resolved for any other reason ends the run
/// without removing anything (an image that may be configured is never at risk).
pub async fn collect(
    docker: &Docker,
    gc: &mut ImageGc,
    configured: &[String],
    disk: &dyn Disk,
    now: impl Fn() -> Instant,
) -> Result<GcRun, GcError> {
    let daemon = |what: &'static str| move |source| GcError::Daemon { what, source };
    let info = docker.info().await.map_err(daemon("info"))?;
    let root = PathBuf::from(info.docker_root_dir.ok_or(GcError::NoDataRoot)?);
    let usage = disk.usage(&root).map_err(|source| GcError::Disk {
        path: root.clone(),
        source,
    })?;
    let mut list = ListImagesOptionsBuilder::default().all(false);
    if let Some(pattern) = &gc.scope {
        list = list.filters(&std::collections::HashMap::from([(
            "reference",
            vec![pattern.as_str()],
        )]));
    }
    let images: Vec<LocalImage> = docker
        .list_images(Some(list.build()))
        .await
        .map_err(daemon("list images"))?
        .into_iter()
        .map(|s| LocalImage {
            id: s.id,
            tags: s
                .repo_tags
                .into_iter()
                .filter(|t| t != "<none>:<none>")
                .collect(),
            size: u64::try_from(s.size).unwrap_or(0),
            created: s.created,
        })
        .collect();
    let in_use: BTreeSet<String> = docker
        .list_containers(Some(
            ListContainersOptionsBuilder::default().all(true).build(),
        ))
        .await
        .map_err(daemon("list containers"))?
        .into_iter()
        .filter_map(|c| c.image_id)
        .collect();
    let mut protected: BTreeSet<String> = configured.iter().cloned().collect();
    for reference in configured {
        match docker.inspect_image(reference).await {
            Ok(inspect) => protected.extend(inspect.id),
            // Absent (404), or a reference the daemon calls invalid (400: no local image can
            // match it): it protects nothing, and must not stop collection for every image.
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 400 | 404,
                ..
            }) => {}
            Err(source) => {
                return Err(GcError::Daemon {
                    what: "inspect a configured image",
                    source,
                });
            }
        }
    }
    let plan = gc.decide(usage, &images, &in_use, &protected, now());
    let mut removals = Vec::new();
    for image in &plan.remove {
        let result = remove_listed(docker, image, &protected).await;
        gc.removed(&image.id, result.is_ok(), now());
        removals.push(Removal {
            image: image.clone(),
            result,
        });
    }
    Ok(GcRun {
        usage: Some(usage),
        plan,
        removals,
    })
}

// r[impl actuate.image.gc+4]
/// Removes a listed image without force, so the daemon itself refuses one a container was given
/// since the listing; first checked again by id, as the listing may be out of date: it is left
/// (an error, retried on its schedule) when its tags are no longer the listed ones or one of them
/// is now `protected` (configured), and each tag is removed only while it still names this image
/// (a tag moved to a new image since the listing would take the new one with it). The last tag
/// removed, or the id of a dangling image, removes the image. What remains is the time between
/// this check and the daemon's removal, which the daemon's own refusal covers only for containers.
pub async fn remove_listed(
    docker: &Docker,
    image: &LocalImage,
    protected: &BTreeSet<String>,
) -> Result<(), String> {
    let now = docker
        .inspect_image(&image.id)
        .await
        .map_err(|e| format!("inspecting {} again: {e}", image.id))?;
    let tags: BTreeSet<String> = now
        .repo_tags
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t != "<none>:<none>")
        .collect();
    let listed: BTreeSet<String> = image.tags.iter().cloned().collect();
    if tags != listed {
        return Err(format!(
            "{} changed since the listing (tags {tags:?}, listed {listed:?}); left for a later run",
            image.id
        ));
    }
    if protected.contains(&image.id) || tags.iter().any(|t| protected.contains(t)) {
        return Err(format!("{} is configured now; left", image.id));
    }
    let options = || Some(RemoveImageOptionsBuilder::default().force(false).build());
    if tags.is_empty() {
        docker
            .remove_image(&image.id, options(), None)
            .await
            .map_err(|e| format!("removing {}: {e}", image.id))?;
        return Ok(());
    }
    for tag in &tags {
        let names = docker
            .inspect_image(tag)
            .await
            .map_err(|e| format!("inspecting {tag}: {e}"))?
            .id;
        if names.as_deref() != Some(image.id.as_str()) {
            return Err(format!("{tag} moved to another image; left"));
        }
        docker
            .remove_image(tag, options(), None)
            .await
            .map_err(|e| format!("removing {tag}: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn image(id: &str, size: u64, created: i64) -> LocalImage {
        LocalImage {
            id: id.to_owned(),
            tags: vec![format!("{id}:latest")],
            size,
            created,
        }
    }

    fn retry() -> Policy {
        Policy::builder()
            .base(Duration::from_secs(5))
            .cap(Duration::from_secs(300))
            .seed(1)
            .build()
            .unwrap()
    }

    // r[verify actuate.image.gc+4]
    #[test]
    fn above_the_high_mark_the_oldest_unused_go_first_down_to_the_low_mark() {
        let t0 = Instant::now();
        let policy = GcPolicy::default();
        let images = [
            image("a", 30, 1),
            image("b", 30, 2),
            image("c", 30, 3),
            image("used", 500, 0),
            image("conf", 500, 0),
        ];
        let in_use = BTreeSet::from(["used".to_owned()]);
        let configured = BTreeSet::from(["conf:latest".to_owned()]);
        let mut gc = ImageGc::new(policy, retry());
        // 900 of 1000 bytes used: 100 must go to reach 80 %.
        let usage = DiskUsage {
            used: 900,
            total: 1000,
        };
        // First seen now: nothing has been unused for the grace period yet.
        assert!(
            gc.decide(usage, &images, &in_use, &configured, t0)
                .remove
                .is_empty()
        );
        let later = t0 + DEFAULT_GC_GRACE;
        let plan = gc.decide(usage, &images, &in_use, &configured, later);
        let ids: Vec<&str> = plan.remove.iter().map(|i| i.id.as_str()).collect();
        // 100 to free: a, b, c are 90, not enough, so all three; never "used" nor "conf".
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!((plan.to_free, plan.freed), (100, 90));
        // Below the high mark: nothing.
        let calm = DiskUsage {
            used: 849,
            total: 1000,
        };
        assert_eq!(
            gc.decide(calm, &images, &in_use, &configured, later),
            Plan::default()
        );
    }

    // r[verify actuate.image.gc+4]
    #[test]
    fn a_failed_removal_is_paced_and_an_image_used_again_restarts_its_grace() {
        let t0 = Instant::now();
        let mut gc = ImageGc::new(GcPolicy::default(), retry());
        let images = [image("a", 300, 1)];
        let none = BTreeSet::new();
        let full = DiskUsage {
            used: 950,
            total: 1000,
        };
        gc.decide(full, &images, &none, &none, t0);
        let at = t0 + DEFAULT_GC_GRACE;
        assert_eq!(gc.decide(full, &images, &none, &none, at).remove.len(), 1);
        gc.removed("a", false, at);
        // Not tried again at once: the retry gate holds it back for its base wait.
        assert!(gc.decide(full, &images, &none, &none, at).remove.is_empty());
        let retry_at = at + Duration::from_secs(300);
        assert_eq!(
            gc.decide(full, &images, &none, &none, retry_at)
                .remove
                .len(),
            1
        );
        // Used by a container now: its unused time starts again when it is released.
        let used = BTreeSet::from(["a".to_owned()]);
        assert!(
            gc.decide(full, &images, &used, &none, retry_at)
                .remove
                .is_empty()
        );
        assert!(
            gc.decide(full, &images, &none, &none, retry_at)
                .remove
                .is_empty()
        );
    }

    /// An image: size, created, in use, configured, unused for (seconds).
    type ImageCase = (u64, i64, bool, bool, Option<u64>);

    // r[verify actuate.image.gc+4]
    #[test]
    fn the_real_disk_is_measured_as_df_does() {
        // 1000 blocks of 4 KiB, 300 free of which 250 available: the 50 reserved for root count
        // neither as used nor as available, so use is 700 of 950 blocks (74 %, as df shows it),
        // not 750 of 1000.
        let usage = DiskUsage::from_statvfs(1000, 300, 250, 4096);
        assert_eq!(
            usage,
            DiskUsage {
                used: 700 * 4096,
                total: 950 * 4096
            }
        );
        assert!(!usage.at_least(75) && usage.at_least(73));
        let usage = Statvfs.usage(Path::new("/")).unwrap();
        assert!(usage.total > 0 && usage.used <= usage.total, "{usage:?}");
        assert!(Statvfs.usage(Path::new("/nonexistent/data-root")).is_err());
    }

    fn arb_case() -> impl Strategy<Value = (DiskUsage, Vec<ImageCase>, (u8, u8))> {
        (
            (0u64..=1_000_000, 1u64..=1_000_000),
            proptest::collection::vec(
                (
                    0u64..200_000,
                    0i64..1000,
                    any::<bool>(),
                    any::<bool>(),
                    proptest::option::of(0u64..600),
                ),
                0..24,
            ),
            (1u8..=100, 0u8..100),
        )
            .prop_map(|((used, total), images, (high, low))| {
                (
                    DiskUsage {
                        used: used.min(total),
                        total,
                    },
                    images,
                    (high, low % high),
                )
            })
    }

    proptest! {
        // r[verify actuate.image.gc+4]
        #[test]
        fn never_an_image_in_use_or_configured_and_never_past_the_low_mark(
            (usage, specs, (high, low)) in arb_case(),
        ) {
            let now = Instant::now() + Duration::from_secs(10_000);
            let policy = GcPolicy::new(high, low, DEFAULT_GC_GRACE).unwrap();
            let mut images = Vec::new();
            let mut in_use = BTreeSet::new();
            let mut configured = BTreeSet::new();
            let mut since = BTreeMap::new();
            for (i, (size, created, used, conf, unused_for)) in specs.iter().enumerate() {
                let img = image(&format!("i{i}"), *size, *created);
                if *used { in_use.insert(img.id.clone()); }
                if *conf { configured.insert(img.tags[0].clone()); }
                if let Some(s) = unused_for {
                    since.insert(img.id.clone(), now - Duration::from_secs(*s));
                }
                images.push(img);
            }
            let out = plan(&policy, usage, &images, &in_use, &configured, &since, now);
            let sum: u64 = out.remove.iter().map(|i| i.size).sum();
            prop_assert_eq!(sum, out.freed);
            if !usage.at_least(high) {
                prop_assert!(out.remove.is_empty());
            }
            let mut previous: Option<(Instant, i64)> = None;
            for (n, img) in out.remove.iter().enumerate() {
                prop_assert!(!in_use.contains(&img.id));
                prop_assert!(!configured.contains(&img.tags[0]));
                let s = since[&img.id];
                prop_assert!(now.duration_since(s) >= DEFAULT_GC_GRACE);
                // Oldest unused first.
                if let Some(p) = previous { prop_assert!(p <= (s, img.created)); }
                previous = Some((s, img.created));
                // Stops once the low mark is reached: before the last pick, not yet enough.
                let before: u64 = out.remove[..n].iter().map(|i| i.size).sum();
                prop_assert!(before < out.to_free);
            }
            // Enough eligible bytes always reach the target.
            let eligible: u64 = images.iter()
                .filter(|i| !in_use.contains(&i.id) && !configured.contains(&i.tags[0]))
                .filter(|i| since.get(&i.id).is_some_and(|s| now.duration_since(*s) >= DEFAULT_GC_GRACE))
                .map(|i| i.size).sum();
            if usage.at_least(high) && eligible >= out.to_free {
                prop_assert!(out.freed >= out.to_free);
            }
        }
    }
}
