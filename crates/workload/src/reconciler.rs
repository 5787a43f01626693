//! The synchronous core: every decision about the node's workloads, no I/O, no runtime.
//!
//! The core holds the desired workloads ([`Reconciler::set_desired`]) and what it knows of their
//! containers, learned from the daemon's list ([`Reconciler::resync`]) and event stream
//! ([`Reconciler::on_event`]). [`Reconciler::tick`] decides, at the caller's `now`, which
//! [`Action`]s to perform (create and start a container, stop and remove one); the shell performs
//! them and hands each result back with [`Reconciler::on_result`]. Nothing here spawns, awaits or
//! reads a clock (fault timestamps aside, which are for display), so it is tested by calling it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use holdfast_lifecycle::{Fault, FaultBoard, Subject};
use holdfast_retry::{
    AttemptToken, CrashLoopDetector, Escalation, Exit, KeyedGate, Lasting, Reason, Transition,
};

use crate::certs::CertRenew;
use crate::config::{ModuleConfig, RestartPolicy, WorkloadConfig};
use crate::images::{ImagePresence, Images};
use crate::shape::MAX_HEALTH_WAIT;
use crate::state::{Counters, HealthStatus, LastExit, WorkloadState, WorkloadStatus};

/// The module name faults are filed under on the node's board.
pub const MODULE: &str = "workload";
/// The label that says which workload a container belongs to.
pub const WORKLOAD_LABEL: &str = "holdfast.workload";
/// The label that carries the workload's spec hash ([`WorkloadConfig::spec_hash`]).
pub const SPEC_LABEL: &str = "holdfast.spec";

/// The label that scopes containers to one holdfast instance ([`ModuleConfig::owner`]).
pub const OWNER_LABEL: &str = "holdfast.owner";

/// How many events about not-yet-tracked containers are kept while starts are in flight.
const EARLY_EVENTS: usize = 64;

/// Identifies one start attempt between the core and the shell.
pub type AttemptId = u64;

/// What to create a container from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSpec {
    /// The workload it runs.
    pub workload: String,
    /// The image reference.
    pub image: String,
    /// The command (empty: the image's).
    pub command: Vec<String>,
    /// `KEY=VALUE` pairs.
    pub env: Vec<String>,
    /// The container's labels (the workload's own, [`WORKLOAD_LABEL`] and [`SPEC_LABEL`]).
    pub labels: BTreeMap<String, String>,
    /// The container's name ([`container_name`]).
    pub name: String,
    /// The rest of its shape, as configured.
    pub shape: Shape,
}

/// The keys of a [`WorkloadConfig`] that shape its container beyond image, command, environment
/// and labels.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Shape {
    /// Published ports.
    pub ports: Vec<crate::shape::PortSpec>,
    /// Bind mounts and named volumes.
    pub volumes: Vec<crate::shape::VolumeSpec>,
    /// The network joined instead of the default bridge.
    pub network: Option<String>,
    /// The user.
    pub user: Option<String>,
    /// The working directory.
    pub workdir: Option<String>,
    /// The memory limit.
    pub memory: Option<crate::shape::ByteSize>,
    /// The CPU quota.
    pub cpus: Option<crate::shape::Cpus>,
    /// The process limit.
    pub pids_limit: Option<i64>,
    /// A read-only root filesystem.
    pub read_only: bool,
    /// Capabilities added.
    pub cap_add: Vec<String>,
    /// Capabilities dropped.
    pub cap_drop: Vec<String>,
    /// An init process.
    pub init: bool,
    /// The log driver and its options.
    pub log: crate::shape::LogConfig,
    /// The health check (`None`: the image's own).
    pub health: Option<crate::shape::HealthCheck>,
}

/// Something the shell must do for the core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Create a container from `spec` and start it; report [`Completion::Started`].
    Start {
        /// Reported back with the result.
        attempt: AttemptId,
        /// What to create (boxed: it is most of the enum's size).
        spec: Box<ContainerSpec>,
    },
    /// Stop the container (SIGTERM, SIGKILL after `stop_timeout`) and remove it; report
    /// [`Completion::Removed`]. A container already gone is removed.
    Remove {
        /// The workload it belonged to (possibly one no longer configured).
        workload: String,
        /// The container id.
        container: String,
        /// How long it gets to stop.
        stop_timeout: Duration,
    },
    /// Send the container's main process `signal` (a certificate it uses was renewed); report
    /// [`Completion::Signalled`].
    Signal {
        /// The workload.
        workload: String,
        /// The container id.
        container: String,
        /// The signal, as the Engine API's kill takes it (`SIGHUP`).
        signal: String,
    },
}

/// Why a create-and-start failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartError {
    /// The container, if the create succeeded and the start failed (it is removed).
    pub container: Option<String>,
    /// What the daemon said.
    pub message: String,
    /// Whose the failure is.
    pub cause: StartCause,
}

/// Whose a failed start is: the workload's (a failure of its restart streak) or the operator's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartCause {
    /// The daemon refused the create or the start: the workload's failure.
    Failed,
    /// The node's network name is taken by someone else's network: only the operator can fix
    /// that, so it is not a failure of the workload (`workload.network.foreign`).
    ForeignNetwork,
}

/// A container created and started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    /// Its id.
    pub container: String,
    /// Whether it has a health check (its own or its image's), as the daemon reports it.
    pub health_check: bool,
}

impl From<String> for Started {
    /// A container without a health check.
    fn from(container: String) -> Self {
        Started {
            container,
            health_check: false,
        }
    }
}

impl From<&str> for Started {
    /// A container without a health check.
    fn from(container: &str) -> Self {
        Started::from(container.to_owned())
    }
}

/// An action's result, as the shell reports it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    /// A [`Action::Start`] ended.
    Started {
        /// The workload.
        workload: String,
        /// The attempt it was started with.
        attempt: AttemptId,
        /// The running container, or why not.
        result: Result<Started, StartError>,
    },
    /// A [`Action::Remove`] ended.
    Removed {
        /// The container id.
        container: String,
        /// Whether it is gone.
        result: Result<(), String>,
    },
    /// A [`Action::Signal`] ended.
    Signalled {
        /// The workload.
        workload: String,
        /// The container id.
        container: String,
        /// Whether the daemon delivered it.
        result: Result<(), String>,
    },
}

/// One labelled container as the daemon lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// The container id.
    pub id: String,
    /// Its [`WORKLOAD_LABEL`].
    pub workload: String,
    /// Its [`SPEC_LABEL`], if it has one.
    pub spec_hash: Option<String>,
    /// Whether it runs.
    pub running: bool,
    /// Its exit code, when it has exited.
    pub exit_code: Option<i64>,
    /// The last lines of its log, when it has exited.
    pub log_tail: Vec<String>,
    /// Its health, when it runs and has a check.
    pub health: Option<HealthStatus>,
}

/// What the daemon's event stream reported about a labelled container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerEvent {
    /// The container's process ended.
    Died {
        /// The container id.
        id: String,
        /// Its exit code.
        exit_code: Option<i64>,
        /// The last lines of its log.
        log_tail: Vec<String>,
    },
    /// The container was removed.
    Destroyed {
        /// The container id.
        id: String,
    },
    /// The container's health check changed its verdict.
    Health {
        /// The container id.
        id: String,
        /// The new verdict.
        status: HealthStatus,
        /// The last probe's output (for an unhealthy one).
        output: Vec<String>,
    },
}

impl ContainerEvent {
    /// The container it is about.
    pub fn id(&self) -> &str {
        match self {
            ContainerEvent::Died { id, .. }
            | ContainerEvent::Destroyed { id }
            | ContainerEvent::Health { id, .. } => id,
        }
    }
}

#[derive(Debug)]
enum Run {
    /// Nothing runs: start when the gate and the image allow.
    Idle,
    /// A create-and-start is in flight.
    Starting {
        attempt: AttemptId,
        token: AttemptToken<String>,
        /// A certificate it mounts renewed while the start was in flight (its process may
        /// have read the old files): told to the container once it runs.
        renewed: Option<String>,
    },
    /// The container runs. Its start is a provisional success (`lasting`) until the run has
    /// lasted `min_run`: until then an exit is a failure of the same streak. `None`: adopted, or
    /// still `unready`: a container with a health check holds its start's token until it is
    /// first reported healthy, and only then is the start a provisional success.
    Running {
        container: String,
        since: Instant,
        lasting: Option<Lasting<String>>,
        unready: Option<AttemptToken<String>>,
        health: Option<HealthStatus>,
    },
    /// Exited and left stopped by the restart policy.
    Stopped {
        container: Option<String>,
        exit_code: Option<i64>,
        /// Whether the run had lasted (unknown after a node restart: counts as lasted), so a
        /// later policy can judge the exit as it would have.
        lasted: bool,
        completed: bool,
    },
}

