//! Module supervision under tokio's paused clock: starts and restarts follow the gate's schedule
//! exactly, a crash loop is one fault, and a short or degraded run never resets the gate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

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
    /// Starts (ready), then its task fails after this long.
    CrashAfter(Duration),
    /// Starts degraded, then its task fails after this long.
    DegradedCrashAfter(Duration),
}

struct TestModule {
    behaviour: Behaviour,
    origin: Instant,
    starts: Arc<Mutex<Vec<u64>>>,
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
        let (after, health) = match self.behaviour {
            Behaviour::FailToStart => return Err(StartError("address in use".into())),
            Behaviour::CrashAfter(d) => (d, Health::Ready),
            Behaviour::DegradedCrashAfter(d) => (d, Health::Degraded("backend absent".into())),
        };
        let (reporter, watch) = health_channel();
        reporter.set(health);
        let task = tokio::spawn(async move {
            let _reporter = reporter;
            tokio::time::sleep(after).await;
            Err::<(), _>(ModuleError("boom".into()))
        });
        Ok(Started {
            stopper: stopper_fn(|_| async { Ok(()) }),
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
    let node = NodeState::new("test-node", FaultBoard::new(), Metrics::new());
    let starts = Arc::new(Mutex::new(Vec::new()));
    let module = TestModule {
        behaviour,
        origin: Instant::now(),
        starts: Arc::clone(&starts),
    };
    let s = supervisor::spawn(Arc::new(module), config(), node.clone());
    (node, starts, s)
}

fn status(node: &NodeState) -> holdfast::state::ModuleStatus {
    node.modules()
        .into_iter()
        .find(|m| m.name == "test")
        .unwrap()
}

// r[verify node.supervise.start]
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
    assert_eq!(status(&node).failures, u32::try_from(n).unwrap());
}

// r[verify node.supervise.crash-loop]
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
}

// r[verify node.supervise.start]
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

// r[verify node.supervise.degraded]
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

// r[verify node.supervise.stop]
#[tokio::test(start_paused = true)]
async fn stopping_a_supervisor_stops_its_instance_and_ends_restarts() {
    let (node, starts, s) = setup(Behaviour::CrashAfter(Duration::from_secs(3600)));
    tokio::time::sleep(Duration::from_secs(5)).await;
    let request = StopRequest {
        deadline: Instant::now() + Duration::from_secs(1),
        reason: StopReason::Shutdown,
    };
    Box::new(s.stopper).stop(request).await.unwrap();
    s.task.await.unwrap();
    tokio::time::sleep(Duration::from_secs(7200)).await;
    assert_eq!(*starts.lock().unwrap(), vec![0]);
    assert_eq!(
        status(&node).supervisor,
        holdfast::state::SupervisorState::Stopped
    );
}
