//! The admin API: health, readiness, metrics and the node's state over HTTP, on loopback TCP by
//! default and optionally a Unix socket (mode 0600 from the moment it exists).
//!
//! Read-only calls need nothing; mutating calls (`POST /v1/drain`) and a workload's logs (which
//! may hold secrets) need the Unix socket or the bearer token from `admin.token_file`. Over TCP, a request addressed to any other authority
//! than the listener's own or one of `admin.allowed_hosts` (DNS rebinding) is refused before any
//! handler runs. Each listener
//! bounds its connections (TCP also per source address), and how long a peer may take to send
//! a request ([`AdminLimits`]).

pub mod certs;
pub mod client;
pub mod forwards;
pub mod gateway;
mod host;
pub mod logs;
mod places;
mod socket;
/// The admin token file, read by the config's high layer.
pub use crate::config::token;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;
use tokio::sync::watch;

use crate::state::{NodeState, Phase};
use token::Token;

pub use host::AllowedHost;

/// How a request reached the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Tcp,
    Unix,
}

/// The streaming answers (`holdfast logs --follow`) open on one connection: while any is, the
/// connection is exempt from its age limit.
#[derive(Debug, Clone)]
struct Streams(std::sync::Arc<watch::Sender<usize>>);

impl Streams {
    fn new() -> Self {
        Self(std::sync::Arc::new(watch::Sender::new(0)))
    }

    /// Counts one open until the returned guard is dropped.
    fn hold(&self) -> StreamHeld {
        self.0.send_modify(|open| *open += 1);
        StreamHeld(self.clone())
    }

    /// Returns once none is open.
    async fn idle(&self) {
        let mut open = self.0.subscribe();
        let _ = open.wait_for(|open| *open == 0).await;
    }
}

/// One streaming answer open (see [`Streams`]).
struct StreamHeld(Streams);

