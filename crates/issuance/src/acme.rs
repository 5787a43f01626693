//! The ACME source, over instant-acme: account created once and persisted (0600), optional
//! external account binding, HTTP-01 answered by the node's own responder, order → authorizations
//! → challenge → ready → finalize → certificate, every failure classified.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, ExternalAccountKey,
    Identifier, NewAccount, NewOrder, OrderStatus, RetryPolicy,
};

use crate::acme_http::{RetryAfterGuard, default_client};
use crate::cert::CertifiedPair;
use crate::dns01::{Dns01, Presented, record_name};
use crate::responder::Challenges;
use crate::source::{BoxFuture, ErrorClass, Source, SourceError};
use crate::tls_alpn::{AlpnChallenges, AlpnError};

/// External account binding (EAB) credentials.
#[derive(Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Eab {
    /// The key identifier the CA gave.
    pub kid: String,
    /// The HMAC key, base64url as the CA gave it.
    pub hmac_key: String,
}

// The HMAC key is a secret: never printed.
impl std::fmt::Debug for Eab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Eab")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

/// How to reach the ACME server.
#[derive(Debug, Clone)]
pub struct AcmeConfig {
    /// The directory URL.
    pub directory: String,
    /// Contact URLs (`mailto:…`).
    pub contact: Vec<String>,
    /// External account binding, when the CA requires it.
    pub eab: Option<Eab>,
    /// A certificate profile (e.g. `shortlived`): used when the directory lists it, an error when
    /// it does not.
    pub profile: Option<String>,
    /// A PEM root to trust for the ACME server's own TLS (test CAs such as Pebble's).
    pub ca_pem: Option<PathBuf>,
    /// Where the account credentials are kept (0600).
    pub account_path: PathBuf,
    /// How long an order may take to become ready, and then to yield its certificate.
    pub order_timeout: Duration,
}

/// Classifies an instant-acme failure.
// r[impl issue.acme.classify+2]
pub fn classify(err: &instant_acme::Error) -> SourceError {
    use instant_acme::Error as E;
    let message = err.to_string();
    let class = match err {
        E::Api(problem) => {
            let kind = problem
                .r#type
                .as_deref()
                .and_then(|t| t.strip_prefix("urn:ietf:params:acme:error:"))
                .unwrap_or("");
            match kind {
                "rateLimited" => ErrorClass::RateLimited,
                "badNonce" | "serverInternal" => ErrorClass::Server,
                "connection" | "dns" | "incorrectResponse" | "tls" | "unauthorized" | "caa" => {
                    ErrorClass::Validation
                }
                _ if problem.status.is_some_and(|s| s >= 500) => ErrorClass::Server,
                _ => ErrorClass::Rejected,
            }
        }
        E::Timeout(_) => ErrorClass::Timeout,
        E::Unsupported(_) => ErrorClass::Rejected,
        E::Crypto | E::KeyRejected | E::Json(_) => ErrorClass::Server,
        _ => ErrorClass::Unreachable,
    };
    // instant-acme does not hand the Retry-After of an error response to its caller; a
    // `rateLimited` problem therefore carries a one-hour hint (Let's Encrypt's failed-validation
    // window), so the next attempt never comes sooner.
    let retry_after = (class == ErrorClass::RateLimited).then_some(RATE_LIMIT_HINT);
    SourceError {
        class,
        message,
        retry_after,
    }
}

/// The error for a configured profile that the directory does not list (`None`: no profile is
/// configured, or the directory lists it), checked before any order is created.
// r[impl issue.acme.profile]
pub fn unlisted_profile<'a>(
    wanted: Option<&str>,
    listed: impl IntoIterator<Item = &'a str>,
) -> Option<SourceError> {
    let wanted = wanted?;
    if listed.into_iter().any(|name| name == wanted) {
        return None;
    }
    Some(SourceError::new(
        ErrorClass::Rejected,
        format!("the ACME directory does not offer the profile {wanted:?}"),
    ))
}

/// The wait a `rateLimited` problem imposes at least.
pub const RATE_LIMIT_HINT: Duration = Duration::from_secs(3600);

/// The ACME source.
pub struct AcmeSource {
    config: AcmeConfig,
    challenges: Challenges,
    /// Shared with [`AcmeSource::with_dns01`]'s copy, so both use one account, created once.
    account: Arc<tokio::sync::Mutex<Option<Account>>>,
    /// The HTTP client to reach the server with (`None`: [`default_client`], over TLS).
    http: Option<Arc<dyn instant_acme::HttpClient>>,
    /// DNS-01 instead of HTTP-01 (`None`: HTTP-01).
    dns01: Option<Dns01>,
    /// TLS-ALPN-01 instead of HTTP-01, answered through this listener's identifiers.
    tls_alpn01: Option<AlpnChallenges>,
}

impl std::fmt::Debug for AcmeSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcmeSource")
            .field("directory", &self.config.directory)
            .finish_non_exhaustive()
    }
}

/// The account builder: every request goes through [`RetryAfterGuard`], over the client given
/// to [`AcmeSource::with_http`] or else the same TLS client instant-acme would build itself.
// r[impl issue.acme.retry-after]
fn builder(
    config: &AcmeConfig,
    http: Option<&Arc<dyn instant_acme::HttpClient>>,
) -> Result<instant_acme::AccountBuilder, SourceError> {
    let inner = match http {
        Some(http) => http.clone(),
        None => default_client(config.ca_pem.as_deref())
            .map_err(|e| SourceError::new(ErrorClass::Rejected, format!("ACME client: {e}")))?,
    };
    Ok(Account::builder_with_http(Box::new(RetryAfterGuard::new(
        inner,
    ))))
}

