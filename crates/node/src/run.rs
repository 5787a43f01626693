//! `holdfast run`: compose the modules, serve the admin API, and stop in order on a signal.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use holdfast_lifecycle::{FaultBoard, NodeIdentity, StopPlan, StopReason, StopReport, Stopper};

use crate::admin::{self, AdminConfig};
use crate::config::{Config, Listen};
use crate::metrics::Metrics;
use crate::module::{Module, StopGroup};
use crate::modules::{
    forward::ForwardModule, gateway::GatewayModule, issuance::IssuanceModule, pull::PullModule,
    workload::WorkloadModule,
};
use crate::notify;
use crate::reload::{Change, Inputs, ReloadError};
use crate::state::{NodeState, Phase};
use crate::supervisor::{self, SuperviseConfig};

/// Exit status: the node stopped cleanly, inside its budget.
pub const EXIT_CLEAN: u8 = 0;
/// Exit status: the node could not start (config, data directory, admin API).
pub const EXIT_START_FAILED: u8 = 1;
/// Exit status: the stop plan finished, but a stopper failed or was cut off at its budget.
pub const EXIT_STOP_UNCLEAN: u8 = 3;
/// Exit status: the stop was aborted: a second signal during the stop plan, or SIGQUIT.
pub const EXIT_ABORTED: u8 = 4;

/// How long the exit waits for the service manager to take the last notifications.
const NOTIFY_FLUSH: Duration = Duration::from_secs(1);

/// The node could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The data directory.
    #[error("data directory {}: {source}", path.display())]
    DataDir {
        /// Its path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The node identity.
    #[error("node identity: {0}")]
    Identity(#[from] holdfast_lifecycle::IdentityError),
    /// The admin API.
    #[error(transparent)]
    Admin(#[from] admin::AdminError),
    /// The admin token file.
    #[error("admin.token_file: {0}")]
    Token(String),
    /// Signal handlers.
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
}

/// The exit status a stop report maps to.
// i[impl node.stop.exit-status+2]
pub fn exit_status(report: &StopReport) -> u8 {
    if report.aborted {
        EXIT_ABORTED
    } else if report.clean() {
        EXIT_CLEAN
    } else {
        EXIT_STOP_UNCLEAN
    }
}

// r[impl node.data-dir]
/// Creates the data directory (and its parents) with mode 0700, and tightens an existing one.
pub fn prepare_data_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
}

// r[impl node.stop.order]
/// The stop plan: one group per [`StopGroup`] in [`StopGroup::ORDER`] (gateway drain first, image
/// pulls last; empty groups are fine), each module's stopper in its group, one total budget.
pub fn stop_plan(
    budget: Duration,
    stoppers: Vec<(String, StopGroup, Box<dyn Stopper>)>,
) -> StopPlan {
    let mut plan = StopPlan::new(budget);
    let ids: Vec<_> = StopGroup::ORDER
        .iter()
        .map(|group| (*group, plan.group(group.name(), group.share())))
        .collect();
    for (name, group, stopper) in stoppers {
        if let Some((_, id)) = ids.iter().find(|(g, _)| *g == group) {
            plan.add(*id, name, stopper);
        }
    }
    plan
}

// r[impl node.workload.module]
// r[impl node.issuance.module]
// r[impl node.forward.module+2]
// r[impl node.gateway.module+2]
/// The modules `config` runs, each still to be supervised: pull unless `pull.enabled = false`,
/// workload with at least one `[[workload]]`, and issuance, forward and gateway each with its
/// section.
fn compose(
    config: &Config,
    identity: &NodeIdentity,
    node: &NodeState,
    live: &Live,
) -> Vec<Arc<dyn Module>> {
    compose_some(config, identity, node, live, &|_| true)
}

/// What a reload may replace in running modules without restarting them, shared with the
/// modules `compose` builds.
#[derive(Clone, Default)]
struct Live {
    /// The pull module's set of images.
    pull_images: crate::modules::pull::SharedImages,
    /// The workload module's workloads.
    desired: crate::modules::workload::Desired,
    /// The forward module's access, and what its running server was last given.
    forward_access: crate::modules::forward::SharedAccess,
    /// The config the issuance module starts from, once one is built.
    issuance: Handle<holdfast_issuance::IssuanceConfig>,
    /// The limits, key files and TLS files the gateway module starts with, once one is built.
    gateway: Handle<crate::modules::gateway::GatewayLive>,
}

/// The reload's handle on what a module built by `compose` starts from.
type Handle<T> = Arc<std::sync::Mutex<Option<Arc<std::sync::Mutex<T>>>>>;

/// Replaces what `handle` holds, once a module gave it one.
fn replace<T>(handle: &Handle<T>, value: T) {
    if let Some(inner) = handle
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .as_ref()
    {
        *inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = value;
    }
}

/// [`compose`], building only the modules whose name `want` accepts (a reload builds only the
/// ones it starts).
fn compose_some(
    config: &Config,
    identity: &NodeIdentity,
    node: &NodeState,
    live: &Live,
    want: &dyn Fn(&str) -> bool,
) -> Vec<Arc<dyn Module>> {
    use crate::modules::{forward, gateway, issuance, pull, workload};
    let mut modules: Vec<Arc<dyn Module>> = Vec::new();
    if config.pull.enabled && want(pull::NAME) {
        // One builder for the module and the reload's comparison (`reload::module_inputs`).
        let crate::config::PullInputs {
            workloads,
            docker_host,
            config: pull_config,
            auth,
            tag_checks,
            gc,
        } = config.pull_inputs(identity.seed(crate::modules::pull::NAME));
        // Shared with the node's reload, which may replace them live.
        *live
            .pull_images
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = workloads;
        modules.push(Arc::new(PullModule {
            workloads: Arc::clone(&live.pull_images),
            docker_host,
            config: pull_config,
            auth,
            tag_checks,
            tick: config.node.tick.get_ref().get(),
            gc,
            node: node.clone(),
        }));
    }
    if !config.workloads.is_empty() && want(workload::NAME) {
        // Shared with the node's reload, which may replace them live.
        *live
            .desired
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            config.workloads.iter().map(|w| w.to_config()).collect();
        let crate::config::WorkloadSettings {
            stop_on_exit,
            owner,
            pull_enabled,
            docker_host,
        } = config.workload_settings();
        modules.push(Arc::new(WorkloadModule {
            workloads: Arc::clone(&live.desired),
            docker_host,
            seed: identity.seed(crate::modules::workload::NAME),
            stop_on_exit,
            owner,
            tick: config.node.tick.get_ref().get(),
            pull_enabled,
            node: node.clone(),
        }));
    }
    // r[impl node.gateway.tls-alpn01]
    let tls_alpn01 =
        gateway::config_answers_tls_alpn01(config).then(|| node.gateway.tls_alpn01_challenges());
    if let Some(issuance) = config.issuance.as_ref().filter(|_| want(issuance::NAME)) {
        let module = IssuanceModule::new(
            issuance.get_ref().clone(),
            config.node.data_dir.clone(),
            identity.seed(crate::modules::issuance::NAME),
            node.faults.clone(),
            node.issuance.clone(),
        )
        .with_tls_alpn01(tls_alpn01);
        // The reload's handle on the config the module starts from.
        *live
            .issuance
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::clone(&module.config));
        modules.push(Arc::new(module));
    }
    if let Some(forward) = config.forward.as_ref().filter(|_| want(forward::NAME)) {
        // Its access shared with the node's reload, which may replace it live.
        modules.push(Arc::new(
            ForwardModule::new(
                forward.get_ref(),
                config.node.data_dir.clone(),
                node.forward.clone(),
            )
            .sharing(&live.forward_access)
            .reporting(&node.faults),
        ));
    }
    if let Some(gateway) = config.gateway.as_ref().filter(|_| want(gateway::NAME)) {
        let module = GatewayModule::new(
            gateway.get_ref(),
            identity.id(),
            identity.seed(crate::modules::gateway::NAME),
            &config.node.data_dir,
            config
                .admin
                .token_file
                .as_ref()
                .map(|f| f.get_ref().as_path()),
            node.gateway.clone(),
        );
        // The reload's handle on what the module starts with.
        *live
            .gateway
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::clone(&module.live));
        modules.push(Arc::new(module));
    }
    // i[impl node.testing-modules]
    #[cfg(feature = "testing-modules")]
    if config.testing.as_ref().is_some_and(|t| t.hang_on_stop)
        && want(crate::modules::testing::HANG_NAME)
    {
        tracing::warn!("[testing] hang_on_stop: running a test module whose stopper never returns");
        modules.push(Arc::new(crate::modules::testing::HangOnStop));
    }
    #[cfg(feature = "testing-modules")]
    if config.testing.as_ref().is_some_and(|t| t.wedge_start)
        && want(crate::modules::testing::WEDGE_NAME)
    {
        tracing::warn!(
            "[testing] wedge_start: running a test module whose start blocks its thread"
        );
        modules.push(Arc::new(crate::modules::testing::WedgeStart));
    }
    modules
}

