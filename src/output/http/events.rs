//! `/events`: the node's event history (`model::events`) as JSON, behind the same TLS and
//! basic auth as every path. The query selects: `since` (an RFC 3339 time, or a Go
//! duration back from now: `10m`), `entity` (comma-separated or repeated; `gpu:0` also takes
//! what lies within it, `gpu:0/gi:1`), `type` (comma-separated or repeated) and `limit` (the
//! newest N). Anything else is refused with 400 and why (an unknown parameter, type or
//! entity shape, a `since` before 1970 or in the future); a query longer than
//! [`MAX_QUERY`] bytes with 414. The answer is built from a copy of the matching events
//! taken under the history's lock, never while holding it.

use super::reply::{text, Response};
use crate::model::clock::now_us;
use crate::model::events::{self, Filter, Found, Kind};
use hyper::header::{self, HeaderValue};
use hyper::StatusCode;
use warp::Reply;

/// The longest query taken, in bytes.
pub(crate) const MAX_QUERY: usize = 2048;
/// Entities or types one query may name.
const MAX_ITEMS: usize = 64;
/// The largest `limit`.
const MAX_LIMIT: usize = 1_000_000;
/// How far ahead of our clock a `since` may be (another host's clock) before it is refused.
const FUTURE_SLACK_US: i64 = 60_000_000;

/// Why a query is refused.
#[derive(Debug, PartialEq)]
pub(crate) enum Refusal {
    TooLong,
    Bad(String),
}

/// The answer to `/events?<query>`.
pub(crate) fn reply(query: &str) -> Response {
    match parse(query, now_us()) {
        Ok(f) => json(&events::global().query(&f)),
        Err(Refusal::TooLong) => text(
            StatusCode::URI_TOO_LONG,
            format!("query longer than {MAX_QUERY} bytes\n"),
        ),
        Err(Refusal::Bad(why)) => text(StatusCode::BAD_REQUEST, format!("{why}\n")),
    }
}

fn json(found: &Found) -> Response {
    let body = serde_json::json!({
        "events": found.events.iter().map(|e| e.to_json()).collect::<Vec<_>>(),
        "dropped_total": found.dropped,
        "kept": found.kept,
        "kept_bytes": found.bytes,
        "max_events": found.bounds.max_events,
        "max_bytes": found.bounds.max_bytes,
    });
    let mut r = hyper::Response::new(body.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

/// The filter a query asks for, at `now_us`.
pub(crate) fn parse(query: &str, now_us: i64) -> Result<Filter, Refusal> {
    if query.len() > MAX_QUERY {
        return Err(Refusal::TooLong);
    }
    let bad = |s: String| Refusal::Bad(s);
    let mut f = Filter::default();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (decode(k).map_err(bad)?, decode(v).map_err(bad)?);
        match k.as_str() {
            "since" if f.since_us.is_some() => return Err(bad("since given twice".into())),
            "since" => f.since_us = Some(since(&v, now_us).map_err(bad)?),
            "limit" if f.limit.is_some() => return Err(bad("limit given twice".into())),
            "limit" => f.limit = Some(limit(&v).map_err(bad)?),
            "entity" => {
                for e in items(&v, "entity").map_err(bad)? {
                    entity(e).map_err(bad)?;
                    f.entities.push(e.to_string());
                }
            }
            "type" => {
                for t in items(&v, "type").map_err(bad)? {
                    f.kinds.push(kind(t).map_err(bad)?);
                }
            }
            other => {
                return Err(bad(format!(
                    "unknown parameter {:?}; known: since, entity, type, limit",
                    printable(other)
                )))
            }
        }
        if f.entities.len() > MAX_ITEMS || f.kinds.len() > MAX_ITEMS {
            return Err(bad(format!("at most {MAX_ITEMS} entities and types")));
        }
    }
    Ok(f)
}

/// A value shown back in a refusal: control characters out, cut short.
fn printable(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(64).collect()
}

/// Percent-decoding (`+` stays `+`: an RFC 3339 offset keeps its sign).
fn decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| "a bad %-escape in the query".to_string())?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "the query is not UTF-8".to_string())
}

fn items<'a>(v: &'a str, what: &str) -> Result<Vec<&'a str>, String> {
    let out: Vec<&str> = v.split(',').map(str::trim).collect();
    if out.iter().any(|s| s.is_empty()) {
        return Err(format!("{what}: an empty value"));
    }
    Ok(out)
}

