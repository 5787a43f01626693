//! The supervisors' heartbeat (the service manager's watchdog) under tokio's paused clock: a
//! supervisor's loop beats while its module runs degraded and while it waits out a back-off, and
//! stops counting once it is told to stop.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use holdfast::metrics::Metrics;
use holdfast::module::{Module, StartError, Started, StopGroup};
use holdfast::notify::Heartbeat;
use holdfast::state::NodeState;
use holdfast::supervisor::{self, SuperviseConfig};
use holdfast_lifecycle::{
    FaultBoard, Health, StopReason, StopRequest, Stopper, health_channel, stopper_fn,
};
use holdfast_retry::Policy;
use tokio::time::Instant;

/// Starts degraded and runs until stopped, or (`fails`) never starts.
struct Module1 {
    fails: bool,
}

impl Module for Module1 {
    fn name(&self) -> &str {
        "beating"
    }
    fn group(&self) -> StopGroup {
        StopGroup::Workload
    }
    fn start(&self) -> Result<Started, StartError> {
        if self.fails {
            return Err(StartError("address in use".into()));
        }
        let (reporter, health) = health_channel();
        reporter.set(Health::Degraded("backend absent".into()));
        let (end_tx, end_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _reporter = reporter;
            let _ = end_rx.await;
            Ok(())
        });
        Ok(Started {
            stopper: stopper_fn(move |_| async move {
                let _ = end_tx.send(());
                Ok(())
            }),
            health,
            task,
        })
    }
}

fn config() -> SuperviseConfig {
    SuperviseConfig {
        policy: Policy::builder()
            .base(Duration::from_secs(60))
            .cap(Duration::from_secs(60))
            .build()
            .unwrap(),
        must_last: Duration::from_secs(30),
        crash_loop_threshold: 3,
        crash_loop_window: Duration::from_secs(60),
    }
}

async fn beats_while_it_runs(fails: bool) {
    let every = Duration::from_millis(500);
    let heartbeat = Heartbeat::every(every);
    let node = NodeState::new("n", FaultBoard::new(), Metrics::new());
    let s = supervisor::spawn_with_heartbeat(
        Arc::new(Module1 { fails }),
        config(),
        node,
        heartbeat.clone(),
    );
    // 90 s: degraded the whole time (never confirmed), or waiting out 60 s back-offs.
    for _ in 0..180 {
        tokio::time::sleep(every).await;
        let beats = heartbeat.beats();
        assert_eq!(beats.len(), 1, "{beats:?}");
        let age = Instant::now().saturating_duration_since(beats[0].1);
        assert!(age <= every, "the loop last beat {age:?} ago");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    Box::new(s.stopper)
        .stop(StopRequest {
            reason: StopReason::Shutdown,
            deadline,
        })
        .await
        .unwrap();
    assert!(heartbeat.beats().is_empty(), "{:?}", heartbeat.beats());
}

// r[verify node.systemd.watchdog]
#[tokio::test(start_paused = true)]
async fn a_supervisor_beats_while_its_module_runs_degraded_and_leaves_when_stopped() {
    beats_while_it_runs(false).await;
}

// r[verify node.systemd.watchdog]
#[tokio::test(start_paused = true)]
async fn a_supervisor_beats_while_it_waits_out_a_back_off() {
    beats_while_it_runs(true).await;
}
