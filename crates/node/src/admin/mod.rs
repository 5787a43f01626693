//! The admin API: health, readiness, metrics and the node's state over HTTP, on loopback TCP by
//! default and optionally a Unix socket (mode 0600 from the moment it exists).
//!
//! Read-only calls need nothing; mutating calls (`POST /v1/drain`) need the Unix socket or the
//! bearer token from `admin.token_file`. Over TCP, a request addressed to any other authority
//! than the listener's own (DNS rebinding) is refused before any handler runs.

pub mod certs;
pub mod client;
pub mod forwards;
pub mod gateway;
mod host;

mod socket;
pub mod token;

use std::net::SocketAddr;
use std::path::PathBuf;

use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;
use tokio::sync::watch;

use crate::state::{NodeState, Phase};
use token::Token;

/// How a request reached the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Tcp,
    Unix,
}

#[derive(Clone)]
struct Api {
    node: NodeState,
    token: Option<Token>,
}

/// `/v1/status`: everything at once.
#[derive(Debug, Serialize)]
pub struct Status {
    /// The node's identity.
    pub node_id: String,
    /// Its phase.
    pub phase: Phase,
    /// Seconds since it started.
    pub uptime_secs: u64,
    /// Every module.
    pub modules: Vec<crate::state::ModuleStatus>,
    /// Every workload.
    pub workloads: Vec<crate::state::WorkloadStatus>,
    /// Every open fault.
    pub faults: Vec<holdfast_lifecycle::Fault>,
    /// The gateway, while it runs (absent without a `[gateway]` section or while it is down).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway: Option<crate::modules::gateway::GatewayStatus>,
}

fn status(node: &NodeState) -> Status {
    Status {
        node_id: node.node_id.clone(),
        phase: node.phase(),
        uptime_secs: node.started().elapsed().map_or(0, |d| d.as_secs()),
        modules: node.modules(),
        workloads: node.workloads(),
        faults: node.faults.list(),
        gateway: node.gateway.status().ok(),
    }
}

// i[impl node.admin.endpoints]
fn router(api: Api, transport: Transport) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route(
            "/v1/status",
            get(|State(api): State<Api>| async move { Json(status(&api.node)) }),
        )
        .route(
            "/v1/faults",
            get(|State(api): State<Api>| async move { Json(api.node.faults.list()) }),
        )
        .route(
            "/v1/modules",
            get(|State(api): State<Api>| async move { Json(api.node.modules()) }),
        )
        .route(
            "/v1/workloads",
            get(|State(api): State<Api>| async move { Json(api.node.workloads()) }),
        )
        .route(
            "/v1/certs",
            get(|State(api): State<Api>| async move { certs::list(&api.node) }),
        )
        .route("/v1/certs/{host}/retry", post(cert_retry))
        .route(
            "/v1/forwards",
            get(|State(api): State<Api>| async move { forwards::list(&api.node) }),
        )
        .route(
            "/v1/gateway",
            get(|State(api): State<Api>| async move { gateway::show(&api.node) }),
        )
        .route("/v1/gateway/push", post(gateway_push))
        .route("/v1/drain", post(drain))
        .layer(Extension(transport))
        .with_state(api)
}

// i[impl node.admin.readyz+2]
async fn readyz(State(api): State<Api>) -> Response {
    match api.node.phase() {
        // r[impl node.gateway.readyz]
        Phase::Running if !api.node.gateway.ready() => {
            (StatusCode::SERVICE_UNAVAILABLE, "gateway not ready\n").into_response()
        }
        Phase::Running => (StatusCode::OK, "ready\n").into_response(),
        Phase::Starting => (StatusCode::SERVICE_UNAVAILABLE, "starting\n").into_response(),
        Phase::Draining => (StatusCode::SERVICE_UNAVAILABLE, "draining\n").into_response(),
    }
}

async fn metrics(State(api): State<Api>) -> Response {
    let open = i64::try_from(api.node.faults.len()).unwrap_or(i64::MAX);
    api.node.metrics.faults_open.set(open);
    api.node.refresh_module_metrics();
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        api.node.metrics.render(),
    )
        .into_response()
}

