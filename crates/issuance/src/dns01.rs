//! DNS-01 (RFC 8555 §8.4): a provider presents `_acme-challenge.NAME.` TXT records and cleans
//! them up; the ACME source presents one per pending authorization, waits for it to propagate,
//! tells the CA, and removes every record it presented when the attempt ends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::dns01_error::Dns01Error;
use crate::source::BoxFuture;

/// Which challenge a certificate answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
pub enum Challenge {
    /// HTTP-01, through the node's own responder (the default).
    #[default]
    #[serde(rename = "http-01")]
    Http01,
    /// DNS-01, through `[issuance.dns01]`'s provider (the only one that can validate a wildcard).
    #[serde(rename = "dns-01")]
    Dns01,
    /// TLS-ALPN-01, through the module's own TLS listener ([`crate::tls_alpn`]).
    #[serde(rename = "tls-alpn-01")]
    TlsAlpn01,
}

/// A DNS-01 provider: adds and removes one TXT value at one name.
pub trait DnsProvider: Send + Sync + std::fmt::Debug {
    /// Adds `value` to the TXT records at `fqdn` (absolute, with its final dot), beside any value
    /// already there.
    fn present<'a>(
        &'a self,
        fqdn: &'a str,
        value: &'a str,
    ) -> BoxFuture<'a, Result<(), Dns01Error>>;
    /// Removes exactly `value` from the TXT records at `fqdn`.
    fn cleanup<'a>(
        &'a self,
        fqdn: &'a str,
        value: &'a str,
    ) -> BoxFuture<'a, Result<(), Dns01Error>>;
}

/// The TXT record's name for an identifier: `_acme-challenge.NAME.`, NAME without `*.`.
// r[impl issue.dns01.record]
pub fn record_name(identifier: &str) -> String {
    let name = identifier.strip_prefix("*.").unwrap_or(identifier);
    let name = name.trim_end_matches('.');
    format!("_acme-challenge.{name}.")
}

/// DNS-01 as the ACME source answers it.
#[derive(Debug, Clone)]
pub struct Dns01 {
    /// Who presents and removes the records.
    pub provider: Arc<dyn DnsProvider>,
    /// Where and how long to wait for each record before telling the CA (`None`: not checked).
    pub propagation: Option<crate::propagation::Propagation>,
    /// The removals still running: the module waits for them when it stops.
    pub cleanups: Cleanups,
}

/// The record removals under way, shared by every attempt and the module: a removal runs on a
/// task of its own, so cutting off the attempt (or whoever awaits it) never loses a record, and
/// the module's stop waits for what is left until its deadline.
// r[impl issue.dns01.cleanup]
#[derive(Debug, Clone, Default)]
pub struct Cleanups {
    inner: Arc<CleanupsInner>,
}

#[derive(Debug, Default)]
struct CleanupsInner {
    /// Records not yet removed (or given up on), by removal id.
    pending: Mutex<Vec<(u64, String, String)>>,
    next: AtomicU64,
    changed: tokio::sync::Notify,
}

impl Cleanups {
    fn pending(&self) -> std::sync::MutexGuard<'_, Vec<(u64, String, String)>> {
        // A poisoned list is still a list of records: keep using it.
        self.inner
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Removes `records` through `provider` on a task of its own; the handle yields the removals
    /// that failed. Without a runtime the records are logged as left behind.
    fn spawn(
        &self,
        provider: Arc<dyn DnsProvider>,
        records: Vec<(String, String)>,
    ) -> Option<tokio::task::JoinHandle<Vec<Dns01Error>>> {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            for (fqdn, value) in records {
                tracing::warn!(record = %fqdn, %value, "dns-01 record not removed: no runtime left");
            }
            return None;
        };
        let ids: Vec<u64> = {
            let mut pending = self.pending();
            records
                .iter()
                .map(|(fqdn, value)| {
                    let id = self.inner.next.fetch_add(1, Ordering::Relaxed);
                    pending.push((id, fqdn.clone(), value.clone()));
                    id
                })
                .collect()
        };
        let this = self.clone();
        Some(runtime.spawn(async move {
            let mut failed = Vec::new();
            for (id, (fqdn, value)) in ids.into_iter().zip(records) {
                if let Err(err) = provider.cleanup(&fqdn, &value).await {
                    tracing::warn!(record = %fqdn, %err, "dns-01 record not removed");
                    failed.push(err);
                }
                this.pending().retain(|(i, _, _)| *i != id);
                this.inner.changed.notify_waiters();
            }
            failed
        }))
    }

    /// The records whose removal has not finished.
    pub fn outstanding(&self) -> Vec<(String, String)> {
        self.pending()
            .iter()
            .map(|(_, fqdn, value)| (fqdn.clone(), value.clone()))
            .collect()
    }

    /// Waits until every removal under way has finished, or `deadline`; returns the records still
    /// not removed then (each logged as left behind).
    pub async fn wait(&self, deadline: tokio::time::Instant) -> Vec<(String, String)> {
        loop {
            let changed = self.inner.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.pending().is_empty() {
                return Vec::new();
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                let left = self.outstanding();
                for (fqdn, value) in &left {
                    tracing::warn!(
                        record = %fqdn, %value,
                        "dns-01 record left behind: its removal did not finish before the stop"
                    );
                }
                return left;
            }
        }
    }
}

