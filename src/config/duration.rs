//! Go's `time.ParseDuration` syntax (`1s`, `500ms`, `1h30m`, `1.5s`, `0`), which
//! dcgm-exporter's duration flags and its YAML configuration use.

use std::time::Duration;

/// The longest interval accepted, in milliseconds: DCGM takes a watch's frequency and
/// every age in microseconds as an i64.
pub(crate) const MAX_MS: u64 = (i64::MAX / 1000) as u64;

/// Why a text is no duration (the text as given).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Error {
    #[error("'{0}' is not a duration (like 500ms, 10s, 1m30s)")]
    NotADuration(String),
    #[error("'{0}' is negative")]
    Negative(String),
    #[error("'{0}' is out of range")]
    OutOfRange(String),
}

/// Parses a non-negative Go duration.
pub(crate) fn parse(s: &str) -> Result<Duration, Error> {
    let bad = || Error::NotADuration(s.to_string());
    let body = s.strip_prefix('+').unwrap_or(s);
    if body.starts_with('-') {
        return Err(Error::Negative(s.to_string()));
    }
    if body == "0" {
        return Ok(Duration::ZERO);
    }
    if body.is_empty() {
        return Err(bad());
    }
    let mut rest = body;
    let mut total_ns: f64 = 0.0;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let (num, tail) = rest.split_at(num_len);
        if num.is_empty() || num == "." || num.matches('.').count() > 1 {
            return Err(bad());
        }
        let value: f64 = num.parse().map_err(|_| bad())?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad()),
        };
        total_ns += value * scale;
        rest = tail;
    }
    if !total_ns.is_finite() || total_ns > u64::MAX as f64 {
        return Err(Error::OutOfRange(s.to_string()));
    }
    Ok(Duration::from_nanos(total_ns.round() as u64))
}

#[cfg(test)]
mod tests {
    use super::{parse, Error};
    use std::time::Duration;

    #[test]
    fn go_durations() {
        for (s, ms) in [
            ("0", 0),
            ("0s", 0),
            ("1s", 1000),
            ("500ms", 500),
            ("1m30s", 90_000),
            ("1.5s", 1500),
            ("2h", 7_200_000),
            ("+10s", 10_000),
            ("1000us", 1),
            ("1000µs", 1),
        ] {
            assert_eq!(parse(s), Ok(Duration::from_millis(ms)), "{s}");
        }
        assert_eq!(parse("1500ns"), Ok(Duration::from_nanos(1500)));
        for s in ["", "1", "s", "1x", "1.2.3s", "ms", " 1s", "1s "] {
            assert_eq!(parse(s), Err(Error::NotADuration(s.into())), "{s}");
        }
        assert_eq!(parse("-1s"), Err(Error::Negative("-1s".into())));
        assert_eq!(parse("1e300h"), Err(Error::NotADuration("1e300h".into())));
        let huge = format!("{}h", "9".repeat(20));
        assert_eq!(parse(&huge), Err(Error::OutOfRange(huge.clone())));
    }
}