/// Writes the account credentials: 0600, atomically, never through a planted link.
// r[impl issue.acme.account]
// r[impl issue.store.secret-file+2]
fn save_credentials(path: &Path, credentials: &AccountCredentials) -> Result<(), SourceError> {
    let storage = |e: std::io::Error| {
        SourceError::new(
            ErrorClass::Storage,
            format!("ACME account {}: {e}", path.display()),
        )
    };
    let json = serde_json::to_vec(credentials)
        .map_err(|e| SourceError::new(ErrorClass::Storage, e.to_string()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(storage)?;
    holdfast_keyfile::write_private(path, &json)
        .map_err(|e| SourceError::new(ErrorClass::Storage, format!("ACME account {e}")))
}

impl AcmeSource {
    /// A source that answers its HTTP-01 challenges through `challenges` (served by an
    /// [`crate::responder::Http01Responder`]).
    pub fn new(config: AcmeConfig, challenges: Challenges) -> Self {
        Self {
            config,
            challenges,
            account: Arc::default(),
            http: None,
            dns01: None,
            tls_alpn01: None,
        }
    }

    /// A source that reaches the ACME server through `http` instead of the default TLS client
    /// (a proxy, or an in-process server in tests); `config.ca_pem` is then unused. Its responses
    /// pass the same Retry-After guard.
    pub fn with_http(
        config: AcmeConfig,
        challenges: Challenges,
        http: Arc<dyn instant_acme::HttpClient>,
    ) -> Self {
        Self {
            http: Some(http),
            ..Self::new(config, challenges)
        }
    }

    /// This source answering DNS-01 through `dns01` instead of HTTP-01, over the same account.
    // r[impl issue.dns01.choice]
    pub fn with_dns01(&self, dns01: Dns01) -> Self {
        Self {
            config: self.config.clone(),
            challenges: self.challenges.clone(),
            account: self.account.clone(),
            http: self.http.clone(),
            dns01: Some(dns01),
            tls_alpn01: None,
        }
    }

    /// This source answering TLS-ALPN-01 through `alpn` (served by a
    /// [`crate::tls_alpn::TlsAlpnResponder`]) instead of HTTP-01, over the same account.
    // r[impl issue.acme.tls-alpn01+3]
    pub fn with_tls_alpn01(&self, alpn: AlpnChallenges) -> Self {
        Self {
            config: self.config.clone(),
            challenges: self.challenges.clone(),
            account: self.account.clone(),
            http: self.http.clone(),
            dns01: None,
            tls_alpn01: Some(alpn),
        }
    }

    /// The account: from memory, else from its credentials file, else created (once) and saved.
    async fn account(&self) -> Result<Account, SourceError> {
        let mut slot = self.account.lock().await;
        if let Some(account) = slot.as_ref() {
            return Ok(account.clone());
        }
        let path = &self.config.account_path;
        let account = match std::fs::read(path) {
            Ok(bytes) => {
                let credentials: AccountCredentials =
                    serde_json::from_slice(&bytes).map_err(|e| {
                        SourceError::new(
                            ErrorClass::Storage,
                            format!("ACME account {}: {e}", path.display()),
                        )
                    })?;
                builder(&self.config, self.http.as_ref())?
                    .from_credentials(credentials)
                    .await
                    .map_err(|e| classify(&e))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let contact: Vec<&str> = self.config.contact.iter().map(String::as_str).collect();
                let eab = match &self.config.eab {
                    Some(eab) => {
                        let key = base64_url_decode(&eab.hmac_key).ok_or_else(|| {
                            SourceError::new(ErrorClass::Rejected, "eab.hmac_key is not base64url")
                        })?;
                        Some(ExternalAccountKey::new(eab.kid.clone(), &key))
                    }
                    None => None,
                };
                let (account, credentials) = builder(&self.config, self.http.as_ref())?
                    .create(
                        &NewAccount {
                            contact: &contact,
                            terms_of_service_agreed: true,
                            only_return_existing: false,
                        },
                        self.config.directory.clone(),
                        eab.as_ref(),
                    )
                    .await
                    .map_err(|e| classify(&e))?;
                save_credentials(path, &credentials)?;
                account
            }
            Err(e) => {
                return Err(SourceError::new(
                    ErrorClass::Storage,
                    format!("ACME account {}: {e}", path.display()),
                ));
            }
        };
        *slot = Some(account.clone());
        Ok(account)
    }

    // r[impl issue.acme.flow]
    // r[impl issue.certificates]
    async fn issue(&self, names: &[String]) -> Result<CertifiedPair, SourceError> {
        let account = self.account().await?;
        let profile = self.config.profile.as_deref();
        if let Some(err) = unlisted_profile(profile, account.profiles().map(|p| p.name)) {
            return Err(err);
        }
        // One order for every name of the certificate.
        let identifiers: Vec<Identifier> = names.iter().cloned().map(Identifier::Dns).collect();
        let mut new_order = NewOrder::new(&identifiers);
        if let Some(p) = profile {
            new_order = new_order.profile(p);
        }
        let mut order = account
            .new_order(&new_order)
            .await
            .map_err(|e| classify(&e))?;
        // Tokens stop being answered when the attempt ends, however it ends: finished, failed,
        // or cancelled by the attempt timeout or a stop (the guard's drop).
        let mut tokens = AnsweredTokens {
            challenges: &self.challenges,
            tokens: Vec::new(),
        };
        // TLS-ALPN-01 identifiers likewise.
        let mut identifiers_answered = AnsweredIdentifiers {
            challenges: self.tls_alpn01.as_ref(),
            identifiers: Vec::new(),
        };
        // DNS-01 records likewise: removed after the order, whatever its outcome (and on their
        // own task when the attempt is cut off).
        let mut records = self
            .dns01
            .as_ref()
            .map(|dns01| Presented::new(dns01.provider.clone(), dns01.cleanups.clone()));
        let outcome = async {
            let mut authorizations = order.authorizations();
            while let Some(authz) = authorizations.next().await {
                let mut authz = authz.map_err(|e| classify(&e))?;
                match authz.status {
                    AuthorizationStatus::Pending => {}
                    AuthorizationStatus::Valid => continue,
                    _ => {
                        let message = failed_authorization(&authz)
                            .unwrap_or_else(|| format!("authorization for {}", authz.identifier()));
                        return Err(SourceError::new(ErrorClass::Validation, message));
                    }
                }
                let identifier = authz.identifier().to_string();
                let (kind, label) = match (&records, &self.tls_alpn01) {
                    (Some(_), _) => (ChallengeType::Dns01, "dns-01"),
                    (None, Some(_)) => (ChallengeType::TlsAlpn01, "tls-alpn-01"),
                    (None, None) => (ChallengeType::Http01, "http-01"),
                };
                let mut challenge = authz.challenge(kind).ok_or_else(|| {
                    SourceError::new(
                        ErrorClass::Rejected,
                        format!("no {label} challenge offered for {identifier}"),
                    )
                })?;
                let key_authorization = challenge.key_authorization();
                match records.as_mut() {
                    // r[impl issue.dns01.record]
                    Some(records) => {
                        let name = record_name(&identifier);
                        let value = key_authorization.dns_value();
                        // r[impl issue.dns01.errors+2]
                        records
                            .present(&name, &value)
                            .await
                            .map_err(|e| SourceError::new(e.class(), e.to_string()))?;
                        // r[impl issue.dns01.propagation]
                        if let Some(propagation) =
                            self.dns01.as_ref().and_then(|d| d.propagation.as_ref())
                        {
                            propagation
                                .wait(&name, &value)
                                .await
                                .map_err(|e| SourceError::new(e.class(), e.to_string()))?;
                        }
                    }
                    // r[impl issue.acme.tls-alpn01+3]
                    None if self.tls_alpn01.is_some() => identifiers_answered
                        .answer(&identifier, key_authorization.digest().as_ref())
                        .map_err(|e| SourceError::new(ErrorClass::Rejected, e.to_string()))?,
                    None => tokens.answer(&challenge.token, key_authorization.as_str()),
                }
                challenge.set_ready().await.map_err(|e| classify(&e))?;
            }
            let retries = RetryPolicy::new().timeout(self.config.order_timeout);
            let failed = match order.poll_ready(&retries).await {
                Ok(OrderStatus::Ready) => None,
                Ok(status) => {
                    let detail = order
                        .state()
                        .error
                        .as_ref()
                        .map(|p| p.to_string())
                        .unwrap_or_default();
                    Some((
                        SourceError::new(
                            ErrorClass::Validation,
                            format!("order is {status:?} {detail}"),
                        ),
                        format!("order is {status:?}"),
                    ))
                }
                // The order's own problem (an invalid order): which name it was is asked below.
                Err(e @ instant_acme::Error::Api(_)) => {
                    let err = classify(&e);
                    let said = err.message.clone();
                    Some((err, said))
                }
                Err(e) => return Err(classify(&e)),
            };
            if let Some((mut err, said)) = failed {
                // Which name failed: the first authorization the server now says is not valid.
                // A server may mark the order failed a moment before the authorization (Pebble
                // does), so the question is asked again, briefly.
                let which = ask_until(NAMING_PASSES, NAMING_PAUSE, &mut order, |order| {
                    Box::pin(first_failed(order))
                })
                .await;
                if let Some(which) = which {
                    err.message = naming_the_failure(&said, &which);
                }
                return Err(err);
            }
            let key_pem = order.finalize().await.map_err(|e| classify(&e))?;
            let chain_pem = order
                .poll_certificate(&retries)
                .await
                .map_err(|e| classify(&e))?;
            CertifiedPair::parse_for(names, &chain_pem, &key_pem)
                .map_err(|e| SourceError::new(ErrorClass::BadCertificate, e.to_string()))
        }
        .await;
        // The outcome is returned first: the removals run in `Cleanups`, outside the attempt's
        // bound, so a slow or failing removal changes neither the outcome nor its error (and
        // never throws away an issued certificate). The module's stop waits for them.
        // r[impl issue.dns01.cleanup]
        drop(records);
        outcome
    }
}

/// How many times a failed order's authorizations are read for the one that failed.
const NAMING_PASSES: u32 = 4;
/// The pause between those reads.
const NAMING_PAUSE: Duration = Duration::from_millis(250);

/// The first of `order`'s authorizations the server says is not valid, as
/// [`failed_authorization`] words it.
// r[impl issue.certificates.failure]
async fn first_failed(order: &mut instant_acme::Order) -> Option<String> {
    let mut authorizations = order.authorizations();
    while let Some(Ok(mut authz)) = authorizations.next().await {
        if let Ok(state) = authz.refresh().await
            && let Some(which) = failed_authorization(state)
        {
            return Some(which);
        }
    }
    None
}

/// Asks `look` of `state` up to `passes` times, `pause` apart, until it answers.
// r[impl issue.certificates.failure]
async fn ask_until<S, T>(
    passes: u32,
    pause: Duration,
    state: &mut S,
    look: impl for<'a> Fn(&'a mut S) -> BoxFuture<'a, Option<T>>,
) -> Option<T> {
    for pass in 0..passes {
        if pass > 0 {
            tokio::time::sleep(pause).await;
        }
        if let Some(found) = look(state).await {
            return Some(found);
        }
    }
    None
}

/// What failed in an authorization that is not pending or valid: its identifier, its status and
/// the reason the CA gave on a failed challenge (`None`: it is pending or valid).
// r[impl issue.certificates.failure]
pub fn failed_authorization(state: &instant_acme::AuthorizationState) -> Option<String> {
    if matches!(
        state.status,
        AuthorizationStatus::Pending | AuthorizationStatus::Valid
    ) {
        return None;
    }
    let mut message = format!(
        "authorization for {} is {:?}",
        state.identifier(),
        state.status
    );
    if let Some(problem) = state.challenges.iter().find_map(|c| c.error.as_ref()) {
        message.push_str(&format!(": {problem}"));
    }
    Some(message)
}

/// A failed order's message with the authorization that failed: what the order or the server
/// said (`order is Invalid`, or the server's own problem, never rewritten) and then which name.
// r[impl issue.certificates.failure]
fn naming_the_failure(said: &str, which: &str) -> String {
    format!("{said}: {which}")
}

/// The challenge tokens one attempt has the responder answer; dropping it stops answering them.
// r[impl issue.acme.http01]
// r[impl issue.bounds]
struct AnsweredTokens<'a> {
    challenges: &'a Challenges,
    tokens: Vec<String>,
}

