//! Sub-interval aggregation's proof (issue 47), shared by the DCGM and NVML tests: a short
//! power spike between two collections (the simulators' `spike` control line) shows in
//! `DCGM_FI_DEV_POWER_USAGE_interval_max`, never in the gauge read at a collection.

use super::{control, dump, series, Exporter, Sample};
use std::path::Path;
use std::time::{Duration, Instant};

pub const POWER: &str = "DCGM_FI_DEV_POWER_USAGE";

/// The family of `stat` (`min`, `max`, `mean`, `samples`) of row `name`.
pub fn stat(name: &str, stat: &str) -> String {
    format!("{name}_interval_{stat}")
}

/// The values of `name` on `gpu`'s series (the GPU's, or its MIG instances' where it is
/// split).
pub fn of_gpu(page: &[Sample], name: &str, gpu: &str) -> Vec<f64> {
    series(page, name)
        .into_iter()
        .filter(|s| s.label("gpu") == Some(gpu))
        .map(|s| s.value)
        .collect()
}

fn collection(page: &[Sample]) -> f64 {
    page.iter()
        .find(|s| s.name == "dcgm_exporter_last_successful_collection_timestamp_seconds")
        .map_or(0.0, |s| s.value)
}

/// Appends `line` (a `spike`) to the control file `ctl`, then scrapes every 100 ms and keeps
/// one page per collection, until `gpu`'s power max reads `value` and one collection more
/// was seen (at most `secs`).
pub fn pages_through_spike(
    e: &Exporter,
    ctl: &Path,
    line: &str,
    gpu: &str,
    value: f64,
    secs: u64,
) -> Vec<Vec<Sample>> {
    // A first window of our own, so that the spike falls into a later one.
    let first = e.scrape_until(30, |p| !of_gpu(p, &stat(POWER, "samples"), gpu).is_empty());
    let mut pages = vec![first];
    control(ctl, line);
    let t0 = Instant::now();
    let mut caught = None;
    loop {
        let p = e.scrape();
        if collection(&p) > collection(pages.last().unwrap()) {
            if of_gpu(&p, &stat(POWER, "max"), gpu).contains(&value) {
                caught.get_or_insert(pages.len());
            }
            pages.push(p);
            if caught.is_some_and(|c| pages.len() > c + 1) {
                return pages;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(secs),
            "no max of {value} on GPU {gpu} in {secs} s; last page:\n{}",
            dump(pages.last().unwrap())
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What every page of a spike must hold: the max of `gpu` (its instances' too) caught the
/// spike in one collection, its gauge never did, no other GPU's max did, each window had
/// about `expected` samples (`slack` either way) and min <= mean <= max.
pub fn check_spike(pages: &[Vec<Sample>], gpu: &str, value: f64, expected: f64, slack: f64) {
    let mut caught = 0;
    for p in pages {
        let gauges = of_gpu(p, POWER, gpu);
        assert!(
            !gauges.is_empty() && !gauges.contains(&value),
            "the gauge caught it:\n{}",
            dump(p)
        );
        for s in series(p, &stat(POWER, "max")) {
            let own = s.label("gpu") == Some(gpu);
            assert!(own || s.value != value, "another GPU's max: {s:?}");
        }
        let maxes = of_gpu(p, &stat(POWER, "max"), gpu);
        if maxes.contains(&value) {
            caught += 1;
            // A MIG instance of the GPU shows the GPU's aggregates, as it shows its gauge.
            assert!(maxes.iter().all(|m| *m == value), "{maxes:?}");
        }
        for s in series(p, &stat(POWER, "samples")) {
            assert!(
                (s.value - expected).abs() <= slack,
                "{} samples, not about {expected}: {s:?}",
                s.value
            );
            let at = |n: &str| {
                series(p, &stat(POWER, n))
                    .into_iter()
                    .find(|x| x.labels == s.labels)
                    .map(|x| x.value)
                    .unwrap_or_else(|| panic!("no {n} beside {s:?}"))
            };
            assert!(at("min") <= at("mean") && at("mean") <= at("max"), "{s:?}");
        }
    }
    assert!(caught >= 1, "the max never caught the spike");
}
