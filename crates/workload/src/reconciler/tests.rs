//! The core, driven by calling it: a fake daemon (ids handed out here), a fake image source, and
//! the caller's clock.

use std::time::{Duration, Instant};

use holdfast_lifecycle::FaultBoard;
use holdfast_retry::{CrashLoopDetector, Jitter, Policy};

use super::*;
use crate::config::{ModuleConfig, RestartPolicy, WorkloadConfig};
use crate::images::ImagePresence;

const S: fn(u64) -> Duration = Duration::from_secs;

fn module() -> ModuleConfig {
    let mut m = ModuleConfig::new(7);
    // The nominal schedule, so the test can state it exactly: 10 s doubling to 300 s.
    m.restart_policy = Policy::builder()
        .base(S(10))
        .cap(S(300))
        .escalate_after(5)
        .jitter(Jitter::None)
        .stale_after(S(7200))
        .build()
        .unwrap();
    m.crash_loop = CrashLoopDetector::default();
    m
}

struct Harness {
    core: Reconciler,
    t0: Instant,
    now: Instant,
    image_present: bool,
    image_asks: u32,
    next_id: u32,
    /// Containers the fake daemon runs: (id, workload, spec hash, running).
    daemon: Vec<(String, String, String, bool)>,
    removed: Vec<String>,
    started: Vec<(Duration, String)>,
    /// The daemon reports a health check on every container it starts...
    health_checked: bool,
    /// ... but those of these workloads.
    unchecked: Vec<String>,
    /// Signals sent: (container, signal).
    signalled: Vec<(String, String)>,
    /// The daemon refuses every signal.
    signal_fails: bool,
}

impl Harness {
    fn new(workloads: Vec<WorkloadConfig>) -> Self {
        let mut core = Reconciler::new(module(), FaultBoard::new());
        assert!(core.set_desired(workloads).is_empty());
        let t0 = Instant::now();
        Harness {
            core,
            t0,
            now: t0,
            image_present: true,
            image_asks: 0,
            next_id: 0,
            daemon: Vec::new(),
            removed: Vec::new(),
            started: Vec::new(),
            health_checked: false,
            unchecked: Vec::new(),
            signalled: Vec::new(),
            signal_fails: false,
        }
    }

    fn at(&self) -> Duration {
        self.now - self.t0
    }

    /// Performs actions like a daemon that always succeeds; returns the ids started.
    fn perform(&mut self, actions: Vec<Action>) -> Vec<String> {
        let mut started = Vec::new();
        let mut queue = actions;
        while !queue.is_empty() {
            let mut next = Vec::new();
            for action in queue {
                match action {
                    Action::Start { attempt, spec } => {
                        self.next_id += 1;
                        let id = format!("c{}", self.next_id);
                        self.daemon.push((
                            id.clone(),
                            spec.workload.clone(),
                            spec.labels[SPEC_LABEL].clone(),
                            true,
                        ));
                        self.started.push((self.at(), spec.workload.clone()));
                        started.push(id.clone());
                        let health_check =
                            self.health_checked && !self.unchecked.contains(&spec.workload);
                        next.extend(self.core.on_result(
                            Completion::Started {
                                workload: spec.workload,
                                attempt,
                                result: Ok(Started {
                                    container: id,
                                    health_check,
                                }),
                            },
                            self.now,
                        ));
                    }
                    Action::Signal {
                        workload,
                        container,
                        signal,
                    } => {
                        self.signalled.push((container.clone(), signal));
                        let result = if self.signal_fails {
                            Err("cannot kill container: is not running".to_owned())
                        } else {
                            Ok(())
                        };
                        next.extend(self.core.on_result(
                            Completion::Signalled {
                                workload,
                                container,
                                result,
                            },
                            self.now,
                        ));
                    }
                    Action::Remove { container, .. } => {
                        self.daemon.retain(|c| c.0 != container);
                        self.removed.push(container.clone());
                        next.extend(self.core.on_result(
                            Completion::Removed {
                                container,
                                result: Ok(()),
                            },
                            self.now,
                        ));
                    }
                }
            }
            queue = next;
        }
        started
    }

    fn tick(&mut self) -> Vec<String> {
        let present = self.image_present;
        let asks = &mut self.image_asks;
        let mut images = |_: &str, _: Instant| {
            *asks += 1;
            if present {
                ImagePresence::Present
            } else {
                ImagePresence::Pending {
                    detail: "pulling".into(),
                }
            }
        };
        let actions = self.core.tick(self.now, &mut images);
        self.perform(actions)
    }

    fn tick_with(&mut self, images: &mut dyn crate::images::Images) -> Vec<String> {
        let actions = self.core.tick(self.now, images);
        self.perform(actions)
    }

    fn listing(&self) -> Vec<Observed> {
        self.daemon
            .iter()
            .map(|(id, w, h, running)| Observed {
                id: id.clone(),
                workload: w.clone(),
                spec_hash: Some(h.clone()),
                running: *running,
                exit_code: (!running).then_some(1),
                log_tail: vec![],
                health: None,
            })
            .collect()
    }

    fn resync(&mut self) {
        let actions = self.core.resync(self.listing(), self.now);
        self.perform(actions);
    }

    fn die(&mut self, id: &str, code: i64, log: &[&str]) {
        for c in &mut self.daemon {
            if c.0 == id {
                c.3 = false;
            }
        }
        let actions = self.core.on_event(
            ContainerEvent::Died {
                id: id.to_owned(),
                exit_code: Some(code),
                log_tail: log.iter().map(|l| (*l).to_owned()).collect(),
            },
            self.now,
        );
        self.perform(actions);
    }

    fn health(&mut self, id: &str, status: HealthStatus) {
        let actions = self.core.on_event(
            ContainerEvent::Health {
                id: id.to_owned(),
                status,
                output: vec!["wget: connection refused".into()],
            },
            self.now,
        );
        self.perform(actions);
    }

    fn health_of(&self, name: &str) -> Option<HealthStatus> {
        self.core
            .status(self.now)
            .into_iter()
            .find(|s| s.name == name)
            .unwrap()
            .health
    }

    fn state(&self, name: &str) -> WorkloadState {
        self.core
            .status(self.now)
            .into_iter()
            .find(|s| s.name == name)
            .unwrap()
            .state
    }

    fn running_id(&self, name: &str) -> String {
        match self.state(name) {
            WorkloadState::Running { container, .. } => container,
            other => panic!("{name} not running: {other:?}"),
        }
    }

    /// Ticks once per simulated second until `name` is started; returns its container.
    fn until_started(&mut self, limit: Duration) -> String {
        let end = self.now + limit;
        while self.now <= end {
            if let Some(id) = self.tick().pop() {
                return id;
            }
            self.now += S(1);
        }
        panic!(
            "not started within {limit:?}: {:?}",
            self.core.status(self.now)
        );
    }
}

fn sleeper(name: &str) -> WorkloadConfig {
    let mut w = WorkloadConfig::new(name, "busybox");
    w.command = vec!["sleep".into(), "3600".into()];
    w
}

// r[verify workload.reconcile]
#[test]
fn nothing_starts_before_the_list_then_one_start_per_workload() {
    let mut h = Harness::new(vec![sleeper("web"), sleeper("db")]);
    assert!(h.tick().is_empty(), "no start before the daemon's list");
    assert_eq!(h.state("web"), WorkloadState::Syncing);
    h.resync();
    let started = h.tick();
    assert_eq!(started.len(), 2);
    // Ticks after that start nothing more.
    for _ in 0..100 {
        h.now += S(1);
        assert!(h.tick().is_empty());
    }
    assert!(matches!(
        h.state("web"),
        WorkloadState::Running { lasted: true, .. }
    ));
    assert_eq!(h.core.counters().starts, 2);
    assert_eq!(h.core.counters().restarts, 0);
}

// r[verify workload.adopt]
#[test]
fn a_running_container_of_the_current_spec_is_adopted_not_started_again() {
    let mut h = Harness::new(vec![sleeper("web")]);
    h.resync();
    let first = h.tick().pop().unwrap();
    // A second core (the node restarted) sees the same daemon.
    let daemon = h.daemon.clone();
    let mut h2 = Harness::new(vec![sleeper("web")]);
    h2.daemon = daemon;
    h2.next_id = 100;
    h2.resync();
    assert!(h2.tick().is_empty(), "adopted, not started");
    assert_eq!(h2.running_id("web"), first);
    assert!(h2.removed.is_empty());
    // Two running copies (a crash between create and record): one adopted, one removed.
    let mut h3 = Harness::new(vec![sleeper("web")]);
    h3.daemon = h.daemon.clone();
    h3.daemon
        .push(("dup".into(), "web".into(), sleeper("web").spec_hash(), true));
    h3.resync();
    assert!(h3.tick().is_empty());
    assert_eq!(h3.daemon.len(), 1);
    assert_eq!(h3.removed.len(), 1);
}

// r[verify workload.restart.backoff+2]
// r[verify workload.crash-loop]
#[test]
fn a_crash_loop_follows_the_schedule_becomes_one_fault_and_continues_at_the_cap() {
    let mut w = WorkloadConfig::new("crash", "busybox");
    w.command = vec!["false".into()];
    let mut h = Harness::new(vec![w]);
    h.resync();
    let mut starts = Vec::new();
    let mut filed = 0;
    for _ in 0..12 {
        let id = h.until_started(S(400));
        starts.push(h.at().as_secs());
        // Exits 1 at once.
        h.die(&id, 1, &["boom", "exit 1"]);
        if h.core.faults().len() == 1 && filed == 0 {
            filed = starts.len();
        }
        h.now += S(1);
    }
    let gaps: Vec<u64> = starts.windows(2).map(|p| p[1] - p[0]).collect();
    assert_eq!(
        gaps,
        [10, 20, 40, 80, 160, 300, 300, 300, 300, 300, 300],
        "starts at {starts:?}"
    );
    assert_eq!(filed, 3, "the third crash within 60 s trips the detector");
    let faults = h.core.faults();
    assert_eq!(faults.len(), 1, "one fault: {faults:?}");
    assert_eq!(faults[0].kind, "crash_loop");
    assert!(
        faults[0].message.contains("exit code 1"),
        "{}",
        faults[0].message
    );
    assert!(
        faults[0].message.contains("boom\nexit 1"),
        "{}",
        faults[0].message
    );
    assert_eq!(faults[0].failures, 12);
    assert!(matches!(
        h.state("crash"),
        WorkloadState::CrashLooping {
            failures: 12,
            exit_code: Some(1),
            ..
        }
    ));
    assert_eq!(h.core.counters().restarts, 11);
    assert!(h.core.counters().crash_loops >= 1);
    // Exited containers are removed before the next one starts: never more than one.
    assert!(h.daemon.len() <= 1);
}

// r[verify workload.min-run]
// r[verify workload.crash-loop]
#[test]
fn runs_shorter_than_the_minimum_are_failures_and_a_run_that_lasts_resets() {
    let mut w = WorkloadConfig::new("short", "busybox");
    w.min_run = S(10);
    let mut h = Harness::new(vec![w]);
    h.resync();
    let mut waits = Vec::new();
    for round in 1..=6u32 {
        let id = h.until_started(S(400));
        // Runs 2 s, then exits 0: still a failure, it did not last.
        h.now += S(2);
        assert!(h.tick().is_empty());
        h.die(&id, 0, &["done"]);
        assert_eq!(
            h.core.failures("short"),
            round,
            "the streak grows, never re-armed"
        );
        let wait = h.core.next_attempt_at("short").unwrap() - h.now;
        waits.push(wait.as_secs());
    }
    assert_eq!(waits, [10, 20, 40, 80, 160, 300]);
    assert_eq!(h.core.faults().len(), 1, "the short runs are a crash loop");
    // Now one run lasts 10 s: the streak resets and the fault clears.
    let id = h.until_started(S(400));
    h.now += S(10);
    assert!(h.tick().is_empty());
    assert_eq!(h.core.failures("short"), 0);
    assert!(h.core.faults().is_empty());
    assert!(matches!(
        h.state("short"),
        WorkloadState::Running { lasted: true, .. }
    ));
    // Its exit after lasting starts again at once (a new streak).
    h.die(&id, 1, &[]);
    assert_eq!(h.core.failures("short"), 0);
    h.tick();
    assert!(matches!(h.state("short"), WorkloadState::Running { .. }));
}

