//! The issuer over the local provider: a real loopback HTTP provider behind the fault proxy.

// Test helpers outside `#[test]` functions: clippy.toml's test allowance does not reach them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use holdfast_issuance::cert::testing::leaf;
use holdfast_issuance::history::{FailureRecord, HistoryDb, Outcome};
use holdfast_issuance::issuer::{Hostname, Issuer};
use holdfast_issuance::local::{LocalEndpoint, LocalProvider};
use holdfast_issuance::source::BoxFuture;
use holdfast_issuance::{
    CertStore, CertifiedPair, IssuePolicy, IssueReason, ManualWallClock, Source, SourceError,
    Verdict,
};
use holdfast_test_support::fault_proxy::{FaultProxy, Mode};
use http_body_util::Full;
use hyper_util::rt::TokioIo;

const DAY: Duration = Duration::from_secs(86400);

/// A local certificate provider: issues a fresh 90-day leaf for any hostname.
async fn provider() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    |req: hyper::Request<hyper::body::Incoming>| async move {
                        let host = req
                            .uri()
                            .path()
                            .trim_start_matches("/v1/certificate/")
                            .to_owned();
                        let (chain, key) =
                            leaf(&host, SystemTime::now() - Duration::from_secs(60), 90 * DAY);
                        Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(format!(
                            "{key}{chain}"
                        )))))
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// A second source that counts its calls and always fails (it must only be called when the
/// decision says issue).
struct Counting(AtomicU64);

impl Source for Counting {
    fn name(&self) -> &str {
        "other"
    }
    fn obtain<'a>(&'a self, _: &'a [String]) -> BoxFuture<'a, Result<CertifiedPair, SourceError>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async {
            Err(SourceError::new(
                holdfast_issuance::ErrorClass::Server,
                "down",
            ))
        })
    }
}

struct Env {
    dir: tempfile::TempDir,
    clock: ManualWallClock,
}

impl Env {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
            clock: ManualWallClock::new(SystemTime::now()),
        }
    }
    fn db(&self) -> HistoryDb {
        HistoryDb::open(&self.dir.path().join("attempts.sqlite"), 50).unwrap()
    }
    fn issuer(&self, hosts: Vec<Hostname>) -> Issuer {
        let store = CertStore::new(&self.dir.path().join("certs")).unwrap();
        Issuer::new(
            IssuePolicy::standard(1),
            hosts,
            self.db(),
            store,
            Arc::new(self.clock.clone()),
            Duration::from_secs(10),
        )
        .unwrap()
    }
}

fn local(addr: SocketAddr) -> Arc<dyn Source> {
    Arc::new(LocalProvider::new(
        LocalEndpoint::Tcp(addr),
        Duration::from_secs(5),
    ))
}

// r[verify issue.local]
// r[verify issue.renewal.valid+2]
// r[verify issue.store.notify+2]
#[tokio::test]
async fn issues_once_restarts_quietly_and_renews_when_the_clock_passes_renewal() {
    let env = Env::new();
    let proxy = FaultProxy::start(provider().await).await.unwrap();
    let hosts = || {
        vec![Hostname {
            name: "a.example".into(),
            also: Vec::new(),
            source: local(proxy.addr()),
        }]
    };
    let issuer = env.issuer(hosts());
    let mut watch = issuer.store().subscribe();
    let report = issuer.tick().await.unwrap();
    assert_eq!(
        report.dispatched,
        vec![("a.example".to_owned(), IssueReason::Missing)]
    );
    assert_eq!(report.issued, vec!["a.example".to_owned()]);
    watch.changed().await.unwrap();
    let first = issuer.store().get("a.example").unwrap();
    assert!(matches!(
        issuer.verdict("a.example").unwrap(),
        Verdict::Valid { .. }
    ));
    assert!(issuer.tick().await.unwrap().dispatched.is_empty());
    drop(issuer);

    // Restarted with a valid certificate: it is loaded from disk and nothing is issued.
    let issuer = env.issuer(hosts());
    assert_eq!(
        issuer.store().get("a.example").unwrap().chain_pem,
        first.chain_pem
    );
    for _ in 0..3 {
        assert!(issuer.tick().await.unwrap().dispatched.is_empty());
        env.clock.advance(DAY);
    }
    assert_eq!(
        proxy.connections(),
        1,
        "one request for the whole run so far"
    );

    // Past two thirds of the lifetime: renewed, and the watchers see the new pair.
    env.clock.advance(
        first
            .info
            .renew_at
            .duration_since(SystemTime::now())
            .unwrap(),
    );
    let mut watch = issuer.store().subscribe();
    let report = issuer.tick().await.unwrap();
    assert_eq!(
        report.dispatched,
        vec![("a.example".to_owned(), IssueReason::Renewal)]
    );
    assert_eq!(report.issued.len(), 1);
    watch.changed().await.unwrap();
    assert_ne!(
        issuer.store().get("a.example").unwrap().chain_pem,
        first.chain_pem
    );
    assert_eq!(proxy.connections(), 2);
}