impl Drop for StreamHeld {
    fn drop(&mut self) {
        self.0.0.send_modify(|open| *open = open.saturating_sub(1));
    }
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
    /// The running config: its generation and when it was loaded.
    pub config: crate::reload::Generation,
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
        config: node.config_generation(),
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
        .route("/v1/workloads/{name}/logs", get(logs::logs))
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
        .route("/v1/publish", post(publish))
        .route("/v1/drain", post(drain))
        .route("/v1/reload", post(reload))
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

/// `POST /v1/publish`: not an admin-token call; the gateway's publish key decides.
async fn publish(
    State(api): State<Api>,
    Extension(transport): Extension<Transport>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    gateway::publish(&api.node, transport == Transport::Unix, &headers, &body).await
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

// i[impl node.admin.reload]
/// `POST /v1/reload`: runs one reload and answers its outcome.
async fn reload(
    State(api): State<Api>,
    Extension(transport): Extension<Transport>,
    headers: HeaderMap,
) -> Response {
    use crate::reload::ReloadError;
    if let Some(refused) = refusal(&api, transport, &headers) {
        return refused;
    }
    tracing::info!("reload requested through the admin API");
    match api.node.request_reload().await {
        Ok(applied) => (StatusCode::OK, Json(applied)).into_response(),
        Err(err) => {
            let status = match err {
                ReloadError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
                ReloadError::Stopping | ReloadError::Unavailable => StatusCode::CONFLICT,
                ReloadError::Busy => StatusCode::TOO_MANY_REQUESTS,
            };
            (
                status,
                Json(serde_json::json!({ "error": err.to_string() })),
            )
                .into_response()
        }
    }
}

/// Default [`AdminLimits::header_read_timeout`]: a local client sends its request head at once.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default [`AdminLimits::request_timeout`].
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
// i[impl node.admin.reload]
/// How long `POST /v1/reload` may take to answer (instead of [`REQUEST_TIMEOUT`]): a reload's
/// stops keep to `node.stop_budget`, which may be long; past this the file's read is stuck.
pub const RELOAD_REQUEST_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// Default [`AdminLimits::max_tcp_connections`]: far above what the CLI and a scraper use, and
/// room for several sources each at [`MAX_CONNECTIONS_PER_SOURCE`].
pub const MAX_TCP_CONNECTIONS: usize = 256;
/// Default [`AdminLimits::max_connections_per_source`]: far above what one CLI or scraper uses.
pub const MAX_CONNECTIONS_PER_SOURCE: usize = 16;
/// Default [`AdminLimits::max_socket_connections`].
pub const MAX_SOCKET_CONNECTIONS: usize = 64;
/// Default [`AdminLimits::max_connection_age`].
pub const MAX_CONNECTION_AGE: Duration = Duration::from_secs(60);
// i[impl node.admin.head-size]
/// The request head a connection may send (hyper's smallest buffer bound; its default is about
/// 400 KiB, which 256 connections would turn into 100 MiB held by the node).
pub const MAX_REQUEST_HEAD_BYTES: usize = 8192;

// i[impl node.admin.limits+2]
/// What one peer of the admin API can hold, per listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdminLimits {
    /// How long a connection may take to send a whole request head, counted from its start or
    /// from its previous answer (so this is also the keep-alive idle timeout); then it is
    /// closed.
    pub header_read_timeout: Duration,
    /// How long one request may take from its head to its answer, its body included; then it
    /// is answered 408 and the connection closed.
    pub request_timeout: Duration,
    /// Connections open at once on the TCP listener; one more is closed at once. The Unix
    /// socket has its own ([`max_socket_connections`](Self::max_socket_connections)), so a
    /// flood on the TCP port never locks the operator out of the socket.
    pub max_tcp_connections: usize,
    /// Connections open at once on the TCP listener from one source address (an IPv4-mapped
    /// IPv6 address counts as its IPv4 address, an IPv6 address by its /64); one more is closed
    /// at once, so a few sources cannot take every place.
    pub max_connections_per_source: usize,
    /// Connections open at once on the Unix socket (whose peers have no address to count
    /// per source); one more is closed at once.
    pub max_socket_connections: usize,
    /// A connection older than this is closed once its current request is answered, and
    /// dropped [`request_timeout`](Self::request_timeout) later if that answer is never read.
    pub max_connection_age: Duration,
}

impl Default for AdminLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: HEADER_READ_TIMEOUT,
            request_timeout: REQUEST_TIMEOUT,
            max_tcp_connections: MAX_TCP_CONNECTIONS,
            max_connections_per_source: MAX_CONNECTIONS_PER_SOURCE,
            max_socket_connections: MAX_SOCKET_CONNECTIONS,
            max_connection_age: MAX_CONNECTION_AGE,
        }
    }
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
    /// Each listener's limits.
    pub limits: AdminLimits,
    /// Names and addresses the TCP listener answers for besides its own (`admin.allowed_hosts`).
    pub allowed_hosts: Vec<AllowedHost>,
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

