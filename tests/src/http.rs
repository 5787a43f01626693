//! One HTTP/1.1 request over plain TCP or TLS, with hyper: enough for smoke tests.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::Request;
use hyper::header::HeaderMap;
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::Error;

/// Where a request goes: `http://host:port` or `https://host:port` (a path in the URL is ignored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// True for `https`.
    pub tls: bool,
    /// Host name or IP literal.
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl Target {
    /// Parses `scheme://host:port[/path]`.
    pub fn parse(url: &str) -> Result<Self, Error> {
        let uri: hyper::Uri = url.parse()?;
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            other => return Err(format!("unsupported scheme {other:?} in {url}").into()),
        };
        let host = uri.host().ok_or("no host")?.to_owned();
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        Ok(Target { tls, host, port })
    }
}

/// A whole response.
#[derive(Debug, Clone)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
}

/// A rustls client configuration that trusts only the CA certificates in `ca_pem`.
pub fn tls_config(ca_pem: &Path) -> Result<rustls::ClientConfig, Error> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca_pem)? {
        roots.add(cert?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// Sends one request (`body` as JSON when given, plus extra `headers`) and reads the whole
/// response. For `https`, `tls` must be given.
pub async fn http_request(
    target: &Target,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<String>,
    tls: Option<rustls::ClientConfig>,
) -> Result<Response, Error> {
    let tcp = TcpStream::connect((target.host.as_str(), target.port)).await?;
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", format!("{}:{}", target.host, target.port));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if body.is_some() {
        request = request.header("content-type", "application/json");
    }
    let request = request.body(Full::new(Bytes::from(body.unwrap_or_default())))?;
    if target.tls {
        let config = tls.ok_or("an https target needs a TLS configuration")?;
        let name = ServerName::try_from(target.host.clone())?;
        let stream = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await?;
        send(stream, request).await
    } else {
        send(tcp, request).await
    }
}

async fn send<S>(stream: S, request: Request<Full<Bytes>>) -> Result<Response, Error>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let driver = tokio::spawn(connection);
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await?.to_bytes();
    driver.abort();
    Ok(Response {
        status,
        headers,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_with_default_ports() {
        let t = Target::parse("https://127.0.0.1:14000/dir").unwrap();
        assert_eq!(
            t,
            Target {
                tls: true,
                host: "127.0.0.1".into(),
                port: 14000
            }
        );
        assert_eq!(Target::parse("http://localhost").unwrap().port, 80);
        assert!(Target::parse("redis://127.0.0.1:6379").is_err());
    }
}
