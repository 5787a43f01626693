//! `/v1/certs` and `/v1/certs/{host}/retry`: the issuance module's hostnames as the operator reads
//! them, and the force-retry that clears a block.

use std::time::SystemTime;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use holdfast_issuance::issuer::HostStatus;
use serde::Serialize;

use crate::state::NodeState;

/// One hostname, as `GET /v1/certs` answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CertView {
    /// The hostname: the certificate's first name.
    pub hostname: String,
    /// The certificate's further names (absent for one name).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<String>,
    /// `acme` or `local`.
    pub source: String,
    /// `valid`, `issuing`, `due`, `debounced` or `blocked`.
    pub state: String,
    /// The current certificate's end of validity (Unix seconds).
    pub not_after: Option<u64>,
    /// The same, as an HTTP date.
    pub not_after_text: Option<String>,
    /// Whole days from now until `not_after`, rounded down: negative once it has passed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_in_days: Option<i64>,
    /// The next renewal (valid) or the next attempt (debounced, blocked), Unix seconds.
    pub next: Option<u64>,
    /// Seconds from now until `next` (0 when it has passed).
    pub next_in_secs: Option<u64>,
    /// Consecutive failures.
    pub failures: u32,
    /// The latest failure.
    pub last_error: Option<String>,
    /// How to clear a block.
    pub clear: Option<String>,
}

/// Whole days from `now` until `end`, rounded down (negative once `end` has passed).
// i[impl node.certs.expiry]
fn days_until(end: SystemTime, now: SystemTime) -> i64 {
    let secs: i128 = match end.duration_since(now) {
        Ok(left) => i128::from(left.as_secs()),
        // Past by a fraction of a second counts as past.
        Err(ago) => {
            -i128::from(ago.duration().as_secs()) - i128::from(ago.duration().subsec_nanos() > 0)
        }
    };
    i64::try_from(secs.div_euclid(86400)).unwrap_or(if secs < 0 { i64::MIN } else { i64::MAX })
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

// i[impl node.certs.names]
impl CertView {
    /// The view of `status` at `now`.
    pub fn new(status: HostStatus, now: SystemTime) -> Self {
        CertView {
            hostname: status.hostname,
            also: status.also,
            source: status.source,
            state: status.state.to_owned(),
            not_after: status.not_after.map(unix),
            not_after_text: status.not_after.map(httpdate::fmt_http_date),
            expires_in_days: status.not_after.map(|end| days_until(end, now)),
            next: status.next.map(unix),
            next_in_secs: status
                .next
                .map(|n| n.duration_since(now).map_or(0, |d| d.as_secs())),
            failures: status.failures,
            last_error: status.last_error,
            clear: status.clear.map(str::to_owned),
        }
    }
}

fn unavailable(configured: bool) -> Response {
    if configured {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "the issuance module is not running now (see `holdfast modules`)\n",
        )
            .into_response()
    } else {
        (
            StatusCode::NOT_FOUND,
            "issuance is not configured on this node (no [issuance] section)\n",
        )
            .into_response()
    }
}

// i[impl node.certs.list]
/// `GET /v1/certs`.
pub fn list(node: &NodeState) -> Response {
    let issuer = match node.issuance.with(|i| i.issuer().clone()) {
        Ok(issuer) => issuer,
        Err(configured) => return unavailable(configured),
    };
    let now = SystemTime::now();
    match issuer.statuses() {
        Ok(statuses) => Json(
            statuses
                .into_iter()
                .map(|s| CertView::new(s, now))
                .collect::<Vec<_>>(),
        )
        .into_response(),
        Err(err) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot read the attempts table: {err}\n"),
        )
            .into_response(),
    }
}

// i[impl node.certs.retry]
/// `POST /v1/certs/{host}/retry` (the caller has checked that mutating calls are allowed).
pub fn retry(node: &NodeState, host: &str) -> Response {
    let issuer = match node.issuance.with(|i| i.issuer().clone()) {
        Ok(issuer) => issuer,
        Err(configured) => return unavailable(configured),
    };
    match issuer.force_retry(host) {
        Ok(()) => {
            tracing::info!(
                hostname = host,
                "certificate force-retry through the admin API"
            );
            (
                StatusCode::ACCEPTED,
                Json(serde_json::json!({ "hostname": host, "retry": true })),
            )
                .into_response()
        }
        Err(holdfast_issuance::issuer::IssuerError::Unknown(_)) => (
            StatusCode::NOT_FOUND,
            format!("{host} is not a configured hostname\n"),
        )
            .into_response(),
        Err(err) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("force-retry of {host} failed: {err}\n"),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify node.certs.names]
    #[test]
    fn a_certificate_of_several_names_is_one_entry_with_its_further_names() {
        let status = |also: Vec<String>| HostStatus {
            hostname: "app.example".into(),
            also,
            source: "acme".into(),
            state: "valid",
            not_after: None,
            next: None,
            failures: 0,
            last_error: None,
            clear: None,
        };
        let now = SystemTime::UNIX_EPOCH;
        let two = serde_json::to_value(CertView::new(status(vec!["www.app.example".into()]), now))
            .unwrap();
        assert_eq!(two["hostname"], "app.example");
        assert_eq!(two["also"], serde_json::json!(["www.app.example"]));
        let one = serde_json::to_value(CertView::new(status(vec![]), now)).unwrap();
        assert!(one.get("also").is_none(), "{one}");
    }

    // i[verify node.certs.expiry]
    #[test]
    fn days_to_expiry_are_whole_days_rounded_down_and_negative_once_past() {
        let now = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
        let day = std::time::Duration::from_secs(86400);
        let secs = std::time::Duration::from_secs;
        assert_eq!(days_until(now + 30 * day, now), 30);
        assert_eq!(days_until(now + 30 * day - secs(1), now), 29);
        assert_eq!(days_until(now + secs(1), now), 0);
        assert_eq!(days_until(now, now), 0);
        assert_eq!(
            days_until(now - std::time::Duration::from_millis(1), now),
            -1
        );
        assert_eq!(days_until(now - day, now), -1);
        assert_eq!(days_until(now - day - secs(1), now), -2);
        let status = HostStatus {
            hostname: "app.example".into(),
            also: vec![],
            source: "acme".into(),
            state: "valid",
            not_after: Some(now + 12 * day + secs(5)),
            next: None,
            failures: 0,
            last_error: None,
            clear: None,
        };
        let view = serde_json::to_value(CertView::new(status.clone(), now)).unwrap();
        assert_eq!(view["expires_in_days"], 12);
        let none = HostStatus {
            not_after: None,
            ..status
        };
        let view = serde_json::to_value(CertView::new(none, now)).unwrap();
        assert!(view.get("expires_in_days").is_none(), "{view}");
    }
}