// r[verify workload.min-run]
// r[verify workload.crash-loop]
#[test]
fn a_failed_create_or_start_is_a_failure_of_the_same_streak() {
    let mut h = Harness::new(vec![sleeper("web")]);
    h.resync();
    let mut images = |_: &str, _: Instant| ImagePresence::Present;
    for round in 1..=6u32 {
        let when = h.core.next_attempt_at("web").unwrap_or(h.now);
        h.now = h.now.max(when);
        let actions = h.core.tick(h.now, &mut images);
        let [Action::Start { attempt, .. }] = &actions[..] else {
            panic!("{actions:?}")
        };
        let created = (round % 2 == 0).then(|| format!("half{round}"));
        let follow = h.core.on_result(
            Completion::Started {
                workload: "web".into(),
                attempt: *attempt,
                result: Err(StartError {
                    cause: StartCause::Failed,
                    container: created.clone(),
                    message: "start: no such file".into(),
                }),
            },
            h.now,
        );
        // A container created but not started is removed.
        assert_eq!(follow.len(), usize::from(created.is_some()), "{follow:?}");
        assert_eq!(h.core.failures("web"), round);
        // One fault once the gate escalates (at 5), none before.
        assert_eq!(
            h.core.faults().len(),
            usize::from(round >= 5),
            "round {round}"
        );
        h.perform(follow);
    }
    let faults = h.core.faults();
    assert_eq!(faults.len(), 1, "escalated at 5: {faults:?}");
    assert_eq!(faults[0].kind, "start_failed");
    // Refreshed by the failure after the escalation.
    assert!(
        faults[0].message.contains("(6 consecutive failures)"),
        "{}",
        faults[0].message
    );
    assert_eq!(h.core.counters().start_failures, 6);
}

// r[verify workload.image]
#[test]
fn a_missing_image_is_waited_for_without_spending_attempts() {
    let mut h = Harness::new(vec![sleeper("web")]);
    h.resync();
    h.image_present = false;
    for _ in 0..60 {
        assert!(h.tick().is_empty());
        h.now += S(1);
    }
    assert_eq!(
        h.state("web"),
        WorkloadState::WaitingForImage {
            detail: "pulling".into()
        }
    );
    assert_eq!(h.core.failures("web"), 0, "waiting is not failing");
    h.image_present = true;
    assert_eq!(h.tick().len(), 1, "started as soon as the image is there");
    assert_eq!(h.core.counters().restarts, 0);
    // A running workload does not ask for its image.
    let asks = h.image_asks;
    h.now += S(5);
    h.tick();
    assert_eq!(h.image_asks, asks);
}

// r[verify workload.events]
#[test]
fn a_missed_exit_is_found_by_the_list_and_repeats_change_nothing() {
    let mut h = Harness::new(vec![sleeper("web")]);
    h.resync();
    let id = h.tick().pop().unwrap();
    h.now += S(60);
    h.tick();
    // The stream is lost; the container dies meanwhile; nothing starts until the list is read.
    h.core.stream_lost();
    for c in &mut h.daemon {
        c.3 = false;
    }
    h.now += S(1);
    assert!(h.tick().is_empty(), "no start while unsynced");
    h.resync();
    assert_eq!(
        h.removed,
        vec![id.clone()],
        "the exited container is removed"
    );
    let second = h.tick().pop().expect("restarted after the resync");
    // The die event replayed from before the list changes nothing.
    h.die(&id, 1, &[]);
    assert_eq!(h.running_id("web"), second);
    // A list seen twice changes nothing either.
    h.resync();
    h.resync();
    assert!(h.tick().is_empty());
    assert_eq!(h.core.counters().starts, 2);
    // A die of a container being removed on our own decision is forced, not a crash.
    let actions = h.core.set_desired(vec![]);
    assert_eq!(actions.len(), 1);
    h.die(&second, 137, &[]);
    assert!(h.core.faults().is_empty());
}

// r[verify workload.replace+2]
#[test]
fn a_spec_change_replaces_the_container_and_other_changes_do_not() {
    let mut h = Harness::new(vec![sleeper("web")]);
    h.resync();
    let first = h.tick().pop().unwrap();
    let mut same_container = sleeper("web");
    same_container.min_run = S(3);
    same_container.stop_timeout = S(1);
    assert!(h.core.set_desired(vec![same_container]).is_empty());
    assert!(h.tick().is_empty());
    let mut changed = sleeper("web");
    changed.env.insert("MODE".into(), "2".into());
    let actions = h.core.set_desired(vec![changed.clone()]);
    assert!(matches!(&actions[..], [Action::Remove { container, .. }] if *container == first));
    h.perform(actions);
    let second = h.tick().pop().unwrap();
    assert_ne!(first, second);
    assert_eq!(h.daemon.len(), 1);
    assert_eq!(h.daemon[0].2, changed.spec_hash());
    // A container of an old spec found in the list is replaced too.
    let mut h2 = Harness::new(vec![changed]);
    h2.daemon = vec![("old".into(), "web".into(), sleeper("web").spec_hash(), true)];
    h2.resync();
    assert_eq!(h2.removed, vec!["old".to_owned()]);
    assert_eq!(h2.tick().len(), 1);
}

// r[verify workload.remove]
#[test]
fn unconfigured_workloads_lose_their_containers() {
    let mut h = Harness::new(vec![sleeper("web"), sleeper("db")]);
    h.resync();
    h.tick();
    let db = h.running_id("db");
    let actions = h.core.set_desired(vec![sleeper("web")]);
    assert!(matches!(&actions[..], [Action::Remove { container, .. }] if *container == db));
    h.perform(actions);
    assert_eq!(h.daemon.len(), 1);
    // A labelled container of a workload nobody configured is removed when listed.
    h.daemon
        .push(("stray".into(), "gone".into(), "x".into(), true));
    h.resync();
    assert!(h.removed.contains(&"stray".to_owned()));
    // A start in flight for a workload removed meanwhile is removed when it reports.
    let mut h2 = Harness::new(vec![sleeper("late")]);
    h2.core.resync(vec![], h2.now);
    let mut images = |_: &str, _: Instant| ImagePresence::Present;
    let actions = h2.core.tick(h2.now, &mut images);
    let [Action::Start { attempt, .. }] = &actions[..] else {
        panic!()
    };
    assert!(h2.core.set_desired(vec![]).is_empty());
    let follow = h2.core.on_result(
        Completion::Started {
            workload: "late".into(),
            attempt: *attempt,
            result: Ok("c9".into()),
        },
        h2.now,
    );
    assert!(matches!(&follow[..], [Action::Remove { container, .. }] if container == "c9"));
}

// r[verify workload.policy+2]
#[test]
fn only_never_leaves_a_failed_workload_stopped() {
    let mut never = WorkloadConfig::new("once", "busybox");
    never.restart = RestartPolicy::Never;
    let mut on_failure = WorkloadConfig::new("job", "busybox");
    on_failure.restart = RestartPolicy::OnFailure;
    on_failure.min_run = S(1);
    let mut h = Harness::new(vec![never.clone(), on_failure]);
    h.resync();
    h.tick();
    let once = h.running_id("once");
    let job = h.running_id("job");
    h.now += S(5);
    h.tick();
    h.die(&once, 3, &[]);
    h.die(&job, 2, &[]);
    assert_eq!(
        h.state("once"),
        WorkloadState::StoppedByPolicy { exit_code: Some(3) }
    );
    for _ in 0..700 {
        h.now += S(1);
        h.tick();
    }
    assert_eq!(
        h.state("once"),
        WorkloadState::StoppedByPolicy { exit_code: Some(3) },
        "never: stays stopped, and says so"
    );
    // on-failure: exit 2 after lasting is restarted; an exit 0 after lasting completes.
    let job = h.running_id("job");
    h.now += S(5);
    h.tick();
    h.die(&job, 0, &[]);
    assert_eq!(h.state("job"), WorkloadState::Completed);
    h.now += S(600);
    assert!(h.tick().is_empty());
    // The stopped container is kept (for its logs), and a new core adopts the stop.
    assert!(h.daemon.iter().any(|c| c.0 == once && !c.3));
    let mut h2 = Harness::new(vec![never]);
    h2.daemon = h.daemon.clone();
    h2.resync();
    assert!(h2.tick().is_empty());
    assert!(matches!(
        h2.state("once"),
        WorkloadState::StoppedByPolicy { .. }
    ));
}

// r[verify workload.status+2]
#[test]
fn the_operator_view_serializes_each_state() {
    let mut h = Harness::new(vec![sleeper("web")]);
    h.resync();
    let id = h.tick().pop().unwrap();
    h.now += S(2);
    h.die(&id, 1, &["oops"]);
    let status = h.core.status(h.now);
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(
        json,
        serde_json::json!([{
            "name": "web",
            "image": "busybox",
            "state": "restarting",
            "in_secs": 10,
            "failures": 1,
            "exit_code": 1,
            "counters": {"starts": 1, "restarts": 0, "start_failures": 0, "crash_loops": 0},
            "last_exit": {"exit_code": 1, "ran_secs": 2, "lasted": false, "log_tail": ["oops"]},
        }])
    );
    h.now += S(10);
    h.tick();
    let json = serde_json::to_value(h.core.status(h.now + S(4))).unwrap();
    assert_eq!(json[0]["state"], "running");
    assert_eq!(json[0]["running_for_secs"], 4);
    assert_eq!(json[0]["lasted"], false);
    assert_eq!(json[0]["counters"]["restarts"], 1);
    // Waiting for its dependencies: the names of those not ready.
    let mut web = sleeper("web");
    web.depends_on = vec!["db".into()];
    let mut db = sleeper("db");
    db.image = "busybox:2".into();
    let mut h = Harness::new(vec![web, db]);
    h.image_present = false;
    h.resync();
    h.tick();
    let json = serde_json::to_value(h.core.status(h.now)).unwrap();
    assert_eq!(json[1]["name"], "web");
    assert_eq!(json[1]["state"], "waiting_for_dependencies");
    assert_eq!(json[1]["waiting_on"], serde_json::json!(["db"]));
}

// r[verify workload.events]
#[test]
fn an_exit_reported_before_the_start_result_is_not_lost() {
    let mut h = Harness::new(vec![WorkloadConfig::new("fast", "busybox")]);
    h.resync();
    let mut images = |_: &str, _: Instant| ImagePresence::Present;
    let actions = h.core.tick(h.now, &mut images);
    let [Action::Start { attempt, .. }] = &actions[..] else {
        panic!("{actions:?}")
    };
    // The die event of the new container arrives first.
    assert!(
        h.core
            .on_event(
                ContainerEvent::Died {
                    id: "c1".into(),
                    exit_code: Some(1),
                    log_tail: vec!["x".into()],
                },
                h.now,
            )
            .is_empty()
    );
    let follow = h.core.on_result(
        Completion::Started {
            workload: "fast".into(),
            attempt: *attempt,
            result: Ok("c1".into()),
        },
        h.now,
    );
    assert!(matches!(&follow[..], [Action::Remove { container, .. }] if container == "c1"));
    assert_eq!(h.core.failures("fast"), 1);
    assert!(matches!(
        h.state("fast"),
        WorkloadState::Restarting {
            exit_code: Some(1),
            ..
        }
    ));
}

