//! Workloads against a real Docker Engine and the seeded busybox image (started by
//! `cargo xtask test`).
//!
//! Every test scopes its containers with its own owner label, so tests running side by side on
//! one daemon never see each other's containers. Pacing runs on an injected clock: real time plus
//! an offset that a test jumps forward over back-off waits, while every container runs for real.

// Test helpers outside `#[test]` functions: clippy.toml's test allowance does not reach them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::query_parameters::{
    CreateImageOptionsBuilder, ListContainersOptions, RemoveContainerOptions, TagImageOptions,
};
use futures_util::TryStreamExt;
use holdfast_lifecycle::{FaultBoard, StopReason, StopRequest};
use holdfast_test_support::services;
use holdfast_workload::supervisor::STREAM_MIN_UP;
use holdfast_workload::{
    ImagePresence, Images, ModuleConfig, RestartPolicy, Supervisor, WorkloadConfig, WorkloadState,
};

/// The daemon's images as far as the test has asked it (image inspect), for the `Images` trait.
#[derive(Clone, Default)]
struct DaemonImages {
    present: Arc<Mutex<HashSet<String>>>,
}

impl Images for DaemonImages {
    fn ensure(&mut self, reference: &str, _now: Instant) -> ImagePresence {
        if self.present.lock().unwrap().contains(reference) {
            ImagePresence::Present
        } else {
            ImagePresence::Pending {
                detail: "not in the daemon's store".into(),
            }
        }
    }
}

impl DaemonImages {
    async fn refresh(&self, docker: &Docker, reference: &str) -> bool {
        let there = docker.inspect_image(reference).await.is_ok();
        if there {
            self.present.lock().unwrap().insert(reference.to_owned());
        }
        there
    }
}

fn exit_text(code: Option<i64>) -> String {
    code.map_or_else(|| "unknown".to_owned(), |c| c.to_string())
}

/// Real time plus an offset the test jumps forward.
struct Clock {
    offset: Duration,
}

impl Clock {
    fn new() -> Self {
        Clock {
            offset: Duration::ZERO,
        }
    }
    fn now(&self) -> Instant {
        Instant::now() + self.offset
    }
    fn jump(&mut self, d: Duration) {
        self.offset += d;
    }
}

struct Env {
    docker: Docker,
    host: String,
    image: String,
    owner: String,
}

async fn env(test: &str) -> Option<Env> {
    let daemon = services::docker()?;
    let registry = services::registry()?;
    let docker = Docker::connect_with_host(&daemon.host)
        .unwrap()
        .negotiate_version()
        .await
        .unwrap();
    if docker.inspect_image(&registry.image).await.is_err() {
        let (from, tag) = registry.image.rsplit_once(':').unwrap();
        let options = CreateImageOptionsBuilder::default()
            .from_image(from)
            .tag(tag)
            .build();
        docker
            .create_image(Some(options), None, None)
            .try_collect::<Vec<_>>()
            .await
            .unwrap();
    }
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    Some(Env {
        docker,
        host: daemon.host,
        image: registry.image,
        owner: format!("{test}-{}-{nonce:x}", std::process::id()),
    })
}

impl Env {
    fn module(&self) -> ModuleConfig {
        let mut m = ModuleConfig::new(7);
        m.owner = Some(self.owner.clone());
        m
    }

    async fn images(&self) -> DaemonImages {
        let images = DaemonImages::default();
        assert!(images.refresh(&self.docker, &self.image).await);
        images
    }

    fn workload(&self, name: &str, script: &str) -> WorkloadConfig {
        let mut w = WorkloadConfig::new(name, self.image.clone());
        w.command = vec!["sh".into(), "-c".into(), script.into()];
        w.stop_timeout = Duration::from_secs(1);
        w
    }

    /// This test's containers: id → (workload, running).
    async fn containers(&self) -> HashMap<String, (String, bool)> {
        let options = ListContainersOptions {
            all: true,
            filters: Some(HashMap::from([(
                "label".to_owned(),
                vec![format!("holdfast.owner={}", self.owner)],
            )])),
            ..Default::default()
        };
        self.docker
            .list_containers(Some(options))
            .await
            .unwrap()
            .into_iter()
            .map(|c| {
                let labels = c.labels.unwrap_or_default();
                (
                    c.id.unwrap(),
                    (
                        labels.get("holdfast.workload").cloned().unwrap_or_default(),
                        c.state == Some(bollard::models::ContainerSummaryStateEnum::RUNNING),
                    ),
                )
            })
            .collect()
    }

    async fn cleanup(&self) {
        for id in self.containers().await.keys() {
            let options = RemoveContainerOptions {
                force: true,
                ..Default::default()
            };
            let _ = self.docker.remove_container(id, Some(options)).await;
        }
    }
}

/// Steps `sup` on `clock` until `done` holds for its status (real-time `limit`).
async fn drive<I: Images>(
    sup: &mut Supervisor<I>,
    clock: &Clock,
    limit: Duration,
    mut done: impl FnMut(&Supervisor<I>, Instant) -> bool,
) {
    let end = std::time::Instant::now() + limit;
    loop {
        let now = clock.now();
        sup.step(now);
        if done(sup, now) {
            return;
        }
        assert!(
            std::time::Instant::now() < end,
            "not reached within {limit:?}: {:?}",
            sup.status(now)
        );
        sup.wait_input(now, Duration::from_millis(50)).await;
    }
}

fn state_of<I: Images>(sup: &Supervisor<I>, name: &str, now: Instant) -> WorkloadState {
    sup.status(now)
        .into_iter()
        .find(|s| s.name == name)
        .unwrap()
        .state
}

fn running_id<I: Images>(sup: &Supervisor<I>, name: &str, now: Instant) -> Option<String> {
    match state_of(sup, name, now) {
        WorkloadState::Running { container, .. } => Some(container),
        _ => None,
    }
}

const LIMIT: Duration = Duration::from_secs(60);

/// A test's events against real containers, in milliseconds of real time since the test began,
/// printed as they happen (shown with `--nocapture`): the measured restart, health and order
/// timelines. A back-off wait the test jumps over on the injected clock is printed as a jump, so
/// real and scheduled time are never mixed up.
struct Timeline {
    test: &'static str,
    start: std::time::Instant,
    /// Each workload's last printed state, and the faults already printed.
    seen: HashMap<String, String>,
    faults: HashSet<(String, String)>,
}

impl Timeline {
    fn new(test: &'static str) -> Self {
        let timeline = Timeline {
            test,
            start: std::time::Instant::now(),
            seen: HashMap::new(),
            faults: HashSet::new(),
        };
        timeline.mark("test started");
        timeline
    }

    fn mark(&self, what: impl std::fmt::Display) {
        eprintln!(
            "[timeline {}] +{:>6} ms  {what}",
            self.test,
            self.start.elapsed().as_millis()
        );
    }