// r[verify issue.dispatch]
// r[verify issue.pacing]
// r[verify issue.history.per-host]
// r[verify issue.block.force-retry]
// r[verify issue.fault]
#[tokio::test]
async fn provider_down_for_a_day_beside_1500_other_hostnames() {
    let env = Env::new();
    let policy = IssuePolicy::standard(1);
    let start = env.clock.now_for_test();
    // 1,500 other hostnames on a second source, with history: each failed recently with a long
    // Retry-After, so each is debounced all day. Their latest row and history must survive.
    let mut others = Vec::new();
    {
        let mut db = env.db();
        for i in 0..1500 {
            let host = format!("h{i}.example");
            let id = db.begin(&policy.retry, &host, "other", start).unwrap();
            let failure = FailureRecord {
                class: "server",
                message: "earlier failure",
                retry_after: Some(Duration::from_secs(2 * 86400)),
            };
            db.finish(
                &policy.retry,
                id,
                &host,
                start,
                Outcome::Failure,
                Some(&failure),
            )
            .unwrap();
            others.push(host);
        }
    }
    let before: HashMap<String, _> = {
        let db = env.db();
        others
            .iter()
            .map(|h| {
                (
                    h.clone(),
                    (db.attempts(h, 1).unwrap(), db.history(h).unwrap()),
                )
            })
            .collect()
    };
    let counting = Arc::new(Counting(AtomicU64::new(0)));
    let proxy = FaultProxy::start(provider().await).await.unwrap();
    proxy.set_mode(Mode::Close).await.unwrap();
    let mut hosts = vec![Hostname {
        name: "down.example".into(),
        also: Vec::new(),
        source: local(proxy.addr()),
    }];
    hosts.extend(others.iter().map(|h| Hostname {
        name: h.clone(),
        also: Vec::new(),
        source: counting.clone(),
    }));
    let issuer = env.issuer(hosts);

    let rows = |issuer: &Issuer| issuer.with_history(|db| db.row_count().unwrap());
    let base_rows = rows(&issuer);
    let tick = Duration::from_secs(300);
    let mut blocked_seen = None;
    let mut elapsed = Duration::ZERO;
    while elapsed < DAY {
        let before_tick = rows(&issuer);
        let report = issuer.tick().await.unwrap();
        let written = rows(&issuer) - before_tick;
        assert!(written <= 1, "a tick wrote {written} rows");
        assert_eq!(written as usize, report.dispatched.len());
        let faults = issuer.fault_board().list();
        let failures = issuer.with_history(|db| db.history("down.example").unwrap().failures);
        if failures >= policy.block_after {
            assert_eq!(
                faults.len(),
                1,
                "one fault while in sustained failure: {faults:?}"
            );
            assert_eq!(faults[0].subject.name, "down.example");
            assert_eq!(faults[0].kind, "blocked");
            assert_eq!(faults[0].failures, failures);
            assert!(faults[0].message.contains("holdfast certs retry"));
        } else {
            assert!(faults.is_empty(), "no fault before the block: {faults:?}");
        }
        if let Verdict::Blocked { until, clear, .. } = issuer.verdict("down.example").unwrap() {
            assert!(
                until > env.clock.now_for_test()
                    && until <= env.clock.now_for_test() + policy.block_for
            );
            assert!(clear.contains("holdfast certs retry"));
            blocked_seen.get_or_insert(elapsed);
        }
        env.clock.advance(tick);
        elapsed += tick;
    }
    let down_rows = issuer.with_history(|db| db.row_count_of("down.example").unwrap());
    println!(
        "outage: {down_rows} attempt rows for down.example in one simulated day \
         (blocked after {:?}); {} connections reached the proxy",
        blocked_seen,
        proxy.connections()
    );
    assert!((6..=10).contains(&down_rows), "{down_rows} rows");
    assert_eq!(
        proxy.connections(),
        down_rows,
        "one connection per recorded attempt"
    );
    assert_eq!(
        rows(&issuer) - base_rows,
        down_rows,
        "nobody else wrote a row"
    );
    assert!(blocked_seen.is_some(), "the block engaged");
    assert_eq!(
        counting.0.load(Ordering::SeqCst),
        0,
        "the debounced source was never called"
    );
    for (host, (rows, history)) in &before {
        let now =
            issuer.with_history(|db| (db.attempts(host, 1).unwrap(), db.history(host).unwrap()));
        assert_eq!(&now.0, rows, "{host}'s latest attempt survived");
        assert_eq!(&now.1, history, "{host}'s debounce survived");
    }

    // Force-retry clears any block and resets the streak; with the provider back, the next tick
    // issues.
    proxy.set_mode(Mode::Forward).await.unwrap();
    issuer.force_retry("down.example").unwrap();
    assert!(matches!(
        issuer.verdict("down.example").unwrap(),
        Verdict::Issue(IssueReason::Missing)
    ));
    assert!(
        issuer.fault_board().is_empty(),
        "force-retry clears the fault"
    );
    let report = issuer.tick().await.unwrap();
    assert_eq!(report.issued, vec!["down.example".to_owned()]);
    assert_eq!(counting.0.load(Ordering::SeqCst), 0);
    assert!(issuer.fault_board().is_empty());
}

