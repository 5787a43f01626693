//! Room history and recovery: each room keeps its recent messages, each with a stream position,
//! so that a client that reconnects can ask for what it missed (`{"type":"join","room":R,
//! "since":POS}`). In memory on one replica ([`MemoryHistory`]); in a cluster in Redis Streams
//! ([`crate::RedisHistory`]).
//!
//! A position is `A-B`, two unsigned integers compared as a pair: a Redis stream id in a cluster
//! (comparable across replicas, the server assigns them), and on one replica the gateway's start
//! time in Unix milliseconds and a counter; a position from another start (or another
//! replica's memory) is answered with a gap.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use holdfast_lifecycle::BoxFuture;

use crate::error::ClusterError;

/// The default number of messages a room keeps.
pub const DEFAULT_HISTORY_SIZE: usize = 100;
/// The default age after which a message leaves its room's history.
pub const DEFAULT_HISTORY_TTL: Duration = Duration::from_secs(300);
/// The default cap on the bytes of every room's history together (in memory).
pub const DEFAULT_HISTORY_MAX_BYTES: usize = 64 * 1024 * 1024;

/// How much history rooms keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryConfig {
    /// Messages kept per room (0: no history; a join with `since` is always told of a gap).
    pub size: usize,
    /// The age after which a message is dropped.
    pub ttl: Duration,
    /// The bytes of message text kept across all rooms (in memory; in Redis each room is bound
    /// by `size` messages of at most the message size limit, and expires after `ttl`).
    pub max_bytes: usize,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        Self {
            size: DEFAULT_HISTORY_SIZE,
            ttl: DEFAULT_HISTORY_TTL,
            max_bytes: DEFAULT_HISTORY_MAX_BYTES,
        }
    }
}

/// A stream position: `A-B`, ordered as the pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Pos {
    /// The high part: Unix milliseconds (a Redis stream id's time, or the replica's start).
    pub hi: u64,
    /// The low part: a sequence within `hi`.
    pub lo: u64,
}

impl std::fmt::Display for Pos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.hi, self.lo)
    }
}

impl serde::Serialize for Pos {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A position that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad position")]
pub struct BadPos;

impl std::str::FromStr for Pos {
    type Err = BadPos;

    fn from_str(s: &str) -> Result<Self, BadPos> {
        let (hi, lo) = s.split_once('-').ok_or(BadPos)?;
        let digits = |p: &str| {
            if p.is_empty() || p.len() > 20 || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(BadPos);
            }
            p.parse::<u64>().map_err(|_| BadPos)
        };
        Ok(Pos {
            hi: digits(hi)?,
            lo: digits(lo)?,
        })
    }
}

/// What a join with `since` finds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    /// Every message after `since`, in position order (possibly none).
    Messages(Vec<(Pos, String)>),
    /// The history no longer reaches back to `since`: messages after it are gone.
    Gap,
    /// `since` is later than anything this room's stream has assigned.
    Future,
}

/// What to publish to every replica in the step that appends a room message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomAnnounce {
    /// The bus channel room messages go on, when the bus can take them from the history
    /// ([`crate::ClusterBus::atomic_room_channel`]).
    pub channel: Option<String>,
    /// The bus message as a JSON object without `pos` and `prev`, which the history adds.
    pub message: String,
}

/// A room message appended to its history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Its position.
    pub pos: Pos,
    /// The position before it in the room's stream, when it was published with the append.
    pub prev: Option<Pos>,
    /// Whether the history published it to every replica in the step that appended it (then
    /// nothing else must broadcast it).
    pub published: bool,
    /// Whether the append created the room's stream (new, or created again after it expired or
    /// was deleted): its positions start over here, and nothing before it is missing.
    pub fresh: bool,
    /// The first position of the stream it was appended to (its identity: a stream created
    /// again has another), when this history keeps one.
    pub start: Option<Pos>,
}

/// Where a room's stream stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamPlace {
    /// The last position it assigned (`Pos::default()` when it has no record).
    pub last: Pos,
    /// Its identity (its first position), when the history keeps one.
    pub start: Option<Pos>,
}

