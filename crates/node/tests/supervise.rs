//! Module supervision under tokio's paused clock: starts and restarts follow the gate's schedule
//! exactly, a crash loop is one fault, and a short or degraded run never resets the gate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use holdfast::metrics::Metrics;
use holdfast::module::{Module, ModuleError, StartError, Started, StopGroup};
use holdfast::state::NodeState;
use holdfast::supervisor::{self, SuperviseConfig};
use holdfast_lifecycle::{
    FaultBoard, Health, StopReason, StopRequest, Stopper, health_channel, stopper_fn,
};
use holdfast_retry::{Jitter, Policy};
use tokio::time::Instant;

#[derive(Clone, Copy)]
enum Behaviour {
    FailToStart,
    /// `start` panics.
    PanicInStart,
    /// Starts (ready), then its task returns `Ok` after this long.
    ReturnAfter(Duration),
    /// Starts ready, turns degraded after this long, and never ends; the test holds its health
    /// reporter.
    ReadyThenDegraded(Duration),
    /// Starts (ready), then its task fails after this long.
    CrashAfter(Duration),
    /// Starts degraded, then its task fails after this long.
    DegradedCrashAfter(Duration),
}

#[derive(Default)]
struct Probes {
    /// The instance's stopper was called, with this much time left to its deadline.
    stopper_called: Mutex<Option<Duration>>,
    /// The stopper returns at once and leaves the task running.
    lingers: AtomicBool,
    /// The stopper never returns.
    hangs: AtomicBool,
    /// The task was dropped (ended or aborted).
    task_dropped: AtomicBool,
    /// A stop has been sent: a start after this is a bug.
    stop_sent: AtomicBool,
    /// Starts that happened after a stop was sent.
    starts_after_stop: AtomicUsize,
    /// The latest instance's health reporter (ReadyThenDegraded).
    reporter: Mutex<Option<holdfast_lifecycle::HealthReporter>>,
}

struct TestModule {
    behaviour: Behaviour,
    origin: Instant,
    starts: Arc<Mutex<Vec<u64>>>,
    probes: Arc<Probes>,
}

/// Sets a flag when dropped: tells whether a task ended or was aborted.
struct DropFlag(Arc<Probes>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.task_dropped.store(true, Ordering::SeqCst);
    }
}

impl Module for TestModule {
    fn name(&self) -> &str {
        "test"
    }
    fn group(&self) -> StopGroup {
        StopGroup::Workload
    }
    fn start(&self) -> Result<Started, StartError> {
        self.starts
            .lock()
            .unwrap()
            .push(Instant::now().duration_since(self.origin).as_secs());
        if self.probes.stop_sent.load(Ordering::SeqCst) {
            self.probes.starts_after_stop.fetch_add(1, Ordering::SeqCst);
        }
        let (after, health, returns) = match self.behaviour {
            Behaviour::FailToStart => return Err(StartError("address in use".into())),
            Behaviour::PanicInStart => panic!("adapter unwrap"),
            Behaviour::CrashAfter(d) => (d, Health::Ready, false),
            Behaviour::ReturnAfter(d) => (d, Health::Ready, true),
            Behaviour::DegradedCrashAfter(d) => {
                (d, Health::Degraded("backend absent".into()), false)
            }
            Behaviour::ReadyThenDegraded(d) => (d, Health::Ready, false),
        };
        let (reporter, watch) = health_channel();
        reporter.set(health);
        let (end_tx, end_rx) = tokio::sync::oneshot::channel::<()>();
        let flag = DropFlag(Arc::clone(&self.probes));
        let task = if let Behaviour::ReadyThenDegraded(d) = self.behaviour {
            *self.probes.reporter.lock().unwrap() = Some(reporter.clone());
            tokio::spawn(async move {
                let _flag = flag;
                tokio::time::sleep(d).await;
                reporter.set(Health::Degraded("docker went away".into()));
                let _ = end_rx.await;
                Ok(())
            })
        } else {
            tokio::spawn(async move {
                let _flag = flag;
                let _reporter = reporter;
                tokio::select! {
                    () = tokio::time::sleep(after) => {}
                    _ = end_rx => return Ok(()),
                }
                if returns {
                    Ok(())
                } else {
                    Err::<(), _>(ModuleError("boom".into()))
                }
            })
        };
        let probes = Arc::clone(&self.probes);
        Ok(Started {
            stopper: stopper_fn(move |request: StopRequest| async move {
                *probes.stopper_called.lock().unwrap() =
                    Some(request.deadline.saturating_duration_since(Instant::now()));
                if probes.hangs.load(Ordering::SeqCst) {
                    std::future::pending::<()>().await;
                }
                if !probes.lingers.load(Ordering::SeqCst) {
                    let _ = end_tx.send(());
                } else {
                    std::mem::forget(end_tx);
                }
                Ok(())
            }),
            health: watch,
            task,
        })
    }
}

