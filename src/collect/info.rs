//! Low-cardinality output (`--low-cardinality`): one `DCGM_EXP_*_INFO` series per GPU, MIG
//! instance, NVSwitch and CPU carries the labels that never change while the entity exists
//! (UUID, PCI bus id, model, device, MIG profile, CPU serial, the CSV's label fields), and
//! every other series drops them, keeping the entity ids, the hostname and whatever
//! attribution added. Backends with a label cap (Mimir's 30) and the TSDB's index then hold
//! those strings once per entity instead of once per series; PromQL joins them back
//! (`docs/metrics.md`).

use crate::collect::targets::{Kind, Target};
use crate::config::counters::Counters;
use crate::model::naming::PromType;
use crate::model::{Page, Series};
use dcgm_sys::{Entity, EntityGroup};
use std::collections::{HashMap, HashSet};

/// Identity labels that are attributes of the entity, not its id: dropped from data series.
/// `gpu`, `GPU_I_ID`, `GPU_CI_ID`, `nvswitch`, `nvlink`, `cpu`, `cpucore` and the hostname
/// stay: they are what the join matches on.
pub(crate) const STATIC_LABELS: &[&str] = &[
    "UUID",
    "uuid",
    "pci_bus_id",
    "device",
    "modelName",
    "GPU_I_PROFILE",
    // GPU links name the same attributes in their own spelling.
    "gpu_uuid",
    "model_name",
    "cpu_serial",
];

pub(crate) const GPU_INFO: &str = "DCGM_EXP_GPU_INFO";
pub(crate) const MIG_INFO: &str = "DCGM_EXP_MIG_INFO";
pub(crate) const NVSWITCH_INFO: &str = "DCGM_EXP_NVSWITCH_INFO";
pub(crate) const CPU_INFO: &str = "DCGM_EXP_CPU_INFO";

/// The info families: never stripped.
pub(crate) const INFO_FAMILIES: &[&str] = &[GPU_INFO, MIG_INFO, NVSWITCH_INFO, CPU_INFO];

/// What the info series and the stripping need for one set of watches.
#[derive(Clone, Debug, Default)]
pub(crate) struct LowCardinality {
    /// [`STATIC_LABELS`] and the names of the CSV's label rows.
    strip: HashSet<String>,
}

impl LowCardinality {
    pub(crate) fn new(counters: &Counters) -> LowCardinality {
        let mut strip: HashSet<String> = STATIC_LABELS.iter().map(|s| s.to_string()).collect();
        strip.extend(
            counters
                .all
                .iter()
                .filter(|c| c.prom_type == PromType::Label)
                .map(|c| c.name.clone()),
        );
        LowCardinality { strip }
    }

    /// Removes the static labels from every series but the info series. Runs after
    /// attribution, which finds a GPU's pods by its UUID and device name.
    pub(crate) fn strip(&self, page: &mut Page) {
        page.rewrite(|family, series| {
            if INFO_FAMILIES.contains(&family) {
                return vec![series];
            }
            let kept: Vec<(&str, &str)> = series
                .labels()
                .iter()
                .filter(|l| !self.strip.contains(l.name()))
                .map(|l| (l.name(), l.value()))
                .collect();
            vec![Series::new(&kept, series.value)]
        });
    }
}

fn family(kind: Kind, entity: Entity) -> Option<(&'static str, &'static str)> {
    match (kind, entity.group) {
        (Kind::Gpu, EntityGroup::Gpu) => Some((
            GPU_INFO,
            "GPU attributes (UUID, PCI bus id, model, device, label fields); value 1.",
        )),
        (Kind::Gpu, EntityGroup::GpuInstance | EntityGroup::ComputeInstance) => Some((
            MIG_INFO,
            "MIG instance attributes (profile, parent GPU's UUID and model); value 1.",
        )),
        (Kind::Switch, _) => Some((NVSWITCH_INFO, "NVSwitch attributes; value 1.")),
        (Kind::Cpu, _) => Some((CPU_INFO, "CPU attributes (serial); value 1.")),
        _ => None,
    }
}

/// Adds one info series per target of `kind`, with its full identity labels and label
/// fields (`csv`, read this collection). A GPU exported only through its MIG instances gets
/// its `DCGM_EXP_GPU_INFO` too: its own series (health action, links) join on it.
pub(crate) fn add_info(
    page: &mut Page,
    kind: Kind,
    targets: &[Target],
    csv: &HashMap<Entity, Vec<(String, String)>>,
) {
    let mut gpus_done = HashSet::new();
    for t in targets {
        let Some((name, help)) = family(kind, t.entity) else {
            continue;
        };
        let labels = t.labels_with(csv);
        page.add(name, help, PromType::Gauge, &labels, 1.0);
        let Some(gpu) = t.gpu.filter(|_| kind == Kind::Gpu) else {
            continue;
        };
        if gpus_done.insert(gpu) && name == MIG_INFO {
            let parent: Vec<(&str, &str)> = labels
                .into_iter()
                .filter(|(k, _)| !matches!(*k, "GPU_I_PROFILE" | "GPU_I_ID" | "GPU_CI_ID"))
                .collect();
            let (name, help) = family(kind, Entity::gpu(gpu)).expect("a GPU has an info family");
            page.add(name, help, PromType::Gauge, &parent, 1.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page_with(family: &str, labels: &[(&str, &str)]) -> Page {
        let mut p = Page::default();
        p.add(family, "h", PromType::Gauge, labels, 1.0);
        p
    }

    fn labels_of(p: &Page, family: &str) -> Vec<String> {
        p.families()
            .filter(|f| f.name() == family)
            .flat_map(|f| f.series().collect::<Vec<_>>())
            .flat_map(|s| s.labels().map(|(k, _)| k.to_string()).collect::<Vec<_>>())
            .collect()
    }

    #[test]
    fn strip_keeps_ids_hostname_and_pod_labels_and_leaves_info_series_whole() {
        let full = [
            ("gpu", "0"),
            ("UUID", "GPU-1"),
            ("pci_bus_id", "00000000:01:00.0"),
            ("device", "nvidia0"),
            ("modelName", "H100"),
            ("GPU_I_PROFILE", "1g.10gb"),
            ("GPU_I_ID", "7"),
            ("Hostname", "node"),
            ("DCGM_FI_DRIVER_VERSION", "550"),
            ("pod", "p"),
            ("namespace", "n"),
        ];
        let mut p = page_with("DCGM_FI_DEV_GPU_TEMP", &full);
        p.append(page_with(MIG_INFO, &full));
        let counters =
            crate::config::counters::parse_str("t.csv", "DCGM_FI_DRIVER_VERSION, label, driver\n")
                .unwrap();
        LowCardinality::new(&counters).strip(&mut p);
        assert_eq!(
            labels_of(&p, "DCGM_FI_DEV_GPU_TEMP"),
            ["gpu", "GPU_I_ID", "Hostname", "pod", "namespace"]
        );
        assert_eq!(labels_of(&p, MIG_INFO).len(), full.len());
    }
}