impl AnsweredTokens<'_> {
    fn answer(&mut self, token: &str, key_authorization: &str) {
        self.challenges.insert(token, key_authorization);
        self.tokens.push(token.to_owned());
    }
}

impl Drop for AnsweredTokens<'_> {
    fn drop(&mut self) {
        for token in &self.tokens {
            self.challenges.remove(token);
        }
    }
}

/// The identifiers one attempt has the TLS-ALPN-01 listener answer; dropping it stops answering
/// them.
// r[impl issue.acme.tls-alpn01+3]
struct AnsweredIdentifiers<'a> {
    challenges: Option<&'a AlpnChallenges>,
    identifiers: Vec<String>,
}

impl AnsweredIdentifiers<'_> {
    fn answer(&mut self, identifier: &str, digest: &[u8]) -> Result<(), AlpnError> {
        if let Some(challenges) = self.challenges {
            challenges.insert(identifier, digest)?;
            self.identifiers.push(identifier.to_owned());
        }
        Ok(())
    }
}

impl Drop for AnsweredIdentifiers<'_> {
    fn drop(&mut self) {
        if let Some(challenges) = self.challenges {
            for identifier in &self.identifiers {
                challenges.remove(identifier);
            }
        }
    }
}

fn base64_url_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.trim_end_matches('=').bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

