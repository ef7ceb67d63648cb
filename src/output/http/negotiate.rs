//! Content negotiation for the metrics path: OpenMetrics 1.0 when `Accept` prefers it over
//! the 0.0.4 text format (as Prometheus' scrape Accept header does), gzip when
//! `Accept-Encoding` allows it.

use crate::output::exposition::Format;
use hyper::header::HeaderValue;

/// (media range, its parameters as written, q) of each comma-separated element. Borrowed,
/// compared without regard to case: a scrape allocates nothing to negotiate.
fn elements(h: &str) -> impl Iterator<Item = (&str, &str, f32)> + '_ {
    h.split(',').filter_map(|el| {
        let (range, params) = el.split_once(';').unwrap_or((el, ""));
        let range = range.trim();
        if range.is_empty() {
            return None;
        }
        let q = param(params, "q").map_or(1.0, |v| v.parse().unwrap_or(0.0));
        Some((range, params, q))
    })
}

/// The value of parameter `name` among `params` (`a=1; b="2"`), unquoted.
fn param<'a>(params: &'a str, name: &str) -> Option<&'a str> {
    params.split(';').find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().trim_matches('"'))
    })
}

/// The format the `Accept` header prefers; text when it says nothing we serve.
pub(crate) fn format(accept: Option<&HeaderValue>) -> Format {
    let Some(h) = accept.and_then(|h| h.to_str().ok()) else {
        return Format::Text;
    };
    let mut best: Option<(f32, Format)> = None;
    for (range, params, q) in elements(h) {
        let version = param(params, "version");
        let is = |r: &str| range.eq_ignore_ascii_case(r);
        let f = if is("application/openmetrics-text") && matches!(version, None | Some("1.0.0")) {
            Format::OpenMetrics
        } else if (is("text/plain") && matches!(version, None | Some("0.0.4")))
            || is("text/*")
            || is("*/*")
        {
            Format::Text
        } else {
            continue;
        };
        // Ties keep the earlier element, the client's own order.
        if q > 0.0 && !matches!(best, Some((bq, _)) if q <= bq) {
            best = Some((q, f));
        }
    }
    best.map_or(Format::Text, |(_, f)| f)
}

/// Whether `Accept-Encoding` allows gzip.
pub(crate) fn gzip(accept_encoding: Option<&HeaderValue>) -> bool {
    // What Prometheus sends, on every scrape: nothing to parse.
    if accept_encoding.is_some_and(|h| h.as_bytes() == b"gzip") {
        return true;
    }
    let Some(h) = accept_encoding.and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let mut gzip = None;
    let mut any = None;
    for (coding, _, q) in elements(h) {
        if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
            gzip = Some(q);
        } else if coding == "*" {
            any = Some(q);
        }
    }
    gzip.or(any).is_some_and(|q| q > 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(s: &str) -> Format {
        format(Some(&HeaderValue::from_str(s).unwrap()))
    }

    fn g(s: &str) -> bool {
        gzip(Some(&HeaderValue::from_str(s).unwrap()))
    }

    #[test]
    fn prometheus_accept_headers() {
        // Prometheus 2.x default scrape Accept header.
        assert_eq!(
            f("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"),
            Format::OpenMetrics
        );
        // scrape_protocols: [PrometheusText0.0.4]
        assert_eq!(f("text/plain;version=0.0.4;q=1,*/*;q=0.1"), Format::Text);
        assert_eq!(
            f("application/openmetrics-text; version=1.0.0; charset=utf-8"),
            Format::OpenMetrics
        );
        assert_eq!(
            f("application/openmetrics-text;version=0.0.1"),
            Format::Text
        );
        assert_eq!(
            f("text/plain;q=0.9, application/openmetrics-text;q=0.5"),
            Format::Text
        );
        assert_eq!(f("application/json"), Format::Text);
        assert_eq!(f("*/*"), Format::Text);
        assert_eq!(format(None), Format::Text);
    }

    #[test]
    fn gzip_when_allowed() {
        assert!(g("gzip"));
        assert!(g("deflate, gzip;q=1.0, *;q=0.5"));
        assert!(g("*"));
        assert!(!g("gzip;q=0"));
        assert!(!g("identity"));
        assert!(!g("br, *;q=0"));
        assert!(!gzip(None));
        // Codings, parameter names and media ranges are case-insensitive.
        assert!(g("GZip;Q=0.5"));
        assert!(!g("gzip; Q=0"));
        assert!(!g("identity;q=1, X-GZIP;q=0"));
    }

    #[test]
    fn media_ranges_and_parameters_ignore_case_and_quotes() {
        assert_eq!(
            f("Application/OpenMetrics-Text; Version=\"1.0.0\""),
            Format::OpenMetrics
        );
        assert_eq!(
            f("text/plain;q=0.2, application/openmetrics-text;q=0.3"),
            Format::OpenMetrics
        );
        assert_eq!(f("application/openmetrics-text;q=0"), Format::Text);
        assert_eq!(f(",;, text/*;q=0.5"), Format::Text);
    }
}
