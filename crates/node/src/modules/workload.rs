//! The workload module: the node's one adapter over holdfast-workload.
//!
//! The module runs holdfast-workload's supervisor against the node's Docker daemon, seeded with
//! the node's seed for "workload", filing faults on the node's board, and keeps its handle where
//! the admin API reads each workload's state. The workload crate asks for images through its own
//! [`Images`] trait; the node answers it with the pull module's account of each image
//! ([`PulledImages`]), so a workload starts once the pull module has its image present and the two
//! crates never depend on each other.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use holdfast_issuance::CertWatch;

use holdfast_lifecycle::{BoxFuture, StopError, StopRequest, Stopper};
use holdfast_workload::{
    ImagePresence, Images, ModuleConfig, Supervisor, WorkloadConfig, supervisor::WorkloadsHandle,
};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use crate::module::{Module, StartError, Started, StopGroup};
use crate::modules::hosted::spawn_hosted;
use crate::state::NodeState;

/// The module's name.
pub const NAME: &str = "workload";

// r[impl node.workload.images]
/// holdfast-workload's [`Images`] answered by the pull module: an image is present when the pull
/// module last said so; otherwise the workload waits, with the pull module's own account. Without
/// a pull module (`pull.enabled = false`) the operator keeps images present, and every image
/// counts as present (a missing one fails the create, which the restart gate paces).
#[derive(Debug, Clone)]
pub struct PulledImages {
    /// The node's state, where the pull module publishes each image's state every tick.
    pub node: NodeState,
    /// Whether the pull module runs.
    pub pull_enabled: bool,
}

impl Images for PulledImages {
    // r[impl workload.image.always]
    /// Present once the image is and a check of its tag made at or after `since` has settled
    /// (the pull module makes it, and pulls the image again first when the tag moved).
    fn ensure_fresh(&mut self, reference: &str, since: Instant, now: Instant) -> ImagePresence {
        let presence = self.ensure(reference, now);
        if presence != ImagePresence::Present || !self.pull_enabled {
            return presence;
        }
        let checked = self
            .node
            .start_checks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .ask(reference, since);
        if checked {
            ImagePresence::Present
        } else {
            ImagePresence::Pending {
                detail: "checking its tag against the registry before the start".to_owned(),
            }
        }
    }

    fn ensure(&mut self, reference: &str, _now: Instant) -> ImagePresence {
        if !self.pull_enabled {
            return ImagePresence::Present;
        }
        let pulled = self
            .node
            .workloads()
            .into_iter()
            .find(|w| w.image == reference);
        match pulled {
            Some(w) if w.image_state == "present" => ImagePresence::Present,
            Some(w) => ImagePresence::Pending {
                detail: match w.detail {
                    Some(detail) => format!("{}: {detail}", w.image_state),
                    None => w.image_state,
                },
            },
            None => ImagePresence::Pending {
                detail: "the pull module has not looked at it yet".to_owned(),
            },
        }
    }
}

/// The running supervisor: its handle (for status) and its stopper.
pub struct RunningWorkloads {
    /// Each workload's state and config changes.
    pub handle: WorkloadsHandle,
    /// The daemon endpoint the containers run on (`holdfast logs` reads them there).
    pub host: String,
    /// The `holdfast.owner` label value, which is also in the containers' names.
    pub owner: Option<String>,
    /// The configured workloads, shared with the node's reload (which replaces them first).
    workloads: Desired,
    stopper: Box<dyn Stopper>,
}

impl RunningWorkloads {
    // r[impl node.pull.gc-configured+3]
    /// The images the configured workloads use now: a reload's new set as soon as the reload
    /// has replaced it, before the supervisor or the pull module have taken it.
    pub fn configured_images(&self) -> Vec<String> {
        self.workloads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|w| w.image.clone())
            .collect()
    }
}

impl Stopper for RunningWorkloads {
    fn stop(self: Box<Self>, request: StopRequest) -> BoxFuture<Result<(), StopError>> {
        self.stopper.stop(request)
    }
}

