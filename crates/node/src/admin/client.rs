//! The CLI's side of the admin API: one HTTP/1 request over TCP or the Unix socket.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

use super::token::Token;

/// Where the CLI finds the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Over TCP.
    Tcp(SocketAddr),
    /// Over the Unix socket.
    Unix(PathBuf),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Tcp(addr) => write!(f, "{addr}"),
            Target::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

impl std::str::FromStr for Target {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(path) = s.strip_prefix("unix:") {
            return Ok(Target::Unix(PathBuf::from(path)));
        }
        s.parse()
            .map(Target::Tcp)
            .map_err(|_| format!("invalid admin address {s:?}: write IP:PORT or unix:PATH"))
    }
}

// i[impl node.cli.not-running]
/// A failed admin call.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing answers there.
    #[error(
        "no holdfast node is running at {target} ({source}); start one with `holdfast run`, or point --admin at it"
    )]
    NotRunning {
        /// Where we looked.
        target: Target,
        /// The connect error.
        source: std::io::Error,
    },
    /// The node accepted the connection but did not answer in time (wedged, or stopped).
    #[error("the node at {target} did not answer within {}s", timeout.as_secs())]
    Timeout {
        /// Where.
        target: Target,
        /// How long we waited.
        timeout: std::time::Duration,
    },
    /// The Unix socket exists but this user may not use it.
    #[error("permission denied on {target} ({source}); run as the node's user, or use sudo")]
    PermissionDenied {
        /// Where.
        target: Target,
        /// The connect error.
        source: std::io::Error,
    },
    /// The connection broke mid-request.
    #[error("the node at {target} did not answer: {message}")]
    Http {
        /// Where.
        target: Target,
        /// What went wrong.
        message: String,
    },
    /// The node refused the call.
    #[error("the node at {target} answered {status}: {body}")]
    Refused {
        /// Where.
        target: Target,
        /// The status.
        status: u16,
        /// Its explanation.
        body: String,
    },
}

/// How long a CLI call may take, end to end.
pub const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

// i[impl node.cli.timeout]
/// Sends one request and returns the body of a 2xx answer, or [`ClientError::Timeout`] when the
/// node does not answer within [`CALL_TIMEOUT`].
pub async fn call(
    target: &Target,
    method: hyper::Method,
    path: &str,
    token: Option<&Token>,
) -> Result<String, ClientError> {
    call_within(target, method, path, token, CALL_TIMEOUT).await
}

/// [`call`] with a JSON request body.
pub async fn call_json(
    target: &Target,
    method: hyper::Method,
    path: &str,
    token: Option<&Token>,
    body: &serde_json::Value,
) -> Result<String, ClientError> {
    let body = body.to_string();
    match tokio::time::timeout(
        CALL_TIMEOUT,
        call_unbounded(target, method, path, token, Some(&body)),
    )
    .await
    {
        Ok(result) => result,
        Err(_) => Err(ClientError::Timeout {
            target: target.clone(),
            timeout: CALL_TIMEOUT,
        }),
    }
}

/// [`call`] with its own time limit.
pub async fn call_within(
    target: &Target,
    method: hyper::Method,
    path: &str,
    token: Option<&Token>,
    timeout: std::time::Duration,
) -> Result<String, ClientError> {
    match tokio::time::timeout(timeout, call_unbounded(target, method, path, token, None)).await {
        Ok(result) => result,
        Err(_) => Err(ClientError::Timeout {
            target: target.clone(),
            timeout,
        }),
    }
}

async fn call_unbounded(
    target: &Target,
    method: hyper::Method,
    path: &str,
    token: Option<&Token>,
    body: Option<&str>,
) -> Result<String, ClientError> {
    let response = respond(target, method, path, token, body).await?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| http_error(target, e.to_string()))?
        .to_bytes();
    let body = String::from_utf8_lossy(&body).into_owned();
    if status.is_success() {
        Ok(body)
    } else {
        Err(refused(target, status, &body))
    }
}

