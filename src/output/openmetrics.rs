//! OpenMetrics 1.0 text encoding of a collected page, in one pass over the model (`page`), and
//! of metric families (`encode`: the exporter's own metrics; the `prometheus` crate only
//! writes the 0.0.4 text format). Differences from 0.0.4 that matter here: a counter family is named
//! without `_total` in `# HELP`/`# TYPE` and its sample carries the `_total` suffix, `untyped`
//! is `unknown`, help text escapes `"` too, and the exposition ends with `# EOF` (written by
//! the caller, once, after every part of the page).

use crate::model::Page;
use crate::output::render::{self, escape};
use prometheus::proto::{MetricFamily, MetricType};
use std::io::Write;

pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
pub const EOF: &[u8] = b"# EOF\n";

/// The family name and the sample name of a counter: `_total` only on samples.
fn counter_names(name: &str) -> (&str, &str) {
    let base = name.strip_suffix("_total").unwrap_or(name);
    (base, "_total")
}

/// `# HELP` (when there is help) and `# TYPE` of a family.
fn header(out: &mut Vec<u8>, family: &str, help: &str, ty: &str) {
    if !help.is_empty() {
        out.extend_from_slice(b"# HELP ");
        out.extend_from_slice(family.as_bytes());
        out.push(b' ');
        escape(out, help, true);
        out.push(b'\n');
    }
    out.extend_from_slice(b"# TYPE ");
    out.extend_from_slice(family.as_bytes());
    out.push(b' ');
    out.extend_from_slice(ty.as_bytes());
    out.push(b'\n');
}

/// One sample line.
fn sample<'a>(
    out: &mut Vec<u8>,
    name: &str,
    suffix: &str,
    labels: impl Iterator<Item = (&'a str, &'a str)>,
    v: f64,
) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(suffix.as_bytes());
    render::labels(out, labels);
    out.push(b' ');
    number(out, v);
    out.push(b'\n');
}

/// Appends a collected page (without the closing `# EOF`), in one pass over the model.
pub fn page(page: &Page, out: &mut Vec<u8>) {
    for fam in page.families() {
        let (family, suffix, ty) = if fam.is_counter() {
            let (base, suffix) = counter_names(fam.name());
            (base, suffix, "counter")
        } else {
            (fam.name(), "", "gauge")
        };
        header(out, family, fam.help(), ty);
        for s in fam.series() {
            sample(out, family, suffix, s.labels(), s.value());
        }
    }
}

/// Appends the families (without the closing `# EOF`).
pub fn encode(families: &[MetricFamily], out: &mut Vec<u8>) {
    for fam in families {
        let name = fam.name();
        let (family, suffix, ty) = match fam.get_field_type() {
            MetricType::COUNTER => {
                let (base, suffix) = counter_names(name);
                (base, suffix, "counter")
            }
            MetricType::GAUGE => (name, "", "gauge"),
            MetricType::UNTYPED => (name, "", "unknown"),
            // Nothing we export is a histogram or summary (the model maps such CSV rows to
            // gauges); writing one without its buckets/quantiles would make the page invalid.
            MetricType::HISTOGRAM | MetricType::SUMMARY => {
                tracing::error!("openmetrics: {name} is a histogram or summary; not exported");
                continue;
            }
        };
        if fam.get_metric().is_empty() {
            continue;
        }
        header(out, family, fam.help(), ty);
        for m in fam.get_metric() {
            let v = match fam.get_field_type() {
                MetricType::COUNTER => m.get_counter().value(),
                MetricType::GAUGE => m.get_gauge().value(),
                _ => m.untyped.value(),
            };
            let labels = m.get_label().iter().map(|l| (l.name(), l.value()));
            sample(out, family, suffix, labels, v);
        }
    }
}

fn number(out: &mut Vec<u8>, v: f64) {
    if v.is_nan() {
        out.extend_from_slice(b"NaN");
    } else if v.is_infinite() {
        out.extend_from_slice(if v > 0.0 { b"+Inf" } else { b"-Inf" });
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        crate::output::render::number(out, (v as i64) as f64);
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
            let mut s = Vec::new();
            number(&mut s, v);
            let s = String::from_utf8(s).unwrap();
            assert_eq!(s.parse::<f64>().unwrap(), v, "{s}");
        }
    }
}