/// The node's signal handlers, installed before anything else `holdfast run` does (the config's
/// load included), so that no signal kills the node the default way; each signal that comes
/// before [`run`] looks is held until it does.
#[derive(Debug)]
pub struct NodeSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
}

// r[impl node.signal.hup+2]
impl NodeSignals {
    /// Installs SIGTERM's, SIGINT's, SIGHUP's and SIGQUIT's handlers. Call it inside the runtime
    /// (`Runtime::enter`).
    pub fn install() -> Result<Self, RunError> {
        use tokio::signal::unix::{SignalKind, signal};
        let kind = |kind| signal(kind).map_err(RunError::Signals);
        Ok(NodeSignals {
            term: kind(SignalKind::terminate())?,
            int: kind(SignalKind::interrupt())?,
            hup: kind(SignalKind::hangup())?,
            quit: kind(SignalKind::quit())?,
        })
    }
}

/// Where the node's config comes from, so that a reload reads it the same way again.
#[derive(Debug, Clone, Default)]
pub struct ConfigSource {
    /// The file (`-c`); `None`: the embedded default.
    pub path: Option<PathBuf>,
    /// `--data-dir`, which overrides `node.data_dir`.
    pub data_dir: Option<PathBuf>,
}

/// A config as read and validated (the reload compares its typed inputs, not the text).
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The validated config.
    pub config: Config,
}

impl ConfigSource {
    /// Reads and validates the config; the error is the line `holdfast check-config` prints.
    pub fn load(&self) -> Result<Loaded, String> {
        let (file, text) = match &self.path {
            Some(path) => {
                let file = path.display().to_string();
                let text = std::fs::read_to_string(path).map_err(|source| {
                    crate::config::LoadError::Read {
                        file: file.clone(),
                        source,
                    }
                    .to_string()
                })?;
                (file, text)
            }
            None => (
                crate::config::DEFAULT_CONFIG_NAME.to_owned(),
                crate::config::DEFAULT_CONFIG.to_owned(),
            ),
        };
        let mut config = Config::parse_for_node(&file, &text).map_err(|e| e.to_string())?;
        if let Some(dir) = &self.data_dir {
            config.node.data_dir = dir.clone();
        }
        Ok(Loaded { config })
    }
}

/// One running module: its supervisor's stopper.
struct RunningModule {
    name: String,
    group: StopGroup,
    stopper: Box<dyn Stopper>,
}

/// What runs now: the config, its modules' inputs (what a reload compares) and its modules.
struct Running {
    config: Config,
    inputs: Inputs,
    modules: Vec<RunningModule>,
    /// Set by the node's stop when it takes `modules`: no reload starts anything after it.
    closed: bool,
}

/// What starting a module needs besides the module.
#[derive(Clone)]
struct Context {
    identity: NodeIdentity,
    node: NodeState,
    heartbeat: notify::Heartbeat,
    /// What a reload may replace live.
    live: Live,
    /// The reloads' reads and checks still running.
    outstanding: Outstanding,
}

impl Context {
    /// Spawns `module`'s supervisor (paced by `config`'s `[supervise]`) and a watcher of its task;
    /// resolves `first_start` once its first start has been made.
    fn supervise(
        &self,
        module: Arc<dyn Module>,
        config: &Config,
    ) -> (RunningModule, tokio::sync::oneshot::Receiver<()>) {
        let supervise = SuperviseConfig {
            policy: config
                .supervise_policy(self.identity.seed(&format!("supervise/{}", module.name()))),
            must_last: config.supervise.must_last.get(),
            crash_loop_threshold: *config.supervise.crash_loop_threshold.get_ref(),
            crash_loop_window: config.supervise.crash_loop_window.get(),
        };
        let name = module.name().to_owned();
        let group = module.group();
        let s = supervisor::spawn_with_heartbeat(
            module,
            supervise,
            self.node.clone(),
            self.heartbeat.clone(),
        );
        let task = s.task;
        let watched = name.clone();
        tokio::spawn(async move {
            // A supervisor ends only when stopped; one that panics is a bug worth an error line
            // (its stopper then reports the stop as failed).
            if let Err(err) = task.await {
                tracing::error!(module = %watched, error = %err, "module supervisor ended on its own");
            }
        });
        (
            RunningModule {
                name,
                group,
                stopper: Box::new(s.stopper),
            },
            s.first_start,
        )
    }
}

/// Runs the node until SIGTERM, SIGINT or `POST /v1/drain`, then runs the stop plan. SIGHUP and
/// `POST /v1/reload` reload `source`; SIGQUIT exits the process at once.
pub async fn run(
    loaded: Loaded,
    source: ConfigSource,
    signals: NodeSignals,
) -> Result<StopReport, RunError> {
    let NodeSignals {
        term,
        int,
        hup,
        quit,
    } = signals;
    tokio::spawn(on_quit(quit));
    let Loaded { config, .. } = loaded;

    let data_dir = config.node.data_dir.clone();
    prepare_data_dir(&data_dir).map_err(|source| RunError::DataDir {
        path: data_dir.clone(),
        source,
    })?;
    let identity = NodeIdentity::resolve(config.node.id.as_ref().map(|id| id.get_ref().as_str()))?;
    let node = NodeState::new(identity.id(), FaultBoard::new(), Metrics::new());
    // Answered from here on (the log is set up now); one that came earlier is answered once the
    // reload loop below runs.
    let reload_asks = node.take_reloads();
    tokio::spawn(on_hangup(hup, node.clone()));
    let token = match &config.admin.token_file {
        Some(path) => Some(admin::token::read(path.get_ref()).map_err(RunError::Token)?),
        None => None,
    };
    let tcp = match config.admin.listen.get_ref() {
        Listen::Tcp(addr) => Some(*addr),
        Listen::Off => None,
    };
    let server = admin::serve(
        node.clone(),
        AdminConfig {
            tcp,
            socket: config.admin.socket.clone(),
            token,
            limits: admin::AdminLimits::default(),
            allowed_hosts: config.admin.allowed_hosts(),
        },
    )
    .await?;
    if let Some(addr) = server.tcp {
        // Lets the CLI and tests find a node that was given port 0.
        let _ = std::fs::write(data_dir.join("admin.addr"), format!("{addr}\n"));
    }
    tracing::info!(
        node_id = identity.id(),
        identity_source = ?identity.source(),
        admin = ?server.tcp,
        admin_socket = ?server.socket,
        data_dir = %data_dir.display(),
        "holdfast node starting"
    );

    let live = Live {
        desired: crate::modules::workload::desired(Vec::new()),
        ..Live::default()
    };
    let modules = compose(&config, &identity, &node, &live);

    // systemd (Type=notify): the watchdog's heartbeat runs only when a service manager listens
    // and asks for it.
    let watchdog = notify::enabled().then(notify::watchdog_interval).flatten();
    let heartbeat = match notify::Core::new(watchdog).beat_every() {
        Some(every) => notify::Heartbeat::every(every),
        None => notify::Heartbeat::off(),
    };
    let context = Context {
        identity: identity.clone(),
        node: node.clone(),
        heartbeat: heartbeat.clone(),
        live,
        outstanding: Outstanding::default(),
    };

    let mut supervised = Vec::new();
    let mut first_starts = Vec::new();
    for module in modules {
        let (running, first) = context.supervise(module, &config);
        first_starts.push(first);
        supervised.push(running);
    }
    // After the supervisors registered their modules, so the first status counts them all.
    let notifier = notify::spawn(node.clone(), heartbeat, watchdog);
    let ready_node = node.clone();
    let ready_notifier = notifier.clone();
    tokio::spawn(async move {
        for first in first_starts {
            let _ = first.await;
        }
        // One atomic step that never leaves Draining (a stop may have begun meanwhile).
        ready_node.set_phase(Phase::Running);
        if ready_node.phase() == Phase::Running {
            tracing::info!("holdfast node running");
        }
        if let Some(notifier) = ready_notifier {
            notifier.poke();
        }
    });

    let inputs = Inputs::of_node(&config, identity.id());
    let budget = config.node.stop_budget.get_ref().get();
    let running = Arc::new(tokio::sync::Mutex::new(Running {
        config,
        inputs,
        modules: supervised,
        closed: false,
    }));
    tokio::spawn(serve_reloads(
        reload_asks,
        Arc::clone(&running),
        context,
        source,
        notifier.clone(),
    ));

    // r[impl node.stop.signal+2]
    let mut signals = Signals {
        term,
        int,
        until_abort: 1,
    };
    let reason = signals.stop_reason(&node).await;
    node.set_phase(Phase::Draining);
    if let Some(notifier) = &notifier {
        notifier.poke();
    }
    // r[impl node.reload.stopping+2]
    // A reload under way lets go at once (its stops are cut off by the draining phase, and it
    // starts nothing once the phase is draining); a second signal still aborts meanwhile.
    let supervised = tokio::select! {
        mut running = running.lock() => {
            running.closed = true;
            std::mem::take(&mut running.modules)
        }
        () = signals.abort() => {
            tracing::warn!("the stop was aborted while a reload let go");
            return Ok(StopReport {
                budget,
                took: Duration::ZERO,
                aborted: true,
                modules: Vec::new(),
            });
        }
    };
    let plan = stop_plan(
        budget,
        supervised
            .into_iter()
            .map(|m| (m.name, m.group, m.stopper))
            .collect(),
    );
    let report = plan.run(reason, signals.abort()).await;
    for module in &report.modules {
        tracing::info!(module = %module.module, group = %module.group, took = ?module.took,
            budget = ?module.budget, outcome = ?module.outcome, "module stopped");
    }
    tracing::info!(took = ?report.took, budget = ?report.budget, clean = report.clean(),
        aborted = report.aborted, "holdfast node stopped");
    let mut report = report;
    if !report.aborted {
        // The admin API gets what is left of the budget to finish its requests (a stalled
        // client must not hold the process), and a second signal still exits at once.
        let left = budget.saturating_sub(report.took);
        tokio::select! {
            () = server.shutdown(left) => {}
            () = signals.abort() => report.aborted = true,
        }
    }
    // The last status (every module stopped) and anything still queued go out before the exit;
    // an aborted stop exits at once instead.
    if let Some(notifier) = &notifier
        && !report.aborted
    {
        notifier.finish(NOTIFY_FLUSH).await;
    }
    Ok(report)
}

