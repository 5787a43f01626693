//! Expiry through the issuer, on its injected clock: a certificate whose renewal keeps failing is
//! a fault from 7 days before its end, and once past its end it is neither handed out nor
//! deployed, until a renewal succeeds.

// Test helpers outside `#[test]` functions: clippy.toml's test allowance does not reach them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use holdfast_issuance::cert::testing::leaf_for;
use holdfast_issuance::issuer::{Hostname, Issuer, Outputs};
use holdfast_issuance::source::BoxFuture;
use holdfast_issuance::{
    CertStore, CertifiedPair, DeployConfig, ErrorClass, HistoryDb, IssuePolicy, ManualWallClock,
    Source, SourceError, WallClock,
};

const DAY: Duration = Duration::from_secs(86400);

/// Issues a 90-day leaf from `issued_at`, or fails while `failing`.
struct Flaky {
    failing: AtomicBool,
    issued_at: Mutex<SystemTime>,
}

impl Flaky {
    fn new(issued_at: SystemTime) -> Arc<Self> {
        Arc::new(Self {
            failing: AtomicBool::new(false),
            issued_at: Mutex::new(issued_at),
        })
    }
}

impl Source for Flaky {
    fn name(&self) -> &str {
        "flaky"
    }

    fn obtain<'a>(
        &'a self,
        names: &'a [String],
    ) -> BoxFuture<'a, Result<CertifiedPair, SourceError>> {
        Box::pin(async move {
            if self.failing.load(Ordering::SeqCst) {
                return Err(SourceError::new(ErrorClass::Unreachable, "CA down"));
            }
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let issued_at = *self.issued_at.lock().unwrap();
            let (chain, key) = leaf_for(&refs, issued_at, 90 * DAY);
            CertifiedPair::parse_bundle_for(names, &format!("{key}{chain}"))
                .map_err(|e| SourceError::new(ErrorClass::BadCertificate, e.to_string()))
        })
    }
}

fn issuer(dir: &Path, source: Arc<Flaky>, clock: &ManualWallClock) -> Issuer {
    let deploy: DeployConfig =
        serde_json::from_value(serde_json::json!({ "dir": dir.join("deployed") })).unwrap();
    let outputs = HashMap::from([(
        "a.example".to_owned(),
        Outputs {
            deploy: Some(deploy.target("a.example", true).unwrap()),
            ..Outputs::default()
        },
    )]);
    Issuer::new(
        IssuePolicy::standard(5),
        vec![Hostname::new("a.example", source)],
        HistoryDb::open(&dir.join("attempts.sqlite"), 50).unwrap(),
        CertStore::new(&dir.join("certs")).unwrap(),
        Arc::new(clock.clone()),
        Duration::from_secs(30),
    )
    .unwrap()
    .with_outputs(outputs)
}

fn expiry_fault(issuer: &Issuer) -> Option<(String, String)> {
    issuer
        .fault_board()
        .of_module("issuance")
        .into_iter()
        .find(|f| f.subject.name == "a.example/expiry")
        .map(|f| (f.kind.to_string(), f.message.clone()))
}

// r[verify issue.expiry+2]
// r[verify issue.expiry.fault]
#[tokio::test]
async fn a_failing_renewal_is_a_fault_a_week_out_and_an_expired_certificate_is_not_served() {
    let dir = tempfile::tempdir().unwrap();
    let start = SystemTime::now();
    let clock = ManualWallClock::new(start);
    let source = Flaky::new(start - Duration::from_secs(60));
    let issuer = issuer(dir.path(), source.clone(), &clock);
    assert_eq!(issuer.tick().await.unwrap().issued, ["a.example"]);
    let deployed = dir.path().join("deployed/a.example/fullchain.pem");
    assert!(deployed.exists());
    std::fs::remove_dir_all(dir.path().join("deployed/a.example")).unwrap();

    // Renewal due (two thirds of 90 days) and failing, a month left: no expiry fault yet.
    source.failing.store(true, Ordering::SeqCst);
    clock.advance(61 * DAY);
    let report = issuer.tick().await.unwrap();
    assert_eq!(report.failed.len(), 1, "{report:?}");
    assert_eq!(expiry_fault(&issuer), None);

    // Six days left, renewal still failing: one fault, kind `expiring`, still served.
    clock.advance(23 * DAY);
    assert_eq!(issuer.tick().await.unwrap().failed.len(), 1);
    let (kind, message) = expiry_fault(&issuer).expect("an expiry fault");
    assert_eq!(kind, "expiring");
    assert!(message.contains("CA down"), "{message}");
    assert!(issuer.store().get("a.example").is_some());

    // Past its end: `expired`, no longer handed out, still shown and still on disk.
    clock.advance(7 * DAY);
    issuer.force_retry("a.example").unwrap();
    assert_eq!(issuer.tick().await.unwrap().failed.len(), 1);
    let (kind, _) = expiry_fault(&issuer).expect("an expiry fault");
    assert_eq!(kind, "expired");
    assert_eq!(issuer.store().get("a.example"), None);
    assert!(issuer.store().snapshot().is_empty());
    let status = &issuer.statuses().unwrap()[0];
    assert!(status.not_after.is_some(), "{status:?}");
    assert!(issuer.store().stored("a.example").is_some());

    // A restart past the end does not deploy the expired certificate.
    drop(issuer);
    let issuer = self::issuer(dir.path(), source.clone(), &clock);
    issuer.tick().await.unwrap();
    assert!(!deployed.exists(), "an expired certificate was deployed");

    // After a restart (a fresh board), a renewal serves and deploys the new certificate; the
    // fault clearing on the same board is the next test.
    source.failing.store(false, Ordering::SeqCst);
    let source_now = Flaky::new(start + 91 * DAY);
    drop(issuer);
    let issuer = self::issuer(dir.path(), source_now, &clock);
    issuer.force_retry("a.example").unwrap();
    assert_eq!(issuer.tick().await.unwrap().issued, ["a.example"]);
    assert_eq!(expiry_fault(&issuer), None);
    assert!(issuer.store().get("a.example").is_some());
    assert!(deployed.exists());
}

