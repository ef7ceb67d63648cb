//! dcgm-exporter 4.9.0's names and base units on NVIDIA's real DCGM 4.6.0 (the kit in
//! `../shared/dcgm-real`, NVML answers injected from YAML): the library is asked for its
//! field metadata, knows none of the base-unit fields that change id (it predates them),
//! so every one is derived from its legacy field, and the converted values equal the legacy
//! ones exactly; the renamed fields that keep their id (DCGM 4.6's canonical names) are read
//! directly. The direct read of a base-unit field a library knows is shown on the simulator
//! (tests/it/units.rs), the only library here that has one.

use crate::support;
use crate::support::nvml_yaml::Gpu;
use crate::support::real_dcgm::{kit, Scratch};
use crate::support::*;

fn gpus() -> Vec<Gpu> {
    (0..2u32)
        .map(|i| Gpu {
            temp_c: 44 + i,
            sm_clock_mhz: 1410 + 105 * i,
            mem_clock_mhz: 2619,
            energy_mj: 123_456_789 + 1_001 * u64::from(i),
            fb_used_mib: 10_979 + u64::from(i),
            gpu_util: 37 + i,
            mem_util: 12,
            ..Gpu::default()
        })
        .collect()
}

/// The exporter with `args` on the kit's embedded engine over [`gpus`], and the scratch
/// folder of its YAML; `None` where the kit cannot run here.
fn on_gpus(name: &str, args: &[&str]) -> Option<(Scratch, Exporter)> {
    let kit = kit()?;
    let (dir, yaml) = Scratch::with_yaml(name, &gpus());
    Some((dir, kit.embedded(&yaml).args(args).start()))
}

#[test]
fn converted_values_equal_the_legacy_ones_on_the_real_library() {
    let csv = repo("tests/fixtures/units-both-generations.csv");
    let Some((_dir, e)) = on_gpus("units", &["-f", csv.to_str().unwrap()]) else {
        return;
    };
    let page = e.scrape_until(60, |p| {
        series(p, "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL").len() == 2
            && series(p, "DCGM_FI_DEV_SM_CLOCK_HERTZ").len() == 2
    });
    for (i, g) in gpus().iter().enumerate() {
        let gpu = i.to_string();
        let v = |n: &str| gpu_value(&page, n, &gpu);
        // The injected legacy values, then the 4.9.0 metric in its base unit.
        assert_eq!(v("DCGM_FI_DEV_SM_CLOCK"), f64::from(g.sm_clock_mhz));
        assert_eq!(
            v("DCGM_FI_DEV_SM_CLOCK_HERTZ"),
            1e6 * v("DCGM_FI_DEV_SM_CLOCK")
        );
        assert_eq!(
            v("DCGM_FI_DEV_MEMORY_CLOCK_HERTZ"),
            1e6 * v("DCGM_FI_DEV_MEM_CLOCK")
        );
        assert_eq!(
            v("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"),
            g.energy_mj as f64
        );
        assert_eq!(
            v("DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL"),
            v("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") / 1000.0
        );
        assert_eq!(v("DCGM_FI_DEV_GPU_TEMP"), f64::from(g.temp_c));
        assert_eq!(v("DCGM_FI_DEV_GPU_TEMP_CELSIUS"), v("DCGM_FI_DEV_GPU_TEMP"));
        assert_eq!(
            v("DCGM_FI_DEV_BOARD_POWER_WATTS"),
            v("DCGM_FI_DEV_POWER_USAGE")
        );
        assert_eq!(
            v("DCGM_FI_DEV_FB_USED_BYTES"),
            1_048_576.0 * v("DCGM_FI_DEV_FB_USED")
        );
        assert_eq!(
            v("DCGM_FI_DEV_FB_CAPACITY_BYTES"),
            1_048_576.0 * v("DCGM_FI_DEV_FB_TOTAL")
        );
        assert_eq!(
            v("DCGM_FI_DEV_MEMORY_UTIL_RATIO"),
            v("DCGM_FI_DEV_MEM_COPY_UTIL") / 100.0
        );
    }
    // The real library's own metadata decided: it has no field 1603, and its legacy SM
    // clock field is an integer in MHz.
    let log = e.stderr();
    assert!(
        log.contains(
            "DCGM_FI_DEV_SM_CLOCK_HERTZ: the library has no field 1603; derived from field 100 \
             (MHz x 10^6)"
        ),
        "{log}"
    );
    assert!(
        log.contains("DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL: the library has no field 1611"),
        "{log}"
    );
}

