//! What the stop plan and the fault board log. A file of its own: tracing caches each call
//! site's interest process-wide, so a thread-local subscriber in a binary whose other tests log
//! without one can miss events.

// Test helpers outside #[test] fns: a broken setup should fail loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use holdfast_lifecycle::{FaultBoard, StopPlan, StopReason, Subject, stopper_fn};

const S: Duration = Duration::from_secs(1);

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
}

// r[verify lifecycle.stop.cutoff]
#[tokio::test(start_paused = true)]
async fn every_module_outcome_is_logged() {
    let buf = Capture::default();
    let _guard = tracing::subscriber::set_default(buf.subscriber());
    let mut plan = StopPlan::new(4 * S);
    let g = plan.group("g", 1);
    plan.add(g, "fine", stopper_fn(|_| async { Ok(()) }));
    plan.add(g, "stuck", stopper_fn(|_| std::future::pending()));
    plan.run(StopReason::Shutdown, std::future::pending()).await;
    let out = buf.text();
    assert!(
        out.contains("module stopped") && out.contains("module=\"fine\""),
        "{out}"
    );
    assert!(
        out.contains("cut off") && out.contains("module=\"stuck\""),
        "{out}"
    );
}

// r[verify lifecycle.fault.board]
#[test]
fn filing_and_clearing_are_each_logged_once() {
    let buf = Capture::default();
    tracing::subscriber::with_default(buf.subscriber(), || {
        let board = FaultBoard::new();
        let s = Subject::new("pull", "app:1");
        board.file(s.clone(), "unreachable", "dial refused", 5, at(0));
        board.file(s.clone(), "unreachable", "dial refused", 6, at(1));
        board.file(s.clone(), "unreachable", "dial refused", 7, at(2));
        board.clear(&s);
        board.clear(&s);
    });
    let out = buf.text();
    assert_eq!(out.matches("fault filed").count(), 1, "{out}");
    assert_eq!(out.matches("fault cleared").count(), 1, "{out}");
    assert!(
        out.contains("pull/app:1") && out.contains("dial refused"),
        "{out}"
    );
}

// r[verify lifecycle.fault.board]
#[test]
fn clearing_a_module_is_logged_once_and_only_when_it_cleared_something() {
    let buf = Capture::default();
    let board = FaultBoard::new();
    assert!(board.is_empty());
    assert_eq!(board.len(), 0);
    tracing::subscriber::with_default(buf.subscriber(), || {
        for name in ["app:1", "app:2"] {
            board.file(
                Subject::new("pull", name),
                "unreachable",
                "refused",
                3,
                at(0),
            );
        }
        board.file(
            Subject::new("issuance", "a.test"),
            "rejected",
            "no",
            3,
            at(0),
        );
        assert_eq!(board.len(), 3);
        assert_eq!(board.clear_module("gateway"), 0);
        assert_eq!(board.clear_module("pull"), 2);
        assert_eq!(board.clear_module("pull"), 0);
    });
    let out = buf.text();
    assert_eq!(out.matches("faults of module cleared").count(), 1, "{out}");
    assert!(out.contains("module=\"pull\" cleared=2"), "{out}");
    assert_eq!(board.len(), 1, "the other module's fault stays");
    assert!(!board.is_empty());
}

/// A `MakeWriter` that keeps what tracing writes.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Capture {
    /// A plain-text subscriber that writes here.
    fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync + use<> {
        tracing_subscriber::fmt()
            .with_writer(self.clone())
            .with_ansi(false)
            .finish()
    }

    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

impl std::io::Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Capture {
    type Writer = Capture;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}
