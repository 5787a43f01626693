//! The connection registry: every connection from accept to teardown, keyed by connection.
//!
//! Connections live in shards chosen by their id; the user and room indexes are sharded by the
//! hash of the user or room. Every index maps to a set of connection ids, so removing one
//! connection can never remove another connection of the same user (finding H8).

use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasher, Hash};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

use crate::sync::lock;

/// A connection's identity on this replica: unique for the registry's lifetime, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct ConnId(pub u64);

impl std::fmt::Display for ConnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "c{}", self.0)
    }
}

/// What the registry knows of one connection.
#[derive(Debug, Clone)]
struct Entry<H> {
    user: Option<String>,
    rooms: Rooms,
    handle: Option<H>,
}

// r[impl gateway.edge.footprint]
/// A connection's rooms: a few in a sorted vector sized to them, not a `BTreeSet`, whose first
/// node (room for eleven) would cost every connection in one room some 280 bytes; past
/// [`Rooms::FEW`] a set, so a connection allowed any number of rooms
/// (`max_rooms_per_connection = 0`) joins and leaves in O(log rooms), not O(rooms).
#[derive(Debug, Clone)]
enum Rooms {
    Few(Vec<String>),
    Many(BTreeSet<String>),
}

impl Default for Rooms {
    fn default() -> Self {
        Rooms::Few(Vec::new())
    }
}

impl Rooms {
    /// The most rooms the vector holds; the set takes over past it.
    const FEW: usize = 16;

    fn contains(&self, room: &str) -> bool {
        match self {
            Rooms::Few(v) => v.binary_search_by(|r| r.as_str().cmp(room)).is_ok(),
            Rooms::Many(set) => set.contains(room),
        }
    }
    fn len(&self) -> usize {
        match self {
            Rooms::Few(v) => v.len(),
            Rooms::Many(set) => set.len(),
        }
    }
    /// Adds `room`; whether it was new.
    fn insert(&mut self, room: &str) -> bool {
        match self {
            Rooms::Few(v) => match v.binary_search_by(|r| r.as_str().cmp(room)) {
                Ok(_) => false,
                Err(_) if v.len() >= Self::FEW => {
                    let mut set: BTreeSet<String> = std::mem::take(v).into_iter().collect();
                    set.insert(room.to_owned());
                    *self = Rooms::Many(set);
                    true
                }
                Err(at) => {
                    // Exactly one more: most connections join one room or a few.
                    v.reserve_exact(1);
                    v.insert(at, room.to_owned());
                    true
                }
            },
            Rooms::Many(set) => set.insert(room.to_owned()),
        }
    }
    /// Removes `room`; whether it was there.
    fn remove(&mut self, room: &str) -> bool {
        match self {
            Rooms::Few(v) => match v.binary_search_by(|r| r.as_str().cmp(room)) {
                Ok(at) => {
                    v.remove(at);
                    true
                }
                Err(_) => false,
            },
            Rooms::Many(set) => set.remove(room),
        }
    }
    fn iter(&self) -> Box<dyn Iterator<Item = &String> + '_> {
        match self {
            Rooms::Few(v) => Box::new(v.iter()),
            Rooms::Many(set) => Box::new(set.iter()),
        }
    }
    fn into_set(self) -> BTreeSet<String> {
        match self {
            Rooms::Few(v) => v.into_iter().collect(),
            Rooms::Many(set) => set,
        }
    }
}

/// What removing a connection took away, so the caller can clean up what it owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    /// The connection's user, if it had authenticated.
    pub user: Option<String>,
    /// Whether that user still holds another connection on this replica.
    pub user_still_connected: bool,
    /// The rooms it had joined.
    pub rooms: BTreeSet<String>,
}

/// Why an update of the registry was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The connection is not (or no longer) registered.
    #[error("connection {0} is not registered")]
    Unknown(ConnId),
    /// The connection already authenticated, as another user.
    #[error("connection {0} is already authenticated")]
    AlreadyAuthenticated(ConnId),
    /// The connection is already in as many rooms as it may be.
    #[error("connection {0} is already in {1} rooms")]
    TooManyRooms(ConnId, usize),
}

type Index = Mutex<HashMap<String, Ids>>;

// r[impl gateway.edge.footprint]
/// The connections of one user or room: most users hold one connection, and a `BTreeSet`'s
/// first node (room for eleven) would cost each of them some 100 bytes.
#[derive(Debug)]
enum Ids {
    One(ConnId),
    Many(BTreeSet<ConnId>),
}

