//! The certificate store: what other modules read (the gateway serves TLS from it), backed by one
//! file per hostname that is replaced atomically and only by a checked pair.

use std::collections::BTreeMap;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use tokio::sync::watch;

use crate::cert::{CertError, CertifiedPair};
use crate::issuer::{SystemWallClock, WallClock};

/// The store's disk could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Reading or writing a file failed.
    #[error("certificate store {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A file on disk, or a pair offered to the store, is not a usable certificate.
    #[error("certificate for {hostname}: {source}")]
    Bad {
        /// The hostname.
        hostname: String,
        /// What is wrong with it.
        #[source]
        source: CertError,
    },
    /// Writing a certificate and key file failed (names the file and the step).
    #[error("certificate store: {0}")]
    Write(#[from] holdfast_keyfile::KeyfileError),
}

/// Every hostname's current pair; cheap to clone (`Arc`s).
pub type Snapshot = Arc<BTreeMap<String, Arc<CertifiedPair>>>;

/// Current certificates by hostname, with a change notification.
#[derive(Debug, Clone)]
pub struct CertStore {
    dir: PathBuf,
    tx: Arc<watch::Sender<Snapshot>>,
    clock: StoreClock,
    /// When [`CertStore::wake_on_expiry`] last looked (shared by clones).
    expiry_checked: Arc<Mutex<Option<SystemTime>>>,
}

/// Whether `pair` may be handed out at `now`: until its not-after.
fn live(pair: &CertifiedPair, now: SystemTime) -> bool {
    now < pair.info.not_after
}

/// `all` without the pairs expired at `now` (the same `Arc` when none is).
fn unexpired(all: &Snapshot, now: SystemTime) -> Snapshot {
    if all.values().all(|p| live(p, now)) {
        return all.clone();
    }
    Arc::new(
        all.iter()
            .filter(|(_, p)| live(p, now))
            .map(|(h, p)| (h.clone(), p.clone()))
            .collect(),
    )
}

/// A watch on the store for other modules: it wakes on every change (a first issuance, a
/// renewal) and when a stored certificate has expired, and what it hands out leaves expired
/// certificates out, as [`CertStore::snapshot`] does.
#[derive(Debug, Clone)]
pub struct CertWatch {
    rx: watch::Receiver<Snapshot>,
    clock: StoreClock,
}

impl CertWatch {
    /// Waits for the next change; an error once the store is gone.
    pub async fn changed(&mut self) -> Result<(), watch::error::RecvError> {
        self.rx.changed().await
    }

    /// Whether there is a change not yet seen through [`CertWatch::current`].
    pub fn has_changed(&self) -> Result<bool, watch::error::RecvError> {
        self.rx.has_changed()
    }

    /// Every pair that has not expired, marking the change seen.
    // r[impl issue.expiry+2]
    pub fn current(&mut self) -> Snapshot {
        let all = self.rx.borrow_and_update().clone();
        unexpired(&all, self.clock.0.now())
    }
}

/// The clock that says whether a stored certificate has expired (the issuer's, once it owns the
/// store).
#[derive(Clone)]
struct StoreClock(Arc<dyn WallClock>);

impl std::fmt::Debug for StoreClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreClock")
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_owned(),
        source,
    }
}

