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
    client: redis::Client,
    conn: Arc<tokio::sync::Mutex<Option<MultiplexedConnection>>>,
    prefix: String,
    timeout: Duration,
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
        let client = redis::Client::open(url).map_err(unavailable)?;
        Ok(Self {
            client,
            conn: Arc::new(tokio::sync::Mutex::new(None)),
            prefix: prefix.to_owned(),
            timeout,
            script: Arc::new(redis::Script::new(COMPARE_AND_DELETE)),
        })
    }

    fn key(&self, user: &str) -> String {
        format!("{}route:{}", self.prefix, user)
    }

    /// Runs `op` on the shared connection (connecting first if needed), within the timeout; a
    /// failed call drops the connection so the next call reconnects.
    fn call<T, F, Fut>(&self, op: F) -> BoxFuture<Result<T, ClusterError>>
    where
        T: Send + 'static,
        F: FnOnce(MultiplexedConnection) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = redis::RedisResult<T>> + Send + 'static,
    {
        let this = self.clone();
        Box::pin(async move {
            let work = async {
                let mut slot = this.conn.lock().await;
                let conn = match slot.as_ref() {
                    Some(c) => c.clone(),
                    None => {
                        let c = this
                            .client
                            .get_multiplexed_async_connection()
                            .await
                            .map_err(unavailable)?;
                        *slot = Some(c.clone());
                        c
                    }
                };
                drop(slot);
                match op(conn).await {
                    Ok(v) => Ok(v),
                    Err(e) => {
                        *this.conn.lock().await = None;
                        Err(unavailable(e))
                    }
                }
            };
            match tokio::time::timeout(this.timeout, work).await {
                Ok(r) => r,
                Err(_) => {
                    *this.conn.lock().await = None;
                    Err(ClusterError::Unavailable("redis: timed out".into()))
                }
            }
        })
    }
}

fn unavailable(e: redis::RedisError) -> ClusterError {
    ClusterError::Unavailable(format!("redis: {e}"))
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
