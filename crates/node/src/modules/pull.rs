//! The pull module: the node's one adapter over holdfast-pull.
//!
//! Every tick it asks the actuator for each workload's image, publishes where each stands, and
//! mirrors the actuator's faults onto the node's fault board. When the Docker daemon cannot be
//! reached the module reports itself degraded with one fault that says what is missing and how to
//! fix it; it keeps running (the actuator paces its probes of the daemon), and the fault clears
//! once the daemon answers, without a restart. When no pull attempt says how the daemon is
//! (nothing to pull, or every image present) it probes the daemon itself on the same pacing, so a
//! node with nothing to pull still says that Docker is missing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use holdfast_lifecycle::{Health, Subject, health_channel, stopper_fn};
use holdfast_pull::{
    Actuator, DaemonEndpoint, DigestChecks, DockerFetcher, FaultSubject, Fetcher, GcPolicy,
    ImageGc, ImageState, PullConfig, PullError, RegistryAuth, Statvfs, TagCheck, collect,
};
use holdfast_retry::KeyedGate;
use tokio::sync::oneshot;

use crate::metrics::OutcomeLabel;
use crate::module::{Module, ModuleError, StartError, Started, StopGroup};
use crate::state::{NodeState, WorkloadStatus};

/// The module's name.
pub const NAME: &str = "pull";

pub use crate::config::{TagChecks, pull_config};

/// The pull module's (workload name, image reference) set, shared with the node's reload, which
/// may replace it while the module runs (`r[node.reload.live-pull+2]`).
pub type SharedImages = Arc<std::sync::Mutex<Vec<(String, String)>>>;

/// `images` as a set the module and the node's reload share.
pub fn shared_images(images: Vec<(String, String)>) -> SharedImages {
    Arc::new(std::sync::Mutex::new(images))
}

/// What `shared` holds now.
fn images_now(shared: &SharedImages) -> Vec<(String, String)> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// The images to keep present: (workload name, image reference).
#[derive(Debug, Clone)]
pub struct PullModule {
    /// Workloads and their images, read at each tick (a reload may replace them).
    pub workloads: SharedImages,
    /// The Docker Engine endpoint (`None`: `DOCKER_HOST`, else the default socket).
    pub docker_host: Option<String>,
    /// holdfast-pull's configuration (see [`pull_config`]).
    pub config: PullConfig,
    /// Where registry credentials are found (`pull.docker_config`, `credentials_file`).
    pub auth: RegistryAuth,
    /// The tags followed (`pull_policy = "digest"`).
    pub tag_checks: TagChecks,
    /// Tick interval.
    pub tick: Duration,
    /// Image collection's policy and interval (`None`: `pull.gc = false`).
    pub gc: Option<(GcPolicy, Duration)>,
    /// The node's state.
    pub node: NodeState,
}

/// Aborts the task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

// r[impl actuate.image.gc+4]
/// Image collection, one run per `interval` on the daemon's data root: each image removed is
/// logged and counted with its size (`holdfast_pull_gc_removed_total`, `…_removed_bytes_total`),
/// each failed removal too (`holdfast_pull_gc_failures_total`, retried on the image's own
/// schedule), each run by its outcome (`holdfast_pull_gc_runs_total`), none of it among the pull
/// outcomes; a run that cannot decide (daemon down, disk not measurable) removes
/// nothing and is logged, a warning when its cause is new (the pull module's own probe files the
/// daemon's fault). A run
/// is bounded by the interval, so a daemon that stops answering cannot hold collection forever.
async fn collect_images(
    endpoint: DaemonEndpoint,
    configured: SharedImages,
    mut gc: ImageGc,
    interval: Duration,
    node: NodeState,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The cause of the last skipped run: a new cause is a warning, the same one again is not.
    let mut skipped: Option<String> = None;
    loop {
        ticker.tick().await;
        let configured = protected(&configured, &node);
        let run = async {
            let docker = endpoint.connect().await.map_err(|e| e.to_string())?;
            let now = || tokio::time::Instant::now().into_std();
            collect(&docker, &mut gc, &configured, &Statvfs, now)
                .await
                .map_err(|e| e.to_string())
        };
        let outcome = |outcome: &str| {
            node.metrics
                .pull_gc_runs
                .get_or_create(&OutcomeLabel {
                    outcome: outcome.to_owned(),
                })
                .inc();
        };
        let run = match tokio::time::timeout(interval, run).await {
            Ok(Ok(run)) => {
                outcome("ran");
                if skipped.take().is_some() {
                    tracing::info!("image GC runs again");
                }
                run
            }
            Ok(Err(error)) => {
                outcome("skipped");
                if skipped.as_deref() == Some(error.as_str()) {
                    tracing::debug!(%error, "image GC skipped this run");
                } else {
                    tracing::warn!(%error, "image GC skipped this run; nothing is collected until it can decide");
                    skipped = Some(error);
                }
                continue;
            }
            Err(_) => {
                outcome("timed_out");
                tracing::warn!("image GC: the daemon did not answer within the interval");
                continue;
            }
        };
        for removal in &run.removals {
            let image = &removal.image;
            let name = image.tags.first().unwrap_or(&image.id);
            match &removal.result {
                Ok(()) => {
                    tracing::info!(
                        image = %name, id = %image.id, bytes = image.size,
                        "image GC removed an image no workload uses"
                    );
                    node.metrics.pull_gc_removed.inc();
                    node.metrics.pull_gc_removed_bytes.inc_by(image.size);
                }
                Err(error) => {
                    tracing::warn!(
                        image = %name, id = %image.id, %error,
                        "image GC could not remove an image; retrying on its schedule"
                    );
                    node.metrics.pull_gc_failures.inc();
                }
            }
        }
    }
}

// r[impl node.pull.gc-configured+3]
/// The images collection keeps: those of the pull module's set now (a reload taking a changed
/// set live replaces it), and those the running workload module's configured set uses now (a
/// reload that adds a workload replaces that set before anything else, so its image is protected
/// from then on, whether or not the pull module took its new set live).
fn protected(pull_set: &SharedImages, node: &NodeState) -> Vec<String> {
    let mut images: Vec<String> = images_now(pull_set)
        .into_iter()
        .map(|(_, image)| image)
        .collect();
    if let Ok(now) = node.workload.with(|w| w.configured_images()) {
        images.extend(now);
    }
    images.sort();
    images.dedup();
    images
}

/// The one fault for an unreachable daemon: the same subject holdfast-pull files its daemon
/// fault under, so the operator sees one, not two.
fn daemon_subject() -> Subject {
    FaultSubject::Daemon.subject()
}

impl Module for PullModule {
    fn name(&self) -> &str {
        NAME
    }

    fn group(&self) -> StopGroup {
        StopGroup::Pull
    }

    fn start(&self) -> Result<Started, StartError> {
        let endpoint = match &self.docker_host {
            Some(host) => DaemonEndpoint::from_docker_host(Some(host)),
            None => DaemonEndpoint::from_env(),
        };
        let host = endpoint.host().to_owned();
        let fetcher =
            DockerFetcher::with_auth(endpoint, self.config.stall_timeout(), self.auth.clone());
        // Image faults go straight onto the node's board (module "pull").
        let actuator =
            Actuator::with_fault_board(fetcher.clone(), self.config, self.node.faults.clone())
                .map_err(|e| StartError(e.to_string()))?;
        let (reporter, health) = health_channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let this = self.clone();
        // r[impl actuate.image.gc+4]
        // The data root is measured here by path: only right for a daemon on this host.
        let gc = self.gc.filter(|_| {
            let local = fetcher.endpoint().is_local_socket();
            if !local {
                tracing::warn!(
                    daemon = %fetcher.endpoint().host(),
                    "image GC is off: the daemon is not reached through a unix:// socket on this \
                     host, so its data root's disk cannot be measured here"
                );
            }
            local
        });
        let gc = gc.map(|(policy, interval)| {
            AbortOnDrop(tokio::spawn(collect_images(
                fetcher.endpoint().clone(),
                // Read at each run: a reload may replace it while the module runs.
                self.workloads.clone(),
                ImageGc::new(policy, *self.config.image_policy()),
                interval,
                self.node.clone(),
            )))
        });
        let task = tokio::spawn(async move {
            // Collection ends with the module.
            let _gc = gc;
            this.run(actuator, fetcher, host, reporter, stop_rx).await;
            Ok::<(), ModuleError>(())
        });
        let stopper = stopper_fn(move |_request| async move {
            // The actuator's attempts are cancelled when it is dropped with the task.
            let _ = stop_tx.send(());
            Ok(())
        });
        Ok(Started {
            stopper,
            health,
            task,
        })
    }
}