impl Default for Ids {
    fn default() -> Self {
        Ids::Many(BTreeSet::new())
    }
}

impl Ids {
    fn insert(&mut self, id: ConnId) {
        match self {
            Ids::Many(set) if set.is_empty() => *self = Ids::One(id),
            Ids::Many(set) => {
                set.insert(id);
            }
            Ids::One(one) if *one == id => {}
            Ids::One(one) => *self = Ids::Many(BTreeSet::from([*one, id])),
        }
    }
    fn remove(&mut self, id: ConnId) {
        match self {
            Ids::One(one) if *one == id => *self = Ids::default(),
            Ids::One(_) => {}
            Ids::Many(set) => {
                set.remove(&id);
                if set.len() == 1
                    && let Some(last) = set.first().copied()
                {
                    *self = Ids::One(last);
                }
            }
        }
    }
    fn is_empty(&self) -> bool {
        matches!(self, Ids::Many(set) if set.is_empty())
    }
    fn to_vec(&self) -> Vec<ConnId> {
        match self {
            Ids::One(one) => vec![*one],
            Ids::Many(set) => set.iter().copied().collect(),
        }
    }
}

/// The registry. `H` is the per-connection handle the server keeps (its queue and controls).
pub struct Registry<H> {
    next: AtomicU64,
    shards: Vec<Mutex<HashMap<ConnId, Entry<H>>>>,
    users: Vec<Index>,
    rooms: Vec<Index>,
    hasher: std::collections::hash_map::RandomState,
    changed: Notify,
}

impl<H: Clone> Registry<H> {
    /// A registry with `shards` shards (at least one).
    pub fn new(shards: usize) -> Self {
        let n = shards.max(1);
        Self {
            next: AtomicU64::new(1),
            shards: (0..n).map(|_| Mutex::new(HashMap::new())).collect(),
            users: (0..n).map(|_| Mutex::new(HashMap::new())).collect(),
            rooms: (0..n).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: std::collections::hash_map::RandomState::new(),
            changed: Notify::new(),
        }
    }

    /// How many shards the registry has.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The shard a connection lives in.
    pub fn shard_of(&self, id: ConnId) -> usize {
        (id.0 % self.shards.len() as u64) as usize
    }