// i[impl node.admin.mutating]
/// `None` when the call may go ahead, else the refusal to answer with.
fn refusal(api: &Api, transport: Transport, headers: &HeaderMap) -> Option<Response> {
    if transport == Transport::Unix {
        return None;
    }
    let Some(token) = &api.token else {
        return Some(
            (
                StatusCode::FORBIDDEN,
                "mutating calls need the admin Unix socket or a bearer token (admin.token_file)\n",
            )
                .into_response(),
        );
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match presented {
        Some(p) if token.matches(p) => None,
        _ => Some(
            (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "missing or wrong bearer token\n",
            )
                .into_response(),
        ),
    }
}

async fn cert_retry(
    State(api): State<Api>,
    Extension(transport): Extension<Transport>,
    Path(host): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = refusal(&api, transport, &headers) {
        return refused;
    }
    certs::retry(&api.node, &host)
}

async fn gateway_push(
    State(api): State<Api>,
    Extension(transport): Extension<Transport>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if let Some(refused) = refusal(&api, transport, &headers) {
        return refused;
    }
    gateway::push(&api.node, &body).await
}

/// `POST /v1/drain`'s optional body.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DrainBody {
    /// `"restart"` (the default) or `"shutdown"` (the node leaves for good).
    #[serde(default)]
    reason: Option<String>,
}

// r[impl node.gateway.stop-reason+2]
/// The stop reason a drain call asks for: without one it is a restart (clients are told to come
/// back), as a signal is; only `"shutdown"` says the node leaves for good.
fn drain_reason(body: &[u8]) -> Result<holdfast_lifecycle::StopReason, String> {
    use holdfast_lifecycle::StopReason;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(StopReason::Restart);
    }
    let parsed: DrainBody =
        serde_json::from_slice(body).map_err(|e| format!("invalid drain request: {e}"))?;
    match parsed.reason.as_deref() {
        None | Some("restart") => Ok(StopReason::Restart),
        Some("shutdown") => Ok(StopReason::Shutdown),
        Some(other) => Err(format!(
            "invalid drain reason {other:?}: \"restart\" or \"shutdown\""
        )),
    }
}

async fn drain(
    State(api): State<Api>,
    Extension(transport): Extension<Transport>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if let Some(refused) = refusal(&api, transport, &headers) {
        return refused;
    }
    let reason = match drain_reason(&body) {
        Ok(reason) => reason,
        Err(message) => return (StatusCode::BAD_REQUEST, message + "\n").into_response(),
    };
    tracing::info!(?reason, "drain requested through the admin API");
    api.node.request_drain(reason);
    (
        StatusCode::ACCEPTED,
        Json(serde_json::json!({"draining": true, "reason": reason})),
    )
        .into_response()
}

/// Where the admin API listens.
#[derive(Debug, Clone, Default)]
pub struct AdminConfig {
    /// TCP address (`None`: not over TCP).
    pub tcp: Option<SocketAddr>,
    /// Unix socket path.
    pub socket: Option<PathBuf>,
    /// The bearer token for mutating calls over TCP.
    pub token: Option<Token>,
}