/// The records one attempt presented. [`Presented::cleanup`] removes them; dropped before that
/// (the attempt cut off, or its outcome returned first), it hands them to [`Cleanups`].
// r[impl issue.dns01.cleanup]
#[derive(Debug)]
pub struct Presented {
    provider: Arc<dyn DnsProvider>,
    cleanups: Cleanups,
    records: Vec<(String, String)>,
}

impl Presented {
    /// Nothing presented yet, through `provider`; removals run in `cleanups`.
    pub fn new(provider: Arc<dyn DnsProvider>, cleanups: Cleanups) -> Self {
        Self {
            provider,
            cleanups,
            records: Vec::new(),
        }
    }

    /// Presents `value` at `fqdn`. The record is owed a cleanup even when this fails (the
    /// provider may have added it before failing: an update applied whose answer was lost),
    /// unless the provider refused its name before sending anything.
    pub async fn present(&mut self, fqdn: &str, value: &str) -> Result<(), Dns01Error> {
        self.records.push((fqdn.to_owned(), value.to_owned()));
        let result = self.provider.present(fqdn, value).await;
        // A name refused before anything was sent owes no removal (it would only fail the same
        // way, logged as a record not removed).
        if let Err(Dns01Error::NotInZone { .. } | Dns01Error::BadName { .. }) = &result {
            self.records.pop();
        }
        result
    }

    /// Removes every presented record and waits for it; each removal that fails is logged and
    /// returned, never raised. The removal runs in [`Cleanups`]: cutting this future off leaves
    /// it running.
    pub async fn cleanup(mut self) -> Vec<Dns01Error> {
        let records = std::mem::take(&mut self.records);
        if records.is_empty() {
            return Vec::new();
        }
        match self.cleanups.spawn(self.provider.clone(), records) {
            Some(handle) => handle.await.unwrap_or_default(),
            None => Vec::new(),
        }
    }
}

