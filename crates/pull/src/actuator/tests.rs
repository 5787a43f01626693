//! The shell's own duties: performing the core's actions on tokio. Attempts are spawned and
//! joined (a panicking one too), cancelled when the core says so, aborted when the actuator is
//! dropped, and their progress is shown. Decisions are the core's and are tested there.

use std::collections::VecDeque;
use std::sync::Mutex as StdMutex;
use std::time::Duration;

use holdfast_retry::{Jitter, Policy};
use tokio::sync::oneshot;

use super::*;
use crate::client::Fetched;
use crate::fetcher::BoxFuture;

type Reply = oneshot::Sender<Result<Fetched, PullError>>;
type ProbeReply = oneshot::Sender<Result<(), PullError>>;

const IMG: &str = "127.0.0.1:5000/holdfast/busybox:latest";

/// A fetcher whose attempts finish when the test says so (or panic, when told to).
#[derive(Clone, Default)]
struct Scripted {
    calls: Arc<StdMutex<VecDeque<(String, Reply)>>>,
    panic_next: Arc<StdMutex<bool>>,
    /// The next `fetch` or `probe` call panics before it even returns its future.
    panic_on_call: Arc<StdMutex<bool>>,
    /// Probes wait for an answer here (one sender per probe) instead of succeeding at once.
    held_probes: Option<Arc<StdMutex<VecDeque<ProbeReply>>>>,
}

impl Scripted {
    fn pending(&self) -> usize {
        self.calls.lock().unwrap().len()
    }
    /// The oldest call not yet answered, once its attempt has run far enough to make it (the
    /// fetcher is called inside the attempt's task).
    async fn next_call(&self) -> (String, Reply) {
        for _ in 0..100 {
            if let Some(call) = self.calls.lock().unwrap().pop_front() {
                return call;
            }
            tokio::task::yield_now().await;
        }
        panic!("an attempt was started")
    }
}

impl Fetcher for Scripted {
    fn fetch(
        &self,
        reference: String,
        progress: watch::Sender<PullProgress>,
    ) -> BoxFuture<Result<Fetched, PullError>> {
        assert!(
            !std::mem::take(&mut *self.panic_on_call.lock().unwrap()),
            "fetch blew up before its future"
        );
        progress.send_replace(PullProgress {
            layers: 1,
            ..Default::default()
        });
        if std::mem::take(&mut *self.panic_next.lock().unwrap()) {
            return Box::pin(async move {
                let _progress = progress;
                panic!("fetch blew up");
            });
        }
        let (tx, rx) = oneshot::channel();
        self.calls.lock().unwrap().push_back((reference, tx));
        Box::pin(async move {
            let _progress = progress;
            rx.await
                .unwrap_or_else(|_| Err(PullError::new(PullErrorKind::Daemon, "dropped")))
        })
    }

    fn probe(&self) -> BoxFuture<Result<(), PullError>> {
        assert!(
            !std::mem::take(&mut *self.panic_on_call.lock().unwrap()),
            "probe blew up before its future"
        );
        let Some(held) = &self.held_probes else {
            return Box::pin(async { Ok(()) });
        };
        let (tx, rx) = oneshot::channel();
        held.lock().unwrap().push_back(tx);
        Box::pin(async move {
            rx.await
                .unwrap_or_else(|_| Err(PullError::new(PullErrorKind::Daemon, "dropped")))
        })
    }
}

fn config(stale_after: Duration) -> PullConfig {
    let policy = Policy::builder()
        .base(Duration::from_secs(5))
        .cap(Duration::from_secs(300))
        .escalate_after(5)
        .jitter(Jitter::None)
        .stale_after(stale_after)
        .build()
        .unwrap();
    PullConfig::builder(0)
        .image_policy(policy)
        .daemon_policy(policy)
        .stall_timeout(Duration::from_secs(1))
        .build()
        .unwrap()
}

/// Lets the runtime run until `reply`'s attempt has been dropped (cancelled or aborted).
async fn cancelled(reply: &Reply) -> bool {
    for _ in 0..100 {
        if reply.is_closed() {
            return true;
        }
        tokio::task::yield_now().await;
    }
    false
}

// r[verify actuate.image.panic]
#[tokio::test]
async fn a_panicking_attempt_is_joined_and_counted_as_a_failure() {
    let fetcher = Scripted::default();
    *fetcher.panic_next.lock().unwrap() = true;
    let mut act = Actuator::new(fetcher.clone(), config(Duration::from_secs(600))).unwrap();
    let t0 = Instant::now();
    assert!(matches!(act.ensure(IMG, t0), ImageState::Pulling { .. }));
    // The attempt panics: settle returns (it does not wait for a result that never comes)...
    tokio::time::timeout(Duration::from_secs(10), act.settle(t0))
        .await
        .expect("settle returns once the panicked attempt is joined");
    assert!(!act.has_live_attempts());
    assert_eq!(act.running_attempts(), 0);
    // ...and the reference is a paced failure, not Pulling until the stale timeout.
    match act.ensure(IMG, t0) {
        ImageState::Waiting {
            failures: 1,
            until,
            last_error,
        } => {
            assert_eq!(until, t0 + Duration::from_secs(5));
            assert_eq!(last_error.kind, PullErrorKind::Panicked);
            assert!(last_error.message.contains("fetch blew up"), "{last_error}");
        }
        other => panic!("expected a paced failure, got {other:?}"),
    }
    assert!(matches!(
        act.ensure(IMG, t0 + Duration::from_secs(5)),
        ImageState::Pulling { .. }
    ));
    tokio::task::yield_now().await;
    assert_eq!(fetcher.pending(), 1, "the next attempt came on schedule");
}

