//! Room history in Redis Streams, shared by every replica of a cluster.
//!
//! One stream per room (`{prefix}history:{room}`), its entries `d → text`, its ids the
//! positions, comparable across replicas: Redis assigns them, except the second part of a new
//! stream's first id, which the appending replica draws at random. Next to it
//! `{prefix}history-dropped:{room}` holds the newest id trimmed away (or, when an append created
//! the stream, the id just below its first entry), which is how a join tells a gap from a quiet
//! room, and a stream that expired or was flushed from one that never was; and
//! `{prefix}history-start:{room}` the stream's first id, its identity (a stream created again has
//! another, whatever its positions). All are written by Lua scripts, so an append, its trim and
//! the record of what was trimmed are one atomic step; all expire after the history's age.

use std::sync::Arc;
use std::time::Duration;

use holdfast_lifecycle::BoxFuture;

use crate::error::ClusterError;
use crate::history::{Appended, History, HistoryConfig, Pos, Recovery, RoomAnnounce, StreamPlace};
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

// r[impl gateway.history.start-lost]
/// The stream's identity, its first id: KEYS[3], else (the record lost while the stream
/// survives: deleted by hand, or evicted) taken from the stream itself and recorded again for
/// ARGV[3] ms. Every entry carries its stream's first id in its field `s` (empty in the first
/// entry, whose own id it is), so the newest entry that carries it says it however much was
/// trimmed before it. Entries without it (appended by a replica of an earlier version) are
/// passed over, newest first; only a stream none of whose entries carries it falls back to its
/// oldest entry's id. The walk is bounded by the stream's length, which the trim keeps near the
/// history's size, and runs only when the record was lost. Nil for a stream that holds no entry
/// and lost its record.
const START: &str = r"
local function stream_start()
  local s = redis.call('GET', KEYS[3])
  if s then return s end
  local entries = redis.call('XREVRANGE', KEYS[1], '+', '-')
  if not entries[1] then return nil end
  for _, e in ipairs(entries) do
    local f = e[2]
    for i = 1, #f - 1, 2 do
      if f[i] == 's' then
        if f[i + 1] == '' then s = e[1] else s = f[i + 1] end
      end
    end
    if s then break end
  end
  if not s then s = entries[#entries][1] end
  redis.call('SET', KEYS[3], s, 'PX', ARGV[3])
  return s
end
";

/// Appends ARGV[1], trims, refreshes the expiries; answers {the new id, the id before it, 1 when
/// the append created the stream else 0, the stream's first id}. When the append creates the
/// stream (a new room, or one whose stream expired, was flushed or deleted), its id is the
/// current millisecond and ARGV[6] (random, below 2^52 so Lua's numbers hold it exactly), the id
/// just below the new one is recorded as dropped, and is the id before it: the history starts
/// there, and any `since` before it is a gap; and its id is recorded in KEYS[3] as the stream's
/// start, its identity (see `stream_start` for a record lost while the stream survives). Each
/// entry carries the start in its field `s` (empty in the first entry). When ARGV[4] names a
/// channel, the JSON object ARGV[5] is published on it with `pos`, `prev` and `start` added, in
/// this same atomic step, so subscribers receive a room's messages in stream order, each saying
/// which stream it belongs to (see `gateway.history.restart+2`).
const APPEND: &str = r#"
local fresh = redis.call('EXISTS', KEYS[1]) == 0
local prev = nil
local start = nil
if not fresh then
  local info = redis.call('XINFO', 'STREAM', KEYS[1])
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then prev = info[i + 1] end
  end
  start = stream_start()
end
local id
if fresh then
  -- The new stream's first id, its identity, takes the random ARGV[6] for its second part: a
  -- stream created again in the millisecond the one before was created (deleted or flushed
  -- at once) would otherwise get that one's identity and positions, and its messages would be
  -- taken for copies of that one's.
  local t = redis.call('TIME')
  local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  id = redis.call('XADD', KEYS[1], string.format('%.0f', ms) .. '-' .. ARGV[6], 'd', ARGV[1], 's', '')
else
  id = redis.call('XADD', KEYS[1], '*', 'd', ARGV[1], 's', start or '')
end
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
if not start then
  -- A new stream, or one that holds nothing and lost its record: it starts here.
  start = id
  redis.call('SET', KEYS[3], start, 'PX', ARGV[3])
end
trim(tonumber(ARGV[2]), tonumber(ARGV[3]))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('PEXPIRE', KEYS[3], ARGV[3])
if ARGV[4] ~= '' then
  local m = string.sub(ARGV[5], 1, -2) .. ',"pos":"' .. id .. '","prev":"' .. prev .. '","start":"' .. start .. '"'
  redis.call('PUBLISH', ARGV[4], m .. '}')
end
if fresh then return {id, prev, 1, start} end
return {id, prev, 0, start}
"#;

/// Trims, then answers {exists, newest dropped id, last id assigned, the stream's start (KEYS[3],
/// when the stream exists), id, text, id, text...} of the entries from ARGV[4] on. The last id assigned is the stream's, not its last entry's: a
/// stream whose entries were all trimmed still knows what it assigned.
const READ: &str = r"
trim(tonumber(ARGV[2]), tonumber(ARGV[3]))
local exists = redis.call('EXISTS', KEYS[1])
local dropped = redis.call('GET', KEYS[2])
local out = {exists, dropped, false, false}
if exists == 1 then
  out[4] = stream_start() or false
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
            append: Arc::new(redis::Script::new(&format!("{TRIM}{START}{APPEND}"))),
            read: Arc::new(redis::Script::new(&format!("{TRIM}{START}{READ}"))),
        })
    }

    fn keys(&self, room: &str) -> (String, String, String) {
        (
            format!("{}history:{}", self.prefix, room),
            format!("{}history-dropped:{}", self.prefix, room),
            format!("{}history-start:{}", self.prefix, room),
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
        let (stream, dropped, start) = self.keys(room);
        let text = text.to_owned();
        let (size, ttl) = (config.size, ttl_ms(config));
        let script = self.append.clone();
        let published = publish.is_some();
        let (channel, message) = publish.unwrap_or_default();
        // r[impl gateway.history.restart+2]
        // Used only when this append creates the stream: its identity, unlike any earlier one's.
        let first_seq = rand::random_range(0..FIRST_SEQ_BOUND);
        let call = self.conn.call(move |mut c| async move {
            script
                .key(stream)
                .key(dropped)
                .key(start)
                .arg(text)
                .arg(size)
                .arg(ttl)
                .arg(channel)
                .arg(message)
                .arg(first_seq)
                .invoke_async::<(String, String, i64, String)>(&mut c)
                .await
        });
        Box::pin(async move {
            let (pos, prev, fresh, start) = call.await?;
            Ok(Appended {
                pos: id(&pos)?,
                prev: Some(id(&prev)?),
                published,
                fresh: fresh == 1,
                start: Some(id(&start)?),
            })
        })
    }
}

