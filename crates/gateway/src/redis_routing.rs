//! The routing map in Redis, shared by every replica of a cluster.
//!
//! One sorted set per user (`{prefix}route:{user}`): its members the replicas holding the user's
//! connections, each scored with the Redis server time (ms) at which it expires. A replica
//! refreshes its own members while it holds them, so a replica that dies stops being routed to
//! within the TTL, and the key itself expires once no member is refreshed. Every call is a Lua
//! script on the server's clock (replicas' clocks may disagree), and the compare-and-delete
//! removes only the calling replica's member in one atomic step: a replica never deletes another
//! replica's entry for the same user.
//!
//! The sets replace the single string route of earlier versions at the same key, and the two do
//! not mix: a cluster is upgraded all at once (see the crate README), not replica by replica.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use holdfast_lifecycle::BoxFuture;
use redis::aio::MultiplexedConnection;

use crate::cluster::{CasOutcome, RoutingMap};
use crate::error::ClusterError;
use crate::redis_conn::RedisConn;

/// How long a replica's entry for a user lives without a refresh.
pub const ROUTE_TTL: Duration = Duration::from_secs(30);

/// Users refreshed per script call (bounds one call's keys and time on the server).
const REFRESH_BATCH: usize = 500;

/// The server's clock in ms, as `now`.
const NOW: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
";

/// Sets key `k` to expire with its latest member: replicas may run with different TTLs, and one
/// with a short TTL must not expire the key under another's longer-lived member.
const EXPIRE_WITH_LAST: &str = r"
local function expire_with_last(k)
  local top = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')
  if top[2] then redis.call('PEXPIREAT', k, string.format('%.0f', tonumber(top[2]))) end
end
";

/// Adds ARGV[1] to KEYS[1] expiring ARGV[2] ms from now; drops expired members. A plain string
/// (a route written before the per-user sets) is replaced. The deadline is the entry's version,
/// so it always moves strictly later than the member's current one (by 1 ms when an add or
/// refresh in the same ms, or a Redis clock stepped back, would write the same or an earlier one).
const ADD: &str = r"
if redis.call('TYPE', KEYS[1]).ok == 'string' then redis.call('DEL', KEYS[1]) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now))
local d = now + tonumber(ARGV[2])
local old = redis.call('ZSCORE', KEYS[1], ARGV[1])
if old and tonumber(old) >= d then d = tonumber(old) + 1 end
redis.call('ZADD', KEYS[1], string.format('%.0f', d), ARGV[1])
expire_with_last(KEYS[1])
return 1
";

/// The members of KEYS[1] not yet expired.
const ROUTES: &str = r"
local ty = redis.call('TYPE', KEYS[1]).ok
if ty == 'string' then return {redis.call('GET', KEYS[1])} end
if ty ~= 'zset' then return {} end
return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%.0f', now), '+inf')
";

/// Removes ARGV[1] from KEYS[1]: 1 cleared, 0 stale (others remain), -1 absent.
const COMPARE_AND_DELETE: &str = r"
local ty = redis.call('TYPE', KEYS[1]).ok
if ty == 'none' then return -1 end
if ty == 'string' then
  if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('DEL', KEYS[1])
    return 1
  end
  return 0
end
if ty ~= 'zset' then return -1 end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now))
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
if removed == 1 then return 1 end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
return -1
";

/// The members of KEYS[1] not yet expired, each followed by its deadline (ms, an integer): the
/// entry's version, which every add and refresh moves strictly later. A plain string (a route
/// written before the per-user sets) has version 0.
const ENTRIES: &str = r"
local ty = redis.call('TYPE', KEYS[1]).ok
if ty == 'string' then return {redis.call('GET', KEYS[1]), '0'} end
if ty ~= 'zset' then return {} end
local found = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%.0f', now), '+inf', 'WITHSCORES')
for i = 2, #found, 2 do found[i] = string.format('%.0f', tonumber(found[i])) end
return found
";

