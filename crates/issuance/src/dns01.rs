//! DNS-01 (RFC 8555 §8.4): a provider presents `_acme-challenge.NAME.` TXT records and cleans
//! them up; the ACME source presents one per pending authorization, waits for it to propagate,
//! tells the CA, and removes every record it presented when the attempt ends.

use std::sync::Arc;
use std::time::Duration;

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
}

/// Why a DNS-01 step failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Dns01Error {
    /// The record's name is not inside the provider's zone.
    #[error("{name} is not inside the zone {zone}")]
    NotInZone {
        /// The record's name.
        name: String,
        /// The zone.
        zone: String,
    },
    /// A name that is not a DNS name.
    #[error("{name:?} is not a DNS name: {message}")]
    BadName {
        /// The name.
        name: String,
        /// Why.
        message: String,
    },
    /// The DNS server could not be reached or did not answer in time.
    #[error("{name}: DNS server {server}: {message}")]
    Unreachable {
        /// The record's name.
        name: String,
        /// The server.
        server: String,
        /// Why.
        message: String,
    },
    /// The DNS server refused the update (its RCODE).
    #[error("{name}: DNS server {server} refused the update: {rcode}")]
    Refused {
        /// The record's name.
        name: String,
        /// The server.
        server: String,
        /// The response code (NOTAUTH, REFUSED, …).
        rcode: String,
    },
    /// The server's answer did not verify under the TSIG key: how a server answers an update
    /// signed with a key or secret it does not accept (BADKEY/BADSIG carry an empty MAC).
    #[error(
        "{name}: DNS server {server} answered without a valid TSIG signature (a wrong key name, \
         secret or algorithm, or clock skew): {message}"
    )]
    Unauthenticated {
        /// The record's name.
        name: String,
        /// The server.
        server: String,
        /// What failed to verify.
        message: String,
    },
    /// The exec provider's command could not start.
    #[error("{program}: could not start: {message}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        message: String,
    },
    /// The exec provider's command exited other than 0.
    #[error("{program} {action} {name}: {status}{}", output_suffix(output))]
    Exit {
        /// The program.
        program: String,
        /// `present` or `cleanup`.
        action: &'static str,
        /// The record's name.
        name: String,
        /// How it ended.
        status: String,
        /// The start of what it printed, escaped.
        output: String,
    },
    /// The exec provider's command outlived its timeout and was killed.
    #[error("{program} {action} {name}: still running after {timeout:?}; killed")]
    Timeout {
        /// The program.
        program: String,
        /// `present` or `cleanup`.
        action: &'static str,
        /// The record's name.
        name: String,
        /// The timeout.
        timeout: Duration,
    },
    /// The value was not seen at every propagation server in time.
    #[error(
        "the TXT record {name} was not seen at {} within {waited:?}{}",
        missing.join(", "),
        last_error.as_ref().map(|e| format!(" (last error: {e})")).unwrap_or_default()
    )]
    NotPropagated {
        /// The record's name.
        name: String,
        /// The servers that did not have it.
        missing: Vec<String>,
        /// How long it was waited for.
        waited: Duration,
        /// The last query error, when a query failed rather than answered without the value.
        last_error: Option<String>,
    },
}

fn output_suffix(output: &str) -> String {
    if output.is_empty() {
        String::new()
    } else {
        format!(": {output}")
    }
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
}

/// The records one attempt presented. [`Presented::cleanup`] removes them; dropped before that
/// (the attempt cut off), it removes them on a task of its own.
// r[impl issue.dns01.cleanup]
#[derive(Debug)]
pub struct Presented {
    provider: Arc<dyn DnsProvider>,
    records: Vec<(String, String)>,
}

impl Presented {
    /// Nothing presented yet, through `provider`.
    pub fn new(provider: Arc<dyn DnsProvider>) -> Self {
        Self {
            provider,
            records: Vec::new(),
        }
    }

    /// Presents `value` at `fqdn`. The record is owed a cleanup even when this fails: the
    /// provider may have added it before failing (an update applied whose answer was lost).
    pub async fn present(&mut self, fqdn: &str, value: &str) -> Result<(), Dns01Error> {
        self.records.push((fqdn.to_owned(), value.to_owned()));
        self.provider.present(fqdn, value).await
    }

    /// Removes every presented record; each removal that fails is logged and returned, never
    /// raised.
    pub async fn cleanup(mut self) -> Vec<Dns01Error> {
        let records = std::mem::take(&mut self.records);
        remove_all(self.provider.as_ref(), records).await
    }
}

async fn remove_all(provider: &dyn DnsProvider, records: Vec<(String, String)>) -> Vec<Dns01Error> {
    let mut failed = Vec::new();
    for (fqdn, value) in records {
        if let Err(err) = provider.cleanup(&fqdn, &value).await {
            tracing::warn!(record = %fqdn, %err, "dns-01 record not removed");
            failed.push(err);
        }
    }
    failed
}

impl Drop for Presented {
    fn drop(&mut self) {
        let records = std::mem::take(&mut self.records);
        if records.is_empty() {
            return;
        }
        let provider = self.provider.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    remove_all(provider.as_ref(), records).await;
                });
            }
            Err(_) => {
                for (fqdn, _) in records {
                    tracing::warn!(record = %fqdn, "dns-01 record not removed: no runtime left");
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A provider that records every call and fails the ones it is told to.
    #[derive(Debug, Default)]
    pub(crate) struct Recording {
        pub calls: Mutex<Vec<(&'static str, String, String)>>,
        pub fail_present: bool,
        pub fail_cleanup: bool,
    }

    impl Recording {
        pub(crate) fn calls(&self) -> Vec<(&'static str, String, String)> {
            self.calls.lock().unwrap().clone()
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
            Box::pin(async move { if fail { Err(refused(fqdn)) } else { Ok(()) } })
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
            Box::pin(async move { if fail { Err(refused(fqdn)) } else { Ok(()) } })
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
        let mut presented = Presented::new(provider.clone());
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
        let mut presented = Presented::new(provider.clone());
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
}