// r[impl node.reload.forward-files+3]
/// What a forward whose section is unchanged is given: the access its token files `read` now,
/// when it grants anything else than what its server was last given. Given whether a server is
/// up or not: one whose start is under way takes it when it is published
/// (`r[node.reload.forward-race]`). Files that cannot be read leave its credentials as they were
/// and are a fault until a reload, or a start of the module, reads them.
fn unchanged_forward(
    node: &NodeState,
    shared: &crate::modules::forward::SharedAccess,
    spec: crate::config::AccessSpec,
    read: Result<holdfast_forward::Access, String>,
) -> Option<(crate::config::AccessSpec, holdfast_forward::Access)> {
    match read {
        Ok(access) => {
            // Read again: whatever kept them from being read is over.
            node.faults.clear(&forward_files_subject());
            let given = crate::modules::forward::given_access(shared);
            (!given.is_some_and(|g| crate::modules::forward::same_access(&g, &access)))
                .then_some((spec, access))
        }
        // Kept until a reload, or a start of the module, reads them.
        Err(error) => {
            tracing::warn!(%error,
                "reload: the forward's token files cannot be read; the forward keeps its credentials");
            node.faults.file(
                forward_files_subject(),
                "token_file_unreadable",
                &format!(
                    "the forward's token files were not taken at the reload (the forward keeps \
                     its credentials): {error}"
                ),
                1,
                std::time::SystemTime::now(),
            );
            None
        }
    }
}

/// The fault subject of a forward's token files that a reload could not read (its section
/// unchanged, the running server keeping its credentials).
pub fn forward_files_subject() -> holdfast_lifecycle::Subject {
    crate::modules::forward::token_files_subject()
}

/// A reload refused as an invalid file is: its fault filed (`config_invalid`, naming what is
/// wrong), and the error the reload answers.
fn refuse_reload(node: &NodeState, message: String) -> ReloadError {
    node.faults.file(
        reload_subject(),
        "config_invalid",
        &format!("the config was not reloaded: {message}"),
        1,
        std::time::SystemTime::now(),
    );
    ReloadError::Invalid(message)
}

/// The fault subject of a reload whose file is invalid.
pub fn reload_subject() -> holdfast_lifecycle::Subject {
    holdfast_lifecycle::Subject::new("reload", "config")
}

// r[impl node.reload.serial]
/// Takes reloads one at a time, in the order they were asked for, until the node is gone.
async fn serve_reloads(
    mut asks: tokio::sync::mpsc::Receiver<crate::state::ReloadAsk>,
    running: Arc<tokio::sync::Mutex<Running>>,
    context: Context,
    source: ConfigSource,
    notifier: Option<notify::Notifier>,
) {
    while let Some(reply) = asks.recv().await {
        // Every ask that waited meanwhile is answered by this one reload: it reads the file
        // after each of them was asked for.
        let mut replies = vec![reply];
        while let Ok(more) = asks.try_recv() {
            replies.push(more);
        }
        let outcome = if context.node.phase() == Phase::Draining {
            Err(ReloadError::Stopping)
        } else {
            if let Some(notifier) = &notifier {
                notifier.reloading();
            }
            let outcome = reload(&running, &context, &source).await;
            // A stop that began meanwhile has said STOPPING=1: no READY=1 after it.
            if let Some(notifier) = notifier
                .as_ref()
                .filter(|_| context.node.phase() != Phase::Draining)
            {
                let generation = context.node.config_generation().generation;
                let status = match &outcome {
                    Ok(_) => format!("reloaded: config generation {generation}"),
                    Err(_) => format!("reload refused: config generation {generation} kept"),
                };
                notifier.send(vec![
                    notify::Message::Ready,
                    notify::Message::Status(status),
                ]);
            }
            outcome
        };
        match &outcome {
            Ok(applied) => tracing::info!(
                generation = applied.generation.generation,
                modules = ?applied.modules,
                needs_restart = ?applied.needs_restart,
                took_ms = applied.took_ms,
                "config reloaded"
            ),
            Err(err) => tracing::warn!(error = %err, "reload refused"),
        }
        // r[impl node.reload.gateway-files+2]
        // A file rotated in place is no change to the config: the running gateway checks its
        // key and TLS files now rather than at its next poll. Off the runtime's threads and not
        // awaited: a hung file holds up neither the next reload nor the node's stop.
        if let Some(gateway) = context.node.gateway.running().filter(|_| outcome.is_ok()) {
            tokio::task::spawn_blocking(move || {
                let keys = gateway.reload_keys();
                let tls = gateway.reload_tls();
                tracing::info!(
                    ?keys,
                    ?tls,
                    "reload: the gateway checked its key and TLS files"
                );
            });
        }
        for reply in replies {
            let _ = reply.send(outcome.clone());
        }
    }
}

/// What one reload gives running modules live, decided before its stops and applied after them.
#[derive(Default)]
struct LiveUpdates {
    pull: Option<Vec<(String, String)>>,
    workloads: Option<Vec<holdfast_workload::WorkloadConfig>>,
    forward: Option<(crate::config::AccessSpec, holdfast_forward::Access)>,
    issuance: Option<(
        holdfast_issuance::IssuanceConfig,
        holdfast_issuance::Certificates,
    )>,
    gateway: Option<GatewayUpdate>,
}

/// What a running gateway takes live: what its later starts use, and the key files and TLS pair
/// read before the reload took the running modules (when their paths changed).
struct GatewayUpdate {
    live: crate::modules::gateway::GatewayLive,
    keys: Option<holdfast_gateway::token::NewKeys>,
    tls: Option<holdfast_gateway::tls::NewTlsPair>,
}

impl LiveUpdates {
    /// The modules given something.
    fn names(&self) -> Vec<&'static str> {
        use crate::modules::{forward, gateway, issuance, pull, workload};
        [
            (pull::NAME, self.pull.is_some()),
            (workload::NAME, self.workloads.is_some()),
            (forward::NAME, self.forward.is_some()),
            (issuance::NAME, self.issuance.is_some()),
            (gateway::NAME, self.gateway.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, given)| given.then_some(name))
        .collect()
    }

    /// Gives each module its update. The shared handle each restart of a module starts from is
    /// replaced first: a module that ended meanwhile starts again from the new settings.
    fn apply(self, context: &Context) {
        let node = &context.node;
        // r[impl node.reload.live-pull+2]
        // The running module reads the set at its next tick, a restart of it starts from it.
        if let Some(images) = self.pull {
            *context
                .live
                .pull_images
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = images;
            tracing::info!("reload: the pull module took its new set of images live");
        }
        // r[impl node.reload.live+3]
        if let Some(workloads) = self.workloads {
            *context
                .live
                .desired
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = workloads.clone();
            if node
                .workload
                .with(|r| r.handle.set_desired(workloads))
                .unwrap_or(false)
            {
                tracing::info!("reload: the workload module took its new workloads live");
            }
        }
        // r[impl node.reload.live-forward]
        // Open forwards whose target is still allowed go on; the others end, told why.
        // r[impl node.reload.forward-race]
        // A start under way gives its server this access when it ends (`give_access`).
        if let Some((spec, access)) = self.forward {
            if crate::modules::forward::give_access(
                &context.live.forward_access,
                &node.forward,
                spec,
                access,
            ) {
                tracing::info!("reload: the forward module took its new access live");
            }
        }
        // r[impl node.reload.live-issuance]
        // The others' state, pacing and history stay as they are.
        if let Some((config, certificates)) = self.issuance {
            replace(&context.live.issuance, config);
            if node
                .issuance
                .with(|i| i.apply_certificates(certificates))
                .is_ok()
            {
                tracing::info!("reload: the issuance module took its new certificates live");
            }
        }
        // r[impl node.reload.live-gateway+2]
        // No client is drained or closed.
        if let Some(GatewayUpdate { live, keys, tls }) = self.gateway {
            let limits = live.limits;
            replace(&context.live.gateway, live);
            if let Some(gateway) = node.gateway.running() {
                gateway.update_limits(limits);
                // Read before the lock: nothing here reads a file.
                if let Some(keys) = keys {
                    gateway.take_token_keys(keys);
                }
                if let Some(pair) = tls {
                    gateway.take_tls(pair);
                }
                tracing::info!(
                    "reload: the gateway took its new limits, key files and TLS pair live"
                );
            }
        }
    }
}

