//! TLS-ALPN-01 against the real Pebble (started by `cargo xtask test`): pebble's validator makes a
//! TLS handshake with `acme-tls/1` to the node's own listener on the harness's TLS-ALPN-01 port.
//!
//! One test function, because every section needs that one port.

// Test helpers outside `#[test]` functions: clippy.toml's test allowance does not reach them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use holdfast_issuance::acme::{AcmeConfig, AcmeSource};
use holdfast_lifecycle::FaultBoard;

use holdfast_issuance::responder::Challenges;
use holdfast_issuance::{
    AlpnLimits, CertifiedPair, ErrorClass, IssuanceConfig, Source, SourceError, SystemWallClock,
    TlsAlpnResponder, start,
};

fn acme_config(directory: &str, ca: PathBuf, account: PathBuf) -> AcmeConfig {
    AcmeConfig {
        directory: directory.to_owned(),
        contact: vec![],
        eab: None,
        profile: None,
        ca_pem: Some(ca),
        account_path: account,
        order_timeout: Duration::from_secs(30),
    }
}

/// Pebble rejects a share of nonces on purpose: a classified server error is retried, as the
/// issuer's pacing would.
async fn obtain(source: &AcmeSource, names: &[String]) -> Result<CertifiedPair, SourceError> {
    let mut last = None;
    for _ in 0..4 {
        match source.obtain(names).await {
            Ok(pair) => return Ok(pair),
            Err(err) if err.class == ErrorClass::Server => last = Some(err),
            Err(err) => return Err(err),
        }
    }
    Err(last.unwrap())
}

/// The median of five timed issuances of `names(i)`.
async fn median_of_5(source: &AcmeSource, names: impl Fn(usize) -> Vec<String>) -> Duration {
    let mut times = Vec::new();
    for i in 0..5 {
        let names = names(i);
        let began = Instant::now();
        obtain(source, &names)
            .await
            .unwrap_or_else(|e| panic!("{names:?}: {e}"));
        times.push(began.elapsed());
    }
    times.sort();
    times[2]
}

// r[verify issue.acme.tls-alpn01+3]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pebble_issues_over_tls_alpn01_through_the_nodes_own_listener() {
    let Some(acme) = holdfast_test_support::services::acme() else {
        return;
    };
    let port = acme
        .tls_alpn01_port
        .expect("the harness exports the TLS-ALPN-01 port");
    let listener = TlsAlpnResponder::bind(
        SocketAddr::from(([127, 0, 0, 1], port)),
        AlpnLimits::default(),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let source = AcmeSource::new(
        acme_config(
            &acme.directory,
            acme.ca_pem.clone(),
            dir.path().join("acme-account.json"),
        ),
        // No HTTP-01 responder listens: only the TLS listener can validate.
        Challenges::default(),
    )
    .with_tls_alpn01(listener.challenges().clone());

    // One name (the first also creates the account, so it is not timed).
    let pair = obtain(&source, &["alpn0.holdfast.test".to_owned()])
        .await
        .unwrap();
    assert!(pair.chain_pem.contains("BEGIN CERTIFICATE"));
    let answered = listener.stats().answered;
    assert!(answered >= 1, "{:?}", listener.stats());
    // The attempt is over: its identifier is no longer answered.
    assert!(!listener.challenges().contains("alpn0.holdfast.test"));

    let one = median_of_5(&source, |i| vec![format!("alpn-one{i}.holdfast.test")]).await;
    let two = median_of_5(&source, |i| {
        vec![
            format!("alpn-two{i}.holdfast.test"),
            format!("www.alpn-two{i}.holdfast.test"),
        ]
    })
    .await;
    println!("pebble tls-alpn-01 issuance: median of 5, one name {one:?}, two names {two:?}");
    assert!(
        listener.stats().answered >= answered + 15,
        "every authorization was validated over the listener: {:?}",
        listener.stats()
    );
    assert_eq!(
        listener.stats().refused_protocol,
        0,
        "{:?}",
        listener.stats()
    );

    // The module as the node starts it: `challenge = "tls-alpn-01"` binds the listener on the
    // same port and wires it to the ACME source it builds, so Pebble validates through it.
    drop(listener);
    let config: IssuanceConfig = serde_json::from_value(serde_json::json!({
        "tick": "200ms",
        "certificate": [{
            "names": ["alpn-module.holdfast.test"], "source": "acme", "challenge": "tls-alpn-01",
        }],
        "acme": {
            "directory": acme.directory,
            "ca_pem": acme.ca_pem,
            "http01_bind": "127.0.0.1:0",
            "tls_alpn01_bind": format!("127.0.0.1:{port}"),
        },
    }))
    .unwrap();
    let module_dir = tempfile::tempdir().unwrap();
    let started = start(
        &config,
        module_dir.path(),
        1,
        Arc::new(SystemWallClock),
        FaultBoard::new(),
    )
    .await
    .unwrap();
    let name = "alpn-module.holdfast.test";
    let deadline = Instant::now() + Duration::from_secs(60);
    while started.store().get(name).is_none() {
        assert!(
            Instant::now() < deadline,
            "no certificate through the module's listener"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        // Pebble rejects a share of nonces on purpose: retry past the debounce.
        let _ = started.issuer().force_retry(name);
    }
    let stats = started.tls_alpn01_stats().unwrap();
    assert!(stats.answered >= 1, "{stats:?}");
    started
        .shutdown(tokio::time::Instant::now() + Duration::from_secs(5))
        .await
        .unwrap();
}
