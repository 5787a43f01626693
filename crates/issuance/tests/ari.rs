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

/// Hands out 90-day leaves; answers renewal information with `window` after `delay` (or never,
/// when `None`).
struct Stub {
    window: Option<RenewalWindow>,
    delay: Duration,
    asked: AtomicU64,
}

impl Stub {
    fn new(window: Option<RenewalWindow>, delay: Duration) -> Arc<Self> {
        Arc::new(Self {
            window,
            delay,
            asked: AtomicU64::new(0),
        })
    }

    fn asked(&self) -> u64 {
        self.asked.load(Ordering::SeqCst)
    }
}

impl Source for Stub {
    fn name(&self) -> &str {
        "stub"
    }
    fn obtain<'a>(
        &'a self,
        names: &'a [String],
    ) -> BoxFuture<'a, Result<CertifiedPair, SourceError>> {
        let host = names[0].as_str();
        Box::pin(async move {
            let (chain, key) = leaf(host, SystemTime::now() - Duration::from_secs(60), 90 * DAY);
            Ok(CertifiedPair::parse(host, &chain, &key).unwrap())
        })
    }
    fn renewal_window<'a>(&'a self, _: &'a CertifiedPair) -> BoxFuture<'a, Option<RenewalWindow>> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let delay = self.delay;
        match self.window {
            Some(w) => Box::pin(async move {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                Some(w)
            }),
            // A server that accepted the request and never answers.
            None => Box::pin(std::future::pending()),
        }
    }
}

fn issuer(dir: &std::path::Path, source: Arc<Stub>, clock: &ManualWallClock) -> Issuer {
    issuer_of(dir, &["a.example"], source, clock)
}

fn issuer_of(
    dir: &std::path::Path,
    names: &[&str],
    source: Arc<Stub>,
    clock: &ManualWallClock,
) -> Issuer {
    Issuer::new(
        IssuePolicy::standard(1),
        names
            .iter()
            .map(|name| Hostname {
                name: (*name).into(),
                also: Vec::new(),
                source: source.clone(),
            })
            .collect(),
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

// r[verify issue.renewal.ari+2]
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
    let stub = Stub::new(Some(window), Duration::ZERO);
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

// r[verify issue.bounds]
#[tokio::test(start_paused = true)]
async fn renewal_windows_that_never_answer_hold_up_a_tick_at_most_30_s_together() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualWallClock::new(SystemTime::now());
    let stub = Stub::new(None, Duration::ZERO);
    let issuer = issuer_of(
        dir.path(),
        &["a.example", "b.example"],
        stub.clone(),
        &clock,
    );
    assert_eq!(issuer.tick().await.unwrap().issued.len(), 2);
    // The certificates are stored: the next tick asks for a window, which never comes.
    let started = tokio::time::Instant::now();
    let tick = tokio::time::timeout(Duration::from_secs(3600), issuer.tick()).await;
    assert!(tick.is_ok(), "the tick hung on the renewal window");
    assert!(
        started.elapsed() <= Duration::from_secs(30),
        "{:?} for the pass, not 30 s per hostname",
        started.elapsed()
    );
    assert_eq!(
        stub.asked(),
        1,
        "the bound is the pass's, not each request's"
    );
    // Without an answer the fallback (two thirds of the lifetime) holds.
    let pair = issuer.store().get("a.example").unwrap();
    assert_eq!(renew_at(&issuer), pair.info.renew_at);
}

// r[verify issue.bounds]
#[tokio::test(start_paused = true)]
async fn a_hostname_whose_window_did_not_answer_is_asked_again_an_hour_later() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualWallClock::new(SystemTime::now());
    let stub = Stub::new(None, Duration::ZERO);
    let issuer = issuer(dir.path(), stub.clone(), &clock);
    issuer.tick().await.unwrap();
    issuer.tick().await.unwrap();
    assert_eq!(stub.asked(), 1);
    clock.advance(Duration::from_secs(3600) - Duration::from_millis(1));
    issuer.tick().await.unwrap();
    assert_eq!(stub.asked(), 1, "not before the hour");
    clock.advance(Duration::from_millis(1));
    issuer.tick().await.unwrap();
    assert_eq!(stub.asked(), 2, "an hour later");
}

// r[verify issue.bounds]
#[tokio::test(start_paused = true)]
async fn a_window_that_answers_inside_the_bound_is_used() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualWallClock::new(SystemTime::now());
    let now = clock.now();
    let window = RenewalWindow {
        start: now + 40 * DAY,
        end: now + 41 * DAY,
        recheck_after: Duration::from_secs(3600),
    };
    // Slow, but inside the 30 s the pass may take.
    let stub = Stub::new(Some(window), Duration::from_secs(29));
    let issuer = issuer(dir.path(), stub.clone(), &clock);
    issuer.tick().await.unwrap();
    let started = tokio::time::Instant::now();
    issuer.tick().await.unwrap();
    assert!(started.elapsed() >= Duration::from_secs(29));
    assert_eq!(stub.asked(), 1);
    let at = renew_at(&issuer);
    assert!(at >= window.start && at < window.end, "{at:?}");
}
