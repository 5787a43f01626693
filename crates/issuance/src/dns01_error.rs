//! What a DNS-01 step (a provider, the propagation check) can fail with: its own module, so the
//! providers and the propagation check depend on it and not on each other.

use std::time::Duration;

use crate::source::ErrorClass;

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
    /// The DNS server answered SERVFAIL to every try: it could not apply the update, for a
    /// reason of its own (such as another client's update failing in the same batch).
    #[error("{name}: DNS server {server} answered SERVFAIL (server failure) to {tries} tries")]
    ServerFailure {
        /// The record's name.
        name: String,
        /// The server.
        server: String,
        /// How many times the update was sent.
        tries: u32,
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

impl Dns01Error {
    /// The attempt's error class: what an operator must fix (a name, a key, a refusal, a
    /// command that fails) is `Rejected`; a server or command that did not answer in time is
    /// `Unreachable`; a record never seen everywhere within the wait is `Timeout`; a server that
    /// failed the update for a reason of its own is `Server`.
    // r[impl issue.dns01.errors+2]
    pub fn class(&self) -> ErrorClass {
        match self {
            Dns01Error::NotInZone { .. }
            | Dns01Error::BadName { .. }
            | Dns01Error::Refused { .. }
            | Dns01Error::Unauthenticated { .. }
            | Dns01Error::Spawn { .. }
            | Dns01Error::Exit { .. } => ErrorClass::Rejected,
            Dns01Error::Unreachable { .. } | Dns01Error::Timeout { .. } => ErrorClass::Unreachable,
            Dns01Error::NotPropagated { .. } => ErrorClass::Timeout,
            Dns01Error::ServerFailure { .. } => ErrorClass::Server,
        }
    }
}

fn output_suffix(output: &str) -> String {
    if output.is_empty() {
        String::new()
    } else {
        format!(": {output}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify issue.dns01.errors+2]
    #[test]
    fn each_provider_error_keeps_its_class() {
        let name = || "_acme-challenge.a.test.".to_owned();
        let server = || "192.0.2.53:53".to_owned();
        let cases = [
            (
                Dns01Error::NotInZone {
                    name: name(),
                    zone: "b.test".into(),
                },
                ErrorClass::Rejected,
            ),
            (
                Dns01Error::BadName {
                    name: name(),
                    message: "x".into(),
                },
                ErrorClass::Rejected,
            ),
            (
                Dns01Error::Refused {
                    name: name(),
                    server: server(),
                    rcode: "NOTAUTH".into(),
                },
                ErrorClass::Rejected,
            ),
            (
                Dns01Error::Unauthenticated {
                    name: name(),
                    server: server(),
                    message: "BADSIG".into(),
                },
                ErrorClass::Rejected,
            ),
            (
                Dns01Error::Spawn {
                    program: "dns".into(),
                    message: "not found".into(),
                },
                ErrorClass::Rejected,
            ),
            (
                Dns01Error::Exit {
                    program: "dns".into(),
                    action: "present",
                    name: name(),
                    status: "exit status: 1".into(),
                    output: String::new(),
                },
                ErrorClass::Rejected,
            ),
            (
                Dns01Error::Unreachable {
                    name: name(),
                    server: server(),
                    message: "timed out".into(),
                },
                ErrorClass::Unreachable,
            ),
            (
                Dns01Error::Timeout {
                    program: "dns".into(),
                    action: "present",
                    name: name(),
                    timeout: Duration::from_secs(60),
                },
                ErrorClass::Unreachable,
            ),
            (
                Dns01Error::ServerFailure {
                    name: name(),
                    server: server(),
                    tries: 3,
                },
                ErrorClass::Server,
            ),
            (
                Dns01Error::NotPropagated {
                    name: name(),
                    missing: vec![server()],
                    waited: Duration::from_secs(120),
                    last_error: None,
                },
                ErrorClass::Timeout,
            ),
        ];
        for (err, class) in cases {
            assert_eq!(err.class(), class, "{err}");
        }
    }
}