impl PullModule {
    // r[impl node.pull.workloads]
    async fn run(
        self,
        mut actuator: Actuator<DockerFetcher>,
        fetcher: DockerFetcher,
        host: String,
        health: holdfast_lifecycle::HealthReporter,
        mut stop: oneshot::Receiver<()>,
    ) {
        let fetcher = Arc::new(fetcher);
        let mut probe_gate: KeyedGate<()> = KeyedGate::new(*self.config.daemon_policy());
        let (probe_tx, mut probe_rx) = tokio::sync::mpsc::unbounded_channel();
        let mut probe_in_flight = false;
        // `None` until the daemon has been heard from (or found missing) once.
        let mut probe_down: Option<Option<String>> = None;
        let mut last: BTreeMap<String, &'static str> = BTreeMap::new();
        // The references of the last tick's set: one a reload removed is forgotten.
        let mut kept: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
        let mut tags = FollowedTags::new(
            &self.tag_checks,
            self.config.image_policy().seed(),
            &self.node,
        );
        let mut ticker = tokio::time::interval(self.tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                Some((token, result)) = probe_rx.recv() => {
                    let now = tokio::time::Instant::now().into_std();
                    probe_in_flight = false;
                    match result {
                        Ok(()) => {
                            probe_gate.succeed(token, now);
                            probe_down = Some(None);
                        }
                        Err(err) => {
                            probe_gate.fail(token, now, None);
                            probe_down = Some(Some(format!("{err}")));
                        }
                    }
                }
                Some((reference, start, result)) = tags.results.recv() => {
                    tags.answered(&reference, start, result, &fetcher, &mut actuator, &self.node);
                }
                _ = &mut stop => {
                    health.set(Health::Stopped);
                    return;
                }
            }
            let now = tokio::time::Instant::now().into_std();
            // `Some(None)`: the daemon answers; `Some(Some(e))`: it does not; `None`: not known yet.
            let mut down: Option<Option<String>> = None;
            let mut statuses = Vec::new();
            // r[impl node.reload.live-pull+2]
            // The set as it is now: a reload may have replaced it since the last tick.
            let images = images_now(&self.workloads);
            let now_kept: std::collections::BTreeSet<String> =
                images.iter().map(|(_, image)| image.clone()).collect();
            // An image no workload needs any more: its fault, pacing and pull under way go.
            for gone in kept.difference(&now_kept) {
                actuator.forget(gone);
                last.remove(gone);
                tags.forget(gone, &self.node);
            }
            // Asks for a reference no workload uses any more (or yet) go too; one still needed
            // is asked again at the workload's next tick.
            start_checks(&self.node).retain(|reference| now_kept.contains(reference));
            kept = now_kept;
            for (name, image) in &images {
                let state = actuator.ensure(image, now);
                let (label, detail) = describe(&state, now);
                match &state {
                    ImageState::DaemonUnreachable { last_error, .. } => {
                        down = Some(Some(last_error.to_string()));
                    }
                    // A presence remembered, or a pull in flight, says nothing about the daemon now.
                    ImageState::Present | ImageState::Pulling { .. } => {}
                    // The daemon answered this reference's attempt.
                    ImageState::Waiting { .. }
                    | ImageState::Escalated { .. }
                    | ImageState::Deferred { .. } => {
                        if down.is_none() {
                            down = Some(None);
                        }
                    }
                }
                if matches!(state, ImageState::Present) {
                    tags.present(image, now, &fetcher, &self.node);
                }
                tags.before_start(image, &state, now, &fetcher, &self.node);
                self.count_outcome(&mut last, image, label);
                let (label, detail) = shown(label, detail, tags.moved.contains(image));
                statuses.push(WorkloadStatus {
                    name: name.clone(),
                    image: image.clone(),
                    image_state: label.to_owned(),
                    detail,
                    run: None,
                });
            }
            if down.is_none() {
                // No attempt told us about the daemon (nothing to pull, or everything present):
                // probe it ourselves, paced the same way, so a daemon that goes away is noticed.
                if !probe_in_flight {
                    if let Ok(token) = probe_gate.begin(&(), now) {
                        probe_in_flight = true;
                        let fetcher = Arc::clone(&fetcher);
                        let tx = probe_tx.clone();
                        tokio::spawn(async move {
                            let result = fetcher.probe().await;
                            let _ = tx.send((token, result));
                        });
                    }
                }
                down = probe_down.clone();
            }
            self.node.set_workloads(statuses);
            match &down {
                Some(Some(err)) => {
                    self.sync_faults(&actuator, Some(err), &host);
                    health.set(Health::Degraded(format!(
                        "cannot reach the Docker daemon at {host}: {err}"
                    )));
                }
                Some(None) => {
                    self.sync_faults(&actuator, None, &host);
                    health.set(Health::Ready);
                }
                None => self.sync_faults(&actuator, None, &host),
            }
        }
    }

    fn count_outcome(
        &self,
        last: &mut BTreeMap<String, &'static str>,
        image: &str,
        label: &'static str,
    ) {
        let previous = last.insert(image.to_owned(), label);
        if previous == Some(label) {
            return;
        }
        let outcome = match (previous, label) {
            (Some("pulling") | None, "present") => "present",
            (Some("pulling"), "waiting" | "escalated") => "failed",
            (_, "daemon_unreachable") => "daemon_unreachable",
            _ => return,
        };
        self.node
            .metrics
            .pull_outcomes
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    // r[impl node.pull.degraded]
    fn sync_faults(&self, _actuator: &Actuator<DockerFetcher>, down: Option<&str>, host: &str) {
        let board = &self.node.faults;
        match down {
            Some(err) => {
                let message = format!(
                    "cannot reach the Docker daemon at {host} ({err}); start dockerd (or Podman's \
                     service) or point pull.docker_host / DOCKER_HOST at it; retrying with back-off"
                );
                let failures = board.get(&daemon_subject()).map_or(1, |f| f.failures);
                board.file(
                    daemon_subject(),
                    "backend_unreachable",
                    &message,
                    failures,
                    SystemTime::now(),
                );
            }
            None => {
                board.clear(&daemon_subject());
            }
        }
    }
}

/// A tag check's outcome: (reference, when it began if made before a start (`pull_policy =
/// "always"`), outcome).
type CheckResult = (
    String,
    Option<std::time::Instant>,
    Result<TagCheck, PullError>,
);

// r[impl actuate.image.tag-moved]
// r[impl workload.image.moved]
/// The followed tags: each present one checked once an interval; a moved one marked to be pulled
/// again and invalidated, so the actuator pulls it (paced, faulted); once present again, the
/// workload module replaces the containers running it.
struct FollowedTags {
    images: std::collections::BTreeMap<String, Vec<String>>,
    checks: DigestChecks,
    in_flight: std::collections::BTreeSet<String>,
    /// Moved, being pulled again: the workloads are told once it is present.
    moved: std::collections::BTreeSet<String>,
    tx: tokio::sync::mpsc::UnboundedSender<CheckResult>,
    results: tokio::sync::mpsc::UnboundedReceiver<CheckResult>,
    /// The checks under way: aborted when the module stops (this is dropped with its task).
    tasks: tokio::task::JoinSet<()>,
}