/// An issuer that has issued `a.example` (not-after `start - 60 s + 90 d`) and whose renewal
/// then failed twice, the second time at `second_failure`, which is within 7 days of the end.
async fn expiring(
    dir: &Path,
    start: SystemTime,
    second_failure: SystemTime,
) -> (Issuer, Arc<Flaky>, ManualWallClock) {
    let clock = ManualWallClock::new(start);
    let source = Flaky::new(start - Duration::from_secs(60));
    let issuer = issuer(dir, source.clone(), &clock);
    assert_eq!(issuer.tick().await.unwrap().issued, ["a.example"]);
    source.failing.store(true, Ordering::SeqCst);
    clock.advance(61 * DAY);
    assert_eq!(issuer.tick().await.unwrap().failed.len(), 1);
    assert_eq!(expiry_fault(&issuer), None);
    clock.advance(second_failure.duration_since(clock.now()).unwrap());
    assert_eq!(issuer.tick().await.unwrap().failed.len(), 1);
    assert_eq!(
        expiry_fault(&issuer).map(|(kind, _)| kind).as_deref(),
        Some("expiring")
    );
    (issuer, source, clock)
}

// r[verify issue.expiry.fault]
#[tokio::test]
async fn a_renewal_on_the_same_issuer_clears_the_expiry_fault_without_a_force_retry() {
    let dir = tempfile::tempdir().unwrap();
    let start = SystemTime::now();
    let (issuer, source, clock) = expiring(dir.path(), start, start + 85 * DAY).await;

    // The CA is back; the next attempt comes once the debounce (10 min after two failures, up to
    // 20 % more) has passed, with no operator action.
    source.failing.store(false, Ordering::SeqCst);
    *source.issued_at.lock().unwrap() = clock.now();
    clock.advance(Duration::from_secs(3600));
    let report = issuer.tick().await.unwrap();
    assert_eq!(report.issued, ["a.example"], "{report:?}");
    assert_eq!(expiry_fault(&issuer), None);
    assert!(issuer.fault_board().of_module("issuance").is_empty());
}

// r[verify issue.expiry.fault]
#[tokio::test]
async fn the_fault_becomes_expired_on_a_tick_that_makes_no_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let start = SystemTime::now();
    let not_after = start - Duration::from_secs(60) + 90 * DAY;
    // The second failure two minutes before the end: the next attempt is debounced past it.
    let (issuer, _source, clock) =
        expiring(dir.path(), start, not_after - Duration::from_secs(120)).await;

    clock.advance(Duration::from_secs(180));
    let report = issuer.tick().await.unwrap();
    assert!(report.dispatched.is_empty(), "{report:?}");
    // Two failures: debounced, not blocked, so the expiry fault is the only one open.
    let faults = issuer.fault_board().of_module("issuance");
    assert_eq!(faults.len(), 1, "{faults:?}");
    let (kind, message) = expiry_fault(&issuer).expect("an expiry fault");
    assert_eq!(kind, "expired");
    assert!(message.contains("no longer served"), "{message}");
    assert_eq!(issuer.store().get("a.example"), None);
}

// r[verify issue.store.notify+2]
// r[verify issue.expiry+2]
#[tokio::test]
async fn a_watcher_is_woken_when_a_certificate_expires_and_is_not_handed_it() {
    let dir = tempfile::tempdir().unwrap();
    let start = SystemTime::now();
    let clock = ManualWallClock::new(start);
    let source = Flaky::new(start - Duration::from_secs(60));
    let issuer = issuer(dir.path(), source.clone(), &clock);
    let mut watch = issuer.store().subscribe();
    assert_eq!(issuer.tick().await.unwrap().issued, ["a.example"]);
    watch.changed().await.unwrap();
    assert!(watch.current().contains_key("a.example"));

    // Past its end, renewal failing: nothing new is stored, yet the watcher is woken and what it
    // is handed leaves the expired certificate out.
    source.failing.store(true, Ordering::SeqCst);
    clock.advance(91 * DAY);
    assert_eq!(issuer.tick().await.unwrap().failed.len(), 1);
    assert!(watch.has_changed().unwrap(), "not woken at expiry");
    assert!(!watch.current().contains_key("a.example"));
    assert!(!watch.has_changed().unwrap());
}

// r[verify node.issuance.metrics+3]
#[tokio::test]
async fn the_days_to_expiry_go_negative_once_a_certificate_has_expired() {
    let dir = tempfile::tempdir().unwrap();
    let start = SystemTime::now();
    let clock = ManualWallClock::new(start);
    let source = Flaky::new(start - Duration::from_secs(60));
    let issuer = issuer(dir.path(), source.clone(), &clock);
    assert_eq!(issuer.tick().await.unwrap().issued, ["a.example"]);
    let days = issuer.days_to_expiry()["a.example"];
    assert!((89.9..90.0).contains(&days), "{days}");
    // A day and a minute past its end: about -1, not clamped at 0.
    clock.advance(91 * DAY);
    let days = issuer.days_to_expiry()["a.example"];
    assert!((-1.01..-0.99).contains(&days), "{days}");
}
