//! The local provider: a daemon on the node that hands out certificates over loopback HTTP or a
//! Unix socket. `GET /v1/certificate/HOSTNAME` answers 200 with one PEM text holding the chain and
//! the key; anything else is a classified failure.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty, LengthLimitError, Limited};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::cert::CertifiedPair;
use crate::source::{BoxFuture, ErrorClass, Source, SourceError};

/// Where the local provider listens. A TCP address off loopback is refused when the config is
/// read ([`LocalEndpoint::check`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case", try_from = "RawEndpoint")]
pub enum LocalEndpoint {
    /// A loopback TCP address.
    Tcp(SocketAddr),
    /// A Unix socket path.
    Unix(PathBuf),
}

/// A local provider endpoint that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocalEndpointError {
    /// A TCP address off loopback: the provider hands out private keys, so it must be a daemon
    /// on this node, reached without crossing a network.
    #[error(
        "local provider endpoint {0} is not a loopback address: the provider must run on this node \
         (127.0.0.0/8, ::1, or a unix socket)"
    )]
    NotLoopback(SocketAddr),
}

impl LocalEndpoint {
    /// A TCP endpoint must be a loopback address (an IPv4-mapped IPv6 one included); a Unix
    /// socket is always local.
    // r[impl issue.local.loopback]
    pub fn check(&self) -> Result<(), LocalEndpointError> {
        match self {
            LocalEndpoint::Tcp(addr) if !addr.ip().to_canonical().is_loopback() => {
                Err(LocalEndpointError::NotLoopback(*addr))
            }
            LocalEndpoint::Tcp(_) | LocalEndpoint::Unix(_) => Ok(()),
        }
    }
}

/// [`LocalEndpoint`] as written, before [`LocalEndpoint::check`].
#[derive(serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawEndpoint {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl TryFrom<RawEndpoint> for LocalEndpoint {
    type Error = LocalEndpointError;

    fn try_from(raw: RawEndpoint) -> Result<Self, Self::Error> {
        let endpoint = match raw {
            RawEndpoint::Tcp(addr) => LocalEndpoint::Tcp(addr),
            RawEndpoint::Unix(path) => LocalEndpoint::Unix(path),
        };
        endpoint.check()?;
        Ok(endpoint)
    }
}

/// The largest answer read from the provider: a chain and key are a few KiB, and a peer that
/// sends more must not be able to grow the node's memory without bound.
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// The local provider source.
#[derive(Debug, Clone)]
pub struct LocalProvider {
    endpoint: LocalEndpoint,
    timeout: Duration,
}

impl LocalProvider {
    /// A provider at `endpoint`; each request (connect to last byte) is bounded by `timeout`.
    pub fn new(endpoint: LocalEndpoint, timeout: Duration) -> Self {
        Self { endpoint, timeout }
    }

    async fn request(&self, names: &[String]) -> Result<CertifiedPair, SourceError> {
        let path = certificate_path(names);
        let (status, retry_after, body) = match &self.endpoint {
            LocalEndpoint::Tcp(addr) => {
                // A provider built in code, past config validation, still never leaves loopback.
                self.endpoint
                    .check()
                    .map_err(|e| SourceError::new(ErrorClass::Rejected, e.to_string()))?;
                let stream = tokio::net::TcpStream::connect(addr)
                    .await
                    .map_err(unreachable)?;
                get(stream, &addr.to_string(), &path).await?
            }
            LocalEndpoint::Unix(p) => {
                let stream = tokio::net::UnixStream::connect(p)
                    .await
                    .map_err(unreachable)?;
                get(stream, "localhost", &path).await?
            }
        };
        let text = String::from_utf8_lossy(&body);
        if !(200..300).contains(&status) {
            let class = match status {
                429 => ErrorClass::RateLimited,
                s if holdfast_retry::http::StatusCode::new(s)
                    .is_some_and(holdfast_retry::http::is_retryable) =>
                {
                    ErrorClass::Server
                }
                _ => ErrorClass::Rejected,
            };
            let snippet: String = text.chars().take(200).collect();
            return Err(SourceError {
                class,
                message: format!("local provider answered {status}: {snippet}"),
                retry_after,
            });
        }
        CertifiedPair::parse_bundle_for(names, &text)
            .map_err(|e| SourceError::new(ErrorClass::BadCertificate, e.to_string()))
    }
}

/// The request path for a certificate of `names`: the first in the path, every further one as a
/// `name` query parameter. Names are DNS names (checked at start), so nothing needs escaping.
// r[impl issue.certificates]
fn certificate_path(names: &[String]) -> String {
    let mut path = format!(
        "/v1/certificate/{}",
        names.first().map_or("", String::as_str)
    );
    for (i, name) in names.iter().skip(1).enumerate() {
        path.push(if i == 0 { '?' } else { '&' });
        path.push_str("name=");
        path.push_str(name);
    }
    path
}

fn unreachable(e: std::io::Error) -> SourceError {
    SourceError::new(ErrorClass::Unreachable, format!("local provider: {e}"))
}

