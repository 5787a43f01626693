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
// r[impl node.gateway.module]
/// The modules `config` runs, each still to be supervised: pull unless `pull.enabled = false`,
/// workload with at least one `[[workload]]`, and issuance, forward and gateway each with its
/// section.
fn compose(config: &Config, identity: &NodeIdentity, node: &NodeState) -> Vec<Arc<dyn Module>> {
    let mut modules: Vec<Arc<dyn Module>> = Vec::new();
    if config.pull.enabled {
        modules.push(Arc::new(PullModule {
            workloads: config
                .workloads
                .iter()
                .map(|w| (w.name.get_ref().clone(), w.image.get_ref().clone()))
                .collect(),
            docker_host: config.pull.docker_host.clone(),
            config: config.pull_config(identity.seed(crate::modules::pull::NAME)),
            auth: config.registry_auth(),
            tag_checks: config.tag_checks(),
            tick: config.node.tick.get_ref().get(),
            node: node.clone(),
        }));
    }
    if !config.workloads.is_empty() {
        modules.push(Arc::new(WorkloadModule {
            workloads: config.workloads.iter().map(|w| w.to_config()).collect(),
            docker_host: config.pull.docker_host.clone(),
            seed: identity.seed(crate::modules::workload::NAME),
            stop_on_exit: config.workloads_module.stop_on_exit,
            owner: config.workloads_module.owner.clone(),
            tick: config.node.tick.get_ref().get(),
            pull_enabled: config.pull.enabled,
            node: node.clone(),
        }));
    }
    if let Some(issuance) = &config.issuance {
        modules.push(Arc::new(IssuanceModule::new(
            issuance.get_ref().clone(),
            config.node.data_dir.clone(),
            identity.seed(crate::modules::issuance::NAME),
            node.faults.clone(),
            node.issuance.clone(),
        )));
    }
    if let Some(forward) = &config.forward {
        modules.push(Arc::new(ForwardModule::new(
            forward.get_ref(),
            config.node.data_dir.clone(),
            node.forward.clone(),
        )));
    }
    if let Some(gateway) = &config.gateway {
        modules.push(Arc::new(GatewayModule::new(
            gateway.get_ref(),
            identity.id(),
            identity.seed(crate::modules::gateway::NAME),
            &config.node.data_dir,
            node.gateway.clone(),
        )));
    }
    // i[impl node.testing-modules]
    #[cfg(feature = "testing-modules")]
    if config.testing.as_ref().is_some_and(|t| t.hang_on_stop) {
        tracing::warn!("[testing] hang_on_stop: running a test module whose stopper never returns");
        modules.push(Arc::new(crate::modules::testing::HangOnStop));
    }
    #[cfg(feature = "testing-modules")]
    if config.testing.as_ref().is_some_and(|t| t.wedge_start) {
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

// r[impl node.signal.hup]
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

/// Runs the node until SIGTERM, SIGINT or `POST /v1/drain`, then runs the stop plan. SIGHUP leaves
/// it running; SIGQUIT exits the process at once.
pub async fn run(config: Config, signals: NodeSignals) -> Result<StopReport, RunError> {
    let NodeSignals {
        term,
        int,
        hup,
        quit,
    } = signals;
    // Answered from here on (the log is set up now); one that came earlier is answered at once.
    tokio::spawn(on_hangup(hup));
    tokio::spawn(on_quit(quit));

    let data_dir = config.node.data_dir.clone();
    prepare_data_dir(&data_dir).map_err(|source| RunError::DataDir {
        path: data_dir.clone(),
        source,
    })?;
    let identity = NodeIdentity::resolve(config.node.id.as_ref().map(|id| id.get_ref().as_str()))?;
    let node = NodeState::new(identity.id(), FaultBoard::new(), Metrics::new());
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

    let modules = compose(&config, &identity, &node);

    // systemd (Type=notify): the watchdog's heartbeat runs only when a service manager listens
    // and asks for it.
    let watchdog = notify::enabled().then(notify::watchdog_interval).flatten();
    let heartbeat = match notify::Core::new(watchdog).beat_every() {
        Some(every) => notify::Heartbeat::every(every),
        None => notify::Heartbeat::off(),
    };

    let mut supervised = Vec::new();
    let mut first_starts = Vec::new();
    let mut supervisor_tasks = Vec::new();
    for module in modules {
        let supervise = SuperviseConfig {
            policy: config.supervise_policy(identity.seed(&format!("supervise/{}", module.name()))),
            must_last: config.supervise.must_last.get(),
            crash_loop_threshold: *config.supervise.crash_loop_threshold.get_ref(),
            crash_loop_window: config.supervise.crash_loop_window.get(),
        };
        let name = module.name().to_owned();
        let group = module.group();
        let s =
            supervisor::spawn_with_heartbeat(module, supervise, node.clone(), heartbeat.clone());
        first_starts.push(s.first_start);
        supervisor_tasks.push((name.clone(), s.task));
        supervised.push((name, group, s.stopper));
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
    for (name, task) in supervisor_tasks {
        tokio::spawn(async move {
            // A supervisor ends only when stopped; one that panics is a bug worth an error line
            // (its stopper then reports the stop as failed).
            if let Err(err) = task.await {
                tracing::error!(module = %name, error = %err, "module supervisor ended on its own");
            }
        });
    }

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
    let budget = config.node.stop_budget.get_ref().get();
    let plan = stop_plan(
        budget,
        supervised
            .into_iter()
            .map(|(name, group, stopper)| (name, group, Box::new(stopper) as Box<dyn Stopper>))
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

// r[impl node.signal.hup]
/// SIGHUP, for the node's whole life (the stop included): the reload signal. Reload is not built
/// yet, so each one is a warning line and nothing else; reload will hook in here.
async fn on_hangup(mut hup: tokio::signal::unix::Signal) {
    while hup.recv().await.is_some() {
        tracing::warn!(
            "SIGHUP: reload is not built yet; running on with the config it started with"
        );
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
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// The modules (name and stop group) that `text` composes.
    fn composed(text: &str) -> Vec<(String, StopGroup)> {
        let config = Config::parse("compose.toml", text).unwrap();
        let identity = NodeIdentity::resolve(Some("compose-node")).unwrap();
        let node = NodeState::new(identity.id(), FaultBoard::new(), Metrics::new());
        compose(&config, &identity, &node)
            .iter()
            .map(|m| (m.name().to_owned(), m.group()))
            .collect()
    }

    fn names(modules: &[(String, StopGroup)]) -> Vec<&str> {
        modules.iter().map(|(name, _)| name.as_str()).collect()
    }

    // r[verify node.workload.module]
    // r[verify node.issuance.module]
    // r[verify node.forward.module+2]
    // r[verify node.gateway.module]
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
}