// r[verify issue.module]
#[tokio::test]
async fn the_module_starts_ticks_and_stops_within_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let proxy = FaultProxy::start(provider().await).await.unwrap();
    proxy
        .set_mode(Mode::Stall { after_bytes: 0 })
        .await
        .unwrap();
    let config: holdfast_issuance::IssuanceConfig = serde_json::from_value(serde_json::json!({
        "hostname": [{ "name": "a.example", "source": "local" }],
        "local": { "endpoint": { "tcp": proxy.addr().to_string() } },
        "tick": "1s",
    }))
    .unwrap();
    let module = holdfast_issuance::start(
        &config,
        dir.path(),
        1,
        Arc::new(holdfast_issuance::SystemWallClock),
        holdfast_lifecycle::FaultBoard::new(),
    )
    .await
    .unwrap();
    // The first tick dispatches at once; the provider stalls.
    assert_eq!(
        proxy.wait_for_connections(1, Duration::from_secs(10)).await,
        1
    );
    assert_eq!(module.issuer().statuses().unwrap()[0].state, "issuing");
    let began = tokio::time::Instant::now();
    // Stopped through the node's stop plan, as a lifecycle stopper.
    let stopper: Box<dyn holdfast_lifecycle::Stopper> = Box::new(module);
    let stopped = stopper
        .stop(holdfast_lifecycle::StopRequest {
            deadline: began + Duration::from_millis(300),
            reason: holdfast_lifecycle::StopReason::Restart,
        })
        .await;
    assert!(
        began.elapsed() < Duration::from_secs(1),
        "{:?}",
        began.elapsed()
    );
    assert!(stopped.is_ok(), "{stopped:?}");
    // The cancelled attempt's row is settled as interrupted: the hostname backs off instead of
    // retrying at once, and the next start finds nothing open.
    let mut db = HistoryDb::open(&dir.path().join("issuance/attempts.sqlite"), 50).unwrap();
    let rows = db.attempts("a.example", 5).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].outcome, Some(Outcome::Interrupted));
    assert_eq!(db.history("a.example").unwrap().failures, 1);
    let policy = IssuePolicy::standard(1);
    assert!(
        db.settle_open(&policy.retry, SystemTime::now())
            .unwrap()
            .is_empty()
    );
}

trait NowForTest {
    fn now_for_test(&self) -> SystemTime;
}
impl NowForTest for ManualWallClock {
    fn now_for_test(&self) -> SystemTime {
        holdfast_issuance::WallClock::now(self)
    }
}

