//! One shared, lazily (re)connected Redis connection with a timeout on every call, used by the
//! routing map and the bus's publisher.

use std::sync::Arc;
use std::time::Duration;

use holdfast_lifecycle::BoxFuture;
use redis::aio::MultiplexedConnection;

use crate::error::ClusterError;

/// A Redis client and its shared connection.
#[derive(Clone)]
pub(crate) struct RedisConn {
    pub(crate) client: redis::Client,
    conn: Arc<tokio::sync::Mutex<Option<MultiplexedConnection>>>,
    pub(crate) timeout: Duration,
}

impl RedisConn {
    /// A client for `url`; nothing is connected until the first call.
    pub(crate) fn new(url: &str, timeout: Duration) -> Result<Self, ClusterError> {
        let client = redis::Client::open(url).map_err(|e| classified(&e))?;
        Ok(Self {
            client,
            conn: Arc::new(tokio::sync::Mutex::new(None)),
            timeout,
        })
    }

    /// Runs `op` on the shared connection (connecting first if needed), within the timeout; a
    /// failed call drops the connection so the next call reconnects.
    pub(crate) fn call<T, F, Fut>(&self, op: F) -> BoxFuture<Result<T, ClusterError>>
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
                            .map_err(|e| classified(&e))?;
                        *slot = Some(c.clone());
                        c
                    }
                };
                drop(slot);
                match op(conn).await {
                    Ok(v) => Ok(v),
                    Err(e) => {
                        clear(&this.conn);
                        Err(classified(&e))
                    }
                }
            };
            match tokio::time::timeout(this.timeout, work).await {
                Ok(r) => r,
                Err(_) => {
                    clear(&this.conn);
                    Err(ClusterError::Unavailable("redis: timed out".into()))
                }
            }
        })
    }
}

/// Drops the shared connection after a failed or timed-out call, so the next call reconnects,
/// without waiting: a call holding the slot is connecting or copying it, and waiting would stretch
/// this call past its timeout (or turn a fast error into a timeout). A slot held now is cleared
/// by the next call that fails on it.
fn clear(slot: &tokio::sync::Mutex<Option<MultiplexedConnection>>) {
    if let Ok(mut slot) = slot.try_lock() {
        *slot = None;
    }
}

/// A Redis error as a cluster error: `Config` when it will not pass by itself (authentication,
/// a bad URL), else `Unavailable`.
pub(crate) fn classified(e: &redis::RedisError) -> ClusterError {
    if matches!(
        e.kind(),
        redis::ErrorKind::AuthenticationFailed
            | redis::ErrorKind::InvalidClientConfig
            | redis::ErrorKind::RESP3NotSupported
    ) {
        ClusterError::Config(format!("redis: {e}"))
    } else {
        ClusterError::Unavailable(format!("redis: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::RedisConn;

    // r[verify gateway.routing.expiry]
    /// A call that times out while another call holds the connection slot (connecting to a
    /// stalled server) answers at its own timeout: it does not wait for the slot to clear it.
    #[tokio::test(start_paused = true)]
    async fn a_timed_out_call_does_not_wait_for_a_connecting_one() {
        let conn = RedisConn::new("redis://127.0.0.1:1", Duration::from_secs(1)).unwrap();
        let connecting = conn.conn.clone().lock_owned().await;
        let began = tokio::time::Instant::now();
        let answer = tokio::time::timeout(
            Duration::from_secs(5),
            conn.call(
                |mut c| async move { redis::cmd("PING").query_async::<String>(&mut c).await },
            ),
        )
        .await
        .expect("the call answered at its own timeout, not after the connecting call");
        assert!(
            matches!(&answer, Err(crate::error::ClusterError::Unavailable(m)) if m.contains("timed out")),
            "{answer:?}"
        );
        let took = began.elapsed();
        assert!(
            took >= Duration::from_secs(1) && took < Duration::from_secs(2),
            "{took:?}"
        );
        drop(connecting);
    }
}
