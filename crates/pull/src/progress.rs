//! Pull progress per reference, folded from the daemon's progress stream: layers seen and done,
//! bytes downloaded and known totals. It is what the node's status output shows while a pull is in
//! flight, and it is what the watchdog counts as progress.

use std::collections::BTreeMap;

use bollard::models::CreateImageInfo;

/// A snapshot of one pull's progress.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PullProgress {
    /// Layers the daemon has announced for this pull.
    pub layers: usize,
    /// Layers that are complete ("Pull complete" or "Already exists").
    pub layers_done: usize,
    /// Bytes downloaded so far, summed over layers.
    pub bytes_downloaded: u64,
    /// Sum of the layer sizes the daemon has reported (a lower bound until every layer started).
    pub bytes_total: u64,
    /// The daemon's most recent status line, e.g. "Downloading" or "Pulling from holdfast/busybox".
    pub last_status: Option<String>,
}

/// How far one layer has got. Ordered: a layer only ever moves forward through these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum LayerPhase {
    Waiting,
    Announced,
    Downloading,
    Verifying,
    Downloaded,
    Extracting,
    Done,
}

#[derive(Debug, Clone)]
struct Layer {
    phase: LayerPhase,
    downloaded: u64,
    extracted: u64,
    total: u64,
}

/// At most this many layers are tracked per pull. A real image has at most 127 layers (the
/// overlay driver's limit); a daemon announcing more is not believed beyond this, so memory stays
/// bounded whatever the daemon sends.
pub const MAX_TRACKED_LAYERS: usize = 512;

/// Longest layer id kept; a longer one is not a layer id the daemon would send, and is ignored.
pub const MAX_LAYER_ID_LEN: usize = 128;

/// Longest status line kept for display; a longer one is cut (at a character boundary).
pub const MAX_STATUS_LEN: usize = 256;

/// Folds progress messages into a [`PullProgress`] and tells whether each message was an advance.
#[derive(Debug, Default)]
pub struct ProgressTracker {
    layers: BTreeMap<String, Layer>,
    last_status: Option<String>,
}

impl ProgressTracker {
    /// A tracker that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    // r[impl actuate.image.watchdog+3]
    // r[impl actuate.image.progress.bounded]
    /// Folds one message in. Returns `true` when it is an advance: more bytes of a layer
    /// downloaded or extracted, or a layer completing (downloaded, or done). Nothing else moves
    /// the watchdog: not a new status line, not a new layer id, not a phase change short of
    /// completion, so a daemon that chatters (dockerd's "Retrying in N seconds" countdown, a
    /// stream of new status strings or layer ids) cannot keep a stalled pull alive. What is kept
    /// is bounded ([`MAX_TRACKED_LAYERS`], [`MAX_LAYER_ID_LEN`], [`MAX_STATUS_LEN`]).
    pub fn observe(&mut self, info: &CreateImageInfo) -> bool {
        let status = info.status.as_deref().unwrap_or_default();
        if !status.is_empty() {
            self.last_status = Some(truncated(status, MAX_STATUS_LEN));
        }
        let Some(id) = info
            .id
            .as_deref()
            .filter(|id| is_layer_status(status) && id.len() <= MAX_LAYER_ID_LEN)
        else {
            // A pull-level status ("Pulling from ...", "Digest: ...", "Status: ..."): shown, never
            // progress.
            return false;
        };
        if !self.layers.contains_key(id) && self.layers.len() >= MAX_TRACKED_LAYERS {
            return false;
        }
        let phase = layer_phase(status);
        let detail = info.progress_detail.as_ref();
        let current = detail
            .and_then(|d| d.current)
            .and_then(|c| u64::try_from(c).ok());
        let total = detail
            .and_then(|d| d.total)
            .and_then(|t| u64::try_from(t).ok());
        let mut advanced = false;
        let layer = self.layers.entry(id.to_owned()).or_insert(Layer {
            phase: LayerPhase::Waiting,
            downloaded: 0,
            extracted: 0,
            total: 0,
        });
        if let Some(phase) = phase
            && phase > layer.phase
        {
            let completes = |stage: LayerPhase| layer.phase < stage && phase >= stage;
            advanced |= completes(LayerPhase::Downloaded) || completes(LayerPhase::Done);
            layer.phase = phase;
        }
        if let Some(total) = total
            && total > layer.total
            && matches!(phase, Some(LayerPhase::Downloading))
        {
            layer.total = total;
        }
        if let Some(current) = current {
            let counter = match phase {
                Some(LayerPhase::Downloading) => Some(&mut layer.downloaded),
                Some(LayerPhase::Extracting) => Some(&mut layer.extracted),
                _ => None,
            };
            if let Some(counter) = counter
                && current > *counter
            {
                *counter = current;
                advanced = true;
            }
        }
        if layer.phase >= LayerPhase::Downloaded && layer.total > 0 {
            layer.downloaded = layer.total;
        }
        advanced
    }