// i[impl node.admin.limits+2]
/// Serves `app` on `listener` within `limits` and the connection caps of `places` until `stop`
/// turns true; then stops accepting, lets each open connection finish its current request, and
/// returns when all have closed.
async fn serve_listener<L>(
    mut listener: L,
    app: Router,
    limits: AdminLimits,
    places: places::Places,
    metrics: crate::metrics::Metrics,
    mut stop: watch::Receiver<bool>,
) where
    L: axum::serve::Listener,
    L::Addr: places::PeerSource,
{
    use places::PeerSource;
    let request_timeout = limits.request_timeout;
    let timeouts = metrics.clone();
    // Past the time, 408: a body that never comes (or a handler that hangs) frees its
    // connection.
    let app = app.layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            let metrics = timeouts.clone();
            // A reload may drain the gateway for up to the stop budget: its own bound.
            let limit = if request.uri().path() == "/v1/reload" {
                request_timeout.max(RELOAD_REQUEST_TIMEOUT)
            } else {
                request_timeout
            };
            async move {
                match tokio::time::timeout(limit, next.run(request)).await {
                    Ok(response) => response,
                    Err(_) => {
                        metrics.admin_refusal("request_timeout");
                        (
                            StatusCode::REQUEST_TIMEOUT,
                            [(header::CONNECTION, "close")],
                            "request not complete in time\n",
                        )
                            .into_response()
                    }
                }
            }
        },
    ));
    let places = std::sync::Arc::new(std::sync::Mutex::new(places));
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let (io, peer) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stopped(&mut stop) => break,
            // Reap finished connections as they end, so the set stays as large as what is open.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let place = match places::take(&places, peer.source()) {
            Ok(place) => place,
            Err(refused) => {
                // Closed at once: the peer learns it, and nothing of it is held.
                metrics.admin_refusal(refused.reason());
                drop(io);
                continue;
            }
        };
        let streams = Streams::new();
        let service = {
            let service = hyper_util::service::TowerToHyperService::new(app.clone());
            let streams = streams.clone();
            hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(streams.clone());
                hyper::service::Service::call(&service, request)
            })
        };
        let metrics = metrics.clone();
        let mut stop = stop.clone();
        connections.spawn(async move {
            // Given back when the connection ends, however it ends (an abort included).
            let _place = place;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                .max_buf_size(MAX_REQUEST_HEAD_BYTES);
            let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(io), service);
            tokio::pin!(conn);
            let too_old = tokio::time::sleep(limits.max_connection_age);
            tokio::pin!(too_old);
            let result = tokio::select! {
                result = conn.as_mut() => result,
                () = stopped(&mut stop) => {
                    // The server's own shutdown bounds this (its grace, then an abort).
                    conn.as_mut().graceful_shutdown();
                    conn.as_mut().await
                }
                _ = &mut too_old => {
                    // i[impl node.workloads.logs+2]
                    // A followed log is not cut by the age: the connection closes once none
                    // is open on it.
                    let idle = streams.idle();
                    tokio::pin!(idle);
                    let ended = tokio::select! {
                        result = conn.as_mut() => Some(result),
                        () = &mut idle => None,
                    };
                    match ended {
                        Some(result) => result,
                        None => {
                            conn.as_mut().graceful_shutdown();
                            tokio::time::timeout(limits.request_timeout, conn.as_mut())
                                .await
                                .unwrap_or(Ok(()))
                        }
                    }
                }
            };
            if let Err(err) = result {
                if err.is_timeout() {
                    metrics.admin_refusal("header_timeout");
                }
                tracing::debug!(error = %err, "admin API connection ended");
            }
        });
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