fn kind(t: &str) -> Result<Kind, String> {
    Kind::parse(t).ok_or_else(|| {
        let known: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
        format!(
            "unknown type {:?}; known: {}",
            printable(t),
            known.join(", ")
        )
    })
}

fn limit(v: &str) -> Result<usize, String> {
    v.parse::<usize>()
        .ok()
        .filter(|n| (1..=MAX_LIMIT).contains(n))
        .ok_or_else(|| format!("limit {:?}: not 1 to {MAX_LIMIT}", printable(v)))
}

/// An entity as events name them: `node`, `exporter`, `engine:<address>`, or
/// `<gpu|switch|cpu|core|gpu_i|gpu_ci>:<id>` followed by `/gi:<id>`, `/ci:<id>` or
/// `/link:<id>` parts.
fn entity(e: &str) -> Result<(), String> {
    let refuse = || {
        format!(
            "entity {:?}: not an entity (gpu:0, gpu:0/gi:1, gpu:0/link:2, switch:1, \
             engine:<address>, node, exporter)",
            printable(e)
        )
    };
    if e.len() > 256 {
        return Err(refuse());
    }
    if e == "node" || e == "exporter" {
        return Ok(());
    }
    if let Some(addr) = e.strip_prefix("engine:") {
        let ok = !addr.is_empty()
            && addr
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.:/[]@".contains(c));
        return if ok { Ok(()) } else { Err(refuse()) };
    }
    let mut parts = e.split('/');
    let top = parts.next().and_then(|p| p.split_once(':'));
    let id_ok =
        |id: &str| !id.is_empty() && id.len() <= 10 && id.bytes().all(|b| b.is_ascii_digit());
    match top {
        Some((k, id))
            if ["gpu", "switch", "cpu", "core", "gpu_i", "gpu_ci"].contains(&k) && id_ok(id) => {}
        _ => return Err(refuse()),
    }
    for p in parts {
        match p.split_once(':') {
            Some((k, id)) if ["gi", "ci", "link"].contains(&k) && id_ok(id) => {}
            _ => return Err(refuse()),
        }
    }
    Ok(())
}

/// `since`: a Go duration back from now, or an RFC 3339 time; in Unix µs.
fn since(v: &str, now_us: i64) -> Result<i64, String> {
    let shown = printable(v);
    if v.is_empty() {
        return Err("since: empty (a duration like 10m, or an RFC 3339 time)".into());
    }
    if v.as_bytes()[0].is_ascii_digit() && v.len() >= 10 && v.as_bytes().get(4) == Some(&b'-') {
        let t = parse_rfc3339(v).ok_or_else(|| {
            format!("since {shown:?}: not an RFC 3339 time (2026-11-28T10:00:00Z)")
        })?;
        if t > now_us.saturating_add(FUTURE_SLACK_US) {
            return Err(format!("since {shown:?}: in the future"));
        }
        if t < 0 {
            return Err(format!("since {shown:?}: before 1970"));
        }
        return Ok(t);
    }
    let d = crate::config::duration::parse(v).map_err(|e| format!("since: {e}"))?;
    let back = i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
    if back > now_us {
        return Err(format!("since {shown:?}: reaches back before 1970"));
    }
    Ok(now_us - back)
}

/// `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` in Unix µs; `None` when malformed. A space
/// where the offset's `+` was is taken as `+` (a client that form-encoded it).
pub(crate) fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = s.get(from..from + len)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let seps = [(4, b'-'), (7, b'-'), (13, b':'), (16, b':')];
    if seps.iter().any(|&(i, c)| b[i] != c) {
        return None;
    }
    let (y, mo, d) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (h, mi, sec) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days_in = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&mo)
        || d < 1
        || d > days_in[(mo - 1) as usize]
        || h > 23
        || mi > 59
        || sec > 60
    {
        return None;
    }
    let mut i = 19;
    let mut micros = 0i64;
    if b[i] == b'.' {
        let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        let frac = &s[i + 1..i + 1 + digits.min(6)];
        micros = frac.parse::<i64>().ok()? * 10i64.pow(6 - frac.len() as u32);
        i += 1 + digits;
    }
    let offset_s = match b.get(i..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-' | b' '), ..] if b.len() == i + 6 && b[i + 3] == b':' => {
            let (oh, om) = (num(i + 1, 2)?, num(i + 4, 2)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let o = oh * 3600 + om * 60;
            if *sign == b'-' {
                -o
            } else {
                o
            }
        }
        _ => return None,
    };
    let days = days_from_civil(y, mo, d);
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec.min(59) - offset_s;
    Some(secs * 1_000_000 + micros)
}

