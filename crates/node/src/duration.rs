//! Durations as the config writes them: `"250ms"`, `"5s"`, `"5m"`, `"1h"`, `"2d"`.
//!
//! Only the serde shape lives here; the text is read and written by holdfast-retry's
//! [`duration_text`](holdfast_retry::duration_text), the one duration parser every crate uses.

use std::fmt;
use std::time::Duration;

use holdfast_retry::duration_text;
use serde::de::{self, Deserializer, Visitor};

pub use holdfast_retry::duration_text::{DurationTextError as DurationError, format, parse};

/// A duration read from the config. Serialises back to the same notation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ConfigDuration(pub Duration);

impl ConfigDuration {
    /// The duration.
    pub fn get(self) -> Duration {
        self.0
    }
}

impl fmt::Display for ConfigDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&duration_text::format(self.0))
    }
}

// i[impl node.config.duration+2]
impl<'de> serde::Deserialize<'de> for ConfigDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ConfigDuration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration string such as \"5s\" or \"5m\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                duration_text::parse(v)
                    .map(ConfigDuration)
                    .map_err(E::custom)
            }
        }
        deserializer.deserialize_str(V)
    }
}

impl serde::Serialize for ConfigDuration {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&duration_text::format(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct One {
        d: ConfigDuration,
    }

    fn read(text: &str) -> Result<Duration, String> {
        toml::from_str::<One>(&format!("d = {text:?}"))
            .map(|one| one.d.get())
            .map_err(|e| e.message().to_owned())
    }

    // i[verify node.config.duration+2]
    #[test]
    fn config_durations_read_every_unit_and_refuse_without_the_value() {
        assert_eq!(read("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(read("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(read("5 s"), Ok(Duration::from_secs(5)));
        assert_eq!(read("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(read("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(read("2d"), Ok(Duration::from_secs(172_800)));
        assert_eq!(read("7us"), Ok(Duration::from_micros(7)));
        for bad in [
            "5",
            "s",
            "-5s",
            "5 secrets",
            "999999999999999999999999secretd",
        ] {
            let err = read(bad).expect_err(bad);
            assert!(err.starts_with("invalid duration"), "{bad}: {err}");
            assert!(!err.contains("secret"), "{bad}: {err}");
        }
        for d in ["250ms", "5s", "5m", "1h", "2d", "90s"] {
            assert_eq!(ConfigDuration(parse(d).unwrap()).to_string(), d);
        }
    }
}