/// The configured workloads, replaced live by a reload.
pub type Desired = std::sync::Arc<std::sync::Mutex<Vec<WorkloadConfig>>>;

/// The workloads `workloads`, shareable.
pub fn desired(workloads: Vec<WorkloadConfig>) -> Desired {
    std::sync::Arc::new(std::sync::Mutex::new(workloads))
}

/// The `[[workload]]` entries and `[workloads]` section as the node runs them.
#[derive(Debug, Clone)]
pub struct WorkloadModule {
    /// The workloads, shared with the node so that a reload can replace them live: each start
    /// takes the current ones.
    pub workloads: Desired,
    /// The Docker Engine endpoint (`None`: `DOCKER_HOST`, else the default socket).
    pub docker_host: Option<String>,
    /// `NodeIdentity::seed("workload")`.
    pub seed: u64,
    /// `[workloads] stop_on_exit`.
    pub stop_on_exit: bool,
    /// `holdfast.owner` label value (tests sharing a daemon); `None` in production.
    pub owner: Option<String>,
    /// Tick interval.
    pub tick: Duration,
    /// Whether the pull module runs (see [`PulledImages`]).
    pub pull_enabled: bool,
    /// The node's state (fault board, the slot the admin API reads).
    pub node: NodeState,
}

impl WorkloadModule {
    fn host(&self) -> String {
        match &self.docker_host {
            Some(host) => host.clone(),
            None => std::env::var("DOCKER_HOST")
                .unwrap_or_else(|_| "unix:///var/run/docker.sock".to_owned()),
        }
    }
}

// r[impl node.workload.module]
impl Module for WorkloadModule {
    fn name(&self) -> &str {
        NAME
    }

    fn group(&self) -> StopGroup {
        StopGroup::Workload
    }

    fn start(&self) -> Result<Started, StartError> {
        let this = self.clone();
        let slot = self.node.workload.clone();
        slot.configure();
        Ok(spawn_hosted(slot, async move {
            let mut config = ModuleConfig::new(this.seed);
            config.stop_on_exit = this.stop_on_exit;
            config.owner = this.owner.clone();
            let images = PulledImages {
                node: this.node.clone(),
                pull_enabled: this.pull_enabled,
            };
            let mut supervisor =
                Supervisor::new(this.host(), config, this.node.faults.clone(), images)
                    .map_err(|e| e.to_string())?;
            let workloads = this
                .workloads
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            supervisor
                .set_desired(workloads)
                .map_err(|e| e.to_string())?;
            let (handle, stopper) = supervisor.start(this.tick);
            let issuance = this.node.issuance.clone();
            let renewals = tokio::spawn(watch_renewals(
                move || issuance.with(|i| i.store().subscribe()).ok(),
                this.workloads.clone(),
                {
                    let handle = handle.clone();
                    move |name: &str| handle.cert_renewed(name)
                },
                this.tick,
            ));
            // The watch ends with the module.
            let stopper = holdfast_lifecycle::stopper_fn(move |request: StopRequest| {
                renewals.abort();
                stopper.stop(request)
            });
            Ok(RunningWorkloads {
                handle,
                host: this.host(),
                owner: this.owner.clone(),
                workloads: this.workloads.clone(),
                stopper,
            })
        }))
    }
}

/// How long a renewal waits for its deployed files before the workloads are told anyway.
pub const DEPLOY_WAIT: Duration = Duration::from_secs(600);

/// Each certificate's chain as the store holds it, by name.
type Chains = BTreeMap<String, String>;

// r[impl node.workload.cert-renew]
/// The certificates whose pair differs from `seen` (renewed, or issued for the first time).
fn renewed(seen: &Chains, now: &Chains) -> Vec<String> {
    now.iter()
        .filter(|(name, chain)| seen.get(*name) != Some(*chain))
        .map(|(name, _)| name.clone())
        .collect()
}