fn config() -> SuperviseConfig {
    SuperviseConfig {
        policy: Policy::builder()
            .base(Duration::from_secs(1))
            .cap(Duration::from_secs(300))
            .escalate_after(5)
            .jitter(Jitter::None)
            .build()
            .unwrap(),
        must_last: Duration::from_secs(30),
        crash_loop_threshold: 3,
        crash_loop_window: Duration::from_secs(60),
    }
}

fn setup(behaviour: Behaviour) -> (NodeState, Arc<Mutex<Vec<u64>>>, supervisor::Supervised) {
    let (node, starts, s, _) = setup_probed(behaviour);
    (node, starts, s)
}

fn setup_probed(
    behaviour: Behaviour,
) -> (
    NodeState,
    Arc<Mutex<Vec<u64>>>,
    supervisor::Supervised,
    Arc<Probes>,
) {
    let node = NodeState::new("test-node", FaultBoard::new(), Metrics::new());
    let starts = Arc::new(Mutex::new(Vec::new()));
    let probes = Arc::new(Probes::default());
    let module = TestModule {
        behaviour,
        origin: Instant::now(),
        starts: Arc::clone(&starts),
        probes: Arc::clone(&probes),
    };
    let s = supervisor::spawn(Arc::new(module), config(), node.clone());
    (node, starts, s, probes)
}

fn stop_request(within: Duration) -> StopRequest {
    StopRequest {
        deadline: Instant::now() + within,
        reason: StopReason::Shutdown,
    }
}

/// Runs a paused-clock test on its own thread and fails it if it has not finished within
/// `limit` of real time: a supervisor that spins keeps tokio from auto-advancing its clock, so
/// the test would hang instead of failing.
fn with_watchdog(limit: std::time::Duration, test: impl FnOnce() + Send + 'static) {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(test));
        let _ = done.send(result);
    });
    match finished.recv_timeout(limit) {
        Ok(Ok(())) => {}
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => panic!("the test did not finish within {limit:?}: the supervisor spins"),
    }
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

fn status(node: &NodeState) -> holdfast::state::ModuleStatus {
    node.modules()
        .into_iter()
        .find(|m| m.name == "test")
        .unwrap()
}

