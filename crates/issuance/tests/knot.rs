//! Against a real Knot DNS (started by `cargo xtask test`): the `rfc2136` provider adds and removes
//! TXT records with TSIG-signed updates, seen through real queries; the propagation check waits
//! for them; a wrong key is refused.

// Test helpers outside `#[test]` functions: clippy.toml's test allowance does not reach them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use holdfast_issuance::acme::{AcmeConfig, AcmeSource};
use holdfast_issuance::responder::Challenges;
use holdfast_issuance::{Cleanups, Dns01, ErrorClass, ExecProvider, Source};
use holdfast_issuance::{
    Dns01Error, DnsProvider, HickoryLookup, Propagation, Rfc2136, Rfc2136Config, TsigAlgo,
    TxtLookup, read_secret,
};
use holdfast_test_support::services::{Knot, acme_dns01, knot};

fn rfc2136_config(knot: &Knot, secret: Vec<u8>) -> Rfc2136Config {
    Rfc2136Config {
        server: knot.addr,
        zone: knot.zone.clone(),
        tsig_key_name: knot.tsig_name.clone(),
        tsig_algorithm: TsigAlgo::HmacSha256,
        tsig_secret: secret,
        ttl: 60,
        timeout: Duration::from_secs(5),
    }
}

fn provider(knot: &Knot, secret: Vec<u8>) -> Rfc2136 {
    Rfc2136::new(rfc2136_config(knot, secret)).unwrap()
}

async fn txt(knot: &Knot, name: &str) -> Vec<String> {
    let mut values = HickoryLookup::default().txt(knot.addr, name).await.unwrap();
    values.sort();
    values
}

// r[verify issue.dns01.rfc2136]
// r[verify issue.dns01.propagation]
#[tokio::test]
async fn rfc2136_adds_and_removes_txt_values_on_a_real_knot() {
    let Some(knot) = knot() else { return };
    let secret = read_secret(&knot.tsig_file).unwrap();
    let dns = provider(&knot, secret.clone());
    let name = format!("_acme-challenge.rfc2136.{}.", knot.zone);
    assert_eq!(txt(&knot, &name).await, Vec::<String>::new());

    // Two values at one name (a wildcard and its base name): side by side.
    dns.present(&name, "value-one").await.unwrap();
    dns.present(&name, "value-two").await.unwrap();
    assert_eq!(txt(&knot, &name).await, ["value-one", "value-two"]);

    // The propagation check sees it at once on the authoritative server.
    let propagation = Propagation {
        servers: vec![knot.addr],
        timeout: Duration::from_secs(10),
        interval: Duration::from_millis(200),
        lookup: Arc::new(HickoryLookup::default()),
    };
    propagation.wait(&name, "value-two").await.unwrap();

    // A cleanup removes exactly its value.
    dns.cleanup(&name, "value-one").await.unwrap();
    assert_eq!(txt(&knot, &name).await, ["value-two"]);
    dns.cleanup(&name, "value-two").await.unwrap();
    assert_eq!(txt(&knot, &name).await, Vec::<String>::new());
    // Removing what is not there is not an error (RFC 2136 §3.4.2.4).
    dns.cleanup(&name, "value-two").await.unwrap();

    // A value that never comes: the bounded wait fails naming the server.
    let short = Propagation {
        timeout: Duration::from_millis(600),
        ..propagation
    };
    let err = short.wait(&name, "value-two").await.unwrap_err();
    assert!(err.to_string().contains(&knot.addr.to_string()), "{err}");

    // A wrong secret: the server refuses the update (BADSIG, unsigned), a typed error; nothing
    // added.
    let secret_copy = secret.clone();
    let mut wrong = secret;
    wrong[0] ^= 0xff;
    let err = provider(&knot, wrong)
        .present(&name, "forged")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Dns01Error::Unauthenticated { message, .. } if message.starts_with("BADSIG")),
        "{err}"
    );
    assert_eq!(txt(&knot, &name).await, Vec::<String>::new());
    // A key name the server does not know: refused too.
    let unknown = Rfc2136::new(Rfc2136Config {
        server: knot.addr,
        zone: knot.zone.clone(),
        tsig_key_name: "nobody".into(),
        tsig_algorithm: TsigAlgo::HmacSha256,
        tsig_secret: b"whatever".to_vec(),
        ttl: 60,
        timeout: Duration::from_secs(5),
    })
    .unwrap();
    let err = unknown.present(&name, "forged").await.unwrap_err();
    assert!(
        matches!(&err, Dns01Error::Unauthenticated { message, .. } if message.starts_with("BADKEY")),
        "{err}"
    );
    assert_eq!(txt(&knot, &name).await, Vec::<String>::new());
    // A zone the server does not serve: its RCODE, NOTAUTH.
    let elsewhere = Rfc2136::new(Rfc2136Config {
        zone: "not-served.test".into(),
        ..rfc2136_config(&knot, secret_copy)
    })
    .unwrap();
    let err = elsewhere
        .present("_acme-challenge.not-served.test.", "forged")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Dns01Error::Refused { rcode, .. } if rcode.starts_with("NOTAUTH")),
        "{err}"
    );
}