impl Source for AcmeSource {
    fn name(&self) -> &str {
        "acme"
    }

    fn obtain<'a>(
        &'a self,
        names: &'a [String],
    ) -> BoxFuture<'a, Result<CertifiedPair, SourceError>> {
        Box::pin(self.issue(names))
    }

    fn renewal_window<'a>(
        &'a self,
        pair: &'a CertifiedPair,
    ) -> BoxFuture<'a, Option<RenewalWindow>> {
        Box::pin(async move {
            let account = self.account().await.ok()?;
            let der = rustls_pki_types::CertificateDer::from(pair.leaf_der.clone());
            let id = instant_acme::CertificateIdentifier::try_from(&der).ok()?;
            let (info, recheck) = account.renewal_info(&id).await.ok()?;
            Some(RenewalWindow {
                start: info.suggested_window.start.into(),
                end: info.suggested_window.end.into(),
                recheck_after: recheck,
            })
        })
    }
}

/// An ACME Renewal Information window (RFC 9773).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenewalWindow {
    /// Start of the suggested window.
    pub start: SystemTime,
    /// End of the suggested window.
    pub end: SystemTime,
    /// When to ask again (the response's Retry-After).
    pub recheck_after: Duration,
}

/// The renewal time inside `window`: uniformly random (`fraction` in `[0, 1)`), and `now` when
/// the window has already passed (RFC 9773 §4.2).
// r[impl issue.renewal.ari+2]
pub fn pick_in_window(window: &RenewalWindow, fraction: f64, now: SystemTime) -> SystemTime {
    if window.end <= now {
        return now;
    }
    let span = window.end.duration_since(window.start).unwrap_or_default();
    let offset = span
        .mul_f64(fraction.clamp(0.0, 1.0))
        .min(span.saturating_sub(Duration::from_nanos(1)));
    window.start + offset
}