/// Whether the workloads may be told of a renewal to `chain`, given the deployed `fullchain.pem`
/// (`None`: unreadable): once it holds the same certificates, or anyway after [`DEPLOY_WAIT`]
/// (`Some(false)`: late). The certificates are compared, not the text: deploy writes its own PEM
/// (LF, 64 columns) while the store keeps the server's.
// r[impl node.workload.cert-renew]
fn deployed(fullchain: Option<&[u8]>, chain: &str, waited: Duration) -> Option<bool> {
    let same = fullchain
        .and_then(certificates)
        .is_some_and(|on_disk| certificates(chain.as_bytes()) == Some(on_disk));
    match same {
        true => Some(true),
        false if waited >= DEPLOY_WAIT => Some(false),
        false => None,
    }
}

/// The DER of each certificate in a PEM text, in order (`None`: none, or a malformed one).
fn certificates(pem: &[u8]) -> Option<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    (!certs.is_empty()).then_some(certs)
}

/// The deploy directory of each certificate the workloads mount.
fn mounted(workloads: &Desired) -> BTreeMap<String, PathBuf> {
    workloads
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .flat_map(|w| w.certificates.iter())
        .map(|c| (c.name.clone(), c.dir.clone()))
        .collect()
}

// r[impl node.workload.cert-renew]
/// Watches the certificate store (`source` finds it, again after the issuance module restarted)
/// and `tell`s the supervisor of each renewal of a certificate the workloads mount once its
/// files are deployed. The certificates present at the first look are the baseline. Ends when
/// `tell` says the supervisor is gone.
async fn watch_renewals(
    source: impl Fn() -> Option<CertWatch>,
    workloads: Desired,
    tell: impl Fn(&str) -> bool,
    tick: Duration,
) {
    let tick = tick.max(Duration::from_millis(10));
    let mut seen: Option<Chains> = None;
    // Renewals waiting for their files: name → (chain, since), on the runtime's clock so the
    // deploy wait follows a paused one in tests.
    let mut owed: BTreeMap<String, (String, tokio::time::Instant)> = BTreeMap::new();
    loop {
        let Some(mut watch) = source() else {
            tokio::time::sleep(tick).await;
            continue;
        };
        loop {
            let now: Chains = watch
                .current()
                .iter()
                .map(|(name, pair)| (name.clone(), pair.chain_pem.clone()))
                .collect();
            let mounts = mounted(&workloads);
            if let Some(seen) = &seen {
                for name in renewed(seen, &now) {
                    if mounts.contains_key(&name) {
                        owed.insert(
                            name.clone(),
                            (now[&name].clone(), tokio::time::Instant::now()),
                        );
                    }
                }
            }
            seen = Some(now);
            let mut told = Vec::new();
            for (name, (chain, since)) in &owed {
                let Some(dir) = mounts.get(name) else {
                    told.push(name.clone());
                    continue;
                };
                // Read off the runtime's threads: a slow disk does not stall the others.
                let path = dir.join("fullchain.pem");
                let fullchain = tokio::task::spawn_blocking(move || std::fs::read(path).ok())
                    .await
                    .ok()
                    .flatten();
                let Some(in_time) = deployed(fullchain.as_deref(), chain, since.elapsed()) else {
                    continue;
                };
                if !in_time {
                    tracing::warn!(certificate = %name, dir = %dir.display(),
                        "the renewed certificate's files were not deployed in time; telling its workloads anyway");
                }
                if !tell(name) {
                    return;
                }
                told.push(name.clone());
            }
            for name in told {
                owed.remove(&name);
            }
            // The tick only polls for owed files: with none owed, only the store wakes it.
            tokio::select! {
                changed = watch.changed() => if changed.is_err() { break },
                () = tokio::time::sleep(tick), if !owed.is_empty() => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::state::WorkloadStatus;
    use holdfast_lifecycle::FaultBoard;

    fn node() -> NodeState {
        NodeState::new("n", FaultBoard::new(), Metrics::new())
    }

    fn pulled(image_state: &str, detail: Option<&str>) -> WorkloadStatus {
        WorkloadStatus {
            name: "web".into(),
            image: "busybox:1".into(),
            image_state: image_state.into(),
            detail: detail.map(str::to_owned),
            run: None,
        }
    }

    // r[verify node.workload.images]
    #[test]
    fn an_image_is_present_for_the_workload_only_once_the_pull_module_says_so() {
        let node = node();
        let mut images = PulledImages {
            node: node.clone(),
            pull_enabled: true,
        };
        let now = Instant::now();
        assert!(matches!(
            images.ensure("busybox:1", now),
            ImagePresence::Pending { .. }
        ));
        node.set_workloads([pulled("waiting", Some("2 failures, next in 9s: refused"))]);
        assert_eq!(
            images.ensure("busybox:1", now),
            ImagePresence::Pending {
                detail: "waiting: 2 failures, next in 9s: refused".into()
            }
        );
        node.set_workloads([pulled("present", None)]);
        assert_eq!(images.ensure("busybox:1", now), ImagePresence::Present);
        assert!(matches!(
            images.ensure("other:2", now),
            ImagePresence::Pending { .. }
        ));
        let mut unmanaged = PulledImages {
            node,
            pull_enabled: false,
        };
        assert_eq!(unmanaged.ensure("other:2", now), ImagePresence::Present);
    }

    // r[verify workload.image.always]
    #[test]
    fn an_always_image_is_present_only_once_checked_since_the_workload_became_ready() {
        let node = node();
        let mut images = PulledImages {
            node: node.clone(),
            pull_enabled: true,
        };
        let since = Instant::now();
        // Not pulled yet: the pull's own account, no check asked for.
        assert!(matches!(
            images.ensure_fresh("busybox:1", since, since),
            ImagePresence::Pending { .. }
        ));
        assert!(!node.start_checks.lock().unwrap().begin("busybox:1", since));
        node.set_workloads([pulled("present", None)]);
        assert_eq!(
            images.ensure_fresh("busybox:1", since, since),
            ImagePresence::Pending {
                detail: "checking its tag against the registry before the start".into()
            }
        );
        // The pull module begins the check it was asked for and it ends (unchanged, or failed).
        assert!(node.start_checks.lock().unwrap().begin("busybox:1", since));
        node.start_checks
            .lock()
            .unwrap()
            .answered("busybox:1", since, false);
        assert_eq!(
            images.ensure_fresh("busybox:1", since, since),
            ImagePresence::Present
        );
        let later = since + Duration::from_secs(10);
        assert!(matches!(
            images.ensure_fresh("busybox:1", later, later),
            ImagePresence::Pending { .. }
        ));
        // Without a pull module, nothing is checked.
        let mut unmanaged = PulledImages {
            node,
            pull_enabled: false,
        };
        assert_eq!(
            unmanaged.ensure_fresh("other:2", later, later),
            ImagePresence::Present
        );
    }

    fn module(node: &NodeState, dir: &std::path::Path) -> WorkloadModule {
        WorkloadModule {
            workloads: desired(vec![WorkloadConfig::new("web", "busybox:1")]),
            docker_host: Some(format!("unix://{}", dir.join("none.sock").display())),
            seed: 7,
            stop_on_exit: false,
            owner: None,
            tick: Duration::from_millis(50),
            pull_enabled: true,
            node: node.clone(),
        }
    }

    /// Starts the module and waits (polling, bounded) until its status is published.
    async fn started(node: &NodeState, dir: &std::path::Path) -> Started {
        let started = module(node, dir).start().unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while node
            .workload
            .with(|r| r.handle.status().is_empty())
            .unwrap_or(true)
        {
            assert!(tokio::time::Instant::now() < deadline, "never published");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        started
    }

    async fn stop(started: Started) {
        let request = StopRequest {
            deadline: tokio::time::Instant::now() + Duration::from_secs(2),
            reason: holdfast_lifecycle::StopReason::Shutdown,
        };
        started.stopper.stop(request).await.unwrap();
        assert_eq!(started.task.await.unwrap(), Ok(()));
    }

    // r[verify node.workload.module]
    #[tokio::test]
    async fn the_module_stops_in_the_workload_group_and_starts_without_dialing() {
        let dir = tempfile::tempdir().unwrap();
        let node = node();
        let m = module(&node, dir.path());
        assert_eq!(m.group(), StopGroup::Workload);
        assert_eq!(m.name(), "workload");
        // No daemon at the socket: the module still starts (it reports through its state and
        // faults) and the stopper ends it and takes its handle out.
        let s = started(&node, dir.path()).await;
        stop(s).await;
        assert!(node.workload.with(|_| ()).is_err());
    }

    // r[verify node.reload.workload-restart]
    #[tokio::test]
    async fn a_restart_keeps_the_containers_even_with_stop_on_exit() {
        let dir = tempfile::tempdir().unwrap();
        let node = node();
        let request = || StopRequest {
            deadline: tokio::time::Instant::now() + Duration::from_secs(2),
            reason: holdfast_lifecycle::StopReason::Restart,
        };
        let with_stop_on_exit = |node: &NodeState| WorkloadModule {
            stop_on_exit: true,
            ..module(node, dir.path())
        };
        // The node's stop: the containers are stopped (here the daemon cannot be reached to).
        let s = with_stop_on_exit(&node).start().unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let stopped = s.stopper.stop(request()).await;
        assert!(stopped.is_err(), "{stopped:?}");
        // A reload's restart: told so, the stopper leaves them for the next instance.
        let s = with_stop_on_exit(&node).start().unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        node.workload
            .with(|r| r.handle.keep_containers_on_stop())
            .unwrap();
        s.stopper.stop(request()).await.unwrap();
    }

    // r[verify node.workload.status]
    #[tokio::test]
    async fn workloads_show_the_pull_view_and_the_workload_modules_view_side_by_side() {
        let dir = tempfile::tempdir().unwrap();
        let node = node();
        node.set_workloads([pulled("pulling", Some("1/3 layers"))]);
        let s = started(&node, dir.path()).await;
        let all = node.workloads();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].image_state, "pulling");
        let run = all[0].run.as_ref().expect("the workload module's state");
        assert_eq!(run.name, "web");
        let json = serde_json::to_value(&all[0]).unwrap();
        assert!(json["run"]["state"].is_string(), "{json}");
        stop(s).await;
        assert!(node.workloads()[0].run.is_none());
    }

    // r[verify node.workload.metrics]
    #[tokio::test]
    async fn restart_and_crash_loop_counters_are_exported_per_workload() {
        let dir = tempfile::tempdir().unwrap();
        let node = node();
        let s = started(&node, dir.path()).await;
        node.refresh_module_metrics();
        let text = node.metrics.render();
        for name in ["restarts", "start_failures", "crash_loops"] {
            assert!(
                text.contains(&format!(
                    "holdfast_workload_{name}_total{{workload=\"web\"}} 0"
                )),
                "{name}: {text}"
            );
        }
        stop(s).await;
        node.refresh_module_metrics();
        assert!(!node.metrics.render().contains("workload=\"web\""));
    }

    // r[verify node.workload.health]
    #[test]
    fn a_workloads_health_is_a_gauge_and_in_its_run() {
        use holdfast_workload::{Counters, HealthStatus, WorkloadState};
        let status = |name: &str, health: Option<HealthStatus>| holdfast_workload::WorkloadStatus {
            name: name.into(),
            image: "busybox:1".into(),
            state: WorkloadState::Pending,
            health,
            counters: Counters::default(),
            last_exit: None,
        };
        let metrics = Metrics::new();
        metrics.set_workloads(&[
            status("up", Some(HealthStatus::Healthy)),
            status("sick", Some(HealthStatus::Unhealthy)),
            status("warming", Some(HealthStatus::Starting)),
            status("plain", None),
        ]);
        let text = metrics.render();
        assert!(
            text.contains("holdfast_workload_healthy{workload=\"up\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("holdfast_workload_healthy{workload=\"sick\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("holdfast_workload_healthy{workload=\"warming\"} 0"),
            "{text}"
        );
        assert!(
            !text.contains("holdfast_workload_healthy{workload=\"plain\"}"),
            "{text}"
        );
        // A later scrape without the check drops the series.
        metrics.set_workloads(&[status("up", None)]);
        assert!(!metrics.render().contains("holdfast_workload_healthy{"));
        // In /v1/workloads, `run.health` is the verdict's name.
        let json = serde_json::to_value(status("up", Some(HealthStatus::Healthy))).unwrap();
        assert_eq!(json["health"], "healthy");
        assert!(
            serde_json::to_value(status("plain", None))
                .unwrap()
                .get("health")
                .is_none()
        );
    }

    // r[verify node.workload.cert-renew]
    #[test]
    fn a_renewal_is_a_changed_or_new_chain_and_waits_for_its_files() {
        let chains = |pairs: &[(&str, &str)]| -> Chains {
            pairs
                .iter()
                .map(|(n, c)| ((*n).to_owned(), (*c).to_owned()))
                .collect()
        };
        let seen = chains(&[("a", "1"), ("b", "1")]);
        let now = chains(&[("a", "2"), ("b", "1"), ("c", "1")]);
        assert_eq!(renewed(&seen, &now), vec!["a".to_owned(), "c".to_owned()]);
        assert!(renewed(&now, &now).is_empty());

        let dir = tempfile::tempdir().unwrap();
        let (old, new) = (
            pair("old.example.org").chain_pem,
            pair("new.example.org").chain_pem,
        );
        assert_eq!(deployed_in(dir.path(), &new, Duration::ZERO), None);
        std::fs::write(dir.path().join("fullchain.pem"), &old).unwrap();
        assert_eq!(
            deployed_in(dir.path(), &new, Duration::from_secs(599)),
            None
        );
        assert_eq!(deployed_in(dir.path(), &new, DEPLOY_WAIT), Some(false));
        std::fs::write(dir.path().join("fullchain.pem"), "not a certificate").unwrap();
        assert_eq!(
            deployed_in(dir.path(), "not a certificate", Duration::ZERO),
            None
        );
        std::fs::write(dir.path().join("fullchain.pem"), &new).unwrap();
        assert_eq!(deployed_in(dir.path(), &new, Duration::ZERO), Some(true));
    }

    // r[verify node.workload.cert-renew]
    #[test]
    fn a_deployed_chain_is_recognised_whatever_its_pem_formatting() {
        let now = std::time::SystemTime::now();
        let leaf = |name: &str| {
            holdfast_issuance::cert::testing::leaf(
                name,
                now - Duration::from_secs(60),
                Duration::from_secs(86400),
            )
            .0
        };
        let (a, b) = (leaf("a.example.org"), leaf("b.example.org"));
        // As deploy writes it (LF, 64 columns, a final newline) ...
        let canonical = format!("{a}{b}");
        // ... and as an ACME server may have sent it: CRLF, a blank line between the
        // certificates, no final newline.
        let served = format!("{}\n\n{}", a.trim_end(), b.trim_end()).replace('\n', "\r\n");
        assert_ne!(served, canonical);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("fullchain.pem"), &canonical).unwrap();
        assert_eq!(deployed_in(dir.path(), &served, Duration::ZERO), Some(true));
        // Another chain, or a part of it, is not the one deployed.
        assert_eq!(deployed_in(dir.path(), &a, Duration::ZERO), None);
        assert_eq!(
            deployed_in(dir.path(), &format!("{b}{a}"), Duration::ZERO),
            None
        );
    }

    fn deployed_in(dir: &std::path::Path, chain: &str, waited: Duration) -> Option<bool> {
        let fullchain = std::fs::read(dir.join("fullchain.pem")).ok();
        deployed(fullchain.as_deref(), chain, waited)
    }

    fn pair(name: &str) -> holdfast_issuance::CertifiedPair {
        let now = std::time::SystemTime::now();
        let (chain, key) = holdfast_issuance::cert::testing::leaf(
            name,
            now - Duration::from_secs(60),
            Duration::from_secs(86400),
        );
        holdfast_issuance::CertifiedPair::parse_bundle(name, &format!("{chain}{key}")).unwrap()
    }

    // r[verify node.workload.cert-renew]
    #[tokio::test]
    async fn the_watch_tells_of_a_renewal_of_a_mounted_certificate_once_it_is_deployed() {
        let dir = tempfile::tempdir().unwrap();
        let deploy = dir.path().join("deploy");
        std::fs::create_dir(&deploy).unwrap();
        let store = holdfast_issuance::CertStore::new(&dir.path().join("store")).unwrap();
        let first = pair("a.example");
        store
            .replace("a.example", first, std::time::SystemTime::now())
            .unwrap();
        store
            .replace(
                "other.example",
                pair("other.example"),
                std::time::SystemTime::now(),
            )
            .unwrap();
        let mut web = WorkloadConfig::new("web", "busybox:1");
        web.certificates = vec![holdfast_workload::CertificateMount {
            name: "a.example".into(),
            dir: deploy.clone(),
        }];
        let told = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let watching = {
            let (store, told) = (store.clone(), told.clone());
            tokio::spawn(watch_renewals(
                move || Some(store.subscribe()),
                desired(vec![web]),
                move |name: &str| {
                    told.lock().unwrap().push(name.to_owned());
                    true
                },
                Duration::from_millis(10),
            ))
        };
        let told_now = || told.lock().unwrap().clone();
        // The baseline is not a renewal.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(told_now().is_empty());
        // A renewal of a certificate no workload mounts is not told.
        store
            .replace(
                "other.example",
                pair("other.example"),
                std::time::SystemTime::now(),
            )
            .unwrap();
        // The mounted one: told only once its files are deployed.
        let renewed = store
            .replace("a.example", pair("a.example"), std::time::SystemTime::now())
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(told_now().is_empty(), "told before the deploy");
        std::fs::write(deploy.join("fullchain.pem"), &renewed.chain_pem).unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while told_now().is_empty() {
            assert!(tokio::time::Instant::now() < deadline, "never told");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(told_now(), vec!["a.example".to_owned()]);
        watching.abort();
    }

    // r[verify node.workload.cert-renew]
    #[tokio::test(start_paused = true)]
    async fn a_renewal_never_deployed_is_told_after_the_deploy_wait_on_the_runtimes_clock() {
        let dir = tempfile::tempdir().unwrap();
        let deploy = dir.path().join("deploy");
        std::fs::create_dir(&deploy).unwrap();
        let store = holdfast_issuance::CertStore::new(&dir.path().join("store")).unwrap();
        store
            .replace("a.example", pair("a.example"), std::time::SystemTime::now())
            .unwrap();
        let mut web = WorkloadConfig::new("web", "busybox:1");
        web.certificates = vec![holdfast_workload::CertificateMount {
            name: "a.example".into(),
            dir: deploy.clone(),
        }];
        let told = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let watching = {
            let (store, told) = (store.clone(), told.clone());
            tokio::spawn(watch_renewals(
                move || Some(store.subscribe()),
                desired(vec![web]),
                move |name: &str| {
                    told.lock().unwrap().push(name.to_owned());
                    true
                },
                Duration::from_secs(5),
            ))
        };
        let told_now = || told.lock().unwrap().clone();
        tokio::time::sleep(Duration::from_secs(10)).await;
        store
            .replace("a.example", pair("a.example"), std::time::SystemTime::now())
            .unwrap();
        // The files never arrive: not told before the wait is out, told once it is.
        tokio::time::sleep(DEPLOY_WAIT - Duration::from_secs(30)).await;
        assert!(told_now().is_empty(), "told before the deploy wait");
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(told_now(), vec!["a.example".to_owned()]);
        watching.abort();
    }
}