/// The admin API could not be served.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// Binding the TCP address failed.
    #[error("admin API: cannot listen on {addr}: {source}")]
    Tcp {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Binding the Unix socket failed.
    #[error("admin API: cannot listen on {}: {source}", path.display())]
    Unix {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A node already answers on the Unix socket.
    #[error("admin API: a node is already serving on {}; stop it or choose another admin.socket", path.display())]
    SocketInUse {
        /// The path.
        path: PathBuf,
    },
    /// Something other than a socket is at the socket's path.
    #[error("admin API: {} exists and is not a socket; refusing to replace it (remove it or choose another admin.socket)", path.display())]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
}

/// The running admin API.
#[derive(Debug)]
pub struct AdminServer {
    /// The TCP address it is bound to.
    pub tcp: Option<SocketAddr>,
    /// The Unix socket.
    pub socket: Option<PathBuf>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The bound socket's (device, inode): removed on shutdown only if the path is still it.
    socket_id: Option<(u64, u64)>,
}

impl AdminServer {
    /// Stops serving: requests in flight get up to `grace` to finish, then the servers are
    /// aborted (a stalled client cannot hold the node). Removes the Unix socket if it is still
    /// the one this server bound.
    pub async fn shutdown(self, grace: std::time::Duration) {
        let _ = self.shutdown.send(true);
        let mut tasks = self.tasks;
        let finished = tokio::time::timeout(grace, async {
            for task in &mut tasks {
                let _ = task.await;
            }
        })
        .await;
        if finished.is_err() {
            tracing::warn!(
                ?grace,
                "admin API: requests still open at the stop deadline; closed"
            );
            for task in &tasks {
                task.abort();
            }
        }
        if let (Some(path), Some(id)) = (&self.socket, self.socket_id) {
            if socket::identity(path) == Some(id) {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

/// Binds and serves the admin API.
pub async fn serve(node: NodeState, config: AdminConfig) -> Result<AdminServer, AdminError> {
    let api = Api {
        node,
        token: config.token,
    };
    let (shutdown, rx) = watch::channel(false);
    let mut tasks = Vec::new();
    let mut tcp = None;
    let mut socket_id = None;
    if let Some(addr) = config.tcp {
        if !addr.ip().is_loopback() {
            tracing::warn!(%addr, "the admin API listens beyond loopback (admin.allow_non_loopback)");
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| AdminError::Tcp { addr, source })?;
        let bound = listener
            .local_addr()
            .map_err(|source| AdminError::Tcp { addr, source })?;
        tcp = Some(bound);
        let metrics = api.node.metrics.clone();
        // Only the TCP listener: a web page can reach it (DNS rebinding), never the socket.
        let app = router(api.clone(), Transport::Tcp).layer(axum::middleware::from_fn(
            move |request, next| host::guard(bound, metrics.clone(), request, next),
        ));
        let mut rx = rx.clone();
        tasks.push(tokio::spawn(async move {
            let stop = async move {
                let _ = rx.wait_for(|stop| *stop).await;
            };
            if let Err(err) = axum::serve(listener, app)
                .with_graceful_shutdown(stop)
                .await
            {
                tracing::error!(error = %err, "admin API (tcp) ended");
            }
        }));
    }
    if let Some(path) = &config.socket {
        let (listener, id) = socket::bind(path)?;
        socket_id = Some(id);
        let app = router(api, Transport::Unix);
        let mut rx = rx;
        tasks.push(tokio::spawn(async move {
            let stop = async move {
                let _ = rx.wait_for(|stop| *stop).await;
            };
            if let Err(err) = axum::serve(listener, app)
                .with_graceful_shutdown(stop)
                .await
            {
                tracing::error!(error = %err, "admin API (unix) ended");
            }
        }));
    }
    Ok(AdminServer {
        tcp,
        socket: config.socket,
        shutdown,
        tasks,
        socket_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use holdfast_lifecycle::FaultBoard;

    // i[verify node.admin.readyz+2]
    #[tokio::test]
    async fn readiness_is_503_while_starting_and_draining() {
        let node = NodeState::new("n", FaultBoard::new(), Metrics::new());
        let api = Api {
            node: node.clone(),
            token: None,
        };
        let status = |r: Response| r.status();
        assert_eq!(
            status(readyz(State(api.clone())).await),
            StatusCode::SERVICE_UNAVAILABLE
        );
        node.set_phase(Phase::Running);
        assert_eq!(status(readyz(State(api.clone())).await), StatusCode::OK);
        node.set_phase(Phase::Draining);
        assert_eq!(
            status(readyz(State(api.clone())).await),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert!(node.metrics.render().contains("holdfast_draining 1"));
    }

    // i[verify node.admin.readyz+2]
    #[tokio::test]
    async fn a_first_start_completing_after_the_stop_began_never_makes_the_node_ready() {
        let node = NodeState::new("n", FaultBoard::new(), Metrics::new());
        let api = Api {
            node: node.clone(),
            token: None,
        };
        node.set_phase(Phase::Draining);
        // The readiness task's late move to Running.
        node.set_phase(Phase::Running);
        assert_eq!(node.phase(), Phase::Draining);
        assert_eq!(
            readyz(State(api)).await.status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert!(node.metrics.render().contains("holdfast_draining 1"));
    }

    /// A `POST /v1/drain` without a body, as it arrives over `transport` with `headers`.
    async fn drain_call(api: &Api, transport: Transport, headers: HeaderMap) -> Response {
        drain(
            State(api.clone()),
            Extension(transport),
            headers,
            Default::default(),
        )
        .await
    }

    fn bearer(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, value.parse().unwrap());
        headers
    }

    /// Whether no drain was requested: one asked for would be seen at once.
    async fn no_drain_requested(node: &NodeState) -> bool {
        tokio::time::timeout(std::time::Duration::from_millis(50), node.drain_requested())
            .await
            .is_err()
    }

    // i[verify node.admin.mutating]
    #[tokio::test]
    async fn a_drain_over_tcp_without_a_configured_token_is_refused_and_changes_nothing() {
        let node = NodeState::new("n", FaultBoard::new(), Metrics::new());
        let api = Api {
            node: node.clone(),
            token: None,
        };
        let answer = drain_call(&api, Transport::Tcp, bearer("Bearer anything")).await;
        assert_eq!(answer.status(), StatusCode::FORBIDDEN);
        assert!(
            no_drain_requested(&node).await,
            "a refused call requested a drain"
        );
        let answer = drain_call(&api, Transport::Unix, HeaderMap::new()).await;
        assert_eq!(answer.status(), StatusCode::ACCEPTED);
    }

    // i[verify node.admin.mutating]
    #[tokio::test]
    async fn a_drain_over_tcp_needs_the_configured_token_itself() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "s3cret-token\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let node = NodeState::new("n", FaultBoard::new(), Metrics::new());
        let api = Api {
            node: node.clone(),
            token: Some(token::read(&file).unwrap()),
        };
        // A wrong token, a prefix of the right one, the right one without the scheme, and none.
        for headers in [
            bearer("Bearer wrong-token!"),
            bearer("Bearer s3cret"),
            bearer("s3cret-token"),
            HeaderMap::new(),
        ] {
            let answer = drain_call(&api, Transport::Tcp, headers).await;
            assert_eq!(answer.status(), StatusCode::UNAUTHORIZED);
            assert_eq!(
                answer.headers().get(header::WWW_AUTHENTICATE).unwrap(),
                "Bearer"
            );
        }
        assert!(
            no_drain_requested(&node).await,
            "a refused call requested a drain"
        );
        let answer = drain_call(&api, Transport::Tcp, bearer("Bearer s3cret-token")).await;
        assert_eq!(answer.status(), StatusCode::ACCEPTED);
    }

    // r[verify node.gateway.readyz]
    // i[verify node.admin.readyz+2]
    #[tokio::test]
    async fn with_a_gateway_the_node_is_ready_only_while_the_gateway_is() {
        use holdfast_gateway::{Gateway, GatewayConfig, MemoryRegistry, MemoryRouting, TokenKey};
        use std::sync::Arc;
        let node = NodeState::new("n", FaultBoard::new(), Metrics::new());
        let api = Api {
            node: node.clone(),
            token: None,
        };
        node.gateway.configure();
        node.set_phase(Phase::Running);
        // Configured, not running yet.
        let answer = readyz(State(api.clone())).await;
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
        let config = GatewayConfig::new(
            "127.0.0.1:0".parse().unwrap(),
            "gw",
            TokenKey::new(b"0123456789abcdef".to_vec()),
        );
        let gateway = Gateway::start(
            config,
            Arc::new(MemoryRegistry::new()),
            Arc::new(MemoryRouting::new()),
        )
        .await
        .unwrap();
        node.gateway.started(gateway.clone());
        assert_eq!(readyz(State(api.clone())).await.status(), StatusCode::OK);
        // The gateway's own drain makes it not ready: so is the node.
        gateway
            .drain(holdfast_lifecycle::StopReason::Shutdown, None)
            .await;
        assert_eq!(
            readyz(State(api.clone())).await.status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        // Without a gateway section nothing of this applies.
        let plain = NodeState::new("p", FaultBoard::new(), Metrics::new());
        plain.set_phase(Phase::Running);
        let api = Api {
            node: plain,
            token: None,
        };
        assert_eq!(readyz(State(api)).await.status(), StatusCode::OK);
    }

    /// Sends `request` raw over TCP to `addr` and returns the answer's status code (0: closed
    /// without one).
    async fn raw_status(addr: SocketAddr, request: &str) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer).await;
        let answer = String::from_utf8_lossy(&answer);
        answer
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or(0)
    }

    fn get(path: &str, host: Option<&str>) -> String {
        let host = host.map(|h| format!("Host: {h}\r\n")).unwrap_or_default();
        format!("GET {path} HTTP/1.1\r\n{host}Connection: close\r\n\r\n")
    }

    // i[verify node.admin.host]
    #[tokio::test]
    async fn a_request_for_another_host_is_refused_over_tcp_and_counted() {
        let node = NodeState::new("n", FaultBoard::new(), Metrics::new());
        let server = serve(
            node.clone(),
            AdminConfig {
                tcp: Some("127.0.0.1:0".parse().unwrap()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let addr = server.tcp.unwrap();
        let port = addr.port();
        for good in [
            format!("127.0.0.1:{port}"),
            format!("[::1]:{port}"),
            "localhost".to_owned(),
            format!("localhost:{port}"),
        ] {
            assert_eq!(
                raw_status(addr, &get("/v1/faults", Some(&good))).await,
                200,
                "{good}"
            );
        }
        let bad = [
            Some("evil.example".to_owned()),
            Some(format!("evil.example:{port}")),
            Some("127.0.0.1.evil.example".to_owned()),
            Some(format!("127.0.0.1.evil.example:{port}")),
            None,
        ];
        for host in &bad {
            assert_eq!(
                raw_status(addr, &get("/v1/faults", host.as_deref())).await,
                421,
                "{host:?}"
            );
        }
        // An absolute target names the authority, whatever Host says.
        let absolute = format!(
            "GET http://evil.example:{port}/v1/faults HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(raw_status(addr, &absolute).await, 421);
        assert!(
            node.metrics.render().contains(&format!(
                "holdfast_admin_refused_total{{reason=\"host\"}} {}",
                bad.len() + 1
            )),
            "{}",
            node.metrics.render()
        );
        server.shutdown(std::time::Duration::from_secs(1)).await;
    }

    // i[verify node.admin.host]
    #[tokio::test]
    async fn over_the_unix_socket_any_host_or_none_is_answered() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin.sock");
        let node = NodeState::new("n", FaultBoard::new(), Metrics::new());
        let server = serve(
            node,
            AdminConfig {
                socket: Some(path.clone()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        for host in [None, Some("evil.example"), Some("holdfast")] {
            let mut stream = tokio::net::UnixStream::connect(&path).await.unwrap();
            stream
                .write_all(get("/v1/faults", host).as_bytes())
                .await
                .unwrap();
            let mut answer = String::new();
            stream.read_to_string(&mut answer).await.unwrap();
            assert!(answer.starts_with("HTTP/1.1 200 "), "{host:?}: {answer}");
        }
        server.shutdown(std::time::Duration::from_secs(1)).await;
    }

    // r[verify node.gateway.stop-reason+2]
    #[tokio::test]
    async fn a_drain_call_says_whether_the_node_restarts_or_shuts_down() {
        use holdfast_lifecycle::StopReason;
        assert_eq!(drain_reason(b""), Ok(StopReason::Restart));
        assert_eq!(drain_reason(b" \n"), Ok(StopReason::Restart));
        assert_eq!(drain_reason(b"{}"), Ok(StopReason::Restart));
        assert_eq!(
            drain_reason(br#"{"reason":"shutdown"}"#),
            Ok(StopReason::Shutdown)
        );
        assert_eq!(
            drain_reason(br#"{"reason":"restart"}"#),
            Ok(StopReason::Restart)
        );
        assert!(drain_reason(br#"{"reason":"later"}"#).is_err());
        assert!(drain_reason(br#"{"restart":true}"#).is_err());
        let node = NodeState::new("n", FaultBoard::new(), Metrics::new());
        let api = Api {
            node: node.clone(),
            token: None,
        };
        let bad = drain(
            State(api.clone()),
            Extension(Transport::Unix),
            HeaderMap::new(),
            axum::body::Bytes::from_static(b"{\"reason\":\"later\"}"),
        )
        .await;
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
        let answer = drain(
            State(api),
            Extension(Transport::Unix),
            HeaderMap::new(),
            axum::body::Bytes::from_static(b"{\"reason\":\"shutdown\"}"),
        )
        .await;
        assert_eq!(answer.status(), StatusCode::ACCEPTED);
        // The reason reaches the stop (not the default, which is a restart).
        let reason =
            tokio::time::timeout(std::time::Duration::from_secs(1), node.drain_requested())
                .await
                .unwrap();
        assert_eq!(reason, StopReason::Shutdown);
    }
}