// r[verify node.supervise.start+2]
#[tokio::test(start_paused = true)]
async fn a_module_that_fails_to_start_is_retried_on_the_schedule_and_faulted_once() {
    let (node, starts, _s) = setup(Behaviour::FailToStart);
    tokio::time::sleep(Duration::from_millis(62_500)).await;
    // base 1 s doubling: waits 1, 2, 4, 8, 16, 32 s.
    assert_eq!(*starts.lock().unwrap(), vec![0, 1, 3, 7, 15, 31]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(*starts.lock().unwrap(), vec![0, 1, 3, 7, 15, 31, 63]);
    let faults = node.faults.list();
    assert_eq!(faults.len(), 1, "one fault for the module: {faults:?}");
    assert_eq!(faults[0].kind, "start_failed");
    assert_eq!(faults[0].failures, 7);
    assert!(faults[0].message.contains("address in use"));
    // Never given up: the cap is reached and attempts go on.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let n = starts.lock().unwrap().len();
    assert!((17..=20).contains(&n), "{n} starts in the first hour");
    // The operator's account (`holdfast modules`) counts every start, failed ones included.
    assert_eq!(status(&node).starts, u32::try_from(n).unwrap());
    assert_eq!(status(&node).failures, u32::try_from(n).unwrap());
}

// r[verify node.supervise.crash-loop+2]
#[tokio::test(start_paused = true)]
async fn a_module_that_crashes_at_once_is_a_crash_loop_paced_and_one_fault() {
    let (node, starts, _s) = setup(Behaviour::CrashAfter(Duration::ZERO));
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(*starts.lock().unwrap(), vec![0, 1]);
    assert!(node.faults.is_empty(), "two crashes are not a loop yet");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(*starts.lock().unwrap(), vec![0, 1, 3]);
    let faults = node.faults.list();
    assert_eq!(faults.len(), 1);
    assert_eq!(faults[0].kind, "crash_loop");
    assert!(status(&node).crash_loop);
    tokio::time::sleep(Duration::from_secs(60)).await;
    // Restarts go on at the gate's pace, not at full speed; still one fault.
    assert_eq!(*starts.lock().unwrap(), vec![0, 1, 3, 7, 15, 31, 63]);
    assert_eq!(node.faults.len(), 1);
    assert_eq!(node.faults.list()[0].kind, "crash_loop");
    assert_eq!(status(&node).restarts, 7);
    // The operator's account counts every start: the first and the six restarts so far (the
    // seventh end's restart is still due; `restarts` counts the ends).
    assert_eq!(status(&node).starts, 7);
}

// r[verify node.supervise.start+2]
#[tokio::test(start_paused = true)]
async fn a_short_run_does_not_reset_the_gate_but_a_run_that_lasted_does() {
    // Crashes 10 s after each start, before must_last (30 s): the streak grows.
    let (node, starts, _s) = setup(Behaviour::CrashAfter(Duration::from_secs(10)));
    tokio::time::sleep(Duration::from_millis(100_500)).await;
    // start 0, crash 10, wait 1; start 11, crash 21, wait 2; start 23, crash 33, wait 4;
    // start 37, crash 47, wait 8; start 55, crash 65, wait 16; start 81, crash 91, wait 32.
    assert_eq!(*starts.lock().unwrap(), vec![0, 11, 23, 37, 55, 81]);
    assert_eq!(status(&node).failures, 6);

    // Crashes 40 s after each start: each run lasted, so each crash starts a new streak.
    let (node, starts, _s) = setup(Behaviour::CrashAfter(Duration::from_secs(40)));
    tokio::time::sleep(Duration::from_millis(204_500)).await;
    // start 0, confirmed 30, crash 40 (failure 1 of a new streak), wait 1; start 41, ...
    assert_eq!(*starts.lock().unwrap(), vec![0, 41, 82, 123, 164]);
    assert_eq!(
        status(&node).failures,
        1,
        "each crash after a run that lasted is failure 1"
    );
}

// r[verify node.supervise.degraded+2]
#[tokio::test(start_paused = true)]
async fn a_module_that_comes_up_degraded_never_resets_the_gate() {
    let (node, starts, _s) = setup(Behaviour::DegradedCrashAfter(Duration::from_secs(40)));
    tokio::time::sleep(Duration::from_millis(30_500)).await;
    let running = status(&node);
    assert_eq!(
        running.supervisor,
        holdfast::state::SupervisorState::Running { confirmed: false }
    );
    assert_eq!(running.health, Health::Degraded("backend absent".into()));
    tokio::time::sleep(Duration::from_secs(100)).await;
    // Lasted past must_last each time, but never ready: the streak grows (waits 1, 2, 4 s).
    assert_eq!(*starts.lock().unwrap(), vec![0, 41, 83, 127]);
    assert_eq!(status(&node).failures, 3);
}

// r[verify node.supervise.stop+2]
#[tokio::test(start_paused = true)]
async fn stopping_a_supervisor_stops_its_instance_and_ends_restarts() {
    let (node, starts, s, probes) = setup_probed(Behaviour::CrashAfter(Duration::from_secs(3600)));
    tokio::time::sleep(Duration::from_secs(5)).await;
    Box::new(s.stopper)
        .stop(stop_request(Duration::from_secs(1)))
        .await
        .unwrap();
    s.task.await.unwrap();
    tokio::time::sleep(Duration::from_secs(7200)).await;
    assert_eq!(*starts.lock().unwrap(), vec![0]);
    assert_eq!(
        status(&node).supervisor,
        holdfast::state::SupervisorState::Stopped
    );
    // The instance's own stopper was called, with the request's deadline passed through, and
    // its task has ended.
    assert_eq!(
        *probes.stopper_called.lock().unwrap(),
        Some(Duration::from_secs(1))
    );
    assert!(probes.task_dropped.load(Ordering::SeqCst));
}

// r[verify node.supervise.stop+2]
#[tokio::test(start_paused = true)]
async fn a_task_that_outlives_its_stopper_is_aborted_at_the_deadline_and_the_stop_fails() {
    let (_node, _starts, s, probes) =
        setup_probed(Behaviour::CrashAfter(Duration::from_secs(3600)));
    probes.lingers.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let began = Instant::now();
    let result = Box::new(s.stopper)
        .stop(stop_request(Duration::from_secs(2)))
        .await;
    assert!(
        result.is_err(),
        "a task left running was reported as a clean stop"
    );
    assert_eq!(
        began.elapsed(),
        Duration::from_secs(2),
        "waits for the task until the deadline"
    );
    tokio::task::yield_now().await;
    assert!(
        probes.task_dropped.load(Ordering::SeqCst),
        "the task was not aborted"
    );
}

// r[verify node.supervise.stop+2]
#[tokio::test(start_paused = true)]
async fn a_stop_that_arrives_with_a_due_restart_wins() {
    // Many supervisors whose back-off runs out at the instant the stop arrives: without a
    // stop-first choice, about half of them would start once more.
    let all: Vec<_> = (0..32)
        .map(|_| setup_probed(Behaviour::FailToStart))
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut stops = Vec::new();
    let mut probed = Vec::new();
    for (_node, _starts, s, probes) in all {
        let mut stop = Box::new(s.stopper).stop(stop_request(Duration::from_secs(1)));
        // Poll once here, so the stop is sent before any supervisor runs again.
        std::future::poll_fn(|cx| {
            let _ = stop.as_mut().poll(cx);
            std::task::Poll::Ready(())
        })
        .await;
        probes.stop_sent.store(true, Ordering::SeqCst);
        stops.push(stop);
        probed.push(probes);
    }
    for stop in stops {
        stop.await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(600)).await;
    let late: usize = probed
        .iter()
        .map(|p| p.starts_after_stop.load(Ordering::SeqCst))
        .sum();
    assert_eq!(late, 0, "starts after a stop was sent");
}

// r[verify node.supervise.start+2]
#[tokio::test(start_paused = true)]
async fn a_module_that_panics_in_start_is_retried_on_the_schedule_and_faulted() {
    let (node, starts, s) = setup(Behaviour::PanicInStart);
    tokio::time::sleep(Duration::from_millis(62_500)).await;
    assert_eq!(*starts.lock().unwrap(), vec![0, 1, 3, 7, 15, 31]);
    assert!(!s.task.is_finished(), "the supervisor died with the panic");
    let faults = node.faults.list();
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert_eq!(faults[0].kind, "start_failed");
    assert!(
        faults[0].message.contains("start panicked: adapter unwrap"),
        "{}",
        faults[0].message
    );
    // The supervisor still answers the stop plan.
    Box::new(s.stopper)
        .stop(stop_request(Duration::from_secs(1)))
        .await
        .unwrap();
}

// r[verify node.supervise.crash-loop+2]
#[tokio::test(start_paused = true)]
async fn a_module_task_that_returns_at_once_is_a_crash_loop() {
    let (node, starts, _s) = setup(Behaviour::ReturnAfter(Duration::ZERO));
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    assert_eq!(*starts.lock().unwrap(), vec![0, 1, 3]);
    let faults = node.faults.list();
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert_eq!(faults[0].kind, "crash_loop");
    assert!(faults[0].message.contains("module task returned"));
    assert!(status(&node).crash_loop);
}

// r[verify node.supervise.degraded+2]
#[test]
fn a_module_that_turns_degraded_before_must_last_waits_without_spinning_and_confirms_when_ready() {
    with_watchdog(std::time::Duration::from_secs(30), || {
        paused_runtime().block_on(async {
            let (node, starts, _s, probes) =
                setup_probed(Behaviour::ReadyThenDegraded(Duration::from_secs(5)));
            // Ready at 0, degraded at 5, must_last (30 s) passes at 30 while degraded.
            tokio::time::sleep(Duration::from_secs(120)).await;
            assert_eq!(*starts.lock().unwrap(), vec![0]);
            assert_eq!(
                status(&node).supervisor,
                holdfast::state::SupervisorState::Running { confirmed: false },
                "a start that is degraded when must_last passes is not a success"
            );
            // Ready again, long after must_last: confirmed at once.
            let reporter = probes.reporter.lock().unwrap().take().unwrap();
            reporter.set(Health::Ready);
            tokio::time::sleep(Duration::from_millis(10)).await;
            assert_eq!(
                status(&node).supervisor,
                holdfast::state::SupervisorState::Running { confirmed: true }
            );
            drop(reporter);
        });
    });
}

// r[verify node.supervise.stop+2]
#[tokio::test(start_paused = true)]
async fn a_stopper_that_hangs_does_not_leave_the_task_running() {
    let (_node, _starts, s, probes) =
        setup_probed(Behaviour::CrashAfter(Duration::from_secs(3600)));
    probes.hangs.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let result = Box::new(s.stopper)
        .stop(stop_request(Duration::from_secs(2)))
        .await;
    assert!(
        result.is_err(),
        "a hanging stopper was reported as a clean stop"
    );
    tokio::task::yield_now().await;
    assert!(
        probes.task_dropped.load(Ordering::SeqCst),
        "the task was not aborted"
    );
}

// r[verify node.supervise.degraded+2]
#[test]
fn a_module_ready_again_before_must_last_is_confirmed_when_must_last_passes() {
    with_watchdog(std::time::Duration::from_secs(30), || {
        paused_runtime().block_on(async {
            let (node, starts, _s, probes) =
                setup_probed(Behaviour::ReadyThenDegraded(Duration::from_secs(5)));
            // Ready at 0, degraded at 5, ready again at 10: still inside must_last (30 s).
            tokio::time::sleep(Duration::from_secs(10)).await;
            let reporter = probes.reporter.lock().unwrap().take().unwrap();
            reporter.set(Health::Ready);
            tokio::time::sleep(Duration::from_millis(19_500)).await;
            assert_eq!(
                status(&node).supervisor,
                holdfast::state::SupervisorState::Running { confirmed: false },
                "confirmed before must_last passed"
            );
            // No further health report comes: the must_last timer, armed again by the ready
            // report, confirms the start at 30 s.
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert_eq!(
                status(&node).supervisor,
                holdfast::state::SupervisorState::Running { confirmed: true }
            );
            assert_eq!(*starts.lock().unwrap(), vec![0]);
            drop(reporter);
        });
    });
}

// r[verify node.supervise.stop+2]
// r[verify node.reload.apply]
#[tokio::test(start_paused = true)]
async fn a_stopped_supervisor_has_published_stopped_and_not_ready_when_its_stop_answers() {
    let (node, _, s) = setup(Behaviour::CrashAfter(Duration::from_secs(3600)));
    let ready = || {
        node.metrics
            .module_ready
            .get_or_create(&holdfast::metrics::module("test"))
            .get()
    };
    for _ in 0..100 {
        if ready() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(ready(), 1);
    Box::new(s.stopper)
        .stop(stop_request(Duration::from_secs(1)))
        .await
        .unwrap();
    // Read on the answer, before the supervisor's task is awaited: a reload removes the module
    // right after, and a later publication would bring it back.
    assert_eq!(
        status(&node).supervisor,
        holdfast::state::SupervisorState::Stopped
    );
    assert_eq!(ready(), 0);
}