// r[verify issue.dns01.record]
// r[verify issue.dns01.cleanup]
// r[verify issue.dns01.propagation]
// r[verify issue.dns01.choice]
#[tokio::test]
async fn a_wildcard_and_its_base_name_are_issued_over_dns01_against_pebble_and_knot() {
    let Some((directory, ca, knot)) = acme_dns01() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let acme = AcmeSource::new(
        AcmeConfig {
            directory,
            contact: vec![],
            eab: None,
            profile: None,
            ca_pem: Some(ca),
            account_path: dir.path().join("account.json"),
            order_timeout: Duration::from_secs(60),
        },
        Challenges::default(),
    );
    let secret = read_secret(&knot.tsig_file).unwrap();
    let cleanups = Cleanups::default();
    let source = acme.with_dns01(Dns01 {
        provider: Arc::new(provider(&knot, secret)),
        propagation: Some(Propagation {
            servers: vec![knot.addr],
            timeout: Duration::from_secs(30),
            interval: Duration::from_millis(200),
            lookup: Arc::new(HickoryLookup::default()),
        }),
        cleanups: cleanups.clone(),
    });
    let names = [format!("*.{}", knot.zone), knot.zone.clone()];
    // Pebble rejects a share of nonces on purpose: a server error is retried, as pacing would.
    let mut pair = None;
    for _ in 0..4 {
        match source.obtain(&names).await {
            Ok(p) => {
                pair = Some(p);
                break;
            }
            Err(err) if err.class == ErrorClass::Server => continue,
            Err(err) => panic!("{names:?}: {err}"),
        }
    }
    let pair = pair.expect("issued within four attempts");
    let (_, leaf) = x509_parser::parse_x509_certificate(&pair.leaf_der).unwrap();
    let mut sans: Vec<String> = leaf
        .subject_alternative_name()
        .unwrap()
        .expect("a SAN extension")
        .value
        .general_names
        .iter()
        .filter_map(|n| match n {
            x509_parser::extensions::GeneralName::DNSName(d) => Some((*d).to_owned()),
            _ => None,
        })
        .collect();
    sans.sort();
    let mut want = names.to_vec();
    want.sort();
    assert_eq!(sans, want);
    // Both values were presented at one name, and both are gone once the removals (which run
    // after the outcome) have finished.
    let left = cleanups
        .wait(tokio::time::Instant::now() + Duration::from_secs(30))
        .await;
    assert_eq!(left, Vec::<(String, String)>::new());
    let record = format!("_acme-challenge.{}.", knot.zone);
    assert_eq!(txt(&knot, &record).await, Vec::<String>::new());

    // The time to a wildcard certificate (with its base name), median of 5, for the closing note.
    let mut times = Vec::new();
    for _ in 0..12 {
        if times.len() == 5 {
            break;
        }
        let began = std::time::Instant::now();
        match source.obtain(&names).await {
            Ok(_) => times.push(began.elapsed()),
            Err(err) if err.class == ErrorClass::Server => {}
            Err(err) => panic!("{names:?}: {err}"),
        }
        cleanups
            .wait(tokio::time::Instant::now() + Duration::from_secs(30))
            .await;
    }
    assert_eq!(times.len(), 5, "five issued within twelve tries");
    times.sort();
    println!(
        "pebble dns-01 wildcard issuance (knot): median of 5 {:?} (all {times:?})",
        times[2]
    );
}

/// A DNS hook as an operator would write one for lego's exec convention: knsupdate with the TSIG
/// key, server, zone and key given as the command's own first arguments (its environment is only
/// PATH).
const KNSUPDATE_HOOK: &str = r#"#!/bin/sh
set -eu
server=$1 port=$2 zone=$3 name=$4 keyfile=$5 action=$6 fqdn=$7 value=$8
case "$action" in
  present) op=add ;;
  cleanup) op=delete ;;
  *) echo "unknown action $action" >&2; exit 2 ;;
esac
printf 'server %s %s\nzone %s.\nupdate %s %s 60 TXT "%s"\nsend\n' \
  "$server" "$port" "$zone" "$op" "$fqdn" "$value" \
  | knsupdate -y "hmac-sha256:$name:$(cat "$keyfile")"
"#;

// r[verify issue.dns01.exec]
// r[verify issue.dns01.propagation]
#[tokio::test]
async fn the_exec_provider_edits_the_same_zone_through_a_script() {
    use std::os::unix::fs::PermissionsExt as _;
    let Some(knot) = knot() else { return };
    if std::process::Command::new("knsupdate")
        .arg("-V")
        .output()
        .is_err()
    {
        holdfast_test_support::services::skip_loudly(
            "knsupdate",
            "knot-dnsutils is not installed",
            holdfast_test_support::services::FailWhen::Harness,
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let hook = dir.path().join("dns-hook");
    std::fs::write(&hook, KNSUPDATE_HOOK).unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let argv = vec![
        hook.display().to_string(),
        knot.addr.ip().to_string(),
        knot.addr.port().to_string(),
        knot.zone.clone(),
        knot.tsig_name.clone(),
        knot.tsig_file.display().to_string(),
    ];
    let exec = ExecProvider::new(argv, Duration::from_secs(20));
    let name = format!("_acme-challenge.exec.{}.", knot.zone);
    exec.present(&name, "exec-value").await.unwrap();
    let propagation = Propagation {
        servers: vec![knot.addr],
        timeout: Duration::from_secs(10),
        interval: Duration::from_millis(200),
        lookup: Arc::new(HickoryLookup::default()),
    };
    propagation.wait(&name, "exec-value").await.unwrap();
    assert_eq!(txt(&knot, &name).await, ["exec-value"]);
    exec.cleanup(&name, "exec-value").await.unwrap();
    assert_eq!(txt(&knot, &name).await, Vec::<String>::new());
    // A name outside the zone: knsupdate fails, and the error carries what it printed.
    let err = exec
        .present("_acme-challenge.elsewhere.invalid.", "v")
        .await
        .unwrap_err();
    let Dns01Error::Exit { output, .. } = &err else {
        panic!("{err:?}");
    };
    assert!(!output.is_empty(), "{err}");
}