/// Where room history is kept.
pub trait History: Send + Sync + 'static {
    /// Appends `text` to `room`'s history and answers its position.
    fn append(
        &self,
        room: &str,
        text: &str,
        config: &HistoryConfig,
    ) -> BoxFuture<Result<Pos, ClusterError>>;
    /// Appends `text` and, when this history can, publishes `announce` with the message's
    /// position and the one before it, in one atomic step: every replica then receives a room's
    /// messages in position order. One that cannot only appends (`published` false).
    fn append_announced(
        &self,
        room: &str,
        text: &str,
        config: &HistoryConfig,
        announce: &RoomAnnounce,
    ) -> BoxFuture<Result<Appended, ClusterError>> {
        let _ = announce;
        let append = self.append(room, text, config);
        Box::pin(async move {
            Ok(Appended {
                pos: append.await?,
                prev: None,
                published: false,
                fresh: false,
                start: None,
            })
        })
    }
    /// What `room`'s history holds after `since`.
    fn since(
        &self,
        room: &str,
        since: Pos,
        config: &HistoryConfig,
    ) -> BoxFuture<Result<Recovery, ClusterError>>;
    /// The last position `room`'s history assigned (`Some(Pos::default())` when it has no
    /// record: every later message is after it); `None` when this history cannot tell.
    fn last_assigned(
        &self,
        room: &str,
        config: &HistoryConfig,
    ) -> BoxFuture<Result<Option<Pos>, ClusterError>> {
        let _ = (room, config);
        Box::pin(async { Ok(None) })
    }
    /// As [`History::last_assigned`], with the first position of the room's stream (its
    /// identity) when this history keeps one, both read in one step.
    fn last_assigned_in_stream(
        &self,
        room: &str,
        config: &HistoryConfig,
    ) -> BoxFuture<Result<Option<StreamPlace>, ClusterError>> {
        let last = self.last_assigned(room, config);
        Box::pin(async move { Ok(last.await?.map(|last| StreamPlace { last, start: None })) })
    }
    /// Every message `room`'s history still holds, in position order, when `since` answers a
    /// gap (to deliver what is left of one). A history that cannot tell answers none.
    fn held(
        &self,
        room: &str,
        config: &HistoryConfig,
    ) -> BoxFuture<Result<Vec<(Pos, String)>, ClusterError>> {
        let _ = (room, config);
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// One room's retained messages.
#[derive(Debug)]
struct Room {
    entries: VecDeque<Entry>,
    /// Where this room's history starts: every message of the room after it is still held. Set
    /// when the record is (re)created to the last position assigned before it (so messages of
    /// a forgotten earlier record are below it), and raised to each position dropped.
    floor: Pos,
}

#[derive(Debug)]
struct Entry {
    pos: Pos,
    at: Instant,
    text: String,
}

#[derive(Debug, Default)]
struct State {
    rooms: HashMap<String, Room>,
    /// Each non-empty room's oldest position: the byte cap drops the oldest message of all.
    fronts: BTreeMap<Pos, String>,
    bytes: usize,
    next: u64,
}

/// Room history in memory, for one replica.
#[derive(Debug)]
pub struct MemoryHistory {
    epoch: u64,
    state: Mutex<State>,
}

impl Default for MemoryHistory {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryHistory {
    /// An empty history whose positions start at the current time.
    pub fn new() -> Self {
        let epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Self::with_epoch(epoch)
    }

    /// An empty history whose positions are `epoch-N`.
    pub fn with_epoch(epoch: u64) -> Self {
        Self {
            epoch,
            state: Mutex::new(State::default()),
        }
    }

    /// The bytes of message text held.
    pub fn bytes(&self) -> usize {
        crate::sync::lock(&self.state).bytes
    }

    // r[impl gateway.history.bounds+2]
    /// Appends now (see [`History::append`]).
    pub fn append_at(&self, room: &str, text: &str, config: &HistoryConfig, now: Instant) -> Pos {
        let mut s = crate::sync::lock(&self.state);
        s.next += 1;
        let pos = Pos {
            hi: self.epoch,
            lo: s.next,
        };
        let floor = Pos {
            hi: self.epoch,
            lo: s.next - 1,
        };
        if config.size == 0 || text.len() > config.max_bytes {
            // Kept nowhere: a later join with `since` before it learns of the gap. An empty
            // record is not kept: the next one's floor is at least `pos`.
            if let Some(r) = s.rooms.get_mut(room) {
                r.floor = pos;
                if r.entries.is_empty() {
                    s.rooms.remove(room);
                }
            }
            return pos;
        }
        let state = &mut *s;
        let r = state.rooms.entry(room.to_owned()).or_insert_with(|| Room {
            entries: VecDeque::new(),
            floor,
        });
        if r.entries.is_empty() {
            state.fronts.insert(pos, room.to_owned());
        }
        r.entries.push_back(Entry {
            pos,
            at: now,
            text: text.to_owned(),
        });
        state.bytes += text.len();
        expire_room(state, room, config, now);
        expire_oldest(state, config, now);
        while state.bytes > config.max_bytes {
            let Some((_, oldest)) = state.fronts.iter().next().map(|(p, r)| (*p, r.clone())) else {
                break;
            };
            drop_front(state, &oldest);
        }
        pos
    }

    /// Reads now (see [`History::since`]).
    pub fn since_at(
        &self,
        room: &str,
        since: Pos,
        config: &HistoryConfig,
        now: Instant,
    ) -> Recovery {
        let mut s = crate::sync::lock(&self.state);
        if since.hi != self.epoch {
            // From another start of this replica (earlier, or later under a clock stepped back),
            // or from another replica's memory: what came after it there is not here.
            return Recovery::Gap;
        }
        let last = Pos {
            hi: self.epoch,
            lo: s.next,
        };
        if since > last {
            return Recovery::Future;
        }
        expire_room(&mut s, room, config, now);
        let Some(r) = s.rooms.get(room) else {
            // No record: nothing kept here, but messages after `since` may have been (before
            // they aged out with their room).
            return if since == last {
                Recovery::Messages(Vec::new())
            } else {
                Recovery::Gap
            };
        };
        if since < r.floor {
            return Recovery::Gap;
        }
        Recovery::Messages(
            r.entries
                .iter()
                .filter(|e| e.pos > since)
                .map(|e| (e.pos, e.text.clone()))
                .collect(),
        )
    }
}

/// Drops `room`'s messages past its count or age.
fn expire_room(state: &mut State, room: &str, config: &HistoryConfig, now: Instant) {
    loop {
        let Some(r) = state.rooms.get(room) else {
            return;
        };
        let Some(front) = r.entries.front() else {
            return;
        };
        let old = now.saturating_duration_since(front.at) >= config.ttl;
        if r.entries.len() > config.size || old {
            drop_front(state, room);
        } else {
            return;
        }
    }
}

/// Drops the oldest messages of all rooms while they are past the age, so that rooms nobody
/// touches again do not outlive it (positions are assigned in time order, so the oldest position
/// is the oldest message).
fn expire_oldest(state: &mut State, config: &HistoryConfig, now: Instant) {
    loop {
        let Some(room) = state.fronts.values().next().cloned() else {
            return;
        };
        let old = state
            .rooms
            .get(&room)
            .and_then(|r| r.entries.front())
            .is_some_and(|e| now.saturating_duration_since(e.at) >= config.ttl);
        if !old {
            return;
        }
        drop_front(state, &room);
    }
}

/// Drops `room`'s oldest message, keeping its position as dropped.
fn drop_front(state: &mut State, room: &str) {
    let Some(r) = state.rooms.get_mut(room) else {
        return;
    };
    let Some(e) = r.entries.pop_front() else {
        return;
    };
    state.fronts.remove(&e.pos);
    state.bytes -= e.text.len();
    r.floor = e.pos;
    match r.entries.front() {
        Some(next) => {
            state.fronts.insert(next.pos, room.to_owned());
        }
        // An empty room is forgotten, so rooms do not pile up: a join with `since` before the
        // next message is told of a gap (no record), and the next record's floor is at least
        // this position, so a join with `since` before it is too.
        None => {
            state.rooms.remove(room);
        }
    }
}

impl History for MemoryHistory {
    fn append(
        &self,
        room: &str,
        text: &str,
        config: &HistoryConfig,
    ) -> BoxFuture<Result<Pos, ClusterError>> {
        let pos = self.append_at(room, text, config, Instant::now());
        Box::pin(async move { Ok(pos) })
    }

    fn since(
        &self,
        room: &str,
        since: Pos,
        config: &HistoryConfig,
    ) -> BoxFuture<Result<Recovery, ClusterError>> {
        let r = self.since_at(room, since, config, Instant::now());
        Box::pin(async move { Ok(r) })
    }
}

// r[impl gateway.history.position]
/// The text a room member receives: a JSON object pushed gets `"room"` and `"pos"` as its
/// first members (when it has neither at its top level); anything else is wrapped as
/// `{"room":R,"pos":P,"type":"message","text":TEXT}`.
pub fn frame(room: &str, pos: Pos, text: &str) -> String {
    let head = format!(
        "{{\"room\":{},\"pos\":\"{pos}\"",
        serde_json::Value::from(room)
    );
    if let Ok(serde_json::Value::Object(map)) = serde_json::from_str::<serde_json::Value>(text)
        && !map.contains_key("room")
        && !map.contains_key("pos")
    {
        let body = text
            .trim_start()
            .strip_prefix('{')
            .unwrap_or("}")
            .trim_start();
        return if body.starts_with('}') {
            format!("{head}}}")
        } else {
            format!("{head},{body}")
        };
    }
    format!(
        "{head},\"type\":\"message\",\"text\":{}}}",
        serde_json::Value::from(text)
    )
}

/// The room and position a framed text starts with ([`frame`]), if it does.
pub fn framed_pos(text: &str) -> Option<(String, Pos)> {
    let rest = text.strip_prefix("{\"room\":")?;
    let mut de = serde_json::Deserializer::from_str(rest).into_iter::<String>();
    let room = de.next()?.ok()?;
    let rest = rest.get(de.byte_offset()..)?.strip_prefix(",\"pos\":\"")?;
    let end = rest.find('"')?;
    Some((room, rest[..end].parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn config(size: usize, max_bytes: usize) -> HistoryConfig {
        HistoryConfig {
            size,
            ttl: Duration::from_secs(60),
            max_bytes,
        }
    }

    // r[verify gateway.history.position]
    #[test]
    fn positions_parse_print_and_order_as_pairs() {
        let p: Pos = "1700000000000-12".parse().unwrap();
        assert_eq!(p.to_string(), "1700000000000-12");
        assert!("5-2".parse::<Pos>().unwrap() < "5-10".parse().unwrap());
        assert!("5-99".parse::<Pos>().unwrap() < "6-0".parse().unwrap());
        for bad in [
            "",
            "5",
            "-1",
            "1-",
            "a-1",
            "1-2-3",
            "+1-2",
            "1 -2",
            "99999999999999999999-0",
        ] {
            assert!(bad.parse::<Pos>().is_err(), "{bad}");
        }
    }

    // r[verify gateway.history.position]
    #[test]
    fn a_framed_message_carries_its_room_and_position_first() {
        let p = Pos { hi: 7, lo: 3 };
        assert_eq!(
            frame("lobby", p, r#"{"seq":1}"#),
            r#"{"room":"lobby","pos":"7-3","seq":1}"#
        );
        assert_eq!(frame("a", p, " { } "), r#"{"room":"a","pos":"7-3"}"#);
        assert_eq!(
            frame("a", p, "hello"),
            r#"{"room":"a","pos":"7-3","type":"message","text":"hello"}"#
        );
        assert_eq!(
            frame("a", p, r#"{"pos":1}"#),
            r#"{"room":"a","pos":"7-3","type":"message","text":"{\"pos\":1}"}"#
        );
        for text in [r#"{"seq":1}"#, "hi", "[1]", r#"{"room":"x"}"#] {
            let f = frame("r\"oom", p, text);
            serde_json::from_str::<serde_json::Value>(&f).unwrap();
            assert_eq!(framed_pos(&f), Some(("r\"oom".to_owned(), p)));
        }
        assert_eq!(framed_pos(r#"{"seq":1}"#), None);
    }

    // r[verify gateway.history.recover]
    #[test]
    fn a_join_since_gets_what_followed_or_hears_of_a_gap_or_the_future() {
        let h = MemoryHistory::with_epoch(100);
        let c = config(3, 1 << 20);
        let now = Instant::now();
        let p: Vec<Pos> = (0..5)
            .map(|i| h.append_at("r", &format!("m{i}"), &c, now))
            .collect();
        let texts = |r: Recovery| match r {
            Recovery::Messages(m) => m.into_iter().map(|(_, t)| t).collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(texts(h.since_at("r", p[2], &c, now)), ["m3", "m4"]);
        assert_eq!(texts(h.since_at("r", p[4], &c, now)), Vec::<String>::new());
        // m1 and m0 were dropped for the count: a client that saw only m0 missed m1.
        assert_eq!(h.since_at("r", p[0], &c, now), Recovery::Gap);
        assert_eq!(
            h.since_at("r", p[1], &c, now),
            Recovery::Messages(vec![
                (p[2], "m2".into()),
                (p[3], "m3".into()),
                (p[4], "m4".into())
            ])
        );
        assert_eq!(
            h.since_at("r", Pos { hi: 100, lo: 99 }, &c, now),
            Recovery::Future
        );
        // Another start's position (a later epoch: the clock stepped back) is a gap.
        assert_eq!(
            h.since_at("r", Pos { hi: 101, lo: 0 }, &c, now),
            Recovery::Gap
        );
        // A position from an earlier start of the replica.
        assert_eq!(
            h.since_at("r", Pos { hi: 99, lo: 1 }, &c, now),
            Recovery::Gap
        );
        // Aged out.
        let later = now + Duration::from_secs(61);
        assert_eq!(h.since_at("r", p[3], &c, later), Recovery::Gap);
        assert_eq!(h.bytes(), 0, "the aged room is forgotten");
    }

    // r[verify gateway.history.bounds+2]
    #[test]
    fn the_byte_cap_drops_the_oldest_message_of_all_rooms() {
        let h = MemoryHistory::with_epoch(1);
        let c = config(100, 10);
        let now = Instant::now();
        let a = h.append_at("a", "aaaa", &c, now);
        let b = h.append_at("b", "bbbb", &c, now);
        h.append_at("b", "cccc", &c, now);
        assert!(h.bytes() <= 10);
        // "a" lost its only message to the cap and was forgotten: a client that saw it is told
        // of a gap (nothing says no other message came and went).
        assert_eq!(h.since_at("a", a, &c, now), Recovery::Gap);
        assert_eq!(
            h.since_at("a", Pos { hi: 1, lo: 0 }, &c, now),
            Recovery::Gap
        );
        assert!(matches!(h.since_at("b", b, &c, now), Recovery::Messages(m) if m.len() == 1));
        // Larger than the cap: kept nowhere, and a join since before it hears of the gap.
        let before = h.append_at("b", "x", &c, now);
        h.append_at("b", "y".repeat(11).as_str(), &c, now);
        assert_eq!(h.since_at("b", before, &c, now), Recovery::Gap);
    }

    proptest! {
        // r[verify gateway.history.position]
        /// A position a peer sends: any string parses or is refused without a panic, and every
        /// position prints as a string that parses back to it.
        #[test]
        fn any_since_string_parses_or_is_refused_and_positions_round_trip(
            s in ".{0,48}",
            digits in "[0-9]{0,22}-[0-9]{0,22}",
            hi in any::<u64>(),
            lo in any::<u64>(),
        ) {
            let _ = s.parse::<Pos>();
            if let Ok(p) = digits.parse::<Pos>() {
                prop_assert_eq!(p.to_string().parse::<Pos>(), Ok(p));
            }
            let p = Pos { hi, lo };
            prop_assert_eq!(p.to_string().parse::<Pos>(), Ok(p));
        }

        // r[verify gateway.history.position]
        /// Any room and text framed is JSON whose room and position read back.
        #[test]
        fn any_framed_message_is_json_and_reads_back(
            room in ".{0,16}",
            text in ".{0,64}",
            hi in any::<u64>(),
            lo in any::<u64>(),
        ) {
            let p = Pos { hi, lo };
            let f = frame(&room, p, &text);
            prop_assert!(serde_json::from_str::<serde_json::Value>(&f).is_ok(), "{}", f);
            prop_assert_eq!(framed_pos(&f), Some((room, p)));
        }

        // r[verify gateway.history.recover]
        /// Under the age and byte caps too, with another room's traffic and the room emptied
        /// and refilled: a rejoin's answer is either every message after `since`, once each, in
        /// order, or a gap; never a silent loss.
        #[test]
        fn a_rejoin_never_silently_misses_under_the_age_and_byte_caps(
            ops in proptest::collection::vec((any::<bool>(), 0u64..40, 1usize..12), 0..60),
            seen in 0usize..60,
            max_bytes in 1usize..48,
            size in 1usize..10,
            read_late in 0u64..80,
        ) {
            let h = MemoryHistory::with_epoch(9);
            let c = HistoryConfig { size, ttl: Duration::from_millis(30), max_bytes };
            let t0 = Instant::now();
            let mut at = 0u64;
            let mut mine = Vec::new();
            let mut since = Pos { hi: 9, lo: 0 };
            for (i, (other, wait, len)) in ops.iter().enumerate() {
                at += wait;
                let now = t0 + Duration::from_millis(at);
                let text = "x".repeat(*len);
                if *other {
                    h.append_at("other", &text, &c, now);
                    // Someone else reads r now and then: ages it out, maybe forgets it.
                    let _ = h.since_at("r", Pos { hi: 9, lo: 0 }, &c, now);
                } else {
                    let p = h.append_at("r", &text, &c, now);
                    mine.push(p);
                }
                if i + 1 == seen {
                    since = mine.last().copied().unwrap_or(since);
                }
            }
            let now = t0 + Duration::from_millis(at + read_late);
            let expected: Vec<Pos> = mine.iter().copied().filter(|p| *p > since).collect();
            match h.since_at("r", since, &c, now) {
                Recovery::Messages(got) => {
                    let got: Vec<Pos> = got.into_iter().map(|(p, _)| p).collect();
                    prop_assert_eq!(got, expected);
                }
                Recovery::Gap => {}
                Recovery::Future => prop_assert!(false, "no position from the future here"),
            }
        }

        // r[verify gateway.history.recover]
        /// Any interleaving of publishes with a client that leaves after seeing some of them and
        /// rejoins with `since`: the backlog plus what arrives live after the rejoin is every
        /// message after `since`, once each, in order; or a gap when the count dropped some.
        #[test]
        fn a_rejoin_gets_each_missed_message_once_in_order(
            seen in 0usize..20,
            away in 0usize..20,
            racing in 0usize..5,
            after in 0usize..5,
            size in 1usize..30,
        ) {
            let h = MemoryHistory::with_epoch(9);
            let c = config(size, 1 << 20);
            let now = Instant::now();
            let mut all = Vec::new();
            let publish = |all: &mut Vec<(Pos, String)>| {
                let t = format!("m{}", all.len());
                let p = h.append_at("r", &t, &c, now);
                all.push((p, t));
            };
            for _ in 0..seen { publish(&mut all); }
            let since = all.last().map_or(Pos { hi: 9, lo: 0 }, |(p, _)| *p);
            for _ in 0..away { publish(&mut all); }
            // The rejoin: the connection is a member first, so what is published from here on
            // is also queued live; then the history is read.
            let mut live = Vec::new();
            for _ in 0..racing { publish(&mut all); live.push(all.last().cloned().unwrap()); }
            let backlog = h.since_at("r", since, &c, now);
            for _ in 0..after { publish(&mut all); live.push(all.last().cloned().unwrap()); }
            let expected: Vec<(Pos, String)> = all.iter().filter(|(p, _)| *p > since).cloned().collect();
            match backlog {
                Recovery::Messages(backlog) => {
                    prop_assert!(away + racing <= size);
                    let through = backlog.last().map_or(since, |(p, _)| *p);
                    let mut got = backlog.clone();
                    // The connection drops live messages the backlog already held.
                    got.extend(live.into_iter().filter(|(p, _)| *p > through));
                    prop_assert_eq!(got, expected);
                }
                Recovery::Gap => prop_assert!(away + racing > size),
                Recovery::Future => prop_assert!(false, "no position from the future here"),
            }
        }
    }
}

#[cfg(test)]
/// The review's cases (B1, S2): a room whose history emptied, and another start's position.
mod review_tests {
    use super::*;
    fn cfg(size: usize, ttl_ms: u64, max_bytes: usize) -> HistoryConfig {
        HistoryConfig {
            size,
            ttl: Duration::from_millis(ttl_ms),
            max_bytes,
        }
    }

    // r[verify gateway.history.recover]
    #[test]
    fn rv_forgotten_room_then_new_message_hides_gap_ttl() {
        let h = MemoryHistory::with_epoch(5);
        let c = cfg(100, 1000, 1 << 20);
        let t0 = Instant::now();
        let p1 = h.append_at("r", "m1", &c, t0);
        let _p2 = h.append_at("r", "m2", &c, t0);
        // client saw m1 only. After ttl, someone else reads the room: it is expired and forgotten.
        let later = t0 + Duration::from_millis(1500);
        let _ = h.since_at("r", p1, &c, later);
        let p3 = h.append_at("r", "m3", &c, later);
        let got = h.since_at("r", p1, &c, later);
        assert_eq!(got, Recovery::Gap, "m2 was missed: got {got:?} (p3 {p3})");
    }

    // r[verify gateway.history.recover]
    #[test]
    fn rv_forgotten_room_then_new_message_hides_gap_bytes() {
        let h = MemoryHistory::with_epoch(5);
        let c = cfg(100, 60_000, 8);
        let t0 = Instant::now();
        let p1 = h.append_at("r", "m1", &c, t0);
        h.append_at("r", "m2", &c, t0); // client misses m2
        h.append_at("other", "xxxxxxxx", &c, t0); // byte cap evicts all of r: r forgotten
        h.append_at("other", "y", &c, t0); // other: drop so r... 
        h.append_at("r", "m3", &c, t0);
        let got = h.since_at("r", p1, &c, t0);
        assert_eq!(got, Recovery::Gap, "m2 was missed: got {got:?}");
    }

    // r[verify gateway.history.recover]
    #[test]
    fn rv_oversized_message_in_empty_room_then_new_message_hides_gap() {
        let h = MemoryHistory::with_epoch(5);
        let c = cfg(100, 60_000, 4);
        let t0 = Instant::now();
        let p1 = h.append_at("r", "m1", &c, t0);
        let t1 = t0 + Duration::from_secs(61); // m1 ages out by the next append
        h.append_at("r", "m2", &c, t1);
        let _ = h.since_at("r", p1, &c, t1 + Duration::from_secs(61)); // room emptied, forgotten
        let t2 = t1 + Duration::from_secs(61);
        h.append_at("r", "toolong", &c, t2); // kept nowhere, record removed at once
        h.append_at("r", "m4", &c, t2);
        let p4 = Pos { hi: 5, lo: 2 };
        let got = h.since_at("r", p4, &c, t2);
        assert_eq!(got, Recovery::Gap, "'toolong' was missed: got {got:?}");
    }

    // r[verify gateway.history.position]
    #[test]
    fn rv_restart_with_clock_stepped_back_is_a_gap_not_future() {
        let before = MemoryHistory::with_epoch(1_000);
        let c = cfg(100, 60_000, 1 << 20);
        let p = before.append_at("r", "m", &c, Instant::now());
        let after = MemoryHistory::with_epoch(999); // restarted, clock 1 ms behind
        after.append_at("r", "n", &c, Instant::now());
        assert_eq!(after.since_at("r", p, &c, Instant::now()), Recovery::Gap);
    }
}

#[cfg(test)]
/// The review's case (S4): rooms nobody touches again outlive their age.
mod review_tests2 {
    use super::*;
    // r[verify gateway.history.bounds+2]
    #[test]
    fn rv_tiny_messages_in_many_rooms_are_not_bounded_by_the_byte_cap() {
        let h = MemoryHistory::with_epoch(5);
        let c = HistoryConfig {
            size: 100,
            ttl: Duration::from_millis(10),
            max_bytes: 1,
        };
        let t0 = Instant::now();
        for i in 0..200_000 {
            h.append_at(&format!("room-{i}"), "", &c, t0);
        }
        let later = t0 + Duration::from_secs(3600);
        h.append_at("another", "", &c, later);
        let s = crate::sync::lock(&h.state);
        assert!(
            s.rooms.len() < 1000,
            "rooms held past their age with a 1-byte cap: {} (bytes {})",
            s.rooms.len(),
            s.bytes
        );
    }
}