/// Returns once `stop` is true (or its sender is gone), holding nothing across the wait.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
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
        let check = std::sync::Arc::new(host::HostCheck::new(bound, config.allowed_hosts));
        let app = router(api.clone(), Transport::Tcp).layer(axum::middleware::from_fn(
            move |request, next| host::guard(check.clone(), metrics.clone(), request, next),
        ));
        let (metrics, limits) = (api.node.metrics.clone(), config.limits);
        let places = places::Places::new(
            limits.max_tcp_connections,
            Some(limits.max_connections_per_source),
        );
        tasks.push(tokio::spawn(serve_listener(
            listener,
            app,
            limits,
            places,
            metrics,
            rx.clone(),
        )));
    }
    if let Some(path) = &config.socket {
        let (listener, id) = socket::bind(path)?;
        socket_id = Some(id);
        let metrics = api.node.metrics.clone();
        let app = router(api, Transport::Unix);
        // Its peers have no address: only its own overall cap.
        let places = places::Places::new(config.limits.max_socket_connections, None);
        tasks.push(tokio::spawn(serve_listener(
            listener,
            app,
            config.limits,
            places,
            metrics,
            rx,
        )));
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

    // i[verify node.admin.reload]
    // i[verify node.admin.mutating]
    #[tokio::test]
    async fn a_reload_call_is_mutating_and_answers_the_reloads_outcome() {
        use crate::reload::{Applied, Generation, ReloadError};
        let node = NodeState::new("n", FaultBoard::new(), Metrics::new());
        let api = Api {
            node: node.clone(),
            token: None,
        };
        let call = |transport, headers| reload(State(api.clone()), Extension(transport), headers);
        // Over TCP without a configured token: refused, and no reload was asked for.
        let mut asks = node.take_reloads();
        let answer = call(Transport::Tcp, bearer("Bearer anything")).await;
        assert_eq!(answer.status(), StatusCode::FORBIDDEN);
        assert!(
            asks.try_recv().is_err(),
            "a refused call asked for a reload"
        );

        // Over the socket: the reload loop's answer, one ask after the other in order.
        let answers = tokio::spawn(async move {
            let mut seen = 0;
            while let Some(reply) = asks.recv().await {
                seen += 1;
                let outcome = match seen {
                    1 => Ok(Applied {
                        generation: Generation {
                            generation: 2,
                            loaded_at: std::time::SystemTime::UNIX_EPOCH,
                        },
                        modules: [("pull".to_owned(), crate::reload::Change::Unchanged)].into(),
                        needs_restart: vec![],
                        took_ms: 3,
                        failed: Default::default(),
                    }),
                    2 => Err(ReloadError::Invalid(
                        "f.toml:3:1: pull.enabeld: unknown".into(),
                    )),
                    _ => Err(ReloadError::Stopping),
                };
                let _ = reply.send(outcome);
            }
        });
        let answer = call(Transport::Unix, HeaderMap::new()).await;
        assert_eq!(answer.status(), StatusCode::OK);
        let body = axum::body::to_bytes(answer.into_body(), 4096)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"generation": 2, "loaded_at": "1970-01-01T00:00:00Z",
                "modules": {"pull": "unchanged"}, "needs_restart": [], "took_ms": 3,
                "failed": {}})
        );
        let answer = call(Transport::Unix, HeaderMap::new()).await;
        assert_eq!(answer.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let body = axum::body::to_bytes(answer.into_body(), 4096)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"], "f.toml:3:1: pull.enabeld: unknown");
        let answer = call(Transport::Unix, HeaderMap::new()).await;
        assert_eq!(answer.status(), StatusCode::CONFLICT);
        answers.abort();
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

    // i[verify node.admin.host+2]
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

    // i[verify node.admin.host+2]
    #[tokio::test]
    async fn a_name_in_allowed_hosts_is_answered_and_another_name_still_refused() {
        let node = NodeState::new("n", FaultBoard::new(), Metrics::new());
        let server = serve(
            node.clone(),
            AdminConfig {
                tcp: Some("127.0.0.1:0".parse().unwrap()),
                allowed_hosts: vec![AllowedHost::parse("Metrics.Internal").unwrap()],
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let addr = server.tcp.unwrap();
        let port = addr.port();
        for good in [
            "metrics.internal".to_owned(),
            format!("METRICS.internal:{port}"),
        ] {
            for path in ["/metrics", "/readyz", "/v1/faults"] {
                let status = raw_status(addr, &get(path, Some(&good))).await;
                // /readyz: 503 while the node starts, but answered, not misdirected.
                assert!(status == 200 || status == 503, "{good}{path}: {status}");
            }
        }
        for bad in [
            "other.internal".to_owned(),
            format!("metrics.internal.evil.example:{port}"),
            format!("metrics.internal:{}", port.wrapping_add(1)),
        ] {
            assert_eq!(
                raw_status(addr, &get("/metrics", Some(&bad))).await,
                421,
                "{bad}"
            );
        }
        assert!(
            node.metrics
                .render()
                .contains("holdfast_admin_refused_total{reason=\"host\"} 3"),
            "{}",
            node.metrics.render()
        );
        server.shutdown(std::time::Duration::from_secs(1)).await;
    }

    // i[verify node.admin.host+2]
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

    async fn serve_tcp(node: &NodeState, limits: AdminLimits) -> (AdminServer, SocketAddr) {
        let server = serve(
            node.clone(),
            AdminConfig {
                tcp: Some("127.0.0.1:0".parse().unwrap()),
                limits,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let addr = server.tcp.unwrap();
        (server, addr)
    }

    /// Reads until the peer closes (`Some(what it sent)`), or `None` if it is still open after
    /// `within`.
    async fn closed_within(stream: &mut tokio::net::TcpStream, within: Duration) -> Option<String> {
        use tokio::io::AsyncReadExt;
        let mut answer = Vec::new();
        match tokio::time::timeout(within, stream.read_to_end(&mut answer)).await {
            Ok(_) => Some(String::from_utf8_lossy(&answer).into_owned()),
            Err(_) => None,
        }
    }

    // i[verify node.admin.limits+2]
    #[tokio::test(start_paused = true)]
    async fn a_stalled_request_head_or_an_idle_connection_is_closed_at_the_header_timeout() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        use tokio::time::Instant;
        let node = NodeState::new("n", FaultBoard::new(), Metrics::new());
        let (server, addr) = serve_tcp(&node, AdminLimits::default()).await;
        // Slowloris: half a request line, then nothing.
        let began = Instant::now();
        let mut half = tokio::net::TcpStream::connect(addr).await.unwrap();
        half.write_all(b"GET /heal").await.unwrap();
        let answer = closed_within(&mut half, HEADER_READ_TIMEOUT * 3).await;
        assert!(
            answer.is_some(),
            "a stalled request head held its connection"
        );
        assert!(!answer.unwrap().contains(" 200 "));
        assert!(
            began.elapsed() >= HEADER_READ_TIMEOUT,
            "{:?}",
            began.elapsed()
        );
        // Keep-alive: answered, then idle, then closed.
        let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
        idle.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut answer = Vec::new();
        while !answer.ends_with(b"ok\n") {
            let mut chunk = [0; 512];
            let n = idle.read(&mut chunk).await.unwrap();
            assert_ne!(n, 0, "closed before answering");
            answer.extend_from_slice(&chunk[..n]);
        }
        let answered = Instant::now();
        assert_eq!(
            closed_within(&mut idle, HEADER_READ_TIMEOUT * 3)
                .await
                .as_deref(),
            Some(""),
            "an idle keep-alive connection stayed open"
        );
        assert!(answered.elapsed() >= HEADER_READ_TIMEOUT);
        assert!(
            node.metrics
                .render()
                .contains("holdfast_admin_refused_total{reason=\"header_timeout\"} 2"),
            "{}",
            node.metrics.render()
        );
        server.shutdown(Duration::from_secs(1)).await;
    }

    // i[verify node.admin.limits+2]
    #[tokio::test(start_paused = true)]
    async fn a_request_whose_body_never_comes_is_answered_408_at_the_request_timeout() {
        use tokio::io::AsyncWriteExt;
        use tokio::time::Instant;
        let node = NodeState::new("n", FaultBoard::new(), Metrics::new());
        let (server, addr) = serve_tcp(&node, AdminLimits::default()).await;
        let began = Instant::now();
        let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
        slow.write_all(
            format!("POST /v1/drain HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 100\r\n\r\n{{")
                .as_bytes(),
        )
        .await
        .unwrap();
        let answer = closed_within(&mut slow, REQUEST_TIMEOUT * 3).await;
        let answer = answer.expect("a request whose body never came held its connection");
        assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
        assert!(began.elapsed() >= REQUEST_TIMEOUT);
        assert!(no_drain_requested(&node).await);
        assert!(
            node.metrics
                .render()
                .contains("holdfast_admin_refused_total{reason=\"request_timeout\"} 1")
        );
        server.shutdown(Duration::from_secs(1)).await;
    }

    // i[verify node.admin.reload]
    // i[verify node.admin.limits+2]
    #[tokio::test(start_paused = true)]
    async fn a_reload_longer_than_the_request_timeout_is_answered_its_outcome() {
        use crate::reload::{Applied, Generation};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let node = NodeState::new("n", FaultBoard::new(), Metrics::new());
        let mut asks = node.take_reloads();
        // A reload that drains a gateway for three request timeouts, then applies.
        tokio::spawn(async move {
            while let Some(reply) = asks.recv().await {
                tokio::time::sleep(REQUEST_TIMEOUT * 3).await;
                let _ = reply.send(Ok(Applied {
                    generation: Generation {
                        generation: 2,
                        loaded_at: std::time::SystemTime::UNIX_EPOCH,
                    },
                    modules: Default::default(),
                    needs_restart: vec![],
                    took_ms: 30_000,
                    failed: Default::default(),
                }));
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("admin.sock");
        let server = serve(
            node.clone(),
            AdminConfig {
                socket: Some(socket.clone()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let mut stream = tokio::net::UnixStream::connect(&socket).await.unwrap();
        stream
            .write_all(
                b"POST /v1/reload HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            )
            .await
            .unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(REQUEST_TIMEOUT * 10, stream.read_to_end(&mut answer))
            .await
            .unwrap()
            .unwrap();
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
        server.shutdown(Duration::from_secs(1)).await;
    }

    // i[verify node.admin.limits+2]
    #[tokio::test(start_paused = true)]
    async fn a_busy_keep_alive_connection_is_closed_at_its_maximum_age() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        use tokio::time::Instant;
        let node = NodeState::new("n", FaultBoard::new(), Metrics::new());
        let (server, addr) = serve_tcp(&node, AdminLimits::default()).await;
        let began = Instant::now();
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\n\r\n");
        // A request every half header timeout: never idle long enough to be closed for that.
        let mut answered = 0;
        'open: loop {
            if conn.write_all(request.as_bytes()).await.is_err() {
                break;
            }
            let mut answer = Vec::new();
            while !answer.ends_with(b"ok\n") {
                let mut chunk = [0; 512];
                match conn.read(&mut chunk).await {
                    Ok(0) | Err(_) => break 'open,
                    Ok(n) => answer.extend_from_slice(&chunk[..n]),
                }
            }
            answered += 1;
            assert!(began.elapsed() < MAX_CONNECTION_AGE * 2, "never closed");
            tokio::time::sleep(HEADER_READ_TIMEOUT / 2).await;
        }
        let lived = began.elapsed();
        assert!(lived >= MAX_CONNECTION_AGE, "closed after {lived:?}");
        assert!(
            lived <= MAX_CONNECTION_AGE + HEADER_READ_TIMEOUT,
            "closed after {lived:?}"
        );
        assert!(answered >= 10, "{answered}");
        server.shutdown(Duration::from_secs(1)).await;
    }

    // i[verify node.admin.head-size]
    #[tokio::test]
    async fn a_request_head_past_8_kib_is_answered_431_and_closed_and_the_next_is_served() {
        use tokio::io::AsyncWriteExt;
        let node = NodeState::new("n", FaultBoard::new(), Metrics::new());
        let (_server, addr) = serve_tcp(&node, AdminLimits::default()).await;
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let long = "a".repeat(MAX_REQUEST_HEAD_BYTES + 1024);
        let head = format!("GET /v1/status HTTP/1.1\r\nHost: {addr}\r\nX-Long: {long}\r\n\r\n");
        // The node may close before it has read it all: a failed write is a close too.
        let _ = s.write_all(head.as_bytes()).await;
        let answer = closed_within(&mut s, Duration::from_secs(5)).await;
        let answer = answer.expect("still open after an oversized head");
        assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
        assert_eq!(
            raw_status(addr, &get("/v1/status", Some(&addr.to_string()))).await,
            200
        );
    }

    // i[verify node.admin.limits+2]
    #[tokio::test]
    async fn past_the_connection_cap_a_connection_is_closed_at_once_and_the_others_are_served() {
        use tokio::io::AsyncWriteExt;
        let node = NodeState::new("n", FaultBoard::new(), Metrics::new());
        let limits = AdminLimits {
            max_tcp_connections: 2,
            ..Default::default()
        };
        let (server, addr) = serve_tcp(&node, limits).await;
        let mut first = tokio::net::TcpStream::connect(addr).await.unwrap();
        let second = tokio::net::TcpStream::connect(addr).await.unwrap();
        // Accepted after the two (one queue): past the cap, closed without an answer.
        let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert_eq!(
            closed_within(&mut third, Duration::from_secs(5))
                .await
                .as_deref(),
            Some(""),
            "a connection past the cap was kept"
        );
        // The two within the cap are still served.
        first
            .write_all(get("/healthz", Some(&addr.to_string())).as_bytes())
            .await
            .unwrap();
        let answer = closed_within(&mut first, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
        drop(second);
        // Both gone, the listener serves again (once it has seen them close).
        let mut served = false;
        for _ in 0..100 {
            if raw_status(addr, &get("/healthz", Some(&addr.to_string()))).await == 200 {
                served = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(served, "the cap was never released");
        assert!(
            node.metrics
                .render()
                .contains("holdfast_admin_refused_total{reason=\"connection_limit\"}")
        );
        server.shutdown(Duration::from_secs(1)).await;
    }

    /// A TCP connection to `addr` from the loopback address `from` (Linux routes all of 127/8 to
    /// `lo`, so any of them can be a distinct source).
    async fn connect_from(from: std::net::Ipv4Addr, addr: SocketAddr) -> tokio::net::TcpStream {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::from((from, 0))).unwrap();
        socket.connect(addr).await.unwrap()
    }

    // i[verify node.admin.limits+2]
    #[tokio::test]
    async fn past_the_per_source_cap_a_connection_is_closed_at_once_and_other_sources_are_served() {
        use std::net::Ipv4Addr;
        use tokio::io::AsyncWriteExt;
        let node = NodeState::new("n", FaultBoard::new(), Metrics::new());
        let (server, addr) = serve_tcp(&node, AdminLimits::default()).await;
        let flooder = Ipv4Addr::new(127, 0, 0, 2);
        let mut held = Vec::new();
        for _ in 0..MAX_CONNECTIONS_PER_SOURCE {
            held.push(connect_from(flooder, addr).await);
        }
        // One more from the same source: closed without an answer.
        let mut extra = connect_from(flooder, addr).await;
        assert_eq!(
            closed_within(&mut extra, Duration::from_secs(5))
                .await
                .as_deref(),
            Some(""),
            "a connection past the per-source cap was kept"
        );
        // Another source is answered while the flooder holds all it may.
        let request = get("/healthz", Some(&addr.to_string()));
        let mut other = connect_from(Ipv4Addr::LOCALHOST, addr).await;
        other.write_all(request.as_bytes()).await.unwrap();
        let answer = closed_within(&mut other, Duration::from_secs(5))
            .await
            .expect("another source was not answered");
        assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
        // The flooder's own connections within its cap are still served.
        let mut first = held.swap_remove(0);
        first.write_all(request.as_bytes()).await.unwrap();
        let answer = closed_within(&mut first, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
        assert!(
            node.metrics
                .render()
                .contains("holdfast_admin_refused_total{reason=\"per_source_limit\"} 1"),
            "{}",
            node.metrics.render()
        );
        drop(held);
        server.shutdown(Duration::from_secs(1)).await;
    }

    // i[verify node.admin.limits+2]
    #[tokio::test]
    async fn a_slowloris_flood_from_a_few_sources_does_not_lock_out_another() {
        use std::net::Ipv4Addr;
        let node = NodeState::new("n", FaultBoard::new(), Metrics::new());
        let (server, addr) = serve_tcp(&node, AdminLimits::default()).await;
        // 8 sources (127.0.0.2..=127.0.0.9), each opening more than its cap and sending nothing.
        let mut flood = Vec::new();
        for last in 2..=9 {
            for _ in 0..20 {
                flood.push(connect_from(Ipv4Addr::new(127, 0, 0, last), addr).await);
            }
        }
        // Well within the header timeout: the flood still holds every place it was given.
        assert_eq!(
            raw_status(addr, &get("/healthz", Some(&addr.to_string()))).await,
            200,
            "a flood from 8 sources locked out 127.0.0.1"
        );
        // Each source's 4 past its cap were closed (accepted, in order, before that request).
        assert!(
            node.metrics
                .render()
                .contains("holdfast_admin_refused_total{reason=\"per_source_limit\"} 32"),
            "{}",
            node.metrics.render()
        );
        drop(flood);
        server.shutdown(Duration::from_secs(1)).await;
    }

    // i[verify node.admin.limits+2]
    #[tokio::test]
    async fn the_unix_socket_has_no_per_source_cap_only_its_own_overall_one() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin.sock");
        let node = NodeState::new("n", FaultBoard::new(), Metrics::new());
        let limits = AdminLimits {
            max_socket_connections: MAX_CONNECTIONS_PER_SOURCE + 2,
            ..Default::default()
        };
        let server = serve(
            node.clone(),
            AdminConfig {
                socket: Some(path.clone()),
                limits,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        // More than one TCP source may hold, all from this one process.
        let mut held = Vec::new();
        for _ in 0..=MAX_CONNECTIONS_PER_SOURCE {
            held.push(tokio::net::UnixStream::connect(&path).await.unwrap());
        }
        let mut last = tokio::net::UnixStream::connect(&path).await.unwrap();
        last.write_all(get("/healthz", None).as_bytes())
            .await
            .unwrap();
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(5), last.read_to_string(&mut answer))
            .await
            .unwrap()
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
        // One more held: the cap is reached whether or not the answered one has been seen
        // closed yet. One more then is closed at once.
        held.push(tokio::net::UnixStream::connect(&path).await.unwrap());
        let mut extra = tokio::net::UnixStream::connect(&path).await.unwrap();
        let mut rest = Vec::new();
        let closed =
            tokio::time::timeout(Duration::from_secs(5), extra.read_to_end(&mut rest)).await;
        assert!(
            matches!(closed, Ok(Ok(0))),
            "a connection past the cap was kept"
        );
        let metrics = node.metrics.render();
        assert!(
            metrics.contains("holdfast_admin_refused_total{reason=\"connection_limit\"}"),
            "{metrics}"
        );
        assert!(!metrics.contains("per_source_limit"), "{metrics}");
        drop(held);
        server.shutdown(Duration::from_secs(1)).await;
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