// r[verify workload.owner]
#[test]
fn an_owner_scopes_the_containers_labels() {
    let mut m = module();
    m.owner = Some("node-a".into());
    let mut core = Reconciler::new(m, FaultBoard::new());
    core.set_desired(vec![WorkloadConfig::new("web", "busybox")]);
    core.resync(vec![], Instant::now());
    let mut images = |_: &str, _: Instant| ImagePresence::Present;
    let actions = core.tick(Instant::now(), &mut images);
    let [Action::Start { spec, .. }] = &actions[..] else {
        panic!("{actions:?}")
    };
    assert_eq!(spec.labels[WORKLOAD_LABEL], "web");
    assert_eq!(spec.labels[OWNER_LABEL], "node-a");
    assert_eq!(
        spec.labels[SPEC_LABEL],
        WorkloadConfig::new("web", "busybox").spec_hash()
    );
    // Without an owner there is no owner label.
    let mut core = Reconciler::new(module(), FaultBoard::new());
    core.set_desired(vec![WorkloadConfig::new("web", "busybox")]);
    core.resync(vec![], Instant::now());
    let actions = core.tick(Instant::now(), &mut images);
    let [Action::Start { spec, .. }] = &actions[..] else {
        panic!("{actions:?}")
    };
    assert!(!spec.labels.contains_key(OWNER_LABEL));
}

// r[verify workload.status+2]
#[test]
fn the_status_report_format_is_pinned() {
    let mut h = Harness::new(vec![
        sleeper("web"),
        WorkloadConfig::new("crash", "busybox"),
    ]);
    h.resync();
    h.tick();
    for _ in 0..3 {
        let id = h.running_id("crash");
        h.now += S(1);
        h.die(&id, 2, &["panic: config missing"]);
        h.until_started(S(100));
    }
    let id = h.running_id("crash");
    h.die(&id, 2, &["panic: config missing"]);
    h.now += S(3);
    // Container ids are the fake daemon's ("c1", ...): stable.
    insta::assert_json_snapshot!(h.core.status(h.now));
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // r[verify workload.min-run]
        // r[verify workload.restart.backoff+2]
        /// Whatever the run lengths: a run shorter than the minimum adds one failure to the
        /// streak (never re-arming it), a run that lasted resets it, the wait after a failure
        /// is the schedule's for the streak, and one container at most runs per workload.
        #[test]
        fn short_runs_grow_the_streak_and_lasting_runs_reset_it(
            runs in proptest::collection::vec(0u64..25, 1..40),
        ) {
            let mut w = WorkloadConfig::new("w", "busybox");
            w.min_run = S(10);
            let mut h = Harness::new(vec![w]);
            h.resync();
            let mut expected = 0u32;
            for ran in runs {
                let id = h.until_started(S(400));
                h.now += S(ran);
                h.tick();
                h.die(&id, 1, &[]);
                expected = if ran >= 10 { 0 } else { expected + 1 };
                prop_assert_eq!(h.core.failures("w"), expected);
                if expected > 0 {
                    let wait = h.core.next_attempt_at("w").unwrap() - h.now;
                    let nominal = S(10u64.saturating_mul(1 << (expected - 1).min(20))).min(S(300));
                    prop_assert_eq!(wait, nominal);
                }
                prop_assert!(h.daemon.iter().filter(|c| c.3).count() <= 1);
            }
        }
    }
}

// r[verify workload.adopt]
// r[verify workload.name]
#[test]
fn only_the_current_specs_container_is_adopted_and_it_stays_adopted() {
    let listed = |id: &str, hash: &str, running: bool| Observed {
        id: id.to_owned(),
        workload: "web".into(),
        spec_hash: Some(hash.to_owned()),
        running,
        exit_code: (!running).then_some(0),
        log_tail: vec![],
        health: None,
    };
    let current = sleeper("web").spec_hash();
    let t = Instant::now();
    let mut images = |_: &str, _: Instant| ImagePresence::Present;
    // A running container of an old spec is removed, not adopted, and one of the current
    // spec started.
    let mut core = Reconciler::new(module(), FaultBoard::new());
    core.set_desired(vec![sleeper("web")]);
    let actions = core.resync(vec![listed("old", "stale", true)], t);
    assert!(matches!(&actions[..], [Action::Remove { container, .. }] if container == "old"));
    // The new container takes the old one's name: it waits for the removal.
    assert!(core.tick(t, &mut images).is_empty());
    core.on_result(
        Completion::Removed {
            container: "old".into(),
            result: Ok(()),
        },
        t,
    );
    assert!(matches!(
        &core.tick(t, &mut images)[..],
        [Action::Start { .. }]
    ));
    // An adopted container stays adopted through the next lists, and a copy listed beside it
    // is removed.
    let mut core = Reconciler::new(module(), FaultBoard::new());
    core.set_desired(vec![sleeper("web")]);
    assert!(core.resync(vec![listed("a", &current, true)], t).is_empty());
    assert!(core.resync(vec![listed("a", &current, true)], t).is_empty());
    let actions = core.resync(
        vec![listed("a", &current, true), listed("b", &current, true)],
        t,
    );
    assert!(matches!(&actions[..], [Action::Remove { container, .. }] if container == "b"));
    assert!(
        matches!(core.status(t)[0].state, WorkloadState::Running { ref container, .. } if container == "a")
    );
    assert!(core.tick(t, &mut images).is_empty());
    // While a start is in flight, the list does not judge the container it may have made.
    let mut core = Reconciler::new(module(), FaultBoard::new());
    core.set_desired(vec![sleeper("web")]);
    core.resync(vec![], t);
    let [Action::Start { attempt, .. }] = &core.tick(t, &mut images)[..] else {
        panic!("one start")
    };
    let attempt = *attempt;
    assert!(
        core.resync(vec![listed("new", &current, true)], t)
            .is_empty()
    );
    let follow = core.on_result(
        Completion::Started {
            workload: "web".into(),
            attempt,
            result: Ok("new".into()),
        },
        t,
    );
    assert!(follow.is_empty());
    assert!(
        core.resync(vec![listed("new", &current, true)], t)
            .is_empty()
    );
    // A stop adopted under `never` is kept through the next lists; an exited container of an
    // old spec, or a second one, is removed.
    let mut never = sleeper("web");
    never.restart = RestartPolicy::Never;
    let current = never.spec_hash();
    let mut core = Reconciler::new(module(), FaultBoard::new());
    core.set_desired(vec![never]);
    let actions = core.resync(
        vec![
            listed("old", "stale", false),
            listed("kept", &current, false),
        ],
        t,
    );
    assert!(matches!(&actions[..], [Action::Remove { container, .. }] if container == "old"));
    assert!(
        core.resync(vec![listed("kept", &current, false)], t)
            .is_empty()
    );
    let actions = core.resync(
        vec![
            listed("kept", &current, false),
            listed("other", &current, false),
        ],
        t,
    );
    assert!(matches!(&actions[..], [Action::Remove { container, .. }] if container == "other"));
    assert_eq!(
        core.status(t)[0].state,
        WorkloadState::StoppedByPolicy { exit_code: Some(0) }
    );
}

// r[verify workload.remove]
#[test]
fn a_removed_workloads_start_in_flight_is_told_from_the_others() {
    let mut core = Reconciler::new(module(), FaultBoard::new());
    core.set_desired(vec![sleeper("a"), sleeper("b"), sleeper("c")]);
    let t = Instant::now();
    core.resync(vec![], t);
    let mut images = |_: &str, _: Instant| ImagePresence::Present;
    let attempts: BTreeMap<String, AttemptId> = core
        .tick(t, &mut images)
        .into_iter()
        .map(|a| match a {
            Action::Start { attempt, spec } => (spec.workload, attempt),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(attempts.len(), 3);
    // `a` is removed while its start is in flight: only its container is removed when the
    // starts report, whatever order they report in.
    assert!(
        core.set_desired(vec![sleeper("b"), sleeper("c")])
            .is_empty()
    );
    for (name, id) in [("c", "c-1"), ("a", "a-1"), ("b", "b-1")] {
        let follow = core.on_result(
            Completion::Started {
                workload: name.into(),
                attempt: attempts[name],
                result: Ok(id.into()),
            },
            t,
        );
        if name == "a" {
            assert!(
                matches!(&follow[..], [Action::Remove { container, .. }] if container == "a-1")
            );
        } else {
            assert!(follow.is_empty(), "{name}: {follow:?}");
        }
    }
    let running: Vec<String> = core
        .running_containers()
        .into_iter()
        .map(|(_, id, _)| id)
        .collect();
    assert_eq!(running, vec!["b-1".to_owned(), "c-1".to_owned()]);
}

// r[verify workload.policy+2]
#[test]
fn a_policy_change_releases_a_workload_its_old_policy_left_stopped() {
    let mut never = WorkloadConfig::new("once", "busybox");
    never.restart = RestartPolicy::Never;
    let mut h = Harness::new(vec![never.clone()]);
    h.resync();
    let first = h.tick().pop().unwrap();
    h.die(&first, 3, &[]);
    assert_eq!(
        h.state("once"),
        WorkloadState::StoppedByPolicy { exit_code: Some(3) }
    );
    // Another setting alone keeps it stopped.
    let mut slower = never.clone();
    slower.stop_timeout = S(1);
    assert!(h.core.set_desired(vec![slower]).is_empty());
    // `always` would not have left it stopped: its container goes and a new one starts.
    let mut always = never.clone();
    always.restart = RestartPolicy::Always;
    let actions = h.core.set_desired(vec![always.clone()]);
    assert!(matches!(&actions[..], [Action::Remove { container, .. }] if *container == first));
    h.perform(actions);
    h.now += S(10);
    let second = h.until_started(S(20));
    assert_ne!(second, first);
    // A `never` workload whose run lasted and exited 0 is what on-failure leaves completed:
    // it stays, and now says completed.
    let mut h = Harness::new(vec![never.clone()]);
    h.resync();
    let first = h.tick().pop().unwrap();
    h.now += S(20);
    h.tick();
    h.die(&first, 0, &[]);
    let mut on_failure = never.clone();
    on_failure.restart = RestartPolicy::OnFailure;
    assert!(h.core.set_desired(vec![on_failure.clone()]).is_empty());
    assert_eq!(h.state("once"), WorkloadState::Completed);
    assert!(h.tick().is_empty());
    // One that exited 0 before its minimum run is a failure on-failure restarts.
    let mut h = Harness::new(vec![never.clone()]);
    h.resync();
    let first = h.tick().pop().unwrap();
    h.now += S(2);
    h.die(&first, 0, &[]);
    let actions = h.core.set_desired(vec![on_failure.clone()]);
    assert!(matches!(&actions[..], [Action::Remove { container, .. }] if *container == first));
    // A completed on-failure job stays completed through never and back to on-failure.
    let mut h = Harness::new(vec![on_failure.clone()]);
    h.resync();
    let job = h.tick().pop().unwrap();
    h.now += S(20);
    h.tick();
    h.die(&job, 0, &[]);
    assert_eq!(h.state("once"), WorkloadState::Completed);
    assert!(h.core.set_desired(vec![never.clone()]).is_empty());
    assert!(h.core.set_desired(vec![on_failure]).is_empty());
    assert_eq!(h.state("once"), WorkloadState::Completed);
    assert!(h.tick().is_empty());
}

// r[verify workload.policy+2]
#[test]
fn after_a_node_restart_the_listed_exit_is_judged_by_the_policy() {
    let mut on_failure = WorkloadConfig::new("job", "busybox");
    on_failure.restart = RestartPolicy::OnFailure;
    let hash = on_failure.spec_hash();
    let listed = |id: &str, code: i64| Observed {
        id: id.to_owned(),
        workload: "job".into(),
        spec_hash: Some(hash.clone()),
        running: false,
        exit_code: Some(code),
        log_tail: vec![],
        health: None,
    };
    // Exit 0 under on-failure: completed, container kept.
    let mut core = Reconciler::new(module(), FaultBoard::new());
    core.set_desired(vec![on_failure.clone()]);
    let t = Instant::now();
    assert!(core.resync(vec![listed("done", 0)], t).is_empty());
    assert_eq!(core.status(t)[0].state, WorkloadState::Completed);
    // A non-zero exit under on-failure: removed and started again.
    let mut core = Reconciler::new(module(), FaultBoard::new());
    core.set_desired(vec![on_failure.clone()]);
    let actions = core.resync(vec![listed("failed", 2)], t);
    assert!(matches!(&actions[..], [Action::Remove { container, .. }] if container == "failed"));
    // Under never any exit is kept, stopped by policy with its code.
    let mut never = on_failure.clone();
    never.restart = RestartPolicy::Never;
    let mut core = Reconciler::new(module(), FaultBoard::new());
    core.set_desired(vec![never]);
    assert!(core.resync(vec![listed("failed", 0)], t).is_empty());
    assert_eq!(
        core.status(t)[0].state,
        WorkloadState::StoppedByPolicy { exit_code: Some(0) }
    );
}

// r[verify workload.events]
#[test]
fn a_container_missing_from_the_list_went_away_unreported() {
    let mut h = Harness::new(vec![sleeper("web")]);
    h.resync();
    let first = h.tick().pop().unwrap();
    h.now += S(60);
    h.tick();
    // Listed and running: nothing changes.
    h.resync();
    assert_eq!(h.running_id("web"), first);
    // Removed behind holdfast's back while the stream was down: an exit, and a new start.
    h.core.stream_lost();
    h.daemon.clear();
    h.resync();
    let second = h.tick().pop().expect("started again");
    assert_ne!(second, first);
    h.resync();
    assert_eq!(h.running_id("web"), second);
    // A container kept stopped by policy is kept while listed, forgotten once it is not: a
    // policy change then has no container to remove.
    let mut never = sleeper("once");
    never.restart = RestartPolicy::Never;
    let mut always = never.clone();
    always.restart = RestartPolicy::Always;
    for listed in [true, false] {
        let mut h = Harness::new(vec![never.clone()]);
        h.resync();
        let id = h.tick().pop().unwrap();
        h.die(&id, 3, &[]);
        if !listed {
            h.daemon.clear();
        }
        h.resync();
        let actions = h.core.set_desired(vec![always.clone()]);
        let removes = actions
            .iter()
            .filter(|a| matches!(a, Action::Remove { container, .. } if *container == id))
            .count();
        assert_eq!(removes, usize::from(listed), "listed: {listed}");
    }
}

// r[verify workload.events]
#[test]
fn a_destroy_event_is_an_exit_of_a_running_container_and_forgets_a_stopped_one() {
    let mut h = Harness::new(vec![sleeper("web")]);
    h.resync();
    let first = h.tick().pop().unwrap();
    h.now += S(60);
    h.tick();
    h.daemon.clear();
    let actions = h
        .core
        .on_event(ContainerEvent::Destroyed { id: first.clone() }, h.now);
    h.perform(actions);
    let second = h.tick().pop().expect("started again");
    assert_ne!(second, first);
    // Stopped by policy, then destroyed: a policy change has no container left to remove.
    let mut never = sleeper("once");
    never.restart = RestartPolicy::Never;
    let mut always = never.clone();
    always.restart = RestartPolicy::Always;
    let mut h = Harness::new(vec![never]);
    h.resync();
    let id = h.tick().pop().unwrap();
    h.die(&id, 3, &[]);
    // The die seen twice changes nothing.
    h.die(&id, 3, &[]);
    assert_eq!(
        h.state("once"),
        WorkloadState::StoppedByPolicy { exit_code: Some(3) }
    );
    h.daemon.clear();
    assert!(
        h.core
            .on_event(ContainerEvent::Destroyed { id: id.clone() }, h.now)
            .is_empty()
    );
    assert_eq!(
        h.state("once"),
        WorkloadState::StoppedByPolicy { exit_code: Some(3) },
        "still stopped by policy, without its container"
    );
    let actions = h.core.set_desired(vec![always]);
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::Remove { container, .. } if *container == id)),
        "{actions:?}"
    );
}

