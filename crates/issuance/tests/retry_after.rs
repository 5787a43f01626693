//! A hostile ACME server's `Retry-After` through the whole issuance pass: renewal information and
//! order polling answered with `Retry-After: 18446744073709551615` (which instant-acme alone turns
//! into an overflow panic) end in a bounded recheck and a classified failure.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use holdfast_issuance::acme::{AcmeConfig, AcmeSource};
use holdfast_issuance::acme_http::RETRY_AFTER_MAX;
use holdfast_issuance::cert::testing::leaf;
use holdfast_issuance::history::HistoryDb;
use holdfast_issuance::issuer::{Hostname, Issuer};
use holdfast_issuance::responder::Challenges;
use holdfast_issuance::source::BoxFuture;
use holdfast_issuance::{
    CertStore, CertifiedPair, ErrorClass, IssuePolicy, ManualWallClock, Source, SourceError,
    Verdict, WallClock as _,
};

const DAY: Duration = Duration::from_secs(86400);
const BASE: &str = "https://acme.test";
const HOSTILE: &str = "18446744073709551615";

/// An ACME server in process whose order polls and renewal-information answers carry
/// `Retry-After: {retry_after}`; its authorization is already valid, its order never ready.
struct HostileAcme {
    retry_after: &'static str,
    window: (SystemTime, SystemTime),
    order_polls: AtomicU64,
    ari_asks: AtomicU64,
}

fn rfc3339(at: SystemTime) -> String {
    time::OffsetDateTime::from(at)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

impl instant_acme::HttpClient for HostileAcme {
    fn request(
        &self,
        req: hyper::Request<instant_acme::BodyWrapper<bytes::Bytes>>,
    ) -> Pin<
        Box<dyn Future<Output = Result<instant_acme::BytesResponse, instant_acme::Error>> + Send>,
    > {
        let path = req.uri().path().to_owned();
        let mut retry_after = None;
        let (status, location, body) = match path.as_str() {
            "/dir" => (
                200,
                None,
                serde_json::json!({
                    "newNonce": format!("{BASE}/nonce"),
                    "newAccount": format!("{BASE}/account"),
                    "newOrder": format!("{BASE}/order"),
                    "renewalInfo": format!("{BASE}/ari"),
                }),
            ),
            "/nonce" => (200, None, serde_json::json!({})),
            "/account" => (
                201,
                Some(format!("{BASE}/acct/1")),
                serde_json::json!({ "status": "valid" }),
            ),
            "/order" => (
                201,
                Some(format!("{BASE}/order/1")),
                serde_json::json!({
                    "status": "pending",
                    "identifiers": [{ "type": "dns", "value": "a.example" }],
                    "authorizations": [format!("{BASE}/authz/1")],
                    "finalize": format!("{BASE}/finalize/1"),
                }),
            ),
            "/authz/1" => (
                200,
                None,
                serde_json::json!({
                    "status": "valid",
                    "identifier": { "type": "dns", "value": "a.example" },
                    "challenges": [],
                }),
            ),
            "/order/1" => {
                self.order_polls.fetch_add(1, Ordering::SeqCst);
                retry_after = Some(self.retry_after);
                (
                    200,
                    None,
                    serde_json::json!({
                        "status": "processing",
                        "identifiers": [{ "type": "dns", "value": "a.example" }],
                        "authorizations": [format!("{BASE}/authz/1")],
                        "finalize": format!("{BASE}/finalize/1"),
                    }),
                )
            }
            p if p.starts_with("/ari/") => {
                self.ari_asks.fetch_add(1, Ordering::SeqCst);
                retry_after = Some(self.retry_after);
                (
                    200,
                    None,
                    serde_json::json!({
                        "suggestedWindow": {
                            "start": rfc3339(self.window.0),
                            "end": rfc3339(self.window.1),
                        },
                    }),
                )
            }
            other => panic!("unexpected request to {other}"),
        };
        let mut response = hyper::Response::builder()
            .status(status)
            .header("Replay-Nonce", "nonce-1")
            .header("Content-Type", "application/json");
        if let Some(l) = location {
            response = response.header("Location", l);
        }
        if let Some(r) = retry_after {
            response = response.header("Retry-After", r);
        }
        let (parts, ()) = response.body(()).unwrap().into_parts();
        let body: Box<dyn instant_acme::BytesBody> = Box::new(bytes::Bytes::from(body.to_string()));
        Box::pin(async move { Ok(instant_acme::BytesResponse { parts, body }) })
    }
}

fn hostile(retry_after: &'static str, window: (SystemTime, SystemTime)) -> Arc<HostileAcme> {
    Arc::new(HostileAcme {
        retry_after,
        window,
        order_polls: AtomicU64::new(0),
        ari_asks: AtomicU64::new(0),
    })
}

fn acme_source(dir: &std::path::Path, server: Arc<HostileAcme>) -> AcmeSource {
    AcmeSource::with_http(
        AcmeConfig {
            directory: format!("{BASE}/dir"),
            contact: vec![],
            eab: None,
            profile: None,
            ca_pem: None,
            account_path: dir.join("account.json"),
            order_timeout: Duration::from_secs(60),
        },
        Challenges::default(),
        server,
    )
}

fn issuer(dir: &std::path::Path, source: Arc<dyn Source>, clock: &ManualWallClock) -> Issuer {
    Issuer::new(
        IssuePolicy::standard(1),
        vec![Hostname {
            name: "a.example".into(),
            also: Vec::new(),
            source,
        }],
        HistoryDb::open(&dir.join("attempts.sqlite"), 50).unwrap(),
        CertStore::new(&dir.join("certs")).unwrap(),
        Arc::new(clock.clone()),
        Duration::from_secs(60),
    )
    .unwrap()
}

// r[verify issue.acme.retry-after]
#[tokio::test(start_paused = true)]
async fn an_order_poll_told_to_wait_forever_ends_as_a_classified_timeout() {
    for retry_after in [
        HOSTILE,
        // instant-acme reads the number with `u64::from_str`, which takes a '+' sign.
        "+18446744073709551615",
        "99999999999999999999999",
        "Fri, 31 Dec 9999 23:59:59 GMT",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualWallClock::new(SystemTime::now());
        let server = hostile(retry_after, (clock.now(), clock.now()));
        let source = Arc::new(acme_source(dir.path(), server.clone()));
        let issuer = issuer(dir.path(), source, &clock);
        let report = issuer.tick().await.unwrap();
        assert!(report.issued.is_empty(), "{retry_after}");
        let [(host, err)] = &report.failed[..] else {
            panic!("{retry_after}: one failure: {:?}", report.failed);
        };
        assert_eq!(host, "a.example");
        assert_eq!(err.class, ErrorClass::Timeout, "{retry_after}: {err}");
        assert_eq!(
            server.order_polls.load(Ordering::SeqCst),
            1,
            "{retry_after}: a day's wait exceeds the order timeout at once"
        );
        // The failure is paced like any other: the next tick does not go straight back.
        assert!(
            !matches!(issuer.verdict("a.example").unwrap(), Verdict::Issue { .. }),
            "{retry_after}"
        );
    }
}

/// Issues test leaves itself; asks the (hostile) ACME server for renewal information.
struct AriThroughAcme(AcmeSource);

impl Source for AriThroughAcme {
    fn name(&self) -> &str {
        "acme"
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
    fn renewal_window<'a>(
        &'a self,
        pair: &'a CertifiedPair,
    ) -> BoxFuture<'a, Option<holdfast_issuance::acme::RenewalWindow>> {
        self.0.renewal_window(pair)
    }
}

