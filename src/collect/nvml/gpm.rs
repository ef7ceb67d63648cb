//! The `DCGM_FI_PROF_*` activity ratios from NVML's GPU Performance Monitoring (Hopper and
//! newer), as DCGM's own GPM manager computes them (`DcgmGpmManager.cpp`, DCGM 4.6): the
//! metric `DcgmFieldIdToNvmlGpmMetricId` names for the field, between two samples of the
//! GPU (`nvmlGpmSampleGet`) or of its GPU instance (`nvmlGpmMigSampleGet`), a percent
//! divided by 100, NaN blank. Here the two samples are those of consecutive collections, so
//! the first collection has no value yet. A GPU where `nvmlGpmQueryDeviceSupport` says no
//! has none; where no GPU supports GPM the rows are named at start and left out.

use super::{refused, Answer, Answers, On};
use crate::collect::nvml::table::{Call, Row};
use crate::collect::targets::Target;
use crate::collect::topology::Topology;
use dcgm_sys::nvml_ext::GpmSampler;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

pub(super) struct Gpm {
    sampler: GpmSampler,
    supported: HashSet<u32>,
}

impl Gpm {
    /// `Err` says why no GPU of the node can answer.
    pub(super) fn start(nvml: Arc<Nvml>, topology: &Topology) -> Result<Gpm, String> {
        let sampler = GpmSampler::new(nvml);
        let mut supported = HashSet::new();
        let mut last = None;
        for g in &topology.gpus {
            match sampler.supported(g.id) {
                Ok(true) => {
                    supported.insert(g.id);
                }
                Ok(false) => last = Some(format!("GPU {} does not support GPM", g.id)),
                Err(e) => last = Some(format!("GPU {}: nvmlGpmQueryDeviceSupport: {e}", g.id)),
            }
        }
        if supported.is_empty() {
            return Err(last.unwrap_or_else(|| "no GPU".into()));
        }
        Ok(Gpm { sampler, supported })
    }

    /// Takes one sample of every entity the GPM rows are read on and stores each row's
    /// metric among this collection's answers.
    pub(super) fn sample(&mut self, targets: &[Target], rows: &[&Row], answers: &mut Answers) {
        let mut wanted: BTreeMap<On, Vec<u32>> = BTreeMap::new();
        for t in targets {
            for r in rows.iter().filter(|r| answers_for(t, r)) {
                if let Call::Gpm(m) = r.call {
                    let ids = wanted.entry(On::of(t, r, &answers.gis)).or_default();
                    if !ids.contains(&m) {
                        ids.push(m);
                    }
                }
            }
        }
        for (on, ids) in wanted {
            let (gpu, gi) = match on {
                On::Gpu(g) => (g, None),
                On::Mig(g, gi) => (g, Some(gi)),
                On::System => continue,
            };
            let got = if self.supported.contains(&gpu) {
                self.sampler.next(gpu, gi, &ids)
            } else {
                Err(NvmlError::NotSupported)
            };
            for (i, &m) in ids.iter().enumerate() {
                let answer = match &got {
                    Ok(None) => Ok(Answer::Numbers([f64::NAN; 4])),
                    Ok(Some(values)) => match &values[i] {
                        Ok(v) => Ok(Answer::Numbers([*v, 0.0, 0.0, 0.0])),
                        Err(e) => Err(refused(e)),
                    },
                    Err(e) => Err(refused(e)),
                };
                answers.answers.insert((on, Call::Gpm(m)), answer);
            }
        }
    }
}

/// Whether a GPM row has a value on a target: not a device-level metric (PCIe, NVLink
/// bytes) on a MIG instance, which DCGM's profiling answers per instance only for
/// instance-level metrics.
pub(super) fn answers_for(t: &Target, r: &Row) -> bool {
    use crate::collect::fields::level;
    if t.entity.group != dcgm_sys::EntityGroup::GpuInstance {
        return true;
    }
    dcgm_sys::fields::by_id(r.field)
        .is_some_and(|m| matches!(m.entity_level, level::GPU_I | level::GPU_CI))
}