    /// Marks every change of a workload's state (its kind, container and failures) or health,
    /// and every new fault on `board`.
    fn watch<I: Images>(&mut self, sup: &Supervisor<I>, now: Instant, board: &FaultBoard) {
        for status in sup.status(now) {
            let state = match &status.state {
                WorkloadState::Running {
                    container, lasted, ..
                } => format!(
                    "running {}{}",
                    container.get(..12).unwrap_or(container),
                    if *lasted { ", past min_run" } else { "" }
                ),
                WorkloadState::Starting { attempt } => format!("starting (attempt {attempt})"),
                WorkloadState::Restarting {
                    failures,
                    exit_code,
                    ..
                } => format!(
                    "failed ({failures} in the streak, exit {}), restart paced",
                    exit_text(*exit_code)
                ),
                WorkloadState::CrashLooping {
                    failures,
                    exit_code,
                    ..
                } => format!(
                    "crash looping ({failures} in the streak, exit {})",
                    exit_text(*exit_code)
                ),
                WorkloadState::WaitingForDependencies { waiting_on } => {
                    format!("held back, waiting for {waiting_on:?} to be healthy")
                }
                WorkloadState::Pending => "pending (ready to start)".to_owned(),
                other => format!("{other:?}"),
            };
            // Why the last run ended: its exit, or the failing health check (how long it ran is
            // on the injected clock, which includes any jump made meanwhile).
            let state = match (&status.state, &status.last_exit) {
                (WorkloadState::Running { .. }, _) | (_, None) => state,
                (_, Some(exit)) => format!(
                    "{state}; last run (ran {} ms on the test's clock) ended: {}",
                    exit.ran.as_millis(),
                    exit.log_tail.first().map_or("", String::as_str)
                ),
            };
            let line = match status.health {
                Some(health) => format!("{state}; health {}", health.as_str()),
                None => state,
            };
            if self.seen.get(&status.name) != Some(&line) {
                self.mark(format_args!("{}: {line}", status.name));
                self.seen.insert(status.name, line);
            }
        }
        for fault in board.of_module("workload") {
            if self
                .faults
                .insert((fault.subject.name.clone(), fault.kind.clone()))
            {
                self.mark(format_args!(
                    "{}: fault {} raised: {}",
                    fault.subject.name,
                    fault.kind,
                    fault.message.lines().next().unwrap_or_default()
                ));
            }
        }
    }

    /// Marks a jump of the injected clock over a scheduled wait.
    fn jumped(&self, d: Duration) {
        self.mark(format_args!(
            "injected clock jumped {} ms over the back-off wait",
            d.as_millis()
        ));
    }
}

// r[verify workload.reconcile]
// r[verify workload.adopt]
#[tokio::test]
async fn a_sleeping_workload_is_started_once_and_adopted_by_the_next_supervisor() {
    let Some(env) = env("adopt").await else {
        return;
    };
    let clock = Clock::new();
    let web = env.workload("web", "exec sleep 3600");
    let mut first = Supervisor::new(
        &env.host,
        env.module(),
        FaultBoard::new(),
        env.images().await,
    )
    .unwrap();
    first.set_desired(vec![web.clone()]).unwrap();
    drive(&mut first, &clock, LIMIT, |s, now| {
        running_id(s, "web", now).is_some()
    })
    .await;
    let id = running_id(&first, "web", clock.now()).unwrap();
    assert_eq!(first.core().counters().starts, 1);
    // The node process goes away (the supervisor is dropped without a stop on exit).
    drop(first);
    let mut second = Supervisor::new(
        &env.host,
        env.module(),
        FaultBoard::new(),
        env.images().await,
    )
    .unwrap();
    second.set_desired(vec![web]).unwrap();
    drive(&mut second, &clock, LIMIT, |s, now| {
        running_id(s, "web", now).is_some()
    })
    .await;
    for _ in 0..20 {
        second.step(clock.now());
        second
            .wait_input(clock.now(), Duration::from_millis(50))
            .await;
    }
    assert_eq!(
        running_id(&second, "web", clock.now()),
        Some(id.clone()),
        "adopted"
    );
    assert_eq!(second.core().counters().starts, 0, "never started twice");
    let containers = env.containers().await;
    assert_eq!(containers.len(), 1, "{containers:?}");
    assert_eq!(containers[&id], ("web".to_owned(), true));
    env.cleanup().await;
}

// r[verify workload.restart.backoff+2]
// r[verify workload.crash-loop]
#[tokio::test]
async fn a_workload_that_exits_1_at_once_restarts_on_the_schedule_and_is_one_crash_loop_fault() {
    let Some(env) = env("crash").await else {
        return;
    };
    let mut clock = Clock::new();
    let board = FaultBoard::new();
    let module = env.module();
    let policy = module.restart_policy;
    let mut sup = Supervisor::new(&env.host, module, board.clone(), env.images().await).unwrap();
    sup.set_desired(vec![env.workload(
        "crash",
        "echo starting; echo 'fatal: no config file' >&2; exit 1",
    )])
    .unwrap();
    let mut timeline = Timeline::new("crash");
    let t0 = clock.now();
    let mut starts: Vec<Duration> = Vec::new();
    let mut faults_at_start = Vec::new();
    while starts.len() < 9 {
        let seen = starts.len() as u64;
        drive(&mut sup, &clock, LIMIT, |s, now| {
            timeline.watch(s, now, &board);
            s.core().counters().starts > seen
        })
        .await;
        starts.push(clock.now() - t0);
        faults_at_start.push(board.of_module("workload").len());
        // Wait (real time) for the exit, then jump the clock over the back-off.
        drive(&mut sup, &clock, LIMIT, |s, now| {
            timeline.watch(s, now, &board);
            matches!(
                state_of(s, "crash", now),
                WorkloadState::Restarting { .. } | WorkloadState::CrashLooping { .. }
            )
        })
        .await;
        if let Some(at) = sup.core().next_attempt_at("crash") {
            let wait = at.saturating_duration_since(clock.now());
            clock.jump(wait);
            timeline.jumped(wait);
        }
    }
    let nominal = |n: u32| {
        policy
            .base()
            .saturating_mul(2u32.saturating_pow(n - 1))
            .min(policy.cap())
    };
    eprintln!("CRASH LOOP SCHEDULE (attempt, started at, gap, nominal gap):");
    for (i, at) in starts.iter().enumerate() {
        let gap = i.checked_sub(1).map(|p| *at - starts[p]);
        let want = (i > 0).then(|| nominal(i as u32));
        eprintln!(
            "  attempt {:>2}: t = {:>7.1}s  gap {:>7}  nominal {:>5}",
            i + 1,
            at.as_secs_f64(),
            gap.map_or("-".to_owned(), |g| format!("{:.1}s", g.as_secs_f64())),
            want.map_or("-".to_owned(), |w| format!("{}s", w.as_secs())),
        );
    }
    for i in 1..starts.len() {
        let gap = starts[i] - starts[i - 1];
        let want = nominal(i as u32);
        // Additive jitter: in [d, 1.2 d), plus the real time the container took to exit.
        assert!(gap >= want, "gap {i}: {gap:?} < {want:?}");
        assert!(
            gap < want.mul_f64(1.2) + Duration::from_secs(5),
            "gap {i}: {gap:?} vs {want:?}"
        );
    }
    assert!(
        starts[8] - starts[7] >= policy.cap(),
        "attempts continue at the cap"
    );
    let faults = board.of_module("workload");
    assert_eq!(faults.len(), 1, "one fault: {faults:?}");
    eprintln!(
        "CRASH LOOP FAULT: {}: {}",
        faults[0].kind, faults[0].message
    );
    assert_eq!(faults[0].kind, "crash_loop");
    assert!(
        faults[0].message.contains("exit code 1"),
        "{}",
        faults[0].message
    );
    assert!(
        faults[0].message.contains("fatal: no config file"),
        "the log tail: {}",
        faults[0].message
    );
    assert_eq!(faults_at_start[..3], [0, 0, 0], "the third crash trips it");
    assert!(faults_at_start[3..].iter().all(|&n| n == 1));
    assert!(matches!(
        state_of(&sup, "crash", clock.now()),
        WorkloadState::CrashLooping {
            exit_code: Some(1),
            ..
        }
    ));
    assert!(env.containers().await.len() <= 1);
    env.cleanup().await;
}