/// Removes ARGV[1] from KEYS[1] only while its deadline is still ARGV[2] (the version read: an
/// add or refresh since wrote a later one): 1 cleared, 0 stale (not there at that version, others
/// remain), -1 absent. Expired members are dropped first, as in `COMPARE_AND_DELETE`: one that
/// expired since the read is no longer there to delete.
const DELETE_ENTRY: &str = r"
local ty = redis.call('TYPE', KEYS[1]).ok
if ty == 'none' then return -1 end
if ty == 'string' then
  if ARGV[2] == '0' and redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('DEL', KEYS[1])
    return 1
  end
  return 0
end
if ty ~= 'zset' then return -1 end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now))
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and string.format('%.0f', tonumber(score)) == ARGV[2] then
  redis.call('ZREM', KEYS[1], ARGV[1])
  if redis.call('ZCARD', KEYS[1]) == 0 then redis.call('DEL', KEYS[1]) else expire_with_last(KEYS[1]) end
  return 1
end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
return -1
";

/// Pushes back the expiry of ARGV[1] in each of KEYS to ARGV[2] ms from now, re-adding it where
/// it is missing (expired in an outage, or a Redis restart). Answers the deadline written: one
/// for the whole batch, later than every member's current one (the version moves strictly
/// later, as in `ADD`).
const REFRESH: &str = r"
local d = now + tonumber(ARGV[2])
for _, k in ipairs(KEYS) do
  if redis.call('TYPE', k).ok == 'string' then redis.call('DEL', k) end
  local old = redis.call('ZSCORE', k, ARGV[1])
  if old and tonumber(old) >= d then d = tonumber(old) + 1 end
end
local deadline = string.format('%.0f', d)
for _, k in ipairs(KEYS) do
  redis.call('ZADD', k, deadline, ARGV[1])
  expire_with_last(k)
end
return deadline
";

/// Takes back a refresh of ARGV[1] in each of KEYS whose user was released while the refresh ran:
/// removes the member only where it still carries the refresh's deadline ARGV[2] (an add since
/// then wrote a later one, and stays).
const UNREFRESH: &str = r"
for _, k in ipairs(KEYS) do
  local score = redis.call('ZSCORE', k, ARGV[1])
  if score and string.format('%.0f', tonumber(score)) == ARGV[2] then
    redis.call('ZREM', k, ARGV[1])
    if redis.call('ZCARD', k) == 0 then redis.call('DEL', k) else expire_with_last(k) end
  end
end
return 1
";

/// What the refresher keeps alive: for each replica, the users it holds.
#[derive(Debug, Default)]
struct Owned {
    users: Mutex<HashMap<String, BTreeSet<String>>>,
    refresher: OnceLock<()>,
}

/// The routing map in Redis.
#[derive(Clone)]
pub struct RedisRouting {
    conn: RedisConn,
    prefix: String,
    ttl: Duration,
    add: Arc<redis::Script>,
    routes: Arc<redis::Script>,
    delete: Arc<redis::Script>,
    entries: Arc<redis::Script>,
    delete_entry: Arc<redis::Script>,
    owned: Arc<Owned>,
}

impl std::fmt::Debug for RedisRouting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password: never print it.
        f.debug_struct("RedisRouting")
            .field("prefix", &self.prefix)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