    /// The progress so far. Byte sums saturate: a daemon reporting sizes near `i64::MAX` for
    /// several layers shows the maximum, never a wrapped (or panicking) sum.
    pub fn snapshot(&self) -> PullProgress {
        let sum = |bytes: fn(&Layer) -> u64| {
            self.layers
                .values()
                .map(bytes)
                .fold(0u64, u64::saturating_add)
        };
        PullProgress {
            layers: self.layers.len(),
            layers_done: self
                .layers
                .values()
                .filter(|l| l.phase == LayerPhase::Done)
                .count(),
            bytes_downloaded: sum(|l| l.downloaded),
            bytes_total: sum(|l| l.total),
            last_status: self.last_status.clone(),
        }
    }
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn truncated(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

fn is_layer_status(status: &str) -> bool {
    // Layer messages carry the short layer id; pull-level ones carry the tag as id
    // ("Pulling from holdfast/busybox", id "latest") or none.
    !status.starts_with("Pulling from")
        && !status.starts_with("Digest:")
        && !status.starts_with("Status:")
}

fn layer_phase(status: &str) -> Option<LayerPhase> {
    let phase = match status {
        "Waiting" => LayerPhase::Waiting,
        "Pulling fs layer" => LayerPhase::Announced,
        "Downloading" => LayerPhase::Downloading,
        "Verifying Checksum" => LayerPhase::Verifying,
        "Download complete" => LayerPhase::Downloaded,
        "Extracting" => LayerPhase::Extracting,
        "Pull complete" | "Already exists" => LayerPhase::Done,
        _ => return None,
    };
    Some(phase)
}

#[cfg(test)]
mod tests {
    use bollard::models::ProgressDetail;

    use super::*;

    fn msg(
        status: &str,
        id: Option<&str>,
        current: Option<i64>,
        total: Option<i64>,
    ) -> CreateImageInfo {
        CreateImageInfo {
            id: id.map(str::to_owned),
            status: Some(status.to_owned()),
            progress_detail: if current.is_some() || total.is_some() {
                Some(ProgressDetail { current, total })
            } else {
                None
            },
            ..Default::default()
        }
    }

    // r[verify actuate.image.progress]
    // r[verify actuate.image.watchdog+3]
    #[test]
    fn a_real_pull_sequence_folds_into_bytes_and_layers() {
        // The message sequence dockerd 20.10 sends for a one-layer image, and whether each one
        // is an advance (bytes, or a layer completing).
        let mut tracker = ProgressTracker::new();
        let seq = [
            (
                msg("Pulling from holdfast/busybox", Some("latest"), None, None),
                false,
            ),
            (
                msg("Pulling fs layer", Some("8acd48497341"), None, None),
                false,
            ),
            (
                msg(
                    "Downloading",
                    Some("8acd48497341"),
                    Some(32768),
                    Some(1_000_000),
                ),
                true,
            ),
            (
                msg(
                    "Downloading",
                    Some("8acd48497341"),
                    Some(500_000),
                    Some(1_000_000),
                ),
                true,
            ),
            (
                msg("Verifying Checksum", Some("8acd48497341"), None, None),
                false,
            ),
            (
                msg("Download complete", Some("8acd48497341"), None, None),
                true,
            ),
            (
                msg(
                    "Extracting",
                    Some("8acd48497341"),
                    Some(65536),
                    Some(1_000_000),
                ),
                true,
            ),
            (msg("Pull complete", Some("8acd48497341"), None, None), true),
            (msg("Digest: sha256:79730e4a", None, None, None), false),
            (
                msg(
                    "Status: Downloaded newer image for 127.0.0.1:5055/holdfast/busybox:latest",
                    None,
                    None,
                    None,
                ),
                false,
            ),
        ];
        for (m, advance) in &seq {
            assert_eq!(tracker.observe(m), *advance, "{m:?}");
        }
        let p = tracker.snapshot();
        assert_eq!(p.layers, 1);
        assert_eq!(p.layers_done, 1);
        assert_eq!(p.bytes_total, 1_000_000);
        assert_eq!(p.bytes_downloaded, 1_000_000);
        assert!(
            p.last_status
                .as_deref()
                .is_some_and(|s| s.starts_with("Status:"))
        );
        // A layer the daemon already has completes at once: that is an advance too.
        assert!(tracker.observe(&msg("Already exists", Some("0123456789ab"), None, None)));
    }

    // r[verify actuate.image.watchdog+3]
    #[test]
    fn repeats_and_retry_countdowns_are_not_progress() {
        let mut tracker = ProgressTracker::new();
        assert!(tracker.observe(&msg("Downloading", Some("abc"), Some(10), Some(100))));
        assert!(!tracker.observe(&msg("Downloading", Some("abc"), Some(10), Some(100))));
        assert!(!tracker.observe(&msg("Retrying in 5 seconds", Some("abc"), None, None)));
        assert!(!tracker.observe(&msg("Retrying in 4 seconds", Some("abc"), None, None)));
        // Going back to Downloading after a retry is not a later phase; more bytes are.
        assert!(!tracker.observe(&msg("Downloading", Some("abc"), Some(10), Some(100))));
        assert!(tracker.observe(&msg("Downloading", Some("abc"), Some(11), Some(100))));
        assert_eq!(tracker.snapshot().bytes_downloaded, 11);
        assert_eq!(tracker.snapshot().layers_done, 0);
    }

    // r[verify actuate.image.watchdog+3]
    // r[verify actuate.image.progress.bounded]
    #[test]
    fn a_chatty_daemon_is_no_progress_and_is_held_in_bounded_memory() {
        let mut tracker = ProgressTracker::new();
        // Every message new, none of them bytes or a completed layer.
        for i in 0..10_000 {
            let status = format!("Pulling from holdfast/busybox attempt {i}");
            assert!(!tracker.observe(&msg(&status, Some("latest"), None, None)));
            let layer = format!("{i:012x}");
            assert!(!tracker.observe(&msg("Pulling fs layer", Some(&layer), None, None)));
            assert!(!tracker.observe(&msg("Waiting", Some(&layer), None, None)));
        }
        let p = tracker.snapshot();
        assert_eq!(p.layers, MAX_TRACKED_LAYERS, "layers kept are bounded");
        let huge = "x".repeat(100_000);
        assert!(!tracker.observe(&msg(&huge, None, None, None)));
        assert_eq!(
            tracker.snapshot().last_status.map(|s| s.len()),
            Some(MAX_STATUS_LEN)
        );
        let long_id = "y".repeat(MAX_LAYER_ID_LEN + 1);
        assert!(!tracker.observe(&msg("Downloading", Some(&long_id), Some(5), Some(9))));
        assert_eq!(tracker.snapshot().layers, MAX_TRACKED_LAYERS);
        // "é" is two bytes: a cut never splits a character.
        assert_eq!(truncated("aé", 2), "a");
    }

    // r[verify actuate.image.progress.bounded]
    #[test]
    fn byte_sums_saturate() {
        let mut tracker = ProgressTracker::new();
        for layer in ["a", "b", "c"] {
            tracker.observe(&msg(
                "Downloading",
                Some(layer),
                Some(i64::MAX - 1),
                Some(i64::MAX),
            ));
        }
        let p = tracker.snapshot();
        assert_eq!(p.bytes_total, u64::MAX);
        assert_eq!(p.bytes_downloaded, u64::MAX);
    }
}
