use super::*;
use crate::model::naming::PromType;
use crate::output::otlp::proto::metrics::metric::Data;

fn page(energy: f64, temp: f64) -> Page {
    let mut p = Page::default();
    let gpu = [("gpu", "0"), ("UUID", "GPU-a"), ("modelName", "H100")];
    p.add(
        "DCGM_FI_DEV_GPU_TEMP",
        "Temperature.",
        PromType::Gauge,
        &gpu,
        temp,
    );
    p.set_field("DCGM_FI_DEV_GPU_TEMP", 150);
    p.add(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "Energy.",
        PromType::Counter,
        &gpu,
        energy,
    );
    p.set_field("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 156);
    p.add("DCGM_FI_DEV_GPU_UTIL", "Util.", PromType::Gauge, &gpu, 40.0);
    p.set_field("DCGM_FI_DEV_GPU_UTIL", 203);
    p.add(
        "DCGM_FI_DEV_SM_CLOCK",
        "Clock.",
        PromType::Gauge,
        &gpu,
        1400.0,
    );
    p.set_field("DCGM_FI_DEV_SM_CLOCK", 100);
    p
}

fn points<'a>(req: &'a ExportMetricsServiceRequest, name: &str) -> &'a [NumberDataPoint] {
    let m = req.resource_metrics[0].scope_metrics[0]
        .metrics
        .iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no metric {name}"));
    match m.data.as_ref().unwrap() {
        Data::Gauge(g) => &g.data_points,
        Data::Sum(s) => &s.data_points,
        _ => panic!("{name}: neither gauge nor sum"),
    }
}

fn value(p: &NumberDataPoint) -> f64 {
    match p.value {
        Some(number_data_point::Value::AsDouble(v)) => v,
        _ => panic!("not a double"),
    }
}

fn attr<'a>(p: &'a NumberDataPoint, key: &str) -> Option<&'a str> {
    p.attributes.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(s) => Some(s.as_str()),
            _ => None,
        }
    })
}

