//! UTC calendar time from `SystemTime`, for log timestamps and dump file names (no time
//! zone database is needed: everything the exporter writes is in UTC).

use std::time::{SystemTime, UNIX_EPOCH};

/// A moment split into UTC calendar fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Utc {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

impl Utc {
    pub(crate) fn now() -> Utc {
        Utc::from_system(SystemTime::now())
    }

    pub(crate) fn from_system(t: SystemTime) -> Utc {
        let secs = match t.duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_secs() as i64,
            Err(e) => -(e.duration().as_secs() as i64),
        };
        Utc::from_unix(secs)
    }

    pub(crate) fn from_unix(secs: i64) -> Utc {
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400) as u32;
        // Howard Hinnant's civil_from_days.
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        Utc {
            year,
            month,
            day,
            hour: rem / 3600,
            minute: rem / 60 % 60,
            second: rem % 60,
        }
    }

    /// RFC 3339, as logrus writes it in UTC: `2024-01-01T00:00:00Z`.
    pub(crate) fn rfc3339(&self) -> String {
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }

    /// Go's `20060102-150405` layout (dcgm-exporter's dump file names).
    pub(crate) fn compact(&self) -> String {
        format!(
            "{:04}{:02}{:02}-{:02}{:02}{:02}",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

#[cfg(test)]
mod tests {
    use super::Utc;

    #[test]
    fn calendar_fields() {
        assert_eq!(Utc::from_unix(0).rfc3339(), "1970-01-01T00:00:00Z");
        assert_eq!(
            Utc::from_unix(1_704_067_200).rfc3339(),
            "2024-01-01T00:00:00Z"
        );
        // 2024-02-29 12:34:56, a leap day.
        assert_eq!(
            Utc::from_unix(1_709_210_096).rfc3339(),
            "2024-02-29T12:34:56Z"
        );
        assert_eq!(Utc::from_unix(1_709_210_096).compact(), "20240229-123456");
        assert_eq!(Utc::from_unix(-1).rfc3339(), "1969-12-31T23:59:59Z");
        assert_eq!(
            Utc::from_unix(4_102_444_799).rfc3339(),
            "2099-12-31T23:59:59Z"
        );
    }
}
