//! What a certificate source is: something that, asked for a certificate's names, returns a pair or a
//! classified failure. The issuer calls one only after the decision says issue.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::acme::RenewalWindow;
use crate::cert::CertifiedPair;

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How a source failure is classified (stored in the attempts row).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// The source could not be reached (refused, reset, timed out, DNS).
    Unreachable,
    /// The server answered with a server error (5xx) or a bad nonce it did not recover from.
    Server,
    /// The server said to slow down (`rateLimited`, 429).
    RateLimited,
    /// Validation of the challenge failed.
    Validation,
    /// The request was refused (unauthorized, a rejected identifier, a missing profile).
    Rejected,
    /// What came back is not a usable certificate.
    BadCertificate,
    /// The attempt did not finish within its timeout.
    Timeout,
    /// Storing the certificate failed.
    Storage,
}

impl ErrorClass {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Unreachable => "unreachable",
            ErrorClass::Server => "server",
            ErrorClass::RateLimited => "rate_limited",
            ErrorClass::Validation => "validation",
            ErrorClass::Rejected => "rejected",
            ErrorClass::BadCertificate => "bad_certificate",
            ErrorClass::Timeout => "timeout",
            ErrorClass::Storage => "storage",
        }
    }
}

/// A failed attempt of a source.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{class:?}: {message}")]
pub struct SourceError {
    /// The class.
    pub class: ErrorClass,
    /// What happened (never a secret).
    pub message: String,
    /// The server's Retry-After, if it sent one.
    pub retry_after: Option<Duration>,
}

impl SourceError {
    /// A failure without a hint.
    pub fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        Self {
            class,
            message: message.into(),
            retry_after: None,
        }
    }
}

/// A certificate source (ACME, the local provider, a test double).
pub trait Source: Send + Sync + 'static {
    /// The name stored in the attempts table (`acme`, `local`).
    fn name(&self) -> &str;
    /// Obtains one pair for every name of `names` (never empty; the first is the certificate's
    /// key). Called only when the decision said issue.
    fn obtain<'a>(
        &'a self,
        names: &'a [String],
    ) -> BoxFuture<'a, Result<CertifiedPair, SourceError>>;
    /// The ACME Renewal Information window for `pair`, when the source offers one.
    fn renewal_window<'a>(
        &'a self,
        pair: &'a CertifiedPair,
    ) -> BoxFuture<'a, Option<RenewalWindow>> {
        let _ = pair;
        Box::pin(async { None })
    }
}
