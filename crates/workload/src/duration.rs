//! Durations as configuration writes them: `"10s"`, `"250ms"`, `"5m"`, `"1h"`.
//!
//! One integer and one unit, nothing else: a bare number would leave the unit to guess, and a
//! compound such as `"1m30s"` is written `"90s"`.

use std::time::Duration;

/// Parses `"<integer><unit>"` with unit `ms`, `s`, `m` or `h`.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(|| {
        format!("{text:?} has no unit (write e.g. \"10s\", \"250ms\", \"5m\", \"1h\")")
    })?;
    let (number, unit) = text.split_at(split);
    if number.is_empty() {
        return Err(format!("{text:?} does not start with a number"));
    }
    let value: u64 = number
        .parse()
        .map_err(|_| format!("{text:?}: {number} is too large"))?;
    let per_unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        other => {
            return Err(format!(
                "{text:?}: unknown unit {other:?} (use ms, s, m or h)"
            ));
        }
    };
    let ms = value
        .checked_mul(per_unit_ms)
        .ok_or_else(|| format!("{text:?} is too large"))?;
    Ok(Duration::from_millis(ms))
}

/// Writes a duration the way [`parse`] reads it, in the largest unit that is exact.
pub fn format(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".to_owned();
    }
    for (unit, per) in [("h", 3_600_000u128), ("m", 60_000), ("s", 1_000)] {
        if ms % per == 0 {
            return format!("{}{unit}", ms / per);
        }
    }
    format!("{ms}ms")
}

/// `#[serde(with = "crate::duration::serde_text")]` for a `Duration` field written as text.
pub mod serde_text {
    use std::time::Duration;

    /// Serializes as `"10s"`.
    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format(*d))
    }

    /// Deserializes from `"10s"`.
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = <String as serde::Deserialize>::deserialize(d)?;
        super::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify workload.config]
    #[test]
    fn durations_round_trip_and_reject_what_is_unclear() {
        let cases = [
            ("10s", Duration::from_secs(10)),
            ("250ms", Duration::from_millis(250)),
            ("5m", Duration::from_secs(300)),
            ("1h", Duration::from_secs(3600)),
            (" 0s ", Duration::ZERO),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text), Ok(want), "{text}");
            assert_eq!(parse(&format(want)), Ok(want));
        }
        assert_eq!(format(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format(Duration::from_secs(90)), "90s");
        for bad in [
            "10",
            "s",
            "",
            "1m30s",
            "10 s",
            "-1s",
            "5d",
            "99999999999999999999s",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} must be rejected");
        }
    }
}