impl FollowedTags {
    /// The followed tags of a module that is starting: the start checks a previous module had
    /// under way never end (their tasks went with it), so they begin again here.
    fn new(config: &TagChecks, seed: u64, node: &NodeState) -> Self {
        start_checks(node).reset_under_way();
        let (tx, results) = tokio::sync::mpsc::unbounded_channel();
        FollowedTags {
            images: config.images.clone(),
            checks: DigestChecks::new(config.interval).jittered(seed),
            in_flight: Default::default(),
            moved: Default::default(),
            tx,
            results,
            tasks: tokio::task::JoinSet::new(),
        }
    }

    /// `image` is present at `now`: a moved one is now the new content (the workloads are told);
    /// a followed one whose check is due is checked.
    fn present(
        &mut self,
        image: &str,
        now: std::time::Instant,
        fetcher: &Arc<DockerFetcher>,
        node: &NodeState,
    ) {
        if self.moved.remove(image) {
            tracing::info!(%image, "pulled the moved tag; replacing the workloads running it");
            let followers = self.images.get(image).cloned().unwrap_or_default();
            let _ = node
                .workload
                .with(|w| w.handle.image_moved(image, followers));
            start_checks(node).pull_ended(image, now);
        }
        if !self.images.contains_key(image)
            || self.in_flight.contains(image)
            || !self.checks.due(image, now)
        {
            return;
        }
        self.checks.checked(image, now);
        self.in_flight.insert(image.to_owned());
        self.spawn_check(image, None, fetcher);
    }

    // r[impl workload.image.always]
    /// The checks asked for before a start: one begins for a present image a workload waits on;
    /// while its image is pulled again (its tag moved), an attempt that failed or that the pull's
    /// pacing holds back answers the ask, so the start goes on from the local image (the pull
    /// again itself goes on, paced, until it succeeds).
    fn before_start(
        &mut self,
        image: &str,
        state: &ImageState,
        now: std::time::Instant,
        fetcher: &Arc<DockerFetcher>,
        node: &NodeState,
    ) {
        if self.moved.contains(image) {
            // Failed, or held back by the pull's pacing (`Deferred`): either way not pulling now.
            let failed = !matches!(state, ImageState::Present | ImageState::Pulling { .. });
            if failed {
                start_checks(node).pull_ended(image, now);
            }
            return;
        }
        if matches!(state, ImageState::Present) && start_checks(node).begin(image, now) {
            self.spawn_check(image, Some(now), fetcher);
        }
    }

    fn spawn_check(
        &mut self,
        image: &str,
        start: Option<std::time::Instant>,
        fetcher: &Arc<DockerFetcher>,
    ) {
        let fetcher = Arc::clone(fetcher);
        let tx = self.tx.clone();
        let reference = image.to_owned();
        // Reap the finished ones, so the set holds what runs.
        while self.tasks.try_join_next().is_some() {}
        self.tasks.spawn(async move {
            let result = fetcher.check_tag(reference.clone()).await;
            let _ = tx.send((reference, start, result));
        });
    }

    /// `image` is no longer kept: a move noticed is no longer acted on.
    fn forget(&mut self, image: &str, node: &NodeState) {
        self.moved.remove(image);
        self.checks.forget(image);
        start_checks(node).forget(image);
    }

    fn answered(
        &mut self,
        image: &str,
        start: Option<std::time::Instant>,
        result: Result<TagCheck, PullError>,
        fetcher: &Arc<DockerFetcher>,
        actuator: &mut Actuator<DockerFetcher>,
        node: &NodeState,
    ) {
        if start.is_none() {
            self.in_flight.remove(image);
        }
        let next = start.is_none().then(|| self.checks.interval());
        record_check(node, image, &result, next);
        let moved = matches!(result, Ok(TagCheck::Moved { .. }));
        match result {
            Ok(TagCheck::Unchanged) => tracing::debug!(%image, "tag unchanged"),
            // Already being pulled again: the pull under way brings the new content.
            Ok(TagCheck::Moved { .. }) if self.moved.contains(image) => {}
            Ok(TagCheck::Moved { remote }) => {
                tracing::info!(%image, digest = %remote, "tag moved in its registry; pulling it again");
                fetcher.pull_again(image);
                actuator.invalidate(image);
                self.moved.insert(image.to_owned());
            }
            // Asked again at the next interval (or start), never sooner.
            Err(error) => tracing::warn!(%image, %error, "could not check the tag's digest"),
        }
        if let Some(began) = start {
            start_checks(node).answered(image, began, moved);
        }
    }
}

/// The node's start checks, locked.
fn start_checks(node: &NodeState) -> std::sync::MutexGuard<'_, holdfast_pull::StartChecks> {
    node.start_checks
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The fault of a followed tag that cannot be checked.
fn tag_check_subject(image: &str) -> Subject {
    Subject::new("pull", format!("tag check {image}"))
}

// r[impl actuate.image.tag-moved]
/// Counts a tag check's outcome (`holdfast_pull_outcomes_total{outcome="tag_unchanged" |
/// "tag_moved" | "tag_check_failed"}`); a check the registry refuses (unauthorized, not found)
/// files a fault on the tag, which the next check that succeeds clears. Other failures (a
/// registry or daemon that does not answer) are only counted and logged: the image runs on.
fn record_check(
    node: &NodeState,
    image: &str,
    result: &Result<TagCheck, PullError>,
    interval: Option<Duration>,
) {
    let outcome = match result {
        Ok(TagCheck::Unchanged) => "tag_unchanged",
        Ok(TagCheck::Moved { .. }) => "tag_moved",
        Err(_) => "tag_check_failed",
    };
    node.metrics
        .pull_outcomes
        .get_or_create(&OutcomeLabel {
            outcome: outcome.to_owned(),
        })
        .inc();
    let subject = tag_check_subject(image);
    match result {
        Ok(_) => {
            node.faults.clear(&subject);
        }
        Err(error)
            if matches!(
                error.kind,
                holdfast_pull::PullErrorKind::Unauthorized | holdfast_pull::PullErrorKind::NotFound
            ) =>
        {
            let failures = node.faults.get(&subject).map_or(1, |f| f.failures + 1);
            node.faults.file(
                subject,
                error.kind.as_str(),
                &format!(
                    "cannot check whether the tag of {image} moved: {error}; the local image runs \
                     on, checked again {}",
                    match interval {
                        Some(interval) => format!("in {}s", interval.as_secs()),
                        None => "before its workload's next start".to_owned(),
                    }
                ),
                failures,
                SystemTime::now(),
            );
        }
        Err(_) => {}
    }
}

// r[impl actuate.image.tag-moved]
/// What the workloads are told of an image: one being pulled again because its tag moved is
/// still present (its old content is local), so a workload that exits meanwhile restarts from
/// it, even while the new pull fails; the detail says the pull is under way.
fn shown(
    label: &'static str,
    detail: Option<String>,
    pulling_again: bool,
) -> (&'static str, Option<String>) {
    if !pulling_again || label == "present" {
        return (label, detail);
    }
    let how = match detail {
        Some(detail) => format!("{label}: {detail}"),
        None => label.to_owned(),
    };
    (
        "present",
        Some(format!("its tag moved; pulling it again ({how})")),
    )
}

fn describe(state: &ImageState, now: std::time::Instant) -> (&'static str, Option<String>) {
    let wait = |until: &std::time::Instant| until.saturating_duration_since(now).as_secs();
    match state {
        ImageState::Present => ("present", None),
        ImageState::Pulling { progress } => (
            "pulling",
            Some(format!(
                "{}/{} layers",
                progress.layers_done, progress.layers
            )),
        ),
        ImageState::Waiting {
            until,
            failures,
            last_error,
        } => (
            "waiting",
            Some(format!(
                "{failures} failures, next in {}s: {last_error}",
                wait(until)
            )),
        ),
        ImageState::Escalated {
            until,
            failures,
            last_error,
        } => (
            "escalated",
            Some(format!(
                "{failures} failures, next in {}s: {last_error}",
                wait(until)
            )),
        ),
        ImageState::Deferred { until, failures } => (
            "deferred",
            Some(format!(
                "{failures} failures, held back, next in {}s",
                wait(until)
            )),
        ),
        ImageState::DaemonUnreachable {
            until, last_error, ..
        } => (
            "daemon_unreachable",
            Some(format!("next probe in {}s: {last_error}", wait(until))),
        ),
    }
}

