//! The gateway module: the node's one adapter over holdfast-gateway.
//!
//! Each start reads the token key files (the gateway polls them for a change after), connects the
//! cluster backends of `[gateway.cluster]` (memory without it; nothing is contacted yet), starts
//! the gateway on them, and publishes it in the node's
//! [`GatewayView`], where the admin API reads it (`/v1/gateway`, pushes, `/readyz`, metrics). The
//! module stops in the `gateway` stop group, first: its stopper is the gateway's drain, run with the
//! stop plan's reason and deadline, and its report is kept for `/v1/gateway`. Its TLS listener
//! answers the TLS-ALPN-01 challenges the node keeps, which the issuance module puts there when the
//! gateway holds the port they are validated on ([`answers_tls_alpn01`]). A reload may
//! replace its limits, its token key files and its TLS pair while it runs
//! ([`Gateway::update_limits`], [`Gateway::take_token_keys`], [`Gateway::take_tls`]); the
//! module's later starts use what its [`GatewayModule::live`] handle holds.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use holdfast_gateway::config::LiveLimits;
use holdfast_gateway::{
    AcmeTlsAlpn, ClusterConfig, ClusterHealth, DrainReport, Gateway, GatewayConfig, Replica,
};
use holdfast_issuance::module::SourceKind;
use holdfast_issuance::{AlpnChallenges, Challenge, IssuanceConfig};
use holdfast_lifecycle::{BoxFuture, FaultBoard, StopError, StopRequest, Stopper, Subject};
use serde::Serialize;

use crate::module::{Module, StartError, Started, StopGroup};
use crate::modules::hosted::spawn_hosted;
use crate::slot::Slot;

/// The module's name.
pub const NAME: &str = "gateway";

#[derive(Default)]
struct ViewState {
    configured: bool,
    current: Option<Gateway>,
    /// Counters of the instances before the current one (so the node's totals only grow).
    before: GatewayTotals,
    draining: bool,
    last_drain: Option<DrainReport>,
    /// The TLS-ALPN-01 challenges the issuance module puts and the gateway answers, when the
    /// gateway holds their port: one set for the node, so either module's restart finds it.
    tls_alpn01: AlpnChallenges,
    /// The node's fault board, for the expired-certificate fault; none in a bare view.
    faults: Option<FaultBoard>,
}

/// The node's view of its gateway: the instance running now (kept after its drain, so the drain
/// stays visible until the process exits), and the last drain's report. Cheap to clone.
#[derive(Clone, Default)]
pub struct GatewayView(Arc<Mutex<ViewState>>);

impl std::fmt::Debug for GatewayView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayView").finish_non_exhaustive()
    }
}

/// `GET /v1/gateway`.
#[derive(Debug, Clone, Serialize)]
pub struct GatewayStatus {
    /// The replica as registered.
    pub replica: Replica,
    /// Whether the gateway takes new clients (false from the first step of a drain on).
    pub ready: bool,
    /// A drain has begun.
    pub draining: bool,
    /// Connections open now, authenticated or not.
    pub connections: usize,
    /// Connections open now that have authenticated.
    pub authenticated: usize,
    /// Text messages received from clients since the node started.
    pub messages_in: u64,
    /// Text messages sent to clients since the node started.
    pub messages_out: u64,
    /// Connections disconnected as slow consumers since the node started.
    pub slow_consumer_drops: u64,
    /// Registration and cross-replica delivery.
    pub cluster: ClusterHealth,
    /// The last drain's report, once there was one.
    pub last_drain: Option<DrainReport>,
    /// Why the token key files last failed to reload (the previous keys in use), until a
    /// reload succeeds; it names the file, never a key.
    pub key_fault: Option<String>,
}

/// The gateway's counters the node keeps across restarts of the module: every instance's
/// counters added up ([`holdfast_gateway::StatsSnapshot::plus`]).
pub type GatewayTotals = holdfast_gateway::StatsSnapshot;

/// Why the admin API cannot reach the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unavailable {
    /// No `[gateway]` section.
    NotConfigured,
    /// Configured, not running now (starting, or waiting to restart).
    Down,
}

impl GatewayView {
    fn lock(&self) -> std::sync::MutexGuard<'_, ViewState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks the gateway configured (the node has a `[gateway]` section).
    pub fn configure(&self) {
        self.lock().configured = true;
    }

