//! Against the real Pebble (started by `cargo xtask test`), with real HTTP-01 validation: pebble's
//! validator connects to the node's own responder on the harness's HTTP-01 port.
//!
//! One test function, because every section needs that one port.

// Test helpers outside `#[test]` functions: clippy.toml's test allowance does not reach them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use holdfast_issuance::acme::{AcmeConfig, AcmeSource};
use holdfast_issuance::issuer::{Hostname, Issuer};
use holdfast_issuance::responder::{Challenges, Http01Responder};
use holdfast_issuance::{
    CertStore, CertifiedPair, ErrorClass, HistoryDb, IssuePolicy, IssueReason, ManualWallClock,
    Source, SourceError, Verdict, WallClock as _,
};
use holdfast_test_support::fault_proxy::{FaultProxy, Mode};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject as _;

const DAY: Duration = Duration::from_secs(86400);

fn acme_config(directory: &str, ca: &Path, account: PathBuf, profile: Option<&str>) -> AcmeConfig {
    AcmeConfig {
        directory: directory.to_owned(),
        contact: vec![],
        eab: None,
        profile: profile.map(str::to_owned),
        ca_pem: Some(ca.to_owned()),
        account_path: account,
        order_timeout: Duration::from_secs(30),
    }
}

/// Pebble rejects a share of nonces on purpose; instant-acme retries a bad nonce twice, and a
/// third rejection in a row (about 0.3 % of requests) is a classified server error. A test of
/// anything else retries that, as the issuer's pacing would.
async fn obtain(source: &AcmeSource, host: &str) -> CertifiedPair {
    let mut last = None;
    for _ in 0..4 {
        match source.obtain(&[host.to_owned()]).await {
            Ok(pair) => return pair,
            Err(err) if err.class == ErrorClass::Server => last = Some(err),
            Err(err) => panic!("{host}: {err}"),
        }
    }
    panic!("{host}: {last:?}")
}

/// [`obtain`] for a certificate of several names.
async fn obtain_names(source: &AcmeSource, names: &[String]) -> CertifiedPair {
    let mut last = None;
    for _ in 0..4 {
        match source.obtain(names).await {
            Ok(pair) => return pair,
            Err(err) if err.class == ErrorClass::Server => last = Some(err),
            Err(err) => panic!("{names:?}: {err}"),
        }
    }
    panic!("{names:?}: {last:?}")
}

/// The failure of an attempt that must fail, past Pebble's deliberate bad nonces.
async fn obtain_err(source: &AcmeSource, names: &[String]) -> SourceError {
    let mut last = None;
    for _ in 0..4 {
        match source.obtain(names).await {
            Ok(_) => panic!("{names:?} issued"),
            Err(err) if err.class == ErrorClass::Server => last = Some(err),
            Err(err) => return err,
        }
    }
    panic!("{names:?}: {last:?}")
}