fn script(body: &str) -> Arc<redis::Script> {
    Arc::new(redis::Script::new(&format!(
        "{NOW}{EXPIRE_WITH_LAST}{body}"
    )))
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl RedisRouting {
    /// A map on the Redis at `url` (`redis://host:port`), its keys under `prefix`, its entries
    /// living [`ROUTE_TTL`] unless refreshed. Nothing is connected until the first call; every
    /// call is bounded by `timeout`.
    pub fn new(url: &str, prefix: &str, timeout: Duration) -> Result<Self, ClusterError> {
        Self::with_ttl(url, prefix, timeout, ROUTE_TTL)
    }

    /// As [`RedisRouting::new`], with entries living `ttl` unless refreshed (refreshed every
    /// third of it while their replica holds the user through this map or a clone of it).
    pub fn with_ttl(
        url: &str,
        prefix: &str,
        timeout: Duration,
        ttl: Duration,
    ) -> Result<Self, ClusterError> {
        Ok(Self {
            conn: RedisConn::new(url, timeout)?,
            prefix: prefix.to_owned(),
            ttl,
            add: script(ADD),
            routes: script(ROUTES),
            delete: script(COMPARE_AND_DELETE),
            entries: script(ENTRIES),
            delete_entry: script(DELETE_ENTRY),
            owned: Arc::new(Owned::default()),
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

    /// Starts the refresher once, when there is a runtime to run it on.
    fn ensure_refresher(&self) {
        if self.owned.refresher.get().is_some() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.owned.refresher.set(()).is_ok() {
            rt.spawn(refresh(
                Arc::downgrade(&self.owned),
                self.conn.clone(),
                self.prefix.clone(),
                self.ttl,
            ));
        }
    }
}

// r[impl gateway.routing.expiry]
/// Refreshes every entry this map holds, every third of the TTL, until the map (all its clones)
/// is dropped. A failed round is retried at the next tick: an entry outlives one failed refresh.
///
/// No lock is held across a Redis call: adds and deletes (a login awaits its add) never wait for
/// a round, which with Redis stalled takes a call timeout per batch. A user released while its
/// batch was in flight may have been written back by it: after each batch such writes are taken
/// back where no add has written the member since; one whose take-back fails expires within the
/// TTL, as nothing refreshes it again.
async fn refresh(owned: Weak<Owned>, conn: RedisConn, prefix: String, ttl: Duration) {
    let (refresh, unrefresh) = (script(REFRESH), script(UNREFRESH));
    let mut tick = tokio::time::interval(ttl / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(owned) = owned.upgrade() else { return };
        let snapshot: Vec<(String, Vec<String>)> = crate::sync::lock(&owned.users)
            .iter()
            .map(|(replica, users)| (replica.clone(), users.iter().cloned().collect()))
            .collect();
        for (replica, users) in snapshot {
            for batch in users.chunks(REFRESH_BATCH) {
                let keys: Vec<String> =
                    batch.iter().map(|u| format!("{prefix}route:{u}")).collect();
                let (script, to) = (refresh.clone(), replica.clone());
                let done = conn
                    .call(move |mut c| async move {
                        let mut call = script.prepare_invoke();
                        for k in keys {
                            call.key(k);
                        }
                        call.arg(to)
                            .arg(ms(ttl))
                            .invoke_async::<String>(&mut c)
                            .await
                    })
                    .await;
                let deadline = match done {
                    Ok(deadline) => deadline,
                    Err(e) => {
                        tracing::warn!(replica = %replica, error = %e, "cannot refresh routes; retrying at the next tick");
                        continue;
                    }
                };
                let released: Vec<String> = {
                    let users = crate::sync::lock(&owned.users);
                    let held = users.get(&replica);
                    batch
                        .iter()
                        .filter(|u| !held.is_some_and(|h| h.contains(*u)))
                        .map(|u| format!("{prefix}route:{u}"))
                        .collect()
                };
                if released.is_empty() {
                    continue;
                }
                let (script, from) = (unrefresh.clone(), replica.clone());
                let undone = conn
                    .call(move |mut c| async move {
                        let mut call = script.prepare_invoke();
                        for k in released {
                            call.key(k);
                        }
                        call.arg(from)
                            .arg(deadline)
                            .invoke_async::<i64>(&mut c)
                            .await
                    })
                    .await;
                if let Err(e) = undone {
                    tracing::warn!(replica = %replica, error = %e, "cannot take back the refresh of released routes; they expire within the TTL");
                }
            }
        }
    }
}

impl RoutingMap for RedisRouting {
    fn set_route(&self, user: &str, replica: &str) -> BoxFuture<Result<(), ClusterError>> {
        self.ensure_refresher();
        let key = self.key(user);
        let script = self.add.clone();
        let owned = self.owned.clone();
        let (user, replica) = (user.to_owned(), replica.to_owned());
        let ttl = ms(self.ttl);
        let this = self.clone();
        Box::pin(async move {
            // Held before the call: an add that fails now is made by the next refresh, and the
            // user is this replica's to delete (the drain deletes it).
            crate::sync::lock(&owned.users)
                .entry(replica.clone())
                .or_default()
                .insert(user);
            this.call(move |mut c| async move {
                script
                    .key(key)
                    .arg(replica)
                    .arg(ttl)
                    .invoke_async::<()>(&mut c)
                    .await
            })
            .await
        })
    }

    fn routes(&self, user: &str) -> BoxFuture<Result<Vec<String>, ClusterError>> {
        let key = self.key(user);
        let script = self.routes.clone();
        let call = self.call(move |mut c| async move {
            script.key(key).invoke_async::<Vec<String>>(&mut c).await
        });
        Box::pin(async move {
            let mut replicas = call.await?;
            replicas.sort();
            replicas.dedup();
            Ok(replicas)
        })
    }

    // r[impl gateway.routing.compare-and-delete+2]
    fn compare_and_delete(
        &self,
        user: &str,
        replica: &str,
    ) -> BoxFuture<Result<CasOutcome, ClusterError>> {
        let key = self.key(user);
        let script = self.delete.clone();
        let owned = self.owned.clone();
        let (user, replica) = (user.to_owned(), replica.to_owned());
        let this = self.clone();
        Box::pin(async move {
            // Released before the call: a failed delete is not refreshed, so it expires.
            {
                let mut users = crate::sync::lock(&owned.users);
                if let Some(set) = users.get_mut(&replica) {
                    set.remove(&user);
                    if set.is_empty() {
                        users.remove(&replica);
                    }
                }
            }
            let answer = this
                .call(move |mut c| async move {
                    script
                        .key(key)
                        .arg(replica)
                        .invoke_async::<i64>(&mut c)
                        .await
                })
                .await?;
            match answer {
                1 => Ok(CasOutcome::Cleared),
                0 => Ok(CasOutcome::Stale),
                -1 => Ok(CasOutcome::Absent),
                n => Err(ClusterError::Unavailable(format!(
                    "redis: compare-and-delete answered {n}"
                ))),
            }
        })
    }
    fn route_entries(&self, user: &str) -> BoxFuture<Result<Vec<(String, u64)>, ClusterError>> {
        let key = self.key(user);
        let script = self.entries.clone();
        let call = self.call(move |mut c| async move {
            script.key(key).invoke_async::<Vec<String>>(&mut c).await
        });
        Box::pin(async move {
            let flat = call.await?;
            let mut entries = Vec::with_capacity(flat.len() / 2);
            for pair in flat.chunks(2) {
                let [replica, version] = pair else {
                    return Err(ClusterError::Unavailable(
                        "redis: a route entry without its deadline".to_owned(),
                    ));
                };
                let version = version.parse::<u64>().map_err(|_| {
                    ClusterError::Unavailable(format!("redis: a route deadline {version:?}"))
                })?;
                entries.push((replica.clone(), version));
            }
            entries.sort();
            entries.dedup_by(|a, b| a.0 == b.0);
            Ok(entries)
        })
    }

    // r[impl gateway.cluster.dead-route+2]
    fn delete_entry(
        &self,
        user: &str,
        replica: &str,
        version: u64,
    ) -> BoxFuture<Result<CasOutcome, ClusterError>> {
        let key = self.key(user);
        let script = self.delete_entry.clone();
        let replica = replica.to_owned();
        let call = self.call(move |mut c| async move {
            script
                .key(key)
                .arg(replica)
                .arg(version.to_string())
                .invoke_async::<i64>(&mut c)
                .await
        });
        Box::pin(async move {
            match call.await? {
                1 => Ok(CasOutcome::Cleared),
                0 => Ok(CasOutcome::Stale),
                -1 => Ok(CasOutcome::Absent),
                n => Err(ClusterError::Unavailable(format!(
                    "redis: delete of a route entry answered {n}"
                ))),
            }
        })
    }
}
