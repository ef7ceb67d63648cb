//! `DCGM_EXP_CLOCK_EVENTS_TOTAL` with upstream 4.8.3's semantics (its clock_events_total
//! collector): a reason counts once when it becomes active, however many samples it stays
//! active for; a reason already active when the counting starts is no transition. Unlike
//! upstream, whose totals start again from nothing on a reload, a reload keeps them (a
//! counter must not go back, issue 28) with each GPU's last reasons.

use crate::support;
use crate::support::*;

/// (clock_event, total) of GPU 0's labelled total series.
fn totals(page: &[Sample]) -> Vec<(String, f64)> {
    series(page, "DCGM_EXP_CLOCK_EVENTS_TOTAL")
        .into_iter()
        .filter_map(|s| Some((s.label("clock_event")?.to_string(), s.value)))
        .collect()
}

/// Clears GPU 0's clock-event reasons for a few collections, then sets hw_slowdown again:
/// its total reaches `total`, and hw_thermal's stays at 1.
fn reactivate_hw_slowdown(e: &Exporter, control: &std::path::Path, total: f64) {
    support::control(control, "set 0 112 0");
    let n = successes(&e.scrape());
    e.scrape_until(20, |p| successes(p) >= n + 5.0);
    support::control(control, "set 0 112 8");
    let page = e.scrape_until(20, |p| {
        totals(p).contains(&("hw_slowdown".to_string(), total))
    });
    assert!(totals(&page).contains(&("hw_thermal".to_string(), 1.0)));
}

#[test]
fn clock_event_totals_count_activations_and_carry_across_a_reload() {
    let (_dir, control, csv) = control_and_file(
        "c.csv",
        "DCGM_FI_DEV_GPU_TEMP, gauge, t\n\
         DCGM_EXP_CLOCK_EVENTS_TOTAL, counter, clock events since start\n",
    );
    let mut e = exporter()
        .profile("one-gpu.toml")
        .control(&control)
        .args(&["-f", csv.to_str().unwrap(), "-c", "100"])
        .start();
    assert!(totals(&e.scrape()).is_empty());

    // hw_slowdown (0x08) and hw_thermal (0x40) become active and stay active.
    support::control(&control, "set 0 112 72");
    let first = e.scrape_until(20, |p| totals(p).len() == 2);
    // Many more samples with both reasons active: still one activation each.
    let n = successes(&first);
    let page = e.scrape_until(20, |p| successes(p) >= n + 10.0);
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
    reactivate_hw_slowdown(&e, &control, 2.0);

    // A reload keeps the totals and the last reasons: hw_slowdown, active across it, is no
    // new activation.
    signal(e.child.id(), "HUP");
    e.wait_for_log(20, "reloaded ");
    let n = successes(&e.scrape());
    let page = e.scrape_until(20, |p| successes(p) >= n + 10.0);
    let kept = [
        ("hw_slowdown".to_string(), 2.0),
        ("hw_thermal".to_string(), 1.0),
    ];
    assert_eq!(totals(&page), kept, "{}", dump(&page));
    // And the counting goes on from there.
    reactivate_hw_slowdown(&e, &control, 3.0);
    assert!(e.signal_and_wait("TERM").success());
}
