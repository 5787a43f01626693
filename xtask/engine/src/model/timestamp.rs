//! Formats a file's modification time as `YYYY-MM-DD HH:MM:SS UTC`, so a reviewer can tell a fresh
//! test run from last week's without another dependency.

use std::time::{SystemTime, UNIX_EPOCH};

/// `time` in UTC, to the second; times before 1970 print as the epoch.
pub fn utc(time: SystemTime) -> String {
    let seconds = time
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    let days = i64::try_from(seconds / 86_400).unwrap_or(i64::MAX / 2);
    let of_day = seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        year,
        u32::try_from(month).unwrap_or(1),
        u32::try_from(day).unwrap_or(1),
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(utc(UNIX_EPOCH), "1970-01-01 00:00:00 UTC");
        // 2000-02-29 12:34:56 UTC, a leap day.
        assert_eq!(
            utc(UNIX_EPOCH + Duration::from_secs(951_827_696)),
            "2000-02-29 12:34:56 UTC"
        );
        // 2026-11-29 22:10:03 UTC.
        assert_eq!(
            utc(UNIX_EPOCH + Duration::from_secs(1_795_990_203)),
            "2026-11-29 22:10:03 UTC"
        );
    }
}