#[cfg(test)]
mod tests {
    /// A fake daemon on `socket`: each request is answered by `answer` from its request line
    /// (status and JSON body), and every request line is recorded, in order.
    fn fake_daemon(
        socket: &std::path::Path,
        answer: impl Fn(&str) -> (u16, String) + Clone + Send + 'static,
    ) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let seen_lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let recording = std::sync::Arc::clone(&seen_lines);
        let listener = tokio::net::UnixListener::bind(socket).unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let recording = std::sync::Arc::clone(&recording);
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    let mut buf = [0u8; 4096];
                    loop {
                        let Ok(n) = stream.read(&mut buf).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        seen.extend_from_slice(&buf[..n]);
                        let text = String::from_utf8_lossy(&seen).into_owned();
                        let Some(end) = text.find("\r\n\r\n") else {
                            continue;
                        };
                        let line = text.lines().next().unwrap_or_default().to_owned();
                        seen.drain(..end + 4);
                        recording.lock().unwrap().push(line.clone());
                        let (status, body) = answer(&line);
                        let response = format!(
                            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if stream.write_all(response.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        seen_lines
    }

    /// The daemon's answer to `/version`.
    const VERSION: &str = r#"{"ApiVersion":"1.41","MinAPIVersion":"1.12"}"#;

    /// A daemon on `socket` that answers its version and nothing else usefully (500); the
    /// `/info` requests among its lines are image collection's (nothing else makes them).
    fn info_counting_daemon(
        socket: &std::path::Path,
    ) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
        fake_daemon(socket, |line| {
            if line.contains("/version") {
                (200, VERSION.to_owned())
            } else {
                (500, r#"{"message":"no"}"#.to_owned())
            }
        })
    }

    /// How many of `lines` are `/info` requests.
    fn infos(lines: &std::sync::Mutex<Vec<String>>) -> usize {
        lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains("/info "))
            .count()
    }

    // i[verify node.pull.gc]
    // r[verify actuate.image.gc+4]
    // Real time: the pull module's own pacing reads the system clock, which a paused tokio clock
    // would leave behind (its loop then spins). Hence a one-second interval, against the
    // default five minutes.
    #[tokio::test]
    async fn the_pull_gc_keys_reach_the_module_and_its_runs_have_their_own_counter() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("d.sock");
        let lines = info_counting_daemon(&sock);
        let text = format!(
            "[node]\n[pull]\ndocker_host = \"unix://{}\"\ngc_high_percent = 90\n\
             gc_low_percent = 70\ngc_grace = \"3h\"\ngc_interval = \"1s\"\n",
            sock.display()
        );
        let config = crate::config::Config::parse("t.toml", &text).unwrap();
        let node = NodeState::new(
            "n",
            holdfast_lifecycle::FaultBoard::new(),
            crate::metrics::Metrics::new(),
        );
        // Built as the node composes it (run.rs): every input from `pull_inputs`.
        let crate::config::PullInputs {
            workloads,
            docker_host,
            config: pull_config,
            auth,
            tag_checks,
            gc,
        } = config.pull_inputs(7);
        assert_eq!(
            gc,
            Some((
                holdfast_pull::GcPolicy::new(90, 70, Duration::from_secs(3 * 3600)).unwrap(),
                Duration::from_secs(1)
            ))
        );
        let module = PullModule {
            workloads: shared_images(workloads),
            docker_host,
            config: pull_config,
            auth,
            tag_checks,
            tick: Duration::from_secs(5),
            gc,
            node: node.clone(),
        };
        let started = module.start().unwrap();
        // A run at the start, then one a second: the configured interval, not the default.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while infos(&lines) < 3 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "collection never ran thrice"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let runs = infos(&lines);
        let text = node.metrics.render();
        assert!(
            text.contains(&format!(
                r#"holdfast_pull_gc_runs_total{{outcome="skipped"}} {runs}"#
            )) || text.contains(&format!(
                r#"holdfast_pull_gc_runs_total{{outcome="skipped"}} {}"#,
                runs - 1
            )),
            "{text}"
        );
        assert!(text.contains("holdfast_pull_gc_removed_total 0"), "{text}");
        assert!(text.contains("holdfast_pull_gc_failures_total 0"), "{text}");
        assert!(!text.contains("outcome=\"gc_"), "{text}");
        started
            .stopper
            .stop(holdfast_lifecycle::StopRequest {
                deadline: tokio::time::Instant::now() + Duration::from_secs(2),
                reason: holdfast_lifecycle::StopReason::Shutdown,
            })
            .await
            .unwrap();
    }

    /// A daemon on `socket` with no images and no containers whose data root is `root`; every
    /// configured image collection inspects is absent (404). Returns the request lines.
    fn empty_daemon(
        socket: &std::path::Path,
        root: &std::path::Path,
    ) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
        let info = serde_json::json!({ "DockerRootDir": root }).to_string();
        fake_daemon(socket, move |line| {
            if line.contains("/version") {
                (200, VERSION.to_owned())
            } else if line.contains("/info") {
                (200, info.clone())
            } else if line.contains("/images/json") || line.contains("/containers/json") {
                (200, "[]".to_owned())
            } else {
                (404, r#"{"message":"No such image"}"#.to_owned())
            }
        })
    }