/// The ACME source plus its responder's challenges, as the module builds them.
pub fn source(config: AcmeConfig, challenges: Challenges) -> Arc<dyn Source> {
    Arc::new(AcmeSource::new(config, challenges))
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify issue.certificates.failure]
    #[tokio::test(start_paused = true)]
    async fn the_failed_name_is_asked_again_until_the_server_says_it() {
        // The server marks the authorization failed only on the third read.
        let mut reads = 0_u32;
        let began = tokio::time::Instant::now();
        let found = ask_until(NAMING_PASSES, NAMING_PAUSE, &mut reads, |reads| {
            Box::pin(async move {
                *reads += 1;
                (*reads == 3).then(|| "authorization for bad.example is Invalid".to_owned())
            })
        })
        .await;
        assert_eq!(
            found.as_deref(),
            Some("authorization for bad.example is Invalid")
        );
        assert_eq!(reads, 3);
        assert_eq!(
            began.elapsed(),
            NAMING_PAUSE * 2,
            "two pauses, none after the answer"
        );
        // A server that never says: every pass is used, then the order's own message stands.
        let mut reads = 0_u32;
        let found: Option<String> = ask_until(NAMING_PASSES, NAMING_PAUSE, &mut reads, |reads| {
            Box::pin(async move {
                *reads += 1;
                None
            })
        })
        .await;
        assert_eq!((found, reads), (None, NAMING_PASSES));
    }

    // r[verify issue.certificates.failure]
    #[test]
    fn a_failed_order_keeps_what_was_said_and_names_the_authorization() {
        let which = "authorization for bad.example is Invalid: connection refused";
        assert_eq!(
            naming_the_failure("order is Invalid", which),
            format!("order is Invalid: {which}")
        );
        // A server's transient problem is not turned into "order is Invalid".
        let said = "urn:ietf:params:acme:error:rateLimited: too many requests";
        let text = naming_the_failure(said, which);
        assert!(text.starts_with(said), "{text}");
        assert!(!text.contains("order is Invalid"), "{text}");
    }

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    // r[verify issue.renewal.ari+2]
    #[test]
    fn ari_picks_a_uniform_time_inside_the_window() {
        let w = RenewalWindow {
            start: t(1000),
            end: t(2000),
            recheck_after: Duration::from_secs(3600),
        };
        assert_eq!(pick_in_window(&w, 0.0, t(0)), t(1000));
        assert_eq!(pick_in_window(&w, 0.5, t(0)), t(1500));
        let last = pick_in_window(&w, 1.0, t(0));
        assert!(last < t(2000) && last > t(1999));
        // Spread: 1000 draws land in every tenth of the window.
        let mut buckets = [0u32; 10];
        for i in 0..1000u32 {
            let f = f64::from(i) / 1000.0;
            let at = pick_in_window(&w, f, t(0));
            let off = at.duration_since(t(1000)).unwrap().as_secs();
            buckets[(off / 100) as usize] += 1;
        }
        assert!(buckets.iter().all(|&b| b == 100), "{buckets:?}");
        // A window already over: renew now.
        assert_eq!(pick_in_window(&w, 0.3, t(5000)), t(5000));
    }

    // r[verify issue.acme.classify+2]
    #[test]
    fn acme_problems_are_classified_by_type() {
        let problem = |t: &str, status: u16| {
            instant_acme::Error::Api(
                serde_json::from_value(serde_json::json!({
                    "type": format!("urn:ietf:params:acme:error:{t}"),
                    "detail": "retry after port 503",
                    "status": status,
                }))
                .unwrap(),
            )
        };
        let rl = classify(&problem("rateLimited", 429));
        assert_eq!(rl.class, ErrorClass::RateLimited);
        assert_eq!(rl.retry_after, Some(RATE_LIMIT_HINT));
        assert_eq!(
            classify(&problem("badNonce", 400)).class,
            ErrorClass::Server
        );
        assert_eq!(
            classify(&problem("serverInternal", 500)).class,
            ErrorClass::Server
        );
        assert_eq!(
            classify(&problem("unauthorized", 403)).class,
            ErrorClass::Validation
        );
        assert_eq!(
            classify(&problem("connection", 400)).class,
            ErrorClass::Validation
        );
        assert_eq!(
            classify(&problem("rejectedIdentifier", 400)).class,
            ErrorClass::Rejected
        );
        assert_eq!(
            classify(&problem("malformed", 400)).class,
            ErrorClass::Rejected
        );
        assert_eq!(
            classify(&problem("whatever", 503)).class,
            ErrorClass::Server
        );
        assert_eq!(
            classify(&instant_acme::Error::Timeout(None)).class,
            ErrorClass::Timeout
        );
        assert_eq!(
            classify(&instant_acme::Error::Str("x")).class,
            ErrorClass::Unreachable
        );
        assert!(classify(&problem("badNonce", 400)).retry_after.is_none());
    }

    // r[verify issue.acme.classify+2]
    #[test]
    fn library_failures_outside_a_problem_document_are_classified() {
        use instant_acme::Error as E;
        assert_eq!(
            classify(&E::Unsupported("profiles")).class,
            ErrorClass::Rejected
        );
        assert_eq!(classify(&E::Crypto).class, ErrorClass::Server);
        assert_eq!(classify(&E::KeyRejected).class, ErrorClass::Server);
        let json = serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        assert_eq!(classify(&E::Json(json)).class, ErrorClass::Server);
        for err in [E::Unsupported("x"), E::Crypto, E::KeyRejected] {
            assert!(classify(&err).retry_after.is_none());
        }
    }

    // r[verify issue.acme.profile]
    #[test]
    fn a_profile_is_checked_against_the_directory_list() {
        let listed = ["classic", "shortlived", "tlsserver"];
        assert!(unlisted_profile(None, listed).is_none(), "none configured");
        assert!(unlisted_profile(None, []).is_none());
        for wanted in listed {
            assert!(unlisted_profile(Some(wanted), listed).is_none(), "{wanted}");
        }
        for (wanted, listed) in [("custom", &listed[..]), ("shortlived", &[][..])] {
            let err = unlisted_profile(Some(wanted), listed.iter().copied())
                .unwrap_or_else(|| panic!("{wanted} is not listed"));
            assert_eq!(err.class, ErrorClass::Rejected);
            assert!(err.message.contains(wanted), "{err}");
        }
    }

    #[test]
    fn eab_keys_decode_and_never_print() {
        assert_eq!(base64_url_decode("aGVsbG8").unwrap(), b"hello");
        assert_eq!(base64_url_decode("_-8").unwrap(), vec![0xff, 0xef]);
        assert!(base64_url_decode("no spaces").is_none());
        let eab = Eab {
            kid: "kid-1".into(),
            hmac_key: "c2VjcmV0".into(),
        };
        assert!(!format!("{eab:?}").contains("c2VjcmV0"));
    }

    /// An ACME server in process: account, order and authorization answer; the challenge's
    /// "ready" never does (a server that stalls mid-attempt).
    struct StallingAcme;

    impl instant_acme::HttpClient for StallingAcme {
        fn request(
            &self,
            req: hyper::Request<instant_acme::BodyWrapper<bytes::Bytes>>,
        ) -> std::pin::Pin<
            Box<
                dyn std::future::Future<
                        Output = Result<instant_acme::BytesResponse, instant_acme::Error>,
                    > + Send,
            >,
        > {
            const BASE: &str = "https://acme.test";
            let path = req.uri().path().to_owned();
            let (status, location, body) = match path.as_str() {
                "/dir" => (
                    200,
                    None,
                    serde_json::json!({
                        "newNonce": format!("{BASE}/nonce"),
                        "newAccount": format!("{BASE}/account"),
                        "newOrder": format!("{BASE}/order"),
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
                        "status": "pending",
                        "identifier": { "type": "dns", "value": "a.example" },
                        "challenges": [{
                            "type": "http-01",
                            "url": format!("{BASE}/chall/1"),
                            "token": "tok-1",
                            "status": "pending",
                        }, {
                            "type": "tls-alpn-01",
                            "url": format!("{BASE}/chall/2"),
                            "token": "tok-2",
                            "status": "pending",
                        }],
                    }),
                ),
                _ => return Box::pin(std::future::pending()),
            };
            let mut response = hyper::Response::builder()
                .status(status)
                .header("Replay-Nonce", "nonce-1")
                .header("Content-Type", "application/json");
            if let Some(l) = location {
                response = response.header("Location", l);
            }
            let (parts, ()) = response.body(()).unwrap().into_parts();
            let body: Box<dyn instant_acme::BytesBody> =
                Box::new(bytes::Bytes::from(body.to_string()));
            Box::pin(async move { Ok(instant_acme::BytesResponse { parts, body }) })
        }
    }

    // r[verify issue.acme.http01]
    // r[verify issue.bounds]
    #[tokio::test]
    async fn a_cancelled_attempt_stops_answering_its_challenge() {
        let dir = tempfile::tempdir().unwrap();
        let challenges = Challenges::default();
        let source = AcmeSource::with_http(
            AcmeConfig {
                directory: "https://acme.test/dir".into(),
                contact: vec![],
                eab: None,
                profile: None,
                ca_pem: None,
                account_path: dir.path().join("account.json"),
                order_timeout: Duration::from_secs(60),
            },
            challenges.clone(),
            Arc::new(StallingAcme),
        );
        let names = ["a.example".to_owned()];
        let mut attempt = source.obtain(&names);
        // Run the attempt until its challenge is being answered, then cut it off, as the
        // issuer's attempt timeout (or a stop) does.
        let answered = async {
            while challenges.get("tok-1").is_none() {
                tokio::task::yield_now().await;
            }
        };
        tokio::select! {
            r = &mut attempt => panic!("the stalled attempt ended: {r:?}"),
            () = answered => {}
        }
        drop(attempt);
        assert_eq!(
            challenges.get("tok-1"),
            None,
            "the token outlived its attempt"
        );
    }

    // r[verify issue.acme.tls-alpn01+3]
    #[tokio::test]
    async fn a_cancelled_attempt_stops_answering_its_tls_alpn01_identifier() {
        let dir = tempfile::tempdir().unwrap();
        let alpn = AlpnChallenges::default();
        let source = AcmeSource::with_http(
            AcmeConfig {
                directory: "https://acme.test/dir".into(),
                contact: vec![],
                eab: None,
                profile: None,
                ca_pem: None,
                account_path: dir.path().join("account.json"),
                order_timeout: Duration::from_secs(60),
            },
            Challenges::default(),
            Arc::new(StallingAcme),
        )
        .with_tls_alpn01(alpn.clone());
        let names = ["a.example".to_owned()];
        let mut attempt = source.obtain(&names);
        // Run the attempt until the identifier is answered (the challenge's "ready" then
        // stalls), then cut it off as the attempt timeout or a stop does.
        let answered = async {
            while !alpn.contains("a.example") {
                tokio::task::yield_now().await;
            }
        };
        tokio::select! {
            r = &mut attempt => panic!("the stalled attempt ended: {r:?}"),
            () = answered => {}
        }
        drop(attempt);
        assert!(
            !alpn.contains("a.example"),
            "the identifier outlived its attempt"
        );
    }

    /// An ACME server in process whose one authorization offers DNS-01 for `*.a.example` and
    /// whose order turns invalid once the challenge is said ready.
    struct FailingDnsAcme;

    impl instant_acme::HttpClient for FailingDnsAcme {
        fn request(
            &self,
            req: hyper::Request<instant_acme::BodyWrapper<bytes::Bytes>>,
        ) -> std::pin::Pin<
            Box<
                dyn std::future::Future<
                        Output = Result<instant_acme::BytesResponse, instant_acme::Error>,
                    > + Send,
            >,
        > {
            const BASE: &str = "https://acme.test";
            let path = req.uri().path().to_owned();
            let challenge = serde_json::json!({
                "type": "dns-01",
                "url": format!("{BASE}/chall/1"),
                "token": "tok-1",
                "status": "pending",
            });
            let (status, location, body) = match path.as_str() {
                "/dir" => (
                    200,
                    None,
                    serde_json::json!({
                        "newNonce": format!("{BASE}/nonce"),
                        "newAccount": format!("{BASE}/account"),
                        "newOrder": format!("{BASE}/order"),
                    }),
                ),
                "/nonce" => (200, None, serde_json::json!({})),
                "/account" => (
                    201,
                    Some(format!("{BASE}/acct/1")),
                    serde_json::json!({ "status": "valid" }),
                ),
                "/order" | "/order/1" => (
                    if path == "/order" { 201 } else { 200 },
                    Some(format!("{BASE}/order/1")),
                    serde_json::json!({
                        "status": if path == "/order" { "pending" } else { "invalid" },
                        "identifiers": [{ "type": "dns", "value": "*.a.example" }],
                        "authorizations": [format!("{BASE}/authz/1")],
                        "finalize": format!("{BASE}/finalize/1"),
                    }),
                ),
                "/authz/1" => (
                    200,
                    None,
                    serde_json::json!({
                        "status": "pending",
                        "identifier": { "type": "dns", "value": "a.example" },
                        "wildcard": true,
                        "challenges": [
                            {
                                "type": "http-01",
                                "url": format!("{BASE}/chall/2"),
                                "token": "tok-2",
                                "status": "pending",
                            },
                            challenge,
                        ],
                    }),
                ),
                "/chall/1" => (200, None, challenge),
                _ => (404, None, serde_json::json!({ "type": "about:blank" })),
            };
            let mut response = hyper::Response::builder()
                .status(status)
                .header("Replay-Nonce", "nonce-1")
                .header("Content-Type", "application/json");
            if let Some(l) = location {
                response = response.header("Location", l);
            }
            let (parts, ()) = response.body(()).unwrap().into_parts();
            let body: Box<dyn instant_acme::BytesBody> =
                Box::new(bytes::Bytes::from(body.to_string()));
            Box::pin(async move { Ok(instant_acme::BytesResponse { parts, body }) })
        }
    }

    // r[verify issue.dns01.record]
    // r[verify issue.dns01.cleanup]
    // r[verify issue.dns01.choice]
    #[tokio::test]
    async fn a_failed_dns01_order_still_removes_its_record_and_a_failed_removal_is_not_its_error() {
        let dir = tempfile::tempdir().unwrap();
        let challenges = Challenges::default();
        let http = AcmeSource::with_http(
            AcmeConfig {
                directory: "https://acme.test/dir".into(),
                contact: vec![],
                eab: None,
                profile: None,
                ca_pem: None,
                account_path: dir.path().join("account.json"),
                order_timeout: Duration::from_secs(60),
            },
            challenges.clone(),
            Arc::new(FailingDnsAcme),
        );
        let provider = Arc::new(crate::dns01::tests::Recording {
            fail_cleanup: true,
            ..Default::default()
        });
        let cleanups = crate::dns01::Cleanups::default();
        let source = http.with_dns01(Dns01 {
            provider: provider.clone(),
            propagation: None,
            cleanups: cleanups.clone(),
        });
        let names = ["*.a.example".to_owned()];
        let err = source.obtain(&names).await.unwrap_err();
        assert_eq!(
            cleanups
                .wait(tokio::time::Instant::now() + Duration::from_secs(5))
                .await,
            [],
            "the removal ended (failed, logged): nothing left"
        );
        assert!(err.message.contains("order is Invalid"), "{err}");
        assert!(
            !err.message.contains("REFUSED"),
            "the cleanup's failure: {err}"
        );
        let calls = provider.calls();
        assert_eq!(calls.len(), 2, "{calls:?}");
        assert_eq!(calls[0].0, "present");
        assert_eq!(calls[1].0, "cleanup");
        for call in &calls {
            assert_eq!(call.1, "_acme-challenge.a.example.");
            assert_eq!(call.2, calls[0].2, "the same value removed");
        }
        // base64url of a SHA-256 digest, no padding.
        assert_eq!(calls[0].2.len(), 43, "{}", calls[0].2);
        assert!(
            calls[0]
                .2
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
            "{}",
            calls[0].2
        );
        // The HTTP-01 responder was never asked to answer anything.
        assert_eq!(challenges.get("tok-2"), None);
        assert_eq!(challenges.get("tok-1"), None);
    }

    fn failing_dns01_source(
        dir: &std::path::Path,
        provider: Arc<crate::dns01::tests::Recording>,
        propagation: Option<crate::propagation::Propagation>,
    ) -> (AcmeSource, crate::dns01::Cleanups) {
        let http = AcmeSource::with_http(
            AcmeConfig {
                directory: "https://acme.test/dir".into(),
                contact: vec![],
                eab: None,
                profile: None,
                ca_pem: None,
                account_path: dir.join("account.json"),
                order_timeout: Duration::from_secs(60),
            },
            Challenges::default(),
            Arc::new(FailingDnsAcme),
        );
        let cleanups = crate::dns01::Cleanups::default();
        let source = http.with_dns01(Dns01 {
            provider,
            propagation,
            cleanups: cleanups.clone(),
        });
        (source, cleanups)
    }

    // r[verify issue.dns01.cleanup]
    #[tokio::test(start_paused = true)]
    async fn a_slow_cleanup_is_outside_the_attempt_and_does_not_change_its_outcome() {
        let dir = tempfile::tempdir().unwrap();
        let provider = Arc::new(crate::dns01::tests::Recording {
            cleanup_delay: Duration::from_secs(3600),
            ..Default::default()
        });
        let (source, cleanups) = failing_dns01_source(dir.path(), provider.clone(), None);
        let names = ["*.a.example".to_owned()];
        // The attempt's bound is far shorter than the removal: the outcome comes first.
        let outcome = tokio::time::timeout(Duration::from_secs(60), source.obtain(&names))
            .await
            .expect("the outcome, not the removal, ends the attempt");
        let err = outcome.unwrap_err();
        assert!(err.message.contains("order is Invalid"), "{err}");
        assert_eq!(provider.removed(), Vec::<String>::new());
        let left = cleanups
            .wait(tokio::time::Instant::now() + Duration::from_secs(7200))
            .await;
        assert_eq!(left, []);
        assert_eq!(provider.removed().len(), 1);
    }

    /// Never has the value.
    #[derive(Debug)]
    struct NeverThere;

    impl crate::propagation::TxtLookup for NeverThere {
        fn txt<'a>(
            &'a self,
            _server: std::net::SocketAddr,
            _fqdn: &'a str,
        ) -> crate::source::BoxFuture<'a, Result<Vec<String>, String>> {
            Box::pin(async { Ok(Vec::new()) })
        }
    }

    // r[verify issue.dns01.cleanup]
    #[tokio::test(start_paused = true)]
    async fn an_attempt_cut_off_while_waiting_for_propagation_has_its_record_removed_by_the_wait() {
        let dir = tempfile::tempdir().unwrap();
        let provider = Arc::new(crate::dns01::tests::Recording {
            cleanup_delay: Duration::from_secs(1),
            ..Default::default()
        });
        let propagation = crate::propagation::Propagation {
            servers: vec!["127.0.0.1:53".parse().unwrap()],
            timeout: Duration::from_secs(120),
            interval: Duration::from_secs(2),
            lookup: Arc::new(NeverThere),
        };
        let (source, cleanups) =
            failing_dns01_source(dir.path(), provider.clone(), Some(propagation));
        let names = ["*.a.example".to_owned()];
        // Cut off (the attempt bound, or a stop) in the middle of the propagation wait.
        let cut = tokio::time::timeout(Duration::from_secs(30), source.obtain(&names)).await;
        assert!(cut.is_err(), "still waiting for propagation");
        assert_eq!(provider.calls()[0].0, "present");
        // What the module's stop does: wait for the removals until its deadline.
        let left = cleanups
            .wait(tokio::time::Instant::now() + Duration::from_secs(5))
            .await;
        assert_eq!(left, []);
        assert_eq!(provider.removed().len(), 1);
    }

    // r[verify issue.certificates.failure]
    #[test]
    fn a_failed_authorization_is_named_by_its_identifier_and_reason() {
        let state = |status: &str| -> instant_acme::AuthorizationState {
            serde_json::from_value(serde_json::json!({
                "identifier": { "type": "dns", "value": "www.a.example" },
                "status": status,
                "challenges": [{
                    "type": "http-01",
                    "url": "https://ca.example/chall/1",
                    "token": "tok",
                    "status": "invalid",
                    "error": {
                        "type": "urn:ietf:params:acme:error:connection",
                        "detail": "connection refused",
                        "status": 400
                    }
                }]
            }))
            .unwrap()
        };
        let message = failed_authorization(&state("invalid")).unwrap();
        assert!(
            message.starts_with("authorization for www.a.example is Invalid"),
            "{message}"
        );
        assert!(message.contains("connection refused"), "{message}");
        assert_eq!(failed_authorization(&state("pending")), None);
        assert_eq!(failed_authorization(&state("valid")), None);
        let expired = failed_authorization(&state("expired")).unwrap();
        assert!(expired.contains("www.a.example"), "{expired}");
    }
}