async fn serve_on_unix(path: &std::path::Path) {
    let listener = tokio::net::UnixListener::bind(path).unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    |req: hyper::Request<hyper::body::Incoming>| async move {
                        let host = req
                            .uri()
                            .path()
                            .trim_start_matches("/v1/certificate/")
                            .to_owned();
                        let (chain, key) =
                            leaf(&host, SystemTime::now() - Duration::from_secs(60), 90 * DAY);
                        Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(format!(
                            "{chain}{key}"
                        )))))
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
}

// r[verify issue.local]
#[tokio::test]
async fn the_local_provider_over_a_unix_socket_and_its_failures_classified() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("provider.sock");
    serve_on_unix(&socket).await;
    let unix = LocalProvider::new(LocalEndpoint::Unix(socket), Duration::from_secs(5));
    let pair = unix.obtain(&["u.example".to_owned()]).await.unwrap();
    assert!(pair.chain_pem.contains("BEGIN CERTIFICATE"));

    let proxy = FaultProxy::start(provider().await).await.unwrap();
    let tcp = LocalProvider::new(LocalEndpoint::Tcp(proxy.addr()), Duration::from_secs(2));
    let cases = [
        (
            Mode::HttpStatus {
                status: 429,
                retry_after: Some("120".into()),
                body: String::new(),
            },
            holdfast_issuance::ErrorClass::RateLimited,
            Some(Duration::from_secs(120)),
        ),
        (
            Mode::status(503),
            holdfast_issuance::ErrorClass::Server,
            None,
        ),
        (
            Mode::status(404),
            holdfast_issuance::ErrorClass::Rejected,
            None,
        ),
        (
            Mode::HttpStatus {
                status: 200,
                retry_after: None,
                body: "not a pem".into(),
            },
            holdfast_issuance::ErrorClass::BadCertificate,
            None,
        ),
        (
            Mode::Reset,
            holdfast_issuance::ErrorClass::Unreachable,
            None,
        ),
        (
            Mode::Stall { after_bytes: 0 },
            holdfast_issuance::ErrorClass::Timeout,
            None,
        ),
    ];
    for (mode, class, hint) in cases {
        proxy.set_mode(mode.clone()).await.unwrap();
        let err = tcp.obtain(&["t.example".to_owned()]).await.unwrap_err();
        assert_eq!(
            (err.class, err.retry_after),
            (class, hint),
            "{mode:?}: {err}"
        );
    }
}

const CHILD_VAR: &str = "HOLDFAST_ISSUANCE_TEST_CHILD";

