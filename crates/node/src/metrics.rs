//! The node's one Prometheus registry.

use prometheus_client::encoding::{EncodeLabelSet, text::encode};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

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

/// Labels of an issuance attempt count.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptLabel {
    /// `acme` or `local`.
    pub source: String,
    /// `success` or `failure`.
    pub outcome: String,
}

/// Labels naming a hostname.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HostnameLabel {
    /// The hostname.
    pub hostname: String,
}

/// Labels naming one active forward.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ForwardLabel {
    /// `CONNECTION/FORWARD`, unique while the node runs.
    pub forward: String,
    /// The client's address.
    pub client: String,
    /// The target's address.
    pub target: String,
}

/// Labels naming one workload.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkloadLabel {
    /// The workload's name.
    pub workload: String,
}

/// Labels of one direction of one forward.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ForwardDirectionLabel {
    /// `CONNECTION/FORWARD`.
    pub forward: String,
    /// The target's address.
    pub target: String,
    /// `to_target` or `from_target`.
    pub direction: String,
}

/// Labels of one drop reason of one forward.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ForwardDropLabel {
    /// `CONNECTION/FORWARD`.
    pub forward: String,
    /// The target's address.
    pub target: String,
    /// `oversize`, `malformed`, `unknown_forward`, `flow_limit` or `error`.
    pub reason: String,
}

/// Labels of the gateway's connection gauge.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConnStateLabel {
    /// `authenticated` or `unauthenticated`.
    pub state: String,
}

/// Labels of the gateway's message counter.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DirectionLabel {
    /// `in` (from clients) or `out` (to clients).
    pub direction: String,
}

/// Labels of a gateway drain step.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabel {
    /// `stop_accepting`, `close`, `handshake` or `routing`.
    pub step: String,
}

/// Labels of a connection, an attempt or a forward the forward server turned away.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ForwardRefusalLabel {
    /// `max_unauthenticated` and `max_unauthenticated_per_source` (attempts refused at those
    /// bounds), `paced` (an attempt refused because its source failed recently),
    /// `handshake_failed`, `timed_out` (no handshake and credential in time), `auth_failed`,
    /// `closed_unauthenticated` (closed by its peer before authenticating), `max_connections` and
    /// `max_connections_per_token` (refused after authenticating, at those bounds), or
    /// `target_not_allowed` (a forward whose target is outside its credential's allow-list).
    pub reason: String,
}

/// Labels of a QUIC Retry the forward server sent: why it asked the peer to prove its address.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ForwardRetryLabel {
    /// `address_validation` (every Retry today: not a refusal, the normal first step of a client
    /// whose address the server has not validated yet).
    pub reason: String,
}

/// Labels of what a reload's live update of the forward's access did.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ForwardAccessLabel {
    /// `update` (one installed), `forward_ended` (an open forward whose target is no longer
    /// allowed) or `connection_ended` (one whose credential is no longer accepted).
    pub event: String,
}

/// Labels of a datagram the forward server dropped before any forward could be charged with it.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ForwardUnattributedLabel {
    /// `unauthenticated` (arrived before its connection authenticated), `oversize`,
    /// `malformed`, `unknown_forward`, `flow_limit` or `error`.
    pub reason: String,
}

/// The forward server's own figures, beside the per-forward ones: its connections and what it
/// turned away (read at each scrape).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForwardServerFigures {
    /// The connection counters (`Server::connections`).
    pub connections: holdfast_forward::ConnectionStats,
    /// Datagrams no forward could be charged with, by reason (`Server::unattributed`).
    pub unattributed: holdfast_forward::stats::Drops,
    /// Forwards refused for a target outside the allow-list (`Server::refused_targets`).
    pub refused_targets: u64,
    /// Flow sockets open now, across every connection (`Server::flow_sockets`).
    pub flow_sockets: usize,
    /// What the reloads' live access updates did (`Server::access_stats`).
    pub access: holdfast_forward::AccessStats,
}

impl ForwardServerFigures {
    /// The figures of `server` now.
    pub fn of(server: &holdfast_forward::Server) -> Self {
        ForwardServerFigures {
            connections: server.connections(),
            unattributed: server.unattributed().dropped,
            refused_targets: server.refused_targets(),
            flow_sockets: server.flow_sockets(),
            access: server.access_stats(),
        }
    }
}

/// Labels of a connection the gateway refused.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GatewayRefusalLabel {
    /// The limit it was over, named as its `[gateway]` key (`per_ip_limit`,
    /// `unauthenticated_limit`, `unauthenticated_per_ip_limit`), or `draining` (an upgrade
    /// refused during a drain).
    pub reason: String,
}

/// Labels of a room join (or a room push) the gateway refused.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JoinRefusalLabel {
    /// The limit it was over, named as its `[gateway]` key: `max_rooms_per_connection` or
    /// `max_room_name`; or `permission` (the token did not allow the room).
    pub reason: String,
}

/// Labels of a room message of the gateway that arrived before some of its predecessors.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RoomGapLabel {
    /// `filled` (read from the room's stream and delivered first) or `lost` (the stream no
    /// longer held them).
    pub result: String,
}

/// Labels of a reload of the gateway's token key files or TLS pair.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KeyReloadLabel {
    /// `ok` (new keys in use) or `failed` (the previous keys kept).
    pub result: String,
}

/// Labels of a client token the gateway refused.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenRefusalLabel {
    /// Why (`holdfast_gateway::TokenError::reason`): `expired`, `signature`, `audience`, ...
    pub reason: String,
}

/// Labels of a connection the HTTP-01 responder refused or cut off.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Http01RefusalLabel {
    /// `connection_limit` (closed at accept: the responder held its total),
    /// `per_source_limit` (closed at accept: its address held its cap), `header_timeout` (no
    /// complete request header in time) or `idle_timeout` (nothing read or written for the idle
    /// timeout).
    pub reason: String,
}

/// Labels of a connection the TLS-ALPN-01 listener refused or cut off.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TlsAlpn01RefusalLabel {
    /// `connection_limit` or `per_source_limit` (closed at accept), `handshake_timeout`,
    /// `protocol` (no `acme-tls/1` offered), `name` (no identifier in progress named) or
    /// `malformed` (no parsable ClientHello).
    pub reason: String,
}