// r[verify workload.min-run]
// r[verify workload.crash-loop]
#[test]
fn a_run_that_lasted_counts_even_when_its_exit_comes_before_the_next_tick() {
    let mut w = WorkloadConfig::new("short", "busybox");
    w.min_run = S(10);
    let mut h = Harness::new(vec![w]);
    h.resync();
    for _ in 0..6 {
        let id = h.until_started(S(400));
        h.now += S(2);
        h.die(&id, 1, &[]);
    }
    assert_eq!(h.core.faults().len(), 1, "a crash loop");
    let id = h.until_started(S(400));
    h.now += S(11);
    // No tick in between: the exit is the first the core hears of the run lasting.
    h.die(&id, 0, &[]);
    assert!(h.core.faults().is_empty(), "the run lasted: fault cleared");
    assert_eq!(h.core.failures("short"), 0);
    let last = h.core.status(h.now)[0].last_exit.clone().unwrap();
    assert!(last.lasted);
}

// r[verify workload.crash-loop]
#[test]
fn a_non_zero_exit_after_lasting_is_a_crash_and_a_clean_one_is_not() {
    for (code, trips) in [(1, true), (0, false)] {
        let mut w = WorkloadConfig::new("svc", "busybox");
        w.min_run = S(1);
        let mut h = Harness::new(vec![]);
        // A run that lasts resets the crash count: one crash is a loop at threshold 1.
        let mut m = module();
        m.crash_loop = CrashLoopDetector::new(1, S(60)).unwrap();
        h.core = Reconciler::new(m, FaultBoard::new());
        h.core.set_desired(vec![w]);
        h.resync();
        let id = h.until_started(S(400));
        h.now += S(2);
        h.tick();
        h.die(&id, code, &["bye"]);
        let faults = h.core.faults();
        assert_eq!(faults.len(), usize::from(trips), "exit {code}: {faults:?}");
        if trips {
            assert_eq!(faults[0].kind, "crash_loop");
            assert!(
                faults[0].message.contains("exit code 1"),
                "{}",
                faults[0].message
            );
        }
    }
}

fn checked(name: &str) -> WorkloadConfig {
    let mut w = sleeper(name);
    w.health = Some(crate::shape::HealthCheck {
        cmd: vec!["wget".into(), "-q".into(), "http://127.0.0.1/".into()],
        ..Default::default()
    });
    w
}

fn lasted(h: &Harness, name: &str) -> bool {
    matches!(h.state(name), WorkloadState::Running { lasted: true, .. })
}

// r[verify workload.health.gate]
// r[verify workload.health.status]
#[test]
fn a_checked_start_counts_only_once_healthy_and_past_the_minimum_run() {
    let mut h = Harness::new(vec![checked("web")]);
    h.health_checked = true;
    h.resync();
    let start = h.now;
    let id = h.until_started(S(1));
    assert_eq!(h.health_of("web"), Some(HealthStatus::Starting));
    // Far past the minimum run, still not healthy: not a success; the next thing to wake for
    // is the deadline of its first verdict.
    h.now += S(60);
    h.tick();
    assert!(!lasted(&h, "web"));
    assert_eq!(
        h.core.next_wake(),
        Some(start + crate::shape::MAX_HEALTH_WAIT)
    );
    // Healthy after the minimum run: the success is confirmed at the next tick.
    h.health(&id, HealthStatus::Healthy);
    assert_eq!(h.health_of("web"), Some(HealthStatus::Healthy));
    h.tick();
    assert!(lasted(&h, "web"));
    assert_eq!(h.core.failures("web"), 0);

    // Healthy before the minimum run: a success only once the run has lasted it.
    let mut h = Harness::new(vec![checked("web")]);
    h.health_checked = true;
    h.resync();
    let start = h.now;
    let id = h.until_started(S(1));
    h.now += S(2);
    h.health(&id, HealthStatus::Healthy);
    h.tick();
    assert!(!lasted(&h, "web"));
    assert_eq!(h.core.next_wake(), Some(start + S(10)));
    h.now = start + S(10);
    h.tick();
    assert!(lasted(&h, "web"));
    // Never healthy, unhealthy long after the minimum run: still a failed start.
    let mut h = Harness::new(vec![checked("web")]);
    h.health_checked = true;
    h.resync();
    let id = h.until_started(S(1));
    h.now += S(60);
    h.health(&id, HealthStatus::Unhealthy);
    assert_eq!(h.core.failures("web"), 1);
    assert!(matches!(
        h.core.status(h.now)[0].last_exit,
        Some(LastExit { lasted: false, .. })
    ));
    // A container without a check reports no health.
    let mut h = Harness::new(vec![sleeper("plain")]);
    h.resync();
    h.until_started(S(1));
    assert_eq!(h.health_of("plain"), None);
}

// r[verify workload.health.gate]
#[test]
fn unhealthy_before_healthy_fails_the_same_streak_and_a_run_of_them_is_one_crash_loop_fault() {
    let mut h = Harness::new(vec![checked("web")]);
    h.health_checked = true;
    h.resync();
    let mut starts = Vec::new();
    for round in 1..=5u32 {
        let id = h.until_started(S(400));
        starts.push(h.at().as_secs());
        // Its check fails `retries` times: the daemon says unhealthy after 5 s.
        h.now += S(5);
        h.health(&id, HealthStatus::Unhealthy);
        assert!(
            h.removed.contains(&id),
            "the unhealthy container is replaced"
        );
        assert_eq!(
            h.core.failures("web"),
            round,
            "a failure of the same streak"
        );
    }
    let gaps: Vec<u64> = starts.windows(2).map(|p| p[1] - p[0]).collect();
    // 5 s of running, then the back-off (10, 20, 40, 80 s) through the one gate.
    assert_eq!(gaps, [15, 25, 45, 85], "starts at {starts:?}");
    let faults = h.core.faults();
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert_eq!(faults[0].kind, "crash_loop");
    assert!(
        faults[0]
            .message
            .contains("health check failing\nwget: connection refused"),
        "{}",
        faults[0].message
    );
    assert!(matches!(
        h.state("web"),
        WorkloadState::CrashLooping { failures: 5, .. }
    ));
    // A start that finally turns healthy (and lasts) clears the fault and the streak.
    let id = h.until_started(S(400));
    h.now += S(10);
    h.health(&id, HealthStatus::Healthy);
    h.tick();
    assert!(lasted(&h, "web"));
    assert!(h.core.faults().is_empty());
    assert_eq!(h.core.failures("web"), 0);
    // Unhealthy later ends the run like an exit: replaced, the streak not failed.
    h.now += S(600);
    h.health(&id, HealthStatus::Unhealthy);
    assert!(h.removed.contains(&id));
    assert_eq!(h.core.failures("web"), 0);
    let next = h.until_started(S(1));
    assert_ne!(next, id);
}

// r[verify workload.health.gate]
#[test]
fn an_unhealthy_container_under_never_is_left_running_and_says_so() {
    let mut w = checked("web");
    w.restart = RestartPolicy::Never;
    let mut h = Harness::new(vec![w]);
    h.health_checked = true;
    h.resync();
    let id = h.until_started(S(1));
    h.now += S(90);
    h.health(&id, HealthStatus::Unhealthy);
    assert!(h.removed.is_empty());
    assert_eq!(h.running_id("web"), id);
    assert_eq!(h.health_of("web"), Some(HealthStatus::Unhealthy));
}

// r[verify workload.health.gate]
#[test]
fn a_verdict_the_stream_missed_is_found_by_the_list() {
    let mut h = Harness::new(vec![checked("web")]);
    h.health_checked = true;
    h.resync();
    let id = h.until_started(S(1));
    h.now += S(30);
    let mut listing = h.listing();
    listing[0].health = Some(HealthStatus::Healthy);
    let actions = h.core.resync(listing, h.now);
    h.perform(actions);
    h.tick();
    assert!(lasted(&h, "web"));
    let mut listing = h.listing();
    listing[0].health = Some(HealthStatus::Unhealthy);
    let actions = h.core.resync(listing, h.now);
    h.perform(actions);
    assert!(h.removed.contains(&id));
}

