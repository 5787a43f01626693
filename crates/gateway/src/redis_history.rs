//! Room history in Redis Streams, shared by every replica of a cluster.
//!
//! One stream per room (`{prefix}history:{room}`), its entries `d → text`, its ids the
//! positions: Redis assigns them, so they are comparable across replicas. Next to it
//! `{prefix}history-dropped:{room}` holds the newest id trimmed away (or, when an append created
//! the stream, the id just below its first entry), which is how a join tells a gap from a quiet
//! room, and a stream that expired or was flushed from one that never was. Both are written by Lua scripts, so an append, its trim and the
//! record of what was trimmed are one atomic step; both expire after the history's age.

use std::sync::Arc;
use std::time::Duration;

use holdfast_lifecycle::BoxFuture;

use crate::cluster::ClusterError;
use crate::history::{Appended, History, HistoryConfig, Pos, Recovery, RoomAnnounce};
use crate::redis_conn::RedisConn;

/// Drops entries over the count (ARGV[2]) or older than the age in ms (ARGV[3]), recording the
/// newest dropped id in KEYS[2].
const TRIM: &str = r"
local function trim(size, ttl)
  local over = redis.call('XLEN', KEYS[1]) - size
  local dropped = nil
  if over > 0 then
    local old = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', over)
    for _, e in ipairs(old) do redis.call('XDEL', KEYS[1], e[1]) end
    if #old > 0 then dropped = old[#old][1] end
  end
  local t = redis.call('TIME')
  local cutoff = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - ttl
  if cutoff > 0 then
    local old = redis.call('XRANGE', KEYS[1], '-', string.format('%.0f', cutoff))
    for _, e in ipairs(old) do redis.call('XDEL', KEYS[1], e[1]) end
    if #old > 0 then dropped = old[#old][1] end
  end
  if dropped then redis.call('SET', KEYS[2], dropped, 'PX', ttl) end
end
";

/// Appends ARGV[1], trims, refreshes the expiries; answers {the new id, the id before it, 1 when
/// the append created the stream else 0}. When
/// the append creates the stream (a new room, or one whose stream expired or was flushed), the
/// id just below the new one is recorded as dropped, and is the id before it: the history starts
/// there, and any `since` before it is a gap. When ARGV[4] names a channel, the JSON object
/// ARGV[5] is published on it with `pos` and `prev` added, in this same atomic step, so
/// subscribers receive a room's messages in stream order, and with `"fresh":true` when the
/// append created the stream (a stream created again starts over: see `gateway.history.restart`).
const APPEND: &str = r#"
local fresh = redis.call('EXISTS', KEYS[1]) == 0
local prev = nil
if not fresh then
  local info = redis.call('XINFO', 'STREAM', KEYS[1])
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then prev = info[i + 1] end
  end
end
local id = redis.call('XADD', KEYS[1], '*', 'd', ARGV[1])
if fresh then
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  local floor
  if seq == '0' then
    floor = string.format('%.0f', tonumber(ms) - 1) .. '-18446744073709551615'
  else
    floor = ms .. '-' .. string.format('%.0f', tonumber(seq) - 1)
  end
  redis.call('SET', KEYS[2], floor, 'PX', ARGV[3])
  prev = floor
end
trim(tonumber(ARGV[2]), tonumber(ARGV[3]))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
if ARGV[4] ~= '' then
  local m = string.sub(ARGV[5], 1, -2) .. ',"pos":"' .. id .. '","prev":"' .. prev .. '"'
  if fresh then m = m .. ',"fresh":true' end
  redis.call('PUBLISH', ARGV[4], m .. '}')
end
if fresh then return {id, prev, 1} end
return {id, prev, 0}
"#;