// r[verify workload.min-run]
#[tokio::test]
async fn runs_of_two_seconds_under_a_ten_second_minimum_never_rearm_the_gate() {
    let Some(env) = env("minrun").await else {
        return;
    };
    let mut clock = Clock::new();
    let mut sup = Supervisor::new(
        &env.host,
        env.module(),
        FaultBoard::new(),
        env.images().await,
    )
    .unwrap();
    let mut w = env.workload("short", "sleep 2; exit 0");
    w.min_run = Duration::from_secs(10);
    sup.set_desired(vec![w]).unwrap();
    let mut waits = Vec::new();
    for round in 1..=4u32 {
        drive(&mut sup, &clock, LIMIT, |s, now| {
            running_id(s, "short", now).is_some()
        })
        .await;
        // It runs for real, 2 s, on the clock as real time passes.
        drive(&mut sup, &clock, LIMIT, |s, now| {
            running_id(s, "short", now).is_none()
        })
        .await;
        assert_eq!(sup.core().failures("short"), round, "a failure every time");
        let at = sup.core().next_attempt_at("short").unwrap();
        waits.push(at.saturating_duration_since(clock.now()));
        clock.jump(at.saturating_duration_since(clock.now()));
    }
    eprintln!("MIN RUN: waits after each 2 s run: {waits:?}");
    for (i, wait) in waits.iter().enumerate() {
        let nominal = Duration::from_secs(10 << i);
        assert!(
            *wait + Duration::from_secs(1) >= nominal,
            "wait {i}: {wait:?}, the gate was re-armed"
        );
    }
    env.cleanup().await;
}

// r[verify workload.image]
#[tokio::test]
async fn a_missing_image_is_waited_for_and_started_once_it_is_present() {
    let Some(env) = env("image").await else {
        return;
    };
    let clock = Clock::new();
    let images = env.images().await;
    let late = format!(
        "{}:late-{}",
        env.image.rsplit_once(':').unwrap().0,
        std::process::id()
    );
    let mut sup =
        Supervisor::new(&env.host, env.module(), FaultBoard::new(), images.clone()).unwrap();
    let mut w = env.workload("late", "exec sleep 3600");
    w.image = late.clone();
    sup.set_desired(vec![w]).unwrap();
    let end = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < end {
        assert!(!images.refresh(&env.docker, &late).await);
        sup.step(clock.now());
        sup.wait_input(clock.now(), Duration::from_millis(100))
            .await;
    }
    assert!(matches!(
        state_of(&sup, "late", clock.now()),
        WorkloadState::WaitingForImage { .. }
    ));
    assert_eq!(sup.core().failures("late"), 0);
    assert!(env.containers().await.is_empty());
    // The image arrives (as a pull would leave it).
    let (repo, tag) = late.rsplit_once(':').unwrap();
    env.docker
        .tag_image(
            &env.image,
            Some(TagImageOptions {
                repo: Some(repo.to_owned()),
                tag: Some(tag.to_owned()),
            }),
        )
        .await
        .unwrap();
    assert!(images.refresh(&env.docker, &late).await);
    drive(&mut sup, &clock, LIMIT, |s, now| {
        running_id(s, "late", now).is_some()
    })
    .await;
    let counters = sup.core().counters();
    assert_eq!((counters.starts, counters.restarts), (1, 0));
    env.cleanup().await;
    let _ = env
        .docker
        .remove_image(
            &late,
            None::<bollard::query_parameters::RemoveImageOptions>,
            None,
        )
        .await;
}