    fn index_shard<'a>(&self, index: &'a [Index], key: &str) -> &'a Index {
        let h = self.hasher.hash_one(key) as usize;
        &index[h % index.len()]
    }

    // r[impl gateway.registry.track+2]
    /// Registers a new connection at accept time, before any handshake or authentication, and
    /// returns its id.
    pub fn accept(&self) -> ConnId {
        let id = ConnId(self.next.fetch_add(1, Ordering::Relaxed));
        lock(&self.shards[self.shard_of(id)]).insert(
            id,
            Entry {
                user: None,
                rooms: Rooms::default(),
                handle: None,
            },
        );
        id
    }

    /// Attaches the server's handle for a connection (once its task exists).
    pub fn set_handle(&self, id: ConnId, handle: H) -> Result<(), RegistryError> {
        let mut shard = lock(&self.shards[self.shard_of(id)]);
        let entry = shard.get_mut(&id).ok_or(RegistryError::Unknown(id))?;
        entry.handle = Some(handle);
        Ok(())
    }

    /// Records that a connection authenticated as `user`. Authenticating again as the same user
    /// is a no-op; as another user it is refused.
    pub fn authenticate(&self, id: ConnId, user: &str) -> Result<(), RegistryError> {
        {
            let mut shard = lock(&self.shards[self.shard_of(id)]);
            let entry = shard.get_mut(&id).ok_or(RegistryError::Unknown(id))?;
            match &entry.user {
                Some(u) if u == user => return Ok(()),
                Some(_) => return Err(RegistryError::AlreadyAuthenticated(id)),
                None => entry.user = Some(user.to_owned()),
            }
        }
        lock(self.index_shard(&self.users, user))
            .entry(user.to_owned())
            .or_default()
            .insert(id);
        Ok(())
    }

    /// Adds a connection to a room (idempotent).
    pub fn join(&self, id: ConnId, room: &str) -> Result<(), RegistryError> {
        self.join_within(id, room, 0)
    }

    /// Adds a connection to a room (idempotent) unless it is already in `max_rooms` others
    /// (0: no limit); checked and added under one lock, so two joins cannot both take the last
    /// place.
    // r[impl gateway.rooms.limits]
    pub fn join_within(
        &self,
        id: ConnId,
        room: &str,
        max_rooms: usize,
    ) -> Result<(), RegistryError> {
        {
            let mut shard = lock(&self.shards[self.shard_of(id)]);
            let entry = shard.get_mut(&id).ok_or(RegistryError::Unknown(id))?;
            if entry.rooms.contains(room) {
                return Ok(());
            }
            if max_rooms != 0 && entry.rooms.len() >= max_rooms {
                return Err(RegistryError::TooManyRooms(id, max_rooms));
            }
            entry.rooms.insert(room);
        }
        lock(self.index_shard(&self.rooms, room))
            .entry(room.to_owned())
            .or_default()
            .insert(id);
        Ok(())
    }

    /// Whether a connection is a member of `room`.
    pub fn is_member(&self, id: ConnId, room: &str) -> bool {
        lock(&self.shards[self.shard_of(id)])
            .get(&id)
            .is_some_and(|e| e.rooms.contains(room))
    }

    /// Takes a connection out of a room (idempotent).
    pub fn leave(&self, id: ConnId, room: &str) -> Result<(), RegistryError> {
        {
            let mut shard = lock(&self.shards[self.shard_of(id)]);
            let entry = shard.get_mut(&id).ok_or(RegistryError::Unknown(id))?;
            if !entry.rooms.remove(room) {
                return Ok(());
            }
        }
        remove_from(self.index_shard(&self.rooms, room), room, id);
        Ok(())
    }

    // r[impl gateway.registry.by-connection]
    /// Removes one connection and only that connection: its user's and rooms' other connections
    /// stay. Removing an unknown or already removed connection returns `None` and changes
    /// nothing.
    pub fn remove(&self, id: ConnId) -> Option<Removed> {
        let entry = lock(&self.shards[self.shard_of(id)]).remove(&id)?;
        let mut user_still_connected = false;
        if let Some(user) = &entry.user {
            user_still_connected = remove_from(self.index_shard(&self.users, user), user, id);
        }
        for room in entry.rooms.iter() {
            remove_from(self.index_shard(&self.rooms, room), room, id);
        }
        self.changed.notify_waiters();
        Some(Removed {
            user: entry.user,
            user_still_connected,
            rooms: entry.rooms.into_set(),
        })
    }

    /// Whether a connection is registered.
    pub fn contains(&self, id: ConnId) -> bool {
        lock(&self.shards[self.shard_of(id)]).contains_key(&id)
    }

    /// The user a connection authenticated as.
    pub fn user_of(&self, id: ConnId) -> Option<String> {
        lock(&self.shards[self.shard_of(id)])
            .get(&id)
            .and_then(|e| e.user.clone())
    }

    /// The connections a user holds on this replica.
    pub fn connections_of(&self, user: &str) -> Vec<ConnId> {
        lookup(self.index_shard(&self.users, user), user)
    }

    /// The connections in a room.
    pub fn members(&self, room: &str) -> Vec<ConnId> {
        lookup(self.index_shard(&self.rooms, room), room)
    }

    /// The handle of a connection, if it has one.
    pub fn handle(&self, id: ConnId) -> Option<H> {
        lock(&self.shards[self.shard_of(id)])
            .get(&id)
            .and_then(|e| e.handle.clone())
    }

    /// Calls `f` with the handle of each of `ids` that is registered and has one, taking each
    /// shard's lock once rather than once per connection and lending the handle rather than
    /// cloning it: a broadcast to thousands of connections is mostly this loop. `f` runs with
    /// the shard's lock held, so it must be short, must not block or log, and must not call back
    /// into the registry.
    pub fn for_each_handle(&self, ids: &[ConnId], mut f: impl FnMut(ConnId, &H)) {
        let mut by_shard: Vec<Vec<ConnId>> = vec![Vec::new(); self.shards.len()];
        for id in ids {
            by_shard[self.shard_of(*id)].push(*id);
        }
        for (shard, group) in self.shards.iter().zip(&by_shard) {
            if group.is_empty() {
                continue;
            }
            let shard = lock(shard);
            for id in group {
                if let Some(h) = shard.get(id).and_then(|e| e.handle.as_ref()) {
                    f(*id, h);
                }
            }
        }
    }

    /// Every registered connection with its handle (if set), shard by shard.
    pub fn snapshot(&self) -> Vec<(ConnId, Option<H>)> {
        let mut out = Vec::new();
        for shard in &self.shards {
            out.extend(lock(shard).iter().map(|(id, e)| (*id, e.handle.clone())));
        }
        out
    }

    /// How many connections are registered, authenticated or not.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    /// Whether no connection is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many registered connections have authenticated.
    pub fn authenticated(&self) -> usize {
        self.shards
            .iter()
            .map(|s| lock(s).values().filter(|e| e.user.is_some()).count())
            .sum()
    }

    /// Woken whenever a connection is removed.
    pub fn changed(&self) -> &Notify {
        &self.changed
    }

    /// Waits until no connection is registered or `deadline` passes; true when empty.
    pub async fn wait_empty(&self, deadline: tokio::time::Instant) -> bool {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_empty() {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.is_empty();
            }
        }
    }
}

