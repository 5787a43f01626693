//! The attempts table: one row per attempt, in SQLite, read per hostname.
//!
//! Beside the rows, each hostname has one folded row (`hosts`): holdfast-retry's [`History`],
//! updated in the same transaction as the attempt it folds, so a decision reads one small row and
//! never scans, and no hostname's rows can push another's out (there is no global cap; retention is
//! per hostname).

use std::path::Path;
use std::time::{Duration, SystemTime};

use holdfast_retry::{History, Policy};
use rusqlite::{Connection, OptionalExtension as _, params};

/// A history store that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// SQLite failed (locked, corrupt, unwritable, …).
    #[error("attempt history {path}: {source}")]
    Sqlite {
        /// The database file.
        path: String,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The database's directory could not be created.
    #[error("attempt history {path}: {source}")]
    Io {
        /// The database file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The database was written by a newer holdfast.
    #[error("attempt history {path}: schema version {found} is newer than this build's {known}")]
    TooNew {
        /// The database file.
        path: String,
        /// The version on disk.
        found: i64,
        /// The newest version this build knows.
        known: i64,
    },
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A certificate was obtained and stored.
    Success,
    /// The source failed (classified in the row).
    Failure,
    /// The process ended while the attempt was open; settled as a failure on the next start.
    Interrupted,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Failure => "failure",
            Outcome::Interrupted => "interrupted",
        }
    }
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "success" => Outcome::Success,
            "failure" => Outcome::Failure,
            "interrupted" => Outcome::Interrupted,
            _ => return None,
        })
    }
}

/// One attempt as stored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AttemptRow {
    /// Row id (increasing).
    pub id: i64,
    /// The hostname.
    pub hostname: String,
    /// The source that was dispatched (`acme`, `local`).
    pub source: String,
    /// When it started.
    pub started: SystemTime,
    /// When it ended (`None` while open).
    pub ended: Option<SystemTime>,
    /// How it ended (`None` while open).
    pub outcome: Option<Outcome>,
    /// The failure's class (e.g. `unreachable`, `rate_limited`).
    pub error_class: Option<String>,
    /// The failure's message.
    pub error: Option<String>,
    /// The server's Retry-After, if any.
    pub retry_after: Option<Duration>,
}

/// A failure to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureRecord<'a> {
    /// The class (short, machine-readable).
    pub class: &'a str,
    /// The message (never a secret).
    pub message: &'a str,
    /// The server's Retry-After.
    pub retry_after: Option<Duration>,
}

fn sq(path: &str, source: rusqlite::Error) -> HistoryError {
    HistoryError::Sqlite {
        path: path.to_owned(),
        source,
    }
}

const SCHEMA_VERSION: i64 = 1;

/// Versioned migrations, applied in order; `user_version` says how many ran.
const MIGRATIONS: &[&str] = &[
    // 1: attempts and the folded per-hostname history.
    "CREATE TABLE attempts (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        hostname TEXT NOT NULL,
        source TEXT NOT NULL,
        started_ms INTEGER NOT NULL,
        ended_ms INTEGER,
        outcome TEXT,
        error_class TEXT,
        error TEXT,
        retry_after_ms INTEGER
    );
    CREATE INDEX attempts_by_host ON attempts (hostname, id);
    CREATE TABLE hosts (
        hostname TEXT PRIMARY KEY,
        failures INTEGER NOT NULL,
        last_failure_ms INTEGER,
        hint_ms INTEGER,
        escalated INTEGER NOT NULL,
        jitter_key INTEGER NOT NULL
    );",
];

fn ms(t: SystemTime) -> i64 {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn from_ms(v: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(v).unwrap_or(0))
}

fn dur_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The attempt history of every hostname.
#[derive(Debug)]
pub struct HistoryDb {
    conn: Connection,
    path: String,
    keep_per_host: usize,
}

