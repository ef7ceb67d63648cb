//! MIG GPU instances carry the GPU-level fields of every shipped CSV with their parent
//! GPU's values (what NVIDIA's dashboard reads: temperature, power, clocks), as real DCGM
//! answers them; device-level profiling fields (PCIe bytes) have no value on a MIG slice.

use crate::support::*;
use std::collections::{BTreeMap, BTreeSet};

const GPU_LEVEL: u32 = 1;

/// The metrics of a CSV expected on a MIG instance's series: every non-label DCGM row
/// except profiling fields of GPU level (N/A on MIG), vGPU fields (none on bare metal) and
/// the XID field, which has no sample before an XID (DCGM 4.6, event-driven).
fn expected_on_instances(csv: &str) -> BTreeSet<String> {
    dcgm_exporter::lifecycle::know_derived_metrics();
    let c = dcgm_exporter::config::counters::load(&repo(csv)).unwrap();
    c.all
        .iter()
        .filter(|r| r.prom_type != dcgm_exporter::model::naming::PromType::Label)
        .filter_map(|r| match &r.field {
            dcgm_exporter::config::counters::CounterField::Dcgm(m) => Some((r, m)),
            _ => None,
        })
        .filter(|(_, m)| !((1000..1100).contains(&m.id) && m.entity_level == GPU_LEVEL))
        .filter(|(_, m)| m.entity_level != 2)
        .filter(|(_, m)| {
            m.id != dcgm_sys::fields::by_name("DCGM_FI_DEV_XID_ERRORS")
                .unwrap()
                .id
        })
        .map(|(r, _)| r.name.clone())
        .collect()
}

#[test]
fn gpu_instances_carry_every_gpu_level_field_of_the_shipped_csvs() {
    for csv in [
        "etc/default-counters.csv",
        "etc/dcp-metrics-included.csv",
        "etc/1.x-compatibility-metrics.csv",
    ] {
        let expected = expected_on_instances(csv);
        // g+i: the MIG GPUs whole and their instances, so values can be compared.
        let e = exporter()
            .profile("a100-mixed-mig.toml")
            .args(&["-f", repo(csv).to_str().unwrap(), "-d", "g+i"])
            .start();
        let page = e.scrape_until(20, |p| {
            p.iter().any(|s| s.label("GPU_I_ID").is_some())
                && p.iter()
                    .any(|s| s.label("GPU_I_ID").is_none() && s.label("gpu") == Some("0"))
        });
        let mut on_instance: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
        let mut whole: BTreeMap<(String, String), f64> = BTreeMap::new();
        for s in page
            .iter()
            .filter(|s| s.name.starts_with("DCGM_FI") || s.name.starts_with("dcgm_"))
        {
            if s.name.starts_with("dcgm_exporter_") {
                continue;
            }
            let gpu = s.label("gpu").unwrap_or_default().to_string();
            match s.label("GPU_I_ID") {
                Some(gi) => {
                    on_instance
                        .entry((gpu, gi.to_string()))
                        .or_default()
                        .insert(s.name.clone());
                }
                None => {
                    whole.insert((s.name.clone(), gpu), s.value);
                }
            }
        }
        assert_eq!(
            on_instance.len(),
            7 + 4 + 1 + 2,
            "{csv}: every GPU instance"
        );
        for ((gpu, gi), names) in &on_instance {
            assert_eq!(
                names, &expected,
                "{csv}: GPU {gpu} instance {gi} carries the CSV's GPU-level and instance fields"
            );
        }
        // Inherited values are the parent's own sample (both read in one collection).
        for s in page.iter().filter(|s| s.label("GPU_I_ID").is_some()) {
            // DCGM_EXP_* series (our default's XID and clock-event totals) are computed per
            // instance, not read from DCGM.
            let Some(m) = dcgm_sys::fields::by_name(&s.name) else {
                assert!(s.name.starts_with("DCGM_EXP_"), "{}", s.name);
                continue;
            };
            if m.entity_level != GPU_LEVEL {
                continue;
            }
            let gpu = s.label("gpu").unwrap().to_string();
            let parent = whole.get(&(s.name.clone(), gpu.clone()));
            assert_eq!(parent, Some(&s.value), "{csv}: {} on GPU {gpu}", s.name);
        }
    }
}

#[test]
fn the_default_flex_selector_shows_temperature_and_power_for_mig_gpus() {
    let e = exporter().profile("a100-mixed-mig.toml").start();
    let page = e.scrape();
    for name in [
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
    ] {
        let gpus: BTreeSet<&str> = series(&page, name)
            .iter()
            .filter_map(|s| s.label("gpu"))
            .collect();
        assert_eq!(gpus.len(), 8, "{name} on every GPU, MIG or not: {gpus:?}");
        // All instances of one GPU show that GPU's single reading.
        let mut per_gpu: BTreeMap<&str, BTreeSet<u64>> = BTreeMap::new();
        for s in series(&page, name) {
            per_gpu
                .entry(s.label("gpu").unwrap())
                .or_default()
                .insert(s.value.to_bits());
        }
        assert!(
            per_gpu.values().all(|v| v.len() == 1),
            "{name}: {per_gpu:?}"
        );
    }
    assert!(series(&page, "DCGM_FI_PROF_PCIE_TX_BYTES")
        .iter()
        .all(|s| s.label("GPU_I_ID").is_none()));
}
