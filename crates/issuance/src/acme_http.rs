//! The HTTP path to the ACME server: every response passes a guard that bounds its `Retry-After`
//! before instant-acme reads it.
//!
//! instant-acme 0.8 turns `Retry-After: <delay-seconds>` into `SystemTime::now() + secs` and its
//! order polling into `Instant::now() + delay`; both panic on overflow, so a server answering
//! `Retry-After: 18446744073709551615` would crash the renewal pass. The guard rewrites any wait
//! longer than [`RETRY_AFTER_MAX`] to exactly that, in both of the header's forms. Because
//! instant-acme's own client cannot be wrapped (its account builder owns it privately), the default
//! path builds the same hyper-rustls client here, so the guard is on every path.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use hyper::header::{HeaderMap, HeaderValue, RETRY_AFTER};
use instant_acme::{BodyWrapper, BytesResponse, HttpClient};

/// The longest wait a `Retry-After` from the ACME server may ask for: one day.
///
/// It is the longest wait holdfast honours anywhere on this path: the issuance policy's hint cap
/// (a failure's Retry-After never paces beyond it), the renewal-information recheck a window-less
/// source gets, and RFC 9773 §4.3's advice to treat longer ARI rechecks as one day. The order
/// timeout (half the attempt timeout: 150 s by default) is shorter unless `attempt_timeout` is set
/// beyond two days, so an order poll told to wait this long ends at once as a timeout; with such a
/// setting it waits the day, still inside the attempt's own bound.
pub const RETRY_AFTER_MAX: Duration = Duration::from_secs(24 * 3600);

/// What [`bound_retry_after`] did to a response's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bounded {
    /// No `Retry-After`, one within the bound, or one that does not parse: left as it was.
    Unchanged,
    /// A wait longer than [`RETRY_AFTER_MAX`], rewritten to it as delay-seconds.
    Capped,
}

/// Bounds the `Retry-After` in `headers` to [`RETRY_AFTER_MAX`] from `now`: delay-seconds of any
/// size (beyond `u64` too, and with the leading `+` instant-acme accepts) and an HTTP-date further
/// away are rewritten to the bound in delay-seconds; an absent, garbled or in-bound header is left
/// alone.
// r[impl issue.acme.retry-after]
pub fn bound_retry_after(headers: &mut HeaderMap, now: SystemTime) -> Bounded {
    let Some(value) = headers.get(RETRY_AFTER).and_then(|v| v.to_str().ok()) else {
        return Bounded::Unchanged;
    };
    match asked_wait(value, now) {
        Some(wait) if wait > RETRY_AFTER_MAX => {
            // A peer that misbehaves is survived, and seen.
            tracing::warn!(
                asked = value,
                max_secs = RETRY_AFTER_MAX.as_secs(),
                "the ACME server asked for a Retry-After beyond the bound; capped"
            );
            headers.insert(RETRY_AFTER, HeaderValue::from(RETRY_AFTER_MAX.as_secs()));
            Bounded::Capped
        }
        _ => Bounded::Unchanged,
    }
}

/// The wait `value` asks for, read at least as leniently as instant-acme reads it: it takes
/// delay-seconds with `u64::from_str`, which also accepts a leading `+`, so `+18446744073709551615`
/// must count as the huge number it is to instant-acme, not as a garbled header.
// r[impl issue.acme.retry-after]
fn asked_wait(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    let digits = value.strip_prefix('+').unwrap_or(value);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        return Some(Duration::from_secs(digits.parse().unwrap_or(u64::MAX)));
    }
    holdfast_retry::http::parse_retry_after(value, now)
}

/// An [`HttpClient`] that bounds every response's `Retry-After` before its caller sees it.
pub struct RetryAfterGuard {
    inner: Arc<dyn HttpClient>,
}

impl RetryAfterGuard {
    /// Guards `inner`.
    pub fn new(inner: Arc<dyn HttpClient>) -> Self {
        Self { inner }
    }
}

impl std::fmt::Debug for RetryAfterGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetryAfterGuard").finish_non_exhaustive()
    }
}