/// Labels of an admin API refusal.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdminRefusalLabel {
    /// `host` (a request for another authority), `connection_limit` (a connection past the
    /// listener's cap), `per_source_limit` (a TCP connection past its source address's cap),
    /// `header_timeout` (no complete request head in time, idle included) or
    /// `request_timeout` (a request not answered in time, its body included).
    pub reason: String,
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
    /// Image collection runs, by outcome (`ran`, `skipped`, `timed_out`).
    pub pull_gc_runs: Family<OutcomeLabel, Counter>,
    /// Images image collection removed.
    pub pull_gc_removed: Counter,
    /// The bytes of the images image collection removed (their sizes as the daemon lists them).
    pub pull_gc_removed_bytes: Counter,
    /// Image removals by image collection that failed.
    pub pull_gc_failures: Counter,
    /// 1 while the node is draining.
    pub draining: Gauge,
    /// Certificate attempts finished since the issuance module started, by source and outcome.
    pub issuance_attempts: Family<AttemptLabel, Counter>,
    /// Hostnames whose issuance is blocked now.
    pub issuance_blocked: Gauge,
    /// Days until each stored certificate expires.
    pub issuance_days_to_expiry: Family<HostnameLabel, Gauge<f64, AtomicU64>>,
    /// Connections open on the HTTP-01 responder now (0 without one).
    pub issuance_http01_connections: Gauge,
    /// Connections the HTTP-01 responder refused or cut off since it started, by reason.
    pub issuance_http01_refused: Family<Http01RefusalLabel, Counter>,
    /// Connections open on the TLS-ALPN-01 listener now (0 without one).
    pub issuance_tls_alpn01_connections: Gauge,
    /// Connections the TLS-ALPN-01 listener refused or cut off since it started, by reason.
    pub issuance_tls_alpn01_refused: Family<TlsAlpn01RefusalLabel, Counter>,
    /// UDP forwards open on the node now.
    pub forwards_active: Gauge,
    /// Datagrams relayed per active forward and direction.
    pub forward_datagrams: Family<ForwardDirectionLabel, Counter>,
    /// Payload bytes relayed per active forward and direction.
    pub forward_bytes: Family<ForwardDirectionLabel, Counter>,
    /// Datagrams dropped per active forward and reason.
    pub forward_dropped: Family<ForwardDropLabel, Counter>,
    /// Transient socket errors met per active forward (each reported, none ended it).
    pub forward_transient_errors: Family<ForwardLabel, Counter>,
    /// Forward connections open now, authenticated or not (in their handshake or before their
    /// credential).
    pub forward_connections: Family<ConnStateLabel, Gauge>,
    /// Attempts, connections and forwards the forward server turned away since it started.
    pub forward_refused: Family<ForwardRefusalLabel, Counter>,
    /// QUIC Retries the forward server sent since it started (address validation).
    pub forward_retries: Family<ForwardRetryLabel, Counter>,
    /// Datagrams the forward server dropped unattributed since it started, by reason.
    pub forward_unattributed_dropped: Family<ForwardUnattributedLabel, Counter>,
    /// Flow sockets the forward server holds now, across every connection.
    pub forward_flow_sockets: Gauge,
    /// What the reloads' live access updates did since the server started, by event.
    pub forward_access_events: Family<ForwardAccessLabel, Counter>,
    /// Tasks alive on the node's runtime now.
    pub runtime_tasks_alive: Gauge,
    /// Container restarts per workload (starts that followed an exit or a failed start).
    pub workload_restarts: Family<WorkloadLabel, Counter>,
    /// Failed container creates or starts per workload.
    pub workload_start_failures: Family<WorkloadLabel, Counter>,
    /// Crash loops detected per workload.
    pub workload_crash_loops: Family<WorkloadLabel, Counter>,
    /// 1 while a workload's container is healthy, 0 while starting or unhealthy.
    pub workload_healthy: Family<WorkloadLabel, Gauge>,
    /// Gateway connections open now, authenticated or not.
    pub gateway_connections: Family<ConnStateLabel, Gauge>,
    /// Gateway text messages since the node started, by direction.
    pub gateway_messages: Family<DirectionLabel, Counter>,
    /// Gateway connections disconnected as slow consumers since the node started.
    pub gateway_slow_consumer_drops: Counter,
    /// How long each step of the gateway's last drain took.
    pub gateway_drain_step_seconds: Family<StepLabel, Gauge<f64, AtomicU64>>,
    /// Gateway connections refused since the node started, by the limit they were over.
    pub gateway_refused: Family<GatewayRefusalLabel, Counter>,
    /// Gateway room joins refused since the node started, by the limit they were over.
    pub gateway_joins_refused: Family<JoinRefusalLabel, Counter>,
    /// Client tokens the gateway refused since the node started, by reason.
    pub gateway_tokens_refused: Family<TokenRefusalLabel, Counter>,
    /// Reloads of the gateway's token key files since the node started, by result.
    pub gateway_key_reloads: Family<KeyReloadLabel, Counter>,
    /// Gateway `wss://` handshakes refused since the node started because the leaf had expired.
    pub gateway_tls_expired_refusals: Counter,
    /// TLS-ALPN-01 validations the gateway's TLS listener answered since the node started.
    pub gateway_tls_alpn01_answered: Counter,
    /// Gateway TCP connections accepted since the node started.
    pub gateway_accepted: Counter,
    /// Gateway accepts that failed since the node started.
    pub gateway_accept_errors: Counter,
    /// Gateway connections closed for a bad, expired or missing token or an authentication timeout since the node started.
    pub gateway_auth_failures: Counter,
    /// Gateway connections closed at the idle timeout since the node started.
    pub gateway_idle_closed: Counter,
    /// Drain close frames the gateway sent since the node started.
    pub gateway_close_frames_sent: Counter,
    /// Gateway routing-map calls that failed since the node started.
    pub gateway_routing_errors: Counter,
    /// Gateway room pushes delivered after the echo wait since the node started.
    pub gateway_room_echo_timeouts: Counter,
    /// Gateway room messages from the bus dropped from a full room queue since the node started.
    pub gateway_room_bus_dropped: Counter,
    /// Gateway pushes to a user that found a replica of the route no longer registered.
    pub gateway_dead_routes: Counter,
    /// Changed gateway TLS pairs loaded or rejected since the node started, by result.
    pub gateway_tls_reloads: Family<KeyReloadLabel, Counter>,
    /// Gateway room pushes refused since the node started, by the limit they were over.
    pub gateway_pushes_refused: Family<JoinRefusalLabel, Counter>,
    /// Gateway room messages that arrived before predecessors since the node started, by whether the stream filled them.
    pub gateway_room_gaps: Family<RoomGapLabel, Counter>,
    /// Requests and connections the admin API refused or closed, by reason.
    pub admin_refused: Family<AdminRefusalLabel, Counter>,
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
        // i[impl node.version]
        let build_info = Family::<Vec<(String, String)>, Gauge>::default();
        build_info
            .get_or_create(&crate::version::build_info().labels())
            .set(1);
        registry.register(
            "build_info",
            "This build: version, git commit and features (always 1)",
            build_info,
        );
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
            "pull_gc_runs",
            "Image collection runs by outcome",
            m.pull_gc_runs.clone(),
        );
        registry.register(
            "pull_gc_removed",
            "Images removed by image collection",
            m.pull_gc_removed.clone(),
        );
        registry.register(
            "pull_gc_removed_bytes",
            "Bytes of the images removed by image collection",
            m.pull_gc_removed_bytes.clone(),
        );
        registry.register(
            "pull_gc_failures",
            "Image removals by image collection that failed",
            m.pull_gc_failures.clone(),
        );
        registry.register(
            "draining",
            "1 while the node is draining",
            m.draining.clone(),
        );
        registry.register(
            "issuance_attempts",
            "Certificate attempts finished since the issuance module started, by source and outcome",
            m.issuance_attempts.clone(),
        );
        registry.register(
            "issuance_blocked",
            "Hostnames whose issuance is blocked now",
            m.issuance_blocked.clone(),
        );
        registry.register(
            "issuance_days_to_expiry",
            "Days until each stored certificate expires",
            m.issuance_days_to_expiry.clone(),
        );
        registry.register(
            "issuance_http01_connections",
            "Connections open on the HTTP-01 responder now",
            m.issuance_http01_connections.clone(),
        );
        registry.register(
            "issuance_http01_refused",
            "Connections the HTTP-01 responder refused or cut off since it started, by reason",
            m.issuance_http01_refused.clone(),
        );
        registry.register(
            "issuance_tls_alpn01_connections",
            "Connections open on the TLS-ALPN-01 listener now",
            m.issuance_tls_alpn01_connections.clone(),
        );
        registry.register(
            "issuance_tls_alpn01_refused",
            "Connections the TLS-ALPN-01 listener refused or cut off since it started, by reason",
            m.issuance_tls_alpn01_refused.clone(),
        );
        registry.register(
            "forwards_active",
            "UDP forwards open on the node now",
            m.forwards_active.clone(),
        );
        registry.register(
            "forward_datagrams",
            "Datagrams relayed per active forward and direction",
            m.forward_datagrams.clone(),
        );
        registry.register(
            "forward_bytes",
            "Payload bytes relayed per active forward and direction",
            m.forward_bytes.clone(),
        );
        registry.register(
            "forward_dropped",
            "Datagrams dropped per active forward and reason",
            m.forward_dropped.clone(),
        );
        registry.register(
            "forward_transient_errors",
            "Transient socket errors met per active forward (each reported, none ended it)",
            m.forward_transient_errors.clone(),
        );
        registry.register(
            "forward_connections",
            "Forward connections open now, by state (unauthenticated: in their handshake or \
             before their credential)",
            m.forward_connections.clone(),
        );
        registry.register(
            "forward_refused",
            "Attempts, connections and forwards the forward server turned away since it started, \
             by reason",
            m.forward_refused.clone(),
        );
        registry.register(
            "forward_retries",
            "QUIC Retries the forward server sent since it started (address validation: a client's \
             normal first step, not a refusal)",
            m.forward_retries.clone(),
        );
        registry.register(
            "forward_unattributed_dropped",
            "Datagrams the forward server dropped before any forward could be charged with them, \
             since it started, by reason",
            m.forward_unattributed_dropped.clone(),
        );
        registry.register(
            "forward_flow_sockets",
            "Flow sockets the forward server holds now, across every connection",
            m.forward_flow_sockets.clone(),
        );
        registry.register(
            "forward_access_events",
            "What reloads' live updates of the forward's tokens and allow-lists did since the \
             server started: updates installed, forwards and connections they ended",
            m.forward_access_events.clone(),
        );
        registry.register(
            "runtime_tasks_alive",
            "Tasks alive on the node's async runtime now",
            m.runtime_tasks_alive.clone(),
        );
        registry.register(
            "workload_restarts",
            "Container restarts per workload since the workload module started",
            m.workload_restarts.clone(),
        );
        registry.register(
            "workload_start_failures",
            "Failed container creates or starts per workload since the workload module started",
            m.workload_start_failures.clone(),
        );
        registry.register(
            "workload_crash_loops",
            "Crash loops detected per workload since the workload module started",
            m.workload_crash_loops.clone(),
        );
        registry.register(
            "workload_healthy",
            "1 while the workload's container is healthy, 0 while starting or unhealthy (absent without a health check)",
            m.workload_healthy.clone(),
        );
        registry.register(
            "gateway_connections",
            "Gateway connections open now, by state",
            m.gateway_connections.clone(),
        );
        registry.register(
            "gateway_messages",
            "Gateway text messages since the node started, from clients (in) and to clients (out)",
            m.gateway_messages.clone(),
        );
        registry.register(
            "gateway_slow_consumer_drops",
            "Gateway connections disconnected as slow consumers since the node started",
            m.gateway_slow_consumer_drops.clone(),
        );
        registry.register(
            "gateway_drain_step_seconds",
            "How long each step of the gateway's last drain took",
            m.gateway_drain_step_seconds.clone(),
        );
        registry.register(
            "gateway_refused",
            "Gateway connections refused since the node started, by the limit they were over \
             (or draining)",
            m.gateway_refused.clone(),
        );
        registry.register(
            "gateway_joins_refused",
            "Gateway room joins refused since the node started, by the limit they were over",
            m.gateway_joins_refused.clone(),
        );
        registry.register(
            "gateway_tokens_refused",
            "Gateway client tokens refused since the node started, by reason",
            m.gateway_tokens_refused.clone(),
        );
        registry.register(
            "gateway_key_reloads",
            "Reloads of the gateway's token key files since the node started, by result",
            m.gateway_key_reloads.clone(),
        );
        registry.register(
            "gateway_tls_expired_refusals",
            "Gateway wss:// handshakes refused since the node started because the served leaf \
             had expired",
            m.gateway_tls_expired_refusals.clone(),
        );
        registry.register(
            "gateway_tls_alpn01_answered",
            "TLS-ALPN-01 validations the gateway's TLS listener answered since the node started",
            m.gateway_tls_alpn01_answered.clone(),
        );
        registry.register(
            "gateway_accepted",
            "Gateway TCP connections accepted since the node started",
            m.gateway_accepted.clone(),
        );
        registry.register(
            "gateway_accept_errors",
            "Gateway accepts that failed since the node started",
            m.gateway_accept_errors.clone(),
        );
        registry.register(
            "gateway_auth_failures",
            "Gateway connections closed for a bad, expired or missing token or an authentication timeout since the node started",
            m.gateway_auth_failures.clone(),
        );
        registry.register(
            "gateway_idle_closed",
            "Gateway connections closed at the idle timeout since the node started",
            m.gateway_idle_closed.clone(),
        );
        registry.register(
            "gateway_close_frames_sent",
            "Drain close frames the gateway sent since the node started",
            m.gateway_close_frames_sent.clone(),
        );
        registry.register(
            "gateway_routing_errors",
            "Gateway routing-map calls that failed since the node started",
            m.gateway_routing_errors.clone(),
        );
        registry.register(
            "gateway_room_echo_timeouts",
            "Gateway room pushes delivered after the echo wait since the node started",
            m.gateway_room_echo_timeouts.clone(),
        );
        registry.register(
            "gateway_room_bus_dropped",
            "Gateway room messages from the bus dropped from a full room queue since the node started",
            m.gateway_room_bus_dropped.clone(),
        );
        registry.register(
            "gateway_dead_routes",
            "Gateway pushes to a user that found a replica of the user's route no longer \
             registered (dropped from the route, not a failure) since the node started",
            m.gateway_dead_routes.clone(),
        );
        registry.register(
            "gateway_tls_reloads",
            "Changed gateway TLS pairs loaded or rejected since the node started, by result",
            m.gateway_tls_reloads.clone(),
        );
        registry.register(
            "gateway_pushes_refused",
            "Gateway pushes refused since the node started, by the limit they were over",
            m.gateway_pushes_refused.clone(),
        );
        registry.register(
            "gateway_room_gaps",
            "Gateway room messages that arrived before predecessors since the node started, by whether the stream filled them",
            m.gateway_room_gaps.clone(),
        );
        registry.register(
            "admin_refused",
            "Requests and connections the admin API refused or closed, by reason",
            m.admin_refused.clone(),
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
            pull_gc_runs: m.pull_gc_runs,
            pull_gc_removed: m.pull_gc_removed,
            pull_gc_removed_bytes: m.pull_gc_removed_bytes,
            pull_gc_failures: m.pull_gc_failures,
            draining: m.draining,
            issuance_attempts: m.issuance_attempts,
            issuance_blocked: m.issuance_blocked,
            issuance_days_to_expiry: m.issuance_days_to_expiry,
            issuance_http01_connections: m.issuance_http01_connections,
            issuance_http01_refused: m.issuance_http01_refused,
            issuance_tls_alpn01_connections: m.issuance_tls_alpn01_connections,
            issuance_tls_alpn01_refused: m.issuance_tls_alpn01_refused,
            forwards_active: m.forwards_active,
            forward_datagrams: m.forward_datagrams,
            forward_bytes: m.forward_bytes,
            forward_dropped: m.forward_dropped,
            forward_transient_errors: m.forward_transient_errors,
            forward_connections: m.forward_connections,
            forward_refused: m.forward_refused,
            forward_retries: m.forward_retries,
            forward_unattributed_dropped: m.forward_unattributed_dropped,
            forward_flow_sockets: m.forward_flow_sockets,
            forward_access_events: m.forward_access_events,
            runtime_tasks_alive: m.runtime_tasks_alive,
            workload_restarts: m.workload_restarts,
            workload_start_failures: m.workload_start_failures,
            workload_crash_loops: m.workload_crash_loops,
            workload_healthy: m.workload_healthy,
            gateway_connections: m.gateway_connections,
            gateway_messages: m.gateway_messages,
            gateway_slow_consumer_drops: m.gateway_slow_consumer_drops,
            gateway_drain_step_seconds: m.gateway_drain_step_seconds,
            gateway_refused: m.gateway_refused,
            gateway_joins_refused: m.gateway_joins_refused,
            gateway_tokens_refused: m.gateway_tokens_refused,
            gateway_key_reloads: m.gateway_key_reloads,
            gateway_tls_expired_refusals: m.gateway_tls_expired_refusals,
            gateway_tls_alpn01_answered: m.gateway_tls_alpn01_answered,
            gateway_accepted: m.gateway_accepted,
            gateway_accept_errors: m.gateway_accept_errors,
            gateway_auth_failures: m.gateway_auth_failures,
            gateway_idle_closed: m.gateway_idle_closed,
            gateway_close_frames_sent: m.gateway_close_frames_sent,
            gateway_routing_errors: m.gateway_routing_errors,
            gateway_room_echo_timeouts: m.gateway_room_echo_timeouts,
            gateway_room_bus_dropped: m.gateway_room_bus_dropped,
            gateway_dead_routes: m.gateway_dead_routes,
            gateway_tls_reloads: m.gateway_tls_reloads,
            gateway_pushes_refused: m.gateway_pushes_refused,
            gateway_room_gaps: m.gateway_room_gaps,
            admin_refused: m.admin_refused,
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

    // r[impl node.issuance.metrics+3]
    /// Sets the issuance figures from the issuer's own (read at each scrape).
    pub fn set_issuance(&self, figures: &holdfast_issuance::issuer::Metrics) {
        self.issuance_attempts.clear();
        for (source, outcomes) in &figures.attempts {
            for (outcome, n) in outcomes {
                self.issuance_attempts
                    .get_or_create(&AttemptLabel {
                        source: source.clone(),
                        outcome: outcome.clone(),
                    })
                    .inc_by(*n);
            }
        }
        self.issuance_blocked
            .set(i64::try_from(figures.blocked).unwrap_or(i64::MAX));
        self.issuance_days_to_expiry.clear();
        for (hostname, days) in &figures.days_to_expiry {
            self.issuance_days_to_expiry
                .get_or_create(&HostnameLabel {
                    hostname: hostname.clone(),
                })
                .set(*days);
        }
    }

    // r[impl node.issuance.metrics+3]
    /// Sets the HTTP-01 responder's figures (read at each scrape): `None` (no responder runs)
    /// exports no refusals and no open connections.
    pub fn set_http01(&self, stats: Option<holdfast_issuance::ResponderStats>) {
        let s = stats.unwrap_or_default();
        self.issuance_http01_connections
            .set(i64::try_from(s.open).unwrap_or(i64::MAX));
        // Since the responder started: a new responder starts its counts again.
        self.issuance_http01_refused.clear();
        if stats.is_none() {
            return;
        }
        for (reason, n) in [
            ("connection_limit", s.refused_over_total),
            ("per_source_limit", s.refused_over_address),
            ("header_timeout", s.header_timeouts),
            ("idle_timeout", s.idle_timeouts),
        ] {
            self.issuance_http01_refused
                .get_or_create(&Http01RefusalLabel {
                    reason: reason.to_owned(),
                })
                .inc_by(n);
        }
    }

    // r[impl node.issuance.metrics+3]
    /// Sets the TLS-ALPN-01 listener's figures (read at each scrape): `None` (no listener runs)
    /// exports no refusals and no open connections.
    pub fn set_tls_alpn01(&self, stats: Option<holdfast_issuance::AlpnStats>) {
        let s = stats.unwrap_or_default();
        self.issuance_tls_alpn01_connections
            .set(i64::try_from(s.open).unwrap_or(i64::MAX));
        // Since the listener started: a new listener starts its counts again.
        self.issuance_tls_alpn01_refused.clear();
        if stats.is_none() {
            return;
        }
        for (reason, n) in [
            ("connection_limit", s.refused_over_total),
            ("per_source_limit", s.refused_over_address),
            ("handshake_timeout", s.handshake_timeouts),
            ("protocol", s.refused_protocol),
            ("name", s.refused_name),
            ("malformed", s.refused_malformed),
        ] {
            self.issuance_tls_alpn01_refused
                .get_or_create(&TlsAlpn01RefusalLabel {
                    reason: reason.to_owned(),
                })
                .inc_by(n);
        }
    }

    // r[impl node.forward.metrics]
    /// Sets the per-forward figures from the server's listing (read at each scrape): a forward
    /// that ended is no longer exported.
    pub fn set_forwards(&self, forwards: &[holdfast_forward::server::ForwardInfo]) {
        self.forwards_active
            .set(i64::try_from(forwards.len()).unwrap_or(i64::MAX));
        self.forward_datagrams.clear();
        self.forward_bytes.clear();
        self.forward_dropped.clear();
        self.forward_transient_errors.clear();
        for f in forwards {
            let id = format!("{}/{}", f.connection, f.forward);
            let target = f.target.to_string();
            let s = &f.stats;
            for (direction, datagrams, bytes) in [
                ("to_target", s.to_target_datagrams, s.to_target_bytes),
                ("from_target", s.from_target_datagrams, s.from_target_bytes),
            ] {
                let label = ForwardDirectionLabel {
                    forward: id.clone(),
                    target: target.clone(),
                    direction: direction.to_owned(),
                };
                self.forward_datagrams
                    .get_or_create(&label)
                    .inc_by(datagrams);
                self.forward_bytes.get_or_create(&label).inc_by(bytes);
            }
            let d = &s.dropped;
            for (reason, n) in [
                ("oversize", d.oversize),
                ("malformed", d.malformed),
                ("unknown_forward", d.unknown_forward),
                ("flow_limit", d.flow_limit),
                ("error", d.error),
            ] {
                self.forward_dropped
                    .get_or_create(&ForwardDropLabel {
                        forward: id.clone(),
                        target: target.clone(),
                        reason: reason.to_owned(),
                    })
                    .inc_by(n);
            }
            self.forward_transient_errors
                .get_or_create(&ForwardLabel {
                    forward: id,
                    client: f.client.to_string(),
                    target,
                })
                .inc_by(s.transient_errors);
        }
    }

    // r[impl node.forward.metrics.server+2]
    /// Sets the forward server's own figures (read at each scrape): connections open now by
    /// state, what it turned away and the datagrams it dropped unattributed (since the server
    /// started: a restarted server counts from zero again), and its flow sockets. `None` (no
    /// server runs) exports no connection, refusal or drop series and no flow sockets.
    pub fn set_forward_server(&self, figures: Option<&ForwardServerFigures>) {
        self.forward_connections.clear();
        self.forward_refused.clear();
        self.forward_retries.clear();
        self.forward_unattributed_dropped.clear();
        self.forward_access_events.clear();
        let Some(f) = figures else {
            self.forward_flow_sockets.set(0);
            return;
        };
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let c = &f.connections;
        for (state, n) in [
            ("authenticated", c.authenticated),
            ("unauthenticated", c.unauthenticated),
        ] {
            self.forward_connections
                .get_or_create(&ConnStateLabel {
                    state: state.to_owned(),
                })
                .set(gauge(n));
        }
        self.forward_retries
            .get_or_create(&ForwardRetryLabel {
                reason: "address_validation".to_owned(),
            })
            .inc_by(c.retried);
        for (reason, n) in [
            ("max_unauthenticated", c.refused_unauthenticated),
            ("max_unauthenticated_per_source", c.refused_per_source),
            ("paced", c.refused_paced),
            ("handshake_failed", c.handshake_failed),
            ("timed_out", c.timed_out),
            ("auth_failed", c.auth_failed),
            ("closed_unauthenticated", c.closed_unauthenticated),
            ("max_connections", c.refused_authenticated),
            ("max_connections_per_token", c.refused_per_credential),
            ("target_not_allowed", f.refused_targets),
        ] {
            self.forward_refused
                .get_or_create(&ForwardRefusalLabel {
                    reason: reason.to_owned(),
                })
                .inc_by(n);
        }
        let d = &f.unattributed;
        for (reason, n) in [
            ("unauthenticated", c.dropped_unauthenticated),
            ("oversize", d.oversize),
            ("malformed", d.malformed),
            ("unknown_forward", d.unknown_forward),
            ("flow_limit", d.flow_limit),
            ("error", d.error),
        ] {
            self.forward_unattributed_dropped
                .get_or_create(&ForwardUnattributedLabel {
                    reason: reason.to_owned(),
                })
                .inc_by(n);
        }
        self.forward_flow_sockets
            .set(gauge(u64::try_from(f.flow_sockets).unwrap_or(u64::MAX)));
        let a = &f.access;
        for (event, n) in [
            ("update", a.updates),
            ("forward_ended", a.forwards_ended),
            ("connection_ended", a.connections_ended),
        ] {
            self.forward_access_events
                .get_or_create(&ForwardAccessLabel {
                    event: event.to_owned(),
                })
                .inc_by(n);
        }
    }

    // r[impl node.metrics.runtime-tasks]
    /// Sets the tasks alive on the runtime this is called on (at each scrape); outside a
    /// runtime it changes nothing.
    pub fn set_runtime_tasks(&self) {
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let alive = handle.metrics().num_alive_tasks();
            self.runtime_tasks_alive
                .set(i64::try_from(alive).unwrap_or(i64::MAX));
        }
    }

    // r[impl node.workload.metrics]
    /// Sets the per-workload counters from the workload module's status (read at each scrape): a
    /// workload no longer configured is no longer exported.
    pub fn set_workloads(&self, workloads: &[holdfast_workload::WorkloadStatus]) {
        for family in [
            &self.workload_restarts,
            &self.workload_start_failures,
            &self.workload_crash_loops,
        ] {
            family.clear();
        }
        self.workload_healthy.clear();
        for w in workloads {
            let label = WorkloadLabel {
                workload: w.name.clone(),
            };
            let c = &w.counters;
            self.workload_restarts
                .get_or_create(&label)
                .inc_by(c.restarts);
            self.workload_start_failures
                .get_or_create(&label)
                .inc_by(c.start_failures);
            self.workload_crash_loops
                .get_or_create(&label)
                .inc_by(c.crash_loops);
            self.set_workload_health(&label, w.health);
        }
    }

    // r[impl node.workload.health]
    /// The health gauge of one workload: not exported without a check.
    fn set_workload_health(
        &self,
        label: &WorkloadLabel,
        health: Option<holdfast_workload::HealthStatus>,
    ) {
        if let Some(health) = health {
            let healthy = i64::from(health == holdfast_workload::HealthStatus::Healthy);
            self.workload_healthy.get_or_create(label).set(healthy);
        }
    }

    // r[impl node.gateway.metrics+4]
    /// Sets the gateway's series (read at each scrape): connections now (authenticated,
    /// unauthenticated), the node's totals of messages, slow-consumer drops, refused
    /// connections and refused joins (`totals`; `None` while no gateway has run, which exports
    /// no connections), and the step durations of the last drain.
    pub fn set_gateway(
        &self,
        connections: Option<(usize, usize)>,
        totals: Option<crate::modules::gateway::GatewayTotals>,
        last_drain: Option<&holdfast_gateway::DrainReport>,
    ) {
        self.gateway_connections.clear();
        if let Some((authenticated, unauthenticated)) = connections {
            let gauge = |state: &str, n: usize| {
                self.gateway_connections
                    .get_or_create(&ConnStateLabel {
                        state: state.to_owned(),
                    })
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            };
            gauge("authenticated", authenticated);
            gauge("unauthenticated", unauthenticated);
        }
        if let Some(t) = totals {
            for (direction, total) in [("in", t.messages_in), ("out", t.messages_out)] {
                let counter = self.gateway_messages.get_or_create(&DirectionLabel {
                    direction: direction.to_owned(),
                });
                raise_to(&counter, total);
            }
            raise_to(&self.gateway_slow_consumer_drops, t.slow_consumer_drops);
            for (reason, total) in [
                ("per_ip_limit", t.refused_per_ip),
                ("unauthenticated_limit", t.refused_unauthenticated),
                (
                    "unauthenticated_per_ip_limit",
                    t.refused_unauthenticated_per_ip,
                ),
                ("draining", t.refused_draining),
            ] {
                let counter = self.gateway_refused.get_or_create(&GatewayRefusalLabel {
                    reason: reason.to_owned(),
                });
                raise_to(&counter, total);
            }
            for (reason, total) in [
                ("max_rooms_per_connection", t.joins_refused_rooms),
                ("max_room_name", t.joins_refused_name),
                ("permission", t.joins_refused_permission),
            ] {
                let counter = self.gateway_joins_refused.get_or_create(&JoinRefusalLabel {
                    reason: reason.to_owned(),
                });
                raise_to(&counter, total);
            }
            for (reason, total) in holdfast_gateway::TokenError::REASONS
                .iter()
                .zip(t.token_refused)
            {
                let counter = self
                    .gateway_tokens_refused
                    .get_or_create(&TokenRefusalLabel {
                        reason: (*reason).to_owned(),
                    });
                raise_to(&counter, total);
            }
            for (result, total) in [("ok", t.key_reloads), ("failed", t.key_reload_failures)] {
                let counter = self.gateway_key_reloads.get_or_create(&KeyReloadLabel {
                    result: result.to_owned(),
                });
                raise_to(&counter, total);
            }
            raise_to(&self.gateway_tls_expired_refusals, t.tls_expired_refusals);
            raise_to(&self.gateway_tls_alpn01_answered, t.tls_alpn_answered);
            self.set_gateway_counters(&t);
        }
        self.gateway_drain_step_seconds.clear();
        for step in last_drain.map(|r| r.steps.as_slice()).unwrap_or_default() {
            let name = serde_json::to_value(step.step)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            self.gateway_drain_step_seconds
                .get_or_create(&StepLabel { step: name })
                .set(step.took_ms as f64 / 1000.0);
        }
    }

    // r[impl node.gateway.metrics.counters]
    /// The gateway's counters that `set_gateway` does not name itself.
    fn set_gateway_counters(&self, c: &holdfast_gateway::StatsSnapshot) {
        for (counter, total) in [
            (&self.gateway_accepted, c.accepted),
            (&self.gateway_accept_errors, c.accept_errors),
            (&self.gateway_auth_failures, c.auth_failures),
            (&self.gateway_idle_closed, c.idle_closed),
            (&self.gateway_close_frames_sent, c.close_frames_sent),
            (&self.gateway_routing_errors, c.routing_errors),
            (&self.gateway_room_echo_timeouts, c.room_echo_timeouts),
            (&self.gateway_room_bus_dropped, c.room_bus_dropped),
            (&self.gateway_dead_routes, c.dead_routes),
        ] {
            raise_to(counter, total);
        }
        for (result, total) in [("ok", c.tls_reloads), ("failed", c.tls_reload_failures)] {
            let counter = self.gateway_tls_reloads.get_or_create(&KeyReloadLabel {
                result: result.to_owned(),
            });
            raise_to(&counter, total);
        }
        for (reason, total) in [
            ("max_room_name", c.pushes_refused_room_name),
            ("max_message_size", c.pushes_refused_too_large),
        ] {
            let counter = self
                .gateway_pushes_refused
                .get_or_create(&JoinRefusalLabel {
                    reason: reason.to_owned(),
                });
            raise_to(&counter, total);
        }
        for (result, total) in [("filled", c.room_gaps_filled), ("lost", c.room_gaps_lost)] {
            let counter = self.gateway_room_gaps.get_or_create(&RoomGapLabel {
                result: result.to_owned(),
            });
            raise_to(&counter, total);
        }
    }

    /// Counts one admin API refusal (see [`AdminRefusalLabel`]).
    pub fn admin_refusal(&self, reason: &str) {
        self.admin_refused
            .get_or_create(&AdminRefusalLabel {
                reason: reason.to_owned(),
            })
            .inc();
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
    pull_gc_runs: Family<OutcomeLabel, Counter>,
    pull_gc_removed: Counter,
    pull_gc_removed_bytes: Counter,
    pull_gc_failures: Counter,
    draining: Gauge,
    issuance_attempts: Family<AttemptLabel, Counter>,
    issuance_blocked: Gauge,
    issuance_days_to_expiry: Family<HostnameLabel, Gauge<f64, AtomicU64>>,
    issuance_http01_connections: Gauge,
    issuance_http01_refused: Family<Http01RefusalLabel, Counter>,
    issuance_tls_alpn01_connections: Gauge,
    issuance_tls_alpn01_refused: Family<TlsAlpn01RefusalLabel, Counter>,
    forwards_active: Gauge,
    forward_datagrams: Family<ForwardDirectionLabel, Counter>,
    forward_bytes: Family<ForwardDirectionLabel, Counter>,
    forward_dropped: Family<ForwardDropLabel, Counter>,
    forward_transient_errors: Family<ForwardLabel, Counter>,
    forward_connections: Family<ConnStateLabel, Gauge>,
    forward_refused: Family<ForwardRefusalLabel, Counter>,
    forward_retries: Family<ForwardRetryLabel, Counter>,
    forward_unattributed_dropped: Family<ForwardUnattributedLabel, Counter>,
    forward_flow_sockets: Gauge,
    forward_access_events: Family<ForwardAccessLabel, Counter>,
    runtime_tasks_alive: Gauge,
    workload_restarts: Family<WorkloadLabel, Counter>,
    workload_start_failures: Family<WorkloadLabel, Counter>,
    workload_crash_loops: Family<WorkloadLabel, Counter>,
    workload_healthy: Family<WorkloadLabel, Gauge>,
    gateway_connections: Family<ConnStateLabel, Gauge>,
    gateway_messages: Family<DirectionLabel, Counter>,
    gateway_slow_consumer_drops: Counter,
    gateway_drain_step_seconds: Family<StepLabel, Gauge<f64, AtomicU64>>,
    gateway_refused: Family<GatewayRefusalLabel, Counter>,
    gateway_joins_refused: Family<JoinRefusalLabel, Counter>,
    gateway_tokens_refused: Family<TokenRefusalLabel, Counter>,
    gateway_key_reloads: Family<KeyReloadLabel, Counter>,
    gateway_tls_expired_refusals: Counter,
    gateway_tls_alpn01_answered: Counter,
    gateway_accepted: Counter,
    gateway_accept_errors: Counter,
    gateway_auth_failures: Counter,
    gateway_idle_closed: Counter,
    gateway_close_frames_sent: Counter,
    gateway_routing_errors: Counter,
    gateway_room_echo_timeouts: Counter,
    gateway_room_bus_dropped: Counter,
    gateway_dead_routes: Counter,
    gateway_tls_reloads: Family<KeyReloadLabel, Counter>,
    gateway_pushes_refused: Family<JoinRefusalLabel, Counter>,
    gateway_room_gaps: Family<RoomGapLabel, Counter>,
    admin_refused: Family<AdminRefusalLabel, Counter>,
}