// r[verify workload.depends-on]
#[test]
fn a_dependent_starts_only_once_its_dependencies_are_ready() {
    let mut db = checked("db");
    db.min_run = S(1);
    let cache = sleeper("cache");
    let mut web = sleeper("web");
    web.depends_on = vec!["db".into(), "cache".into()];
    let mut h = Harness::new(vec![web, db, cache]);
    h.health_checked = true;
    h.unchecked = vec!["cache".into()];
    h.resync();
    // First tick: db and cache start; web waits for both, spending nothing.
    let started = h.tick();
    assert_eq!(started.len(), 2, "{started:?}");
    assert_eq!(
        h.state("web"),
        WorkloadState::WaitingForDependencies {
            waiting_on: vec!["db".into(), "cache".into()]
        }
    );
    assert_eq!(h.core.counters().starts, 2);
    assert_eq!(h.image_asks, 2, "no image asked for a waiting workload");
    // Both run; cache has no check (ready once running); db's check is still starting.
    h.now += S(5);
    assert!(h.tick().is_empty());
    assert_eq!(
        h.state("web"),
        WorkloadState::WaitingForDependencies {
            waiting_on: vec!["db".into()]
        }
    );
    let db_id = h.running_id("db");
    h.health(&db_id, HealthStatus::Healthy);
    let started = h.tick();
    assert_eq!(started.len(), 1);
    assert_eq!(h.running_id("web"), started[0]);
    // A dependency that fails later does not stop its dependent.
    h.health(&db_id, HealthStatus::Unhealthy);
    assert_eq!(h.running_id("web"), started[0]);
}

// r[verify workload.depends-on]
#[test]
fn readiness_is_running_and_healthy_if_checked_or_completed() {
    let ready = std::collections::BTreeSet::from(["a".to_owned()]);
    let mut w = sleeper("w");
    w.depends_on = vec!["a".into(), "b".into()];
    assert_eq!(unready_dependencies(&w, &ready), ["b"]);
    w.depends_on.clear();
    assert!(unready_dependencies(&w, &ready).is_empty());
    let running = |unready: bool, health: Option<HealthStatus>| Run::Running {
        container: "c".into(),
        since: Instant::now(),
        lasting: None,
        unready: unready.then(|| {
            let mut gate = KeyedGate::new(module().restart_policy);
            gate.begin("w", Instant::now()).unwrap()
        }),
        health,
    };
    assert!(is_ready(&running(false, None)));
    assert!(is_ready(&running(false, Some(HealthStatus::Healthy))));
    assert!(!is_ready(&running(false, Some(HealthStatus::Starting))));
    assert!(!is_ready(&running(false, Some(HealthStatus::Unhealthy))));
    assert!(!is_ready(&running(true, Some(HealthStatus::Starting))));
    assert!(!is_ready(&Run::Idle));
    let stopped = |completed| Run::Stopped {
        container: None,
        exit_code: Some(0),
        lasted: true,
        completed,
    };
    assert!(is_ready(&stopped(true)));
    assert!(!is_ready(&stopped(false)));
}

// r[verify workload.name]
#[test]
fn a_replaced_specs_start_in_flight_holds_the_name_until_its_container_is_removed() {
    let t = Instant::now();
    let mut images = |_: &str, _: Instant| ImagePresence::Present;
    let mut core = Reconciler::new(module(), FaultBoard::new());
    core.set_desired(vec![sleeper("web")]);
    core.resync(vec![], t);
    let [Action::Start { attempt, .. }] = &core.tick(t, &mut images)[..] else {
        panic!("one start")
    };
    let attempt = *attempt;
    // The spec changes while the start is in flight: that start will create `holdfast-web`,
    // so no second create under the same name is issued until its container is gone.
    let mut changed = sleeper("web");
    changed.command = vec!["sleep".into(), "60".into()];
    assert!(core.set_desired(vec![changed]).is_empty());
    assert!(
        core.tick(t, &mut images).is_empty(),
        "the orphan's start holds the name"
    );
    let follow = core.on_result(
        Completion::Started {
            workload: "web".into(),
            attempt,
            result: Ok("w-1".into()),
        },
        t,
    );
    assert!(matches!(&follow[..], [Action::Remove { container, .. }] if container == "w-1"));
    assert!(
        core.tick(t, &mut images).is_empty(),
        "its removal holds the name"
    );
    core.on_result(
        Completion::Removed {
            container: "w-1".into(),
            result: Ok(()),
        },
        t,
    );
    assert!(matches!(
        &core.tick(t, &mut images)[..],
        [Action::Start { .. }]
    ));
    // Removed and configured again while the start is in flight: the same, and a start that
    // failed without a container frees the name at once.
    let mut core = Reconciler::new(module(), FaultBoard::new());
    core.set_desired(vec![sleeper("web")]);
    core.resync(vec![], t);
    let [Action::Start { attempt, .. }] = &core.tick(t, &mut images)[..] else {
        panic!("one start")
    };
    let attempt = *attempt;
    core.set_desired(vec![]);
    core.set_desired(vec![sleeper("web")]);
    assert!(core.tick(t, &mut images).is_empty());
    let follow = core.on_result(
        Completion::Started {
            workload: "web".into(),
            attempt,
            result: Err(StartError {
                cause: StartCause::Failed,
                container: None,
                message: "no such image".into(),
            }),
        },
        t,
    );
    assert!(follow.is_empty());
    assert!(matches!(
        &core.tick(t, &mut images)[..],
        [Action::Start { .. }]
    ));
}

// r[verify workload.replace+2]
// r[verify workload.adopt]
#[test]
fn a_container_made_before_the_shape_keys_is_adopted_while_none_is_set() {
    // "bd7fc74e4b946348": the label the release before the shape keys gave the defaults'
    // container (FNV over image, command and environment).
    let legacy = || {
        vec![(
            "old".to_owned(),
            "web".to_owned(),
            "bd7fc74e4b946348".to_owned(),
            true,
        )]
    };
    let plain = WorkloadConfig::new("web", "busybox");
    let mut h = Harness::new(vec![plain.clone()]);
    h.daemon = legacy();
    h.resync();
    assert!(h.tick().is_empty(), "adopted, not replaced");
    assert!(h.removed.is_empty());
    assert_eq!(h.running_id("web"), "old");
    // Holdfast's own keys set: still the same container.
    let mut own = plain.clone();
    own.restart = RestartPolicy::OnFailure;
    own.min_run = S(2);
    own.depends_on = vec![];
    let mut h = Harness::new(vec![own]);
    h.daemon = legacy();
    h.resync();
    assert!(h.tick().is_empty());
    assert!(h.removed.is_empty());
    // A new key set: the container must change, so it is replaced.
    let mut shaped = plain.clone();
    shaped.ports = vec!["8080:80".parse().unwrap()];
    let mut h = Harness::new(vec![shaped]);
    h.daemon = legacy();
    h.resync();
    assert_eq!(h.removed, vec!["old".to_owned()]);
    assert_eq!(h.tick().len(), 1);
    // Another image: the legacy label does not match.
    let mut h = Harness::new(vec![WorkloadConfig::new("web", "busybox:2")]);
    h.daemon = legacy();
    h.resync();
    assert_eq!(h.removed, vec!["old".to_owned()]);
}

// r[verify workload.name]
#[test]
fn a_failed_removal_keeps_the_name_and_is_retried_after_a_back_off() {
    let t = Instant::now();
    let mut images = |_: &str, _: Instant| ImagePresence::Present;
    let mut core = Reconciler::new(module(), FaultBoard::new());
    core.set_desired(vec![sleeper("web")]);
    core.resync(vec![], t);
    let [Action::Start { attempt, .. }] = &core.tick(t, &mut images)[..] else {
        panic!("one start")
    };
    let attempt = *attempt;
    core.on_result(
        Completion::Started {
            workload: "web".into(),
            attempt,
            result: Ok("w-1".into()),
        },
        t,
    );
    let mut changed = sleeper("web");
    changed.command = vec!["sleep".into(), "60".into()];
    let actions = core.set_desired(vec![changed]);
    assert!(matches!(&actions[..], [Action::Remove { container, .. }] if container == "w-1"));
    let failed = |core: &mut Reconciler, at: Instant| {
        core.on_result(
            Completion::Removed {
                container: "w-1".into(),
                result: Err("device or resource busy".into()),
            },
            at,
        )
    };
    assert!(failed(&mut core, t).is_empty());
    // The old container still holds the name: nothing is created, and the removal is retried
    // on the module's schedule, not at once.
    assert!(core.tick(t, &mut images).is_empty());
    assert_eq!(core.next_wake(), Some(t + S(10)));
    assert!(core.tick(t + S(9), &mut images).is_empty());
    let retry = core.tick(t + S(10), &mut images);
    assert!(
        matches!(&retry[..], [Action::Remove { container, .. }] if container == "w-1"),
        "{retry:?}"
    );
    // Events about it and the list while the retry is in flight change nothing.
    assert!(
        core.on_event(ContainerEvent::Destroyed { id: "x".into() }, t + S(10))
            .is_empty()
    );
    assert!(failed(&mut core, t + S(10)).is_empty());
    assert!(
        core.tick(t + S(29), &mut images).is_empty(),
        "second wait doubles"
    );
    assert_eq!(core.tick(t + S(30), &mut images).len(), 1);
    core.on_result(
        Completion::Removed {
            container: "w-1".into(),
            result: Ok(()),
        },
        t + S(30),
    );
    assert!(matches!(
        &core.tick(t + S(30), &mut images)[..],
        [Action::Start { .. }]
    ));
    // A container whose removal failed and that the next list no longer holds is gone: the
    // name is free.
    let mut core = Reconciler::new(module(), FaultBoard::new());
    core.set_desired(vec![]);
    let listed = Observed {
        id: "stray".into(),
        workload: "web".into(),
        spec_hash: Some("x".into()),
        running: true,
        exit_code: None,
        log_tail: vec![],
        health: None,
    };
    assert_eq!(core.resync(vec![listed.clone()], t).len(), 1);
    core.on_result(
        Completion::Removed {
            container: "stray".into(),
            result: Err("busy".into()),
        },
        t,
    );
    core.set_desired(vec![sleeper("web")]);
    assert!(core.tick(t, &mut images).is_empty());
    assert!(
        core.resync(vec![listed], t).is_empty(),
        "retried by its gate"
    );
    assert!(core.resync(vec![], t).is_empty());
    assert!(matches!(
        &core.tick(t, &mut images)[..],
        [Action::Start { .. }]
    ));
}

// r[verify workload.health.gate]
// r[verify workload.adopt]
#[test]
fn an_adopted_container_already_unhealthy_is_replaced_unless_never() {
    let listed = |w: &WorkloadConfig, health: HealthStatus| Observed {
        id: "old".into(),
        workload: w.name.clone(),
        spec_hash: Some(w.spec_hash()),
        running: true,
        exit_code: None,
        log_tail: vec![],
        health: Some(health),
    };
    let t = Instant::now();
    let mut images = |_: &str, _: Instant| ImagePresence::Present;
    // Unhealthy when found: the stream brings no new verdict, so it is judged now.
    let w = checked("web");
    let mut core = Reconciler::new(module(), FaultBoard::new());
    core.set_desired(vec![w.clone()]);
    let actions = core.resync(vec![listed(&w, HealthStatus::Unhealthy)], t);
    assert!(
        matches!(&actions[..], [Action::Remove { container, .. }] if container == "old"),
        "{actions:?}"
    );
    // The same list again changes nothing while it is removed.
    assert!(
        core.resync(vec![listed(&w, HealthStatus::Unhealthy)], t)
            .is_empty()
    );
    core.on_result(
        Completion::Removed {
            container: "old".into(),
            result: Ok(()),
        },
        t,
    );
    assert!(matches!(
        &core.tick(t, &mut images)[..],
        [Action::Start { .. }]
    ));
    // Under `never` it is left running, and says so; a healthy one is adopted as healthy.
    let mut never = checked("web");
    never.restart = RestartPolicy::Never;
    let mut core = Reconciler::new(module(), FaultBoard::new());
    core.set_desired(vec![never.clone()]);
    assert!(
        core.resync(vec![listed(&never, HealthStatus::Unhealthy)], t)
            .is_empty()
    );
    assert_eq!(core.status(t)[0].health, Some(HealthStatus::Unhealthy));
    assert!(matches!(
        core.status(t)[0].state,
        WorkloadState::Running { .. }
    ));
    let mut core = Reconciler::new(module(), FaultBoard::new());
    core.set_desired(vec![w.clone()]);
    assert!(
        core.resync(vec![listed(&w, HealthStatus::Healthy)], t)
            .is_empty()
    );
    assert_eq!(core.status(t)[0].health, Some(HealthStatus::Healthy));
}

