//! Durations as the config writes them: `"250ms"`, `"5s"`, `"5m"`, `"1h"`, `"2d"`.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};

/// A duration read from the config. Serialises back to the same notation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ConfigDuration(pub Duration);

impl ConfigDuration {
    /// The duration.
    pub fn get(self) -> Duration {
        self.0
    }
}

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not a number followed by a unit.
    #[error(
        "invalid duration {0:?}: write a whole number and a unit, e.g. \"5s\", \"250ms\", \"5m\", \"1h\""
    )]
    Syntax(String),
    /// A unit that is not one of ms, s, m, h, d.
    #[error("invalid duration {value:?}: unknown unit {unit:?} (use ms, s, m, h or d)")]
    Unit {
        /// The whole value.
        value: String,
        /// The unit found.
        unit: String,
    },
    /// Too long to represent.
    #[error("invalid duration {0:?}: too long")]
    Overflow(String),
}

// i[impl node.config.duration]
/// Parses `"5s"`-style durations (a whole number and one unit).
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let trimmed = text.trim();
    let digits = trimmed.chars().take_while(char::is_ascii_digit).count();
    if digits == 0 {
        return Err(DurationError::Syntax(text.to_owned()));
    }
    let (number, unit) = trimmed.split_at(digits);
    let n: u64 = number
        .parse()
        .map_err(|_| DurationError::Overflow(text.to_owned()))?;
    let seconds_per = match unit.trim() {
        "ms" => return Ok(Duration::from_millis(n)),
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "" => return Err(DurationError::Syntax(text.to_owned())),
        other => {
            return Err(DurationError::Unit {
                value: text.to_owned(),
                unit: other.to_owned(),
            });
        }
    };
    n.checked_mul(seconds_per)
        .map(Duration::from_secs)
        .ok_or_else(|| DurationError::Overflow(text.to_owned()))
}

/// Writes a duration in the largest unit that represents it exactly.
pub fn format(d: Duration) -> String {
    let ms = d.as_millis();
    if ms % 1000 != 0 {
        return format!("{ms}ms");
    }
    let s = d.as_secs();
    for (unit, per) in [("d", 86_400), ("h", 3600), ("m", 60)] {
        if s != 0 && s % per == 0 {
            return format!("{}{unit}", s / per);
        }
    }
    format!("{s}s")
}

impl fmt::Display for ConfigDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format(self.0))
    }
}

impl<'de> serde::Deserialize<'de> for ConfigDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ConfigDuration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration string such as \"5s\" or \"5m\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                parse(v).map(ConfigDuration).map_err(E::custom)
            }
        }
        deserializer.deserialize_str(V)
    }
}

impl serde::Serialize for ConfigDuration {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify node.config.duration]
    #[test]
    fn durations_parse_in_every_unit_and_refuse_the_rest() {
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("2d"), Ok(Duration::from_secs(172_800)));
        assert!(matches!(parse("5"), Err(DurationError::Syntax(_))));
        assert!(matches!(parse("s"), Err(DurationError::Syntax(_))));
        assert!(matches!(parse("-5s"), Err(DurationError::Syntax(_))));
        assert!(matches!(
            parse("5 fortnights"),
            Err(DurationError::Unit { .. })
        ));
        assert!(matches!(
            parse("99999999999999999999s"),
            Err(DurationError::Overflow(_))
        ));
        assert!(matches!(
            parse("999999999999999999d"),
            Err(DurationError::Overflow(_))
        ));
        for d in ["250ms", "5s", "5m", "1h", "2d", "90s"] {
            assert_eq!(format(parse(d).unwrap()), d);
        }
    }
}
