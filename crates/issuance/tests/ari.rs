//! The ACME Renewal Information path of the issuer, over a stub source whose window is fixed:
//! the renewal time is drawn once per window, and a window that never answers cannot hold up the
//! tick.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use holdfast_issuance::acme::RenewalWindow;
use holdfast_issuance::cert::testing::leaf;
use holdfast_issuance::history::HistoryDb;
use holdfast_issuance::issuer::{Hostname, Issuer};
use holdfast_issuance::source::BoxFuture;
use holdfast_issuance::{
    CertStore, CertifiedPair, IssuePolicy, ManualWallClock, Source, SourceError, Verdict,
    WallClock as _,
};

const DAY: Duration = Duration::from_secs(86400);

/// Hands out 90-day leaves; answers renewal information with `window` (or never, when `None`).
struct Stub {
    window: Option<RenewalWindow>,
    asked: AtomicU64,
}

impl Source for Stub {
    fn name(&self) -> &str {
        "stub"
    }
    fn obtain<'a>(&'a self, host: &'a str) -> BoxFuture<'a, Result<CertifiedPair, SourceError>> {
        Box::pin(async move {
            let (chain, key) = leaf(host, SystemTime::now() - Duration::from_secs(60), 90 * DAY);
            Ok(CertifiedPair::parse(host, &chain, &key).unwrap())
        })
    }
    fn renewal_window<'a>(&'a self, _: &'a CertifiedPair) -> BoxFuture<'a, Option<RenewalWindow>> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        match self.window {
            Some(w) => Box::pin(async move { Some(w) }),
            // A server that accepted the request and never answers.
            None => Box::pin(std::future::pending()),
        }
    }
}

fn issuer(dir: &std::path::Path, source: Arc<Stub>, clock: &ManualWallClock) -> Issuer {
    Issuer::new(
        IssuePolicy::standard(1),
        vec![Hostname {
            name: "a.example".into(),
            source,
        }],
        HistoryDb::open(&dir.join("attempts.sqlite"), 50).unwrap(),
        CertStore::new(&dir.join("certs")).unwrap(),
        Arc::new(clock.clone()),
        Duration::from_secs(60),
    )
    .unwrap()
}

fn renew_at(issuer: &Issuer) -> SystemTime {
    match issuer.verdict("a.example").unwrap() {
        Verdict::Valid { renew_at } => renew_at,
        other => panic!("valid: {other:?}"),
    }
}

// r[verify issue.renewal.ari]
#[tokio::test]
async fn the_renewal_time_is_drawn_once_per_window_not_at_every_recheck() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualWallClock::new(SystemTime::now());
    let now = clock.now();
    // A 30-day window from day 40, asked again every minute.
    let window = RenewalWindow {
        start: now + 40 * DAY,
        end: now + 70 * DAY,
        recheck_after: Duration::from_secs(60),
    };
    let stub = Arc::new(Stub {
        window: Some(window),
        asked: AtomicU64::new(0),
    });
    let issuer = issuer(dir.path(), stub.clone(), &clock);
    assert_eq!(issuer.tick().await.unwrap().issued.len(), 1);
    issuer.tick().await.unwrap();
    let first = renew_at(&issuer);
    assert!(first >= window.start && first < window.end, "{first:?}");
    // Re-asked many times, the same window keeps the same draw: re-drawing at every recheck
    // would make the earliest of many draws win, not a uniform time in the window.
    for _ in 0..20 {
        clock.advance(Duration::from_secs(120));
        issuer.tick().await.unwrap();
        assert_eq!(renew_at(&issuer), first);
    }
    assert!(
        stub.asked.load(Ordering::SeqCst) >= 20,
        "the window was re-asked"
    );
}

// r[verify issue.renewal.ari]
#[tokio::test(start_paused = true)]
async fn a_renewal_window_that_never_answers_does_not_hold_up_the_tick() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualWallClock::new(SystemTime::now());
    let stub = Arc::new(Stub {
        window: None,
        asked: AtomicU64::new(0),
    });
    let issuer = issuer(dir.path(), stub.clone(), &clock);
    assert_eq!(issuer.tick().await.unwrap().issued.len(), 1);
    // The certificate is stored: the next tick asks for its window, which never comes.
    let tick = tokio::time::timeout(Duration::from_secs(3600), issuer.tick()).await;
    assert!(tick.is_ok(), "the tick hung on the renewal window");
    assert_eq!(stub.asked.load(Ordering::SeqCst), 1);
    // Without an answer the fallback (two thirds of the lifetime) holds.
    let pair = issuer.store().get("a.example").unwrap();
    assert_eq!(renew_at(&issuer), pair.info.renew_at);
}
