//! The client's certificate verifier: the node is trusted by its pinned fingerprint, not by a CA.

use std::sync::{Arc, Mutex};

use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use subtle::ConstantTimeEq;

use crate::identity::Fingerprint;

/// Accepts exactly the certificate whose SHA-256 is the pin; remembers a mismatch so the client can
/// report it as its own error. The handshake signature is still checked against the certificate's
/// key, so presenting a copied certificate without its key fails.
#[derive(Debug)]
pub struct PinnedVerifier {
    pin: Fingerprint,
    algorithms: WebPkiSupportedAlgorithms,
    mismatch: Mutex<Option<Fingerprint>>,
}

impl PinnedVerifier {
    /// A verifier for `pin`.
    pub fn new(pin: Fingerprint, provider: &CryptoProvider) -> Arc<Self> {
        Arc::new(PinnedVerifier {
            pin,
            algorithms: provider.signature_verification_algorithms,
            mismatch: Mutex::new(None),
        })
    }

    /// The fingerprint the server presented, if it was not the pin.
    pub fn mismatch(&self) -> Option<Fingerprint> {
        *self
            .mismatch
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl ServerCertVerifier for PinnedVerifier {
    // r[impl forward.pin]
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let presented = Fingerprint::of(end_entity);
        if bool::from(presented.0.ct_eq(&self.pin.0)) {
            Ok(ServerCertVerified::assertion())
        } else {
            *self
                .mismatch
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(presented);
            Err(rustls::Error::General(format!(
                "node presented {presented}, pinned {}",
                self.pin
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