#[derive(Debug)]
struct Entry {
    config: WorkloadConfig,
    hash: String,
    /// The hash a container made before the shape keys carries for the same spec, if any
    /// ([`WorkloadConfig::legacy_spec_hash`]).
    legacy_hash: Option<String>,
    run: Run,
    crash: CrashLoopDetector,
    crash_looping: bool,
    last_exit: Option<LastExit>,
    counters: Counters,
    image_detail: Option<String>,
    /// A start has failed or a run has ended since the last start: the next start is a restart.
    restart_due: bool,
    /// The dependencies it waited for at the last tick (empty: none).
    waiting_on: Vec<String>,
    /// Starts refused in a row because the node's network is someone else's, and when the next
    /// may be made (`workload.network.foreign`): paced apart from the restart gate.
    foreign_refusals: u32,
    foreign_until: Option<Instant>,
    /// Since when it has been ready to start (back-off over, dependencies ready), until it
    /// starts, is adopted running, or its spec changes: a `pull_policy = "always"` start waits
    /// for a tag check made after it.
    ready_since: Option<Instant>,
}

/// A signal owed to a workload's container after a renewal of a certificate it mounts.
#[derive(Debug)]
struct OwedSignal {
    container: String,
    signal: String,
    /// `Some(token)` while a retry is in flight, `None` for the first send or once it failed.
    token: Option<AttemptToken<String>>,
    in_flight: bool,
}

/// A container being stopped and removed.
#[derive(Debug)]
struct Retiring {
    /// The workload it belonged to: its name stays taken until the container is gone.
    workload: String,
    stop_timeout: Duration,
    removal: Removal,
}

#[derive(Debug)]
enum Removal {
    /// A [`Action::Remove`] is in flight (a retry holds its gate's token).
    InFlight(Option<AttemptToken<String>>),
    /// The last one failed: the removal gate says when the next is issued.
    Failed,
}

/// Every decision about the node's workloads, on the caller's clock.
#[derive(Debug)]
pub struct Reconciler {
    config: ModuleConfig,
    gate: KeyedGate<String>,
    entries: BTreeMap<String, Entry>,
    /// Containers being stopped and removed (their exits are forced, not crashes).
    retiring: BTreeMap<String, Retiring>,
    /// Paces the retries of failed removals, per container, on the restart policy's schedule.
    removals: KeyedGate<String>,
    /// Starts in flight whose workload was removed or replaced: removed when they report.
    orphans: BTreeMap<AttemptId, String>,
    /// Events about containers not (yet) tracked, kept while a start is in flight: a container
    /// that dies at once can be reported before its start's result.
    early: Vec<ContainerEvent>,
    /// A container list has been applied since the start or since the event stream was lost.
    synced: bool,
    board: FaultBoard,
    next_attempt: AttemptId,
    /// Workloads whose image moved, waiting their turn to be replaced (with the image).
    moving: std::collections::VecDeque<(String, String)>,
    /// The workload replaced last for a moved image: the next waits until it has lasted.
    moved_last: Option<String>,
    /// Signals owed after a certificate renewal, per workload, until the daemon delivers one.
    owed_signals: BTreeMap<String, OwedSignal>,
    /// Paces the signals sent again after a failure, per workload.
    signals: KeyedGate<String>,
    /// The last [`Reconciler::tick`]'s instant: an idle workload whose back-off ended by then
    /// and still idle is held by something else (a dependency, its image, its name), which an
    /// event or a result ends, not the clock; [`Reconciler::next_wake`] leaves it out.
    ticked: Option<Instant>,
}

impl Reconciler {
    // r[impl workload.restart.backoff+2]
    /// A core with no workloads, filing faults on `board` (the node's) under module "workload".
    /// Every workload is paced by its own key on one gate of the module's restart policy.
    pub fn new(config: ModuleConfig, board: FaultBoard) -> Self {
        Reconciler {
            gate: KeyedGate::new(config.restart_policy),
            removals: KeyedGate::new(config.restart_policy),
            signals: KeyedGate::new(config.restart_policy),
            owed_signals: BTreeMap::new(),
            config,
            entries: BTreeMap::new(),
            retiring: BTreeMap::new(),
            orphans: BTreeMap::new(),
            early: Vec::new(),
            synced: false,
            ticked: None,
            board,
            next_attempt: 1,
            moving: std::collections::VecDeque::new(),
            moved_last: None,
        }
    }

    /// The module settings.
    pub fn config(&self) -> &ModuleConfig {
        &self.config
    }

    /// The board faults are filed on.
    pub fn fault_board(&self) -> &FaultBoard {
        &self.board
    }

    /// This module's open faults.
    pub fn faults(&self) -> Vec<Fault> {
        self.board.of_module(MODULE)
    }

    fn subject(name: &str) -> Subject {
        Subject::new(MODULE, name)
    }

    /// The fault subject of a workload's renewal signal that keeps failing.
    pub fn cert_renew_subject(name: &str) -> Subject {
        Subject::new(MODULE, format!("{name}/cert_renew"))
    }

    // r[impl workload.certs.renew+2]
    /// The certificate `certificate` was renewed (and deployed): each running workload that
    /// mounts it and asks to be told has its container replaced (`restart`: holdfast's own
    /// decision, not an exit, so no crash, no failure and no wait on its restart gate) or is
    /// sent its signal. A workload waiting to start (not one its policy left stopped) starts its next container, which mounts the
    /// directory as it is then, without waiting out its restart gate (its creates may have failed
    /// for want of a certificate first issued now). One whose start is in flight is told once it
    /// runs.
    pub fn cert_renewed(&mut self, certificate: &str) -> Vec<Action> {
        self.tell_renewal(certificate, None)
    }

    // r[impl workload.certs.renew+2]
    // r[impl workload.certs+2]
    /// [`Reconciler::cert_renewed`], for `only` that workload when given.
    fn tell_renewal(&mut self, certificate: &str, only: Option<&str>) -> Vec<Action> {
        let mut actions = Vec::new();
        let mut restarts = Vec::new();
        for (name, entry) in &mut self.entries {
            if only.is_some_and(|o| o != name) {
                continue;
            }
            if !entry
                .config
                .certificates
                .iter()
                .any(|c| c.name == certificate)
            {
                continue;
            }
            // Not running: its creates may have failed for want of the directory (a certificate
            // first issued now), so its next start is not held back by their streak.
            if matches!(entry.run, Run::Idle) {
                self.gate.forget(name);
                continue;
            }
            if entry.config.on_cert_renew.is_some()
                && let Run::Starting { renewed, .. } = &mut entry.run
            {
                *renewed = Some(certificate.to_owned());
                continue;
            }
            let Run::Running { container, .. } = &entry.run else {
                continue;
            };
            match &entry.config.on_cert_renew {
                None => {}
                Some(CertRenew::Restart) => {
                    tracing::info!(workload = %name, %certificate, "certificate renewed; replacing the container");
                    entry.counters.cert_renewals += 1;
                    restarts.push(name.clone());
                }
                Some(renew @ CertRenew::Signal(_)) => {
                    let signal = renew.signal().unwrap_or_default();
                    tracing::info!(workload = %name, %certificate, %signal, "certificate renewed; signalling the container");
                    entry.counters.cert_renewals += 1;
                    // A signal still owed is superseded: one delivery tells of both renewals.
                    if let Some(owed) = self.owed_signals.get(name)
                        && owed.in_flight
                        && owed.container == *container
                    {
                        continue;
                    }
                    self.owed_signals.insert(
                        name.clone(),
                        OwedSignal {
                            container: container.clone(),
                            signal: signal.clone(),
                            token: None,
                            in_flight: true,
                        },
                    );
                    actions.push(Action::Signal {
                        workload: name.clone(),
                        container: container.clone(),
                        signal,
                    });
                }
            }
        }
        for name in restarts {
            let Some(entry) = self.entries.get_mut(&name) else {
                continue;
            };
            let old = std::mem::replace(&mut entry.run, Run::Idle);
            let stop_timeout = entry.config.stop_timeout;
            // Not a restart after an exit: the next start is not counted as one.
            entry.restart_due = false;
            self.drop_owed_signal(&name);
            self.drop_run(old, &name, stop_timeout, &mut actions);
            // Started again at once, whatever the gate's streak said: the run was fine.
            self.gate.forget(&name);
        }
        actions
    }

    // r[impl workload.certs.renew+2]
    /// Forgets the signal owed to `workload`, its streak on the signal gate and its fault: a
    /// later renewal's failures start a fresh streak (and escalate again).
    fn drop_owed_signal(&mut self, workload: &str) {
        self.owed_signals.remove(workload);
        self.signals.forget(&workload.to_owned());
        self.board.clear(&Self::cert_renew_subject(workload));
    }