impl CertStore {
    /// A store writing into `dir` (created 0700 if missing). Nothing is loaded yet.
    pub fn new(dir: &Path) -> Result<Self, StoreError> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io_err(dir))?;
        let (tx, _) = watch::channel(Snapshot::default());
        Ok(Self {
            dir: dir.to_owned(),
            tx: Arc::new(tx),
            clock: StoreClock(Arc::new(SystemWallClock)),
            expiry_checked: Arc::default(),
        })
    }

    /// The same store, judging expiry by `clock` (the system clock by default).
    pub fn with_clock(mut self, clock: Arc<dyn WallClock>) -> Self {
        self.clock = StoreClock(clock);
        self
    }

    /// The file that holds `hostname`'s key and chain.
    pub fn path_of(&self, hostname: &str) -> PathBuf {
        self.dir.join(format!("{hostname}.pem"))
    }

    /// Loads `hostname`'s pair from disk into the store. `Ok(None)`: there is none. A bad file is
    /// an error and is left where it is (the operator may want it); the store keeps nothing for it.
    pub fn load(&self, hostname: &str) -> Result<Option<Arc<CertifiedPair>>, StoreError> {
        let path = self.path_of(hostname);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&path)(e)),
        };
        let pair =
            CertifiedPair::parse_bundle(hostname, &text).map_err(|source| StoreError::Bad {
                hostname: hostname.to_owned(),
                source,
            })?;
        let pair = Arc::new(pair);
        self.publish(hostname, pair.clone());
        Ok(Some(pair))
    }

    /// Replaces `hostname`'s pair, on disk and in memory, after checking it: a pair that does not
    /// parse, does not match its key, does not name the hostname or is not valid at `now` is
    /// refused and the current one stays.
    // r[impl issue.store.atomic]
    // r[impl issue.store.secret-file+2]
    pub fn replace(
        &self,
        hostname: &str,
        pair: CertifiedPair,
        now: SystemTime,
    ) -> Result<Arc<CertifiedPair>, StoreError> {
        let bad = |source| StoreError::Bad {
            hostname: hostname.to_owned(),
            source,
        };
        // Re-parse what will be written, so nothing unchecked reaches the disk.
        let checked = CertifiedPair::parse_bundle(hostname, &pair.bundle()).map_err(bad)?;
        checked.check_time(now).map_err(bad)?;
        let mut checked = checked;
        checked.info.renew_at = pair.info.renew_at;
        let path = self.path_of(hostname);
        // The file holds the key: written 0600, atomically, never through a planted link.
        holdfast_keyfile::write_private(&path, checked.bundle().as_bytes())?;
        let pair = Arc::new(checked);
        self.publish(hostname, pair.clone());
        Ok(pair)
    }

    fn publish(&self, hostname: &str, pair: Arc<CertifiedPair>) {
        self.tx.send_modify(|snap| {
            let mut map = (**snap).clone();
            map.insert(hostname.to_owned(), pair);
            *snap = Arc::new(map);
        });
    }

    /// `hostname`'s current pair, unless it has expired: an expired certificate is not handed
    /// out (served or deployed) however long it stays stored.
    // r[impl issue.expiry+2]
    pub fn get(&self, hostname: &str) -> Option<Arc<CertifiedPair>> {
        let now = self.clock.0.now();
        self.stored(hostname).filter(|p| live(p, now))
    }

    /// Every current pair that has not expired.
    // r[impl issue.expiry+2]
    pub fn snapshot(&self) -> Snapshot {
        unexpired(&self.stored_snapshot(), self.clock.0.now())
    }

    /// `hostname`'s stored pair, expired or not: for the decision to renew it and for the
    /// operator's view, never to serve.
    pub fn stored(&self, hostname: &str) -> Option<Arc<CertifiedPair>> {
        self.tx.borrow().get(hostname).cloned()
    }

    /// Every stored pair, expired or not (see [`CertStore::stored`]).
    pub fn stored_snapshot(&self) -> Snapshot {
        self.tx.borrow().clone()
    }

    /// A watch that wakes on every change (a renewal, a first issuance) and once a stored
    /// certificate has expired (see [`CertStore::wake_on_expiry`]).
    // r[impl issue.store.notify+2]
    pub fn subscribe(&self) -> CertWatch {
        CertWatch {
            rx: self.tx.subscribe(),
            clock: self.clock.clone(),
        }
    }

    /// Wakes the watchers when a stored certificate has expired since the previous call (the
    /// issuer calls it at every tick), so they re-read and drop it.
    // r[impl issue.store.notify+2]
    pub fn wake_on_expiry(&self) {
        let now = self.clock.0.now();
        let since = self
            .expiry_checked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replace(now);
        let Some(since) = since else {
            // The first look: whatever had expired before was never handed to a watcher.
            return;
        };
        let passed = self
            .tx
            .borrow()
            .values()
            .any(|p| live(p, since) && !live(p, now));
        if passed {
            // Nothing stored changes; the watchers only need to look again.
            self.tx.send_modify(|_| {});
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cert::testing::leaf;
    use std::os::unix::fs::PermissionsExt as _;
    use std::time::Duration;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn pair(host: &str, from: SystemTime) -> CertifiedPair {
        let (chain, key) = leaf(host, from, Duration::from_secs(86400));
        CertifiedPair::parse(host, &chain, &key).unwrap()
    }

    // r[verify issue.expiry+2]
    #[test]
    fn an_expired_certificate_is_not_handed_out_but_stays_stored_and_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let clock = crate::ManualWallClock::new(t(10));
        let store = CertStore::new(dir.path())
            .unwrap()
            .with_clock(Arc::new(clock.clone()));
        let a = store
            .replace("a.example", pair("a.example", t(0)), t(10))
            .unwrap();
        let b = store
            .replace("b.example", pair("b.example", t(3600)), t(3610))
            .unwrap();
        assert_eq!(store.get("a.example"), Some(a.clone()));
        assert_eq!(store.snapshot().len(), 2);
        // One second before a's not-after (t(86400)): still handed out.
        clock.advance(Duration::from_secs(86400 - 11));
        assert_eq!(store.get("a.example"), Some(a.clone()));
        // At its not-after, the instant itself: no longer, while b (an hour younger) still is.
        clock.advance(Duration::from_secs(1));
        assert_eq!(store.get("a.example"), None);
        assert_eq!(store.get("b.example"), Some(b.clone()));
        let served: Vec<String> = store.snapshot().keys().cloned().collect();
        assert_eq!(served, ["b.example"]);
        // Still stored (for the decision and the operator's view) and on disk.
        assert_eq!(store.stored("a.example"), Some(a));
        assert_eq!(store.stored_snapshot().len(), 2);
        assert!(store.path_of("a.example").exists());
        // A renewal replaces it and it is handed out again.
        let renewed = store
            .replace("a.example", pair("a.example", t(86400)), t(86400))
            .unwrap();
        assert_eq!(store.get("a.example"), Some(renewed));
    }

    // r[verify issue.store.atomic]
    // r[verify issue.store.notify+2]
    #[tokio::test]
    async fn replace_writes_0600_notifies_and_survives_reload() {
        let dir = tempfile::tempdir().unwrap();
        let store = CertStore::new(dir.path()).unwrap();
        let mut rx = store.subscribe();
        let first = store
            .replace("a.example", pair("a.example", t(0)), t(10))
            .unwrap();
        rx.changed().await.unwrap();
        assert_eq!(rx.current().get("a.example"), Some(&first));
        let mode = std::fs::metadata(store.path_of("a.example"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // A bad pair (expired at `now`) is refused; the current one stays, on disk too.
        let err = store
            .replace("a.example", pair("a.example", t(0)), t(200_000))
            .unwrap_err();
        assert!(matches!(err, StoreError::Bad { .. }), "{err}");
        assert_eq!(store.get("a.example"), Some(first.clone()));
        let reloaded = CertStore::new(dir.path()).unwrap();
        assert_eq!(
            reloaded.load("a.example").unwrap().unwrap().chain_pem,
            first.chain_pem
        );
        // A renewal notifies again.
        store
            .replace("a.example", pair("a.example", t(5)), t(10))
            .unwrap();
        rx.changed().await.unwrap();
        assert_ne!(rx.current().get("a.example"), Some(&first));
        // No temp file is left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    // r[verify issue.store.notify+2]
    // r[verify issue.expiry+2]
    #[test]
    fn a_watch_leaves_an_expired_certificate_out_and_wakes_once_when_it_expires() {
        let dir = tempfile::tempdir().unwrap();
        let clock = crate::ManualWallClock::new(t(10));
        let store = CertStore::new(dir.path())
            .unwrap()
            .with_clock(Arc::new(clock.clone()));
        store
            .replace("a.example", pair("a.example", t(0)), t(10))
            .unwrap();
        let mut watch = store.subscribe();
        store.wake_on_expiry();
        assert_eq!(watch.current().len(), 1);
        assert!(!watch.has_changed().unwrap());
        // Past a's not-after (t(86400)): what the watch hands out leaves it out at once...
        clock.advance(Duration::from_secs(86400));
        assert!(watch.current().is_empty());
        // ...and the next look at the clock wakes the watch, once.
        store.wake_on_expiry();
        assert!(watch.has_changed().unwrap());
        assert!(watch.current().is_empty());
        store.wake_on_expiry();
        assert!(!watch.has_changed().unwrap());
    }

    // r[verify issue.store.secret-file+2]
    #[test]
    fn a_link_planted_at_the_temporary_path_is_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let store = CertStore::new(&dir.path().join("certs")).unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "untouched").unwrap();
        let target = store.path_of("a.example");
        std::os::unix::fs::symlink(&victim, holdfast_keyfile::temp_path(&target)).unwrap();
        store
            .replace("a.example", pair("a.example", t(0)), t(10))
            .unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        let meta = std::fs::symlink_metadata(&target).unwrap();
        assert!(meta.file_type().is_file());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    }

    // r[verify issue.store.validate]
    #[test]
    fn bad_pem_on_disk_and_an_unwritable_directory_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let store = CertStore::new(dir.path()).unwrap();
        std::fs::write(store.path_of("a.example"), "not a certificate").unwrap();
        let err = store.load("a.example").unwrap_err();
        assert!(err.to_string().contains("a.example"), "{err}");
        assert!(store.get("a.example").is_none());
        assert_eq!(
            std::fs::read_to_string(store.path_of("a.example")).unwrap(),
            "not a certificate"
        );

        let good = store
            .replace("b.example", pair("b.example", t(0)), t(10))
            .unwrap();
        // The store's directory becomes unusable (even for root): replacing fails clearly and
        // the current pair stays served.
        let moved = dir.path().with_extension("moved");
        std::fs::rename(dir.path(), &moved).unwrap();
        std::fs::write(dir.path(), "a file where the directory was").unwrap();
        let err = store
            .replace("b.example", pair("b.example", t(1)), t(10))
            .unwrap_err();
        assert!(matches!(err, StoreError::Write(_)), "{err}");
        assert!(err.to_string().contains("b.example.pem"), "{err}");
        assert_eq!(store.get("b.example"), Some(good.clone()));
        std::fs::remove_file(dir.path()).unwrap();
        std::fs::rename(&moved, dir.path()).unwrap();
        assert_eq!(
            CertStore::new(dir.path())
                .unwrap()
                .load("b.example")
                .unwrap()
                .unwrap()
                .chain_pem,
            good.chain_pem
        );
    }
}
