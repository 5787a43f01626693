//! A real client's samples on one edge, summarised: percentiles by nearest rank, failures apart.

use std::time::Duration;

use serde::Serialize;

/// What one probe of an edge gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sample {
    /// Served, in this long.
    Served(Duration),
    /// Not served: refused, closed, wrong answer or no answer within the probe's timeout.
    Failed,
}

/// The summary of an edge's samples during one flood.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct Summary {
    /// Probes made.
    pub probes: usize,
    /// Probes not served.
    pub failed: usize,
    /// Median of the served probes, in milliseconds.
    pub p50_ms: f64,
    /// 99th percentile of the served probes, in milliseconds.
    pub p99_ms: f64,
    /// Slowest served probe, in milliseconds.
    pub max_ms: f64,
}

// i[impl attack.latency+2]
/// Summarises `samples`: nearest-rank percentiles over the served probes; zero when none was served.
pub fn summarise(samples: &[Sample]) -> Summary {
    let mut served: Vec<Duration> = samples
        .iter()
        .filter_map(|s| match s {
            Sample::Served(d) => Some(*d),
            Sample::Failed => None,
        })
        .collect();
    served.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    Summary {
        probes: samples.len(),
        failed: samples.len() - served.len(),
        p50_ms: rank(&served, 50).map_or(0.0, ms),
        p99_ms: rank(&served, 99).map_or(0.0, ms),
        max_ms: served.last().copied().map_or(0.0, ms),
    }
}

/// The nearest-rank percentile `p` of sorted `values`.
fn rank(values: &[Duration], p: usize) -> Option<Duration> {
    if values.is_empty() {
        return None;
    }
    let index = (p * values.len()).div_ceil(100).max(1) - 1;
    values.get(index.min(values.len() - 1)).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Sample {
        Sample::Served(Duration::from_millis(n))
    }

    // i[verify attack.latency+2]
    #[test]
    fn percentiles_are_nearest_rank_over_served_probes_and_failures_are_counted_apart() {
        let mut samples: Vec<Sample> = (1..=100).map(ms).collect();
        samples.push(Sample::Failed);
        let s = summarise(&samples);
        assert_eq!(s.probes, 101);
        assert_eq!(s.failed, 1);
        assert_eq!(s.p50_ms, 50.0);
        assert_eq!(s.p99_ms, 99.0);
        assert_eq!(s.max_ms, 100.0);

        let one = summarise(&[ms(7)]);
        assert_eq!((one.p50_ms, one.p99_ms, one.max_ms), (7.0, 7.0, 7.0));

        let none = summarise(&[Sample::Failed, Sample::Failed]);
        assert_eq!((none.probes, none.failed, none.p99_ms), (2, 2, 0.0));

        // Unsorted input: the slow outlier is the p99 of 10 samples (rank 10).
        let mut ten: Vec<Sample> = (0..9).map(|_| ms(1)).collect();
        ten.insert(3, ms(900));
        assert_eq!(summarise(&ten).p99_ms, 900.0);
        assert_eq!(summarise(&ten).p50_ms, 1.0);
    }
}