/// How long a reload waits for its file to be read (a FIFO with no writer, a hung network file
/// system); then it is refused, and the next one reads again.
const CONFIG_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The issuance module's check of a new config (its deploy settings, hooks, DNS-01): it looks
/// users and groups up, so it runs off the runtime's threads.
type IssuanceCheck = Box<
    dyn FnOnce(
            &holdfast_issuance::IssuanceConfig,
        ) -> Result<holdfast_issuance::Certificates, String>
        + Send,
>;

/// What a reload read and checked before it took the running set.
#[derive(Default)]
struct Prepared {
    /// The forward's access, its token files read (when it may take it live, or its section is
    /// unchanged).
    forward: Option<(
        crate::config::AccessSpec,
        Result<holdfast_forward::Access, String>,
    )>,
    /// The issuance module's new config and its check (when it may take it live and runs).
    issuance: Option<(
        holdfast_issuance::IssuanceConfig,
        Result<holdfast_issuance::Certificates, String>,
    )>,
    /// The gateway's new key files and TLS pair, read (when it may take new paths live).
    gateway: Option<Result<GatewayRead, String>>,
}

/// The gateway's new files as read before the lock: each part when its paths changed. The
/// errors stay typed until [`decide_gateway`] judges them.
struct GatewayRead {
    keys: Option<Result<holdfast_gateway::token::NewKeys, holdfast_gateway::token::KeyError>>,
    tls: Option<Result<holdfast_gateway::tls::NewTlsPair, holdfast_gateway::TlsError>>,
}

// r[impl node.reload.live-gateway+2]
/// Reads `files` (blocking file I/O: run off the runtime's threads).
fn read_gateway_files(files: crate::reload::GatewayFiles) -> GatewayRead {
    GatewayRead {
        keys: files.keys.map(holdfast_gateway::token::NewKeys::read),
        tls: files.tls.map(holdfast_gateway::tls::NewTlsPair::read),
    }
}

/// What a reload does with the gateway's new files.
#[derive(Debug)]
// One per reload, moved once: boxing the pair would only add an allocation.
#[allow(clippy::large_enum_variant)]
enum GatewayVerdict {
    /// Taken live: each part when its paths changed.
    Take {
        keys: Option<holdfast_gateway::token::NewKeys>,
        tls: Option<holdfast_gateway::tls::NewTlsPair>,
    },
    /// A `from_issuance` pair not issued yet: the gateway restarts, its start retried until the
    /// certificate exists.
    Restart(holdfast_gateway::TlsError),
    /// The reload is refused; the message names the file.
    Refuse(String),
}

// r[impl node.reload.live-gateway+2]
/// Judges the gateway's new files as read (`Err` when they were not read in time): only a
/// `from_issuance` pair whose file does not exist yet restarts the gateway; any other file that
/// cannot be read or used refuses the reload, the running gateway untouched.
fn decide_gateway(read: Result<GatewayRead, String>, from_issuance: bool) -> GatewayVerdict {
    let GatewayRead { keys, tls } = match read {
        Ok(read) => read,
        Err(message) => return GatewayVerdict::Refuse(message),
    };
    let keys = match keys.transpose() {
        Ok(keys) => keys,
        Err(e) => return GatewayVerdict::Refuse(format!("the gateway's token key files: {e}")),
    };
    match tls.transpose() {
        Ok(tls) => GatewayVerdict::Take { keys, tls },
        Err(holdfast_gateway::TlsError::Read { path, source })
            if from_issuance && source.kind() == std::io::ErrorKind::NotFound =>
        {
            GatewayVerdict::Restart(holdfast_gateway::TlsError::Read { path, source })
        }
        Err(e) => GatewayVerdict::Refuse(format!("the gateway's TLS pair: {e}")),
    }
}

// r[impl node.reload.live-forward]
// r[impl node.reload.forward-files+3]
// r[impl node.reload.issuance-check]
/// Reads and checks what a reload of `config` may take live, without the running set locked
/// (the node's stop waits for that lock), each part off the runtime's threads and bounded by the
/// config read's timeout: a FIFO, a hung file system or a hung name service refuses that live
/// update (a changed module restarts, an unchanged forward keeps its credentials). The lock is
/// taken only to decide what is wanted. `check` is the running issuance module's.
async fn prepare(
    running: &tokio::sync::Mutex<Running>,
    config: &Config,
    check: Option<IssuanceCheck>,
    outstanding: &Outstanding,
    node_id: &str,
) -> Prepared {
    use crate::modules::{forward, issuance};
    let (forward_wanted, issuance_wanted, gateway_files) = {
        let running = running.lock().await;
        if running.closed {
            return Prepared::default();
        }
        // Compared as the reload compares them: with the running node sections.
        let mut config = config.clone();
        crate::reload::keep_node_sections(&mut config, &running.config);
        let new_inputs = Inputs::of_node(&config, node_id);
        // A forward whose section is the same may have a token file rotated in place.
        let unchanged = running
            .inputs
            .modules
            .get(forward::NAME)
            .is_some_and(|old| new_inputs.modules.get(forward::NAME) == Some(old));
        (
            unchanged || crate::reload::takes_live(forward::NAME, &running.inputs, &new_inputs),
            crate::reload::takes_live(issuance::NAME, &running.inputs, &new_inputs),
            crate::reload::gateway_files(&running.inputs, &new_inputs),
        )
    };
    let mut prepared = Prepared::default();
    if let Some(section) = config.forward.as_ref().filter(|_| forward_wanted) {
        let spec = crate::config::AccessSpec::of(section.get_ref());
        let read = spec.clone();
        let access = bounded(
            &outstanding.tokens,
            "the token files were not read",
            move || read.read(),
        )
        .await;
        prepared.forward = Some((spec, access));
    }
    if let (Some(section), Some(check)) =
        (config.issuance.as_ref().filter(|_| issuance_wanted), check)
    {
        let new = section.get_ref().clone();
        let checked = new.clone();
        let certificates = bounded(&outstanding.issuance, "not checked", move || {
            check(&checked)
        })
        .await;
        prepared.issuance = Some((new, certificates));
    }
    if gateway_files != crate::reload::GatewayFiles::default() {
        let read = bounded(
            &outstanding.gateway,
            "the gateway's new key and TLS files were not read",
            move || Ok(read_gateway_files(gateway_files)),
        )
        .await;
        prepared.gateway = Some(read);
    }
    prepared
}

// r[impl node.reload.outstanding]
/// The reloads' reads and checks off the runtime's threads, one of each kind at a time: one given
/// up after its time limit still holds its thread until the hung call returns, and repeated
/// reloads must not stack such threads.
/// Clones share the slots.
#[derive(Default, Clone)]
struct Outstanding {
    /// The config file's read.
    config: Slot,
    /// The forward's token files' read.
    tokens: Slot,
    /// The issuance module's check.
    issuance: Slot,
    /// The gateway's new key and TLS files' read.
    gateway: Slot,
}

/// Whether one read or check of a kind is running.
#[derive(Default, Clone)]
struct Slot(Arc<std::sync::atomic::AtomicBool>);

/// Frees its slot when dropped: when the work returns (or is dropped unrun).
struct Free(Arc<std::sync::atomic::AtomicBool>);

impl Drop for Free {
    fn drop(&mut self) {
        self.0.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

// r[impl node.reload.outstanding]
/// Runs `work` off the runtime's threads, for at most [`CONFIG_READ_TIMEOUT`], unless the last
/// work of `slot`'s kind is still running; `late` says what was not done.
async fn bounded<T: Send + 'static>(
    slot: &Slot,
    late: &str,
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    if slot.0.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return Err(format!(
            "{late}: the last one is still running (given up after {}s)",
            CONFIG_READ_TIMEOUT.as_secs()
        ));
    }
    let free = Free(Arc::clone(&slot.0));
    let work = move || {
        let _free = free;
        work()
    };
    match tokio::time::timeout(CONFIG_READ_TIMEOUT, tokio::task::spawn_blocking(work)).await {
        Ok(Ok(done)) => done,
        Ok(Err(e)) => Err(format!("{late}: it ended: {e}")),
        Err(_) => Err(format!("{late} within {}s", CONFIG_READ_TIMEOUT.as_secs())),
    }
}