    /// The node's TLS-ALPN-01 challenges, shared by the issuance module and the gateway when
    /// [`answers_tls_alpn01`].
    pub fn tls_alpn01_challenges(&self) -> AlpnChallenges {
        self.lock().tls_alpn01.clone()
    }

    /// A view filing the gateway's faults on `faults` (the node's board).
    pub fn with_faults(faults: FaultBoard) -> Self {
        let view = Self::default();
        view.lock().faults = Some(faults);
        view
    }

    /// Files the expired-certificate fault while `expired_since` is `Some` (the served leaf's
    /// notAfter), and clears it otherwise.
    // r[impl node.gateway.tls-expired-fault]
    fn expiry_fault(&self, expired_since: Option<SystemTime>) {
        let Some(faults) = self.lock().faults.clone() else {
            return;
        };
        let subject = Subject::new(NAME, "tls certificate");
        match expired_since {
            Some(at) => {
                let message = format!(
                    "the TLS certificate served on wss:// expired at {}: every handshake is \
                     refused until renewed files replace it",
                    crate::reload::rfc3339(at)
                );
                faults.file(
                    subject,
                    "certificate_expired",
                    &message,
                    1,
                    SystemTime::now(),
                );
            }
            None => {
                faults.clear(&subject);
            }
        }
    }

    /// Marks the gateway no longer configured (a reload removed `[gateway]`).
    pub fn unconfigure(&self) {
        self.lock().configured = false;
    }

    /// Whether the node has a `[gateway]` section.
    pub fn configured(&self) -> bool {
        self.lock().configured
    }

    /// Publishes a newly started instance (the previous one's counters are kept in the totals).
    pub fn started(&self, gateway: Gateway) {
        let mut s = self.lock();
        if let Some(old) = s.current.take() {
            s.before = s.before.plus(old.stats());
        }
        s.current = Some(gateway);
        s.draining = false;
    }

    /// The gateway running now.
    pub fn current(&self) -> Result<Gateway, Unavailable> {
        let s = self.lock();
        match (&s.current, s.configured) {
            (Some(g), _) => Ok(g.clone()),
            (None, true) => Err(Unavailable::Down),
            (None, false) => Err(Unavailable::NotConfigured),
        }
    }

    /// The gateway running now, unless it is draining (what a reload may update live).
    pub fn running(&self) -> Option<Gateway> {
        let s = self.lock();
        s.current.clone().filter(|_| !s.draining)
    }

    // r[impl node.gateway.readyz]
    /// Whether the gateway lets the node be ready: no `[gateway]` section, or a running gateway
    /// that is ready (not draining).
    pub fn ready(&self) -> bool {
        let s = self.lock();
        !s.configured || s.current.as_ref().is_some_and(Gateway::is_ready)
    }

    /// The counters since the node started (every instance's).
    pub fn totals(&self) -> Option<GatewayTotals> {
        let s = self.lock();
        s.current.as_ref().map(|g| s.before.plus(g.stats()))
    }

    /// The last drain's report.
    pub fn last_drain(&self) -> Option<DrainReport> {
        self.lock().last_drain.clone()
    }

    /// What `GET /v1/gateway` answers.
    pub fn status(&self) -> Result<GatewayStatus, Unavailable> {
        let gateway = self.current()?;
        let s = self.lock();
        let totals = s.before.plus(gateway.stats());
        Ok(GatewayStatus {
            replica: gateway.replica().clone(),
            ready: gateway.is_ready(),
            draining: s.draining,
            connections: gateway.connections(),
            authenticated: gateway.authenticated(),
            messages_in: totals.messages_in,
            messages_out: totals.messages_out,
            slow_consumer_drops: totals.slow_consumer_drops,
            cluster: gateway.cluster_health(),
            last_drain: s.last_drain.clone(),
            key_fault: gateway.key_fault().map(|e| e.to_string()),
        })
    }

    fn drain_began(&self) {
        self.lock().draining = true;
    }

    fn drained(&self, report: DrainReport) {
        self.lock().last_drain = Some(report);
    }
}

/// Whether the gateway's TLS listener answers the issuance module's TLS-ALPN-01 validations: the
/// gateway serves `wss://` on the port of `acme.tls_alpn01_bind` (443 by default) and an ACME
/// certificate asks for TLS-ALPN-01. The two could not both bind that port, so there is no key.
// r[impl node.gateway.tls-alpn01]
pub fn answers_tls_alpn01(
    gateway: &crate::config::GatewaySection,
    issuance: &IssuanceConfig,
) -> bool {
    let Some(acme) = &issuance.acme else {
        return false;
    };
    gateway.tls.is_some()
        && crate::config::holds_tls_alpn01_bind(*gateway.listen.get_ref(), acme.tls_alpn01_bind)
        && issuance
            .planned()
            .iter()
            .any(|c| c.source == SourceKind::Acme && c.challenge == Challenge::TlsAlpn01)
}