impl HttpClient for RetryAfterGuard {
    // r[impl issue.acme.retry-after]
    fn request(
        &self,
        req: hyper::Request<BodyWrapper<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, instant_acme::Error>> + Send>> {
        let response = self.inner.request(req);
        Box::pin(async move {
            let mut response = response.await?;
            bound_retry_after(&mut response.parts.headers, SystemTime::now());
            Ok(response)
        })
    }
}

/// Why the default client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The configured root could not be read or used.
    #[error("ACME root {path}: {reason}")]
    Root {
        /// The configured `ca_pem`.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// TLS could not be set up (no usable platform verifier, no protocol version).
    #[error("TLS: {0}")]
    Tls(String),
}

/// The client instant-acme would build itself — hyper over rustls (ring), HTTPS only, HTTP/1.1
/// and HTTP/2, trusting `ca_pem` alone when given, else the platform's verifier.
pub fn default_client(ca_pem: Option<&Path>) -> Result<Arc<dyn HttpClient>, ClientError> {
    use hyper_rustls::HttpsConnectorBuilder;
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject as _;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let connector = match ca_pem {
        Some(path) => {
            let root_error = |reason: String| ClientError::Root {
                path: path.display().to_string(),
                reason,
            };
            let root =
                CertificateDer::from_pem_file(path).map_err(|e| root_error(e.to_string()))?;
            let mut roots = rustls::RootCertStore::empty();
            roots.add(root).map_err(|e| root_error(e.to_string()))?;
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| ClientError::Tls(e.to_string()))?
                .with_root_certificates(roots)
                .with_no_client_auth();
            HttpsConnectorBuilder::new().with_tls_config(config)
        }
        None => HttpsConnectorBuilder::new()
            .with_provider_and_platform_verifier(provider)
            .map_err(|e| ClientError::Tls(e.to_string()))?,
    };
    let connector = connector.https_only().enable_http1().enable_http2().build();
    let client: hyper_util::client::legacy::Client<_, BodyWrapper<Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(connector);
    Ok(Arc::new(client))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn bounded(value: Option<&str>, now: SystemTime) -> (Bounded, Option<String>) {
        let mut headers = HeaderMap::new();
        if let Some(v) = value {
            headers.insert(RETRY_AFTER, HeaderValue::from_str(v).unwrap());
        }
        let did = bound_retry_after(&mut headers, now);
        let after = headers
            .get(RETRY_AFTER)
            .map(|v| v.to_str().unwrap().to_owned());
        (did, after)
    }

    // r[verify issue.acme.retry-after]
    #[test]
    fn delay_seconds_beyond_the_bound_are_cut_to_it() {
        let max = RETRY_AFTER_MAX.as_secs();
        assert_eq!(max, 86_400, "one day");
        let capped = (Bounded::Capped, Some(max.to_string()));
        for huge in [
            u64::MAX.to_string(),
            "99999999999999999999999999".to_owned(),
            (max + 1).to_string(),
            format!(" {} ", u64::MAX),
            // instant-acme's `u64::from_str` reads a leading '+' as a sign.
            format!("+{}", u64::MAX),
            format!("\t+{} ", u64::MAX),
            format!("+{}", max + 1),
        ] {
            assert_eq!(bounded(Some(&huge), t(0)), capped, "{huge}");
        }
        for fine in ["+120".to_owned(), format!("+{max}")] {
            assert_eq!(
                bounded(Some(&fine), t(0)),
                (Bounded::Unchanged, Some(fine.clone())),
                "{fine}"
            );
        }
        for fine in [0, 1, 120, max - 1, max] {
            let v = fine.to_string();
            assert_eq!(
                bounded(Some(&v), t(0)),
                (Bounded::Unchanged, Some(v.clone())),
                "{v}"
            );
        }
    }

    // r[verify issue.acme.retry-after]
    #[test]
    fn a_date_beyond_the_bound_is_cut_to_it_and_others_are_left_alone() {
        let max = RETRY_AFTER_MAX.as_secs();
        let now = t(0);
        let capped = (Bounded::Capped, Some(max.to_string()));
        let far = "Fri, 31 Dec 9999 23:59:59 GMT";
        assert_eq!(bounded(Some(far), now), capped);
        let just_over = httpdate::fmt_http_date(now + RETRY_AFTER_MAX + Duration::from_secs(1));
        assert_eq!(bounded(Some(&just_over), now), capped);
        for fine in [
            httpdate::fmt_http_date(now + RETRY_AFTER_MAX),
            httpdate::fmt_http_date(now + Duration::from_secs(60)),
            "Fri, 31 Dec 1999 23:59:59 GMT".to_owned(),
        ] {
            assert_eq!(
                bounded(Some(&fine), now),
                (Bounded::Unchanged, Some(fine.clone())),
                "{fine}"
            );
        }
        // Absent and garbled headers are not invented or repaired: instant-acme treats them as
        // no hint, as it would have.
        assert_eq!(bounded(None, now), (Bounded::Unchanged, None));
        for garbled in ["soon", "-5", "1.5", "", "12 s", "+", "++5", "+-5"] {
            assert_eq!(
                bounded(Some(garbled), now),
                (Bounded::Unchanged, Some(garbled.to_owned())),
                "{garbled:?}"
            );
        }
    }

    #[test]
    fn the_default_client_needs_a_readable_root() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.pem");
        let Err(err) = default_client(Some(&missing)) else {
            panic!("a missing root was accepted");
        };
        assert!(err.to_string().contains("none.pem"), "{err}");
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not a certificate").unwrap();
        assert!(matches!(
            default_client(Some(&garbage)),
            Err(ClientError::Root { .. })
        ));
    }
}
