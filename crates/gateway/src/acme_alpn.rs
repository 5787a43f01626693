//! TLS-ALPN-01 (RFC 8737) on the gateway's own TLS listener, certmagic's model: when the node
//! runs ACME and the gateway holds the port the CA validates on, the gateway answers the
//! validator's `acme-tls/1` handshakes itself. The challenges come through [`AcmeTlsAlpn`], which
//! the node implements over holdfast-issuance's, so this crate does not depend on it.

use std::sync::Arc;

use rustls::server::ClientHello;

/// The ALPN protocol of TLS-ALPN-01 (RFC 8737 §6.2).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// The TLS-ALPN-01 challenges in progress, as the gateway's listener asks for them.
pub trait AcmeTlsAlpn: Send + Sync + 'static {
    /// The server config that answers a validation of `name` (the challenge certificate for it
    /// alone, `acme-tls/1` as its protocol) while a challenge for it is pending; `None` otherwise.
    fn challenge_config(&self, name: &str) -> Option<Arc<rustls::ServerConfig>>;
}

/// The config answering `hello` when it is a TLS-ALPN-01 validation: it offers `acme-tls/1` and
/// nothing else (RFC 8737 §3: the validator offers only that), and names (SNI) an identifier
/// whose challenge is pending. Anything else is served as any client is.
// r[impl gateway.tls.alpn01]
pub(crate) fn challenge_for(
    challenges: &dyn AcmeTlsAlpn,
    hello: &ClientHello<'_>,
) -> Option<Arc<rustls::ServerConfig>> {
    let mut offered = hello.alpn()?;
    if offered.next() != Some(ACME_TLS_ALPN) || offered.next().is_some() {
        return None;
    }
    challenges.challenge_config(hello.server_name()?)
}