// r[verify workload.health.gate]
#[test]
fn a_start_without_a_first_verdict_within_the_longest_wait_fails_and_is_replaced() {
    let wait = crate::shape::MAX_HEALTH_WAIT;
    let mut h = Harness::new(vec![checked("web")]);
    h.health_checked = true;
    h.resync();
    let start = h.now;
    let id = h.until_started(S(1));
    // An image's HEALTHCHECK may never say anything: the start is not held for ever.
    h.now = start + wait - S(1);
    assert!(h.tick().is_empty());
    assert!(h.removed.is_empty());
    h.now = start + wait;
    h.tick();
    assert_eq!(h.removed, vec![id.clone()]);
    assert_eq!(h.core.failures("web"), 1, "a failed start of the streak");
    let last = h.core.status(h.now)[0].last_exit.clone().unwrap();
    assert!(!last.lasted);
    assert_eq!(last.log_tail, ["no health verdict within 1h"]);
    assert!(matches!(
        h.state("web"),
        WorkloadState::Restarting { failures: 1, .. }
    ));
    assert_eq!(h.core.next_wake(), Some(h.now + S(10)));
    h.now += S(10);
    assert_eq!(h.tick().len(), 1, "started again through the gate");
    // Under `never` the workload is left stopped, its silent container removed.
    let mut never = checked("web");
    never.restart = RestartPolicy::Never;
    let mut h = Harness::new(vec![never]);
    h.health_checked = true;
    h.resync();
    let start = h.now;
    let id = h.until_started(S(1));
    h.now = start + wait;
    h.tick();
    assert_eq!(h.removed, vec![id]);
    assert_eq!(
        h.state("web"),
        WorkloadState::StoppedByPolicy { exit_code: None }
    );
    h.now += S(600);
    assert!(h.tick().is_empty());
}

// r[verify workload.image.moved]
#[test]
fn a_moved_image_replaces_the_containers_running_it_and_no_other() {
    let mut other = sleeper("db");
    other.image = "postgres:16".into();
    let mut h = Harness::new(vec![sleeper("web"), other]);
    h.resync();
    h.tick();
    let (web, db) = (h.running_id("web"), h.running_id("db"));
    let both = ["web".to_owned(), "db".to_owned()];
    assert!(h.core.image_moved("nobody:1", &both).is_empty());
    let actions = h.core.image_moved("busybox", &both);
    assert!(
        matches!(&actions[..], [Action::Remove { container, .. }] if *container == web),
        "{actions:?}"
    );
    h.perform(actions);
    let started = h.tick();
    assert_eq!(started.len(), 1, "web starts again: {started:?}");
    assert_ne!(h.running_id("web"), web);
    assert_eq!(
        h.running_id("db"),
        db,
        "another image's workload is untouched"
    );
    // The spec is the same: the new container carries the same hash, so a restart adopts it.
    let web_hash = &h.daemon.iter().find(|c| c.1 == "web").unwrap().2;
    assert_eq!(*web_hash, sleeper("web").spec_hash());
}

// r[verify workload.image.moved]
#[test]
fn a_moved_image_replaces_its_workloads_one_at_a_time_each_once_the_previous_has_lasted() {
    let mut web = sleeper("web");
    web.min_run = S(10);
    let mut api = sleeper("api");
    api.min_run = S(10);
    let mut h = Harness::new(vec![web, api, sleeper("cron")]);
    h.resync();
    h.tick();
    let (web, api, cron) = (
        h.running_id("web"),
        h.running_id("api"),
        h.running_id("cron"),
    );
    h.now += S(11);
    h.tick();
    // cron's pull_policy is not "digest": not among those named.
    let actions = h
        .core
        .image_moved("busybox", &["web".to_owned(), "api".to_owned()]);
    let removed: Vec<&str> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Remove { container, .. } => Some(container.as_str()),
            Action::Start { .. } | Action::Signal { .. } => None,
        })
        .collect();
    assert_eq!(removed.len(), 1, "one at a time: {actions:?}");
    let first = removed[0].to_owned();
    assert!(first == api || first == web, "{first}");
    h.perform(actions);
    h.tick();
    let second = if first == api { "web" } else { "api" };
    let second_id = if first == api { &web } else { &api };
    // The replaced one runs but has not lasted: the other keeps its container.
    h.now += S(5);
    h.tick();
    assert_eq!(h.running_id(second), *second_id);
    // Once it has lasted, the next is replaced.
    h.now += S(6);
    h.tick();
    h.tick();
    h.tick();
    assert_ne!(h.running_id(second), *second_id);
    assert_eq!(h.running_id("cron"), cron, "cron keeps its container");
}

fn status_of(h: &Harness, name: &str) -> WorkloadStatus {
    h.core
        .status(h.now)
        .into_iter()
        .find(|s| s.name == name)
        .unwrap()
}

fn with_cert(name: &str, renew: Option<&str>) -> WorkloadConfig {
    let mut w = sleeper(name);
    w.certificates = vec![crate::certs::CertificateMount {
        name: "example.org".into(),
        dir: "/etc/holdfast/certs/example.org".into(),
    }];
    w.on_cert_renew = renew.map(|r| r.parse().unwrap());
    w
}

// r[verify workload.certs+2]
#[test]
fn a_certificate_is_a_read_only_mount_and_part_of_the_spec() {
    let mut h = Harness::new(vec![with_cert("web", None)]);
    h.resync();
    let actions = h
        .core
        .tick(h.now, &mut |_: &str, _: Instant| ImagePresence::Present);
    let [Action::Start { spec, .. }] = &actions[..] else {
        panic!("{actions:?}");
    };
    let mount = spec
        .shape
        .volumes
        .iter()
        .find(|v| v.target == "/run/holdfast/certs/example.org")
        .expect("the certificate's mount");
    assert!(mount.read_only);
    assert_eq!(
        mount.source,
        crate::shape::VolumeSource::Bind("/etc/holdfast/certs/example.org".into())
    );
    // The mount shapes the container; what it is told on renewal does not.
    assert_ne!(
        with_cert("web", None).spec_hash(),
        sleeper("web").spec_hash()
    );
    assert_eq!(
        with_cert("web", Some("restart")).spec_hash(),
        with_cert("web", None).spec_hash()
    );
}

// r[verify workload.certs.renew+2]
#[test]
fn a_renewal_replaces_a_restart_workloads_container_at_once_and_counts_no_crash() {
    let mut h = Harness::new(vec![
        with_cert("web", Some("restart")),
        with_cert("quiet", None),
        sleeper("other"),
    ]);
    h.resync();
    h.tick();
    let (web, quiet, other) = (
        h.running_id("web"),
        h.running_id("quiet"),
        h.running_id("other"),
    );
    assert!(h.core.cert_renewed("other.example").is_empty());
    let actions = h.core.cert_renewed("example.org");
    assert!(
        matches!(&actions[..], [Action::Remove { container, .. }] if *container == web),
        "{actions:?}"
    );
    h.perform(actions);
    // Started again at the same instant: no back-off, not a restart after an exit.
    assert_eq!(h.tick().len(), 1);
    assert_ne!(h.running_id("web"), web);
    assert_eq!(h.running_id("quiet"), quiet);
    assert_eq!(h.running_id("other"), other);
    let web = status_of(&h, "web");
    assert_eq!(web.counters.restarts, 0);
    assert_eq!(web.counters.starts, 2);
    assert_eq!(web.counters.cert_renewals, 1);
    assert_eq!(h.core.failures("web"), 0);
    assert!(h.core.faults().is_empty());
}

// r[verify workload.certs.renew+2]
#[test]
fn a_renewal_signals_a_signal_workload_and_a_refused_signal_is_paced_then_a_fault() {
    let mut h = Harness::new(vec![with_cert("web", Some("signal:HUP"))]);
    h.resync();
    h.tick();
    let web = h.running_id("web");
    let actions = h.core.cert_renewed("example.org");
    h.perform(actions);
    assert_eq!(h.signalled, vec![(web.clone(), "SIGHUP".to_owned())]);
    assert_eq!(h.running_id("web"), web, "signalled, not replaced");
    assert_eq!(status_of(&h, "web").counters.cert_renewals, 1);
    // The daemon refuses: counted, sent again on the restart policy's schedule, a fault once
    // the gate escalates (after 5 failures here), cleared by a delivery.
    h.signal_fails = true;
    h.signalled.clear();
    let actions = h.core.cert_renewed("example.org");
    h.perform(actions);
    assert_eq!(h.signalled.len(), 1);
    h.tick();
    assert_eq!(h.signalled.len(), 1, "not sent again before the back-off");
    for _ in 0..4 {
        h.now = h.core.next_wake().expect("a retry is due");
        h.tick();
    }
    assert_eq!(h.signalled.len(), 5);
    assert_eq!(status_of(&h, "web").counters.cert_renew_failures, 5);
    let faults = h.core.faults();
    assert!(faults.iter().any(|f| f.kind == "cert_renew"), "{faults:?}");
    h.signal_fails = false;
    h.now = h.core.next_wake().expect("a retry is due");
    h.tick();
    assert_eq!(h.signalled.len(), 6);
    assert!(h.core.faults().is_empty());
    assert_eq!(h.core.next_wake().filter(|w| *w <= h.now + S(3600)), None);
}

// r[verify workload.certs.renew+2]
#[test]
fn a_renewal_told_while_the_container_starts_replaces_it_once_started() {
    let mut h = Harness::new(vec![with_cert("web", Some("restart"))]);
    h.resync();
    let actions = h
        .core
        .tick(h.now, &mut |_: &str, _: Instant| ImagePresence::Present);
    assert!(
        matches!(&actions[..], [Action::Start { .. }]),
        "{actions:?}"
    );
    // The create-and-start is in flight (its process may already have read the old files)
    // when the renewal is told.
    let told = h.core.cert_renewed("example.org");
    assert!(told.is_empty(), "{told:?}");
    // Once started it is replaced at once: the replacement mounts the new files.
    let started = h.perform(actions);
    assert_eq!(started.len(), 1);
    assert!(
        h.removed.contains(&started[0]),
        "the renewal told during the start was dropped"
    );
    h.tick();
    assert_ne!(h.running_id("web"), started[0]);
    assert_eq!(status_of(&h, "web").counters.cert_renewals, 1);
}

// r[verify workload.certs.renew+2]
#[test]
fn a_renewal_told_while_a_signalled_container_starts_signals_it_once_started() {
    let mut h = Harness::new(vec![with_cert("web", Some("signal:HUP"))]);
    h.resync();
    let actions = h
        .core
        .tick(h.now, &mut |_: &str, _: Instant| ImagePresence::Present);
    assert!(
        matches!(&actions[..], [Action::Start { .. }]),
        "{actions:?}"
    );
    assert!(h.core.cert_renewed("example.org").is_empty());
    h.perform(actions);
    let started = h.running_id("web");
    assert_eq!(h.signalled.len(), 1, "{:?}", h.signalled);
    assert_eq!(h.running_id("web"), started);
}

