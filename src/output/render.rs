//! Renders a collected page ([`crate::model::Page`]) as Prometheus text (0.0.4) in one pass
//! over the model's buffers, straight into the output: no per-series object is built. The
//! bytes are those the `prometheus` crate's text encoder wrote for the same series before
//! (escaping, number format, family order); `reference` keeps that encoder as the tests'
//! yardstick.

use crate::model::Page;

/// Prometheus text format (0.0.4) of a page.
pub fn encode(page: &Page) -> Vec<u8> {
    let mut out = Vec::new();
    text(page, &mut out);
    out
}

/// Appends the page in Prometheus text format (0.0.4).
pub fn text(page: &Page, out: &mut Vec<u8>) {
    // Where each label set several series share (a window's statistics) was written: the
    // series after the first copy those bytes.
    let mut written: Vec<Option<(usize, usize)>> = vec![None; page.shared_label_sets()];
    for fam in page.families() {
        let name = fam.name().as_bytes();
        if !fam.help().is_empty() {
            out.extend_from_slice(b"# HELP ");
            out.extend_from_slice(name);
            out.push(b' ');
            escape(out, fam.help(), false);
            out.push(b'\n');
        }
        out.extend_from_slice(b"# TYPE ");
        out.extend_from_slice(name);
        out.extend_from_slice(if fam.is_counter() {
            b" counter\n"
        } else {
            b" gauge\n"
        });
        for s in fam.series() {
            out.extend_from_slice(name);
            let shared = s.shared_labels();
            match shared.and_then(|i| written[i]) {
                Some((from, to)) => out.extend_from_within(from..to),
                None => {
                    let from = out.len();
                    labels(out, s.labels());
                    if let Some(i) = shared {
                        written[i] = Some((from, out.len()));
                    }
                }
            }
            out.push(b' ');
            number(out, s.value());
            out.push(b'\n');
        }
    }
}

/// Backslash and newline escaped, and `"` with `quote` (label values; help text leaves it).
pub(crate) fn escape(out: &mut Vec<u8>, v: &str, quote: bool) {
    let bytes = v.as_bytes();
    let mut from = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'"' if quote => b"\\\"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[from..i]);
        out.extend_from_slice(esc);
        from = i + 1;
    }
    out.extend_from_slice(&bytes[from..]);
}

/// A label set as both formats write it: `{k="v",...}`, nothing when empty.
pub(crate) fn labels<'a>(out: &mut Vec<u8>, labels: impl Iterator<Item = (&'a str, &'a str)>) {
    let mut sep = b'{';
    for (k, v) in labels {
        out.push(sep);
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(b"=\"");
        escape(out, v, true);
        out.push(b'"');
        sep = b',';
    }
    if sep == b',' {
        out.push(b'}');
    }
}

/// A value as Rust's `Display` writes it (`NaN`, `inf`, `-inf`, all digits, no exponent),
/// which is what the text encoder wrote; integers, most values on a GPU page, the fast way.
pub fn number(out: &mut Vec<u8>, v: f64) {
    // Below 2^53 an integral f64 is an exact integer, and its shortest round-trip digits are
    // all of its digits; -0 keeps its sign in `Display`.
    const EXACT: f64 = 9_007_199_254_740_992.0;
    if v.trunc() == v && v.abs() < EXACT && !(v == 0.0 && v.is_sign_negative()) {
        let n = v as i64;
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        let mut m = n.unsigned_abs();
        loop {
            i -= 1;
            digits[i] = b'0' + (m % 10) as u8;
            m /= 10;
            if m == 0 {
                break;
            }
        }
        if n < 0 {
            out.push(b'-');
        }
        out.extend_from_slice(&digits[i..]);
    } else if v.trunc() != v {
        // Ryu writes a fraction in under half the instructions of `Display` (about a
        // thousand there for a mean or a power reading). Both write the shortest digits that
        // read back to `v`, the nearest of them to `v`; they differ only where two are
        // equally near, Ryu taking the even one, `Display` the one above (Ryu writes
        // 1215646060668091.25 as ...091.2, `Display` as ...091.3). Such a tie needs `v` to be
        // exactly a decimal of one digit more: impossible with 15 digits or fewer (no two
        // 15-digit decimals are that close together within one f64's reach) or with more
        // than 23 fractional bits (its exact decimal is longer than 18 digits). The rest,
        // and any value Ryu writes with an exponent (below about 1e-5; `Display` never does),
        // goes through `Display`.
        let mut buf = ryu::Buffer::new();
        let digits = buf.format_finite(v);
        if !digits.contains('e') && (significant(digits) <= 15 || fraction_bits(v) > 23) {
            out.extend_from_slice(digits.as_bytes());
        } else {
            display(out, v);
        }
    } else {
        display(out, v);
    }
}