/// Howard Hinnant's days_from_civil: days since 1970-01-01.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000_000;

    fn bad(q: &str) -> String {
        match parse(q, NOW) {
            Err(Refusal::Bad(why)) => why,
            other => panic!("{q}: {other:?}"),
        }
    }

    #[test]
    fn a_query_selects_time_entities_types_and_a_limit() {
        let f = parse(
            "since=10m&entity=gpu:0,gpu:1/gi:2&type=xid&type=gpu_lost&limit=5",
            NOW,
        )
        .unwrap();
        assert_eq!(f.since_us, Some(NOW - 600_000_000));
        assert_eq!(f.entities, ["gpu:0", "gpu:1/gi:2"]);
        assert_eq!(f.kinds, [Kind::Xid, Kind::GpuLost]);
        assert_eq!(f.limit, Some(5));
        let f = parse(
            "since=2027-01-15T08:00:00.5%2B01:00&entity=engine:%5B::1%5D:5555",
            NOW,
        )
        .unwrap();
        assert_eq!(f.since_us, parse_rfc3339("2027-01-15T07:00:00.5Z"));
        assert_eq!(f.entities, ["engine:[::1]:5555"]);
        assert_eq!(parse("", NOW).unwrap(), Filter::default());
    }

    #[test]
    fn hostile_queries_are_refused_with_why() {
        assert!(
            bad("since=99999999999999h").contains("out of range"),
            "{}",
            bad("since=99999999999999h")
        );
        assert!(bad("since=1000000h").contains("before 1970"));
        assert!(bad("since=1969-12-31T23:59:59Z").contains("before 1970"));
        assert!(bad("since=1970-01-01T00:59:59%2B01:00").contains("before 1970"));
        assert!(parse("since=1970-01-01T00:00:00Z", NOW).is_ok());
        assert!(bad("since=9999-12-31T23:59:59Z").contains("in the future"));
        assert!(bad("since=2026-02-30T00:00:00Z").contains("not an RFC 3339 time"));
        assert!(bad("since=yesterday").contains("not a duration"));
        assert!(bad("since=-5m").contains("negative"));
        assert!(bad("since=1m&since=2m").contains("twice"));
        assert!(bad("type=nope").contains("unknown type \"nope\"; known: xid,"));
        assert!(bad("entity=gpu").contains("not an entity"));
        assert!(bad("entity=gpu:0/pod:1").contains("not an entity"));
        assert!(bad("entity=gpu:,").contains("empty"));
        assert!(bad("entity=%ff").contains("UTF-8"));
        assert!(bad("entity=%zz").contains("%-escape"));
        assert!(bad("limit=0").contains("not 1 to"));
        assert!(bad("limit=-1").contains("not 1 to"));
        assert!(bad("drop=table").contains("unknown parameter"));
        let many = vec!["gpu:1"; MAX_ITEMS + 1].join(",");
        assert!(bad(&format!("entity={many}")).contains("at most"));
        let long = format!("entity={}", "gpu:1,".repeat(400));
        assert_eq!(parse(&long, NOW), Err(Refusal::TooLong));
    }

    #[test]
    fn rfc3339_times() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339("2000-02-29T12:00:00.25Z"),
            Some(951_825_600_250_000)
        );
        assert_eq!(
            parse_rfc3339("2000-02-29T13:30:00+01:30"),
            parse_rfc3339("2000-02-29T12:00:00Z")
        );
        assert_eq!(
            parse_rfc3339("2000-02-29T10:00:00-02:00"),
            parse_rfc3339("2000-02-29T12:00:00Z")
        );
        assert_eq!(
            parse_rfc3339("2000-02-29T13:00:00 01:00"),
            parse_rfc3339("2000-02-29T12:00:00Z")
        );
        for bad in [
            "2001-02-29T00:00:00Z",
            "2000-13-01T00:00:00Z",
            "2000-01-01T24:00:00Z",
            "2000-01-01T00:00:00",
            "2000-01-01T00:00:00.Z",
            "2000-01-01T00:00:00+0100",
            "2000-01-01X00:00:00Z",
            "+000-01-01T00:00:00Z",
            "2000-01-01T00:00:00Zjunk",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
        for t in [0i64, 951_825_600_250_000, 1_800_000_000_123_456] {
            assert_eq!(parse_rfc3339(&crate::model::events::rfc3339_us(t)), Some(t));
        }
    }
}