/// Trims, then answers {exists, newest dropped id, last id assigned, id, text, id, text...} of
/// the entries from ARGV[4] on. The last id assigned is the stream's, not its last entry's: a
/// stream whose entries were all trimmed still knows what it assigned.
const READ: &str = r"
trim(tonumber(ARGV[2]), tonumber(ARGV[3]))
local exists = redis.call('EXISTS', KEYS[1])
local dropped = redis.call('GET', KEYS[2])
local out = {exists, dropped, false}
if exists == 1 then
  local info = redis.call('XINFO', 'STREAM', KEYS[1])
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then out[3] = info[i + 1] end
  end
end
for _, e in ipairs(redis.call('XRANGE', KEYS[1], ARGV[4], '+', 'COUNT', ARGV[2])) do
  table.insert(out, e[1])
  table.insert(out, e[2][2])
end
return out
";

/// Room history in Redis Streams.
#[derive(Clone)]
pub struct RedisHistory {
    conn: RedisConn,
    prefix: String,
    append: Arc<redis::Script>,
    read: Arc<redis::Script>,
}

impl std::fmt::Debug for RedisHistory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password: never print it.
        f.debug_struct("RedisHistory")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisHistory {
    /// A history on the Redis at `url`, its keys under `prefix`; every call is bounded by
    /// `timeout`. Nothing is connected until first use.
    pub fn new(url: &str, prefix: &str, timeout: Duration) -> Result<Self, ClusterError> {
        Ok(Self {
            conn: RedisConn::new(url, timeout)?,
            prefix: prefix.to_owned(),
            append: Arc::new(redis::Script::new(&format!("{TRIM}{APPEND}"))),
            read: Arc::new(redis::Script::new(&format!("{TRIM}{READ}"))),
        })
    }

    fn keys(&self, room: &str) -> (String, String) {
        (
            format!("{}history:{}", self.prefix, room),
            format!("{}history-dropped:{}", self.prefix, room),
        )
    }
}

impl RedisHistory {
    /// Runs the append script, publishing `(channel, message)` with it when given.
    fn append_script(
        &self,
        room: &str,
        text: &str,
        config: &HistoryConfig,
        publish: Option<(String, String)>,
    ) -> BoxFuture<Result<Appended, ClusterError>> {
        let (stream, dropped) = self.keys(room);
        let text = text.to_owned();
        let (size, ttl) = (config.size, ttl_ms(config));
        let script = self.append.clone();
        let published = publish.is_some();
        let (channel, message) = publish.unwrap_or_default();
        let call = self.conn.call(move |mut c| async move {
            script
                .key(stream)
                .key(dropped)
                .arg(text)
                .arg(size)
                .arg(ttl)
                .arg(channel)
                .arg(message)
                .invoke_async::<(String, String, i64)>(&mut c)
                .await
        });
        Box::pin(async move {
            let (pos, prev, fresh) = call.await?;
            Ok(Appended {
                pos: id(&pos)?,
                prev: Some(id(&prev)?),
                published,
                fresh: fresh == 1,
            })
        })
    }
}

