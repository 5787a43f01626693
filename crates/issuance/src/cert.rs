//! A certificate chain and its key: parsed, checked against each other, and timed for renewal.

use std::time::{Duration, SystemTime};

use rcgen::PublicKeyData as _;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// A certificate pair that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertError {
    /// No certificate in the chain.
    #[error("no certificate in the PEM chain")]
    NoCertificate,
    /// A PEM section or DER structure could not be parsed.
    #[error("unparseable certificate: {0}")]
    Parse(String),
    /// No usable private key.
    #[error("unusable private key: {0}")]
    Key(String),
    /// The key is not the one the leaf certificate certifies.
    #[error("the private key does not match the certificate")]
    KeyMismatch,
    /// The leaf does not name the hostname.
    #[error("the certificate does not cover {0}")]
    WrongName(String),
    /// The leaf's validity is empty or already over.
    #[error("the certificate is not valid now (not after {0:?})")]
    NotValid(SystemTime),
}

/// The validity of a certificate, and when it is renewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CertInfo {
    /// Start of validity.
    pub not_before: SystemTime,
    /// End of validity.
    pub not_after: SystemTime,
    /// When renewal becomes due: two thirds into the lifetime unless an ARI window chose another
    /// time.
    pub renew_at: SystemTime,
}

impl CertInfo {
    /// Validity with the default renewal time (two thirds of the lifetime).
    // r[impl issue.renewal.fallback]
    pub fn new(not_before: SystemTime, not_after: SystemTime) -> Self {
        let lifetime = not_after
            .duration_since(not_before)
            .unwrap_or(Duration::ZERO);
        Self {
            not_before,
            not_after,
            renew_at: not_before + lifetime * 2 / 3,
        }
    }
}

/// A checked chain (leaf first) and its private key, both PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct CertifiedPair {
    /// The chain, PEM, leaf first.
    pub chain_pem: String,
    /// The private key, PKCS#8 PEM.
    pub key_pem: String,
    /// Validity and renewal time of the leaf.
    pub info: CertInfo,
    /// The leaf, DER (for ARI's certificate identifier).
    pub leaf_der: Vec<u8>,
}

// The key is a secret: never printed.
impl std::fmt::Debug for CertifiedPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertifiedPair")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

/// Whether `leaf`'s subject alternative names list `name` (compared case-insensitively).
fn leaf_names(leaf: &x509_parser::certificate::X509Certificate<'_>, name: &str) -> bool {
    leaf.subject_alternative_name()
        .ok()
        .flatten()
        .is_some_and(|san| {
            san.value.general_names.iter().any(|n| match n {
                x509_parser::extensions::GeneralName::DNSName(d) => d.eq_ignore_ascii_case(name),
                _ => false,
            })
        })
}

fn to_system_time(t: x509_parser::time::ASN1Time) -> SystemTime {
    let secs = t.timestamp();
    match u64::try_from(secs) {
        Ok(s) => SystemTime::UNIX_EPOCH + Duration::from_secs(s),
        Err(_) => SystemTime::UNIX_EPOCH,
    }
}

impl CertifiedPair {
    /// Parses and checks a pair: the chain parses, the key is the leaf's, the leaf names
    /// `hostname`. Validity against the clock is checked by [`CertifiedPair::check_time`].
    // r[impl issue.store.validate]
    pub fn parse(hostname: &str, chain_pem: &str, key_pem: &str) -> Result<Self, CertError> {
        Self::parse_for(&[hostname.to_owned()], chain_pem, key_pem)
    }

    /// [`CertifiedPair::parse`] for a certificate of several names: the leaf names every one of
    /// `names` (the first it lacks is the error).
    // r[impl issue.store.validate]
    // r[impl issue.certificates]
    pub fn parse_for(names: &[String], chain_pem: &str, key_pem: &str) -> Result<Self, CertError> {
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(chain_pem.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| CertError::Parse(e.to_string()))?;
        let leaf = chain.first().ok_or(CertError::NoCertificate)?;
        let (_, parsed) = x509_parser::parse_x509_certificate(leaf.as_ref())
            .map_err(|e| CertError::Parse(e.to_string()))?;
        // The key must parse as a private key and be the leaf's.
        PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|e| CertError::Key(e.to_string()))?;
        let key = rcgen::KeyPair::from_pem(key_pem).map_err(|e| CertError::Key(e.to_string()))?;
        if key.subject_public_key_info() != parsed.tbs_certificate.subject_pki.raw {
            return Err(CertError::KeyMismatch);
        }
        if let Some(missing) = names.iter().find(|name| !leaf_names(&parsed, name)) {
            return Err(CertError::WrongName(missing.clone()));
        }
        let validity = parsed.validity();
        let info = CertInfo::new(
            to_system_time(validity.not_before),
            to_system_time(validity.not_after),
        );
        Ok(Self {
            chain_pem: chain_pem.to_owned(),
            key_pem: key_pem.to_owned(),
            info,
            leaf_der: leaf.as_ref().to_vec(),
        })
    }

    /// Whether the leaf names every one of `names` (a certificate stored before a name was added
    /// does not).
    // r[impl issue.certificates]
    pub fn covers(&self, names: &[String]) -> bool {
        if names.is_empty() {
            return true;
        }
        match x509_parser::parse_x509_certificate(&self.leaf_der) {
            Ok((_, parsed)) => names.iter().all(|name| leaf_names(&parsed, name)),
            Err(_) => false,
        }
    }

    /// Rejects a pair that is not valid at `now` (expired, or an empty lifetime).
    pub fn check_time(&self, now: SystemTime) -> Result<(), CertError> {
        if self.info.not_after <= self.info.not_before || now >= self.info.not_after {
            return Err(CertError::NotValid(self.info.not_after));
        }
        Ok(())
    }

    /// Parses a single PEM text that holds the key and the chain (in any order).
    pub fn parse_bundle(hostname: &str, bundle: &str) -> Result<Self, CertError> {
        Self::parse_bundle_for(&[hostname.to_owned()], bundle)
    }

    /// [`CertifiedPair::parse_bundle`] for a certificate of several names.
    pub fn parse_bundle_for(names: &[String], bundle: &str) -> Result<Self, CertError> {
        let (mut chain, mut key) = (String::new(), String::new());
        let mut current: Option<&mut String> = None;
        for line in bundle.lines() {
            if line.starts_with("-----BEGIN ") {
                current = Some(if line.contains("PRIVATE KEY") {
                    &mut key
                } else {
                    &mut chain
                });
            }
            if let Some(out) = current.as_deref_mut() {
                out.push_str(line);
                out.push('\n');
            }
            if line.starts_with("-----END ") {
                current = None;
            }
        }
        if key.is_empty() {
            return Err(CertError::Key("no private key in the PEM".into()));
        }
        Self::parse_for(names, &chain, &key)
    }

    /// The key followed by the chain, as one PEM text.
    pub fn bundle(&self) -> String {
        format!("{}{}", self.key_pem, self.chain_pem)
    }
}