    // r[impl workload.certs.renew+2]
    /// A renewal signal ended: delivered, it is done; failed, it is counted, sent again when
    /// the signal gate allows (the restart policy's schedule), and a fault of kind `cert_renew`
    /// once the gate escalates, cleared by a delivery. A signal whose container is no longer the
    /// workload's running one is dropped.
    fn signalled(
        &mut self,
        workload: String,
        container: String,
        result: Result<(), String>,
        now: Instant,
    ) {
        let Some(owed) = self.owed_signals.get_mut(&workload) else {
            return;
        };
        if owed.container != container || !owed.in_flight {
            return;
        }
        owed.in_flight = false;
        let token = owed.token.take();
        match result {
            Ok(()) => {
                tracing::info!(%workload, %container, "renewal signal delivered");
                if let Some(token) = token {
                    self.signals.succeed(token, now);
                }
                self.owed_signals.remove(&workload);
                self.signals.forget(&workload);
                self.board.clear(&Self::cert_renew_subject(&workload));
            }
            Err(error) => {
                if let Some(entry) = self.entries.get_mut(&workload) {
                    entry.counters.cert_renew_failures += 1;
                }
                let token = match token {
                    Some(token) => Ok(token),
                    // The first send was not paced: its failure starts the streak.
                    None => self.signals.begin(&workload, now),
                };
                let Ok(token) = token else {
                    return;
                };
                let t = self.signals.fail(token, now, None);
                tracing::warn!(%workload, %container, %error, failures = t.failures, "renewal signal failed; sending it again after a back-off");
                if t.escalation == Some(Escalation::Escalated)
                    || self
                        .board
                        .get(&Self::cert_renew_subject(&workload))
                        .is_some()
                {
                    self.board.file(
                        Self::cert_renew_subject(&workload),
                        "cert_renew",
                        &format!(
                            "the renewal signal failed ({} consecutive failures): {error}",
                            t.failures
                        ),
                        t.failures,
                        SystemTime::now(),
                    );
                }
            }
        }
    }

    // r[impl workload.certs.renew+2]
    /// Sends again, at `now`, each failed renewal signal whose gate allows it; one whose
    /// container is no longer the workload's running one is dropped (the new container was
    /// started with the new files).
    fn retry_signals(&mut self, now: Instant, actions: &mut Vec<Action>) {
        let stale: Vec<String> = self
            .owed_signals
            .iter()
            .filter(|(workload, owed)| {
                !owed.in_flight
                    && !self.entries.get(*workload).is_some_and(|e| {
                        matches!(&e.run, Run::Running { container, .. } if *container == owed.container)
                    })
            })
            .map(|(workload, _)| workload.clone())
            .collect();
        for workload in stale {
            self.drop_owed_signal(&workload);
        }
        for (workload, owed) in &mut self.owed_signals {
            if owed.in_flight {
                continue;
            }
            let Ok(token) = self.signals.begin(workload, now) else {
                continue;
            };
            owed.token = Some(token);
            owed.in_flight = true;
            actions.push(Action::Signal {
                workload: workload.clone(),
                container: owed.container.clone(),
                signal: owed.signal.clone(),
            });
        }
    }

    // r[impl workload.reconcile]
    /// Sets the configured workloads (validated by the caller). New ones start once synced;
    /// removed ones have their containers removed; one whose container spec changed has its
    /// container replaced and a fresh streak; a change of restart policy, minimum run or stop
    /// timeout alone changes no container.
    pub fn set_desired(&mut self, workloads: Vec<WorkloadConfig>) -> Vec<Action> {
        let mut actions = Vec::new();
        let wanted: BTreeMap<String, WorkloadConfig> =
            workloads.into_iter().map(|w| (w.name.clone(), w)).collect();
        self.remove_unconfigured(&wanted, &mut actions);
        for (name, config) in wanted {
            let hash = config.spec_hash();
            if self.entries.contains_key(&name) {
                self.reconfigure(&name, config, hash, &mut actions);
                continue;
            }
            self.entries.insert(
                name,
                Entry {
                    legacy_hash: config.legacy_spec_hash(),
                    config,
                    hash,
                    run: Run::Idle,
                    crash: self.config.crash_loop.clone(),
                    crash_looping: false,
                    last_exit: None,
                    counters: Counters::default(),
                    image_detail: None,
                    restart_due: false,
                    waiting_on: Vec::new(),
                    foreign_refusals: 0,
                    foreign_until: None,
                    ready_since: None,
                },
            );
        }
        actions
    }

    // r[impl workload.remove]
    /// Forgets every workload `wanted` no longer names, removing its container (a start in
    /// flight is removed when it reports) and its fault.
    fn remove_unconfigured(
        &mut self,
        wanted: &BTreeMap<String, WorkloadConfig>,
        actions: &mut Vec<Action>,
    ) {
        let gone: Vec<String> = self
            .entries
            .keys()
            .filter(|name| !wanted.contains_key(*name))
            .cloned()
            .collect();
        for name in gone {
            if let Some(entry) = self.entries.remove(&name) {
                tracing::info!(workload = %name, "workload no longer configured; removing its container");
                self.drop_run(entry.run, &name, entry.config.stop_timeout, actions);
            }
            self.gate.forget(&name);
            self.board.clear(&Self::subject(&name));
            self.drop_owed_signal(&name);
        }
        self.clear_unused_network_fault();
    }

    // r[impl workload.network.foreign]
    /// The foreign_network fault goes with the last workload it held back (removed, or moved
    /// off the node's network).
    fn clear_unused_network_fault(&mut self) {
        let held = self.entries.values().any(|e| {
            e.foreign_refusals > 0
                && e.config.network.as_deref() == Some(crate::config::NODE_NETWORK)
        });
        if !held {
            self.board.clear(&Self::network_subject(&self.config));
        }
    }

    // r[impl workload.replace+2]
    /// A configured workload seen again: a changed container spec (`hash`) replaces its
    /// container, with a fresh streak; the same spec only takes the new settings.
    fn reconfigure(
        &mut self,
        name: &str,
        config: WorkloadConfig,
        hash: String,
        actions: &mut Vec<Action>,
    ) {
        let Some(entry) = self.entries.get_mut(name) else {
            return;
        };
        if entry.hash == hash {
            self.resettle(name, config, actions);
            return;
        }
        tracing::info!(workload = %name, "workload spec changed; replacing its container");
        let old = std::mem::replace(&mut entry.run, Run::Idle);
        let stop_timeout = entry.config.stop_timeout;
        entry.legacy_hash = config.legacy_spec_hash();
        entry.config = config;
        entry.hash = hash;
        entry.crash = self.config.crash_loop.clone();
        entry.crash_looping = false;
        entry.restart_due = false;
        // Nor to the old spec's readiness (its image may differ).
        entry.ready_since = None;
        // A new spec (perhaps on another network) owes nothing to the old one's refusals.
        entry.foreign_refusals = 0;
        entry.foreign_until = None;
        self.drop_run(old, name, stop_timeout, actions);
        self.gate.forget(name);
        self.board.clear(&Self::subject(name));
        self.clear_unused_network_fault();
    }

    // r[impl workload.image.moved]
    /// The image `reference` names was pulled again with new content (its tag moved): each of
    /// `workloads` (those that follow the tag) running (or starting) from it has its container
    /// replaced, as a spec change replaces it, with a fresh streak, one at a time: the next
    /// only once the previous one's new container runs and has lasted. Its spec hash is
    /// unchanged, so a node restart later adopts the new container. A workload left stopped
    /// stays stopped.
    pub fn image_moved(&mut self, reference: &str, workloads: &[String]) -> Vec<Action> {
        for name in workloads {
            let queued = self.moving.iter().any(|(n, _)| n == name)
                || self.moved_last.as_deref() == Some(name.as_str());
            let uses = self
                .entries
                .get(name)
                .is_some_and(|e| e.config.image == reference);
            if uses && !queued {
                self.moving.push_back((name.clone(), reference.to_owned()));
            }
        }
        let mut actions = Vec::new();
        self.replace_next_moved(&mut actions);
        actions
    }

    // r[impl workload.image.moved]
    /// Replaces the next workload waiting for its moved image once the last one replaced runs
    /// and has lasted (or is gone).
    fn replace_next_moved(&mut self, actions: &mut Vec<Action>) {
        if let Some(last) = &self.moved_last {
            let settled = self.entries.get(last).is_none_or(|e| match &e.run {
                Run::Running {
                    lasting, unready, ..
                } => unready.is_none() && lasting.as_ref().is_none_or(|l| l.is_confirmed()),
                _ => false,
            });
            if !settled {
                return;
            }
            self.moved_last = None;
        }
        while let Some((name, reference)) = self.moving.pop_front() {
            let Some(entry) = self.entries.get_mut(&name) else {
                continue;
            };
            if entry.config.image != reference
                || !matches!(entry.run, Run::Running { .. } | Run::Starting { .. })
            {
                continue;
            }
            tracing::info!(workload = %name, image = %reference, "image tag moved; replacing its container");
            let old = std::mem::replace(&mut entry.run, Run::Idle);
            let stop_timeout = entry.config.stop_timeout;
            entry.crash = self.config.crash_loop.clone();
            entry.crash_looping = false;
            entry.restart_due = false;
            self.drop_run(old, &name, stop_timeout, actions);
            self.gate.forget(&name);
            self.board.clear(&Self::subject(&name));
            self.moved_last = Some(name);
            return;
        }
    }

