//! `DCGM_EXP_CLOCK_EVENTS_TOTAL` with upstream 4.8.3's semantics (its clock_events_total
//! collector): a reason counts once when it becomes active, however many samples it stays
//! active for; a reason already active when the counting starts is no transition. Unlike
//! upstream, whose totals start again from nothing on a reload, a reload keeps them (a
//! counter must not go back, issue 28) with each GPU's last reasons.

use crate::support;
use crate::support::*;

fn collections(page: &[Sample]) -> f64 {
    series(page, "dcgm_exporter_collections_total")
        .into_iter()
        .find(|s| s.label("result") == Some("success"))
        .map_or(0.0, |s| s.value)
}

/// (clock_event, total) of GPU 0's labelled total series.
fn totals(page: &[Sample]) -> Vec<(String, f64)> {
    series(page, "DCGM_EXP_CLOCK_EVENTS_TOTAL")
        .into_iter()
        .filter_map(|s| Some((s.label("clock_event")?.to_string(), s.value)))
        .collect()
}

#[test]
fn clock_event_totals_count_activations_and_carry_across_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let control = dir.path().join("control");
    std::fs::write(&control, "").unwrap();
    let csv = dir.path().join("c.csv");
    std::fs::write(
        &csv,
        "DCGM_FI_DEV_GPU_TEMP, gauge, t\n\
         DCGM_EXP_CLOCK_EVENTS_TOTAL, counter, clock events since start\n",
    )
    .unwrap();
    let mut e = exporter()
        .profile("one-gpu.toml")
        .env("DCGM_SIM_CONTROL", control.to_str().unwrap())
        .args(&["-f", csv.to_str().unwrap(), "-c", "100"])
        .start();
    assert!(totals(&e.scrape()).is_empty());

    // hw_slowdown (0x08) and hw_thermal (0x40) become active and stay active.
    support::control(&control, "set 0 112 72");
    let first = e.scrape_until(20, |p| totals(p).len() == 2);
    // Many more samples with both reasons active: still one activation each.
    let n = collections(&first);
    let page = e.scrape_until(20, |p| collections(p) >= n + 10.0);
    assert_eq!(
        totals(&page),
        [
            ("hw_slowdown".to_string(), 1.0),
            ("hw_thermal".to_string(), 1.0)
        ],
        "{}",
        dump(&page)
    );

    // Inactive, then active again: a second activation.
    support::control(&control, "set 0 112 0");
    let n = collections(&e.scrape());
    e.scrape_until(20, |p| collections(p) >= n + 5.0);
    support::control(&control, "set 0 112 8");
    let page = e.scrape_until(20, |p| {
        totals(p).contains(&("hw_slowdown".to_string(), 2.0))
    });
    assert!(totals(&page).contains(&("hw_thermal".to_string(), 1.0)));

    // A reload keeps the totals and the last reasons: hw_slowdown, active across it, is no
    // new activation.
    std::process::Command::new("kill")
        .args(["-HUP", &e.child.id().to_string()])
        .status()
        .unwrap();
    e.wait_for_log(20, "reloaded ");
    let n = collections(&e.scrape());
    let page = e.scrape_until(20, |p| collections(p) >= n + 10.0);
    let kept = [
        ("hw_slowdown".to_string(), 2.0),
        ("hw_thermal".to_string(), 1.0),
    ];
    assert_eq!(totals(&page), kept, "{}", dump(&page));
    // And the counting goes on from there.
    support::control(&control, "set 0 112 0");
    let n = collections(&e.scrape());
    e.scrape_until(20, |p| collections(p) >= n + 5.0);
    support::control(&control, "set 0 112 8");
    let page = e.scrape_until(20, |p| {
        totals(p).contains(&("hw_slowdown".to_string(), 3.0))
    });
    assert!(totals(&page).contains(&("hw_thermal".to_string(), 1.0)));
    assert!(e.signal_and_wait("TERM").success());
}