// r[verify actuate.image.panic]
#[tokio::test]
async fn a_fetcher_that_panics_before_returning_its_future_fails_the_attempt_not_the_tick() {
    let fetcher = Scripted::default();
    *fetcher.panic_on_call.lock().unwrap() = true;
    let mut act = Actuator::new(fetcher.clone(), config(Duration::from_secs(600))).unwrap();
    let t0 = Instant::now();
    // The caller's tick goes on: the panic belongs to the attempt.
    assert!(matches!(act.ensure(IMG, t0), ImageState::Pulling { .. }));
    tokio::time::timeout(Duration::from_secs(10), act.settle(t0))
        .await
        .expect("settle returns once the panicked attempt is joined");
    match act.ensure(IMG, t0) {
        ImageState::Waiting {
            failures: 1,
            last_error,
            ..
        } => {
            assert_eq!(last_error.kind, PullErrorKind::Panicked);
            assert!(
                last_error.message.contains("before its future"),
                "{last_error}"
            );
        }
        other => panic!("expected a paced failure, got {other:?}"),
    }
    assert!(matches!(
        act.ensure(IMG, t0 + Duration::from_secs(5)),
        ImageState::Pulling { .. }
    ));
    tokio::task::yield_now().await;
    tokio::task::yield_now().await;
    assert_eq!(fetcher.pending(), 1, "the next attempt came on schedule");
}

// r[verify actuate.image.panic]
#[tokio::test]
async fn a_probe_that_panics_before_returning_its_future_is_a_daemon_failure() {
    let fetcher = Scripted::default();
    let mut act = Actuator::new(fetcher.clone(), config(Duration::from_secs(600))).unwrap();
    let t0 = Instant::now();
    act.ensure(IMG, t0);
    tokio::task::yield_now().await;
    let down = PullError::new(PullErrorKind::DaemonUnreachable, "daemon socket not found");
    fetcher.next_call().await.1.send(Err(down)).unwrap();
    act.settle(t0).await;
    assert!(matches!(
        act.ensure(IMG, t0),
        ImageState::DaemonUnreachable { failures: 1, .. }
    ));
    // The probe due at 5 s panics while it is being made: the daemon's second failure.
    *fetcher.panic_on_call.lock().unwrap() = true;
    let t5 = t0 + Duration::from_secs(5);
    act.ensure(IMG, t5);
    tokio::time::timeout(Duration::from_secs(10), act.settle(t5))
        .await
        .expect("settle returns once the panicked probe is joined");
    match act.ensure(IMG, t5) {
        ImageState::DaemonUnreachable {
            failures: 2,
            last_error,
            ..
        } => assert_eq!(last_error.kind, PullErrorKind::Panicked),
        other => panic!("expected the daemon's second failure, got {other:?}"),
    }
}

// r[verify actuate.image.drop]
#[tokio::test]
async fn dropping_the_actuator_aborts_its_attempts() {
    let fetcher = Scripted::default();
    let mut act = Actuator::new(fetcher.clone(), config(Duration::from_secs(600))).unwrap();
    let t0 = Instant::now();
    act.ensure(IMG, t0);
    act.ensure("127.0.0.1:5000/holdfast/other:1", t0);
    let (_, a) = fetcher.next_call().await;
    let (_, b) = fetcher.next_call().await;
    tokio::task::yield_now().await;
    assert!(!a.is_closed() && !b.is_closed(), "both attempts run");
    drop(act);
    assert!(cancelled(&a).await, "the first attempt was aborted");
    assert!(cancelled(&b).await, "the second attempt was aborted");
}