    // r[impl workload.policy+2]
    /// The same container spec with new settings: a workload left stopped by a restart policy
    /// that would no longer leave it stopped starts again.
    fn resettle(&mut self, name: &str, config: WorkloadConfig, actions: &mut Vec<Action>) {
        let Some(entry) = self.entries.get_mut(name) else {
            return;
        };
        let now_restarts = entry.config.restart != config.restart;
        entry.config = config;
        let Run::Stopped {
            container,
            exit_code,
            lasted,
            completed,
        } = &mut entry.run
        else {
            return;
        };
        if !now_restarts {
            return;
        }
        // Judged as the new policy would have judged the exit.
        if let Some(now_completed) = stays_stopped(entry.config.restart, *lasted, *exit_code) {
            *completed = now_completed;
            return;
        }
        let container = container.clone();
        let stop_timeout = entry.config.stop_timeout;
        entry.run = Run::Idle;
        entry.restart_due = true;
        if let Some(container) = container {
            self.retire(name, container, stop_timeout, actions);
        }
    }

    /// Ends whatever `run` holds: its container is removed, a start in flight is removed when
    /// it reports.
    fn drop_run(
        &mut self,
        run: Run,
        workload: &str,
        stop_timeout: Duration,
        actions: &mut Vec<Action>,
    ) {
        match run {
            Run::Idle => {}
            Run::Starting { attempt, token, .. } => {
                // The token dies with the key (the caller forgets it).
                drop(token);
                self.orphans.insert(attempt, workload.to_owned());
            }
            Run::Running { container, .. }
            | Run::Stopped {
                container: Some(container),
                ..
            } => self.retire(workload, container, stop_timeout, actions),
            Run::Stopped {
                container: None, ..
            } => {}
        }
    }

    fn retire(
        &mut self,
        workload: &str,
        container: String,
        stop_timeout: Duration,
        actions: &mut Vec<Action>,
    ) {
        if self.retiring.contains_key(&container) {
            return;
        }
        self.retiring.insert(
            container.clone(),
            Retiring {
                workload: workload.to_owned(),
                stop_timeout,
                removal: Removal::InFlight(None),
            },
        );
        actions.push(Action::Remove {
            workload: workload.to_owned(),
            container,
            stop_timeout,
        });
    }

    // r[impl workload.name]
    /// A container whose removal failed is gone after all (destroyed, or no longer listed): its
    /// name is free.
    fn retired_unreported(&mut self, container: &str) {
        if let Some(Retiring {
            removal: Removal::Failed,
            workload,
            ..
        }) = self.retiring.get(container)
        {
            tracing::info!(%workload, %container, "container whose removal failed is gone");
            self.retiring.remove(container);
            self.removals.forget(container);
        }
    }

    // r[impl workload.name]
    /// Issues again, at `now`, each failed removal whose gate allows it.
    fn retry_removals(&mut self, now: Instant, actions: &mut Vec<Action>) {
        for (container, r) in &mut self.retiring {
            if !matches!(r.removal, Removal::Failed) {
                continue;
            }
            let Ok(token) = self.removals.begin(container, now) else {
                continue;
            };
            tracing::info!(workload = %r.workload, %container, attempt = token.attempt(), "retrying the container's removal");
            r.removal = Removal::InFlight(Some(token));
            actions.push(Action::Remove {
                workload: r.workload.clone(),
                container: container.clone(),
                stop_timeout: r.stop_timeout,
            });
        }
    }

    /// The event stream was lost: nothing is started until a fresh container list is applied
    /// (an exit may have been missed meanwhile, and a start now could duplicate a container).
    pub fn stream_lost(&mut self) {
        self.synced = false;
    }

    /// Whether a container list has been applied since the start or the last stream loss.
    pub fn synced(&self) -> bool {
        self.synced
    }

    // r[impl workload.events]
    /// Applies the daemon's list of labelled containers at `now`: adopts a running container of
    /// the current spec instead of starting another, removes containers of unconfigured
    /// workloads, of old specs and duplicates, and handles an exit or a removal the event stream
    /// did not report.
    pub fn resync(&mut self, listing: Vec<Observed>, now: Instant) -> Vec<Action> {
        self.synced = true;
        let mut actions = Vec::new();
        let listed: std::collections::BTreeSet<String> =
            listing.iter().map(|c| c.id.clone()).collect();
        let gone: Vec<String> = self
            .retiring
            .keys()
            .filter(|id| !listed.contains(*id))
            .cloned()
            .collect();
        for id in gone {
            self.retired_unreported(&id);
        }
        for c in listing {
            if self.retiring.contains_key(&c.id) {
                continue;
            }
            if self.entries.contains_key(&c.workload) {
                self.apply_listed(c, now, &mut actions);
            } else {
                self.remove_stray(c, &mut actions);
            }
        }
        // What we track but the daemon no longer lists went away unreported.
        let names: Vec<String> = self.entries.keys().cloned().collect();
        for name in names {
            let Some(entry) = self.entries.get_mut(&name) else {
                continue;
            };
            match &entry.run {
                Run::Running { container, .. } if !listed.contains(container) => {
                    self.exited(&name, None, Vec::new(), now, &mut actions);
                }
                Run::Stopped {
                    container: Some(container),
                    ..
                } if !listed.contains(container) => {
                    if let Run::Stopped { container, .. } = &mut entry.run {
                        *container = None;
                    }
                }
                _ => {}
            }
        }
        actions
    }

    // r[impl workload.remove]
    /// A listed container of a workload nobody configures is removed.
    fn remove_stray(&mut self, c: Observed, actions: &mut Vec<Action>) {
        tracing::info!(workload = %c.workload, container = %c.id, "container of an unconfigured workload; removing it");
        self.retire(
            &c.workload,
            c.id,
            crate::config::DEFAULT_STOP_TIMEOUT,
            actions,
        );
    }

    // r[impl workload.adopt]
    /// One listed container of a configured workload: the tracked one is followed, a running
    /// one of the current spec is adopted when nothing else is, an exited one is judged by the
    /// restart policy, and any other (an old spec, a second copy) is removed.
    fn apply_listed(&mut self, c: Observed, now: Instant, actions: &mut Vec<Action>) {
        let Some(entry) = self.entries.get_mut(&c.workload) else {
            return;
        };
        // A container made before the shape keys, of a spec that sets none, is the same one.
        let current = c.spec_hash.as_deref() == Some(entry.hash.as_str())
            || (c.spec_hash.is_some() && c.spec_hash == entry.legacy_hash);
        match &entry.run {
            Run::Running { container, .. } if *container == c.id => {
                let name = c.workload.clone();
                if !c.running {
                    self.exited(&name, c.exit_code, c.log_tail, now, actions);
                } else if let Some(status) = c.health {
                    // A verdict the lost event stream did not bring.
                    self.health_changed(&name, status, Vec::new(), now, actions);
                }
            }
            // Probably the start in flight: its result says.
            Run::Starting { .. } => {}
            Run::Idle if current && c.running => {
                tracing::info!(workload = %c.workload, container = %c.id, "adopted the running container");
                // It runs: the readiness it had while idle is no next start's.
                entry.ready_since = None;
                // A check the node makes has no verdict yet: its first probe gives one.
                let node_probe = entry
                    .config
                    .health
                    .as_ref()
                    .is_some_and(|h| h.node_probe().is_some());
                entry.run = Run::Running {
                    container: c.id,
                    since: now,
                    lasting: None,
                    unready: None,
                    health: node_probe.then_some(HealthStatus::Starting),
                };
                // Its verdict is judged as if it had just arrived: the stream brings no new one
                // for a container that stays unhealthy.
                if let Some(status) = c.health {
                    let name = c.workload.clone();
                    self.health_changed(&name, status, Vec::new(), now, actions);
                }
            }
            Run::Idle if current => self.listed_exit(c, actions),
            Run::Stopped {
                container: Some(id),
                ..
            } if *id == c.id && current => {}
            _ => {
                // An old spec, a duplicate, or a leftover beside the one we track.
                let stop_timeout = entry.config.stop_timeout;
                let name = c.workload.clone();
                self.retire(&name, c.id, stop_timeout, actions);
            }
        }
    }

