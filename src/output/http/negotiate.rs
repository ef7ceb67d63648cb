//! Content negotiation for the metrics path: OpenMetrics 1.0 when `Accept` prefers it over
//! the 0.0.4 text format (as Prometheus' scrape Accept header does), gzip when
//! `Accept-Encoding` allows it.

use crate::output::exposition::Format;
use hyper::header::HeaderValue;

/// (media range, parameters, q) of each comma-separated element.
fn elements(h: &str) -> impl Iterator<Item = (String, Vec<(String, String)>, f32)> + '_ {
    h.split(',').filter_map(|el| {
        let mut parts = el.split(';').map(str::trim);
        let range = parts.next()?.to_ascii_lowercase();
        if range.is_empty() {
            return None;
        }
        let mut q = 1.0f32;
        let mut params = Vec::new();
        for p in parts {
            let Some((k, v)) = p.split_once('=') else {
                continue;
            };
            let k = k.trim().to_ascii_lowercase();
            let v = v.trim().trim_matches('"').to_string();
            if k == "q" {
                q = v.parse().unwrap_or(0.0);
            } else {
                params.push((k, v));
            }
        }
        Some((range, params, q))
    })
}

/// The format the `Accept` header prefers; text when it says nothing we serve.
pub fn format(accept: Option<&HeaderValue>) -> Format {
    let Some(h) = accept.and_then(|h| h.to_str().ok()) else {
        return Format::Text;
    };
    let mut best: Option<(f32, Format)> = None;
    for (range, params, q) in elements(h) {
        let version = params
            .iter()
            .find(|(k, _)| k == "version")
            .map(|(_, v)| v.as_str());
        let f = match (range.as_str(), version) {
            ("application/openmetrics-text", None | Some("1.0.0")) => Format::OpenMetrics,
            ("text/plain", None | Some("0.0.4")) | ("text/*" | "*/*", _) => Format::Text,
            _ => continue,
        };
        // Ties keep the earlier element, the client's own order.
        if q > 0.0 && !matches!(best, Some((bq, _)) if q <= bq) {
            best = Some((q, f));
        }
    }
    best.map_or(Format::Text, |(_, f)| f)
}

/// Whether `Accept-Encoding` allows gzip.
pub fn gzip(accept_encoding: Option<&HeaderValue>) -> bool {
    let Some(h) = accept_encoding.and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let mut gzip = None;
    let mut any = None;
    for (coding, _, q) in elements(h) {
        match coding.as_str() {
            "gzip" | "x-gzip" => gzip = Some(q),
            "*" => any = Some(q),
            _ => {}
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
    }
}