// r[verify issue.acme.retry-after]
#[tokio::test]
async fn renewal_information_told_to_wait_forever_is_asked_again_within_a_day() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualWallClock::new(SystemTime::now());
    let now = clock.now();
    let window = (now + 40 * DAY, now + 41 * DAY);
    let server = hostile(HOSTILE, window);
    let source = Arc::new(AriThroughAcme(acme_source(dir.path(), server.clone())));
    let issuer = issuer(dir.path(), source, &clock);
    assert_eq!(issuer.tick().await.unwrap().issued, ["a.example"]);
    issuer.tick().await.unwrap();
    assert_eq!(
        server.ari_asks.load(Ordering::SeqCst),
        1,
        "the window was asked"
    );
    // The window is used: the renewal time lies inside it.
    match issuer.verdict("a.example").unwrap() {
        Verdict::Valid { renew_at } => {
            assert!(renew_at >= window.0 && renew_at < window.1, "{renew_at:?}");
        }
        other => panic!("valid: {other:?}"),
    }
    // Asked again a day later at the latest, never "in 584 billion years".
    clock.advance(RETRY_AFTER_MAX - Duration::from_secs(5));
    issuer.tick().await.unwrap();
    assert_eq!(
        server.ari_asks.load(Ordering::SeqCst),
        1,
        "not before the day"
    );
    clock.advance(Duration::from_secs(5));
    issuer.tick().await.unwrap();
    assert_eq!(server.ari_asks.load(Ordering::SeqCst), 2, "a day later");
}
