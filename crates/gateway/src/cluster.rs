//! The cluster traits: a service registry of replicas and a routing map user → replicas, each
//! with an in-memory implementation (the embedded single-node default, and the model the etcd
//! and Redis implementations must match).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use holdfast_lifecycle::BoxFuture;

use crate::sync::lock;

/// A replica as the service registry lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Replica {
    /// The replica's id (unique in the cluster).
    pub id: String,
    /// Where clients and peers reach it.
    pub address: String,
}

pub use crate::error::ClusterError;

/// The outcome of a compare-and-delete of a replica's routing entry for a user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CasOutcome {
    /// The user's set named this replica, and this replica is gone from it.
    Cleared,
    /// The user's set does not name this replica (removed or expired already) but names others,
    /// which are left alone.
    Stale,
    /// The user has no entry at all.
    Absent,
}

/// The service registry: which replicas are up.
pub trait ServiceRegistry: Send + Sync + 'static {
    /// Registers (or refreshes) this replica.
    fn register(&self, replica: &Replica) -> BoxFuture<Result<(), ClusterError>>;
    /// Removes this replica's registration (revokes its lease).
    fn deregister(&self, replica: &Replica) -> BoxFuture<Result<(), ClusterError>>;
    /// Whether the registration is believed to hold now (an etcd lease lost to an outage is
    /// not). Registries without leases always hold.
    fn is_live(&self) -> bool {
        true
    }
    /// The registry's counters (all zero for registries without leases).
    fn stats(&self) -> RegistryStats {
        RegistryStats::default()
    }
    /// Stops keeping the registration alive without removing it, as a killed process would: an
    /// etcd key then expires with its lease. Registries without leases do nothing.
    fn abandon(&self) {}
    /// Whether the replica `id` is registered now (its lease holds): `None` when this registry
    /// cannot tell, which counts as registered.
    fn lists(&self, id: &str) -> BoxFuture<Result<Option<bool>, ClusterError>> {
        let _ = id;
        Box::pin(async { Ok(None) })
    }
}

/// Counters of a service registry's registration (an etcd lease).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RegistryStats {
    /// Registrations put (the first and every re-registration on a new lease).
    pub registrations: u64,
    /// Keep-alive failures that were transient (unreachable, timed out).
    pub keepalive_transient: u64,
    /// Keep-alive failures that will not pass by themselves (authentication, configuration).
    pub keepalive_persistent: u64,
    /// Leases found lost (expired or unknown to the server) and replaced.
    pub leases_lost: u64,
}

/// The cluster backends a gateway runs on: service registry, routing map and bus.
#[derive(Clone)]
pub struct Cluster {
    /// Where the replica registers.
    pub registry: Arc<dyn ServiceRegistry>,
    /// Which replicas hold each user's connections.
    pub routing: Arc<dyn RoutingMap>,
    /// How pushes reach other replicas.
    pub bus: Arc<dyn crate::bus::ClusterBus>,
    /// The jitter seed of the gateway's own retries (registration); `None` derives it from the
    /// replica id. The node passes `NodeIdentity::seed("gateway")`.
    pub seed: Option<u64>,
    /// Where room history is kept; `None` keeps it in this replica's memory.
    pub history: Option<Arc<dyn crate::history::History>>,
}

impl Cluster {
    /// A single node: registry, routing map and bus in memory.
    pub fn memory() -> Self {
        Self {
            registry: Arc::new(MemoryRegistry::new()),
            routing: Arc::new(MemoryRouting::new()),
            bus: Arc::new(crate::bus::MemoryBus::new()),
            seed: None,
            history: None,
        }
    }
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("seed", &self.seed)
            .finish_non_exhaustive()
    }
}