// r[verify issue.history.settle]
#[tokio::test]
async fn killed_mid_attempt_the_next_start_settles_and_backs_off() {
    if let Ok(spec) = std::env::var(CHILD_VAR) {
        // The child: a node whose only attempt stalls, until it is killed.
        let (dir, addr) = spec.split_once('|').unwrap();
        let clock = ManualWallClock::new(SystemTime::now());
        let store = CertStore::new(&std::path::Path::new(dir).join("certs")).unwrap();
        let issuer = Issuer::new(
            IssuePolicy::standard(1),
            vec![Hostname {
                name: "k.example".into(),
                also: Vec::new(),
                source: local(addr.parse().unwrap()),
            }],
            HistoryDb::open(&std::path::Path::new(dir).join("attempts.sqlite"), 50).unwrap(),
            store,
            Arc::new(clock),
            Duration::from_secs(3600),
        )
        .unwrap();
        issuer.tick().await.unwrap();
        unreachable!("the attempt stalls until the process is killed");
    }
    let dir = tempfile::tempdir().unwrap();
    let proxy = FaultProxy::start(provider().await).await.unwrap();
    proxy
        .set_mode(Mode::Stall { after_bytes: 0 })
        .await
        .unwrap();
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "killed_mid_attempt_the_next_start_settles_and_backs_off",
            "--nocapture",
        ])
        .env(
            CHILD_VAR,
            format!("{}|{}", dir.path().display(), proxy.addr()),
        )
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    assert_eq!(
        proxy.wait_for_connections(1, Duration::from_secs(60)).await,
        1,
        "the child's attempt began"
    );
    child.start_kill().unwrap(); // SIGKILL: no chance to settle anything
    child.wait().await.unwrap();
    {
        let db = HistoryDb::open(&dir.path().join("attempts.sqlite"), 50).unwrap();
        let rows = db.attempts("k.example", 5).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].outcome, None, "the killed attempt's row is open");
    }
    // Restart: the open row is settled and the hostname backs off — nothing is dispatched.
    proxy.set_mode(Mode::Forward).await.unwrap();
    let clock = ManualWallClock::new(SystemTime::now());
    let issuer = Issuer::new(
        IssuePolicy::standard(1),
        vec![Hostname {
            name: "k.example".into(),
            also: Vec::new(),
            source: local(proxy.addr()),
        }],
        HistoryDb::open(&dir.path().join("attempts.sqlite"), 50).unwrap(),
        CertStore::new(&dir.path().join("certs")).unwrap(),
        Arc::new(clock.clone()),
        Duration::from_secs(10),
    )
    .unwrap();
    let rows = issuer.with_history(|db| db.attempts("k.example", 5).unwrap());
    assert_eq!(rows[0].outcome, Some(Outcome::Interrupted));
    assert!(matches!(
        issuer.verdict("k.example").unwrap(),
        Verdict::Debounced { failures: 1, .. }
    ));
    assert!(issuer.tick().await.unwrap().dispatched.is_empty());
    assert_eq!(proxy.connections(), 1);
    // After the back-off, it is attempted again, once.
    clock.advance(Duration::from_secs(3600));
    let report = issuer.tick().await.unwrap();
    assert_eq!(
        report.dispatched,
        vec![("k.example".to_owned(), IssueReason::Retry)]
    );
    assert_eq!(report.issued.len(), 1);
}

// r[verify issue.storage-fault]
// r[verify issue.metrics]
#[tokio::test]
async fn a_locked_attempts_table_is_a_clear_error_and_a_fault_and_replaces_nothing() {
    let env = Env::new();
    let proxy = FaultProxy::start(provider().await).await.unwrap();
    let issuer = env.issuer(vec![Hostname {
        name: "a.example".into(),
        also: Vec::new(),
        source: local(proxy.addr()),
    }]);
    assert_eq!(issuer.tick().await.unwrap().issued.len(), 1);
    let current = issuer.store().get("a.example").unwrap();

    // Another process holds the write lock past the busy timeout.
    let other = rusqlite::Connection::open(env.dir.path().join("attempts.sqlite")).unwrap();
    other.execute_batch("BEGIN EXCLUSIVE").unwrap();
    issuer.trigger("a.example").unwrap();
    let err = issuer.tick().await.unwrap_err();
    assert!(err.to_string().contains("attempts.sqlite"), "{err}");
    assert_eq!(
        proxy.connections(),
        1,
        "no source was called without its row"
    );
    assert_eq!(issuer.store().get("a.example"), Some(current.clone()));
    let faults = issuer.fault_board().list();
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert_eq!(
        (faults[0].subject.name.as_str(), faults[0].kind.as_str()),
        ("attempts-table", "storage")
    );

    // The lock goes away: the next tick works, the fault clears, the manual trigger still holds.
    other.execute_batch("COMMIT").unwrap();
    let report = issuer.tick().await.unwrap();
    assert_eq!(
        report.dispatched,
        vec![("a.example".to_owned(), IssueReason::Manual)]
    );
    assert!(issuer.fault_board().is_empty());

    let metrics = issuer.metrics().unwrap();
    assert_eq!(metrics.attempts["local"]["success"], 2);
    assert_eq!(metrics.blocked, 0);
    let days = metrics.days_to_expiry["a.example"];
    assert!((89.0..=90.0).contains(&days), "{days}");
}

/// A provider that answers 200 with a body far larger than any certificate (8 MiB), then stalls.
async fn oversized_provider() -> SocketAddr {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let mut request = [0u8; 1024];
                let _ = stream.read(&mut request).await;
                let head = "HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n";
                if stream.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![b'A'; 64 * 1024];
                for _ in 0..128 {
                    if stream.write_all(&chunk).await.is_err() {
                        return;
                    }
                }
                std::future::pending::<()>().await;
            });
        }
    });
    addr
}