// r[verify actuate.image.drop]
#[tokio::test]
async fn dropping_the_actuator_aborts_its_probe() {
    let held = Arc::new(StdMutex::new(VecDeque::new()));
    let fetcher = Scripted {
        held_probes: Some(held.clone()),
        ..Scripted::default()
    };
    let mut act = Actuator::new(fetcher.clone(), config(Duration::from_secs(600))).unwrap();
    let t0 = Instant::now();
    act.ensure(IMG, t0);
    let down = PullError::new(PullErrorKind::DaemonUnreachable, "daemon socket not found");
    fetcher.next_call().await.1.send(Err(down)).unwrap();
    act.settle(t0).await;
    // The daemon is down: the next attempt, due at 5 s, is a probe.
    act.ensure(IMG, t0 + Duration::from_secs(5));
    let mut probe = None;
    for _ in 0..100 {
        probe = held.lock().unwrap().pop_front();
        if probe.is_some() {
            break;
        }
        tokio::task::yield_now().await;
    }
    let probe = probe.expect("a probe was started");
    assert!(!probe.is_closed(), "the probe runs");
    drop(act);
    let mut aborted = false;
    for _ in 0..100 {
        if probe.is_closed() {
            aborted = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(aborted, "the probe was aborted");
}

// r[verify actuate.image.single-flight+3]
#[tokio::test]
async fn a_superseded_attempt_is_aborted_and_its_successor_runs() {
    let fetcher = Scripted::default();
    let mut act = Actuator::new(fetcher.clone(), config(Duration::from_secs(30))).unwrap();
    let t0 = Instant::now();
    act.ensure(IMG, t0);
    let (_, a) = fetcher.next_call().await;
    let mut now = t0 + Duration::from_secs(30);
    while fetcher.pending() == 0 {
        act.ensure(IMG, now);
        tokio::task::yield_now().await;
        now += Duration::from_secs(1);
        assert!(now < t0 + Duration::from_secs(100), "never superseded");
    }
    assert!(cancelled(&a).await, "the superseded attempt was aborted");
    let (_, b) = fetcher.next_call().await;
    assert!(!b.is_closed(), "its successor runs");
    b.send(Ok(Fetched::Pulled)).unwrap();
    act.settle(now).await;
    assert_eq!(act.ensure(IMG, now), ImageState::Present);
    assert_eq!(
        act.running_attempts(),
        0,
        "the aborted attempt was joined too"
    );
}

// r[verify actuate.image.single-flight+3]
#[tokio::test]
async fn a_forgotten_reference_has_its_attempt_aborted() {
    let fetcher = Scripted::default();
    let mut act = Actuator::new(fetcher.clone(), config(Duration::from_secs(600))).unwrap();
    let t0 = Instant::now();
    act.ensure(IMG, t0);
    let (_, a) = fetcher.next_call().await;
    act.forget(IMG);
    assert!(
        cancelled(&a).await,
        "a forgotten reference's pull is aborted"
    );
    act.settle(t0).await;
    assert!(act.faults().is_empty());
    assert_eq!(act.status(IMG), None);
}

// r[verify actuate.image.progress]
#[tokio::test]
async fn the_live_attempts_progress_is_shown() {
    let fetcher = Scripted::default();
    let mut act = Actuator::new(fetcher.clone(), config(Duration::from_secs(600))).unwrap();
    let t0 = Instant::now();
    assert!(matches!(act.ensure(IMG, t0), ImageState::Pulling { .. }));
    let reply = fetcher.next_call().await.1;
    let ImageState::Pulling { progress } = act.ensure(IMG, t0) else {
        panic!("the attempt is in flight");
    };
    assert_eq!(progress.layers, 1, "ensure shows the attempt's progress");
    assert!(matches!(
        act.status(IMG),
        Some(ImageState::Pulling { progress }) if progress.layers == 1
    ));
    assert_eq!(act.statuses().len(), 1);
    assert_eq!(act.progress(IMG).map(|p| p.layers), Some(1));
    reply
        .send(Err(PullError::new(
            PullErrorKind::RegistryUnreachable,
            "connection refused",
        )))
        .unwrap();
    act.settle(t0).await;
    assert!(matches!(act.status(IMG), Some(ImageState::Waiting { .. })));
    assert_eq!(act.progress(IMG), None, "no attempt, no progress");
}

// r[verify actuate.image.fault]
#[tokio::test]
async fn faults_go_on_the_nodes_shared_board_under_module_pull() {
    let board = FaultBoard::new();
    let fetcher = Scripted::default();
    let mut act = Actuator::with_fault_board(
        fetcher.clone(),
        config(Duration::from_secs(600)),
        board.clone(),
    )
    .unwrap();
    let t0 = Instant::now();
    act.ensure(IMG, t0);
    let not_found = PullError::new(PullErrorKind::NotFound, "manifest unknown");
    fetcher.next_call().await.1.send(Err(not_found)).unwrap();
    act.settle(t0).await;
    let subject = holdfast_lifecycle::Subject::new("pull", format!("image {IMG}"));
    let fault = board.get(&subject).expect("filed on the shared board");
    assert_eq!(fault.kind, "not-found");
    assert_eq!(fault.message, "manifest unknown");
    assert_eq!(act.faults(), board.of_module("pull"));
    // The next success clears it there.
    act.ensure(IMG, t0 + Duration::from_secs(5));
    fetcher
        .next_call()
        .await
        .1
        .send(Ok(Fetched::Pulled))
        .unwrap();
    act.settle(t0 + Duration::from_secs(5)).await;
    assert!(board.is_empty(), "{:?}", board.list());
}
