//! The service registry in etcd (cargo feature `etcd`).
//!
//! A replica is the key `{prefix}/replicas/{id}`, its value the JSON [`Replica`], attached to a
//! lease with the configured TTL. A task keeps the lease alive (at a third of the TTL); its
//! failures are classified and paced by holdfast-retry, and a lease that is lost (expired in an
//! outage, or unknown to the server) is replaced by registering again. Deregistration stops the
//! task and revokes the lease, which deletes the key at once.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetOptions, PutOptions};
use holdfast_lifecycle::BoxFuture;
use holdfast_retry::{Class, Classify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::cluster::{RegistryStats, Replica, ServiceRegistry};
use crate::error::ClusterError;
use crate::sync::lock;

/// Where the etcd registry is, and how it keeps its lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// Client URLs (`http://host:port`).
    pub endpoints: Vec<String>,
    /// Key prefix; replicas are `{prefix}/replicas/{id}`.
    pub prefix: String,
    /// The lease's time to live (whole seconds, at least 1 s; etcd may raise it to its minimum).
    pub lease_ttl: Duration,
    /// The bound on every etcd call.
    pub timeout: Duration,
    /// The keep-alive loop's jitter seed (from the replica's identity).
    pub seed: u64,
}

// r[impl gateway.cluster.ready]
/// Until when the registry may believe it holds its lease: one TTL after the server last
/// confirmed it. A deadline, not a flag, so readiness ends at the TTL even while the keeper waits
/// on its back-off or on a call that does not answer.
#[derive(Default)]
struct Liveness {
    until: Mutex<Option<Instant>>,
}

impl Liveness {
    /// The server confirmed the lease in answer to a request sent at `sent`: it renewed the lease
    /// no earlier than that, so the lease lives at least until `sent + ttl`.
    fn confirmed(&self, sent: Instant, ttl: Duration) {
        *lock(&self.until) = Some(sent + ttl);
    }

    /// The lease is gone (lost, revoked, or never granted).
    fn clear(&self) {
        *lock(&self.until) = None;
    }

    /// Whether a TTL has not yet passed since the last confirmation.
    fn is_live(&self, now: Instant) -> bool {
        lock(&self.until).is_some_and(|until| now < until)
    }
}

#[derive(Default)]
struct State {
    lease: Mutex<Option<i64>>,
    live: Liveness,
    closed: AtomicBool,
    keeper: Mutex<Option<JoinHandle<()>>>,
    registrations: AtomicU64,
    keepalive_transient: AtomicU64,
    keepalive_persistent: AtomicU64,
    leases_lost: AtomicU64,
}

/// The etcd service registry. Cheap to clone (clones share the lease).
#[derive(Clone)]
pub struct EtcdRegistry {
    client: Client,
    config: EtcdConfig,
    state: Arc<State>,
}

impl std::fmt::Debug for EtcdRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdRegistry")
            .field("endpoints", &self.config.endpoints)
            .field("prefix", &self.config.prefix)
            .field("lease", &self.lease_id())
            .finish_non_exhaustive()
    }
}

impl EtcdRegistry {
    /// A registry on `config.endpoints`. The channel connects lazily: an etcd that is down now
    /// fails the first registration (which the gateway retries), not this call.
    pub async fn connect(config: EtcdConfig) -> Result<Self, ClusterError> {
        let options = ConnectOptions::new()
            .with_connect_timeout(config.timeout)
            .with_timeout(config.timeout);
        let client = tokio::time::timeout(
            config.timeout,
            Client::connect(config.endpoints.clone(), Some(options)),
        )
        .await
        .map_err(|_| ClusterError::Unavailable("etcd: connect timed out".into()))?
        .map_err(|e| classified(&e))?;
        Ok(Self {
            client,
            config,
            state: Arc::new(State::default()),
        })
    }