// r[verify workload.certs.renew+2]
#[test]
fn after_an_escalated_signal_a_later_containers_failures_file_a_fault_again() {
    let mut h = Harness::new(vec![with_cert("web", Some("signal:HUP"))]);
    h.resync();
    h.tick();
    h.signal_fails = true;
    let actions = h.core.cert_renewed("example.org");
    h.perform(actions);
    for _ in 0..4 {
        h.now = h.core.next_wake().expect("a retry is due");
        h.tick();
    }
    assert!(h.core.faults().iter().any(|f| f.kind == "cert_renew"));
    // The container is replaced (it died and was restarted): the owed signal is dropped,
    // its fault cleared.
    let old = h.running_id("web");
    h.die(&old, 0, &[]);
    let new = h.until_started(S(600));
    h.tick();
    assert!(!h.core.faults().iter().any(|f| f.kind == "cert_renew"));
    assert_eq!(h.running_id("web"), new);
    // The next renewal, months later, and the daemon still refuses: a fresh streak escalates.
    h.now += S(3600 * 24 * 60);
    h.signalled.clear();
    let actions = h.core.cert_renewed("example.org");
    h.perform(actions);
    for _ in 0..9 {
        let Some(at) = h.core.next_wake() else { break };
        h.now = at.max(h.now);
        h.tick();
    }
    assert!(
        h.core.faults().iter().any(|f| f.kind == "cert_renew"),
        "no fault for the new container's refused signals"
    );
}

// r[verify workload.certs.renew+2]
#[test]
fn a_workload_removed_with_a_signal_owed_leaves_no_signal_and_no_streak() {
    let mut h = Harness::new(vec![with_cert("web", Some("signal:HUP"))]);
    h.resync();
    h.tick();
    h.signal_fails = true;
    let actions = h.core.cert_renewed("example.org");
    h.perform(actions);
    for _ in 0..4 {
        h.now = h.core.next_wake().expect("a retry is due");
        h.tick();
    }
    assert!(h.core.faults().iter().any(|f| f.kind == "cert_renew"));
    let actions = h.core.set_desired(vec![]);
    h.perform(actions);
    assert!(h.core.faults().is_empty(), "{:?}", h.core.faults());
    // Configured again: its first refused signal starts a fresh streak, not the old one's.
    let actions = h
        .core
        .set_desired(vec![with_cert("web", Some("signal:HUP"))]);
    h.perform(actions);
    h.until_started(S(600));
    h.signalled.clear();
    let actions = h.core.cert_renewed("example.org");
    h.perform(actions);
    for _ in 0..9 {
        let Some(at) = h.core.next_wake() else { break };
        h.now = at.max(h.now);
        h.tick();
    }
    assert!(
        h.core.faults().iter().any(|f| f.kind == "cert_renew"),
        "no fault for the re-added workload's refused signals"
    );
}

// r[verify workload.certs+2]
#[test]
fn a_workload_whose_certificate_was_missing_starts_at_once_when_it_is_first_deployed() {
    let mut h = Harness::new(vec![with_cert("web", None)]);
    h.resync();
    let mut images = |_: &str, _: Instant| ImagePresence::Present;
    // Not yet issued: the bind mount's source is missing, every create fails.
    for _ in 0..3 {
        let when = h.core.next_attempt_at("web").unwrap_or(h.now);
        h.now = h.now.max(when);
        let actions = h.core.tick(h.now, &mut images);
        let [Action::Start { attempt, .. }] = &actions[..] else {
            panic!("{actions:?}")
        };
        let follow = h.core.on_result(
            Completion::Started {
                workload: "web".into(),
                attempt: *attempt,
                result: Err(StartError {
                    cause: StartCause::Failed,
                    container: None,
                    message: "invalid mount config: bind source path does not exist".into(),
                }),
            },
            h.now,
        );
        h.perform(follow);
    }
    assert!(h.core.next_attempt_at("web").is_some_and(|at| at > h.now));
    assert!(h.core.tick(h.now, &mut images).is_empty());
    // First issued and deployed: started now, not at the end of the back-off.
    assert!(h.core.cert_renewed("example.org").is_empty());
    let actions = h.core.tick(h.now, &mut images);
    assert!(
        matches!(&actions[..], [Action::Start { .. }]),
        "{actions:?}"
    );
}

// r[verify workload.network.foreign]
#[test]
fn someone_elses_network_is_one_fault_of_its_own_and_burns_no_streak() {
    let on_node_network = |name: &str| {
        let mut w = sleeper(name);
        w.network = Some(crate::config::NODE_NETWORK.into());
        w
    };
    let mut h = Harness::new(vec![on_node_network("web"), on_node_network("db")]);
    h.resync();
    let mut images = |_: &str, _: Instant| ImagePresence::Present;
    let refused = || StartError {
        container: None,
        message: "network holdfast: a network of this name exists (abc, driver overlay) that is \
                  not the node's"
            .into(),
        cause: StartCause::ForeignNetwork,
    };
    let mut starts = Vec::new();
    // Six refusals in a row for each of two workloads: no streak, no crash, one fault.
    for _ in 0..6 {
        let actions = h.core.tick(h.now, &mut images);
        assert!(
            !actions.is_empty(),
            "each is tried again on its own schedule"
        );
        starts.push(h.at());
        for action in actions {
            let Action::Start { attempt, spec } = action else {
                panic!("{action:?}")
            };
            let follow = h.core.on_result(
                Completion::Started {
                    workload: spec.workload,
                    attempt,
                    result: Err(refused()),
                },
                h.now,
            );
            assert!(follow.is_empty(), "{follow:?}");
        }
        for name in ["web", "db"] {
            assert_eq!(h.core.failures(name), 0, "the restart streak is untouched");
            assert!(
                matches!(h.state(name), WorkloadState::Restarting { failures: 0, .. }),
                "{:?}",
                h.state(name)
            );
        }
        let faults = h.core.faults();
        assert_eq!(faults.len(), 1, "{faults:?}");
        assert_eq!(faults[0].kind, "foreign_network");
        assert_eq!(faults[0].subject.name, "network holdfast");
        assert!(
            faults[0].message.contains("docker network rm holdfast")
                && faults[0].message.contains("abc"),
            "{}",
            faults[0].message
        );
        // Nothing before the next try.
        assert!(h.core.tick(h.now, &mut images).is_empty());
        h.now = h.core.next_wake().unwrap();
    }
    // The schedule: the gate's base doubling to its cap.
    let gaps: Vec<u64> = starts.windows(2).map(|w| (w[1] - w[0]).as_secs()).collect();
    assert_eq!(gaps, [10, 20, 40, 80, 160]);
    let counters = h.core.counters();
    assert_eq!(counters.crash_loops, 0);
    assert_eq!(
        (counters.starts, counters.network_refusals),
        (0, 12),
        "a refusal is not a start: {counters:?}"
    );
    // The operator removed it: the next start passes, and the fault is cleared.
    let started = h.tick();
    assert_eq!(started.len(), 2);
    assert!(h.core.faults().is_empty(), "{:?}", h.core.faults());
    let counters = h.core.counters();
    assert_eq!((counters.starts, counters.restarts), (2, 0), "{counters:?}");
}

// r[verify workload.network.foreign]
// A foreign refusal's window, once past, does not keep `next_wake` in the past while the
// workload is held by something else (here: its dependency's health): the loop would spin.
#[test]
fn a_past_foreign_window_does_not_make_next_wake_a_past_instant() {
    let mut web = sleeper("web");
    web.network = Some(crate::config::NODE_NETWORK.into());
    web.depends_on = vec!["db".into()];
    let mut db = sleeper("db");
    db.min_run = S(1);
    let mut h = Harness::new(vec![web, db]);
    h.health_checked = true;
    h.unchecked = vec!["web".into()];
    h.resync();
    let started = h.tick();
    assert_eq!(started.len(), 1, "db first");
    let db1 = started[0].clone();
    h.health(&db1, HealthStatus::Healthy);
    let mut images = |_: &str, _: Instant| ImagePresence::Present;
    let actions = h.core.tick(h.now, &mut images);
    let [Action::Start { attempt, spec }] = &actions[..] else {
        panic!("{actions:?}")
    };
    assert_eq!(spec.workload, "web");
    h.core.on_result(
        Completion::Started {
            workload: "web".into(),
            attempt: *attempt,
            result: Err(StartError {
                container: None,
                message: "foreign".into(),
                cause: StartCause::ForeignNetwork,
            }),
        },
        h.now,
    );
    h.now += S(5);
    h.tick();
    // db goes unhealthy after its run lasted: replaced, and held unready again.
    h.health(&db1, HealthStatus::Unhealthy);
    let again = h.tick();
    assert_eq!(again.len(), 1, "db again: {:?}", h.core.status(h.now));
    h.now += S(7); // past web's 10 s foreign window
    assert!(h.tick().is_empty(), "web waits on db");
    let wake = h.core.next_wake().unwrap();
    assert!(
        wake > h.now,
        "next_wake {:?} before now: the supervisor loop would spin",
        h.now - wake
    );
}

// r[verify workload.restart.backoff+2]
// The same with a past restart back-off (a start failure, not a foreign network).
#[test]
fn a_past_back_off_does_not_make_next_wake_a_past_instant() {
    let mut web = sleeper("web");
    web.network = Some(crate::config::NODE_NETWORK.into());
    web.depends_on = vec!["db".into()];
    let mut db = sleeper("db");
    db.min_run = S(1);
    let mut h = Harness::new(vec![web, db]);
    h.health_checked = true;
    h.unchecked = vec!["web".into()];
    h.resync();
    let started = h.tick();
    assert_eq!(started.len(), 1, "db first");
    let db1 = started[0].clone();
    h.health(&db1, HealthStatus::Healthy);
    let mut images = |_: &str, _: Instant| ImagePresence::Present;
    let actions = h.core.tick(h.now, &mut images);
    let [Action::Start { attempt, spec }] = &actions[..] else {
        panic!("{actions:?}")
    };
    assert_eq!(spec.workload, "web");
    h.core.on_result(
        Completion::Started {
            workload: "web".into(),
            attempt: *attempt,
            result: Err(StartError {
                container: None,
                message: "foreign".into(),
                cause: StartCause::Failed,
            }),
        },
        h.now,
    );
    h.now += S(5);
    h.tick();
    // db goes unhealthy after its run lasted: replaced, and held unready again.
    h.health(&db1, HealthStatus::Unhealthy);
    let again = h.tick();
    assert_eq!(again.len(), 1, "db again: {:?}", h.core.status(h.now));
    h.now += S(7); // past web's 10 s foreign window
    assert!(h.tick().is_empty(), "web waits on db");
    let wake = h.core.next_wake().unwrap();
    assert!(
        wake > h.now,
        "next_wake {:?} before now: the supervisor loop would spin",
        h.now - wake
    );
}

// r[verify workload.network.foreign]
// The only workload on the node's network moved to a network of its own: the foreign_network
// fault goes, and its foreign back-off with it.
#[test]
fn the_foreign_network_fault_goes_when_its_last_workload_moves_off_the_network() {
    let mut web = sleeper("web");
    web.network = Some(crate::config::NODE_NETWORK.into());
    let mut h = Harness::new(vec![web.clone()]);
    h.resync();
    let mut images = |_: &str, _: Instant| ImagePresence::Present;
    let actions = h.core.tick(h.now, &mut images);
    let [Action::Start { attempt, .. }] = &actions[..] else {
        panic!("{actions:?}")
    };
    h.core.on_result(
        Completion::Started {
            workload: "web".into(),
            attempt: *attempt,
            result: Err(StartError {
                container: None,
                message: "foreign".into(),
                cause: StartCause::ForeignNetwork,
            }),
        },
        h.now,
    );
    assert_eq!(h.core.faults().len(), 1);
    // Moved to a network of its own: starts at once?
    let mut moved = web.clone();
    moved.network = Some("own".into());
    h.core.set_desired(vec![moved]);
    let started = h.tick();
    let faults = h.core.faults();
    assert_eq!(
        started.len(),
        1,
        "the reconfigured workload waits out the old foreign back-off: {:?}",
        h.core.status(h.now)
    );
    assert!(faults.is_empty(), "stale fault: {faults:?}");
}