    // r[impl workload.policy+2]
    /// An exited container of the current spec, listed while nothing is tracked (after a node
    /// restart): kept when the restart policy leaves the workload stopped, else removed.
    fn listed_exit(&mut self, c: Observed, actions: &mut Vec<Action>) {
        let Some(entry) = self.entries.get_mut(&c.workload) else {
            return;
        };
        // Its readiness before this exit was listed is no next start's.
        entry.ready_since = None;
        // Whether its run lasted is not known after a restart: it counts as lasted.
        match stays_stopped(entry.config.restart, true, c.exit_code) {
            Some(completed) => {
                entry.run = Run::Stopped {
                    container: Some(c.id),
                    exit_code: c.exit_code,
                    lasted: true,
                    completed,
                };
            }
            None => {
                let stop_timeout = entry.config.stop_timeout;
                self.retire(&c.workload, c.id, stop_timeout, actions);
            }
        }
    }

    // r[impl workload.events]
    /// Applies one event from the daemon's stream at `now`. Events about containers being
    /// removed on the core's own decision, or about containers it does not track, change nothing.
    pub fn on_event(&mut self, event: ContainerEvent, now: Instant) -> Vec<Action> {
        let mut actions = Vec::new();
        let id = event.id().to_owned();
        if self.retiring.contains_key(&id) {
            if matches!(event, ContainerEvent::Destroyed { .. }) {
                self.retired_unreported(&id);
            }
            return actions;
        }
        let Some(name) = self.entries.iter().find_map(|(name, e)| match &e.run {
            Run::Running { container, .. }
            | Run::Stopped {
                container: Some(container),
                ..
            } if *container == id => Some(name.clone()),
            _ => None,
        }) else {
            let starting = self
                .entries
                .values()
                .any(|e| matches!(e.run, Run::Starting { .. }));
            if starting {
                if self.early.len() >= EARLY_EVENTS {
                    self.early.remove(0);
                }
                self.early.push(event);
            }
            return actions;
        };
        let running = matches!(
            self.entries.get(&name).map(|e| &e.run),
            Some(Run::Running { .. })
        );
        match event {
            ContainerEvent::Died {
                exit_code,
                log_tail,
                ..
            } if running => self.exited(&name, exit_code, log_tail, now, &mut actions),
            ContainerEvent::Destroyed { .. } if running => {
                self.exited(&name, None, Vec::new(), now, &mut actions);
            }
            ContainerEvent::Destroyed { .. } => {
                if let Some(Entry {
                    run: Run::Stopped { container, .. },
                    ..
                }) = self.entries.get_mut(&name)
                {
                    *container = None;
                }
            }
            ContainerEvent::Health { status, output, .. } if running => {
                self.health_changed(&name, status, output, now, &mut actions);
            }
            ContainerEvent::Died { .. } | ContainerEvent::Health { .. } => {}
        }
        actions
    }

    // r[impl workload.health.gate]
    /// `name`'s running container got a health verdict at `now`. The first `healthy` turns a
    /// start held unready into a provisional success lasting to the minimum run; `unhealthy` ends
    /// the run as an exit does (a failure of the streak while unready), except under `never`,
    /// which leaves it running.
    fn health_changed(
        &mut self,
        name: &str,
        status: HealthStatus,
        output: Vec<String>,
        now: Instant,
        actions: &mut Vec<Action>,
    ) {
        let Some(entry) = self.entries.get_mut(name) else {
            return;
        };
        let Run::Running {
            since,
            lasting,
            unready,
            health,
            ..
        } = &mut entry.run
        else {
            return;
        };
        if *health == Some(status) {
            return;
        }
        *health = Some(status);
        match status {
            HealthStatus::Starting => {}
            HealthStatus::Healthy => {
                if let Some(token) = unready.take() {
                    let remaining = (*since + entry.config.min_run).saturating_duration_since(now);
                    tracing::info!(workload = name, "the container is healthy");
                    *lasting = Some(self.gate.succeed_provisionally(token, now, remaining));
                }
            }
            HealthStatus::Unhealthy if entry.config.restart == RestartPolicy::Never => {
                tracing::warn!(
                    workload = name,
                    "the container is unhealthy; left running (restart = never)"
                );
            }
            HealthStatus::Unhealthy => {
                tracing::warn!(workload = name, "the container is unhealthy; replacing it");
                let mut tail = vec!["health check failing".to_owned()];
                tail.extend(output);
                self.exited(name, None, tail, now, actions);
            }
        }
    }

    // r[impl workload.health.gate]
    /// `name`'s container has had no health verdict for [`MAX_HEALTH_WAIT`] since its start (an
    /// image's check may never give one): the start failed, as an unhealthy one does, and the
    /// container is removed even where the policy leaves the workload stopped.
    fn no_verdict(&mut self, name: &str, now: Instant, actions: &mut Vec<Action>) {
        let wait = holdfast_retry::duration_text::format(MAX_HEALTH_WAIT);
        tracing::warn!(
            workload = name,
            "no health verdict within {wait}; replacing the container"
        );
        self.exited(
            name,
            None,
            vec![format!("no health verdict within {wait}")],
            now,
            actions,
        );
        let Some(entry) = self.entries.get_mut(name) else {
            return;
        };
        if let Run::Stopped { container, .. } = &mut entry.run {
            if let Some(container) = container.take() {
                let stop_timeout = entry.config.stop_timeout;
                self.retire(name, container, stop_timeout, actions);
            }
        }
    }

    // r[impl workload.min-run]
    /// The tracked container of `name` exited at `now`.
    fn exited(
        &mut self,
        name: &str,
        exit_code: Option<i64>,
        log_tail: Vec<String>,
        now: Instant,
        actions: &mut Vec<Action>,
    ) {
        let Some(entry) = self.entries.get_mut(name) else {
            return;
        };
        let Run::Running {
            container,
            since,
            lasting,
            unready,
            ..
        } = std::mem::replace(&mut entry.run, Run::Idle)
        else {
            return;
        };
        let ran = now.saturating_duration_since(since);
        let mut lasted = true;
        let mut failures = 0;
        if let Some(token) = unready {
            // Never healthy: the start failed, however long it ran.
            lasted = false;
            failures = self.gate.fail(token, now, None).failures;
        } else if let Some(lasting) = lasting {
            lasted = lasting.is_confirmed() || now >= lasting.lasts_at();
            // H2: a start that did not last is a failure of the same streak, never a success.
            let t = self.gate.ended(lasting, now, None);
            match t.reason {
                Reason::Succeeded => Self::lasted(&self.board, &self.config, entry, &t),
                _ => failures = t.failures,
            }
        }
        tracing::info!(
            workload = name,
            container = %container,
            ?exit_code,
            ran_ms = ran.as_millis() as u64,
            lasted,
            "workload container exited"
        );
        entry.last_exit = Some(LastExit {
            exit_code,
            ran,
            lasted,
            log_tail,
        });
        Self::record_crash(&self.board, name, entry, failures, now);
        match stays_stopped(entry.config.restart, lasted, exit_code) {
            Some(completed) => {
                tracing::info!(workload = name, "left stopped by its restart policy");
                entry.run = Run::Stopped {
                    container: Some(container),
                    exit_code,
                    lasted,
                    completed,
                };
            }
            None => {
                entry.restart_due = true;
                let stop_timeout = entry.config.stop_timeout;
                self.retire(name, container, stop_timeout, actions);
            }
        }
    }

    // r[impl workload.crash-loop]
    /// Feeds the exit in `entry.last_exit` to the crash-loop detector: a run that did not last,
    /// or a non-zero exit, is a crash; once the detector trips, the workload's `crash_loop`
    /// fault is filed and refreshed on each further exit.
    fn record_crash(
        board: &FaultBoard,
        name: &str,
        entry: &mut Entry,
        failures: u32,
        now: Instant,
    ) {
        let (lasted, exit_code) = entry
            .last_exit
            .as_ref()
            .map_or((true, None), |x| (x.lasted, x.exit_code));
        let crashed = !lasted || exit_code != Some(0);
        let kind = if crashed { Exit::Crashed } else { Exit::Clean };
        if entry.crash.record(kind, now).is_some() {
            entry.counters.crash_loops += 1;
            entry.crash_looping = true;
        }
        if entry.crash_looping {
            let message = crash_message(entry, failures);
            board.file(
                Self::subject(name),
                "crash_loop",
                &message,
                failures,
                SystemTime::now(),
            );
        }
    }

    /// A run lasted: the streak is reset (by the caller's `succeed`), the crash count starts
    /// again and the fault is cleared.
    fn lasted(
        board: &FaultBoard,
        config: &ModuleConfig,
        entry: &mut Entry,
        t: &Transition<String>,
    ) {
        if t.reason == Reason::Succeeded {
            entry.crash = config.crash_loop.clone();
            entry.crash_looping = false;
            entry.restart_due = false;
            if board.clear(&Self::subject(&entry.config.name)) {
                tracing::info!(workload = %entry.config.name, "workload recovered; fault cleared");
            }
        }
    }