    /// The key a replica is registered under.
    pub fn key(&self, replica_id: &str) -> String {
        format!(
            "{}/replicas/{}",
            self.config.prefix.trim_end_matches('/'),
            replica_id
        )
    }

    /// The lease currently held, if any.
    pub fn lease_id(&self) -> Option<i64> {
        *lock(&self.state.lease)
    }

    /// The lease's counters.
    pub fn lease_stats(&self) -> RegistryStats {
        let s = &self.state;
        RegistryStats {
            registrations: s.registrations.load(Ordering::Relaxed),
            keepalive_transient: s.keepalive_transient.load(Ordering::Relaxed),
            keepalive_persistent: s.keepalive_persistent.load(Ordering::Relaxed),
            leases_lost: s.leases_lost.load(Ordering::Relaxed),
        }
    }

    fn ttl_secs(&self) -> i64 {
        i64::try_from(self.config.lease_ttl.as_secs().max(1)).unwrap_or(i64::MAX)
    }

    async fn bounded<T>(
        &self,
        what: &str,
        call: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, ClusterError> {
        match tokio::time::timeout(self.config.timeout, call).await {
            Ok(r) => r.map_err(|e| classified(&e)),
            Err(_) => Err(ClusterError::Unavailable(format!("etcd: {what} timed out"))),
        }
    }

    // r[impl gateway.cluster.lease]
    /// Grants a lease and puts the replica's key on it.
    async fn grant_and_put(&self, replica: &Replica) -> Result<(), ClusterError> {
        let value = serde_json::to_string(replica)
            .map_err(|e| ClusterError::Config(format!("replica: {e}")))?;
        let mut leases = self.client.lease_client();
        let sent = Instant::now();
        let granted = self
            .bounded("lease grant", leases.grant(self.ttl_secs(), None))
            .await?;
        let id = granted.id();
        let mut kv = self.client.kv_client();
        let put = kv.put(
            self.key(&replica.id),
            value,
            Some(PutOptions::new().with_lease(id)),
        );
        // The lease is the replica's only once its key is on it: a lease whose put failed holds
        // nothing, and keeping it alive would make a replica ready that the registry does not
        // list. Left alone, it expires within one TTL.
        self.bounded("put", put).await?;
        *lock(&self.state.lease) = Some(id);
        self.state
            .live
            .confirmed(sent, self.config.lease_ttl.max(Duration::from_secs(1)));
        self.state.registrations.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// How a keep-alive session ended.
enum SessionEnd {
    /// The server no longer knows the lease: register again.
    Lost,
    /// etcd failed or did not answer.
    Failed(ClusterError),
}

// r[impl gateway.cluster.keepalive+2]
/// Keeps the lease alive until deregistration; re-registers when it is lost. Never ends on an
/// outage.
async fn keeper(registry: EtcdRegistry, replica: Replica) {
    let state = &registry.state;
    let ttl = registry.config.lease_ttl.max(Duration::from_secs(1));
    let mut backoff = Backoff::new("keep-alive", registry.config.seed);
    loop {
        let token = backoff.ready().await;
        if state.closed.load(Ordering::SeqCst) {
            backoff.succeed(token);
            return;
        }
        // A lease kept through an outage is tried again even past its TTL: the server says
        // whether it still knows it, and one it no longer knows is counted as lost below.
        let lease = *lock(&state.lease);
        let lease = match lease {
            Some(id) => id,
            None => {
                state.live.clear();
                match registry.grant_and_put(&replica).await {
                    Ok(()) => {
                        backoff.succeed(token);
                        tracing::info!(replica = %replica.id, "re-registered in etcd with a new lease");
                    }
                    Err(e) => {
                        backoff.fail(token);
                        count(state, &e);
                        tracing::warn!(replica = %replica.id, error = %e, "etcd re-registration failed; retrying");
                    }
                }
                continue;
            }
        };
        match session(&registry, lease, ttl, &mut backoff, token).await {
            SessionEnd::Lost => {
                state.live.clear();
                state.leases_lost.fetch_add(1, Ordering::Relaxed);
                *lock(&state.lease) = None;
                tracing::warn!(replica = %replica.id, lease, "etcd lease lost; registering again");
            }
            SessionEnd::Failed(e) => {
                // Readiness lasts until the last confirmation's TTL has passed (the deadline in
                // `state.live`), not until the next failure is seen.
                count(state, &e);
                tracing::warn!(replica = %replica.id, error = %e, failures = backoff.failures(), "etcd keep-alive failed; retrying");
            }
        }
    }
}

/// One keep-alive stream: opened (the attempt `token`), then refreshed every third of the TTL
/// until it fails.
async fn session(
    registry: &EtcdRegistry,
    lease: i64,
    ttl: Duration,
    backoff: &mut Backoff,
    token: holdfast_retry::AttemptToken<String>,
) -> SessionEnd {
    let mut leases = registry.client.lease_client();
    let sent = Instant::now();
    let opened = tokio::time::timeout(registry.config.timeout, leases.keep_alive(lease)).await;
    let (mut keeper, mut stream) = match opened {
        Ok(Ok(pair)) => pair,
        Ok(Err(etcd_client::Error::LeaseKeepAliveError(_))) => {
            // "lease not found": the lease expired while etcd was out of reach.
            backoff.succeed(token);
            return SessionEnd::Lost;
        }
        Ok(Err(e)) => {
            backoff.fail(token);
            return SessionEnd::Failed(classified(&e));
        }
        Err(_) => {
            backoff.fail(token);
            return SessionEnd::Failed(ClusterError::Unavailable(
                "etcd: keep-alive timed out".into(),
            ));
        }
    };
    // The stream is up: the outage, if any, is over.
    backoff.succeed(token);
    registry.state.live.confirmed(sent, ttl);
    loop {
        tokio::time::sleep(ttl / 3).await;
        let sent = Instant::now();
        let refresh = async {
            keeper.keep_alive().await?;
            stream.message().await
        };
        match tokio::time::timeout(registry.config.timeout, refresh).await {
            Ok(Ok(Some(resp))) if resp.ttl() > 0 => registry.state.live.confirmed(sent, ttl),
            Ok(Ok(Some(_))) => return SessionEnd::Lost,
            Ok(Ok(None)) => {
                return SessionEnd::Failed(ClusterError::Unavailable(
                    "etcd: keep-alive stream ended".into(),
                ));
            }
            Ok(Err(e)) => return SessionEnd::Failed(classified(&e)),
            Err(_) => {
                return SessionEnd::Failed(ClusterError::Unavailable(
                    "etcd: keep-alive timed out".into(),
                ));
            }
        }
    }
}

fn count(state: &State, e: &ClusterError) {
    match e.class() {
        Class::Fatal => state.keepalive_persistent.fetch_add(1, Ordering::Relaxed),
        Class::Item | Class::Transient => state.keepalive_transient.fetch_add(1, Ordering::Relaxed),
    };
}

/// An etcd error as a cluster error: `Config` for what will not pass by itself.
fn classified(e: &etcd_client::Error) -> ClusterError {
    match e {
        etcd_client::Error::InvalidArgs(_)
        | etcd_client::Error::InvalidUri(_)
        | etcd_client::Error::InvalidMetadataValue(_)
        | etcd_client::Error::EndpointError(_) => ClusterError::Config(format!("etcd: {e}")),
        etcd_client::Error::GRpcStatus(status) if is_persistent(status) => {
            ClusterError::Config(format!("etcd: {e}"))
        }
        _ => ClusterError::Unavailable(format!("etcd: {e}")),
    }
}

/// gRPC codes that a retry will not fix.
fn is_persistent(status: &tonic::Status) -> bool {
    use tonic::Code;
    matches!(
        status.code(),
        Code::Unauthenticated
            | Code::PermissionDenied
            | Code::InvalidArgument
            | Code::Unimplemented
    )
}

impl ServiceRegistry for EtcdRegistry {
    fn register(&self, replica: &Replica) -> BoxFuture<Result<(), ClusterError>> {
        let this = self.clone();
        let replica = replica.clone();
        Box::pin(async move {
            this.state.closed.store(false, Ordering::SeqCst);
            this.grant_and_put(&replica).await?;
            let mut keeper_slot = lock(&this.state.keeper);
            if keeper_slot.is_none() {
                let task = tokio::spawn(keeper(this.clone(), replica));
                *keeper_slot = Some(task);
            }
            Ok(())
        })
    }

    // r[impl gateway.cluster.revoke]
    fn deregister(&self, _replica: &Replica) -> BoxFuture<Result<(), ClusterError>> {
        let this = self.clone();
        Box::pin(async move {
            let state = &this.state;
            // Nothing may register the replica again behind this call.
            state.closed.store(true, Ordering::SeqCst);
            let keeper = lock(&state.keeper).take();
            if let Some(task) = keeper {
                task.abort();
                // An abort lands at the keeper's next await: until it has, a re-registration it
                // was making could still store a new lease (and put the key on it) behind the
                // revoke below. Once it has ended, the lease read here is the last one.
                let _ = task.await;
            }
            state.live.clear();
            let lease = lock(&state.lease).take();
            let Some(lease) = lease else {
                return Ok(());
            };
            let mut leases = this.client.lease_client();
            match this.bounded("lease revoke", leases.revoke(lease)).await {
                Ok(_) => Ok(()),
                Err(e) => {
                    // Not revoked: the key lasts until the lease expires (one TTL at most).
                    *lock(&state.lease) = Some(lease);
                    Err(e)
                }
            }
        })
    }

    fn is_live(&self) -> bool {
        // A keeper aborted by `abandon` may still record one confirmation before its abort lands.
        !self.state.closed.load(Ordering::SeqCst) && self.state.live.is_live(Instant::now())
    }

    fn stats(&self) -> RegistryStats {
        self.lease_stats()
    }

    fn lists(&self, id: &str) -> BoxFuture<Result<Option<bool>, ClusterError>> {
        let this = self.clone();
        let key = self.key(id);
        Box::pin(async move {
            let mut kv = this.client.kv_client();
            let found = this
                .bounded(
                    "get",
                    kv.get(key, Some(GetOptions::new().with_count_only())),
                )
                .await?;
            Ok(Some(found.count() > 0))
        })
    }

    fn abandon(&self) {
        self.state.closed.store(true, Ordering::SeqCst);
        if let Some(task) = lock(&self.state.keeper).take() {
            task.abort();
        }
        self.state.live.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Readiness ends exactly one TTL after the request the server last confirmed was sent, with
    // no keeper event needed to end it; a later confirmation moves the deadline, a loss ends it.
    // r[verify gateway.cluster.ready]
    #[tokio::test(start_paused = true)]
    async fn the_lease_is_believed_held_for_one_ttl_from_the_confirmed_request() {
        let ttl = Duration::from_secs(3);
        let live = Liveness::default();
        let sent = Instant::now();
        assert!(!live.is_live(sent), "nothing confirmed yet");
        live.confirmed(sent, ttl);
        assert!(live.is_live(sent));
        assert!(live.is_live(sent + ttl - Duration::from_nanos(1)));
        assert!(
            !live.is_live(sent + ttl),
            "a whole TTL without a confirmation"
        );
        tokio::time::advance(ttl).await;
        assert!(!live.is_live(Instant::now()));
        live.confirmed(Instant::now(), ttl);
        assert!(live.is_live(Instant::now() + ttl - Duration::from_nanos(1)));
        live.clear();
        assert!(!live.is_live(Instant::now()));
    }
}