/// The bound of a new stream's first id's random second part: Lua's numbers (doubles) hold every
/// integer below it exactly, which the script's arithmetic on it needs.
const FIRST_SEQ_BOUND: u64 = 1 << 52;

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

    // r[impl gateway.history.order+3]
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
        let (stream, dropped, start) = self.keys(room);
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
                .key(start)
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
        let (stream, dropped, start) = self.keys(room);
        let (size, ttl) = (config.size, ttl_ms(config));
        let script = self.read.clone();
        let call = self.conn.call(move |mut c| async move {
            script
                .key(stream)
                .key(dropped)
                .key(start)
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
        let call = self.last_assigned_in_stream(room, config);
        Box::pin(async move { Ok(call.await?.map(|place| place.last)) })
    }

    fn last_assigned_in_stream(
        &self,
        room: &str,
        config: &HistoryConfig,
    ) -> BoxFuture<Result<Option<StreamPlace>, ClusterError>> {
        let (stream, dropped, start) = self.keys(room);
        let (size, ttl) = (config.size, ttl_ms(config));
        let script = self.read.clone();
        let call = self.conn.call(move |mut c| async move {
            script
                .key(stream)
                .key(dropped)
                .key(start)
                .arg("")
                .arg(size)
                .arg(ttl)
                .arg("+")
                .invoke_async::<Vec<redis::Value>>(&mut c)
                .await
        });
        Box::pin(async move {
            let reply = call.await?;
            let field = |i: usize| {
                reply.get(i).and_then(|v| {
                    redis::from_redis_value_ref::<Option<String>>(v)
                        .ok()
                        .flatten()
                })
            };
            // No stream: a stream created later starts after the room's every earlier message.
            let last = field(2).map(|s| id(&s)).transpose()?.unwrap_or_default();
            let start = field(3).map(|s| id(&s)).transpose()?;
            Ok(Some(StreamPlace { last, start }))
        })
    }
}

/// The entries of a READ script's reply (after its four leading fields).
fn entries(reply: &[redis::Value]) -> Result<Vec<(Pos, String)>, ClusterError> {
    let text = |v: &redis::Value| -> Option<String> {
        redis::from_redis_value_ref::<Option<String>>(v)
            .ok()
            .flatten()
    };
    let mut messages = Vec::new();
    for pair in reply.get(4..).unwrap_or_default().chunks(2) {
        if let [i, t] = pair
            && let (Some(i), Some(t)) = (text(i), text(t))
        {
            messages.push((id(&i)?, t));
        }
    }
    Ok(messages)
}