async fn get<S>(
    stream: S,
    host: &str,
    path: &str,
) -> Result<(u16, Option<Duration>, Bytes), SourceError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| SourceError::new(ErrorClass::Unreachable, format!("local provider: {e}")))?;
    let conn = tokio::spawn(conn);
    let request = hyper::Request::get(path)
        .header(hyper::header::HOST, host)
        .body(Empty::<Bytes>::new())
        .map_err(|e| SourceError::new(ErrorClass::Rejected, e.to_string()))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| SourceError::new(ErrorClass::Unreachable, format!("local provider: {e}")))?;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(hyper::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| holdfast_retry::http::parse_retry_after(v, std::time::SystemTime::now()));
    // r[impl issue.bounds]
    let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<LengthLimitError>() {
                SourceError::new(
                    ErrorClass::BadCertificate,
                    format!("local provider: answer larger than {MAX_ANSWER_BYTES} bytes"),
                )
            } else {
                SourceError::new(ErrorClass::Unreachable, format!("local provider: {e}"))
            }
        })?
        .to_bytes();
    conn.abort();
    Ok((status, retry_after, body))
}

impl Source for LocalProvider {
    fn name(&self) -> &str {
        "local"
    }

    // r[impl issue.local]
    fn obtain<'a>(
        &'a self,
        names: &'a [String],
    ) -> BoxFuture<'a, Result<CertifiedPair, SourceError>> {
        Box::pin(async move {
            match tokio::time::timeout(self.timeout, self.request(names)).await {
                Ok(result) => result,
                Err(_) => Err(SourceError::new(
                    ErrorClass::Timeout,
                    format!("local provider did not answer within {:?}", self.timeout),
                )),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify issue.local.loopback]
    #[test]
    fn a_tcp_endpoint_off_loopback_is_refused_with_a_typed_error() {
        for ok in [
            "127.0.0.1:8099",
            "127.3.4.5:1",
            "[::1]:8099",
            "[::ffff:127.0.0.1]:9",
        ] {
            let endpoint: LocalEndpoint =
                serde_json::from_value(serde_json::json!({ "tcp": ok })).unwrap();
            assert_eq!(endpoint.check(), Ok(()), "{ok}");
        }
        for bad in [
            "10.0.0.2:8099",
            "0.0.0.0:8099",
            "[::]:1",
            "192.0.2.1:80",
            "[2001:db8::1]:80",
        ] {
            let addr: SocketAddr = bad.parse().unwrap();
            assert_eq!(
                LocalEndpoint::Tcp(addr).check(),
                Err(LocalEndpointError::NotLoopback(addr))
            );
            // Refused when the config is read, with the reason in the message.
            let err = serde_json::from_value::<LocalEndpoint>(serde_json::json!({ "tcp": bad }))
                .unwrap_err()
                .to_string();
            assert!(err.contains("not a loopback address"), "{bad}: {err}");
        }
        let unix: LocalEndpoint =
            serde_json::from_value(serde_json::json!({ "unix": "/run/certd.sock" })).unwrap();
        assert_eq!(unix.check(), Ok(()));
    }

    // r[verify issue.certificates]
    #[tokio::test]
    async fn the_local_provider_is_asked_for_every_name_and_its_answer_must_name_each() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let names = vec!["a.example".to_owned(), "www.a.example".to_owned()];
        assert_eq!(certificate_path(&names[..1]), "/v1/certificate/a.example");
        assert_eq!(
            certificate_path(&[names[0].clone(), names[1].clone(), "b.example".to_owned()]),
            "/v1/certificate/a.example?name=www.a.example&name=b.example"
        );
        // A provider answering with `leaf`, recording the request line.
        async fn serve_once(leaf: &[&str]) -> (SocketAddr, tokio::task::JoinHandle<String>) {
            let now = std::time::SystemTime::now();
            let (chain, key) = crate::cert::testing::leaf_for(
                leaf,
                now - Duration::from_secs(60),
                Duration::from_secs(86400),
            );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let task = tokio::spawn(async move {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 4096];
                let n = s.read(&mut buf).await.unwrap();
                let request = String::from_utf8_lossy(&buf[..n]).to_string();
                let body = format!("{key}{chain}");
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                s.write_all(answer.as_bytes()).await.unwrap();
                request.lines().next().unwrap_or_default().to_owned()
            });
            (addr, task)
        }
        let (addr, seen) = serve_once(&["a.example", "www.a.example"]).await;
        let provider = LocalProvider::new(LocalEndpoint::Tcp(addr), Duration::from_secs(5));
        let pair = provider.obtain(&names).await.unwrap();
        assert!(pair.covers(&names));
        assert_eq!(
            seen.await.unwrap(),
            "GET /v1/certificate/a.example?name=www.a.example HTTP/1.1"
        );
        // An answer for the first name only is refused, naming the one it lacks.
        let (addr, _) = serve_once(&["a.example"]).await;
        let provider = LocalProvider::new(LocalEndpoint::Tcp(addr), Duration::from_secs(5));
        let err = provider.obtain(&names).await.unwrap_err();
        assert_eq!(err.class, ErrorClass::BadCertificate);
        assert!(err.message.contains("www.a.example"), "{err}");
    }
}