/// Has challtestsrv's DNS answer `host` with `ip`.
fn add_a(challtestsrv: &str, host: &str, ip: &str) {
    let body = format!(r#"{{"host":"{host}.","addresses":["{ip}"]}}"#);
    let out = std::process::Command::new("curl")
        .args(["-fsS", "-X", "POST", "-d", &body])
        .arg(format!("{challtestsrv}/add-a"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Ticks until the hostname is issued, retrying only bad-nonce server errors (force-retry).
async fn tick_issued(issuer: &Issuer, host: &str) -> IssueReason {
    // The reason the first tick decided on: a retry after a server error (Pebble rejects a share of
    // nonces on purpose) is this test's own manual trigger, not the decision being checked.
    let mut first = None;
    for _ in 0..4 {
        let report = issuer.tick().await.unwrap();
        let reason = report
            .dispatched
            .iter()
            .find(|(h, _)| h == host)
            .map(|(_, r)| *r)
            .expect("dispatched");
        let first = *first.get_or_insert(reason);
        if report.issued.iter().any(|h| h == host) {
            return first;
        }
        let err: &SourceError = &report.failed[0].1;
        assert_eq!(err.class, ErrorClass::Server, "{err}");
        issuer.force_retry(host).unwrap();
        issuer.trigger(host).unwrap();
    }
    panic!("{host} not issued")
}

fn pebble_root(acme: &holdfast_test_support::services::Acme) -> Vec<CertificateDer<'static>> {
    let management = acme
        .management
        .as_deref()
        .expect("the harness exports pebble's management API");
    let out = std::process::Command::new("curl")
        .args(["-fsS", "--cacert"])
        .arg(&acme.ca_pem)
        .arg(format!("{management}/roots/0"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    CertificateDer::pem_slice_iter(&out.stdout)
        .collect::<Result<_, _>>()
        .unwrap()
}

/// The chain verifies link by link up to Pebble's root, and the leaf matches the key.
fn assert_chains_to(pair: &CertifiedPair, roots: &[CertificateDer<'static>]) {
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(pair.chain_pem.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap();
    assert!(chain.len() >= 2, "leaf and intermediate");
    let parsed: Vec<_> = chain
        .iter()
        .map(|c| x509_parser::parse_x509_certificate(c.as_ref()).unwrap().1)
        .collect();
    for pair in parsed.windows(2) {
        pair[0]
            .verify_signature(Some(pair[1].public_key()))
            .unwrap();
    }
    let root = x509_parser::parse_x509_certificate(roots[0].as_ref())
        .unwrap()
        .1;
    parsed
        .last()
        .unwrap()
        .verify_signature(Some(root.public_key()))
        .unwrap();
    // The key matches: CertifiedPair::parse checks it; parse again independently.
    CertifiedPair::parse(
        pair_host(&parsed[0]).as_str(),
        &pair.chain_pem,
        &pair.key_pem,
    )
    .unwrap();
}

fn pair_host(leaf: &x509_parser::certificate::X509Certificate<'_>) -> String {
    let san = leaf.subject_alternative_name().unwrap().unwrap();
    match &san.value.general_names[0] {
        x509_parser::extensions::GeneralName::DNSName(d) => (*d).to_owned(),
        other => panic!("{other:?}"),
    }
}

fn new_issuer(
    dir: &Path,
    source: Arc<dyn Source>,
    hosts: &[&str],
    clock: &ManualWallClock,
    attempt_timeout: Duration,
) -> Issuer {
    Issuer::new(
        IssuePolicy::standard(3),
        hosts
            .iter()
            .map(|h| Hostname {
                name: (*h).to_owned(),
                also: Vec::new(),
                source: source.clone(),
            })
            .collect(),
        HistoryDb::open(&dir.join("attempts.sqlite"), 50).unwrap(),
        CertStore::new(&dir.join("certs")).unwrap(),
        Arc::new(clock.clone()),
        attempt_timeout,
    )
    .unwrap()
}

// r[verify issue.acme.flow]
// r[verify issue.certificates]
// r[verify issue.certificates.failure]
// r[verify issue.acme.account]
// r[verify issue.acme.profile]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pebble_issues_renews_and_survives_an_outage() {
    let Some(acme) = holdfast_test_support::services::acme() else {
        return;
    };
    let port = acme
        .http01_port
        .expect("the harness exports the HTTP-01 port");
    let responder = Http01Responder::bind(SocketAddr::from(([127, 0, 0, 1], port)))
        .await
        .unwrap();
    let challenges: Challenges = responder.challenges().clone();
    let dir = tempfile::tempdir().unwrap();
    let roots = pebble_root(&acme);

    // --- End to end, five hostnames; the first includes creating the account.
    let account = dir.path().join("acme-account.json");
    let source = AcmeSource::new(
        acme_config(&acme.directory, &acme.ca_pem, account.clone(), None),
        challenges.clone(),
    );
    let mut times = Vec::new();
    for i in 0..6 {
        let host = format!("e2e{i}.holdfast.test");
        let began = Instant::now();
        let pair = obtain(&source, &host).await;
        times.push(began.elapsed());
        assert_chains_to(&pair, &roots);
    }
    let first = times.remove(0);
    times.sort();
    println!(
        "pebble end-to-end issuance: first (with account creation) {first:?}; \
         median of 5 {:?} (all {times:?})",
        times[2]
    );
    // The account was created once, persisted 0600, and is reused by a new source.
    let mode = std::fs::metadata(&account).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let saved = std::fs::read(&account).unwrap();
    let reused = AcmeSource::new(
        acme_config(&acme.directory, &acme.ca_pem, account.clone(), None),
        challenges.clone(),
    );
    obtain(&reused, "reuse.holdfast.test").await;
    assert_eq!(std::fs::read(&account).unwrap(), saved, "no new account");

    // --- A requested profile the directory does not list is an error, before any order.
    let profiled = AcmeSource::new(
        acme_config(
            &acme.directory,
            &acme.ca_pem,
            account.clone(),
            Some("shortlived"),
        ),
        challenges.clone(),
    );
    let err = profiled
        .obtain(&["profile.holdfast.test".to_owned()])
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Rejected);
    assert!(err.message.contains("shortlived"), "{err}");

    // --- Two names, one order: the leaf names both and chains to Pebble's root.
    let two = [
        "two.holdfast.test".to_owned(),
        "www.two.holdfast.test".to_owned(),
    ];
    let began = Instant::now();
    let pair = obtain_names(&source, &two).await;
    println!("pebble two-name issuance: {:?}", began.elapsed());
    assert!(pair.covers(&two));
    assert_chains_to(&pair, &roots);
    // A name that cannot be validated fails the order, and the error names it: challtestsrv
    // resolves it to 127.0.0.2, where nothing answers HTTP-01.
    add_a(&acme.challtestsrv, "bad.holdfast.test", "127.0.0.2");
    let mixed = [
        "ok.holdfast.test".to_owned(),
        "bad.holdfast.test".to_owned(),
    ];
    let err = obtain_err(&source, &mixed).await;
    assert_eq!(err.class, ErrorClass::Validation, "{err}");
    // The server's own problem is kept, and the failed authorization's name appended to it.
    assert!(
        err.message
            .contains("authorization for bad.holdfast.test is Invalid"),
        "{err}"
    );
    assert!(
        !err.message.contains("ok.holdfast.test is Invalid"),
        "{err}"
    );
    println!("pebble order with a name that cannot be validated: {err}");

    // --- Through the issuer: issue, restart issues nothing, renewal when the clock passes it.
    let clock = ManualWallClock::new(SystemTime::now());
    let source: Arc<dyn Source> = Arc::new(AcmeSource::new(
        acme_config(&acme.directory, &acme.ca_pem, account.clone(), None),
        challenges.clone(),
    ));
    let node = dir.path().join("node");
    let host = "node.holdfast.test";
    let first_pair = {
        let issuer = new_issuer(
            &node,
            source.clone(),
            &[host],
            &clock,
            Duration::from_secs(60),
        );
        assert_eq!(tick_issued(&issuer, host).await, IssueReason::Missing);
        issuer.store().get(host).unwrap()
    };
    let issuer = new_issuer(
        &node,
        source.clone(),
        &[host],
        &clock,
        Duration::from_secs(60),
    );
    assert!(matches!(
        issuer.verdict(host).unwrap(),
        Verdict::Valid { .. }
    ));
    assert!(
        issuer.tick().await.unwrap().dispatched.is_empty(),
        "restart issues nothing"
    );
    clock.advance(
        first_pair
            .info
            .renew_at
            .duration_since(clock.now())
            .unwrap(),
    );
    let mut watch = issuer.store().subscribe();
    assert_eq!(tick_issued(&issuer, host).await, IssueReason::Renewal);
    watch.changed().await.unwrap();
    let renewed = issuer.store().get(host).unwrap();
    assert_ne!(renewed.chain_pem, first_pair.chain_pem);
    assert_chains_to(&renewed, &roots);

    // --- Pebble unreachable for a simulated day (refusing, then stalling) behind the proxy.
    let upstream: SocketAddr = acme
        .directory
        .trim_start_matches("https://")
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let proxy = FaultProxy::start(upstream).await.unwrap();
    proxy.set_mode(Mode::Refuse).await.unwrap();
    let through_proxy = format!("https://{}/dir", proxy.addr());
    let outage_dir = dir.path().join("outage");
    let clock = ManualWallClock::new(SystemTime::now());
    let source: Arc<dyn Source> = Arc::new(AcmeSource::new(
        acme_config(
            &through_proxy,
            &acme.ca_pem,
            outage_dir.join("acme-account.json"),
            None,
        ),
        challenges.clone(),
    ));
    let host = "outage.holdfast.test";
    let issuer = new_issuer(&outage_dir, source, &[host], &clock, Duration::from_secs(2));
    let policy = *issuer.policy();
    let tick = Duration::from_secs(300);
    let mut elapsed = Duration::ZERO;
    let mut block = None;
    while elapsed < DAY {
        if elapsed >= DAY / 2 && block.is_some() {
            proxy
                .set_mode(Mode::Stall { after_bytes: 0 })
                .await
                .unwrap();
        }
        let report = issuer.tick().await.unwrap();
        assert!(report.issued.is_empty());
        if let Verdict::Blocked { until, .. } = issuer.verdict(host).unwrap() {
            assert!(until <= clock.now() + policy.block_for);
            block.get_or_insert((elapsed, until));
        }
        clock.advance(tick);
        elapsed += tick;
    }
    let rows = issuer.with_history(|db| db.row_count_of(host).unwrap());
    let classes: Vec<_> = issuer.with_history(|db| {
        db.attempts(host, 50)
            .unwrap()
            .into_iter()
            .map(|r| r.error_class.unwrap_or_default())
            .collect()
    });
    println!(
        "pebble outage: {rows} attempt rows in one simulated day; block engaged at {:?}; \
         classes newest first {classes:?}; {} connections reached the stalled proxy",
        block.map(|b| b.0),
        proxy.connections()
    );
    assert!((6..=10).contains(&rows), "{rows} rows");
    assert!(block.is_some(), "the block engaged");
    assert!(classes.iter().any(|c| c == "unreachable"));
    assert!(
        classes.iter().any(|c| c == "timeout"),
        "the stall timed out"
    );
    // Force-retry clears the block; with Pebble back, the next attempt succeeds.
    proxy.set_mode(Mode::Forward).await.unwrap();
    issuer.force_retry(host).unwrap();
    assert!(issuer.verdict(host).unwrap().is_issue());
    tick_issued(&issuer, host).await;
    assert_chains_to(&issuer.store().get(host).unwrap(), &roots);
}
