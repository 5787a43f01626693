//! HTTP: which statuses are worth retrying, and the server's Retry-After hint.

use std::fmt;
use std::time::{Duration, SystemTime};

use crate::classify::Class;

/// An HTTP status code, 100–999.
///
/// Built only from a number the HTTP layer parsed as a status (`StatusCode::new(u16)`); there is
/// deliberately no conversion from text, so "port 503" or "chunk 429 of 812" inside an error
/// message can never be taken for a status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StatusCode(u16);

impl StatusCode {
    /// A status code, or `None` outside 100–999.
    pub const fn new(code: u16) -> Option<Self> {
        if code >= 100 && code <= 999 {
            Some(Self(code))
        } else {
            None
        }
    }

    /// The numeric code.
    pub const fn as_u16(self) -> u16 {
        self.0
    }
}

impl fmt::Display for StatusCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Whether a request that got this status may succeed if repeated later: exactly 408, 429, 500,
/// 502, 503, 504 and 529. Not every 5xx: 501 (not implemented), 505 (version) and the
/// CDN-specific 520–527 say that repeating will not help.
// r[impl classify.http.status]
pub fn is_retryable(status: StatusCode) -> bool {
    matches!(status.0, 408 | 429 | 500 | 502 | 503 | 504 | 529)
}

/// The class of a failed request's status: [`Class::Transient`] when retryable, otherwise
/// [`Class::Item`] (this request will not succeed by repeating it; the channel is still fine).
/// Statuses below 400 are not failures and classify as [`Class::Item`] if asked.
pub fn classify_status(status: StatusCode) -> Class {
    if is_retryable(status) {
        Class::Transient
    } else {
        Class::Item
    }
}

/// Parse a Retry-After header value: delta-seconds (`"120"`) or an HTTP-date
/// (`"Wed, 21 Oct 2015 07:28:00 GMT"`), as a wait from `now`. A date in the past is a zero wait;
/// anything else (negative, fractional, garbage) is `None`.
///
/// The wait is whatever the server said, up to `u64::MAX` seconds for an absurd number: pass it
/// to a gate or [`crate::History`] (which cut it to the policy's hint cap) rather than adding it
/// to an `Instant` yourself, which panics on overflow.
// r[impl classify.http.retry-after]
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Absurdly long numbers are still "a long time", not an error; the policy caps hints.
        let secs = value.parse::<u64>().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::marker::PhantomData;

    fn status(code: u16) -> StatusCode {
        StatusCode::new(code).unwrap()
    }

    // r[verify classify.http.status]
    #[test]
    fn retryable_statuses_are_exactly_the_fixed_set() {
        let retryable: Vec<u16> = (100..=999).filter(|c| is_retryable(status(*c))).collect();
        assert_eq!(retryable, [408, 429, 500, 502, 503, 504, 529]);
        for code in [
            501, 505, 520, 521, 522, 523, 524, 525, 526, 527, 404, 401, 400,
        ] {
            assert_eq!(classify_status(status(code)), Class::Item, "{code}");
        }
        assert_eq!(classify_status(status(503)), Class::Transient);
        assert_eq!(StatusCode::new(99), None);
        assert_eq!(StatusCode::new(1000), None);
    }

    /// Whether `T` can be built from text, resolved at compile time: the inherent constant wins
    /// when `T: FromStr`, the trait's default otherwise.
    struct FromText<T>(PhantomData<T>);
    trait NotFromText {
        const FROM_TEXT: bool = false;
    }
    impl<T> NotFromText for FromText<T> {}
    impl<T: std::str::FromStr> FromText<T> {
        #[allow(dead_code)]
        const FROM_TEXT: bool = true;
    }
    struct TryFromText<T>(PhantomData<T>);
    trait NotTryFromText {
        const FROM_TEXT: bool = false;
    }
    impl<T> NotTryFromText for TryFromText<T> {}
    impl<T: for<'a> TryFrom<&'a str>> TryFromText<T> {
        #[allow(dead_code)]
        const FROM_TEXT: bool = true;
    }

    // r[verify classify.http.status]
    #[test]
    fn status_shaped_text_never_classifies_as_retryable() {
        // The probe itself works (u16 can be built from text); the classifier's input cannot be.
        let probes = [
            FromText::<u16>::FROM_TEXT,
            FromText::<StatusCode>::FROM_TEXT,
            TryFromText::<StatusCode>::FROM_TEXT,
        ];
        assert_eq!(probes, [true, false, false]);
        // The real classifier's one input is that typed status: whatever numbers an error's
        // message holds, only the status the HTTP layer parsed decides. A non-retryable status
        // stays non-retryable next to status-shaped text, a retryable one stays retryable.
        let classify: fn(StatusCode) -> Class = classify_status;
        let retryable: fn(StatusCode) -> bool = is_retryable;
        for (message, code) in [
            ("dial tcp 10.0.0.1: port 503 refused", 404),
            ("chunk 429 of 812", 400),
            ("HTTP 503", 501),
            ("upstream said 404", 503),
        ] {
            let parsed = status(code);
            let expected = if matches!(code, 503) {
                Class::Transient
            } else {
                Class::Item
            };
            assert_eq!(classify(parsed), expected, "{message} with status {code}");
            assert_eq!(retryable(parsed), expected == Class::Transient, "{message}");
        }
    }

    // r[verify classify.http.retry-after]
    #[test]
    fn retry_after_parses_delta_seconds_and_http_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_400); // 07:26:40 GMT
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
            Some(Duration::from_secs(80))
        );
        // Obsolete formats that HTTP still requires recipients to accept.
        assert_eq!(
            parse_retry_after("Wednesday, 21-Oct-15 07:28:00 GMT", now),
            Some(Duration::from_secs(80))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(
            parse_retry_after("99999999999999999999999", now),
            Some(Duration::from_secs(u64::MAX))
        );
        for bad in ["", "-5", "1.5", "soon", "120s"] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
    }
}