/// The routing map: which replicas hold a user's connections (a set per user, since one user
/// may be connected to several replicas at once).
pub trait RoutingMap: Send + Sync + 'static {
    /// Adds `replica` to the replicas routed `user`, leaving the others; a map with expiry
    /// refreshes the entry and keeps it alive until [`RoutingMap::compare_and_delete`].
    fn set_route(&self, user: &str, replica: &str) -> BoxFuture<Result<(), ClusterError>>;
    /// The replicas `user` is routed to (live entries only), ordered by id.
    fn routes(&self, user: &str) -> BoxFuture<Result<Vec<String>, ClusterError>>;
    /// Removes `replica` from `user`'s set, and nothing else: each replica deletes only its own
    /// entry, so a user's entries on other replicas survive it.
    fn compare_and_delete(
        &self,
        user: &str,
        replica: &str,
    ) -> BoxFuture<Result<CasOutcome, ClusterError>>;
    /// The replicas `user` is routed to, as [`RoutingMap::routes`], each with its entry's
    /// version: a number that every add or refresh of that entry changes (with Redis, the
    /// entry's expiry deadline), so that [`RoutingMap::delete_entry`] can delete the entry read
    /// and no later one. Required, with [`RoutingMap::delete_entry`]: a default without
    /// versions would make the dead-route delete unconditional again; a map that wraps another
    /// forwards both.
    fn route_entries(&self, user: &str) -> BoxFuture<Result<Vec<(String, u64)>, ClusterError>>;
    /// Removes `replica`'s entry from `user`'s set only while it is still at `version` (as
    /// [`RoutingMap::route_entries`] read it): an entry added or refreshed since is left
    /// ([`CasOutcome::Stale`]).
    fn delete_entry(
        &self,
        user: &str,
        replica: &str,
        version: u64,
    ) -> BoxFuture<Result<CasOutcome, ClusterError>>;
}

/// The in-memory service registry.
#[derive(Debug, Clone, Default)]
pub struct MemoryRegistry {
    replicas: Arc<Mutex<HashMap<String, Replica>>>,
}

impl MemoryRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a replica is registered.
    pub fn is_registered(&self, id: &str) -> bool {
        lock(&self.replicas).contains_key(id)
    }

    /// The registered replicas, ordered by id.
    pub fn replicas(&self) -> Vec<Replica> {
        let mut v: Vec<_> = lock(&self.replicas).values().cloned().collect();
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v
    }
}

impl ServiceRegistry for MemoryRegistry {
    fn register(&self, replica: &Replica) -> BoxFuture<Result<(), ClusterError>> {
        lock(&self.replicas).insert(replica.id.clone(), replica.clone());
        Box::pin(async { Ok(()) })
    }

    fn deregister(&self, replica: &Replica) -> BoxFuture<Result<(), ClusterError>> {
        lock(&self.replicas).remove(&replica.id);
        Box::pin(async { Ok(()) })
    }

    fn lists(&self, id: &str) -> BoxFuture<Result<Option<bool>, ClusterError>> {
        let listed = self.is_registered(id);
        Box::pin(async move { Ok(Some(listed)) })
    }
}

/// Per user, the replicas routed and each entry's version.
type Routes = HashMap<String, Vec<(String, u64)>>;

// r[impl gateway.edge.footprint]
/// The in-memory routing map (no expiry: its replicas live and die with the process).
#[derive(Debug, Clone, Default)]
pub struct MemoryRouting {
    // Per user, its replicas sorted, each with the version its last add gave it: a vector sized
    // to them, not a `BTreeSet` whose first node (room for eleven) would cost every routed user
    // some 280 bytes.
    routes: Arc<Mutex<Routes>>,
    /// The last version given (every add takes the next).
    version: Arc<std::sync::atomic::AtomicU64>,
}

impl MemoryRouting {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// The replicas `user` is routed to, ordered, read synchronously.
    pub fn get(&self, user: &str) -> Vec<String> {
        lock(&self.routes)
            .get(user)
            .map(|set| set.iter().map(|(r, _)| r.clone()).collect())
            .unwrap_or_default()
    }

    /// How many users' sets name `replica`.
    pub fn count_for(&self, replica: &str) -> usize {
        lock(&self.routes)
            .values()
            .filter(|set| set.iter().any(|(r, _)| r == replica))
            .count()
    }
}

impl RoutingMap for MemoryRouting {
    fn set_route(&self, user: &str, replica: &str) -> BoxFuture<Result<(), ClusterError>> {
        let version = self
            .version
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        let mut routes = lock(&self.routes);
        let set = routes.entry(user.to_owned()).or_default();
        match set.binary_search_by(|(r, _)| r.as_str().cmp(replica)) {
            Ok(at) => set[at].1 = version,
            Err(at) => {
                set.reserve_exact(1);
                set.insert(at, (replica.to_owned(), version));
            }
        }
        Box::pin(async { Ok(()) })
    }

    fn routes(&self, user: &str) -> BoxFuture<Result<Vec<String>, ClusterError>> {
        let r = self.get(user);
        Box::pin(async move { Ok(r) })
    }