    // r[verify node.reload.live-pull+2]
    // Real time, as the gc keys' test: the module's pacing reads the system clock.
    #[tokio::test]
    async fn an_image_a_reload_removed_loses_its_fault() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("d.sock");
        // Every image is unknown to the daemon and to its registry: a not-found fault each.
        let _lines = fake_daemon(&sock, |line| {
            if line.contains("/version") {
                (200, VERSION.to_owned())
            } else {
                (404, r#"{"message":"manifest unknown"}"#.to_owned())
            }
        });
        let text = format!(
            "[node]\n[pull]\ndocker_host = \"unix://{}\"\n",
            sock.display()
        );
        let config = crate::config::Config::parse("t.toml", &text).unwrap();
        let node = NodeState::new(
            "n",
            holdfast_lifecycle::FaultBoard::new(),
            crate::metrics::Metrics::new(),
        );
        let inputs = config.pull_inputs(7);
        let images = shared_images(vec![("web".to_owned(), "r.test/app:typo".to_owned())]);
        let module = PullModule {
            workloads: images.clone(),
            docker_host: inputs.docker_host,
            config: inputs.config,
            auth: inputs.auth,
            tag_checks: inputs.tag_checks,
            tick: Duration::from_millis(50),
            gc: None,
            node: node.clone(),
        };
        let started = module.start().unwrap();
        let faulted = |image: &str| {
            node.faults
                .of_module(NAME)
                .iter()
                .any(|f| f.subject.name.contains(image))
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !faulted("app:typo") {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no fault for the missing image: {:?}",
                node.faults.list()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The reload fixes the typo: it replaces the set the running module reads.
        *images.lock().unwrap() = vec![("web".to_owned(), "r.test/app:fixed".to_owned())];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while faulted("app:typo") || !faulted("app:fixed") {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the removed image's fault stays: {:?}",
                node.faults.list()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        started
            .stopper
            .stop(holdfast_lifecycle::StopRequest {
                deadline: tokio::time::Instant::now() + Duration::from_secs(2),
                reason: holdfast_lifecycle::StopReason::Shutdown,
            })
            .await
            .unwrap();
    }

    // r[verify node.pull.gc-configured+3]
    // Real time, as the gc keys' test: a run a second against a fake daemon.
    #[tokio::test]
    async fn collection_runs_after_a_reload_added_a_workload_protect_its_image() {
        use holdfast_workload::WorkloadConfig;
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("d.sock");
        let requests = empty_daemon(&sock, dir.path());
        let node = NodeState::new(
            "n",
            holdfast_lifecycle::FaultBoard::new(),
            crate::metrics::Metrics::new(),
        );
        let desired =
            crate::modules::workload::desired(vec![WorkloadConfig::new("web", "busybox:1")]);
        let workloads = crate::modules::workload::WorkloadModule {
            workloads: desired.clone(),
            docker_host: Some(format!("unix://{}", dir.path().join("none.sock").display())),
            seed: 7,
            stop_on_exit: false,
            owner: None,
            tick: Duration::from_millis(50),
            pull_enabled: true,
            node: node.clone(),
        };
        let started = workloads.start().unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while node.workload.with(|_| ()).is_err() {
            assert!(tokio::time::Instant::now() < deadline, "never published");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The reload replaces the shared set (run.rs), then collection runs.
        desired
            .lock()
            .unwrap()
            .push(WorkloadConfig::new("db", "postgres:16"));
        let collection = tokio::spawn(super::collect_images(
            holdfast_pull::DaemonEndpoint::from_docker_host(Some(&format!(
                "unix://{}",
                sock.display()
            ))),
            shared_images(vec![("web".to_owned(), "busybox:1".to_owned())]),
            holdfast_pull::ImageGc::new(
                holdfast_pull::GcPolicy::new(90, 70, Duration::from_secs(3600)).unwrap(),
                holdfast_retry::Policy::default(),
            ),
            Duration::from_secs(1),
            node.clone(),
        ));
        // Each run resolves the configured images it protects: the added one among them.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let inspected = |image: &str| {
                requests
                    .lock()
                    .unwrap()
                    .iter()
                    .any(|l| l.contains(&format!("/images/{image}/json")))
            };
            if inspected("postgres:16") {
                assert!(inspected("busybox:1"));
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "collection never resolved the added workload's image: {:?}",
                requests.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        collection.abort();
        started
            .stopper
            .stop(holdfast_lifecycle::StopRequest {
                deadline: tokio::time::Instant::now() + Duration::from_secs(2),
                reason: holdfast_lifecycle::StopReason::Shutdown,
            })
            .await
            .unwrap();
    }

    // r[verify node.pull.gc-configured+3]
    // r[verify actuate.image.gc+4]
    // Real time, as the gc keys' test: a run a second against a fake daemon.
    #[tokio::test]
    async fn collection_no_longer_protects_an_image_a_reload_removed_live() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("d.sock");
        let requests = empty_daemon(&sock, dir.path());
        let text = format!(
            "[node]\n[pull]\ndocker_host = \"unix://{}\"\ngc_interval = \"1s\"\n",
            sock.display()
        );
        let config = crate::config::Config::parse("t.toml", &text).unwrap();
        let node = NodeState::new(
            "n",
            holdfast_lifecycle::FaultBoard::new(),
            crate::metrics::Metrics::new(),
        );
        let inputs = config.pull_inputs(7);
        let images = shared_images(vec![
            ("web".to_owned(), "busybox:1".to_owned()),
            ("db".to_owned(), "postgres:16".to_owned()),
        ]);
        let module = PullModule {
            workloads: images.clone(),
            docker_host: inputs.docker_host,
            config: inputs.config,
            auth: inputs.auth,
            tag_checks: inputs.tag_checks,
            tick: Duration::from_millis(50),
            gc: inputs.gc,
            node: node.clone(),
        };
        assert!(module.gc.is_some());
        let started = module.start().unwrap();
        let inspects = |lines: &[String], image: &str| {
            lines
                .iter()
                .any(|l| l.contains(&format!("/images/{image}/json")))
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !inspects(&requests.lock().unwrap(), "postgres:16") {
            assert!(tokio::time::Instant::now() < deadline, "never inspected");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The reload removes `db` live.
        *images.lock().unwrap() = vec![("web".to_owned(), "busybox:1".to_owned())];
        let mark = requests.lock().unwrap().len();
        // Runs begin with `/info`: the one between the second and the third after the
        // replacement began after it.
        let runs_after = |lines: &[String]| -> Vec<usize> {
            lines
                .iter()
                .enumerate()
                .skip(mark)
                .filter(|(_, l)| l.contains("/info "))
                .map(|(i, _)| i)
                .collect()
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        let window = loop {
            let lines = requests.lock().unwrap().clone();
            let runs = runs_after(&lines);
            if runs.len() >= 3 {
                break lines[runs[1]..runs[2]].to_vec();
            }
            assert!(tokio::time::Instant::now() < deadline, "collection stopped");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(inspects(&window, "busybox:1"), "{window:?}");
        assert!(!inspects(&window, "postgres:16"), "{window:?}");
        started
            .stopper
            .stop(holdfast_lifecycle::StopRequest {
                deadline: tokio::time::Instant::now() + Duration::from_secs(2),
                reason: holdfast_lifecycle::StopReason::Shutdown,
            })
            .await
            .unwrap();
    }

    // r[verify node.pull.gc-configured+3]
    #[tokio::test]
    async fn collection_protects_a_workload_a_reload_added_as_soon_as_the_set_is_replaced() {
        use holdfast_lifecycle::{StopReason, StopRequest};
        use holdfast_workload::WorkloadConfig;
        let dir = tempfile::tempdir().unwrap();
        let node = NodeState::new(
            "n",
            holdfast_lifecycle::FaultBoard::new(),
            crate::metrics::Metrics::new(),
        );
        let at_start = shared_images(vec![("web".to_owned(), "busybox:1".to_owned())]);
        // No workload module: the pull module's set.
        assert_eq!(
            super::protected(&at_start, &node),
            vec!["busybox:1".to_owned()]
        );
        let desired =
            crate::modules::workload::desired(vec![WorkloadConfig::new("web", "busybox:1")]);
        let module = crate::modules::workload::WorkloadModule {
            workloads: desired.clone(),
            docker_host: Some(format!("unix://{}", dir.path().join("none.sock").display())),
            seed: 7,
            stop_on_exit: false,
            owner: None,
            tick: Duration::from_millis(50),
            pull_enabled: true,
            node: node.clone(),
        };
        let started = module.start().unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while node.workload.with(|_| ()).is_err() {
            assert!(tokio::time::Instant::now() < deadline, "never published");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The reload replaces the shared set first (run.rs): from then on the image is kept.
        desired
            .lock()
            .unwrap()
            .push(WorkloadConfig::new("db", "postgres:16"));
        assert_eq!(
            super::protected(&at_start, &node),
            vec!["busybox:1".to_owned(), "postgres:16".to_owned()]
        );
        started
            .stopper
            .stop(StopRequest {
                deadline: tokio::time::Instant::now() + Duration::from_secs(2),
                reason: StopReason::Shutdown,
            })
            .await
            .unwrap();
    }

    // r[verify actuate.image.tag-moved]
    #[test]
    fn a_refused_tag_check_is_counted_and_a_fault_until_a_check_succeeds() {
        use holdfast_pull::PullErrorKind;
        let node = NodeState::new(
            "n",
            holdfast_lifecycle::FaultBoard::new(),
            crate::metrics::Metrics::new(),
        );
        let interval = Duration::from_secs(900);
        let refused = Err(PullError::new(
            PullErrorKind::Unauthorized,
            "registry reg.example refused",
        ));
        super::record_check(&node, "reg.example/app:1", &refused, Some(interval));
        super::record_check(&node, "reg.example/app:1", &refused, Some(interval));
        let fault = node
            .faults
            .get(&super::tag_check_subject("reg.example/app:1"))
            .expect("a fault on the tag");
        assert_eq!(fault.kind, "unauthorized");
        assert_eq!(fault.failures, 2);
        // A registry that does not answer: counted, no fault (the image runs on).
        let unreachable = Err(PullError::new(
            PullErrorKind::RegistryUnreachable,
            "timeout",
        ));
        super::record_check(&node, "other:1", &unreachable, Some(interval));
        assert!(
            node.faults
                .get(&super::tag_check_subject("other:1"))
                .is_none()
        );
        super::record_check(
            &node,
            "reg.example/app:1",
            &Ok(TagCheck::Unchanged),
            Some(interval),
        );
        assert!(
            node.faults
                .get(&super::tag_check_subject("reg.example/app:1"))
                .is_none()
        );
        let text = node.metrics.render();
        assert!(
            text.contains(r#"holdfast_pull_outcomes_total{outcome="tag_check_failed"} 3"#),
            "{text}"
        );
        assert!(
            text.contains(r#"holdfast_pull_outcomes_total{outcome="tag_unchanged"} 1"#),
            "{text}"
        );
    }

    // r[verify actuate.image.tag-moved]
    #[test]
    fn an_image_pulled_again_for_a_moved_tag_stays_present_for_the_workloads() {
        let failing = Some("3 failures, next in 20s: unreachable".to_owned());
        assert_eq!(
            super::shown("waiting", failing.clone(), true),
            (
                "present",
                Some(
                    "its tag moved; pulling it again (waiting: 3 failures, next in 20s: unreachable)"
                        .to_owned()
                )
            )
        );
        assert_eq!(super::shown("pulling", None, true).0, "present");
        // A first pull is not a refresh: the image is absent until it is done.
        assert_eq!(
            super::shown("waiting", failing.clone(), false),
            ("waiting", failing)
        );
    }

    use super::*;
    use crate::metrics::Metrics;
    use holdfast_lifecycle::{FaultBoard, StopReason, StopRequest};

    // r[verify node.module.start]
    #[tokio::test(start_paused = true)]
    async fn start_returns_at_once_without_dialing_and_the_stopper_ends_the_task() {
        let dir = tempfile::tempdir().unwrap();
        let module = PullModule {
            workloads: shared_images(vec![]),
            docker_host: Some(format!("unix://{}", dir.path().join("none.sock").display())),
            config: PullConfig::new(7),
            auth: RegistryAuth::default(),
            tag_checks: TagChecks::default(),
            tick: Duration::from_secs(5),
            gc: None,
            node: NodeState::new("n", FaultBoard::new(), Metrics::new()),
        };
        // `start` is synchronous: it cannot block on the daemon; it hands back at once.
        let started = module.start().unwrap();
        assert_eq!(started.health.get(), Health::Starting);
        let request = StopRequest {
            deadline: tokio::time::Instant::now() + Duration::from_secs(1),
            reason: StopReason::Shutdown,
        };
        started.stopper.stop(request).await.unwrap();
        assert_eq!(started.task.await.unwrap(), Ok(()));
    }

    /// Points `path:to` at `path:from`'s manifest through the registry's own API (what a CI
    /// pushing a new build under the same tag amounts to).
    pub(super) fn retag(addr: std::net::SocketAddr, path: &str, from: &str, to: &str) {
        use std::io::{Read as _, Write as _};
        const MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
        let exchange = |request: &[u8]| {
            let mut stream = std::net::TcpStream::connect(addr).unwrap();
            stream.write_all(request).unwrap();
            let mut answer = Vec::new();
            let _ = stream.read_to_end(&mut answer);
            let end = answer
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .map_or(answer.len(), |i| i + 4);
            let head = String::from_utf8_lossy(&answer[..end]).into_owned();
            (head, answer[end..].to_vec())
        };
        let (head, manifest) = exchange(
            format!("GET /v2/{path}/manifests/{from} HTTP/1.0\r\nHost: {addr}\r\nAccept: {MANIFEST}\r\n\r\n")
                .as_bytes(),
        );
        assert!(head.contains(" 200 "), "{head}");
        let mut put = format!(
            "PUT /v2/{path}/manifests/{to} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: {MANIFEST}\r\nContent-Length: {}\r\n\r\n",
            manifest.len()
        )
        .into_bytes();
        put.extend_from_slice(&manifest);
        let (head, _) = exchange(&put);
        assert!(head.contains(" 201 "), "{head}");
    }

    pub(super) async fn push(daemon: &bollard::Docker, repo: &str, tag: &str) {
        use futures_util::TryStreamExt as _;
        daemon
            .push_image(
                repo,
                Some(
                    bollard::query_parameters::PushImageOptionsBuilder::default()
                        .tag(tag)
                        .build(),
                ),
                Some(bollard::auth::DockerCredentials::default()),
            )
            .try_collect::<Vec<_>>()
            .await
            .unwrap();
    }

    fn web_container(node: &NodeState) -> Option<String> {
        let status = node.workload.with(|r| r.handle.status()).ok()?;
        match &status.first()?.state {
            holdfast_workload::WorkloadState::Running { container, .. } => Some(container.clone()),
            _ => None,
        }
    }

    // r[verify actuate.image.tag-moved]
    // r[verify workload.image.moved]
    #[tokio::test]
    async fn a_followed_tag_that_moves_is_pulled_again_and_its_workload_replaced() {
        use crate::module::Module as _;
        use bollard::query_parameters as q;
        use futures_util::TryStreamExt as _;
        let Some(docker) = holdfast_test_support::services::docker() else {
            return;
        };
        let Some(registry) = holdfast_test_support::services::registry() else {
            return;
        };
        let daemon = bollard::Docker::connect_with_host(&docker.host).unwrap();
        let (from, tag) = registry.image.rsplit_once(':').unwrap();
        daemon
            .create_image(
                Some(
                    q::CreateImageOptionsBuilder::default()
                        .from_image(from)
                        .tag(tag)
                        .build(),
                ),
                None,
                None,
            )
            .try_collect::<Vec<_>>()
            .await
            .unwrap();
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let path = format!("holdfast/follow-{nonce:x}");
        let repo = format!("{}/{path}", registry.addr);
        let image = format!("{repo}:latest");
        // v1: the seeded busybox under the new name.
        daemon
            .tag_image(
                &registry.image,
                Some(
                    q::TagImageOptionsBuilder::default()
                        .repo(&repo)
                        .tag("latest")
                        .build(),
                ),
            )
            .await
            .unwrap();
        push(&daemon, &repo, "latest").await;
        // v2: the same with a label of its own (a commit), pushed under another tag for now.
        let scratch = daemon
            .create_container(
                None::<q::CreateContainerOptions>,
                bollard::models::ContainerCreateBody {
                    image: Some(registry.image.clone()),
                    cmd: Some(vec!["true".into()]),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        daemon
            .commit_container(
                q::CommitContainerOptionsBuilder::default()
                    .container(&scratch.id)
                    .repo(&repo)
                    .tag("two")
                    .changes("LABEL holdfast.test=two")
                    .build(),
                bollard::models::ContainerConfig::default(),
            )
            .await
            .unwrap();
        let force = || {
            Some(
                q::RemoveContainerOptionsBuilder::default()
                    .force(true)
                    .build(),
            )
        };
        let _ = daemon.remove_container(&scratch.id, force()).await;
        push(&daemon, &repo, "two").await;
        let force_image = || Some(q::RemoveImageOptionsBuilder::default().force(true).build());
        for local in [format!("{repo}:two"), image.clone()] {
            let _ = daemon.remove_image(&local, force_image(), None).await;
        }

        let node = NodeState::new("n", FaultBoard::new(), Metrics::new());
        let owner = format!("follow-{}-{nonce:x}", std::process::id());
        let pull = PullModule {
            workloads: shared_images(vec![("web".into(), image.clone())]),
            docker_host: Some(docker.host.clone()),
            config: PullConfig::new(7),
            auth: RegistryAuth::default().with_docker_config("/nonexistent/config.json"),
            tag_checks: TagChecks {
                images: [(image.clone(), vec!["web".to_owned()])].into(),
                interval: Duration::from_secs(1),
            },
            tick: Duration::from_millis(200),
            gc: None,
            node: node.clone(),
        };
        let mut web = holdfast_workload::WorkloadConfig::new("web", image.clone());
        web.command = vec!["sh".into(), "-c".into(), "exec sleep 3600".into()];
        web.stop_timeout = Duration::from_secs(1);
        let workloads = crate::modules::workload::WorkloadModule {
            workloads: crate::modules::workload::desired(vec![web]),
            docker_host: Some(docker.host.clone()),
            seed: 7,
            stop_on_exit: true,
            owner: Some(owner.clone()),
            tick: Duration::from_millis(200),
            pull_enabled: true,
            node: node.clone(),
        };
        let pulling = pull.start().unwrap();
        let running = workloads.start().unwrap();
        let shown = node.clone();
        let wait_for = move |what: &'static str, done: Box<dyn Fn() -> bool>| {
            let shown = shown.clone();
            async move {
                let end = tokio::time::Instant::now() + Duration::from_secs(60);
                while !done() {
                    assert!(
                        tokio::time::Instant::now() < end,
                        "never: {what}: {:?} {:?}",
                        shown.workloads(),
                        shown.faults.list()
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        let n = node.clone();
        wait_for("web runs", Box::new(move || web_container(&n).is_some())).await;
        let first = web_container(&node).unwrap();

        retag(registry.addr, &path, "two", "latest");
        let n = node.clone();
        let first_id = first.clone();
        wait_for(
            "web runs a new container",
            Box::new(move || web_container(&n).is_some_and(|c| c != first_id)),
        )
        .await;
        let second = web_container(&node).unwrap();
        let labels = daemon
            .inspect_container(&second, None::<q::InspectContainerOptions>)
            .await
            .unwrap()
            .config
            .unwrap()
            .labels
            .unwrap_or_default();
        assert_eq!(
            labels.get("holdfast.test").map(String::as_str),
            Some("two"),
            "the new container runs the moved tag's image"
        );

        let stop = || StopRequest {
            deadline: tokio::time::Instant::now() + Duration::from_secs(10),
            reason: StopReason::Shutdown,
        };
        running.stopper.stop(stop()).await.unwrap();
        pulling.stopper.stop(stop()).await.unwrap();
        for id in [first, second] {
            let _ = daemon.remove_container(&id, force()).await;
        }
        let _ = daemon.remove_image(&image, force_image(), None).await;
    }
}

#[cfg(test)]
mod always_tests {
    use std::time::Duration;

    use bollard::query_parameters as q;
    use futures_util::TryStreamExt as _;
    use holdfast_lifecycle::{FaultBoard, StopReason, StopRequest};

    use super::*;
    use crate::metrics::Metrics;

    fn container_of(node: &NodeState, name: &str) -> Option<String> {
        let status = node.workload.with(|r| r.handle.status()).ok()?;
        match &status.iter().find(|s| s.name == name)?.state {
            holdfast_workload::WorkloadState::Running { container, .. } => Some(container.clone()),
            _ => None,
        }
    }

    async fn label_of(daemon: &bollard::Docker, container: &str) -> Option<String> {
        let inspected = daemon
            .inspect_container(container, None::<q::InspectContainerOptions>)
            .await
            .unwrap();
        inspected
            .config
            .and_then(|c| c.labels)
            .and_then(|l| l.get("holdfast.test").cloned())
    }

    async fn wait_for(node: &NodeState, what: &str, done: impl Fn() -> bool) {
        let end = tokio::time::Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(
                tokio::time::Instant::now() < end,
                "never: {what}: {:?} {:?}",
                node.workloads(),
                node.faults.list()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    // r[verify workload.image.always]
    #[tokio::test]
    async fn a_start_check_answers_its_ask_whatever_it_found_and_a_moved_tag_after_its_pull() {
        use holdfast_pull::PullErrorKind;
        const IMAGE: &str = "reg.example/app:1";
        let node = NodeState::new("n", FaultBoard::new(), Metrics::new());
        // Nothing is dialed: the fetcher's daemon is never reached in this test.
        let fetcher = Arc::new(DockerFetcher::new(
            DaemonEndpoint::from_docker_host(Some("unix:///nonexistent/docker.sock")),
            Duration::from_secs(5),
        ));
        let mut actuator = Actuator::new((*fetcher).clone(), PullConfig::new(7)).unwrap();
        let mut tags = FollowedTags::new(&TagChecks::default(), 7, &node);
        let t0 = std::time::Instant::now();
        let asked = |since| super::start_checks(&node).ask(IMAGE, since);
        let failed = |kind| Err(PullError::new(kind, "registry says no"));

        // Unreachable: counted, no fault, and the start goes on.
        assert!(!asked(t0));
        assert!(super::start_checks(&node).begin(IMAGE, t0));
        tags.answered(
            IMAGE,
            Some(t0),
            failed(PullErrorKind::RegistryUnreachable),
            &fetcher,
            &mut actuator,
            &node,
        );
        assert!(asked(t0), "a failed check does not hold the start");
        assert!(node.faults.get(&super::tag_check_subject(IMAGE)).is_none());

        // Refused: a fault on the tag that says when it is checked again; the start goes on.
        let t1 = t0 + Duration::from_secs(30);
        assert!(!asked(t1));
        assert!(super::start_checks(&node).begin(IMAGE, t1));
        tags.answered(
            IMAGE,
            Some(t1),
            failed(PullErrorKind::Unauthorized),
            &fetcher,
            &mut actuator,
            &node,
        );
        assert!(asked(t1));
        let fault = node
            .faults
            .get(&super::tag_check_subject(IMAGE))
            .expect("a fault");
        assert!(
            fault
                .message
                .ends_with("checked again before its workload's next start"),
            "{}",
            fault.message
        );

        // Moved: pulled again first; the ask waits for that pull, and a failed attempt answers it.
        let t2 = t0 + Duration::from_secs(60);
        assert!(!asked(t2));
        assert!(super::start_checks(&node).begin(IMAGE, t2));
        let moved = Ok(TagCheck::Moved {
            remote: "sha256:2".into(),
        });
        tags.answered(IMAGE, Some(t2), moved, &fetcher, &mut actuator, &node);
        assert!(fetcher.pulls_again(IMAGE), "pulled again although present");
        assert!(
            node.faults.get(&super::tag_check_subject(IMAGE)).is_none(),
            "cleared"
        );
        let pulling = ImageState::Pulling {
            progress: Default::default(),
        };
        tags.before_start(IMAGE, &pulling, t2, &fetcher, &node);
        assert!(!asked(t2), "waits for the new content");
        let waiting = ImageState::Waiting {
            until: t2 + Duration::from_secs(10),
            failures: 1,
            last_error: PullError::new(PullErrorKind::RegistryUnreachable, "timeout"),
        };
        tags.before_start(
            IMAGE,
            &waiting,
            t2 + Duration::from_secs(1),
            &fetcher,
            &node,
        );
        assert!(asked(t2), "a failed pull again does not hold the start");
        // As with "digest", the moved tag stays to be pulled again on the pull's paced schedule.
        assert!(fetcher.pulls_again(IMAGE) && tags.moved.contains(IMAGE));
        let text = node.metrics.render();
        assert!(
            text.contains(r#"holdfast_pull_outcomes_total{outcome="tag_check_failed"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"holdfast_pull_outcomes_total{outcome="tag_moved"} 1"#),
            "{text}"
        );
    }

    // r[verify workload.image.always]
    #[tokio::test]
    async fn a_start_check_lost_with_a_stopped_module_is_begun_again_by_the_next_one() {
        const IMAGE: &str = "reg.example/app:1";
        let node = NodeState::new("n", FaultBoard::new(), Metrics::new());
        // The check fails at once (no daemon): any outcome answers the ask.
        let fetcher = Arc::new(DockerFetcher::new(
            DaemonEndpoint::from_docker_host(Some("unix:///nonexistent/docker.sock")),
            Duration::from_secs(5),
        ));
        let mut actuator = Actuator::new((*fetcher).clone(), PullConfig::new(7)).unwrap();
        let t0 = std::time::Instant::now();
        let asked = |since| super::start_checks(&node).ask(IMAGE, since);
        let old = FollowedTags::new(&TagChecks::default(), 7, &node);
        assert!(!asked(t0));
        assert!(super::start_checks(&node).begin(IMAGE, t0));
        // The module stops (a `[pull]` change, a reload, the supervisor) before the answer.
        drop(old);

        let mut tags = FollowedTags::new(&TagChecks::default(), 7, &node);
        tags.before_start(IMAGE, &ImageState::Present, t0, &fetcher, &node);
        let (reference, start, result) =
            tokio::time::timeout(Duration::from_secs(30), tags.results.recv())
                .await
                .expect("the new module checks the tag")
                .expect("a result");
        assert_eq!(start, Some(t0));
        tags.answered(&reference, start, result, &fetcher, &mut actuator, &node);
        assert!(asked(t0), "the start goes on");
    }

    fn sleeper(name: &str, image: &str) -> holdfast_workload::WorkloadConfig {
        let mut w = holdfast_workload::WorkloadConfig::new(name, image);
        w.command = vec!["sh".into(), "-c".into(), "exec sleep 3600".into()];
        w.stop_timeout = Duration::from_secs(1);
        w.min_run = Duration::from_secs(1);
        w.pull_always = true;
        w
    }

    // r[verify workload.image.always]
    // i[verify node.pull.policy+2]
    #[tokio::test]
    async fn an_always_tag_is_checked_before_each_start_and_a_refusing_registry_does_not_hold_it() {
        let Some(docker) = holdfast_test_support::services::docker() else {
            return;
        };
        let Some(registry) = holdfast_test_support::services::registry() else {
            return;
        };
        let daemon = bollard::Docker::connect_with_host(&docker.host).unwrap();
        let (from, tag) = registry.image.rsplit_once(':').unwrap();
        daemon
            .create_image(
                Some(
                    q::CreateImageOptionsBuilder::default()
                        .from_image(from)
                        .tag(tag)
                        .build(),
                ),
                None,
                None,
            )
            .try_collect::<Vec<_>>()
            .await
            .unwrap();
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let path = format!("holdfast/always-{nonce:x}");
        let repo = format!("{}/{path}", registry.addr);
        let image = format!("{repo}:latest");
        let tag_as = |repo: String, tag: &'static str| {
            let daemon = daemon.clone();
            let source = registry.image.clone();
            async move {
                daemon
                    .tag_image(
                        &source,
                        Some(
                            q::TagImageOptionsBuilder::default()
                                .repo(&repo)
                                .tag(tag)
                                .build(),
                        ),
                    )
                    .await
                    .unwrap();
            }
        };
        // v1: the seeded busybox under the new name.
        tag_as(repo.clone(), "latest").await;
        super::tests::push(&daemon, &repo, "latest").await;
        // v2: the same with a label of its own, pushed under another tag for now.
        let scratch = daemon
            .create_container(
                None::<q::CreateContainerOptions>,
                bollard::models::ContainerCreateBody {
                    image: Some(registry.image.clone()),
                    cmd: Some(vec!["true".into()]),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        daemon
            .commit_container(
                q::CommitContainerOptionsBuilder::default()
                    .container(&scratch.id)
                    .repo(&repo)
                    .tag("two")
                    .changes("LABEL holdfast.test=two")
                    .build(),
                bollard::models::ContainerConfig::default(),
            )
            .await
            .unwrap();
        let force = || {
            Some(
                q::RemoveContainerOptionsBuilder::default()
                    .force(true)
                    .build(),
            )
        };
        let _ = daemon.remove_container(&scratch.id, force()).await;
        super::tests::push(&daemon, &repo, "two").await;
        let force_image = || Some(q::RemoveImageOptionsBuilder::default().force(true).build());
        let _ = daemon
            .remove_image(&format!("{repo}:two"), force_image(), None)
            .await;
        // A local image whose registry refuses every connection (nothing listens on port 1).
        let refused_repo = format!("127.0.0.1:1/holdfast/always-{nonce:x}");
        let refused = format!("{refused_repo}:latest");
        tag_as(refused_repo, "latest").await;

        let node = NodeState::new("n", FaultBoard::new(), Metrics::new());
        let owner = format!("always-{}-{nonce:x}", std::process::id());
        let pull = PullModule {
            workloads: shared_images(vec![
                ("web".into(), image.clone()),
                ("cut".into(), refused.clone()),
            ]),
            docker_host: Some(docker.host.clone()),
            config: PullConfig::new(7),
            auth: RegistryAuth::default().with_docker_config("/nonexistent/config.json"),
            tag_checks: TagChecks::default(),
            tick: Duration::from_millis(200),
            gc: None,
            node: node.clone(),
        };
        let workloads = crate::modules::workload::WorkloadModule {
            workloads: crate::modules::workload::desired(vec![
                sleeper("web", &image),
                sleeper("cut", &refused),
            ]),
            docker_host: Some(docker.host.clone()),
            seed: 7,
            stop_on_exit: true,
            owner: Some(owner.clone()),
            tick: Duration::from_millis(200),
            pull_enabled: true,
            node: node.clone(),
        };
        let pulling = pull.start().unwrap();
        let running = workloads.start().unwrap();
        let n = node.clone();
        wait_for(&node, "both run", move || {
            container_of(&n, "web").is_some() && container_of(&n, "cut").is_some()
        })
        .await;
        let first = container_of(&node, "web").unwrap();
        let cut_first = container_of(&node, "cut").unwrap();
        assert_eq!(label_of(&daemon, &first).await, None, "v1 runs");

        // The tag moves: the running container is left alone (that is "digest")...
        super::tests::retag(registry.addr, &path, "two", "latest");
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(container_of(&node, "web").as_deref(), Some(first.as_str()));
        // ... and the next start, after the container ends, runs the new content.
        for id in [&first, &cut_first] {
            daemon
                .kill_container(id, None::<q::KillContainerOptions>)
                .await
                .unwrap();
        }
        let n = node.clone();
        let (f, c) = (first.clone(), cut_first.clone());
        wait_for(&node, "both restarted", move || {
            container_of(&n, "web").is_some_and(|id| id != f)
                && container_of(&n, "cut").is_some_and(|id| id != c)
        })
        .await;
        let second = container_of(&node, "web").unwrap();
        let cut_second = container_of(&node, "cut").unwrap();
        assert_eq!(
            label_of(&daemon, &second).await.as_deref(),
            Some("two"),
            "the restart runs the moved tag's image"
        );
        // The refusing registry's workload restarted from its local image, each check counted.
        let text = node.metrics.render();
        let failed = text
            .lines()
            .find_map(|l| {
                l.strip_prefix(r#"holdfast_pull_outcomes_total{outcome="tag_check_failed"} "#)
            })
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        assert!(failed >= 2, "one failed check per start of cut: {text}");
        assert!(
            text.contains(r#"holdfast_pull_outcomes_total{outcome="tag_moved"} 1"#),
            "{text}"
        );

        let stop = || StopRequest {
            deadline: tokio::time::Instant::now() + Duration::from_secs(10),
            reason: StopReason::Shutdown,
        };
        running.stopper.stop(stop()).await.unwrap();
        pulling.stopper.stop(stop()).await.unwrap();
        for id in [first, second, cut_first, cut_second] {
            let _ = daemon.remove_container(&id, force()).await;
        }
        for local in [image, refused] {
            let _ = daemon.remove_image(&local, force_image(), None).await;
        }
    }
}
