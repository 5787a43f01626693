//! Durations as operators write them in config: `"250ms"`, `"5s"`, `"5m"`, `"1h"`, `"2d"`.
//!
//! One whole number and one unit (`ns`, `us`, `ms`, `s`, `m`, `h`, `d`), spaces allowed around
//! and between them, nothing else: a bare number is rejected because its unit would be a guess.
//! [`format`] writes the largest unit that represents the value exactly, so a duration read and
//! written again is unchanged. This is the one duration parser of the workspace: every crate's
//! config and the node's CLI read durations here.

use std::time::Duration;

/// Why a duration text was not accepted. The text itself is never part of the message: a
/// secret written in the wrong place must not be echoed wherever the error goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DurationTextError {
    /// Not a whole number followed by a unit.
    #[error(
        "invalid duration: write a whole number and a unit, e.g. \"250ms\", \"5s\", \"5m\", \"1h\""
    )]
    Syntax,
    /// A unit that is not one of ns, us, ms, s, m, h, d.
    #[error("invalid duration: unknown unit (use ns, us, ms, s, m, h or d)")]
    Unit,
    /// Longer than a `Duration` holds.
    #[error("invalid duration: too long")]
    Overflow,
}

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
// r[impl retry.policy.config+2]
pub fn parse(text: &str) -> Result<Duration, DurationTextError> {
    let trimmed = text.trim();
    let digits = trimmed.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = trimmed.split_at(digits);
    // `"5 s"` reads as `"5s"` (configs written for the node's earlier parser use it).
    let unit = unit.trim_start();
    if number.is_empty() || unit.is_empty() {
        return Err(DurationTextError::Syntax);
    }
    let (_, nanos_per) = UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .ok_or(DurationTextError::Unit)?;
    // Wider than u64: `format` writes any `Duration` exactly, some of them as more than 2^64 ns,
    // and each of those must read back. Only digits remain, so a failed parse is an overflow.
    let number: u128 = number.parse().map_err(|_| DurationTextError::Overflow)?;
    let nanos = number
        .checked_mul(u128::from(*nanos_per))
        .ok_or(DurationTextError::Overflow)?;
    let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| DurationTextError::Overflow)?;
    // The remainder is below 10^9, so it fits.
    let sub = u32::try_from(nanos % 1_000_000_000).map_err(|_| DurationTextError::Overflow)?;
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

    // r[verify retry.policy.config+2]
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
            "-5s",
            "1.5s",
            "5sec",
            "5S",
            "99999999999999999999999d",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse("5 s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse("5"), Err(DurationTextError::Syntax));
        assert_eq!(parse("soon"), Err(DurationTextError::Syntax));
        assert_eq!(parse("5 fortnights"), Err(DurationTextError::Unit));
        assert_eq!(
            parse("99999999999999999999999d"),
            Err(DurationTextError::Overflow)
        );
    }

    // r[verify retry.policy.config+2]
    #[test]
    fn a_refused_duration_never_repeats_its_text() {
        for bad in [
            "hunter2",
            "5 hunter2",
            "99999999999999999999999hunter2d",
            "hunter2s",
        ] {
            let shown = parse(bad).unwrap_err().to_string();
            assert!(!shown.contains("hunter2"), "{shown}");
        }
    }

    proptest::proptest! {
        // r[verify retry.policy.config+2]
        #[test]
        fn every_duration_written_reads_back(secs in proptest::num::u64::ANY, nanos in 0u32..1_000_000_000) {
            let d = Duration::new(secs, nanos);
            proptest::prop_assert_eq!(parse(&format(d)), Ok(d));
        }

        // r[verify retry.policy.config+2]
        #[test]
        fn any_text_is_parsed_or_refused_without_a_panic(text in "\\PC*") {
            let _ = parse(&text);
        }

        // r[verify retry.policy.config+2]
        #[test]
        fn number_and_unit_text_never_panics(n in "[0-9]{0,30}", space in " {0,2}", unit in "[a-z]{0,3}") {
            let _ = parse(&format!("{n}{space}{unit}"));
        }
    }
}
