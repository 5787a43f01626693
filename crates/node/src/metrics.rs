//! The node's one Prometheus registry.

use prometheus_client::encoding::{EncodeLabelSet, text::encode};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels naming a module.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModuleLabel {
    /// The module.
    pub module: String,
}

/// Labels of a retry transition.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransitionLabel {
    /// The module whose gate it was.
    pub module: String,
    /// `succeeded`, `failed`, `expired`, `superseded`, `released`, `escalated`, `recovered`.
    pub reason: String,
}

/// Labels of a pull outcome.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// `present`, `failed` or `daemon_unreachable`.
    pub outcome: String,
}

/// Every metric the node exports, registered in one registry. Cheap to clone (shared).
#[derive(Clone)]
pub struct Metrics {
    registry: std::sync::Arc<Registry>,
    /// Module starts attempted.
    pub module_starts: Family<ModuleLabel, Counter>,
    /// Module starts that failed.
    pub module_start_failures: Family<ModuleLabel, Counter>,
    /// Module restarts after its task ended.
    pub module_restarts: Family<ModuleLabel, Counter>,
    /// Crash loops detected.
    pub module_crash_loops: Family<ModuleLabel, Counter>,
    /// 1 while the module reports itself ready.
    pub module_ready: Family<ModuleLabel, Gauge>,
    /// Retry gate transitions.
    pub retry_transitions: Family<TransitionLabel, Counter>,
    /// Open faults on the node's fault board.
    pub faults_open: Gauge,
    /// Pull attempts and their outcomes.
    pub pull_outcomes: Family<OutcomeLabel, Counter>,
    /// 1 while the node is draining.
    pub draining: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric registered.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("holdfast");
        let m = MetricsParts::default();
        registry.register(
            "module_starts",
            "Module starts attempted",
            m.module_starts.clone(),
        );
        registry.register(
            "module_start_failures",
            "Module starts that failed",
            m.module_start_failures.clone(),
        );
        registry.register(
            "module_restarts",
            "Module restarts after the module's task ended",
            m.module_restarts.clone(),
        );
        registry.register(
            "module_crash_loops",
            "Crash loops detected per module",
            m.module_crash_loops.clone(),
        );
        registry.register(
            "module_ready",
            "1 while the module reports itself ready",
            m.module_ready.clone(),
        );
        registry.register(
            "retry_transitions",
            "Retry gate transitions per module and reason",
            m.retry_transitions.clone(),
        );
        registry.register(
            "faults_open",
            "Open faults on the node's fault board",
            m.faults_open.clone(),
        );
        registry.register(
            "pull_outcomes",
            "Image pull attempts by outcome",
            m.pull_outcomes.clone(),
        );
        registry.register(
            "draining",
            "1 while the node is draining",
            m.draining.clone(),
        );
        Metrics {
            registry: std::sync::Arc::new(registry),
            module_starts: m.module_starts,
            module_start_failures: m.module_start_failures,
            module_restarts: m.module_restarts,
            module_crash_loops: m.module_crash_loops,
            module_ready: m.module_ready,
            retry_transitions: m.retry_transitions,
            faults_open: m.faults_open,
            pull_outcomes: m.pull_outcomes,
            draining: m.draining,
        }
    }

    /// Counts one transition of `module`'s gate.
    pub fn transition<K>(&self, module: &str, t: &holdfast_retry::Transition<K>) {
        use holdfast_retry::{Escalation, Reason};
        let reason = match t.reason {
            Reason::Succeeded => "succeeded",
            Reason::Failed { .. } => "failed",
            Reason::Expired => "expired",
            Reason::Superseded => "superseded",
            Reason::Released => "released",
        };
        let mut reasons = vec![reason];
        match t.escalation {
            Some(Escalation::Escalated) => reasons.push("escalated"),
            Some(Escalation::Recovered) => reasons.push("recovered"),
            None => {}
        }
        for reason in reasons {
            self.retry_transitions
                .get_or_create(&TransitionLabel {
                    module: module.to_owned(),
                    reason: reason.to_owned(),
                })
                .inc();
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[derive(Default)]
struct MetricsParts {
    module_starts: Family<ModuleLabel, Counter>,
    module_start_failures: Family<ModuleLabel, Counter>,
    module_restarts: Family<ModuleLabel, Counter>,
    module_crash_loops: Family<ModuleLabel, Counter>,
    module_ready: Family<ModuleLabel, Gauge>,
    retry_transitions: Family<TransitionLabel, Counter>,
    faults_open: Gauge,
    pull_outcomes: Family<OutcomeLabel, Counter>,
    draining: Gauge,
}

/// The label for `module`.
pub fn module(name: &str) -> ModuleLabel {
    ModuleLabel {
        module: name.to_owned(),
    }
}