/// [`answers_tls_alpn01`] for `config`'s sections: what the issuance module is started with and
/// what a reload compares for it (`reload::module_inputs`).
// r[impl node.gateway.tls-alpn01]
pub fn config_answers_tls_alpn01(config: &crate::config::Config) -> bool {
    match (&config.gateway, &config.issuance) {
        (Some(g), Some(i)) => answers_tls_alpn01(g.get_ref(), i.get_ref()),
        _ => false,
    }
}

/// The issuance module's challenges as the gateway's listener asks for them.
#[derive(Debug, Clone)]
pub struct IssuanceAlpn(pub AlpnChallenges);

impl AcmeTlsAlpn for IssuanceAlpn {
    fn challenge_config(&self, name: &str) -> Option<Arc<rustls::ServerConfig>> {
        self.0.server_config(name)
    }
}

/// A running gateway as the module's task holds it: stopping it drains it.
struct RunningGateway {
    gateway: Gateway,
    view: GatewayView,
    /// Files and clears the expired-certificate fault while it runs.
    expiry: tokio::task::JoinHandle<()>,
}

/// How often the served certificate's expiry is looked at for the fault.
const EXPIRY_CHECK: std::time::Duration = std::time::Duration::from_secs(5);

/// Keeps the expired-certificate fault in step with the served leaf (the handshakes themselves
/// are refused by the gateway, and counted).
// r[impl node.gateway.tls-expired-fault]
async fn watch_expiry(gateway: Gateway, view: GatewayView) {
    let mut tick = tokio::time::interval(EXPIRY_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        view.expiry_fault(gateway.tls_expired_since());
    }
}

// r[impl node.gateway.stop]
impl Stopper for RunningGateway {
    fn stop(self: Box<Self>, request: StopRequest) -> BoxFuture<Result<(), StopError>> {
        Box::pin(async move {
            // A stopped gateway serves nothing: no fault of its certificate.
            self.expiry.abort();
            self.view.expiry_fault(None);
            self.view.drain_began();
            let report = self
                .gateway
                .drain(request.reason, Some(request.deadline))
                .await;
            let problems = report.problems.clone();
            self.view.drained(report);
            if problems.is_empty() {
                Ok(())
            } else {
                Err(StopError(problems.join("; ")))
            }
        })
    }
}

/// What a running gateway takes live from a reload (`r[node.reload.live-gateway+2]`), and so
/// what each start of the module reads from the handle the reload replaces.
#[derive(Debug, Clone, PartialEq)]
pub struct GatewayLive {
    /// The admission and room limits.
    pub limits: LiveLimits,
    /// Where the token keys come from (read at each start), and the claims checked.
    pub token_keys: crate::config::TokenKeySources,
    /// The TLS pair's files (`None`: plain `ws://`).
    pub tls: Option<holdfast_gateway::TlsFiles>,
}

/// The `[gateway]` section as the node runs it.
#[derive(Clone)]
pub struct GatewayModule {
    /// holdfast-gateway's config, its token key, TLS files and limits replaced at each start by
    /// [`GatewayModule::live`]'s.
    pub config: GatewayConfig,
    /// The cluster backends (`[gateway.cluster]`; absent: memory), connected at each start.
    pub cluster: ClusterConfig,
    /// Where the running gateway is published.
    pub view: GatewayView,
    /// The limits, key files and TLS files each start uses (over `config`'s), replaced by a
    /// reload that takes new ones live.
    pub live: Arc<Mutex<GatewayLive>>,
    slot: Slot<RunningGateway>,
}

impl std::fmt::Debug for GatewayModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is redacted by TokenKey's own Debug.
        f.debug_struct("GatewayModule")
            .field("listen", &self.config.listen)
            .field("replica_id", &self.config.replica_id)
            .field("live", &self.live)
            .finish_non_exhaustive()
    }
}