/// Removes `id` from `key`'s set; true when the set still has other members.
fn remove_from<K: Hash + Eq + ?Sized>(index: &Index, key: &K, id: ConnId) -> bool
where
    String: std::borrow::Borrow<K>,
{
    let mut map = lock(index);
    let Some(set) = map.get_mut(key) else {
        return false;
    };
    set.remove(id);
    if set.is_empty() {
        map.remove(key);
        false
    } else {
        true
    }
}

fn lookup(index: &Index, key: &str) -> Vec<ConnId> {
    lock(index).get(key).map(Ids::to_vec).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // r[verify gateway.edge.footprint]
    /// A connection's rooms stay a vector sized to them while they are few, and become a set
    /// past that (joins and leaves of a connection with many rooms are not linear in them); in
    /// either form they answer as a set would, and a connection that leaves most of them again
    /// still knows the rest.
    #[test]
    fn a_connections_rooms_are_a_vector_while_few_and_a_set_past_that() {
        let mut rooms = Rooms::default();
        let mut model = BTreeSet::new();
        for i in (0..200).rev() {
            let room = format!("r{i:03}");
            assert_eq!(rooms.insert(&room), model.insert(room.clone()));
            assert!(!rooms.insert(&room));
            if model.len() <= Rooms::FEW {
                assert!(
                    matches!(&rooms, Rooms::Few(v) if v.capacity() == v.len()),
                    "{rooms:?}"
                );
            } else {
                assert!(matches!(rooms, Rooms::Many(_)), "at {}", model.len());
            }
        }
        for i in (0..200).step_by(3) {
            let room = format!("r{i:03}");
            assert_eq!(rooms.remove(&room), model.remove(&room));
            assert!(!rooms.remove(&room));
        }
        assert_eq!(rooms.len(), model.len());
        assert!(model.iter().all(|r| rooms.contains(r)));
        assert!(!rooms.contains("r000"));
        assert!(rooms.iter().eq(model.iter()));
        assert_eq!(rooms.into_set(), model);
    }

    // r[verify gateway.rooms.limits]
    #[test]
    fn a_join_past_the_room_limit_is_refused_and_a_rejoin_is_not_a_new_room() {
        let r: Registry<u64> = Registry::new(4);
        let id = r.accept();
        r.join_within(id, "a", 2).unwrap();
        r.join_within(id, "b", 2).unwrap();
        assert_eq!(
            r.join_within(id, "c", 2),
            Err(RegistryError::TooManyRooms(id, 2))
        );
        assert!(r.members("c").is_empty());
        r.join_within(id, "a", 2).unwrap();
        r.leave(id, "a").unwrap();
        r.join_within(id, "c", 2).unwrap();
        assert_eq!(r.members("c"), vec![id]);
        // 0 is no limit.
        for i in 0..100 {
            r.join_within(id, &format!("x{i}"), 0).unwrap();
        }
    }

    #[test]
    fn for_each_handle_visits_each_registered_connection_with_a_handle_once() {
        let r: Registry<u64> = Registry::new(4);
        let ids: Vec<_> = (0..10).map(|_| r.accept()).collect();
        for id in &ids[..8] {
            r.set_handle(*id, id.0 * 10).unwrap();
        }
        r.remove(ids[0]);
        let mut seen = Vec::new();
        r.for_each_handle(&ids, |id, h| seen.push((id, *h)));
        seen.sort();
        let want: Vec<_> = ids[1..8].iter().map(|id| (*id, id.0 * 10)).collect();
        assert_eq!(
            seen, want,
            "removed and handle-less connections are skipped"
        );
    }

    // r[verify gateway.registry.track+2]
    #[test]
    fn unauthenticated_connections_are_registered_in_shards_and_removal_is_idempotent() {
        let r: Registry<()> = Registry::new(4);
        let ids: Vec<_> = (0..8).map(|_| r.accept()).collect();
        assert_eq!(r.len(), 8);
        assert_eq!(r.authenticated(), 0);
        let used: BTreeSet<_> = ids.iter().map(|id| r.shard_of(*id)).collect();
        assert_eq!(used.len(), 4, "connections spread over every shard");
        r.authenticate(ids[0], "ann").unwrap();
        assert_eq!(r.authenticated(), 1);
        assert!(r.remove(ids[1]).is_some());
        assert_eq!(r.remove(ids[1]), None, "second removal changes nothing");
        assert_eq!(r.len(), 7);
        assert_eq!(r.join(ids[1], "x"), Err(RegistryError::Unknown(ids[1])));
    }

    // r[verify gateway.registry.by-connection]
    #[test]
    fn removing_an_older_connection_leaves_the_users_newer_one() {
        let r: Registry<()> = Registry::new(8);
        let old = r.accept();
        let new = r.accept();
        r.authenticate(old, "ann").unwrap();
        r.join(old, "lobby").unwrap();
        r.authenticate(new, "ann").unwrap();
        r.join(new, "lobby").unwrap();
        let removed = r.remove(old).unwrap();
        assert_eq!(removed.user.as_deref(), Some("ann"));
        assert!(removed.user_still_connected);
        assert_eq!(r.connections_of("ann"), vec![new]);
        assert_eq!(r.members("lobby"), vec![new]);
        let removed = r.remove(new).unwrap();
        assert!(!removed.user_still_connected);
        assert!(r.connections_of("ann").is_empty());
        assert!(r.members("lobby").is_empty());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Accept,
        Auth(usize, u8),
        Join(usize, u8),
        Leave(usize, u8),
        Remove(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            Just(Op::Accept),
            (0..12usize, 0..3u8).prop_map(|(c, u)| Op::Auth(c, u)),
            (0..12usize, 0..3u8).prop_map(|(c, r)| Op::Join(c, r)),
            (0..12usize, 0..3u8).prop_map(|(c, r)| Op::Leave(c, r)),
            (0..12usize).prop_map(Op::Remove),
        ]
    }

    proptest! {
        // r[verify gateway.registry.by-connection]
        #[test]
        fn indexes_match_a_model_keyed_by_connection(ops in proptest::collection::vec(op(), 1..80)) {
            let r: Registry<()> = Registry::new(3);
            let mut ids = Vec::new();
            let mut model: HashMap<ConnId, (Option<String>, BTreeSet<String>)> = HashMap::new();
            for op in ops {
                match op {
                    Op::Accept => { let id = r.accept(); ids.push(id); model.insert(id, (None, BTreeSet::new())); }
                    Op::Auth(c, u) => if let Some(&id) = ids.get(c) {
                        let user = format!("u{u}");
                        let expect = match model.get_mut(&id) {
                            None => Err(RegistryError::Unknown(id)),
                            Some((Some(x), _)) if *x == user => Ok(()),
                            Some((Some(_), _)) => Err(RegistryError::AlreadyAuthenticated(id)),
                            Some((slot, _)) => { *slot = Some(user.clone()); Ok(()) }
                        };
                        prop_assert_eq!(r.authenticate(id, &user), expect);
                    },
                    Op::Join(c, room) => if let Some(&id) = ids.get(c) {
                        let room = format!("r{room}");
                        let ok = r.join(id, &room).is_ok();
                        prop_assert_eq!(ok, model.contains_key(&id));
                        if let Some((_, rooms)) = model.get_mut(&id) { rooms.insert(room); }
                    },
                    Op::Leave(c, room) => if let Some(&id) = ids.get(c) {
                        let room = format!("r{room}");
                        let _ = r.leave(id, &room);
                        if let Some((_, rooms)) = model.get_mut(&id) { rooms.remove(&room); }
                    },
                    Op::Remove(c) => if let Some(&id) = ids.get(c) {
                        let got = r.remove(id).map(|x| x.user);
                        prop_assert_eq!(got, model.remove(&id).map(|(u, _)| u));
                    },
                }
                for u in 0..3u8 {
                    let user = format!("u{u}");
                    let mut want: Vec<_> = model.iter().filter(|(_, (x, _))| x.as_deref() == Some(user.as_str())).map(|(id, _)| *id).collect();
                    want.sort();
                    prop_assert_eq!(r.connections_of(&user), want);
                    let room = format!("r{u}");
                    let mut want: Vec<_> = model.iter().filter(|(_, (_, rs))| rs.contains(&room)).map(|(id, _)| *id).collect();
                    want.sort();
                    prop_assert_eq!(r.members(&room), want);
                }
                prop_assert_eq!(r.len(), model.len());
            }
        }
    }
}