// r[impl node.reload.apply]
// r[impl node.reload.node-sections]
// r[impl node.reload.generation]
/// One reload: read and validate the file, compare, stop what went or changed, start what came or
/// changed, and make the new config the running one.
async fn reload(
    running: &tokio::sync::Mutex<Running>,
    context: &Context,
    source: &ConfigSource,
) -> crate::reload::Outcome {
    let began = tokio::time::Instant::now();
    let node = &context.node;
    // A blocking read (the file may be slow, or a FIFO): off the runtime's threads.
    let source = source.clone();
    let file = source
        .path
        .as_ref()
        .map_or_else(|| "the config".to_owned(), |p| p.display().to_string());
    let loaded = bounded(
        &context.outstanding.config,
        &format!("{file}: cannot read: not read"),
        move || source.load().map(|loaded| loaded.config),
    )
    .await;
    let mut config = match loaded {
        Ok(loaded) => loaded,
        Err(message) => return Err(refuse_reload(node, message)),
    };
    // The slow parts (files read, users and groups looked up) before the running set is locked.
    let check: Option<IssuanceCheck> = node
        .issuance
        .with(holdfast_issuance::Issuance::planner)
        .ok()
        .map(|planner| -> IssuanceCheck {
            Box::new(move |config| planner.plan(config).map_err(|e| e.to_string()))
        });
    let prepared = prepare(
        running,
        &config,
        check,
        &context.outstanding,
        context.identity.id(),
    )
    .await;
    let mut running = running.lock().await;
    // r[impl node.reload.stopping+2]
    if running.closed || node.phase() == Phase::Draining {
        return Err(ReloadError::Stopping);
    }
    // The node's own sections stay as they started (r[node.reload.node-sections]), and the
    // modules are compared as built with them.
    let (inputs, plan) = crate::reload::plan(
        &running.inputs,
        &running.config,
        &mut config,
        context.identity.id(),
    );
    if !plan.needs_restart.is_empty() {
        tracing::warn!(sections = ?plan.needs_restart,
            "reload: these sections changed and need a restart of the node to take effect");
    }

    let mut plan = plan;
    // Which modules take their change live is decided here, before anything stops, and applied
    // only after the stops, once the node's stop has not begun (r[node.reload.stopping+2]): a
    // reload cut off applies nothing. One that cannot take it live restarts.
    let takes_live: Vec<&str> = {
        use crate::modules::{forward, gateway, issuance, pull, workload};
        [
            pull::NAME,
            workload::NAME,
            forward::NAME,
            issuance::NAME,
            gateway::NAME,
        ]
        .into_iter()
        .filter(|name| {
            plan.modules.get(*name) == Some(&Change::Changed)
                && crate::reload::takes_live(name, &running.inputs, &inputs)
        })
        .collect()
    };
    let live = |name: &str| takes_live.contains(&name);
    let mut updates = LiveUpdates::default();
    if live(crate::modules::pull::NAME) {
        updates.pull = Some(config.pull_inputs(0).workloads);
    }
    if live(crate::modules::workload::NAME) && node.workload.with(|_| ()).is_ok() {
        updates.workloads = Some(config.workloads.iter().map(|w| w.to_config()).collect());
    }
    let Prepared {
        forward: forward_access,
        issuance: issuance_checked,
        gateway: gateway_read,
    } = prepared;
    // r[impl node.reload.live-gateway+2]
    // Judged first: a reload the gateway's files refuse changes nothing, the fault board
    // included (the forward's token-file fault below is neither filed nor cleared).
    if let Some(section) = config
        .gateway
        .as_ref()
        .filter(|_| live(crate::modules::gateway::NAME) && node.gateway.running().is_some())
    {
        let section = section.get_ref();
        let settings = section.settings(&running.config.node.data_dir, 0);
        let update = |keys, tls| GatewayUpdate {
            live: crate::modules::gateway::GatewayLive {
                limits: settings.limits,
                token_keys: settings.token_keys.clone(),
                tls: settings.tls.clone(),
            },
            keys,
            tls,
        };
        // A pair of the issuance store's not issued yet: the gateway restarts (its start is
        // retried until it exists); refusing would refuse the hostname's issuance too.
        let from_issuance = section
            .tls
            .as_ref()
            .is_some_and(|t| t.get_ref().from_issuance.is_some());
        let refuse = |message: String| Err(refuse_reload(node, message));
        match gateway_read.map(|read| decide_gateway(read, from_issuance)) {
            None => updates.gateway = Some(update(None, None)),
            Some(GatewayVerdict::Take { keys, tls }) => updates.gateway = Some(update(keys, tls)),
            Some(GatewayVerdict::Restart(error)) => tracing::warn!(%error,
                "reload: the gateway's new certificate is not issued yet; it restarts"),
            Some(GatewayVerdict::Refuse(message)) => return refuse(message),
        }
    }
    if live(crate::modules::forward::NAME) {
        match forward_access {
            Some((spec, Ok(access))) if node.forward.with(|_| ()).is_ok() => {
                // r[impl node.reload.forward-files+3]
                node.faults.clear(&forward_files_subject());
                updates.forward = Some((spec, access));
            }
            // The restart reads them again and reports its failure.
            Some((_, Err(error))) => tracing::warn!(%error,
                "reload: the forward's new access cannot be read; the module restarts"),
            _ => {}
        }
    } else if plan.modules.get(crate::modules::forward::NAME) == Some(&Change::Unchanged) {
        if let Some((spec, read)) = forward_access {
            updates.forward = unchanged_forward(node, &context.live.forward_access, spec, read);
        }
    }
    // r[impl node.reload.issuance-check]
    // Checked before the lock (`prepare`); a module not up (no check) restarts.
    if live(crate::modules::issuance::NAME) {
        match issuance_checked {
            Some((new, Ok(certificates))) => updates.issuance = Some((new, certificates)),
            Some((_, Err(error))) => tracing::warn!(%error,
                "reload: the issuance module cannot take its new certificates live; it restarts"),
            None => {}
        }
    }
    for name in updates.names() {
        plan.modules.insert(name.to_owned(), Change::Updated);
    }
    // Stop what went and what changed, in stop-group order, the gateway through its drain.
    let goes = |name: &str| {
        matches!(
            plan.modules.get(name),
            Some(Change::Disappeared | Change::Changed)
        )
    };
    let (stopping, staying): (Vec<_>, Vec<_>) = std::mem::take(&mut running.modules)
        .into_iter()
        .partition(|m| goes(&m.name));
    running.modules = staying;
    if !stopping.is_empty() {
        let budget = running.config.node.stop_budget.get_ref().get();
        let aborted = stop_for_reload(node, stopping, &mut running.modules, budget).await;
        if aborted {
            return Err(ReloadError::Stopping);
        }
    }
    // The node's stop may have begun during the stops: then nothing starts (it took, or will
    // take, the modules as they are now).
    if node.phase() == Phase::Draining {
        return Err(ReloadError::Stopping);
    }
    // Nothing awaits from here to the starts: what the reload takes live, it takes whole.
    updates.apply(context);
    // A stopped module's faults were its own (a module that starts again files what still
    // holds), and the subjects a changed one no longer owns would stay open otherwise.
    for name in plan
        .with(Change::Disappeared)
        .chain(plan.with(Change::Changed))
    {
        node.faults.clear_module(name);
    }
    for name in plan.with(Change::Disappeared) {
        node.remove_module(name);
        // Its API answers "not configured" again, not "down".
        match name {
            crate::modules::gateway::NAME => node.gateway.unconfigure(),
            crate::modules::forward::NAME => node.forward.unconfigure(),
            crate::modules::issuance::NAME => node.issuance.unconfigure(),
            crate::modules::workload::NAME => node.workload.unconfigure(),
            _ => {}
        }
    }

    // Start what came and what changed, from the new config.
    let starts = |name: &str| {
        matches!(
            plan.modules.get(name),
            Some(Change::Appeared | Change::Changed)
        )
    };
    let mut started_now = Vec::new();
    for module in compose_some(&config, &context.identity, node, &context.live, &starts) {
        tracing::info!(module = module.name(), "reload: module starting");
        let (started, _first) = context.supervise(module, &config);
        started_now.push(started.name.clone());
        running.modules.push(started);
    }
    let failed = first_starts(node, started_now).await;
    running.config = config;
    running.inputs = inputs;
    let generation = crate::reload::Generation {
        generation: node.config_generation().generation + 1,
        loaded_at: std::time::SystemTime::now(),
    };
    node.set_config_generation(generation);
    node.faults.clear(&reload_subject());
    Ok(crate::reload::Applied {
        generation,
        modules: plan.modules,
        needs_restart: plan.needs_restart,
        took_ms: u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX),
        failed,
    })
}