/// Test helpers: a CA and leaves signed by it.
#[cfg(any(test, feature = "test-util"))]
#[allow(clippy::expect_used)]
pub mod testing {
    use super::*;

    /// Issues a leaf for `hostname` valid from `not_before` for `lifetime`; returns (chain, key).
    pub fn leaf(hostname: &str, not_before: SystemTime, lifetime: Duration) -> (String, String) {
        leaf_for(&[hostname], not_before, lifetime)
    }

    /// [`leaf`] naming every one of `names`.
    pub fn leaf_for(
        names: &[&str],
        not_before: SystemTime,
        lifetime: Duration,
    ) -> (String, String) {
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).expect("ca");
        let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
        let key = rcgen::KeyPair::generate().expect("key");
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = rcgen::CertificateParams::new(names).expect("params");
        params.not_before = time::OffsetDateTime::from(not_before);
        params.not_after = time::OffsetDateTime::from(not_before + lifetime);
        // As a CA's leaves do, so an ACME renewal-information request can name it (RFC 9773).
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &issuer).expect("sign");
        (format!("{}{}", cert.pem(), ca.pem()), key.serialize_pem())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    // r[verify issue.renewal.fallback]
    #[test]
    fn renewal_at_two_thirds_of_the_lifetime() {
        let info = CertInfo::new(t(0), t(90 * 86400));
        assert_eq!(info.renew_at, t(60 * 86400));
    }

    // r[verify issue.store.validate]
    #[test]
    fn mismatched_or_foreign_pairs_are_rejected() {
        let (chain, key) = testing::leaf("a.example", t(0), Duration::from_secs(86400));
        let pair = CertifiedPair::parse("a.example", &chain, &key).unwrap();
        assert_eq!(pair.info.not_after, t(86400));
        assert!(pair.check_time(t(10)).is_ok());
        assert!(matches!(
            pair.check_time(t(86400)),
            Err(CertError::NotValid(_))
        ));
        let again = CertifiedPair::parse_bundle("a.example", &pair.bundle()).unwrap();
        assert_eq!(again, pair);
        let (_, other_key) = testing::leaf("a.example", t(0), Duration::from_secs(86400));
        assert_eq!(
            CertifiedPair::parse("a.example", &chain, &other_key),
            Err(CertError::KeyMismatch)
        );
        assert_eq!(
            CertifiedPair::parse("b.example", &chain, &key),
            Err(CertError::WrongName("b.example".into()))
        );
        assert!(matches!(
            CertifiedPair::parse("a.example", "garbage", &key),
            Err(CertError::NoCertificate | CertError::Parse(_))
        ));
        assert!(matches!(
            CertifiedPair::parse(
                "a.example",
                &chain,
                "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
            ),
            Err(CertError::Key(_))
        ));
        // The key never shows in debug output.
        assert!(!format!("{pair:?}").contains("PRIVATE"));
    }

    // r[verify issue.certificates]
    #[test]
    fn a_pair_for_several_names_must_name_each_one() {
        let names = ["a.example".to_owned(), "www.a.example".to_owned()];
        let (chain, key) = testing::leaf_for(
            &["a.example", "www.a.example"],
            t(0),
            Duration::from_secs(86400),
        );
        let pair = CertifiedPair::parse_for(&names, &chain, &key).unwrap();
        assert!(pair.covers(&names));
        assert!(pair.covers(&["WWW.A.example".to_owned()]));
        assert_eq!(
            CertifiedPair::parse_bundle_for(&names, &pair.bundle()).unwrap(),
            pair
        );
        // A leaf lacking one of the names is refused, naming it.
        let (one, one_key) = testing::leaf("a.example", t(0), Duration::from_secs(86400));
        assert_eq!(
            CertifiedPair::parse_for(&names, &one, &one_key),
            Err(CertError::WrongName("www.a.example".into()))
        );
        let one = CertifiedPair::parse("a.example", &one, &one_key).unwrap();
        assert!(!one.covers(&names[1..]));
        assert!(one.covers(&[]));
    }
}