// i[impl node.workloads.logs+2]
/// `GET path` (with `token` as the bearer token), handing each chunk of a 2xx answer's body to
/// `on_chunk` as it arrives (for answers that stream, such as `holdfast logs --follow`) until
/// the body ends or `on_chunk` breaks (its reader went away); no time limit once it answers (the
/// connect and the response head are bounded by [`CALL_TIMEOUT`]). A body that ends in an error
/// (the node could not read the whole of it) is an error.
pub async fn stream_get(
    target: &Target,
    path: &str,
    token: Option<&Token>,
    mut on_chunk: impl FnMut(&[u8]) -> std::ops::ControlFlow<()>,
) -> Result<(), ClientError> {
    let head = respond(target, hyper::Method::GET, path, token, None);
    let response = tokio::time::timeout(CALL_TIMEOUT, head)
        .await
        .map_err(|_| ClientError::Timeout {
            target: target.clone(),
            timeout: CALL_TIMEOUT,
        })??;
    let status = response.status();
    let mut body = response.into_body();
    if !status.is_success() {
        let text = body
            .collect()
            .await
            .map_err(|e| http_error(target, e.to_string()))?
            .to_bytes();
        return Err(refused(target, status, &String::from_utf8_lossy(&text)));
    }
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| http_error(target, e.to_string()))?;
        if let Some(data) = frame.data_ref() {
            if on_chunk(data).is_break() {
                break;
            }
        }
    }
    Ok(())
}

/// Sends one request to the node at `target` (with `token` as the bearer token and `body` as
/// JSON) and returns the answer's head, its body still to read.
async fn respond(
    target: &Target,
    method: hyper::Method,
    path: &str,
    token: Option<&Token>,
    body: Option<&str>,
) -> Result<hyper::Response<hyper::body::Incoming>, ClientError> {
    let not_running = |source: std::io::Error| {
        if source.kind() == std::io::ErrorKind::PermissionDenied {
            ClientError::PermissionDenied {
                target: target.clone(),
                source,
            }
        } else {
            ClientError::NotRunning {
                target: target.clone(),
                source,
            }
        }
    };
    // The node answers over TCP only for its own authority (i[node.admin.host+2]).
    let host = match target {
        Target::Tcp(addr) => addr.to_string(),
        Target::Unix(_) => "localhost".to_owned(),
    };
    let mut builder = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, host);
    if let Some(token) = token {
        builder = builder.header(
            hyper::header::AUTHORIZATION,
            format!("Bearer {}", token.expose()),
        );
    }
    if body.is_some() {
        builder = builder.header(hyper::header::CONTENT_TYPE, "application/json");
    }
    let request = builder
        .body(Full::new(Bytes::from(body.unwrap_or_default().to_owned())))
        .map_err(|e| http_error(target, e.to_string()))?;
    match target {
        Target::Tcp(addr) => {
            let stream = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(not_running)?;
            send(TokioIo::new(stream), request).await
        }
        Target::Unix(path) => {
            let stream = tokio::net::UnixStream::connect(path)
                .await
                .map_err(not_running)?;
            send(TokioIo::new(stream), request).await
        }
    }
    .map_err(|message| http_error(target, message))
}

fn http_error(target: &Target, message: String) -> ClientError {
    ClientError::Http {
        target: target.clone(),
        message,
    }
}

/// A non-2xx answer, its body escaped for the operator's terminal.
fn refused(target: &Target, status: hyper::StatusCode, body: &str) -> ClientError {
    ClientError::Refused {
        target: target.clone(),
        status: status.as_u16(),
        // i[impl node.cli.escape]
        // Printed to the operator's terminal: whatever answered, it writes no escape sequence.
        body: crate::render::escape(body.trim()),
    }
}

async fn send<IO>(
    io: IO,
    request: hyper::Request<Full<Bytes>>,
) -> Result<hyper::Response<hyper::body::Incoming>, String>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())
}