/// How long a reload waits for the modules it started to come up (or fail).
const FIRST_START_WAIT: Duration = Duration::from_secs(5);

// r[impl node.reload.apply]
/// Waits, at most [`FIRST_START_WAIT`] and not past the node's stop, until each of `modules`
/// (just started under new supervisors) is up (ready or degraded) or has failed; returns the
/// failed ones with their error. One still starting at the end is not counted as failed.
async fn first_starts(
    node: &NodeState,
    mut modules: Vec<String>,
) -> std::collections::BTreeMap<String, String> {
    use holdfast_lifecycle::Health;
    let mut failed = std::collections::BTreeMap::new();
    let waiting = async {
        while !modules.is_empty() {
            let statuses = node.modules();
            modules.retain(|name| {
                // The stopped supervisor's entry may still be there until the new one publishes.
                let Some(status) = statuses.iter().find(|s| {
                    s.name == *name && s.supervisor != crate::state::SupervisorState::Stopped
                }) else {
                    return true;
                };
                if status.failures > 0 {
                    let error = status.last_error.clone().unwrap_or_default();
                    tracing::warn!(module = %name, %error, "reload: module failed to start");
                    failed.insert(name.clone(), error);
                    return false;
                }
                !matches!(status.health, Health::Ready | Health::Degraded(_))
            });
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        () = waiting => {}
        () = tokio::time::sleep(FIRST_START_WAIT) => {}
        () = node.draining() => {}
    }
    failed
}

// r[impl node.reload.apply]
// r[impl node.reload.stopping+2]
/// Stops `modules` through the node's stop plan ([`stop_plan`]: group by group, one budget),
/// every stopper told the restart reason. The node's stop cuts it off (returns `true`): the
/// modules not yet asked to stop go back to `staying`, for the node's own stop plan.
async fn stop_for_reload(
    node: &NodeState,
    modules: Vec<RunningModule>,
    staying: &mut Vec<RunningModule>,
    budget: Duration,
) -> bool {
    let back = Arc::new(std::sync::Mutex::new(Vec::new()));
    let stoppers = modules
        .into_iter()
        .map(|m| {
            let (name, group) = (m.name.clone(), m.group);
            // r[impl node.reload.workload-restart]
            // The workload module stops to start again: its containers stay for the new
            // instance to adopt, whatever `stop_on_exit` says (told only once the plan asks it
            // to stop: a module the node's stop takes back stops the node's way).
            let before_stop: Option<Box<dyn FnOnce() + Send>> =
                (name == crate::modules::workload::NAME).then(|| {
                    let node = node.clone();
                    Box::new(move || {
                        let _ = node.workload.with(|r| r.handle.keep_containers_on_stop());
                    }) as Box<dyn FnOnce() + Send>
                });
            let stopper: Box<dyn Stopper> = Box::new(HandBack {
                module: Some(m),
                back: Arc::clone(&back),
                before_stop,
            });
            (name, group, stopper)
        })
        .collect();
    let plan = stop_plan(budget, stoppers);
    let draining = node.clone();
    // The plan holds its stoppers unshared (not `Sync`), so its run is no `Send` future: it runs
    // on a thread of its own, driven by this runtime.
    let runtime = tokio::runtime::Handle::current();
    let report = tokio::task::spawn_blocking(move || {
        runtime.block_on(plan.run(
            StopReason::Restart,
            async move { draining.draining().await },
        ))
    })
    .await;
    // What the plan never asked to stop is still running: the node's stop plan takes it.
    staying.extend(std::mem::take(
        &mut *back
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    ));
    let report = match report {
        Ok(report) => report,
        Err(err) => {
            tracing::error!(error = %err, "reload: the stop plan's thread failed");
            return true;
        }
    };
    for module in &report.modules {
        tracing::info!(module = %module.module, took = ?module.took, outcome = ?module.outcome,
            "reload: module stopped");
    }
    if report.aborted {
        tracing::warn!(
            "reload: the node's stop began during the reload's stops; it starts nothing"
        );
    }
    report.aborted
}

/// A running module's stopper that hands the module back to the node's stop plan when the
/// node's stop cuts the reload off: as it was, if it had not been asked to stop yet (its group
/// was skipped), else as the stop under way ([`Unfinished`]).
struct HandBack {
    module: Option<RunningModule>,
    back: Arc<std::sync::Mutex<Vec<RunningModule>>>,
    /// Run when the module is asked to stop.
    before_stop: Option<Box<dyn FnOnce() + Send>>,
}

impl Stopper for HandBack {
    fn stop(
        mut self: Box<Self>,
        request: holdfast_lifecycle::StopRequest,
    ) -> holdfast_lifecycle::BoxFuture<Result<(), holdfast_lifecycle::StopError>> {
        if let Some(before_stop) = self.before_stop.take() {
            before_stop();
        }
        let Some(RunningModule {
            name,
            group,
            stopper,
        }) = self.module.take()
        else {
            return Box::pin(async { Ok(()) });
        };
        tracing::info!(module = %name, "reload: module stopping");
        // The stop runs on its own task, so that the reload's wait for it may be cut off (the
        // node's stop began) while the stop goes on: the node's stop plan then waits for it.
        let (done, outcome) = tokio::sync::watch::channel(None);
        tokio::spawn(async move {
            let _ = done.send(Some(stopper.stop(request).await));
        });
        // Handed back now, not when the stop's future is dropped: the plan drops its tasks'
        // futures later, on a worker, and the reload takes `back` as soon as the plan returns
        // (a module handed back too late would be lost to the node's stop).
        self.back
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(RunningModule {
                name: name.clone(),
                group,
                stopper: Box::new(Ongoing(outcome.clone())),
            });
        let unfinished = Unfinished {
            name,
            back: Arc::clone(&self.back),
        };
        Box::pin(async move {
            let outcome = stop_outcome(outcome).await;
            unfinished.finished();
            outcome
        })
    }
}

type StopOutcome = tokio::sync::watch::Receiver<Option<Result<(), holdfast_lifecycle::StopError>>>;

/// The outcome of a stop running on its own task.
async fn stop_outcome(mut outcome: StopOutcome) -> Result<(), holdfast_lifecycle::StopError> {
    match outcome.wait_for(Option::is_some).await {
        Ok(done) => done.clone().unwrap_or(Ok(())),
        Err(_) => Err(holdfast_lifecycle::StopError(
            "the module's stop ended without an outcome".into(),
        )),
    }
}

/// A stop the reload asked for, handed back (as an [`Ongoing`] stopper that waits for that same
/// stop) to the node's stop plan from the moment it starts, until the reload sees it end.
struct Unfinished {
    name: String,
    back: Arc<std::sync::Mutex<Vec<RunningModule>>>,
}

impl Unfinished {
    /// The reload saw the stop's outcome: nothing to hand back.
    fn finished(self) {
        self.back
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|m| m.name != self.name);
    }
}

/// A stopper for a stop already under way: waits for its outcome.
struct Ongoing(StopOutcome);

impl Stopper for Ongoing {
    fn stop(
        self: Box<Self>,
        _request: holdfast_lifecycle::StopRequest,
    ) -> holdfast_lifecycle::BoxFuture<Result<(), holdfast_lifecycle::StopError>> {
        Box::pin(stop_outcome(self.0))
    }
}

impl Drop for HandBack {
    fn drop(&mut self) {
        if let Some(module) = self.module.take() {
            self.back
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(module);
        }
    }
}

// r[impl node.signal.hup+2]
/// SIGHUP, for the node's whole life (the stop included): the reload signal. Each one asks for a
/// reload (after any under way); its outcome is logged by the reload loop.
async fn on_hangup(mut hup: tokio::signal::unix::Signal, node: NodeState) {
    while hup.recv().await.is_some() {
        if node.phase() == Phase::Draining {
            tracing::info!("SIGHUP: the node is stopping; no reload");
            continue;
        }
        tracing::info!("SIGHUP: reloading the config");
        let node = node.clone();
        // Not awaited here: a SIGHUP during a long reload queues the next one at once.
        tokio::spawn(async move {
            if let Err(err @ ReloadError::Busy) = node.request_reload().await {
                tracing::warn!(error = %err, "SIGHUP: no reload");
            }
        });
    }
}

// r[impl node.signal.quit]
/// SIGQUIT: exits at once with the aborted status, whatever the node is doing (the way out of a
/// stuck stop).
async fn on_quit(mut quit: tokio::signal::unix::Signal) {
    if quit.recv().await.is_some() {
        tracing::error!("SIGQUIT: exiting at once, without the stop plan");
        std::process::exit(i32::from(EXIT_ABORTED));
    }
}

/// The node's SIGTERM and SIGINT streams, and how many more signals abort the stop.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    /// 1 once a signal started the stop; 2 when the drain call did.
    until_abort: u32,
}