/// A Unix socket in front of the daemon's that can cut every connection and refuse new ones.
struct CutProxy {
    path: PathBuf,
    state: Arc<Mutex<ProxyState>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct ProxyState {
    down: bool,
    relays: Vec<tokio::task::AbortHandle>,
    accepted: u32,
}

impl CutProxy {
    async fn start(dir: &Path, daemon: &Path) -> CutProxy {
        let path = dir.join("docker.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let state = Arc::new(Mutex::new(ProxyState::default()));
        let shared = Arc::clone(&state);
        let daemon = daemon.to_owned();
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let mut st = shared.lock().unwrap();
                st.accepted += 1;
                if st.down {
                    drop(client);
                    continue;
                }
                let daemon = daemon.clone();
                let relay = tokio::spawn(async move {
                    if let Ok(mut upstream) = tokio::net::UnixStream::connect(&daemon).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    }
                });
                st.relays.push(relay.abort_handle());
            }
        });
        CutProxy { path, state, task }
    }
    fn host(&self) -> String {
        format!("unix://{}", self.path.display())
    }
    fn cut(&self, down: bool) {
        let mut st = self.state.lock().unwrap();
        st.down = down;
        for relay in st.relays.drain(..) {
            relay.abort();
        }
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// r[verify workload.events]
// r[verify workload.daemon]
#[tokio::test]
async fn a_cut_event_stream_is_reconnected_and_resynced_and_nothing_starts_twice() {
    let Some(env) = env("cut").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let daemon = services::docker().unwrap().socket;
    let proxy = CutProxy::start(dir.path(), &daemon).await;
    let mut clock = Clock::new();
    let board = FaultBoard::new();
    let mut sup = Supervisor::new(
        proxy.host(),
        env.module(),
        board.clone(),
        env.images().await,
    )
    .unwrap();
    let mut once = env.workload("once", "sleep 3; exit 0");
    once.restart = RestartPolicy::Never;
    sup.set_desired(vec![env.workload("web", "exec sleep 3600"), once])
        .unwrap();
    drive(&mut sup, &clock, LIMIT, |s, now| {
        running_id(s, "web", now).is_some() && running_id(s, "once", now).is_some()
    })
    .await;
    let web = running_id(&sup, "web", clock.now()).unwrap();
    // The stream has stayed up: its connect counted as a success.
    clock.jump(STREAM_MIN_UP);
    sup.step(clock.now());
    assert_eq!(sup.stream_connects(), 1);
    // Cut every connection and refuse new ones while "once" exits: its die event is lost.
    proxy.cut(true);
    drive(&mut sup, &clock, LIMIT, |s, _| !s.stream_up()).await;
    let refused_from = proxy.state.lock().unwrap().accepted;
    let end = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < end {
        sup.step(clock.now());
        sup.wait_input(clock.now(), Duration::from_millis(100))
            .await;
    }
    assert!(
        matches!(
            state_of(&sup, "web", clock.now()),
            WorkloadState::Running { .. }
        ),
        "what the core knows stays"
    );
    let attempts_while_down = proxy.state.lock().unwrap().accepted - refused_from;
    eprintln!("CUT: {attempts_while_down} stream reconnect attempts in 5 s while refused");
    assert!(
        (1..=4).contains(&attempts_while_down),
        "paced, not a tight loop: {attempts_while_down}"
    );
    // A longer outage (the clock jumps over the reconnect waits): one daemon fault.
    for _ in 0..6 {
        let at = sup.stream_next_attempt_at().expect("backing off");
        clock.jump(at.saturating_duration_since(clock.now()));
        sup.step(clock.now());
        assert!(sup.stream_active(), "a reconnect once the wait has passed");
        let end = std::time::Instant::now() + LIMIT;
        while sup.stream_active() && std::time::Instant::now() < end {
            sup.wait_input(clock.now(), Duration::from_millis(100))
                .await;
        }
    }
    let faults = board.of_module("workload");
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert_eq!(faults[0].subject.name, "docker daemon");
    proxy.cut(false);
    if let Some(at) = sup.stream_next_attempt_at() {
        clock.jump(at.saturating_duration_since(clock.now()));
    }
    drive(&mut sup, &clock, LIMIT, |s, now| {
        s.stream_up()
            && matches!(
                state_of(s, "once", now),
                WorkloadState::StoppedByPolicy { .. }
            )
    })
    .await;
    assert_eq!(
        state_of(&sup, "once", clock.now()),
        WorkloadState::StoppedByPolicy { exit_code: Some(0) },
        "the missed exit was found by the list"
    );
    assert_eq!(running_id(&sup, "web", clock.now()), Some(web.clone()));
    assert_eq!(sup.core().counters().starts, 2, "nothing started twice");
    clock.jump(STREAM_MIN_UP);
    sup.step(clock.now());
    assert!(
        board.is_empty(),
        "cleared once the stream stayed up: {:?}",
        board.list()
    );
    let containers = env.containers().await;
    assert_eq!(containers.len(), 2, "{containers:?}");
    assert_eq!(containers[&web], ("web".to_owned(), true));
    env.cleanup().await;
}

// r[verify workload.replace+2]
// r[verify workload.remove]
#[tokio::test]
async fn a_config_change_replaces_the_container_and_a_removed_workload_is_removed() {
    let Some(env) = env("replace").await else {
        return;
    };
    let clock = Clock::new();
    let mut sup = Supervisor::new(
        &env.host,
        env.module(),
        FaultBoard::new(),
        env.images().await,
    )
    .unwrap();
    let web = env.workload("web", "exec sleep 3600");
    sup.set_desired(vec![web.clone()]).unwrap();
    drive(&mut sup, &clock, LIMIT, |s, now| {
        running_id(s, "web", now).is_some()
    })
    .await;
    let first = running_id(&sup, "web", clock.now()).unwrap();
    let mut changed = web.clone();
    changed.env.insert("MODE".into(), "2".into());
    sup.set_desired(vec![changed]).unwrap();
    drive(&mut sup, &clock, LIMIT, |s, now| {
        running_id(s, "web", now).is_some_and(|id| id != first) && s.running_actions() == 0
    })
    .await;
    let second = running_id(&sup, "web", clock.now()).unwrap();
    let containers = env.containers().await;
    assert_eq!(
        containers.keys().collect::<Vec<_>>(),
        vec![&second],
        "old one removed"
    );
    let env_of = env
        .docker
        .inspect_container(&second, None)
        .await
        .unwrap()
        .config
        .unwrap()
        .env
        .unwrap();
    assert!(env_of.contains(&"MODE=2".to_owned()), "{env_of:?}");
    sup.set_desired(vec![]).unwrap();
    sup.settle(clock.now()).await;
    assert!(
        env.containers().await.is_empty(),
        "removed with its workload"
    );
}

// r[verify workload.stop]
#[tokio::test]
async fn stopping_holdfast_leaves_containers_running_unless_told_to_stop_them() {
    let Some(env) = env("stop").await else {
        return;
    };
    let web = env.workload("web", "exec sleep 3600");
    let request = |secs| StopRequest {
        deadline: tokio::time::Instant::now() + Duration::from_secs(secs),
        reason: StopReason::Restart,
    };
    let wait_running = |handle: &holdfast_workload::supervisor::WorkloadsHandle| {
        let handle = handle.clone();
        async move {
            for _ in 0..600 {
                if matches!(
                    handle.status().first().map(|s| &s.state),
                    Some(WorkloadState::Running { .. })
                ) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            panic!("not running: {:?}", handle.status());
        }
    };
    let mut sup = Supervisor::new(
        &env.host,
        env.module(),
        FaultBoard::new(),
        env.images().await,
    )
    .unwrap();
    sup.set_desired(vec![web.clone()]).unwrap();
    let (handle, stopper) = sup.start(Duration::from_millis(100));
    wait_running(&handle).await;
    stopper.stop(request(5)).await.unwrap();
    let after_default = env.containers().await;
    assert_eq!(after_default.len(), 1);
    assert!(
        after_default.values().all(|(_, running)| *running),
        "left running"
    );
    // With stop_on_exit: adopted, then stopped inside the deadline.
    let mut module = env.module();
    module.stop_on_exit = true;
    let mut sup =
        Supervisor::new(&env.host, module, FaultBoard::new(), env.images().await).unwrap();
    sup.set_desired(vec![web]).unwrap();
    let (handle, stopper) = sup.start(Duration::from_millis(100));
    wait_running(&handle).await;
    let began = std::time::Instant::now();
    stopper.stop(request(5)).await.unwrap();
    let took = began.elapsed();
    eprintln!("STOP ON EXIT: stopped in {took:?} (stop timeout 1 s, deadline 5 s)");
    assert!(took < Duration::from_secs(5));
    let after = env.containers().await;
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        after_default.keys().collect::<Vec<_>>()
    );
    assert!(
        after.values().all(|(_, running)| !*running),
        "stopped: {after:?}"
    );
    env.cleanup().await;
}

/// A port nothing listens on now (the kernel's pick, released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` over HTTP/1.0 from `127.0.0.1:port`: the response, or why not.
async fn http_get(port: u16, path: &str) -> std::io::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .await?;
    let mut out = String::new();
    stream.read_to_string(&mut out).await?;
    Ok(out)
}