/// Raises a counter to a total kept elsewhere (counters only grow: a smaller total changes
/// nothing).
fn raise_to(counter: &Counter, total: u64) {
    let now = counter.get();
    if total > now {
        counter.inc_by(total - now);
    }
}

/// The label for `module`.
pub fn module(name: &str) -> ModuleLabel {
    ModuleLabel {
        module: name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify node.issuance.metrics+3]
    #[test]
    fn issuance_figures_replace_the_previous_scrape() {
        let metrics = Metrics::new();
        let mut figures = holdfast_issuance::issuer::Metrics::default();
        figures
            .attempts
            .entry("acme".to_owned())
            .or_default()
            .insert("success".to_owned(), 3);
        figures.blocked = 1;
        figures
            .days_to_expiry
            .insert("app.example".to_owned(), 59.5);
        metrics.set_issuance(&figures);
        let text = metrics.render();
        assert!(
            text.contains(
                "holdfast_issuance_attempts_total{source=\"acme\",outcome=\"success\"} 3"
            ),
            "{text}"
        );
        assert!(text.contains("holdfast_issuance_blocked 1"), "{text}");
        assert!(
            text.contains("holdfast_issuance_days_to_expiry{hostname=\"app.example\"} 59.5"),
            "{text}"
        );
        // The module went away: nothing of it is left behind.
        metrics.set_issuance(&Default::default());
        let text = metrics.render();
        assert!(!text.contains("app.example"), "{text}");
        assert!(text.contains("holdfast_issuance_blocked 0"), "{text}");
    }

    // r[verify node.issuance.metrics+3]
    #[test]
    fn http01_responder_figures_follow_the_responder() {
        let metrics = Metrics::new();
        // No responder (no ACME hostname, or the module is down): nothing open, no refusals.
        metrics.set_http01(None);
        let text = metrics.render();
        assert!(
            text.contains("holdfast_issuance_http01_connections 0"),
            "{text}"
        );
        assert!(
            !text.contains("holdfast_issuance_http01_refused_total{"),
            "{text}"
        );
        let stats = holdfast_issuance::ResponderStats {
            open: 2,
            refused_over_total: 3,
            refused_over_address: 4,
            header_timeouts: 5,
            idle_timeouts: 6,
        };
        metrics.set_http01(Some(stats));
        let text = metrics.render();
        for series in [
            "holdfast_issuance_http01_connections 2",
            "holdfast_issuance_http01_refused_total{reason=\"connection_limit\"} 3",
            "holdfast_issuance_http01_refused_total{reason=\"per_source_limit\"} 4",
            "holdfast_issuance_http01_refused_total{reason=\"header_timeout\"} 5",
            "holdfast_issuance_http01_refused_total{reason=\"idle_timeout\"} 6",
        ] {
            assert!(text.contains(series), "{series} missing:\n{text}");
        }
        // A restarted responder counts from zero again, as the module's attempts do.
        metrics.set_http01(Some(holdfast_issuance::ResponderStats {
            open: 0,
            refused_over_address: 1,
            ..Default::default()
        }));
        let text = metrics.render();
        assert!(
            text.contains("holdfast_issuance_http01_refused_total{reason=\"per_source_limit\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("holdfast_issuance_http01_connections 0"),
            "{text}"
        );
        // The module went away: its refusals are no longer exported.
        metrics.set_http01(None);
        assert!(
            !metrics
                .render()
                .contains("holdfast_issuance_http01_refused_total{")
        );
    }

    // r[verify node.issuance.metrics+3]
    #[test]
    fn tls_alpn01_listener_figures_follow_the_listener() {
        let metrics = Metrics::new();
        metrics.set_tls_alpn01(None);
        let text = metrics.render();
        assert!(
            text.contains("holdfast_issuance_tls_alpn01_connections 0"),
            "{text}"
        );
        assert!(
            !text.contains("holdfast_issuance_tls_alpn01_refused_total{"),
            "{text}"
        );
        metrics.set_tls_alpn01(Some(holdfast_issuance::AlpnStats {
            open: 2,
            refused_over_total: 3,
            refused_over_address: 4,
            handshake_timeouts: 5,
            refused_protocol: 6,
            refused_name: 7,
            refused_malformed: 9,
            answered: 8,
        }));
        let text = metrics.render();
        for series in [
            "holdfast_issuance_tls_alpn01_connections 2",
            "holdfast_issuance_tls_alpn01_refused_total{reason=\"connection_limit\"} 3",
            "holdfast_issuance_tls_alpn01_refused_total{reason=\"per_source_limit\"} 4",
            "holdfast_issuance_tls_alpn01_refused_total{reason=\"handshake_timeout\"} 5",
            "holdfast_issuance_tls_alpn01_refused_total{reason=\"protocol\"} 6",
            "holdfast_issuance_tls_alpn01_refused_total{reason=\"name\"} 7",
            "holdfast_issuance_tls_alpn01_refused_total{reason=\"malformed\"} 9",
        ] {
            assert!(text.contains(series), "{series} missing:\n{text}");
        }
        // The module went away: its refusals are no longer exported.
        metrics.set_tls_alpn01(None);
        let text = metrics.render();
        assert!(
            !text.contains("holdfast_issuance_tls_alpn01_refused_total{"),
            "{text}"
        );
        assert!(
            text.contains("holdfast_issuance_tls_alpn01_connections 0"),
            "{text}"
        );
    }

    // r[verify node.forward.metrics.server+2]
    #[test]
    fn the_forward_servers_connections_and_refusals_follow_the_server() {
        let metrics = Metrics::new();
        // No server: no connection, refusal or drop series, no flow sockets.
        metrics.set_forward_server(None);
        let text = metrics.render();
        for absent in [
            "holdfast_forward_connections{",
            "holdfast_forward_refused_total{",
            "holdfast_forward_retries_total{",
            "holdfast_forward_unattributed_dropped_total{",
            "holdfast_forward_access_events_total{",
        ] {
            assert!(!text.contains(absent), "{absent} present:\n{text}");
        }
        assert!(text.contains("holdfast_forward_flow_sockets 0"), "{text}");
        let figures = ForwardServerFigures {
            connections: holdfast_forward::ConnectionStats {
                unauthenticated: 3,
                retried: 4,
                refused_unauthenticated: 5,
                refused_per_source: 6,
                handshake_failed: 7,
                timed_out: 8,
                authenticated: 2,
                refused_authenticated: 9,
                refused_per_credential: 10,
                dropped_unauthenticated: 11,
                auth_failed: 12,
                closed_unauthenticated: 13,
                refused_paced: 14,
            },
            unattributed: holdfast_forward::stats::Drops {
                oversize: 15,
                malformed: 16,
                unknown_forward: 17,
                flow_limit: 18,
                error: 19,
            },
            refused_targets: 20,
            flow_sockets: 21,
            access: holdfast_forward::AccessStats {
                updates: 22,
                forwards_ended: 23,
                connections_ended: 24,
            },
        };
        metrics.set_forward_server(Some(&figures));
        let text = metrics.render();
        for series in [
            "holdfast_forward_connections{state=\"authenticated\"} 2",
            "holdfast_forward_connections{state=\"unauthenticated\"} 3",
            "holdfast_forward_retries_total{reason=\"address_validation\"} 4",
            "holdfast_forward_refused_total{reason=\"max_unauthenticated\"} 5",
            "holdfast_forward_refused_total{reason=\"max_unauthenticated_per_source\"} 6",
            "holdfast_forward_refused_total{reason=\"handshake_failed\"} 7",
            "holdfast_forward_refused_total{reason=\"timed_out\"} 8",
            "holdfast_forward_refused_total{reason=\"max_connections\"} 9",
            "holdfast_forward_refused_total{reason=\"max_connections_per_token\"} 10",
            "holdfast_forward_unattributed_dropped_total{reason=\"unauthenticated\"} 11",
            "holdfast_forward_refused_total{reason=\"auth_failed\"} 12",
            "holdfast_forward_refused_total{reason=\"closed_unauthenticated\"} 13",
            "holdfast_forward_refused_total{reason=\"paced\"} 14",
            "holdfast_forward_unattributed_dropped_total{reason=\"oversize\"} 15",
            "holdfast_forward_unattributed_dropped_total{reason=\"malformed\"} 16",
            "holdfast_forward_unattributed_dropped_total{reason=\"unknown_forward\"} 17",
            "holdfast_forward_unattributed_dropped_total{reason=\"flow_limit\"} 18",
            "holdfast_forward_unattributed_dropped_total{reason=\"error\"} 19",
            "holdfast_forward_refused_total{reason=\"target_not_allowed\"} 20",
            "holdfast_forward_flow_sockets 21",
            "holdfast_forward_access_events_total{event=\"update\"} 22",
            "holdfast_forward_access_events_total{event=\"forward_ended\"} 23",
            "holdfast_forward_access_events_total{event=\"connection_ended\"} 24",
        ] {
            assert!(text.contains(series), "{series} missing:\n{text}");
        }
        // A restarted server counts from zero again.
        metrics.set_forward_server(Some(&ForwardServerFigures::default()));
        let text = metrics.render();
        assert!(
            text.contains("holdfast_forward_retries_total{reason=\"address_validation\"} 0"),
            "{text}"
        );
        // A Retry is not a refusal: nothing is counted as one.
        assert!(!text.contains("reason=\"retried\""), "{text}");
        // The module went away: its series go with it.
        metrics.set_forward_server(None);
        let text = metrics.render();
        assert!(!text.contains("holdfast_forward_refused_total{"), "{text}");
        assert!(text.contains("holdfast_forward_flow_sockets 0"), "{text}");
    }

    // r[verify node.metrics.runtime-tasks]
    #[tokio::test]
    async fn the_runtime_tasks_alive_rise_with_a_task_and_fall_when_it_ends() {
        let metrics = Metrics::new();
        let alive = |m: &Metrics| -> i64 {
            m.set_runtime_tasks();
            let text = m.render();
            text.lines()
                .find_map(|l| l.strip_prefix("holdfast_runtime_tasks_alive "))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no tasks series:\n{text}"))
        };
        let before = alive(&metrics);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = rx.await;
        });
        assert_eq!(alive(&metrics), before + 1);
        let _ = tx.send(());
        task.await.unwrap();
        assert_eq!(alive(&metrics), before);
    }

    // r[verify node.gateway.metrics.counters]
    #[test]
    fn the_gateways_other_counters_are_series_that_never_go_down() {
        use crate::modules::gateway::GatewayTotals;
        let metrics = Metrics::new();
        let counters = holdfast_gateway::StatsSnapshot {
            accepted: 21,
            accept_errors: 1,
            auth_failures: 3,
            idle_closed: 4,
            close_frames_sent: 5,
            routing_errors: 6,
            tls_reloads: 7,
            tls_reload_failures: 8,
            pushes_refused_room_name: 9,
            pushes_refused_too_large: 15,
            room_gaps_filled: 10,
            room_gaps_lost: 11,
            room_echo_timeouts: 12,
            room_bus_dropped: 13,
            dead_routes: 14,
            ..Default::default()
        };
        let totals: GatewayTotals = counters;
        let want = [
            "holdfast_gateway_accepted_total 21",
            "holdfast_gateway_accept_errors_total 1",
            "holdfast_gateway_auth_failures_total 3",
            "holdfast_gateway_idle_closed_total 4",
            "holdfast_gateway_close_frames_sent_total 5",
            "holdfast_gateway_routing_errors_total 6",
            "holdfast_gateway_tls_reloads_total{result=\"ok\"} 7",
            "holdfast_gateway_tls_reloads_total{result=\"failed\"} 8",
            "holdfast_gateway_pushes_refused_total{reason=\"max_room_name\"} 9",
            "holdfast_gateway_pushes_refused_total{reason=\"max_message_size\"} 15",
            "holdfast_gateway_room_gaps_total{result=\"filled\"} 10",
            "holdfast_gateway_room_gaps_total{result=\"lost\"} 11",
            "holdfast_gateway_room_echo_timeouts_total 12",
            "holdfast_gateway_room_bus_dropped_total 13",
            "holdfast_gateway_dead_routes_total 14",
        ];
        metrics.set_gateway(Some((0, 0)), Some(totals), None);
        let text = metrics.render();
        for series in want {
            assert!(text.contains(series), "{series} missing:\n{text}");
        }
        // A restarted module's totals start over inside the node's; the series never go down.
        metrics.set_gateway(Some((0, 0)), Some(GatewayTotals::default()), None);
        let text = metrics.render();
        for series in want {
            assert!(text.contains(series), "{series} went down:\n{text}");
        }
    }

    // r[verify node.gateway.metrics.counters]
    /// Every counter of the gateway's snapshot is exported under its own series: the snapshot is
    /// written out field by field (a counter added there fails to compile here until it is
    /// listed), each with its own value, and each field's series must carry that value.
    #[test]
    fn every_gateway_counter_is_exported_under_its_own_series() {
        let metrics = Metrics::new();
        let totals = holdfast_gateway::StatsSnapshot {
            accepted: 101,
            accept_errors: 102,
            refused_draining: 103,
            auth_failures: 104,
            messages_in: 105,
            messages_out: 106,
            slow_consumer_drops: 107,
            routing_errors: 108,
            close_frames_sent: 109,
            idle_closed: 110,
            refused_per_ip: 111,
            refused_unauthenticated: 112,
            refused_unauthenticated_per_ip: 113,
            tls_reloads: 114,
            tls_reload_failures: 115,
            tls_expired_refusals: 116,
            tls_alpn_answered: 117,
            joins_refused_rooms: 118,
            joins_refused_name: 119,
            joins_refused_permission: 120,
            pushes_refused_room_name: 121,
            pushes_refused_too_large: 122,
            key_reloads: 123,
            key_reload_failures: 124,
            room_gaps_filled: 125,
            room_gaps_lost: 126,
            room_echo_timeouts: 127,
            room_bus_dropped: 128,
            dead_routes: 129,
            token_refused: std::array::from_fn(|i| 201 + i as u64),
        };
        let series = [
            ("accepted", "holdfast_gateway_accepted_total 101"),
            ("accept_errors", "holdfast_gateway_accept_errors_total 102"),
            (
                "refused_draining",
                "holdfast_gateway_refused_total{reason=\"draining\"} 103",
            ),
            ("auth_failures", "holdfast_gateway_auth_failures_total 104"),
            (
                "messages_in",
                "holdfast_gateway_messages_total{direction=\"in\"} 105",
            ),
            (
                "messages_out",
                "holdfast_gateway_messages_total{direction=\"out\"} 106",
            ),
            (
                "slow_consumer_drops",
                "holdfast_gateway_slow_consumer_drops_total 107",
            ),
            (
                "routing_errors",
                "holdfast_gateway_routing_errors_total 108",
            ),
            (
                "close_frames_sent",
                "holdfast_gateway_close_frames_sent_total 109",
            ),
            ("idle_closed", "holdfast_gateway_idle_closed_total 110"),
            (
                "refused_per_ip",
                "holdfast_gateway_refused_total{reason=\"per_ip_limit\"} 111",
            ),
            (
                "refused_unauthenticated",
                "holdfast_gateway_refused_total{reason=\"unauthenticated_limit\"} 112",
            ),
            (
                "refused_unauthenticated_per_ip",
                "holdfast_gateway_refused_total{reason=\"unauthenticated_per_ip_limit\"} 113",
            ),
            (
                "tls_reloads",
                "holdfast_gateway_tls_reloads_total{result=\"ok\"} 114",
            ),
            (
                "tls_reload_failures",
                "holdfast_gateway_tls_reloads_total{result=\"failed\"} 115",
            ),
            (
                "tls_expired_refusals",
                "holdfast_gateway_tls_expired_refusals_total 116",
            ),
            (
                "tls_alpn_answered",
                "holdfast_gateway_tls_alpn01_answered_total 117",
            ),
            (
                "joins_refused_rooms",
                "holdfast_gateway_joins_refused_total{reason=\"max_rooms_per_connection\"} 118",
            ),
            (
                "joins_refused_name",
                "holdfast_gateway_joins_refused_total{reason=\"max_room_name\"} 119",
            ),
            (
                "joins_refused_permission",
                "holdfast_gateway_joins_refused_total{reason=\"permission\"} 120",
            ),
            (
                "pushes_refused_room_name",
                "holdfast_gateway_pushes_refused_total{reason=\"max_room_name\"} 121",
            ),
            (
                "pushes_refused_too_large",
                "holdfast_gateway_pushes_refused_total{reason=\"max_message_size\"} 122",
            ),
            (
                "key_reloads",
                "holdfast_gateway_key_reloads_total{result=\"ok\"} 123",
            ),
            (
                "key_reload_failures",
                "holdfast_gateway_key_reloads_total{result=\"failed\"} 124",
            ),
            (
                "room_gaps_filled",
                "holdfast_gateway_room_gaps_total{result=\"filled\"} 125",
            ),
            (
                "room_gaps_lost",
                "holdfast_gateway_room_gaps_total{result=\"lost\"} 126",
            ),
            (
                "room_echo_timeouts",
                "holdfast_gateway_room_echo_timeouts_total 127",
            ),
            (
                "room_bus_dropped",
                "holdfast_gateway_room_bus_dropped_total 128",
            ),
            ("dead_routes", "holdfast_gateway_dead_routes_total 129"),
        ];
        metrics.set_gateway(Some((0, 0)), Some(totals), None);
        let text = metrics.render();
        // The table names every field of the snapshot but the per-reason tokens, once.
        let fields: std::collections::BTreeSet<String> = serde_json::to_value(totals)
            .ok()
            .and_then(|v| v.as_object().map(|o| o.keys().cloned().collect()))
            .unwrap_or_default();
        let listed: std::collections::BTreeSet<String> = series
            .iter()
            .map(|(f, _)| (*f).to_owned())
            .chain(["token_refused".to_owned()])
            .collect();
        assert_eq!(fields, listed);
        for (field, line) in series {
            assert!(text.contains(line), "{field}: {line} missing:\n{text}");
        }
        for (i, reason) in holdfast_gateway::TokenError::REASONS.iter().enumerate() {
            let line = format!(
                "holdfast_gateway_tokens_refused_total{{reason=\"{reason}\"}} {}",
                201 + i
            );
            assert!(text.contains(&line), "{line} missing:\n{text}");
        }
    }

    // r[verify node.gateway.metrics+4]
    #[test]
    fn gateway_series_follow_the_gateway_and_its_counters_never_go_down() {
        use crate::modules::gateway::GatewayTotals;
        use holdfast_gateway::{Cleanup, DrainReport, RouteCleanup, Step, StepReport};
        let metrics = Metrics::new();
        // No gateway has run: no connection series.
        metrics.set_gateway(None, None, None);
        assert!(!metrics.render().contains("holdfast_gateway_connections{"));
        let totals = GatewayTotals {
            messages_in: 7,
            messages_out: 11,
            slow_consumer_drops: 2,
            refused_draining: 1,
            refused_per_ip: 3,
            refused_unauthenticated: 4,
            refused_unauthenticated_per_ip: 5,
            joins_refused_rooms: 6,
            joins_refused_name: 8,
            joins_refused_permission: 12,
            // "signature" is the fourth reason, "expired" the sixth.
            token_refused: [0, 0, 0, 9, 0, 10, 0, 0, 0, 0, 0, 0],
            key_reloads: 2,
            key_reload_failures: 1,
            tls_expired_refusals: 13,
            tls_alpn_answered: 14,
            ..GatewayTotals::default()
        };
        let report = DrainReport {
            code: 1012,
            connections: 3,
            close_frames_sent: 3,
            closed_in_time: 3,
            force_closed: 0,
            deregistration: Cleanup::Done,
            routes: RouteCleanup::default(),
            steps: vec![
                StepReport {
                    step: Step::StopAccepting,
                    deadline_ms: 1000,
                    took_ms: 4,
                },
                StepReport {
                    step: Step::Handshake,
                    deadline_ms: 3500,
                    took_ms: 1250,
                },
            ],
            cap_ms: 5000,
            took_ms: 1300,
            problems: vec![],
        };
        metrics.set_gateway(Some((2, 1)), Some(totals), Some(&report));
        let text = metrics.render();
        for series in [
            "holdfast_gateway_connections{state=\"authenticated\"} 2",
            "holdfast_gateway_connections{state=\"unauthenticated\"} 1",
            "holdfast_gateway_messages_total{direction=\"in\"} 7",
            "holdfast_gateway_messages_total{direction=\"out\"} 11",
            "holdfast_gateway_slow_consumer_drops_total 2",
            "holdfast_gateway_refused_total{reason=\"draining\"} 1",
            "holdfast_gateway_refused_total{reason=\"per_ip_limit\"} 3",
            "holdfast_gateway_refused_total{reason=\"unauthenticated_limit\"} 4",
            "holdfast_gateway_refused_total{reason=\"unauthenticated_per_ip_limit\"} 5",
            "holdfast_gateway_joins_refused_total{reason=\"max_rooms_per_connection\"} 6",
            "holdfast_gateway_joins_refused_total{reason=\"max_room_name\"} 8",
            "holdfast_gateway_joins_refused_total{reason=\"permission\"} 12",
            "holdfast_gateway_tokens_refused_total{reason=\"signature\"} 9",
            "holdfast_gateway_tokens_refused_total{reason=\"expired\"} 10",
            "holdfast_gateway_tokens_refused_total{reason=\"audience\"} 0",
            "holdfast_gateway_key_reloads_total{result=\"ok\"} 2",
            "holdfast_gateway_key_reloads_total{result=\"failed\"} 1",
            "holdfast_gateway_tls_expired_refusals_total 13",
            "holdfast_gateway_tls_alpn01_answered_total 14",
            "holdfast_gateway_drain_step_seconds{step=\"stop_accepting\"} 0.004",
            "holdfast_gateway_drain_step_seconds{step=\"handshake\"} 1.25",
        ] {
            assert!(text.contains(series), "{series} missing:\n{text}");
        }
        // Smaller totals (they never are, from the node's view; a counter ignores them anyway).
        metrics.set_gateway(Some((0, 0)), Some(GatewayTotals::default()), None);
        let text = metrics.render();
        for series in [
            "holdfast_gateway_messages_total{direction=\"in\"} 7",
            "holdfast_gateway_refused_total{reason=\"unauthenticated_per_ip_limit\"} 5",
            "holdfast_gateway_joins_refused_total{reason=\"max_room_name\"} 8",
        ] {
            assert!(text.contains(series), "{series} went down:\n{text}");
        }
        assert!(
            text.contains("holdfast_gateway_connections{state=\"authenticated\"} 0"),
            "{text}"
        );
        assert!(
            !text.contains("holdfast_gateway_drain_step_seconds{"),
            "{text}"
        );
    }
}
