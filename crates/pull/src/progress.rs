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
    /// Folds one message in. Returns `true` when it is an advance: more bytes of a layer
    /// downloaded or extracted, or a layer completing (downloaded, or done). Nothing else moves
    /// the watchdog: not a new status line, not a new layer id, not a phase change short of
    /// completion, so a daemon that chatters (dockerd's "Retrying in N seconds" countdown, a
    /// stream of new status strings or layer ids) cannot keep a stalled pull alive. What is kept
    /// is bounded ([`MAX_TRACKED_LAYERS`], [`MAX_LAYER_ID_LEN`], [`MAX_STATUS_LEN`]).
    pub fn observe(&mut self, info: &CreateImageInfo) -> bool {
        let status = info.status.as_deref().unwrap_or_default();
        let Some(layer) = self.admit(status, info.id.as_deref()) else {
            // A pull-level status ("Pulling from ...", "Digest: ...", "Status: ..."), or a layer
            // not kept: shown, never progress.
            return false;
        };
        let phase = layer_phase(status);
        let detail = info.progress_detail.as_ref();
        let current = detail
            .and_then(|d| d.current)
            .and_then(|c| u64::try_from(c).ok());
        let total = detail
            .and_then(|d| d.total)
            .and_then(|t| u64::try_from(t).ok());
        let advanced = layer.advance(phase, current);
        layer.account(phase, total);
        advanced
    }

    // r[impl actuate.image.progress.bounded]
    /// Keeps the message's status line (cut to [`MAX_STATUS_LEN`]) and returns the layer it is
    /// about, if it is a layer message and the layer is kept: ids longer than
    /// [`MAX_LAYER_ID_LEN`] are ignored, and no layer beyond [`MAX_TRACKED_LAYERS`] is added.
    fn admit(&mut self, status: &str, id: Option<&str>) -> Option<&mut Layer> {
        if !status.is_empty() {
            self.last_status = Some(truncated(status, MAX_STATUS_LEN));
        }
        let id = id.filter(|id| is_layer_status(status) && id.len() <= MAX_LAYER_ID_LEN)?;
        if !self.layers.contains_key(id) && self.layers.len() >= MAX_TRACKED_LAYERS {
            return None;
        }
        Some(self.layers.entry(id.to_owned()).or_insert(Layer {
            phase: LayerPhase::Waiting,
            downloaded: 0,
            extracted: 0,
            total: 0,
        }))
    }

    /// The progress so far. Byte sums saturate: a daemon reporting sizes near `i64::MAX` for
    /// several layers shows the maximum, never a wrapped (or panicking) sum.
    pub fn snapshot(&self) -> PullProgress {
        let sum = |bytes: fn(&Layer) -> u64| saturating_sum(self.layers.values().map(bytes));
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

impl Layer {
    // r[impl actuate.image.watchdog+3]
    /// Moves the layer on by one message of `phase` carrying `current` bytes; `true` when that
    /// is an advance: the layer completing a stage (downloaded, done), or more bytes of its
    /// download or extraction. A phase the layer has already passed moves nothing.
    fn advance(&mut self, phase: Option<LayerPhase>, current: Option<u64>) -> bool {
        let mut advanced = false;
        if let Some(phase) = phase {
            let completes = |stage: LayerPhase| self.phase < stage && phase >= stage;
            advanced |= completes(LayerPhase::Downloaded) || completes(LayerPhase::Done);
            self.phase = self.phase.max(phase);
        }
        let counter = match phase {
            Some(LayerPhase::Downloading) => Some(&mut self.downloaded),
            Some(LayerPhase::Extracting) => Some(&mut self.extracted),
            _ => None,
        };
        if let (Some(counter), Some(current)) = (counter, current)
            && current > *counter
        {
            *counter = current;
            advanced = true;
        }
        advanced
    }

    // r[impl actuate.image.progress]
    /// Keeps the layer's size as the download reports it (extraction reports other sizes), and
    /// counts a layer whose size is known as fully downloaded once its download completed
    /// (dockerd sends no final byte count); without a known size, the bytes seen stand.
    fn account(&mut self, phase: Option<LayerPhase>, total: Option<u64>) {
        if phase == Some(LayerPhase::Downloading)
            && let Some(total) = total
        {
            self.total = self.total.max(total);
        }
        if self.phase >= LayerPhase::Downloaded && self.total > 0 {
            self.downloaded = self.total;
        }
    }
}

// r[impl actuate.image.progress.bounded]
/// The sum of byte counts, saturating at `u64::MAX` rather than wrapping or panicking.
fn saturating_sum(bytes: impl Iterator<Item = u64>) -> u64 {
    bytes.fold(0, u64::saturating_add)
}

// r[impl actuate.image.progress.bounded]
/// `text` cut to at most `max` bytes, at a character boundary.
fn truncated(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

// r[impl actuate.image.watchdog+3]
/// Whether `status` is about one layer; a pull-level status line is never a layer's progress.
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
    #[test]
    fn a_phase_change_short_of_completion_is_not_progress() {
        let mut tracker = ProgressTracker::new();
        let layer = Some("8acd48497341");
        let seq = [
            (msg("Pulling fs layer", layer, None, None), false),
            // Phases with no bytes, short of a completed download.
            (msg("Waiting", layer, None, None), false),
            (msg("Downloading", layer, None, None), false),
            (msg("Verifying Checksum", layer, None, None), false),
            (msg("Download complete", layer, None, None), true),
            // Completion is once: saying it again, or a phase already passed, is no advance.
            (msg("Download complete", layer, None, None), false),
            (msg("Verifying Checksum", layer, None, None), false),
            // Extraction starting is a phase change, not a completion; its bytes are progress.
            (msg("Extracting", layer, None, None), false),
            (msg("Extracting", layer, Some(10), Some(100)), true),
            (msg("Extracting", layer, Some(10), Some(100)), false),
            (msg("Pull complete", layer, None, None), true),
            (msg("Pull complete", layer, None, None), false),
        ];
        for (m, advance) in &seq {
            assert_eq!(tracker.observe(m), *advance, "{m:?}");
        }
    }

    // r[verify actuate.image.progress]
    #[test]
    fn sizes_come_from_the_download_and_seen_bytes_stand_without_one() {
        let mut tracker = ProgressTracker::new();
        tracker.observe(&msg(
            "Downloading",
            Some("a"),
            Some(32_768),
            Some(1_000_000),
        ));
        let p = tracker.snapshot();
        assert_eq!(
            (p.bytes_downloaded, p.bytes_total),
            (32_768, 1_000_000),
            "mid-download, the bytes so far of the known size"
        );
        tracker.observe(&msg("Download complete", Some("a"), None, None));
        // Extraction reports sizes of its own; the layer's size is its download's.
        tracker.observe(&msg("Extracting", Some("a"), Some(65_536), Some(2_000_000)));
        let p = tracker.snapshot();
        assert_eq!((p.bytes_downloaded, p.bytes_total), (1_000_000, 1_000_000));
        // A layer whose size never came keeps the bytes seen, before and after its download.
        tracker.observe(&msg("Downloading", Some("b"), Some(500), None));
        assert_eq!(tracker.snapshot().bytes_downloaded, 1_000_500);
        tracker.observe(&msg("Download complete", Some("b"), None, None));
        let p = tracker.snapshot();
        assert_eq!((p.bytes_downloaded, p.bytes_total), (1_000_500, 1_000_000));
        assert_eq!((p.layers, p.layers_done), (2, 0));
    }

    // r[verify actuate.image.progress.bounded]
    #[test]
    fn an_overlong_layer_id_is_never_kept() {
        let mut tracker = ProgressTracker::new();
        let long_id = "y".repeat(MAX_LAYER_ID_LEN + 1);
        assert!(!tracker.observe(&msg("Downloading", Some(&long_id), Some(5), Some(9))));
        assert!(!tracker.observe(&msg("Pull complete", Some(&long_id), None, None)));
        let p = tracker.snapshot();
        assert_eq!((p.layers, p.bytes_downloaded, p.bytes_total), (0, 0, 0));
        // The longest id kept is kept.
        let longest = "z".repeat(MAX_LAYER_ID_LEN);
        tracker.observe(&msg("Downloading", Some(&longest), Some(5), Some(9)));
        assert_eq!(tracker.snapshot().layers, 1);
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
