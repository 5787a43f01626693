//! Smoke test: pebble's ACME directory over TLS, trusting the CA the harness generated.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed step should panic.

use holdfast_e2e::{Target, http_request, tls_config};
use holdfast_test_support::services;

// i[verify harness.services.acme]
// i[verify harness.services.ready]
#[tokio::test]
async fn pebble_serves_its_directory_over_tls_with_the_generated_ca() {
    let Some(acme) = services::acme() else { return };
    let target = Target::parse(&acme.directory).unwrap();
    let path = acme
        .directory
        .splitn(4, '/')
        .nth(3)
        .map(|p| format!("/{p}"))
        .unwrap();
    let tls = tls_config(&acme.ca_pem).unwrap();

    let response = http_request(&target, "GET", &path, &[], None, Some(tls))
        .await
        .unwrap();

    assert_eq!(response.status, 200);
    let directory: serde_json::Value = serde_json::from_slice(&response.body).unwrap();
    let base = format!("https://{}:{}/", target.host, target.port);
    for endpoint in ["newNonce", "newAccount", "newOrder"] {
        let url = directory[endpoint].as_str().unwrap_or_default();
        assert!(url.starts_with(&base), "{endpoint} is {url:?}");
    }
}

// i[verify harness.services.acme]
#[tokio::test]
async fn pebble_is_not_trusted_without_the_generated_ca() {
    let Some(acme) = services::acme() else { return };
    let target = Target::parse(&acme.directory).unwrap();
    // A CA of our own making that did not sign pebble's certificate: the handshake must fail.
    let other_ca = tempfile_with(include_str!("other-ca.pem"));
    let tls = tls_config(&other_ca).unwrap();
    let outcome = http_request(&target, "GET", "/dir", &[], None, Some(tls)).await;
    let err = outcome.expect_err("pebble's certificate must only verify against the harness CA");
    assert!(format!("{err:?}").contains("UnknownIssuer"), "{err:?}");
}

fn tempfile_with(text: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("holdfast-other-ca-{}.pem", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

// i[verify harness.services.acme]
#[tokio::test]
async fn challtestsrv_takes_dns_records_over_its_management_api() {
    let Some(acme) = services::acme() else { return };
    let target = Target::parse(&acme.challtestsrv).unwrap();
    // pebble resolves every name through challtestsrv; a test may point one elsewhere and back.
    let record = r#"{"host":"smoke.holdfast.test","addresses":["127.0.0.1"]}"#;
    let added = http_request(&target, "POST", "/add-a", &[], Some(record.into()), None)
        .await
        .unwrap();
    assert_eq!(added.status, 200);
    let cleared = r#"{"host":"smoke.holdfast.test"}"#;
    let cleared = http_request(&target, "POST", "/clear-a", &[], Some(cleared.into()), None)
        .await
        .unwrap();
    assert_eq!(cleared.status, 200);
}