impl HistoryDb {
    /// Opens (creating and migrating) the database at `path`, in WAL mode.
    // r[impl issue.history.sqlite+2]
    pub fn open(path: &Path, keep_per_host: usize) -> Result<Self, HistoryError> {
        let name = path.display().to_string();
        let wrap = |source| HistoryError::Sqlite {
            path: name.clone(),
            source,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|source| HistoryError::Io {
                path: name.clone(),
                source,
            })?;
        }
        let conn = Connection::open(path).map_err(wrap)?;
        conn.busy_timeout(Duration::from_secs(2)).map_err(wrap)?;
        // A corrupt file fails here, with SQLite's own message ("file is not a database").
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(wrap)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(wrap)?;
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(wrap)?;
        if version > SCHEMA_VERSION {
            return Err(HistoryError::TooNew {
                path: name,
                found: version,
                known: SCHEMA_VERSION,
            });
        }
        let mut db = Self {
            conn,
            path: name,
            keep_per_host: keep_per_host.max(1),
        };
        db.migrate(version)?;
        Ok(db)
    }

    /// A database in memory, for when the file cannot be used: the same schema and behaviour,
    /// gone with the process.
    // r[impl issue.history.unavailable]
    pub fn in_memory(keep_per_host: usize) -> Result<Self, HistoryError> {
        let name = ":memory:".to_owned();
        let conn = Connection::open_in_memory().map_err(|e| sq(&name, e))?;
        let mut db = Self {
            conn,
            path: name,
            keep_per_host: keep_per_host.max(1),
        };
        db.migrate(0)?;
        Ok(db)
    }

    fn err(&self, source: rusqlite::Error) -> HistoryError {
        HistoryError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    fn migrate(&mut self, from: i64) -> Result<(), HistoryError> {
        let path = self.path.clone();
        let start = usize::try_from(from).unwrap_or(0);
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(start) {
            let tx = self.conn.transaction().map_err(|e| sq(&path, e))?;
            tx.execute_batch(sql).map_err(|e| sq(&path, e))?;
            tx.pragma_update(None, "user_version", i as i64 + 1)
                .map_err(|e| sq(&path, e))?;
            tx.commit().map_err(|e| sq(&path, e))?;
        }
        Ok(())
    }

    /// The schema version on disk.
    pub fn schema_version(&self) -> Result<i64, HistoryError> {
        self.conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(|e| self.err(e))
    }

    /// The folded history of one hostname (fresh when it has none).
    // r[impl issue.history.per-host]
    pub fn history(&self, hostname: &str) -> Result<History<SystemTime>, HistoryError> {
        let row = self
            .conn
            .prepare_cached(
                "SELECT failures, last_failure_ms, hint_ms, escalated, jitter_key FROM hosts WHERE hostname = ?1",
            )
            .and_then(|mut st| {
                st.query_row(params![hostname], |r| {
                    Ok(History {
                        failures: u32::try_from(r.get::<_, i64>(0)?).unwrap_or(u32::MAX),
                        last_failure: r.get::<_, Option<i64>>(1)?.map(from_ms),
                        hint: r
                            .get::<_, Option<i64>>(2)?
                            .map(|v| Duration::from_millis(u64::try_from(v).unwrap_or(0))),
                        escalated: r.get::<_, i64>(3)? != 0,
                        jitter_key: r.get::<_, i64>(4)? as u64,
                        // Attempts in flight are the open rows, not part of the folded row.
                        in_flight: None,
                        expired: None,
                    })
                })
                .optional()
            })
            .map_err(|e| self.err(e))?;
        Ok(row.unwrap_or_else(|| History::for_key(hostname)))
    }

    fn put_history(
        tx: &rusqlite::Transaction<'_>,
        hostname: &str,
        h: &History<SystemTime>,
    ) -> rusqlite::Result<()> {
        tx.prepare_cached(
            "INSERT INTO hosts (hostname, failures, last_failure_ms, hint_ms, escalated, jitter_key)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT(hostname) DO UPDATE SET failures = ?2, last_failure_ms = ?3, hint_ms = ?4,
                 escalated = ?5, jitter_key = ?6",
        )?
        .execute(params![
            hostname,
            i64::from(h.failures),
            h.last_failure.map(ms),
            h.hint.map(dur_ms),
            i64::from(h.escalated),
            h.jitter_key as i64
        ])?;
        Ok(())
    }

    /// Opens an attempt row at `now` and folds its start (a gap past the cap starts a new streak),
    /// in one transaction. Returns the row id.
    pub fn begin(
        &mut self,
        policy: &Policy,
        hostname: &str,
        source: &str,
        now: SystemTime,
    ) -> Result<i64, HistoryError> {
        let path = self.path.clone();
        let mut h = self.history(hostname)?;
        h.begin_attempt(policy, now);
        let tx = self.conn.transaction().map_err(|e| sq(&path, e))?;
        let id = (|| {
            tx.prepare_cached(
                "INSERT INTO attempts (hostname, source, started_ms) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![hostname, source, ms(now)])?;
            let id = tx.last_insert_rowid();
            Self::put_history(&tx, hostname, &h)?;
            Ok(id)
        })()
        .map_err(|e| sq(&path, e))?;
        tx.commit().map_err(|e| sq(&path, e))?;
        Ok(id)
    }

    /// Closes attempt `id`: success (`failure: None`) resets the hostname's streak; a failure
    /// grows it. Prunes the hostname's oldest rows past retention. Returns the folded history.
    pub fn finish(
        &mut self,
        policy: &Policy,
        id: i64,
        hostname: &str,
        now: SystemTime,
        outcome: Outcome,
        failure: Option<&FailureRecord<'_>>,
    ) -> Result<History<SystemTime>, HistoryError> {
        let path = self.path.clone();
        let mut h = self.history(hostname)?;
        match outcome {
            Outcome::Success => {
                h.record_success();
            }
            Outcome::Failure | Outcome::Interrupted => {
                h.record_failure(policy, now, failure.and_then(|f| f.retry_after));
            }
        }
        let keep = self.keep_per_host as i64;
        let tx = self.conn.transaction().map_err(|e| sq(&path, e))?;
        (|| {
            tx.prepare_cached(
                "UPDATE attempts SET ended_ms = ?2, outcome = ?3, error_class = ?4, error = ?5,
                     retry_after_ms = ?6 WHERE id = ?1",
            )?
            .execute(params![
                id,
                ms(now),
                outcome.as_str(),
                failure.map(|f| f.class),
                failure.map(|f| f.message),
                failure.and_then(|f| f.retry_after).map(dur_ms)
            ])?;
            Self::put_history(&tx, hostname, &h)?;
            // r[impl issue.history.retention]
            tx.prepare_cached(
                "DELETE FROM attempts WHERE hostname = ?1 AND ended_ms IS NOT NULL AND id <= (
                     SELECT id FROM attempts WHERE hostname = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)",
            )?
            .execute(params![hostname, keep])?;
            Ok(())
        })()
        .map_err(|e| sq(&path, e))?;
        tx.commit().map_err(|e| sq(&path, e))?;
        Ok(h)
    }

    /// Settles every row a previous process left open as an interrupted failure at `now`, as the
    /// gate settles a stale attempt. Returns the hostnames settled.
    // r[impl issue.history.settle]
    pub fn settle_open(
        &mut self,
        policy: &Policy,
        now: SystemTime,
    ) -> Result<Vec<String>, HistoryError> {
        let open: Vec<(i64, String)> = self
            .conn
            .prepare("SELECT id, hostname FROM attempts WHERE ended_ms IS NULL ORDER BY id")
            .and_then(|mut st| {
                st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<Result<_, _>>()
            })
            .map_err(|e| self.err(e))?;
        let failure = FailureRecord {
            class: "interrupted",
            message: "the process ended during the attempt",
            retry_after: None,
        };
        let mut hosts = Vec::new();
        for (id, host) in open {
            self.finish(policy, id, &host, now, Outcome::Interrupted, Some(&failure))?;
            hosts.push(host);
        }
        Ok(hosts)
    }

    /// The operator's force-retry: the streak (and with it any block) is reset.
    pub fn reset(&mut self, hostname: &str) -> Result<(), HistoryError> {
        let path = self.path.clone();
        let mut h = self.history(hostname)?;
        h.force_retry();
        let tx = self.conn.transaction().map_err(|e| sq(&path, e))?;
        Self::put_history(&tx, hostname, &h).map_err(|e| sq(&path, e))?;
        tx.commit().map_err(|e| sq(&path, e))
    }

    /// One hostname's latest attempts, newest first.
    pub fn attempts(&self, hostname: &str, limit: usize) -> Result<Vec<AttemptRow>, HistoryError> {
        self.conn
            .prepare_cached(
                "SELECT id, hostname, source, started_ms, ended_ms, outcome, error_class, error,
                     retry_after_ms FROM attempts WHERE hostname = ?1 ORDER BY id DESC LIMIT ?2",
            )
            .and_then(|mut st| {
                st.query_map(params![hostname, limit as i64], |r| {
                    Ok(AttemptRow {
                        id: r.get(0)?,
                        hostname: r.get(1)?,
                        source: r.get(2)?,
                        started: from_ms(r.get(3)?),
                        ended: r.get::<_, Option<i64>>(4)?.map(from_ms),
                        outcome: r
                            .get::<_, Option<String>>(5)?
                            .as_deref()
                            .and_then(Outcome::parse),
                        error_class: r.get(6)?,
                        error: r.get(7)?,
                        retry_after: r
                            .get::<_, Option<i64>>(8)?
                            .map(|v| Duration::from_millis(u64::try_from(v).unwrap_or(0))),
                    })
                })?
                .collect()
            })
            .map_err(|e| self.err(e))
    }

    /// Rows in the table (all hostnames).
    pub fn row_count(&self) -> Result<u64, HistoryError> {
        self.conn
            .query_row("SELECT COUNT(*) FROM attempts", [], |r| r.get::<_, i64>(0))
            .map(|n| n as u64)
            .map_err(|e| self.err(e))
    }

    /// Rows of one hostname.
    pub fn row_count_of(&self, hostname: &str) -> Result<u64, HistoryError> {
        self.conn
            .query_row(
                "SELECT COUNT(*) FROM attempts WHERE hostname = ?1",
                params![hostname],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n as u64)
            .map_err(|e| self.err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn fail(db: &mut HistoryDb, p: &Policy, host: &str, at: SystemTime) -> History<SystemTime> {
        let id = db.begin(p, host, "local", at).unwrap();
        let f = FailureRecord {
            class: "unreachable",
            message: "connection refused",
            retry_after: None,
        };
        db.finish(p, id, host, at, Outcome::Failure, Some(&f))
            .unwrap()
    }

    // r[verify issue.history.sqlite+2]
    #[test]
    fn the_file_and_its_missing_directory_are_created_on_first_open() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("node").join("data");
        let path = data.join("attempts.sqlite");
        let db = HistoryDb::open(&path, 10).unwrap();
        assert_eq!(db.schema_version().unwrap(), SCHEMA_VERSION);
        assert!(data.is_dir() && path.is_file());
        drop(db);
        // A file where the directory should be is a clear error naming the path.
        let blocked = dir.path().join("file");
        std::fs::write(&blocked, b"x").unwrap();
        let err = HistoryDb::open(&blocked.join("attempts.sqlite"), 10).unwrap_err();
        assert!(err.to_string().contains("attempts.sqlite"), "{err}");
    }

    proptest::proptest! {
        // Each case opens a database and folds up to 40 attempts: fewer cases than the default.
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        // r[verify issue.history.per-host]
        #[test]
        fn each_hostnames_folded_row_is_its_own_outcomes_folded(
            steps in proptest::collection::vec(
                (proptest::bool::ANY, proptest::bool::ANY, proptest::option::of(0u64..7200), 1u64..4000),
                1..40,
            ),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let p = Policy::default();
            let mut db = HistoryDb::open(&dir.path().join("a.sqlite"), 5).unwrap();
            let hosts = ["a.example", "b.example"];
            let mut memory = hosts.map(History::<SystemTime>::for_key);
            let mut now = t(0);
            for (second, ok, hint, gap) in steps {
                now += Duration::from_secs(gap);
                let i = usize::from(second);
                let id = db.begin(&p, hosts[i], "local", now).unwrap();
                memory[i].begin_attempt(&p, now);
                let retry_after = hint.map(Duration::from_secs);
                let f = FailureRecord { class: "unreachable", message: "refused", retry_after };
                if ok {
                    db.finish(&p, id, hosts[i], now, Outcome::Success, None).unwrap();
                    memory[i].record_success();
                } else {
                    db.finish(&p, id, hosts[i], now, Outcome::Failure, Some(&f)).unwrap();
                    memory[i].record_failure(&p, now, retry_after);
                }
                for (host, want) in hosts.iter().zip(&memory) {
                    let got = db.history(host).unwrap();
                    proptest::prop_assert_eq!(
                        (got.failures, got.last_failure, got.hint, got.escalated, got.jitter_key),
                        (want.failures, want.last_failure, want.hint, want.escalated, want.jitter_key),
                        "{}", host
                    );
                }
            }
        }
    }

    // r[verify issue.history.sqlite+2]
    #[test]
    fn wal_migrations_and_reopen_keep_the_history() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("attempts.sqlite");
        let p = Policy::default();
        {
            let mut db = HistoryDb::open(&path, 10).unwrap();
            assert_eq!(db.schema_version().unwrap(), SCHEMA_VERSION);
            let mode: String = db
                .conn
                .pragma_query_value(None, "journal_mode", |r| r.get(0))
                .unwrap();
            assert_eq!(mode, "wal");
            fail(&mut db, &p, "a.example", t(0));
        }
        let db = HistoryDb::open(&path, 10).unwrap();
        let h = db.history("a.example").unwrap();
        assert_eq!((h.failures, h.last_failure), (1, Some(t(0))));
        assert_eq!(
            h.jitter_key,
            History::<SystemTime>::for_key("a.example").jitter_key
        );
        let rows = db.attempts("a.example", 10).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].outcome, Some(Outcome::Failure));
        assert_eq!(rows[0].error_class.as_deref(), Some("unreachable"));
        drop(db);
        // A newer schema is refused with a clear error, not migrated down.
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", 99).unwrap();
        drop(conn);
        let err = HistoryDb::open(&path, 10).unwrap_err();
        assert!(err.to_string().contains("newer"), "{err}");
    }

    // r[verify issue.history.per-host]
    // r[verify issue.history.retention]
    #[test]
    fn retention_is_per_hostname() {
        let dir = tempfile::tempdir().unwrap();
        let p = Policy::default();
        let mut db = HistoryDb::open(&dir.path().join("a.sqlite"), 5).unwrap();
        fail(&mut db, &p, "quiet.example", t(0));
        for i in 0..200 {
            fail(&mut db, &p, "noisy.example", t(i * 10));
        }
        assert_eq!(db.row_count_of("noisy.example").unwrap(), 5);
        assert_eq!(db.row_count_of("quiet.example").unwrap(), 1);
        assert_eq!(db.history("quiet.example").unwrap().failures, 1);
        assert_eq!(db.history("noisy.example").unwrap().failures, 200);
    }

    // r[verify issue.history.settle]
    #[test]
    fn an_open_row_is_settled_as_a_failure_on_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.sqlite");
        let p = Policy::default();
        {
            let mut db = HistoryDb::open(&path, 5).unwrap();
            db.begin(&p, "a.example", "acme", t(0)).unwrap();
            // The process dies here.
        }
        let mut db = HistoryDb::open(&path, 5).unwrap();
        assert_eq!(
            db.settle_open(&p, t(30)).unwrap(),
            vec!["a.example".to_owned()]
        );
        let rows = db.attempts("a.example", 5).unwrap();
        assert_eq!(rows[0].outcome, Some(Outcome::Interrupted));
        let h = db.history("a.example").unwrap();
        assert_eq!((h.failures, h.last_failure), (1, Some(t(30))));
        assert!(!holdfast_retry::decide(&p, &h, t(31)).is_eligible());
        assert!(db.settle_open(&p, t(40)).unwrap().is_empty());
    }

    #[test]
    fn a_corrupt_database_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.sqlite");
        std::fs::write(
            &path,
            b"this is not a database, it is garbage, long enough to matter........",
        )
        .unwrap();
        let err = HistoryDb::open(&path, 5).unwrap_err();
        assert!(err.to_string().contains("a.sqlite"), "{err}");
    }

    #[test]
    fn reset_clears_the_streak() {
        let dir = tempfile::tempdir().unwrap();
        let p = Policy::default();
        let mut db = HistoryDb::open(&dir.path().join("a.sqlite"), 5).unwrap();
        fail(&mut db, &p, "a.example", t(0));
        db.reset("a.example").unwrap();
        assert_eq!(db.history("a.example").unwrap().failures, 0);
        assert_eq!(
            db.row_count_of("a.example").unwrap(),
            1,
            "rows stay for the record"
        );
    }
}