impl Signals {
    // r[impl node.stop.signal+2]
    // r[impl node.gateway.stop-reason+2]
    /// Resolves when the stop begins, with why: a signal, or the admin API's drain call.
    async fn stop_reason(&mut self, node: &NodeState) -> StopReason {
        tokio::select! {
            // A signal is a restart (systemd's restart, a deploy): clients are told to come back.
            // Only `holdfast drain` (without --restart) says the node leaves for good.
            _ = self.term.recv() => { tracing::info!("SIGTERM: stopping"); StopReason::Restart }
            _ = self.int.recv() => { tracing::info!("SIGINT: stopping"); StopReason::Restart }
            reason = node.drain_requested() => {
                // A drain asked for through the API: the first signal after it (an operator's
                // or systemd's stop) is a first signal, not the second one.
                self.until_abort = 2;
                reason
            }
        }
    }

    // r[impl node.stop.second-signal+2]
    /// Resolves on the signal that aborts the stop: the second one in all.
    async fn abort(&mut self) {
        loop {
            tokio::select! {
                _ = self.term.recv() => {}
                _ = self.int.recv() => {}
            }
            self.until_abort = self.until_abort.saturating_sub(1);
            if self.until_abort == 0 {
                break;
            }
            tracing::info!(
                "signal received: already stopping (the drain call started it); a second one aborts"
            );
        }
        tracing::warn!("second signal: aborting the stop plan");
    }
}

