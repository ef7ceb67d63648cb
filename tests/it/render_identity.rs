//! The one-pass renderers write exactly the bytes the `prometheus` crate's encoder (text
//! 0.0.4) and the family-based OpenMetrics encoder wrote before, on the page of every
//! simulator profile with every shipped counters file: the exporter's page is read back
//! into the model, and both the renderer and the reference encoder
//! (`src/output/render/reference.rs`) must give back the served bytes.

use crate::support::*;
use dcgm_exporter::model::naming::PromType;
use dcgm_exporter::model::Page;
use dcgm_exporter::output::{openmetrics, render};

#[path = "../../src/output/render/reference.rs"]
mod reference;

/// The DCGM part of a served page: everything before the exporter's own metrics.
fn dcgm_part(body: &str) -> &str {
    let end = body
        .find("# HELP dcgm_exporter_")
        .or_else(|| body.find("# TYPE dcgm_exporter_"))
        .unwrap_or(body.len());
    &body[..end]
}

fn unescape(v: &str) -> String {
    let mut out = String::new();
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\\') {
            (_, true) => match chars.next() {
                Some('n') => out.push('\n'),
                Some(o) => out.push(o),
                None => out.push('\\'),
            },
            (c, false) => out.push(c),
        }
    }
    out
}

/// Reads a text 0.0.4 page back into the model (help, type, label order, values).
fn read_back(text: &str) -> Page {
    let mut page = Page::default();
    // (family, help) of the last `# HELP` line: a family without one has no help.
    let mut help = (String::new(), String::new());
    let mut ty = PromType::Gauge;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, h) = rest.split_once(' ').unwrap_or((rest, ""));
            help = (name.to_string(), unescape(h));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if rest.split(' ').next() != Some(help.0.as_str()) {
                help = (String::new(), String::new());
            }
            ty = match rest.rsplit(' ').next() {
                Some("counter") => PromType::Counter,
                Some("gauge") => PromType::Gauge,
                other => panic!("type {other:?} in {line}"),
            };
            continue;
        }
        let sample = parse(line).pop().unwrap_or_else(|| panic!("line {line}"));
        // The value's own text, since `parse` reads only what Prometheus spells.
        let value: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(
            value.to_bits() == sample.value.to_bits() || value.is_nan() || value.is_infinite(),
            "{line}"
        );
        let labels: Vec<(&str, &str)> = sample
            .label_order
            .iter()
            .map(|k| (k.as_str(), sample.labels[k].as_str()))
            .collect();
        let before = page.series_count();
        page.add(&sample.name, &help.1, ty, &labels, value);
        assert_eq!(page.series_count(), before + 1, "{line} was dropped");
    }
    page
}

#[test]
fn every_profiles_page_renders_byte_identical_to_the_prometheus_encoder() {
    let mut profiles: Vec<String> = std::fs::read_dir(repo("etc/sim"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    profiles.sort();
    assert!(profiles.len() >= 6, "profiles: {profiles:?}");
    let mut pages = 0;
    for p in &profiles {
        for csv in [
            "etc/default-counters.csv",
            "etc/dcp-metrics-included.csv",
            "etc/1.x-compatibility-metrics.csv",
            "bench/bench-counters.csv",
        ] {
            let e = exporter()
                .profile(p)
                .args(&["-f", repo(csv).to_str().unwrap()])
                .arg("--web-enable-openmetrics")
                .start();
            let (_, body) = e.get("/metrics");
            let served = dcgm_part(&body);
            let page = read_back(served);
            assert!(page.series_count() > 0, "{p} with {csv}: no series");
            let what = format!("{p} with {csv}");
            assert_eq!(
                String::from_utf8(render::encode(&page)).unwrap(),
                served,
                "{what}: renderer"
            );
            assert_eq!(
                String::from_utf8(reference::text(&page)).unwrap(),
                served,
                "{what}: the prometheus crate's encoder"
            );
            let mut om = Vec::new();
            openmetrics::page(&page, &mut om);
            assert_eq!(
                String::from_utf8(om).unwrap(),
                String::from_utf8(reference::openmetrics(&page)).unwrap(),
                "{what}: OpenMetrics"
            );
            // What the exporter serves as OpenMetrics is the same renderer's output for the
            // page of its own collection: same families and label sets as the text page.
            let (_, om_body) = e.get_with(
                "/metrics",
                &[(
                    "Accept",
                    "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
                )],
            );
            assert!(om_body.ends_with("# EOF\n"), "{what}: {om_body}");
            let om_read = om_body.lines().filter(|l| !l.starts_with('#')).count();
            assert!(om_read >= page.series_count(), "{what}: OpenMetrics page");
            pages += 1;
        }
    }
    assert_eq!(pages, profiles.len() * 4);
}

#[test]
fn reading_back_is_exact_for_the_hostile_cases() {
    let mut page = Page::default();
    let help = "a \\ help\nwith \"quotes\"";
    let hostile = [("b", "a \"q\" \\ z\n"), ("a", "é")];
    page.add("X", help, PromType::Counter, &hostile, f64::INFINITY);
    page.add("X", help, PromType::Counter, &[], -0.0);
    page.add("Y", "", PromType::Gauge, &[("gpu", "0")], 1e-300);
    page.add("Y", "", PromType::Gauge, &[("gpu", "1")], f64::NAN);
    page.add("Y", "", PromType::Gauge, &[("gpu", "2")], f64::NEG_INFINITY);
    let text = String::from_utf8(render::encode(&page)).unwrap();
    assert_eq!(render::encode(&read_back(&text)), text.as_bytes());
    assert_eq!(reference::text(&page), text.as_bytes());
}