    // r[impl workload.reconcile]
    /// Decides at `now` what to do: confirms runs that lasted, and starts every idle workload
    /// whose restart gate allows it and whose image is present (`images` is asked only then, so
    /// a workload waiting for its image spends no attempt). Nothing is started before a
    /// container list has been applied.
    pub fn tick(&mut self, now: Instant, images: &mut dyn Images) -> Vec<Action> {
        let mut actions = Vec::new();
        self.ticked = Some(now);
        self.retry_removals(now, &mut actions);
        self.retry_signals(now, &mut actions);
        self.replace_next_moved(&mut actions);
        let names: Vec<String> = self.entries.keys().cloned().collect();
        let ready: std::collections::BTreeSet<String> = self
            .entries
            .iter()
            .filter(|(_, e)| is_ready(&e.run))
            .map(|(name, _)| name.clone())
            .collect();
        for name in names {
            let silent = self.entries.get(&name).is_some_and(|e| {
                matches!(&e.run, Run::Running { unready: Some(_), since, .. } if now >= *since + MAX_HEALTH_WAIT)
            });
            if silent {
                self.no_verdict(&name, now, &mut actions);
                continue;
            }
            let Some(entry) = self.entries.get_mut(&name) else {
                continue;
            };
            match &mut entry.run {
                Run::Running {
                    lasting: Some(_), ..
                } => Self::confirm_lasted(&mut self.gate, &self.board, &self.config, entry, now),
                Run::Idle if self.synced => {
                    if entry.foreign_until.is_some_and(|until| now >= until) {
                        entry.foreign_until = None;
                    }
                    if self.gate.check(&name, now).is_err() || entry.foreign_until.is_some() {
                        entry.ready_since = None;
                        continue;
                    }
                    if Self::name_taken(&self.retiring, &self.orphans, &name) {
                        entry.ready_since = None;
                        continue;
                    }
                    entry.waiting_on = unready_dependencies(&entry.config, &ready);
                    if !entry.waiting_on.is_empty() {
                        entry.ready_since = None;
                        continue;
                    }
                    if !Self::image_present(images, entry, now) {
                        continue;
                    }
                    let Ok(token) = self.gate.begin(&name, now) else {
                        continue;
                    };
                    let attempt = Self::allocate_attempt(&mut self.next_attempt);
                    count_start(&mut entry.counters, entry.restart_due);
                    if let Some(report) = entry.crash.take_report() {
                        tracing::warn!(
                            workload = %name,
                            crashes = report.crashes,
                            window_s = report.window.as_secs(),
                            "restarting after a crash loop"
                        );
                    }
                    tracing::info!(workload = %name, attempt = token.attempt(), "starting workload container");
                    actions.push(Action::Start {
                        attempt,
                        spec: Box::new(spec_of(
                            &entry.config,
                            &entry.hash,
                            self.config.owner.as_deref(),
                        )),
                    });
                    entry.ready_since = None;
                    entry.run = Run::Starting {
                        attempt,
                        token,
                        renewed: None,
                    };
                }
                _ => {}
            }
        }
        actions
    }

    // r[impl workload.name]
    /// Whether a container of `workload` is still being removed, or a start of a replaced or
    /// removed spec of it is still in flight (it creates a container under the same name): the
    /// next one takes the same name, so it is not created before the last is gone.
    fn name_taken(
        retiring: &BTreeMap<String, Retiring>,
        orphans: &BTreeMap<AttemptId, String>,
        workload: &str,
    ) -> bool {
        retiring
            .values()
            .map(|r| &r.workload)
            .chain(orphans.values())
            .any(|w| w == workload)
    }

    // r[impl workload.min-run]
    /// A run that has lasted its minimum by `now` makes its start a success: the streak, the
    /// crash count and the fault are reset (the gate reports the success once).
    fn confirm_lasted(
        gate: &mut KeyedGate<String>,
        board: &FaultBoard,
        config: &ModuleConfig,
        entry: &mut Entry,
        now: Instant,
    ) {
        let Run::Running {
            lasting: Some(lasting),
            ..
        } = &mut entry.run
        else {
            return;
        };
        if let Some(t) = gate.confirm(lasting, now) {
            tracing::info!(workload = %entry.config.name, "the start lasted; streak reset");
            Self::lasted(board, config, entry, &t);
        }
    }

    // r[impl workload.remove]
    /// A fresh id for a start attempt: a start in flight of a workload removed or replaced
    /// meanwhile is told by it from every other start when it reports.
    fn allocate_attempt(next: &mut AttemptId) -> AttemptId {
        let attempt = *next;
        *next += 1;
        attempt
    }

    // r[impl workload.image]
    // r[impl workload.image.always]
    /// Asks `images` at `now` whether `entry`'s image is present (under `pull_policy = "always"`,
    /// checked since the entry became ready to start); while it is not, the entry keeps the
    /// pull's account of it (and the caller begins no attempt).
    fn image_present(images: &mut dyn Images, entry: &mut Entry, now: Instant) -> bool {
        let since = *entry.ready_since.get_or_insert(now);
        let presence = if entry.config.pull_always {
            images.ensure_fresh(&entry.config.image, since, now)
        } else {
            images.ensure(&entry.config.image, now)
        };
        match presence {
            ImagePresence::Pending { detail } => {
                entry.image_detail = Some(detail);
                false
            }
            ImagePresence::Present => {
                entry.image_detail = None;
                true
            }
        }
    }

    // r[impl workload.name]
    /// A removal ended at `now`. A failed one keeps the container, and so its name, held: it is
    /// retried when the removal gate allows (the restart policy's schedule, per container).
    fn removed(&mut self, container: String, result: Result<(), String>, now: Instant) {
        let Some(r) = self.retiring.get_mut(&container) else {
            return;
        };
        let Removal::InFlight(token) = std::mem::replace(&mut r.removal, Removal::Failed) else {
            return;
        };
        match result {
            Ok(()) => {
                tracing::info!(workload = %r.workload, %container, "container removed");
                drop(token);
                self.retiring.remove(&container);
                self.removals.forget(&container);
            }
            Err(error) => {
                let token = match token {
                    Some(token) => Ok(token),
                    // The first removal was not paced: its failure starts the streak.
                    None => self.removals.begin(&container, now),
                };
                let failures =
                    token.map_or(0, |token| self.removals.fail(token, now, None).failures);
                tracing::warn!(workload = %r.workload, %container, %error, failures, "container removal failed; retrying after a back-off");
            }
        }
    }

    // r[impl workload.min-run]
    /// Applies an action's result at `now`.
    pub fn on_result(&mut self, completion: Completion, now: Instant) -> Vec<Action> {
        let mut actions = Vec::new();
        match completion {
            Completion::Removed { container, result } => {
                self.removed(container, result, now);
            }
            Completion::Signalled {
                workload,
                container,
                result,
            } => {
                self.signalled(workload, container, result, now);
            }
            Completion::Started {
                workload,
                attempt,
                result,
            } => {
                if self.settle_stale_start(&workload, attempt, &result, &mut actions) {
                    return actions;
                }
                let Some(entry) = self.entries.get_mut(&workload) else {
                    return actions;
                };
                let Run::Starting { token, renewed, .. } =
                    std::mem::replace(&mut entry.run, Run::Idle)
                else {
                    return actions;
                };
                match result {
                    Ok(Started {
                        container,
                        health_check,
                    }) => {
                        tracing::info!(%workload, %container, health_check, "workload container started");
                        entry.foreign_refusals = 0;
                        entry.foreign_until = None;
                        if Self::got_past_node_network(&entry.config, true) {
                            self.network_is_ours();
                        }
                        let Some(entry) = self.entries.get_mut(&workload) else {
                            return actions;
                        };
                        // With a health check the start is judged by its first verdict.
                        let (lasting, unready, health) = if health_check {
                            (None, Some(token), Some(HealthStatus::Starting))
                        } else {
                            let lasting =
                                self.gate
                                    .succeed_provisionally(token, now, entry.config.min_run);
                            (Some(lasting), None, None)
                        };
                        entry.run = Run::Running {
                            container: container.clone(),
                            since: now,
                            lasting,
                            unready,
                            health,
                        };
                        self.replay_early(&container, now, &mut actions);
                        if let Some(certificate) = renewed {
                            actions.extend(self.renewed_while_starting(&workload, &certificate));
                        }
                    }
                    Err(err) => match err.cause {
                        StartCause::Failed => {
                            self.start_failed(&workload, token, err, now, &mut actions);
                        }
                        StartCause::ForeignNetwork => {
                            self.refused_by_foreign_network(
                                &workload,
                                token,
                                err,
                                now,
                                &mut actions,
                            );
                        }
                    },
                }
            }
        }
        actions
    }