// r[verify workload.network.foreign]
#[test]
fn the_foreign_network_fault_goes_when_its_last_workload_is_removed() {
    let mut web = sleeper("web");
    web.network = Some(crate::config::NODE_NETWORK.into());
    let mut h = Harness::new(vec![web.clone()]);
    h.resync();
    let mut images = |_: &str, _: Instant| ImagePresence::Present;
    let actions = h.core.tick(h.now, &mut images);
    let [Action::Start { attempt, .. }] = &actions[..] else {
        panic!("{actions:?}")
    };
    h.core.on_result(
        Completion::Started {
            workload: "web".into(),
            attempt: *attempt,
            result: Err(StartError {
                container: None,
                message: "foreign".into(),
                cause: StartCause::ForeignNetwork,
            }),
        },
        h.now,
    );
    h.core.set_desired(vec![]);
    let faults = h.core.faults();
    assert!(
        faults.is_empty(),
        "stale fault with no workload configured: {faults:?}"
    );
}

// r[verify workload.network.foreign]
// A start that got past the network (a container was created) and then failed: the network is
// the node's now, so its fault goes; the failure is the workload's own.
#[test]
fn the_foreign_network_fault_goes_once_a_start_gets_past_the_network() {
    let mut web = sleeper("web");
    web.network = Some(crate::config::NODE_NETWORK.into());
    let mut h = Harness::new(vec![web]);
    h.resync();
    let mut images = |_: &str, _: Instant| ImagePresence::Present;
    let actions = h.core.tick(h.now, &mut images);
    let [Action::Start { attempt, .. }] = &actions[..] else {
        panic!("{actions:?}")
    };
    h.core.on_result(
        Completion::Started {
            workload: "web".into(),
            attempt: *attempt,
            result: Err(StartError {
                container: None,
                message: "foreign".into(),
                cause: StartCause::ForeignNetwork,
            }),
        },
        h.now,
    );
    assert_eq!(h.core.faults().len(), 1);
    h.now += S(60);
    let actions = h.core.tick(h.now, &mut images);
    let [Action::Start { attempt, .. }] = &actions[..] else {
        panic!("{actions:?}")
    };
    h.core.on_result(
        Completion::Started {
            workload: "web".into(),
            attempt: *attempt,
            result: Err(StartError {
                container: Some("c-web".into()),
                message: "starting: no such file".into(),
                cause: StartCause::Failed,
            }),
        },
        h.now,
    );
    let faults = h.core.faults();
    assert!(
        faults.iter().all(|f| f.kind != "foreign_network"),
        "stale fault: {faults:?}"
    );
}

// r[verify workload.health.probe]
// The shell probes exactly the running containers whose check the node makes: a replaced
// container drops out (its task is aborted), a late verdict of it changes nothing, and a removed
// workload leaves nothing to probe.
#[test]
fn node_probes_follow_the_running_container_and_a_stale_verdict_is_ignored() {
    let mut web = sleeper("web");
    web.network = Some(crate::config::NODE_NETWORK.into());
    web.health = Some(crate::shape::HealthCheck {
        tcp: Some(crate::shape::TcpProbe { port: 5432 }),
        ..crate::shape::HealthCheck::default()
    });
    let mut h = Harness::new(vec![web.clone()]);
    h.health_checked = true;
    h.resync();
    let first = h.tick();
    assert_eq!(first.len(), 1);
    let probes = h.core.node_probes();
    assert_eq!(probes.len(), 1);
    assert_eq!(probes[0].0, first[0]);
    assert_eq!(
        probes[0].2.as_deref(),
        Some(module().node_network_name().as_str()),
        "the daemon's name of the node's network"
    );
    h.health(&first[0], HealthStatus::Healthy);
    h.now += S(60);
    h.tick();
    // A new spec replaces the container.
    let mut changed = web.clone();
    changed.env.insert("A".into(), "1".into());
    let actions = h.core.set_desired(vec![changed.clone()]);
    h.perform(actions);
    let second = h.until_started(S(60));
    assert_ne!(second, first[0]);
    let probes: Vec<String> = h.core.node_probes().into_iter().map(|p| p.0).collect();
    assert_eq!(
        probes,
        std::slice::from_ref(&second),
        "only the running container"
    );
    assert_eq!(h.health_of("web"), Some(HealthStatus::Starting));
    // The old container's probe task, aborted late, reports once more: ignored.
    h.health(&first[0], HealthStatus::Unhealthy);
    assert_eq!(h.health_of("web"), Some(HealthStatus::Starting));
    h.health(&second, HealthStatus::Healthy);
    assert_eq!(h.health_of("web"), Some(HealthStatus::Healthy));
    h.health(&first[0], HealthStatus::Unhealthy);
    assert_eq!(h.health_of("web"), Some(HealthStatus::Healthy));
    assert_eq!(h.running_id("web"), second);
    // Removed: nothing left to probe.
    let actions = h.core.set_desired(vec![]);
    h.perform(actions);
    assert!(h.core.node_probes().is_empty());
}

/// A fake of the node's tag checks: `ensure_fresh` is present once a check made at or after the
/// asked `since` has settled; with `auto`, an ask starts a check at once, settled by the next ask.
#[derive(Default)]
struct TagChecks {
    /// When the last settled check was made.
    checked: Option<Instant>,
    /// Each `ensure_fresh`'s `since`.
    asks: Vec<Instant>,
    /// Each plain `ensure`.
    plain: u32,
    auto: bool,
}

impl crate::images::Images for TagChecks {
    fn ensure(&mut self, _: &str, _: Instant) -> ImagePresence {
        self.plain += 1;
        ImagePresence::Present
    }

    fn ensure_fresh(&mut self, _: &str, since: Instant, now: Instant) -> ImagePresence {
        self.asks.push(since);
        if self.checked.is_some_and(|at| at >= since) {
            return ImagePresence::Present;
        }
        if self.auto {
            self.checked = Some(now);
        }
        ImagePresence::Pending {
            detail: "checking its tag".into(),
        }
    }
}

fn always(name: &str) -> WorkloadConfig {
    let mut w = WorkloadConfig::new(name, "reg.example/app:1");
    w.command = vec!["false".into()];
    w.pull_always = true;
    w
}

// r[verify workload.image.always]
#[test]
fn an_always_start_waits_for_a_tag_check_made_after_it_became_ready() {
    let mut h = Harness::new(vec![always("app")]);
    h.resync();
    // A check settled before the workload became ready does not count.
    let mut checks = TagChecks {
        checked: Some(h.now - S(1)),
        ..TagChecks::default()
    };
    let ready = h.now;
    for _ in 0..5 {
        assert!(
            h.tick_with(&mut checks).is_empty(),
            "no start before a check"
        );
        h.now += S(1);
    }
    assert!(matches!(
        h.state("app"),
        WorkloadState::WaitingForImage { .. }
    ));
    assert_eq!(
        h.core.failures("app"),
        0,
        "waiting for the check is not failing"
    );
    assert!(
        checks.asks.iter().all(|since| *since == ready),
        "{:?}",
        checks.asks
    );
    assert_eq!(
        checks.plain, 0,
        "an always workload asks for a checked image"
    );
    checks.checked = Some(h.now);
    let id = h
        .tick_with(&mut checks)
        .pop()
        .expect("started once checked");
    // It exits: the restart waits out its back-off, then for a check made after it.
    h.die(&id, 1, &["boom"]);
    let died = h.now;
    let asked = checks.asks.len();
    while h.now < died + S(10) {
        h.now += S(1);
        assert!(
            h.tick_with(&mut checks).is_empty(),
            "the earlier check does not do"
        );
    }
    let restart_ready = *checks.asks.last().unwrap();
    assert!(
        restart_ready >= died + S(10),
        "asked only once the back-off was over"
    );
    assert!(
        checks.asks[asked..]
            .iter()
            .all(|since| *since == restart_ready),
        "one readiness per start"
    );
    h.now += S(2);
    checks.checked = Some(h.now);
    assert_eq!(
        h.tick_with(&mut checks).len(),
        1,
        "restarted once checked again"
    );
    // Without the policy, no check is asked for.
    let mut plain = TagChecks::default();
    let mut h2 = Harness::new(vec![sleeper("web")]);
    h2.resync();
    assert_eq!(h2.tick_with(&mut plain).len(), 1);
    assert!(plain.asks.is_empty());
    assert_eq!(plain.plain, 1);
}

// r[verify workload.image.always]
#[test]
fn a_crash_looping_always_workload_asks_once_per_start() {
    let mut h = Harness::new(vec![always("app")]);
    h.resync();
    let mut checks = TagChecks {
        auto: true,
        ..TagChecks::default()
    };
    let mut starts = 0;
    let end = h.now + S(1200);
    while h.now < end {
        if let Some(id) = h.tick_with(&mut checks).pop() {
            starts += 1;
            h.die(&id, 1, &["boom"]);
        }
        h.now += S(1);
    }
    let mut checked: Vec<Instant> = checks.asks.clone();
    checked.dedup();
    assert!(starts >= 5, "a crash loop: {starts} starts");
    // Each start was ready once (one `since`), asked while its check ran and once it settled.
    let waiting = usize::from(matches!(
        h.state("app"),
        WorkloadState::WaitingForImage { .. }
    ));
    assert_eq!(
        checked.len(),
        starts + waiting,
        "one readiness per start (and the one waiting)"
    );
    assert!(
        checks.asks.len() <= 2 * checked.len(),
        "{} asks for {} starts",
        checks.asks.len(),
        starts
    );
}

// r[verify workload.image.always]
#[test]
fn a_start_after_an_adopted_run_waits_for_a_check_made_after_that_run() {
    let mut h = Harness::new(vec![always("app")]);
    h.resync();
    let mut checks = TagChecks::default();
    // Ready, waiting for a check that does not come.
    let ready = h.now;
    assert!(h.tick_with(&mut checks).is_empty());
    assert_eq!(checks.asks, vec![ready]);
    // A re-list finds a running container of its spec: adopted, it runs and lasts.
    h.now += S(5);
    let hash = always("app").spec_hash();
    h.daemon.push(("c1".into(), "app".into(), hash, true));
    h.resync();
    assert_eq!(h.running_id("app"), "c1");
    h.now += S(1);
    // A check made after the old readiness, but before the adopted run ended.
    checks.checked = Some(h.now);
    h.now += S(120);
    assert!(h.tick_with(&mut checks).is_empty());
    h.die("c1", 1, &["boom"]);
    let died = h.now;
    let asked = checks.asks.len();
    while checks.asks.len() == asked && h.now < died + S(600) {
        assert!(
            h.tick_with(&mut checks).is_empty(),
            "the check made before the run ended does not do"
        );
        h.now += S(1);
    }
    assert!(checks.asks[asked] >= died, "{:?}", checks.asks);
}

// r[verify workload.image.always]
#[test]
fn a_new_spec_waits_for_a_check_made_after_it_not_after_the_old_one_was_ready() {
    let mut h = Harness::new(vec![always("app")]);
    h.resync();
    let mut checks = TagChecks::default();
    let ready = h.now;
    assert!(h.tick_with(&mut checks).is_empty());
    h.now += S(5);
    let mut moved = always("app");
    moved.image = "reg.example/app:2".into();
    let actions = h.core.set_desired(vec![moved]);
    h.perform(actions);
    let changed = h.now;
    // A check made after the old readiness, before the new spec came.
    checks.checked = Some(changed - S(1));
    assert!(
        h.tick_with(&mut checks).is_empty(),
        "the new spec's start waits for its own check"
    );
    assert_eq!(checks.asks.first(), Some(&ready));
    assert_eq!(checks.asks.last(), Some(&changed));
}