impl GatewayModule {
    /// The module for a validated `[gateway]` section: `seed` is the node identity's seed for
    /// `gateway`, `data_dir` holds the issuance store, `admin_token_file` the node's admin token
    /// (a publish token equal to it gives no publish key).
    pub fn new(
        section: &crate::config::GatewaySection,
        node_id: &str,
        seed: u64,
        data_dir: &std::path::Path,
        admin_token_file: Option<&std::path::Path>,
        view: GatewayView,
    ) -> Self {
        view.configure();
        // One conversion for the module and the reload's comparison (`reload::module_inputs`).
        let settings = section.settings(data_dir, seed);
        // The real key is read at each start; this placeholder is never used to verify.
        let config = settings.gateway_config(
            node_id,
            holdfast_gateway::TokenKey::new(Vec::new()),
            admin_token_file,
        );
        GatewayModule {
            live: Arc::new(Mutex::new(GatewayLive {
                limits: config.live_limits(),
                token_keys: settings.token_keys,
                tls: config.tls.clone(),
            })),
            config,
            cluster: settings.cluster,
            view,
            slot: Slot::default(),
        }
    }
}

// r[impl node.gateway.module+2]
impl Module for GatewayModule {
    fn name(&self) -> &str {
        NAME
    }

    fn group(&self) -> StopGroup {
        StopGroup::Gateway
    }

    fn start(&self) -> Result<Started, StartError> {
        let used = self
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let GatewayLive {
            limits,
            token_keys,
            tls,
        } = used.clone();
        let live = self.live.clone();
        let key = token_keys.load().map_err(StartError)?;
        let mut config = self.config.clone();
        config.token_key = key;
        config.tls = tls;
        let LiveLimits {
            per_ip_limit,
            unauthenticated_limit,
            unauthenticated_per_ip_limit,
            max_rooms_per_connection,
            max_room_name,
        } = limits;
        config.per_ip_limit = per_ip_limit;
        config.unauthenticated_limit = unauthenticated_limit;
        config.unauthenticated_per_ip_limit = unauthenticated_per_ip_limit;
        config.max_rooms_per_connection = max_rooms_per_connection;
        config.max_room_name = max_room_name;
        let (settings, view) = (self.cluster.clone(), self.view.clone());
        Ok(spawn_hosted(self.slot.clone(), async move {
            // Contacts nothing: a backend that is down delays readiness, not the start.
            let cluster = holdfast_gateway::connect_cluster(&settings, &config.replica_id)
                .await
                .map_err(|e| e.to_string())?;
            let gateway = Gateway::start_cluster(config, cluster)
                .await
                .map_err(|e| e.to_string())?;
            // Always the node's set, which is empty unless the issuance module shares this
            // port: a reload that changes only the issuance side needs no restart here. Set
            // before the gateway is published; a validation that beats it (microseconds after
            // the bind) is served the gateway's own certificate and fails, and its attempt is
            // paced and retried as any failed one. `false` (ignored) for plain `ws://`.
            // r[impl node.gateway.tls-alpn01]
            gateway.answer_tls_alpn01(Arc::new(IssuanceAlpn(view.tls_alpn01_challenges())));
            tracing::info!(replica = %gateway.replica().id, address = %gateway.local_addr(),
                "gateway accepting");
            publish(&live, &used, &gateway, &view);
            let expiry = tokio::spawn(watch_expiry(gateway.clone(), view.clone()));
            Ok(RunningGateway {
                gateway,
                view,
                expiry,
            })
        }))
    }
}

