//! TLS-ALPN-01 against the real Pebble (started by `cargo xtask test`) through the gateway's
//! `wss://` listener, as the node wires it when the gateway holds the port Pebble validates on:
//! the issuance side puts its challenges in the node's shared set, the gateway answers from it.
//!
//! One test function, because every section needs that one port.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use holdfast::modules::gateway::IssuanceAlpn;
use holdfast_gateway::{Gateway, GatewayConfig, MemoryRegistry, MemoryRouting, TlsFiles, TokenKey};
use holdfast_issuance::acme::{AcmeConfig, AcmeSource};
use holdfast_issuance::responder::Challenges;
use holdfast_issuance::{
    AlpnChallenges, CertifiedPair, ErrorClass, IssuanceConfig, Source, SourceError,
    SystemWallClock, TlsAlpnListener, start_with,
};
use holdfast_lifecycle::FaultBoard;

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

/// The median of five timed issuances of `names(i)`, and all five.
async fn median_of_5(
    source: &AcmeSource,
    names: impl Fn(usize) -> Vec<String>,
) -> (Duration, Vec<Duration>) {
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
    (times[2], times)
}

/// The gateway on `addr` serving `wss://` with a self-signed pair of its own.
async fn gateway(addr: SocketAddr, dir: &std::path::Path) -> Gateway {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["gateway.holdfast.test".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let files = TlsFiles {
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
    };
    std::fs::write(&files.cert, cert.pem()).unwrap();
    std::fs::write(&files.key, key.serialize_pem()).unwrap();
    let mut config = GatewayConfig::new(addr, "gw", TokenKey::new(b"0123456789abcdef".to_vec()));
    config.tls = Some(files);
    Gateway::start(
        config,
        Arc::new(MemoryRegistry::new()),
        Arc::new(MemoryRouting::new()),
    )
    .await
    .unwrap()
}

// r[verify gateway.tls.alpn01]
// r[verify issue.acme.tls-alpn01+3]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pebble_issues_over_tls_alpn01_through_the_gateways_listener() {
    let Some(acme) = holdfast_test_support::services::acme() else {
        return;
    };
    let port = acme
        .tls_alpn01_port
        .expect("the harness exports the TLS-ALPN-01 port");
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(SocketAddr::from(([127, 0, 0, 1], port)), dir.path()).await;
    // The node's one set of challenges, handed to the gateway as the node does.
    let challenges = AlpnChallenges::default();
    assert!(gw.answer_tls_alpn01(Arc::new(IssuanceAlpn(challenges.clone()))));

    let source = AcmeSource::new(
        AcmeConfig {
            directory: acme.directory.clone(),
            contact: vec![],
            eab: None,
            profile: None,
            ca_pem: Some(acme.ca_pem.clone()),
            account_path: dir.path().join("acme-account.json"),
            order_timeout: Duration::from_secs(30),
        },
        // No HTTP-01 responder listens: only the gateway's listener can validate.
        Challenges::default(),
    )
    .with_tls_alpn01(challenges.clone());

    // One name (the first also creates the account, so it is not timed).
    let pair = obtain(&source, &["gw-alpn0.holdfast.test".to_owned()])
        .await
        .unwrap();
    assert!(pair.chain_pem.contains("BEGIN CERTIFICATE"));
    let answered = gw.stats().tls_alpn_answered;
    assert!(answered >= 1, "{:?}", gw.stats());
    assert!(!challenges.contains("gw-alpn0.holdfast.test"));

    let (one, ones) = median_of_5(&source, |i| vec![format!("gw-one{i}.holdfast.test")]).await;
    let (two, twos) = median_of_5(&source, |i| {
        vec![
            format!("gw-two{i}.holdfast.test"),
            format!("www.gw-two{i}.holdfast.test"),
        ]
    })
    .await;
    println!(
        "pebble tls-alpn-01 issuance through the gateway's listener: median of 5, one name \
         {one:?} (all {ones:?}), two names {two:?} (all {twos:?})"
    );
    assert!(
        gw.stats().tls_alpn_answered >= answered + 15,
        "every authorization was validated over the gateway's listener: {:?}",
        gw.stats()
    );

    // The module as the node starts it beside the gateway: no listener of its own (the port is
    // the gateway's), its challenges in the shared set.
    let config: IssuanceConfig = serde_json::from_value(serde_json::json!({
        "tick": "200ms",
        "certificate": [{
            "names": ["gw-module.holdfast.test"], "source": "acme", "challenge": "tls-alpn-01",
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
    let started = start_with(
        &config,
        module_dir.path(),
        1,
        Arc::new(SystemWallClock),
        FaultBoard::new(),
        TlsAlpnListener::Shared(challenges),
    )
    .await
    .unwrap();
    assert_eq!(started.tls_alpn01_addr(), None);
    let name = "gw-module.holdfast.test";
    let before = gw.stats().tls_alpn_answered;
    let deadline = Instant::now() + Duration::from_secs(60);
    while started.store().get(name).is_none() {
        assert!(
            Instant::now() < deadline,
            "no certificate through the gateway's listener"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        // Pebble rejects a share of nonces on purpose: retry past the debounce.
        let _ = started.issuer().force_retry(name);
    }
    assert!(gw.stats().tls_alpn_answered > before, "{:?}", gw.stats());
    started
        .shutdown(tokio::time::Instant::now() + Duration::from_secs(5))
        .await
        .unwrap();
}