    // r[impl workload.min-run]
    /// A create or start the daemon refused: a failure of the workload's streak; a container it
    /// created is removed.
    fn start_failed(
        &mut self,
        workload: &str,
        token: AttemptToken<String>,
        err: StartError,
        now: Instant,
        actions: &mut Vec<Action>,
    ) {
        let Some(entry) = self.entries.get_mut(workload) else {
            return;
        };
        entry.counters.start_failures += 1;
        entry.restart_due = true;
        let t = self.gate.fail(token, now, None);
        let past_network = Self::got_past_node_network(&entry.config, err.container.is_some());
        tracing::warn!(%workload, error = %err.message, failures = t.failures, "workload container failed to start");
        Self::file_start_failure(&self.board, workload, entry, &t, &err.message);
        if let Some(container) = err.container {
            let stop_timeout = entry.config.stop_timeout;
            self.retire(workload, container, stop_timeout, actions);
        }
        if past_network {
            self.network_is_ours();
        }
    }

    // r[impl workload.network.foreign]
    /// A start refused because the node's network is someone else's: not the workload's
    /// failure, so its streak is left as it was, and the start is tried again on the restart
    /// policy's own nominal schedule (base doubling to its cap, unjittered) under one fault.
    fn refused_by_foreign_network(
        &mut self,
        workload: &str,
        token: AttemptToken<String>,
        err: StartError,
        now: Instant,
        actions: &mut Vec<Action>,
    ) {
        let Some(entry) = self.entries.get_mut(workload) else {
            return;
        };
        self.gate.release(token, now);
        entry.counters.starts = entry.counters.starts.saturating_sub(1);
        if entry.restart_due {
            entry.counters.restarts = entry.counters.restarts.saturating_sub(1);
        }
        entry.counters.network_refusals += 1;
        entry.foreign_refusals = entry.foreign_refusals.saturating_add(1);
        let wait = self
            .config
            .restart_policy
            .nominal_delay(entry.foreign_refusals);
        entry.foreign_until = Some(now + wait);
        tracing::warn!(%workload, error = %err.message, "the node's network is someone else's");
        let subject = Self::network_subject(&self.config);
        if self.board.get(&subject).is_none() {
            let network = self.config.node_network_name();
            let message = format!(
                "the node's network {network} is someone else's, so no workload \
                 on it can start: {}. Remove it (docker network rm {network}) or \
                 recreate it as a bridge labelled {}=node; the workloads start \
                 on their next try",
                err.message,
                crate::docker::NETWORK_LABEL
            );
            self.board.file(
                subject,
                "foreign_network",
                &message,
                entry.foreign_refusals,
                SystemTime::now(),
            );
        }
        if let Some(container) = err.container {
            let stop_timeout = entry.config.stop_timeout;
            self.retire(workload, container, stop_timeout, actions);
        }
    }

    // r[impl workload.network.foreign]
    /// Whether a start of `config` got past the node's network: it created its container on it,
    /// so the network is the node's.
    fn got_past_node_network(config: &WorkloadConfig, created: bool) -> bool {
        created && config.network.as_deref() == Some(crate::config::NODE_NETWORK)
    }

    // r[impl workload.network.foreign]
    /// A start got past the node's network: it is the node's now, so its fault goes and the
    /// workloads it held back are no longer paced by it.
    fn network_is_ours(&mut self) {
        for entry in self.entries.values_mut() {
            if entry.config.network.as_deref() == Some(crate::config::NODE_NETWORK) {
                entry.foreign_refusals = 0;
                entry.foreign_until = None;
            }
        }
        self.board.clear(&Self::network_subject(&self.config));
    }

    // r[impl workload.certs.renew+2]
    /// A renewal told while `workload`'s start was in flight, told now that it runs (unless it
    /// already ended): its process may have read the old files.
    fn renewed_while_starting(&mut self, workload: &str, certificate: &str) -> Vec<Action> {
        let running = self
            .entries
            .get(workload)
            .is_some_and(|e| matches!(e.run, Run::Running { .. }));
        if !running {
            return Vec::new();
        }
        self.tell_renewal(certificate, Some(workload))
    }

    // r[impl workload.remove]
    /// A start result that is not the tracked start in flight (its workload was removed or
    /// replaced meanwhile): whatever it created is removed. Returns whether it was one.
    fn settle_stale_start(
        &mut self,
        workload: &str,
        attempt: AttemptId,
        result: &Result<Started, StartError>,
        actions: &mut Vec<Action>,
    ) -> bool {
        let owner = match self.orphans.remove(&attempt) {
            Some(orphan) => orphan,
            None => {
                let live = self.entries.get(workload).is_some_and(
                    |e| matches!(&e.run, Run::Starting { attempt: a, .. } if *a == attempt),
                );
                if live {
                    return false;
                }
                workload.to_owned()
            }
        };
        let container = match result {
            Ok(started) => Some(started.container.clone()),
            Err(e) => e.container.clone(),
        };
        if let Some(container) = container {
            // Not ours any more: make sure it does not run beside the tracked one.
            self.retire(
                &owner,
                container,
                crate::config::DEFAULT_STOP_TIMEOUT,
                actions,
            );
        }
        true
    }

    // r[impl workload.events]
    /// The start of `container` reported: an exit of it reported before the result is applied
    /// now; early events about other containers are kept while other starts are in flight.
    fn replay_early(&mut self, container: &str, now: Instant, actions: &mut Vec<Action>) {
        let early = std::mem::take(&mut self.early);
        let starting = self
            .entries
            .values()
            .any(|e| matches!(e.run, Run::Starting { .. }));
        for event in early {
            if event.id() == container {
                actions.extend(self.on_event(event, now));
            } else if starting {
                self.early.push(event);
            }
        }
    }

    // r[impl workload.crash-loop]
    /// A failed start (the gate's transition `t`): filed as one `start_failed` fault once the
    /// gate escalates, as the open `crash_loop` fault while the workload crash-loops, and an
    /// open fault is refreshed.
    fn file_start_failure(
        board: &FaultBoard,
        workload: &str,
        entry: &Entry,
        t: &Transition<String>,
        error: &str,
    ) {
        let message = format!(
            "create/start failed ({} consecutive failures): {error}",
            t.failures
        );
        let kind = if entry.crash_looping {
            "crash_loop"
        } else {
            "start_failed"
        };
        if t.escalation == Some(Escalation::Escalated) || entry.crash_looping {
            board.file(
                Self::subject(workload),
                kind,
                &message,
                t.failures,
                SystemTime::now(),
            );
        } else if board.get(&Self::subject(workload)).is_some() {
            board.file(
                Self::subject(workload),
                "start_failed",
                &message,
                t.failures,
                SystemTime::now(),
            );
        }
    }

    /// The earliest time at which [`Reconciler::tick`] may have something to do (a back-off
    /// ending, a run reaching its minimum, a first health verdict's deadline, a failed removal's
    /// retry); `None` when only an event or a result can change anything. A workload waiting for its image is asked again at the caller's next tick.
    pub fn next_wake(&self) -> Option<Instant> {
        let removals = self
            .retiring
            .iter()
            .filter(|(_, r)| matches!(r.removal, Removal::Failed))
            .filter_map(|(id, _)| self.removals.state(id).map(|s| s.next_attempt_at));
        let signals = self
            .owed_signals
            .iter()
            .filter(|(_, o)| !o.in_flight)
            .filter_map(|(w, _)| self.signals.state(w).map(|s| s.next_attempt_at));
        self.entries
            .iter()
            .filter_map(|(name, e)| match &e.run {
                Run::Running {
                    lasting: Some(lasting),
                    ..
                } if !lasting.is_confirmed() => Some(lasting.lasts_at()),
                Run::Running {
                    unready: Some(_),
                    since,
                    ..
                } => Some(*since + MAX_HEALTH_WAIT),
                Run::Idle => self
                    .gate
                    .state(name)
                    .filter(|s| !s.in_flight)
                    .map(|s| s.next_attempt_at)
                    .max(e.foreign_until)
                    // r[impl workload.restart.backoff+2]
                    // Ended by the last tick and still idle: held by something else.
                    .filter(|at| self.ticked.is_none_or(|ticked| *at > ticked)),
                _ => None,
            })
            .chain(removals)
            .chain(signals)
            .min()
    }

    // r[impl workload.status+2]
    /// Each workload's state at `now`, ordered by name.
    pub fn status(&self, now: Instant) -> Vec<WorkloadStatus> {
        self.entries
            .iter()
            .map(|(name, e)| WorkloadStatus {
                name: name.clone(),
                image: e.config.image.clone(),
                state: self.state_of(name, e, now),
                health: match &e.run {
                    Run::Running { health, .. } => *health,
                    _ => None,
                },
                counters: e.counters,
                last_exit: e.last_exit.clone(),
            })
            .collect()
    }