fn ttl_ms(config: &HistoryConfig) -> u64 {
    u64::try_from(config.ttl.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

fn id(s: &str) -> Result<Pos, ClusterError> {
    s.parse()
        .map_err(|_| ClusterError::Unavailable(format!("redis: not a stream id: {s:?}")))
}

// r[impl gateway.history.redis]
impl History for RedisHistory {
    fn append(
        &self,
        room: &str,
        text: &str,
        config: &HistoryConfig,
    ) -> BoxFuture<Result<Pos, ClusterError>> {
        let call = self.append_script(room, text, config, None);
        Box::pin(async move { Ok(call.await?.pos) })
    }

    // r[impl gateway.history.order+2]
    fn append_announced(
        &self,
        room: &str,
        text: &str,
        config: &HistoryConfig,
        announce: &RoomAnnounce,
    ) -> BoxFuture<Result<Appended, ClusterError>> {
        let publish = announce
            .channel
            .as_ref()
            .filter(|_| announce.message.ends_with('}'))
            .map(|c| (c.clone(), announce.message.clone()));
        self.append_script(room, text, config, publish)
    }

    fn since(
        &self,
        room: &str,
        since: Pos,
        config: &HistoryConfig,
    ) -> BoxFuture<Result<Recovery, ClusterError>> {
        let (stream, dropped) = self.keys(room);
        let (size, ttl) = (config.size, ttl_ms(config));
        let next = match since.lo.checked_add(1) {
            Some(lo) => Pos { hi: since.hi, lo },
            None => Pos {
                hi: since.hi.saturating_add(1),
                lo: 0,
            },
        };
        let script = self.read.clone();
        let call = self.conn.call(move |mut c| async move {
            script
                .key(stream)
                .key(dropped)
                .arg("")
                .arg(size)
                .arg(ttl)
                .arg(next.to_string())
                .invoke_async::<Vec<redis::Value>>(&mut c)
                .await
        });
        Box::pin(async move {
            let reply = call.await?;
            let text = |v: &redis::Value| -> Option<String> {
                redis::from_redis_value_ref::<Option<String>>(v)
                    .ok()
                    .flatten()
            };
            let exists = reply
                .first()
                .and_then(|v| redis::from_redis_value_ref::<i64>(v).ok())
                .unwrap_or(0);
            if exists == 0 {
                // Nothing kept: the room aged out, or never had a message.
                return Ok(Recovery::Gap);
            }
            let dropped = reply.get(1).and_then(text).map(|s| id(&s)).transpose()?;
            let last = reply.get(2).and_then(text).map(|s| id(&s)).transpose()?;
            if last.is_some_and(|l| since > l) {
                return Ok(Recovery::Future);
            }
            if dropped.is_some_and(|d| d > since) {
                return Ok(Recovery::Gap);
            }
            Ok(Recovery::Messages(entries(&reply)?))
        })
    }

    fn held(
        &self,
        room: &str,
        config: &HistoryConfig,
    ) -> BoxFuture<Result<Vec<(Pos, String)>, ClusterError>> {
        let (stream, dropped) = self.keys(room);
        let (size, ttl) = (config.size, ttl_ms(config));
        let script = self.read.clone();
        let call = self.conn.call(move |mut c| async move {
            script
                .key(stream)
                .key(dropped)
                .arg("")
                .arg(size)
                .arg(ttl)
                .arg("-")
                .invoke_async::<Vec<redis::Value>>(&mut c)
                .await
        });
        Box::pin(async move { entries(&call.await?) })
    }

    fn last_assigned(
        &self,
        room: &str,
        config: &HistoryConfig,
    ) -> BoxFuture<Result<Option<Pos>, ClusterError>> {
        let (stream, dropped) = self.keys(room);
        let (size, ttl) = (config.size, ttl_ms(config));
        let script = self.read.clone();
        let call = self.conn.call(move |mut c| async move {
            script
                .key(stream)
                .key(dropped)
                .arg("")
                .arg(size)
                .arg(ttl)
                .arg("+")
                .invoke_async::<Vec<redis::Value>>(&mut c)
                .await
        });
        Box::pin(async move {
            let reply = call.await?;
            let last = reply.get(2).and_then(|v| {
                redis::from_redis_value_ref::<Option<String>>(v)
                    .ok()
                    .flatten()
            });
            // No stream: a stream created later starts after the room's every earlier message.
            Ok(Some(last.map(|s| id(&s)).transpose()?.unwrap_or_default()))
        })
    }
}

/// The entries of a READ script's reply (after its three leading fields).
fn entries(reply: &[redis::Value]) -> Result<Vec<(Pos, String)>, ClusterError> {
    let text = |v: &redis::Value| -> Option<String> {
        redis::from_redis_value_ref::<Option<String>>(v)
            .ok()
            .flatten()
    };
    let mut messages = Vec::new();
    for pair in reply.get(3..).unwrap_or_default().chunks(2) {
        if let [i, t] = pair
            && let (Some(i), Some(t)) = (text(i), text(t))
        {
            messages.push((id(&i)?, t));
        }
    }
    Ok(messages)
}
