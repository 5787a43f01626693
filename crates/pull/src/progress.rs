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

/// Folds progress messages into a [`PullProgress`] and tells whether each message was an advance.
#[derive(Debug, Default)]
pub struct ProgressTracker {
    layers: BTreeMap<String, Layer>,
    statuses: Vec<String>,
    last_status: Option<String>,
}

impl ProgressTracker {
    /// A tracker that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    // r[impl actuate.image.progress]
    /// Folds one message in. Returns `true` when it is an advance: a new layer, a layer reaching
    /// a later phase, more bytes downloaded or extracted, or a new pull-level status. Repeated
    /// messages that move nothing forward (dockerd's "Retrying in N seconds" countdown, a
    /// repeated byte count) are not progress.
    pub fn observe(&mut self, info: &CreateImageInfo) -> bool {
        let status = info.status.clone().unwrap_or_default();
        if !status.is_empty() {
            self.last_status = Some(status.clone());
        }
        let Some(id) = info.id.as_deref().filter(|_| is_layer_status(&status)) else {
            // A pull-level status ("Pulling from ...", "Digest: ...", "Status: ...").
            if status.is_empty() || self.statuses.contains(&status) {
                return false;
            }
            self.statuses.push(status);
            return true;
        };
        let phase = layer_phase(&status);
        let detail = info.progress_detail.as_ref();
        let current = detail
            .and_then(|d| d.current)
            .and_then(|c| u64::try_from(c).ok());
        let total = detail
            .and_then(|d| d.total)
            .and_then(|t| u64::try_from(t).ok());
        let mut advanced = false;
        let layer = self.layers.entry(id.to_owned()).or_insert_with(|| {
            advanced = true;
            Layer {
                phase: LayerPhase::Waiting,
                downloaded: 0,
                extracted: 0,
                total: 0,
            }
        });
        if let Some(phase) = phase
            && phase > layer.phase
        {
            layer.phase = phase;
            advanced = true;
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

    /// The progress so far.
    pub fn snapshot(&self) -> PullProgress {
        PullProgress {
            layers: self.layers.len(),
            layers_done: self
                .layers
                .values()
                .filter(|l| l.phase == LayerPhase::Done)
                .count(),
            bytes_downloaded: self.layers.values().map(|l| l.downloaded).sum(),
            bytes_total: self.layers.values().map(|l| l.total).sum(),
            last_status: self.last_status.clone(),
        }
    }
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
    #[test]
    fn a_real_pull_sequence_folds_into_bytes_and_layers() {
        // The message sequence dockerd 20.10 sends for a one-layer image.
        let mut tracker = ProgressTracker::new();
        let seq = [
            msg("Pulling from holdfast/busybox", Some("latest"), None, None),
            msg("Pulling fs layer", Some("8acd48497341"), None, None),
            msg(
                "Downloading",
                Some("8acd48497341"),
                Some(32768),
                Some(1_000_000),
            ),
            msg(
                "Downloading",
                Some("8acd48497341"),
                Some(500_000),
                Some(1_000_000),
            ),
            msg("Verifying Checksum", Some("8acd48497341"), None, None),
            msg("Download complete", Some("8acd48497341"), None, None),
            msg(
                "Extracting",
                Some("8acd48497341"),
                Some(65536),
                Some(1_000_000),
            ),
            msg("Pull complete", Some("8acd48497341"), None, None),
            msg("Digest: sha256:79730e4a", None, None, None),
            msg(
                "Status: Downloaded newer image for 127.0.0.1:5055/holdfast/busybox:latest",
                None,
                None,
                None,
            ),
        ];
        for m in &seq {
            assert!(tracker.observe(m), "{m:?} should be an advance");
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
    }

    // r[verify actuate.image.progress]
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
}
