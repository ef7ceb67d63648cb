//! Go's `time.ParseDuration` syntax (`10s`, `1m30s`, `250ms`, `1.5h`), used by the flags that
//! upstream declares as Go durations.

use std::time::Duration;

const UNITS: [(&str, f64); 8] = [
    ("ns", 1e-9),
    ("us", 1e-6),
    ("µs", 1e-6),
    ("μs", 1e-6),
    ("ms", 1e-3),
    ("s", 1.0),
    ("m", 60.0),
    ("h", 3600.0),
];

/// Parses a non-negative Go duration. `0` alone is allowed without a unit, as in Go.
pub fn parse(s: &str) -> Result<Duration, String> {
    let bad = || format!("'{s}' is not a duration (examples: 10s, 1m30s, 500ms)");
    let body = s.strip_prefix('+').unwrap_or(s);
    if body.starts_with('-') {
        return Err(format!("'{s}': a negative duration is not allowed"));
    }
    if body == "0" {
        return Ok(Duration::ZERO);
    }
    if body.is_empty() {
        return Err(bad());
    }
    let mut rest = body;
    let mut secs = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let (num, tail) = rest.split_at(num_len);
        if num.is_empty() || num == "." {
            return Err(bad());
        }
        let value: f64 = num.parse().map_err(|_| bad())?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let scale = UNITS
            .iter()
            .find(|(u, _)| *u == unit)
            .map(|(_, f)| *f)
            .ok_or_else(bad)?;
        secs += value * scale;
        rest = next;
    }
    Duration::try_from_secs_f64(secs).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::parse;
    use std::time::Duration;

    #[test]
    fn go_durations() {
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("2us"), Ok(Duration::from_micros(2)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        for bad in ["", "10", "s", "1x", "-1s", "1.s.", "ten seconds", "1s "] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