    // r[impl gateway.routing.compare-and-delete+2]
    fn compare_and_delete(
        &self,
        user: &str,
        replica: &str,
    ) -> BoxFuture<Result<CasOutcome, ClusterError>> {
        // Compare and delete under one lock: the in-memory twin of the Redis Lua script.
        let mut routes = lock(&self.routes);
        let outcome = match routes.get_mut(user) {
            None => CasOutcome::Absent,
            Some(set) => {
                let at = set.binary_search_by(|(r, _)| r.as_str().cmp(replica));
                let removed = at.map(|at| set.remove(at)).is_ok();
                if set.is_empty() {
                    routes.remove(user);
                }
                if removed {
                    CasOutcome::Cleared
                } else {
                    CasOutcome::Stale
                }
            }
        };
        Box::pin(async move { Ok(outcome) })
    }

    fn route_entries(&self, user: &str) -> BoxFuture<Result<Vec<(String, u64)>, ClusterError>> {
        let entries = lock(&self.routes).get(user).cloned().unwrap_or_default();
        Box::pin(async move { Ok(entries) })
    }

    // r[impl gateway.cluster.dead-route+2]
    fn delete_entry(
        &self,
        user: &str,
        replica: &str,
        version: u64,
    ) -> BoxFuture<Result<CasOutcome, ClusterError>> {
        // Compared and deleted under one lock: an add since the read gave the entry a later
        // version, and it stays.
        let mut routes = lock(&self.routes);
        let outcome = match routes.get_mut(user) {
            None => CasOutcome::Absent,
            Some(set) => match set.binary_search_by(|(r, _)| r.as_str().cmp(replica)) {
                Ok(at) if set[at].1 == version => {
                    set.remove(at);
                    if set.is_empty() {
                        routes.remove(user);
                    }
                    CasOutcome::Cleared
                }
                _ => CasOutcome::Stale,
            },
        };
        Box::pin(async move { Ok(outcome) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify gateway.cluster.dead-route+2]
    #[tokio::test]
    async fn an_entry_is_deleted_only_at_the_version_read() {
        let map = MemoryRouting::new();
        map.set_route("ann", "a").await.unwrap();
        map.set_route("ann", "b").await.unwrap();
        let read = map.route_entries("ann").await.unwrap();
        assert_eq!(
            read.iter().map(|(r, _)| r.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        // b routes ann again after the read: its entry is a new one, and stays.
        map.set_route("ann", "b").await.unwrap();
        assert_eq!(
            map.delete_entry("ann", "b", read[1].1).await,
            Ok(CasOutcome::Stale)
        );
        assert_eq!(map.get("ann"), ["a", "b"]);
        assert_eq!(
            map.delete_entry("ann", "a", read[0].1).await,
            Ok(CasOutcome::Cleared)
        );
        assert_eq!(map.get("ann"), ["b"]);
        let now = map.route_entries("ann").await.unwrap();
        assert_eq!(
            map.delete_entry("ann", "b", now[0].1).await,
            Ok(CasOutcome::Cleared)
        );
        assert_eq!(
            map.delete_entry("ann", "b", now[0].1).await,
            Ok(CasOutcome::Absent)
        );
    }

    // r[verify gateway.routing.compare-and-delete+2]
    #[tokio::test]
    async fn compare_and_delete_has_three_outcomes() {
        let map = MemoryRouting::new();
        map.set_route("ann", "a").await.unwrap();
        map.set_route("bob", "a").await.unwrap();
        // Bob is connected to replica b too.
        map.set_route("bob", "b").await.unwrap();
        assert_eq!(map.routes("bob").await.unwrap(), ["a", "b"]);
        assert_eq!(
            map.compare_and_delete("ann", "a").await,
            Ok(CasOutcome::Cleared)
        );
        assert!(map.get("ann").is_empty());
        assert_eq!(
            map.compare_and_delete("bob", "a").await,
            Ok(CasOutcome::Cleared)
        );
        assert_eq!(map.get("bob"), ["b"], "b's entry survives a's delete");
        assert_eq!(
            map.compare_and_delete("bob", "a").await,
            Ok(CasOutcome::Stale),
            "a's entry is gone, b's is left alone"
        );
        assert_eq!(map.get("bob"), ["b"]);
        assert_eq!(
            map.compare_and_delete("cat", "a").await,
            Ok(CasOutcome::Absent)
        );
    }
}