impl Drop for Presented {
    fn drop(&mut self) {
        let records = std::mem::take(&mut self.records);
        if !records.is_empty() {
            self.cleanups.spawn(self.provider.clone(), records);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::time::Duration;

    /// A provider that records every call and fails the ones it is told to.
    #[derive(Debug, Default)]
    pub(crate) struct Recording {
        pub calls: Mutex<Vec<(&'static str, String, String)>>,
        pub fail_present: bool,
        /// Refuses every name as outside its zone (nothing sent).
        pub outside_zone: bool,
        pub fail_cleanup: bool,
        /// How long each cleanup takes.
        pub cleanup_delay: Duration,
        /// The cleanups that finished.
        pub removed: Mutex<Vec<String>>,
    }

    impl Recording {
        pub(crate) fn calls(&self) -> Vec<(&'static str, String, String)> {
            self.calls.lock().unwrap().clone()
        }

        pub(crate) fn removed(&self) -> Vec<String> {
            self.removed.lock().unwrap().clone()
        }
    }

    fn refused(name: &str) -> Dns01Error {
        Dns01Error::Refused {
            name: name.to_owned(),
            server: "fake".into(),
            rcode: "REFUSED".into(),
        }
    }

    impl DnsProvider for Recording {
        fn present<'a>(
            &'a self,
            fqdn: &'a str,
            value: &'a str,
        ) -> BoxFuture<'a, Result<(), Dns01Error>> {
            self.calls
                .lock()
                .unwrap()
                .push(("present", fqdn.to_owned(), value.to_owned()));
            let fail = self.fail_present;
            let outside = self.outside_zone;
            Box::pin(async move {
                if outside {
                    return Err(Dns01Error::NotInZone {
                        name: fqdn.to_owned(),
                        zone: "b.test".into(),
                    });
                }
                if fail { Err(refused(fqdn)) } else { Ok(()) }
            })
        }

        fn cleanup<'a>(
            &'a self,
            fqdn: &'a str,
            value: &'a str,
        ) -> BoxFuture<'a, Result<(), Dns01Error>> {
            self.calls
                .lock()
                .unwrap()
                .push(("cleanup", fqdn.to_owned(), value.to_owned()));
            let fail = self.fail_cleanup;
            Box::pin(async move {
                tokio::time::sleep(self.cleanup_delay).await;
                if fail {
                    return Err(refused(fqdn));
                }
                self.removed.lock().unwrap().push(value.to_owned());
                Ok(())
            })
        }
    }

    // r[verify issue.dns01.record]
    #[test]
    fn the_record_is_under_acme_challenge_without_the_wildcard() {
        assert_eq!(record_name("example.test"), "_acme-challenge.example.test.");
        assert_eq!(
            record_name("*.example.test"),
            "_acme-challenge.example.test."
        );
        assert_eq!(
            record_name("a.b.example.test."),
            "_acme-challenge.a.b.example.test."
        );
    }

    // r[verify issue.dns01.cleanup]
    #[tokio::test]
    async fn every_presented_record_is_removed_and_a_failed_removal_is_returned_not_raised() {
        let provider = Arc::new(Recording {
            fail_cleanup: true,
            ..Recording::default()
        });
        let mut presented = Presented::new(provider.clone(), Cleanups::default());
        presented
            .present("_acme-challenge.a.test.", "v1")
            .await
            .unwrap();
        presented
            .present("_acme-challenge.a.test.", "v2")
            .await
            .unwrap();
        let failed = presented.cleanup().await;
        assert_eq!(failed.len(), 2, "{failed:?}");
        let cleaned: Vec<_> = provider
            .calls()
            .into_iter()
            .filter(|c| c.0 == "cleanup")
            .map(|c| c.2)
            .collect();
        assert_eq!(cleaned, ["v1", "v2"]);
    }

    // r[verify issue.dns01.cleanup]
    #[tokio::test]
    async fn a_record_whose_presentation_failed_or_was_cut_off_is_still_removed() {
        let provider = Arc::new(Recording {
            fail_present: true,
            ..Recording::default()
        });
        let mut presented = Presented::new(provider.clone(), Cleanups::default());
        assert!(
            presented
                .present("_acme-challenge.a.test.", "v1")
                .await
                .is_err()
        );
        // Dropped without a cleanup (the attempt cut off): removed on a task of its own.
        drop(presented);
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            provider.calls(),
            [
                ("present", "_acme-challenge.a.test.".into(), "v1".into()),
                ("cleanup", "_acme-challenge.a.test.".into(), "v1".into()),
            ]
        );
    }

    // r[verify issue.dns01.cleanup]
    #[tokio::test(start_paused = true)]
    async fn a_cleanup_cut_off_part_way_still_removes_every_record() {
        let provider = Arc::new(Recording {
            cleanup_delay: Duration::from_millis(300),
            ..Recording::default()
        });
        let cleanups = Cleanups::default();
        let mut presented = Presented::new(provider.clone(), cleanups.clone());
        for v in ["v1", "v2"] {
            presented
                .present("_acme-challenge.a.test.", v)
                .await
                .unwrap();
        }
        // Cut off after the first removal started, before either finished.
        let cut = tokio::time::timeout(Duration::from_millis(100), presented.cleanup()).await;
        assert!(cut.is_err(), "the cleanup was cut off");
        assert_eq!(cleanups.outstanding().len(), 2);
        let left = cleanups
            .wait(tokio::time::Instant::now() + Duration::from_secs(5))
            .await;
        assert_eq!(left, []);
        assert_eq!(provider.removed(), ["v1", "v2"]);
    }

    // r[verify issue.dns01.cleanup]
    #[tokio::test(start_paused = true)]
    async fn a_dropped_attempts_records_are_removed_before_the_wait_returns_or_named_at_its_deadline()
     {
        let provider = Arc::new(Recording {
            cleanup_delay: Duration::from_secs(2),
            ..Recording::default()
        });
        let cleanups = Cleanups::default();
        let mut presented = Presented::new(provider.clone(), cleanups.clone());
        presented
            .present("_acme-challenge.a.test.", "v1")
            .await
            .unwrap();
        drop(presented);
        // A deadline too short: the record is named as left behind.
        let left = cleanups
            .wait(tokio::time::Instant::now() + Duration::from_secs(1))
            .await;
        assert_eq!(
            left,
            [("_acme-challenge.a.test.".to_owned(), "v1".to_owned())]
        );
        assert_eq!(provider.removed(), Vec::<String>::new());
        // Long enough: it returns only after the removal.
        let left = cleanups
            .wait(tokio::time::Instant::now() + Duration::from_secs(5))
            .await;
        assert_eq!(left, []);
        assert_eq!(provider.removed(), ["v1"]);
    }

    // r[verify issue.dns01.cleanup]
    #[tokio::test]
    async fn a_record_refused_before_anything_was_sent_is_not_removed() {
        let provider = Arc::new(Recording {
            outside_zone: true,
            ..Recording::default()
        });
        let mut presented = Presented::new(provider.clone(), Cleanups::default());
        let err = presented
            .present("_acme-challenge.a.test.", "v1")
            .await
            .unwrap_err();
        assert!(matches!(err, Dns01Error::NotInZone { .. }), "{err}");
        assert_eq!(presented.cleanup().await, []);
        assert_eq!(
            provider.calls(),
            [("present", "_acme-challenge.a.test.".into(), "v1".into())]
        );
    }
}
