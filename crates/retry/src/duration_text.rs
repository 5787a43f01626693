//! Durations as operators write them in config: `"250ms"`, `"5s"`, `"5m"`, `"1h"`, `"2d"`.
//!
//! One whole number and one unit (`ns`, `us`, `ms`, `s`, `m`, `h`, `d`), nothing else: a bare
//! number is rejected because its unit would be a guess. [`format`] writes the largest unit that
//! represents the value exactly, so a duration read and written again is unchanged.

use std::time::Duration;

/// Why a duration text was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a duration like \"250ms\", \"5s\", \"5m\" or \"1h\"")]
pub struct DurationTextError(pub String);

const UNITS: [(&str, u64); 7] = [
    ("d", 86_400_000_000_000),
    ("h", 3_600_000_000_000),
    ("m", 60_000_000_000),
    ("s", 1_000_000_000),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
];

/// Parse `"5s"`-style text.
// r[impl retry.policy.config]
pub fn parse(text: &str) -> Result<Duration, DurationTextError> {
    let bad = || DurationTextError(text.to_owned());
    let trimmed = text.trim();
    let digits = trimmed.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = trimmed.split_at(digits);
    if number.is_empty() {
        return Err(bad());
    }
    let (_, nanos_per) = UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .ok_or_else(bad)?;
    // Wider than u64: `format` writes any `Duration` exactly, some of them as more than 2^64 ns,
    // and each of those must read back.
    let number: u128 = number.parse().map_err(|_| bad())?;
    let nanos = number.checked_mul(u128::from(*nanos_per)).ok_or_else(bad)?;
    let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| bad())?;
    // The remainder is below 10^9, so it fits.
    let sub = u32::try_from(nanos % 1_000_000_000).map_err(|_| bad())?;
    Ok(Duration::new(secs, sub))
}

/// Write `duration` in the largest unit that represents it exactly (`"0s"` for zero).
pub fn format(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    for (name, per) in UNITS {
        let per = u128::from(per);
        if nanos % per == 0 {
            return format!("{}{name}", nanos / per);
        }
    }
    format!("{nanos}ns")
}

/// Serde helpers for `Option<Duration>` fields written as duration text (feature `serde`).
#[cfg(feature = "serde")]
pub mod option {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Serialize `Some(d)` as its text (`None` is usually skipped by the field's attributes).
    pub fn serialize<S: Serializer>(value: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => s.serialize_some(&super::format(*d)),
            None => s.serialize_none(),
        }
    }

    /// Deserialize duration text into `Some(d)`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let text: Option<String> = Option::deserialize(d)?;
        text.map(|t| super::parse(&t).map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify retry.policy.config]
    #[test]
    fn durations_parse_in_every_unit_and_round_trip() {
        let cases = [
            ("250ms", Duration::from_millis(250)),
            ("5s", Duration::from_secs(5)),
            ("5m", Duration::from_secs(300)),
            ("1h", Duration::from_secs(3600)),
            ("2d", Duration::from_secs(2 * 86_400)),
            ("7us", Duration::from_micros(7)),
            ("9ns", Duration::from_nanos(9)),
            (" 10s ", Duration::from_secs(10)),
            ("0s", Duration::ZERO),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text), Ok(want), "{text}");
            assert_eq!(parse(&format(want)), Ok(want), "{text}");
        }
        // Every duration reads back as written, the largest and the least round included.
        for d in [
            Duration::MAX,
            Duration::new(u64::MAX, 1),
            Duration::new(u64::MAX / 3, 7),
            Duration::from_nanos(u64::MAX) + Duration::from_nanos(1),
        ] {
            assert_eq!(parse(&format(d)), Ok(d), "{}", format(d));
        }
        assert!(
            parse("18446744073709551616s").is_err(),
            "more seconds than a Duration holds"
        );
        assert_eq!(format(Duration::from_secs(300)), "5m");
        assert_eq!(format(Duration::from_millis(1500)), "1500ms");
        for bad in [
            "",
            "5",
            "s",
            "5 s",
            "-5s",
            "1.5s",
            "5sec",
            "5S",
            "99999999999999999999999d",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse("5").unwrap_err().to_string(),
            "\"5\" is not a duration like \"250ms\", \"5s\", \"5m\" or \"1h\""
        );
    }
}