#[test]
fn the_4_9_0_default_set_on_the_real_library() {
    let csv = repo("etc/default-counters-4.9.0.csv");
    let args = ["-f", csv.to_str().unwrap(), "--emulate-version=4.9.0"];
    let Some((_dir, e)) = on_gpus("units-49", &args) else {
        return;
    };
    let page = e.scrape_until(60, |p| {
        series(p, "DCGM_FI_DEV_GPU_UTIL_RATIO").len() == 2
            && series(p, "DCGM_FI_DEV_SM_CLOCK_HERTZ").len() == 2
    });
    let g = &gpus()[1];
    assert_eq!(
        gpu_value(&page, "DCGM_FI_DEV_SM_CLOCK_HERTZ", "1"),
        f64::from(g.sm_clock_mhz) * 1e6
    );
    assert_eq!(
        gpu_value(&page, "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", "1"),
        g.energy_mj as f64 / 1000.0
    );
    // Field 203 in integer percent on DCGM 4.6, the 0-1 ratio in 4.9.0 mode.
    assert_eq!(
        gpu_value(&page, "DCGM_FI_DEV_GPU_UTIL_RATIO", "1"),
        f64::from(g.gpu_util) / 100.0
    );
    assert_eq!(
        gpu_value(&page, "DCGM_FI_DEV_GPU_TEMP_CELSIUS", "1"),
        f64::from(g.temp_c)
    );
    assert_eq!(
        series(&page, "DCGM_FI_DEV_GPU_TEMP_CELSIUS")[0].label("DCGM_FI_SYSTEM_DRIVER_VERSION"),
        Some(support::nvml_yaml::DRIVER_VERSION)
    );
}

/// GPU 0's value of every DCGM metric on the page, and the series count per metric.
fn observe(e: &Exporter) -> (String, String) {
    let page = e.scrape_until(30, |p| {
        p.iter().any(|s| {
            s.name == "dcgm_exporter_collections_total"
                && s.label("result") == Some("success")
                && s.value >= 2.0
        })
    });
    let mut per_metric: std::collections::BTreeMap<&str, usize> = Default::default();
    for s in page.iter().filter(|s| s.name.starts_with("DCGM_")) {
        *per_metric.entry(&s.name).or_default() += 1;
    }
    let gpu0: std::collections::BTreeMap<&str, f64> = page
        .iter()
        .filter(|s| s.name.starts_with("DCGM_FI_") && s.label("gpu") == Some("0"))
        .map(|s| (s.name.as_str(), s.value))
        .collect();
    (format!("{per_metric:?}"), format!("{gpu0:?}"))
}

#[test]
fn the_4_9_0_page_of_the_simulator_agrees_with_the_real_library() {
    // etc/sim/real-kit.toml is the simulated twin of four default injected GPUs
    // (tests/it/conformance.rs compares the 4.8.x page the same way).
    let csv = repo("etc/default-counters-4.9.0.csv");
    let args = ["-f", csv.to_str().unwrap(), "--emulate-version=4.9.0"];
    let sim = exporter().profile("real-kit.toml").args(&args).start();
    let sim = observe(&sim);
    assert!(
        sim.1
            .contains("\"DCGM_FI_DEV_SM_CLOCK_HERTZ\": 345000000.0"),
        "{}",
        sim.1
    );
    let Some(kit) = kit() else { return };
    let dir = Scratch::new("units-conformance");
    let yaml = dir.yaml(&vec![Gpu::default(); 4]);
    let real = kit.embedded(&yaml).args(&args).start();
    let real = observe(&real);
    assert_eq!(
        sim.0, real.0,
        "series per metric: dcgm-sim, then the real DCGM"
    );
    assert_eq!(
        sim.1, real.1,
        "GPU 0's values: dcgm-sim, then the real DCGM"
    );
}
