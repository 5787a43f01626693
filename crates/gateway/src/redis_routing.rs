//! The routing map in Redis, shared by every replica of a cluster.
//!
//! One key per user (`{prefix}route:{user}` → replica id). The compare-and-delete is a Lua
//! script, so the read and the delete are one atomic step on the server: a replica can never
//! delete the entry of a user who reconnected elsewhere between its read and its delete.

use std::sync::Arc;
use std::time::Duration;

use holdfast_lifecycle::BoxFuture;
use redis::aio::MultiplexedConnection;

use crate::cluster::{CasOutcome, ClusterError, RoutingMap};
use crate::redis_conn::RedisConn;

/// Deletes KEYS[1] only if it holds ARGV[1]: 1 cleared, 0 stale (another value), -1 absent.
const COMPARE_AND_DELETE: &str = r"
local v = redis.call('GET', KEYS[1])
if not v then return -1 end
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
";

/// The routing map in Redis.
#[derive(Clone)]
pub struct RedisRouting {
    conn: RedisConn,
    prefix: String,
    script: Arc<redis::Script>,
}

impl std::fmt::Debug for RedisRouting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password: never print it.
        f.debug_struct("RedisRouting")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisRouting {
    /// A map on the Redis at `url` (`redis://host:port`), its keys under `prefix`. Nothing is
    /// connected until the first call; every call is bounded by `timeout`.
    pub fn new(url: &str, prefix: &str, timeout: Duration) -> Result<Self, ClusterError> {
        Ok(Self {
            conn: RedisConn::new(url, timeout)?,
            prefix: prefix.to_owned(),
            script: Arc::new(redis::Script::new(COMPARE_AND_DELETE)),
        })
    }

    fn key(&self, user: &str) -> String {
        format!("{}route:{}", self.prefix, user)
    }

    fn call<T, F, Fut>(&self, op: F) -> BoxFuture<Result<T, ClusterError>>
    where
        T: Send + 'static,
        F: FnOnce(MultiplexedConnection) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = redis::RedisResult<T>> + Send + 'static,
    {
        self.conn.call(op)
    }
}

impl RoutingMap for RedisRouting {
    fn set_route(&self, user: &str, replica: &str) -> BoxFuture<Result<(), ClusterError>> {
        let key = self.key(user);
        let replica = replica.to_owned();
        self.call(move |mut c| async move {
            redis::cmd("SET")
                .arg(key)
                .arg(replica)
                .query_async::<()>(&mut c)
                .await
        })
    }

    fn route(&self, user: &str) -> BoxFuture<Result<Option<String>, ClusterError>> {
        let key = self.key(user);
        self.call(move |mut c| async move {
            redis::cmd("GET")
                .arg(key)
                .query_async::<Option<String>>(&mut c)
                .await
        })
    }

    // r[impl gateway.routing.compare-and-delete]
    fn compare_and_delete(
        &self,
        user: &str,
        replica: &str,
    ) -> BoxFuture<Result<CasOutcome, ClusterError>> {
        let key = self.key(user);
        let replica = replica.to_owned();
        let script = self.script.clone();
        let fut = self.call(move |mut c| async move {
            script
                .key(key)
                .arg(replica)
                .invoke_async::<i64>(&mut c)
                .await
        });
        Box::pin(async move {
            match fut.await? {
                1 => Ok(CasOutcome::Cleared),
                0 => Ok(CasOutcome::Stale),
                -1 => Ok(CasOutcome::Absent),
                n => Err(ClusterError::Unavailable(format!(
                    "redis: compare-and-delete answered {n}"
                ))),
            }
        })
    }
}