#[test]
fn gauges_and_counters_keep_the_page_names_labels_and_values() {
    let mut c = Converter::new(Naming::Dcgm, &[("host.name".into(), "h".into())], 100);
    let req = c.request(&page(5000.0, 61.0), 1_000);
    let t = &points(&req, "DCGM_FI_DEV_GPU_TEMP")[0];
    assert_eq!(
        (value(t), t.start_time_unix_nano, t.time_unix_nano),
        (61.0, 0, 1_000)
    );
    assert_eq!(attr(t, "UUID"), Some("GPU-a"));
    let m = &req.resource_metrics[0].scope_metrics[0].metrics;
    let energy = m
        .iter()
        .find(|m| m.name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
        .unwrap();
    match energy.data.as_ref().unwrap() {
        Data::Sum(s) => {
            assert!(s.is_monotonic);
            assert_eq!(
                s.aggregation_temporality,
                AggregationTemporality::Cumulative as i32
            );
            // DCGM's count began before the exporter saw it: start = time.
            assert_eq!(s.data_points[0].start_time_unix_nano, 1_000);
        }
        _ => panic!("a counter must be a sum"),
    }
    let r = req.resource_metrics[0].resource.as_ref().unwrap();
    assert_eq!(r.attributes[0].key, "host.name");
}

#[test]
fn a_sum_keeps_its_start_across_absences_and_moves_it_only_on_a_reset() {
    let mut c = Converter::new(Naming::Dcgm, &[], 100);
    let e = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION";
    let start = |r: &ExportMetricsServiceRequest| points(r, e)[0].start_time_unix_nano;
    // An unknown start: the first point is zero-length, and its start is kept.
    assert_eq!(start(&c.request(&page(5000.0, 60.0), 1_000)), 1_000);
    assert_eq!(start(&c.request(&page(6000.0, 60.0), 2_000)), 1_000);
    // The engine is away: pages without the series (a failed collection pushes nothing).
    let empty = Page::default();
    c.request(&empty, 3_000);
    c.request(&empty, 4_000);
    // Back, still counting: the same start.
    assert_eq!(start(&c.request(&page(9000.0, 60.0), 5_000)), 1_000);
    // A reset (the driver reloaded): the count began after it was last seen.
    assert_eq!(start(&c.request(&page(10.0, 60.0), 6_000)), 5_000);
    assert_eq!(start(&c.request(&page(20.0, 60.0), 7_000)), 5_000);
}

#[test]
fn a_dcgm_series_that_appears_later_starts_at_its_first_point() {
    let mut c = Converter::new(Naming::Dcgm, &[], 100);
    c.request(&Page::default(), 1_000);
    let req = c.request(&page(1.0, 60.0), 2_000);
    assert_eq!(
        points(&req, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")[0].start_time_unix_nano,
        2_000
    );
    // Gone for longer than the starts are kept, then back: unknown again.
    let later = 2_000 + KEEP_ABSENT_NS + 1;
    for i in 1..=SWEEP_EVERY {
        c.request(&Page::default(), 2_000 + i);
    }
    c.request(&Page::default(), later);
    for i in 1..=SWEEP_EVERY {
        c.request(&Page::default(), later + i);
    }
    let back = later + SWEEP_EVERY + 1;
    let req = c.request(&page(9.0, 60.0), back);
    assert_eq!(
        points(&req, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")[0].start_time_unix_nano,
        back
    );
}

fn ours(name: &str, value: f64, labels: &[(&str, &str)]) -> Page {
    let mut p = Page::default();
    p.add(name, "Ours.", PromType::Counter, labels, value);
    p
}

/// The counts the exporter begins at its start keep it, however late a series appears;
/// usage accounting's begin with their series (the push before).
#[test]
fn the_exporters_own_counts_carry_their_real_start() {
    let mut c = Converter::new(Naming::Dcgm, &[], 100);
    let xid = "DCGM_EXP_XID_ERRORS_TOTAL";
    let start = |r: &ExportMetricsServiceRequest, n: &str| points(r, n)[0].start_time_unix_nano;
    assert_eq!(start(&c.request(&ours(xid, 0.0, &[]), 1_000), xid), 100);
    assert_eq!(start(&c.request(&ours(xid, 0.0, &[]), 2_000), xid), 100);
    // A first XID 79 three pushes in: counted since the exporter started.
    let r = c.request(&ours(xid, 1.0, &[("xid", "79")]), 3_000);
    assert_eq!(start(&r, xid), 100);
    let clocks = "DCGM_EXP_CLOCK_EVENTS_TOTAL";
    assert_eq!(
        start(&c.request(&ours(clocks, 4.0, &[]), 4_000), clocks),
        100
    );
    // A consumer first seen now: its energy counts from the collection before.
    let energy = "DCGM_EXP_ENERGY_JOULES_TOTAL";
    let r = c.request(&ours(energy, 2.5, &[("pod", "a")]), 5_000);
    assert_eq!(start(&r, energy), 4_000);
    let idle = "DCGM_EXP_IDLE_ENERGY_JOULES_TOTAL";
    assert_eq!(start(&c.request(&ours(idle, 0.0, &[]), 6_000), idle), 5_000);
    // A counter the CSV declares of a DCGM_EXP_ value that is no count of ours.
    let health = "DCGM_EXP_GPU_HEALTH_STATUS";
    let r = c.request(&ours(health, 20.0, &[]), 7_000);
    assert_eq!(start(&r, health), 7_000);
}

#[test]
fn semconv_names_scale_to_the_conventions_units_and_keep_the_rest() {
    let mut c = Converter::new(Naming::Semconv, &[], 100);
    let req = c.request(&page(5000.0, 61.0), 1_000);
    let u = &points(&req, "hw.gpu.utilization")[0];
    assert_eq!(value(u), 0.4);
    assert_eq!(attr(u, "hw.gpu.task"), Some("general"));
    assert_eq!(attr(u, "hw.id"), Some("GPU-a"));
    assert_eq!(attr(u, "gpu"), Some("0"));
    let e = &points(&req, "hw.energy")[0];
    assert_eq!((value(e), attr(e, "hw.type")), (5.0, Some("gpu")));
    assert_eq!(e.start_time_unix_nano, 1_000);
    let t = &points(&req, "hw.temperature")[0];
    assert_eq!(attr(t, "hw.sensor_location"), Some("gpu"));
    // No mapping: pushed under the page's name.
    assert_eq!(value(&points(&req, "DCGM_FI_DEV_SM_CLOCK")[0]), 1400.0);
    let names: Vec<_> = req.resource_metrics[0].scope_metrics[0]
        .metrics
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    assert!(!names.contains(&"DCGM_FI_DEV_GPU_TEMP"), "{names:?}");
}
