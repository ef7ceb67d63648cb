//! OpenMetrics 1.0 text encoding of metric families (the `prometheus` crate only writes the
//! 0.0.4 text format). Differences from 0.0.4 that matter here: a counter family is named
//! without `_total` in `# HELP`/`# TYPE` and its sample carries the `_total` suffix, `untyped`
//! is `unknown`, help text escapes `"` too, and the exposition ends with `# EOF` (written by
//! the caller, once, after every part of the page).

use prometheus::proto::{MetricFamily, MetricType};
use std::fmt::Write;

pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
pub const EOF: &[u8] = b"# EOF\n";

/// Appends the families (without the closing `# EOF`).
pub fn encode(families: &[MetricFamily], out: &mut Vec<u8>) {
    let mut s = String::with_capacity(families.len() * 256);
    for fam in families {
        let name = fam.name();
        let (family, sample, ty) = match fam.get_field_type() {
            MetricType::COUNTER => {
                let base = name.strip_suffix("_total").unwrap_or(name);
                (base, format!("{base}_total"), "counter")
            }
            MetricType::GAUGE => (name, name.to_string(), "gauge"),
            MetricType::UNTYPED => (name, name.to_string(), "unknown"),
            // Nothing we export is a histogram or summary (render.rs maps such CSV rows to
            // gauges); writing one without its buckets/quantiles would make the page invalid.
            MetricType::HISTOGRAM | MetricType::SUMMARY => {
                tracing::error!("openmetrics: {name} is a histogram or summary; not exported");
                continue;
            }
        };
        if fam.get_metric().is_empty() {
            continue;
        }
        if !fam.help().is_empty() {
            s.push_str("# HELP ");
            s.push_str(family);
            s.push(' ');
            escape(&mut s, fam.help(), true);
            s.push('\n');
        }
        let _ = writeln!(s, "# TYPE {family} {ty}");
        for m in fam.get_metric() {
            s.push_str(&sample);
            let labels = m.get_label();
            if !labels.is_empty() {
                s.push('{');
                for (i, l) in labels.iter().enumerate() {
                    if i > 0 {
                        s.push(',');
                    }
                    s.push_str(l.name());
                    s.push_str("=\"");
                    escape(&mut s, l.value(), true);
                    s.push('"');
                }
                s.push('}');
            }
            let v = match fam.get_field_type() {
                MetricType::COUNTER => m.get_counter().value(),
                MetricType::GAUGE => m.get_gauge().value(),
                _ => m.untyped.value(),
            };
            s.push(' ');
            number(&mut s, v);
            s.push('\n');
        }
    }
    out.extend_from_slice(s.as_bytes());
}

fn escape(out: &mut String, v: &str, quote: bool) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quote => out.push_str("\\\""),
            c => out.push(c),
        }
    }
}

fn number(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        let _ = write!(out, "{}", v as i64);
    } else {
        // Shortest representation that reads back to the same f64.
        let _ = write!(out, "{v:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::proto::{Counter, Gauge, LabelPair, Metric};

    fn family(name: &str, ty: MetricType, values: &[(&str, f64)]) -> MetricFamily {
        let mut f = MetricFamily::default();
        f.set_name(name.into());
        f.set_help("a \"quoted\" \\ help\nline".into());
        f.set_field_type(ty);
        for (gpu, v) in values {
            let mut m = Metric::default();
            let mut l = LabelPair::default();
            l.set_name("gpu".into());
            l.set_value(gpu.to_string());
            m.label.push(l);
            if ty == MetricType::COUNTER {
                let mut c = Counter::default();
                c.set_value(*v);
                m.set_counter(c);
            } else {
                let mut g = Gauge::default();
                g.set_value(*v);
                m.set_gauge(g);
            }
            f.mut_metric().push(m);
        }
        f
    }

    #[test]
    fn counters_get_the_total_suffix_on_samples_only() {
        let mut out = Vec::new();
        encode(
            &[
                family(
                    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                    MetricType::COUNTER,
                    &[("0", 123456789012.0)],
                ),
                family(
                    "dcgm_exporter_collections_total",
                    MetricType::COUNTER,
                    &[("0", 3.0)],
                ),
                family(
                    "DCGM_FI_DEV_GPU_TEMP",
                    MetricType::GAUGE,
                    &[("0", 41.5), ("1", f64::NAN)],
                ),
            ],
            &mut out,
        );
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION a \\\"quoted\\\" \\\\ help\\nline\n\
             # TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n\
             DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total{gpu=\"0\"} 123456789012\n\
             # HELP dcgm_exporter_collections a \\\"quoted\\\" \\\\ help\\nline\n\
             # TYPE dcgm_exporter_collections counter\n\
             dcgm_exporter_collections_total{gpu=\"0\"} 3\n\
             # HELP DCGM_FI_DEV_GPU_TEMP a \\\"quoted\\\" \\\\ help\\nline\n\
             # TYPE DCGM_FI_DEV_GPU_TEMP gauge\n\
             DCGM_FI_DEV_GPU_TEMP{gpu=\"0\"} 41.5\n\
             DCGM_FI_DEV_GPU_TEMP{gpu=\"1\"} NaN\n"
        );
    }

    #[test]
    fn numbers_read_back_exactly() {
        for v in [0.1, 1e-7, 1e300, -2.5, 4e15, 12345678.0] {
            let mut s = String::new();
            number(&mut s, v);
            assert_eq!(s.parse::<f64>().unwrap(), v, "{s}");
        }
    }
}