// r[verify issue.bounds]
#[tokio::test]
async fn an_oversized_answer_from_the_local_provider_is_refused_at_once() {
    let provider = LocalProvider::new(
        LocalEndpoint::Tcp(oversized_provider().await),
        Duration::from_secs(3),
    );
    let err = provider
        .obtain(&["big.example".to_owned()])
        .await
        .unwrap_err();
    assert_eq!(
        err.class,
        holdfast_issuance::ErrorClass::BadCertificate,
        "{err}"
    );
    assert!(err.message.contains("larger than"), "{err}");
}

// r[verify issue.fault]
// r[verify issue.store.validate]
#[tokio::test]
async fn a_bad_certificate_on_disk_is_one_fault_until_a_good_pair_replaces_it() {
    let env = Env::new();
    let certs = env.dir.path().join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    std::fs::write(certs.join("a.example.pem"), "not a certificate").unwrap();
    let proxy = FaultProxy::start(provider().await).await.unwrap();
    proxy.set_mode(Mode::Close).await.unwrap();
    let board = holdfast_lifecycle::FaultBoard::new();
    let issuer = env
        .issuer(vec![Hostname {
            name: "a.example".into(),
            also: Vec::new(),
            source: local(proxy.addr()),
        }])
        .with_fault_board(board.clone());
    let faults = board.list();
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert_eq!(
        (faults[0].subject.name.as_str(), faults[0].kind.as_str()),
        ("a.example", "bad_certificate")
    );
    assert!(faults[0].message.contains("a.example"), "{faults:?}");
    // Nothing usable is served, the bad file stays, and a failed attempt keeps the one fault.
    assert!(issuer.store().get("a.example").is_none());
    let report = issuer.tick().await.unwrap();
    assert_eq!(
        report.dispatched,
        vec![("a.example".to_owned(), IssueReason::Missing)]
    );
    assert_eq!(report.failed.len(), 1);
    assert_eq!(
        std::fs::read_to_string(certs.join("a.example.pem")).unwrap(),
        "not a certificate"
    );
    let faults = board.list();
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert_eq!(faults[0].kind, "bad_certificate");
    // A good pair replaces it: the fault clears.
    proxy.set_mode(Mode::Forward).await.unwrap();
    issuer.force_retry("a.example").unwrap();
    assert_eq!(issuer.tick().await.unwrap().issued.len(), 1);
    assert!(board.is_empty(), "{:?}", board.list());
    assert!(
        std::fs::read_to_string(certs.join("a.example.pem"))
            .unwrap()
            .contains("BEGIN CERTIFICATE")
    );
}

/// Issues a leaf for any hostname and counts the calls per hostname.
struct Issuing(std::sync::Mutex<HashMap<String, u32>>);

impl Source for Issuing {
    fn name(&self) -> &str {
        "issuing"
    }
    fn obtain<'a>(
        &'a self,
        names: &'a [String],
    ) -> BoxFuture<'a, Result<CertifiedPair, SourceError>> {
        let host = names[0].as_str();
        *self.0.lock().unwrap().entry(host.to_owned()).or_default() += 1;
        Box::pin(async move {
            tokio::task::yield_now().await;
            let (chain, key) = leaf(host, SystemTime::now() - Duration::from_secs(60), 90 * DAY);
            Ok(CertifiedPair::parse(host, &chain, &key).unwrap())
        })
    }
}

// r[verify issue.dispatch]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_ticks_at_once_never_dispatch_one_hostname_twice() {
    let env = Env::new();
    let source = Arc::new(Issuing(std::sync::Mutex::new(HashMap::new())));
    let hosts: Vec<Hostname> = (0..300)
        .map(|i| Hostname {
            name: format!("c{i}.example"),
            also: Vec::new(),
            source: source.clone(),
        })
        .collect();
    let issuer = Arc::new(env.issuer(hosts));
    let (a, b) = (issuer.clone(), issuer.clone());
    let (ra, rb) = tokio::join!(
        tokio::spawn(async move { a.tick().await.unwrap() }),
        tokio::spawn(async move { b.tick().await.unwrap() })
    );
    let dispatched = ra.unwrap().dispatched.len() + rb.unwrap().dispatched.len();
    let calls = source.0.lock().unwrap();
    let twice: Vec<_> = calls.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "dispatched twice: {twice:?}");
    assert_eq!(dispatched, 300);
    assert_eq!(issuer.with_history(|db| db.row_count().unwrap()), 300);
}