// r[impl node.reload.gateway-race]
/// Publishes a started gateway, first giving it what reloads took live while it started (`used`
/// is what its start read): under the live handle's lock, so a reload's update lands either
/// before (and is given here) or after (and finds the gateway published). Key files and a pair
/// given meanwhile are read off the runtime's threads, then taken unless a newer reload's
/// replaced them.
fn publish(
    live: &Arc<Mutex<GatewayLive>>,
    used: &GatewayLive,
    gateway: &Gateway,
    view: &GatewayView,
) {
    let now = live.lock().unwrap_or_else(PoisonError::into_inner);
    if now.limits != used.limits {
        gateway.update_limits(now.limits);
    }
    let keys = (now.token_keys != used.token_keys).then(|| now.token_keys.clone());
    let tls = now.tls.clone().filter(|_| now.tls != used.tls);
    view.started(gateway.clone());
    drop(now);
    if keys.is_none() && tls.is_none() {
        return;
    }
    let (live, gateway) = (live.clone(), gateway.clone());
    tokio::task::spawn_blocking(move || {
        let keys = keys.map(|k| {
            let read = holdfast_gateway::token::NewKeys::read(k.sources());
            (k, read)
        });
        let tls = tls.map(|t| {
            let read = holdfast_gateway::tls::NewTlsPair::read(t.clone());
            (t, read)
        });
        let now = live.lock().unwrap_or_else(PoisonError::into_inner);
        match keys {
            Some((k, Ok(read))) if now.token_keys == k => gateway.take_token_keys(read),
            Some((_, Err(error))) => tracing::warn!(%error,
                "the started gateway cannot read the key files a reload gave; it keeps the ones it read"),
            _ => {}
        }
        match tls {
            Some((t, Ok(read))) if now.tls.as_ref() == Some(&t) => {
                gateway.take_tls(read);
            }
            Some((_, Err(error))) => tracing::warn!(%error,
                "the started gateway cannot read the TLS pair a reload gave; it keeps the one it read"),
            _ => {}
        }
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use futures_util::{SinkExt, StreamExt};
    use holdfast_gateway::{MemoryRegistry, MemoryRouting, TokenKey};
    use std::time::{Duration, SystemTime};
    use tokio_tungstenite::tungstenite::Message;

    const KEY: &[u8] = b"0123456789abcdef";

    async fn gateway() -> Gateway {
        let config = GatewayConfig::new(
            "127.0.0.1:0".parse().unwrap(),
            "gw",
            TokenKey::new(KEY.to_vec()),
        );
        Gateway::start(
            config,
            Arc::new(MemoryRegistry::new()),
            Arc::new(MemoryRouting::new()),
        )
        .await
        .unwrap()
    }

    /// One client authenticates (one message in, one answer out) and hangs up.
    async fn one_exchange(g: &Gateway) {
        let addr = g.local_addr();
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut ws, _) = tokio_tungstenite::client_async(format!("ws://{addr}/"), tcp)
            .await
            .unwrap();
        let token = holdfast_gateway::Signer::new(KEY)
            .token("ann", SystemTime::now() + Duration::from_secs(60))
            .unwrap();
        let auth = serde_json::json!({"type": "auth", "token": token}).to_string();
        ws.send(Message::Text(auth.into())).await.unwrap();
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(5), ws.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            if msg.is_text() {
                break;
            }
        }
        let _ = ws.close(None).await;
    }

    // A reload's live update that meets a start under way (the start read the old limits and
    // key file, the gateway is not published yet, so the reload finds none to give them to):
    // once the start ends, the gateway has the reload's limits and key file. Interleaved
    // explicitly: on this one-thread runtime the module's task does not run until the test
    // awaits.
    // r[verify node.reload.gateway-race]
    #[tokio::test]
    async fn a_live_update_during_a_start_is_what_the_started_gateway_has() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let key = |name: &str, secret: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, format!("{secret}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            path
        };
        let (old, new) = (
            key("old.key", "gateway-race-old-key-5d1c9e07a3b2f468"),
            key("new.key", "gateway-race-new-key-8e2a41c7d09f3b65"),
        );
        let section = |key: &std::path::Path, per_ip: usize| -> crate::config::GatewaySection {
            toml::from_str(&format!(
                "listen = \"127.0.0.1:0\"\ntoken_key_file = \"{}\"\nper_ip_limit = {per_ip}\n",
                key.display()
            ))
            .unwrap()
        };
        let view = GatewayView::default();
        let module = GatewayModule::new(
            &section(&old, 100),
            "node",
            1,
            dir.path(),
            None,
            view.clone(),
        );
        let newer = GatewayModule::new(
            &section(&new, 7),
            "node",
            1,
            dir.path(),
            None,
            GatewayView::default(),
        );
        let started = module.start().expect("starts");
        // The reload: the handle replaced, no gateway running to give the update to.
        *module.live.lock().unwrap() = newer.live.lock().unwrap().clone();
        assert!(view.running().is_none());
        let mut gateway = None;
        for _ in 0..500 {
            gateway = view.running();
            if gateway.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let gateway = gateway.expect("the gateway never started");
        assert_eq!(gateway.live_limits().per_ip_limit, 7);
        let mut sources = Vec::new();
        for _ in 0..500 {
            sources = gateway.token_key_sources();
            if sources.iter().any(|s| s.path == new) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            sources.iter().map(|s| s.path.clone()).collect::<Vec<_>>(),
            [new],
            "the started gateway kept the key file its start read"
        );
        started
            .stopper
            .stop(StopRequest {
                deadline: tokio::time::Instant::now() + Duration::from_secs(5),
                reason: holdfast_lifecycle::StopReason::Restart,
            })
            .await
            .expect("stops");
    }

    // r[verify node.gateway.metrics+4]
    #[tokio::test]
    async fn the_totals_keep_every_instances_counters_across_restarts() {
        let view = GatewayView::default();
        view.configure();
        assert_eq!(view.totals(), None);
        let first = gateway().await;
        view.started(first.clone());
        one_exchange(&first).await;
        first
            .drain(holdfast_lifecycle::StopReason::Restart, None)
            .await;
        // Read after the drain: its close frames are counted too.
        let after_first = view.totals().unwrap();
        assert!(after_first.messages_in >= 1, "{after_first:?}");
        // The module restarts: a new instance, its own counters at zero.
        let second = gateway().await;
        view.started(second.clone());
        assert_eq!(view.totals(), Some(after_first));
        one_exchange(&second).await;
        let after_second = view.totals().unwrap();
        assert_eq!(
            after_second.messages_in,
            after_first.messages_in + second.stats().messages_in
        );
        assert!(after_second.messages_in > after_first.messages_in);
        assert_eq!(view.status().unwrap().messages_in, after_second.messages_in);
        second
            .drain(holdfast_lifecycle::StopReason::Restart, None)
            .await;
    }

    fn sections(
        listen: &str,
        tls: bool,
        challenge: &str,
        bind: &str,
    ) -> (crate::config::GatewaySection, IssuanceConfig) {
        let tls = if tls {
            "[tls]\ncert = \"/c.pem\"\nkey = \"/k.pem\"\n"
        } else {
            ""
        };
        let gateway = toml::from_str(&format!("listen = \"{listen}\"\n{tls}")).unwrap();
        let issuance = serde_json::from_value(serde_json::json!({
            "certificate": [{ "names": ["a.example"], "source": "acme", "challenge": challenge }],
            "acme": { "directory": "https://127.0.0.1:9/dir", "tls_alpn01_bind": bind },
        }))
        .unwrap();
        (gateway, issuance)
    }

    // r[verify node.gateway.tls-alpn01]
    #[test]
    fn the_gateway_answers_tls_alpn01_only_on_the_validated_port_with_tls() {
        let answers = |listen, tls, challenge, bind| {
            let (g, i) = sections(listen, tls, challenge, bind);
            answers_tls_alpn01(&g, &i)
        };
        // The default bind is :443; any address on that port is the gateway's.
        assert!(answers("0.0.0.0:443", true, "tls-alpn-01", "0.0.0.0:443"));
        assert!(answers(
            "127.0.0.1:5001",
            true,
            "tls-alpn-01",
            "0.0.0.0:5001"
        ));
        // Another port, plain ws://, no certificate asking for TLS-ALPN-01, or port 0: its own.
        assert!(!answers("0.0.0.0:8443", true, "tls-alpn-01", "0.0.0.0:443"));
        assert!(!answers("0.0.0.0:443", false, "tls-alpn-01", "0.0.0.0:443"));
        assert!(!answers("0.0.0.0:443", true, "http-01", "0.0.0.0:443"));
        assert!(!answers("127.0.0.1:0", true, "tls-alpn-01", "127.0.0.1:0"));
        // Two specific addresses on one port: both bind, each its own listener.
        assert!(answers(
            "127.0.0.1:5001",
            true,
            "tls-alpn-01",
            "127.0.0.1:5001"
        ));
        assert!(!answers(
            "127.0.0.1:5001",
            true,
            "tls-alpn-01",
            "127.0.0.2:5001"
        ));
        assert!(answers("[::]:443", true, "tls-alpn-01", "127.0.0.1:443"));
        let (g, mut i) = sections("0.0.0.0:443", true, "tls-alpn-01", "0.0.0.0:443");
        i.acme = None;
        assert!(!answers_tls_alpn01(&g, &i));
    }

    // The set the node keeps is one: every call hands out the same challenges.
    // r[verify node.gateway.tls-alpn01]
    #[test]
    fn the_view_keeps_one_set_of_challenges() {
        let view = GatewayView::default();
        let a = view.tls_alpn01_challenges();
        a.insert("a.example", &[1u8; 32]).unwrap();
        assert!(view.tls_alpn01_challenges().contains("a.example"));
        assert!(
            IssuanceAlpn(view.clone().tls_alpn01_challenges())
                .challenge_config("a.example")
                .is_some()
        );
    }
}
