//! What a DNS-01 step (a provider, the propagation check) can fail with: its own module, so the
//! providers and the propagation check depend on it and not on each other.

use std::time::Duration;

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