    fn state_of(&self, name: &str, e: &Entry, now: Instant) -> WorkloadState {
        match &e.run {
            Run::Running {
                container,
                since,
                lasting,
                unready,
                ..
            } => WorkloadState::Running {
                container: container.clone(),
                running_for: now.saturating_duration_since(*since),
                lasted: unready.is_none() && lasting.as_ref().is_none_or(Lasting::is_confirmed),
            },
            Run::Starting { token, .. } => WorkloadState::Starting {
                attempt: token.attempt(),
            },
            Run::Stopped {
                completed: true, ..
            } => WorkloadState::Completed,
            Run::Stopped { exit_code, .. } => WorkloadState::StoppedByPolicy {
                exit_code: *exit_code,
            },
            Run::Idle if !self.synced => WorkloadState::Syncing,
            Run::Idle
                if !e.waiting_on.is_empty()
                    && self
                        .gate
                        .state(name)
                        .is_none_or(|s| now >= s.next_attempt_at) =>
            {
                WorkloadState::WaitingForDependencies {
                    waiting_on: e.waiting_on.clone(),
                }
            }
            // r[impl workload.network.foreign]
            Run::Idle if e.foreign_until.is_some_and(|until| now < until) => {
                WorkloadState::Restarting {
                    restarting_in: e
                        .foreign_until
                        .map_or(Duration::ZERO, |until| until.saturating_duration_since(now)),
                    failures: self.gate.state(&name.to_owned()).map_or(0, |s| s.failures),
                    exit_code: e.last_exit.as_ref().and_then(|x| x.exit_code),
                }
            }
            Run::Idle => {
                let exit_code = e.last_exit.as_ref().and_then(|x| x.exit_code);
                let key = self.gate.state(&name.to_owned()).filter(|s| s.failures > 0);
                let backing_off = key.filter(|s| now < s.next_attempt_at);
                match (backing_off.or(key), &e.image_detail) {
                    (Some(s), detail) if backing_off.is_some() || detail.is_none() => {
                        let restarting_in = s.next_attempt_at.saturating_duration_since(now);
                        if e.crash_looping {
                            WorkloadState::CrashLooping {
                                restarting_in,
                                failures: s.failures,
                                exit_code,
                            }
                        } else {
                            WorkloadState::Restarting {
                                restarting_in,
                                failures: s.failures,
                                exit_code,
                            }
                        }
                    }
                    (_, Some(detail)) => WorkloadState::WaitingForImage {
                        detail: detail.clone(),
                    },
                    _ => WorkloadState::Pending,
                }
            }
        }
    }

    /// The module's counters summed over every workload.
    pub fn counters(&self) -> Counters {
        self.entries
            .values()
            .fold(Counters::default(), |mut sum, e| {
                sum.starts += e.counters.starts;
                sum.restarts += e.counters.restarts;
                sum.start_failures += e.counters.start_failures;
                sum.crash_loops += e.counters.crash_loops;
                sum.network_refusals += e.counters.network_refusals;
                sum.cert_renewals += e.counters.cert_renewals;
                sum.cert_renew_failures += e.counters.cert_renew_failures;
                sum
            })
    }

    /// The containers holdfast tracks as running, with their stop timeouts (for a stop on exit).
    pub fn running_containers(&self) -> Vec<(String, String, Duration)> {
        self.entries
            .iter()
            .filter_map(|(name, e)| match &e.run {
                Run::Running { container, .. } => {
                    Some((name.clone(), container.clone(), e.config.stop_timeout))
                }
                _ => None,
            })
            .collect()
    }

    // r[impl workload.health.probe]
    /// The running containers whose workload's check the node makes (`http`, `tcp`), with that
    /// check: the shell probes exactly these.
    /// The third is the daemon's name of the workload's configured network, if it names one.
    pub fn node_probes(&self) -> Vec<(String, crate::shape::HealthCheck, Option<String>)> {
        self.entries
            .values()
            .filter_map(|e| match (&e.run, &e.config.health) {
                (Run::Running { container, .. }, Some(check)) if check.node_probe().is_some() => {
                    let network = e.config.network.as_deref().map(|n| {
                        if n == crate::config::NODE_NETWORK {
                            self.config.node_network_name()
                        } else {
                            n.to_owned()
                        }
                    });
                    Some((container.clone(), check.clone(), network))
                }
                _ => None,
            })
            .collect()
    }

    // r[impl workload.network.foreign]
    /// The fault subject of the node's network taken by someone else's.
    fn network_subject(config: &ModuleConfig) -> Subject {
        Subject::new(MODULE, format!("network {}", config.node_network_name()))
    }

    /// The restart gate's streak for `name` (0 when it has none).
    pub fn failures(&self, name: &str) -> u32 {
        self.gate.state(&name.to_owned()).map_or(0, |s| s.failures)
    }

    /// When `name` may next be started, if it is backing off.
    pub fn next_attempt_at(&self, name: &str) -> Option<Instant> {
        self.gate
            .state(&name.to_owned())
            .filter(|s| !s.in_flight && s.failures > 0)
            .map(|s| s.next_attempt_at)
    }
}

fn crash_message(entry: &Entry, failures: u32) -> String {
    let (code, ran, tail) = entry
        .last_exit
        .as_ref()
        .map_or((None, Duration::ZERO, &[][..]), |x| {
            (x.exit_code, x.ran, &x.log_tail[..])
        });
    let code = code.map_or_else(|| "unknown".to_owned(), |c| c.to_string());
    let mut message = format!(
        "crash loop: exit code {code} after {:.1}s ({failures} consecutive failed starts; minimum run {})",
        ran.as_secs_f64(),
        holdfast_retry::duration_text::format(entry.config.min_run)
    );
    if tail.is_empty() {
        message.push_str("; no log output");
    } else {
        message.push_str("; last log lines:\n");
        message.push_str(&tail.join("\n"));
    }
    message
}

// r[impl workload.depends-on]
/// Whether a workload's run makes it ready for its dependents: running and, with a health
/// check, healthy; or completed.
fn is_ready(run: &Run) -> bool {
    match run {
        Run::Running {
            unready: None,
            health,
            ..
        } => health.is_none_or(|h| h == HealthStatus::Healthy),
        Run::Stopped {
            completed: true, ..
        } => true,
        _ => false,
    }
}

// r[impl workload.depends-on]
/// The dependencies of `config` not in `ready`, in the order configured.
fn unready_dependencies(
    config: &WorkloadConfig,
    ready: &std::collections::BTreeSet<String>,
) -> Vec<String> {
    config
        .depends_on
        .iter()
        .filter(|d| !ready.contains(*d))
        .cloned()
        .collect()
}

// r[impl workload.policy+2]
/// Whether an exit leaves the workload stopped under `policy` (`Some(completed)`) or it is
/// started again (`None`): `never` always stops, `on-failure` completes on an exit 0 after a
/// run that lasted.
fn stays_stopped(policy: RestartPolicy, lasted: bool, exit_code: Option<i64>) -> Option<bool> {
    match policy {
        RestartPolicy::Never => Some(false),
        RestartPolicy::OnFailure if lasted && exit_code == Some(0) => Some(true),
        _ => None,
    }
}

// r[impl workload.status+2]
/// Counts a start in `counters`: a restart when a failed start or an ended run came before it.
fn count_start(counters: &mut Counters, restart: bool) {
    counters.starts += 1;
    if restart {
        counters.restarts += 1;
    }
}

// r[impl workload.name]
/// The container name of `workload`: `holdfast-NAME`, or `holdfast-OWNER-NAME` with an owner
/// (whose characters a container name cannot hold become `-`).
pub fn container_name(workload: &str, owner: Option<&str>) -> String {
    match owner {
        None => format!("holdfast-{workload}"),
        Some(owner) => {
            let owner: String = owner
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                        c
                    } else {
                        '-'
                    }
                })
                .collect();
            format!("holdfast-{owner}-{workload}")
        }
    }
}

// r[impl workload.owner]
// r[impl workload.shape+2]
fn spec_of(config: &WorkloadConfig, hash: &str, owner: Option<&str>) -> ContainerSpec {
    let mut labels = config.labels.clone();
    labels.insert(WORKLOAD_LABEL.to_owned(), config.name.clone());
    labels.insert(SPEC_LABEL.to_owned(), hash.to_owned());
    if let Some(owner) = owner {
        labels.insert(OWNER_LABEL.to_owned(), owner.to_owned());
    }
    ContainerSpec {
        workload: config.name.clone(),
        image: config.image.clone(),
        command: config.command.clone(),
        env: config.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        labels,
        name: container_name(&config.name, owner),
        shape: Shape {
            ports: config.ports.clone(),
            // r[impl workload.certs+2]
            volumes: config
                .volumes
                .iter()
                .cloned()
                .chain(config.certificates.iter().map(|c| c.volume()))
                .collect(),
            network: config.network.clone(),
            user: config.user.clone(),
            workdir: config.workdir.clone(),
            memory: config.memory,
            cpus: config.cpus,
            pids_limit: config.pids_limit,
            read_only: config.read_only,
            cap_add: config.cap_add.clone(),
            cap_drop: config.cap_drop.clone(),
            init: config.init,
            log: config.log.clone(),
            health: config.health.clone(),
        },
    }
}

#[cfg(test)]
mod tests;