/// Significant digits of a number written in decimal notation.
fn significant(digits: &str) -> usize {
    digits
        .bytes()
        .filter(u8::is_ascii_digit)
        .skip_while(|&b| b == b'0')
        .count()
}

/// How many binary digits a normal, non-integral `v` has after the point.
fn fraction_bits(v: f64) -> i32 {
    let bits = v.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i32 - 1075;
    let mantissa = (bits & ((1 << 52) - 1)) | (1 << 52);
    -(exponent + mantissa.trailing_zeros() as i32)
}

fn display(out: &mut Vec<u8>, v: f64) {
    use std::io::Write;
    let _ = write!(out, "{v}");
}

/// The `prometheus` crate's encoder over its protobuf objects: what the page was rendered
/// with before, kept to prove the renderers write the same bytes (`tests/it/render_identity.rs`
/// includes it too).
#[cfg(test)]
pub(crate) mod reference;
#[cfg(test)]
use crate::output::openmetrics;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::naming::PromType;
    use crate::model::DropReason;

    fn text(p: Page) -> String {
        String::from_utf8(encode(&p)).unwrap()
    }

    #[test]
    fn an_appended_piece_keeps_its_series_labels_and_counts() {
        let mut page = Page::default();
        page.add("A", "a", PromType::Gauge, &[("gpu", "0")], 1.0);
        let mut part = Page::default();
        part.add(
            "B",
            "b",
            PromType::Counter,
            &[("gpu", "0"), ("xid", "79")],
            2.0,
        );
        part.add("A", "a", PromType::Gauge, &[("gpu", "0")], 3.0);
        part.piece_failed("DCGM_EXP_P2P_STATUS", "BadParam");
        page.append(part);
        assert_eq!(
            page.series_count(),
            2,
            "the repeated A series is a duplicate"
        );
        assert_eq!(page.dropped[&DropReason::Duplicate], 1);
        assert_eq!(
            page.failures[&("DCGM_EXP_P2P_STATUS".into(), "BadParam".into())],
            1
        );
        let t = text(page);
        assert!(t.contains("B{gpu=\"0\",xid=\"79\"} 2"), "{t}");
        assert!(t.contains("# TYPE B counter"), "{t}");
    }

    #[test]
    fn escapes_label_values_and_help() {
        let mut p = Page::default();
        p.add(
            "X",
            "a \\ help\nline",
            PromType::Gauge,
            &[("modelName", "a \"quoted\" \\ name\n")],
            1.5,
        );
        let t = text(p);
        assert!(t.contains("# HELP X a \\\\ help\\nline"), "{t}");
        assert!(
            t.contains(r#"X{modelName="a \"quoted\" \\ name\n"} 1.5"#),
            "{t}"
        );
        assert!(t.contains("# TYPE X gauge"));
    }

    /// One series with a name Prometheus refuses would make it reject the whole page: that
    /// series is dropped and counted, whether it was collected so or became so in attribution.
    #[test]
    fn an_invalid_label_name_never_reaches_the_page() {
        use crate::model::Series;
        let mut p = Page::default();
        p.add("X", "h", PromType::Gauge, &[("gpu", "0")], 1.0);
        p.add(
            "X",
            "h",
            PromType::Gauge,
            &[("gpu", "1"), ("3rd_party", "x")],
            2.0,
        );
        p.add(
            "X",
            "h",
            PromType::Gauge,
            &[("gpu", "2"), ("__name__", "Y")],
            3.0,
        );
        p.add(
            "X",
            "h",
            PromType::Gauge,
            &[("gpu", "3"), ("a-b", "x")],
            4.0,
        );
        assert_eq!(p.dropped[&DropReason::InvalidLabelName], 3);
        p.rewrite(|_, s| {
            let mut bad = s.clone();
            bad.push_label("1password_com_managed", "true");
            let mut renamed = s.clone();
            renamed.push_label("_1password_com_managed", "true");
            vec![
                bad,
                renamed,
                Series::new(&[("gpu", "9"), ("", "empty")], 0.0),
            ]
        });
        assert_eq!(p.dropped[&DropReason::InvalidLabelName], 5);
        let t = text(p);
        assert_eq!(
            t,
            "# HELP X h\n# TYPE X gauge\nX{gpu=\"0\",_1password_com_managed=\"true\"} 1\n"
        );
    }

    #[test]
    fn duplicates_and_conflicts_are_dropped_not_fatal() {
        let mut p = Page::default();
        p.add("X", "h", PromType::Gauge, &[("gpu", "0")], 1.0);
        p.add("X", "h", PromType::Gauge, &[("gpu", "0")], 2.0);
        p.add("X", "other", PromType::Counter, &[("gpu", "1")], 3.0);
        p.add("X", "h", PromType::Gauge, &[("gpu", "1")], 4.0);
        assert_eq!(p.series_count(), 2);
        assert_eq!(p.dropped[&DropReason::Duplicate], 1);
        assert_eq!(p.dropped[&DropReason::Conflict], 1);
        assert!(text(p).contains("X{gpu=\"1\"} 4"));
    }

    #[test]
    fn label_order_is_kept_and_histograms_become_gauges() {
        let mut p = Page::default();
        p.add(
            "Y",
            "h",
            PromType::Histogram,
            &[("gpu", "0"), ("UUID", "u"), ("Hostname", "h")],
            7.0,
        );
        let t = text(p);
        assert!(t.contains(r#"Y{gpu="0",UUID="u",Hostname="h"} 7"#), "{t}");
        assert!(t.contains("# TYPE Y gauge"), "{t}");
    }

    #[test]
    fn large_integers_round_trip_through_the_text() {
        let mut p = Page::default();
        p.add("E", "h", PromType::Counter, &[], 123456789012.0);
        let t = text(p);
        let v: f64 = t
            .lines()
            .last()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(v, 123456789012.0);
    }

    /// Both renderers against the encoders they replace, on the same page.
    fn assert_identical(p: &Page) {
        let new = encode(p);
        let old = reference::text(p);
        assert_eq!(
            String::from_utf8_lossy(&new),
            String::from_utf8_lossy(&old),
            "text 0.0.4"
        );
        assert_eq!(new, old);
        let mut om = Vec::new();
        crate::output::openmetrics::page(p, &mut om);
        assert_eq!(
            String::from_utf8_lossy(&om),
            String::from_utf8_lossy(&reference::openmetrics(p)),
            "OpenMetrics"
        );
    }

    #[test]
    fn tricky_pages_render_byte_identical_to_the_prometheus_encoder() {
        let mut p = Page::default();
        let values = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            42.5,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1e300,
            -1e300,
            f64::MAX,
            f64::MIN_POSITIVE,
            5e-324,
            1e-7,
            0.1,
            1.0 / 3.0,
            123456789012.0,
            9_007_199_254_740_991.0,
            9_007_199_254_740_992.0,
            9_007_199_254_740_993.0,
            1_152_921_504_606_846_976.0,
            -4e15,
            1e15,
            1e16,
            18446744073709551615.0,
        ];
        for (i, v) in values.iter().enumerate() {
            let gpu = i.to_string();
            p.add("G", "gauge values", PromType::Gauge, &[("gpu", &gpu)], *v);
            p.add(
                "C_total",
                "counter values",
                PromType::Counter,
                &[("gpu", &gpu), ("UUID", "GPU-1")],
                *v,
            );
        }
        p.add(
            "ESC",
            "help with \\ backslash, \"quotes\", a\nnewline and \\n",
            PromType::Gauge,
            &[
                ("modelName", "NVIDIA \"H100\" \\ 80GB\n"),
                ("Hostname", "h\\\\\"\n\n\"é漢字 \t tab"),
                ("empty", ""),
            ],
            1.0,
        );
        p.add("NOHELP", "", PromType::Counter, &[], 3.0);
        p.add("NOLABELS", "h", PromType::Gauge, &[], 4.0);
        p.add("HIST", "h", PromType::Histogram, &[("gpu", "0")], 5.0);
        p.add("SUM", "h", PromType::Summary, &[("gpu", "0")], 6.0);
        p.add("LBL", "h", PromType::Label, &[("gpu", "0")], 7.0);
        // Label order is the caller's, per series.
        p.add("ORD", "h", PromType::Gauge, &[("b", "1"), ("a", "2")], 1.0);
        p.add("ORD", "h", PromType::Gauge, &[("a", "1"), ("b", "2")], 2.0);
        // Dropped: a duplicate (other order), a conflicting type, a conflicting help.
        p.add("ORD", "h", PromType::Gauge, &[("a", "2"), ("b", "1")], 3.0);
        p.add("ORD", "h", PromType::Counter, &[("a", "9")], 3.0);
        p.add("ORD", "other", PromType::Gauge, &[("a", "9")], 3.0);
        // A family left empty by a rewrite disappears from the page.
        p.add("GONE", "h", PromType::Gauge, &[("gpu", "0")], 1.0);
        p.rewrite(|name, mut s| {
            if name == "GONE" {
                return vec![];
            }
            if name == "NOLABELS" {
                s.push_label("pod", "p\"1\"");
            }
            vec![s]
        });
        assert_eq!(p.dropped[&DropReason::Duplicate], 1);
        assert_eq!(p.dropped[&DropReason::Conflict], 2);
        assert!(!String::from_utf8(encode(&p)).unwrap().contains("GONE"));
        assert_identical(&p);
        assert_identical(&Page::default());
    }

    #[test]
    fn integral_values_are_written_as_display_writes_them() {
        for v in [
            0.0,
            -0.0,
            7.0,
            -7.0,
            1e15,
            9_007_199_254_740_991.0,
            -9_007_199_254_740_991.0,
            9_007_199_254_740_992.0,
            2e20,
        ] {
            let mut out = Vec::new();
            number(&mut out, v);
            assert_eq!(String::from_utf8(out).unwrap(), v.to_string());
        }
    }

    /// The values a GPU page has, fractions of every size as a reading, a mean or a converted
    /// unit gives them (random bits are mostly far outside this range), 200,000 of them.
    #[test]
    fn fractions_are_written_as_display_writes_them() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            // xorshift64*
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            x.wrapping_mul(0x2545_f491_4f6c_dd1d)
        };
        // Ties between two shortest (Ryu and `Display` break them differently), and values
        // at the edges of the fast path.
        for v in [
            1_215_646_060_668_091.0 + 0.25,
            0.5,
            1e-5,
            1.5e-5,
            9.5e-6,
            2f64.powi(52) - 0.5,
        ] {
            let mut out = Vec::new();
            number(&mut out, v);
            assert_eq!(String::from_utf8(out).unwrap(), v.to_string(), "{v:?}");
        }
        for i in 0..200_000 {
            let n = next() as i64 >> (next() % 60);
            let d = next() % 1_000_000 + 1;
            let v = n as f64 / d as f64 * 10f64.powi((next() % 25) as i32 - 12);
            let v = if i % 2 == 0 {
                v
            } else {
                (v * 16.0).round() / 16.0
            };
            let mut out = Vec::new();
            number(&mut out, v);
            assert_eq!(String::from_utf8(out).unwrap(), v.to_string(), "{v:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_value_is_written_as_display_writes_it(bits in proptest::prelude::any::<u64>()) {
            let v = f64::from_bits(bits);
            let mut out = Vec::new();
            number(&mut out, v);
            proptest::prop_assert_eq!(String::from_utf8(out).unwrap(), v.to_string());
        }

        #[test]
        fn random_pages_render_byte_identical(
            series in proptest::collection::vec(
                (
                    0usize..4,
                    0usize..3,
                    proptest::collection::vec((0usize..5, "[a-z\\\\\"\n é]{0,6}"), 0..5),
                    proptest::prelude::any::<f64>(),
                    -1e6f64..1e6,
                    proptest::prelude::any::<bool>(),
                ),
                0..40,
            )
        ) {
            const NAMES: [&str; 4] = ["A", "B_total", "C", "D"];
            const HELP: [&str; 3] = ["", "h \\ \"x\"\n", "help"];
            const KEYS: [&str; 5] = ["gpu", "UUID", "pod", "a", "b"];
            const TYPES: [PromType; 3] = [PromType::Gauge, PromType::Counter, PromType::Histogram];
            let mut p = Page::default();
            for (name, help, labels, any, small, integral) in &series {
                let labels: Vec<(&str, &str)> =
                    labels.iter().map(|(k, v)| (KEYS[*k], v.as_str())).collect();
                let v = if *integral { small.trunc() } else if any.is_nan() { *small } else { *any };
                p.add(NAMES[*name], HELP[*help], TYPES[(*name + *help) % 3], &labels, v);
            }
            assert_identical(&p);
        }
    }
}
