//! The cluster backends from plain settings: what the node maps its `[gateway.cluster]` section
//! onto.

use std::sync::Arc;
use std::time::Duration;

use crate::bus::MemoryBus;
use crate::cluster::{Cluster, ClusterError, MemoryRegistry, MemoryRouting};
use crate::redis_bus::RedisBus;
use crate::redis_routing::RedisRouting;

/// Where a gateway's cluster backends are. Its `Debug` hides the Redis URL's credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// etcd endpoints (`http://host:port`); empty keeps the service registry in memory. Needs
    /// the crate's `etcd` feature.
    pub etcd: Vec<String>,
    /// The etcd key prefix: replicas are `PREFIX/replicas/ID`.
    pub etcd_prefix: String,
    /// The registration lease's time to live.
    pub lease_ttl: Duration,
    /// The Redis URL (`redis://host:port`); `None` keeps the routing map and the bus in memory.
    pub redis: Option<String>,
    /// The Redis key and channel prefix (`PREFIX:route:USER`, `PREFIX:replica:ID`,
    /// `PREFIX:rooms`).
    pub redis_prefix: String,
    /// The bound on every backend call.
    pub timeout: Duration,
    /// The jitter seed of every backend loop (the node passes `NodeIdentity::seed("gateway")`);
    /// `None` derives it from the replica id.
    pub seed: Option<u64>,
}

impl std::fmt::Debug for ClusterConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A Redis URL may carry a password (`redis://user:secret@host`): print only the host.
        let redis = self.redis.as_deref().map(|url| match url.rsplit_once('@') {
            Some((scheme_and_user, host)) => {
                let scheme = scheme_and_user.split("://").next().unwrap_or("redis");
                format!("{scheme}://***@{host}")
            }
            None => url.to_owned(),
        });
        f.debug_struct("ClusterConfig")
            .field("etcd", &self.etcd)
            .field("etcd_prefix", &self.etcd_prefix)
            .field("lease_ttl", &self.lease_ttl)
            .field("redis", &redis)
            .field("redis_prefix", &self.redis_prefix)
            .field("timeout", &self.timeout)
            .field("seed", &self.seed)
            .finish()
    }
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            etcd: Vec::new(),
            etcd_prefix: "/holdfast/gateway".to_owned(),
            lease_ttl: Duration::from_secs(10),
            redis: None,
            redis_prefix: "holdfast:gateway".to_owned(),
            timeout: Duration::from_secs(2),
            seed: None,
        }
    }
}

/// Builds the backends `config` names for the replica `replica_id`. Nothing is contacted yet:
/// a backend that is down at start is retried by the gateway, which is not ready until it has
/// registered.
pub async fn connect_cluster(
    config: &ClusterConfig,
    replica_id: &str,
) -> Result<Cluster, ClusterError> {
    let seed = config
        .seed
        .unwrap_or_else(|| crate::backoff::replica_seed(replica_id));
    let registry: Arc<dyn crate::ServiceRegistry> = if config.etcd.is_empty() {
        Arc::new(MemoryRegistry::new())
    } else {
        etcd_registry(config, seed).await?
    };
    type Backends = (
        Arc<dyn crate::RoutingMap>,
        Arc<dyn crate::ClusterBus>,
        Option<Arc<dyn crate::History>>,
    );
    let (routing, bus, history): Backends = match &config.redis {
        None => (
            Arc::new(MemoryRouting::new()),
            Arc::new(MemoryBus::new()),
            None,
        ),
        Some(url) => {
            let prefix = colon_terminated(&config.redis_prefix);
            (
                Arc::new(RedisRouting::new(url, &prefix, config.timeout)?),
                Arc::new(RedisBus::new(url, &prefix, config.timeout, seed)?),
                Some(Arc::new(crate::RedisHistory::new(
                    url,
                    &prefix,
                    config.timeout,
                )?)),
            )
        }
    };
    Ok(Cluster {
        registry,
        routing,
        bus,
        seed: Some(seed),
        history,
    })
}

#[cfg(feature = "etcd")]
async fn etcd_registry(
    config: &ClusterConfig,
    seed: u64,
) -> Result<Arc<dyn crate::ServiceRegistry>, ClusterError> {
    let registry = crate::etcd_registry::EtcdRegistry::connect(crate::etcd_registry::EtcdConfig {
        endpoints: config.etcd.clone(),
        prefix: config.etcd_prefix.clone(),
        lease_ttl: config.lease_ttl,
        timeout: config.timeout,
        seed,
    })
    .await?;
    Ok(Arc::new(registry))
}

#[cfg(not(feature = "etcd"))]
async fn etcd_registry(
    _config: &ClusterConfig,
    _seed: u64,
) -> Result<Arc<dyn crate::ServiceRegistry>, ClusterError> {
    Err(ClusterError::Config(
        "etcd endpoints are configured, but this build has no etcd support (holdfast-gateway's `etcd` feature)".into(),
    ))
}

fn colon_terminated(prefix: &str) -> String {
    if prefix.is_empty() || prefix.ends_with(':') {
        prefix.to_owned()
    } else {
        format!("{prefix}:")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_redis_password() {
        let config = ClusterConfig {
            redis: Some("redis://holdfast:s3cret@10.0.0.5:6379/0".into()),
            ..ClusterConfig::default()
        };
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("redis://***@10.0.0.5:6379/0"), "{shown}");
    }

    #[tokio::test]
    async fn an_empty_config_is_a_single_node_in_memory() {
        let cluster = connect_cluster(&ClusterConfig::default(), "a")
            .await
            .unwrap();
        assert_eq!(cluster.seed, Some(crate::backoff::replica_seed("a")));
        assert!(cluster.registry.is_live());
    }

    #[cfg(not(feature = "etcd"))]
    #[tokio::test]
    async fn etcd_without_the_feature_is_a_configuration_error() {
        let config = ClusterConfig {
            etcd: vec!["http://127.0.0.1:2379".into()],
            ..ClusterConfig::default()
        };
        let err = connect_cluster(&config, "a").await.unwrap_err();
        assert!(matches!(err, ClusterError::Config(_)), "{err}");
    }

    #[test]
    fn redis_prefixes_end_with_a_colon() {
        assert_eq!(colon_terminated("holdfast:gateway"), "holdfast:gateway:");
        assert_eq!(colon_terminated("x:"), "x:");
    }
}