// r[verify workload.shape+2]
// r[verify workload.shape.ports]
// r[verify workload.shape.volumes]
// r[verify workload.shape.log]
// r[verify workload.name]
#[tokio::test]
async fn a_workload_publishing_a_port_serves_a_file_from_its_bind_mount() {
    let Some(env) = env("shape").await else {
        return;
    };
    // dockerd runs without a default bridge: the workload joins a network of the test's own.
    let network = format!("hf-{}", env.owner);
    env.docker
        .create_network(bollard::models::NetworkCreateRequest {
            name: network.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let www = tempfile::tempdir().unwrap();
    std::fs::write(www.path().join("index.html"), "served by holdfast\n").unwrap();
    let volume = format!("hf-{}-data", env.owner);
    let port = free_port();
    let mut web = WorkloadConfig::new("web", env.image.clone());
    web.command = ["/bin/busybox", "httpd", "-f", "-p", "80", "-h", "/www"]
        .map(String::from)
        .to_vec();
    web.stop_timeout = Duration::from_secs(1);
    web.ports = vec![format!("127.0.0.1:{port}:80").parse().unwrap()];
    web.volumes = vec![
        format!("{}:/www:ro", www.path().display()).parse().unwrap(),
        format!("{volume}:/data").parse().unwrap(),
    ];
    web.network = Some(network.clone());
    web.memory = Some("64m".parse().unwrap());
    web.pids_limit = Some(64);
    web.labels.insert("team".into(), "edge".into());
    web.validate().unwrap();
    let clock = Clock::new();
    let mut sup = Supervisor::new(
        &env.host,
        env.module(),
        FaultBoard::new(),
        env.images().await,
    )
    .unwrap();
    sup.set_desired(vec![web]).unwrap();
    drive(&mut sup, &clock, LIMIT, |s, now| {
        running_id(s, "web", now).is_some()
    })
    .await;
    let id = running_id(&sup, "web", clock.now()).unwrap();
    // httpd binds a moment after the container starts.
    let mut answer = Err(std::io::Error::other("never asked"));
    for _ in 0..100 {
        answer = http_get(port, "/index.html").await;
        if answer
            .as_ref()
            .is_ok_and(|a| a.contains("served by holdfast"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let answer = answer.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(answer.ends_with("served by holdfast\n"), "{answer}");

    let inspect = env.docker.inspect_container(&id, None).await.unwrap();
    assert_eq!(
        inspect.name.as_deref(),
        Some(&*format!("/holdfast-{}-web", env.owner))
    );
    let host = inspect.host_config.unwrap();
    let log = host.log_config.unwrap();
    assert_eq!(log.typ.as_deref(), Some("json-file"));
    let options = log.config.unwrap();
    assert_eq!(options.get("max-size").map(String::as_str), Some("10m"));
    assert_eq!(options.get("max-file").map(String::as_str), Some("3"));
    assert_eq!(host.memory, Some(64 << 20));
    assert_eq!(host.pids_limit, Some(64));
    let labels = inspect.config.unwrap().labels.unwrap();
    assert_eq!(labels.get("team").map(String::as_str), Some("edge"));
    // The named volume was created for it.
    assert!(env.docker.inspect_volume(&volume).await.is_ok());

    sup.set_desired(vec![]).unwrap();
    drive(&mut sup, &clock, LIMIT, |s, _| {
        s.status(clock.now()).is_empty()
    })
    .await;
    sup.settle(clock.now()).await;
    env.cleanup().await;
    let _ = env.docker.remove_network(&network).await;
    let _ = env
        .docker
        .remove_volume(
            &volume,
            None::<bollard::query_parameters::RemoveVolumeOptions>,
        )
        .await;
}

// r[verify workload.health+2]
// r[verify workload.health.gate]
#[tokio::test]
async fn a_failing_health_check_restarts_the_container_with_back_off_as_one_crash_loop() {
    let Some(env) = env("health").await else {
        return;
    };
    let mut clock = Clock::new();
    let board = FaultBoard::new();
    let module = env.module();
    let policy = module.restart_policy;
    let mut sup = Supervisor::new(&env.host, module, board.clone(), env.images().await).unwrap();
    let mut timeline = Timeline::new("health");
    // Healthy for its first seconds, then its check fails: replaced once it is unhealthy.
    let mut flaky = env.workload("flaky", ": > /ok; sleep 3; rm /ok; exec sleep 3600");
    flaky.min_run = Duration::from_secs(1);
    flaky.health = Some(holdfast_workload::HealthCheck {
        shell: Some("test -f /ok".into()),
        interval: Duration::from_millis(500),
        timeout: Duration::from_secs(1),
        retries: 2,
        ..Default::default()
    });
    // Never healthy: each start fails the streak.
    let mut sick = env.workload("sick", "exec sleep 3600");
    sick.health = Some(holdfast_workload::HealthCheck {
        shell: Some("exit 1".into()),
        interval: Duration::from_millis(500),
        timeout: Duration::from_secs(1),
        retries: 2,
        ..Default::default()
    });
    sup.set_desired(vec![flaky.clone()]).unwrap();
    let status = |s: &Supervisor<DaemonImages>, name: &str, now| {
        s.status(now).into_iter().find(|w| w.name == name).unwrap()
    };
    drive(&mut sup, &clock, LIMIT, |s, now| {
        timeline.watch(s, now, &board);
        status(s, "flaky", now).health == Some(holdfast_workload::HealthStatus::Healthy)
    })
    .await;
    let first = running_id(&sup, "flaky", clock.now()).unwrap();
    drive(&mut sup, &clock, LIMIT, |s, now| {
        timeline.watch(s, now, &board);
        matches!(
            state_of(s, "flaky", now),
            WorkloadState::Running { lasted: true, .. }
        )
    })
    .await;
    // Its check starts failing: the container is replaced by a new one.
    drive(&mut sup, &clock, LIMIT, |s, now| {
        timeline.watch(s, now, &board);
        running_id(s, "flaky", now).is_some_and(|id| id != first)
    })
    .await;
    timeline.mark("flaky: replaced after its health check failed");
    assert_eq!(
        sup.core().failures("flaky"),
        0,
        "a run that lasted, then ended"
    );

    sup.set_desired(vec![flaky, sick]).unwrap();
    let t0 = clock.now();
    let mut starts = Vec::new();
    for round in 1..=3u32 {
        drive(&mut sup, &clock, LIMIT, |s, now| {
            timeline.watch(s, now, &board);
            s.core().failures("sick") == round
        })
        .await;
        starts.push(clock.now() - t0);
        if let Some(at) = sup.core().next_attempt_at("sick") {
            let wait = at.saturating_duration_since(clock.now());
            clock.jump(wait);
            timeline.jumped(wait);
        }
    }
    timeline.watch(&sup, clock.now(), &board);
    // The back-off between the failed starts grows on the gate's schedule.
    for i in 1..starts.len() {
        let want = policy.base().saturating_mul(1 << (i - 1));
        assert!(starts[i] - starts[i - 1] >= want, "{starts:?}");
    }
    let faults = board.of_module("workload");
    let sick_fault = faults.iter().find(|f| f.subject.name == "sick");
    assert!(
        sick_fault
            .is_some_and(|f| f.kind == "crash_loop" && f.message.contains("health check failing")),
        "{faults:?}"
    );
    env.cleanup().await;
}

// r[verify workload.depends-on]
#[tokio::test]
async fn a_dependency_not_yet_healthy_holds_its_dependent_back() {
    let Some(env) = env("depends").await else {
        return;
    };
    let clock = Clock::new();
    let board = FaultBoard::new();
    let mut sup =
        Supervisor::new(&env.host, env.module(), board.clone(), env.images().await).unwrap();
    let mut timeline = Timeline::new("depends");
    // Healthy only after 3 s.
    let mut db = env.workload("db", "sleep 3; : > /ready; exec sleep 3600");
    db.min_run = Duration::from_secs(1);
    db.health = Some(holdfast_workload::HealthCheck {
        shell: Some("test -f /ready".into()),
        interval: Duration::from_millis(500),
        timeout: Duration::from_secs(1),
        retries: 30,
        ..Default::default()
    });
    let mut web = env.workload("web", "exec sleep 3600");
    web.depends_on = vec!["db".into()];
    sup.set_desired(vec![web, db]).unwrap();
    drive(&mut sup, &clock, LIMIT, |s, now| {
        timeline.watch(s, now, &board);
        running_id(s, "db", now).is_some()
    })
    .await;
    // db runs but is not healthy: web waits, with nothing spent.
    let waiting = state_of(&sup, "web", clock.now());
    assert_eq!(
        waiting,
        WorkloadState::WaitingForDependencies {
            waiting_on: vec!["db".into()]
        }
    );
    let db_started = std::time::Instant::now();
    drive(&mut sup, &clock, LIMIT, |s, now| {
        timeline.watch(s, now, &board);
        running_id(s, "web", now).is_some()
    })
    .await;
    timeline.mark(format_args!(
        "web: started {} ms after db was running",
        db_started.elapsed().as_millis()
    ));
    assert!(
        db_started.elapsed() >= Duration::from_secs(2),
        "web started {:?} after db, before db could be healthy",
        db_started.elapsed()
    );
    let db_health = sup
        .status(clock.now())
        .into_iter()
        .find(|w| w.name == "db")
        .unwrap()
        .health;
    assert_eq!(db_health, Some(holdfast_workload::HealthStatus::Healthy));
    assert_eq!(sup.core().counters().start_failures, 0);
    env.cleanup().await;
}

// r[verify workload.health.probe]
// r[verify workload.health.gate]
// r[verify workload.depends-on]
#[tokio::test]
async fn an_http_probe_from_the_node_passes_then_fails_and_the_container_is_restarted() {
    let Some(env) = env("http-probe").await else {
        return;
    };
    let clock = Clock::new();
    let board = FaultBoard::new();
    let mut sup =
        Supervisor::new(&env.host, env.module(), board.clone(), env.images().await).unwrap();
    let mut timeline = Timeline::new("http-probe");
    // busybox httpd answers /healthz for 4 s, then the file is removed: 404 from then on.
    let mut web = env.workload(
        "web",
        "mkdir -p /www; echo ok > /www/healthz; (sleep 4; rm /www/healthz) & \
         exec httpd -f -p 8080 -h /www",
    );
    web.min_run = Duration::from_secs(1);
    // On the node's network: the node probes the container's address there.
    web.network = Some(holdfast_workload::NODE_NETWORK.into());
    web.health = Some(holdfast_workload::HealthCheck {
        http: Some(holdfast_workload::HttpProbe {
            port: 8080,
            path: "/healthz".into(),
        }),
        interval: Duration::from_millis(500),
        timeout: Duration::from_secs(1),
        retries: 2,
        ..Default::default()
    });
    // Held back until web's probe passes.
    let mut client = env.workload("client", "exec sleep 3600");
    client.depends_on = vec!["web".into()];
    sup.set_desired(vec![web, client]).unwrap();
    let health = |s: &Supervisor<DaemonImages>, name: &str, now| {
        s.status(now)
            .into_iter()
            .find(|w| w.name == name)
            .unwrap()
            .health
    };
    drive(&mut sup, &clock, LIMIT, |s, now| {
        timeline.watch(s, now, &board);
        running_id(s, "web", now).is_some()
    })
    .await;
    assert_eq!(
        health(&sup, "web", clock.now()),
        Some(holdfast_workload::HealthStatus::Starting),
        "no verdict before the first probe"
    );
    assert!(
        running_id(&sup, "client", clock.now()).is_none(),
        "client started before web was healthy"
    );
    assert_eq!(sup.probing(), 1, "the node probes web's container");
    drive(&mut sup, &clock, LIMIT, |s, now| {
        timeline.watch(s, now, &board);
        health(s, "web", now) == Some(holdfast_workload::HealthStatus::Healthy)
    })
    .await;
    let first = running_id(&sup, "web", clock.now()).unwrap();
    drive(&mut sup, &clock, LIMIT, |s, now| {
        timeline.watch(s, now, &board);
        running_id(s, "client", now).is_some()
            && matches!(
                state_of(s, "web", now),
                WorkloadState::Running { lasted: true, .. }
            )
    })
    .await;
    // /healthz is gone: two 404s in a row, the container is replaced through the gate.
    let removed_at = std::time::Instant::now();
    drive(&mut sup, &clock, LIMIT, |s, now| {
        timeline.watch(s, now, &board);
        running_id(s, "web", now).is_some_and(|id| id != first)
    })
    .await;
    timeline.mark(format_args!(
        "web: replaced {} ms after the run had lasted (its file goes at 4 s)",
        removed_at.elapsed().as_millis()
    ));
    let last = sup
        .status(clock.now())
        .into_iter()
        .find(|w| w.name == "web")
        .unwrap()
        .last_exit
        .unwrap();
    assert_eq!(
        last.log_tail.first().map(String::as_str),
        Some("health check failing")
    );
    assert!(
        last.log_tail
            .iter()
            .any(|l| l.contains("/healthz") && l.contains("404")),
        "the failed probe's outcome is kept: {:?}",
        last.log_tail
    );
    assert_eq!(
        sup.core().failures("web"),
        0,
        "a run that lasted, then ended"
    );
    assert_eq!(sup.probing(), 1, "the old container is no longer probed");
    env.cleanup().await;
    let _ = env
        .docker
        .remove_network(&env.module().node_network_name())
        .await;
}

// r[verify workload.health.probe]
// r[verify workload.adopt]
// r[verify workload.depends-on]
#[tokio::test]
async fn an_adopted_container_is_probed_by_the_next_node_and_a_removed_one_no_longer() {
    let Some(env) = env("adopt-probe").await else {
        return;
    };
    let clock = Clock::new();
    let mut web = env.workload(
        "web",
        "mkdir -p /www; echo ok > /www/healthz; exec httpd -f -p 8080 -h /www",
    );
    web.min_run = Duration::from_secs(1);
    web.network = Some(holdfast_workload::NODE_NETWORK.into());
    web.health = Some(holdfast_workload::HealthCheck {
        http: Some(holdfast_workload::HttpProbe {
            port: 8080,
            path: "/healthz".into(),
        }),
        interval: Duration::from_millis(500),
        timeout: Duration::from_secs(1),
        retries: 2,
        ..Default::default()
    });
    let mut client = env.workload("client", "exec sleep 3600");
    client.depends_on = vec!["web".into()];
    let health = |s: &Supervisor<DaemonImages>, name: &str, now| {
        s.status(now)
            .into_iter()
            .find(|w| w.name == name)
            .unwrap()
            .health
    };
    let mut first = Supervisor::new(
        &env.host,
        env.module(),
        FaultBoard::new(),
        env.images().await,
    )
    .unwrap();
    first.set_desired(vec![web.clone()]).unwrap();
    drive(&mut first, &clock, LIMIT, |s, now| {
        health(s, "web", now) == Some(holdfast_workload::HealthStatus::Healthy)
    })
    .await;
    let id = running_id(&first, "web", clock.now()).unwrap();
    // The node goes away; its probe tasks with it.
    drop(first);
    let board = FaultBoard::new();
    let mut second =
        Supervisor::new(&env.host, env.module(), board.clone(), env.images().await).unwrap();
    let mut timeline = Timeline::new("adopt-probe");
    second.set_desired(vec![web, client]).unwrap();
    drive(&mut second, &clock, LIMIT, |s, now| {
        timeline.watch(s, now, &board);
        running_id(s, "web", now).is_some()
    })
    .await;
    assert_eq!(running_id(&second, "web", clock.now()), Some(id), "adopted");
    assert_eq!(second.probing(), 1, "the adopted container is probed");
    assert_eq!(
        health(&second, "web", clock.now()),
        Some(holdfast_workload::HealthStatus::Starting),
        "no verdict before the new node's first probe"
    );
    assert!(running_id(&second, "client", clock.now()).is_none());
    drive(&mut second, &clock, LIMIT, |s, now| {
        timeline.watch(s, now, &board);
        running_id(s, "client", now).is_some()
    })
    .await;
    assert_eq!(
        health(&second, "web", clock.now()),
        Some(holdfast_workload::HealthStatus::Healthy),
        "client held until web's probe passed"
    );
    // Removed: no longer probed.
    second.set_desired(vec![]).unwrap();
    drive(&mut second, &clock, LIMIT, |s, now| {
        timeline.watch(s, now, &board);
        s.probing() == 0 && s.status(now).is_empty()
    })
    .await;
    env.cleanup().await;
    let _ = env
        .docker
        .remove_network(&env.module().node_network_name())
        .await;
}

// r[verify workload.health.probe]
// r[verify workload.health.gate]
// r[verify workload.crash-loop]
#[tokio::test]
async fn a_tcp_probe_of_a_port_nothing_listens_on_never_passes_and_is_one_crash_loop_fault() {
    let Some(env) = env("tcp-probe").await else {
        return;
    };
    let mut clock = Clock::new();
    let board = FaultBoard::new();
    let mut sup =
        Supervisor::new(&env.host, env.module(), board.clone(), env.images().await).unwrap();
    let mut timeline = Timeline::new("tcp-probe");
    let mut db = env.workload("db", "exec sleep 3600");
    db.network = Some(holdfast_workload::NODE_NETWORK.into());
    db.health = Some(holdfast_workload::HealthCheck {
        tcp: Some(holdfast_workload::TcpProbe { port: 5432 }),
        interval: Duration::from_millis(500),
        timeout: Duration::from_secs(1),
        retries: 2,
        ..Default::default()
    });
    sup.set_desired(vec![db]).unwrap();
    for round in 1..=4u32 {
        drive(&mut sup, &clock, LIMIT, |s, now| {
            timeline.watch(s, now, &board);
            s.core().failures("db") == round
        })
        .await;
        if let Some(at) = sup.core().next_attempt_at("db") {
            let wait = at.saturating_duration_since(clock.now());
            clock.jump(wait);
            timeline.jumped(wait);
        }
    }
    timeline.watch(&sup, clock.now(), &board);
    let faults = board.of_module("workload");
    assert_eq!(faults.len(), 1, "one fault for the whole loop: {faults:?}");
    assert_eq!(faults[0].subject.name, "db");
    assert_eq!(faults[0].kind, "crash_loop");
    assert!(
        faults[0].message.contains("health check failing") && faults[0].message.contains(":5432"),
        "{}",
        faults[0].message
    );
    assert_eq!(sup.core().counters().crash_loops, 1);
    env.cleanup().await;
    let _ = env
        .docker
        .remove_network(&env.module().node_network_name())
        .await;
}

// r[verify workload.image.moved]
#[tokio::test]
async fn a_moved_image_replaces_the_running_container_and_the_next_supervisor_adopts_it() {
    let Some(env) = env("moved").await else {
        return;
    };
    let clock = Clock::new();
    let mut sup = Supervisor::new(
        &env.host,
        env.module(),
        FaultBoard::new(),
        env.images().await,
    )
    .unwrap();
    let web = env.workload("web", "exec sleep 3600");
    sup.set_desired(vec![web.clone()]).unwrap();
    drive(&mut sup, &clock, LIMIT, |s, now| {
        running_id(s, "web", now).is_some()
    })
    .await;
    let first = running_id(&sup, "web", clock.now()).unwrap();
    sup.image_moved("some/other:1", &["web".to_owned()]);
    sup.image_moved(&env.image, &["web".to_owned()]);
    drive(&mut sup, &clock, LIMIT, |s, now| {
        running_id(s, "web", now).is_some_and(|id| id != first) && s.running_actions() == 0
    })
    .await;
    let second = running_id(&sup, "web", clock.now()).unwrap();
    assert_eq!(
        env.containers().await.keys().collect::<Vec<_>>(),
        vec![&second],
        "the old container is removed"
    );
    // Same spec: the next supervisor (a node restart) adopts the new container.
    drop(sup);
    let mut next = Supervisor::new(
        &env.host,
        env.module(),
        FaultBoard::new(),
        env.images().await,
    )
    .unwrap();
    next.set_desired(vec![web]).unwrap();
    drive(&mut next, &clock, LIMIT, |s, now| {
        running_id(s, "web", now).is_some()
    })
    .await;
    assert_eq!(running_id(&next, "web", clock.now()), Some(second));
    env.cleanup().await;
}

// r[verify workload.network+3]
#[tokio::test]
async fn two_workloads_on_the_nodes_network_reach_each_other_by_name() {
    let Some(env) = env("network").await else {
        return;
    };
    // The node's network as configured ("holdfast"): with an owner, the daemon's network is the
    // owner's own, so runs sharing the daemon do not meet.
    let network = format!("holdfast-{}", env.owner);
    let module = env.module();
    assert_eq!(module.node_network_name(), network);
    let mut web = env.workload(
        "web",
        "mkdir -p /tmp/www && echo hello-by-name > /tmp/www/index.html && \
         exec /bin/busybox httpd -f -p 80 -h /tmp/www",
    );
    web.network = Some(holdfast_workload::NODE_NETWORK.into());
    let mut client = env.workload(
        "client",
        "until wget -q -O - http://web/index.html; do sleep 0.2; done; exec sleep 3600",
    );
    client.network = Some(holdfast_workload::NODE_NETWORK.into());
    let clock = Clock::new();
    let mut sup =
        Supervisor::new(&env.host, module, FaultBoard::new(), env.images().await).unwrap();
    sup.set_desired(vec![web, client]).unwrap();
    drive(&mut sup, &clock, LIMIT, |s, now| {
        running_id(s, "web", now).is_some() && running_id(s, "client", now).is_some()
    })
    .await;
    // Created by the node, labelled as its own.
    let created = env
        .docker
        .inspect_network(
            &network,
            None::<bollard::query_parameters::InspectNetworkOptions>,
        )
        .await
        .unwrap();
    assert_eq!(
        created
            .labels
            .unwrap_or_default()
            .get("holdfast.network")
            .map(String::as_str),
        Some("node")
    );
    // The client fetched the page from "web", its workload name.
    let id = running_id(&sup, "client", clock.now()).unwrap();
    let mut output = String::new();
    for _ in 0..150 {
        let options = bollard::query_parameters::LogsOptionsBuilder::default()
            .stdout(true)
            .stderr(true)
            .build();
        output = env
            .docker
            .logs(&id, Some(options))
            .try_collect::<Vec<_>>()
            .await
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect();
        if output.contains("hello-by-name") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(output.contains("hello-by-name"), "{output}");

    sup.set_desired(vec![]).unwrap();
    drive(&mut sup, &clock, LIMIT, |s, _| {
        s.status(clock.now()).is_empty()
    })
    .await;
    sup.settle(clock.now()).await;
    env.cleanup().await;
    let _ = env.docker.remove_network(&network).await;
}

/// The networks named exactly `name`: their ids.
async fn networks_named(docker: &Docker, name: &str) -> Vec<String> {
    let options = bollard::query_parameters::ListNetworksOptions {
        filters: Some(HashMap::from([("name".to_owned(), vec![name.to_owned()])])),
    };
    docker
        .list_networks(Some(options))
        .await
        .unwrap()
        .into_iter()
        .filter(|n| n.name.as_deref() == Some(name))
        .map(|n| n.id.unwrap())
        .collect()
}

/// A container of `env`'s owner on the network `network` (pinned to `id` when given), as a start
/// makes it: created and started, its exit 0 at once.
fn joining(env: &Env, network: &str, name: &str) -> holdfast_workload::reconciler::ContainerSpec {
    holdfast_workload::reconciler::ContainerSpec {
        workload: name.to_owned(),
        image: env.image.clone(),
        command: vec!["sh".into(), "-c".into(), "exit 0".into()],
        env: Vec::new(),
        labels: std::collections::BTreeMap::from([(
            "holdfast.owner".to_owned(),
            env.owner.clone(),
        )]),
        name: name.to_owned(),
        shape: holdfast_workload::reconciler::Shape {
            network: Some(network.to_owned()),
            ..Default::default()
        },
    }
}

// r[verify workload.network.create]
// r[verify workload.network.foreign]
#[tokio::test]
async fn two_processes_creating_the_nodes_network_at_once_both_succeed_on_one() {
    let Some(env) = env("netrace").await else {
        return;
    };
    // Two processes are two connections calling without the process's own turn-taking; some
    // rounds, since a round's two creates need not overlap. Each start's container is created
    // and started right after its network is settled, as the supervisor does: a moment when two
    // networks share the name must not fail it.
    let other = holdfast_workload::docker::connect(&env.host).await.unwrap();
    let mut failed = Vec::new();
    for round in 0..16 {
        let name = format!("holdfast-{}-{round}", env.owner);
        let start = |docker: &Docker, who: &str| {
            let docker = docker.clone();
            let spec = joining(&env, &name, &format!("{name}-{who}"));
            let name = name.clone();
            async move {
                let id = holdfast_workload::docker::create_node_network(&docker, &name).await?;
                holdfast_workload::docker::start(&docker, &spec, Some(&id)).await
            }
        };
        let (a, b) = tokio::join!(start(&env.docker, "a"), start(&other, "b"));
        env.cleanup().await;
        let ids = networks_named(&env.docker, &name).await;
        for id in &ids {
            let _ = env.docker.remove_network(id).await;
        }
        for result in [a, b] {
            if let Err(e) = result {
                failed.push(format!("round {round}: {}", e.message));
            }
        }
        assert_eq!(ids.len(), 1, "round {round}: {ids:?}");
    }
    assert!(failed.is_empty(), "{failed:#?}");
    // Someone else's network of the name is neither joined nor removed.
    let name = format!("holdfast-{}-foreign", env.owner);
    env.docker
        .create_network(bollard::models::NetworkCreateRequest {
            name: name.clone(),
            driver: Some("bridge".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let refused = holdfast_workload::docker::create_node_network(&env.docker, &name).await;
    let ids = networks_named(&env.docker, &name).await;
    for id in &ids {
        let _ = env.docker.remove_network(id).await;
    }
    let err = refused.unwrap_err();
    assert!(err.message.contains("someone else's"), "{}", err.message);
    assert_eq!(
        err.cause,
        holdfast_workload::StartCause::ForeignNetwork,
        "told apart from a failed start"
    );
    assert_eq!(ids.len(), 1);
}

/// Creates a bridge labelled as the node's named `name`, as a start would: its id.
async fn labelled_network(docker: &Docker, name: &str) -> String {
    docker
        .create_network(bollard::models::NetworkCreateRequest {
            name: name.to_owned(),
            driver: Some("bridge".into()),
            labels: Some(HashMap::from([(
                holdfast_workload::docker::NETWORK_LABEL.to_owned(),
                "node".to_owned(),
            )])),
            ..Default::default()
        })
        .await
        .unwrap()
        .id
}

// r[verify workload.network.create]
#[tokio::test]
async fn node_networks_left_twice_by_a_stopped_creator_are_settled_by_a_later_start() {
    let Some(env) = env("netstale").await else {
        return;
    };
    // Two of ours under one name, as a creator stopped while it waited leaves them (this
    // dockerd, before 25, makes the second). On a daemon that refuses the second there is
    // nothing left twice to settle.
    let name = format!("holdfast-{}", env.owner);
    let first = labelled_network(&env.docker, &name).await;
    let second = env
        .docker
        .create_network(bollard::models::NetworkCreateRequest {
            name: name.clone(),
            driver: Some("bridge".into()),
            labels: Some(HashMap::from([(
                holdfast_workload::docker::NETWORK_LABEL.to_owned(),
                "node".to_owned(),
            )])),
            ..Default::default()
        })
        .await;
    if second.is_err() {
        let _ = env.docker.remove_network(&first).await;
        eprintln!("SKIPPED: this daemon refuses a second network of one name");
        return;
    }
    let started = Instant::now();
    let settled = holdfast_workload::docker::create_node_network(&env.docker, &name).await;
    let took = started.elapsed();
    let ids = networks_named(&env.docker, &name).await;
    for id in &ids {
        let _ = env.docker.remove_network(id).await;
    }
    assert!(settled.is_ok(), "{:?}", settled.err().map(|e| e.message));
    assert_eq!(ids, vec![first], "the oldest is kept");
    assert!(took < Duration::from_secs(5), "settled in {took:?}");
}

/// A deploy directory holding `fullchain.pem` (a stand-in for issuance's deploy).
fn cert_dir(content: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("fullchain.pem"), content).unwrap();
    dir
}

fn mounting(mut w: WorkloadConfig, dir: &Path, renew: &str) -> WorkloadConfig {
    w.certificates = vec![holdfast_workload::CertificateMount {
        name: "example.org".into(),
        dir: dir.to_owned(),
    }];
    w.on_cert_renew = Some(renew.parse().unwrap());
    w.validate().unwrap();
    w
}

async fn started_at(docker: &Docker, id: &str) -> String {
    docker
        .inspect_container(id, None)
        .await
        .unwrap()
        .state
        .and_then(|s| s.started_at)
        .unwrap()
}

/// Steps `sup` until `id`'s log holds a line `line` (real-time `limit`).
async fn until_logged<I: Images>(
    sup: &mut Supervisor<I>,
    env: &Env,
    clock: &Clock,
    id: &str,
    line: &str,
) -> Vec<String> {
    let end = std::time::Instant::now() + LIMIT;
    loop {
        sup.step(clock.now());
        let log = holdfast_workload::docker::log_tail(&env.docker, id, 50).await;
        if log.iter().any(|l| l.trim() == line) {
            return log;
        }
        assert!(
            std::time::Instant::now() < end,
            "{line:?} never logged: {log:?}"
        );
        sup.wait_input(clock.now(), Duration::from_millis(100))
            .await;
    }
}

// r[verify workload.certs+2]
// r[verify workload.certs.renew+2]
#[tokio::test]
async fn a_workload_mounting_a_certificate_is_restarted_after_its_renewal() {
    let Some(env) = env("cert-restart").await else {
        return;
    };
    let clock = Clock::new();
    let mut sup = Supervisor::new(
        &env.host,
        env.module(),
        FaultBoard::new(),
        env.images().await,
    )
    .unwrap();
    let dir = cert_dir("first-chain\n");
    let web = mounting(
        env.workload(
            "web",
            "cat /run/holdfast/certs/example.org/fullchain.pem; exec sleep 3600",
        ),
        dir.path(),
        "restart",
    );
    sup.set_desired(vec![web]).unwrap();
    drive(&mut sup, &clock, LIMIT, |s, now| {
        running_id(s, "web", now).is_some()
    })
    .await;
    let first = running_id(&sup, "web", clock.now()).unwrap();
    until_logged(&mut sup, &env, &clock, &first, "first-chain").await;
    let first_started = started_at(&env.docker, &first).await;
    // The deploy renames a new set into the directory; then the workload is told.
    std::fs::write(dir.path().join("fullchain.pem.tmp"), "second-chain\n").unwrap();
    std::fs::rename(
        dir.path().join("fullchain.pem.tmp"),
        dir.path().join("fullchain.pem"),
    )
    .unwrap();
    sup.cert_renewed("example.org");
    drive(&mut sup, &clock, LIMIT, |s, now| {
        running_id(s, "web", now).is_some_and(|id| id != first) && s.running_actions() == 0
    })
    .await;
    let second = running_id(&sup, "web", clock.now()).unwrap();
    until_logged(&mut sup, &env, &clock, &second, "second-chain").await;
    assert_ne!(started_at(&env.docker, &second).await, first_started);
    let status = sup.status(clock.now());
    let web = status.iter().find(|s| s.name == "web").unwrap();
    assert_eq!(web.counters.cert_renewals, 1);
    assert_eq!(web.counters.restarts, 0, "not a restart after an exit");
    assert!(sup.core().faults().is_empty());
    env.cleanup().await;
}

// r[verify workload.certs.renew+2]
#[tokio::test]
async fn a_signal_workload_receives_its_signal_after_a_renewal() {
    let Some(env) = env("cert-signal").await else {
        return;
    };
    let clock = Clock::new();
    let mut sup = Supervisor::new(
        &env.host,
        env.module(),
        FaultBoard::new(),
        env.images().await,
    )
    .unwrap();
    let dir = cert_dir("chain\n");
    // The shell is PID 1: it handles the signal only because it traps it.
    let web = mounting(
        env.workload(
            "web",
            "trap 'echo got-hup' HUP; echo ready; while true; do sleep 1 & wait $!; done",
        ),
        dir.path(),
        "signal:HUP",
    );
    sup.set_desired(vec![web]).unwrap();
    drive(&mut sup, &clock, LIMIT, |s, now| {
        running_id(s, "web", now).is_some()
    })
    .await;
    let id = running_id(&sup, "web", clock.now()).unwrap();
    until_logged(&mut sup, &env, &clock, &id, "ready").await;
    sup.cert_renewed("example.org");
    until_logged(&mut sup, &env, &clock, &id, "got-hup").await;
    assert_eq!(
        running_id(&sup, "web", clock.now()),
        Some(id),
        "signalled, not replaced"
    );
    let status = sup.status(clock.now());
    let web = status.iter().find(|s| s.name == "web").unwrap();
    assert_eq!(web.counters.cert_renewals, 1);
    assert_eq!(web.counters.cert_renew_failures, 0);
    env.cleanup().await;
}
