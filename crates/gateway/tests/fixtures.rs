//! Tokens signed by other people's JWT libraries (PyJWT; Node's `jsonwebtoken` package and its
//! built-in crypto), checked in under `tests/fixtures/jwt` with the scripts that made them:
//! each is accepted, or refused for its reason, by the key set and by a running gateway (1008).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use common::*;
use holdfast_gateway::{AuthSettings, KeySource, TokenKey};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The public halves and the secret the fixtures were signed with, and their audience.
fn keys() -> TokenKey {
    use std::os::unix::fs::PermissionsExt as _;
    let k = fixtures().join("keys");
    // A secret file must be private: a 0600 copy (git keeps no modes), kept for the reloads.
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("hs256.secret");
    std::fs::copy(k.join("hs256.secret"), &secret).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::mem::forget(dir);
    TokenKey::from_sources(
        ["rsa.pub", "ec.pub", "ed.pub"]
            .iter()
            .map(|f| KeySource::public(k.join(f)))
            .chain([KeySource::secret(secret)])
            .collect(),
        AuthSettings {
            audience: vec!["holdfast-test".into()],
            ..AuthSettings::default()
        },
    )
    .unwrap()
}

/// `(case, alg, expected reason or "ok", token)` of one library's file.
fn cases(file: &str) -> Vec<(String, String, String, String)> {
    let text = std::fs::read_to_string(fixtures().join("jwt").join(file)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let tokens = v["tokens"].as_object().unwrap();
    let mut out: Vec<_> = tokens
        .iter()
        .map(|(name, t)| {
            let s = |k: &str| t[k].as_str().unwrap().to_owned();
            (name.clone(), s("alg"), s("expect"), s("token"))
        })
        .collect();
    out.sort();
    // Every algorithm and every refusal the issue names, from each library.
    let names: Vec<&str> = out.iter().map(|c| c.0.as_str()).collect();
    for want in [
        "eddsa",
        "es256",
        "expired",
        "hs256",
        "not_yet_valid",
        "rs256",
        "wrong_audience",
        "wrong_key",
    ] {
        assert!(names.contains(&want), "{file} lacks {want}");
    }
    out
}

fn verify_all(file: &str) {
    let key = keys();
    for (name, alg, expect, token) in cases(file) {
        let got = match key.verify_auth(&token, SystemTime::now()) {
            Ok(c) => {
                assert!(c.user.ends_with("-user"), "{file} {name}: user {}", c.user);
                "ok"
            }
            Err(e) => e.reason(),
        };
        assert_eq!(got, expect, "{file} {name} ({alg})");
    }
}

// r[verify gateway.auth.token+2]
// r[verify gateway.auth.keys]
#[test]
fn pyjwt_tokens_are_accepted_or_refused_for_their_reason() {
    verify_all("pyjwt.json");
}

// r[verify gateway.auth.token+2]
// r[verify gateway.auth.keys]
#[test]
fn node_tokens_are_accepted_or_refused_for_their_reason() {
    verify_all("node.json");
}

// r[verify gateway.auth.token+2]
// r[verify gateway.auth.refusal-reasons]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_gateway_authenticates_the_good_ones_and_closes_the_rest_with_1008() {
    let mut c = config("a");
    c.token_key = keys();
    let node = start(c).await;
    let mut refused = 0;
    for file in ["pyjwt.json", "node.json"] {
        for (name, _, expect, token) in cases(file) {
            let mut ws = connect(&node.gateway).await;
            send_json(&mut ws, serde_json::json!({"type": "auth", "token": token})).await;
            if expect == "ok" {
                let answer: serde_json::Value =
                    serde_json::from_str(&next_text(&mut ws).await).unwrap();
                assert_eq!(answer["type"], "authenticated", "{file} {name}");
            } else {
                let end = read_to_end(&mut ws, Duration::from_secs(5)).await;
                let close = end.close.expect("a close frame");
                assert_eq!(u16::from(close.code), 1008, "{file} {name}");
                refused += 1;
            }
        }
    }
    let stats = node.gateway.stats();
    assert_eq!(stats.auth_failures, refused);
    let by_reason: u64 = stats.token_refusals().map(|(_, n)| n).sum();
    assert_eq!(by_reason, refused);
}