/// Starts the module over one local-provider hostname in `dir`, ticking every 100 ms.
async fn start_local(
    dir: &std::path::Path,
    faults: &holdfast_lifecycle::FaultBoard,
) -> holdfast_issuance::Issuance {
    let config: holdfast_issuance::IssuanceConfig = serde_json::from_value(serde_json::json!({
        "hostname": [{ "name": "a.example", "source": "local" }],
        "local": { "endpoint": { "tcp": provider().await.to_string() } },
        "tick": "100ms",
    }))
    .unwrap();
    holdfast_issuance::start(
        &config,
        dir,
        1,
        Arc::new(holdfast_issuance::SystemWallClock),
        faults.clone(),
    )
    .await
    .expect("the module starts without its attempts table")
}

/// Waits (bounded) until the store's pair for `a.example` differs from `before`.
async fn issued_after(
    module: &holdfast_issuance::Issuance,
    before: Option<Arc<CertifiedPair>>,
) -> Arc<CertifiedPair> {
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match module.store().get("a.example") {
                Some(pair) if Some(&pair) != before.as_ref() => return pair,
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    })
    .await
    .expect("nothing issued in 20 s")
}

// r[verify issue.history.unavailable]
#[tokio::test]
async fn a_corrupt_attempts_table_starts_in_memory_with_a_fault_and_keeps_renewing() {
    let dir = tempfile::tempdir().unwrap();
    let db_path = dir.path().join("issuance/attempts.sqlite");
    std::fs::create_dir_all(db_path.parent().unwrap()).unwrap();
    let garbage = b"this is not an SQLite database, and never was. ".repeat(100);
    std::fs::write(&db_path, &garbage).unwrap();
    let faults = holdfast_lifecycle::FaultBoard::new();
    let module = start_local(dir.path(), &faults).await;
    let subject = holdfast_lifecycle::Subject::new("issuance", "attempts-table");
    let fault = faults.get(&subject).expect("a fault from the start");
    assert_eq!(fault.kind, "history_unavailable");
    assert!(
        fault.message.contains("attempts.sqlite"),
        "{}",
        fault.message
    );
    assert!(fault.message.contains("in memory"), "{}", fault.message);

    // It issues, and renews when asked, with the fault still up after the successful ticks.
    let first = issued_after(&module, None).await;
    module.issuer().trigger("a.example").unwrap();
    let renewed = issued_after(&module, Some(first.clone())).await;
    assert_ne!(renewed.chain_pem, first.chain_pem);
    let fault = faults
        .get(&subject)
        .expect("the fault stays while in memory");
    assert_eq!(fault.kind, "history_unavailable");
    assert_eq!(faults.of_module("issuance").len(), 1, "{:?}", faults.list());
    // The bad file is left for the operator, not replaced.
    assert_eq!(std::fs::read(&db_path).unwrap(), garbage);
    holdfast_issuance::Issuance::shutdown(
        module,
        tokio::time::Instant::now() + Duration::from_secs(2),
    )
    .await
    .unwrap();
}

// r[verify issue.history.unavailable]
#[tokio::test]
async fn a_locked_attempts_table_starts_in_memory_with_a_fault_and_issues() {
    let dir = tempfile::tempdir().unwrap();
    let db_path = dir.path().join("issuance/attempts.sqlite");
    drop(HistoryDb::open(&db_path, 50).unwrap());
    // Another process holds the file's exclusive lock past the busy timeout.
    let holder = rusqlite::Connection::open(&db_path).unwrap();
    holder
        .execute_batch("PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE;")
        .unwrap();
    let faults = holdfast_lifecycle::FaultBoard::new();
    let module = start_local(dir.path(), &faults).await;
    let subject = holdfast_lifecycle::Subject::new("issuance", "attempts-table");
    assert_eq!(
        faults.get(&subject).expect("a fault").kind,
        "history_unavailable"
    );
    issued_after(&module, None).await;
    drop(holder);
}