#[cfg(test)]
mod alpn_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A usable PEM pair in `dir`.
    fn tls_pair(dir: &Path) -> holdfast_gateway::TlsFiles {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["a.example".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let files = holdfast_gateway::TlsFiles {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        };
        std::fs::write(&files.cert, cert.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        files
    }

    fn read_tls(files: holdfast_gateway::TlsFiles) -> Result<GatewayRead, String> {
        Ok(read_gateway_files(crate::reload::GatewayFiles {
            keys: None,
            tls: Some(files),
        }))
    }

    // The gateway's new files judged: only a `from_issuance` pair whose file does not exist yet
    // restarts the gateway; an issued but unusable bundle, a missing PEM pair, a key file that
    // cannot be read and a read not done in time refuse the reload, naming the file.
    // r[verify node.reload.live-gateway+2]
    #[test]
    fn only_a_from_issuance_pair_not_issued_yet_restarts_the_gateway() {
        let dir = tempfile::tempdir().unwrap();
        let good = tls_pair(dir.path());
        let missing = dir.path().join("missing.pem");
        let not_issued = holdfast_gateway::TlsFiles {
            cert: missing.clone(),
            key: missing.clone(),
        };
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not a bundle\n").unwrap();
        let unusable = holdfast_gateway::TlsFiles {
            cert: garbage.clone(),
            key: garbage.clone(),
        };

        assert!(matches!(
            decide_gateway(read_tls(good.clone()), true),
            GatewayVerdict::Take {
                keys: None,
                tls: Some(_)
            }
        ));
        assert!(matches!(
            decide_gateway(read_tls(not_issued.clone()), true),
            GatewayVerdict::Restart(holdfast_gateway::TlsError::Read { .. })
        ));
        let refused = |outcome: GatewayVerdict, file: &Path| match outcome {
            GatewayVerdict::Refuse(message) => {
                assert!(message.contains(&file.display().to_string()), "{message}")
            }
            other => panic!("not refused: {other:?}"),
        };
        refused(decide_gateway(read_tls(unusable.clone()), true), &garbage);
        refused(decide_gateway(read_tls(unusable), false), &garbage);
        refused(decide_gateway(read_tls(not_issued), false), &missing);
        let keys = dir.path().join("gone.key");
        refused(
            decide_gateway(
                Ok(read_gateway_files(crate::reload::GatewayFiles {
                    keys: Some(vec![holdfast_gateway::token::KeySource::secret(&keys)]),
                    tls: Some(good),
                })),
                true,
            ),
            &keys,
        );
        assert!(matches!(
            decide_gateway(Err("not read within 30s".into()), true),
            GatewayVerdict::Refuse(m) if m == "not read within 30s"
        ));
    }

    // Token files that cannot be read at a reload, on a forward whose section is unchanged (a
    // file system failing between the config's validation and the token read, or a read given
    // up after its time limit): a fault naming the file and the error, nothing given; a later
    // read clears it.
    // r[verify node.reload.forward-files+3]
    #[test]
    fn unreadable_token_files_of_an_unchanged_forward_are_a_fault_until_read() {
        use crate::config::AccessSpec;
        use crate::modules::forward::SharedAccess;
        let node = NodeState::new("n", FaultBoard::new(), Metrics::new());
        let shared = SharedAccess::default();
        let error = "cannot read token file /etc/holdfast/forward.tokens: Input/output error";
        let given = unchanged_forward(&node, &shared, AccessSpec::default(), Err(error.into()));
        assert!(given.is_none());
        let faults = node.faults.list();
        let fault = faults
            .iter()
            .find(|f| f.subject == forward_files_subject())
            .unwrap_or_else(|| panic!("no fault: {faults:?}"));
        assert_eq!(fault.kind, "token_file_unreadable");
        assert!(fault.message.contains(error), "{fault:?}");
        // Read at the next reload: the fault is over.
        let access = holdfast_forward::Access {
            credentials: vec![holdfast_forward::Credential::new(
                "forward-token-read-again-0123456789",
            )],
            allow: holdfast_forward::AllowList::default(),
            scoped: Vec::new(),
        };
        // Given though no server is up: a start under way takes it when it is published.
        let given = unchanged_forward(&node, &shared, AccessSpec::default(), Ok(access));
        assert!(
            given.is_some(),
            "a rotated token read during a start was dropped"
        );
        assert!(
            !node
                .faults
                .list()
                .iter()
                .any(|f| f.subject == forward_files_subject()),
            "{:?}",
            node.faults.list()
        );
    }

    /// A running node with one local-provider hostname, and the config a reload brings: a
    /// second hostname added.
    fn one_hostname_added() -> (Config, Arc<tokio::sync::Mutex<Running>>) {
        let host =
            |name: &str| format!("[[issuance.hostname]]\nname = \"{name}\"\nsource = \"local\"\n");
        let text = |hosts: &str| {
            format!(
                "[node]\n[issuance]\n[issuance.local]\n\
                 endpoint = {{ tcp = \"127.0.0.1:8099\" }}\n{hosts}"
            )
        };
        let was = Config::parse("r.toml", &text(&host("a.example"))).unwrap();
        let new = Config::parse(
            "r.toml",
            &text(&format!("{}{}", host("a.example"), host("b.example"))),
        )
        .unwrap();
        let running = Arc::new(tokio::sync::Mutex::new(Running {
            inputs: Inputs::of(&was),
            config: was,
            modules: Vec::new(),
            closed: false,
        }));
        (new, running)
    }

    // r[verify node.reload.outstanding]
    #[tokio::test(start_paused = true)]
    async fn a_hung_check_is_not_started_again_until_it_returns() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let (new, running) = one_hostname_added();
        let outstanding = Arc::new(Outstanding::default());
        let started = Arc::new(AtomicUsize::new(0));
        let (release, hang) = std::sync::mpsc::channel::<()>();
        let hang = Arc::new(Mutex::new(hang));
        // A check that hangs (a name service that never answers) until the test lets it go.
        let check = || -> IssuanceCheck {
            let started = Arc::clone(&started);
            let hang = Arc::clone(&hang);
            Box::new(move |_| {
                started.fetch_add(1, Ordering::SeqCst);
                let _ = hang.lock().unwrap().recv();
                Err("released".to_owned())
            })
        };
        let prepare_once = |check: IssuanceCheck| {
            let running = Arc::clone(&running);
            let outstanding = Arc::clone(&outstanding);
            let new = new.clone();
            tokio::spawn(
                async move { prepare(&running, &new, Some(check), &outstanding, "n").await },
            )
        };
        let first = prepare_once(check());
        let mut spins = 0;
        while started.load(Ordering::SeqCst) == 0 {
            spins += 1;
            assert!(spins < 1_000_000, "the check never started");
            tokio::task::yield_now().await;
        }
        tokio::time::advance(CONFIG_READ_TIMEOUT + Duration::from_millis(1)).await;
        let (_, given_up) = first.await.unwrap().issuance.expect("checked");
        assert!(given_up.unwrap_err().contains("within 30s"));
        // The first check still hangs: the next reload does not start another.
        let second = prepare_once(check());
        let mut spins = 0;
        while !second.is_finished() {
            spins += 1;
            assert!(spins < 1_000_000, "the second reload never ended");
            assert_eq!(
                started.load(Ordering::SeqCst),
                1,
                "a second check started while the first hangs"
            );
            tokio::task::yield_now().await;
        }
        let (_, refused) = second.await.unwrap().issuance.expect("asked");
        let refused = refused.unwrap_err();
        assert!(refused.contains("still running"), "{refused}");
        assert_eq!(started.load(Ordering::SeqCst), 1);
        // Once it returns, the next reload checks again.
        release.send(()).unwrap();
        let mut spins = 0;
        while outstanding.issuance.0.load(Ordering::SeqCst) {
            spins += 1;
            assert!(spins < 1_000_000, "the hung check never freed its slot");
            tokio::task::yield_now().await;
        }
        release.send(()).unwrap();
        let (_, checked) = prepare_once(check())
            .await
            .unwrap()
            .issuance
            .expect("checked");
        assert_eq!(checked.unwrap_err(), "released");
        assert_eq!(started.load(Ordering::SeqCst), 2);
    }

    // r[verify node.reload.issuance-check]
    #[tokio::test(start_paused = true)]
    async fn the_issuance_check_holds_no_lock_and_gives_up_after_the_read_timeout() {
        // A hostname added: the running module may take it live, once checked.
        let (new, running) = one_hostname_added();
        // A check that hangs (a name service that never answers) until the test lets it go.
        let (started_tx, started) = std::sync::mpsc::channel::<()>();
        let (release, hang) = std::sync::mpsc::channel::<()>();
        let check: IssuanceCheck = Box::new(move |_| {
            let _ = started_tx.send(());
            let _ = hang.recv();
            Err("released".to_owned())
        });
        // The running module may take it live: the reload checks it.
        assert!(crate::reload::takes_live(
            crate::modules::issuance::NAME,
            &running.lock().await.inputs,
            &Inputs::of(&new)
        ));
        let began = tokio::time::Instant::now();
        let prepared = tokio::spawn({
            let running = Arc::clone(&running);
            async move { prepare(&running, &new, Some(check), &Outstanding::default(), "n").await }
        });
        let mut spins = 0;
        while started.try_recv().is_err() {
            spins += 1;
            assert!(spins < 1_000_000, "the check never started");
            tokio::task::yield_now().await;
        }
        // While it checks, the running set is free: the node's stop (or the next reload)
        // takes it at once.
        assert!(
            running.try_lock().is_ok(),
            "the check holds the running set's lock"
        );
        // A blocking task keeps the paused clock from moving on its own: moved by hand.
        tokio::time::advance(CONFIG_READ_TIMEOUT + Duration::from_millis(1)).await;
        // And the check is given up after the config read's timeout.
        let prepared = prepared.await.unwrap();
        let (_, checked) = prepared.issuance.expect("checked");
        let Err(error) = checked else {
            panic!("the hung check was not given up")
        };
        assert!(error.contains("within 30s"), "{error}");
        assert!(began.elapsed() >= CONFIG_READ_TIMEOUT);
        drop(release);
    }

    /// The modules (name and stop group) that `text` composes.
    fn composed(text: &str) -> Vec<(String, StopGroup)> {
        let config = Config::parse("compose.toml", text).unwrap();
        let identity = NodeIdentity::resolve(Some("compose-node")).unwrap();
        let node = NodeState::new(identity.id(), FaultBoard::new(), Metrics::new());
        let live = Live {
            desired: crate::modules::workload::desired(Vec::new()),
            ..Live::default()
        };
        let composed: Vec<_> = compose(&config, &identity, &node, &live)
            .iter()
            .map(|m| (m.name().to_owned(), m.group()))
            .collect();
        // What a reload compares is what compose builds.
        assert_eq!(names(&composed), crate::reload::module_names(&config));
        composed
    }

    fn names(modules: &[(String, StopGroup)]) -> Vec<&str> {
        modules.iter().map(|(name, _)| name.as_str()).collect()
    }

    // r[verify node.workload.module]
    // r[verify node.issuance.module]
    // r[verify node.forward.module+2]
    // r[verify node.gateway.module+2]
    // i[verify node.testing-modules]
    #[test]
    fn a_config_composes_the_modules_of_its_sections_and_no_others() {
        use std::os::unix::fs::PermissionsExt;
        // Without sections only the pull module runs, and not even it when it is turned off.
        assert_eq!(composed("[node]\n"), [("pull".to_owned(), StopGroup::Pull)]);
        assert!(composed("[node]\n[pull]\nenabled = false\n").is_empty());
        let workload = "[[workload]]\nname = \"web\"\nimage = \"nginx:1\"\n";
        assert_eq!(
            names(&composed(&format!("[node]\n{workload}"))),
            ["pull", "workload"]
        );
        assert_eq!(
            names(&composed(&format!(
                "[node]\n[pull]\nenabled = false\n{workload}"
            ))),
            ["workload"]
        );

        // Every section: each module once, in its own stop group.
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("gateway.key");
        std::fs::write(&key, "compose-test-gateway-key-0123456789\n").unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        let all = format!(
            "[node]\ndata_dir = \"{data}\"\n{workload}\
             [issuance]\n[issuance.local]\nendpoint = {{ tcp = \"127.0.0.1:8099\" }}\n\
             [[issuance.hostname]]\nname = \"a.example\"\nsource = \"local\"\n\
             [forward]\nlisten = \"127.0.0.1:0\"\ntokens = [\"compose-test-forward-token-0123456789\"]\nallow = [\"127.0.0.1:53\"]\n\
             [gateway]\nlisten = \"127.0.0.1:0\"\ntoken_key_file = \"{key}\"\n",
            data = dir.path().join("data").display(),
            key = key.display(),
        );
        assert_eq!(
            composed(&all),
            [
                ("pull".to_owned(), StopGroup::Pull),
                ("workload".to_owned(), StopGroup::Workload),
                ("issuance".to_owned(), StopGroup::Issuance),
                ("forward".to_owned(), StopGroup::Forward),
                ("gateway".to_owned(), StopGroup::Gateway),
            ]
        );

        // The test-only module runs only in a build that has it, and only when asked for.
        let testing = "[node]\n[testing]\nhang_on_stop = true\n";
        if cfg!(feature = "testing-modules") {
            assert_eq!(names(&composed(testing)), ["pull", "testing-hang"]);
            assert_eq!(
                names(&composed("[node]\n[testing]\nhang_on_stop = false\n")),
                ["pull"]
            );
        } else {
            assert!(Config::parse("compose.toml", testing).is_err());
        }
    }

    // r[verify node.stop.order]
    #[tokio::test(start_paused = true)]
    async fn modules_stop_group_by_group_gateway_first_pulls_last() {
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut stoppers = Vec::new();
        // Added in reverse: the plan orders them, not the caller.
        for group in StopGroup::ORDER.iter().rev() {
            let order = Arc::clone(&order);
            let name = group.name().to_owned();
            stoppers.push((
                format!("m-{name}"),
                *group,
                holdfast_lifecycle::stopper_fn(move |_| async move {
                    order.lock().unwrap().push(name);
                    Ok(())
                }),
            ));
        }
        let report = stop_plan(Duration::from_secs(10), stoppers)
            .run(StopReason::Restart, std::future::pending())
            .await;
        assert!(report.clean());
        assert_eq!(
            *order.lock().unwrap(),
            ["gateway", "forward", "workload", "issuance", "pull"]
        );
        assert_eq!(exit_status(&report), EXIT_CLEAN);
    }

    // r[verify node.reload.stopping+2]
    #[tokio::test(start_paused = true)]
    async fn a_stop_the_reload_asked_for_is_handed_back_as_soon_as_it_starts() {
        // A module whose stop never ends, and one that ends at once.
        let back = Arc::new(Mutex::new(Vec::new()));
        let hand_back = |name: &str, hang: bool| -> Box<dyn Stopper> {
            Box::new(HandBack {
                module: Some(RunningModule {
                    name: name.to_owned(),
                    group: StopGroup::Pull,
                    stopper: holdfast_lifecycle::stopper_fn(move |_| async move {
                        if hang {
                            std::future::pending::<()>().await;
                        }
                        Ok(())
                    }),
                }),
                back: Arc::clone(&back),
                before_stop: None,
            })
        };
        let request = holdfast_lifecycle::StopRequest {
            deadline: tokio::time::Instant::now() + Duration::from_secs(1),
            reason: StopReason::Restart,
        };
        let hung = hand_back("hung", true).stop(request);
        // Registered before anything drops the stop's future: the plan's tasks are dropped
        // later, on a worker, and the reload reads `back` as soon as the plan returns.
        let handed: Vec<String> = back
            .lock()
            .unwrap()
            .iter()
            .map(|m| m.name.clone())
            .collect();
        assert_eq!(handed, ["hung"]);
        // Dropping the future (the plan cut off) leaves it there, for the node's stop plan.
        drop(hung);
        assert_eq!(back.lock().unwrap().len(), 1);
        // A stop the reload saw end is not handed back.
        let quick = hand_back("quick", false).stop(request);
        assert_eq!(back.lock().unwrap().len(), 2);
        quick.await.unwrap();
        let handed: Vec<String> = back
            .lock()
            .unwrap()
            .iter()
            .map(|m| m.name.clone())
            .collect();
        assert_eq!(handed, ["hung"]);
    }
}
